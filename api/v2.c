/*
 * api/v2.c — the Open Inference Protocol v2 (KServe / Triton REST), so that
 * pipeline clients written for those servers drive attnd unchanged.
 *
 * One model, "attention" (version "1"). Its inputs are the /v1/attention
 * arrays as v2 tensors: q, k, v (FP32 or FP64, [n,d] or [h,n,d]), bias_q,
 * bias_k, bias_v ([d] or [heads,d]), attn_bias (FP, [n,L] or [h,n,L], JSON
 * null = -inf) and mask (BOOL, same shapes). `data` may be flat or nested;
 * either way it is read in row-major order and must hold exactly
 * product(shape) elements. The options of /v1/attention travel as request
 * `parameters` (scalars, as the protocol requires): softmax, sink_logit,
 * causal, scale, alibi, rope_base, rope_pairs, empty_rows. Outputs are
 * scores, weights and output, in the dtype of the computation (that of q, or
 * of the session), selected by `outputs`.
 *
 * Binary tensor data extension: when the request has the header
 * Inference-Header-Content-Length: N, the first N bytes of the body are the
 * JSON header and the rest holds the raw bytes of every input whose
 * parameters carry binary_data_size, in the order of `inputs`, little-endian,
 * unpadded. Outputs asked for with parameters.binary_data (or the request
 * parameter binary_data_output) come back the same way: the response's
 * Inference-Header-Content-Length header says where its JSON ends.
 *
 * Sequence extension: parameters sequence_id (a positive integer or a
 * string), sequence_start and sequence_end map onto sessions (the KV cache).
 * The start request creates a session from its q, k, v shapes and options,
 * appends k, v and attends q, exactly as a stateless request would; later
 * requests append their k, v (optional) and attend q against the whole cache;
 * sequence_end deletes the session after its request. The process keeps a
 * bounded map sequence_id -> session id (a client picks sequence ids, the
 * store picks session ids); a string sequence_id that names an existing
 * session (e.g. one created with POST /v1/sessions) continues that session.
 * Responses carry parameters.session_id, so the v1 routes can inspect it.
 *
 * Errors are built with the shared api_fail helpers (one error table) and
 * rewritten at the end into the protocol's {"error":"..."} shape with the
 * status mapping Triton uses.
 */
#include "api/v2.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/read.h"
#include "api/write.h"
#include "core/attn.h"
#include "core/store.h"

#define V2_MODEL "attention"
#define V2_VERSION "1"
#define V2_HDR_LEN "Inference-Header-Content-Length"

/* ---- errors in the protocol's shape ------------------------------------ */

/* Triton's mapping: every client mistake is 400 invalid argument. */
static int v2_status(int status)
{
    switch (status) {
    case 401: case 404: case 405: case 500: case 503:
        return status;
    default:
        return status >= 500 ? 500 : 400;
    }
}

/* Rewrite an attnd error object {"error":{"code","message","path"}} into
 * {"error":"message [code at path]"}; anything else is left alone. */
void api_v2_error_shape(struct api_call *c)
{
    struct api_response *r = c->resp;
    json_t *root, *err;
    const char *msg, *code, *path;
    enum api_err e;
    char text[1024];

    if (r->status < 400 || !r->body || !r->content_type ||
        strcmp(r->content_type, "application/json") != 0)
        return;
    root = json_loadb(r->body, r->body_len, 0, NULL);
    err = json_object_get(root, "error");
    if (!json_is_object(err)) {
        json_decref(root);
        return;
    }
    msg = json_string_value(json_object_get(err, "message"));
    code = json_string_value(json_object_get(err, "code"));
    path = json_string_value(json_object_get(err, "path"));
    if (path && *path)
        snprintf(text, sizeof text, "%s [%s at %s]", msg ? msg : "error",
                 code ? code : "error", path);
    else
        snprintf(text, sizeof text, "%s [%s]", msg ? msg : "error",
                 code ? code : "error");
    json_decref(root);
    /* api_reply_json keeps the headers already set (Allow, Retry-After). */
    e = r->error;
    api_reply_json(c, v2_status(r->status), json_pack("{s:s}", "error", text));
    if (r->error == API_ERR_NONE)    /* else the rewrite itself failed */
        r->error = e;
}

/* The inputs and outputs of the model. */
enum v2_slot { V2_Q, V2_K, V2_V, V2_BQ, V2_BK, V2_BV, V2_AB, V2_MASK, V2_NSLOT };

static const char *const v2_slot_names[V2_NSLOT] = {
    "q", "k", "v", "bias_q", "bias_k", "bias_v", "attn_bias", "mask",
};

static const char *const v2_out_names[3] = {"scores", "weights", "output"};

/* ---- metadata and health ----------------------------------------------- */

