/*
 * core/attn_extras.c — the pass over chosen heads with q·k, log-denominator,
 * row statistics and top-k weights (core/attn_extras.h).
 *
 * Work is cut into pieces of one head's query rows: a whole head when no
 * extra needs the scores, else blocks of about ATTN_EXTRAS_BLOCK_BYTES of
 * scores. Each piece runs attn_forward_kv_rows for its rows into the
 * caller's compact arrays (or a block buffer of its own when the scores or
 * weights are not returned) and derives, row by row:
 *   argmax      the largest weight among allowed keys (finite score), ties
 *               to the lower index
 *   lse         s_a − ln p_a at that key a (p_a = exp(s_a)/D, so this is
 *               ln D exactly, and needs no second pass of exponentials); a
 *               row whose best weight is subnormal or 0 sums its
 *               exponentials, and a quiet row (mass ≤ 1/2) takes
 *               x − ln(1 − mass) (row_lse_mass)
 *   mass        Σ p for the extra logit x (0 softmax1, the sink) while it is
 *               at most 1/2, else 1 − exp(x − lse); 1 for standard
 *   entropy     −Σ p ln p over allowed keys with p > 0, from the weights
 *               themselves: Σ p (lse − s) would lose ln p to the rounding
 *               of lse and s at large scores (1e12: 2e-5 of ln 3), and
 *               give 0·∞ = NaN for a key whose score is far below lse
 *   top-k       a min-heap of k (value, index) pairs, each key compared once
 *               with the heap's smallest: O(L) for most rows
 * Top-k (and lse) without statistics, scores or weights take another road
 * when the pass is key-blocked (attn_output_blocked): the output-only pass
 * itself, with a sink (attn_score_sink) that offers each block's scores to
 * the rows' heaps, kept in place in the caller's top-k arrays, and turns
 * them into weights exp(s − lse) when the pass hands over the row's sum. No
 * row of scores is stored, the extra work is one comparison per score
 * (eight lanes at a time on the fused kernels' layout), and with every head
 * chosen the pass is attn_forward's own, so the output keeps its bits.
 * q·k: the piece's queries prepared as the pass prepares them
 * (attn_prepare_q) times the prepared keys, one gemm with factor 1. Asked
 * alone, it still runs the scores pass (into blocks of its own), which
 * alone knows the rows with no allowed key.
 * The compact arrays are handed to attn_forward_kv_rows, which indexes rows
 * globally (head·n + i), with their base shifted by the difference between
 * the slot's and the head's first row (rebase below).
 */
