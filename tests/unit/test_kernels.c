/*
 * tests/unit/test_kernels.c — the fused kernels (core/attn_fused.h), each
 * against one long-double reference on the same cases, and the choice
 * among them.
 *
 * ref_rows below computes attn_fused_rows' contract (m, l and the
 * unnormalised O of each row over the keys it sees) with plain loops in
 * long double, written from the header and not from the kernels. Every
 * kernel this machine runs takes the same generated cases (seeded once per
 * kernel): row counts across both kernels' groups (16 and 48 rows) and
 * their registers, key counts across their micro-tiles (6, 8) and blocks
 * (64, 96), widths that leave partial tiles, ragged per-row limits with
 * empty rows, superblocks of keys, large and tiny scores. Then the same
 * through attn_forward (the path a request takes) per kernel; scores that
 * overflow; the choice: names, fallbacks on made-up CPUs, and what this
 * CPU supports read independently from /proc/cpuinfo; superblocks handed
 * over by the span callback (pages) give the bits of one block; and the
 * rows per tile of a fused pass.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_fused.h"
#include "tests/harness.h"

static uint64_t rng_state;

static uint64_t rng_u64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_u64() >> 11) / 9007199254740992.0;
}

static size_t rng_pick(const size_t *v, size_t nv)
{
    return v[rng_u64() % nv];
}

static float *rnd_floats(size_t count, double lo, double hi)
{
    float *a = malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++)
        a[i] = (float)rng_uniform(lo, hi);
    return a;
}

/* The kernels this build and CPU run, widest first, NONE last. */
static int kernels_here(enum attn_kernel *k)
{
    unsigned have = attn_kernel_supported();
    int n = 0;
    for (int i = ATTN_KERNEL_AVX512; i >= ATTN_KERNEL_NONE; i--)
        if (have & (1u << i))
            k[n++] = (enum attn_kernel)i;
    return n;
}

/* ---- the reference of attn_fused_rows' contract ------------------------ */

struct kcase {
    size_t nb, L, dk, dv;
    float scale;
    float *q, *k, *v;           /* [nb][dk], [L][dk], [L][dv] */
    int32_t *lim;               /* [nb]: row t sees keys [lo[t], lim[t]) */
    int32_t *lo;                /* [nb], or NULL: 0 */
    float cap;                  /* softcap c > 0, or 0 */
};

static size_t kc_lo(const struct kcase *c, size_t t)
{
    return c->lo ? (size_t)c->lo[t] : 0;
}

/* -> m, l [nb], O [nb][dv] as attn_fused.h defines them (natural base);
 * mag [nb]: the largest scale·Σ|q·k| of a row's scores (for tolerances). */
static void ref_rows(const struct kcase *c, long double *m, long double *l, long double *O,
                     long double *mag)
{
    for (size_t t = 0; t < c->nb; t++) {
        long double mx = -INFINITY, sum = 0;
        mag[t] = 0;
        long double *s = malloc((c->L ? c->L : 1) * sizeof(long double));
        for (size_t j = kc_lo(c, t); j < (size_t)c->lim[t]; j++) {
            long double acc = 0, am = 0;
            for (size_t x = 0; x < c->dk; x++) {
                long double p = (long double)c->q[t * c->dk + x] * c->k[j * c->dk + x];
                acc += p;
                am += fabsl(p);
            }
            s[j] = acc * c->scale;
            if (c->cap > 0)
                s[j] = c->cap * tanhl(s[j] / c->cap);
            mx = s[j] > mx ? s[j] : mx;
            mag[t] = am * c->scale > mag[t] ? am * c->scale : mag[t];
        }
        for (size_t x = 0; x < c->dv; x++)
            O[t * c->dv + x] = 0;
        for (size_t j = kc_lo(c, t); j < (size_t)c->lim[t]; j++) {
            long double w = expl(s[j] - mx);
            sum += w;
            for (size_t x = 0; x < c->dv; x++)
                O[t * c->dv + x] += w * c->v[j * c->dv + x];
        }
        m[t] = mx;
        l[t] = sum;
        free(s);
    }
}

