/*
 * core/verify.c — the checks behind /v1/verify (see verify.h).
 *
 * Layout: a context (struct vx) holds the inputs converted to double, an
 * allocation list freed at the end, and eight shared forward passes (no bias,
 * Q bias, K bias, both; standard and softmax1) that feed the table and most
 * checks. verify_pass() is the only way attention is computed here: it converts
 * the arrays to the request's dtype, calls the core's forward pass (or the
 * injected one), and converts the results back to double. Each check is one
 * function that fills a struct verify_check (checks 1-8 and 18 in
 * core/verify_bias.c, 9-13, 15, 17 and 19 in core/verify_softmax1.c, 14 and
 * 16 in core/verify_session.c, 20-25 in core/verify_models.c, 26-27 in
 * core/verify_half.c); run_checks() judges it.
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
void verify_round(const struct vx *c, double *x, size_t count)
{
    if (c->dt == ATTN_F32)
        for (size_t i = 0; i < count; i++)
            x[i] = (float)x[i];
}

/* double [count] -> array of the dtype (src itself for float64); *ok false
 * when an allocation failed. NULL src gives NULL. */
const void *verify_cast(struct vx *c, const double *src, size_t count, bool *ok)
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

void verify_request(const struct vx *c, const struct vrun *r, struct attn_request *rq)
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
enum core_status verify_inputs(struct vx *c, const struct vrun *r,
                               struct attn_request *rq, struct attn_inputs *in)
{
    bool ok = true;
    size_t nq, nk, nv, nb, hn;
    if (!core_mul(r->h ? r->h : 1, r->n, &hn) || !core_mul(hn, c->dk, &nq) ||
        !core_mul(r->L, c->dk, &nk) ||
        !core_mul(r->L, c->dv, &nv) || !core_mul(r->n, r->L, &nb))
        return CORE_ELIMIT;
    memset(in, 0, sizeof *in);
    in->q = verify_cast(c, r->q, nq, &ok);
    in->k = verify_cast(c, r->k, nk, &ok);
    in->v = verify_cast(c, r->v, nv, &ok);
    in->bias_q = verify_cast(c, r->bq, c->dk, &ok);
    in->bias_k = verify_cast(c, r->bk, c->dk, &ok);
    in->bias_v = verify_cast(c, r->bv, c->dv, &ok);
    in->bias_q_heads = in->bias_k_heads = in->bias_v_heads = 1;
    rq->attn_bias = verify_cast(c, r->attn_bias, nb, &ok);
    return ok ? CORE_OK : c->err;
}

/* Copy core results of the dtype into double arrays. */
void verify_unload(const struct vx *c, const void *src, double *dst, size_t count)
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

/* A pass of r (rq on in) that overflowed: the request's row to blame into
 * *c->blame, when the pass read that input as the request gave it (one
 * head of the request's n queries and L keys; a score needs q and k both
 * the request's). Error path only. */
static void blame_pass(struct vx *c, const struct vrun *r, const struct attn_request *rq,
                       const struct attn_inputs *in)
{
    struct attn_blame b;
    if (!c->blame || c->blame->input != ATTN_BLAME_NONE || (r->h && r->h != 1) ||
        r->n != c->n || r->L != c->L || attn_blame(rq, in, NULL, 0, &b) != CORE_OK)
        return;
    bool own = b.input == ATTN_BLAME_K   ? r->k == c->k
               : b.input == ATTN_BLAME_V ? r->v == c->v
               : b.input == ATTN_BLAME_Q ? r->q == c->q &&
                                               (b.stage == ATTN_BLAME_PREPARED || r->k == c->k)
                                         : false;       /* attn_bias: a check's own */
    if (own)
        *c->blame = b;
}

enum core_status verify_pass(struct vx *c, const struct vrun *r, struct vpass *out)
{
    struct attn_request rq;
    struct attn_inputs in;
    verify_request(c, r, &rq);
    TRY(verify_inputs(c, r, &rq, &in));
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
    enum core_status st = c->fwd(&rq, &in, &res, c->ws);
    if (st == CORE_ENONFINITE)
        blame_pass(c, r, &rq, &in);
    TRY(st);
    verify_unload(c, res.scores, out->s, ns);
    verify_unload(c, res.weights, out->w, ns);
    verify_unload(c, res.output, out->o, no);
    return CORE_OK;
}

