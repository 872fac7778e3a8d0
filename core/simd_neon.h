/*
 * core/simd_neon.h — AArch64 Advanced SIMD (NEON) forms of the float32 hot
 * loops that core/attn.c and core/attn_impl.h otherwise write portably:
 * the dot product of the decode loops, the two axpy forms of their P·V,
 * and the softmax's exp(x - shift) with its sum.
 *
 * Why: on aarch64 there is no fused kernel (core/attn_fused*.c is x86), so
 * these loops carry decode and the softmax of every pass; Debian's gcc 12
 * at -O2 leaves the portable ones scalar (no fmla in core/attn.o) and calls
 * libm's expf once per score. NEON is part of the AArch64 base ISA, so no
 * run-time check is needed. Included only where __aarch64__ and __ARM_NEON
 * are defined; everything else sees nothing from this file.
 *
 * Numbers: dot keeps the portable loop's 16 partial sums and its pairwise
 * reduction (the same bits wherever the compiler fuses the portable loop's
 * multiply-adds, as aarch64 gcc does); exp is Cephes expf's reduction and
 * polynomial, as core/simd512.h's simd_exp16 (relative error about 1e-7,
 * exp(0) exactly 1), with 2^n applied as two exact power-of-two factors so
 * that subnormal results round once instead of flushing.
 * tests/unit/test_neon.c checks each against a long double reference.
 */
#ifndef ATTND_CORE_SIMD_NEON_H
#define ATTND_CORE_SIMD_NEON_H

#if defined(__aarch64__) && defined(__ARM_NEON)
#define ATTN_NEON 1

#include <arm_neon.h>
#include <stddef.h>

/* exp(x) of 4 floats for x in [-104, 88] (clamped there: -inf gives 0). */
static inline float32x4_t neon_exp4(float32x4_t x)
{
    static const float c[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(88.0f));
    float32x4_t nf = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, nf, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, nf, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(c[0]);
    for (int i = 1; i < 6; i++)
        p = vfmaq_f32(vdupq_n_f32(c[i]), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    /* n in [-150, 127]: halves in [-75, 64], each a normal power of two */
    int32x4_t n = vcvtq_s32_f32(nf), n1 = vshrq_n_s32(n, 1), n2 = vsubq_s32(n, n1);
    int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* x [n] -> y [n] = exp(x - sh) (y may equal x); returns Σ y in double. */
static inline double neon_exp_shift_f32(const float *x, float *y, size_t n, float sh)
{
    float32x4_t vs = vdupq_n_f32(sh);
    float64x2_t s0 = vdupq_n_f64(0), s1 = vdupq_n_f64(0);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t e = neon_exp4(vsubq_f32(vld1q_f32(x + j), vs));
        vst1q_f32(y + j, e);
        s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(e)));
        s1 = vaddq_f64(s1, vcvt_high_f64_f32(e));
    }
    double sum = vaddvq_f64(vaddq_f64(s0, s1));
    if (j < n) {                                    /* the tail through a padded block */
        float in[4] = {0, 0, 0, 0}, out[4];
        for (size_t t = 0; t < n - j; t++)
            in[t] = x[j + t];
        vst1q_f32(out, neon_exp4(vsubq_f32(vld1q_f32(in), vs)));
        for (size_t t = 0; t < n - j; t++) {
            y[j + t] = out[t];
            sum += out[t];
        }
    }
    return sum;
}

/* a [d] · b [d]: 16 partial sums in four vectors, reduced pairwise. */
static inline float neon_dot_f32(const float *restrict a, const float *restrict b, size_t d)
{
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    size_t c = 0;
    for (; c + 16 <= d; c += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(a + c), vld1q_f32(b + c));
        a1 = vfmaq_f32(a1, vld1q_f32(a + c + 4), vld1q_f32(b + c + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(a + c + 8), vld1q_f32(b + c + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(a + c + 12), vld1q_f32(b + c + 12));
    }
    if (c + 8 <= d) {                               /* d = 8, 24, ...: one step more */
        a0 = vfmaq_f32(a0, vld1q_f32(a + c), vld1q_f32(b + c));
        a1 = vfmaq_f32(a1, vld1q_f32(a + c + 4), vld1q_f32(b + c + 4));
        c += 8;
    }
    if (c < d) {                                    /* the last d % 8: into their lanes */
        float acc[16];
        vst1q_f32(acc, a0);
        vst1q_f32(acc + 4, a1);
        vst1q_f32(acc + 8, a2);
        vst1q_f32(acc + 12, a3);
        for (; c < d; c++)
            acc[c % 16] = __builtin_fmaf(a[c], b[c], acc[c % 16]);
        a0 = vld1q_f32(acc);
        a1 = vld1q_f32(acc + 4);
        a2 = vld1q_f32(acc + 8);
        a3 = vld1q_f32(acc + 12);
    }
    float32x4_t s = vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3));
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 2)) +
           (vgetq_lane_f32(s, 1) + vgetq_lane_f32(s, 3));
}

/* o [d] += w · x [d] */
static inline void neon_axpy_f32(float *restrict o, float w, const float *restrict x, size_t d)
{
    float32x4_t vw = vdupq_n_f32(w);
    size_t c = 0;
    for (; c + 8 <= d; c += 8) {
        vst1q_f32(o + c, vfmaq_f32(vld1q_f32(o + c), vld1q_f32(x + c), vw));
        vst1q_f32(o + c + 4, vfmaq_f32(vld1q_f32(o + c + 4), vld1q_f32(x + c + 4), vw));
    }
    for (; c + 4 <= d; c += 4)
        vst1q_f32(o + c, vfmaq_f32(vld1q_f32(o + c), vld1q_f32(x + c), vw));
    for (; c < d; c++)
        o[c] = __builtin_fmaf(w, x[c], o[c]);
}

/* o [d] += w[0]·x0 + ... + w[3]·x3 (rows [d]). */
static inline void neon_axpy4_f32(float *restrict o, const float *w, const float *restrict x0,
                                  const float *restrict x1, const float *restrict x2,
                                  const float *restrict x3, size_t d)
{
    float32x4_t w0 = vdupq_n_f32(w[0]), w1 = vdupq_n_f32(w[1]);
    float32x4_t w2 = vdupq_n_f32(w[2]), w3 = vdupq_n_f32(w[3]);
    size_t c = 0;
    for (; c + 4 <= d; c += 4) {
        float32x4_t s01 = vfmaq_f32(vmulq_f32(vld1q_f32(x1 + c), w1), vld1q_f32(x0 + c), w0);
        float32x4_t s23 = vfmaq_f32(vmulq_f32(vld1q_f32(x3 + c), w3), vld1q_f32(x2 + c), w2);
        vst1q_f32(o + c, vaddq_f32(vld1q_f32(o + c), vaddq_f32(s01, s23)));
    }
    for (; c < d; c++)
        o[c] += __builtin_fmaf(w[0], x0[c], w[1] * x1[c]) +
                __builtin_fmaf(w[2], x2[c], w[3] * x3[c]);
}

#endif

#endif
