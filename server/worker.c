/*
 * server/worker.c — what each compute thread (libuv's pool) computes with:
 * its attention scratch, made on first use and freed at shutdown, and the
 * core's helper pool that every scratch carries; and the check that the
 * pool's threads can be made at all (srv_worker_pool_fits).
 */
#include "server/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/attn.h"

#define MAX_WORKER_WS 1024

/*
 * One large request uses both cores: every worker's scratch carries the
 * core's helper pool (attn_pool, min(workers, cpus) - 1 threads), which
 * joins a pass only while that request is the only one computing (a helper
 * steps back as soon as another request waits), so helpers never
 * oversubscribe the workers; BLAS stays single-threaded.
 */
static struct attn_pool *par_pool;

void srv_worker_start(unsigned workers, unsigned cpus, bool (*may_help)(void *arg), void *arg)
{
    size_t w = workers < cpus ? workers : cpus;
    if (w >= 2)
        par_pool = attn_pool_new(w - 1, may_help, arg);
}

static pthread_mutex_t ws_mu = PTHREAD_MUTEX_INITIALIZER;
static struct attn_ws *ws_all[MAX_WORKER_WS];
static size_t ws_count;
static _Thread_local struct attn_ws *ws_mine;

struct attn_ws *srv_worker_ws(void)
{
    if (ws_mine)
        return ws_mine;
    pthread_mutex_lock(&ws_mu);
    if (ws_count < MAX_WORKER_WS) {
        ws_mine = attn_ws_new();
        attn_ws_set_pool(ws_mine, par_pool);
        if (ws_mine)
            ws_all[ws_count++] = ws_mine;
    }
    pthread_mutex_unlock(&ws_mu);
    return ws_mine;
}

void srv_worker_free(void)
{
    pthread_mutex_lock(&ws_mu);
    for (size_t i = 0; i < ws_count; i++)
        attn_ws_free(ws_all[i]);
    ws_count = 0;
    pthread_mutex_unlock(&ws_mu);
    attn_pool_free(par_pool);
    par_pool = NULL;
}

/* libuv 1.44's threadpool.c gives each of its threads an 8 MiB stack. */
#define POOL_STACK_BYTES ((size_t)8 << 20)

struct fit_gate {
    pthread_mutex_t mu;
    pthread_cond_t open;
    bool go;
};

/* A trial thread: holds its stack until every other one is made. */
static void *fit_wait(void *arg)
{
    struct fit_gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->go)
        pthread_cond_wait(&g->open, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int srv_worker_pool_fits(unsigned threads, unsigned *made)
{
    struct fit_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    pthread_t *t = calloc(threads ? threads : 1, sizeof *t);
    pthread_attr_t attr;
    int e = t ? pthread_attr_init(&attr) : ENOMEM;
    unsigned n = 0;
    if (e == 0) {
        e = pthread_attr_setstacksize(&attr, POOL_STACK_BYTES);
        for (; e == 0 && n < threads; n++)
            if ((e = pthread_create(&t[n], &attr, fit_wait, &g)) != 0)
                break;
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_lock(&g.mu);
    g.go = true;
    pthread_cond_broadcast(&g.open);
    pthread_mutex_unlock(&g.mu);
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    *made = n;
    return e;
}
