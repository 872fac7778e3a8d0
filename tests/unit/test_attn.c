/*
 * tests/unit/test_attn.c — the attention core against an independent
 * reference.
 *
 * ref_attention below is a deliberately naive implementation in long double
 * (plain loops over heads, rows, keys; no tiling, no BLAS, written from
 * the API's formulas and not from core/attn_impl.h). Randomized configurations cover
 * every option in both dtypes with shapes including 1, primes and 257; the
 * named tests cover the worked example of the seed document, softmax1 as a
 * prepended zero key, huge magnitudes, empty rows, GQA, causal alignment,
 * validation, the tiled path and the prepare_kv/forward_kv split.
 */
#include <float.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_fused.h"
#include "tests/harness.h"

/* ---- deterministic random numbers (xorshift64*) ----------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_u64(void)
{
    return t_rng_next(&rng_state);
}

/* uniform in [lo, hi) */
static double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_u64() >> 11) / 9007199254740992.0;
}

static size_t rng_pick(const size_t *v, size_t nv)
{
    return v[rng_u64() % nv];
}

/* ---- a test case: configuration + data (all data held as double) ------ */

struct tcase {
    size_t h, h_kv, n, L, dk, dv;
    enum attn_dtype dt;
    int bq, bk, bv;             /* 0 none, 1 shared, 2 per head */
    int abias, mask;            /* 0 none, 1 shared, 2 per head */
    enum attn_causal causal;
    int alibi;                  /* 0 none, 1 standard slopes, 2 given */
    int rope;
    enum attn_rope_pairs pairs;
    double base, scale, sink;
    enum attn_softmax sm;
    enum attn_empty_rows er;
    unsigned outputs;
    double *q, *k, *v, *biasq, *biask, *biasv, *ab, *slopes;
    uint8_t *mk;
};

/* Reference results. */
struct tref {
    long double *s, *w, *o;     /* [h][n][L], [h][n][L], [h][n][dv] */
    long double *smag, *omag;   /* magnitudes for tolerances: [h][n][L], [h][n] */
    uint8_t *masked, *empty;    /* [h][n][L], [h][n] */
};

/* A value representable in the case's dtype. */
static double rnd_val(const struct tcase *c, double lo, double hi)
{
    double x = rng_uniform(lo, hi);
    return c->dt == ATTN_F32 ? (double)(float)x : x;
}

static double *rnd_array(const struct tcase *c, size_t count, double lo, double hi)
{
    double *a = malloc(count * sizeof(double));
    for (size_t i = 0; i < count; i++)
        a[i] = rnd_val(c, lo, hi);
    return a;
}

static size_t heads_of(int mode, size_t h)
{
    return mode == 2 ? h : 1;
}

/* Allocates random data for the configuration in c. */
static void tcase_fill(struct tcase *c)
{
    c->q = rnd_array(c, c->h * c->n * c->dk, -1, 1);
    c->k = rnd_array(c, c->h_kv * c->L * c->dk, -1, 1);
    c->v = rnd_array(c, c->h_kv * c->L * c->dv, -1, 1);
    c->biasq = c->bq ? rnd_array(c, heads_of(c->bq, c->h) * c->dk, -1, 1) : NULL;
    c->biask = c->bk ? rnd_array(c, heads_of(c->bk, c->h_kv) * c->dk, -1, 1) : NULL;
    c->biasv = c->bv ? rnd_array(c, heads_of(c->bv, c->h_kv) * c->dv, -1, 1) : NULL;
    c->ab = NULL;
    if (c->abias) {
        size_t cnt = heads_of(c->abias, c->h) * c->n * c->L;
        c->ab = rnd_array(c, cnt, -2, 2);
        for (size_t i = 0; i < cnt; i++)
            if (rng_u64() % 10 == 0)
                c->ab[i] = -INFINITY;
    }
    c->mk = NULL;
    if (c->mask) {
        size_t cnt = heads_of(c->mask, c->h) * c->n * c->L;
        c->mk = malloc(cnt);
        for (size_t i = 0; i < cnt; i++)
            c->mk[i] = rng_u64() % 10 >= 3;
    }
    c->slopes = NULL;
    if (c->alibi == 2)
        c->slopes = rnd_array(c, c->h, 0, 1);
}

static void tcase_free(struct tcase *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->biasq);
    free(c->biask);
    free(c->biasv);
    free(c->ab);
    free(c->mk);
    free(c->slopes);
}

/* ---- the reference ---------------------------------------------------- */

/* x [d] rotated at position pos, long double, straight from the rules of the API. */
static void ref_rope(long double *x, size_t d, long double pos, long double base,
                     enum attn_rope_pairs pairs)
{
    for (size_t i = 0; i < d / 2; i++) {
        long double th = powl(base, -2.0L * (long double)i / (long double)d);
        size_t a = pairs == ATTN_ROPE_INTERLEAVED ? 2 * i : i;
        size_t b = pairs == ATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + d / 2;
        long double xa = x[a], xb = x[b];
        x[a] = xa * cosl(pos * th) - xb * sinl(pos * th);
        x[b] = xa * sinl(pos * th) + xb * cosl(pos * th);
    }
}

