/*
 * api/codec/base64.c — RFC 4648 base64 (see api/codec/base64.h for why it is
 * hand-written). The encoder reserves its whole output once and fills it
 * three bytes -> four characters at a time; the decoder uses a 256-entry
 * table in which every byte outside the alphabet is invalid.
 *
 * Whole blocks go through vector loops where the CPU has them (checked at
 * run time; api_base64_use picks a narrower one for tests), the table
 * loops handle the rest and every CPU without them:
 *   - AVX2, 32 characters <-> 24 bytes: the nibble-lookup scheme of W. Muła
 *     and D. Lemire ("Faster Base64 Encoding and Decoding using AVX2
 *     Instructions", ACM TWEB 2018), as in aklomp's BSD-licensed libbase64,
 *     which Debian 12 does not package (nor any other SIMD base64);
 *   - AVX-512 VBMI, 64 characters <-> 48 bytes: byte permutes over the
 *     128-entry table and the alphabet, and multishift for the encoder's
 *     6-bit fields (Muła and Lemire, "Base64 encoding and decoding at almost
 *     the speed of a memory copy", SPE 2020);
 *   - aarch64 NEON, 64 characters <-> 48 bytes: de-interleaving loads and
 *     interleaving stores (vld4/vst3, vld3/vst4) and 64-byte table lookups
 *     (vqtbl4/vqtbx4) over the same table and alphabet.
 * Each rejects exactly the bytes the table rejects (tests/api: every byte
 * value at every position of a block, on every path the CPU runs;
 * tests/fuzz/fuzz_base64.c against a bit-by-bit reference on every path).
 */
#include "api/codec/base64.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/tensor.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define B64_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define B64_NEON 1
#endif

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Character -> 6-bit value, or 0xFF when outside the alphabet (generated
 * from b64_alphabet; a lookup keeps decoding free of branches). */
static const uint8_t b64_table[256] = {
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3E, 0xFF, 0xFF, 0xFF, 0x3F,
    0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E,
    0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F, 0x30, 0x31, 0x32, 0x33, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
};

bool api_base64_encoded_len(size_t n, size_t *out)
{
    return core_mul(n / 3 + (n % 3 != 0), 4, out);
}

/* ---- which loops ------------------------------------------------------- */

/* Whether this CPU (and its OS, which libgcc's model checks) runs path p.
 * The AVX-512 path hands its last blocks to the AVX2 loop. */
static bool b64_runs(enum api_b64_path p)
{
    switch (p) {
    case API_B64_SCALAR:
        return true;
    case API_B64_NEON:
#ifdef B64_NEON
        return true;                /* every aarch64 CPU has it */
#else
        return false;
#endif
#ifdef B64_X86
    case API_B64_AVX2:
        return __builtin_cpu_supports("avx2");
    case API_B64_AVX512:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vbmi");
#else
    case API_B64_AVX2:
    case API_B64_AVX512:
        break;
#endif
    }
    return false;
}

/* enum api_b64_path, or -1 until the first call chooses */
static atomic_int b64_path = -1;

enum api_b64_path api_base64_use(enum api_b64_path want)
{
    enum api_b64_path p = want;
    while (p > API_B64_SCALAR && !b64_runs(p))
        p = (enum api_b64_path)(p - 1);
    atomic_store(&b64_path, (int)p);
    return p;
}

enum api_b64_path api_base64_path(void)
{
    int p = atomic_load_explicit(&b64_path, memory_order_relaxed);
    if (p < 0)
        return api_base64_use(API_B64_AVX512);
    return (enum api_b64_path)p;
}

const char *api_base64_path_name(enum api_b64_path p)
{
    switch (p) {
    case API_B64_NEON:
        return "neon";
    case API_B64_AVX2:
        return "avx2";
    case API_B64_AVX512:
        return "avx512vbmi";
    case API_B64_SCALAR:
        break;
    }
    return "scalar";
}

/* ---- encoding ---------------------------------------------------------- */

#ifdef B64_X86

/* p[24*k] -> o[32*k] while 32 input bytes can be loaded (two overlapping
 * 16-byte loads, 12 used from each); returns the bytes consumed. Each
 * 3-byte group is spread into four 6-bit indices by shifts done as 16-bit
 * multiplies, and an index becomes ASCII by adding the offset of its range
 * (A-Z, a-z, 0-9, '+', '/'), found by a saturating subtract and a lookup. */
