/*
 * core/verify_softmax1.c — the checks of /v1/verify about the softmax
 * variants and the value bias (ids 9-13, 15, 17 and 19): softmax1 keeps
 * ratios but not weights, equals a prepended zero key, has row sums in
 * (0, 1); a value bias shifts the output by its row sum; max subtraction;
 * the sink softmax as an extra key; softmax1's positive derivative.
 *
 * Every attention side is a core pass (verify_pass); the expected side is
 * another pass on changed inputs or plain double arithmetic done here.
 */
#include "verify_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- checks 9-12: softmax1 ---------------------------------------------- */

/* ratio[i][j] = w_ij / w_ir with r the largest score of row i (0 when w_ir
 * underflowed); dev = max |w_ij - w_ir exp(s_ij - s_ir)|; ex gets the exps. */
static double ratios(const struct vx *c, const double *s, const double *w,
                     double *ratio, double *ex, double *ref)
{
    double m = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        const double *si = s + i * c->L, *wi = w + i * c->L;
        size_t r = verify_argmax(si, c->L);
        if (ref)
            ref[i] = (double)r;
        for (size_t j = 0; j < c->L; j++) {
            double e = exp(si[j] - si[r]);
            if (ex)
                ex[i * c->L + j] = e;
            ratio[i * c->L + j] = wi[r] > 0.0 ? wi[j] / wi[r] : 0.0;
            m = verify_max2(m, fabs(wi[j] - wi[r] * e));
        }
    }
    return m;
}

enum core_status verify_check_softmax1_ratios(struct vx *c,
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
    ck->max_abs_diff = verify_max2(m1, m0);
    verify_ck_note(ck, "Ratios are taken against each row's largest score "
            "(reference_key, counted from 0), with the request's biases.");
    TRY(verify_ck_mat(ck, "weights_softmax1", n, L, p1->w));
    TRY(verify_ck_mat(ck, "weights_standard", n, L, p0->w));
    TRY(verify_ck_mat(ck, "ratio_softmax1", n, L, r1));
    TRY(verify_ck_mat(ck, "ratio_standard", n, L, r0));
    TRY(verify_ck_mat(ck, "exp_score_difference", n, L, ex));
    return verify_ck_vec(ck, "reference_key", n, ref);
}

/* Ratios w_ij / w_ir against r = the largest score of row i of s. A row
 * whose w_ir is below the dtype's smallest normal number has underflowed:
 * its ratios cannot be measured, print as 0, and ok[i] is 0. */
static void ratios_against(const struct vx *c, const double *s,
                           const double *w, double *ratio, uint8_t *ok)
{
    double tiny = c->dt == ATTN_F32 ? FLT_MIN : DBL_MIN;
    for (size_t i = 0; i < c->n; i++) {
        size_t r = verify_argmax(s + i * c->L, c->L);
        double wr = w[i * c->L + r];
        ok[i] = wr >= tiny;
        for (size_t j = 0; j < c->L; j++)
            ratio[i * c->L + j] = ok[i] ? w[i * c->L + j] / wr : 0.0;
    }
}

/* max |ra - rb| over the rows measurable in both; *skipped counts the rest. */
static double ratio_diff(const struct vx *c, const double *ra, const double *rb,
                         const uint8_t *oka, const uint8_t *okb, size_t *skipped)
{
    double m = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        if (oka[i] && okb[i])
            m = verify_max2(m, verify_maxdiff(ra + i * c->L, rb + i * c->L, c->L));
        else
            (*skipped)++;
    }
    return m;
}

/* scale*(q_i + bQ).bK: what bias.k adds to every score of row i. */
static double k_row_shift(const struct vx *c, size_t i)
{
    double qb = 0.0;
    for (size_t d = 0; d < c->dk; d++)
        qb += (c->q[i * c->dk + d] + (c->bq ? c->bq[d] : 0.0)) * c->bk[d];
    return c->scale * qb;
}

bool verify_k_bias_shifts(const struct vx *c)
{
    for (size_t i = 0; c->bk && i < c->n; i++)
        if (k_row_shift(c, i) != 0.0)
            return true;
    return false;
}

