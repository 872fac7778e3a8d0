/*
 * api/read.c — jansson values -> core types, with JSON-pointer errors.
 *
 * Tensors arrive as nested arrays or as {"shape","dtype","data"} base64.
 * For nested arrays the shape is taken from the first element at each
 * level, the element count is checked against the request's budget with
 * checked arithmetic, then every row's length is verified (ragged_matrix
 * with the path of the first bad row) — all before anything is allocated;
 * only then are the numbers converted and stored. Arrays that the fast
 * reader (api/numread.c) already read for api_parse_body_pre() go through
 * read_pre() / read_pre_b64(), which apply the same checks in the same
 * order with the same errors.
 */
#include "api/read.h"
#include "api/half.h"
#include "core/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/base64.h"
#include "core/stop.h"

/* ---- small helpers ---------------------------------------------------- */

/* A member of obj, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

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

/* Pointer of member key below prefix. */
static const char *sub(char *out, const char *prefix, const char *key)
{
    return api_pointer_key(out, API_PATH_MAX, prefix, key);
}

/* A size: a JSON integer >= 0, or an integral real in [0, 2^53] (a body
 * holding an integer literal beyond 64 bits is parsed with every integer
 * as a real, see api/reply.c). */
static bool get_size(const json_t *v, size_t *out)
{
    double x;

    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return false;
        *out = (size_t)json_integer_value(v);
        return true;
    }
    if (!json_is_real(v))
        return false;
    x = json_real_value(v);
    if (!(x >= 0 && x <= 9007199254740992.0) || x != floor(x))
        return false;
    *out = (size_t)x;
    return true;
}

