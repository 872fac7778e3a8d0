/*
 * core/kv.c — one session's key/value cache (see kv.h): its pages, their
 * growth, sharing and release, and the writing of rows; core/kv_read.c
 * reads them and runs the passes over them (core/kv_impl.h: the structs).
 *
 * The cache is a table of pages; page p holds rows [p·P, p·P + P) of every
 * head (P = KV_PAGE_ROWS): K of each head [cap][d_k], V of each head
 * [cap][d_v] and for int8 the K and V row scales [cap] of each head, cap
 * being the rows the page has room for (P except for a growing last page).
 * A full page's parts are a slot of a slab (core/kv_slab.c: one head's K
 * parts of neighbouring slots are contiguous, so a cache whose pages took
 * neighbouring slots streams as one block); a smaller page is one
 * allocation after its header, K [h_kv][cap][d_k], V, then the scales.
 * The header's bases and head stride say where each head's part is. The
 * table always covers the rows stored; pages past them are room already
 * reserved, never shared.
 *
 * A page is written only by a cache that alone holds it (refs == 1, read
 * under the cache's own lock: another cache can only gain a reference by
 * forking this one). New rows are written past `len` first and only counted
 * once they are complete and finite: that is the whole all-or-nothing
 * mechanism. Rows are prepared (bias, RoPE) into scratch in the compute
 * dtype and then stored, narrowed for float16, bfloat16 and int8.
 */
#include "kv_impl.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_slab.h"

const char *kv_store_name(enum kv_store st, enum attn_dtype dtype)
{
    switch (st) {
    case KV_STORE_F16: return "float16";
    case KV_STORE_BF16: return "bfloat16";
    case KV_STORE_I8: return "int8";
    default: return attn_dtype_name(dtype);
    }
}

/* Bytes of one element as store keeps a dtype's values. */
static size_t elem_bytes(enum attn_dtype dtype, enum kv_store store)
{
    return store == KV_STORE_SAME ? attn_dtype_size(dtype) : store == KV_STORE_I8 ? 1 : 2;
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
    c->esz = elem_bytes(dtype, store);
    c->h_kv = h_kv;
    c->d_k = d_k;
    c->d_v = d_v;
    return c;
}

struct kv_cache *kv_new(enum attn_dtype dtype, size_t h_kv, size_t d_k,
                        size_t d_v)
{
    return kv_new_store(dtype, KV_STORE_SAME, h_kv, d_k, d_v);
}

enum attn_dtype kv_dtype(const struct kv_cache *c) { return c->dtype; }
enum kv_store kv_store(const struct kv_cache *c) { return c->store; }
size_t kv_heads(const struct kv_cache *c) { return c->h_kv; }
size_t kv_d_k(const struct kv_cache *c) { return c->d_k; }
size_t kv_d_v(const struct kv_cache *c) { return c->d_v; }
size_t kv_length(const struct kv_cache *c) { return c->len; }
size_t kv_elem_bytes(const struct kv_cache *c) { return c->esz; }

/* Bytes of `rows` rows over h_kv heads, esz bytes an element stored as
 * store; false on overflow. */
static bool rows_bytes_as(size_t esz, enum kv_store store, size_t h_kv, size_t d_k,
                          size_t d_v, size_t rows, size_t *out)
{
    size_t w, b;
    if (!core_add(d_k, d_v, &w) || !core_mul(w, esz, &b) ||
        (store == KV_STORE_I8 && !core_add(b, 2 * sizeof(float), &b)))
        return false;
    return core_mul3(rows, b, h_kv, out);
}

/* Bytes of `rows` rows over all heads; false on overflow. */
static bool rows_bytes(const struct kv_cache *c, size_t rows, size_t *out)
{
    return rows_bytes_as(c->esz, c->store, c->h_kv, c->d_k, c->d_v, rows, out);
}

bool kv_rows_bytes_for(enum attn_dtype dtype, enum kv_store store, size_t h_kv, size_t d_k,
                       size_t d_v, size_t rows, size_t *out)
{
    return rows_bytes_as(elem_bytes(dtype, store), store, h_kv, d_k, d_v, rows, out);
}