/* ---- small arithmetic ------------------------------------------------- */

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

/* scale * q_i . k_j for q [n][d_k], k [L][d_k] -> out [n][L]. */
void verify_ref_scores(const struct vx *c, const double *q, size_t n,
                       const double *k, size_t L, double *out)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < L; j++)
            out[i * L + j] = c->scale * verify_dot(q + i * c->dk, k + j * c->dk, c->dk);
}

/* a - b, elementwise, into a new array. */
double *verify_sub(struct vx *c, const double *a, const double *b, size_t count)
{
    double *d = verify_dbl(c, count, 1);
    if (d)
        for (size_t i = 0; i < count; i++)
            d[i] = a[i] - b[i];
    return d;
}

/* Row sums of w [n][L] into a new array [n]. */
double *verify_rowsums(struct vx *c, const double *w, size_t n, size_t L)
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

/* ---- the list of checks ------------------------------------------------- */

typedef enum core_status (*check_fn)(struct vx *c, struct verify_check *ck);

/* mag: what the check's rounding scales with (verify_tol, flags of
 * verify_impl.h): the biases its scores include, scores or outputs; none
 * for checks 26-27, whose bounds are their own. Check 15's +1000 is not
 * counted: the default tolerances already allow for it in the weights, and
 * check 15 scales the base by max |v| for its outputs. */
#define M_S VERIFY_MAG_SCORES
#define M_O VERIFY_MAG_OUTPUTS
#define M_Q VERIFY_MAG_BQ
#define M_K VERIFY_MAG_BK
#define M_QK (VERIFY_MAG_BQ | VERIFY_MAG_BK)
#define M_KR VERIFY_MAG_KEY_ROWS
#define M_SK VERIFY_MAG_SINK

