/*
 * core/simd_tanh.h — the coefficients of the rational tanh that
 * core/simd256.h (simd_tanh8) and core/simd512.h (simd_tanh16) evaluate
 * lane by lane with the same operations, so both give the same bits:
 *   tanh(x) ~ x·P(x²)/Q(x²) on x clamped to [-9, 9], then clamped to
 *   [-1, 1], P and Q of degree 4 (highest degree first, Q(0) = 1).
 * A minimax fit of the relative error on [0, 9], rounded to float
 * (tests/tools/fit_tanh.py derives them; tests/unit/test_simd_x86.c holds
 * the functions to tanhl over the floats).
 */
#ifndef ATTND_CORE_SIMD_TANH_H
#define ATTND_CORE_SIMD_TANH_H

#define SIMD_TANH_CLAMP 9.0f
#define SIMD_TANH_P                                                              \
    {1.3354729766490436e-08f, 2.0609135390259326e-05f, 0.0034955914597958326f, \
     0.13381028175354004f, 1.0f}
#define SIMD_TANH_Q                                                             \
    {7.776587267471768e-07f, 0.0003285640268586576f, 0.02587699517607689f,    \
     0.4671434462070465f, 1.0f}

#endif
