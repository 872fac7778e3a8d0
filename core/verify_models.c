/*
 * core/verify_models.c — the checks of issue 16 behind /v1/verify (ids 20
 * to 25, after core/verify.c's nineteen): packed segments, a window that
 * spans every key, softcap, per-head sinks, llama3 with factor 1, partial
 * rotary with no dims.
 *
 * Each check runs the core (verify_pass) on the request's head with one
 * option set through vrun.tweak, and compares it with what the option must
 * equal: other core passes on changed inputs (each segment alone, no
 * window, standard softmax and softmax1, plain RoPE, no RoPE) or plain
 * arithmetic done here (c·tanh(s/c) of the scores without softcap, the
 * scores' order). Nothing expected is hard-coded.
 */
#include "verify_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the options, as request tweaks ---------------------------------------- */

struct seg_arg {
    const int64_t *sq, *sk;
};

static void tweak_segments(struct attn_request *rq, const void *arg)
{
    const struct seg_arg *a = arg;
    rq->seg_q = a->sq;
    rq->seg_k = a->sk;
    rq->seg_batches = 1;
}

static void tweak_window_all(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->window = (struct attn_window){true, (int64_t)rq->shape.L, -1, 0};
}

static void tweak_softcap(struct attn_request *rq, const void *arg)
{
    rq->params.softcap = *(const double *)arg;
}

static void tweak_head_sinks(struct attn_request *rq, const void *arg)
{
    rq->params.softmax = ATTN_SOFTMAX_SINK;
    rq->params.sink_logits = arg;
}

static void tweak_llama3_one(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->params.rope_scaling = (struct attn_rope_scaling){
        .type = ATTN_ROPE_SCALING_LLAMA3,
        .factor = 1,
        .low_freq_factor = 1,
        .high_freq_factor = 4,
        .original_max_position = 8192,
    };
}

static void tweak_dims_zero(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->params.rope_dims = ATTN_ROPE_DIMS_ZERO;
}

/* The request's RoPE (base, pairs) on r, or the default when it has none
 * (none when d_k is odd: RoPE rotates pairs). */
static void with_rope(const struct vx *c, struct vrun *r)
{
    r->rope = c->dk % 2 == 0;
    if (c->in->rope) {
        r->rope_base = c->in->rope_base;
        r->rope_pairs = c->in->rope_pairs;
    }
}

/* max |a - b| over rows [rows][cols] of a (row stride lda) and b (ldb). */
static double block_diff(const double *a, size_t lda, const double *b, size_t ldb,
                         size_t rows, size_t cols)
{
    double m = 0;
    for (size_t i = 0; i < rows; i++) {
        double d = verify_maxdiff(a + i * lda, b + i * ldb, cols);
        m = d > m || isnan(d) ? d : m;
    }
    return m;
}

static double max_abs(const double *x, size_t count)
{
    double m = 0;
    for (size_t i = 0; i < count; i++)
        m = fabs(x[i]) > m || isnan(x[i]) ? fabs(x[i]) : m;
    return m;
}

/* ---- check 20: segments ------------------------------------------------------ */

