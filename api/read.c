/*
 * api/read.c — jansson values -> core types, with JSON-pointer errors: the
 * options of a request (dtype, scale, softmax, causal, ALiBi, RoPE, return,
 * encoding, timeout, ...), biases and score-shaped matrices, and the whole
 * /v1/attention body. Its tensors are read by api/read_tensor.c.
 */
#include "api/read.h"
#include "api/codec/half.h"
#include "api/read_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stop.h"

/* ---- small helpers ---------------------------------------------------- */

/* A member of obj, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static bool get_finite(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

bool api_size_too_large(const json_t *v)
{
    double x = json_is_real(v) ? json_real_value(v) : 0;
    return x > 9007199254740992.0 && x == floor(x);
}

/* ---- options ---------------------------------------------------------- */

bool api_read_size(struct api_call *c, const json_t *v, const char *path,
                   size_t min, size_t max, size_t *out)
{
    if (!v || !get_size(v, out) || *out < min || *out > max) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected an integer in %zu..%zu",
                 min, max);
        return false;
    }
    return true;
}

/* Index of string v in names (NULL-terminated), or -1 (answered). */
static int read_enum(struct api_call *c, const json_t *v, const char *path,
                     const char *const *names, const char *expect)
{
    const char *s = json_string_value(v);
    int i;

    for (i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    api_fail(c, API_ERR_INVALID_FIELD, path, "expected %s", expect);
    return -1;
}

bool api_read_dtype(struct api_call *c, const json_t *v, const char *path,
                    enum attn_dtype *out, enum api_half *half)
{
    static const char *const names[] = {"float64", "float32", "float16", "bfloat16", NULL};
    int i;

    *out = ATTN_F64;
    *half = API_HALF_NONE;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"float64\", \"float32\", \"float16\" or "
                       "\"bfloat16\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_F64 : ATTN_F32;       /* half precision computes in float32 */
    *half = i == 2 ? API_HALF_F16 : i == 3 ? API_HALF_BF16 : API_HALF_NONE;
    return true;
}

bool api_read_scale(struct api_call *c, const json_t *v, const char *path,
                    double *out, bool *given)
{
    *given = false;
    if (!v)
        return true;
    if (!get_finite(v, out) || !(*out > 0)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a positive number");
        return false;
    }
    *given = true;
    return true;
}

bool api_read_round_half(struct api_call *c, const char *path, bool array,
                         bool from_text, double *x, size_t n)
{
    char pi[API_PATH_MAX];

    for (size_t i = 0; c->half && i < n; i++) {
        const char *at = array ? api_pointer_index(pi, sizeof pi, path, i) : path;
        const struct api_request *rq = c->req;
        bool tie = false;
        float f;
        if (!api_half_round(c->half, x[i], &f, from_text ? &tie : NULL) ||
            (tie && rq && api_half_fix_ties(rq->body, rq->body_len, rq->early, at,
                                            c->half, &f, 1) != 1)) {
            api_fail(c, API_ERR_NON_FINITE, at, "number is outside the %s range",
                     api_half_name(c->half));
            return false;
        }
        x[i] = f;
    }
    return true;
}

bool api_read_softmax(struct api_call *c, const json_t *obj,
                      const char *prefix, enum attn_softmax *softmax,
                      double *sink_logit)
{
    return api_read_softmax_ex(c, obj, prefix, false, softmax, sink_logit);
}

bool api_read_softmax_ex(struct api_call *c, const json_t *obj,
                         const char *prefix, bool sink_array,
                         enum attn_softmax *softmax, double *sink_logit)
{
    static const char *const names[] = {"standard", "softmax1", "sink", NULL};
    static const enum attn_softmax kinds[] = {
        ATTN_SOFTMAX_STANDARD, ATTN_SOFTMAX_ONE, ATTN_SOFTMAX_SINK};
    const json_t *v = member(obj, "softmax"), *s = member(obj, "sink_logit");
    char p[API_PATH_MAX];
    int i = 0;

    *softmax = ATTN_SOFTMAX_STANDARD;
    *sink_logit = 0;
    if (v && (i = read_enum(c, v, sub(p, prefix, "softmax"), names,
                            "\"standard\", \"softmax1\" or \"sink\"")) < 0)
        return false;
    *softmax = kinds[i];
    sub(p, prefix, "sink_logit");
    if (*softmax == ATTN_SOFTMAX_SINK) {
        if (!s || (!(sink_array && json_is_array(s)) && !get_finite(s, sink_logit))) {
            api_fail(c, API_ERR_INVALID_FIELD, p, sink_array
                     ? "softmax \"sink\" needs a finite sink_logit or one per head"
                     : "softmax \"sink\" needs a finite sink_logit");
            return false;
        }
        if (!json_is_array(s) && !api_read_round_half(c, p, false, true, sink_logit, 1))
            return false;
    } else if (s) {
        api_fail(c, API_ERR_INVALID_FIELD, p,
                 "sink_logit is only allowed with softmax \"sink\"");
        return false;
    }
    return true;
}

bool api_read_causal(struct api_call *c, const json_t *v, const char *path,
                     enum attn_causal *out)
{
    static const char *const names[] = {"bottom_right", "top_left", NULL};
    int i;

    *out = ATTN_CAUSAL_NONE;
    if (!v || json_is_false(v))
        return true;
    if (json_is_true(v)) {
        *out = ATTN_CAUSAL_BOTTOM_RIGHT;
        return true;
    }
    if ((i = read_enum(c, v, path, names,
                       "true, false, \"bottom_right\" or \"top_left\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    return true;
}

bool api_read_alibi(struct api_call *c, const json_t *v, const char *path,
                    size_t heads, bool *on, double **slopes)
{
    static const char *const fields[] = {"slopes", NULL};
    char p[API_PATH_MAX], pi[API_PATH_MAX];
    const json_t *arr;
    size_t i, bytes;

    *on = false;
    *slopes = NULL;
    if (!v || json_is_false(v))
        return true;
    if (json_is_true(v)) {
        *on = true;
        return true;
    }
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected true, false or {\"slopes\":[…]}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    arr = json_object_get(v, "slopes");
    sub(p, path, "slopes");
    if (!json_is_array(arr)) {
        api_fail(c, API_ERR_INVALID_FIELD, p, "expected an array of %zu numbers", heads);
        return false;
    }
    if (json_array_size(arr) != heads) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, p, "expected %zu slopes (one per head), got %zu",
                 heads, json_array_size(arr));
        return false;
    }
    if (!core_mul(heads, sizeof **slopes, &bytes) || !(*slopes = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, p, "out of memory");
        return false;
    }
    for (i = 0; i < heads; i++) {
        if (!get_finite(json_array_get(arr, i), &(*slopes)[i]) || !((*slopes)[i] >= 0)) {
            free(*slopes);
            *slopes = NULL;
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, p, i),
                     "expected a finite number >= 0 (the slope m of -m*|P_q - P_k|)");
            return false;
        }
    }
    *on = true;
    return true;
}

bool api_read_empty_rows(struct api_call *c, const json_t *v,
                         const char *path, enum attn_empty_rows *out)
{
    static const char *const names[] = {"zero", "error", NULL};
    int i;

    *out = ATTN_EMPTY_ZERO;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"zero\" or \"error\"")) < 0)
        return false;
    *out = i == 0 ? ATTN_EMPTY_ZERO : ATTN_EMPTY_ERROR;
    return true;
}

