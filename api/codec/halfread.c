/*
 * api/codec/halfread.c — exact half-precision rounding of decimal text
 * (halfread.h).
 *
 * Only a double that is exactly a midpoint of the half format needs the
 * text, and such a double has at most 13 significant bits, so its exact
 * decimal has at most ~100 significant digits (bfloat16's smallest
 * midpoint 2^-134): glibc's printf prints it exactly ("%.*e" with enough
 * digits is exact in glibc), and the comparison with the text is one of
 * digit strings. A hand-written bignum would do the same; printf is the
 * library that already has one, and this path runs only on ties.
 */
#include "api/codec/halfread.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/half.h"

/* Digits of a decimal without leading zeros, and the exponent E with
 * value = 0.d1d2d3... · 10^E. */
struct digits {
    const char *s;      /* the text; digits are read from it skipping '.' */
    size_t len;
    long exp;
};

/* s: [-] digits [. digits] [e|E [+-] digits] */
static struct digits normalise(const char *s, size_t len)
{
    struct digits d = {s, 0, 0};
    size_t i = 0, mant_end;
    long int_digits = 0, lead = 0, e = 0;
    bool seen_point = false, seen_nz = false;

    if (i < len && s[i] == '-')
        i++;
    d.s = s + i;
    for (mant_end = i; mant_end < len && s[mant_end] != 'e' && s[mant_end] != 'E'; mant_end++) {
        char ch = s[mant_end];
        if (ch == '.') {
            seen_point = true;
            continue;
        }
        if (!seen_nz && ch == '0') {
            if (seen_point)
                lead++;                     /* zeros after the point, before any digit */
            continue;
        }
        seen_nz = true;
        if (!seen_point)
            int_digits++;
    }
    d.len = mant_end - i;
    if (mant_end < len) {
        size_t j = mant_end + 1;
        bool neg = false;
        if (j < len && (s[j] == '+' || s[j] == '-'))
            neg = s[j++] == '-';
        /* saturates far past any midpoint and past any text's count of
         * leading zeros, which the exponent may cancel (e < 2^63 / 10) */
        for (; j < len; j++)
            if (e < 100000000000000000L)
                e = e * 10 + (s[j] - '0');
        e = neg ? -e : e;
    }
    d.exp = (seen_nz ? (int_digits ? int_digits : -lead) : 0) + e;
    return d;
}

/* The i-th significant digit of d ('0' past its end). */
struct cursor {
    const char *p, *end;
};

static struct cursor first_sig(struct digits d)
{
    struct cursor c = {d.s, d.s + d.len};
    while (c.p < c.end && (*c.p == '0' || *c.p == '.'))
        c.p++;
    return c;
}

static char next_digit(struct cursor *c)
{
    while (c->p < c->end && *c->p == '.')
        c->p++;
    return c->p < c->end ? *c->p++ : '0';
}

static bool more(struct cursor c)
{
    for (; c.p < c.end; c.p++)
        if (*c.p != '0' && *c.p != '.')
            return true;
    return false;
}

int api_decimal_cmp(const char *s, size_t len, double x)
{
    char buf[160];
    int n, sign_s = len > 0 && s[0] == '-' ? -1 : 1, sign_x = signbit(x) ? -1 : 1, r = 0;
    struct digits a = normalise(s, len), b;
    struct cursor ca, cb;
    bool zero_a, zero_b = x == 0;

    ca = first_sig(a);
    zero_a = ca.p == ca.end;
    if (zero_a || zero_b) {
        int va = zero_a ? 0 : sign_s, vb = zero_b ? 0 : sign_x;
        return (va > vb) - (va < vb);
    }
    if (sign_s != sign_x)
        return sign_s;
    n = snprintf(buf, sizeof buf, "%.*e", 120, fabs(x));     /* exact for our x */
    b = normalise(buf, (size_t)n);
    if (a.exp != b.exp) {
        r = a.exp > b.exp ? 1 : -1;
    } else {
        cb = first_sig(b);
        while (r == 0 && (more(ca) || more(cb))) {
            char da = next_digit(&ca), db = next_digit(&cb);
            r = (da > db) - (da < db);
        }
    }
    return sign_s * r;
}

uint16_t api_half_from_text(const char *s, size_t len, double v, bool bf16)
{
    int c;
    if (!(bf16 ? half_bf16_is_midpoint(v) : half_f16_is_midpoint(v)))
        return bf16 ? half_bf16_from_f64(v) : half_f16_from_f64(v);
    c = api_decimal_cmp(s, len, v);
    if (c != 0)         /* off the tie: a neighbouring double is no midpoint */
        v = nextafter(v, c > 0 ? INFINITY : -INFINITY);
    return bf16 ? half_bf16_from_f64(v) : half_f16_from_f64(v);
}
