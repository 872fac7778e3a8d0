/*
 * api/v2/v2_infer.c — one Open Inference Protocol v2 inference request: split
 * the body into its JSON header and binary part, read the sequence
 * parameters (and hold the sequence's session), the inputs
 * (api/v2/v2_tensor.c), their shapes, the options from `parameters` and the
 * outputs asked for, then run the attention pass (stateless, or against a
 * session's cache); api/v2/v2_respond.c writes the response.
 */
#include "api/v2/v2_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/read.h"
#include "api/sessions_roll.h"
#include "api/spare.h"
#include "api/codec/textat.h"
#include "api/codec/write.h"
#include "core/attn_blame.h"

static void infer_free(struct v2_infer *x)
{
    size_t i;

    for (i = 0; i < V2_NSLOT; i++)
        if (!x->t[i].borrowed)
            api_spare_free(x->t[i].data);
    free(x->slopes);
    api_extras_free(&x->ext);
    free(x->sinks);
    api_seqs_free(&x->seqs);
    json_decref(x->hdr);
}

/* params[key] into *out (false when absent); false after a 400 at
 * prefix/key when it is not a boolean. */
static bool param_bool(struct api_call *c, const json_t *params, const char *prefix,
                       const char *key, bool *out)
{
    const json_t *v = member(params, key);
    char path[API_PATH_MAX];

    *out = false;
    if (!v)
        return true;
    if (!json_is_boolean(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                 prefix, key), "%s must be true or false", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* Header lookups for the JSON part of a binary request: whatever the body's
 * Content-Type, that part is JSON. */
static const char *json_part_header(void *arg, const char *name)
{
    const struct api_request *r = arg;

    if (strcasecmp(name, "Content-Type") == 0)
        return "application/json";
    return r->header ? r->header(r->header_arg, name) : NULL;
}

/* Split the body into the JSON header and the binary part, and parse the
 * header with the shared parser (duplicate keys, depth, syntax errors). */
static bool split_body(struct api_call *c, struct v2_infer *x)
{
    const struct api_request *r = c->req;
    const char *hl = api_header(c, V2_HDR_LEN);
    struct api_request jr = *r;
    struct api_call jc = *c;
    size_t hlen = r->body_len;

    if (hl) {
        char *end;
        unsigned long long v;

        while (*hl == ' ' || *hl == '\t')     /* the field's optional whitespace */
            hl++;
        errno = 0;
        v = strtoull(hl, &end, 10);
        while (*end == ' ' || *end == '\t')
            end++;
        /* then 1*DIGIT, as Content-Length: strtoull alone takes "+5" */
        if (errno || !isdigit((unsigned char)hl[0]) || *end != '\0' ||
            v > r->body_len || v == 0) {
            api_fail(c, API_ERR_INVALID_FIELD, NULL, "%s must be a length between "
                     "1 and the body's %zu bytes", V2_HDR_LEN, r->body_len);
            return false;
        }
        hlen = (size_t)v;
    }
    jr.body_len = hlen;
    jr.header = json_part_header;
    jr.header_arg = (void *)r;
    jc.req = &jr;
    x->hdr = api_parse_body(&jc);
    c->answered = jc.answered;
    if (!x->hdr)
        return false;
    /* body may be NULL when empty: no pointer arithmetic on it then */
    x->bin = hlen < r->body_len ? (const unsigned char *)r->body + hlen : NULL;
    x->bin_len = r->body_len - hlen;
    return true;
}

/* What sequence_id may be (Triton's: a uint64 or a string). */
#define SEQ_ID_RULE "sequence_id must be an integer 1..18446744073709551615 " \
                    "(uint64; 0 is none) or a string of 1 to 63 bytes (an empty one is none)"

/* The digits [s, e) as a uint64 -> *out; false unless they are all digits
 * with a value of at most 2^64-1. */
static bool u64_of_digits(const char *s, const char *e, uint64_t *out)
{
    uint64_t v = 0;

    if (s == e)
        return false;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Request parameter key, v, as a uint64 (Triton's sequence_id and
 * priority) -> *out; false when it is none. jansson holds integers up to
 * 2^63-1; a literal beyond is read as a real (api/body.c), so its digits
 * are read again from the JSON header's text: every value up to 2^64-1 is
 * exact, none is rounded. */
static bool param_u64(const struct api_call *c, const struct v2_infer *x, const json_t *v,
                      const char *key, uint64_t *out)
{
    char path[API_PATH_MAX];
    const char *vs, *ve;

    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    return json_is_real(v) &&
           api_text_at(c->req->body, c->req->body_len - x->bin_len, c->req->early,
                       api_pointer_key(path, sizeof path, "/parameters", key), &vs, &ve) &&
           u64_of_digits(vs, ve, out);
}

/* An integer sequence_id -> x->seq_num (0 for none or a string). */
static bool read_seq_num(struct api_call *c, struct v2_infer *x, const json_t *id)
{
    x->seq_num = 0;
    if (!param_u64(c, x, id, "sequence_id", &x->seq_num)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/sequence_id", SEQ_ID_RULE);
        return false;
    }
    return true;
}

/* Sequence parameters: sequence_id (integer 1..2^64-1 or a string of 1 to
 * 63 bytes; 0 and "" are none), sequence_start, sequence_end. */
static bool read_sequence(struct api_call *c, struct v2_infer *x)
{
    const json_t *id = member(x->params, "sequence_id");

    if (!param_bool(c, x->params, "/parameters", "sequence_start", &x->seq_start) ||
        !param_bool(c, x->params, "/parameters", "sequence_end", &x->seq_end))
        return false;
    if (json_is_number(id) && !read_seq_num(c, x, id))
        return false;
    if (x->seq_num)
        api_v2_seq_name_num(x->seq_num, x->seq_name);
    else if (json_is_string(id) && json_string_length(id) == 0)
        x->seq_name[0] = '\0';             /* "" is no sequence, as 0 is (Triton) */
    else if (id && !json_is_number(id) &&
             ((json_is_string(id) && json_string_length(id) >= 64) ||
              !api_v2_seq_name(id, x->seq_name))) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/sequence_id", SEQ_ID_RULE);
        return false;
    }
    x->seq_id = id;
    x->seq = x->seq_name[0] != '\0';
    if (!x->seq && (x->seq_start || x->seq_end)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/sequence_id",
                 "sequence_start and sequence_end need a sequence_id");
        return false;
    }
    if (x->seq && !c->ctx->store) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "sessions are not available");
        return false;
    }
    return true;
}

