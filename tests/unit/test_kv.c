/*
 * tests/unit/test_kv.c — the KV cache: growth and storage overhead,
 * all-or-nothing appends, truncate/fork isolation, and decoding through the
 * cache equal bit for bit to the stateless pass on the full K/V.
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/kv.h"
#include "tests/harness.h"

static uint64_t rng = 88172645463325252ull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double *rnd(size_t n)
{
    double *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = urand();
    return p;
}

/* Stored element i of head g's K (keys) or V rows, as a double. */
static double at(const struct kv_cache *c, size_t g, bool keys, size_t i)
{
    size_t d = keys ? kv_d_k(c) : kv_d_v(c), row = i / d;
    double buf[64];
    kv_read_stored(c, g, row, 1, keys ? buf : NULL, keys ? NULL : buf, NULL, NULL);
    return buf[i % d];
}

/* Head g's K and V rows copied out (f64 caches), malloc'd. */
static double *rows_of(const struct kv_cache *c, size_t g, bool keys)
{
    size_t d = keys ? kv_d_k(c) : kv_d_v(c);
    double *o = malloc((kv_length(c) * d + 1) * sizeof *o);
    kv_read_stored(c, g, 0, kv_length(c), keys ? o : NULL, keys ? NULL : o, NULL, NULL);
    return o;
}

static struct attn_params plain_params(void)
{
    struct attn_params p = {.dtype = ATTN_F64, .scale = 0.5};
    return p;
}

TEST(growth_is_geometric_and_overhead_bounded)
{
    struct kv_cache *c = kv_new(ATTN_F64, 2, 4, 3);
    CHECK(c != NULL);
    struct attn_params p = plain_params();
    double k[2 * 4], v[2 * 3];
    for (size_t i = 0; i < 8; i++)
        k[i] = (double)i;
    for (size_t i = 0; i < 6; i++)
        v[i] = (double)i;
    struct attn_inputs in = {.k = k, .v = v};
    size_t changes = 0, last_cap = 0;
    for (size_t i = 0; i < 5000; i++) {
        CHECK_EQ_INT(kv_append(c, &p, &in, 1), CORE_OK);
        size_t len = kv_length(c), cap = kv_capacity(c);
        if (cap != last_cap)
            changes++;
        last_cap = cap;
        /* storage never more than 10% over the raw rows, or within a page */
        CHECK(cap >= len && (cap <= len + len / 10 || cap < len + KV_PAGE_ROWS));
        CHECK(kv_bytes(c) == cap * kv_row_bytes(c));
    }
    CHECK_EQ_INT(kv_length(c), 5000);
    CHECK_EQ_INT(kv_row_bytes(c), 2 * (4 + 3) * sizeof(double));
    /* amortised O(1): the first page's ~35 growths by 1/10, then at most 3
     * per page (16, 32, 64 rows), not 5000 */
    CHECK(changes <= 40 + 3 * (5000 / KV_PAGE_ROWS + 1));
    kv_free(c);
}

TEST(plan_matches_growth)
{
    struct kv_cache *c = kv_new(ATTN_F32, 1, 2, 2);
    size_t geom, exact, rb = 4 * sizeof(float);
    /* 100 rows: a full first page, then 36 rows of a page doubled to 64 */
    CHECK_EQ_INT(kv_plan(c, 100, &geom, &exact), CORE_OK);
    CHECK_EQ_INT(geom, 128 * rb);
    CHECK_EQ_INT(exact, 100 * rb);
    CHECK_EQ_INT(kv_plan(c, 10, &geom, &exact), CORE_OK);
    CHECK_EQ_INT(geom, 11 * rb);       /* the first page grows by 1/10 */
    CHECK_EQ_INT(exact, 10 * rb);
    CHECK_EQ_INT(kv_plan(c, SIZE_MAX / 2, &geom, NULL), CORE_ELIMIT);
    CHECK_EQ_INT(kv_bytes(c), 0);
    CHECK_EQ_INT(kv_reserve(c, 100, false), CORE_OK);
    CHECK_EQ_INT(kv_bytes(c), 128 * rb);
    CHECK_EQ_INT(kv_length(c), 0);
    kv_free(c);
}

