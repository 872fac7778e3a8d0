/*
 * tests/api/test_api_models.c — the request fields of current models
 * (DESIGN.md part 2) in-process: every refusal of positions, segments,
 * window, softcap, per-head sink logits, RoPE dims and scaling, rank-4
 * batches and their broadcasting (status, code and JSON pointer), on
 * /v1/attention and on sessions; the settings a session keeps (echoed by
 * GET); batches answered with the rank of q, equal to one request per batch
 * element; broadcasting equal to the spelled-out arrays; and a session's
 * decode step equal, bit for bit in float64, to the stateless request over
 * all its rows with the same settings.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/store.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;

/* one head: n = 1, L = 2, d_k = d_v = 2 */
#define QKV "\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1,2],[3,4]]"
/* a batch of 2: q [2][1][1][2], k and v [2][1][2][2] */
#define Q4 "\"q\":[[[[1,0]]],[[[0,1]]]]"
#define KV4 "\"k\":[[[[1,0],[0,1]]],[[[1,1],[0,1]]]],\"v\":[[[[1,2],[3,4]]],[[[5,6],[7,8]]]]"
#define QKV4 Q4 "," KV4

struct err_case {
    const char *body;
    int status;
    const char *code;
    const char *path;
};

static const struct err_case attention_cases[] = {
    /* positions */
    {"{" QKV ",\"positions\":[0]}", 422, "invalid_field", "/positions"},
    {"{" QKV ",\"positions\":{\"x\":[0]}}", 422, "invalid_field", "/positions/x"},
    {"{" QKV ",\"positions\":{\"q\":[-1]}}", 422, "invalid_field", "/positions/q/0"},
    {"{" QKV ",\"positions\":{\"q\":[0.5]}}", 422, "invalid_field", "/positions/q/0"},
    {"{" QKV ",\"positions\":{\"q\":[9007199254740993]}}", 422, "invalid_field",
     "/positions/q/0"},
    {"{" QKV ",\"positions\":{\"q\":\"0\"}}", 422, "invalid_field", "/positions/q"},
    {"{" QKV ",\"positions\":{\"k\":[0]}}", 422, "shape_mismatch", "/positions/k"},
    {"{" QKV ",\"positions\":{\"k\":[0,1,2]}}", 422, "shape_mismatch", "/positions/k"},
    {"{" QKV ",\"positions\":{\"k\":[[0,1],[0,1]]}}", 422, "shape_mismatch",
     "/positions/k"},
    {"{" QKV ",\"positions\":{\"k\":[[0,1],5]}}", 422, "shape_mismatch", "/positions/k"},
    {"{" QKV4 ",\"positions\":{\"q\":[[0],[0],[0]]}}", 422, "shape_mismatch",
     "/positions/q"},
    {"{" QKV4 ",\"positions\":{\"k\":[[0,1],[0]]}}", 422, "shape_mismatch",
     "/positions/k/1"},
    {"{" QKV4 ",\"positions\":{\"k\":[[0,1],[0,true]]}}", 422, "invalid_field",
     "/positions/k/1/1"},
    /* segments */
    {"{" QKV ",\"segments\":{\"q\":[0]}}", 422, "invalid_field", "/segments/k"},
    {"{" QKV ",\"segments\":{\"k\":[0,0]}}", 422, "invalid_field", "/segments/q"},
    {"{" QKV ",\"segments\":{\"q\":[0,0],\"k\":[0,0]}}", 422, "shape_mismatch",
     "/segments/q"},
    {"{" QKV ",\"segments\":{\"q\":[0],\"k\":[0]}}", 422, "shape_mismatch",
     "/segments/k"},
    {"{" QKV ",\"segments\":{\"q\":[0],\"k\":[0,\"a\"]}}", 422, "invalid_field",
     "/segments/k/1"},
    {"{" QKV ",\"segments\":{\"q\":[0],\"k\":[0,1.5]}}", 422, "invalid_field",
     "/segments/k/1"},
    {"{" QKV ",\"segments\":[0]}", 422, "invalid_field", "/segments"},
    {"{" QKV ",\"segments\":{\"q\":[0],\"k\":[0,0],\"id\":1}}", 422,
     "invalid_field", "/segments/id"},
    {"{" QKV4 ",\"segments\":{\"q\":[[0],[0],[1]],\"k\":[0,0]}}", 422,
     "shape_mismatch", "/segments/q"},
    /* window */
    {"{" QKV ",\"window\":5}", 422, "invalid_field", "/window"},
    {"{" QKV ",\"window\":{\"left\":-1}}", 422, "invalid_field", "/window/left"},
    {"{" QKV ",\"window\":{\"right\":1.5}}", 422, "invalid_field", "/window/right"},
    {"{" QKV ",\"window\":{\"sinks\":\"4\"}}", 422, "invalid_field", "/window/sinks"},
    {"{" QKV ",\"window\":{\"size\":3}}", 422, "invalid_field", "/window/size"},
    /* softcap */
    {"{" QKV ",\"softcap\":0}", 422, "invalid_field", "/softcap"},
    {"{" QKV ",\"softcap\":-50}", 422, "invalid_field", "/softcap"},
    {"{" QKV ",\"softcap\":\"50\"}", 422, "invalid_field", "/softcap"},
    {"{" QKV ",\"softcap\":true}", 422, "invalid_field", "/softcap"},
    /* sink logits */
    {"{" QKV ",\"softmax\":\"sink\",\"sink_logit\":[1,2]}", 422, "shape_mismatch",
     "/sink_logit"},
    {"{" QKV ",\"softmax\":\"sink\",\"sink_logit\":[]}", 422, "shape_mismatch",
     "/sink_logit"},
    {"{" QKV ",\"softmax\":\"sink\",\"sink_logit\":[\"a\"]}", 422, "invalid_field",
     "/sink_logit/0"},
    {"{" QKV ",\"softmax\":\"sink\",\"sink_logit\":[null]}", 422, "invalid_field",
     "/sink_logit/0"},
    {"{" QKV ",\"sink_logit\":[1]}", 422, "invalid_field", "/sink_logit"},
    {"{" QKV ",\"softmax\":\"softmax1\",\"sink_logit\":[1]}", 422, "invalid_field",
     "/sink_logit"},
    {"{\"q\":[[[1,0]],[[1,0]]],\"k\":[[[1,0],[0,1]]],\"v\":[[[1,2],[3,4]]],"
     "\"softmax\":\"sink\",\"sink_logit\":[1]}", 422, "shape_mismatch", "/sink_logit"},
    /* rope dims */
    {"{" QKV ",\"rope\":{\"dims\":1}}", 422, "invalid_field", "/rope/dims"},
    {"{" QKV ",\"rope\":{\"dims\":4}}", 422, "invalid_field", "/rope/dims"},
    {"{" QKV ",\"rope\":{\"dims\":-2}}", 422, "invalid_field", "/rope/dims"},
    {"{" QKV ",\"rope\":{\"dims\":\"2\"}}", 422, "invalid_field", "/rope/dims"},
    {"{\"q\":[[1,0,0]],\"k\":[[1,0,0]],\"v\":[[1]],\"rope\":{\"dims\":3}}", 422,
     "invalid_field", "/rope/dims"},
    /* rope scaling */
    {"{" QKV ",\"rope\":{\"scaling\":\"linear\"}}", 422, "invalid_field",
     "/rope/scaling"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"dynamic\",\"factor\":2}}}", 422,
     "invalid_field", "/rope/scaling/type"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"factor\":2}}}", 422, "invalid_field",
     "/rope/scaling/type"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"linear\"}}}", 422, "invalid_field",
     "/rope/scaling/factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"linear\",\"factor\":0.5}}}", 422,
     "invalid_field", "/rope/scaling/factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"linear\",\"factor\":\"2\"}}}", 422,
     "invalid_field", "/rope/scaling/factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"linear\",\"factor\":2,"
     "\"beta_fast\":32}}}", 422, "invalid_field", "/rope/scaling/beta_fast"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"ntk\",\"factor\":2}}}", 422,
     "invalid_field", "/rope/scaling"},
    {"{\"q\":[[1,0,0,0]],\"k\":[[1,0,0,0]],\"v\":[[1]],\"rope\":{\"dims\":2,"
     "\"scaling\":{\"type\":\"ntk\",\"factor\":2}}}", 422, "invalid_field", "/rope/dims"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,"
     "\"low_freq_factor\":1,\"high_freq_factor\":4}}}", 422, "invalid_field",
     "/rope/scaling/original_max_position"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,"
     "\"low_freq_factor\":4,\"high_freq_factor\":4,\"original_max_position\":8192}}}",
     422, "invalid_field", "/rope/scaling/high_freq_factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,"
     "\"low_freq_factor\":0,\"high_freq_factor\":4,\"original_max_position\":8192}}}",
     422, "invalid_field", "/rope/scaling/low_freq_factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,"
     "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position\":81.5}}}",
     422, "invalid_field", "/rope/scaling/original_max_position"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4}}}", 422,
     "invalid_field", "/rope/scaling/original_max_position"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096,\"attention_factor\":0}}}", 422, "invalid_field",
     "/rope/scaling/attention_factor"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096,\"beta_fast\":1,\"beta_slow\":2}}}", 422,
     "invalid_field", "/rope/scaling/beta_fast"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096,\"beta_slow\":0}}}", 422, "invalid_field",
     "/rope/scaling/beta_slow"},
    {"{" QKV ",\"rope\":{\"base\":1,\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096}}}", 422, "invalid_field", "/rope/base"},
    /* yarn's truncate: a boolean, and yarn's alone */
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096,\"truncate\":\"false\"}}}", 422, "invalid_field",
     "/rope/scaling/truncate"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":4096,\"truncate\":0}}}", 422, "invalid_field",
     "/rope/scaling/truncate"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"linear\",\"factor\":2,"
     "\"truncate\":false}}}", 422, "invalid_field", "/rope/scaling/truncate"},
    {"{" QKV ",\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,"
     "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position\":8192,"
     "\"truncate\":true}}}", 422, "invalid_field", "/rope/scaling/truncate"},
    /* ranks and batches */
    {"{" Q4 ",\"k\":[[[1,0],[0,1]]],\"v\":[[[1,2],[3,4]]]}", 422, "shape_mismatch", "/k"},
    {"{" Q4 ",\"k\":[[[[1,0],[0,1]]]],\"v\":[[[[1,2],[3,4]]]]}", 422,
     "shape_mismatch", "/k"},
    {"{" Q4 ",\"k\":[[[[1,0],[0,1]]],[[[1,1],[0,1]]]],\"v\":[[[1,2],[3,4]]]}", 422,
     "shape_mismatch", "/v"},
    {"{" QKV4 ",\"mask\":[[[[true,true]]],[[[true,true]]],[[[true,true]]]]}", 422,
     "shape_mismatch", "/mask"},
    {"{" QKV4 ",\"attn_bias\":[[[[0,0]],[[0,0]]],[[[0,0]],[[0,0]]]]}", 422,
     "shape_mismatch", "/attn_bias"},
    {"{" QKV4 ",\"attn_bias\":[[[[[0,0]]]]]}", 422, "invalid_field",
     "/attn_bias/0/0/0/0"},
    {"{" QKV4 ",\"bias\":{\"q\":[[[1,0]]]}}", 422, "invalid_field", "/bias/q/0/0"},
    {"{" QKV4 ",\"heads\":[1]}", 422, "invalid_field", "/heads/0"},
    {"{\"q\":{\"shape\":[2,1,1,2],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
     KV4 "}", 422, "invalid_field", "/q/data"},
};

