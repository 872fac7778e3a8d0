/*
 * tests/api/test_api_v2.c — the Open Inference Protocol v2 in-process:
 * server/model metadata and health, JSON inference (flat and nested data,
 * FP32/FP64, biases, request parameters, output selection, masked scores),
 * the binary tensor data extension in both directions (bodies built byte by
 * byte), the sequence extension on sessions (start, continue, end; decoding
 * equals the stateless pass), and errors in the protocol's {"error":"..."}
 * shape with Triton's status mapping.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/internal.h"
#include "api/v2.h"
#include "api/v2_impl.h"
#include "core/store.h"

static struct api_ctx ctx;

/* One call to api_v2 on pctx with the path "/v2" + rest; body of len bytes. */
static void v2_on(struct api_ctx *pctx, const char *method, const char *rest,
                  const char *const *hdrs, const char *body, size_t len,
                  struct api_response *resp)
{
    static char path[256];
    struct api_request req;
    struct api_call c;

    snprintf(path, sizeof path, "/v2%s", rest);
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = path;
    req.header = t_header_fn;
    req.header_arg = (void *)(hdrs ? hdrs : t_json_headers);
    req.body = body;
    req.body_len = len;
    memset(resp, 0, sizeof *resp);
    resp->status = 500;
    c.ctx = pctx;
    c.req = &req;
    c.resp = resp;
    c.t0_us = api_now_us();
    c.answered = false;
    api_v2(&c, rest);
}

/* The same on the shared ctx. */
static void v2(const char *method, const char *rest, const char *const *hdrs,
               const char *body, size_t len, struct api_response *resp)
{
    v2_on(&ctx, method, rest, hdrs, body, len, resp);
}

/* JSON request on pctx; the parsed answer (new reference) and its status. */
static json_t *infer_on(struct api_ctx *pctx, const char *body, int *status)
{
    struct api_response r;
    json_t *j;

    v2_on(pctx, "POST", "/models/attention/infer", NULL, body, strlen(body), &r);
    *status = r.status;
    if (r.status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    j = t_json(&r);
    api_response_free(&r);
    return j;
}

static json_t *infer(const char *body, int *status)
{
    return infer_on(&ctx, body, status);
}

/* The output called name of a response. */
static json_t *output(json_t *resp, const char *name)
{
    json_t *outs = json_object_get(resp, "outputs");
    size_t i;

    for (i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        if (strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
            return o;
    }
    return NULL;
}

static double dat(json_t *o, size_t i)
{
    return json_number_value(json_array_get(json_object_get(o, "data"), i));
}

/* The error of a v2 reply is one string. */
static const char *v2_err(json_t *j)
{
    return json_string_value(json_object_get(j, "error"));
}

#define SEED_IN                                                               \
    "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]},"   \
    "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,-1,0]}," \
    "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,0,0]}"

TEST(server_metadata_and_health)
{
    struct api_response r;
    json_t *j, *ext;
    size_t i;
    int seen = 0;

    v2("GET", "", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "attnd");
    CHECK_STR(json_string_value(json_object_get(j, "version")), "0.1.0-test");
    ext = json_object_get(j, "extensions");
    for (i = 0; i < json_array_size(ext); i++) {
        const char *e = json_string_value(json_array_get(ext, i));
        seen += strcmp(e, "binary_tensor_data") == 0 || strcmp(e, "sequence") == 0;
    }
    CHECK_EQ_INT(seen, 2);
    json_decref(j);
    api_response_free(&r);

    v2("GET", "/health/live", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    v2("GET", "/health/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    ctx.draining = 1;
    v2("GET", "/health/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 503);
    api_response_free(&r);
    v2("GET", "/models/attention/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 503);
    api_response_free(&r);
    ctx.draining = 0;
    v2("GET", "/health/live", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

TEST(model_metadata)
{
    static const char *const names[] = {"q", "k", "v", "bias_q", "bias_k",
                                        "bias_v", "attn_bias", "mask",
                                        "sink_logits", "positions_q", "positions_k",
                                        "segments_q", "segments_k"};
    static const char *const types[] = {"FP64", "FP64", "FP64", "FP64", "FP64",
                                        "FP64", "FP64", "BOOL", "FP64", "INT64",
                                        "INT64", "INT64", "INT64"};
    struct api_response r;
    json_t *j, *in, *out;
    size_t i, k;

    v2("GET", "/models/attention", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "attention");
    in = json_object_get(j, "inputs");
    out = json_object_get(j, "outputs");
    CHECK_EQ_INT(json_array_size(in), 15);     /* + tokens_q, tokens_k (BYTES) */
    CHECK_EQ_INT(json_array_size(out), 13);    /* + the part-2 returns and labels */
    CHECK_STR(json_string_value(json_object_get(json_array_get(in, 14), "datatype")), "BYTES");
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 9), "name")),
              "top_k_indices");
    for (i = 0; i < 13 && i < json_array_size(in); i++) {
        json_t *t = json_array_get(in, i), *shape = json_object_get(t, "shape");
        CHECK_STR(json_string_value(json_object_get(t, "name")), names[i]);
        CHECK_STR(json_string_value(json_object_get(t, "datatype")), types[i]);
        CHECK(json_array_size(shape) >= (i == 8 ? 1 : 2));
        for (k = 0; k < json_array_size(shape); k++)
            CHECK_EQ_INT(json_integer_value(json_array_get(shape, k)), -1);
    }
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 2), "name")), "output");
    json_decref(j);
    api_response_free(&r);

    v2("GET", "/models/attention/versions/1/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    v2("GET", "/models/other", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
    v2("GET", "/models/attention/versions/2", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
}

TEST(infer_seed_example)
{
    int st;
    json_t *j = infer("{\"id\":\"req-7\",\"inputs\":[" SEED_IN "]}", &st);
    json_t *w = output(j, "weights"), *o = output(j, "output");

    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(j, "id")), "req-7");
    CHECK_STR(json_string_value(json_object_get(j, "model_name")), "attention");
    CHECK(w && o && output(j, "scores"));
    CHECK_STR(json_string_value(json_object_get(w, "datatype")), "FP64");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 0)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 1)), 3);
    CHECK_NEAR(dat(w, 0), 0.575975, 5e-7);
    CHECK_NEAR(dat(w, 1), 0.283995, 5e-7);
    CHECK_NEAR(dat(w, 2), 0.140029, 5e-7);
    CHECK_NEAR(dat(o, 0), dat(w, 0), 1e-15);
    CHECK_NEAR(dat(o, 1), dat(w, 1), 1e-15);
    json_decref(j);
}

