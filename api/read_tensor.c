/*
 * api/read_tensor.c — tensors of a request: jansson values or the fast
 * reader's arrays -> struct api_tensor, with JSON-pointer errors.
 *
 * Tensors arrive as nested arrays or as {"shape","dtype","data"} base64.
 * For nested arrays the shape is taken from the first element at each
 * level, the element count is checked against the request's budget with
 * checked arithmetic, then every row's length is verified (ragged_matrix
 * with the path of the first bad row) — all before anything is allocated;
 * only then are the numbers converted and stored. Arrays that the fast
 * reader (api/codec/numread.c) already read for api_parse_body_pre() go through
 * read_pre() / read_pre_b64(), which apply the same checks in the same
 * order with the same errors.
 */
#include "api/read.h"
#include "api/codec/half.h"
#include "api/read_impl.h"
#include "core/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/base64.h"
#include "api/bulk.h"
#include "api/spare.h"
#include "core/attn.h"

/* Append "/index" to a path held in p[API_PATH_MAX] at length *len. */
static size_t path_push(char *p, size_t len, size_t index)
{
    int n;

    if (len >= API_PATH_MAX - 1)
        return len;
    n = snprintf(p + len, API_PATH_MAX - len, "/%zu", index);
    if (n < 0 || (size_t)n >= API_PATH_MAX - len)
        return len;     /* truncated pointer: keep the prefix */
    return len + (size_t)n;
}

/* ---- tensors: nested arrays ------------------------------------------- */

struct walk {
    struct api_call *c;
    const struct api_tensor_spec *spec;
    int rank;
    size_t shape[ATTN_MAX_RANK];
    char path[API_PATH_MAX];
    char *dst;                      /* next element to store */
    bool tie;                       /* a half number sat on a midpoint */
};

static void element_path(char *out, const char *path, size_t i, int rank,
                         const size_t *shape);

/* float32 of x, rounded to the call's half dtype when it has one. */
static enum api_err to_f32(enum api_half half, double x, float *dst, bool *tie,
                           const char **msg)
{
    float f = (float)x;
    bool t = false;

    if (half && x != -INFINITY) {
        if (!api_half_round(half, x, &f, tie ? &t : NULL)) {
            *msg = half == API_HALF_F16 ? "number is outside the float16 range"
                                        : "number is outside the bfloat16 range";
            return API_ERR_NON_FINITE;
        }
        if (tie)
            *tie |= t;
    } else if (isinf(f) && !isinf(x)) {
        *msg = "number is outside the float32 range";
        return API_ERR_NON_FINITE;
    }
    *dst = f;
    return API_ERR_NONE;
}

/* Half numbers that sat on a midpoint, re-rounded from the body's text
 * (api/codec/half.c); answers non_finite when one then overflows. */
static bool fix_ties(struct api_call *c, const char *path, float *data, int rank,
                     const size_t *shape, size_t count)
{
    char p[API_PATH_MAX];
    size_t i = api_half_fix_ties(c->req->body, c->req->body_len, c->req->early, path,
                                 c->half, data, count);

    if (i == count)
        return true;
    element_path(p, path, i, rank, shape);
    api_fail(c, API_ERR_NON_FINITE, p, "number is outside the %s range", api_half_name(c->half));
    return false;
}

/* Shape from the first element at each level; answers on error. */
static bool nested_shape(struct walk *w, const json_t *v)
{
    const json_t *cur = v;
    size_t base = strlen(w->path), len = base;

    w->rank = 0;
    while (json_is_array(cur)) {
        size_t n = json_array_size(cur);
        if (w->rank == w->spec->max_rank) {
            api_fail(w->c, API_ERR_INVALID_FIELD, w->path,
                     "expected nested arrays of rank %d..%d, got more levels",
                     w->spec->min_rank, w->spec->max_rank);
            return false;
        }
        if (n == 0) {
            w->path[len] = '\0';
            api_fail(w->c, API_ERR_EMPTY_MATRIX, w->path, "empty array");
            return false;
        }
        w->shape[w->rank++] = n;
        len = path_push(w->path, len, 0);
        cur = json_array_get(cur, 0);
    }
    w->path[base] = '\0';
    return true;
}

