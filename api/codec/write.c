/*
 * api/codec/write.c — JSON text out: numbers (shortest round-trip via
 * api/codec/dtoa.c,
 * or fixed significant digits via printf), nested-array and base64
 * matrices, and the whole attention response, appended straight into a
 * capped api_buf.
 */
#include "api/codec/write.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec/base64.h"
#include "api/extras.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "base64 tensors are little-endian: add a byte swap here");

static size_t fmt_null(char *out)
{
    memcpy(out, "null", 5);
    return 4;
}

size_t api_fmt_f64(char *out, double x, int digits)
{
    if (!isfinite(x))
        return fmt_null(out);
    if (digits <= 0)
        return api_dtoa_f64(out, x);
    return (size_t)snprintf(out, API_NUM_MAX, "%.*g", digits > 17 ? 17 : digits, x);
}

size_t api_fmt_f32(char *out, float x, int digits)
{
    if (!isfinite(x))
        return fmt_null(out);
    if (digits <= 0)
        return api_dtoa_f32(out, x);
    return (size_t)snprintf(out, API_NUM_MAX, "%.*g", digits > 17 ? 17 : digits,
                            (double)x);
}

bool api_write_number(struct api_buf *b, enum attn_dtype dt, const void *p,
                      int digits)
{
    char tmp[API_NUM_MAX];
    size_t n;

    if (dt == ATTN_F32)
        n = api_fmt_f32(tmp, *(const float *)p, digits);
    else
        n = api_fmt_f64(tmp, *(const double *)p, digits);
    return api_buf_append(b, tmp, n);
}

bool api_write_string(struct api_buf *b, const char *s)
{
    return api_write_string_n(b, s, strlen(s));
}

bool api_write_string_n(struct api_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";

    api_buf_putc(b, '"');
    for (const char *e = s + n; s < e; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            api_buf_putc(b, '\\');
            api_buf_putc(b, (char)ch);
        } else if (ch < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
            api_buf_append(b, esc, sizeof esc);
        } else {
            api_buf_putc(b, (char)ch);
        }
    }
    return api_buf_putc(b, '"');
}

/* One row of cols numbers: [x,x,...] after the byte lead (none if 0),
 * formatted straight into the buffer (room for the whole row is reserved
 * first: each number takes fewer than API_NUM_MAX bytes with its NUL, which
 * the next byte overwrites). */
static void write_row(struct api_buf *b, const void *row, enum attn_dtype dt,
                      size_t cols, int digits, char lead)
{
    size_t j, room;
    char *o;

    if (!core_mul(cols, API_NUM_MAX, &room) || room > SIZE_MAX - 3 ||
        !api_buf_reserve(b, 3 + room))
        return;
    o = b->data + b->len;
    if (lead)
        *o++ = lead;
    *o++ = '[';
    if (dt == ATTN_F32) {
        const float *x = row;
        for (j = 0; j < cols; j++) {
            if (j)
                *o++ = ',';
            o += digits ? api_fmt_f32(o, x[j], digits) : api_dtoa_f32(o, x[j]);
        }
    } else {
        const double *x = row;
        for (j = 0; j < cols; j++) {
            if (j)
                *o++ = ',';
            /* api_dtoa_* print every non-finite value as null too */
            o += digits ? api_fmt_f64(o, x[j], digits) : api_dtoa_f64(o, x[j]);
        }
    }
    *o++ = ']';
    *o = '\0';
    b->len = (size_t)(o - b->data);
}

bool api_write_matrix(struct api_buf *b, const void *data, enum attn_dtype dt,
                      int rank, const size_t *shape, int digits,
                      bool neg_inf_null)
{
    size_t esz = attn_dtype_size(dt), i, stride;

    (void)neg_inf_null;     /* api_fmt_* print every non-finite as null */
    if (rank <= 1) {
        write_row(b, data, dt, rank == 1 ? shape[0] : 1, digits, 0);
        return api_buf_ok(b);
    }
    /* stride in elements of one outer slice; fits: the data exists. */
    for (stride = 1, i = 1; i < (size_t)rank; i++)
        stride *= shape[i];
    if (shape[0] == 0)
        api_buf_putc(b, '[');
    for (i = 0; i < shape[0] && api_buf_ok(b); i++) {
        const char *slice = (const char *)data + i * stride * esz;
        char lead = i ? ',' : '[';
        if (rank == 2) {            /* the row writes its lead: no putc each */
            write_row(b, slice, dt, shape[1], digits, lead);
        } else {
            api_buf_putc(b, lead);
            api_write_matrix(b, slice, dt, rank - 1, shape + 1, digits, neg_inf_null);
        }
    }
    api_buf_putc(b, ']');
    return api_buf_ok(b);
}

