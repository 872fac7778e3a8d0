/*
 * api/codec/dtoa.c — shortest round-trip decimal text of float64 and float32.
 *
 * Two algorithms that give the same decimal: among the decimals that read
 * back to x, one with the fewest digits and, among those, the closest to x.
 * Float64 with a symmetric rounding interval (all but the powers of two)
 * takes Dragonbox (J. Jeon, 2020: one 64 x 128-bit product; faster per
 * number than Schubfach, and equal on random and edge-case inputs); the
 * powers of two and float32 take Schubfach (R. Giulietti, "The Schubfach
 * way to render doubles", 2020; OpenJDK's Double.toString since JDK 19:
 * one 128-bit product per bound). Hand-written because no C library on
 * Debian provides shortest printing (glibc's printf needs up to three
 * tries plus strtod to find it; the packaged alternatives are C++).
 * Their tables of powers of ten (617 Schubfach, 617 Dragonbox entries)
 * are computed exactly once, at first use, with a small bignum (below)
 * rather than pasted in as generated tables. Measured: docs/benchmarks.md,
 * section "What limits each row" (the HTTP small row).
 *
 * The digits are made 8 at a time with word arithmetic (digit_bytes8) and
 * laid out with fixed-size copies. Text follows JavaScript's Number-to-
 * String layout (plain digits for 1e-6 <= |x| < 1e21, else d.ddde±x), so
 * the numbers match what a browser prints for the same value; every output
 * is an RFC 8259 number.
 */
#include "api/codec/write.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;   /* gcc/clang, 64-bit targets */

/* ---- floor(log) helpers (exact over the ranges used; >> on a negative
 * int64_t is an arithmetic shift with gcc and clang) ---------------------- */

static int flog10pow2(int e)
{
    return (int)(((int64_t)e * 661971961083LL) >> 41);
}

static int flog10_three_quarters_pow2(int e)
{
    return (int)(((int64_t)e * 661971961083LL - 274743187321LL) >> 41);
}

static int flog2pow10(int e)
{
    return (int)(((int64_t)e * 913124641741LL) >> 38);
}

/* ---- the tables: Schubfach's g(k) = floor(10^-k / 2^r) + 1, 2^125 <= g - 1
 * < 2^126, and Dragonbox's c(k) ----------------------------------------- */

#define G_KMIN (-324)
#define G_KMAX 292
#define BIG_LIMBS 40            /* 1280 bits: 10^326 needs 1083 */

static uint64_t g_hi[G_KMAX - G_KMIN + 1];     /* g >> 63 */
static uint64_t g_lo[G_KMAX - G_KMIN + 1];     /* g & (2^63 - 1) */

/* Dragonbox's powers: c(k) = ceil(10^k * 2^(127 - floor(log2 10^k))),
 * 2^127 <= c < 2^128, for the k = 2 - floor(e log10 2) of every float64
 * exponent e. */
#define D_KMIN (-290)
#define D_KMAX 326
static uint64_t d_hi[D_KMAX - D_KMIN + 1];     /* c >> 64 */
static uint64_t d_lo[D_KMAX - D_KMIN + 1];     /* c & (2^64 - 1) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_bool g_ready;     /* set (release) once both tables are built */

struct big {
    uint32_t w[BIG_LIMBS];      /* little-endian limbs, zero from n on */
    int n;                      /* limbs in use */
};

static void big_set_pow2(struct big *b, int n)
{
    memset(b, 0, sizeof *b);
    b->w[n / 32] = 1u << (n % 32);
    b->n = n / 32 + 1;
}

static void big_mul_small(struct big *b, uint32_t m)
{
    uint64_t carry = 0;
    int i;

    for (i = 0; i < b->n; i++) {
        uint64_t v = (uint64_t)b->w[i] * m + carry;
        b->w[i] = (uint32_t)v;
        carry = v >> 32;
    }
    if (carry)
        b->w[b->n++] = (uint32_t)carry;     /* 10^326 < 2^1083 fits */
}

static void big_div_small(struct big *b, uint32_t d)
{
    uint64_t rem = 0;
    int i;

    for (i = b->n - 1; i >= 0; i--) {
        uint64_t v = rem << 32 | b->w[i];
        b->w[i] = (uint32_t)(v / d);
        rem = v % d;
    }
    while (b->n > 1 && b->w[b->n - 1] == 0)
        b->n--;
}