TEST(nested_data_equals_flat_and_fp32)
{
    int st;
    json_t *j = infer("{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[[1,0]]},"
        "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[[1,0],[0,1],[-1,0]]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[[1,0],[0,1],[0,0]]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(w, "datatype")), "FP32");
    CHECK_NEAR(dat(w, 0), 0.575975, 1e-6);
    CHECK_NEAR(dat(w, 2), 0.140029, 1e-6);
    json_decref(j);
}

TEST(bias_and_parameters)
{
    int st;
    json_t *j = infer("{\"inputs\":[" SEED_IN ",{\"name\":\"bias_q\",\"datatype\":"
                      "\"FP64\",\"shape\":[2],\"data\":[0,1]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(w, 0), 0.445808, 5e-7);
    CHECK_NEAR(dat(w, 1), 0.445808, 5e-7);
    CHECK_NEAR(dat(w, 2), 0.108383, 5e-7);
    json_decref(j);

    /* softmax1: weights sum below 1; scale 1 changes the scores */
    j = infer("{\"parameters\":{\"softmax\":\"softmax1\",\"scale\":1},\"inputs\":["
              SEED_IN "]}", &st);
    w = output(j, "weights");
    CHECK_EQ_INT(st, 200);
    CHECK(dat(w, 0) + dat(w, 1) + dat(w, 2) < 1.0);
    CHECK_NEAR(dat(output(j, "scores"), 0), 1.0, 1e-15);
    CHECK_NEAR(dat(w, 0) / dat(w, 1), exp(1.0), 1e-12);
    json_decref(j);

    /* two queries, causal top_left: the first sees only key 0 */
    j = infer("{\"parameters\":{\"causal\":\"top_left\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[5,7]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(j, "weights"), 0), 1.0, 0);
    CHECK_NEAR(dat(output(j, "output"), 0), 5.0, 0);
    CHECK(json_is_null(json_array_get(json_object_get(output(j, "scores"), "data"), 1)));
    json_decref(j);
}

/* A member whose value is null counts as absent, as on /v1: the answer
 * equals the one without it. */
TEST(null_members_are_absent)
{
    int st, st0;
    json_t *j0 = infer("{\"inputs\":[" SEED_IN "]}", &st0);
    json_t *j = infer("{\"id\":null,\"parameters\":{\"causal\":null,\"scale\":null,"
                      "\"softmax\":null,\"sink_logit\":null,\"alibi\":null,\"softcap\":null,"
                      "\"sequence_id\":null,\"sequence_start\":null,\"heads\":null,"
                      "\"timeout_ms\":null},\"inputs\":[" SEED_IN "],\"outputs\":null}", &st);
    CHECK_EQ_INT(st0, 200);
    CHECK_EQ_INT(st, 200);
    json_object_del(j0, "id");
    CHECK(j && j0 && json_equal(j, j0));
    json_decref(j);
    json_decref(j0);
    j = infer("{\"parameters\":null,\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
}

TEST(attn_bias_null_and_mask)
{
    int st;
    json_t *j = infer("{\"inputs\":[" SEED_IN ","
        "{\"name\":\"attn_bias\",\"datatype\":\"FP64\",\"shape\":[1,3],\"data\":[0,null,0]},"
        "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],\"data\":[true,true,false]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(w, 0), 1.0, 1e-15);
    CHECK_NEAR(dat(w, 1), 0.0, 0);
    CHECK_NEAR(dat(w, 2), 0.0, 0);
    CHECK(json_is_null(json_array_get(json_object_get(output(j, "scores"), "data"), 2)));
    json_decref(j);
}

TEST(three_d_heads)
{
    int st;
    json_t *j = infer("{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,1,2],\"data\":[1,0,0,1]},"
        "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2,2],\"data\":[1,0,0,1]},"
        "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,2,1],\"data\":[1,2]}],"
        "\"outputs\":[{\"name\":\"output\"}]}", &st);
    json_t *o = output(j, "output"), *shape = json_object_get(o, "shape");

    CHECK_EQ_INT(st, 200);
    CHECK(output(j, "weights") == NULL && output(j, "scores") == NULL);
    CHECK_EQ_INT(json_array_size(shape), 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(shape, 0)), 2);
    /* head 0 prefers key 0 (value 1), head 1 key 1 (value 2) */
    CHECK(dat(o, 0) < 1.5 && dat(o, 1) > 1.5);
    json_decref(j);
}

/* ---- binary tensor data ------------------------------------------------ */

static size_t put_f64(unsigned char *p, double x)
{
    uint64_t u;
    size_t k;

    memcpy(&u, &x, 8);
    for (k = 0; k < 8; k++)
        p[k] = (unsigned char)(u >> (8 * k));
    return 8;
}

static double get_f64(const unsigned char *p)
{
    uint64_t u = 0;
    double x;
    size_t k;

    for (k = 0; k < 8; k++)
        u |= (uint64_t)p[k] << (8 * k);
    memcpy(&x, &u, 8);
    return x;
}

TEST(binary_inputs_and_outputs)
{
    static const double q[] = {1, 0}, kk[] = {1, 0, 0, 1, -1, 0},
                        vv[] = {1, 0, 0, 1, 0, 0};
    char hdr[1024], lenbuf[32], body[2048];
    unsigned char *p;
    const char *h[] = {"Content-Type", "application/octet-stream",
                       "Inference-Header-Content-Length", lenbuf, NULL};
    struct api_response r;
    size_t n, i, jl;
    json_t *j, *outs;
    const char *hl;

    n = (size_t)snprintf(hdr, sizeof hdr, "{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"parameters\":{\"binary_data_size\":16}},"
        "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"parameters\":{\"binary_data_size\":48}},"
        "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"parameters\":{\"binary_data_size\":48}}],"
        "\"outputs\":[{\"name\":\"weights\",\"parameters\":{\"binary_data\":true}},"
        "{\"name\":\"output\"}]}");
    memcpy(body, hdr, n);
    p = (unsigned char *)body + n;
    for (i = 0; i < 2; i++)
        p += put_f64(p, q[i]);
    for (i = 0; i < 6; i++)
        p += put_f64(p, kk[i]);
    for (i = 0; i < 6; i++)
        p += put_f64(p, vv[i]);
    snprintf(lenbuf, sizeof lenbuf, "%zu", n);
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body), &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.content_type, "application/octet-stream");
    hl = t_hdr(&r, "Inference-Header-Content-Length");
    CHECK(hl != NULL);
    jl = hl ? strtoul(hl, NULL, 10) : 0;
    CHECK(jl > 0 && jl + 24 == r.body_len);
    j = jl ? json_loadb(r.body, jl, 0, NULL) : NULL;
    outs = json_object_get(j, "outputs");
    CHECK_EQ_INT(json_array_size(outs), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(
        output(j, "weights"), "parameters"), "binary_data_size")), 24);
    CHECK(json_object_get(output(j, "weights"), "data") == NULL);
    if (jl && jl + 24 == r.body_len) {
        const unsigned char *b = (const unsigned char *)r.body + jl;
        CHECK_NEAR(get_f64(b), 0.575975, 5e-7);
        CHECK_NEAR(get_f64(b + 8), 0.283995, 5e-7);
        CHECK_NEAR(get_f64(b + 16), 0.140029, 5e-7);
        CHECK_NEAR(dat(output(j, "output"), 0), get_f64(b), 1e-15);
    }
    json_decref(j);
    api_response_free(&r);

    /* a byte missing: the declared size no longer fits */
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body) - 1, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/inputs/2"));
    json_decref(j);
    api_response_free(&r);

    /* a byte too many: no input claims it */
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body) + 1, &r);
    CHECK_EQ_INT(r.status, 400);
    api_response_free(&r);

    /* header length beyond the body */
    snprintf(lenbuf, sizeof lenbuf, "%zu", (size_t)99999);
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body), &r);
    CHECK_EQ_INT(r.status, 400);
    api_response_free(&r);
}

