/*
 * api/verify.c — GET/POST /v1/verify and /verify (the same handler).
 *
 * GET runs core/verify on the built-in example; POST runs it on
 * the caller's one head: q [n][d_k], k [L][d_k], v [L][d_v], "bias" {q,k,v},
 * "softmax" (+ "sink_logit", a number or [h] per-head logits), "rope" (with
 * dims and scaling), "positions", "segments", "window", "softcap", "scale",
 * "tolerance", "dtype" (float16 / bfloat16 too: the numbers are rounded to
 * it, the math runs in float32 and every number of the report's matrices is
 * rounded to it, a value past its range being 422 non_finite at its JSON
 * pointer in the report), read with the same readers (and so the same
 * errors and limits) as /v1/attention; a float32/float64 check pass that
 * overflows is 422 non_finite at the row of q, k or v the core blames
 * (verify_report.blame), as /v1/attention's. The report is streamed into a
 * capped buffer:
 *
 *   {"passed":…, "example":"builtin"|"request", "about":…,
 *    "inputs":{q,k,v,bias,softmax,sink_logit,rope,scale, and the given
 *              positions,segments,window,softcap},
 *    "dtype":…, "scale":…, "tolerance":…, "tolerance_note":…,
 *    "checks":[{"id","name","claim","applicable","passed","max_abs_diff",
 *               "tolerance","expect_change","note","data":{name: number |
 *               [..] | [[..]]}}…],
 *    "table":{"standard":[{"condition","scores","weights"}×4],
 *             "softmax1":[…]},
 *    "elapsed_us":…}
 *
 * Heads and batches (q [h][n][d_k] with k, v [h_kv][L][d], or [B][h][n][d_k]
 * with [B][h_kv][L][d]; bias rows per head, positions and segments per
 * batch element, sink_logit per head, broadcast as /v1/attention does) run
 * every head as its own one-head request and answer
 *
 *   {"passed", "example":"request", "rank", "shape":{"batch"?,"heads",
 *    "kv_heads","n","L","d_k","d_v"}, "dtype",
 *    "failed":[{"batch"?,"head","kv_head","checks":[ids]}…],
 *    "elements":[{"batch"?,"head","kv_head", and the one-head report's
 *                 members but elapsed_us}…], "elapsed_us"}
 *
 * Numbers print as the shortest text that round-trips the request's dtype.
 */
#include "api/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/read.h"
#include "api/codec/write.h"
#include "core/pool.h"
#include "core/verify.h"

/* What a teaching page shows next to the built-in example. */
static const char builtin_about[] =
    "The built-in example: q=(1,0); k1=(1,0), k2=(0,1), k3=(-1,0); "
    "bQ=(0,1); bK=(3,-2); d_k=2. v is the 3x3 identity (v_j = e_j), so each "
    "output row shows its weights, and bV=(1,-1,0.5).";

/* Heads a request may verify (batch elements times heads): each runs every
 * check, about 60 forward passes and a 20 KB report for the smallest. */
#define VERIFY_API_MAX_HEADS 1024

/* A POST body, owned. */
struct verify_req {
    struct api_tensor q, k, v;
    int rank;                       /* of q: 2 one head, 3 heads, 4 a batch */
    struct attn_shape shape;        /* h, h_kv, B are 1 for one head */
    struct api_bias bias;
    struct api_seqs seqs;
    double *sinks;
    struct verify_input in;
};

static const char *const verify_fields[] = {
    "q", "k", "v", "bias", "softmax", "sink_logit", "rope", "scale",
    "tolerance", "dtype", "positions", "segments", "window", "softcap", NULL};

static void verify_req_free(struct verify_req *r)
{
    api_tensor_free(&r->q);
    api_tensor_free(&r->k);
    api_tensor_free(&r->v);
    api_bias_free(&r->bias);
    api_seqs_free(&r->seqs);
    free(r->sinks);
}

