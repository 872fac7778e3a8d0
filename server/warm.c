/*
 * server/warm.c — --warm-up (server/warm.h): one job per thread of the
 * compute pool, gathered so that each thread holds one, then each runs
 * the made-up requests of api/warm.c in turn. A first request on a thread
 * that never computed faulted its scratch in (64 pages at n=L=2048 d=128);
 * the blocks a request needs (api/spare.c) are shared and kept by the
 * first thread's turn. A signal to stop (server/loop.c) ends the warm-up
 * after the request in hand.
 */
#include "server/warm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "api/spare.h"
#include "api/warm.h"
#include "server/log.h"
#include "server/worker.h"

/* How long a job waits for the others to reach their threads: past it (a
 * pool with fewer threads than asked), it runs anyway. */
#define WARM_GATHER_S 2

struct warm_run {
    pthread_mutex_t mu;             /* held by the thread whose turn it is */
    pthread_cond_t arrived;
    unsigned in, threads;
    unsigned done;                  /* jobs finished (loop thread) */
    struct api_ctx *ctx;
    const struct srv_config *cfg;
    const atomic_bool *stop;
    bool failed;
    size_t failed_at;
    char err[512];
    double ms[API_WARM_MAX];        /* the first thread's, per shape */
    unsigned ran[API_WARM_MAX];     /* threads that ran each shape */
};

struct warm_job {
    uv_work_t work;
    struct warm_run *run;
};

/* With r->mu held: count this job in and wait (releasing mu) until every
 * job has reached a thread of its own, or WARM_GATHER_S has passed. */
static void gather(struct warm_run *r)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += WARM_GATHER_S;
    r->in++;
    pthread_cond_broadcast(&r->arrived);
    while (r->in < r->threads)
        if (pthread_cond_timedwait(&r->arrived, &r->mu, &until) != 0)
            break;
}

/* Pool thread: wait for the others, then take a turn. */
static void warm_work(uv_work_t *w)
{
    struct warm_run *r = ((struct warm_job *)w->data)->run;
    pthread_mutex_lock(&r->mu);
    gather(r);
    struct attn_ws *ws = srv_worker_ws();
    for (size_t i = 0; !r->failed && i < r->cfg->n_warm_up && !atomic_load(r->stop); i++) {
        uint64_t t0 = uv_hrtime();
        if (!ws)
            snprintf(r->err, sizeof r->err, "out of memory");
        if (!ws || !api_warm_run(r->ctx, &r->cfg->warm_up[i], ws, r->err, sizeof r->err)) {
            r->failed = true;
            r->failed_at = i;
        } else {
            if (r->ran[i] == 0)
                r->ms[i] = (double)(uv_hrtime() - t0) / 1e6;
            r->ran[i]++;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* Loop thread: the last job's end ends the warm-up's run of the loop (the
 * signal handles on it would keep it running). */
static void warm_done(uv_work_t *w, int status)
{
    (void)status;
    struct warm_run *r = ((struct warm_job *)w->data)->run;
    if (++r->done == r->threads)
        uv_stop(w->loop);
}

static void log_outcome(const struct warm_run *r, bool stopped)
{
    const struct srv_config *c = r->cfg;
    char name[96], ms[32], ran[16];
    for (size_t i = 0; i < c->n_warm_up && r->ran[i] > 0; i++) {
        api_warm_name(&c->warm_up[i], name, sizeof name);
        snprintf(ms, sizeof ms, "%.1f", r->ms[i]);
        snprintf(ran, sizeof ran, "%u", r->ran[i]);
        const char *kv[] = {"shape", name, "ms", ms, "threads", ran, NULL};
        srv_log_event("info", "warmed up", kv);
    }
    if (r->failed) {
        api_warm_name(&c->warm_up[r->failed_at], name, sizeof name);
        srv_log_msgf("error", "--warm-up %s: %s", name, r->err);
        return;
    }
    if (stopped) {                  /* the last shape's count is the turns finished */
        srv_log_msgf("info", "warm-up stopped after %u of %u threads' turns",
                     r->ran[c->n_warm_up - 1], r->threads);
        return;
    }
    size_t bytes, kept = api_spare_kept(&bytes);
    srv_log_msgf("info", "warm-up: %zu buffers of %zu bytes in all kept for the first requests",
                 kept, bytes);
}

/* The shapes and the threads that will run them, as the warm-up starts. */
static void log_start(const struct srv_config *cfg, unsigned threads)
{
    char names[API_WARM_MAX * 96] = "", nthreads[16];
    for (size_t i = 0, at = 0; i < cfg->n_warm_up && at < sizeof names; i++) {
        char name[96];
        api_warm_name(&cfg->warm_up[i], name, sizeof name);
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? "," : "", name);
    }
    snprintf(nthreads, sizeof nthreads, "%u", threads);
    const char *kv[] = {"shapes", names, "threads", nthreads, NULL};
    srv_log_event("info", "warming up", kv);
}

bool srv_warm_up(uv_loop_t *loop, struct api_ctx *ctx, const struct srv_config *cfg,
                 unsigned threads, atomic_bool *warming, const atomic_bool *stop)
{
    if (cfg->n_warm_up == 0)
        return true;
    struct warm_run r = {.threads = threads, .ctx = ctx, .cfg = cfg, .stop = stop};
    struct warm_job *jobs = calloc(threads, sizeof *jobs);
    pthread_condattr_t ca;
    bool made = jobs && pthread_condattr_init(&ca) == 0;
    if (made) {
        made = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
               pthread_cond_init(&r.arrived, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (made && pthread_mutex_init(&r.mu, NULL) != 0) {
        pthread_cond_destroy(&r.arrived);
        made = false;
    }
    if (!made) {
        free(jobs);
        srv_log_msgf("error", "--warm-up: cannot start (out of memory)");
        return false;
    }
    log_start(cfg, threads);
    atomic_store(warming, true);
    unsigned queued = 0;
    pthread_mutex_lock(&r.mu);      /* the jobs start once all are queued */
    for (; queued < threads; queued++) {
        jobs[queued].run = &r;
        jobs[queued].work.data = &jobs[queued];
        if (uv_queue_work(loop, &jobs[queued].work, warm_work, warm_done) != 0)
            break;
    }
    r.threads = queued;
    pthread_mutex_unlock(&r.mu);
    if (queued > 0)
        uv_run(loop, UV_RUN_DEFAULT);   /* until warm_done stops it */
    atomic_store(warming, false);
    bool stopped = atomic_load(stop);   /* even in the last shape */
    if (!stopped)
        api_spare_touch();          /* once, after every turn */
    if (queued == 0) {
        r.failed = true;
        snprintf(r.err, sizeof r.err, "the compute pool did not start");
    }
    log_outcome(&r, stopped);
    pthread_cond_destroy(&r.arrived);
    pthread_mutex_destroy(&r.mu);
    free(jobs);
    return !r.failed;
}
