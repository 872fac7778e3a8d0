/*
 * tests/bench/bench_core.c — the attention core next to the machine's limits
 * and its peers, measured in the same run (a benchmark, not a test).
 *
 * float32 throughout. "2 cores" is how the server runs one large request:
 * the worker plus the core's helper pool (attn_pool, one helper thread);
 * "1 worker" is the calling thread alone. Limits, interleaved sample by
 * sample with the core so both see the same machine load:
 *   sgemm 1T / 2T  square 2048 cblas_sgemm, OpenBLAS at 1 / 2 threads
 *   read 1T / 2T   a plain read loop over 256 MiB, prefetching ahead (2T: two
 *                  halves on the pool)
 *   read own       the narrow-cache rows' limit: the same loop over as many
 *                  bytes a call as one decode step of that cache, over the
 *                  same working set, on huge pages (struct step_read)
 *   sgemm shapes  the two products of the attention's own shapes (S = Q·Kᵀ,
 *                 [n][d]·[d][L], then O = S·V, [n][L]·[L][d]) by cblas_sgemm
 *                 at 2 threads: the rate the fused kernels are held to
 * The kernel rows run the prefill once per fused kernel this CPU has
 * (attn_kernel_set: avx512, avx2, then none, OpenBLAS's gemm loop) and name
 * the kernel on every row; the other rows use the widest (auto).
 * Peer: numpy's softmax(QKᵀ)V with 2 OpenBLAS threads (tests/bench/
 * peer_numpy.py, started by this program; BENCH_PEER=0 skips it).
 * Attention FLOPs are 4·n·L·d (the two products); decode bytes are the K and
 * V rows read, 2·L·d·4. KV is cold in decode rows: each call reads the next
 * of enough caches to exceed 128 MiB (4× L3). Every figure is the median of
 * BENCH_REPS (argv[1], default 5) samples of at least 20 ms each, wall-clock.
 *
 * Output: a human-readable table, then one BENCHROW line per goal (format in
 * tests/bench/run.sh's collector: name|limit|limit value|peer|peer value|
 * attnd|unit|ratio|goal|PASS or MISS) for issues 2, 4 and 9.
 *
 * usage: bench_core [reps]   (BENCH_KERNELS_ONLY=1: the kernel rows alone;
 *                              BENCH_PREFILL=NxLxD: one prefill's median ms;
 *                              with BENCH_PREFILL_SERVE=1 one pass per
 *                              line of stdin, each timed;
 *                              BENCH_TOP_K_ONLY=1: the top-k row alone;
 *                              BENCH_KV_DTYPES_ONLY=1: narrow-cache decode;
 *                              BENCH_HALF_ONLY=1: float16/bfloat16 prefill;
 *                              BENCH_DECODE_ONLY=1: float32 decode rows;
 *                              BENCH_MODELS_ONLY=1: issue 16's rows alone;
 *                              BENCH_MOVE_ONLY=1: session export/import
 *                              of 128 MiB vs a memcpy, issue 18)
 */
#include <stdio.h>
#include <stdlib.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include <cblas.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "core/half.h"
#include "core/kv.h"
#include "core/kv_slab.h"
#include "core/persist.h"
#include "core/pool.h"
#include "core/store.h"
#include "tests/bench/bench_util.h"

static int reps = 5;
static struct attn_pool *pool;      /* one helper: 2 cores */

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "bench_core: out of memory\n");
        exit(1);
    }
    return p;
}

