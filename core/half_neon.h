/*
 * core/half_neon.h — float16 <-> float32 arrays by AArch64's FCVT through
 * NEON (core/half_neon.c): on aarch64 the hardware path of core/half.c's
 * bulk converters, as F16C is on x86-64. Declared only where __aarch64__
 * and __ARM_NEON are defined.
 */
#ifndef ATTND_CORE_HALF_NEON_H
#define ATTND_CORE_HALF_NEON_H

#if defined(__aarch64__) && defined(__ARM_NEON)
#define HALF_HAVE_NEON 1

#include <stddef.h>
#include <stdint.h>

/* src [n] -> dst [n], rounded to nearest even (the default FPCR: no flush
 * of subnormals, NaN quieted with its top payload bits) */
void half_neon_f32_to_f16(const float *src, uint16_t *dst, size_t n);
/* src [n] -> dst [n], exact */
void half_neon_f16_to_f32(const uint16_t *src, float *dst, size_t n);
#endif

#endif
