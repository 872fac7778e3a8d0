/*
 * tests/unit/test_kv_dedup.c — core/kv_dedup.c: caches rebuilt row by row
 * (as a restore from a snapshot rebuilds forks) share their whole pages of
 * the same bytes again, and only those: a page that differs in one value
 * of any head, a partly filled last page, a cache of another form (dtype,
 * storage, heads, width) or a rolled cache keeps its own; int8 pages
 * compare their scales too. After sharing, the rows read back as before,
 * the shared byte count drops by the pages given up, and writing into a
 * shared page (truncate, then append) copies it, leaving the other cache
 * as it was.
 */
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "tests/harness.h"

#define ROWS 200    /* three whole pages of 64 and a partly filled one */

/* [h_kv][rows][d] float32 values made from seed (finite, exact). */
static float *values(size_t h_kv, size_t rows, size_t d, unsigned seed)
{
    float *v = malloc(h_kv * rows * d * sizeof *v);
    for (size_t i = 0; i < h_kv * rows * d; i++)
        v[i] = (float)((seed * 7919u + i * 104729u) % 2048) / 256.0f - 4;
    return v;
}

/* A cache of the given form holding rows made from seed; k[at] changed to
 * 99 when at < h_kv * ROWS * d_k. */
static struct kv_cache *cache_of(enum kv_store store, size_t h_kv, size_t d,
                                 unsigned seed, size_t at, struct kv_acct *acct)
{
    struct kv_cache *c = kv_new_store(ATTN_F32, store, h_kv, d, d);
    float *k = values(h_kv, ROWS, d, seed), *v = values(h_kv, ROWS, d, seed + 1);
    if (at < h_kv * ROWS * d)
        k[at] = 99;
    kv_set_acct(c, acct);
    CHECK(kv_append_prepared(c, k, v, ROWS) == CORE_OK);
    free(k);
    free(v);
    return c;
}

/* Every stored row of every head of a and b compare equal. */
static bool same_rows(const struct kv_cache *a, const struct kv_cache *b)
{
    size_t n = kv_length(a) * kv_d_k(a) * kv_elem_bytes(a) + 4;
    unsigned char *x = malloc(n), *y = malloc(n);
    bool same = kv_length(a) == kv_length(b);
    for (size_t g = 0; same && g < kv_heads(a); g++) {
        kv_read_stored(a, g, 0, kv_length(a), x, NULL, NULL, NULL);
        kv_read_stored(b, g, 0, kv_length(b), y, NULL, NULL, NULL);
        same = memcmp(x, y, kv_length(a) * kv_d_k(a) * kv_elem_bytes(a)) == 0;
        kv_read_stored(a, g, 0, kv_length(a), NULL, x, NULL, NULL);
        kv_read_stored(b, g, 0, kv_length(b), NULL, y, NULL, NULL);
        same = same && memcmp(x, y, kv_length(a) * kv_d_v(a) * kv_elem_bytes(a)) == 0;
    }
    free(x);
    free(y);
    return same;
}

static size_t shared_of(const struct kv_cache *c)
{
    size_t own, shared;
    kv_bytes_split(c, &own, &shared);
    return shared;
}

TEST(equal_pages_are_shared_and_written_apart)
{
    struct kv_acct acct = {0};
    struct kv_cache *a = cache_of(KV_STORE_SAME, 2, 8, 1, SIZE_MAX, &acct);
    struct kv_cache *b = cache_of(KV_STORE_SAME, 2, 8, 1, SIZE_MAX, &acct);
    struct kv_cache *copy = cache_of(KV_STORE_SAME, 2, 8, 1, SIZE_MAX, NULL);
    size_t before = acct.bytes, page = 64 * kv_row_bytes(a);
    struct kv_dedup *d = kv_dedup_new();
    CHECK_EQ_INT(kv_dedup_add(d, a), 0);
    CHECK_EQ_INT(kv_dedup_add(d, b), 3);            /* the three whole pages */
    CHECK_EQ_INT(kv_dedup_add(d, b), 0);            /* already shared */
    kv_dedup_free(d);
    CHECK_EQ_INT(acct.bytes, before - 3 * page);
    CHECK_EQ_INT(shared_of(b), 3 * page);
    CHECK(same_rows(a, copy) && same_rows(b, copy));
    /* b writes into its second page: a copy of that page alone */
    kv_truncate(b, 100);
    float *k = values(2, 10, 8, 50), *v = values(2, 10, 8, 51);
    CHECK(kv_append_prepared(b, k, v, 10) == CORE_OK);
    CHECK(same_rows(a, copy));
    CHECK_EQ_INT(shared_of(a), page);
    kv_truncate(copy, 100);
    CHECK(kv_append_prepared(copy, k, v, 10) == CORE_OK);
    CHECK(same_rows(b, copy));
    free(k);
    free(v);
    kv_free(a);
    kv_free(b);
    kv_free(copy);
    CHECK_EQ_INT(acct.bytes, 0);
}

