/*
 * api/router.c — api_handle(): method + path -> handler, with the
 * cross-cutting policies every route shares: CORS (allowlist, Vary: Origin,
 * OPTIONS preflight), Bearer authentication (constant-time compare), 404 /
 * 405 with Allow, and the route template reported to logs and metrics.
 * Exact routes are checked here for their method; the subtrees /v1/sessions
 * (api/sessions.c) and /v2 (api/v2/v2.c) route the rest of the path and check
 * methods themselves, from the same per-route sets they give the router for
 * a preflight. The static files the transport serves to GET and HEAD
 * (api_config.static_route) get the other methods' 405 and OPTIONS here.
 */
#include "api/internal.h"
#include "api/v2/v2_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct api_route {
    const char *path;               /* exact path */
    const char *route;              /* template for logs and metrics */
    unsigned methods;               /* M_* bits */
    void (*handler)(struct api_call *c);
    /* takes the body as it arrives (api_stream_open), or NULL */
    struct api_stream *(*stream_open)(struct api_call *c, size_t total);
    /* its reader takes base64 strings decoded as the body arrived
     * (api_early_open: api_parse_body_pre); jansson would only have them
     * written back first */
    bool early;
    enum api_place place;           /* where the transport may answer it */
};

#define POOL API_PLACE_POOL
static const struct api_route api_routes[] = {
    {"/healthz", "/healthz", API_M_GET, api_ops_healthz, NULL, false, API_PLACE_PROBE},
    {"/readyz", "/readyz", API_M_GET, api_ops_readyz, NULL, false, API_PLACE_PROBE},
    {"/metrics", "/metrics", API_M_GET, api_ops_metrics, NULL, false, API_PLACE_PROBE},
    {"/v1/info", "/v1/info", API_M_GET, api_ops_info, NULL, false, POOL},
    {"/v1/attention", "/v1/attention", API_M_POST, api_attention, NULL, true, API_PLACE_INLINE},
    {"/v1/sessions/import", "/v1/sessions/import", API_M_POST, api_sessions_import,
     api_sessions_import_open, false, POOL},
    {"/v1/verify", "/v1/verify", API_M_GET | API_M_POST, api_verify, NULL, false, POOL},
    {"/verify", "/verify", API_M_GET | API_M_POST, api_verify, NULL, false, POOL},
};
#undef POOL

/* OIP v2's probes (routed by its subtree, api/v2/v2.c): its health and
 * the model's readiness, which read the drain flag alone, and so answer
 * their own bodies while draining, where a request on the pool would be
 * refused 503 in the error shape. */
static const char *const v2_probes[] = {"/v2/health/live", "/v2/health/ready",
                                        "/v2/models/attention/ready",
                                        "/v2/models/attention/versions/1/ready"};

const char *const api_open_paths[] = {
    "/healthz", "/readyz", "/v2/health/live", "/v2/health/ready", NULL,
};

static bool open_path(const char *path)
{
    const char *const *p;

    for (p = api_open_paths; *p; p++)
        if (strcmp(*p, path) == 0)
            return true;
    return false;
}

/* Subtrees whose handler routes the rest of the path itself. */
struct api_subtree {
    const char *prefix;             /* the subtree's root path */
    unsigned (*methods)(const char *rest);  /* those of a path below it (0: none) */
    void (*handler)(struct api_call *c, const char *rest);
    const char *(*route)(const char *rest);   /* template of a path below it */
};

static const struct api_subtree api_subtrees[] = {
    {"/v1/sessions", api_sessions_methods, api_sessions, api_sessions_route},
    {"/v2", api_v2_methods, api_v2, api_v2_route},
};

/* Inference-Header-Content-Length: the v2 protocol's binary tensor data
 * extension, in both directions. X-Request-Id and traceparent (W3C Trace
 * Context): what tracing libraries add to every fetch; a preflight that
 * does not allow them fails the whole call. Idempotency-Key and
 * Idempotent-Replayed: a create's, fork's or import's key and its replay.
 * Allow: the methods of a 405. */
static const char cors_allow_headers[] =
    "Authorization, Content-Type, Inference-Header-Content-Length, X-Request-Id, traceparent, "
    "Idempotency-Key";
static const char cors_expose_headers[] =
    "Location, Retry-After, WWW-Authenticate, Allow, Inference-Header-Content-Length, "
    "X-Request-Id, Idempotent-Replayed";
static const char cors_max_age[] = "600";

/* The subtree holding path (its root itself or below it), or NULL; *rest
 * is the path after the root ("" or "/..."). */