/* Limb i of b, 0 outside it. */
static uint32_t big_limb(const struct big *b, int i)
{
    return i >= 0 && i < BIG_LIMBS ? b->w[i] : 0;
}

/* floor(b / 2^s) (s >= 0) or b * 2^-s (s < 0), low 128 bits: each 32-bit
 * word of the result from the two limbs it straddles. */
static u128 big_shift_low128(const struct big *b, int s)
{
    int q = s >= 0 ? s / 32 : -((31 - s) / 32), r = s - 32 * q;   /* r in [0, 31] */
    u128 out = 0;

    for (int m = 3; m >= 0; m--) {
        uint64_t two = (uint64_t)big_limb(b, m + q + 1) << 32 | big_limb(b, m + q);
        out = out << 32 | (uint32_t)(two >> r);
    }
    return out;
}

/* Whether any of the low s bits of b is set (0 < s < 32 * BIG_LIMBS). */
static bool big_low_bits(const struct big *b, int s)
{
    for (int i = 0; i < s / 32; i++)
        if (b->w[i])
            return true;
    return s % 32 != 0 && (b->w[s / 32] & ((1u << (s % 32)) - 1)) != 0;
}

/* Schubfach's g for 10^p: floor(10^p / 2^r) + 1, r = floor(log2 10^p) - 125,
 * from that floor. */
static void put_g(int p, u128 floor_p)
{
    u128 g = floor_p + 1;
    g_hi[-p - G_KMIN] = (uint64_t)(g >> 63);    /* g_hi[k] is for 10^-k */
    g_lo[-p - G_KMIN] = (uint64_t)g & ((1ull << 63) - 1);
}

/* Dragonbox's c(p): ceil(10^p / 2^(floor(log2 10^p) - 127)), from the
 * floor and whether the division was inexact. */
static void put_c(int p, u128 floor_p, bool inexact)
{
    u128 c = floor_p + inexact;
    d_hi[p - D_KMIN] = (uint64_t)(c >> 64);
    d_lo[p - D_KMIN] = (uint64_t)c;
}

/* The entries for p < 0, where floor(10^p / 2^s) = floor(2^(p - s) / 5^-p)
 * and never divides exactly. One big number b = floor(2^top / 5^k), divided
 * by 5 once per step as k = -p grows, gives each as floor(b / 2^(top - (p -
 * s))): exact, since floor(floor(x / a) / b) = floor(x / ab) for positive
 * integers. Dividing 2^(p - s) by 5 -p times afresh for every p would
 * cost ~3 ms, and the first response with a number in it pays for this. */
static void g_init_negative(void)
{
    int pmin = -G_KMAX < D_KMIN ? -G_KMAX : D_KMIN, top = 0, p;
    struct big b;

    for (p = pmin; p < 0; p++)          /* the largest p - s of either table */
        if (p - flog2pow10(p) + 127 > top)
            top = p - flog2pow10(p) + 127;
    big_set_pow2(&b, top);
    for (p = -1; p >= pmin; p--) {
        int r = flog2pow10(p);
        big_div_small(&b, 5);           /* floor(2^top / 5^-p) */
        if (p >= -G_KMAX)
            put_g(p, big_shift_low128(&b, top - (p - (r - 125))));
        if (p >= D_KMIN)
            put_c(p, big_shift_low128(&b, top - (p - (r - 127))), true);
    }
}

/* Both tables; the powers of ten at p >= 0 are made once, ascending. */
static void g_init(void)
{
    struct big pow10;
    int p;

    g_init_negative();
    big_set_pow2(&pow10, 0);
    for (p = 0; p <= D_KMAX; p++) {
        int r = flog2pow10(p);
        if (p > 0)
            big_mul_small(&pow10, 10);
        if (p <= -G_KMIN)
            put_g(p, big_shift_low128(&pow10, r - 125));
        put_c(p, big_shift_low128(&pow10, r - 127),
              r - 127 > 0 && big_low_bits(&pow10, r - 127));
    }
    atomic_store_explicit(&g_ready, true, memory_order_release);
}

/* The tables, built on first use; after that one load instead of a call
 * into pthread_once per number. */
