/*
 * tests/unit/test_simd_x86.c — the x86 functions of core/simd256.h and
 * core/simd512.h. The AVX2 ones against long double references written
 * here: tanh over every non-negative float (every float for its range and
 * steps, a sample for its error, which needs tanhl), its oddness, zeros,
 * infinities and NaN; 2^x over the range the softmax feeds it. The AVX-512
 * tanh is the same operations on 16 lanes: it must give the AVX2 one's
 * bits on every float of that walk, negative ones and special values too,
 * so everything checked of the one holds for the other. Each part runs
 * where the CPU has its instructions; elsewhere the test says so.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/harness.h"
#include "core/simd256.h"
#include "core/simd512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

static int cpu_ok(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_512(void)
{
    return cpu_ok() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* tanh of 8 consecutive floats from bit pattern b (b..b+7·step) */
SIMD256_FN void tanh8_bits(uint32_t b, uint32_t step, float out[8])
{
    __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                       _mm256_set1_epi32((int)step));
    __m256i bits = _mm256_add_epi32(_mm256_set1_epi32((int)b), lanes);
    _mm256_storeu_ps(out, simd_tanh8(_mm256_castsi256_ps(bits)));
}

SIMD256_FN void tanh8_vals(const float in[8], float out[8])
{
    _mm256_storeu_ps(out, simd_tanh8(_mm256_loadu_ps(in)));
}

SIMD256_FN void exp2_8_vals(const float in[8], float out[8])
{
    _mm256_storeu_ps(out, simd_exp2_8(_mm256_loadu_ps(in)));
}

/* What a walk over floats in order saw of tanh: its largest fall from one
 * float to the next, its least and largest value, and how many results
 * were NaN (which max and min would drop). */
struct walk {
    float last, worst_back, lo, hi;
    long nans;
};

/* tanh of the floats with bit patterns b0, b0 + step, ... below b1 (b1 -
 * b0 a multiple of 8·step) in order, into w; all in registers, since the
 * dense part of the walk is a billion floats. */
SIMD256_FN void walk_tanh(uint32_t b0, uint32_t b1, uint32_t step, struct walk *w)
{
    const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32((int)step));
    const __m256i shift = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    __m256 last = _mm256_set1_ps(w->last), back = _mm256_set1_ps(w->worst_back);
    __m256 lo = _mm256_set1_ps(w->lo), hi = _mm256_set1_ps(w->hi);
    __m256i nans = _mm256_setzero_si256();
    for (uint32_t b = b0; b < b1; b += 8 * step) {
        __m256i bits = _mm256_add_epi32(_mm256_set1_epi32((int)b), lanes);
        __m256 t = simd_tanh8(_mm256_castsi256_ps(bits));
        /* -1 in each NaN lane */
        nans = _mm256_sub_epi32(nans, _mm256_castps_si256(_mm256_cmp_ps(t, t, _CMP_UNORD_Q)));
        /* each lane's predecessor: lane 7 of the last step, then lanes 0-6 */
        __m256 before = _mm256_blend_ps(_mm256_permutevar8x32_ps(t, shift), last, 1);
        back = _mm256_max_ps(back, _mm256_sub_ps(before, t));
        lo = _mm256_min_ps(lo, t);
        hi = _mm256_max_ps(hi, t);
        last = _mm256_permutevar8x32_ps(t, _mm256_set1_epi32(7));
    }
    float v[4][8];
    int32_t nv[8];
    _mm256_storeu_si256((__m256i *)(void *)nv, nans);
    for (int i = 0; i < 8; i++)
        w->nans += nv[i];
    _mm256_storeu_ps(v[0], back);
    _mm256_storeu_ps(v[1], lo);
    _mm256_storeu_ps(v[2], hi);
    _mm256_storeu_ps(v[3], last);
    for (int i = 0; i < 8; i++) {
        w->worst_back = v[0][i] > w->worst_back ? v[0][i] : w->worst_back;
        w->lo = v[1][i] < w->lo ? v[1][i] : w->lo;
        w->hi = v[2][i] > w->hi ? v[2][i] : w->hi;
    }
    w->last = v[3][0];
}

/* Every non-negative float from 0 to 9.125 in order, then every 4099th to
 * +inf: tanh stays within [0, 1] and is 1 from 9.125 on. A rational form
 * rounded in float is not monotone to the last bit: from one float to the
 * next it may fall back, by at most 8·2^-24 (the worst seen is 7; the
 * error bound below allows 12). No reference needed, so every float is
 * run. */
