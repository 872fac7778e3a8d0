/*
 * api/v2/v2.c — the Open Inference Protocol v2 (KServe / Triton REST), so that
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
 * Sequence extension: parameters sequence_id (an integer 1..2^64-1, as
 * Triton's uint64, or a string), sequence_start and sequence_end map onto
 * sessions (the KV cache).
 * The start request creates a session from its q, k, v shapes and options,
 * appends k, v and attends q, exactly as a stateless request would; later
 * requests append their k, v (optional) and attend q against the whole cache;
 * sequence_end deletes the session after its request. The process keeps a
 * bounded map sequence_id -> session id (a client picks sequence ids, the
 * store picks session ids); a string sequence_id that names an existing
 * session (e.g. one created with POST /v1/sessions) continues that session.
 * Responses carry parameters.session_id, so the v1 routes can inspect it.
 *
 * This file routes /v2, answers the metadata and health routes and reshapes
 * errors; api/v2/v2_infer.c runs an inference request, api/v2/v2_tensor.c reads
 * its tensors and api/v2/v2_seq.c keeps the sequence map.
 *
 * Errors are built with the shared api_fail helpers (one error table) and
 * rewritten at the end into the protocol's {"error":"..."} shape with the
 * status mapping Triton uses.
 */
#include "api/v2/v2_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- errors in the protocol's shape ------------------------------------ */

/* Triton's mapping: every client mistake in a request is 400 invalid
 * argument; what HTTP itself says (auth, route, method, body size, rate,
 * unavailable, deadline) keeps its status. */
