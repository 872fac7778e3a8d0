/*
 * core/pool.c — the helper pool that splits one large attention pass over
 * cores (declared in core/pool.h): a pass publishes its job (a piece
 * function and a count), claims pieces with an atomic counter alongside
 * whichever helpers join, and waits until the helpers inside the job have
 * left it. Each helper has its own workspace. A helper that has just left
 * a job watches for the next one for a short, bounded time (POOL_SPIN_NS,
 * with the CPU's pause instruction) before it sleeps on a condition
 * variable, so consecutive passes (the steps of a decode) find it awake;
 * the calling thread likewise watches for the last helper to leave before
 * it sleeps.
 */
#include "pool.h"
#include "attn.h"
#include "stop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* How long a helper watches for the next job after leaving one, and the
 * calling thread for the helpers to leave, before sleeping (nanoseconds):
 * waking a sleeping helper takes a sizeable part of a decode step, and the
 * next step follows soon after. Idle, a helper costs at most this much CPU
 * after each job (tests/bench/bench_pool.c measures both; tuned:
 * docs/benchmarks.md, section "The helper pool's join"). */
#ifndef POOL_SPIN_NS
#define POOL_SPIN_NS 50000
#endif
/* A thread that was preempted (an involuntary context switch) within this
 * long does not watch: the cores are contended, the watch rarely finds the
 * other thread running, and its CPU time is taken from the pass (measured:
 * docs/benchmarks.md, section "The helper pool's join"). */
#ifndef POOL_CALM_NS
#define POOL_CALM_NS 50000000
#endif

/* Why hand-written: a pass needs a fork-join over a handful of pieces with
 * per-thread scratch and a "step back when others wait" rule; OpenMP would
 * add its own spinning pool next to libuv's, and its spinning threads took
 * the cores the other requests needed (this pool's watch is bounded, and
 * ends as soon as may_help says other work waits). */
struct attn_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_t *th;
    struct attn_ws **ws;            /* one workspace per helper */
    size_t helpers, started;
    bool (*may_help)(void *);
    void *may_arg;
    bool busy, stop;                /* a pass owns the pool / shutting down */
    atomic_ulong gen;               /* bumped (under mu) for every published job and at stop */
    attn_piece_fn fn;               /* the job, NULL when none is open */
    void *arg;
    size_t pieces;
    atomic_ulong active;            /* helpers inside the job: joined under mu, left without */
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

/* Whether the calling thread may watch: not preempted within POOL_CALM_NS
 * (ru_nivcsw, per thread where the system counts it per thread). */
struct pool_calm {
    long nivcsw;
    uint64_t until;                 /* calm again from here (attn_now_ns) */
};

static bool pool_calm(struct pool_calm *c)
{
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return false;
    uint64_t now = attn_now_ns();
    if (ru.ru_nivcsw != c->nivcsw) {
        c->nivcsw = ru.ru_nivcsw;
        c->until = now + POOL_CALM_NS;
    }
    return now >= c->until;
#else
    (void)c;
    return true;
#endif
}

/* The CPU's spin-wait hint: lets the sibling hyperthread run and saves
 * power while a thread watches a flag. */
static inline void pool_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("isb" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Watches *word for a bounded time (POOL_SPIN_NS) before the caller sleeps
 * on a condition variable: a helper (helper: true) until *word moves off v
 * (gen: the next job is published) or may_help says other work waits; the
 * calling thread until *word reaches v (active: every helper has left).
 * The condition variable's loop checks again either way. */
static void pool_watch(struct attn_pool *p, const atomic_ulong *word, unsigned long v,
                       bool helper)
{
    uint64_t t0 = attn_now_ns();
    for (unsigned i = 1;; i++) {
        if ((atomic_load_explicit(word, memory_order_acquire) == v) != helper)
            return;
        pool_relax();
        if (i % 64 == 0 && (attn_now_ns() - t0 > POOL_SPIN_NS || (helper && !pool_may(p))))
            return;
    }
}

static void *pool_main(void *v)
{
    struct pool_helper *h = v;
    struct attn_pool *p = h->pool;
    struct attn_ws *ws = p->ws[h->idx];
    free(h);
    unsigned long seen = 0;
    struct pool_calm calm = {0, 0};
    for (;;) {
        if (pool_calm(&calm))
            pool_watch(p, &p->gen, seen, true);
        pthread_mutex_lock(&p->mu);
        while (!p->stop && atomic_load(&p->gen) == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = atomic_load(&p->gen);
        attn_piece_fn fn = p->fn;   /* NULL: that job is already finished */
        void *arg = p->arg;
        size_t pieces = p->pieces;
        struct attn_ws *job_ws = p->job_ws;
        if (fn)
            atomic_fetch_add(&p->active, 1);
        pthread_mutex_unlock(&p->mu);
        if (!fn)
            continue;
        /* the job's stop inside its pieces too (their yields, the
         * boundaries of a piece that is itself cut up) */
        attn_ws_set_stop(ws, attn_ws_stop(job_ws));
        pool_work(p, fn, arg, pieces, job_ws, ws, true);
        attn_ws_set_stop(ws, NULL);
        if (atomic_fetch_sub(&p->active, 1) == 1) {
            pthread_mutex_lock(&p->mu);     /* the caller may be asleep on done */
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

struct attn_pool *attn_pool_new(size_t helpers, bool (*may_help)(void *arg), void *arg)
{
    struct attn_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->may_help = may_help;
    p->may_arg = arg;
    atomic_init(&p->gen, 0);
    atomic_init(&p->active, 0);
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
    atomic_fetch_add(&p->gen, 1);   /* ends the helpers' watch */
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
            atomic_fetch_add(&p->gen, 1);
        }
        pthread_mutex_unlock(&p->mu);
        if (joined)                 /* after unlocking: a woken helper finds mu free */
            pthread_cond_broadcast(&p->wake);
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
    pthread_mutex_unlock(&p->mu);
    static _Thread_local struct pool_calm calm;
    if (pool_calm(&calm))
        pool_watch(p, &p->active, 0, false);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active))
        pthread_cond_wait(&p->done, &p->mu);
    p->busy = false;
    bool all = !atomic_load(&p->skipped);
    pthread_mutex_unlock(&p->mu);
    return all;
}