static const struct api_subtree *subtree_find(const char *path,
                                              const char **rest)
{
    size_t i, n;

    for (i = 0; i < sizeof api_subtrees / sizeof api_subtrees[0]; i++) {
        n = strlen(api_subtrees[i].prefix);
        if (strncmp(path, api_subtrees[i].prefix, n) == 0 &&
            (path[n] == '\0' || path[n] == '/')) {
            *rest = path + n;
            return &api_subtrees[i];
        }
    }
    return NULL;
}

/* path is /v2 or below it: errors there take that protocol's shape. */
static bool under_v2(const char *path)
{
    const char *rest;
    const struct api_subtree *st = path ? subtree_find(path, &rest) : NULL;

    return st && st->handler == api_v2;
}

static const struct api_route *route_find(const char *path)
{
    size_t i;

    for (i = 0; i < sizeof api_routes / sizeof api_routes[0]; i++)
        if (strcmp(api_routes[i].path, path) == 0)
            return &api_routes[i];
    return NULL;
}

/* ---- CORS ------------------------------------------------------------- */

static bool cors_enabled(const struct api_ctx *ctx)
{
    return ctx->cfg.cors_origins && ctx->cfg.cors_origins[0];
}

/* The Access-Control-Allow-Origin value for this request, or NULL. */
static const char *cors_allow_origin(const struct api_ctx *ctx,
                                     const char *origin)
{
    const char *const *o;

    if (!cors_enabled(ctx) || !origin || !*origin)
        return NULL;
    for (o = ctx->cfg.cors_origins; *o; o++) {
        if (strcmp(*o, "*") == 0)
            return "*";     /* never combined with Allow-Credentials */
        if (strcmp(*o, origin) == 0)
            return origin;
    }
    return NULL;
}

static void cors_headers(struct api_call *c)
{
    const char *allow;

    if (!cors_enabled(c->ctx))
        return;
    api_response_header(c->resp, "Vary", "Origin");
    allow = cors_allow_origin(c->ctx, api_header(c, "Origin"));
    if (!allow)
        return;
    api_response_header(c->resp, "Access-Control-Allow-Origin", allow);
    api_response_header(c->resp, "Access-Control-Expose-Headers",
                        cors_expose_headers);
}

/* OPTIONS on a known path: 204 with what a browser may send there. The
 * allow headers are only sent to an allowed origin (cors_headers). */
static void preflight(struct api_call *c, unsigned methods)
{
    char m[64];

    api_reply_empty(c, 204);
    if (!cors_allow_origin(c->ctx, api_header(c, "Origin")))
        return;
    api_methods_text(methods, m, sizeof m);
    api_response_header(c->resp, "Access-Control-Allow-Methods", m);
    api_response_header(c->resp, "Access-Control-Allow-Headers",
                        cors_allow_headers);
    api_response_header(c->resp, "Access-Control-Max-Age", cors_max_age);
}

/* ---- authentication --------------------------------------------------- */

/* Compare in time that depends only on the lengths, never on where the
 * first difference is. */
static bool secret_equal(const char *a, size_t na, const char *b, size_t nb)
{
    volatile unsigned char diff = (unsigned char)(na != nb);
    size_t i;

    for (i = 0; i < nb; i++)
        diff |= (unsigned char)(b[i] ^ (i < na ? a[i] : 0));
    return diff == 0;
}

/* The token of an "Authorization: Bearer TOKEN" header (the scheme in
 * any case, spaces after it skipped), NULL when none is sent. */
size_t api_field_len(const char *v)
{
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    return n;
}

