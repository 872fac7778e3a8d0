/*
 * core/half.c — float16 and bfloat16 conversions (half.h).
 *
 * One exact rounding routine (narrow_f64) serves every scalar narrowing:
 * a float32 widens to float64 exactly, so rounding the double once to the
 * target's fraction bits and exponent range is the single correct rounding
 * of either input. Hand-written because no Debian C library offers these
 * (_Float16 arithmetic in gcc would do the float32 case on x86-64 but not
 * bfloat16, nor the float64 case without a float32 step).
 *
 * The bulk portable paths work on the float32 bits directly (the rounding
 * add of the classic bit trick, and for float16 subnormals one float add
 * that lets the FPU round: the default round-to-nearest-even mode, which
 * nothing in attnd changes) so that the compiler can vectorise them. The
 * F16C paths are compiled with target attributes, whatever the build's
 * -march, and chosen with __builtin_cpu_supports.
 */
#include "core/half.h"
#include "core/half_neon.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HALF_HAVE_F16C 1
#endif

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- the exact scalar rounding ------------------------------------------ */

/* A binary format of 1 sign, ebits exponent bits (bias) and mb fraction
 * bits, its all-ones exponent being infinity/NaN. */
struct fmt {
    int mb, bias, ebits;
};

static const struct fmt F16 = {10, 15, 5};
static const struct fmt BF16 = {7, 127, 8};

/* What rounding x to f keeps before the carry: k (the kept significand,
 * with its implicit bit for normals), the discarded bits against half a
 * unit, and the result's bits before rounding up. */
struct cut {
    uint32_t base;      /* the encoding of x truncated, minus k */
    uint64_t k, rem, half;
    bool special;       /* NaN, infinity, zero, a float64 subnormal, or
                           so large it overflows whatever the rounding */
};

static struct cut cut_f64(double x, struct fmt f)
{
    uint64_t b, m;
    struct cut c = {0, 0, 0, 0, true};
    int be, e, emin = 1 - f.bias, shift;

    memcpy(&b, &x, sizeof b);
    be = (int)(b >> 52) & 0x7FF;
    if (be == 0x7FF || be == 0)
        return c;
    e = be - 1023;                  /* |x| = 1.f * 2^e */
    if (e > f.bias + 1)
        return c;
    m = (b & ((1ull << 52) - 1)) | (1ull << 52);
    shift = 52 - f.mb + (e < emin ? emin - e : 0);
    if (shift > 63)
        shift = 63;                 /* |x| < 2^-11 of the smallest subnormal: rounds to 0 */
    c.k = m >> shift;
    c.rem = m & ((1ull << shift) - 1);
    c.half = 1ull << (shift - 1);
    c.base = e < emin ? 0 : (uint32_t)(e + f.bias - 1) << f.mb;
    c.special = false;
    return c;
}

static uint16_t narrow_f64(double x, struct fmt f)
{
    uint64_t b;
    uint32_t inf = ((1u << f.ebits) - 1) << f.mb, r;
    uint16_t sign;
    struct cut c = cut_f64(x, f);

    memcpy(&b, &x, sizeof b);
    sign = (uint16_t)((b >> 63) << 15);
    if (c.special) {
        int be = (int)(b >> 52) & 0x7FF;
        uint64_t frac = b & ((1ull << 52) - 1);
        if (be == 0)
            return sign;                            /* zero, or far below the smallest subnormal */
        if (be == 0x7FF && frac)                    /* NaN: quiet, top payload bits kept */
            return (uint16_t)(sign | inf | (1u << (f.mb - 1)) |
                              (uint32_t)(frac >> (52 - f.mb)));
        return (uint16_t)(sign | inf);              /* infinity, or too large */
    }
    if (c.rem > c.half || (c.rem == c.half && (c.k & 1)))
        c.k++;
    r = c.base + (uint32_t)c.k;     /* a carry out of the fraction moves the exponent */
    return (uint16_t)(sign | (r < inf ? r : inf));
}