static bool is_get(const struct api_call *c)
{
    const char *m = c->req->method ? c->req->method : "";
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

static bool is_post(const struct api_call *c)
{
    return c->req->method && strcmp(c->req->method, "POST") == 0;
}

static void v2_server_meta(struct api_call *c)
{
    const char *v = c->ctx->cfg.version ? c->ctx->cfg.version : "";

    api_reply_json(c, 200, json_pack("{s:s, s:s, s:[s,s,s]}", "name", "attnd",
                                     "version", v, "extensions",
                                     "binary_tensor_data", "sequence",
                                     "parameters"));
}

static void v2_health(struct api_call *c, bool ready)
{
    if (!ready) {
        api_reply_json(c, 200, json_pack("{s:b}", "live", 1));
        return;
    }
    api_reply_json(c, c->ctx->draining ? 503 : 200,
                   json_pack("{s:b}", "ready", !c->ctx->draining));
}

/* {"name","datatype","shape":[-1 x rank]} */
static json_t *tensor_meta(const char *name, const char *dtype, int rank)
{
    json_t *shape = json_array();
    int i;

    for (i = 0; i < rank; i++)
        json_array_append_new(shape, json_integer(-1));
    return json_pack("{s:s, s:s, s:o}", "name", name, "datatype", dtype,
                     "shape", shape);
}

static void v2_model_meta(struct api_call *c)
{
    static const int ranks[V2_NSLOT] = {3, 3, 3, 2, 2, 2, 3, 3};
    json_t *in = json_array(), *out = json_array();
    size_t i;

    /* The largest rank is listed; 2-D q/k/v/attn_bias/mask and 1-D biases
     * are accepted too, and FP32 wherever FP64 is listed. */
    for (i = 0; i < V2_NSLOT; i++)
        json_array_append_new(in, tensor_meta(v2_slot_names[i],
                                              i == V2_MASK ? "BOOL" : "FP64",
                                              ranks[i]));
    for (i = 0; i < 3; i++)
        json_array_append_new(out, tensor_meta(v2_out_names[i], "FP64", 3));
    api_reply_json(c, 200, json_pack("{s:s, s:[s], s:s, s:o, s:o}", "name",
                                     V2_MODEL, "versions", V2_VERSION,
                                     "platform", "attnd", "inputs", in,
                                     "outputs", out));
}

static void v2_model_ready(struct api_call *c)
{
    api_reply_json(c, c->ctx->draining ? 503 : 200,
                   json_pack("{s:s, s:b}", "name", V2_MODEL, "ready",
                             !c->ctx->draining));
}

/* ---- the sequence map ---------------------------------------------------- */

/* A client's sequence id (as text) -> the id of the session holding it.
 * Per api_ctx, so several services in one process (tests) stay apart. */
struct v2_seq {
    const struct api_ctx *ctx;
    char key[80];                   /* "i:<uint64>" or "s:<string>" */
    char sid[SESS_ID_MAX];
};

/* Lock order: v2_seq_mu, then the store's mutex (seq_prune). */
static pthread_mutex_t v2_seq_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v2_seq v2_seqs[API_V2_MAX_SEQUENCES];
static size_t v2_nseqs;

static struct v2_seq *seq_slot(const struct api_ctx *ctx, const char *key)
{
    size_t i;

    for (i = 0; i < v2_nseqs; i++)
        if (v2_seqs[i].ctx == ctx && strcmp(v2_seqs[i].key, key) == 0)
            return &v2_seqs[i];
    return NULL;
}

/* Copy the session id of key into sid; false when unknown. */
static bool seq_find(const struct api_ctx *ctx, const char *key, char *sid)
{
    struct v2_seq *e;

    pthread_mutex_lock(&v2_seq_mu);
    e = seq_slot(ctx, key);
    if (e)
        memcpy(sid, e->sid, SESS_ID_MAX);
    pthread_mutex_unlock(&v2_seq_mu);
    return e != NULL;
}

/* Forget key, but only while it still maps to sid (a restart may have
 * replaced it meanwhile). */
static void seq_forget(const struct api_ctx *ctx, const char *key,
                       const char *sid)
{
    struct v2_seq *e;

    pthread_mutex_lock(&v2_seq_mu);
    e = seq_slot(ctx, key);
    if (e && strcmp(e->sid, sid) == 0)
        *e = v2_seqs[--v2_nseqs];
    pthread_mutex_unlock(&v2_seq_mu);
}

/* Map key to sid; the session it replaced (if any) into old (else "").
 * false when the map is full. */
static bool seq_put(const struct api_ctx *ctx, const char *key,
                    const char *sid, char *old)
{
    struct v2_seq *e;
    bool ok = true;

    old[0] = '\0';
    pthread_mutex_lock(&v2_seq_mu);
    e = seq_slot(ctx, key);
    if (e) {
        memcpy(old, e->sid, SESS_ID_MAX);
    } else if (v2_nseqs < API_V2_MAX_SEQUENCES) {
        e = &v2_seqs[v2_nseqs++];
        e->ctx = ctx;
        snprintf(e->key, sizeof e->key, "%s", key);
    } else {
        ok = false;
    }
    if (e)
        snprintf(e->sid, sizeof e->sid, "%s", sid);
    pthread_mutex_unlock(&v2_seq_mu);
    return ok;
}

/* Drop the entries of ctx whose session expired or was deleted; asking
 * the store with sess_exists neither waits for a busy session nor counts
 * as a use (acquiring would keep every mapped session from expiring). */
static void seq_prune(struct api_ctx *ctx)
{
    size_t i = 0;

    pthread_mutex_lock(&v2_seq_mu);
    while (i < v2_nseqs) {
        if (v2_seqs[i].ctx == ctx && !sess_exists(ctx->store, v2_seqs[i].sid))
            v2_seqs[i] = v2_seqs[--v2_nseqs];
        else
            i++;
    }
    pthread_mutex_unlock(&v2_seq_mu);
}

/* ---- one inference request --------------------------------------------- */


/* An input tensor, converted to the computation's dtype (mask: uint8_t). */
struct v2_tensor {
    bool present;
    size_t index;                   /* position in "inputs" (for paths) */
    int rank;
    size_t shape[ATTN_MAX_RANK];
    size_t count;
    void *data;                     /* malloc'd */
};

struct v2_infer {
    json_t *hdr;                    /* the JSON part (new reference) */
    const json_t *params;           /* request parameters (borrowed) or NULL */
    const unsigned char *bin;       /* binary part of the body */
    size_t bin_len, bin_used;
    enum attn_dtype dt;             /* of the computation */
    size_t budget;                  /* input elements still allowed */
    struct v2_tensor t[V2_NSLOT];
    /* options */
    struct attn_params p;
    bool scale_given;
    enum attn_causal causal;
    enum attn_empty_rows empty_rows;
    double *slopes;                 /* malloc'd ALiBi slopes or NULL */
    unsigned outputs, binary;       /* ATTN_OUT_* bits selected / binary */
    /* sequence */
    bool seq, seq_start, seq_end;
    const json_t *seq_id;           /* borrowed */
    char seq_key[80];
    char sid[SESS_ID_MAX];
    struct sess *sess;              /* held session, or NULL */
};

static void infer_free(struct v2_infer *x)
{
    size_t i;

    for (i = 0; i < V2_NSLOT; i++)
        free(x->t[i].data);
    free(x->slopes);
    json_decref(x->hdr);
}

static const json_t *member(const json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

static bool param_bool(struct api_call *c, const json_t *params,
                       const char *key, bool *out)
{
    const json_t *v = member(params, key);
    char path[API_PATH_MAX];

    *out = false;
    if (!v)
        return true;
    if (!json_is_boolean(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                 "/parameters", key), "%s must be true or false", key);
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

        errno = 0;
        v = strtoull(hl, &end, 10);
        if (errno || end == hl || *end != '\0' || hl[0] == '-' ||
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

/* Sequence parameters: sequence_id (positive integer or non-empty string),
 * sequence_start, sequence_end. */
static bool read_sequence(struct api_call *c, struct v2_infer *x)
{
    const json_t *id = member(x->params, "sequence_id");

    if (!param_bool(c, x->params, "sequence_start", &x->seq_start) ||
        !param_bool(c, x->params, "sequence_end", &x->seq_end))
        return false;
    if (json_is_integer(id) && json_integer_value(id) > 0) {
        snprintf(x->seq_key, sizeof x->seq_key, "i:%" JSON_INTEGER_FORMAT,
                 json_integer_value(id));
    } else if (json_is_string(id) && json_string_length(id) > 0 &&
               json_string_length(id) < 64) {
        snprintf(x->seq_key, sizeof x->seq_key, "s:%s", json_string_value(id));
    } else if (id && !(json_is_integer(id) && json_integer_value(id) == 0)) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/sequence_id",
                 "sequence_id must be a positive integer or a string of "
                 "1 to 63 bytes");
        return false;
    }
    x->seq_id = id;
    x->seq = x->seq_key[0] != '\0';
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

/* Find and hold the session of a continuing sequence. */
static bool sequence_acquire(struct api_call *c, struct v2_infer *x)
{
    enum core_status st;

    if (!seq_find(c->ctx, x->seq_key, x->sid)) {
        if (!json_is_string(x->seq_id)) {
            api_fail(c, API_ERR_SESSION_NOT_FOUND, "/parameters/sequence_id",
                     "no open sequence with this sequence_id; start it with "
                     "sequence_start");
            return false;
        }
        /* a string may name a session directly */
        snprintf(x->sid, sizeof x->sid, "%s", json_string_value(x->seq_id));
    }
    st = sess_acquire(c->ctx->store, x->sid, &x->sess);
    if (st != CORE_OK) {
        x->sess = NULL;
        seq_forget(c->ctx, x->seq_key, x->sid);
        api_fail(c, API_ERR_SESSION_NOT_FOUND, "/parameters/sequence_id",
                 "no open sequence with this sequence_id (ended, expired or "
                 "never started)");
        return false;
    }
    x->dt = sess_spec(x->sess)->params.dtype;
    return true;
}

/* ---- tensors ------------------------------------------------------------- */

enum v2_wire { W_FP32, W_FP64, W_BOOL };

static size_t wire_size(enum v2_wire w)
{
    return w == W_FP64 ? 8 : w == W_FP32 ? 4 : 1;
}

/* Store one real x as element i of t (dtype dt); false if it does not fit. */
static bool store_real(void *data, enum attn_dtype dt, size_t i, double v,
                       bool nullable)
{
    if (isnan(v) || (isinf(v) && !(nullable && v < 0)))
        return false;
    if (dt == ATTN_F32) {
        if (isfinite(v) && fabs(v) > FLT_MAX)
            return false;
        ((float *)data)[i] = (float)v;
    } else {
        ((double *)data)[i] = v;
    }
    return true;
}

struct v2_fill {
    struct api_call *c;
    struct v2_tensor *t;
    enum attn_dtype dt;
    bool is_bool, nullable;
    size_t pos;
};

/* Flatten nested `data` (row-major) into the tensor. */
static bool fill_json(struct v2_fill *f, const json_t *v, int depth,
                      const char *path)
{
    char sub[API_PATH_MAX];
    size_t i;

    if (json_is_array(v)) {
        if (depth > f->t->rank) {
            api_fail(f->c, API_ERR_INVALID_FIELD, path,
                     "data is nested deeper than the shape's rank");
            return false;
        }
        for (i = 0; i < json_array_size(v); i++)
            if (!fill_json(f, json_array_get(v, i), depth + 1,
                           api_pointer_index(sub, sizeof sub, path, i)))
                return false;
        return true;
    }
    if (f->pos >= f->t->count) {
        api_fail(f->c, API_ERR_SHAPE_MISMATCH, path,
                 "data holds more elements than the shape's %zu", f->t->count);
        return false;
    }
    if (f->is_bool) {
        if (!json_is_boolean(v)) {
            api_fail(f->c, API_ERR_INVALID_FIELD, path, "BOOL data must be true or false");
            return false;
        }
        ((uint8_t *)f->t->data)[f->pos++] = json_is_true(v) ? 1 : 0;
        return true;
    }
    if (json_is_null(v) && f->nullable) {
        store_real(f->t->data, f->dt, f->pos++, -INFINITY, true);
        return true;
    }
    if (!json_is_number(v)) {
        api_fail(f->c, API_ERR_INVALID_FIELD, path, "expected a number%s",
                 f->nullable ? " or null" : "");
        return false;
    }
    if (!store_real(f->t->data, f->dt, f->pos, json_number_value(v), false)) {
        api_fail(f->c, API_ERR_NON_FINITE, path, "number out of range of %s",
                 attn_dtype_name(f->dt));
        return false;
    }
    f->pos++;
    return true;
}

/* Little-endian bytes -> the tensor, element by element (portable to any
 * host byte order; the wire order is fixed by the protocol). */
static bool fill_binary(struct api_call *c, struct v2_tensor *t,
                        enum v2_wire w, enum attn_dtype dt, bool nullable,
                        const unsigned char *p, const char *path)
{
    size_t i, k, ws = wire_size(w);

    for (i = 0; i < t->count; i++, p += ws) {
        uint64_t u = 0;
        double v;

        if (w == W_BOOL) {
            ((uint8_t *)t->data)[i] = p[0] != 0;
            continue;
        }
        for (k = 0; k < ws; k++)
            u |= (uint64_t)p[k] << (8 * k);
        if (w == W_FP32) {
            uint32_t u32 = (uint32_t)u;
            float f;
            memcpy(&f, &u32, sizeof f);
            v = f;
        } else {
            memcpy(&v, &u, sizeof v);
        }
        if (!store_real(t->data, dt, i, v, nullable)) {
            api_fail(c, API_ERR_NON_FINITE, path, "element %zu is not a finite "
                     "number of %s", i, attn_dtype_name(dt));
            return false;
        }
    }
    return true;
}

/* shape: 1..3 positive integers; count checked against the budget. */
static bool read_shape(struct api_call *c, struct v2_infer *x,
                       const json_t *shape, const char *prefix,
                       struct v2_tensor *t)
{
    char path[API_PATH_MAX];
    size_t i, count = 1;

    api_pointer_key(path, sizeof path, prefix, "shape");
    if (!json_is_array(shape) || json_array_size(shape) < 1 ||
        json_array_size(shape) > ATTN_MAX_RANK) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "shape must be an array of 1 to %d "
                 "dimensions", ATTN_MAX_RANK);
        return false;
    }
    t->rank = (int)json_array_size(shape);
    for (i = 0; i < json_array_size(shape); i++) {
        const json_t *d = json_array_get(shape, i);
        char dp[API_PATH_MAX];

        api_pointer_index(dp, sizeof dp, path, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            api_fail(c, API_ERR_INVALID_FIELD, dp, "a dimension must be a "
                     "non-negative integer");
            return false;
        }
        if (json_integer_value(d) == 0) {
            api_fail(c, API_ERR_EMPTY_MATRIX, dp, "a dimension is 0");
            return false;
        }
        t->shape[i] = (size_t)json_integer_value(d);
        if (!core_mul(count, t->shape[i], &count) || count > x->budget) {
            api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "the inputs hold more than "
                     "%zu numbers (--max-elements)", c->ctx->cfg.max_elements);
            return false;
        }
    }
    t->count = count;
    x->budget -= count;
    return true;
}