__attribute__((target("avx2")))
static size_t encode_avx2(const unsigned char *p, size_t n, char *o)
{
    const __m256i spread = _mm256_setr_epi8(
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m256i offsets = _mm256_setr_epi8(
        71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0,
        71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0);
    size_t i;

    for (i = 0; i + 32 <= n; i += 24, o += 32) {
        __m256i in = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + i))),
            _mm_loadu_si128((const __m128i *)(const void *)(p + i + 12)), 1);
        __m256i t0, t1, idx, r;

        in = _mm256_shuffle_epi8(in, spread);
        t0 = _mm256_mulhi_epu16(_mm256_and_si256(in, _mm256_set1_epi32(0x0FC0FC00)),
                                _mm256_set1_epi32(0x04000040));
        t1 = _mm256_mullo_epi16(_mm256_and_si256(in, _mm256_set1_epi32(0x003F03F0)),
                                _mm256_set1_epi32(0x01000010));
        idx = _mm256_or_si256(t0, t1);                  /* 0..63 per byte */
        r = _mm256_subs_epu8(idx, _mm256_set1_epi8(51));
        r = _mm256_or_si256(r, _mm256_and_si256(
                _mm256_cmpgt_epi8(_mm256_set1_epi8(26), idx), _mm256_set1_epi8(13)));
        r = _mm256_add_epi8(_mm256_shuffle_epi8(offsets, r), idx);
        _mm256_storeu_si256((__m256i *)(void *)o, r);
    }
    return i;
}

/* p[48*k] -> o[64*k] (masked loads: no byte past p[n] is read); returns
 * the bytes consumed. Each 3-byte group b0 b1 b2 is laid out as the 32-bit
 * word b1 b0 b2 b1 (byte permute), from which one multishift takes the four
 * 6-bit fields at bit offsets 10, 4, 22 and 16 into their own bytes; a
 * permute over the alphabet (by the low 6 bits) makes them characters. */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static size_t encode_avx512(const unsigned char *p, size_t n, char *o)
{
    static const uint8_t spread_idx[64] = {
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
        13, 12, 14, 13, 16, 15, 17, 16, 19, 18, 20, 19, 22, 21, 23, 22,
        25, 24, 26, 25, 28, 27, 29, 28, 31, 30, 32, 31, 34, 33, 35, 34,
        37, 36, 38, 37, 40, 39, 41, 40, 43, 42, 44, 43, 46, 45, 47, 46};
    const __m512i spread = _mm512_loadu_si512(spread_idx);
    const __m512i alphabet = _mm512_loadu_si512(b64_alphabet);
    const __m512i shifts = _mm512_set1_epi64(0x3036242a1016040aLL);
    const __mmask64 in48 = 0x0000FFFFFFFFFFFFULL;
    size_t i;

    for (i = 0; i + 48 <= n; i += 48, o += 64) {
        __m512i v = _mm512_maskz_loadu_epi8(in48, p + i);
        v = _mm512_permutexvar_epi8(spread, v);
        v = _mm512_multishift_epi64_epi8(shifts, v);
        _mm512_storeu_si512(o, _mm512_permutexvar_epi8(v, alphabet));
    }
    return i;
}
#endif

#ifdef B64_NEON
/* The four 64-byte quarters of a 64-entry (or the first 128 entries of a)
 * table, for vqtbl4q/vqtbx4q. */
static uint8x16x4_t neon_table(const uint8_t *t)
{
    uint8x16x4_t q;
    q.val[0] = vld1q_u8(t);
    q.val[1] = vld1q_u8(t + 16);
    q.val[2] = vld1q_u8(t + 32);
    q.val[3] = vld1q_u8(t + 48);
    return q;
}

/* p[48*k] -> o[64*k]; returns the bytes consumed. vld3 puts byte 0, 1 and
 * 2 of 16 groups in three registers; shifts and masks make the four 6-bit
 * fields, a lookup in the alphabet the characters, vst4 interleaves them. */
static size_t encode_neon(const unsigned char *p, size_t n, char *o)
{
    const uint8x16x4_t alpha = neon_table((const uint8_t *)b64_alphabet);
    const uint8x16_t m63 = vdupq_n_u8(63);
    size_t i;

    for (i = 0; i + 48 <= n; i += 48, o += 64) {
        uint8x16x3_t in = vld3q_u8(p + i);
        uint8x16x4_t out;
        out.val[0] = vshrq_n_u8(in.val[0], 2);
        out.val[1] = vandq_u8(vorrq_u8(vshlq_n_u8(in.val[0], 4), vshrq_n_u8(in.val[1], 4)), m63);
        out.val[2] = vandq_u8(vorrq_u8(vshlq_n_u8(in.val[1], 2), vshrq_n_u8(in.val[2], 6)), m63);
        out.val[3] = vandq_u8(in.val[2], m63);
        for (int k = 0; k < 4; k++)
            out.val[k] = vqtbl4q_u8(alpha, out.val[k]);
        vst4q_u8((uint8_t *)o, out);
    }
    return i;
}
#endif