TEST(binary_output_for_all)
{
    int st;
    struct api_response r;
    const char *body = "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[" SEED_IN "]}";
    json_t *j;
    const char *hl;

    v2("POST", "/models/attention/infer", NULL, body, strlen(body), &r);
    CHECK_EQ_INT(r.status, 200);
    hl = t_hdr(&r, "Inference-Header-Content-Length");
    CHECK(hl && strtoul(hl, NULL, 10) + (3 + 3 + 2) * 8 == r.body_len);
    api_response_free(&r);
    (void)st;
    (void)j;
}

/* Spaces after binary_fl's JSON header: they move the binary part to
 * every alignment (the body buffer is 64-byte aligned), so FP32 / FP64
 * inputs are read in place (aligned) or copied (not). */
static size_t binary_pad;

/* A binary request: q [1,4], k and v [L,4], and attn_bias [1,L] when
 * with_bias, all FP32 (or FP64 when f64), k's element bad_at set to bad
 * (bad_at < 0: none) and the bias's element bias_at to bias_val; the
 * answer in r. binary_f: L = 40, whose 160 elements of k cross the
 * finiteness scan's blocks. */
static void binary_fl(bool f64, size_t L, long bad_at, double bad, bool with_bias, long bias_at,
                      double bias_val, struct api_response *r)
{
    static _Alignas(64) char body[2048 + (2 * 4 + 1) * 8 * 1200];  /* k, v, attn_bias of f64 */
    char lenbuf[32];
    const char *h[] = {"Content-Type", "application/octet-stream",
                       "Inference-Header-Content-Length", lenbuf, NULL};
    const char *dt = f64 ? "FP64" : "FP32";
    size_t es = f64 ? 8 : 4, n, i, counts[4] = {4, 4 * L, 4 * L, L};
    unsigned char *p;

    if (L > 1200)
        return;
    n = (size_t)snprintf(body, sizeof body, "{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"%s\",\"shape\":[1,4],\"parameters\":{\"binary_data_size\":%zu}},"
        "{\"name\":\"k\",\"datatype\":\"%s\",\"shape\":[%zu,4],\"parameters\":{\"binary_data_size\":%zu}},"
        "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[%zu,4],\"parameters\":{\"binary_data_size\":%zu}}%s",
        dt, 4 * es, dt, L, 4 * L * es, dt, L, 4 * L * es, with_bias ? "," : "]}");
    if (with_bias)
        n += (size_t)snprintf(body + n, sizeof body - n, "{\"name\":\"attn_bias\",\"datatype\":"
            "\"%s\",\"shape\":[1,%zu],\"parameters\":{\"binary_data_size\":%zu}}]}", dt, L,
            L * es);
    for (i = 0; i < binary_pad; i++)
        body[n++] = ' ';
    p = (unsigned char *)body + n;
    for (int t = 0; t < (with_bias ? 4 : 3); t++)
        for (i = 0; i < counts[t]; i++) {
            double x = t == 3 ? 0.0 : (double)((i * 7 + (size_t)t * 3) % 11) / 8 - 0.6;
            if (t == 1 && (long)i == bad_at)
                x = bad;
            if (t == 3 && (long)i == bias_at)
                x = bias_val;
            if (f64) {
                p += put_f64(p, x);
            } else {
                float f = (float)x;
                uint32_t u;
                memcpy(&u, &f, 4);
                for (size_t k = 0; k < 4; k++)
                    *p++ = (unsigned char)(u >> (8 * k));
            }
        }
    snprintf(lenbuf, sizeof lenbuf, "%zu", n);
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body), r);
}

