/*
 * tests/unit/test_kv_slab_concurrency.c — the slabs under the session
 * cache's full pages: placement (after the hint, the middle of a free
 * run, a new slab only when all are full), reuse and release, caches
 * whose pages lie side by side, many caches growing at once, forks freed in either order,
 * threads allocating and freeing at once (run under TSan by make tsan),
 * the bound on empty slabs kept, and 2 MiB slabs of pages that do not
 * divide 2 MiB on huge-page boundaries.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "core/kv_slab.h"
#include "tests/harness.h"

#define P KV_PAGE_ROWS

static struct kv_slab_stats stats(void)
{
    struct kv_slab_stats s;
    kv_slab_stats(&s);
    return s;
}

/* A geometry no other test uses: 64-byte parts, one head. */
static const struct kv_slab_geom tiny = {1, 64 * 3, 64 * 5, 0};

TEST(placement_follows_hint_then_splits_runs)
{
    struct kv_slab_stats s0 = stats();
    struct kv_slab_slot a, b, c, d;
    CHECK(kv_slab_get(&tiny, NULL, &a));
    size_t n = kv_slab_slots(a.slab);
    CHECK(n >= 4 && n <= KV_SLAB_MAX_SLOTS);
    CHECK(a.slot == 0);                     /* an empty slab: its start */
    CHECK(kv_slab_get(&tiny, &a, &b));
    CHECK(b.slab == a.slab && b.slot == 1); /* right after the hint */
    CHECK(kv_slab_get(&tiny, NULL, &c));    /* the middle of the run [2, n) */
    CHECK(c.slab == a.slab && c.slot == 2 + (n - 2) / 2);
    CHECK(kv_slab_get(&tiny, &c, &d));
    CHECK(d.slot == c.slot + 1);
    /* the parts: K of slot i at i·kb, V after every K part */
    CHECK(kv_slab_part(&b, 0) == kv_slab_part(&a, 0) + tiny.kb);
    CHECK(kv_slab_part(&a, 1) == kv_slab_part(&a, 0) + n * tiny.kb);
    CHECK(stats().used_bytes - s0.used_bytes == 4 * (tiny.kb + tiny.vb));
    kv_slab_put(&a);
    kv_slab_put(&b);
    kv_slab_put(&c);
    kv_slab_put(&d);
    CHECK(stats().used_bytes == s0.used_bytes);
}

TEST(new_slab_only_when_full_and_released_when_empty)
{
    struct kv_slab_stats s0 = stats();
    struct kv_slab_slot first;
    CHECK(kv_slab_get(&tiny, NULL, &first));
    size_t n = kv_slab_slots(first.slab), m = 3 * n + 1;
    struct kv_slab_slot *sl = calloc(m, sizeof *sl);
    sl[0] = first;
    for (size_t i = 1; i < m; i++)
        CHECK(kv_slab_get(&tiny, i % 3 ? &sl[i - 1] : NULL, &sl[i]));
    /* 3n + 1 slots: 4 slabs, however they were placed */
    size_t slabs = 0;
    for (size_t i = 0; i < m; i++) {
        size_t j = 0;
        while (j < i && sl[j].slab != sl[i].slab)
            j++;
        slabs += j == i;
    }
    CHECK(slabs == 4);
    struct kv_slab_stats peak = stats();
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < i; j++)
            if (sl[i].slab == sl[j].slab && sl[i].slot == sl[j].slot)
                CHECK(!"a slot given twice");
    /* freed: every slab but one empty one goes back */
    for (size_t i = 0; i < m; i++)
        kv_slab_put(&sl[m - 1 - i]);
    struct kv_slab_stats s1 = stats();
    CHECK(s1.used_bytes == s0.used_bytes);
    CHECK(s1.slabs == peak.slabs - 3 && s1.empty == peak.empty + 1);
    /* and is used again: a slot in it, no new slab */
    struct kv_slab_slot again;
    CHECK(kv_slab_get(&tiny, NULL, &again));
    CHECK(stats().slabs == s1.slabs);
    kv_slab_put(&again);
    free(sl);
}

