/*
 * tests/api/test_api_verify.c — GET/POST /v1/verify and /verify in-process:
 * the built-in example's table against the published figures (6 decimals),
 * the softmax1 table recomputed here, the shape of each check, the same
 * answer on both paths, caller data (float64 and float32, with RoPE and
 * sink), the inputs echo, and the validation errors of a POST body.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/half_ref.h"

static struct api_ctx ctx;

static json_t *call(const char *method, const char *path, const char *body,
                    int *status)
{
    struct api_response r;
    json_t *j;

    t_call(&ctx, method, path, body, &r);
    *status = r.status;
    j = t_json(&r);
    if (r.status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    api_response_free(&r);
    return j;
}

static double at(const json_t *m, size_t i, size_t j)
{
    return json_number_value(json_array_get(json_array_get(m, i), j));
}

static json_t *check_named(json_t *report, const char *name)
{
    size_t i;
    json_t *ck;

    json_array_foreach(json_object_get(report, "checks"), i, ck)
        if (strcmp(json_string_value(json_object_get(ck, "name")), name) == 0)
            return ck;
    return NULL;
}

static const double PUB_W[4][3] = {
    {0.575975, 0.283995, 0.140029}, {0.445808, 0.445808, 0.108383},
    {0.575975, 0.283995, 0.140029}, {0.445808, 0.445808, 0.108383}};
static const double PUB_S[4][3] = {
    {0.707107, 0, -0.707107}, {0.707107, 0.707107, -0.707107},
    {2.828427, 2.121320, 1.414214}, {1.414214, 1.414214, 0}};

TEST(get_builtin_table)
{
    int st;
    json_t *j = call("GET", "/v1/verify", NULL, &st);
    json_t *std = json_object_get(json_object_get(j, "table"), "standard");
    static const char *const names[] = {"no_bias", "q_bias", "k_bias", "both"};

    CHECK_EQ_INT(st, 200);
    CHECK(json_is_true(json_object_get(j, "passed")));
    CHECK_STR(json_string_value(json_object_get(j, "example")), "builtin");
    CHECK_STR(json_string_value(json_object_get(j, "dtype")), "float64");
    CHECK_NEAR(json_number_value(json_object_get(j, "tolerance")), 1e-12, 0);
    CHECK_EQ_INT(json_array_size(std), 4);
    for (size_t c = 0; c < 4; c++) {
        json_t *row = json_array_get(std, c);
        CHECK_STR(json_string_value(json_object_get(row, "condition")), names[c]);
        for (size_t k = 0; k < 3; k++) {
            CHECK_NEAR(at(json_object_get(row, "scores"), 0, k), PUB_S[c][k], 5e-7);
            CHECK_NEAR(at(json_object_get(row, "weights"), 0, k), PUB_W[c][k], 5e-7);
        }
    }
    json_decref(j);
}

TEST(get_builtin_softmax1_table)
{
    int st;
    json_t *j = call("GET", "/v1/verify", NULL, &st);
    json_t *t1 = json_object_get(json_object_get(j, "table"), "softmax1");

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(t1), 4);
    for (size_t c = 0; c < 4; c++) {
        json_t *row = json_array_get(t1, c);
        double sum = 1.0;
        for (size_t k = 0; k < 3; k++)
            sum += exp(PUB_S[c][k]);
        for (size_t k = 0; k < 3; k++)  /* from the 6-decimal scores: 1e-5 */
            CHECK_NEAR(at(json_object_get(row, "weights"), 0, k),
                       exp(PUB_S[c][k]) / sum, 1e-5);
    }
    json_decref(j);
}

