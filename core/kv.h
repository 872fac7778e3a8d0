/*
 * core/kv.h — one session's key/value cache.
 *
 * A cache holds h_kv heads of K [L][d_k] and V [L][d_v] in one dtype, in
 * pages of KV_PAGE_ROWS rows (every head's rows of those positions). Rows are stored after bias and RoPE, exactly as
 * attn_prepare_kv produces them at positions pos0 = current length, so
 * attending through the cache is bit-identical to the stateless
 * attn_forward on the full K/V with queries at L-n..L-1.
 *
 * Pages are shared by reference count: kv_fork copies the page table only
 * (the pages' counts go up), and a page is written only while one cache
 * holds it: the first append into a shared, partly filled last page copies
 * that page alone. Truncate and free drop references; a page is freed by
 * its last holder. The counts are atomic, so caches sharing pages may be
 * used from different threads (each cache by one thread at a time).
 *
 * Growth: the first page grows by 1/10 of its rows, later last pages by
 * doubling from 16 rows, so storage is at most 10% over the raw rows or
 * within one page of them. Appends are all or nothing: shapes are
 * validated, room reserved (private pages) and the new rows written past
 * the current length, and only when every step (including the finiteness
 * check of the prepared rows) succeeded does the length move. On any
 * failure the cache reads exactly as before.
 *
 * Storage (kv_dtype): rows are kept in the compute dtype (KV_STORE_SAME) or,
 * for a float32 cache, narrower: float16 or bfloat16 (round to nearest
 * even), or int8 with one float32 scale per head and row (scale =
 * max|x|/127, x ≈ q·scale, q = x/scale rounded to nearest). Rows are
 * narrowed once, after bias and RoPE, when appended; attention reads them
 * in their stored form (core/kv_lowp.c) and never widens the whole cache.
 *
 * Accounting: a cache may point at a struct kv_acct (kv_set_acct; forks
 * inherit it) whose byte count every page allocation and free adjusts, so
 * shared pages count once however many caches hold them.
 *
 * Memory: a page counts its room, cap · kv_row_bytes (a full page of a
 * d=128 float32 head: 64 KiB). Full pages live in slabs (core/kv_slab.h:
 * 2-32 MiB, on transparent huge pages where the system gives them), a
 * cache's next page in the slot after its previous one when that is free,
 * so a head's rows stream as long contiguous runs; smaller pages (a
 * growing last page) are allocations of their own. Not counted: the
 * free slots of partly used slabs (a slab is made only when every slab of
 * its geometry is full, and freed with its last page), one empty slab kept
 * per geometry (32 MiB at most in all), and each page's header (under 128
 * bytes). On huge pages a slab is resident 2 MiB at a time, and one page
 * of a slab touches every 2 MiB of it when its parts span them (many
 * heads), so those free slots are resident memory too.
 *
 * Rolling (kv_roll): a cache may let go of whole pages in the middle, the
 * rows no later query can see, keeping its first pages (a window's sinks)
 * and its last ones. Row numbers and the length keep counting every row
 * ever appended (so RoPE, ALiBi and causal see absolute positions); the
 * rows held are [0, kv_held_front) and [kv_held_from, kv_length), and
 * attention runs over them with those positions.
 *
 * Not thread-safe per cache: one user at a time (core/store.c serialises
 * sessions); different caches sharing pages may run concurrently.
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
struct kv_page;

/* Rows per page. 64: a fork's own last page then costs at most 64 rows
 * (32 forks that each append 64 rows to a 16,384-row prefix hold 1.125x
 * the prefix), while a page of a d=128 float32 head is 32 KiB of
 * contiguous rows per head, long enough that the decode loops read at full
 * bandwidth; it is a multiple of every key block of the attention loops
 * (ATTN_FLASH_KEYS 512 is a multiple of it, kv_lowp's 32 divides it). */
#define KV_PAGE_ROWS 64

/* A shared byte count of allocated page storage. */
struct kv_acct {
    _Atomic size_t bytes;
};

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
size_t kv_capacity(const struct kv_cache *c);   /* rows writable without allocating */

/* Bytes of one row over all heads as stored: h_kv * (d_k + d_v) * element
 * bytes, plus h_kv * 2 * 4 scale bytes for int8. */
size_t kv_row_bytes(const struct kv_cache *c);

/* The bytes `rows` rows would take in a cache kv_new_store(dtype, store,
 * h_kv, d_k, d_v) makes, into *out (rows times its kv_row_bytes); false
 * on overflow. */
bool kv_rows_bytes_for(enum attn_dtype dtype, enum kv_store store, size_t h_kv, size_t d_k,
                       size_t d_v, size_t rows, size_t *out);

/* Storage bytes of every page the cache holds (shared ones included):
 * the sum of page capacities times kv_row_bytes. */
size_t kv_bytes(const struct kv_cache *c);

