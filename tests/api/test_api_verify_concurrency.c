/*
 * tests/api/test_api_verify_concurrency.c — a POST /v1/verify batch whose
 * heads run as pieces of a helper pool (as the server's workers lend
 * theirs): the report equals, byte for byte but elapsed_us, the one the
 * calling thread computes alone, for several pool sizes and rounds. Run
 * under ThreadSanitizer by make tsan (its name holds "concurrency").
 */
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "core/attn.h"
#include "core/pool.h"

static struct api_ctx ctx;

/* 2 batch elements x 3 query heads on 1 kv head, per-head sinks and q bias,
 * positions per element, float32. */
static const char BODY[] =
    "{\"q\":[[[[1,0.5],[0.25,1]],[[0,1],[1,1]],[[-1,0.5],[0.5,0.5]]],"
    "[[[0.5,-1],[1,0]],[[1,1],[0,-1]],[[0.25,0.75],[1,-0.5]]]],"
    "\"k\":[[[[1,0],[0,1],[-1,0.5]]],[[[0.5,0.5],[1,-1],[0,1]]]],"
    "\"v\":[[[[1],[2],[3]]],[[[4],[5],[6]]]],"
    "\"bias\":{\"q\":[[0,1],[1,0],[0.5,0.5]],\"k\":[3,-2]},"
    "\"positions\":{\"q\":[[1,2],[0,2]]},\"softmax\":\"sink\",\"sink_logit\":[0.5,-1,0],"
    "\"dtype\":\"float32\"}";

/* The answer's body up to "elapsed_us", malloc'd; *status its status. */
static char *answer(struct attn_ws *ws, int *status)
{
    static const char *const hdrs[] = {"Content-Type", "application/json", NULL};
    struct api_request req;
    struct api_response r;
    char *s = NULL;

    memset(&req, 0, sizeof req);
    req.method = "POST";
    req.path = "/v1/verify";
    req.header = t_header_fn;
    req.header_arg = (void *)hdrs;
    req.body = BODY;
    req.body_len = strlen(BODY);
    req.ws = ws;
    api_handle(&ctx, &req, &r);
    *status = r.status;
    const char *cut = r.body ? strstr(r.body, "\"elapsed_us\"") : NULL;
    if (cut && (s = malloc((size_t)(cut - r.body) + 1))) {
        memcpy(s, r.body, (size_t)(cut - r.body));
        s[cut - r.body] = '\0';
    }
    api_response_free(&r);
    return s;
}

TEST(concurrency_pool_heads_equal_serial)
{
    struct attn_ws *alone = attn_ws_new();
    int st;
    char *want = answer(alone, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(want && strstr(want, "\"rank\":4") && strstr(want, "\"passed\":true"));
    for (size_t helpers = 1; helpers <= 3; helpers++) {
        struct attn_pool *pool = attn_pool_new(helpers, NULL, NULL);
        struct attn_ws *ws = attn_ws_new();
        attn_ws_set_pool(ws, pool);
        for (int round = 0; round < 4; round++) {
            char *got = answer(ws, &st);
            CHECK_EQ_INT(st, 200);
            CHECK(got && want && strcmp(got, want) == 0);
            free(got);
        }
        attn_ws_free(ws);
        attn_pool_free(pool);
    }
    free(want);
    attn_ws_free(alone);
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(concurrency_pool_heads_equal_serial);
    TEST_MAIN_END();
}