bool api_read_encoding(struct api_call *c, const json_t *v, const char *path,
                       enum api_encoding *out)
{
    static const char *const names[] = {"json", "base64", NULL};
    int i;

    *out = API_ENC_JSON;
    if (!v)
        return true;
    if ((i = read_enum(c, v, path, names, "\"json\" or \"base64\"")) < 0)
        return false;
    *out = i == 0 ? API_ENC_JSON : API_ENC_BASE64;
    return true;
}

bool api_read_digits(struct api_call *c, const json_t *v, const char *path,
                     int *digits)
{
    double x;

    *digits = 0;
    if (!v)
        return true;
    if (!get_finite(v, &x) || x != floor(x) || x < 1 || x > 17) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected an integer 1..17");
        return false;
    }
    *digits = (int)x;
    return true;
}

/* A deadline of v whole units (us_per_unit microseconds each) in
 * [lo, 24 h]: it lowers the stop's; 0, where lo allows it, is none. */
static bool read_deadline(struct api_call *c, const json_t *v, const char *path,
                          double lo, double us_per_unit, const char *unit)
{
    double x, hi = 86400e6 / us_per_unit;
    struct attn_stop *stop = attn_ws_stop(c->req->ws);

    if (!v)
        return true;
    if (!get_finite(v, &x) || x != floor(x) || x < lo || x > hi) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected an integer number of %s "
                 "%.0f..%.0f%s", unit, lo, hi, lo == 0 ? " (0: none)" : "");
        return false;
    }
    if (stop && x > 0)                      /* whole milliseconds, rounded up */
        attn_stop_within_ms(stop, (uint64_t)ceil(x * us_per_unit / 1000.0));
    return true;
}

