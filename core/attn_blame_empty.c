/*
 * core/attn_blame_empty.c — the query row a pass with empty_rows "error"
 * stopped on (CORE_EEMPTYROW), and why it has no key (see attn_blame.h).
 * Error path only: the passes stop at a row whose scores are all -inf
 * without saying which; this walks the rows again, key by key, with the
 * rule the passes use (attn_run_allowed, the mask, a -inf attn_bias), and
 * counts what took each key of the first empty row away.
 */
#include "attn_blame_impl.h"

#include <math.h>

/* Key j of query row i of flattened head hh: whether it is allowed;
 * else the first rule that takes it away is counted in e. */
static bool key_allowed(const struct attn_run *x, size_t hh, size_t i, size_t j,
                        struct attn_blame_empty *e)
{
    const struct attn_request *r = &x->r;
    size_t n = r->shape.n, L = r->shape.L, b = attn_run_qbatch(x, hh);
    if (r->seg_q) {
        size_t sb = r->seg_batches == 1 ? 0 : b;
        if (r->seg_q[sb * n + i] != r->seg_k[sb * L + j]) {
            e->segment++;
            return false;
        }
    }
    if (r->causal != ATTN_CAUSAL_NONE && attn_run_kpos(x, b, j) > attn_run_qpos(x, hh, i)) {
        e->causal++;
        return false;
    }
    if (!attn_run_allowed(x, hh, i, j)) {
        e->window++;
        return false;
    }
    if (r->mask && !r->mask[(attn_run_bcast_head(x, r->mask_heads, hh) * n + i) * L + j]) {
        e->mask++;
        return false;
    }
    if (r->attn_bias) {
        size_t at = (attn_run_bcast_head(x, r->attn_bias_heads, hh) * n + i) * L + j;
        double v = r->params.dtype == ATTN_F32 ? (double)((const float *)r->attn_bias)[at]
                                               : ((const double *)r->attn_bias)[at];
        if (v == -INFINITY) {
            e->bias++;
            return false;
        }
    }
    return true;
}

/* Whether row i of head hh has no allowed key; e counts why. */
static bool row_empty(const struct attn_run *x, size_t hh, size_t i,
                      struct attn_blame_empty *e)
{
    *e = (struct attn_blame_empty){.keys = x->r.shape.L};
    for (size_t j = 0; j < x->r.shape.L; j++)
        if (key_allowed(x, hh, i, j, e))
            return false;
    return true;
}

enum core_status attn_blame_empty(const struct attn_request *r, const size_t *heads,
                                  size_t nh, struct attn_blame_empty *out)
{
    struct attn_blame_run run;
    *out = (struct attn_blame_empty){.keys = r->shape.L};
    enum core_status st = attn_blame_run_open(&run, r, heads, nh);
    if (st != CORE_OK)
        return st;
    const struct attn_run *x = &run.x;
    struct attn_blame_empty e;
    for (size_t hh = 0; hh < x->r.shape.h && !out->found; hh++)
        for (size_t i = 0; run.want[hh % x->h] && i < r->shape.n && !out->found; i++)
            if (row_empty(x, hh, i, &e)) {
                *out = e;
                out->found = true;
                out->b = hh / x->h;
                out->head = hh % x->h;
                out->row = i;
            }
    attn_blame_run_close(&run);
    return CORE_OK;
}
