/*
 * tests/unit/test_attn_extras.c — q·k, lse, row statistics, top-k weights
 * and the head selection of core/attn_extras.c against a reference.
 *
 * ref_row below is written from the rules of the API alone, in long double:
 * bias, RoPE (its own rotation), q·k, scale, attention bias, ALiBi, mask and
 * causal, the softmax variant with its extra term, then −Σ p ln p, the
 * largest weight, Σ p and a full sort for the top k. Random cases cover
 * both dtypes, GQA, every softmax, masks with empty rows, chosen heads in
 * any order, k beyond the allowed keys, exact ties, the session path (keys
 * prepared by attn_prepare_kv) and rows split into several blocks.
 */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "tests/harness.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static double urand(double lo, double hi)
{
    uint64_t x = t_rng_next(&rng);
    return lo + (hi - lo) * (double)(x >> 11) / 9007199254740992.0;
}

struct cfg {
    size_t h, h_kv, n, L, d;
    enum attn_dtype dt;
    enum attn_softmax sm;
    double sink, scale;
    enum attn_causal causal;
    int rope, half, alibi, mask, abias, bq, bk, ties;
    double *q, *k, *v, *bqv, *bkv, *ab;
    uint8_t *mk;
    /* segments (given to the core) and the positions they imply (counted
     * here, for the reference alone); NULL without segments */
    int64_t *sq, *sk, *pq, *pk;
};

/* every value rounded to the dtype, so both sides read the same inputs */
static double *arr(const struct cfg *c, size_t m, double lo, double hi)
{
    double *a = malloc(m * sizeof *a);
    for (size_t i = 0; i < m; i++) {
        a[i] = urand(lo, hi);
        if (c->dt == ATTN_F32)
            a[i] = (float)a[i];
    }
    return a;
}

static void *as_dt(const struct cfg *c, const double *a, size_t m)
{
    if (!a)
        return NULL;
    if (c->dt == ATTN_F64) {
        double *o = malloc(m * sizeof *o);
        memcpy(o, a, m * sizeof *o);
        return o;
    }
    float *o = malloc(m * sizeof *o);
    for (size_t i = 0; i < m; i++)
        o[i] = (float)a[i];
    return o;
}