static bool read_wire(struct api_call *c, const json_t *dt, const char *prefix,
                      bool want_bool, enum v2_wire *w)
{
    const char *s = json_string_value(dt);
    char path[API_PATH_MAX];

    api_pointer_key(path, sizeof path, prefix, "datatype");
    if (want_bool && s && strcmp(s, "BOOL") == 0) {
        *w = W_BOOL;
        return true;
    }
    if (!want_bool && s && strcmp(s, "FP32") == 0) {
        *w = W_FP32;
        return true;
    }
    if (!want_bool && s && strcmp(s, "FP64") == 0) {
        *w = W_FP64;
        return true;
    }
    api_fail(c, API_ERR_INVALID_FIELD, path, "datatype must be %s",
             want_bool ? "BOOL" : "FP32 or FP64");
    return false;
}

/* binary_data_size of an input: -1 when the data is in JSON. */
static bool read_binary_size(struct api_call *c, const json_t *in,
                             const char *prefix, long long *size)
{
    static const char *const allowed[] = {"binary_data_size", NULL};
    const json_t *p = member(in, "parameters");
    const json_t *b = member(p, "binary_data_size");
    char path[API_PATH_MAX];

    *size = -1;
    api_pointer_key(path, sizeof path, prefix, "parameters");
    if (p && !json_is_object(p)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "parameters must be an object");
        return false;
    }
    if (p && !api_check_fields(c, p, path, allowed))
        return false;
    if (!b)
        return true;
    if (!json_is_integer(b) || json_integer_value(b) < 0) {
        char bp[API_PATH_MAX];
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(bp, sizeof bp, path,
                 "binary_data_size"), "binary_data_size must be a "
                 "non-negative integer");
        return false;
    }
    *size = (long long)json_integer_value(b);
    return true;
}

