/*
 * core/verify.c — the checks behind /v1/verify (see verify.h).
 *
 * Layout: a context (struct vx) holds the inputs converted to double, an
 * allocation list freed at the end, and eight shared forward passes (no bias,
 * Q bias, K bias, both; standard and softmax1) that feed the table and most
 * checks. verify_pass() is the only way attention is computed here: it converts
 * the arrays to the request's dtype, calls the core's forward pass (or the
 * injected one), and converts the results back to double. Each check is one
 * static function that fills a struct verify_check; run_checks() judges it.
 *
 * Reference arithmetic done here (dot products, row constants, expected
 * sums) is plain double loops over a few numbers per element: these are the
 * independent sides of the comparisons, so they must not call the core.
 */
#include "verify.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "verify_impl.h"

/* ---- allocation ------------------------------------------------------ */

/* count*size zeroed bytes owned by c (freed by vx_free_all); NULL with
 * c->err set on overflow or when memory is short. */
void *verify_bytes(struct vx *c, size_t count, size_t size)
{
    size_t bytes;
    if (!core_mul(count ? count : 1, size, &bytes)) {
        c->err = CORE_ELIMIT;
        return NULL;
    }
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void **a = realloc(c->allocs, cap * sizeof *a);
        if (!a) {
            c->err = CORE_ENOMEM;
            return NULL;
        }
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = calloc(1, bytes);
    if (!p) {
        c->err = CORE_ENOMEM;
        return NULL;
    }
    c->allocs[c->n_allocs++] = p;
    return p;
}

double *verify_dbl(struct vx *c, size_t a, size_t b)
{
    size_t count;
    if (!core_mul(a, b, &count)) {
        c->err = CORE_ELIMIT;
        return NULL;
    }
    return verify_bytes(c, count, sizeof(double));
}

static void vx_free_all(struct vx *c)
{
    for (size_t i = 0; i < c->n_allocs; i++)
        free(c->allocs[i]);
    free(c->allocs);
    c->allocs = NULL;
    c->n_allocs = c->cap_allocs = 0;
}

/* ---- dtype conversion -------------------------------------------------- */

/* src [count] of dtype dt -> new double array. */
static double *vx_load(struct vx *c, const void *src, size_t count)
{
    double *d = verify_dbl(c, count, 1);
    if (!d)
        return NULL;
    if (c->dt == ATTN_F64) {
        memcpy(d, src, count * sizeof(double));
    } else {
        const float *f = src;
        for (size_t i = 0; i < count; i++)
            d[i] = f[i];
    }
    return d;
}

/* Round derived inputs to the dtype in place, so the reference arithmetic
 * sees exactly the numbers the core receives. */
static void vx_round(const struct vx *c, double *x, size_t count)
{
    if (c->dt == ATTN_F32)
        for (size_t i = 0; i < count; i++)
            x[i] = (float)x[i];
}

/* double [count] -> array of the dtype (src itself for float64); *ok false
 * when an allocation failed. NULL src gives NULL. */
static const void *vx_cast(struct vx *c, const double *src, size_t count,
                           bool *ok)
{
    if (!src)
        return NULL;
    if (c->dt == ATTN_F64)
        return src;
    float *f = verify_bytes(c, count, sizeof(float));
    if (!f) {
        *ok = false;
        return NULL;
    }
    for (size_t i = 0; i < count; i++)
        f[i] = (float)src[i];
    return f;
}

/* ---- the forward pass ------------------------------------------------- */

/* The shared inputs with the chosen biases (value bias off). */
struct vrun verify_base_run(const struct vx *c, enum attn_softmax sm, int cond)
{
    struct vrun r;
    memset(&r, 0, sizeof r);
    r.q = c->q;
    r.k = c->k;
    r.v = c->v;
    r.n = c->n;
    r.L = c->L;
    r.bq = (cond & C_Q) ? c->bq : NULL;
    r.bk = (cond & C_K) ? c->bk : NULL;
    r.sm = sm;
    r.sink = c->in->sink_logit;
    r.rope_base = 10000.0;
    r.rope_pairs = ATTN_ROPE_INTERLEAVED;
    return r;
}

static void vx_request(const struct vx *c, const struct vrun *r,
                       struct attn_request *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->shape.h = r->h ? r->h : 1;
    rq->shape.h_kv = 1;
    rq->shape.n = r->n;
    rq->shape.L = r->L;
    rq->shape.d_k = c->dk;
    rq->shape.d_v = c->dv;
    rq->params.dtype = c->dt;
    rq->params.scale = c->scale;
    rq->params.softmax = r->sm;
    rq->params.sink_logit = r->sm == ATTN_SOFTMAX_SINK ? r->sink : 0.0;
    rq->params.rope = r->rope;
    rq->params.rope_base = r->rope ? r->rope_base : 10000.0;
    rq->params.rope_pairs = r->rope_pairs;
    if (r->rope && c->in->rope) {   /* the request's partial rotary and scaling */
        rq->params.rope_dims = c->in->rope_dims;
        rq->params.rope_scaling = c->in->rope_scaling;
    }
    rq->pos_q = r->pq;
    rq->pos_k = r->pk;
    if (r->positions && r->n == c->n && r->L == c->L) {
        rq->pos_q = c->in->pos_q;
        rq->pos_k = c->in->pos_k;
    }
    rq->pos_q_batches = rq->pos_k_batches = 1;
    rq->causal = r->causal;
    rq->empty_rows = ATTN_EMPTY_ZERO;
    rq->attn_bias_heads = 1;
    rq->mask_heads = 1;
    rq->mask = r->mask;
    rq->outputs = ATTN_OUT_ALL;
    if (r->tweak)
        r->tweak(rq, r->tweak_arg);
}

/* Converts the inputs of r to the dtype into in (and rq's attn_bias). */
static enum core_status vx_inputs(struct vx *c, const struct vrun *r,
                                  struct attn_request *rq,
                                  struct attn_inputs *in)
{
    bool ok = true;
    size_t nq, nk, nv, nb, hn;
    if (!core_mul(r->h ? r->h : 1, r->n, &hn) || !core_mul(hn, c->dk, &nq) ||
        !core_mul(r->L, c->dk, &nk) ||
        !core_mul(r->L, c->dv, &nv) || !core_mul(r->n, r->L, &nb))
        return CORE_ELIMIT;
    memset(in, 0, sizeof *in);
    in->q = vx_cast(c, r->q, nq, &ok);
    in->k = vx_cast(c, r->k, nk, &ok);
    in->v = vx_cast(c, r->v, nv, &ok);
    in->bias_q = vx_cast(c, r->bq, c->dk, &ok);
    in->bias_k = vx_cast(c, r->bk, c->dk, &ok);
    in->bias_v = vx_cast(c, r->bv, c->dv, &ok);
    in->bias_q_heads = in->bias_k_heads = in->bias_v_heads = 1;
    rq->attn_bias = vx_cast(c, r->attn_bias, nb, &ok);
    return ok ? CORE_OK : c->err;
}

/* Copy core results of the dtype into double arrays. */
static void vx_unload(const struct vx *c, const void *src, double *dst,
                      size_t count)
{
    if (c->dt == ATTN_F64) {
        if (src != dst)
            memcpy(dst, src, count * sizeof(double));
        return;
    }
    const float *f = src;
    for (size_t i = 0; i < count; i++)
        dst[i] = f[i];
}

enum core_status verify_pass(struct vx *c, const struct vrun *r, struct vpass *out)
{
    struct attn_request rq;
    struct attn_inputs in;
    vx_request(c, r, &rq);
    TRY(vx_inputs(c, r, &rq, &in));
    TRY(attn_check(&rq));
    size_t hn = (r->h ? r->h : 1) * r->n;       /* checked by attn_check */
    size_t ns = hn * r->L, no = hn * c->dv;
    NEED(out->s = verify_dbl(c, ns, 1));
    NEED(out->w = verify_dbl(c, ns, 1));
    NEED(out->o = verify_dbl(c, no, 1));
    struct attn_result res;
    memset(&res, 0, sizeof res);
    size_t es = attn_dtype_size(c->dt);
    if (c->dt == ATTN_F64) {
        res.scores = out->s;
        res.weights = out->w;
        res.output = out->o;
    } else {
        NEED(res.scores = verify_bytes(c, ns, es));
        NEED(res.weights = verify_bytes(c, ns, es));
        NEED(res.output = verify_bytes(c, no, es));
    }
    TRY(c->fwd(&rq, &in, &res, c->ws));
    vx_unload(c, res.scores, out->s, ns);
    vx_unload(c, res.weights, out->w, ns);
    vx_unload(c, res.output, out->o, no);
    return CORE_OK;
}

/* ---- small arithmetic ------------------------------------------------- */

static double dot(const double *a, const double *b, size_t d)
{
    double s = 0.0;
    for (size_t i = 0; i < d; i++)
        s += a[i] * b[i];
    return s;
}

/* max |a - b| over count numbers (NaN propagates as a failure). */
double verify_maxdiff(const double *a, const double *b, size_t count)
{
    double m = 0.0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(d))
            return d;
        if (d > m)
            m = d;
    }
    return m;
}

static double max2(double a, double b)
{
    return (a >= b || isnan(a)) ? a : b;
}