static bool get_finite(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
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
 * (api/half.c); answers non_finite when one then overflows. */
static bool fix_ties(struct api_call *c, const char *path, float *data, int rank,
                     const size_t *shape, size_t count)
{
    char p[API_PATH_MAX];
    size_t i = api_half_fix_ties(c->req->body, c->req->body_len, path, c->half, data, count);

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
            n = SIZE_MAX;
            break;
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
 * one. The early-exit loop alone was 11% of a base64 request's time. */
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

static bool b64_convert(struct api_call *c, const char *path, enum b64_type t,
                        const void *src, const struct api_tensor_spec *spec,
                        void *dst, size_t n)
{
    size_t i;

    if ((t == B64_F32 || t == B64_F64) && (t == B64_F32) == (spec->dtype == ATTN_F32) &&
        !c->half) {
        i = api_first_nonfinite(src, t == B64_F64, n, spec->elem == API_ELEM_NULLABLE);
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
        i = half_first_nonfinite(src, n, t == B64_F16, spec->elem == API_ELEM_NULLABLE);
        if (i < n) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not finite", i);
            return false;
        }
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

static bool read_b64(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec, size_t *budget,
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
    if (!core_mul(count, elem_size(spec), &dbytes) ||
        !core_mul(count, b64_size(t), &sbytes)) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "tensor too large");
        return false;
    }
    if (!api_base64_decoded_len(json_string_value(jd), json_string_length(jd), &have) ||
        have != sbytes) {
        api_fail(c, API_ERR_INVALID_FIELD, pd,
                 "data must be base64 of %zu bytes (shape and dtype)", sbytes);
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
    if (!api_base64_decode(json_string_value(jd), json_string_length(jd), src)) {
        api_fail(c, API_ERR_INVALID_FIELD, pd, "data is not valid base64");
    } else if (b64_convert(c, pd, t, src, spec, dst, count)) {
        if (!same)
            free(src);
        *budget -= count;
        out->dtype = spec->dtype;
        out->elem = spec->elem;
        out->rank = rank;
        memcpy(out->shape, shape, sizeof shape);
        out->count = count;
        out->data = dst;
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
                         size_t *budget, struct api_tensor *out)
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
    dst = spec->dtype == a->raw_dtype && !a->raw_half ? a->raw : malloc(dbytes);
    if (!dst) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    if (!b64_convert(c, sub(p, path, "data"), t, a->raw, spec, dst, count)) {
        if (dst != a->raw)
            free(dst);
        return false;
    }
    if (dst != a->raw)
        free(a->raw);
    a->raw = NULL;
    *budget -= count;
    out->dtype = spec->dtype;
    out->elem = spec->elem;
    out->rank = a->rank;
    memcpy(out->shape, a->shape, sizeof a->shape);
    out->count = count;
    out->data = dst;
    return true;
}

/* Same checks and errors as read_nested(), on an array already in doubles. */
static bool read_pre(struct api_call *c, struct api_numarray *a,
                     const char *path, const struct api_tensor_spec *spec,
                     size_t *budget, struct api_tensor *out)
{
    char p[API_PATH_MAX];
    size_t count, i, len;
    int d;

    if (a->raw)
        return read_pre_b64(c, a, path, spec, budget, out);

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

bool api_read_tensor(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec,
                     struct api_tensor *out)
{
    return api_read_tensor_pre(c, v, path, spec, NULL, out);
}

bool api_read_tensor_pre(struct api_call *c, const json_t *v, const char *path,
                         const struct api_tensor_spec *spec,
                         const struct api_pre *pre, struct api_tensor *out)
{
    size_t local = api_max_elements(c);
    size_t *budget = spec->budget ? spec->budget : &local;
    struct api_numarray *a = api_pre_find(pre, path);

    memset(out, 0, sizeof *out);
    if (a && v)
        return read_pre(c, a, path, spec, budget, out);
    if (json_is_array(v))
        return read_nested(c, v, path, spec, budget, out);
    if (json_is_object(v))
        return read_b64(c, v, path, spec, budget, out);
    api_fail(c, API_ERR_INVALID_FIELD, path, v ? "expected nested arrays or "
             "{\"shape\",\"dtype\",\"data\"}" : "missing required field");
    return false;
}

void api_tensor_free(struct api_tensor *t)
{
    free(t->data);
    memset(t, 0, sizeof *t);
}

void api_tensor_heads(const struct api_tensor *t, size_t *heads,
                      size_t *rows, size_t *cols)
{
    *heads = t->rank >= 3 ? t->shape[t->rank - 3] : 1;
    *rows = t->rank >= 2 ? t->shape[t->rank - 2] : 1;
    *cols = t->rank >= 1 ? t->shape[t->rank - 1] : 0;
}

/* ---- options ---------------------------------------------------------- */

bool api_read_size(struct api_call *c, const json_t *v, const char *path,
                   size_t min, size_t max, size_t *out)
{
    if (!v || !get_size(v, out) || *out < min || *out > max) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected an integer in %zu..%zu",
                 min, max);
        return false;
    }
    return true;
}

/* Index of string v in names (NULL-terminated), or -1 (answered). */
static int read_enum(struct api_call *c, const json_t *v, const char *path,
                     const char *const *names, const char *expect)
{
    const char *s = json_string_value(v);
    int i;

    for (i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    api_fail(c, API_ERR_INVALID_FIELD, path, "expected %s", expect);
    return -1;
}

bool api_read_dtype_half(struct api_call *c, const json_t *v, const char *path,
                         enum attn_dtype *out, enum api_half *half)
{
    static const char *const names[] = {"float64", "float32", "float16", "bfloat16", NULL};
    int i;

    *out = ATTN_F64;
    *half = API_HALF_NONE;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"float64\", \"float32\", \"float16\" or "
                       "\"bfloat16\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_F64 : ATTN_F32;       /* half precision computes in float32 */
    *half = i == 2 ? API_HALF_F16 : i == 3 ? API_HALF_BF16 : API_HALF_NONE;
    return true;
}

bool api_read_dtype(struct api_call *c, const json_t *v, const char *path,
                    enum attn_dtype *out)
{
    static const char *const names[] = {"float64", "float32", NULL};
    int i;

    *out = ATTN_F64;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"float64\" or \"float32\"")) < 0)
        return false;
    *out = i == 1 ? ATTN_F32 : ATTN_F64;
    return true;
}

bool api_read_scale(struct api_call *c, const json_t *v, const char *path,
                    double *out, bool *given)
{
    *given = false;
    if (!v)
        return true;
    if (!get_finite(v, out) || !(*out > 0)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a positive number");
        return false;
    }
    *given = true;
    return true;
}

bool api_read_softmax(struct api_call *c, const json_t *obj,
                      const char *prefix, enum attn_softmax *softmax,
                      double *sink_logit)
{
    return api_read_softmax_ex(c, obj, prefix, false, softmax, sink_logit);
}

