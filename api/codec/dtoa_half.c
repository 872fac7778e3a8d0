/*
 * api/codec/dtoa_half.c — shortest round-trip decimal text of float16 and
 * bfloat16 (write.h: api_dtoa_f16, api_dtoa_bf16).
 *
 * The same decimal as api/codec/dtoa.c chooses for float32/64: among the
 * decimals
 * that round (to nearest, ties to even, from the exact decimal value) back
 * to the pattern, one with the fewest digits and, among those, the closest.
 * With 8 or 11 significant bits the search is direct: for p = 1, 2, ...
 * digits take the two p-digit decimals around v = c · 2^q, D·10^k and
 * (D+1)·10^k, and keep the first p where one lies inside v's rounding
 * interval (half a gap either side; the lower half-gap is half as wide at a
 * power of two; the ends belong to it when c is even). Every comparison is
 * exact: D·10^k against N·2^s becomes D·5^k·2^k against N·2^s (or with 5^-k
 * on the other side), integers below 2^128 over both formats' ranges
 * (bfloat16: |k| <= 46, D < 10^5, N < 2^12). At most 5 digits for float16
 * and 4 for bfloat16, so at most ~10 such comparisons a number; the text is
 * laid out by api/codec/dtoa.c (JavaScript's layout). Checked on all 65,536
 * patterns of each format by tests/api/test_api_dtoa_half.c against an
 * exact reader written apart.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "api/codec/write.h"

__extension__ typedef unsigned __int128 u128;   /* gcc/clang, 64-bit targets */

#define POW5_MAX 55                             /* 5^55 < 2^128 */

static u128 pow5_t[POW5_MAX + 1];
static pthread_once_t pow5_once = PTHREAD_ONCE_INIT;

static void pow5_init(void)
{
    u128 p = 1;
    for (int i = 0; i <= POW5_MAX; i++, p *= 5)
        pow5_t[i] = p;
}

static int bitlen(u128 x)
{
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    return hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
}

/* sign of A·2^a − B·2^b */
static int cmp_scaled(u128 A, int a, u128 B, int b)
{
    int la, lb;
    if (A == 0 || B == 0)
        return (A != 0) - (B != 0);
    la = bitlen(A) + a;
    lb = bitlen(B) + b;
    if (la != lb)
        return la > lb ? 1 : -1;
    if (a >= b)                                 /* bitlen(A) + a - b = bitlen(B) <= 128 */
        A <<= a - b;
    else
        B <<= b - a;
    return (A > B) - (A < B);
}

/* sign of D·10^k − N·2^s */
static int cmp_dec(uint64_t D, int k, uint64_t N, int s)
{
    if (k >= 0)
        return cmp_scaled((u128)D * pow5_t[k], k, N, s);
    return cmp_scaled(D, k, (u128)N * pow5_t[-k], s);
}

/* The decimal of v = c·2^q (c > 0) with mb fraction bits; lower: the lower
 * half-gap is narrower (c is the smallest normal significand, above the
 * first binade). */
static size_t shortest(char *out, bool neg, uint64_t c, int q, bool lower)
{
    uint64_t lo = 4 * c - (lower ? 1 : 2), hi = 4 * c + 2;     /* units of 2^(q-2) */
    bool incl = !(c & 1);
    double v = ldexp((double)c, q);
    int e10 = (int)floor(log10(v));

    while (cmp_dec(1, e10, c, q) > 0)
        e10--;
    while (cmp_dec(1, e10 + 1, c, q) <= 0)
        e10++;
    for (int p = 1;; p++) {
        int k = e10 - p + 1, t;
        uint64_t D = (uint64_t)(v / pow(10, k));
        bool in_lo, in_hi;

        while (D > 0 && cmp_dec(D, k, c, q) > 0)
            D--;
        while (cmp_dec(D + 1, k, c, q) <= 0)
            D++;
        /* D·10^k <= v < (D+1)·10^k */
        t = cmp_dec(D, k, lo, q - 2);
        in_lo = t > 0 || (t == 0 && incl);
        t = cmp_dec(D + 1, k, hi, q - 2);
        in_hi = t < 0 || (t == 0 && incl);
        if (in_lo && in_hi) {                   /* the closer one; a tie: even digits */
            t = cmp_dec(2 * D + 1, k, c, q + 1);
            if (t < 0 || (t == 0 && (D & 1)))
                D++;
        } else if (in_hi) {
            D++;
        } else if (!in_lo) {
            continue;
        }
        return api_dtoa_digits(out, neg, D, k);
    }
}

/* h of a format with mb fraction bits and exponent bias. */
static size_t half_text(char *out, uint16_t h, int mb, int bias)
{
    unsigned e = (h & 0x7FFFu) >> mb, frac = h & ((1u << mb) - 1);
    unsigned emax = 0x7FFFu >> mb;
    bool neg = h >> 15;

    pthread_once(&pow5_once, pow5_init);
    if (e == emax) {
        memcpy(out, "null", 5);
        return 4;
    }
    if (e == 0 && frac == 0)
        return api_dtoa_digits(out, neg, 0, 0);
    if (e == 0)
        return shortest(out, neg, frac, 1 - bias - mb, false);
    return shortest(out, neg, (1u << mb) | frac, (int)e - bias - mb, frac == 0 && e > 1);
}

size_t api_dtoa_f16(char *out, uint16_t h)
{
    return half_text(out, h, 10, 15);
}

size_t api_dtoa_bf16(char *out, uint16_t h)
{
    return half_text(out, h, 7, 127);
}