/* A member of obj, or NULL when absent or JSON null (as /v1/attention). */
static const json_t *member(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* q, k, v: one head (rank 2), heads (rank 3: q [h][n][d_k], k/v
 * [h_kv][L][d]) or a batch (rank 4: [B][h][n][d_k], [B][h_kv][L][d]), as
 * /v1/attention takes them, with agreeing ranks, batches, heads, widths
 * and lengths. */
static bool read_qkv(struct api_call *c, const json_t *body, size_t *budget,
                     struct verify_req *r)
{
    struct api_tensor_spec spec = {r->in.dtype, API_ELEM_REAL, 2, 4, budget};
    struct attn_shape *s = &r->shape;

    if (!api_read_tensor(c, member(body, "q"), "/q", &spec, &r->q) ||
        !api_read_tensor(c, member(body, "k"), "/k", &spec, &r->k) ||
        !api_read_tensor(c, member(body, "v"), "/v", &spec, &r->v))
        return false;
    if (!api_qkv_shape(c, &r->q, &r->k, &r->v, s))
        return false;
    if (s->B * s->h > VERIFY_API_MAX_HEADS) {     /* each factor fits: read above */
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "/q", "verify runs its checks on at most %d "
                 "heads (batch elements times heads) a request, got %zu",
                 VERIFY_API_MAX_HEADS, s->B * s->h);
        return false;
    }
    r->rank = r->q.rank;
    r->in.n = s->n;
    r->in.L = s->L;
    r->in.d_k = s->d_k;
    r->in.d_v = s->d_v;
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

/* "softmax" and "sink_logit": a number, or [h] per-head logits. One head
 * takes up to VERIFY_MAX_SINKS (check 23's heads; the first is the sink of
 * the caller's head); heads and batches take one per query head, each
 * element's own (set by element_input). */
static bool read_sinks(struct api_call *c, const json_t *body, struct verify_req *r)
{
    const json_t *s = member(body, "sink_logit");
    size_t heads = r->rank > 2 ? r->shape.h : json_is_array(s) ? json_array_size(s) : 1;
    struct attn_params p = {0};

    if (r->rank == 2 && heads > VERIFY_MAX_SINKS) {
        api_fail(c, API_ERR_INVALID_FIELD, "/sink_logit", "verify takes at most %d per-head "
                 "sink logits, got %zu", VERIFY_MAX_SINKS, heads);
        return false;
    }
    if (!api_read_sinks(c, body, "", heads ? heads : 1, &p, &r->sinks))
        return false;
    r->in.softmax = p.softmax;
    r->in.sink_logit = p.sink_logit;
    r->in.sinks = r->sinks;
    r->in.n_sinks = r->sinks ? heads : 0;
    return true;
}

/* rope (dims, scaling), positions, segments ([n]/[L], or [B][n]/[B][L]
 * for a batch), window and softcap. */
static bool read_model(struct api_call *c, const json_t *body, size_t *budget,
                       struct verify_req *r)
{
    struct verify_input *in = &r->in;
    struct attn_params p = {0};

    if (!api_read_rope(c, member(body, "rope"), "/rope", in->d_k, &p) ||
        !api_read_seqs(c, member(body, "positions"), member(body, "segments"), "", &r->shape,
                       budget, &r->seqs) ||
        !api_read_window(c, member(body, "window"), "/window", &in->window) ||
        !api_read_softcap(c, member(body, "softcap"), "/softcap", &in->softcap))
        return false;
    in->rope = p.rope;
    in->rope_base = p.rope ? p.rope_base : 10000.0;
    in->rope_pairs = p.rope_pairs;
    in->rope_dims = p.rope_dims;
    in->rope_scaling = p.rope_scaling;
    in->pos_q = r->seqs.pos_q;
    in->pos_k = r->seqs.pos_k;
    in->seg_q = r->seqs.seg_q;
    in->seg_k = r->seqs.seg_k;
    return true;
}

static bool read_options(struct api_call *c, const json_t *body,
                         size_t *budget, struct verify_req *r)
{
    struct verify_input *in = &r->in;
    bool given = false;

    if (!read_sinks(c, body, r) || !read_model(c, body, budget, r) ||
        !api_read_scale(c, member(body, "scale"), "/scale",
                        &in->scale, &given) ||
        !read_tolerance(c, member(body, "tolerance"), &in->tolerance) ||
        !api_read_bias(c, member(body, "bias"), "/bias", in->dtype, &r->shape, budget,
                       &r->bias))
        return false;
    if (!given)
        in->scale = 0.0;
    in->bias_q = r->bias.q.data;
    in->bias_k = r->bias.k.data;
    in->bias_v = r->bias.v.data;
    return true;
}

/* attn_bias and mask are the checks' own instruments (an extra key's score,
 * a shift of every score, the allowed keys of check 18): verify takes
 * neither from the caller. */
static bool refuse_scores(struct api_call *c, const json_t *body)
{
    static const char *const keys[] = {"attn_bias", "mask"};
    char p[16];

    for (int i = 0; i < 2; i++)
        if (json_object_get(body, keys[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p, "", keys[i]),
                     "verify takes no %s: its checks set attn_bias and mask themselves "
                     "and compare attention over the keys positions, segments and the "
                     "window allow", keys[i]);
            return false;
        }
    return true;
}

/* scale, softcap and the sink logits within the float32 math's range
 * when it runs in float32 (api_check_float32_params). */
static bool check_float32(struct api_call *c, const struct verify_req *r)
{
    const struct verify_input *in = &r->in;
    struct attn_params p = {.dtype = in->dtype, .scale = in->scale, .softcap = in->softcap,
                            .softmax = in->softmax, .sink_logit = in->sink_logit,
                            .sink_logits = in->sinks};
    return api_check_float32_params(c, &p, in->n_sinks ? in->n_sinks : 1, "");
}

static bool read_verify(struct api_call *c, const json_t *body,
                        struct verify_req *r)
{
    size_t budget = api_max_elements(c);

    memset(r, 0, sizeof *r);
    if (!refuse_scores(c, body) || !api_check_fields(c, body, "", verify_fields) ||
        !api_read_dtype(c, member(body, "dtype"), "/dtype", &r->in.dtype, &c->half) ||
        !read_qkv(c, body, &budget, r) || !read_options(c, body, &budget, r) ||
        !check_float32(c, r)) {
        verify_req_free(r);
        return false;
    }
    return true;
}

/* ---- writing the report ------------------------------------------------ */

struct vw {
    struct api_buf *b;
    enum attn_dtype dt;     /* numbers print as the shortest text of this */
    enum api_half half;     /* or, for a float16/bfloat16 request, of this */
    const char *where[2];   /* the matrix being written: check, array */
    char ptr[96];           /* its JSON pointer in the response */
    int rank;               /* its rank (0: one number) */
    size_t cols;            /* and row length */
    char over[160];         /* the first matrix with a value past half's range */
    char over_ptr[160];     /* and that value's JSON pointer */
};

/* A value of where[] past the half format's range: remembered with its
 * JSON pointer in the report (the report is answered 422 instead). */
static void overflowed(struct vw *w, size_t at)
{
    if (w->over[0])
        return;
    snprintf(w->over, sizeof w->over, "%s%s%s element %zu", w->where[0],
             w->where[1] ? "." : "", w->where[1] ? w->where[1] : "", at);
    if (w->rank == 0)
        snprintf(w->over_ptr, sizeof w->over_ptr, "%s", w->ptr);
    else if (w->rank == 1)
        snprintf(w->over_ptr, sizeof w->over_ptr, "%s/%zu", w->ptr, at);
    else
        snprintf(w->over_ptr, sizeof w->over_ptr, "%s/%zu/%zu", w->ptr, at / w->cols,
                 at % w->cols);
}

/* x rounded to the half format into f [count] (non-finite kept: null). */
static bool half_copy(struct vw *w, const double *x, size_t count, float *f)
{
    for (size_t i = 0; i < count; i++) {
        f[i] = (float)x[i];
        if (isfinite(x[i]) && !api_half_round(w->half, x[i], &f[i], NULL)) {
            overflowed(w, i);
            return false;
        }
    }
    return true;
}

/* One number of check data: a JSON number (never an array), rounded to
 * the dtype; null when not finite. */
static void put_num(struct vw *w, double x)
{
    if (w->half) {
        float f;
        char num[API_NUM_MAX];
        if (!half_copy(w, &x, 1, &f) || !isfinite(f)) {
            api_buf_puts(w->b, "null");
            return;
        }
        uint16_t bits = api_half_bits(w->half, f);
        api_buf_append(w->b, num, w->half == API_HALF_F16 ? api_dtoa_f16(num, bits)
                                                          : api_dtoa_bf16(num, bits));
    } else if (w->dt == ATTN_F32) {
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

    w->rank = rank;
    w->cols = cols;
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
    if (!w->half) {
        for (size_t i = 0; i < count; i++)
            f[i] = (float)x[i];
        api_write_matrix(w->b, f, ATTN_F32, rank, sh, 0, true);
    } else if (half_copy(w, x, count, f)) {
        api_write_matrix_half(w->b, f, w->half, rank, sh, 0);
    }
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
    if (w->half)            /* read as half values already */
        api_write_matrix_half(w->b, x, w->half, rank, rank == 2 ? shape : shape + 1, 0);
    else
        api_write_matrix(w->b, x, w->dt, rank, rank == 2 ? shape : shape + 1, 0, true);
}

/* A JSON value the readers' writers built (e.g. the rope object). */
static void put_json(struct vw *w, json_t *v)
{
    char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)) : NULL;
    api_buf_puts(w->b, t ? t : "null");
    free(t);
    json_decref(v);
}

