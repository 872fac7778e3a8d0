/*
 * tests/unit/test_attn.c — the attention core's paths that must agree with
 * one another and with the long double reference of tests/attn_ref.h.
 *
 * Output only (tiled through scratch) against the materialising pass, with
 * scratch that does not grow with L; keys prepared in chunks then
 * attn_forward_kv against the stateless pass, bit for bit; rows split over
 * two threads; keys split into windows and combined, on random cases over
 * every option; the fused float32 kernel of each instruction set this CPU
 * runs against the reference, against the materialising pass on a large
 * case, and on scores past FLT_MAX; the helper pool (attn_pool): every
 * piece once, split prefills and decodes bit for bit with and without it,
 * and one pool shared by two callers. tests/run.sh's concurrency subset
 * (make tsan) runs this program for its threads and pool.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_fused.h"
#include "tests/attn_ref.h"
#include "tests/harness.h"


/* ---- paths that must agree bit for bit ------------------------------- */

static bool same_bytes(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

/* Largest |a - b| over the output of two passes of case c. */
static double max_output_diff(const struct tcase *c, const struct tcore *a,
                              const struct tcore *b)
{
    double worst = 0;
    for (size_t x = 0; x < c->h * c->n * c->dv; x++) {
        double d = fabs(get_val(a->output, x, c->dt) - get_val(b->output, x, c->dt));
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* Output only (tiled through scratch) == all outputs (weights materialised)
 * within rounding, and the scratch stays O(tile·L), not O(n·L). */
TEST(tiled_output_equals_materialised)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 2, 1, 150, 9000, 8, 5);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        struct tcore full, tiled;
        tcore_init(&c, &full);
        c.outputs = ATTN_OUT_OUTPUT;
        tcore_init(&c, &tiled);
        struct attn_ws *ws = attn_ws_new();
        CHECK_EQ_INT(attn_forward(&full.req, &full.in, &full.out, NULL), CORE_OK);
        CHECK_EQ_INT(attn_forward(&tiled.req, &tiled.in, &tiled.out, ws), CORE_OK);
        size_t esz = attn_dtype_size(c.dt), bytes = attn_ws_bytes(ws);
        /* the tiled path scales output rows instead of weights: equal within
         * rounding (|v| <= 1, so absolute tolerances) */
        double tol = c.dt == ATTN_F64 ? 1e-14 : 1e-6;
        CHECK(max_output_diff(&c, &full, &tiled) <= tol);
        CHECK(bytes < 2 * 150 * 9000 * esz / 4);   /* well below n·L per head */
        /* a second pass reuses the scratch: no growth */
        CHECK_EQ_INT(attn_forward(&tiled.req, &tiled.in, &tiled.out, ws), CORE_OK);
        CHECK_EQ_INT(attn_ws_bytes(ws), bytes);
        attn_ws_free(ws);
        tcore_free(&full);
        tcore_free(&tiled);
        c.outputs = ATTN_OUT_ALL;
        tcase_free(&c);
    }
}

/* The session path: keys/values prepared in chunks at their positions (as a
 * KV cache stores them), then forward_kv, equals the stateless pass bit for
 * bit — with biases, RoPE, ALiBi and causal on; for a prefill and a decode. */