/* The number fill stores at row r, head g, column i of K (V: its
 * negative): integers within ±127 with 127 in every row, so float16,
 * bfloat16 and int8 (scale 1) hold them exactly. */
static float val(size_t r, size_t g, size_t i)
{
    return i == 0 ? 127.0f : (float)((r * 7 + g * 3 + i) % 255) - 127.0f;
}

/* Rows up to `rows` appended, step at a time. false when one failed. */
static bool fill(struct kv_cache *c, size_t rows, size_t step)
{
    bool ok = true;
    size_t h = kv_heads(c), d = kv_d_k(c);
    float *k = malloc(h * step * d * sizeof *k), *v = malloc(h * step * d * sizeof *v);
    for (size_t r0 = kv_length(c); r0 < rows; r0 += step) {
        for (size_t g = 0; g < h; g++)
            for (size_t r = 0; r < step; r++)
                for (size_t i = 0; i < d; i++) {
                    k[(g * step + r) * d + i] = val(r0 + r, g, i);
                    v[(g * step + r) * d + i] = -val(r0 + r, g, i);
                }
        ok &= kv_append_prepared(c, k, v, step) == CORE_OK;
    }
    free(k);
    free(v);
    return ok;
}

/* Every row of every head reads back what fill wrote. */
static bool rows_ok(const struct kv_cache *c)
{
    size_t h = kv_heads(c), d = kv_d_k(c);
    float k[64], v[64];
    for (size_t r = 0; r < kv_length(c); r++)
        for (size_t g = 0; g < h; g++) {
            kv_read_rows(c, g, r, 1, k, v);
            for (size_t i = 0; i < d; i++)
                if (k[i] != val(r, g, i) || v[i] != -val(r, g, i))
                    return false;
        }
    return true;
}

/* Places where head g's rows jump from one page to a page not right
 * after it in memory. */
static size_t jumps(const struct kv_cache *c, size_t g)
{
    size_t n = 0, rb = kv_d_k(c) * kv_elem_bytes(c);
    struct kv_seg a, b;
    for (size_t r = P; r + P <= kv_length(c); r += P) {
        kv_seg(c, g, r - P, &a);
        kv_seg(c, g, r, &b);
        n += (const char *)b.k != (const char *)a.k + P * rb;
    }
    return n;
}

TEST(a_cache_grown_in_one_go_lies_side_by_side)
{
    struct kv_cache *c = kv_new(ATTN_F32, 2, 16, 16);
    CHECK(fill(c, 40 * P, 40 * P));
    CHECK(rows_ok(c));
    /* 40 pages of 8 KiB: 2 MiB slabs of 128 slots, at most one jump */
    CHECK(jumps(c, 0) <= 1 && jumps(c, 1) <= 1);
    kv_free(c);
}

TEST(many_caches_growing_row_by_row)
{
    enum { N = 24 };
    struct kv_slab_stats s0 = stats();
    struct kv_cache *c[N];
    for (int i = 0; i < N; i++)
        c[i] = kv_new_store(ATTN_F32, KV_STORE_F16, 1, 32, 32);
    /* decode-like: each appends a row in turn, 8 pages each */
    for (size_t r = 1; r <= 8 * P; r++)
        for (int i = 0; i < N; i++)
            CHECK(fill(c[i], r, 1));
    size_t j = 0;
    for (int i = 0; i < N; i++) {
        CHECK(rows_ok(c[i]));
        j += jumps(c[i], 0);
    }
    /* interleaved growth still leaves most page boundaries contiguous */
    CHECK(j < N * 7 / 2);
    for (int i = 0; i < N; i++)
        kv_free(c[i]);
    CHECK(stats().used_bytes == s0.used_bytes);
}