size_t kv_row_bytes(const struct kv_cache *c)
{
    size_t b = 0;
    rows_bytes(c, 1, &b);   /* cannot overflow: kv_new's sizes are small */
    return b;
}

/* ---- pages ----------------------------------------------------------------- */

static void acct_add(struct kv_acct *a, size_t b)
{
    if (a)
        atomic_fetch_add_explicit(&a->bytes, b, memory_order_relaxed);
}

static void acct_sub(struct kv_acct *a, size_t b)
{
    if (a)
        atomic_fetch_sub_explicit(&a->bytes, b, memory_order_relaxed);
}

/* A full page's slot in a slab, after the one of prev (the page before it
 * in row order, or NULL) if that is free; false on ENOMEM. */
static bool page_slot(const struct kv_cache *c, struct kv_page *pg, const struct kv_page *prev)
{
    struct kv_slab_geom g = {c->h_kv, P * c->d_k * c->esz, P * c->d_v * c->esz,
                             c->store == KV_STORE_I8 ? P * sizeof(float) : 0};
    if (!kv_slab_get(&g, prev ? &prev->at : NULL, &pg->at))
        return false;
    pg->hs = P * kv_slab_slots(pg->at.slab);
    pg->k = kv_slab_part(&pg->at, 0);
    pg->v = kv_slab_part(&pg->at, 1);
    pg->ks = g.sb ? (float *)(void *)kv_slab_part(&pg->at, 2) : NULL;
    pg->vs = g.sb ? (float *)(void *)kv_slab_part(&pg->at, 3) : NULL;
    return true;
}

/* A private page of cap rows (0 < cap <= P), accounted; NULL on ENOMEM.
 * A full one lives in a slab (next to prev when it can), a smaller one
 * (or a full one when no slab can be had) in one allocation after its
 * header. */
static struct kv_page *page_new(struct kv_cache *c, size_t cap, const struct kv_page *prev)
{
    struct kv_page *pg = NULL;
    if (cap == P && (pg = malloc(sizeof *pg)) && !page_slot(c, pg, prev)) {
        free(pg);
        pg = NULL;
    }
    if (!pg) {
        size_t data = scale_off(c, cap) + (c->store == KV_STORE_I8 ? 2 * c->h_kv * cap * 4 : 0);
        if (!(pg = aligned_alloc(64, (PAGE_HEAD + data + 63) & ~(size_t)63)))
            return NULL;
        pg->at.slab = NULL;
        pg->hs = cap;
        pg->k = (unsigned char *)pg + PAGE_HEAD;
        pg->v = pg->k + c->h_kv * c->d_k * cap * c->esz;
        pg->ks = c->store == KV_STORE_I8 ? (float *)(void *)(pg->k + scale_off(c, cap)) : NULL;
        pg->vs = pg->ks ? pg->ks + c->h_kv * cap : NULL;
    }
    atomic_init(&pg->refs, 1);
    pg->cap = cap;
    acct_add(c->acct, page_bytes(c, cap));
    return pg;
}

/* Drop one reference; the last one frees the page. */
void kv_page_unref(struct kv_cache *c, struct kv_page *pg)
{
    if (atomic_fetch_sub_explicit(&pg->refs, 1, memory_order_acq_rel) == 1) {
        acct_sub(c->acct, page_bytes(c, pg->cap));
        if (pg->at.slab)
            kv_slab_put(&pg->at);
        free(pg);
    }
}

static bool page_shared(const struct kv_page *pg)
{
    return atomic_load_explicit(&pg->refs, memory_order_acquire) > 1;
}

/* Rows [0, n) of every head from page src to page dst (n <= both caps). */
static void page_copy(const struct kv_cache *c, struct kv_page *dst,
                      const struct kv_page *src, size_t n)
{
    for (size_t g = 0; g < c->h_kv; g++) {
        memcpy(pk(c, dst, g), pk(c, src, g), n * c->d_k * c->esz);
        memcpy(pv(c, dst, g), pv(c, src, g), n * c->d_v * c->esz);
        if (c->store == KV_STORE_I8) {
            memcpy(pks(c, dst, g), pks(c, src, g), n * sizeof(float));
            memcpy(pvs(c, dst, g), pvs(c, src, g), n * sizeof(float));
        }
    }
}