bool api_read_softmax_ex(struct api_call *c, const json_t *obj,
                         const char *prefix, bool sink_array,
                         enum attn_softmax *softmax, double *sink_logit)
{
    static const char *const names[] = {"standard", "softmax1", "sink", NULL};
    static const enum attn_softmax kinds[] = {
        ATTN_SOFTMAX_STANDARD, ATTN_SOFTMAX_ONE, ATTN_SOFTMAX_SINK};
    const json_t *v = member(obj, "softmax"), *s = member(obj, "sink_logit");
    char p[API_PATH_MAX];
    int i = 0;

    *softmax = ATTN_SOFTMAX_STANDARD;
    *sink_logit = 0;
    if (v && (i = read_enum(c, v, sub(p, prefix, "softmax"), names,
                            "\"standard\", \"softmax1\" or \"sink\"")) < 0)
        return false;
    *softmax = kinds[i];
    sub(p, prefix, "sink_logit");
    if (*softmax == ATTN_SOFTMAX_SINK) {
        if (!s || (!(sink_array && json_is_array(s)) && !get_finite(s, sink_logit))) {
            api_fail(c, API_ERR_INVALID_FIELD, p, sink_array
                     ? "softmax \"sink\" needs a finite sink_logit or one per head"
                     : "softmax \"sink\" needs a finite sink_logit");
            return false;
        }
    } else if (s) {
        api_fail(c, API_ERR_INVALID_FIELD, p,
                 "sink_logit is only allowed with softmax \"sink\"");
        return false;
    }
    return true;
}

bool api_read_causal(struct api_call *c, const json_t *v, const char *path,
                     enum attn_causal *out)
{
    static const char *const names[] = {"bottom_right", "top_left", NULL};
    int i;

    *out = ATTN_CAUSAL_NONE;
    if (!v || json_is_false(v))
        return true;
    if (json_is_true(v)) {
        *out = ATTN_CAUSAL_BOTTOM_RIGHT;
        return true;
    }
    if ((i = read_enum(c, v, path, names,
                       "true, false, \"bottom_right\" or \"top_left\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    return true;
}

bool api_read_alibi(struct api_call *c, const json_t *v, const char *path,
                    size_t heads, bool *on, double **slopes)
{
    static const char *const fields[] = {"slopes", NULL};
    char p[API_PATH_MAX], pi[API_PATH_MAX];
    const json_t *arr;
    size_t i, bytes;

    *on = false;
    *slopes = NULL;
    if (!v || json_is_false(v))
        return true;
    if (json_is_true(v)) {
        *on = true;
        return true;
    }
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected true, false or {\"slopes\":[…]}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    arr = json_object_get(v, "slopes");
    sub(p, path, "slopes");
    if (!json_is_array(arr)) {
        api_fail(c, API_ERR_INVALID_FIELD, p, "expected an array of %zu numbers", heads);
        return false;
    }
    if (json_array_size(arr) != heads) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, p, "expected %zu slopes (one per head), got %zu",
                 heads, json_array_size(arr));
        return false;
    }
    if (!core_mul(heads, sizeof **slopes, &bytes) || !(*slopes = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, p, "out of memory");
        return false;
    }
    for (i = 0; i < heads; i++) {
        if (!get_finite(json_array_get(arr, i), &(*slopes)[i])) {
            free(*slopes);
            *slopes = NULL;
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, p, i),
                     "expected a finite number");
            return false;
        }
    }
    *on = true;
    return true;
}

bool api_read_rope(struct api_call *c, const json_t *v, const char *path,
                   size_t d_k, bool *on, double *base,
                   enum attn_rope_pairs *pairs)
{
    static const char *const fields[] = {"base", "pairs", NULL};
    static const char *const names[] = {"interleaved", "half", NULL};
    char p[API_PATH_MAX];
    const json_t *jb, *jp;
    int i;

    *on = false;
    *base = 10000;
    *pairs = ATTN_ROPE_INTERLEAVED;
    if (!v || json_is_false(v))
        return true;
    if (!json_is_true(v)) {
        if (!json_is_object(v)) {
            api_fail(c, API_ERR_INVALID_FIELD, path,
                     "expected true, false or {\"base\":…,\"pairs\":…}");
            return false;
        }
        if (!api_check_fields(c, v, path, fields))
            return false;
        if ((jb = member(v, "base")) && (!get_finite(jb, base) || !(*base > 0))) {
            api_fail(c, API_ERR_INVALID_FIELD, sub(p, path, "base"),
                     "expected a positive number");
            return false;
        }
        if ((jp = member(v, "pairs"))) {
            if ((i = read_enum(c, jp, sub(p, path, "pairs"), names,
                               "\"interleaved\" or \"half\"")) < 0)
                return false;
            *pairs = i == 0 ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
        }
    }
    if (d_k % 2 != 0) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "RoPE needs an even d_k (got %zu)", d_k);
        return false;
    }
    *on = true;
    return true;
}

