/*
 * core/kv_slab.c — slabs of page slots for the session cache (kv_slab.h).
 *
 * Each geometry (struct kv_slab_geom) has a class: its slabs in a list with
 * the ones that have a free slot in front, full ones behind, a bitmap of
 * used slots per slab. Classes live for the process (a few per model).
 * One mutex guards every class and slab.
 */
#include "kv_slab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_BYTES ((size_t)2 << 20)
#define SMALL_ALIGN ((size_t)4096)
/* A slab aims at 32 pages, within [2 MiB, 32 MiB]. */
#define SLAB_PAGES 32
#define SLAB_MAX_BYTES ((size_t)32 << 20)
/* Empty slabs kept, at most one per geometry and this many bytes in all. */
#define KEEP_MAX_BYTES ((size_t)32 << 20)
/* Slabs with a free slot looked at for a new run. */
#define SCAN_SLABS 16

struct kv_slab_class;

struct kv_slab {
    struct kv_slab_class *cls;
    unsigned char *base;
    uint64_t used[KV_SLAB_MAX_SLOTS / 64];
    size_t nused;
    struct kv_slab *prev, *next;
};

struct kv_slab_class {
    struct kv_slab_geom g;
    size_t page, slots, bytes;      /* bytes of one page, slots and bytes per slab */
    size_t align;                   /* of a slab: 2 MiB, or 4 KiB for a small one */
    struct kv_slab *head, *tail;    /* slabs with a free slot first */
    size_t empty;                   /* empty slabs kept (at most 1) */
    struct kv_slab_class *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct kv_slab_class *classes;
static struct kv_slab_stats totals;
static size_t kept_bytes;           /* of the empty slabs kept */
static bool huge_on = true;

static bool is_used(const struct kv_slab *s, size_t i)
{
    return (s->used[i / 64] >> (i % 64)) & 1;
}

static void set_used(struct kv_slab *s, size_t i, bool on)
{
    uint64_t bit = (uint64_t)1 << (i % 64);
    s->used[i / 64] = on ? s->used[i / 64] | bit : s->used[i / 64] & ~bit;
}

/* Slots, bytes and alignment of a slab of pages of `page` bytes: about
 * SLAB_PAGES pages, at least 2 MiB and at most SLAB_MAX_BYTES (at least
 * one page), a whole number of 2 MiB (so it can lie on huge pages) unless
 * KV_SLAB_MAX_SLOTS small pages take less; false on overflow. */
static bool class_size(size_t page, size_t *slots, size_t *bytes, size_t *align)
{
    size_t want = page <= SLAB_MAX_BYTES / SLAB_PAGES ? page * SLAB_PAGES : SLAB_MAX_BYTES;
    if (want < HUGE_BYTES)
        want = HUGE_BYTES;
    size_t n = want / page;
    n = n == 0 ? 1 : n > KV_SLAB_MAX_SLOTS ? KV_SLAB_MAX_SLOTS : n;
    if (n * page > SIZE_MAX - HUGE_BYTES)
        return false;
    *slots = n;
    /* 2 MiB slabs whose page size does not divide 2 MiB hold a whole number
     * of pages just under it (int8 d = 128: 124 pages of 16,896 bytes, 2 KiB
     * short) and still lie on a huge page: only KV_SLAB_MAX_SLOTS small
     * pages make a small slab. (They did not: int8 caches read 4 KiB pages.) */
    *align = n == KV_SLAB_MAX_SLOTS && n * page < HUGE_BYTES ? SMALL_ALIGN : HUGE_BYTES;
    *bytes = (n * page + *align - 1) / *align * *align;
    return true;
}

/* The class of g, made if new; NULL on ENOMEM / overflow. Under mu. */
static struct kv_slab_class *class_of(const struct kv_slab_geom *g)
{
    for (struct kv_slab_class *c = classes; c; c = c->next)
        if (c->g.heads == g->heads && c->g.kb == g->kb && c->g.vb == g->vb && c->g.sb == g->sb)
            return c;
    size_t part, page;
    if (g->heads == 0 || g->sb > SIZE_MAX / 4 || g->kb > SIZE_MAX / 4 || g->vb > SIZE_MAX / 4)
        return NULL;
    part = g->kb + g->vb + 2 * g->sb;
    if (part == 0 || g->heads > SIZE_MAX / part)
        return NULL;
    page = part * g->heads;
    struct kv_slab_class *c = calloc(1, sizeof *c);
    if (!c || !class_size(page, &c->slots, &c->bytes, &c->align)) {
        free(c);
        return NULL;
    }
    c->g = *g;
    c->page = page;
    c->next = classes;
    classes = c;
    return c;
}

static void unlink_slab(struct kv_slab_class *c, struct kv_slab *s)
{
    *(s->prev ? &s->prev->next : &c->head) = s->next;
    *(s->next ? &s->next->prev : &c->tail) = s->prev;
    s->prev = s->next = NULL;
}

static void push_front(struct kv_slab_class *c, struct kv_slab *s)
{
    s->prev = NULL;
    s->next = c->head;
    *(c->head ? &c->head->prev : &c->tail) = s;
    c->head = s;
}

static void push_back(struct kv_slab_class *c, struct kv_slab *s)
{
    s->next = NULL;
    s->prev = c->tail;
    *(c->tail ? &c->tail->next : &c->head) = s;
    c->tail = s;
}

/* A new empty slab at the front of c's list; NULL on ENOMEM. */
static struct kv_slab *slab_new(struct kv_slab_class *c)
{
    struct kv_slab *s = calloc(1, sizeof *s);
    if (s)
        s->base = aligned_alloc(c->align, c->bytes);
    if (!s || !s->base) {
        free(s);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge_on && c->align == HUGE_BYTES)
        madvise(s->base, c->bytes, MADV_HUGEPAGE);      /* a refusal leaves 4 KiB pages */
#endif
    s->cls = c;
    push_front(c, s);
    c->empty++;
    totals.slabs++;
    totals.bytes += c->bytes;
    totals.empty++;
    kept_bytes += c->bytes;
    return s;
}

/* The longest run of free slots in s: its start (*at) and length. */
static size_t longest_run(const struct kv_slab *s, size_t *at)
{
    size_t best = 0, run = 0, n = s->cls->slots;
    for (size_t i = 0; i < n; i++) {
        run = is_used(s, i) ? 0 : run + 1;
        if (run > best) {
            best = run;
            *at = i + 1 - run;
        }
    }
    return best;
}

/* Where a page with no free slot after its hint goes: in the longest free
 * run of the first slabs with a free slot, its start if the run opens the
 * slab, else its middle (the slot after a used one is left to whoever
 * holds that one); a new slab when none has a free slot. */
static bool place(struct kv_slab_class *c, struct kv_slab **out, size_t *slot)
{
    size_t best = 0, at = 0;
    int seen = 0;
    for (struct kv_slab *s = c->head; s && s->nused < c->slots && seen < SCAN_SLABS;
         s = s->next, seen++) {
        size_t a = 0, len = longest_run(s, &a);
        if (len > best) {
            best = len;
            at = a;
            *out = s;
        }
    }
    if (best == 0) {
        if (!(*out = slab_new(c)))
            return false;
        best = c->slots;
        at = 0;
    }
    *slot = at == 0 ? 0 : at + best / 2;
    return true;
}

static void take(struct kv_slab *s, size_t i)
{
    struct kv_slab_class *c = s->cls;
    if (s->nused++ == 0) {
        c->empty--;
        totals.empty--;
        kept_bytes -= c->bytes;
    }
    set_used(s, i, true);
    totals.used_bytes += c->page;
    if (s->nused == c->slots) {         /* full ones go behind */
        unlink_slab(c, s);
        push_back(c, s);
    }
}

bool kv_slab_get(const struct kv_slab_geom *g, const struct kv_slab_slot *hint,
                 struct kv_slab_slot *out)
{
    pthread_mutex_lock(&mu);
    struct kv_slab_class *c = class_of(g);
    bool ok = c != NULL;
    if (ok && hint && hint->slab && hint->slab->cls == c && hint->slot + 1 < c->slots &&
        !is_used(hint->slab, hint->slot + 1)) {
        out->slab = hint->slab;
        out->slot = hint->slot + 1;
    } else if (ok) {
        ok = place(c, &out->slab, &out->slot);
    }
    if (ok)
        take(out->slab, out->slot);
    pthread_mutex_unlock(&mu);
    return ok;
}

void kv_slab_put(const struct kv_slab_slot *sl)
{
    struct kv_slab *s = sl->slab, *gone = NULL;
    pthread_mutex_lock(&mu);
    struct kv_slab_class *c = s->cls;
    if (s->nused == c->slots) {         /* it has a free slot again */
        unlink_slab(c, s);
        push_front(c, s);
    }
    set_used(s, sl->slot, false);
    totals.used_bytes -= c->page;
    if (--s->nused == 0) {
        if (c->empty == 0 && kept_bytes + c->bytes <= KEEP_MAX_BYTES) {
            c->empty++;
            totals.empty++;
            kept_bytes += c->bytes;
        } else {
            unlink_slab(c, s);
            totals.slabs--;
            totals.bytes -= c->bytes;
            gone = s;
        }
    }
    pthread_mutex_unlock(&mu);
    if (gone) {
        free(gone->base);
        free(gone);
    }
}

size_t kv_slab_slots(const struct kv_slab *s)
{
    return s->cls->slots;
}

unsigned char *kv_slab_part(const struct kv_slab_slot *sl, int kind)
{
    const struct kv_slab_class *c = sl->slab->cls;
    const struct kv_slab_geom *g = &c->g;
    size_t per[4] = {g->kb, g->vb, g->sb, g->sb}, off = 0;
    for (int k = 0; k < kind; k++)
        off += g->heads * c->slots * per[k];
    return sl->slab->base + off + sl->slot * per[kind];
}

void kv_slab_stats(struct kv_slab_stats *out)
{
    pthread_mutex_lock(&mu);
    *out = totals;
    pthread_mutex_unlock(&mu);
}

void kv_slab_set_hugepages(bool on)
{
    pthread_mutex_lock(&mu);
    huge_on = on;
    pthread_mutex_unlock(&mu);
}
