/*
 * server/http_impl.h — what the files of the libmicrohttpd transport share
 * (server/http.c: the access handler, answering;
 * server/http_start.c: the daemon's options, start and stop;
 * server/http_body.c: request body buffers within the global budget;
 * server/http_assets.c: the built-in files;
 * server/http_work.c: the work pool's side of a request): the transport's
 * state, one request's state, and the functions that cross between them.
 * Threads and the life of a request: server/http.c's top comment.
 */
#ifndef ATTND_SERVER_HTTP_IMPL_H
#define ATTND_SERVER_HTTP_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "core/stop.h"
#include "core/store.h"

#include "server/http.h"
#include "server/keys.h"
#include "server/limits.h"
#include "server/peers.h"
#include "server/sched.h"
#include "server/readguard.h"
#include "server/tcp.h"

/* Longest X-Request-Id taken from a client (printable ASCII, no spaces);
 * another is replaced by one made here. */
#define HTTP_REQ_ID_MAX 64
#define MAX_REQ_HEADERS 128           /* header lines passed to the api; more: 400 */

/* Bodies from this size on are large requests: they give way to small ones
 * at their piece boundaries (srv_sched_bg_pause). n=L=64 d=64 in JSON is
 * ~100 KB; n=L=8192 d=64 in base64 is 8 MB. */
#define LARGE_BODY ((size_t)256 << 10)

struct srv_http {
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;
    uv_async_t async;               /* MHD thread -> loop: work to queue, idle */
    const struct srv_config *cfg;
    struct api_ctx *ctx;
    struct srv_metrics *metrics;
    struct srv_http_guard guard;    /* keys, limits, TLS */
    struct srv_sched *sched;        /* the compute pool's fair queues */
    unsigned port;
    pthread_mutex_t mu;             /* guards pending, idle_due, each req's state,
                                       orphan, loop_owes, cut, awaited */
    struct req *pending;            /* suspended, waiting for uv_queue_work */
    bool idle_due;                  /* in-flight reached 0 after quiesce */
    atomic_size_t in_flight;        /* requests between 1st call and completion */
    atomic_size_t working;          /* suspended requests (pending or on the pool) */
    atomic_bool quiesced;           /* no new connections; answers close */
    atomic_bool sealed;             /* no new work for the pool (srv_http_seal) */
    atomic_size_t body_bytes;       /* buffer bytes reserved by all requests */
    _Atomic(struct req *) spare;    /* one freed request kept for the next */
    size_t body_budget;             /* cap on body_bytes */
    struct srv_tcp tcp;             /* what each connection's socket is asked */
    struct srv_readguard *rg;       /* read deadlines (slow clients), or NULL */
    struct srv_peers *peers;        /* connections open per address */
    uint32_t id_seed;               /* random: the first half of the ids made here */
    atomic_uint_fast64_t id_next;   /* their second half, one per request */
    struct http_refusals {          /* refusal lines, one a second: */
        _Atomic uint64_t logged_ns; /* uv_hrtime of the last line */
        atomic_uint_fast64_t quiet; /* refusals since (not logged) */
    } refused_peer, refused_total,  /* per address; the total cap; */
      failed_tls,                   /* TLS handshakes that failed; */
      failed_accept,                /* accept() failures (EMFILE, ...); */
      gone_mid_request;             /* clients closed with a request half sent */
    srv_http_idle_fn idle;          /* loop thread only */
    void *idle_arg;
    struct req *on_pool;            /* loop thread: queued on the pool, until
                                       work_done (pool_prev/pool_next) */
    bool cutting;                   /* loop thread: srv_http_cut has run */
    size_t n_cut;                   /* loop thread: answered 503 by the cut */
    atomic_size_t owed;             /* answers awaited since srv_http_cut */
};

/* REQ_CUT: resumed by srv_http_cut to answer 503 draining, whatever its
 * pool thread is still doing. */
enum req_state { REQ_NEW = 0, REQ_BODY, REQ_WORKING, REQ_READY, REQ_CUT, REQ_ANSWERED };

struct req_header {
    const char *name, *value;       /* copies in req.text (copy_texts) */
};