/* scale * q_i . k_j for q [n][d_k], k [L][d_k] -> out [n][L]. */
static void ref_scores(const struct vx *c, const double *q, size_t n,
                       const double *k, size_t L, double *out)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < L; j++)
            out[i * L + j] = c->scale * dot(q + i * c->dk, k + j * c->dk, c->dk);
}

/* Index of the largest of x[0..L). */
static size_t argmax(const double *x, size_t L)
{
    size_t r = 0;
    for (size_t j = 1; j < L; j++)
        if (x[j] > x[r])
            r = j;
    return r;
}

/* a - b, elementwise, into a new array. */
static double *vx_sub(struct vx *c, const double *a, const double *b,
                      size_t count)
{
    double *d = verify_dbl(c, count, 1);
    if (d)
        for (size_t i = 0; i < count; i++)
            d[i] = a[i] - b[i];
    return d;
}

/* Row sums of w [n][L] into a new array [n]. */
static double *vx_rowsums(struct vx *c, const double *w, size_t n, size_t L)
{
    double *s = verify_dbl(c, n, 1);
    if (s)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < L; j++)
                s[i] += w[i * L + j];
    return s;
}

/* ---- check records ---------------------------------------------------- */

static enum core_status ck_data(struct verify_check *ck, const char *name,
                                int rank, size_t rows, size_t cols,
                                const double *src)
{
    size_t count, bytes;
    if (ck->n_data >= VERIFY_MAX_DATA)
        return CORE_EINVAL;
    if (!core_mul(rows, cols, &count) ||
        !core_mul(count ? count : 1, sizeof(double), &bytes))
        return CORE_ELIMIT;
    double *d = malloc(bytes);
    if (!d)
        return CORE_ENOMEM;
    if (count)
        memcpy(d, src, count * sizeof(double));
    struct verify_array *a = &ck->data[ck->n_data++];
    a->name = name;
    a->rank = rank;
    a->rows = rows;
    a->cols = cols;
    a->data = d;
    return CORE_OK;
}

enum core_status verify_ck_mat(struct verify_check *ck, const char *name,
                               size_t rows, size_t cols, const double *src)
{
    return ck_data(ck, name, 2, rows, cols, src);
}

enum core_status verify_ck_vec(struct verify_check *ck, const char *name,
                               size_t cols, const double *src)
{
    return ck_data(ck, name, 1, 1, cols, src);
}

enum core_status verify_ck_num(struct verify_check *ck, const char *name,
                               double x)
{
    return ck_data(ck, name, 0, 1, 1, &x);
}

void verify_ck_note(struct verify_check *ck, const char *fmt, ...)
{
    va_list ap;
    char *t = NULL;
    va_start(ap, fmt);
    if (vasprintf(&t, fmt, ap) < 0)
        t = NULL;                   /* out of memory: no note rather than a cut one */
    va_end(ap);
    free(ck->note);
    ck->note = t;
}

/* Mark the check not applicable, with the reason. */
enum core_status verify_ck_na(struct verify_check *ck, const char *why)
{
    ck->applicable = false;
    verify_ck_note(ck, "%s", why);
    return CORE_OK;
}

/* ---- checks 1-6: biases under standard softmax ------------------------- */

static enum core_status check_base_scores(struct vx *c, struct verify_check *ck)
{
    double *ref;
    NEED(ref = verify_dbl(c, c->n, c->L));
    ref_scores(c, c->q, c->n, c->k, c->L, ref);
    ck->max_abs_diff = verify_maxdiff(c->p[0][C_NONE].s, ref, c->n * c->L);
    TRY(verify_ck_mat(ck, "scores_core", c->n, c->L, c->p[0][C_NONE].s));
    TRY(verify_ck_mat(ck, "scores_reference", c->n, c->L, ref));
    return verify_ck_num(ck, "scale", c->scale);
}

static enum core_status check_k_row_constant(struct vx *c,
                                             struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    size_t n = c->n, L = c->L;
    const struct vpass *a = &c->p[0][C_NONE], *b = &c->p[0][C_K];
    double *shift, *cst;
    NEED(shift = vx_sub(c, b->s, a->s, n * L));
    NEED(cst = verify_dbl(c, n, 1));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        cst[i] = c->scale * dot(c->q + i * c->dk, c->bk, c->dk);
        for (size_t j = 0; j < L; j++)
            m = max2(m, fabs(shift[i * L + j] - cst[i]));
    }
    ck->max_abs_diff = m;
    TRY(verify_ck_mat(ck, "scores_without_k_bias", n, L, a->s));
    TRY(verify_ck_mat(ck, "scores_with_k_bias", n, L, b->s));
    TRY(verify_ck_mat(ck, "score_shift", n, L, shift));
    return verify_ck_vec(ck, "row_constant", n, cst);
}

static enum core_status check_k_weights(struct vx *c, struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    const struct vpass *a = &c->p[0][C_NONE], *b = &c->p[0][C_K];
    ck->max_abs_diff = max2(verify_maxdiff(a->w, b->w, c->n * c->L),
                            verify_maxdiff(a->o, b->o, c->n * c->dv));
    TRY(verify_ck_mat(ck, "weights_without_k_bias", c->n, c->L, a->w));
    TRY(verify_ck_mat(ck, "weights_with_k_bias", c->n, c->L, b->w));
    TRY(verify_ck_mat(ck, "output_without_k_bias", c->n, c->dv, a->o));
    return verify_ck_mat(ck, "output_with_k_bias", c->n, c->dv, b->o);
}

static enum core_status check_q_relative(struct vx *c, struct verify_check *ck)
{
    if (!c->bq)
        return verify_ck_na(ck, "no bias.q was given");
    size_t n = c->n, L = c->L, dk = c->dk;
    const struct vpass *a = &c->p[0][C_NONE], *b = &c->p[0][C_Q];
    double *chg, *exp_chg;
    NEED(chg = verify_dbl(c, n, L));
    NEED(exp_chg = verify_dbl(c, L, 1));
    for (size_t j = 0; j < L; j++) {
        double s = 0.0;  /* scale * bQ . (k_j - k_1) */
        for (size_t d = 0; d < dk; d++)
            s += c->bq[d] * (c->k[j * dk + d] - c->k[d]);
        exp_chg[j] = c->scale * s;
    }
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < L; j++) {
            size_t x = i * L + j, x0 = i * L;
            chg[x] = (b->s[x] - b->s[x0]) - (a->s[x] - a->s[x0]);
            m = max2(m, fabs(chg[x] - exp_chg[j]));
        }
    ck->max_abs_diff = m;
    verify_ck_note(ck, "Score differences are taken against the first key.");
    TRY(verify_ck_mat(ck, "scores_without_q_bias", n, L, a->s));
    TRY(verify_ck_mat(ck, "scores_with_q_bias", n, L, b->s));
    TRY(verify_ck_mat(ck, "difference_change", n, L, chg));
    TRY(verify_ck_vec(ck, "expected_difference_change", L, exp_chg));
    TRY(verify_ck_mat(ck, "weights_without_q_bias", n, L, a->w));
    TRY(verify_ck_mat(ck, "weights_with_q_bias", n, L, b->w));
    return verify_ck_num(ck, "weight_change", verify_maxdiff(a->w, b->w, n * L));
}

/* The four terms of scale*(q_i+bQ).(k_j+bK) for the rows of q [n][d_k]. */
struct terms {
    double *qk, *bqk;               /* [n][L] */
    double *qbk;                    /* [n] */
    double bqbk;
};

static enum core_status vx_terms(struct vx *c, const double *q, size_t n,
                                 struct terms *t)
{
    const double *bq = c->bq ? c->bq : c->zk, *bk = c->bk ? c->bk : c->zk;
    size_t L = c->L, dk = c->dk;
    NEED(t->qk = verify_dbl(c, n, L));
    NEED(t->bqk = verify_dbl(c, n, L));
    NEED(t->qbk = verify_dbl(c, n, 1));
    ref_scores(c, q, n, c->k, L, t->qk);
    ref_scores(c, bq, 1, c->k, L, t->bqk);
    for (size_t i = 1; i < n; i++)
        memcpy(t->bqk + i * L, t->bqk, L * sizeof(double));
    for (size_t i = 0; i < n; i++)
        t->qbk[i] = c->scale * dot(q + i * dk, bk, dk);
    t->bqbk = c->scale * dot(bq, bk, dk);
    return CORE_OK;
}

/* max over row i of |both - sum of terms| and |(both - qbias) - row const|. */
static double terms_row_diff(const struct vx *c, const struct terms *t,
                             const double *both, const double *qonly,
                             size_t i, double *sum_out)
{
    double m = 0.0;
    for (size_t j = 0; j < c->L; j++) {
        size_t x = i * c->L + j;
        double sum = t->qk[x] + t->bqk[x] + t->qbk[i] + t->bqbk;
        if (sum_out)
            sum_out[x] = sum;
        m = max2(m, fabs(both[x] - sum));
        m = max2(m, fabs((both[x] - qonly[x]) - (t->qbk[i] + t->bqbk)));
    }
    return m;
}

