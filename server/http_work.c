/*
 * server/http_work.c — the work pool's side of a request: the loop thread
 * queues what the MHD threads suspended onto the compute pool
 * (server/sched.c), with its deadline and a watch on the client's socket;
 * a pool thread runs api_handle and resumes the connection itself when the
 * answer is ready; the loop thread then stops the watch (work_done).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/attn.h"

#include "server/http_impl.h"
#include "server/metrics.h"
#include "server/worker.h"

/* ---- the work pool (loop thread and pool threads) ------------------------ */

/*
 * A client that hangs up while its request is on the pool: a suspended
 * connection is not polled by libmicrohttpd, so the loop watches its socket
 * for the peer's close (EPOLLRDHUP through uv_poll) from the moment it is
 * queued until its answer is ready, and sets r->gone, which the
 * computation reads at its next piece (core/stop.h). The watcher is freed
 * by its close callback; it forgets the request before the request can be
 * resumed (and freed), both on the loop thread.
 */
struct watch {
    uv_poll_t poll;
    struct req *r;                  /* NULL once the request no longer needs it */
    int fd;                         /* its own duplicate of the socket */
};

static void watch_cb(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;                   /* UV_DISCONNECT, or an error: gone either way */
    struct watch *w = p->data;
    if (w->r)
        atomic_store(&w->r->gone, true);
    uv_poll_stop(p);
}

/* The watch polls a duplicate of the socket, not MHD's descriptor: the
 * pool thread resumes the connection before the loop stops the watch
 * (work_resume), so MHD may close its descriptor first, and a new
 * connection could get the same number while libuv still polls it (libuv
 * aborted on the second handle for one descriptor in the drain-under-load
 * test). The socket closes when both are closed, ~0.1 ms later at most. */
static void watch_start(struct req *r)
{
    struct watch *w = malloc(sizeof *w);
    int fd = w && r->fd >= 0 ? fcntl(r->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0 || uv_poll_init_socket(r->h->loop, &w->poll, fd) != 0) {
        if (fd >= 0)
            close(fd);
        free(w);                    /* unwatched: it computes to the end */
        return;
    }
    w->fd = fd;
    w->r = r;
    w->poll.data = w;
    uv_poll_start(&w->poll, UV_DISCONNECT, watch_cb);
    r->watch = w;
}

static void watch_closed(uv_handle_t *h)
{
    struct watch *w = h->data;
    close(w->fd);
    free(w);
}

static void watch_stop(struct req *r)
{
    struct watch *w = r->watch;
    if (!w)
        return;
    w->r = NULL;
    uv_close((uv_handle_t *)&w->poll, watch_closed);   /* stops it too */
    r->watch = NULL;
}

/* Pool thread. A request whose client is gone is not started. */
static void work_run(struct srv_job *j)
{
    struct req *r = (struct req *)(void *)((char *)j - offsetof(struct req, job));
    struct api_request q;
    http_api_req_init(r, &q, http_req_header);
    if (atomic_load(&r->gone)) {
        api_transport_error(r->h->ctx, &q, API_ERR_DEADLINE_EXCEEDED,
                            "the client went away", &r->resp);
        return;
    }
    bool large = http_body_size(r) >= LARGE_BODY;
    r->stop.pause = large ? srv_sched_bg_pause : NULL;
    r->stop.pause_arg = r->h->sched;
    r->stop.yield = large ? srv_sched_bg_yield : NULL;
    r->stop.yield_arg = r->h->sched;
    q.ws = srv_worker_ws();
    attn_ws_set_stop(q.ws, &r->stop);
    api_handle(r->h->ctx, &q, &r->resp);
    attn_ws_set_stop(q.ws, NULL);
    r->timed_out = r->resp.error == API_ERR_DEADLINE_EXCEEDED && !atomic_load(&r->gone);
}

