/*
 * tests/api/test_api_early.c — api/early.c: a large body's base64 strings
 * decoded while it arrives, their characters left out of the body.
 *
 * Each body goes to api_handle twice: whole, as an in-process caller sends
 * it (the reference), and put piece by piece through an early decoder
 * into a buffer that starts full of quotes, backslashes and '=' (so a
 * reader that looked into a hole would go astray), in pieces of many
 * sizes. The answers must be the same bytes but for "meta" (timings):
 * valid requests, and refusals with their codes, paths and messages
 * (a character outside the alphabet, '=' or an escape inside a long
 * string, bad padding at its end, a non-finite element, a body that ends
 * inside a string, a JSON syntax error after the strings, a long string under a key no reader takes,
 * the data before its shape, 2-byte and 8-byte dtypes, strings ending
 * on a unit, more long strings than the decoder keeps, float16 ties read
 * back from the text next to strings with holes). It also checks how
 * each answer was reached: how many strings the readers took from the
 * decoder, and whether holes were left (the fast reader answered) or the
 * body was written back whole (jansson answered), since a reader that
 * stumbles on a hole falls back to the slow path and still answers right.
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

static uint64_t rng_state = 0xE4C1D0B3A2958677ull;

static struct api_ctx ctx;

/* ---- bodies -------------------------------------------------------------- */

/* Base64 of bytes, malloc'd. */
static char *b64(const void *p, size_t n)
{
    struct api_buf b;
    api_buf_init(&b, SIZE_MAX / 2);
    api_base64_encode(&b, p, n);
    return api_buf_take(&b, NULL);
}

/* float32 values narrowed to float16 bits (round to nearest even; values
 * in [-1, 1) stay normal or subnormal). */
static uint16_t to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, e = (u >> 23) & 0xFF, m = u & 0x7FFFFF;
    int ex = (int)e - 127 + 15;
    if (ex <= 0) {                                  /* subnormal or zero */
        if (ex < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ex), h = m >> shift, rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)ex << 10) | (m >> 13), rem = m & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

/* One tensor object: {"shape":[n,d],"dtype":dtype,"data":"<text>"}, or with
 * "data" first. */
static void tensor(struct t_body *b, const char *key, size_t n, size_t d, const char *dtype,
                   const char *text, bool data_first)
{
    char head[160];
    snprintf(head, sizeof head, "\"%s\":{", key);
    t_body_puts(b, head);
    if (data_first) {
        t_body_puts(b, "\"data\":\"");
        t_body_puts(b, text);
        t_body_puts(b, "\",");
    }
    snprintf(head, sizeof head, "\"shape\":[%zu,%zu],\"dtype\":\"%s\"", n, d, dtype);
    t_body_puts(b, head);
    if (!data_first) {
        t_body_puts(b, ",\"data\":\"");
        t_body_puts(b, text);
        t_body_puts(b, "\"");
    }
    t_body_puts(b, "}");
}

/* The base64 of n x d values as float32 (esize 4), float16 (2) or
 * float64 (8) elements, malloc'd. */
static char *text_of(size_t n, size_t d, size_t esize)
{
    size_t count = n * d;
    float *v = t_values(&rng_state, count);
    unsigned char *raw = malloc(count * esize);
    for (size_t i = 0; i < count; i++) {
        uint16_t h = to_f16(v[i]);
        double x = v[i];
        memcpy(raw + i * esize, esize == 2 ? (void *)&h : esize == 8 ? (void *)&x : (void *)&v[i],
               esize);
    }
    char *t = b64(raw, count * esize);
    free(v);
    free(raw);
    return t;
}

static char *f32_text(size_t n, size_t d)
{
    return text_of(n, d, 4);
}

static char *f16_text(size_t n, size_t d)
{
    return text_of(n, d, 2);
}

static char *f64_text(size_t n, size_t d)
{
    return text_of(n, d, 8);
}

/* ---- the two ways of sending a body --------------------------------------- */

/* The answer without its "meta" member, as text (malloc'd), status first. */
static char *answer(const struct api_response *r)
{
    json_t *j = t_json(r);
    char *s, *out;

    if (!j)
        return NULL;
    json_object_del(j, "meta");
    s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(j);
    size_t n = strlen(s) + 16;
    out = malloc(n);
    snprintf(out, n, "%d %s", r->status, s);
    free(s);
    return out;
}

