/*
 * tests/api/test_api_numbers.c — the number and byte plumbing of api/:
 * shortest round-trip printing (random float64 bit patterns, every float64
 * binary exponent, and a sampled sweep over every float32 exponent and
 * sign, read back with strtod / strtof, checked to be minimal and the
 * closest of the shortest), the
 * JavaScript-style layout (each output re-laid out from its own digits and
 * checked equal, over random bits and every decade), fixed digits, JSON
 * number grammar, the capped buffer, and matrix writers (base64:
 * tests/api/test_api_base64.c).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/codec/buf.h"
#include "api/codec/write.h"

/* xorshift64*: deterministic test data */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    return t_rng_next(&rng_state);
}

/* Significant digits of a %g-style number text (leading and trailing
 * zeros of the digit string do not count: "758450" has 5). */
static int sig_digits(const char *s)
{
    int n = 0, zeros = 0, started = 0;

    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (*s < '0' || *s > '9')
            continue;
        if (*s != '0')
            started = 1;
        if (!started)
            continue;
        if (*s == '0') {
            zeros++;
        } else {
            n += zeros + 1;
            zeros = 0;
        }
    }
    return n;
}

/* The significant digits of a number text, without leading or trailing
 * zeros, into d. */
static void digit_string(const char *s, char *d)
{
    size_t n = 0;
    int started = 0;

    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (*s < '0' || *s > '9')
            continue;
        if (*s != '0')
            started = 1;
        if (started)
            d[n++] = *s;
    }
    while (n && d[n - 1] == '0')
        n--;
    d[n] = '\0';
}

/* out has p significant digits: when the correctly rounded p-digit decimal
 * reads back to x (it may not at a power of two, whose rounding interval
 * is narrower below), they must be its digits (the closest of the
 * shortest). */
static int closest(const char *out, double x, int p, int is_f32)
{
    char ref[400], a[64], b[400];

    snprintf(ref, sizeof ref, "%.*g", p, x);
    if (is_f32 ? strtof(ref, NULL) != (float)x : strtod(ref, NULL) != x)
        return 1;
    digit_string(out, a);
    digit_string(ref, b);
    return strcmp(a, b) == 0;
}

/* The text JavaScript's Number-to-String gives for the digits and the
 * decimal exponent of number text s (any layout): s must equal it. */
