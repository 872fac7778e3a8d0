/*
 * api/read_impl.h — what api/read.c and api/read_tensor.c share (internal
 * to those two): the JSON pointer of a member and the reading of a size.
 */
#ifndef ATTND_API_READ_IMPL_H
#define ATTND_API_READ_IMPL_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/read.h"

/* Pointer of member key below prefix. */
static inline const char *sub(char *out, const char *prefix, const char *key)
{
    return api_pointer_key(out, API_PATH_MAX, prefix, key);
}

/* A size: a JSON integer >= 0, or an integral real in [0, 2^53] (a body
 * holding an integer literal beyond 64 bits is parsed with every integer
 * as a real, see api/reply.c). */
static inline bool get_size(const json_t *v, size_t *out)
{
    double x;

    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return false;
        *out = (size_t)json_integer_value(v);
        return true;
    }
    if (!json_is_real(v))
        return false;
    x = json_real_value(v);
    if (!(x >= 0 && x <= 9007199254740992.0) || x != floor(x))
        return false;
    *out = (size_t)x;
    return true;
}

#endif