bool api_read_empty_rows(struct api_call *c, const json_t *v,
                         const char *path, enum attn_empty_rows *out)
{
    static const char *const names[] = {"zero", "error", NULL};
    int i;

    *out = ATTN_EMPTY_ZERO;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"zero\" or \"error\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_EMPTY_ZERO : ATTN_EMPTY_ERROR;
    return true;
}

bool api_read_return(struct api_call *c, const json_t *v, const char *path,
                     unsigned *outputs)
{
    static const char *const names[] = {"scores", "weights", "output", NULL};
    static const unsigned bits[] = {ATTN_OUT_SCORES, ATTN_OUT_WEIGHTS,
                                    ATTN_OUT_OUTPUT};
    char pi[API_PATH_MAX];
    size_t i;
    int k;

    *outputs = ATTN_OUT_ALL;
    if (!v)
        return true;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a non-empty subset of "
                 "[\"scores\",\"weights\",\"output\"]");
        return false;
    }
    *outputs = 0;
    for (i = 0; i < json_array_size(v); i++) {
        k = read_enum(c, json_array_get(v, i),
                      api_pointer_index(pi, sizeof pi, path, i), names,
                      "\"scores\", \"weights\" or \"output\"");
        if (k < 0)
            return false;
        *outputs |= bits[k];
    }
    return true;
}

bool api_read_encoding(struct api_call *c, const json_t *v, const char *path,
                       enum api_encoding *out)
{
    static const char *const names[] = {"json", "base64", NULL};
    int i;

    *out = API_ENC_JSON;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"json\" or \"base64\"")) < 0)
        return false;
    *out = i == 0 ? API_ENC_JSON : API_ENC_BASE64;
    return true;
}

bool api_read_digits(struct api_call *c, const json_t *v, const char *path,
                     int *digits)
{
    double x;

    *digits = 0;
    if (!v)
        return true;
    if (!get_finite(v, &x) || x != floor(x) || x < 1 || x > 17) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected an integer 1..17");
        return false;
    }
    *digits = (int)x;
    return true;
}

bool api_read_timeout(struct api_call *c, const json_t *v, const char *path)
{
    double x;
    struct attn_stop *stop = attn_ws_stop(c->req->ws);

    if (!v)
        return true;
    if (!get_finite(v, &x) || x != floor(x) || x < 1 || x > 86400000) {
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "expected an integer number of milliseconds 1..86400000");
        return false;
    }
    if (stop)
        attn_stop_within_ms(stop, (uint64_t)x);
    return true;
}

/* ---- biases and score-shaped matrices --------------------------------- */

/* One bias vector: [d] shared, or [heads][d] (a leading 1 is shared too). */
static bool read_bias_one(struct api_call *c, const json_t *v, const char *path,
                          enum attn_dtype dt, size_t heads, size_t d,
                          size_t *budget, struct api_tensor *t, size_t *out_heads)
{
    struct api_tensor_spec spec = {dt, API_ELEM_REAL, 1, 2, budget};
    size_t h, rows, cols;

    *out_heads = 0;
    if (!v)
        return true;
    if (!api_read_tensor(c, v, path, &spec, t))
        return false;
    api_tensor_heads(t, &h, &rows, &cols);
    h = t->rank == 2 ? t->shape[0] : 1;
    if (cols != d || (h != 1 && h != heads)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "expected [%zu] or [%zu][%zu], got %s[%zu]", d, heads, d,
                 t->rank == 2 ? "[…]" : "", cols);
        api_tensor_free(t);
        return false;
    }
    *out_heads = h;
    return true;
}

