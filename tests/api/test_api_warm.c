/*
 * tests/api/test_api_warm.c — api/warm.c, the requests of --warm-up: the
 * shape list (what it takes and what it refuses), and what a warm-up
 * leaves behind. After api_warm_run for a shape, a request of that shape
 * and dtype (float32, float64, float16, bfloat16) from a client, base64
 * JSON (options before or after the tensors) or OIP v2 binary, built here
 * by other code and handed over as the transport hands one (its body in a
 * block of api/spare.c, the base64 strings fed to an early decoder piece
 * by piece), takes every large block it needs from the kept ones and gives
 * them back: the kept blocks and bytes are the same after it. Without the
 * warm-up the same request leaves new blocks behind (so the check can
 * fail), and so does a float64 request after a float32 warm-up. The
 * warm-up needs no API key, while a client's request still does; a shape
 * over --max-elements or a body over --max-body-bytes is refused with a
 * reason that names the flag.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/codec/base64.h"
#include "api/codec/buf.h"
#include "api/early.h"
#include "api/spare.h"
#include "api/warm.h"
#include "core/half.h"

static struct api_ctx ctx;
static uint64_t rng_state = 0x5EEDF00DCAFEBEEFull;

/* ---- the shape list ------------------------------------------------------ */

TEST(warm_parse_takes_shapes)
{
    struct api_warm_shape s[API_WARM_MAX];
    size_t n = 99;
    CHECK(api_warm_parse("", s, &n) && n == 0);
    CHECK(api_warm_parse("2048x1024x128", s, &n) && n == 1);
    CHECK(s[0].h == 1 && s[0].n == 2048 && s[0].L == 1024 && s[0].d == 128);
    CHECK(s[0].dtype == API_WARM_F32);
    CHECK(api_warm_parse("4x2x1:float64,2x3x4x5:float16,1x1x1:bfloat16,9x9x9:float32", s, &n));
    CHECK(n == 4 && s[0].dtype == API_WARM_F64 && s[0].n == 4 && s[0].d == 1);
    CHECK(s[1].dtype == API_WARM_F16 && s[1].h == 2 && s[1].d == 5);
    CHECK(s[2].dtype == API_WARM_BF16 && s[3].dtype == API_WARM_F32 && s[3].n == 9);
    char typed[64];
    api_warm_name(&s[1], typed, sizeof typed);
    CHECK_STR(typed, "2x3x4x5:float16");
    api_warm_name(&s[3], typed, sizeof typed);
    CHECK_STR(typed, "9x9x9");
    CHECK(api_warm_parse("8x1x4096x64,1x1x1,1048576x1x1,3x5x7x9", s, &n) && n == 4);
    CHECK(s[0].h == 8 && s[0].n == 1 && s[0].L == 4096 && s[0].d == 64);
    CHECK(s[1].h == 1 && s[1].n == 1 && s[1].L == 1 && s[1].d == 1);
    CHECK(s[2].n == 1048576);
    CHECK(s[3].h == 3 && s[3].n == 5 && s[3].L == 7 && s[3].d == 9);
    char name[64];
    api_warm_name(&s[0], name, sizeof name);
    CHECK_STR(name, "8x1x4096x64");
    api_warm_name(&s[1], name, sizeof name);
    CHECK_STR(name, "1x1x1");
}

TEST(warm_parse_refuses_the_rest)
{
    static const char *const bad[] = {
        "0x1x1", "1x0x1", "1x1", "1", "1x1x1x1x1", "1x1x", "x1x1", "1xx1x1", " 1x1x1",
        "1x1x1 ", "1x1x1,", ",1x1x1", "1x1x1,,1x1x1", "1048577x1x1", "-1x1x1", "+1x1x1",
        "1X1X1", "1x1x1,1x1x1,1x1x1,1x1x1,1x1x1", "99999999999999999999x1x1", "1.5x1x1",
        "axbxc", ",", "1x1x1:", ":float64", "1x1x1:float", "1x1x1:FLOAT64", "1x1x1:int8",
        "1x1x1:float64:float64", "1x1x1 :float64", "1x1x1: float64", "1x1x1:float64 ",
        "1x1:float64", "1x1x1:float16x", "1x1x1,2x2x2:bf16",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct api_warm_shape s[API_WARM_MAX] = {{7, 7, 7, 7, API_WARM_BF16}};
        size_t n = 1;
        if (api_warm_parse(bad[i], s, &n)) {
            fprintf(stderr, "  took '%s'\n", bad[i]);
            CHECK(false);
        }
        CHECK(n == 1 && s[0].h == 7 && s[0].d == 7);    /* left as they were */
        CHECK(s[0].dtype == API_WARM_BF16);
    }
}

