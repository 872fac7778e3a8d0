/*
 * api/codec/half.c — float16 / bfloat16 numbers in and out (half.h).
 *
 * In: every number of a half request is rounded once from its double
 * (core/half.c); the rare double that is exactly a midpoint is re-rounded
 * from its decimal text (api/codec/halfread.c) by api_half_fix_ties, which
 * finds the tensor's text in the body by its JSON pointer
 * (api/codec/textat.c) and walks its numbers in order (row-major order is
 * textual order). The walk trusts the body's syntax: jansson has accepted
 * it already.
 *
 * Out: results are rounded in place (overflow is the caller's 422) and
 * printed by api/codec/dtoa_half.c, or sent as 2-byte little-endian base64.
 */
#include "api/codec/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/base64.h"
#include "api/codec/halfread.h"
#include "api/codec/textat.h"
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

size_t api_half_fix_ties(const char *body, size_t len, const struct api_early *early,
                         const char *path, enum api_half h, float *data, size_t count)
{
    const char *p, *e;
    size_t i = 0;

    if (!body || !api_text_at(body, len, early, path, &p, &e))
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
