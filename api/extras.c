/*
 * api/extras.c — reading, sizing and writing the part-2 returns of an
 * attention request (api/extras.h): "qk", "lse", "stats", `heads`,
 * `weights_top_k` and `tokens`.
 *
 * Reading validates every value with its JSON pointer before anything is
 * computed; sizing adds the extras to the response's number count (the
 * --max-elements check) and byte cap; writing appends the members straight
 * into the response buffer like api/codec/write.c does for the v1 outputs. Rows
 * of every returned array follow the order of `heads`.
 */
#include "api/extras.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "api/internal.h"
#include "api/read.h"
#include "api/codec/write.h"

/* ---- reading ----------------------------------------------------------- */

bool api_read_return(struct api_call *c, const json_t *v, const char *path,
                     unsigned *outputs, unsigned *want)
{
    static const char *const names[] = {"scores", "weights", "output", "qk", "lse", "stats"};
    static const unsigned bits[] = {ATTN_OUT_SCORES, ATTN_OUT_WEIGHTS, ATTN_OUT_OUTPUT,
                                    ATTN_X_QK, ATTN_X_LSE, ATTN_X_STATS};
    size_t nn = want ? 6 : 3;
    const char *expect = want ? "a non-empty subset of [\"scores\",\"weights\",\"output\","
                                "\"qk\",\"lse\",\"stats\"]"
                              : "a non-empty subset of [\"scores\",\"weights\",\"output\"]";
    char pi[API_PATH_MAX];

    *outputs = ATTN_OUT_ALL;
    if (want)
        *want = 0;
    if (!v)
        return true;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected %s", expect);
        return false;
    }
    *outputs = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *s = json_string_value(json_array_get(v, i));
        size_t k = 0;
        while (s && k < nn && strcmp(s, names[k]) != 0)
            k++;
        if (!s || k == nn) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, path, i),
                     "expected one of %s", expect + strlen("a non-empty subset of "));
            return false;
        }
        if (k < 3)
            *outputs |= bits[k];
        else
            *want |= bits[k];
    }
    return true;
}

/* An integer >= min that fits size_t (a JSON integer or an integral real). */
static bool read_count(const json_t *v, size_t min, size_t *out)
{
    double d;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || (unsigned long long)i < min)
            return false;
        *out = (size_t)i;
        return true;
    }
    if (!json_is_real(v))
        return false;
    d = json_real_value(v);
    if (!(d >= (double)min && d < 9007199254740992.0) || d != (double)(size_t)d)
        return false;
    *out = (size_t)d;
    return true;
}

static bool read_heads(struct api_call *c, const char *path, const json_t *v,
                       struct api_extras *x)
{
    char pi[API_PATH_MAX];
    size_t m = json_array_size(v);

    if (!json_is_array(v) || m == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a non-empty array of head indices");
        return false;
    }
    x->heads = malloc(m * sizeof *x->heads);
    if (!x->heads) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return false;
    }
    x->nh = m;
    for (size_t i = 0; i < m; i++) {
        api_pointer_index(pi, sizeof pi, path, i);
        if (!read_count(json_array_get(v, i), 0, &x->heads[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, pi, "expected a head index (an integer >= 0)");
            return false;
        }
        for (size_t j = 0; j < i; j++)
            if (x->heads[j] == x->heads[i]) {
                api_fail(c, API_ERR_INVALID_FIELD, pi, "head %zu is listed twice", x->heads[i]);
                return false;
            }
    }
    return true;
}

/* tokens.q / tokens.k: an array of strings, each at most API_TOKEN_MAX
 * bytes and without NUL (jansson has checked the UTF-8). */
static bool read_labels(struct api_call *c, const char *path, const json_t *v)
{
    char pi[API_PATH_MAX];

    if (!json_is_array(v) || json_array_size(v) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a non-empty array of strings");
        return false;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        api_pointer_index(pi, sizeof pi, path, i);
        if (!json_is_string(s)) {
            api_fail(c, API_ERR_INVALID_FIELD, pi, "expected a string");
            return false;
        }
        size_t len = json_string_length(s);
        if (len > API_TOKEN_MAX || strlen(json_string_value(s)) != len) {
            api_fail(c, API_ERR_INVALID_FIELD, pi,
                     "a token is at most %d bytes of UTF-8 without NUL", API_TOKEN_MAX);
            return false;
        }
    }
    return true;
}

