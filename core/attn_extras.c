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
 *               row whose weights all underflowed sums its exponentials
 *   mass        1 − exp(x − lse) for the extra logit x (0 softmax1, the sink),
 *               1 for standard
 *   entropy     Σ p (lse − s) over allowed keys
 *   top-k       a min-heap of k (value, index) pairs, each key compared once
 *               with the heap's smallest: O(L) for most rows
 * q·k: the piece's queries prepared as the pass prepares them
 * (attn_prepare_q) times the prepared keys, one gemm with factor 1.
 * The compact arrays are handed to attn_forward_kv_rows, which indexes rows
 * globally (head·n + i), with their base shifted by the difference between
 * the slot's and the head's first row (rebase below).
 */
#include "attn_extras.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
        return true;
    }
    return false;
}

/* (va, ia) ranks above (vb, ib): larger value, ties to the lower index. */
static inline bool above(double va, size_t ia, double vb, size_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Min-heap (by `above`) of indices into w: the worst of the kept at [0]. */
static void heap_down(size_t *hp, size_t m, size_t t, const void *w, enum attn_dtype dt)
{
    for (;;) {
        size_t l = 2 * t + 1, r = l + 1, worst = t;
        if (l < m && above(get(w, dt, hp[worst]), hp[worst], get(w, dt, hp[l]), hp[l]))
            worst = l;
        if (r < m && above(get(w, dt, hp[worst]), hp[worst], get(w, dt, hp[r]), hp[r]))
            worst = r;
        if (worst == t)
            return;
        size_t tmp = hp[t];
        hp[t] = hp[worst];
        hp[worst] = tmp;
        t = worst;
    }
}

/* Row of final scores s [L] (masked = -inf) and weights w [L] -> slot row
 * `row` of the extras; hp: scratch of min(k, L) indices. */
static void row_extras(const struct attn_request *r, const struct attn_extras *x,
                       struct attn_extras_out *xo, size_t hh, size_t row,
                       const void *s, const void *w, size_t *hp)
{
    enum attn_dtype dt = r->params.dtype;
    size_t L = r->shape.L, k = x->top_k, kk = k < L ? k : L, m = 0;
    bool topk = (x->want & ATTN_X_TOPK) != 0;
    double best = 0, xl = 0;
    size_t am = SIZE_MAX;
    bool has_extra = extra_logit(&r->params, hh, &xl);

    for (size_t j = 0; j < L; j++) {
        double sj = get(s, dt, j);
        if (sj == -INFINITY)
            continue;
        double wj = get(w, dt, j);
        if (am == SIZE_MAX || wj > best) {
            best = wj;
            am = j;
        }
        if (!topk)
            continue;
        if (m < kk) {                   /* fill, then heapify once */
            hp[m++] = j;
            if (m == kk)
                for (size_t t = kk / 2; t-- > 0;)
                    heap_down(hp, m, t, w, dt);
        } else if (above(wj, j, get(w, dt, hp[0]), hp[0])) {
            hp[0] = j;
            heap_down(hp, m, 0, w, dt);
        }
    }

    double lse = NAN, mass = 0, ent = 0;
    if (am != SIZE_MAX) {
        double sa = get(s, dt, am);
        if (best > 0) {
            lse = sa - log(best);
        } else {                        /* every weight underflowed: sum them */
            double sh = has_extra && xl > sa ? xl : sa, sum = 0;
            for (size_t j = 0; j < L; j++) {
                double sj = get(s, dt, j);
                if (sj != -INFINITY)
                    sum += exp(sj - sh);
            }
            lse = sh + log(sum + (has_extra ? exp(xl - sh) : 0));
        }
        mass = has_extra ? -expm1(xl - lse) : 1.0;
        for (size_t j = 0; (x->want & ATTN_X_STATS) && j < L; j++) {
            double sj = get(s, dt, j);
            if (sj != -INFINITY)
                ent += get(w, dt, j) * (lse - sj);
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
            heap_down(hp, m, t, w, dt);
    /* pop the worst to the back: the array ends best-first */
    int64_t *ti = xo->top_idx + row * k;
    for (size_t t = m; t-- > 0;) {
        size_t j = hp[0];
        ti[t] = (int64_t)j;
        put(xo->top_val, dt, row * k + t, get(w, dt, j));
        hp[0] = hp[t];
        heap_down(hp, t, 0, w, dt);
    }
    for (size_t t = m; t < k; t++) {
        ti[t] = -1;
        put(xo->top_val, dt, row * k + t, 0);
    }
}

/* ---- pieces ----------------------------------------------------------- */

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
    bool pass;                      /* run the forward pass (else q·k only) */
    bool need_sw;                   /* extras read scores and weights */
    enum core_status *st;           /* [pieces] */
    size_t *n_empty;                /* [pieces] */
};

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

    if (j->x->want & ATTN_X_QK)
        st = piece_qk(j, hh, i0, slot0, nb);
    if (st != CORE_OK || !j->pass)
        return st;

    /* scores / weights the caller does not keep: this block's own rows */
    bool own_s = j->need_sw && !j->out->scores, own_w = j->need_sw && !j->out->weights;
    char *blk = NULL;
    size_t kk = j->x->top_k < s->L ? j->x->top_k : s->L;
    size_t hp_bytes = (j->x->want & ATTN_X_TOPK) ? kk * sizeof(size_t) : 0;
    size_t own = (own_s + own_w) * nb * lb;
    if (own || hp_bytes) {
        blk = malloc(own + hp_bytes);
        if (!blk)
            return CORE_ENOMEM;
    }
    char *sb = own_s ? blk : (char *)j->out->scores + slot0 * lb;
    char *wb = own_w ? blk + (own_s ? nb * lb : 0) : (char *)j->out->weights + slot0 * lb;
    size_t *hp = hp_bytes ? (size_t *)(void *)(blk + own) : NULL;

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
    if (!r || !x || !in)
        return CORE_EINVAL;
    const struct attn_shape *s = &r->shape;
    bool need_sw = (x->want & (ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK)) != 0;
    struct attn_request rr = *r;
    rr.outputs |= need_sw ? ATTN_OUT_SCORES | ATTN_OUT_WEIGHTS : 0;
    bool pass = rr.outputs != 0;
    if (!pass)
        rr.outputs = ATTN_OUT_SCORES;   /* q·k alone: validate as a pass */
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
    if (need_sw) {
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
    st = ptr && pst && pne ? CORE_OK : CORE_ENOMEM;
    if (st == CORE_OK && !kv) {
        st = attn_prepare_view(&rr, in, ptr, ptr + hkv, &store);
        own_kv = (struct attn_kv_view){(const void *const *)ptr,
                                       (const void *const *)(ptr + hkv)};
        kv = &own_kv;
    }
    if (st == CORE_OK) {
        if (!pass)
            rr.outputs = 0;
        struct xjob j = {&rr, in, kv, x, out, xo, heads, nh, rb, per_head, pass, need_sw,
                         pst, pne};
        bool ran = attn_pool_run(attn_ws_pool(ws), piece_fn, &j, pieces, ws);
        out->n_empty = 0;
        if (!ran)
            st = CORE_ESTOPPED;
        for (size_t p = 0; ran && p < pieces; p++) {
            out->n_empty += pne[p];
            if (st == CORE_OK && pst[p] != CORE_OK)
                st = pst[p];
        }
    }
    free(store);
    free(pne);
    free(pst);
    free(ptr);
    free(all);
    return st;
}
