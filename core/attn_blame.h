/*
 * core/attn_blame.h — which input a float32 or float64 pass that stopped
 * with CORE_ENONFINITE overflowed on. The pass itself only notes that a
 * score or an output is not finite and stops (its loops stay as fast as
 * they are); attn_blame runs afterwards, on the error path alone, over the
 * same prepared rows the pass read, and names the first culprit: a q, k or
 * v row that bias or RoPE pushed past the range, a query row whose score
 * with some key is past it (scale·q·k, softcap, + attn_bias, + ALiBi), an
 * attn_bias entry that took a finite score past it, or, when every score
 * is in range, the v row holding the largest value (an output is a
 * weighted sum of v rows). The scan is bounded: rows that cannot overflow
 * (by |q|max·|k|max·d_k) are skipped, and after ATTN_BLAME_MACS
 * multiply-adds it gives up and says nothing.
 */
#ifndef ATTND_CORE_ATTN_BLAME_H
#define ATTND_CORE_ATTN_BLAME_H

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
};

enum attn_blame_stage {
    ATTN_BLAME_PREPARED,        /* the row after its bias and RoPE */
    ATTN_BLAME_SCORE,           /* a score of query row `row` with key `key` */
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
                                   the dtype's range); OUTPUT: the largest |v| */
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

#endif