/* tokens.q or tokens.k (side), NULL when absent or JSON null: a null side
 * is absent, as every optional member's null is. */
static const json_t *labels(const json_t *tokens, const char *side)
{
    const json_t *a = tokens ? json_object_get(tokens, side) : NULL;
    return json_is_null(a) ? NULL : a;
}

static bool read_tokens(struct api_call *c, const char *path, const json_t *v,
                        struct api_extras *x)
{
    static const char *const fields[] = {"q", "k", NULL};
    char pq[API_PATH_MAX], pk[API_PATH_MAX];
    const json_t *q, *k;

    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected {\"q\":[strings],\"k\":[strings]}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    q = labels(v, "q");
    k = labels(v, "k");
    if (!q && !k) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "give \"q\", \"k\" or both");
        return false;
    }
    if ((q && !read_labels(c, api_pointer_key(pq, sizeof pq, path, "q"), q)) ||
        (k && !read_labels(c, api_pointer_key(pk, sizeof pk, path, "k"), k)))
        return false;
    x->tokens = json_incref((json_t *)v);
    return true;
}

bool api_read_extras(struct api_call *c, const char *prefix, const json_t *heads,
                     const json_t *top_k, const json_t *tokens, unsigned *outputs,
                     struct api_extras *x)
{
    char p[API_PATH_MAX];

    if (heads && !read_heads(c, api_pointer_key(p, sizeof p, prefix, "heads"), heads, x))
        return false;
    if (top_k) {
        api_pointer_key(p, sizeof p, prefix, "weights_top_k");
        if (!read_count(top_k, 1, &x->top_k) || x->top_k > (size_t)INT32_MAX) {
            api_fail(c, API_ERR_INVALID_FIELD, p, "expected an integer in 1..%d", INT32_MAX);
            return false;
        }
        if (!(*outputs & ATTN_OUT_WEIGHTS)) {
            api_fail(c, API_ERR_INVALID_FIELD, p,
                     "weights_top_k shapes the weights: add \"weights\" to \"return\"");
            return false;
        }
        *outputs &= ~(unsigned)ATTN_OUT_WEIGHTS;
        x->want |= ATTN_X_TOPK;
    }
    return !tokens || read_tokens(c, api_pointer_key(p, sizeof p, prefix, "tokens"), tokens, x);
}

bool api_extras_check(struct api_call *c, const char *prefix, struct api_extras *x,
                      const struct attn_shape *s)
{
    char p[API_PATH_MAX], pi[API_PATH_MAX];
    static const char *const side[2] = {"q", "k"};
    size_t want[2] = {s->n, s->L};

    if (x->heads) {
        api_pointer_key(p, sizeof p, prefix, "heads");
        for (size_t i = 0; i < x->nh; i++)
            if (x->heads[i] >= s->h) {
                api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, p, i),
                         "head %zu does not exist (q has %zu heads)", x->heads[i], s->h);
                return false;
            }
    } else {
        x->nh = s->h;
    }
    for (int t = 0; x->tokens && t < 2; t++) {
        const json_t *a = labels(x->tokens, side[t]);
        if (a && json_array_size(a) != want[t]) {
            api_pointer_key(pi, sizeof pi, prefix, "tokens");
            api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(p, sizeof p, pi, side[t]),
                     "tokens.%s has %zu labels for %zu %s", side[t], json_array_size(a),
                     want[t], t ? "keys" : "query rows");
            return false;
        }
    }
    return true;
}

enum core_status api_extras_check_request(const struct attn_request *r)
{
    struct attn_request rr = *r;
    if (!rr.outputs)
        rr.outputs = ATTN_OUT_SCORES;
    return attn_check(&rr);
}

/* ---- sizes and buffers ------------------------------------------------- */