static enum core_status check_four_terms(struct vx *c, struct verify_check *ck)
{
    if (!c->bq && !c->bk)
        return verify_ck_na(ck, "neither bias.q nor bias.k was given");
    struct terms t;
    double *sum;
    size_t n = c->n, L = c->L;
    TRY(vx_terms(c, c->q, n, &t));
    NEED(sum = verify_dbl(c, n, L));
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = max2(m, terms_row_diff(c, &t, c->p[0][C_BOTH].s, c->p[0][C_Q].s,
                                   i, sum));
    ck->max_abs_diff = m;
    if (!c->bq || !c->bk)
        verify_ck_note(ck, "The absent bias counts as a zero vector.");
    TRY(verify_ck_mat(ck, "term_q_k", n, L, t.qk));
    TRY(verify_ck_mat(ck, "term_bq_k", n, L, t.bqk));
    TRY(verify_ck_vec(ck, "term_q_bk", n, t.qbk));
    TRY(verify_ck_num(ck, "term_bq_bk", t.bqbk));
    TRY(verify_ck_mat(ck, "scores_both", n, L, c->p[0][C_BOTH].s));
    return verify_ck_mat(ck, "sum_of_terms", n, L, sum);
}

/* Checks 2-5 on query row i of passes run on queries q. */
static double rows_2_to_5(const struct vx *c, const struct vpass *p,
                          const struct terms *t, const double *q, size_t i)
{
    size_t L = c->L, dk = c->dk;
    const double *bq = c->bq ? c->bq : c->zk;
    double cst = c->scale * dot(q + i * dk, c->bk ? c->bk : c->zk, dk);
    double m = terms_row_diff(c, t, p[C_BOTH].s, p[C_Q].s, i, NULL);
    for (size_t j = 0; j < L; j++) {
        size_t x = i * L + j, x0 = i * L;
        double e4 = 0.0;
        for (size_t d = 0; d < dk; d++)
            e4 += bq[d] * (c->k[j * dk + d] - c->k[d]);
        m = max2(m, fabs(p[C_K].s[x] - p[C_NONE].s[x] - cst));
        m = max2(m, fabs(p[C_K].w[x] - p[C_NONE].w[x]));
        m = max2(m, fabs((p[C_Q].s[x] - p[C_Q].s[x0]) -
                         (p[C_NONE].s[x] - p[C_NONE].s[x0]) - c->scale * e4));
    }
    return m;
}

static enum core_status check_every_row(struct vx *c, struct verify_check *ck)
{
    if (!c->bq && !c->bk)
        return verify_ck_na(ck, "neither bias.q nor bias.k was given");
    size_t n = c->n, L = c->L, dk = c->dk, m;
    if (!core_add(n, L, &m))
        return CORE_ELIMIT;
    double *qx, *cst, *rowd;
    NEED(qx = verify_dbl(c, m, dk));
    NEED(cst = verify_dbl(c, m, 1));
    NEED(rowd = verify_dbl(c, m, 1));
    memcpy(qx, c->q, n * dk * sizeof(double));
    memcpy(qx + n * dk, c->k, L * dk * sizeof(double));
    struct vpass p[4];
    for (int cond = 0; cond < 4; cond++) {
        struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, cond);
        r.q = qx;
        r.n = m;
        TRY(verify_pass(c, &r, &p[cond]));
    }
    struct terms t;
    TRY(vx_terms(c, qx, m, &t));
    double worst = 0.0;
    for (size_t i = 0; i < m; i++) {
        cst[i] = c->scale * dot(qx + i * dk, c->bk ? c->bk : c->zk, dk);
        rowd[i] = rows_2_to_5(c, p, &t, qx, i);
        worst = max2(worst, rowd[i]);
    }
    ck->max_abs_diff = worst;
    verify_ck_note(ck, "Queries are the %zu rows of q followed by the %zu keys used "
            "as extra queries.", n, L);
    TRY(verify_ck_mat(ck, "queries", m, dk, qx));
    TRY(verify_ck_vec(ck, "row_constant", m, cst));
    return verify_ck_vec(ck, "row_max_abs_diff", m, rowd);
}

/* ---- check 7: the exception ------------------------------------------- */

/* x -= sum_b (u_b . x) u_b over the orthonormal rows of basis [nb][d],
 * twice (one re-orthogonalisation pass keeps the result orthogonal). */
static void project_out(double *x, const double *basis, size_t nb, size_t d)
{
    for (int pass = 0; pass < 2; pass++)
        for (size_t b = 0; b < nb; b++) {
            double a = dot(basis + b * d, x, d);
            for (size_t i = 0; i < d; i++)
                x[i] -= a * basis[b * d + i];
        }
}

static double norm(const double *x, size_t d)
{
    return sqrt(dot(x, x, d));
}

/*
 * Orthonormal basis of span{k_j - k_1} into basis [d_k][d_k]; returns its
 * size. Modified Gram-Schmidt, hand-written because the problem is a few
 * vectors of d_k numbers and LAPACK is not a dependency of attnd. A
 * difference whose residual is below 1e-9 of its length is dependent.
 */
static size_t key_diff_basis(const struct vx *c, double *basis, double *tmp)
{
    size_t nb = 0, dk = c->dk;
    for (size_t j = 1; j < c->L && nb < dk; j++) {
        for (size_t i = 0; i < dk; i++)
            tmp[i] = c->k[j * dk + i] - c->k[i];
        double n0 = norm(tmp, dk);
        if (n0 == 0.0)
            continue;
        project_out(tmp, basis, nb, dk);
        double n1 = norm(tmp, dk);
        if (n1 <= 1e-9 * n0)
            continue;
        for (size_t i = 0; i < dk; i++)
            basis[nb * dk + i] = tmp[i] / n1;
        nb++;
    }
    return nb;
}

/* A nonzero bQ with equal dot products with every key into out [d_k]:
 * bias.q projected onto the null space of the key differences, else the
 * unit basis vector whose projection is longest. false when only 0 works. */
static bool exception_bq(struct vx *c, const double *basis, size_t nb,
                         double *out, struct verify_check *ck)
{
    size_t dk = c->dk;
    if (c->bq) {
        memcpy(out, c->bq, dk * sizeof(double));
        double n0 = norm(out, dk);
        project_out(out, basis, nb, dk);
        double n1 = norm(out, dk);
        if (n0 > 0.0 && n1 >= n0 * (1.0 - 1e-12)) {
            memcpy(out, c->bq, dk * sizeof(double));
            verify_ck_note(ck, "bias.q already has equal dot products with every key.");
            return true;
        }
        if (n0 > 0.0 && n1 > 1e-9 * n0) {
            verify_ck_note(ck, "bQ is bias.q projected onto the directions orthogonal "
                    "to every key difference k_j - k_1.");
            return true;
        }
    }
    double best = 0.0;
    size_t bi = 0;
    for (size_t e = 0; e < dk; e++) {
        memset(out, 0, dk * sizeof(double));
        out[e] = 1.0;
        project_out(out, basis, nb, dk);
        double n1 = norm(out, dk);
        if (n1 > best) {
            best = n1;
            bi = e;
        }
    }
    if (best <= 1e-9)
        return false;
    memset(out, 0, dk * sizeof(double));
    out[bi] = 1.0;
    project_out(out, basis, nb, dk);
    for (size_t i = 0; i < dk; i++)
        out[i] /= best;
    verify_ck_note(ck, "bQ is the unit vector e_%zu projected onto the directions "
            "orthogonal to every key difference k_j - k_1, then normalised.",
            bi + 1);
    return true;
}

static enum core_status check_q_exception(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk;
    double *basis, *tmp, *bq, *dots, *shift;
    NEED(basis = verify_dbl(c, dk, dk));
    NEED(tmp = verify_dbl(c, dk, 1));
    NEED(bq = verify_dbl(c, dk, 1));
    size_t nb = key_diff_basis(c, basis, tmp);
    TRY(verify_ck_num(ck, "key_difference_rank", (double)nb));
    if (!exception_bq(c, basis, nb, bq, ck))
        return verify_ck_na(ck, "The key differences k_j - k_1 span every direction, "
                     "so only bQ = 0 has equal dot products with all keys.");
    vx_round(c, bq, dk);
    NEED(dots = verify_dbl(c, L, 1));
    for (size_t j = 0; j < L; j++)
        dots[j] = dot(bq, c->k + j * dk, dk);
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    struct vpass p;
    r.bq = bq;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *a = &c->p[0][C_NONE];
    NEED(shift = vx_sub(c, p.s, a->s, n * L));
    double m = max2(verify_maxdiff(p.w, a->w, n * L), verify_maxdiff(p.o, a->o, n * c->dv));
    for (size_t x = 0; x < n * L; x++)
        m = max2(m, fabs(shift[x] - c->scale * dots[0]));
    ck->max_abs_diff = m;
    TRY(verify_ck_vec(ck, "bias_q_used", dk, bq));
    TRY(verify_ck_vec(ck, "bias_q_dot_k", L, dots));
    TRY(verify_ck_mat(ck, "score_shift", n, L, shift));
    TRY(verify_ck_mat(ck, "weights_without_q_bias", n, L, a->w));
    return verify_ck_mat(ck, "weights_with_q_bias", n, L, p.w);
}

/* ---- check 8: a per-key shift ------------------------------------------ */

