/*
 * tests/api/test_api_half_pass.c — /v1/attention keeps base64 q, k, v sent
 * in the request's own half format 2-byte and lets the pass widen them
 * (attn_forward_half): the reader keeps them (and only them), and every
 * response equals, byte for byte but the elapsed time, the one of the same
 * request whose q, k, v come as float32 base64 of the same values (which
 * the reader widens at once, the path every half request took before).
 */
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/half_testlib.h"
#include "api/read.h"
#include "core/half.h"

static struct api_ctx ctx;

struct hreq {
    size_t B, h, h_kv, n, L, d;
    const char *opts;               /* more members of the body, or "" */
};

static void shape_text(char *out, size_t cap, size_t B, size_t h, size_t rows, size_t d)
{
    if (B)
        snprintf(out, cap, "[%zu,%zu,%zu,%zu]", B, h, rows, d);
    else
        snprintf(out, cap, "[%zu,%zu,%zu]", h, rows, d);
}

/* The body of r in float16 (or bfloat16), its q, k, v 2-byte or float32. */
static char *body(const struct hreq *r, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                  bool f16, bool f32)
{
    size_t B = r->B ? r->B : 1;
    char sq[64], sk[64];
    shape_text(sq, sizeof sq, r->B, r->h, r->n, r->d);
    shape_text(sk, sizeof sk, r->B, r->h_kv, r->L, r->d);
    struct api_buf b;
    api_buf_init(&b, (size_t)64 << 20);
    api_buf_printf(&b, "{\"dtype\":\"%s\",\"encoding\":\"base64\"%s,\"q\":",
                   f16 ? "float16" : "bfloat16", r->opts);
    t_half_b64_tensor(&b, sq, q, B * r->h * r->n * r->d, f16, f32);
    api_buf_puts(&b, ",\"k\":");
    t_half_b64_tensor(&b, sk, k, B * r->h_kv * r->L * r->d, f16, f32);
    api_buf_puts(&b, ",\"v\":");
    t_half_b64_tensor(&b, sk, v, B * r->h_kv * r->L * r->d, f16, f32);
    api_buf_puts(&b, "}");
    return api_buf_take(&b, NULL);
}

/* The response to body, its elapsed time dropped. */
static json_t *answer(const char *b, int *status)
{
    struct api_response resp;
    t_call(&ctx, "POST", "/v1/attention", b, &resp);
    *status = resp.status;
    json_t *j = t_json(&resp);
    api_response_free(&resp);
    json_t *meta = json_object_get(j, "meta");
    json_object_del(meta, "elapsed_us");
    json_object_del(j, "elapsed_us");
    return j;
}

#define OUT ",\"return\":[\"output\"]"
static const struct hreq reqs[] = {
    {0, 4, 2, 70, 90, 24, ",\"causal\":\"bottom_right\"" OUT},
    {0, 4, 2, 70, 90, 24, ",\"causal\":\"bottom_right\""},    /* every return */
    {0, 4, 2, 70, 90, 24, ",\"causal\":\"bottom_right\",\"return\":[\"weights\",\"output\"]"},
    {0, 4, 2, 70, 90, 24, ",\"heads\":[1,3],\"return\":[\"output\",\"lse\"]"},
    {2, 2, 1, 33, 41, 20, ",\"causal\":\"top_left\",\"softcap\":20" OUT},
    {0, 2, 2, 1, 700, 16, OUT},
    {0, 2, 1, 60, 60, 16, ",\"window\":{\"left\":9,\"sinks\":2},\"causal\":\"bottom_right\"" OUT},
    {0, 2, 1, 50, 50, 16, ",\"bias\":{\"k\":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0.5]},"
                          "\"rope\":{\"dims\":8}" OUT},
};

TEST(half_responses_equal_the_widened_ones)
{
    uint64_t rng = 2024;
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) {
            const struct hreq *r = &reqs[i];
            size_t B = r->B ? r->B : 1;
            uint16_t *q = t_rand_half(&rng, B * r->h * r->n * r->d, f16);
            uint16_t *k = t_rand_half(&rng, B * r->h_kv * r->L * r->d, f16);
            uint16_t *v = t_rand_half(&rng, B * r->h_kv * r->L * r->d, f16);
            char *bh = body(r, q, k, v, f16, false), *bf = body(r, q, k, v, f16, true);
            int sh, sf;
            json_t *jh = answer(bh, &sh), *jf = answer(bf, &sf);
            CHECK_EQ_INT(sh, 200);
            CHECK_EQ_INT(sf, 200);
            CHECK(jh && jf && json_equal(jh, jf));
            if (!(jh && jf && json_equal(jh, jf)))
                printf("  request %zu (%s) differs\n", i, f16 ? "float16" : "bfloat16");
            json_decref(jh);
            json_decref(jf);
            free(bh), free(bf), free(q), free(k), free(v);
        }
}

/* api_read_attention of j in a float16 request (the router's c->half). */
static bool read_f16(json_t *j, struct api_attention_req *a)
{
    struct api_request req = {0};
    struct api_response resp = {0};
    struct api_call c = {.ctx = &ctx, .req = &req, .resp = &resp, .half = API_HALF_F16};
    bool ok = api_read_attention(&c, j, a);
    api_response_free(&resp);
    return ok;
}

/* The reader keeps q, k, v 2-byte when they come in the request's own
 * half format, and only then; api_tensor_widen gives their exact floats. */
TEST(reader_keeps_own_format_only)
{
    uint64_t rng = 7;
    static const struct hreq r = {0, 2, 1, 5, 6, 8, ""};
    uint16_t *q = t_rand_half(&rng, 2 * 5 * 8, true), *k = t_rand_half(&rng, 6 * 8, true);
    uint16_t *v = t_rand_half(&rng, 6 * 8, true);
    for (int f32 = 0; f32 < 2; f32++) {
        char *b = body(&r, q, k, v, true, f32);
        json_t *j = json_loads(b, 0, NULL);
        struct api_attention_req a;
        CHECK(read_f16(j, &a));
        enum api_half want = f32 ? API_HALF_NONE : API_HALF_F16;
        CHECK(a.q.half == want && a.k.half == want && a.v.half == want);
        CHECK(api_tensor_elem(&a.k) == (f32 ? ATTN_ELEM_F32 : ATTN_ELEM_F16));
        CHECK(api_tensor_widen(&a.k) && a.k.half == API_HALF_NONE);
        const float *kf = a.k.data;
        bool same = true;
        for (size_t i = 0; i < 6 * 8; i++)
            same = same && kf[i] == half_f16_to_f32(k[i]);
        CHECK(same);
        api_attention_req_free(&a);
        json_decref(j);
        free(b);
    }
    /* bfloat16 data in a float16 request is rounded as before, not kept */
    char *b = body(&r, q, k, v, false, false);
    json_t *j = json_loads(b, 0, NULL);
    struct api_attention_req a;
    json_object_set_new(j, "dtype", json_string("float16"));
    CHECK(read_f16(j, &a));
    CHECK(a.q.half == API_HALF_NONE && a.k.half == API_HALF_NONE);
    api_attention_req_free(&a);
    json_decref(j);
    free(b), free(q), free(k), free(v);
}

int main(void)
{
    t_ctx_init(&ctx);
    ctx.cfg.max_body_bytes = (size_t)16 << 20;
    ctx.cfg.max_elements = (size_t)1 << 22;
    RUN(half_responses_equal_the_widened_ones);
    RUN(reader_keeps_own_format_only);
    TEST_MAIN_END();
}
