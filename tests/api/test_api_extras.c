/*
 * tests/api/test_api_extras.c — the part-2 returns in-process: "qk", "lse",
 * "stats", heads, weights_top_k and tokens on /v1/attention and session
 * attention; shapes for 2-D and 3-D q, nulls (masked, empty rows), the
 * top-k padding, the v1 response unchanged without them, and agreement
 * with the full weights of the same request.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/extras.h"
#include "api/internal.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/half_ref.h"
#include "core/store.h"

static struct api_ctx ctx;

static json_t *call(const char *path, const char *body, int *status)
{
    struct api_response r;
    t_call(&ctx, "POST", path, body, &r);
    *status = r.status;
    json_t *j = t_json(&r);
    if (r.status >= 300 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    api_response_free(&r);
    return j;
}

static json_t *post(const char *body, int *status)
{
    return call("/v1/attention", body, status);
}

static double num(const json_t *v)
{
    return json_number_value(v);
}

#define SEED "\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1,0],[0,1],[0,0]]"

TEST(seed_everything)
{
    int st;
    json_t *j = post("{" SEED ",\"return\":[\"scores\",\"weights\",\"output\",\"qk\",\"lse\","
                     "\"stats\"],\"tokens\":{\"q\":[\"q\"],\"k\":[\"k1\",\"k2\",\"k3\"]}}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *qk = json_object_get(j, "qk"), *w = json_object_get(j, "weights");
    json_t *s = json_object_get(j, "scores"), *stats = json_object_get(j, "stats");
    CHECK(json_array_size(qk) == 1 && json_array_size(json_array_get(qk, 0)) == 3);
    /* qk = q·k before the scale: 1, 0, -1; scores = qk / sqrt 2 */
    for (size_t i = 0; i < 3; i++)
        CHECK_NEAR(num(json_array_get(json_array_get(s, 0), i)),
                   num(json_array_get(json_array_get(qk, 0), i)) / sqrt(2.0), 1e-15);
    CHECK_NEAR(num(json_array_get(json_array_get(qk, 0), 2)), -1, 0);
    double lse = num(json_array_get(json_object_get(j, "lse"), 0));
    CHECK_NEAR(lse, log(exp(1 / sqrt(2.0)) + 1 + exp(-1 / sqrt(2.0))), 1e-15);
    /* p_j = exp(s_j - lse) */
    for (size_t i = 0; i < 3; i++)
        CHECK_NEAR(num(json_array_get(json_array_get(w, 0), i)),
                   exp(num(json_array_get(json_array_get(s, 0), i)) - lse), 1e-15);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(stats, "argmax"), 0)), 0);
    CHECK_NEAR(num(json_array_get(json_object_get(stats, "mass"), 0)), 1, 0);
    CHECK_NEAR(num(json_array_get(json_object_get(stats, "max_weight"), 0)), 0.575975, 5e-7);
    double ent = 0;
    for (size_t i = 0; i < 3; i++) {
        double p = num(json_array_get(json_array_get(w, 0), i));
        ent -= p * log(p);
    }
    CHECK_NEAR(num(json_array_get(json_object_get(stats, "entropy"), 0)), ent, 1e-14);
    json_t *tok = json_object_get(json_object_get(j, "meta"), "tokens");
    CHECK(json_array_size(json_object_get(tok, "k")) == 3);
    CHECK(strcmp(json_string_value(json_array_get(json_object_get(tok, "q"), 0)), "q") == 0);
    CHECK(!json_object_get(json_object_get(j, "meta"), "heads_returned"));
    json_decref(j);
}

