/*
 * server/http_start.c — the libmicrohttpd daemon's life: its options (the
 * connection caps, the timeouts, the per-connection memory, the thread
 * pool, TLS), binding --host, the connection open/close and log callbacks,
 * quiesce and stop. The access handler and the request's life are
 * server/http.c's; what the files share is in server/http_impl.h.
 */
#include "server/http_impl.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/resource.h>

#include <microhttpd.h>

#include "server/log.h"
#include "server/peers.h"
#include "server/sched.h"
#include "server/tcp.h"
#include "server/tls.h"

/* Request bodies buffered (or streamed) at once, over all connections, at
 * most this many times --max-body-bytes (and at least BODY_BUDGET_MIN):
 * bounded memory however many clients upload at once. Past it: 503
 * capacity_exhausted. */
#define BODY_BUDGET_FACTOR 8
#define BODY_BUDGET_MIN ((size_t)256 << 20)
/* MHD's memory pool per connection: the headers, then the read buffer,
 * which takes half of it; a body is read one buffer per poll. A 16 KiB
 * pool read a 4.2 MB base64 body in 530 poll + recv rounds (2.6 ms from
 * its first byte to its last, median; 1.2 ms with 64 KiB). MHD zeroes the
 * whole pool after each request (0.22 us per 32 KiB, which small requests
 * pay) and an open connection keeps it resident. 64 KiB (MHD's default is
 * 32) reads that body in about 130 rounds: the MHD threads spent 1.5-2.0
 * ms of CPU per such request against 2.5-3.0 with 32 KiB, while a small
 * request's CPU stayed within the noise (13-15 us either way). */
#define CONN_MEMORY ((size_t)64 * 1024)

/* URIs and query arguments unescaped as libmicrohttpd does, but one that
 * holds %00 is kept as it came: the access handler gets the URI as a C
 * string, which a decoded NUL would cut short ("/v1/attention%00x" was
 * served as /v1/attention). Left encoded, it names no route: 404. */
static size_t http_unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    for (const char *p = s; (p = strchr(p, '%')) != NULL; p++)
        if (p[1] == '0' && p[2] == '0')
            return strlen(s);
    return MHD_http_unescape(s);
}

