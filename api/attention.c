/*
 * api/attention.c — POST /v1/attention: parse and validate the body
 * (api/read.c), refuse responses over --max-elements numbers before
 * computing, run the core forward pass into result buffers sized with
 * checked arithmetic, and stream the response into a capped buffer
 * (api/codec/write.c).
 */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/read.h"
#include "api/codec/write.h"
#include "api/extras.h"
#include "core/attn.h"

bool api_attention_fits(struct api_call *c, const struct attn_request *r,
                        const struct api_extras *x, enum api_encoding encoding,
                        size_t *cap)
{
    size_t numbers, more = 0;

    if (!api_extras_numbers(r, x, &numbers) || numbers > api_max_elements(c)) {
        if (!api_extras_fail_topk(c, r, x, api_max_elements(c), "/weights_top_k"))
            api_fail(c, API_ERR_RESPONSE_TOO_LARGE, "/return",
                     "the response would hold more than %zu numbers "
                     "(--max-elements); ask for fewer outputs via \"return\"",
                     api_max_elements(c));
        return false;
    }
    /* the v1 bound with h heads covers the chosen heads' arrays; the extras
     * add their numbers and labels */
    if (!api_attention_max_bytes(r, encoding, cap) ||
        (x && (!api_extras_bytes(r, x, &more) || !core_mul(numbers, API_NUM_MAX, &numbers) ||
               !core_add(*cap, more, cap) || !core_add(*cap, numbers, cap)))) {
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL, NULL);
        return false;
    }
    return true;
}

/* The JSON pointer of element at (row-major over [B·nh·n][cols]) of output
 * name in the response that was not sent: /name/[b/][h/]i/j as the rank of
 * q nests it (/name/[b/][h/]i for one number a row: cols 0), or /name/data
 * when the outputs travel as base64. */
static const char *out_pointer(const struct api_attention_view *v, const char *name,
                               size_t nh, size_t cols, size_t at, char *p, size_t size)
{
    size_t n = v->req->shape.n, row = cols ? at / cols : at, i = row % n, h = row / n % nh,
           b = row / n / nh;
    char col[24] = "";
    int k = 0;

    if (v->encoding == API_ENC_BASE64) {
        snprintf(p, size, "/%s/data", name);
        return p;
    }
    if (cols)
        snprintf(col, sizeof col, "/%zu", at % cols);
    k = snprintf(p, size, "/%s", name);
    if (v->q_rank == 4)
        k += snprintf(p + k, size - (size_t)k, "/%zu/%zu", b, h);
    else if (v->q_rank == 3)
        k += snprintf(p + k, size - (size_t)k, "/%zu", h);
    snprintf(p + k, size - (size_t)k, "/%zu%s", i, col);
    return p;
}

/* A half request's outputs rounded in place to its dtype; 422 non_finite
 * naming the first that overflows (e.g. scores past float16's 65504), at
 * its pointer in the response (an extra's member: "qk", "lse",
 * "stats/entropy", "weights/values", …). */
static bool round_half(struct api_call *c, const struct api_attention_view *v,
                       struct attn_result *res)
{
    const struct attn_shape *s = &v->req->shape;
    size_t nh = v->x ? v->x->nh : s->h, B = s->B > 1 ? s->B : 1, rows = B * nh * s->n;
    struct { const char *name; float *data; size_t cols; } m[3] = {
        {"scores", res->scores, s->L}, {"weights", res->weights, s->L},
        {"output", res->output, s->d_v}};   /* sizes allocated already */
    static const unsigned bit[3] = {ATTN_OUT_SCORES, ATTN_OUT_WEIGHTS, ATTN_OUT_OUTPUT};
    char p[API_PATH_MAX];

    size_t at;
    for (int i = 0; i < 3; i++) {
        if (!(v->req->outputs & bit[i]) || !m[i].data)
            continue;
        at = api_half_round_matrix(v->half, m[i].data, rows * m[i].cols);
        if (at < rows * m[i].cols) {
            api_fail(c, API_ERR_NON_FINITE, out_pointer(v, m[i].name, nh, m[i].cols, at, p,
                                                        sizeof p),
                     "%s element %zu (row-major) is outside the %s range", m[i].name, at,
                     api_half_name(v->half));
            return false;
        }
    }
    const char *xn = v->x && api_extras_compute(v->x)
                         ? api_extras_round_half(v->req, v->x, v->half, &at) : NULL;
    if (xn) {
        /* qk is [..][n][L], weights.values [..][n][k], lse and stats one a row */
        char name[32];
        size_t k = 0, cols = strcmp(xn, "qk") == 0 ? s->L
                             : strcmp(xn, "weights.values") == 0 ? v->x->top_k : 0;
        for (const char *q = xn; *q && k + 1 < sizeof name; q++)
            name[k++] = *q == '.' ? '/' : *q;
        name[k] = '\0';
        api_fail(c, API_ERR_NON_FINITE, out_pointer(v, name, nh, cols, at, p, sizeof p),
                 "%s element %zu (row-major) is outside the %s range", xn, at,
                 api_half_name(v->half));
        return false;
    }
    return true;
}

/* 422 non_finite at the first qk value that overflowed (the scores and
 * the output fail in the pass itself; qk, asked for alone, does not);
 * false when there is none. A half request's were checked by round_half. */