static float *rand_floats(size_t count, unsigned seed)
{
    float *a = xalloc(count * sizeof(float));
    uint64_t s = 0x9e3779b97f4a7c15ull ^ seed;
    for (size_t i = 0; i < count; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return a;
}

/* ---- interleaved timing ----------------------------------------------- */

struct timed {
    void (*fn)(void *);
    void *arg;
    double med, best;               /* seconds per call */
};

/* Seconds per call over one sample of `calls` calls. */
static double sample(const struct timed *t, int calls)
{
    double t0 = bench_mono_s();
    for (int c = 0; c < calls; c++)
        t->fn(t->arg);
    return (bench_mono_s() - t0) / calls;
}

/* Medians of every t[i], samples interleaved (0 1 2 .. 0 1 2 ..). */
static void time_set(struct timed *t, int k)
{
    int calls[16];
    if (k > 16) {
        fprintf(stderr, "bench_core: time_set takes at most 16 figures\n");
        exit(1);
    }
    double *s = xalloc((size_t)(k * reps) * sizeof(double));
    for (int i = 0; i < k; i++) {
        t[i].fn(t[i].arg);          /* warm-up */
        double one = sample(&t[i], 1);
        calls[i] = (int)(0.02 / (one > 1e-9 ? one : 1e-9)) + 1;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < k; i++)
            s[i * reps + r] = sample(&t[i], calls[i]);
    for (int i = 0; i < k; i++) {
        t[i].med = bench_median(s + i * reps, reps);
        t[i].best = s[i * reps];
    }
    free(s);
}

/* ---- limits ----------------------------------------------------------- */

struct gemm_arg {
    int n, threads;
    float *a, *b, *c;
};

static void run_sgemm(void *p)
{
    struct gemm_arg *g = p;
    if (g->threads > 1)
        attn_blas_init(g->threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1, g->a, g->n,
                g->b, g->n, 0, g->c, g->n);
    if (g->threads > 1)
        attn_blas_init(1);
}

struct read_arg {
    const float *x;
    size_t n;
    float sink[2];
};

/* Plain read loop with 16 partial sums (vectorised without -ffast-math),
 * each cache line asked for 8 KiB ahead (prefetcht0) as the core's decode
 * loops do: without it this loop read ~10% slower than the decode itself,
 * so it was no limit. */
static float read_sum(const float *x, size_t n)
{
    float acc[16] = {0};
    for (size_t i = 0; i + 16 <= n; i += 16) {
        __builtin_prefetch(x + i + 2048, 0, 3);
        for (int u = 0; u < 16; u++)
            acc[u] += x[i + u];
    }
    float s = 0;
    for (int u = 0; u < 16; u++)
        s += acc[u];
    return s;
}

static void run_read1(void *p)
{
    struct read_arg *r = p;
    r->sink[0] += read_sum(r->x, r->n);
}

static void read_half(void *arg, size_t piece, struct attn_ws *ws)
{
    (void)ws;
    struct read_arg *r = arg;
    size_t h = r->n / 2;
    r->sink[piece] += read_sum(r->x + piece * h, h);
}

static void run_read2(void *p)
{
    attn_pool_run(pool, read_half, p, 2, NULL);
}

/* The read limit of a decode over one kind of cache: per call as many
 * bytes as one step of it reads, the next of as many such chunks as it has
 * caches (the same working set, so as much of it in the last-level cache
 * as theirs), on huge pages as the caches' slabs are, two halves on the
 * pool (pool NULL: the calling thread alone). The 256 MiB read above is on
 * 4 KiB pages: on the 2-core KVM guest of 2026-12-02 it read 11-12 GB/s
 * where a huge-page buffer read 17-19, below the decode's own rate. */
struct step_read {
    float *x;
    size_t n, chunks, next;         /* floats per call; chunks in turn */
    struct attn_pool *pool;
    float sink;
};

static void step_read_init(struct step_read *r, size_t bytes, size_t chunks,
                           struct attn_pool *p)
{
    size_t n = bytes / sizeof(float) / 32 * 32, all = n * chunks * sizeof(float);
    size_t huge = (size_t)2 << 20, al = (all + huge - 1) / huge * huge;
    *r = (struct step_read){aligned_alloc(huge, al), n, chunks, 0, p, 0};
    if (!r->x) {
        fprintf(stderr, "bench_core: out of memory\n");
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    madvise(r->x, al, MADV_HUGEPAGE);           /* a refusal leaves 4 KiB pages */
#endif
    for (size_t i = 0; i < n * chunks; i++)
        r->x[i] = (float)(i & 1023) * 0x1p-10f;
}

static void run_step_read(void *p)
{
    struct step_read *r = p;
    struct read_arg a = {r->x + r->next * r->n, r->n, {0, 0}};
    r->next = (r->next + 1) % r->chunks;
    if (r->pool) {
        attn_pool_run(r->pool, read_half, &a, 2, NULL);
    } else {
        read_half(&a, 0, NULL);
        read_half(&a, 1, NULL);
    }
    r->sink += a.sink[0] + a.sink[1];
}

static struct gemm_arg gemm1, gemm2;
static struct read_arg rd;

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

/* A one-head prefill pass; with_pool: on 2 cores. */
static void prefill_init(struct prefill_arg *a, size_t n, size_t L, size_t d, unsigned outputs,
                         bool with_pool)
{
    memset(a, 0, sizeof *a);
    a->req.shape = (struct attn_shape){.h = 1, .h_kv = 1, .n = n, .L = L, .d_k = d, .d_v = d};
    a->req.params.dtype = ATTN_F32;
    a->req.params.scale = attn_default_scale(d);
    a->req.outputs = outputs;
    float *w = (outputs & ATTN_OUT_WEIGHTS) ? rand_floats(n * L, 4) : NULL;
    a->in = (struct attn_inputs){rand_floats(n * d, 1), rand_floats(L * d, 2),
                                 rand_floats(L * d, 3), NULL, NULL, NULL, 1, 1, 1};
    a->out = (struct attn_result){NULL, w, rand_floats(n * d, 5), NULL, 0};
    a->ws = attn_ws_new();
    attn_ws_set_pool(a->ws, with_pool ? pool : NULL);
}

static void prefill_free(struct prefill_arg *a)
{
    attn_ws_free(a->ws);
    free((void *)a->in.q);
    free((void *)a->in.k);
    free((void *)a->in.v);
    free(a->out.weights);
    free(a->out.output);
}

/* BENCH_PREFILL_SERVE=1: one pass per line read from stdin, each printed
 * as "ms cpu_ms" (wall and all threads' CPU time) as soon as it is done,
 * until stdin ends. The process, its buffers and its helper stay between
 * passes, as a server's do between requests, so that a client can time an
 * in-process pass right next to each of its requests (tests/bench/
 * large_client.py): on a shared machine whose speed drifts over seconds,
 * only neighbouring figures compare. */
static void prefill_serve(struct prefill_arg *a)
{
    char line[64];
    run_prefill(a);                 /* warm-up: buffers and helper */
    while (fgets(line, sizeof line, stdin)) {
        double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = bench_mono_s();
        run_prefill(a);
        double wall = bench_mono_s() - t0;
        double cpu = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        printf("%.3f %.3f\n", wall * 1e3, cpu * 1e3);
        fflush(stdout);
    }
}

/* Decode (n = 1) over cold caches: plain prepared arrays (attn_forward_kv)
 * or session caches (kv_attend, the sessions service's entry). */
struct decode_arg {
    struct attn_request req;
    struct attn_inputs in;
    struct attn_result out;
    struct attn_ws *ws;
    float **k, **v;
    struct kv_cache **kv;           /* non-NULL: through kv_attend */
    int ncache, next;
};

static void run_decode(void *p)
{
    struct decode_arg *a = p;
    int c = a->next;
    a->next = (a->next + 1) % a->ncache;
    enum core_status st;
    if (a->kv) {
        st = kv_attend(a->kv[c], &a->req, &a->in, &a->out, a->ws);
    } else {
        const void *kp[1] = {a->k[c]}, *vp[1] = {a->v[c]};
        struct attn_kv_view view = {.k = kp, .v = vp};
        st = attn_forward_kv(&a->req, &a->in, &view, &a->out, a->ws);
    }
    if (st != CORE_OK) {
        fprintf(stderr, "bench_core: decode failed: %s\n", core_status_name(st));
        exit(1);
    }
}

static int cold_count(size_t L, size_t d)
{
    int nc = (int)(((size_t)128 << 20) / (2 * L * d * sizeof(float)));
    return nc < 2 ? 2 : nc;
}

/* Arrays shared by the two decode_arg of one shape (1 worker, 2 cores). */
static void decode_init(struct decode_arg *a, size_t L, size_t d, bool session,
                        const struct decode_arg *share)
{
    memset(a, 0, sizeof *a);
    a->ncache = cold_count(L, d);
    a->req.shape = (struct attn_shape){.h = 1, .h_kv = 1, .n = 1, .L = L, .d_k = d, .d_v = d};
    a->req.params.dtype = ATTN_F32;
    a->req.params.scale = attn_default_scale(d);
    a->req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    a->req.outputs = ATTN_OUT_OUTPUT;
    a->in = (struct attn_inputs){share ? share->in.q : rand_floats(d, 7), NULL, NULL,
                                 NULL, NULL, NULL, 1, 1, 1};
    a->out = (struct attn_result){NULL, NULL, rand_floats(d, 8), NULL, 0};
    a->ws = attn_ws_new();
    if (share) {
        a->k = share->k;
        a->v = share->v;
        a->kv = share->kv;
        return;
    }
    a->k = calloc((size_t)a->ncache, sizeof(float *));
    a->v = calloc((size_t)a->ncache, sizeof(float *));
    if (session)
        a->kv = calloc((size_t)a->ncache, sizeof *a->kv);
    for (int c = 0; c < a->ncache; c++) {
        a->k[c] = rand_floats(L * d, 10u + (unsigned)c);
        a->v[c] = rand_floats(L * d, 1000u + (unsigned)c);
        if (!session)
            continue;
        /* a session cache grown the way decoding grows it: many appends */
        a->kv[c] = kv_new(ATTN_F32, 1, d, d);
        struct attn_params p = a->req.params;
        size_t step = 64;
        for (size_t r = 0; a->kv[c] && r < L; r += step) {
            struct attn_inputs in = {NULL, a->k[c] + r * d, a->v[c] + r * d,
                                     NULL, NULL, NULL, 1, 1, 1};
            if (kv_append(a->kv[c], &p, &in, step) != CORE_OK)
                break;
        }
        if (!a->kv[c] || kv_length(a->kv[c]) != L) {
            fprintf(stderr, "bench_core: building a session cache failed\n");
            exit(1);
        }
        free(a->k[c]);
        free(a->v[c]);
        a->k[c] = a->v[c] = NULL;
    }
}

static void decode_free(struct decode_arg *a, bool owner)
{
    attn_ws_free(a->ws);
    free(a->out.output);
    if (!owner)
        return;
    for (int c = 0; c < a->ncache; c++) {
        free(a->k[c]);
        free(a->v[c]);
        if (a->kv)
            kv_free(a->kv[c]);
    }
    free(a->k);
    free(a->v);
    free(a->kv);
    free((void *)a->in.q);
}

/* ---- the numpy peer --------------------------------------------------- */

/* Median ms of numpy for n x L x d (mode "hot"/"cold") from peer_numpy.py's
 * output, or -1 when the peer did not run. */
static char peer_text[4096];

static double peer_ms(size_t n, size_t L, size_t d, const char *mode)
{
    char key[128];
    snprintf(key, sizeof key, "n=%zu L=%zu d=%zu mode=%s median_ms=", n, L, d, mode);
    const char *p = strstr(peer_text, key);
    if (!p)
        return -1;
    char *end;
    double v = strtod(p + strlen(key), &end);
    return end == p + strlen(key) || v <= 0 ? -1 : v;
}

static void run_peer(void)
{
    const char *env = getenv("BENCH_PEER");
    if (env && strcmp(env, "0") == 0)
        return;
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "env OPENBLAS_NUM_THREADS=2 /usr/bin/python3 tests/bench/peer_numpy.py %d "
             "2048x2048x128 1024x1024x64 1x32768x128:cold", reps);
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    size_t got = fread(peer_text, 1, sizeof peer_text - 1, f);
    peer_text[got] = 0;
    if (pclose(f) != 0)
        fprintf(stderr, "bench_core: numpy peer failed (python3-numpy missing?)\n");
    printf("%s", peer_text);
}

/* ---- output ----------------------------------------------------------- */

static void detail(const char *name, double sec, double rate, const char *unit,
                   const char *lname, double limit)
{
    printf("%-46s %9.3f ms %8.1f %-5s | %-12s %8.1f  ratio %.2f\n", name, sec * 1e3, rate,
           unit, lname, limit, rate / limit);
}

static void benchrow(const char *name, const char *lname, double limit, const char *peer,
                     double peerv, double attnd, const char *unit, const char *ratio,
                     const char *goal, bool pass)
{
    char pv[32] = "-";
    if (peer && peerv > 0)
        snprintf(pv, sizeof pv, "%.1f", peerv);
    printf("BENCHROW|%s|%s|%.1f|%s|%s|%.2f|%s|%s|%s|%s\n", name, lname, limit,
           peer && peerv > 0 ? peer : "-", pv, attnd, unit, ratio, goal,
           pass ? "PASS" : "MISS");
}

static double gflops(size_t n, size_t L, size_t d, double sec)
{
    return 4.0 * (double)n * (double)L * (double)d / sec / 1e9;
}

/* ---- the rows --------------------------------------------------------- */

static double gemm_rate(const struct timed *t)
{
    return 2.0 * 2048.0 * 2048.0 * 2048.0 / t->med / 1e9;
}

static void bench_prefill_2048(void)
{
    struct prefill_arg two, one, w2;
    prefill_init(&two, 2048, 2048, 128, ATTN_OUT_OUTPUT, true);
    prefill_init(&one, 2048, 2048, 128, ATTN_OUT_OUTPUT, false);
    prefill_init(&w2, 2048, 2048, 128, ATTN_OUT_OUTPUT | ATTN_OUT_WEIGHTS, true);
    struct timed t[5] = {{run_prefill, &two, 0, 0}, {run_prefill, &one, 0, 0},
                         {run_prefill, &w2, 0, 0}, {run_sgemm, &gemm2, 0, 0},
                         {run_sgemm, &gemm1, 0, 0}};
    time_set(t, 5);
    double g2 = gemm_rate(&t[3]), g1 = gemm_rate(&t[4]);
    double a2 = gflops(2048, 2048, 128, t[0].med), a1 = gflops(2048, 2048, 128, t[1].med);
    double aw = gflops(2048, 2048, 128, t[2].med);
    detail("prefill 2048 d128 output, 2 cores", t[0].med, a2, "GF/s", "sgemm 2T", g2);
    detail("prefill 2048 d128 output, 1 worker", t[1].med, a1, "GF/s", "sgemm 1T", g1);
    detail("prefill 2048 d128 weights+output, 2 cores", t[2].med, aw, "GF/s", "sgemm 2T", g2);
    double pms = peer_ms(2048, 2048, 128, "hot");
    double pg = pms > 0 ? gflops(2048, 2048, 128, pms * 1e-3) : -1;
    char ratio[96];
    const char *kern = attn_dtype_kernel(ATTN_F32);
    snprintf(ratio, sizeof ratio, "%.2f of sgemm; %.2fx numpy (kernel %s)", a2 / g2,
             pg > 0 ? a2 / pg : 0, kern);
    benchrow("prefill f32 n=L=2048 d=128 output only (2 cores)", "sgemm 2T GFLOP/s", g2,
             "numpy 2T", pg, a2, "GFLOP/s", ratio, ">=0.8 of sgemm; >=1.7x numpy",
             a2 >= 0.8 * g2 && pg > 0 && a2 >= 1.7 * pg);
    snprintf(ratio, sizeof ratio, "%.2fx one worker (kernel %s)", a2 / a1, kern);
    benchrow("one large request on 2 cores vs 1 worker (prefill 2048 d=128)",
             "1 worker GFLOP/s", a1, NULL, -1, a2, "GFLOP/s", ratio, ">=1.7x over one worker",
             a2 >= 1.7 * a1);
    snprintf(ratio, sizeof ratio, "%.2f of sgemm (kernel %s)", a1 / g1, kern);
    benchrow("core, 1 worker: prefill f32 n=L=2048 d=128 output only", "sgemm 1T GFLOP/s", g1,
             NULL, -1, a1, "GFLOP/s", ratio, ">=0.6 of sgemm", a1 >= 0.6 * g1);
    prefill_free(&two);
    prefill_free(&one);
    prefill_free(&w2);
}

/* A prefill over 2-byte q, k, v (attn_forward_half: the pass widens them). */
struct half_arg {
    struct prefill_arg *a;
    struct attn_inputs in;
    struct attn_elems e;
};

static void run_prefill_half(void *p)
{
    struct half_arg *h = p;
    if (attn_forward_half(&h->a->req, &h->in, &h->e, &h->a->out, h->a->ws) != CORE_OK) {
        fprintf(stderr, "bench_core: attn_forward_half failed\n");
        exit(1);
    }
}

/* The 2048 prefill (output, 2 cores) with q, k, v in float16 and in
 * bfloat16 beside the float32 one, in core (no request reading): each
 * half rate as a fraction of float32's, as detail rows (the goal row is
 * bench_api's, through api_handle). */
static void bench_prefill_half(void)
{
    struct prefill_arg two;
    prefill_init(&two, 2048, 2048, 128, ATTN_OUT_OUTPUT, true);
    size_t count = 2048 * 128;
    const float *src[3] = {two.in.q, two.in.k, two.in.v};
    uint16_t *bits[2][3];
    struct half_arg h[2];
    for (int i = 0; i < 2; i++) {
        for (int t = 0; t < 3; t++) {
            bits[i][t] = xalloc(count * 2);
            if (i == 0)
                half_f32_to_f16_n(src[t], bits[i][t], count);
            else
                half_f32_to_bf16_n(src[t], bits[i][t], count);
        }
        enum attn_elem e = i == 0 ? ATTN_ELEM_F16 : ATTN_ELEM_BF16;
        h[i] = (struct half_arg){&two, two.in, {e, e, e}};
        h[i].in.q = bits[i][0];
        h[i].in.k = bits[i][1];
        h[i].in.v = bits[i][2];
    }
    struct timed t[3] = {{run_prefill, &two, 0, 0}, {run_prefill_half, &h[0], 0, 0},
                         {run_prefill_half, &h[1], 0, 0}};
    time_set(t, 3);
    double a32 = gflops(2048, 2048, 128, t[0].med);
    detail("prefill 2048 d128 output float16, 2 cores", t[1].med,
           gflops(2048, 2048, 128, t[1].med), "GF/s", "float32", a32);
    detail("prefill 2048 d128 output bfloat16, 2 cores", t[2].med,
           gflops(2048, 2048, 128, t[2].med), "GF/s", "float32", a32);
    for (int i = 0; i < 2; i++)
        for (int tt = 0; tt < 3; tt++)
            free(bits[i][tt]);
    prefill_free(&two);
}

static void bench_prefill_1024(void)
{
    struct prefill_arg two;
    prefill_init(&two, 1024, 1024, 64, ATTN_OUT_OUTPUT, true);
    struct timed t[2] = {{run_prefill, &two, 0, 0}, {run_sgemm, &gemm2, 0, 0}};
    time_set(t, 2);
    double g2 = gemm_rate(&t[1]), a2 = gflops(1024, 1024, 64, t[0].med);
    detail("prefill 1024 d64 output, 2 cores", t[0].med, a2, "GF/s", "sgemm 2T", g2);
    double pms = peer_ms(1024, 1024, 64, "hot"), ms = t[0].med * 1e3;
    char ratio[160];
    snprintf(ratio, sizeof ratio,
             "%.2f of sgemm rate; %.2fx torch sdpa 3.55 ms (RESULTS.md)%s (kernel %s)", a2 / g2,
             3.55 / ms, pms > 0 ? "; numpy 2T same run in peer column" : "",
             attn_dtype_kernel(ATTN_F32));
    benchrow("prefill f32 n=L=1024 d=64 output only (2 cores), ms", "sgemm 2T GFLOP/s", g2,
             "numpy 2T ms", pms, ms, "ms", ratio, "<=2.0 ms; faster than torch sdpa 3.55 ms",
             ms <= 2.0);
    prefill_free(&two);
}

/* The attention's own two products by sgemm, 2 threads (see the top). */
struct shape_gemm {
    int n, L, d;
    float *q, *k, *v, *s, *o;
};

static void run_shape_gemm(void *p)
{
    struct shape_gemm *g = p;
    attn_blas_init(2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->n, g->L, g->d, 1, g->q, g->d, g->k,
                g->d, 0, g->s, g->L);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->d, g->L, 1, g->s, g->L,
                g->v, g->d, 0, g->o, g->d);
    attn_blas_init(1);
}

