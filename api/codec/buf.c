/*
 * api/codec/buf.c — the capped growable buffer of api/codec/buf.h.
 *
 * Growth doubles the capacity (starting at 256 bytes) but never asks for
 * more than max + 1 bytes; from API_SPARE_MIN bytes on it moves into a
 * block kept by api/spare.c (up to twice the size asked for, or three
 * times from 2 to 3 MiB: api/spare.h) instead of realloc. Every size is
 * computed with checked arithmetic.
 */
#include "api/codec/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spare.h"
#include "core/tensor.h"

void api_buf_init(struct api_buf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max;
}

static bool buf_fail(struct api_buf *b, bool too_large)
{
    b->failed = true;
    b->too_large = too_large;
    return false;
}

bool api_buf_reserve(struct api_buf *b, size_t extra)
{
    size_t need, want;
    char *p;

    if (b->failed)
        return false;
    if (!core_add(b->len, extra, &need) || need > b->max)
        return buf_fail(b, true);
    if (need < b->cap)          /* room for need bytes and the NUL */
        return true;
    want = b->cap ? b->cap : 256;
    while (want <= need) {
        if (!core_mul(want, 2, &want)) {
            want = need + 1;
            break;
        }
    }
    if (want > b->max + 1)
        want = b->max + 1;      /* need <= max, so need + 1 fits */
    if (want >= API_SPARE_MIN) {        /* a large response: a kept block */
        size_t cap;
        p = api_spare_alloc(want, &cap);
        if (p && b->data) {
            memcpy(p, b->data, b->len);
            ((char *)p)[b->len] = '\0';
            api_spare_free(b->data);
        }
        want = cap;
    } else {
        p = realloc(b->data, want);
    }
    if (!p)
        return buf_fail(b, false);
    b->data = p;
    b->cap = want;
    return true;
}

bool api_buf_append(struct api_buf *b, const void *p, size_t n)
{
    if (!api_buf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool api_buf_puts(struct api_buf *b, const char *s)
{
    return api_buf_append(b, s, strlen(s));
}

bool api_buf_putc(struct api_buf *b, char c)
{
    /* the common case (room, no failure) without the reserve/memcpy calls;
       the same checks as api_buf_reserve: len + 1 <= max, len + 1 < cap */
    if (b->failed || b->len >= b->max || b->len + 1 >= b->cap)
        return api_buf_append(b, &c, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
    return true;
}

bool api_buf_printf(struct api_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    /* Format straight into the free space (one pass when it fits, which is
     * the rule for the short texts written here); else grow and redo. */
    if (b->failed ||
        !api_buf_reserve(b, b->max - b->len < 64 ? b->max - b->len : 64))
        return false;
    va_start(ap, fmt);
    n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->data[b->len] = '\0';
        b->failed = true;
        b->too_large = false;
        return false;
    }
    if ((size_t)n >= b->cap - b->len) {
        if (!api_buf_reserve(b, (size_t)n)) {
            b->data[b->len] = '\0';
            return false;
        }
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return true;
}

char *api_buf_take(struct api_buf *b, size_t *len)
{
    char *p = b->data;

    if (len)
        *len = b->len;
    api_buf_init(b, b->max);
    return p;
}

void api_buf_free(struct api_buf *b)
{
    api_spare_free(b->data);
    api_buf_init(b, b->max);
}