/* MHD thread: a connection opened or closed (attnd_connections_open). */
static void http_on_connection(void *cls, struct MHD_Connection *conn,
                               void **socket_context, enum MHD_ConnectionNotificationCode code)
{
    struct srv_http *h = cls;
    bool started = code == MHD_CONNECTION_NOTIFY_STARTED;
    srv_metrics_connection(h->metrics, started ? 1 : -1);
    const union MHD_ConnectionInfo *peer =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (peer)
        srv_peers_count(h->peers, peer->client_addr, started ? 1 : -1);
    if (!started) {                 /* MHD closes the socket after this */
        srv_readguard_close(h->rg, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (fd && peer)
        srv_tcp_tune(&h->tcp, fd->connect_fd, peer->client_addr);
    *socket_context = fd ? srv_readguard_open(h->rg, fd->connect_fd, srv_readguard_now())
                         : NULL;
}

struct srv_rg_conn *http_connection_guard(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

size_t srv_http_sweep_reads(struct srv_http *h)
{
    size_t n = h ? srv_readguard_sweep(h->rg, srv_readguard_now()) : 0;
    if (n)
        srv_log_msgf("warn", "closed %zu slow connection(s): headers not in %u+%g s after "
                     "opening or the last answer, or a body under %zu bytes/s "
                     "(--conn-timeout, --read-timeout, --min-body-rate)", n,
                     h->cfg->conn_timeout_s, h->cfg->read_timeout_s, h->cfg->min_body_rate);
    return n;
}

/* Whether a refusal of kind r may be logged now: one line a second at
 * most for each kind (a client or proxy past a cap retries at once, and
 * a line per refusal would fill the log); *since: the refusals of that
 * kind not logged before it. */
static bool refusal_line_due(struct http_refusals *r, uint64_t *since)
{
    uint64_t now = uv_hrtime(), last = atomic_load(&r->logged_ns);
    atomic_fetch_add(&r->quiet, 1);
    if (last != 0 && now - last < 1000000000u)
        return false;
    if (!atomic_compare_exchange_strong(&r->logged_ns, &last, now))
        return false;
    *since = atomic_exchange(&r->quiet, 0) - 1;
    return true;
}

/* MHD's accept policy, before it makes the connection: the per-address
 * cap (server/peers.c). */
static enum MHD_Result http_accept_policy(void *cls, const struct sockaddr *addr,
                                          socklen_t addrlen)
{
    (void)addrlen;
    struct srv_http *h = cls;
    unsigned open;
    if (srv_peers_admit(h->peers, addr, &open))
        return MHD_YES;
    uint64_t since;
    if (refusal_line_due(&h->refused_peer, &since)) {
        char name[64];
        srv_peers_name(addr, name, sizeof name);
        srv_log_msgf("warn", "connection from %s refused: %u open from that address, "
                     "--max-connections-per-ip %u (behind a proxy every connection comes from "
                     "the proxy's address: raise it to --max-connections); %llu more refused "
                     "since the last such line", name, open, h->cfg->max_connections_per_ip,
                     (unsigned long long)since);
    }
    return MHD_NO;
}

/* MHD's message for a connection over its (total) connection cap. */
#define MHD_CONN_LIMIT_MSG "Server reached connection limit"
/* MHD's message for any failed TLS handshake (libmicrohttpd 0.9.75's
 * MHD_run_tls_handshake_ says no more): a TCP health check that connects
 * and closes, plain HTTP to the HTTPS port, a scanner, a client that
 * offers nothing attnd takes. */
#define MHD_TLS_FAILED_MSG "Error: received handshake message out of context"
/* MHD's messages for an accept() that failed (0.9.75): one for each, with
 * the error's text, and a second after it when the error is a limit
 * (EMFILE, ENFILE, ENOMEM, ENOBUFS), which names an option of MHD's own.
 * Under a limit lowered while attnd runs (prlimit) they come for every
 * client that tries to connect: one line a second says them instead. */
#define MHD_ACCEPT_FAILED_MSG "Error accepting connection: "
#define MHD_ACCEPT_LIMIT_MSG "Hit process or system resource limit"
/* MHD's messages for a client that closed (or reset) its connection with a
 * request half sent (0.9.75: plain, over TLS, and a read error), one for
 * every such connection: a client that times out, a scanner, or one that
 * opens connections to fill the log. One line a second says them, as for
 * the failed handshakes; the access log has the line of a request whose
 * headers were whole (499). */
static const char *const mhd_gone_msgs[] = {
    "Connection was closed by remote side with incomplete request",
    "Socket has been disconnected when reading request",
    "Connection socket is closed when reading request due to the error: ",
};

static bool is_gone_msg(const char *msg)
{
    for (size_t i = 0; i < sizeof mhd_gone_msgs / sizeof mhd_gone_msgs[0]; i++)
        if (strncmp(msg, mhd_gone_msgs[i], strlen(mhd_gone_msgs[i])) == 0)
            return true;
    return false;
}

__attribute__((format(printf, 2, 0)))
static void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct srv_http *h = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (strncmp(msg, MHD_CONN_LIMIT_MSG, strlen(MHD_CONN_LIMIT_MSG)) == 0) {
        /* the per-address cap is attnd's own (http_accept_policy): this
         * is the total, which each transport thread holds a share of */
        uint64_t since;
        if (refusal_line_due(&h->refused_total, &since))
            srv_log_msgf("warn", "connection refused: --max-connections %u reached (each of "
                         "the %u transport threads takes its share); %llu more refused since "
                         "the last such line", h->cfg->max_connections, h->cfg->http_threads,
                         (unsigned long long)since);
        return;
    }
    if (strncmp(msg, MHD_TLS_FAILED_MSG, strlen(MHD_TLS_FAILED_MSG)) == 0) {
        /* one per connection a client opens and leaves: a line a second */
        uint64_t since;
        if (refusal_line_due(&h->failed_tls, &since))
            srv_log_msgf("warn", "a TLS handshake failed: the client closed before it "
                         "ended, spoke plain HTTP, or offered no version or cipher suite "
                         "attnd takes; %llu more failed since the last such line",
                         (unsigned long long)since);
        return;
    }
    if (is_gone_msg(msg)) {
        uint64_t since;
        if (refusal_line_due(&h->gone_mid_request, &since))
            srv_log_msgf("warn", "a client closed its connection before its request was "
                         "whole; %llu more since the last such line",
                         (unsigned long long)since);
        return;
    }
    if (strncmp(msg, MHD_ACCEPT_LIMIT_MSG, strlen(MHD_ACCEPT_LIMIT_MSG)) == 0)
        return;                         /* said with its accept() failure */
    if (strncmp(msg, MHD_ACCEPT_FAILED_MSG, strlen(MHD_ACCEPT_FAILED_MSG)) == 0) {
        uint64_t since;
        if (refusal_line_due(&h->failed_accept, &since)) {
            const char *why = msg + strlen(MHD_ACCEPT_FAILED_MSG);
            struct rlimit rl = {0, 0};
            getrlimit(RLIMIT_NOFILE, &rl);
            srv_log_msgf("warn", "cannot accept a connection: %.*s (the open-file limit, "
                         "ulimit -n, is %llu; the connection waits in the listen backlog); "
                         "%llu more failed since the last such line",
                         (int)strcspn(why, "\r\n"), why, (unsigned long long)rl.rlim_cur,
                         (unsigned long long)since);
        }
        return;
    }
    srv_log_msgf("warn", "http: %s", msg);
}

/* ---- start / stop ------------------------------------------------------ */

static bool resolve(const struct srv_config *cfg, struct sockaddr_storage *ss, bool *v6)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(cfg->host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        srv_log_msgf("error", "cannot resolve --host '%s': %s", cfg->host, gai_strerror(rc));
        return false;
    }
    memset(ss, 0, sizeof *ss);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    if (*v6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)cfg->port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)cfg->port);
    return true;
}

