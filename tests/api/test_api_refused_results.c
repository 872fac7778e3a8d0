/*
 * tests/api/test_api_refused_results.c — results a request cannot be
 * answered with, in-process: a qk that overflowed (finite inputs whose q·k
 * is past float64's or float32's range) and a float16 session's scores past
 * 65504 are 422 non_finite at the value's JSON pointer on /v1/attention,
 * session attention and OIP v2, never null; and a session's attention
 * refused that way appends nothing (its length, its rows and its next
 * answer are as if the request had not come), on /v1 and on a v2 sequence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "core/store.h"

static struct api_ctx ctx;

/* POST body to path: its status, and the error's code and path (or "")
 * into code[64] and ptr[128] when it is an error. */
static int post(const char *path, const char *body, char *code, char *ptr)
{
    struct api_response r;
    t_call(&ctx, "POST", path, body, &r);
    int st = r.status;
    snprintf(code, 64, "%s", st >= 400 ? t_err_code(&r) : "");
    snprintf(ptr, 128, "%.127s", st >= 400 ? t_err_path(&r) : "");
    if (st >= 400 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", st, (int)r.body_len, r.body);
    api_response_free(&r);
    return st;
}

/* A new session of body's settings: its id into id[128]. */
static void new_session(const char *body, char *id)
{
    struct api_response r;
    t_call(&ctx, "POST", "/v1/sessions", body, &r);
    CHECK_EQ_INT(r.status, 201);
    json_t *j = t_json(&r);
    snprintf(id, 128, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_response_free(&r);
}

static long long session_length(const char *id)
{
    char path[200];
    struct api_response r;
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    t_call(&ctx, "GET", path, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = t_json(&r);
    long long n = json_integer_value(json_object_get(j, "length"));
    json_decref(j);
    api_response_free(&r);
    return n;
}

#define BIG "1e308"

TEST(overflowed_qk_is_422_at_its_pointer)
{
    char code[64], ptr[128];
    /* the second key's product overflows; the first's does not */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":[[1e200,1e200]],\"k\":[[1,1],[1e200,1e200]],"
                      "\"v\":[[1],[2]],\"return\":[\"qk\"]}", code, ptr), 422);
    CHECK_STR(code, "non_finite");
    CHECK_STR(ptr, "/qk/0/1");
    /* float32: 3e38² */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":[[3e38]],\"k\":[[3e38]],\"v\":[[1]],"
                      "\"dtype\":\"float32\",\"return\":[\"qk\"]}", code, ptr), 422);
    CHECK_STR(ptr, "/qk/0/0");
    /* 3-D q: head 1's row 0 */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":[[[1]],[[" BIG "]]],\"k\":[[[" BIG "]]],"
                      "\"v\":[[[1]]],\"return\":[\"qk\"]}", code, ptr), 422);
    CHECK_STR(ptr, "/qk/1/0/0");
    /* base64 answers have no element pointer */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":[[" BIG "]],\"k\":[[" BIG "]],\"v\":[[1]],"
                      "\"encoding\":\"base64\",\"return\":[\"qk\"]}", code, ptr), 422);
    CHECK_STR(code, "non_finite");
    /* finite products still come back */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":[[1e150]],\"k\":[[1e150]],\"v\":[[1]],"
                      "\"return\":[\"qk\"]}", code, ptr), 200);
    /* OIP v2: its errors are 400, the code in the message */
    CHECK_EQ_INT(post("/v2/models/attention/infer", "{\"inputs\":["
                      "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[" BIG "]},"
                      "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[" BIG "]},"
                      "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]}],"
                      "\"outputs\":[{\"name\":\"qk\"}]}", code, ptr), 400);
}

/* A float32 or float64 pass that overflows (finite inputs) is 422
 * non_finite at the input to blame, not path null: the query row whose
 * score overflows, a row a bias pushes past the range, the attn_bias entry
 * that does, the v row that makes an output overflow; OIP v2 names the
 * input. */
