/*
 * server/http.c — libmicrohttpd glue: body caps, suspend/resume, transport
 * errors in JSON. Body buffers are server/http_body.c's, the built-in
 * files server/http_assets.c's, the work pool's side of a request
 * server/http_work.c's, the daemon's options, start and stop
 * server/http_start.c's; what they share is in server/http_impl.h.
 *
 * Threads: MHD runs a pool of --http-threads internal poll() threads
 * (default: one per CPU; 1 gives a single thread, no pool); each owns the
 * connections it accepted, and everything they share (spare request, body
 * budget, pending list, metrics, log) is atomic or under a mutex. Finished
 * request bodies go to the libuv loop (uv_async), which queues them on the
 * work pool; the pool thread that computed the answer resumes the
 * connection (server/http_work.c; the loop only when --drain-timeout cuts
 * a request short); tiny
 * POST /v1/attention requests are answered on the MHD thread instead
 * (answer_inline, bounded by body and response size). Poll mode, not
 * epoll: MHD's epoll mode keeps a half-closed partial request until the
 * idle timeout. Why these choices, with their measurements:
 * docs/benchmarks.md ("The transport"). MHD's per-address connection
 * count is shared by the pool but a close is noticed by the owning thread,
 * so for a moment a closed connection still counts; tests that need an
 * exact count wait for attnd_connections_open first.
 * All MHD calls on a connection happen on the MHD thread that owns it, except
 * MHD_resume_connection (pool or loop thread; thread-safe by MHD's contract),
 * MHD_quiesce_daemon and MHD_stop_daemon (loop thread, by design).
 *
 * Request life (struct req, MHD's *con_cls):
 *   1st call    headers only: check Content-Length/Transfer-Encoding,
 *               answering 400 at once; refuse 413 (over --max-body-bytes),
 *               429 (--rate-limit) or 503 (body budget) at once, or once a
 *               body that ends within DISCARD_LIMIT bytes past the cap has
 *               been read and dropped (refuse_early); else return YES
 *               (answering from the first call turns keep-alive off).
 *   body calls  append into a buffer capped at --max-body-bytes; past the
 *               cap, keep counting but discard (bounded), answer 413. A
 *               body the api answers without (api_reads_body) is counted
 *               and dropped the same way from its first byte. A
 *               body the api takes as it arrives (a session import: an
 *               api_stream opened at the 1st call) is fed piece by piece
 *               to its stream instead, never buffered (body_start).
 *   last call   static file, probe or tiny attention request (answered
 *               here), or suspend + hand to the loop (uv_async), which runs
 *               api_handle on the pool (uv_queue_work); while draining, a
 *               new request is refused (503 draining) instead.
 *   resumed     by the pool thread that computed it (server/http_work.c);
 *               queue the api_response; MHD sends it. Or, when
 *               --drain-timeout runs out while it computes, by the loop
 *               (srv_http_cut): answer 503 draining without its response.
 *   completed   log line, metrics, free.
 */
#include "server/http_impl.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api/spare.h"

#include "server/keys.h"
#include "server/limits.h"
#include "server/log.h"
#include "server/sched.h"
#include "server/tcp.h"
#include "server/tls.h"
#include "server/worker.h"

/* Bytes past the cap that are read and dropped to answer 413 cleanly: of a
 * chunked upload, or of a body refused from its headers, which is read and
 * dropped before the refusal is answered (refuse_early); a client that goes
 * on beyond is disconnected. */
#define DISCARD_LIMIT ((uint64_t)16 << 20)
#define BUDGET_MSG "too many request bodies in flight; retry"
/* Free a request struct and the body buffer it keeps (NULL: no-op). */
void http_req_destroy(struct req *r)
{
    if (r) {
        free(r->keep);
        free(r->text);
    }
    free(r);
}

/* ---- headers ----------------------------------------------------------- */

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind,
                                      const char *key, const char *value)
{
    (void)kind;
    struct req *r = cls;
    if (r->n_hdr == MAX_REQ_HEADERS)
        return MHD_NO;
    r->hdr[r->n_hdr].name = key;
    r->hdr[r->n_hdr].value = value ? value : "";
    r->n_hdr++;
    return MHD_YES;
}

/* The method, path and headers copied out of MHD's connection memory into
 * r->text, and pointed at there: a request cut at --drain-timeout is
 * answered and its connection closed (MHD frees that memory) while its
 * pool thread may still read them. Each string's length is taken once.
 * false: out of memory. */