/* OpenBLAS's kernels for AVX2 + FMA (what it runs on an AVX2-only CPU). */
#define AVX2_BLAS "Haswell"

static const char *blas_core(void)
{
    const char *c = openblas_get_corename();
    return c ? c : "?";
}

/* The goal row's name and goal text of kernel kern at n = L, d. */
static void kernel_goal_text(enum attn_kernel kern, size_t n, size_t d, double want, char *name,
                             size_t nsize, char *goal, size_t gsize)
{
    snprintf(name, nsize, "kernel %s: prefill f32 n=L=%zu d=%zu output only (2 cores)",
             attn_kernel_name(kern), n, d);
    snprintf(goal, gsize, ">=%.2f of sgemm of its shapes", want);
}

/* Kernel kern's output-only prefill n = L, d on 2 cores next to this
 * process's sgemm of its shapes: a detail row naming both, and the goal row
 * when want > 0 (the ratio the issue names: >= want of sgemm). */
static void kernel_rows(enum attn_kernel kern, size_t n, size_t d, double want)
{
    struct shape_gemm g = {(int)n, (int)n, (int)d, rand_floats(n * d, 31), rand_floats(n * d, 32),
                           rand_floats(n * d, 33), rand_floats(n * n, 34), rand_floats(n * d, 35)};
    attn_kernel_set(kern);
    struct prefill_arg a;
    prefill_init(&a, n, n, d, ATTN_OUT_OUTPUT, true);
    struct timed t[2] = {{run_prefill, &a, 0, 0}, {run_shape_gemm, &g, 0, 0}};
    time_set(t, 2);
    double ar = gflops(n, n, d, t[0].med), gr = gflops(n, n, d, t[1].med);
    char name[128], lname[64], ratio[96], goal[64];
    snprintf(name, sizeof name, "prefill %zu d%zu output, 2 cores, kernel %s", n, d,
             attn_kernel_name(kern));
    snprintf(lname, sizeof lname, "sgemm %s", blas_core());
    detail(name, t[0].med, ar, "GF/s", lname, gr);
    if (want > 0) {
        kernel_goal_text(kern, n, d, want, name, sizeof name, goal, sizeof goal);
        snprintf(lname, sizeof lname, "sgemm 2T shapes GFLOP/s (OpenBLAS %s)", blas_core());
        snprintf(ratio, sizeof ratio, "%.2f of sgemm of its shapes (OpenBLAS %s)", ar / gr,
                 blas_core());
        benchrow(name, lname, gr, NULL, -1, ar, "GFLOP/s", ratio, goal, ar >= want * gr);
    }
    prefill_free(&a);
    attn_kernel_set(ATTN_KERNEL_AUTO);
    free(g.q);
    free(g.k);
    free(g.v);
    free(g.s);
    free(g.o);
}

