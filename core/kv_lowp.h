/*
 * core/kv_lowp.h — decode attention straight over a float16, bfloat16 or
 * int8 cache (kv.h's narrow storage forms), rows widened as they are read.
 */
#ifndef ATTND_CORE_KV_LOWP_H
#define ATTND_CORE_KV_LOWP_H

#include <stdbool.h>

#include "attn.h"
#include "kv.h"

/* A narrow cache's blocks as the loops read them: one block per head, or
 * (page_rows > 0) pages of page_rows rows, [h_kv][pages] pointers each, row
 * j of head g being row j % page_rows of page g·pages + j / page_rows (as
 * struct attn_kv_view's paged form). */
struct kv_lowp_view {
    enum kv_store store;            /* KV_STORE_F16, _BF16 or _I8 */
    const void *const *k;           /* [h_kv] blocks of [L][d_k] stored elements */
    const void *const *v;           /* [h_kv] blocks of [L][d_v] */
    const float *const *ks;         /* KV_STORE_I8: [h_kv] blocks of [L] row scales */
    const float *const *vs;
    size_t page_rows;               /* 0: whole heads */
    size_t pages;                   /* pages per head (paged) */
};

/* Whether kv_lowp_attend takes r: output only, float32, at most
 * KV_LOWP_ROWS query rows per kv head, causal (either corner) or not, any
 * softmax variant and per-head sinks, q bias and RoPE; no attn_bias, mask,
 * ALiBi, softcap, window, segments, explicit positions or batch. */
#define KV_LOWP_ROWS 16
bool kv_lowp_takes(const struct attn_request *r);

/*
 * q [h][n][d_k] (in->q, in->bias_q) against the view's h_kv heads of L =
 * r->shape.L rows -> out->output [h][n][d_v] (out->empty, n_empty as
 * attn_forward_kv). Split by key windows over ws's pool (a fixed split
 * that depends only on the request). Errors as attn_forward_kv's.
 */
enum core_status kv_lowp_attend(const struct attn_request *r, const struct attn_inputs *in,
                                const struct kv_lowp_view *v, struct attn_result *out,
                                struct attn_ws *ws);

/*
 * Any other output-only float32 pass over the view (kv_lowp_takes or not:
 * many query rows, masks, ALiBi, windows, positions, ...): the cache
 * widened a window of keys at a time into a scratch of about 4 MiB, each
 * window through attn_forward_kv_keys, the windows merged and finished by
 * attn_combine. Results as attn_forward_kv's on the widened cache, within
 * rounding; CORE_EINVAL for other outputs or dtypes.
 */
enum core_status kv_lowp_attend_windows(const struct attn_request *r,
                                        const struct attn_inputs *in,
                                        const struct kv_lowp_view *v, struct attn_result *out,
                                        struct attn_ws *ws);

#endif