TEST(append_is_all_or_nothing)
{
    struct kv_cache *c = kv_new(ATTN_F64, 2, 2, 2);
    struct attn_params p = plain_params();
    double k[2 * 3 * 2], v[2 * 3 * 2];
    for (size_t i = 0; i < 12; i++)
        k[i] = v[i] = (double)i + 1;
    struct attn_inputs in = {.k = k, .v = v};
    CHECK_EQ_INT(kv_append(c, &p, &in, 3), CORE_OK);
    double *before_k = rows_of(c, 1, true), *before_v = rows_of(c, 1, false);
    size_t cap0 = kv_capacity(c);

    /* a bias that overflows one prepared number to +inf */
    double big[2] = {1.7e308, 0};
    k[2 * 3 * 2 - 2] = 1.7e308;
    struct attn_inputs bad = {.k = k, .v = v, .bias_k = big, .bias_k_heads = 1};
    CHECK_EQ_INT(kv_append(c, &p, &bad, 3), CORE_ENONFINITE);
    CHECK_EQ_INT(kv_length(c), 3);
    double *after_k = rows_of(c, 1, true), *after_v = rows_of(c, 1, false);
    CHECK(memcmp(after_k, before_k, 6 * sizeof(double)) == 0);
    CHECK(memcmp(after_v, before_v, 6 * sizeof(double)) == 0);
    free(before_k);
    free(before_v);
    free(after_k);
    free(after_v);

    /* bad arguments change nothing either */
    CHECK_EQ_INT(kv_append(c, &p, &in, 0), CORE_EINVAL);
    struct attn_params p32 = p;
    p32.dtype = ATTN_F32;
    CHECK_EQ_INT(kv_append(c, &p32, &in, 1), CORE_EINVAL);
    double nanrow[4] = {NAN, 0, 0, 0};
    CHECK_EQ_INT(kv_append_prepared(c, nanrow, nanrow, 1), CORE_ENONFINITE);
    CHECK_EQ_INT(kv_length(c), 3);
    CHECK(kv_capacity(c) >= cap0);
    kv_free(c);
}

/* The finiteness checks of an append look at every element: one infinity
 * or NaN at any place (either side of a block of the check, the last
 * element, in k or in v) refuses the rows; the largest finite values pass.
 * float32 and float64 prepared rows, float16 and bfloat16 stored rows. */
static void put_bad(void *a, size_t esz, size_t at, int kind)
{
    static const uint16_t h16[3] = {0x7c00, 0xfc00, 0x7e00}, hb[3] = {0x7f80, 0xff80, 0x7fc0};
    double d = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : NAN;
    float f = (float)d;
    if (esz == 8)
        memcpy((char *)a + at * 8, &d, 8);
    else if (esz == 4)
        memcpy((char *)a + at * 4, &f, 4);
    else
        ((uint16_t *)a)[at] = esz == 2 ? h16[kind] : hb[kind];    /* 3: bfloat16 bits */
}