static char *send_whole(const struct t_body *b)
{
    struct api_response resp;
    memset(&resp, 0, sizeof resp);
    t_call_n(&ctx, "POST", "/v1/attention", NULL, b->p, b->len, &resp);
    char *a = answer(&resp);
    api_response_free(&resp);
    return a;
}

/* The size of the piece of b at off: 0 = random in [1, 5000], 1 = random
 * in [1, 100000], 2 = up to the next quote (so a piece ends exactly where
 * a string does) but at most 65536, else that size. */
static size_t piece(const struct t_body *b, size_t off, size_t how)
{
    if (how == 0)
        return 1 + (size_t)(t_rng_next(&rng_state) % 5000);
    if (how == 1)
        return 1 + (size_t)(t_rng_next(&rng_state) % 100000);
    if (how == 2) {
        const char *q = memchr(b->p + off + 1, '"', b->len - off - 1);
        size_t n = q ? (size_t)(q - b->p) - off : b->len - off;
        return n < 65536 ? n : 65536;
    }
    return how;
}

static const char hostile[] = "\"\\=\"A\\\"=";

/* The body put through an early decoder in pieces; *holes: whether the
 * buffer still differs from the body after the answer (characters left
 * out and not written back), *taken: strings the readers took from the
 * decoder. */
static char *send_early(const struct t_body *b, size_t how, bool eq_fill, bool *holes,
                        size_t *taken)
{
    struct api_request req;
    struct api_response resp;
    char *buf = malloc(b->len);
    struct api_early *e;
    size_t off = 0;

    for (size_t i = 0; i < b->len; i++)
        buf[i] = eq_fill ? '=' : hostile[i % (sizeof hostile - 1)];
    memset(&req, 0, sizeof req);
    req.method = "POST";
    req.path = "/v1/attention";
    req.header = t_header_fn;
    req.header_arg = (void *)t_json_headers;
    e = api_early_open(&req, b->len);
    CHECK(e != NULL);
    if (!e) {
        free(buf);
        return NULL;
    }
    while (off < b->len) {
        size_t n = piece(b, off, how);
        if (n > b->len - off)
            n = b->len - off;
        api_early_put(e, buf, off, b->p + off, n);
        off += n;
    }
    req.body = buf;
    req.body_len = b->len;
    req.early = e;
    memset(&resp, 0, sizeof resp);
    api_handle(&ctx, &req, &resp);
    *holes = memcmp(buf, b->p, b->len) != 0;
    *taken = api_early_taken(e);
    char *a = answer(&resp);
    api_response_free(&resp);
    api_early_free(e);
    free(buf);
    return a;
}

/* Piece sizes (piece()), and whether the buffer starts full of '='
 * (padding, where a reader looks at a string's last characters) instead
 * of the hostile pattern. */
static const struct {
    size_t how;
    bool eq_fill;
} ways[] = {{0, false}, {1, true}, {2, false}, {2, true}, {32768, false},
            {65536 - 7, true}, {31, false}, {4096 + 33, false}, {(size_t)1 << 30, false}};

/* Every way of sending b answers as the whole body does, with want_taken
 * strings taken from the decoder; want_holes 1: holes are left (the fast
 * reader answered), 0: none (the body was written back whole for jansson),
 * whenever pieces of whole units arrived inside strings. Quick (valgrind,
 * qemu): a third of the ways for each body, the next third for the next
 * body, so that the bodies of a test still meet every way. */
static void same_answers(const char *name, const struct t_body *b, size_t want_taken,
                         int want_holes)
{
    static size_t turn;
    char *ref = send_whole(b);
    CHECK(ref != NULL);
    turn++;
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        size_t how = ways[i].how;
        if (t_quick() && (i + turn) % 3)
            continue;
        bool holes = false;
        size_t taken = 0;
        char *got = send_early(b, how, ways[i].eq_fill, &holes, &taken);
        bool same = ref && got && strcmp(ref, got) == 0;
        bool units = how != 31 && how != ((size_t)1 << 30);
        if (!same || taken != want_taken || (units && holes != (want_holes == 1)))
            printf("  %s, pieces %zu%s: taken %zu, holes %d: %.150s\n    vs %.150s\n", name,
                   how, ways[i].eq_fill ? " ('=')" : "", taken, holes, got ? got : "(null)",
                   ref ? ref : "(null)");
        CHECK(same);
        CHECK(taken == want_taken);
        if (units)
            CHECK(holes == (want_holes == 1));
        if (!units && want_holes == 0)
            CHECK(!holes);
        free(got);
    }
    free(ref);
}

