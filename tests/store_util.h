/*
 * tests/store_util.h — small helpers for the tests of the session store
 * (core/store.h) that several test programs need.
 */
#ifndef ATTND_TESTS_STORE_UTIL_H
#define ATTND_TESTS_STORE_UTIL_H

#include <dirent.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/store.h"

/* Remove every file in directory path (a store's state directory). */
static inline void store_clear_dir(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

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

/* sess_truncate of session id to its first n rows. */
static inline enum core_status store_truncate_of(struct sess_store *st, const char *id,
                                                 size_t n)
{
    struct sess *s;
    enum core_status rc = sess_acquire(st, id, &s);
    if (rc == CORE_OK) {
        rc = sess_truncate(st, s, n);
        sess_release(st, s);
    }
    return rc;
}

/* rows rows appended to session id of one float32 kv head with
 * d_k = d_v = d, K and V alike: value i is (i + offset) % 61 / 32 - 1. */
static inline enum core_status store_add_rows(struct sess_store *st, const char *id,
                                              size_t rows, size_t d, unsigned offset)
{
    float *kv = malloc(rows * d * sizeof *kv);
    if (!kv)
        return CORE_ENOMEM;
    for (size_t i = 0; i < rows * d; i++)
        kv[i] = (float)((i + offset) % 61) / 32.0f - 1;
    struct sess *s;
    enum core_status rc = sess_acquire(st, id, &s);
    if (rc == CORE_OK) {
        rc = sess_append(st, s, kv, kv, rows, -1);
        sess_release(st, s);
    }
    free(kv);
    return rc;
}

/* A session of one float32 kv head of d_k = d_v = STORE_BIG_D with
 * STORE_BIG_ROWS rows (32 MiB of them: more than a start under a tight
 * memory limit can rebuild); its id into id. */
#define STORE_BIG_D 512
#define STORE_BIG_ROWS 8192

static inline enum core_status store_new_big(struct sess_store *st, char *id)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = STORE_BIG_D,
                                     .d_v = STORE_BIG_D},
                           .params = {.dtype = ATTN_F32, .scale = 0.0625}};
    enum core_status rc = sess_create(st, &sp, id);
    return rc == CORE_OK ? store_add_rows(st, id, STORE_BIG_ROWS, STORE_BIG_D, 3) : rc;
}

#endif
