/*
 * tests/unit/test_pool_concurrency.c — the helper pool (core/pool.c) under
 * back-to-back jobs: jobs that follow each other while a helper still
 * watches for the next one (its bounded spin), and after it went to sleep;
 * two callers on one pool; may_help switching while helpers watch; a stop
 * in the middle of a job; freeing the pool while a helper watches. Every
 * piece runs exactly once and results, reduced in piece order, are the
 * same bits with and without helpers. Run under ThreadSanitizer by
 * `make tsan` (its name has "concurrency").
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "core/attn.h"
#include "core/pool.h"
#include "core/stop.h"
#include "tests/harness.h"

#define MAX_PIECES 40

struct count_job {
    atomic_int hits[MAX_PIECES];
};

static void count_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    struct count_job *j = arg;
    atomic_fetch_add(&j->hits[piece], 1);
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void spin_us(long us)
{
    uint64_t until = attn_now_ns() + (uint64_t)us * 1000;
    while (attn_now_ns() < until)
        ;
}

/* The caller's gap before job i: none, a short computation (the helper
 * still watches), or a sleep past the watch (it sleeps; the job wakes it). */
static void gap(uint64_t *rng)
{
    switch (t_rng_next(rng) % 4) {
    case 0:
        break;
    case 1:
        spin_us((long)(t_rng_next(rng) % 20));
        break;
    case 2:
        spin_us(40 + (long)(t_rng_next(rng) % 30));
        break;
    default:
        sleep_us(60 + (long)(t_rng_next(rng) % 200));
        break;
    }
}

/* Runs `jobs` jobs of 1..MAX_PIECES pieces with random gaps on pool;
 * returns how many pieces did not run exactly once. */
static int count_jobs(struct attn_pool *pool, int jobs, uint64_t seed)
{
    uint64_t rng = seed;
    int bad = 0;
    for (int i = 0; i < jobs; i++) {
        gap(&rng);
        size_t pieces = 1 + (size_t)(t_rng_next(&rng) % MAX_PIECES);
        struct count_job j;
        for (size_t k = 0; k < MAX_PIECES; k++)
            atomic_init(&j.hits[k], 0);
        bad += !attn_pool_run(pool, count_piece, &j, pieces, NULL);
        for (size_t k = 0; k < MAX_PIECES; k++)
            bad += atomic_load(&j.hits[k]) != (k < pieces);
    }
    return bad;
}

/* Back-to-back jobs, with 1, 2 and 3 helpers, through the watch and through
 * the sleep: every piece exactly once, every job reports all ran. */
TEST(back_to_back_jobs_run_every_piece_once)
{
    for (size_t h = 1; h <= 3; h++) {
        struct attn_pool *pool = attn_pool_new(h, NULL, NULL);
        CHECK(pool != NULL);
        if (!pool)
            return;
        CHECK_EQ_INT(count_jobs(pool, 300, 0x1234 + h), 0);
        attn_pool_free(pool);
    }
}

/* Piece results reduced in piece order: the same bits on the pool, with
 * helpers joining at any point, as on the calling thread alone. */
struct sum_job {
    const float *x;
    size_t n, per;                  /* values, values per piece */
    double part[MAX_PIECES];
};

static void sum_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    struct sum_job *j = arg;
    size_t b = piece * j->per, e = b + j->per < j->n ? b + j->per : j->n;
    float s = 0;
    for (size_t i = b; i < e; i++)
        s += j->x[i] * j->x[i];
    j->part[piece] = s;
}

static double sum_run(struct attn_pool *pool, struct sum_job *j, size_t pieces)
{
    attn_pool_run(pool, sum_piece, j, pieces, NULL);
    double s = 0;
    for (size_t i = 0; i < pieces; i++)
        s += j->part[i];
    return s;
}

TEST(piece_order_reduction_same_bits)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    CHECK(pool != NULL);
    size_t n = 40000;
    float *x = malloc(n * sizeof *x);
    CHECK(x != NULL);
    if (!pool || !x)
        return;
    uint64_t rng = 99;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(t_rng_next(&rng) >> 11) / 9007199254740992.0 - 0.5);
    int bad = 0;
    for (int r = 0; r < 200; r++) {
        gap(&rng);
        size_t pieces = 2 + (size_t)(t_rng_next(&rng) % (MAX_PIECES - 1));
        struct sum_job a = {x, n, (n + pieces - 1) / pieces, {0}}, b = a;
        double with = sum_run(pool, &a, pieces), alone = sum_run(NULL, &b, pieces);
        bad += memcmp(&with, &alone, sizeof with) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    free(x);
    attn_pool_free(pool);
}

