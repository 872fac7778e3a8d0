/*
 * server/http_work.c — the work pool's side of a request: the loop thread
 * queues what the MHD threads suspended onto the compute pool
 * (server/sched.c), with its deadline and a watch on the client's socket;
 * a pool thread runs api_handle; the loop thread resumes the connection
 * when the answer is ready.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

static void watch_start(struct req *r)
{
    struct watch *w = malloc(sizeof *w);
    if (!w || r->fd < 0 || uv_poll_init_socket(r->h->loop, &w->poll, r->fd) != 0) {
        free(w);                    /* unwatched: it computes to the end */
        return;
    }
    w->r = r;
    w->poll.data = w;
    uv_poll_start(&w->poll, UV_DISCONNECT, watch_cb);
    r->watch = w;
}

static void watch_closed(uv_handle_t *h)
{
    free(h->data);
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
    r->stop.pause = r->len < LARGE_BODY ? NULL : srv_sched_bg_pause;
    r->stop.pause_arg = r->h->sched;
    q.ws = srv_worker_ws();
    attn_ws_set_stop(q.ws, &r->stop);
    api_handle(r->h->ctx, &q, &r->resp);
    attn_ws_set_stop(q.ws, NULL);
    r->timed_out = r->resp.status == 503 && !atomic_load(&r->gone) &&
                   attn_stop_due(&r->stop);
}

/* Loop thread: the answer is ready. */
static void work_done(struct srv_job *j)
{
    struct req *r = (struct req *)(void *)((char *)j - offsetof(struct req, job));
    struct srv_http *h = r->h;
    bool small = r->len < LARGE_BODY;   /* before the body is released */
    watch_stop(r);
    srv_metrics_count(h->metrics, SRV_EV_POOL_OUT, NULL);
    if (atomic_load(&r->gone))
        srv_metrics_count(h->metrics, SRV_EV_CANCELLED, NULL);
    else if (r->timed_out)
        srv_metrics_count(h->metrics, SRV_EV_DEADLINE, NULL);
    http_body_release(r);                    /* the response no longer needs it */
    pthread_mutex_lock(&h->mu);
    bool orphan = r->orphan;
    r->state = REQ_READY;
    pthread_mutex_unlock(&h->mu);
    if (orphan) {                       /* the daemon is stopping: nobody to answer */
        api_response_free(&r->resp);
        http_req_destroy(r);
    } else {
        MHD_resume_connection(r->conn); /* the MHD thread calls handler() again */
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
    r->job.run = work_run;
    r->job.done = work_done;
    memcpy(r->job.client, r->client, sizeof r->job.client);
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