/* ---- a client's request, as the transport hands it over ------------------ */

/* Per enum api_warm_dtype: the names a client writes, the element size. */
static const char *const type_name[] = {"float32", "float64", "float16", "bfloat16"};
static const char *const v2_type[] = {"FP32", "FP64", "FP16", "BF16"};
static const size_t type_size[] = {4, 8, 2, 2};

/* count values of type t, made one element at a time (not as api/warm.c
 * converts them); *bytes their size. */
static void *typed_values(enum api_warm_dtype t, size_t count, size_t *bytes)
{
    float *v = t_values(&rng_state, count);
    *bytes = count * type_size[t];
    if (t == API_WARM_F32)
        return v;
    unsigned char *out = malloc(*bytes);
    CHECK(out != NULL);
    for (size_t i = 0; i < count; i++) {
        if (t == API_WARM_F64) {
            double x = v[i];
            memcpy(out + i * 8, &x, 8);
        } else {
            uint16_t h = t == API_WARM_F16 ? half_f16_from_f32(v[i]) : half_bf16_from_f32(v[i]);
            memcpy(out + i * 2, &h, 2);
        }
    }
    free(v);
    return out;
}

static void b64_tensor(struct t_body *b, const char *key, enum api_warm_dtype type, size_t h,
                       size_t rows, size_t d)
{
    char head[160];
    if (h > 1)
        snprintf(head, sizeof head, "\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu,%zu],\"data\":\"",
                 key, type_name[type], h, rows, d);
    else
        snprintf(head, sizeof head, "\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data\":\"",
                 key, type_name[type], rows, d);
    t_body_puts(b, head);
    size_t bytes;
    void *v = typed_values(type, h * rows * d, &bytes);
    struct api_buf t;
    api_buf_init(&t, SIZE_MAX / 2);
    api_base64_encode(&t, v, bytes);
    size_t n;
    char *text = api_buf_take(&t, &n);
    t_body_put(b, text, n);
    t_body_puts(b, "\"}");
    free(text);
    free(v);
}

/* The base64 JSON request of shape s in its dtype: q, k and v, with the
 * options after them (as attnd's warm-up lays it out) or before. */
static struct t_body b64_body(const struct api_warm_shape *s, bool options_first)
{
    char options[96];
    snprintf(options, sizeof options, "\"dtype\":\"%s\",\"encoding\":\"base64\","
             "\"return\":[\"output\"]", type_name[s->dtype]);
    struct t_body b = {0};
    t_body_puts(&b, "{");
    if (options_first) {
        t_body_puts(&b, options);
        t_body_puts(&b, ",");
    }
    b64_tensor(&b, "q", s->dtype, s->h, s->n, s->d);
    t_body_puts(&b, ",");
    b64_tensor(&b, "k", s->dtype, s->h, s->L, s->d);
    t_body_puts(&b, ",");
    b64_tensor(&b, "v", s->dtype, s->h, s->L, s->d);
    if (!options_first) {
        t_body_puts(&b, ",");
        t_body_puts(&b, options);
    }
    t_body_puts(&b, "}");
    return b;
}