void kv_free(struct kv_cache *c)
{
    if (!c)
        return;
    for (size_t p = 0; p < c->np; p++)
        kv_page_unref(c, c->pg[p]);
    free(c->pg);
    free(c);
}

size_t kv_capacity(const struct kv_cache *c)
{
    return c->np ? (c->np + c->gap - 1) * P + c->pg[c->np - 1]->cap : 0;
}

size_t kv_bytes(const struct kv_cache *c)
{
    size_t b = 0;
    for (size_t p = 0; p < c->np; p++)
        b += page_bytes(c, c->pg[p]->cap);
    return b;
}

void kv_bytes_split(const struct kv_cache *c, size_t *own, size_t *shared)
{
    size_t o = 0, s = 0;
    for (size_t p = 0; p < c->np; p++) {
        size_t b = page_bytes(c, c->pg[p]->cap);
        if (page_shared(c->pg[p]))
            s += b;
        else
            o += b;
    }
    if (own)
        *own = o;
    if (shared)
        *shared = s;
}

void kv_set_acct(struct kv_cache *c, struct kv_acct *acct)
{
    acct_sub(c->acct, kv_bytes(c));
    c->acct = acct;
    acct_add(acct, kv_bytes(c));
}

struct kv_acct *kv_get_acct(const struct kv_cache *c)
{
    return c->acct;
}

/* ---- growth ------------------------------------------------------------------ */

/* Rows of room for page p when it must hold `rows` rows: P for every page
 * but the last; the last grows by 1/10 (the first page) or doubles from 16
 * (later ones), or holds exactly its rows. */
static size_t page_target(size_t p, bool last, size_t rows, bool exact)
{
    if (!last)
        return P;
    size_t t = rows;
    if (!exact && p == 0)
        t = rows + rows / 10;
    else if (!exact)
        for (t = 16; t < rows; t *= 2)
            ;
    return t < P ? t : P;
}

/* Walk of what reserving room for `length` rows does, page by page: for
 * each page p in [first, pages) the cap it needs (*cap) and what becomes of
 * it. Shared by kv_plan (counting) and kv_reserve (doing). */
enum page_act { PAGE_KEEP, PAGE_NEW, PAGE_COPY };

static enum page_act page_plan(const struct kv_cache *c, size_t p, size_t length, bool exact,
                               size_t *cap)
{
    size_t pages = (length + P - 1) / P;
    size_t rows = length - p * P < P ? length - p * P : P;
    *cap = page_target(p, p + 1 == pages, rows, exact);
    if (p >= c->np + c->gap)
        return PAGE_NEW;
    const struct kv_page *pg = c->pg[slot(c, p)];
    /* rows past len land in it (p >= len / P): a shared page is copied */
    if (page_shared(pg))
        return PAGE_COPY;
    if (*cap < pg->cap)
        *cap = pg->cap;
    return pg->cap >= rows ? PAGE_KEEP : PAGE_COPY;
}

enum core_status kv_plan(const struct kv_cache *c, size_t length, size_t *geom,
                         size_t *exact)
{
    size_t out[2] = {0, 0}, rb, all;
    if (!rows_bytes(c, 1, &rb) || length > SIZE_MAX - P || !rows_bytes(c, length + P, &all))
        return CORE_ELIMIT;
    for (int e = 0; e < 2; e++) {
        size_t pages = (length + P - 1) / P, add = 0;
        for (size_t p = c->len / P; p < pages; p++) {
            size_t cap, b;
            enum page_act a = page_plan(c, p, length, e == 1, &cap);
            if (a == PAGE_KEEP)
                continue;
            /* a private page that grows counts its growth; a copy or a new
             * page counts whole */
            const struct kv_page *pg = a == PAGE_COPY ? c->pg[slot(c, p)] : NULL;
            size_t old = pg && !page_shared(pg) ? pg->cap : 0;
            if (!core_mul(cap - old, rb, &b) || !core_add(add, b, &add))
                return CORE_ELIMIT;
        }
        out[e] = add;
    }
    if (geom)
        *geom = out[0];
    if (exact)
        *exact = out[1];
    return CORE_OK;
}