/* Every array at level l has shape[l] entries and, above the last level,
 * only arrays (ragged_matrix at the path of the first bad row). */
static bool nested_check(struct walk *w, const json_t *arr, int level,
                         size_t len)
{
    size_t i, n = json_array_size(arr);

    if (n != w->shape[level]) {
        w->path[len] = '\0';
        api_fail(w->c, n == 0 ? API_ERR_EMPTY_MATRIX : API_ERR_RAGGED_MATRIX, w->path,
                 "row has %zu entries, expected %zu", n, w->shape[level]);
        return false;
    }
    if (level == w->rank - 1)
        return true;
    for (i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        size_t l2 = path_push(w->path, len, i);
        if (!json_is_array(e)) {
            w->path[l2] = '\0';
            api_fail(w->c, API_ERR_RAGGED_MATRIX, w->path,
                     "expected an array (a row of the matrix)");
            return false;
        }
        if (!nested_check(w, e, level + 1, l2))
            return false;
    }
    return true;
}

/*
 * Convert one JSON element to the stored type at dst. Returns API_ERR_NONE
 * on success or the error (message in msg).
 */
static enum api_err leaf_read(const json_t *e, const struct api_tensor_spec *spec,
                              void *dst, const char **msg, enum api_half half, bool *tie)
{
    double x;

    if (spec->elem == API_ELEM_BOOL) {
        if (!json_is_boolean(e)) {
            *msg = "expected true or false";
            return API_ERR_INVALID_FIELD;
        }
        *(uint8_t *)dst = json_is_true(e) ? 1 : 0;
        return API_ERR_NONE;
    }
    if (spec->elem == API_ELEM_NULLABLE && json_is_null(e)) {
        x = -INFINITY;
    } else if (json_is_number(e)) {
        x = json_number_value(e);
        if (!isfinite(x)) {
            *msg = "number is not finite";
            return API_ERR_NON_FINITE;
        }
    } else {
        *msg = spec->elem == API_ELEM_NULLABLE ? "expected a number or null"
                                               : "expected a number";
        return API_ERR_INVALID_FIELD;
    }
    if (spec->dtype == ATTN_F32)
        return to_f32(half, x, (float *)dst, tie, msg);
    *(double *)dst = x;
    return API_ERR_NONE;
}

static size_t elem_size(const struct api_tensor_spec *spec)
{
    return spec->elem == API_ELEM_BOOL ? 1 : attn_dtype_size(spec->dtype);
}

static bool nested_fill(struct walk *w, const json_t *arr, int level,
                        size_t len)
{
    size_t i, n = json_array_size(arr), esz = elem_size(w->spec);

    for (i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        if (level < w->rank - 1) {
            if (!nested_fill(w, e, level + 1, path_push(w->path, len, i)))
                return false;
            continue;
        }
        const char *msg = NULL;
        enum api_err code = leaf_read(e, w->spec, w->dst, &msg, w->c->half, &w->tie);
        if (code != API_ERR_NONE) {
            w->path[path_push(w->path, len, i)] = '\0';
            api_fail(w->c, code, w->path, "%s", msg);
            return false;
        }
        w->dst += esz;
    }
    return true;
}

/* Count of shape[0..rank) against the budget; answers limit_exceeded. */
static bool budget_take(struct api_call *c, const char *path, int rank,
                        const size_t *shape, size_t *budget, size_t *count)
{
    size_t n = 1;
    int i;

    for (i = 0; i < rank; i++)
        if (!core_mul(n, shape[i], &n)) {
            api_fail(c, API_ERR_LIMIT_EXCEEDED, path,
                     "the shape's product of sizes overflows 64 bits, past the "
                     "request's remaining limit of %zu numbers (--max-elements)", *budget);
            return false;
        }
    if (n > *budget) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, path,
                 "%zu numbers exceed the request's remaining limit of %zu "
                 "(--max-elements)", n, *budget);
        return false;
    }
    *count = n;
    return true;
}

