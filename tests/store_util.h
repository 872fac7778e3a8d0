/*
 * tests/store_util.h — small helpers for the tests of the session store
 * (core/store.h) that several test programs need.
 */
#ifndef ATTND_TESTS_STORE_UTIL_H
#define ATTND_TESTS_STORE_UTIL_H

#include <stddef.h>

#include "core/store.h"

/* The length of session id, or (size_t)-1 when it cannot be acquired. */
static inline size_t store_length_of(struct sess_store *st, const char *id)
{
    struct sess *s;
    if (sess_acquire(st, id, &s) != CORE_OK)
        return (size_t)-1;
    size_t n = sess_length(s);
    sess_release(st, s);
    return n;
}

/* A fork of session id, its id into out[SESS_ID_MAX]. */
static inline enum core_status store_fork_of(struct sess_store *st, const char *id, char *out)
{
    struct sess *s;
    enum core_status rc = sess_acquire(st, id, &s);
    if (rc == CORE_OK) {
        rc = sess_fork(st, s, out);
        sess_release(st, s);
    }
    return rc;
}

#endif