/* Find and hold the session of a continuing sequence: the one named
 * after its id, or else the session a string id names directly. */
static bool sequence_acquire(struct api_call *c, struct v2_infer *x)
{
    enum core_status st = CORE_ENOTFOUND;

    if (sess_named_id(c->ctx->store, x->seq_name, x->sid))
        st = sess_acquire(c->ctx->store, x->sid, &x->sess);
    if (st == CORE_ENOTFOUND && json_is_string(x->seq_id)) {
        snprintf(x->sid, sizeof x->sid, "%s", json_string_value(x->seq_id));
        st = sess_acquire(c->ctx->store, x->sid, &x->sess);
    }
    if (st != CORE_OK) {
        x->sess = NULL;
        api_fail(c, API_ERR_SESSION_NOT_FOUND, "/parameters/sequence_id",
                 "no open sequence with this sequence_id (ended, expired or "
                 "never started); start it with sequence_start");
        return false;
    }
    x->dt = sess_spec(x->sess)->params.dtype;
    x->half = (enum api_half)sess_spec(x->sess)->half;
    c->half = x->half;
    return true;
}

/* ---- shapes -------------------------------------------------------------- */

static bool shape_fail(struct api_call *c, const struct v2_tensor *t,
                       const char *what)
{
    char path[API_PATH_MAX], p2[API_PATH_MAX];

    api_pointer_index(path, sizeof path, "/inputs", t->index);
    api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(p2, sizeof p2, path, "shape"),
             "%s", what);
    return false;
}

/* heads, rows, cols of a rank-2 ([rows, cols]), rank-3 or rank-4
 * ([B, heads, rows, cols]) tensor. */
static void hrc(const struct v2_tensor *t, size_t *h, size_t *r, size_t *cols)
{
    *h = t->rank >= 3 ? t->shape[t->rank - 3] : 1;
    *r = t->shape[t->rank - 2];
    *cols = t->shape[t->rank - 1];
}

/* The shapes a sequence's q may have, at its start and after. */
#define SEQ_Q_SHAPE "a sequence's q must be [n,d_k] or [h,n,d_k]"