/* kernel_rows in a fresh copy of this program whose OpenBLAS runs its AVX2
 * kernels (OPENBLAS_CORETYPE is read when the library loads); the copy
 * prints the rows (BENCH_KERNEL_ROW, see main). */
static void kernel_rows_avx2_blas(enum attn_kernel kern, size_t n, size_t d, double want)
{
    extern char **environ;
    char row[96], arg[16];
    snprintf(row, sizeof row, "BENCH_KERNEL_ROW=%s %zu %zu %g", attn_kernel_name(kern), n, d, want);
    snprintf(arg, sizeof arg, "%d", reps);
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **env = xalloc((ne + 3) * sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) != 0)
            env[k++] = environ[i];
    env[k++] = "OPENBLAS_CORETYPE=" AVX2_BLAS;
    env[k++] = row;
    env[k] = NULL;
    char *argv[] = {"bench_core", arg, NULL};
    fflush(stdout);
    pid_t pid;
    int status;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env) != 0 ||
        waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        /* the goal row still shows, as a miss */
        char name[128], goal[64];
        kernel_goal_text(kern, n, d, want, name, sizeof name, goal, sizeof goal);
        benchrow(name, "sgemm 2T shapes GFLOP/s (OpenBLAS " AVX2_BLAS ")", 0, NULL, -1, 0,
                 "GFLOP/s", "not measured: its copy of bench_core failed", goal, false);
    }
    free(env);
}

/* Output-only prefill n = L, d on 2 cores with each fused kernel here, each
 * next to the same run's sgemm of its shapes; goal: the kernel's ratio.
 * The AVX2 kernel stands for AVX2-only CPUs, whose sgemm is OpenBLAS's AVX2
 * kernel: on a CPU with AVX-512 its goal row is measured against that one
 * (in a copy of this program, kernel_rows_avx2_blas) and its detail row
 * against this CPU's own sgemm. Why: where AVX-512 has two 512-bit FMA
 * units (Intel Xeon), AVX2 code peaks at half of the machine's sgemm
 * (the AVX2 kernel measured 0.56-0.63 of it at 2048 d=128 and 0.93 of
 * OpenBLAS Haswell in the same minutes); on Zen 4 both widths peak alike. */
static void bench_kernels(size_t n, size_t d, double goal512, double goal2)
{
    unsigned have = attn_kernel_supported();
    for (int k = ATTN_KERNEL_AVX512; k >= ATTN_KERNEL_NONE; k--) {
        if (!(have & (1u << k)))
            continue;
        enum attn_kernel kern = (enum attn_kernel)k;
        bool avx2_blas = kern == ATTN_KERNEL_AVX2 && (have & (1u << ATTN_KERNEL_AVX512));
        double want = kern == ATTN_KERNEL_AVX512 ? goal512 : kern == ATTN_KERNEL_AVX2 ? goal2 : 0;
        kernel_rows(kern, n, d, avx2_blas ? 0 : want);
        if (avx2_blas)
            kernel_rows_avx2_blas(kern, n, d, want);
    }
}

/* Top-k weights of a long context (core/attn_extras.c: return ["weights"]
 * with weights_top_k, the attention map without n·L numbers) against the
 * output-only pass, both with the pool (2 cores), alone and with the output
 * as well; the goal holds for both ratios. */
struct top_k_arg {
    struct prefill_arg p;
    struct attn_extras x;
    struct attn_extras_out xo;
};

static void run_top_k(void *p)
{
    struct top_k_arg *a = p;
    if (attn_forward_extras(&a->p.req, &a->p.in, NULL, &a->x, &a->p.out, &a->xo, a->p.ws) !=
        CORE_OK) {
        fprintf(stderr, "bench_core: attn_forward_extras failed\n");
        exit(1);
    }
}

static void bench_top_k(void)
{
    size_t n = 64, L = 32768, d = 128, k = 32;
    struct prefill_arg out;
    struct top_k_arg tk, tko;
    prefill_init(&out, n, L, d, ATTN_OUT_OUTPUT, true);
    prefill_init(&tk.p, n, L, d, ATTN_OUT_OUTPUT, true);
    prefill_init(&tko.p, n, L, d, ATTN_OUT_OUTPUT, true);
    tk.p.req.outputs = 0;               /* the weights as top-k only */
    tk.x = tko.x = (struct attn_extras){ATTN_X_TOPK, NULL, 0, k};
    tk.xo = (struct attn_extras_out){.top_idx = xalloc(n * k * sizeof(int64_t)),
                                     .top_val = xalloc(n * k * sizeof(float))};
    tko.xo = tk.xo;
    struct timed t[3] = {{run_prefill, &out, 0, 0}, {run_top_k, &tk, 0, 0},
                         {run_top_k, &tko, 0, 0}};
    time_set(t, 3);
    double ratio = t[1].med / t[0].med;
    detail("n=64 L=32768 d128 output only, 2 cores", t[0].med, gflops(n, L, d, t[0].med),
           "GF/s", "-", 1);
    detail("n=64 L=32768 d128 top-32 weights, 2 cores", t[1].med, gflops(n, L, d, t[1].med),
           "GF/s", "-", 1);
    detail("n=64 L=32768 d128 top-32 + output, 2 cores", t[2].med, gflops(n, L, d, t[2].med),
           "GF/s", "-", 1);
    char r[96];
    double with_out = t[2].med / t[0].med;
    snprintf(r, sizeof r, "%.2fx the output-only time (with the output too: %.2fx)", ratio,
             with_out);
    benchrow("top-32 weights f32 n=64 L=32768 d=128 (2 cores), ms", "output only ms",
             t[0].med * 1e3, NULL, -1, t[1].med * 1e3, "ms", r,
             "<=1.3x output only, with or without the output", ratio <= 1.3 && with_out <= 1.3);
    free(tk.xo.top_idx);
    free(tk.xo.top_val);
    prefill_free(&out);
    prefill_free(&tk.p);
    prefill_free(&tko.p);
}

