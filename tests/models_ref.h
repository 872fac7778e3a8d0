/*
 * tests/models_ref.h — a case of the attention of current models (issue 16)
 * and what the tests of tests/unit/test_attn_models*.c do with it: build it,
 * run it through the core, and check it against an independent reference.
 *
 * struct mc is one request: shapes, dtype and every option (batches,
 * explicit positions, packed segments, windows with sinks, softcap, per-head
 * sinks, RoPE with partial dims and every scaling, ALiBi, biases, masks),
 * its data drawn from the file's own deterministic generator. ref_run is
 * naive long double written from the rules of the API ("The order of
 * operations", "Positions", "Masks and scores", "Rotary embedding,
 * complete"): every (batch, head, row, key) computed on its own, positions
 * counted within segments by plain counting, the RoPE frequencies from the
 * design's table. core_run runs the same case through attn_forward;
 * check_case runs both and CHECKs that every returned number agrees.
 * Header-only (static functions), as tests/harness.h, whose CHECK it uses.
 */
#ifndef ATTND_TEST_MODELS_REF_H
#define ATTND_TEST_MODELS_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/harness.h"

/* The cases' data: xorshift64* (as t_rng_next) from a fixed seed, one
 * sequence per test program. */
static uint64_t rng = 0x243f6a8885a308d3ull;

static inline uint64_t rnd_u64(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static inline double rnd(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd_u64() >> 11) / 9007199254740992.0;
}

static inline size_t rnd_int(size_t n)
{
    return (size_t)(rnd_u64() % n);
}

/* ---- a case ------------------------------------------------------------ */

struct mc {
    size_t B, h, hkv, n, L, dk, dv;
    enum attn_dtype dt;
    enum attn_causal causal;
    enum attn_softmax sm;
    double sink, *sinks;
    double softcap, scale;
    int rope;
    enum attn_rope_pairs pairs;
    double base;
    size_t dims;
    struct attn_rope_scaling sc;
    int alibi;
    struct attn_window win;
    int64_t *pq, *pk, *sq, *sk;
    size_t pqb, pkb, sgb;
    double *ab, *bq, *bk, *bv;
    uint8_t *mk;
    size_t abh, mkh, bqh, bkh, bvh;
    double *q, *k, *v;
    unsigned outputs;
};

static inline double *rnd_arr(const struct mc *c, size_t count, double lo, double hi)
{
    double *a = malloc((count ? count : 1) * sizeof(double));
    for (size_t i = 0; i < count; i++) {
        double x = rnd(lo, hi);
        a[i] = c->dt == ATTN_F32 ? (double)(float)x : x;
    }
    return a;
}

/* A plain case: data filled, no options. */
static inline void mc_init(struct mc *c, enum attn_dtype dt, size_t B, size_t h, size_t hkv,
                           size_t n, size_t L, size_t dk, size_t dv)
{
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->B = B;
    c->h = h;
    c->hkv = hkv;
    c->n = n;
    c->L = L;
    c->dk = dk;
    c->dv = dv;
    c->scale = 1 / sqrt((double)dk);
    c->base = 10000;
    c->outputs = ATTN_OUT_ALL;
    size_t Bn = B ? B : 1;
    c->q = rnd_arr(c, Bn * h * n * dk, -1, 1);
    c->k = rnd_arr(c, Bn * hkv * L * dk, -1, 1);
    c->v = rnd_arr(c, Bn * hkv * L * dv, -1, 1);
}

static inline void mc_free(struct mc *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->sinks);
    free(c->pq);
    free(c->pk);
    free(c->sq);
    free(c->sk);
    free(c->ab);
    free(c->mk);
    free(c->bq);
    free(c->bk);
    free(c->bv);
}

/* ---- the reference (long double, from the rules of the API) ---------------- */

