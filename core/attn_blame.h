/*
 * core/attn_blame.h — which input a float32 or float64 pass that stopped
 * with CORE_ENONFINITE overflowed on. The pass itself only notes that a
 * score or an output is not finite and stops (its loops stay as fast as
 * they are); attn_blame runs afterwards, on the error path alone, over the
 * same prepared rows the pass read, and names the first culprit: a q, k or
 * v row that bias or RoPE pushed past the range, a query row whose score
 * with some key is past it (scale·q·k, softcap, + attn_bias, + ALiBi), an
 * attn_bias entry or a head's ALiBi term that took a finite score past
 * it, or, when every score is in range, the v row holding the largest
 * value (an output is a weighted sum of v rows). The scan is bounded:
 * rows that cannot overflow (by |q|max·|k|max·d_k) are skipped, and after
 * ATTN_BLAME_MACS multiply-adds it gives up and says nothing. attn_blame_empty does the
 * same for a pass that stopped on a query row with no allowed key
 * (CORE_EEMPTYROW): which row, and what took its keys away.
 */
#ifndef ATTND_CORE_ATTN_BLAME_H
#define ATTND_CORE_ATTN_BLAME_H

#include <stdbool.h>
#include <stddef.h>

#include "attn.h"

/* Multiply-adds attn_blame spends on scores before it gives up. */
#define ATTN_BLAME_MACS ((size_t)1 << 27)

enum attn_blame_input {
    ATTN_BLAME_NONE = 0,        /* nothing found (or the scan gave up) */
    ATTN_BLAME_Q,               /* q row (b, head, row) */
    ATTN_BLAME_K,               /* k row (b, head = kv head, row) */
    ATTN_BLAME_V,               /* v row (b, head = kv head, row) */
    ATTN_BLAME_ATTN_BIAS,       /* attn_bias entry (b, head, row, key) of the
                                   query head; the caller maps it onto the
                                   broadcast array */
    ATTN_BLAME_ALIBI,           /* the ALiBi term of query head `head`'s
                                   slope at (row, key) */
};

enum attn_blame_stage {
    ATTN_BLAME_PREPARED,        /* the row after its bias and RoPE */
    ATTN_BLAME_SCORE,           /* a score of query row `row` with key `key` */
    ATTN_BLAME_QK,              /* q·k of query row `row` with key `key`, past
                                   the range before the scale (below 1) that
                                   would have brought the score back */
    ATTN_BLAME_OUTPUT,          /* an output: v row with the largest |value| */
};

struct attn_blame {
    enum attn_blame_input input;
    enum attn_blame_stage stage;
    size_t b;                   /* batch element (0 without a batch) */
    size_t head;                /* query head (Q, ATTN_BIAS) or kv head (K, V) */
    size_t row;                 /* row of that input: query row i or key row j */
    size_t key;                 /* SCORE: the key row the query row met */
    long double value;          /* SCORE: the score as computed exactly (past
                                   the dtype's range); QK: q·k so computed;
                                   OUTPUT: the largest |v| */
    long double alibi;          /* SCORE: its ALiBi term -slope·|P_q - P_k|
                                   (0 without ALiBi) */
};

/*
 * After attn_forward / attn_forward_extras of r on in answered
 * CORE_ENONFINITE (r checked; q, k, v of r's dtype, not 2-byte): the
 * input at fault -> *out (input NONE when none is found). heads [nh]
 * restricts the query heads scanned (NULL: all). CORE_ENOMEM /
 * CORE_ELIMIT when the prepared rows cannot be held.
 */
enum core_status attn_blame(const struct attn_request *r, const struct attn_inputs *in,
                            const size_t *heads, size_t nh, struct attn_blame *out);

/* attn_blame of a pass whose keys and values are prepared already (a
 * session's cache): kp, vp [B·h_kv] point at each kv head's L rows of
 * r's dtype, after their bias and RoPE; in gives q (and bias_q). */
enum core_status attn_blame_kv(const struct attn_request *r, const struct attn_inputs *in,
                               void **kp, void **vp, const size_t *heads, size_t nh,
                               struct attn_blame *out);

/* A query row with no key it may attend to, and why: of its `keys` keys,
 * how many each rule took away (each key under the first that takes it,
 * in the order the fields come). */
struct attn_blame_empty {
    bool found;
    size_t b, head, row;        /* batch element, query head, query row */
    size_t keys;                /* the pass's L */
    size_t segment;             /* another segment's key */
    size_t causal;              /* a later position (the causal mask) */
    size_t window;              /* outside the sliding window and past its sinks */
    size_t mask;                /* mask false */
    size_t bias;                /* attn_bias -inf */
};

/*
 * After a pass of r (checked) answered CORE_EEMPTYROW: the first query row
 * (heads [nh] only, NULL: all) that has no allowed key -> *out (found
 * false when there is none). Reads r's positions, segments, window, mask
 * and attn_bias, no data; O(n·L) a head. CORE_ENOMEM / CORE_ELIMIT when
 * the positions cannot be resolved.
 */
enum core_status attn_blame_empty(const struct attn_request *r, const size_t *heads,
                                  size_t nh, struct attn_blame_empty *out);

#endif