/* int64 [count] as a JSON array. */
static void put_ints(struct vw *w, const int64_t *x, size_t count)
{
    api_buf_putc(w->b, '[');
    for (size_t i = 0; i < count; i++)
        api_buf_printf(w->b, "%s%lld", i ? "," : "", (long long)x[i]);
    api_buf_putc(w->b, ']');
}

static void put_key(struct vw *w, const char *key, bool first)
{
    if (!first)
        api_buf_putc(w->b, ',');
    api_write_string(w->b, key);
    api_buf_putc(w->b, ':');
}

/* The sink and RoPE parameters of in, as the readers' echo writers take
 * them. */
static struct attn_params echo_params(const struct verify_input *in)
{
    return (struct attn_params){.softmax = in->softmax, .sink_logit = in->sink_logit,
                                .sink_logits = in->sinks, .rope = in->rope,
                                .rope_base = in->rope_base, .rope_pairs = in->rope_pairs,
                                .rope_dims = in->rope_dims, .rope_scaling = in->rope_scaling};
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
    struct attn_params p = echo_params(in);
    if (in->softmax == ATTN_SOFTMAX_SINK) {
        put_key(w, "sink_logit", false);
        put_json(w, api_sinks_json(&p, in->n_sinks));
    }
    put_key(w, "rope", false);
    if (in->rope)
        put_json(w, api_rope_json(&p, in->d_k));
    else
        api_buf_puts(w->b, "null");
    put_key(w, "scale", false);
    api_write_number(w->b, ATTN_F64, &scale, 0);
    static const char *const side[2] = {"q", "k"};
    const int64_t *pos[2] = {in->pos_q, in->pos_k}, *seg[2] = {in->seg_q, in->seg_k};
    size_t len[2] = {in->n, in->L};
    for (int t = 0; t < 2; t++) {       /* positions, segments: as given */
        const int64_t *const *a = t ? seg : pos;
        if (!a[0] && !a[1])
            continue;
        put_key(w, t ? "segments" : "positions", false);
        api_buf_putc(w->b, '{');
        for (int u = 0, first = 1; u < 2; u++)
            if (a[u]) {
                put_key(w, side[u], first);
                put_ints(w, a[u], len[u]);
                first = 0;
            }
        api_buf_putc(w->b, '}');
    }
    if (in->window.on) {
        put_key(w, "window", false);
        api_buf_putc(w->b, '{');
        const int64_t wv[3] = {in->window.left, in->window.right, in->window.sinks};
        static const char *const wk[3] = {"left", "right", "sinks"};
        for (int t = 0, first = 1; t < 3; t++)
            if (wv[t] >= 0 && (t < 2 || wv[t] > 0)) {
                put_key(w, wk[t], first);
                api_buf_printf(w->b, "%lld", (long long)wv[t]);
                first = 0;
            }
        api_buf_putc(w->b, '}');
    }
    if (in->softcap > 0) {
        put_key(w, "softcap", false);
        api_write_number(w->b, ATTN_F64, &in->softcap, 0);
    }
    api_buf_putc(w->b, '}');
}