static void ref_attention(const struct tcase *c, struct tref *r)
{
    size_t h = c->h, n = c->n, L = c->L, dk = c->dk, dv = c->dv;
    r->s = calloc(h * n * L, sizeof(long double));
    r->w = calloc(h * n * L, sizeof(long double));
    r->o = calloc(h * n * dv, sizeof(long double));
    r->smag = calloc(h * n * L, sizeof(long double));
    r->omag = calloc(h * n, sizeof(long double));
    r->masked = calloc(h * n * L, 1);
    r->empty = calloc(h * n, 1);
    long double *qi = malloc(dk * sizeof(long double));
    long double *kj = malloc(dk * sizeof(long double));
    for (size_t hh = 0; hh < h; hh++) {
        size_t g = hh * c->h_kv / h;   /* floor(hh * h_kv / h) */
        long double slope = 0;
        if (c->alibi == 1)
            slope = powl(2.0L, -8.0L * (long double)(hh + 1) / (long double)h);
        else if (c->alibi == 2)
            slope = c->slopes[hh];
        for (size_t i = 0; i < n; i++) {
            long double pq = c->causal == ATTN_CAUSAL_TOP_LEFT
                                 ? (long double)i
                                 : (long double)L - (long double)n + (long double)i;
            for (size_t t = 0; t < dk; t++)
                qi[t] = (long double)c->q[(hh * n + i) * dk + t] +
                        (c->bq ? c->biasq[(c->bq == 2 ? hh : 0) * dk + t] : 0);
            if (c->rope)
                ref_rope(qi, dk, pq, c->base, c->pairs);
            size_t row = hh * n + i;
            long double *s = r->s + row * L;
            uint8_t *msk = r->masked + row * L;
            int any = 0;
            for (size_t j = 0; j < L; j++) {
                for (size_t t = 0; t < dk; t++)
                    kj[t] = (long double)c->k[(g * L + j) * dk + t] +
                            (c->bk ? c->biask[(c->bk == 2 ? g : 0) * dk + t] : 0);
                if (c->rope)
                    ref_rope(kj, dk, (long double)j, c->base, c->pairs);
                long double dot = 0, mag = 0;
                for (size_t t = 0; t < dk; t++) {
                    dot += qi[t] * kj[t];
                    mag += fabsl(qi[t] * kj[t]);
                }
                long double sc = c->scale * dot;
                mag = c->scale * mag + 1;
                int m = 0;
                if (c->causal != ATTN_CAUSAL_NONE && (long double)j > pq)
                    m = 1;
                if (c->mask && !c->mk[((c->mask == 2 ? hh : 0) * n + i) * L + j])
                    m = 1;
                if (c->abias) {
                    double b = c->ab[((c->abias == 2 ? hh : 0) * n + i) * L + j];
                    if (b == -INFINITY)
                        m = 1;
                    else {
                        sc += b;
                        mag += fabsl((long double)b);
                    }
                }
                if (c->alibi) {
                    long double a = slope * fabsl(pq - (long double)j);
                    sc -= a;
                    mag += a;
                }
                msk[j] = (uint8_t)m;
                s[j] = sc;
                r->smag[row * L + j] = mag;
                any |= !m;
            }
            if (!any) {
                r->empty[row] = 1;
                continue;   /* weights and output stay 0 */
            }
            long double mx = -INFINITY, den = 0;
            for (size_t j = 0; j < L; j++)
                if (!msk[j] && s[j] > mx)
                    mx = s[j];
            if (c->sm == ATTN_SOFTMAX_ONE && mx < 0)
                mx = 0;
            if (c->sm == ATTN_SOFTMAX_SINK && mx < c->sink)
                mx = c->sink;
            if (c->sm == ATTN_SOFTMAX_ONE)
                den = expl(-mx);
            if (c->sm == ATTN_SOFTMAX_SINK)
                den = expl((long double)c->sink - mx);
            for (size_t j = 0; j < L; j++)
                if (!msk[j])
                    den += expl(s[j] - mx);
            long double *w = r->w + row * L;
            for (size_t j = 0; j < L; j++)
                w[j] = msk[j] ? 0 : expl(s[j] - mx) / den;
            for (size_t t = 0; t < dv; t++) {
                long double acc = 0;
                for (size_t j = 0; j < L; j++) {
                    long double vj = (long double)c->v[(g * L + j) * dv + t] +
                                     (c->bv ? c->biasv[(c->bv == 2 ? g : 0) * dv + t] : 0);
                    acc += w[j] * vj;
                    r->omag[row] += fabsl(w[j] * vj);
                }
                r->o[row * dv + t] = acc;
            }
        }
    }
    free(qi);
    free(kj);
}

static void tref_free(struct tref *r)
{
    free(r->s);
    free(r->w);
    free(r->o);
    free(r->smag);
    free(r->omag);
    free(r->masked);
    free(r->empty);
}

/* ---- running the core on a case --------------------------------------- */

/* double array -> new array of dtype dt (NULL stays NULL) */
static void *to_dtype(const double *a, size_t count, enum attn_dtype dt)
{
    if (!a)
        return NULL;
    if (dt == ATTN_F64) {
        double *d = malloc(count * sizeof(double));
        memcpy(d, a, count * sizeof(double));
        return d;
    }
    float *f = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        f[i] = (float)a[i];
    return f;
}

static double get_val(const void *buf, size_t i, enum attn_dtype dt)
{
    return dt == ATTN_F32 ? (double)((const float *)buf)[i] : ((const double *)buf)[i];
}

/* Everything the core needs for a case, in the case's dtype. */
struct tcore {
    struct attn_request req;
    struct attn_inputs in;
    struct attn_result out;
    void *scores, *weights, *output;
    uint8_t *empty;
};

