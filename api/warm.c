/*
 * api/warm.c — the start-up requests of --warm-up (api/warm.h): the shape
 * list, and the made-up requests (base64 JSON and OIP v2 binary, in the
 * shape's dtype) run through the api as the transport would hand them
 * over.
 */
#include "api/warm.h"

#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/codec/base64.h"
#include "api/codec/half.h"
#include "api/internal.h"
#include "api/spare.h"
#include "api/v2/v2.h"
#include "core/half.h"
#include "core/tensor.h"

#define WARM_DIM_MAX ((size_t)1 << 20)
/* The body goes to the early decoder in pieces of this size, about what
 * the transport reads from a socket at a time. */
#define WARM_PIECE ((size_t)64 << 10)

/* Per enum api_warm_dtype: the request's computation and wire precision
 * as the api reads them (api_read_dtype). */
static const struct {
    enum attn_dtype dt;
    enum api_half half;
} warm_types[] = {
    [API_WARM_F32] = {ATTN_F32, API_HALF_NONE},
    [API_WARM_F64] = {ATTN_F64, API_HALF_NONE},
    [API_WARM_F16] = {ATTN_F32, API_HALF_F16},
    [API_WARM_BF16] = {ATTN_F32, API_HALF_BF16},
};

/* The dtype's name in a request's "dtype", in the api's own words. */
static const char *type_name(enum api_warm_dtype t)
{
    return api_dtype_name(warm_types[t].dt, warm_types[t].half);
}

/* The bytes of one of the dtype's elements. */
static size_t type_size(enum api_warm_dtype t)
{
    return api_dtype_size(warm_types[t].dt, warm_types[t].half);
}

/* ---- the shape list ------------------------------------------------------ */

/* The dtype named by text[0, len). */
static bool parse_dtype(const char *text, size_t len, enum api_warm_dtype *out)
{
    for (size_t i = 0; i < sizeof warm_types / sizeof warm_types[0]; i++) {
        const char *name = type_name((enum api_warm_dtype)i);
        if (strlen(name) == len && memcmp(text, name, len) == 0) {
            *out = (enum api_warm_dtype)i;
            return true;
        }
    }
    return false;
}

/* One "NxLxD" or "HxNxLxD", with an optional ":dtype", of text[0, len). */
static bool parse_one(const char *text, size_t len, struct api_warm_shape *s)
{
    enum api_warm_dtype dtype = API_WARM_F32;
    const char *colon = memchr(text, ':', len);
    if (colon) {
        if (!parse_dtype(colon + 1, len - (size_t)(colon + 1 - text), &dtype))
            return false;
        len = (size_t)(colon - text);
    }
    size_t dims[4], nd = 0, i = 0;
    while (i < len) {
        if (nd == 4 || text[i] < '0' || text[i] > '9')
            return false;
        size_t v = 0;
        for (; i < len && text[i] >= '0' && text[i] <= '9'; i++) {
            v = v * 10 + (size_t)(text[i] - '0');
            if (v > WARM_DIM_MAX)
                return false;
        }
        if (v == 0)
            return false;
        dims[nd++] = v;
        if (i < len && (text[i] != 'x' || ++i == len))
            return false;
    }
    if (nd == 3)
        *s = (struct api_warm_shape){1, dims[0], dims[1], dims[2], dtype};
    else if (nd == 4)
        *s = (struct api_warm_shape){dims[0], dims[1], dims[2], dims[3], dtype};
    else
        return false;
    return true;
}

bool api_warm_parse(const char *text, struct api_warm_shape *out, size_t *count)
{
    struct api_warm_shape got[API_WARM_MAX];
    size_t n = 0;
    for (bool more = *text != '\0'; more; ) {
        const char *comma = strchr(text, ',');
        size_t len = comma ? (size_t)(comma - text) : strlen(text);
        if (n == API_WARM_MAX || !parse_one(text, len, &got[n]))
            return false;           /* out and count as they were */
        n++;
        more = comma != NULL;
        text = comma ? comma + 1 : text;
    }
    memcpy(out, got, n * sizeof *got);
    *count = n;
    return true;
}

