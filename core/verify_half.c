/*
 * core/verify_half.c — the half-precision checks of /v1/verify (ids 26 and
 * 27): what half precision does to attention.
 *
 * kv_dtype_bound: the request's q, k, v through a float32 session cache and
 * through float16, bfloat16 and int8 caches (core/kv.c narrows the rows);
 * each output's largest difference from the float32 cache's against a bound
 * derived apart from the code. With per-element storage errors |Δk| <= e_k,
 * |Δv| <= e_v (float16: 2^-11|x| + 2^-25, bfloat16: 2^-8|x| + 2^-134, int8:
 * max|row|/254), every score moves by at most ε = scale·max_j Σ_c |q_c|·e_k,
 * so every weight by a factor within e^{±2ε}: Σ_j|Δp_j| <= e^{2ε} - 1, and
 * |Δout| <= (e^{2ε} - 1)·(max|v| + e_v) + e_v, plus 1e-5·(max|v| + 1) for
 * the float32 arithmetic of two different loops.
 *
 * beit_key_bias_float16: BEiT dropped the key bias for float16 stability.
 * A common key bias bK is invisible to the weights in exact arithmetic, but
 * a half-precision projection produces k0 + bK rounded to float16, and at
 * |x| ~ 1000 the float16 spacing is 0.5: k0's bits are lost. For bK = s·u
 * (u the request's key bias direction, or all ones) and growing s, the
 * weights of the float16 computation (q and k0 + s·u rounded to float16,
 * scores in float32 rounded to float16) against float64's, next to the
 * float64 weights' own change, and the first s (doubling) at which a float16
 * score overflows.
 */
#include "verify_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv.h"

/* ---- kv_dtype_bound ---------------------------------------------------- */

static double elem_err(enum kv_store st, double x, double row_max)
{
    if (st == KV_STORE_F16)
        return ldexp(fabs(x), -11) + 0x1p-25;
    if (st == KV_STORE_BF16)
        return ldexp(fabs(x), -8) + 0x1p-134;
    return row_max / 254.0;
}