static void tcore_init(const struct tcase *c, struct tcore *t)
{
    memset(t, 0, sizeof *t);
    size_t esz = attn_dtype_size(c->dt);
    t->req.shape = (struct attn_shape){c->h, c->h_kv, c->n, c->L, c->dk, c->dv, 1};
    t->req.params = (struct attn_params){
        .dtype = c->dt, .scale = c->scale, .softmax = c->sm, .sink_logit = c->sink,
        .rope = c->rope != 0, .rope_base = c->base, .rope_pairs = c->pairs,
        .alibi = c->alibi != 0, .alibi_slopes = c->slopes};
    t->req.causal = c->causal;
    t->req.empty_rows = c->er;
    t->req.attn_bias = to_dtype(c->ab, heads_of(c->abias, c->h) * c->n * c->L, c->dt);
    t->req.attn_bias_heads = heads_of(c->abias, c->h);
    t->req.mask = c->mk;
    t->req.mask_heads = heads_of(c->mask, c->h);
    t->req.outputs = c->outputs;
    t->in.q = to_dtype(c->q, c->h * c->n * c->dk, c->dt);
    t->in.k = to_dtype(c->k, c->h_kv * c->L * c->dk, c->dt);
    t->in.v = to_dtype(c->v, c->h_kv * c->L * c->dv, c->dt);
    t->in.bias_q = to_dtype(c->biasq, heads_of(c->bq, c->h) * c->dk, c->dt);
    t->in.bias_k = to_dtype(c->biask, heads_of(c->bk, c->h_kv) * c->dk, c->dt);
    t->in.bias_v = to_dtype(c->biasv, heads_of(c->bv, c->h_kv) * c->dv, c->dt);
    t->in.bias_q_heads = heads_of(c->bq, c->h);
    t->in.bias_k_heads = heads_of(c->bk, c->h_kv);
    t->in.bias_v_heads = heads_of(c->bv, c->h_kv);
    size_t hn = c->h * c->n;
    if (c->outputs & ATTN_OUT_SCORES)
        t->out.scores = t->scores = calloc(hn * c->L, esz);
    if (c->outputs & ATTN_OUT_WEIGHTS)
        t->out.weights = t->weights = calloc(hn * c->L, esz);
    if (c->outputs & ATTN_OUT_OUTPUT)
        t->out.output = t->output = calloc(hn * c->dv, esz);
    t->out.empty = t->empty = calloc(hn, 1);
}

static void tcore_free(struct tcore *t)
{
    free((void *)t->req.attn_bias);
    free((void *)t->in.q);
    free((void *)t->in.k);
    free((void *)t->in.v);
    free((void *)t->in.bias_q);
    free((void *)t->in.bias_k);
    free((void *)t->in.bias_v);
    free(t->scores);
    free(t->weights);
    free(t->output);
    free(t->empty);
}

/* Compares core results with the reference; counts mismatches. */
static int compare(const struct tcase *c, const struct tcore *t, const struct tref *r)
{
    double tol = c->dt == ATTN_F64 ? 1e-12 : 1e-5;
    double floor = c->dt == ATTN_F64 ? 1e-300 : 1e-35;
    size_t hn = c->h * c->n, L = c->L;
    int bad = 0;
    size_t n_empty = 0;
    for (size_t row = 0; row < hn; row++) {
        n_empty += r->empty[row];
        if (t->empty[row] != r->empty[row] && bad++ < 5)
            printf("    empty flag row %zu: %d vs ref %d\n", row, t->empty[row], r->empty[row]);
        long double rowmag = 0;
        for (size_t j = 0; j < L; j++)
            if (!r->masked[row * L + j] && r->smag[row * L + j] > rowmag)
                rowmag = r->smag[row * L + j];
        for (size_t j = 0; j < L && t->scores; j++) {
            size_t x = row * L + j;
            double got = get_val(t->scores, x, c->dt);
            int ok = r->masked[x] ? got == -INFINITY
                                  : isfinite(got) && fabsl(got - r->s[x]) <= tol * r->smag[x];
            if (!ok && bad++ < 5)
                printf("    score [%zu][%zu] %.17g vs ref %.17Lg\n", row, j, got, r->s[x]);
        }
        for (size_t j = 0; j < L && t->weights; j++) {
            size_t x = row * L + j;
            double got = get_val(t->weights, x, c->dt);
            int ok = isfinite(got) &&
                     fabsl(got - r->w[x]) <= tol * r->w[x] * (1 + rowmag) + floor;
            if (!ok && bad++ < 5)
                printf("    weight [%zu][%zu] %.17g vs ref %.17Lg\n", row, j, got, r->w[x]);
        }
        for (size_t j = 0; j < c->dv && t->output; j++) {
            size_t x = row * c->dv + j;
            double got = get_val(t->output, x, c->dt);
            int ok = isfinite(got) &&
                     fabsl(got - r->o[x]) <= tol * r->omag[row] * (1 + rowmag) + floor;
            if (!ok && bad++ < 5)
                printf("    output [%zu][%zu] %.17g vs ref %.17Lg\n", row, j, got, r->o[x]);
        }
    }
    if (t->out.n_empty != n_empty && bad++ < 5)
        printf("    n_empty %zu vs ref %zu\n", t->out.n_empty, n_empty);
    return bad;
}

static void print_case(const struct tcase *c)
{
    printf("    case: %s h=%zu h_kv=%zu n=%zu L=%zu dk=%zu dv=%zu bias q/k/v=%d/%d/%d "
           "ab=%d mask=%d causal=%d alibi=%d rope=%d/%d sm=%d er=%d out=%u scale=%g\n",
           attn_dtype_name(c->dt), c->h, c->h_kv, c->n, c->L, c->dk, c->dv, c->bq, c->bk,
           c->bv, c->abias, c->mask, (int)c->causal, c->alibi, c->rope, (int)c->pairs,
           (int)c->sm, (int)c->er, c->outputs, c->scale);
}

/* Runs c through attn_forward and checks it against the reference.
 * Returns the number of problems. */
