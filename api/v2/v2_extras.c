/*
 * api/v2/v2_extras.c — the part-2 returns over the Open Inference Protocol v2
 * (api/v2/v2_impl.h): token labels as BYTES inputs "tokens_q" [n] and
 * "tokens_k" [L] (each at most 256 bytes of UTF-8), the request
 * parameters "heads" (an integer, or a string of comma-separated integers:
 * protocol parameters are scalars) and "weights_top_k", and the outputs
 * qk, lse, entropy, max_weight, argmax, mass, top_k_indices, top_k_values
 * (INT64 for argmax and the indices, -1 where /v1 prints null; the rest in
 * the computation's dtype; an undefined lse is null in JSON data and NaN
 * in binary data). The labels come in JSON data or in the binary tensor
 * data extension's BYTES form (each a 4-byte little-endian length, then
 * its bytes: what tritonclient sends by default), and come back as JSON
 * BYTES outputs of the same names.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/extras.h"
#include "api/internal.h"
#include "api/read.h"
#include "api/v2/v2_impl.h"

const char *const api_v2_out_names[V2_NOUT] = {
    "scores", "weights", "output", "qk", "lse", "entropy", "max_weight", "argmax",
    "mass", "top_k_indices", "top_k_values", "tokens_q", "tokens_k",
};

/* ---- inputs and parameters --------------------------------------------- */

/* A fault in the binary form of a BYTES input: at its binary_data_size
 * (where the bytes do not frame count elements) or at element i of its
 * data (a label that is not UTF-8). False. */
static bool binary_tokens_fail(struct api_call *c, const char *prefix, bool size, size_t i,
                               const char *what)
{
    char pp[API_PATH_MAX], p[API_PATH_MAX], pi[API_PATH_MAX];

    if (size)
        api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(p, sizeof p,
                 api_pointer_key(pp, sizeof pp, prefix, "parameters"), "binary_data_size"),
                 "%s", what);
    else
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi,
                 api_pointer_key(p, sizeof p, prefix, "data"), i), "%s", what);
    return false;
}

/* The binary form of a BYTES input (the binary tensor data extension:
 * each element a 4-byte little-endian length, then its bytes): count
 * labels in the bsize bytes after the earlier inputs' bytes -> *out, a new
 * array of strings; false after the error. */
static bool binary_tokens(struct api_call *c, struct v2_infer *x, const char *prefix,
                          size_t count, size_t bsize, json_t **out)
{
    const unsigned char *b = x->bin ? x->bin + x->bin_used : NULL;
    size_t at = 0;

    if (bsize > x->bin_len - x->bin_used) {
        api_fail(c, API_ERR_INVALID_FIELD, prefix, "the body holds %zu binary bytes after "
                 "earlier inputs, %zu are needed", x->bin_len - x->bin_used, bsize);
        return false;
    }
    if (!(*out = json_array())) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        size_t len;
        json_t *s;
        if (bsize - at < 4)
            return binary_tokens_fail(c, prefix, true, i, "binary_data_size ends before "
                                      "the count elements of the shape (each a 4-byte "
                                      "length, then its bytes)");
        len = (size_t)b[at] | (size_t)b[at + 1] << 8 | (size_t)b[at + 2] << 16 |
              (size_t)b[at + 3] << 24;
        at += 4;
        if (len > bsize - at)
            return binary_tokens_fail(c, prefix, true, i, "an element's length runs past "
                                      "binary_data_size");
        /* NULL: not UTF-8 (the length and NUL checks follow, as for JSON) */
        if (!(s = json_stringn((const char *)b + at, len)) ||
            json_array_append_new(*out, s) != 0)
            return binary_tokens_fail(c, prefix, false, i, "a token must be UTF-8 text");
        at += len;
    }
    if (at != bsize)
        return binary_tokens_fail(c, prefix, true, 0, "binary_data_size holds more bytes "
                                  "than the count elements of the shape");
    x->bin_used += bsize;
    return true;
}

/* The labels of a tokens input: its JSON data, or its binary form
 * (parameters.binary_data_size) -> *data (a new reference); false after
 * the error. */
static bool tokens_data(struct api_call *c, struct v2_infer *x, const json_t *in,
                        const char *prefix, json_t **data)
{
    const json_t *shape = member(in, "shape");
    char p[API_PATH_MAX];
    long long bsize;

    *data = NULL;
    if (!api_v2_read_binary_size(c, in, prefix, &bsize))
        return false;
    if (bsize < 0) {
        *data = json_incref((json_t *)member(in, "data"));
        return true;
    }
    if (member(in, "data")) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, prefix, "data"),
                 "data and binary_data_size exclude each other");
        return false;
    }
    if (!json_is_array(shape) || json_array_size(shape) != 1 ||
        !json_is_integer(json_array_get(shape, 0)) ||
        json_integer_value(json_array_get(shape, 0)) < 1)
        return true;                    /* the shape's refusal follows */
    return binary_tokens(c, x, prefix, (size_t)json_integer_value(json_array_get(shape, 0)),
                         (size_t)bsize, data);
}