static enum core_status check_per_key_shift(struct vx *c,
                                            struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk, best = 0;
    if (L < 2)
        return verify_ck_na(ck, "With one key every weight is 1, whatever the shift.");
    for (size_t i = 1; i < n; i++)
        if (norm(c->q + i * dk, dk) > norm(c->q + best * dk, dk))
            best = i;
    const double *qr = c->q + best * dk;
    double qq = dot(qr, qr, dk);
    if (qq == 0.0)
        return verify_ck_na(ck, "Every query row is zero, so no key shift can change "
                     "a score.");
    double *delta, *kx, *shift;
    NEED(delta = verify_dbl(c, L, dk));
    NEED(kx = verify_dbl(c, L, dk));
    for (size_t j = 0; j < L; j++)
        for (size_t d = 0; d < dk; d++) {
            double t = (double)j / (double)(L - 1);
            delta[j * dk + d] = t * qr[d] / (c->scale * qq);
        }
    vx_round(c, delta, L * dk);
    for (size_t x = 0; x < L * dk; x++)
        kx[x] = c->k[x] + delta[x];
    vx_round(c, kx, L * dk);
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    struct vpass p;
    r.k = kx;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *a = &c->p[0][C_NONE];
    NEED(shift = vx_sub(c, p.s, a->s, n * L));
    ck->expect_change = true;
    ck->max_abs_diff = verify_maxdiff(p.w, a->w, n * L);
    verify_ck_note(ck, "Key j is shifted by (j-1)/(L-1) times q_%zu/(scale*|q_%zu|^2),"
            " so row %zu's scores rise by 0 to 1 across the keys.",
            best + 1, best + 1, best + 1);
    TRY(verify_ck_mat(ck, "key_shifts", L, dk, delta));
    TRY(verify_ck_mat(ck, "score_shift", n, L, shift));
    TRY(verify_ck_mat(ck, "weights_without_shift", n, L, a->w));
    return verify_ck_mat(ck, "weights_with_shift", n, L, p.w);
}

/* ---- checks 9-12: softmax1 ---------------------------------------------- */

/* ratio[i][j] = w_ij / w_ir with r the largest score of row i (0 when w_ir
 * underflowed); dev = max |w_ij - w_ir exp(s_ij - s_ir)|; ex gets the exps. */
static double ratios(const struct vx *c, const double *s, const double *w,
                     double *ratio, double *ex, double *ref)
{
    double m = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        const double *si = s + i * c->L, *wi = w + i * c->L;
        size_t r = argmax(si, c->L);
        if (ref)
            ref[i] = (double)r;
        for (size_t j = 0; j < c->L; j++) {
            double e = exp(si[j] - si[r]);
            if (ex)
                ex[i * c->L + j] = e;
            ratio[i * c->L + j] = wi[r] > 0.0 ? wi[j] / wi[r] : 0.0;
            m = max2(m, fabs(wi[j] - wi[r] * e));
        }
    }
    return m;
}

static enum core_status check_softmax1_ratios(struct vx *c,
                                              struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const struct vpass *p1 = &c->p[1][C_BOTH], *p0 = &c->p[0][C_BOTH];
    double *r1, *r0, *ex, *ref;
    NEED(r1 = verify_dbl(c, n, L));
    NEED(r0 = verify_dbl(c, n, L));
    NEED(ex = verify_dbl(c, n, L));
    NEED(ref = verify_dbl(c, n, 1));
    double m1 = ratios(c, p1->s, p1->w, r1, ex, ref);
    double m0 = ratios(c, p0->s, p0->w, r0, NULL, NULL);
    ck->max_abs_diff = max2(m1, m0);
    verify_ck_note(ck, "Ratios are taken against each row's largest score "
            "(reference_key, counted from 0), with the request's biases.");
    TRY(verify_ck_mat(ck, "weights_softmax1", n, L, p1->w));
    TRY(verify_ck_mat(ck, "weights_standard", n, L, p0->w));
    TRY(verify_ck_mat(ck, "ratio_softmax1", n, L, r1));
    TRY(verify_ck_mat(ck, "ratio_standard", n, L, r0));
    TRY(verify_ck_mat(ck, "exp_score_difference", n, L, ex));
    return verify_ck_vec(ck, "reference_key", n, ref);
}

/* Ratios w_ij / w_ir against r = the largest score of row i of s; rows whose
 * w_ir underflowed get 0 and are counted in *skipped. */
static void ratios_against(const struct vx *c, const double *s,
                           const double *w, double *ratio, size_t *skipped)
{
    for (size_t i = 0; i < c->n; i++) {
        size_t r = argmax(s + i * c->L, c->L);
        double wr = w[i * c->L + r];
        if (!(wr > 0.0))
            (*skipped)++;
        for (size_t j = 0; j < c->L; j++)
            ratio[i * c->L + j] = wr > 0.0 ? w[i * c->L + j] / wr : 0.0;
    }
}

static enum core_status check_softmax1_shift(struct vx *c,
                                             struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    size_t n = c->n, L = c->L, dk = c->dk, skipped = 0;
    const struct vpass *a = &c->p[1][C_Q], *b = &c->p[1][C_BOTH];
    double *cst, *ra, *rb, *sa, *sb, cmax = 0.0;
    NEED(cst = verify_dbl(c, n, 1));
    NEED(ra = verify_dbl(c, n, L));
    NEED(rb = verify_dbl(c, n, L));
    for (size_t i = 0; i < n; i++) {
        double qb = 0.0;
        for (size_t d = 0; d < dk; d++)
            qb += (c->q[i * dk + d] + (c->bq ? c->bq[d] : 0.0)) * c->bk[d];
        cst[i] = c->scale * qb;
        cmax = max2(cmax, fabs(cst[i]));
    }
    if (cmax == 0.0)
        return verify_ck_na(ck, "(q_i + bQ).bK is 0 for every row, so bias.k adds "
                     "nothing to any score.");
    ratios_against(c, a->s, a->w, ra, &skipped);
    ratios_against(c, a->s, b->w, rb, &skipped);
    NEED(sa = vx_rowsums(c, a->w, n, L));
    NEED(sb = vx_rowsums(c, b->w, n, L));
    double change = verify_maxdiff(a->w, b->w, n * L);
    ck->max_abs_diff = verify_maxdiff(ra, rb, n * L);
    if (!(change > c->tol)) {
        ck->passed = false;
        verify_ck_note(ck, "The weight change %.3g is not above the tolerance.",
                change);
    } else {
        verify_ck_note(ck, "Passes when the ratios agree within the tolerance and "
                "the weights change by more than it (weight_change).");
    }
    if (skipped)
        verify_ck_note(ck, "%zu rows had an underflowing largest weight; their "
                "ratios print as 0.", skipped);
    TRY(verify_ck_vec(ck, "row_constant", n, cst));
    TRY(verify_ck_mat(ck, "weights_without_k_bias", n, L, a->w));
    TRY(verify_ck_mat(ck, "weights_with_k_bias", n, L, b->w));
    TRY(verify_ck_vec(ck, "row_sums_without_k_bias", n, sa));
    TRY(verify_ck_vec(ck, "row_sums_with_k_bias", n, sb));
    TRY(verify_ck_mat(ck, "ratio_without_k_bias", n, L, ra));
    TRY(verify_ck_mat(ck, "ratio_with_k_bias", n, L, rb));
    return verify_ck_num(ck, "weight_change", change);
}

/* k, v with one row prepended that the biases turn into exactly zero
 * (-bK + bK == 0 in floating point): kx [L+1][d_k], vx [L+1][d_v]. */
static enum core_status zero_key_inputs(struct vx *c, double **kx, double **vx)
{
    size_t L1, dk = c->dk, dv = c->dv;
    if (!core_add(c->L, 1, &L1))
        return CORE_ELIMIT;
    NEED(*kx = verify_dbl(c, L1, dk));
    NEED(*vx = verify_dbl(c, L1, dv));
    for (size_t d = 0; d < dk; d++)
        (*kx)[d] = c->bk ? -c->bk[d] : 0.0;
    for (size_t d = 0; d < dv; d++)
        (*vx)[d] = c->bv ? -c->bv[d] : 0.0;
    memcpy(*kx + dk, c->k, c->L * dk * sizeof(double));
    memcpy(*vx + dv, c->v, c->L * dv * sizeof(double));
    return CORE_OK;
}

/* Weights [n][L+1] without column 0 -> [n][L]; column 0 -> first [n]. */
static void split_first(const struct vx *c, const double *w, double *rest,
                        double *first)
{
    for (size_t i = 0; i < c->n; i++) {
        first[i] = w[i * (c->L + 1)];
        memcpy(rest + i * c->L, w + i * (c->L + 1) + 1, c->L * sizeof(double));
    }
}

/* Attention of variant sm on the request's data (all biases) against
 * standard attention with a zero key (score extra, via attn_bias) and zero
 * value prepended; fills ck with the comparison. */