/* The OIP v2 binary request of shape s; *json its header's length. */
static struct t_body v2_body(const struct api_warm_shape *s, size_t *json)
{
    struct t_body b = {0};
    char part[256];
    t_body_puts(&b, "{\"inputs\":[");
    const char *names[3] = {"q", "k", "v"};
    size_t rows[3] = {s->n, s->L, s->L};
    for (int i = 0; i < 3; i++) {
        size_t bytes = s->h * rows[i] * s->d * type_size[s->dtype];
        const char *type = v2_type[s->dtype];
        if (s->h > 1)
            snprintf(part, sizeof part, "%s{\"name\":\"%s\",\"datatype\":\"%s\","
                     "\"shape\":[%zu,%zu,%zu],\"parameters\":{\"binary_data_size\":%zu}}",
                     i ? "," : "", names[i], type, s->h, rows[i], s->d, bytes);
        else
            snprintf(part, sizeof part, "%s{\"name\":\"%s\",\"datatype\":\"%s\","
                     "\"shape\":[%zu,%zu],\"parameters\":{\"binary_data_size\":%zu}}",
                     i ? "," : "", names[i], type, rows[i], s->d, bytes);
        t_body_puts(&b, part);
    }
    t_body_puts(&b, "],\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}");
    *json = b.len;
    for (int i = 0; i < 3; i++) {
        size_t bytes;
        void *v = typed_values(s->dtype, s->h * rows[i] * s->d, &bytes);
        t_body_put(&b, v, bytes);
        free(v);
    }
    return b;
}

/* Hand b over as the transport does (a spare block of its size, fed in
 * 32 KiB pieces through an early decoder when the route takes one);
 * the answer's status. */
static int send_as_transport(const char *path, const char *const *headers, const struct t_body *b)
{
    struct api_request req;
    memset(&req, 0, sizeof req);
    req.method = "POST";
    req.path = path;
    req.header = t_header_fn;
    req.header_arg = (void *)headers;
    char *body = api_spare_alloc(b->len, NULL);
    struct api_early *e = api_early_open(&req, b->len);
    for (size_t off = 0; off < b->len; off += 32768) {
        size_t n = b->len - off < 32768 ? b->len - off : 32768;
        if (e)
            api_early_put(e, body, off, b->p + off, n);
        else
            memcpy(body + off, b->p + off, n);
    }
    req.body = body;
    req.body_len = b->len;
    req.early = e;
    struct api_response resp;
    api_handle(&ctx, &req, &resp);
    int status = resp.status;
    api_response_free(&resp);
    api_early_free(e);
    api_spare_free(body);
    return status;
}

/* Both kinds of request of one shape, built beforehand (their builder
 * takes blocks of api/spare.c too). */
struct client_bodies {
    struct t_body b64, v2;
    char v2_json[24];
};

static void bodies_init(struct client_bodies *c, const struct api_warm_shape *s,
                        bool options_first)
{
    size_t json;
    c->b64 = b64_body(s, options_first);
    c->v2 = v2_body(s, &json);
    snprintf(c->v2_json, sizeof c->v2_json, "%zu", json);
}

/* Whether both were answered 200 with every large block taken from the
 * kept ones (the kept blocks and bytes the same before and after each). */
static bool served_from_kept(const struct client_bodies *c)
{
    static const char *const b64_headers[] = {"Content-Type", "application/json", NULL};
    const char *const v2_headers[] = {"Content-Type", "application/octet-stream",
                                      "Inference-Header-Content-Length", c->v2_json, NULL};
    size_t bytes0, bytes1, bytes2;
    size_t kept0 = api_spare_kept(&bytes0);
    CHECK_EQ_INT(send_as_transport("/v1/attention", b64_headers, &c->b64), 200);
    size_t kept1 = api_spare_kept(&bytes1);
    CHECK_EQ_INT(send_as_transport("/v2/models/attention/infer", v2_headers, &c->v2), 200);
    size_t kept2 = api_spare_kept(&bytes2);
    return kept0 == kept1 && bytes0 == bytes1 && kept1 == kept2 && bytes1 == bytes2;
}

TEST(warm_up_leaves_what_a_request_of_its_shape_needs)
{
    static const struct api_warm_shape shapes[] = {
        {1, 512, 2048, 64, API_WARM_F32},   /* a base64 body over 1 MiB: the early decoder */
        {4, 64, 1024, 32, API_WARM_F32},    /* heads */
        {1, 256, 2048, 64, API_WARM_F64},
        {1, 512, 2048, 64, API_WARM_F16},
        {2, 128, 1024, 64, API_WARM_BF16},
    };
    /* Each shape with the options before the tensors and after them;
     * quick (memcheck, qemu): once each, in turn, with a quarter of the
     * queries (k and v still make the bodies and blocks large). */
    size_t shapes_n = sizeof shapes / sizeof shapes[0], per = t_quick() ? 1 : 2;
    for (size_t i = 0; i < per * shapes_n; i++) {
        struct api_warm_shape sh = shapes[i / per];
        if (t_quick())
            sh.n /= 4;
        const struct api_warm_shape *s = &sh;
        struct client_bodies c;
        bodies_init(&c, s, i % 2);
        api_spare_drop();
        CHECK(!served_from_kept(&c));               /* cold: new blocks */
        api_spare_drop();
        char err[512] = "";
        CHECK(api_warm_run(&ctx, s, NULL, err, sizeof err));
        CHECK_STR(err, "");
        CHECK(api_spare_kept(NULL) > 0);
        CHECK(served_from_kept(&c));
        free(c.b64.p);
        free(c.v2.p);
    }
    api_spare_drop();
}