/* The reference answers with this status. */
static void answers_status(const struct t_body *b, int status)
{
    char *ref = send_whole(b), want[8];
    snprintf(want, sizeof want, "%d ", status);
    CHECK(ref && strncmp(ref, want, 4) == 0);
    if (ref && strncmp(ref, want, 4) != 0)
        printf("  expected %d: %.200s\n", status, ref);
    free(ref);
}

/* ---- the bodies ------------------------------------------------------------ */

/* Few queries (the attention stays cheap under valgrind and qemu) in a
 * string long enough to be decoded early; keys and values make the body
 * over 1 MiB. */
#define NQ 128
#define NK 800
#define D 128

/* q, k, v float32 with optional changes; extra: more members (text). */
/* A tensor member of an attention body. */
struct tspec {
    size_t rows, d;
    const char *dtype, *text;
    bool data_first;
};

/* {<lead>"q":…,"k":…,"v":…,"dtype":dtype,"encoding":"base64",
 * "return":["output"]<extra>} (lead and extra may be NULL). */
static void attention_body(struct t_body *b, const char *lead, const struct tspec t[3],
                           const char *dtype, const char *extra)
{
    static const char *const keys[3] = {"q", "k", "v"};

    t_body_puts(b, "{");
    if (lead)
        t_body_puts(b, lead);
    for (int i = 0; i < 3; i++) {
        tensor(b, keys[i], t[i].rows, t[i].d, t[i].dtype, t[i].text, t[i].data_first);
        t_body_puts(b, ",");
    }
    t_body_puts(b, "\"dtype\":\"");
    t_body_puts(b, dtype);
    t_body_puts(b, "\",\"encoding\":\"base64\",\"return\":[\"output\"]");
    if (extra)
        t_body_puts(b, extra);
    t_body_puts(b, "}");
}

/* q, k, v float32 (q and v with data first or last); extra: more members. */
static void qkv(struct t_body *b, char *q, char *k, char *v, bool data_first, const char *extra)
{
    const struct tspec t[3] = {{NQ, D, "float32", q, data_first},
                               {NK, D, "float32", k, false},
                               {NK, D, "float32", v, data_first}};
    attention_body(b, NULL, t, "float32", extra);
}

TEST(early_valid_bodies)
{
    char *q = f32_text(NQ, D), *k = f32_text(NK, D), *v = f32_text(NK, D);
    struct t_body b = {0};

    qkv(&b, q, k, v, false, NULL);
    same_answers("shape first", &b, 3, 1);
    answers_status(&b, 200);
    b.len = 0;
    qkv(&b, q, k, v, true, NULL);
    same_answers("data first", &b, 3, 1);
    free(q);
    free(k);
    free(v);
    free(b.p);
}

/* Strings of every padding (n * d * esize mod 3 = 0, 1, 2), one ending on
 * a whole unit of 32 characters, 2-byte and 8-byte dtypes. */
TEST(early_dtypes_and_ends)
{
    /* 258 x 128 float32: 132096 bytes, 176128 characters (32 | it) */
    char *q = f32_text(258, 128), *k16 = f16_text(NK, 128), *v64 = f64_text(NK, 128);
    struct t_body b = {0};

    CHECK(strlen(q) % 32 == 0);
    const struct tspec mixed[3] = {{258, 128, "float32", q, false},
                                   {NK, 128, "float16", k16, false},
                                   {NK, 128, "float64", v64, true}};
    attention_body(&b, NULL, mixed, "float32", NULL);
    same_answers("f32/f16/f64, unit end", &b, 3, 1);
    answers_status(&b, 200);
    free(q);
    free(k16);
    free(v64);

    /* d = 127: float16 n x 127 x 2 bytes; n = 305: 77470 = 1 mod 3 (two
     * '=') in 103296 characters, a whole number of units; n = 1603: 407162
     * = 2 mod 3 (one '=') */
    char *a = f16_text(305, 127), *c = f16_text(1603, 127), *e = f16_text(1603, 127);
    CHECK(strlen(a) % 32 == 0 && a[strlen(a) - 2] == '=');
    CHECK(c[strlen(c) - 1] == '=' && c[strlen(c) - 2] != '=');
    b.len = 0;
    const struct tspec halves[3] = {{305, 127, "float16", a, false},
                                    {1603, 127, "bfloat16", c, false},
                                    {1603, 127, "float16", e, false}};
    attention_body(&b, NULL, halves, "float16", NULL);
    same_answers("float16 body, '=' and '==' ends", &b, 3, 1);
    answers_status(&b, 200);
    free(a);
    free(c);
    free(e);
    free(b.p);
}

