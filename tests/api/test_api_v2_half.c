/*
 * tests/api/test_api_v2_half.c — OIP v2 FP16/BF16 inputs kept 2-byte:
 * q, k, v sent in the request's own half datatype (binary or JSON data)
 * stay in that form for the pass that widens them itself
 * (attn_forward_half); others are widened first. Every response equals,
 * byte for byte, the one of the same request whose k and v come as FP32
 * of the same values (read into float32 at once, as every v2 half input
 * was before), and its output bytes equal those of /v1/attention's base64
 * half request and of its float32-widened one. The reader keeps q, k, v
 * (and only them); refusals of bad 2-byte data keep their paths and text.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/half_testlib.h"
#include "api/codec/base64.h"
#include "api/internal.h"
#include "api/spare.h"
#include "api/v2/v2_impl.h"
#include "core/half.h"

static struct api_ctx ctx;

/* How a tensor travels: 2-byte or FP32 (the widened values), binary or
 * JSON data. */
enum form { BIN2, JSON2, BIN4, JSON4 };

struct vcase {
    size_t B, h, h_kv, n, L, d;     /* B 0: rank 3; h 0: rank 2 */
    const char *params;             /* members of "parameters", or "" */
    const char *more;               /* more inputs (",{...}"), or "" */
    const char *outputs;            /* the "outputs" array */
    const char *v1opts;             /* the same on /v1/attention, or NULL */
};

#define OUT_BIN "[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]"
#define BK16 "[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0.5]"
static const struct vcase cases[] = {
    /* the output-only key-blocked pass: q, k, v read in place */
    {0, 0, 0, 70, 90, 24, "", "", OUT_BIN, ""},
    {0, 2, 2, 33, 700, 32, "", "", OUT_BIN, ""},
    {0, 4, 2, 70, 90, 24, "\"causal\":\"bottom_right\"", "", OUT_BIN,
     ",\"causal\":\"bottom_right\""},
    {2, 2, 1, 33, 41, 20, "\"causal\":\"top_left\",\"softcap\":20", "",
     "[{\"name\":\"output\"}]", ",\"causal\":\"top_left\",\"softcap\":20"},
    /* a key bias: k prepared, so widened whole by the pass */
    {0, 2, 1, 50, 50, 16, "", ",{\"name\":\"bias_k\",\"datatype\":\"FP16\",\"shape\":[16],"
     "\"data\":" BK16 "}", OUT_BIN, ",\"bias\":{\"k\":" BK16 "}"},
    /* other passes: widened before */
    {0, 4, 2, 70, 90, 24, "", "", "[{\"name\":\"weights\"},{\"name\":\"output\","
     "\"parameters\":{\"binary_data\":true}}]", NULL},
    {0, 4, 2, 30, 40, 16, "", "", "[{\"name\":\"output\"},{\"name\":\"lse\"}]", NULL},
    {0, 2, 2, 1, 300, 16, "\"weights_top_k\":3", "",
     "[{\"name\":\"output\"},{\"name\":\"top_k_values\"}]", NULL},
};

static float widen1(uint16_t h, bool f16)
{
    return f16 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
}

static void shape_text(char *out, size_t cap, const struct vcase *c, bool kv)
{
    size_t heads = kv ? c->h_kv : c->h, rows = kv ? c->L : c->n;
    if (c->B)
        snprintf(out, cap, "[%zu,%zu,%zu,%zu]", c->B, heads, rows, c->d);
    else if (c->h)
        snprintf(out, cap, "[%zu,%zu,%zu]", heads, rows, c->d);
    else
        snprintf(out, cap, "[%zu,%zu]", rows, c->d);
}

static size_t count_of(const struct vcase *c, bool kv)
{
    return (c->B ? c->B : 1) * ((kv ? c->h_kv : c->h) ? (kv ? c->h_kv : c->h) : 1) *
           (kv ? c->L : c->n) * c->d;
}

/* One input of vals [n] in form fm into the header hd (after a comma
 * unless first), its binary bytes (if any) appended to bin. */