/* Two callers publish back to back on one pool (as two server workers do):
 * one runs alone while the other owns the pool; nothing is lost. */
struct caller {
    struct attn_pool *pool;
    uint64_t seed;
    int bad;
};

static void *caller_main(void *p)
{
    struct caller *c = p;
    c->bad = count_jobs(c->pool, 200, c->seed);
    return NULL;
}

TEST(two_callers_back_to_back)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    CHECK(pool != NULL);
    if (!pool)
        return;
    struct caller c[2] = {{pool, 7, 0}, {pool, 8, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, caller_main, &c[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(c[0].bad + c[1].bad, 0);
    attn_pool_free(pool);
}

/* may_help turns on and off from another thread while helpers watch for
 * the next job and inside jobs: helpers step back, the caller finishes. */
static atomic_bool helping;

static bool may_help_flag(void *arg)
{
    (void)arg;
    return atomic_load(&helping);
}

struct toggler {
    atomic_bool done;
};

static void *toggler_main(void *p)
{
    struct toggler *t = p;
    uint64_t rng = 5;
    while (!atomic_load(&t->done)) {
        atomic_store(&helping, !atomic_load(&helping));
        spin_us((long)(t_rng_next(&rng) % 50));
    }
    return NULL;
}

TEST(may_help_switching_while_watching)
{
    atomic_store(&helping, true);
    struct attn_pool *pool = attn_pool_new(2, may_help_flag, NULL);
    CHECK(pool != NULL);
    if (!pool)
        return;
    struct toggler t;
    atomic_init(&t.done, false);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, toggler_main, &t) == 0);
    CHECK_EQ_INT(count_jobs(pool, 300, 11), 0);
    atomic_store(&t.done, true);
    pthread_join(th, NULL);
    attn_pool_free(pool);
}

/* A stop that comes due in the middle of a job: the call says so and skips
 * the rest; the next job, without a stop, runs every piece. Piece 3 sets the
 * stop and every later piece waits for it before it returns, so a thread
 * can run at most one piece past the stop whatever the scheduler does (on a
 * slow emulator another thread could otherwise claim and finish every
 * remaining piece before piece 3's store, and the job would rightly report
 * nothing skipped). */
struct stop_job {
    atomic_bool *cancel;
    atomic_int ran;
};

static void stop_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    struct stop_job *j = arg;
    if (piece == 3)
        atomic_store(j->cancel, true);
    while (piece > 3 && !atomic_load(j->cancel))
        sched_yield();
    atomic_fetch_add(&j->ran, 1);
}

TEST(stop_mid_job_then_next_job_whole)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    CHECK(pool && ws);
    if (!pool || !ws)
        return;
    uint64_t rng = 3;
    for (int r = 0; r < 100; r++) {
        atomic_bool cancel;
        atomic_init(&cancel, false);
        struct attn_stop st = {.cancel = &cancel};
        attn_ws_set_stop(ws, &st);
        struct stop_job j = {&cancel, 0};
        gap(&rng);
        CHECK(!attn_pool_run(pool, stop_piece, &j, 30, ws));
        CHECK(atomic_load(&j.ran) < 30);
        attn_ws_set_stop(ws, NULL);
        struct count_job c;
        for (size_t k = 0; k < MAX_PIECES; k++)
            atomic_init(&c.hits[k], 0);
        CHECK(attn_pool_run(pool, count_piece, &c, 30, ws));
        for (size_t k = 0; k < 30; k++)
            CHECK_EQ_INT(atomic_load(&c.hits[k]), 1);
    }
    attn_ws_free(ws);
    attn_pool_free(pool);
}

/* A pool freed right after a job, while its helpers still watch for the
 * next one (and freed before any job): the helpers leave, nothing leaks. */
TEST(free_while_helpers_watch)
{
    uint64_t rng = 17;
    for (int r = 0; r < 60; r++) {
        struct attn_pool *pool = attn_pool_new(1 + (size_t)(r % 3), NULL, NULL);
        CHECK(pool != NULL);
        if (!pool)
            return;
        if (r % 4)
            CHECK_EQ_INT(count_jobs(pool, 1 + r % 5, t_rng_next(&rng)), 0);
        attn_pool_free(pool);
    }
}

int main(void)
{
    RUN(back_to_back_jobs_run_every_piece_once);
    RUN(piece_order_reduction_same_bits);
    RUN(two_callers_back_to_back);
    RUN(may_help_switching_while_watching);
    RUN(stop_mid_job_then_next_job_whole);
    RUN(free_while_helpers_watch);
    TEST_MAIN_END();
}