static inline void g_ensure(void)
{
    if (!atomic_load_explicit(&g_ready, memory_order_acquire))
        pthread_once(&g_once, g_init);
}

/* ---- the decision procedure ------------------------------------------- */

static uint64_t mul_high(uint64_t a, uint64_t b)
{
    return (uint64_t)(((u128)a * b) >> 64);
}

/* floor(g cp / 2^127), with a sticky low bit: 126-bit g (float64). */
static uint64_t rop64(uint64_t g1, uint64_t g0, uint64_t cp)
{
    uint64_t x1 = mul_high(g0, cp);
    uint64_t y0 = g1 * cp;
    uint64_t y1 = mul_high(g1, cp);
    uint64_t z = (y0 >> 1) + x1;
    uint64_t vbp = y1 + (z >> 63);
    return vbp | (((z & ((1ull << 63) - 1)) + ((1ull << 63) - 1)) >> 63);
}

/* The same with a 64-bit g (float32). */
static uint32_t rop32(uint64_t g, uint64_t cp)
{
    uint64_t x1 = mul_high(g, cp);
    uint64_t vbp = x1 >> 31;
    return (uint32_t)(vbp | (((x1 & 0xFFFFFFFFull) + 0xFFFFFFFFull) >> 32));
}

/* A decimal f * 10^e. */
struct dec {
    uint64_t f;
    int e;
};

/* x = c 2^q (c = C_MIN with q > Q_MIN: the interval is asymmetric). */
static inline __attribute__((always_inline)) struct dec to_decimal64(int q, uint64_t c)
{
    const uint64_t c_min = 1ull << 52;
    uint64_t out = c & 1, cb = c << 2, cbr = cb + 2, cbl;
    uint64_t g1, g0, vb, vbl, vbr, s, t;
    int k, h;

    if (c != c_min || q == -1074) {
        cbl = cb - 2;
        k = flog10pow2(q);
    } else {
        cbl = cb - 1;
        k = flog10_three_quarters_pow2(q);
    }
    h = q + flog2pow10(-k) + 2;
    g1 = g_hi[k - G_KMIN];
    g0 = g_lo[k - G_KMIN];
    vb = rop64(g1, g0, cb << h);
    vbl = rop64(g1, g0, cbl << h);
    vbr = rop64(g1, g0, cbr << h);
    s = vb >> 2;
    if (s >= 100) {
        uint64_t sp10 = s / 10 * 10, tp10 = sp10 + 10;
        bool upin = vbl + out <= sp10 << 2;
        bool wpin = (tp10 << 2) + out <= vbr;
        if (upin != wpin)
            return (struct dec){upin ? sp10 : tp10, k};
    }
    t = s + 1;
    {
        bool uin = vbl + out <= s << 2;
        bool win = (t << 2) + out <= vbr;
        if (uin != win)
            return (struct dec){uin ? s : t, k};
    }
    {
        int64_t cmp = (int64_t)(vb - ((s + t) << 1));
        return (struct dec){cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t, k};
    }
}

/*
 * Dragonbox (J. Jeon, "Dragonbox: A New Floating-Point Binary-to-Decimal
 * Conversion Algorithm", 2020), for x = c 2^e with a symmetric interval:
 * the same decimal as Schubfach (shortest, then closest, a tie to the even
 * decimal significand)
 * from one 64 x 128-bit product instead of three. With kappa = 2, z is the
 * interval's upper end scaled to about 19 digits; z / 1000 is the answer
 * when its multiple of 1000 stays inside the interval (width delta), else
 * the closest of z's 100-spaced neighbours; the two fractional-part checks
 * are needed only on exact ties of their comparisons (rare).
 */

/* The parity of the integer part of c(k) * two_f / 2^(128 - beta) (bit
 * 128 - beta of the 192-bit product) and whether the 64 bits below it are
 * zero (an integer, as far as the algorithm needs: Dragonbox's own test). */
struct d_parity {
    bool odd, integer;
};

static struct d_parity d_mul_parity(uint64_t two_f, uint64_t ch, uint64_t cl, int beta)
{
    uint64_t high = two_f * ch + mul_high(two_f, cl), low = two_f * cl;

    return (struct d_parity){(high >> (64 - beta)) & 1,
                             ((high << beta) | (low >> (64 - beta))) == 0};
}