static double at(const struct cfg *c, const void *p, size_t i)
{
    return c->dt == ATTN_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

static int64_t qpos(const struct cfg *c, size_t i)
{
    if (c->pq)
        return c->pq[i];
    return c->causal == ATTN_CAUSAL_TOP_LEFT ? (int64_t)i : (int64_t)(c->L - c->n + i);
}

/* x [d] rotated at position pos or (i, i+d/2),
 * angle pos·base^(−2i/d), base 10000) */
static void ref_rope(const struct cfg *c, long double *x, int64_t pos)
{
    size_t d = c->d;
    for (size_t i = 0; i < d / 2; i++) {
        long double th = (long double)pos * powl(10000.0L, -2.0L * (long double)i / (long double)d);
        size_t a = c->half ? i : 2 * i, b = c->half ? i + d / 2 : 2 * i + 1;
        long double xa = x[a], xb = x[b];
        x[a] = xa * cosl(th) - xb * sinl(th);
        x[b] = xa * sinl(th) + xb * cosl(th);
    }
}

struct rrow {
    long double qk[64], s[64], p[64];
    int allowed[64];
    long double lse, ent, maxw, mass;
    long long argmax;
    int lse_null;
};

static void ref_row(const struct cfg *c, size_t hh, size_t i, struct rrow *o)
{
    size_t d = c->d, g = hh / (c->h / c->h_kv);
    long double q[64], k[64];
    for (size_t t = 0; t < d; t++)
        q[t] = c->q[(hh * c->n + i) * d + t] + (c->bqv ? c->bqv[t] : 0);
    if (c->rope)
        ref_rope(c, q, qpos(c, i));
    long double mx = -INFINITY;
    for (size_t j = 0; j < c->L; j++) {
        for (size_t t = 0; t < d; t++)
            k[t] = c->k[(g * c->L + j) * d + t] + (c->bkv ? c->bkv[t] : 0);
        int64_t kp = c->pk ? c->pk[j] : (int64_t)j;
        if (c->rope)
            ref_rope(c, k, kp);
        long double dot = 0;
        for (size_t t = 0; t < d; t++)
            dot += q[t] * k[t];
        o->qk[j] = dot;
        long double s = c->scale * dot;
        size_t bi = (hh * c->n + i) * c->L + j;
        int ok = 1;
        if (c->ab) {
            if (c->ab[bi] == -INFINITY)
                ok = 0;
            else
                s += c->ab[bi];
        }
        if (c->alibi)
            s -= powl(2.0L, -8.0L * (long double)(hh + 1) / (long double)c->h) *
                 fabsl((long double)(qpos(c, i) - kp));
        if (c->mk && !c->mk[bi])
            ok = 0;
        if (c->causal != ATTN_CAUSAL_NONE && kp > qpos(c, i))
            ok = 0;
        if (c->sq && c->sq[i] != c->sk[j])
            ok = 0;
        o->allowed[j] = ok;
        o->s[j] = s;
        if (ok && s > mx)
            mx = s;
    }
    int extra = c->sm != ATTN_SOFTMAX_STANDARD;
    long double xl = c->sm == ATTN_SOFTMAX_SINK ? c->sink : 0;
    long double sh = mx;
    if (extra && (sh == -INFINITY || xl > sh))
        sh = xl;
    long double den = extra ? expl(xl - sh) : 0;
    for (size_t j = 0; j < c->L; j++)
        if (o->allowed[j])
            den += expl(o->s[j] - sh);
    o->lse_null = den == 0;
    o->lse = den > 0 ? sh + logl(den) : 0;
    o->ent = 0;
    o->maxw = 0;
    o->mass = 0;
    o->argmax = -1;
    for (size_t j = 0; j < c->L; j++) {
        o->p[j] = o->allowed[j] ? expl(o->s[j] - o->lse) : 0;
        if (!o->allowed[j])
            continue;
        o->mass += o->p[j];
        o->ent -= o->p[j] * logl(o->p[j]);
        if (o->argmax < 0 || o->p[j] > o->maxw) {
            o->maxw = o->p[j];
            o->argmax = (long long)j;
        }
    }
}

/* tolerance for a value of magnitude m */
static double tol(const struct cfg *c, double m)
{
    return (c->dt == ATTN_F32 ? 2e-4 : 1e-10) * (1 + fabs(m));
}

/* One random case against the reference; heads chosen at random (maybe
 * all), kv from attn_prepare_kv when `session`. */
static void run_case(struct cfg *c, int session, size_t k_top)
{
    size_t h = c->h, hk = c->h_kv, n = c->n, L = c->L, d = c->d;
    c->q = arr(c, h * n * d, -1.5, 1.5);
    c->k = arr(c, hk * L * d, -1.5, 1.5);
    c->v = arr(c, hk * L * d, -2, 2);
    if (c->ties)                        /* equal keys: equal scores and weights */
        for (size_t g = 0; g < hk; g++)
            for (size_t j = 1; j < L; j += 2)
                memcpy(c->k + (g * L + j) * d, c->k + (g * L + j - 1) * d, d * sizeof(double));
    c->bqv = c->bq ? arr(c, d, -1, 1) : NULL;
    c->bkv = c->bk ? arr(c, d, -1, 1) : NULL;
    c->ab = c->abias ? arr(c, h * n * L, -1, 1) : NULL;
    c->mk = NULL;
    if (c->abias)
        for (size_t t = 0; t < h * n * L; t += 7)
            c->ab[t] = -INFINITY;
    if (c->mask) {
        c->mk = malloc(h * n * L);
        for (size_t t = 0; t < h * n * L; t++)
            c->mk[t] = urand(0, 1) < 0.6;
        for (size_t j = 0; j < L; j++)      /* row (0, 0): no allowed key */
            c->mk[j] = 0;
    }
    void *q = as_dt(c, c->q, h * n * d), *k = as_dt(c, c->k, hk * L * d);
    void *v = as_dt(c, c->v, hk * L * d), *bq = as_dt(c, c->bqv, d);
    void *bk = as_dt(c, c->bkv, d), *ab = as_dt(c, c->ab, h * n * L);
    struct attn_request r = {
        .shape = {h, hk, n, L, d, d},
        .params = {.dtype = c->dt, .scale = c->scale, .softmax = c->sm,
                   .sink_logit = c->sink, .rope = c->rope, .rope_base = 10000,
                   .rope_pairs = c->half ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED,
                   .alibi = c->alibi},
        .causal = c->causal, .attn_bias = ab, .attn_bias_heads = h,
        .mask = c->mk, .mask_heads = h,
        .outputs = ATTN_OUT_ALL,
        .seg_q = c->sq, .seg_k = c->sk, .seg_batches = c->sq ? 1 : 0,
    };
    struct attn_inputs in = {q, k, v, bq, bk, NULL, 1, 1, 1};
    size_t heads[16], nh = 0;
    int subset = urand(0, 1) < 0.5;
    for (size_t a = h; a-- > 0;)            /* reversed order, some dropped */
        if (!subset || urand(0, 1) < 0.6 || (a == 0 && nh == 0))
            heads[nh++] = a;
    size_t esz = attn_dtype_size(c->dt), rows = nh * n;
    struct attn_result res = {malloc(rows * L * esz), malloc(rows * L * esz),
                              malloc(rows * d * esz), calloc(rows, 1), 0};
    struct attn_extras x = {ATTN_X_QK | ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK, heads, nh,
                            k_top};
    struct attn_extras_out xo = {
        malloc(rows * L * esz), malloc(rows * esz), malloc(rows * esz), malloc(rows * esz),
        malloc(rows * esz), malloc(rows * 8), malloc(rows * k_top * 8),
        malloc(rows * k_top * esz)};
    /* the full pass, for the compact arrays */
    struct attn_result full = {malloc(h * n * L * esz), malloc(h * n * L * esz),
                               malloc(h * n * d * esz), calloc(h * n, 1), 0};
    CHECK(attn_forward(&r, &in, &full, NULL) == CORE_OK);

    enum core_status st;
    struct attn_ws *ws = attn_ws_new();
    if (session) {
        char *kst = malloc(hk * L * d * esz), *vst = malloc(hk * L * d * esz);
        void *kp[16], *vp[16];
        for (size_t g = 0; g < hk; g++) {
            kp[g] = kst + g * L * d * esz;
            vp[g] = vst + g * L * d * esz;
        }
        attn_prepare_kv(&r.shape, &r.params, &in, L, 0, kp, vp);
        struct attn_kv_view kv = {.k = (const void *const *)kp, .v = (const void *const *)vp};
        st = attn_forward_extras(&r, &in, &kv, &x, &res, &xo, ws);
        free(kst);
        free(vst);
    } else {
        st = attn_forward_extras(&r, &in, NULL, &x, &res, &xo, ws);
    }
    attn_ws_free(ws);
    CHECK(st == CORE_OK);

    size_t bad = 0, n_empty = 0;
    struct rrow *o = malloc(sizeof *o);
    for (size_t a = 0; a < nh && st == CORE_OK; a++)
        for (size_t i = 0; i < n; i++) {
            size_t hh = heads[a], row = a * n + i, grow = hh * n + i;
            ref_row(c, hh, i, o);
            n_empty += res.empty[row];
            bad += res.empty[row] != full.empty[grow];
            for (size_t j = 0; j < L; j++) {
                bad += !(fabs(at(c, xo.qk, row * L + j) - (double)o->qk[j]) <=
                         tol(c, (double)o->qk[j]) * 4);
                double cs = at(c, res.scores, row * L + j), fs = at(c, full.scores, grow * L + j);
                bad += !(cs == fs || fabs(cs - fs) <= tol(c, fs));
                bad += !(fabs(at(c, res.weights, row * L + j) -
                              at(c, full.weights, grow * L + j)) <= tol(c, 0));
            }
            for (size_t t = 0; t < d; t++)
                bad += !(fabs(at(c, res.output, row * d + t) - at(c, full.output, grow * d + t)) <=
                         tol(c, at(c, full.output, grow * d + t)));
            double lse = at(c, xo.lse, row);
            bad += o->lse_null ? !isnan(lse) : !(fabs(lse - (double)o->lse) <= tol(c, (double)o->lse));
            bad += !(fabs(at(c, xo.entropy, row) - (double)o->ent) <= tol(c, (double)o->ent));
            bad += !(fabs(at(c, xo.max_weight, row) - (double)o->maxw) <= tol(c, 0));
            bad += !(fabs(at(c, xo.mass, row) - (double)o->mass) <= tol(c, 0));
            if (c->sm == ATTN_SOFTMAX_STANDARD && o->argmax >= 0)
                bad += at(c, xo.mass, row) != 1.0;      /* exactly 1 */
            /* argmax: a key whose reference weight is the largest (ties:
             * the lowest index among equal reference weights) */
            long long am = xo.argmax[row];
            if (o->argmax < 0)
                bad += am != -1;
            else
                bad += am < 0 || !(fabs((double)(o->p[am] - o->maxw)) <= tol(c, 0)) ||
                       (c->ties && am > o->argmax && o->p[am - 1] == o->p[am]);
            /* top-k: sorted best-first, ties to the lower index, the k
             * largest reference weights, padding -1 / 0 */
            size_t allowed = 0;
            for (size_t j = 0; j < L; j++)
                allowed += (size_t)o->allowed[j];
            const int64_t *ti = xo.top_idx + row * k_top;
            for (size_t t = 0; t < k_top; t++) {
                double val = at(c, xo.top_val, row * k_top + t);
                if (t >= allowed) {
                    bad += ti[t] != -1 || val != 0;
                    continue;
                }
                bad += ti[t] < 0 || ti[t] >= (int64_t)L || !o->allowed[ti[t]];
                if (ti[t] < 0 || ti[t] >= (int64_t)L)
                    continue;
                bad += !(fabs(val - (double)o->p[ti[t]]) <= tol(c, 0));
                bad += val != at(c, res.weights, row * L + (size_t)ti[t]);
                if (t > 0) {
                    double pv = at(c, xo.top_val, row * k_top + t - 1);
                    bad += pv < val || (pv == val && ti[t - 1] > ti[t]);
                }
                /* nothing left out ranks above the last kept */
                if (t + 1 == k_top || t + 1 == allowed)
                    for (size_t j = 0; j < L; j++) {
                        int kept = 0;
                        for (size_t u = 0; u <= t; u++)
                            kept |= ti[u] == (int64_t)j;
                        double wj = at(c, res.weights, row * L + j);
                        bad += o->allowed[j] && !kept &&
                               (wj > val || (wj == val && (int64_t)j < ti[t]));
                    }
            }
        }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(res.n_empty, n_empty);
    free(o);
    free(res.scores); free(res.weights); free(res.output); free(res.empty);
    free(full.scores); free(full.weights); free(full.output); free(full.empty);
    free(xo.qk); free(xo.lse); free(xo.entropy); free(xo.max_weight); free(xo.mass);
    free(xo.argmax); free(xo.top_idx); free(xo.top_val);
    free(q); free(k); free(v); free(bq); free(bk); free(ab);
    free(c->q); free(c->k); free(c->v); free(c->bqv); free(c->bkv); free(c->ab); free(c->mk);
}

/* Case it's shape and options: up to per_kv query heads per kv head, L keys. */
static struct cfg random_cfg(int it, size_t per_kv, size_t L)
{
    struct cfg c = {0};
    c.h_kv = 1 + (size_t)urand(0, 2);
    c.h = c.h_kv * (1 + (size_t)urand(0, (double)per_kv));
    c.n = 1 + (size_t)urand(0, 9);
    c.L = L;
    c.d = 2 * (1 + (size_t)urand(0, 4));
    c.dt = it % 2 ? ATTN_F32 : ATTN_F64;
    c.sm = (enum attn_softmax)(it / 2 % 3);
    c.sink = urand(-2, 2);
    c.scale = urand(0.2, 1.5);
    c.causal = (enum attn_causal)((size_t)urand(0, 3));
    return c;
}

TEST(test_random_cases)
{
    static const size_t Ls[] = {1, 2, 5, 17, 64};
    for (int it = 0; it < 160; it++) {
        struct cfg c = random_cfg(it, 3, Ls[(size_t)urand(0, 5)]);
        c.rope = urand(0, 1) < 0.5;
        c.half = urand(0, 1) < 0.5;
        c.alibi = urand(0, 1) < 0.3;
        c.mask = urand(0, 1) < 0.3;
        c.abias = urand(0, 1) < 0.3;
        c.bq = urand(0, 1) < 0.5;
        c.bk = urand(0, 1) < 0.5;
        c.ties = it % 5 == 0;
        run_case(&c, it % 3 == 0, 1 + (size_t)urand(0, (double)c.L + 3));
    }
}

/* The default positions of packed segments, counted here apart from the
 * core: a key's is the number of earlier keys of its segment, a query's
 * that count plus L_s − n_s (bottom-right) or the count alone (top-left). */
static void seg_positions(struct cfg *c)
{
    for (size_t j = 0; j < c->L; j++) {
        c->pk[j] = 0;
        for (size_t t = 0; t < j; t++)
            c->pk[j] += c->sk[t] == c->sk[j];
    }
    for (size_t i = 0; i < c->n; i++) {
        int64_t before = 0, ls = 0, ns = 0;
        for (size_t t = 0; t < c->n; t++) {
            ns += c->sq[t] == c->sq[i];
            before += t < i && c->sq[t] == c->sq[i];
        }
        for (size_t t = 0; t < c->L; t++)
            ls += c->sk[t] == c->sq[i];
        c->pq[i] = c->causal == ATTN_CAUSAL_TOP_LEFT ? before : ls - ns + before;
    }
}

/* Segments without explicit positions (contiguous or interleaved ids): the
 * keys are prepared at their positions within the segment, as the plain
 * pass prepares them. */
TEST(test_segments)
{
    for (int it = 0; it < 60; it++) {
        struct cfg c = random_cfg(it, 2, 1 + (size_t)urand(0, 20));
        c.rope = 1;
        c.half = it % 4 < 2;
        c.alibi = it % 3 == 0;
        c.bq = c.bk = urand(0, 1) < 0.5;
        int64_t sq[16], sk[32], pq[16], pk[32];
        int interleaved = it % 2;
        for (size_t i = 0; i < c.n; i++)
            sq[i] = interleaved ? (int64_t)urand(0, 3) : (int64_t)(3 * i / c.n);
        for (size_t j = 0; j < c.L; j++)
            sk[j] = interleaved ? (int64_t)urand(0, 3) : (int64_t)(3 * j / c.L);
        c.sq = sq;
        c.sk = sk;
        c.pq = pq;
        c.pk = pk;
        seg_positions(&c);
        run_case(&c, 0, 1 + (size_t)urand(0, (double)c.L + 2));
    }
}

/* A batch's extras equal each element's run alone, bit for bit: element b
 * with its own segments, attention bias and keys. */
TEST(test_batches)
{
    for (int it = 0; it < 24; it++) {
        enum attn_dtype dt = it % 2 ? ATTN_F32 : ATTN_F64;
        size_t esz = attn_dtype_size(dt), B = 2 + (size_t)urand(0, 3), hk = 1 + it % 2;
        size_t h = hk * 2, n = 1 + (size_t)urand(0, 6), L = 2 + (size_t)urand(0, 12), d = 4;
        size_t top = 1 + (size_t)urand(0, 5), nh = it % 3 == 0 ? h : 1 + (size_t)urand(0, 2);
        size_t heads[4] = {h - 1, 0, 1, 2};
        struct cfg c = {.dt = dt};
        double *qd = arr(&c, B * h * n * d, -1, 1), *kd = arr(&c, B * hk * L * d, -1, 1);
        double *vd = arr(&c, B * hk * L * d, -1, 1), *abd = arr(&c, B * h * n * L, -1, 1);
        void *q = as_dt(&c, qd, B * h * n * d), *k = as_dt(&c, kd, B * hk * L * d);
        void *v = as_dt(&c, vd, B * hk * L * d), *ab = as_dt(&c, abd, B * h * n * L);
        int64_t *sq = malloc(B * n * 8), *sk = malloc(B * L * 8);
        for (size_t t = 0; t < B * n; t++)
            sq[t] = (int64_t)urand(0, 2);
        for (size_t t = 0; t < B * L; t++)
            sk[t] = (int64_t)urand(0, 2);
        struct attn_request r = {
            .shape = {h, hk, n, L, d, d, B},
            .params = {.dtype = dt, .scale = 0.7, .softmax = (enum attn_softmax)(it % 3),
                       .sink_logit = 0.3, .rope = true, .rope_base = 10000},
            .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .attn_bias = ab, .attn_bias_heads = B * h,
            .outputs = ATTN_OUT_ALL, .seg_q = sq, .seg_k = sk, .seg_batches = B,
        };
        struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
        struct attn_extras x = {ATTN_X_QK | ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK,
                                nh == h ? NULL : heads, nh, top};
        size_t rows = B * nh * n, rb = nh * n;
        /* scores, weights, output, qk, lse, entropy, max_weight, mass,
         * argmax, top indices, top values: bytes of one row, and offsets */
        size_t per[11] = {L * esz, L * esz, d * esz, L * esz, esz, esz, esz, esz, 8,
                          top * 8, top * esz};
        size_t off[12] = {0};
        for (int t = 0; t < 11; t++)
            off[t + 1] = off[t] + rows * per[t];
        char *all = calloc(2, off[11]), *one = all + off[11];
        struct attn_ws *ws = attn_ws_new();
        for (size_t b = 0; b <= B; b++) {
            /* b < B: element b alone into its place of `one`; b == B: the batch */
            struct attn_request r1 = r;
            struct attn_inputs in1 = in;
            char *base = b < B ? one : all;
            size_t row0 = b < B ? b * rb : 0;
            char *p[11];
            for (int t = 0; t < 11; t++)
                p[t] = base + off[t] + row0 * per[t];
            if (b < B) {
                r1.shape.B = 1;
                r1.attn_bias = (const char *)ab + b * h * n * L * esz;
                r1.attn_bias_heads = h;
                r1.seg_q = sq + b * n;
                r1.seg_k = sk + b * L;
                r1.seg_batches = 1;
                in1.q = (const char *)q + b * h * n * d * esz;
                in1.k = (const char *)k + b * hk * L * d * esz;
                in1.v = (const char *)v + b * hk * L * d * esz;
            }
            struct attn_result res = {p[0], p[1], p[2], NULL, 0};
            struct attn_extras_out xo = {p[3], p[4], p[5], p[6], p[7],
                                         (int64_t *)(void *)p[8], (int64_t *)(void *)p[9],
                                         p[10]};
            CHECK(attn_forward_extras(&r1, &in1, NULL, &x, &res, &xo, ws) == CORE_OK);
        }
        size_t bad = 0;
        for (size_t t = 0; t < off[11]; t++)
            bad += all[t] != one[t];
        CHECK_EQ_INT(bad, 0);
        attn_ws_free(ws);
        free(all);
        free(sq); free(sk);
        free(q); free(k); free(v); free(ab);
        free(qd); free(kd); free(vd); free(abd);
    }
}

/* L large enough that a head's rows are cut into several score blocks */
TEST(test_blocks_of_rows)
{
    struct cfg c = {0};
    c.h = 2;
    c.h_kv = 1;
    c.n = 20;
    c.L = 64;
    c.d = 4;
    c.dt = ATTN_F64;
    c.scale = 0.7;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    /* 4 MiB / (64 · 8) = 8192 rows per block: too many; the test of the
     * block cut is the long-context case below */
    run_case(&c, 0, 3);
}

/* n = 12 rows of L = 65536 float64 keys: 8 rows per block, so one head's
 * rows span two blocks; only top-k, lse and stats asked for */
TEST(test_long_context_top_k)
{
    size_t n = 12, L = 65536, d = 2, k = 4;
    double *q = malloc(n * d * 8), *kk = malloc(L * d * 8), *v = malloc(L * d * 8);
    for (size_t i = 0; i < n * d; i++)
        q[i] = urand(-1, 1);
    for (size_t i = 0; i < L * d; i++) {
        kk[i] = urand(-1, 1);
        v[i] = urand(-1, 1);
    }
    struct attn_request r = {.shape = {1, 1, n, L, d, d},
                             .params = {.dtype = ATTN_F64, .scale = 3, .softmax = ATTN_SOFTMAX_ONE},
                             .outputs = ATTN_OUT_OUTPUT};
    struct attn_inputs in = {q, kk, v, NULL, NULL, NULL, 1, 1, 1};
    struct attn_result full = {malloc(n * L * 8), malloc(n * L * 8), malloc(n * d * 8), NULL, 0};
    struct attn_request rf = r;
    rf.outputs = ATTN_OUT_ALL;
    CHECK(attn_forward(&rf, &in, &full, NULL) == CORE_OK);
    double out[24], lse[12], ent[12], mw[12], mass[12], tv[48];
    int64_t am[12], ti[48];
    struct attn_result res = {NULL, NULL, out, NULL, 0};
    struct attn_extras x = {ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK, NULL, 0, k};
    struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, ti, tv};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    for (size_t i = 0; i < n; i++) {
        const double *w = (const double *)full.weights + i * L;
        const double *s = (const double *)full.scores + i * L;
        long double den = 1, mx = 0, ent_ref = 0, mass_ref = 0;
        size_t best = 0;
        for (size_t j = 0; j < L; j++) {
            den += expl((long double)s[j]);
            if (w[j] > w[best])
                best = j;
        }
        for (size_t j = 0; j < L; j++) {
            long double p = expl((long double)s[j]) / den;
            mass_ref += p;
            ent_ref -= p * logl(p);
        }
        mx = w[best];
        CHECK_NEAR(lse[i], (double)logl(den), 1e-9);
        CHECK_NEAR(ent[i], (double)ent_ref, 1e-9);
        CHECK_NEAR(mass[i], (double)mass_ref, 1e-12);
        CHECK_NEAR(mw[i], (double)mx, 1e-15);
        CHECK_EQ_INT(am[i], best);
        CHECK_EQ_INT(ti[i * k], best);
        for (size_t t = 1; t < k; t++)
            CHECK(tv[i * k + t] <= tv[i * k + t - 1] && ti[i * k + t] >= 0);
        for (size_t t = 0; t < d; t++)
            CHECK_NEAR(out[i * d + t], ((double *)full.output)[i * d + t], 1e-12);
    }
    free(q); free(kk); free(v); free(full.scores); free(full.weights); free(full.output);
}