bool api_read_bias(struct api_call *c, const json_t *v, const char *path,
                   enum attn_dtype dt, const struct attn_shape *s,
                   size_t *budget, struct api_bias *out)
{
    static const char *const fields[] = {"q", "k", "v", NULL};
    char p[API_PATH_MAX];

    memset(out, 0, sizeof *out);
    if (!v)
        return true;
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected {\"q\":…,\"k\":…,\"v\":…}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    if (read_bias_one(c, member(v, "q"), sub(p, path, "q"), dt, s->h, s->d_k,
                      budget, &out->q, &out->q_heads) &&
        read_bias_one(c, member(v, "k"), sub(p, path, "k"), dt, s->h_kv, s->d_k,
                      budget, &out->k, &out->k_heads) &&
        read_bias_one(c, member(v, "v"), sub(p, path, "v"), dt, s->h_kv, s->d_v,
                      budget, &out->v, &out->v_heads))
        return true;
    api_bias_free(out);
    return false;
}

void api_bias_free(struct api_bias *b)
{
    api_tensor_free(&b->q);
    api_tensor_free(&b->k);
    api_tensor_free(&b->v);
    b->q_heads = b->k_heads = b->v_heads = 0;
}

void api_bias_inputs(const struct api_bias *b, struct attn_inputs *in)
{
    in->bias_q = b->q.data;
    in->bias_k = b->k.data;
    in->bias_v = b->v.data;
    in->bias_q_heads = b->q.data ? b->q_heads : 0;
    in->bias_k_heads = b->k.data ? b->k_heads : 0;
    in->bias_v_heads = b->v.data ? b->v_heads : 0;
}

bool api_widen_heads(struct api_call *c, const char *path, size_t B, size_t h, size_t nl,
                     size_t esz, size_t *budget, void **data, size_t *count)
{
    size_t total, bytes, b, i, row = nl * esz;     /* row fits: data holds it */
    char *wide;

    if (!core_mul3(B, h, nl, &total) || total - *count > *budget) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "the matrix copied to every head "
                 "exceeds the request's remaining limit of %zu numbers "
                 "(--max-elements)", *budget);
        return false;
    }
    if (!core_mul(total, esz, &bytes) || !(wide = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    for (b = 0; b < B; b++)
        for (i = 0; i < h; i++)
            memcpy(wide + (b * h + i) * row, (char *)*data + b * row, row);
    *budget -= total - *count;
    free(*data);
    *data = wide;
    *count = total;
    return true;
}

/* A [B][1][n][L] tensor copied to every one of h heads: [B][h][n][L]. */
static bool widen_heads(struct api_call *c, const char *path, size_t B,
                        size_t h, size_t nl, size_t esz, size_t *budget,
                        struct api_tensor *t)
{
    if (!api_widen_heads(c, path, B, h, nl, esz, budget, &t->data, &t->count))
        return false;
    t->shape[1] = h;
    return true;
}

bool api_read_score_matrix(struct api_call *c, const json_t *v,
                           const char *path, enum api_elem elem,
                           enum attn_dtype dt, const struct attn_shape *s,
                           size_t *budget, struct api_tensor *out,
                           size_t *heads)
{
    struct api_tensor_spec spec = {dt, elem, 2, 4, budget};
    size_t h, rows, cols, B = s->B ? s->B : 1, b;

    *heads = 0;
    memset(out, 0, sizeof *out);
    if (!v)
        return true;
    if (!api_read_tensor(c, v, path, &spec, out))
        return false;
    api_tensor_heads(out, &h, &rows, &cols);
    b = out->rank == 4 ? out->shape[0] : 1;
    if (rows != s->n || cols != s->L || (h != 1 && h != s->h) ||
        (b != 1 && b != B)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "expected [n][L] = [%zu][%zu], [h][n][L] = [%zu][%zu][%zu] "
                 "or [B][h][n][L] = [%zu][%zu][%zu][%zu]",
                 s->n, s->L, s->h, s->n, s->L, B, s->h, s->n, s->L);
        api_tensor_free(out);
        return false;
    }
    if (b > 1 && h != s->h &&
        !widen_heads(c, path, b, s->h, s->n * s->L,
                     elem == API_ELEM_BOOL ? 1 : attn_dtype_size(dt), budget, out)) {
        api_tensor_free(out);
        return false;
    }
    *heads = b > 1 ? b * s->h : h;
    return true;
}

/* ---- the whole /v1/attention body ------------------------------------- */

