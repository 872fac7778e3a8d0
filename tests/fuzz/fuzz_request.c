/*
 * tests/fuzz/fuzz_request.c — libFuzzer target: the request path of every
 * endpoint, in-process, from raw bytes.
 *
 * Input layout: byte 0 picks the route and method (and, in its high bits, the
 * Content-Type sent), byte 1 picks the parameters of the session that session
 * routes act on, the rest is the request body. For the v2 infer route, byte 1
 * (plus 256 when bit 7 of byte 0 is set) is instead the
 * Inference-Header-Content-Length of the binary tensor extension (0: none). Route 15 instead takes the
 * body's first line as the path — or as "<METHOD> <path>" when bit 1 of
 * byte 1 is set — so the router itself is fuzzed, and the rest as the body.
 * Each input runs against a fresh store holding one session with three
 * cached rows, so every crash reproduces from its input alone.
 *
 * POST /v1/attention (route 0) also goes a second way: its body put
 * through an early decoder (api/early.h) in pieces that byte 1 picks,
 * into a buffer that starts full of quotes, backslashes and '=', as the
 * transport does for a large body. The fuzz build (fuzz.mk,
 * ATTND_FUZZ_EARLY) lets bodies and strings of 64 bytes in, so the
 * decoder and the readers that step over its holes are reached.
 *
 * Oracles, beyond ASan/UBSan: the status is a real HTTP status; nothing ever
 * answers 500; every error answers the error object
 * {"error":{"code","message","path"}} whose code is in the error table with
 * that very status; every JSON body parses (so no NaN/Infinity leaves;
 * integers past int64 are read as reals, as JSON allows); the early way
 * answers the same status and the same body but for meta.elapsed_us.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/early.h"
#include "api/error.h"
#include "core/attn.h"
#include "core/store.h"

#define FUZZ_MAX_PATH 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

struct fuzz_route {
    const char *method;
    const char *path;               /* the path, or its part before the id */
    const char *after_id;           /* NULL: no id; else the part after it */
};

static const struct fuzz_route fuzz_routes[16] = {
    {"POST", "/v1/attention", NULL},
    {"POST", "/v1/verify", NULL},
    {"GET", "/verify", NULL},
    {"POST", "/v1/sessions", NULL},
    {"POST", "/v1/sessions/", "/kv"},
    {"POST", "/v1/sessions/", "/attention"},
    {"POST", "/v1/sessions/", "/truncate"},
    {"POST", "/v1/sessions/", "/fork"},
    {"GET", "/v1/sessions/", ""},
    {"GET", "/v1/sessions/", "/kv"},
    {"DELETE", "/v1/sessions/", ""},
    {"GET", "/v1/info", NULL},
    {"POST", "/v2/models/attention/infer", NULL},
    {"OPTIONS", "/v1/attention", NULL},
    {"PUT", "/v1/sessions/", ""},
    {NULL, NULL, NULL},             /* path from the body */
};

static const char *const fuzz_ctypes[4] = {
    "application/json", "application/json; charset=utf-8", "text/plain", NULL,
};

struct fuzz_headers {
    const char *ctype;
    const char *v2_hdr_len;         /* Inference-Header-Content-Length, or NULL */
};

static const char *fuzz_header(void *arg, const char *name)
{
    const struct fuzz_headers *h = arg;

    if (strcasecmp(name, "Content-Type") == 0)
        return h->ctype;
    if (strcasecmp(name, "Origin") == 0)
        return "http://fuzz.example";
    if (strcasecmp(name, "Inference-Header-Content-Length") == 0)
        return h->v2_hdr_len;
    return NULL;
}

static void fuzz_fail(const char *what, const struct api_response *r)
{
    fprintf(stderr, "fuzz_request: %s (status %d): %.*s\n", what, r->status,
            (int)(r->body_len < 400 ? r->body_len : 400), r->body ? r->body : "");
    abort();
}