/* Run one table against one route. */
static void run_table(const char *route, const struct err_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct api_response r;
        const struct err_case *e = &cases[i];

        t_call(&ctx, "POST", route, e->body, &r);
        if (r.status != e->status || strcmp(t_err_code(&r), e->code) != 0 ||
            strcmp(t_err_path(&r), e->path) != 0)
            printf("  case %zu: %s\n    -> %d %.*s\n", i, e->body, r.status,
                   (int)r.body_len, r.body ? r.body : "");
        CHECK_EQ_INT(r.status, e->status);
        CHECK_STR(t_err_code(&r), e->code);
        CHECK_STR(t_err_path(&r), e->path);
        api_response_free(&r);
    }
}

TEST(attention_refusals)
{
    run_table("/v1/attention", attention_cases,
              sizeof attention_cases / sizeof attention_cases[0]);
}

/* ---- helpers for the answers ---------------------------------------------- */

/* POST body to route; the parsed answer (new reference), status in *st. */
static json_t *post(const char *route, const char *body, int *st)
{
    struct api_response r;
    json_t *j;

    t_call(&ctx, "POST", route, body, &r);
    *st = r.status;
    if (r.status >= 300)
        printf("  %s -> %d %.*s\n", route, r.status, (int)r.body_len,
               r.body ? r.body : "");
    j = t_json(&r);
    api_response_free(&r);
    return j;
}