TEST(tanh_bounded_and_near_monotone_on_every_float)
{
    if (!cpu_ok())
        return;
    const uint32_t dense = 0x41120000u, sparse = 8u * 4099;  /* 9.125 */
    struct walk w = {0, 0, 1, 0, 0}, top = {1, 0, 1, 0, 0};
    walk_tanh(0, dense, t_quick() ? 2193 : 1, &w);  /* 8·2193 divides dense */
    walk_tanh(dense, dense + (0x7f800000u - dense) / sparse * sparse, 4099, &top);
    printf("    tanh: falls back at most %g·2^-24 from one float to the next\n",
           (double)w.worst_back * 0x1p24);
    CHECK(w.worst_back <= 8 * 0x1p-24f);
    CHECK(w.nans == 0 && top.nans == 0);
    CHECK(w.lo == 0 && w.hi <= 1);
    CHECK(top.lo == 1 && top.hi == 1);   /* 1 from 9.125 on */
}

/* A sample of the non-negative floats (every 127th bit pattern, a prime so
 * the sample walks every mantissa pattern class): within 6·2^-24 of tanhl,
 * absolute and relative (the worst seen is 5.2 of each, near 8.8). */
TEST(tanh_error_against_long_double)
{
    if (!cpu_ok())
        return;
    const uint32_t end = 0x41200000u;   /* 10.0: tanh is 1 in float from ~8.7 */
    uint32_t step = t_quick() ? 6151 : 127;
    long double worst_abs = 0, worst_rel = 0;
    float at_abs = 0, at_rel = 0, out[8];
    for (uint32_t b = 0; b <= end; b += 8 * step) {
        tanh8_bits(b, step, out);
        for (int i = 0; i < 8; i++) {
            float x = from_bits(b + (uint32_t)i * step);
            long double e = tanhl((long double)x), d = fabsl((long double)out[i] - e);
            if (!(d <= worst_abs)) {            /* a NaN result counts as worst */
                worst_abs = d;
                at_abs = x;
            }
            if (e > 0 && !(d / e <= worst_rel)) {
                worst_rel = d / e;
                at_rel = x;
            }
        }
    }
    printf("    tanh: worst %.2Lf·2^-24 absolute at %.9g, %.2Lf·2^-24 relative at %.9g\n",
           worst_abs * 0x1p24L, (double)at_abs, worst_rel * 0x1p24L, (double)at_rel);
    CHECK(worst_abs <= 6 * 0x1p-24L);
    CHECK(worst_rel <= 6 * 0x1p-24L);
}

/* Odd to the bit, signed zeros kept, ±1 at the infinities and NaN kept. */
TEST(tanh_odd_and_special_values)
{
    if (!cpu_ok())
        return;
    uint64_t rng = 0x243F6A8885A308D3ull;
    for (int n = 0; n < t_cases(20000); n++) {
        float in[8], neg[8], a[8], b[8];
        for (int i = 0; i < 8; i++) {
            uint32_t bits = (uint32_t)(t_rng_next(&rng) >> 33) % 0x41300000u;  /* [0, 11) */
            in[i] = from_bits(bits);
            neg[i] = -in[i];
        }
        tanh8_vals(in, a);
        tanh8_vals(neg, b);
        for (int i = 0; i < 8; i++)
            CHECK(b[i] == -a[i]);
    }
    const float sp[8] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, -FLT_MAX, 0x1p-149f};
    float r[8];
    tanh8_vals(sp, r);
    CHECK(r[0] == 0 && !signbit(r[0]));
    CHECK(r[1] == 0 && signbit(r[1]));
    CHECK(r[2] == 1 && r[3] == -1);
    CHECK(isnan(r[4]));
    CHECK(r[5] == 1 && r[6] == -1);
    CHECK(r[7] == 0x1p-149f);
}

/* simd_tanh16 and simd_tanh8 of the same 16 floats: whether their bits
 * agree. */
__attribute__((target("avx512f,avx512dq,avx2,fma"))) static int same_tanh16(const float in[16])
{
    float a[16], b[16];
    _mm512_storeu_ps(a, simd_tanh16(_mm512_loadu_ps(in)));
    _mm256_storeu_ps(b, simd_tanh8(_mm256_loadu_ps(in)));
    _mm256_storeu_ps(b + 8, simd_tanh8(_mm256_loadu_ps(in + 8)));
    return memcmp(a, b, sizeof a) == 0;
}

