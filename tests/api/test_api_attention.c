/*
 * tests/api/test_api_attention.c — POST /v1/attention in-process: the seed
 * built-in example (weights with and without Q and K bias, to 6
 * decimals), every request field (bias shared and per head, attn_bias with
 * null, mask, causal both ways, alibi, rope, scale, softmax variants,
 * empty_rows, dtype, return, encoding, digits, base64 inputs), grouped-query
 * heads, output rank = rank of q, and meta.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/codec/base64.h"

static struct api_ctx ctx;

/* POST body; returns the parsed response (new reference) and its status. */
static json_t *post(const char *body, int *status)
{
    struct api_response r;
    json_t *j;

    t_call(&ctx, "POST", "/v1/attention", body, &r);
    *status = r.status;
    j = t_json(&r);
    if (r.status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    api_response_free(&r);
    return j;
}

/* Element i of a flat walk over nested arrays (rank <= 3). */
static double at(const json_t *m, size_t i, size_t j)
{
    return json_number_value(json_array_get(json_array_get(m, i), j));
}

#define SEED_QKV "\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1,0],[0,1],[0,0]]"

TEST(seed_no_bias)
{
    int st;
    json_t *j = post("{" SEED_QKV "}", &st);
    json_t *w = json_object_get(j, "weights"), *s = json_object_get(j, "scores");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(w, 0, 0), 0.575975, 5e-7);
    CHECK_NEAR(at(w, 0, 1), 0.283995, 5e-7);
    CHECK_NEAR(at(w, 0, 2), 0.140029, 5e-7);
    CHECK_NEAR(at(s, 0, 0), 0.707107, 5e-7);
    CHECK_NEAR(at(s, 0, 1), 0.0, 5e-7);
    CHECK_NEAR(at(s, 0, 2), -0.707107, 5e-7);
    /* output = sum_j p_j v_j with v = e1, e2, 0 */
    CHECK_NEAR(at(json_object_get(j, "output"), 0, 0), at(w, 0, 0), 1e-15);
    CHECK_NEAR(at(json_object_get(j, "output"), 0, 1), at(w, 0, 1), 1e-15);
    json_decref(j);
}

TEST(seed_q_bias)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"bias\":{\"q\":[0,1]}}", &st);
    json_t *w = json_object_get(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(w, 0, 0), 0.445808, 5e-7);
    CHECK_NEAR(at(w, 0, 1), 0.445808, 5e-7);
    CHECK_NEAR(at(w, 0, 2), 0.108383, 5e-7);
    json_decref(j);
}

TEST(seed_k_bias_keeps_weights)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"bias\":{\"k\":[3,-2]}}", &st);
    json_t *w = json_object_get(j, "weights"), *s = json_object_get(j, "scores");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(s, 0, 0), 2.828427, 5e-7);
    CHECK_NEAR(at(s, 0, 1), 2.121320, 5e-7);
    CHECK_NEAR(at(s, 0, 2), 1.414214, 5e-7);
    CHECK_NEAR(at(w, 0, 0), 0.575975, 5e-7);
    CHECK_NEAR(at(w, 0, 1), 0.283995, 5e-7);
    CHECK_NEAR(at(w, 0, 2), 0.140029, 5e-7);
    json_decref(j);
}

TEST(seed_both_biases)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"bias\":{\"q\":[0,1],\"k\":[3,-2]}}", &st);
    json_t *w = json_object_get(j, "weights"), *s = json_object_get(j, "scores");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(s, 0, 0), 1.414214, 5e-7);
    CHECK_NEAR(at(s, 0, 1), 1.414214, 5e-7);
    CHECK_NEAR(at(s, 0, 2), 0.0, 5e-7);
    CHECK_NEAR(at(w, 0, 0), 0.445808, 5e-7);
    CHECK_NEAR(at(w, 0, 2), 0.108383, 5e-7);
    json_decref(j);
}