static void bench_decode(void)
{
    size_t L = 32768, d = 128;
    double bytes = 2.0 * (double)L * (double)d * sizeof(float);
    struct decode_arg two, one;
    decode_init(&two, L, d, false, NULL);
    decode_init(&one, L, d, false, &two);
    attn_ws_set_pool(two.ws, pool);
    struct timed t[4] = {{run_decode, &two, 0, 0}, {run_decode, &one, 0, 0},
                         {run_read2, &rd, 0, 0}, {run_read1, &rd, 0, 0}};
    time_set(t, 4);
    double rb = (double)rd.n * sizeof(float);
    double r2 = rb / t[2].med / 1e9, r1 = rb / t[3].med / 1e9;
    double a2 = bytes / t[0].med / 1e9, a1 = bytes / t[1].med / 1e9;
    detail("decode L=32768 d128 cold, 2 cores", t[0].med, a2, "GB/s", "read 2T", r2);
    detail("decode L=32768 d128 cold, 1 worker", t[1].med, a1, "GB/s", "read 1T", r1);
    double pms = peer_ms(1, L, d, "cold");
    double pg = pms > 0 ? bytes / (pms * 1e-3) / 1e9 : -1;
    char ratio[96];
    snprintf(ratio, sizeof ratio, "%.2f of read; %.2fx numpy", a2 / r2, pg > 0 ? a2 / pg : 0);
    benchrow("decode f32 L=32768 d=128 KV cold (2 cores)", "read 2T GB/s", r2, "numpy 2T", pg,
             a2, "GB/s", ratio, ">=0.85 of read; >=1.5x numpy",
             a2 >= 0.85 * r2 && pg > 0 && a2 >= 1.5 * pg);
    snprintf(ratio, sizeof ratio, "%.2f of read", a1 / r1);
    benchrow("core, 1 worker: decode f32 L=32768 d=128 KV cold", "read 1T GB/s", r1, NULL, -1,
             a1, "GB/s", ratio, ">=0.7 of read", a1 >= 0.7 * r1);
    decode_free(&one, false);
    decode_free(&two, true);
}

static void bench_session(size_t L)
{
    size_t d = 128;
    double bytes = 2.0 * (double)L * (double)d * sizeof(float);
    struct decode_arg two;
    decode_init(&two, L, d, true, NULL);
    attn_ws_set_pool(two.ws, pool);
    struct timed t[2] = {{run_decode, &two, 0, 0}, {run_read2, &rd, 0, 0}};
    time_set(t, 2);
    double r2 = (double)rd.n * sizeof(float) / t[1].med / 1e9, a2 = bytes / t[0].med / 1e9;
    char name[96], ratio[64];
    snprintf(name, sizeof name, "session decode (kv_attend) L=%zu d128 cold", L);
    detail(name, t[0].med, a2, "GB/s", "read 2T", r2);
    snprintf(name, sizeof name, "session decode step f32 L=%zu d=128 KV cold (kv_attend, 2 cores)",
             L);
    snprintf(ratio, sizeof ratio, "%.2f of read", a2 / r2);
    benchrow(name, "read 2T GB/s", r2, NULL, -1, a2, "GB/s", ratio, ">=0.7 of read",
             a2 >= 0.7 * r2);
    if (L == 32768) {
        const struct kv_cache *c = two.kv[0];
        double per = (double)kv_bytes(c) / (double)kv_length(c);
        double raw = (double)kv_row_bytes(c);
        snprintf(ratio, sizeof ratio, "%.3fx raw (+%.1f%%)", per / raw, (per / raw - 1) * 100);
        benchrow("session cache bytes per row (L=32768 d=128 f32, 64-row appends)",
                 "raw K+V bytes/row", raw, NULL, -1, per, "B/row", ratio, "<=10% over raw",
                 per <= 1.10 * raw);
    }
    decode_free(&two, true);
}

/* ---- paged caches (issue 18) --------------------------------------------- */

/* Decode over a paged session cache (kv_attend, pages read in place) next to
 * the same rows in one block per head (attn_forward_kv), same run; for
 * detail, paged caches whose slabs sit on 4 KiB pages (no MADV_HUGEPAGE:
 * what a kernel without transparent huge pages gives; the one block is on
 * 4 KiB pages too) and 8 query heads per kv head (the key-blocked pass over
 * the pages in place). And the memory of 32 forks that each append 64 rows
 * to a 16,384-row prefix. */
static void bench_paged(void)
{
    size_t L = 32768, d = 128;
    struct decode_arg contig, paged, contig1, paged1;     /* 1: the same caches, 1 worker */
    decode_init(&contig, L, d, false, NULL);
    decode_init(&paged, L, d, true, NULL);
    decode_init(&contig1, L, d, false, &contig);
    decode_init(&paged1, L, d, true, &paged);
    struct decode_arg small;            /* slabs on 4 KiB pages */
    kv_slab_set_hugepages(false);
    decode_init(&small, L, d, true, NULL);
    kv_slab_set_hugepages(true);
    /* grouped heads: 8 query heads on the one kv head, the key-blocked
     * pass (the fused kernel for float32), the same caches */
    struct decode_arg gqa[2];
    float *gq = rand_floats(8 * d, 9);
    for (int i = 0; i < 2; i++) {
        decode_init(&gqa[i], L, d, false, i ? &paged : &contig);
        gqa[i].req.shape.h = 8;
        gqa[i].in.q = gq;
        free(gqa[i].out.output);
        gqa[i].out.output = rand_floats(8 * d, 8);
        attn_ws_set_pool(gqa[i].ws, pool);
    }
    attn_ws_set_pool(contig.ws, pool);
    attn_ws_set_pool(paged.ws, pool);
    attn_ws_set_pool(small.ws, pool);
    struct timed t[7] = {{run_decode, &contig, 0, 0}, {run_decode, &paged, 0, 0},
                         {run_decode, &contig1, 0, 0}, {run_decode, &paged1, 0, 0},
                         {run_decode, &small, 0, 0}, {run_decode, &gqa[0], 0, 0},
                         {run_decode, &gqa[1], 0, 0}};
    time_set(t, 7);
    double bytes = 2.0 * (double)L * (double)d * sizeof(float);
    double rc = bytes / t[0].med / 1e9, rp = bytes / t[1].med / 1e9;
    char ratio[96];
    detail("decode L=32768 d128 cold, paged cache (kv_attend)", t[1].med, rp, "GB/s",
           "one block", rc);
    detail("  the same on 1 worker (apart from the split over cores)", t[3].med,
           bytes / t[3].med / 1e9, "GB/s", "one block", bytes / t[2].med / 1e9);
    detail("  the same, 2 cores, slabs on 4 KiB pages", t[4].med, bytes / t[4].med / 1e9,
           "GB/s", "one block", rc);
    detail("  8 query heads on the kv head (key-blocked)", t[6].med, bytes / t[6].med / 1e9,
           "GB/s", "one block", bytes / t[5].med / 1e9);
    snprintf(ratio, sizeof ratio, "%.3f of one block (%.3f vs %.3f ms)", rp / rc,
             t[1].med * 1e3, t[0].med * 1e3);
    benchrow("paged session decode f32 L=32768 d=128 cold vs one block per head (2 cores)",
             "one block GB/s", rc, NULL, -1, rp, "GB/s", ratio, ">=0.95 of one block",
             rp >= 0.95 * rc);
    decode_free(&contig1, false);
    decode_free(&paged1, false);
    decode_free(&gqa[0], false);
    decode_free(&gqa[1], false);
    free(gq);
    decode_free(&small, true);
    decode_free(&contig, true);
    decode_free(&paged, true);

    /* 32 forks x 64 rows over a 16,384-row prefix, every page counted once */
    size_t prefix = 16384, forks = 32, add = 64;
    struct kv_acct acct = {0};
    struct kv_cache *base = kv_new(ATTN_F32, 1, d, d), *f[32];
    float *k = rand_floats(prefix * d, 5), *v = rand_floats(prefix * d, 6);
    for (size_t r = 0; base && r < prefix; r += 64)
        if (kv_append_prepared(base, k + r * d, v + r * d, 64) != CORE_OK)
            break;
    if (!base || kv_length(base) != prefix) {
        fprintf(stderr, "bench_core: building the prefix failed\n");
        exit(1);
    }
    kv_set_acct(base, &acct);
    double one = (double)acct.bytes;
    for (size_t i = 0; i < forks; i++) {
        f[i] = kv_fork(base);
        if (!f[i] || kv_append_prepared(f[i], k + i * add * d, v + i * add * d, add) != CORE_OK) {
            fprintf(stderr, "bench_core: a fork failed\n");
            exit(1);
        }
    }
    double all = (double)acct.bytes;
    snprintf(ratio, sizeof ratio, "%.3fx the prefix (%.1f MB for %.1f MB)", all / one, all / 1e6,
             one / 1e6);
    benchrow("32 forks x 64 appended rows of a 16,384-row prefix (f32 d=128), memory",
             "prefix MB", one / 1e6, NULL, -1, all / 1e6, "MB", ratio, "<=1.3x the prefix",
             all <= 1.3 * one);
    for (size_t i = 0; i < forks; i++)
        kv_free(f[i]);
    kv_free(base);
    free(k);
    free(v);
}

