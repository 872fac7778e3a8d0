/*
 * tests/api/test_api_dtoa_half.c — the float16 / bfloat16 printers
 * (api/codec/dtoa_half.c) and the exact half reader of decimal text
 * (api/codec/halfread.c), on every one of the 65,536 patterns of each format.
 *
 * Each printed text must be an RFC 8259 number in api/codec/dtoa.c's layout
 * that
 * the reference reader of tests/half_ref.h (exact, written apart) rounds
 * back to the same bits; no decimal with one digit fewer may do so (if one
 * did, the nearest such decimal to the value or its neighbour one unit
 * away would: both are tried); and of the decimals with as many digits
 * that read back, none is closer. The production reader must agree with
 * the reference on every printed text, on every midpoint's exact decimal
 * and on decimals a hair above and below each midpoint (the double
 * rounding trap: they read as the midpoint's double).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/halfread.h"
#include "api/codec/write.h"
#include "core/half.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/half_ref.h"

static double value_of(const struct reffmt *f, uint16_t h)
{
    double v = f->vals[h & 0x7FFF];
    return h & 0x8000 ? -v : v;
}

/* Significant digits of a number text. */
static int sig_digits(const char *s)
{
    struct ref_dec d;
    ref_dec_parse(s, &d);
    return d.n;
}

/* Whether a p-digit decimal other than those near v could read back: the
 * nearest p-digit decimal to v and its neighbours one unit away. Returns
 * the count that do read back to h. */