/* Of kv_bytes: the pages no other cache holds (*own) and the shared ones
 * (*shared); either may be NULL. A snapshot: other caches may let go of a
 * shared page meanwhile. */
void kv_bytes_split(const struct kv_cache *c, size_t *own, size_t *shared);

/* Attach the cache to acct (or NULL: none): acct gains the cache's current
 * bytes. Only for a cache that shares no page (a new or restored one);
 * forks inherit their parent's. */
void kv_set_acct(struct kv_cache *c, struct kv_acct *acct);
struct kv_acct *kv_get_acct(const struct kv_cache *c);

/*
 * The bytes kv_reserve(c, length, exact) would allocate: new pages, a copy
 * of a shared last page that will be written, a larger last page (counted
 * as the growth); *geom by the growth policy, *exact (may be NULL) with the
 * last page sized to exactly `length` rows (the fallback when the policy's
 * does not fit a budget). CORE_ELIMIT on overflow. No allocation.
 */
enum core_status kv_plan(const struct kv_cache *c, size_t length, size_t *geom,
                         size_t *exact);

/* Make `length` rows writable (private pages up to it) by the growth
 * policy, or with the last page of exactly the rows needed. Never shrinks;
 * CORE_ENOMEM / CORE_ELIMIT leave the cache as it was. */
enum core_status kv_reserve(struct kv_cache *c, size_t length, bool exact);

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

/* kv_append with the room made as kv_reserve(c, length + m, exact) makes
 * it (the store's form: exact when only that fits its budget). Rows are
 * prepared and checked before any room is made, so a refused append
 * leaves the pages, their sharing and the byte count as they were. */
enum core_status kv_append_ex(struct kv_cache *c, const struct attn_params *p,
                              const struct attn_inputs *in, size_t m, bool exact);

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
 * Append m rows already in the storage form, as kv_seg and the scales
 * give them back: k [h_kv][m][d_k], v [h_kv][m][d_v] stored elements; for
 * int8 also ks, vs [h_kv][m] scales (finite, >= 0; NULL otherwise). Used by
 * restore: the bits come back as they were. CORE_ENONFINITE for a
 * non-finite stored value or scale; all or nothing.
 */
enum core_status kv_append_stored(struct kv_cache *c, const void *k, const void *v,
                                  const float *ks, const float *vs, size_t m);

/*
 * Stored rows written in place as they arrive (core/persist_read.c's import,
 * which copies each piece of an upload straight into the pages):
 *   kv_fill_open   an empty, unshared cache gets private pages for rows
 *                  [0, front) and [first, length) (first 0: every row,
 *                  front == length; else front and first multiples of
 *                  KV_PAGE_ROWS, front < first <= length, the rows
 *                  between let go as kv_skip does), each page exactly
 *                  its rows; CORE_ENOMEM / CORE_EINVAL / CORE_ELIMIT, and
 *                  the cache is then only to be freed
 *   kv_fill_at     where part `part` (0 K [d_k], 1 V [d_v], 2 K scales,
 *                  3 V scales: int8) of head g's row `row` is stored, in
 *                  *at; returns the rows that follow contiguously there
 *                  (to the end of its page)
 *   kv_fill_close  the rows are written: the length becomes `length`
 * Between open and close the cache is not read (its rows are unwritten);
 * the caller checks what it writes (kv_stored_finite).
 */
enum core_status kv_fill_open(struct kv_cache *c, size_t front, size_t first, size_t length);
size_t kv_fill_at(struct kv_cache *c, int part, size_t g, size_t row, void **at);
void kv_fill_close(struct kv_cache *c, size_t length);

/* Whether n stored elements at p of part `part` (as kv_fill_at's) are what
 * kv_append_stored accepts: finite (int8 rows always are), scales also
 * >= 0. */
bool kv_stored_finite(const struct kv_cache *c, int part, const void *p, size_t n);

/* Bytes of one stored element (8, 4, 2 or 1). */
size_t kv_elem_bytes(const struct kv_cache *c);

/* Keep the first `length` rows (no-op if length >= kv_length): pages past
 * it are let go, and a private last page keeps only the growth policy's
 * room for its rows. A rolling cache truncates to a length of at least
 * kv_held_from (nothing is let go below it) or of at most kv_held_front
 * (every page past the kept ones goes: nothing is missing any more);
 * a length between them does nothing. */
void kv_truncate(struct kv_cache *c, size_t length);

/*
 * Rolling. kv_roll lets go of every whole page of rows [keep, from) (keep
 * rounded up, from down to a page; from capped at the length): the first
 * pages, up to row keep, are kept for good. Later calls keep the same
 * `keep` (another keep does nothing). Dropped rows read as absent: kv_seg
 * gives 0 rows there, and attention sees only the held rows.
 *   kv_held_from   the first row past the gap (0 when nothing was let go)
 *   kv_held_front  the rows kept before the gap (kv_length when none)
 *   kv_held        rows held: kv_length minus the rows let go
 * kv_skip (restore): a cache of whole full pages and nothing reserved
 * jumps its length to `first` (a multiple of KV_PAGE_ROWS past it), the
 * rows between never held; CORE_EINVAL otherwise.
 */
