/*
 * tests/bench/bench_core.c — the attention core next to the machine's limits,
 * measured in the same process (a benchmark, not a test).
 *
 * Rows (float32, one thread, as each server worker runs):
 *   prefill n=L=2048 d=128, output only      GFLOP/s vs OpenBLAS sgemm
 *   prefill n=L=2048 d=128, weights + output GFLOP/s vs sgemm
 *   prefill n=L=1024 d=64,  output only      ms and GFLOP/s vs sgemm
 *   decode  L=4096 / 32768 d=128, KV cold    GB/s vs a plain read loop
 * "sgemm" is a square 2048 cblas_sgemm; "read" streams a 256 MiB array. The
 * decode KV is cold: the pass rotates through enough caches to exceed
 * 128 MiB (4× L3). Attention FLOPs are 4·n·L·d (the two products); decode
 * bytes are the K and V rows read, 2·L·d·4. Each figure is the median of
 * BENCH_REPS (default 5) samples of at least 20 ms each.
 *
 * usage: bench_core [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "core/attn.h"

static int reps = 5;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of fn(arg): median over reps samples of >= 20 ms. */
static double time_median(void (*fn)(void *), void *arg)
{
    fn(arg);   /* warm-up */
    double t0 = now_s();
    fn(arg);
    double one = now_s() - t0;
    int calls = (int)(0.02 / (one > 1e-9 ? one : 1e-9)) + 1;
    double *t = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        for (int c = 0; c < calls; c++)
            fn(arg);
        t[r] = (now_s() - t0) / calls;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    return med;
}