static const struct {
    const char *name;
    const char *claim;
    check_fn fn;
    int mag;
} CHECKS[] = {
    {"base_scores",
     "The base scores equal scale*q_i.k_j, computed apart from the attention "
     "core.", verify_check_base_scores, M_S},
    {"k_bias_row_constant",
     "A key bias common to all keys adds one constant per query row, "
     "c_i = scale*q_i.bK, to every score of that row.",
     verify_check_k_row_constant, M_S | M_K},
    {"k_bias_weights_unchanged",
     "A common key bias leaves the standard-softmax weights and outputs "
     "unchanged.", verify_check_k_weights, M_O | M_K},
    {"q_bias_relative_scores",
     "A query bias changes the score difference between keys j and j' by "
     "scale*bQ.(k_j - k_j'), so it can change the weights.",
     verify_check_q_relative, M_S | M_Q},
    {"four_term_decomposition",
     "With both biases the score is scale*(q_i.k_j + bQ.k_j + q_i.bK + "
     "bQ.bK), and only the bQ.k_j term varies across keys.",
     verify_check_four_terms, M_S | M_QK},
    {"every_query_row",
     "Checks 2 to 5 hold for every query row, each row with its own "
     "constant c_i.", verify_check_every_row, M_S | M_QK | M_KR},
    {"q_bias_exception",
     "A query bias with equal dot products with all keys adds one constant "
     "per row and leaves the weights unchanged.",
     verify_check_q_exception, M_O | M_Q},
    {"per_key_shift_counterexample",
     "A shift that differs from key to key changes the weights (this check "
     "passes when the change is detected).",
     verify_check_per_key_shift, M_S},
    {"softmax1_ratios",
     "softmax1 keeps the weight ratios p_ij/p_ik = exp(s_ij - s_ik) of "
     "standard softmax.", verify_check_softmax1_ratios, M_S | M_QK},
    {"softmax1_not_shift_invariant",
     "Under softmax1 the common key bias changes the weights while their "
     "ratios stay the same.", verify_check_softmax1_shift, M_S | M_QK},
    {"softmax1_zero_key",
     "softmax1 attention equals standard attention with a zero key and a "
     "zero value prepended.", verify_check_zero_key, M_O | M_QK},
    {"softmax1_row_sums",
     "softmax1 row sums lie strictly between 0 and 1 and go to 0 as all "
     "scores go to minus infinity, while standard rows always sum to 1.",
     verify_check_row_sums, M_S | M_QK},
    {"v_bias_output_shift",
     "A value bias shifts the output by bV under standard softmax and by "
     "(sum_j p_ij)*bV under softmax1.", verify_check_v_bias, M_O | M_QK | M_SK},
    {"rope_breaks_k_bias",
     "With RoPE applied after the bias, the common key bias becomes a "
     "different shift per position, so the weights change.",
     verify_check_rope, M_S | M_QK},
    {"max_subtraction",
     "Adding 1000 to every score leaves the weights finite and equal, "
     "because the softmax subtracts the row maximum before exp.",
     verify_check_max_sub, M_O | M_QK},
    {"session_decode",
     "Decoding one token at a time through a session's KV cache gives the "
     "same weights and outputs as recomputing from scratch.",
     verify_check_session, M_O | M_QK | M_SK},
    {"sink_extra_key",
     "The sink softmax equals standard attention with one extra zero-value "
     "key whose score is sink_logit.", verify_check_sink, M_O | M_QK | M_SK},
    {"q_bias_exception_allowed_keys",
     "Among the allowed keys that share one dot product with bQ, the query "
     "bias leaves the weights unchanged.", verify_check_q_allowed, M_O | M_Q},
    {"softmax1_own_score",
     "Under softmax1, raising one score by 1 raises its weight to "
     "e*p/(1+(e-1)*p) and scales every other weight by 1/(1+(e-1)*p), so the "
     "derivative is positive.", verify_check_own_score, M_S | M_QK},
    {"segments_per_segment",
     "A request with packed segments equals one request per segment, its rows "
     "in the original order.", verify_check_segments, M_O | M_QK | M_SK},
    {"window_over_every_key",
     "A window whose left side reaches every key (left = L with default positions) "
     "equals the same attention without that side: causal alone, or the request's "
     "right side and sinks alone.",
     verify_check_window_all, M_O | M_QK | M_SK},
    {"softcap_monotone_bounded",
     "Softcap c*tanh(s/c) keeps every score within [-c, c] and keeps the order "
     "of the scores.", verify_check_softcap, M_S},
    {"head_sink_limits",
     "A per-head sink logit of -infinity gives standard softmax, and of 0 gives "
     "softmax1.", verify_check_head_sinks, M_O | M_SK},
    {"llama3_factor_one",
     "RoPE scaled by llama3 with factor 1 equals plain RoPE.",
     verify_check_llama3_one, M_O | M_QK | M_SK},
    {"rope_dims_zero",
     "Partial rotary with dims = 0 rotates nothing: it equals attention without "
     "RoPE.", verify_check_dims_zero, M_O | M_QK | M_SK},
    {"kv_dtype_bound",
     "Float16, bfloat16 and int8 session caches give outputs within a stated bound "
     "of the float32 cache's.", verify_check_kv_dtypes, 0},
    {"beit_key_bias_float16",
     "In float16 a large common key bias is no longer invisible: k0 + bK rounded to "
     "float16 loses k0's bits, so the weights drift from float64's (which do not "
     "move) as bK grows, until the scores overflow.",
     verify_check_beit_key_bias, 0},
};

#define N_CHECKS (sizeof CHECKS / sizeof CHECKS[0])

_Static_assert(N_CHECKS <= VERIFY_MAX_CHECKS, "VERIFY_MAX_CHECKS too small");

/* Every pass and check is a piece of the request (core/stop.h): a pass too
 * small to be split checks no deadline itself, and the reference loops are
 * verify's own, so without this a request of many small passes ran to its
 * end however far past its deadline. */
static enum core_status piece_boundary(const struct vx *c)
{
    return attn_ws_boundary(c->ws) ? CORE_ESTOPPED : CORE_OK;
}