static inline __attribute__((always_inline)) struct dec d_decimal64(int e, uint64_t c)
{
    int minus_k = flog10pow2(e) - 2, beta = e + flog2pow10(-minus_k);
    uint64_t ch = d_hi[-minus_k - D_KMIN], cl = d_lo[-minus_k - D_KMIN];
    uint32_t delta = (uint32_t)(ch >> (63 - beta)), r, dist;
    uint64_t two_fc = c << 1, u = (two_fc | 1) << beta, f;
    u128 zz = (u128)u * ch + mul_high(u, cl);   /* the upper 128 of 192 bits */
    uint64_t z = (uint64_t)(zz >> 64);
    bool even = (c & 1) == 0, z_integer = (uint64_t)zz == 0, divisible;
    struct d_parity y;

    f = z / 1000;
    r = (uint32_t)(z - 1000 * f);
    if (r < delta) {
        if (!(r == 0 && z_integer && !even))
            return (struct dec){f, minus_k + 3};
        f--;                                /* z itself is excluded */
        r = 1000;
    } else if (r == delta) {
        struct d_parity x = d_mul_parity(two_fc - 1, ch, cl, beta);
        if (x.odd || (x.integer && even))
            return (struct dec){f, minus_k + 3};
    }
    /* the 100-spaced candidates: f * 10 + round((r - delta / 2) / 100) */
    dist = r - delta / 2 + 50;
    divisible = dist % 100 == 0;
    f = f * 10 + dist / 100;
    if (divisible) {
        y = d_mul_parity(two_fc, ch, cl, beta);
        if (y.odd != (((dist ^ 50) & 1) != 0) || (y.integer && (f & 1)))
            f--;
    }
    return (struct dec){f, minus_k + 2};
}

static struct dec to_decimal32(int q, uint32_t c)
{
    const uint32_t c_min = 1u << 23;
    uint32_t out = c & 1;
    uint64_t cb = (uint64_t)c << 2, cbr = cb + 2, cbl, g;
    uint32_t vb, vbl, vbr, s, t;
    int k, h;

    if (c != c_min || q == -149) {
        cbl = cb - 2;
        k = flog10pow2(q);
    } else {
        cbl = cb - 1;
        k = flog10_three_quarters_pow2(q);
    }
    h = q + flog2pow10(-k) + 33;
    g = g_hi[k - G_KMIN] + 1;
    vb = rop32(g, cb << h);
    vbl = rop32(g, cbl << h);
    vbr = rop32(g, cbr << h);
    s = vb >> 2;
    if (s >= 100) {
        uint32_t sp10 = s / 10 * 10, tp10 = sp10 + 10;
        bool upin = vbl + out <= sp10 << 2;
        bool wpin = (tp10 << 2) + out <= vbr;
        if (upin != wpin)
            return (struct dec){upin ? sp10 : tp10, k};
    }
    t = s + 1;
    {
        bool uin = vbl + out <= s << 2;
        bool win = (t << 2) + out <= vbr;
        if (uin != win)
            return (struct dec){uin ? s : t, k};
    }
    {
        int32_t cmp = (int32_t)(vb - ((s + t) << 1));
        return (struct dec){cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t, k};
    }
}

/* ---- text --------------------------------------------------------------- */

/* The 8 decimal digits of v < 10^8 as byte values 0..9, the most
 * significant in the lowest byte (so in memory order on a little-endian
 * machine): two 4-digit halves, each split into pairs and the pairs into
 * digits by multiplications in parallel lanes (x * 10486 >> 20 is x / 100
 * for x < 10^4, x * 103 >> 10 is x / 10 for x < 100). No division loop,
 * no table. */
static inline __attribute__((always_inline)) uint64_t digit_bytes8(uint32_t v)
{
    uint64_t x = (uint64_t)(v / 10000) | (uint64_t)(v % 10000) << 32, y;

    y = ((x * 10486) >> 20) & 0x0000007F0000007Full;
    x = y | (x - y * 100) << 16;
    y = ((x * 103) >> 10) & 0x000F000F000F000Full;
    return y | (x - y * 10) << 8;
}

/* Trailing zero digits of an 8-digit block from digit_bytes8 (b != 0). */
static int block_tz(uint64_t b)
{
    return __builtin_clzll(b) / 8;
}