/* Text helpers for pieces composed in a local array: a literal (its
 * length known at compile time), a NUL-terminated string, a size. Each
 * returns / advances to the byte after what it wrote. */
#define PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) += sizeof(lit) - 1)

static char *put_text(char *o, const char *s)
{
    size_t n = strlen(s);

    memcpy(o, s, n);
    return o + n;
}

static char *put_size_text(char *o, size_t v)
{
    char tmp[24], *p = tmp + sizeof tmp;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (p < tmp + sizeof tmp)
        *o++ = *p++;
    return o;
}

/* Append a size in decimal (printf is slow for many small integers). */
static void put_size(struct api_buf *b, size_t v)
{
    char tmp[24];

    api_buf_append(b, tmp, (size_t)(put_size_text(tmp, v) - tmp));
}

static void write_shape(struct api_buf *b, int rank, const size_t *shape)
{
    int i;

    api_buf_putc(b, '[');
    for (i = 0; i < rank; i++) {
        if (i)
            api_buf_putc(b, ',');
        put_size(b, shape[i]);
    }
    api_buf_putc(b, ']');
}

bool api_write_matrix_b64(struct api_buf *b, const void *data,
                          enum attn_dtype dt, int rank, const size_t *shape)
{
    size_t count = 1, bytes;
    int i;

    for (i = 0; i < rank; i++)
        if (!core_mul(count, shape[i], &count))
            return false;
    if (!core_mul(count, attn_dtype_size(dt), &bytes))
        return false;
    api_buf_puts(b, "{\"shape\":");
    write_shape(b, rank, shape);
    api_buf_puts(b, ",\"dtype\":\"");
    api_buf_puts(b, attn_dtype_name(dt));
    api_buf_puts(b, "\",\"data\":\"");
    api_base64_encode(b, data, bytes);
    return api_buf_puts(b, "\"}");
}

/* ---- the attention response ------------------------------------------ */

bool api_attention_numbers(const struct attn_request *r, size_t *count)
{
    const struct attn_shape *s = &r->shape;
    size_t snl, snd, total = 0, H;

    if (!api_heads_total(s, &H) || !core_mul3(H, s->n, s->L, &snl) ||
        !core_mul3(H, s->n, s->d_v, &snd))
        return false;
    if ((r->outputs & ATTN_OUT_SCORES) && !core_add(total, snl, &total))
        return false;
    if ((r->outputs & ATTN_OUT_WEIGHTS) && !core_add(total, snl, &total))
        return false;
    if ((r->outputs & ATTN_OUT_OUTPUT) && !core_add(total, snd, &total))
        return false;
    *count = total;
    return true;
}

bool api_attention_max_bytes(const struct attn_request *r,
                             enum api_encoding enc, size_t *bytes)
{
    const struct attn_shape *s = &r->shape;
    size_t numbers, per, rows, body, extra, H;

    if (!api_attention_numbers(r, &numbers) || !api_heads_total(s, &H) ||
        !core_mul(H, s->n, &rows))
        return false;
    /* json: each number with its comma; base64: 8 bytes -> 11 characters
     * plus padding. */
    per = enc == API_ENC_BASE64 ? 11 : API_NUM_MAX;
    if (!core_mul(numbers, per, &body))
        return false;
    /* Brackets of every row (3 outputs), meta.empty_rows ([b,h,i]),
     * and a fixed allowance for keys and meta. */
    if (!core_mul(rows, 3 * 4 + 48, &extra) || !core_add(body, extra, &body))
        return false;
    /* meta.sink_logit: one number a query head when given per head */
    if (r->params.sink_logits &&
        (!core_mul(s->h, API_NUM_MAX + 1, &extra) || !core_add(body, extra, &body)))
        return false;
    return core_add(body, 4096, bytes);
}