#include "attn_extras.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Rows per piece when the top-k rides the output-only pass: four groups
 * of the fused kernel (core/attn.c's tile), several pieces per long head. */
#define STREAM_ROWS 192

/* ---- element access for either dtype ---------------------------------- */

static inline double get(const void *p, enum attn_dtype dt, size_t i)
{
    return dt == ATTN_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void put(void *p, enum attn_dtype dt, size_t i, double x)
{
    if (dt == ATTN_F32)
        ((float *)p)[i] = (float)x;
    else
        ((double *)p)[i] = x;
}

/* base + (slot_row - glob_row) rows of row_bytes: the pointer that puts
 * global row glob_row at compact row slot_row. Computed as an integer so
 * no out-of-object pointer is formed in C's terms; only rows inside base's
 * block are ever written through it. */
static void *rebase(void *base, size_t slot_row, size_t glob_row, size_t row_bytes)
{
    if (!base)
        return NULL;
    uintptr_t b = (uintptr_t)base;
    if (slot_row >= glob_row)
        b += (slot_row - glob_row) * row_bytes;
    else
        b -= (glob_row - slot_row) * row_bytes;
    return (void *)b;
}

/* ---- one row's statistics and top-k ----------------------------------- */

/* The extra logit of head hh's denominator; false for standard. */
static bool extra_logit(const struct attn_params *p, size_t hh, double *x)
{
    if (p->softmax == ATTN_SOFTMAX_ONE) {
        *x = 0;
        return true;
    }
    if (p->softmax == ATTN_SOFTMAX_SINK) {
        *x = p->sink_logits ? p->sink_logits[hh] : p->sink_logit;
        return *x != -INFINITY;         /* -inf: no sink, standard */
    }
    return false;
}

/* (va, ia) ranks above (vb, ib): larger value, ties to the lower index. */
static inline bool above(double va, size_t ia, double vb, size_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Min-heap (by `above`) of indices into s: the worst of the kept at [0]. */
static void heap_down(size_t *hp, size_t m, size_t t, const void *s, enum attn_dtype dt)
{
    for (;;) {
        size_t l = 2 * t + 1, r = l + 1, worst = t;
        if (l < m && above(get(s, dt, hp[worst]), hp[worst], get(s, dt, hp[l]), hp[l]))
            worst = l;
        if (r < m && above(get(s, dt, hp[worst]), hp[worst], get(s, dt, hp[r]), hp[r]))
            worst = r;
        if (worst == t)
            return;
        size_t tmp = hp[t];
        hp[t] = hp[worst];
        hp[worst] = tmp;
        t = worst;
    }
}

/* ln D and Σ p of a row with at least one allowed key, a its best key
 * (score sa, weight best). A key's share: lse = sa − ln p_a, which costs no
 * exponential, is exact to rounding when p_a is a normal number; a weight
 * short of full precision (subnormal, or underflowed to 0) takes the sum of
 * the row's exponentials instead. The mass under an extra logit x is Σ p
 * summed (in double) while it is at most 1/2, and lse = x − ln(1 − mass):
 * 1 − exp(x − lse) would lose a small mass to the rounding of lse (at
 * s = −30 under softmax1, 1.3% in float64; below about −37, all of it and
 * its sign). Above 1/2 that expression is the accurate one, with x − lse
 * taken as (x − s_a) + ln p_a: lse itself rounds away ln p_a at large
 * scores (sink and keys at 1e12 gave a mass of 0.6666735 for 2/3). */
static void row_lse_mass(const void *s, const void *w, enum attn_dtype dt, size_t L,
                         double sa, double best, bool has_extra, double xl,
                         double *lse, double *mass)
{
    double tiny = dt == ATTN_F32 ? FLT_MIN : DBL_MIN;
    if (best < tiny) {
        double sh = has_extra && xl > sa ? xl : sa, sum = 0;
        for (size_t j = 0; j < L; j++) {
            double sj = get(s, dt, j);
            if (sj != -INFINITY)
                sum += exp(sj - sh);
        }
        if (has_extra && sh == xl) {    /* the extra term is the 1 */
            *lse = xl + log1p(sum);
            *mass = sum / (1 + sum);
        } else {
            double t = log(sum + (has_extra ? exp(xl - sh) : 0));
            *lse = sh + t;
            *mass = has_extra ? -expm1((xl - sh) - t) : 1.0;
        }
        return;
    }
    if (!has_extra) {
        *lse = sa - log(best);
        *mass = 1.0;
        return;
    }
    double sum = 0;
    for (size_t j = 0; j < L; j++)
        if (get(s, dt, j) != -INFINITY)
            sum += get(w, dt, j);
    if (sum <= 0.5) {
        *lse = xl - log1p(-sum);
        *mass = sum;
    } else {
        *lse = sa - log(best);
        *mass = -expm1((xl - sa) + log(best));
    }
}

/* Row of final scores s [L] (masked = -inf) and weights w [L] -> slot row
 * `row` of the extras; hp: scratch of min(k, L) indices. Keys are ranked
 * by score, ties to the lower index: the weights' order (a weight grows
 * with its score), with weights that round to one value (0 among them)
 * told apart as the streamed top-k, which holds scores alone, tells them. */
static void row_extras(const struct attn_request *r, const struct attn_extras *x,
                       struct attn_extras_out *xo, size_t hh, size_t row,
                       const void *s, const void *w, size_t *hp)
{
    enum attn_dtype dt = r->params.dtype;
    size_t L = r->shape.L, k = x->top_k, kk = k < L ? k : L, m = 0;
    bool topk = (x->want & ATTN_X_TOPK) != 0;
    double best = 0, sbest = -INFINITY, xl = 0;
    size_t am = SIZE_MAX;
    bool has_extra = extra_logit(&r->params, hh, &xl);

    for (size_t j = 0; j < L; j++) {
        double sj = get(s, dt, j);
        if (sj == -INFINITY)
            continue;
        if (am == SIZE_MAX || sj > sbest) {
            sbest = sj;
            best = get(w, dt, j);
            am = j;
        }
        if (!topk)
            continue;
        if (m < kk) {                   /* fill, then heapify once */
            hp[m++] = j;
            if (m == kk)
                for (size_t t = kk / 2; t-- > 0;)
                    heap_down(hp, m, t, s, dt);
        } else if (above(sj, j, get(s, dt, hp[0]), hp[0])) {
            hp[0] = j;
            heap_down(hp, m, 0, s, dt);
        }
    }

    double lse = NAN, mass = 0, ent = 0;
    if (am != SIZE_MAX) {
        double sa = get(s, dt, am);
        row_lse_mass(s, w, dt, L, sa, best, has_extra, xl, &lse, &mass);
        for (size_t j = 0; (x->want & ATTN_X_STATS) && j < L; j++) {
            double wj = get(w, dt, j);
            if (get(s, dt, j) != -INFINITY && wj > 0)
                ent -= wj * log(wj);
        }
    } else if (has_extra) {
        lse = xl;                       /* the denominator is the extra term alone */
    }

    if (xo->lse)
        put(xo->lse, dt, row, lse);
    if (x->want & ATTN_X_STATS) {
        put(xo->entropy, dt, row, ent);
        put(xo->max_weight, dt, row, am == SIZE_MAX ? 0 : best);
        put(xo->mass, dt, row, mass);
        xo->argmax[row] = am == SIZE_MAX ? -1 : (int64_t)am;
    }
    if (!topk)
        return;
    if (m < kk)                         /* fewer allowed keys than k */
        for (size_t t = m / 2; t-- > 0;)
            heap_down(hp, m, t, s, dt);
    /* pop the worst to the back: the array ends best-first */
    int64_t *ti = xo->top_idx + row * k;
    for (size_t t = m; t-- > 0;) {
        size_t j = hp[0];
        ti[t] = (int64_t)j;
        put(xo->top_val, dt, row * k + t, get(w, dt, j));
        hp[0] = hp[t];
        heap_down(hp, t, 0, s, dt);
    }
    for (size_t t = m; t < k; t++) {
        ti[t] = -1;
        put(xo->top_val, dt, row * k + t, 0);
    }
}

/* ---- top-k streamed from the key-blocked output-only pass ------------- */

struct xjob {
    const struct attn_request *r;   /* the pass as run: outputs include what the extras read */
    const struct attn_inputs *in;
    const struct attn_kv_view *kv;
    const struct attn_extras *x;
    const struct attn_result *out;  /* compact arrays */
    struct attn_extras_out *xo;
    const size_t *heads;            /* [nh] */
    size_t nh;
    size_t rb;                      /* rows per piece */
    size_t per_head;                /* pieces per head */
    bool pass;                      /* run the forward pass here (else it runs whole) */
    bool need_sw;                   /* extras read scores and weights */
    bool scratch;                   /* q·k alone: scores in blocks of its own, for the empty rows */
    bool qk_done;                   /* q·k computed already */
    bool stream;                    /* top-k fed by the output-only pass */
    const size_t *slot_head;        /* [h] compact head of each chosen head */
    bool want_out;                  /* the caller asked for the output */
    enum core_status *st;           /* [pieces] */
    size_t *n_empty;                /* [pieces] */
};

/* One row's heap, kept in the caller's top-k arrays: final scores in v
 * (of the dtype), key indices in ix, a min-heap by `above` (the worst kept at [0]). */
struct kheap {
    void *v;
    int64_t *ix;
    enum attn_dtype dt;
    size_t m, cap;                  /* kept, capacity min(k, L) */
};

static inline bool kh_above(const struct kheap *h, size_t a, size_t b)
{
    return above(get(h->v, h->dt, a), (size_t)h->ix[a], get(h->v, h->dt, b), (size_t)h->ix[b]);
}

static void kh_swap(struct kheap *h, size_t a, size_t b)
{
    double va = get(h->v, h->dt, a);
    int64_t ia = h->ix[a];
    put(h->v, h->dt, a, get(h->v, h->dt, b));
    h->ix[a] = h->ix[b];
    put(h->v, h->dt, b, va);
    h->ix[b] = ia;
}

/* (v, j) into the hole at t, moved down past the kept that rank below it,
 * within the heap's first m entries. */
static void kh_place(struct kheap *h, size_t t, size_t m, double v, size_t j)
{
    for (;;) {
        size_t c = 2 * t + 1;
        if (c >= m)
            break;
        double vc = get(h->v, h->dt, c);
        if (c + 1 < m) {
            double vr = get(h->v, h->dt, c + 1);
            if (above(vc, (size_t)h->ix[c], vr, (size_t)h->ix[c + 1])) {
                c++;
                vc = vr;
            }
        }
        if (!above(v, j, vc, (size_t)h->ix[c]))
            break;
        put(h->v, h->dt, t, vc);
        h->ix[t] = h->ix[c];
        t = c;
    }
    put(h->v, h->dt, t, v);
    h->ix[t] = (int64_t)j;
}

/* Key j with score v: kept when the heap has room or it ranks above the
 * worst kept. */
static void kh_offer(struct kheap *h, double v, size_t j)
{
    if (h->m < h->cap) {
        size_t t = h->m++;
        while (t > 0 && above(get(h->v, h->dt, (t - 1) / 2), (size_t)h->ix[(t - 1) / 2], v, j)) {
            put(h->v, h->dt, t, get(h->v, h->dt, (t - 1) / 2));
            h->ix[t] = h->ix[(t - 1) / 2];
            t = (t - 1) / 2;
        }
        put(h->v, h->dt, t, v);
        h->ix[t] = (int64_t)j;
    } else if (above(v, j, get(h->v, h->dt, 0), (size_t)h->ix[0])) {
        kh_place(h, 0, h->m, v, j);
    }
}

/* Scores a key must exceed to be offered: the worst kept once full. */
static inline double kh_bar(const struct kheap *h)
{
    return h->m < h->cap ? -INFINITY : get(h->v, h->dt, 0);
}

/* A raw base-2 score of the fused kernels as a final score, computed as
 * the gemm loop computes it: × ln 2 to a float, then the softcap
 * c·tanh(s/c) in double, rounded to float. The heaps rank final scores, so
 * equal ones (a saturated softcap makes many) go to the lower index
 * whichever path fed them. */
static float natural(const struct attn_params *p, double v)
{
    float s = (float)(v * M_LN2);
    return p->softcap > 0 ? (float)(p->softcap * tanh((double)s / p->softcap)) : s;
}

/* The raw score below which no key can rank above a kept final score f
 * (natural's inverse, minus a margin for its roundings). */
static float raw_bar(const struct attn_params *p, double f)
{
    double c = p->softcap, v = f;
    if (c > 0)
        v = fabs(v) >= c ? copysign(INFINITY, v) : c * atanh(v / c);
    v *= M_LOG2E;
    return (float)(v - fabs(v) * 1e-5 - 1e-30);
}

/* The sink of rows [glob0, glob0 + count of cnt): global row hh·n + i
 * (hh = e·h + head of the flattened batch) is compact row
 * (e·nh + slot_head[head])·n + i. */
struct xstream {
    const struct xjob *j;
    size_t glob0, nrows;
    size_t *cnt;                    /* [nrows] keys kept per row */
};

/* The pass may run rows outside the range (a tile that straddles it, for
 * the whole pass's bits): their scores are not ours. */
static inline bool xs_mine(const struct xstream *xs, size_t gr)
{
    return gr >= xs->glob0 && gr - xs->glob0 < xs->nrows;
}

static size_t xs_slot(const struct xstream *xs, size_t gr)
{
    size_t n = xs->j->r->shape.n, h = xs->j->r->shape.h, hh = gr / n;
    return ((hh / h) * xs->j->nh + xs->j->slot_head[hh % h]) * n + gr % n;
}

static struct kheap xs_heap(const struct xstream *xs, size_t gr)
{
    const struct attn_request *r = xs->j->r;
    size_t k = xs->j->x->top_k, slot = xs_slot(xs, gr);
    enum attn_dtype dt = r->params.dtype;
    return (struct kheap){(char *)xs->j->xo->top_val + slot * k * attn_dtype_size(dt),
                          xs->j->xo->top_idx + slot * k, dt, xs->cnt[gr - xs->glob0],
                          k < r->shape.L ? k : r->shape.L};
}

/* Lanes of the fused kernels: float scores, lane t of key j at s[t + j·js]
 * (js >= rows rounded up to 8), row t sees [lo[t], hi[t]). Eight lanes are
 * compared with their bars at once; a lane is looked at alone only when
 * one of them passes. */
#define XS_LANES 64
typedef float xs_v8f __attribute__((vector_size(32)));
typedef int32_t xs_v8i __attribute__((vector_size(32)));
static inline bool xs_any8(xs_v8i m)
{
    uint64_t w[4];
    memcpy(w, &m, sizeof w);
    return (w[0] | w[1] | w[2] | w[3]) != 0;
}
static void feed_lanes(struct xstream *xs, size_t row0, size_t rows, size_t k0, size_t kw,
                       const float *s, size_t js, const int32_t *lo, const int32_t *hi)
{
    const struct attn_params *p = &xs->j->r->params;
    float bar[XS_LANES];
    size_t r8 = (rows + 7) / 8 * 8;
    for (size_t t = 0; t < r8; t++) {
        bool sees = t < rows && xs_mine(xs, row0 + t) && (size_t)lo[t] < k0 + kw &&
                    (size_t)hi[t] > k0 && lo[t] < hi[t];
        struct kheap h = sees ? xs_heap(xs, row0 + t) : (struct kheap){0};
        bar[t] = sees ? raw_bar(p, kh_bar(&h)) : INFINITY;
    }
    for (size_t j = 0; j < kw; j++) {
        const float *sj = s + j * js;
        xs_v8i any = {0}, pass[XS_LANES / 8];
        for (size_t c = 0; c < r8; c += 8) {
            xs_v8f a, b;
            if (c + 8 <= rows) {
                memcpy(&a, sj + c, sizeof a);
            } else {                    /* lanes past `rows` may be unwritten */
                float tail[8];
                for (size_t u = 0; u < 8; u++)
                    tail[u] = c + u < rows ? sj[c + u] : -INFINITY;
                memcpy(&a, tail, sizeof a);
            }
            memcpy(&b, bar + c, sizeof b);
            pass[c / 8] = a > b;
            any |= pass[c / 8];
        }
        if (!xs_any8(any))
            continue;
        size_t key = k0 + j;
        for (size_t t = 0; t < rows; t++) {
            if (t % 8 == 0 && !xs_any8(pass[t / 8])) {
                t += 7;                 /* none of these eight lanes passed */
                continue;
            }
            if (!(sj[t] > bar[t]) || key < (size_t)lo[t] || key >= (size_t)hi[t])
                continue;
            struct kheap h = xs_heap(xs, row0 + t);
            kh_offer(&h, natural(p, sj[t]), key);
            xs->cnt[row0 + t - xs->glob0] = h.m;
            bar[t] = raw_bar(p, kh_bar(&h));
        }
    }
}

static void xs_feed(void *ctx, size_t row0, size_t rows, size_t k0, size_t kw, const void *s,
                    size_t ts, size_t js, const int32_t *lo, const int32_t *hi)
{
    struct xstream *xs = ctx;
    enum attn_dtype dt = xs->j->r->params.dtype;
    if (lo && dt == ATTN_F32 && ts == 1 && rows <= XS_LANES && js >= (rows + 7) / 8 * 8) {
        feed_lanes(xs, row0, rows, k0, kw, s, js, lo, hi);
        return;
    }
    for (size_t t = 0; t < rows; t++) {
        if (!xs_mine(xs, row0 + t))
            continue;
        struct kheap h = xs_heap(xs, row0 + t);
        double bar = kh_bar(&h);
        size_t ja = 0, jb = kw;
        if (lo) {                       /* the row's keys within this block */
            ja = (size_t)lo[t] > k0 ? (size_t)lo[t] - k0 : 0;
            jb = (size_t)hi[t] > k0 ? (size_t)hi[t] - k0 : 0;
            jb = jb < kw ? jb : kw;
        }
        for (size_t j = ja; j < jb; j++) {
            double v = get(s, dt, t * ts + j * js);
            if (lo)
                v = natural(&xs->j->r->params, v);
            if (v > bar) {
                kh_offer(&h, v, k0 + j);
                bar = kh_bar(&h);
            }
        }
        xs->cnt[row0 + t - xs->glob0] = h.m;
    }
}

static void xs_reset(void *ctx, size_t row0, size_t rows)
{
    struct xstream *xs = ctx;
    for (size_t t = 0; t < rows; t++)
        if (xs_mine(xs, row0 + t))
            xs->cnt[row0 + t - xs->glob0] = 0;
}

/* Row gr complete: its kept keys sorted best-first, turned into weights
 * exp(s − lse) with lse = M + ln(l + exp(x − M)) from the pass's sum
 * (taken as exp((s − M) − ln(…)), so that at large scores the weights keep
 * the ln(…) that lse, one double near M, rounds away),
 * equal weights ordered by index, the rest padded; lse stored if asked. */
static void xs_done(void *ctx, size_t gr, double l, bool base2)
{
    (void)base2;                        /* fed scores are final scores either way */
    struct xstream *xs = ctx;
    if (!xs_mine(xs, gr))
        return;
    const struct attn_request *r = xs->j->r;
    struct kheap h = xs_heap(xs, gr);
    size_t k = xs->j->x->top_k, slot = xs_slot(xs, gr), m = h.m;
    for (size_t t = m; t-- > 1;) {      /* pop the worst to the back */
        double v = get(h.v, h.dt, t);
        size_t j = (size_t)h.ix[t];
        put(h.v, h.dt, t, get(h.v, h.dt, 0));
        h.ix[t] = h.ix[0];
        kh_place(&h, 0, t, v, j);
    }
    double xl = 0, lse = NAN, off = 0, ln_d = 0;
    bool has_extra = extra_logit(&r->params, gr / r->shape.n % r->shape.h, &xl);
    if (m > 0) {
        double M = get(h.v, h.dt, 0);
        off = has_extra && xl > M ? xl : M;
        if (has_extra && xl > M)        /* ln(1 + u), u small: log1p keeps it */
            ln_d = log1p(l * exp(M - xl));
        else
            ln_d = log(l + (has_extra ? exp(xl - M) : 0));
        lse = off + ln_d;
    } else if (has_extra) {
        lse = xl;
    }
    for (size_t t = 0; t < m; t++)      /* (s − off) − ln_d: lse rounds ln_d away at large s */
        put(h.v, h.dt, t, exp((get(h.v, h.dt, t) - off) - ln_d));
    for (size_t t = 1; t < m; t++)      /* rounding may make neighbours equal */
        for (size_t u = t; u > 0 && kh_above(&h, u, u - 1); u--)
            kh_swap(&h, u, u - 1);
    for (size_t t = m; t < k; t++) {
        h.ix[t] = -1;
        put(h.v, h.dt, t, 0);
    }
    if (xs->j->xo->lse)
        put(xs->j->xo->lse, h.dt, slot, lse);
}

/* A piece by the output-only pass, its sink keeping each row's top k. */
static enum core_status stream_piece(const struct xjob *j, size_t slot0, size_t glob0,
                                     size_t nb, struct attn_ws *ws, size_t *n_empty)
{
    const struct attn_shape *s = &j->r->shape;
    size_t vb = s->d_v * attn_dtype_size(j->r->params.dtype);
    void *own = j->want_out ? NULL : malloc(nb * vb);
    size_t *cnt = calloc(nb, sizeof *cnt);
    enum core_status st = (j->want_out || own) && cnt ? CORE_OK : CORE_ENOMEM;
    if (st == CORE_OK) {
        struct xstream xs = {j, glob0, nb, cnt};
        struct attn_score_sink sink = {&xs, xs_feed, xs_reset, xs_done};
        struct attn_request rq = *j->r;
        rq.outputs = ATTN_OUT_OUTPUT;
        rq.score_sink = &sink;
        struct attn_result res = {
            .output = own ? rebase(own, 0, glob0, vb) : rebase(j->out->output, slot0, glob0, vb),
            .empty = j->out->empty ? rebase(j->out->empty, slot0, glob0, 1) : NULL,
        };
        st = attn_forward_kv_rows(&rq, j->in, j->kv, &res, ws, glob0, glob0 + nb);
        *n_empty = res.n_empty;
    }
    free(cnt);
    free(own);
    return st;
}

/* Every head chosen: the whole output-only pass, cut as attn_forward cuts
 * it, so the output has its bits; rows land in their slots (through
 * buffers of the whole pass when the heads come in another order). */
static enum core_status stream_whole(const struct xjob *j, struct attn_ws *ws, size_t *n_empty)
{
    const struct attn_shape *s = &j->r->shape;
    size_t B = s->B > 1 ? s->B : 1, rows = B * s->h * s->n;
    size_t vb = s->d_v * attn_dtype_size(j->r->params.dtype);
    bool same = true;
    for (size_t a = 0; a < s->h; a++)
        same = same && j->heads[a] == a;
    bool own_o = !j->want_out || !same, own_e = j->out->empty && !same;
    char *o = own_o ? malloc(rows * vb) : j->out->output;
    uint8_t *e = own_e ? malloc(rows) : j->out->empty;
    size_t *cnt = calloc(rows, sizeof *cnt);
    enum core_status st = o && (e || !j->out->empty) && cnt ? CORE_OK : CORE_ENOMEM;
    if (st == CORE_OK) {
        struct xstream xs = {j, 0, rows, cnt};
        struct attn_score_sink sink = {&xs, xs_feed, xs_reset, xs_done};
        struct attn_request rq = *j->r;
        rq.outputs = ATTN_OUT_OUTPUT;
        rq.score_sink = &sink;
        struct attn_result res = {.output = o, .empty = e};
        st = attn_forward_kv_rows(&rq, j->in, j->kv, &res, ws, 0, rows);
        *n_empty = res.n_empty;
    }
    for (size_t b = 0; st == CORE_OK && b < B * s->h && (own_e || (own_o && j->want_out)); b++) {
        size_t c = b * s->n, g = (b / s->h * s->h + j->heads[b % s->h]) * s->n;
        if (own_o && j->want_out)
            memcpy((char *)j->out->output + c * vb, o + g * vb, s->n * vb);
        if (own_e)
            memcpy(j->out->empty + c, e + g, s->n);
    }
    if (own_o)
        free(o);
    if (own_e)
        free(e);
    free(cnt);
    return st;
}

/* ---- pieces ----------------------------------------------------------- */

/* q·k of compact rows [slot0, slot0+nb) of head hh (of the flattened
 * batch: element hh / h, head hh % h) -> xo->qk. */
static enum core_status piece_qk(const struct xjob *j, size_t hh, size_t i0, size_t slot0,
                                 size_t nb)
{
    const struct attn_shape *s = &j->r->shape;
    enum attn_dtype dt = j->r->params.dtype;
    size_t esz = attn_dtype_size(dt), g = hh / (s->h / s->h_kv);
    void *qb = malloc(nb * s->d_k * esz);
    if (!qb)
        return CORE_ENOMEM;
    enum core_status st = attn_prepare_q(j->r, j->in, hh * s->n + i0, nb, qb);
    if (st != CORE_OK) {
        free(qb);
        return st;
    }
    char *dst = (char *)j->xo->qk + slot0 * s->L * esz;
    if (dt == ATTN_F32)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)s->L, (int)s->d_k,
                    1.0f, qb, (int)s->d_k, j->kv->k[g], (int)s->d_k, 0.0f, (float *)(void *)dst,
                    (int)s->L);
    else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)s->L, (int)s->d_k,
                    1.0, qb, (int)s->d_k, j->kv->k[g], (int)s->d_k, 0.0, (double *)(void *)dst,
                    (int)s->L);
    free(qb);
    return CORE_OK;
}

