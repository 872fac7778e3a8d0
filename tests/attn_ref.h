/*
 * tests/attn_ref.h — a case of the attention core (core/attn.h) and what
 * the tests of tests/unit/test_attn*.c do with it: build it, check it
 * against an independent reference, and run it through the core.
 *
 * struct tcase is one request: shapes, dtype and every option, its data
 * (held as double, representable in the dtype) drawn from this header's
 * deterministic generator (rng_state, one per test program).
 * ref_attention is a deliberately naive implementation in long double
 * (plain loops over heads, rows, keys; no tiling, no BLAS, written from the
 * API's formulas and not from core/attn_impl.h). tcore_init lays a case out
 * as the core takes it; run_case runs it through attn_forward and compares
 * every returned number with the reference, returning the problems it
 * found (the caller CHECKs the count). random_case draws a configuration
 * over every option; plain_case one with random data and no options.
 * Header-only (static functions), as tests/harness.h.
 */
#ifndef ATTND_TEST_ATTN_REF_H
#define ATTND_TEST_ATTN_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/harness.h"

/* ---- deterministic random numbers (xorshift64*) ----------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rng_u64(void)
{
    return t_rng_next(&rng_state);
}

/* uniform in [lo, hi) */
static inline double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_u64() >> 11) / 9007199254740992.0;
}

static inline size_t rng_pick(const size_t *v, size_t nv)
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
static inline double rnd_val(const struct tcase *c, double lo, double hi)
{
    double x = rng_uniform(lo, hi);
    return c->dt == ATTN_F32 ? (double)(float)x : x;
}

static inline double *rnd_array(const struct tcase *c, size_t count, double lo, double hi)
{
    double *a = malloc(count * sizeof(double));
    for (size_t i = 0; i < count; i++)
        a[i] = rnd_val(c, lo, hi);
    return a;
}

static inline size_t heads_of(int mode, size_t h)
{
    return mode == 2 ? h : 1;
}

/* Allocates random data for the configuration in c. */
static inline void tcase_fill(struct tcase *c)
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

static inline void tcase_free(struct tcase *c)
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
static inline void ref_rope(long double *x, size_t d, long double pos, long double base,
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

static inline void ref_attention(const struct tcase *c, struct tref *r)
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

static inline void tref_free(struct tref *r)
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
static inline void *to_dtype(const double *a, size_t count, enum attn_dtype dt)
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

static inline double get_val(const void *buf, size_t i, enum attn_dtype dt)
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

static inline void tcore_init(const struct tcase *c, struct tcore *t)
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

static inline void tcore_free(struct tcore *t)
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
static inline int compare(const struct tcase *c, const struct tcore *t, const struct tref *r)
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

static inline void print_case(const struct tcase *c)
{
    printf("    case: %s h=%zu h_kv=%zu n=%zu L=%zu dk=%zu dv=%zu bias q/k/v=%d/%d/%d "
           "ab=%d mask=%d causal=%d alibi=%d rope=%d/%d sm=%d er=%d out=%u scale=%g\n",
           attn_dtype_name(c->dt), c->h, c->h_kv, c->n, c->L, c->dk, c->dv, c->bq, c->bk,
           c->bv, c->abias, c->mask, (int)c->causal, c->alibi, c->rope, (int)c->pairs,
           (int)c->sm, (int)c->er, c->outputs, c->scale);
}

/* Runs c through attn_forward and checks it against the reference.
 * Returns the number of problems. */
static inline int run_case(const struct tcase *c, struct attn_ws *ws)
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
static inline void random_case(struct tcase *c, enum attn_dtype dt)
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

/* A plain case: random data, no options. */
static inline void plain_case(struct tcase *c, enum attn_dtype dt, size_t h, size_t h_kv,
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

#endif
