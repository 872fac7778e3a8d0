/*
 * core/half_neon.c — float16 conversions of arrays by FCVT (NEON), eight
 * elements per step; the tail through a padded block. The conversions are
 * IEEE's under the FPCR Linux gives a thread (round to nearest even,
 * subnormals kept, NaN quieted with its payload's top bits), which are the
 * bits of core/half.c's portable path: tests/unit/test_half.c compares the
 * two on every float16 and on every rounding pattern of every exponent.
 */
#include "core/half_neon.h"

#ifdef HALF_HAVE_NEON
#include <arm_neon.h>
#include <string.h>

void half_neon_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)),
                                          vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    if (i < n) {
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, src + i, (n - i) * sizeof *in);
        vst1q_u16(out, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(in)),
                                                               vld1q_f32(in + 4))));
        memcpy(dst + i, out, (n - i) * sizeof *out);
    }
}

void half_neon_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, src + i, (n - i) * sizeof *in);
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(in));
        vst1q_f32(out, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(out + 4, vcvt_high_f32_f16(h));
        memcpy(dst + i, out, (n - i) * sizeof *out);
    }
}

#else
/* Other CPUs: nothing here (ISO C wants a declaration in every file). */
typedef int half_neon_unused;
#endif