static bool copy_texts(struct req *r)
{
    const char **slot[2 + 2 * MAX_REQ_HEADERS];
    size_t len[2 + 2 * MAX_REQ_HEADERS], n = 0, need = 0;
    slot[n++] = &r->method;
    slot[n++] = &r->url;
    for (size_t i = 0; i < r->n_hdr; i++) {
        slot[n++] = &r->hdr[i].name;
        slot[n++] = &r->hdr[i].value;
    }
    for (size_t i = 0; i < n; i++)
        need += (len[i] = strlen(*slot[i]) + 1);
    if (need > r->text_cap) {
        size_t cap = (need + 1023) & ~(size_t)1023;
        char *t = malloc(cap);
        if (!t)
            return false;
        free(r->text);
        r->text = t;
        r->text_cap = cap;
    }
    char *p = r->text;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, *slot[i], len[i]);
        *slot[i] = p;
        p += len[i];
    }
    return true;
}

/* api_header_fn over the copied headers: safe on a pool thread. */
const char *http_req_header(void *arg, const char *name)
{
    struct req *r = arg;
    for (size_t i = 0; i < r->n_hdr; i++)
        if (strcasecmp(r->hdr[i].name, name) == 0)
            return r->hdr[i].value;
    return NULL;
}

/* api_header_fn on the transport thread (1st call, before the copy). */
static const char *conn_header(void *arg, const char *name)
{
    struct req *r = arg;
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

void http_api_req_init(struct req *r, struct api_request *q, api_header_fn fn)
{
    memset(q, 0, sizeof *q);
    q->method = r->method;
    q->path = r->url;
    q->header = fn;
    q->header_arg = r;
    q->body = r->body;
    q->body_len = r->len;
    q->stream = r->stream;
    q->early = r->early;
    q->pieces_ok = true;                /* queue() sends them from a callback */
    /* identify() checked the token against the keys the api's auth uses */
    q->key_name = r->h->guard.keys ? (r->keyed ? r->key_name : "") : NULL;
}

/* ---- answering --------------------------------------------------------- */

/* MHD thread: the next piece of a body read piece by piece, into MHD's
 * buffer (pos follows on from the last piece: the response is never
 * reused). */
static ssize_t pieces_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    size_t n = api_pieces_read(cls, buf, max);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_WITH_ERROR;  /* short: not reached */
}

/* MHD: the response is destroyed (sent, or the client gone midway). */
static void pieces_free(void *cls)
{
    api_pieces_free(cls);
}

/* A HEAD answer that holds no body (api.h's resp->head): MHD sends only
 * the headers to HEAD (microhttpd.h: "The library does understand HEAD
 * and will only send the headers of the response"), so this is never
 * called; its response's size gives the Content-Length GET's would. */
static ssize_t head_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The body bytes an answer of len sends, as the log's bytes_out and
 * attnd_response_bytes_total count them: none to HEAD, whose answer MHD
 * sends without its body. */
size_t http_body_sent(const struct req *r, size_t len)
{
    return strcmp(r->method, "HEAD") == 0 ? 0 : len;
}

/* The buffer MHD reads a piece-by-piece body into, one per response: a
 * 128 MiB export ran at the same speed with 256 KiB, 1 MiB and 4 MiB
 * (alternating runs, medians within noise), so the smallest. */
#define PIECES_BLOCK ((size_t)256 << 10)

/* Queue resp on the connection; takes its body. */
static enum MHD_Result queue(struct req *r, struct api_response *resp)
{
    char *body = resp->body;
    struct api_pieces *pieces = resp->pieces;
    size_t len = body || pieces || resp->head ? resp->body_len : 0;
    resp->body = NULL;
    resp->pieces = NULL;
    if (len == 0) {                     /* MHD keeps no pointer to an empty buffer */
        api_spare_free(body);
        api_pieces_free(pieces);
        body = NULL;
        pieces = NULL;
    }
    /* a large body goes back to api/spare.c's slots once MHD has sent it;
     * a body read piece by piece is let go when MHD destroys the response */
    struct MHD_Response *mr =
        pieces ? MHD_create_response_from_callback(
                     len, len < PIECES_BLOCK ? len : PIECES_BLOCK, pieces_read, pieces,
                     pieces_free)
        : body ? MHD_create_response_from_buffer_with_free_callback(len, body, api_spare_free)
        : len  ? MHD_create_response_from_callback(len, 1, head_read, NULL, NULL)
               : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!mr) {
        api_spare_free(body);
        api_pieces_free(pieces);
        api_response_free(resp);
        return MHD_NO;
    }
    if (resp->content_type)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (size_t i = 0; i < resp->n_headers && i < API_MAX_HEADERS; i++)
        MHD_add_response_header(mr, resp->headers[i].name, resp->headers[i].value);
    if (atomic_load(&r->h->quiesced))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_add_response_header(mr, "X-Request-Id", r->id);
    r->error = resp->error;
    r->status = resp->status;
    r->route = resp->route;
    r->bytes_out = http_body_sent(r, len);
    r->state = REQ_ANSWERED;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)resp->status, mr);
    MHD_destroy_response(mr);
    api_response_free(resp);
    return ret;
}

