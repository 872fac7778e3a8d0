/*
 * tests/bench/bench_pool.c — how promptly the core's helper pool (attn_pool,
 * one helper: 2 cores) joins a job, and what its helper costs while idle
 * (a benchmark, not a test; detail rows only).
 *
 * Join latency: a job of 2 pieces, each of which records when it started
 * and then waits (up to WAIT_US) until the other piece has started too, so
 * the publishing thread cannot take both while the helper is on its way.
 * The latency is the helper's first piece start minus the time just before
 * attn_pool_run; a job whose 2 pieces ran on the calling thread counts as
 * "not joined within WAIT_US". Jobs follow each other after a gap the
 * caller spends computing (0, 20, 100 µs: consecutive decode steps) or
 * sleeping (2 ms: an idle server between requests).
 *
 * Idle cost: the CPU time the helper spends per job beyond the job's own
 * pieces when jobs come 2 ms apart with the caller asleep in between (the
 * process's CPU time minus the calling thread's, per job, minus the
 * helper's piece time). A helper that spins after a job for a bounded time
 * shows that bound here; one that sleeps at once shows a few µs.
 *
 * Split speed-up: jobs of equal pieces of arithmetic (no memory traffic,
 * so the machine's memory bandwidth does not enter), shaped like decode
 * steps (16 pieces of ~25 µs, 8 of ~100 µs), run back to back on 2 cores
 * (the pool) and on the calling thread alone, samples interleaved; the
 * ratio 1 thread / 2 cores is the speed-up of the split (at best 2.0).
 *
 * usage: bench_pool [jobs per row, default 400]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "tests/bench/bench_util.h"

#define WAIT_US 1000.0

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static double cpu_us(clockid_t id)
{
    return bench_clock_s(id) * 1e6;
}

static _Thread_local int is_caller;

struct join_job {
    atomic_int started;             /* pieces begun */
    double start[2];                /* µs, by piece */
    int by_caller[2];
    double helper_cpu;              /* µs of thread CPU inside the helper's pieces */
};

static void join_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    struct join_job *j = arg;
    double c0 = is_caller ? 0 : cpu_us(CLOCK_THREAD_CPUTIME_ID);
    j->start[piece] = mono_us();
    j->by_caller[piece] = is_caller;
    atomic_fetch_add(&j->started, 1);
    double until = j->start[piece] + WAIT_US;
    while (atomic_load(&j->started) < 2 && mono_us() < until)
        ;
    if (!is_caller)
        j->helper_cpu += cpu_us(CLOCK_THREAD_CPUTIME_ID) - c0;
}

static void spin_for(double us)
{
    double until = mono_us() + us;
    while (mono_us() < until)
        ;
}

static void sleep_for(double us)
{
    struct timespec ts = {0, (long)(us * 1e3)};
    nanosleep(&ts, NULL);
}

/* One row: `jobs` jobs `gap` µs apart (spent spinning, or asleep). */
static void join_row(struct attn_pool *pool, int jobs, double gap, bool asleep)
{
    double *lat = malloc((size_t)jobs * sizeof *lat);
    int late = 0, n = 0;
    double p0 = cpu_us(CLOCK_PROCESS_CPUTIME_ID), t0 = cpu_us(CLOCK_THREAD_CPUTIME_ID);
    double helper_pieces = 0;
    for (int i = 0; i < jobs; i++) {
        if (asleep)
            sleep_for(gap);
        else
            spin_for(gap);
        struct join_job j = {.started = 0};
        double pub = mono_us();
        attn_pool_run(pool, join_piece, &j, 2, NULL);
        helper_pieces += j.helper_cpu;
        int h = !j.by_caller[0] ? 0 : !j.by_caller[1] ? 1 : -1;
        if (h < 0)
            late++;
        else
            lat[n++] = j.start[h] - pub;
    }
    double helper_cpu = (cpu_us(CLOCK_PROCESS_CPUTIME_ID) - p0) -
                        (cpu_us(CLOCK_THREAD_CPUTIME_ID) - t0) - helper_pieces;
    qsort(lat, (size_t)n, sizeof *lat, bench_cmp_double);
    char name[64];
    snprintf(name, sizeof name, "gap %4.0f us %s", gap, asleep ? "asleep" : "computing");
    if (n)
        printf("  %-26s join median %7.1f us  p90 %7.1f us  not joined in %.0f us: %3d of %d"
               "  helper idle CPU %6.1f us/job\n",
               name, lat[n / 2], lat[n * 9 / 10], WAIT_US, late, jobs, helper_cpu / jobs);
    else
        printf("  %-26s never joined in %.0f us (%d jobs)  helper idle CPU %6.1f us/job\n", name,
               WAIT_US, jobs, helper_cpu / jobs);
    free(lat);
}