enum core_status verify_check_softmax1_shift(struct vx *c,
                                             struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    if (!verify_k_bias_shifts(c))
        return verify_ck_na(ck, "(q_i + bQ).bK is 0 for every row, so bias.k adds "
                     "nothing to any score.");
    size_t n = c->n, L = c->L, skipped = 0;
    const struct vpass *a = &c->p[1][C_Q], *b = &c->p[1][C_BOTH];
    double *cst, *ra, *rb, *sa, *sb;
    uint8_t *oka, *okb;
    NEED(cst = verify_dbl(c, n, 1));
    NEED(ra = verify_dbl(c, n, L));
    NEED(rb = verify_dbl(c, n, L));
    for (size_t i = 0; i < n; i++)
        cst[i] = k_row_shift(c, i);
    NEED(oka = verify_bytes(c, n, 1));
    NEED(okb = verify_bytes(c, n, 1));
    ratios_against(c, a->s, a->w, ra, oka);
    ratios_against(c, a->s, b->w, rb, okb);
    ck->max_abs_diff = ratio_diff(c, ra, rb, oka, okb, &skipped);
    if (skipped == n)
        return verify_ck_na(ck, "Every row's largest softmax1 weight underflows with or "
                            "without bias.k, so no weight ratio can be measured.");
    NEED(sa = verify_rowsums(c, a->w, n, L));
    NEED(sb = verify_rowsums(c, b->w, n, L));
    double change = verify_maxdiff(a->w, b->w, n * L);
    if (!(change > ck->tolerance))
        ck->passed = false;
    const char *verdict = change > ck->tolerance
                              ? "Passes when the ratios agree within the tolerance and the "
                                "weights change by more than it (weight_change)."
                              : "The weight change is not above the tolerance.";
    if (skipped)
        verify_ck_note(ck, "%s %zu rows had an underflowing largest weight; their ratios "
                       "print as 0 and are not compared.", verdict, skipped);
    else
        verify_ck_note(ck, "%s", verdict);
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
    ck->max_abs_diff = verify_max2(verify_maxdiff(a.w, rest, n * L),
                                   verify_maxdiff(a.o, b.o, n * c->dv));
    TRY(verify_ck_mat(ck, wname, n, L, a.w));
    TRY(verify_ck_mat(ck, "weights_prepended", n, L + 1, b.w));
    TRY(verify_ck_vec(ck, "zero_key_weight", n, first));
    TRY(verify_ck_mat(ck, "output_variant", n, c->dv, a.o));
    return verify_ck_mat(ck, "output_prepended", n, c->dv, b.o);
}

enum core_status verify_check_zero_key(struct vx *c, struct verify_check *ck)
{
    verify_ck_note(ck, "The prepended key and value are zero after bias (the raw "
            "rows are -bK and -bV); no RoPE.");
    return extra_key_compare(c, ck, ATTN_SOFTMAX_ONE, 0.0, "weights_softmax1");
}

/* softmax1 row sum sum_j exp(x_j) / (1 + sum_j exp(x_j)), x_j = s_j - t,
 * with the row maximum factored out as the core must. */
static double softmax1_sum(const double *s, size_t L, double t)
{
    double m = s[verify_argmax(s, L)] - t, S = 0.0;
    double shift = m > 0.0 ? m : 0.0;
    for (size_t j = 0; j < L; j++)
        S += exp(s[j] - t - shift);
    return S / (exp(-shift) + S);
}

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
        NEED(s = verify_rowsums(c, p.w, n, L));
        memcpy(v ? sum1 : sum0, s, n * sizeof(double));
    }
    return CORE_OK;
}

