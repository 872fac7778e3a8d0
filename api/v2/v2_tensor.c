/*
 * api/v2/v2_tensor.c — the input tensors of an Open Inference Protocol v2
 * inference request: each element of "inputs" (name, datatype FP32/FP64,
 * BOOL or INT32/INT64, shape, data) is checked and converted into its slot in the
 * computation's dtype, its data read from JSON (flat or nested, row-major)
 * or from the binary part of the body (little-endian, in the order of the
 * inputs), with every refusal at the JSON pointer of the field at fault.
 * q, k and v in the request's own FP16/BF16 datatype stay 2-byte (their
 * values rounded to it from JSON, checked finite from binary).
 */
#include "api/v2/v2_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/bulk.h"
#include "api/read.h"
#include "api/spare.h"
#include "core/attn.h"
#include "core/half.h"


enum v2_wire { W_FP32, W_FP64, W_BOOL, W_FP16, W_BF16, W_INT32, W_INT64 };

/* The wire form of each datatype name. */
static const struct {
    const char *name;
    enum v2_wire w;
} v2_wires[] = {{"FP32", W_FP32}, {"FP64", W_FP64}, {"FP16", W_FP16}, {"BF16", W_BF16},
                {"BOOL", W_BOOL}, {"INT32", W_INT32}, {"INT64", W_INT64}};

static const char *v2_wire_name(enum v2_wire w)
{
    for (size_t i = 0; i < sizeof v2_wires / sizeof v2_wires[0]; i++)
        if (v2_wires[i].w == w)
            return v2_wires[i].name;
    return "?";
}

static size_t wire_size(enum v2_wire w)
{
    return w == W_FP64 || w == W_INT64 ? 8 : w == W_FP32 || w == W_INT32 ? 4
         : w == W_BOOL ? 1 : 2;
}

/* Store one real x as element i of t (dtype dt, rounded to half when the
 * request is FP16/BF16, as its 2-byte bits when t is kept so; tie as
 * api_half_round's); false if it does not fit. */
static bool store_real(struct v2_tensor *t, enum attn_dtype dt, size_t i, double v,
                       bool nullable, enum api_half half, bool *tie)
{
    void *data = t->data;

    if (isnan(v) || (isinf(v) && !(nullable && v < 0)))
        return false;
    if (half && isfinite(v)) {
        bool tt = false;
        float f;
        if (!api_half_round(half, v, &f, tie ? &tt : NULL))
            return false;
        if (tie)
            *tie |= tt;
        if (t->half)
            ((uint16_t *)data)[i] = api_half_bits(half, f);
        else
            ((float *)data)[i] = f;
        return true;
    }
    if (dt == ATTN_F32) {
        /* rounded first, as /v1 does: 3.4028235e+38, FLT_MAX's shortest
         * text, lies above FLT_MAX yet rounds to it */
        float f = (float)v;
        if (isfinite(v) && isinf(f))
            return false;
        ((float *)data)[i] = f;
    } else {
        ((double *)data)[i] = v;
    }
    return true;
}

struct v2_fill {
    struct api_call *c;
    struct v2_tensor *t;
    enum attn_dtype dt;
    bool is_bool, nullable, is_int;
    size_t pos;
    bool tie;                       /* a half number sat on a midpoint */
    enum v2_wire wire;              /* the input's declared datatype */
};

/* The half format an input declared w carries (FP16, BF16), or none. */
static enum api_half wire_half(enum v2_wire w)
{
    return w == W_FP16 ? API_HALF_F16 : w == W_BF16 ? API_HALF_BF16 : API_HALF_NONE;
}

/* x, a JSON number of an input declared w (text at path), as a number of
 * w (as its binary bytes would be): INT32 within its range; FP32, FP16 or
 * BF16 rounded to it where the request keeps another type (q FP64 beside
 * an FP32 k), FP16 and BF16 from the decimal text where x is a midpoint of
 * the format (api/codec/half.c); the request's own half type is rounded so
 * by store_real. False: x is outside w's range. */