/* Rows of the extras: B·nh·n (every batch element, the chosen heads). */
static bool x_rows(const struct attn_request *r, const struct api_extras *x, size_t *rows)
{
    return core_mul3(r->shape.B > 1 ? r->shape.B : 1, x->nh, r->shape.n, rows);
}

bool api_extras_numbers(const struct attn_request *r, const struct api_extras *x,
                        size_t *count)
{
    if (!x)
        return api_attention_numbers(r, count);
    struct attn_request rs = *r;
    size_t rows, t, total;
    rs.shape.h = x->nh;
    if (!api_attention_numbers(&rs, &total) || !x_rows(r, x, &rows))
        return false;
    if ((x->want & ATTN_X_QK) &&
        (!core_mul(rows, r->shape.L, &t) || !core_add(total, t, &total)))
        return false;
    if ((x->want & ATTN_X_LSE) && !core_add(total, rows, &total))
        return false;
    if ((x->want & ATTN_X_STATS) &&
        (!core_mul(rows, 4, &t) || !core_add(total, t, &total)))
        return false;
    if ((x->want & ATTN_X_TOPK) &&
        (!core_mul3(rows, x->top_k, 2, &t) || !core_add(total, t, &total)))
        return false;
    *count = total;
    return true;
}

bool api_extras_fail_topk(struct api_call *c, const struct attn_request *r,
                          const struct api_extras *x, size_t max, const char *path)
{
    if (!x || !(x->want & ATTN_X_TOPK))
        return false;
    struct api_extras y = *x;
    size_t n;
    y.want &= ~(unsigned)ATTN_X_TOPK;
    if (!api_extras_numbers(r, &y, &n) || n > max)
        return false;
    api_fail(c, API_ERR_RESPONSE_TOO_LARGE, path,
             "the response would hold more than %zu numbers (--max-elements): "
             "weights_top_k %zu gives every query row %zu indices and values, "
             "padded with -1 and 0 past its keys (L = %zu); ask for a smaller weights_top_k",
             max, x->top_k, x->top_k, r->shape.L);
    return true;
}

bool api_extras_bytes(const struct attn_request *r, const struct api_extras *x,
                      size_t *bytes)
{
    size_t rows, t = 0;
    if (!x || !x_rows(r, x, &rows) || !core_mul(rows, 96, &t))
        return false;
    t += 64 * (x->heads ? x->nh : 1) + 256;
    for (int s = 0; x->tokens && s < 2; s++) {
        size_t m = json_array_size(labels(x->tokens, s ? "k" : "q"));
        /* each label escaped (\u00XX at worst), quoted, with its comma */
        if (!core_mul(m, 6 * API_TOKEN_MAX + 3, &rows) || !core_add(t, rows, &t))
            return false;
    }
    *bytes = t;
    return true;
}

bool api_extras_alloc(const struct attn_request *r, struct api_extras *x,
                      struct attn_result *res)
{
    struct attn_request rs = *r;
    size_t esz = attn_dtype_size(r->params.dtype), rows, qk = 0, k8 = 0, kv = 0, total;
    rs.shape.h = x->nh;
    if (!api_result_alloc(&rs, res) || !x_rows(r, x, &rows))
        return false;
    /* qk rounded up to 8 bytes: a float32 one of odd rows x L would leave
     * every part after it, the int64 argmax and indices among them, 4 off */
    if ((x->want & ATTN_X_QK) &&
        (!core_mul3(rows, r->shape.L, esz, &qk) || !core_add(qk, 7, &qk)))
        return false;
    qk &= ~(size_t)7;
    if ((x->want & ATTN_X_TOPK) &&
        (!core_mul3(rows, x->top_k, 8, &k8) || !core_mul3(rows, x->top_k, esz, &kv)))
        return false;
    /* qk, then [rows] of lse, entropy, max_weight, mass (esz each), argmax
     * (8), then top indices and values: one block, 8-byte aligned parts */
    size_t small = rows * 8;
    if (!core_add(qk, 5 * small, &total) || !core_add(total, k8, &total) ||
        !core_add(total, kv, &total))
        return false;
    char *b = malloc(total ? total : 1);
    if (!b)
        return false;
    x->block = b;
    struct attn_extras_out *o = &x->xo;
    memset(o, 0, sizeof *o);
    if (x->want & ATTN_X_QK)
        o->qk = b;
    b += qk;
    if (x->want & ATTN_X_LSE)
        o->lse = b;
    if (x->want & ATTN_X_STATS) {
        o->entropy = b + small;
        o->max_weight = b + 2 * small;
        o->mass = b + 3 * small;
        o->argmax = (int64_t *)(void *)(b + 4 * small);
    }
    b += 5 * small;
    if (x->want & ATTN_X_TOPK) {
        o->top_idx = (int64_t *)(void *)b;
        o->top_val = b + k8;
    }
    return true;
}