TEST(overflowing_pass_names_its_input)
{
    static const char *const cases[][2] = {
        /* query row 1 of a 2-D q (row 0's score is finite) */
        {"{\"q\":[[1],[1e200]],\"k\":[[1e200]],\"v\":[[1]]}", "/q/1"},
        {"{\"q\":[[1],[1e30]],\"k\":[[1e30]],\"v\":[[1]],\"dtype\":\"float32\"}", "/q/1"},
        /* head 1 of a 3-D q, grouped onto one kv head; the output alone */
        {"{\"q\":[[[1]],[[1e30]]],\"k\":[[[1e30]]],\"v\":[[[1]]],\"dtype\":\"float32\","
         "\"return\":[\"output\"]}", "/q/1/0"},
        /* batch element 1 */
        {"{\"q\":[[[[1]]],[[[1e30]]]],\"k\":[[[[1]]],[[[1e30]]]],\"v\":[[[[1]]],[[[1]]]],"
         "\"dtype\":\"float32\"}", "/q/1/0/0"},
        /* a masked key's product does not count: the allowed one does */
        {"{\"q\":[[1e30],[1e30]],\"k\":[[1e30],[1]],\"v\":[[1],[1]],\"dtype\":\"float32\","
         "\"mask\":[[false,true],[true,true]]}", "/q/1"},
        /* k row 1 past the range once its bias is added */
        {"{\"q\":[[1]],\"k\":[[1],[3e38]],\"v\":[[1],[1]],\"bias\":{\"k\":[3e38]},"
         "\"dtype\":\"float32\"}", "/k/1"},
        /* a finite score (3e38) plus its attn_bias entry */
        {"{\"q\":[[3e19]],\"k\":[[1e19],[1e19]],\"v\":[[1],[1]],\"scale\":1,"
         "\"attn_bias\":[[0,3e38]],\"dtype\":\"float32\"}", "/attn_bias/0/1"},
        /* one attn_bias for both heads: head 1's score overflows with it, the
         * pointer is where the entry was given */
        {"{\"q\":[[[1]],[[3e19]]],\"k\":[[[1e19],[1e19]]],\"v\":[[[1],[1]]],\"scale\":1,"
         "\"attn_bias\":[[[0,3e38]]],\"dtype\":\"float32\"}", "/attn_bias/0/0/1"},
        /* every score finite: the output of v rows near the range */
        {"{\"q\":[[0]],\"k\":[[0],[0],[0],[0]],\"v\":[[1],[3.4e38],[3.4e38],[3.4e38]],"
         "\"dtype\":\"float32\"}", "/v/1"}};
    char code[64], ptr[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(post("/v1/attention", cases[i][0], code, ptr), 422);
        CHECK_STR(code, "non_finite");
        CHECK_STR(ptr, cases[i][1]);
    }
    /* base64 q: no row pointer, the array's; q = {1e200} (little-endian float64 bits 0x6974e718d7d7625a) */
    CHECK_EQ_INT(post("/v1/attention", "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\","
                      "\"data\":\"WmLX1xjndGk=\"},\"k\":[[1e200]],\"v\":[[1]]}", code, ptr), 422);
    CHECK_STR(ptr, "/q/data");
    /* OIP v2: the input (k is inputs/1, q inputs/0 is finite against it) */
    struct api_response r;
    t_call(&ctx, "POST", "/v2/models/attention/infer", "{\"inputs\":["
           "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
           "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[2,1],\"data\":[1,3e38]},"
           "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[2,1],\"data\":[1,1]},"
           "{\"name\":\"bias_k\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[3e38]}]}", &r);
    CHECK_EQ_INT(r.status, 400);
    const char *want = "non_finite at /inputs/1]";
    CHECK(r.body && memmem(r.body, r.body_len, want, strlen(want)));
    if (r.body && !memmem(r.body, r.body_len, want, strlen(want)))
        printf("  %.*s\n", (int)r.body_len, r.body);
    api_response_free(&r);
}

/* POST body to path: its status; the error's path and message into
 * ptr[128] and msg[512] ("" when it is not an error). */