TEST(meta_fields)
{
    int st;
    json_t *j = post("{" SEED_QKV "}", &st);
    json_t *m = json_object_get(j, "meta");

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "heads")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "kv_heads")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "n")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "L")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "d_k")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "d_v")), 2);
    CHECK(json_number_value(json_object_get(m, "scale")) == 1 / sqrt(2.0));
    CHECK_STR(json_string_value(json_object_get(m, "softmax")), "standard");
    CHECK_STR(json_string_value(json_object_get(m, "dtype")), "float64");
    CHECK(json_is_false(json_object_get(m, "causal")));
    CHECK(json_is_array(json_object_get(m, "empty_rows")));
    CHECK_EQ_INT(json_array_size(json_object_get(m, "empty_rows")), 0);
    CHECK(json_is_integer(json_object_get(m, "elapsed_us")));
    json_decref(j);
}

TEST(scale_explicit)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"scale\":2}", &st);
    json_t *s = json_object_get(j, "scores");

    CHECK_EQ_INT(st, 200);
    CHECK(at(s, 0, 0) == 2.0 && at(s, 0, 2) == -2.0);
    CHECK(json_number_value(json_object_get(json_object_get(j, "meta"), "scale")) == 2.0);
    json_decref(j);
}

TEST(return_subset_and_order)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"return\":[\"output\"]}", &st);

    CHECK_EQ_INT(st, 200);
    CHECK(json_object_get(j, "scores") == NULL);
    CHECK(json_object_get(j, "weights") == NULL);
    CHECK(json_is_array(json_object_get(j, "output")));
    CHECK(json_is_object(json_object_get(j, "meta")));
    json_decref(j);
    j = post("{" SEED_QKV ",\"return\":[\"weights\",\"scores\"]}", &st);
    CHECK(json_object_get(j, "output") == NULL);
    CHECK(json_is_array(json_object_get(j, "scores")));
    CHECK(json_is_array(json_object_get(j, "weights")));
    json_decref(j);
}

TEST(attn_bias_null_is_masked)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"attn_bias\":[[0,null,1]]}", &st);
    json_t *s = json_object_get(j, "scores"), *w = json_object_get(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK(json_is_null(json_array_get(json_array_get(s, 0), 1)));
    CHECK(at(w, 0, 1) == 0.0);
    CHECK_NEAR(at(s, 0, 2), -1 / sqrt(2.0) + 1, 1e-15);
    CHECK_NEAR(at(w, 0, 0) + at(w, 0, 2), 1.0, 1e-15);
    json_decref(j);
}

TEST(mask_booleans)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"mask\":[[false,true,true]]}", &st);
    json_t *s = json_object_get(j, "scores"), *w = json_object_get(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK(json_is_null(json_array_get(json_array_get(s, 0), 0)));
    CHECK(at(w, 0, 0) == 0.0);
    CHECK_NEAR(at(w, 0, 1) / at(w, 0, 2), exp(1 / sqrt(2.0)), 1e-12);
    json_decref(j);
}

#define TWO_ROWS "\"q\":[[1,0],[0,1]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1],[2],[3]]"

TEST(causal_bottom_right_and_top_left)
{
    int st;
    /* n=2, L=3: bottom-right puts queries at 1, 2; top-left at 0, 1 */
    json_t *j = post("{" TWO_ROWS ",\"causal\":true}", &st);
    json_t *w = json_object_get(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK(at(w, 0, 2) == 0.0 && at(w, 0, 1) > 0);
    CHECK(at(w, 1, 2) > 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "meta"), "causal")),
              "bottom_right");
    json_decref(j);
    j = post("{" TWO_ROWS ",\"causal\":\"top_left\"}", &st);
    w = json_object_get(j, "weights");
    CHECK_EQ_INT(st, 200);
    CHECK(at(w, 0, 0) == 1.0 && at(w, 0, 1) == 0.0);
    CHECK(at(w, 1, 2) == 0.0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "meta"), "causal")),
              "top_left");
    json_decref(j);
    j = post("{" TWO_ROWS ",\"causal\":\"bottom_right\"}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
}

TEST(empty_rows_zero_and_error)
{
    int st;
    json_t *j = post("{" TWO_ROWS ",\"mask\":[[false,false,false],[true,true,true]]}", &st);
    json_t *m = json_object_get(j, "meta"), *o = json_object_get(j, "output");

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(json_object_get(m, "empty_rows")), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(m, "empty_rows"), 0)), 0);
    CHECK(at(o, 0, 0) == 0.0);
    CHECK(at(json_object_get(j, "weights"), 0, 1) == 0.0);
    json_decref(j);
    j = post("{" TWO_ROWS ",\"mask\":[[false,false,false],[true,true,true]],"
             "\"empty_rows\":\"error\"}", &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "empty_row");
    json_decref(j);
}