/* ---- narrow session caches (issue 21) ------------------------------------ */

/* a's float32 session caches rebuilt in storage form st, 64-row appends as
 * decoding grows them, and as many more copies as keep the stored bytes
 * read cold (past 128 MiB, as cold_count does for float32). */
static void caches_to_store(struct decode_arg *a, size_t L, size_t d, enum kv_store st)
{
    int nf = a->ncache, n = nf;
    struct kv_cache *probe = kv_new_store(ATTN_F32, st, 1, d, d);
    size_t row = probe ? kv_row_bytes(probe) : 0;
    kv_free(probe);
    while (row && (size_t)n * L * row < ((size_t)128 << 20))
        n++;
    struct kv_cache **kv = calloc((size_t)n, sizeof *kv);
    float **k = calloc((size_t)n, sizeof *k), **v = calloc((size_t)n, sizeof *v);
    for (int c = 0; kv && k && v && c < n; c++) {
        struct kv_cache *nc = kv_new_store(ATTN_F32, st, 1, d, d);
        float *kf = malloc(L * d * sizeof *kf), *vf = malloc(L * d * sizeof *vf);
        kv_read_stored(a->kv[c % nf], 0, 0, L, kf, vf, NULL, NULL);
        for (size_t r = 0; nc && r < L; r += 64)
            if (kv_append_prepared(nc, kf + r * d, vf + r * d, 64) != CORE_OK)
                break;
        if (!nc || kv_length(nc) != L) {
            fprintf(stderr, "bench_core: building a %s cache failed\n", kv_store_name(st, ATTN_F32));
            exit(1);
        }
        free(kf);
        free(vf);
        kv[c] = nc;
    }
    if (!kv || !k || !v) {
        fprintf(stderr, "bench_core: out of memory\n");
        exit(1);
    }
    for (int c = 0; c < nf; c++)
        kv_free(a->kv[c]);
    free(a->kv);
    free(a->k);
    free(a->v);
    a->kv = kv;
    a->k = k;
    a->v = v;
    a->ncache = n;
}

/* Decode steps over float16, bfloat16 and int8 caches next to the float32
 * session cache, same run: speed-up over float32, and each one's rate over
 * its own stored bytes against the read of the same bytes a step with the
 * same threads (struct step_read); for detail, the same against the
 * 256 MiB read on 4 KiB pages (the limit of these rows before 2026-12-02
 * 10:30), and each narrow cache on 1 worker against the 1-thread read of
 * its bytes (the per-core rate apart from how the step splits over the
 * cores). */
static void bench_kv_dtypes(void)
{
    size_t L = 32768, d = 128;
    static const enum kv_store st[3] = {KV_STORE_F16, KV_STORE_BF16, KV_STORE_I8};
    static const double goal[3] = {1.8, 1.8, 3.0};
    struct decode_arg a[4], one[3];     /* one: the same caches, 1 worker */
    struct step_read lim2[3], lim1[3];
    decode_init(&a[0], L, d, true, NULL);
    for (int i = 0; i < 3; i++) {
        decode_init(&a[i + 1], L, d, true, NULL);
        caches_to_store(&a[i + 1], L, d, st[i]);
        decode_init(&one[i], L, d, true, &a[i + 1]);
        one[i].ncache = a[i + 1].ncache;
        size_t step = kv_row_bytes(a[i + 1].kv[0]) * L;
        step_read_init(&lim2[i], step, (size_t)a[i + 1].ncache, pool);
        lim1[i] = lim2[i];
        lim1[i].pool = NULL;
    }
    struct timed t[14];
    for (int i = 0; i < 4; i++) {
        attn_ws_set_pool(a[i].ws, pool);
        t[i] = (struct timed){run_decode, &a[i], 0, 0};
    }
    for (int i = 0; i < 3; i++) {
        t[4 + i] = (struct timed){run_step_read, &lim2[i], 0, 0};
        t[7 + i] = (struct timed){run_decode, &one[i], 0, 0};
        t[10 + i] = (struct timed){run_step_read, &lim1[i], 0, 0};
    }
    t[13] = (struct timed){run_read2, &rd, 0, 0};
    time_set(t, 14);
    double r2old = (double)rd.n * sizeof(float) / t[13].med / 1e9;
    for (int i = 0; i < 3; i++) {       /* per-core rate apart from the split over cores */
        char name[112];
        double bytes = (double)kv_row_bytes(a[i + 1].kv[0]) * (double)L;
        double r1 = (double)lim1[i].n * sizeof(float) / t[10 + i].med / 1e9;
        snprintf(name, sizeof name, "decode %s cache L=32768 d128 cold, 1 worker",
                 kv_store_name(st[i], ATTN_F32));
        detail(name, t[7 + i].med, bytes / t[7 + i].med / 1e9, "GB/s", "read own 1T", r1);
        decode_free(&one[i], false);
    }
    for (int i = 0; i < 3; i++) {
        const struct kv_cache *c = a[i + 1].kv[0];
        double bytes = (double)kv_row_bytes(c) * (double)L, rate = bytes / t[i + 1].med / 1e9;
        double r2 = (double)lim2[i].n * sizeof(float) / t[4 + i].med / 1e9;
        double speed = t[0].med / t[i + 1].med;
        char name[112], ratio[128], g[64];
        snprintf(name, sizeof name, "session decode step %s cache L=32768 d=128 cold (2 cores)",
                 kv_store_name(st[i], ATTN_F32));
        detail(name, t[i + 1].med, rate, "GB/s", "read own 2T", r2);
        detail("  the same against the 256 MiB read (4 KiB pages)", t[i + 1].med, rate, "GB/s",
               "read 2T", r2old);
        snprintf(ratio, sizeof ratio, "%.2fx float32 cache (%.3f ms); %.2f of read over own bytes",
                 speed, t[0].med * 1e3, rate / r2);
        snprintf(g, sizeof g, ">=%.1fx float32; >=0.85 of read", goal[i]);
        benchrow(name, "read own bytes 2T GB/s", r2, NULL, -1, rate, "GB/s", ratio, g,
                 speed >= goal[i] && rate >= 0.85 * r2);
        double per = (double)kv_bytes(c) / (double)kv_length(c), raw = (double)kv_row_bytes(c);
        snprintf(name, sizeof name, "session cache bytes per row (%s, L=32768 d=128, 64-row appends)",
                 kv_store_name(st[i], ATTN_F32));
        snprintf(ratio, sizeof ratio, "%.3fx stored (+%.1f%%)", per / raw, (per / raw - 1) * 100);
        benchrow(name, "stored bytes/row", raw, NULL, -1, per, "B/row", ratio, "<=10% over stored",
                 per <= 1.10 * raw);
    }
    for (int i = 0; i < 4; i++)
        decode_free(&a[i], true);
    for (int i = 0; i < 3; i++)
        free(lim2[i].x);
}