static enum core_status run_piece(const struct xjob *j, size_t p, struct attn_ws *ws,
                                  size_t *n_empty)
{
    const struct attn_request *r = j->r;
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype);
    /* piece p: batch element e, chosen head a, rows from i0 */
    size_t e = p / (j->nh * j->per_head), a = p / j->per_head % j->nh;
    size_t hd = j->heads[a], hh = e * s->h + hd;
    size_t i0 = (p % j->per_head) * j->rb;
    size_t nb = s->n - i0 < j->rb ? s->n - i0 : j->rb;
    size_t slot0 = (e * j->nh + a) * s->n + i0, glob0 = hh * s->n + i0;
    size_t lb = s->L * esz, vb = s->d_v * esz;
    enum core_status st = CORE_OK;

    if ((j->x->want & ATTN_X_QK) && !j->qk_done)
        st = piece_qk(j, hh, i0, slot0, nb);
    if (st != CORE_OK || !j->pass)
        return st;
    if (j->stream)
        return stream_piece(j, slot0, glob0, nb, ws, n_empty);

    /* scores / weights the caller does not keep: this block's own rows */
    bool own_s = (j->need_sw || j->scratch) && !j->out->scores;
    bool own_w = j->need_sw && !j->out->weights;
    char *blk = NULL;
    size_t kk = j->x->top_k < s->L ? j->x->top_k : s->L;
    size_t hp_bytes = (j->x->want & ATTN_X_TOPK) ? kk * sizeof(size_t) : 0;
    size_t own = (own_s + own_w) * nb * lb;
    /* the heap after the rows, at a size_t boundary: float32 rows of an
     * odd length end at 4 bytes past one */
    size_t hp_at = (own + sizeof(size_t) - 1) / sizeof(size_t) * sizeof(size_t);
    if (own || hp_bytes) {
        blk = malloc(hp_at + hp_bytes);
        if (!blk)
            return CORE_ENOMEM;
    }
    char *sb = own_s ? blk : (char *)j->out->scores + slot0 * lb;
    char *wb = own_w ? blk + (own_s ? nb * lb : 0) : (char *)j->out->weights + slot0 * lb;
    size_t *hp = hp_bytes ? (size_t *)(void *)(blk + hp_at) : NULL;

    struct attn_result res = {
        .scores = (r->outputs & ATTN_OUT_SCORES) ? rebase(sb, 0, glob0, lb) : NULL,
        .weights = (r->outputs & ATTN_OUT_WEIGHTS) ? rebase(wb, 0, glob0, lb) : NULL,
        .output = j->out->output ? rebase(j->out->output, slot0, glob0, vb) : NULL,
        .empty = j->out->empty ? rebase(j->out->empty, slot0, glob0, 1) : NULL,
    };
    st = attn_forward_kv_rows(r, j->in, j->kv, &res, ws, glob0, glob0 + nb);
    *n_empty = res.n_empty;
    if (st == CORE_OK && j->need_sw)
        for (size_t t = 0; t < nb; t++)
            row_extras(r, j->x, j->xo, hd, slot0 + t, sb + t * lb, wb + t * lb, hp);
    free(blk);
    return st;
}

