/*
 * core/kv.c — one session's key/value cache (see kv.h).
 *
 * Each head's K and V live in their own realloc'd block of `cap` rows, so a
 * growth moves no other head and glibc can grow large blocks with mremap
 * instead of copying. New rows are always written past `len` first and only
 * counted once they are complete and finite: that is the whole
 * all-or-nothing mechanism.
 */
#include "kv.h"
#include "attn_extras.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kv_cache {
    enum attn_dtype dtype;  /* element type of every row */
    size_t h_kv;            /* heads */
    size_t d_k, d_v;        /* row widths of K and V */
    size_t len;             /* rows stored per head */
    size_t cap;             /* rows allocated per head */
    void **k;               /* [h_kv] blocks of [cap][d_k] */
    void **v;               /* [h_kv] blocks of [cap][d_v] */
};

struct kv_cache *kv_new(enum attn_dtype dtype, size_t h_kv, size_t d_k,
                        size_t d_v)
{
    if (h_kv == 0 || d_k == 0 || d_v == 0)
        return NULL;
    if (dtype != ATTN_F64 && dtype != ATTN_F32)
        return NULL;
    struct kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->dtype = dtype;
    c->h_kv = h_kv;
    c->d_k = d_k;
    c->d_v = d_v;
    c->k = calloc(h_kv, sizeof *c->k);
    c->v = calloc(h_kv, sizeof *c->v);
    if (!c->k || !c->v) {
        kv_free(c);
        return NULL;
    }
    return c;
}