enum core_status verify_check_segments(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk, dv = c->dv;
    if (L < 2)
        return verify_ck_na(ck, "Two segments need at least two keys.");
    size_t n1 = n / 2, L1 = L / 2;
    int64_t *sq = verify_bytes(c, n, sizeof(int64_t));
    int64_t *sk = verify_bytes(c, L, sizeof(int64_t));
    NEED(sq && sk);
    for (size_t i = 0; i < n; i++)
        sq[i] = i >= n1;
    for (size_t j = 0; j < L; j++)
        sk[j] = j >= L1;
    struct seg_arg sa = {sq, sk};
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    with_rope(c, &r);
    struct vpass all, part[2];
    struct vrun ra = r;
    ra.tweak = tweak_segments;
    ra.tweak_arg = &sa;
    TRY(verify_pass(c, &ra, &all));
    double worst = 0;
    for (int s = 0; s < 2; s++) {
        size_t q0 = s ? n1 : 0, k0 = s ? L1 : 0;
        struct vrun rs = r;
        rs.q = c->q + q0 * dk;
        rs.n = s ? n - n1 : n1;
        rs.k = c->k + k0 * dk;
        rs.v = c->v + k0 * dv;
        rs.L = s ? L - L1 : L1;
        if (rs.n == 0) {            /* one query: segment 0 holds keys only */
            part[s].o = NULL;
            continue;
        }
        TRY(verify_pass(c, &rs, &part[s]));
        /* the segment's block equals its own request; the rest of its rows is 0 */
        double d = block_diff(all.w + q0 * L + k0, L, part[s].w, rs.L, rs.n, rs.L);
        d = fmax(d, block_diff(all.o + q0 * dv, dv, part[s].o, dv, rs.n, dv));
        for (size_t i = q0; i < q0 + rs.n; i++) {
            const double *w = all.w + i * L;
            d = fmax(d, s ? max_abs(w, L1) : max_abs(w + L1, L - L1));
        }
        worst = isnan(d) ? d : fmax(worst, d);
    }
    ck->max_abs_diff = worst;
    verify_ck_note(ck, "The first %zu queries and %zu keys are segment 0, the rest "
                   "segment 1; causal (bottom-right within each segment), both biases, "
                   "the request's softmax%s.", n1, L1,
                   !r.rope ? "" : c->in->rope ? " and RoPE" : " and the default RoPE");
    TRY(verify_ck_mat(ck, "weights_packed", n, L, all.w));
    TRY(verify_ck_mat(ck, "output_packed", n, dv, all.o));
    if (part[0].o)
        TRY(verify_ck_mat(ck, "output_segment_0", n1, dv, part[0].o));
    return verify_ck_mat(ck, "output_segment_1", n - n1, dv, part[1].o);
}

/* ---- check 21: a window over every key ---------------------------------------- */

enum core_status verify_check_window_all(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    with_rope(c, &r);
    struct vpass plain, win;
    TRY(verify_pass(c, &r, &plain));
    r.tweak = tweak_window_all;
    TRY(verify_pass(c, &r, &win));
    ck->max_abs_diff = fmax(verify_maxdiff(plain.w, win.w, n * L),
                            verify_maxdiff(plain.o, win.o, n * dv));
    verify_ck_note(ck, "window {left: %zu} with causal, against causal alone.", L);
    TRY(verify_ck_mat(ck, "weights_window", n, L, win.w));
    return verify_ck_mat(ck, "weights_no_window", n, L, plain.w);
}

/* ---- check 22: softcap ----------------------------------------------------------- */

struct row_order {
    const double *s;
};