/* The body's fields, in the order of attention_fields. */
enum att_field {
    AF_Q, AF_K, AF_V, AF_BIAS, AF_ATTN_BIAS, AF_MASK, AF_CAUSAL, AF_ALIBI,
    AF_ROPE, AF_SCALE, AF_SOFTMAX, AF_SINK_LOGIT, AF_EMPTY_ROWS, AF_DTYPE,
    AF_RETURN, AF_ENCODING, AF_DIGITS, AF_HEADS, AF_TOP_K, AF_TOKENS, AF_TIMEOUT_MS,
    AF_POSITIONS, AF_SEGMENTS, AF_WINDOW, AF_SOFTCAP, AF_COUNT
};

static const char *const attention_fields[AF_COUNT + 1] = {
    "q", "k", "v", "bias", "attn_bias", "mask", "causal", "alibi", "rope",
    "scale", "softmax", "sink_logit", "empty_rows", "dtype", "return",
    "encoding", "digits", "heads", "weights_top_k", "tokens", "timeout_ms",
    "positions", "segments", "window", "softcap", NULL};

/*
 * api_check_fields(c, body, "", attention_fields) and member(body, field)
 * for every field in one pass over the body's members (a hash lookup per
 * absent field showed in the small request's profile): m[f] is what
 * member() would return. A key is known, as for api_check_fields, when it
 * matches a field as a C string; it is that field's member, as for
 * json_object_get, only when its length matches too (a key with a NUL).
 */
static bool body_members(struct api_call *c, const json_t *body, const json_t **m)
{
    const char *key;
    size_t key_len;
    json_t *val;
    int f;

    for (f = 0; f < AF_COUNT; f++)
        m[f] = NULL;
    json_object_keylen_foreach((json_t *)body, key, key_len, val) {
        char path[128];

        for (f = 0; f < AF_COUNT; f++)
            if (strcmp(attention_fields[f], key) == 0)
                break;
        if (f == AF_COUNT) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path, "",
                     key), "unknown field \"%s\"", key);
            return false;
        }
        if (key_len == strlen(key) && !json_is_null(val))
            m[f] = val;
    }
    return true;
}

/* q, k, v and the shape they imply. */
static bool read_qkv(struct api_call *c, const json_t *const *m, size_t *budget,
                     const struct api_pre *pre, struct api_attention_req *a)
{
    struct api_tensor_spec spec = {a->r.params.dtype, API_ELEM_REAL, 2, 4, budget};
    struct attn_shape *s = &a->r.shape;
    size_t dk2, hv, Lv;

    if (!api_read_tensor_pre(c, m[AF_Q], "/q", &spec, pre, &a->q) ||
        !api_read_tensor_pre(c, m[AF_K], "/k", &spec, pre, &a->k) ||
        !api_read_tensor_pre(c, m[AF_V], "/v", &spec, pre, &a->v))
        return false;
    a->q_rank = a->q.rank;
    if (a->k.rank != a->q.rank || a->v.rank != a->q.rank) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, a->k.rank != a->q.rank ? "/k" : "/v",
                 "q, k and v must have the same rank (q has %d)", a->q.rank);
        return false;
    }
    s->B = a->q.rank == 4 ? a->q.shape[0] : 1;
    if (a->q.rank == 4 && (a->k.shape[0] != s->B || a->v.shape[0] != s->B)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, a->k.shape[0] != s->B ? "/k" : "/v",
                 "q, k and v must have the same batch size (q has %zu)", s->B);
        return false;
    }
    api_tensor_heads(&a->q, &s->h, &s->n, &s->d_k);
    api_tensor_heads(&a->k, &s->h_kv, &s->L, &dk2);
    api_tensor_heads(&a->v, &hv, &Lv, &s->d_v);
    if (dk2 != s->d_k) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/k", "k rows have %zu numbers, q rows %zu",
                 dk2, s->d_k);
        return false;
    }
    if (s->h % s->h_kv != 0) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/k",
                 "q's %zu heads are not a multiple of k's %zu heads", s->h, s->h_kv);
        return false;
    }
    if (hv != s->h_kv || Lv != s->L) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/v",
                 "v must have k's %zu heads and %zu rows, has %zu and %zu",
                 s->h_kv, s->L, hv, Lv);
        return false;
    }
    return true;
}

