/*
 * core/kv_slab.h — storage for the session cache's full pages, carved from
 * large slabs so that neighbouring pages of one cache usually lie side by
 * side in memory (core/kv.c).
 *
 * A page of the cache has parts: K of each head, V of each head and, for
 * int8, the K and V row scales of each head, every part of a geometry the
 * same size per kind (struct kv_slab_geom). A slab holds N pages' slots
 * with each part laid out stream by stream: head g's K of slots 0..N-1 one
 * after the other, then the next head's, then the V parts, then the
 * scales. Pages in consecutive slots of a slab are therefore one
 * contiguous run per head and part, which is what the decode loops stream
 * through: a jump between pages stalls the hardware prefetcher (measured:
 * docs/benchmarks.md, section "Paged cache pages from slabs").
 *
 * Slabs are at least 2 MiB, 2 MiB-aligned, and ask for transparent huge
 * pages (madvise MADV_HUGEPAGE where the system has it; without it the
 * slabs are ordinary memory). N is at most KV_SLAB_MAX_SLOTS.
 *
 * Placement: kv_slab_get takes the slot right after the hint (the
 * caller's previous page) when it is free; otherwise the middle of the
 * longest free run (its start when the run opens the slab) among the
 * first slabs with a free slot, leaving the slot after another cache's
 * page to that cache; a new slab only when every slab of the geometry is
 * full. A slab whose last page goes is released, except one empty slab
 * kept per geometry while the kept ones total at most 32 MiB.
 *
 * Thread-safe: one lock for every geometry (taken once per page
 * allocated or freed, never per row).
 */
#ifndef ATTND_CORE_KV_SLAB_H
#define ATTND_CORE_KV_SLAB_H

#include <stdbool.h>
#include <stddef.h>

#define KV_SLAB_MAX_SLOTS 128

/* One page's parts: heads × (K of kb bytes, V of vb bytes, and two scale
 * parts of sb bytes each when sb > 0). kb, vb, sb multiples of 64. */
struct kv_slab_geom {
    size_t heads, kb, vb, sb;
};

struct kv_slab;

/* Where a page's storage lives: a slab and a slot of it. */
struct kv_slab_slot {
    struct kv_slab *slab;
    size_t slot;
};

/* A free slot for a page of geometry g, after hint (may be NULL: no
 * preference) if it can be; false when memory is short. */
bool kv_slab_get(const struct kv_slab_geom *g, const struct kv_slab_slot *hint,
                 struct kv_slab_slot *out);

/* Give a slot back (the last page in a slab releases it, or keeps it as
 * its geometry's one empty slab). */
void kv_slab_put(const struct kv_slab_slot *s);

/* Slots per slab of this slot's slab: head g's part of slot i starts
 * g·slots·(its part's bytes) after the part kind's base. */
size_t kv_slab_slots(const struct kv_slab *s);

/* The base of part kind `kind` (0 K, 1 V, 2 K scales, 3 V scales) of head
 * 0 of slot s; head g's is g · kv_slab_slots · that kind's bytes further. */
unsigned char *kv_slab_part(const struct kv_slab_slot *s, int kind);

/* Totals over every geometry: slabs held, their bytes, and the bytes of
 * the slots in use (pages); a snapshot. */
struct kv_slab_stats {
    size_t slabs, bytes, used_bytes, empty;
};
void kv_slab_stats(struct kv_slab_stats *out);

/* Whether new slabs ask for transparent huge pages (default true). For
 * benchmarks that measure the difference. */
void kv_slab_set_hugepages(bool on);

#endif
