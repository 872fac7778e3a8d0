/*
 * api/bulk.h — the megabytes of a large request's tensors made ready: base64
 * text decoded, or binary bytes copied, each checked for non-finite
 * elements while it is still in L1, and split over the helper pool's cores
 * (core/pool.h) when the request has it to itself.
 *
 * The check here is the strict one (an element whose exponent bits are all
 * ones: an infinity or a NaN), which no valid tensor has except a nullable
 * one's -inf; a tensor that fails it goes through the readers' exact check,
 * which names the first bad element and lets -inf through where allowed.
 */
#ifndef ATTND_API_BULK_H
#define ATTND_API_BULK_H

#include <stdbool.h>
#include <stddef.h>

struct attn_pool;   /* core/pool.h */

/* How the elements of a block are checked. */
enum api_bulk_elem {
    API_BULK_NONE,                  /* bytes only (not checked) */
    API_BULK_F32,
    API_BULK_F64,
    API_BULK_F16,
    API_BULK_BF16,
};

/* One buffer to fill: base64 text (text != NULL: len characters, a whole
 * encoding whose length api_base64_decoded_len accepted, decoded into dst)
 * or bytes (text NULL: len bytes of src copied to dst, or only checked
 * where they are when dst == src). */
struct api_bulk {
    const char *text;
    const void *src;
    size_t len;
    void *dst;
    enum api_bulk_elem elem;
    bool allow_neg_inf;             /* -inf is a value (a nullable input) */
    bool bad;                       /* out: a character outside the alphabet
                                       or misplaced padding (base64) */
    bool nonfinite;                 /* out: some element is an infinity or NaN
                                       (other than an allowed -inf) */
};

/* Fill every job (at most API_BULK_MAX) on the calling thread and the
 * pool's helpers that join (pool may be NULL); false when any job is bad.
 * The pieces do not depend on how many threads join. */
#define API_BULK_MAX 16
bool api_bulk_run(struct api_bulk *jobs, size_t n, struct attn_pool *pool);

#endif
