/*
 * tests/bench/bench_api.c — the api layer's number and tensor paths next to
 * libc and memory limits measured in the same process (a benchmark, not a
 * test). Prints human-readable lines and BENCHROW lines (tests/bench/run.sh).
 *
 * Rows:
 *   JSON numbers in   api_numarray_parse (the reader api_handle uses for
 *                     q/k/v) on "[0.123456789, ...]" text of 1e6 numbers,
 *                     as ../shared/bench/json_bench.c generates it, next to
 *                     a bare strtod loop over the same text.
 *   JSON numbers out  api_write_matrix (shortest round-trip, as responses
 *                     print) of 1e6 float64 results of arithmetic (17
 *                     significant digits mostly) and of float32 values,
 *                     next to the same strtod loop and snprintf("%.17g").
 *   base64 in-process api_handle on POST /v1/attention with base64 float32
 *                     q/k/v and "encoding":"base64" (output only): tensor
 *                     payload (q, k, v and output bytes) per second, next to
 *                     memcpy of the same bytes.
 *   small request     api_handle on ../shared/bench/req/small_n4_L4_d8.json:
 *                     microseconds per request (detail, no goal).
 * Each figure is the median of reps samples (default 5) of at least 20 ms,
 * interleaved with its limit's samples, in thread CPU time.
 *
 * usage: bench_api [reps] [small_request.json]
 *
 *   half prefill      api_handle on n=L=2048 d=128 float16 and bfloat16 base64
 *                     requests (output only) beside the float32 one, on 2
 *                     cores (a pool of one helper), wall clock, malloc
 *                     set as the server sets it: the half rates as
 *                     fractions of the float32 rate.
 *
 * BENCH_API_ONLY=half runs only the half prefill rows;
 * BENCH_API_ONLY=small runs only api_handle on small_request.json (default
 * ../shared/bench/req/small_n4_L4_d8.json), BENCH_API_CALLS times (default
 * 200000), in a plain loop (a fixed count, for callgrind's instruction counts).
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/api.h"
#include "api/codec/base64.h"
#include "api/codec/buf.h"
#include "api/codec/numread.h"
#include "api/codec/write.h"
#include "core/attn.h"
#include "core/half.h"
#include "core/pool.h"
#include "tests/bench/bench_util.h"

static int reps = 5;

static bool wall;                       /* wall clock instead of thread CPU time */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef void (*bench_fn)(void *);

/* Seconds per call: median over reps samples of >= 20 ms each. */
static double time_fn(bench_fn fn, void *arg)
{
    double s[64];
    int calls = 1;
    double t0 = now_s();
    fn(arg);                                    /* warm-up, and calibration */
    double one = now_s() - t0;
    if (one < 0.02)
        calls = (int)(0.02 / (one > 1e-7 ? one : 1e-7)) + 1;
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        for (int c = 0; c < calls; c++)
            fn(arg);
        s[r] = (now_s() - t0) / calls;
    }
    return bench_median(s, reps);
}

/* Interleaved: a sample of fa, then of fb, reps times; medians in *ta, *tb. */
static void time_pair(bench_fn fa, void *a, bench_fn fb, void *b, double *ta, double *tb)
{
    double sa[64], sb[64];
    int keep = reps;
    reps = 1;
    for (int r = 0; r < keep; r++) {
        sa[r] = time_fn(fa, a);
        sb[r] = time_fn(fb, b);
    }
    reps = keep;
    *ta = bench_median(sa, reps);
    *tb = bench_median(sb, reps);
}

static volatile double sink;

/* ---- numbers in ---------------------------------------------------------- */

struct text {
    char *s;
    size_t len, count;
};

/* "[0.123456789, 0.987654321, ...]": json_bench.c's gen format. */
static struct text gen_text(size_t count)
{
    struct text t = {malloc(count * 13 + 16), 0, count};
    uint64_t x = 88172645463325252ull;
    t.s[t.len++] = '[';
    for (size_t i = 0; i < count; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned frac = (unsigned)(x % 1000000000u);
        t.len += (size_t)snprintf(t.s + t.len, 16, "%s0.%09u", i ? ", " : "", frac);
    }
    t.s[t.len++] = ']';
    t.s[t.len] = '\0';
    return t;
}

