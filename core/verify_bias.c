/*
 * core/verify_bias.c — the checks of /v1/verify about query and key biases
 * under standard softmax (ids 1-8 and 18): the base scores, a common key
 * bias as a per-row constant, a query bias's relative scores, the four-term
 * decomposition, every query row, the query-bias exception (over all keys
 * and over the allowed keys), and a per-key shift as a counterexample.
 *
 * The core's side comes from the shared passes of core/verify.c
 * (verify_pass); the other side is plain double arithmetic done here.
 */
#include "verify_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks 1-6: biases under standard softmax ------------------------- */

enum core_status verify_check_base_scores(struct vx *c, struct verify_check *ck)
{
    double *ref;
    NEED(ref = verify_dbl(c, c->n, c->L));
    verify_ref_scores(c, c->q, c->n, c->k, c->L, ref);
    ck->max_abs_diff = verify_maxdiff(c->p[0][C_NONE].s, ref, c->n * c->L);
    TRY(verify_ck_mat(ck, "scores_core", c->n, c->L, c->p[0][C_NONE].s));
    TRY(verify_ck_mat(ck, "scores_reference", c->n, c->L, ref));
    return verify_ck_num(ck, "scale", c->scale);
}

enum core_status verify_check_k_row_constant(struct vx *c,
                                             struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    size_t n = c->n, L = c->L;
    const struct vpass *a = &c->p[0][C_NONE], *b = &c->p[0][C_K];
    double *shift, *cst;
    NEED(shift = verify_sub(c, b->s, a->s, n * L));
    NEED(cst = verify_dbl(c, n, 1));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        cst[i] = c->scale * verify_dot(c->q + i * c->dk, c->bk, c->dk);
        for (size_t j = 0; j < L; j++)
            m = verify_max2(m, fabs(shift[i * L + j] - cst[i]));
    }
    ck->max_abs_diff = m;
    TRY(verify_ck_mat(ck, "scores_without_k_bias", n, L, a->s));
    TRY(verify_ck_mat(ck, "scores_with_k_bias", n, L, b->s));
    TRY(verify_ck_mat(ck, "score_shift", n, L, shift));
    return verify_ck_vec(ck, "row_constant", n, cst);
}

enum core_status verify_check_k_weights(struct vx *c, struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    const struct vpass *a = &c->p[0][C_NONE], *b = &c->p[0][C_K];
    ck->max_abs_diff = verify_max2(verify_maxdiff(a->w, b->w, c->n * c->L),
                                   verify_maxdiff(a->o, b->o, c->n * c->dv));
    TRY(verify_ck_mat(ck, "weights_without_k_bias", c->n, c->L, a->w));
    TRY(verify_ck_mat(ck, "weights_with_k_bias", c->n, c->L, b->w));
    TRY(verify_ck_mat(ck, "output_without_k_bias", c->n, c->dv, a->o));
    return verify_ck_mat(ck, "output_with_k_bias", c->n, c->dv, b->o);
}

enum core_status verify_check_q_relative(struct vx *c, struct verify_check *ck)
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
            m = verify_max2(m, fabs(chg[x] - exp_chg[j]));
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
    verify_ref_scores(c, q, n, c->k, L, t->qk);
    verify_ref_scores(c, bq, 1, c->k, L, t->bqk);
    for (size_t i = 1; i < n; i++)
        memcpy(t->bqk + i * L, t->bqk, L * sizeof(double));
    for (size_t i = 0; i < n; i++)
        t->qbk[i] = c->scale * verify_dot(q + i * dk, bk, dk);
    t->bqbk = c->scale * verify_dot(bq, bk, dk);
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
        m = verify_max2(m, fabs(both[x] - sum));
        m = verify_max2(m, fabs((both[x] - qonly[x]) - (t->qbk[i] + t->bqbk)));
    }
    return m;
}