/* One generated case: `big` picks sizes past a superblock of keys. */
static void kcase_make(struct kcase *c, bool big)
{
    static const size_t rows[] = {1, 5, 7, 8, 9, 15, 16, 17, 33, 47, 48, 49, 97, 130};
    static const size_t keys[] = {1, 5, 6, 7, 8, 63, 64, 65, 95, 96, 97, 200};
    static const size_t dims[] = {1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 33, 64};
    c->nb = big ? 40 : rng_pick(rows, sizeof rows / sizeof *rows);
    c->L = big ? 1100 + rng_u64() % 200 : rng_pick(keys, sizeof keys / sizeof *keys);
    c->dk = big ? 64 + rng_u64() % 3 : rng_pick(dims, sizeof dims / sizeof *dims);
    c->dv = big ? 64 + rng_u64() % 5 : rng_pick(dims, sizeof dims / sizeof *dims);
    /* mostly softmax-sized scores; sometimes large ones (weights far below
     * FLT_MIN of the row's largest) */
    double mag = rng_u64() % 4 == 0 ? 40.0 / sqrt((double)c->dk) : 1.0;
    c->scale = (float)(rng_u64() % 2 ? 1.0 / sqrt((double)c->dk) : rng_uniform(0.05, 4));
    c->q = rnd_floats(c->nb * c->dk, -mag, mag);
    c->k = rnd_floats(c->L * c->dk, -mag, mag);
    c->v = rnd_floats(c->L * c->dv, -1, 1);
    c->lim = malloc(c->nb * sizeof(int32_t));
    int mode = (int)(rng_u64() % 4);    /* all keys, causal-like, random, some empty */
    for (size_t t = 0; t < c->nb; t++) {
        size_t x = c->L;
        if (mode == 1)
            x = c->L - c->nb + t + 1 > c->L || c->nb > c->L + t ? (c->nb > c->L + t ? 0 : c->L)
                                                                : c->L - c->nb + t + 1;
        else if (mode == 2)
            x = rng_u64() % (c->L + 1);
        else if (mode == 3)
            x = rng_u64() % 3 == 0 ? 0 : c->L;
        c->lim[t] = (int32_t)x;
    }
    c->lo = NULL;
    c->cap = 0;
    if (rng_u64() % 3 == 0) {           /* windows: rows see [lo, lim) */
        c->lo = malloc(c->nb * sizeof(int32_t));
        size_t w = 1 + rng_u64() % (c->L + 1);
        for (size_t t = 0; t < c->nb; t++) {
            size_t x = (size_t)c->lim[t];
            c->lo[t] = (int32_t)(rng_u64() % 4 == 0 ? rng_u64() % (c->L + 1) : (x > w ? x - w : 0));
        }
    }
    if (rng_u64() % 4 == 0)
        c->cap = (float)rng_uniform(0.3, 6);
}

static void kcase_free(struct kcase *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->lim);
    free(c->lo);
}

/* The kernel in use on case c against the reference: failures counted. */
static int check_case(const struct kcase *c)
{
    size_t nb = c->nb, dv = c->dv;
    float *O = malloc(nb * dv * sizeof(float)), *m = malloc(nb * sizeof(float));
    double *l = malloc(nb * sizeof(double));
    size_t sf = attn_fused_scratch_floats(nb, c->dk, dv);
    float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
    long double *rm = malloc(nb * sizeof(long double)), *rl = malloc(nb * sizeof(long double));
    long double *rO = malloc(nb * dv * sizeof(long double));
    long double *mag = malloc(nb * sizeof(long double));
    ref_rows(c, rm, rl, rO, mag);
    int bad = 0;
    int32_t *zero = calloc(nb, sizeof(int32_t));
    struct attn_fused_keys keys = {c->lo ? c->lo : zero, c->lim, c->cap, NULL, 0, 0, 0, NULL,
                                   NULL, NULL, NULL};
    if (!attn_fused_rows(c->q, nb, c->dk, c->scale, c->k, c->v, dv, &keys, O, m, l,
                         scratch)) {
        bad = 1;
        printf("    %s: refused nb=%zu L=%zu dk=%zu dv=%zu\n",
               attn_kernel_name(attn_kernel_active()), nb, c->L, c->dk, dv);
    }
    for (size_t t = 0; t < nb && !bad; t++) {
        if (kc_lo(c, t) >= (size_t)c->lim[t]) {     /* sees nothing: -inf, 0, a zero row */
            bad |= !(isinf(m[t]) && m[t] < 0) || l[t] != 0;
            for (size_t x = 0; x < dv; x++)
                bad |= O[t * dv + x] != 0;
        } else {
            /* each score is within d about a float rounding of the row's
             * magnitude (the sum of d_k products, the base-2 scale), m
             * within that and its own round trip; a weight exp(s - m)
             * within twice that relative, so l and O normalised too */
            long double del = FLT_EPSILON * ((long double)(c->dk + 2) * mag[t] + 2 * fabsl(rm[t]) +
                                             4 * c->cap);     /* tanh's own rounding */
            bad |= !(fabsl((long double)m[t] - rm[t]) <= del);
            long double rel = 2 * del < 1 ? expm1l(2 * del) + 2e-6L : INFINITY;
            bad |= !(fabsl((long double)l[t] - rl[t]) <= rel * rl[t]);
            for (size_t x = 0; x < dv; x++) {
                long double o = (long double)O[t * dv + x] / l[t], ro = rO[t * dv + x] / rl[t];
                bad |= !(fabsl(o - ro) <= 2 * rel);     /* |V| <= 1 */
            }
        }
        if (bad)
            printf("    %s: row %zu of nb=%zu L=%zu dk=%zu dv=%zu lim=%d: m %g (%Lg) l %g "
                   "(%Lg)\n", attn_kernel_name(attn_kernel_active()), t, nb, c->L, c->dk, dv,
                   (int)c->lim[t], (double)m[t], rm[t], l[t], rl[t]);
    }
    free(zero);
    free(O);
    free(m);
    free(l);
    free(scratch);
    free(rm);
    free(rl);
    free(rO);
    free(mag);
    return bad;
}