/* A fault the transport detects: JSON error body with CORS headers, and
 * Retry-After when retry is not NULL. */
static enum MHD_Result transport_error_retry(struct req *r, enum api_err code, const char *msg,
                                             const char *retry)
{
    struct api_request q;
    http_api_req_init(r, &q, conn_header);
    struct api_response resp;
    memset(&resp, 0, sizeof resp);
    api_transport_error(r->h->ctx, &q, code, msg, &resp);
    if (retry)
        api_response_header(&resp, "Retry-After", retry);
    return queue(r, &resp);
}

static enum MHD_Result transport_error(struct req *r, enum api_err code, const char *msg)
{
    return transport_error_retry(r, code, msg, NULL);
}

/*
 * A request srv_http_cut took back from the pool (REQ_CUT): 503 draining,
 * nothing of it applied (its changes can no longer be journaled). Its pool
 * thread may still be running and releasing its body, so the api sees only
 * its method, path and headers (copied at the 1st call, read-only since).
 * No Retry-After, as for the other draining refusals: this process is
 * going away, and another replica (or this one restarted) takes the retry.
 */
static enum MHD_Result answer_cut(struct req *r)
{
    struct api_request q;
    memset(&q, 0, sizeof q);
    q.method = r->method;
    q.path = r->url;
    q.header = http_req_header;
    q.header_arg = r;
    struct api_response resp;
    memset(&resp, 0, sizeof resp);
    api_transport_error(r->h->ctx, &q, API_ERR_DRAINING,
                        "the server stopped before this request finished "
                        "(--drain-timeout); nothing of it was applied: retry it", &resp);
    return queue(r, &resp);
}

/*
 * Probes answered on the transport thread (api_route_place): they read a
 * flag or two, and a liveness probe must not queue behind long
 * computations on a busy pool (an orchestrator would restart a healthy,
 * merely busy, replica). So is /metrics (counters under one mutex, tens of
 * microseconds): a scrape must see a busy pool, not wait behind it in its
 * client's queue.
 */
static bool is_probe(const struct req *r)
{
    return api_route_place(r->method, r->url) == API_PLACE_PROBE;
}

/*
 * Tiny stateless attention requests are answered on the transport thread.
 * Handing one to the pool costs three thread hops (uv_async to the loop,
 * uv_queue_work to a worker, MHD_resume_connection back), each a futex or
 * eventfd wake-up and a context switch on 2 shared cores: measured with
 * perf, the hops and their scheduling took more CPU than the request itself
 * (n=L=4, d=8: ~20 us of parsing, attention and printing). The work inline
 * is bounded by the request alone:
 *   - only POST /v1/attention (stateless; session routes may touch a large
 *     KV cache and stay on the pool), body at most INLINE_MAX_BODY bytes:
 *     at most ~INLINE_MAX_BODY/2 numbers in (one digit and a comma each),
 *     so with h*(n*d + L*d + L*d_v) <= N the attention work h*n*L*(d+d_v)
 *     stays under N^2/4 = 2.6e5 multiply-adds (d = d_v = 1), well under a
 *     millisecond;
 *   - the response at most INLINE_MAX_OUT numbers (the request's own
 *     max_elements lowers the api's --max-elements for the inline call); a request refused for that limit is
 *     handed to the pool, which answers it under the real limit.
 */
#define INLINE_MAX_BODY 2048
#define INLINE_MAX_OUT 4096

static bool is_tiny_attention(const struct req *r)
{
    return r->len <= INLINE_MAX_BODY && r->refuse == API_ERR_NONE &&
           api_route_place(r->method, r->url) == API_PLACE_INLINE;
}

/* Whether the api refused for a size limit (the pool may answer it). */
static bool refused_for_size(const struct api_response *resp)
{
    return resp->error == API_ERR_RESPONSE_TOO_LARGE ||
           resp->error == API_ERR_LIMIT_EXCEEDED;
}

/* Answer into r->resp on this thread; false: hand it to the pool instead. */
static bool answer_inline(struct req *r)
{
    size_t cfg_max = r->h->ctx->cfg.max_elements;
    bool lowered = cfg_max == 0 || cfg_max > INLINE_MAX_OUT;
    struct api_request q;
    http_api_req_init(r, &q, http_req_header);
    q.ws = srv_worker_ws();
    q.max_elements = INLINE_MAX_OUT;
    api_handle(r->h->ctx, &q, &r->resp);
    if (!refused_for_size(&r->resp) || !lowered)
        return true;
    api_response_free(&r->resp);
    return false;
}

