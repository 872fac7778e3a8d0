/*
 * api/warm.h — requests made up at start-up (--warm-up), so that the first
 * requests of a shape a deployment expects find what they need ready.
 *
 * A process's first large request pays for memory and threads that every
 * later one reuses: its body, tensor, result and response blocks are new
 * pages (kept afterwards in api/spare.c's slots), the work pool and the
 * core's helpers run for the first time. api_warm_run runs two output-only
 * requests of a given shape and dtype, POST /v1/attention with base64
 * tensors and the OIP v2 infer route with binary ones, through the steps a
 * request from the transport takes (its body in an api/spare.c block, the
 * base64 strings decoded piece by piece as they would arrive, the api's
 * router) and checks that both were answered 200. They are never counted
 * as requests and need no API key. A request leaves parts of its blocks
 * untouched that another's layout uses: once every warm-up request has
 * run, the caller writes to every kept page (api_spare_touch).
 */
#ifndef ATTND_API_WARM_H
#define ATTND_API_WARM_H

#include <stdbool.h>
#include <stddef.h>

struct api_ctx;      /* api/api.h */
struct attn_ws;      /* core/attn.h */

#define API_WARM_MAX 4

/* The tensors' element type, as a request's "dtype": float64 computes in
 * float64, the others in float32 (half precision as api/read.c reads it).
 * float32 is the zero value. */
enum api_warm_dtype { API_WARM_F32, API_WARM_F64, API_WARM_F16, API_WARM_BF16 };

/* h heads, n query rows, L keys, d = d_k = d_v, of dtype's elements. */
struct api_warm_shape {
    size_t h, n, L, d;
    enum api_warm_dtype dtype;
};

/* Parse "NxLxD" or "HxNxLxD" items, each optionally followed by ":float64",
 * ":float16", ":bfloat16" or ":float32" (the default), comma-separated (at
 * most API_WARM_MAX; each number 1 to 2^20, no spaces) into out and count;
 * "" is none. false on anything else, out and count left as they were. */
bool api_warm_parse(const char *text, struct api_warm_shape *out, size_t *count);

/* s as "NxLxD", or "HxNxLxD" when h > 1, then ":dtype" unless float32. */
void api_warm_name(const struct api_warm_shape *s, char *buf, size_t cap);

/* Run both requests of shape s on this thread with ws (the caller's
 * scratch, as a worker's). true when both were answered 200; false with a
 * one-line reason in err (which one, and the api's error, or the body's
 * size over --max-body-bytes). */
bool api_warm_run(struct api_ctx *ctx, const struct api_warm_shape *s, struct attn_ws *ws,
                  char *err, size_t cap);

#endif
