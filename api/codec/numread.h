/*
 * api/codec/numread.h — a dedicated reader for the big numeric arrays of a
 * request body: jansson builds one heap object per number, this reads
 * nested arrays straight into doubles (measured: docs/benchmarks.md,
 * section "What limits each row", the HTTP small row).
 *
 * It never decides an error on its own: it either takes an array it fully
 * understands — a rectangular nested array (rank 1..3, no empty level) of
 * RFC 8259 numbers whose values are finite doubles — or leaves the text
 * to jansson, which then reports whatever is wrong exactly as without this
 * reader. Values equal jansson's (strtod, correctly rounded; an integer
 * literal -0 reads as +0 as jansson's integers do — unless the body holds
 * an integer beyond 64 bits, which makes api/reply.c parse every integer
 * as a real and so read that -0 as -0.0: the only difference, the sign of
 * a zero). tests/api/
 * test_api_numread.c checks agreement with jansson on generated and
 * mutated inputs.
 */
#ifndef ATTND_API_NUMREAD_H
#define ATTND_API_NUMREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "api/codec/half.h"
#include "core/tensor.h"

struct api_early;   /* api/early.h */
struct attn_pool;   /* core/pool.h */

/* A numeric array read from text; owns its data. */
struct api_numarray {
    int rank;                       /* 1..ATTN_MAX_RANK */
    size_t shape[ATTN_MAX_RANK];
    size_t count;
    double *data;                   /* nested arrays: malloc'd [count] values */
    void *raw;                      /* base64 form: the decoded bytes of
                                       raw_dtype */
    bool raw_finite;                /* no element of raw is an infinity or
                                       NaN (checked while decoding); when
                                       false the reader finds which */
    enum attn_dtype raw_dtype;
    enum api_half raw_half;         /* base64 of 2-byte float16 / bfloat16
                                       elements (raw_dtype ATTN_F32 then) */
};

/*
 * Read the array at s[0..len) (s[0] must be '['). Returns the bytes it
 * spans, or 0 when it is not an array this reader takes (see above) or
 * holds more than max_count numbers; out is untouched then.
 */
size_t api_numarray_parse(const char *s, size_t len, size_t max_count,
                          struct api_numarray *out);

/*
 * Read a base64 tensor object at s[0..len) (s[0] must be '{'):
 * exactly the members "shape" (1..3 positive integers), "dtype"
 * ("float32" | "float64" | "float16" | "bfloat16") and "data" (base64 of exactly shape x dtype
 * bytes, no escapes), in any order, once each. Anything else, or more than
 * max_count elements: 0, and jansson's path reports it. This spares
 * jansson's string reader (~20 MB/s) the megabytes of "data".
 */
size_t api_b64tensor_parse(const char *s, size_t len, size_t max_count,
                           struct api_numarray *out);

void api_numarray_free(struct api_numarray *a);

/* Top-level members taken by the fast reader, by JSON pointer ("/q"). */
#define API_PRE_MAX 4

struct api_pre {
    size_t n;
    bool whole;                     /* every member of the body was taken,
                                       each key once (api_pre_rewrite) */
    struct {
        char path[32];              /* "/q" */
        struct api_numarray a;      /* data and raw NULL once a reader took it */
    } e[API_PRE_MAX];
};

void api_pre_free(struct api_pre *pre);

/* The entry for path not yet taken by a reader, or NULL. */
struct api_numarray *api_pre_find(const struct api_pre *pre, const char *path);

/*
 * Prepare a body for jansson: the top-level members named in keys whose
 * values are arrays (or base64 tensor objects) this reader takes are read
 * into pre (at most
 * API_PRE_MAX; at most max_count numbers in all) and replaced by 0 in the
 * returned copy of the text (*out_len bytes, malloc'd). Returns NULL when
 * nothing was taken (parse the original) or the body's top level could not
 * be followed, or nests deeper than max_depth (the body counting as 1): so
 * a returned text needs no separate depth check. Base64 tensors are decoded
 * after the scan, all together, over pool's cores (api/bulk.h; pool may be
 * NULL), each starting from what early (api/early.h; may be NULL)
 * decoded of its string while the body arrived; when one of them is not
 * valid base64 nothing is taken, and jansson's reader reports it. The
 * body's strings with holes are stepped over; those not taken are filled
 * again before anything decodes or copies them, and all of them when
 * NULL is returned without pre->whole. Otherwise the taken ones keep
 * theirs: before freeing pre without taking its arrays, restore them
 * (api_early_restore(early, true)) if the body is to be read again.
 *
 * When every member of the body was taken, each under a different key
 * (pre->whole), no text is built and NULL is returned with pre kept: what
 * jansson would read is exactly {"<key>":0,...} with the keys of pre, so
 * the caller builds that object itself (api/reply.c).
 */
char *api_pre_rewrite(const char *body, size_t len, const char *const *keys,
                      size_t max_count, size_t max_depth, struct attn_pool *pool,
                      struct api_early *early, struct api_pre *pre, size_t *out_len);

#endif
