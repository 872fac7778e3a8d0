/*
 * api/codec/half.c — float16 / bfloat16 numbers in and out (half.h).
 *
 * In: every number of a half request is rounded once from its double
 * (core/half.c); the rare double that is exactly a midpoint is re-rounded
 * from its decimal text (api/codec/halfread.c) by api_half_fix_ties, which
 * finds
 * the tensor's text in the body by its JSON pointer and walks its numbers
 * in order (row-major order is textual order). The walk trusts the body's
 * syntax: jansson has accepted it already.
 *
 * Out: results are rounded in place (overflow is the caller's 422) and
 * printed by api/codec/dtoa_half.c, or sent as 2-byte little-endian base64.
 */
#include "api/codec/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/codec/base64.h"
#include "api/early.h"
#include "api/codec/halfread.h"
#include "api/codec/write.h"
#include "core/half.h"

const char *api_half_name(enum api_half h)
{
    return h == API_HALF_F16 ? "float16" : h == API_HALF_BF16 ? "bfloat16" : NULL;
}

const char *api_dtype_name(enum attn_dtype dt, enum api_half half)
{
    return half != API_HALF_NONE ? api_half_name(half) : attn_dtype_name(dt);
}

size_t api_dtype_size(enum attn_dtype dt, enum api_half half)
{
    return half != API_HALF_NONE ? sizeof(uint16_t) : attn_dtype_size(dt);
}

static uint16_t narrow(enum api_half h, double x)
{
    return h == API_HALF_F16 ? half_f16_from_f64(x) : half_bf16_from_f64(x);
}

static float widen(enum api_half h, uint16_t b)
{
    return h == API_HALF_F16 ? half_f16_to_f32(b) : half_bf16_to_f32(b);
}

static bool finite_bits(enum api_half h, uint16_t b)
{
    return h == API_HALF_F16 ? half_f16_is_finite(b) : half_bf16_is_finite(b);
}

bool api_half_round(enum api_half h, double x, float *out, bool *tie)
{
    bool mid = h == API_HALF_F16 ? half_f16_is_midpoint(x) : half_bf16_is_midpoint(x);
    uint16_t b = narrow(h, x);

    if (tie)
        *tie = mid;
    if (!finite_bits(h, b)) {
        if (!mid || !tie)
            return false;
        b = narrow(h, nextafter(x, 0));     /* the text decides later */
    }
    *out = widen(h, b);
    return true;
}

uint16_t api_half_bits(enum api_half h, float x)
{
    return h == API_HALF_F16 ? half_f16_from_f32(x) : half_bf16_from_f32(x);
}

/* ---- the tensor's text by JSON pointer ------------------------------------ */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string starting at p ('"'); one with holes (early,
 * api/early.h) is stepped over without being read. */
static const char *skip_string(const struct api_early *early, const char *p, const char *e)
{
    const char *q = api_early_quote(early, p);

    if (q)
        return q + 1;
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\')
            p++;
    return p < e ? p + 1 : e;
}

/* Past the value starting at p. */
static const char *skip_value(const struct api_early *early, const char *p, const char *e)
{
    int depth = 0;
    do {
        if (p >= e)
            return e;
        if (*p == '"') {
            p = skip_string(early, p, e);
            continue;
        }
        if (*p == '[' || *p == '{')
            depth++;
        else if (*p == ']' || *p == '}')
            depth--;
        else if (depth == 0) {              /* a number or a literal */
            while (p < e && *p != ',' && *p != ']' && *p != '}' && *p != ' ' &&
                   *p != '\n' && *p != '\t' && *p != '\r')
                p++;
            return p;
        }
        p++;
    } while (depth > 0);
    return p;
}

/* Whether the key string [ks, ke) (its quotes included) is the pointer
 * token tok[0..tl) (the api's own names: no ~ escapes) as jansson reads
 * it: a key with escapes ("\\u0071" is "q") is decoded first. */
static bool key_is(const char *ks, const char *ke, const char *tok, size_t tl)
{
    size_t n = (size_t)(ke - ks) - 2;
    json_t *k;
    bool is;

    if (n < tl || n > 6 * tl)
        return false;   /* a byte of a key takes 1 to 6 characters (\\u00XX):
                           a long string (holes, early) is never read */
    if (!memchr(ks + 1, '\\', n))
        return n == tl && memcmp(ks + 1, tok, tl) == 0;
    k = json_loadb(ks, (size_t)(ke - ks), JSON_DECODE_ANY, NULL);
    is = json_is_string(k) && json_string_length(k) == tl &&
         memcmp(json_string_value(k), tok, tl) == 0;
    json_decref(k);
    return is;
}

/* The value at pointer ptr below the value at p -> [*vs, *ve); false when
 * absent. Pointer tokens are plain (the api's own names and indices). */
static bool locate(const struct api_early *early, const char *p, const char *e,
                   const char *ptr, const char **vs, const char **ve)
{
    p = skip_ws(p, e);
    while (*ptr == '/') {
        const char *tok = ++ptr;
        size_t tl;
        while (*ptr && *ptr != '/')
            ptr++;
        tl = (size_t)(ptr - tok);
        if (p >= e)
            return false;
        if (*p == '{') {
            bool found = false;
            for (p = skip_ws(p + 1, e); p < e && *p == '"';) {
                const char *ks = p, *kend = skip_string(early, p, e);
                bool match = kend - ks >= 2 && key_is(ks, kend, tok, tl);
                p = skip_ws(kend, e);
                p = skip_ws(p + 1, e);          /* ':' */
                if (match) {
                    found = true;
                    break;
                }
                p = skip_ws(skip_value(early, p, e), e);
                if (p < e && *p == ',')
                    p = skip_ws(p + 1, e);
            }
            if (!found)
                return false;
        } else if (*p == '[') {
            size_t idx = 0, i;
            for (i = 0; i < tl; i++) {
                if (tok[i] < '0' || tok[i] > '9' || idx > SIZE_MAX / 10)
                    return false;
                idx = idx * 10 + (size_t)(tok[i] - '0');
            }
            p = skip_ws(p + 1, e);
            for (i = 0; i < idx && p < e && *p != ']'; i++) {
                p = skip_ws(skip_value(early, p, e), e);
                if (p < e && *p == ',')
                    p = skip_ws(p + 1, e);
            }
            if (p >= e || *p == ']')
                return false;
        } else {
            return false;
        }
    }
    *vs = p;
    *ve = skip_value(early, p, e);
    return true;
}

