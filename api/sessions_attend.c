/*
 * api/sessions_attend.c — POST /v1/sessions/{id}/attention: append the
 * request's k and v rows, if any, and attend its q over every row the
 * session holds, in one step of the store (core/store.h's sess_attend_x),
 * so that a refused pass leaves the cache as it was. Everything that can
 * be refused (shapes, expected_length, the options, the response's size)
 * is checked before the cache changes; the answer is written as
 * /v1/attention's (api/codec/write.c).
 */
#include "api/sessions_impl.h"

#include <string.h>

#include "api/read.h"
#include "api/sessions_roll.h"
#include "api/codec/write.h"
#include "core/attn_blame.h"
#include "core/kv.h"

/* A member of obj, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* ---- POST /v1/sessions/{id}/attention --------------------------------------- */

static const char *const attention_fields[] = {
    "q", "k", "v", "causal", "attn_bias", "mask", "return", "expected_length",
    "empty_rows", "encoding", "digits", "heads", "weights_top_k", "tokens", "timeout_ms",
    "window", NULL};

/* Everything an attention request owns. */
struct att_req {
    struct api_tensor q, k, v, attn_bias, mask;
    size_t m;                       /* rows to append */
    long long expected;
    struct sess_query query;
    struct attn_request r;          /* the pass (L = length + m) */
    int q_rank;
    enum api_encoding encoding;
    int digits;
    struct api_extras x;            /* heads, top-k, qk/lse/stats, tokens */
};

static void att_req_free(struct att_req *a)
{
    api_extras_free(&a->x);
    api_tensor_free(&a->q);
    api_tensor_free(&a->k);
    api_tensor_free(&a->v);
    api_tensor_free(&a->attn_bias);
    api_tensor_free(&a->mask);
}

static bool read_att_options(struct api_call *c, const json_t *body,
                             struct att_req *a)
{
    struct sess_query *q = &a->query;
    return api_read_causal(c, member(body, "causal"), "/causal", &q->causal) &&
           api_read_empty_rows(c, member(body, "empty_rows"), "/empty_rows",
                               &q->empty_rows) &&
           api_read_return(c, member(body, "return"), "/return", &q->outputs,
                           &a->x.want) &&
           api_read_extras(c, "", member(body, "heads"), member(body, "weights_top_k"),
                           member(body, "tokens"), &q->outputs, &a->x) &&
           api_read_encoding(c, member(body, "encoding"), "/encoding",
                             &a->encoding) &&
           api_read_digits(c, member(body, "digits"), "/digits", &a->digits) &&
           api_read_window(c, member(body, "window"), "/window", &q->window) &&
           api_sess_read_expected(c, body, &a->expected);
}

/* Checks of the held session s's length, before the score matrices that
 * must have as many columns: expected_length, and an empty cache (L 0,
 * nothing appended), which no attn_bias or mask could match. */
static bool check_cache(struct api_call *c, const struct sess *s, const struct att_req *a)
{
    if (!api_sess_check_expected(c, s, a->expected))
        return false;
    if (a->r.shape.L == 0) {
        api_fail(c, API_ERR_EMPTY_MATRIX, "/k",
                 "the session's cache is empty: send \"k\" and \"v\" first");
        return false;
    }
    return true;
}

/* The arrays, read against the held session s. */
static bool read_att_arrays(struct api_call *c, const json_t *body,
                            const struct sess *s, struct att_req *a)
{
    const struct sess_spec *sp = sess_spec(s);
    size_t budget = api_max_elements(c), n;
    if (!api_sess_read_heads(c, body, "q", sp->params.dtype, sp->shape.h, sp->shape.d_k,
                    &budget, &a->q, &n) ||
        !api_sess_read_kv(c, body, sp, false, &budget, &a->k, &a->v, &a->m))
        return false;
    a->q_rank = a->q.rank;
    a->query.q = a->q.data;
    a->query.n = n;
    if (!api_roll_check_query(c, s, body, &a->query, a->m))
        return false;
    if (sess_request(s, &a->query, a->m, &a->r) != CORE_OK) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "/k", "the cache would be too long");
        return false;
    }
    if (!check_cache(c, s, a))
        return false;
    if (!api_read_score_matrix(c, member(body, "attn_bias"), "/attn_bias",
                               API_ELEM_NULLABLE, sp->params.dtype,
                               &a->r.shape, &budget, &a->attn_bias,
                               &a->query.attn_bias_heads) ||
        !api_read_score_matrix(c, member(body, "mask"), "/mask", API_ELEM_BOOL,
                               sp->params.dtype, &a->r.shape, &budget,
                               &a->mask, &a->query.mask_heads))
        return false;
    a->query.attn_bias = a->attn_bias.data;
    a->query.mask = a->mask.data;
    return sess_request(s, &a->query, a->m, &a->r) == CORE_OK &&
           api_extras_check(c, "", &a->x, &a->r.shape);
}