static bool read_nested(struct api_call *c, const json_t *v, const char *path,
                        const struct api_tensor_spec *spec, size_t *budget,
                        struct api_tensor *out)
{
    struct walk w;
    size_t count, bytes;
    void *data;

    memset(&w, 0, sizeof w);
    w.c = c;
    w.spec = spec;
    snprintf(w.path, sizeof w.path, "%s", path);
    if (!nested_shape(&w, v))
        return false;
    if (w.rank < spec->min_rank) {
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "expected nested arrays of rank %d..%d, got rank %d",
                 spec->min_rank, spec->max_rank, w.rank);
        return false;
    }
    if (!budget_take(c, path, w.rank, w.shape, budget, &count))
        return false;
    if (!nested_check(&w, v, 0, strlen(w.path)))
        return false;
    if (!core_mul(count, elem_size(spec), &bytes) || !(data = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    w.dst = data;
    w.path[strlen(path)] = '\0';
    if (!nested_fill(&w, v, 0, strlen(w.path)) ||
        (w.tie && !fix_ties(c, path, data, w.rank, w.shape, count))) {
        free(data);
        return false;
    }
    *budget -= count;
    out->dtype = spec->dtype;
    out->elem = spec->elem;
    out->rank = w.rank;
    memcpy(out->shape, w.shape, sizeof w.shape);
    out->count = count;
    out->data = data;
    return true;
}

/* ---- tensors: base64 -------------------------------------------------- */

enum b64_type { B64_F64, B64_F32, B64_BOOL, B64_F16, B64_BF16 };

static size_t b64_size(enum b64_type t)
{
    return t == B64_BOOL ? 1 : t == B64_F32 ? 4 : t == B64_F64 ? 8 : 2;
}

static enum api_bulk_elem bulk_elem(enum b64_type t)
{
    return t == B64_F32 ? API_BULK_F32 : t == B64_F64 ? API_BULK_F64
         : t == B64_F16 ? API_BULK_F16 : t == B64_BF16 ? API_BULK_BF16 : API_BULK_NONE;
}

static bool b64_shape(struct api_call *c, const json_t *v, const char *path,
                      const struct api_tensor_spec *spec, int *rank,
                      size_t *shape)
{
    char p[API_PATH_MAX], pi[API_PATH_MAX];
    size_t i, n;

    sub(p, path, "shape");
    n = json_array_size(v);
    if (!json_is_array(v) || n < (size_t)spec->min_rank ||
        n > (size_t)spec->max_rank) {
        api_fail(c, API_ERR_INVALID_FIELD, p, "expected an array of %d..%d sizes",
                 spec->min_rank, spec->max_rank);
        return false;
    }
    for (i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        api_pointer_index(pi, sizeof pi, p, i);
        if (api_size_too_large(e)) {
            api_fail(c, API_ERR_LIMIT_EXCEEDED, pi, "a dimension beyond 2^53 is larger "
                     "than any request can hold");
            return false;
        }
        if (!get_size(e, &shape[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, pi, "expected a size (integer >= 0)");
            return false;
        }
        if (shape[i] == 0) {
            api_fail(c, API_ERR_EMPTY_MATRIX, pi, "zero dimension");
            return false;
        }
    }
    *rank = (int)n;
    return true;
}

static bool b64_type(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec, enum b64_type *t)
{
    char p[API_PATH_MAX];
    const char *s = json_string_value(v);

    sub(p, path, "dtype");
    if (s && spec->elem == API_ELEM_BOOL && strcmp(s, "bool") == 0) {
        *t = B64_BOOL;
        return true;
    }
    if (s && spec->elem != API_ELEM_BOOL && strcmp(s, "float64") == 0) {
        *t = B64_F64;
        return true;
    }
    if (s && spec->elem != API_ELEM_BOOL && strcmp(s, "float32") == 0) {
        *t = B64_F32;
        return true;
    }
    if (s && spec->elem != API_ELEM_BOOL &&
        (strcmp(s, "float16") == 0 || strcmp(s, "bfloat16") == 0)) {
        *t = s[0] == 'f' ? B64_F16 : B64_BF16;
        return true;
    }
    api_fail(c, API_ERR_INVALID_FIELD, p, spec->elem == API_ELEM_BOOL
             ? "expected \"bool\"" : "expected \"float32\", \"float64\", \"float16\" or "
               "\"bfloat16\"");
    return false;
}

/* Convert (or check) n decoded elements of type t at src into dst;
 * answers on a bad element. src and dst may be the same array. */
/* Index of the first element of a same-type array that is not finite
 * (-inf allowed when allow_neg_inf), or n: a bit test per element, as the
 * base64 path runs at memory speed. */
/* Blocks of FINITE_BLOCK elements are checked without an early exit (so
 * the compiler vectorises them); only a block with a hit is scanned one by
 * one: an early-exit loop over every element was a visible share of a
 * base64 request (measured: docs/benchmarks.md, section "On the AVX2
 * EPYC"). */
#define FINITE_BLOCK 64

static bool bad_f32(uint32_t u, bool allow_neg_inf)
{
    return (u & 0x7F800000u) == 0x7F800000u && !(allow_neg_inf && u == 0xFF800000u);
}

static bool bad_f64(uint64_t u, bool allow_neg_inf)
{
    return (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull &&
           !(allow_neg_inf && u == 0xFFF0000000000000ull);
}

size_t api_first_nonfinite(const void *src, bool f64, size_t n, bool allow_neg_inf)
{
    size_t i = 0, j;
    unsigned any;

    if (!f64) {
        const uint32_t *u = src;
        for (; i + FINITE_BLOCK <= n; i += FINITE_BLOCK) {
            any = 0;
            for (j = 0; j < FINITE_BLOCK; j++)
                any |= bad_f32(u[i + j], allow_neg_inf);
            if (any)
                break;
        }
        for (; i < n; i++)
            if (bad_f32(u[i], allow_neg_inf))
                return i;
    } else {
        const uint64_t *u = src;
        for (; i + FINITE_BLOCK <= n; i += FINITE_BLOCK) {
            any = 0;
            for (j = 0; j < FINITE_BLOCK; j++)
                any |= bad_f64(u[i + j], allow_neg_inf);
            if (any)
                break;
        }
        for (; i < n; i++)
            if (bad_f64(u[i], allow_neg_inf))
                return i;
    }
    return n;
}

/* finite: src is known to hold no infinity or NaN that spec refuses
 * (checked as it was decoded, api/bulk.c), so the same-type paths need not
 * look again. */
static bool b64_convert(struct api_call *c, const char *path, enum b64_type t,
                        const void *src, bool finite, const struct api_tensor_spec *spec,
                        void *dst, size_t n)
{
    size_t i;

    if ((t == B64_F32 || t == B64_F64) && (t == B64_F32) == (spec->dtype == ATTN_F32) &&
        !c->half) {
        i = finite ? n : api_first_nonfinite(src, t == B64_F64, n,
                                             spec->elem == API_ELEM_NULLABLE);
        if (i < n) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not finite", i);
            return false;
        }
        if (dst != src)
            memcpy(dst, src, n * (t == B64_F32 ? 4 : 8));
        return true;
    }
    if (spec->dtype == ATTN_F32 && spec->elem != API_ELEM_BOOL &&
        ((t == B64_F16 && c->half == API_HALF_F16) || (t == B64_BF16 && c->half == API_HALF_BF16))) {
        /* the request's own half format: every value is one already */
        i = finite ? n : half_first_nonfinite(src, n, t == B64_F16,
                                              spec->elem == API_ELEM_NULLABLE);
        if (i < n) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not finite", i);
            return false;
        }
        if (dst == src)                 /* kept in its 2-byte form (keep_half) */
            return true;
        if (t == B64_F16)
            half_f16_to_f32_n(src, dst, n);
        else
            half_bf16_to_f32_n(src, dst, n);
        return true;
    }
    for (i = 0; i < n; i++) {
        double x;
        if (t == B64_BOOL) {
            uint8_t b = ((const uint8_t *)src)[i];
            if (b > 1) {
                api_fail(c, API_ERR_INVALID_FIELD, path, "element %zu is not 0 or 1", i);
                return false;
            }
            continue;
        }
        x = t == B64_F32 ? (double)((const float *)src)[i]
            : t == B64_F64 ? ((const double *)src)[i]
            : t == B64_F16 ? (double)half_f16_to_f32(((const uint16_t *)src)[i])
                           : (double)half_bf16_to_f32(((const uint16_t *)src)[i]);
        if (!isfinite(x) && !(spec->elem == API_ELEM_NULLABLE && x == -INFINITY)) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not finite", i);
            return false;
        }
        if (spec->dtype == ATTN_F32) {
            const char *msg = NULL;
            if (to_f32(c->half, x, (float *)dst + i, NULL, &msg) != API_ERR_NONE) {
                (void)msg;
                api_fail(c, API_ERR_NON_FINITE, path, "element %zu is outside the %s range", i,
                         c->half ? api_half_name(c->half) : "float32");
                return false;
            }
        } else {
            ((double *)dst)[i] = x;
        }
    }
    return true;
}