static bool qk_overflow(struct api_call *c, const struct api_attention_view *v)
{
    size_t at;
    if (v->half || !v->x || !api_extras_compute(v->x) ||
        !api_extras_qk_overflow(v->req, v->x, &at))
        return false;
    const struct attn_shape *s = &v->req->shape;
    char p[API_PATH_MAX];
    api_fail(c, API_ERR_NON_FINITE, out_pointer(v, "qk", v->x->nh, s->L, at, p, sizeof p),
             "qk element %zu (row-major) is not finite: q·k overflowed %s; scale the inputs "
             "down%s", at, v->req->params.dtype == ATTN_F64 ? "float64" : "float32",
             v->req->params.dtype == ATTN_F64 ? "" : " or compute in float64");
    return true;
}

bool api_attention_accept(struct api_call *c, struct api_attention_view *v,
                          struct attn_result *res)
{
    v->half = c->half;
    v->checked = true;
    return !(v->half && !round_half(c, v, res)) && !qk_overflow(c, v);
}

void api_reply_attention(struct api_call *c, struct api_attention_view *v,
                         struct attn_result *res, size_t cap)
{
    struct api_buf buf;
    size_t numbers = 0;

    if (!v->checked && !api_attention_accept(c, v, res)) {
        api_result_free(res);
        return;
    }

    /* api_attention_fits() has bounded this count already */
    (void)api_extras_numbers(v->req, v->x, &numbers);
    api_buf_init(&buf, cap);
    /* Reserve a typical size at once (about 20 bytes a number in JSON, 11
     * in base64) instead of doubling through a large response. */
    api_buf_reserve(&buf, numbers > (cap - 4096) / 20 ? cap - 4096
                          : numbers * (v->encoding == API_ENC_BASE64 ? 11 : 20));
    v->res = res;
    v->elapsed_us = api_now_us() - c->t0_us;
    api_write_attention(&buf, v);
    api_result_free(res);
    api_reply_buf(c, 200, &buf);
}

/* q, k, v kept 2-byte (api_read_tensor_keep) widened to float32, the
 * 2-byte copies freed: for every pass but the output-only key-blocked one,
 * the only one that reads them in place (the extras read float32). */
static bool widen_inputs(struct api_attention_req *a)
{
    if (!api_tensor_widen(&a->q) || !api_tensor_widen(&a->k) || !api_tensor_widen(&a->v))
        return false;
    a->in.q = a->q.data;
    a->in.k = a->k.data;
    a->in.v = a->v.data;
    return true;
}

/* 422 non_finite at the input a float32/float64 pass overflowed on. */
static void fail_overflow(struct api_call *c, const struct api_attention_req *a)
{
    struct api_blame_at at;
    api_blame_at_tensors(&at, &a->q, &a->k, &a->v, &a->attn_bias);
    api_fail_overflow(c, &a->r, &a->in, a->x.heads, a->x.nh, &at);
}

/* Compute and answer for a validated request. */
static void attention_run(struct api_call *c, struct api_attention_req *a)
{
    struct attn_result res;
    size_t cap;
    enum core_status st;

    const struct api_extras *x = api_extras_compute(&a->x) || a->x.tokens ? &a->x : NULL;
    if (!api_attention_fits(c, &a->r, x, a->encoding, &cap))
        return;
    if (api_extras_compute(x) ? !api_extras_alloc(&a->r, &a->x, &res)
                              : !api_result_alloc(&a->r, &res)) {
        api_result_free(&res);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    if ((api_extras_compute(x) || !attn_output_blocked(&a->r)) && !widen_inputs(a)) {
        api_result_free(&res);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    if (api_extras_compute(x)) {
        struct attn_extras xc = api_extras_core(x);
        st = attn_forward_extras(&a->r, &a->in, NULL, &xc, &res, &a->x.xo, c->req->ws);
    } else {
        /* q, k, v as read: 2-byte ones are widened by the pass itself */
        struct attn_elems e = {api_tensor_elem(&a->q), api_tensor_elem(&a->k),
                               api_tensor_elem(&a->v)};
        st = attn_forward_half(&a->r, &a->in, &e, &res, c->req->ws);
    }
    if (st == CORE_ENONFINITE && !c->half) {
        api_result_free(&res);
        fail_overflow(c, a);
        return;
    }
    if (st == CORE_EEMPTYROW) {
        api_result_free(&res);
        api_fail_empty_row(c, &a->r, a->x.heads, a->x.nh, a->q.packed ? "/q/data" : "/q",
                           a->q.packed ? 0 : a->q.rank);
        return;
    }
    if (st != CORE_OK) {
        api_result_free(&res);
        api_fail_compute(c, st, a->r.params.dtype);
        return;
    }
    api_reply_attention(c, &(struct api_attention_view){
        .req = &a->r, .q_rank = a->q_rank, .x = x,
        .encoding = a->encoding, .digits = a->digits}, &res, cap);
}

void api_attention(struct api_call *c)
{
    static const char *const qkv[] = {"q", "k", "v", NULL};
    static struct api_fast_keys fast_keys = {.names = qkv};
    struct api_attention_req a;
    struct api_pre pre;
    json_t *body = api_parse_body_pre(c, &fast_keys, &pre);
    bool ok;

    if (!body)
        return;
    ok = api_read_attention_pre(c, body, &pre, &a);
    json_decref(body);          /* the arrays are copied out: free early */
    api_pre_free(&pre);
    if (ok) {
        attention_run(c, &a);
        api_attention_req_free(&a);
    }
}