/* A copy of text with s written at position at. */
static char *with(const char *text, size_t at, const char *s)
{
    char *t = strdup(text);
    memcpy(t + at, s, strlen(s));
    return t;
}

/* Where a refusal goes in a string of len characters: three quarters in,
 * after the decoder has left holes before it (odd: inside a group). */
static size_t late(size_t len)
{
    return len / 4 * 3 / 4 * 4 + 1;
}

TEST(early_refusals)
{
    char *q = f32_text(NQ, D), *k = f32_text(NK, D), *v = f32_text(NK, D);
    size_t klen = strlen(k), vlen = strlen(v), at;
    struct t_body b = {0};
    char *t;

    /* a character outside the alphabet, then '=' inside */
    t = with(k, late(klen), "!");
    qkv(&b, q, t, v, false, NULL);
    same_answers("'!' in k", &b, 2, 0);
    free(t);
    t = with(v, late(vlen), "=");
    b.len = 0;
    qkv(&b, q, k, t, false, NULL);
    same_answers("'=' in v", &b, 2, 0);
    free(t);
    /* a whole unit of "====" at a unit's end, then more characters */
    t = with(k, late(klen) / 32 * 32 - 4, "====");
    b.len = 0;
    qkv(&b, q, t, v, true, NULL);
    same_answers("'====' in k", &b, 2, 0);
    free(t);
    /* an escape that JSON reads as a base64 character ('\/' is '/') */
    at = late(vlen);
    t = malloc(vlen + 2);
    memcpy(t, v, at);
    memcpy(t + at, "\\/", 2);
    memcpy(t + at + 2, v + at + 1, vlen - at);
    b.len = 0;
    qkv(&b, q, k, t, false, NULL);
    same_answers("escape in v", &b, 2, 1);
    answers_status(&b, 200);
    free(t);
    /* bad padding at the very end: of the right length ("=A==" decodes to
     * as many bytes as "AA==", refused by the decoder), and of another */
    CHECK(k[klen - 1] == '=' && k[klen - 2] == '=');
    t = with(k, klen - 4, "=A==");
    b.len = 0;
    qkv(&b, q, t, v, false, NULL);
    same_answers("bad padding", &b, 3, 0);
    free(t);
    t = strndup(k, klen - 4);                   /* a group short */
    b.len = 0;
    qkv(&b, q, t, v, false, NULL);
    same_answers("bad length", &b, 2, 1);
    free(t);
    /* a NaN late in v (float32 0x7FC00000) */
    {
        float *vals = t_values(&rng_state, (size_t)NK * D);
        uint32_t nan = 0x7FC00000;
        memcpy(&vals[NK * D / 4 * 3 + 5], &nan, 4);
        char *vt = b64(vals, (size_t)NK * D * 4);
        b.len = 0;
        qkv(&b, q, k, vt, false, NULL);
        same_answers("NaN in v", &b, 3, 1);
        answers_status(&b, 422);
        free(vt);
        free(vals);
    }
    /* the body ends inside v's string */
    b.len = 0;
    qkv(&b, q, k, v, false, NULL);
    b.len -= (vlen / 8) + 60;
    CHECK(b.len > (size_t)1 << 20);
    same_answers("ends inside v", &b, 0, 0);
    answers_status(&b, 400);
    /* a JSON syntax error after the strings */
    b.len = 0;
    qkv(&b, q, k, v, false, ",\"x\":tru");
    same_answers("syntax error", &b, 3, 0);
    free(q);
    free(k);
    free(v);
    free(b.p);
}

/* Long strings no reader takes: under keys of their own (more of them
 * than the decoder keeps), and inside a member that is not a tensor. */