/* Check number i of the report (a value's pointer: base/checks/i/data/…). */
static void put_check(struct vw *w, const char *base, size_t i, const struct verify_check *ck)
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
    enum api_half half = w->half;
    enum attn_dtype dt = w->dt;
    if (ck->precision_study && half) {  /* numbers about precisions: float64 */
        w->half = API_HALF_NONE;
        w->dt = ATTN_F64;
    }
    put_key(w, "note", false);
    if (ck->note && ck->note[0])
        api_write_string(w->b, ck->note);
    else
        api_buf_puts(w->b, "null");
    put_key(w, "data", false);
    api_buf_putc(w->b, '{');
    for (size_t j = 0; j < ck->n_data; j++) {
        const struct verify_array *a = &ck->data[j];
        w->where[0] = ck->name;
        w->where[1] = a->name;
        snprintf(w->ptr, sizeof w->ptr, "%s/checks/%zu/data/%s", base, i, a->name);
        put_key(w, a->name, j == 0);
        put_array(w, a->data, a->rank, a->rows, a->cols);
    }
    w->half = half;
    w->dt = dt;
    api_buf_puts(w->b, "}}");
}

static void put_table(struct vw *w, const char *base, const struct verify_report *r,
                      int which)
{
    const char *name = which == VERIFY_TABLE_STANDARD ? "standard" : "softmax1";

    api_buf_putc(w->b, '[');
    for (int c = 0; c < 4; c++) {
        const struct verify_condition *t = &r->table[which][c];
        api_buf_puts(w->b, c ? ",{\"condition\":" : "{\"condition\":");
        api_write_string(w->b, t->name);
        w->where[0] = which == VERIFY_TABLE_STANDARD ? "table.standard" : "table.softmax1";
        w->where[1] = "scores";
        snprintf(w->ptr, sizeof w->ptr, "%s/table/%s/%d/scores", base, name, c);
        put_key(w, "scores", false);
        put_array(w, t->scores, 2, r->n, r->L);
        w->where[1] = "weights";
        snprintf(w->ptr, sizeof w->ptr, "%s/table/%s/%d/weights", base, name, c);
        put_key(w, "weights", false);
        put_array(w, t->weights, 2, r->n, r->L);
        api_buf_putc(w->b, '}');
    }
    api_buf_putc(w->b, ']');
}

/* The members of one head's report, "passed" to "table" (no braces);
 * base is the report's JSON pointer in the response. */