static void input(struct api_buf *hd, struct api_buf *bin, const char *name, const char *shape,
                  const uint16_t *vals, size_t n, bool f16, enum form fm, bool first)
{
    bool two = fm == BIN2 || fm == JSON2;
    api_buf_printf(hd, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":%s,",
                   first ? "" : ",", name, two ? (f16 ? "FP16" : "BF16") : "FP32", shape);
    if (fm == BIN2 || fm == BIN4) {
        api_buf_printf(hd, "\"parameters\":{\"binary_data_size\":%zu}}", n * (two ? 2 : 4));
        for (size_t i = 0; i < n; i++) {
            float f = widen1(vals[i], f16);
            uint32_t u;
            memcpy(&u, &f, 4);
            for (size_t k = 0; k < (two ? 2u : 4u); k++)
                api_buf_putc(bin, (char)((two ? vals[i] : u) >> (8 * k)));
        }
        return;
    }
    api_buf_puts(hd, "\"data\":[");
    for (size_t i = 0; i < n; i++)
        api_buf_printf(hd, "%s%.9g", i ? "," : "", (double)widen1(vals[i], f16));
    api_buf_puts(hd, "]}");
}

/* The v2 answer to case c with q, k, v in forms fq, fkv (k and v alike). */
static void v2_call(const struct vcase *c, bool f16, uint16_t *const t[3], enum form fq,
                    enum form fkv, const char *outputs, struct api_response *r)
{
    struct api_buf hd, bin;
    char sq[64], sk[64], lenbuf[32];
    static const char *const names[3] = {"q", "k", "v"};

    api_buf_init(&hd, (size_t)64 << 20);
    api_buf_init(&bin, (size_t)64 << 20);
    shape_text(sq, sizeof sq, c, false);
    shape_text(sk, sizeof sk, c, true);
    api_buf_printf(&hd, "{\"parameters\":{%s},\"inputs\":[", c->params);
    for (int i = 0; i < 3; i++)
        input(&hd, &bin, names[i], i ? sk : sq, t[i], count_of(c, i > 0), f16,
              i ? fkv : fq, i == 0);
    api_buf_puts(&hd, c->more);
    api_buf_printf(&hd, "],\"outputs\":%s}", outputs);
    char *text = api_buf_take(&hd, NULL);
    size_t hl = strlen(text);
    snprintf(lenbuf, sizeof lenbuf, "%zu", hl);
    const char *hb[] = {"Content-Type", "application/octet-stream",
                        "Inference-Header-Content-Length", lenbuf, NULL};
    size_t bl = bin.len;
    char *blob = api_buf_take(&bin, NULL);
    char *body = malloc(hl + bl + 1);
    memcpy(body, text, hl);
    if (bl)
        memcpy(body + hl, blob, bl);
    memset(r, 0, sizeof *r);
    t_call_n(&ctx, "POST", "/v2/models/attention/infer", bl ? hb : NULL, body, hl + bl, r);
    if (r->status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r->status, (int)r->body_len, r->body ? r->body : "");
    free(text), free(blob), free(body);
}

/* The output bytes of /v1/attention's base64 request of case c, q, k, v as
 * 2-byte values or (f32) float32 of them; malloc'd, *len bytes. */
static unsigned char *v1_output(const struct vcase *c, bool f16, uint16_t *const t[3], bool f32,
                                size_t *len)
{
    struct api_buf b;
    char sh[2][64];
    static const char *const names[3] = {"q", "k", "v"};
    struct api_response r;
    unsigned char *out = NULL;

    shape_text(sh[0], sizeof sh[0], c, false);
    shape_text(sh[1], sizeof sh[1], c, true);
    api_buf_init(&b, (size_t)64 << 20);
    api_buf_printf(&b, "{\"dtype\":\"%s\",\"encoding\":\"base64\",\"return\":[\"output\"]%s",
                   f16 ? "float16" : "bfloat16", c->v1opts);
    for (int i = 0; i < 3; i++) {
        api_buf_printf(&b, ",\"%s\":", names[i]);
        t_half_b64_tensor(&b, sh[i > 0], t[i], count_of(c, i > 0), f16, f32);
    }
    api_buf_puts(&b, "}");
    char *body = api_buf_take(&b, NULL);
    t_call(&ctx, "POST", "/v1/attention", body, &r);
    json_t *j = t_json(&r);
    const char *data = json_string_value(json_object_get(json_object_get(j, "output"), "data"));
    CHECK_EQ_INT(r.status, 200);
    if (data && api_base64_decoded_len(data, strlen(data), len)) {
        out = malloc(*len ? *len : 1);
        if (!api_base64_decode(data, strlen(data), out)) {
            free(out);
            out = NULL;
        }
    }
    json_decref(j);
    api_response_free(&r);
    free(body);
    return out;
}