static void run_strtod(void *arg)
{
    const struct text *t = arg;
    const char *p = t->s + 1;
    double acc = 0;
    for (size_t i = 0; i < t->count; i++) {
        char *end;
        acc += strtod(p, &end);
        p = end + 2;                            /* ", " */
    }
    sink = acc;
}

static void run_numread(void *arg)
{
    const struct text *t = arg;
    struct api_numarray a;
    if (api_numarray_parse(t->s, t->len, t->count, &a) != t->len || a.count != t->count) {
        fprintf(stderr, "bench_api: api_numarray_parse failed\n");
        exit(1);
    }
    sink = a.data[t->count / 2];
    api_numarray_free(&a);
}

/* ---- numbers out --------------------------------------------------------- */

struct mat {
    const void *data;
    enum attn_dtype dt;
    size_t count;
    size_t bytes;                               /* last output's length */
};

static void run_write(void *arg)
{
    struct mat *m = arg;
    struct api_buf b;
    size_t shape[2] = {m->count / 1000, 1000};
    api_buf_init(&b, (size_t)1 << 30);
    if (!api_write_matrix(&b, m->data, m->dt, 2, shape, 0, false)) {
        fprintf(stderr, "bench_api: api_write_matrix failed\n");
        exit(1);
    }
    m->bytes = b.len;
    api_buf_free(&b);
}

static void run_snprintf(void *arg)
{
    struct mat *m = arg;
    const double *d = m->data;
    char *out = malloc(m->count * 26 + 2);
    size_t len = 0;
    for (size_t i = 0; i < m->count; i++)
        len += (size_t)snprintf(out + len, 26, "%.17g,", d[i]);
    m->bytes = len;
    free(out);
}

/* ---- base64 through api_handle --------------------------------------------- */

struct b64req {
    struct api_ctx *ctx;
    struct api_request q;
    size_t payload;                             /* tensor bytes in and out */
    void *src, *dst;                            /* memcpy limit */
};

static void run_handle(void *arg)
{
    struct b64req *r = arg;
    struct api_response resp;
    api_handle(r->ctx, &r->q, &resp);
    if (resp.status != 200) {
        fprintf(stderr, "bench_api: status %d: %.*s\n", resp.status,
                (int)(resp.body_len < 400 ? resp.body_len : 400), resp.body);
        exit(1);
    }
    api_response_free(&resp);
}

static void run_memcpy(void *arg)
{
    struct b64req *r = arg;
    memcpy(r->dst, r->src, r->payload);
    sink = ((volatile char *)r->dst)[r->payload / 2];
}

static const char *header_json(void *arg, const char *name)
{
    (void)arg;
    return strcasecmp(name, "Content-Type") == 0 ? "application/json" : NULL;
}

/* Append {"shape":[rows,cols],"dtype":dt,"data":"..."} of random floats
 * (dt "float32", "float16" or "bfloat16": 4 or 2 bytes little-endian). */