/* The raw little-endian bytes of input t (binary_data_size bsize), taken
 * from the binary part after the earlier inputs' bytes. */
static bool read_binary_data(struct api_call *c, struct v2_infer *x,
                             const json_t *in, const char *prefix,
                             struct v2_tensor *t, enum v2_wire w,
                             long long bsize, bool nullable)
{
    char path[API_PATH_MAX];
    size_t need = 0;

    if (member(in, "data")) {
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                 prefix, "data"), "data and binary_data_size exclude "
                 "each other");
        return false;
    }
    if (!core_mul(t->count, wire_size(w), &need) ||
        (unsigned long long)bsize != need) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, api_pointer_key(path, sizeof path,
                 prefix, "parameters/binary_data_size"),
                 "binary_data_size is %lld, the shape and datatype need "
                 "%zu bytes", bsize, need);
        return false;
    }
    if (need > x->bin_len - x->bin_used) {
        api_fail(c, API_ERR_INVALID_FIELD, prefix, "the body holds %zu binary "
                 "bytes after earlier inputs, %zu are needed",
                 x->bin_len - x->bin_used, need);
        return false;
    }
    api_pointer_key(path, sizeof path, prefix, "data");
    if (!fill_binary(c, t, w, x->dt, nullable, x->bin + x->bin_used, path))
        return false;
    x->bin_used += need;
    return true;
}

/* The JSON "data" of input t, flat or nested, exactly t->count elements. */
static bool read_json_data(struct api_call *c, struct v2_infer *x,
                           const json_t *in, const char *prefix,
                           struct v2_tensor *t, bool is_bool, bool nullable)
{
    char path[API_PATH_MAX];
    struct v2_fill f = {c, t, x->dt, is_bool, nullable, 0};
    const json_t *data = member(in, "data");

    api_pointer_key(path, sizeof path, prefix, "data");
    if (!json_is_array(data)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "data must be an array (or "
                 "use binary_data_size)");
        return false;
    }
    if (!fill_json(&f, data, 1, path))
        return false;
    if (f.pos != t->count) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path, "data holds %zu elements, the "
                 "shape needs %zu", f.pos, t->count);
        return false;
    }
    return true;
}