/* The request's half format when a base64 tensor of type t stays in it,
 * 2-byte (keep: api_read_tensor_keep), else API_HALF_NONE. */
static enum api_half kept_half(const struct api_call *c, const struct api_tensor_spec *spec,
                               enum b64_type t, bool keep)
{
    bool own = (t == B64_F16 && c->half == API_HALF_F16) ||
               (t == B64_BF16 && c->half == API_HALF_BF16);
    return keep && own && spec->dtype == ATTN_F32 && spec->elem == API_ELEM_REAL
               ? c->half : API_HALF_NONE;
}

static bool read_b64(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec, size_t *budget, bool keep_2,
                     struct api_tensor *out)
{
    static const char *const fields[] = {"shape", "dtype", "data", NULL};
    char pd[API_PATH_MAX];
    const json_t *jd = json_object_get(v, "data");
    size_t shape[ATTN_MAX_RANK] = {0}, count, sbytes, dbytes, have;
    int rank;
    enum b64_type t;
    void *src, *dst;
    bool same;

    if (!api_check_fields(c, v, path, fields) ||
        !b64_shape(c, json_object_get(v, "shape"), path, spec, &rank, shape) ||
        !b64_type(c, json_object_get(v, "dtype"), path, spec, &t))
        return false;
    sub(pd, path, "data");
    if (!json_is_string(jd)) {
        api_fail(c, API_ERR_INVALID_FIELD, pd, "expected a base64 string");
        return false;
    }
    if (!budget_take(c, path, rank, shape, budget, &count))
        return false;
    enum api_half keep = kept_half(c, spec, t, keep_2);
    if (!core_mul(count, keep ? 2 : elem_size(spec), &dbytes) ||
        !core_mul(count, b64_size(t), &sbytes)) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "tensor too large");
        return false;
    }
    if (!api_base64_decoded_len(json_string_value(jd), json_string_length(jd), &have)) {
        api_fail(c, API_ERR_INVALID_FIELD, pd, "data must be padded base64, a multiple of 4 "
                 "characters with no spaces or line breaks (it has %zu characters; %zu "
                 "bytes take %zu)", json_string_length(jd), sbytes, (sbytes + 2) / 3 * 4);
        return false;
    }
    if (have != sbytes) {
        api_fail(c, API_ERR_INVALID_FIELD, pd, "data must be base64 of %zu bytes (shape "
                 "and dtype), not %zu", sbytes, have);
        return false;
    }
    same = sbytes == dbytes;    /* same element type: decode in place */
    dst = malloc(dbytes ? dbytes : 1);
    src = same ? dst : malloc(sbytes ? sbytes : 1);
    if (!dst || !src) {
        free(dst);
        if (!same)
            free(src);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    struct api_bulk job = {.text = json_string_value(jd), .len = json_string_length(jd),
                           .dst = src, .elem = bulk_elem(t),
                           .allow_neg_inf = spec->elem == API_ELEM_NULLABLE};
    if (!api_bulk_run(&job, 1, attn_ws_pool(c->req->ws))) {
        api_fail(c, API_ERR_INVALID_FIELD, pd, "data is not valid base64");
    } else if (b64_convert(c, pd, t, src, !job.nonfinite, spec, dst, count)) {
        if (!same)
            free(src);
        *budget -= count;
        out->dtype = spec->dtype;
        out->elem = spec->elem;
        out->rank = rank;
        memcpy(out->shape, shape, sizeof shape);
        out->count = count;
        out->data = dst;
        out->half = keep;
    out->packed = true;
        return true;
    }
    free(dst);
    if (!same)
        free(src);
    return false;
}

