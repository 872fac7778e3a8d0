/*
 * core/kv.h — one session's key/value cache.
 *
 * A cache holds h_kv heads of K [cap][d_k] and V [cap][d_v] in one dtype.
 * Rows are stored after bias and RoPE, exactly as attn_prepare_kv produces
 * them at positions pos0 = current length, so attending through the cache
 * (attn_forward_kv over a struct attn_kv_view of it) is bit-identical to the
 * stateless attn_forward on the full K/V with queries at L-n..L-1.
 *
 * Growth is geometric by 1/10 (realloc), so appends are amortised O(1) per
 * row and the storage right after a growth is at most 10% over the raw K/V
 * bytes; truncate gives slack back. Appends are all or nothing: shapes are
 * validated, capacity reserved and the new rows written past the current
 * length, and only when every step (including the finiteness check of the
 * prepared rows) succeeded does the length move. On any failure the cache
 * reads exactly as before.
 *
 * Storage (kv_dtype): rows are kept in the compute dtype (KV_STORE_SAME) or,
 * for a float32 cache, narrower: float16 or bfloat16 (round to nearest
 * even), or int8 with one float32 scale per head and row (scale =
 * max|x|/127, x ≈ q·scale, q = x/scale rounded to nearest). Rows are
 * narrowed once, after bias and RoPE, when appended; attention reads them
 * in their stored form (core/kv_lowp.c) and never widens the whole cache.
 *
 * Not thread-safe: one user at a time (core/store.c serialises sessions).
 */
#ifndef ATTND_CORE_KV_H
#define ATTND_CORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "status.h"
#include "tensor.h"

struct kv_cache;

/* How rows are stored. */
enum kv_store {
    KV_STORE_SAME = 0,      /* the cache's dtype (float32 or float64) */
    KV_STORE_F16,           /* float16 (float32 caches only) */
    KV_STORE_BF16,          /* bfloat16 (float32 caches only) */
    KV_STORE_I8,            /* int8 + float32 scale per head and row (float32 only) */
};

/* "float16", "bfloat16", "int8", or the dtype's name for KV_STORE_SAME. */
const char *kv_store_name(enum kv_store st, enum attn_dtype dtype);

/* A new empty cache; NULL if a dimension is 0 or memory is short. */
struct kv_cache *kv_new(enum attn_dtype dtype, size_t h_kv, size_t d_k,
                        size_t d_v);

/* kv_new with a storage form; NULL also when store is not KV_STORE_SAME
 * and dtype is not ATTN_F32. */
struct kv_cache *kv_new_store(enum attn_dtype dtype, enum kv_store store, size_t h_kv,
                              size_t d_k, size_t d_v);
void kv_free(struct kv_cache *c);

enum attn_dtype kv_dtype(const struct kv_cache *c);
enum kv_store kv_store(const struct kv_cache *c);
size_t kv_heads(const struct kv_cache *c);
size_t kv_d_k(const struct kv_cache *c);
size_t kv_d_v(const struct kv_cache *c);
size_t kv_length(const struct kv_cache *c);     /* rows per head */
size_t kv_capacity(const struct kv_cache *c);   /* rows allocated per head */

/* Bytes of one row over all heads as stored: h_kv * (d_k + d_v) * element
 * bytes, plus h_kv * 2 * 4 scale bytes for int8. */
size_t kv_row_bytes(const struct kv_cache *c);

/* Allocated storage bytes: capacity * kv_row_bytes (what the store accounts). */
size_t kv_bytes(const struct kv_cache *c);

/*
 * The capacity (rows) and storage bytes the cache will have after growing to
 * hold `length` rows by the growth policy; no allocation. *exact_bytes (may be
 * NULL) receives the bytes of exactly `length` rows, the fallback a caller may
 * reserve when the geometric target does not fit its budget.
 * CORE_ELIMIT on overflow.
 */
enum core_status kv_plan(const struct kv_cache *c, size_t length,
                         size_t *cap_out, size_t *bytes_out,
                         size_t *exact_bytes);

/* Make room for at least `cap` rows (never shrinks). CORE_ENOMEM leaves the
 * cache as it was. */
enum core_status kv_reserve(struct kv_cache *c, size_t cap);

