/*
 * api/v2/v2_respond.c — the response to an Open Inference Protocol v2
 * inference request: its results checked (a half request's rounded to
 * FP16/BF16, a value past the range answered 422 at the output's place),
 * then written in the order the outputs were asked for, each as JSON
 * `data` or as little-endian binary after the JSON header
 * (Inference-Header-Content-Length), with the sequence parameters.
 */
#include "api/v2/v2_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/codec/write.h"

void api_v2_put_half_le(struct api_buf *b, const void *data, enum api_half h, size_t n)
{
    const float *f = data;
    for (size_t i = 0; i < n; i++) {
        uint16_t u = api_half_bits(h, f[i]);
        unsigned char le[2] = {(unsigned char)(u & 0xFF), (unsigned char)(u >> 8)};
        api_buf_append(b, le, 2);
    }
}

/* Little-endian bytes of n elements of dt. */
static bool put_le(struct api_buf *b, const void *data, enum attn_dtype dt,
                   size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return api_buf_append(b, data, n * attn_dtype_size(dt));
#else
    size_t i, k, es = attn_dtype_size(dt);
    const unsigned char *p = data;
    for (i = 0; i < n; i++, p += es) {
        unsigned char le[8];
        uint64_t u = 0;
        if (es == 4) {
            uint32_t u32;
            memcpy(&u32, p, 4);
            u = u32;
        } else {
            memcpy(&u, p, 8);
        }
        for (k = 0; k < es; k++)
            le[k] = (unsigned char)(u >> (8 * k));
        if (!api_buf_append(b, le, es))
            return false;
    }
    return true;
#endif
}

struct v2_out {
    const void *data;
    int rank;
    size_t shape[4];
    size_t count;
};

/* The output (V2_OUT index) of an extras matrix api_extras_round_half names. */
static int extra_output(const char *name)
{
    static const struct { const char *name; int k; } map[] = {
        {"qk", V2_QK}, {"lse", V2_LSE}, {"stats.entropy", V2_ENT},
        {"stats.max_weight", V2_MAXW}, {"stats.mass", V2_MASS},
        {"weights.values", V2_TOPK_VAL}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i].name) == 0)
            return map[i].k;
    return -1;
}

/* The JSON pointer of element i of output k in the response that was not
 * sent: /outputs/<its place in the order asked>/data/<i>, or the output
 * when it travels as binary; "/outputs" when k is not among them. */
static const char *out_pointer(const struct v2_infer *x, int k, size_t i, char *p, size_t size)
{
    int j = 0;

    while (j < x->n_order && x->order[j] != k)
        j++;
    if (k < 0 || j == x->n_order)
        snprintf(p, size, "/outputs");
    else if (x->binary & V2_BIT(k))
        snprintf(p, size, "/outputs/%d", j);
    else
        snprintf(p, size, "/outputs/%d/data/%zu", j, i);
    return p;
}

/* The three outputs with the rank of q. */
static void out_views(const struct attn_request *r, const struct attn_result *res,
                      int q_rank, size_t nh, struct v2_out o[3])
{
    const struct attn_shape *s = &r->shape;
    const void *data[3] = {res->scores, res->weights, res->output};
    size_t cols[3] = {s->L, s->L, s->d_v};
    int k;

    for (k = 0; k < 3; k++) {
        size_t full[4] = {s->B ? s->B : 1, s->h, s->n, cols[k]};
        o[k].data = data[k];
        o[k].rank = q_rank;
        full[1] = nh;
        /* fits: api_attention_numbers counted it */
        o[k].count = full[0] * nh * s->n * cols[k];
        memcpy(o[k].shape, full + (4 - q_rank), (size_t)q_rank * sizeof full[0]);
    }
}

static void write_params(struct api_buf *b, const struct v2_infer *x,
                         const struct attn_request *r, size_t n_empty)
{
    api_buf_printf(b, "\"parameters\":{\"empty_rows\":%zu", n_empty);
    if (x->seq) {
        api_buf_puts(b, ",\"sequence_id\":");
        if (x->seq_num)
            api_buf_printf(b, "%" PRIu64, x->seq_num);
        else
            api_write_string(b, json_string_value(x->seq_id));
        /* the rows ever appended, as GET's length: a rolling sequence's
         * pass ran over fewer (r->shape.L, the rows held) */
        api_buf_printf(b, ",\"sequence_start\":%s,\"sequence_end\":%s,"
                       "\"sequence_length\":%zu,\"session_id\":",
                       x->seq_start ? "true" : "false",
                       x->seq_end ? "true" : "false",
                       x->sess ? sess_length(x->sess) : r->shape.L);
        api_write_string(b, x->sid);
    }
    api_buf_putc(b, '}');
}

/* Whether the results can be answered: a half request's rounded in place
 * to FP16/BF16, and a value past that range, or a qk that overflowed,
 * answered 422 non_finite (false). Run before a session's append is kept
 * (sess_query.accept), so that a refused request appends nothing. */