static double row_max(const double *r, size_t d)
{
    double m = 0;
    for (size_t i = 0; i < d; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

/* The bound of the header for store st. */
static double kv_bound(const struct vx *c, enum kv_store st)
{
    double eps = 0, vmax = 0, ev = 0;
    for (size_t i = 0; i < c->n; i++)
        for (size_t j = 0; j < c->L; j++) {
            const double *k = c->k + j * c->dk, *q = c->q + i * c->dk;
            double rm = row_max(k, c->dk), e = 0;
            for (size_t t = 0; t < c->dk; t++)
                e += fabs(q[t]) * elem_err(st, k[t], rm);
            eps = e * c->scale > eps ? e * c->scale : eps;
        }
    for (size_t j = 0; j < c->L; j++) {
        const double *v = c->v + j * c->dv;
        double rm = row_max(v, c->dv);
        vmax = rm > vmax ? rm : vmax;
        for (size_t t = 0; t < c->dv; t++)
            ev = elem_err(st, v[t], rm) > ev ? elem_err(st, v[t], rm) : ev;
    }
    return expm1(2 * eps) * (vmax + ev) + ev + 1e-5 * (vmax + 1);
}

/* q, k, v (float32) through a cache stored as st -> out [n][d_v]. */
static enum core_status kv_output(struct vx *c, enum kv_store st, const float *q,
                                  const float *k, const float *v, float *out)
{
    struct kv_cache *kv = kv_new_store(ATTN_F32, st, 1, c->dk, c->dv);
    if (!kv)
        return CORE_ENOMEM;
    enum core_status rc = kv_append_prepared(kv, k, v, c->L);
    if (rc == CORE_OK) {
        struct attn_request r = {.shape = {1, 1, c->n, c->L, c->dk, c->dv, 0},
                                 .params = {.dtype = ATTN_F32, .scale = c->scale},
                                 .outputs = ATTN_OUT_OUTPUT};
        struct attn_inputs in = {.q = q};
        struct attn_result res = {.output = out};
        rc = kv_attend(kv, &r, &in, &res, NULL);
    }
    kv_free(kv);
    return rc;
}

static float *to_float(struct vx *c, const double *x, size_t n)
{
    float *f = verify_bytes(c, n, sizeof(float));
    for (size_t i = 0; f && i < n; i++)
        f[i] = (float)x[i];
    return f;
}

enum core_status verify_check_kv_dtypes(struct vx *c, struct verify_check *ck)
{
    static const enum kv_store st[3] = {KV_STORE_F16, KV_STORE_BF16, KV_STORE_I8};
    size_t no = c->n * c->dv;
    float *q, *k, *v, *ref, *out;
    double diff[3], bound[3], excess = 0;

    NEED(q = to_float(c, c->q, c->n * c->dk));
    NEED(k = to_float(c, c->k, c->L * c->dk));
    NEED(v = to_float(c, c->v, c->L * c->dv));
    NEED(ref = verify_bytes(c, no, sizeof(float)));
    NEED(out = verify_bytes(c, no, sizeof(float)));
    if (kv_output(c, KV_STORE_SAME, q, k, v, ref) != CORE_OK)
        return verify_ck_na(ck, "q, k and v do not fit float32 attention.");
    for (int s = 0; s < 3; s++) {
        enum core_status rc = kv_output(c, st[s], q, k, v, out);
        if (rc == CORE_ENONFINITE)
            return verify_ck_na(ck, "k or v lie outside float16's range (65504).");
        TRY(rc);
        diff[s] = 0;
        for (size_t i = 0; i < no; i++)
            diff[s] = fabs((double)out[i] - ref[i]) > diff[s] ? fabs((double)out[i] - ref[i])
                                                               : diff[s];
        bound[s] = kv_bound(c, st[s]);
        excess = diff[s] - bound[s] > excess ? diff[s] - bound[s] : excess;
    }
    ck->max_abs_diff = excess;
    ck->precision_study = true;
    verify_ck_note(ck, "Standard softmax without biases over the request's q, k, v; "
                   "max_abs_diff is how far the largest difference exceeds its bound "
                   "(0 when every kv_dtype stays within it). Arrays in the order "
                   "float16, bfloat16, int8. Bound: with |dk| <= e_k, |dv| <= e_v per "
                   "element (float16 2^-11|x| + 2^-25, bfloat16 2^-8|x| + 2^-134, "
                   "int8 max|row|/254), eps = scale*max_j sum_c |q_c| e_k, and "
                   "|d out| <= (e^(2 eps) - 1)(max|v| + e_v) + e_v + 1e-5(max|v| + 1).");
    TRY(verify_ck_vec(ck, "max_abs_diff_vs_float32_cache", 3, diff));
    TRY(verify_ck_vec(ck, "bound", 3, bound));
    return CORE_OK;
}

/* ---- beit_key_bias_float16 ---------------------------------------------- */

/* Standard softmax weights of s [L] into p. */
static void softmax(const double *s, size_t L, double *p)
{
    double m = -INFINITY, z = 0;
    for (size_t j = 0; j < L; j++)
        m = s[j] > m ? s[j] : m;
    for (size_t j = 0; j < L; j++)
        z += p[j] = exp(s[j] - m);
    for (size_t j = 0; j < L; j++)
        p[j] /= z;
}

/* Row i's scores with k0 + size·u: float64 (s64), and the float16
 * computation's (s16); false when a float16 score overflows. */
static bool beit_scores(const struct vx *c, size_t i, const double *u, double size,
                        double *s64, double *s16)
{
    const double *q = c->q + i * c->dk;
    bool ok = true;
    for (size_t j = 0; j < c->L; j++) {
        double a = 0;
        float b = 0;
        for (size_t t = 0; t < c->dk; t++) {
            double kt = c->k[j * c->dk + t] + size * u[t];
            a += q[t] * kt;
            b += half_f16_to_f32(half_f16_from_f64(q[t])) *
                 half_f16_to_f32(half_f16_from_f64(kt));
        }
        uint16_t h = half_f16_from_f32(b * (float)c->scale);
        s64[j] = c->scale * a;
        s16[j] = half_f16_to_f32(h);
        ok = ok && half_f16_is_finite(h);
    }
    return ok;
}

/* True when every row's float64 scores without a bias are equal across
 * the keys: q cannot tell the keys apart, so no common bias can move a
 * weight in exact arithmetic, and float16 moves one only if rounding
 * treats the keys differently (the caller has seen that it does not). */
static bool beit_keys_alike(const struct vx *c, const double *u, double *s64, double *s16)
{
    for (size_t i = 0; i < c->n; i++) {
        beit_scores(c, i, u, 0, s64, s16);
        for (size_t j = 1; j < c->L; j++)
            if (s64[j] != s64[0])
                return false;
    }
    return true;
}

enum core_status verify_check_beit_key_bias(struct vx *c, struct verify_check *ck)
{
    static const double sizes[VERIFY_BEIT_SIZES] = {0, 1, 10, 100, 1000, 3000, 10000};
    double *u, *s64, *s16, *p0, *p64, *p16, err16[VERIFY_BEIT_SIZES], chg64[VERIFY_BEIT_SIZES];
    double worst = 0, overflow = -1, un = 0;
    size_t L = c->L;
    bool measured = false;          /* some size of a bias left every float16
                                       score finite */

    double qmax = 0;
    for (size_t i = 0; i < c->n * c->dk; i++)
        qmax = fabs(c->q[i]) > qmax ? fabs(c->q[i]) : qmax;
    if (L < 2)
        return verify_ck_na(ck, "One key: its weight is 1 whatever the scores.");
    if (!(qmax > 0))
        return verify_ck_na(ck, "q is zero: every score is 0 whatever the keys.");
    NEED(u = verify_dbl(c, 1, c->dk));
    NEED(s64 = verify_dbl(c, 1, L));
    NEED(s16 = verify_dbl(c, 1, L));
    NEED(p0 = verify_dbl(c, 1, L));
    NEED(p64 = verify_dbl(c, 1, L));
    NEED(p16 = verify_dbl(c, 1, L));
    for (size_t t = 0; t < c->dk; t++) {        /* the bias direction, |u|_inf = 1 */
        u[t] = c->bk ? c->bk[t] : 1.0;
        un = fabs(u[t]) > un ? fabs(u[t]) : un;
    }
    if (!(un > 0))
        for (size_t t = 0; t < c->dk; t++)
            u[t] = un = 1.0;
    for (size_t t = 0; t < c->dk; t++)
        u[t] /= un;
    for (int z = 0; z < VERIFY_BEIT_SIZES; z++) {
        err16[z] = chg64[z] = 0;
        for (size_t i = 0; i < c->n; i++) {
            beit_scores(c, i, u, 0, s64, s16);
            softmax(s64, L, p0);
            if (!beit_scores(c, i, u, sizes[z], s64, s16)) {
                err16[z] = chg64[z] = NAN;      /* overflowed: printed as null */
                break;
            }
            softmax(s64, L, p64);
            softmax(s16, L, p16);
            for (size_t j = 0; j < L; j++) {
                err16[z] = fmax(err16[z], fabs(p16[j] - p0[j]));
                chg64[z] = fmax(chg64[z], fabs(p64[j] - p0[j]));
            }
        }
        if (z > 0 && isfinite(err16[z])) {  /* size 0's error is no bias's */
            worst = err16[z] > worst ? err16[z] : worst;
            measured = true;
        }
    }
    if (!measured)
        return verify_ck_na(ck, "A float16 score overflows (past 65504) at every size of "
                            "bK from 1 on: q and k are too large for float16 to show "
                            "the loss.");
    if (!(worst > c->tol) && beit_keys_alike(c, u, s64, s16))
        return verify_ck_na(ck, "q gives every key the same score in every row, and float16 "
                            "rounding moved no weight: these keys cannot show the loss.");
    for (double s = 1; s < 1e9 && overflow < 0; s *= 2)
        for (size_t i = 0; i < c->n && overflow < 0; i++)
            if (!beit_scores(c, i, u, s, s64, s16))
                overflow = s;
    ck->expect_change = true;
    ck->precision_study = true;
    ck->max_abs_diff = worst;
    verify_ck_note(ck, "bK = size*u with u the request's key bias scaled to max|u| = 1 "
                   "(all ones without one). weight_error_float16: max |p - p0| of the "
                   "float16 computation (q and k0 + bK rounded to float16, scores in "
                   "float32 then float16) against the float64 weights without bias; "
                   "weight_change_float64: the float64 weights with bK against those "
                   "without (exact arithmetic would give 0); null where a float16 score "
                   "overflowed. max_abs_diff: the largest weight_error_float16 with a "
                   "bias (size 1 on). overflow_size: the first size (doubling from 1) at "
                   "which a float16 score overflows (-1: none below 1e9).");
    TRY(verify_ck_vec(ck, "bk_size", VERIFY_BEIT_SIZES, sizes));
    TRY(verify_ck_vec(ck, "weight_error_float16", VERIFY_BEIT_SIZES, err16));
    TRY(verify_ck_vec(ck, "weight_change_float64", VERIFY_BEIT_SIZES, chg64));
    TRY(verify_ck_num(ck, "overflow_size", overflow));
    return CORE_OK;
}