void api_warm_name(const struct api_warm_shape *s, char *buf, size_t cap)
{
    const char *sep = s->dtype == API_WARM_F32 ? "" : ":";
    const char *type = s->dtype == API_WARM_F32 ? "" : type_name(s->dtype);
    if (s->h > 1)
        snprintf(buf, cap, "%zux%zux%zux%zu%s%s", s->h, s->n, s->L, s->d, sep, type);
    else
        snprintf(buf, cap, "%zux%zux%zu%s%s", s->n, s->L, s->d, sep, type);
}

/* ---- the requests' bodies ---------------------------------------------------- */

/* One tensor of a body: its name, rows and bytes. */
struct warm_tensor {
    const char *name;
    size_t rows, bytes;
};

/* The JSON of a tensor's shape, "[n,d]" or "[h,n,d]". */
static int shape_json(char *o, size_t cap, const struct api_warm_shape *s,
                      const struct warm_tensor *t)
{
    if (s->h > 1)
        return snprintf(o, cap, "[%zu,%zu,%zu]", s->h, t->rows, s->d);
    return snprintf(o, cap, "[%zu,%zu]", t->rows, s->d);
}

/* Uniform floats in [-1, 1) from a xorshift generator: inputs of the size
 * and kind a client sends (a pass over zeros would take the same paths,
 * but zeros are not what warms a decoder's and encoder's caches). */