static void binary_f(bool f64, long bad_at, double bad, bool with_bias, long bias_at,
                     double bias_val, struct api_response *r)
{
    binary_fl(f64, 40, bad_at, bad, with_bias, bias_at, bias_val, r);
}

/* FP32 into float32 and FP64 into float64 are copied (or, q, k and v,
 * read in place when aligned) and then checked in blocks: every
 * non-finite element is refused at its index, wherever it falls in a
 * block, -inf only in attn_bias, and a clean body answers as the
 * element-by-element path did (the same numbers as JSON data). At the
 * binary part's alignment binary_pad. */
static void binary_nonfinite_at_pad(void)
{
    static const long at[] = {0, 63, 64, 100, 159};
    const double bads[] = {NAN, INFINITY, -INFINITY};
    struct api_response r;
    char want[64];
    json_t *j;

    for (int f64 = 0; f64 < 2; f64++) {
        binary_f(f64, -1, 0, true, 5, -INFINITY, &r);   /* -inf bias: masked key */
        CHECK_EQ_INT(r.status, 200);
        api_response_free(&r);
        binary_f(f64, -1, 0, true, 5, INFINITY, &r);
        j = t_json(&r);
        CHECK(r.status != 200 && v2_err(j) && strstr(v2_err(j), "/inputs/3/data") &&
              strstr(v2_err(j), "element 5 "));
        json_decref(j);
        api_response_free(&r);
        for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
            for (size_t b = 0; b < 3; b++) {
                binary_f(f64, at[a], bads[b], false, -1, 0, &r);
                j = t_json(&r);
                snprintf(want, sizeof want, "element %ld ", at[a]);
                CHECK(r.status != 200 && v2_err(j) && strstr(v2_err(j), "/inputs/1/data") &&
                      strstr(v2_err(j), want));
                json_decref(j);
                api_response_free(&r);
            }
    }
    /* k of 1100 x 4: the copy and check go 16 KiB at a time (4096 float32,
     * 2048 float64 elements); a bad element on either side of a block
     * boundary, and in the last, partial block */
    static const long far[] = {2047, 2048, 4095, 4096, 4399};
    for (int f64 = 0; f64 < 2; f64++) {
        binary_fl(f64, 1100, -1, 0, false, -1, 0, &r);
        CHECK_EQ_INT(r.status, 200);
        api_response_free(&r);
        for (size_t a = 0; a < sizeof far / sizeof far[0]; a++) {
            binary_fl(f64, 1100, far[a], NAN, false, -1, 0, &r);
            j = t_json(&r);
            snprintf(want, sizeof want, "element %ld ", far[a]);
            CHECK(r.status != 200 && v2_err(j) && strstr(v2_err(j), "/inputs/1/data") &&
                  strstr(v2_err(j), want));
            json_decref(j);
            api_response_free(&r);
        }
    }
    /* FP32 binary and FP32 JSON of the same numbers: the same output */
    {
        char js[8192];
        size_t n = 0, i;
        int st;
        json_t *a, *out;
        struct api_response rb;

        n += (size_t)snprintf(js + n, sizeof js - n, "{\"inputs\":[");
        for (int t = 0; t < 3; t++) {
            size_t cnt = t == 0 ? 4 : 160;
            n += (size_t)snprintf(js + n, sizeof js - n, "%s{\"name\":\"%s\",\"datatype\":\"FP32\","
                                  "\"shape\":[%zu,4],\"data\":[", t ? "," : "", t == 0 ? "q" : t == 1 ? "k" : "v",
                                  cnt / 4);
            for (i = 0; i < cnt; i++)
                n += (size_t)snprintf(js + n, sizeof js - n, "%s%.17g", i ? "," : "",
                                      (double)(float)((double)((i * 7 + (size_t)t * 3) % 11) / 8 - 0.6));
            n += (size_t)snprintf(js + n, sizeof js - n, "]}");
        }
        snprintf(js + n, sizeof js - n, "],\"outputs\":[{\"name\":\"output\"}]}");
        a = infer(js, &st);
        CHECK_EQ_INT(st, 200);
        binary_f(false, -1, 0, false, -1, 0, &rb);
        CHECK_EQ_INT(rb.status, 200);
        j = t_json(&rb);
        out = output(j, "output");
        for (i = 0; i < 4; i++)
            CHECK(dat(out, i) == dat(output(a, "output"), i));
        json_decref(j);
        json_decref(a);
        api_response_free(&rb);
    }
}