static bool json_as_wire(const struct v2_fill *f, const char *path, double *x)
{
    enum v2_wire w = f->wire;
    enum api_half own = wire_half(w);
    const struct api_request *rq = f->c->req;
    if (w == W_FP32 && (f->dt == ATTN_F64 || f->c->half)) {
        float r = (float)*x;
        *x = r;
        return isfinite(r);
    }
    if (own && own != f->c->half) {
        float r;
        bool tie = false;
        if (!api_half_round(own, *x, &r, &tie) ||
            (tie && api_half_fix_ties(rq->body, rq->body_len, rq->early, path, own,
                                      &r, 1) != 1))
            return false;
        *x = r;
    }
    return true;
}

/* Flatten nested `data` (row-major) into the tensor. */
static bool fill_json(struct v2_fill *f, const json_t *v, int depth,
                      const char *path)
{
    char sub[API_PATH_MAX];
    size_t i;

    if (json_is_array(v)) {
        if (depth > f->t->rank) {
            api_fail(f->c, API_ERR_INVALID_FIELD, path,
                     "data is nested deeper than the shape's rank");
            return false;
        }
        for (i = 0; i < json_array_size(v); i++)
            if (!fill_json(f, json_array_get(v, i), depth + 1,
                           api_pointer_index(sub, sizeof sub, path, i)))
                return false;
        return true;
    }
    if (f->pos >= f->t->count) {
        api_fail(f->c, API_ERR_SHAPE_MISMATCH, path,
                 "data holds more elements than the shape's %zu", f->t->count);
        return false;
    }
    if (f->is_bool) {
        if (!json_is_boolean(v)) {
            api_fail(f->c, API_ERR_INVALID_FIELD, path, "BOOL data must be true or false");
            return false;
        }
        ((uint8_t *)f->t->data)[f->pos++] = json_is_true(v) ? 1 : 0;
        return true;
    }
    if (f->is_int) {
        if (!json_is_integer(v)) {
            /* an integer literal past 64 bits is read as a real (api/body.c) */
            double r = json_is_real(v) ? json_real_value(v) : 0.5;
            api_fail(f->c, API_ERR_INVALID_FIELD, path, "%s", r == floor(r) &&
                     fabs(r) >= 0x1p63 ? "an integer past INT64's range (-2^63..2^63-1)"
                                       : "INT32/INT64 data must be integers");
            return false;
        }
        json_int_t n = json_integer_value(v);
        if (f->wire == W_INT32 && (n < INT32_MIN || n > INT32_MAX)) {
            api_fail(f->c, API_ERR_INVALID_FIELD, path, "%" JSON_INTEGER_FORMAT " is out "
                     "of INT32's range (use INT64)", n);
            return false;
        }
        ((int64_t *)f->t->data)[f->pos++] = (int64_t)n;
        return true;
    }
    if (json_is_null(v) && f->nullable) {
        store_real(f->t, f->dt, f->pos++, -INFINITY, true, API_HALF_NONE, NULL);
        return true;
    }
    if (!json_is_number(v)) {
        api_fail(f->c, API_ERR_INVALID_FIELD, path, "expected a number%s",
                 f->nullable ? " or null" : "");
        return false;
    }
    double x = json_number_value(v);
    if (!json_as_wire(f, path, &x)) {
        api_fail(f->c, API_ERR_NON_FINITE, path, "number out of range of %s",
                 v2_wire_name(f->wire));
        return false;
    }
    /* only a number of the request's own half type is still the text's:
     * an FP32 or FP64 one is a binary value by now, and rounds as one */
    if (!store_real(f->t, f->dt, f->pos, x, false, f->c->half,
                    wire_half(f->wire) == f->c->half ? &f->tie : NULL)) {
        api_fail(f->c, API_ERR_NON_FINITE, path, "number out of range of %s",
                 api_dtype_name(f->dt, f->c->half));
        return false;
    }
    f->pos++;
    return true;
}