/* The worked example of the seed: q = (1,0), keys (1,0), (0,1), (-1,0),
 * d_k = 2: weights 0.575975, 0.283995, 0.140029 */
TEST(test_seed_example)
{
    double q[2] = {1, 0}, k[6] = {1, 0, 0, 1, -1, 0}, v[6] = {1, 0, 0, 1, 0, 0};
    struct attn_request r = {.shape = {1, 1, 1, 3, 2, 2},
                             .params = {.dtype = ATTN_F64, .scale = 1 / sqrt(2.0)},
                             .outputs = 0};
    struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
    double qk[3], lse, ent, mw, mass, tv[5];
    int64_t am, ti[5];
    struct attn_result res = {0};
    struct attn_extras x = {ATTN_X_QK | ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK, NULL, 0, 5};
    struct attn_extras_out xo = {qk, &lse, &ent, &mw, &mass, &am, ti, tv};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    CHECK(qk[0] == 1 && qk[1] == 0 && qk[2] == -1);
    CHECK_NEAR(tv[0], 0.575975, 5e-7);
    CHECK_NEAR(tv[1], 0.283995, 5e-7);
    CHECK_NEAR(tv[2], 0.140029, 5e-7);
    CHECK(ti[0] == 0 && ti[1] == 1 && ti[2] == 2 && ti[3] == -1 && ti[4] == -1);
    CHECK(tv[3] == 0 && tv[4] == 0 && mass == 1 && am == 0);
    CHECK_NEAR(lse, log(exp(1 / sqrt(2.0)) + 1 + exp(-1 / sqrt(2.0))), 1e-15);
}