TEST(every_non_finite_place_is_refused)
{
    enum { M = 200, D = 3, N = M * D };     /* 600 elements: blocks of 256 and a tail */
    static const size_t at[] = {0, 1, 255, 256, 257, 511, 512, 513, N - 1};
    struct { enum attn_dtype dt; enum kv_store st; size_t esz; } form[] = {
        {ATTN_F32, KV_STORE_SAME, 4}, {ATTN_F64, KV_STORE_SAME, 8},
        {ATTN_F32, KV_STORE_F16, 2}, {ATTN_F32, KV_STORE_BF16, 3}};
    for (size_t f = 0; f < sizeof form / sizeof *form; f++) {
        size_t esz = form[f].esz, bytes = esz == 3 ? 2 : esz;
        unsigned char *k = malloc(N * bytes), *v = malloc(N * bytes);
        struct kv_cache *c = kv_new_store(form[f].dt, form[f].st, 1, D, D);
        CHECK(k && v && c);
        if (!k || !v || !c)
            return;
        for (size_t i = 0; i < N; i++) {    /* the largest finite values */
            double d = i % 2 ? DBL_MAX : -DBL_MAX;
            float x = i % 2 ? FLT_MAX : -FLT_MAX;
            uint16_t h = esz == 2 ? 0x7bff : 0x7f7f;
            if (esz == 8)
                memcpy(k + i * 8, &d, 8);
            else if (esz == 4)
                memcpy(k + i * 4, &x, 4);
            else
                memcpy(k + i * 2, &h, 2);
        }
        memcpy(v, k, N * bytes);
        bool stored = bytes == 2;
        CHECK_EQ_INT(stored ? kv_append_stored(c, k, v, NULL, NULL, M)
                            : kv_append_prepared(c, k, v, M), CORE_OK);
        for (size_t a = 0; a < sizeof at / sizeof *at; a++)
            for (int kind = 0; kind < 3; kind++)
                for (int which = 0; which < 2; which++) {
                    unsigned char *t = which ? v : k, keep[8];
                    memcpy(keep, t + at[a] * bytes, bytes);
                    put_bad(t, esz, at[a], kind);
                    CHECK_EQ_INT(stored ? kv_append_stored(c, k, v, NULL, NULL, M)
                                        : kv_append_prepared(c, k, v, M), CORE_ENONFINITE);
                    memcpy(t + at[a] * bytes, keep, bytes);
                }
        CHECK_EQ_INT(kv_length(c), M);
        kv_free(c);
        free(k);
        free(v);
    }
}

/* A failed append leaves the bytes and the sharing as they were: a fork
 * whose append overflows float16 does not copy its shared last page. */
TEST(failed_append_keeps_bytes_and_shared_pages)
{
    struct kv_acct acct = {0};
    struct kv_cache *c = kv_new_store(ATTN_F32, KV_STORE_F16, 1, 2, 2);
    float k[2 * 70], v[2 * 70];
    for (size_t i = 0; i < 2 * 70; i++)
        k[i] = v[i] = (float)i;
    kv_set_acct(c, &acct);
    CHECK_EQ_INT(kv_append_prepared(c, k, v, 70), CORE_OK);
    struct kv_cache *f = kv_fork(c);
    size_t b0 = atomic_load(&acct.bytes), fb0 = kv_bytes(f), own, shared;
    k[1] = 1e6f;                        /* over float16's range */
    CHECK_EQ_INT(kv_append_prepared(f, k, v, 1), CORE_ENONFINITE);
    CHECK_EQ_INT(kv_length(f), 70);
    CHECK_EQ_INT(atomic_load(&acct.bytes), b0);
    CHECK_EQ_INT(kv_bytes(f), fb0);
    kv_bytes_split(f, &own, &shared);
    CHECK_EQ_INT(own, 0);
    /* through kv_append too, for a cache at a page boundary */
    struct attn_params p = plain_params();
    p.dtype = ATTN_F32;
    struct attn_inputs in = {.k = k, .v = v};
    kv_truncate(c, 64);
    size_t b1 = atomic_load(&acct.bytes);
    CHECK_EQ_INT(kv_append(c, &p, &in, 1), CORE_ENONFINITE);
    CHECK_EQ_INT(atomic_load(&acct.bytes), b1);
    kv_free(f);
    kv_free(c);
    CHECK_EQ_INT(atomic_load(&acct.bytes), 0);
}

/* A rollback gives back the room an append grew a private last page by:
 * a page of exactly its rows (a tight append's, or one read back from a
 * snapshot) is no bigger after a refused attention than before, on the
 * first page (grown by a tenth) and on a later one (doubled). */
