/*
 * tests/unit/test_attn_models.c — the attention of current models (issue
 * 16) against an independent reference: batches, explicit positions,
 * packed segments, windows with sinks, softcap, per-head sinks, RoPE with
 * partial dims and every scaling.
 *
 * The cases and the long double reference are tests/models_ref.h's. Random
 * cases mix every option; named cases pin the edges (empty segments,
 * windows that empty a row, positions near 2^31, yarn with lo == hi, yarn
 * with and without truncate, broadcasting); then softcap's bounds and the
 * refusal of bad values. The promises between runs (a batch equals its
 * elements, the output's bits do not depend on how it was asked for) are
 * tests/unit/test_attn_models_equiv.c's.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_fused.h"
#include "core/rope.h"
#include "tests/harness.h"
#include "tests/models_ref.h"

/* ---- random cases ------------------------------------------------------- */

static void random_case(struct mc *c, enum attn_dtype dt)
{
    static const size_t hs[][2] = {{1, 1}, {2, 1}, {4, 2}, {3, 3}, {6, 2}};
    const size_t *hp = hs[rnd_int(5)];
    size_t B = rnd_int(3) == 0 ? 0 : 1 + rnd_int(3);
    size_t n = 1 + rnd_int(13), L = 1 + rnd_int(40);
    size_t dk = 2 * (1 + rnd_int(9)), dv = 1 + rnd_int(9);
    mc_init(c, dt, B, hp[0], hp[1], n, L, dk, dv);
    size_t Bn = B ? B : 1;
    c->causal = (enum attn_causal)rnd_int(3);
    c->sm = (enum attn_softmax)rnd_int(3);
    c->sink = rnd(-2, 2);
    if (c->sm == ATTN_SOFTMAX_SINK && rnd_int(2)) {
        c->sinks = malloc(c->h * sizeof(double));
        for (size_t i = 0; i < c->h; i++)
            c->sinks[i] = rnd_int(4) ? rnd(-3, 3) : -INFINITY;  /* -inf: no sink */
    }
    if (rnd_int(3) == 0)
        c->softcap = rnd(0.3, 3);
    if (rnd_int(2)) {
        c->rope = 1;
        c->pairs = (enum attn_rope_pairs)rnd_int(2);
        c->dims = rnd_int(2) ? 0 : 2 * rnd_int(dk / 2 + 1);
        if (c->dims == 2 && rnd_int(2))
            c->dims = 0;
        if (rnd_int(8) == 0)
            c->dims = ATTN_ROPE_DIMS_ZERO;
        set_rope_scaling(c, (enum attn_rope_scaling_type)rnd_int(5));
        size_t r = c->dims == ATTN_ROPE_DIMS_ZERO ? 0 : c->dims ? c->dims : dk;
        if (c->sc.type == ATTN_ROPE_SCALING_NTK && r <= 2)
            c->sc.type = ATTN_ROPE_SCALING_LINEAR;
    }
    c->alibi = rnd_int(4) == 0;
    if (rnd_int(2)) {
        c->win.on = true;
        c->win.left = rnd_int(3) ? (int64_t)rnd_int(L + 2) : -1;
        c->win.right = rnd_int(3) ? (int64_t)rnd_int(5) : -1;
        c->win.sinks = rnd_int(2) ? (int64_t)rnd_int(4) : 0;
    }
    if (rnd_int(3) == 0) {
        c->pqb = rnd_int(2) ? Bn : 1;
        c->pq = positions(c->pqb, n, (int64_t)rnd_int(2 * L), rnd_int(4) != 0);
    }
    if (rnd_int(3) == 0) {
        c->pkb = rnd_int(2) ? Bn : 1;
        c->pk = positions(c->pkb, L, (int64_t)rnd_int(3), rnd_int(4) != 0);
    }
    if (rnd_int(3) == 0)
        set_segments(c, rnd_int(2) ? Bn : 1, 1 + rnd_int(4), rnd_int(3) == 0);
    if (rnd_int(4) == 0) {
        size_t opts[3] = {1, c->h, Bn * c->h};
        c->abh = opts[rnd_int(3)];
        c->ab = rnd_arr(c, c->abh * n * L, -1, 1);
        for (size_t i = 0; i < c->abh * n * L; i++)
            if (rnd_int(9) == 0)
                c->ab[i] = -INFINITY;
    }
    if (rnd_int(4) == 0) {
        size_t opts[3] = {1, c->h, Bn * c->h};
        c->mkh = opts[rnd_int(3)];
        c->mk = malloc(c->mkh * n * L);
        for (size_t i = 0; i < c->mkh * n * L; i++)
            c->mk[i] = rnd_int(5) != 0;
    }
    if (rnd_int(3) == 0) {
        c->bqh = rnd_int(2) ? c->h : 1;
        c->bq = rnd_arr(c, c->bqh * dk, -0.5, 0.5);
    }
    if (rnd_int(3) == 0) {
        c->bkh = rnd_int(2) ? c->hkv : 1;
        c->bk = rnd_arr(c, c->bkh * dk, -0.5, 0.5);
    }
    if (rnd_int(3) == 0) {
        c->bvh = rnd_int(2) ? c->hkv : 1;
        c->bv = rnd_arr(c, c->bvh * dv, -0.5, 0.5);
    }
    static const unsigned outs[] = {ATTN_OUT_ALL, ATTN_OUT_OUTPUT, ATTN_OUT_WEIGHTS,
                                    ATTN_OUT_SCORES | ATTN_OUT_OUTPUT};
    c->outputs = outs[rnd_int(4)];
}