/* One element of "inputs" into its slot. */
static bool read_input(struct api_call *c, struct v2_infer *x,
                       const json_t *in, size_t idx, enum v2_slot slot)
{
    static const char *const allowed[] = {"name", "shape", "datatype",
                                          "parameters", "data", NULL};
    struct v2_tensor *t = &x->t[slot];
    char prefix[API_PATH_MAX];
    bool is_bool = slot == V2_MASK, nullable = slot == V2_AB;
    size_t esz = is_bool ? 1 : attn_dtype_size(x->dt), bytes;
    enum v2_wire w;
    long long bsize;

    api_pointer_index(prefix, sizeof prefix, "/inputs", idx);
    if (!api_check_fields(c, in, prefix, allowed) ||
        !read_wire(c, member(in, "datatype"), prefix, is_bool, &w) ||
        !read_shape(c, x, member(in, "shape"), prefix, t) ||
        !read_binary_size(c, in, prefix, &bsize))
        return false;
    t->present = true;
    t->index = idx;
    if (!core_mul(t->count, esz, &bytes) || !(t->data = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, prefix, "out of memory");
        return false;
    }
    if (bsize >= 0)
        return read_binary_data(c, x, in, prefix, t, w, bsize, nullable);
    return read_json_data(c, x, in, prefix, t, is_bool, nullable);
}

static int slot_of(const char *name)
{
    int i;

    for (i = 0; name && i < V2_NSLOT; i++)
        if (strcmp(name, v2_slot_names[i]) == 0)
            return i;
    return -1;
}

/* The dtype of a stateless computation: that of q (a missing q is
 * reported after the inputs have been read). */
static void pick_dtype(struct v2_infer *x, const json_t *inputs)
{
    size_t i;

    x->dt = ATTN_F64;
    for (i = 0; i < json_array_size(inputs); i++) {
        const json_t *in = json_array_get(inputs, i);
        const char *name = json_string_value(member(in, "name"));
        const char *dt = json_string_value(member(in, "datatype"));

        if (name && strcmp(name, "q") == 0) {
            x->dt = dt && strcmp(dt, "FP32") == 0 ? ATTN_F32 : ATTN_F64;
            return;
        }
    }
}

/* Every element of "inputs", in order (binary data follows that order). */
static bool read_inputs(struct api_call *c, struct v2_infer *x,
                        const json_t *inputs)
{
    size_t i;
    char path[API_PATH_MAX], npath[API_PATH_MAX];

    for (i = 0; i < json_array_size(inputs); i++) {
        const json_t *in = json_array_get(inputs, i);
        const char *name = json_string_value(member(in, "name"));
        int slot = slot_of(name);

        api_pointer_index(path, sizeof path, "/inputs", i);
        if (!json_is_object(in)) {
            api_fail(c, API_ERR_INVALID_FIELD, path, "an input must be an object");
            return false;
        }
        api_pointer_key(npath, sizeof npath, path, "name");
        if (slot < 0) {
            api_fail(c, API_ERR_INVALID_FIELD, npath, "unknown input; the inputs are "
                     "q, k, v, bias_q, bias_k, bias_v, attn_bias, mask");
            return false;
        }
        if (x->t[slot].present) {
            api_fail(c, API_ERR_INVALID_FIELD, npath, "input %s given twice", name);
            return false;
        }
        if (!read_input(c, x, in, i, (enum v2_slot)slot))
            return false;
    }
    if (x->bin_used != x->bin_len) {
        api_fail(c, API_ERR_INVALID_FIELD, NULL, "the body holds %zu binary bytes "
                 "that no input claims", x->bin_len - x->bin_used);
        return false;
    }
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

/* heads, rows, cols of a rank-2 ([rows, cols]) or rank-3 tensor. */
static void hrc(const struct v2_tensor *t, size_t *h, size_t *r, size_t *cols)
{
    *h = t->rank == 3 ? t->shape[0] : 1;
    *r = t->shape[t->rank - 2];
    *cols = t->shape[t->rank - 1];
}

/* q [h,n,d_k] and k, v [h_kv,L,d] -> s (stateless). */
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
        return shape_fail(c, q, "q must be [n,d_k] or [h,n,d_k]");
    if (k->rank != q->rank)
        return shape_fail(c, k, "k must have the rank of q");
    if (v->rank != q->rank)
        return shape_fail(c, v, "v must have the rank of q");
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

/* q [h,n,d_k], optional k, v [h_kv,m,d] against a held session -> s, m. */
static bool shape_session(struct api_call *c, struct v2_infer *x,
                          struct attn_shape *s, size_t *m)
{
    const struct sess_spec *sp = sess_spec(x->sess);
    const struct v2_tensor *q = &x->t[V2_Q], *k = &x->t[V2_K], *v = &x->t[V2_V];
    size_t h, n, d, a, b, cc;

    *s = sp->shape;
    *m = 0;
    if (q->rank < 2)
        return shape_fail(c, q, "q must be [n,d_k] or [h,n,d_k]");
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
    if (!core_add(sess_length(x->sess), *m, &s->L)) {
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

/* attn_bias / mask: [n,L] or [1|h,n,L]. */
static bool score_heads(struct api_call *c, const struct v2_tensor *t,
                        const struct attn_shape *s, size_t *heads)
{
    *heads = 0;
    if (!t->present)
        return true;
    if (t->rank >= 2 && t->shape[t->rank - 2] == s->n &&
        t->shape[t->rank - 1] == s->L) {
        *heads = t->rank == 3 ? t->shape[0] : 1;
        if (t->rank == 2 || *heads == 1 || *heads == s->h)
            return true;
    }
    return shape_fail(c, t, "attn_bias and mask are [n,L] or [h,n,L] with L "
                      "the number of keys");
}

/* ---- options ------------------------------------------------------------- */

static const char *const v2_params_allowed[] = {
    "softmax", "sink_logit", "causal", "scale", "alibi", "rope_base",
    "rope_pairs", "empty_rows", "sequence_id", "sequence_start",
    "sequence_end", "binary_data_output", NULL,
};

/* rope_base (positive number) and rope_pairs ("interleaved"|"half"): either
 * one turns RoPE on. */
static bool read_rope(struct api_call *c, struct v2_infer *x)
{
    const json_t *b = member(x->params, "rope_base");
    const json_t *p = member(x->params, "rope_pairs");
    const char *ps = json_string_value(p);

    x->p.rope = b || p;
    x->p.rope_base = 10000.0;
    x->p.rope_pairs = ATTN_ROPE_INTERLEAVED;
    if (b && (!json_is_number(b) || !(json_number_value(b) > 0) ||
              !isfinite(json_number_value(b)))) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/rope_base",
                 "rope_base must be a positive number");
        return false;
    }
    if (b)
        x->p.rope_base = json_number_value(b);
    if (p && !(ps && (strcmp(ps, "interleaved") == 0 || strcmp(ps, "half") == 0))) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/rope_pairs",
                 "rope_pairs must be \"interleaved\" or \"half\"");
        return false;
    }
    if (ps && strcmp(ps, "half") == 0)
        x->p.rope_pairs = ATTN_ROPE_HALF;
    return true;
}