TEST(rollback_gives_back_a_grown_last_page)
{
    static const size_t before[] = {20, 64 + 20, 64 + 5};
    struct kv_acct acct = {0};
    double k[2 * 100], v[2 * 100];
    for (size_t i = 0; i < 2 * 100; i++)
        k[i] = v[i] = (double)i;
    struct attn_params p = plain_params();
    struct attn_inputs in = {.k = k, .v = v};
    for (size_t t = 0; t < sizeof before / sizeof before[0]; t++) {
        struct kv_cache *c = kv_new(ATTN_F64, 1, 2, 2);
        kv_set_acct(c, &acct);
        CHECK_EQ_INT(kv_append_ex(c, &p, &in, before[t], true), CORE_OK);
        size_t b0 = atomic_load(&acct.bytes), cap0 = kv_capacity(c);
        CHECK_EQ_INT(cap0, before[t]);
        struct kv_mark m;
        kv_mark(c, &m);
        CHECK_EQ_INT(kv_append(c, &p, &in, 3), CORE_OK);
        CHECK(kv_capacity(c) > cap0);
        kv_rollback(c, &m);
        CHECK_EQ_INT(kv_length(c), before[t]);
        CHECK_EQ_INT(kv_capacity(c), cap0);
        CHECK_EQ_INT(atomic_load(&acct.bytes), b0);
        CHECK_EQ_INT(kv_bytes(c), b0);
        for (size_t i = 0; i < 2 * before[t]; i++)
            CHECK(at(c, 0, true, i) == k[i] && at(c, 0, false, i) == v[i]);
        kv_free(c);
        CHECK_EQ_INT(atomic_load(&acct.bytes), 0);
    }
}

/* Row counts whose element count passes SIZE_MAX / 8 are refused before
 * anything is sized from them (the V count alone over the bound too). */
TEST(huge_appends_are_refused)
{
    struct kv_cache *c = kv_new(ATTN_F32, 1, 1, 1);
    struct attn_params p = plain_params();
    p.dtype = ATTN_F32;
    float k[4] = {1, 2, 3, 4}, v[4] = {1, 2, 3, 4};
    struct attn_inputs in = {.k = k, .v = v};
    size_t m = SIZE_MAX / 8 + 2;        /* (kn + vn) · 4 wraps to a few bytes */
    CHECK_EQ_INT(kv_append(c, &p, &in, m), CORE_ELIMIT);
    CHECK_EQ_INT(kv_append_prepared(c, k, v, m), CORE_ELIMIT);
    CHECK_EQ_INT(kv_length(c), 0);
    CHECK_EQ_INT(kv_bytes(c), 0);
    kv_free(c);
}

TEST(truncate_and_fork_are_isolated)
{
    struct kv_cache *c = kv_new(ATTN_F64, 1, 2, 1);
    double k[2 * 100], v[100];
    for (size_t i = 0; i < 100; i++) {
        k[2 * i] = (double)i;
        k[2 * i + 1] = -(double)i;
        v[i] = (double)i * 10;
    }
    CHECK_EQ_INT(kv_append_prepared(c, k, v, 100), CORE_OK);
    struct kv_cache *f = kv_fork(c);
    CHECK(f != NULL);
    CHECK_EQ_INT(kv_length(f), 100);
    size_t own, shared;
    kv_bytes_split(f, &own, &shared);  /* every page shared, none copied */
    CHECK_EQ_INT(own, 0);
    CHECK_EQ_INT(shared, kv_bytes(c));
    double *fk = rows_of(f, 0, true);
    CHECK(memcmp(fk, k, sizeof k) == 0);
    free(fk);

    kv_truncate(c, 10);
    CHECK_EQ_INT(kv_length(c), 10);
    CHECK_EQ_INT(kv_length(f), 100);   /* fork untouched */
    CHECK(at(f, 0, false, 99) == 990.0);
    kv_bytes_split(f, &own, &shared);  /* c let the second page go */
    CHECK_EQ_INT(own, KV_PAGE_ROWS * kv_row_bytes(f));

    double k2[2] = {7, 7}, v2[1] = {7};
    CHECK_EQ_INT(kv_append_prepared(f, k2, v2, 1), CORE_OK);
    CHECK_EQ_INT(kv_length(c), 10);
    CHECK(at(c, 0, false, 9) == 90.0);
    CHECK(at(f, 0, false, 100) == 7.0);
    /* c writes into the shared first page: copied, f keeps the original */
    CHECK_EQ_INT(kv_append_prepared(c, k2, v2, 1), CORE_OK);
    CHECK(at(c, 0, false, 10) == 7.0);
    CHECK(at(f, 0, false, 10) == 100.0);
    kv_bytes_split(c, &own, &shared);
    CHECK_EQ_INT(shared, 0);
    CHECK(kv_capacity(c) <= 13);       /* the copy has the policy's room */

    kv_truncate(c, 50);                /* longer than length: no-op */
    CHECK_EQ_INT(kv_length(c), 11);
    kv_truncate(c, 0);
    CHECK_EQ_INT(kv_length(c), 0);
    CHECK_EQ_INT(kv_bytes(c), 0);
    CHECK_EQ_INT(kv_append_prepared(c, k2, v2, 1), CORE_OK);
    CHECK(at(c, 0, true, 0) == 7.0);
    kv_free(c);
    kv_free(f);
}

