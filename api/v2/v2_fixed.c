/*
 * api/v2/v2_fixed.c — what a later request of an Open Inference Protocol v2
 * sequence may say about the settings its sequence_start fixed. Triton and
 * KServe clients send the same parameters with every request, so a later
 * request may repeat any of them: they are read as a start reads them
 * (api/v2/v2_infer.c, api/v2/v2_model.c) and compared with the session's spec
 * by
 * what they mean (a scale equal to the default is the default; one
 * sink_logit equal to every head's is those heads'; a bias that is absent
 * is zero). One that differs is refused (400 invalid_field) at its
 * parameter or input, with the sequence's value in the message.
 *
 * Fixed at sequence_start: softmax, sink_logit and the input sink_logits,
 * scale, alibi, softcap, every rope_*, kv_dtype, the inputs bias_q, bias_k
 * and bias_v, and the window of a rolling sequence (one started with
 * window_left: window_left, window_right, window_sinks). A sequence that
 * does not roll takes a window per request, as a /v1 session does.
 */
#include "api/v2/v2_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/codec/write.h"
#include "core/rope.h"

/* 400 at /parameters/<name> (or at path, when given): "<name> is fixed at
 * sequence_start: " and the rest. */
__attribute__((format(printf, 4, 5)))
static bool fixed_fail(struct api_call *c, const char *path, const char *name,
                       const char *fmt, ...)
{
    char p[API_PATH_MAX], rest[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    if (!path)
        path = api_pointer_key(p, sizeof p, "/parameters", name);
    api_fail(c, API_ERR_INVALID_FIELD, path, "%s is fixed at sequence_start: %s (repeat "
             "that value or leave it out)", name, rest);
    return false;
}

/* Shortest text of x. */
static const char *num(char *out, double x)
{
    out[api_dtoa_f64(out, x)] = '\0';
    return out;
}

/* ---- softmax, sink logits, scale, alibi, softcap --------------------------- */

static double sink_of(const struct attn_params *p, size_t i)
{
    return p->sink_logits ? p->sink_logits[i] : p->sink_logit;
}

static double slope_of(const struct attn_params *p, size_t i, size_t h)
{
    return p->alibi_slopes ? p->alibi_slopes[i] : attn_alibi_slope(i, h);
}

/* "[a,b,...]" of up to 8 per-head values of f. */
static const char *heads_text(char *out, size_t size, const struct attn_params *p, size_t h,
                              double (*f)(const struct attn_params *, size_t, size_t))
{
    char n[API_NUM_MAX + 1];
    size_t i, o = 0;

    o += (size_t)snprintf(out, size, "[");
    for (i = 0; i < h && i < 8 && o < size; i++)
        o += (size_t)snprintf(out + o, size - o, "%s%s", i ? "," : "", num(n, f(p, i, h)));
    if (o < size)
        snprintf(out + o, size - o, "%s]", h > 8 ? ",..." : "");
    return out;
}

static double sink_h(const struct attn_params *p, size_t i, size_t h)
{
    (void)h;
    return sink_of(p, i);
}

static bool check_softmax(struct api_call *c, const struct v2_infer *x,
                          const struct attn_params *sp, size_t h)
{
    char t[256], path[API_PATH_MAX];
    size_t i;

    if (!member(x->params, "softmax"))
        return true;
    if (x->p.softmax != sp->softmax)
        return fixed_fail(c, NULL, "softmax", "this sequence's is \"%s\"",
                          api_softmax_name(sp->softmax));
    if (sp->softmax != ATTN_SOFTMAX_SINK ||
        (!member(x->params, "sink_logit") && !x->t[V2_SINKS].present))
        return true;                /* "sink" alone: the sequence's logits */
    for (i = 0; i < h; i++)
        if (sink_of(&x->p, i) != sink_of(sp, i))
            break;
    if (i == h)
        return true;
    if (x->t[V2_SINKS].present) {
        api_pointer_index(path, sizeof path, "/inputs", x->t[V2_SINKS].index);
        return fixed_fail(c, path, "sink_logits", "this sequence's are %s",
                          heads_text(t, sizeof t, sp, h, sink_h));
    }
    return fixed_fail(c, NULL, "sink_logit", sp->sink_logits ? "this sequence's are %s"
                      : "this sequence's is %s", sp->sink_logits
                      ? heads_text(t, sizeof t, sp, h, sink_h) : num(t, sp->sink_logit));
}

static bool check_scalars(struct api_call *c, const struct v2_infer *x,
                          const struct attn_params *sp, size_t h)
{
    char t[256];
    size_t i;

    if (member(x->params, "scale") && x->p.scale != sp->scale)
        return fixed_fail(c, NULL, "scale", "this sequence's is %s", num(t, sp->scale));
    if (member(x->params, "softcap") && x->p.softcap != sp->softcap)
        return sp->softcap > 0
                   ? fixed_fail(c, NULL, "softcap", "this sequence's is %s", num(t, sp->softcap))
                   : fixed_fail(c, NULL, "softcap", "this sequence has none");
    if (!member(x->params, "alibi"))
        return true;
    for (i = 0; x->p.alibi && sp->alibi && i < h; i++)
        if (slope_of(&x->p, i, h) != slope_of(sp, i, h))
            break;
    if (x->p.alibi == sp->alibi && (!sp->alibi || i == h))
        return true;
    if (!sp->alibi)
        return fixed_fail(c, NULL, "alibi", "this sequence has none");
    return fixed_fail(c, NULL, "alibi", "this sequence's slopes are %s",
                      heads_text(t, sizeof t, sp, h, slope_of));
}

/* ---- RoPE ---------------------------------------------------------------- */

static const char *const rope_params[] = {
    "rope_base", "rope_pairs", "rope_dims", "rope_scaling", "rope_factor",
    "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_position",
    "rope_beta_fast", "rope_beta_slow", "rope_attention_factor", "rope_truncate", NULL};

static size_t dims_of(const struct attn_params *p, size_t d_k)
{
    return p->rope_dims == ATTN_ROPE_DIMS_ZERO ? 0 : p->rope_dims ? p->rope_dims : d_k;
}

/* The parameter of the first RoPE setting a and b differ in, its value in
 * b as text into t; NULL when they mean the same. */
static const char *rope_diff(const struct attn_params *a, const struct attn_params *b,
                             size_t d_k, char *t, size_t size)
{
    static const char *const types[] = {"none", "linear", "ntk", "llama3", "yarn"};
    const struct attn_rope_scaling *sa = &a->rope_scaling, *sb = &b->rope_scaling;
    enum attn_rope_scaling_type ty = sb->type;
    const struct { const char *name; double va, vb; bool used; } v[] = {
        {"rope_factor", sa->factor, sb->factor, ty != ATTN_ROPE_SCALING_NONE},
        {"rope_low_freq_factor", sa->low_freq_factor, sb->low_freq_factor,
         ty == ATTN_ROPE_SCALING_LLAMA3},
        {"rope_high_freq_factor", sa->high_freq_factor, sb->high_freq_factor,
         ty == ATTN_ROPE_SCALING_LLAMA3},
        {"rope_original_max_position", sa->original_max_position,
         sb->original_max_position, ty == ATTN_ROPE_SCALING_LLAMA3 || ty == ATTN_ROPE_SCALING_YARN},
        {"rope_beta_fast", sa->beta_fast, sb->beta_fast, ty == ATTN_ROPE_SCALING_YARN},
        {"rope_beta_slow", sa->beta_slow, sb->beta_slow, ty == ATTN_ROPE_SCALING_YARN},
        {"rope_attention_factor", attn_rope_mscale(a), attn_rope_mscale(b),
         ty == ATTN_ROPE_SCALING_YARN},
    };
    char n[API_NUM_MAX + 1];

    if (a->rope_base != b->rope_base) {
        snprintf(t, size, "%s", num(n, b->rope_base));
        return "rope_base";
    }
    if (a->rope_pairs != b->rope_pairs) {
        snprintf(t, size, "\"%s\"", b->rope_pairs == ATTN_ROPE_HALF ? "half" : "interleaved");
        return "rope_pairs";
    }
    if (dims_of(a, d_k) != dims_of(b, d_k)) {
        snprintf(t, size, "%zu", dims_of(b, d_k));
        return "rope_dims";
    }
    if (sa->type != sb->type) {
        snprintf(t, size, "\"%s\"", types[sb->type]);
        return "rope_scaling";
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].used && v[i].va != v[i].vb) {
            snprintf(t, size, "%s", num(n, v[i].vb));
            return v[i].name;
        }
    if (ty == ATTN_ROPE_SCALING_YARN && sa->no_truncate != sb->no_truncate) {
        snprintf(t, size, "%s", sb->no_truncate ? "false" : "true");
        return "rope_truncate";
    }
    return NULL;
}

