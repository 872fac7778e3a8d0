/*
 * core/store_new.c — a session made from its spec (store.h's
 * sess_new_from_spec), before the store links it: the spec checked as
 * attn_check would check a pass with every fixed option, its biases,
 * ALiBi slopes and sink logits copied, its KV cache made; and its end
 * (sess_destroy). The store's defaults for max_tokens and the TTL are
 * filled in by sess_resolve_defaults.
 */
#include "store_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A copy of count elements of size es (NULL for a NULL p); *ok = false
 * on overflow or when memory is short. */
static void *dup_array(const void *p, size_t count, size_t es, bool *ok)
{
    size_t bytes;
    if (!p)
        return NULL;
    void *d = core_mul(count, es, &bytes) ? malloc(bytes) : NULL;
    if (!d) {
        *ok = false;
        return NULL;
    }
    memcpy(d, p, bytes);
    return d;
}

static bool finite_array(const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]))
            return false;
    return true;
}

/* heads * d elements of dtype t at p are finite (NULL: nothing to check). */
static bool finite_bias(enum attn_dtype t, const void *p, size_t heads,
                        size_t d)
{
    if (!p)
        return true;
    for (size_t i = 0; i < heads * d; i++) {
        double x = t == ATTN_F32 ? (double)((const float *)p)[i]
                                 : ((const double *)p)[i];
        if (!isfinite(x))
            return false;
    }
    return true;
}

/* Validate a spec by asking attn_check about a one-query, one-key pass with
 * every fixed option of the session. */
static enum core_status check_spec(const struct sess_spec *sp)
{
    const struct attn_shape *sh = &sp->shape;
    if (sh->h == 0 || sh->h_kv == 0 || sh->d_k == 0 || sh->d_v == 0)
        return CORE_EINVAL;
    if (sh->h % sh->h_kv != 0)
        return CORE_ESHAPE;
    if ((sp->bias_q && sp->bias_q_heads != 1 && sp->bias_q_heads != sh->h) ||
        (sp->bias_k && sp->bias_k_heads != 1 && sp->bias_k_heads != sh->h_kv) ||
        (sp->bias_v && sp->bias_v_heads != 1 && sp->bias_v_heads != sh->h_kv))
        return CORE_ESHAPE;
    if ((sp->params.alibi && sp->params.alibi_slopes &&
         !finite_array(sp->params.alibi_slopes, sh->h)) ||
        (sp->params.sink_logits && !finite_array(sp->params.sink_logits, sh->h)))
        return CORE_ENONFINITE;
    /* biases come validated from the api, but also from state files */
    enum attn_dtype t = sp->params.dtype;
    if (!finite_bias(t, sp->bias_q, sp->bias_q_heads, sh->d_k) ||
        !finite_bias(t, sp->bias_k, sp->bias_k_heads, sh->d_k) ||
        !finite_bias(t, sp->bias_v, sp->bias_v_heads, sh->d_v))
        return CORE_ENONFINITE;
    const struct attn_window *w = &sp->window;
    if (w->on && (w->left < 0 || w->right >= 0 || w->sinks < 0))
        return CORE_EINVAL;
    struct attn_request r = {.shape = *sh, .params = sp->params,
                             .attn_bias_heads = 1, .mask_heads = 1,
                             .outputs = ATTN_OUT_ALL, .window = *w};
    r.shape.n = 1;
    r.shape.L = 1;
    return attn_check(&r);
}

/* Free s and what it owns, but not its mutex (which a half-built session
 * never initialised). */
static void free_parts(struct sess *s)
{
    kv_free(s->kv);
    free(s->bias_q);
    free(s->bias_k);
    free(s->bias_v);
    free(s->slopes);
    free(s->sinks);
    free(s->idem);
    free(s);
}

struct sess *sess_new_from_spec(const struct sess_spec *spec,
                                enum core_status *err)
{
    *err = check_spec(spec);
    if (*err != CORE_OK)
        return NULL;
    *err = CORE_ENOMEM;
    struct sess *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    const struct attn_shape *sh = &spec->shape;
    size_t es = attn_dtype_size(spec->params.dtype);
    bool ok = true;
    s->spec = *spec;
    s->bias_q = dup_array(spec->bias_q, spec->bias_q_heads * sh->d_k, es, &ok);
    s->bias_k = dup_array(spec->bias_k, spec->bias_k_heads * sh->d_k, es, &ok);
    s->bias_v = dup_array(spec->bias_v, spec->bias_v_heads * sh->d_v, es, &ok);
    if (spec->params.alibi)
        s->slopes = dup_array(spec->params.alibi_slopes, sh->h,
                              sizeof(double), &ok);
    s->spec.bias_q = s->bias_q;
    s->spec.bias_k = s->bias_k;
    s->spec.bias_v = s->bias_v;
    s->spec.bias_q_heads = s->bias_q ? spec->bias_q_heads : 0;
    s->spec.bias_k_heads = s->bias_k ? spec->bias_k_heads : 0;
    s->spec.bias_v_heads = s->bias_v ? spec->bias_v_heads : 0;
    s->spec.params.alibi_slopes = s->slopes;
    if (spec->params.softmax == ATTN_SOFTMAX_SINK)
        s->sinks = dup_array(spec->params.sink_logits, sh->h, sizeof(double), &ok);
    s->spec.params.sink_logits = s->sinks;
    s->spec.shape.n = 0;
    s->spec.shape.L = 0;
    s->kv = kv_new_store(spec->params.dtype, spec->kv_store, sh->h_kv, sh->d_k, sh->d_v);
    if (!ok || !s->kv || pthread_mutex_init(&s->mu, NULL) != 0) {
        free_parts(s);
        return NULL;
    }
    *err = CORE_OK;
    return s;
}

void sess_destroy(struct sess *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free_parts(s);
}

void sess_resolve_defaults(struct sess_store *st, struct sess *s)
{
    if (s->spec.max_tokens == 0)
        s->spec.max_tokens = st->cfg.default_max_tokens
                                 ? st->cfg.default_max_tokens : SIZE_MAX;
    if (!(s->spec.ttl_s > 0))
        s->spec.ttl_s = st->cfg.default_ttl_s > 0 ? st->cfg.default_ttl_s : 0;
}
