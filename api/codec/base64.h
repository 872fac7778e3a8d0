/*
 * api/codec/base64.h — RFC 4648 base64 (standard alphabet, '=' padding) for
 * tensors that travel as {"shape":[…],"dtype":…,"data":"<base64>"}.
 *
 * Hand-written rather than taken from a library: the candidates on Debian
 * (libb64, OpenSSL's EVP) either break lines or allocate per call, while
 * here the encoder must append straight into a capped response buffer and
 * the decoder must write into a buffer sized and allocated beforehand.
 */
#ifndef ATTND_API_BASE64_H
#define ATTND_API_BASE64_H

#include <stdbool.h>
#include <stddef.h>

#include "api/codec/buf.h"

/* Encoded length of n bytes (with padding); false on overflow. */
bool api_base64_encoded_len(size_t n, size_t *out);

/* Append the encoding of p[n] to b (no quotes). */
bool api_base64_encode(struct api_buf *b, const void *p, size_t n);

/* Write the encoding of p[n] at o (api_base64_encoded_len characters, no
 * NUL). */
void api_base64_encode_to(char *o, const void *p, size_t n);

/* Decoded length of a well-formed encoding of s[len]; false when len is not
 * a multiple of 4 or the padding is malformed (whitespace is not allowed). */
bool api_base64_decoded_len(const char *s, size_t len, size_t *out);

/* Decode s[len] into out (which holds api_base64_decoded_len bytes).
 * false on any character outside the alphabet or bad padding. */
bool api_base64_decode(const char *s, size_t len, void *out);

/* api_base64_decode, and *f32_finite (when not NULL, and the text is
 * accepted) whether no whole 4-byte element of out (at offsets 0, 4, 8, ...)
 * has an exponent of all ones, i.e. is a float32 infinity or NaN. The
 * vector paths check each block in its register before storing it, so a
 * float32 tensor is checked without a second pass over its bytes. */
bool api_base64_decode_f32(const char *s, size_t len, void *out, bool *f32_finite);

/* The loops that encode and decode whole blocks; the widest this CPU runs
 * is chosen at the first call (checked at run time, not at build time). */
enum api_b64_path {
    API_B64_SCALAR,                 /* table lookups, 3 bytes <-> 4 characters */
    API_B64_NEON,                   /* aarch64 NEON: 48 bytes <-> 64 characters */
    API_B64_AVX2,                   /* x86-64 AVX2: 24 bytes <-> 32 characters */
    API_B64_AVX512,                 /* x86-64 AVX-512 VBMI: 48 bytes <-> 64 characters */
};

/* Use the widest path up to want that this CPU runs, for the whole
 * process, and return it (tests and benchmarks compare the paths). */
enum api_b64_path api_base64_use(enum api_b64_path want);

/* The path in use, and its name ("scalar", "neon", "avx2", "avx512vbmi"). */
enum api_b64_path api_base64_path(void);
const char *api_base64_path_name(enum api_b64_path p);

#endif
