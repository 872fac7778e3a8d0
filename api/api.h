/*
 * api/api.h — the service as a pure function.
 *
 * api_handle() turns one HTTP request (method, path, headers, body) into one
 * response (status, headers, body) over the shared state in struct api_ctx
 * (configuration, session store, metrics renderer). It never touches a
 * socket, so every route is testable in-process (tests/api/). server/ feeds it
 * requests from libmicrohttpd and writes back what it returns.
 *
 * api_handle() is thread-safe: the worker pool calls it concurrently.
 */
#ifndef ATTND_API_H
#define ATTND_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/error.h"

struct sess_store;   /* core/store.h */
struct attn_ws;      /* core/attn.h */

/* An API key's name, with its NUL, at most (server/keys.h's too). */
#define API_KEY_NAME_MAX 64

/* Limits and policies; server/ fills this from flags and ATTND_* env. */
struct api_config {
    size_t max_body_bytes;          /* request body cap (server enforces, api reports) */
    size_t max_elements;            /* cap on numbers in one request's inputs, and in its response */
    size_t max_tokens;              /* default max_tokens of a session */
    double session_ttl_s;           /* default ttl_s of a session */
    const char *api_key;            /* Bearer token, or NULL/"" for none
                                       (its name is "default") */
    /* Checks a Bearer token instead of api_key when set (server/keys.c:
     * several named keys, reloaded on SIGHUP); thread-safe. token: what
     * follows "Bearer " and its spaces; it ignores trailing ones. The
     * valid key's name goes to name (the scope of Idempotency-Key). */
    bool (*auth)(void *arg, const char *token, char name[API_KEY_NAME_MAX]);
    void *auth_arg;
    const char *const *cors_origins;/* NULL-terminated allowlist, or NULL */
    /* The route template of a static file the transport serves itself to
     * GET and HEAD (the demo page, the OpenAPI document), or NULL for any
     * other path; thread-safe. The api answers the other methods there
     * as on its own routes: 405 with Allow, OPTIONS a preflight. NULL:
     * no static files. */
    const char *(*static_route)(const char *path);
    int workers;                    /* compute threads (for /v1/info) */
    const char *version;            /* "0.1.0" */
};

/* Renders Prometheus text for /metrics into a malloc'd buffer (server/). */
typedef char *(*api_metrics_fn)(void *arg, size_t *len);

/* Shared state of the service. Zero-initialise it and fill cfg, store and
 * metrics; they stay the caller's. */
struct api_ctx {
    struct api_config cfg;
    struct sess_store *store;       /* sessions; may be NULL before sessions exist */
    api_metrics_fn metrics;         /* NULL: /metrics answers 404 */
    void *metrics_arg;
    atomic_int draining;            /* set by server on SIGTERM: /readyz 503 */
};


/* Looks up a request header by case-insensitive name; NULL if absent. */
typedef const char *(*api_header_fn)(void *arg, const char *name);

/* The length of a header field's value v without the spaces and tabs
 * after it: RFC 9110 5.5, they are not part of the value (libmicrohttpd
 * drops the ones before it only). One rule for the Bearer token, the
 * Idempotency-Key, the API key file's check and the transport's check of
 * repeated lines. */
size_t api_field_len(const char *v);

struct api_request {
    const char *method;             /* "GET", "POST", ... */
    const char *path;               /* URL path, percent-decoded by the transport, no query */
    api_header_fn header;           /* may be NULL: no headers */
    void *header_arg;
    const char *body;               /* not NUL-terminated; may be NULL when body_len == 0 */
    size_t body_len;
    struct attn_ws *ws;             /* the calling worker's scratch, or NULL */
    size_t max_elements;            /* a lower cap than cfg.max_elements for this
                                       request alone (the transport's inline
                                       path), or 0 for none */
    struct api_stream *stream;      /* the body, taken as it arrived
                                       (api_stream_open), or NULL */
    struct api_early *early;        /* its long base64 strings, decoded as
                                       it arrived (api_early_open), or NULL */
    bool pieces_ok;                 /* the transport sends a response body
                                       read piece by piece (api_pieces) */
    const char *key_name;           /* the transport's check of the Bearer
                                       token against cfg.auth's keys: "" none
                                       valid, else the key's name; NULL when it
                                       made none (the api checks it then) */
};