TEST(test_refusals)
{
    double q[2] = {1, 0}, k[2] = {1, 0}, v[2] = {1, 0}, o[2], tv[1];
    int64_t ti[1];
    struct attn_request r = {.shape = {1, 1, 1, 1, 2, 2},
                             .params = {.dtype = ATTN_F64, .scale = 1},
                             .outputs = ATTN_OUT_OUTPUT};
    struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
    struct attn_result res = {NULL, NULL, o, NULL, 0};
    size_t bad_head = 1, twice[2] = {0, 0};
    struct attn_extras_out xo = {0};
    struct attn_extras x = {0, &bad_head, 1, 0};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_EINVAL);
    x = (struct attn_extras){0, twice, 2, 0};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_EINVAL);
    x = (struct attn_extras){ATTN_X_TOPK, NULL, 0, 0};
    xo.top_idx = ti;
    xo.top_val = tv;
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_EINVAL);
    x.top_k = 1;
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    CHECK(ti[0] == 0 && tv[0] == 1);
    x.want = ATTN_X_QK;                 /* its buffer missing */
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_EINVAL);
}

/* ---- top-k fed by the key-blocked output-only pass --------------------- */

struct scfg {
    size_t h, h_kv, n, L, d, k;
    enum attn_dtype dt;
    enum attn_softmax sm;
    double softcap;
    int causal, window, mask, alibi, ties, per_head_sink, out, lse;
    enum attn_kernel kern;
};

/* Reference of one row from the full pass's final scores s [L] (-inf:
 * not allowed), in long double: the row's lse (NaN for none) and weights. */
static long double ref_stream_row(const struct scfg *c, const double *s, double xl, int extra,
                                  long double *p)
{
    long double mx = -INFINITY, den = 0;
    for (size_t j = 0; j < c->L; j++)
        if (s[j] > mx)
            mx = s[j];
    long double sh = extra && (mx == -INFINITY || xl > mx) ? xl : mx;
    if (sh == -INFINITY)
        return NAN;
    for (size_t j = 0; j < c->L; j++)
        den += s[j] == -INFINITY ? 0 : expl(s[j] - sh);
    den += extra ? expl(xl - sh) : 0;
    long double lse = sh + logl(den);
    for (size_t j = 0; j < c->L; j++)
        p[j] = s[j] == -INFINITY ? 0 : expl(s[j] - lse);
    return lse;
}

/* Rows of one case: top-k and lse against the reference, output bits and
 * empty flags against the output-only pass. Returns the failures. */
static size_t stream_check(const struct scfg *c, const size_t *heads, size_t nh,
                           const double *sc, const void *full_out, const uint8_t *full_empty,
                           const double *sinks, const struct attn_result *res,
                           const struct attn_extras_out *xo)
{
    size_t n = c->n, L = c->L, k = c->k, esz = attn_dtype_size(c->dt), bad = 0;
    double rt = c->dt == ATTN_F32 ? 2e-5 : 1e-12, at_ = c->dt == ATTN_F32 ? 1e-9 : 1e-300;
    long double *p = malloc(L * sizeof *p);
    for (size_t a = 0; a < nh; a++)
        for (size_t i = 0; i < n; i++) {
            size_t hh = heads[a], row = a * n + i, grow = hh * n + i;
            const double *s = sc + grow * L;
            double xl = c->sm != ATTN_SOFTMAX_SINK ? 0 : sinks[c->per_head_sink ? hh : 0];
            int extra = c->sm != ATTN_SOFTMAX_STANDARD && xl != -INFINITY;
            long double lse = ref_stream_row(c, s, xl, extra, p);
            if (res->empty)
                bad += res->empty[row] != full_empty[grow];
            if (res->output)                   /* the bits of the output-only pass */
                bad += memcmp((const char *)res->output + row * c->d * esz,
                              (const char *)full_out + grow * c->d * esz, c->d * esz) != 0;
            if (xo->lse) {
                double v = c->dt == ATTN_F32 ? ((float *)xo->lse)[row] : ((double *)xo->lse)[row];
                bad += isnan(lse) ? !isnan(v) : !(fabs(v - (double)lse) <= rt * (1 + fabsl(lse)));
            }
            size_t allowed = 0;
            for (size_t j = 0; j < L; j++)
                allowed += s[j] != -INFINITY;
            const int64_t *ti = xo->top_idx + row * k;
            for (size_t t = 0; t < k; t++) {
                double val = c->dt == ATTN_F32 ? ((float *)xo->top_val)[row * k + t]
                                               : ((double *)xo->top_val)[row * k + t];
                if (t >= allowed) {
                    bad += ti[t] != -1 || val != 0;
                    continue;
                }
                if (ti[t] < 0 || ti[t] >= (int64_t)L || s[ti[t]] == -INFINITY) {
                    bad++;
                    continue;
                }
                bad += !(fabs(val - (double)p[ti[t]]) <= rt * (double)p[ti[t]] + at_);
                for (size_t u = 0; u < t; u++)
                    bad += ti[u] == ti[t];
                if (t > 0) {
                    double pv = c->dt == ATTN_F32 ? ((float *)xo->top_val)[row * k + t - 1]
                                                  : ((double *)xo->top_val)[row * k + t - 1];
                    bad += pv < val || (pv == val && ti[t - 1] > ti[t]);
                }
                if (t + 1 < k && t + 1 < allowed)
                    continue;
                /* nothing left out ranks above the last kept (exact ties
                 * across the cut: test_streamed_exact_ties) */
                for (size_t j = 0; j < L; j++) {
                    int kept = 0;
                    for (size_t u = 0; u <= t; u++)
                        kept |= ti[u] == (int64_t)j;
                    if (kept || s[j] == -INFINITY)
                        continue;
                    bad += (double)p[j] > (double)p[ti[t]] * (1 + rt) + at_;
                }
            }
        }
    free(p);
    return bad;
}