/* Without the new fields the response is the v1 one: no extra members. */
TEST(v1_response_unchanged)
{
    int st;
    json_t *j = post("{" SEED "}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_object_size(j) == 4);
    CHECK(!json_object_get(json_object_get(j, "meta"), "tokens"));
    json_decref(j);
}

/* tokens.q or tokens.k null counts as absent (README: an optional
 * member's null does): the other side is echoed alone, as when it is left
 * out, and both null is as neither given. */
TEST(tokens_null_side_is_absent)
{
    int st, st0;
    json_t *j0 = post("{" SEED ",\"tokens\":{\"k\":[\"a\",\"b\",\"c\"]}}", &st0);
    json_t *j = post("{" SEED ",\"tokens\":{\"q\":null,\"k\":[\"a\",\"b\",\"c\"]}}", &st);
    CHECK_EQ_INT(st0, 200);
    CHECK_EQ_INT(st, 200);
    json_t *tok = json_object_get(json_object_get(j, "meta"), "tokens");
    CHECK(json_object_size(tok) == 1 && json_array_size(json_object_get(tok, "k")) == 3);
    CHECK(json_equal(tok, json_object_get(json_object_get(j0, "meta"), "tokens")));
    json_decref(j);
    json_decref(j0);
    j = post("{" SEED ",\"tokens\":{\"q\":[\"x\"],\"k\":null}}", &st);
    CHECK_EQ_INT(st, 200);
    tok = json_object_get(json_object_get(j, "meta"), "tokens");
    CHECK(json_object_size(tok) == 1 && json_array_size(json_object_get(tok, "q")) == 1);
    json_decref(j);
    j = post("{" SEED ",\"tokens\":{\"q\":null,\"k\":null}}", &st);
    CHECK_EQ_INT(st, 422);
    json_decref(j);
}

/* Masked keys: qk still holds every product, scores null; a fully masked
 * standard row has lse null, argmax null, mass 0; softmax1 gives lse 0. */
TEST(masked_and_empty_rows)
{
    int st;
    json_t *j = post("{\"q\":[[1,0],[0,1]],\"k\":[[1,0],[0,1]],\"v\":[[1,0],[0,1]],"
                     "\"mask\":[[true,false],[false,false]],"
                     "\"return\":[\"scores\",\"qk\",\"lse\",\"stats\"]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *qk = json_object_get(j, "qk"), *s = json_object_get(j, "scores");
    CHECK(json_is_null(json_array_get(json_array_get(s, 0), 1)));
    CHECK_NEAR(num(json_array_get(json_array_get(qk, 0), 1)), 0, 0);
    CHECK_NEAR(num(json_array_get(json_array_get(qk, 1), 1)), 1, 0);
    json_t *lse = json_object_get(j, "lse"), *stats = json_object_get(j, "stats");
    CHECK_NEAR(num(json_array_get(lse, 0)), 1 / sqrt(2.0), 1e-15);
    CHECK(json_is_null(json_array_get(lse, 1)));
    CHECK(json_is_null(json_array_get(json_object_get(stats, "argmax"), 1)));
    CHECK_NEAR(num(json_array_get(json_object_get(stats, "mass"), 1)), 0, 0);
    json_decref(j);
    j = post("{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"mask\":[[false]],"
             "\"softmax\":\"softmax1\",\"return\":[\"lse\",\"stats\"]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(num(json_array_get(json_object_get(j, "lse"), 0)), 0, 0);
    CHECK(!json_object_get(j, "weights") && !json_object_get(j, "output"));
    json_decref(j);
}

/* "qk" alone still finds the rows with no allowed key: meta.empty_rows
 * lists them (head 1's row 0 of a 3-D q with heads [1]; OIP v2's count)
 * and empty_rows "error" refuses them, as with any other return. */
TEST(qk_alone_reports_empty_rows)
{
    int st;
    json_t *j = post("{\"q\":[[1,0],[0,1]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]],"
                     "\"mask\":[[false,false],[true,true]],\"return\":[\"qk\"]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *e = json_object_get(json_object_get(j, "meta"), "empty_rows");
    CHECK_EQ_INT((int)json_array_size(e), 1);
    CHECK_EQ_INT((int)json_integer_value(json_array_get(e, 0)), 0);
    CHECK_NEAR(num(json_array_get(json_array_get(json_object_get(j, "qk"), 1), 1)), 1, 0);
    json_decref(j);
    j = post("{\"q\":[[[1,0]],[[0,1]]],\"k\":[[[1,0],[0,1]]],\"v\":[[[1],[2]]],"
             "\"mask\":[[[true,true]],[[false,false]]],\"heads\":[1],\"return\":[\"qk\"]}", &st);
    CHECK_EQ_INT(st, 200);
    e = json_object_get(json_object_get(j, "meta"), "empty_rows");
    CHECK_EQ_INT((int)json_array_size(e), 1);
    CHECK_EQ_INT((int)json_integer_value(json_array_get(json_array_get(e, 0), 0)), 1);
    json_decref(j);
    j = post("{\"q\":[[1,0],[0,1]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]],"
             "\"mask\":[[false,false],[true,true]],\"return\":[\"qk\"],"
             "\"empty_rows\":\"error\"}", &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "empty_row");
    json_decref(j);
    j = call("/v2/models/attention/infer", "{\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
             "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
             "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[1,2]},"
             "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[2,2],"
             "\"data\":[false,false,true,true]}],\"outputs\":[{\"name\":\"qk\"}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "parameters"), "empty_rows")), 1);
    json_decref(j);
}

/* 3 heads, heads [2,0]: arrays hold those two heads in that order, equal
 * to the full request's; empty_rows and heads_returned name real heads. */
TEST(heads_subset)
{
    const char *qkv = "\"q\":[[[1,0],[0,1]],[[2,0],[0,2]],[[1,1],[3,0]]],"
                      "\"k\":[[[1,0],[0,1],[1,1]]],\"v\":[[[1,0],[0,1],[2,2]]],"
                      "\"mask\":[[[true,true,true],[true,true,true]],"
                      "[[true,true,true],[true,true,true]],[[false,false,false],[true,true,true]]]";
    char body[1024];
    int st;
    snprintf(body, sizeof body, "{%s}", qkv);
    json_t *full = post(body, &st);
    CHECK_EQ_INT(st, 200);
    snprintf(body, sizeof body, "{%s,\"heads\":[2,0],\"return\":[\"weights\",\"output\",\"qk\"]}",
             qkv);
    json_t *sub = post(body, &st);
    CHECK_EQ_INT(st, 200);
    static const size_t pick[2] = {2, 0};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = 0; i < 2; i++)
            for (size_t k = 0; k < 3; k++)
                CHECK_NEAR(num(json_array_get(json_array_get(json_array_get(
                               json_object_get(sub, "weights"), a), i), k)),
                           num(json_array_get(json_array_get(json_array_get(
                               json_object_get(full, "weights"), pick[a]), i), k)), 1e-15);
    json_t *meta = json_object_get(sub, "meta");
    json_t *hr = json_object_get(meta, "heads_returned");
    CHECK(json_array_size(hr) == 2 && json_integer_value(json_array_get(hr, 0)) == 2);
    json_t *er = json_object_get(meta, "empty_rows");
    CHECK(json_array_size(er) == 1 &&
          json_integer_value(json_array_get(json_array_get(er, 0), 0)) == 2);
    CHECK_EQ_INT(json_array_size(json_object_get(sub, "qk")), 2);
    json_decref(full);
    json_decref(sub);
}

/* Top-k: largest first, ties to the lower index, padding -1 / 0, values
 * equal to the full weights. */
TEST(top_k_order_ties_padding)
{
    int st;
    const char *qkv = "\"q\":[[1,0],[0,0]],\"k\":[[0,1],[1,0],[0,1],[-1,0]],"
                      "\"v\":[[1],[2],[3],[4]],\"mask\":[[true,true,true,false],"
                      "[true,true,true,true]]";
    char body[512];
    snprintf(body, sizeof body, "{%s,\"return\":[\"weights\"],\"weights_top_k\":5}", qkv);
    json_t *j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    json_t *w = json_object_get(j, "weights");
    json_t *ix = json_object_get(w, "indices"), *vals = json_object_get(w, "values");
    /* row 0: key 1 first, keys 0 and 2 tie (0 first), key 3 masked: pads */
    static const long long want0[5] = {1, 0, 2, -1, -1};
    for (size_t t = 0; t < 5; t++)
        CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(ix, 0), t)), want0[t]);
    CHECK_NEAR(num(json_array_get(json_array_get(vals, 0), 4)), 0, 0);
    /* row 1: q = 0, every score 0: 0,1,2,3 by index, each 1/4 */
    for (size_t t = 0; t < 4; t++) {
        CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(ix, 1), t)), (long long)t);
        CHECK_NEAR(num(json_array_get(json_array_get(vals, 1), t)), 0.25, 1e-16);
    }
    json_decref(j);
    snprintf(body, sizeof body, "{%s}", qkv);
    json_t *full = post(body, &st);
    snprintf(body, sizeof body, "{%s,\"weights_top_k\":2,\"dtype\":\"float64\"}", qkv);
    j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_object_get(j, "scores") && json_object_get(j, "output"));
    vals = json_object_get(json_object_get(j, "weights"), "values");
    CHECK_NEAR(num(json_array_get(json_array_get(vals, 0), 0)),
               num(json_array_get(json_array_get(json_object_get(full, "weights"), 0), 1)), 1e-16);
    json_decref(j);
    json_decref(full);
}