/* The binary part of a v2 response (after the JSON header). */
static const unsigned char *v2_binary(const struct api_response *r, size_t *len)
{
    const char *hl = t_hdr(r, "Inference-Header-Content-Length");
    size_t n = hl ? strtoul(hl, NULL, 10) : r->body_len;
    *len = r->body_len - n;
    return (const unsigned char *)r->body + n;
}

static bool same_response(const struct api_response *a, const struct api_response *b)
{
    return a->status == 200 && b->status == 200 && a->body_len == b->body_len &&
           memcmp(a->body, b->body, a->body_len) == 0 &&
           (t_hdr(a, "Inference-Header-Content-Length") == NULL) ==
               (t_hdr(b, "Inference-Header-Content-Length") == NULL);
}

TEST(half_responses_equal_the_widened_ones)
{
    uint64_t rng = 2027;
    static const enum form forms[][2] = {{BIN2, BIN2}, {JSON2, JSON2}, {BIN2, JSON2},
                                         {JSON2, BIN4}, {BIN2, JSON4}};
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            const struct vcase *c = &cases[i];
            uint16_t *t[3] = {t_rand_half(&rng, count_of(c, false), f16),
                              t_rand_half(&rng, count_of(c, true), f16),
                              t_rand_half(&rng, count_of(c, true), f16)};
            struct api_response ref, r;
            v2_call(c, f16, t, BIN2, BIN4, c->outputs, &ref);   /* k, v read as float32 */
            CHECK_EQ_INT(ref.status, 200);
            for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
                v2_call(c, f16, t, forms[f][0], forms[f][1], c->outputs, &r);
                CHECK(same_response(&ref, &r));
                if (!same_response(&ref, &r))
                    printf("  case %zu form %zu (%s) differs\n", i, f, f16 ? "FP16" : "BF16");
                api_response_free(&r);
            }
            api_response_free(&ref);
            if (!c->v1opts)
                goto next;
            /* the output bytes of /v1/attention's base64 half requests */
            v2_call(c, f16, t, BIN2, BIN2, OUT_BIN, &r);
            size_t lb, l1, l32;
            const unsigned char *b2 = v2_binary(&r, &lb);
            unsigned char *o1 = v1_output(c, f16, t, false, &l1);
            unsigned char *o32 = v1_output(c, f16, t, true, &l32);
            CHECK_EQ_INT(r.status, 200);
            CHECK(o1 && l1 == lb && memcmp(o1, b2, lb) == 0);
            CHECK(o32 && l32 == lb && memcmp(o32, b2, lb) == 0);
            free(o1), free(o32);
            api_response_free(&r);
        next:
            free(t[0]), free(t[1]), free(t[2]);
        }
}

/* api_v2_read_inputs on header text hdr (its binary part bin [bl]) in a
 * request of half h; x holds the tensors (free with free_inputs). */
static bool read_inputs(const char *hdr, const void *bin, size_t bl, enum api_half h, bool seq,
                        struct v2_infer *x)
{
    struct api_request req = {0};
    struct api_response resp = {0};
    struct api_call c = {.ctx = &ctx, .req = &req, .resp = &resp, .half = h};
    json_t *j = json_loads(hdr, 0, NULL);

