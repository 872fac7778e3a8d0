/*
 * tests/bench/bench_util.h — the small helpers every benchmark program
 * shares: a clock (monotonic or CPU time) in seconds and the median of a
 * sample.
 */
#ifndef ATTND_BENCH_UTIL_H
#define ATTND_BENCH_UTIL_H

#include <stddef.h>
#include <stdlib.h>
#include <time.h>

/* Clock id (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, ...) in seconds. */
static inline double bench_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double bench_mono_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts t[count] in place. */
static inline double bench_median(double *t, size_t count)
{
    qsort(t, count, sizeof *t, bench_cmp_double);
    return count % 2 ? t[count / 2] : 0.5 * (t[count / 2 - 1] + t[count / 2]);
}

#endif