static const char *bearer_token(struct api_call *c)
{
    const char *h = api_header(c, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    for (h += 7; *h == ' ' || *h == '\t'; h++)
        ;
    return h;
}

static bool authorized(struct api_call *c)
{
    const char *key = c->ctx->cfg.api_key;
    const char *h;

    c->key_name[0] = '\0';
    if (c->trusted || ((!key || !*key) && !c->ctx->cfg.auth))
        return true;
    if (c->req->key_name && c->ctx->cfg.auth) {     /* checked once, by the transport */
        snprintf(c->key_name, sizeof c->key_name, "%s", c->req->key_name);
        return c->req->key_name[0] != '\0';
    }
    h = bearer_token(c);
    if (!h)
        return false;
    if (c->ctx->cfg.auth) {     /* it ignores trailing whitespace too */
        char name[API_KEY_NAME_MAX] = "";
        bool ok = c->ctx->cfg.auth(c->ctx->cfg.auth_arg, h, name);
        if (ok)
            snprintf(c->key_name, sizeof c->key_name, "%s", name);
        return ok;
    }
    bool ok = secret_equal(h, api_field_len(h), key, strlen(key));
    if (ok)
        snprintf(c->key_name, sizeof c->key_name, "default");
    return ok;
}

/* 401 with the challenge of RFC 6750 section 3: a Bearer token that was
 * sent and is not a key is error="invalid_token", so that a client tells
 * a wrong key from a missing one; none sent, no error code. */
static void unauthorized(struct api_call *c)
{
    api_fail(c, API_ERR_UNAUTHORIZED, NULL, NULL);
    api_response_header(c->resp, "WWW-Authenticate",
                        bearer_token(c) ? "Bearer realm=\"attnd\", error=\"invalid_token\""
                             : "Bearer realm=\"attnd\"");
}

/* ---- dispatch --------------------------------------------------------- */

static void call_init(struct api_call *c, struct api_ctx *ctx,
                      const struct api_request *req, struct api_response *resp)
{
    /* Every field but the header slots (9 KiB; n_headers says how many are
     * in use): clearing them all was a visible cost of a small request. */
    resp->body = NULL;
    resp->pieces = NULL;
    resp->body_len = 0;
    resp->head = false;
    resp->content_type = NULL;
    resp->n_headers = 0;
    resp->status = 500;
    resp->error = API_ERR_NONE;
    resp->route = "unmatched";
    c->ctx = ctx;
    c->req = req;
    c->resp = resp;
    c->t0_us = api_now_us();
    c->answered = false;
    c->trusted = false;
    c->key_name[0] = '\0';
    c->half = API_HALF_NONE;
}

/* A static file reaching the api: only an in-process caller sends one
 * (the transport serves them itself). */
static void static_file(struct api_call *c)
{
    api_fail(c, API_ERR_NOT_FOUND, NULL, "%s is a static file, served by the transport",
             c->req->path);
}

/* What a path names: an exact route, a subtree (with the rest of the
 * path below it), or a static file; and the methods it takes. */
struct target {
    const struct api_route *rt;
    const struct api_subtree *st;
    const char *rest;
    const char *file;
    unsigned methods;
};

static void target_find(const struct api_ctx *ctx, const char *path, struct target *t)
{
    t->rest = NULL;
    t->rt = route_find(path);
    t->st = t->rt ? NULL : subtree_find(path, &t->rest);
    t->file = t->rt || t->st || !ctx->cfg.static_route ? NULL : ctx->cfg.static_route(path);
    t->methods = t->rt ? t->rt->methods : t->st ? t->st->methods(t->rest)
               : t->file ? API_M_GET : 0;
}

/* path is /v1 or /v2, or below one of them: the API's own paths. */
static bool under_api(const char *path)
{
    return (strncmp(path, "/v1", 3) == 0 || strncmp(path, "/v2", 3) == 0) &&
           (path[3] == '\0' || path[3] == '/');
}

/* Whether dispatch asks t's request for a key: not for a preflight (a
 * browser sends none: on a path with no route it is 404 with or without
 * one), a static file or an open route, nor for a path nothing has
 * outside /v1 and /v2 (404). Under them a path with no route asks for one
 * as well, so that without the key it answers as a route does (401), not
 * 404. */
static bool needs_key(const struct target *t, const char *method, const char *path)
{
    if (strcmp(method, "OPTIONS") == 0)
        return false;
    if (!t->methods && !t->st)
        return under_api(path) && !open_path(path);
    return !t->file && !open_path(path);
}

static void dispatch(struct api_call *c)
{
    const char *path = c->req->path ? c->req->path : "";
    const char *method = c->req->method ? c->req->method : "";
    struct target t;

    target_find(c->ctx, path, &t);
    if (t.rt)
        c->resp->route = t.rt->route;
    else if (t.st)
        c->resp->route = t.st->route(t.rest);   /* "unmatched" below it too */
    else if (t.file)
        c->resp->route = t.file;
    /* the key before the 404: under /v1 and /v2 an unknown path and a
     * route are told apart only with it */
    if (needs_key(&t, method, path) && !authorized(c)) {
        unauthorized(c);
        if (under_v2(path))
            api_v2_error_shape(c);
        return;
    }
    if (!t.methods && !t.st) {
        api_fail(c, API_ERR_NOT_FOUND, NULL, "no route for %s", path);
        return;
    }
    /* below a subtree, a path with no route is the subtree's 404 */
    if (t.methods && strcmp(method, "OPTIONS") == 0) {
        preflight(c, t.methods);
        return;
    }
    if (t.st) {
        t.st->handler(c, t.rest);
        return;
    }
    if (!(api_method_bit(method) & t.methods)) {
        api_fail_method(c, t.methods);
        return;
    }
    if (t.file)
        static_file(c);
    else
        t.rt->handler(c);
}

void api_handle(struct api_ctx *ctx, const struct api_request *req,
                struct api_response *resp)
{
    struct api_call c;

    call_init(&c, ctx, req, resp);
    dispatch(&c);
    if (!c.answered)
        api_fail(&c, API_ERR_INTERNAL, NULL, "handler did not answer");
    cors_headers(&c);
}

void api_handle_trusted(struct api_ctx *ctx, const struct api_request *req,
                        struct api_response *resp)
{
    struct api_call c;

    call_init(&c, ctx, req, resp);
    c.trusted = true;
    dispatch(&c);
    if (!c.answered)
        api_fail(&c, API_ERR_INTERNAL, NULL, "handler did not answer");
}

struct api_stream *api_stream_open(struct api_ctx *ctx, const struct api_request *req,
                                   size_t total)
{
    struct api_call c;
    struct api_response resp;       /* unused: nothing is answered here */
    const struct api_route *rt = req->path ? route_find(req->path) : NULL;

    if (!rt || !rt->stream_open || !req->method || !(api_method_bit(req->method) & rt->methods))
        return NULL;
    call_init(&c, ctx, req, &resp);
    if (!open_path(req->path) && !authorized(&c))
        return NULL;
    return rt->stream_open(&c, total);
}

bool api_reads_body(struct api_ctx *ctx, const struct api_request *req)
{
    struct api_call c;
    struct api_response resp;       /* unused: nothing is answered here */
    struct target t;

    if (!req->path || !req->method)
        return false;
    target_find(ctx, req->path, &t);
    /* only the POST handlers read a body: GET, HEAD, DELETE, a preflight
     * and the refusals (404, 405, 401) answer from the method, path and
     * headers */
    if (t.file || !(api_method_bit(req->method) & t.methods & API_M_POST))
        return false;
    if (!needs_key(&t, req->method, req->path))
        return true;
    call_init(&c, ctx, req, &resp);
    return authorized(&c);
}

bool api_route_takes_early(const struct api_request *req)
{
    const struct api_route *rt = req->path ? route_find(req->path) : NULL;

    return rt && rt->early && req->method && (api_method_bit(req->method) & rt->methods);
}

enum api_place api_route_place(const char *method, const char *path)
{
    const struct api_route *rt = path ? route_find(path) : NULL;
    bool get = method && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
    bool post = method && strcmp(method, "POST") == 0;

    if (rt && rt->place == API_PLACE_PROBE)
        return get ? API_PLACE_PROBE : API_PLACE_POOL;
    if (rt && rt->place == API_PLACE_INLINE)
        return post ? API_PLACE_INLINE : API_PLACE_POOL;
    for (size_t i = 0; path && get && i < sizeof v2_probes / sizeof *v2_probes; i++)
        if (strcmp(path, v2_probes[i]) == 0)
            return API_PLACE_PROBE;
    return API_PLACE_POOL;
}

const char *api_route_of(const struct api_ctx *ctx, const char *path)
{
    const char *rest = NULL;
    const struct api_route *rt = path ? route_find(path) : NULL;
    const struct api_subtree *st = rt || !path ? NULL : subtree_find(path, &rest);
    const char *file = rt || st || !path || !ctx || !ctx->cfg.static_route
                           ? NULL : ctx->cfg.static_route(path);

    return rt ? rt->route : st ? st->route(rest) : file ? file : "unmatched";
}

void api_cors_headers(struct api_ctx *ctx, const struct api_request *req,
                      struct api_response *resp)
{
    struct api_call c;

    call_init(&c, ctx, req, resp);
    cors_headers(&c);
}

void api_transport_error(struct api_ctx *ctx, const struct api_request *req,
                         enum api_err code, const char *message,
                         struct api_response *resp)
{
    struct api_call c;

    call_init(&c, ctx, req, resp);
    resp->route = api_route_of(ctx, req->path);
    if ((int)code < 0 || code >= API_ERR_COUNT)
        code = API_ERR_INTERNAL;
    if (message)
        api_fail(&c, code, NULL, "%s", message);
    else
        api_fail(&c, code, NULL, NULL);
    if (under_v2(req->path))
        api_v2_error_shape(&c);
    cors_headers(&c);
}