/* q [h,n,d_k] and k, v [h_kv,L,d] -> s (stateless, or a sequence's start). */
static bool shape_stateless(struct api_call *c, struct v2_infer *x,
                            struct attn_shape *s)
{
    const struct v2_tensor *q = &x->t[V2_Q], *k = &x->t[V2_K], *v = &x->t[V2_V];
    size_t hk, dk, hv, Lv;

    if (!k->present || !v->present) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "inputs k and v are required%s",
                 x->seq ? " at sequence_start" : "");
        return false;
    }
    if (q->rank < 2)
        return shape_fail(c, q, "q must be [n,d_k], [h,n,d_k] or [B,h,n,d_k]");
    if (x->seq && q->rank > 3)          /* a session holds one batch element */
        return shape_fail(c, q, SEQ_Q_SHAPE);
    if (k->rank != q->rank)
        return shape_fail(c, k, "k must have the rank of q");
    if (v->rank != q->rank)
        return shape_fail(c, v, "v must have the rank of q");
    s->B = q->rank == 4 ? q->shape[0] : 1;
    if (q->rank == 4 && k->shape[0] != s->B)
        return shape_fail(c, k, "k must have q's batch size");
    if (q->rank == 4 && v->shape[0] != s->B)
        return shape_fail(c, v, "v must have q's batch size");
    hrc(q, &s->h, &s->n, &s->d_k);
    hrc(k, &s->h_kv, &s->L, &dk);
    hrc(v, &hv, &Lv, &s->d_v);
    hk = s->h_kv;
    if (dk != s->d_k)
        return shape_fail(c, k, "k's last dimension must equal q's (d_k)");
    if (hv != hk || Lv != s->L)
        return shape_fail(c, v, "v must have k's heads and rows");
    if (s->h % s->h_kv != 0)
        return shape_fail(c, k, "q's heads must be a multiple of k's heads");
    return true;
}

/* q [h,n,d_k], optional k, v [h_kv,m,d] against a held session -> s, m;
 * s->L is the rows held after appending (a rolling session's, not its
 * length). */
static bool shape_session(struct api_call *c, struct v2_infer *x,
                          struct attn_shape *s, size_t *m)
{
    const struct sess_spec *sp = sess_spec(x->sess);
    const struct v2_tensor *q = &x->t[V2_Q], *k = &x->t[V2_K], *v = &x->t[V2_V];
    size_t h, n, d, a, b, cc;

    *s = sp->shape;
    *m = 0;
    if (q->rank < 2 || q->rank > 3)
        return shape_fail(c, q, SEQ_Q_SHAPE);
    hrc(q, &h, &n, &d);
    if (h != sp->shape.h || d != sp->shape.d_k)
        return shape_fail(c, q, "q must match the sequence's heads and d_k");
    s->n = n;
    if (k->present != v->present) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "k and v go together");
        return false;
    }
    if (k->present) {
        if (k->rank != q->rank)
            return shape_fail(c, k, "k must have the rank of q");
        if (v->rank != q->rank)
            return shape_fail(c, v, "v must have the rank of q");
        hrc(k, &a, m, &b);
        if (a != sp->shape.h_kv || b != sp->shape.d_k)
            return shape_fail(c, k, "k must match the sequence's kv heads and d_k");
        hrc(v, &a, &n, &cc);
        if (a != sp->shape.h_kv || n != *m || cc != sp->shape.d_v)
            return shape_fail(c, v, "v must match k's rows and the sequence's d_v");
    }
    if (!core_add(kv_held(sess_cache(x->sess)), *m, &s->L)) {   /* as sess_request */
        api_fail(c, API_ERR_LIMIT_EXCEEDED, NULL, NULL);
        return false;
    }
    return true;
}

/* Bias vector [d] or [heads,d], heads 1 or `per`; -> its head count. */
static bool bias_heads(struct api_call *c, const struct v2_tensor *t,
                       size_t d, size_t per, size_t *heads)
{
    *heads = 0;
    if (!t->present)
        return true;
    if (t->rank == 1 && t->shape[0] == d) {
        *heads = 1;
        return true;
    }
    if (t->rank == 2 && t->shape[1] == d &&
        (t->shape[0] == 1 || t->shape[0] == per)) {
        *heads = t->shape[0];
        return true;
    }
    return shape_fail(c, t, "a bias is [d] or [heads,d] with the width of "
                      "its matrix");
}