    req.body = hdr;                 /* the JSON text, for the decimal ties */
    req.body_len = strlen(hdr);
    memset(x, 0, sizeof *x);
    x->bin = bin;
    x->bin_len = bl;
    x->dt = ATTN_F32;
    x->half = h;
    x->seq = seq;
    x->budget = 1 << 20;
    bool ok = api_v2_read_inputs(&c, x, json_object_get(j, "inputs"));
    if (!ok && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", resp.status, (int)resp.body_len, resp.body ? resp.body : "");
    json_decref(j);
    api_response_free(&resp);
    return ok;
}

static void free_inputs(struct v2_infer *x)
{
    for (int i = 0; i < V2_NSLOT; i++)
        api_spare_free(x->t[i].data);
}

/* q, k, v in the request's own datatype are kept 2-byte, binary (the
 * bytes as sent) and JSON (the values' bits); FP32 ones, the other half
 * datatype, the biases, and a sequence's inputs are float32. */
TEST(reader_keeps_own_datatype_only)
{
    static const uint16_t q[4] = {0x3C00, 0xBC00, 0x3555, 0x0001};   /* 1, -1, ~1/3, 2^-24 */
    unsigned char bin[8];
    for (int i = 0; i < 4; i++)
        bin[2 * i] = (unsigned char)q[i], bin[2 * i + 1] = (unsigned char)(q[i] >> 8);
    static const char *const hdr =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,4],"
        "\"parameters\":{\"binary_data_size\":8}},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,4],\"data\":[0.5,-2,65504,1e-3]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[0.5,-2,3,1e-3]},"
        "{\"name\":\"bias_k\",\"datatype\":\"FP16\",\"shape\":[4],\"data\":[1,2,3,4]}]}";
    struct v2_infer x;

    CHECK(read_inputs(hdr, bin, sizeof bin, API_HALF_F16, false, &x));
    CHECK(x.t[V2_Q].half == API_HALF_F16 && x.t[V2_K].half == API_HALF_F16);
    CHECK(x.t[V2_V].half == API_HALF_NONE && x.t[V2_BK].half == API_HALF_NONE);
    CHECK(memcmp(x.t[V2_Q].data, q, sizeof q) == 0);
    const uint16_t *k = x.t[V2_K].data;
    CHECK(k[0] == 0x3800 && k[1] == 0xC000 && k[2] == 0x7BFF &&
          k[3] == half_f16_from_f64(1e-3));
    CHECK(((const float *)x.t[V2_V].data)[3] == half_f16_to_f32(half_f16_from_f64(1e-3)));
    CHECK(api_widen_2byte(&x.t[V2_K].data, &x.t[V2_K].half, 4) && x.t[V2_K].half == 0);
    CHECK(((const float *)x.t[V2_K].data)[2] == 65504.0f);
    free_inputs(&x);

    /* a sequence's inputs go to a float32 session: read as float32 */
    CHECK(read_inputs(hdr, bin, sizeof bin, API_HALF_F16, true, &x));
    CHECK(x.t[V2_Q].half == API_HALF_NONE && x.t[V2_K].half == API_HALF_NONE);
    CHECK(((const float *)x.t[V2_Q].data)[2] == half_f16_to_f32(0x3555));
    free_inputs(&x);

    /* BF16 in an FP16 request is rounded to float16 as before, not kept */
    static const char *const other =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,2]},"
        "{\"name\":\"k\",\"datatype\":\"BF16\",\"shape\":[1,2],\"data\":[1.0078125,2]},"
        "{\"name\":\"v\",\"datatype\":\"BF16\",\"shape\":[1,2],\"data\":[1,2]}]}";
    CHECK(read_inputs(other, NULL, 0, API_HALF_F16, false, &x));
    CHECK(x.t[V2_Q].half == API_HALF_F16 && x.t[V2_K].half == API_HALF_NONE);
    CHECK(((const float *)x.t[V2_K].data)[0] == 1.0078125f);
    free_inputs(&x);
    CHECK(read_inputs(other, NULL, 0, API_HALF_BF16, false, &x));
    CHECK(x.t[V2_Q].half == API_HALF_NONE && x.t[V2_K].half == API_HALF_BF16);
    free_inputs(&x);

    /* a decimal on a float16 midpoint as a double: the text decides, in
     * float32 (k is then widened): 1 + 2^-11 ties to 1, the longer text
     * lies above it and rounds up */
    static const char *const tie =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,2]},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,2],"
        "\"data\":[1.00048828125,1.00048828125000001]},"
        "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,2]}]}";
    CHECK(read_inputs(tie, NULL, 0, API_HALF_F16, false, &x));
    CHECK(x.t[V2_K].half == API_HALF_NONE && x.t[V2_V].half == API_HALF_F16);
    CHECK(((const float *)x.t[V2_K].data)[0] == 1.0f);
    CHECK(((const float *)x.t[V2_K].data)[1] == 1.0009765625f);
    free_inputs(&x);
}