static bool midpoint_f64(double x, struct fmt f)
{
    uint32_t inf = ((1u << f.ebits) - 1) << f.mb;
    struct cut c = cut_f64(x, f);

    return !c.special && c.rem == c.half && c.base + c.k < inf;
}

uint16_t half_f16_from_f64(double x)
{
    return narrow_f64(x, F16);
}

uint16_t half_bf16_from_f64(double x)
{
    return narrow_f64(x, BF16);
}

uint16_t half_f16_from_f32(float x)
{
    return narrow_f64((double)x, F16);
}

uint16_t half_bf16_from_f32(float x)
{
    return narrow_f64((double)x, BF16);
}

bool half_f16_is_midpoint(double x)
{
    return midpoint_f64(x, F16);
}

bool half_bf16_is_midpoint(double x)
{
    return midpoint_f64(x, BF16);
}

/* ---- portable bit paths (vectorisable) ------------------------------------ */

/* float32 bits -> float16 bits, round to nearest even. */
static inline uint16_t f16_from_bits(uint32_t x)
{
    uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7FFFFFFF, o;

    if (a >= 0x47800000) {                          /* >= 2^16, infinity, NaN */
        o = a > 0x7F800000 ? 0x7E00 | ((a >> 13) & 0x3FF) : 0x7C00;
    } else if (a < 0x38800000) {                    /* below 2^-14: subnormal or 0 */
        /* adding 0.5 puts the value's 2^-24 units in the low fraction bits,
         * rounded to nearest even by the FPU */
        o = f32_bits(f32_from_bits(a) + 0.5f) - 0x3F000000;
    } else {                                        /* normal (65520.. carries to inf) */
        a += 0xC8000FFF + ((a >> 13) & 1);          /* rebias -112 << 23, round */
        o = a >> 13;
    }
    return (uint16_t)(sign | o);
}

/* float16 bits -> float32 bits (exact). */
static inline uint32_t f16_to_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;

    if (e == 0x1F)                                  /* infinity, NaN (made quiet) */
        return sign | 0x7F800000 | m << 13 | (m ? 0x400000 : 0);
    if (e == 0)                                     /* zero, subnormal: m · 2^-24 */
        return sign | f32_bits((float)m * 0x1p-24f);
    return sign | (e + 112) << 23 | m << 13;
}

/* float32 bits -> bfloat16 bits, round to nearest even. */
static inline uint16_t bf16_from_bits(uint32_t x)
{
    if ((x & 0x7FFFFFFF) > 0x7F800000)
        return (uint16_t)((x >> 16) | 0x40);        /* NaN: quiet */
    return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

float half_f16_to_f32(uint16_t h)
{
    return f32_from_bits(f16_to_bits(h));
}

/* Index of the first element with an all-ones exponent (mask), or n.
 * Whole blocks of 64 first take a branch-free pass of fixed length, the
 * least of (h & mask) ^ mask (0 for such an element), which -O2
 * vectorises (a variable-length pass stayed scalar, about 1 ns an
 * element); a block where it is 0 is then looked through. */
static size_t first_nonfinite(const uint16_t *h, size_t n, uint16_t mask)
{
    size_t i = 0, j;
    for (; i + 64 <= n; i += 64) {
        uint16_t lo = 0xFFFF;
        for (j = 0; j < 64; j++) {
            uint16_t t = (uint16_t)((h[i + j] & mask) ^ mask);
            lo = t < lo ? t : lo;
        }
        if (lo == 0)
            break;
    }
    for (; i < n; i++)
        if ((h[i] & mask) == mask)
            return i;
    return n;
}

size_t half_first_nonfinite(const uint16_t *h, size_t n, bool f16, bool allow_neg_inf)
{
    uint16_t mask = f16 ? 0x7C00 : 0x7F80, ninf = mask | 0x8000;
    size_t i = 0;
    while ((i += first_nonfinite(h + i, n - i, mask)) < n && allow_neg_inf && h[i] == ninf)
        i++;
    return i;
}

/* The bulk loops below take whole blocks of HALF_BLOCK elements in an
 * inner loop of fixed length, then the tail: gcc -O2 vectorises only a
 * loop whose vector code replaces it entirely (one over n elements stayed
 * scalar, about 0.5 ns an element). */
#define HALF_BLOCK 64

size_t half_f32_to_f16_n_portable(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)
        for (size_t j = i; j < i + HALF_BLOCK; j++)
            dst[j] = f16_from_bits(f32_bits(src[j]));
    for (; i < n; i++)
        dst[i] = f16_from_bits(f32_bits(src[i]));
    return first_nonfinite(dst, n, 0x7C00);
}