static int run_case(const struct tcase *c, struct attn_ws *ws)
{
    struct tref r;
    struct tcore t;
    ref_attention(c, &r);
    tcore_init(c, &t);
    enum core_status st = attn_forward(&t.req, &t.in, &t.out, ws);
    int any_empty = 0, bad = 0;
    for (size_t i = 0; i < c->h * c->n; i++)
        any_empty |= r.empty[i];
    if (c->er == ATTN_EMPTY_ERROR && any_empty) {
        if (st != CORE_EEMPTYROW) {
            printf("    expected CORE_EEMPTYROW, got %s\n", core_status_name(st));
            bad = 1;
        }
    } else if (st != CORE_OK) {
        printf("    status %s\n", core_status_name(st));
        bad = 1;
    } else {
        bad = compare(c, &t, &r);
    }
    if (bad)
        print_case(c);
    tref_free(&r);
    tcore_free(&t);
    return bad;
}

/* A random configuration; small dimensions, with one of them sometimes 257. */
static void random_case(struct tcase *c, enum attn_dtype dt)
{
    static const size_t dims[] = {1, 2, 3, 5, 7, 8, 13, 16, 31};
    static const size_t heads[][2] = {{1, 1}, {2, 1}, {2, 2}, {3, 1}, {4, 2}, {6, 3}, {4, 4}};
    memset(c, 0, sizeof *c);
    c->dt = dt;
    size_t hi = rng_u64() % 7;
    c->h = heads[hi][0];
    c->h_kv = heads[hi][1];
    c->n = rng_pick(dims, 9);
    c->L = rng_pick(dims, 9);
    c->dk = rng_pick(dims, 9);
    c->dv = rng_pick(dims, 9);
    switch (rng_u64() % 6) {   /* one large (prime) dimension now and then */
    case 0: c->L = 257; c->h = c->h_kv = 1; break;
    case 1: c->n = 257; c->h = c->h_kv = 1; break;
    case 2: c->dk = 257; break;
    default: break;
    }
    c->rope = rng_u64() % 3 == 0;
    if (c->rope && c->dk % 2)
        c->dk = c->dk == 257 ? 256 : c->dk + 1;
    c->pairs = rng_u64() % 2 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
    c->base = rng_u64() % 2 ? 10000 : 100;
    c->bq = (int)(rng_u64() % 3);
    c->bk = (int)(rng_u64() % 3);
    c->bv = (int)(rng_u64() % 3);
    c->abias = rng_u64() % 3 == 0 ? (int)(1 + rng_u64() % 2) : 0;
    c->mask = rng_u64() % 3 == 0 ? (int)(1 + rng_u64() % 2) : 0;
    c->causal = (enum attn_causal)(rng_u64() % 3);
    c->alibi = rng_u64() % 3 == 0 ? (int)(1 + rng_u64() % 2) : 0;
    c->scale = rng_u64() % 2 ? attn_default_scale(c->dk) : rng_uniform(0.05, 2);
    c->sm = (enum attn_softmax)(rng_u64() % 3);
    c->sink = rng_uniform(-3, 3);
    c->er = rng_u64() % 4 == 0 ? ATTN_EMPTY_ERROR : ATTN_EMPTY_ZERO;
    c->outputs = rng_u64() % 4 == 0 ? (unsigned)(1 + rng_u64() % 7) : ATTN_OUT_ALL;
    tcase_fill(c);
}

static void random_suite(enum attn_dtype dt, int cases)
{
    cases = t_cases(cases);
    struct attn_ws *ws = attn_ws_new();
    int failures = 0;
    for (int i = 0; i < cases; i++) {
        struct tcase c;
        random_case(&c, dt);
        /* every other case without a workspace (the temporary one) */
        int bad = run_case(&c, i % 2 ? ws : NULL);
        tcase_free(&c);
        if (bad && ++failures > 3)
            break;
    }
    CHECK(failures == 0);
    attn_ws_free(ws);
}

TEST(random_f64_matches_reference) { random_suite(ATTN_F64, 300); }
TEST(random_f32_matches_reference) { random_suite(ATTN_F32, 300); }

/* A plain case: random data, no options. */
static void plain_case(struct tcase *c, enum attn_dtype dt, size_t h, size_t h_kv,
                       size_t n, size_t L, size_t dk, size_t dv)
{
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->h = h;
    c->h_kv = h_kv;
    c->n = n;
    c->L = L;
    c->dk = dk;
    c->dv = dv;
    c->base = 10000;
    c->scale = attn_default_scale(dk);
    c->outputs = ATTN_OUT_ALL;
    tcase_fill(c);
}

/* Every option at once, both dtypes, decode (loop path) and prefill (gemm). */
TEST(all_options_combined)
{
    for (int dt = 0; dt < 2; dt++) {
        for (int variant = 0; variant < 3; variant++) {
            struct tcase c;
            plain_case(&c, (enum attn_dtype)dt, 1, 1, 1, 1, 1, 1);
            tcase_free(&c);
            c.h = 6;
            c.h_kv = 2;
            c.n = variant == 0 ? 1 : 40;
            c.L = 37;
            c.dk = 16;
            c.dv = 11;
            c.bq = 2;
            c.bk = 2;
            c.bv = 1;
            c.abias = 2;
            c.mask = 1;
            c.causal = variant == 2 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT;
            c.alibi = variant == 1 ? 2 : 1;
            c.rope = 1;
            c.pairs = variant == 1 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
            c.sm = (enum attn_softmax)variant;
            c.sink = 0.7;
            c.scale = 0.3;
            tcase_fill(&c);
            CHECK(run_case(&c, NULL) == 0);
            tcase_free(&c);
        }
    }
}

/* ---- the worked example of the seed document ------------------------- */