static enum core_status extra_key_compare(struct vx *c, struct verify_check *ck,
                                          enum attn_softmax sm, double extra,
                                          const char *wname)
{
    size_t n = c->n, L = c->L;
    double *kx, *vx, *ab, *rest, *first;
    TRY(zero_key_inputs(c, &kx, &vx));
    struct vrun r = verify_base_run(c, sm, C_BOTH);
    struct vpass a, b;
    r.bv = c->bv;
    r.sink = extra;
    TRY(verify_pass(c, &r, &a));
    r.sm = ATTN_SOFTMAX_STANDARD;
    r.k = kx;
    r.v = vx;
    r.L = L + 1;
    NEED(ab = verify_dbl(c, n, L + 1));
    for (size_t i = 0; i < n; i++)
        ab[i * (L + 1)] = extra;
    r.attn_bias = extra != 0.0 ? ab : NULL;
    TRY(verify_pass(c, &r, &b));
    NEED(rest = verify_dbl(c, n, L));
    NEED(first = verify_dbl(c, n, 1));
    split_first(c, b.w, rest, first);
    ck->max_abs_diff = max2(verify_maxdiff(a.w, rest, n * L),
                            verify_maxdiff(a.o, b.o, n * c->dv));
    TRY(verify_ck_mat(ck, wname, n, L, a.w));
    TRY(verify_ck_mat(ck, "weights_prepended", n, L + 1, b.w));
    TRY(verify_ck_vec(ck, "zero_key_weight", n, first));
    TRY(verify_ck_mat(ck, "output_variant", n, c->dv, a.o));
    return verify_ck_mat(ck, "output_prepended", n, c->dv, b.o);
}

static enum core_status check_zero_key(struct vx *c, struct verify_check *ck)
{
    verify_ck_note(ck, "The prepended key and value are zero after bias (the raw "
            "rows are -bK and -bV); no RoPE.");
    return extra_key_compare(c, ck, ATTN_SOFTMAX_ONE, 0.0, "weights_softmax1");
}

/* softmax1 row sum sum_j exp(x_j) / (1 + sum_j exp(x_j)), x_j = s_j - t,
 * with the row maximum factored out as the core must. */
static double softmax1_sum(const double *s, size_t L, double t)
{
    double m = s[argmax(s, L)] - t, S = 0.0;
    double shift = m > 0.0 ? m : 0.0;
    for (size_t j = 0; j < L; j++)
        S += exp(s[j] - t - shift);
    return S / (exp(-shift) + S);
}

#define N_SHIFTS 4

/* Sums of softmax1 (sum1) and standard (sum0) rows at score shift -t. */
static enum core_status sums_at(struct vx *c, double t, double *sum1,
                                double *sum0)
{
    size_t n = c->n, L = c->L;
    double *ab, *s;
    NEED(ab = verify_dbl(c, n, L));
    for (size_t x = 0; x < n * L; x++)
        ab[x] = -t;
    for (int v = 0; v < 2; v++) {
        struct vrun r = verify_base_run(c, v ? ATTN_SOFTMAX_ONE : ATTN_SOFTMAX_STANDARD,
                               C_BOTH);
        struct vpass p;
        r.attn_bias = ab;
        TRY(verify_pass(c, &r, &p));
        NEED(s = vx_rowsums(c, p.w, n, L));
        memcpy(v ? sum1 : sum0, s, n * sizeof(double));
    }
    return CORE_OK;
}

/* Extra conditions of check 12 on row sums [N_SHIFTS][n]; false if broken. */
static bool sums_ok(const struct vx *c, const double *s1, const double *ex)
{
    for (size_t t = 0; t < N_SHIFTS; t++)
        for (size_t i = 0; i < c->n; i++) {
            double x = s1[t * c->n + i], e = ex[t * c->n + i];
            if (!(x >= 0.0 && x <= 1.0))
                return false;
            if (e > 0.0 && e < 1.0 && !(x > 0.0 && x < 1.0))
                return false;
            if (t > 0 && !(x <= s1[(t - 1) * c->n + i] + c->tol))
                return false;
            if (t == N_SHIFTS - 1 && !(x <= c->tol))
                return false;
        }
    return true;
}

static enum core_status check_row_sums(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const double *s = c->p[1][C_BOTH].s;
    double smax = s[argmax(s, n * L)];
    double shifts[N_SHIFTS] = {0.0, 10.0, 100.0, 0.0}, neg[N_SHIFTS];
    shifts[N_SHIFTS - 1] = (smax > 0.0 ? smax : 0.0) + 1000.0;
    double *s1, *s0, *ex;
    NEED(s1 = verify_dbl(c, N_SHIFTS, n));
    NEED(s0 = verify_dbl(c, N_SHIFTS, n));
    NEED(ex = verify_dbl(c, N_SHIFTS, n));
    double m = 0.0;
    for (size_t t = 0; t < N_SHIFTS; t++) {
        TRY(sums_at(c, shifts[t], s1 + t * n, s0 + t * n));
        neg[t] = -shifts[t];
        for (size_t i = 0; i < n; i++) {
            ex[t * n + i] = softmax1_sum(s + i * L, L, shifts[t]);
            m = max2(m, fabs(s1[t * n + i] - ex[t * n + i]));
            m = max2(m, fabs(s0[t * n + i] - 1.0));
        }
    }
    ck->max_abs_diff = m;
    if (!sums_ok(c, s1, ex)) {
        ck->passed = false;
        verify_ck_note(ck, "A softmax1 row sum left (0,1), rose as the scores fell, "
                "or did not reach 0.");
    } else {
        verify_ck_note(ck, "Every score of a row is shifted by score_shift through "
                "attn_bias; the last shift puts every score below -1000.");
    }
    TRY(verify_ck_vec(ck, "score_shift", N_SHIFTS, neg));
    TRY(verify_ck_mat(ck, "row_sums_softmax1", N_SHIFTS, n, s1));
    TRY(verify_ck_mat(ck, "expected_row_sums_softmax1", N_SHIFTS, n, ex));
    return verify_ck_mat(ck, "row_sums_standard", N_SHIFTS, n, s0);
}

/* ---- check 13: value bias --------------------------------------------- */

/* Output shift of variant sm caused by bV vs. expected (sum_j p_ij) bV, or bV
 * itself for standard softmax. */
static enum core_status v_shift(struct vx *c, enum attn_softmax sm,
                                double *shift, double *sums, double *dev)
{
    size_t n = c->n, dv = c->dv;
    struct vrun r = verify_base_run(c, sm, C_BOTH);
    struct vpass a, b;
    r.sink = sm == ATTN_SOFTMAX_SINK ? c->in->sink_logit : 0.0;
    TRY(verify_pass(c, &r, &a));
    r.bv = c->bv;
    TRY(verify_pass(c, &r, &b));
    double *rs;
    NEED(rs = vx_rowsums(c, b.w, n, c->L));
    for (size_t i = 0; i < n; i++) {
        double f = sm == ATTN_SOFTMAX_STANDARD ? 1.0 : rs[i];
        if (sums)
            sums[i] = rs[i];
        for (size_t d = 0; d < dv; d++) {
            size_t x = i * dv + d;
            shift[x] = b.o[x] - a.o[x];
            *dev = max2(*dev, fabs(shift[x] - f * c->bv[d]));
        }
    }
    return CORE_OK;
}

static enum core_status check_v_bias(struct vx *c, struct verify_check *ck)
{
    if (!c->bv)
        return verify_ck_na(ck, "no bias.v was given");
    size_t n = c->n, dv = c->dv;
    double *sh0, *sh1, *sums, dev = 0.0;
    NEED(sh0 = verify_dbl(c, n, dv));
    NEED(sh1 = verify_dbl(c, n, dv));
    NEED(sums = verify_dbl(c, n, 1));
    TRY(v_shift(c, ATTN_SOFTMAX_STANDARD, sh0, NULL, &dev));
    TRY(v_shift(c, ATTN_SOFTMAX_ONE, sh1, sums, &dev));
    TRY(verify_ck_vec(ck, "bias_v", dv, c->bv));
    TRY(verify_ck_mat(ck, "output_shift_standard", n, dv, sh0));
    TRY(verify_ck_mat(ck, "output_shift_softmax1", n, dv, sh1));
    TRY(verify_ck_vec(ck, "row_sums_softmax1", n, sums));
    if (c->in->softmax == ATTN_SOFTMAX_SINK) {
        double *sh2, *s2;
        NEED(sh2 = verify_dbl(c, n, dv));
        NEED(s2 = verify_dbl(c, n, 1));
        TRY(v_shift(c, ATTN_SOFTMAX_SINK, sh2, s2, &dev));
        TRY(verify_ck_mat(ck, "output_shift_sink", n, dv, sh2));
        TRY(verify_ck_vec(ck, "row_sums_sink", n, s2));
        verify_ck_note(ck, "The sink softmax of the request shifts by (sum_j p_ij) bV "
                "too.");
    }
    ck->max_abs_diff = dev;
    return CORE_OK;
}

/* ---- check 14: RoPE --------------------------------------------------- */