/* Decode through the cache in steps and compare every step with the
 * stateless pass on the whole K/V (queries at L-n..L-1): GQA 4/2 heads,
 * q/k/v biases, RoPE, ALiBi, bottom-right causal; float64 and float32. */
static void decode_equivalence(enum attn_dtype dt)
{
    const size_t h = 4, h_kv = 2, d_k = 6, d_v = 3, L = 9;
    const size_t steps[] = {4, 1, 2, 1, 1};   /* rows per step, sum L */
    size_t es = attn_dtype_size(dt);
    double *k64 = rnd(h_kv * L * d_k), *v64 = rnd(h_kv * L * d_v);
    double *q64 = rnd(h * L * d_k), *bq64 = rnd(d_k), *bk64 = rnd(h_kv * d_k),
           *bv64 = rnd(d_v);
    /* arrays in dtype */
    void *k = malloc(h_kv * L * d_k * es), *v = malloc(h_kv * L * d_v * es);
    void *q = malloc(h * L * d_k * es), *bq = malloc(d_k * es),
         *bk = malloc(h_kv * d_k * es), *bv = malloc(d_v * es);
    struct { void *dst; double *src; size_t n; } conv[] = {
        {k, k64, h_kv * L * d_k}, {v, v64, h_kv * L * d_v}, {q, q64, h * L * d_k},
        {bq, bq64, d_k}, {bk, bk64, h_kv * d_k}, {bv, bv64, d_v}};
    for (size_t a = 0; a < 6; a++)
        for (size_t i = 0; i < conv[a].n; i++) {
            if (dt == ATTN_F32)
                ((float *)conv[a].dst)[i] = (float)conv[a].src[i];
            else
                ((double *)conv[a].dst)[i] = conv[a].src[i];
        }
    struct attn_params p = {.dtype = dt, .scale = attn_default_scale(d_k),
                            .rope = true, .rope_base = 10000,
                            .rope_pairs = ATTN_ROPE_INTERLEAVED, .alibi = true};
    struct kv_cache *c = kv_new(dt, h_kv, d_k, d_v);
    struct attn_ws *ws = attn_ws_new();
    size_t len = 0;
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        size_t m = steps[st];
        /* the step's rows of every head, contiguous: [h_kv][m][d] */
        char *ks = malloc(h_kv * m * d_k * es), *vs = malloc(h_kv * m * d_v * es);
        char *qs = malloc(h * m * d_k * es);
        for (size_t g = 0; g < h_kv; g++) {
            memcpy(ks + g * m * d_k * es, (char *)k + (g * L + len) * d_k * es,
                   m * d_k * es);
            memcpy(vs + g * m * d_v * es, (char *)v + (g * L + len) * d_v * es,
                   m * d_v * es);
        }
        for (size_t i = 0; i < h; i++)
            memcpy(qs + i * m * d_k * es, (char *)q + (i * L + len) * d_k * es,
                   m * d_k * es);
        struct attn_inputs ain = {.k = ks, .v = vs, .bias_k = bk,
                                  .bias_k_heads = h_kv, .bias_v = bv,
                                  .bias_v_heads = 1};
        CHECK_EQ_INT(kv_append(c, &p, &ain, m), CORE_OK);
        len += m;
        /* stateless: the first len rows of k, v, queries = this step's rows */
        char *kf = malloc(h_kv * len * d_k * es), *vf = malloc(h_kv * len * d_v * es);
        for (size_t g = 0; g < h_kv; g++) {
            memcpy(kf + g * len * d_k * es, (char *)k + g * L * d_k * es,
                   len * d_k * es);
            memcpy(vf + g * len * d_v * es, (char *)v + g * L * d_v * es,
                   len * d_v * es);
        }
        struct attn_request r = {
            .shape = {.h = h, .h_kv = h_kv, .n = m, .L = len, .d_k = d_k, .d_v = d_v},
            .params = p, .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
            .attn_bias_heads = 1, .mask_heads = 1, .outputs = ATTN_OUT_ALL};
        size_t sw = h * m * len * es, so = h * m * d_v * es;
        struct attn_result a = {malloc(sw), malloc(sw), malloc(so), NULL, 0};
        struct attn_result b = {malloc(sw), malloc(sw), malloc(so), NULL, 0};
        struct attn_inputs full = {.q = qs, .k = kf, .v = vf, .bias_q = bq,
                                   .bias_q_heads = 1, .bias_k = bk,
                                   .bias_k_heads = h_kv, .bias_v = bv,
                                   .bias_v_heads = 1};
        struct attn_inputs qin = {.q = qs, .bias_q = bq, .bias_q_heads = 1};
        CHECK_EQ_INT(attn_forward(&r, &full, &a, ws), CORE_OK);
        r.shape.L = 12345;  /* ignored: the cache decides */
        CHECK_EQ_INT(kv_attend(c, &r, &qin, &b, ws), CORE_OK);
        CHECK(memcmp(a.scores, b.scores, sw) == 0);
        CHECK(memcmp(a.weights, b.weights, sw) == 0);
        CHECK(memcmp(a.output, b.output, so) == 0);
        free(a.scores); free(a.weights); free(a.output);
        free(b.scores); free(b.weights); free(b.output);
        free(ks); free(vs); free(qs); free(kf); free(vf);
    }
    CHECK_EQ_INT(kv_length(c), L);
    /* a mismatching shape is refused */
    struct attn_request bad = {
        .shape = {.h = h, .h_kv = 1, .n = 1, .L = 1, .d_k = d_k, .d_v = d_v},
        .params = p, .outputs = ATTN_OUT_ALL};
    struct attn_inputs qin = {.q = q};
    struct attn_result none = {0};
    CHECK_EQ_INT(kv_attend(c, &bad, &qin, &none, ws), CORE_ESHAPE);
    attn_ws_free(ws);
    kv_free(c);
    free(k); free(v); free(q); free(bq); free(bk); free(bv);
    free(k64); free(v64); free(q64); free(bq64); free(bk64); free(bv64);
}