/* ---- tensors: read by the fast reader ---------------------------------- */

/* The JSON pointer of flat element i of a [shape] array below path. */
static void element_path(char *out, const char *path, size_t i, int rank,
                         const size_t *shape)
{
    size_t idx[ATTN_MAX_RANK], len;
    int d;

    for (d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    snprintf(out, API_PATH_MAX, "%s", path);
    len = strlen(out);
    for (d = 0; d < rank; d++)
        len = path_push(out, len, idx[d]);
}

/* Same checks and errors as read_b64(), on a base64 tensor the fast reader
 * has decoded (anything it did not take went the jansson way). */
static bool read_pre_b64(struct api_call *c, struct api_numarray *a,
                         const char *path, const struct api_tensor_spec *spec,
                         size_t *budget, bool keep_2, struct api_tensor *out)
{
    enum b64_type t = a->raw_half == API_HALF_F16 ? B64_F16
                      : a->raw_half == API_HALF_BF16 ? B64_BF16
                      : a->raw_dtype == ATTN_F32 ? B64_F32 : B64_F64;
    char p[API_PATH_MAX];
    size_t count, dbytes;
    void *dst;

    if (a->rank < spec->min_rank || a->rank > spec->max_rank) {
        api_fail(c, API_ERR_INVALID_FIELD, sub(p, path, "shape"),
                 "expected an array of %d..%d sizes", spec->min_rank,
                 spec->max_rank);
        return false;
    }
    if (spec->elem == API_ELEM_BOOL) {
        api_fail(c, API_ERR_INVALID_FIELD, sub(p, path, "dtype"), "expected \"bool\"");
        return false;
    }
    if (!budget_take(c, path, a->rank, a->shape, budget, &count))
        return false;
    /* count * 8 fits: the raw bytes exist */
    dbytes = count * attn_dtype_size(spec->dtype);
    enum api_half keep = kept_half(c, spec, t, keep_2);
    dst = (spec->dtype == a->raw_dtype && !a->raw_half) || keep ? a->raw : malloc(dbytes);
    if (!dst) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    if (!b64_convert(c, sub(p, path, "data"), t, a->raw, a->raw_finite, spec, dst, count)) {
        if (dst != a->raw)
            free(dst);
        return false;
    }
    if (dst != a->raw)
        api_spare_free(a->raw);
    a->raw = NULL;
    *budget -= count;
    out->dtype = spec->dtype;
    out->elem = spec->elem;
    out->rank = a->rank;
    memcpy(out->shape, a->shape, sizeof a->shape);
    out->count = count;
    out->data = dst;
    out->half = keep;
    out->packed = true;
    return true;
}

/* Same checks and errors as read_nested(), on an array already in doubles. */
static bool read_pre(struct api_call *c, struct api_numarray *a,
                     const char *path, const struct api_tensor_spec *spec,
                     size_t *budget, bool keep_2, struct api_tensor *out)
{
    char p[API_PATH_MAX];
    size_t count, i, len;
    int d;

    if (a->raw)
        return read_pre_b64(c, a, path, spec, budget, keep_2, out);

    if (a->rank > spec->max_rank) {
        snprintf(p, sizeof p, "%s", path);
        for (d = 0, len = strlen(p); d < spec->max_rank; d++)
            len = path_push(p, len, 0);
        api_fail(c, API_ERR_INVALID_FIELD, p,
                 "expected nested arrays of rank %d..%d, got more levels",
                 spec->min_rank, spec->max_rank);
        return false;
    }
    if (a->rank < spec->min_rank) {
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "expected nested arrays of rank %d..%d, got rank %d",
                 spec->min_rank, spec->max_rank, a->rank);
        return false;
    }
    if (!budget_take(c, path, a->rank, a->shape, budget, &count))
        return false;
    if (spec->elem == API_ELEM_BOOL) {
        element_path(p, path, 0, a->rank, a->shape);
        api_fail(c, API_ERR_INVALID_FIELD, p, "expected true or false");
        return false;
    }
    if (spec->dtype == ATTN_F32) {
        float *f = (float *)a->data;    /* in place: 4-byte slots trail 8-byte reads */
        bool tie = false;
        for (i = 0; i < count; i++) {
            const char *msg = NULL;
            if (to_f32(c->half, a->data[i], f + i, &tie, &msg) != API_ERR_NONE) {
                element_path(p, path, i, a->rank, a->shape);
                api_fail(c, API_ERR_NON_FINITE, p, "%s", msg);
                return false;
            }
        }
        if (tie && !fix_ties(c, path, f, a->rank, a->shape, count))
            return false;
    }
    *budget -= count;
    out->dtype = spec->dtype;
    out->elem = spec->elem;
    out->rank = a->rank;
    memcpy(out->shape, a->shape, sizeof a->shape);
    out->count = count;
    out->data = a->data;            /* moved */
    a->data = NULL;
    return true;
}