/* q=(1,0); k=(1,0),(0,1),(-1,0); bQ=(0,1); bK=(3,-2); d_k=2. */
TEST(seed_table_four_bias_conditions)
{
    static const double exp_s[4][3] = {{0.707107, 0, -0.707107},
                                       {0.707107, 0.707107, -0.707107},
                                       {2.828427, 2.121320, 1.414214},
                                       {1.414214, 1.414214, 0}};
    static const double exp_w[2][3] = {{0.575975, 0.283995, 0.140029},
                                       {0.445808, 0.445808, 0.108383}};
    double q[2] = {1, 0}, k[6] = {1, 0, 0, 1, -1, 0}, v[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    double bq[2] = {0, 1}, bk[2] = {3, -2};
    for (int cond = 0; cond < 4; cond++) {   /* none, Q, K, both */
        int with_q = cond == 1 || cond == 3, with_k = cond >= 2;
        struct attn_request r = {0};
        r.shape = (struct attn_shape){1, 1, 1, 3, 2, 3, 1};
        r.params.dtype = ATTN_F64;
        r.params.scale = attn_default_scale(2);
        r.outputs = ATTN_OUT_ALL;
        struct attn_inputs in = {q, k, v, with_q ? bq : NULL, with_k ? bk : NULL, NULL, 1, 1, 1};
        double s[3], w[3], o[3];
        struct attn_result out = {s, w, o, NULL, 0};
        CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_OK);
        for (int j = 0; j < 3; j++) {
            CHECK_NEAR(s[j], exp_s[cond][j], 5e-7);
            CHECK_NEAR(w[j], exp_w[with_q][j], 5e-7);
            CHECK_NEAR(o[j], w[j], 1e-15);   /* v is the identity */
        }
    }
}

/* softmax1 over L keys == standard softmax over a zero key + those L keys
 * (with a zero value): weights of the real keys and outputs agree. */
TEST(softmax1_equals_prepended_zero_key)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase a;
        plain_case(&a, (enum attn_dtype)dt, 2, 1, 5, 9, 4, 3);
        a.sm = ATTN_SOFTMAX_ONE;
        a.bq = 1;
        a.biasq = rnd_array(&a, 4, -1, 1);
        struct tcase b = a;   /* shares q, v shape; own k, v with the zero row */
        b.sm = ATTN_SOFTMAX_STANDARD;
        b.L = a.L + 1;
        b.k = calloc(b.L * b.dk, sizeof(double));
        b.v = calloc(b.L * b.dv, sizeof(double));
        memcpy(b.k + b.dk, a.k, a.L * a.dk * sizeof(double));
        memcpy(b.v + b.dv, a.v, a.L * a.dv * sizeof(double));
        /* the zero key must score 0 even with a Q bias: zero keys dot to 0 */
        struct tcore ta, tb;
        tcore_init(&a, &ta);
        tcore_init(&b, &tb);
        CHECK_EQ_INT(attn_forward(&ta.req, &ta.in, &ta.out, NULL), CORE_OK);
        CHECK_EQ_INT(attn_forward(&tb.req, &tb.in, &tb.out, NULL), CORE_OK);
        double tol = dt == ATTN_F64 ? 1e-14 : 1e-6;
        for (size_t row = 0; row < a.h * a.n; row++) {
            double sum = 0;
            for (size_t j = 0; j < a.L; j++) {
                double wa = get_val(ta.weights, row * a.L + j, a.dt);
                CHECK_NEAR(wa, get_val(tb.weights, row * b.L + j + 1, a.dt), tol);
                sum += wa;
            }
            CHECK(sum > 0 && sum < 1);
            for (size_t t = 0; t < a.dv; t++)
                CHECK_NEAR(get_val(ta.output, row * a.dv + t, a.dt),
                           get_val(tb.output, row * b.dv + t, a.dt), tol);
        }
        tcore_free(&ta);
        tcore_free(&tb);
        free(b.k);
        free(b.v);
        tcase_free(&a);
    }
}

/* ---- edge cases ------------------------------------------------------- */

/* One head, d_k = 1, scale 1: scores are exactly q·k. */
static enum core_status run_1d(enum attn_dtype dt, enum attn_softmax sm, double sink,
                               size_t n, size_t L, const double *q, const double *k,
                               const double *v, double *s, double *w, double *o)
{
    struct tcase c;
    memset(&c, 0, sizeof c);
    c.dt = dt;
    c.h = c.h_kv = 1;
    c.n = n;
    c.L = L;
    c.dk = c.dv = 1;
    c.scale = 1;
    c.sm = sm;
    c.sink = sink;
    c.outputs = ATTN_OUT_ALL;
    c.q = (double *)(uintptr_t)q;
    c.k = (double *)(uintptr_t)k;
    c.v = (double *)(uintptr_t)v;
    struct tcore t;
    tcore_init(&c, &t);
    enum core_status st = attn_forward(&t.req, &t.in, &t.out, NULL);
    for (size_t i = 0; i < n * L; i++) {
        s[i] = get_val(t.scores, i, dt);
        w[i] = get_val(t.weights, i, dt);
    }
    for (size_t i = 0; i < n; i++)
        o[i] = get_val(t.output, i, dt);
    tcore_free(&t);
    return st;
}

TEST(huge_scores_stay_finite)
{
    /* scores ±1e30: q = 1e15, k = ±1e15 */
    double q[1] = {1e15}, k[2] = {1e15, -1e15}, v[2] = {2, 3}, s[2], w[2], o[1];
    for (int dt = 0; dt < 2; dt++) {
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_STANDARD, 0, 1, 2, q, k, v,
                            s, w, o), CORE_OK);
        CHECK_NEAR(s[0], 1e30, 1e24);
        CHECK_NEAR(s[1], -1e30, 1e24);
        CHECK(w[0] == 1 && w[1] == 0 && o[0] == 2);
        for (int sm = 1; sm < 3; sm++) {   /* softmax1 and sink: the big one wins */
            CHECK_EQ_INT(run_1d((enum attn_dtype)dt, (enum attn_softmax)sm, 5, 1, 2, q, k,
                                v, s, w, o), CORE_OK);
            CHECK(w[0] == 1 && w[1] == 0 && o[0] == 2);
        }
    }
}