TEST(get_checks_shape)
{
    int st;
    size_t i;
    json_t *ck, *j = call("GET", "/v1/verify", NULL, &st);
    json_t *checks = json_object_get(j, "checks");

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(checks), 27);
    json_array_foreach(checks, i, ck) {
        CHECK_EQ_INT(json_integer_value(json_object_get(ck, "id")), (long long)i + 1);
        CHECK(json_is_string(json_object_get(ck, "claim")));
        CHECK(json_is_true(json_object_get(ck, "passed")));
        CHECK(json_is_boolean(json_object_get(ck, "applicable")));
        CHECK(json_is_number(json_object_get(ck, "max_abs_diff")));
        CHECK(json_is_number(json_object_get(ck, "tolerance")));
        CHECK(json_is_object(json_object_get(ck, "data")));
    }
    ck = check_named(j, "k_bias_row_constant");
    CHECK(ck != NULL);
    CHECK_NEAR(json_number_value(json_array_get(json_object_get(
                   json_object_get(ck, "data"), "row_constant"), 0)),
               3.0 / sqrt(2.0), 1e-15);
    ck = check_named(j, "q_bias_exception");
    CHECK(ck && json_is_false(json_object_get(ck, "applicable")));
    CHECK(ck && json_is_string(json_object_get(ck, "note")));
    json_decref(j);
}

