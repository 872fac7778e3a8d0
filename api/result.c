/*
 * api/result.c — result buffers for one attention pass, shared by the
 * handlers that compute (/v1/sessions/{id}/attention, /v2 infer): each
 * selected output sized from the request's shape with checked arithmetic,
 * all of them in one block.
 */
#include "api/internal.h"
#include "api/spare.h"

#include <stdlib.h>
#include <string.h>

#include "core/attn.h"

/* Bytes of a part of the block, rounded up to 64 (so each part is aligned). */
static bool part_bytes(size_t n, size_t *out)
{
    if (!core_add(n, 63, out))
        return false;
    *out &= ~(size_t)63;
    return true;
}

/* scores, weights [B][h][n][L]; output [B][h][n][d_v]; empty [B][h][n]: one
 * allocation in that order (empty, zeroed, always last), so a small request
 * pays one malloc instead of four; the first buffer present is its start. */
bool api_result_alloc(const struct attn_request *r, struct attn_result *res)
{
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype), snl, snd, rows, total = 0, H;

    memset(res, 0, sizeof *res);
    if (!api_heads_total(s, &H) ||
        !core_mul3(H, s->n, s->L, &snl) || !core_mul(snl, esz, &snl) ||
        !core_mul3(H, s->n, s->d_v, &snd) || !core_mul(snd, esz, &snd) ||
        !core_mul(H, s->n, &rows) || !part_bytes(snl, &snl) || !part_bytes(snd, &snd))
        return false;
    static const unsigned bit[3] = {ATTN_OUT_SCORES, ATTN_OUT_WEIGHTS, ATTN_OUT_OUTPUT};
    size_t part[3] = {snl, snl, snd}, off[3] = {0, 0, 0}, off_empty;
    for (int i = 0; i < 3; i++) {
        if (!(r->outputs & bit[i]))
            continue;
        off[i] = total;
        if (!core_add(total, part[i], &total))
            return false;
    }
    off_empty = total;
    if (!core_add(total, rows ? rows : 1, &total))
        return false;
    char *base = api_spare_alloc(total, NULL);
    if (!base)
        return false;
    void **dst[3] = {&res->scores, &res->weights, &res->output};
    for (int i = 0; i < 3; i++)
        if (r->outputs & bit[i])
            *dst[i] = base + off[i];
    res->empty = (uint8_t *)(base + off_empty);
    memset(res->empty, 0, rows);
    return true;
}

void api_result_free(struct attn_result *res)
{
    api_spare_free(res->scores ? res->scores : res->weights ? res->weights
                   : res->output ? res->output : (void *)res->empty);
    memset(res, 0, sizeof *res);
}