/*
 * Append m raw rows: in->k [h_kv][m][d_k], in->v [h_kv][m][d_v] (with
 * in->bias_k / in->bias_v and p->rope as attn_prepare_kv uses them) are
 * prepared at positions length..length+m-1 and stored. p->dtype must equal
 * the cache's dtype. Grows by the growth policy if needed. Errors:
 * CORE_EINVAL (m == 0, NULL arrays, dtype), CORE_ELIMIT, CORE_ENOMEM,
 * CORE_ENONFINITE (a prepared number is not finite); the cache is unchanged
 * on every error.
 */
enum core_status kv_append(struct kv_cache *c, const struct attn_params *p,
                           const struct attn_inputs *in, size_t m);

/*
 * Append m already prepared rows (k [h_kv][m][d_k], v [h_kv][m][d_v] in the
 * cache's dtype), copied as they are (narrowed to the storage form first
 * when it is not KV_STORE_SAME); used by restore and tests. Same errors
 * and all-or-nothing rule as kv_append (CORE_ENONFINITE also when a value
 * overflows float16).
 */
enum core_status kv_append_prepared(struct kv_cache *c, const void *k,
                                    const void *v, size_t m);

/*
 * Append m rows already in the storage form, as kv_k/kv_v and the scales
 * give them back: k [h_kv][m][d_k], v [h_kv][m][d_v] stored elements; for
 * int8 also ks, vs [h_kv][m] scales (finite, >= 0; NULL otherwise). Used by
 * restore: the bits come back as they were. CORE_ENONFINITE for a
 * non-finite stored value or scale; all or nothing.
 */
enum core_status kv_append_stored(struct kv_cache *c, const void *k, const void *v,
                                  const float *ks, const float *vs, size_t m);

/* Bytes of one stored element (8, 4, 2 or 1). */
size_t kv_elem_bytes(const struct kv_cache *c);

/* Keep the first `length` rows (no-op if length >= kv_length); frees slack
 * beyond the growth policy's target for the new length. */
void kv_truncate(struct kv_cache *c, size_t length);

/* A deep copy with capacity = planned capacity of its length; NULL on ENOMEM. */
struct kv_cache *kv_fork(const struct kv_cache *c);

/* Stored rows of head g: [length][d_k] / [length][d_v] in the storage form
 * (uint16_t for float16/bfloat16, int8_t for int8); NULL when empty. */
const void *kv_k(const struct kv_cache *c, size_t g);
const void *kv_v(const struct kv_cache *c, size_t g);

/* int8 scales of head g: [length] for K / V; NULL unless KV_STORE_I8. */
const float *kv_k_scales(const struct kv_cache *c, size_t g);
const float *kv_v_scales(const struct kv_cache *c, size_t g);

/* Rows [row0, row0 + m) of head g widened to the cache's dtype: K into
 * k_out [m][d_k] and V into v_out [m][d_v] (either may be NULL). */
void kv_read_rows(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k_out,
                  void *v_out);

/* A view of the whole cache for attn_forward_kv (KV_STORE_SAME only); valid until the next
 * append, reserve, truncate or free. */
void kv_view(const struct kv_cache *c, struct attn_kv_view *view);

/*
 * Attend raw queries against the whole cache: r->shape.h_kv, d_k, d_v must
 * match the cache (CORE_ESHAPE otherwise); r->shape.L is taken from the cache
 * (the caller's value is ignored), so results are [h][n][kv_length].
 * q [h][n][d_k] (in->q, in->bias_q) -> out. CORE_ESHAPE when the cache is empty.
 */
enum core_status kv_attend(const struct kv_cache *c,
                           const struct attn_request *r,
                           const struct attn_inputs *in,
                           struct attn_result *out, struct attn_ws *ws);

/* kv_attend through attn_forward_extras (core/attn_extras.h) when x is not
 * NULL: chosen heads, q·k, lse, stats, top-k into xo. */
struct attn_extras;
struct attn_extras_out;
enum core_status kv_attend_x(const struct kv_cache *c, const struct attn_request *r,
                             const struct attn_inputs *in, const struct attn_extras *x,
                             struct attn_extras_out *xo, struct attn_result *out,
                             struct attn_ws *ws);

#endif