/* Options fixed by a session may only come with its start. */
static bool refuse_fixed(struct api_call *c, struct v2_infer *x)
{
    static const char *const fixed[] = {"softmax", "sink_logit", "scale",
                                        "alibi", "rope_base", "rope_pairs"};
    static const enum v2_slot biases[] = {V2_BQ, V2_BK, V2_BV};
    char path[API_PATH_MAX];
    size_t i;

    for (i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (member(x->params, fixed[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                     "/parameters", fixed[i]), "%s is fixed at sequence_start",
                     fixed[i]);
            return false;
        }
    for (i = 0; i < 3; i++)
        if (x->t[biases[i]].present) {
            api_pointer_index(path, sizeof path, "/inputs", x->t[biases[i]].index);
            api_fail(c, API_ERR_INVALID_FIELD, path, "%s is fixed at sequence_start",
                     v2_slot_names[biases[i]]);
            return false;
        }
    return true;
}

/* Per-pass options (every request) and session-fixed ones (stateless and
 * sequence_start): softmax, scale, alibi, rope. */
static bool read_options(struct api_call *c, struct v2_infer *x,
                         const struct attn_shape *s, bool fixed_too)
{
    json_t *empty = NULL;
    const json_t *params = x->params;
    bool ok;

    if (!api_read_causal(c, member(params, "causal"), "/parameters/causal",
                         &x->causal) ||
        !api_read_empty_rows(c, member(params, "empty_rows"),
                             "/parameters/empty_rows", &x->empty_rows))
        return false;
    if (!fixed_too)
        return true;
    x->p.dtype = x->dt;
    if (!params)
        params = empty = json_object();
    ok = api_read_softmax(c, params, "/parameters", &x->p.softmax,
                          &x->p.sink_logit) &&
         api_read_scale(c, member(params, "scale"), "/parameters/scale",
                        &x->p.scale, &x->scale_given) &&
         api_read_alibi(c, member(params, "alibi"), "/parameters/alibi", s->h,
                        &x->p.alibi, &x->slopes) &&
         read_rope(c, x);
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

    if (!param_bool(c, x->params, "binary_data_output", &all_binary))
        return false;
    if (!outs) {
        x->outputs = ATTN_OUT_ALL;
        x->binary = all_binary ? ATTN_OUT_ALL : 0;
        return true;
    }
    if (!json_is_array(outs) || json_array_size(outs) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, "/outputs", "outputs must be a non-empty "
                 "array");
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
        for (k = 0; k < 3 && !(name && strcmp(name, v2_out_names[k]) == 0); k++)
            ;
        if (k == 3 || (x->outputs & (1u << k))) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(pp, sizeof pp, path,
                     "name"), k == 3 ? "unknown output; the outputs are "
                     "scores, weights, output" : "output named twice");
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
        if (member(p, "binary_data") && !param_bool(c, p, "binary_data", &bin))
            return false;
        x->outputs |= 1u << k;
        if (bin)
            x->binary |= 1u << k;
    }
    return true;
}

/* ---- compute and answer -------------------------------------------------- */

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
    size_t shape[3];
    size_t count;
};

/* The three outputs with the rank of q. */
static void out_views(const struct attn_request *r, const struct attn_result *res,
                      int q_rank, struct v2_out o[3])
{
    const struct attn_shape *s = &r->shape;
    const void *data[3] = {res->scores, res->weights, res->output};
    size_t cols[3] = {s->L, s->L, s->d_v};
    int k;

    for (k = 0; k < 3; k++) {
        o[k].data = data[k];
        o[k].rank = q_rank;
        o[k].count = s->h * s->n * cols[k];
        if (q_rank == 3) {
            o[k].shape[0] = s->h;
            o[k].shape[1] = s->n;
            o[k].shape[2] = cols[k];
        } else {
            o[k].shape[0] = s->n;
            o[k].shape[1] = cols[k];
        }
    }
}

static void write_params(struct api_buf *b, const struct v2_infer *x,
                         const struct attn_request *r, size_t n_empty)
{
    api_buf_printf(b, "\"parameters\":{\"empty_rows\":%zu", n_empty);
    if (x->seq) {
        api_buf_puts(b, ",\"sequence_id\":");
        if (json_is_integer(x->seq_id))
            api_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(x->seq_id));
        else
            api_write_string(b, json_string_value(x->seq_id));
        api_buf_printf(b, ",\"sequence_start\":%s,\"sequence_end\":%s,"
                       "\"sequence_length\":%zu,\"session_id\":",
                       x->seq_start ? "true" : "false",
                       x->seq_end ? "true" : "false", r->shape.L);
        api_write_string(b, x->sid);
    }
    api_buf_putc(b, '}');
}