static void fill(float *x, size_t count, uint32_t *state)
{
    uint32_t r = *state;
    for (size_t i = 0; i < count; i++) {
        r ^= r << 13;
        r ^= r >> 17;
        r ^= r << 5;
        x[i] = (float)((double)(r >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    *state = r;
}

/* Bytes of a tensor made and encoded at a time: those whose base64 is one
 * piece, 48 KiB, a multiple of 3 (so the pieces' encodings join) and of
 * every element size. */
#define WARM_CHUNK (WARM_PIECE / 4 * 3)
_Static_assert(WARM_CHUNK % 24 == 0, "chunks join in base64 and hold whole elements");

/* A body being written in pieces of WARM_PIECE bytes, each handed over as
 * the transport hands over what it reads: to the early decoder, or copied
 * into the body. With body NULL it only counts its bytes. No copy of the
 * whole body is made: a pool thread's malloc arena would keep one of up
 * to --max-body-bytes, on every thread. */
struct warm_body {
    char *body;                     /* the request's block (NULL: measuring) */
    struct api_early *early;        /* its decoder, or NULL */
    size_t len;                     /* bytes so far, SIZE_MAX: too many */
    size_t flushed;                 /* of them in the body */
    size_t staged;
    size_t header_len;              /* v2: the JSON header's bytes */
    uint32_t state;
    enum api_warm_dtype dtype;      /* of the values */
    char stage[WARM_PIECE];
    char enc[WARM_PIECE];
    float f[WARM_CHUNK / 2];        /* a chunk's values, made as floats */
    union {                         /* and as the dtype's elements */
        float f32[WARM_CHUNK / 4];
        double f64[WARM_CHUNK / 8];
        uint16_t half[WARM_CHUNK / 2];
    } x;
};

static void flush(struct warm_body *b)
{
    if (b->early)
        api_early_put(b->early, b->body, b->flushed, b->stage, b->staged);
    else
        memcpy(b->body + b->flushed, b->stage, b->staged);
    b->flushed += b->staged;
    b->staged = 0;
}

static void put(struct warm_body *b, const void *p, size_t n)
{
    if (b->len == SIZE_MAX || n > SIZE_MAX - 1 - b->len) {
        b->len = SIZE_MAX;
        return;
    }
    b->len += n;
    while (b->body && n) {
        size_t k = sizeof b->stage - b->staged < n ? sizeof b->stage - b->staged : n;
        memcpy(b->stage + b->staged, p, k);
        b->staged += k;
        p = (const char *)p + k;
        n -= k;
        if (b->staged == sizeof b->stage)
            flush(b);
    }
}

static void putf(struct warm_body *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(struct warm_body *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->len = SIZE_MAX;          /* not written whole: the body is refused */
    else
        put(b, tmp, (size_t)n);
}

/* count values of b's dtype into b->x. */
static void make_values(struct warm_body *b, size_t count)
{
    fill(b->dtype == API_WARM_F32 ? b->x.f32 : b->f, count, &b->state);
    switch (b->dtype) {
    case API_WARM_F32:              /* made in place */
        break;
    case API_WARM_F64:
        for (size_t i = 0; i < count; i++)
            b->x.f64[i] = b->f[i];
        break;
    case API_WARM_F16:
        (void)half_f32_to_f16_n(b->f, b->x.half, count);
        break;
    case API_WARM_BF16:
        (void)half_f32_to_bf16_n(b->f, b->x.half, count);
        break;
    }
}

/* A tensor's values, bytes in all, as base64 text or as bytes. */
static void put_values(struct warm_body *b, size_t bytes, bool base64)
{
    if (!b->body) {                 /* measuring: the count alone */
        size_t chars;
        if (base64 && !api_base64_encoded_len(bytes, &chars))
            b->len = SIZE_MAX;
        else
            put(b, NULL, base64 ? chars : bytes);
        return;
    }
    size_t size = type_size(b->dtype);
    for (size_t done = 0; done < bytes; ) {
        size_t k = bytes - done < sizeof b->x ? bytes - done : sizeof b->x;
        make_values(b, k / size);
        if (base64) {
            size_t chars;
            (void)api_base64_encoded_len(k, &chars);     /* at most WARM_PIECE */
            api_base64_encode_to(b->enc, &b->x, k);
            put(b, b->enc, chars);
        } else {
            put(b, &b->x, k);
        }
        done += k;
    }
}

/* POST /v1/attention: q, k and v as base64 strings of s's dtype, which is
 * the request's too; the output asked for in base64. */
static void body_b64(struct warm_body *b, const struct api_warm_shape *s,
                     const struct warm_tensor *t)
{
    char shape[96];
    const char *type = type_name(s->dtype);
    put(b, "{", 1);
    for (int i = 0; i < 3; i++) {
        shape_json(shape, sizeof shape, s, &t[i]);
        putf(b, "\"%s\":{\"shape\":%s,\"dtype\":\"%s\",\"data\":\"", t[i].name, shape, type);
        put_values(b, t[i].bytes, true);
        put(b, "\"},", 3);
    }
    putf(b, "\"dtype\":\"%s\",\"encoding\":\"base64\",\"return\":[\"output\"]}", type);
}

/* POST /v2/models/attention/infer with the binary tensor data extension:
 * the JSON header (its length is the request's
 * Inference-Header-Content-Length), then q, k and v as bytes; the output
 * asked for as bytes. */
static void body_v2(struct warm_body *b, const struct api_warm_shape *s,
                    const struct warm_tensor *t)
{
    char shape[96];
    const char *datatype = api_v2_datatype_name(warm_types[s->dtype].dt,
                                                warm_types[s->dtype].half);
    put(b, "{\"inputs\":[", 11);
    for (int i = 0; i < 3; i++) {
        shape_json(shape, sizeof shape, s, &t[i]);
        putf(b, "%s{\"name\":\"%s\",\"shape\":%s,\"datatype\":\"%s\","
                "\"parameters\":{\"binary_data_size\":%zu}}",
             i ? "," : "", t[i].name, shape, datatype, t[i].bytes);
    }
    putf(b, "],\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}");
    b->header_len = b->len;
    for (int i = 0; i < 3; i++)
        put_values(b, t[i].bytes, false);
}

/* ---- the requests ----------------------------------------------------------- */

enum warm_kind { WARM_B64, WARM_V2 };

struct warm_req {
    enum warm_kind kind;
    char header_len[24];            /* v2: Inference-Header-Content-Length */
};

static const char *warm_header(void *arg, const char *name)
{
    const struct warm_req *w = arg;
    if (strcasecmp(name, "Content-Type") == 0)
        return w->kind == WARM_B64 ? "application/json" : "application/octet-stream";
    if (w->kind == WARM_V2 && strcasecmp(name, "Inference-Header-Content-Length") == 0)
        return w->header_len;
    return NULL;
}

/* The request's three tensors, or false when their sizes overflow or the
 * inputs are over --max-elements (err says which). */
static bool tensors_of(const struct api_ctx *ctx, const struct api_warm_shape *s,
                       struct warm_tensor t[3], char *err, size_t cap)
{
    size_t qn, kn, in, size = type_size(s->dtype);
    if (!core_mul3(s->h, s->n, s->d, &qn) || !core_mul3(s->h, s->L, s->d, &kn) ||
        kn > (SIZE_MAX - qn) / 2 || !core_mul(qn + 2 * kn, size, &in)) {
        snprintf(err, cap, "the shape is too large");
        return false;
    }
    size_t max = ctx->cfg.max_elements;
    if (max && qn + 2 * kn > max) {
        snprintf(err, cap, "its %zu input numbers are over --max-elements %zu", qn + 2 * kn, max);
        return false;
    }
    t[0] = (struct warm_tensor){"q", s->n, qn * size};
    t[1] = (struct warm_tensor){"k", s->L, kn * size};
    t[2] = (struct warm_tensor){"v", s->L, kn * size};
    return true;
}

/* The api's answer as err: its status and the start of its body. */
static void answer_as_error(const struct api_response *resp, char *err, size_t cap)
{
    int shown = resp->body_len > 300 ? 300 : (int)resp->body_len;
    snprintf(err, cap, "answered %d: %.*s", resp->status, shown,
             resp->body ? resp->body : "");
}

/* The api's request of kind w whose body b has written. */
static void request_of(struct warm_req *w, const struct warm_body *b, struct attn_ws *ws,
                       struct api_request *req)
{
    *req = (struct api_request){
        .method = "POST",
        .path = w->kind == WARM_B64 ? "/v1/attention" : "/v2/models/attention/infer",
        .header = warm_header, .header_arg = w, .ws = ws,
        .body = b->body, .body_len = b->len, .early = b->early,
    };
}

/* Run one request of kind w as the transport hands one over: its body in
 * a block of api/spare.c, written piece by piece (the base64 strings
 * decoded as they arrive, where the route takes them so), then the api,
 * without the key check (attnd itself asks). */
static bool run_one(struct api_ctx *ctx, struct warm_req *w, const struct api_warm_shape *s,
                    const struct warm_tensor *t, struct attn_ws *ws, char *err, size_t cap)
{
    void (*make)(struct warm_body *, const struct api_warm_shape *, const struct warm_tensor *) =
        w->kind == WARM_B64 ? body_b64 : body_v2;
    struct warm_body *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, cap, "out of memory");
        return false;
    }
    b->dtype = s->dtype;
    make(b, s, t);                  /* measured */
    size_t total = b->len, max = ctx->cfg.max_body_bytes;
    bool ok = false;
    if (total == SIZE_MAX)
        snprintf(err, cap, "the shape is too large");
    else if (max && total > max)
        snprintf(err, cap, "its body of %zu bytes is over --max-body-bytes %zu", total, max);
    else if (!(b->body = api_spare_alloc(total, NULL)))
        snprintf(err, cap, "out of memory");
    else
        ok = true;
    if (ok) {
        struct api_request req;
        request_of(w, b, ws, &req);
        b->early = api_early_open(&req, total);
        b->len = 0;
        b->state = 0x9e3779b9u;
        make(b, s, t);              /* written */
        flush(b);
        snprintf(w->header_len, sizeof w->header_len, "%zu", b->header_len);
        request_of(w, b, ws, &req);
        struct api_response resp;
        api_handle_trusted(ctx, &req, &resp);
        ok = resp.status == 200;
        if (!ok)
            answer_as_error(&resp, err, cap);
        api_response_free(&resp);
    }
    api_early_free(b->early);
    api_spare_free(b->body);        /* kept: the transport's next body of this size */
    free(b);
    return ok;
}

bool api_warm_run(struct api_ctx *ctx, const struct api_warm_shape *s, struct attn_ws *ws,
                  char *err, size_t cap)
{
    struct warm_tensor t[3];
    if (!tensors_of(ctx, s, t, err, cap))
        return false;
    static const char *const what[] = {"base64 JSON", "OIP v2 binary"};
    for (int k = WARM_B64; k <= WARM_V2; k++) {
        struct warm_req w = {.kind = (enum warm_kind)k};
        char why[400];
        if (!run_one(ctx, &w, s, t, ws, why, sizeof why)) {
            snprintf(err, cap, "%s: %s", what[k], why);
            return false;
        }
    }
    return true;
}