TEST(random_cases)
{
    struct attn_ws *ws = attn_ws_new();
    for (int t = 0; t < t_cases(800); t++) {
        struct mc c;
        random_case(&c, t % 2 ? ATTN_F32 : ATTN_F64);
        check_case(&c, ws);
        mc_free(&c);
    }
    attn_ws_free(ws);
}

/* Larger shapes: the tiled, key-blocked and fused paths with windows,
 * segments and positions (output only takes the key-blocked path). */
TEST(large_cases)
{
    struct attn_ws *ws = attn_ws_new();
    unsigned have = attn_kernel_supported();
    for (int kk = 0; kk <= ATTN_KERNEL_AVX512; kk++) {
    if (!(have & (1u << kk)))
        continue;
    attn_kernel_set((enum attn_kernel)kk);
    for (int t = 0; t < 14; t++) {
        if (t % 2 == 0 && kk != ATTN_KERNEL_NONE)
            continue;               /* float64 takes no fused kernel: once */
        struct mc c;
        enum attn_dtype dt = t % 2 ? ATTN_F32 : ATTN_F64;
        /* quick: a quarter of the queries, every path still taken (the
         * keys decide the blocks and superblocks) */
        size_t n = (300 + 37 * (size_t)t) / (t_quick() ? 4 : 1);
        mc_init(&c, dt, t % 3 == 0 ? 2 : 0, 2, 1, n, 700, 32, 16);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.outputs = t % 4 < 2 ? ATTN_OUT_OUTPUT : ATTN_OUT_ALL;
        switch (t / 2) {
        case 0:
            c.win = (struct attn_window){true, 100, -1, 4};
            break;
        case 1:
            set_segments(&c, 1, 5, false);
            break;
        case 2:
            c.pkb = 1;
            c.pk = positions(1, c.L, 0, true);
            c.pqb = 1;
            c.pq = positions(1, c.n, 300, true);
            break;
        case 3:
            c.win = (struct attn_window){true, 64, 8, 0};
            c.causal = ATTN_CAUSAL_NONE;
            c.softcap = 2;
            break;
        case 4:
            set_segments(&c, 1, 3, true);
            c.win = (struct attn_window){true, 50, -1, 2};
            break;
        case 6:                     /* the fused kernel's window and softcap */
            c.win = (struct attn_window){true, 90, -1, 0};
            c.softcap = 1.5;
            set_segments(&c, 1, 2, false);
            break;
        default:
            c.sm = ATTN_SOFTMAX_SINK;
            c.sinks = malloc(2 * sizeof(double));
            c.sinks[0] = -1;
            c.sinks[1] = 2;
            c.rope = 1;
            c.dims = 16;
            set_rope_scaling(&c, ATTN_ROPE_SCALING_YARN);
            break;
        }
        check_case(&c, ws);
        mc_free(&c);
    }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
    attn_ws_free(ws);
}

/* ---- named edges --------------------------------------------------------- */

/* A query segment with no keys is an empty row; a key segment without
 * queries is never read. */
TEST(empty_segments)
{
    struct mc c;
    mc_init(&c, ATTN_F64, 0, 1, 1, 4, 5, 4, 3);
    c.sgb = 1;
    c.sq = ints(4);
    c.sk = ints(5);
    int64_t sq[4] = {0, 7, 0, 2}, sk[5] = {0, 0, 2, 9, 2};
    memcpy(c.sq, sq, sizeof sq);
    memcpy(c.sk, sk, sizeof sk);
    struct cres x;
    CHECK_EQ_INT(core_run(&c, &x, NULL), CORE_OK);
    CHECK(x.out.empty[1] == 1 && x.out.empty[0] == 0 && x.out.empty[3] == 0);
    CHECK_EQ_INT(x.out.n_empty, 1);
    for (size_t t = 0; t < 3; t++)
        CHECK(val(x.out.output, 1 * 3 + t, ATTN_F64) == 0);
    struct rres r;
    ref_run(&c, &r);
    CHECK(compare(&c, &x, &r));
    rres_free(&r);
    core_free(&x);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;    /* then counted positions matter */
    check_case(&c, NULL);
    mc_free(&c);
}

/* Keys at even positions, queries at odd ones, window {0, 0}: no key is
 * allowed; with sinks 1 the key at position 0 is. */
TEST(window_empties_rows)
{
    struct mc c;
    mc_init(&c, ATTN_F32, 0, 2, 1, 3, 6, 4, 2);
    c.pqb = c.pkb = 1;
    c.pq = ints(3);
    c.pk = ints(6);
    for (size_t i = 0; i < 3; i++)
        c.pq[i] = 2 * (int64_t)i + 1;
    for (size_t j = 0; j < 6; j++)
        c.pk[j] = 2 * (int64_t)j;
    c.win = (struct attn_window){true, 0, 0, 0};
    struct cres x;
    CHECK_EQ_INT(core_run(&c, &x, NULL), CORE_OK);
    CHECK_EQ_INT(x.out.n_empty, 6);
    core_free(&x);
    c.win.sinks = 1;
    CHECK_EQ_INT(core_run(&c, &x, NULL), CORE_OK);
    CHECK_EQ_INT(x.out.n_empty, 0);
    for (size_t row = 0; row < 6; row++)
        CHECK(val(x.out.weights, row * 6, ATTN_F32) == 1.0);
    core_free(&x);
    c.win = (struct attn_window){true, 1, 0, 0};
    check_case(&c, NULL);
    c.win.left = -1;
    c.win.right = 1;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    check_case(&c, NULL);
    mc_free(&c);
}

/* A tile whose rows lie in two segments: the first segment's row sees
 * keys [0, 6) as one interval (its sinks touch its window), the second's
 * rows see their sinks at key L0 apart from their window near the end.
 * The tile's keys must start at 0, not at the later segment's sinks: the
 * scores pass left the first row's scores unwritten (garbage or 422), the
 * key-blocked pass (L0 = 600, past its 512-key blocks) skipped its keys
 * and answered it as an empty row. */
TEST(sinks_of_a_later_segment)
{
    static const size_t L0s[2] = {4, 600};
    for (int t = 0; t < 4; t++) {
        size_t L0 = L0s[t / 2], L1 = 100, n = 5;
        struct mc c;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 1, 1, n, L0 + L1, 4, 2);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.win = (struct attn_window){true, 10, -1, 1};
        c.outputs = t < 2 ? ATTN_OUT_ALL : ATTN_OUT_OUTPUT;
        c.sgb = c.pqb = c.pkb = 1;
        c.sq = ints(n);
        c.sk = ints(L0 + L1);
        c.pq = ints(n);
        c.pk = ints(L0 + L1);
        c.pq[0] = 3;
        for (size_t i = 1; i < n; i++) {
            c.sq[i] = 1;
            c.pq[i] = (int64_t)L1 - 1;
        }
        for (size_t j = 0; j < L0 + L1; j++) {
            c.sk[j] = j >= L0;
            c.pk[j] = (int64_t)(j < L0 ? j : j - L0);
        }
        check_case(&c, NULL);
        mc_free(&c);
    }
}

