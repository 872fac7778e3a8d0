/*
 * api/codec/write.h — numbers, matrices and whole attention responses as JSON
 * text, appended straight into a capped api_buf (never through a jansson
 * tree: a response can hold millions of numbers).
 *
 * Numbers print as the shortest text that reads back (strtod / strtof) to
 * the same value of their dtype, or rounded to `digits` significant digits
 * when asked (1..17; printf's %g: trailing zeros dropped). Number formatting sits behind api_fmt_f64 /
 * api_fmt_f32 so a faster algorithm can replace it without touching callers.
 * Matrices print as nested arrays (rank 1..4) or, with base64 encoding, as
 * {"shape":[…],"dtype":"float32"|"float64","data":"<base64 little-endian>"}.
 */
#ifndef ATTND_API_WRITE_H
#define ATTND_API_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/codec/buf.h"
#include "api/codec/half.h"
#include "core/attn.h"

enum api_encoding {
    API_ENC_JSON = 0,       /* nested arrays */
    API_ENC_BASE64,         /* {"shape","dtype","data"} */
};

/* Bytes a formatted number may take, with the NUL. */
#define API_NUM_MAX 32

/* Format a finite x into out[API_NUM_MAX]: shortest round-trip text when
 * digits == 0, else rounded to digits (1..17) significant digits (%g). Returns the
 * length (no NUL counted). Non-finite x prints "null". */
size_t api_fmt_f64(char *out, double x, int digits);
size_t api_fmt_f32(char *out, float x, int digits);

/* Shortest round-trip text alone (api/codec/dtoa.c, Schubfach): what api_fmt_*
 * use when digits == 0. out holds API_NUM_MAX bytes. */
size_t api_dtoa_f64(char *out, double x);
size_t api_dtoa_f32(char *out, float x);

/* Shortest round-trip text of a float16 / bfloat16 bit pattern (api/
 * dtoa_half.c): the fewest digits whose decimal rounds (to nearest even)
 * back to h, the closest of those to h; "null" for infinity and NaN. */
size_t api_dtoa_f16(char *out, uint16_t h);
size_t api_dtoa_bf16(char *out, uint16_t h);

/* The decimal f * 10^e (f < 10^19) laid out as api_dtoa_* lay out theirs
 * (JavaScript's layout); f == 0 prints 0 (or -0 when neg). */
size_t api_dtoa_digits(char *out, bool neg, uint64_t f, int e);

/* Append one number of dtype dt read from p. */
bool api_write_number(struct api_buf *b, enum attn_dtype dt, const void *p,
                      int digits);

/* Append a JSON string literal (quoted, escaped) of NUL-terminated s, or
 * of the n bytes at s (NULs escaped). */
bool api_write_string(struct api_buf *b, const char *s);
bool api_write_string_n(struct api_buf *b, const char *s, size_t n);

/* Append the JSON text of a jansson value as json_dumps(JSON_COMPACT)
 * would, but each real as its shortest round-trip text (jansson prints 17
 * significant digits: 0.1 as 0.10000000000000001), with ".0" after one
 * that would read as an integer. Objects keep their members' order. */
bool api_write_json(struct api_buf *b, const json_t *v);

/*
 * Append a row-major matrix of dtype dt with the given rank (1..4) and shape
 * as nested arrays. Every non-finite value prints as null (no NaN or Inf
 * ever leaves the service): that is how masked scores (-inf) travel;
 * neg_inf_null only documents that the caller expects them.
 */
bool api_write_matrix(struct api_buf *b, const void *data, enum attn_dtype dt,
                      int rank, const size_t *shape, int digits,
                      bool neg_inf_null);

/* Append {"shape":[…],"dtype":"…","data":"<base64>"} of the same matrix
 * (bytes as stored: little-endian IEEE 754; masked scores stay -inf). */
bool api_write_matrix_b64(struct api_buf *b, const void *data,
                          enum attn_dtype dt, int rank, const size_t *shape);

struct api_extras;

/* Everything the attention response writer needs. */
struct api_attention_view {
    const struct attn_request *req;     /* shape, params, causal, outputs */
    const struct attn_result *res;      /* the computed arrays */
    int q_rank;                         /* 2: outputs drop the head axis; 3: keep
                                           it; 4: [B][h][n][..] */
    enum api_encoding encoding;
    int digits;                         /* 0 = shortest round-trip */
    uint64_t elapsed_us;                /* meta.elapsed_us */
    const char *meta_extra;             /* JSON members appended inside meta
                                           (e.g. "\"length\":5"), or NULL */
    const struct api_extras *x;         /* part-2 returns (api/extras.h), or
                                           NULL: the v1 response */
    enum api_half half;                 /* float16/bfloat16 request: the
                                           outputs are rounded to it (and
                                           printed as it), meta.dtype names it */
    bool checked;                       /* api_attention_accept has run */
};

/* Query heads over the whole batch: B*h (B = 0 counts as 1); false on
 * overflow. Every output has B*h*n rows. */
static inline bool api_heads_total(const struct attn_shape *s, size_t *out)
{
    return core_mul(s->B ? s->B : 1, s->h, out);
}

/*
 * How many numbers the selected outputs hold (scores, weights: B*h*n*L
 * each; output: B*h*n*d_v); false on overflow. The handler compares this against
 * cfg.max_elements (422 response_too_large) before computing.
 */
bool api_attention_numbers(const struct attn_request *r, size_t *count);

/* An upper bound of the response's bytes for a cap on its api_buf. */
bool api_attention_max_bytes(const struct attn_request *r,
                             enum api_encoding enc, size_t *bytes);

/*
 * Append the whole response object:
 * {"scores":…,"weights":…,"output":…,"meta":{"heads","kv_heads","n","L",
 *  "d_k","d_v","scale","softmax","dtype","causal","empty_rows","elapsed_us"}}
 * Only the outputs selected in req->outputs appear. meta.empty_rows lists the
 * rows with no allowed key (2-D q: [i,…]; 3-D q: [[head,i],…]; 4-D q:
 * [[b,head,i],…]); meta.causal is false, "bottom_right" or "top_left";
 * meta.heads/kv_heads are h/h_kv; a 4-D q adds meta.batch (B).
 */
bool api_write_attention(struct api_buf *b, const struct api_attention_view *v);

/* The wire name of a softmax variant: "standard", "softmax1" or "sink". */
const char *api_softmax_name(enum attn_softmax s);

#endif