/* binary_nonfinite_at_pad at every alignment of the binary part. */
TEST(binary_same_type_nonfinite)
{
    for (binary_pad = 1; binary_pad < 8; binary_pad++)
        binary_nonfinite_at_pad();
    binary_pad = 0;
    binary_nonfinite_at_pad();
}

/* ---- sequences ----------------------------------------------------------- */

TEST(sequence_decode_equals_stateless)
{
    int st;
    json_t *a, *b, *full, *gone;
    char sid[SESS_ID_MAX] = "";
    struct sess *s = NULL;

    a = infer("{\"parameters\":{\"sequence_id\":42,\"sequence_start\":true,"
              "\"causal\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,2,3,4]},"
              "{\"name\":\"bias_k\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[0.5,-1]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(a, "parameters"),
                                                    "sequence_id")), 42);
    if (json_string_value(json_object_get(json_object_get(a, "parameters"), "session_id")))
        snprintf(sid, sizeof sid, "%s", json_string_value(json_object_get(
                 json_object_get(a, "parameters"), "session_id")));
    CHECK(sid[0] != '\0');
    CHECK(sess_acquire(ctx.store, sid, &s) == CORE_OK);
    if (sid[0] && s) {
        CHECK_EQ_INT(sess_length(s), 2);
        sess_release(ctx.store, s);
    }
    /* one more key/value row and one query; the session remembers bias_k */
    b = infer("{\"parameters\":{\"sequence_id\":42,\"causal\":true,\"sequence_end\":true},"
              "\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[0.3,0.7]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[2,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[5,6]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(b, "parameters"),
                                                    "sequence_length")), 3);
    full = infer("{\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[0.3,0.7]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,2,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,2,3,4,5,6]},"
              "{\"name\":\"bias_k\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[0.5,-1]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(b, "output"), 0), dat(output(full, "output"), 0), 1e-14);
    CHECK_NEAR(dat(output(b, "output"), 1), dat(output(full, "output"), 1), 1e-14);
    CHECK_NEAR(dat(output(b, "weights"), 2), dat(output(full, "weights"), 2), 1e-14);
    /* sequence_end deleted the session */
    CHECK(sess_acquire(ctx.store, sid, &s) == CORE_ENOTFOUND);
    gone = infer("{\"parameters\":{\"sequence_id\":42},\"inputs\":["
                 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    CHECK(v2_err(gone) != NULL);
    json_decref(a);
    json_decref(b);
    json_decref(full);
    json_decref(gone);
}

TEST(sequence_rules)
{
    int st;
    json_t *j;

    /* continuing a sequence that never started */
    j = infer("{\"parameters\":{\"sequence_id\":\"nope\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(j);
    /* start without k and v */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_start\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
    /* start, then an option fixed at start is refused later */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_start\":true},"
              "\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"softmax\":\"softmax1\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/parameters/softmax"));
    json_decref(j);
    /* a query alone attends the cache; FP32 data is converted to the
     * session's FP64 */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_end\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(j, "weights"), 0), 0.575975, 5e-7);
    CHECK_STR(json_string_value(json_object_get(output(j, "weights"), "datatype")), "FP64");
    json_decref(j);
    /* a start whose first pass fails leaves no sequence behind */
    j = infer("{\"parameters\":{\"sequence_id\":\"s2\",\"sequence_start\":true,"
              "\"empty_rows\":\"error\"},\"inputs\":[" SEED_IN ",{\"name\":\"mask\","
              "\"datatype\":\"BOOL\",\"shape\":[1,3],\"data\":[false,false,false]}]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"s2\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(j);
    /* sequence_start without an id */
    j = infer("{\"parameters\":{\"sequence_start\":true},\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
}

/* A sequence started with yarn's rope_truncate false keeps it: its decode
 * step equals the stateless request with rope_truncate false, bit for bit,
 * and not the one with the default; a later rope_truncate is refused as
 * fixed at the start. */
TEST(sequence_yarn_truncate)
{
#define YARN_P "\"rope_base\":100,\"rope_scaling\":\"yarn\",\"rope_factor\":4," \
    "\"rope_original_max_position\":256"
#define KV3 "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,4],"             \
    "\"data\":[1,0,2,0,0,1,0,-1,0.5,0.5,1,1]},{\"name\":\"v\",\"datatype\":\"FP64\"," \
    "\"shape\":[3,2],\"data\":[1,2,3,4,5,6]}"
#define Q1 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,4],\"data\":[1,1,0,1]}"
    int st;
    json_t *a, *b, *full, *dflt, *j;

    a = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"sequence_start\":true,"
              "\"causal\":true," YARN_P ",\"rope_truncate\":false},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,4],"
              "\"data\":[1,0,2,0,0,1,0,-1]},{\"name\":\"k\",\"datatype\":\"FP64\","
              "\"shape\":[2,4],\"data\":[1,0,2,0,0,1,0,-1]},{\"name\":\"v\","
              "\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,2,3,4]}]}", &st);
    CHECK_EQ_INT(st, 200);
    j = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"rope_truncate\":true},"
              "\"inputs\":[" Q1 "]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/parameters/rope_truncate"));
    json_decref(j);
    b = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"causal\":true,"
              "\"sequence_end\":true},\"inputs\":[" Q1 ","
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,4],"
              "\"data\":[0.5,0.5,1,1]},{\"name\":\"v\",\"datatype\":\"FP64\","
              "\"shape\":[1,2],\"data\":[5,6]}]}", &st);
    CHECK_EQ_INT(st, 200);
    full = infer("{\"parameters\":{\"causal\":true," YARN_P ",\"rope_truncate\":false},"
                 "\"inputs\":[" Q1 "," KV3 "]}", &st);
    CHECK_EQ_INT(st, 200);
    dflt = infer("{\"parameters\":{\"causal\":true," YARN_P "},\"inputs\":[" Q1 ","
                 KV3 "]}", &st);
    CHECK_EQ_INT(st, 200);
    for (size_t i = 0; i < 2; i++) {
        CHECK(dat(output(b, "output"), i) == dat(output(full, "output"), i));
        CHECK(dat(output(b, "output"), i) != dat(output(dflt, "output"), i));
    }
    json_decref(a);
    json_decref(b);
    json_decref(full);
    json_decref(dflt);
