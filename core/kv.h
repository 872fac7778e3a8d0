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

/* A new empty cache; NULL if a dimension is 0 or memory is short. */
struct kv_cache *kv_new(enum attn_dtype dtype, size_t h_kv, size_t d_k,
                        size_t d_v);
void kv_free(struct kv_cache *c);

enum attn_dtype kv_dtype(const struct kv_cache *c);
size_t kv_heads(const struct kv_cache *c);
size_t kv_d_k(const struct kv_cache *c);
size_t kv_d_v(const struct kv_cache *c);
size_t kv_length(const struct kv_cache *c);     /* rows per head */
size_t kv_capacity(const struct kv_cache *c);   /* rows allocated per head */

/* Bytes of one row over all heads: h_kv * (d_k + d_v) * sizeof(dtype). */
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
 * cache's dtype), copied as they are; used by restore and tests. Same errors
 * and all-or-nothing rule as kv_append.
 */
enum core_status kv_append_prepared(struct kv_cache *c, const void *k,
                                    const void *v, size_t m);

/* Keep the first `length` rows (no-op if length >= kv_length); frees slack
 * beyond the growth policy's target for the new length. */
void kv_truncate(struct kv_cache *c, size_t length);

/* A deep copy with capacity = planned capacity of its length; NULL on ENOMEM. */
struct kv_cache *kv_fork(const struct kv_cache *c);

/* Stored rows of head g: [length][d_k] / [length][d_v]; NULL when empty. */
const void *kv_k(const struct kv_cache *c, size_t g);
const void *kv_v(const struct kv_cache *c, size_t g);

/* A view of the whole cache for attn_forward_kv; valid until the next
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