TEST(softmax1_and_sink)
{
    int st;
    json_t *j = post("{" SEED_QKV ",\"softmax\":\"softmax1\"}", &st);
    json_t *w = json_object_get(j, "weights");
    double e0 = exp(1 / sqrt(2.0)), e1 = 1, e2 = exp(-1 / sqrt(2.0));

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(w, 0, 0), e0 / (1 + e0 + e1 + e2), 1e-15);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "meta"), "softmax")),
              "softmax1");
    json_decref(j);
    j = post("{" SEED_QKV ",\"softmax\":\"sink\",\"sink_logit\":2}", &st);
    w = json_object_get(j, "weights");
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(w, 0, 1), e1 / (exp(2) + e0 + e1 + e2), 1e-15);
    CHECK(json_number_value(json_object_get(json_object_get(j, "meta"), "sink_logit")) == 2);
    json_decref(j);
}

TEST(dtype_float32)
{
    struct api_response r;
    json_t *j, *w;
    const char *p;
    char text[64];
    size_t n;

    t_call(&ctx, "POST", "/v1/attention", "{" SEED_QKV ",\"dtype\":\"float32\"}", &r);
    CHECK_EQ_INT(r.status, 200);
    j = t_json(&r);
    w = json_object_get(j, "weights");
    CHECK_NEAR(at(w, 0, 0), 0.575975, 5e-7);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "meta"), "dtype")),
              "float32");
    /* the number is printed from float32 (<= 9 significant digits) and
     * reads back with strtof to a float close to the true weight */
    p = r.body ? strstr(r.body, "\"weights\":[[") : NULL;
    CHECK(p != NULL);
    if (p) {
        p += strlen("\"weights\":[[");
        n = strcspn(p, ",]");
        CHECK(n > 0 && n < sizeof text);
        memcpy(text, p, n < sizeof text ? n : sizeof text - 1);
        text[n < sizeof text ? n : sizeof text - 1] = '\0';
        CHECK(strlen(text) <= 11);
        CHECK_NEAR(strtof(text, NULL), 0.575975f, 1e-6);
    }
    json_decref(j);
    api_response_free(&r);
}

TEST(digits_fixed)
{
    struct api_response r;

    t_call(&ctx, "POST", "/v1/attention",
           "{" SEED_QKV ",\"digits\":3,\"return\":[\"weights\"]}", &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body && strstr(r.body, "\"weights\":[[0.576,0.284,0.14]]") != NULL);
    api_response_free(&r);
}

/* The base64 text of n doubles. */
static char *b64_doubles(const double *x, size_t n)
{
    struct api_buf b;
    size_t len;

    api_buf_init(&b, 1 << 20);
    api_base64_encode(&b, x, n * sizeof *x);
    return api_buf_take(&b, &len);
}

TEST(base64_in_and_out)
{
    static const double k[] = {1, 0, 0, 1, -1, 0};
    char *kb = b64_doubles(k, 6), body[1024], *raw;
    int st;
    json_t *j, *w;
    const char *data;
    double wd[3];
    size_t len;

    snprintf(body, sizeof body, "{\"q\":[[1,0]],\"k\":{\"shape\":[3,2],"
             "\"dtype\":\"float64\",\"data\":\"%s\"},\"v\":[[1,0],[0,1],[0,0]],"
             "\"encoding\":\"base64\",\"return\":[\"weights\"]}", kb);
    free(kb);
    j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    w = json_object_get(j, "weights");
    CHECK(json_is_object(w));
    CHECK_STR(json_string_value(json_object_get(w, "dtype")), "float64");
    CHECK_EQ_INT(json_array_size(json_object_get(w, "shape")), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 0)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 1)), 3);
    data = json_string_value(json_object_get(w, "data"));
    CHECK(data && api_base64_decoded_len(data, strlen(data), &len) && len == 24);
    if (data && len == 24) {
        raw = (char *)wd;
        CHECK(api_base64_decode(data, strlen(data), raw));
        CHECK_NEAR(wd[0], 0.575975, 5e-7);
        CHECK_NEAR(wd[2], 0.140029, 5e-7);
    }
    json_decref(j);
}

