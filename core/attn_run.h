/*
 * core/attn_run.h — one pass as core/attn.c and core/attn_impl.h see it
 * (internal to core/): the request with its batch flattened into heads, its
 * positions resolved, and the rule that says which keys a query row may
 * attend (core/positions.c implements it).
 *
 * Flattening: a batch of B elements of h query heads and h_kv kv heads is
 * one pass of B·h query heads and B·h_kv kv heads; query head hh belongs to
 * batch element hh / h and is head hh % h of it, so the existing
 * floor(hh·h_kv/h) mapping of query heads to kv heads stays right, and
 * per-head things (ALiBi slope, sink logit, bias vectors) index by hh % h.
 *
 * Keys of a row: allowed_ij = causal ∧ window ∧ same segment (the mask and
 * -inf attention bias come on top, entry by entry). attn_run_keys gives
 * each row at most two key intervals, the sinks [slo, shi) and the main
 * one [lo, hi), that hold every allowed key; `exact` says every key in
 * them is allowed. Rows are exact whenever the row's segment is one
 * contiguous run of keys whose positions do not decrease (every default,
 * and the usual explicit positions); otherwise the interval is the
 * segment's span and each key is tested (attn_run_allowed).
 */
#ifndef ATTND_CORE_ATTN_RUN_H
#define ATTND_CORE_ATTN_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* Allowed keys of one row ⊆ [slo, shi) ∪ [lo, hi) (disjoint, the sinks
 * first; an empty interval has lo == hi). */
struct attn_keys {
    size_t slo, shi, lo, hi;
    bool exact;
};

struct attn_run {
    struct attn_request r;      /* flattened: shape.h = B·h, h_kv = B·h_kv, B kept */
    size_t B, h, h_kv;          /* batch elements; heads of one element */
    const int64_t *pq, *pk;     /* positions [pq_b][n] / [pk_b][L]; NULL = default */
    size_t pq_b, pk_b;
    const size_t *sa, *se;      /* per query row: its segment's key span, [sg_b][n] */
    const uint8_t *scontig;     /* per query row: that span holds only its segment */
    const uint8_t *kmono;       /* [km_b]: key positions rise within each segment run */
    size_t sg_b, km_b;
    bool general;               /* positions, segments or a window given */
    enum attn_elem q_elem;      /* what the inputs' q holds (attn_forward_half) */
    enum attn_elem k_elem, v_elem;  /* what the kv view's rows hold */
    const struct attn_stop *stop;   /* the workspace's (its yield runs between key
                                       blocks), or NULL */
};

/* Scratch bytes attn_run_init needs for r (0 when nothing is resolved);
 * false on overflow. */
bool attn_run_bytes(const struct attn_request *r, size_t *bytes);

/* r (already checked) -> x; scratch of attn_run_bytes bytes, 16-aligned,
 * which x points into (keep it while x is used). */
void attn_run_init(struct attn_run *x, const struct attn_request *r, void *scratch);

/* Batch element of query head hh / of kv head g; head within it. */
static inline size_t attn_run_qbatch(const struct attn_run *x, size_t hh)
{
    return hh / x->h;
}

static inline size_t attn_run_kbatch(const struct attn_run *x, size_t g)
{
    return g / x->h_kv;
}

static inline size_t attn_run_head(const struct attn_run *x, size_t hh)
{
    return hh % x->h;
}

/* The index into an [heads][n][L] array (attn_bias, mask) given once for
 * every head (heads 1), per query head (h) or per batch element and head
 * (B·h) of flattened head hh. */
static inline size_t attn_run_bcast_head(const struct attn_run *x, size_t heads, size_t hh)
{
    return heads == 1 ? 0 : heads == x->h ? attn_run_head(x, hh) : hh;
}

/* Position of query row i of head hh, of key j of batch element b. */
int64_t attn_run_qpos(const struct attn_run *x, size_t hh, size_t i);
int64_t attn_run_kpos(const struct attn_run *x, size_t b, size_t j);

/* The key intervals of query row i of head hh (see above). */
void attn_run_keys(const struct attn_run *x, size_t hh, size_t i, struct attn_keys *k);

/* The whole rule for one key: causal ∧ window ∧ same segment. */
bool attn_run_allowed(const struct attn_run *x, size_t hh, size_t i, size_t j);

/* Union over global rows [row0, row0+nb) (row = head·n + i): *sk the
 * smallest interval holding every row's sinks, *mk every row's main keys
 * (each [0,0) when empty). */
void attn_run_tile_keys(const struct attn_run *x, size_t row0, size_t nb, size_t *s0,
                        size_t *s1, size_t *m0, size_t *m1);

/* The smallest interval [*a, *e) holding both intervals of
 * attn_run_tile_keys, tk = {s0, s1, m0, m1} ([0, 0) when both are empty).
 * One row's sinks lie below its main keys, but another row's main keys
 * (another segment's) may lie below them. */
static inline void attn_run_tile_span(const size_t tk[4], size_t *a, size_t *e)
{
    bool s = tk[0] < tk[1], m = tk[2] < tk[3];
    *a = s && m ? (tk[0] < tk[2] ? tk[0] : tk[2]) : s ? tk[0] : m ? tk[2] : 0;
    *e = s && m ? (tk[1] > tk[3] ? tk[1] : tk[3]) : s ? tk[1] : m ? tk[3] : 0;
}

/* Sink logit of query head hh (per-head array or the one value). */
double attn_run_sink(const struct attn_run *x, size_t hh);

#endif