const char *api_softmax_name(enum attn_softmax s)
{
    switch (s) {
    case ATTN_SOFTMAX_ONE: return "softmax1";
    case ATTN_SOFTMAX_SINK: return "sink";
    case ATTN_SOFTMAX_STANDARD: break;
    }
    return "standard";
}

static const char *causal_json(enum attn_causal c)
{
    switch (c) {
    case ATTN_CAUSAL_BOTTOM_RIGHT: return "\"bottom_right\"";
    case ATTN_CAUSAL_TOP_LEFT: return "\"top_left\"";
    case ATTN_CAUSAL_NONE: break;
    }
    return "false";
}

/* "name": matrix [B][h][rows][cols] for a 4-D q, [h][rows][cols] for a 3-D
 * q, [rows][cols] for a 2-D q. */
static void write_output(struct api_buf *b, const struct api_attention_view *v,
                         const char *name, const void *data, size_t cols,
                         bool neg_inf_null)
{
    const struct attn_shape *s = &v->req->shape;
    size_t shape[4] = {s->B ? s->B : 1, v->x ? v->x->nh : s->h, s->n, cols};
    int rank = v->q_rank == 2 ? 2 : v->q_rank == 4 ? 4 : 3;
    const size_t *sh = shape + (4 - rank);
    enum attn_dtype dt = v->req->params.dtype;

    api_buf_putc(b, '"');
    api_buf_puts(b, name);
    api_buf_puts(b, "\":");
    if (v->half && v->encoding == API_ENC_BASE64)
        api_write_matrix_b64_half(b, data, v->half, rank, sh);
    else if (v->half)
        api_write_matrix_half(b, data, v->half, rank, sh, v->digits);
    else if (v->encoding == API_ENC_BASE64)
        api_write_matrix_b64(b, data, dt, rank, sh);
    else
        api_write_matrix(b, data, dt, rank, sh, v->digits, neg_inf_null);
    api_buf_putc(b, ',');
}

static void write_empty_rows(struct api_buf *b, const struct api_attention_view *v)
{
    const struct attn_shape *s = &v->req->shape;
    size_t hd, i, k = 0, nh = v->x ? v->x->nh : s->h;
    size_t H = (s->B ? s->B : 1) * nh;      /* fits: res holds H*n rows */

    api_buf_puts(b, "\"empty_rows\":[");
    if (v->res->empty && v->res->n_empty) {
        for (hd = 0; hd < H; hd++)
            for (i = 0; i < s->n; i++) {
                if (!v->res->empty[hd * s->n + i])
                    continue;
                if (k++)
                    api_buf_putc(b, ',');
                if (v->q_rank == 2) {
                    put_size(b, i);
                } else {
                    api_buf_putc(b, '[');
                    if (v->q_rank == 4) {
                        put_size(b, hd / nh);
                        api_buf_putc(b, ',');
                    }
                    put_size(b, v->x && v->x->heads ? v->x->heads[hd % nh] : hd % nh);
                    api_buf_putc(b, ',');
                    put_size(b, i);
                    api_buf_putc(b, ']');
                }
            }
    }
    api_buf_putc(b, ']');
}

/* [h] per-head sink logits, shortest. */
static void write_sinks(struct api_buf *b, const double *sinks, size_t h)
{
    char num[API_NUM_MAX];

    api_buf_putc(b, '[');
    for (size_t i = 0; i < h; i++) {
        if (i)
            api_buf_putc(b, ',');
        api_buf_append(b, num, api_fmt_f64(num, sinks[i], 0));
    }
    api_buf_putc(b, ']');
}