TEST(base64_float32_input_converted)
{
    static const float q[] = {1, 0};
    struct api_buf b;
    char body[1024], *qb;
    size_t len;
    int st;
    json_t *j;

    api_buf_init(&b, 1024);
    api_base64_encode(&b, q, sizeof q);
    qb = api_buf_take(&b, &len);
    snprintf(body, sizeof body, "{\"q\":{\"shape\":[1,2],\"dtype\":\"float32\","
             "\"data\":\"%s\"},\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1,0],[0,1],[0,0]]}", qb);
    free(qb);
    j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(json_object_get(j, "weights"), 0, 0), 0.575975, 5e-7);
    json_decref(j);
}

/* A mask as base64 bytes ("dtype":"bool") and an attn_bias whose -inf
 * travels as raw IEEE bytes (the base64 twin of null). */
TEST(base64_mask_and_attn_bias)
{
    static const unsigned char mask[] = {0, 1, 1};
    static const double bias[] = {0, -INFINITY, 1};
    struct api_buf b;
    char body[1024], *mb, *bb;
    size_t len;
    int st;
    json_t *j, *w;

    api_buf_init(&b, 1024);
    api_base64_encode(&b, mask, sizeof mask);
    mb = api_buf_take(&b, &len);
    api_base64_encode(&b, bias, sizeof bias);
    bb = api_buf_take(&b, &len);
    snprintf(body, sizeof body, "{" SEED_QKV ",\"mask\":{\"shape\":[1,3],"
             "\"dtype\":\"bool\",\"data\":\"%s\"},\"attn_bias\":{\"shape\":[1,3],"
             "\"dtype\":\"float64\",\"data\":\"%s\"}}", mb, bb);
    j = post(body, &st);
    w = json_object_get(j, "weights");
    CHECK_EQ_INT(st, 200);
    CHECK(at(w, 0, 0) == 0.0 && at(w, 0, 1) == 0.0);   /* masked; -inf */
    CHECK(at(w, 0, 2) == 1.0);
    json_decref(j);
    /* a mask byte other than 0/1 is refused */
    snprintf(body, sizeof body, "{" SEED_QKV ",\"mask\":{\"shape\":[1,3],"
             "\"dtype\":\"bool\",\"data\":\"AAEC\"}}");
    j = post(body, &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "path")),
              "/mask/data");
    json_decref(j);
    free(mb);
    free(bb);
}

/* Two query heads sharing one kv head (GQA); output keeps the head axis. */
TEST(grouped_heads_rank3)
{
    int st;
    json_t *j = post("{\"q\":[[[1,0]],[[0,1]]],\"k\":[[[1,0],[0,1],[-1,0]]],"
                     "\"v\":[[[1,0],[0,1],[0,0]]],\"bias\":{\"q\":[[0,1],[0,0]]}}", &st);
    json_t *w = json_object_get(j, "weights"), *m = json_object_get(j, "meta");
    json_t *w0 = json_array_get(w, 0);

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(w), 2);                  /* [h][n][L] */
    CHECK_EQ_INT(json_array_size(json_array_get(w0, 0)), 3);
    CHECK_NEAR(at(w0, 0, 0), 0.445808, 5e-7);              /* head 0: q+bQ = (1,1) */
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "heads")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "kv_heads")), 1);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "output")), 2);
    json_decref(j);
}

TEST(empty_rows_rank3_pairs)
{
    int st;
    json_t *j = post("{\"q\":[[[1,0]],[[0,1]]],\"k\":[[[1,0]]],\"v\":[[[1]]],"
                     "\"mask\":[[[true]],[[false]]]}", &st);
    json_t *e = json_object_get(json_object_get(j, "meta"), "empty_rows");

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(e), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(e, 0), 0)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(e, 0), 1)), 0);
    json_decref(j);
}