static int post_msg(const char *path, const char *body, char *ptr, char *msg)
{
    struct api_response r;
    t_call(&ctx, "POST", path, body, &r);
    int st = r.status;
    json_t *j = st >= 400 ? t_json(&r) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *m = json_is_string(e) ? json_string_value(e)
                                      : json_string_value(json_object_get(e, "message"));
    snprintf(ptr, 128, "%.127s", st >= 400 && !json_is_string(e) ? t_err_path(&r) : "");
    snprintf(msg, 512, "%.511s", m ? m : "");
    if (st >= 400 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", st, (int)r.body_len, r.body);
    json_decref(j);
    api_response_free(&r);
    return st;
}

/* q·k past the range before a scale below 1 brings the score back: the
 * pass forms q·k first and stops there; the answer is that query row (it
 * was path null, the scan looking only at scale·q·k), in float32 and
 * float64, and on the output-only pass of more rows (the fused kernels'). */
TEST(an_overflowing_qk_under_a_small_scale_names_its_query_row)
{
    static const char *const cases[][3] = {
        {"{\"q\":[[1],[1e20]],\"k\":[[1e20]],\"v\":[[1]],\"dtype\":\"float32\","
         "\"scale\":1e-10}", "/q/1", "q·k of query row 1 with key 0 is 1e+40, past float32"},
        {"{\"q\":[[1],[1e200]],\"k\":[[1e200]],\"v\":[[1]],\"scale\":1e-300}", "/q/1",
         "q·k of query row 1 with key 0 is 1e+400, past float64"},
        {"{\"q\":[[1],[1],[1],[1],[1],[1],[1e20],[1]],\"k\":[[1e20],[0]],\"v\":[[1],[2]],"
         "\"dtype\":\"float32\",\"scale\":1e-10,\"return\":[\"output\"]}", "/q/6",
         "q·k of query row 6 with key 0"}};
    char ptr[128], msg[512];
    /* The scan forms q·k in long double: 1e400 needs its range past
     * double's, which valgrind (x87 at double width) does not give. There
     * the float64 row is still found, by its score. */
    volatile long double big = 1e200, sq = big * big;
    bool wide = sq / big == big;
    if (!wide)
        printf("    long double has double's range here: the float64 case names its row only\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *want = wide || i != 1 ? cases[i][2] : "query row 1 with key 0";
        CHECK_EQ_INT(post_msg("/v1/attention", cases[i][0], ptr, msg), 422);
        CHECK_STR(ptr, cases[i][1]);
        CHECK(strstr(msg, want) != NULL);
        if (!strstr(msg, want))
            printf("  %s\n", msg);
    }
}

/* The scan forms each float64 q·k scaled by powers of two, so products
 * past double's range cancel as they do exactly: key 0's q·k is 1e400 -
 * 1e400 = 0 and key 1's 1e400 + 1 is the one past the range. Summed in
 * long double where that has double's range (valgrind, and any ABI whose
 * long double is double), key 0's sum was inf - inf and was blamed. */
TEST(a_float64_score_that_cancels_is_not_blamed)
{
    char ptr[128], msg[512];
    CHECK_EQ_INT(post_msg("/v1/attention",
                          "{\"q\":[[1e200,1e200]],\"k\":[[1e200,-1e200],[1e200,1e-200]],"
                          "\"v\":[[1],[2]]}", ptr, msg), 422);
    CHECK_STR(ptr, "/q/0");
    CHECK(strstr(msg, "query row 0 with key 1 ") != NULL);
    if (!strstr(msg, "query row 0 with key 1 "))
        printf("  %s\n", msg);
}

/* empty_rows "error": 422 empty_row at the first query row with no key,
 * the message saying which row of which head and what took its keys away
 * (masked, outside the window, another segment, causal), not path null;
 * /q/data for base64, the input on OIP v2 and a session's q. */
TEST(empty_row_names_its_query_row)
{
    static const char *const cases[][3] = {
        /* row 1 of a 2-D q: every key masked */
        {"{\"q\":[[1],[1]],\"k\":[[1],[1],[1]],\"v\":[[1],[1],[1]],"
         "\"mask\":[[true,false,false],[false,false,false]]}", "/q/1", "3 masked"},
        /* head 1 of a 3-D q, one key masked, the other -inf in attn_bias */
        {"{\"q\":[[[1]],[[1]]],\"k\":[[[1],[1]]],\"v\":[[[1],[1]]],"
         "\"mask\":[[[true,true]],[[false,true]]],\"attn_bias\":[[[0,0]],[[0,null]]]}",
         "/q/1/0", "row 0 of head 1"},
        /* batch element 1, head 0: its query sits in a segment without keys */
        {"{\"q\":[[[[1]]],[[[1]]]],\"k\":[[[[1]]],[[[1]]]],\"v\":[[[[1]]],[[[1]]]],"
         "\"segments\":{\"q\":[[0],[1]],\"k\":[[0],[0]]}}", "/q/1/0/0",
         "1 in another segment"},
        /* a window that holds no key of row 0 (query at position 3, keys 0, 1) */
        {"{\"q\":[[1]],\"k\":[[1],[1]],\"v\":[[1],[1]],"
         "\"positions\":{\"q\":[3],\"k\":[0,1]},\"window\":{\"left\":1}}", "/q/0",
         "2 outside its window"},
        /* top-left causal: query 0 at position 0, keys at 1 and 2 */
        {"{\"q\":[[1]],\"k\":[[1],[1]],\"v\":[[1],[1]],\"causal\":\"top_left\","
         "\"positions\":{\"q\":[0],\"k\":[1,2]}}", "/q/0", "2 after it (causal)"}};
    char ptr[128], msg[512], body[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "%.*s,\"empty_rows\":\"error\"}",
                 (int)strlen(cases[i][0]) - 1, cases[i][0]);
        CHECK_EQ_INT(post_msg("/v1/attention", body, ptr, msg), 422);
        CHECK_STR(ptr, cases[i][1]);
        CHECK(strstr(msg, cases[i][2]) != NULL);
        if (!strstr(msg, cases[i][2]))
            printf("  case %zu: %s\n", i, msg);
    }
    /* heads: head 0's row 0 is empty but not computed, head 1's row 1 is */
    CHECK_EQ_INT(post_msg("/v1/attention", "{\"q\":[[[1],[1]],[[1],[1]]],\"k\":[[[1]]],"
                          "\"v\":[[[1]]],\"mask\":[[[false],[true]],[[true],[false]]],"
                          "\"heads\":[1],\"empty_rows\":\"error\"}", ptr, msg), 422);
    CHECK_STR(ptr, "/q/1/1");
    CHECK(strstr(msg, "of its 1 key, 1 masked") != NULL);
    /* base64 q (one float64 1.0): the array, the row in the message */
    CHECK_EQ_INT(post_msg("/v1/attention", "{\"q\":{\"shape\":[2,1],\"dtype\":\"float64\","
                          "\"data\":\"AAAAAAAA8D8AAAAAAADwPw==\"},\"k\":[[1]],\"v\":[[1]],"
                          "\"mask\":[[true],[false]],\"empty_rows\":\"error\"}", ptr, msg),
                 422);
    CHECK_STR(ptr, "/q/data");
    CHECK(strstr(msg, "query row 1 ") != NULL);
    /* OIP v2: the q input, the row in the message */
    CHECK_EQ_INT(post_msg("/v2/models/attention/infer", "{\"parameters\":{\"empty_rows\":"
                          "\"error\"},\"inputs\":["
                          "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[1,1]},"
                          "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[2,1],"
                          "\"data\":[true,false]}]}", ptr, msg), 400);
    CHECK(strstr(msg, "query row 1 ") && strstr(msg, "1 masked") &&
          strstr(msg, "[empty_row at /inputs/1]"));
    /* a v2 sequence's start: its pass over the sequence's rows */
    CHECK_EQ_INT(post_msg("/v2/models/attention/infer", "{\"parameters\":{\"sequence_id\":"
                          "\"empty\",\"sequence_start\":true,\"empty_rows\":\"error\"},"
                          "\"inputs\":["
                          "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[1,1]},"
                          "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[1,1]},"
                          "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,2],"
                          "\"data\":[false,false]}]}", ptr, msg), 400);
    CHECK(strstr(msg, "query row 0 ") && strstr(msg, "sequence") && strstr(msg, "2 masked") &&
          strstr(msg, "[empty_row at /inputs/0]"));
    /* a session: the request's q, the cached rows named as the keys */
    char id[128], path[200];
    new_session("{\"d_k\":1,\"d_v\":1,\"heads\":2}", id);
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
    CHECK_EQ_INT(post_msg(path, "{\"q\":[[[1]],[[1]]],\"k\":[[[1],[1]],[[1],[1]]],"
                          "\"v\":[[[1],[1]],[[1],[1]]],\"mask\":[[[true,true]],[[false,false]]],"
                          "\"empty_rows\":\"error\"}", ptr, msg), 422);
    CHECK_STR(ptr, "/q/1/0");
    CHECK(strstr(msg, "row 0 of head 1") && strstr(msg, "session") &&
          strstr(msg, "2 masked"));
    CHECK_EQ_INT(session_length(id), 0);
}