static void stream_case(const struct scfg *c)
{
    size_t h = c->h, hk = c->h_kv, n = c->n, L = c->L, d = c->d, k = c->k;
    struct cfg a = {.dt = c->dt};
    double *qd = arr(&a, h * n * d, -1.5, 1.5), *kd = arr(&a, hk * L * d, -1.5, 1.5);
    double *vd = arr(&a, hk * L * d, -2, 2), sinks[8];
    if (c->ties)                        /* equal keys: equal scores */
        for (size_t g = 0; g < hk; g++)
            for (size_t j = 1; j < L; j += 3)
                memcpy(kd + (g * L + j) * d, kd + (g * L + j - 1) * d, d * sizeof(double));
    for (size_t t = 0; t < h; t++)
        sinks[t] = c->per_head_sink && t % 3 == 2 ? -INFINITY : urand(-2, 2);
    uint8_t *mk = NULL;
    if (c->mask) {
        mk = malloc(h * n * L);
        for (size_t t = 0; t < h * n * L; t++)
            mk[t] = urand(0, 1) < 0.7;
        memset(mk, 0, L);               /* row (0, 0): no allowed key */
    }
    void *q = as_dt(&a, qd, h * n * d), *kk = as_dt(&a, kd, hk * L * d);
    void *v = as_dt(&a, vd, hk * L * d);
    struct attn_request r = {
        .shape = {h, hk, n, L, d, d},
        .params = {.dtype = c->dt, .scale = urand(0.3, 1.5), .softmax = c->sm,
                   .sink_logit = sinks[0], .sink_logits = c->per_head_sink ? sinks : NULL,
                   .softcap = c->softcap, .alibi = c->alibi},
        .causal = c->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
        .mask = mk, .mask_heads = h,
        .outputs = ATTN_OUT_OUTPUT,
    };
    if (c->window)
        r.window = (struct attn_window){true, (int64_t)(L / 5), c->causal ? 0 : 3,
                                        (int64_t)(c->window > 1 ? 4 : 0)};
    struct attn_inputs in = {q, kk, v, NULL, NULL, NULL, 1, 1, 1};
    size_t esz = attn_dtype_size(c->dt);
    /* the reference's scores and the output-only pass's bits */
    struct attn_request rs = r;
    rs.outputs = ATTN_OUT_SCORES;
    void *scb = malloc(h * n * L * esz), *fo = malloc(h * n * d * esz);
    uint8_t *fe = calloc(h * n, 1);
    struct attn_result fs = {.scores = scb}, fres = {.output = fo, .empty = fe};
    enum attn_kernel was = attn_kernel_active();
    attn_kernel_set(c->kern);
    CHECK(attn_forward(&rs, &in, &fs, NULL) == CORE_OK);
    CHECK(attn_forward(&r, &in, &fres, NULL) == CORE_OK);
    double *sc = malloc(h * n * L * sizeof *sc);
    for (size_t t = 0; t < h * n * L; t++)
        sc[t] = c->dt == ATTN_F32 ? ((float *)scb)[t] : ((double *)scb)[t];

    size_t heads[8], nh = 0;
    for (size_t t = h; t-- > 0;)
        if (urand(0, 1) < 0.7 || (t == 0 && nh == 0))
            heads[nh++] = t;
    size_t rows = nh * n;
    r.outputs = c->out ? ATTN_OUT_OUTPUT : 0;
    struct attn_result res = {.output = c->out ? malloc(rows * d * esz) : NULL,
                              .empty = calloc(rows, 1)};
    struct attn_extras x = {ATTN_X_TOPK | (c->lse ? ATTN_X_LSE : 0u), heads, nh, k};
    struct attn_extras_out xo = {.lse = c->lse ? malloc(rows * esz) : NULL,
                                 .top_idx = malloc(rows * k * 8),
                                 .top_val = malloc(rows * k * esz)};
    struct attn_ws *ws = attn_ws_new();
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, ws) == CORE_OK);
    attn_ws_free(ws);
    attn_kernel_set(was);
    size_t bad = stream_check(c, heads, nh, sc, fo, fe, sinks, &res, &xo);
    if (bad)
        printf("  stream case h=%zu/%zu n=%zu L=%zu k=%zu dt=%d sm=%d cap=%g causal=%d win=%d "
               "mask=%d ties=%d kern=%d: %zu bad\n", h, hk, n, L, k, (int)c->dt, (int)c->sm,
               c->softcap, c->causal, c->window, c->mask, c->ties, (int)c->kern, bad);
    CHECK_EQ_INT(bad, 0);
    free(res.output); free(res.empty); free(xo.lse); free(xo.top_idx); free(xo.top_val);
    free(scb); free(fo); free(fe); free(sc); free(mk);
    free(q); free(kk); free(v); free(qd); free(kd); free(vd);
}

/* Scores that every path computes exactly (small integers, scale 1/2):
 * groups of equal scores, the cut of k inside the best group, which must
 * keep its lowest indices; with a softcap of 1 (and scale 4: scores of 64
 * and more) every score saturates to the cap even in double, so the top k
 * are the first k keys. Each kernel, both dtypes. */
TEST(test_streamed_exact_ties)
{
    enum { N = 8, L = 300, D = 2, K = 37 };
    double qd[N * D], kd[L * D], vd[L * D];
    for (size_t i = 0; i < N; i++) {
        qd[i * D] = (double)(2 + i % 3);
        qd[i * D + 1] = 0;
    }
    for (size_t j = 0; j < L; j++) {
        kd[j * D] = (double)(j % 5 + 8);
        kd[j * D + 1] = (double)(j % 7);
        vd[j * D] = (double)(j % 3);
        vd[j * D + 1] = 1;
    }
    struct cfg a = {0};
    for (int it = 0; it < 24; it++) {
        a.dt = it % 2 ? ATTN_F32 : ATTN_F64;
        enum attn_kernel kern = (enum attn_kernel)(it / 2 % 3 == 0   ? ATTN_KERNEL_AUTO
                                                   : it / 2 % 3 == 1 ? ATTN_KERNEL_AVX2
                                                                     : ATTN_KERNEL_NONE);
        double cap = it / 6 % 2 ? 1 : 0;
        enum attn_softmax sm = it / 12 ? ATTN_SOFTMAX_ONE : ATTN_SOFTMAX_STANDARD;
        void *q = as_dt(&a, qd, N * D), *k = as_dt(&a, kd, L * D), *v = as_dt(&a, vd, L * D);
        struct attn_request r = {.shape = {1, 1, N, L, D, D},
                                 .params = {.dtype = a.dt, .scale = cap > 0 ? 4 : 0.5, .softmax = sm,
                                            .softcap = cap},
                                 .outputs = 0};
        struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
        int64_t ti[N * K];
        double tv[N * K];
        struct attn_result res = {0};
        struct attn_extras x = {ATTN_X_TOPK, NULL, 0, K};
        struct attn_extras_out xo = {.top_idx = ti, .top_val = tv};
        enum attn_kernel was = attn_kernel_active();
        attn_kernel_set(kern);
        CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
        attn_kernel_set(was);
        size_t bad = 0;
        for (size_t i = 0; i < N; i++)
            for (size_t t = 0; t < K; t++) {
                /* best group: key j % 5 == 4; saturated: every key */
                int64_t want = cap > 0 ? (int64_t)t : (int64_t)(5 * t + 4);
                double val = at(&a, tv, i * K + t), first = at(&a, tv, i * K);
                bad += ti[i * K + t] != want || val != first || !(val > 0);
            }
        CHECK_EQ_INT(bad, 0);
        free(q);
        free(k);
        free(v);
    }
}

/* Buffers of rank_rows (of the dtype, but ti and am): the weights and the
 * statistics are written only when asked for. */
struct ranked {
    void *w;
    int64_t *ti;
    void *tv, *ent, *mw, *mass;
    int64_t *am;
};

/* n query rows of d = 1 over L keys at scale 1: the top K of each row, and
 * with stats the weights and statistics too (the road that keeps the
 * weights; without, the streamed one). */