void kv_free(struct kv_cache *c)
{
    if (!c)
        return;
    for (size_t g = 0; g < c->h_kv; g++) {
        if (c->k)
            free(c->k[g]);
        if (c->v)
            free(c->v[g]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

enum attn_dtype kv_dtype(const struct kv_cache *c) { return c->dtype; }
size_t kv_heads(const struct kv_cache *c) { return c->h_kv; }
size_t kv_d_k(const struct kv_cache *c) { return c->d_k; }
size_t kv_d_v(const struct kv_cache *c) { return c->d_v; }
size_t kv_length(const struct kv_cache *c) { return c->len; }
size_t kv_capacity(const struct kv_cache *c) { return c->cap; }

/* Bytes of `rows` rows over all heads; false on overflow. */
static bool rows_bytes(const struct kv_cache *c, size_t rows, size_t *out)
{
    size_t w;
    return core_add(c->d_k, c->d_v, &w) &&
           core_mul3(rows, w, attn_dtype_size(c->dtype), out) &&
           core_mul(*out, c->h_kv, out);
}

size_t kv_row_bytes(const struct kv_cache *c)
{
    size_t b = 0;
    rows_bytes(c, 1, &b);   /* cannot overflow: kv_reserve allocated it */
    return b;
}

size_t kv_bytes(const struct kv_cache *c)
{
    size_t b = 0;
    rows_bytes(c, c->cap, &b);
    return b;
}

/* Growth target for `length` rows: length + length/10 (>= length). */
static size_t grow_target(size_t length)
{
    size_t t;
    if (!core_add(length, length / 10, &t))
        return length;
    return t;
}

enum core_status kv_plan(const struct kv_cache *c, size_t length,
                         size_t *cap_out, size_t *bytes_out,
                         size_t *exact_bytes)
{
    size_t cap = c->cap;
    if (length > cap)
        cap = grow_target(length);
    size_t b, e;
    if (!rows_bytes(c, cap, &b) || !rows_bytes(c, length, &e))
        return CORE_ELIMIT;
    if (cap_out)
        *cap_out = cap;
    if (bytes_out)
        *bytes_out = b;
    if (exact_bytes)
        *exact_bytes = e > kv_bytes(c) ? e : kv_bytes(c);
    return CORE_OK;
}

/* Set block *pp to `bytes` (> 0); false (block untouched) on failure. */
static bool set_block(void **pp, size_t bytes)
{
    void *n = realloc(*pp, bytes);
    if (!n)
        return false;
    *pp = n;
    return true;
}

/*
 * Resize every head's blocks to `cap` rows. Shrinking cannot lose rows: a
 * failed shrink keeps a block that is still big enough. A failed growth puts
 * the blocks already grown back to the old size (or leaves them bigger, which
 * is just as valid) and keeps the old capacity: the cache is unchanged.
 */
static enum core_status resize(struct kv_cache *c, size_t cap)
{
    size_t es = attn_dtype_size(c->dtype);
    size_t kb, vb;
    if (!core_mul3(cap, c->d_k, es, &kb) || !core_mul3(cap, c->d_v, es, &vb))
        return CORE_ELIMIT;
    if (cap == 0) {
        for (size_t g = 0; g < c->h_kv; g++) {
            free(c->k[g]);
            free(c->v[g]);
            c->k[g] = c->v[g] = NULL;
        }
        c->cap = 0;
        return CORE_OK;
    }
    if (cap < c->cap) {
        for (size_t g = 0; g < c->h_kv; g++) {
            set_block(&c->k[g], kb);
            set_block(&c->v[g], vb);
        }
        c->cap = cap;
        return CORE_OK;
    }
    size_t done = 0;    /* blocks grown: K of heads 0.., then V of heads 0.. */
    for (; done < 2 * c->h_kv; done++) {
        bool is_k = done < c->h_kv;
        size_t g = is_k ? done : done - c->h_kv;
        if (!set_block(is_k ? &c->k[g] : &c->v[g], is_k ? kb : vb))
            break;
    }
    if (done == 2 * c->h_kv) {
        c->cap = cap;
        return CORE_OK;
    }
    for (size_t u = 0; u < done && c->cap > 0; u++) {
        bool is_k = u < c->h_kv;
        size_t g = is_k ? u : u - c->h_kv;
        set_block(is_k ? &c->k[g] : &c->v[g],
                  c->cap * (is_k ? c->d_k : c->d_v) * es);
    }
    return CORE_ENOMEM;
}

enum core_status kv_reserve(struct kv_cache *c, size_t cap)
{
    if (cap <= c->cap)
        return CORE_OK;
    return resize(c, cap);
}

/* Make room for len + m rows by the growth policy. */
static enum core_status room_for(struct kv_cache *c, size_t m)
{
    size_t need, cap;
    if (!core_add(c->len, m, &need))
        return CORE_ELIMIT;
    enum core_status st = kv_plan(c, need, &cap, NULL, NULL);
    if (st != CORE_OK)
        return st;
    return kv_reserve(c, cap);
}

/* True when every one of count elements at p is finite. */
static bool all_finite(enum attn_dtype t, const void *p, size_t count)
{
    if (t == ATTN_F32) {
        const float *f = p;
        for (size_t i = 0; i < count; i++)
            if (!isfinite(f[i]))
                return false;
    } else {
        const double *d = p;
        for (size_t i = 0; i < count; i++)
            if (!isfinite(d[i]))
                return false;
    }
    return true;
}

/* Pointers to row `row` of each head's K and V blocks. */
static void row_ptrs(const struct kv_cache *c, size_t row, void **kp,
                     void **vp)
{
    size_t es = attn_dtype_size(c->dtype);
    for (size_t g = 0; g < c->h_kv; g++) {
        kp[g] = (char *)c->k[g] + row * c->d_k * es;
        vp[g] = (char *)c->v[g] + row * c->d_v * es;
    }
}

/* The m rows written past len are finite in every head. */
static bool tail_finite(const struct kv_cache *c, size_t m)
{
    size_t es = attn_dtype_size(c->dtype);
    for (size_t g = 0; g < c->h_kv; g++) {
        const char *k = (const char *)c->k[g] + c->len * c->d_k * es;
        const char *v = (const char *)c->v[g] + c->len * c->d_v * es;
        if (!all_finite(c->dtype, k, m * c->d_k) ||
            !all_finite(c->dtype, v, m * c->d_v))
            return false;
    }
    return true;
}

enum core_status kv_append(struct kv_cache *c, const struct attn_params *p,
                           const struct attn_inputs *in, size_t m)
{
    if (m == 0 || !p || !in || !in->k || !in->v || p->dtype != c->dtype)
        return CORE_EINVAL;
    if (c->len > (size_t)INT64_MAX)
        return CORE_ELIMIT;
    enum core_status st = room_for(c, m);
    if (st != CORE_OK)
        return st;
    void **kp = malloc(c->h_kv * sizeof *kp);
    void **vp = malloc(c->h_kv * sizeof *vp);
    if (!kp || !vp) {
        free(kp);
        free(vp);
        return CORE_ENOMEM;
    }
    row_ptrs(c, c->len, kp, vp);
    struct attn_shape s = {.h = c->h_kv, .h_kv = c->h_kv, .n = m, .L = m,
                           .d_k = c->d_k, .d_v = c->d_v};
    attn_prepare_kv(&s, p, in, m, (int64_t)c->len, kp, vp);
    free(kp);
    free(vp);
    if (!tail_finite(c, m))
        return CORE_ENONFINITE;
    c->len += m;
    return CORE_OK;
}

enum core_status kv_append_prepared(struct kv_cache *c, const void *k,
                                    const void *v, size_t m)
{
    if (m == 0 || !k || !v)
        return CORE_EINVAL;
    size_t es = attn_dtype_size(c->dtype);
    size_t kb, vb, kn, vn;
    if (!core_mul3(m, c->d_k, es, &kb) || !core_mul3(m, c->d_v, es, &vb) ||
        !core_mul3(m, c->d_k, c->h_kv, &kn) ||
        !core_mul3(m, c->d_v, c->h_kv, &vn))
        return CORE_ELIMIT;
    if (!all_finite(c->dtype, k, kn) || !all_finite(c->dtype, v, vn))
        return CORE_ENONFINITE;
    enum core_status st = room_for(c, m);
    if (st != CORE_OK)
        return st;
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy((char *)c->k[g] + c->len * c->d_k * es,
               (const char *)k + g * kb, kb);
        memcpy((char *)c->v[g] + c->len * c->d_v * es,
               (const char *)v + g * vb, vb);
    }
    c->len += m;
    return CORE_OK;
}

void kv_truncate(struct kv_cache *c, size_t length)
{
    if (length >= c->len)
        return;
    c->len = length;
    size_t target = grow_target(length);
    if (c->cap > target)
        resize(c, target);  /* a failed shrink keeps the bigger blocks */
}

struct kv_cache *kv_fork(const struct kv_cache *c)
{
    struct kv_cache *f = kv_new(c->dtype, c->h_kv, c->d_k, c->d_v);
    if (!f)
        return NULL;
    if (c->len == 0)
        return f;
    if (kv_reserve(f, grow_target(c->len)) != CORE_OK) {
        kv_free(f);
        return NULL;
    }
    size_t es = attn_dtype_size(c->dtype);
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy(f->k[g], c->k[g], c->len * c->d_k * es);
        memcpy(f->v[g], c->v[g], c->len * c->d_v * es);
    }
    f->len = c->len;
    return f;
}

const void *kv_k(const struct kv_cache *c, size_t g)
{
    return g < c->h_kv && c->len ? c->k[g] : NULL;
}

const void *kv_v(const struct kv_cache *c, size_t g)
{
    return g < c->h_kv && c->len ? c->v[g] : NULL;
}

void kv_view(const struct kv_cache *c, struct attn_kv_view *view)
{
    view->k = (const void *const *)c->k;
    view->v = (const void *const *)c->v;
}

enum core_status kv_attend(const struct kv_cache *c,
                           const struct attn_request *r,
                           const struct attn_inputs *in,
                           struct attn_result *out, struct attn_ws *ws)
{
    return kv_attend_x(c, r, in, NULL, NULL, out, ws);
}

enum core_status kv_attend_x(const struct kv_cache *c, const struct attn_request *r,
                             const struct attn_inputs *in, const struct attn_extras *x,
                             struct attn_extras_out *xo, struct attn_result *out,
                             struct attn_ws *ws)
{
    if (r->shape.h_kv != c->h_kv || r->shape.d_k != c->d_k ||
        r->shape.d_v != c->d_v || r->params.dtype != c->dtype)
        return CORE_ESHAPE;
    if (c->len == 0)
        return CORE_ESHAPE;
    struct attn_request rr = *r;
    rr.shape.L = c->len;
    struct attn_kv_view view;
    kv_view(c, &view);
    if (x)
        return attn_forward_extras(&rr, in, &view, x, out, xo, ws);
    return attn_forward_kv(&rr, in, &view, out, ws);
}