TEST(short_path_and_post_builtin_agree)
{
    int s1, s2, s3;
    json_t *a = call("GET", "/v1/verify", NULL, &s1);
    json_t *b = call("GET", "/verify", NULL, &s2);
    json_t *c = call("POST", "/verify",
                     "{\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],"
                     "\"v\":[[1,0,0],[0,1,0],[0,0,1]],"
                     "\"bias\":{\"q\":[0,1],\"k\":[3,-2],\"v\":[1,-1,0.5]}}", &s3);

    CHECK_EQ_INT(s1, 200);
    CHECK_EQ_INT(s2, 200);
    CHECK_EQ_INT(s3, 200);
    json_object_del(a, "elapsed_us");
    json_object_del(b, "elapsed_us");
    CHECK(json_equal(a, b));
    CHECK(json_equal(json_object_get(a, "table"), json_object_get(c, "table")));
    CHECK(json_equal(json_object_get(a, "checks"), json_object_get(c, "checks")));
    CHECK_STR(json_string_value(json_object_get(c, "example")), "request");
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

TEST(post_caller_data)
{
    int st;
    json_t *j = call("POST", "/v1/verify",
                     "{\"q\":[[0.2,-1,0.5,1],[1,1,0,-0.5]],"
                     "\"k\":[[1,0,2,0],[0,1,0,1],[-1,0.5,0,0],[0.3,0.3,-1,2]],"
                     "\"v\":[[1,2],[3,4],[5,6],[7,8]],"
                     "\"bias\":{\"q\":[0,1,0,0],\"k\":[3,-2,1,0],\"v\":[1,1]},"
                     "\"rope\":{\"base\":100,\"pairs\":\"half\"},"
                     "\"softmax\":\"sink\",\"sink_logit\":0.5,"
                     "\"tolerance\":1e-10,\"scale\":0.25}", &st);
    json_t *in = json_object_get(j, "inputs");

    CHECK_EQ_INT(st, 200);
    CHECK(json_is_true(json_object_get(j, "passed")));
    CHECK_NEAR(json_number_value(json_object_get(j, "tolerance")), 1e-10, 0);
    CHECK_NEAR(json_number_value(json_object_get(j, "scale")), 0.25, 0);
    CHECK_STR(json_string_value(json_object_get(in, "softmax")), "sink");
    CHECK_NEAR(json_number_value(json_object_get(in, "sink_logit")), 0.5, 0);
    CHECK_NEAR(json_number_value(json_object_get(json_object_get(in, "rope"), "base")),
               100, 0);
    CHECK_EQ_INT(json_array_size(json_object_get(in, "q")), 2);
    /* table rows are [n][L] */
    json_t *w = json_object_get(json_array_get(json_object_get(
        json_object_get(j, "table"), "standard"), 0), "weights");
    CHECK_EQ_INT(json_array_size(w), 2);
    CHECK_EQ_INT(json_array_size(json_array_get(w, 0)), 4);
    /* scores of the table equal scale * q.k, computed here */
    CHECK_NEAR(at(json_object_get(json_array_get(json_object_get(
                   json_object_get(j, "table"), "standard"), 0), "scores"), 1, 3),
               0.25 * (1 * 0.3 + 1 * 0.3 + 0 * -1 + -0.5 * 2), 1e-15);
    json_t *sink = check_named(j, "sink_extra_key");
    CHECK(sink && json_is_true(json_object_get(sink, "passed")));
    json_decref(j);
}

TEST(post_float32)
{
    int st;
    json_t *j = call("POST", "/v1/verify",
                     "{\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1],[2],[3]],"
                     "\"bias\":{\"q\":[0,1],\"k\":[3,-2]},\"dtype\":\"float32\"}", &st);
    json_t *w = json_object_get(json_array_get(json_object_get(
        json_object_get(j, "table"), "standard"), 0), "weights");

    CHECK_EQ_INT(st, 200);
    CHECK(json_is_true(json_object_get(j, "passed")));
    CHECK_STR(json_string_value(json_object_get(j, "dtype")), "float32");
    CHECK_NEAR(json_number_value(json_object_get(j, "tolerance")), 1e-4, 0);
    CHECK(strstr(json_string_value(json_object_get(j, "tolerance_note")), "float32"));
    CHECK_NEAR(at(w, 0, 0), 0.575975, 1e-6);
    /* no bias.v: check 13 has no premise */
    json_t *c13 = check_named(j, "v_bias_output_shift");
    CHECK(c13 && json_is_false(json_object_get(c13, "applicable")));
    json_decref(j);

    /* float32 numbers print as the shortest float32 text */
    struct api_response r;
    t_call(&ctx, "POST", "/v1/verify",
           "{\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1],[2],[3]],"
           "\"dtype\":\"float32\"}", &r);
    CHECK(r.body && strstr(r.body, "[[0.57597536,0.28399542,0.14002925]]"));
    api_response_free(&r);
}

struct bad {
    const char *body, *code, *path;
};

TEST(post_validation_errors)
{
    static const struct bad cases[] = {
        {"{\"k\":[[1,0]],\"v\":[[1]]}", "invalid_field", "/q"},
        {"{\"q\":[[1,0]],\"k\":[[1,0,1]],\"v\":[[1]]}", "shape_mismatch", "/k"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1],[2]]}", "shape_mismatch", "/v"},
        {"{\"q\":[[1,0]],\"k\":[[1,0],[2]],\"v\":[[1],[2]]}", "ragged_matrix", "/k/1"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"tolerance\":0}", "invalid_field", "/tolerance"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"tolerance\":\"x\"}", "invalid_field", "/tolerance"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"extra\":1}", "invalid_field", "/extra"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"bias\":{\"k\":[1,2,3]}}", "shape_mismatch", "/bias/k"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"softmax\":\"sink\"}", "invalid_field", "/sink_logit"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"softmax\":\"hard\"}", "invalid_field", "/softmax"},
        {"{\"q\":[[1,0,1]],\"k\":[[1,0,1]],\"v\":[[1]],\"rope\":true}", "invalid_field", "/rope"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"dtype\":\"int8\"}", "invalid_field", "/dtype"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"scale\":-1}", "invalid_field", "/scale"},
        {"{\"q\":[[[[[1,0]]]]],\"k\":[[[1,0]]],\"v\":[[[1]]]}", "invalid_field", "/q"},
        {"{\"q\":[[1,0]],\"k\":[[[1,0]]],\"v\":[[[1]]]}", "shape_mismatch", "/k"},
        {"{\"q\":[[[1,0]]],\"k\":[[[1,0]]],\"v\":[[1]]}", "shape_mismatch", "/v"},
#define H3 "{\"q\":[[[1,0]],[[0,1]],[[1,1]]],"
        {H3 "\"k\":[[[1,0]],[[0,1]]],\"v\":[[[1]],[[2]]]}", "shape_mismatch", "/k"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]],[[2]]]}", "shape_mismatch", "/v"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1],[2]]]}", "shape_mismatch", "/v"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]]],\"softmax\":\"sink\",\"sink_logit\":[1,2]}",
         "shape_mismatch", "/sink_logit"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]]],\"bias\":{\"q\":[[1,0],[0,1]]}}",
         "shape_mismatch", "/bias/q"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]]],\"bias\":{\"k\":[[1,0],[0,1]]}}",
         "shape_mismatch", "/bias/k"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]]],\"attn_bias\":[[0]]}", "invalid_field",
         "/attn_bias"},
        {H3 "\"k\":[[[1,0]]],\"v\":[[[1]]],\"mask\":[[true]]}", "invalid_field", "/mask"},
