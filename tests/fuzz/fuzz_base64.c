/*
 * tests/fuzz/fuzz_base64.c — libFuzzer target: the base64 tensor codec
 * (api/codec/base64.h) that every {"shape","dtype","data"} tensor goes through.
 *
 * Two directions per input:
 *   text  -> bytes: api_base64_decoded_len/api_base64_decode on the raw input
 *            (into a buffer of exactly the announced size, so ASan sees any
 *            overrun); it must agree (accept/reject and bytes) with the
 *            plain bit-by-bit reference decoder of tests/base64_ref.h,
 *            which shares nothing with the table or vector paths of
 *            api/codec/base64.c; a decoded text
 *            re-encodes to the very same text (the encoding is canonical);
 *            api_base64_decode_f32's float32 flag agrees with the exponent
 *            bits of the reference's bytes;
 *   bytes -> text:  encoding the raw input (into a capped api_buf) and
 *            decoding it gives the input back, and the announced encoded
 *            length is the length written.
 * Both run on every path of api/codec/base64.c that the CPU runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/base64.h"
#include "api/codec/buf.h"
#include "tests/base64_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void b64_fail(const char *what)
{
    fprintf(stderr, "fuzz_base64: %s\n", what);
    abort();
}

/* bytes -> text -> bytes is the identity; returns the text (malloc'd). */
static char *b64_roundtrip(const uint8_t *p, size_t n, size_t *text_len)
{
    struct api_buf b;
    size_t want, back_len;

    if (!api_base64_encoded_len(n, &want))
        b64_fail("encoded length overflows for a small input");
    api_buf_init(&b, want + 1);
    if (!api_base64_encode(&b, p, n) || !api_buf_ok(&b))
        b64_fail("encode failed");
    if (b.len != want)
        b64_fail("encoded length differs from api_base64_encoded_len");
    if (!api_base64_decoded_len(b.data ? b.data : "", b.len, &back_len) || back_len != n)
        b64_fail("decoded length of an encoding is not the input length");
    uint8_t *back = malloc(n ? n : 1);
    if (!back)
        abort();
    if (!api_base64_decode(b.data ? b.data : "", b.len, back))
        b64_fail("an encoding does not decode");
    if (n && memcmp(back, p, n) != 0)
        b64_fail("decode(encode(x)) != x");
    free(back);
    return api_buf_take(&b, text_len);
}

/* Both directions on the path in use (api_base64_use). */
static void b64_check(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t n;

    free(b64_roundtrip(data, size, &n));

    if (!api_base64_decoded_len(text, size, &n))
        return;
    if (n > size)
        b64_fail("decoded length exceeds the text length");
    uint8_t *out = malloc(n ? n : 1), *ref = malloc(size ? size : 1);
    if (!out || !ref)
        abort();
    size_t ref_n;
    bool ok = api_base64_decode(text, size, out);
    if (ok != ref_b64_decode(text, size, ref, &ref_n))
        b64_fail("accepts or rejects unlike the reference decoder");
    if (ok && (ref_n != n || (n && memcmp(out, ref, n) != 0)))
        b64_fail("decodes to other bytes than the reference decoder");
    if (ok) {
        size_t len2;
        bool finite = false, ref_finite = true;
        if (!api_base64_decode_f32(text, size, out, &finite))
            b64_fail("api_base64_decode_f32 rejects what api_base64_decode accepts");
        for (size_t k = 0; k + 4 <= n; k += 4)      /* exponent bits, byte by byte */
            if ((ref[k + 3] & 0x7F) == 0x7F && (ref[k + 2] & 0x80))
                ref_finite = false;
        if (finite != ref_finite)
            b64_fail("the float32 flag differs from the reference");
        char *again = b64_roundtrip(out, n, &len2);
        if (len2 != size || memcmp(again, text, size) != 0)
            b64_fail("re-encoding a decoded text changes it");
        free(again);
    }
    free(out);
    free(ref);
}

/* Every path this CPU runs (scalar, NEON, AVX2, AVX-512 VBMI), then the
 * widest again. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int p = API_B64_SCALAR; p <= API_B64_AVX512; p++)
        if (api_base64_use((enum api_b64_path)p) == (enum api_b64_path)p)
            b64_check(data, size);
    api_base64_use(API_B64_AVX512);
    return 0;
}