/* JSON data holds numbers of the input's own datatype: an FP16 or BF16
 * input in a request of another dtype is rounded to its format from the
 * decimal text (a double on a midpoint is no tie of the text), and an FP32
 * or FP64 one in a half request is the binary value of that type, which
 * then rounds to the request's format as its bytes would. */
TEST(declared_datatype_decides_the_rounding)
{
    static const char *const halves =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,3],"
        "\"data\":[1.00048828125000001,65519.99999999999999999,1.00048828125]},"
        "{\"name\":\"v\",\"datatype\":\"BF16\",\"shape\":[1,3],"
        "\"data\":[1.00390625000000001,1.00390625,-1.00390625000000001]}]}";
    struct v2_infer x;

    CHECK(read_inputs(halves, NULL, 0, API_HALF_NONE, false, &x));
    const float *k = x.t[V2_K].data, *v = x.t[V2_V].data;
    CHECK(k && k[0] == 1.0009765625f && k[1] == 65504.0f && k[2] == 1.0f);
    CHECK(v && v[0] == 1.0078125f && v[1] == 1.0f && v[2] == -1.0078125f);
    free_inputs(&x);

    /* past the midpoint after 65504 as text too: outside FP16's range */
    static const char *const over =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,1],\"data\":[65520]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]}]}";
    CHECK(!read_inputs(over, NULL, 0, API_HALF_NONE, false, &x));
    free_inputs(&x);

    /* BF16 beside FP16 q: the bfloat16 of the text, then float16 */
    static const char *const mixed =
        "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,1],\"data\":[1]},"
        "{\"name\":\"k\",\"datatype\":\"BF16\",\"shape\":[1,1],\"data\":[1.00390625000000001]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,1],"
        "\"data\":[1.00048828125000001]},"
        "{\"name\":\"bias_v\",\"datatype\":\"FP64\",\"shape\":[1],"
        "\"data\":[1.00048828125000001]}]}";
    CHECK(read_inputs(mixed, NULL, 0, API_HALF_F16, false, &x));
    CHECK(((const float *)x.t[V2_K].data)[0] == 1.0078125f);
    /* FP32 and FP64 1 + 2^-11 exactly: float16's tie, to even */
    CHECK(((const float *)x.t[V2_V].data)[0] == 1.0f);
    CHECK(((const float *)x.t[V2_BV].data)[0] == 1.0f);
    free_inputs(&x);
}

/* JSON data of the other half datatype is that datatype's numbers, as its
 * binary bytes are: rounded once to it, then to the request's, never
 * re-rounded from the text. Here k's 2^-25 (BF16) is a float16 tie, and
 * 1 + 3 * 2^-11 (a float16 tie too, to 1 + 2^-9 from its text) is 1 in
 * BF16; the reverse in a BF16 request: 1 + 2^-8 (FP16) is a bfloat16 tie
 * and 2^-20 + 3 * 2^-28, a bfloat16 tie from its text, is 2^-20 in FP16. */