#undef H3
#define B2 "{\"q\":[[[[1,0]]],[[[0,1]]]],\"k\":[[[[1,0],[0,1]]],[[[1,0],[0.5,1]]]]," \
           "\"v\":[[[[1],[2]]],[[[3],[4]]]]"
        {"{\"q\":[[[[1,0]]],[[[0,1]]]],\"k\":[[[[1,0]]]],\"v\":[[[[1]]]]}", "shape_mismatch",
         "/k"},
        {"{\"q\":[[[[1,0]]],[[[0,1]]]],\"k\":[[[[1,0]]],[[[1,0]]]],\"v\":[[[[1]]]]}",
         "shape_mismatch", "/v"},
        {B2 ",\"positions\":{\"k\":[[0,1],[1,2],[2,3]]}}", "shape_mismatch", "/positions/k"},
        {B2 ",\"positions\":{\"q\":[[0],[-1]]}}", "invalid_field", "/positions/q/1/0"},
        {B2 ",\"segments\":{\"q\":[[0],[1]],\"k\":[[0,1],[0,1],[1,1]]}}",
         "shape_mismatch", "/segments/k"},
        {B2 ",\"segments\":{\"q\":[[0],[1],[2]],\"k\":[0,1]}}", "shape_mismatch",
         "/segments/q"},
#undef B2
        {"{\"q\":[],\"k\":[[1,0]],\"v\":[[1]]}", "empty_matrix", "/q"},
        {"{\"q\":[[1e39,0]],\"k\":[[1,0]],\"v\":[[1]],\"dtype\":\"float32\"}", "non_finite", "/q/0/0"},
        {"[1]", "invalid_json", ""},
#define F32 "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"dtype\":\"float32\","
#define V1 "{\"q\":[[1,0],[0,1]],\"k\":[[1,0],[0,1],[1,1]],\"v\":[[1],[2],[3]],"
        {V1 "\"positions\":{\"q\":[0,-1]}}", "invalid_field", "/positions/q/1"},
        {V1 "\"positions\":{\"k\":[0,1]}}", "shape_mismatch", "/positions/k"},
        {V1 "\"positions\":{\"q\":[[0,1],[1,2]]}}", "shape_mismatch", "/positions/q"},
        {V1 "\"segments\":{\"q\":[0,1]}}", "invalid_field", "/segments/k"},
        {V1 "\"segments\":{\"q\":[0,1],\"k\":[0,1]}}", "shape_mismatch", "/segments/k"},
        {V1 "\"window\":{\"left\":-1}}", "invalid_field", "/window/left"},
        {V1 "\"window\":{\"up\":1}}", "invalid_field", "/window/up"},
        {V1 "\"softcap\":0}", "invalid_field", "/softcap"},
        {V1 "\"softmax\":\"sink\",\"sink_logit\":[1,\"x\"]}", "invalid_field",
         "/sink_logit/1"},
        {V1 "\"softmax\":\"sink\",\"sink_logit\":[1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7]}",
         "invalid_field", "/sink_logit"},
        {V1 "\"rope\":{\"dims\":1}}", "invalid_field", "/rope/dims"},
        {V1 "\"rope\":{\"scaling\":{\"type\":\"dynamic\"}}}", "invalid_field",
         "/rope/scaling/type"},
        {"{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[70000]],\"dtype\":\"float16\"}",
         "non_finite", "/v/0/0"},
        /* past float32's range where the math runs in float32 */
        {F32 "\"scale\":1e39}", "invalid_field", "/scale"},
        {F32 "\"softcap\":1e39}", "invalid_field", "/softcap"},
        {F32 "\"softmax\":\"sink\",\"sink_logit\":-1e39}", "non_finite", "/sink_logit"},
        {F32 "\"softmax\":\"sink\",\"sink_logit\":[0,1e39]}", "non_finite",
         "/sink_logit/1"},
