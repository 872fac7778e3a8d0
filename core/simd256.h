/*
 * core/simd256.h — the AVX2 exponential and tanh of the fused kernel of
 * core/attn_fused_avx2.c (scores in base 2, so the reduction is one
 * rounding); core/simd512.h has their AVX-512 twins.
 *
 * Why hand-written: inlined into the softmax loop, 8 lanes, no range
 * handling beyond what a softmax needs (as simd512.h).
 */
#ifndef ATTND_CORE_SIMD256_H
#define ATTND_CORE_SIMD256_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdint.h>

#include "simd_tanh.h"

/* Compiled for AVX2 + FMA whatever the build's -march (see simd512.h). */
#define SIMD256_FN static inline __attribute__((target("avx2,fma")))

/* c[0]·x^(n-1) + ... + c[n-1] by Horner's rule with fused multiply-adds
 * (simd512.h's simd_horner on 8 lanes; n a constant at every call). */
SIMD256_FN __m256 simd_horner8(__m256 x, const float *c, int n)
{
    __m256 p = _mm256_set1_ps(c[0]);
#pragma GCC unroll 8
    for (int i = 1; i < n; i++)
        p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(c[i]));
    return p;
}

/* 2^x of 8 floats, for x <= ~0 (and -inf, which gives exactly 0): the
 * reduction and degree-6 polynomial of simd512.h's simd_exp2_16; 2^n goes
 * into the exponent bits (AVX2 has no scalef), so x is first raised to
 * -127, whose 2^n has exponent field 0: results below about 2^-126.5 are
 * 0 (the softmax weights they stand for are below FLT_MIN of the row's
 * largest). */
SIMD256_FN __m256 simd_exp2_8(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    static const float c[7] = {1.5353360504377633e-4f, 1.3398875016719103e-3f,
                               9.61843691766262e-3f,   5.5503323674201965e-2f,
                               2.4022647738456726e-1f, 6.931471824645996e-1f, 1.0f};
    __m256 p = simd_horner8(f, c, 7);
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* tanh of 8 floats, the rational form of simd_tanh.h: within 6·2^-24 of
 * tanh, absolute and relative; odd to the bit; rounding makes it fall
 * back by a few 2^-24 here and there rather than rise monotonically
 * (tests/unit/test_simd_x86.c checks each). NaN stays NaN. Why rational: 8
 * FMAs and a division, which has its own unit beside the FMA ports,
 * against an exp, a reciprocal and a second polynomial for an exp-based
 * tanh; the softcapped fused kernel went from about 0.90 to 0.96 of its
 * rate without softcap on AVX2 (docs/benchmarks.md). */
SIMD256_FN __m256 simd_tanh8(__m256 x)
{
    static const float p[5] = SIMD_TANH_P, q[5] = SIMD_TANH_Q;
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(SIMD_TANH_CLAMP);
    /* x second: min/max return their second operand when either is NaN */
    x = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), lim), _mm256_min_ps(lim, x));
    __m256 z = _mm256_mul_ps(x, x);
    __m256 num = simd_horner8(z, p, 5), den = simd_horner8(z, q, 5);
    __m256 t = _mm256_div_ps(_mm256_mul_ps(num, x), den);
    return _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), one), _mm256_min_ps(one, t));
}
#endif

#endif