/* ---- split speed-up on pieces of arithmetic ----------------------------- */

static volatile double arith_sink;
static long iters_per_us = 1;

static void arith(long iters)
{
    double x = 1.0, y = 0.5;
    for (long i = 0; i < iters; i++) {
        x = x * 0.999999 + 1e-7;
        y = y * 0.999998 + 2e-7;
    }
    arith_sink = x + y;
}

struct arith_job {
    long iters;                     /* per piece */
};

static void arith_piece(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)piece;
    (void)ws;
    arith(((struct arith_job *)arg)->iters);
}

static void calibrate(void)
{
    long n = 100000;
    double t0 = mono_us();
    arith(n);
    double us = mono_us() - t0;
    iters_per_us = (long)((double)n / (us > 1 ? us : 1)) + 1;
}

/* Median µs per job of `pieces` pieces of `piece_us`, on the pool and alone. */
static void split_row(struct attn_pool *pool, size_t pieces, double piece_us, int reps)
{
    struct arith_job j = {(long)(piece_us * (double)iters_per_us)};
    int calls = (int)(20000.0 / (piece_us * (double)pieces)) + 1;   /* ~20 ms a sample */
    double *s[2];
    s[0] = malloc((size_t)reps * sizeof(double));
    s[1] = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++)
        for (int w = 0; w < 2; w++) {
            double t0 = mono_us();
            for (int c = 0; c < calls; c++)
                attn_pool_run(w ? NULL : pool, arith_piece, &j, pieces, NULL);
            s[w][r] = (mono_us() - t0) / calls;
        }
    qsort(s[0], (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(s[1], (size_t)reps, sizeof(double), bench_cmp_double);
    double two = s[0][reps / 2], one = s[1][reps / 2];
    printf("  %2zu pieces of %5.0f us back to back: 2 cores %7.1f us, 1 thread %7.1f us a job:"
           " speed-up %.2f\n", pieces, piece_us, two, one, one / two);
    free(s[0]);
    free(s[1]);
}

int main(int argc, char **argv)
{
    long jobs = argc > 1 ? strtol(argv[1], NULL, 10) : 400;
    if (jobs < 10 || jobs > 100000) {
        fprintf(stderr, "usage: bench_pool [jobs 10..100000]\n");
        return 2;
    }
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    if (!pool) {
        fprintf(stderr, "bench_pool: no helper thread\n");
        return 1;
    }
    is_caller = 1;
    printf("helper pool (1 helper): join latency after publishing, %ld jobs a row\n", jobs);
    static const double gaps[] = {0, 20, 100};
    for (size_t g = 0; g < sizeof gaps / sizeof *gaps; g++)
        join_row(pool, (int)jobs, gaps[g], false);
    join_row(pool, (int)jobs / 4 + 1, 2000, true);
    calibrate();
    printf("split speed-up, pieces of arithmetic, 15 interleaved samples (median)\n");
    split_row(pool, 16, 25, 15);
    split_row(pool, 8, 100, 15);
    attn_pool_free(pool);
    return 0;
}