/* The page before page p once kv_reserve's fresh pages (from page first
 * on) are in: where p's storage best goes next to. NULL for page 0 and
 * after the rows let go. */
static const struct kv_page *page_before(const struct kv_cache *c, size_t p, size_t first,
                                         struct kv_page *const *fresh)
{
    if (p == 0 || (c->gap && p - 1 >= c->sp && p - 1 < c->sp + c->gap))
        return NULL;
    if (p - 1 >= first && fresh[p - 1 - first])
        return fresh[p - 1 - first];
    return p - 1 < c->np + c->gap ? c->pg[slot(c, p - 1)] : NULL;
}

enum core_status kv_reserve(struct kv_cache *c, size_t length, bool exact)
{
    if (length <= c->len)
        return CORE_OK;
    size_t rb, first = c->len / P;
    if (length > SIZE_MAX - P || !rows_bytes(c, length + P, &rb))
        return CORE_ELIMIT;
    size_t pages = (length + P - 1) / P, slots = pages - c->gap;
    if (slots > c->tab) {
        struct kv_page **t = realloc(c->pg, slots * sizeof *t);
        if (!t)
            return CORE_ENOMEM;
        c->pg = t;
        c->tab = slots;
    }
    /* every new page first, so a failure changes nothing */
    size_t n = pages - first;
    struct kv_page **fresh = calloc(n ? n : 1, sizeof *fresh);
    if (!fresh)
        return CORE_ENOMEM;
    for (size_t p = first; p < pages; p++) {
        size_t cap;
        if (page_plan(c, p, length, exact, &cap) == PAGE_KEEP)
            continue;
        if (!(fresh[p - first] = page_new(c, cap, page_before(c, p, first, fresh)))) {
            for (size_t u = 0; u < n; u++)
                if (fresh[u])
                    kv_page_unref(c, fresh[u]);
            free(fresh);
            return CORE_ENOMEM;
        }
    }
    for (size_t p = first; p < pages; p++) {
        struct kv_page *f = fresh[p - first];
        if (!f)
            continue;
        if (p < c->np + c->gap) {
            size_t rows = c->len > p * P ? c->len - p * P : 0;
            page_copy(c, f, c->pg[slot(c, p)], rows < P ? rows : P);
            kv_page_unref(c, c->pg[slot(c, p)]);
        }
        c->pg[slot(c, p)] = f;
    }
    if (slots > c->np)
        c->np = slots;
    free(fresh);
    return CORE_OK;
}

/* Make room for len + m rows by the growth policy. */
static enum core_status room_for(struct kv_cache *c, size_t m)
{
    size_t need;
    if (!core_add(c->len, m, &need))
        return CORE_ELIMIT;
    return kv_reserve(c, need, false);
}

/* The private last page, holding `rows` rows, down to room for cap rows
 * when it has more (a failed shrink keeps it as it is). */
static void shrink_last(struct kv_cache *c, size_t rows, size_t cap)
{
    struct kv_page *last = c->pg[c->np - 1];
    if (last->cap <= cap || page_shared(last))
        return;
    struct kv_page *s = page_new(c, cap, NULL);
    if (!s)
        return;
    page_copy(c, s, last, rows);
    kv_page_unref(c, last);
    c->pg[c->np - 1] = s;
}