static void piece_fn(void *arg, size_t p, struct attn_ws *ws)
{
    struct xjob *j = arg;
    j->n_empty[p] = 0;
    j->st[p] = run_piece(j, p, ws, &j->n_empty[p]);
}

/* Every piece of j (none when there is nothing for them to do); the empty
 * rows of its pass counted into *n_empty. */
static enum core_status run_pieces(const struct xjob *j, size_t pieces, struct attn_ws *ws,
                                   size_t *n_empty)
{
    bool qk = (j->x->want & ATTN_X_QK) && !j->qk_done;
    *n_empty = 0;
    if (!j->pass && !qk)
        return CORE_OK;
    if (!attn_pool_run(attn_ws_pool(ws), piece_fn, (void *)j, pieces, ws))
        return CORE_ESTOPPED;
    for (size_t p = 0; j->pass && p < pieces; p++)
        *n_empty += j->n_empty[p];
    for (size_t p = 0; p < pieces; p++)
        if (j->st[p] != CORE_OK)
            return j->st[p];
    return CORE_OK;
}

/* Whether every q·k of the pass's compact rows is finite. */
static bool qk_finite(const struct xjob *j)
{
    const struct attn_shape *s = &j->r->shape;
    size_t B = s->B > 1 ? s->B : 1, m = B * j->nh * s->n * s->L;
    for (size_t i = 0; i < m; i++)
        if (!isfinite(get(j->xo->qk, j->r->params.dtype, i)))
            return false;
    return true;
}

