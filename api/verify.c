/*
 * api/verify.c — GET/POST /v1/verify and /verify (the same handler).
 *
 * GET runs core/verify on the built-in example; POST runs it on
 * the caller's one head: q [n][d_k], k [L][d_k], v [L][d_v], "bias" {q,k,v},
 * "softmax" (+ "sink_logit"), "rope", "scale", "tolerance", "dtype", read
 * with the same readers (and so the same errors and limits) as
 * /v1/attention. The report is streamed into a capped buffer:
 *
 *   {"passed":…, "example":"builtin"|"request", "about":…,
 *    "inputs":{q,k,v,bias,softmax,sink_logit,rope,scale},
 *    "dtype":…, "scale":…, "tolerance":…, "tolerance_note":…,
 *    "checks":[{"id","name","claim","applicable","passed","max_abs_diff",
 *               "tolerance","expect_change","note","data":{name: number |
 *               [..] | [[..]]}}…],
 *    "table":{"standard":[{"condition","scores","weights"}×4],
 *             "softmax1":[…]},
 *    "elapsed_us":…}
 *
 * Numbers print as the shortest text that round-trips the request's dtype.
 */
#include "api/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/read.h"
#include "api/write.h"
#include "core/verify.h"

/* What a teaching page shows next to the built-in example. */
static const char builtin_about[] =
    "The built-in example: q=(1,0); k1=(1,0), k2=(0,1), k3=(-1,0); "
    "bQ=(0,1); bK=(3,-2); d_k=2. v is the 3x3 identity (v_j = e_j), so each "
    "output row shows its weights, and bV=(1,-1,0.5).";

/* A POST body, owned. */
struct verify_req {
    struct api_tensor q, k, v;
    struct api_bias bias;
    struct verify_input in;
};

static const char *const verify_fields[] = {
    "q", "k", "v", "bias", "softmax", "sink_logit", "rope", "scale",
    "tolerance", "dtype", NULL};

static void verify_req_free(struct verify_req *r)
{
    api_tensor_free(&r->q);
    api_tensor_free(&r->k);
    api_tensor_free(&r->v);
    api_bias_free(&r->bias);
}

/* A member of obj, or NULL when absent or JSON null (as /v1/attention). */
static const json_t *member(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* true (after answering) when m is nested three deep: several heads. */
static bool multi_head(struct api_call *c, const json_t *m, const char *path)
{
    if (!json_is_array(json_array_get(json_array_get(m, 0), 0)))
        return false;
    api_fail(c, API_ERR_INVALID_FIELD, path, "verify takes one head: a matrix "
             "[rows][width], not [heads][rows][width]");
    return true;
}

/* q, k, v: one head each (rank 2), with agreeing widths and lengths. */
static bool read_qkv(struct api_call *c, const json_t *body, size_t *budget,
                     struct verify_req *r)
{
    struct api_tensor_spec spec = {r->in.dtype, API_ELEM_REAL, 2, 2, budget};

    if (multi_head(c, member(body, "q"), "/q") ||
        multi_head(c, member(body, "k"), "/k") ||
        multi_head(c, member(body, "v"), "/v"))
        return false;

    if (!api_read_tensor(c, member(body, "q"), "/q", &spec, &r->q) ||
        !api_read_tensor(c, member(body, "k"), "/k", &spec, &r->k) ||
        !api_read_tensor(c, member(body, "v"), "/v", &spec, &r->v))
        return false;
    if (r->k.shape[1] != r->q.shape[1]) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/k", "k rows have %zu numbers, q rows %zu",
                 r->k.shape[1], r->q.shape[1]);
        return false;
    }
    if (r->v.shape[0] != r->k.shape[0]) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/v", "v must have k's %zu rows, has %zu",
                 r->k.shape[0], r->v.shape[0]);
        return false;
    }
    r->in.n = r->q.shape[0];
    r->in.L = r->k.shape[0];
    r->in.d_k = r->q.shape[1];
    r->in.d_v = r->v.shape[1];
    r->in.q = r->q.data;
    r->in.k = r->k.data;
    r->in.v = r->v.data;
    return true;
}