TEST(forward_equals_prepare_plus_forward_kv)
{
    for (int dt = 0; dt < 2; dt++) {
        for (size_t n = 1; n <= 40; n += 39) {
            struct tcase c;
            plain_case(&c, (enum attn_dtype)dt, 4, 2, n, 50, 6, 3);
            c.bq = 2;
            c.bk = 2;
            c.bv = 1;
            c.rope = 1;
            c.alibi = 1;
            c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            c.sm = ATTN_SOFTMAX_SINK;
            c.sink = 0.25;
            tcase_free(&c);
            tcase_fill(&c);
            struct tcore t, u;
            tcore_init(&c, &t);
            tcore_init(&c, &u);
            CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
            /* cache [h_kv][L][d], filled in chunks of 17, 1, rest */
            size_t esz = attn_dtype_size(c.dt), L = c.L;
            char *kc = malloc(2 * L * 6 * esz), *vc = malloc(2 * L * 3 * esz);
            size_t chunks[3] = {17, 1, L - 18}, pos = 0;
            for (int ch = 0; ch < 3; ch++) {
                size_t m = chunks[ch];
                /* raw rows [h_kv][m][d] of this chunk */
                char *kr = malloc(2 * m * 6 * esz), *vr = malloc(2 * m * 3 * esz);
                for (size_t g = 0; g < 2; g++) {
                    memcpy(kr + g * m * 6 * esz, (const char *)u.in.k + (g * L + pos) * 6 * esz,
                           m * 6 * esz);
                    memcpy(vr + g * m * 3 * esz, (const char *)u.in.v + (g * L + pos) * 3 * esz,
                           m * 3 * esz);
                }
                struct attn_inputs in = u.in;
                in.k = kr;
                in.v = vr;
                void *ko[2] = {kc + pos * 6 * esz, kc + (L + pos) * 6 * esz};
                void *vo[2] = {vc + pos * 3 * esz, vc + (L + pos) * 3 * esz};
                attn_prepare_kv(&u.req.shape, &u.req.params, &in, m, (int64_t)pos, ko, vo);
                free(kr);
                free(vr);
                pos += m;
            }
            const void *kp[2] = {kc, kc + L * 6 * esz}, *vp[2] = {vc, vc + L * 3 * esz};
            struct attn_kv_view kv = {.k = kp, .v = vp};
            struct attn_inputs qin = u.in;
            qin.k = qin.v = NULL;   /* forward_kv must not need them */
            CHECK_EQ_INT(attn_forward_kv(&u.req, &qin, &kv, &u.out, NULL), CORE_OK);
            size_t hn = 4 * n;
            CHECK(same_bytes(t.scores, u.scores, hn * L * esz));
            CHECK(same_bytes(t.weights, u.weights, hn * L * esz));
            CHECK(same_bytes(t.output, u.output, hn * 3 * esz));
            free(kc);
            free(vc);
            tcore_free(&t);
            tcore_free(&u);
            CHECK(run_case(&c, NULL) == 0);
            tcase_free(&c);
        }
    }
}

/* One part of a split pass (a worker thread's share). */
struct split_job {
    const struct tcore *t;
    const struct attn_kv_view *kv;
    struct attn_result out;
    size_t rb, re;
    enum core_status st;
};

static void *split_worker(void *p)
{
    struct split_job *j = p;
    struct attn_ws *ws = attn_ws_new();
    j->st = attn_forward_kv_rows(&j->t->req, &j->t->in, j->kv, &j->out, ws, j->rb, j->re);
    attn_ws_free(ws);
    return NULL;
}

/* attn_forward_kv_rows over parts (crossing head and kv-group boundaries),
 * run on two threads, equals the whole pass; bad ranges are rejected. */
TEST(rows_split_across_threads)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 4, 2, 7, 300, 8, 4);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.n = 7;
        c.L = 5;   /* n > L: empty rows in every head */
        tcase_free(&c);
        tcase_fill(&c);
        struct tcore whole, split;
        tcore_init(&c, &whole);
        tcore_init(&c, &split);
        CHECK_EQ_INT(attn_forward(&whole.req, &whole.in, &whole.out, NULL), CORE_OK);
        size_t esz = attn_dtype_size(c.dt);
        const void *kp[2] = {split.in.k, (const char *)split.in.k + 5 * 8 * esz};
        const void *vp[2] = {split.in.v, (const char *)split.in.v + 5 * 4 * esz};
        struct attn_kv_view kv = {.k = kp, .v = vp};
        struct split_job jobs[2] = {{&split, &kv, split.out, 0, 11, CORE_OK},
                                    {&split, &kv, split.out, 11, 28, CORE_OK}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&th[i], NULL, split_worker, &jobs[i]) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        CHECK(jobs[0].st == CORE_OK && jobs[1].st == CORE_OK);
        CHECK_EQ_INT(jobs[0].out.n_empty + jobs[1].out.n_empty, whole.out.n_empty);
        CHECK_EQ_INT(whole.out.n_empty, 4 * 2);
        double tol = dt == ATTN_F64 ? 1e-14 : 1e-6;
        for (size_t x = 0; x < 28 * 5; x++) {
            double a = get_val(split.scores, x, c.dt), b = get_val(whole.scores, x, c.dt);
            CHECK(a == b || fabs(a - b) <= tol);
            CHECK_NEAR(get_val(split.weights, x, c.dt), get_val(whole.weights, x, c.dt), tol);
        }
        for (size_t x = 0; x < 28 * 4; x++)
            CHECK_NEAR(get_val(split.output, x, c.dt), get_val(whole.output, x, c.dt), tol);
        CHECK(memcmp(split.empty, whole.empty, 28) == 0);
        CHECK_EQ_INT(attn_forward_kv_rows(&split.req, &split.in, &kv, &split.out, NULL, 5, 5),
                     CORE_EINVAL);
        CHECK_EQ_INT(attn_forward_kv_rows(&split.req, &split.in, &kv, &split.out, NULL, 0, 29),
                     CORE_EINVAL);
        tcore_free(&whole);
        tcore_free(&split);
        tcase_free(&c);
    }
}

