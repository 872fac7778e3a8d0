/*
 * tests/api/test_api_v2_binary.c — the Open Inference Protocol v2 binary
 * tensor data extension in-process, in both directions: bodies built byte
 * by byte, outputs read back byte by byte, non-finite values at every
 * alignment of the binary part, and the same values as the JSON form.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/v2_testlib.h"
#include "api/internal.h"
#include "api/v2/v2.h"
#include "api/v2/v2_impl.h"
#include "core/store.h"

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

/* One request: a JSON header, then tokens_k's bytes (tok, tlen), then q's
 * 16 bytes; the reply in r. */
static void tokens_request(const char *tok, size_t tlen, size_t declared,
                           struct api_response *r)
{
    static const double q[] = {1, 0};
    char hdr[1024], lenbuf[32], body[2048];
    const char *h[] = {"Inference-Header-Content-Length", lenbuf, NULL};
    unsigned char *p;
    size_t n;

    n = (size_t)snprintf(hdr, sizeof hdr, "{\"inputs\":["
        "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,-1,0]},"
        "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,0,0]},"
        "{\"name\":\"tokens_k\",\"datatype\":\"BYTES\",\"shape\":[3],"
        "\"parameters\":{\"binary_data_size\":%zu}},"
        "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
        "\"parameters\":{\"binary_data_size\":16}}],"
        "\"outputs\":[{\"name\":\"argmax\"},{\"name\":\"tokens_k\","
        "\"parameters\":{\"binary_data\":true}}]}", declared);
    memcpy(body, hdr, n);
    memcpy(body + n, tok, tlen);
    p = (unsigned char *)body + n + tlen;
    p += put_f64(p, q[0]);
    p += put_f64(p, q[1]);
    snprintf(lenbuf, sizeof lenbuf, "%zu", n);
    v2("POST", "/models/attention/infer", h, body, (size_t)((char *)p - body), r);
}

/* tokens_request refused with 400 at where. */
static void tokens_refused(const char *tok, size_t tlen, size_t declared, const char *where)
{
    struct api_response r;
    json_t *j;

    tokens_request(tok, tlen, declared, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), where));
    json_decref(j);
    api_response_free(&r);
}

/* A BYTES input in the binary tensor data extension's form (each element a
 * 4-byte little-endian length, then its bytes), as tritonclient's
 * set_data_from_numpy sends it by default, read in the order of the
 * inputs; the labels come back as JSON BYTES data. */
TEST(binary_bytes_tokens)
{
    static const char tok[] = "\x02\0\0\0k1\x00\0\0\0\x05\0\0\0\xc3\xa9t\xc3\xa9";
    static const char bad[] = "\x02\0\0\0k1\x00\0\0\0\x05\0\0\0\xc3\x28t\xc3\xa9";
    struct api_response r;
    json_t *j, *t;

    tokens_request(tok, sizeof tok - 1, sizeof tok - 1, &r);
    CHECK_EQ_INT(r.status, 200);
    j = t_json(&r);
    t = json_object_get(output(j, "tokens_k"), "data");
    CHECK_EQ_INT(json_array_size(t), 3);
    CHECK_STR(json_string_value(json_array_get(t, 0)), "k1");
    CHECK_STR(json_string_value(json_array_get(t, 1)), "");
    CHECK_STR(json_string_value(json_array_get(t, 2)), "\xc3\xa9t\xc3\xa9");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(output(j, "argmax"),
                                                                   "data"), 0)), 0);
    json_decref(j);
    api_response_free(&r);

    /* an element that is not UTF-8; a size that cuts the last element, and
     * one past the three elements */
    tokens_refused(bad, sizeof bad - 1, sizeof bad - 1, "[invalid_field at /inputs/2/data/2]");
    tokens_refused(tok, sizeof tok - 1, sizeof tok - 2,
                   "at /inputs/2/parameters/binary_data_size]");
    tokens_refused(tok, sizeof tok - 1, sizeof tok + 2,
                   "at /inputs/2/parameters/binary_data_size]");
}

/* binary_nonfinite_at_pad at every alignment of the binary part. */
TEST(binary_same_type_nonfinite)
{
    for (binary_pad = 1; binary_pad < 8; binary_pad++)
        binary_nonfinite_at_pad();
    binary_pad = 0;
    binary_nonfinite_at_pad();
}

int main(void)
{
    if (!v2t_setup())
        return 1;
    RUN(binary_inputs_and_outputs);
    RUN(binary_output_for_all);
    RUN(binary_same_type_nonfinite);
    RUN(binary_bytes_tokens);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
