/*
 * api/extras.h — the teaching and research returns of an attention
 * request: "qk", "lse" and "stats" in `return`, `heads`, `weights_top_k`
 * and `tokens`, shared by /v1/attention, session attention and OIP v2.
 *
 * A request that uses none of them runs the plain pass, its answer
 * untouched by this module; one that does runs core/attn_extras.c and the
 * response writer (api/codec/write.c) adds the extra members through the view's
 * `x`.
 */
#ifndef ATTND_API_EXTRAS_H
#define ATTND_API_EXTRAS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/codec/buf.h"
#include "api/codec/half.h"
#include "core/attn.h"
#include "core/attn_extras.h"

struct api_call;
struct api_attention_view;

/* Longest token label in bytes (UTF-8). */
#define API_TOKEN_MAX 256

struct api_extras {
    unsigned want;              /* ATTN_X_* bits */
    size_t *heads;              /* malloc'd [nh] chosen heads, or NULL: all */
    size_t nh;                  /* chosen heads; set to h by api_extras_check */
    size_t top_k;               /* > 0: weights travel as top-k */
    json_t *tokens;             /* the validated {"q","k"} object (a reference), or NULL */
    struct attn_extras_out xo;  /* result buffers (api_extras_alloc) */
    void *block;                /* their one allocation */
};

/* Does the request need attn_forward_extras (else the plain pass)? */
static inline bool api_extras_compute(const struct api_extras *x)
{
    return x && (x->want || x->heads);
}

/*
 * `return` with the extra names: a non-empty subset of ["scores",
 * "weights","output","qk","lse","stats"] -> *outputs (ATTN_OUT_*) and
 * *want (ATTN_X_*); absent: scores, weights and output. want NULL: the
 * extra names are refused (routes without them).
 */
bool api_read_return(struct api_call *c, const json_t *v, const char *path,
                     unsigned *outputs, unsigned *want);

/*
 * `heads` (distinct integers >= 0), `weights_top_k` (an integer >= 1,
 * needs "weights" in *outputs, which it then replaces) and `tokens`
 * ({"q":[strings],"k":[strings]}, either or both, each UTF-8 of at most
 * API_TOKEN_MAX bytes without NUL) into x; paths are "/heads",
 * "/weights_top_k", "/tokens" under prefix. Shapes are checked later.
 */
bool api_read_extras(struct api_call *c, const char *prefix, const json_t *heads,
                     const json_t *top_k, const json_t *tokens, unsigned *outputs,
                     struct api_extras *x);

/* Against the pass's shape: heads < h (sets nh), tokens.q has n labels and
 * tokens.k L; 422 shape_mismatch / invalid_field otherwise. */
bool api_extras_check(struct api_call *c, const char *prefix, struct api_extras *x,
                      const struct attn_shape *s);

/* attn_check of r, where outputs may be 0 when only extras are returned. */
enum core_status api_extras_check_request(const struct attn_request *r);

/* Numbers the response holds with x (NULL: the v1 count); false on overflow. */
bool api_extras_numbers(const struct attn_request *r, const struct api_extras *x,
                        size_t *count);

/* A response over max numbers that is so for weights_top_k (it would fit
 * without the top-k's indices and values) answered 422 at path, which
 * names weights_top_k; false, nothing answered, for any other. */
bool api_extras_fail_topk(struct api_call *c, const struct attn_request *r,
                          const struct api_extras *x, size_t max, const char *path);

/* Bytes beyond the numbers' that x adds to a response (labels, brackets). */
bool api_extras_bytes(const struct attn_request *r, const struct api_extras *x,
                      size_t *bytes);

/* Result buffers: res compact over the chosen heads, x->xo for x->want. */
bool api_extras_alloc(const struct attn_request *r, struct api_extras *x,
                      struct attn_result *res);

void api_extras_free(struct api_extras *x);

/* A float16/bfloat16 request's extras (qk, lse, the statistics, the top-k
 * values; float32 as computed) rounded in place to h, as the outputs are.
 * NULL when every value fits, else the name of the first array with a value
 * that overflows h and that value's row-major index in *at. */
const char *api_extras_round_half(const struct attn_request *r, const struct api_extras *x,
                                  enum api_half h, size_t *at);

/* Whether qk (q·k before the scale, no mask: finite for finite inputs
 * unless a product overflowed) holds a value that is not finite, the
 * first one's row-major index in *at; false without qk. */
bool api_extras_qk_overflow(const struct attn_request *r, const struct api_extras *x,
                            size_t *at);

/* The core's view of x. */
struct attn_extras api_extras_core(const struct api_extras *x);

/* Response members: the top-k weights object ("weights":{...},), and the
 * extras after "output" ("qk":…,"lse":…,"stats":{…},); meta members
 * (",\"heads_returned\":[…],\"tokens\":{…}"). */
void api_write_top_k(struct api_buf *b, const struct api_attention_view *v);
void api_write_extras(struct api_buf *b, const struct api_attention_view *v);
void api_write_extras_meta(struct api_buf *b, const struct api_attention_view *v);

#endif