/* The response text of a 200 (malloc'd), or NULL. */
static char *post_text(const char *route, const char *body)
{
    struct api_response r;
    char *s = NULL;

    t_call(&ctx, "POST", route, body, &r);
    if (r.status == 200 && (s = malloc(r.body_len + 1))) {
        memcpy(s, r.body, r.body_len);
        s[r.body_len] = '\0';
    } else {
        printf("  %s -> %d %.*s\n", route, r.status, (int)r.body_len,
               r.body ? r.body : "");
    }
    api_response_free(&r);
    return s;
}

/* Nested arrays equal as JSON (numbers compared by value: bit for bit). */
static bool same(const json_t *a, const json_t *b)
{
    return a && b && json_equal((json_t *)a, (json_t *)b);
}

/* ---- sessions -------------------------------------------------------------- */

static const struct err_case create_cases[] = {
    {"{\"d_k\":2,\"d_v\":2,\"heads\":2,\"softmax\":\"sink\",\"sink_logit\":[1]}", 422,
     "shape_mismatch", "/sink_logit"},
    {"{\"d_k\":2,\"d_v\":2,\"softmax\":\"sink\",\"sink_logit\":[\"x\"]}", 422,
     "invalid_field", "/sink_logit/0"},
    {"{\"d_k\":2,\"d_v\":2,\"softcap\":0}", 422, "invalid_field", "/softcap"},
    {"{\"d_k\":2,\"d_v\":2,\"rope\":{\"dims\":3}}", 422, "invalid_field", "/rope/dims"},
    {"{\"d_k\":2,\"d_v\":2,\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":2}}}",
     422, "invalid_field", "/rope/scaling/original_max_position"},
    {"{\"d_k\":2,\"d_v\":2,\"rope\":{\"scaling\":{\"type\":\"yarn\",\"factor\":2,"
     "\"original_max_position\":16,\"truncate\":\"no\"}}}", 422, "invalid_field",
     "/rope/scaling/truncate"},
    {"{\"d_k\":2,\"d_v\":2,\"rope\":{\"scaling\":{\"type\":\"ntk\",\"factor\":2,"
     "\"truncate\":false}}}", 422, "invalid_field", "/rope/scaling/truncate"},
    /* a rolling session's window: causal, so no right side; left required */
    {"{\"d_k\":2,\"d_v\":2,\"window\":{\"left\":2,\"right\":0}}", 422, "invalid_field",
     "/window/right"},
    {"{\"d_k\":2,\"d_v\":2,\"window\":{\"sinks\":2}}", 422, "invalid_field", "/window/left"},
    {"{\"d_k\":2,\"d_v\":2,\"window\":true}", 422, "invalid_field", "/window"},
};

/* A float32 request's scale or softcap past FLT_MAX names the bound in
 * its message, and that bound, sent back, is taken. */
TEST(float32_bound_in_message_is_taken)
{
    static const char *const fmt = "{\"q\":[[1]],\"k\":[[1]],\"v\":[[1]],"
        "\"dtype\":\"float32\",\"%s\":%s,\"return\":[\"output\"]}";
    static const char *const names[] = {"scale", "softcap"};
    char body[256], bound[64] = "";
    int st;

    for (int i = 0; i < 2; i++) {
        snprintf(body, sizeof body, fmt, names[i], "1e39");
        json_t *j = post("/v1/attention", body, &st);
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"),
                                                            "message"));
        const char *at = msg ? strstr(msg, "up to ") : NULL;
        CHECK_EQ_INT(st, 422);
        CHECK(at && sscanf(at + 6, "%63s", bound) == 1);
        json_decref(j);
        snprintf(body, sizeof body, fmt, names[i], bound);
        json_decref(post("/v1/attention", body, &st));
        CHECK_EQ_INT(st, 200);
    }
}

TEST(session_create_refusals)
{
    run_table("/v1/sessions", create_cases, sizeof create_cases / sizeof create_cases[0]);
}

/* Create a session; its id into id[128]. */
static bool create(const char *body, char *id)
{
    int st;
    json_t *j = post("/v1/sessions", body, &st);
    const char *s = json_string_value(json_object_get(j, "id"));

    snprintf(id, 128, "%s", s ? s : "");
    json_decref(j);
    return st == 201 && s;
}

static const char *spath(const char *id, const char *suffix)
{
    static char p[256];
    snprintf(p, sizeof p, "/v1/sessions/%s%s", id, suffix);
    return p;
}

#define MODEL_SETTINGS                                                       \
    "\"softmax\":\"sink\",\"sink_logit\":[0.5,-1],\"softcap\":3,"            \
    "\"rope\":{\"base\":100,\"pairs\":\"half\",\"dims\":2,\"scaling\":"      \
    "{\"type\":\"yarn\",\"factor\":4,\"original_max_position\":16}}"

/* yarn on d_k = 4 whose rounded range [0, 2] and unrounded one
 * (0.105, 1.61) give pair 1 different frequencies (ramp 0.5 and 0.62) */
#define YARN4(truncate)                                                      \
    "\"rope\":{\"base\":100,\"pairs\":\"half\",\"scaling\":{\"type\":\"yarn\","  \
    "\"factor\":4,\"original_max_position\":256" truncate "}}"
