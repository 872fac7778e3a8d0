/*
 * server/http_work.c — the work pool's side of a request: the loop thread
 * queues what the MHD threads suspended onto the compute pool
 * (server/sched.c), with its deadline and a watch on the client's socket;
 * a pool thread runs api_handle and resumes the connection itself when the
 * answer is ready; the loop thread then stops the watch (work_done). When
 * --drain-timeout runs out, srv_http_cut answers what is still computing
 * 503 draining instead (below).
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
 * computation reads at its next piece (core/stop.h); a request still
 * queued is taken off the queue and answered at once (srv_sched_cancel).
 * The watcher is freed by its close callback. The loop stops it in
 * work_done, after the pool thread has resumed the connection; the
 * request stays allocated until then (loop_owes).
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
    struct req *r = w->r;
    uv_poll_stop(p);
    if (!r)
        return;
    atomic_store(&r->gone, true);
    /* Still queued: answered and let go now (work_run does not compute
     * for a client gone; work_done closes this watch), so that its body
     * and its --max-inflight-per-key slot are not held until a thread
     * comes free behind other clients' long requests. */
    srv_sched_cancel(r->h->sched, &r->job);
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

/* ---- the requests on the pool, and the drain timeout's cut --------------- */

/* Loop thread: r joins (pool_link, work_queue) and leaves (pool_unlink,
 * work_done) the list srv_http_cut walks. */
static void pool_link(struct req *r)
{
    struct srv_http *h = r->h;
    r->pool_prev = NULL;
    r->pool_next = h->on_pool;
    if (h->on_pool)
        h->on_pool->pool_prev = r;
    h->on_pool = r;
}

static void pool_unlink(struct req *r)
{
    struct srv_http *h = r->h;
    if (r->pool_prev)
        r->pool_prev->pool_next = r->pool_next;
    else
        h->on_pool = r->pool_next;
    if (r->pool_next)
        r->pool_next->pool_prev = r->pool_prev;
    r->pool_prev = r->pool_next = NULL;
}

/* Loop thread, under h->mu: one more answer to wait for (http_completed
 * counts it off). */
static void await_answer(struct srv_http *h, struct req *r)
{
    r->awaited = true;
    atomic_fetch_add(&h->owed, 1);
}

/* Loop thread: a request suspended after the cut, never queued: nothing
 * of it ran, so it is answered 503 draining (the MHD thread's REQ_CUT) and
 * the loop has no more to do with it. */
static void cut_unqueued(struct req *r)
{
    struct srv_http *h = r->h;
    if (r->fg)
        srv_sched_fg_end(h->sched);
    pthread_mutex_lock(&h->mu);
    r->state = REQ_CUT;
    await_answer(h, r);
    pthread_mutex_unlock(&h->mu);
    h->n_cut++;
    atomic_fetch_sub(&h->working, 1);
    MHD_resume_connection(r->conn);
}

/*
 * Loop thread: a request on the pool when --drain-timeout runs out. Its
 * commit is withdrawn first: from then on no change of it can be
 * journaled (core/store.h's sess_commit; an append applied in memory is
 * rolled back when its record is refused), so a 503 that says nothing of
 * it was applied stays true however long its pool thread goes on. If a
 * record of it was written already (its computation done, its answer
 * being written), its change may have landed: it is left to
 * answer for itself, as one already resumed with its answer is, while the
 * process waits for the answers owed. Else it is cut: the connection is
 * resumed here to answer 503 (REQ_CUT); the pool thread then leaves the
 * connection alone (work_resume reads r->cut) and work_done still frees r
 * if MHD has closed it by then (loop_owes), and its computation is
 * cancelled (r->gone, as when its client hangs up: it stops at its next
 * piece), so that the pool lets go of the sessions it holds, which the
 * final snapshot waits for. One left to answer goes on, so that it can
 * answer what it did, until srv_http_cancel (the grace is over). Returns
 * whether it was left to answer.
 */