/* Starts MHD's thread with the process signals blocked, so that they are
 * delivered to the loop thread (libuv's signal handling). */
#define LISTEN_BACKLOG 1024u

static struct MHD_Daemon *start_daemon(struct srv_http *h, const struct sockaddr_storage *ss,
                                       bool v6)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* "::" takes IPv4 clients too (as ::ffff:a.b.c.d), as dual-stack
     * servers do; a given IPv6 address is that address alone */
    if (v6)
        flags |= IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr)
                     ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
    const struct srv_config *cfg = h->cfg;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    /* --http-threads 1 is MHD's single internal thread, without the pool
     * option: MHD warns at start-up for a pool size of 0 or 1. The option's
     * slot then repeats the backlog option with its value (a no-op), since
     * varargs cannot leave a pair out. */
    bool pool = cfg->http_threads > 1;
    enum MHD_OPTION pool_opt = pool ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_LISTEN_BACKLOG_SIZE;
    unsigned pool_val = pool ? (unsigned)cfg->http_threads : LISTEN_BACKLOG;
    /* The same options with and without TLS (varargs cannot be made
     * conditional; MHD_OPTION_ARRAY would need a function pointer as void *). */
#define START(fl, ...) MHD_start_daemon(                                              \
        fl, (uint16_t)cfg->port, http_accept_policy, h, http_handler, h,              \
        MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, h,         /* first: see MHD docs */     \
        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)ss,                            \
        MHD_OPTION_NOTIFY_COMPLETED, http_completed, h,                                    \
        MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, h,                               \
        MHD_OPTION_UNESCAPE_CALLBACK, http_unescape, NULL,                                 \
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->conn_timeout_s,                 \
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,                  \
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, CONN_MEMORY,   /* headers + read buffer */    \
        MHD_OPTION_LISTEN_BACKLOG_SIZE, LISTEN_BACKLOG,                               \
        pool_opt, pool_val,                             /* the pool, or a no-op */    \
        __VA_ARGS__ MHD_OPTION_END)
    struct MHD_Daemon *d = h->guard.tls
        ? START(flags | MHD_USE_TLS,
                MHD_OPTION_HTTPS_CERT_CALLBACK, srv_tls_cert_cb,
                MHD_OPTION_HTTPS_PRIORITIES, srv_tls_priorities,)
        : START(flags, );
#undef START
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return d;
}

size_t srv_http_body_budget(size_t max_body_bytes)
{
    size_t b = max_body_bytes > SIZE_MAX / BODY_BUDGET_FACTOR
               ? SIZE_MAX : max_body_bytes * BODY_BUDGET_FACTOR;
    return b < BODY_BUDGET_MIN ? BODY_BUDGET_MIN : b;
}