static enum core_status run_checks(struct vx *c, struct verify_report *rep)
{
    rep->passed = true;
    for (size_t i = 0; i < N_CHECKS; i++) {
        TRY(piece_boundary(c));
        struct verify_check *ck = &rep->checks[i];
        rep->n_checks = i + 1;
        ck->id = (int)i + 1;
        ck->name = CHECKS[i].name;
        ck->claim = CHECKS[i].claim;
        ck->applicable = true;
        ck->passed = true;
        ck->tolerance = verify_tol(c, CHECKS[i].mag);
        TRY(CHECKS[i].fn(c, ck));
        if (!ck->applicable) {
            ck->passed = true;
            ck->max_abs_diff = 0.0;
        } else if (ck->expect_change) {
            ck->passed = ck->passed && ck->max_abs_diff > ck->tolerance;
            if (!(ck->max_abs_diff > ck->tolerance))   /* after how it ran */
                verify_ck_note(ck, "%s%sNo weight changed by more than the "
                        "tolerance; large gaps between scores saturate the "
                        "weights at 0 and 1.", ck->note ? ck->note : "",
                        ck->note ? " " : "");
        } else {
            ck->passed = ck->passed && ck->max_abs_diff <= ck->tolerance;
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

/* ||x|| of x [d], its terms divided by the largest |x_i| first: the
 * squares of numbers past 1e154 overflow (and those below 1e-162
 * underflow) where the norm itself does not. Hand-written, not BLAS's
 * dnrm2: OpenBLAS's x86-64 dnrm2 does not scale, it sums the squares in
 * x87 extended precision, whose range is what keeps them finite; under
 * valgrind (which runs x87 at double width) it overflows at 1e165. */
double verify_norm(const double *x, size_t d)
{
    double a = 0.0, s = 0.0;
    for (size_t i = 0; i < d; i++)
        a = fmax(a, fabs(x[i]));
    if (!(a > 0.0))
        return 0.0;
    for (size_t i = 0; i < d; i++)
        s += (x[i] / a) * (x[i] / a);
    return a * sqrt(s);
}

/* Largest Euclidean norm of the rows x [rows][d]. */
static double max_row_norm(const double *x, size_t rows, size_t d)
{
    double m = 0.0;
    for (size_t i = 0; i < rows; i++)
        m = fmax(m, verify_norm(x + i * d, d));
    return m;
}

/* Largest |x_i| of x [count], 0 for NULL. */
static double max_abs(const double *x, size_t count)
{
    double m = 0.0;
    for (size_t i = 0; x && i < count; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* The norms and magnitudes verify_tol scales by (verify.h). */
static void vx_magnitudes(struct vx *c)
{
    const struct verify_input *in = c->in;
    c->nq = max_row_norm(c->q, c->n, c->dk);
    c->nk = c->nkq = max_row_norm(c->k, c->L, c->dk);
    c->nbq = c->bq ? max_row_norm(c->bq, 1, c->dk) : 0.0;
    c->nbk = c->bk ? max_row_norm(c->bk, 1, c->dk) : 0.0;
    c->msink = 0.0;
    if (in->softmax == ATTN_SOFTMAX_SINK)
        c->msink = fabs(in->sink_logit);
    if (in->sinks)
        c->msink = fmax(c->msink, max_abs(in->sinks, in->n_sinks));
    c->mv = fmax(1.0, max_abs(c->v, c->L * c->dv) + max_abs(c->bv, c->dv));
}

/* M of verify.h: scale * (||x|| + ||bQ||) * (||k|| + ||bK||) bounds
 * scale * sum_d |x_d k_d| of every score (and RoPE keeps norms); bQ counts
 * as at least 1 because check 7 may use a unit query bias of its own. */
double verify_tol(const struct vx *c, int mag)
{
    if (!(mag & (VERIFY_MAG_SCORES | VERIFY_MAG_OUTPUTS)))
        return c->tol;
    double nq = (mag & VERIFY_MAG_KEY_ROWS) ? fmax(c->nq, c->nkq) : c->nq;
    if (mag & VERIFY_MAG_BQ)
        nq += fmax(c->nbq, 1.0);
    /* the units of rounding first: M times max(1, |v|+|bV|) may pass
     * DBL_MAX where the bound, some 1e-14 of it, does not */
    double u = c->dt == ATTN_F32 ? 0x1p-24 : 0x1p-53;
    double f = VERIFY_ROUND_ULPS * ((double)c->dk + 2.0) * u;
    double b = fmax(f * c->scale * nq * (c->nk + ((mag & VERIFY_MAG_BK) ? c->nbk : 0.0)),
                    (mag & VERIFY_MAG_SINK) ? f * c->msink : 0.0);
    if (mag & VERIFY_MAG_OUTPUTS)
        b *= c->mv;
    return isfinite(b) && b > c->tol ? b : c->tol;
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
            TRY(piece_boundary(c));
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
    out->blame.input = ATTN_BLAME_NONE;
    c.blame = &out->blame;
    enum core_status st = vx_setup(&c, in, out);
    if (st == CORE_OK) {
        resolve_tolerance(&c, out);
        vx_magnitudes(&c);
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

/* ---- the report's size, before running ---------------------------------- */

_Static_assert(N_CHECKS == 27, "check_numbers counts each check's arrays: add the new one's");

/* A sum of products that remembers an overflow. */
struct tally {
    size_t sum;
    bool over;
};

static void tally(struct tally *t, size_t a, size_t b)
{
    size_t x;
    if (!core_mul(a, b, &x) || !core_add(t->sum, x, &t->sum))
        t->over = true;
}

/* Whether some number of x [count] is not zero. */
static bool any_nonzero(const double *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (x[i] != 0.0)
            return true;
    return false;
}

/* The numbers check id writes into its data, array by array as it writes
 * them, when the premises it tests before its passes hold (none when it is
 * not applicable). Three premises need its passes, and count as holding:
 * check 10's rows whose largest weight underflows, check 26's float16
 * range, check 27's float16 overflow and keys alike; and check 7's needs
 * the rank of the key differences when L > d_k, found only with rank (else
 * its arrays count as holding, into *unsure too). */
static enum core_status check_numbers(struct vx *c, int id, bool rank, struct tally *t,
                                      struct tally *unsure)
{
    const struct verify_input *in = c->in;
    size_t n = c->n, L = c->L, dk = c->dk, dv = c->dv, nL = n + L;
    bool ok;

    switch (id) {
    case 1:                         /* scores_core, scores_reference, scale */
        tally(t, 2 * n, L);
        tally(t, 1, 1);
        break;
    case 2:                         /* scores with/without, score_shift; row_constant */
        if (c->bk) {
            tally(t, 3 * n, L);
            tally(t, n, 1);
        }
        break;
    case 3:                         /* weights, outputs with and without */
        if (c->bk) {
            tally(t, 2 * n, L);
            tally(t, 2 * n, dv);
        }
        break;
    case 4:                         /* scores, difference_change, weights; expected; change */
        if (c->bq) {
            tally(t, 5 * n, L);
            tally(t, L + 1, 1);
        }
        break;
    case 5:                         /* 2 terms, scores_both, sum; term_q_bk; term_bq_bk */
        if (c->bq || c->bk) {
            tally(t, 4 * n, L);
            tally(t, n + 1, 1);
        }
        break;
    case 6:                         /* queries [n+L][d_k]; row_constant, row_max_abs_diff */
        if (c->bq || c->bk) {
            tally(t, nL, dk);
            tally(t, nL, 2);
        }
        break;
    case 7:                         /* key_difference_rank; bias_q_used, bias_q_dot_k; 3 [n][L] */
        tally(t, 1, 1);
        ok = true;
        if (rank || L - 1 < dk)
            TRY(verify_q_exception_applies(c, &ok));
        else
            tally(unsure, 3 * n, L), tally(unsure, dk + L, 1);
        if (ok) {
            tally(t, dk + L, 1);
            tally(t, 3 * n, L);
        }
        break;
    case 8:                         /* key_shifts [L][d_k]; score_shift, weights */
        if (L >= 2 && any_nonzero(c->q, n * dk)) {
            tally(t, L, dk);
            tally(t, 3 * n, L);
        }
        break;
    case 9:                         /* weights, ratios, exp_score_difference; reference_key */
        tally(t, 5 * n, L);
        tally(t, n, 1);
        break;
    case 10:                        /* row_constant, 2 row sums, weight_change; 4 [n][L] */
        if (verify_k_bias_shifts(c)) {
            tally(t, 3 * n + 1, 1);
            tally(t, 4 * n, L);
        }
        break;
    case 11:                        /* weights [n][L], [n][L+1]; zero_key_weight; outputs */
    case 17:                        /* the same, and sink_logit */
        tally(t, n, 2 * L + 2);
        tally(t, 2 * n, dv);
        tally(t, id == 17, 1);
        break;
    case 12:                        /* score_shift; three [shifts][n] row sums */
        tally(t, VERIFY_ROW_SUM_SHIFTS, 1 + 3 * n);
        break;
    case 13:                        /* bias_v; 2 output shifts, row sums; and the sink's */
        if (c->bv) {
            bool sink = in->softmax == ATTN_SOFTMAX_SINK;
            tally(t, dv, 1);
            tally(t, (sink ? 3 : 2) * n, dv);
            tally(t, sink ? 2 : 1, n);
        }
        break;
    case 14:                        /* 2 score shifts, 2 weights; score_shift_spread */
        if (c->bk && dk % 2 == 0 && L >= 2 && !verify_rope_keeps_shift(c)) {
            tally(t, 4 * n, L);
            tally(t, n, 1);
        }
        break;
    case 15:                        /* score_shift; 3 weights; row_sums_shifted_softmax1 */
        tally(t, 3 * n, L);
        tally(t, n + 1, 1);
        break;
    case 16:                        /* weights and outputs decoded/recomputed; with RoPE */
        if (n <= L) {
            tally(t, (!in->rope && dk % 2 == 0 ? 4 : 2) * n, L);
            tally(t, 2 * n, dv);
        }
        break;
    case 18:                        /* allowed_keys, bias_q_dot_k; 2 weights; change */
        TRY(verify_q_allowed_applies(c, &ok));
        if (ok) {
            tally(t, 2 * L + 1, 1);
            tally(t, 2 * n, L);
        }
        break;
    case 19:                        /* bumped_key; weights before, after, predicted */
        tally(t, n, 1);
        tally(t, 3 * n, L);
        break;
    case 20:                        /* weights_packed; output packed, per segment */
        if ((in->seg_q && in->seg_k) || L >= 2) {
            tally(t, n, L);
            tally(t, 2 * n, dv);
        }
        break;
    case 21:                        /* weights window, no window, the request's window */
        tally(t, (in->window.on ? 3 : 2) * n, L);
        break;
    case 22:                        /* softcap; 3 scores; largest_fall_per_row */
        tally(t, 3 * n, L);
        tally(t, n + 1, 1);
        break;
    case 23:                        /* 4 weights, and the request's sinks' [m·n][L] */
        tally(t, (4 + (in->sinks ? in->n_sinks : 0)) * n, L);
        break;
    case 24:                        /* weights_llama3, weights_plain_rope */
        tally(t, dk % 2 == 0 ? 2 * n : 0, L);
        break;
    case 25:                        /* weights_dims_0, weights_no_rope */
        tally(t, 2 * n, L);
        break;
    case 26:                        /* max_abs_diff_vs_float32_cache, bound */
        tally(t, 2, 3);
        break;
    case 27:                        /* bk_size, 2 weight errors; overflow_size */
        if (L >= 2 && any_nonzero(c->q, n * dk))
            tally(t, 3 * VERIFY_BEIT_SIZES + 1, 1);
        break;
    default:
        return CORE_EINVAL;
    }
    return CORE_OK;
}

enum core_status verify_report_numbers(const struct verify_input *in, bool rank,
                                       size_t *count, size_t *unsure)
{
    struct vx c;
    struct verify_report sizes;     /* what vx_setup writes of the report */
    struct tally t = {0, false}, u = {0, false};
    enum core_status st;

    memset(&c, 0, sizeof c);
    st = vx_setup(&c, in, &sizes);
    tally(&t, 2 * 4 * 2 * c.n, c.L);        /* the table: scores, weights [n][L] */
    for (size_t i = 0; i < N_CHECKS && st == CORE_OK; i++)
        st = check_numbers(&c, (int)i + 1, rank, &t, &u);
    vx_free_all(&c);
    if (st == CORE_OK && t.over)
        st = CORE_ELIMIT;
    *count = t.sum;
    *unsure = u.sum;
    return st;
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