bool api_v2_results_ok(struct api_call *c, const struct v2_infer *x,
                       const struct attn_request *r, const struct attn_result *res)
{
    const char *dtn = api_v2_datatype_name(x->dt, x->half);
    struct v2_out o[3];
    size_t i;
    int k;
    char ptr[64];

    out_views(r, res, x->t[V2_Q].rank, x->ext.nh, o);
    for (k = 0; x->half && k < 3; k++) {           /* results rounded to FP16/BF16 */
        if (!(x->outputs & (1u << k)))
            continue;
        i = api_half_round_matrix(x->half, (float *)(uintptr_t)o[k].data, o[k].count);
        if (i < o[k].count) {
            api_fail(c, API_ERR_NON_FINITE, out_pointer(x, k, i, ptr, sizeof ptr),
                     "output %s element %zu is out of range of %s", api_v2_out_names[k], i,
                     dtn);
            return false;
        }
    }
    const char *xn = x->half && api_extras_compute(&x->ext)
                         ? api_extras_round_half(r, &x->ext, x->half, &i) : NULL;
    if (xn) {
        api_fail(c, API_ERR_NON_FINITE, out_pointer(x, extra_output(xn), i, ptr, sizeof ptr),
                 "output %s element %zu is out of range of %s", xn, i, dtn);
        return false;
    }
    if (!x->half && api_extras_compute(&x->ext) && api_extras_qk_overflow(r, &x->ext, &i)) {
        api_fail(c, API_ERR_NON_FINITE, out_pointer(x, V2_QK, i, ptr, sizeof ptr),
                 "output qk element %zu is not finite: q·k overflowed %s", i, dtn);
        return false;
    }
    return true;
}

/* The answer (its results checked by api_v2_results_ok already when
 * checked). */
void api_v2_respond(struct api_call *c, const struct v2_infer *x,
                    const struct attn_request *r, const struct attn_result *res,
                    size_t cap, bool checked)
{
    const char *id = json_string_value(member(x->hdr, "id"));
    const char *dtn = api_v2_datatype_name(x->dt, x->half);
    size_t es = api_dtype_size(x->dt, x->half);
    struct v2_out o[3];
    struct api_buf b;
    size_t hlen, i;
    bool first = true;
    int j, k, d;
    char num[32];

    if (!checked && !api_v2_results_ok(c, x, r, res))
        return;
    out_views(r, res, x->t[V2_Q].rank, x->ext.nh, o);
    api_buf_init(&b, cap);
    api_buf_puts(&b, "{\"model_name\":\"" V2_MODEL "\",\"model_version\":\""
                 V2_VERSION "\",");
    if (id) {
        api_buf_puts(&b, "\"id\":");
        api_write_string(&b, id);
        api_buf_putc(&b, ',');
    }
    write_params(&b, x, r, res->n_empty);
    api_buf_puts(&b, ",\"outputs\":[");
    for (j = 0; j < x->n_order; j++) {        /* in the order asked (Triton's) */
        k = x->order[j];
        if (k >= 3) {
            api_v2_extras_write(&b, x, r, k, &first);
            continue;
        }
        api_buf_printf(&b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[",
                       first ? "" : ",", api_v2_out_names[k], dtn);
        first = false;
        for (d = 0; d < o[k].rank; d++)
            api_buf_printf(&b, "%s%zu", d ? "," : "", o[k].shape[d]);
        if (x->binary & (1u << k)) {
            api_buf_printf(&b, "],\"parameters\":{\"binary_data_size\":%zu}}",
                           o[k].count * es);
            continue;
        }
        api_buf_puts(&b, "],\"data\":[");
        for (i = 0; i < o[k].count; i++) {
            const char *p = (const char *)o[k].data + i * attn_dtype_size(x->dt);
            if (i)
                api_buf_putc(&b, ',');
            if (x->half) {
                uint16_t hb = api_half_bits(x->half, *(const float *)(const void *)p);
                size_t nl = x->half == API_HALF_F16 ? api_dtoa_f16(num, hb) : api_dtoa_bf16(num, hb);
                api_buf_append(&b, num, nl);
            } else {
                api_write_number(&b, x->dt, p, 0);
            }
        }
        api_buf_puts(&b, "]}");
    }
    api_buf_puts(&b, "]}");
    hlen = b.len;
    for (j = 0; j < x->n_order; j++) {
        k = x->order[j];
        if (k >= 3)
            api_v2_extras_write_binary(&b, x, r, k);
        else if (!(x->binary & (1u << k)))
            continue;
        else if (x->half)
            api_v2_put_half_le(&b, o[k].data, x->half, o[k].count);
        else
            put_le(&b, o[k].data, x->dt, o[k].count);
    }
    api_reply_buf(c, 200, &b);
    if (c->resp->status == 200 && (x->binary & x->outputs)) {
        c->resp->content_type = "application/octet-stream";
        snprintf(num, sizeof num, "%zu", hlen);
        api_response_header(c->resp, V2_HDR_LEN, num);
    }
}

/* Bytes the response may take: JSON text per number, binary bytes, the
 * echoed id (each byte a \u00XX escape at worst) and room for the fixed
 * members. */
bool api_v2_response_cap(const struct attn_request *r, const struct v2_infer *x,
                         size_t *cap)
{
    const json_t *id = member(x->hdr, "id");
    struct v2_out o[3];
    struct attn_result none;
    size_t total = 4096, part;
    int k;

    if (json_is_string(id) && (!core_mul(json_string_length(id), 6, &part) ||
                               !core_add(total, part, &total)))
        return false;
    memset(&none, 0, sizeof none);
    out_views(r, &none, x->t[V2_Q].rank, x->ext.nh, o);
    for (k = 0; k < 3; k++) {
        if (!(x->outputs & (1u << k)))
            continue;
        if (!core_mul(o[k].count, (x->binary & (1u << k))
                      ? attn_dtype_size(x->dt) : API_NUM_MAX + 1, &part) ||
            !core_add(total, part, &total))
            return false;
    }
    *cap = total;
    return api_v2_extras_cap(x, r, cap);
}
