/*
 * api/v2/v2_seq.c — where an Open Inference Protocol v2 sequence lives: in the
 * session named after its sequence_id (core/store.h's sess_create_named).
 * A sequence is found again from its id alone, by any request and after a
 * restart (the session comes back from --state-dir under the same id), with
 * no map to keep. Names: an integer id n is "v2i<n>"; a string of at most
 * 20 characters of [A-Za-z0-9_-] is "v2s<string>"; any other string is
 * "v2h" and 20 base64url characters (120 bits) of a hash of its bytes.
 */
#include "api/v2/v2_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define PLAIN_MAX (SESS_NAME_MAX - 4)   /* a string kept as it is: 20 */
#define HASH_CHARS (SESS_NAME_MAX - 4)  /* 6 bits each: 120 of the 128 */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdu;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53u;
    k ^= k >> 33;
    return k;
}

/*
 * 128 bits of p[n]: two multiplicative lanes (FNV-1a's and a golden-ratio
 * one) crossed and finished by MurmurHash3's mixer. Written here because
 * none of the four libraries has a hash; it need not be cryptographic: a
 * sequence id is the client's own handle, and whoever knows one can use
 * that sequence already.
 */
static void hash128(const unsigned char *p, size_t n, uint64_t out[2])
{
    uint64_t a = 0xcbf29ce484222325u, b = 0x6a09e667f3bcc909u ^ n;
    size_t i;

    for (i = 0; i < n; i++) {
        a = (a ^ p[i]) * 0x100000001b3u;
        b = (b ^ p[i]) * 0x9e3779b97f4a7c15u;
        b ^= b >> 29;
    }
    out[0] = fmix64(a ^ (b << 17 | b >> 47));
    out[1] = fmix64(b ^ out[0]);
}

static bool plain(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > PLAIN_MAX)
        return false;
    for (i = 0; i < n; i++)
        if (!memchr(b64url, s[i], sizeof b64url - 1))
            return false;
    return true;
}

bool api_v2_seq_name(const json_t *id, char *name)
{
    if (json_is_integer(id) && json_integer_value(id) > 0) {
        snprintf(name, SESS_NAME_MAX, "v2i%" JSON_INTEGER_FORMAT,
                 json_integer_value(id));
        return true;
    }
    if (!json_is_string(id))
        return false;
    const char *s = json_string_value(id);
    size_t n = json_string_length(id), i, o = 3;
    if (plain(s, n)) {
        snprintf(name, SESS_NAME_MAX, "v2s%s", s);
        return true;
    }
    uint64_t h[2];
    hash128((const unsigned char *)s, n, h);
    memcpy(name, "v2h", 3);
    for (i = 0; i < HASH_CHARS; i++)
        name[o++] = b64url[(h[i % 2] >> (6 * (i / 2))) & 63];
    name[o] = '\0';
    return true;
}
