/*
 * tests/api/test_api_base64.c — the base64 codec of api/codec/base64.c on every
 * path this CPU runs (scalar tables, NEON, AVX2, AVX-512 VBMI; a path the
 * CPU lacks is named as skipped), each against the reference written here:
 * RFC 4648 vectors, every length 0..300 both ways, padding and its zero
 * bits, every byte value at every position of a text of a 256-character
 * round, two 64-character blocks, a 32-character block and a tail
 * (accepted exactly when in the alphabet, nothing written past the
 * output), whitespace and '=' inside rejected, random round trips, and
 * the float32 infinity-or-NaN flag of api_base64_decode_f32 with one
 * special element at every position. The reference is tests/base64_ref.h
 * (and a bytewise exponent test here).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/base64_ref.h"
#include "tests/harness.h"
#include "api/codec/base64.h"
#include "api/codec/buf.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    return t_rng_next(&rng_state);
}

/* ---- every path -------------------------------------------------------- */

/* Runs fn once on each path this CPU runs; names a failing path. */
static void on_every_path(void (*fn)(void))
{
    for (int p = API_B64_SCALAR; p <= API_B64_AVX512; p++) {
        enum api_b64_path want = (enum api_b64_path)p;
        int failed_before = th_cur_failed;
        if (api_base64_use(want) != want) {
            printf("  %s: the %s path is not on this CPU, skipped\n", th_cur_name,
                   api_base64_path_name(want));
            continue;
        }
        th_cur_failed = 0;
        fn();
        if (th_cur_failed)
            printf("  %s: failed on the %s path\n", th_cur_name, api_base64_path_name(want));
        th_cur_failed |= failed_before;
    }
    api_base64_use(API_B64_AVX512);
}

/* Encode and decode src[len] through the codec and check both against the
 * reference: the text, its announced lengths, and the bytes back. */
static void check_both_ways(const unsigned char *src, size_t len)
{
    static char want[512];
    static unsigned char back[400];
    struct api_buf b;
    size_t w = ref_b64_encode(src, len, want), enc_len, n;

    CHECK(api_base64_encoded_len(len, &enc_len) && enc_len == w);
    api_buf_init(&b, 1024);
    CHECK(api_base64_encode(&b, src, len));
    CHECK(b.len == w && (w == 0 || memcmp(b.data, want, w) == 0));
    api_buf_free(&b);
    CHECK(api_base64_decoded_len(want, w, &n) && n == len);
    memset(back, 0xA5, sizeof back);
    CHECK(api_base64_decode(want, w, back));
    CHECK(len == 0 || memcmp(back, src, len) == 0);
    CHECK(back[len] == 0xA5);                           /* nothing past the end */
}

static void vectors_once(void)
{
    static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==",
                                      "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        struct api_buf b;
        char dec[16];
        size_t n;
        api_buf_init(&b, 64);
        CHECK(api_base64_encode(&b, in[i], strlen(in[i])));
        CHECK(b.len == strlen(out[i]) && (b.len == 0 || strcmp(b.data, out[i]) == 0));
        api_buf_free(&b);
        CHECK(api_base64_decoded_len(out[i], strlen(out[i]), &n));
        CHECK_EQ_INT(n, strlen(in[i]));
        CHECK(api_base64_decode(out[i], strlen(out[i]), dec));
        CHECK(memcmp(dec, in[i], n) == 0);
    }
}

/* RFC 4648 section 10 test vectors. */
TEST(base64_vectors)
{
    on_every_path(vectors_once);
}

static void rejects_once(void)
{
    char dec[16];
    size_t n;

    CHECK(!api_base64_decoded_len("Zm9", 3, &n));          /* not a multiple of 4 */
    CHECK(!api_base64_decode("Zm9", 3, dec));
    CHECK(!api_base64_decode("Zm9*", 4, dec));             /* outside the alphabet */
    CHECK(!api_base64_decode("Z=9v", 4, dec));             /* '=' inside */
    CHECK(!api_base64_decode("Zm=v", 4, dec));
    CHECK(!api_base64_decode("Zm9 ", 4, dec));             /* whitespace */
    CHECK(!api_base64_decode("Zh==", 4, dec));             /* non-zero pad bits */
    CHECK(!api_base64_decode("Zm9=", 4, dec));
    CHECK(api_base64_decode("Zm8=", 4, dec));
}

TEST(base64_rejects)
{
    on_every_path(rejects_once);
}

