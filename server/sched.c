/*
 * server/sched.c — fair scheduling of requests over libuv's pool.
 *
 * Every request pushed adds one job to one of its client's two FIFO
 * queues (lanes: small jobs and large ones) and one ticket (a uv_work_t)
 * to libuv's pool. A ticket's thread takes the next job round robin over
 * the clients with queued jobs, a client's small lane first, skipping a
 * client that already runs per_client jobs (per_client + 1 for a small
 * one), runs the job, and goes on taking jobs until none may run; a
 * ticket that finds nothing returns at once. A job left queued because
 * its client was at its cap is taken by the thread that finishes one of
 * that client's running jobs, so every job runs. Finished jobs go on a
 * done list that the loop thread drains (uv_async): their done callbacks
 * run there in finishing order.
 *
 * Why two lanes and the one slot more: with one queue, a client's small
 * request waited behind its own large ones (seconds behind a few
 * 8192-row passes), and behind a proxy every caller is one client. A small
 * job is one whose body is small (server/http.c), the same measure that
 * makes it foreground below; it may run beside per_client large ones of
 * its client, in one slot more, so a client holds at most per_client + 1
 * threads.
 *
 * Why the pool has more threads than a client may use (server/loop.c sets
 * UV_THREADPOOL_SIZE to twice --workers, plus one): with one client
 * holding every thread, another client's request would wait for one of
 * those requests to end (a 8192x8192 pass is ~0.2 s; a small body can
 * still compute for long, a step over a long session). With spare
 * threads it starts at once and the kernel shares the cores among the
 * running requests. Hand-written rather than a library's pool: libuv's
 * queue is one FIFO, and the per-client queues are what make it fair.
 *
 * Large passes give way to other work in two ways (sched.h): they pause at
 * piece boundaries while a small request computes, and inside pieces they
 * offer their core to any waiting thread, more often while other jobs are
 * held here.
 */
#include "server/sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/stop.h"

struct sched_lane {
    struct srv_job *head, *tail;    /* queued */
    unsigned running;               /* of this lane */
};

struct sched_client {
    struct sched_client *next;      /* in srv_sched.clients (a ring order) */
    struct sched_lane lane[2];      /* [0] small jobs, [1] large ones */
    char id[SRV_CLIENT_ID_MAX];
};

static struct sched_lane *lane_of(struct sched_client *c, const struct srv_job *j)
{
    return &c->lane[j->small ? 0 : 1];
}

struct srv_sched {
    uv_loop_t *loop;
    uv_async_t async;               /* pool thread -> loop: jobs done */
    pthread_mutex_t mu;             /* guards everything below */
    struct sched_client *clients;   /* with queued or running jobs */
    struct sched_client *cursor;    /* where the next round-robin scan starts */
    struct srv_job *done, *done_tail;   /* finished, in finishing order */
    unsigned per_client;
    atomic_uint fg;                 /* small requests computing */
    atomic_uint jobs;               /* pushed and not yet run to their end */
    pthread_mutex_t fg_mu;          /* with fg_cv: large ones wait for fg == 0 */
    pthread_cond_t fg_cv;           /* CLOCK_MONOTONIC */
};

struct ticket {
    uv_work_t work;
    struct srv_sched *s;
};

/* Under mu: the next job that may run, or NULL. */
static struct srv_job *take(struct srv_sched *s)
{
    struct sched_client *start = s->cursor ? s->cursor : s->clients;
    struct sched_client *c = start;
    if (!c)
        return NULL;
    do {
        unsigned running = c->lane[0].running + c->lane[1].running;
        for (int i = 0; i < 2; i++) {
            struct sched_lane *l = &c->lane[i];
            /* per_client jobs at once, one more when small (below) */
            if (!l->head || running > s->per_client ||
                (running == s->per_client && i == 1))
                continue;
            struct srv_job *j = l->head;
            l->head = j->next;
            if (!l->head)
                l->tail = NULL;
            l->running++;
            s->cursor = c->next;    /* the next client goes first next time */
            return j;
        }
        c = c->next ? c->next : s->clients;
    } while (c != start);
    return NULL;
}

/* Under mu: drop a client with nothing queued or running. */
static void forget(struct srv_sched *s, struct sched_client *c)
{
    for (int i = 0; i < 2; i++)
        if (c->lane[i].head || c->lane[i].running)
            return;
    for (struct sched_client **pc = &s->clients; *pc; pc = &(*pc)->next)
        if (*pc == c) {
            *pc = c->next;
            break;
        }
    if (s->cursor == c)
        s->cursor = c->next;
    free(c);
}

static void ticket_work(uv_work_t *w)
{
    struct srv_sched *s = ((struct ticket *)w->data)->s;
    pthread_mutex_lock(&s->mu);
    struct srv_job *j;
    while ((j = take(s)) != NULL) {
        pthread_mutex_unlock(&s->mu);
        j->run(j);
        atomic_fetch_sub_explicit(&s->jobs, 1, memory_order_relaxed);
        pthread_mutex_lock(&s->mu);
        struct sched_client *c = j->cl;
        lane_of(c, j)->running--;
        forget(s, c);
        j->cl = NULL;
        j->next = NULL;
        if (s->done_tail)
            s->done_tail->next = j;
        else
            s->done = j;
        s->done_tail = j;
        uv_async_send(&s->async);
    }
    pthread_mutex_unlock(&s->mu);
}

static void ticket_after(uv_work_t *w, int status)
{
    (void)status;
    free(w->data);
}

static void async_cb(uv_async_t *a)
{
    struct srv_sched *s = a->data;
    pthread_mutex_lock(&s->mu);
    struct srv_job *fifo = s->done;
    s->done = s->done_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (fifo) {
        struct srv_job *j = fifo;
        fifo = j->next;
        j->done(j);
    }
}