void api_base64_encode_to(char *o, const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t i = 0;

#ifdef B64_X86
    enum api_b64_path path = api_base64_path();
    if (path >= API_B64_AVX512 && n >= 48) {
        i = encode_avx512(s, n, o);
        o += i / 3 * 4;
    }
    if (path >= API_B64_AVX2 && n - i >= 32) {
        size_t k = encode_avx2(s + i, n - i, o);
        i += k;
        o += k / 3 * 4;
    }
#endif
#ifdef B64_NEON
    if (api_base64_path() == API_B64_NEON && n >= 48) {
        i = encode_neon(s, n, o);
        o += i / 3 * 4;
    }
#endif
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = b64_alphabet[(v >> 6) & 63];
        *o++ = b64_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = b64_alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
}

bool api_base64_encode(struct api_buf *b, const void *p, size_t n)
{
    size_t len;

    if (!api_base64_encoded_len(n, &len) || !api_buf_reserve(b, len))
        return false;
    api_base64_encode_to(b->data + b->len, p, n);
    b->len += len;
    b->data[b->len] = '\0';
    return true;
}

bool api_base64_decoded_len(const char *s, size_t len, size_t *out)
{
    size_t pad = 0;

    if (len % 4 != 0)
        return false;
    if (len >= 1 && s[len - 1] == '=')
        pad = (len >= 2 && s[len - 2] == '=') ? 2 : 1;
    *out = len / 4 * 3 - pad;
    return true;
}

/* ---- decoding ---------------------------------------------------------- */

#ifdef B64_X86
#define AVX2_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

/* The constants of the AVX2 decoder. Per byte: its low nibble selects a
 * set of bit flags of the high nibbles it is invalid with (lo), its high
 * nibble its own flag (hi); a common bit means invalid. The high nibble
 * (and '/', the one odd character of its row) picks the offset that maps
 * ASCII to 0..63 (roll). */
struct avx2_dec {
    __m256i lo, hi, roll, mask_2f, pack_ab, pack_abcd, order, lanes, exponent;
};

/* 32 characters -> 24 bytes in front of the result (then two zero words);
 * *bad gathers the invalid characters' flags, *all_ones the elements
 * whose exponent is all ones. */
__attribute__((target("avx2"), always_inline))
static inline __m256i avx2_block(const struct avx2_dec *k, __m256i str, __m256i *bad,
                                 __m256i *all_ones)
{
    __m256i hi_nib = _mm256_and_si256(_mm256_srli_epi32(str, 4), k->mask_2f);
    __m256i lo_nib = _mm256_and_si256(str, k->mask_2f);
    __m256i eq_2f = _mm256_cmpeq_epi8(str, k->mask_2f);
    __m256i roll = _mm256_shuffle_epi8(k->roll, _mm256_add_epi8(eq_2f, hi_nib));
    __m256i v;

    *bad = _mm256_or_si256(*bad, _mm256_and_si256(_mm256_shuffle_epi8(k->lo, lo_nib),
                                                  _mm256_shuffle_epi8(k->hi, hi_nib)));
    v = _mm256_add_epi8(str, roll);                     /* 6-bit values */
    v = _mm256_maddubs_epi16(v, k->pack_ab);            /* a<<6|b per pair */
    v = _mm256_madd_epi16(v, k->pack_abcd);             /* 24 bits per 4 */
    v = _mm256_shuffle_epi8(v, k->order);               /* 12 bytes per lane */
    v = _mm256_permutevar8x32_epi32(v, k->lanes);       /* 24 bytes in front */
    *all_ones = _mm256_or_si256(*all_ones, _mm256_cmpeq_epi32(
                                               _mm256_and_si256(v, k->exponent), k->exponent));
    return v;
}