static void put_report_members(struct vw *w, const char *base,
                               const struct verify_report *r,
                               const struct verify_input *in, bool builtin)
{
    api_buf_printf(w->b, "\"passed\":%s,\"example\":\"%s\"",
                   r->passed ? "true" : "false", builtin ? "builtin" : "request");
    if (builtin) {
        put_key(w, "about", false);
        api_write_string(w->b, builtin_about);
    }
    put_key(w, "inputs", false);
    put_inputs(w, in, r->scale);
    api_buf_printf(w->b, ",\"dtype\":\"%s\",\"scale\":",
                   api_dtype_name(r->dtype, w->half));
    api_write_number(w->b, ATTN_F64, &r->scale, 0);
    put_key(w, "tolerance", false);
    api_write_number(w->b, ATTN_F64, &r->tolerance, 0);
    put_key(w, "tolerance_note", false);
    if (w->half) {          /* the float32 tolerance: the math runs in float32 */
        char note[512];
        snprintf(note, sizeof note, "%s The inputs are %s values; the checks run in "
                 "float32 and compare float32 results (the matrices shown are rounded to "
                 "%s).", r->tolerance_note ? r->tolerance_note : "", api_half_name(w->half),
                 api_half_name(w->half));
        api_write_string(w->b, note);
    } else {
        api_write_string(w->b, r->tolerance_note ? r->tolerance_note : "");
    }
    api_buf_puts(w->b, ",\"checks\":[");
    for (size_t i = 0; i < r->n_checks; i++) {
        if (i)
            api_buf_putc(w->b, ',');
        put_check(w, base, i, &r->checks[i]);
    }
    api_buf_puts(w->b, "],\"table\":{\"standard\":");
    put_table(w, base, r, VERIFY_TABLE_STANDARD);
    api_buf_puts(w->b, ",\"softmax1\":");
    put_table(w, base, r, VERIFY_TABLE_SOFTMAX1);
    api_buf_putc(w->b, '}');
}

static void put_report(struct vw *w, const struct verify_report *r,
                       const struct verify_input *in, bool builtin,
                       uint64_t elapsed_us)
{
    api_buf_putc(w->b, '{');
    put_report_members(w, "", r, in, builtin);
    api_buf_printf(w->b, ",\"elapsed_us\":%llu}", (unsigned long long)elapsed_us);
}

/* ---- running ------------------------------------------------------------ */

/* Numbers in a JSON value (rope's echo). */
static size_t json_numbers(const json_t *v)
{
    const char *key;
    const json_t *x;
    size_t i, count = json_is_number(v);

    if (json_is_array(v))
        json_array_foreach(v, i, x)
            count += json_numbers(x);
    if (json_is_object(v))
        json_object_foreach((json_t *)v, key, x)
            count += json_numbers(x);
    return count;
}

/* Numbers of the inputs echo (put_inputs): q, k, v, the biases given, the
 * sink logits, RoPE's, the scale, positions, segments, window, softcap.
 * CORE_ENOMEM (RoPE's JSON), CORE_ELIMIT past SIZE_MAX. */
static enum core_status echo_numbers(const struct verify_input *in, size_t *out)
{
    struct attn_params p = echo_params(in);
    size_t sum = 1 + (in->softcap > 0) + (in->softmax == ATTN_SOFTMAX_SINK
                                          ? (in->sinks ? in->n_sinks : 1) : 0);
    size_t nq, lk, lv, nL;
    json_t *rope = in->rope ? api_rope_json(&p, in->d_k) : NULL;

    if (in->rope && !rope)
        return CORE_ENOMEM;
    sum += json_numbers(rope);
    json_decref(rope);
    if (in->window.on)
        sum += (in->window.left >= 0) + (in->window.right >= 0) + (in->window.sinks > 0);
    if (!core_mul(in->n, in->d_k, &nq) || !core_mul(in->L, in->d_k, &lk) ||
        !core_mul(in->L, in->d_v, &lv) || !core_add(in->n, in->L, &nL) ||
        !core_add(sum, nq, &sum) || !core_add(sum, lk, &sum) || !core_add(sum, lv, &sum) ||
        !core_add(sum, in->bias_q ? in->d_k : 0, &sum) ||
        !core_add(sum, in->bias_k ? in->d_k : 0, &sum) ||
        !core_add(sum, in->bias_v ? in->d_v : 0, &sum) ||
        !core_add(sum, in->pos_q ? in->n : 0, &sum) ||
        !core_add(sum, in->pos_k ? in->L : 0, &sum) || !core_add(sum, in->seg_q ? nL : 0, &sum))
        return CORE_ELIMIT;
    *out = sum;
    return CORE_OK;
}

/* The numbers one head's report holds, counted before running: its checks'
 * data and its tables (verify_report_numbers, with rank as there; *unsure
 * the numbers of check 7 it counted without knowing) and its inputs echo;
 * CORE_ELIMIT past SIZE_MAX. */