/* Whether wire type w's little-endian bytes are already the numbers of
 * the computation's dtype on this host: FP32 for float32, FP64 for
 * float64, on a little-endian host, with no rounding to a half dtype. */
static bool bytes_are_numbers(enum v2_wire w, enum attn_dtype dt, enum api_half half)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return !half && ((w == W_FP32 && dt == ATTN_F32) || (w == W_FP64 && dt == ATTN_F64));
#else
    (void)w, (void)dt, (void)half;
    return false;
#endif
}

/* The refusal of element i of an input (path) that is not a finite number
 * of the request's dtype. */
static void refuse_element(struct api_call *c, const char *path, size_t i, enum attn_dtype dt)
{
    api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not a finite number of %s", i,
             api_dtype_name(dt, c->half));
}

/* FP32 into float32 or FP64 into float64 on a little-endian host, and
 * FP16/BF16 into a tensor kept 2-byte (t->half, the wire's own format):
 * the bytes are the numbers, copied and checked a block at a time (the
 * check reads them from L1; the element loop below took 5 ms of a 2048 x
 * 128 x 3 request), over pool's cores (api/bulk.c). True when it applied:
 * *ok then says whether every element was finite (else fill_binary's loop
 * names the first bad one). With t->data at p itself (a borrowed input)
 * the bytes are only checked. */
static bool fill_binary_same(struct v2_tensor *t, enum v2_wire w, enum attn_dtype dt,
                             bool nullable, enum api_half half, const unsigned char *p,
                             struct attn_pool *pool, bool *ok)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    bool f64 = w == W_FP64, two = t->half != API_HALF_NONE;
    if (!two && !bytes_are_numbers(w, dt, half))
        return false;
    size_t es = wire_size(w);
    struct api_bulk job = {.src = p, .len = t->count * es, .dst = t->data,
                           .elem = two ? (w == W_FP16 ? API_BULK_F16 : API_BULK_BF16)
                                   : f64 ? API_BULK_F64 : API_BULK_F32,
                           .allow_neg_inf = nullable};    /* a nullable input's -inf */
    api_bulk_run(&job, 1, pool);        /* a copy is never bad */
    *ok = !job.nonfinite;
    return true;
#else
    (void)t, (void)w, (void)dt, (void)nullable, (void)half, (void)p, (void)pool, (void)ok;
    return false;
#endif
}

/* Little-endian bytes -> the tensor, element by element (portable to any
 * host byte order; the wire order is fixed by the protocol). */
static bool fill_binary(struct api_call *c, struct v2_tensor *t,
                        enum v2_wire w, enum attn_dtype dt, bool nullable,
                        const unsigned char *p, const char *path)
{
    size_t i, k, ws = wire_size(w);
    bool ok;

    if (fill_binary_same(t, w, dt, nullable, c->half, p, attn_ws_pool(c->req->ws), &ok) && ok)
        return true;
    for (i = 0; i < t->count; i++, p += ws) {
        uint64_t u = 0;
        double v;

        if (w == W_BOOL) {
            ((uint8_t *)t->data)[i] = p[0] != 0;
            continue;
        }
        for (k = 0; k < ws; k++)
            u |= (uint64_t)p[k] << (8 * k);
        if (w == W_INT32 || w == W_INT64) {     /* two's complement */
            ((int64_t *)t->data)[i] = w == W_INT32 ? (int64_t)(int32_t)(uint32_t)u
                                                   : (int64_t)u;
            continue;
        }
        if (w == W_FP32) {
            uint32_t u32 = (uint32_t)u;
            float f;
            memcpy(&f, &u32, sizeof f);
            v = f;
        } else if (w == W_FP16 || w == W_BF16) {
            v = w == W_FP16 ? half_f16_to_f32((uint16_t)u) : half_bf16_to_f32((uint16_t)u);
        } else {
            memcpy(&v, &u, sizeof v);
        }
        if (!store_real(t, dt, i, v, nullable, c->half, NULL)) {
            refuse_element(c, path, i, dt);
            return false;
        }
    }
    return true;
}