/* The array from pre (by path) when the fast reader of api_parse_body_pre()
 * read it (pre may be NULL), else from v; keep: api_read_tensor_keep. */
static bool read_tensor(struct api_call *c, const json_t *v, const char *path,
                        const struct api_tensor_spec *spec, const struct api_pre *pre,
                        bool keep, struct api_tensor *out)
{
    size_t local = api_max_elements(c);
    size_t *budget = spec->budget ? spec->budget : &local;
    struct api_numarray *a = api_pre_find(pre, path);

    memset(out, 0, sizeof *out);
    if (a && v)
        return read_pre(c, a, path, spec, budget, keep, out);
    if (json_is_array(v))
        return read_nested(c, v, path, spec, budget, out);
    if (json_is_object(v))
        return read_b64(c, v, path, spec, budget, keep, out);
    api_fail(c, API_ERR_INVALID_FIELD, path, v ? "expected nested arrays or "
             "{\"shape\",\"dtype\",\"data\"}" : "missing required field");
    return false;
}

bool api_read_tensor(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec,
                     struct api_tensor *out)
{
    return read_tensor(c, v, path, spec, NULL, false, out);
}

bool api_read_tensor_keep(struct api_call *c, const json_t *v, const char *path,
                          const struct api_tensor_spec *spec, const struct api_pre *pre,
                          struct api_tensor *out)
{
    return read_tensor(c, v, path, spec, pre, true, out);
}