size_t api_half_fix_ties(const char *body, size_t len, const struct api_early *early,
                         const char *path, enum api_half h, float *data, size_t count)
{
    const char *p, *e, *end = body + len;
    size_t i = 0;

    if (!body || !locate(early, body, end, path, &p, &e))
        return count;
    while (p < e && i < count) {
        char ch = *p;
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            const char *ns = p;
            char tmp[64];
            while (p < e && *p != ',' && *p != ']' && *p != ' ' && *p != '\n' &&
                   *p != '\t' && *p != '\r')
                p++;
            size_t nl = (size_t)(p - ns);
            /* the double of the text: strtod needs a terminator */
            char *heap = nl < sizeof tmp ? NULL : malloc(nl + 1);
            char *t = heap ? heap : tmp;
            if (nl >= sizeof tmp && !heap)
                return count;
            memcpy(t, ns, nl);
            t[nl] = '\0';
            double x = strtod(t, NULL);
            free(heap);
            if (h == API_HALF_F16 ? half_f16_is_midpoint(x) : half_bf16_is_midpoint(x)) {
                uint16_t b = api_half_from_text(ns, nl, x, h == API_HALF_BF16);
                if (!finite_bits(h, b))
                    return i;
                data[i] = widen(h, b);
            }
            i++;
        } else if (ch == 'n') {             /* null: an element left alone */
            p += 4;
            i++;
        } else {
            p++;
        }
    }
    return count;
}

size_t api_half_round_matrix(enum api_half h, float *x, size_t n)
{
    uint16_t b[1024];                   /* a block at a time through the array converters */
    for (size_t i0 = 0; i0 < n; i0 += 1024) {
        size_t m = n - i0 < 1024 ? n - i0 : 1024;
        size_t j = h == API_HALF_F16 ? half_f32_to_f16_n(x + i0, b, m)
                                     : half_f32_to_bf16_n(x + i0, b, m);
        for (; j < m; j++)              /* -inf and NaN stay; anything else overflowed */
            if (!finite_bits(h, b[j]) && x[i0 + j] != -INFINITY && !isnan(x[i0 + j]))
                return i0 + j;
        if (h == API_HALF_F16)
            half_f16_to_f32_n(b, x + i0, m);
        else
            half_bf16_to_f32_n(b, x + i0, m);
    }
    return n;
}

/* ---- writers ------------------------------------------------------------- */

static size_t fmt_half(char *out, enum api_half h, float x, int digits)
{
    if (!isfinite(x)) {
        memcpy(out, "null", 5);
        return 4;
    }
    if (digits > 0)
        return (size_t)snprintf(out, API_NUM_MAX, "%.*g", digits > 17 ? 17 : digits,
                                (double)x);
    uint16_t b = api_half_bits(h, x);
    return h == API_HALF_F16 ? api_dtoa_f16(out, b) : api_dtoa_bf16(out, b);
}

bool api_write_matrix_half(struct api_buf *b, const float *data, enum api_half h, int rank,
                           const size_t *shape, int digits)
{
    char num[API_NUM_MAX];
    size_t n = rank >= 1 ? shape[0] : 1, stride = 1;

    api_buf_putc(b, '[');
    if (rank <= 1) {
        for (size_t j = 0; j < n; j++) {
            size_t len = fmt_half(num, h, data[j], digits);
            if (j)
                api_buf_putc(b, ',');
            api_buf_append(b, num, len);
        }
        return api_buf_putc(b, ']');
    }
    for (int d = 1; d < rank; d++)
        stride *= shape[d];                 /* fits: the data exists */
    for (size_t i = 0; i < n && api_buf_ok(b); i++) {
        if (i)
            api_buf_putc(b, ',');
        api_write_matrix_half(b, data + i * stride, h, rank - 1, shape + 1, digits);
    }
    return api_buf_putc(b, ']');
}

bool api_write_matrix_b64_half(struct api_buf *b, const float *data, enum api_half h,
                               int rank, const size_t *shape)
{
    size_t count = 1;
    uint16_t *bits;

    for (int i = 0; i < rank; i++)
        if (!core_mul(count, shape[i], &count))
            return false;
    if (count > SIZE_MAX / 2 || !(bits = malloc(count ? count * 2 : 1)))
        return false;
    if (h == API_HALF_F16)                  /* as api_half_bits, an array at a time */
        half_f32_to_f16_n(data, bits, count);   /* little-endian in memory */
    else
        half_f32_to_bf16_n(data, bits, count);
    api_buf_puts(b, "{\"shape\":[");
    for (int i = 0; i < rank; i++) {
        char t[24];
        int n = snprintf(t, sizeof t, "%s%zu", i ? "," : "", shape[i]);
        api_buf_append(b, t, (size_t)n);
    }
    api_buf_puts(b, "],\"dtype\":\"");
    api_buf_puts(b, api_half_name(h));
    api_buf_puts(b, "\",\"data\":\"");
    api_base64_encode(b, bits, count * 2);
    free(bits);
    return api_buf_puts(b, "\"}");
}
