/*
 * core/kv_dedup.c — pages of the same bytes shared again (core/kv.h's
 * kv_dedup_*). A snapshot holds each session whole, a fork's rows too, so
 * restoring one would give every fork its own copy of the pages it shared
 * with its parent: memory and the cache's count times the number of forks.
 * The restore hands each cache it rebuilds from a snapshot to
 * kv_dedup_add, which replaces every full page whose bytes equal those of
 * a page seen before at the same place (same page number, in a cache of
 * the same form) by that page, shared as kv_fork shares it; the rest are
 * remembered. Pages are found by a key made from a few rows of the page
 * and checked whole (memcmp of every head's parts) before they are shared,
 * so a key that two different pages give only costs a comparison, and at
 * most MAX_COMPARED of those per page.
 *
 * Only whole pages of caches that never rolled are looked at: a fork's
 * pages are whole up to where it forked, and its partly filled last page
 * is its own after its first append anyway.
 */
#include "kv_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct seen {
    uint64_t key;                   /* 0: an empty slot */
    const struct kv_cache *c;
    size_t p;                       /* its page number (= table slot) */
};

struct kv_dedup {
    struct seen *tab;
    size_t cap, used;               /* cap: a power of two */
};

struct kv_dedup *kv_dedup_new(void)
{
    return calloc(1, sizeof(struct kv_dedup));
}

void kv_dedup_free(struct kv_dedup *d)
{
    if (d)
        free(d->tab);
    free(d);
}

/* A 64-bit mix of x into h (the multiply-xorshift of splitmix64). */
static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = mix(h, w);
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    return mix(h, w ^ n);
}

/* The key of page p of c: its form, its number, and five rows spread over
 * the page of head 0's K and of the last head's V. Never 0. */
static uint64_t page_key(const struct kv_cache *c, size_t p)
{
    static const size_t rows[] = {0, P / 4, P / 2, 3 * P / 4, P - 1};
    const struct kv_page *pg = c->pg[p];
    uint64_t h = mix(mix(mix(c->dtype, c->store), mix(c->h_kv, c->d_k)), mix(c->d_v, p));
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        h = mix_bytes(h, part_at(c, pg, 0, 0, rows[i]), c->d_k * c->esz);
        h = mix_bytes(h, part_at(c, pg, 1, c->h_kv - 1, rows[i]), c->d_v * c->esz);
    }
    return h ? h : 1;
}

static bool same_form(const struct kv_cache *a, const struct kv_cache *b)
{
    return a->dtype == b->dtype && a->store == b->store && a->esz == b->esz &&
           a->h_kv == b->h_kv && a->d_k == b->d_k && a->d_v == b->d_v;
}

/* Whether page pa of a and page pb of b hold the same bytes (every head's
 * K and V rows, and int8 scales). */
static bool same_page(const struct kv_cache *a, size_t pa, const struct kv_cache *b,
                      size_t pb)
{
    const struct kv_page *x = a->pg[pa], *y = b->pg[pb];
    if (x == y)
        return true;
    for (size_t g = 0; g < a->h_kv; g++) {
        if (memcmp(pk(a, x, g), pk(b, y, g), P * a->d_k * a->esz) != 0 ||
            memcmp(pv(a, x, g), pv(b, y, g), P * a->d_v * a->esz) != 0)
            return false;
        if (a->store == KV_STORE_I8 &&
            (memcmp(pks(a, x, g), pks(b, y, g), P * sizeof(float)) != 0 ||
             memcmp(pvs(a, x, g), pvs(b, y, g), P * sizeof(float)) != 0))
            return false;
    }
    return true;
}

static bool grow(struct kv_dedup *d)
{
    size_t cap = d->cap ? d->cap * 2 : 256;
    struct seen *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return false;
    for (size_t i = 0; i < d->cap; i++) {
        if (!d->tab[i].key)
            continue;
        size_t j = d->tab[i].key & (cap - 1);
        while (tab[j].key)
            j = (j + 1) & (cap - 1);
        tab[j] = d->tab[i];
    }
    free(d->tab);
    d->tab = tab;
    d->cap = cap;
    return true;
}

/* Page p of c shared with a page seen before (true), or remembered. A page
 * is compared whole with at most MAX_COMPARED pages of its key; past that
 * it keeps its own copy and is not remembered, so that pages made to agree
 * where the key looks cannot make a restore quadratic (a key then holds at
 * most MAX_COMPARED + 1 entries). */
#define MAX_COMPARED 8

static bool share_or_remember(struct kv_dedup *d, struct kv_cache *c, size_t p)
{
    uint64_t key = page_key(c, p);
    size_t j = key & (d->cap - 1);
    int compared = 0;
    for (; d->tab[j].key; j = (j + 1) & (d->cap - 1)) {
        const struct seen *e = &d->tab[j];
        if (e->key != key || e->p != p || !same_form(e->c, c))
            continue;
        if (compared++ == MAX_COMPARED)
            return false;           /* many alike there: this one stays its own */
        if (!same_page(e->c, p, c, p))
            continue;
        struct kv_page *keep = e->c->pg[p];
        if (keep == c->pg[p])
            return false;
        atomic_fetch_add_explicit(&keep->refs, 1, memory_order_relaxed);
        kv_page_unref(c, c->pg[p]);
        c->pg[p] = keep;
        return true;
    }
    d->tab[j] = (struct seen){key, c, p};
    d->used++;
    return false;
}

size_t kv_dedup_add(struct kv_dedup *d, struct kv_cache *c)
{
    if (!d || c->gap)
        return 0;
    size_t shared = 0, whole = c->len / P;
    for (size_t p = 0; p < whole && p < c->np; p++) {
        if (c->pg[p]->cap != P)
            break;
        if ((d->used + 1) * 2 > d->cap && !grow(d))
            break;                  /* out of memory: the rest stay copies */
        shared += share_or_remember(d, c, p);
    }
    return shared;
}