#define GPTOSS_LIKE(truncate)                                                \
    "\"softmax\":\"sink\",\"sink_logit\":[0.5,-1],\"softcap\":3," YARN4(truncate)

TEST(session_settings_echoed)
{
    char id[128];
    struct api_response r;
    json_t *j, *rope, *sc;

    CHECK(create("{\"d_k\":4,\"d_v\":2,\"heads\":2,\"kv_heads\":1," MODEL_SETTINGS "}",
                 id));
    t_call(&ctx, "GET", spath(id, ""), NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    j = t_json(&r);
    api_response_free(&r);
    CHECK_STR(json_string_value(json_object_get(j, "softmax")), "sink");
    CHECK_EQ_INT(json_array_size(json_object_get(j, "sink_logit")), 2);
    CHECK_NEAR(json_number_value(json_array_get(json_object_get(j, "sink_logit"), 1)),
               -1, 0);
    CHECK_NEAR(json_number_value(json_object_get(j, "softcap")), 3, 0);
    rope = json_object_get(j, "rope");
    CHECK_EQ_INT(json_integer_value(json_object_get(rope, "dims")), 2);
    CHECK_STR(json_string_value(json_object_get(rope, "pairs")), "half");
    sc = json_object_get(rope, "scaling");
    CHECK_STR(json_string_value(json_object_get(sc, "type")), "yarn");
    /* an integer, as OpenAPI types it (16, not 16.0) */
    CHECK(json_is_integer(json_object_get(sc, "original_max_position")));
    CHECK_EQ_INT(json_integer_value(json_object_get(sc, "original_max_position")), 16);
    CHECK_NEAR(json_number_value(json_object_get(sc, "beta_fast")), 32, 0);
    CHECK_NEAR(json_number_value(json_object_get(sc, "beta_slow")), 1, 0);
    CHECK_NEAR(json_number_value(json_object_get(sc, "attention_factor")),
               0.1 * log(4.0) + 1, 1e-15);
    CHECK(json_is_true(json_object_get(sc, "truncate")));  /* the default */
    json_decref(j);
    /* truncate false is kept and shown */
    CHECK(create("{\"d_k\":4,\"d_v\":2,\"heads\":2," GPTOSS_LIKE(",\"truncate\":false")
                 "}", id));
    t_call(&ctx, "GET", spath(id, ""), NULL, &r);
    j = t_json(&r);
    api_response_free(&r);
    sc = json_object_get(json_object_get(j, "rope"), "scaling");
    CHECK(json_is_false(json_object_get(sc, "truncate")));
    json_decref(j);
    /* a plain session shows the settings off */
    CHECK(create("{\"d_k\":2,\"d_v\":2}", id));
    t_call(&ctx, "GET", spath(id, ""), NULL, &r);
    j = t_json(&r);
    api_response_free(&r);
    CHECK(json_is_null(json_object_get(j, "softcap")));
    CHECK(json_is_null(json_object_get(j, "sink_logit")));
    CHECK(json_is_false(json_object_get(j, "rope")));
    json_decref(j);
}

TEST(session_window_refusal)
{
    char id[128];
    int st;
    json_t *j;

    CHECK(create("{\"d_k\":2,\"d_v\":2}", id));
    j = post(spath(id, "/attention"), "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1,0]],"
             "\"window\":{\"left\":-3}}", &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "path")),
              "/window/left");
    json_decref(j);
    /* nothing was appended */
    struct api_response r;
    t_call(&ctx, "GET", spath(id, ""), NULL, &r);
    j = t_json(&r);
    api_response_free(&r);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "length")), 0);
    json_decref(j);
}


/* ---- answers --------------------------------------------------------------- */

/* A batch of 2 answers [B][h][n][..] and each element equals its own
 * request, bit for bit. */
TEST(batch_equals_its_elements)
{
    int st;
    json_t *all = post("/v1/attention", "{" QKV4 ",\"causal\":true}", &st);
    json_t *e0 = post("/v1/attention", "{\"q\":[[[1,0]]],\"k\":[[[1,0],[0,1]]],"
                      "\"v\":[[[1,2],[3,4]]],\"causal\":true}", &st);
    json_t *e1 = post("/v1/attention", "{\"q\":[[[0,1]]],\"k\":[[[1,1],[0,1]]],"
                      "\"v\":[[[5,6],[7,8]]],\"causal\":true}", &st);
    const char *keys[] = {"scores", "weights", "output"};

    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(all, "meta"),
                                                    "batch")), 2);
    for (int i = 0; i < 3; i++) {
        json_t *a = json_object_get(all, keys[i]);
        CHECK(same(json_array_get(a, 0), json_object_get(e0, keys[i])));
        CHECK(same(json_array_get(a, 1), json_object_get(e1, keys[i])));
    }
    json_decref(all);
    json_decref(e0);
    json_decref(e1);
}

/* Every broadcast form of a mask equals the mask spelled out per batch
 * element and head. */
TEST(batch_mask_broadcasts)
{
#define M_A "[true,false]"
#define M_B "[false,true]"
    static const char *const forms[][2] = {
        {"[" M_A "]", "[[[" M_A "]],[[" M_A "]]]"},
        {"[[" M_B "]]", "[[[" M_B "]],[[" M_B "]]]"},
        {"[[[" M_A "]],[[" M_B "]]]", "[[[" M_A "]],[[" M_B "]]]"},
        {"[[[" M_B "]]]", "[[[" M_B "]],[[" M_B "]]]"},
    };
    char body[512];

    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *a, *b;
        snprintf(body, sizeof body, "{" QKV4 ",\"mask\":%s}", forms[i][0]);
        a = post_text("/v1/attention", body);
        snprintf(body, sizeof body, "{" QKV4 ",\"mask\":%s}", forms[i][1]);
        b = post_text("/v1/attention", body);
        CHECK(a && b);
        /* the same numbers (elapsed_us differs: compare up to meta) */
        if (a && b)
            CHECK(strncmp(a, b, (size_t)(strstr(a, "\"meta\"") - a)) == 0);
        free(a);
        free(b);
    }