#undef V1
#undef F32
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_response r;
        t_call(&ctx, "POST", "/v1/verify", cases[i].body, &r);
        CHECK_STR(t_err_code(&r), cases[i].code);
        if (strcmp(t_err_code(&r), cases[i].code) != 0)
            printf("  case %zu: %.*s\n", i, (int)r.body_len, r.body);
        if (cases[i].path[0])
            CHECK(strncmp(t_err_path(&r), cases[i].path, strlen(cases[i].path)) == 0);
        api_response_free(&r);
    }
}

/* A pass of the checks that overflows (finite inputs) is 422 non_finite
 * at the request's row to blame, as on /v1/attention, not path null: the
 * query row whose score overflows, a k row its bias pushes past the range,
 * the v row that makes an output overflow; heads by their q / k index. */
TEST(post_overflow_names_its_input)
{
    static const char *const cases[][3] = {
        {"{\"q\":[[1],[1e200]],\"k\":[[1e200]],\"v\":[[1]]}", "/q/1",
         "the score of query row 1 with key 0 is not finite in float64"},
        {"{\"q\":[[1],[1e30]],\"k\":[[1e30]],\"v\":[[1]],\"dtype\":\"float32\"}", "/q/1",
         "query row 1 with key 0"},
        {"{\"q\":[[1]],\"k\":[[1],[3e38]],\"v\":[[1],[1]],\"bias\":{\"k\":[3e38]},"
         "\"dtype\":\"float32\"}", "/k/1", "k row 1 is not finite in float32 after its bias"},
        {"{\"q\":[[0]],\"k\":[[0],[0],[0],[0]],\"v\":[[1],[3.4e38],[3.4e38],[3.4e38]],"
         "\"dtype\":\"float32\"}", "/v/1", "v row 1 holds"},
        /* heads: head 1's query row, kv head 0's k row */
        {"{\"q\":[[[1]],[[1e200]]],\"k\":[[[1e200]]],\"v\":[[[1]]]}", "/q/1/0",
         "query row 0 of head 1 with key 0"},
        {"{\"q\":[[[1]],[[1]]],\"k\":[[[1],[3e38]]],\"v\":[[[1],[1]]],"
         "\"bias\":{\"k\":[3e38]},\"dtype\":\"float32\"}", "/k/0/1", "k row 1 is"},
        /* a batch: element 1 */
        {"{\"q\":[[[[1]]],[[[1e200]]]],\"k\":[[[[1]]],[[[1e200]]]],\"v\":[[[[1]]],[[[1]]]]}",
         "/q/1/0/0", "query row 0 of batch element 1"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_response r;
        t_call(&ctx, "POST", "/v1/verify", cases[i][0], &r);
        CHECK_EQ_INT(r.status, 422);
        CHECK_STR(t_err_code(&r), "non_finite");
        CHECK_STR(t_err_path(&r), cases[i][1]);
        CHECK(r.body && strstr(r.body, cases[i][2]));
        if (!r.body || !strstr(r.body, cases[i][2]))
            printf("  case %zu: %.*s\n", i, (int)r.body_len, r.body);
        api_response_free(&r);
    }
}

/* Issue 16's inputs: the six checks run on the request's positions,
 * segments, window, per-head sinks, softcap and scaled partial RoPE, and
 * the inputs echo them. */
TEST(post_model_inputs)
{
    int st;
    json_t *j = call("POST", "/v1/verify",
                     "{\"q\":[[0.2,-1,0.5,1],[1,1,0,-0.5],[0.3,0.1,0.2,-0.7]],"
                     "\"k\":[[1,0,2,0],[0,1,0,1],[-1,0.5,0,0],[0.3,0.3,-1,2]],"
                     "\"v\":[[1,2],[3,4],[5,6],[7,8]],\"bias\":{\"k\":[3,-2,1,0]},"
                     "\"positions\":{\"q\":[4,9,6],\"k\":[0,3,5,8]},"
                     "\"segments\":{\"q\":[1,0,1],\"k\":[0,1,1,0]},"
                     "\"window\":{\"left\":4,\"sinks\":1},\"softcap\":1.5,"
                     "\"softmax\":\"sink\",\"sink_logit\":[0.25,-2],"
                     "\"rope\":{\"base\":500,\"dims\":2,\"scaling\":{\"type\":\"linear\","
                     "\"factor\":2}}}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_is_true(json_object_get(j, "passed")));
    json_t *in = json_object_get(j, "inputs");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(json_object_get(in,
                 "positions"), "q"), 1)), 9);
    CHECK_EQ_INT(json_array_size(json_object_get(json_object_get(in, "segments"), "k")), 4);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(in, "window"), "sinks")), 1);
    CHECK_NEAR(json_number_value(json_object_get(in, "softcap")), 1.5, 0);
    CHECK_EQ_INT(json_array_size(json_object_get(in, "sink_logit")), 2);
    json_t *rope = json_object_get(in, "rope");
    CHECK_EQ_INT(json_integer_value(json_object_get(rope, "dims")), 2);
    CHECK_STR(json_string_value(json_object_get(json_object_get(rope, "scaling"), "type")),
              "linear");
    json_t *seg = check_named(j, "segments_per_segment");
    CHECK(seg && strstr(json_string_value(json_object_get(seg, "note")), "request's segments"));
    json_t *sinks = check_named(j, "head_sink_limits");
    json_t *ws = json_object_get(json_object_get(sinks, "data"), "weights_request_sinks");
    CHECK_EQ_INT(json_array_size(ws), 2 * 3);
    json_t *cap = check_named(j, "softcap_monotone_bounded");
    CHECK_NEAR(json_number_value(json_object_get(json_object_get(cap, "data"), "softcap")),
               1.5, 0);
    json_decref(j);
}