/* Positions near 2^31 (and past it): RoPE, ALiBi and the window read them. */
TEST(huge_positions)
{
    for (int t = 0; t < 4; t++) {
        struct mc c;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 2, 2, 5, 9, 8, 4);
        int64_t base = t < 2 ? ((int64_t)1 << 31) - 20 : ((int64_t)1 << 33) + 5;
        c.pqb = c.pkb = 1;
        c.pq = positions(1, 5, base + 6, true);
        c.pk = positions(1, 9, base, true);
        c.rope = 1;
        c.alibi = 1;
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.win = (struct attn_window){true, 6, -1, base + 2};
        check_case(&c, NULL);
        mc_free(&c);
    }
}

/* yarn whose correction range collapses (lo == hi: hi += 0.001), and one
 * with both ends clamped to 0; each against the reference and, through
 * the reference's own frequencies, distinct from plain RoPE. */
TEST(yarn_lo_equals_hi)
{
    double Ms[2] = {1, 2 * M_PI * 32 * 10000.0};  /* both ends <= 0; c(32) = r/2 */
    for (int t = 0; t < 2; t++) {
        struct mc c;
        mc_init(&c, ATTN_F64, 0, 1, 1, 3, 7, 8, 2);
        c.rope = 1;
        c.sc = (struct attn_rope_scaling){ATTN_ROPE_SCALING_YARN, 4, 0, 0, Ms[t], 32, 32, 0, false};
        if (t == 1)
            c.sc.beta_slow = 32;    /* c(fast) = c(slow) = 4, an integer */
        check_case(&c, NULL);
        mc_free(&c);
    }
}