/* ---- entry ------------------------------------------------------------ */

static bool heads_ok(const struct attn_extras *x, size_t h)
{
    if (!x->heads)
        return true;
    if (x->nh == 0)
        return false;
    for (size_t a = 0; a < x->nh; a++) {
        if (x->heads[a] >= h)
            return false;
        for (size_t b = 0; b < a; b++)
            if (x->heads[b] == x->heads[a])
                return false;
    }
    return true;
}

static bool buffers_ok(const struct attn_request *r, const struct attn_extras *x,
                       const struct attn_result *out, const struct attn_extras_out *xo)
{
    unsigned w = x->want;
    return out && xo && (!(r->outputs & ATTN_OUT_SCORES) || out->scores) &&
           (!(r->outputs & ATTN_OUT_WEIGHTS) || out->weights) &&
           (!(r->outputs & ATTN_OUT_OUTPUT) || out->output) &&
           (!(w & ATTN_X_QK) || xo->qk) && (!(w & ATTN_X_LSE) || xo->lse) &&
           (!(w & ATTN_X_STATS) ||
            (xo->entropy && xo->max_weight && xo->mass && xo->argmax)) &&
           (!(w & ATTN_X_TOPK) || (xo->top_idx && xo->top_val && x->top_k >= 1));
}

enum core_status attn_forward_extras(const struct attn_request *r,
                                     const struct attn_inputs *in,
                                     const struct attn_kv_view *kv,
                                     const struct attn_extras *x,
                                     struct attn_result *out,
                                     struct attn_extras_out *xo,
                                     struct attn_ws *ws)
{
    if (!r || !x || !in || (kv && kv->page_rows))     /* views in one block only */
        return CORE_EINVAL;
    const struct attn_shape *s = &r->shape;
    /* top-k (and lse) without statistics, scores or weights: fed by the
     * key-blocked output-only pass, no row of scores kept */
    bool stream = (x->want & ATTN_X_TOPK) && !(x->want & ATTN_X_STATS) &&
                  !(r->outputs & (ATTN_OUT_SCORES | ATTN_OUT_WEIGHTS)) && !r->score_sink &&
                  attn_output_blocked(r);
    bool need_sw = !stream && (x->want & (ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK)) != 0;
    struct attn_request rr = *r;
    rr.outputs |= need_sw ? ATTN_OUT_SCORES | ATTN_OUT_WEIGHTS : 0;
    rr.outputs |= stream ? ATTN_OUT_OUTPUT : 0;
    /* q·k alone still runs a scores pass, into blocks of its own: which
     * rows have no allowed key (meta.empty_rows, empty_rows "error") is
     * known only from the pass */
    bool scratch = rr.outputs == 0;
    if (scratch)
        rr.outputs = ATTN_OUT_SCORES;
    enum core_status st = attn_check(&rr);
    if (st == CORE_OK && !kv)
        st = attn_check_inputs(&rr, in);
    if (st != CORE_OK)
        return st;
    if (!in->q || !heads_ok(x, s->h) || !buffers_ok(r, x, out, xo))
        return CORE_EINVAL;