static enum core_status check_rope(struct vx *c, struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    if (c->dk % 2)
        return verify_ck_na(ck, "RoPE rotates pairs of dimensions, and d_k is odd.");
    if (c->L < 2)
        return verify_ck_na(ck, "With one key every weight is 1, whatever the shift.");
    size_t n = c->n, L = c->L;
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_Q);
    struct vpass a, b;
    r.rope = true;
    r.positions = true;
    if (c->in->rope) {
        r.rope_base = c->in->rope_base;
        r.rope_pairs = c->in->rope_pairs;
    }
    TRY(verify_pass(c, &r, &a));
    r.bk = c->bk;
    TRY(verify_pass(c, &r, &b));
    double *sr, *s0, *spread;
    NEED(sr = vx_sub(c, b.s, a.s, n * L));
    NEED(s0 = vx_sub(c, c->p[0][C_BOTH].s, c->p[0][C_Q].s, n * L));
    NEED(spread = verify_dbl(c, n, 1));
    for (size_t i = 0; i < n; i++) {
        const double *x = sr + i * L;
        double lo = x[0], hi = x[0];
        for (size_t j = 1; j < L; j++) {
            lo = x[j] < lo ? x[j] : lo;
            hi = x[j] > hi ? x[j] : hi;
        }
        spread[i] = hi - lo;
    }
    ck->expect_change = true;
    ck->max_abs_diff = verify_maxdiff(a.w, b.w, n * L);
    verify_ck_note(ck, "RoPE base %g, %s pairs%s; %s; passes when the weights change.",
            r.rope_base, r.rope_pairs == ATTN_ROPE_HALF ? "half" : "interleaved",
            c->in->rope ? " (the request's)" : " (the default, as the request "
            "has none)", c->in->pos_q || c->in->pos_k ? "at the request's positions"
            : "keys at positions 0..L-1, queries at L-n..L-1");
    TRY(verify_ck_mat(ck, "score_shift_with_rope", n, L, sr));
    TRY(verify_ck_mat(ck, "score_shift_without_rope", n, L, s0));
    TRY(verify_ck_vec(ck, "score_shift_spread", n, spread));
    TRY(verify_ck_mat(ck, "weights_without_k_bias", n, L, a.w));
    return verify_ck_mat(ck, "weights_with_k_bias", n, L, b.w);
}

/* ---- check 15: max subtraction ---------------------------------------- */

static bool all_finite(const double *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

static enum core_status check_max_sub(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    double *ab;
    NEED(ab = verify_dbl(c, n, L));
    for (size_t x = 0; x < n * L; x++)
        ab[x] = 1000.0;
    const struct vpass *ref = &c->p[0][C_BOTH];
    struct vpass p[2];
    double m = 0.0;
    bool finite = true;
    for (int v = 0; v < 2; v++) {
        struct vrun r = verify_base_run(c, v ? ATTN_SOFTMAX_ONE : ATTN_SOFTMAX_STANDARD,
                               C_BOTH);
        r.attn_bias = ab;
        TRY(verify_pass(c, &r, &p[v]));
        finite = finite && all_finite(p[v].s, n * L) &&
                 all_finite(p[v].w, n * L) && all_finite(p[v].o, n * dv);
        m = max2(m, verify_maxdiff(p[v].w, ref->w, n * L));
        m = max2(m, verify_maxdiff(p[v].o, ref->o, n * dv));
    }
    ck->max_abs_diff = m;
    if (!finite) {
        ck->passed = false;
        verify_ck_note(ck, "A score, weight or output was not finite.");
    } else {
        verify_ck_note(ck, "1000 is added through attn_bias; under softmax1 the 1 in "
                "the denominator is then negligible, so its weights equal the "
                "unshifted standard weights.");
    }
    TRY(verify_ck_num(ck, "score_shift", 1000.0));
    TRY(verify_ck_mat(ck, "weights_unshifted_standard", n, L, ref->w));
    TRY(verify_ck_mat(ck, "weights_shifted_standard", n, L, p[0].w));
    return verify_ck_mat(ck, "weights_shifted_softmax1", n, L, p[1].w);
}

/* ---- check 16: a session's KV cache ------------------------------------ */

/* Append rows [from, from+m) of k, v to cache kc. */
static enum core_status kv_rows(struct vx *c, struct kv_cache *kc,
                                const struct attn_params *p, size_t from,
                                size_t m)
{
    bool ok = true;
    struct attn_inputs in;
    memset(&in, 0, sizeof in);
    in.k = vx_cast(c, c->k + from * c->dk, m * c->dk, &ok);
    in.v = vx_cast(c, c->v + from * c->dv, m * c->dv, &ok);
    in.bias_k = vx_cast(c, c->bk, c->dk, &ok);
    in.bias_v = vx_cast(c, c->bv, c->dv, &ok);
    in.bias_k_heads = in.bias_v_heads = 1;
    if (!ok)
        return c->err;
    return kv_append(kc, p, &in, m);
}

/* Attend query row i of q through the cache; weights [len] and output
 * [d_v] into w, o (double). */
static enum core_status kv_query(struct vx *c, const struct kv_cache *kc,
                                 const struct vrun *r, size_t i, double *w,
                                 double *o)
{
    struct attn_request rq;
    struct attn_inputs in;
    struct vrun one = *r;
    size_t len = kv_length(kc), es = attn_dtype_size(c->dt);
    one.q = r->q + i * c->dk;
    one.n = 1;
    one.L = len;
    one.k = one.v = NULL;
    vx_request(c, &one, &rq);
    TRY(vx_inputs(c, &one, &rq, &in));
    struct attn_result res;
    memset(&res, 0, sizeof res);
    NEED(res.scores = verify_bytes(c, len, es));
    NEED(res.weights = verify_bytes(c, len, es));
    NEED(res.output = verify_bytes(c, c->dv, es));
    TRY(kv_attend(kc, &rq, &in, &res, c->ws));
    vx_unload(c, res.weights, w, len);
    vx_unload(c, res.output, o, c->dv);
    return CORE_OK;
}

static enum core_status decode_steps(struct vx *c, struct kv_cache *kc,
                                     const struct vrun *r, double *dec_w,
                                     double *dec_o)
{
    struct attn_request rq;
    vx_request(c, r, &rq);
    size_t n = c->n, L = c->L, pre = L - n;
    if (pre)
        TRY(kv_rows(c, kc, &rq.params, 0, pre));
    for (size_t i = 0; i < n; i++) {
        TRY(kv_rows(c, kc, &rq.params, pre + i, 1));
        TRY(kv_query(c, kc, r, i, dec_w + i * L, dec_o + i * c->dv));
    }
    return CORE_OK;
}

/* Stateless attention with queries at L-n..L-1 (causal bottom-right) into
 * full, vs. a cache that is prefilled with L-n rows and then gets one key
 * per query row, attending that row after each append (dec_w [n][L], dec_o
 * [n][d_v]). Both with the request's softmax and biases and the given RoPE. */
static enum core_status decode_compare(struct vx *c, bool rope, double base,
                                       enum attn_rope_pairs pairs,
                                       double *dec_w, double *dec_o,
                                       struct vpass *full)
{
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    r.bv = c->bv;
    r.rope = rope;
    r.rope_base = base;
    r.rope_pairs = pairs;
    r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    TRY(verify_pass(c, &r, full));
    struct kv_cache *kc = kv_new(c->dt, 1, c->dk, c->dv);
    if (!kc)
        return CORE_ENOMEM;
    enum core_status st = decode_steps(c, kc, &r, dec_w, dec_o);
    kv_free(kc);
    return st;
}

static enum core_status check_session(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    if (n > L)
        return verify_ck_na(ck, "q has more rows than k: causal decoding would leave "
                     "the first queries without keys.");
    bool rope2 = !c->in->rope && c->dk % 2 == 0;  /* add a RoPE variant */
    double *w[2], *o[2];
    struct vpass full[2];
    double m = 0.0;
    for (int v = 0; v < (rope2 ? 2 : 1); v++) {
        bool rope = v == 1;
        NEED(w[v] = verify_dbl(c, n, L));
        NEED(o[v] = verify_dbl(c, n, dv));
        TRY(decode_compare(c, rope ? true : c->in->rope,
                           c->in->rope ? c->in->rope_base : 10000.0,
                           c->in->rope ? c->in->rope_pairs
                                       : ATTN_ROPE_INTERLEAVED,
                           w[v], o[v], &full[v]));
        m = max2(m, verify_maxdiff(w[v], full[v].w, n * L));
        m = max2(m, verify_maxdiff(o[v], full[v].o, n * dv));
    }
    ck->max_abs_diff = m;
    verify_ck_note(ck, "The cache is prefilled with the first L-n keys, then gets one "
            "key per query row and attends that row; the recomputation is "
            "causal (bottom-right) over all keys. With the request's softmax "
            "and biases, %s.", c->in->rope ? "with the request's RoPE"
            : rope2 ? "once without and once with RoPE (base 10000)"
            : "without RoPE (d_k is odd)");
    TRY(verify_ck_mat(ck, "weights_decoded", n, L, w[0]));
    TRY(verify_ck_mat(ck, "weights_recomputed", n, L, full[0].w));
    TRY(verify_ck_mat(ck, "output_decoded", n, dv, o[0]));
    TRY(verify_ck_mat(ck, "output_recomputed", n, dv, full[0].o));
    if (rope2) {
        TRY(verify_ck_mat(ck, "weights_decoded_rope", n, L, w[1]));
        TRY(verify_ck_mat(ck, "weights_recomputed_rope", n, L, full[1].w));
    }
    return CORE_OK;
}

/* ---- check 17: sink ----------------------------------------------------- */

static enum core_status check_sink(struct vx *c, struct verify_check *ck)
{
    double sink = c->in->softmax == ATTN_SOFTMAX_SINK ? c->in->sink_logit : 0.0;
    if (sink == 0.0)
        verify_ck_note(ck, "sink_logit 0 (the request's softmax is not sink): the "
                "sink softmax is then softmax1.");
    else
        verify_ck_note(ck, "sink_logit %g from the request; the extra key's score "
                "is set through attn_bias.", sink);
    TRY(extra_key_compare(c, ck, ATTN_SOFTMAX_SINK, sink, "weights_sink"));
    return verify_ck_num(ck, "sink_logit", sink);
}

/* ---- check 18: the exception over the allowed keys ---------------------- */

/* The largest group of keys whose bQ.k_j agree (within 1e-12 of their size)
 * into allowed [L] (1 = in the group); returns its size. */
static size_t equal_dot_group(const struct vx *c, const double *dots,
                              uint8_t *allowed)
{
    size_t best = 0, bj = 0, L = c->L;
    for (size_t j = 0; j < L; j++) {
        size_t cnt = 0;
        for (size_t k = 0; k < L; k++) {
            double e = 1e-12 * fmax(1.0, fmax(fabs(dots[j]), fabs(dots[k])));
            cnt += fabs(dots[k] - dots[j]) <= e;
        }
        if (cnt > best) {
            best = cnt;
            bj = j;
        }
    }
    for (size_t k = 0; k < L; k++) {
        double e = 1e-12 * fmax(1.0, fmax(fabs(dots[bj]), fabs(dots[k])));
        allowed[k] = fabs(dots[k] - dots[bj]) <= e;
    }
    return best;
}

static enum core_status check_q_allowed(struct vx *c, struct verify_check *ck)
{
    if (!c->bq)
        return verify_ck_na(ck, "no bias.q was given");
    size_t n = c->n, L = c->L, dk = c->dk;
    double *dots, *allowed_d;
    uint8_t *allowed, *mask;
    NEED(dots = verify_dbl(c, L, 1));
    NEED(allowed_d = verify_dbl(c, L, 1));
    NEED(allowed = verify_bytes(c, L, 1));
    NEED(mask = verify_bytes(c, n * L, 1));
    for (size_t j = 0; j < L; j++)
        dots[j] = dot(c->bq, c->k + j * dk, dk);
    size_t g = equal_dot_group(c, dots, allowed);
    if (g < 2)
        return verify_ck_na(ck, "bias.q has a different dot product with every key, "
                     "so no two keys can be compared.");
    for (size_t j = 0; j < L; j++)
        allowed_d[j] = allowed[j];
    for (size_t i = 0; i < n; i++)
        memcpy(mask + i * L, allowed, L);
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    struct vpass a, b;
    r.mask = mask;
    TRY(verify_pass(c, &r, &a));
    r.bq = c->bq;
    TRY(verify_pass(c, &r, &b));
    ck->max_abs_diff = max2(verify_maxdiff(a.w, b.w, n * L),
                            verify_maxdiff(a.o, b.o, n * c->dv));
    verify_ck_note(ck, "bias.q itself, with attention limited (by a mask) to the %zu "
            "of %zu keys that share its dot product; the others are masked.",
            g, L);
    TRY(verify_ck_vec(ck, "allowed_keys", L, allowed_d));
    TRY(verify_ck_vec(ck, "bias_q_dot_k", L, dots));
    TRY(verify_ck_mat(ck, "weights_without_q_bias", n, L, a.w));
    TRY(verify_ck_mat(ck, "weights_with_q_bias", n, L, b.w));
    return verify_ck_num(ck, "weight_change_all_keys",
                  verify_maxdiff(c->p[0][C_NONE].w, c->p[0][C_Q].w, n * L));
}

/* ---- check 19: softmax1 weights rise with their own score -------------- */

static enum core_status check_own_score(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const double e1 = exp(1.0) - 1.0;
    double *ab, *key, *pred;
    NEED(ab = verify_dbl(c, n, L));
    NEED(key = verify_dbl(c, n, 1));
    NEED(pred = verify_dbl(c, n, L));
    for (size_t i = 0; i < n; i++) {
        key[i] = (double)(i % L);
        ab[i * L + i % L] = 1.0;
    }
    const struct vpass *a = &c->p[1][C_BOTH];
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_ONE, C_BOTH);
    struct vpass b;
    r.attn_bias = ab;
    TRY(verify_pass(c, &r, &b));
    bool signs = true;
    for (size_t i = 0; i < n; i++) {
        size_t jb = i % L;
        double pj = a->w[i * L + jb], den = 1.0 + e1 * pj;
        for (size_t j = 0; j < L; j++) {
            size_t x = i * L + j;
            pred[x] = (j == jb ? exp(1.0) * a->w[x] : a->w[x]) / den;
            if (j == jb && pj > 0.0 && !(b.w[x] > a->w[x]))
                signs = false;
            if (j != jb && !(b.w[x] <= a->w[x]))
                signs = false;
        }
    }
    ck->max_abs_diff = verify_maxdiff(b.w, pred, n * L);
    if (!signs) {
        ck->passed = false;
        verify_ck_note(ck, "A raised score did not raise its weight, or another "
                "weight rose.");
    } else {
        verify_ck_note(ck, "Row i raises the score of key i mod L (bumped_key, "
                "counted from 0) by 1 through attn_bias.");
    }
    TRY(verify_ck_vec(ck, "bumped_key", n, key));
    TRY(verify_ck_mat(ck, "weights_before", n, L, a->w));
    TRY(verify_ck_mat(ck, "weights_after", n, L, b.w));
    return verify_ck_mat(ck, "weights_predicted", n, L, pred);
}