static void put_tensor(struct api_buf *b, const char *key, size_t rows, size_t cols,
                       const char *dt, uint64_t *x)
{
    size_t n = rows * cols;
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        f[i] = (float)((double)(*x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        h[i] = strcmp(dt, "float16") == 0 ? half_f16_from_f32(f[i]) : half_bf16_from_f32(f[i]);
    }
    api_buf_printf(b, "\"%s\":{\"shape\":[%zu,%zu],\"dtype\":\"%s\",\"data\":\"", key,
                   rows, cols, dt);
    if (strcmp(dt, "float32") == 0)
        api_base64_encode(b, f, n * sizeof *f);
    else
        api_base64_encode(b, h, n * sizeof *h);
    api_buf_puts(b, "\"}");
    free(f);
    free(h);
}

/* The codec alone on the request's payload, for detail. */
struct codec {
    const void *bytes;
    size_t n;
    char *text;
    size_t text_len;
    void *out;
    struct api_buf enc;
};

static void run_decode(void *arg)
{
    struct codec *c = arg;
    if (!api_base64_decode(c->text, c->text_len, c->out))
        exit(1);
    sink = ((volatile char *)c->out)[c->n / 2];
}

static void run_encode(void *arg)
{
    struct codec *c = arg;
    c->enc.len = 0;
    if (!api_base64_encode(&c->enc, c->bytes, c->n))
        exit(1);
    sink = c->enc.data[c->enc.len / 2];
}

/* POST /v1/attention, base64 in and out in dtype dt, output only. */
static char *b64_body(size_t n, size_t L, size_t d, const char *dt, size_t *len)
{
    struct api_buf b;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    api_buf_init(&b, (size_t)1 << 30);
    api_buf_putc(&b, '{');
    put_tensor(&b, "q", n, d, dt, &x);
    api_buf_putc(&b, ',');
    put_tensor(&b, "k", L, d, dt, &x);
    api_buf_putc(&b, ',');
    put_tensor(&b, "v", L, d, dt, &x);
    api_buf_printf(&b, ",\"dtype\":\"%s\",\"encoding\":\"base64\",\"return\":[\"output\"]}",
                   dt);
    return api_buf_take(&b, len);
}

/* ---- rows ------------------------------------------------------------------ */

static void row(const char *name, const char *limit_name, double limit, double v,
                const char *unit, double goal_ratio, const char *goal_text, double goal_abs)
{
    double ratio = v / limit;
    int pass = goal_abs > 0 ? v >= goal_abs : ratio >= goal_ratio;
    printf("BENCHROW|%s|%s|%.2f|-|-|%.2f|%s|%.2f of %s|%s|%s\n", name, limit_name, limit, v,
           unit, ratio, limit_name, goal_text, pass ? "PASS" : "MISS");
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n > 0 ? malloc((size_t)n) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    *len = s ? (size_t)n : 0;
    return s;
}

/* BENCH_API_ONLY=small: api_handle on the small body, a fixed number of calls. */
static int bench_small_only(struct api_ctx *ctx, struct attn_ws *ws, const char *path)
{
    size_t slen;
    char *small = read_file(path, &slen);
    if (!small) {
        fprintf(stderr, "bench_api: cannot read %s\n", path);
        return 1;
    }
    const char *env = getenv("BENCH_API_CALLS");
    char *end = NULL;
    long calls = env ? strtol(env, &end, 10) : 200000;
    if (env && (*end != '\0' || calls <= 0))
        calls = 200000;
    struct b64req sr = {ctx, {0}, 0, NULL, NULL};
    sr.q.method = "POST";
    sr.q.path = "/v1/attention";
    sr.q.header = header_json;
    sr.q.body = small;
    sr.q.body_len = slen;
    sr.q.ws = ws;
    double t0 = now_s();
    for (long c = 0; c < calls; c++)
        run_handle(&sr);
    double t = (now_s() - t0) / (double)calls;
    printf("small request (%s): api_handle %.2f us per request (%ld calls)\n", path, t * 1e6,
           calls);
    free(small);
    return 0;
}

/* The JSON number rows: parse vs strtod, print vs strtod. */
static void bench_numbers(void)
{
    /* numbers in */
    struct text t = gen_text(1000000);
    double t_strtod, t_read;
    time_pair(run_strtod, &t, run_numread, &t, &t_strtod, &t_read);
    double m_strtod = t.count / t_strtod / 1e6, m_read = t.count / t_read / 1e6;
    printf("numbers in: api_numarray_parse %.1f M/s (%.0f MB/s); strtod loop %.1f M/s\n",
           m_read, t.len / t_read / 1e6, m_strtod);
    row("JSON numbers in (api_numarray_parse, 1e6 numbers)", "strtod loop M numbers/s",
        m_strtod, m_read, "M numbers/s", 0, ">=12 M/s", 12);

    /* numbers out: float64 arithmetic results, and float32 */
    size_t count = 1000000;
    double *d64 = malloc(count * sizeof *d64);
    float *f32 = malloc(count * sizeof *f32);
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < count; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d64[i] = ((double)(x >> 11) / 9007199254740992.0 - 0.5) * 3.0;
        f32[i] = (float)d64[i];
    }
    struct mat m64 = {d64, ATTN_F64, count, 0}, m32 = {f32, ATTN_F32, count, 0},
               msn = {d64, ATTN_F64, count, 0};
    double t_w64, t_w32, t_sn, t_strtod2;
    time_pair(run_strtod, &t, run_write, &m64, &t_strtod2, &t_w64);
    time_pair(run_snprintf, &msn, run_write, &m32, &t_sn, &t_w32);
    double m_strtod2 = t.count / t_strtod2 / 1e6;
    printf("numbers out: float64 %.1f M/s (%.1f bytes each), float32 %.1f M/s (%.1f bytes each); "
           "snprintf %%.17g %.1f M/s; strtod loop %.1f M/s\n",
           count / t_w64 / 1e6, (double)m64.bytes / count, count / t_w32 / 1e6,
           (double)m32.bytes / count, count / t_sn / 1e6, m_strtod2);
    row("JSON numbers out float64 (api_write_matrix, shortest)", "strtod loop M numbers/s",
        m_strtod2, count / t_w64 / 1e6, "M numbers/s", 0, ">=15 M/s", 15);
    row("JSON numbers out float32 (api_write_matrix, shortest)", "strtod loop M numbers/s",
        m_strtod2, count / t_w32 / 1e6, "M numbers/s", 0, ">=15 M/s", 15);
    free(d64);
    free(f32);
    free(t.s);
}