static enum core_status report_numbers(const struct verify_input *in, bool rank, size_t *out,
                                       size_t *unsure)
{
    size_t echo;
    enum core_status st = verify_report_numbers(in, rank, out, unsure);

    if (st == CORE_OK)
        st = echo_numbers(in, &echo);
    if (st == CORE_OK && !core_add(*out, echo, out))
        st = CORE_ELIMIT;
    return st;
}

/* The report's cap in bytes: its numbers (data, tables, inputs echo) and
 * each check's id, max_abs_diff and tolerance, each at most API_NUM_MAX
 * bytes with its comma and brackets, plus 64 KiB of text (names, claims,
 * notes). */
static bool report_bytes(const struct verify_report *rep, const struct verify_input *in,
                         size_t *bytes)
{
    size_t numbers, inputs;

    return verify_report_elements(rep, &numbers) && echo_numbers(in, &inputs) == CORE_OK &&
           core_add(numbers, inputs, bytes) &&
           core_add(*bytes, 3 * VERIFY_MAX_CHECKS + 2, bytes) &&
           core_mul(*bytes, API_NUM_MAX + 4, bytes) && core_add(*bytes, 1u << 16, bytes);
}

/* 200 with the report in w->b, or 422 non_finite at the JSON pointer of the
 * first value past the half format's range. */
static void reply_report(struct api_call *c, struct vw *w)
{
    if (w->over[0]) {
        api_buf_free(w->b);
        api_fail(c, API_ERR_NON_FINITE, w->over_ptr, "%s is outside the %s range", w->over,
                 api_half_name(c->half));
        return;
    }
    api_reply_buf(c, 200, w->b);
}

/* 422 response_too_large before computing, for a report of numbers (at
 * least that many; SIZE_MAX: past it) over heads: at q, whose size it is,
 * or at no path for the built-in example (nothing the client sent). */
static void too_large(struct api_call *c, size_t numbers, bool at_least, size_t heads,
                      bool builtin)
{
    char what[96] = "";

    if (heads > 1)
        snprintf(what, sizeof what, " over its %zu heads", heads);
    api_fail(c, API_ERR_RESPONSE_TOO_LARGE, builtin ? NULL : "/q", "%s report would hold "
             "%s%zu numbers (the checks' data, the tables and the inputs echoed%s), more "
             "than the %zu --max-elements allows%s%s", builtin ? "the built-in checks'"
             : "verify's", numbers == SIZE_MAX ? "more than " : at_least ? "at least " : "",
             numbers, what, api_max_elements(c), builtin ? "" : "; send fewer ",
             builtin ? "" : heads == 1 ? "rows" : "heads or rows");
}

/* Head e of a rank-3/4 request (batch element e / h, query head e % h) as
 * one head's input: its q, its kv head's k and v, its bias rows, its batch
 * element's positions and segments, and its sink logit (a per-head list
 * becomes check 23's one head). A one-head request of these equals it. */
static void element_input(const struct verify_req *r, size_t e, struct verify_input *out)
{
    const struct attn_shape *s = &r->shape;
    size_t b = e / s->h, hh = e % s->h, g = hh / (s->h / s->h_kv), kv = b * s->h_kv + g;
    size_t es = attn_dtype_size(r->in.dtype);   /* offsets below fit: counted at read */

    *out = r->in;
    out->q = (const char *)r->q.data + e * s->n * s->d_k * es;
    out->k = (const char *)r->k.data + kv * s->L * s->d_k * es;
    out->v = (const char *)r->v.data + kv * s->L * s->d_v * es;
    if (r->bias.q.data && r->bias.q_heads > 1)
        out->bias_q = (const char *)r->bias.q.data + hh * s->d_k * es;
    if (r->bias.k.data && r->bias.k_heads > 1)
        out->bias_k = (const char *)r->bias.k.data + g * s->d_k * es;
    if (r->bias.v.data && r->bias.v_heads > 1)
        out->bias_v = (const char *)r->bias.v.data + g * s->d_v * es;
    if (r->seqs.pos_q && r->seqs.pos_q_batches > 1)
        out->pos_q = r->seqs.pos_q + b * s->n;
    if (r->seqs.pos_k && r->seqs.pos_k_batches > 1)
        out->pos_k = r->seqs.pos_k + b * s->L;
    if (r->seqs.seg_q && r->seqs.seg_batches > 1) {
        out->seg_q = r->seqs.seg_q + b * s->n;
        out->seg_k = r->seqs.seg_k + b * s->L;
    }
    if (r->sinks) {
        out->sinks = r->sinks + hh;
        out->n_sinks = 1;
        out->sink_logit = r->sinks[hh];
    }
}

/* The numbers of every head's report (one head: in; r's heads for a rank-3
 * or rank-4 r), as report_numbers. */