/* attn_bias / mask: [n,L], [1|h,n,L] or [1|B,1|h,n,L] (the design's
 * broadcasting; a [B,1,n,L], PyTorch's per-batch mask, is copied to every
 * head). */
static bool score_heads(struct api_call *c, struct v2_infer *x, struct v2_tensor *t,
                        const struct attn_shape *s, size_t *heads)
{
    size_t B = s->B ? s->B : 1, b;

    *heads = 0;
    if (!t->present)
        return true;
    if (t->rank >= 2 && t->shape[t->rank - 2] == s->n &&
        t->shape[t->rank - 1] == s->L) {
        *heads = t->rank >= 3 ? t->shape[t->rank - 3] : 1;
        b = t->rank == 4 ? t->shape[0] : 1;
        if (b == B && B > 1 && *heads == 1 && s->h > 1) {
            char path[API_PATH_MAX];
            size_t esz = t == &x->t[V2_MASK] ? 1 : attn_dtype_size(x->dt);
            api_pointer_index(path, sizeof path, "/inputs", t->index);
            if (!api_widen_heads(c, path, B, s->h, s->n * s->L, esz, &x->budget, &t->data,
                                 &t->count))
                return false;
            t->shape[1] = s->h;
            *heads = s->h;
        }
        if (b == B && B > 1 && *heads == s->h) {
            *heads = B * s->h;
            return true;
        }
        if (b == 1 && (*heads == 1 || *heads == s->h))
            return true;
    }
    return shape_fail(c, t, "attn_bias and mask are [n,L], [h,n,L] or [B,h,n,L] "
                      "with L the number of keys");
}

/* ---- options ------------------------------------------------------------- */

static const char *const v2_params_allowed[] = {
    "softmax", "sink_logit", "causal", "scale", "alibi", "rope_base",
    "rope_pairs", "empty_rows", "sequence_id", "sequence_start",
    "sequence_end", "binary_data_output", "timeout_ms", "heads", "weights_top_k",
    "softcap", "window_left", "window_right", "window_sinks", "rope_dims",
    "rope_scaling", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
    "rope_original_max_position", "rope_beta_fast", "rope_beta_slow",
    "rope_attention_factor", "rope_truncate", "kv_dtype", "timeout", "priority",
    "content_type", NULL,
};

/* Triton's reserved "priority": a uint64 (or an integral real below 2^64
 * such as 2.0 or 1e19), taken and left unused (attnd has one level: small
 * requests go first whatever it says). */
static bool read_priority(struct api_call *c, const struct v2_infer *x, const json_t *v)
{
    uint64_t level;
    double d = json_real_value(v);

    if (!v || param_u64(c, x, v, "priority", &level) ||
        (json_is_real(v) && d >= 0 && d < 0x1p64 && d == floor(d)))
        return true;
    api_fail(c, API_ERR_INVALID_FIELD, "/parameters/priority",
             "expected an integer in 0..18446744073709551615");
    return false;
}

/* Per-pass options and the session-fixed softmax, scale and alibi (read
 * on every request: a sequence's later ones are compared with its start). */
static bool read_options(struct api_call *c, struct v2_infer *x,
                         const struct attn_shape *s)
{
    json_t *empty = NULL;
    const json_t *params = x->params;
    const char *sm = json_string_value(member(params, "softmax"));
    bool sink = sm && strcmp(sm, "sink") == 0 && !member(params, "sink_logit");
    /* a going sequence's "sink" repeated bare: its own sink logits stand
     * (api/v2/v2_fixed.c compares only those sent) */
    bool ok, sinks = sink && (x->t[V2_SINKS].present || (x->sess && !x->seq_start));

    if (!api_read_causal(c, member(params, "causal"), "/parameters/causal",
                         &x->causal) ||
        !api_read_empty_rows(c, member(params, "empty_rows"),
                             "/parameters/empty_rows", &x->empty_rows) ||
        !api_read_timeout(c, member(params, "timeout_ms"), "/parameters/timeout_ms") ||
        !api_read_timeout_us(c, member(params, "timeout"), "/parameters/timeout") ||
        !read_priority(c, x, member(params, "priority")))
        return false;
    x->p.dtype = x->dt;
    /* the input sink_logits stands for the parameter (api/v2/v2_model.c) */
    if (!params || sinks)
        params = empty = params ? json_copy((json_t *)params) : json_object();
    if (sinks && empty)
        json_object_set_new(empty, "sink_logit", json_real(0));
    ok = api_read_softmax(c, params, "/parameters", &x->p.softmax,
                          &x->p.sink_logit) &&
         api_read_scale(c, member(params, "scale"), "/parameters/scale",
                        &x->p.scale, &x->scale_given) &&
         api_read_alibi(c, member(params, "alibi"), "/parameters/alibi", s->h,
                        &x->p.alibi, &x->slopes);
    json_decref(empty);
    if (ok && !x->scale_given)
        x->p.scale = attn_default_scale(s->d_k);
    x->p.alibi_slopes = x->slopes;
    return ok;
}