/* base64: the top-k values and lse travel as base64 matrices, indices as
 * nested integers. */
TEST(base64_encoding)
{
    int st;
    json_t *j = post("{" SEED ",\"encoding\":\"base64\",\"return\":[\"weights\",\"lse\"],"
                     "\"weights_top_k\":2}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *w = json_object_get(j, "weights");
    CHECK(json_is_array(json_object_get(w, "indices")));
    CHECK(json_is_string(json_object_get(json_object_get(w, "values"), "data")));
    CHECK(json_is_string(json_object_get(json_object_get(j, "lse"), "data")));
    json_decref(j);
}

TEST(session_attention)
{
    int st;
    json_t *j = call("/v1/sessions", "{\"d_k\":2,\"d_v\":2,\"heads\":2,\"kv_heads\":1}", &st);
    CHECK_EQ_INT(st, 201);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/attention",
             json_string_value(json_object_get(j, "id")));
    json_decref(j);
    j = call(path, "{\"q\":[[[1,0]],[[0,1]]],\"k\":[[[1,0],[0,1],[-1,0]]],"
                   "\"v\":[[[1,0],[0,1],[0,0]]],\"heads\":[1],\"return\":[\"weights\",\"qk\","
                   "\"stats\"],\"weights_top_k\":1,\"tokens\":{\"k\":[\"a\",\"b\",\"c\"]}}", &st);
    CHECK_EQ_INT(st, 200);
    /* head 1's query (0,1) against keys (1,0),(0,1),(-1,0): key 1 */
    json_t *ix = json_object_get(json_object_get(j, "weights"), "indices");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(json_array_get(ix, 0), 0), 0)),
                 1);
    CHECK_NEAR(num(json_array_get(json_array_get(json_array_get(json_object_get(j, "qk"), 0),
                                                 0), 1)), 1, 0);
    CHECK(json_object_get(json_object_get(j, "meta"), "tokens"));
    json_decref(j);
    /* the cache now holds 3 rows: tokens.k must label 3 keys */
    j = call(path, "{\"q\":[[[1,0]],[[0,1]]],\"tokens\":{\"k\":[\"a\"]}}", &st);
    CHECK_EQ_INT(st, 422);
    json_decref(j);
}