/* shape: 1..3 positive integers; count checked against the budget. */
static bool read_shape(struct api_call *c, struct v2_infer *x,
                       const json_t *shape, const char *prefix,
                       struct v2_tensor *t)
{
    char path[API_PATH_MAX];
    size_t i, count = 1;

    api_pointer_key(path, sizeof path, prefix, "shape");
    if (!json_is_array(shape) || json_array_size(shape) < 1 ||
        json_array_size(shape) > ATTN_MAX_RANK) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "shape must be an array of 1 to %d "
                 "dimensions", ATTN_MAX_RANK);
        return false;
    }
    t->rank = (int)json_array_size(shape);
    for (i = 0; i < json_array_size(shape); i++) {
        const json_t *d = json_array_get(shape, i);
        char dp[API_PATH_MAX];

        api_pointer_index(dp, sizeof dp, path, i);
        if (api_size_too_large(d)) {        /* as /v1's base64 shape */
            api_fail(c, API_ERR_LIMIT_EXCEEDED, dp, "a dimension beyond 2^53 is larger "
                     "than any request can hold");
            return false;
        }
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            api_fail(c, API_ERR_INVALID_FIELD, dp, "a dimension must be a "
                     "non-negative integer");
            return false;
        }
        if (json_integer_value(d) == 0) {
            api_fail(c, API_ERR_EMPTY_MATRIX, dp, "a dimension is 0");
            return false;
        }
        t->shape[i] = (size_t)json_integer_value(d);
        if (!core_mul(count, t->shape[i], &count) || count > x->budget) {
            api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "the inputs hold more than "
                     "%zu numbers (--max-elements)", c->ctx->cfg.max_elements);
            return false;
        }
    }
    t->count = count;
    x->budget -= count;
    return true;
}

const struct v2_input_spec api_v2_inputs[V2_NSLOT] = {
    [V2_Q] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 2, 4},
    [V2_K] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 2, 4},
    [V2_V] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 2, 4},
    [V2_BQ] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 1, 2},
    [V2_BK] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 1, 2},
    [V2_BV] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 1, 2},
    [V2_AB] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 2, 4},
    [V2_MASK] = {{"BOOL", NULL}, 2, 4},
    [V2_SINKS] = {{"FP64", "FP32", "FP16", "BF16", NULL}, 1, 1},
    [V2_PQ] = {{"INT64", "INT32", NULL}, 1, 2},
    [V2_PK] = {{"INT64", "INT32", NULL}, 1, 2},
    [V2_SQ] = {{"INT64", "INT32", NULL}, 1, 2},
    [V2_SK] = {{"INT64", "INT32", NULL}, 1, 2},
};


/* The datatype of an input in slot: one of api_v2_inputs[slot]. */
static bool read_wire(struct api_call *c, const json_t *dt, const char *prefix,
                      enum v2_slot slot, enum v2_wire *w)
{
    const char *const *names = api_v2_inputs[slot].datatypes;
    const char *s = json_string_value(dt);
    char path[API_PATH_MAX], list[64] = "";
    size_t i, j, n = 0;

    api_pointer_key(path, sizeof path, prefix, "datatype");
    for (i = 0; s && names[i]; i++)
        for (j = 0; strcmp(s, names[i]) == 0 && j < sizeof v2_wires / sizeof v2_wires[0]; j++)
            if (strcmp(s, v2_wires[j].name) == 0) {
                *w = v2_wires[j].w;
                return true;
            }
    for (i = 0; names[i]; i++)
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s",
                              i == 0 ? "" : names[i + 1] ? ", " : " or ", names[i]);
    api_fail(c, API_ERR_INVALID_FIELD, path, "datatype must be %s", list);
    return false;
}

