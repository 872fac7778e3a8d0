/*
 * tests/unit/verify_testlib.h — what the core/verify tests share: finding a
 * check and its data in a report, running a verify (its report printed
 * with TEST_VERBOSE set), and a caller's deterministic pseudo-random input.
 */
#ifndef ATTND_TESTS_VERIFY_TESTLIB_H
#define ATTND_TESTS_VERIFY_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/verify.h"

static inline const struct verify_check *find(const struct verify_report *r,
                                              const char *name)
{
    for (size_t i = 0; i < r->n_checks; i++)
        if (strcmp(r->checks[i].name, name) == 0)
            return &r->checks[i];
    return NULL;
}

static inline const struct verify_array *arr(const struct verify_check *ck,
                                             const char *name)
{
    for (size_t i = 0; ck && i < ck->n_data; i++)
        if (strcmp(ck->data[i].name, name) == 0)
            return &ck->data[i];
    return NULL;
}

static inline void dump(const struct verify_report *r)
{
    if (!getenv("TEST_VERBOSE"))
        return;
    for (size_t i = 0; i < r->n_checks; i++) {
        const struct verify_check *ck = &r->checks[i];
        printf("  %2d %-30s app=%d pass=%d diff=%.3g  %s\n", ck->id, ck->name,
               ck->applicable, ck->passed, ck->max_abs_diff, ck->note);
    }
}

/* Run and expect success. */
static inline enum core_status run(const struct verify_input *in,
                                   struct verify_report *r)
{
    enum core_status st = verify_run(in, r);
    dump(r);
    return st;
}

/* A deterministic pseudo-random fill in [-1, 1). */
static inline void fill(double *x, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        x[i] = ((*seed >> 8) & 0xffff) / 32768.0 - 1.0;
    }
}

struct data {
    double q[4 * 16], k[6 * 16], v[6 * 3], bq[16], bk[16], bv[3];
};

static inline void caller_input(struct verify_input *in, struct data *d, size_t n,
                                size_t L, size_t dk, size_t dv)
{
    unsigned seed = 7;
    fill(d->q, n * dk, &seed);
    fill(d->k, L * dk, &seed);
    fill(d->v, L * dv, &seed);
    fill(d->bq, dk, &seed);
    fill(d->bk, dk, &seed);
    fill(d->bv, dv, &seed);
    memset(in, 0, sizeof *in);
    in->dtype = ATTN_F64;
    in->n = n;
    in->L = L;
    in->d_k = dk;
    in->d_v = dv;
    in->q = d->q;
    in->k = d->k;
    in->v = d->v;
    in->bias_q = d->bq;
    in->bias_k = d->bk;
    in->bias_v = d->bv;
}

/* A core that forgets the key bias. */
static inline enum core_status fwd_no_k_bias(const struct attn_request *r,
                                             const struct attn_inputs *in,
                                             struct attn_result *out, struct attn_ws *ws)
{
    struct attn_inputs x = *in;
    x.bias_k = NULL;
    return attn_forward(r, &x, out, ws);
}

#endif
