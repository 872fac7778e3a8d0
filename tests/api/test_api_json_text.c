/*
 * tests/api/test_api_json_text.c — api_write_json, the text of every
 * jansson-built reply: what json_dumps(JSON_COMPACT) writes, but each real
 * as its shortest round-trip text (".0" kept on a whole one); a scale 0.1 reads
 * "0.1", not jansson's "0.10000000000000001".
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/codec/write.h"

static char *text_of(json_t *v)
{
    struct api_buf b;
    size_t len;
    api_buf_init(&b, 1 << 20);
    CHECK(api_write_json(&b, v));
    char *t = api_buf_take(&b, &len);
    CHECK(t && strlen(t) == len);
    json_decref(v);
    return t;
}

TEST(reals_shortest_the_rest_as_jansson)
{
    json_t *v = json_pack("{s:f,s:f,s:[i,f,s,b,b,n],s:{}}", "scale", 0.1, "r",
                          0.7071067811865475, "list", (json_int_t)-42, -0.0, "q\"\\\n",
                          1, 0, "o");
    json_object_set_new(v, "nul", json_stringn("a\0b", 3));
    json_object_setn_new(v, "k\0y", 3, json_true());
    json_object_set_new(v, "big", json_real(1e300));
    json_object_set_new(v, "tiny", json_real(DBL_TRUE_MIN));
    json_object_set_new(v, "whole", json_real(600));
    json_object_set_new(v, "wide", json_real(3.4e19));
    char *t = text_of(v);
    CHECK_STR(t, "{\"scale\":0.1,\"r\":0.7071067811865475,\"list\":[-42,-0.0,\"q\\\"\\\\\\u000a\","
                 "true,false,null],\"o\":{},\"nul\":\"a\\u0000b\",\"k\\u0000y\":true,\"big\":1e+300,"
                 "\"tiny\":5e-324,\"whole\":600.0,\"wide\":34000000000000000000.0}");
    free(t);
}

/* Whatever it writes reads back as the same tree. */
TEST(text_reads_back_equal)
{
    uint64_t rng = 11;
    for (int round = 0; round < 200; round++) {
        json_t *a = json_array();
        for (int i = 0; i < 20; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            double x;
            memcpy(&x, &rng, sizeof x);
            if (isfinite(x))
                json_array_append_new(a, json_real(x));
            json_array_append_new(a, json_integer((json_int_t)(rng >> 1)));
        }
        json_t *copy = json_deep_copy(a);
        char *t = text_of(a);
        json_t *back = json_loads(t, 0, NULL);
        CHECK(back && json_equal(back, copy));
        json_decref(back);
        json_decref(copy);
        free(t);
    }
}

int main(void)
{
    RUN(reals_shortest_the_rest_as_jansson);
    RUN(text_reads_back_equal);
    TEST_MAIN_END();
}