TEST(other_half_json_rounds_as_its_bytes)
{
    static const struct {
        enum api_half h;
        const char *dt, *json;
        uint16_t bits[2];           /* the same numbers as k's datatype */
    } oh[] = {
        {API_HALF_F16, "BF16", "[1.00146484375,2.98023223876953125e-08]", {0x3F80, 0x3300}},
        {API_HALF_BF16, "FP16", "[9.648501873016357421875e-07,1.00390625]",
         {0x0010, 0x3C04}},
    };
    for (size_t i = 0; i < sizeof oh / sizeof oh[0]; i++) {
        const char *q = oh[i].h == API_HALF_F16 ? "FP16" : "BF16";
        char js[512], bh[512];
        unsigned char bin[4];
        struct v2_infer a, b;
        for (int j = 0; j < 2; j++)
            bin[2 * j] = (unsigned char)oh[i].bits[j],
            bin[2 * j + 1] = (unsigned char)(oh[i].bits[j] >> 8);
        snprintf(js, sizeof js,
                 "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[1,2]},"
                 "{\"name\":\"k\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":%s},"
                 "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[1,2]}]}",
                 q, oh[i].dt, oh[i].json, q);
        snprintf(bh, sizeof bh,
                 "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[1,2]},"
                 "{\"name\":\"k\",\"datatype\":\"%s\",\"shape\":[1,2],"
                 "\"parameters\":{\"binary_data_size\":4}},"
                 "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[1,2]}]}",
                 q, oh[i].dt, q);
        CHECK(read_inputs(js, NULL, 0, oh[i].h, false, &a));
        CHECK(read_inputs(bh, bin, sizeof bin, oh[i].h, false, &b));
        const float *ka = a.t[V2_K].data, *kb = b.t[V2_K].data;
        CHECK(a.t[V2_K].half == API_HALF_NONE && b.t[V2_K].half == API_HALF_NONE);
        if (ka[0] != kb[0] || ka[1] != kb[1])
            printf("  %s k in a %s request: JSON [%.17g, %.17g], binary [%.17g, %.17g]\n",
                   oh[i].dt, q, ka[0], ka[1], kb[0], kb[1]);
        CHECK(ka[0] == kb[0] && ka[1] == kb[1]);
        free_inputs(&a);
        free_inputs(&b);
    }
}

/* An FP16/BF16 binary request, q [1,8], k and v [L,8], k's element bad_at
 * (< 0: none) set to the bits bad; k's binary_data_size off by koff bytes
 * and the body cut by cut bytes. */
static void bad_binary(bool f16, size_t L, long bad_at, uint16_t bad, int koff, size_t cut,
                       struct api_response *r)
{
    const char *dt = f16 ? "FP16" : "BF16";
    size_t cnt[3] = {8, 8 * L, 8 * L}, hl;
    char hdr[1024], lenbuf[32];
    hl = (size_t)snprintf(hdr, sizeof hdr, "{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"%s\",\"shape\":[1,8],\"parameters\":{\"binary_data_size\":16}},"
        "{\"name\":\"k\",\"datatype\":\"%s\",\"shape\":[%zu,8],\"parameters\":{\"binary_data_size\":%zu}},"
        "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[%zu,8],\"parameters\":{\"binary_data_size\":%zu}}],"
        "\"outputs\":[{\"name\":\"output\"}]}", dt, dt, L, (size_t)((long)(16 * L) + koff),
        dt, L, 16 * L);
    size_t total = hl + 2 * (cnt[0] + cnt[1] + cnt[2]);
    unsigned char *body = malloc(total), *p = body + hl;
    memcpy(body, hdr, hl);
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < cnt[t]; i++) {
            float x = (float)((i * 7 + (size_t)t * 3) % 11) / 8 - 0.6f;
            uint16_t h = f16 ? half_f16_from_f32(x) : half_bf16_from_f32(x);
            if (t == 1 && (long)i == bad_at)
                h = bad;
            *p++ = (unsigned char)h;
            *p++ = (unsigned char)(h >> 8);
        }
    snprintf(lenbuf, sizeof lenbuf, "%zu", hl);
    const char *h[] = {"Content-Type", "application/octet-stream",
                       "Inference-Header-Content-Length", lenbuf, NULL};
    memset(r, 0, sizeof *r);
    t_call_n(&ctx, "POST", "/v2/models/attention/infer", h, body, total - cut, r);
    free(body);
}

static const char *v2_err(const struct api_response *r, char *buf, size_t cap)
{
    json_t *j = t_json(r);
    snprintf(buf, cap, "%s", j ? json_string_value(json_object_get(j, "error")) : "");
    json_decref(j);
    if (getenv("TEST_VERBOSE"))
        printf("  %d %s\n", r->status, buf);
    return buf;
}