static void write_meta(struct api_buf *b, const struct api_attention_view *v)
{
    const struct attn_shape *s = &v->req->shape;
    const struct attn_params *p = &v->req->params;
    char t[512], *o = t;        /* the fixed members: fewer than 400 bytes */

    /* composed in t and appended once (a dozen appends showed in the
     * small request's profile) */
    const struct {
        const char *key;
        size_t val;
    } dims[] = {{"\"meta\":{\"heads\":", s->h}, {",\"kv_heads\":", s->h_kv},
                {",\"n\":", s->n}, {",\"L\":", s->L}, {",\"d_k\":", s->d_k},
                {",\"d_v\":", s->d_v}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        o = put_text(o, dims[i].key);
        o = put_size_text(o, dims[i].val);
    }
    if (v->q_rank == 4) {
        PUT_LIT(o, ",\"batch\":");
        o = put_size_text(o, s->B ? s->B : 1);
    }
    PUT_LIT(o, ",\"scale\":");
    o += api_fmt_f64(o, p->scale, 0);
    PUT_LIT(o, ",\"softmax\":\"");
    o = put_text(o, api_softmax_name(p->softmax));
    PUT_LIT(o, "\",");
    if (p->softmax == ATTN_SOFTMAX_SINK) {
        PUT_LIT(o, "\"sink_logit\":");
        if (p->sink_logits) {       /* one per query head: as the request gave them */
            api_buf_append(b, t, (size_t)(o - t));
            write_sinks(b, p->sink_logits, s->h);
            o = t;
        } else {
            o += api_fmt_f64(o, p->sink_logit, 0);
        }
        *o++ = ',';
    }
    PUT_LIT(o, "\"dtype\":\"");
    o = put_text(o, api_dtype_name(p->dtype, v->half));
    PUT_LIT(o, "\",\"causal\":");
    o = put_text(o, causal_json(v->req->causal));
    *o++ = ',';
    api_buf_append(b, t, (size_t)(o - t));
    write_empty_rows(b, v);
    if (v->x)
        api_write_extras_meta(b, v);
    o = t;
    PUT_LIT(o, ",\"elapsed_us\":");
    o = put_size_text(o, (size_t)v->elapsed_us);
    api_buf_append(b, t, (size_t)(o - t));
    if (v->meta_extra && *v->meta_extra) {
        api_buf_putc(b, ',');
        api_buf_puts(b, v->meta_extra);
    }
    api_buf_putc(b, '}');
}

bool api_write_attention(struct api_buf *b, const struct api_attention_view *v)
{
    const struct attn_request *r = v->req;
    const struct attn_result *res = v->res;

    api_buf_putc(b, '{');
    if (r->outputs & ATTN_OUT_SCORES)
        write_output(b, v, "scores", res->scores, r->shape.L, true);
    if (r->outputs & ATTN_OUT_WEIGHTS)
        write_output(b, v, "weights", res->weights, r->shape.L, false);
    else if (v->x && v->x->top_k)
        api_write_top_k(b, v);
    if (r->outputs & ATTN_OUT_OUTPUT)
        write_output(b, v, "output", res->output, r->shape.d_v, false);
    if (v->x)
        api_write_extras(b, v);
    write_meta(b, v);
    api_buf_putc(b, '}');
    return api_buf_ok(b);
}

/* ---- a jansson tree, its reals shortest ----------------------------------- */

bool api_write_json(struct api_buf *b, const json_t *v)
{
    char num[API_NUM_MAX];
    const char *key;
    json_t *m;
    size_t i, n = 0, key_len;

    switch (json_typeof(v)) {
    case JSON_OBJECT:
        api_buf_putc(b, '{');
        json_object_keylen_foreach((json_t *)(uintptr_t)v, key, key_len, m) {
            if (n++)
                api_buf_putc(b, ',');
            api_write_string_n(b, key, key_len);     /* a key may hold a NUL */
            api_buf_putc(b, ':');
            api_write_json(b, m);
        }
        return api_buf_putc(b, '}');
    case JSON_ARRAY:
        api_buf_putc(b, '[');
        for (i = 0; i < json_array_size(v); i++) {
            if (i)
                api_buf_putc(b, ',');
            api_write_json(b, json_array_get(v, i));
        }
        return api_buf_putc(b, ']');
    case JSON_STRING:
        return api_write_string_n(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return api_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        n = api_dtoa_f64(num, json_real_value(v));
        /* a real stays a real to a reader that tells them apart, as
         * jansson writes it: 600.0, not 600 */
        if (strspn(num, "-0123456789") == n)
            memcpy(num + n, ".0", 3), n += 2;
        return api_buf_append(b, num, n);
    case JSON_TRUE:
        return api_buf_puts(b, "true");
    case JSON_FALSE:
        return api_buf_puts(b, "false");
    case JSON_NULL:
    default:
        return api_buf_puts(b, "null");
    }
}
