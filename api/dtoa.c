/*
 * api/dtoa.c — shortest round-trip decimal text of float64 and float32.
 *
 * The algorithm is Schubfach (R. Giulietti, "The Schubfach way to render
 * doubles", 2020; the one in OpenJDK's Double.toString since JDK 19): for a
 * finite x it picks, among the decimals that read back to x, one with the
 * fewest digits and, among those, the closest to x — with one 128-bit
 * multiplication per bound and no loops over digits. Hand-written because
 * no C library on Debian provides shortest printing (glibc's printf needs
 * up to three tries plus strtod to find it, ~20x slower; the packaged
 * alternatives are C++). The 617 126-bit powers of ten the algorithm needs
 * are computed exactly once, at first use, with a small bignum (below)
 * rather than pasted in as a generated table.
 *
 * Text follows JavaScript's Number-to-String layout (plain digits for
 * 1e-6 <= |x| < 1e21, else d.ddde±x), so the numbers match what a browser
 * prints for the same value; every output is an RFC 8259 number.
 */
#include "api/write.h"

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

/* ---- the table g(k) = floor(10^-k / 2^r) + 1, 2^125 <= g - 1 < 2^126 --- */

#define G_KMIN (-324)
#define G_KMAX 292
#define BIG_LIMBS 40            /* 1280 bits: 10^324 needs 1077 */

static uint64_t g_hi[G_KMAX - G_KMIN + 1];     /* g >> 63 */
static uint64_t g_lo[G_KMAX - G_KMIN + 1];     /* g & (2^63 - 1) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_bool g_ready;     /* set (release) once the table is built */

struct big {
    uint32_t w[BIG_LIMBS];      /* little-endian limbs */
};

static void big_set_pow2(struct big *b, int n)
{
    memset(b, 0, sizeof *b);
    b->w[n / 32] = 1u << (n % 32);
}

static void big_mul_small(struct big *b, uint32_t m)
{
    uint64_t carry = 0;
    int i;

    for (i = 0; i < BIG_LIMBS; i++) {
        uint64_t v = (uint64_t)b->w[i] * m + carry;
        b->w[i] = (uint32_t)v;
        carry = v >> 32;
    }
}

static void big_div_small(struct big *b, uint32_t d)
{
    uint64_t rem = 0;
    int i;

    for (i = BIG_LIMBS - 1; i >= 0; i--) {
        uint64_t v = rem << 32 | b->w[i];
        b->w[i] = (uint32_t)(v / d);
        rem = v % d;
    }
}

/* floor(b / 2^s) (s >= 0) or b * 2^-s (s < 0), low 128 bits. */
static u128 big_shift_low128(const struct big *b, int s)
{
    u128 r = 0;
    int bit;

    for (bit = 127; bit >= 0; bit--) {
        int src = bit + s;
        r <<= 1;
        if (src >= 0 && src < BIG_LIMBS * 32 && (b->w[src / 32] >> (src % 32) & 1))
            r |= 1;
    }
    return r;
}

static void g_init(void)
{
    int k;

    for (k = G_KMIN; k <= G_KMAX; k++) {
        int e = -k, r = flog2pow10(e) - 125, i;
        struct big b;
        u128 g;

        if (e >= 0) {                       /* 10^e / 2^r */
            big_set_pow2(&b, 0);
            for (i = 0; i < e; i++)
                big_mul_small(&b, 10);
            g = big_shift_low128(&b, r);
        } else {                            /* 2^(-r+e) / 5^-e */
            big_set_pow2(&b, -r + e);
            for (i = 0; i < -e; i++)
                big_div_small(&b, 5);
            g = big_shift_low128(&b, 0);
        }
        g += 1;
        g_hi[k - G_KMIN] = (uint64_t)(g >> 63);
        g_lo[k - G_KMIN] = (uint64_t)g & ((1ull << 63) - 1);
    }
    atomic_store_explicit(&g_ready, true, memory_order_release);
}