static void every_length_once(void)
{
    unsigned char src[300];
    for (size_t k = 0; k < sizeof src; k++)
        src[k] = (unsigned char)rng();
    for (size_t len = 0; len <= sizeof src; len++)
        check_both_ways(src, len);
    memset(src, 0xFF, sizeof src);                      /* every field 63: '/' */
    check_both_ways(src, sizeof src);
    memset(src, 0, sizeof src);                         /* every field 0: 'A' */
    check_both_ways(src, sizeof src);
}

/* Encode and decode every length 0..300 (vector blocks of 24 and 48 bytes,
 * every tail and padding) against the reference. */
TEST(base64_every_length)
{
    on_every_path(every_length_once);
}

/* A text of n characters: the reference encoding of random bytes. */
static size_t random_text(char *s, size_t n_bytes)
{
    unsigned char src[320];
    for (size_t k = 0; k < n_bytes; k++)
        src[k] = (unsigned char)rng();
    return ref_b64_encode(src, n_bytes, s);
}

/* Every byte value at every position of a text of n_bytes random bytes
 * (no padding: n_bytes a multiple of 3, at most 318). */
static void every_byte_in(size_t n_bytes)
{
    char s[424];
    unsigned char dec[318 + 64], want[318];
    size_t len = random_text(s, n_bytes), wn;

    CHECK(len == n_bytes / 3 * 4);
    for (size_t pos = 0; pos < len; pos++) {
        char keep = s[pos];
        for (int v = 0; v < 256; v++) {
            s[pos] = (char)v;
            bool ref_ok = ref_b64_decode(s, len, want, &wn);
            memset(dec, 0xA5, sizeof dec);
            bool ok = api_base64_decode(s, len, dec);
            CHECK(ok == ref_ok);
            if (v == '=' && pos == len - 1)         /* padding: valid when its bits are 0 */
                CHECK(wn == n_bytes - 1 || !ok);
            else
                CHECK(ok == (v != 0 && memchr(ref_b64_alpha, v, 64) != NULL));
            if (ok) {
                CHECK(memcmp(dec, want, wn) == 0);
                for (size_t k = wn; k < sizeof dec; k++)
                    CHECK(dec[k] == 0xA5);
            }
        }
        s[pos] = keep;
    }
}

static void every_byte_once(void)
{
    every_byte_in(318);     /* 256 + 2 x 64 + 32 + 8 characters */
    every_byte_in(192);     /* one 256-character round, nothing after it */
}

/* Every byte value at every position of a round of four 64-character
 * blocks (AVX-512), two more blocks, a 32-character block and a tail
 * (AVX2 decodes the first 384 characters in rounds of four 32-character
 * blocks), and of a text of one round alone: accepted exactly when it is
 * in the alphabet, decoded to the reference's bytes, nothing written past
 * them. */
TEST(base64_every_byte_every_position)
{
    on_every_path(every_byte_once);
}

static void padding_and_spaces_once(void)
{
    static const char bad[] = {' ', '\n', '\r', '\t', '=', '-', '_', '.', '\0', (char)0x80};
    char s[200];
    unsigned char dec[160], want[160];
    size_t wn;

    for (size_t n_bytes = 1; n_bytes <= 140; n_bytes++) {
        size_t len = random_text(s, n_bytes);
        for (size_t b = 0; b < sizeof bad; b++) {
            size_t pos = (size_t)(rng() % len);
            char keep = s[pos];
            s[pos] = bad[b];
            bool ref_ok = ref_b64_decode(s, len, want, &wn);
            bool ok = api_base64_decode(s, len, dec);
            CHECK(ok == ref_ok);
            s[pos] = keep;
        }
        if (len >= 2 && s[len - 1] == '=') {           /* padding with pad bits set */
            size_t at = s[len - 2] == '=' ? len - 3 : len - 2;
            char keep = s[at];
            for (size_t a = 0; a < 64; a++) {
                s[at] = ref_b64_alpha[a];
                CHECK(api_base64_decode(s, len, dec) == ref_b64_decode(s, len, want, &wn));
            }
            s[at] = keep;
        }
        CHECK(!api_base64_decode(s, len - 1, dec));     /* a character short */
    }
}

/* Whitespace, '=' and other bytes at random places, pad bits, and short
 * texts: rejected exactly as the reference rejects them. */
TEST(base64_padding_and_whitespace)
{
    on_every_path(padding_and_spaces_once);
}

