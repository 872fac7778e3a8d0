/*
 * tests/bench/bench_util.h — the small helpers every benchmark program
 * shares: a monotonic clock in seconds and the median of a sample.
 */
#ifndef ATTND_BENCH_UTIL_H
#define ATTND_BENCH_UTIL_H

#include <stddef.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
