/*
 * core/kv.c — one session's key/value cache (see kv.h).
 *
 * Each head's K and V live in their own realloc'd block of `cap` rows, so a
 * growth moves no other head and glibc can grow large blocks with mremap
 * instead of copying. New rows are always written past `len` first and only
 * counted once they are complete and finite: that is the whole
 * all-or-nothing mechanism. A narrower storage form (float16, bfloat16,
 * int8) prepares the new rows in float32 scratch first and narrows them
 * into place; int8 keeps each head's row scales in a block of its own.
 */
#include "kv.h"
#include "attn_extras.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_lowp.h"

struct kv_cache {
    enum attn_dtype dtype;  /* compute type: what rows widen to */
    enum kv_store store;    /* storage form of every row */
    size_t esz;             /* bytes of one stored element */
    size_t h_kv;            /* heads */
    size_t d_k, d_v;        /* row widths of K and V */
    size_t len;             /* rows stored per head */
    size_t cap;             /* rows allocated per head */
    void **k;               /* [h_kv] blocks of [cap][d_k] */
    void **v;               /* [h_kv] blocks of [cap][d_v] */
    float **ks, **vs;       /* KV_STORE_I8: [h_kv] blocks of [cap] row scales */
};

const char *kv_store_name(enum kv_store st, enum attn_dtype dtype)
{
    switch (st) {
    case KV_STORE_F16: return "float16";
    case KV_STORE_BF16: return "bfloat16";
    case KV_STORE_I8: return "int8";
    default: return attn_dtype_name(dtype);
    }
}

struct kv_cache *kv_new_store(enum attn_dtype dtype, enum kv_store store, size_t h_kv,
                              size_t d_k, size_t d_v)
{
    if (h_kv == 0 || d_k == 0 || d_v == 0)
        return NULL;
    if (dtype != ATTN_F64 && dtype != ATTN_F32)
        return NULL;
    if (store > KV_STORE_I8 || (store != KV_STORE_SAME && dtype != ATTN_F32))
        return NULL;
    struct kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->dtype = dtype;
    c->store = store;
    c->esz = store == KV_STORE_SAME ? attn_dtype_size(dtype) : store == KV_STORE_I8 ? 1 : 2;
    c->h_kv = h_kv;
    c->d_k = d_k;
    c->d_v = d_v;
    c->k = calloc(h_kv, sizeof *c->k);
    c->v = calloc(h_kv, sizeof *c->v);
    if (store == KV_STORE_I8) {
        c->ks = calloc(h_kv, sizeof *c->ks);
        c->vs = calloc(h_kv, sizeof *c->vs);
    }
    if (!c->k || !c->v || (store == KV_STORE_I8 && (!c->ks || !c->vs))) {
        kv_free(c);
        return NULL;
    }
    return c;
}

struct kv_cache *kv_new(enum attn_dtype dtype, size_t h_kv, size_t d_k,
                        size_t d_v)
{
    return kv_new_store(dtype, KV_STORE_SAME, h_kv, d_k, d_v);
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
        if (c->ks)
            free(c->ks[g]);
        if (c->vs)
            free(c->vs[g]);
    }
    free(c->k);
    free(c->v);
    free(c->ks);
    free(c->vs);
    free(c);
}

enum attn_dtype kv_dtype(const struct kv_cache *c) { return c->dtype; }
enum kv_store kv_store(const struct kv_cache *c) { return c->store; }
size_t kv_heads(const struct kv_cache *c) { return c->h_kv; }
size_t kv_d_k(const struct kv_cache *c) { return c->d_k; }
size_t kv_d_v(const struct kv_cache *c) { return c->d_v; }
size_t kv_length(const struct kv_cache *c) { return c->len; }
size_t kv_capacity(const struct kv_cache *c) { return c->cap; }