#undef M_A
#undef M_B
}

/* Batched positions and segments: per element, as the lone requests. */
TEST(batch_positions_segments_per_element)
{
    int st;
    json_t *all = post("/v1/attention", "{" QKV4 ",\"rope\":true,\"causal\":true,"
                       "\"positions\":{\"k\":[[0,1],[5,9]]},"
                       "\"segments\":{\"q\":[[0],[1]],\"k\":[0,1]}}", &st);
    json_t *e1 = post("/v1/attention", "{\"q\":[[[0,1]]],\"k\":[[[1,1],[0,1]]],"
                      "\"v\":[[[5,6],[7,8]]],\"rope\":true,\"causal\":true,"
                      "\"positions\":{\"k\":[5,9]},"
                      "\"segments\":{\"q\":[1],\"k\":[0,1]}}", &st);

    CHECK(same(json_array_get(json_object_get(all, "output"), 1),
               json_object_get(e1, "output")));
    json_decref(all);
    json_decref(e1);
}

/* meta.sink_logit says the sink logits the request ran with: one number,
 * or one per query head (not the first head's alone), in a stateless
 * request and a session's step. */
TEST(meta_sink_logits_per_head)
{
    char id[128];
    int st;
    json_t *j, *m;

    j = post("/v1/attention", "{\"q\":[[[1,0]],[[0,1]]],\"k\":[[[1,0],[0,1]]],"
             "\"v\":[[[1,2],[3,4]]],\"softmax\":\"sink\",\"sink_logit\":[0.5,-1]}", &st);
    CHECK_EQ_INT(st, 200);
    m = json_object_get(json_object_get(j, "meta"), "sink_logit");
    CHECK(json_is_array(m) && json_array_size(m) == 2);
    CHECK(json_number_value(json_array_get(m, 0)) == 0.5);
    CHECK(json_number_value(json_array_get(m, 1)) == -1);
    json_decref(j);
    j = post("/v1/attention", "{" QKV ",\"softmax\":\"sink\",\"sink_logit\":0.25}", &st);
    CHECK(json_number_value(json_object_get(json_object_get(j, "meta"), "sink_logit")) == 0.25);
    json_decref(j);
    CHECK(create("{\"d_k\":4,\"d_v\":2,\"heads\":2,\"kv_heads\":1," MODEL_SETTINGS "}",
                 id));
    j = post(spath(id, "/attention"), "{\"q\":[[[1,0,0,1]],[[0,1,1,0]]],"
             "\"k\":[[[1,0,0,0]]],\"v\":[[[1,2]]]}", &st);
    CHECK_EQ_INT(st, 200);
    m = json_object_get(json_object_get(j, "meta"), "sink_logit");
    CHECK(json_is_array(m) && json_array_size(m) == 2);
    CHECK(json_number_value(json_array_get(m, 1)) == -1);
    json_decref(j);
}

/* A session decode step equals the stateless request over all of its rows
 * with the same settings, bit for bit in float64. */