struct srv_sched *srv_sched_new(uv_loop_t *loop, unsigned per_client)
{
    struct srv_sched *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->loop = loop;
    s->per_client = per_client ? per_client : 1;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->fg, 0);
    atomic_init(&s->jobs, 0);
    pthread_mutex_init(&s->fg_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->fg_cv, &ca);
    pthread_condattr_destroy(&ca);
    uv_async_init(loop, &s->async, async_cb);
    s->async.data = s;
    return s;
}

/* Under mu: the client's entry, created at the end of the ring. */
static struct sched_client *client_of(struct srv_sched *s, const char *id)
{
    struct sched_client **pc = &s->clients;
    for (; *pc; pc = &(*pc)->next)
        if (strcmp((*pc)->id, id) == 0)
            return *pc;
    struct sched_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    memcpy(c->id, id, sizeof c->id);
    c->id[sizeof c->id - 1] = '\0';
    *pc = c;
    return c;
}

void srv_sched_push(struct srv_sched *s, struct srv_job *j)
{
    atomic_fetch_add_explicit(&s->jobs, 1, memory_order_relaxed);
    struct ticket *t = malloc(sizeof *t);
    pthread_mutex_lock(&s->mu);
    struct sched_client *c = t ? client_of(s, j->client) : NULL;
    if (c) {
        struct sched_lane *l = lane_of(c, j);
        j->cl = c;
        j->next = NULL;
        if (l->tail)
            l->tail->next = j;
        else
            l->head = j;
        l->tail = j;
    }
    pthread_mutex_unlock(&s->mu);
    if (!c) {                               /* out of memory: run it here */
        free(t);
        j->run(j);
        atomic_fetch_sub_explicit(&s->jobs, 1, memory_order_relaxed);
        j->done(j);
        return;
    }
    t->s = s;
    t->work.data = t;
    if (uv_queue_work(s->loop, &t->work, ticket_work, ticket_after) != 0) {
        ticket_work(&t->work);              /* cannot happen with a live loop */
        ticket_after(&t->work, 0);
    }
}

/* Under mu: unlink j from its lane if it is queued there; whether it was. */
static bool unqueue(struct srv_sched *s, struct srv_job *j)
{
    struct sched_client *c = j->cl;
    if (!c)
        return false;
    struct sched_lane *l = lane_of(c, j);
    struct srv_job *prev = NULL;
    for (struct srv_job *q = l->head; q; prev = q, q = q->next) {
        if (q != j)
            continue;
        if (prev)
            prev->next = j->next;
        else
            l->head = j->next;
        if (l->tail == j)
            l->tail = prev;
        j->next = NULL;
        j->cl = NULL;
        forget(s, c);
        return true;
    }
    return false;                       /* running: taken by a thread */
}

/* Its ticket stays in libuv's queue and, run, finds another job or none. */
bool srv_sched_cancel(struct srv_sched *s, struct srv_job *j)
{
    pthread_mutex_lock(&s->mu);
    bool queued = unqueue(s, j);
    pthread_mutex_unlock(&s->mu);
    if (!queued)
        return false;
    j->run(j);
    atomic_fetch_sub_explicit(&s->jobs, 1, memory_order_relaxed);
    j->done(j);
    return true;
}

void srv_sched_fg_begin(struct srv_sched *s)
{
    atomic_fetch_add(&s->fg, 1);
}

void srv_sched_fg_end(struct srv_sched *s)
{
    if (atomic_fetch_sub(&s->fg, 1) == 1) {
        pthread_mutex_lock(&s->fg_mu);
        pthread_cond_broadcast(&s->fg_cv);
        pthread_mutex_unlock(&s->fg_mu);
    }
}

void srv_sched_bg_pause(void *arg)
{
    struct srv_sched *s = arg;
    if (atomic_load_explicit(&s->fg, memory_order_relaxed) == 0)
        return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += SRV_BG_PAUSE_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->fg_mu);
    while (atomic_load(&s->fg) > 0)
        if (pthread_cond_timedwait(&s->fg_cv, &s->fg_mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&s->fg_mu);
}

/* The yield's period on a pass of s: short while s holds other jobs. */
static uint64_t yield_every_ns(struct srv_sched *s)
{
    bool others = atomic_load_explicit(&s->jobs, memory_order_relaxed) > 1;
    return (uint64_t)(others ? SRV_BG_YIELD_US : SRV_BG_YIELD_ALONE_US) * 1000u;
}

/* Yield if a period of s has passed since *last_ns (the thread's last
 * yield; then now_ns); whether it did. */
static bool bg_yield_at(struct srv_sched *s, uint64_t *last_ns, uint64_t now_ns)
{
    if (now_ns - *last_ns < yield_every_ns(s))
        return false;
    *last_ns = now_ns;
    sched_yield();
    return true;
}

void srv_sched_bg_yield(void *arg)
{
    static _Thread_local uint64_t last;
    bg_yield_at(arg, &last, attn_now_ns());
}

void srv_sched_close(struct srv_sched *s)
{
    if (!s)
        return;
    async_cb(&s->async);                    /* anything finished last */
    uv_close((uv_handle_t *)&s->async, NULL);
}

/* A ticket can outlive its job (the thread that ran the job may have been
 * another ticket's): it still locks s->mu on a libuv thread, so s is freed
 * only once the loop has run every ticket's after-callback. */
void srv_sched_free(struct srv_sched *s)
{
    if (!s)
        return;
    pthread_cond_destroy(&s->fg_cv);
    pthread_mutex_destroy(&s->fg_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