/* Infinities and NaNs in 2-byte binary k are refused at their element,
 * on either side of the 16 KiB blocks of the copy and check (8192
 * elements) and in the last, partial one; byte counts that do not fit are
 * refused as before; JSON numbers past float16 name their element. */
TEST(bad_half_inputs_keep_their_errors)
{
    static const long at[] = {0, 100, 8191, 8192, 16383, 16384, 16799};
    static const uint16_t bad16[] = {0x7C00, 0xFC00, 0x7E00, 0xFD01};
    static const uint16_t badbf[] = {0x7F80, 0xFF80, 0x7FC0, 0xFF81};
    struct api_response r;
    char err[512], want[160];

    for (int f16 = 0; f16 < 2; f16++) {
        bad_binary(f16, 2100, -1, 0, 0, 0, &r);     /* k of 16800 elements */
        CHECK_EQ_INT(r.status, 200);
        api_response_free(&r);
        for (size_t a = 0; a < sizeof at / sizeof *at; a++)
            for (size_t b = 0; b < 4; b++) {
                bad_binary(f16, 2100, at[a], f16 ? bad16[b] : badbf[b], 0, 0, &r);
                v2_err(&r, err, sizeof err);
                snprintf(want, sizeof want, "element %ld is not a finite number of %s", at[a],
                         f16 ? "float16" : "bfloat16");
                CHECK_EQ_INT(r.status, 400);
                CHECK(strstr(err, want) && strstr(err, "[non_finite at /inputs/1/data]"));
                api_response_free(&r);
            }
        /* binary_data_size off by a byte either way */
        for (int off = -1; off <= 1; off += 2) {
            bad_binary(f16, 3, -1, 0, off, 0, &r);
            v2_err(&r, err, sizeof err);
            snprintf(want, sizeof want, "binary_data_size is %d, the shape and datatype need "
                     "48 bytes", 48 + off);
            CHECK_EQ_INT(r.status, 400);
            CHECK(strstr(err, want) &&
                  strstr(err, "shape_mismatch at /inputs/1/parameters/binary_data_size"));
            api_response_free(&r);
        }
        /* the body a byte short: v's bytes are not all there */
        bad_binary(f16, 3, -1, 0, 0, 1, &r);
        v2_err(&r, err, sizeof err);
        CHECK_EQ_INT(r.status, 400);
        CHECK(strstr(err, "the body holds 47 binary bytes after earlier inputs, 48 are needed") &&
              strstr(err, "at /inputs/2]"));
        api_response_free(&r);
    }
    /* JSON: past float16's range, and a short data array */
    static const char *const json_bad[][2] = {
        {"[1,2,70000,3]", "number out of range of float16 [non_finite at /inputs/1/data/2]"},
        {"[[1,2],[3,-7e4]]", "number out of range of float16 [non_finite at /inputs/1/data/1/1]"},
        /* 65520 is the midpoint past 65504: the text decides, in float32 */
        {"[1,2,3,65520]", "element 3 is out of range of float16 [non_finite at /inputs/1/data]"},
        {"[1,2,3]", "data holds 3 elements, the shape needs 4 [shape_mismatch at /inputs/1/data]"},
    };
    for (size_t i = 0; i < sizeof json_bad / sizeof *json_bad; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"inputs\":["
                 "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,2]},"
                 "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[2,2],\"data\":%s},"
                 "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[2,2],\"data\":[1,2,3,4]}]}",
                 json_bad[i][0]);
        t_call(&ctx, "POST", "/v2/models/attention/infer", body, &r);
        v2_err(&r, err, sizeof err);
        CHECK_EQ_INT(r.status, 400);
        CHECK(strstr(err, json_bad[i][1]) != NULL);
        api_response_free(&r);
    }
}

int main(void)
{
    t_ctx_init(&ctx);
    ctx.cfg.max_body_bytes = (size_t)16 << 20;
    ctx.cfg.max_elements = (size_t)1 << 22;
    RUN(half_responses_equal_the_widened_ones);
    RUN(reader_keeps_own_datatype_only);
    RUN(declared_datatype_decides_the_rounding);
    RUN(other_half_json_rounds_as_its_bytes);
    RUN(bad_half_inputs_keep_their_errors);
    TEST_MAIN_END();
}