TEST(session_step_equals_stateless)
{
    char id[128], *a, *b;
    struct api_response r;

    CHECK(create("{\"d_k\":4,\"d_v\":2,\"heads\":2,\"kv_heads\":1,"
                 MODEL_SETTINGS "}", id));
    t_call(&ctx, "POST", spath(id, "/kv"), "{\"k\":[[1,0,2,0],[0,1,0,-1]],"
           "\"v\":[[1,2],[3,4]]}", &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    a = post_text(spath(id, "/attention"), "{\"q\":[[[1,1,0,1]],[[0,2,1,0]]],"
                  "\"k\":[[0.5,0.5,1,1]],\"v\":[[5,6]],\"causal\":true,"
                  "\"window\":{\"left\":1,\"sinks\":1}}");
    b = post_text("/v1/attention", "{\"q\":[[[1,1,0,1]],[[0,2,1,0]]],"
                  "\"k\":[[[1,0,2,0],[0,1,0,-1],[0.5,0.5,1,1]]],"
                  "\"v\":[[[1,2],[3,4],[5,6]]],\"causal\":true,"
                  "\"window\":{\"left\":1,\"sinks\":1}," MODEL_SETTINGS "}");
    CHECK(a && b);
    if (a && b)
        CHECK(strncmp(a, b, (size_t)(strstr(a, "\"meta\"") - a)) == 0);
    free(a);
    free(b);
}

/* The same with yarn's "truncate": false (gpt-oss): the session keeps it
 * (its step equals the stateless request with false, bit for bit, and
 * differs from the one with the default, true: pair 1's frequency differs
 * by 0.009, 0.018 rad at position 2). */
TEST(session_step_yarn_truncate_false)
{
    char id[128], *a, *b, *t;
    struct api_response r;

    CHECK(create("{\"d_k\":4,\"d_v\":2,\"heads\":2,\"kv_heads\":1,"
                 GPTOSS_LIKE(",\"truncate\":false") "}", id));
    t_call(&ctx, "POST", spath(id, "/kv"), "{\"k\":[[1,0,2,0],[0,1,0,-1]],"
           "\"v\":[[1,2],[3,4]]}", &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    a = post_text(spath(id, "/attention"), "{\"q\":[[[1,1,0,1]],[[0,2,1,0]]],"
                  "\"causal\":true,\"k\":[[0.5,0.5,1,1]],\"v\":[[5,6]]}");
    b = post_text("/v1/attention", "{\"q\":[[[1,1,0,1]],[[0,2,1,0]]],\"causal\":true,"
                  "\"k\":[[[1,0,2,0],[0,1,0,-1],[0.5,0.5,1,1]]],"
                  "\"v\":[[[1,2],[3,4],[5,6]]]," GPTOSS_LIKE(",\"truncate\":false") "}");
    t = post_text("/v1/attention", "{\"q\":[[[1,1,0,1]],[[0,2,1,0]]],\"causal\":true,"
                  "\"k\":[[[1,0,2,0],[0,1,0,-1],[0.5,0.5,1,1]]],"
                  "\"v\":[[[1,2],[3,4],[5,6]]]," GPTOSS_LIKE("") "}");
    CHECK(a && b && t);
    if (a && b && t) {
        size_t at = (size_t)(strstr(a, "\"meta\"") - a);
        CHECK(strncmp(a, b, at) == 0);
        CHECK(strncmp(a, t, at) != 0);
    }
    free(a);
    free(b);
    free(t);
}

/* /v1/attention: truncate absent or null (as every member) equals true
 * bit for bit, false differs. */
TEST(yarn_truncate_answers)
{
    static const char *const forms[4] = {"", ",\"truncate\":true", ",\"truncate\":null",
                                         ",\"truncate\":false"};
    char body[1024], *out[4];

    for (int i = 0; i < 4; i++) {
        snprintf(body, sizeof body, "{\"q\":[[1,0.5,-1,2]],\"k\":[[1,0,2,0],[0,1,0,-1]],"
                 "\"v\":[[1,2],[3,4]],\"positions\":{\"q\":[700],\"k\":[3,650]},"
                 "\"return\":[\"qk\",\"output\"],\"rope\":{\"base\":100,"
                 "\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
                 "\"original_max_position\":256%s}}}", forms[i]);
        out[i] = post_text("/v1/attention", body);
    }
    CHECK(out[0] && out[1] && out[2] && out[3]);
    if (out[0] && out[1] && out[2] && out[3]) {
        size_t at = (size_t)(strstr(out[0], "\"meta\"") - out[0]);
        CHECK(strncmp(out[0], out[1], at) == 0);
        CHECK(strncmp(out[0], out[2], at) == 0);
        CHECK(strncmp(out[0], out[3], at) != 0);
    }
    for (int i = 0; i < 4; i++)
        free(out[i]);
}

/* ---- OIP v2 ----------------------------------------------------------------- */

#define V2_INFER "/v2/models/attention/infer"
#define T(name, shape, dt, data) \
    "{\"name\":\"" name "\",\"shape\":" shape ",\"datatype\":\"" dt "\",\"data\":" data "}"
#define V2_QKV T("q", "[1,2]", "FP64", "[1,0]") "," T("k", "[2,2]", "FP64", "[1,0,0,1]") \
    "," T("v", "[2,2]", "FP64", "[1,2,3,4]")
#define V2_QKV4 T("q", "[2,1,1,2]", "FP64", "[1,0,0,1]") "," \
    T("k", "[2,1,2,2]", "FP64", "[1,0,0,1,1,1,0,1]") "," \
    T("v", "[2,1,2,2]", "FP64", "[1,2,3,4,5,6,7,8]")

struct v2_case {
    const char *body;
    const char *where;      /* the JSON pointer the error text names */
};

static const struct v2_case v2_cases[] = {
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"softcap\":0}}", "/parameters/softcap"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"window_left\":-1}}",
     "/parameters/window_left"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"window_sinks\":1.5}}",
     "/parameters/window_sinks"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_dims\":3}}", "/parameters/rope_dims"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"dynamic\"}}",
     "/parameters/rope_scaling"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_factor\":2}}",
     "/parameters/rope_factor"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"linear\"}}",
     "/parameters/rope_factor"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"linear\","
     "\"rope_factor\":2,\"rope_beta_fast\":3}}", "/parameters/rope_beta_fast"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"yarn\","
     "\"rope_factor\":2,\"rope_original_max_position\":8,\"rope_attention_factor\":-1}}",
     "/parameters/rope_attention_factor"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"yarn\","
     "\"rope_factor\":2,\"rope_original_max_position\":8,\"rope_truncate\":\"false\"}}",
     "/parameters/rope_truncate"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"yarn\","
     "\"rope_factor\":2,\"rope_original_max_position\":8,\"rope_truncate\":0}}",
     "/parameters/rope_truncate"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_truncate\":false}}",
     "/parameters/rope_truncate"},
    {"{\"inputs\":[" V2_QKV "],\"parameters\":{\"rope_scaling\":\"linear\","
     "\"rope_factor\":2,\"rope_truncate\":false}}", "/parameters/rope_truncate"},
    {"{\"inputs\":[" V2_QKV "," T("positions_q", "[1]", "INT64", "[-1]") "]}",
     "/inputs/3/data"},
    {"{\"inputs\":[" V2_QKV "," T("positions_q", "[1]", "FP64", "[1]") "]}",
     "/inputs/3/datatype"},
    {"{\"inputs\":[" V2_QKV "," T("positions_k", "[3]", "INT32", "[0,1,2]") "]}",
     "/inputs/3/shape"},
    {"{\"inputs\":[" V2_QKV "," T("positions_k", "[2]", "INT32", "[0,0.5]") "]}",
     "/inputs/3/data/1"},
    {"{\"inputs\":[" V2_QKV "," T("segments_q", "[1]", "INT64", "[0]") "]}", "/inputs/3"},
    {"{\"inputs\":[" V2_QKV "," T("sink_logits", "[2]", "FP64", "[0,1]") "],"
     "\"parameters\":{\"softmax\":\"sink\"}}", "/inputs/3/shape"},
    {"{\"inputs\":[" V2_QKV "," T("sink_logits", "[1]", "FP64", "[0]") "]}", "/inputs/3"},
    {"{\"inputs\":[" T("q", "[2,1,1,2]", "FP64", "[1,0,0,1]") ","
     T("k", "[1,2,2]", "FP64", "[1,0,0,1]") "," T("v", "[1,2,2]", "FP64", "[1,2,3,4]") "]}",
     "/inputs/1/shape"},
    {"{\"inputs\":[" T("q", "[2,1,1,2]", "FP64", "[1,0,0,1]") ","
     T("k", "[1,1,2,2]", "FP64", "[1,0,0,1]") "," T("v", "[1,1,2,2]", "FP64", "[1,2,3,4]")
     "]}", "/inputs/1/shape"},
    {"{\"inputs\":[" V2_QKV4 "," T("mask", "[3,1,1,2]", "BOOL",
     "[true,true,true,true,true,true]") "]}", "/inputs/3/shape"},
    {"{\"inputs\":[" V2_QKV "," T("positions_q", "[1]", "INT64", "[0]") "],"
     "\"parameters\":{\"sequence_id\":7,\"sequence_start\":true}}", "/inputs/3"},
};

TEST(v2_refusals)
{
    for (size_t i = 0; i < sizeof v2_cases / sizeof v2_cases[0]; i++) {
        struct api_response r;
        json_t *j;
        const char *e;

        t_call(&ctx, "POST", V2_INFER, v2_cases[i].body, &r);
        j = t_json(&r);
        e = json_string_value(json_object_get(j, "error"));
        if (r.status != 400 || !e || !strstr(e, v2_cases[i].where))
            printf("  v2 case %zu: %s\n    -> %d %.*s\n", i, v2_cases[i].body,
                   r.status, (int)r.body_len, r.body ? r.body : "");
        CHECK_EQ_INT(r.status, 400);
        CHECK(e && strstr(e, v2_cases[i].where));
        json_decref(j);
        api_response_free(&r);
    }
}

/* The flat data of output `name` of a v2 answer. */
static json_t *v2_output(json_t *j, const char *name)
{
    json_t *outs = json_object_get(j, "outputs");
    for (size_t i = 0; i < json_array_size(outs); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(outs, i), "name")),
                   name) == 0)
            return json_array_get(outs, i);
    return NULL;
}