TEST(early_strings_not_taken)
{
    char *q = f32_text(NQ, D), *k = f32_text(NK, D), *v = f32_text(NK, D);
    char *pad = f32_text(64, 128);              /* 43692 characters */
    struct t_body b = {0}, extra = {0};

    for (int i = 0; i < 9; i++) {
        char key[32];
        snprintf(key, sizeof key, ",\"x%d\":\"", i);
        t_body_puts(&extra, key);
        t_body_puts(&extra, pad);
        t_body_puts(&extra, "\"");
    }
    qkv(&b, q, k, v, false, extra.p);
    same_answers("nine unknown strings", &b, 3, 1);
    b.len = 0;
    extra.len = 0;
    t_body_puts(&extra, "\"rope\":{\"base\":\"");
    t_body_puts(&extra, pad);
    t_body_puts(&extra, "\"},");
    const struct tspec t[3] = {{NQ, D, "float32", q, false},
                               {NK, D, "float32", k, false},
                               {NK, D, "float32", v, false}};
    attention_body(&b, extra.p, t, "float32", NULL);   /* rope before q */
    same_answers("string inside rope", &b, 3, 1);
    free(q);
    free(k);
    free(v);
    free(pad);
    free(b.p);
    free(extra.p);
}

/* A float16 request whose k is nested arrays of numbers on float16
 * midpoints (re-rounded from the body's text, found by walking past q's
 * string with holes) between q and v in base64. */
TEST(early_half_ties_beside_holes)
{
    char *q = f16_text(200, D), *v = f16_text(NK, D);   /* q: 68268 characters */
    struct t_body b = {0};
    char num[64];

    t_body_puts(&b, "{");
    tensor(&b, "q", 200, D, "float16", q, false);
    t_body_puts(&b, ",\"k\":[");
    for (size_t i = 0; i < NK; i++) {
        t_body_puts(&b, i ? ",[" : "[");
        for (size_t j = 0; j < D; j++) {
            /* texts whose double is the midpoint 1 + 2^-11 but which lie
             * above it (float16 1 + 2^-10 from the text, 1 from the double)
             * or below it, and plain values */
            const char *tie = (i + j) % 3 == 0 ? "1.00048828125000000001"
                            : (i + j) % 3 == 1 ? "1.00048828124999999999" : NULL;
            if (tie)
                snprintf(num, sizeof num, j ? ",%s" : "%s", tie);
            else
                snprintf(num, sizeof num, j ? ",%.17g" : "%.17g",
                         (double)((i * 7 + j) % 13) / 16);
            t_body_puts(&b, num);
        }
        t_body_puts(&b, "]");
    }
    t_body_puts(&b, "],");
    tensor(&b, "v", NK, D, "float16", v, false);
    t_body_puts(&b, ",\"dtype\":\"float16\",\"encoding\":\"base64\",\"return\":[\"output\"]}");
    same_answers("float16 ties", &b, 2, 1);
    answers_status(&b, 200);
    free(q);
    free(v);
    free(b.p);
}

/* The decoder is only opened where it can be used. */
TEST(early_opens_for_large_attention_posts)
{
    struct api_request req;
    struct api_early *e;

    memset(&req, 0, sizeof req);
    req.method = "POST";
    req.path = "/v1/attention";
    CHECK((e = api_early_open(&req, (size_t)1 << 20)) != NULL);
    api_early_free(e);
    CHECK(api_early_open(&req, ((size_t)1 << 20) - 1) == NULL);
    CHECK(api_early_open(&req, SIZE_MAX) == NULL);              /* chunked */
    req.path = "/v2/models/attention/infer";
    CHECK(api_early_open(&req, (size_t)4 << 20) == NULL);
    req.path = "/v1/sessions";          /* read whole by jansson */
    CHECK(api_early_open(&req, (size_t)4 << 20) == NULL);
    req.path = "/v1/attention";
    req.method = "GET";
    CHECK(api_early_open(&req, (size_t)4 << 20) == NULL);
    api_early_free(NULL);
}

int main(void)
{
    t_ctx_init(&ctx);
    ctx.cfg.max_body_bytes = (size_t)64 << 20;
    ctx.cfg.max_elements = (size_t)8 << 20;
    RUN(early_opens_for_large_attention_posts);
    RUN(early_valid_bodies);
    RUN(early_dtypes_and_ends);
    RUN(early_refusals);
    RUN(early_strings_not_taken);
    RUN(early_half_ties_beside_holes);
    TEST_MAIN_END();
}