/* The largest score magnitude among a row's unmasked keys (reference). */
static double row_magnitude(const struct tref *r, size_t row, size_t L)
{
    long double mag = 0;
    for (size_t j = 0; j < L; j++)
        if (!r->masked[row * L + j] && r->smag[row * L + j] > mag)
            mag = r->smag[row * L + j];
    return (double)mag;
}

/* Runs c split over its keys at random cut points (prepare_kv, then
 * forward_kv_keys per window, then combine) and compares with attn_forward.
 * Returns the number of problems. */
static int key_split_case(const struct tcase *c)
{
    struct tcore full, t;
    tcore_init(c, &full);
    tcore_init(c, &t);
    size_t esz = attn_dtype_size(c->dt), L = c->L, rows = c->h * c->n;
    enum core_status st_full = attn_forward(&full.req, &full.in, &full.out, NULL);
    /* prepared cache */
    char *kc = malloc(c->h_kv * L * c->dk * esz), *vc = malloc(c->h_kv * L * c->dv * esz);
    void *ko[8], *vo[8];
    const void *kp[8], *vp[8];
    for (size_t g = 0; g < c->h_kv; g++) {
        kp[g] = ko[g] = kc + g * L * c->dk * esz;
        vp[g] = vo[g] = vc + g * L * c->dv * esz;
    }
    attn_prepare_kv(&t.req.shape, &t.req.params, &t.in, L, 0, ko, vo);
    struct attn_kv_view kv = {.k = kp, .v = vp};
    size_t cuts[4] = {0, 0, 0, L}, np = 1 + rng_u64() % 3;
    if (np > L)
        np = L;
    for (size_t p = 1; p < np; p++)   /* strictly increasing cuts in (0, L) */
        cuts[p] = cuts[p - 1] + 1 + rng_u64() % (L - cuts[p - 1] - (np - p));
    cuts[np] = L;
    struct attn_partial parts[3];
    enum core_status st = CORE_OK;
    for (size_t p = 0; p < np; p++) {
        parts[p].o = malloc(rows * c->dv * esz);
        parts[p].m = malloc(rows * sizeof(double));
        parts[p].l = malloc(rows * sizeof(double));
        if (st == CORE_OK)
            st = attn_forward_kv_keys(&t.req, &t.in, &kv, &parts[p], NULL, cuts[p],
                                      cuts[p + 1]);
    }
    if (st == CORE_OK)
        st = attn_combine(&t.req, parts, np, &t.out);
    /* Both passes round their scores, in different orders (a window's dot
     * products need not be the whole pass's), so a weight may differ by
     * about the rounding of its row's largest score: the tolerance scales
     * as the reference comparison's does. */
    struct tref r;
    ref_attention(c, &r);
    int bad = 0;
    double base = c->dt == ATTN_F64 ? 2e-15 : 4e-7;
    double floor = c->dt == ATTN_F64 ? 1e-300 : 1e-35;
    if (st != st_full) {
        printf("    status %s vs full %s\n", core_status_name(st), core_status_name(st_full));
        bad++;
    } else if (st == CORE_OK) {
        for (size_t x = 0; x < rows * c->dv; x++) {
            size_t row = x / c->dv;
            double tol = base * (double)r.omag[row] * (1 + row_magnitude(&r, row, L)) + floor;
            double a = get_val(t.output, x, c->dt), b = get_val(full.output, x, c->dt);
            if (!(fabs(a - b) <= tol) && bad++ < 5)
                printf("    output [%zu] %.17g vs full %.17g\n", x, a, b);
        }
        if (t.out.n_empty != full.out.n_empty || memcmp(t.empty, full.empty, rows))
            bad++;
    }
    if (bad) {
        printf("    %zu windows, cuts %zu %zu %zu %zu\n", np, cuts[0], cuts[1], cuts[2], cuts[3]);
        print_case(c);
    }
    for (size_t p = 0; p < np; p++) {
        free(parts[p].o);
        free(parts[p].m);
        free(parts[p].l);
    }
    free(kc);
    free(vc);
    tref_free(&r);
    tcore_free(&full);
    tcore_free(&t);
    return bad;
}