void kv_roll(struct kv_cache *c, size_t keep, size_t from);
size_t kv_held_from(const struct kv_cache *c);
size_t kv_held_front(const struct kv_cache *c);
size_t kv_held(const struct kv_cache *c);
enum core_status kv_skip(struct kv_cache *c, size_t first);

/*
 * Undo of an append that a later step may refuse (an attend whose
 * attention fails): kv_mark before appending, then kv_rollback to go back
 * to the marked length with the shared page the append copied given back
 * (the sharing and the byte count as they were), or kv_unmark to keep the
 * append. A mark holds a reference to the shared page being written, so
 * for its lifetime no other cache writes that page in place.
 */
struct kv_mark {
    size_t len, idx;
    size_t cap;             /* room of the page holding row len (0: none) */
    struct kv_page *page;   /* the shared partly filled last page, or NULL */
};
void kv_mark(struct kv_cache *c, struct kv_mark *m);
void kv_rollback(struct kv_cache *c, struct kv_mark *m);
void kv_unmark(struct kv_cache *c, struct kv_mark *m);

/* A cache sharing every page of c (O(pages): the table is copied, no row
 * is); NULL on ENOMEM. */
struct kv_cache *kv_fork(const struct kv_cache *c);

/*
 * Pages of the same bytes shared again (core/kv_dedup.c), for a restore
 * from a snapshot, which holds every fork's rows whole: kv_dedup_add
 * replaces each whole page of c (a cache that never rolled) whose bytes
 * equal a page added before at the same page number, in a cache of the
 * same dtype, storage and shape, by that page, shared as kv_fork shares
 * it (c's count drops by the page's bytes), and remembers the others.
 * Every cache added must outlive d unchanged. Returns the pages shared;
 * d NULL: nothing (0). kv_dedup_new: NULL when out of memory.
 */
struct kv_dedup;
struct kv_dedup *kv_dedup_new(void);
size_t kv_dedup_add(struct kv_dedup *d, struct kv_cache *c);
void kv_dedup_free(struct kv_dedup *d);

/* Contiguous stored rows of head g from row `row` (< kv_length): the
 * pointers to that row's K [..][d_k], V [..][d_v] in the storage form
 * (uint16_t for float16/bfloat16, int8_t for int8) and for int8 its
 * scales (NULL otherwise); returns how many rows follow contiguously (to
 * the end of the page or of the cache); 0 past the end. */
struct kv_seg {
    const void *k, *v;
    const float *ks, *vs;
};
size_t kv_seg(const struct kv_cache *c, size_t g, size_t row, struct kv_seg *out);

/* Stored rows [row0, row0 + m) of head g copied out as kv_seg gives them:
 * k [m][d_k], v [m][d_v] elements, int8 scales ks, vs [m]; any may be NULL. */
void kv_read_stored(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k,
                    void *v, float *ks, float *vs);

/* Rows [row0, row0 + m) of head g widened to the cache's dtype: K into
 * k_out [m][d_k] and V into v_out [m][d_v] (either may be NULL). */
void kv_read_rows(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k_out,
                  void *v_out);

/*
 * Attend raw queries against the whole cache: r->shape.h_kv, d_k, d_v must
 * match the cache (CORE_ESHAPE otherwise); r->shape.L is taken from the cache
 * (the caller's value is ignored), so results are [h][n][kv_held] (every
 * row when none was let go). q [h][n][d_k] (in->q, in->bias_q) -> out.
 * CORE_ESHAPE when the cache is empty. When rows were let go, the pass
 * gives the keys their rows and the queries kv_length - n + i (or i,
 * top-left) as explicit positions: r may then carry no positions,
 * segments or batch (CORE_EINVAL).
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

/* After kv_attend_x of r on in (heads [nh] of x, NULL: all) answered
 * CORE_ENONFINITE: the input it overflowed on (attn_blame_kv over the
 * held rows widened, row j the j-th held row); the cache as it was for
 * that pass. CORE_ENOMEM when the rows cannot be widened. */
struct attn_blame;
enum core_status kv_blame(const struct kv_cache *c, const struct attn_request *r,
                          const struct attn_inputs *in, const size_t *heads, size_t nh,
                          struct attn_blame *out);

/* After kv_attend_x of r (heads [nh] of x, NULL: all) answered
 * CORE_EEMPTYROW: the first row with no allowed key and why
 * (attn_blame_empty over the held rows, at the positions the pass gave
 * them); the cache as it was for that pass. */
struct attn_blame_empty;
enum core_status kv_blame_empty(const struct kv_cache *c, const struct attn_request *r,
                                const size_t *heads, size_t nh, struct attn_blame_empty *out);

#endif