static bool rank_rows(const struct cfg *a, void *q, void *k, void *v, size_t n, size_t L,
                      size_t K, bool stats, const struct ranked *o)
{
    struct attn_request r = {.shape = {1, 1, n, L, 1, 1, 0},
                             .params = {.dtype = a->dt, .scale = 1},
                             .outputs = stats ? ATTN_OUT_WEIGHTS : 0};
    struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
    struct attn_result res = {.weights = stats ? o->w : NULL};
    struct attn_extras x = {ATTN_X_TOPK | (stats ? ATTN_X_STATS : 0u), NULL, 0, K};
    struct attn_extras_out xo = {.top_idx = o->ti, .top_val = o->tv};
    if (stats) {
        xo.entropy = o->ent;
        xo.max_weight = o->mw;
        xo.mass = o->mass;
        xo.argmax = o->am;
    }
    return attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK;
}

/* Keys with equal scores get equal weights wherever they sit in the row
 * (the vector body or the tail of the softmax's exponentials), so argmax
 * and the top k take the lowest of them, on the road that keeps the
 * weights (statistics asked for) and on the streamed one alike: one key
 * above L − 1 equal ones, L across the vector widths, both dtypes. */
TEST(test_equal_scores_tie_to_lower_index)
{
    enum { N = 5, K = 3, LMAX = 41 };
    static const double pairs[][2] = {{2.946, 2.138}, {0.213, -2.351}, {1.807, -0.718},
                                      {0.597, -1.483}, {1.405, -0.286}};
    size_t bad = 0;
    for (int d = 0; d < 2; d++)
        for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++)
            for (size_t L = 2; L <= LMAX; L++)
                for (int stats = 0; stats < 2; stats++) {
                    struct cfg a = {.dt = d ? ATTN_F32 : ATTN_F64};
                    double qd[N], kd[LMAX], vd[LMAX], w[N * LMAX], tv[N * K], mw[N];
                    double ent[N], mass[N];
                    int64_t ti[N * K], am[N];
                    for (size_t i = 0; i < N; i++)
                        qd[i] = pairs[pi][0];
                    for (size_t j = 0; j < L; j++) {
                        kd[j] = j ? pairs[pi][1] : 2.5;
                        vd[j] = 1;
                    }
                    void *q = as_dt(&a, qd, N), *k = as_dt(&a, kd, L), *v = as_dt(&a, vd, L);
                    struct ranked out = {w, ti, tv, ent, mw, mass, am};
                    CHECK(rank_rows(&a, q, k, v, N, L, K, stats, &out));
                    /* q > 0 and the others' key < 2.5: key 0 first,
                     * then keys 1, 2, ... */
                    for (size_t i = 0; i < N; i++) {
                        for (size_t t = 0; t < K && t < L; t++)
                            bad += ti[i * K + t] != (int64_t)t;
                        for (size_t j = 2; stats && j < L; j++)
                            bad += at(&a, w, i * L + j) != at(&a, w, i * L + 1);
                        bad += stats && am[i] != 0;
                    }
                    free(q);
                    free(k);
                    free(v);
                }
    CHECK_EQ_INT(bad, 0);
}

/* Keys whose weights round to one value (0 here: e^-120 and e^-150 are
 * below float32's least subnormal) are ranked by their scores on both
 * roads: the streamed top-k, which holds scores alone, and the one that
 * keeps the weights (statistics asked for), which ranked the rounded
 * weights and took key 1 (score -150) before key 2 (score -120). */
TEST(test_weights_rounded_to_one_value_rank_by_score)
{
    enum { N = 8, L = 4, K = 2 };
    static const double kd[L] = {0, -150, -120, -200}, vd[L] = {1, 2, 3, 4};
    double qd[N];
    for (size_t i = 0; i < N; i++)
        qd[i] = 1;
    size_t bad = 0;
    for (int stats = 0; stats < 2; stats++) {
        struct cfg a = {.dt = ATTN_F32};
        float w[N * L], tv[N * K], mw[N], ent[N], mass[N];
        int64_t ti[N * K], am[N];
        void *q = as_dt(&a, qd, N), *k = as_dt(&a, kd, L), *v = as_dt(&a, vd, L);
        struct ranked out = {w, ti, tv, ent, mw, mass, am};
        CHECK(rank_rows(&a, q, k, v, N, L, K, stats, &out));
        for (size_t i = 0; i < N; i++) {
            bad += ti[i * K] != 0 || ti[i * K + 1] != 2;
            bad += tv[i * K] != 1.0f || tv[i * K + 1] != 0.0f;
            bad += stats && (am[i] != 0 || w[i * L + 1] != w[i * L + 2]);
        }
        free(q);
        free(k);
        free(v);
    }
    CHECK_EQ_INT(bad, 0);
}

/* Batches: the streamed top-k of B = 3 elements, every head and a subset
 * in another order, equals the materialising road's (statistics asked for
 * too), which the random cases hold to the reference. */
TEST(test_streamed_batch)
{
    enum { B = 3, H = 2, N = 9, L = 150, D = 8, K = 6 };
    struct cfg a = {.dt = ATTN_F32};
    double *qd = arr(&a, B * H * N * D, -1.5, 1.5), *kd = arr(&a, B * L * D, -1.5, 1.5);
    double *vd = arr(&a, B * L * D, -1, 1);
    void *q = as_dt(&a, qd, B * H * N * D), *k = as_dt(&a, kd, B * L * D);
    void *v = as_dt(&a, vd, B * L * D);
    struct attn_request r = {.shape = {H, 1, N, L, D, D, B},
                             .params = {.dtype = ATTN_F32, .scale = 0.6,
                                        .softmax = ATTN_SOFTMAX_ONE},
                             .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                             .outputs = ATTN_OUT_OUTPUT};
    struct attn_inputs in = {q, k, v, NULL, NULL, NULL, 1, 1, 1};
    size_t sub[1] = {1}, *hs[2] = {NULL, sub}, nhs[2] = {H, 1};
    for (int c = 0; c < 2; c++) {
        size_t rows = B * nhs[c] * N;
        float o1[B * H * N * D], o2[B * H * N * D], tv1[B * H * N * K], tv2[B * H * N * K];
        float lse[B * H * N], ent[B * H * N], mw[B * H * N], mass[B * H * N];
        int64_t ti1[B * H * N * K], ti2[B * H * N * K], am[B * H * N];
        struct attn_result r1 = {.output = o1}, r2 = {.output = o2};
        struct attn_extras x1 = {ATTN_X_TOPK, hs[c], nhs[c], K};
        struct attn_extras x2 = {ATTN_X_TOPK | ATTN_X_STATS, hs[c], nhs[c], K};
        struct attn_extras_out xo1 = {.top_idx = ti1, .top_val = tv1};
        struct attn_extras_out xo2 = {NULL, lse, ent, mw, mass, am, ti2, tv2};
        CHECK(attn_forward_extras(&r, &in, NULL, &x1, &r1, &xo1, NULL) == CORE_OK);
        CHECK(attn_forward_extras(&r, &in, NULL, &x2, &r2, &xo2, NULL) == CORE_OK);
        size_t bad = 0;
        for (size_t t = 0; t < rows * K; t++)
            bad += ti1[t] != ti2[t] || !(fabsf(tv1[t] - tv2[t]) <= 1e-6f);
        for (size_t t = 0; t < rows * D; t++)
            bad += !(fabsf(o1[t] - o2[t]) <= 1e-5f);
        CHECK_EQ_INT(bad, 0);
    }
    free(q); free(k); free(v); free(qd); free(kd); free(vd);
}

/* Top-k (and lse) without statistics, scores or weights ride the
 * output-only pass (fused kernels and the gemm loop): random cases with
 * every softmax, softcap, causal, windows with and without sinks, masks
 * with an empty row, ALiBi, exact ties, k beyond the allowed keys; the
 * output keeps the output-only pass's bits. */
