/*
 * core/attn_extras.h — what a teaching page and a researcher get back
 * beside scores, weights and output: the raw products
 * q·k, each row's log-denominator, per-row statistics of the weights, the
 * largest k weights of each row, and a pass restricted to chosen heads.
 *
 * attn_forward_extras runs the ordinary pass (attn_forward_kv_rows) over
 * the chosen heads' query rows, a block of rows at a time, and derives the
 * extras from each block's final scores before the next block: the scores
 * of a block live in a buffer of about ATTN_EXTRAS_BLOCK_BYTES (never n·L
 * of them unless they are returned). A top-k map (with or without lse and
 * the output) rides the key-blocked output-only pass instead, reading each
 * block of scores as the pass makes it: its cost is the output's plus one
 * comparison per score, and its memory the k entries per row. Blocks are pieces of the
 * workspace's pool (attn_pool_run) when it has one. q·k comes from the
 * same prepared queries and keys the pass reads (attn_prepare_q,
 * attn_prepare_kv), so every score step the pass adds later applies to it
 * unchanged.
 */
#ifndef ATTND_CORE_ATTN_EXTRAS_H
#define ATTND_CORE_ATTN_EXTRAS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* Bits of attn_extras.want. */
enum {
    ATTN_X_QK = 1u << 0,        /* q·k after bias and RoPE (step 3), every entry */
    ATTN_X_LSE = 1u << 1,       /* log of the softmax denominator */
    ATTN_X_STATS = 1u << 2,     /* entropy, max_weight, argmax, mass */
    ATTN_X_TOPK = 1u << 3,      /* the top_k largest weights of each row */
};

/* Scores of one block of rows held at once (the bound of the top-k pass). */
#define ATTN_EXTRAS_BLOCK_BYTES ((size_t)4 << 20)

struct attn_extras {
    unsigned want;              /* ATTN_X_* bits (0: only the head selection) */
    const size_t *heads;        /* [nh] distinct query heads < h, or NULL: all h */
    size_t nh;                  /* entries of heads (ignored when heads is NULL) */
    size_t top_k;               /* >= 1 with ATTN_X_TOPK */
};

/*
 * Caller-owned buffers, rows in the order of the chosen heads (slot a is
 * heads[a]): "[nh][n]" below is nh·n rows, and with a batch (shape.B > 1)
 * every array holds B such blocks, [B][nh][n]..., the same heads chosen in
 * every element. Each is NULL unless its bit is set. Numbers are of the
 * request's dtype unless said.
 *   qk          [nh][n][L]
 *   lse         [nh][n]   log(Σ allowed exp(s) + extra), extra = 1 (softmax1),
 *                         exp(sink) (sink), 0 (standard); NaN (null) for a
 *                         standard row with no allowed key
 *   entropy     [nh][n]   −Σ p ln p in nats (0 for a row without weights)
 *   max_weight  [nh][n]   the largest weight (0 without allowed keys)
 *   mass        [nh][n]   Σ p: exactly 1 for standard rows with a key,
 *                         below 1 for softmax1 and sink, 0 for an empty row
 *   argmax      [nh][n]   int64 key index of the largest weight, ties to the
 *                         lower index; -1 (null) when no key is allowed
 *   top_idx     [nh][n][k] int64, largest weight first, ties to the lower
 *                         index; -1 pads rows with fewer than k allowed keys
 *                         (both rank keys by score: weights that round to
 *                         one value, 0 among them, by their scores)
 *   top_val     [nh][n][k] the matching weights, 0 in the padding
 * Statistics and top-k weights are computed in double from the final
 * scores (p = exp(s − lse)), so they agree with the weights of a full pass
 * within the dtype's rounding.
 */
struct attn_extras_out {
    void *qk;
    void *lse;
    void *entropy, *max_weight, *mass;
    int64_t *argmax;
    int64_t *top_idx;
    void *top_val;
};

/*
 * The pass of r over the chosen heads, plus the extras of x.
 * kv: prepared keys/values (a session's cache), or NULL for a stateless
 * request (in->k, in->v prepared here as attn_forward does).
 * out: r->outputs' arrays (may be 0 when only extras are asked for) and
 * empty, all compact over the chosen heads ([B][nh][n][L], [B][nh][n][d_v],
 * [B][nh][n]); out->n_empty counts the chosen rows only. Stateless keys
 * are prepared as attn_forward prepares them (attn_prepare_view), so
 * batches, segments and positions give the bits of the plain pass.
 * Errors: those of attn_forward_kv; CORE_EINVAL for a head out of range or
 * repeated, top_k 0 with ATTN_X_TOPK, or a requested buffer missing.
 */
enum core_status attn_forward_extras(const struct attn_request *r,
                                     const struct attn_inputs *in,
                                     const struct attn_kv_view *kv,
                                     const struct attn_extras *x,
                                     struct attn_result *out,
                                     struct attn_extras_out *xo,
                                     struct attn_ws *ws);

#endif