/* MHD thread, the body read: a static file, a probe or a tiny request is
 * answered here; anything else is suspended and handed to the loop. */
static enum MHD_Result dispatch(struct req *r)
{
    const struct srv_asset *a = http_find_asset(r->method, r->url);
    if (a)
        return http_serve_asset(r, a);
    struct srv_http *h = r->h;
    if (is_probe(r)) {
        struct api_request q;
        http_api_req_init(r, &q, http_req_header);
        api_handle(h->ctx, &q, &r->resp);
        return queue(r, &r->resp);
    }
    /* Draining: a request that began after the drain started (on a
     * kept-alive connection) is refused rather than suspended, so that no
     * connection is suspended once the in-flight requests are done
     * (MHD_stop_daemon aborts the process if one is; the race was seen in
     * the e2e drain tests); a tiny one too, as its route's larger ones
     * are. Requests begun before it still finish. */
    if (r->late)
        return transport_error(r, API_ERR_DRAINING, NULL);
    if (is_tiny_attention(r) && answer_inline(r))
        return queue(r, &r->resp);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? (int)ci->connect_fd : -1;
    /* Counted before the seal is read (srv_http_seal reads them the other
     * way round): either the loop sees this request or it sees the seal. */
    atomic_fetch_add(&h->working, 1);
    if (atomic_load(&h->sealed)) {
        atomic_fetch_sub(&h->working, 1);
        return transport_error(r, API_ERR_DRAINING, NULL);
    }
    MHD_suspend_connection(r->conn);
    r->fg = http_body_size(r) < LARGE_BODY;
    if (r->fg)                          /* large passes give way from here on */
        srv_sched_fg_begin(h->sched);
    pthread_mutex_lock(&h->mu);
    r->state = REQ_WORKING;
    r->next = h->pending;
    h->pending = r;
    pthread_mutex_unlock(&h->mu);
    uv_async_send(&h->async);
    return MHD_YES;
}

/* ---- who is asking, and whether they may ------------------------------- */

/* r->client: the name of the valid API key the request carries, else its
 * client address. */
static void identify(struct req *r)
{
    struct srv_keys *keys = r->h->guard.keys;
    const char *a = keys ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                        MHD_HTTP_HEADER_AUTHORIZATION)
                         : NULL;
    if (a && strncasecmp(a, "Bearer ", 7) == 0) {
        a += 7;
        while (*a == ' ' || *a == '\t')
            a++;
        r->keyed = srv_keys_check(keys, a, r->key_name);
    }
    if (r->keyed) {
        snprintf(r->client, sizeof r->client, SRV_CLIENT_KEYED "%s", r->key_name);
        return;
    }
    char host[64] = "?";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, host,
                  sizeof host);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, host,
                  sizeof host);
    snprintf(r->client, sizeof r->client, "a:%s", host);
}

/* r->id: the client's X-Request-Id (a proxy's, such as nginx's
 * $request_id) when it is 1 to HTTP_REQ_ID_MAX printable ASCII characters
 * without spaces, else one made here: 16 hex digits, a random half per
 * process and a counter. Echoed in the answer and logged with it, so a
 * client's or proxy's log line meets attnd's. */
static void take_request_id(struct req *r)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = 0;
    while (v && n <= HTTP_REQ_ID_MAX && v[n] > ' ' && v[n] < 0x7f)
        n++;
    if (v && n > 0 && n <= HTTP_REQ_ID_MAX && v[n] == '\0') {
        memcpy(r->id, v, n + 1);
        return;
    }
    snprintf(r->id, sizeof r->id, "%08x%08llx", (unsigned)r->h->id_seed,
             (unsigned long long)(atomic_fetch_add(&r->h->id_next, 1) & 0xffffffffu));
}

/* What check_framing read of the body: its Content-Length (SIZE_MAX
 * without one) and whether it comes chunked. */
struct body_framing {
    size_t announced;
    bool chunked;
};

/* A CORS preflight: OPTIONS without a body (one with a body is an upload,
 * read, though dropped: it stays under the limits). */
static bool is_preflight(const struct req *r, const struct body_framing *b)
{
    return strcmp(r->method, "OPTIONS") == 0 && !b->chunked &&
           (b->announced == 0 || b->announced == SIZE_MAX);
}

/* The most bytes of a body read before it is cut off (refused or not). */
static uint64_t drop_limit(const struct srv_config *cfg)
{
    return (uint64_t)cfg->max_body_bytes + DISCARD_LIMIT;
}