bool api_v2_read_tokens(struct api_call *c, struct v2_infer *x, const json_t *in,
                        size_t idx, bool keys)
{
    static const char *const allowed[] = {"name", "shape", "datatype", "parameters", "data",
                                          NULL};
    char prefix[API_PATH_MAX], p[API_PATH_MAX], pi[API_PATH_MAX];
    const json_t *shape = member(in, "shape");
    const char *dt = json_string_value(member(in, "datatype"));
    const char *side = keys ? "k" : "q";
    json_t *data = NULL;
    bool ok = false;

    api_pointer_index(prefix, sizeof prefix, "/inputs", idx);
    if (!api_check_fields(c, in, prefix, allowed))
        return false;
    if (!dt || strcmp(dt, "BYTES") != 0) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, prefix, "datatype"),
                 "token labels are a BYTES tensor");
        return false;
    }
    if (x->ext.tokens && json_object_get(x->ext.tokens, side)) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, prefix, "name"),
                 "input tokens_%s given twice", side);
        return false;
    }
    if (!tokens_data(c, x, in, prefix, &data))
        goto out;
    if (!json_is_array(shape) || json_array_size(shape) != 1 ||
        !json_is_integer(json_array_get(shape, 0)) || !json_is_array(data) ||
        (size_t)json_integer_value(json_array_get(shape, 0)) != json_array_size(data) ||
        json_array_size(data) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, prefix, "shape"),
                 "token labels are [count] strings, data holding exactly count of them");
        goto out;
    }
    api_pointer_key(p, sizeof p, prefix, "data");
    for (size_t i = 0; i < json_array_size(data); i++) {
        const json_t *s = json_array_get(data, i);
        if (!json_is_string(s) || json_string_length(s) > API_TOKEN_MAX ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, p, i),
                     "a token is a string of at most %d bytes of UTF-8 without NUL",
                     API_TOKEN_MAX);
            goto out;
        }
    }
    if (!x->ext.tokens && !(x->ext.tokens = json_object())) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        goto out;
    }
    json_object_set(x->ext.tokens, side, data);
    x->tok_index[keys] = idx;
    ok = true;
out:
    json_decref(data);
    return ok;
}

/* "heads": an integer (or an integral real such as 2.0, as /v1 takes
 * it) or "2,0,1". */
static bool read_heads_param(struct api_call *c, struct v2_infer *x, const json_t *v)
{
    const char *path = "/parameters/heads";
    size_t m = 1;
    int64_t one = 0;
    if (json_is_string(v))
        for (const char *s = json_string_value(v); *s; s++)
            m += *s == ',';
    else if (!json_is_integer(v) && !api_window_side(v, &one))
        goto bad;
    if (!(x->ext.heads = malloc(m * sizeof *x->ext.heads))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return false;
    }
    x->ext.nh = m;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            goto bad;
        x->ext.heads[0] = (size_t)json_integer_value(v);
        return true;
    }
    if (!json_is_string(v)) {
        x->ext.heads[0] = (size_t)one;
        return true;
    }
    const char *s = json_string_value(v);
    for (size_t i = 0; i < m; i++) {
        char *end;
        errno = 0;
        if (*s < '0' || *s > '9')
            goto bad;
        unsigned long long h = strtoull(s, &end, 10);
        if (errno || (*end != ',' && *end != '\0') || (i + 1 < m) != (*end == ','))
            goto bad;
        x->ext.heads[i] = (size_t)h;
        for (size_t j = 0; j < i; j++)
            if (x->ext.heads[j] == x->ext.heads[i]) {
                api_fail(c, API_ERR_INVALID_FIELD, path, "head %zu is listed twice",
                         x->ext.heads[i]);
                return false;
            }
        s = end + (*end == ',');
    }
    return true;
bad:
    api_fail(c, API_ERR_INVALID_FIELD, path, "heads is a head index or a string of "
             "comma-separated head indices, e.g. \"2,0\"");
    return false;
}

