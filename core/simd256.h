/*
 * core/simd256.h — the AVX2 exponential of the fused kernel of
 * core/attn_fused_avx2.c (scores in base 2, so the reduction is one
 * rounding); core/simd512.h has its AVX-512 twin.
 *
 * Why hand-written: inlined into the softmax loop, 8 lanes, no range
 * handling beyond what a softmax needs (as simd512.h).
 */
#ifndef ATTND_CORE_SIMD256_H
#define ATTND_CORE_SIMD256_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdint.h>

/* Compiled for AVX2 + FMA whatever the build's -march (see simd512.h). */
#define SIMD256_FN static inline __attribute__((target("avx2,fma")))

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
    __m256 p = _mm256_set1_ps(c[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 7; i++)
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c[i]));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* tanh of 8 floats: simd512.h's simd_tanh16 on 8 lanes. */
SIMD256_FN __m256 simd_tanh8(__m256 x)
{
    __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
    __m256 a = _mm256_andnot_ps(signbit, x), z = _mm256_mul_ps(a, a);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(-5.70498872745e-3f), z,
                               _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), a, a);
    __m256 e = simd_exp2_8(_mm256_mul_ps(a, _mm256_set1_ps(-2.88539008177792681f)));
    __m256 one = _mm256_set1_ps(1.0f), den = _mm256_add_ps(one, e);
    __m256 r = _mm256_rcp_ps(den);      /* 12 bits, one Newton step: ~23 */
    r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(den, r, one), r);
    __m256 big = _mm256_mul_ps(_mm256_sub_ps(one, e), r);
    __m256 t = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_or_ps(t, _mm256_and_ps(x, signbit));
}
#endif

#endif
