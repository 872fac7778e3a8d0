/*
 * core/attn_check.c — validation of an attention request before any pass:
 * shapes and the sizes they imply (BLAS takes int dimensions; every buffer
 * a pass allocates must fit a size_t), parameters (finite scale, softmax
 * variant, sink logits, RoPE, softcap, ALiBi slopes, causal corner, window),
 * and the layouts of positions, segments, bias and mask.
 */
#include "attn.h"
#include "attn_pass.h"
#include "rope.h"

#include <float.h>
#include <limits.h>
#include <math.h>

static bool finite_pos(double x)
{
    return isfinite(x) && x > 0;
}

/* Every BLAS dimension and leading dimension must fit an int. */
static bool fits_int(size_t x)
{
    return x <= (size_t)INT_MAX;
}

/* a·b·c elements of esz bytes, without overflow. */
static bool bytes_ok(size_t a, size_t b, size_t c, size_t esz)
{
    size_t t;
    return core_mul3(a, b, c, &t) && core_mul(t, esz, &t);
}

static enum core_status check_params(const struct attn_request *r)
{
    const struct attn_params *p = &r->params;
    if (p->dtype != ATTN_F32 && p->dtype != ATTN_F64)
        return CORE_EINVAL;
    /* float32 passes hold scale and the sink shift as float: keep them finite */
    double range = p->dtype == ATTN_F32 ? FLT_MAX : DBL_MAX;
    if (!finite_pos(p->scale) || p->scale > range)
        return CORE_EINVAL;
    if (p->softmax != ATTN_SOFTMAX_STANDARD && p->softmax != ATTN_SOFTMAX_ONE &&
        p->softmax != ATTN_SOFTMAX_SINK)
        return CORE_EINVAL;
    if (p->softmax == ATTN_SOFTMAX_SINK &&
        (!isfinite(p->sink_logit) || fabs(p->sink_logit) > range))
        return CORE_EINVAL;
    if (p->rope && (!finite_pos(p->rope_base) ||
                    (p->rope_pairs != ATTN_ROPE_INTERLEAVED &&
                     p->rope_pairs != ATTN_ROPE_HALF)))
        return CORE_EINVAL;
    if (!isfinite(p->softcap) || p->softcap < 0 || p->softcap > range)
        return CORE_EINVAL;
    if (p->softmax == ATTN_SOFTMAX_SINK && p->sink_logits)
        for (size_t i = 0; i < r->shape.h; i++)
            if (isnan(p->sink_logits[i]) || p->sink_logits[i] == INFINITY ||
                (isfinite(p->sink_logits[i]) && fabs(p->sink_logits[i]) > range))
                return CORE_EINVAL;
    if (p->alibi && p->alibi_slopes)
        for (size_t i = 0; i < r->shape.h; i++)
            if (!isfinite(p->alibi_slopes[i]))
                return CORE_EINVAL;
    if (r->causal != ATTN_CAUSAL_NONE && r->causal != ATTN_CAUSAL_BOTTOM_RIGHT &&
        r->causal != ATTN_CAUSAL_TOP_LEFT)
        return CORE_EINVAL;
    if (r->empty_rows != ATTN_EMPTY_ZERO && r->empty_rows != ATTN_EMPTY_ERROR)
        return CORE_EINVAL;
    if (r->outputs == 0 || (r->outputs & ~(unsigned)ATTN_OUT_ALL))
        return CORE_EINVAL;
    const struct attn_window *w = &r->window;
    if (w->on && w->sinks < 0)
        return CORE_EINVAL;
    return CORE_OK;
}

/* An array of `batches` rows of `len` positions or segment ids: batches 1
 * or B, and (positions) every entry >= 0. */
static enum core_status check_ints(const int64_t *a, size_t batches, size_t B, size_t len,
                                   bool nonneg)
{
    if (!a)
        return CORE_OK;
    if (batches != 1 && batches != B)
        return CORE_ESHAPE;
    for (size_t i = 0; nonneg && i < batches * len; i++)
        if (a[i] < 0)
            return CORE_EINVAL;
    return CORE_OK;
}

/* Positions, segments and the head counts of attn_bias / mask. */
static enum core_status check_layout(const struct attn_request *r)
{
    const struct attn_shape *s = &r->shape;
    size_t B = s->B ? s->B : 1;
    if (r->attn_bias && r->attn_bias_heads != 1 && r->attn_bias_heads != s->h &&
        r->attn_bias_heads != B * s->h)
        return CORE_ESHAPE;
    if (r->mask && r->mask_heads != 1 && r->mask_heads != s->h && r->mask_heads != B * s->h)
        return CORE_ESHAPE;
    if (!r->seg_q != !r->seg_k)
        return CORE_EINVAL;
    enum core_status st = check_ints(r->pos_q, r->pos_q_batches, B, s->n, true);
    if (st == CORE_OK)
        st = check_ints(r->pos_k, r->pos_k_batches, B, s->L, true);
    if (st == CORE_OK)
        st = check_ints(r->seg_q, r->seg_batches, B, s->n, false);
    if (st == CORE_OK)
        st = check_ints(r->seg_k, r->seg_batches, B, s->L, false);
    return st;
}

enum core_status attn_check(const struct attn_request *r)
{
    if (!r)
        return CORE_EINVAL;
    const struct attn_shape *s = &r->shape;
    if (!s->h || !s->h_kv || !s->n || !s->L || !s->d_k || !s->d_v)
        return CORE_ESHAPE;
    if (s->h % s->h_kv)
        return CORE_ESHAPE;
    enum core_status st = attn_rope_check(&r->params, s->d_k);
    if (st != CORE_OK)
        return st;
    /* Sizes: BLAS takes int dimensions; positions are int64_t. */
    size_t B = s->B ? s->B : 1, hb, hkvb;
    if (!fits_int(s->L) || !fits_int(s->d_k) || !fits_int(s->d_v) ||
        !fits_int(s->n) || !core_mul(s->h, B, &hb) || hb > (size_t)INT_MAX ||
        !core_mul(s->h_kv, B, &hkvb))
        return CORE_ELIMIT;
    size_t esz = attn_dtype_size(r->params.dtype), hn;
    if (!core_mul(hb, s->n, &hn) || !bytes_ok(hn, s->d_k, 1, esz) ||
        !bytes_ok(hn, s->d_v, 1, esz) || !bytes_ok(hn, s->L, 1, esz) ||
        !bytes_ok(hkvb, s->L, s->d_k, esz) ||
        !bytes_ok(hkvb, s->L, s->d_v, esz) ||
        !bytes_ok(hn, s->L, 1, 1) ||
        !bytes_ok(ATTN_TILE_MAX, s->L + s->d_k, 1, esz))
        return CORE_ELIMIT;
    st = check_layout(r);
    return st == CORE_OK ? check_params(r) : st;
}

enum core_status attn_check_inputs(const struct attn_request *r,
                                   const struct attn_inputs *in)
{
    if (!r || !in || !in->q || !in->k || !in->v)
        return CORE_EINVAL;
    if (in->bias_q && in->bias_q_heads != 1 && in->bias_q_heads != r->shape.h)
        return CORE_ESHAPE;
    if (in->bias_k && in->bias_k_heads != 1 && in->bias_k_heads != r->shape.h_kv)
        return CORE_ESHAPE;
    if (in->bias_v && in->bias_v_heads != 1 && in->bias_v_heads != r->shape.h_kv)
        return CORE_ESHAPE;
    return CORE_OK;
}
