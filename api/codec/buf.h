/*
 * api/codec/buf.h — a capped, growable byte buffer for building responses.
 *
 * Modelled on curl's dynbuf: the buffer grows geometrically up to a hard cap
 * fixed at init; an append that would pass the cap (or fails to allocate)
 * marks the buffer failed, and every later append is a no-op that returns
 * false. Writers can therefore append many pieces and check once at the end
 * (api_buf_ok()). The data is always NUL-terminated when non-NULL.
 */
#ifndef ATTND_API_BUF_H
#define ATTND_API_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct api_buf {
    char *data;         /* malloc'd, NUL-terminated when non-NULL */
    size_t len;         /* bytes used, excluding the terminating NUL */
    size_t cap;         /* bytes allocated */
    size_t max;         /* hard cap on len */
    bool failed;        /* an append passed max or malloc failed */
    bool too_large;     /* the failure was the cap (vs. out of memory) */
};

/* Empty buffer that may grow to max bytes. Allocates nothing. */
void api_buf_init(struct api_buf *b, size_t max);

/* Make room for extra more bytes (plus the NUL); false and failed if not. */
bool api_buf_reserve(struct api_buf *b, size_t extra);

bool api_buf_append(struct api_buf *b, const void *p, size_t n);
bool api_buf_puts(struct api_buf *b, const char *s);
bool api_buf_putc(struct api_buf *b, char c);
bool api_buf_printf(struct api_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* true while no append has failed. */
static inline bool api_buf_ok(const struct api_buf *b) { return !b->failed; }

/* Hand the data (malloc'd, may be NULL when empty) to the caller and reset b. */
char *api_buf_take(struct api_buf *b, size_t *len);

void api_buf_free(struct api_buf *b);

#endif