TEST(test_streamed_top_k)
{
    static const size_t Ls[] = {3, 70, 200, 700, 1100};
    for (int it = 0; it < 90; it++) {
        struct scfg c = {0};
        c.h_kv = 1 + (size_t)urand(0, 2);
        c.h = c.h_kv * (1 + (size_t)urand(0, 3));
        c.n = 5 + (size_t)urand(0, 60);
        c.L = Ls[(size_t)urand(0, 5)];
        c.d = 4 * (1 + (size_t)urand(0, 8));
        c.k = 1 + (size_t)urand(0, it % 4 == 0 ? (double)c.L + 5 : 40);
        c.dt = it % 3 == 2 ? ATTN_F64 : ATTN_F32;
        c.sm = (enum attn_softmax)(it % 3);
        c.per_head_sink = urand(0, 1) < 0.3;
        c.softcap = urand(0, 1) < 0.25 ? urand(1, 5) : 0;
        c.causal = urand(0, 1) < 0.5;
        c.window = (int)urand(0, 3);
        c.mask = urand(0, 1) < 0.15;
        c.alibi = urand(0, 1) < 0.1;
        c.ties = it % 4 == 1;
        c.out = urand(0, 1) < 0.5;
        c.lse = urand(0, 1) < 0.5;
        c.kern = (enum attn_kernel)(it % 4 == 3 ? ATTN_KERNEL_AVX2
                                    : it % 4 == 2 ? ATTN_KERNEL_NONE : ATTN_KERNEL_AUTO);
        stream_case(&c);
    }
}

/* Quiet rows: under softmax1, or a sink that outweighs every key, Σ p and
 * ln D = ln(e^x + Σ e^s) are small when the scores are far below the extra
 * logit x, and keep their relative precision: each against long double from
 * the pass's own scores, on the rows path (statistics) and on the path
 * where lse rides the output-only pass (top-k without statistics). Shifts
 * down to where every weight is subnormal, or 0, in each dtype. */
static size_t quiet_case(enum attn_dtype dt, enum attn_softmax sm, int stream)
{
    static const double shift[] = {3,    0,    -5,   -20,  -30,  -37,  -40,  -80,
                                   -95,  -100, -103, -120, -700, -740, -745, -800};
    enum { N = sizeof shift / sizeof shift[0], L = 3 };
    double q[N], k[L] = {1, 1.25, 1.5}, v[L] = {1, -1, 2}, xl = sm == ATTN_SOFTMAX_SINK ? 2 : 0;
    for (size_t i = 0; i < N; i++)
        q[i] = shift[i];
    struct cfg a = {.dt = dt};
    void *qt = as_dt(&a, q, N), *kt = as_dt(&a, k, L), *vt = as_dt(&a, v, L);
    size_t esz = attn_dtype_size(dt), bad = 0;
    struct attn_request r = {.shape = {1, 1, N, L, 1, 1},
                             .params = {.dtype = dt, .scale = 1, .softmax = sm, .sink_logit = xl},
                             .outputs = ATTN_OUT_SCORES};
    struct attn_inputs in = {qt, kt, vt, NULL, NULL, NULL, 1, 1, 1};
    void *sc = malloc(N * L * esz), *lse = malloc(N * esz), *ent = malloc(N * esz);
    void *mw = malloc(N * esz), *mass = malloc(N * esz), *tv = malloc(N * esz);
    void *out = malloc(N * esz);
    int64_t am[N], ti[N];
    struct attn_result full = {.scores = sc};
    CHECK(attn_forward(&r, &in, &full, NULL) == CORE_OK);
    r.outputs = stream ? ATTN_OUT_OUTPUT : 0;
    CHECK(!stream || attn_output_blocked(&r));
    struct attn_result res = {.output = stream ? out : NULL};
    struct attn_extras x = {ATTN_X_LSE | (stream ? ATTN_X_TOPK : ATTN_X_STATS), NULL, 0, 1};
    struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, ti, tv};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    double rt = dt == ATTN_F32 ? 1e-5 : 1e-12;
    double tiny = dt == ATTN_F32 ? 4 * (double)FLT_TRUE_MIN : 4 * DBL_TRUE_MIN;
    for (size_t i = 0; i < N; i++) {
        long double u = 0;              /* Σ e^(s − x): D = e^x (1 + u) */
        for (size_t j = 0; j < L; j++)
            u += expl((long double)at(&a, sc, i * L + j) - xl);
        long double lse_ref = xl + log1pl(u), mass_ref = u / (1 + u);
        double got = at(&a, lse, i);
        if (!(fabsl(got - lse_ref) <= rt * fabsl(lse_ref) + tiny)) {
            printf("  dt=%d sm=%d stream=%d shift %g: lse %.17g, expected %.17Lg\n", (int)dt,
                   (int)sm, stream, shift[i], got, lse_ref);
            bad++;
        }
        got = stream ? (double)mass_ref : at(&a, mass, i);
        if (!(fabsl(got - mass_ref) <= rt * mass_ref + tiny)) {
            printf("  dt=%d sm=%d shift %g: mass %.17g, expected %.17Lg\n", (int)dt, (int)sm,
                   shift[i], got, mass_ref);
            bad++;
        }
    }
    free(qt); free(kt); free(vt); free(sc); free(lse); free(ent); free(mw); free(mass);
    free(tv); free(out);
    return bad;
}

TEST(test_quiet_rows)
{
    static const enum attn_dtype dts[] = {ATTN_F64, ATTN_F32};
    static const enum attn_softmax sms[] = {ATTN_SOFTMAX_ONE, ATTN_SOFTMAX_SINK};
    for (size_t a = 0; a < 2; a++)
        for (size_t b = 0; b < 2; b++)
            for (int stream = 0; stream < 2; stream++)
                CHECK_EQ_INT(quiet_case(dts[a], sms[b], stream), 0);
}

/* Entropy at large scores: softmax is shift invariant, so rows of equal
 * scores at 1e6..1e300 have entropy ln L, and a row whose other keys score
 * far below its best (1e308 against −1e308 and 0: weights 1, 0, 0) has 0.
 * Σ p (lse − s) gave 1.0986328 for ln 3 at 1e12 and 0·∞ = NaN for the
 * latter; −Σ p ln p from the weights keeps ln p. */
static size_t entropy_case(enum attn_dtype dt, const double *k, const double *q, size_t N,
                           const double *want)
{
    enum { L = 3 };
    double v[L] = {1, -1, 2};
    struct cfg a = {.dt = dt};
    void *qt = as_dt(&a, q, N), *kt = as_dt(&a, k, L), *vt = as_dt(&a, v, L);
    size_t esz = attn_dtype_size(dt), bad = 0;
    struct attn_request r = {.shape = {1, 1, N, L, 1, 1},
                             .params = {.dtype = dt, .scale = 1},
                             .outputs = 0};
    struct attn_inputs in = {qt, kt, vt, NULL, NULL, NULL, 1, 1, 1};
    void *lse = malloc(N * esz), *ent = malloc(N * esz), *mw = malloc(N * esz);
    void *mass = malloc(N * esz);
    int64_t am[8];
    struct attn_result res = {0};
    struct attn_extras x = {ATTN_X_LSE | ATTN_X_STATS, NULL, 0, 1};
    struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, NULL, NULL};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    double rt = dt == ATTN_F32 ? 1e-6 : 1e-14;
    for (size_t i = 0; i < N; i++) {
        double got = at(&a, ent, i);
        if (!(fabs(got - want[i]) <= rt * (1 + want[i]))) {
            printf("  dt=%d q=%g: entropy %.17g, expected %.17g\n", (int)dt, q[i], got, want[i]);
            bad++;
        }
    }
    free(qt); free(kt); free(vt); free(lse); free(ent); free(mw); free(mass);
    return bad;
}

/* Mass under a sink at large scores: sink and two keys all at 1e12 (or
 * 1e7 in float32) have weights 1/3 each and Σ p = 2/3; 1 − exp(x − lse)
 * gave 0.6666735 in float64, lse having rounded away ln 3's last bits. */
static size_t mass_case(enum attn_dtype dt, double big)
{
    enum { L = 2 };
    double q[1] = {big}, k[L] = {1, 1}, v[L] = {1, -1};
    struct cfg a = {.dt = dt};
    void *qt = as_dt(&a, q, 1), *kt = as_dt(&a, k, L), *vt = as_dt(&a, v, L);
    size_t esz = attn_dtype_size(dt);
    struct attn_request r = {.shape = {1, 1, 1, L, 1, 1},
                             .params = {.dtype = dt, .scale = 1, .softmax = ATTN_SOFTMAX_SINK,
                                        .sink_logit = at(&a, qt, 0)},
                             .outputs = 0};
    struct attn_inputs in = {qt, kt, vt, NULL, NULL, NULL, 1, 1, 1};
    void *lse = malloc(esz), *ent = malloc(esz), *mw = malloc(esz), *mass = malloc(esz);
    int64_t am[1];
    struct attn_result res = {0};
    struct attn_extras x = {ATTN_X_LSE | ATTN_X_STATS, NULL, 0, 1};
    struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, NULL, NULL};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    double got = at(&a, mass, 0), rt = dt == ATTN_F32 ? 1e-6 : 1e-14;
    size_t bad = !(fabs(got - 2.0 / 3) <= rt);
    if (bad)
        printf("  dt=%d scores %g: mass %.17g, expected 2/3\n", (int)dt, big, got);
    free(qt); free(kt); free(vt); free(lse); free(ent); free(mw); free(mass);
    return bad;
}