/* ---- the list of checks ------------------------------------------------- */

typedef enum core_status (*check_fn)(struct vx *c, struct verify_check *ck);

static const struct {
    const char *name;
    const char *claim;
    check_fn fn;
} CHECKS[] = {
    {"base_scores",
     "The base scores equal scale*q_i.k_j, computed apart from the attention "
     "core.", check_base_scores},
    {"k_bias_row_constant",
     "A key bias common to all keys adds one constant per query row, "
     "c_i = scale*q_i.bK, to every score of that row.", check_k_row_constant},
    {"k_bias_weights_unchanged",
     "A common key bias leaves the standard-softmax weights and outputs "
     "unchanged.", check_k_weights},
    {"q_bias_relative_scores",
     "A query bias changes the score difference between keys j and j' by "
     "scale*bQ.(k_j - k_j'), so it can change the weights.", check_q_relative},
    {"four_term_decomposition",
     "With both biases the score is scale*(q_i.k_j + bQ.k_j + q_i.bK + "
     "bQ.bK), and only the bQ.k_j term varies across keys.", check_four_terms},
    {"every_query_row",
     "Checks 2 to 5 hold for every query row, each row with its own "
     "constant c_i.", check_every_row},
    {"q_bias_exception",
     "A query bias with equal dot products with all keys adds one constant "
     "per row and leaves the weights unchanged.", check_q_exception},
    {"per_key_shift_counterexample",
     "A shift that differs from key to key changes the weights (this check "
     "passes when the change is detected).", check_per_key_shift},
    {"softmax1_ratios",
     "softmax1 keeps the weight ratios p_ij/p_ik = exp(s_ij - s_ik) of "
     "standard softmax.", check_softmax1_ratios},
    {"softmax1_not_shift_invariant",
     "Under softmax1 the common key bias changes the weights while their "
     "ratios stay the same.", check_softmax1_shift},
    {"softmax1_zero_key",
     "softmax1 attention equals standard attention with a zero key and a "
     "zero value prepended.", check_zero_key},
    {"softmax1_row_sums",
     "softmax1 row sums lie strictly between 0 and 1 and go to 0 as all "
     "scores go to minus infinity, while standard rows always sum to 1.",
     check_row_sums},
    {"v_bias_output_shift",
     "A value bias shifts the output by bV under standard softmax and by "
     "(sum_j p_ij)*bV under softmax1.", check_v_bias},
    {"rope_breaks_k_bias",
     "With RoPE applied after the bias, the common key bias becomes a "
     "different shift per position, so the weights change.", check_rope},
    {"max_subtraction",
     "Adding 1000 to every score leaves the weights finite and equal, "
     "because the softmax subtracts the row maximum before exp.",
     check_max_sub},
    {"session_decode",
     "Decoding one token at a time through a session's KV cache gives the "
     "same weights and outputs as recomputing from scratch.", check_session},
    {"sink_extra_key",
     "The sink softmax equals standard attention with one extra zero-value "
     "key whose score is sink_logit.", check_sink},
    {"q_bias_exception_allowed_keys",
     "Among the allowed keys that share one dot product with bQ, the query "
     "bias leaves the weights unchanged.", check_q_allowed},
    {"softmax1_own_score",
     "Under softmax1, raising one score by 1 raises its weight to "
     "e*p/(1+(e-1)*p) and scales every other weight by 1/(1+(e-1)*p), so the "
     "derivative is positive.", check_own_score},
    {"segments_per_segment",
     "A request with packed segments equals one request per segment, its rows "
     "in the original order.", verify_check_segments},
    {"window_over_every_key",
     "A window whose left side reaches every key (left = L with default positions) "
     "equals the same attention without that side: causal alone, or the request's "
     "right side and sinks alone.",
     verify_check_window_all},
    {"softcap_monotone_bounded",
     "Softcap c*tanh(s/c) keeps every score within [-c, c] and keeps the order "
     "of the scores.", verify_check_softcap},
    {"head_sink_limits",
     "A per-head sink logit of -infinity gives standard softmax, and of 0 gives "
     "softmax1.", verify_check_head_sinks},
    {"llama3_factor_one",
     "RoPE scaled by llama3 with factor 1 equals plain RoPE.", verify_check_llama3_one},
    {"rope_dims_zero",
     "Partial rotary with dims = 0 rotates nothing: it equals attention without "
     "RoPE.", verify_check_dims_zero},
    {"kv_dtype_bound",
     "Float16, bfloat16 and int8 session caches give outputs within a stated bound "
     "of the float32 cache's.", verify_check_kv_dtypes},
    {"beit_key_bias_float16",
     "In float16 a large common key bias is no longer invisible: k0 + bK rounded to "
     "float16 loses k0's bits, so the weights drift from float64's (which do not "
     "move) as bK grows, until the scores overflow.", verify_check_beit_key_bias},
};