enum core_status verify_check_four_terms(struct vx *c, struct verify_check *ck)
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
        m = verify_max2(m, terms_row_diff(c, &t, c->p[0][C_BOTH].s,
                                          c->p[0][C_Q].s, i, sum));
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
    double cst = c->scale * verify_dot(q + i * dk, c->bk ? c->bk : c->zk, dk);
    double m = terms_row_diff(c, t, p[C_BOTH].s, p[C_Q].s, i, NULL);
    for (size_t j = 0; j < L; j++) {
        size_t x = i * L + j, x0 = i * L;
        double e4 = 0.0;
        for (size_t d = 0; d < dk; d++)
            e4 += bq[d] * (c->k[j * dk + d] - c->k[d]);
        m = verify_max2(m, fabs(p[C_K].s[x] - p[C_NONE].s[x] - cst));
        m = verify_max2(m, fabs(p[C_K].w[x] - p[C_NONE].w[x]));
        m = verify_max2(m, fabs((p[C_Q].s[x] - p[C_Q].s[x0]) -
                         (p[C_NONE].s[x] - p[C_NONE].s[x0]) - c->scale * e4));
    }
    return m;
}

enum core_status verify_check_every_row(struct vx *c, struct verify_check *ck)
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
        cst[i] = c->scale * verify_dot(qx + i * dk, c->bk ? c->bk : c->zk, dk);
        rowd[i] = rows_2_to_5(c, p, &t, qx, i);
        worst = verify_max2(worst, rowd[i]);
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
            double a = verify_dot(basis + b * d, x, d);
            for (size_t i = 0; i < d; i++)
                x[i] -= a * basis[b * d + i];
        }
}

/*
 * Orthonormal basis of span{k_j - k_1} into basis [d_k][d_k], its size into
 * *size. Modified Gram-Schmidt, hand-written because the problem is a few
 * vectors of d_k numbers and LAPACK is not a dependency of attnd. A
 * difference whose residual is below 1e-9 of its length is dependent.
 * O(L·d_k²) in all: each key is a piece of the request (CORE_ESTOPPED past
 * its deadline).
 */
static enum core_status key_diff_basis(const struct vx *c, double *basis, double *tmp,
                                       size_t *size)
{
    size_t nb = 0, dk = c->dk;
    for (size_t j = 1; j < c->L && nb < dk; j++) {
        if (attn_ws_boundary(c->ws))
            return CORE_ESTOPPED;
        for (size_t i = 0; i < dk; i++)
            tmp[i] = c->k[j * dk + i] - c->k[i];
        double n0 = verify_norm(tmp, dk);
        if (n0 == 0.0)
            continue;
        project_out(tmp, basis, nb, dk);
        double n1 = verify_norm(tmp, dk);
        if (n1 <= 1e-9 * n0)
            continue;
        for (size_t i = 0; i < dk; i++)
            basis[nb * dk + i] = tmp[i] / n1;
        nb++;
    }
    *size = nb;
    return CORE_OK;
}

/* A nonzero bQ with equal dot products with every key into out [d_k]:
 * bias.q projected onto the null space of the key differences, else the
 * unit basis vector whose projection is longest (each a piece of the
 * request). *found false when only 0 works. */