/* Splitting the keys and combining equals the whole pass, for every option. */
TEST(key_split_equals_full)
{
    int failures = 0;
    for (int i = 0; i < t_cases(200) && failures < 3; i++) {
        struct tcase c;
        random_case(&c, i % 2 ? ATTN_F32 : ATTN_F64);
        c.outputs = ATTN_OUT_OUTPUT;
        failures += key_split_case(&c) != 0;
        tcase_free(&c);
    }
    CHECK(failures == 0);
    /* outputs other than OUTPUT alone cannot be split; bad windows */
    struct tcase c;
    plain_case(&c, ATTN_F64, 1, 1, 2, 5, 2, 2);
    struct tcore t;
    tcore_init(&c, &t);
    const void *kp[1] = {t.in.k}, *vp[1] = {t.in.v};
    struct attn_kv_view kv = {.k = kp, .v = vp};
    double o[4], m[2], l[2];
    struct attn_partial part = {o, m, l};
    CHECK_EQ_INT(attn_forward_kv_keys(&t.req, &t.in, &kv, &part, NULL, 0, 5), CORE_EINVAL);
    t.req.outputs = ATTN_OUT_OUTPUT;
    CHECK_EQ_INT(attn_forward_kv_keys(&t.req, &t.in, &kv, &part, NULL, 3, 3), CORE_EINVAL);
    CHECK_EQ_INT(attn_forward_kv_keys(&t.req, &t.in, &kv, &part, NULL, 0, 6), CORE_EINVAL);
    CHECK_EQ_INT(attn_forward_kv_keys(&t.req, &t.in, &kv, &part, NULL, 2, 5), CORE_OK);
    tcore_free(&t);
    tcase_free(&c);
}

/* Output only: the key-blocked path's scratch does not depend on L (no
 * [rows][L] block at all), and its results match the materialising pass. */
TEST(output_only_scratch_independent_of_L)
{
    size_t bytes[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        struct tcase c;
        plain_case(&c, ATTN_F32, 2, 1, 64, i ? 20000 : 3000, 8, 8);
        c.outputs = ATTN_OUT_OUTPUT;
        struct tcore t;
        tcore_init(&c, &t);
        struct attn_ws *ws = attn_ws_new();
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, ws), CORE_OK);
        bytes[i] = attn_ws_bytes(ws);
        attn_ws_free(ws);
        tcore_free(&t);
        c.outputs = ATTN_OUT_ALL;
        tcase_free(&c);
    }
    CHECK_EQ_INT(bytes[0], bytes[1]);
    CHECK(bytes[1] < 128 * 20000 * sizeof(float) / 8);
}

/* ---- the fused float32 kernel (core/attn_fused.c) ---------------------- */

/* An output-only float32 case with plain scores (what the fused kernel
 * takes): shapes across its group (48 rows in 1, 2 or 3 registers of 16),
 * micro-tile (8) and block (64 keys) edges, any causal mode, softmax
 * variant, q/k/v bias and RoPE. */