bool api_v2_read_content_type(struct api_call *c, const json_t *params, const char *path,
                              bool labels)
{
    const json_t *v = member(params, "content_type");
    const char *s = json_string_value(v);
    char p[API_PATH_MAX];

    if (!v || (s && (strcmp(s, "np") == 0 || (labels && strcmp(s, "str") == 0))))
        return true;
    api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, path, "content_type"),
             "content_type must be \"np\"%s (as MLServer's codecs mark %s): attnd reads "
             "no other codec", labels ? " or \"str\"" : "",
             labels ? "arrays and strings" : "numeric tensors");
    return false;
}

bool api_v2_read_binary_size(struct api_call *c, const json_t *in,
                             const char *prefix, long long *size)
{
    static const char *const allowed[] = {"binary_data_size", "content_type", NULL};
    const json_t *p = member(in, "parameters");
    const json_t *b = member(p, "binary_data_size");
    const char *dt = json_string_value(member(in, "datatype"));
    char path[API_PATH_MAX];

    *size = -1;
    api_pointer_key(path, sizeof path, prefix, "parameters");
    if (p && !json_is_object(p)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "parameters must be an object");
        return false;
    }
    if (p && (!api_check_fields(c, p, path, allowed) ||
              !api_v2_read_content_type(c, p, path, dt && strcmp(dt, "BYTES") == 0)))
        return false;
    if (!b)
        return true;
    if (!json_is_integer(b) || json_integer_value(b) < 0) {
        char bp[API_PATH_MAX];
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(bp, sizeof bp, path,
                 "binary_data_size"), "binary_data_size must be a "
                 "non-negative integer");
        return false;
    }
    *size = (long long)json_integer_value(b);
    return true;
}

/* Whether q, k or v (slot) of wire type w can be read in place from p,
 * where its binary bytes begin: bytes that are already the numbers
 * (bytes_are_numbers), aligned for them. The kernels then read the body
 * itself: no 3 MB copy for a 2048 x 128 request's q, k and v. Only q, k
 * and v: they are never written (bias and mask may be widened to every
 * head, api_widen_heads). */
static bool can_borrow(const struct api_call *c, const struct v2_infer *x, int slot,
                       const struct v2_tensor *t, enum v2_wire w, const unsigned char *p)
{
    return slot <= V2_V && p && !t->half && bytes_are_numbers(w, x->dt, c->half) &&
           (uintptr_t)p % wire_size(w) == 0;
}

/* t's data as the body's bytes at p (can_borrow), checked in place by
 * fill_binary_same; the first non-finite element, if any, refused. */
static bool borrow_binary(struct api_call *c, struct v2_tensor *t, enum v2_wire w,
                          enum attn_dtype dt, const unsigned char *p, const char *path)
{
    bool ok = false;
    t->data = (void *)p;        /* read only: the tensor is const to the kernels */
    t->borrowed = true;
    fill_binary_same(t, w, dt, false, c->half, p, attn_ws_pool(c->req->ws), &ok);
    if (!ok)
        refuse_element(c, path, api_first_nonfinite(p, w == W_FP64, t->count, false), dt);
    return ok;
}

/* The dtype of t's elements (when not 2-byte): the request's, or float64
 * for a wide input. */
static enum attn_dtype elem_dtype(const struct v2_infer *x, const struct v2_tensor *t)
{
    return t->wide ? ATTN_F64 : x->dt;
}

/* The raw little-endian bytes of input t (binary_data_size bsize), taken
 * from the binary part after the earlier inputs' bytes: copied into
 * t->data, or read in place when borrow (can_borrow said so; t->data is
 * then not allocated). */