static void round_trip_once(void)
{
    static unsigned char src[4096 + 7];
    for (int i = 0; i < 40; i++) {
        size_t len = (size_t)(rng() % sizeof src);
        for (size_t k = 0; k < len; k++)
            src[k] = (unsigned char)rng();
        struct api_buf b;
        size_t n;
        unsigned char *dec = malloc(len + 1);
        CHECK(dec != NULL);
        if (!dec)
            return;
        api_buf_init(&b, 8192);
        CHECK(api_base64_encode(&b, src, len));
        CHECK(api_base64_decoded_len(b.data ? b.data : "", b.len, &n) && n == len);
        CHECK(api_base64_decode(b.data ? b.data : "", b.len, dec));
        CHECK(len == 0 || memcmp(src, dec, len) == 0);
        api_buf_free(&b);
        free(dec);
    }
}

/* Reference: some whole 4-byte element of p[n] (little-endian float32)
 * has all eight exponent bits set, read bit by bit from its two top
 * bytes. */
static bool ref_f32_nonfinite(const unsigned char *p, size_t n)
{
    for (size_t k = 0; k + 4 <= n; k += 4)
        if ((p[k + 3] & 0x7F) == 0x7F && (p[k + 2] & 0x80))
            return true;
    return false;
}

/* api_base64_decode_f32's flag against the reference: random finite
 * elements (an exponent bit of each all-ones one cleared), then one
 * special or near-special element at every position of texts that run
 * through the 256-character rounds, the 64- and 32-character blocks and
 * the table loop, with and without padding (the bytes of an element cut
 * by the end never count). */
static void f32_flag_once(void)
{
    static const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                                        0xFFFFFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u};
    static const size_t lengths[] = {0,   3,   4,   5,   24,  48,  52,  96,  120,
                                     144, 146, 192, 197, 240, 264, 336, 389};
    static unsigned char src[400], back[400];
    static char text[540];
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
        size_t len = lengths[li];
        for (size_t at = 0; at + 4 <= len + 4; at += 4)
            for (size_t sp = 0; sp < sizeof specials / sizeof *specials; sp++) {
                for (size_t k = 0; k < len; k++)
                    src[k] = (unsigned char)rng();
                for (size_t k = 0; k + 4 <= len; k += 4)
                    if ((src[k + 3] & 0x7F) == 0x7F && (src[k + 2] & 0x80))
                        src[k + 2] &= 0x7F;
                for (size_t k = 0; k < 4 && at + k < len; k++)
                    src[at + k] = (unsigned char)(specials[sp] >> (8 * k));
                size_t w = ref_b64_encode(src, len, text);
                bool finite = ref_f32_nonfinite(src, len);     /* the wrong answer */
                CHECK(api_base64_decode_f32(text, w, back, &finite));
                CHECK(len == 0 || memcmp(back, src, len) == 0);
                CHECK(finite == !ref_f32_nonfinite(src, len));
                CHECK(api_base64_decode_f32(text, w, back, NULL));
            }
    }
}

TEST(base64_f32_flag)
{
    on_every_path(f32_flag_once);
}

TEST(base64_random_round_trip)
{
    on_every_path(round_trip_once);
}

/* The path chosen by default is the widest this CPU runs; the scalar path
 * is always there; asking for one the CPU lacks falls back. */
TEST(base64_paths)
{
    enum api_b64_path best = api_base64_use(API_B64_AVX512);
    CHECK(api_base64_path() == best);
    CHECK(api_base64_use(API_B64_SCALAR) == API_B64_SCALAR);
    CHECK(api_base64_path() == API_B64_SCALAR);
    CHECK(api_base64_use(API_B64_AVX2) <= API_B64_AVX2);
    CHECK(api_base64_use(API_B64_AVX512) == best);
    CHECK_STR(api_base64_path_name(API_B64_SCALAR), "scalar");
    CHECK_STR(api_base64_path_name(API_B64_NEON), "neon");
    CHECK_STR(api_base64_path_name(API_B64_AVX2), "avx2");
    CHECK_STR(api_base64_path_name(API_B64_AVX512), "avx512vbmi");
    printf("  base64 path on this CPU: %s\n", api_base64_path_name(best));
}

int main(void)
{
    RUN(base64_paths);
    RUN(base64_vectors);
    RUN(base64_rejects);
    RUN(base64_every_length);
    RUN(base64_every_byte_every_position);
    RUN(base64_padding_and_whitespace);
    RUN(base64_random_round_trip);
    RUN(base64_f32_flag);
    TEST_MAIN_END();
}
