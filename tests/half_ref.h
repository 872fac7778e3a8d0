/*
 * tests/half_ref.h — reference float16 / bfloat16 rounding for the tests,
 * written apart from core/half.c and api/codec/dtoa_half.c.
 *
 * ref_round knows nothing of bit tricks: it lists every finite
 * non-negative value of the format (exact doubles, built from the fields
 * with ldexp), finds the two neighbours of x by binary search, and compares
 * x with their midpoint (exact in double: at most 13 significant bits); a
 * tie picks the even encoding, and past the largest finite value the next
 * neighbour is infinity (2^(emax+1) stands for it, as IEEE 754 rounds).
 * ref_read rounds a decimal text exactly: strtod, then, when the double is
 * a midpoint, the text against the midpoint's exact decimal expansion
 * (schoolbook digit arithmetic: M * 5^n or M * 2^n).
 */
#ifndef ATTND_TEST_HALF_REF_H
#define ATTND_TEST_HALF_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct reffmt {
    int mb, bias, ebits;
    uint16_t inf;               /* +infinity's encoding */
    double vals[0x8000];        /* value of each encoding 0..inf (inf: 2^(emax+1)) */
};

static __attribute__((unused)) struct reffmt R16 = {10, 15, 5, 0x7C00, {0}};
static __attribute__((unused)) struct reffmt RB16 = {7, 127, 8, 0x7F80, {0}};

static inline double field_value(const struct reffmt *f, unsigned e, unsigned m)
{
    if (e == 0)
        return ldexp((double)m, 1 - f->bias - f->mb);
    return ldexp((double)((1u << f->mb) + m), (int)e - f->bias - f->mb);
}

static inline void ref_init(struct reffmt *f)
{
    for (unsigned h = 0; h <= f->inf; h++)
        f->vals[h] = field_value(f, h >> f->mb, h & ((1u << f->mb) - 1));
}

/* x finite -> the format's encoding, round to nearest even. */
static inline uint16_t ref_round(const struct reffmt *f, double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x), mid;
    unsigned lo = 0, hi = f->inf;

    if (a >= f->vals[f->inf])
        return sign | f->inf;
    while (hi - lo > 1) {                   /* vals[lo] <= a < vals[hi] */
        unsigned m = (lo + hi) / 2;
        if (f->vals[m] <= a)
            lo = m;
        else
            hi = m;
    }
    mid = (f->vals[lo] + f->vals[hi]) / 2;
    if (a < mid)
        return sign | (uint16_t)lo;
    if (a > mid)
        return sign | (uint16_t)hi;
    return sign | (uint16_t)((lo & 1) ? hi : lo);
}

/* An exact decimal: digits d[0..n) (no leading zeros) and exponent: the
 * value is 0.d[0]d[1]... * 10^exp. */
struct ref_dec {
    char d[512];
    int n;
    long exp;
};

/* Text [-]ddd[.ddd][e[+-]ddd] -> ref_dec (sign dropped). */
static inline void ref_dec_parse(const char *s, struct ref_dec *r)
{
    long point = -1, e = 0, count = 0;
    r->n = 0;
    r->exp = 0;
    if (*s == '-')
        s++;
    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (*s == '.') {
            point = count;
            continue;
        }
        count++;
        if (r->n == 0 && *s == '0') {
            continue;
        }
        if (r->n == 0)
            r->exp = -(count - 1);          /* digits before this one */
        if (r->n < (int)sizeof r->d)
            r->d[r->n++] = *s;
    }
    if (*s)
        e = strtol(s + 1, NULL, 10);
    if (point < 0)
        point = count;
    /* value = 0.d * 10^(point - leading digits skipped) */
    r->exp = r->exp + point + e;
    while (r->n > 0 && r->d[r->n - 1] == '0')
        r->n--;
}

/* M * 2^e exactly (M > 0) -> ref_dec. */
static inline void ref_dec_of(uint64_t M, int e, struct ref_dec *r)
{
    int digs[600], n = 0, frac = 0;     /* little-endian decimal digits */
    for (; M; M /= 10)
        digs[n++] = (int)(M % 10);
    for (; e > 0; e--)                  /* times 2 */
        for (int i = 0, c = 0; i < n || c; i++) {
            int v = (i < n ? digs[i] * 2 : 0) + c;
            if (i == n)
                n++;
            digs[i] = v % 10;
            c = v / 10;
        }
    for (; e < 0; e++, frac++)          /* halve: times 5, one more fraction digit */
        for (int i = 0, c = 0; i < n || c; i++) {
            int v = (i < n ? digs[i] * 5 : 0) + c;
            if (i == n)
                n++;
            digs[i] = v % 10;
            c = v / 10;
        }
    r->n = 0;
    for (int i = n - 1; i >= 0; i--)
        r->d[r->n++] = (char)('0' + digs[i]);
    r->exp = n - frac;
    while (r->n > 0 && r->d[r->n - 1] == '0')
        r->n--;
}

static inline int ref_dec_cmp(const struct ref_dec *a, const struct ref_dec *b)
{
    if (a->n == 0 || b->n == 0)
        return (a->n != 0) - (b->n != 0);
    if (a->exp != b->exp)
        return a->exp > b->exp ? 1 : -1;
    for (int i = 0; i < a->n || i < b->n; i++) {
        char x = i < a->n ? a->d[i] : '0', y = i < b->n ? b->d[i] : '0';
        if (x != y)
            return x > y ? 1 : -1;
    }
    return 0;
}

/* The encoding nearest (ties to even) to the decimal text s. */
static inline uint16_t ref_read(const struct reffmt *f, const char *s)
{
    double x = strtod(s, NULL), a = fabs(x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    unsigned lo = 0, hi = f->inf;
    struct ref_dec dt, dm;
    double mid, m;
    int ex, c;

    if (a >= f->vals[f->inf] || a == 0)
        return ref_round(f, x);
    while (hi - lo > 1) {
        unsigned k = (lo + hi) / 2;
        if (f->vals[k] <= a)
            lo = k;
        else
            hi = k;
    }
    mid = (f->vals[lo] + f->vals[hi]) / 2;
    if (a != mid)
        return ref_round(f, x);
    m = frexp(mid, &ex);                /* mid = m 2^ex, m in [0.5, 1) */
    ref_dec_parse(s, &dt);
    ref_dec_of((uint64_t)ldexp(m, 40), ex - 40, &dm);
    c = ref_dec_cmp(&dt, &dm);
    if (c < 0)
        return sign | (uint16_t)lo;
    if (c > 0)
        return sign | (uint16_t)hi;
    return sign | (uint16_t)((lo & 1) ? hi : lo);
}

#endif