/* The table, built on first use; after that one load instead of a call
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
static struct dec to_decimal64(int q, uint64_t c, int dk)
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
            return (struct dec){uin ? s : t, k + dk};
    }
    {
        int64_t cmp = (int64_t)(vb - ((s + t) << 1));
        return (struct dec){cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t, k + dk};
    }
}

static struct dec to_decimal32(int q, uint32_t c, int dk)
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
            return (struct dec){uin ? s : t, k + dk};
    }
    {
        int32_t cmp = (int32_t)(vb - ((s + t) << 1));
        return (struct dec){cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t, k + dk};
    }
}

/* ---- text --------------------------------------------------------------- */

static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* v < 10^8 as exactly 8 digits at p: four independent pairs, 32-bit
 * arithmetic (shorter dependency chains than a digit-pair loop). */
static void put8(char *p, uint32_t v)
{
    uint32_t hi = v / 10000, lo = v % 10000;

    memcpy(p, digit_pairs + 2 * (hi / 100), 2);
    memcpy(p + 2, digit_pairs + 2 * (hi % 100), 2);
    memcpy(p + 4, digit_pairs + 2 * (lo / 100), 2);
    memcpy(p + 6, digit_pairs + 2 * (lo % 100), 2);
}

/* The decimal digits of f (> 0) into the end of buf[24]; returns where they
 * start. Eight digits per 64-bit division, then two at a time. */
static char *digits_of(uint64_t f, char *end)
{
    char *p = end;
    uint32_t v;

    while (f >= 100000000) {
        p -= 8;
        put8(p, (uint32_t)(f % 100000000));
        f /= 100000000;
    }
    v = (uint32_t)f;
    while (v >= 100) {
        unsigned r = v % 100;
        v /= 100;
        p -= 2;
        memcpy(p, digit_pairs + 2 * r, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

/* Digits of d.f without trailing zeros, as JavaScript lays them out. */
static size_t dec_text(char *out, bool neg, struct dec d)
{
    char buf[24 + 17], *dig;    /* digits end at buf + 24; 17 spare bytes
                                   let the hot branch copy a fixed 17 */
    int n, exp10, i;
    char *o = out;

    while (d.f % 100 == 0 && d.f != 0) {
        d.f /= 100;
        d.e += 2;
    }
    if (d.f % 10 == 0 && d.f != 0) {
        d.f /= 10;
        d.e++;
    }
    memset(buf + 24, 0, 17);
    dig = digits_of(d.f, buf + 24);
    n = (int)(buf + 24 - dig);
    /* dig[0..n) most significant first; x = 0.D * 10^(e+n) */
    exp10 = d.e + n - 1;                    /* scientific exponent */
    if (neg)
        *o++ = '-';
    if (exp10 >= -6 && exp10 < 21) {
        if (exp10 < 0) {
            *o++ = '0';
            *o++ = '.';
            for (i = -1; i > exp10; i--)
                *o++ = '0';
            /* a constant-size copy (no libc call): n <= 17 digits; o is at
               most out + 8, so out + 25 <= out + API_NUM_MAX */
            memcpy(o, dig, 17);
            o += n;
        } else if (n <= exp10 + 1) {        /* an integer */
            memcpy(o, dig, (size_t)n);
            o += n;
            for (i = n - 1; i < exp10; i++)
                *o++ = '0';
        } else {
            memcpy(o, dig, (size_t)exp10 + 1);
            o += exp10 + 1;
            *o++ = '.';
            memcpy(o, dig + exp10 + 1, (size_t)(n - exp10 - 1));
            o += n - exp10 - 1;
        }
    } else {
        *o++ = dig[0];
        if (n > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)n - 1);
            o += n - 1;
        }
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
        return dec_text(out, neg, to_decimal64(-mq, c, 0));
    }
    if (t == 0)
        return zero_text(out, neg);
    if (t < TINY_F64)
        return tiny_text(out, x, false);
    return dec_text(out, neg, to_decimal64(-1074, t, 0));
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
        return dec_text(out, neg, to_decimal32(-mq, c, 0));
    }
    if (t == 0)
        return zero_text(out, neg);
    if (t < TINY_F32)
        return tiny_text(out, (double)x, true);
    return dec_text(out, neg, to_decimal32(-149, t, 0));
}