void kv_truncate(struct kv_cache *c, size_t length)
{
    if (length >= c->len || (c->gap && length > c->sp * P && length < kv_held_from(c)))
        return;
    if (c->gap && length <= c->sp * P) {     /* back into the kept pages */
        while (c->np > c->sp)
            kv_page_unref(c, c->pg[--c->np]);
        c->len = c->sp * P;
        c->sp = c->gap = 0;
    }
    c->len = length;
    size_t pages = (length + P - 1) / P;
    while (c->np + c->gap > pages)
        kv_page_unref(c, c->pg[--c->np]);
    if (pages == 0 || (c->gap && pages <= c->sp + c->gap))
        return;
    /* a private last page keeps its policy's room */
    size_t rows = length - (pages - 1) * P;
    shrink_last(c, rows, page_target(pages - 1, true, rows, false));
}

size_t kv_held_from(const struct kv_cache *c)
{
    return c->gap ? (c->sp + c->gap) * P : 0;
}

size_t kv_held_front(const struct kv_cache *c)
{
    return c->gap ? c->sp * P : c->len;
}

size_t kv_held(const struct kv_cache *c)
{
    return c->len - c->gap * P;
}

/* Let go of the slots [a, b) (pages a + gap .. b + gap - 1 of rows). */
static void drop_slots(struct kv_cache *c, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++)
        kv_page_unref(c, c->pg[i]);
    memmove(c->pg + a, c->pg + b, (c->np - b) * sizeof *c->pg);
    c->np -= b - a;
}

void kv_roll(struct kv_cache *c, size_t keep, size_t from)
{
    size_t lo = c->gap ? c->sp + c->gap : (keep + P - 1) / P;
    size_t hi = (from < c->len ? from : c->len) / P;
    if (lo >= hi || (c->gap && (keep + P - 1) / P != c->sp))
        return;
    if (!c->gap)
        c->sp = lo;
    drop_slots(c, lo - c->gap, hi - c->gap);
    c->gap += hi - lo;
}

enum core_status kv_skip(struct kv_cache *c, size_t first)
{
    if (c->gap || c->len % P || first % P || first <= c->len ||
        kv_capacity(c) != c->len)
        return CORE_EINVAL;
    c->sp = c->len / P;
    c->gap = (first - c->len) / P;
    c->len = first;
    return CORE_OK;
}

enum core_status kv_fill_open(struct kv_cache *c, size_t front, size_t first, size_t length)
{
    if (c->len || c->np || (first && (front % P || first % P || front >= first ||
                                      first > length)) || (!first && front != length))
        return CORE_EINVAL;
    if (!first)
        return kv_reserve(c, length, true);
    enum core_status rc = kv_reserve(c, front, true);
    if (rc != CORE_OK)
        return rc;
    c->len = front;                 /* kv_skip's rule: whole pages, nothing past */
    rc = kv_skip(c, first);
    return rc == CORE_OK ? kv_reserve(c, length, true) : rc;
}

size_t kv_fill_at(struct kv_cache *c, int part, size_t g, size_t row, void **at)
{
    const struct kv_page *pg = c->pg[slot(c, row / P)];
    size_t off = row % P;
    *at = part_at(c, pg, part, g, off);
    return pg->cap - off;
}

void kv_fill_close(struct kv_cache *c, size_t length)
{
    c->len = length;
}

void kv_mark(struct kv_cache *c, struct kv_mark *m)
{
    m->len = c->len;
    m->idx = slot(c, c->len / P);
    m->page = NULL;
    m->cap = m->idx < c->np ? c->pg[m->idx]->cap : 0;
    /* only a shared, partly filled last page is copied by an append */
    if (c->len % P && m->idx < c->np && page_shared(c->pg[m->idx])) {
        m->page = c->pg[m->idx];
        atomic_fetch_add_explicit(&m->page->refs, 1, memory_order_relaxed);
    }
}

void kv_unmark(struct kv_cache *c, struct kv_mark *m)
{
    if (m->page)
        kv_page_unref(c, m->page);
    m->page = NULL;
}

void kv_rollback(struct kv_cache *c, struct kv_mark *m)
{
    if (m->page && m->idx < c->np && c->pg[m->idx] != m->page) {
        kv_page_unref(c, c->pg[m->idx]);       /* the copy goes, the original comes back */
        c->pg[m->idx] = m->page;
        m->page = NULL;
    }
    kv_unmark(c, m);
    kv_truncate(c, m->len);
    /* a private last page the append grew goes back to its room (a tight
     * one, or one read back exactly, has less than the policy's) */
    if (m->len % P && m->idx + 1 == c->np)
        shrink_last(c, m->len % P, m->cap);
}

