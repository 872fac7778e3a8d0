/*
 * tests/unit/test_attn_models.c — the attention of current models (issue
 * 16) against an independent reference: batches, explicit positions,
 * packed segments, windows with sinks, softcap, per-head sinks, RoPE with
 * partial dims and every scaling.
 *
 * ref_run below is naive long double written from the rules of the API ("The
 * order of operations", "Positions", "Masks and scores", "Rotary embedding,
 * complete"): every (batch, head, row, key) computed on its own, positions
 * counted within segments by plain counting, the RoPE frequencies from the
 * design's table. Random cases mix every option; named cases pin the edges
 * (empty segments, windows that empty a row, positions near 2^31, yarn with
 * lo == hi, yarn with and without truncate, broadcasting), and the bit-for-bit promises: a batch equals its
 * elements run alone, the output does not depend on `return`, the worker
 * count or the session path.
 */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "core/kv.h"
#include "core/rope.h"
#include "tests/harness.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd_u64(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static double rnd(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd_u64() >> 11) / 9007199254740992.0;
}

static size_t rnd_int(size_t n)
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

static double *rnd_arr(const struct mc *c, size_t count, double lo, double hi)
{
    double *a = malloc((count ? count : 1) * sizeof(double));
    for (size_t i = 0; i < count; i++) {
        double x = rnd(lo, hi);
        a[i] = c->dt == ATTN_F32 ? (double)(float)x : x;
    }
    return a;
}

/* A plain case: data filled, no options. */
static void mc_init(struct mc *c, enum attn_dtype dt, size_t B, size_t h, size_t hkv, size_t n,
                    size_t L, size_t dk, size_t dv)
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

static void mc_free(struct mc *c)
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

static long double ref_inv_freq(const struct mc *c, size_t r, size_t i)
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

static void ref_rope(const struct mc *c, long double *x, long double pos)
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
static void ref_positions(const struct mc *c, size_t b, long double *Pq, long double *Pk)
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

static void ref_run(const struct mc *c, struct rres *r)
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

static void rres_free(struct rres *r)
{
    free(r->s);
    free(r->w);
    free(r->o);
    free(r->allowed);
    free(r->empty);
}

/* ---- the core side ------------------------------------------------------ */

static void *conv(const double *a, size_t count, enum attn_dtype dt)
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