static bool read_binary_data(struct api_call *c, struct v2_infer *x,
                             const json_t *in, const char *prefix,
                             struct v2_tensor *t, enum v2_wire w,
                             long long bsize, bool nullable, bool borrow)
{
    char path[API_PATH_MAX];
    size_t need = 0;

    if (member(in, "data")) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                 prefix, "data"), "data and binary_data_size exclude "
                 "each other");
        return false;
    }
    if (!core_mul(t->count, wire_size(w), &need) ||
        (unsigned long long)bsize != need) {
        char pp[API_PATH_MAX];
        api_pointer_key(pp, sizeof pp, prefix, "parameters");
        api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(path, sizeof path,
                 pp, "binary_data_size"),
                 "binary_data_size is %lld, the shape and datatype need "
                 "%zu bytes", bsize, need);
        return false;
    }
    if (need > x->bin_len - x->bin_used) {
        api_fail(c, API_ERR_INVALID_FIELD, prefix, "the body holds %zu binary "
                 "bytes after earlier inputs, %zu are needed",
                 x->bin_len - x->bin_used, need);
        return false;
    }
    api_pointer_key(path, sizeof path, prefix, "data");
    if (borrow ? !borrow_binary(c, t, w, x->dt, x->bin + x->bin_used, path)
               : !fill_binary(c, t, w, elem_dtype(x, t), nullable, x->bin + x->bin_used, path))
        return false;
    x->bin_used += need;
    return true;
}

/* The JSON "data" of input t, flat or nested, exactly t->count elements. */
static bool read_json_data(struct api_call *c, struct v2_infer *x,
                           const json_t *in, const char *prefix,
                           struct v2_tensor *t, bool is_bool, bool nullable,
                           bool is_int, enum v2_wire w)
{
    char path[API_PATH_MAX];
    struct v2_fill f = {c, t, elem_dtype(x, t), is_bool, nullable, is_int, 0, false, w};
    const json_t *data = member(in, "data");

    api_pointer_key(path, sizeof path, prefix, "data");
    if (!json_is_array(data)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "data must be an array (or "
                 "use binary_data_size)");
        return false;
    }
    if (!fill_json(&f, data, 1, path))
        return false;
    if (f.pos != t->count) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path, "data holds %zu elements, the "
                 "shape needs %zu", f.pos, t->count);
        return false;
    }
    if (f.tie) {             /* re-rounded from the text (api/codec/half.c) */
        /* in float32 (rare: a number exactly on a midpoint of the dtype) */
        if (!api_widen_2byte(&t->data, &t->half, t->count)) {
            api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
            return false;
        }
        size_t at = api_half_fix_ties(c->req->body, c->req->body_len, c->req->early, path,
                                      c->half, t->data, t->count);
        if (at < t->count) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is out of range of %s", at,
                     api_half_name(c->half));
            return false;
        }
    }
    return true;
}

/* One element of "inputs" into its slot. */
static bool read_input(struct api_call *c, struct v2_infer *x,
                       const json_t *in, size_t idx, enum v2_slot slot)
{
    static const char *const allowed[] = {"name", "shape", "datatype",
                                          "parameters", "data", NULL};
    struct v2_tensor *t = &x->t[slot];
    char prefix[API_PATH_MAX];
    bool is_bool = slot == V2_MASK, nullable = slot == V2_AB, is_int = v2_slot_int(slot);
    size_t esz, bytes;
    enum v2_wire w;
    long long bsize;

    api_pointer_index(prefix, sizeof prefix, "/inputs", idx);
    if (!api_check_fields(c, in, prefix, allowed) ||
        !read_wire(c, member(in, "datatype"), prefix, slot, &w) ||
        !read_shape(c, x, member(in, "shape"), prefix, t) ||
        !api_v2_read_binary_size(c, in, prefix, &bsize))
        return false;
    t->present = true;
    t->index = idx;
    /* q, k, v in the request's own half datatype stay 2-byte (a session
     * takes float32: a sequence's are widened as they are read) */
    if (slot <= V2_V && !x->seq && ((w == W_FP16 && c->half == API_HALF_F16) ||
                         (w == W_BF16 && c->half == API_HALF_BF16)))
        t->half = c->half;
    /* sink logits are options: kept as doubles but in a half request,
     * which rounds them to its format (in a float, as other inputs) */
    t->wide = slot == V2_SINKS && !c->half;
    esz = t->half ? 2 : is_bool ? 1 : is_int ? sizeof(int64_t)
                                    : attn_dtype_size(elem_dtype(x, t));
    if (bsize >= 0 && can_borrow(c, x, slot, t, w, x->bin ? x->bin + x->bin_used : NULL))
        return read_binary_data(c, x, in, prefix, t, w, bsize, nullable, true);
    if (!core_mul(t->count, esz, &bytes) || !(t->data = api_spare_alloc(bytes, NULL))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, prefix, "out of memory");
        return false;
    }
    if (bsize >= 0)
        return read_binary_data(c, x, in, prefix, t, w, bsize, nullable, false);
    return read_json_data(c, x, in, prefix, t, is_bool, nullable, is_int, w);
}