static void fused_case(struct tcase *c)
{
    static const size_t rows[] = {5, 20, 47, 48, 49, 80, 97, 130};
    static const size_t keys[] = {1, 7, 8, 63, 64, 65, 129, 200};
    static const size_t dims[] = {1, 3, 8, 9, 16, 33, 64};
    static const size_t heads[][2] = {{1, 1}, {2, 1}, {3, 3}};
    memset(c, 0, sizeof *c);
    c->dt = ATTN_F32;
    size_t hi = rng_u64() % 3;
    c->h = heads[hi][0];
    c->h_kv = heads[hi][1];
    c->n = rng_pick(rows, 8);
    c->L = rng_pick(keys, 8);
    c->dk = rng_pick(dims, 7);
    c->dv = rng_pick(dims, 7);
    c->rope = c->dk % 2 == 0 && rng_u64() % 3 == 0;
    c->base = 10000;
    c->bq = (int)(rng_u64() % 3);
    c->bk = (int)(rng_u64() % 3);
    c->bv = (int)(rng_u64() % 3);
    c->causal = (enum attn_causal)(rng_u64() % 3);
    c->scale = rng_u64() % 2 ? attn_default_scale(c->dk) : rng_uniform(0.05, 4);
    c->sm = (enum attn_softmax)(rng_u64() % 3);
    c->sink = rng_uniform(-3, 3);
    c->er = rng_u64() % 4 == 0 ? ATTN_EMPTY_ERROR : ATTN_EMPTY_ZERO;
    c->outputs = ATTN_OUT_OUTPUT;
    tcase_fill(c);
}

/* Every fused kernel this CPU runs (and none: the gemm loop) against the
 * long-double reference on the same cases: 400 for the widest, the first
 * 150 of them for each narrower one (test_kernels compares the kernels
 * themselves case by case); the build says whether it has a kernel
 * (x86-64 with AVX-512F and DQ: it must). */
TEST(fused_output_matches_reference)
{
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__x86_64__)
    CHECK(attn_fused_available());
#endif
    unsigned have = attn_kernel_supported();
    for (int k = ATTN_KERNEL_AVX512; k >= ATTN_KERNEL_NONE; k--) {
        if (!(have & (1u << k)))
            continue;
        attn_kernel_set((enum attn_kernel)k);
        printf("    fused kernel: %s\n", attn_kernel_name((enum attn_kernel)k));
        uint64_t seed = rng_state;
        struct attn_ws *ws = attn_ws_new();
        int failures = 0;
        int cases = t_cases(k == (int)attn_kernel_choose(ATTN_KERNEL_AUTO, have) ? 400 : 150);
        for (int i = 0; i < cases && failures <= 3; i++) {
            struct tcase c;
            fused_case(&c);
            failures += run_case(&c, i % 2 ? ws : NULL) != 0;
            tcase_free(&c);
        }
        CHECK(failures == 0);
        attn_ws_free(ws);
        if (k > ATTN_KERNEL_NONE)
            rng_state = seed;       /* the next kernel takes the same cases */
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* Output only (fused when available) == the materialising pass within
 * float rounding on a large causal case: several row tiles (512 rows on
 * the key-blocked pass, 192 on the fused kernels, 1 MiB of scores on the
 * materialising pass), superblocks of keys, ragged groups, d not a
 * multiple of 8. Quick: two tiles of the fused and materialising passes. */
TEST(fused_equals_materialised_large)
{
    size_t n = t_quick() ? 200 : 700;
    for (int cm = 0; cm < 3; cm++) {
        struct tcase c;
        plain_case(&c, ATTN_F32, 2, 1, n, 1500, 72, 67);
        c.causal = (enum attn_causal)cm;
        c.sm = (enum attn_softmax)cm;
        c.sink = 0.5;
        struct tcore full, fused;
        tcore_init(&c, &full);
        c.outputs = ATTN_OUT_OUTPUT;
        tcore_init(&c, &fused);
        CHECK_EQ_INT(attn_forward(&full.req, &full.in, &full.out, NULL), CORE_OK);
        CHECK_EQ_INT(attn_forward(&fused.req, &fused.in, &fused.out, NULL), CORE_OK);
        CHECK(max_output_diff(&c, &full, &fused) <= 1e-6);
        CHECK_EQ_INT(fused.out.n_empty, full.out.n_empty);
        CHECK(same_bytes(fused.empty, full.empty, 2 * n));
        tcore_free(&full);
        tcore_free(&fused);
        tcase_free(&c);
    }
}

/* Scores beyond FLT_MAX are CORE_ENONFINITE on the output-only path too
 * when a row sees them; beyond a row's causal limit they are not looked at,
 * even when the row's group computes them for its neighbour. */
TEST(fused_nonfinite_scores)
{
    struct tcase c;
    plain_case(&c, ATTN_F32, 1, 1, 60, 70, 4, 4);
    c.outputs = ATTN_OUT_OUTPUT;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;    /* row i sees keys [0, 11 + i) */
    for (size_t x = 0; x < 4; x++) {
        c.q[58 * 4 + x] = 1e20;             /* q58 · k69 overflows; 58 does not see 69 */
        c.k[69 * 4 + x] = 1e20;
    }
    struct tcore t;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    tcore_free(&t);
    for (size_t x = 0; x < 4; x++)
        c.q[59 * 4 + x] = 1e20;             /* row 59 sees key 69 */
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_ENONFINITE);
    tcore_free(&t);
    tcase_free(&c);
}

