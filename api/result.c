/*
 * api/result.c — result buffers for one attention pass, shared by the
 * handlers that compute (/v1/sessions/{id}/attention, /v2 infer): each
 * selected output sized from the request's shape with checked arithmetic.
 */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/attn.h"

/* scores, weights [h][n][L]; output [h][n][d_v]; empty [h][n] */
bool api_result_alloc(const struct attn_request *r, struct attn_result *res)
{
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype), snl, snd, rows;

    memset(res, 0, sizeof *res);
    if (!core_mul3(s->h, s->n, s->L, &snl) || !core_mul(snl, esz, &snl) ||
        !core_mul3(s->h, s->n, s->d_v, &snd) || !core_mul(snd, esz, &snd) ||
        !core_mul(s->h, s->n, &rows))
        return false;
    if ((r->outputs & ATTN_OUT_SCORES) && !(res->scores = malloc(snl)))
        return false;
    if ((r->outputs & ATTN_OUT_WEIGHTS) && !(res->weights = malloc(snl)))
        return false;
    if ((r->outputs & ATTN_OUT_OUTPUT) && !(res->output = malloc(snd)))
        return false;
    return (res->empty = calloc(rows, 1)) != NULL;
}

void api_result_free(struct attn_result *res)
{
    free(res->scores);
    free(res->weights);
    free(res->output);
    free(res->empty);
    memset(res, 0, sizeof *res);
}