static int slot_of(const char *name)
{
    int i;

    for (i = 0; name && i < V2_NSLOT; i++)
        if (strcmp(name, api_v2_slot_names[i]) == 0)
            return i;
    return -1;
}

/* The dtype of a stateless computation: that of q (a missing q is
 * reported after the inputs have been read). */
void api_v2_pick_dtype(struct v2_infer *x, const json_t *inputs)
{
    size_t i;

    x->dt = ATTN_F64;
    for (i = 0; i < json_array_size(inputs); i++) {
        const json_t *in = json_array_get(inputs, i);
        const char *name = json_string_value(member(in, "name"));
        const char *dt = json_string_value(member(in, "datatype"));

        if (name && strcmp(name, "q") == 0) {
            bool f16 = dt && strcmp(dt, "FP16") == 0, bf16 = dt && strcmp(dt, "BF16") == 0;
            x->dt = (dt && strcmp(dt, "FP32") == 0) || f16 || bf16 ? ATTN_F32 : ATTN_F64;
            x->half = f16 ? API_HALF_F16 : bf16 ? API_HALF_BF16 : API_HALF_NONE;
            return;
        }
    }
}

/* Every element of "inputs", in order (binary data follows that order). */
bool api_v2_read_inputs(struct api_call *c, struct v2_infer *x,
                        const json_t *inputs)
{
    size_t i;
    char path[API_PATH_MAX], npath[API_PATH_MAX];

    for (i = 0; i < json_array_size(inputs); i++) {
        const json_t *in = json_array_get(inputs, i);
        const char *name = json_string_value(member(in, "name"));
        int slot = slot_of(name);

        api_pointer_index(path, sizeof path, "/inputs", i);
        if (!json_is_object(in)) {
            api_fail(c, API_ERR_INVALID_FIELD, path, "an input must be an object");
            return false;
        }
        api_pointer_key(npath, sizeof npath, path, "name");
        if (slot < 0 && name && (!strcmp(name, "tokens_q") || !strcmp(name, "tokens_k"))) {
            if (!api_v2_read_tokens(c, x, in, i, name[7] == 'k'))
                return false;
            continue;
        }
        if (slot < 0) {
            api_fail(c, API_ERR_INVALID_FIELD, npath, "unknown input; the inputs are "
                     "q, k, v, bias_q, bias_k, bias_v, attn_bias, mask, "
                     "sink_logits, positions_q, positions_k, segments_q, segments_k, "
                     "tokens_q, tokens_k");
            return false;
        }
        if (x->t[slot].present) {
            api_fail(c, API_ERR_INVALID_FIELD, npath, "input %s given twice", name);
            return false;
        }
        if (!read_input(c, x, in, i, (enum v2_slot)slot))
            return false;
    }
    if (x->bin_used != x->bin_len) {
        api_fail(c, API_ERR_INVALID_FIELD, NULL, "the body holds %zu binary bytes "
                 "that no input claims", x->bin_len - x->bin_used);
        return false;
    }
    return true;
}

