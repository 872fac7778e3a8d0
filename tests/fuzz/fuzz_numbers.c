/*
 * tests/fuzz/fuzz_numbers.c — libFuzzer target: numbers in and out, each
 * against an independent reference.
 *
 * Byte 0 picks the check, the rest is its input:
 *   0  the fast numeric-array reader (api/codec/numread.h) against jansson on
 * the
 *      text (numread_agree of tests/api/numread_diff.h: same verdict, same
 *      shape, bit-identical values); texts with a NUL byte are skipped;
 *   1  the base64 tensor reader (api_b64tensor_parse) on the text: memory
 *      safety, and a taken tensor has count = product of its shape;
 *   2  shortest printing of float64 (api_dtoa_f64) on 8 input bytes: the
 *      text parses back (strtod) to the same bits and has no more
 *      significant digits than the shortest %.{p}g that round-trips;
 *   3  the same for float32 (api_dtoa_f32, strtof) on 4 input bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/numread.h"
#include "api/codec/write.h"
#include "tests/api/numread_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void num_fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_numbers: %s: %s\n", what, text);
    abort();
}

/* Significant digits of a number's text: digits of the mantissa without
 * leading and trailing zeros ("0.00120" -> 2, "9611687000000000000" -> 7). */
static int num_sig_digits(const char *s)
{
    char digits[API_NUM_MAX];
    size_t n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && n < sizeof digits)
            digits[n++] = *s;
    size_t a = 0, b = n;
    while (a < b && digits[a] == '0')
        a++;
    while (b > a && digits[b - 1] == '0')
        b--;
    return (int)(b - a);
}

static void num_check_f64(const uint8_t *p, size_t n)
{
    double x;
    char out[API_NUM_MAX], ref[64];
    if (n < sizeof x)
        return;
    memcpy(&x, p, sizeof x);
    if (!isfinite(x))
        return;
    size_t len = api_dtoa_f64(out, x);
    if (len == 0 || len >= API_NUM_MAX || out[len] != '\0')
        num_fail("bad length", out);
    double back = strtod(out, NULL);
    if (memcmp(&back, &x, sizeof x) != 0 && !(x == 0 && back == 0))
        num_fail("float64 text does not round-trip", out);
    int p_min = 17;
    for (int k = 1; k <= 17; k++) {
        snprintf(ref, sizeof ref, "%.*g", k, x);
        if (strtod(ref, NULL) == x) {
            p_min = k;
            break;
        }
    }
    if (num_sig_digits(out) > p_min)
        num_fail("float64 text is not the shortest", out);
}

static void num_check_f32(const uint8_t *p, size_t n)
{
    float x;
    char out[API_NUM_MAX], ref[64];
    if (n < sizeof x)
        return;
    memcpy(&x, p, sizeof x);
    if (!isfinite(x))
        return;
    size_t len = api_dtoa_f32(out, x);
    if (len == 0 || len >= API_NUM_MAX || out[len] != '\0')
        num_fail("bad length", out);
    float back = strtof(out, NULL);
    if (memcmp(&back, &x, sizeof x) != 0 && !(x == 0 && back == 0))
        num_fail("float32 text does not round-trip", out);
    int p_min = 9;
    for (int k = 1; k <= 9; k++) {
        snprintf(ref, sizeof ref, "%.*g", k, (double)x);
        if (strtof(ref, NULL) == x) {
            p_min = k;
            break;
        }
    }
    if (num_sig_digits(out) > p_min)
        num_fail("float32 text is not the shortest", out);
}

static void num_check_b64(const char *s, size_t n)
{
    struct api_numarray a;
    if (n == 0 || s[0] != '{')
        return;
    if (!api_b64tensor_parse(s, n, 4096, &a))
        return;
    size_t count = 1;
    for (int d = 0; d < a.rank; d++)
        count *= a.shape[d];
    if (a.rank < 1 || a.rank > ATTN_MAX_RANK || count != a.count || count > 4096)
        num_fail("base64 tensor shape and count disagree", "");
    api_numarray_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    switch (data[0] & 3) {
    case 0:
        /* jansson takes a NUL byte right after a number ("[1\0]" reads as
         * [1]); the api must refuse NUL bytes itself (tests/data/bad case
         * json_nul_after_number), so such texts prove nothing here. */
        if (memchr(text, '\0', n))
            break;
        if (n && text[0] == '[' && !numread_agree(text, n))
            num_fail("numeric reader and jansson disagree", "(see above)");
        break;
    case 1: num_check_b64(text, n); break;
    case 2: num_check_f64(data + 1, n); break;
    default: num_check_f32(data + 1, n); break;
    }
    return 0;
}