/* Every scaling against the reference at positions where they differ. */
TEST(rope_scalings)
{
    for (int t = 0; t < 20; t++) {
        struct mc c;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 2, 1, 4, 6, 16, 3);
        c.rope = 1;
        c.pairs = (enum attn_rope_pairs)(t / 2 % 2);
        c.dims = t % 3 == 0 ? 8 : 0;
        set_rope_scaling(&c, (enum attn_rope_scaling_type)(t % 5));
        c.sc.no_truncate = c.sc.type == ATTN_ROPE_SCALING_YARN && t / 5 % 2;
        c.pqb = c.pkb = 1;
        c.pq = positions(1, 4, 500, true);
        c.pk = positions(1, 6, 10, true);
        check_case(&c, NULL);
        mc_free(&c);
    }
}

/* YaRN's frequencies, attn_rope_inv_freq against the long double
 * reference for both truncate values over rotated dims, bases, original
 * lengths, betas and factors: within 1e-14 relative, each between f/factor
 * and f. gpt-oss's setting (base 150000, r 64, factor 32, M 4096, betas 32
 * and 1) has its range at (8.09, 17.40) unrounded, [8, 18] rounded: the
 * pairs 9..17 differ, the most by 76 %, as the numerics review measured. */
TEST(yarn_truncate_freqs)
{
    static const size_t rs[] = {4, 8, 16, 32, 64, 128};
    static const double bases[] = {10000, 150000, 500000};
    static const double Ms[] = {256, 2048, 4096};
    static const double betas[][2] = {{32, 1}, {16, 2}, {64, 0.5}, {8, 8}};
    static const double factors[] = {1, 4, 32, 40};
    double worst = 0;
    int differ = 0;
    for (size_t a = 0; a < 6; a++)
    for (size_t b = 0; b < 3; b++)
    for (size_t m = 0; m < 3; m++)
    for (size_t e = 0; e < 4; e++)
    for (size_t g = 0; g < 4; g++)
    for (int nt = 0; nt < 2; nt++) {
        struct mc c = {0};
        struct attn_params p = {0};
        c.base = p.rope_base = bases[b];
        c.sc = (struct attn_rope_scaling){.type = ATTN_ROPE_SCALING_YARN,
            .factor = factors[g], .original_max_position = Ms[m],
            .beta_fast = betas[e][0], .beta_slow = betas[e][1], .no_truncate = nt};
        p.rope = true;
        p.rope_scaling = c.sc;
        CHECK_EQ_INT(attn_rope_check(&p, rs[a]), CORE_OK);
        for (size_t i = 0; i < rs[a] / 2; i++) {
            long double want = ref_inv_freq(&c, rs[a], i);
            double got = attn_rope_inv_freq(&p, rs[a], i);
            double err = (double)fabsl(((long double)got - want) / want);
            worst = err > worst ? err : worst;
            double f = pow(bases[b], -2.0 * (double)i / (double)rs[a]);
            CHECK(got <= f * (1 + 1e-15) && got >= f / factors[g] * (1 - 1e-15));
            p.rope_scaling.no_truncate = !nt;
            differ += attn_rope_inv_freq(&p, rs[a], i) != got;
            p.rope_scaling.no_truncate = nt;
        }
    }
    /* 6.1e-15 here; 1.4e-14 under valgrind, whose long double has a
     * double's 53 bits */
    CHECK(worst <= 4e-14);
    CHECK(differ > 0);

    /* gpt-oss */
    struct attn_params p = {0};
    p.rope = true;
    p.rope_base = 150000;
    p.rope_scaling = (struct attn_rope_scaling){.type = ATTN_ROPE_SCALING_YARN,
        .factor = 32, .original_max_position = 4096, .beta_fast = 32, .beta_slow = 1};
    double most = 0;
    int first = -1, last = -1;
    for (size_t i = 0; i < 32; i++) {
        double t = attn_rope_inv_freq(&p, 64, i);
        p.rope_scaling.no_truncate = true;
        double u = attn_rope_inv_freq(&p, 64, i);
        p.rope_scaling.no_truncate = false;
        double rel = fabs(t - u) / u;
        if (rel > 1e-12) {
            first = first < 0 ? (int)i : first;
            last = (int)i;
        }
        most = rel > most ? rel : most;
    }
    CHECK_EQ_INT(first, 9);
    CHECK_EQ_INT(last, 17);
    CHECK(most > 0.75 && most < 0.77);

    /* truncate is a yarn setting: another scaling with it is refused */
    p.rope_scaling = (struct attn_rope_scaling){.type = ATTN_ROPE_SCALING_LINEAR,
        .factor = 2, .no_truncate = true};
    CHECK_EQ_INT(attn_rope_check(&p, 64), CORE_EINVAL);
    p.rope_scaling.no_truncate = false;
    CHECK_EQ_INT(attn_rope_check(&p, 64), CORE_OK);
}