/* OpenBLAS's idle threads spin for 2^28 cycles after each call by default;
 * between the interleaved samples of the 2-thread sgemm that would steal a
 * core from the next sample. OpenBLAS reads OPENBLAS_THREAD_TIMEOUT when it
 * loads, so set it and start again. */
static void quiet_blas_threads(char **argv)
{
    if (getenv("OPENBLAS_THREAD_TIMEOUT"))
        return;
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: measure anyway */
}

/* ---- issue 16: windows, packed segments, softcap, per-head sinks ----- */

/* Pairs (i, j) a causal query sees with window.left = W over n = L rows. */
static double window_pairs(size_t n, size_t W)
{
    double p = 0;
    for (size_t i = 0; i < n; i++)
        p += (double)(i < W ? i + 1 : W + 1);
    return p;
}

/* Several requests one after another (the separate side of the packed row). */
struct several {
    struct prefill_arg *p;
    int count;
};

static void run_several(void *arg)
{
    struct several *s = arg;
    for (int i = 0; i < s->count; i++)
        run_prefill(&s->p[i]);
}

static void bench_models(void)
{
    size_t N = 8192, d = 128, W = 1024, S = 1024, nseg = N / S;
    char ratio[128];
    /* a sliding window against sgemm counted over the allowed pairs */
    struct prefill_arg win;
    prefill_init(&win, N, N, d, ATTN_OUT_OUTPUT, true);
    win.req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    win.req.window = (struct attn_window){true, (int64_t)W, -1, 0};
    /* 8 packed segments of 1024 against 8 separate causal requests */
    struct prefill_arg packed, sep[8];
    prefill_init(&packed, N, N, d, ATTN_OUT_OUTPUT, true);
    packed.req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    int64_t *seg = xalloc(N * sizeof(int64_t));
    for (size_t i = 0; i < N; i++)
        seg[i] = (int64_t)(i / S);
    packed.req.seg_q = packed.req.seg_k = seg;
    packed.req.seg_batches = 1;
    for (size_t i = 0; i < nseg; i++) {
        prefill_init(&sep[i], S, S, d, ATTN_OUT_OUTPUT, true);
        sep[i].req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    }
    struct several all = {sep, (int)nseg};
    struct timed t[3] = {{run_prefill, &win, 0, 0}, {run_sgemm, &gemm2, 0, 0},
                         {run_prefill, &packed, 0, 0}};
    struct timed ts = {run_several, &all, 0, 0};
    time_set(t, 3);
    time_set(&ts, 1);
    double g2 = gemm_rate(&t[1]);
    double aw = 4.0 * (double)d * window_pairs(N, W) / t[0].med / 1e9;
    detail("prefill 8192 d128 causal window 1024, 2 cores", t[0].med, aw, "GF/s", "sgemm 2T",
           g2);
    snprintf(ratio, sizeof ratio, "%.2f of sgemm over allowed pairs (kernel %s)", aw / g2,
             attn_dtype_kernel(ATTN_F32));
    benchrow("prefill f32 n=L=8192 d=128 causal window.left=1024 output (2 cores)",
             "sgemm 2T GFLOP/s", g2, NULL, -1, aw, "GFLOP/s", ratio,
             ">=0.8 of sgemm over allowed pairs", aw >= 0.8 * g2);
    double pr = ts.med / t[2].med;
    detail("packed 8 x 1024 segments causal, 2 cores", t[2].med, 1 / t[2].med, "/s",
           "8 separate", 1 / ts.med);
    snprintf(ratio, sizeof ratio, "%.2f of the separate requests' rate", pr);
    benchrow("packed batch f32 8 segments x 1024 d=128 causal vs 8 separate requests (2 cores), ms",
             "8 separate ms", ts.med * 1e3, NULL, -1, t[2].med * 1e3, "ms", ratio,
             ">=0.8 of the separate rate", pr >= 0.8);
    prefill_free(&win);
    prefill_free(&packed);
    for (size_t i = 0; i < nseg; i++)
        prefill_free(&sep[i]);
    free(seg);

    /* the fused kernel with softcap / per-head sinks against without */
    size_t n = 2048, h = 4;
    struct prefill_arg plain, cap, sink;
    struct prefill_arg *pa[3] = {&plain, &cap, &sink};
    for (int i = 0; i < 3; i++) {
        prefill_init(pa[i], n, n, d, ATTN_OUT_OUTPUT, true);
        free((void *)pa[i]->in.q);      /* h heads of queries on one kv head */
        free(pa[i]->out.output);
        pa[i]->in.q = rand_floats(h * n * d, 31);
        pa[i]->out.output = rand_floats(h * n * d, 32);
        pa[i]->req.shape.h = h;
        pa[i]->req.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    }
    static const double sinks[4] = {0.5, -1, 2, 0};
    cap.req.params.softcap = 50;
    sink.req.params.softmax = ATTN_SOFTMAX_SINK;
    sink.req.params.sink_logits = sinks;
    struct timed tf[3] = {{run_prefill, &plain, 0, 0}, {run_prefill, &cap, 0, 0},
                          {run_prefill, &sink, 0, 0}};
    time_set(tf, 3);
    double base = gflops(h * n, n, d, tf[0].med) / 2;   /* causal: half the pairs */
    double rc = tf[0].med / tf[1].med, rs = tf[0].med / tf[2].med;
    detail("prefill 4x2048 d128 causal, 2 cores", tf[0].med, base, "GF/s", "-", 1);
    detail("  with softcap 50", tf[1].med, base * rc, "GF/s", "without", base);
    detail("  with per-head sinks", tf[2].med, base * rs, "GF/s", "without", base);
    snprintf(ratio, sizeof ratio, "%.2f of the rate without (kernel %s)", rc,
             attn_dtype_kernel(ATTN_F32));
    benchrow("fused f32 prefill h=4 n=L=2048 d=128 causal: softcap 50 vs none (2 cores)",
             "without GFLOP/s", base, NULL, -1, base * rc, "GFLOP/s", ratio, ">=0.9 of without",
             rc >= 0.9);
    snprintf(ratio, sizeof ratio, "%.2f of the rate without (kernel %s)", rs,
             attn_dtype_kernel(ATTN_F32));
    benchrow("fused f32 prefill h=4 n=L=2048 d=128 causal: per-head sinks vs none (2 cores)",
             "without GFLOP/s", base, NULL, -1, base * rs, "GFLOP/s", ratio, ">=0.9 of without",
             rs >= 0.9);
    for (int i = 0; i < 3; i++)
        prefill_free(pa[i]);
}

/* ---- export and import (issue 18) -------------------------------------- */

/* A 16,384-row session of 8 heads, d_k = d_v = 128, float32 (128 MiB of
 * rows) exported and imported in-process, against a memcpy of the export's
 * bytes into a fresh block (what export does at the least: one allocation
 * and one pass). The block is of 2 MiB pages, as the export's buffer and
 * the cache's slabs are: a plain malloc of it (4 KiB pages, one fault
 * each) ran at 1.1 GB/s, under the import it was to bound. */
struct move_arg {
    struct sess_store *st, *dst;
    char id[SESS_ID_MAX];
    void *bytes;
    size_t n;
};

static void run_copy(void *p)
{
    struct move_arg *m = p;
    const size_t huge = (size_t)2 << 20;
    size_t n = (m->n + huge - 1) / huge * huge;
    void *c = aligned_alloc(huge, n);
    if (!c)
        exit(1);
#ifdef MADV_HUGEPAGE
    madvise(c, n, MADV_HUGEPAGE);
#endif
    memcpy(c, m->bytes, m->n);
    ((volatile char *)c)[m->n / 2];
    free(c);
}

static void run_export(void *p)
{
    struct move_arg *m = p;
    struct sess *s;
    void *out;
    size_t n;
    if (sess_acquire(m->st, m->id, &s) != CORE_OK || sess_export(m->st, s, &out, &n) != CORE_OK)
        exit(1);
    sess_release(m->st, s);
    free(out);
}