/* The request no longer holds a drain back (it completed, or it only
 * drops its body): the last one out after quiesce reports idleness. */
static void leave_in_flight(struct srv_http *h)
{
    if (atomic_fetch_sub(&h->in_flight, 1) == 1 && atomic_load(&h->quiesced)) {
        pthread_mutex_lock(&h->mu);
        h->idle_due = true;
        pthread_mutex_unlock(&h->mu);
        uv_async_send(&h->async);
    }
}

/*
 * A refusal decided from the headers alone (413 over --max-body-bytes, 429,
 * 503 for the body budget). Answered at once, it ends the connection:
 * libmicrohttpd (0.9.75) sends it and closes without reading the rest of
 * the body, and a socket closed with unread input is reset by the kernel.
 * A client that writes its whole body before it reads (Python's
 * http.client, most HTTP libraries) then gets ECONNRESET or EPIPE
 * (SSLEOFError over TLS) instead of the answer whenever the body outgrows
 * the socket buffers or is still on its way. MHD has no lingering close
 * (nginx's remedy: read and drop for a while after answering) and takes no
 * answer while a body arrives, so a body that ends within DISCARD_LIMIT
 * bytes past --max-body-bytes (announced, or chunked) is read and dropped
 * first, and the refusal answered when it has ended, on a connection that
 * stays open: a body a little over the cap, the usual 413, is answered.
 * Bounded: drop_limit bytes within --conn-timeout seconds of the headers,
 * else the connection is closed (cut_off); a drain does not wait for it.
 * A request without a body (a 429 to a polled GET) is answered at the
 * handler's next call, at once, on a connection that stays open too:
 * closed, a limited keep-alive client reconnected (over HTTPS, a full
 * handshake) for every retry.
 * Still answered at once, and the connection closed: a larger announced
 * body (a 10 GB upload is not read for minutes), one sent with
 * Expect: 100-continue (the client waits for this answer before it sends
 * the body), or one begun while draining.
 */
static bool drops_body_first(const struct req *r, const struct body_framing *b)
{
    if (atomic_load(&r->h->quiesced) ||
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT))
        return false;
    return b->chunked || b->announced == SIZE_MAX || b->announced <= drop_limit(r->h->cfg);
}

/* Answer the refusal code (message msg, Retry-After retry when not NULL)
 * at once, or once the body has been read and dropped (drops_body_first). */
static enum MHD_Result refuse_early(struct req *r, const struct body_framing *b,
                                    enum api_err code, const char *msg, const char *retry)
{
    if (!drops_body_first(r, b))
        return transport_error_retry(r, code, msg, retry);
    r->refuse = code;
    r->refuse_msg = msg;
    if (retry)
        snprintf(r->refuse_retry, sizeof r->refuse_retry, "%s", retry);
    if (r->admitted) {                  /* refused: not in flight for its key */
        srv_limits_leave(r->h->guard.limits, r->client);
        r->admitted = false;
    }
    r->dropping = true;
    r->state = REQ_BODY;
    leave_in_flight(r->h);
    return MHD_YES;
}

/* The refusal of a request whose body has ended (read, or read and
 * dropped). */
static enum MHD_Result answer_refusal(struct req *r)
{
    const char *msg = r->refuse_msg;
    if (!msg && r->refuse == API_ERR_CAPACITY_EXHAUSTED)
        msg = BUDGET_MSG;
    return transport_error_retry(r, r->refuse, msg, r->refuse_retry[0] ? r->refuse_retry : NULL);
}

/* Per-client limits on everything but probes and /metrics (a scraper's
 * address is not a client to throttle), static files and preflights (a
 * browser's carries no key, and a 429 in its place reads as a CORS failure
 * in the page); answers 429 rate_limited (and returns true) when over. */
static bool over_limit(struct req *r, const struct body_framing *b, enum MHD_Result *ret)
{
    struct srv_limits *l = r->h->guard.limits;
    if (!srv_limits_on(l) || is_probe(r) || http_find_asset(r->method, r->url) ||
        is_preflight(r, b))
        return false;
    unsigned retry = 1;
    enum srv_admit v = srv_limits_enter(l, r->client, uv_hrtime(), &retry);
    if (v == SRV_ADMIT_OK) {
        r->admitted = true;
        return false;
    }
    srv_metrics_count(r->h->metrics, SRV_EV_RATE_LIMITED, r->keyed ? r->key_name : NULL);
    char secs[16];
    snprintf(secs, sizeof secs, "%u", retry);
    *ret = refuse_early(r, b, API_ERR_RATE_LIMITED,
                        v == SRV_ADMIT_RATE ? "over --rate-limit; retry later"
                        : "over --max-inflight-per-key; retry later", secs);
    return true;
}