/* The session every session route acts on: byte b picks its parameters. */
static void fuzz_session(struct sess_store *st, uint8_t b, char *id)
{
    static const double bias_k[4] = {3, -2, 0.5, 1};
    struct sess_spec spec;
    size_t kv_heads = (b & 1) ? 2 : 1;
    size_t heads = kv_heads * ((b & 2) ? 2 : 1);
    double k[2 * 3 * 2], v[2 * 3 * 2];

    memset(&spec, 0, sizeof spec);
    spec.shape.h = heads;
    spec.shape.h_kv = kv_heads;
    spec.shape.d_k = 2;
    spec.shape.d_v = 2;
    spec.params.dtype = ATTN_F64;
    spec.params.scale = attn_default_scale(2);
    spec.params.softmax = (enum attn_softmax)((b >> 2) % 3);
    spec.params.sink_logit = 0.5;
    spec.params.rope = (b & 32) != 0;
    spec.params.rope_base = 10000;
    spec.params.alibi = (b & 64) != 0;
    if (b & 128) {
        spec.bias_k = bias_k;
        spec.bias_k_heads = 1;
    }
    spec.max_tokens = 16;
    spec.ttl_s = 60;
    if (sess_create(st, &spec, id) != CORE_OK) {
        fprintf(stderr, "fuzz_request: cannot create the fixture session\n");
        abort();
    }
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        k[i] = (double)((int)(i % 5) - 2);
        v[i] = (double)i * 0.25;
    }
    struct sess *s;
    if (sess_acquire(st, id, &s) != CORE_OK)
        abort();
    if (sess_append(st, s, k, v, 3, -1) != CORE_OK)
        abort();
    sess_release(st, s);
}

/* The error object, its code in the table with this status. */
static void fuzz_check_error(const struct api_response *r, json_t *doc)
{
    json_t *e = json_object_get(doc, "error");

    if (!json_is_object(e) || json_object_size(doc) != 1)
        fuzz_fail("error body is not {\"error\":{...}}", r);
    json_t *code = json_object_get(e, "code");
    json_t *msg = json_object_get(e, "message");
    json_t *path = json_object_get(e, "path");
    if (!json_is_string(code) || !json_is_string(msg) || !path ||
        !(json_is_null(path) || json_is_string(path)))
        fuzz_fail("error object lacks code/message/path", r);
    enum api_err err;
    if (!api_error_parse(json_string_value(code), &err))
        fuzz_fail("error code not in the table", r);
    if (api_error_status(err) != r->status)
        fuzz_fail("error status differs from the table's", r);
    if (r->error != err)
        fuzz_fail("response's error differs from its body's code", r);
}

static void fuzz_check(const struct api_response *r, int v2)
{
    if (r->status < 100 || r->status > 599)
        fuzz_fail("not an HTTP status", r);
    if (r->status == 500)
        fuzz_fail("500 internal on client input", r);
    if (!r->body || r->body_len == 0 || !r->content_type ||
        strncmp(r->content_type, "application/json", 16) != 0)
        return;
    size_t json_len = r->body_len;
    for (size_t i = 0; i < r->n_headers; i++)   /* v2 binary outputs follow the JSON */
        if (strcasecmp(r->headers[i].name, "Inference-Header-Content-Length") == 0) {
            char *end;
            unsigned long long n = strtoull(r->headers[i].value, &end, 10);
            if (*end || n == 0 || n > r->body_len)
                fuzz_fail("bad Inference-Header-Content-Length in a response", r);
            json_len = (size_t)n;
        }
    json_error_t jerr;
    json_t *doc = json_loadb(r->body, json_len, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!doc)
        fuzz_fail("response body is not JSON", r);
    if (r->status >= 400 && !v2)
        fuzz_check_error(r, doc);
    json_decref(doc);
}

/* The answer as text for comparison: the JSON without meta.elapsed_us
 * (sorted, compact), else the raw bytes; status first. malloc'd. */
static char *fuzz_answer(const struct api_response *r)
{
    json_t *doc = r->body ? json_loadb(r->body, r->body_len, JSON_DECODE_INT_AS_REAL, NULL)
                          : NULL;
    char *text = NULL, *out;
    size_t n;

    if (doc) {
        json_object_del(json_object_get(doc, "meta"), "elapsed_us");
        text = json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT);
        json_decref(doc);
    }
    n = (text ? strlen(text) : r->body_len) + 16;
    if (!(out = malloc(n)))
        abort();
    int k = snprintf(out, n, "%d ", r->status);
    if (text)
        memcpy(out + k, text, strlen(text) + 1);
    else {
        if (r->body_len)
            memcpy(out + k, r->body, r->body_len);
        out[k + r->body_len] = '\0';
    }
    free(text);
    return out;
}

/* The size of the piece at off for way w (byte 1): a fixed size, or (w
 * bit 7) up to the next quote, so that a piece ends where a string does. */
static size_t fuzz_piece(const char *body, size_t len, size_t off, uint8_t w)
{
    static const size_t sizes[8] = {1, 3, 7, 31, 32, 33, 64, 4096};
    size_t n = sizes[w & 7] + ((w >> 3) & 15);
    if (w & 128) {
        const char *q = memchr(body + off + 1, '"', len - off - 1);
        n = q ? (size_t)(q - body) - off : len - off;
    }
    return n ? n : 1;
}

/* req's body sent the early way, in pieces of way w: the answer must be
 * the same as ref's. */