/* A session's attention whose pass overflows names the input to blame:
 * the request's query row, attn_bias entry or appended v row by pointer,
 * a row the session held already by its cache position (path ""); the
 * append is rolled back. A v2 sequence's step names its input. */
TEST(overflowing_session_pass_names_its_input)
{
    static const struct {
        const char *create, *rows, *att, *ptr, *msg;
    } cases[] = {
        /* query row 1's score with the cached key */
        {"{\"d_k\":1,\"d_v\":1}", "{\"k\":[[1e200]],\"v\":[[1]]}",
         "{\"q\":[[1],[1e200]]}", "/q/1", "query row 1 with key 0"},
        /* 3-D q, head 1, against a key the request appends */
        {"{\"d_k\":1,\"d_v\":1,\"heads\":2,\"kv_heads\":1}", "{\"k\":[[1]],\"v\":[[1]]}",
         "{\"q\":[[[1]],[[1e200]]],\"k\":[[1e200]],\"v\":[[1]]}", "/q/1/0",
         "query row 0 of head 1 with key 1"},
        /* attn_bias takes a finite score past the range */
        {"{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\",\"scale\":1}",
         "{\"k\":[[1e19],[1e19]],\"v\":[[1],[1]]}",
         "{\"q\":[[3e19]],\"attn_bias\":[[0,3e38]]}", "/attn_bias/0/1",
         "once attn_bias is added"},
        /* the appended v row holds the largest value */
        {"{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\"}", "{\"k\":[[0],[0]],\"v\":[[1],[3e38]]}",
         "{\"q\":[[0]],\"k\":[[0],[0]],\"v\":[[1],[3.4e38]]}", "/v/1", "v row 1 holds"},
        /* a v row the session held already: its cache position */
        {"{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\"}",
         "{\"k\":[[0],[0]],\"v\":[[1],[3.4e38]]}",
         "{\"q\":[[0]],\"k\":[[0],[0]],\"v\":[[1],[3e38]]}", "",
         "v row at cache position 1 holds"},
        /* head 1's ALiBi slope, fixed at the create: -2e38·2 past FLT_MAX
         * for the query at position 2 and the key at 0 */
        {"{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\",\"heads\":2,\"kv_heads\":1,"
         "\"alibi\":{\"slopes\":[1,2e38]}}", "{\"k\":[[0],[0]],\"v\":[[1],[1]]}",
         "{\"q\":[[[0]],[[0]]],\"k\":[[0]],\"v\":[[1]]}", "",
         "query row 0 of head 1 with key 0 is not finite in float32 once ALiBi is added "
         "(-slope·|P_q - P_k| = -4e+38 with head 1's slope 2e+38, fixed when the session "
         "was created)"}};
    char id[128], path[200], ptr[128], msg[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        new_session(cases[i].create, id);
        snprintf(path, sizeof path, "/v1/sessions/%s/kv", id);
        CHECK_EQ_INT(post_msg(path, cases[i].rows, ptr, msg), 200);
        long long len = session_length(id);
        snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
        CHECK_EQ_INT(post_msg(path, cases[i].att, ptr, msg), 422);
        CHECK_STR(ptr, cases[i].ptr);
        CHECK(strstr(msg, cases[i].msg) != NULL);
        if (!strstr(msg, cases[i].msg))
            printf("  case %zu: %s\n", i, msg);
        CHECK_EQ_INT(session_length(id), len);
    }
    /* a rolling session that let its first rows go: the cache position
     * counts every row appended (row 129, held as the second) */
    static char rows[4096];
    int k = snprintf(rows, sizeof rows, "{\"k\":[");
    for (int r = 0; r < 130; r++)
        k += snprintf(rows + k, sizeof rows - (size_t)k, "%s[0]", r ? "," : "");
    k += snprintf(rows + k, sizeof rows - (size_t)k, "],\"v\":[");
    for (int r = 0; r < 130; r++)
        k += snprintf(rows + k, sizeof rows - (size_t)k, "%s[%s]", r ? "," : "",
                      r == 129 ? "3.4e38" : "1");
    snprintf(rows + k, sizeof rows - (size_t)k, "]}");
    new_session("{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\",\"window\":{\"left\":2}}", id);
    snprintf(path, sizeof path, "/v1/sessions/%s/kv", id);
    CHECK_EQ_INT(post_msg(path, rows, ptr, msg), 200);
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
    CHECK_EQ_INT(post_msg(path, "{\"q\":[[0]],\"k\":[[0]],\"v\":[[3e38]]}", ptr, msg), 422);
    CHECK_STR(ptr, "");
    CHECK(strstr(msg, "v row at cache position 129 holds") != NULL);
    CHECK_EQ_INT(session_length(id), 130);
    /* a v2 sequence's step: its q input */
    const char *infer = "/v2/models/attention/infer";
    CHECK_EQ_INT(post_msg(infer, "{\"parameters\":{\"sequence_id\":\"big\","
                          "\"sequence_start\":true},\"inputs\":["
                          "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1e200]},"
                          "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]}]}",
                          ptr, msg), 200);
    CHECK_EQ_INT(post_msg(infer, "{\"parameters\":{\"sequence_id\":\"big\"},\"inputs\":["
                          "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],"
                          "\"data\":[1e200]}]}", ptr, msg), 400);
    CHECK(strstr(msg, "query row 0 with key 0") && strstr(msg, "[non_finite at /inputs/0]"));
    if (!strstr(msg, "[non_finite at /inputs/0]"))
        printf("  v2: %s\n", msg);
    /* a v2 sequence's ALiBi: at its start, the parameter the start sent;
     * on a later step, fixed since, the request as a whole */
    static const char *const start =
        "{\"parameters\":{\"sequence_id\":\"alibi\",\"sequence_start\":true,\"alibi\":"
        "{\"slopes\":[2e38]}},\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[0]},"
        "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[%d,1],\"data\":[%s]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[%d,1],\"data\":[%s]}]}";
    char body[1024];
    snprintf(body, sizeof body, start, 3, "0,0,0", 3, "1,1,1");
    CHECK_EQ_INT(post_msg(infer, body, ptr, msg), 400);
    CHECK(strstr(msg, "head 0's slope 2e+38)") &&
          strstr(msg, "[non_finite at /parameters/alibi/slopes/0]"));
    if (!strstr(msg, "[non_finite at /parameters/alibi/slopes/0]"))
        printf("  v2 start: %s\n", msg);
    snprintf(body, sizeof body, start, 1, "0", 1, "1");
    CHECK_EQ_INT(post_msg(infer, body, ptr, msg), 200);
    CHECK_EQ_INT(post_msg(infer, "{\"parameters\":{\"sequence_id\":\"alibi\"},\"inputs\":["
                          "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[0]},"
                          "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[2,1],"
                          "\"data\":[0,0]},"
                          "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[2,1],"
                          "\"data\":[1,1]}]}", ptr, msg), 400);
    CHECK(strstr(msg, "fixed when the session was created") &&
          strstr(msg, "[non_finite]"));
    if (!strstr(msg, "[non_finite]"))
        printf("  v2 step: %s\n", msg);
}