TEST(test_mass_large_scores)
{
    CHECK_EQ_INT(mass_case(ATTN_F64, 1e7), 0);
    CHECK_EQ_INT(mass_case(ATTN_F64, 1e12), 0);
    CHECK_EQ_INT(mass_case(ATTN_F32, 1e7), 0);
}

TEST(test_entropy_large_scores)
{
    static const double eq[3] = {1, 1, 1}, far[3] = {1, -1, 0};
    static const double q64[] = {1, 1e6, 1e9, 1e12, 1e300}, q32[] = {1, 1e6, 1e9, 1e12, 1e37};
    static const double big64[] = {1e308}, big32[] = {3e38};
    double ln3[5], zero[1] = {0};
    for (size_t i = 0; i < 5; i++)
        ln3[i] = log(3.0);
    CHECK_EQ_INT(entropy_case(ATTN_F64, eq, q64, 5, ln3), 0);
    CHECK_EQ_INT(entropy_case(ATTN_F32, eq, q32, 5, ln3), 0);
    CHECK_EQ_INT(entropy_case(ATTN_F64, far, big64, 1, zero), 0);
    CHECK_EQ_INT(entropy_case(ATTN_F32, far, big32, 1, zero), 0);
}

/* Top-k values on the output-only pass at large scores: three equal
 * scores at 1e12 (1e7 in float32) weigh 1/3 each. exp(s − lse) lost
 * ln 3's low bits to lse's rounding (0.33333 ± 7e-6 in float64 at 1e12,
 * 1.6e-11 off at 1e5); they are now exp((s − M) − ln D). */
static size_t streamed_value_case(enum attn_dtype dt, enum attn_softmax sm, double big)
{
    enum { N = 8, L = 3 };              /* over ATTN_LOOP_ROWS rows: the blocked pass */
    double q[N], k[L] = {1, 1, 1}, v[L] = {1, -1, 2};
    for (size_t i = 0; i < N; i++)
        q[i] = big;
    struct cfg a = {.dt = dt};
    void *qt = as_dt(&a, q, N), *kt = as_dt(&a, k, L), *vt = as_dt(&a, v, L);
    size_t esz = attn_dtype_size(dt), bad = 0;
    double xl = sm == ATTN_SOFTMAX_SINK ? at(&a, qt, 0) : 0;
    struct attn_request r = {.shape = {1, 1, N, L, 1, 1},
                             .params = {.dtype = dt, .scale = 1, .softmax = sm, .sink_logit = xl},
                             .outputs = ATTN_OUT_OUTPUT};
    CHECK(attn_output_blocked(&r));
    struct attn_inputs in = {qt, kt, vt, NULL, NULL, NULL, 1, 1, 1};
    void *out = malloc(N * esz), *tv = malloc(N * L * esz), *lse = malloc(N * esz);
    int64_t ti[N * L];
    struct attn_result res = {.output = out};
    struct attn_extras x = {ATTN_X_TOPK | ATTN_X_LSE, NULL, 0, L};
    struct attn_extras_out xo = {NULL, lse, NULL, NULL, NULL, NULL, ti, tv};
    CHECK(attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL) == CORE_OK);
    double want = sm == ATTN_SOFTMAX_SINK ? 0.25 : 1.0 / 3, rt = dt == ATTN_F32 ? 1e-6 : 1e-14;
    for (size_t t = 0; t < N * L; t++)
        if (!(fabs(at(&a, tv, t) - want) <= rt * want)) {
            printf("  dt=%d sm=%d scores %g: top-k value %zu %.17g, expected %.17g\n", (int)dt,
                   (int)sm, big, t, at(&a, tv, t), want);
            bad++;
        }
    free(qt); free(kt); free(vt); free(out); free(tv); free(lse);
    return bad;
}

TEST(test_streamed_values_large_scores)
{
    static const double big64[] = {1e5, 1e9, 1e12};
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(streamed_value_case(ATTN_F64, ATTN_SOFTMAX_STANDARD, big64[i]), 0);
        CHECK_EQ_INT(streamed_value_case(ATTN_F64, ATTN_SOFTMAX_SINK, big64[i]), 0);
    }
    CHECK_EQ_INT(streamed_value_case(ATTN_F32, ATTN_SOFTMAX_STANDARD, 1e7), 0);
    CHECK_EQ_INT(streamed_value_case(ATTN_F32, ATTN_SOFTMAX_SINK, 1e7), 0);
}

/* empty_rows "error" with chosen heads: a head that is not chosen is not
 * computed, so its empty row is no error. Three query heads share one kv
 * head, so the chosen head's rows sit in one tile with theirs; that tile
 * ran whole with empty_rows "error" and answered CORE_EEMPTYROW for head 0
 * or 2 when only head 1 was asked (a 422 with no row to name). */
static enum core_status chosen_heads_case(enum attn_dtype dt, size_t empty_head, size_t chosen)
{
    enum { H = 3, L = 2 };
    double q[H * 2] = {1, 0, 0, 1, 1, 1}, k[L * 2] = {1, 0, 0, 1}, v[L] = {1, 2};
    uint8_t mk[H * L] = {1, 1, 1, 1, 1, 1};
    mk[empty_head * L] = mk[empty_head * L + 1] = 0;
    struct cfg a = {.dt = dt};
    void *qt = as_dt(&a, q, H * 2), *kt = as_dt(&a, k, L * 2), *vt = as_dt(&a, v, L);
    size_t esz = attn_dtype_size(dt), heads[1] = {chosen};
    struct attn_request r = {.shape = {H, 1, 1, L, 2, 1},
                             .params = {.dtype = dt, .scale = 1},
                             .mask = mk, .mask_heads = H,
                             .empty_rows = ATTN_EMPTY_ERROR,
                             .outputs = ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT};
    struct attn_inputs in = {qt, kt, vt, NULL, NULL, NULL, 1, 1, 1};
    void *w = malloc(L * esz), *o = malloc(esz), *lse = malloc(esz);
    struct attn_result res = {.weights = w, .output = o};
    struct attn_extras x = {ATTN_X_LSE, heads, 1, 1};
    struct attn_extras_out xo = {NULL, lse, NULL, NULL, NULL, NULL, NULL, NULL};
    enum core_status st = attn_forward_extras(&r, &in, NULL, &x, &res, &xo, NULL);
    if (st == CORE_OK && !(fabs(at(&a, w, 0) + at(&a, w, 1) - 1) <= 1e-6))
        st = CORE_EINVAL;
    free(qt); free(kt); free(vt); free(w); free(o); free(lse);
    return st;
}

TEST(test_empty_row_of_a_head_not_chosen)
{
    static const enum attn_dtype dts[] = {ATTN_F64, ATTN_F32};
    for (size_t t = 0; t < 2; t++) {
        CHECK_EQ_INT(chosen_heads_case(dts[t], 0, 1), CORE_OK);
        CHECK_EQ_INT(chosen_heads_case(dts[t], 2, 1), CORE_OK);
        CHECK_EQ_INT(chosen_heads_case(dts[t], 2, 0), CORE_OK);
        CHECK_EQ_INT(chosen_heads_case(dts[t], 1, 1), CORE_EEMPTYROW);
    }
}

int main(void)
{
    RUN(test_seed_example);
    RUN(test_random_cases);
    RUN(test_segments);
    RUN(test_batches);
    RUN(test_blocks_of_rows);
    RUN(test_long_context_top_k);
    RUN(test_refusals);
    RUN(test_streamed_top_k);
    RUN(test_streamed_exact_ties);
    RUN(test_equal_scores_tie_to_lower_index);
    RUN(test_weights_rounded_to_one_value_rank_by_score);
    RUN(test_streamed_batch);
    RUN(test_quiet_rows);
    RUN(test_entropy_large_scores);
    RUN(test_mass_large_scores);
    RUN(test_empty_row_of_a_head_not_chosen);
    RUN(test_streamed_values_large_scores);
    TEST_MAIN_END();
}