static int v2_status(int status)
{
    switch (status) {
    case 401: case 404: case 405: case 413: case 429: case 500: case 503:
    case 504:
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

const char *const api_v2_slot_names[V2_NSLOT] = {
    "q", "k", "v", "bias_q", "bias_k", "bias_v", "attn_bias", "mask",
    "sink_logits", "positions_q", "positions_k", "segments_q", "segments_k",
};

const char *api_v2_datatype_name(enum attn_dtype dt, enum api_half half)
{
    if (half != API_HALF_NONE)
        return half == API_HALF_F16 ? "FP16" : "BF16";
    return dt == ATTN_F32 ? "FP32" : "FP64";
}


/* ---- metadata and health ----------------------------------------------- */

/* The extensions served; "sequence(string_id)" is how the sequence
 * extension's text has a server say that sequence_id may be a string. */
static void v2_server_meta(struct api_call *c)
{
    const char *v = c->ctx->cfg.version ? c->ctx->cfg.version : "";

    api_reply_json(c, 200, json_pack("{s:s, s:s, s:[s,s,s,s]}", "name", "attnd",
                                     "version", v, "extensions",
                                     "binary_tensor_data", "sequence",
                                     "sequence(string_id)", "parameters"));
}

static void v2_health(struct api_call *c, bool ready)
{
    if (!ready) {
        api_reply_json(c, 200, json_pack("{s:b}", "live", 1));
        return;
    }
    bool draining = api_draining(c);        /* once: status and body agree */
    api_reply_json(c, draining ? 503 : 200, json_pack("{s:b}", "ready", !draining));
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

/* An input's entry: the first datatype and the largest rank as the protocol's
 * "datatype" and "shape", and under "parameters" every datatype and rank
 * it accepts (api_v2_inputs). */
static json_t *input_meta(const char *name, const struct v2_input_spec *sp)
{
    json_t *t = tensor_meta(name, sp->datatypes[0], sp->max_rank);
    json_t *types = json_array(), *ranks = json_array();
    size_t i;
    int r;

    for (i = 0; sp->datatypes[i]; i++)
        json_array_append_new(types, json_string(sp->datatypes[i]));
    for (r = sp->min_rank; r <= sp->max_rank; r++)
        json_array_append_new(ranks, json_integer(r));
    json_object_set_new(t, "parameters", json_pack("{s:o, s:o}", "datatypes", types,
                                                   "ranks", ranks));
    return t;
}

/* The largest rank infer gives output i: it keeps q's rank (at most 4), a
 * row statistic one less, the labels 1. */
static int out_rank(size_t i)
{
    if (i >= V2_TOK_Q)
        return 1;
    return i >= V2_LSE && i <= V2_MASS ? 3 : 4;
}

static void v2_model_meta(struct api_call *c)
{
    static const struct v2_input_spec tokens = {{"BYTES", NULL}, 1, 1};
    json_t *in = json_array(), *out = json_array();
    size_t i;

    for (i = 0; i < V2_NSLOT; i++)
        json_array_append_new(in, input_meta(api_v2_slot_names[i], &api_v2_inputs[i]));
    json_array_append_new(in, input_meta("tokens_q", &tokens));
    json_array_append_new(in, input_meta("tokens_k", &tokens));
    for (i = 0; i < V2_NOUT; i++)
        json_array_append_new(out, tensor_meta(api_v2_out_names[i],
                                               i == V2_ARGMAX || i == V2_TOPK_IDX ? "INT64"
                                               : i >= V2_TOK_Q ? "BYTES" : "FP64",
                                               out_rank(i)));
    api_reply_json(c, 200, json_pack("{s:s, s:[s], s:s, s:o, s:o}", "name",
                                     V2_MODEL, "versions", V2_VERSION,
                                     "platform", "attnd", "inputs", in,
                                     "outputs", out));
}

static void v2_model_ready(struct api_call *c)
{
    bool draining = api_draining(c);        /* once: status and body agree */
    api_reply_json(c, draining ? 503 : 200,
                   json_pack("{s:s, s:b}", "name", V2_MODEL, "ready", !draining));
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

static const char r_server[] = "/v2", r_live[] = "/v2/health/live",
                  r_ready[] = "/v2/health/ready", r_model[] = "/v2/models/{model}",
                  r_model_ready[] = "/v2/models/{model}/ready",
                  r_infer[] = "/v2/models/{model}/infer";

const char *api_v2_route(const char *rest)
{
    const char *what, *tail;

    if (strcmp(rest, "") == 0 || strcmp(rest, "/") == 0)
        return r_server;
    if (strcmp(rest, "/health/live") == 0)
        return r_live;
    if (strcmp(rest, "/health/ready") == 0)
        return r_ready;
    tail = model_tail(rest, &what);
    if (tail && *tail == '\0')
        return r_model;
    if (tail && strcmp(tail, "/ready") == 0)
        return r_model_ready;
    if (tail && strcmp(tail, "/infer") == 0)
        return r_infer;
    return "unmatched";
}

/* The methods of each route: what dispatch answers, its 405s' Allow and
 * the router's CORS preflight. */
static const struct api_route_methods v2_methods[] = {
    {r_server, API_M_GET}, {r_live, API_M_GET}, {r_ready, API_M_GET},
    {r_model, API_M_GET}, {r_model_ready, API_M_GET}, {r_infer, API_M_POST}};

unsigned api_v2_methods(const char *rest)
{
    return api_route_methods(v2_methods, sizeof v2_methods / sizeof v2_methods[0],
                             api_v2_route(rest));
}

static void dispatch(struct api_call *c, const char *rest)
{
    const char *route = api_v2_route(rest), *what = NULL;
    unsigned methods = api_v2_methods(rest);

    c->resp->route = route;
    if (methods && !(api_method_bit(c->req->method) & methods)) {
        api_fail_method(c, methods);
    } else if (route == r_server) {
        v2_server_meta(c);
    } else if (route == r_live) {
        v2_health(c, false);
    } else if (route == r_ready) {
        v2_health(c, true);
    } else if (route == r_model) {
        v2_model_meta(c);
    } else if (route == r_model_ready) {
        v2_model_ready(c);
    } else if (route == r_infer) {
        api_v2_infer(c);
    } else if (model_tail(rest, &what) == NULL && what) {
        api_fail(c, API_ERR_NOT_FOUND, NULL, "unknown %s; this server serves model "
                 "\"" V2_MODEL "\" version " V2_VERSION, what);
    } else {
        api_fail(c, API_ERR_NOT_FOUND, NULL, "no route for /v2%s", rest);
    }
}

void api_v2(struct api_call *c, const char *rest)
{
    dispatch(c, rest ? rest : "");
    api_v2_error_shape(c);
}