/* ---- the access handler ------------------------------------------------ */

/* The path of a request target in absolute form ("http://host/path"), which
 * a server must accept (RFC 9112 3.2.2) though clients send it mostly to
 * proxies: the scheme and authority dropped ("/" when no path follows),
 * the Host header ignored as attnd ignores it anyway. libmicrohttpd passes
 * the target as it came, and the router knows only paths. Any other
 * target is the path itself. */
static const char *origin_path(const char *url)
{
    size_t n = strncasecmp(url, "http://", 7) == 0    ? 7
             : strncasecmp(url, "https://", 8) == 0 ? 8
                                                     : 0;
    if (n == 0)
        return url;
    const char *p = strchr(url + n, '/');
    return p ? p : "/";
}

/* A zeroed request without clearing its header and response slots (11 KiB
 * that api_handle and collect_header write before anything reads them):
 * clearing them was the largest user-space cost of a small request. */
static struct req *req_new(struct srv_http *h)
{
    struct req *r = atomic_exchange(&h->spare, NULL);
    if (!r) {
        r = malloc(sizeof *r);
        if (!r)
            return NULL;
        r->keep = NULL;
        r->keep_cap = 0;
        r->text = NULL;
        r->text_cap = 0;
    }
    memset(r, 0, offsetof(struct req, hdr));
    r->refuse = API_ERR_NONE;
    r->error = API_ERR_NONE;
    r->resp.body = NULL;
    r->resp.pieces = NULL;
    r->resp.body_len = 0;
    r->resp.head = false;
    return r;
}

/* Keep r for the next request if the spare slot is empty: an 11 KiB
 * malloc and free per request went through glibc's slow bins. */
static void req_free(struct srv_http *h, struct req *r)
{
    struct req *none = NULL;
    if (!atomic_compare_exchange_strong(&h->spare, &none, r))
        http_req_destroy(r);
}

/* Headers a request may carry once (RFC 9110 5.3: not lists, so two lines
 * cannot be joined into one value): a second line with another value is
 * 400, where taking the first would leave the client and any proxy on the
 * way free to read another one. The same value twice is that value. */
static const char *const single_headers[] = {"Authorization", "Idempotency-Key"};
#define N_SINGLE (sizeof single_headers / sizeof single_headers[0])

/* Framing headers as sent, duplicates included. */
struct framing {
    struct req *r;
    const char *cl, *te;            /* first value of each */
    bool cl_conflict;               /* Content-Length twice with different values */
    unsigned n_te;                  /* Transfer-Encoding header lines */
    const char *single[N_SINGLE];   /* first value of each single_headers */
    const char *conflict;           /* one of them with two values, or NULL */
    size_t n_lines;                 /* header lines, past MAX_REQ_HEADERS too */
};

/* A line of one of single_headers: its first value kept, another noted. */
/* Whether two values of one header are the same, as api/ reads them
 * (api_field_len). */
static bool same_value(const char *a, const char *b)
{
    size_t na = api_field_len(a);
    return na == api_field_len(b) && memcmp(a, b, na) == 0;
}

static void scan_single(struct framing *f, const char *key, const char *value)
{
    for (size_t i = 0; i < N_SINGLE; i++) {
        if (strcasecmp(key, single_headers[i]) != 0)
            continue;
        if (!f->single[i])
            f->single[i] = value;
        else if (!same_value(f->single[i], value) && !f->conflict)
            f->conflict = single_headers[i];
    }
}

/* One pass over the headers: framing checks, and the copy the api reads
 * (collect_header; MHD's strings stay valid for the request). */
static enum MHD_Result scan_framing(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
    struct framing *f = cls;
    collect_header(f->r, kind, key, value);
    f->n_lines++;
    if (!value)
        value = "";
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->cl && strcmp(f->cl, value) != 0)
            f->cl_conflict = true;
        if (!f->cl)
            f->cl = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        if (!f->te)
            f->te = value;
        f->n_te++;
    } else {
        scan_single(f, key, value);
    }
    return MHD_YES;
}

/* Checks on the headers alone; answers (and returns true) on a fault.
 * *b: the Content-Length (SIZE_MAX without one) and whether it is chunked. */