static enum core_status count_heads(const struct verify_req *r, const struct verify_input *in,
                                    bool rank, size_t *total, size_t *unsure)
{
    size_t E = r && r->rank > 2 ? r->shape.B * r->shape.h : 1, each, maybe;
    struct verify_input head = *in;
    enum core_status st = CORE_OK;

    *total = *unsure = 0;
    for (size_t e = 0; e < E && st == CORE_OK; e++) {
        if (r && r->rank > 2)
            element_input(r, e, &head);
        st = report_numbers(&head, rank, &each, &maybe);
        if (st == CORE_OK && (!core_add(*total, each, total) ||
                              !core_add(*unsure, maybe, unsure)))
            st = CORE_ELIMIT;
    }
    return st;
}

/* Whether the report fits --max-elements, counted before running (else a
 * 422, or the count's error). Check 7's premise past d_k keys (the rank of
 * the key differences, as costly as the check) is found only when the
 * count with its arrays and the count without them fall on both sides of
 * the limit: a refusal without it says "at least". */
static bool report_fits(struct api_call *c, const struct verify_req *r,
                        const struct verify_input *in)
{
    size_t total, unsure, max = api_max_elements(c);
    enum core_status st = count_heads(r, in, false, &total, &unsure);
    bool at_least = false;

    if (st == CORE_OK && total > max && total - unsure <= max)
        st = count_heads(r, in, true, &total, &unsure);
    else if (st == CORE_OK && total > max && unsure) {
        total -= unsure;
        at_least = true;
    }
    if (st == CORE_OK && total <= max)
        return true;
    if (st == CORE_OK || st == CORE_ELIMIT)
        too_large(c, st == CORE_OK ? total : SIZE_MAX, at_least,
                  r && r->rank > 2 ? r->shape.B * r->shape.h : 1, !r);
    else
        api_fail_compute(c, st, in->dtype);
    return false;
}

/* 422 non_finite for head e of r whose pass overflowed: at the row of q,
 * k or v the core found (b, of e's one-head pass), or api_fail_compute's
 * answer when it found none (r NULL: the built-in example). */
static void fail_overflow(struct api_call *c, const struct verify_req *r, size_t e,
                          const struct attn_blame *found, enum attn_dtype dt)
{
    if (!r || found->input == ATTN_BLAME_NONE) {
        api_fail_compute(c, CORE_ENONFINITE, dt);
        return;
    }
    const struct attn_shape *s = &r->shape;
    struct attn_request rq = {.shape = *s, .params.dtype = dt};
    struct attn_blame b = *found;
    size_t hh = e % s->h;
    b.b = e / s->h;
    b.head = b.input == ATTN_BLAME_Q ? hh : hh / (s->h / s->h_kv);
    struct api_blame_at at;
    api_blame_at_tensors(&at, &r->q, &r->k, &r->v, &r->q);     /* no attn_bias here */
    api_fail_blame(c, &rq, &b, &at, NULL);
}

static void verify_answer(struct api_call *c, const struct verify_input *in,
                          const struct verify_req *r)
{
    bool builtin = !r;
    struct verify_report rep;
    struct api_buf buf;
    size_t bytes;
    enum core_status st;

    if (!report_fits(c, r, in))
        return;
    st = verify_run(in, &rep);
    if (st != CORE_OK) {
        if (st == CORE_ENONFINITE)
            fail_overflow(c, r, 0, &rep.blame, in->dtype);
        else
            api_fail_compute(c, st, in->dtype);
        verify_report_free(&rep);
        return;
    }
    if (!report_bytes(&rep, in, &bytes)) {
        verify_report_free(&rep);
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL, NULL);
        return;
    }
    api_buf_init(&buf, bytes);
    struct vw w = {.b = &buf, .dt = rep.dtype, .half = c->half, .where = {"inputs", NULL}};
    put_report(&w, &rep, in, builtin, api_now_us() - c->t0_us);
    verify_report_free(&rep);
    reply_report(c, &w);
}

/* ---- heads and batches -------------------------------------------------- */

/* "batch" (rank 4), "head" and "kv_head" of head e, then a comma. */
static void put_element_index(struct vw *w, const struct verify_req *r, size_t e)
{
    const struct attn_shape *s = &r->shape;
    size_t hh = e % s->h;

    if (r->rank == 4)
        api_buf_printf(w->b, "\"batch\":%zu,", e / s->h);
    api_buf_printf(w->b, "\"head\":%zu,\"kv_head\":%zu,", hh, hh / (s->h / s->h_kv));
}

/* {"passed","example","rank","shape","dtype","failed":[{index, "checks":[ids]}],
 *  "elements":[{index, one head's report members}], "elapsed_us"} */