static bool check_rope(struct api_call *c, const struct v2_infer *x,
                       const struct attn_params *sp, size_t d_k)
{
    const char *given = NULL, *name;
    char t[64];

    for (int i = 0; rope_params[i] && !given; i++)
        if (member(x->params, rope_params[i]))
            given = rope_params[i];
    if (!given)
        return true;
    /* rope_dims 0 rotates nothing: RoPE off, as a sequence without it */
    if (!sp->rope)
        return !x->p.rope || fixed_fail(c, NULL, given, "this sequence has no RoPE");
    if (!x->p.rope)
        return fixed_fail(c, NULL, "rope_dims", "this sequence's is %zu", dims_of(sp, d_k));
    if (!(name = rope_diff(&x->p, sp, d_k, t, sizeof t)))
        return true;
    return fixed_fail(c, NULL, name, "this sequence's is %s", t);
}

/* ---- kv_dtype, window, biases ---------------------------------------------- */

static bool check_window(struct api_call *c, const struct v2_infer *x,
                         const struct sess_spec *sp)
{
    const struct attn_window *w = &x->window, *s = &sp->window;
    char t[96];

    if (!s->on || !w->on)       /* a sequence that does not roll: per request */
        return true;
    snprintf(t, sizeof t, "window_left %lld, window_sinks %lld", (long long)s->left,
             (long long)s->sinks);
    /* each one sent must be the sequence's (its window is the pass's) */
    if (w->right >= 0)
        return fixed_fail(c, NULL, "window_right", "this sequence rolls with %s, causal", t);
    if (member(x->params, "window_left") && w->left != s->left)
        return fixed_fail(c, NULL, "window_left", "this sequence rolls with %s", t);
    if (member(x->params, "window_sinks") && w->sinks != s->sinks)
        return fixed_fail(c, NULL, "window_sinks", "this sequence rolls with %s", t);
    return true;
}

