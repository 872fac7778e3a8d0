/*
 * core/half.h — float16 (IEEE 754 binary16) and bfloat16 conversions.
 *
 * The two 2-byte formats a half-precision model holds its tensors in:
 *   float16   1 sign, 5 exponent (bias 15), 10 fraction bits; max 65504,
 *             subnormals down to 2^-24
 *   bfloat16  1 sign, 8 exponent (bias 127), 7 fraction bits: the top half
 *             of a float32, so the same range (max ~3.39e38) with 8 bits
 *             of precision
 * Narrowing rounds to nearest, ties to even, with subnormals kept (no flush
 * to zero); a finite value past the largest finite one (after rounding)
 * becomes an infinity, which the callers refuse (half_is_finite_*). NaN
 * stays NaN (quiet, sign and top payload bits kept). Widening is exact.
 *
 * The bulk converters choose F16C (x86's vcvtps2ph / vcvtph2ps) at run time
 * where the CPU has it (on aarch64 NEON's FCVT, core/half_neon.c), and
 * otherwise a portable integer path that gives
 * the same bits (tests/unit/test_half.c checks both on every float16 and
 * on every rounding boundary). bfloat16 has no hardware path here: AVX-512
 * BF16's vcvtneps2bf16 flushes subnormals, so its portable integer form is
 * used, written so the compiler vectorises it.
 */
#ifndef ATTND_CORE_HALF_H
#define ATTND_CORE_HALF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one value ----------------------------------------------------------- */

uint16_t half_f16_from_f32(float x);
uint16_t half_bf16_from_f32(float x);
/* Rounded once, straight from the double (no float32 step in between, so
 * no double rounding). */
uint16_t half_f16_from_f64(double x);
uint16_t half_bf16_from_f64(double x);

float half_f16_to_f32(uint16_t h);

static inline float half_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

static inline bool half_f16_is_finite(uint16_t h)
{
    return (h & 0x7C00) != 0x7C00;
}

static inline bool half_bf16_is_finite(uint16_t h)
{
    return (h & 0x7F80) != 0x7F80;
}

/* The two float16 (or bfloat16) values on either side of the midpoint of a
 * rounding interval: true when x (a double) lies exactly halfway between
 * two adjacent finite values of the format, or between the largest finite
 * one and the next power of two (where ties go to infinity). The JSON
 * reader asks this to know when the decimal text, not its double, decides
 * the rounding (api/codec/halfread.c). */
bool half_f16_is_midpoint(double x);
bool half_bf16_is_midpoint(double x);

/* ---- arrays --------------------------------------------------------------- */

/* src [n] -> dst [n]. The narrowing ones return the index of the first
 * element whose result is not finite (an overflow, or a non-finite input),
 * or n when all are finite; every element is converted either way. */
size_t half_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
size_t half_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void half_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void half_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* Index of the first of h [n] (float16 bits when f16, else bfloat16) that
 * is not finite, -inf skipped when allow_neg_inf; n when there is none. */
size_t half_first_nonfinite(const uint16_t *h, size_t n, bool f16, bool allow_neg_inf);

/* Whether the float16 converters above run on F16C on this CPU (on
 * aarch64: on FCVT through NEON, core/half_neon.c, always). */
bool half_f16c_available(void);

/* The two implementations behind the float16 converters, for the tests and
 * benches that compare them (the _f16c ones only where
 * half_f16c_available()). Same contract as above. */
size_t half_f32_to_f16_n_portable(const float *src, uint16_t *dst, size_t n);
void half_f16_to_f32_n_portable(const uint16_t *src, float *dst, size_t n);
size_t half_f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n);
void half_f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n);

#endif
