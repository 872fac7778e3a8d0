/*
 * tests/unit/test_attn_pages.c — attention over a paged view (struct
 * attn_kv_view with page_rows, as a session cache hands it over) read in
 * place, against the same rows in one block per head, bit for bit.
 *
 * The pages are laid out by the test in one arena so every layout can be
 * made on purpose: every page apart (a gap after each), all pages side by
 * side (one run), runs of 3 pages (a run breaks inside a 512-key block of
 * the key-blocked pass and inside the fused kernel's superblocks), and runs
 * of random lengths. For each layout: the key-blocked prefill (the fused
 * kernel of each instruction set this CPU runs, and the gemm loop), gemm
 * tiles returning scores and weights (causal, and a sliding window so the
 * tiles' key ranges move), grouped heads with more than 4 query rows per kv
 * head, decode (plain loops, split into key windows), a key-window pass of
 * many rows (P·V by gemm); float32 and float64, with and without a helper
 * pool. Also: the scratch a pass over pages apart keeps (attn_ws_bytes)
 * does not grow with L, so no copy of a whole head comes back.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_fused.h"
#include "core/pool.h"
#include "tests/harness.h"

#define PR 64               /* rows per page, as core/kv.h's KV_PAGE_ROWS */

static uint64_t rng = 99;

static double urand(void)
{
    return (double)(t_rng_next(&rng) >> 11) / 9007199254740992.0 * 2 - 1;
}

/* x [count] of dtype dt, uniform in (-a, a) */
static void *rnd(enum attn_dtype dt, size_t count, double a)
{
    size_t es = attn_dtype_size(dt);
    void *x = malloc(count * es);
    for (size_t i = 0; i < count; i++) {
        if (dt == ATTN_F32)
            ((float *)x)[i] = (float)(a * urand());
        else
            ((double *)x)[i] = a * urand();
    }
    return x;
}

enum layout { APART, ONE_RUN, RUNS_OF_3, RANDOM_RUNS, N_LAYOUTS };
static const char *const layout_names[] = {"apart", "one run", "runs of 3", "random runs"};

/* h_kv heads of L rows of K [L][dk] and V [L][dv] (one block per head)
 * copied into pages laid out as `lay` in *arena: kp, vp [h_kv][pages]. */
struct paged {
    void *arena;
    const void **kp, **vp;
    size_t pages;
};

static void paged_make(struct paged *p, enum layout lay, enum attn_dtype dt, size_t h_kv,
                       size_t L, size_t dk, size_t dv, const void *k, const void *v)
{
    size_t es = attn_dtype_size(dt), pages = (L + PR - 1) / PR;
    size_t kb = PR * dk * es, vb = PR * dv * es, gap = 64;
    /* each page and gap once, K then V per head */
    size_t per = pages * (kb + vb + 2 * gap);
    p->arena = malloc(h_kv * per + 64);
    p->kp = malloc(h_kv * pages * sizeof(void *));
    p->vp = malloc(h_kv * pages * sizeof(void *));
    p->pages = pages;
    char *at = p->arena;
    for (size_t g = 0; g < h_kv; g++)
        for (int part = 0; part < 2; part++) {
            size_t pb = part ? vb : kb, d = part ? dv : dk;
            const char *src = (const char *)(part ? v : k) + g * L * d * es;
            size_t left = 0;                /* pages before the next gap */
            for (size_t b = 0; b < pages; b++) {
                if (left == 0) {
                    if (b > 0 && lay != ONE_RUN)
                        at += gap;          /* the run ends here */
                    left = lay == APART ? 1 : lay == RUNS_OF_3 ? 3
                         : lay == ONE_RUN ? pages : 1 + (t_rng_next(&rng) % 9);
                }
                left--;
                size_t rows = L - b * PR < PR ? L - b * PR : PR;
                memset(at, 0xff, pb);       /* NaN past the rows held */
                memcpy(at, src + b * PR * d * es, rows * d * es);
                (part ? p->vp : p->kp)[g * pages + b] = at;
                at += pb;
            }
            at += gap;
        }
}

static void paged_free(struct paged *p)
{
    free(p->arena);
    free(p->kp);
    free(p->vp);
}