/* A score that ALiBi takes past the range (a large given slope times the
 * distance) is 422 at that head's slope, and the message says so: not at
 * the query row, whose scale·q·k is small. */
TEST(an_alibi_overflow_names_its_slope)
{
    static const char *const cases[][3] = {
        /* float32: -1e37·50 past FLT_MAX; query row 1 at position 50 */
        {"{\"q\":[[1,0],[1,1]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]],\"dtype\":\"float32\","
         "\"alibi\":{\"slopes\":[1e37]},\"positions\":{\"q\":[0,50],\"k\":[0,1]}}",
         "/alibi/slopes/0", "query row 1 with key 0 is not finite in float32 once ALiBi"},
        /* float64, head 1's slope of two (its term, -5e+308, is past a
         * double: valgrind, whose long double is a double, prints -inf) */
        {"{\"q\":[[[1,0]],[[1,1]]],\"k\":[[[1,0],[0,1]]],\"v\":[[[1],[2]]],"
         "\"alibi\":{\"slopes\":[1,1e307]},\"positions\":{\"q\":[50],\"k\":[0,1]}}",
         "/alibi/slopes/1", " with head 1's slope 1e+307"}};
    char ptr[128], msg[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(post_msg("/v1/attention", cases[i][0], ptr, msg), 422);
        CHECK_STR(ptr, cases[i][1]);
        CHECK(strstr(msg, cases[i][2]) != NULL);
    }
    /* OIP v2: the slope in its parameters, in the message's bracket */
    CHECK_EQ_INT(post_msg("/v2/models/attention/infer", "{\"parameters\":{\"alibi\":"
                          "{\"slopes\":[1e37]}},\"inputs\":["
                          "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
                          "{\"name\":\"positions_q\",\"datatype\":\"INT64\",\"shape\":[1],"
                          "\"data\":[50]}]}",
                          ptr, msg), 400);
    CHECK(strstr(msg, "ALiBi") && strstr(msg, "[non_finite at /parameters/alibi/slopes/0]"));
    if (!strstr(msg, "[non_finite at /parameters/alibi/slopes/0]"))
        printf("  v2: %s\n", msg);
}