bool api_read_timeout(struct api_call *c, const json_t *v, const char *path)
{
    return read_deadline(c, v, path, 1, 1000, "milliseconds");
}

bool api_read_timeout_us(struct api_call *c, const json_t *v, const char *path)
{
    return read_deadline(c, v, path, 0, 1, "microseconds");
}

/* ---- biases and score-shaped matrices --------------------------------- */

/* One bias vector: [d] shared, or [heads][d] (a leading 1 is shared too). */
static bool read_bias_one(struct api_call *c, const json_t *v, const char *path,
                          enum attn_dtype dt, size_t heads, size_t d,
                          size_t *budget, struct api_tensor *t, size_t *out_heads)
{
    struct api_tensor_spec spec = {dt, API_ELEM_REAL, 1, 2, budget};
    size_t h, rows, cols;

    *out_heads = 0;
    if (!v)
        return true;
    if (!api_read_tensor(c, v, path, &spec, t))
        return false;
    api_tensor_heads(t, &h, &rows, &cols);
    h = t->rank == 2 ? t->shape[0] : 1;
    if (cols != d || (h != 1 && h != heads)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "expected [%zu] or [%zu][%zu], got %s[%zu]", d, heads, d,
                 t->rank == 2 ? "[…]" : "", cols);
        api_tensor_free(t);
        return false;
    }
    *out_heads = h;
    return true;
}

bool api_read_bias(struct api_call *c, const json_t *v, const char *path,
                   enum attn_dtype dt, const struct attn_shape *s,
                   size_t *budget, struct api_bias *out)
{
    static const char *const fields[] = {"q", "k", "v", NULL};
    char p[API_PATH_MAX];

    memset(out, 0, sizeof *out);
    if (!v)
        return true;
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected {\"q\":…,\"k\":…,\"v\":…}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    if (read_bias_one(c, member(v, "q"), sub(p, path, "q"), dt, s->h, s->d_k,
                      budget, &out->q, &out->q_heads) &&
        read_bias_one(c, member(v, "k"), sub(p, path, "k"), dt, s->h_kv, s->d_k,
                      budget, &out->k, &out->k_heads) &&
        read_bias_one(c, member(v, "v"), sub(p, path, "v"), dt, s->h_kv, s->d_v,
                      budget, &out->v, &out->v_heads))
        return true;
    api_bias_free(out);
    return false;
}

void api_bias_free(struct api_bias *b)
{
    api_tensor_free(&b->q);
    api_tensor_free(&b->k);
    api_tensor_free(&b->v);
    b->q_heads = b->k_heads = b->v_heads = 0;
}

void api_bias_inputs(const struct api_bias *b, struct attn_inputs *in)
{
    in->bias_q = b->q.data;
    in->bias_k = b->k.data;
    in->bias_v = b->v.data;
    in->bias_q_heads = b->q.data ? b->q_heads : 0;
    in->bias_k_heads = b->k.data ? b->k_heads : 0;
    in->bias_v_heads = b->v.data ? b->v_heads : 0;
}