/* dtype float16 and bfloat16: every number of the table is a value of the
 * dtype (the float32 result rounded), and a score past float16's range is
 * 422 naming the matrix. */
TEST(post_half)
{
    static const char *const names[2] = {"float16", "bfloat16"};
    static struct reffmt *const fmts[2] = {&R16, &RB16};
    char body[512];
    int st;
    for (int f = 0; f < 2; f++) {
        ref_init(fmts[f]);
        snprintf(body, sizeof body, "{\"q\":[[1,0.5]],\"k\":[[1,0],[0.25,1],[-1,0.5]],"
                 "\"v\":[[1],[2],[3]],\"bias\":{\"k\":[3,-2]},\"dtype\":\"%s\"}", names[f]);
        json_t *j = call("POST", "/v1/verify", body, &st);
        snprintf(body, sizeof body, "{\"q\":[[1,0.5]],\"k\":[[1,0],[0.25,1],[-1,0.5]],"
                 "\"v\":[[1],[2],[3]],\"bias\":{\"k\":[3,-2]},\"dtype\":\"float32\"}");
        json_t *j32 = call("POST", "/v1/verify", body, &st);
        CHECK_EQ_INT(st, 200);
        CHECK(json_is_true(json_object_get(j, "passed")));
        CHECK_STR(json_string_value(json_object_get(j, "dtype")), names[f]);
        json_t *t16 = json_object_get(json_object_get(j, "table"), "standard");
        json_t *t32 = json_object_get(json_object_get(j32, "table"), "standard");
        size_t bad = 0;
        for (size_t c = 0; c < 4; c++)
            for (size_t k = 0; k < 3; k++) {
                double a = at(json_object_get(json_array_get(t16, c), "weights"), 0, k);
                double b = at(json_object_get(json_array_get(t32, c), "weights"), 0, k);
                bad += ref_round(fmts[f], a) != ref_round(fmts[f], (double)(float)b);
            }
        CHECK_EQ_INT(bad, 0);
        json_decref(j);
        json_decref(j32);
    }
    struct api_response r;
    t_call(&ctx, "POST", "/v1/verify", "{\"q\":[[300,300]],\"k\":[[300,300],[1,1]],"
           "\"v\":[[1],[2]],\"dtype\":\"float16\"}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "non_finite");
    CHECK(r.body && strstr(r.body, "base_scores.scores_core"));
    api_response_free(&r);
}

/* Every RoPE scaling on the caller's head answers a passing report (ntk
 * once answered 422 without a path: check 25's dims 0 kept ntk, which
 * needs more than 2 rotated dims), yarn also with gpt-oss's truncate
 * false. */
TEST(post_rope_scalings)
{
    static const char *const scalings[] = {
        "{\"type\":\"linear\",\"factor\":2}", "{\"type\":\"ntk\",\"factor\":2}",
        "{\"type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4,"
        "\"original_max_position\":16}",
        "{\"type\":\"yarn\",\"factor\":4,\"original_max_position\":32}",
        "{\"type\":\"yarn\",\"factor\":32,\"original_max_position\":4096,"
        "\"beta_fast\":32,\"beta_slow\":1,\"truncate\":false}"};
    char body[512];
    for (size_t i = 0; i < sizeof scalings / sizeof scalings[0]; i++) {
        int st;
        snprintf(body, sizeof body, "{\"q\":[[1,0,0.5,1],[0,1,1,0]],\"k\":[[1,0,0,1],[0,1,0,0],"
                 "[1,1,1,1]],\"v\":[[1],[2],[3]],\"rope\":{\"pairs\":\"half\",\"scaling\":%s}}",
                 scalings[i]);
        json_t *j = call("POST", "/v1/verify", body, &st);
        CHECK_EQ_INT(st, 200);
        CHECK(json_is_true(json_object_get(j, "passed")));
        json_decref(j);
    }
}

TEST(methods_and_limits)
{
    struct api_response r;
    t_call(&ctx, "DELETE", "/v1/verify", NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK(t_hdr(&r, "Allow") && strstr(t_hdr(&r, "Allow"), "POST"));
    api_response_free(&r);

    static const char *const text[] = {"Content-Type", "text/plain", NULL};
    t_call_h(&ctx, "POST", "/v1/verify", text, "{}", &r);
    CHECK_EQ_INT(r.status, 415);
    api_response_free(&r);

    /* a tiny element budget refuses the report before computing */
    size_t saved = ctx.cfg.max_elements;
    ctx.cfg.max_elements = 200;
    int st;
    json_t *j = call("GET", "/v1/verify", NULL, &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "response_too_large");
    json_decref(j);
    ctx.cfg.max_elements = saved;
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(get_builtin_table);
    RUN(get_builtin_softmax1_table);
    RUN(get_checks_shape);
    RUN(short_path_and_post_builtin_agree);
    RUN(post_caller_data);
    RUN(post_float32);
    RUN(post_validation_errors);
    RUN(post_overflow_names_its_input);
    RUN(post_model_inputs);
    RUN(post_half);
    RUN(post_rope_scalings);
    RUN(methods_and_limits);
    TEST_MAIN_END();
}