/* OIP v2: tokens as a BYTES input echoed, heads as a string, top-k, lse,
 * argmax as INT64 outputs. */
TEST(v2_outputs)
{
    int st;
    json_t *j = call("/v2/models/attention/infer",
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,1,2],"
        "\"data\":[1,0,0,1]},{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,3,2],"
        "\"data\":[1,0,0,1,-1,0]},{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,3,1],"
        "\"data\":[1,2,3]},{\"name\":\"tokens_k\",\"datatype\":\"BYTES\",\"shape\":[3],"
        "\"data\":[\"a\",\"b\",\"c\"]}],\"parameters\":{\"heads\":\"1\",\"weights_top_k\":4},"
        "\"outputs\":[{\"name\":\"top_k_indices\"},{\"name\":\"top_k_values\"},{\"name\":\"lse\"},"
        "{\"name\":\"argmax\"},{\"name\":\"tokens_k\"}]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *outs = json_object_get(j, "outputs");
    CHECK_EQ_INT(json_array_size(outs), 5);
    json_t *ti = json_array_get(outs, 2);       /* lse, argmax, then top-k: table order */
    for (size_t i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        if (strcmp(name, "top_k_indices") == 0)
            ti = o;
        if (strcmp(name, "tokens_k") == 0)
            CHECK(strcmp(json_string_value(json_object_get(o, "datatype")), "BYTES") == 0);
        if (strcmp(name, "argmax") == 0)
            CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(o, "data"), 0)), 1);
    }
    /* head 1's query (0,1): key 1, then keys 0 and 2 tie (0 first), then padding */
    json_t *d = json_object_get(ti, "data");
    CHECK(json_array_size(json_object_get(ti, "shape")) == 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(d, 0)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(d, 1)), 0);
    CHECK_EQ_INT(json_integer_value(json_array_get(d, 2)), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(d, 3)), -1);
    json_decref(j);
}

/* OIP v2's heads and weights_top_k take an integral real such as 1.0, as
 * /v1's heads and weights_top_k do (and v2's window_*): the same answer as
 * the integers; 1.5 is still refused. */
TEST(v2_integral_reals)
{
    static const char *const fmt = "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\","
        "\"shape\":[2,1,2],\"data\":[1,0,0,1]},{\"name\":\"k\",\"datatype\":\"FP64\","
        "\"shape\":[1,3,2],\"data\":[1,0,0,1,-1,0]},{\"name\":\"v\",\"datatype\":\"FP64\","
        "\"shape\":[1,3,1],\"data\":[1,2,3]}],\"parameters\":{\"heads\":%s,"
        "\"weights_top_k\":%s},\"outputs\":[{\"name\":\"top_k_indices\"},"
        "{\"name\":\"top_k_values\"},{\"name\":\"output\"}]}";
    char body[1024];
    int st[2];
    json_t *j[2];

    snprintf(body, sizeof body, fmt, "1", "2");
    j[0] = call("/v2/models/attention/infer", body, &st[0]);
    snprintf(body, sizeof body, fmt, "1.0", "2.0");
    j[1] = call("/v2/models/attention/infer", body, &st[1]);
    CHECK_EQ_INT(st[0], 200);
    CHECK_EQ_INT(st[1], 200);
    CHECK(j[0] && j[1] && json_equal(json_object_get(j[0], "outputs"),
                                     json_object_get(j[1], "outputs")));
    json_decref(j[0]), json_decref(j[1]);
    static const char *const bad[][2] = {{"1.5", "2"}, {"1", "2.5"}, {"-1.0", "2"},
                                          {"1", "0.0"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, fmt, bad[i][0], bad[i][1]);
        json_decref(call("/v2/models/attention/infer", body, &st[0]));
        CHECK_EQ_INT(st[0], 400);
    }
}