/* "outputs": [{"name", "parameters":{"binary_data":bool}}], default all. */
static bool read_outputs(struct api_call *c, struct v2_infer *x,
                         const json_t *outs)
{
    static const char *const allowed[] = {"name", "parameters", NULL};
    static const char *const pallowed[] = {"binary_data", NULL};
    bool all_binary;
    size_t i;
    int k;

    if (!param_bool(c, x->params, "/parameters", "binary_data_output", &all_binary))
        return false;
    /* none asked, or an empty list (as Triton and KServe read it): every
     * output; with weights_top_k, top-k replaces the weights */
    if (!outs || (json_is_array(outs) && json_array_size(outs) == 0)) {
        x->outputs = x->ext.top_k ? ATTN_OUT_SCORES | ATTN_OUT_OUTPUT | V2_BIT(V2_TOPK_IDX) |
                                        V2_BIT(V2_TOPK_VAL)
                                  : ATTN_OUT_ALL;
        x->binary = all_binary ? x->outputs : 0;
        for (k = 0; k < V2_NOUT; k++)
            if (x->outputs & V2_BIT(k))
                x->order[x->n_order++] = k;
        return true;
    }
    if (!json_is_array(outs)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs", "outputs must be an array");
        return false;
    }
    for (i = 0; i < json_array_size(outs); i++) {
        const json_t *o = json_array_get(outs, i), *p;
        const char *name = json_string_value(member(o, "name"));
        char path[API_PATH_MAX], pp[API_PATH_MAX];
        bool bin = all_binary;

        api_pointer_index(path, sizeof path, "/outputs", i);
        if (!json_is_object(o)) {
            api_fail(c, API_ERR_INVALID_FIELD, path, "an output must be an object");
            return false;
        }
        if (!api_check_fields(c, o, path, allowed))
            return false;
        for (k = 0; k < V2_NOUT && !(name && strcmp(name, api_v2_out_names[k]) == 0); k++)
            ;
        if (k == V2_NOUT || (x->outputs & (1u << k))) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(pp, sizeof pp, path,
                     "name"), k == V2_NOUT ? "unknown output; the outputs are "
                     "scores, weights, output, qk, lse, entropy, max_weight, argmax, mass, "
                     "top_k_indices, top_k_values, tokens_q, tokens_k" : "output named twice");
            return false;
        }
        p = member(o, "parameters");
        api_pointer_key(pp, sizeof pp, path, "parameters");
        if (p && !json_is_object(p)) {
            api_fail(c, API_ERR_INVALID_FIELD, pp, "parameters must be an object");
            return false;
        }
        if (p && !api_check_fields(c, p, pp, pallowed))
            return false;
        if (member(p, "binary_data") && !param_bool(c, p, pp, "binary_data", &bin))
            return false;
        x->outputs |= 1u << k;
        x->order[x->n_order++] = k;
        if (bin && k < V2_TOK_Q)        /* labels travel as JSON strings */
            x->binary |= 1u << k;
    }
    return true;
}

/* ---- compute and answer -------------------------------------------------- */

/* q, k, v kept 2-byte widened to float32 (api_widen_2byte) unless the
 * pass is the output-only key-blocked one, the only one that reads them in
 * place (the extras and the sessions read float32), as /v1/attention
 * decides; -> what in's q, k, v then hold. */
static bool inputs_for_pass(struct v2_infer *x, const struct attn_request *r,
                            struct attn_inputs *in, struct attn_elems *e)
{
    struct v2_tensor *t = x->t;
    int i;

