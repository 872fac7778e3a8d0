/*
 * core/attn_blame_empty.c — the query row a pass with empty_rows "error"
 * stopped on (CORE_EEMPTYROW), and why it has no key (see attn_blame.h).
 * Error path only: the passes stop at a row whose scores are all -inf
 * without saying which; this walks the rows again, key by key, with the
 * rule the passes use (attn_run_allowed, the mask, a -inf attn_bias), and
 * counts what took each key of the first empty row away.
 */
#include "attn_blame.h"

#include <math.h>
#include <stdlib.h>

#include "attn_run.h"

/* The keys of a row, each under the first rule that takes it away. */
struct blame_keys {
    size_t free_, segment, causal, window, mask, bias;
};

/* Key j of query row i of flattened head hh, the rules in turn. */
static void classify(const struct attn_run *x, size_t hh, size_t i, size_t j,
                     struct blame_keys *k)
{
    const struct attn_request *r = &x->r;
    size_t n = r->shape.n, L = r->shape.L, b = attn_run_qbatch(x, hh);
    if (r->seg_q) {
        size_t sb = r->seg_batches == 1 ? 0 : b;
        if (r->seg_q[sb * n + i] != r->seg_k[sb * L + j]) {
            k->segment++;
            return;
        }
    }
    if (r->causal != ATTN_CAUSAL_NONE && attn_run_kpos(x, b, j) > attn_run_qpos(x, hh, i)) {
        k->causal++;
        return;
    }
    if (!attn_run_allowed(x, hh, i, j)) {
        k->window++;
        return;
    }
    if (r->mask && !r->mask[(attn_run_bcast_head(x, r->mask_heads, hh) * n + i) * L + j]) {
        k->mask++;
        return;
    }
    if (r->attn_bias) {
        size_t at = (attn_run_bcast_head(x, r->attn_bias_heads, hh) * n + i) * L + j;
        double v = r->params.dtype == ATTN_F32 ? (double)((const float *)r->attn_bias)[at]
                                               : ((const double *)r->attn_bias)[at];
        if (v == -INFINITY) {
            k->bias++;
            return;
        }
    }
    k->free_++;
}

/* Row i of head hh has no allowed key: *k counts why (free_ stays 0). */
static bool row_empty(const struct attn_run *x, size_t hh, size_t i, struct blame_keys *k)
{
    *k = (struct blame_keys){0};
    for (size_t j = 0; j < x->r.shape.L && !k->free_; j++)
        classify(x, hh, i, j, k);
    return !k->free_;
}

enum core_status attn_blame_empty(const struct attn_request *r, const size_t *heads,
                                  size_t nh, struct attn_blame_empty *out)
{
    const struct attn_shape *sh = &r->shape;
    size_t bytes;
    *out = (struct attn_blame_empty){.keys = sh->L};
    if (!attn_run_bytes(r, &bytes))
        return CORE_ELIMIT;
    void *m = bytes ? aligned_alloc(16, (bytes + 15) & ~(size_t)15) : NULL;
    bool *want = calloc(sh->h ? sh->h : 1, sizeof *want);
    if ((bytes && !m) || !want) {
        free(m);
        free(want);
        return CORE_ENOMEM;
    }
    for (size_t a = 0; a < (heads ? nh : sh->h); a++)
        if (!heads || heads[a] < sh->h)
            want[heads ? heads[a] : a] = true;
    struct attn_run x;
    attn_run_init(&x, r, m);
    struct blame_keys k;
    for (size_t hh = 0; hh < x.r.shape.h && !out->found; hh++)
        for (size_t i = 0; want[hh % x.h] && i < sh->n && !out->found; i++)
            if (row_empty(&x, hh, i, &k))
                *out = (struct attn_blame_empty){
                    .found = true, .b = hh / x.h, .head = hh % x.h, .row = i,
                    .keys = sh->L, .segment = k.segment, .causal = k.causal,
                    .window = k.window, .mask = k.mask, .bias = k.bias};
    free(want);
    free(m);
    return CORE_OK;
}