/* Random numbers as a JSON array of shape [a][b][c] (a 0: [b][c]). */
static json_t *rand_arr(uint64_t *rng, size_t a, size_t b, size_t c)
{
    json_t *o = json_array();
    for (size_t i = 0; i < (a ? a : 1); i++) {
        json_t *m = json_array();
        for (size_t r = 0; r < b; r++) {
            json_t *row = json_array();
            for (size_t t = 0; t < c; t++)
                json_array_append_new(row, json_real(
                    (double)(t_rng_next(rng) >> 11) / 9007199254740992.0 * 2 - 1));
            json_array_append_new(m, row);
        }
        if (!a)
            return m;
        json_array_append_new(o, m);
    }
    return o;
}

static json_t *post_json(json_t *body, int *st)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_t *j = post(text, st);
    free(text);
    return j;
}

/* Rank-4 q with every extra: element b of each returned array equals the
 * same request of element b alone (rank 3), in every number. */
TEST(batch_extras_equal_elements)
{
    uint64_t rng = 42;
    size_t B = 3, h = 2, n = 3, L = 5, d = 4;
    json_t *q = json_array(), *k = json_array(), *v = json_array(), *sq = json_array(),
           *sk = json_array();
    for (size_t b = 0; b < B; b++) {
        json_array_append_new(q, rand_arr(&rng, h, n, d));
        json_array_append_new(k, rand_arr(&rng, 1, L, d));
        json_array_append_new(v, rand_arr(&rng, 1, L, d));
        json_array_append_new(sq, json_pack("[i,i,i]", 0, (int)b % 2, 1));
        json_array_append_new(sk, json_pack("[i,i,i,i,i]", 0, 1, 0, 1, (int)b % 2));
    }
    static const char *const rets[2] = {
        "[\"scores\",\"weights\",\"output\",\"qk\",\"lse\",\"stats\"]",
        "[\"weights\",\"output\",\"lse\"]"};
    for (int variant = 0; variant < 2; variant++) {
        json_t *body = json_pack("{s:O,s:O,s:O,s:{s:O,s:O},s:s,s:o,s:{s:i}}", "q", q, "k", k,
                                 "v", v, "segments", "q", sq, "k", sk, "causal", "bottom_right",
                                 "return", json_loads(rets[variant], 0, NULL), "rope",
                                 "dims", 2);
        if (variant == 1) {
            json_object_set_new(body, "heads", json_pack("[i]", 1));
            json_object_set_new(body, "weights_top_k", json_integer(2));
            json_object_set_new(body, "dtype", json_string("float32"));
        }
        int st;
        json_t *all = post_json(body, &st);
        CHECK_EQ_INT(st, 200);
        static const char *const keys[] = {"scores", "weights", "output", "qk", "lse", "stats"};
        for (size_t b = 0; b < B && st == 200; b++) {
            json_t *one = json_deep_copy(body);
            json_object_set(one, "q", json_array_get(q, b));
            json_object_set(one, "k", json_array_get(k, b));
            json_object_set(one, "v", json_array_get(v, b));
            json_object_set_new(one, "segments", json_pack("{s:O,s:O}", "q",
                                json_array_get(sq, b), "k", json_array_get(sk, b)));
            int st1;
            json_t *e = post_json(one, &st1);
            CHECK_EQ_INT(st1, 200);
            size_t same = 0, present = 0;
            for (size_t t = 0; t < sizeof keys / sizeof keys[0]; t++) {
                json_t *a = json_object_get(all, keys[t]), *x = json_object_get(e, keys[t]);
                if (!x)
                    continue;
                present++;
                json_t *ab = json_is_object(a) ? json_object() : json_incref(json_array_get(a, b));
                if (json_is_object(a)) {    /* stats / top-k: each member at [b] */
                    const char *key;
                    json_t *val;
                    json_object_foreach(a, key, val)
                        json_object_set(ab, key, json_array_get(val, b));
                }
                same += json_equal(ab, x);
                if (!json_equal(ab, x) && getenv("TEST_VERBOSE"))
                    printf("  element %zu differs in %s\n", b, keys[t]);
                json_decref(ab);
            }
            CHECK(present >= 3);
            CHECK_EQ_INT(same, present);
            json_decref(e);
            json_decref(one);
        }
        json_decref(all);
        json_decref(body);
    }
    json_decref(q); json_decref(k); json_decref(v); json_decref(sq); json_decref(sk);
}