#undef YARN_P
#undef KV3
#undef Q1
}

/* ---- errors -------------------------------------------------------------- */

/* Status and that the message mentions want. */
static void check_bad(const char *body, int status, const char *want)
{
    int st;
    json_t *j = infer(body, &st);
    const char *e = v2_err(j);

    CHECK_EQ_INT(st, status);
    CHECK(e != NULL);
    if (e && want && !strstr(e, want)) {
        th_cur_failed = 1;
        printf("  error \"%s\" lacks \"%s\"\n", e, want);
    }
    json_decref(j);
}

TEST(errors_in_v2_shape)
{
    struct api_response r;
    json_t *j;

    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"INT8\",\"shape\":[1,2],"
              "\"data\":[1,0]}]}", 400, "/inputs/0/datatype");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"zz\",\"datatype\":\"FP64\","
              "\"shape\":[1],\"data\":[1]}]}", 400, "/inputs/3/name");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0,3]}]}", 400, "/inputs/0/data");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1]},{\"name\":\"k\"}]}", 400, "/inputs/0/data");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,0],"
              "\"data\":[]}]}", 400, "/inputs/0/shape/1");
    check_bad("{\"inputs\":[" SEED_IN "],\"outputs\":[{\"name\":\"attention\"}]}",
              400, "/outputs/0/name");
    check_bad("{\"inputs\":[" SEED_IN "],\"parameters\":{\"softmax\":\"max\"}}",
              400, "/parameters/softmax");
    check_bad("{\"inputs\":[" SEED_IN "],\"parameters\":{\"bogus\":1}}",
              400, "/parameters/bogus");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"mask\",\"datatype\":\"BOOL\","
              "\"shape\":[1,3],\"data\":[1,1,0]}]}", 400, "/inputs/3/data/0");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"attn_bias\",\"datatype\":\"FP64\","
              "\"shape\":[1,2],\"data\":[0,0]}]}", 400, "/inputs/3/shape");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0]},{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,3],"
              "\"data\":[1,0,0,1,0,0,1,0,0]},{\"name\":\"v\",\"datatype\":\"FP64\","
              "\"shape\":[3,2],\"data\":[1,0,0,1,0,0]}]}", 400, "/inputs/1/shape");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1],"
              "\"data\":[1e39]}]}", 400, "/inputs/0/data/0");
    check_bad("{\"inputs\":[" SEED_IN ",", 400, NULL);       /* invalid JSON */
    check_bad("{\"inputs\":[]}", 400, "/inputs");

    /* empty_rows error: a fully masked row */
    check_bad("{\"parameters\":{\"empty_rows\":\"error\"},\"inputs\":[" SEED_IN
              ",{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],"
              "\"data\":[false,false,false]}]}", 400, NULL);

    /* method and route errors keep their status, in the v2 shape */
    v2("GET", "/models/attention/infer", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "POST");
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
    v2("GET", "/nothing", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
}