bool api_v2_read_extras_params(struct api_call *c, struct v2_infer *x)
{
    const json_t *h = member(x->params, "heads"), *k = member(x->params, "weights_top_k");
    if (h && !read_heads_param(c, x, h))
        return false;
    /* an integral real such as 2.0 too, as /v1 reads it */
    return !k || api_read_size(c, k, "/parameters/weights_top_k", 1, INT32_MAX, &x->ext.top_k);
}

/* The outputs asked for -> the pass's outputs and the extras wanted. */
bool api_v2_extras_outputs(struct api_call *c, struct v2_infer *x, unsigned *outputs)
{
    unsigned o = x->outputs;
    if ((o & (V2_BIT(V2_TOPK_IDX) | V2_BIT(V2_TOPK_VAL))) && !x->ext.top_k) {
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs",
                 "top_k_indices and top_k_values need parameters.weights_top_k");
        return false;
    }
    if (((o >> V2_TOK_Q) & 1) && !(x->ext.tokens && json_object_get(x->ext.tokens, "q"))) {
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs", "output tokens_q echoes input tokens_q");
        return false;
    }
    if (((o >> V2_TOK_K) & 1) && !(x->ext.tokens && json_object_get(x->ext.tokens, "k"))) {
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs", "output tokens_k echoes input tokens_k");
        return false;
    }
    if (!(o & ~(V2_BIT(V2_TOK_Q) | V2_BIT(V2_TOK_K)))) {
        /* the labels alone: no pass would run (/v1's "return" is never empty) */
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs", "outputs must name a computed "
                 "output too (scores, weights, output, qk, lse, entropy, max_weight, "
                 "argmax, mass, top_k_indices, top_k_values): tokens_q and tokens_k "
                 "only echo their inputs");
        return false;
    }
    *outputs = o & ATTN_OUT_ALL;
    x->ext.want = 0;
    if (o & V2_BIT(V2_QK))
        x->ext.want |= ATTN_X_QK;
    if (o & V2_BIT(V2_LSE))
        x->ext.want |= ATTN_X_LSE;
    if (o & (V2_BIT(V2_ENT) | V2_BIT(V2_MAXW) | V2_BIT(V2_ARGMAX) | V2_BIT(V2_MASS)))
        x->ext.want |= ATTN_X_STATS;
    if (x->ext.top_k)
        x->ext.want |= ATTN_X_TOPK;
    return true;
}

bool api_v2_extras_check(struct api_call *c, struct v2_infer *x, const struct attn_shape *s)
{
    char p[API_PATH_MAX], pi[API_PATH_MAX];
    size_t want[2] = {s->n, s->L};
    if (!x->ext.heads)
        x->ext.nh = s->h;
    for (size_t i = 0; x->ext.heads && i < x->ext.nh; i++)
        if (x->ext.heads[i] >= s->h) {
            api_fail(c, API_ERR_INVALID_FIELD, "/parameters/heads",
                     "head %zu does not exist (q has %zu heads)", x->ext.heads[i], s->h);
            return false;
        }
    for (int t = 0; x->ext.tokens && t < 2; t++) {
        const json_t *a = json_object_get(x->ext.tokens, t ? "k" : "q");
        if (a && json_array_size(a) != want[t]) {
            api_pointer_index(pi, sizeof pi, "/inputs", x->tok_index[t]);
            api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(p, sizeof p, pi, "shape"),
                     "tokens_%s has %zu labels for %zu %s", t ? "k" : "q", json_array_size(a),
                     want[t], t ? "keys" : "query rows");
            return false;
        }
    }
    return true;
}

/* ---- outputs ----------------------------------------------------------- */

/* Output k's data, element count, INT64/BYTES-ness and shape (rank of q). */
struct v2x_view {
    const void *data;
    size_t count, cols;
    bool ints;
};

static struct v2x_view view(const struct v2_infer *x, const struct attn_request *r, int k)
{
    const struct attn_extras_out *o = &x->ext.xo;
    size_t rows = (r->shape.B > 1 ? r->shape.B : 1) * x->ext.nh * r->shape.n;
    size_t kk = x->ext.top_k;
    switch (k) {
    case V2_QK: return (struct v2x_view){o->qk, rows * r->shape.L, r->shape.L, false};
    case V2_LSE: return (struct v2x_view){o->lse, rows, 0, false};
    case V2_ENT: return (struct v2x_view){o->entropy, rows, 0, false};
    case V2_MAXW: return (struct v2x_view){o->max_weight, rows, 0, false};
    case V2_ARGMAX: return (struct v2x_view){o->argmax, rows, 0, true};
    case V2_MASS: return (struct v2x_view){o->mass, rows, 0, false};
    case V2_TOPK_IDX: return (struct v2x_view){o->top_idx, rows * kk, kk, true};
    default: return (struct v2x_view){o->top_val, rows * kk, kk, false};
    }
}