/* Flatten nested arrays of numbers into a new array. */
static void flatten_into(json_t *out, const json_t *m)
{
    if (!json_is_array(m)) {
        json_array_append(out, (json_t *)m);
        return;
    }
    for (size_t i = 0; i < json_array_size(m); i++)
        flatten_into(out, json_array_get(m, i));
}

/* OIP v2 with every new option equals /v1/attention with the same ones. */
TEST(v2_equals_v1)
{
    int st;
    json_t *a = post(V2_INFER, "{\"inputs\":[" V2_QKV4 ","
        T("positions_k", "[2,2]", "INT32", "[0,1,4,9]") ","
        T("segments_q", "[1]", "INT64", "[1]") "," T("segments_k", "[2,2]", "INT64",
        "[1,1,0,1]") "," T("sink_logits", "[1]", "FP64", "[0.5]") "],"
        "\"parameters\":{\"softmax\":\"sink\",\"softcap\":0.9,\"causal\":true,"
        "\"window_left\":5,\"window_sinks\":1,\"rope_dims\":2,\"rope_scaling\":\"llama3\","
        "\"rope_factor\":8,\"rope_low_freq_factor\":1,\"rope_high_freq_factor\":4,"
        "\"rope_original_max_position\":4}}", &st);
    json_t *b = post("/v1/attention", "{" QKV4 ",\"positions\":{\"k\":[[0,1],[4,9]]},"
        "\"segments\":{\"q\":[1],\"k\":[[1,1],[0,1]]},\"softmax\":\"sink\","
        "\"sink_logit\":[0.5],\"softcap\":0.9,\"causal\":true,"
        "\"window\":{\"left\":5,\"sinks\":1},\"rope\":{\"dims\":2,\"scaling\":"
        "{\"type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4,"
        "\"original_max_position\":4}}}", &st);
    json_t *o = v2_output(a, "output"), *flat = json_array();

    CHECK(o != NULL);
    flatten_into(flat, json_object_get(b, "output"));
    CHECK(same(json_object_get(o, "data"), flat));
    CHECK_EQ_INT(json_array_size(json_object_get(o, "shape")), 4);
    json_decref(flat);
    json_decref(a);
    json_decref(b);
}

/* OIP v2's rope_truncate equals /v1's scaling.truncate (false and true),
 * and the two values answer differently. */
TEST(v2_yarn_truncate_equals_v1)
{
    static const char *const vals[2] = {"false", "true"};
    json_t *out[2] = {NULL, NULL};
    char body[2048];
    int st;

    for (int i = 0; i < 2; i++) {
        snprintf(body, sizeof body, "{\"inputs\":[" T("q", "[1,1,4]", "FP64", "[1,0.5,-1,2]")
                 "," T("k", "[1,2,4]", "FP64", "[1,0,2,0,0,1,0,-1]") ","
                 T("v", "[1,2,2]", "FP64", "[1,2,3,4]") ","
                 T("positions_q", "[1]", "INT64", "[700]") ","
                 T("positions_k", "[2]", "INT64", "[3,650]") "],"
                 "\"parameters\":{\"rope_base\":100,\"rope_scaling\":\"yarn\","
                 "\"rope_factor\":4,\"rope_original_max_position\":256,"
                 "\"rope_truncate\":%s}}", vals[i]);
        json_t *a = post(V2_INFER, body, &st);
        CHECK_EQ_INT(st, 200);
        snprintf(body, sizeof body, "{\"q\":[[1,0.5,-1,2]],\"k\":[[1,0,2,0],[0,1,0,-1]],"
                 "\"v\":[[1,2],[3,4]],\"positions\":{\"q\":[700],\"k\":[3,650]},"
                 "\"rope\":{\"base\":100,\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
                 "\"original_max_position\":256,\"truncate\":%s}}}", vals[i]);
        json_t *b = post("/v1/attention", body, &st);
        CHECK_EQ_INT(st, 200);
        json_t *o = v2_output(a, "output"), *flat = json_array();
        flatten_into(flat, json_object_get(b, "output"));
        CHECK(o && same(json_object_get(o, "data"), flat));
        out[i] = flat;
        json_decref(a);
        json_decref(b);
    }
    CHECK(!same(out[0], out[1]));
    json_decref(out[0]);
    json_decref(out[1]);
}

/* A v2 input tensor {name, datatype, shape, data} from a flat list. */
static json_t *v2_input(const char *name, const char *dt, const size_t *shape, int rank,
                        json_t *data)
{
    json_t *sh = json_array();
    for (int i = 0; i < rank; i++)
        json_array_append_new(sh, json_integer((json_int_t)shape[i]));
    return json_pack("{s:s,s:s,s:o,s:o}", "name", name, "datatype", dt, "shape", sh,
                     "data", data);
}