static void put_batch(struct vw *w, const struct verify_req *r,
                      const struct verify_report *reps, uint64_t elapsed_us)
{
    const struct attn_shape *s = &r->shape;
    size_t E = s->B * s->h, e, i;
    bool passed = true, lead = true, first;
    struct verify_input in;
    char base[32];

    for (e = 0; e < E; e++)
        passed = passed && reps[e].passed;
    api_buf_printf(w->b, "{\"passed\":%s,\"example\":\"request\",\"rank\":%d,\"shape\":{",
                   passed ? "true" : "false", r->rank);
    if (r->rank == 4)
        api_buf_printf(w->b, "\"batch\":%zu,", s->B);
    api_buf_printf(w->b, "\"heads\":%zu,\"kv_heads\":%zu,\"n\":%zu,\"L\":%zu,\"d_k\":%zu,"
                   "\"d_v\":%zu},\"dtype\":\"%s\",\"failed\":[", s->h, s->h_kv, s->n, s->L,
                   s->d_k, s->d_v, api_dtype_name(w->dt, w->half));
    for (e = 0; e < E; e++) {
        if (reps[e].passed)
            continue;
        api_buf_puts(w->b, lead ? "{" : ",{");
        lead = false;
        put_element_index(w, r, e);
        api_buf_puts(w->b, "\"checks\":[");
        for (i = 0, first = true; i < reps[e].n_checks; i++)
            if (!reps[e].checks[i].passed) {
                api_buf_printf(w->b, "%s%d", first ? "" : ",", reps[e].checks[i].id);
                first = false;
            }
        api_buf_puts(w->b, "]}");
    }
    api_buf_puts(w->b, "],\"elements\":[");
    for (e = 0; e < E; e++) {
        element_input(r, e, &in);
        snprintf(base, sizeof base, "/elements/%zu", e);
        api_buf_puts(w->b, e ? ",{" : "{");
        put_element_index(w, r, e);
        put_report_members(w, base, &reps[e], &in, false);
        api_buf_putc(w->b, '}');
    }
    api_buf_printf(w->b, "],\"elapsed_us\":%llu}", (unsigned long long)elapsed_us);
}

/* The heads of a batch, run as pieces of the request's helper pool. */
struct batch_job {
    const struct verify_req *r;
    struct verify_report *reps;     /* [E], zeroed */
    enum core_status *st;           /* [E], CORE_ESTOPPED until run */
};

static void run_element(void *arg, size_t e, struct attn_ws *ws)
{
    struct batch_job *j = arg;
    struct verify_input in;

    element_input(j->r, e, &in);
    in.ws = ws;                     /* this thread's scratch */
    j->st[e] = verify_run(&in, &j->reps[e]);
}

/* Every head of a rank-3/4 request, each run as its own one-head report;
 * the heads are independent, so idle workers' helpers take some (a head's
 * report does not depend on the thread it ran on). */
static void verify_answer_batch(struct api_call *c, const struct verify_req *r)
{
    size_t E = r->shape.B * r->shape.h, bytes = 1u << 16, one, e;
    struct verify_input in;
    struct batch_job job = {r, NULL, NULL};
    enum core_status st = CORE_OK;
    bool fits = true;

    if (!report_fits(c, r, &r->in))
        return;
    job.reps = calloc(E, sizeof *job.reps);
    job.st = malloc(E * sizeof *job.st);            /* E <= VERIFY_API_MAX_HEADS */
    if (!job.reps || !job.st) {
        free(job.reps);
        free(job.st);
        api_fail_core(c, CORE_ENOMEM, NULL);
        return;
    }
    for (e = 0; e < E; e++)
        job.st[e] = CORE_ESTOPPED;  /* a piece the deadline skipped */
    attn_pool_run(attn_ws_pool(r->in.ws), run_element, &job, E, r->in.ws);
    for (e = 0; e < E && st == CORE_OK && fits; e++) {
        element_input(r, e, &in);
        st = job.st[e];
        fits = st != CORE_OK ||
               (report_bytes(&job.reps[e], &in, &one) && core_add(bytes, one, &bytes));
    }
    if (st == CORE_ENONFINITE) {
        fail_overflow(c, r, e - 1, &job.reps[e - 1].blame, r->in.dtype);
    } else if (st != CORE_OK) {
        api_fail_compute(c, st, r->in.dtype);
    } else if (!fits) {
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL, NULL);
    } else {
        struct api_buf buf;
        api_buf_init(&buf, bytes);
        struct vw w = {.b = &buf, .dt = r->in.dtype, .half = c->half};
        put_batch(&w, r, job.reps, api_now_us() - c->t0_us);
        reply_report(c, &w);
    }
    for (e = 0; e < E; e++)
        verify_report_free(&job.reps[e]);
    free(job.reps);
    free(job.st);
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
        verify_answer(c, &in, NULL);
        return;
    }
    if (strcmp(m, "POST") != 0) {
        api_fail_method(c, API_M_GET | API_M_POST);
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
    if (r.rank == 2)
        verify_answer(c, &r.in, &r);
    else
        verify_answer_batch(c, &r);
    verify_req_free(&r);
}