/* s[32*k] -> out[24*k] for as many whole blocks of 32 characters as lie in
 * s[len]; returns the characters consumed, or SIZE_MAX on a byte outside
 * the alphabet; *nonfinite set when a 4-byte element of the output (out
 * being 4-byte aligned relative to where the caller's elements begin) has
 * an exponent of all ones, checked in the register before it is stored.
 * Four blocks a round, each stored 32 bytes wide over the start of the
 * next (the last 24 exactly), with one test of the flags a round, which
 * measured faster than a block a round (docs/benchmarks.md, section "On
 * the AVX2 EPYC"). */
__attribute__((target("avx2")))
static size_t decode_avx2(const char *s, size_t len, unsigned char *o, bool *nonfinite)
{
    const struct avx2_dec k = {
        .lo = _mm256_setr_epi8(
            0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B,
            0x1B, 0x1A, 0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A,
            0x1B, 0x1B, 0x1B, 0x1A),
        .hi = _mm256_setr_epi8(
            0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
            0x10, 0x10, 0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10,
            0x10, 0x10, 0x10, 0x10),
        .roll = _mm256_setr_epi8(
            0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0),
        .mask_2f = _mm256_set1_epi8(0x2F),
        .pack_ab = _mm256_set1_epi32(0x01400140),
        .pack_abcd = _mm256_set1_epi32(0x00011000),
        .order = _mm256_setr_epi8(
            2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1,
            2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1),
        .lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7),
        .exponent = _mm256_set1_epi32(0x7F800000),
    };
    __m256i bad = _mm256_setzero_si256(), all_ones = _mm256_setzero_si256();
    size_t i = 0;

    for (; i + 128 <= len; i += 128, o += 96) {
        __m256i v0 = avx2_block(&k, AVX2_LOAD(s + i), &bad, &all_ones);
        __m256i v1 = avx2_block(&k, AVX2_LOAD(s + i + 32), &bad, &all_ones);
        __m256i v2 = avx2_block(&k, AVX2_LOAD(s + i + 64), &bad, &all_ones);
        __m256i v3 = avx2_block(&k, AVX2_LOAD(s + i + 96), &bad, &all_ones);
        _mm256_storeu_si256((__m256i *)(void *)o, v0);
        _mm256_storeu_si256((__m256i *)(void *)(o + 24), v1);
        _mm256_storeu_si256((__m256i *)(void *)(o + 48), v2);
        _mm_storeu_si128((__m128i *)(void *)(o + 72), _mm256_castsi256_si128(v3));
        _mm_storel_epi64((__m128i *)(void *)(o + 88), _mm256_extracti128_si256(v3, 1));
        if (!_mm256_testz_si256(bad, bad))
            return SIZE_MAX;
    }
    for (; i + 32 <= len; i += 32, o += 24) {
        __m256i v = avx2_block(&k, AVX2_LOAD(s + i), &bad, &all_ones);
        if (!_mm256_testz_si256(bad, bad))
            return SIZE_MAX;
        _mm_storeu_si128((__m128i *)(void *)o, _mm256_castsi256_si128(v));
        _mm_storel_epi64((__m128i *)(void *)(o + 16), _mm256_extracti128_si256(v, 1));
    }
    *nonfinite = *nonfinite || !_mm256_testz_si256(all_ones, all_ones);
    return i;
}

/* The constants of the AVX-512 decoder: the first 128 entries of
 * b64_table in two registers, the permute that puts each group's three
 * bytes in order and the 48 bytes in front, and the multipliers that pack
 * four 6-bit values into 24 bits (as in the AVX2 decoder). */
struct avx512_dec {
    __m512i lut_lo, lut_hi, pack, pack_ab, pack_abcd, exponent;
};

/* 64 characters -> 48 bytes in front of the result (its last 16 bytes
 * are not output); *bad gathers each character's top bit and its value's
 * (0xFF when it is outside the alphabet), *all_ones the elements whose
 * exponent is all ones. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline))
static inline __m512i avx512_block(const struct avx512_dec *k, const char *p, __m512i *bad,
                                   __mmask16 *all_ones)
{
    __m512i str = _mm512_loadu_si512(p);
    __m512i v = _mm512_permutex2var_epi8(k->lut_lo, str, k->lut_hi);

    *bad = _mm512_ternarylogic_epi64(*bad, v, str, 0xFE);      /* bad | v | str */
    v = _mm512_maddubs_epi16(v, k->pack_ab);                    /* a<<6|b per pair */
    v = _mm512_madd_epi16(v, k->pack_abcd);                     /* 24 bits per 4 */
    v = _mm512_permutexvar_epi8(k->pack, v);
    *all_ones |= _mm512_mask_cmpeq_epi32_mask(0x0FFF, _mm512_and_si512(v, k->exponent),
                                              k->exponent);
    return v;
}