struct kv_cache *kv_fork(const struct kv_cache *c)
{
    struct kv_cache *f = kv_new_store(c->dtype, c->store, c->h_kv, c->d_k, c->d_v);
    if (!f)
        return NULL;
    size_t pages = (c->len + P - 1) / P - c->gap;     /* slots holding rows */
    if (pages) {
        f->pg = malloc(pages * sizeof *f->pg);
        if (!f->pg) {
            kv_free(f);
            return NULL;
        }
    }
    for (size_t p = 0; p < pages; p++) {
        atomic_fetch_add_explicit(&c->pg[p]->refs, 1, memory_order_relaxed);
        f->pg[p] = c->pg[p];
    }
    f->np = f->tab = pages;
    f->sp = c->sp;
    f->gap = c->gap;
    f->len = c->len;
    f->acct = c->acct;
    return f;
}

/* ---- writing rows -------------------------------------------------------------- */

/* Elements tested between two looks at the result in all_finite. */
#define KV_FINITE_BLOCK 256

/* True when every one of count elements at p is finite: an exponent-bit
 * test OR-ed over fixed blocks with no exit inside a block, which gcc
 * vectorises at -O2 (an isfinite loop returning at the first bad element
 * stays scalar, and was a quarter of an import's CPU time). */
static bool all_finite(enum attn_dtype t, const void *p, size_t count)
{
    size_t i = 0;
    unsigned bad = 0;
    if (t == ATTN_F32) {
        const uint32_t *u = p;
        for (; i + KV_FINITE_BLOCK <= count && !bad; i += KV_FINITE_BLOCK)
            for (size_t j = 0; j < KV_FINITE_BLOCK; j++)
                bad |= (u[i + j] & 0x7f800000u) == 0x7f800000u;
        for (; i < count; i++)
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    } else {
        const uint64_t *u = p;
        const uint64_t e = 0x7ff0000000000000u;
        for (; i + KV_FINITE_BLOCK <= count && !bad; i += KV_FINITE_BLOCK)
            for (size_t j = 0; j < KV_FINITE_BLOCK; j++)
                bad |= (u[i + j] & e) == e;
        for (; i < count; i++)
            bad |= (u[i] & e) == e;
    }
    return !bad;
}

/* int8 of x [d] with scale max|x|/127 (0 for a zero row): q = x/scale
 * rounded to nearest (ties to even), within -127..127. A row so small
 * that max|x|/127 is subnormal (max|x| under about 1.5e-36) gets the
 * least scale from there up that keeps max|x|/scale within 127: a
 * subnormal quotient is coarse and may fall below max|x|/127, which
 * clamped values at 127 (7% off at 9.6e-43), or underflow to 0 (under
 * about 9e-44), which stored the row as zeros. */