static float *rand_floats(size_t count, unsigned seed)
{
    float *a = aligned_alloc(64, (count * sizeof(float) + 63) & ~(size_t)63);
    if (!a) {
        fprintf(stderr, "bench_core: out of memory\n");
        exit(1);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull ^ seed;
    for (size_t i = 0; i < count; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return a;
}

/* ---- limits ----------------------------------------------------------- */

struct gemm_arg {
    int n;
    float *a, *b, *c;
};

static void run_sgemm(void *p)
{
    struct gemm_arg *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1, g->a, g->n,
                g->b, g->n, 0, g->c, g->n);
}

struct read_arg {
    const float *x;
    size_t n;
    float sink;
};

/* Plain read loop with 16 partial sums (vectorised without -ffast-math). */
static void run_read(void *p)
{
    struct read_arg *r = p;
    float acc[16] = {0};
    for (size_t i = 0; i + 16 <= r->n; i += 16)
        for (int u = 0; u < 16; u++)
            acc[u] += r->x[i + u];
    float s = 0;
    for (int u = 0; u < 16; u++)
        s += acc[u];
    r->sink += s;
}

/* ---- the core --------------------------------------------------------- */

struct prefill_arg {
    struct attn_request req;
    struct attn_inputs in;
    struct attn_result out;
    struct attn_ws *ws;
};

static void run_prefill(void *p)
{
    struct prefill_arg *a = p;
    if (attn_forward(&a->req, &a->in, &a->out, a->ws) != CORE_OK) {
        fprintf(stderr, "bench_core: attn_forward failed\n");
        exit(1);
    }
}

/* GFLOP/s of a prefill f32 pass with one head. */
static double bench_prefill(size_t n, size_t L, size_t d, unsigned outputs, double *ms)
{
    struct prefill_arg a;
    memset(&a, 0, sizeof a);
    a.req.shape = (struct attn_shape){1, 1, n, L, d, d};
    a.req.params.dtype = ATTN_F32;
    a.req.params.scale = attn_default_scale(d);
    a.req.outputs = outputs;
    float *q = rand_floats(n * d, 1), *k = rand_floats(L * d, 2), *v = rand_floats(L * d, 3);
    float *w = (outputs & ATTN_OUT_WEIGHTS) ? rand_floats(n * L, 4) : NULL;
    float *o = rand_floats(n * d, 5);
    a.in = (struct attn_inputs){q, k, v, NULL, NULL, NULL, 1, 1, 1};
    a.out = (struct attn_result){NULL, w, o, NULL, 0};
    a.ws = attn_ws_new();
    double t = time_median(run_prefill, &a);
    attn_ws_free(a.ws);
    free(q);
    free(k);
    free(v);
    free(w);
    free(o);
    *ms = t * 1e3;
    return 4.0 * (double)n * (double)L * (double)d / t / 1e9;
}

struct decode_arg {
    struct attn_request req;
    struct attn_inputs in;
    struct attn_result out;
    struct attn_ws *ws;
    float **k, **v;
    int ncache, next;
};

static void run_decode(void *p)
{
    struct decode_arg *a = p;
    int c = a->next;
    a->next = (a->next + 1) % a->ncache;
    const void *kp[1] = {a->k[c]}, *vp[1] = {a->v[c]};
    struct attn_kv_view kv = {kp, vp};
    if (attn_forward_kv(&a->req, &a->in, &kv, &a->out, a->ws) != CORE_OK) {
        fprintf(stderr, "bench_core: attn_forward_kv failed\n");
        exit(1);
    }
}

/* GB/s of K+V read by a decode step (n=1) against cold prepared caches. */
static double bench_decode(size_t L, size_t d, double *us)
{
    struct decode_arg a;
    memset(&a, 0, sizeof a);
    size_t kvbytes = 2 * L * d * sizeof(float);
    a.ncache = (int)(((size_t)128 << 20) / kvbytes);
    if (a.ncache < 2)
        a.ncache = 2;
    a.k = calloc((size_t)a.ncache, sizeof(float *));
    a.v = calloc((size_t)a.ncache, sizeof(float *));
    for (int c = 0; c < a.ncache; c++) {
        a.k[c] = rand_floats(L * d, 10u + (unsigned)c);
        a.v[c] = rand_floats(L * d, 1000u + (unsigned)c);
    }
    a.req.shape = (struct attn_shape){1, 1, 1, L, d, d};
    a.req.params.dtype = ATTN_F32;
    a.req.params.scale = attn_default_scale(d);
    a.req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    a.req.outputs = ATTN_OUT_OUTPUT;
    float *q = rand_floats(d, 7), *o = rand_floats(d, 8);
    a.in = (struct attn_inputs){q, NULL, NULL, NULL, NULL, NULL, 1, 1, 1};
    a.out = (struct attn_result){NULL, NULL, o, NULL, 0};
    a.ws = attn_ws_new();
    double t = time_median(run_decode, &a);
    attn_ws_free(a.ws);
    for (int c = 0; c < a.ncache; c++) {
        free(a.k[c]);
        free(a.v[c]);
    }
    free(a.k);
    free(a.v);
    free(q);
    free(o);
    *us = t * 1e6;
    return (double)kvbytes / t / 1e9;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        char *end;
        long r = strtol(argv[1], &end, 10);
        if (*end || r < 1 || r > 101) {
            fprintf(stderr, "usage: bench_core [reps 1..101]\n");
            return 2;
        }
        reps = (int)r;
    }
    attn_blas_init(1);

    struct gemm_arg g = {2048, rand_floats(2048 * 2048, 20), rand_floats(2048 * 2048, 21),
                         rand_floats(2048 * 2048, 22)};
    double sgemm = 2.0 * 2048.0 * 2048.0 * 2048.0 / time_median(run_sgemm, &g) / 1e9;
    free(g.a);
    free(g.b);
    free(g.c);
    struct read_arg rd = {rand_floats((size_t)64 << 20, 23), (size_t)64 << 20, 0};
    double readbw = (double)rd.n * sizeof(float) / time_median(run_read, &rd) / 1e9;
    free((void *)rd.x);

    printf("threads=1 reps=%d  limits: sgemm(2048) %.1f GFLOP/s, read %.1f GB/s\n", reps,
           sgemm, readbw);
    printf("%-40s %10s %12s %12s %8s\n", "case (float32)", "time", "attnd", "limit", "ratio");
    double ms, us;
    double p1 = bench_prefill(2048, 2048, 128, ATTN_OUT_OUTPUT, &ms);
    printf("%-40s %7.2f ms %7.1f GF/s %7.1f GF/s %8.2f\n", "prefill n=L=2048 d=128 output", ms,
           p1, sgemm, p1 / sgemm);
    double p2 = bench_prefill(2048, 2048, 128, ATTN_OUT_OUTPUT | ATTN_OUT_WEIGHTS, &ms);
    printf("%-40s %7.2f ms %7.1f GF/s %7.1f GF/s %8.2f\n", "prefill n=L=2048 d=128 weights+output",
           ms, p2, sgemm, p2 / sgemm);
    double p3 = bench_prefill(1024, 1024, 64, ATTN_OUT_OUTPUT, &ms);
    printf("%-40s %7.2f ms %7.1f GF/s %7.1f GF/s %8.2f\n", "prefill n=L=1024 d=64 output", ms,
           p3, sgemm, p3 / sgemm);
    double d1 = bench_decode(4096, 128, &us);
    printf("%-40s %7.1f us %7.1f GB/s %7.1f GB/s %8.2f\n", "decode L=4096 d=128 cold", us, d1,
           readbw, d1 / readbw);
    double d2 = bench_decode(32768, 128, &us);
    printf("%-40s %7.1f us %7.1f GB/s %7.1f GB/s %8.2f\n", "decode L=32768 d=128 cold", us, d2,
           readbw, d2 / readbw);
    return 0;
}