static double val(const void *p, size_t i, enum attn_dtype dt)
{
    return dt == ATTN_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

struct cres {
    struct attn_request rq;
    struct attn_inputs in;
    struct attn_result out;
    void *q, *k, *v, *bq, *bk, *bv, *ab;
};

static void core_setup(const struct mc *c, struct cres *x)
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

static void core_free(struct cres *x)
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

static enum core_status core_run(const struct mc *c, struct cres *x, struct attn_ws *ws)
{
    core_setup(c, x);
    return attn_forward(&x->rq, &x->in, &x->out, ws);
}

static void print_mc(const struct mc *c)
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
static bool compare(const struct mc *c, const struct cres *x, const struct rres *r)
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
static void check_case(const struct mc *c, struct attn_ws *ws)
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

static int64_t *ints(size_t count)
{
    return calloc(count ? count : 1, sizeof(int64_t));
}

/* Segments: [sgb][n] / [sgb][L]; contiguous runs (ids rise) or random ids
 * among `nseg` (interleaved). */
static void set_segments(struct mc *c, size_t sgb, size_t nseg, bool interleaved)
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
static int64_t *positions(size_t batches, size_t len, int64_t start, bool mono)
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

static void set_rope_scaling(struct mc *c, enum attn_rope_scaling_type t)
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

static bool same(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

/* Batch element b of c as a request of its own (its slices of every array). */
static void batch_element(const struct mc *c, size_t b, struct mc *e)
{
    size_t h = c->h, n = c->n, L = c->L;
    *e = *c;
    e->B = 0;
    e->q = malloc(h * n * c->dk * sizeof(double));
    memcpy(e->q, c->q + b * h * n * c->dk, h * n * c->dk * sizeof(double));
    e->k = malloc(c->hkv * L * c->dk * sizeof(double));
    memcpy(e->k, c->k + b * c->hkv * L * c->dk, c->hkv * L * c->dk * sizeof(double));
    e->v = malloc(c->hkv * L * c->dv * sizeof(double));
    memcpy(e->v, c->v + b * c->hkv * L * c->dv, c->hkv * L * c->dv * sizeof(double));
    e->pq = c->pq ? ints(n) : NULL;
    if (c->pq)
        memcpy(e->pq, c->pq + (c->pqb == 1 ? 0 : b) * n, n * sizeof(int64_t));
    e->pqb = 1;
    e->pk = c->pk ? ints(L) : NULL;
    if (c->pk)
        memcpy(e->pk, c->pk + (c->pkb == 1 ? 0 : b) * L, L * sizeof(int64_t));
    e->pkb = 1;
    e->sq = c->sq ? ints(n) : NULL;
    e->sk = c->sk ? ints(L) : NULL;
    if (c->sq) {
        memcpy(e->sq, c->sq + (c->sgb == 1 ? 0 : b) * n, n * sizeof(int64_t));
        memcpy(e->sk, c->sk + (c->sgb == 1 ? 0 : b) * L, L * sizeof(int64_t));
    }
    e->sgb = 1;
    e->ab = NULL;
    e->abh = 0;
    if (c->ab) {
        size_t from = c->abh == c->B * h ? b * h : 0, heads = c->abh == c->B * h ? h : c->abh;
        e->abh = heads;
        e->ab = malloc(heads * n * L * sizeof(double));
        memcpy(e->ab, c->ab + from * n * L, heads * n * L * sizeof(double));
    }
    e->mk = NULL;
    e->mkh = 0;
    e->sinks = NULL;
    if (c->sinks) {
        e->sinks = malloc(h * sizeof(double));
        memcpy(e->sinks, c->sinks, h * sizeof(double));
    }
    e->bq = e->bk = e->bv = NULL;
    e->bqh = e->bkh = e->bvh = 0;
}

/* A batch gives each element the bits it gets alone, on every path. */
TEST(batch_equals_elements)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    for (int t = 0; t < 8; t++) {
        struct mc c;
        size_t n = t < 4 ? 5 : 200, L = t < 4 ? 9 : 600;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 3, 2, 1, n, L, 16, 8);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.outputs = t % 4 == 3 ? ATTN_OUT_OUTPUT : ATTN_OUT_ALL;
        c.rope = 1;
        c.win = (struct attn_window){true, (int64_t)L / 3, -1, 2};
        c.pkb = 3;
        c.pk = positions(3, L, 1, true);
        c.abh = 2 * 3;
        c.ab = rnd_arr(&c, c.abh * n * L, -1, 1);
        if (t % 4 == 3) {
            free(c.ab);
            c.ab = NULL;
            c.abh = 0;
            set_segments(&c, 3, 2, false);
        }
        c.sm = ATTN_SOFTMAX_SINK;
        c.sinks = malloc(2 * sizeof(double));
        c.sinks[0] = 0.5;
        c.sinks[1] = -0.5;
        struct cres all;
        CHECK_EQ_INT(core_run(&c, &all, ws), CORE_OK);
        size_t esz = c.dt == ATTN_F32 ? 4 : 8, per = c.h * n;
        for (size_t b = 0; b < 3; b++) {
            struct mc e;
            batch_element(&c, b, &e);
            struct cres one;
            CHECK_EQ_INT(core_run(&e, &one, NULL), CORE_OK);
            CHECK(same((char *)all.out.output + b * per * c.dv * esz, one.out.output,
                       per * c.dv * esz));
            if (c.outputs & ATTN_OUT_WEIGHTS)
                CHECK(same((char *)all.out.weights + b * per * L * esz, one.out.weights,
                           per * L * esz));
            core_free(&one);
            mc_free(&e);
        }
        core_free(&all);
        mc_free(&c);
    }
    attn_ws_free(ws);
    attn_pool_free(pool);
}