    if (x->sess || api_extras_compute(&x->ext) || !attn_output_blocked(r))
        for (i = V2_Q; i <= V2_V; i++)
            if (!api_widen_2byte(&t[i].data, &t[i].half, t[i].count))
                return false;
    in->q = t[V2_Q].data;
    in->k = t[V2_K].data;
    in->v = t[V2_V].data;
    e->q = api_half_elem(t[V2_Q].half);
    e->k = api_half_elem(t[V2_K].half);
    e->v = api_half_elem(t[V2_V].half);
    return true;
}

/* sess_query.accept of a sequence's pass: api_v2_results_ok. */
struct v2_accept {
    struct api_call *c;
    const struct v2_infer *x;
    const struct attn_request *r;
};

static bool v2_accept(void *arg, struct attn_result *out, struct attn_extras_out *xo)
{
    (void)xo;                           /* x->ext holds it */
    struct v2_accept *a = arg;
    return api_v2_results_ok(a->c, a->x, a->r, out);
}

/* 422 non_finite at the input (/inputs/<i>) a float32/float64 pass
 * overflowed on; the message names its row. A sequence's: b as its store
 * found it (a row the sequence held already: path ""; its ALiBi, fixed at
 * its start, too, but on the start's request itself). */
static void fail_overflow(struct api_call *c, const struct v2_infer *x,
                          const struct attn_request *r, const struct attn_inputs *in,
                          size_t m, const struct attn_blame *b)
{
    static const enum v2_slot slot[4] = {V2_Q, V2_K, V2_V, V2_AB};
    char p[4][API_PATH_MAX];
    struct api_blame_at at = {{p[0], p[1], p[2], p[3]}, {0}, "/parameters/alibi"};
    for (int i = 0; i < 4; i++)
        api_pointer_index(p[i], sizeof p[i], "/inputs", x->t[slot[i]].index);
    if (x->sess && !x->seq_start)
        at.alibi = NULL;
    if (x->sess)
        api_session_fail_overflow(c, x->sess, r, m, b, &at);
    else
        api_fail_overflow(c, r, in, x->ext.heads, x->ext.nh, &at);
}

/* 422 empty_row at the query input (/inputs/<i>), the message naming the
 * row with no key and why: e as found by a sequence's pass, or (NULL)
 * looked for in the stateless request r. */
static void fail_empty_row(struct api_call *c, const struct v2_infer *x,
                           const struct attn_request *r, const struct attn_blame_empty *e)
{
    char qp[API_PATH_MAX];
    api_pointer_index(qp, sizeof qp, "/inputs", x->t[V2_Q].index);
    if (e)
        api_fail_empty_blame(c, r, e, " (the sequence's rows)", qp, 0);
    else
        api_fail_empty_row(c, r, x->ext.heads, x->ext.nh, qp, 0);
}

/* Numbers limit, result buffers, the pass (stateless or session), reply. */
static void run(struct api_call *c, struct v2_infer *x, struct attn_request *r,
                struct attn_inputs *in, size_t m)
{
    struct attn_elems e;
    struct attn_result res;
    size_t numbers, cap, maxe = api_max_elements(c);
    enum core_status st;