    size_t nh = x->heads ? x->nh : s->h, esz = attn_dtype_size(r->params.dtype);
    size_t *all = NULL;
    const size_t *heads = x->heads;
    if (!heads) {
        all = malloc(nh * sizeof *all);
        if (!all)
            return CORE_ENOMEM;
        for (size_t a = 0; a < nh; a++)
            all[a] = a;
        heads = all;
    }
    size_t rb = s->n;
    bool whole = stream && nh == s->h;
    size_t *slot_head = stream ? malloc(s->h * sizeof *slot_head) : NULL;
    for (size_t a = 0; slot_head && a < nh; a++)
        slot_head[heads[a]] = a;
    if (stream)
        rb = s->n < STREAM_ROWS ? s->n : STREAM_ROWS;
    if (need_sw || scratch) {
        size_t fit = ATTN_EXTRAS_BLOCK_BYTES / (s->L * esz);
        rb = fit < 1 ? 1 : fit < s->n ? fit : s->n;
    }
    size_t B = s->B > 1 ? s->B : 1, hkv = B * s->h_kv;     /* kv heads of the batch */
    size_t per_head = (s->n + rb - 1) / rb, pieces = B * nh * per_head;
    void **ptr = malloc(2 * hkv * sizeof(void *));
    enum core_status *pst = malloc(pieces * sizeof *pst);
    size_t *pne = malloc(pieces * sizeof *pne);
    void *store = NULL;
    struct attn_kv_view own_kv;
    st = ptr && pst && pne && (slot_head || !stream) ? CORE_OK : CORE_ENOMEM;
    if (st == CORE_OK && !kv) {
        st = attn_prepare_view(&rr, in, ptr, ptr + hkv, &store);
        own_kv = (struct attn_kv_view){.k = (const void *const *)ptr,
                                       .v = (const void *const *)(ptr + hkv)};
        kv = &own_kv;
    }
    if (st == CORE_OK) {
        struct xjob j = {&rr,   in,     kv,
                         x,     out,    xo,
                         heads, nh,     rb,     per_head,
                         !whole && !scratch, need_sw, scratch, false, stream, slot_head,
                         (r->outputs & ATTN_OUT_OUTPUT) != 0, pst, pne};
        /* pieces: q·k, and the pass unless it runs whole below; q·k alone
         * first, and its pass only when every product is finite (one that
         * overflowed is the caller's to report at its place, before the
         * scores it makes) */
        st = run_pieces(&j, pieces, ws, &out->n_empty);
        if (st == CORE_OK && scratch && qk_finite(&j)) {
            j.pass = true;
            j.qk_done = true;
            st = run_pieces(&j, pieces, ws, &out->n_empty);
        }
        if (st == CORE_OK && whole)
            st = stream_whole(&j, ws, &out->n_empty);
    }
    free(slot_head);
    free(store);
    free(pne);
    free(pst);
    free(ptr);
    free(all);
    return st;
}