#define API_MAX_HEADERS 16

struct api_header {
    char name[64];
    char value[512];
};

struct api_response {
    int status;                     /* HTTP status */
    enum api_err error;             /* the error replied, or API_ERR_NONE */
    const char *route;              /* route template for logs/metrics, e.g. "/v1/sessions/{id}"; static */
    const char *content_type;       /* static string, e.g. "application/json" */
    char *body;                     /* malloc'd (api_response_free frees it), may be NULL */
    size_t body_len;                /* of body, or of pieces */
    bool head;                      /* a HEAD answer that holds no body:
                                       body_len is the length of the one GET
                                       would send (body and pieces NULL) */
    struct api_pieces *pieces;      /* the body to read piece by piece (body
                                       NULL), or NULL; api_response_free frees it */
    struct api_header headers[API_MAX_HEADERS];
    size_t n_headers;
};

/*
 * The paths the api answers without the API key, whatever the method
 * (NULL-terminated): the probes an orchestrator calls. The static files
 * (the demo page, which asks for the key itself, and the OpenAPI document)
 * are open too: server/ serves them before the api sees a request.
 * `attnd --help` prints both as the one list of open routes, which the
 * README and the OpenAPI document (security: []) follow;
 * tests/e2e/test_e2e_open_routes.py holds them to it.
 */
extern const char *const api_open_paths[];

/* Route jansson's allocations through the api's watch (api/body.c), which
 * tells a body that memory could not be found to read (503
 * capacity_exhausted) from one that is not JSON. Called once before any
 * thread uses jansson (the first body read installs it otherwise). */
void api_json_hook(void);

/* Handle one request. resp is fully written (status always set). */
void api_handle(struct api_ctx *ctx, const struct api_request *req,
                struct api_response *resp);

/*
 * A request body taken as it arrives instead of buffered: an upload of
 * POST /v1/sessions/import goes straight into the new session's pages,
 * never held whole (api/sessions_move.c).
 *   api_stream_open   after the headers (req without a body): a stream
 *                     when the api takes this request's body so (its
 *                     route and method, authorized, its media type,
 *                     sessions available), else NULL: buffer the body as
 *                     usual. total: the body's announced bytes (SIZE_MAX:
 *                     chunked). Cheap: nothing is allocated for the rows
 *                     before their header has arrived and been checked.
 *   api_stream_feed   the next n bytes of the body; false once the stream
 *                     has refused them (later bytes are then not needed).
 *   api_stream_close  frees the stream and whatever it built and did not
 *                     finish (a refusal, or a client gone midway); NULL:
 *                     no-op.
 * Once the body has ended, api_handle answers the request with
 * req->stream set (and no body); close the stream after it. One thread at
 * a time per stream.
 */
struct api_stream;
struct api_stream *api_stream_open(struct api_ctx *ctx, const struct api_request *req,
                                   size_t total);
bool api_stream_feed(struct api_stream *s, const void *p, size_t n);
void api_stream_close(struct api_stream *s);

/*
 * A buffered body's long base64 strings decoded while it arrives, on the
 * thread that receives it (api/early.h), so that a large request is not
 * decoded whole after its last byte:
 *   api_early_open   after the headers (req without a body), for a body
 *                    of total announced bytes: a decoder when the request
 *                    is one whose reader takes them (POST /v1/attention
 *                    of 1 MiB or more), else NULL.
 *                    Its buffers are written 3/4 of total bytes at most.
 *   api_early_put    the body's next n bytes, data, into body[off, off +
 *                    n) instead of copying them there: what it decodes of
 *                    them it does not copy (body is the same buffer, of
 *                    total bytes, every call; off the bytes before).
 *   api_early_free   frees what was not taken; NULL: no-op.
 * Set req->early for api_handle (the body is not what was sent without
 * it); free it after, not before the body. One thread at a time.
 */
