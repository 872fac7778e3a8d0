/*
 * server/http.h — the libmicrohttpd transport of attnd.
 *
 * Accepts connections, reads requests into capped body buffers, answers
 * transport-level faults itself in JSON (through api_transport_error), serves
 * the embedded static files, and hands every other request to api_handle()
 * on the libuv work pool: the connection is suspended while the pool works
 * and resumed from the loop thread when the response is ready. Every
 * function here runs on the loop thread.
 */
#ifndef ATTND_SERVER_HTTP_H
#define ATTND_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "api/api.h"
#include "server/config.h"
#include "server/metrics.h"

struct srv_http;

/* Called on the loop thread when, after srv_http_quiesce, no request is in
 * flight any more. Must not stop the transport from inside the callback
 * (it runs inside the transport); schedule that instead. */
typedef void (*srv_http_idle_fn)(void *arg);

struct srv_keys;
struct srv_limits;

/* What the transport checks before a request reaches the api. */
struct srv_http_guard {
    struct srv_keys *keys;          /* API keys (names for logs and limits), or NULL */
    struct srv_limits *limits;      /* per-client admission, or NULL */
    bool tls;                       /* HTTPS with server/tls.c's current pair */
};

/* The route template of an embedded static file's path ("/",
 * "/v1/openapi.json", "/{asset}"), or NULL: api_config.static_route. */
const char *srv_http_asset_route(const char *path);

/* Request bodies buffered at once, at most, for --max-body-bytes. */
size_t srv_http_body_budget(size_t max_body_bytes);

/* The transport with its loop handles, not yet listening; NULL on ENOMEM.
 * Whatever follows, it ends with srv_http_stop and then srv_http_free. */
struct srv_http *srv_http_new(uv_loop_t *loop, const struct srv_config *cfg,
                              struct api_ctx *ctx, struct srv_metrics *metrics,
                              const struct srv_http_guard *guard);

/* Bind and start listening: 0, or on failure (the reason logged) the
 * exit code: 2 for a --host that does not resolve or is no address of
 * this machine (a bad value), 1 for anything else (the port taken, ...). */
int srv_http_listen(struct srv_http *h);

/* The TCP port actually bound (useful with --port 0). */
unsigned srv_http_port(const struct srv_http *h);

/* Stop accepting new connections; answers from now on close their
 * connection. idle is called once no request is in flight (maybe at once). */
void srv_http_quiesce(struct srv_http *h, srv_http_idle_fn idle, void *arg);

/* Requests received and not yet answered / currently on the work pool. */
size_t srv_http_in_flight(const struct srv_http *h);
size_t srv_http_working(const struct srv_http *h);

/* From now on a request that would go to the pool is answered 503
 * draining instead (none is suspended after this); returns how many are
 * still on the pool. Once it returns 0, srv_http_stop may run at any
 * later time. */
size_t srv_http_seal(struct srv_http *h);

/*
 * --drain-timeout has run out with requests still on the work pool: each
 * whose changes can no longer land (none journaled yet: they are refused
 * from now on, core/store.h's sess_commit) is answered 503 draining; one
 * that has journaled a change already, or has its answer, is left to
 * answer for itself (*left counts them) and goes on; the others'
 * computations are cancelled. New work is refused as srv_http_seal does, and what is
 * suspended after this is answered 503 as well. Returns how many were
 * answered 503. The pool's threads may go on with the cut requests until
 * the process exits; their connections are no longer theirs.
 */
size_t srv_http_cut(struct srv_http *h, size_t *left);

/* Loop thread: cancel every computation still on the pool (those
 * srv_http_cut left to answer, once their time is up): each stops at its
 * next piece and lets go of its session. */
void srv_http_cancel(struct srv_http *h);

/* Answers srv_http_cut is waiting for (503s, and requests left to answer)
 * that have not been sent (or found their client gone) yet. */
size_t srv_http_owed(const struct srv_http *h);

/* Stop the transport: closes every connection (none may be on the pool)
 * and its libuv handles. The struct stays readable (srv_http_working
 * answers 0) until srv_http_free, which comes after the loop has run the
 * handles' close and the helper pool, whose policy reads it, has stopped. */
void srv_http_stop(struct srv_http *h);
void srv_http_free(struct srv_http *h);

/* Loop thread, once a second: shut the connections past their read
 * deadlines (server/readguard.c: --read-timeout, --min-body-rate); how
 * many. */
size_t srv_http_sweep_reads(struct srv_http *h);

#endif
