/*
 * core/simd512.h — the AVX-512 exponentials of the softmax loops: exp for
 * core/attn.c's exp+sum loop, exp2 for the fused kernel of core/attn_fused.c
 * (whose scores are in base 2, so the reduction is one rounding), and the
 * tanh of its softcap.
 *
 * Why hand-written: inlined into the loops that use it, 16 lanes, no range
 * handling beyond what a softmax needs, where the libmvec AVX2 call per 8
 * elements plus the loop around it was a visible share of a prefill
 * (measured: docs/benchmarks.md, section "The fused kernels at n=L=1024
 * d=64").
 */
#ifndef ATTND_CORE_SIMD512_H
#define ATTND_CORE_SIMD512_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdint.h>

#include "simd_tanh.h"

/* Compiled for AVX-512 whatever the build's -march, so that the fused
 * kernel of a portable build can use them (after checking the CPU). */
#define SIMD512_FN static inline __attribute__((target("avx512f,avx512dq")))

/* c[0]·x^(n-1) + ... + c[n-1], by Horner's rule with fused multiply-adds
 * (n is a constant at every call, and the loop is unrolled). */
SIMD512_FN __m512 simd_horner(__m512 x, const float *c, int n)
{
    __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
    for (int i = 1; i < n; i++)
        p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(c[i]));
    return p;
}

/* exp(x) of 16 floats, for the softmax's x <= ~0 (and -inf, which gives 0):
 * Cephes expf's reduction and polynomial (relative error about 1e-7), 2^n
 * applied by scalef, which also flushes results below the float range to
 * 0. exp16(0) is exactly 1. */
SIMD512_FN __m512 simd_exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f), r);
    static const float c[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    __m512 p = simd_horner(r, c, 6);
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, nf);
}

/* 2^x of 16 floats, for x <= ~0 (and -inf, which gives exactly 0):
 * x = n + f with n = round(x), |f| <= 1/2 (exact), 2^f by a degree-6
 * polynomial fitted for relative error (2e-9; about 1.7 ulp once evaluated
 * in float), 2^n by scalef. Below -151 the result rounds to 0. */
SIMD512_FN __m512 simd_exp2_16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-151.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    static const float c[7] = {1.5353360504377633e-4f, 1.3398875016719103e-3f,
                               9.61843691766262e-3f,   5.5503323674201965e-2f,
                               2.4022647738456726e-1f, 6.931471824645996e-1f, 1.0f};
    __m512 p = simd_horner(f, c, 7);
    return _mm512_scalef_ps(p, n);
}

/* tanh of 16 floats: simd256.h's simd_tanh8 on 16 lanes, the same
 * operations lane by lane, so the same bits (see there and simd_tanh.h). */
SIMD512_FN __m512 simd_tanh16(__m512 x)
{
    static const float p[5] = SIMD_TANH_P, q[5] = SIMD_TANH_Q;
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(SIMD_TANH_CLAMP);
    /* x second: min/max return their second operand when either is NaN */
    x = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), lim), _mm512_min_ps(lim, x));
    __m512 z = _mm512_mul_ps(x, x);
    __m512 num = simd_horner(z, p, 5), den = simd_horner(z, q, 5);
    __m512 t = _mm512_div_ps(_mm512_mul_ps(num, x), den);
    return _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), one), _mm512_min_ps(one, t));
}
#endif

#endif