TEST(forks_freed_in_either_order)
{
    struct kv_slab_stats s0 = stats();
    for (int order = 0; order < 2; order++) {
        struct kv_acct acct = {0};
        struct kv_cache *base = kv_new_store(ATTN_F32, KV_STORE_I8, 2, 16, 16);
        CHECK(fill(base, 3 * P + 10, 7));
        kv_set_acct(base, &acct);
        struct kv_cache *f = kv_fork(base), *ff = kv_fork(f);
        CHECK(fill(f, 5 * P, 5));   /* the shared partial page is copied */
        CHECK(fill(ff, 4 * P + 3, 11));
        kv_truncate(base, P + 1);
        CHECK(rows_ok(f) && rows_ok(ff) && rows_ok(base));
        if (order == 0) {
            kv_free(base);
            kv_free(f);
        } else {
            kv_free(f);
            kv_free(base);
        }
        CHECK(rows_ok(ff));
        kv_free(ff);
        CHECK(acct.bytes == 0);
        CHECK(stats().used_bytes == s0.used_bytes);
    }
}

struct worker {
    const struct kv_cache *base;
    int id, bad;
};

static void *churn(void *arg)
{
    struct worker *w = arg;
    for (int it = 0; it < 12; it++) {
        struct kv_cache *f = kv_fork(w->base);
        w->bad += !f || !fill(f, kv_length(f) + (size_t)(it + w->id) % 3 * P + 5, 9);
        kv_truncate(f, P + (size_t)it);
        w->bad += !fill(f, 4 * P, 13) || !rows_ok(f);
        kv_free(f);
    }
    return NULL;
}

TEST(threads_fork_grow_and_free_at_once)
{
    struct kv_slab_stats s0 = stats();
    struct kv_cache *base = kv_new(ATTN_F32, 1, 16, 16);
    CHECK(fill(base, 2 * P + 20, 10));
    size_t own = stats().used_bytes;
    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){base, i, 0};
        pthread_create(&t[i], NULL, churn, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].bad == 0);
    }
    CHECK(rows_ok(base));
    CHECK(stats().used_bytes == own);
    kv_free(base);
    CHECK(stats().used_bytes == s0.used_bytes);
}

TEST(empty_slabs_kept_within_a_bound)
{
    /* 40 geometries of 1.5-2.2 MiB slabs, a page each, then all freed:
     * nothing is in use, so every slab left is a kept empty one */
    struct kv_slab_slot sl[40];
    for (size_t i = 0; i < 40; i++) {
        struct kv_slab_geom g = {1, 64 * (100 + i), 64 * (100 + i), 0};
        CHECK(kv_slab_get(&g, NULL, &sl[i]));
    }
    CHECK(stats().bytes > ((size_t)60 << 20));
    for (size_t i = 0; i < 40; i++)
        kv_slab_put(&sl[i]);
    struct kv_slab_stats s = stats();
    CHECK(s.used_bytes == 0);
    CHECK(s.bytes <= ((size_t)32 << 20) && s.slabs == s.empty);
}

/* An int8 d = 128 page (K and V of 64 rows, 256-byte scale parts) does
 * not divide 2 MiB: its slab of 124 pages is 2 KiB short of it, and must
 * still start on a 2 MiB boundary so that it can lie on a huge page (it
 * was 4 KiB aligned and never asked for one). */
TEST(slabs_of_pages_not_dividing_2mib_are_huge_aligned)
{
    static const struct kv_slab_geom i8 = {1, 64 * 128, 64 * 128, 64 * 4};
    struct kv_slab_slot a;
    CHECK(kv_slab_get(&i8, NULL, &a));
    size_t n = kv_slab_slots(a.slab);
    CHECK(n < KV_SLAB_MAX_SLOTS && n * (2 * 64 * 128 + 2 * 64 * 4) < ((size_t)2 << 20));
    CHECK(a.slot == 0);
    CHECK((uintptr_t)kv_slab_part(&a, 0) % ((size_t)2 << 20) == 0);
    kv_slab_put(&a);
}

int main(void)
{
    RUN(placement_follows_hint_then_splits_runs);
    RUN(new_slab_only_when_full_and_released_when_empty);
    RUN(a_cache_grown_in_one_go_lies_side_by_side);
    RUN(many_caches_growing_row_by_row);
    RUN(forks_freed_in_either_order);
    RUN(threads_fork_grow_and_free_at_once);
    RUN(empty_slabs_kept_within_a_bound);
    RUN(slabs_of_pages_not_dividing_2mib_are_huge_aligned);
    TEST_MAIN_END();
}