/* Extra conditions of check 12 on row sums [VERIFY_ROW_SUM_SHIFTS][n]; false if broken. */
static bool sums_ok(const struct vx *c, const double *s1, const double *ex,
                    double tol)
{
    for (size_t t = 0; t < VERIFY_ROW_SUM_SHIFTS; t++)
        for (size_t i = 0; i < c->n; i++) {
            double x = s1[t * c->n + i], e = ex[t * c->n + i];
            if (!(x >= 0.0 && x <= 1.0 + tol))
                return false;
            /* strictly inside where the exact sum is more than the
             * tolerance from both ends; nearer, a float32 (or float64)
             * sum may round to 1 or underflow to 0 */
            if (e > tol && e < 1.0 - tol && !(x > 0.0 && x < 1.0))
                return false;
            if (t > 0 && !(x <= s1[(t - 1) * c->n + i] + tol))
                return false;
            if (t == VERIFY_ROW_SUM_SHIFTS - 1 && !(x <= tol))
                return false;
        }
    return true;
}

enum core_status verify_check_row_sums(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const double *s = c->p[1][C_BOTH].s;
    double smax = s[verify_argmax(s, n * L)];
    double shifts[VERIFY_ROW_SUM_SHIFTS] = {0.0, 10.0, 100.0, 0.0}, neg[VERIFY_ROW_SUM_SHIFTS];
    shifts[VERIFY_ROW_SUM_SHIFTS - 1] = (smax > 0.0 ? smax : 0.0) + 1000.0;
    double *s1, *s0, *ex;
    NEED(s1 = verify_dbl(c, VERIFY_ROW_SUM_SHIFTS, n));
    NEED(s0 = verify_dbl(c, VERIFY_ROW_SUM_SHIFTS, n));
    NEED(ex = verify_dbl(c, VERIFY_ROW_SUM_SHIFTS, n));
    double m = 0.0;
    for (size_t t = 0; t < VERIFY_ROW_SUM_SHIFTS; t++) {
        TRY(sums_at(c, shifts[t], s1 + t * n, s0 + t * n));
        neg[t] = -shifts[t];
        for (size_t i = 0; i < n; i++) {
            ex[t * n + i] = softmax1_sum(s + i * L, L, shifts[t]);
            m = verify_max2(m, fabs(s1[t * n + i] - ex[t * n + i]));
            m = verify_max2(m, fabs(s0[t * n + i] - 1.0));
        }
    }
    ck->max_abs_diff = m;
    if (!sums_ok(c, s1, ex, ck->tolerance)) {
        ck->passed = false;
        verify_ck_note(ck, "A softmax1 row sum left (0,1), rose as the scores fell, "
                "or did not reach 0.");
    } else {
        verify_ck_note(ck, "Every score of a row is shifted by score_shift through "
                "attn_bias; the last shift puts every score below -1000.");
    }
    TRY(verify_ck_vec(ck, "score_shift", VERIFY_ROW_SUM_SHIFTS, neg));
    TRY(verify_ck_mat(ck, "row_sums_softmax1", VERIFY_ROW_SUM_SHIFTS, n, s1));
    TRY(verify_ck_mat(ck, "expected_row_sums_softmax1", VERIFY_ROW_SUM_SHIFTS, n, ex));
    return verify_ck_mat(ck, "row_sums_standard", VERIFY_ROW_SUM_SHIFTS, n, s0);
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
    NEED(rs = verify_rowsums(c, b.w, n, c->L));
    for (size_t i = 0; i < n; i++) {
        double f = sm == ATTN_SOFTMAX_STANDARD ? 1.0 : rs[i];
        if (sums)
            sums[i] = rs[i];
        for (size_t d = 0; d < dv; d++) {
            size_t x = i * dv + d;
            shift[x] = b.o[x] - a.o[x];
            *dev = verify_max2(*dev, fabs(shift[x] - f * c->bv[d]));
        }
    }
    return CORE_OK;
}

enum core_status verify_check_v_bias(struct vx *c, struct verify_check *ck)
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

/* ---- check 15: max subtraction ---------------------------------------- */