static void fuzz_early(struct api_ctx *ctx, const struct api_request *req, uint8_t w,
                       const struct api_response *ref)
{
    static const char hostile[] = "\"\\=\"A\\\"=";
    struct api_request er = *req;
    struct api_response resp;
    struct api_early *e;
    size_t len = req->body_len;

    er.body = NULL;
    er.body_len = 0;
    if (!len || !(e = api_early_open(&er, len)))
        return;                     /* not a body the decoder takes */
    char *buf = malloc(len);
    if (!buf)
        abort();
    for (size_t i = 0; i < len; i++)
        buf[i] = hostile[i % (sizeof hostile - 1)];
    for (size_t off = 0, n; off < len; off += n) {
        n = fuzz_piece(req->body, len, off, w);
        if (n > len - off)
            n = len - off;
        api_early_put(e, buf, off, req->body + off, n);
    }
    er.body = buf;
    er.body_len = len;
    er.early = e;
    memset(&resp, 0, sizeof resp);
    api_handle(ctx, &er, &resp);
    char *a = fuzz_answer(ref), *b = fuzz_answer(&resp);
    if (strcmp(a, b) != 0) {
        fprintf(stderr, "fuzz_request: the early way answered otherwise\n  %.400s\n  %.400s\n",
                a, b);
        abort();
    }
    free(a);
    free(b);
    api_response_free(&resp);
    api_early_free(e);
    free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    attn_blas_init(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const no_origins[] = {NULL};
    char id[SESS_ID_MAX];
    char path[FUZZ_MAX_PATH];
    char method[FUZZ_MAX_PATH];
    struct fuzz_headers hdr;
    struct api_request req;
    struct api_response resp;

    if (size < 2)
        return 0;
    const struct fuzz_route *rt = &fuzz_routes[data[0] & 15];
    hdr.ctype = fuzz_ctypes[(data[0] >> 4) & 3];
    /* v2 binary extension: byte 1 (and bit 7 of byte 0) give the JSON length. */
    char hdr_len[16];
    hdr.v2_hdr_len = NULL;
    if ((data[0] & 15) == 12 && (data[1] || (data[0] & 128))) {
        snprintf(hdr_len, sizeof hdr_len, "%u", data[1] + ((data[0] & 128) ? 256u : 0u));
        hdr.v2_hdr_len = hdr_len;
    }
    const char *body = (const char *)data + 2;
    size_t body_len = size - 2;

    struct sess_config scfg = {
        .max_sessions = 4, .max_cache_bytes = 1 << 20, .default_ttl_s = 60,
        .default_max_tokens = 64, .policy = (data[0] & 64) ? SESS_POLICY_LRU
                                                           : SESS_POLICY_REJECT,
    };
    struct sess_store *st = sess_store_new(&scfg);
    if (!st)
        return 0;
    fuzz_session(st, data[1], id);

    memset(&req, 0, sizeof req);
    if (rt->method) {
        req.method = rt->method;
        snprintf(path, sizeof path, "%s%s%s", rt->path, rt->after_id ? id : "",
                 rt->after_id ? rt->after_id : "");
    } else {
        const char *nl = memchr(body, '\n', body_len);
        size_t n = nl ? (size_t)(nl - body) : body_len;
        if (n >= sizeof path)
            n = sizeof path - 1;
        memcpy(path, body, n);
        path[n] = '\0';
        req.method = (data[1] & 1) ? "POST" : "GET";
        char *sp = (data[1] & 2) ? strchr(path, ' ') : NULL;
        if (sp) {                   /* "<METHOD> <path>": the method too */
            *sp = '\0';
            memcpy(method, path, (size_t)(sp - path) + 1);
            req.method = method;
            memmove(path, sp + 1, strlen(sp + 1) + 1);
        }
        body_len -= nl ? n + 1 : n;
        body += nl ? n + 1 : n;
    }
    req.path = path;
    req.header = fuzz_header;
    req.header_arg = &hdr;
    req.body = body_len ? body : NULL;
    req.body_len = body_len;

    struct api_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.cfg.max_body_bytes = 1 << 20;
    ctx.cfg.max_elements = 4096;
    ctx.cfg.max_tokens = 64;
    ctx.cfg.session_ttl_s = 60;
    ctx.cfg.cors_origins = no_origins;
    ctx.cfg.workers = 1;
    ctx.cfg.version = "fuzz";
    ctx.store = st;

    memset(&resp, 0, sizeof resp);
    api_handle(&ctx, &req, &resp);
    fuzz_check(&resp, strncmp(path, "/v2", 3) == 0);
    fuzz_early(&ctx, &req, data[1], &resp);
    api_response_free(&resp);
    sess_store_free(st);
    return 0;
}