/* OIP v2 broadcasts attn_bias and mask as the design says: [n,L], [h,n,L],
 * [1,h,n,L], [B,h,n,L], [B,1,n,L] (PyTorch's per-batch mask) and
 * [1,1,n,L] each give the output of v1 with the matrix spelled out per
 * batch element and head. */
TEST(v2_score_broadcasts)
{
    enum { B = 2, H = 3, N = 2, L = 3, D = 2 };
    static const size_t forms[6][4] = {{N, L}, {H, N, L}, {1, H, N, L}, {B, H, N, L},
                                       {B, 1, N, L}, {1, 1, N, L}};
    static const int ranks[6] = {2, 3, 4, 4, 4, 4};
    uint64_t rng = 99;
    json_t *q = json_array(), *k = json_array(), *v = json_array();
    for (size_t i = 0; i < B * H * N * D; i++)
        json_array_append_new(q, json_real((double)(t_rng_next(&rng) % 200) / 64 - 1.5));
    for (size_t i = 0; i < B * L * D; i++) {
        json_array_append_new(k, json_real((double)(t_rng_next(&rng) % 200) / 64 - 1.5));
        json_array_append_new(v, json_real((double)(t_rng_next(&rng) % 200) / 64 - 1.5));
    }
    static const size_t qs[4] = {B, H, N, D}, ks[4] = {B, 1, L, D};
    for (int f = 0; f < 6; f++)
        for (int which = 0; which < 2; which++) {      /* mask, attn_bias */
            const size_t *sh = forms[f];
            size_t count = 1;
            for (int i = 0; i < ranks[f]; i++)
                count *= sh[i];
            json_t *flat = json_array();
            for (size_t i = 0; i < count; i++)
                json_array_append_new(flat, which ? json_real((double)(i % 7) / 4 - 0.5)
                                                  : json_boolean(i % 5 != 1));
            /* v1: the same matrix spelled out as [B][H][N][L] */
            json_t *full = json_array();
            size_t bh = ranks[f] == 4 ? sh[0] : 1, hh = ranks[f] >= 3 ? sh[ranks[f] - 3] : 1;
            for (size_t b = 0; b < B; b++) {
                json_t *eb = json_array();
                for (size_t h = 0; h < H; h++) {
                    json_t *eh = json_array();
                    size_t base = ((bh == 1 ? 0 : b) * hh + (hh == 1 ? 0 : h)) * N * L;
                    for (size_t i = 0; i < N; i++) {
                        json_t *row = json_array();
                        for (size_t j = 0; j < L; j++)
                            json_array_append(row, json_array_get(flat, base + i * L + j));
                        json_array_append_new(eh, row);
                    }
                    json_array_append_new(eb, eh);
                }
                json_array_append_new(full, eb);
            }
            json_t *inputs = json_pack("[o,o,o,o]",
                v2_input("q", "FP64", qs, 4, json_deep_copy(q)),
                v2_input("k", "FP64", ks, 4, json_deep_copy(k)),
                v2_input("v", "FP64", ks, 4, json_deep_copy(v)),
                v2_input(which ? "attn_bias" : "mask", which ? "FP64" : "BOOL", sh, ranks[f],
                         flat));
            json_t *body2 = json_pack("{s:o}", "inputs", inputs);
            char *t2 = json_dumps(body2, JSON_COMPACT);
            int st;
            json_t *a = post(V2_INFER, t2, &st);
            CHECK_EQ_INT(st, 200);
            /* v1 q [B][H][N][D] etc. from the flat lists */
            json_t *b1 = json_object();
            static const char *const names[3] = {"q", "k", "v"};
            json_t *lists[3] = {q, k, v};
            for (int m = 0; m < 3; m++) {
                size_t hm = m ? 1 : H, rows = m ? L : N, at = 0;
                json_t *t4 = json_array();
                for (size_t b = 0; b < B; b++) {
                    json_t *eb = json_array();
                    for (size_t h = 0; h < hm; h++) {
                        json_t *eh = json_array();
                        for (size_t i = 0; i < rows; i++) {
                            json_t *row = json_array();
                            for (size_t d = 0; d < D; d++)
                                json_array_append(row, json_array_get(lists[m], at++));
                            json_array_append_new(eh, row);
                        }
                        json_array_append_new(eb, eh);
                    }
                    json_array_append_new(t4, eb);
                }
                json_object_set_new(b1, names[m], t4);
            }
            json_object_set_new(b1, which ? "attn_bias" : "mask", full);
            char *t1 = json_dumps(b1, JSON_COMPACT);
            json_t *e = post("/v1/attention", t1, &st);
            CHECK_EQ_INT(st, 200);
            json_t *o = v2_output(a, "output"), *fl = json_array();
            flatten_into(fl, json_object_get(e, "output"));
            bool eq = o && same(json_object_get(o, "data"), fl);
            if (!eq)
                printf("  form %d %s differs\n", f, which ? "attn_bias" : "mask");
            CHECK(eq);
            json_decref(fl);
            json_decref(e);
            json_decref(a);
            free(t1);
            free(t2);
            json_decref(b1);
            json_decref(body2);
        }
    json_decref(q);
    json_decref(k);
    json_decref(v);
}

int main(void)
{
    t_ctx_init(&ctx);
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    ctx.store = sess_store_new(&cfg);
    RUN(attention_refusals);
    RUN(float32_bound_in_message_is_taken);
    RUN(session_create_refusals);
    RUN(session_settings_echoed);
    RUN(session_window_refusal);
    RUN(batch_equals_its_elements);
    RUN(batch_mask_broadcasts);
    RUN(batch_positions_segments_per_element);
    RUN(meta_sink_logits_per_head);
    RUN(session_step_equals_stateless);
    RUN(session_step_yarn_truncate_false);
    RUN(yarn_truncate_answers);
    RUN(v2_refusals);
    RUN(v2_equals_v1);
    RUN(v2_yarn_truncate_equals_v1);
    RUN(v2_score_broadcasts);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