static void respond(struct api_call *c, const struct v2_infer *x,
                    const struct attn_request *r, const struct attn_result *res,
                    size_t cap)
{
    const char *id = json_string_value(member(x->hdr, "id"));
    const char *dtn = x->dt == ATTN_F32 ? "FP32" : "FP64";
    struct v2_out o[3];
    struct api_buf b;
    size_t hlen, i;
    bool first = true;
    int k, d;
    char num[32];

    out_views(r, res, x->t[V2_Q].rank, o);
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
    for (k = 0; k < 3; k++) {
        if (!(x->outputs & (1u << k)))
            continue;
        api_buf_printf(&b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[",
                       first ? "" : ",", v2_out_names[k], dtn);
        first = false;
        for (d = 0; d < o[k].rank; d++)
            api_buf_printf(&b, "%s%zu", d ? "," : "", o[k].shape[d]);
        if (x->binary & (1u << k)) {
            api_buf_printf(&b, "],\"parameters\":{\"binary_data_size\":%zu}}",
                           o[k].count * attn_dtype_size(x->dt));
            continue;
        }
        api_buf_puts(&b, "],\"data\":[");
        for (i = 0; i < o[k].count; i++) {
            const char *p = (const char *)o[k].data + i * attn_dtype_size(x->dt);
            if (i)
                api_buf_putc(&b, ',');
            api_write_number(&b, x->dt, p, 0);
        }
        api_buf_puts(&b, "]}");
    }
    api_buf_puts(&b, "]}");
    hlen = b.len;
    for (k = 0; k < 3; k++)
        if (x->binary & x->outputs & (1u << k))
            put_le(&b, o[k].data, x->dt, o[k].count);
    api_reply_buf(c, 200, &b);
    if (c->resp->status == 200 && (x->binary & x->outputs)) {
        c->resp->content_type = "application/octet-stream";
        snprintf(num, sizeof num, "%zu", hlen);
        api_response_header(c->resp, V2_HDR_LEN, num);
    }
}

/* Bytes the response may take: JSON text per number, binary bytes, and
 * room for the fixed members. */
static bool response_cap(const struct attn_request *r, const struct v2_infer *x,
                         size_t *cap)
{
    struct v2_out o[3];
    struct attn_result none;
    size_t total = 4096, part;
    int k;

    memset(&none, 0, sizeof none);
    out_views(r, &none, x->t[V2_Q].rank, o);
    for (k = 0; k < 3; k++) {
        if (!(x->outputs & (1u << k)))
            continue;
        if (!core_mul(o[k].count, (x->binary & (1u << k))
                      ? attn_dtype_size(x->dt) : API_NUM_MAX + 1, &part) ||
            !core_add(total, part, &total))
            return false;
    }
    *cap = total;
    return true;
}

/* Numbers limit, result buffers, the pass (stateless or session), reply. */
static void run(struct api_call *c, struct v2_infer *x, struct attn_request *r,
                const struct attn_inputs *in, size_t m)
{
    struct attn_result res;
    size_t numbers, cap, maxe = api_max_elements(c);
    enum core_status st;

    if (!api_attention_numbers(r, &numbers) || numbers > maxe ||
        !response_cap(r, x, &cap)) {
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, "/outputs", "the response would "
                 "hold more than %zu numbers (--max-elements); ask for fewer "
                 "outputs", maxe);
        return;
    }
    if ((st = attn_check(r)) != CORE_OK) {
        api_fail_core(c, st, NULL);
        return;
    }
    if (!api_result_alloc(r, &res)) {
        api_result_free(&res);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    if (x->sess) {
        struct sess_query q = {
            .q = in->q, .n = r->shape.n, .causal = r->causal,
            .empty_rows = r->empty_rows, .attn_bias = r->attn_bias,
            .attn_bias_heads = r->attn_bias_heads, .mask = r->mask,
            .mask_heads = r->mask_heads, .outputs = r->outputs,
        };
        st = sess_attend(c->ctx->store, x->sess, in->k, in->v, m, &q, &res,
                         c->req->ws);
    } else {
        st = attn_forward(r, in, &res, c->req->ws);
    }
    if (st != CORE_OK)
        api_fail_core(c, st, NULL);
    else
        respond(c, x, r, &res, cap);
    api_result_free(&res);
}

/* sequence_start: a new session from this request's shapes and options,
 * mapped from the sequence id (replacing and deleting an older one). */
static bool sequence_create(struct api_call *c, struct v2_infer *x,
                            const struct attn_request *r,
                            const struct attn_inputs *in)
{
    struct sess_spec sp;
    char old[SESS_ID_MAX];
    enum core_status st;

    memset(&sp, 0, sizeof sp);
    sp.shape = r->shape;
    sp.shape.n = sp.shape.L = 0;
    sp.params = r->params;
    sp.bias_q = in->bias_q;
    sp.bias_k = in->bias_k;
    sp.bias_v = in->bias_v;
    sp.bias_q_heads = in->bias_q ? in->bias_q_heads : 0;
    sp.bias_k_heads = in->bias_k ? in->bias_k_heads : 0;
    sp.bias_v_heads = in->bias_v ? in->bias_v_heads : 0;
    if ((st = sess_create(c->ctx->store, &sp, x->sid)) != CORE_OK) {
        api_fail_core(c, st, NULL);
        return false;
    }
    if (!seq_put(c->ctx, x->seq_key, x->sid, old)) {
        seq_prune(c->ctx);
        if (!seq_put(c->ctx, x->seq_key, x->sid, old)) {
            sess_delete(c->ctx->store, x->sid);
            api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "too many open sequences "
                     "(%d)", API_V2_MAX_SEQUENCES);
            return false;
        }
    }
    if (old[0] && strcmp(old, x->sid) != 0)
        sess_delete(c->ctx->store, old);
    if ((st = sess_acquire(c->ctx->store, x->sid, &x->sess)) != CORE_OK) {
        x->sess = NULL;
        api_fail_core(c, st, NULL);
        return false;
    }
    return true;
}