/* "tolerance": a finite number in (0, 1]; absent -> the dtype's default. */
static bool read_tolerance(struct api_call *c, const json_t *v, double *out)
{
    *out = 0.0;
    if (!v)
        return true;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
        !(json_number_value(v) > 0.0) || json_number_value(v) > 1.0) {
        api_fail(c, API_ERR_INVALID_FIELD, "/tolerance",
                 "expected a number greater than 0 and at most 1");
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static bool read_options(struct api_call *c, const json_t *body,
                         size_t *budget, struct verify_req *r)
{
    struct verify_input *in = &r->in;
    struct attn_shape s = {1, 1, in->n, in->L, in->d_k, in->d_v, 1};
    bool given = false;

    if (!api_read_softmax(c, body, "", &in->softmax, &in->sink_logit) ||
        !api_read_rope(c, member(body, "rope"), "/rope", in->d_k, &in->rope, &in->rope_base,
                       &in->rope_pairs) ||
        !api_read_scale(c, member(body, "scale"), "/scale",
                        &in->scale, &given) ||
        !read_tolerance(c, member(body, "tolerance"), &in->tolerance) ||
        !api_read_bias(c, member(body, "bias"), "/bias", in->dtype, &s, budget, &r->bias))
        return false;
    if (!given)
        in->scale = 0.0;
    in->bias_q = r->bias.q.data;
    in->bias_k = r->bias.k.data;
    in->bias_v = r->bias.v.data;
    return true;
}

static bool read_verify(struct api_call *c, const json_t *body,
                        struct verify_req *r)
{
    size_t budget = api_max_elements(c);

    memset(r, 0, sizeof *r);
    if (!api_check_fields(c, body, "", verify_fields) ||
        !api_read_dtype(c, member(body, "dtype"), "/dtype", &r->in.dtype) ||
        !read_qkv(c, body, &budget, r) || !read_options(c, body, &budget, r)) {
        verify_req_free(r);
        return false;
    }
    return true;
}

/* ---- writing the report ------------------------------------------------ */

struct vw {
    struct api_buf *b;
    enum attn_dtype dt;     /* numbers print as the shortest text of this */
};

static void put_num(struct vw *w, double x)
{
    if (w->dt == ATTN_F32) {
        float f = (float)x;
        api_write_number(w->b, ATTN_F32, &f, 0);
    } else {
        api_write_number(w->b, ATTN_F64, &x, 0);
    }
}

/* An array of doubles as nested JSON arrays in the dtype. */
static void put_array(struct vw *w, const double *x, int rank, size_t rows,
                      size_t cols)
{
    size_t shape[2] = {rows, cols};
    const size_t *sh = rank == 2 ? shape : shape + 1;

    if (rank == 0) {
        put_num(w, x[0]);
        return;
    }
    if (w->dt == ATTN_F64) {
        api_write_matrix(w->b, x, ATTN_F64, rank, sh, 0, true);
        return;
    }
    size_t count = rows * cols;     /* rows*cols checked by the producer */
    float *f = malloc(count ? count * sizeof *f : 1);
    if (!f) {
        w->b->failed = true;    /* answered as 500 internal */
        return;
    }
    for (size_t i = 0; i < count; i++)
        f[i] = (float)x[i];
    api_write_matrix(w->b, f, ATTN_F32, rank, sh, 0, true);
    free(f);
}

/* A raw input array of the dtype (as read). */
static void put_input(struct vw *w, const void *x, int rank, size_t rows,
                      size_t cols)
{
    size_t shape[2] = {rows, cols};

    if (!x) {
        api_buf_puts(w->b, "null");
        return;
    }
    api_write_matrix(w->b, x, w->dt, rank, rank == 2 ? shape : shape + 1, 0,
                     true);
}

static void put_key(struct vw *w, const char *key, bool first)
{
    if (!first)
        api_buf_putc(w->b, ',');
    api_write_string(w->b, key);
    api_buf_putc(w->b, ':');
}

static void put_inputs(struct vw *w, const struct verify_input *in,
                       double scale)
{
    api_buf_putc(w->b, '{');
    put_key(w, "q", true);
    put_input(w, in->q, 2, in->n, in->d_k);
    put_key(w, "k", false);
    put_input(w, in->k, 2, in->L, in->d_k);
    put_key(w, "v", false);
    put_input(w, in->v, 2, in->L, in->d_v);
    put_key(w, "bias", false);
    api_buf_putc(w->b, '{');
    put_key(w, "q", true);
    put_input(w, in->bias_q, 1, 1, in->d_k);
    put_key(w, "k", false);
    put_input(w, in->bias_k, 1, 1, in->d_k);
    put_key(w, "v", false);
    put_input(w, in->bias_v, 1, 1, in->d_v);
    api_buf_putc(w->b, '}');
    put_key(w, "softmax", false);
    api_write_string(w->b, api_softmax_name(in->softmax));
    if (in->softmax == ATTN_SOFTMAX_SINK) {
        put_key(w, "sink_logit", false);
        api_write_number(w->b, ATTN_F64, &in->sink_logit, 0);
    }
    put_key(w, "rope", false);
    if (in->rope) {
        api_buf_puts(w->b, "{\"base\":");
        api_write_number(w->b, ATTN_F64, &in->rope_base, 0);
        api_buf_printf(w->b, ",\"pairs\":\"%s\"}",
                       in->rope_pairs == ATTN_ROPE_HALF ? "half" : "interleaved");
    } else {
        api_buf_puts(w->b, "null");
    }
    put_key(w, "scale", false);
    api_write_number(w->b, ATTN_F64, &scale, 0);
    api_buf_putc(w->b, '}');
}

static void put_check(struct vw *w, const struct verify_check *ck)
{
    api_buf_printf(w->b, "{\"id\":%d,\"name\":", ck->id);
    api_write_string(w->b, ck->name);
    put_key(w, "claim", false);
    api_write_string(w->b, ck->claim);
    api_buf_printf(w->b, ",\"applicable\":%s,\"passed\":%s,\"max_abs_diff\":",
                   ck->applicable ? "true" : "false",
                   ck->passed ? "true" : "false");
    api_write_number(w->b, ATTN_F64, &ck->max_abs_diff, 0);
    put_key(w, "tolerance", false);
    api_write_number(w->b, ATTN_F64, &ck->tolerance, 0);
    api_buf_printf(w->b, ",\"expect_change\":%s",
                   ck->expect_change ? "true" : "false");
    put_key(w, "note", false);
    if (ck->note && ck->note[0])
        api_write_string(w->b, ck->note);
    else
        api_buf_puts(w->b, "null");
    put_key(w, "data", false);
    api_buf_putc(w->b, '{');
    for (size_t i = 0; i < ck->n_data; i++) {
        const struct verify_array *a = &ck->data[i];
        put_key(w, a->name, i == 0);
        put_array(w, a->data, a->rank, a->rows, a->cols);
    }
    api_buf_puts(w->b, "}}");
}

static void put_table(struct vw *w, const struct verify_report *r, int which)
{
    api_buf_putc(w->b, '[');
    for (int c = 0; c < 4; c++) {
        const struct verify_condition *t = &r->table[which][c];
        api_buf_puts(w->b, c ? ",{\"condition\":" : "{\"condition\":");
        api_write_string(w->b, t->name);
        put_key(w, "scores", false);
        put_array(w, t->scores, 2, r->n, r->L);
        put_key(w, "weights", false);
        put_array(w, t->weights, 2, r->n, r->L);
        api_buf_putc(w->b, '}');
    }
    api_buf_putc(w->b, ']');
}

static void put_report(struct vw *w, const struct verify_report *r,
                       const struct verify_input *in, bool builtin,
                       uint64_t elapsed_us)
{
    api_buf_printf(w->b, "{\"passed\":%s,\"example\":\"%s\"",
                   r->passed ? "true" : "false", builtin ? "builtin" : "request");
    if (builtin) {
        put_key(w, "about", false);
        api_write_string(w->b, builtin_about);
    }
    put_key(w, "inputs", false);
    put_inputs(w, in, r->scale);
    api_buf_printf(w->b, ",\"dtype\":\"%s\",\"scale\":", attn_dtype_name(r->dtype));
    api_write_number(w->b, ATTN_F64, &r->scale, 0);
    put_key(w, "tolerance", false);
    api_write_number(w->b, ATTN_F64, &r->tolerance, 0);
    put_key(w, "tolerance_note", false);
    api_write_string(w->b, r->tolerance_note ? r->tolerance_note : "");
    api_buf_puts(w->b, ",\"checks\":[");
    for (size_t i = 0; i < r->n_checks; i++) {
        if (i)
            api_buf_putc(w->b, ',');
        put_check(w, &r->checks[i]);
    }
    api_buf_puts(w->b, "],\"table\":{\"standard\":");
    put_table(w, r, VERIFY_TABLE_STANDARD);
    api_buf_puts(w->b, ",\"softmax1\":");
    put_table(w, r, VERIFY_TABLE_SOFTMAX1);
    api_buf_printf(w->b, "},\"elapsed_us\":%llu}", (unsigned long long)elapsed_us);
}

/* ---- running ------------------------------------------------------------ */

/* Numbers the report will hold, bounded before computing: every data array
 * and table entry is one of [n][L+1], [n+L][d_k], [n][d_v], [L][d_k] or
 * shorter, and there are fewer than 96 of them. */
static bool verify_numbers_bound(const struct verify_input *in, size_t *out)
{
    size_t nl, nq, nv, lk, sum, L1, nL, dk1;

    return core_add(in->L, 1, &L1) && core_add(in->n, in->L, &nL) &&
           core_add(in->d_k, 1, &dk1) && core_mul(in->n, L1, &nl) &&
           core_mul(nL, dk1, &nq) &&
           core_mul(in->n, in->d_v, &nv) && core_mul(in->L, in->d_k, &lk) &&
           core_add(nl, nq, &sum) && core_add(sum, nv, &sum) &&
           core_add(sum, lk, &sum) && core_mul(sum, 96, out);
}

static void verify_answer(struct api_call *c, const struct verify_input *in,
                          bool builtin)
{
    struct verify_report rep;
    struct api_buf buf;
    size_t numbers, inputs, bytes;
    enum core_status st;

    if (!verify_numbers_bound(in, &numbers) || numbers > api_max_elements(c)) {
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL,
                 "verify would return more than %zu numbers (--max-elements); "
                 "send fewer rows", api_max_elements(c));
        return;
    }
    st = verify_run(in, &rep);
    if (st != CORE_OK) {
        verify_report_free(&rep);
        api_fail_core(c, st, NULL);
        return;
    }
    /* inputs echo + report numbers, each at most API_NUM_MAX bytes with its
     * comma, plus text (claims, notes, names) */
    if (!verify_report_elements(&rep, &numbers) ||
        !verify_numbers_bound(in, &inputs) || !core_add(numbers, inputs, &bytes) ||
        !core_mul(bytes, API_NUM_MAX + 4, &bytes) ||
        !core_add(bytes, 1u << 16, &bytes)) {
        verify_report_free(&rep);
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL, NULL);
        return;
    }
    api_buf_init(&buf, bytes);
    struct vw w = {&buf, rep.dtype};
    put_report(&w, &rep, in, builtin, api_now_us() - c->t0_us);
    verify_report_free(&rep);
    api_reply_buf(c, 200, &buf);
}

void api_verify(struct api_call *c)
{
    const char *m = c->req->method ? c->req->method : "";
    struct verify_input in;
    struct verify_req r;
    json_t *body;

    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) {
        verify_builtin(&in);
        in.ws = c->req->ws;
        verify_answer(c, &in, true);
        return;
    }
    if (strcmp(m, "POST") != 0) {
        api_fail_method(c, "GET, POST");
        return;
    }
    if (!(body = api_parse_body(c)))
        return;
    if (!read_verify(c, body, &r)) {
        json_decref(body);
        return;
    }
    json_decref(body);
    r.in.ws = c->req->ws;
    verify_answer(c, &r.in, false);
    verify_req_free(&r);
}