static bool all_finite(const double *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

enum core_status verify_check_max_sub(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    double *ab;
    NEED(ab = verify_dbl(c, n, L));
    for (size_t x = 0; x < n * L; x++)
        ab[x] = 1000.0;
    const struct vpass *ref = &c->p[0][C_BOTH];
    struct vpass p[2];
    double m = 0.0, *sum1, *w1, *o1;
    bool finite = true;
    /* softmax1 of s + 1000 is the standard weights times the row sum
     * S/(e^-(max+1000) + S): 1 unless the row's scores lie near -1000 */
    NEED(sum1 = verify_dbl(c, n, 1));
    NEED(w1 = verify_dbl(c, n, L));
    NEED(o1 = verify_dbl(c, n, dv));
    for (size_t i = 0; i < n; i++) {
        sum1[i] = softmax1_sum(ref->s + i * L, L, -1000.0);
        for (size_t j = 0; j < L; j++)
            w1[i * L + j] = sum1[i] * ref->w[i * L + j];
        for (size_t d = 0; d < dv; d++)
            o1[i * dv + d] = sum1[i] * ref->o[i * dv + d];
    }
    for (int v = 0; v < 2; v++) {
        struct vrun r = verify_base_run(c, v ? ATTN_SOFTMAX_ONE : ATTN_SOFTMAX_STANDARD,
                               C_BOTH);
        r.attn_bias = ab;
        TRY(verify_pass(c, &r, &p[v]));
        finite = finite && all_finite(p[v].s, n * L) &&
                 all_finite(p[v].w, n * L) && all_finite(p[v].o, n * dv);
        m = verify_max2(m, verify_maxdiff(p[v].w, v ? w1 : ref->w, n * L));
        m = verify_max2(m, verify_maxdiff(p[v].o, v ? o1 : ref->o, n * dv));
    }
    ck->max_abs_diff = m;
    /* s + 1000 rounds each score by up to 1000 units of rounding: the base
     * tolerance allows for that in weights of at most 1, and an output,
     * sum_j p_ij v_j, carries the weights' error times max |v| */
    double vmax = 1.0;
    for (size_t x = 0; x < L * dv; x++)
        vmax = fmax(vmax, fabs(c->v[x]));
    ck->tolerance = fmax(ck->tolerance, c->tol * vmax);
    if (!finite) {
        ck->passed = false;
        verify_ck_note(ck, "A score, weight or output was not finite.");
    } else {
        verify_ck_note(ck, "1000 is added through attn_bias; the standard weights equal "
                "the unshifted ones, and the softmax1 weights equal them times the "
                "softmax1 row sum of the shifted scores (1 to rounding unless the "
                "scores lie near -1000, where the 1 in the denominator counts).");
    }
    TRY(verify_ck_num(ck, "score_shift", 1000.0));
    TRY(verify_ck_mat(ck, "weights_unshifted_standard", n, L, ref->w));
    TRY(verify_ck_mat(ck, "weights_shifted_standard", n, L, p[0].w));
    TRY(verify_ck_mat(ck, "weights_shifted_softmax1", n, L, p[1].w));
    return verify_ck_vec(ck, "row_sums_shifted_softmax1", n, sum1);
}

/* ---- check 17: sink ----------------------------------------------------- */

enum core_status verify_check_sink(struct vx *c, struct verify_check *ck)
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

/* ---- check 19: softmax1 weights rise with their own score -------------- */

enum core_status verify_check_own_score(struct vx *c, struct verify_check *ck)
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
            /* a weight saturated at 1 (or too small to move) cannot
             * show its rise: it must then at least not fall */
            if (j == jb && (pred[x] - a->w[x] > ck->tolerance
                                ? !(b.w[x] > a->w[x])
                                : !(b.w[x] >= a->w[x])))
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
                "counted from 0) by 1 through attn_bias; its weight must rise where "
                "the predicted rise exceeds the tolerance, and not fall elsewhere.");
    }
    TRY(verify_ck_vec(ck, "bumped_key", n, key));
    TRY(verify_ck_mat(ck, "weights_before", n, L, a->w));
    TRY(verify_ck_mat(ck, "weights_after", n, L, b.w));
    return verify_ck_mat(ck, "weights_predicted", n, L, pred);
}