/* Shapes, options, the attn_request, then the pass. */
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
    if (stateless_shape) {
        if (!bias_heads(c, &x->t[V2_BQ], r.shape.d_k, r.shape.h, &in.bias_q_heads) ||
            !bias_heads(c, &x->t[V2_BK], r.shape.d_k, r.shape.h_kv, &in.bias_k_heads) ||
            !bias_heads(c, &x->t[V2_BV], r.shape.d_v, r.shape.h_kv, &in.bias_v_heads))
            return;
        m = r.shape.L;
    } else if (!refuse_fixed(c, x)) {
        return;
    }
    if (!score_heads(c, &x->t[V2_AB], &r.shape, &r.attn_bias_heads) ||
        !score_heads(c, &x->t[V2_MASK], &r.shape, &r.mask_heads) ||
        !read_options(c, x, &r.shape, stateless_shape) ||
        !read_outputs(c, x, member(x->hdr, "outputs")))
        return;
    r.params = stateless_shape ? x->p : sess_spec(x->sess)->params;
    r.causal = x->causal;
    r.empty_rows = x->empty_rows;
    r.attn_bias = x->t[V2_AB].data;
    r.mask = x->t[V2_MASK].data;
    r.outputs = x->outputs;
    in.q = x->t[V2_Q].data;
    in.k = x->t[V2_K].data;
    in.v = x->t[V2_V].data;
    in.bias_q = x->t[V2_BQ].data;
    in.bias_k = x->t[V2_BK].data;
    in.bias_v = x->t[V2_BV].data;
    if (x->seq_start) {
        enum core_status st = attn_check(&r);
        if (st != CORE_OK) {
            api_fail_core(c, st, NULL);
            return;
        }
        if (!sequence_create(c, x, &r, &in))
            return;
        r.params = sess_spec(x->sess)->params;
    }
    run(c, x, &r, &in, m);
}

static void v2_infer(struct api_call *c)
{
    static const char *const allowed[] = {"id", "parameters", "inputs",
                                          "outputs", NULL};
    struct v2_infer x;
    const json_t *inputs, *id;

    memset(&x, 0, sizeof x);
    x.budget = api_max_elements(c);
    if (!split_body(c, &x))
        goto out;
    if (!api_check_fields(c, x.hdr, "", allowed))
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
    if (x.params && !api_check_fields(c, x.params, "/parameters", v2_params_allowed))
        goto out;
    inputs = member(x.hdr, "inputs");
    if (!json_is_array(inputs) || json_array_size(inputs) == 0) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "inputs must be a non-empty array");
        goto out;
    }
    if (!read_sequence(c, &x))
        goto out;
    pick_dtype(&x, inputs);
    if (x.seq && !x.seq_start && !sequence_acquire(c, &x))
        goto out;
    if (!read_inputs(c, &x, inputs))
        goto out;
    if (!x.t[V2_Q].present) {
        api_fail(c, API_ERR_INVALID_FIELD, "/inputs", "input q is required");
        goto out;
    }
    infer_compute(c, &x);
out:
    if (x.sess) {
        sess_release(c->ctx->store, x.sess);
        /* sequence_end, or a start whose first request failed: no sequence
         * is left behind */
        if (x.seq_end || (x.seq_start && c->resp->status >= 400)) {
            sess_delete(c->ctx->store, x.sid);
            seq_forget(c->ctx, x.seq_key, x.sid);
        }
    }
    infer_free(&x);
}

/* ---- routing ------------------------------------------------------------- */

/* After "/models/attention" with an optional "/versions/1": the tail ("",
 * "/ready", "/infer"), or NULL when the path names another model/version
 * (then *what says which). */
static const char *model_tail(const char *rest, const char **what)
{
    static const char models[] = "/models/";
    static const char model[] = "/models/" V2_MODEL;
    static const char ver[] = "/versions/";
    const char *p;

    *what = NULL;
    if (strncmp(rest, models, sizeof models - 1) != 0)
        return NULL;
    if (strncmp(rest, model, sizeof model - 1) != 0 ||
        (rest[sizeof model - 1] != '\0' && rest[sizeof model - 1] != '/')) {
        *what = "model";
        return NULL;
    }
    p = rest + sizeof model - 1;
    if (strncmp(p, ver, sizeof ver - 1) == 0) {
        p += sizeof ver - 1;
        if (strncmp(p, V2_VERSION, sizeof V2_VERSION - 1) != 0 ||
            (p[sizeof V2_VERSION - 1] != '\0' && p[sizeof V2_VERSION - 1] != '/')) {
            *what = "version";
            return NULL;
        }
        p += sizeof V2_VERSION - 1;
    }
    return p;
}

static void dispatch(struct api_call *c, const char *rest)
{
    const char *what, *tail;

    if (strcmp(rest, "") == 0 || strcmp(rest, "/") == 0) {
        c->resp->route = "/v2";
        is_get(c) ? v2_server_meta(c) : api_fail_method(c, "GET");
    } else if (strcmp(rest, "/health/live") == 0) {
        c->resp->route = "/v2/health/live";
        is_get(c) ? v2_health(c, false) : api_fail_method(c, "GET");
    } else if (strcmp(rest, "/health/ready") == 0) {
        c->resp->route = "/v2/health/ready";
        is_get(c) ? v2_health(c, true) : api_fail_method(c, "GET");
    } else if ((tail = model_tail(rest, &what)) != NULL && *tail == '\0') {
        c->resp->route = "/v2/models/{model}";
        is_get(c) ? v2_model_meta(c) : api_fail_method(c, "GET");
    } else if (tail && strcmp(tail, "/ready") == 0) {
        c->resp->route = "/v2/models/{model}/ready";
        is_get(c) ? v2_model_ready(c) : api_fail_method(c, "GET");
    } else if (tail && strcmp(tail, "/infer") == 0) {
        c->resp->route = "/v2/models/{model}/infer";
        is_post(c) ? v2_infer(c) : api_fail_method(c, "POST");
    } else if (what) {
        c->resp->route = "/v2/models/{model}";
        api_fail(c, API_ERR_NOT_FOUND, NULL, "unknown %s; this server serves model "
                 "\"" V2_MODEL "\" version " V2_VERSION, what);
    } else {
        c->resp->route = "/v2";
        api_fail(c, API_ERR_NOT_FOUND, NULL, "no route for /v2%s", rest);
    }
}

void api_v2(struct api_call *c, const char *rest)
{
    dispatch(c, rest ? rest : "");
    api_v2_error_shape(c);
}
