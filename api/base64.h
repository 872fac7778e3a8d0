/*
 * api/base64.h — RFC 4648 base64 (standard alphabet, '=' padding) for
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

#include "api/buf.h"

/* Encoded length of n bytes (with padding); false on overflow. */
bool api_base64_encoded_len(size_t n, size_t *out);

/* Append the encoding of p[n] to b (no quotes). */
bool api_base64_encode(struct api_buf *b, const void *p, size_t n);

/* Decoded length of a well-formed encoding of s[len]; false when len is not
 * a multiple of 4 or the padding is malformed (whitespace is not allowed). */
bool api_base64_decoded_len(const char *s, size_t len, size_t *out);

/* Decode s[len] into out (which holds api_base64_decoded_len bytes).
 * false on any character outside the alphabet or bad padding. */
bool api_base64_decode(const char *s, size_t len, void *out);

#endif