TEST(decode_equals_stateless_f64) { decode_equivalence(ATTN_F64); }
TEST(decode_equals_stateless_f32) { decode_equivalence(ATTN_F32); }

/* Attention through pages read in place equals the stateless pass on the
 * same rows in one block, bit for bit: a decode long enough to be split
 * into key windows that start mid-page, a few query rows (one block), and
 * scores with weights; also on a fork that copied its last page. */
static void paged_equivalence(enum attn_dtype dt)
{
    const size_t h = 2, h_kv = 1, d = 64, L = 5000 + 37;
    size_t es = attn_dtype_size(dt);
    double *k64 = rnd(h_kv * L * d), *v64 = rnd(h_kv * L * d), *q64 = rnd(h * 8 * d);
    void *k = malloc(L * d * es), *v = malloc(L * d * es), *q = malloc(h * 8 * d * es);
    for (size_t i = 0; i < L * d; i++) {
        if (dt == ATTN_F32) {
            ((float *)k)[i] = (float)k64[i];
            ((float *)v)[i] = (float)v64[i];
        } else {
            ((double *)k)[i] = k64[i];
            ((double *)v)[i] = v64[i];
        }
    }
    for (size_t i = 0; i < h * 8 * d; i++) {
        if (dt == ATTN_F32)
            ((float *)q)[i] = (float)q64[i];
        else
            ((double *)q)[i] = q64[i];
    }
    struct attn_params p = {.dtype = dt, .scale = attn_default_scale(d)};
    struct kv_cache *c = kv_new(dt, h_kv, d, d);
    /* the prefix in uneven appends, then a fork that writes its own last rows */
    size_t at0 = 0, cut = L - 37;
    for (size_t m = 1; at0 < cut; m = m * 3 + 1) {
        size_t n = cut - at0 < m ? cut - at0 : m;
        CHECK_EQ_INT(kv_append_prepared(c, (char *)k + at0 * d * es, (char *)v + at0 * d * es, n),
                     CORE_OK);
        at0 += n;
    }
    struct kv_cache *f = kv_fork(c);
    CHECK_EQ_INT(kv_append_prepared(f, (char *)k + cut * d * es, (char *)v + cut * d * es, 37),
                 CORE_OK);
    struct attn_ws *ws = attn_ws_new();
    const size_t ns[3] = {1, 8, 2};
    const unsigned outs[3] = {ATTN_OUT_OUTPUT, ATTN_OUT_OUTPUT, ATTN_OUT_ALL};
    for (int which = 0; which < 2; which++) {
        const struct kv_cache *cc = which ? f : c;
        size_t len = kv_length(cc);
        for (int t = 0; t < 3; t++) {
            struct attn_request r = {
                .shape = {.h = h, .h_kv = h_kv, .n = ns[t], .L = len, .d_k = d, .d_v = d},
                .params = p, .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                .attn_bias_heads = 1, .mask_heads = 1, .outputs = outs[t]};
            size_t sw = h * ns[t] * len * es, so = h * ns[t] * d * es;
            bool all = outs[t] == ATTN_OUT_ALL;
            struct attn_result a = {all ? malloc(sw) : NULL, all ? malloc(sw) : NULL,
                                    malloc(so), NULL, 0};
            struct attn_result b = {all ? malloc(sw) : NULL, all ? malloc(sw) : NULL,
                                    malloc(so), NULL, 0};
            struct attn_inputs full = {.q = q, .k = k, .v = v};
            struct attn_inputs qin = {.q = q};
            CHECK_EQ_INT(attn_forward(&r, &full, &a, ws), CORE_OK);
            CHECK_EQ_INT(kv_attend(cc, &r, &qin, &b, ws), CORE_OK);
            CHECK(memcmp(a.output, b.output, so) == 0);
            if (all) {
                CHECK(memcmp(a.scores, b.scores, sw) == 0);
                CHECK(memcmp(a.weights, b.weights, sw) == 0);
            }
            free(a.scores); free(a.weights); free(a.output);
            free(b.scores); free(b.weights); free(b.output);
        }
    }
    attn_ws_free(ws);
    kv_free(c);
    kv_free(f);
    free(k); free(v); free(q); free(k64); free(v64); free(q64);
}