static const uint64_t pow10_u64[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
    100000000ull, 1000000000ull, 10000000000ull, 100000000000ull,
    1000000000000ull, 10000000000000ull, 100000000000000ull,
    1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull};

/* Decimal digits of f > 0. */
static int digit_count(uint64_t f)
{
    int t = ((64 - __builtin_clzll(f)) * 1233) >> 12;   /* ~ bits * log10(2) */

    return t + 1 - (f < pow10_u64[t]);
}

/*
 * Digits of d.f (0 < f < 10^19) without trailing zeros, as JavaScript lays
 * them out. The digits go right-aligned into buf[0..24) in 8-digit blocks,
 * followed by 24 '0' bytes, so every piece of the layout below is a copy of
 * a fixed size (no libc calls, no loops over digits): the bytes past a
 * number's end are scratch, inside out[API_NUM_MAX] (at most 26 are
 * written: "-0.00000" and 17 digits, or a sign, 17 digits, the point and
 * the fixed-size copy past it in the ddd.ddd layout).
 */
static size_t dec_text(char *out, bool neg, struct dec d)
{
    static const char zeros[24] = "000000000000000000000000";
    const uint64_t ascii = 0x3030303030303030ull;
    char buf[48], *dig;
    uint64_t lo, blo, bmid = 0, top = 0;
    int n, tz, exp10;
    char *o = out;

    memcpy(buf + 24, zeros, 24);
    n = digit_count(d.f);
    lo = d.f % 100000000;
    blo = digit_bytes8((uint32_t)lo) + ascii;
    memcpy(buf + 16, &blo, 8);
    tz = lo ? block_tz(blo - ascii) : 8;
    if (d.f >= 100000000) {
        uint64_t hi = d.f / 100000000, mid = hi % 100000000;
        bmid = digit_bytes8((uint32_t)mid) + ascii;
        memcpy(buf + 8, &bmid, 8);
        if (tz == 8)
            tz += mid ? block_tz(bmid - ascii) : 8;
        if (hi >= 100000000) {
            top = hi / 100000000;               /* < 1000; 1 digit for f < 10^17 */
            if (top < 10) {
                buf[7] = (char)('0' + top);     /* no trailing zero */
            } else {
                uint64_t b = digit_bytes8((uint32_t)top);
                memcpy(buf, &(uint64_t){b + ascii}, 8);
                if (tz == 16)
                    tz += block_tz(b);
            }
        }
    }
    exp10 = d.e + n - 1;                    /* scientific exponent */
    *o = '-';
    o += neg;
    if (exp10 < 0 && exp10 >= -6 && n <= 17 && n >= 17 + exp10) {
        /* 0.000ddd with up to 17 digits, at least 17 + exp10 of them (so
         * 16-17 digits for 0.ddd: most numbers in (-1, 1)): the
         * blocks go straight to their places (right-aligned, any leading
         * zeros of the middle one landing on the prefix's zeros). Reading
         * them back from buf at an offset across three stores would stall
         * the store-to-load forwarding, the largest part of this
         * function's time in a loaded server. */
        char *end = o + 1 - exp10 + n;
        memcpy(o, "0.000000", 8);
        if (n == 17)
            end[-17] = (char)('0' + top);
        memcpy(end - 16, &bmid, 8);
        memcpy(end - 8, &blo, 8);
        o = end - tz;
        *o = '\0';
        return (size_t)(o - out);
    }
    dig = buf + 24 - n;
    n -= tz;                                /* significant digits, >= 1 */
    /* dig[0..n) most significant first; x = 0.D * 10^(exp10 + 1) */
    if (exp10 >= -6 && exp10 < 21) {
        if (exp10 < 0) {                    /* 0.000ddd */
            memcpy(o, "0.000000", 8);
            o += 1 - exp10;
            memcpy(o, dig, 17);
            o += n;
        } else if (n <= exp10 + 1) {        /* an integer: digits, then zeros */
            memcpy(o, dig, 24);
            o += exp10 + 1;
        } else {                            /* ddd.ddd: n <= 17, so <= 16 before the point */
            int i = exp10 + 1, r = n - i;
            memcpy(o, dig, 16);
            o[i] = '.';
            memcpy(o + i + 1, dig + i, 8);
            if (r > 8)                      /* then i <= 8 */
                memcpy(o + i + 9, dig + i + 8, 8);
            o += n + 1;
        }
    } else {
        o[0] = dig[0];
        o[1] = '.';
        memcpy(o + 2, dig + 1, 16);
        o += n > 1 ? n + 1 : 1;
        *o++ = 'e';
        *o++ = exp10 < 0 ? '-' : '+';
        exp10 = exp10 < 0 ? -exp10 : exp10;     /* 1..324 */
        if (exp10 >= 100)
            *o++ = (char)('0' + exp10 / 100);
        if (exp10 >= 10)
            *o++ = (char)('0' + exp10 / 10 % 10);
        *o++ = (char)('0' + exp10 % 10);
    }
    *o = '\0';
    return (size_t)(o - out);
}