bool api_widen_heads(struct api_call *c, const char *path, size_t B, size_t h, size_t nl,
                     size_t esz, size_t *budget, void **data, size_t *count)
{
    size_t total, bytes, b, i, row = nl * esz;     /* row fits: data holds it */
    char *wide;

    if (!core_mul3(B, h, nl, &total) || total - *count > *budget) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "the matrix copied to every head "
                 "exceeds the request's remaining limit of %zu numbers "
                 "(--max-elements)", *budget);
        return false;
    }
    if (!core_mul(total, esz, &bytes) || !(wide = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, path, "out of memory");
        return false;
    }
    for (b = 0; b < B; b++)
        for (i = 0; i < h; i++)
            memcpy(wide + (b * h + i) * row, (char *)*data + b * row, row);
    *budget -= total - *count;
    free(*data);
    *data = wide;
    *count = total;
    return true;
}

/* A [B][1][n][L] tensor copied to every one of h heads: [B][h][n][L]. */
static bool widen_heads(struct api_call *c, const char *path, size_t B,
                        size_t h, size_t nl, size_t esz, size_t *budget,
                        struct api_tensor *t)
{
    if (!api_widen_heads(c, path, B, h, nl, esz, budget, &t->data, &t->count))
        return false;
    t->shape[1] = h;
    return true;
}

bool api_read_score_matrix(struct api_call *c, const json_t *v,
                           const char *path, enum api_elem elem,
                           enum attn_dtype dt, const struct attn_shape *s,
                           size_t *budget, struct api_tensor *out,
                           size_t *heads)
{
    struct api_tensor_spec spec = {dt, elem, 2, 4, budget};
    size_t h, rows, cols, B = s->B ? s->B : 1, b;

    *heads = 0;
    memset(out, 0, sizeof *out);
    if (!v)
        return true;
    if (!api_read_tensor(c, v, path, &spec, out))
        return false;
    api_tensor_heads(out, &h, &rows, &cols);
    b = out->rank == 4 ? out->shape[0] : 1;
    if (rows != s->n || cols != s->L || (h != 1 && h != s->h) ||
        (b != 1 && b != B)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "expected [n][L] = [%zu][%zu], [h][n][L] = [%zu][%zu][%zu] "
                 "or [B][h][n][L] = [%zu][%zu][%zu][%zu]",
                 s->n, s->L, s->h, s->n, s->L, B, s->h, s->n, s->L);
        api_tensor_free(out);
        return false;
    }
    if (b > 1 && h != s->h &&
        !widen_heads(c, path, b, s->h, s->n * s->L,
                     elem == API_ELEM_BOOL ? 1 : attn_dtype_size(dt), budget, out)) {
        api_tensor_free(out);
        return false;
    }
    *heads = b > 1 ? b * s->h : h;
    return true;
}

/* ---- the whole /v1/attention body ------------------------------------- */

/* The body's fields, in the order of attention_fields. */
enum att_field {
    AF_Q, AF_K, AF_V, AF_BIAS, AF_ATTN_BIAS, AF_MASK, AF_CAUSAL, AF_ALIBI,
    AF_ROPE, AF_SCALE, AF_SOFTMAX, AF_SINK_LOGIT, AF_EMPTY_ROWS, AF_DTYPE,
    AF_RETURN, AF_ENCODING, AF_DIGITS, AF_HEADS, AF_TOP_K, AF_TOKENS, AF_TIMEOUT_MS,
    AF_POSITIONS, AF_SEGMENTS, AF_WINDOW, AF_SOFTCAP, AF_COUNT
};

static const char *const attention_fields[AF_COUNT + 1] = {
    "q", "k", "v", "bias", "attn_bias", "mask", "causal", "alibi", "rope",
    "scale", "softmax", "sink_logit", "empty_rows", "dtype", "return",
    "encoding", "digits", "heads", "weights_top_k", "tokens", "timeout_ms",
    "positions", "segments", "window", "softcap", NULL};