/* attn_bias / mask of 1, h and B·h heads; positions and segments of 1 or B
 * batches; bias vectors shared or per head. */
TEST(batch_broadcasting)
{
    size_t hopts[3] = {1, 3, 2 * 3};
    for (int t = 0; t < 9; t++) {
        struct mc c;
        mc_init(&c, ATTN_F64, 2, 3, 1, 4, 6, 4, 3);
        c.abh = hopts[t % 3];
        c.ab = rnd_arr(&c, c.abh * 4 * 6, -1, 1);
        c.mkh = hopts[t / 3];
        c.mk = malloc(c.mkh * 4 * 6);
        for (size_t i = 0; i < c.mkh * 4 * 6; i++)
            c.mk[i] = rnd_int(4) != 0;
        c.pqb = t % 2 ? 2 : 1;
        c.pq = positions(c.pqb, 4, 3, true);
        set_segments(&c, t % 3 == 1 ? 2 : 1, 2, t % 2 == 0);
        c.bqh = 3;
        c.bq = rnd_arr(&c, 3 * 4, -1, 1);
        c.bkh = 1;
        c.bk = rnd_arr(&c, 4, -1, 1);
        c.rope = 1;
        check_case(&c, NULL);
        mc_free(&c);
    }
}

/* Softcap keeps every score in (-c, c), and order. */
TEST(softcap_bounded_monotone)
{
    struct mc c;
    mc_init(&c, ATTN_F64, 0, 1, 1, 1, 64, 4, 1);
    for (size_t j = 0; j < 64; j++)
        for (size_t t = 0; t < 4; t++)
            c.k[j * 4 + t] = ((double)j - 32) / 8 * (t == 0);
    for (size_t t = 0; t < 4; t++)
        c.q[t] = t == 0 ? 10 : 0;
    c.softcap = 3;
    c.scale = 1;
    struct cres x;
    CHECK_EQ_INT(core_run(&c, &x, NULL), CORE_OK);
    for (size_t j = 0; j < 64; j++) {
        double s = val(x.out.scores, j, ATTN_F64);
        CHECK(s >= -3 && s <= 3 && fabs(s) < fabs(((double)j - 32) * 10 / 8) + 1e-12);
        if (j)
            CHECK(s >= val(x.out.scores, j - 1, ATTN_F64));
    }
    core_free(&x);
    mc_free(&c);
}