static inline long double ref_inv_freq(const struct mc *c, size_t r, size_t i)
{
    long double base = c->base, rr = (long double)r, fac = c->sc.factor;
    if (c->sc.type == ATTN_ROPE_SCALING_NTK)
        base = base * powl(fac, rr / (rr - 2));
    long double f = powl(base, -2.0L * (long double)i / rr);
    if (c->sc.type == ATTN_ROPE_SCALING_LINEAR)
        return f / fac;
    if (c->sc.type == ATTN_ROPE_SCALING_LLAMA3) {
        long double M = c->sc.original_max_position, lam = 2 * 3.14159265358979323846264L / f;
        long double lo = c->sc.low_freq_factor, hi = c->sc.high_freq_factor;
        if (lam < M / hi)
            return f;
        if (lam > M / lo)
            return f / fac;
        long double t = (M / lam - lo) / (hi - lo);
        return (1 - t) * f / fac + t * f;
    }
    if (c->sc.type == ATTN_ROPE_SCALING_YARN) {
        long double M = c->sc.original_max_position, pi = 3.14159265358979323846264L;
        long double clo = rr * logl(M / (2 * pi * c->sc.beta_fast)) / (2 * logl(base));
        long double chi = rr * logl(M / (2 * pi * c->sc.beta_slow)) / (2 * logl(base));
        /* HF's truncate (its default): the range rounded outwards to
         * whole dims; "truncate": false (gpt-oss) keeps it as it is */
        long double lo = c->sc.no_truncate ? clo : floorl(clo);
        long double hi = c->sc.no_truncate ? chi : ceill(chi);
        lo = fminl(fmaxl(lo, 0), rr - 1);
        hi = fminl(fmaxl(hi, 0), rr - 1);
        if (lo == hi)
            hi += 0.001L;
        long double g = fminl(fmaxl(((long double)i - lo) / (hi - lo), 0), 1);
        return (f / fac) * g + f * (1 - g);
    }
    return f;
}

static inline void ref_rope(const struct mc *c, long double *x, long double pos)
{
    size_t r = c->dims == ATTN_ROPE_DIMS_ZERO ? 0 : c->dims ? c->dims : c->dk;
    long double ms = 1;
    if (c->sc.type == ATTN_ROPE_SCALING_YARN)
        ms = c->sc.attention_factor > 0 ? c->sc.attention_factor
                                        : 0.1L * logl(c->sc.factor) + 1;
    for (size_t i = 0; i < r / 2; i++) {
        long double th = ref_inv_freq(c, r, i);
        size_t a = c->pairs == ATTN_ROPE_HALF ? i : 2 * i;
        size_t b = c->pairs == ATTN_ROPE_HALF ? i + r / 2 : 2 * i + 1;
        long double xa = x[a], xb = x[b];
        x[a] = ms * (xa * cosl(pos * th) - xb * sinl(pos * th));
        x[b] = ms * (xa * sinl(pos * th) + xb * cosl(pos * th));
    }
}