/* Segments without positions: the extras equal those of the same request
 * with the positions the segments imply written out. */
TEST(segments_default_positions)
{
    const char *qkv = "\"q\":[[1,0.5],[0.2,1],[-1,0.3]],\"k\":[[1,0],[0,1],[0.5,0.5],[-1,2]],"
                      "\"v\":[[1,0],[0,1],[2,2],[1,1]],\"rope\":true,\"causal\":true,"
                      "\"segments\":{\"q\":[7,3,7],\"k\":[3,7,7,3]},"
                      "\"return\":[\"weights\",\"qk\",\"lse\",\"stats\"]";
    char body[1024];
    int st, st2;
    snprintf(body, sizeof body, "{%s}", qkv);
    json_t *a = post(body, &st);
    CHECK_EQ_INT(st, 200);
    /* segment 7: keys 1, 2 at 0, 1; queries 0, 2 at 2-2+0, 2-2+1.
     * segment 3: keys 0, 3 at 0, 1; query 1 at 2-1+0 */
    snprintf(body, sizeof body, "{%s,\"positions\":{\"q\":[0,1,1],\"k\":[0,0,1,1]}}", qkv);
    json_t *b = post(body, &st2);
    CHECK_EQ_INT(st2, 200);
    static const char *const keys[] = {"weights", "qk", "lse", "stats"};
    for (size_t t = 0; t < 4; t++)
        CHECK(json_equal(json_object_get(a, keys[t]), json_object_get(b, keys[t])));
    json_decref(a);
    json_decref(b);
}

/* The numbers of a nested array appended to flat in row-major order. */
static void flatten(const json_t *a, json_t *flat)
{
    if (!json_is_array(a)) {
        json_array_append(flat, (json_t *)a);
        return;
    }
    for (size_t i = 0; i < json_array_size(a); i++)
        flatten(json_array_get(a, i), flat);
}

/* Every number of a (nested) array: x rounded to the format, against the
 * same position of f32 (the float32 request); counts mismatches. */
static size_t half_mismatches(const struct reffmt *f, const json_t *half, const json_t *f32)
{
    if (json_is_array(half)) {
        size_t bad = json_array_size(half) != json_array_size(f32);
        for (size_t i = 0; !bad && i < json_array_size(half); i++)
            bad += half_mismatches(f, json_array_get(half, i), json_array_get(f32, i));
        return bad;
    }
    if (json_is_null(half) || json_is_null(f32))
        return !(json_is_null(half) && json_is_null(f32));
    if (json_is_integer(f32) && json_is_integer(half))     /* argmax, indices */
        return json_integer_value(half) != json_integer_value(f32);
    /* the float32 text reads back to its float exactly; the half one must
     * be the shortest text of that float rounded to the format */
    uint16_t enc = ref_round(f, (double)(float)num(f32));
    double v = f->vals[enc & 0x7FFF] * (enc & 0x8000 ? -1 : 1);
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (ref_read(f, t) == enc)
            break;
    }
    return strtod(t, NULL) != num(half);
}

/* dtype float16 / bfloat16: every extra (qk, lse, stats, top-k values) is
 * the float32 request's value on the same (exactly representable) inputs,
 * rounded to the dtype; a value past float16's range is 422 naming it. */