static void run_import(void *p)
{
    struct move_arg *m = p;
    char id[SESS_ID_MAX];
    if (sess_import(m->dst, m->bytes, m->n, NULL, id, NULL) != CORE_OK)
        exit(1);
    sess_delete(m->dst, id);
}

static void bench_move(void)
{
    const size_t rows = 16384, h = 8, d = 128;
    struct sess_config cfg = {.default_ttl_s = 3600, .default_max_tokens = rows};
    struct move_arg m = {.st = sess_store_new(&cfg), .dst = sess_store_new(&cfg)};
    struct sess_spec sp = {.shape = {.h = h, .h_kv = h, .d_k = d, .d_v = d}};
    sp.params.dtype = ATTN_F32;
    sp.params.scale = 0.08838834764831845;     /* 1/sqrt(128) */
    float *k = rand_floats(h * 1024 * d, 31), *v = rand_floats(h * 1024 * d, 32);
    struct sess *s;
    if (!m.st || !m.dst || sess_create(m.st, &sp, m.id) != CORE_OK ||
        sess_acquire(m.st, m.id, &s) != CORE_OK)
        exit(1);
    for (size_t r = 0; r < rows; r += 1024)
        if (sess_append(m.st, s, k, v, 1024, -1) != CORE_OK)
            exit(1);
    if (sess_export(m.st, s, &m.bytes, &m.n) != CORE_OK)
        exit(1);
    sess_release(m.st, s);
    struct timed t[3] = {{run_copy, &m, 0, 0}, {run_export, &m, 0, 0}, {run_import, &m, 0, 0}};
    time_set(t, 3);
    double gb = (double)m.n / 1e9, lim = gb / t[0].med;
    const char *what[2] = {"session export in-process (16384 rows, 8 heads, d=128, f32)",
                           "session import in-process (16384 rows, 8 heads, d=128, f32)"};
    printf("%zu bytes an export; memcpy into a fresh block %.2f GB/s\n", m.n, lim);
    for (int i = 0; i < 2; i++) {
        double gbs = gb / t[1 + i].med;
        char ratio[64];
        detail(i ? "import" : "export", t[1 + i].med, gbs, "GB/s", "memcpy", lim);
        snprintf(ratio, sizeof ratio, "%.2f of memcpy", gbs / lim);
        benchrow(what[i], "memcpy GB/s", lim, NULL, 0, gbs, "GB/s", ratio, ">= 1 GB/s",
                 gbs >= 1.0);
    }
    free(k);
    free(v);
    free(m.bytes);
    sess_store_free(m.st);
    sess_store_free(m.dst);
}

int main(int argc, char **argv)
{
    quiet_blas_threads(argv);
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
    pool = attn_pool_new(1, NULL, NULL);
    if (!pool) {
        fprintf(stderr, "bench_core: no helper thread\n");
        return 1;
    }
    /* BENCH_KERNEL_ROW="KERNEL N D GOAL": kernel_rows alone (the copy that
     * kernel_rows_avx2_blas starts) */
    const char *kr = getenv("BENCH_KERNEL_ROW");
    if (kr) {
        char kname[16];
        size_t n, d;
        double want;
        enum attn_kernel kern;
        if (sscanf(kr, "%15s %zu %zu %lf", kname, &n, &d, &want) != 4 ||
            !attn_kernel_parse(kname, &kern) || !n || !d) {
            fprintf(stderr, "bench_core: BENCH_KERNEL_ROW=\"KERNEL N D GOAL\"\n");
            return 2;
        }
        kernel_rows(kern, n, d, want);
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_PREFILL=NxLxD: only the median ms of that output-only prefill
     * on 2 cores (the in-process side of tests/bench/large_client.py) */
    const char *pf = getenv("BENCH_PREFILL");
    if (pf) {
        size_t n, L, d;
        if (sscanf(pf, "%zux%zux%zu", &n, &L, &d) != 3 || !n || !L || !d) {
            fprintf(stderr, "bench_core: BENCH_PREFILL=NxLxD\n");
            return 2;
        }
        struct prefill_arg one;
        prefill_init(&one, n, L, d, ATTN_OUT_OUTPUT, true);
        const char *serve = getenv("BENCH_PREFILL_SERVE");
        if (serve && strcmp(serve, "1") == 0) {
            prefill_serve(&one);
            prefill_free(&one);
            attn_pool_free(pool);
            return 0;
        }
        struct timed t = {run_prefill, &one, 0, 0};
        time_set(&t, 1);
        double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);   /* and the CPU time of 3 more */
        for (int i = 0; i < 3; i++)
            run_prefill(&one);
        double cpu = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 3;
        printf("prefill_ms %.3f kernel %s cpu_ms %.3f\n", t.med * 1e3, attn_dtype_kernel(ATTN_F32),
               cpu * 1e3);
        prefill_free(&one);
        attn_pool_free(pool);
        return 0;
    }
    float *a = rand_floats(2048 * 2048, 20), *b = rand_floats(2048 * 2048, 21);
    float *c = rand_floats(2048 * 2048, 22);
    gemm1 = (struct gemm_arg){2048, 1, a, b, c};
    gemm2 = (struct gemm_arg){2048, 2, a, b, c};
    rd = (struct read_arg){rand_floats((size_t)64 << 20, 23), (size_t)64 << 20, {0, 0}};

    /* BENCH_KERNELS_ONLY=1: the kernel rows alone (to compare kernels) */
    const char *only = getenv("BENCH_KERNELS_ONLY");
    if (only && strcmp(only, "1") == 0) {
        bench_kernels(2048, 128, 0.95, 0.9);
        bench_kernels(1024, 64, 0.85, 0.85);
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_MODELS_ONLY=1: issue 16's rows alone */
    const char *models_only = getenv("BENCH_MODELS_ONLY");
    if (models_only && strcmp(models_only, "1") == 0) {
        bench_models();
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_KV_DTYPES_ONLY=1: the narrow-cache decode rows alone */
    const char *kvd_only = getenv("BENCH_KV_DTYPES_ONLY");
    if (kvd_only && strcmp(kvd_only, "1") == 0) {
        bench_kv_dtypes();
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_DECODE_ONLY=1: the float32 decode rows alone */
    const char *decode_only = getenv("BENCH_DECODE_ONLY");
    if (decode_only && strcmp(decode_only, "1") == 0) {
        run_peer();
        bench_decode();
        bench_session(4096);
        bench_session(32768);
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_PAGED_ONLY=1: the paged cache rows alone */
    const char *paged_only = getenv("BENCH_PAGED_ONLY");
    if (paged_only && strcmp(paged_only, "1") == 0) {
        bench_paged();
        attn_pool_free(pool);
        return 0;
    }
    /* BENCH_MOVE_ONLY=1: session export and import in-process */
    const char *move_only = getenv("BENCH_MOVE_ONLY");
    if (move_only && strcmp(move_only, "1") == 0) {
        bench_move();
        attn_pool_free(pool);
        return 0;
    }
    const char *top_only = getenv("BENCH_TOP_K_ONLY");
    if (top_only && strcmp(top_only, "1") == 0) {
        bench_top_k();
        attn_pool_free(pool);
        return 0;
    }
    const char *half_only = getenv("BENCH_HALF_ONLY");
    if (half_only && strcmp(half_only, "1") == 0) {
        bench_prefill_half();
        attn_pool_free(pool);
        return 0;
    }
    run_peer();
    printf("float32; %d interleaved samples per figure (median, wall clock); "
           "2 cores = worker + 1 helper (attn_pool)\n", reps);
    bench_prefill_2048();
    bench_prefill_half();
    bench_prefill_1024();
    bench_kernels(2048, 128, 0.95, 0.9);
    bench_kernels(1024, 64, 0.85, 0.85);
    bench_decode();
    bench_session(4096);
    bench_session(32768);
    bench_paged();
    bench_kv_dtypes();
    bench_top_k();
    bench_models();
    free(a);
    free(b);
    free(c);
    free((void *)rd.x);
    attn_pool_free(pool);
    return 0;
}