static float quantize_row(const float *x, size_t d, int8_t *q)
{
    float amax = 0, scale;
    for (size_t i = 0; i < d; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    scale = amax / 127.0f;
    if (amax > 0 && scale < FLT_MIN) {
        if (scale == 0)
            scale = FLT_TRUE_MIN;
        while (amax / scale > 127.0f)
            scale = nextafterf(scale, INFINITY);
    }
    for (size_t i = 0; i < d; i++) {
        float t = scale > 0 ? nearbyintf(x[i] / scale) : 0.0f;
        q[i] = (int8_t)(t > 127 ? 127 : t < -127 ? -127 : t);
    }
    return scale;
}

/* n rows x [n][d] of the compute dtype into stored rows dst (scales sc for
 * int8). false when a value overflows the storage form. */
static bool put_rows(const struct kv_cache *c, const void *x, size_t n, size_t d, void *dst,
                     float *sc)
{
    size_t e = n * d;
    switch (c->store) {
    case KV_STORE_SAME: memcpy(dst, x, e * c->esz); return true;
    case KV_STORE_F16: return half_f32_to_f16_n(x, dst, e) == e;
    case KV_STORE_BF16: return half_f32_to_bf16_n(x, dst, e) == e;
    default:
        for (size_t r = 0; r < n; r++)
            sc[r] = quantize_row((const float *)x + r * d, d, (int8_t *)dst + r * d);
        return true;
    }
}

/*
 * Rows len..len+m-1 (room reserved) from k [h_kv][m][d_k], v [h_kv][m][d_v]:
 * stored = true: already in the storage form (ks, vs [h_kv][m] for int8),
 * copied; otherwise prepared rows of the compute dtype, narrowed. Page by
 * page; the length does not move. false when a value overflows.
 */
static bool write_rows(struct kv_cache *c, const void *k, const void *v, const float *ks,
                       const float *vs, size_t m, bool stored)
{
    size_t es = stored ? c->esz : attn_dtype_size(c->dtype);
    for (size_t r = 0; r < m;) {
        size_t row = c->len + r, off = row % P, n = P - off < m - r ? P - off : m - r;
        struct kv_page *pg = c->pg[slot(c, row / P)];
        for (size_t g = 0; g < c->h_kv; g++) {
            const char *kx = (const char *)k + (g * m + r) * c->d_k * es;
            const char *vx = (const char *)v + (g * m + r) * c->d_v * es;
            char *kd = (char *)pk(c, pg, g) + off * c->d_k * c->esz;
            char *vd = (char *)pv(c, pg, g) + off * c->d_v * c->esz;
            float *ksd = c->store == KV_STORE_I8 ? pks(c, pg, g) + off : NULL;
            float *vsd = c->store == KV_STORE_I8 ? pvs(c, pg, g) + off : NULL;
            if (stored) {
                memcpy(kd, kx, n * c->d_k * c->esz);
                memcpy(vd, vx, n * c->d_v * c->esz);
                if (ksd) {
                    memcpy(ksd, ks + g * m + r, n * sizeof(float));
                    memcpy(vsd, vs + g * m + r, n * sizeof(float));
                }
            } else if (!put_rows(c, kx, n, c->d_k, kd, ksd) ||
                       !put_rows(c, vx, n, c->d_v, vd, vsd)) {
                return false;
            }
        }
        r += n;
    }
    return true;
}

/* Element counts of m rows over all heads; false on overflow. */
static bool counts(const struct kv_cache *c, size_t m, size_t *kn, size_t *vn)
{
    return core_mul3(m, c->d_k, c->h_kv, kn) && core_mul3(m, c->d_v, c->h_kv, vn) &&
           *vn <= SIZE_MAX / 8 && *kn <= SIZE_MAX / 8 - *vn;
}

/* True when the n compute-dtype numbers at x narrow to the storage form
 * without overflow (float16 / bfloat16; the others always do). */
static bool fits_store(const struct kv_cache *c, const void *x, size_t n)
{
    uint16_t tmp[256];
    const float *f = x;
    if (c->store != KV_STORE_F16 && c->store != KV_STORE_BF16)
        return true;
    for (size_t i = 0, b; i < n; i += b) {
        b = n - i < 256 ? n - i : 256;
        if ((c->store == KV_STORE_F16 ? half_f32_to_f16_n(f + i, tmp, b)
                                      : half_f32_to_bf16_n(f + i, tmp, b)) != b)
            return false;
    }
    return true;
}

/* Prepared rows k, v (finite-checked) stored past len; the length moves.
 * Whether they fit the storage form is checked before any room is made,
 * so a refused append allocates and copies no page. */
static enum core_status store_prepared(struct kv_cache *c, const void *k, const void *v,
                                       size_t m, bool exact)
{
    size_t kn, vn, need;
    if (!counts(c, m, &kn, &vn) || !core_add(c->len, m, &need))
        return CORE_ELIMIT;
    if (!fits_store(c, k, kn) || !fits_store(c, v, vn))
        return CORE_ENONFINITE;
    enum core_status st = kv_reserve(c, need, exact);
    if (st != CORE_OK)
        return st;
    if (!write_rows(c, k, v, NULL, NULL, m, false))
        return CORE_ENONFINITE;
    c->len += m;
    return CORE_OK;
}

enum core_status kv_append(struct kv_cache *c, const struct attn_params *p,
                           const struct attn_inputs *in, size_t m)
{
    return kv_append_ex(c, p, in, m, false);
}

enum core_status kv_append_ex(struct kv_cache *c, const struct attn_params *p,
                              const struct attn_inputs *in, size_t m, bool exact)
{
    if (m == 0 || !p || !in || !in->k || !in->v || p->dtype != c->dtype)
        return CORE_EINVAL;
    size_t kn, vn, es = attn_dtype_size(c->dtype);
    if (c->len > (size_t)INT64_MAX || !counts(c, m, &kn, &vn))
        return CORE_ELIMIT;
    char *buf = malloc((kn + vn) * es);
    void **ptr = malloc(2 * c->h_kv * sizeof *ptr);
    enum core_status st = CORE_ENOMEM;
    if (buf && ptr) {
        for (size_t g = 0; g < c->h_kv; g++) {
            ptr[g] = buf + g * m * c->d_k * es;
            ptr[c->h_kv + g] = buf + (kn + g * m * c->d_v) * es;
        }
        struct attn_shape s = {.h = c->h_kv, .h_kv = c->h_kv, .n = m, .L = m,
                               .d_k = c->d_k, .d_v = c->d_v};
        attn_prepare_kv(&s, p, in, m, (int64_t)c->len, ptr, ptr + c->h_kv);
        st = all_finite(c->dtype, buf, kn + vn)
                 ? store_prepared(c, buf, buf + kn * es, m, exact)
                 : CORE_ENONFINITE;
    }
    free(buf);
    free(ptr);
    return st;
}

enum core_status kv_append_prepared(struct kv_cache *c, const void *k,
                                    const void *v, size_t m)
{
    size_t kn, vn;
    if (m == 0 || !k || !v)
        return CORE_EINVAL;
    if (!counts(c, m, &kn, &vn))
        return CORE_ELIMIT;
    if (!all_finite(c->dtype, k, kn) || !all_finite(c->dtype, v, vn))
        return CORE_ENONFINITE;
    return store_prepared(c, k, v, m, false);
}

/* n stored elements at p are finite (int8 always are). */
static bool stored_finite(const struct kv_cache *c, const void *p, size_t n)
{
    switch (c->store) {
    case KV_STORE_SAME: return all_finite(c->dtype, p, n);
    case KV_STORE_F16: return half_first_nonfinite(p, n, true, false) == n;
    case KV_STORE_BF16: return half_first_nonfinite(p, n, false, false) == n;
    default: return true;
    }
}

bool kv_stored_finite(const struct kv_cache *c, int part, const void *p, size_t n)
{
    if (part < 2)
        return stored_finite(c, p, n);
    const float *f = p;
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= !isfinite(f[i]) || f[i] < 0;
    return !bad;
}

enum core_status kv_append_stored(struct kv_cache *c, const void *k, const void *v,
                                  const float *ks, const float *vs, size_t m)
{
    size_t kn, vn;
    bool i8 = c->store == KV_STORE_I8;
    if (m == 0 || !k || !v || (i8 && (!ks || !vs)))
        return CORE_EINVAL;
    if (!counts(c, m, &kn, &vn) || m > SIZE_MAX / c->h_kv)
        return CORE_ELIMIT;
    if (!stored_finite(c, k, kn) || !stored_finite(c, v, vn))
        return CORE_ENONFINITE;
    if (i8 && (!kv_stored_finite(c, 2, ks, m * c->h_kv) ||
               !kv_stored_finite(c, 3, vs, m * c->h_kv)))
        return CORE_ENONFINITE;
    enum core_status st = room_for(c, m);
    if (st != CORE_OK)
        return st;
    write_rows(c, k, v, ks, vs, m, true);
    c->len += m;
    return CORE_OK;
}