TEST(half_extras_rounded)
{
    static struct reffmt *const fmts[2] = {&R16, &RB16};
    static const char *const names[2] = {"float16", "bfloat16"};
    const char *qkv = "\"q\":[[[1.5,-0.25],[0.125,2]],[[0.5,0.75],[-1,1]]],"
                      "\"k\":[[[1,0.5],[0.25,-1.5],[2,2]]],\"v\":[[[1,0],[0,1],[0.5,0.5]]],"
                      "\"causal\":true,\"softmax\":\"softmax1\","
                      "\"return\":[\"weights\",\"output\",\"qk\",\"lse\",\"stats\"],"
                      "\"weights_top_k\":2";
    char body[1024];
    int st;
    snprintf(body, sizeof body, "{%s,\"dtype\":\"float32\"}", qkv);
    json_t *f32 = post(body, &st);
    CHECK_EQ_INT(st, 200);
    for (int f = 0; f < 2; f++) {
        ref_init(fmts[f]);
        snprintf(body, sizeof body, "{%s,\"dtype\":\"%s\"}", qkv, names[f]);
        json_t *h = post(body, &st);
        CHECK_EQ_INT(st, 200);
        static const char *const keys[] = {"qk", "lse", "stats", "weights"};
        for (size_t t = 0; t < 4; t++) {
            const json_t *a = json_object_get(h, keys[t]), *b = json_object_get(f32, keys[t]);
            CHECK(a != NULL);
            const char *key;
            json_t *val;
            if (json_is_object(a))
                json_object_foreach((json_t *)a, key, val)
                    CHECK_EQ_INT(half_mismatches(fmts[f], val, json_object_get(b, key)), 0);
            else
                CHECK_EQ_INT(half_mismatches(fmts[f], a, b), 0);
        }
        json_decref(h);
    }
    /* OIP v2 FP16: the same lse and top-k values as v1's float16 request */
    snprintf(body, sizeof body, "{%s,\"dtype\":\"float16\"}", qkv);
    json_t *h1 = post(body, &st);
    json_t *v2 = call("/v2/models/attention/infer",
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[2,2,2],"
        "\"data\":[1.5,-0.25,0.125,2,0.5,0.75,-1,1]},{\"name\":\"k\",\"datatype\":\"FP16\","
        "\"shape\":[1,3,2],\"data\":[1,0.5,0.25,-1.5,2,2]},{\"name\":\"v\",\"datatype\":"
        "\"FP16\",\"shape\":[1,3,2],\"data\":[1,0,0,1,0.5,0.5]}],\"parameters\":{\"causal\":"
        "true,\"softmax\":\"softmax1\",\"weights_top_k\":2},\"outputs\":[{\"name\":\"lse\"},"
        "{\"name\":\"top_k_values\"},{\"name\":\"entropy\"}]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *outs = json_object_get(v2, "outputs");
    const json_t *want[3] = {json_object_get(h1, "lse"),
                             json_object_get(json_object_get(h1, "weights"), "values"),
                             json_object_get(json_object_get(h1, "stats"), "entropy")};
    for (size_t o = 0; o < json_array_size(outs) && o < 3; o++) {
        json_t *out = json_array_get(outs, o), *flat = json_array();
        CHECK(strcmp(json_string_value(json_object_get(out, "datatype")), "FP16") == 0);
        flatten(want[o], flat);
        CHECK(json_equal(flat, json_object_get(out, "data")));
        json_decref(flat);
    }
    json_decref(v2);
    json_decref(h1);
    json_decref(f32);
    /* q·k = 2·300² = 180000 > 65504: the scores are not returned, qk overflows */
    json_t *j = post("{\"q\":[[300,300]],\"k\":[[300,300]],\"v\":[[1,1]],\"dtype\":\"float16\","
                     "\"scale\":0.0001,\"return\":[\"output\",\"qk\"]}", &st);
    CHECK_EQ_INT(st, 422);
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    CHECK(code && strcmp(code, "non_finite") == 0);
    CHECK(msg && strncmp(msg, "qk ", 3) == 0);
    json_decref(j);
}

/* The same inputs give the same bits whatever the heads subset and
 * `return`: each chosen head's scores, weights and output equal, as JSON
 * numbers (so bit for bit), those of the whole request. */
TEST(heads_subset_bits)
{
    uint64_t rng = 7;
    static const char *const dts[2] = {"float64", "float32"};
    static const char *const rets[3] = {"[\"output\"]", "[\"weights\",\"output\"]",
                                        "[\"scores\",\"weights\",\"output\",\"lse\"]"};
    for (int t = 0; t < 4; t++) {
        size_t n = t < 2 ? 3 : 70, L = t < 2 ? 9 : 90;
        json_t *q = rand_arr(&rng, 4, n, 16), *k = rand_arr(&rng, 2, L, 16),
               *v = rand_arr(&rng, 2, L, 8);
        json_t *full = json_pack("{s:O,s:O,s:O,s:s,s:b}", "q", q, "k", k, "v", v, "dtype",
                                 dts[t % 2], "causal", 1);
        int st;
        json_t *whole = post_json(full, &st);
        CHECK_EQ_INT(st, 200);
        for (int u = 0; u < 3; u++) {
            json_t *sub = json_deep_copy(full);
            json_object_set_new(sub, "heads", json_pack("[i,i]", 3, 1));
            json_object_set_new(sub, "return", json_loads(rets[u], 0, NULL));
            json_t *part = post_json(sub, &st);
            CHECK_EQ_INT(st, 200);
            static const char *const keys[3] = {"scores", "weights", "output"};
            for (int kk = 0; kk < 3; kk++) {
                json_t *a = json_object_get(part, keys[kk]);
                if (!a)
                    continue;
                bool eq = json_equal(json_array_get(a, 0),
                                     json_array_get(json_object_get(whole, keys[kk]), 3)) &&
                          json_equal(json_array_get(a, 1),
                                     json_array_get(json_object_get(whole, keys[kk]), 1));
                if (!eq && getenv("TEST_VERBOSE"))
                    printf("  t=%d u=%d %s differs\n", t, u, keys[kk]);
                CHECK(eq);
            }
            json_decref(part);
            json_decref(sub);
        }
        json_decref(whole);
        json_decref(full);
        json_decref(q); json_decref(k); json_decref(v);
    }
}

/* A response past --max-elements for its weights_top_k alone (k far past
 * L: every row padded to k) names weights_top_k, not "return", whose
 * outputs are the fewest already: /weights_top_k on /v1,
 * /parameters/weights_top_k on /v2. */
TEST(top_k_too_large_names_it)
{
    int st;
    json_t *j = post("{" SEED ",\"return\":[\"weights\"],\"weights_top_k\":2147483647}", &st);
    CHECK_EQ_INT(st, 422);
    json_t *e = json_object_get(j, "error");
    CHECK(strcmp(json_string_value(json_object_get(e, "code")), "response_too_large") == 0);
    CHECK(strcmp(json_string_value(json_object_get(e, "path")), "/weights_top_k") == 0);
    CHECK(strstr(json_string_value(json_object_get(e, "message")), "weights_top_k") != NULL);
    json_decref(j);
    j = call("/v2/models/attention/infer",
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]},"
        "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]},"
        "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]}],"
        "\"parameters\":{\"weights_top_k\":2147483647},"
        "\"outputs\":[{\"name\":\"top_k_values\"}]}", &st);
    CHECK_EQ_INT(st, 400);          /* OIP v2 answers its errors 400 */
    CHECK(strstr(json_string_value(json_object_get(j, "error")),
                 "at /parameters/weights_top_k]") != NULL);
    json_decref(j);
}