TEST(softmax1_large_magnitudes)
{
    double q[1] = {1}, v[2] = {2, 3}, s[2], w[2], o[1];
    for (int dt = 0; dt < 2; dt++) {
        /* +1000: exp(1000) would overflow; the shift max(m,0) = 1000 keeps it finite */
        double kp[2] = {1000, 999};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kp, v, s, w,
                            o), CORE_OK);
        double e1 = 1 / (1 + exp(-1.0));   /* exp(-1000) is lost, as it should be */
        CHECK_NEAR(w[0], e1, 1e-6);
        CHECK_NEAR(w[1], 1 - e1, 1e-6);
        CHECK(isfinite(o[0]));
        /* -1000: weights exp(-1000) ~ 0 and the row sum goes to 0, not 1 */
        double kn[2] = {-1000, -1000};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kn, v, s, w,
                            o), CORE_OK);
        CHECK(w[0] == 0 && w[1] == 0 && o[0] == 0);
        /* "subtract the max then add 1" would give 1/3 each here; correct is ~0 */
        double kz[2] = {-30, -30};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kz, v, s, w,
                            o), CORE_OK);
        CHECK_NEAR(w[0], exp(-30.0) / (1 + 2 * exp(-30.0)), 1e-18);
        /* sink: shift max(m, sink) with a large sink */
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, 1000, 1, 2, q, kz, v, s,
                            w, o), CORE_OK);
        CHECK(w[0] == 0 && isfinite(o[0]));
        /* sinks at ±1e30: all mass on the sink / none on it */
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, 1e30, 1, 2, q, kz, v, s,
                            w, o), CORE_OK);
        CHECK(w[0] == 0 && w[1] == 0 && o[0] == 0);
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, -1e30, 1, 2, q, kp, v, s,
                            w, o), CORE_OK);
        CHECK_NEAR(w[0], e1, 1e-6);
        CHECK_NEAR(w[0] + w[1], 1, 1e-6);
    }
}

TEST(d_k_1_and_L_1)
{
    double q[3] = {0.5, -2, 7}, k[1] = {3}, v[1] = {-4}, s[3], w[3], o[3];
    for (int dt = 0; dt < 2; dt++) {
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_STANDARD, 0, 3, 1, q, k, v, s,
                            w, o), CORE_OK);
        for (int i = 0; i < 3; i++) {
            CHECK(s[i] == q[i] * 3 && w[i] == 1 && o[i] == -4);
        }
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 3, 1, q, k, v, s, w,
                            o), CORE_OK);
        CHECK_NEAR(w[0], 1 / (1 + exp(-1.5)), 1e-6);        /* m = 1.5 > 0 */
        CHECK_NEAR(w[1], exp(-6.0) / (1 + exp(-6.0)), 1e-6); /* m = -6 < 0 */
    }
}

/* A case with one head whose second row has no allowed key. */
static void empty_row_case(struct tcase *c, enum attn_dtype dt, enum attn_empty_rows er)
{
    plain_case(c, dt, 2, 1, 3, 4, 3, 2);
    c->mask = 1;
    c->mk = malloc(3 * 4);
    memset(c->mk, 1, 3 * 4);
    memset(c->mk + 4, 0, 4);   /* row 1, shared by both heads */
    c->er = er;
}

TEST(empty_rows_policy_zero)
{
    for (int dt = 0; dt < 2; dt++) {
        for (int sm = 0; sm < 3; sm++) {
            struct tcase c;
            empty_row_case(&c, (enum attn_dtype)dt, ATTN_EMPTY_ZERO);
            c.sm = (enum attn_softmax)sm;
            c.sink = 0.5;
            struct tcore t;
            tcore_init(&c, &t);
            CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
            CHECK_EQ_INT(t.out.n_empty, 2);
            for (size_t hh = 0; hh < 2; hh++)
                for (size_t i = 0; i < 3; i++) {
                    size_t row = hh * 3 + i;
                    CHECK_EQ_INT(t.empty[row], i == 1);
                    for (size_t j = 0; j < 4; j++) {
                        double sc = get_val(t.scores, row * 4 + j, c.dt);
                        double wt = get_val(t.weights, row * 4 + j, c.dt);
                        CHECK(i == 1 ? (sc == -INFINITY && wt == 0)
                                     : (isfinite(sc) && wt > 0));
                    }
                    for (size_t j = 0; j < 2; j++) {
                        double ov = get_val(t.output, row * 2 + j, c.dt);
                        CHECK(isfinite(ov) && (i != 1 || ov == 0));
                    }
                }
            CHECK(run_case(&c, NULL) == 0);
            tcore_free(&t);
            tcase_free(&c);
        }
    }
}

TEST(empty_rows_policy_error)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        empty_row_case(&c, (enum attn_dtype)dt, ATTN_EMPTY_ERROR);
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_EEMPTYROW);
        tcore_free(&t);
        /* with every key allowed the same request succeeds */
        memset(c.mk, 1, 12);
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        CHECK_EQ_INT(t.out.n_empty, 0);
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* An all -inf attn_bias row is empty too. */
TEST(attn_bias_minus_inf_row_is_empty)
{
    struct tcase c;
    plain_case(&c, ATTN_F64, 1, 1, 2, 3, 2, 2);
    c.abias = 1;
    c.ab = calloc(6, sizeof(double));
    for (int j = 0; j < 3; j++)
        c.ab[j] = -INFINITY;
    c.ab[4] = -INFINITY;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    CHECK_EQ_INT(t.out.n_empty, 1);
    CHECK(t.empty[0] == 1 && t.empty[1] == 0);
    CHECK(((double *)t.scores)[4] == -INFINITY && ((double *)t.weights)[4] == 0);
    CHECK(run_case(&c, NULL) == 0);
    tcore_free(&t);
    tcase_free(&c);
}

