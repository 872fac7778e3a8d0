/*
 * tests/harness.h — the smallest test harness that does the job.
 *
 * TEST(name) defines a test; RUN(name) runs it; a test fails if any CHECK in
 * it fails (the failing expression and line are printed). TEST_MAIN_END()
 * prints the closing line CI reads, "N passed, N failed", and returns the
 * exit code. t_rng_next() is the deterministic random number generator
 * the tests share. Header-only so each test file is one self-contained
 * program. TEST_VERBOSE=1 prints each test passed with its wall time, to
 * find the slow ones under memcheck and qemu.
 */
#ifndef ATTND_TEST_HARNESS_H
#define ATTND_TEST_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
 * generators"): the next number of the sequence in *state (never 0), so a
 * test's data is the same on every run and machine. */
static inline uint64_t t_rng_next(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1Dull;
}

/* ATTND_TEST_QUICK=1, which make valgrind and make test-arm64 set:
 * memcheck and qemu-user run the code tens of times slower, and under qemu
 * the references' long double is software binary128. t_cases(full): the
 * cases a randomized or many-case test runs, full or a tenth (at least one)
 * when quick. */
static inline int t_quick(void)
{
    const char *q = getenv("ATTND_TEST_QUICK");
    return q && strcmp(q, "1") == 0;
}

static inline int t_cases(int full)
{
    return t_quick() ? (full + 9) / 10 : full;
}

static int th_passed, th_failed, th_cur_failed;
static const char *th_cur_name;

#define TEST(name) static void name(void)

/* Seconds on the monotonic clock, for TEST_VERBOSE's times. */
static inline double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define RUN(name)                                                          \
    do {                                                                   \
        th_cur_failed = 0;                                                 \
        th_cur_name = #name;                                               \
        double th_t0 = th_now();                                           \
        name();                                                            \
        if (th_cur_failed) {                                               \
            th_failed++;                                                   \
            printf("FAIL %s\n", #name);                                    \
        } else {                                                           \
            th_passed++;                                                   \
            if (getenv("TEST_VERBOSE"))                                    \
                printf("ok   %s (%.2f s)\n", #name, th_now() - th_t0);    \
        }                                                                  \
    } while (0)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            th_cur_failed = 1;                                             \
            printf("  %s:%d: %s: CHECK(%s)\n", __FILE__, __LINE__,         \
                   th_cur_name, #cond);                                    \
        }                                                                  \
    } while (0)

/* |a - b| <= tol, with a and b printed on failure. */
#define CHECK_NEAR(a, b, tol)                                              \
    do {                                                                   \
        double th_a = (double)(a), th_b = (double)(b);                     \
        if (!(fabs(th_a - th_b) <= (tol))) {                               \
            th_cur_failed = 1;                                             \
            printf("  %s:%d: %s: %s = %.17g, %s = %.17g (tol %g)\n",       \
                   __FILE__, __LINE__, th_cur_name, #a, th_a, #b, th_b,    \
                   (double)(tol));                                         \
        }                                                                  \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                 \
    do {                                                                   \
        long long th_a = (long long)(a), th_b = (long long)(b);            \
        if (th_a != th_b) {                                                \
            th_cur_failed = 1;                                             \
            printf("  %s:%d: %s: %s = %lld, expected %lld\n", __FILE__,    \
                   __LINE__, th_cur_name, #a, th_a, th_b);                 \
        }                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                    \
    do {                                                                   \
        const char *th_a = (a), *th_b = (b);                               \
        if (!th_a || !th_b || strcmp(th_a, th_b) != 0) {                   \
            th_cur_failed = 1;                                             \
            printf("  %s:%d: %s: %s = \"%s\", expected \"%s\"\n",          \
                   __FILE__, __LINE__, th_cur_name, #a,                    \
                   th_a ? th_a : "(null)", th_b ? th_b : "(null)");        \
        }                                                                  \
    } while (0)

#define TEST_MAIN_END()                                                    \
    do {                                                                   \
        printf("%d passed, %d failed\n", th_passed, th_failed);            \
        return th_failed ? 1 : 0;                                          \
    } while (0)

/* Reflected bitwise CRC-32 with polynomial poly: 0xEDB88320 (IEEE, the
 * session files of versions 1 to 3) or 0x82F63B78 (Castagnoli, the journal
 * and version 4). Written apart from the production table and hardware
 * paths, as their reference. */
static inline uint32_t test_crc32_bitwise(uint32_t poly, const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (poly & (0u - (c & 1)));
    }
    return ~c;
}

#endif