/* simd_tanh16 gives simd_tanh8's bits on every non-negative float below
 * 9.125 (the walk above), every 4099th above it to +inf, random negative
 * floats and the special values. */
TEST(tanh16_same_bits_as_tanh8)
{
    if (!cpu_512()) {
        printf("    (no AVX-512F/DQ on this CPU: simd_tanh16 not run)\n");
        return;
    }
    const uint32_t dense = 0x41120000u, end = 0x7f800000u;
    uint32_t step = t_quick() ? 2193 : 1;
    long differ = 0;
    float in[16];
    for (uint32_t b = 0; b < end; ) {
        for (int i = 0; i < 16; i++) {
            uint32_t bits = b + (uint32_t)i * step;
            in[i] = from_bits(bits < end ? bits : end);
        }
        differ += !same_tanh16(in);
        uint32_t next = b + 16 * step;
        if (next < b)
            break;
        b = next;
        step = b >= dense ? 4099 : step;
    }
    uint64_t rng = 0x13198A2E03707344ull;
    for (int n = 0; n < t_cases(100000); n++) {
        for (int i = 0; i < 16; i++)
            in[i] = -from_bits((uint32_t)(t_rng_next(&rng) >> 33) % 0x41300000u);
        differ += !same_tanh16(in);
    }
    const float sp[16] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                          0x1p-149f, -0x1p-149f, 9.0f, -9.0f, 1e-30f, 0.625f, -4.5f, 20.0f};
    differ += !same_tanh16(sp);
    CHECK(differ == 0);
}

/* 2^x on [-127, 0] every 2^-12 step and at -inf: within 2 float ulps of
 * exp2l relative where the result is a normal float above 2^-126, and
 * never above 1 or below 0. */
TEST(exp2_against_long_double)
{
    if (!cpu_ok())
        return;
    long double worst = 0;
    float at = 0, in[8], out[8];
    float step = t_quick() ? 0x1p-6f : 0x1p-12f;
    long bad = 0;
    for (float x0 = -127.0f; x0 <= 0; x0 += 8 * step) {
        for (int i = 0; i < 8; i++)
            in[i] = fminf(x0 + (float)i * step, 0.0f);
        exp2_8_vals(in, out);
        for (int i = 0; i < 8; i++) {
            long double e = exp2l((long double)in[i]);
            bad += !(out[i] >= 0 && out[i] <= 1);
            if (e < 0x1p-126L)
                continue;
            long double r = fabsl((long double)out[i] - e) / e;
            if (r > worst) {
                worst = r;
                at = in[i];
            }
        }
    }
    printf("    exp2: worst %.2Lf·2^-24 relative at %.9g\n", worst * 0x1p24L, (double)at);
    CHECK(worst <= 4 * 0x1p-24L);
    CHECK(bad == 0);
    const float sp[8] = {-INFINITY, 0, -1, -126, -0.5f, -200, -1e30f, -0.0f};
    exp2_8_vals(sp, out);
    CHECK(out[0] == 0 && out[1] == 1 && out[2] == 0.5f && out[3] == 0x1p-126f);
    CHECK(fabsf(out[4] - 0.70710678f) <= 1e-7f);
    CHECK(out[5] == 0 && out[6] == 0 && out[7] == 1);
}

int main(void)
{
    if (!cpu_ok())
        printf("  (no AVX2+FMA on this CPU: nothing of core/simd256.h runs here)\n");
    RUN(tanh_bounded_and_near_monotone_on_every_float);
    RUN(tanh_error_against_long_double);
    RUN(tanh_odd_and_special_values);
    RUN(exp2_against_long_double);
    RUN(tanh16_same_bits_as_tanh8);
    TEST_MAIN_END();
}

#else

/* Not x86-64: the headers must leave every other build untouched. */
TEST(nothing_outside_x86)
{
#if defined(SIMD256_FN) || defined(SIMD512_FN)
    CHECK(!"core/simd256.h or simd512.h defines its functions outside x86-64");
#endif
    printf("  (not x86-64: core/simd256.h and simd512.h define nothing here)\n");
}

int main(void)
{
    RUN(nothing_outside_x86);
    TEST_MAIN_END();
}
#endif