/*
 * api_check_fields(c, body, "", attention_fields) and member(body, field)
 * for every field in one pass over the body's members (a hash lookup per
 * absent field showed in the small request's profile): m[f] is what
 * member() would return. A key is known, as for api_check_fields, when it
 * matches a field as a C string; it is that field's member, as for
 * json_object_get, only when its length matches too (a key with a NUL).
 */
static bool body_members(struct api_call *c, const json_t *body, const json_t **m)
{
    const char *key;
    size_t key_len;
    json_t *val;
    int f;

    for (f = 0; f < AF_COUNT; f++)
        m[f] = NULL;
    json_object_keylen_foreach((json_t *)body, key, key_len, val) {
        char path[128];

        for (f = 0; f < AF_COUNT; f++)
            if (strcmp(attention_fields[f], key) == 0)
                break;
        if (f == AF_COUNT && json_is_null(val))
            continue;                   /* absent, as for api_check_fields */
        if (f == AF_COUNT) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path, "",
                     key), "unknown field \"%s\"", key);
            return false;
        }
        if (key_len == strlen(key) && !json_is_null(val))
            m[f] = val;
    }
    return true;
}

/* q, k, v and the shape they imply. */
static bool read_qkv(struct api_call *c, const json_t *const *m, size_t *budget,
                     const struct api_pre *pre, struct api_attention_req *a)
{
    struct api_tensor_spec spec = {a->r.params.dtype, API_ELEM_REAL, 2, 4, budget};

    if (!api_read_tensor_keep(c, m[AF_Q], "/q", &spec, pre, &a->q) ||
        !api_read_tensor_keep(c, m[AF_K], "/k", &spec, pre, &a->k) ||
        !api_read_tensor_keep(c, m[AF_V], "/v", &spec, pre, &a->v))
        return false;
    a->q_rank = a->q.rank;
    return api_qkv_shape(c, &a->q, &a->k, &a->v, &a->r.shape);
}

bool api_qkv_shape(struct api_call *c, const struct api_tensor *q, const struct api_tensor *k,
                   const struct api_tensor *v, struct attn_shape *s)
{
    size_t dk2, hv, Lv;

    if (k->rank != q->rank || v->rank != q->rank) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, k->rank != q->rank ? "/k" : "/v",
                 "q, k and v must have the same rank (q has %d)", q->rank);
        return false;
    }
    s->B = q->rank == 4 ? q->shape[0] : 1;
    if (q->rank == 4 && (k->shape[0] != s->B || v->shape[0] != s->B)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, k->shape[0] != s->B ? "/k" : "/v",
                 "q, k and v must have the same batch size (q has %zu)", s->B);
        return false;
    }
    api_tensor_heads(q, &s->h, &s->n, &s->d_k);
    api_tensor_heads(k, &s->h_kv, &s->L, &dk2);
    api_tensor_heads(v, &hv, &Lv, &s->d_v);
    if (dk2 != s->d_k) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/k", "k rows have %zu numbers, q rows %zu",
                 dk2, s->d_k);
        return false;
    }
    if (s->h % s->h_kv != 0) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/k",
                 "q's %zu heads are not a multiple of k's %zu heads", s->h, s->h_kv);
        return false;
    }
    if (hv != s->h_kv || Lv != s->L) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/v",
                 "v must have k's %zu heads and %zu rows, has %zu and %zu",
                 s->h_kv, s->L, hv, Lv);
        return false;
    }
    return true;
}