/*
 * Pool thread: hand the answer to MHD at once. Resuming from the loop
 * thread (after the pool's uv_async woke it) put one more thread wake-up
 * between the end of the computation and the first byte sent: 40-50 us on
 * quiet cores, ~0.1 ms at load 4 (uprobes, 2048 x 128 requests). The
 * request then stays allocated
 * until work_done has run on the loop thread (loop_owes: completed() leaves
 * the freeing to work_done), because the watch, the scheduler's done list
 * and work_done still use it. The daemon is never stopped while a request
 * is on the pool (loop.c's finish waits for srv_http_seal() to return 0), so
 * this resume cannot race MHD_stop_daemon.
 */
static void work_resume(struct req *r)
{
    struct srv_http *h = r->h;
    /* counted before the answer leaves, so a client that reads /metrics
     * after its answer finds it counted */
    srv_metrics_count(h->metrics, SRV_EV_POOL_OUT, NULL);
    if (atomic_load(&r->gone))
        srv_metrics_count(h->metrics, SRV_EV_CANCELLED, NULL);
    else if (r->timed_out)
        srv_metrics_count(h->metrics, SRV_EV_DEADLINE, NULL);
    /* Released before the answer leaves, so that the client's next request
     * finds the body buffer kept (api/spare.c) instead of faulting in a new
     * one: released later, on the loop thread, 74 page faults per request
     * came back in the bench's alternating base64/v2 rounds. */
    http_body_release(r);
    pthread_mutex_lock(&h->mu);
    bool orphan = r->orphan;
    if (!orphan) {
        r->state = REQ_READY;
        r->loop_owes = true;
    }
    pthread_mutex_unlock(&h->mu);
    if (!orphan)
        MHD_resume_connection(r->conn); /* the MHD thread calls handler() again */
}

static void work_run_resume(struct srv_job *j)
{
    work_run(j);
    work_resume((struct req *)(void *)((char *)j - offsetof(struct req, job)));
}

/* Loop thread: the answer is ready (counted, its body released and, unless
 * orphaned, handed to MHD by work_resume). Once loop_owes is cleared, r is the MHD thread's
 * to free: nothing here touches it after that. */
static void work_done(struct srv_job *j)
{
    struct req *r = (struct req *)(void *)((char *)j - offsetof(struct req, job));
    struct srv_http *h = r->h;
    bool small = r->fg;
    watch_stop(r);
    pthread_mutex_lock(&h->mu);
    bool orphan = r->orphan;
    r->loop_owes = false;
    pthread_mutex_unlock(&h->mu);
    if (orphan) {                       /* MHD closed it: nobody to answer */
        api_response_free(&r->resp);
        http_req_destroy(r);
    }
    if (small)
        srv_sched_fg_end(h->sched);
    atomic_fetch_sub(&h->working, 1);
}

/* Loop thread: onto the pool, with its deadline and hang-up watch. */
static void work_queue(struct req *r)
{
    struct srv_http *h = r->h;
    double t = h->cfg->request_timeout_s;
    r->stop.cancel = &r->gone;
    r->stop.start_ns = attn_now_ns();
    r->stop.deadline_ns = t > 0 ? r->stop.start_ns + (uint64_t)(t * 1e9) : 0;
    r->job.run = work_run_resume;
    r->job.done = work_done;
    memcpy(r->job.client, r->client, sizeof r->job.client);
    r->job.small = r->fg;
    srv_metrics_count(h->metrics, SRV_EV_POOL_IN, NULL);
    watch_start(r);
    srv_sched_push(h->sched, &r->job);
}

/* Loop thread: queue what the MHD thread suspended; report idleness. */
void http_async_cb(uv_async_t *a)
{
    struct srv_http *h = a->data;
    pthread_mutex_lock(&h->mu);
    struct req *list = h->pending;
    h->pending = NULL;
    bool idle = h->idle_due;
    h->idle_due = false;
    pthread_mutex_unlock(&h->mu);
    /* reverse into arrival order */
    struct req *fifo = NULL;
    while (list) {
        struct req *n = list->next;
        list->next = fifo;
        fifo = list;
        list = n;
    }
    while (fifo) {
        struct req *r = fifo;
        fifo = r->next;
        work_queue(r);
    }
    if (idle && h->idle && atomic_load(&h->in_flight) == 0) {
        srv_http_idle_fn fn = h->idle;
        h->idle = NULL;
        fn(h->idle_arg);
    }
}
