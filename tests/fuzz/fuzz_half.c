/*
 * tests/fuzz/fuzz_half.c — libFuzzer target: the float16 / bfloat16 text
 * codec (api/codec/dtoa_half.c printers, api/codec/halfread.c exact reader).
 *
 * Per input:
 *   bytes -> text: each 2-byte little-endian pattern printed as float16 and
 *            as bfloat16 must be "null" exactly for Inf/NaN, else an RFC 8259
 *            number that strtod reads whole and the exact reader rounds back
 *            to the same bits;
 *   text -> half: the input as a decimal (when strtod reads all of it and it
 *            is finite) rounds to an encoding h whose rounding interval holds
 *            it: the decimal lies between the midpoints around h (compared
 *            exactly by api_decimal_cmp), on a midpoint only when h is even.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/halfread.h"
#include "api/codec/write.h"
#include "core/half.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void half_fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_half: %s: %s\n", what, text);
    abort();
}

static double widen(uint16_t h, bool bf16)
{
    return bf16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
}

static bool finite16(uint16_t h, bool bf16)
{
    return bf16 ? half_bf16_is_finite(h) : half_f16_is_finite(h);
}

static void check_print(uint16_t h, bool bf16)
{
    char out[API_NUM_MAX], *end;
    size_t n = bf16 ? api_dtoa_bf16(out, h) : api_dtoa_f16(out, h);
    if (n != strlen(out))
        half_fail("length", out);
    if (!finite16(h, bf16)) {
        if (strcmp(out, "null") != 0)
            half_fail("non-finite not null", out);
        return;
    }
    double x = strtod(out, &end);
    if (*end || api_half_from_text(out, n, x, bf16) != h)
        half_fail("does not read back", out);
}

/* The midpoint between h (finite, >= 0 part) and its neighbour up or down. */
static double neighbour_mid(uint16_t h, bool bf16, int dir)
{
    uint16_t a = h & 0x7FFF, sign = h & 0x8000;
    double v = widen(a, bf16), w;
    if (dir > 0)
        w = a == (bf16 ? 0x7F7F : 0x7BFF) ? (bf16 ? 0x1p128 : 65536.0) : widen(a + 1, bf16);
    else
        w = a == 0 ? -widen(1, bf16) : widen(a - 1, bf16);
    return sign ? -(v + w) / 2 : (v + w) / 2;
}

static void check_read(const char *t, size_t n, bool bf16)
{
    char *end;
    double x = strtod(t, &end);
    if (end != t + n || !isfinite(x) || n == 0 || isspace((unsigned char)t[0]) || t[0] == '+' ||
        strpbrk(t, "xXnNiIpP"))
        return;                             /* not a plain decimal number */
    uint16_t h = api_half_from_text(t, n, x, bf16);
    if (!finite16(h, bf16))
        return;                             /* past the range: the caller refuses it */
    double up = neighbour_mid(h, bf16, 1), down = neighbour_mid(h, bf16, -1);
    double lo = up < down ? up : down, hi = up < down ? down : up;
    int cl = api_decimal_cmp(t, n, lo), ch = api_decimal_cmp(t, n, hi);
    bool even = (h & 1) == 0;
    if (cl < 0 || ch > 0 || ((cl == 0 || ch == 0) && !even))
        half_fail(bf16 ? "bfloat16 not nearest" : "float16 not nearest", t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i + 1 < size && i < 512; i += 2) {
        uint16_t h = (uint16_t)(data[i] | data[i + 1] << 8);
        check_print(h, false);
        check_print(h, true);
    }
    if (size < 200) {
        char t[201];
        memcpy(t, data, size);
        t[size] = '\0';
        if (strlen(t) == size) {
            check_read(t, size, false);
            check_read(t, size, true);
        }
    }
    return 0;
}
