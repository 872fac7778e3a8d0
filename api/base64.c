/*
 * api/base64.c — RFC 4648 base64 (see api/base64.h for why it is
 * hand-written). The encoder reserves its whole output once and fills it
 * three bytes -> four characters at a time; the decoder uses a 256-entry
 * table in which every byte outside the alphabet is invalid.
 */
#include "api/base64.h"

#include <stdint.h>
#include <string.h>

#include "core/tensor.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Character -> 6-bit value, or 0xFF when outside the alphabet. */
static uint8_t b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return (uint8_t)(ch - 'A');
    if (ch >= 'a' && ch <= 'z')
        return (uint8_t)(ch - 'a' + 26);
    if (ch >= '0' && ch <= '9')
        return (uint8_t)(ch - '0' + 52);
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return 0xFF;
}

bool api_base64_encoded_len(size_t n, size_t *out)
{
    return core_mul(n / 3 + (n % 3 != 0), 4, out);
}

bool api_base64_encode(struct api_buf *b, const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t len, i;
    char *o;

    if (!api_base64_encoded_len(n, &len) || !api_buf_reserve(b, len))
        return false;
    o = b->data + b->len;
    for (i = 0; i + 3 <= n; i += 3) {
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

bool api_base64_decode(const char *s, size_t len, void *out)
{
    unsigned char *o = out;
    size_t i, pad = 0, full;

    if (len % 4 != 0)
        return false;
    if (len >= 1 && s[len - 1] == '=')
        pad = (len >= 2 && s[len - 2] == '=') ? 2 : 1;
    full = pad ? len - 4 : len;     /* groups without padding */
    for (i = 0; i < full; i += 4) {
        uint8_t a = b64_value((unsigned char)s[i]);
        uint8_t b = b64_value((unsigned char)s[i + 1]);
        uint8_t c = b64_value((unsigned char)s[i + 2]);
        uint8_t d = b64_value((unsigned char)s[i + 3]);
        if ((a | b | c | d) & 0xC0)
            return false;
        *o++ = (unsigned char)(a << 2 | b >> 4);
        *o++ = (unsigned char)(b << 4 | c >> 2);
        *o++ = (unsigned char)(c << 6 | d);
    }
    if (pad) {
        uint8_t a = b64_value((unsigned char)s[i]);
        uint8_t b = b64_value((unsigned char)s[i + 1]);
        uint8_t c = pad == 1 ? b64_value((unsigned char)s[i + 2]) : 0;
        if ((a | b | c) & 0xC0)
            return false;
        /* The unused low bits must be zero (canonical encoding). */
        if (pad == 2 ? (b & 15) : (c & 3))
            return false;
        *o++ = (unsigned char)(a << 2 | b >> 4);
        if (pad == 1)
            *o++ = (unsigned char)(b << 4 | c >> 2);
    }
    return true;
}