static bool check_framing(struct req *r, enum MHD_Result *ret, struct body_framing *b)
{
    struct framing f = {.r = r};
    r->n_hdr = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, scan_framing, &f);
    if (!copy_texts(r)) {
        *ret = transport_error(r, API_ERR_CAPACITY_EXHAUSTED, "out of memory");
        return true;
    }
    const char *msg = NULL;
    char text[64];
    /* The api sees the first MAX_REQ_HEADERS lines only: one past them
     * (its Content-Type, Authorization, Idempotency-Key) would be read as
     * missing, so such a request is refused, not half understood. */
    if (f.n_lines > MAX_REQ_HEADERS) {
        snprintf(text, sizeof text, "more than %d header lines", MAX_REQ_HEADERS);
        msg = text;
    } else if (f.conflict) {
        snprintf(text, sizeof text, "conflicting %s headers", f.conflict);
        msg = text;
    } else if (f.cl && f.te)
        msg = "Content-Length and Transfer-Encoding together";
    else if (f.cl_conflict)
        msg = "conflicting Content-Length headers";
    else if (f.te && (f.n_te > 1 || strcasecmp(f.te, "chunked") != 0))
        msg = "unsupported Transfer-Encoding (only chunked)";
    if (msg) {
        *ret = transport_error(r, API_ERR_BAD_REQUEST, msg);
        return true;
    }
    b->chunked = f.te != NULL;
    if (f.cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(f.cl, &end, 10);
        if (f.cl[0] < '0' || f.cl[0] > '9' || errno || *end) {
            *ret = transport_error(r, API_ERR_BAD_REQUEST, "invalid Content-Length");
            return true;
        }
        b->announced = (size_t)n;
        if (n > r->h->cfg->max_body_bytes) {
            *ret = refuse_early(r, b, API_ERR_BODY_TOO_LARGE, NULL, NULL);
            return true;
        }
    }
    return false;
}

/* The early decoder of a buffered body, when the api has one for it and
 * the budget room for its buffers (counted as the body's size again) with
 * a largest body's room to spare (else the body is decoded after it has
 * arrived, as without one: the decoder never turns another request
 * away). */
static void early_start(struct req *r, const struct api_request *q, size_t announced)
{
    if (announced == SIZE_MAX || announced == 0 || !(r->early = api_early_open(q, announced)))
        return;
    if (!http_body_charge_leaving(r, announced, r->h->cfg->max_body_bytes)) {
        api_early_free(r->early);
        r->early = NULL;
    }
}

/*
 * Where the body goes: nowhere when the api answers without it
 * (api_reads_body: a GET's, a preflight's, a 404's, 405's or 401's): it
 * is counted against the cap and dropped as it arrives, never held, so
 * that bodies from clients without a key cannot take the body budget
 * from those with one.
 * Else into a stream when the api takes it as it arrives
 * (an import: the rows go from MHD's read buffer straight into the new
 * session's pages, each piece checksummed, copied and checked on this
 * thread, about what copying it into a body buffer cost, which it
 * replaces: a 134 MB buffer took as long to fault in as to fill), else
 * into one buffer of the announced size (its long base64 strings decoded
 * as they arrive, api_early_open). Either counts in the body budget
 * (a stream's header is held until it reads whole: unbounded over
 * connections otherwise). Answers (and returns true) when the budget has
 * no room.
 */
static bool body_start(struct req *r, const struct body_framing *b, enum MHD_Result *ret)
{
    size_t announced = b->announced;
    struct api_request q;
    http_api_req_init(r, &q, http_req_header);
    if ((b->chunked || (announced != SIZE_MAX && announced > 0)) &&
        !api_reads_body(r->h->ctx, &q)) {
        r->unread = true;
        return false;
    }
    if ((r->stream = api_stream_open(r->h->ctx, &q, announced))) {
        /* counted in the budget as a buffer of it would be (a chunked
         * one as it arrives, on_upload): the header is held until whole */
        if (announced == SIZE_MAX || http_body_charge(r, announced))
            return false;
        http_body_release(r);
    } else if (announced == SIZE_MAX || announced == 0 || http_body_reserve(r, announced)) {
        early_start(r, &q, announced);
        return false;
    }
    *ret = refuse_early(r, b, API_ERR_CAPACITY_EXHAUSTED, BUDGET_MSG, NULL);
    return true;
}

/* Whether a refused upload has gone on too long: past the cap by
 * DISCARD_LIMIT bytes (an endless chunked upload), or, dropped for a
 * refusal from its headers, past --conn-timeout seconds. */
static bool cut_off(const struct req *r)
{
    const struct srv_config *cfg = r->h->cfg;
    return r->bytes_in > drop_limit(cfg) ||
           (r->dropping && uv_hrtime() - r->t0 > (uint64_t)cfg->conn_timeout_s * 1000000000u);
}

/* A piece of a body the api does not read: within the cap (else 413, as
 * for any body), then dropped. */