struct srv_http *srv_http_new(uv_loop_t *loop, const struct srv_config *cfg,
                              struct api_ctx *ctx, struct srv_metrics *metrics,
                              const struct srv_http_guard *guard)
{
    struct srv_http *h = calloc(1, sizeof *h);
    if (h) {
        h->sched = srv_sched_new(loop, cfg->workers);
        h->peers = srv_peers_new(cfg->max_connections_per_ip);
        h->rg = srv_readguard_new(cfg->conn_timeout_s, cfg->read_timeout_s,
                                  (double)cfg->min_body_rate);
    }
    if (!h || !h->sched || !h->peers || !h->rg) {
        if (h) {
            srv_sched_free(h->sched);
            srv_peers_free(h->peers);
            srv_readguard_free(h->rg);
        }
        free(h);
        return NULL;
    }
    h->loop = loop;
    h->cfg = cfg;
    h->ctx = ctx;
    h->metrics = metrics;
    if (guard)
        h->guard = *guard;
    pthread_mutex_init(&h->mu, NULL);
    atomic_init(&h->in_flight, 0);
    atomic_init(&h->working, 0);
    atomic_init(&h->quiesced, false);
    atomic_init(&h->body_bytes, 0);
    atomic_init(&h->spare, NULL);
    atomic_init(&h->refused_peer.logged_ns, 0);
    atomic_init(&h->refused_total.logged_ns, 0);
    atomic_init(&h->id_next, 1);
    if (getrandom(&h->id_seed, sizeof h->id_seed, GRND_NONBLOCK) != (ssize_t)sizeof h->id_seed)
        h->id_seed = (uint32_t)(uv_hrtime() ^ ((uint64_t)getpid() << 16));
    atomic_init(&h->refused_peer.quiet, 0);
    atomic_init(&h->refused_total.quiet, 0);
    srv_tcp_init(&h->tcp, cfg->socket_rcvbuf, cfg->loopback_congestion);
    h->body_budget = srv_http_body_budget(cfg->max_body_bytes);
    uv_async_init(loop, &h->async, http_async_cb);   /* before MHD can call dispatch */
    h->async.data = h;
    return h;
}

int srv_http_listen(struct srv_http *h)
{
    const struct srv_config *cfg = h->cfg;
    struct sockaddr_storage ss;
    bool v6;
    if (!resolve(cfg, &ss, &v6))
        return 2;
    h->mhd = start_daemon(h, &ss, v6);
    if (!h->mhd) {
        int e = errno;
        if (e == EADDRNOTAVAIL) {
            srv_log_msgf("error", "cannot listen on --host '%s': %s (not an address of this "
                         "machine; 0.0.0.0 or :: listen on all)", cfg->host, strerror(e));
            return 2;
        }
        srv_log_msgf("error", "cannot listen on %s:%u: %s", cfg->host, cfg->port, strerror(e));
        return 1;
    }
    const union MHD_DaemonInfo *pi = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    h->port = pi ? pi->port : cfg->port;
    return 0;
}

unsigned srv_http_port(const struct srv_http *h)
{
    return h->port;
}

size_t srv_http_in_flight(const struct srv_http *h)
{
    return atomic_load(&((struct srv_http *)h)->in_flight);
}

size_t srv_http_working(const struct srv_http *h)
{
    return atomic_load(&((struct srv_http *)h)->working);
}

void srv_http_quiesce(struct srv_http *h, srv_http_idle_fn idle, void *arg)
{
    h->idle = idle;
    h->idle_arg = arg;
    if (!atomic_exchange(&h->quiesced, true)) {
        MHD_socket fd = MHD_quiesce_daemon(h->mhd);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    if (atomic_load(&h->in_flight) == 0) {
        h->idle = NULL;
        idle(arg);
    }
}

size_t srv_http_seal(struct srv_http *h)
{
    atomic_store(&h->sealed, true);
    return atomic_load(&h->working);
}

void srv_http_free(struct srv_http *h)
{
    if (!h)
        return;
    srv_sched_free(h->sched);
    srv_readguard_free(h->rg);
    srv_peers_free(h->peers);
    http_req_destroy(atomic_load(&h->spare));
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void srv_http_stop(struct srv_http *h)
{
    if (!h)
        return;
    if (h->mhd) {
        MHD_stop_daemon(h->mhd);        /* joins the MHD thread */
        h->mhd = NULL;
    }
    http_async_cb(&h->async);                /* requests it suspended last: orphans */
    srv_sched_close(h->sched);
    uv_close((uv_handle_t *)&h->async, NULL);
}