/* s[64*k] -> out[48*k] for as many whole blocks of 64 characters as lie in
 * s[len]; returns the characters consumed, or SIZE_MAX on a byte outside
 * the alphabet; *nonfinite as decode_avx2's. A permute over the first 128
 * entries of b64_table (by the low 7 bits) gives each character's 6-bit
 * value, or 0xFF; a byte is invalid when it or its value has the top bit
 * set. Four blocks a round, the first three stored 64 bytes wide over the
 * start of the next, the last with a masked store of its 48 bytes, and one
 * test of the flags a round, which measured faster than a masked store
 * and a test for every block (docs/benchmarks.md, section "On an AVX-512
 * Zen 4"). */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static size_t decode_avx512(const char *s, size_t len, unsigned char *o, bool *nonfinite)
{
    static const uint8_t pack_idx[64] = {
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, 18, 17, 16, 22,
        21, 20, 26, 25, 24, 30, 29, 28, 34, 33, 32, 38, 37, 36, 42, 41,
        40, 46, 45, 44, 50, 49, 48, 54, 53, 52, 58, 57, 56, 62, 61, 60};
    const struct avx512_dec k = {
        .lut_lo = _mm512_loadu_si512(b64_table),
        .lut_hi = _mm512_loadu_si512(b64_table + 64),
        .pack = _mm512_loadu_si512(pack_idx),
        .pack_ab = _mm512_set1_epi32(0x01400140),
        .pack_abcd = _mm512_set1_epi32(0x00011000),
        .exponent = _mm512_set1_epi32(0x7F800000),
    };
    const __mmask64 out48 = 0x0000FFFFFFFFFFFFULL;
    __m512i bad = _mm512_setzero_si512();
    __mmask16 all_ones = 0;
    size_t i = 0;

    for (; i + 256 <= len; i += 256, o += 192) {
        __m512i v0 = avx512_block(&k, s + i, &bad, &all_ones);
        __m512i v1 = avx512_block(&k, s + i + 64, &bad, &all_ones);
        __m512i v2 = avx512_block(&k, s + i + 128, &bad, &all_ones);
        __m512i v3 = avx512_block(&k, s + i + 192, &bad, &all_ones);
        _mm512_storeu_si512(o, v0);
        _mm512_storeu_si512(o + 48, v1);
        _mm512_storeu_si512(o + 96, v2);
        _mm512_mask_storeu_epi8(o + 144, out48, v3);
        if (_mm512_movepi8_mask(bad))
            return SIZE_MAX;
    }
    for (; i + 64 <= len; i += 64, o += 48) {
        __m512i v = avx512_block(&k, s + i, &bad, &all_ones);
        if (_mm512_movepi8_mask(bad))
            return SIZE_MAX;
        _mm512_mask_storeu_epi8(o, out48, v);
    }
    *nonfinite = *nonfinite || all_ones;
    return i;
}
#endif

#ifdef B64_NEON
/* s[64*k] -> out[48*k] for as many whole blocks of 64 characters as lie in
 * s[len]; returns the characters consumed, or SIZE_MAX on a byte outside
 * the alphabet; *nonfinite as decode_avx2's (the 48 bytes read back from
 * L1 as twelve elements once stored). vld4 puts character 0, 1, 2 and 3 of 16 groups in four
 * registers; each is looked up in the first 128 entries of b64_table
 * (vqtbl4 for 0..63, vqtbx4 for 64..127; 0xFF marks invalid entries, and a
 * byte of 128 or more is invalid by its own top bit); shifts and ors make
 * the three bytes of each group, which vst3 interleaves. */