/* Options that need no shape, then those that do. */
static bool read_options(struct api_call *c, const json_t *body,
                         const json_t *const *m, struct api_attention_req *a)
{
    struct attn_request *r = &a->r;
    struct attn_params *p = &r->params;
    bool given;

    if (!api_read_sinks(c, body, "", r->shape.h, p, &a->sink_logits) ||
        !api_read_scale(c, m[AF_SCALE], "/scale", &p->scale, &given) ||
        !api_read_softcap(c, m[AF_SOFTCAP], "/softcap", &p->softcap) ||
        !api_read_window(c, m[AF_WINDOW], "/window", &r->window) ||
        !api_read_causal(c, m[AF_CAUSAL], "/causal", &r->causal) ||
        !api_read_empty_rows(c, m[AF_EMPTY_ROWS], "/empty_rows",
                             &r->empty_rows) ||
        !api_read_return(c, m[AF_RETURN], "/return", &r->outputs, &a->x.want) ||
        !api_read_extras(c, "", m[AF_HEADS], m[AF_TOP_K], m[AF_TOKENS], &r->outputs,
                         &a->x) ||
        !api_read_encoding(c, m[AF_ENCODING], "/encoding", &a->encoding) ||
        !api_read_digits(c, m[AF_DIGITS], "/digits", &a->digits) ||
        !api_read_timeout(c, m[AF_TIMEOUT_MS], "/timeout_ms") ||
        !api_read_rope(c, m[AF_ROPE], "/rope", r->shape.d_k, p) ||
        !api_read_alibi(c, m[AF_ALIBI], "/alibi", r->shape.h, &p->alibi,
                        &a->alibi_slopes) ||
        !api_check_float32_params(c, p, r->shape.h, ""))
        return false;
    if (!given)
        p->scale = attn_default_scale(r->shape.d_k);
    p->alibi_slopes = a->alibi_slopes;
    return true;
}

static bool read_arrays(struct api_call *c, const json_t *const *m, size_t *budget,
                        struct api_attention_req *a)
{
    struct attn_request *r = &a->r;

    if (!api_read_bias(c, m[AF_BIAS], "/bias", r->params.dtype,
                       &r->shape, budget, &a->bias) ||
        !api_read_score_matrix(c, m[AF_ATTN_BIAS], "/attn_bias",
                               API_ELEM_NULLABLE, r->params.dtype, &r->shape,
                               budget, &a->attn_bias, &r->attn_bias_heads) ||
        !api_read_score_matrix(c, m[AF_MASK], "/mask", API_ELEM_BOOL,
                               r->params.dtype, &r->shape, budget, &a->mask,
                               &r->mask_heads) ||
        !api_read_seqs(c, m[AF_POSITIONS], m[AF_SEGMENTS], "", &r->shape,
                       budget, &a->seqs))
        return false;
    api_seqs_request(&a->seqs, r);
    r->attn_bias = a->attn_bias.data;
    r->mask = a->mask.data;
    a->in.q = a->q.data;
    a->in.k = a->k.data;
    a->in.v = a->v.data;
    api_bias_inputs(&a->bias, &a->in);
    return true;
}

bool api_read_attention(struct api_call *c, const json_t *body,
                        struct api_attention_req *out)
{
    return api_read_attention_pre(c, body, NULL, out);
}

bool api_read_attention_pre(struct api_call *c, const json_t *body,
                            const struct api_pre *pre,
                            struct api_attention_req *out)
{
    size_t budget = api_max_elements(c);
    const json_t *m[AF_COUNT];
    enum core_status st;

    memset(out, 0, sizeof *out);
    if (!body_members(c, body, m) ||
        !api_read_dtype(c, m[AF_DTYPE], "/dtype", &out->r.params.dtype, &c->half) ||
        !read_qkv(c, m, &budget, pre, out) ||
        !read_options(c, body, m, out) ||
        !read_arrays(c, m, &budget, out) ||
        !api_extras_check(c, "", &out->x, &out->r.shape))
        goto fail;
    st = api_extras_check_request(&out->r);
    if (st != CORE_OK) {
        api_fail_core(c, st, NULL);
        goto fail;
    }
    return true;
fail:
    api_attention_req_free(out);
    return false;
}

void api_attention_req_free(struct api_attention_req *r)
{
    api_tensor_free(&r->q);
    api_tensor_free(&r->k);
    api_tensor_free(&r->v);
    api_bias_free(&r->bias);
    api_tensor_free(&r->attn_bias);
    api_tensor_free(&r->mask);
    free(r->alibi_slopes);
    api_extras_free(&r->x);
    free(r->sink_logits);
    api_seqs_free(&r->seqs);
    memset(r, 0, sizeof *r);
}