    bool extras = api_extras_compute(&x->ext);
    if (!api_extras_numbers(r, &x->ext, &numbers) || numbers > maxe ||
        !api_v2_response_cap(r, x, &cap)) {
        if (!api_extras_fail_topk(c, r, &x->ext, maxe, "/parameters/weights_top_k"))
            api_fail(c, API_ERR_RESPONSE_TOO_LARGE, "/outputs", "the response would "
                     "hold more than %zu numbers (--max-elements); ask for fewer "
                     "outputs", maxe);
        return;
    }
    if ((st = api_extras_check_request(r)) != CORE_OK) {
        api_fail_core(c, st, NULL);
        return;
    }
    if ((extras ? !api_extras_alloc(r, &x->ext, &res) : !api_result_alloc(r, &res)) ||
        !inputs_for_pass(x, r, in, &e)) {
        api_result_free(&res);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    struct v2_accept acc = {c, x, r};
    struct attn_blame_empty empty = {0};
    struct attn_blame blame = {.input = ATTN_BLAME_NONE};
    if (x->sess) {
        struct sess_query q = {
            .q = in->q, .n = r->shape.n, .causal = r->causal,
            .empty_rows = r->empty_rows, .attn_bias = r->attn_bias,
            .attn_bias_heads = r->attn_bias_heads, .mask = r->mask,
            .mask_heads = r->mask_heads, .outputs = r->outputs,
            .window = r->window, .accept = v2_accept, .accept_arg = &acc,
            .end = x->seq_end && !x->fresh,     /* a start that ends: api_v2_seq_commit */
            .empty = &empty, .blame = &blame,
        };
        struct attn_extras xc = api_extras_core(&x->ext);
        st = sess_attend_x(c->ctx->store, x->sess, in->k, in->v, m, &q, extras ? &xc : NULL,
                           &x->ext.xo, &res, c->req->ws);
    } else if (extras) {
        struct attn_extras xc = api_extras_core(&x->ext);
        st = attn_forward_extras(r, in, NULL, &xc, &res, &x->ext.xo, c->req->ws);
    } else {
        st = attn_forward_half(r, in, &e, &res, c->req->ws);   /* 2-byte ones widened by it */
    }
    if (st == CORE_ENONFINITE && !c->answered && (x->sess || !c->half))
        fail_overflow(c, x, r, in, m, &blame);  /* a sequence's rows, or the pass */
    else if (st == CORE_EEMPTYROW)
        fail_empty_row(c, x, r, x->sess ? &empty : NULL);
    else if ((st == CORE_ECAPACITY || st == CORE_EFULL) && x->sess && !c->answered)
        api_sess_fail_append(c, st, x->sess, m, true);     /* as /v1 says it */
    else if (st != CORE_OK && !c->answered)     /* else refused by v2_accept, answered */
        api_fail_compute(c, st, r->params.dtype);
    else if (st == CORE_OK)
        api_v2_respond(c, x, r, &res, cap, x->sess != NULL);
    api_result_free(&res);
}

/* A pass against the held session: a rolling one's causal and how far
 * back the query reaches are checked as /v1 checks them, and r becomes
 * the request the session makes of it (sess_request: a rolling session's
 * causal and window replace the request's). */
static bool session_pass(struct api_call *c, struct v2_infer *x, struct attn_request *r,
                         size_t m)
{
    struct sess_query q = {
        .n = r->shape.n, .causal = r->causal, .empty_rows = r->empty_rows,
        .attn_bias = r->attn_bias, .attn_bias_heads = r->attn_bias_heads, .mask = r->mask,
        .mask_heads = r->mask_heads, .outputs = r->outputs, .window = r->window,
    };
    char qp[API_PATH_MAX];

    api_pointer_index(qp, sizeof qp, "/inputs", x->t[V2_Q].index);
    if (!api_roll_check_pass(c, x->sess, member(x->params, "causal") != NULL, r->causal,
                             r->shape.n, m, "/parameters/causal", qp))
        return false;
    if (sess_request(x->sess, &q, m, r) != CORE_OK) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "/inputs", "the cache would be too long");
        return false;
    }
    return true;
}

/* Shapes, options, the attn_request, then the pass. A later request of a
 * sequence reads the session-fixed options as a start does, to compare
 * them with the start's (api_v2_check_fixed). */