/*
 * The smallest subnormals have so few significant bits that the decision
 * procedure, which tries the decimal of its precision and one digit fewer,
 * can miss a shorter one still (float32 t = 21: 2.9e-44 where 3e-44 reads
 * back; float64 t = 10: 4.9e-323 vs 5e-323). Below TINY_F32 / TINY_F64
 * (mantissa bits t) find the shortest by trying 1, 2, ... digits instead:
 * checked against that search on every float32 subnormal and on float64
 * t < 2e6 (no other misses), and the few values below stay cheap.
 */
#define TINY_F32 72
#define TINY_F64 21
static size_t tiny_text(char *out, double x, bool is_f32)
{
    int p, n = 0;

    for (p = 1; p <= 17; p++) {
        n = snprintf(out, API_NUM_MAX, "%.*g", p, x);
        if (is_f32 ? strtof(out, NULL) == (float)x : strtod(out, NULL) == x)
            break;
    }
    return (size_t)n;
}

static size_t zero_text(char *out, bool neg)
{
    if (neg) {
        memcpy(out, "-0", 3);
        return 2;
    }
    memcpy(out, "0", 2);
    return 1;
}

size_t api_dtoa_f64(char *out, double x)
{
    uint64_t bits, t;
    int bq;
    bool neg;

    memcpy(&bits, &x, sizeof bits);
    neg = bits >> 63;
    t = bits & ((1ull << 52) - 1);
    bq = (int)(bits >> 52) & 0x7FF;
    if (bq == 0x7FF) {
        memcpy(out, "null", 5);
        return 4;
    }
    g_ensure();
    if (bq != 0) {
        int mq = 1074 + 1 - bq;
        uint64_t c = (1ull << 52) | t;
        if (mq > 0 && mq < 53 && ((c >> mq) << mq) == c)
            return dec_text(out, neg, (struct dec){c >> mq, 0});   /* integer */
        if (t == 0 && bq > 1)                   /* a power of two: narrower below */
            return dec_text(out, neg, to_decimal64(-mq, c));
        return dec_text(out, neg, d_decimal64(-mq, c));
    }
    if (t == 0)
        return zero_text(out, neg);
    if (t < TINY_F64)
        return tiny_text(out, x, false);
    return dec_text(out, neg, d_decimal64(-1074, t));
}

size_t api_dtoa_f32(char *out, float x)
{
    uint32_t bits, t;
    int bq;
    bool neg;

    memcpy(&bits, &x, sizeof bits);
    neg = bits >> 31;
    t = bits & ((1u << 23) - 1);
    bq = (int)(bits >> 23) & 0xFF;
    if (bq == 0xFF) {
        memcpy(out, "null", 5);
        return 4;
    }
    g_ensure();
    if (bq != 0) {
        int mq = 149 + 1 - bq;
        uint32_t c = (1u << 23) | t;
        if (mq > 0 && mq < 24 && ((c >> mq) << mq) == c)
            return dec_text(out, neg, (struct dec){c >> mq, 0});
        return dec_text(out, neg, to_decimal32(-mq, c));
    }
    if (t == 0)
        return zero_text(out, neg);
    if (t < TINY_F32)
        return tiny_text(out, (double)x, true);
    return dec_text(out, neg, to_decimal32(-149, t));
}

size_t api_dtoa_digits(char *out, bool neg, uint64_t f, int e)
{
    if (f == 0)
        return zero_text(out, neg);
    return dec_text(out, neg, (struct dec){f, e});
}