/* The extras of a, or NULL when the response is the v1 one. */
static struct api_extras *att_extras(struct att_req *a)
{
    return api_extras_compute(&a->x) || a->x.tokens ? &a->x : NULL;
}

/* Checks of the whole pass on the held session (check_cache came first):
 * its validity and the response's size. */
static bool check_att(struct api_call *c, struct att_req *a, size_t *cap)
{
    enum core_status rc = api_extras_check_request(&a->r);
    if (rc != CORE_OK) {
        api_fail_core(c, rc, NULL);
        return false;
    }
    return api_attention_fits(c, &a->r, att_extras(a), a->encoding, cap);
}

/* sess_query.accept of a session's attention: api_attention_accept. */
struct att_accept {
    struct api_call *c;
    struct api_attention_view *view;
};

static bool att_accept(void *arg, struct attn_result *out, struct attn_extras_out *xo)
{
    (void)xo;                           /* the view's extras hold it */
    struct att_accept *a = arg;
    return api_attention_accept(a->c, a->view, out);
}

/* Append and attend on the held session; the session is released here. */
static void att_run(struct api_call *c, struct sess *s, struct att_req *a)
{
    struct sess_store *st = c->ctx->store;
    struct attn_result res;
    size_t cap;
    if (!check_att(c, a, &cap)) {
        sess_release(st, s);
        return;
    }
    struct api_extras *x = att_extras(a);
    if (api_extras_compute(x) ? !api_extras_alloc(&a->r, x, &res)
                              : !api_result_alloc(&a->r, &res)) {
        sess_release(st, s);
        api_result_free(&res);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    struct attn_extras xc = x ? api_extras_core(x) : (struct attn_extras){0};
    struct api_attention_view view = {.req = &a->r, .q_rank = a->q_rank, .x = x,
                                      .encoding = a->encoding, .digits = a->digits};
    struct att_accept acc = {c, &view};
    struct attn_blame_empty empty = {0};
    struct attn_blame blame = {.input = ATTN_BLAME_NONE};
    a->query.accept = att_accept;
    a->query.accept_arg = &acc;
    a->query.empty = &empty;
    a->query.blame = &blame;
    enum core_status rc = sess_attend_x(st, s, a->k.data, a->v.data, a->m, &a->query,
                                        api_extras_compute(x) ? &xc : NULL,
                                        x ? &x->xo : NULL, &res, c->req->ws);
    if (rc != CORE_OK) {
        api_result_free(&res);
        struct api_blame_at at;
        api_blame_at_tensors(&at, &a->q, &a->k, &a->v, &a->attn_bias);
        at.alibi = NULL;                /* the session's, fixed at its create */
        if (rc == CORE_EEMPTYROW)
            api_fail_empty_blame(c, &a->r, &empty, " (the session's rows)", at.ptr[0],
                                 at.rank[0]);
        else if (rc == CORE_ENONFINITE && !c->answered)
            api_session_fail_overflow(c, s, &a->r, a->m, &blame, &at);
        else if (!c->answered)          /* else refused by att_accept, answered */
            api_sess_fail_append(c, rc, s, a->m, true);
        sess_release(st, s);
        return;
    }
    sess_release(st, s);
    api_reply_attention(c, &view, &res, cap);
}

void api_sessions_attention(struct api_call *c, const char *id)
{
    struct att_req a;
    memset(&a, 0, sizeof a);
    json_t *body = api_parse_body(c);
    if (!body)
        return;
    if (!api_check_fields(c, body, "", attention_fields) ||
        !api_read_timeout(c, member(body, "timeout_ms"), "/timeout_ms") ||
        !read_att_options(c, body, &a)) {
        json_decref(body);
        att_req_free(&a);               /* what the options read before the bad one */
        return;
    }
    struct sess *s = api_sess_acquire(c, id);
    if (s) {
        bool ok = read_att_arrays(c, body, s, &a);
        json_decref(body);
        body = NULL;
        if (ok)
            att_run(c, s, &a);
        else
            sess_release(c->ctx->store, s);
    }
    json_decref(body);
    att_req_free(&a);
}
