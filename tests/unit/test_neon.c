/*
 * tests/unit/test_neon.c — the NEON loops of core/simd_neon.h against long
 * double references written here: exp over its whole clamped range (every
 * 2^-10 step, both ends, -inf, subnormal results), exp(x - shift) with its
 * sum at every tail length, and dot, axpy, axpy4 at every length up to 300
 * (each vector step and tail). Runs on aarch64 (make test-arm64, under
 * qemu-aarch64); on other CPUs it checks that the header defines nothing.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "core/simd_neon.h"

#ifdef ATTN_NEON

static uint64_t rng = 0x9E3779B97F4A7C15ull;

/* uniform in [lo, hi) */
static float uni(float lo, float hi)
{
    return lo + (hi - lo) * (float)(t_rng_next(&rng) >> 40) * 0x1p-24f;
}

/* exp(x) of one float through the 4-lane form (the value in every lane). */
static float exp1(float x)
{
    return vgetq_lane_f32(neon_exp4(vdupq_n_f32(x)), 2);
}

/* Error of got against the long double e, in units of the float spacing
 * at e (subnormal results: of 2^-149). */
static double ulps(float got, long double e)
{
    long double sp = e < (long double)FLT_MIN ? 0x1p-149L
                                             : ldexpl((long double)FLT_EPSILON, ilogbl(e));
    return (double)(fabsl((long double)got - e) / sp);
}

TEST(exp_whole_range)
{
    double worst = 0, worst_sub = 0;
    int bad = 0;
    float step = t_quick() ? 0x1p-6f : 0x1p-10f;
    for (float x = -104.0f; x <= 88.0f; x += step) {
        long double e = expl((long double)x);
        float g = exp1(x);
        double u = ulps(g, e);
        if (e < (long double)FLT_MIN) {
            worst_sub = u > worst_sub ? u : worst_sub;
            bad += u > 1.0;                     /* one rounding of a subnormal */
        } else {
            worst = u > worst ? u : worst;
            bad += u > 4.0;
        }
        bad += !isfinite(g) || g < 0;
    }
    printf("  exp: worst %.2f ulp (normal results), %.2f x 2^-149 (subnormal)\n", worst,
           worst_sub);
    CHECK_EQ_INT(bad, 0);
    CHECK(exp1(0.0f) == 1.0f);
    CHECK(exp1(-0.0f) == 1.0f);
    CHECK(exp1(-INFINITY) == 0.0f);
    CHECK(exp1(-200.0f) == 0.0f);
    CHECK(exp1(-87.5f) > 0.0f && exp1(-87.5f) < FLT_MIN);   /* subnormal, not flushed */
    CHECK(isfinite(exp1(88.0f)) && exp1(88.0f) > 1e38f);
}

/* The four lanes are independent: a different x in each. */
TEST(exp_lanes)
{
    float in[4] = {-1.0f, 0.0f, -50.5f, 3.25f}, out[4];
    vst1q_f32(out, neon_exp4(vld1q_f32(in)));
    for (int i = 0; i < 4; i++)
        CHECK(ulps(out[i], expl((long double)in[i])) <= 4.0);
}

TEST(exp_shift_every_tail)
{
    static float x[64], y[64];
    int bad = 0;
    for (size_t n = 0; n <= 37; n++) {
        for (size_t i = 0; i < n; i++)
            x[i] = i % 7 == 3 ? -INFINITY : uni(-30.0f, 0.0f);
        float sh = uni(-2.0f, 2.0f);
        long double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += expl((long double)x[i] - (long double)sh);
        y[n] = 12345.0f;                        /* not written past n */
        double sum = neon_exp_shift_f32(x, y, n, sh);
        for (size_t i = 0; i < n; i++)
            bad += ulps(y[i], expl((long double)(x[i] - sh))) > 4.0;
        bad += fabsl((long double)sum - ref) > 1e-6L * ref + 1e-30L;
        bad += y[n] != 12345.0f;
        /* in place (y = x), as the softmax calls it */
        memcpy(y, x, n * sizeof *x);
        double sum2 = neon_exp_shift_f32(y, y, n, sh);
        bad += sum2 != sum;
    }
    CHECK_EQ_INT(bad, 0);
}

static long double dot_ref(const float *a, const float *b, size_t d, long double *mag)
{
    long double s = 0, m = 0;
    for (size_t i = 0; i < d; i++) {
        s += (long double)a[i] * b[i];
        m += fabsl((long double)a[i] * b[i]);
    }
    *mag = m;
    return s;
}

TEST(dot_every_length)
{
    static float a[300], b[300];
    int bad = 0;
    for (size_t d = 0; d <= 300; d++) {
        for (size_t i = 0; i < d; i++) {
            a[i] = uni(-1, 1);
            b[i] = uni(-2, 2);
        }
        long double mag, ref = dot_ref(a, b, d, &mag);
        float g = neon_dot_f32(a, b, d);
        /* 16 partial sums of at most d/16 + 1 terms, then 4 levels */
        bad += fabsl((long double)g - ref) > (long double)FLT_EPSILON * (d / 16 + 6) * mag +
                                                  1e-30L;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(neon_dot_f32(a, b, 0) == 0.0f);
}

TEST(axpy_every_length)
{
    static float o[301], o4[301], x[4 * 300], w[4];
    static long double r[300], r4[300];
    int bad = 0;
    for (size_t d = 0; d <= 300; d += d < 40 ? 1 : 13) {
        for (int k = 0; k < 4; k++)
            w[k] = uni(-1, 1);
        for (size_t i = 0; i < d; i++) {
            o[i] = o4[i] = uni(-1, 1);
            r[i] = r4[i] = o[i];
            for (int k = 0; k < 4; k++)
                x[k * d + i] = uni(-3, 3);
            r[i] += (long double)w[0] * x[i];
            for (int k = 0; k < 4; k++)
                r4[i] += (long double)w[k] * x[k * d + i];
        }
        o[d] = o4[d] = 777.0f;                  /* not written past d */
        neon_axpy_f32(o, w[0], x, d);
        neon_axpy4_f32(o4, w, x, x + d, x + 2 * d, x + 3 * d, d);
        for (size_t i = 0; i < d; i++) {
            bad += fabsl((long double)o[i] - r[i]) > 4 * (long double)FLT_EPSILON * 4;
            bad += fabsl((long double)o4[i] - r4[i]) > 8 * (long double)FLT_EPSILON * 14;
        }
        bad += o[d] != 777.0f || o4[d] != 777.0f;
    }
    CHECK_EQ_INT(bad, 0);
}

int main(void)
{
    RUN(exp_whole_range);
    RUN(exp_lanes);
    RUN(exp_shift_every_tail);
    RUN(dot_every_length);
    RUN(axpy_every_length);
    TEST_MAIN_END();
}

#else

/* Not aarch64: the header must leave every other build untouched. */
TEST(nothing_outside_aarch64)
{
#if defined(__aarch64__)
    CHECK(!"aarch64 without __ARM_NEON: the NEON loops are not built");
#endif
    printf("  (not aarch64: core/simd_neon.h defines nothing here)\n");
}

int main(void)
{
    RUN(nothing_outside_aarch64);
    TEST_MAIN_END();
}

#endif