/* Positions of batch element b: Pq [n], Pk [L]. */
static inline void ref_positions(const struct mc *c, size_t b, long double *Pq, long double *Pk)
{
    size_t n = c->n, L = c->L;
    const int64_t *sq = c->sq ? c->sq + (c->sgb == 1 ? 0 : b) * n : NULL;
    const int64_t *sk = c->sk ? c->sk + (c->sgb == 1 ? 0 : b) * L : NULL;
    for (size_t j = 0; j < L; j++) {
        if (c->pk) {
            Pk[j] = (long double)c->pk[(c->pkb == 1 ? 0 : b) * L + j];
        } else if (sk) {
            size_t cnt = 0;
            for (size_t t = 0; t < j; t++)
                cnt += sk[t] == sk[j];
            Pk[j] = (long double)cnt;
        } else {
            Pk[j] = (long double)j;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (c->pq) {
            Pq[i] = (long double)c->pq[(c->pqb == 1 ? 0 : b) * n + i];
        } else if (sq) {
            size_t cnt = 0, ns = 0, ls = 0;
            for (size_t t = 0; t < n; t++) {
                ns += sq[t] == sq[i];
                cnt += t < i && sq[t] == sq[i];
            }
            for (size_t t = 0; t < L; t++)
                ls += sk[t] == sq[i];
            Pq[i] = c->causal == ATTN_CAUSAL_TOP_LEFT
                        ? (long double)cnt
                        : (long double)ls - (long double)ns + (long double)cnt;
        } else {
            Pq[i] = c->causal == ATTN_CAUSAL_TOP_LEFT ? (long double)i
                                                      : (long double)L - (long double)n + (long double)i;
        }
    }
}

struct rres {
    long double *s, *w, *o;     /* [B][h][n][L], [B][h][n][L], [B][h][n][dv] */
    uint8_t *allowed, *empty;   /* [B][h][n][L], [B][h][n] */
    long double maxpos;
};

static inline void ref_run(const struct mc *c, struct rres *r)
{
    size_t B = c->B ? c->B : 1, h = c->h, n = c->n, L = c->L, dk = c->dk, dv = c->dv;
    size_t rows = B * h * n;
    r->s = calloc(rows * L, sizeof(long double));
    r->w = calloc(rows * L, sizeof(long double));
    r->o = calloc(rows * dv, sizeof(long double));
    r->allowed = calloc(rows * L, 1);
    r->empty = calloc(rows, 1);
    r->maxpos = 0;
    long double *Pq = malloc(n * sizeof(long double)), *Pk = malloc(L * sizeof(long double));
    long double *qi = malloc(dk * sizeof(long double)), *kj = malloc(dk * sizeof(long double));
    long double *kall = malloc(L * dk * sizeof(long double));
    for (size_t b = 0; b < B; b++) {
        ref_positions(c, b, Pq, Pk);
        for (size_t j = 0; j < L; j++)
            r->maxpos = fmaxl(r->maxpos, Pk[j]);
        for (size_t i = 0; i < n; i++)
            r->maxpos = fmaxl(r->maxpos, fabsl(Pq[i]));
        const int64_t *sq = c->sq ? c->sq + (c->sgb == 1 ? 0 : b) * n : NULL;
        const int64_t *sk = c->sk ? c->sk + (c->sgb == 1 ? 0 : b) * L : NULL;
        for (size_t hh = 0; hh < h; hh++) {
            size_t g = hh * c->hkv / h;
            for (size_t j = 0; j < L; j++) {
                for (size_t t = 0; t < dk; t++)
                    kall[j * dk + t] = (long double)c->k[((b * c->hkv + g) * L + j) * dk + t] +
                                       (c->bk ? c->bk[(c->bkh == 1 ? 0 : g) * dk + t] : 0);
                if (c->rope)
                    ref_rope(c, kall + j * dk, Pk[j]);
            }
            long double slope = 0, sink = c->sinks ? c->sinks[hh] : c->sink;
            if (c->alibi)
                slope = powl(2.0L, -8.0L * (long double)(hh + 1) / (long double)h);
            for (size_t i = 0; i < n; i++) {
                size_t row = (b * h + hh) * n + i;
                for (size_t t = 0; t < dk; t++)
                    qi[t] = (long double)c->q[row * dk + t] +
                            (c->bq ? c->bq[(c->bqh == 1 ? 0 : hh) * dk + t] : 0);
                if (c->rope)
                    ref_rope(c, qi, Pq[i]);
                long double *s = r->s + row * L, mx = -INFINITY;
                uint8_t *al = r->allowed + row * L;
                for (size_t j = 0; j < L; j++) {
                    memcpy(kj, kall + j * dk, dk * sizeof(long double));
                    long double dot = 0;
                    for (size_t t = 0; t < dk; t++)
                        dot += qi[t] * kj[t];
                    long double v = c->scale * dot;
                    if (c->softcap > 0)
                        v = c->softcap * tanhl(v / c->softcap);
                    int ok = 1;
                    size_t bi = c->abh == 1 ? 0 : c->abh == h ? hh : b * h + hh;
                    if (c->ab) {
                        double x = c->ab[(bi * n + i) * L + j];
                        if (x == -INFINITY)
                            ok = 0;
                        else
                            v += x;
                    }
                    v -= slope * fabsl(Pq[i] - Pk[j]);
                    size_t mi = c->mkh == 1 ? 0 : c->mkh == h ? hh : b * h + hh;
                    if (c->mk && !c->mk[(mi * n + i) * L + j])
                        ok = 0;
                    if (c->causal != ATTN_CAUSAL_NONE && Pk[j] > Pq[i])
                        ok = 0;
                    if (c->win.on) {
                        int in = (c->win.left < 0 || Pk[j] >= Pq[i] - c->win.left) &&
                                 (c->win.right < 0 || Pk[j] <= Pq[i] + c->win.right);
                        if (!in && !(Pk[j] < c->win.sinks))
                            ok = 0;
                    }
                    if (sq && sq[i] != sk[j])
                        ok = 0;
                    s[j] = v;
                    al[j] = (uint8_t)ok;
                    if (ok && v > mx)
                        mx = v;
                }
                if (mx == -INFINITY) {
                    r->empty[row] = 1;
                    continue;
                }
                if (c->sm == ATTN_SOFTMAX_ONE && mx < 0)
                    mx = 0;
                if (c->sm == ATTN_SOFTMAX_SINK && mx < sink)
                    mx = sink;
                long double den = c->sm == ATTN_SOFTMAX_ONE    ? expl(-mx)
                                  : c->sm == ATTN_SOFTMAX_SINK ? expl(sink - mx)
                                                               : 0;
                for (size_t j = 0; j < L; j++)
                    if (al[j])
                        den += expl(s[j] - mx);
                for (size_t j = 0; j < L; j++)
                    r->w[row * L + j] = al[j] ? expl(s[j] - mx) / den : 0;
                for (size_t t = 0; t < dv; t++) {
                    long double acc = 0;
                    for (size_t j = 0; j < L; j++)
                        acc += r->w[row * L + j] *
                               ((long double)c->v[((b * c->hkv + g) * L + j) * dv + t] +
                                (c->bv ? c->bv[(c->bvh == 1 ? 0 : g) * dv + t] : 0));
                    r->o[row * dv + t] = acc;
                }
            }
        }
    }
    free(Pq);
    free(Pk);
    free(qi);
    free(kj);
    free(kall);
}

static inline void rres_free(struct rres *r)
{
    free(r->s);
    free(r->w);
    free(r->o);
    free(r->allowed);
    free(r->empty);
}

/* ---- the core side ------------------------------------------------------ */

static inline void *conv(const double *a, size_t count, enum attn_dtype dt)
{
    if (!a)
        return NULL;
    size_t esz = dt == ATTN_F32 ? 4 : 8;
    void *p = malloc((count ? count : 1) * esz);
    for (size_t i = 0; i < count; i++) {
        if (dt == ATTN_F32)
            ((float *)p)[i] = (float)a[i];
        else
            ((double *)p)[i] = a[i];
    }
    return p;
}

static inline double val(const void *p, size_t i, enum attn_dtype dt)
{
    return dt == ATTN_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

struct cres {
    struct attn_request rq;
    struct attn_inputs in;
    struct attn_result out;
    void *q, *k, *v, *bq, *bk, *bv, *ab;
};

static inline void core_setup(const struct mc *c, struct cres *x)
{
    size_t B = c->B ? c->B : 1, rows = B * c->h * c->n;
    size_t esz = c->dt == ATTN_F32 ? 4 : 8;
    memset(x, 0, sizeof *x);
    struct attn_request *r = &x->rq;
    r->shape = (struct attn_shape){c->h, c->hkv, c->n, c->L, c->dk, c->dv, c->B};
    r->params.dtype = c->dt;
    r->params.scale = c->scale;
    r->params.softmax = c->sm;
    r->params.sink_logit = c->sink;
    r->params.sink_logits = c->sinks;
    r->params.softcap = c->softcap;
    r->params.rope = c->rope;
    r->params.rope_base = c->base;
    r->params.rope_pairs = c->pairs;
    r->params.rope_dims = c->dims;
    r->params.rope_scaling = c->sc;
    r->params.alibi = c->alibi;
    r->causal = c->causal;
    r->empty_rows = ATTN_EMPTY_ZERO;
    r->outputs = c->outputs;
    r->pos_q = c->pq;
    r->pos_q_batches = c->pqb;
    r->pos_k = c->pk;
    r->pos_k_batches = c->pkb;
    r->seg_q = c->sq;
    r->seg_k = c->sk;
    r->seg_batches = c->sgb;
    r->window = c->win;
    x->ab = conv(c->ab, c->abh * c->n * c->L, c->dt);
    r->attn_bias = x->ab;
    r->attn_bias_heads = c->abh;
    r->mask = c->mk;
    r->mask_heads = c->mkh;
    x->q = conv(c->q, rows * c->dk, c->dt);
    x->k = conv(c->k, B * c->hkv * c->L * c->dk, c->dt);
    x->v = conv(c->v, B * c->hkv * c->L * c->dv, c->dt);
    x->bq = conv(c->bq, c->bqh * c->dk, c->dt);
    x->bk = conv(c->bk, c->bkh * c->dk, c->dt);
    x->bv = conv(c->bv, c->bvh * c->dv, c->dt);
    x->in = (struct attn_inputs){x->q, x->k, x->v, x->bq, x->bk, x->bv, c->bqh, c->bkh, c->bvh};
    x->out.scores = calloc(rows * c->L, esz);
    x->out.weights = calloc(rows * c->L, esz);
    x->out.output = calloc(rows * c->dv, esz);
    x->out.empty = calloc(rows, 1);
}

static inline void core_free(struct cres *x)
{
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->bq);
    free(x->bk);
    free(x->bv);
    free(x->ab);
    free(x->out.scores);
    free(x->out.weights);
    free(x->out.output);
    free(x->out.empty);
}

static inline enum core_status core_run(const struct mc *c, struct cres *x, struct attn_ws *ws)
{
    core_setup(c, x);
    return attn_forward(&x->rq, &x->in, &x->out, ws);
}

static inline void print_mc(const struct mc *c)
{
    printf("  case: B=%zu h=%zu/%zu n=%zu L=%zu d=%zu/%zu %s causal=%d sm=%d sinks=%d cap=%g "
           "rope=%d dims+1=%zu pairs=%d scal=%d alibi=%d win=%d(%lld,%lld,%lld) pos=%d/%d seg=%d "
           "ab=%zu mk=%zu out=%u\n",
           c->B, c->h, c->hkv, c->n, c->L, c->dk, c->dv, c->dt == ATTN_F32 ? "f32" : "f64",
           c->causal, c->sm, c->sinks != NULL, c->softcap, c->rope,
           c->dims == ATTN_ROPE_DIMS_ZERO ? 0 : c->dims + 1, c->pairs,
           c->sc.type, c->alibi, c->win.on, (long long)c->win.left, (long long)c->win.right,
           (long long)c->win.sinks, c->pq != NULL, c->pk != NULL, c->sq != NULL, c->abh,
           c->mkh, c->outputs);
}

/* Core against the reference; true when every returned number agrees. */
static inline bool compare(const struct mc *c, const struct cres *x, const struct rres *r)
{
    size_t B = c->B ? c->B : 1, rows = B * c->h * c->n, L = c->L;
    double eps = c->dt == ATTN_F32 ? 4e-5 : 1e-10;
    /* the angle pos·θ is a double: its rounding grows with the position */
    double tol = eps + (double)r->maxpos * (c->dt == ATTN_F32 ? 4e-7 : 2e-15) * (double)c->dk;
    int bad = 0;
    for (size_t row = 0; row < rows && bad < 5; row++) {
        if (x->out.empty[row] != r->empty[row]) {
            printf("  row %zu: empty %d, reference %d\n", row, x->out.empty[row], r->empty[row]);
            bad++;
        }
        for (size_t j = 0; j < L && (c->outputs & ATTN_OUT_SCORES); j++) {
            double s = val(x->out.scores, row * L + j, c->dt);
            bool al = r->allowed[row * L + j];
            if (al != (s != -INFINITY) ||
                (al && fabs(s - (double)r->s[row * L + j]) > tol * (1 + fabs(s)))) {
                printf("  score [%zu][%zu] = %.17g, reference %.17Lg (allowed %d)\n", row, j,
                       s, r->s[row * L + j], al);
                bad++;
                break;
            }
        }
        for (size_t j = 0; j < L && (c->outputs & ATTN_OUT_WEIGHTS); j++) {
            double w = val(x->out.weights, row * L + j, c->dt);
            if (fabs(w - (double)r->w[row * L + j]) > tol) {
                printf("  weight [%zu][%zu] = %.17g, reference %.17Lg\n", row, j, w,
                       r->w[row * L + j]);
                bad++;
                break;
            }
        }
        for (size_t t = 0; t < c->dv && (c->outputs & ATTN_OUT_OUTPUT); t++) {
            double o = val(x->out.output, row * c->dv + t, c->dt);
            if (fabs(o - (double)r->o[row * c->dv + t]) > 4 * tol) {
                printf("  output [%zu][%zu] = %.17g, reference %.17Lg\n", row, t, o,
                       r->o[row * c->dv + t]);
                bad++;
                break;
            }
        }
    }
    if (bad)
        print_mc(c);
    return bad == 0;
}

/* Run c through the core and the reference; CHECK they agree. */
static inline void check_case(const struct mc *c, struct attn_ws *ws)
{
    struct cres x;
    struct rres r;
    enum core_status st = core_run(c, &x, ws);
    CHECK_EQ_INT(st, CORE_OK);
    if (st == CORE_OK) {
        ref_run(c, &r);
        CHECK(compare(c, &x, &r));
        rres_free(&r);
    } else {
        print_mc(c);
    }
    core_free(&x);
}

/* ---- option builders ---------------------------------------------------- */

static inline int64_t *ints(size_t count)
{
    return calloc(count ? count : 1, sizeof(int64_t));
}

/* Segments: [sgb][n] / [sgb][L]; contiguous runs (ids rise) or random ids
 * among `nseg` (interleaved). */
static inline void set_segments(struct mc *c, size_t sgb, size_t nseg, bool interleaved)
{
    c->sgb = sgb;
    c->sq = ints(sgb * c->n);
    c->sk = ints(sgb * c->L);
    for (size_t b = 0; b < sgb; b++) {
        for (size_t i = 0; i < c->n; i++)
            c->sq[b * c->n + i] =
                interleaved ? (int64_t)rnd_int(nseg) : (int64_t)(i * nseg / c->n);
        for (size_t j = 0; j < c->L; j++)
            c->sk[b * c->L + j] =
                interleaved ? (int64_t)rnd_int(nseg) : (int64_t)(j * nseg / c->L);
    }
}

/* Explicit positions: rising from `start` with steps 0..2 (mono) or random. */
static inline int64_t *positions(size_t batches, size_t len, int64_t start, bool mono)
{
    int64_t *p = ints(batches * len);
    for (size_t b = 0; b < batches; b++) {
        int64_t at = start + (int64_t)rnd_int(4);
        for (size_t i = 0; i < len; i++) {
            p[b * len + i] = mono ? at : start + (int64_t)rnd_int(2 * len + 3);
            at += (int64_t)rnd_int(3);
        }
    }
    return p;
}

static inline void set_rope_scaling(struct mc *c, enum attn_rope_scaling_type t)
{
    c->sc = (struct attn_rope_scaling){0};
    c->sc.type = t;
    c->sc.factor = rnd(1, 8);
    if (t == ATTN_ROPE_SCALING_LLAMA3) {
        c->sc.low_freq_factor = 1;
        c->sc.high_freq_factor = 4;
        c->sc.original_max_position = 64;     /* small: every band has pairs */
    } else if (t == ATTN_ROPE_SCALING_YARN) {
        c->sc.original_max_position = 256;
        c->sc.beta_fast = 32;
        c->sc.beta_slow = 1;
        c->sc.attention_factor = rnd_int(2) ? 0 : rnd(0.5, 1.5);
    }
}

#endif