void half_f16_to_f32_n_portable(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)      /* branches per element: not vectorised either way */
        dst[i] = f32_from_bits(f16_to_bits(src[i]));
}

size_t half_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)
        for (size_t j = i; j < i + HALF_BLOCK; j++)
            dst[j] = bf16_from_bits(f32_bits(src[j]));
    for (; i < n; i++)
        dst[i] = bf16_from_bits(f32_bits(src[i]));
    return first_nonfinite(dst, n, 0x7F80);
}

void half_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)
        for (size_t j = i; j < i + HALF_BLOCK; j++)
            dst[j] = f32_from_bits((uint32_t)src[j] << 16);
    for (; i < n; i++)
        dst[i] = f32_from_bits((uint32_t)src[i] << 16);
}

/* ---- F16C ------------------------------------------------------------------ */

#ifdef HALF_HAVE_F16C

#include <cpuid.h>
#include <stdatomic.h>

#define F16C_FN __attribute__((target("avx,f16c")))

/* CPUID leaf 1, ECX bit 29. Read directly because clang 14 (the fuzz and
 * sanitizer builds) does not know "f16c" in __builtin_cpu_supports; "avx"
 * there also checks that the OS saves the AVX state. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    return (c >> 29) & 1u;
}

/* Asked once: CPUID is slow (under a hypervisor it traps, microseconds),
 * and the array converters ask on every call. */
bool half_f16c_available(void)
{
    static _Atomic int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("avx") && cpu_has_f16c();
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}

F16C_FN size_t half_f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    if (i < n) {                                    /* the tail through a padded block */
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, src + i, (n - i) * sizeof *in);
        _mm_storeu_si128((__m128i *)(void *)out,
                         _mm256_cvtps_ph(_mm256_loadu_ps(in),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        memcpy(dst + i, out, (n - i) * sizeof *out);
    }
    return first_nonfinite(dst, n, 0x7C00);
}

F16C_FN void half_f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(const void *)(src + i))));
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, src + i, (n - i) * sizeof *in);
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(void *)in)));
        memcpy(dst + i, out, (n - i) * sizeof *out);
    }
}

#elif defined(HALF_HAVE_NEON)

/* aarch64: FCVT through NEON (core/half_neon.c) is the hardware path, under
 * the same names; NEON is part of the base ISA there. */
bool half_f16c_available(void)
{
    return true;
}

size_t half_f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n)
{
    half_neon_f32_to_f16(src, dst, n);
    return first_nonfinite(dst, n, 0x7C00);
}

void half_f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n)
{
    half_neon_f16_to_f32(src, dst, n);
}

#else

bool half_f16c_available(void)
{
    return false;
}

size_t half_f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n)
{
    return half_f32_to_f16_n_portable(src, dst, n);
}

void half_f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n)
{
    half_f16_to_f32_n_portable(src, dst, n);
}

#endif

size_t half_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    return half_f16c_available() ? half_f32_to_f16_n_f16c(src, dst, n)
                                 : half_f32_to_f16_n_portable(src, dst, n);
}

void half_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    if (half_f16c_available())
        half_f16_to_f32_n_f16c(src, dst, n);
    else
        half_f16_to_f32_n_portable(src, dst, n);
}