void api_extras_free(struct api_extras *x)
{
    free(x->heads);
    free(x->block);
    json_decref(x->tokens);
    memset(x, 0, sizeof *x);
}

const char *api_extras_round_half(const struct attn_request *r, const struct api_extras *x,
                                  enum api_half h, size_t *at)
{
    const struct attn_extras_out *o = &x->xo;
    size_t rows = 0;
    (void)x_rows(r, x, &rows);          /* allocated already */
    const struct { const char *name; void *data; size_t n; } m[] = {
        {"qk", o->qk, rows * r->shape.L}, {"lse", o->lse, rows},
        {"stats.entropy", o->entropy, rows}, {"stats.max_weight", o->max_weight, rows},
        {"stats.mass", o->mass, rows}, {"weights.values", o->top_val, rows * x->top_k}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (!m[i].data)
            continue;
        *at = api_half_round_matrix(h, m[i].data, m[i].n);
        if (*at < m[i].n)
            return m[i].name;
    }
    return NULL;
}

bool api_extras_qk_overflow(const struct attn_request *r, const struct api_extras *x,
                            size_t *at)
{
    const void *qk = x->xo.qk;
    size_t rows = 0;
    (void)x_rows(r, x, &rows);          /* allocated already */
    size_t n = qk ? rows * r->shape.L : 0;
    bool f64 = r->params.dtype == ATTN_F64;
    for (*at = 0; *at < n; ++*at)
        if (!isfinite(f64 ? ((const double *)qk)[*at] : (double)((const float *)qk)[*at]))
            return true;
    return false;
}

struct attn_extras api_extras_core(const struct api_extras *x)
{
    return (struct attn_extras){x->want, x->heads, x->nh, x->top_k};
}

/* ---- writing ----------------------------------------------------------- */

static void put_key(struct api_buf *b, const char *key)
{
    api_buf_putc(b, '"');
    api_buf_puts(b, key);
    api_buf_puts(b, "\":");
}

static void put_int(struct api_buf *b, int64_t v, bool neg_null)
{
    char t[24];
    if (neg_null && v < 0) {
        api_buf_puts(b, "null");
        return;
    }
    int len = snprintf(t, sizeof t, "%lld", (long long)v);
    api_buf_append(b, t, (size_t)len);
}

/* The shape of an extra with cols numbers a row (0: one number a row) in
 * the rank of q: [rows]((,cols)) for rank 2, [nh][rows].. for rank 3,
 * [B][nh][rows].. for rank 4. Returns the rank. */
static int x_shape(const struct api_attention_view *v, size_t cols, size_t sh[4])
{
    size_t full[4] = {v->req->shape.B > 1 ? v->req->shape.B : 1, v->x->nh, v->req->shape.n,
                      cols};
    int lead = v->q_rank == 4 ? 0 : v->q_rank == 3 ? 1 : 2, rank = 4 - lead - !cols;
    memcpy(sh, full + lead, (size_t)rank * sizeof *sh);
    return rank;
}

/* int64 values as nested arrays of rank dimensions shape (row-major); a
 * negative value is null when neg_null. */