/* The output's bits do not depend on `return`, on the helpers, or on the
 * session path (the rows appended to a cache at continuing positions). */
TEST(output_bits_reproducible)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *pws = attn_ws_new();
    attn_ws_set_pool(pws, pool);
    for (int t = 0; t < 8; t++) {
        struct mc c;
        size_t n = t < 4 ? 3 : 130, L = t < 4 ? 50 : 400;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 4, 2, n, L, 16, 8);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.rope = 1;
        c.dims = 8;
        set_rope_scaling(&c, ATTN_ROPE_SCALING_LLAMA3);
        c.softcap = t % 4 < 2 ? 0 : 1.5;
        c.sm = ATTN_SOFTMAX_SINK;
        c.sinks = malloc(4 * sizeof(double));
        for (size_t i = 0; i < 4; i++)
            c.sinks[i] = rnd(-1, 1);
        size_t esz = c.dt == ATTN_F32 ? 4 : 8, ob = c.h * n * c.dv * esz;
        unsigned sets[4] = {ATTN_OUT_OUTPUT, ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT, ATTN_OUT_ALL,
                            ATTN_OUT_SCORES | ATTN_OUT_OUTPUT};
        struct cres base;
        c.outputs = ATTN_OUT_OUTPUT;
        CHECK_EQ_INT(core_run(&c, &base, NULL), CORE_OK);
        for (int u = 0; u < 4; u++) {
            c.outputs = sets[u];
            struct cres x;
            CHECK_EQ_INT(core_run(&c, &x, u % 2 ? pws : NULL), CORE_OK);
            CHECK(same(base.out.output, x.out.output, ob));
            core_free(&x);
        }
        /* a heads subset (any order, with or without extras, with or without
         * the pool): each chosen head's output has the bits of the whole pass */
        static const size_t pick[2] = {3, 1};
        struct cres all;
        c.outputs = ATTN_OUT_ALL;
        CHECK_EQ_INT(core_run(&c, &all, NULL), CORE_OK);
        for (int u = 0; u < 4; u++) {
            struct cres x;
            c.outputs = u < 2 ? ATTN_OUT_OUTPUT : ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT;
            core_setup(&c, &x);
            size_t hob = n * c.dv * esz, rows = 2 * n;
            int64_t *am = malloc(rows * sizeof *am);
            void *lse = malloc(rows * esz), *ent = malloc(rows * esz), *mw = malloc(rows * esz);
            void *mass = malloc(rows * esz);
            struct attn_extras xs = {u % 2 ? ATTN_X_LSE | ATTN_X_STATS : 0, pick, 2, 0};
            struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, NULL, NULL};
            CHECK_EQ_INT(attn_forward_extras(&x.rq, &x.in, NULL, &xs, &x.out, &xo,
                                             u >= 2 ? pws : NULL), CORE_OK);
            for (size_t a = 0; a < 2; a++) {
                bool eq = same((const char *)base.out.output + pick[a] * hob,
                               (const char *)x.out.output + a * hob, hob);
                size_t wb = n * L * esz;
                if (u >= 2)     /* the weights too: the whole pass's bits */
                    eq = eq && same((const char *)all.out.weights + pick[a] * wb,
                                    (const char *)x.out.weights + a * wb, wb);
                if (!eq)
                    printf("  t=%d u=%d head %zu differs\n", t, u, pick[a]);
                CHECK(eq);
            }
            free(am); free(lse); free(ent); free(mw); free(mass);
            core_free(&x);
        }
        core_free(&all);
        /* session: append the keys in two pieces, attend the queries */
        struct kv_cache *kc = kv_new(c.dt, c.hkv, c.dk, c.dv);
        size_t m1 = L / 3;
        for (int piece = 0; piece < 2; piece++) {
            size_t a = piece ? m1 : 0, m = piece ? L - m1 : m1;
            double *kk = malloc(c.hkv * m * c.dk * sizeof(double));
            double *vv = malloc(c.hkv * m * c.dv * sizeof(double));
            for (size_t g = 0; g < c.hkv; g++) {
                memcpy(kk + g * m * c.dk, c.k + (g * L + a) * c.dk, m * c.dk * sizeof(double));
                memcpy(vv + g * m * c.dv, c.v + (g * L + a) * c.dv, m * c.dv * sizeof(double));
            }
            void *kc_k = conv(kk, c.hkv * m * c.dk, c.dt), *kc_v = conv(vv, c.hkv * m * c.dv, c.dt);
            struct attn_inputs in = {NULL, kc_k, kc_v, NULL, NULL, NULL, 0, 0, 0};
            struct cres tmp;
            core_setup(&c, &tmp);
            CHECK_EQ_INT(kv_append(kc, &tmp.rq.params, &in, m), CORE_OK);
            core_free(&tmp);
            free(kk);
            free(vv);
            free(kc_k);
            free(kc_v);
        }
        struct cres sx;
        c.outputs = ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT;
        core_setup(&c, &sx);
        CHECK_EQ_INT(kv_attend(kc, &sx.rq, &sx.in, &sx.out, NULL), CORE_OK);
        CHECK(same(base.out.output, sx.out.output, ob));
        core_free(&sx);
        kv_free(kc);
        core_free(&base);
        mc_free(&c);
    }
    attn_ws_free(pws);
    attn_pool_free(pool);
}