struct api_early;
struct api_early *api_early_open(const struct api_request *req, size_t total);
void api_early_put(struct api_early *e, char *body, size_t off, const char *data, size_t n);
void api_early_free(struct api_early *e);

/*
 * A response body read piece by piece instead of held whole: a session
 * export is read from a snapshot of the session's pages as the transport
 * sends it (api/sessions_move.c), so its bytes never sit in a buffer of
 * their own. Given only when req->pieces_ok; resp->body_len is its size.
 * A HEAD of an export gets none: its answer says the length (resp->head)
 * without a snapshot taken.
 *   api_pieces_read  the next up to n bytes into buf; fewer than n only at
 *                    the end (0 past it)
 *   api_pieces_free  lets go of it (a body sent, or a client gone midway);
 *                    NULL: no-op
 * A transport that takes resp->pieces sets it NULL and frees it once the
 * body is done with. One thread at a time per body.
 */
struct api_pieces;
size_t api_pieces_read(struct api_pieces *b, void *buf, size_t n);
void api_pieces_free(struct api_pieces *b);

/*
 * Where the transport may answer a request (method, path) without the
 * compute pool: on its own thread, for a probe (GET or HEAD of /healthz,
 * /readyz, /metrics, v2's health and its model's readiness: they read flags
 * and counters, and a liveness probe must not wait behind a busy pool), or
 * for a POST /v1/attention whose body is tiny (stateless: its work is
 * bounded by its body; the transport sets the bound). Anything else goes to
 * the pool.
 */
enum api_place { API_PLACE_POOL, API_PLACE_PROBE, API_PLACE_INLINE };
enum api_place api_route_place(const char *method, const char *path);

/*
 * Whether api_handle would read req's body: a POST to a route that takes
 * POST, with a valid key where one is needed. Anything else (another
 * method, a preflight, a path nothing has, a static file, a request
 * refused 401) is answered from the method, path and headers alone, so
 * the transport drops such a body as it arrives instead of holding it.
 */
bool api_reads_body(struct api_ctx *ctx, const struct api_request *req);

/*
 * The route template of a path, as api_handle would label its reply
 * ("/v1/sessions/{id}/kv"; a static file's, api_config.static_route, when
 * ctx is not NULL; "unmatched" when nothing has it); static text. For
 * what the transport counts and logs without the api's answer: its own
 * refusals, a client gone before the answer.
 */
const char *api_route_of(const struct api_ctx *ctx, const char *path);

/*
 * Only the CORS headers api_handle would add to an answer to req (Vary:
 * Origin, and to an allowed origin Access-Control-Allow-Origin and
 * -Expose-Headers) into resp's header slots, nothing else of it set: for
 * the static files the transport serves itself.
 */
void api_cors_headers(struct api_ctx *ctx, const struct api_request *req,
                      struct api_response *resp);

/*
 * Build the JSON error reply for a condition the transport detects itself
 * (body over the cap, bad transfer coding, over a rate limit, ...): code is
 * an error such as API_ERR_BODY_TOO_LARGE (a value outside the table
 * answers internal); message may be NULL (the table's text). CORS headers
 * are added as for any reply; resp->route is the path's template
 * (api_route_of), so its metrics and log line name the route asked for.
 */
void api_transport_error(struct api_ctx *ctx, const struct api_request *req,
                         enum api_err code, const char *message,
                         struct api_response *resp);

/* Add a header (truncates overlong values; ignores past API_MAX_HEADERS). */
void api_response_header(struct api_response *resp, const char *name,
                         const char *value);

void api_response_free(struct api_response *resp);

#endif