static enum core_status exception_bq(struct vx *c, const double *basis, size_t nb,
                                     double *out, struct verify_check *ck, bool *found)
{
    size_t dk = c->dk;
    *found = true;
    if (c->bq) {
        memcpy(out, c->bq, dk * sizeof(double));
        double n0 = verify_norm(out, dk);
        project_out(out, basis, nb, dk);
        double n1 = verify_norm(out, dk);
        if (n0 > 0.0 && n1 >= n0 * (1.0 - 1e-12)) {
            memcpy(out, c->bq, dk * sizeof(double));
            verify_ck_note(ck, "bias.q already has equal dot products with every key.");
            return CORE_OK;
        }
        if (n0 > 0.0 && n1 > 1e-9 * n0) {
            verify_ck_note(ck, "bQ is bias.q projected onto the directions orthogonal "
                    "to every key difference k_j - k_1.");
            return CORE_OK;
        }
    }
    double best = 0.0;
    size_t bi = 0;
    for (size_t e = 0; e < dk; e++) {
        if (attn_ws_boundary(c->ws))
            return CORE_ESTOPPED;
        memset(out, 0, dk * sizeof(double));
        out[e] = 1.0;
        project_out(out, basis, nb, dk);
        double n1 = verify_norm(out, dk);
        if (n1 > best) {
            best = n1;
            bi = e;
        }
    }
    if (best <= 1e-9) {
        *found = false;
        return CORE_OK;
    }
    memset(out, 0, dk * sizeof(double));
    out[bi] = 1.0;
    project_out(out, basis, nb, dk);
    for (size_t i = 0; i < dk; i++)
        out[i] /= best;
    verify_ck_note(ck, "bQ is the unit vector e_%zu projected onto the directions "
            "orthogonal to every key difference k_j - k_1, then normalised.",
            bi + 1);
    return CORE_OK;
}

/* Whether check 7 applies: whether it finds a nonzero bQ with equal dot
 * products with every key. Fewer than d_k key differences cannot span
 * every direction, so it always does then; else as the check decides. */
enum core_status verify_q_exception_applies(struct vx *c, bool *applies)
{
    size_t dk = c->dk;
    double *basis, *tmp, *bq;
    struct verify_check notes = {0};

    *applies = true;
    if (c->L - 1 < dk)
        return CORE_OK;
    NEED(basis = verify_dbl(c, dk, dk));
    NEED(tmp = verify_dbl(c, dk, 1));
    NEED(bq = verify_dbl(c, dk, 1));
    size_t nb;
    enum core_status st = key_diff_basis(c, basis, tmp, &nb);
    if (st == CORE_OK)
        st = exception_bq(c, basis, nb, bq, &notes, applies);
    free(notes.note);
    return st;
}

enum core_status verify_check_q_exception(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk;
    double *basis, *tmp, *bq, *dots, *shift;
    NEED(basis = verify_dbl(c, dk, dk));
    NEED(tmp = verify_dbl(c, dk, 1));
    NEED(bq = verify_dbl(c, dk, 1));
    size_t nb;
    bool found;
    TRY(key_diff_basis(c, basis, tmp, &nb));
    TRY(verify_ck_num(ck, "key_difference_rank", (double)nb));
    TRY(exception_bq(c, basis, nb, bq, ck, &found));
    if (!found)
        return verify_ck_na(ck, "The key differences k_j - k_1 span every direction, "
                     "so only bQ = 0 has equal dot products with all keys.");
    verify_round(c, bq, dk);
    NEED(dots = verify_dbl(c, L, 1));
    for (size_t j = 0; j < L; j++)
        dots[j] = verify_dot(bq, c->k + j * dk, dk);
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    struct vpass p;
    r.bq = bq;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *a = &c->p[0][C_NONE];
    NEED(shift = verify_sub(c, p.s, a->s, n * L));
    double m = verify_max2(verify_maxdiff(p.w, a->w, n * L),
                           verify_maxdiff(p.o, a->o, n * c->dv));
    for (size_t x = 0; x < n * L; x++)
        m = verify_max2(m, fabs(shift[x] - c->scale * dots[0]));
    ck->max_abs_diff = m;
    TRY(verify_ck_vec(ck, "bias_q_used", dk, bq));
    TRY(verify_ck_vec(ck, "bias_q_dot_k", L, dots));
    TRY(verify_ck_mat(ck, "score_shift", n, L, shift));
    TRY(verify_ck_mat(ck, "weights_without_q_bias", n, L, a->w));
    return verify_ck_mat(ck, "weights_with_q_bias", n, L, p.w);
}

/* ---- check 8: a per-key shift ------------------------------------------ */