/* One case: shape, dtype and the request's options. */
struct pcase {
    const char *name;
    enum attn_dtype dt;
    size_t h, h_kv, n, L, dk, dv;
    unsigned outputs;
    enum attn_causal causal;
    int64_t window_left;            /* >= 0: a sliding window */
};

/* The case's request over views of h_kv heads (attn_forward_kv) with the
 * contiguous rows and with each page layout, with ws's pool or without:
 * the same bits in every returned array. Returns the failures. */
static int run_case(const struct pcase *c, struct attn_ws *ws)
{
    struct pcase fewer = *c;
    if (t_quick() && c->n >= 100) {
        fewer.n = c->n / 4;     /* the pages are the keys': all still read */
        c = &fewer;
    }
    size_t es = attn_dtype_size(c->dt);
    void *q = rnd(c->dt, c->h * c->n * c->dk, 1.0);
    void *k = rnd(c->dt, c->h_kv * c->L * c->dk, 1.0), *v = rnd(c->dt, c->h_kv * c->L * c->dv, 1.0);
    struct attn_request r = {
        .shape = {.h = c->h, .h_kv = c->h_kv, .n = c->n, .L = c->L, .d_k = c->dk, .d_v = c->dv},
        .params = {.dtype = c->dt, .scale = attn_default_scale(c->dk)},
        .causal = c->causal, .attn_bias_heads = 1, .mask_heads = 1, .outputs = c->outputs};
    if (c->window_left >= 0) {
        r.window.on = true;
        r.window.left = c->window_left;
        r.window.right = -1;
    }
    size_t sw = c->h * c->n * c->L * es, so = c->h * c->n * c->dv * es;
    bool sc = c->outputs & ATTN_OUT_SCORES, wt = c->outputs & ATTN_OUT_WEIGHTS;
    bool ot = c->outputs & ATTN_OUT_OUTPUT;
    struct attn_result ref = {sc ? malloc(sw) : NULL, wt ? malloc(sw) : NULL, malloc(so), NULL, 0};
    const void **kp = malloc(c->h_kv * sizeof *kp), **vp = malloc(c->h_kv * sizeof *vp);
    for (size_t g = 0; g < c->h_kv; g++) {
        kp[g] = (const char *)k + g * c->L * c->dk * es;
        vp[g] = (const char *)v + g * c->L * c->dv * es;
    }
    struct attn_inputs in = {.q = q};
    struct attn_kv_view one = {.k = kp, .v = vp};
    int bad = 0;
    CHECK_EQ_INT(attn_forward_kv(&r, &in, &one, &ref, ws), CORE_OK);
    for (int lay = 0; lay < N_LAYOUTS; lay++) {
        struct paged p;
        paged_make(&p, (enum layout)lay, c->dt, c->h_kv, c->L, c->dk, c->dv, k, v);
        struct attn_kv_view view = {.k = p.kp, .v = p.vp, .page_rows = PR, .pages = p.pages};
        struct attn_result got = {sc ? malloc(sw) : NULL, wt ? malloc(sw) : NULL, malloc(so),
                                  NULL, 0};
        int st = attn_forward_kv(&r, &in, &view, &got, ws);
        bool same = st == CORE_OK && (!ot || memcmp(got.output, ref.output, so) == 0) &&
                    (!sc || memcmp(got.scores, ref.scores, sw) == 0) &&
                    (!wt || memcmp(got.weights, ref.weights, sw) == 0);
        if (!same) {
            printf("    %s, pages %s: status %d, not the same bits\n", c->name,
                   layout_names[lay], st);
            bad++;
        }
        free(got.scores);
        free(got.weights);
        free(got.output);
        paged_free(&p);
    }
    free(ref.scores);
    free(ref.weights);
    free(ref.output);
    free(kp);
    free(vp);
    free(q);
    free(k);
    free(v);
    return bad;
}