TEST(warm_up_in_float32_leaves_float64_requests_cold)
{
    const struct api_warm_shape f32 = {1, t_quick() ? 64 : 256, 2048, 64, API_WARM_F32};
    struct api_warm_shape f64 = f32;
    f64.dtype = API_WARM_F64;
    struct client_bodies c;
    bodies_init(&c, &f64, false);
    api_spare_drop();
    char err[512] = "";
    CHECK(api_warm_run(&ctx, &f32, NULL, err, sizeof err));
    CHECK(!served_from_kept(&c));               /* twice the bytes: new blocks */
    api_spare_drop();
    CHECK(api_warm_run(&ctx, &f64, NULL, err, sizeof err));
    CHECK_STR(err, "");
    CHECK(served_from_kept(&c));
    free(c.b64.p);
    free(c.v2.p);
    api_spare_drop();
}

TEST(warm_up_needs_no_key_but_clients_still_do)
{
    ctx.cfg.api_key = "warm-secret";
    const struct api_warm_shape s = {1, 8, 16, 4, API_WARM_F32};
    char err[512] = "";
    CHECK(api_warm_run(&ctx, &s, NULL, err, sizeof err));
    struct t_body b = b64_body(&s, false);
    static const char *const headers[] = {"Content-Type", "application/json", NULL};
    CHECK_EQ_INT(send_as_transport("/v1/attention", headers, &b), 401);
    free(b.p);
    ctx.cfg.api_key = NULL;
}

TEST(warm_up_refuses_shapes_over_the_limits)
{
    char err[512] = "";
    const struct api_warm_shape big = {2, 1024, 1024, 1024, API_WARM_F32};   /* 6.3M inputs */
    CHECK(!api_warm_run(&ctx, &big, NULL, err, sizeof err));
    CHECK(strstr(err, "--max-elements") != NULL);
    size_t body = ctx.cfg.max_body_bytes;
    ctx.cfg.max_body_bytes = 100000;
    /* 30k inputs, 160 kB */
    const struct api_warm_shape wide = {1, 100, 100, 100, API_WARM_F32};
    err[0] = '\0';
    CHECK(!api_warm_run(&ctx, &wide, NULL, err, sizeof err));
    CHECK(strstr(err, "--max-body-bytes") != NULL && strstr(err, "base64 JSON") != NULL);
    ctx.cfg.max_body_bytes = body;
    const struct api_warm_shape huge = {1048576, 1048576, 1048576, 1048576, API_WARM_F32};
    err[0] = '\0';
    CHECK(!api_warm_run(&ctx, &huge, NULL, err, sizeof err));
    CHECK(strstr(err, "--max-elements") != NULL);
    size_t elements = ctx.cfg.max_elements;
    ctx.cfg.max_elements = 0;                   /* no cap: its base64 length overflows */
    err[0] = '\0';
    CHECK(!api_warm_run(&ctx, &huge, NULL, err, sizeof err));
    CHECK(strstr(err, "too large") != NULL);
    ctx.cfg.max_elements = elements;
}

int main(void)
{
    t_ctx_init(&ctx);
    ctx.cfg.max_body_bytes = (size_t)64 << 20;
    ctx.cfg.max_elements = (size_t)4 << 20;
    RUN(warm_parse_takes_shapes);
    RUN(warm_parse_refuses_the_rest);
    RUN(warm_up_leaves_what_a_request_of_its_shape_needs);
    RUN(warm_up_in_float32_leaves_float64_requests_cold);
    RUN(warm_up_needs_no_key_but_clients_still_do);
    RUN(warm_up_refuses_shapes_over_the_limits);
    TEST_MAIN_END();
}