static const int64_t *write_ints(struct api_buf *b, const int64_t *a, int rank,
                                 const size_t *shape, bool neg_null)
{
    api_buf_putc(b, '[');
    for (size_t i = 0; i < shape[0]; i++) {
        if (i)
            api_buf_putc(b, ',');
        if (rank > 1)
            a = write_ints(b, a, rank - 1, shape + 1, neg_null);
        else
            put_int(b, *a++, neg_null);
    }
    api_buf_putc(b, ']');
    return a;
}

static void write_x_ints(struct api_buf *b, const struct api_attention_view *v,
                         const int64_t *a, size_t cols, bool neg_null)
{
    size_t sh[4];
    int rank = x_shape(v, cols, sh);
    write_ints(b, a, rank, sh, neg_null);
}

/* A matrix of the dtype with rows of cols numbers (cols 0: one number a
 * row), shaped like the response's other outputs. */
static void write_mat(struct api_buf *b, const struct api_attention_view *v, const void *d,
                      size_t cols)
{
    size_t sh[4];
    int rank = x_shape(v, cols, sh);
    if (v->half && v->encoding == API_ENC_BASE64)
        api_write_matrix_b64_half(b, d, v->half, rank, sh);
    else if (v->half)
        api_write_matrix_half(b, d, v->half, rank, sh, v->digits);
    else if (v->encoding == API_ENC_BASE64)
        api_write_matrix_b64(b, d, v->req->params.dtype, rank, sh);
    else
        api_write_matrix(b, d, v->req->params.dtype, rank, sh, v->digits, true);
}

void api_write_top_k(struct api_buf *b, const struct api_attention_view *v)
{
    const struct attn_extras_out *o = &v->x->xo;
    put_key(b, "weights");
    api_buf_puts(b, "{\"indices\":");
    write_x_ints(b, v, o->top_idx, v->x->top_k, false);
    api_buf_puts(b, ",\"values\":");
    write_mat(b, v, o->top_val, v->x->top_k);
    api_buf_puts(b, "},");
}

void api_write_extras(struct api_buf *b, const struct api_attention_view *v)
{
    const struct api_extras *x = v->x;
    const struct attn_extras_out *o = &x->xo;
    if (x->want & ATTN_X_QK) {
        put_key(b, "qk");
        write_mat(b, v, o->qk, v->req->shape.L);
        api_buf_putc(b, ',');
    }
    if (x->want & ATTN_X_LSE) {
        put_key(b, "lse");
        write_mat(b, v, o->lse, 0);
        api_buf_putc(b, ',');
    }
    if (x->want & ATTN_X_STATS) {
        api_buf_puts(b, "\"stats\":{\"entropy\":");
        write_mat(b, v, o->entropy, 0);
        api_buf_puts(b, ",\"max_weight\":");
        write_mat(b, v, o->max_weight, 0);
        api_buf_puts(b, ",\"argmax\":");
        write_x_ints(b, v, o->argmax, 0, true);
        api_buf_puts(b, ",\"mass\":");
        write_mat(b, v, o->mass, 0);
        api_buf_puts(b, "},");
    }
}

void api_write_extras_meta(struct api_buf *b, const struct api_attention_view *v)
{
    const struct api_extras *x = v->x;
    if (x->heads) {
        api_buf_puts(b, ",\"heads_returned\":[");
        for (size_t a = 0; a < x->nh; a++) {
            if (a)
                api_buf_putc(b, ',');
            put_int(b, (int64_t)x->heads[a], false);
        }
        api_buf_putc(b, ']');
    }
    if (!x->tokens)
        return;
    api_buf_puts(b, ",\"tokens\":{");
    bool first = true;
    for (int s = 0; s < 2; s++) {
        const json_t *a = labels(x->tokens, s ? "k" : "q");
        if (!a)
            continue;
        if (!first)
            api_buf_putc(b, ',');
        first = false;
        put_key(b, s ? "k" : "q");
        api_buf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(a); i++) {
            if (i)
                api_buf_putc(b, ',');
            api_write_string(b, json_string_value(json_array_get(a, i)));
        }
        api_buf_putc(b, ']');
    }
    api_buf_putc(b, '}');
}