bool api_widen_2byte(void **data, enum api_half *half, size_t count)
{
    if (!*half)
        return true;
    float *f = malloc(count ? count * sizeof(float) : 1);   /* count·8 fits */
    if (!f)
        return false;
    if (*half == API_HALF_F16)
        half_f16_to_f32_n(*data, f, count);
    else
        half_bf16_to_f32_n(*data, f, count);
    api_spare_free(*data);
    *data = f;
    *half = API_HALF_NONE;
    return true;
}

bool api_tensor_widen(struct api_tensor *t)
{
    return api_widen_2byte(&t->data, &t->half, t->count);
}

enum attn_elem api_half_elem(enum api_half h)
{
    return h == API_HALF_F16 ? ATTN_ELEM_F16 : h == API_HALF_BF16 ? ATTN_ELEM_BF16
                                                                  : ATTN_ELEM_F32;
}

enum attn_elem api_tensor_elem(const struct api_tensor *t)
{
    return api_half_elem(t->half);
}

void api_tensor_free(struct api_tensor *t)
{
    api_spare_free(t->data);
    memset(t, 0, sizeof *t);
}

void api_tensor_heads(const struct api_tensor *t, size_t *heads,
                      size_t *rows, size_t *cols)
{
    *heads = t->rank >= 3 ? t->shape[t->rank - 3] : 1;
    *rows = t->rank >= 2 ? t->shape[t->rank - 2] : 1;
    *cols = t->rank >= 1 ? t->shape[t->rank - 1] : 0;
}