static void infer_compute(struct api_call *c, struct v2_infer *x)
{
    struct attn_request r;
    struct attn_inputs in;
    size_t m = 0;
    bool stateless_shape = !x->seq || x->seq_start;

    memset(&r, 0, sizeof r);
    memset(&in, 0, sizeof in);
    if (stateless_shape ? !shape_stateless(c, x, &r.shape)
                        : !shape_session(c, x, &r.shape, &m))
        return;
    if (!bias_heads(c, &x->t[V2_BQ], r.shape.d_k, r.shape.h, &in.bias_q_heads) ||
        !bias_heads(c, &x->t[V2_BK], r.shape.d_k, r.shape.h_kv, &in.bias_k_heads) ||
        !bias_heads(c, &x->t[V2_BV], r.shape.d_v, r.shape.h_kv, &in.bias_v_heads))
        return;
    if (stateless_shape)
        m = r.shape.L;
    if (!score_heads(c, x, &x->t[V2_AB], &r.shape, &r.attn_bias_heads) ||
        !score_heads(c, x, &x->t[V2_MASK], &r.shape, &r.mask_heads) ||
        !read_options(c, x, &r.shape) ||
        !api_v2_read_model(c, x, &r.shape) ||
        !api_check_float32_params(c, &x->p, r.shape.h, "/parameters") ||
        (x->seq ? !api_v2_refuse_seqs(c, x) : !api_v2_read_seqs(c, x, &r.shape)) ||
        !api_v2_read_extras_params(c, x) ||
        !read_outputs(c, x, member(x->hdr, "outputs")) ||
        !api_v2_extras_outputs(c, x, &r.outputs) ||
        !api_v2_extras_check(c, x, &r.shape))
        return;
    in.q = x->t[V2_Q].data;
    in.k = x->t[V2_K].data;
    in.v = x->t[V2_V].data;
    in.bias_q = x->t[V2_BQ].data;
    in.bias_k = x->t[V2_BK].data;
    in.bias_v = x->t[V2_BV].data;
    if ((x->seq_start && (!api_roll_check_window(c, &x->window, "/parameters", "window_") ||
                          !api_roll_check_seq_tokens(c, &x->window, c->ctx->cfg.max_tokens))) ||
        (x->sess && !api_v2_check_fixed(c, x, &in)))
        return;
    r.window = x->window;
    api_seqs_request(&x->seqs, &r);
    r.params = stateless_shape ? x->p : sess_spec(x->sess)->params;
    r.causal = x->causal;
    r.empty_rows = x->empty_rows;
    r.attn_bias = x->t[V2_AB].data;
    r.mask = x->t[V2_MASK].data;
    if (x->seq_start) {
        enum core_status st = api_extras_check_request(&r);
        if (st != CORE_OK) {
            api_fail_core(c, st, NULL);
            return;
        }
        if (!api_v2_seq_create(c, x, &r, &in))
            return;
    }
    if (x->sess && !session_pass(c, x, &r, m))
        return;
    run(c, x, &r, &in, m);
}

/* model_name and model_version in the body: KServe's client
 * (InferRequest.to_rest) sends the model's name beside "inputs". The route
 * names the model; a body that names it too must name the same one. An
 * empty model_version is the default one, as gRPC-style clients send it. */
static bool read_model_names(struct api_call *c, const json_t *hdr)
{
    static const char *const keys[] = {"model_name", "model_version"};
    static const char *const served[] = {V2_MODEL, V2_VERSION};

    for (int i = 0; i < 2; i++) {
        const json_t *v = member(hdr, keys[i]);
        char path[API_PATH_MAX];
        if (i == 1 && json_is_string(v) && json_string_length(v) == 0)
            continue;
        if (v && (!json_is_string(v) || strcmp(json_string_value(v), served[i]) != 0)) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path, "",
                     keys[i]), "%s must be the string \"%s\" (this route serves model "
                     "\"" V2_MODEL "\" version " V2_VERSION ")", keys[i], served[i]);
            return false;
        }
    }
    return true;
}

void api_v2_infer(struct api_call *c)
{
    static const char *const allowed[] = {"id", "parameters", "inputs", "outputs",
                                          "model_name", "model_version", NULL};
    struct v2_infer x;
    const json_t *inputs, *id;

    memset(&x, 0, sizeof x);
    x.budget = api_max_elements(c);
    if (!split_body(c, &x))
        goto out;
    if (!api_check_fields(c, x.hdr, "", allowed) || !read_model_names(c, x.hdr))
        goto out;
    id = member(x.hdr, "id");
    if (id && !json_is_string(id)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/id", "id must be a string");
        goto out;
    }
    x.params = member(x.hdr, "parameters");
    if (x.params && !json_is_object(x.params)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters", "parameters must be an object");
        goto out;
    }
    if (x.params && (!api_check_fields(c, x.params, "/parameters", v2_params_allowed) ||
                     !api_v2_read_content_type(c, x.params, "/parameters", false)))
        goto out;
    inputs = member(x.hdr, "inputs");
    if (!json_is_array(inputs) || json_array_size(inputs) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "inputs must be a non-empty array");
        goto out;
    }
    if (!read_sequence(c, &x))
        goto out;
    api_v2_pick_dtype(&x, inputs);
    c->half = x.half;
    if (x.seq && !x.seq_start && !sequence_acquire(c, &x))
        goto out;
    if (!api_v2_read_inputs(c, &x, inputs))
        goto out;
    if (!x.t[V2_Q].present) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "input q is required");
        goto out;
    }
    infer_compute(c, &x);
    if (x.fresh && c->answered && c->resp->status == 200)
        api_v2_seq_commit(c, &x);
out:
    api_v2_seq_let_go(c, &x);
    infer_free(&x);
}