static const struct pcase cases[] = {
    /* key-blocked prefill (the fused kernel for float32 on x86-64) */
    {"prefill f32", ATTN_F32, 2, 1, 300, 1500, 64, 64, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"prefill f32 d128 dv40", ATTN_F32, 1, 1, 200, 2100, 128, 40, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_NONE, -1},
    {"prefill f64", ATTN_F64, 2, 1, 300, 1500, 64, 64, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"prefill f32 window", ATTN_F32, 1, 1, 260, 1700, 32, 32, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, 300},
    /* gemm tiles: scores and weights (and the output by the pass above) */
    {"scores f32 causal", ATTN_F32, 2, 2, 70, 1300, 64, 48, ATTN_OUT_ALL,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"scores f64", ATTN_F64, 1, 1, 40, 1000, 32, 32, ATTN_OUT_SCORES | ATTN_OUT_WEIGHTS,
     ATTN_CAUSAL_NONE, -1},
    {"scores f32 window", ATTN_F32, 1, 1, 300, 2000, 16, 16, ATTN_OUT_ALL,
     ATTN_CAUSAL_BOTTOM_RIGHT, 150},
    /* grouped heads: 8 query rows per kv head, one query each */
    {"gqa8 decode f32", ATTN_F32, 16, 2, 1, 3000, 128, 128, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"gqa8 decode f64", ATTN_F64, 8, 1, 1, 3000, 64, 64, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"gqa8 decode f32 scores", ATTN_F32, 8, 1, 1, 1000, 64, 64, ATTN_OUT_ALL,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    /* decode: plain loops, split into key windows */
    {"decode f32", ATTN_F32, 2, 1, 1, 9000, 128, 128, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"decode f64 2 rows", ATTN_F64, 2, 1, 2, 5000, 64, 64, ATTN_OUT_OUTPUT,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1},
    {"decode f32 all", ATTN_F32, 1, 1, 3, 700, 64, 64, ATTN_OUT_ALL, ATTN_CAUSAL_BOTTOM_RIGHT,
     -1},
};

/* Every case, every layout, with every fused kernel this CPU runs (and
 * none: the gemm loop of the key-blocked pass), each once; with
 * kernels_too false the kernel in use only. Quick (t_quick(): memcheck and
 * qemu-user, tens of times slower) is trimmed in three places: a prefill
 * case keeps a quarter of its queries (run_case), the pooled run takes the
 * kernel in use only, and the scratch test a quarter of the rows and half
 * the keys. */
static void all_cases(struct attn_ws *ws, bool kernels_too)
{
    enum attn_kernel ks[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_AVX2, ATTN_KERNEL_NONE};
    size_t nk = kernels_too ? sizeof ks / sizeof ks[0] : 1;
    unsigned ran = 0;
    for (size_t i = 0; i < nk; i++) {
        enum attn_kernel k = attn_kernel_set(ks[i]);
        if (ran & (1u << k))
            continue;                       /* AUTO was this one */
        ran |= 1u << k;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            bool fused = cases[c].dt == ATTN_F32 && cases[c].outputs == ATTN_OUT_OUTPUT &&
                         cases[c].n * cases[c].h / cases[c].h_kv > 4;
            if (i > 0 && !fused)
                continue;                   /* the kernel does not take it */
            CHECK_EQ_INT(run_case(&cases[c], ws), 0);
        }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

TEST(pages_read_in_place_same_bits)
{
    struct attn_ws *ws = attn_ws_new();
    all_cases(ws, true);
    attn_ws_free(ws);
}

TEST(pages_read_in_place_same_bits_with_pool)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    CHECK(pool && ws);
    attn_ws_set_pool(ws, pool);
    all_cases(ws, !t_quick());
    attn_ws_free(ws);
    attn_pool_free(pool);
}

/* A key-window pass of many rows (attn_forward_kv_keys: gemm tiles with
 * P·V by gemm) over pages: the partial sums of the one-block view. */
TEST(key_window_pass_over_pages_same_bits)
{
    for (int t = 0; t < 2; t++) {
        enum attn_dtype dt = t ? ATTN_F64 : ATTN_F32;
        size_t es = attn_dtype_size(dt), h = 1, n = 24, L = 1400, d = 32, k0 = 130, k1 = 1210;
        void *q = rnd(dt, h * n * d, 1.0), *k = rnd(dt, L * d, 1.0), *v = rnd(dt, L * d, 1.0);
        struct attn_request r = {.shape = {.h = h, .h_kv = 1, .n = n, .L = L, .d_k = d, .d_v = d},
                                 .params = {.dtype = dt, .scale = 0.2},
                                 .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .attn_bias_heads = 1,
                                 .mask_heads = 1, .outputs = ATTN_OUT_OUTPUT};
        struct attn_inputs in = {.q = q};
        const void *kp[1] = {k}, *vp[1] = {v};
        struct attn_kv_view one = {.k = kp, .v = vp};
        void *o1 = malloc(n * d * es), *o2 = malloc(n * d * es);
        double m1[24], l1[24], m2[24], l2[24];
        struct attn_partial a = {o1, m1, l1}, b = {o2, m2, l2};
        struct attn_ws *ws = attn_ws_new();
        CHECK_EQ_INT(attn_forward_kv_keys(&r, &in, &one, &a, ws, k0, k1), CORE_OK);
        for (int lay = 0; lay < N_LAYOUTS; lay++) {
            struct paged p;
            paged_make(&p, (enum layout)lay, dt, 1, L, d, d, k, v);
            struct attn_kv_view view = {.k = p.kp, .v = p.vp, .page_rows = PR, .pages = p.pages};
            CHECK_EQ_INT(attn_forward_kv_keys(&r, &in, &view, &b, ws, k0, k1), CORE_OK);
            CHECK(memcmp(o1, o2, n * d * es) == 0);
            CHECK(memcmp(m1, m2, sizeof m1) == 0 && memcmp(l1, l2, sizeof l1) == 0);
            paged_free(&p);
        }
        attn_ws_free(ws);
        free(o1);
        free(o2);
        free(q);
        free(k);
        free(v);
    }
}

/* Scratch bytes (attn_ws_bytes) a fresh workspace holds after one pass
 * over pages that all lie apart: a key-blocked prefill and a decode of
 * grouped heads, at L keys. */
static size_t scratch_after(enum attn_dtype dt, size_t h, size_t n, size_t L, size_t d)
{
    void *q = rnd(dt, h * n * d, 1.0), *k = rnd(dt, L * d, 1.0), *v = rnd(dt, L * d, 1.0);
    struct attn_request r = {.shape = {.h = h, .h_kv = 1, .n = n, .L = L, .d_k = d, .d_v = d},
                             .params = {.dtype = dt, .scale = 0.1},
                             .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .attn_bias_heads = 1,
                             .mask_heads = 1, .outputs = ATTN_OUT_OUTPUT};
    size_t es = attn_dtype_size(dt);
    void *o = malloc(h * n * d * es);
    struct paged p;
    paged_make(&p, APART, dt, 1, L, d, d, k, v);
    struct attn_kv_view view = {.k = p.kp, .v = p.vp, .page_rows = PR, .pages = p.pages};
    struct attn_inputs in = {.q = q};
    struct attn_ws *ws = attn_ws_new();
    CHECK_EQ_INT(attn_forward_kv(&r, &in, &view, &(struct attn_result){.output = o}, ws),
                 CORE_OK);
    size_t bytes = attn_ws_bytes(ws);
    attn_ws_free(ws);
    paged_free(&p);
    free(o);
    free(q);
    free(k);
    free(v);
    return bytes;
}

TEST(scratch_does_not_grow_with_L)
{
    for (int t = 0; t < 2; t++) {
        enum attn_dtype dt = t ? ATTN_F64 : ATTN_F32;
        size_t rows = t_quick() ? 64 : 256;
        size_t a = scratch_after(dt, 1, rows, 4096, 64), b = scratch_after(dt, 1, rows, 16384, 64);
        CHECK_EQ_INT((long long)a, (long long)b);
        size_t c = scratch_after(dt, 8, 1, 4096, 128);
        size_t e = scratch_after(dt, 8, 1, t_quick() ? 16384 : 32768, 128);
        CHECK_EQ_INT((long long)c, (long long)e);
        /* far below one head's K and V at the shorter L */
        CHECK(a < 4096 * 128 * attn_dtype_size(dt));
    }
}

int main(void)
{
    RUN(pages_read_in_place_same_bits);
    RUN(pages_read_in_place_same_bits_with_pool);
    RUN(key_window_pass_over_pages_same_bits);
    RUN(scratch_does_not_grow_with_L);
    TEST_MAIN_END();
}
