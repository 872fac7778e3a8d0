/*
 * api/codec/utf8.h — well-formed UTF-8 (RFC 3629), for text echoed from a
 * request
 * into JSON: error messages (api/reply.c) and log lines (server/log.c).
 */
#ifndef ATTND_API_UTF8_H
#define ATTND_API_UTF8_H

#include <stddef.h>

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0: no overlong
 * forms, no surrogates, nothing beyond U+10FFFF (what jansson accepts).
 * s is NUL-terminated; a NUL ends a sequence early (0), so nothing past
 * the terminator is read. */
size_t api_utf8_seq(const unsigned char *s);

#endif
