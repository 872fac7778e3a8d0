/*
 * core/kv_impl.h — the inside of a session's key/value cache, shared by
 * core/kv.c (pages, growth, writing rows) and core/kv_read.c (reading rows
 * and the passes over them): the page and cache structs and where a head's
 * rows sit in a page. See core/kv.c for the layout and the write rules.
 */
#ifndef ATTND_CORE_KV_IMPL_H
#define ATTND_CORE_KV_IMPL_H

#include "kv.h"
#include "kv_slab.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define P KV_PAGE_ROWS

struct kv_page {
    atomic_size_t refs;             /* caches holding it */
    size_t cap;                     /* rows it has room for (<= P) */
    size_t hs;                      /* rows from one head's part to the next head's */
    unsigned char *k, *v;           /* head 0's K and V rows */
    float *ks, *vs;                 /* head 0's int8 row scales (NULL otherwise) */
    struct kv_slab_slot at;         /* a full page's slab slot; at.slab NULL: the
                                       rows follow this header (malloc'd) */
};

/* Drop one reference to pg, held by c; the last one frees the page (and
 * takes its bytes off c's count). */
void kv_page_unref(struct kv_cache *c, struct kv_page *pg);

/* A malloc'd page's rows start this far in: on a cache line, so a 512-byte
 * row spans 8 lines, not 9. */
#define PAGE_HEAD ((sizeof(struct kv_page) + 63) & ~(size_t)63)

struct kv_cache {
    enum attn_dtype dtype;  /* compute type: what rows widen to */
    enum kv_store store;    /* storage form of every row */
    size_t esz;             /* bytes of one stored element */
    size_t h_kv;            /* heads */
    size_t d_k, d_v;        /* row widths of K and V */
    size_t len;             /* rows stored per head */
    size_t np, tab;         /* table slots in use (rows and reserved room); slots */
    struct kv_page **pg;    /* [tab] */
    size_t sp, gap;         /* rolling (gap > 0): pages [0, sp) are kept, the
                               next gap pages were let go, and page p >= sp +
                               gap sits in slot p - gap; gap 0: every page */
    struct kv_acct *acct;   /* shared byte count, or NULL */
};

/* ---- where rows sit ---------------------------------------------------------- */

/* The table slot of page p (p < sp or p >= sp + gap: a page still held). */
static inline size_t slot(const struct kv_cache *c, size_t p)
{
    return p < c->sp ? p : p - c->gap;
}

/* Whether row r fell into the pages let go. */
static inline bool dropped(const struct kv_cache *c, size_t r)
{
    return c->gap && r / P >= c->sp && r / P < c->sp + c->gap;
}

/* Accounted bytes of a page of cap rows. */
static inline size_t page_bytes(const struct kv_cache *c, size_t cap)
{
    return cap * kv_row_bytes(c);
}

/* Head g's K / V rows and int8 scales in a page. */
static inline void *pk(const struct kv_cache *c, const struct kv_page *pg, size_t g)
{
    return pg->k + g * pg->hs * c->d_k * c->esz;
}

static inline void *pv(const struct kv_cache *c, const struct kv_page *pg, size_t g)
{
    return pg->v + g * pg->hs * c->d_v * c->esz;
}

/* Byte offset of the scales: after K and V, rounded up to 4. */
static inline size_t scale_off(const struct kv_cache *c, size_t cap)
{
    return ((c->d_k + c->d_v) * c->h_kv * cap * c->esz + 3) & ~(size_t)3;
}

static inline float *pks(const struct kv_cache *c, const struct kv_page *pg, size_t g)
{
    (void)c;
    return pg->ks + g * pg->hs;
}

static inline float *pvs(const struct kv_cache *c, const struct kv_page *pg, size_t g)
{
    (void)c;
    return pg->vs + g * pg->hs;
}

/* Where part `part` (0 K, 1 V, 2 K scales, 3 V scales: int8) of head g's
 * row `off` of page pg is stored. */
static inline void *part_at(const struct kv_cache *c, const struct kv_page *pg, int part,
                            size_t g, size_t off)
{
    switch (part) {
    case 0: return (char *)pk(c, pg, g) + off * c->d_k * c->esz;
    case 1: return (char *)pv(c, pg, g) + off * c->d_v * c->esz;
    case 2: return pks(c, pg, g) + off;
    default: return pvs(c, pg, g) + off;
    }
}

#endif