/* ---- the tests ---------------------------------------------------------- */

/* Every kernel here on the same 300 cases (+ 6 past a superblock); NONE
 * runs no kernel (the caller's gemm loop takes over). */
TEST(every_kernel_matches_reference)
{
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk; i++) {
        CHECK_EQ_INT(attn_kernel_set(ks[i]), ks[i]);
        printf("    kernel %s\n", attn_kernel_name(ks[i]));
        rng_state = 0x9e3779b97f4a7c15ull;
        int failures = 0;
        for (int c = 0; c < 306 && failures <= 3; c++) {
            struct kcase kc;
            kcase_make(&kc, c >= 300);
            if (ks[i] == ATTN_KERNEL_NONE) {
                float o, m;
                double l;
                int32_t zero = 0;
                struct attn_fused_keys keys = {&zero, kc.lim, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL};
                CHECK(!attn_fused_rows(kc.q, 1, kc.dk, kc.scale, kc.k, kc.v, kc.dv, &keys,
                                       &o, &m, &l, NULL));
                CHECK(!attn_fused_available());
            } else {
                failures += check_case(&kc);
            }
            kcase_free(&kc);
        }
        CHECK(failures == 0);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* A score some row sees that overflows in base 2 is refused (false); one
 * only a neighbour in the same group computes, beyond the row's limit, is
 * not looked at. Per kernel. */
TEST(every_kernel_refuses_nonfinite_seen_scores)
{
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk && ks[i] != ATTN_KERNEL_NONE; i++) {
        attn_kernel_set(ks[i]);
        struct kcase c = {20, 30, 4, 4, 1.0f, NULL, NULL, NULL, NULL, NULL, 0};
        rng_state = 7;
        c.q = rnd_floats(20 * 4, -1, 1);
        c.k = rnd_floats(30 * 4, -1, 1);
        c.v = rnd_floats(30 * 4, -1, 1);
        c.lim = malloc(20 * sizeof(int32_t));
        for (size_t t = 0; t < 20; t++)
            c.lim[t] = (int32_t)(11 + t);       /* row t sees keys [0, 11 + t) */
        for (size_t x = 0; x < 4; x++) {
            c.q[18 * 4 + x] = 1e20f;            /* q18 · k29 overflows; 18 sees up to 28 */
            c.k[29 * 4 + x] = 1e20f;
        }
        CHECK(check_case(&c) == 0);
        for (size_t x = 0; x < 4; x++)
            c.q[19 * 4 + x] = 1e20f;            /* row 19 sees key 29 */
        float O[20 * 4], m[20];
        double l[20];
        size_t sf = attn_fused_scratch_floats(20, 4, 4);
        float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
        int32_t zero[20] = {0};
        struct attn_fused_keys keys = {zero, c.lim, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL};
        CHECK(!attn_fused_rows(c.q, 20, 4, 1.0f, c.k, c.v, 4, &keys, O, m, l, scratch));
        free(scratch);
        kcase_free(&c);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* Output-only attn_forward (the fused path) per kernel, against a
 * long-double softmax(QKᵀ)V: causal modes (with rows that see nothing),
 * GQA, several row tiles and key superblocks. */
TEST(every_kernel_through_attn_forward)
{
    static const size_t shapes[][6] = {
        /* h, h_kv, n, L, dk, dv */
        {1, 1, 300, 700, 64, 64}, {2, 1, 130, 97, 33, 17}, {1, 1, 900, 600, 128, 128},
        {4, 2, 50, 1500, 16, 8},
    };
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    /* quick (under qemu-user: software long double): the two small shapes */
    size_t nshapes = t_quick() ? 2 : sizeof shapes / sizeof *shapes;
    for (int i = 0; i < nk; i++) {
        attn_kernel_set(ks[i]);
        rng_state = 0x1234567ull;
        for (size_t sh = 0; sh < nshapes; sh++)
            for (int cm = 0; cm < 3; cm++) {
                size_t h = shapes[sh][0], hk = shapes[sh][1], n = shapes[sh][2];
                size_t L = shapes[sh][3], dk = shapes[sh][4], dv = shapes[sh][5];
                float *q = rnd_floats(h * n * dk, -1, 1), *k = rnd_floats(hk * L * dk, -1, 1);
                float *v = rnd_floats(hk * L * dv, -1, 1);
                float *o = malloc(h * n * dv * sizeof(float));
                uint8_t *empty = malloc(h * n);
                struct attn_request r = {0};
                r.shape = (struct attn_shape){.h = h, .h_kv = hk, .n = n, .L = L, .d_k = dk, .d_v = dv};
                r.params.dtype = ATTN_F32;
                r.params.scale = attn_default_scale(dk);
                r.causal = (enum attn_causal)cm;
                r.outputs = ATTN_OUT_OUTPUT;
                struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
                struct attn_result out = {NULL, NULL, o, empty, 0};
                CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_OK);
                long double worst = 0;
                size_t n_empty = 0;
                for (size_t hh = 0; hh < h; hh++)
                    for (size_t t = 0; t < n; t++) {
                        const float *qr = q + (hh * n + t) * dk;
                        const float *kg = k + hh / (h / hk) * L * dk;
                        const float *vg = v + hh / (h / hk) * L * dv;
                        long long pos = cm == ATTN_CAUSAL_TOP_LEFT ? (long long)t
                                                                   : (long long)(L - n + t);
                        size_t lim = cm == ATTN_CAUSAL_NONE ? L
                                     : pos < 0              ? 0
                                     : (size_t)pos + 1 < L  ? (size_t)pos + 1
                                                            : L;
                        const float *orow = o + (hh * n + t) * dv;
                        n_empty += lim == 0;
                        CHECK_EQ_INT(empty[hh * n + t], lim == 0);
                        long double mx = -INFINITY, sum = 0;
                        long double *s = malloc((lim ? lim : 1) * sizeof(long double));
                        for (size_t j = 0; j < lim; j++) {
                            long double acc = 0;
                            for (size_t x = 0; x < dk; x++)
                                acc += (long double)qr[x] * kg[j * dk + x];
                            s[j] = acc * (long double)r.params.scale;
                            mx = s[j] > mx ? s[j] : mx;
                        }
                        for (size_t j = 0; j < lim; j++)
                            sum += s[j] = expl(s[j] - mx);
                        for (size_t x = 0; x < dv; x++) {
                            long double ref = 0;
                            for (size_t j = 0; j < lim; j++)
                                ref += s[j] / sum * vg[j * dv + x];
                            long double e = fabsl(ref - orow[x]);
                            worst = e > worst ? e : worst;
                        }
                        free(s);
                    }
                CHECK_EQ_INT(out.n_empty, n_empty);
                if (!(worst <= 2e-6L))
                    printf("    %s shape %zu causal %d: worst %Lg\n",
                           attn_kernel_name(ks[i]), sh, cm, worst);
                CHECK(worst <= 2e-6L);
                free(q);
                free(k);
                free(v);
                free(o);
                free(empty);
            }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* A softcap the API takes (any positive float) but the fused kernels
 * cannot hold in base 2 with its inverse (below about 2e-39, above about
 * 2.35e38): the pass takes the exact path and answers as without a fused
 * kernel, where every score was NaN and the pass 422 non_finite before
 * (zero scores, 0·inf, below; an infinite c·log2 e above). */
TEST(every_kernel_takes_any_softcap)
{
    static const double caps[] = {1e-40, 3e-39, 1e-30, 50, 1e38, 3e38, FLT_MAX};
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    size_t n = 20, L = 70, dk = 8, dv = 3;
    rng_state = 0x5eedull;
    float *q = rnd_floats(n * dk, -1, 1), *k = rnd_floats(L * dk, -1, 1);
    float *v = rnd_floats(L * dv, -1, 1);
    memset(q, 0, dk * sizeof(float));           /* row 0: every score 0 */
    float *o = malloc(n * dv * sizeof(float)), *o0 = malloc(n * dv * sizeof(float));
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++)
        for (int i = nk - 1; i >= 0; i--) {     /* NONE first: the answer */
            attn_kernel_set(ks[i]);
            struct attn_request r = {0};
            r.shape = (struct attn_shape){.h = 1, .h_kv = 1, .n = n, .L = L, .d_k = dk, .d_v = dv};
            r.params.dtype = ATTN_F32;
            r.params.scale = attn_default_scale(dk);
            r.params.softcap = caps[c];
            r.outputs = ATTN_OUT_OUTPUT;
            struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
            struct attn_result out = {NULL, NULL, i == nk - 1 ? o0 : o, NULL, 0};
            enum core_status st = attn_forward(&r, &in, &out, NULL);
            if (st != CORE_OK)
                printf("    %s softcap %g: status %d\n", attn_kernel_name(ks[i]), caps[c],
                       (int)st);
            CHECK_EQ_INT(st, CORE_OK);
            double worst = 0;
            for (size_t x = 0; i != nk - 1 && st == CORE_OK && x < n * dv; x++) {
                double e = fabs((double)o[x] - (double)o0[x]);
                worst = e > worst ? e : worst;
            }
            CHECK(worst <= 1e-6);
        }
    attn_kernel_set(ATTN_KERNEL_AUTO);
    free(q);
    free(k);
    free(v);
    free(o);
    free(o0);
}

/* q·k past float32's range under a scale that brings the score back
 * (1e40 · 1e-10): the exact path forms q·k first, as the contract orders
 * it, and stops non_finite; the fused kernels, whose q is scaled first,
 * answered 200 output-only, so the answer hung on the kernel, on n and on
 * `return`. Every kernel answers as NONE does, and so does a score just
 * inside the range. */
TEST(every_kernel_answers_an_overflowing_qk_as_none)
{
    static const double scales[] = {1e-10, 0.5, 1e-38};
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    size_t n = 8, L = 4, dk = 2, dv = 2;
    float q[8 * 2], k[4 * 2] = {1e20f, 0, 5e19f, 0, 0, 0, -1e20f, 0}, v[4 * 2];
    for (size_t t = 0; t < n; t++)
        q[t * dk] = 1e20f, q[t * dk + 1] = 0;
    for (size_t x = 0; x < L * dv; x++)
        v[x] = (float)x;
    float o[8 * 2], o0[8 * 2];
    for (size_t c = 0; c < sizeof scales / sizeof *scales; c++) {
        enum core_status want = CORE_OK;
        for (int i = nk - 1; i >= 0; i--) {     /* NONE first: the answer */
            attn_kernel_set(ks[i]);
            struct attn_request r = {0};
            r.shape = (struct attn_shape){.h = 1, .h_kv = 1, .n = n, .L = L, .d_k = dk, .d_v = dv};
            r.params.dtype = ATTN_F32;
            r.params.scale = scales[c];
            r.outputs = ATTN_OUT_OUTPUT;
            struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
            struct attn_result out = {NULL, NULL, i == nk - 1 ? o0 : o, NULL, 0};
            enum core_status st = attn_forward(&r, &in, &out, NULL);
            if (i == nk - 1)
                want = st;
            if (st != want)
                printf("    %s scale %g: status %d, none %d\n", attn_kernel_name(ks[i]),
                       scales[c], (int)st, (int)want);
            CHECK_EQ_INT(st, want);
            for (size_t x = 0; i != nk - 1 && st == CORE_OK && x < n * dv; x++)
                CHECK(o[x] == o0[x]);
        }
        CHECK_EQ_INT(want, CORE_ENONFINITE);
    }
    /* q·k of 1.2e38 at scale 1: inside the range, 200 on every kernel */
    for (size_t t = 0; t < n; t++)
        q[t * dk] = 1.2e19f;
    k[0] = 1e19f, k[2] = 5e18f, k[6] = -1e19f;
    for (int i = nk - 1; i >= 0; i--) {
        attn_kernel_set(ks[i]);
        struct attn_request r = {0};
        r.shape = (struct attn_shape){.h = 1, .h_kv = 1, .n = n, .L = L, .d_k = dk, .d_v = dv};
        r.params.dtype = ATTN_F32;
        r.params.scale = 1;
        r.outputs = ATTN_OUT_OUTPUT;
        struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
        struct attn_result out = {NULL, NULL, o, NULL, 0};
        CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_OK);
        for (size_t x = 0; x < n * dv; x++)
            CHECK(o[x] == v[x % dv]);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

TEST(kernel_names_round_trip)
{
    for (int k = ATTN_KERNEL_NONE; k <= ATTN_KERNEL_AUTO; k++) {
        enum attn_kernel got = ATTN_KERNEL_NONE;
        CHECK(attn_kernel_parse(attn_kernel_name((enum attn_kernel)k), &got));
        CHECK_EQ_INT(got, k);
    }
    enum attn_kernel got = ATTN_KERNEL_AVX2;
    CHECK(!attn_kernel_parse("AVX2", &got));
    CHECK(!attn_kernel_parse("avx", &got));
    CHECK(!attn_kernel_parse("", &got));
    CHECK(!attn_kernel_parse(NULL, &got));
    CHECK_EQ_INT(got, ATTN_KERNEL_AVX2);        /* untouched when refused */
    CHECK_STR(attn_kernel_name((enum attn_kernel)9), "?");
}

/* Fallbacks on made-up CPUs: a kernel the CPU lacks gives the widest
 * narrower one it has, never a wider one. */
TEST(kernel_choice_falls_back_narrower)
{
    const unsigned none = 1u << ATTN_KERNEL_NONE, avx2 = none | 1u << ATTN_KERNEL_AVX2;
    const unsigned all = avx2 | 1u << ATTN_KERNEL_AVX512;
    const unsigned only512 = none | 1u << ATTN_KERNEL_AVX512;
    static const struct {
        enum attn_kernel want;
        unsigned have;
        enum attn_kernel got;
    } t[] = {
        {ATTN_KERNEL_AUTO, all, ATTN_KERNEL_AVX512},
        {ATTN_KERNEL_AUTO, avx2, ATTN_KERNEL_AVX2},
        {ATTN_KERNEL_AUTO, none, ATTN_KERNEL_NONE},
        {ATTN_KERNEL_AVX512, all, ATTN_KERNEL_AVX512},
        {ATTN_KERNEL_AVX512, avx2, ATTN_KERNEL_AVX2},
        {ATTN_KERNEL_AVX512, none, ATTN_KERNEL_NONE},
        {ATTN_KERNEL_AVX2, all, ATTN_KERNEL_AVX2},
        {ATTN_KERNEL_AVX2, avx2, ATTN_KERNEL_AVX2},
        {ATTN_KERNEL_AVX2, none, ATTN_KERNEL_NONE},
        {ATTN_KERNEL_AVX2, only512, ATTN_KERNEL_NONE},
        {ATTN_KERNEL_AUTO, only512, ATTN_KERNEL_AVX512},
        {ATTN_KERNEL_NONE, all, ATTN_KERNEL_NONE},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        CHECK_EQ_INT(attn_kernel_choose(t[i].want, t[i].have), t[i].got);
}

#if defined(__x86_64__)
/* Whether /proc/cpuinfo's first flags line lists every one of `names`
 * (space-separated); -1 when there is no such file or line. */
static int cpuinfo_has(const char *names)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    static char line[8192];
    int found = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            found = 1;
            char want[64];
            const char *p = names;
            while (*p) {
                size_t n = strcspn(p, " ");
                snprintf(want, sizeof want, " %.*s", (int)n, p);
                const char *at = strstr(line, want);
                if (!at || (at[strlen(want)] != ' ' && at[strlen(want)] != '\n'))
                    found = 0;
                p += n + (p[n] == ' ');
            }
            break;
        }
    fclose(f);
    return found;
}
#endif

/* What this CPU supports, read apart from the code (the kernel's own
 * cpuid), and what forcing each kernel gives here. */
TEST(kernel_detection_and_forcing_here)
{
    unsigned have = attn_kernel_supported();
    CHECK(have & (1u << ATTN_KERNEL_NONE));
#if defined(__x86_64__)
    int a2 = cpuinfo_has("avx2 fma"), a512 = cpuinfo_has("avx512f avx512dq");
    /* valgrind's CPUID hides AVX-512 that /proc/cpuinfo still lists, and
     * the detection rightly follows CPUID: the comparison would be false */
    const char *vg = getenv("ATTND_VALGRIND");
    if (vg && strcmp(vg, "1") == 0) {
        printf("    under valgrind: CPUID is emulated, /proc/cpuinfo not compared\n");
        a2 = -1;
    }
    if (a2 >= 0) {
        CHECK_EQ_INT(!!(have & (1u << ATTN_KERNEL_AVX2)), a2);
        CHECK_EQ_INT(!!(have & (1u << ATTN_KERNEL_AVX512)), a512);
    }
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    CHECK(have & (1u << ATTN_KERNEL_AVX512));   /* the build's -march says so */
#endif
#else
    CHECK_EQ_INT(have, 1u << ATTN_KERNEL_NONE); /* no fused kernel off x86-64 */
#endif
    printf("    supported here:");
    for (int k = ATTN_KERNEL_NONE; k < ATTN_KERNEL_AUTO; k++)
        if (have & (1u << k))
            printf(" %s", attn_kernel_name((enum attn_kernel)k));
    printf("\n");
    for (int k = ATTN_KERNEL_NONE; k <= ATTN_KERNEL_AUTO; k++) {
        enum attn_kernel got = attn_kernel_set((enum attn_kernel)k);
        CHECK_EQ_INT(got, attn_kernel_choose((enum attn_kernel)k, have));
        CHECK(have & (1u << got));
        CHECK(k == ATTN_KERNEL_AUTO || (int)got <= k);
        CHECK_EQ_INT(attn_kernel_active(), got);
        CHECK_EQ_INT(attn_fused_available(), got != ATTN_KERNEL_NONE);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* A row's bits do not depend on the rows beside it (blocks end at
 * multiples of the kernel's block size; the first starts at the group's
 * first key rounded down to 8, which adds only keys the row does not see):
 * every row of a windowed, softcapped tile run alone gives the same m, l
 * and O. Per kernel. */
TEST(every_kernel_row_alone_same_bits)
{
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk && ks[i] != ATTN_KERNEL_NONE; i++) {
        attn_kernel_set(ks[i]);
        size_t nb = 60, L = 700, d = 16;
        rng_state = 11;
        float *q = rnd_floats(nb * d, -1, 1), *k = rnd_floats(L * d, -1, 1);
        float *v = rnd_floats(L * d, -1, 1);
        int32_t lo[60], hi[60];
        for (size_t t = 0; t < nb; t++) {
            hi[t] = (int32_t)(400 + 5 * t);
            lo[t] = (int32_t)(100 + 3 * t + (t % 7) * 11);
        }
        struct attn_fused_keys keys = {lo, hi, 2.5f, NULL, 0, 0, 0, NULL, NULL, NULL, NULL};
        size_t sf = attn_fused_scratch_floats(nb, d, d);
        float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
        float O[60 * 16], m[60], O1[16], m1;
        double l[60], l1;
        CHECK(attn_fused_rows(q, nb, d, 0.25f, k, v, d, &keys, O, m, l, scratch));
        int same = 1;
        for (size_t t = 0; t < nb; t++) {
            struct attn_fused_keys one = {lo + t, hi + t, 2.5f, NULL, 0, 0, 0, NULL,
                                          NULL, NULL, NULL};
            CHECK(attn_fused_rows(q + t * d, 1, d, 0.25f, k, v, d, &one, O1, &m1, &l1, scratch));
            same &= memcmp(O1, O + t * d, sizeof O1) == 0 && m1 == m[t] && l1 == l[t];
        }
        CHECK(same);
        free(scratch);
        free(q);
        free(k);
        free(v);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* Superblocks handed over by keys->span (a paged cache's rows) give the
 * bits of K and V in one block: each span call copies keys [a, e) into a
 * buffer of their own, the rest of it NaN, so a read outside [a, e) shows.
 * Per kernel. */
struct span_copy {
    const float *k, *v;
    size_t dk, dv, L, calls, bad;
    float *buf;                 /* [L][dk + dv] */
};

static void span_rows(void *ctx, size_t a, size_t e, const float **k, const float **v)
{
    struct span_copy *c = ctx;
    c->calls++;
    c->bad += !(a < e && e <= c->L) ||
              (e - a) * (c->dk + c->dv) > attn_fused_wide_floats(c->dk, c->dv, c->L);
    for (size_t i = 0; i < c->L * (c->dk + c->dv); i++)
        c->buf[i] = NAN;
    float *kb = c->buf, *vb = c->buf + (e - a) * c->dk;
    memcpy(kb, c->k + a * c->dk, (e - a) * c->dk * sizeof(float));
    memcpy(vb, c->v + a * c->dv, (e - a) * c->dv * sizeof(float));
    *k = kb;
    *v = vb;
}

TEST(every_kernel_span_same_bits_as_one_block)
{
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk && ks[i] != ATTN_KERNEL_NONE; i++) {
        attn_kernel_set(ks[i]);
        size_t nb = 70, L = 3000, dk = 64, dv = 40;
        rng_state = 12;
        float *q = rnd_floats(nb * dk, -1, 1), *k = rnd_floats(L * dk, -1, 1);
        float *v = rnd_floats(L * dv, -1, 1);
        int32_t lo[70], hi[70];
        for (size_t t = 0; t < nb; t++) {
            lo[t] = (int32_t)(t % 3 ? 0 : 37 * t);
            hi[t] = (int32_t)(L - 29 * t);
        }
        size_t sf = attn_fused_scratch_floats(nb, dk, dv);
        float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
        float *O = malloc(nb * dv * sizeof(float)), *O2 = malloc(nb * dv * sizeof(float));
        float m[70], m2[70];
        double l[70], l2[70];
        struct span_copy sc = {k, v, dk, dv, L, 0, 0, malloc(L * (dk + dv) * sizeof(float))};
        struct attn_fused_keys keys = {lo, hi, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL};
        CHECK(attn_fused_rows(q, nb, dk, 0.125f, k, v, dv, &keys, O, m, l, scratch));
        keys.span = span_rows;
        keys.span_ctx = &sc;
        CHECK(attn_fused_rows(q, nb, dk, 0.125f, NULL, NULL, dv, &keys, O2, m2, l2, scratch));
        CHECK(sc.calls > 1);
        CHECK_EQ_INT((int)sc.bad, 0);
        CHECK(memcmp(O, O2, nb * dv * sizeof(float)) == 0);
        CHECK(memcmp(m, m2, sizeof m) == 0 && memcmp(l, l2, sizeof l) == 0);
        free(sc.buf);
        free(O);
        free(O2);
        free(scratch);
        free(q);
        free(k);
        free(v);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* Rows the later of two threads runs taking tiles of B rows in order, each
 * the next one when it is free (the reference of attn_fused_tile_rows'
 * contract, attn_fused.h). */
static size_t ref_two_thread_rows(size_t R, size_t heads, size_t B)
{
    size_t t[2] = {0, 0};
    for (size_t h = 0; h < heads; h++)
        for (size_t t0 = 0; t0 < R; t0 += B)
            t[t[1] < t[0]] += R - t0 < B ? R - t0 : B;
    return t[0] > t[1] ? t[0] : t[1];
}

/* The fused pass's tiles: a head of at most cap rows is one tile; larger
 * ones get the multiple of the kernel's group in [cap / 2, cap] that two
 * threads finish soonest, or the largest within 1/64 of that. A 1024-row
 * head is 8 tiles of 128 (AVX2) or 11 of 96 (AVX-512), not 5 of 192 and a
 * 64-row tail (576 rows on one core, 448 on the other). */
TEST(fused_tiles_split_evenly_over_two_threads)
{
    CHECK_EQ_INT(attn_fused_tile_rows(1, 1, 192, 16), 1);
    CHECK_EQ_INT(attn_fused_tile_rows(100, 3, 192, 48), 100);
    CHECK_EQ_INT(attn_fused_tile_rows(192, 1, 192, 16), 192);
    CHECK_EQ_INT(attn_fused_tile_rows(1024, 1, 192, 16), 128);
    CHECK_EQ_INT(attn_fused_tile_rows(2048, 1, 192, 16), 144);  /* 128: 1.5% sooner */
    CHECK_EQ_INT(attn_fused_tile_rows(1024, 1, 192, 48), 96);
    CHECK_EQ_INT(attn_fused_tile_rows(2048, 1, 192, 48), 144);
    CHECK_EQ_INT(attn_fused_tile_rows(1536, 1, 192, 16), 192);  /* 8 tiles of 192: even */
    CHECK_EQ_INT(attn_fused_tile_rows(1024, 2, 192, 16), 192);  /* two heads' tails pair up */
    /* 96 rows would end 0.8% sooner (4128 vs 4160 rows): not worth half
     * the L2 reuse of each superblock of keys */
    CHECK_EQ_INT(attn_fused_tile_rows(8192, 1, 192, 48), 192);
    CHECK_EQ_INT(attn_fused_tile_rows(8192, 1, 192, 16), 192);  /* 128: 1.5% sooner */
    CHECK_EQ_INT(attn_fused_tile_rows(4096, 1, 192, 48), 192);  /* 144: 1.5% sooner */
    CHECK_EQ_INT(attn_fused_tile_rows(65536, 8, 192, 16), 192); /* many tiles: cap */
    CHECK_EQ_INT(attn_fused_tile_rows(1024, 1, 192, 0), 192);   /* no kernel: cap */
    int bad = 0;
    static const size_t groups[] = {16, 48};
    for (int gi = 0; gi < 2; gi++)
        for (size_t heads = 1; heads <= 3; heads++)
            for (size_t R = 193; R <= 3000; R += 7) {
                size_t g = groups[gi], fewest = ref_two_thread_rows(R, heads, 192);
                for (size_t c = 192; c >= 96; c -= g) {
                    size_t s = ref_two_thread_rows(R, heads, c);
                    fewest = s < fewest ? s : fewest;
                }
                size_t best = 0;    /* the largest within 1/64 of the fewest */
                for (size_t c = 96; c <= 192; c += g)
                    if ((double)ref_two_thread_rows(R, heads, c) <= fewest * (1.0 + 1.0 / 64))
                        best = c;
                bad += attn_fused_tile_rows(R, heads, 192, g) != best;
            }
    CHECK_EQ_INT(bad, 0);
    /* the kernel in use names its group */
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk; i++) {
        attn_kernel_set(ks[i]);
        CHECK_EQ_INT(attn_fused_group_rows(),
                     ks[i] == ATTN_KERNEL_AVX512 ? 48 : ks[i] == ATTN_KERNEL_AVX2 ? 16 : 0);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

int main(void)
{
    RUN(kernel_names_round_trip);
    RUN(kernel_choice_falls_back_narrower);
    RUN(kernel_detection_and_forcing_here);
    RUN(every_kernel_matches_reference);
    RUN(every_kernel_refuses_nonfinite_seen_scores);
    RUN(every_kernel_through_attn_forward);
    RUN(every_kernel_takes_any_softcap);
    RUN(every_kernel_answers_an_overflowing_qk_as_none);
    RUN(every_kernel_row_alone_same_bits);
    RUN(every_kernel_span_same_bits_as_one_block);
    RUN(fused_tiles_split_evenly_over_two_threads);
    TEST_MAIN_END();
}