/* A session's attention refused for its results: 422, and the append is
 * rolled back (length, then the next answer as without it). */
static void refused_appends_nothing(const char *create, const char *bad, const char *want_ptr)
{
    char id[128], path[200], code[64], ptr[128];
    new_session(create, id);
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
    CHECK_EQ_INT(post(path, "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1,2]]}", code, ptr), 200);
    CHECK_EQ_INT(post(path, bad, code, ptr), 422);
    CHECK_STR(code, "non_finite");
    CHECK_STR(ptr, want_ptr);
    CHECK_EQ_INT((int)session_length(id), 1);
    /* the next append is row 1, and sees only row 0 before it */
    struct api_response r;
    t_call(&ctx, "POST", path, "{\"q\":[[0,1]],\"k\":[[0,1]],\"v\":[[3,4]],"
                               "\"return\":[\"weights\"]}", &r);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = t_json(&r);
    CHECK_EQ_INT((int)json_array_size(json_array_get(json_object_get(j, "weights"), 0)), 2);
    json_decref(j);
    api_response_free(&r);
    CHECK_EQ_INT((int)session_length(id), 2);
}

TEST(a_refused_session_attention_appends_nothing)
{
    refused_appends_nothing("{\"d_k\":2,\"d_v\":2}",
                            "{\"q\":[[" BIG "," BIG "]],\"k\":[[" BIG "," BIG "]],"
                            "\"v\":[[1,1]],\"return\":[\"qk\"]}", "/qk/0/1");
    /* 300·300·2 = 180000 past float16's 65504 */
    refused_appends_nothing("{\"d_k\":2,\"d_v\":2,\"dtype\":\"float16\",\"scale\":1}",
                            "{\"q\":[[300,300]],\"k\":[[300,300]],\"v\":[[1,1]],"
                            "\"return\":[\"scores\"]}", "/scores/0/1");
}