static bool unread_take(struct req *r)
{
    if (r->refuse == API_ERR_NONE && r->bytes_in > r->h->cfg->max_body_bytes)
        r->refuse = API_ERR_BODY_TOO_LARGE;
    return r->refuse == API_ERR_NONE;
}

static enum MHD_Result on_upload(struct req *r, const char *data, size_t *size)
{
    r->bytes_in += *size;
    if (r->dropping || !(r->unread ? unread_take(r) : http_body_take(r, data, *size))) {
        http_body_release(r);
        if (cut_off(r))
            return MHD_NO;              /* disconnect */
    }
    *size = 0;
    return MHD_YES;
}

enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version,
                             const char *upload_data, size_t *upload_data_size,
                             void **con_cls)
{
    (void)version;
    struct srv_http *h = cls;
    struct req *r = *con_cls;
    if (!r) {
        r = req_new(h);
        if (!r)
            return MHD_NO;
        r->h = h;
        r->conn = conn;
        r->rg = http_connection_guard(conn);
        srv_readguard_headers(h->rg, r->rg, srv_readguard_now());
        r->method = method;
        r->url = origin_path(url);
        r->t0 = uv_hrtime();
        *con_cls = r;
        atomic_fetch_add(&h->in_flight, 1);
        r->late = atomic_load(&h->quiesced);    /* after counting: see quiesce */
        srv_metrics_begin(h->metrics);
        take_request_id(r);
        identify(r);
        enum MHD_Result ret;
        struct body_framing b = {.announced = SIZE_MAX};
        if (check_framing(r, &ret, &b) || over_limit(r, &b, &ret) ||
            body_start(r, &b, &ret))
            return ret;
        r->state = REQ_BODY;
        return MHD_YES;                 /* two-call pattern: keep-alive stays on */
    }
    switch (r->state) {
    case REQ_BODY:
        if (*upload_data_size) {
            srv_readguard_body(h->rg, r->rg, *upload_data_size);
            return on_upload(r, upload_data, upload_data_size);
        }
        srv_readguard_read(h->rg, r->rg);
        if (r->refuse != API_ERR_NONE)
            return answer_refusal(r);
        return dispatch(r);
    case REQ_READY:                     /* resumed by work_resume */
        return queue(r, &r->resp);
    case REQ_CUT:                       /* resumed by srv_http_cut */
        return answer_cut(r);
    case REQ_NEW:
    case REQ_WORKING:
    case REQ_ANSWERED:
        break;
    }
    if (*upload_data_size)              /* body after an early answer: drop */
        *upload_data_size = 0;
    return MHD_YES;
}

/* MHD thread (or MHD_stop_daemon): the request is over. */
void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    struct srv_http *h = cls;
    struct req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    bool dropping = r->dropping;        /* left in_flight already */
    bool overdue = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ||
                   srv_readguard_was_shut(h->rg, r->rg);
    srv_readguard_answered(h->rg, r->rg, srv_readguard_now());
    uint64_t ns = uv_hrtime() - r->t0;
    /* under mu: a pool thread may be moving r->state to REQ_READY */
    pthread_mutex_lock(&h->mu);
    bool answered = r->state == REQ_ANSWERED;
    pthread_mutex_unlock(&h->mu);
    /* not answered, or its answer cut short: 408 when attnd closed it
     * for a read deadline or idleness (as nginx logs a body timeout),
     * else 499, the client went away */
    int status = answered ? r->status : overdue ? 408 : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status < 400)
        status = overdue ? 408 : 499;
    const char *key = r->keyed ? r->key_name : NULL;
    if (!r->route)                      /* gone before the answer: the route asked for */
        r->route = api_route_of(h->ctx, r->url);
    const char *code = answered && r->error != API_ERR_NONE ? api_error_code(r->error) : NULL;
    srv_log_request(r->method, r->route, status, r->bytes_in, r->bytes_out, ns / 1000, key,
                    r->id, code);
    srv_metrics_end(h->metrics, r->route, status, r->bytes_in, r->bytes_out, (double)ns / 1e9,
                    key);
    if (r->admitted)
        srv_limits_leave(h->guard.limits, r->client);
    pthread_mutex_lock(&h->mu);
    bool working = r->state == REQ_WORKING || r->loop_owes;
    if (working)
        r->orphan = true;               /* work_done frees it */
    bool awaited = r->awaited;
    pthread_mutex_unlock(&h->mu);
    if (awaited)                        /* by srv_http_cut */
        atomic_fetch_sub(&h->owed, 1);
    if (!working) {
        api_response_free(&r->resp);
        http_body_release(r);
        req_free(h, r);
    }
    if (!dropping)
        leave_in_flight(h);
}
