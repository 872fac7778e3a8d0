/*
 * tests/base64_ref.h — reference base64 (RFC 4648, standard alphabet, '='
 * padding) for the tests and the fuzz target, written apart from
 * api/codec/base64.c: one bit group at a time, each character found by
 * searching
 * the alphabet; it shares nothing with the codec's tables or vector loops.
 */
#ifndef ATTND_TEST_BASE64_REF_H
#define ATTND_TEST_BASE64_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const char ref_b64_alpha[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* p[n] -> out (4 * ceil(n / 3) characters, '=' padded); returns the length. */
static inline size_t ref_b64_encode(const unsigned char *p, size_t n, char *out)
{
    size_t w = 0;
    uint32_t acc = 0;
    int bits = 0;

    for (size_t k = 0; k < n; k++) {
        acc = (acc << 8 | p[k]) & 0xFFFF;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[w++] = ref_b64_alpha[(acc >> bits) & 63];
        }
    }
    if (bits)
        out[w++] = ref_b64_alpha[(acc << (6 - bits)) & 63];
    while (w % 4)
        out[w++] = '=';
    return w;
}

/* Strict RFC 4648: the length a multiple of 4, '=' only as the last one or
 * two characters, no whitespace, zero pad bits. out gets *n bytes. */
static inline bool ref_b64_decode(const char *s, size_t len, unsigned char *out, size_t *n)
{
    size_t pad = 0;
    uint32_t acc = 0;
    int bits = 0;

    *n = 0;
    if (len % 4 != 0)
        return false;
    if (len >= 1 && s[len - 1] == '=')
        pad = (len >= 2 && s[len - 2] == '=') ? 2 : 1;
    for (size_t i = 0; i < len - pad; i++) {
        const char *hit = s[i] ? memchr(ref_b64_alpha, s[i], 64) : NULL;
        if (!hit)
            return false;
        acc = (acc << 6 | (uint32_t)(hit - ref_b64_alpha)) & 0xFFFF;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[(*n)++] = (unsigned char)(acc >> bits);
        }
    }
    return (acc & ((1u << bits) - 1)) == 0;     /* leftover (pad) bits are zero */
}

#endif