/* ---- the helper pool (attn_pool): split passes ------------------------- */

static void count_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    int *hits = arg;
    __atomic_fetch_add(&hits[piece], 1, __ATOMIC_RELAXED);
}

static bool never_help(void *arg)
{
    (void)arg;
    return false;
}

/* Every piece runs exactly once, with helpers, without a pool, and when
 * may_help refuses. */
TEST(pool_runs_every_piece_once)
{
    struct attn_pool *pools[3] = {attn_pool_new(1, NULL, NULL), NULL,
                                  attn_pool_new(2, never_help, NULL)};
    CHECK(pools[0] && pools[2]);
    for (int p = 0; p < 3; p++)
        for (size_t pieces = 1; pieces <= 37; pieces += 9) {
            int hits[37] = {0};
            attn_pool_run(pools[p], count_piece, hits, pieces, NULL);
            for (size_t i = 0; i < pieces; i++)
                CHECK_EQ_INT(hits[i], 1);
        }
    attn_pool_free(pools[0]);
    attn_pool_free(pools[2]);
    attn_pool_free(NULL);
}

/* Runs c on a workspace with a pool (matches the reference) and on one
 * without: they agree bit for bit (the pieces depend only on the request).
 * Quick: the bits alone; under qemu the reference's binary128 long double
 * took 122 of the test's 126 s, and fused_output_matches_reference holds
 * pool passes to it. */
static int pool_case(const struct tcase *c, struct attn_pool *pool)
{
    struct attn_ws *ws = attn_ws_new(), *plain = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    int bad = t_quick() ? 0 : run_case(c, ws);
    struct tcore a, b;
    tcore_init(c, &a);
    tcore_init(c, &b);
    enum core_status sa = attn_forward(&a.req, &a.in, &a.out, ws);
    enum core_status sb = attn_forward(&b.req, &b.in, &b.out, plain);
    size_t esz = attn_dtype_size(c->dt), hn = c->h * c->n;
    bad += sa != sb;
    if (sa == CORE_OK && sb == CORE_OK) {
        bad += a.out.n_empty != b.out.n_empty;
        bad += !same_bytes(a.empty, b.empty, hn);
        if (a.scores)
            bad += !same_bytes(a.scores, b.scores, hn * c->L * esz);
        if (a.weights)
            bad += !same_bytes(a.weights, b.weights, hn * c->L * esz);
        if (a.output)
            bad += !same_bytes(a.output, b.output, hn * c->dv * esz);
    }
    if (bad)
        print_case(c);
    tcore_free(&a);
    tcore_free(&b);
    attn_ws_free(ws);
    attn_ws_free(plain);
    return bad;
}