/* A step of a float16 v2 sequence with one row each of q, k and v (each
 * "a,b"), asking for scores; params: the parameters' members. */
static const char *v2_step(const char *params, const char *q, const char *k, const char *v)
{
    static char body[512];
    snprintf(body, sizeof body, "{\"parameters\":{\"sequence_id\":\"refused\"%s},"
             "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[%s]},"
             "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[%s]},"
             "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[%s]}],"
             "\"outputs\":[{\"name\":\"scores\"}]}", params, q, k, v);
    return body;
}

TEST(a_refused_sequence_step_appends_nothing)
{
    char code[64], ptr[128];
    const char *infer = "/v2/models/attention/infer";
    CHECK_EQ_INT(post(infer, v2_step(",\"sequence_start\":true,\"scale\":1", "1,0", "1,0",
                                     "1,2"), code, ptr), 200);
    /* v2's errors are 400, the code in the message */
    CHECK_EQ_INT(post(infer, v2_step("", "300,300", "300,300", "1,1"), code, ptr), 400);
    struct api_response r;
    t_call(&ctx, "POST", infer, v2_step("", "0,1", "0,1", "3,4"), &r);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = t_json(&r);
    json_t *p = json_object_get(j, "parameters");
    CHECK_EQ_INT((int)json_integer_value(json_object_get(p, "sequence_length")), 2);
    json_decref(j);
    api_response_free(&r);
}

int main(void)
{
    struct sess_config cfg = {.max_sessions = 16, .max_cache_bytes = 1 << 20,
                              .default_ttl_s = 600, .default_max_tokens = 4096};
    t_ctx_init(&ctx);
    attn_blas_init(1);
    ctx.store = sess_store_new(&cfg);
    RUN(overflowed_qk_is_422_at_its_pointer);
    RUN(overflowing_pass_names_its_input);
    RUN(empty_row_names_its_query_row);
    RUN(an_overflowing_qk_under_a_small_scale_names_its_query_row);
    RUN(a_float64_score_that_cancels_is_not_blamed);
    RUN(overflowing_session_pass_names_its_input);
    RUN(an_alibi_overflow_names_its_slope);
    RUN(a_refused_session_attention_appends_nothing);
    RUN(a_refused_sequence_step_appends_nothing);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