static int readers_with(const struct reffmt *f, uint16_t h, double v, int p)
{
    char buf[64], t[64];
    long long D;
    int e, hits = 0;
    snprintf(buf, sizeof buf, "%.*e", p - 1, fabs(v));
    /* buf = d.ddd e±x -> D, e */
    D = 0;
    for (const char *s = buf; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            D = D * 10 + (*s - '0');
    e = (int)strtol(strchr(buf, 'e') + 1, NULL, 10) - (p - 1);
    for (long long d = D - 1; d <= D + 1; d++) {
        if (d <= 0)
            continue;
        snprintf(t, sizeof t, "%s%llde%d", v < 0 ? "-" : "", d, e);
        hits += ref_read(f, t) == h;
    }
    return hits;
}

static int check_format(const struct reffmt *f, size_t (*print)(char *, uint16_t), bool bf16,
                        int *max_digits)
{
    int bad = 0;
    /* quick (memcheck, qemu): every fifth pattern; make test and make
     * asan run all of them */
    unsigned step = t_quick() ? 5 : 1;
    for (unsigned u = 0; u < 65536; u += step) {
        uint16_t h = (uint16_t)u;
        char out[API_NUM_MAX];
        size_t n = print(out, h);
        double v;
        int p;

        if (strlen(out) != n) {
            bad++;
            continue;
        }
        if ((h & 0x7FFF) >= f->inf) {
            bad += strcmp(out, "null") != 0;
            continue;
        }
        v = value_of(f, h);
        if (!t_json_number_ok(out) || ref_read(f, out) != h ||
            api_half_from_text(out, n, strtod(out, NULL), bf16) != h) {
            if (bad++ < 5)
                printf("  0x%04X -> %s (reads back 0x%04X)\n", u, out, ref_read(f, out));
            continue;
        }
        p = sig_digits(out);
        if (p > *max_digits)
            *max_digits = p;
        if (p > 1 && readers_with(f, h, v, p - 1)) {
            if (bad++ < 5)
                printf("  0x%04X -> %s: a shorter decimal reads back\n", u, out);
        }
        if (v != 0) {   /* none of the same length is closer */
            double mine = fabs(strtod(out, NULL) - v);
            char buf[64];
            snprintf(buf, sizeof buf, "%.*e", p - 1, v);
            if (ref_read(f, buf) == h && fabs(strtod(buf, NULL) - v) < mine) {
                if (bad++ < 5)
                    printf("  0x%04X -> %s: %s is closer\n", u, out, buf);
            }
        }
    }
    return bad;
}

TEST(f16_every_pattern_shortest)
{
    int maxd = 0;
    CHECK_EQ_INT(check_format(&R16, api_dtoa_f16, false, &maxd), 0);
    CHECK_EQ_INT(maxd, 5);
}

TEST(bf16_every_pattern_shortest)
{
    int maxd = 0;
    CHECK_EQ_INT(check_format(&RB16, api_dtoa_bf16, true, &maxd), 0);
    CHECK_EQ_INT(maxd, 4);
}

TEST(named_texts)
{
    char out[API_NUM_MAX];
    api_dtoa_f16(out, 0x3C00);
    CHECK_STR(out, "1");
    api_dtoa_f16(out, 0x7BFF);
    CHECK_STR(out, "65500");                /* 65504: 65500 is in its interval */
    api_dtoa_f16(out, 0x0001);
    CHECK_STR(out, "6e-8");                 /* 2^-24 = 5.96e-8 */
    api_dtoa_f16(out, 0x3555);
    CHECK_STR(out, "0.3333");
    api_dtoa_f16(out, 0x8000);
    CHECK_STR(out, "-0");
    api_dtoa_f16(out, 0xFC00);
    CHECK_STR(out, "null");
    api_dtoa_f16(out, 0x2E66);
    CHECK_STR(out, "0.1");
    api_dtoa_bf16(out, 0x3F80);
    CHECK_STR(out, "1");
    api_dtoa_bf16(out, 0x3DCD);
    CHECK_STR(out, "0.1");                  /* 0.10009765625 */
    api_dtoa_bf16(out, 0x7F7F);
    CHECK_STR(out, "3.39e+38");
    api_dtoa_bf16(out, 0x0001);
    CHECK_STR(out, "9e-41");
    api_dtoa_bf16(out, 0xC2F7);
    CHECK_STR(out, "-123.5");
}

/* Decimals at, a hair above and a hair below every midpoint. */
static int midpoint_texts(const struct reffmt *f, bool bf16)
{
    int bad = 0;
    for (unsigned h = 0; h < f->inf; h++) {
        double mid = (f->vals[h] + f->vals[h + 1]) / 2, m;
        struct ref_dec d;
        char t[700], u[700];
        int ex, k;
        m = frexp(mid, &ex);
        ref_dec_of((uint64_t)ldexp(m, 40), ex - 40, &d);
        /* t = 0.DIGITS e exp */
        memcpy(t, "0.", 2);
        memcpy(t + 2, d.d, (size_t)d.n);
        k = 2 + d.n;
        for (int s = 0; s < 3; s++) {
            int len = k;
            memcpy(u, t, (size_t)k);
            if (s == 1)                      /* above: ...0001 */
                len += snprintf(u + len, 40, "00000000000000000000001");
            if (s == 2) {                    /* below: last digit - 1, then 9s */
                u[len - 1]--;
                len += snprintf(u + len, 40, "99999999999999999999999");
            }
            len += snprintf(u + len, 40, "e%ld", d.exp);
            for (int neg = 0; neg < 2; neg++) {
                char w[760];
                snprintf(w, sizeof w, "%s%s", neg ? "-" : "", u);
                uint16_t want = ref_read(f, w);
                uint16_t got = api_half_from_text(w, strlen(w), strtod(w, NULL), bf16);
                if (got != want && bad++ < 5)
                    printf("  %s: 0x%04X, want 0x%04X\n", w, got, want);
                if (s == 0 && !(bf16 ? half_bf16_is_midpoint(strtod(w, NULL))
                                     : half_f16_is_midpoint(strtod(w, NULL))))
                    bad++;
            }
        }
    }
    return bad;
}

TEST(reader_at_midpoints)
{
    CHECK_EQ_INT(midpoint_texts(&R16, false), 0);
    CHECK_EQ_INT(midpoint_texts(&RB16, true), 0);
    /* the trap by name: 1 + 2^-11 is the float16 tie after 1 */
    CHECK_EQ_INT(api_half_from_text("1.00048828125", 13, 1.00048828125, false), 0x3C00);
    CHECK_EQ_INT(api_half_from_text("1.00048828125000001", 19, 1.00048828125, false), 0x3C01);
    CHECK_EQ_INT(api_half_from_text("1.00048828124999999", 19, 1.00048828125, false), 0x3C00);
    CHECK_EQ_INT(api_half_from_text("-100048828125000001e-17", 23, -1.00048828125, false),
                 0xBC01);
    CHECK_EQ_INT(api_decimal_cmp("0.5", 3, 0.5), 0);
    CHECK_EQ_INT(api_decimal_cmp("5E-1", 4, 0.5), 0);
    CHECK_EQ_INT(api_decimal_cmp("0.50000000000000000000000001", 28, 0.5), 1);
    CHECK_EQ_INT(api_decimal_cmp("-0.4999999999999999999999", 25, -0.5), 1);
    CHECK_EQ_INT(api_decimal_cmp("0", 1, 0.5), -1);
    CHECK_EQ_INT(api_decimal_cmp("-0.0", 4, 0.0), 0);
}

/* An exponent of 7 digits that cancels as many leading zeros of a
 * fraction (or trailing zeros of an integer): the text is still
 * 1 + 2^-11 and a hair, above or below the tie, and decides it. */
TEST(reader_exponent_cancels_zeros)
{
    static const struct {
        const char *head, *tail;       /* 999999 zeros between them */
        uint16_t want;
    } cases[] = {
        {"0.", "100048828125000001e1000000", 0x3C01},
        {"0.", "100048828124999999e1000000", 0x3C00},
        {"-0.", "100048828125000001e1000000", 0xBC01},
        {"100048828125000001", "e-1000016", 0x3C01},
        {"100048828124999999", "e-1000016", 0x3C00},
    };
    size_t zeros = 999999, cap = zeros + 64;
    char *t = malloc(cap);

    CHECK(t != NULL);
    for (size_t i = 0; t && i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].head);
        memcpy(t, cases[i].head, n);
        memset(t + n, '0', zeros);
        n += zeros;
        n += (size_t)snprintf(t + n, cap - n, "%s", cases[i].tail);
        double v = strtod(t, NULL);
        CHECK(fabs(v) == 1.00048828125);
        CHECK_EQ_INT(api_half_from_text(t, n, v, false), cases[i].want);
    }
    free(t);
}

int main(void)
{
    ref_init(&R16);
    ref_init(&RB16);
    RUN(f16_every_pattern_shortest);
    RUN(bf16_every_pattern_shortest);
    RUN(named_texts);
    RUN(reader_at_midpoints);
    RUN(reader_exponent_cancels_zeros);
    TEST_MAIN_END();
}