#define N_CHECKS (sizeof CHECKS / sizeof CHECKS[0])

_Static_assert(N_CHECKS <= VERIFY_MAX_CHECKS, "VERIFY_MAX_CHECKS too small");

static enum core_status run_checks(struct vx *c, struct verify_report *rep)
{
    rep->passed = true;
    for (size_t i = 0; i < N_CHECKS; i++) {
        struct verify_check *ck = &rep->checks[i];
        rep->n_checks = i + 1;
        ck->id = (int)i + 1;
        ck->name = CHECKS[i].name;
        ck->claim = CHECKS[i].claim;
        ck->applicable = true;
        ck->passed = true;
        ck->tolerance = c->tol;
        TRY(CHECKS[i].fn(c, ck));
        if (!ck->applicable) {
            ck->passed = true;
            ck->max_abs_diff = 0.0;
        } else if (ck->expect_change) {
            ck->passed = ck->passed && ck->max_abs_diff > c->tol;
            if (!(ck->max_abs_diff > c->tol))
                verify_ck_note(ck, "No weight changed by more than the tolerance; "
                        "large gaps between scores saturate the weights at 0 "
                        "and 1.");
        } else {
            ck->passed = ck->passed && ck->max_abs_diff <= c->tol;
        }
        rep->passed = rep->passed && ck->passed;
    }
    return CORE_OK;
}

/* ---- setup and the public functions ------------------------------------ */

static enum core_status vx_setup(struct vx *c, const struct verify_input *in,
                                 struct verify_report *rep)
{
    if (!in->q || !in->k || !in->v || !in->n || !in->L || !in->d_k ||
        !in->d_v || !(in->scale >= 0.0) || !isfinite(in->scale) ||
        !(in->tolerance >= 0.0) || !isfinite(in->tolerance) ||
        (in->dtype != ATTN_F64 && in->dtype != ATTN_F32) ||
        (in->sinks && in->n_sinks > VERIFY_MAX_SINKS) || !in->seg_q != !in->seg_k)
        return CORE_EINVAL;
    size_t nq, nk, nv;
    if (!core_mul(in->n, in->d_k, &nq) || !core_mul(in->L, in->d_k, &nk) ||
        !core_mul(in->L, in->d_v, &nv))
        return CORE_ELIMIT;
    c->in = in;
    c->n = in->n;
    c->L = in->L;
    c->dk = in->d_k;
    c->dv = in->d_v;
    c->dt = in->dtype;
    c->scale = in->scale > 0.0 ? in->scale : attn_default_scale(in->d_k);
    c->fwd = in->forward ? in->forward : attn_forward;
    c->ws = in->ws;
    c->err = CORE_ENOMEM;
    NEED(c->q = vx_load(c, in->q, nq));
    NEED(c->k = vx_load(c, in->k, nk));
    NEED(c->v = vx_load(c, in->v, nv));
    NEED(c->zk = verify_dbl(c, in->d_k, 1));
    if (in->bias_q)
        NEED(c->bq = vx_load(c, in->bias_q, in->d_k));
    if (in->bias_k)
        NEED(c->bk = vx_load(c, in->bias_k, in->d_k));
    if (in->bias_v)
        NEED(c->bv = vx_load(c, in->bias_v, in->d_v));
    rep->dtype = c->dt;
    rep->n = c->n;
    rep->L = c->L;
    rep->d_k = c->dk;
    rep->d_v = c->dv;
    rep->scale = c->scale;
    return CORE_OK;
}

static void resolve_tolerance(struct vx *c, struct verify_report *rep)
{
    const struct verify_input *in = c->in;
    if (in->tolerance > 0.0) {
        c->tol = in->tolerance;
        rep->tolerance_note =
            in->dtype == ATTN_F32 && in->tolerance < 1e-5
                ? "Given by the request; float32 results carry rounding "
                  "errors near 1e-7 of their size, more after adding 1000 "
                  "(check 15), so a tolerance this small may fail."
                : "Given by the request.";
    } else if (in->dtype == ATTN_F32) {
        c->tol = VERIFY_TOL_F32;
        rep->tolerance_note =
            "float32 default 1e-4: float32 keeps about 7 significant digits, "
            "and check 15 adds 1000 to every score, which leaves about 4 "
            "decimals.";
    } else {
        c->tol = VERIFY_TOL_F64;
        rep->tolerance_note = "float64 default 1e-12.";
    }
    rep->tolerance = c->tol;
}

static const char *const COND_NAMES[4] = {"no_bias", "q_bias", "k_bias",
                                          "both"};

/* The eight shared passes, and the table copied from them. */
static enum core_status shared_passes(struct vx *c, struct verify_report *rep)
{
    size_t bytes;
    if (!core_mul3(c->n, c->L, sizeof(double), &bytes))
        return CORE_ELIMIT;
    for (int v = 0; v < 2; v++)
        for (int cond = 0; cond < 4; cond++) {
            struct vrun r = verify_base_run(
                c, v ? ATTN_SOFTMAX_ONE : ATTN_SOFTMAX_STANDARD, cond);
            TRY(verify_pass(c, &r, &c->p[v][cond]));
            struct verify_condition *t = &rep->table[v][cond];
            t->name = COND_NAMES[cond];
            t->scores = malloc(bytes);
            t->weights = malloc(bytes);
            if (!t->scores || !t->weights)
                return CORE_ENOMEM;
            memcpy(t->scores, c->p[v][cond].s, bytes);
            memcpy(t->weights, c->p[v][cond].w, bytes);
        }
    return CORE_OK;
}

enum core_status verify_run(const struct verify_input *in,
                            struct verify_report *out)
{
    struct vx c;
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    enum core_status st = vx_setup(&c, in, out);
    if (st == CORE_OK) {
        resolve_tolerance(&c, out);
        st = shared_passes(&c, out);
    }
    if (st == CORE_OK)
        st = run_checks(&c, out);
    if (st != CORE_OK)
        out->passed = false;
    vx_free_all(&c);
    return st;
}

void verify_report_free(struct verify_report *r)
{
    for (size_t i = 0; i < VERIFY_MAX_CHECKS; i++) {
        free(r->checks[i].note);
        r->checks[i].note = NULL;
    }
    for (size_t i = 0; i < VERIFY_MAX_CHECKS; i++)
        for (size_t j = 0; j < r->checks[i].n_data; j++) {
            free(r->checks[i].data[j].data);
            r->checks[i].data[j].data = NULL;
        }
    for (int v = 0; v < 2; v++)
        for (int cond = 0; cond < 4; cond++) {
            free(r->table[v][cond].scores);
            free(r->table[v][cond].weights);
            r->table[v][cond].scores = r->table[v][cond].weights = NULL;
        }
    r->n_checks = 0;
}

bool verify_report_elements(const struct verify_report *r, size_t *count)
{
    size_t total = 0, nl;
    for (size_t i = 0; i < r->n_checks; i++)
        for (size_t j = 0; j < r->checks[i].n_data; j++) {
            size_t x;
            const struct verify_array *a = &r->checks[i].data[j];
            if (!core_mul(a->rows, a->cols, &x) || !core_add(total, x, &total))
                return false;
        }
    if (!core_mul(r->n, r->L, &nl) || !core_mul(nl, 16, &nl) ||
        !core_add(total, nl, &total))
        return false;
    *count = total;
    return true;
}

static const double B_Q[2] = {1.0, 0.0};
static const double B_K[3][2] = {{1.0, 0.0}, {0.0, 1.0}, {-1.0, 0.0}};
static const double B_V[3][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0},
                                 {0.0, 0.0, 1.0}};
static const double B_BQ[2] = {0.0, 1.0};
static const double B_BK[2] = {3.0, -2.0};
static const double B_BV[3] = {1.0, -1.0, 0.5};

void verify_builtin(struct verify_input *in)
{
    memset(in, 0, sizeof *in);
    in->dtype = ATTN_F64;
    in->n = 1;
    in->L = 3;
    in->d_k = 2;
    in->d_v = 3;
    in->q = B_Q;
    in->k = B_K;
    in->v = B_V;
    in->bias_q = B_BQ;
    in->bias_k = B_BK;
    in->bias_v = B_BV;
    in->softmax = ATTN_SOFTMAX_STANDARD;
    in->rope_base = 10000.0;
    in->rope_pairs = ATTN_ROPE_INTERLEAVED;
}