static int by_score(const void *a, const void *b, void *arg)
{
    const double *s = ((const struct row_order *)arg)->s;
    double x = s[*(const size_t *)a], y = s[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

enum core_status verify_check_softcap(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const double *s0 = c->p[0][C_NONE].s;   /* the scores without softcap */
    double cap = c->in->softcap;
    if (!(cap > 0)) {                       /* half the largest score: it bends */
        cap = max_abs(s0, n * L) / 2;
        if (!(cap > 0))
            cap = 1;
    }
    if (c->dt == ATTN_F32)
        cap = (float)cap;
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    r.tweak = tweak_softcap;
    r.tweak_arg = &cap;
    struct vpass p;
    TRY(verify_pass(c, &r, &p));
    double *expect, *order;
    size_t *idx;
    NEED(expect = verify_dbl(c, n * L, 1));
    NEED(order = verify_dbl(c, n, 1));
    NEED(idx = verify_bytes(c, L, sizeof(size_t)));
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double *sr = s0 + i * L, *cr = p.s + i * L;
        for (size_t j = 0; j < L; j++) {
            expect[i * L + j] = cap * tanh(sr[j] / cap);
            worst = fmax(worst, fabs(cr[j]) - cap);     /* bounded by c */
        }
        /* monotone: in the order of the uncapped scores, capped ones never fall */
        struct row_order ro = {sr};
        for (size_t j = 0; j < L; j++)
            idx[j] = j;
        qsort_r(idx, L, sizeof *idx, by_score, &ro);
        double fall = 0;
        for (size_t j = 1; j < L; j++)
            fall = fmax(fall, cr[idx[j - 1]] - cr[idx[j]]);
        order[i] = fall;
        worst = fmax(worst, fall);
    }
    double d = verify_maxdiff(p.s, expect, n * L);
    ck->max_abs_diff = isnan(d) ? d : fmax(worst, d);
    verify_ck_note(ck, "softcap c = %g%s; max_abs_diff is the largest of: |s| - c, "
                   "a capped score below one whose uncapped score is smaller, and the "
                   "distance to c*tanh(s/c) computed here from the uncapped scores.",
                   cap, c->in->softcap > 0 ? " (the request's)"
                                           : " (half the largest |score|)");
    TRY(verify_ck_num(ck, "softcap", cap));
    TRY(verify_ck_mat(ck, "scores_uncapped", n, L, s0));
    TRY(verify_ck_mat(ck, "scores_capped", n, L, p.s));
    TRY(verify_ck_mat(ck, "scores_expected", n, L, expect));
    return verify_ck_vec(ck, "largest_fall_per_row", n, order);
}

/* ---- check 23: per-head sinks ------------------------------------------------------ */

enum core_status verify_check_head_sinks(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk, dv = c->dv;
    double *q2;
    NEED(q2 = verify_dbl(c, 2 * n, dk));
    memcpy(q2, c->q, n * dk * sizeof(double));
    memcpy(q2 + n * dk, c->q, n * dk * sizeof(double));
    static const double sinks[2] = {-INFINITY, 0};
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_SINK, C_NONE);
    r.q = q2;
    r.h = 2;
    r.tweak = tweak_head_sinks;
    r.tweak_arg = sinks;
    struct vpass p;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *std = &c->p[0][C_NONE], *one = &c->p[1][C_NONE];
    double d = fmax(verify_maxdiff(p.w, std->w, n * L), verify_maxdiff(p.o, std->o, n * dv));
    d = fmax(d, fmax(verify_maxdiff(p.w + n * L, one->w, n * L),
                     verify_maxdiff(p.o + n * dv, one->o, n * dv)));
    ck->max_abs_diff = d;
    verify_ck_note(ck, "Two heads with the same q: head 0 with sink -inf against standard "
                   "softmax, head 1 with sink 0 against softmax1 (no biases).");
    TRY(verify_ck_mat(ck, "weights_sink_minus_inf", n, L, p.w));
    TRY(verify_ck_mat(ck, "weights_standard", n, L, std->w));
    TRY(verify_ck_mat(ck, "weights_sink_zero", n, L, p.w + n * L));
    return verify_ck_mat(ck, "weights_softmax1", n, L, one->w);
}

/* ---- checks 24 and 25: RoPE scalings and partial rotary ------------------------------ */

/* The pass with RoPE (tweaked) against the pass `other` (RoPE plain or off). */
static enum core_status rope_compare(struct vx *c, struct verify_check *ck,
                                     void (*tweak)(struct attn_request *, const void *),
                                     bool other_rope, const char *name_a,
                                     const char *name_b)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    with_rope(c, &r);
    r.rope = true;                  /* llama3 is not applicable with odd d_k */
    struct vpass a, b;
    struct vrun rb = r;
    rb.rope = other_rope;
    TRY(verify_pass(c, &rb, &b));
    r.tweak = tweak;
    TRY(verify_pass(c, &r, &a));
    ck->max_abs_diff = fmax(fmax(verify_maxdiff(a.s, b.s, n * L), verify_maxdiff(a.w, b.w, n * L)),
                            verify_maxdiff(a.o, b.o, n * dv));
    TRY(verify_ck_mat(ck, name_a, n, L, a.w));
    return verify_ck_mat(ck, name_b, n, L, b.w);
}

enum core_status verify_check_llama3_one(struct vx *c, struct verify_check *ck)
{
    if (c->dk % 2)
        return verify_ck_na(ck, "RoPE rotates pairs of dimensions, and d_k is odd.");
    verify_ck_note(ck, "llama3 {factor 1, low_freq_factor 1, high_freq_factor 4, "
                   "original_max_position 8192} against plain RoPE (base %g), scores, "
                   "weights and outputs.", c->in->rope ? c->in->rope_base : 10000.0);
    return rope_compare(c, ck, tweak_llama3_one, true, "weights_llama3", "weights_plain_rope");
}

enum core_status verify_check_dims_zero(struct vx *c, struct verify_check *ck)
{
    verify_ck_note(ck, "RoPE with dims 0 against no RoPE, scores, weights and outputs.");
    return rope_compare(c, ck, tweak_dims_zero, false, "weights_dims_0", "weights_no_rope");
}