static void put_shape(struct api_buf *b, const struct v2_infer *x, const struct attn_request *r,
                      size_t cols)
{
    api_buf_putc(b, '[');
    if (x->t[V2_Q].rank == 4)
        api_buf_printf(b, "%zu,", r->shape.B);
    if (x->t[V2_Q].rank >= 3)
        api_buf_printf(b, "%zu,", x->ext.nh);
    api_buf_printf(b, "%zu", r->shape.n);
    if (cols)
        api_buf_printf(b, ",%zu", cols);
    api_buf_putc(b, ']');
}

bool api_v2_extras_cap(const struct v2_infer *x, const struct attn_request *r, size_t *cap)
{
    size_t total = 0, part;
    for (int k = V2_QK; k <= V2_TOPK_VAL; k++) {
        if (!(x->outputs & V2_BIT(k)))
            continue;
        struct v2x_view v = view(x, r, k);
        if (!core_mul(v.count, API_NUM_MAX + 9, &part) || !core_add(total, part, &total))
            return false;
    }
    if (x->ext.tokens && (!core_mul(r->shape.n + r->shape.L, 6 * API_TOKEN_MAX + 3, &part) ||
                          !core_add(total, part, &total)))
        return false;
    return core_add(*cap, total, cap);
}

/* One extras output in JSON (binary: its size only, the bytes follow). */
void api_v2_extras_write(struct api_buf *b, const struct v2_infer *x,
                         const struct attn_request *r, int k, bool *first)
{
    const char *dtn = api_v2_datatype_name(x->dt, x->half);
    size_t es = api_dtype_size(x->dt, x->half);
    api_buf_printf(b, "%s{\"name\":\"%s\",\"datatype\":\"", *first ? "" : ",",
                   api_v2_out_names[k]);
    *first = false;
    if (k == V2_TOK_Q || k == V2_TOK_K) {
        const json_t *a = json_object_get(x->ext.tokens, k == V2_TOK_Q ? "q" : "k");
        api_buf_printf(b, "BYTES\",\"shape\":[%zu],\"data\":[", json_array_size(a));
        for (size_t i = 0; i < json_array_size(a); i++) {
            if (i)
                api_buf_putc(b, ',');
            api_write_string(b, json_string_value(json_array_get(a, i)));
        }
        api_buf_puts(b, "]}");
        return;
    }
    struct v2x_view v = view(x, r, k);
    api_buf_puts(b, v.ints ? "INT64" : dtn);
    api_buf_puts(b, "\",\"shape\":");
    put_shape(b, x, r, v.cols);
    if (x->binary & V2_BIT(k)) {
        api_buf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}",
                       v.count * (v.ints ? 8 : es));
        return;
    }
    api_buf_puts(b, ",\"data\":[");
    for (size_t i = 0; i < v.count; i++) {
        if (i)
            api_buf_putc(b, ',');
        if (v.ints) {
            api_buf_printf(b, "%lld", (long long)((const int64_t *)v.data)[i]);
            continue;
        }
        const char *p = (const char *)v.data + i * attn_dtype_size(x->dt);
        float f = x->half ? *(const float *)(const void *)p : 0;
        if (x->half && !isnan(f)) {             /* rounded to it already */
            char num[32];
            uint16_t hb = api_half_bits(x->half, f);
            api_buf_append(b, num, x->half == API_HALF_F16 ? api_dtoa_f16(num, hb)
                                                           : api_dtoa_bf16(num, hb));
            continue;
        }
        api_write_number(b, x->dt, p, 0);       /* NaN (an undefined lse) prints null */
    }
    api_buf_puts(b, "]}");
}

/* n elements of es bytes, little-endian whatever the host's order. */
static void put_le(struct api_buf *b, const void *data, size_t es, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    api_buf_append(b, data, n * es);
#else
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++, p += es) {
        unsigned char le[8];
        for (size_t k = 0; k < es; k++)
            le[k] = p[es - 1 - k];
        api_buf_append(b, le, es);
    }
#endif
}

void api_v2_extras_write_binary(struct api_buf *b, const struct v2_infer *x,
                                const struct attn_request *r, int k)
{
    if (k < V2_QK || k > V2_TOPK_VAL || !(x->binary & x->outputs & V2_BIT(k)))
        return;
    struct v2x_view v = view(x, r, k);
    if (x->half && !v.ints)
        api_v2_put_half_le(b, v.data, x->half, v.count);
    else
        put_le(b, v.data, v.ints ? 8 : attn_dtype_size(x->dt), v.count);
}