/* Options that need no shape, then those that do. */
static bool read_options(struct api_call *c, const json_t *body,
                         const json_t *const *m, struct api_attention_req *a)
{
    struct attn_request *r = &a->r;
    struct attn_params *p = &r->params;
    bool given;

    if (!api_read_sinks(c, body, "", r->shape.h, p, &a->sink_logits) ||
        !api_read_scale(c, m[AF_SCALE], "/scale", &p->scale, &given) ||
        !api_read_softcap(c, m[AF_SOFTCAP], "/softcap", &p->softcap) ||
        !api_read_window(c, m[AF_WINDOW], "/window", &r->window) ||
        !api_read_causal(c, m[AF_CAUSAL], "/causal", &r->causal) ||
        !api_read_empty_rows(c, m[AF_EMPTY_ROWS], "/empty_rows",
                             &r->empty_rows) ||
        !api_read_return_x(c, m[AF_RETURN], "/return", &r->outputs, &a->x.want) ||
        !api_read_extras(c, "", m[AF_HEADS], m[AF_TOP_K], m[AF_TOKENS], &r->outputs,
                         &a->x) ||
        !api_read_encoding(c, m[AF_ENCODING], "/encoding", &a->encoding) ||
        !api_read_digits(c, m[AF_DIGITS], "/digits", &a->digits) ||
        !api_read_timeout(c, m[AF_TIMEOUT_MS], "/timeout_ms") ||
        !api_read_rope_params(c, m[AF_ROPE], "/rope", r->shape.d_k, p) ||
        !api_read_alibi(c, m[AF_ALIBI], "/alibi", r->shape.h, &p->alibi,
                        &a->alibi_slopes))
        return false;
    if (!given)
        p->scale = attn_default_scale(r->shape.d_k);
    p->alibi_slopes = a->alibi_slopes;
    return true;
}

static bool read_arrays(struct api_call *c, const json_t *const *m, size_t *budget,
                        struct api_attention_req *a)
{
    struct attn_request *r = &a->r;

    if (!api_read_bias(c, m[AF_BIAS], "/bias", r->params.dtype,
                       &r->shape, budget, &a->bias) ||
        !api_read_score_matrix(c, m[AF_ATTN_BIAS], "/attn_bias",
                               API_ELEM_NULLABLE, r->params.dtype, &r->shape,
                               budget, &a->attn_bias, &r->attn_bias_heads) ||
        !api_read_score_matrix(c, m[AF_MASK], "/mask", API_ELEM_BOOL,
                               r->params.dtype, &r->shape, budget, &a->mask,
                               &r->mask_heads) ||
        !api_read_seqs(c, m[AF_POSITIONS], m[AF_SEGMENTS], "", &r->shape,
                       budget, &a->seqs))
        return false;
    api_seqs_request(&a->seqs, r);
    r->attn_bias = a->attn_bias.data;
    r->mask = a->mask.data;
    a->in.q = a->q.data;
    a->in.k = a->k.data;
    a->in.v = a->v.data;
    api_bias_inputs(&a->bias, &a->in);
    return true;
}

bool api_read_attention(struct api_call *c, const json_t *body,
                        struct api_attention_req *out)
{
    return api_read_attention_pre(c, body, NULL, out);
}

bool api_read_attention_pre(struct api_call *c, const json_t *body,
                            const struct api_pre *pre,
                            struct api_attention_req *out)
{
    size_t budget = api_max_elements(c);
    const json_t *m[AF_COUNT];
    enum core_status st;

    memset(out, 0, sizeof *out);
    if (!body_members(c, body, m) ||
        !api_read_dtype_half(c, m[AF_DTYPE], "/dtype", &out->r.params.dtype, &c->half) ||
        !read_qkv(c, m, &budget, pre, out) ||
        !read_options(c, body, m, out) ||
        !read_arrays(c, m, &budget, out) ||
        !api_extras_check(c, "", &out->x, &out->r.shape))
        goto fail;
    st = api_extras_check_request(&out->r);
    if (st != CORE_OK) {
        api_fail_core(c, st, NULL);
        goto fail;
    }
    return true;
fail:
    api_attention_req_free(out);
    return false;
}

void api_attention_req_free(struct api_attention_req *r)
{
    api_tensor_free(&r->q);
    api_tensor_free(&r->k);
    api_tensor_free(&r->v);
    api_bias_free(&r->bias);
    api_tensor_free(&r->attn_bias);
    api_tensor_free(&r->mask);
    free(r->alibi_slopes);
    api_extras_free(&r->x);
    free(r->sink_logits);
    api_seqs_free(&r->seqs);
    memset(r, 0, sizeof *r);
}