TEST(paged_equals_stateless_f64) { paged_equivalence(ATTN_F64); }
TEST(paged_equals_stateless_f32) { paged_equivalence(ATTN_F32); }

TEST(empty_cache_cannot_attend)
{
    struct kv_cache *c = kv_new(ATTN_F64, 1, 2, 2);
    double q[2] = {1, 0}, o[2];
    struct attn_request r = {
        .shape = {.h = 1, .h_kv = 1, .n = 1, .L = 1, .d_k = 2, .d_v = 2},
        .params = plain_params(), .outputs = ATTN_OUT_OUTPUT};
    struct attn_inputs in = {.q = q};
    struct attn_result out = {.output = o};
    CHECK_EQ_INT(kv_attend(c, &r, &in, &out, NULL), CORE_ESHAPE);
    CHECK(kv_new(ATTN_F64, 0, 2, 2) == NULL);
    kv_free(c);
}

int main(void)
{
    RUN(growth_is_geometric_and_overhead_bounded);
    RUN(plan_matches_growth);
    RUN(append_is_all_or_nothing);
    RUN(every_non_finite_place_is_refused);
    RUN(failed_append_keeps_bytes_and_shared_pages);
    RUN(rollback_gives_back_a_grown_last_page);
    RUN(huge_appends_are_refused);
    RUN(truncate_and_fork_are_isolated);
    RUN(decode_equals_stateless_f64);
    RUN(decode_equals_stateless_f32);
    RUN(paged_equals_stateless_f64);
    RUN(paged_equals_stateless_f32);
    RUN(empty_cache_cannot_attend);
    TEST_MAIN_END();
}