/* The extras' one block keeps each part on an 8-byte boundary whatever
 * qk's size: a float32 qk of odd rows x L (here 1 x 3: 12 bytes) left the
 * int64 argmax and top-k indices after it 4 bytes off, a misaligned store
 * (UBSan stopped a v2 request asking qk with argmax or top-k there). */
TEST(block_parts_aligned_after_float32_qk)
{
    for (size_t L = 1; L <= 4; L++) {
        struct attn_request r;
        memset(&r, 0, sizeof r);
        r.shape = (struct attn_shape){.B = 1, .h = 1, .h_kv = 1, .n = 1, .L = L, .d_k = 2,
                                      .d_v = 1};
        r.params.dtype = ATTN_F32;
        r.outputs = ATTN_OUT_OUTPUT;
        struct api_extras x = {.want = ATTN_X_QK | ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK,
                               .nh = 1, .top_k = 3};
        struct attn_result res;
        CHECK(api_extras_alloc(&r, &x, &res));
        const struct attn_extras_out *o = &x.xo;
        CHECK(o->qk && o->argmax && o->top_idx);
        CHECK((uintptr_t)o->argmax % _Alignof(int64_t) == 0);
        CHECK((uintptr_t)o->top_idx % _Alignof(int64_t) == 0);
        CHECK((uintptr_t)o->lse % 8 == 0 && (uintptr_t)o->top_val % 8 == 0);
        api_result_free(&res);
        api_extras_free(&x);
    }
}

int main(void)
{
    struct sess_config cfg = {.max_sessions = 8, .max_cache_bytes = 1 << 20,
                              .default_ttl_s = 600, .default_max_tokens = 4096};
    t_ctx_init(&ctx);
    ctx.store = sess_store_new(&cfg);
    RUN(seed_everything);
    RUN(v1_response_unchanged);
    RUN(tokens_null_side_is_absent);
    RUN(masked_and_empty_rows);
    RUN(qk_alone_reports_empty_rows);
    RUN(heads_subset);
    RUN(top_k_order_ties_padding);
    RUN(base64_encoding);
    RUN(session_attention);
    RUN(v2_outputs);
    RUN(v2_integral_reals);
    RUN(batch_extras_equal_elements);
    RUN(segments_default_positions);
    RUN(half_extras_rounded);
    RUN(heads_subset_bits);
    RUN(top_k_too_large_names_it);
    RUN(block_parts_aligned_after_float32_qk);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