/* Query head i reads kv head floor(i*h_kv/h): each head equals a one-head
 * pass against its kv head. */
TEST(gqa_heads_read_their_group)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 6, 2, 3, 5, 4, 3);
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        for (size_t hh = 0; hh < 6; hh++) {
            size_t g = hh * 2 / 6;
            struct tcase one;
            plain_case(&one, c.dt, 1, 1, 3, 5, 4, 3);
            memcpy(one.q, c.q + hh * 3 * 4, 3 * 4 * sizeof(double));
            memcpy(one.k, c.k + g * 5 * 4, 5 * 4 * sizeof(double));
            memcpy(one.v, c.v + g * 5 * 3, 5 * 3 * sizeof(double));
            struct tcore t1;
            tcore_init(&one, &t1);
            CHECK_EQ_INT(attn_forward(&t1.req, &t1.in, &t1.out, NULL), CORE_OK);
            for (size_t x = 0; x < 3 * 3; x++)
                CHECK_NEAR(get_val(t1.output, x, c.dt), get_val(t.output, hh * 9 + x, c.dt),
                           1e-6);
            tcore_free(&t1);
            tcase_free(&one);
        }
        CHECK(run_case(&c, NULL) == 0);
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* n > L, bottom-right: query i sits at L-n+i, so the first n-L rows see no key. */
TEST(causal_n_greater_than_L)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 1, 1, 5, 3, 2, 2);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        CHECK_EQ_INT(t.out.n_empty, 2);
        for (size_t i = 0; i < 5; i++) {
            CHECK_EQ_INT(t.empty[i], i < 2);
            for (size_t j = 0; j < 3; j++) {
                int allowed = (long)j <= (long)i - 2;
                double sc = get_val(t.scores, i * 3 + j, c.dt);
                CHECK(allowed ? isfinite(sc) : sc == -INFINITY);
            }
        }
        CHECK_NEAR(get_val(t.weights, 2 * 3 + 0, c.dt), 1, 0);   /* row 2: key 0 only */
        CHECK(run_case(&c, NULL) == 0);
        c.er = ATTN_EMPTY_ERROR;
        CHECK(run_case(&c, NULL) == 0);   /* expects CORE_EEMPTYROW */
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* n=2, L=4: top-left puts query 0 at position 0 (one key), bottom-right at
 * position 2 (three keys). ALiBi and RoPE follow the same positions. */
TEST(causal_top_left_vs_bottom_right)
{
    struct tcase c;
    plain_case(&c, ATTN_F64, 1, 1, 2, 4, 4, 2);
    c.causal = ATTN_CAUSAL_TOP_LEFT;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    const double *w = t.weights;
    CHECK(w[0] == 1 && w[1] == 0 && w[2] == 0 && w[3] == 0);
    CHECK(w[4] > 0 && w[5] > 0 && w[6] == 0 && w[7] == 0);
    tcore_free(&t);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    w = t.weights;
    CHECK(w[0] > 0 && w[1] > 0 && w[2] > 0 && w[3] == 0);
    CHECK(w[4] > 0 && w[5] > 0 && w[6] > 0 && w[7] > 0);
    tcore_free(&t);
    for (int causal = 1; causal < 3; causal++) {
        c.causal = (enum attn_causal)causal;
        c.alibi = 1;
        c.rope = 1;
        CHECK(run_case(&c, NULL) == 0);
    }
    tcase_free(&c);
}

TEST(alibi_standard_slopes)
{
    CHECK_NEAR(attn_alibi_slope(0, 8), 0.5, 0);
    CHECK_NEAR(attn_alibi_slope(7, 8), 1.0 / 256, 0);
    CHECK_NEAR(attn_alibi_slope(0, 1), 1.0 / 256, 0);
    CHECK_NEAR(attn_default_scale(4), 0.5, 0);
}

/* ---- validation ------------------------------------------------------- */

static struct attn_request valid_request(void)
{
    struct attn_request r = {0};
    r.shape = (struct attn_shape){4, 2, 3, 5, 8, 8, 1};
    r.params.dtype = ATTN_F64;
    r.params.scale = 0.5;
    r.params.rope_base = 10000;
    r.outputs = ATTN_OUT_ALL;
    return r;
}

TEST(check_rejects_bad_requests)
{
    struct attn_request r = valid_request();
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.shape.h_kv = 3;                                   /* 4 % 3 != 0 */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.h_kv = 8;                                   /* more kv heads than heads */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.n = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.d_v = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.params.rope = true;
    r.shape.d_k = 7;                                    /* RoPE needs even d_k */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.attn_bias = &r;                                   /* any non-NULL pointer */
    r.attn_bias_heads = 2;                              /* neither 1 nor h */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r.attn_bias_heads = 4;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r = valid_request();
    r.mask = (const uint8_t *)&r;
    r.mask_heads = 3;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.params.scale = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.scale = NAN;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.params.softmax = ATTN_SOFTMAX_SINK;
    r.params.sink_logit = INFINITY;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.sink_logit = 1e300;                        /* finite, but not as float32 */
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.dtype = ATTN_F32;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.sink_logit = 1e30;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.scale = 1e39;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.params.rope = true;
    r.params.rope_base = -1;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.outputs = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.outputs = 8;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    CHECK_EQ_INT(attn_check(NULL), CORE_EINVAL);
}