enum core_status verify_check_per_key_shift(struct vx *c,
                                            struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk, best = 0;
    if (L < 2)
        return verify_ck_na(ck, "With one key every weight is 1, whatever the shift.");
    for (size_t i = 1; i < n; i++)
        if (verify_norm(c->q + i * dk, dk) > verify_norm(c->q + best * dk, dk))
            best = i;
    const double *qr = c->q + best * dk;
    double qn = verify_norm(qr, dk);
    if (qn == 0.0)
        return verify_ck_na(ck, "Every query row is zero, so no key shift can change "
                     "a score.");
    double *delta, *kx, *shift;
    NEED(delta = verify_dbl(c, L, dk));
    NEED(kx = verify_dbl(c, L, dk));
    for (size_t j = 0; j < L; j++)
        for (size_t d = 0; d < dk; d++) {
            double t = (double)j / (double)(L - 1);
            /* q/(scale |q|^2) as (q/|q|)/(scale |q|): |q|^2 overflows past 1e154 */
            delta[j * dk + d] = t * (qr[d] / qn) / (c->scale * qn);
        }
    verify_round(c, delta, L * dk);
    for (size_t x = 0; x < L * dk; x++)
        kx[x] = c->k[x] + delta[x];
    verify_round(c, kx, L * dk);
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    struct vpass p;
    r.k = kx;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *a = &c->p[0][C_NONE];
    NEED(shift = verify_sub(c, p.s, a->s, n * L));
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

/* ---- check 18: the exception over the allowed keys ---------------------- */

/* Whether two keys' bQ.k agree: within 1e-12 of the larger (or of 1). */
static bool same_dot(double a, double b)
{
    return fabs(b - a) <= 1e-12 * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* The largest group of keys whose bQ.k_j agree (same_dot with one of them)
 * into allowed [L] (1 = in the group), its size into *size. O(L²): each
 * key is a piece of the request (CORE_ESTOPPED past its deadline). */
static enum core_status equal_dot_group(const struct vx *c, const double *dots,
                                        uint8_t *allowed, size_t *size)
{
    size_t best = 0, bj = 0, L = c->L;
    for (size_t j = 0; j < L; j++) {
        if (attn_ws_boundary(c->ws))
            return CORE_ESTOPPED;
        size_t cnt = 0;
        for (size_t k = 0; k < L; k++)
            cnt += same_dot(dots[j], dots[k]);
        if (cnt > best) {
            best = cnt;
            bj = j;
        }
    }
    for (size_t k = 0; k < L; k++)
        allowed[k] = same_dot(dots[bj], dots[k]);
    *size = best;
    return CORE_OK;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Whether check 18 applies: bias.q given and two keys whose bQ.k_j agree
 * (equal_dot_group finds a group of 2), found in O(L log L): of a sorted
 * a <= b <= c with a, c agreeing, b agrees with the one of larger |x| (it
 * lies closer to both, and that one's margin is the pair's). A dot that is
 * not finite counts as applicable. */
enum core_status verify_q_allowed_applies(struct vx *c, bool *applies)
{
    size_t L = c->L, dk = c->dk;
    double *dots;

    *applies = c->bq != NULL;
    if (!c->bq)
        return CORE_OK;
    NEED(dots = verify_dbl(c, L, 1));
    for (size_t j = 0; j < L; j++)
        if (!isfinite(dots[j] = verify_dot(c->bq, c->k + j * dk, dk)))
            return CORE_OK;
    qsort(dots, L, sizeof *dots, by_value);
    *applies = false;
    for (size_t j = 1; j < L && !*applies; j++)
        *applies = same_dot(dots[j - 1], dots[j]);
    return CORE_OK;
}

enum core_status verify_check_q_allowed(struct vx *c, struct verify_check *ck)
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
        dots[j] = verify_dot(c->bq, c->k + j * dk, dk);
    size_t g;
    TRY(equal_dot_group(c, dots, allowed, &g));
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
    ck->max_abs_diff = verify_max2(verify_maxdiff(a.w, b.w, n * L),
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