static bool cut_on_pool(struct req *r)
{
    struct srv_http *h = r->h;
    bool withdrawn = sess_commit_withdraw(&r->commit);
    pthread_mutex_lock(&h->mu);
    /* loop_owes first: once resumed, its MHD thread writes r->state unlocked */
    bool cut = withdrawn && !r->orphan && !r->loop_owes && r->state == REQ_WORKING;
    if (cut) {
        r->cut = true;
        r->state = REQ_CUT;
        r->loop_owes = true;
    }
    bool left = !cut && !r->orphan;
    if (!r->orphan)
        await_answer(h, r);
    pthread_mutex_unlock(&h->mu);
    if (cut) {
        atomic_store(&r->by_drain, true);
        atomic_store(&r->gone, true);
        h->n_cut++;
        MHD_resume_connection(r->conn);
    }
    return left;
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
    sess_commit_bind(&r->commit);       /* srv_http_cut may withdraw it */
    api_handle(r->h->ctx, &q, &r->resp);
    sess_commit_bind(NULL);
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
    if (atomic_load(&r->gone) && !atomic_load(&r->by_drain))
        srv_metrics_count(h->metrics, SRV_EV_CANCELLED, NULL);  /* a hang-up */
    else if (r->timed_out)
        srv_metrics_count(h->metrics, SRV_EV_DEADLINE, NULL);
    /* Released before the answer leaves, so that the client's next request
     * finds the body buffer kept (api/spare.c) instead of faulting in a new
     * one: released later, on the loop thread, 74 page faults per request
     * came back in the bench's alternating base64/v2 rounds. */
    http_body_release(r);
    pthread_mutex_lock(&h->mu);
    bool resume = !r->orphan && !r->cut;    /* cut: answered 503 already */
    if (resume) {
        r->state = REQ_READY;
        r->loop_owes = true;
    }
    pthread_mutex_unlock(&h->mu);
    if (resume)
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
    pool_unlink(r);
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

/* Loop thread: onto the pool, with its deadline and hang-up watch (or,
 * after srv_http_cut, answered 503 draining at once). */
static void work_queue(struct req *r)
{
    struct srv_http *h = r->h;
    if (h->cutting) {
        cut_unqueued(r);
        return;
    }
    pool_link(r);
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

/* Loop thread: queue what the MHD threads suspended, in arrival order. */
static void queue_pending(struct srv_http *h)
{
    pthread_mutex_lock(&h->mu);
    struct req *list = h->pending;
    h->pending = NULL;
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
}

/* Loop thread: queue what the MHD threads suspended; report idleness. */
void http_async_cb(uv_async_t *a)
{
    struct srv_http *h = a->data;
    queue_pending(h);
    pthread_mutex_lock(&h->mu);
    bool idle = h->idle_due;
    h->idle_due = false;
    pthread_mutex_unlock(&h->mu);
    if (idle && h->idle && atomic_load(&h->in_flight) == 0) {
        srv_http_idle_fn fn = h->idle;
        h->idle = NULL;
        fn(h->idle_arg);
    }
}

size_t srv_http_cut(struct srv_http *h, size_t *left)
{
    atomic_store(&h->sealed, true);     /* a body complete from now on: 503 */
    h->cutting = true;                  /* suspended meanwhile: cut_unqueued */
    queue_pending(h);
    *left = 0;
    for (struct req *r = h->on_pool; r; r = r->pool_next)
        *left += cut_on_pool(r);
    return h->n_cut;
}

void srv_http_cancel(struct srv_http *h)
{
    for (struct req *r = h->on_pool; r; r = r->pool_next) {
        atomic_store(&r->by_drain, true);
        atomic_store(&r->gone, true);
    }
}

size_t srv_http_owed(const struct srv_http *h)
{
    return atomic_load(&((struct srv_http *)h)->owed);
}