TEST(element_budget)
{
    int st;
    size_t saved = ctx.cfg.max_elements;
    json_t *j;

    ctx.cfg.max_elements = 10;
    j = infer("{\"inputs\":[" SEED_IN "]}", &st);   /* 14 input numbers */
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "limit_exceeded"));
    json_decref(j);
    ctx.cfg.max_elements = saved;
}

/* The reply's datatype: the request's half type when q, k and v came in
 * one, else its computation's. */
TEST(datatype_names)
{
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_NONE), "FP32");
    CHECK_STR(api_v2_datatype_name(ATTN_F64, API_HALF_NONE), "FP64");
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_F16), "FP16");
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_BF16), "BF16");
}

/* One row of sequence seq (a JSON value) on pctx: started anew when start;
 * the answer's sequence_length (-status on an error) and session_id. */
static long seq_row(struct api_ctx *pctx, const char *seq, bool start, char *sid)
{
    char body[512];
    int st;
    json_t *j, *p;
    long len;

    snprintf(body, sizeof body,
             "{\"parameters\":{\"sequence_id\":%s%s},\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
             "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
             "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]}]}",
             seq, start ? ",\"sequence_start\":true" : "");
    j = infer_on(pctx, body, &st);
    p = json_object_get(j, "parameters");
    len = st == 200 ? (long)json_integer_value(json_object_get(p, "sequence_length")) : -st;
    if (sid)
        snprintf(sid, SESS_ID_MAX, "%s", st == 200 ?
                 json_string_value(json_object_get(p, "session_id")) : "");
    json_decref(j);
    return len;
}

static struct sess_store *store_in(const char *dir)
{
    struct sess_config sc = {.default_ttl_s = 600, .default_max_tokens = 64,
                             .replica_id = "r1"};
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40};
    struct sess_store *st = sess_store_new(&sc);

    if (st && sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        st = NULL;
    }
    CHECK(st != NULL);
    return st;
}