/* Row i of a bias [heads][d] of dt as doubles equal to row i of b ([bh][d],
 * a missing one zero); heads, bh: 1 (every row) or per. */
static bool bias_equal(const void *a, size_t ah, const void *b, size_t bh, size_t per,
                       size_t d, enum attn_dtype dt)
{
    for (size_t i = 0; i < per; i++)
        for (size_t j = 0; j < d; j++) {
            size_t ia = (ah == 1 ? 0 : i) * d + j, ib = (bh == 1 ? 0 : i) * d + j;
            double va = !a ? 0 : dt == ATTN_F32 ? ((const float *)a)[ia]
                                                : ((const double *)a)[ia];
            double vb = !b ? 0 : dt == ATTN_F32 ? ((const float *)b)[ib]
                                                : ((const double *)b)[ib];
            if (va != vb)
                return false;
        }
    return true;
}

static bool check_biases(struct api_call *c, const struct v2_infer *x,
                         const struct attn_inputs *in, const struct sess_spec *sp)
{
    const struct attn_shape *sh = &sp->shape;
    const struct {
        enum v2_slot slot;
        const void *mine, *theirs;
        size_t mh, th, per, d;
    } b[3] = {
        {V2_BQ, in->bias_q, sp->bias_q, in->bias_q_heads, sp->bias_q_heads, sh->h, sh->d_k},
        {V2_BK, in->bias_k, sp->bias_k, in->bias_k_heads, sp->bias_k_heads, sh->h_kv, sh->d_k},
        {V2_BV, in->bias_v, sp->bias_v, in->bias_v_heads, sp->bias_v_heads, sh->h_kv, sh->d_v},
    };
    char path[API_PATH_MAX];

    for (int i = 0; i < 3; i++) {
        if (!x->t[b[i].slot].present ||
            bias_equal(b[i].mine, b[i].mh, b[i].theirs, b[i].th, b[i].per, b[i].d, x->dt))
            continue;
        api_pointer_index(path, sizeof path, "/inputs", x->t[b[i].slot].index);
        return fixed_fail(c, path, api_v2_slot_names[b[i].slot], "%s",
                          b[i].theirs ? "this sequence has another" : "this sequence has none");
    }
    return true;
}

bool api_v2_check_fixed(struct api_call *c, const struct v2_infer *x,
                        const struct attn_inputs *in)
{
    const struct sess_spec *sp = sess_spec(x->sess);

    if (member(x->params, "kv_dtype") && x->kv_store != sp->kv_store)
        return fixed_fail(c, NULL, "kv_dtype", "this sequence's is \"%s\"",
                          kv_store_name(sp->kv_store, sp->params.dtype));
    return check_softmax(c, x, &sp->params, sp->shape.h) &&
           check_scalars(c, x, &sp->params, sp->shape.h) &&
           check_rope(c, x, &sp->params, sp->shape.d_k) &&
           check_window(c, x, sp) &&
           check_biases(c, x, in, sp);
}