/* A request with contiguous segments equals one request per segment, its
 * rows in the original order. */
TEST(segments_equal_separate_requests)
{
    for (int t = 0; t < 4; t++) {
        struct mc c;
        size_t ns = 3, per_n = t < 2 ? 4 : 150, per_L = t < 2 ? 6 : 300;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 2, 1, ns * per_n, ns * per_L, 8, 4);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.rope = 1;
        c.alibi = 1;
        c.outputs = ATTN_OUT_OUTPUT;
        set_segments(&c, 1, ns, false);
        struct cres all;
        CHECK_EQ_INT(core_run(&c, &all, NULL), CORE_OK);
        double tol = c.dt == ATTN_F32 ? 1e-5 : 1e-12;
        for (size_t sg = 0; sg < ns; sg++) {
            struct mc e;
            mc_init(&e, c.dt, 0, 2, 1, per_n, per_L, 8, 4);
            e.causal = c.causal;
            e.rope = 1;
            e.alibi = 1;
            e.outputs = ATTN_OUT_OUTPUT;
            for (size_t hh = 0; hh < 2; hh++)
                memcpy(e.q + hh * per_n * 8, c.q + (hh * c.n + sg * per_n) * 8,
                       per_n * 8 * sizeof(double));
            memcpy(e.k, c.k + sg * per_L * 8, per_L * 8 * sizeof(double));
            memcpy(e.v, c.v + sg * per_L * 4, per_L * 4 * sizeof(double));
            struct cres one;
            CHECK_EQ_INT(core_run(&e, &one, NULL), CORE_OK);
            double worst = 0;
            for (size_t hh = 0; hh < 2; hh++)
                for (size_t i = 0; i < per_n * 4; i++) {
                    double a = val(all.out.output, (hh * c.n + sg * per_n) * 4 + i, c.dt);
                    double b = val(one.out.output, hh * per_n * 4 + i, c.dt);
                    worst = fmax(worst, fabs(a - b));
                }
            CHECK(worst <= tol);
            core_free(&one);
            mc_free(&e);
        }
        core_free(&all);
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
    RUN(huge_positions);
    RUN(yarn_lo_equals_hi);
    RUN(rope_scalings);
    RUN(yarn_truncate_freqs);
    RUN(batch_broadcasting);
    RUN(batch_equals_elements);
    RUN(output_bits_reproducible);
    RUN(segments_equal_separate_requests);
    RUN(softcap_bounded_monotone);
    RUN(validation);
    TEST_MAIN_END();
}