TEST(check_rejects_overflowing_products)
{
    struct attn_request r = valid_request();
    r.shape.h = r.shape.h_kv = 1;
    r.shape.n = (size_t)1 << 31;                        /* beyond BLAS int */
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = (size_t)1 << 30;         /* h·n·L·8 overflows */
    r.shape.n = r.shape.L = (size_t)1 << 20;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = (size_t)1 << 26;         /* h_kv·L·d_k·8 overflows */
    r.shape.L = r.shape.d_k = (size_t)1 << 20;
    r.shape.n = 1;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = SIZE_MAX;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
}

TEST(check_inputs_bias_heads)
{
    struct attn_request r = valid_request();
    double dummy[1];
    struct attn_inputs in = {dummy, dummy, dummy, NULL, NULL, NULL, 1, 1, 1};
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_OK);
    in.bias_q = dummy;
    in.bias_q_heads = 2;                                /* neither 1 nor h = 4 */
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_ESHAPE);
    in.bias_q_heads = 4;
    in.bias_k = dummy;
    in.bias_k_heads = 4;                                /* k bias is per kv head: 2 */
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_ESHAPE);
    in.bias_k_heads = 2;
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_OK);
    in.v = NULL;
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_EINVAL);
}

TEST(status_names)
{
    CHECK_STR(core_status_name(CORE_EEMPTYROW), "CORE_EEMPTYROW");
    CHECK_STR(core_status_text(CORE_OK), "ok");
    CHECK_STR(core_status_name((enum core_status)-99), "CORE_UNKNOWN");
}

#if !defined(__SANITIZE_ADDRESS__)
/* A request that passes attn_check but whose scratch cannot be allocated
 * returns CORE_ENOMEM (never aborts); inputs are not read before that. */
TEST(enomem_is_a_value)
{
    struct attn_request r = valid_request();
    r.shape = (struct attn_shape){1, 1, 1, (size_t)1 << 28, (size_t)1 << 28, 1, 1};
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    double dummy[1] = {0}, outb[1];
    struct attn_inputs in = {dummy, dummy, dummy, NULL, dummy, NULL, 1, 1, 1};
    struct attn_result out = {NULL, NULL, outb, NULL, 0};
    r.outputs = ATTN_OUT_OUTPUT;
    CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_ENOMEM);
}
#endif

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
    int bad = 0;
    double tol = c->dt == ATTN_F64 ? 1e-13 : 2e-6;
    if (st != st_full) {
        printf("    status %s vs full %s\n", core_status_name(st), core_status_name(st_full));
        bad++;
    } else if (st == CORE_OK) {
        for (size_t x = 0; x < rows * c->dv; x++) {
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

/* Scores only: no softmax needed, but empty rows are still found. */
TEST(scores_only)
{
    struct tcase c;
    empty_row_case(&c, ATTN_F32, ATTN_EMPTY_ZERO);
    c.outputs = ATTN_OUT_SCORES;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK(t.weights == NULL && t.output == NULL);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    CHECK_EQ_INT(t.out.n_empty, 2);
    CHECK(run_case(&c, NULL) == 0);
    tcore_free(&t);
    tcase_free(&c);
}

/* float32 q·k beyond FLT_MAX is reported, not passed on as inf. */
TEST(f32_overflow_is_nonfinite_error)
{
    double q[1] = {1e30}, k[1] = {1e30}, v[1] = {1}, s[1], w[1], o[1];
    CHECK_EQ_INT(run_1d(ATTN_F32, ATTN_SOFTMAX_STANDARD, 0, 1, 1, q, k, v, s, w, o),
                 CORE_ENONFINITE);
    CHECK_EQ_INT(run_1d(ATTN_F64, ATTN_SOFTMAX_STANDARD, 0, 1, 1, q, k, v, s, w, o),
                 CORE_OK);
    CHECK_NEAR(s[0], 1e60, 1e45);
    CHECK(w[0] == 1 && o[0] == 1);
}

TEST(blas_config_text)
{
    CHECK(attn_blas_config() != NULL && strlen(attn_blas_config()) > 0);
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
 * float rounding on a large causal case: several row tiles (512 rows),
 * superblocks of keys, ragged groups, d not a multiple of 8. */
TEST(fused_equals_materialised_large)
{
    for (int cm = 0; cm < 3; cm++) {
        struct tcase c;
        plain_case(&c, ATTN_F32, 2, 1, 700, 1500, 72, 67);
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
        CHECK(same_bytes(fused.empty, full.empty, 2 * 700));
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
 * without: they agree bit for bit (the pieces depend only on the request). */
static int pool_case(const struct tcase *c, struct attn_pool *pool)
{
    struct attn_ws *ws = attn_ws_new(), *plain = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    int bad = run_case(c, ws);
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
    RUN(seed_table_four_bias_conditions);
    RUN(softmax1_equals_prepended_zero_key);
    RUN(huge_scores_stay_finite);
    RUN(softmax1_large_magnitudes);
    RUN(d_k_1_and_L_1);
    RUN(empty_rows_policy_zero);
    RUN(empty_rows_policy_error);
    RUN(attn_bias_minus_inf_row_is_empty);
    RUN(gqa_heads_read_their_group);
    RUN(causal_n_greater_than_L);
    RUN(causal_top_left_vs_bottom_right);
    RUN(alibi_standard_slopes);
    RUN(check_rejects_bad_requests);
    RUN(check_rejects_overflowing_products);
    RUN(check_inputs_bias_heads);
    RUN(status_names);
#if !defined(__SANITIZE_ADDRESS__)
    RUN(enomem_is_a_value);
#endif
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
    RUN(scores_only);
    RUN(f32_overflow_is_nonfinite_error);
    RUN(blas_config_text);
    RUN(all_options_combined);
    RUN(random_f64_matches_reference);
    RUN(random_f32_matches_reference);
    TEST_MAIN_END();
}