TEST(only_equal_whole_pages_of_one_form_are_shared)
{
    struct kv_acct acct = {0};
    struct kv_dedup *d = kv_dedup_new();
    struct kv_cache *a = cache_of(KV_STORE_SAME, 2, 8, 1, SIZE_MAX, &acct);
    CHECK_EQ_INT(kv_dedup_add(d, a), 0);
    /* one value of head 1 in page 1 differs: pages 0 and 2 shared */
    struct kv_cache *b = cache_of(KV_STORE_SAME, 2, 8, 1, ROWS * 8 + 70 * 8 + 3, &acct);
    CHECK_EQ_INT(kv_dedup_add(d, b), 2);
    /* other rows, another width, heads or storage: nothing */
    struct kv_cache *others[] = {cache_of(KV_STORE_SAME, 2, 8, 9, SIZE_MAX, &acct),
                                 cache_of(KV_STORE_SAME, 2, 16, 1, SIZE_MAX, &acct),
                                 cache_of(KV_STORE_SAME, 1, 8, 1, SIZE_MAX, &acct),
                                 cache_of(KV_STORE_F16, 2, 8, 1, SIZE_MAX, &acct)};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(kv_dedup_add(d, others[i]), 0);
    /* int8: the same rows share; the scales are compared with them */
    struct kv_cache *i8a = cache_of(KV_STORE_I8, 2, 8, 1, SIZE_MAX, &acct);
    struct kv_cache *i8b = cache_of(KV_STORE_I8, 2, 8, 1, SIZE_MAX, &acct);
    CHECK_EQ_INT(kv_dedup_add(d, i8a), 0);
    CHECK_EQ_INT(kv_dedup_add(d, i8b), 3);
    CHECK(same_rows(i8a, i8b));
    struct kv_cache *i8x2 = kv_new_store(ATTN_F32, KV_STORE_I8, 2, 8, 8);
    float *k2 = values(2, ROWS, 8, 1), *v2 = values(2, ROWS, 8, 2);
    for (size_t i = 0; i < 2 * ROWS * 8; i++) {
        k2[i] *= 2;
        v2[i] *= 2;
    }
    kv_set_acct(i8x2, &acct);
    CHECK(kv_append_prepared(i8x2, k2, v2, ROWS) == CORE_OK);
    free(k2);
    free(v2);
    CHECK(kv_dedup_add(d, i8x2) == 0);      /* the same int8 rows, twice the scales */
    /* a rolled cache is left alone */
    struct kv_cache *rolled = cache_of(KV_STORE_SAME, 2, 8, 1, SIZE_MAX, &acct);
    kv_roll(rolled, 64, 128);
    CHECK_EQ_INT(kv_dedup_add(d, rolled), 0);
    CHECK_EQ_INT(kv_dedup_add(NULL, rolled), 0);
    kv_dedup_free(d);
    kv_free(a);
    kv_free(b);
    for (int i = 0; i < 4; i++)
        kv_free(others[i]);
    kv_free(i8a);
    kv_free(i8b);
    kv_free(i8x2);
    kv_free(rolled);
    CHECK_EQ_INT(acct.bytes, 0);
}

/* One whole page, every row the same but row 1 (which the key does not
 * look at) made from n. */
static struct kv_cache *page_alike(unsigned n, struct kv_acct *acct)
{
    struct kv_cache *c = kv_new_store(ATTN_F32, KV_STORE_SAME, 1, 4, 4);
    float k[64 * 4], v[64 * 4];
    for (size_t i = 0; i < 64 * 4; i++)
        k[i] = v[i] = 1;
    k[4] = (float)n;
    kv_set_acct(c, acct);
    CHECK(kv_append_prepared(c, k, v, 64) == CORE_OK);
    return c;
}

TEST(pages_alike_where_the_key_looks_are_compared_a_bounded_number_of_times)
{
    enum { N = 2000 };
    struct kv_acct acct = {0};
    struct kv_dedup *d = kv_dedup_new();
    struct kv_cache **c = calloc(N, sizeof *c);
    size_t shared = 0;
    for (unsigned i = 0; i < N; i++) {
        c[i] = page_alike(i, &acct);
        shared += kv_dedup_add(d, c[i]);
    }
    CHECK_EQ_INT(shared, 0);
    /* the first ones of the key are remembered and shared with; past them
     * a page keeps its own copy, and later equal pages do too */
    struct kv_cache *early = page_alike(3, &acct), *late = page_alike(N - 1, &acct);
    CHECK_EQ_INT(kv_dedup_add(d, early), 1);
    CHECK_EQ_INT(kv_dedup_add(d, late), 0);
    kv_dedup_free(d);
    for (unsigned i = 0; i < N; i++)
        kv_free(c[i]);
    free(c);
    kv_free(early);
    kv_free(late);
    CHECK_EQ_INT(acct.bytes, 0);
}

int main(void)
{
    RUN(equal_pages_are_shared_and_written_apart);
    RUN(only_equal_whole_pages_of_one_form_are_shared);
    RUN(pages_alike_where_the_key_looks_are_compared_a_bounded_number_of_times);
    TEST_MAIN_END();
}