/* A prefill large enough to be split by row tiles over the pool: GQA,
 * causal, mask, ALiBi, RoPE, every output set, empty rows under both
 * policies. */
TEST(pool_split_prefill_matches)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    CHECK(pool != NULL);
    static const unsigned outs[] = {ATTN_OUT_ALL, ATTN_OUT_OUTPUT, ATTN_OUT_WEIGHTS};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 4; k++) {
            if (t_quick() && (dt + k) % 2)
                continue;   /* quick: each option in one dtype */
            struct tcase c;
            plain_case(&c, (enum attn_dtype)dt, 2, 1, 300, 161, 64, 16);
            tcase_free(&c);
            c.causal = k == 3 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
            c.mask = k == 1 ? 2 : 0;
            c.alibi = k == 2;
            c.rope = k == 0;
            c.er = k == 3 ? ATTN_EMPTY_ERROR : ATTN_EMPTY_ZERO;   /* n > L: empty rows */
            c.outputs = outs[k % 3];
            tcase_fill(&c);
            CHECK_EQ_INT(pool_case(&c, pool), 0);
            tcase_free(&c);
        }
    attn_pool_free(pool);
}

/* A long decode is split by key windows (with or without a pool) and
 * combined: equals the reference with GQA, RoPE, ALiBi, sinks, softmax1 and
 * masks that leave whole windows empty. */
TEST(decode_key_windows_match_reference)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    CHECK(pool != NULL);
    static const enum attn_softmax sms[] = {ATTN_SOFTMAX_STANDARD, ATTN_SOFTMAX_ONE,
                                            ATTN_SOFTMAX_SINK};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 3; k++) {
            if (t_quick() && (dt + k) % 2)
                continue;   /* quick: each option in one dtype */
            struct tcase c;
            plain_case(&c, (enum attn_dtype)dt, 4, 2, 1, 4099, 64, 64);
            tcase_free(&c);
            c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            c.rope = k == 0;
            c.alibi = k == 1;
            c.sm = sms[k];
            c.sink = 2.5;
            c.mask = k == 2 ? 1 : 0;
            c.outputs = ATTN_OUT_OUTPUT;
            tcase_fill(&c);
            if (c.mk)   /* only the last keys allowed: the early windows are empty */
                for (size_t j = 0; j < c.L; j++)
                    c.mk[j] = j + 100 >= c.L;
            CHECK_EQ_INT(pool_case(&c, pool), 0);
            tcase_free(&c);
        }
    attn_pool_free(pool);
}

struct pool_user {
    struct tcase *c;
    struct attn_pool *pool;
    int bad;
};

static void *pool_user_main(void *p)
{
    struct pool_user *u = p;
    for (int i = 0; i < 3; i++)
        u->bad += pool_case(u->c, u->pool);
    return NULL;
}

/* Two callers share one pool (as two server workers do): a caller that
 * finds it busy runs alone; the answers do not change. */
TEST(pool_shared_by_two_callers)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    CHECK(pool != NULL);
    struct tcase c;
    plain_case(&c, ATTN_F32, 2, 1, 200, 160, 64, 32);
    c.outputs = ATTN_OUT_OUTPUT;
    struct pool_user u[2] = {{&c, pool, 0}, {&c, pool, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, pool_user_main, &u[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(u[0].bad + u[1].bad, 0);
    c.outputs = ATTN_OUT_ALL;
    tcase_free(&c);
    attn_pool_free(pool);
}

int main(void)
{
    RUN(tiled_output_equals_materialised);
    RUN(forward_equals_prepare_plus_forward_kv);
    RUN(rows_split_across_threads);
    RUN(key_split_equals_full);
    RUN(output_only_scratch_independent_of_L);
    RUN(fused_output_matches_reference);
    RUN(fused_equals_materialised_large);
    RUN(fused_nonfinite_scores);
    RUN(pool_runs_every_piece_once);
    RUN(pool_split_prefill_matches);
    RUN(decode_key_windows_match_reference);
    RUN(pool_shared_by_two_callers);
    TEST_MAIN_END();
}