TEST(alibi_standard_and_slopes)
{
    int st;
    /* one head: slope 2^-8; query at position 2, keys 0..2 */
    json_t *a = post("{" SEED_QKV ",\"alibi\":true}", &st);
    json_t *b = post("{" SEED_QKV ",\"alibi\":{\"slopes\":[0.5]}}", &st);
    double slope = pow(2, -8);

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(json_object_get(a, "scores"), 0, 0), 1 / sqrt(2.0) - 2 * slope, 1e-15);
    CHECK_NEAR(at(json_object_get(b, "scores"), 0, 0), 1 / sqrt(2.0) - 1.0, 1e-15);
    CHECK_NEAR(at(json_object_get(b, "scores"), 0, 2), -1 / sqrt(2.0), 1e-15);
    json_decref(a);
    json_decref(b);
}

TEST(rope_breaks_k_bias_invariance)
{
    int st;
    json_t *a = post("{" SEED_QKV ",\"rope\":{\"base\":10000,\"pairs\":\"interleaved\"}}", &st);
    json_t *b = post("{" SEED_QKV ",\"rope\":{\"pairs\":\"half\"},\"bias\":{\"k\":[3,-2]}}", &st);
    json_t *c0 = post("{" SEED_QKV ",\"rope\":true}", &st);

    CHECK_EQ_INT(st, 200);
    CHECK(at(json_object_get(a, "weights"), 0, 0) != at(json_object_get(b, "weights"), 0, 0));
    CHECK(at(json_object_get(a, "weights"), 0, 0) == at(json_object_get(c0, "weights"), 0, 0));
    json_decref(a);
    json_decref(b);
    json_decref(c0);
}

TEST(value_bias_shifts_output)
{
    int st;
    json_t *a = post("{" SEED_QKV "}", &st);
    json_t *b = post("{" SEED_QKV ",\"bias\":{\"v\":[10,20]}}", &st);

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(at(json_object_get(b, "output"), 0, 0),
               at(json_object_get(a, "output"), 0, 0) + 10, 1e-12);
    CHECK_NEAR(at(json_object_get(b, "output"), 0, 1),
               at(json_object_get(a, "output"), 0, 1) + 20, 1e-12);
    json_decref(a);
    json_decref(b);
}

TEST(charset_parameter_allowed)
{
    const char *const h[] = {"Content-Type", "application/json; charset=UTF-8", NULL};
    struct api_response r;

    t_call_h(&ctx, "POST", "/v1/attention", h, "{" SEED_QKV "}", &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

TEST(response_too_large)
{
    int st;
    json_t *j;

    ctx.cfg.max_elements = 12;  /* inputs: 2 + 6 + 6 = 14 > 12 */
    j = post("{" SEED_QKV "}", &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "limit_exceeded");
    json_decref(j);
    ctx.cfg.max_elements = 14;  /* inputs fit; response 3 + 3 + 2 = 8 fits */
    j = post("{" SEED_QKV "}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    ctx.cfg.max_elements = 8;   /* inputs 2 + 3 + 3 fit; response 6 + 6 + 2 does not */
    j = post("{\"q\":[[1],[1]],\"k\":[[1],[0],[1]],\"v\":[[1],[2],[3]]}", &st);
    CHECK_EQ_INT(st, 422);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "response_too_large");
    json_decref(j);
    j = post("{\"q\":[[1],[1]],\"k\":[[1],[0],[1]],\"v\":[[1],[2],[3]],\"return\":[\"output\"]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    ctx.cfg.max_elements = 1 << 20;
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(seed_no_bias);
    RUN(seed_q_bias);
    RUN(seed_k_bias_keeps_weights);
    RUN(seed_both_biases);
    RUN(meta_fields);
    RUN(scale_explicit);
    RUN(return_subset_and_order);
    RUN(attn_bias_null_is_masked);
    RUN(mask_booleans);
    RUN(causal_bottom_right_and_top_left);
    RUN(empty_rows_zero_and_error);
    RUN(softmax1_and_sink);
    RUN(dtype_float32);
    RUN(digits_fixed);
    RUN(base64_in_and_out);
    RUN(base64_float32_input_converted);
    RUN(base64_mask_and_attn_bias);
    RUN(grouped_heads_rank3);
    RUN(empty_rows_rank3_pairs);
    RUN(alibi_standard_and_slopes);
    RUN(rope_breaks_k_bias_invariance);
    RUN(value_bias_shifts_output);
    RUN(charset_parameter_allowed);
    RUN(response_too_large);
    TEST_MAIN_END();
}
