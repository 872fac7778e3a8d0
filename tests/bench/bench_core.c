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
 * BENCH_REPS (default 5) samples of at least 20 ms each, interleaved with
 * samples of its limit so both see the same load, timed in thread CPU time
 * (the machine is shared: time spent descheduled is not ours).
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
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of fn(arg) over one sample of >= 20 ms. */
static double sample(void (*fn)(void *), void *arg, int calls)
{
    double t0 = now_s();
    for (int c = 0; c < calls; c++)
        fn(arg);
    return (now_s() - t0) / calls;
}

static double median(double *t, int count)
{
    qsort(t, (size_t)count, sizeof(double), cmp_double);
    return count % 2 ? t[count / 2] : 0.5 * (t[count / 2 - 1] + t[count / 2]);
}

/* Fastest samples of the last time_pair (a, b): the "best" column, less
 * sensitive to other load than the medians. */
static double best_a, best_b;

/* Medians (seconds per call) of fa(a) and fb(b), their samples interleaved
 * (a b a b ...) so both see the same machine load. */
static void time_pair(void (*fa)(void *), void *a, void (*fb)(void *), void *b,
                      double *ta, double *tb)
{
    fa(a);   /* warm-up, and a first estimate of the call time */
    fb(b);
    double oa = sample(fa, a, 1), ob = sample(fb, b, 1);
    int ca = (int)(0.02 / (oa > 1e-9 ? oa : 1e-9)) + 1;
    int cb = (int)(0.02 / (ob > 1e-9 ? ob : 1e-9)) + 1;
    double *sa = malloc((size_t)reps * sizeof(double));
    double *sb = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        sa[r] = sample(fa, a, ca);
        sb[r] = sample(fb, b, cb);
    }
    *ta = median(sa, reps);   /* sorts: [0] is then the fastest */
    *tb = median(sb, reps);
    best_a = sa[0];
    best_b = sb[0];
    free(sa);
    free(sb);
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

/* The limits, shared by every row. */
static struct gemm_arg lim_gemm;
static struct read_arg lim_read;

/* Prints one row: the core's rate (work_core per second at median time t),
 * the limit's (work_limit at median tl), their ratio, and the ratio of the
 * fastest samples (best_a, best_b from the last time_pair). */
static void row(const char *name, double t, double work_core, double tl, double work_limit,
                const char *unit)
{
    double core = work_core / t / 1e9, limit = work_limit / tl / 1e9;
    double best = (work_core / best_a) / (work_limit / best_b);
    printf("%-40s %8.3f ms %7.1f %-4s %7.1f %-4s %6.2f %6.2f\n", name, t * 1e3, core, unit,
           limit, unit, core / limit, best);
}

/* A prefill f32 pass with one head, in GFLOP/s next to sgemm. */
static void bench_prefill(const char *name, size_t n, size_t L, size_t d, unsigned outputs)
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
    double t, tg;
    time_pair(run_prefill, &a, run_sgemm, &lim_gemm, &t, &tg);
    attn_ws_free(a.ws);
    free(q);
    free(k);
    free(v);
    free(w);
    free(o);
    double gn = lim_gemm.n;
    row(name, t, 4.0 * (double)n * (double)L * (double)d, tg, 2.0 * gn * gn * gn, "GF/s");
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

/* A decode step (n=1) against cold prepared caches, in GB/s of K+V read
 * next to the plain read loop. */
static void bench_decode(const char *name, size_t L, size_t d)
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
    double t, tr;
    time_pair(run_decode, &a, run_read, &lim_read, &t, &tr);
    attn_ws_free(a.ws);
    for (int c = 0; c < a.ncache; c++) {
        free(a.k[c]);
        free(a.v[c]);
    }
    free(a.k);
    free(a.v);
    free(q);
    free(o);
    row(name, t, (double)kvbytes, tr, (double)lim_read.n * sizeof(float), "GB/s");
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
    lim_gemm = (struct gemm_arg){2048, rand_floats(2048 * 2048, 20),
                                 rand_floats(2048 * 2048, 21), rand_floats(2048 * 2048, 22)};
    lim_read = (struct read_arg){rand_floats((size_t)64 << 20, 23), (size_t)64 << 20, 0};

    printf("float32, 1 thread, %d interleaved samples per figure (median, thread CPU time)\n",
           reps);
    printf("limits: sgemm = square 2048 cblas_sgemm; read = plain loop over 256 MiB\n");
    printf("ratio = median/median; best = fastest sample/fastest sample\n");
    printf("%-40s %11s %12s %12s %6s %6s\n", "case", "time", "attnd", "limit", "ratio",
           "best");
    bench_prefill("prefill n=L=2048 d=128, output", 2048, 2048, 128, ATTN_OUT_OUTPUT);
    bench_prefill("prefill n=L=2048 d=128, weights+output", 2048, 2048, 128,
                  ATTN_OUT_OUTPUT | ATTN_OUT_WEIGHTS);
    bench_prefill("prefill n=L=1024 d=64, output", 1024, 1024, 64, ATTN_OUT_OUTPUT);
    bench_decode("decode L=4096 d=128, KV cold", 4096, 128);
    bench_decode("decode L=32768 d=128, KV cold", 32768, 128);
    free(lim_gemm.a);
    free(lim_gemm.b);
    free(lim_gemm.c);
    free((void *)lim_read.x);
    return 0;
}