struct req {
    struct srv_http *h;
    struct MHD_Connection *conn;
    struct srv_rg_conn *rg;         /* its connection's read deadlines, or NULL */
    enum req_state state;
    const char *method;             /* MHD's string, then its copy in text */
    const char *url;                /* percent-decoded path: likewise */
    uint64_t t0;                    /* uv_hrtime at the 1st call */
    char *body;                     /* capped buffer */
    size_t len, cap;
    struct api_stream *stream;      /* takes the body as it arrives instead
                                       (api_stream_open), or NULL */
    struct api_early *early;        /* decodes its long base64 strings as
                                       they arrive (api_early_open), or NULL */
    size_t charged;                 /* a streamed body's bytes, or the early
                                       decoder's buffers, counted in the
                                       body budget (http_body_charge) */
    uint64_t bytes_in;              /* everything received, kept or not */
    enum api_err refuse;            /* set once over a cap: the error to answer */
    const char *refuse_msg;         /* its message (NULL: the code's own) */
    char refuse_retry[16];          /* its Retry-After, or "" */
    bool dropping;                  /* refused from its headers: its body is
                                       read and dropped, then the refusal
                                       answered (refuse_early); no longer
                                       counted in srv_http.in_flight */
    bool unread;                    /* a body the api does not read
                                       (api_reads_body): counted against the
                                       cap and dropped as it arrives */
    size_t n_hdr;
    struct srv_job job;             /* on the pool (server/sched.c) */
    struct attn_stop stop;          /* deadline and cancel of its computation */
    atomic_bool gone;               /* the client hung up while it was working,
                                       or the drain stopped it (by_drain) */
    atomic_bool by_drain;           /* gone set by srv_http_cut or
                                       srv_http_cancel, not by its client */
    bool timed_out;                 /* answered 504 deadline_exceeded */
    struct watch *watch;            /* notices the hang-up, or NULL */
    int fd;                         /* the connection's socket */
    struct req *next;               /* in srv_http.pending */
    bool orphan;                    /* MHD closed it while working: loop frees */
    bool fg;                        /* counted by srv_sched_fg_begin */
    bool loop_owes;                 /* resumed (by its pool thread, or cut) while
                                       on the pool; work_done (loop) has yet
                                       to run and frees it if orphan */
    bool cut;                       /* srv_http_cut answers it: its pool thread
                                       leaves the connection alone */
    bool awaited;                   /* counted in srv_http.owed until completed */
    struct sess_commit commit;      /* withdrawn by the cut: its changes are
                                       refused from then on (core/store.h) */
    struct req *pool_prev, *pool_next;  /* in srv_http.on_pool */
    bool late;                      /* began after the drain started */
    int status;                     /* what was queued */
    const char *route;
    uint64_t bytes_out;
    bool admitted;                  /* counted by srv_limits_enter */
    bool keyed;                     /* key_name holds a valid key's name */
    char key_name[SRV_KEY_NAME_MAX];
    char client[SRV_CLIENT_ID_MAX]; /* "k:NAME" or "a:ADDRESS" */
    char id[HTTP_REQ_ID_MAX + 1];   /* X-Request-Id: the client's, or made here */
    enum api_err error;             /* the error answered, or API_ERR_NONE */
    /* Not zeroed at the 1st call (req_new): written before they are read. */
    struct req_header hdr[MAX_REQ_HEADERS];
    struct api_response resp;       /* filled by api_handle (9 KiB of header slots) */
    /* A small body buffer kept from an earlier request on this struct
     * (outside the budget; at most KEEP_BODY_MAX bytes); set by req_new. */
    char *keep;
    size_t keep_cap;
    /* method, url and headers copied out of MHD's connection memory
     * (kept, grown as needed, by a reused struct); set by req_new. */
    char *text;
    size_t text_cap;
};

/* The bytes of r's body: buffered, or taken by its stream. */
static inline uint64_t http_body_size(const struct req *r)
{
    return r->stream ? r->bytes_in : r->len;
}

/* server/http.c */
/* Free a request struct and the body buffer it keeps (NULL: no-op). */
void http_req_destroy(struct req *r);
/* An api_request over r's method, path, body and headers (through fn). */
void http_api_req_init(struct req *r, struct api_request *q, api_header_fn fn);
/* api_header_fn over r's headers, copied out of MHD's memory at the 1st
 * call: safe on a pool thread, even after MHD has closed the connection. */
const char *http_req_header(void *arg, const char *name);
/* The body bytes an answer of len sends (none to HEAD), as the log's
 * bytes_out and attnd_response_bytes_total count them. */
size_t http_body_sent(const struct req *r, size_t len);

/* server/http_assets.c */
struct srv_asset;
/* The built-in file a GET or HEAD of url serves, or NULL. */
const struct srv_asset *http_find_asset(const char *method, const char *url);
/* Answer r with file a (200, its type, CORS and the usual headers). */
enum MHD_Result http_serve_asset(struct req *r, const struct srv_asset *a);

/* libmicrohttpd's access handler and request-completed callback (the
 * life of a request: server/http.c's top comment). */
enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version,
                             const char *upload_data, size_t *upload_data_size,
                             void **con_cls);
void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe);

/* server/http_start.c */
/* The read deadlines of conn's connection (http_on_connection made them),
 * or NULL. */
struct srv_rg_conn *http_connection_guard(struct MHD_Connection *conn);

/* server/http_body.c */
/* Grow the buffer to cap bytes (within the budget); false if it cannot. */
bool http_body_reserve(struct req *r, size_t cap);
/* Free (or keep, when small; or put back, when large) the body and return
 * its bytes to the budget; close its stream (and free what that built
 * and did not finish). */
void http_body_release(struct req *r);
/* Count n more bytes of a streamed body in the body budget, as a buffered
 * body's are (an import's header is held until it reads whole); false
 * when the budget has no room. http_body_release gives them back. */
bool http_body_charge(struct req *r, size_t n);
/* The same, only when room bytes of the budget stay free after it (for
 * what is not needed: the request goes on without it otherwise). */
bool http_body_charge_leaving(struct req *r, size_t n, size_t room);
/* Append an upload chunk within the caps; false (r->refuse set) if not. */
bool http_body_append(struct req *r, const char *data, size_t n);
/* An upload chunk into r's stream (within the cap, counted in the budget
 * as it arrives) or else its buffer (http_body_append); false (r->refuse
 * set) if refused: the caller releases the body. */
bool http_body_take(struct req *r, const char *data, size_t n);

/* server/http_work.c */
/* Loop thread: queue what the MHD thread suspended; report idleness. */
void http_async_cb(uv_async_t *a);

#endif