static size_t decode_neon(const char *s, size_t len, unsigned char *o, bool *nonfinite)
{
    const uint8x16x4_t lut_lo = neon_table(b64_table);
    const uint8x16x4_t lut_hi = neon_table(b64_table + 64);
    const uint8x16_t c64 = vdupq_n_u8(64);
    const uint32x4_t exponent = vdupq_n_u32(0x7F800000);
    uint32x4_t all_ones = vdupq_n_u32(0);
    size_t i;

    for (i = 0; i + 64 <= len; i += 64, o += 48) {
        uint8x16x4_t in = vld4q_u8((const uint8_t *)s + i);
        uint8x16_t v[4], bad = vdupq_n_u8(0);
        uint8x16x3_t out;
        for (int k = 0; k < 4; k++) {
            uint8x16_t t = vqtbl4q_u8(lut_lo, in.val[k]);
            v[k] = vqtbx4q_u8(t, lut_hi, vsubq_u8(in.val[k], c64));
            bad = vorrq_u8(bad, vorrq_u8(v[k], in.val[k]));
        }
        if (vmaxvq_u8(bad) & 0x80)
            return SIZE_MAX;
        out.val[0] = vorrq_u8(vshlq_n_u8(v[0], 2), vshrq_n_u8(v[1], 4));
        out.val[1] = vorrq_u8(vshlq_n_u8(v[1], 4), vshrq_n_u8(v[2], 2));
        out.val[2] = vorrq_u8(vshlq_n_u8(v[2], 6), v[3]);
        vst3q_u8(o, out);
        for (int k = 0; k < 3; k++) {
            uint32x4_t w = vreinterpretq_u32_u8(vld1q_u8(o + 16 * k));
            all_ones = vorrq_u32(all_ones, vceqq_u32(vandq_u32(w, exponent), exponent));
        }
    }
    *nonfinite = *nonfinite || vmaxvq_u32(all_ones) != 0;
    return i;
}
#endif

/* Whether a whole 4-byte element of p[from, to) (element boundaries at
 * multiples of 4) has an exponent of all ones: the bytes the vector loops
 * did not check. */
static bool tail_nonfinite(const unsigned char *p, size_t from, size_t to)
{
    for (size_t k = from / 4 * 4; k + 4 <= to; k += 4) {
        uint32_t u;
        memcpy(&u, p + k, 4);
        if ((u & 0x7F800000u) == 0x7F800000u)
            return true;
    }
    return false;
}

bool api_base64_decode_f32(const char *s, size_t len, void *out, bool *f32_finite)
{
    unsigned char *o = out;
    size_t i = 0, pad = 0, full;
    bool nonfinite = false;

    if (len % 4 != 0)
        return false;
    if (len >= 1 && s[len - 1] == '=')
        pad = (len >= 2 && s[len - 2] == '=') ? 2 : 1;
    full = pad ? len - 4 : len;     /* groups without padding */
#ifdef B64_X86
    enum api_b64_path path = api_base64_path();
    if (path >= API_B64_AVX512 && full >= 64) {
        i = decode_avx512(s, full, o, &nonfinite);
        if (i == SIZE_MAX)
            return false;
        o += i / 4 * 3;
    }
    if (path >= API_B64_AVX2 && full - i >= 32) {
        size_t k = decode_avx2(s + i, full - i, o, &nonfinite);
        if (k == SIZE_MAX)
            return false;
        i += k;
        o += k / 4 * 3;
    }
#endif
#ifdef B64_NEON
    if (api_base64_path() == API_B64_NEON && full >= 64) {
        i = decode_neon(s, full, o, &nonfinite);
        if (i == SIZE_MAX)
            return false;
        o += i / 4 * 3;
    }
#endif
    size_t checked = i / 4 * 3;     /* the vector loops' output, checked */
    for (; i < full; i += 4) {
        uint32_t a = b64_table[(unsigned char)s[i]];
        uint32_t b = b64_table[(unsigned char)s[i + 1]];
        uint32_t c = b64_table[(unsigned char)s[i + 2]];
        uint32_t d = b64_table[(unsigned char)s[i + 3]];
        uint32_t v = a << 18 | b << 12 | c << 6 | d;
        if ((a | b | c | d) & 0xC0)
            return false;
        o[0] = (unsigned char)(v >> 16);
        o[1] = (unsigned char)(v >> 8);
        o[2] = (unsigned char)v;
        o += 3;
    }
    if (pad) {
        uint8_t a = b64_table[(unsigned char)s[i]];
        uint8_t b = b64_table[(unsigned char)s[i + 1]];
        uint8_t c = pad == 1 ? b64_table[(unsigned char)s[i + 2]] : 0;
        if ((a | b | c) & 0xC0)
            return false;
        /* The unused low bits must be zero (canonical encoding). */
        if (pad == 2 ? (b & 15) : (c & 3))
            return false;
        *o++ = (unsigned char)(a << 2 | b >> 4);
        if (pad == 1)
            *o++ = (unsigned char)(b << 4 | c >> 2);
    }
    if (f32_finite)
        *f32_finite = !nonfinite &&
                      !tail_nonfinite(out, checked, (size_t)(o - (unsigned char *)out));
    return true;
}

bool api_base64_decode(const char *s, size_t len, void *out)
{
    return api_base64_decode_f32(s, len, out, NULL);
}