/* A sequence lives in the session named after its id: any number of them,
 * each found again after a restart, and a start ends the one before. */
TEST(sequences_are_named_sessions_that_outlive_a_restart)
{
    struct api_ctx pctx;
    char dir[64], cmd[160], sid[SESS_ID_MAX], name[SESS_NAME_MAX];
    size_t i, started = 0;

    snprintf(dir, sizeof dir, "/tmp/attnd-test-v2seq-%ld", (long)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
    t_ctx_init(&pctx);
    if (!(pctx.store = store_in(dir)))
        return;
    CHECK_EQ_INT(seq_row(&pctx, "7", true, sid), 1);
    CHECK_STR(sid, "r1.v2i7");
    CHECK_EQ_INT(seq_row(&pctx, "\"abc-_9\"", true, sid), 1);
    CHECK_STR(sid, "r1.v2sabc-_9");
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", true, sid), 1);
    CHECK(strncmp(sid, "r1.v2h", 6) == 0 && strlen(sid) == 26);
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", false, NULL), 2);
    CHECK_EQ_INT(seq_row(&pctx, "\"a c\"", false, NULL), -404);
    for (i = 0; i < 5000; i++) {         /* more than the old map's 4096 */
        snprintf(name, sizeof name, "%zu", 100 + i);
        started += seq_row(&pctx, name, true, NULL) == 1;
    }
    CHECK_EQ_INT(started, 5000);
    CHECK_EQ_INT(seq_row(&pctx, "7", false, NULL), 2);
    sess_store_free(pctx.store);

    pctx.store = store_in(dir);          /* a restart */
    CHECK_EQ_INT(seq_row(&pctx, "7", false, sid), 3);
    CHECK_STR(sid, "r1.v2i7");
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", false, NULL), 3);
    CHECK_EQ_INT(seq_row(&pctx, "5099", false, NULL), 2);
    CHECK_EQ_INT(seq_row(&pctx, "7", true, sid), 1);   /* started anew */
    CHECK_STR(sid, "r1.v2i7");
    sess_store_free(pctx.store);

    pctx.store = store_in(dir);
    CHECK_EQ_INT(seq_row(&pctx, "7", false, NULL), 2);
    sess_store_free(pctx.store);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Names: one per id, in the characters and length an id part may have. */
TEST(sequence_names)
{
    static const char *const ids[] = {
        "1", "9223372036854775807", "\"x\"", "\"abcdefghijklmnopqrst\"",
        "\"abcdefghijklmnopqrstu\"", "\"a.b\"", "\"a b\"", "\"a c\"",
        "\"\\u00e9t\\u00e9\"", "\"123456789012345678901234567890123456789012345678901234567890123\""};
    char names[10][SESS_NAME_MAX];
    size_t i, j;

    for (i = 0; i < 10; i++) {
        json_t *id = json_loads(ids[i], JSON_DECODE_ANY, NULL);
        CHECK(api_v2_seq_name(id, names[i]));
        CHECK(strlen(names[i]) >= 4 && strlen(names[i]) < SESS_NAME_MAX);
        CHECK(strspn(names[i], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-_") == strlen(names[i]));
        for (j = 0; j < i; j++)
            CHECK(strcmp(names[i], names[j]) != 0);
        json_decref(id);
    }
    CHECK_STR(names[1], "v2i9223372036854775807");
    CHECK_STR(names[3], "v2sabcdefghijklmnopqrst");
    CHECK(strncmp(names[4], "v2h", 3) == 0);
}

int main(void)
{
    struct sess_config sc;

    t_ctx_init(&ctx);
    memset(&sc, 0, sizeof sc);
    sc.max_sessions = 16;
    sc.max_cache_bytes = 1 << 20;
    sc.default_ttl_s = 600;
    sc.default_max_tokens = 1024;
    ctx.store = sess_store_new(&sc);
    if (!ctx.store) {
        printf("no store\n0 passed, 1 failed\n");
        return 1;
    }
    RUN(server_metadata_and_health);
    RUN(model_metadata);
    RUN(infer_seed_example);
    RUN(nested_data_equals_flat_and_fp32);
    RUN(bias_and_parameters);
    RUN(null_members_are_absent);
    RUN(attn_bias_null_and_mask);
    RUN(three_d_heads);
    RUN(binary_inputs_and_outputs);
    RUN(binary_output_for_all);
    RUN(binary_same_type_nonfinite);
    RUN(sequence_decode_equals_stateless);
    RUN(sequence_rules);
    RUN(sequence_yarn_truncate);
    RUN(errors_in_v2_shape);
    RUN(element_budget);
    RUN(sequences_are_named_sessions_that_outlive_a_restart);
    RUN(sequence_names);
    RUN(datatype_names);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
