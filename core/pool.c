/*
 * core/pool.c — the helper pool that splits one large attention pass over
 * cores (declared in core/pool.h): a few helper threads wait on a condition
 * variable; a pass publishes its job (a piece function and a count),
 * claims pieces with an atomic counter alongside whichever helpers join,
 * and waits until the helpers inside the job have left it. Each helper has
 * its own workspace.
 */
#include "pool.h"
#include "attn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Why hand-written: a pass needs a fork-join over a handful of pieces with
 * per-thread scratch and a "step back when others wait" rule; OpenMP would
 * add its own spinning pool next to libuv's, and its spinning threads took
 * the cores the other requests needed. */
struct attn_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_t *th;
    struct attn_ws **ws;            /* one workspace per helper */
    size_t helpers, started;
    bool (*may_help)(void *);
    void *may_arg;
    bool busy, stop;                /* a pass owns the pool / shutting down */
    unsigned long gen;              /* bumped for every published job */
    attn_piece_fn fn;               /* the job, NULL when none is open */
    void *arg;
    size_t pieces, active;          /* helpers inside the job */
    struct attn_ws *job_ws;         /* the caller's: its stop is the job's */
    atomic_size_t next;             /* next unclaimed piece */
    atomic_bool skipped;            /* the job's stop came due: pieces were left out */
};

struct pool_helper {
    struct attn_pool *pool;
    size_t idx;
};

static bool pool_may(struct attn_pool *p)
{
    return !p->may_help || p->may_help(p->may_arg);
}

/* Claim and run pieces of the open job until none are left (or, for a
 * helper, until may_help says other work waits); at each boundary the
 * caller's stop (job_ws) may pause this thread, and once it is due the rest
 * are claimed without running them. */
static void pool_work(struct attn_pool *p, attn_piece_fn fn, void *arg, size_t pieces,
                      struct attn_ws *job_ws, struct attn_ws *ws, bool helper)
{
    while (!helper || pool_may(p)) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= pieces)
            break;
        if (attn_ws_boundary(job_ws)) {
            atomic_store(&p->skipped, true);
            atomic_store(&p->next, pieces);
            break;
        }
        fn(arg, i, ws);
    }
}

static void *pool_main(void *v)
{
    struct pool_helper *h = v;
    struct attn_pool *p = h->pool;
    struct attn_ws *ws = p->ws[h->idx];
    free(h);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        if (!p->fn)
            continue;               /* that job is already finished */
        attn_piece_fn fn = p->fn;
        void *arg = p->arg;
        size_t pieces = p->pieces;
        struct attn_ws *job_ws = p->job_ws;
        p->active++;
        pthread_mutex_unlock(&p->mu);
        pool_work(p, fn, arg, pieces, job_ws, ws, true);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct attn_pool *attn_pool_new(size_t helpers, bool (*may_help)(void *arg), void *arg)
{
    struct attn_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->may_help = may_help;
    p->may_arg = arg;
    atomic_init(&p->next, 0);
    atomic_init(&p->skipped, false);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc(helpers ? helpers : 1, sizeof *p->th);
    p->ws = calloc(helpers ? helpers : 1, sizeof *p->ws);
    if (!p->th || !p->ws) {
        attn_pool_free(p);
        return NULL;
    }
    p->helpers = helpers;
    for (size_t i = 0; i < helpers; i++) {
        struct pool_helper *h = malloc(sizeof *h);
        p->ws[i] = attn_ws_new();
        if (!h || !p->ws[i]) {
            free(h);
            attn_pool_free(p);
            return NULL;
        }
        *h = (struct pool_helper){p, i};
        if (pthread_create(&p->th[i], NULL, pool_main, h) != 0) {
            free(h);
            attn_pool_free(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

void attn_pool_free(struct attn_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->started; i++)
        pthread_join(p->th[i], NULL);
    for (size_t i = 0; p->ws && i < p->helpers; i++)
        attn_ws_free(p->ws[i]);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->ws);
    free(p);
}

bool attn_pool_run(struct attn_pool *p, attn_piece_fn fn, void *arg, size_t pieces,
                   struct attn_ws *ws)
{
    bool joined = false;
    if (p && p->helpers && pieces > 1 && pool_may(p)) {
        pthread_mutex_lock(&p->mu);
        if (!p->busy && !p->stop) {
            p->busy = joined = true;
            p->fn = fn;
            p->arg = arg;
            p->pieces = pieces;
            p->job_ws = ws;
            atomic_store(&p->next, 0);
            atomic_store(&p->skipped, false);
            p->gen++;
            pthread_cond_broadcast(&p->wake);
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (!joined) {
        for (size_t i = 0; i < pieces; i++) {
            if (attn_ws_boundary(ws))
                return false;
            fn(arg, i, ws);
        }
        return true;
    }
    pool_work(p, fn, arg, pieces, ws, ws, false);
    pthread_mutex_lock(&p->mu);
    p->fn = NULL;                   /* no helper joins from here on */
    while (p->active)
        pthread_cond_wait(&p->done, &p->mu);
    p->busy = false;
    bool all = !atomic_load(&p->skipped);
    pthread_mutex_unlock(&p->mu);
    return all;
}