static int js_layout_ok(const char *s)
{
    char d[64], ref[64], *o = ref;
    const char *t = s;
    int n = 0, point = 0, seen_point = 0, started = 0, e = 0, i;

    if (*t == '-')
        *o++ = *t++;
    for (; *t && *t != 'e'; t++) {          /* value = 0.d * 10^point */
        if (*t == '.') {
            seen_point = 1;
        } else if (*t == '0' && !started) {
            point -= seen_point;
        } else {
            started = 1;
            d[n++] = *t;
            point += !seen_point;
        }
    }
    if (*t == 'e')
        e = (int)strtol(t + 1, NULL, 10);
    while (n && d[n - 1] == '0') {
        n--;
    }
    if (n == 0)
        return strcmp(s, "0") == 0 || strcmp(s, "-0") == 0;
    e += point - 1;                         /* scientific exponent */
    if (e >= -6 && e < 21) {
        if (e < 0) {
            o += snprintf(o, (size_t)(ref + sizeof ref - o), "0.");
            for (i = 0; i < -e - 1; i++)
                *o++ = '0';
            o += snprintf(o, (size_t)(ref + sizeof ref - o), "%.*s", n, d);
        } else if (n <= e + 1) {
            o += snprintf(o, (size_t)(ref + sizeof ref - o), "%.*s", n, d);
            for (i = n; i < e + 1; i++)
                *o++ = '0';
        } else {
            o += snprintf(o, (size_t)(ref + sizeof ref - o), "%.*s.%.*s", e + 1, d, n - e - 1, d + e + 1);
        }
    } else {
        o += snprintf(o, (size_t)(ref + sizeof ref - o), "%c", d[0]);
        if (n > 1)
            o += snprintf(o, (size_t)(ref + sizeof ref - o), ".%.*s", n - 1, d + 1);
        o += snprintf(o, (size_t)(ref + sizeof ref - o), "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    *o = '\0';
    return strcmp(s, ref) == 0;
}

static int f64_ok(double x, int *bad_minimal)
{
    char out[API_NUM_MAX], shorter[400];
    size_t n = api_fmt_f64(out, x, 0);
    int p = sig_digits(out);

    if (n != strlen(out) || !t_json_number_ok(out) || !js_layout_ok(out) ||
        strtod(out, NULL) != x || (p > 0 && !closest(out, x, p, 0)))
        return 0;
    /* minimal: one digit fewer does not read back */
    if (p > 1) {
        snprintf(shorter, sizeof shorter, "%.*g", p - 1, x);
        if (strtod(shorter, NULL) == x && (*bad_minimal)++ < 3)
            printf("  f64 %s could be %s\n", out, shorter);
    }
    return 1;
}

static int f32_ok(float x, int *bad_minimal)
{
    char out[API_NUM_MAX], shorter[400];
    size_t n = api_fmt_f32(out, x, 0);
    int p = sig_digits(out);

    if (n != strlen(out) || !t_json_number_ok(out) || !js_layout_ok(out) ||
        strtof(out, NULL) != x || (p > 0 && !closest(out, (double)x, p, 1)))
        return 0;
    if (p > 1) {
        snprintf(shorter, sizeof shorter, "%.*g", p - 1, (double)x);
        if (strtof(shorter, NULL) == x && (*bad_minimal)++ < 3)
            printf("  f32 %s could be %s\n", out, shorter);
    }
    return 1;
}

TEST(f64_random_round_trip)
{
    int i, bad = 0, not_minimal = 0;

    for (i = 0; i < 100000; i++) {
        uint64_t bits = rng();
        double x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x))
            continue;
        if (!f64_ok(x, &not_minimal) && bad++ < 5)
            printf("  f64 %.17g: not a round-trip, or not the closest\n", x);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(not_minimal, 0);
}

TEST(f64_special_values)
{
    static const double xs[] = {0.0, -0.0, 1.0, -1.0, 0.1, 0.2, 0.3, 1e-300,
                                5e-324, DBL_MIN, DBL_MAX, -DBL_MAX, 1e21, 1e22,
                                123456789012345678.0, 0.575975, 1 / 3.0};
    char out[API_NUM_MAX];
    int not_minimal = 0;
    size_t i;

    for (i = 0; i < sizeof xs / sizeof xs[0]; i++)
        CHECK(f64_ok(xs[i], &not_minimal));
    CHECK_EQ_INT(not_minimal, 0);
    api_fmt_f64(out, 0.1, 0);
    CHECK_STR(out, "0.1");
    api_fmt_f64(out, -0.0, 0);
    CHECK_STR(out, "-0");
    api_fmt_f64(out, 1.0, 0);
    CHECK_STR(out, "1");
    api_fmt_f64(out, 1e21, 0);
    CHECK_STR(out, "1e+21");
    api_fmt_f64(out, 1e20, 0);
    CHECK_STR(out, "100000000000000000000");
    api_fmt_f64(out, 1e-7, 0);
    CHECK_STR(out, "1e-7");
    api_fmt_f64(out, 1.5e-6, 0);
    CHECK_STR(out, "0.0000015");
    api_fmt_f64(out, 5e-324, 0);
    CHECK_STR(out, "5e-324");
    api_fmt_f64(out, 123.456, 0);
    CHECK_STR(out, "123.456");
    api_fmt_f64(out, -2.5e-300, 0);
    CHECK_STR(out, "-2.5e-300");
    api_fmt_f64(out, INFINITY, 0);
    CHECK_STR(out, "null");
    api_fmt_f64(out, NAN, 0);
    CHECK_STR(out, "null");
}

/* The float64 classes random bits rarely reach, each through both of
 * api/codec/dtoa.c's algorithms and their boundaries: subnormals, the powers of
 * two and their neighbours (where the interval is narrower below), the
 * smallest and largest exponents. */
TEST(f64_edge_classes)
{
    int bad = 0, not_minimal = 0, i;

    for (i = 0; i < 40000; i++) {
        uint64_t r = rng(), sign = r & (1ull << 63), bits;
        uint64_t e = 1 + (rng() % 2046), m = rng() & 0xFFFFFFFFFFFFFull;
        double x;
        switch (i % 5) {
        case 0: bits = sign | m; break;                         /* subnormal */
        case 1: bits = sign | e << 52 | (rng() % 3); break;     /* 2^k and above */
        case 2: bits = sign | e << 52 | (0xFFFFFFFFFFFFFull - rng() % 3); break;
        case 3: bits = sign | (1 + rng() % 3) << 52 | m; break;  /* smallest normals */
        default: bits = sign | (2046 - rng() % 3) << 52 | m; break;
        }
        memcpy(&x, &bits, sizeof x);
        if (!f64_ok(x, &not_minimal) && bad++ < 5)
            printf("  f64 %.17g (%016llx): wrong text\n", x, (unsigned long long)bits);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(not_minimal, 0);
}

/* Every binary exponent of float64, each with the power of two (Schubfach),
 * its neighbours and random mantissas (Dragonbox), both signs: between them
 * they read every entry of api/codec/dtoa.c's two tables of powers of ten. */
TEST(f64_every_binary_exponent)
{
    int bad = 0, not_minimal = 0;

    for (uint64_t e = 0; e <= 2046; e++) {
        uint64_t ms[6] = {0, 1, 0xFFFFFFFFFFFFFull, rng() & 0xFFFFFFFFFFFFFull,
                          rng() & 0xFFFFFFFFFFFFFull, rng() & 0xFFFFFFFFFFFFFull};
        for (int i = 0; i < 6; i++) {
            uint64_t bits = (uint64_t)(i & 1) << 63 | e << 52 | ms[i];
            double x;
            memcpy(&x, &bits, sizeof x);
            if (x != 0 && !f64_ok(x, &not_minimal) && bad++ < 5)
                printf("  f64 %.17g (%016llx): wrong text\n", x, (unsigned long long)bits);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(not_minimal, 0);
}

/* Random bit patterns are mostly far from 1: every decade the plain
 * layouts cover (and a few past each end), with full-length mantissas and
 * with short decimals (k / 10^m, integers), both signs. */
TEST(f64_every_decade)
{
    int bad = 0, not_minimal = 0, e, i;

    for (e = -10; e <= 24; e++) {
        for (i = 0; i < 2000; i++) {
            double u = (double)(rng() >> 11) / 9007199254740992.0;   /* [0,1) */
            double x = (1 + 9 * u) * pow(10, e);
            double y = (double)(rng() % 100000) * pow(10, e - (int)(rng() % 6));
            if (i & 1) {
                x = -x;
                y = -y;
            }
            if ((!f64_ok(x, &not_minimal) || !f64_ok(y, &not_minimal)) && bad++ < 5)
                printf("  f64 %.17g / %.17g: wrong text\n", x, y);
            if (!f32_ok((float)x, &not_minimal) && bad++ < 5)
                printf("  f32 %.9g: wrong text\n", (double)(float)x);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(not_minimal, 0);
}

/* Every sign and exponent of float32, with sampled mantissas, plus the
 * neighbourhoods of powers of two and the subnormals. */
TEST(f32_sampled_sweep)
{
    int bad = 0, not_minimal = 0, tested = 0;
    uint32_t hi, k;

    for (hi = 0; hi < 512; hi++) {          /* sign + 8-bit exponent */
        if ((hi & 255) == 255)
            continue;                       /* inf / NaN */
        for (k = 0; k < 160; k++) {
            uint32_t mant = k < 16 ? k : k < 32 ? 0x7FFFFF - (k - 16)
                                               : (uint32_t)rng() & 0x7FFFFF;
            uint32_t bits = hi << 23 | mant;
            float x;
            memcpy(&x, &bits, sizeof x);
            tested++;
            if (!f32_ok(x, &not_minimal) && bad++ < 5)
                printf("  f32 %.9g does not round-trip\n", (double)x);
        }
    }
    CHECK(tested > 80000);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(not_minimal, 0);
}

TEST(f32_known)
{
    char out[API_NUM_MAX];

    api_fmt_f32(out, 0.1f, 0);
    CHECK_STR(out, "0.1");
    api_fmt_f32(out, 16777216.0f, 0);
    CHECK_STR(out, "16777216");
    api_fmt_f32(out, FLT_MAX, 0);
    CHECK(strtof(out, NULL) == FLT_MAX);
    api_fmt_f32(out, 0.575975f, 0);
    CHECK_STR(out, "0.575975");
}

TEST(fixed_digits)
{
    char out[API_NUM_MAX];

    api_fmt_f64(out, 0.5759746, 3);
    CHECK_STR(out, "0.576");
    api_fmt_f64(out, 123456.0, 2);
    CHECK_STR(out, "1.2e+05");
    CHECK(t_json_number_ok(out));
    api_fmt_f64(out, 1 / 3.0, 17);
    CHECK(strtod(out, NULL) == 1 / 3.0);
    api_fmt_f32(out, 0.1f, 9);
    CHECK_STR(out, "0.100000001");
}

TEST(buf_cap)
{
    struct api_buf b;
    size_t len;
    char *p;

    api_buf_init(&b, 10);
    CHECK(api_buf_puts(&b, "hello"));
    CHECK(api_buf_printf(&b, "%d", 12345));
    CHECK_EQ_INT(b.len, 10);
    CHECK(!api_buf_putc(&b, 'x'));          /* 11 > cap */
    CHECK(!api_buf_ok(&b) && b.too_large);
    CHECK(!api_buf_puts(&b, ""));           /* sticky */
    api_buf_free(&b);
    api_buf_init(&b, 1 << 20);
    for (len = 0; len < 10000; len++)
        api_buf_putc(&b, 'a');
    CHECK(api_buf_ok(&b) && b.len == 10000 && b.data[10000] == '\0');
    p = api_buf_take(&b, &len);
    CHECK(len == 10000 && b.data == NULL && b.len == 0);
    free(p);
}

TEST(matrix_writers)
{
    static const double m[] = {1, 0.5, -INFINITY, 2, 3, 4};
    static const float f[] = {0.1f, 2};
    size_t shape3[] = {1, 2, 3}, shape1[] = {2};
    struct api_buf b;

    api_buf_init(&b, 1024);
    CHECK(api_write_matrix(&b, m, ATTN_F64, 3, shape3, 0, true));
    CHECK_STR(b.data, "[[[1,0.5,null],[2,3,4]]]");
    api_buf_free(&b);
    CHECK(api_write_matrix(&b, m, ATTN_F64, 2, shape3 + 1, 0, true));
    CHECK_STR(b.data, "[[1,0.5,null],[2,3,4]]");
    api_buf_free(&b);
    CHECK(api_write_matrix(&b, f, ATTN_F32, 1, shape1, 0, false));
    CHECK_STR(b.data, "[0.1,2]");
    api_buf_free(&b);
    CHECK(api_write_matrix_b64(&b, f, ATTN_F32, 1, shape1));
    CHECK_STR(b.data, "{\"shape\":[2],\"dtype\":\"float32\",\"data\":\"zczMPQAAAEA=\"}");
    api_buf_free(&b);
    CHECK(api_write_string(&b, "a\"b\\c\n"));
    CHECK_STR(b.data, "\"a\\\"b\\\\c\\u000a\"");
    api_buf_free(&b);
}

int main(void)
{
    RUN(f64_random_round_trip);
    RUN(f64_special_values);
    RUN(f64_every_decade);
    RUN(f64_edge_classes);
    RUN(f64_every_binary_exponent);
    RUN(f32_sampled_sweep);
    RUN(f32_known);
    RUN(fixed_digits);
    RUN(buf_cap);
    RUN(matrix_writers);
    TEST_MAIN_END();
}