/* Bytes of `rows` rows over all heads; false on overflow. */
static bool rows_bytes(const struct kv_cache *c, size_t rows, size_t *out)
{
    size_t w, b;
    if (!core_add(c->d_k, c->d_v, &w) || !core_mul(w, c->esz, &b) ||
        (c->store == KV_STORE_I8 && !core_add(b, 2 * sizeof(float), &b)))
        return false;
    return core_mul3(rows, b, c->h_kv, out);
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

/* Block b of the 2 (or 4 with int8 scales) per head: K, V, K scales, V
 * scales of head b % h_kv; its bytes per row. */
static void **block_at(struct kv_cache *c, size_t b, size_t *row_bytes)
{
    size_t g = b % c->h_kv, kind = b / c->h_kv;
    *row_bytes = kind == 0 ? c->d_k * c->esz : kind == 1 ? c->d_v * c->esz : sizeof(float);
    return kind == 0 ? &c->k[g] : kind == 1 ? &c->v[g] : kind == 2 ? (void **)&c->ks[g]
                                                                  : (void **)&c->vs[g];
}

/*
 * Resize every head's blocks to `cap` rows. Shrinking cannot lose rows: a
 * failed shrink keeps a block that is still big enough. A failed growth puts
 * the blocks already grown back to the old size (or leaves them bigger, which
 * is just as valid) and keeps the old capacity: the cache is unchanged.
 */
static enum core_status resize(struct kv_cache *c, size_t cap)
{
    size_t nb = (c->store == KV_STORE_I8 ? 4 : 2) * c->h_kv, rb, total;
    if (!rows_bytes(c, cap, &total))
        return CORE_ELIMIT;
    if (cap == 0) {
        for (size_t b = 0; b < nb; b++) {
            void **pp = block_at(c, b, &rb);
            free(*pp);
            *pp = NULL;
        }
        c->cap = 0;
        return CORE_OK;
    }
    if (cap < c->cap) {
        for (size_t b = 0; b < nb; b++) {
            void **pp = block_at(c, b, &rb);
            set_block(pp, cap * rb);
        }
        c->cap = cap;
        return CORE_OK;
    }
    size_t done = 0;    /* blocks grown, in block_at order */
    for (; done < nb; done++) {
        void **pp = block_at(c, done, &rb);
        if (!set_block(pp, cap * rb))   /* fits: rows_bytes(cap) did */
            break;
    }
    if (done == nb) {
        c->cap = cap;
        return CORE_OK;
    }
    for (size_t u = 0; u < done && c->cap > 0; u++) {
        void **pp = block_at(c, u, &rb);
        set_block(pp, c->cap * rb);
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
    for (size_t g = 0; g < c->h_kv; g++) {
        kp[g] = (char *)c->k[g] + row * c->d_k * c->esz;
        vp[g] = (char *)c->v[g] + row * c->d_v * c->esz;
    }
}

/* The m rows written past len are finite in every head (stored form
 * KV_STORE_SAME). */
static bool tail_finite(const struct kv_cache *c, size_t m)
{
    for (size_t g = 0; g < c->h_kv; g++) {
        const char *k = (const char *)c->k[g] + c->len * c->d_k * c->esz;
        const char *v = (const char *)c->v[g] + c->len * c->d_v * c->esz;
        if (!all_finite(c->dtype, k, m * c->d_k) ||
            !all_finite(c->dtype, v, m * c->d_v))
            return false;
    }
    return true;
}

/* int8 of x [d] with scale max|x|/127 (0 for a zero row): q = x/scale
 * rounded to nearest (ties to even), within -127..127. */
static float quantize_row(const float *x, size_t d, int8_t *q)
{
    float amax = 0, scale;
    for (size_t i = 0; i < d; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    scale = amax / 127.0f;
    for (size_t i = 0; i < d; i++) {
        float t = scale > 0 ? nearbyintf(x[i] / scale) : 0.0f;
        q[i] = (int8_t)(t > 127 ? 127 : t < -127 ? -127 : t);
    }
    return scale;
}

/* Narrow m float32 rows x [m][d] of head g's K (keys) or V into place at
 * rows len..len+m-1. false when a value overflows the storage form. */
static bool narrow_rows(struct kv_cache *c, size_t g, bool keys, const float *x, size_t m)
{
    size_t d = keys ? c->d_k : c->d_v, n = m * d;
    char *dst = (char *)(keys ? c->k[g] : c->v[g]) + c->len * d * c->esz;
    if (c->store == KV_STORE_F16)
        return half_f32_to_f16_n(x, (uint16_t *)(void *)dst, n) == n;
    if (c->store == KV_STORE_BF16)
        return half_f32_to_bf16_n(x, (uint16_t *)(void *)dst, n) == n;
    float *sc = (keys ? c->ks[g] : c->vs[g]) + c->len;
    for (size_t r = 0; r < m; r++)
        sc[r] = quantize_row(x + r * d, d, (int8_t *)dst + r * d);
    return true;
}

/* Narrow prepared float32 rows k [h_kv][m][d_k], v [h_kv][m][d_v] into
 * place past len (room made, all finite checked by the caller). */
static enum core_status narrow_all(struct kv_cache *c, const float *k, const float *v, size_t m)
{
    for (size_t g = 0; g < c->h_kv; g++)
        if (!narrow_rows(c, g, true, k + g * m * c->d_k, m) ||
            !narrow_rows(c, g, false, v + g * m * c->d_v, m))
            return CORE_ENONFINITE;
    return CORE_OK;
}

/* kv_append for a narrow storage form: prepare into float32 scratch, check,
 * narrow into place. */
static enum core_status append_narrow(struct kv_cache *c, const struct attn_params *p,
                                      const struct attn_inputs *in, size_t m)
{
    size_t kn, vn;
    if (!core_mul3(m, c->d_k, c->h_kv, &kn) || !core_mul3(m, c->d_v, c->h_kv, &vn) ||
        !core_add(kn, vn, &kn) || kn > SIZE_MAX / sizeof(float))
        return CORE_ELIMIT;
    vn = m * c->d_v * c->h_kv;
    kn -= vn;
    float *buf = malloc((kn + vn) * sizeof(float));
    void **ptr = malloc(2 * c->h_kv * sizeof *ptr);
    enum core_status st = CORE_ENOMEM;
    if (buf && ptr) {
        for (size_t g = 0; g < c->h_kv; g++) {
            ptr[g] = buf + g * m * c->d_k;
            ptr[c->h_kv + g] = buf + kn + g * m * c->d_v;
        }
        struct attn_shape s = {.h = c->h_kv, .h_kv = c->h_kv, .n = m, .L = m,
                               .d_k = c->d_k, .d_v = c->d_v};
        attn_prepare_kv(&s, p, in, m, (int64_t)c->len, ptr, ptr + c->h_kv);
        st = all_finite(ATTN_F32, buf, kn + vn) ? narrow_all(c, buf, buf + kn, m)
                                                 : CORE_ENONFINITE;
    }
    free(buf);
    free(ptr);
    return st;
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
    if (c->store != KV_STORE_SAME) {
        st = append_narrow(c, p, in, m);
        if (st == CORE_OK)
            c->len += m;
        return st;
    }
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
    if (c->store != KV_STORE_SAME) {
        st = narrow_all(c, k, v, m);
        if (st == CORE_OK)
            c->len += m;
        return st;
    }
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy((char *)c->k[g] + c->len * c->d_k * es,
               (const char *)k + g * kb, kb);
        memcpy((char *)c->v[g] + c->len * c->d_v * es,
               (const char *)v + g * vb, vb);
    }
    c->len += m;
    return CORE_OK;
}

size_t kv_elem_bytes(const struct kv_cache *c)
{
    return c->esz;
}

/* n stored elements at p are finite (int8 always are). */
static bool stored_finite(const struct kv_cache *c, const void *p, size_t n)
{
    const uint16_t *h = p;
    if (c->store == KV_STORE_SAME)
        return all_finite(c->dtype, p, n);
    for (size_t i = 0; c->store != KV_STORE_I8 && i < n; i++)
        if (c->store == KV_STORE_F16 ? !half_f16_is_finite(h[i]) : !half_bf16_is_finite(h[i]))
            return false;
    return true;
}

enum core_status kv_append_stored(struct kv_cache *c, const void *k, const void *v,
                                  const float *ks, const float *vs, size_t m)
{
    size_t kb, vb, kn, vn;
    bool i8 = c->store == KV_STORE_I8;
    if (m == 0 || !k || !v || (i8 && (!ks || !vs)))
        return CORE_EINVAL;
    if (!core_mul3(m, c->d_k, c->esz, &kb) || !core_mul3(m, c->d_v, c->esz, &vb) ||
        !core_mul3(m, c->d_k, c->h_kv, &kn) || !core_mul3(m, c->d_v, c->h_kv, &vn) ||
        m > SIZE_MAX / c->h_kv)
        return CORE_ELIMIT;
    if (!stored_finite(c, k, kn) || !stored_finite(c, v, vn))
        return CORE_ENONFINITE;
    for (size_t i = 0; i8 && i < m * c->h_kv; i++)
        if (!isfinite(ks[i]) || !isfinite(vs[i]) || ks[i] < 0 || vs[i] < 0)
            return CORE_ENONFINITE;
    enum core_status st = room_for(c, m);
    if (st != CORE_OK)
        return st;
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy((char *)c->k[g] + c->len * c->d_k * c->esz, (const char *)k + g * kb, kb);
        memcpy((char *)c->v[g] + c->len * c->d_v * c->esz, (const char *)v + g * vb, vb);
        if (i8) {
            memcpy(c->ks[g] + c->len, ks + g * m, m * sizeof(float));
            memcpy(c->vs[g] + c->len, vs + g * m, m * sizeof(float));
        }
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
    struct kv_cache *f = kv_new_store(c->dtype, c->store, c->h_kv, c->d_k, c->d_v);
    if (!f)
        return NULL;
    if (c->len == 0)
        return f;
    if (kv_reserve(f, grow_target(c->len)) != CORE_OK) {
        kv_free(f);
        return NULL;
    }
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy(f->k[g], c->k[g], c->len * c->d_k * c->esz);
        memcpy(f->v[g], c->v[g], c->len * c->d_v * c->esz);
        if (c->store == KV_STORE_I8) {
            memcpy(f->ks[g], c->ks[g], c->len * sizeof(float));
            memcpy(f->vs[g], c->vs[g], c->len * sizeof(float));
        }
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

const float *kv_k_scales(const struct kv_cache *c, size_t g)
{
    return c->store == KV_STORE_I8 && g < c->h_kv && c->len ? c->ks[g] : NULL;
}

const float *kv_v_scales(const struct kv_cache *c, size_t g)
{
    return c->store == KV_STORE_I8 && g < c->h_kv && c->len ? c->vs[g] : NULL;
}

/* n stored elements of one head's block from element e0 -> out (dtype). */
static void widen(const struct kv_cache *c, const void *blk, const float *sc, size_t d,
                  size_t row0, size_t m, void *out)
{
    size_t e0 = row0 * d, n = m * d;
    if (c->store == KV_STORE_SAME) {
        memcpy(out, (const char *)blk + e0 * c->esz, n * c->esz);
    } else if (c->store == KV_STORE_F16) {
        half_f16_to_f32_n((const uint16_t *)blk + e0, out, n);
    } else if (c->store == KV_STORE_BF16) {
        half_bf16_to_f32_n((const uint16_t *)blk + e0, out, n);
    } else {
        const int8_t *q = (const int8_t *)blk + e0;
        float *o = out;
        for (size_t r = 0; r < m; r++)
            for (size_t i = 0; i < d; i++)
                o[r * d + i] = (float)q[r * d + i] * sc[row0 + r];
    }
}

void kv_read_rows(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k_out,
                  void *v_out)
{
    if (k_out)
        widen(c, c->k[g], c->ks ? c->ks[g] : NULL, c->d_k, row0, m, k_out);
    if (v_out)
        widen(c, c->v[g], c->vs ? c->vs[g] : NULL, c->d_v, row0, m, v_out);
}

void kv_view(const struct kv_cache *c, struct attn_kv_view *view)
{
    view->k = (const void *const *)c->k;
    view->v = (const void *const *)c->v;
}

/* Attention over a narrow cache that asks for scores, weights or extras:
 * those passes print or read n·L numbers anyway, so the cache is widened
 * for that one pass (output-only passes go through kv_lowp.c). */
static enum core_status attend_widened(const struct kv_cache *c, const struct attn_request *r,
                                       const struct attn_inputs *in,
                                       const struct attn_extras *x, struct attn_extras_out *xo,
                                       struct attn_result *out, struct attn_ws *ws)
{
    size_t per, total;
    if (!core_add(c->d_k, c->d_v, &per) || !core_mul3(per, c->len, c->h_kv, &total) ||
        total > SIZE_MAX / sizeof(float))
        return CORE_ELIMIT;
    float *buf = malloc(total * sizeof(float));
    const void **ptr = malloc(2 * c->h_kv * sizeof *ptr);
    enum core_status st = CORE_ENOMEM;
    if (buf && ptr) {
        for (size_t g = 0; g < c->h_kv; g++) {
            float *kg = buf + g * c->len * per, *vg = kg + c->len * c->d_k;
            kv_read_rows(c, g, 0, c->len, kg, vg);
            ptr[g] = kg;
            ptr[c->h_kv + g] = vg;
        }
        struct attn_kv_view view = {ptr, ptr + c->h_kv};
        st = x ? attn_forward_extras(r, in, &view, x, out, xo, ws)
               : attn_forward_kv(r, in, &view, out, ws);
    }
    free(buf);
    free(ptr);
    return st;
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
    if (c->store != KV_STORE_SAME) {
        struct kv_lowp_view lv = {c->store, (const void *const *)c->k,
                                  (const void *const *)c->v, (const float *const *)c->ks,
                                  (const float *const *)c->vs};
        if (!x && kv_lowp_takes(&rr))
            return kv_lowp_attend(&rr, in, &lv, out, ws);
        if (!x && rr.outputs == ATTN_OUT_OUTPUT)
            return kv_lowp_attend_windows(&rr, in, &lv, out, ws);
        return attend_widened(c, &rr, in, x, xo, out, ws);
    }
    struct attn_kv_view view;
    kv_view(c, &view);
    if (x)
        return attn_forward_extras(&rr, in, &view, x, out, xo, ws);
    return attn_forward_kv(&rr, in, &view, out, ws);
}