/* Bad values of the new fields are refused before anything runs. */
TEST(validation)
{
    struct mc c;
    mc_init(&c, ATTN_F64, 2, 2, 1, 3, 4, 4, 2);
    struct cres x;
    core_setup(&c, &x);
    struct attn_request r = x.rq;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.softcap = -1;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = x.rq;
    r.params.rope = true;
    r.params.rope_dims = 3;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r.params.rope_dims = 6;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r.params.rope_dims = 2;
    r.params.rope_scaling.type = ATTN_ROPE_SCALING_NTK;
    r.params.rope_scaling.factor = 2;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);     /* ntk needs r > 2 */
    r.params.rope_dims = 4;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.rope_scaling.type = ATTN_ROPE_SCALING_LLAMA3;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);     /* missing parameters */
    r.params.rope_scaling = (struct attn_rope_scaling){ATTN_ROPE_SCALING_YARN, 2, 0, 0, 64, 32, 1, 0, false};
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.rope_base = 1;             /* yarn divides by ln base */
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.rope_base = 10000;
    r.params.rope_scaling.type = (enum attn_rope_scaling_type)9;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = x.rq;
    int64_t pq[6] = {0, 1, 2, 3, -1, 5};
    r.pos_q = pq;
    r.pos_q_batches = 2;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);     /* negative */
    pq[4] = 4;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.pos_q_batches = 3;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = x.rq;
    int64_t sq[3] = {0}, sk[4] = {0};
    r.seg_q = sq;
    r.seg_batches = 1;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);     /* q without k */
    r.seg_k = sk;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r = x.rq;
    r.window = (struct attn_window){true, 1, 1, -1};
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = x.rq;
    r.attn_bias = x.q;              /* not read by the check */
    r.attn_bias_heads = 3;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r.attn_bias_heads = 4;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r = x.rq;
    r.params.softmax = ATTN_SOFTMAX_SINK;
    double sinks[2] = {0, INFINITY};
    r.params.sink_logits = sinks;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    core_free(&x);
    mc_free(&c);
}

int main(void)
{
    RUN(random_cases);
    RUN(large_cases);
    RUN(empty_segments);
    RUN(window_empties_rows);
    RUN(sinks_of_a_later_segment);
    RUN(huge_positions);
    RUN(yarn_lo_equals_hi);
    RUN(rope_scalings);
    RUN(yarn_truncate_freqs);
    RUN(batch_broadcasting);
    RUN(softcap_bounded_monotone);
    RUN(validation);
    TEST_MAIN_END();
}
