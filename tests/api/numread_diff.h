/*
 * tests/api/numread_diff.h — the differential check of the fast numeric
 * reader (api/codec/numread.h) against jansson, header-only so both the
 * deterministic test (tests/api/test_api_numread.c) and a libFuzzer target
 * can use it: numread_agree(text, len) is 1 when the reader takes the text
 * exactly when jansson parses it to a rectangular numeric array of finite
 * values (rank 1..ATTN_MAX_RANK, no empty level), with bit-identical values.
 */
#ifndef ATTND_NUMREAD_DIFF_H
#define ATTND_NUMREAD_DIFF_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/codec/numread.h"

/* ---- jansson's verdict ------------------------------------------------ */

/* Flatten a jansson tree that is a rectangular numeric array into vals;
 * returns the count or -1 when it is not one. */
static inline long flatten(const json_t *j, int level, int *rank, size_t *shape,
                    double *vals, size_t cap, size_t *n)
{
    size_t i, len;

    if (!json_is_array(j) || level >= ATTN_MAX_RANK)
        return -1;
    len = json_array_size(j);
    if (len == 0)
        return -1;
    if (shape[level] == 0)
        shape[level] = len;
    else if (shape[level] != len)
        return -1;
    for (i = 0; i < len; i++) {
        const json_t *e = json_array_get(j, i);
        if (json_is_array(e)) {
            if (*rank && *rank <= level + 1)
                return -1;
            if (flatten(e, level + 1, rank, shape, vals, cap, n) < 0)
                return -1;
        } else if (json_is_number(e)) {
            if (*rank && *rank != level + 1)
                return -1;
            *rank = level + 1;
            if (*n >= cap || !isfinite(json_number_value(e)))
                return -1;
            vals[(*n)++] = json_number_value(e);
        } else {
            return -1;
        }
    }
    return (long)*n;
}

/* Does jansson need its integers-as-reals retry for text (an integer
 * literal beyond 64 bits)? Then it reads the integer literal -0 as -0.0,
 * where its integer path (and the reader) give +0.0: the one difference
 * allowed, by the sign of a zero. */
static inline int int_overflow(const char *text, size_t len)
{
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &err);

    json_decref(j);
    return !j && json_error_code(&err) == json_error_numeric_overflow;
}

/* a[i] == b[i] bit for bit, or (loose) as numbers: -0 == +0. */
static inline int same_values(const double *a, const double *b, size_t n, int loose)
{
    size_t i;

    if (!loose)
        return memcmp(a, b, n * sizeof *a) == 0;
    for (i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            return 0;
    return 1;
}

/* Compare the reader and jansson on text; returns 1 when they agree. */
static inline int numread_agree(const char *text, size_t len)
{
    static double vals[4096];
    struct api_numarray a;
    size_t lead = 0, used, shape[ATTN_MAX_RANK] = {0}, n = 0;
    int rank = 0, ok;
    json_error_t err;
    json_t *j;
    long cnt;

    /* the reader's verdict on the whole text: whitespace (skipped by its
     * caller), an array, then only whitespace */
    while (lead < len && (text[lead] == ' ' || text[lead] == '\n' ||
                          text[lead] == '\t' || text[lead] == '\r'))
        lead++;
    used = api_numarray_parse(text + lead, len - lead, 4096, &a);
    if (used) {
        size_t k = lead + used;
        while (k < len && (text[k] == ' ' || text[k] == '\n' || text[k] == '\t' ||
                           text[k] == '\r'))
            k++;
        if (k != len) {
            api_numarray_free(&a);
            used = 0;
        }
    }
    j = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (!j && json_error_code(&err) == json_error_numeric_overflow)
        j = json_loadb(text, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
    cnt = j ? flatten(j, 0, &rank, shape, vals, 4096, &n) : -1;
    if (cnt >= 0) {
        size_t total = 1;
        int d;
        for (d = 0; d < rank; d++)
            total *= shape[d];
        if (total != (size_t)cnt)
            cnt = -1;
    }
    json_decref(j);
    if ((cnt >= 0) != (used > 0)) {
        printf("  verdicts differ (jansson %s, reader %s): %.*s\n",
               cnt >= 0 ? "takes" : "refuses", used ? "takes" : "refuses",
               (int)(len < 200 ? len : 200), text);
        if (used)
            api_numarray_free(&a);
        return 0;
    }
    if (!used)
        return 1;
    ok = a.count == (size_t)cnt && a.rank == rank &&
         memcmp(a.shape, shape, sizeof shape) == 0 &&
         same_values(a.data, vals, (size_t)cnt, int_overflow(text, len));
    if (!ok) {
        size_t i;
        printf("  values differ: %.*s\n", (int)(len < 200 ? len : 200), text);
        for (i = 0; i < a.count && i < (size_t)cnt; i++)
            if (memcmp(&a.data[i], &vals[i], sizeof(double)) != 0) {
                printf("    element %zu: reader %.17g, jansson %.17g\n", i,
                       a.data[i], vals[i]);
                break;
            }
    }
    api_numarray_free(&a);
    return ok;
}

#endif