/* Prefill n=L=2048 d=128 in float16 and bfloat16 next to the same request
 * in float32, base64 in and out, through api_handle as a server worker
 * runs it (its workspace on a pool of one helper: 2 cores), wall clock,
 * samples interleaved: each half rate as a fraction of the float32 one. */
static void bench_half_prefill(struct api_ctx *ctx)
{
    static const char *const dts[3] = {"float32", "float16", "bfloat16"};
    size_t n = 2048, d = 128;
    /* malloc as server/main.c sets it (MMAP/TRIM_THRESHOLD_BYTES): without
     * it each request's MiB buffers are mapped and unmapped, and their page
     * faults (2,500 per half request, 280 per float32 one, on KVM) were
     * timed rather than the pass. This row runs last: the setting stays. */
    mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 4 * 1024 * 1024);
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    if (!pool || !ws) {
        fprintf(stderr, "bench_api: no pool\n");
        exit(1);
    }
    attn_ws_set_pool(ws, pool);
    struct b64req rq[3];
    double s[3][64];
    for (int i = 0; i < 3; i++) {
        size_t len;
        char *body = b64_body(n, n, d, dts[i], &len);
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].ctx = ctx;
        rq[i].q = (struct api_request){.method = "POST", .path = "/v1/attention",
                                       .header = header_json, .body = body, .body_len = len,
                                       .ws = ws};
    }
    int keep = reps;
    wall = true;
    reps = 1;
    for (int r = 0; r < keep; r++)
        for (int i = 0; i < 3; i++)
            s[i][r] = time_fn(run_handle, &rq[i]);
    reps = keep;
    wall = false;
    double t32 = bench_median(s[0], reps), gf = 4.0 * (double)n * (double)n * (double)d / 1e9;
    printf("prefill n=L=%zu d=%zu via api_handle (base64, 2 cores): float32 %.2f ms (%.0f GF/s)",
           n, d, t32 * 1e3, gf / t32);
    for (int i = 1; i < 3; i++) {
        double t = bench_median(s[i], reps);
        printf(", %s %.2f ms", dts[i], t * 1e3);
    }
    printf("\n");
    for (int i = 1; i < 3; i++) {
        char name[128];
        double t = bench_median(s[i], reps);
        snprintf(name, sizeof name,
                 "prefill %s n=L=2048 d=128 output only (api_handle base64, 2 cores)", dts[i]);
        printf("BENCHROW|%s|float32 GF/s|%.1f|-|-|%.1f|GF/s|%.2f of float32|>=0.9 of float32|%s\n",
               name, gf / t32, gf / t, t32 / t, t32 / t >= 0.9 ? "PASS" : "MISS");
    }
    for (int i = 0; i < 3; i++)
        free((void *)rq[i].q.body);
    attn_ws_free(ws);
    attn_pool_free(pool);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        long n = strtol(argv[1], NULL, 10);
        reps = n > 0 && n <= 64 ? (int)n : 5;
    }
    struct api_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.cfg.max_body_bytes = (size_t)64 << 20;
    ctx.cfg.max_elements = (size_t)1 << 24;
    ctx.cfg.version = "bench";
    ctx.cfg.workers = 1;
    struct attn_ws *ws = attn_ws_new();

    printf("1 thread, %d interleaved samples per figure (median, thread CPU time)\n", reps);

    /* BENCH_API_ONLY=base64 skips the number rows (for profiling base64);
       BENCH_API_ONLY=small runs only the small request. */
    const char *only = getenv("BENCH_API_ONLY");
    if (only && strcmp(only, "small") == 0) {
        int rc = bench_small_only(&ctx, ws,
                                  argc > 2 ? argv[2] : "../shared/bench/req/small_n4_L4_d8.json");
        attn_ws_free(ws);
        return rc;
    }
    if (only && strcmp(only, "half") == 0) {
        bench_half_prefill(&ctx);
        attn_ws_free(ws);
        return 0;
    }
    if (!only || strcmp(only, "base64") != 0)
        bench_numbers();

    /* base64 through api_handle */
    size_t n = 16, L = 2048, dk = 64, blen;
    char *body = b64_body(n, L, dk, "float32", &blen);
    struct b64req br = {&ctx, {0}, (n * dk + 2 * L * dk + n * dk) * sizeof(float), NULL, NULL};
    br.q.method = "POST";
    br.q.path = "/v1/attention";
    br.q.header = header_json;
    br.q.body = body;
    br.q.body_len = blen;
    br.q.ws = ws;
    br.src = malloc(br.payload);
    br.dst = malloc(br.payload);
    memset(br.src, 1, br.payload);
    double t_h, t_mc;
    time_pair(run_memcpy, &br, run_handle, &br, &t_mc, &t_h);
    printf("base64 in-process: n=%zu L=%zu d=%zu float32, %zu payload bytes, body %zu bytes: "
           "%.3f ms per request, %.2f GB/s payload; memcpy %.1f GB/s\n",
           n, L, dk, br.payload, blen, t_h * 1e3, br.payload / t_h / 1e9, br.payload / t_mc / 1e9);
    row("base64 tensors in-process (api_handle, f32 n=16 L=2048 d=64)", "memcpy GB/s",
        br.payload / t_mc / 1e9, br.payload / t_h / 1e9, "GB/s", 0, ">=1 GB/s payload", 1);

    /* the codec alone, for detail */
    struct codec cd = {br.src, br.payload, NULL, 0, br.dst, {0}};
    api_buf_init(&cd.enc, (size_t)1 << 30);
    run_encode(&cd);
    cd.text = api_buf_take(&cd.enc, &cd.text_len);
    api_buf_init(&cd.enc, (size_t)1 << 30);
    /* on each path this CPU runs (api/codec/base64.h), the one in use last */
    for (int p = API_B64_SCALAR; p <= API_B64_AVX512; p++) {
        enum api_b64_path path = (enum api_b64_path)p;
        if (api_base64_use(path) != path)
            continue;
        double t_dec, t_enc;
        time_pair(run_decode, &cd, run_encode, &cd, &t_dec, &t_enc);
        printf("base64 codec alone on %zu bytes (%s): decode %.2f GB/s of bytes out, encode "
               "%.2f GB/s of bytes in\n", br.payload, api_base64_path_name(path),
               br.payload / t_dec / 1e9, br.payload / t_enc / 1e9);
    }
    api_base64_use(API_B64_AVX512);
    free(cd.text);
    api_buf_free(&cd.enc);

    /* the small request, for detail */
    if (argc > 2) {
        size_t slen;
        char *small = read_file(argv[2], &slen);
        if (small) {
            struct b64req sr = br;
            sr.q.body = small;
            sr.q.body_len = slen;
            double ts = time_fn(run_handle, &sr);
            printf("small request (%s): api_handle %.1f us per request\n", argv[2], ts * 1e6);
            free(small);
        }
    }
    bench_half_prefill(&ctx);
    free(body);
    free(br.src);
    free(br.dst);
    attn_ws_free(ws);
    return 0;
}
