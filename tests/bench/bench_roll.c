/*
 * tests/bench/bench_roll.c — steady-state decode on a rolling session
 * (`make bench`, section roll): one session of the store, float32, 8 query
 * heads over 2 kv heads, d = 64, RoPE, window {left 1023, sinks 4}, fed one
 * row and one query per step (sess_attend) for 16x the window. Reported:
 * the rows and bytes held (bounded by ceil(sinks/64)*64 + left + 63 rows)
 * and the median time per token at several lengths, next to the same step
 * on a session that does not roll at the window's length (same run): the
 * time per token must not grow with the tokens appended.
 *
 *   bench_roll [reps]     reps: repeats of the whole decode (median of
 *                         the per-token medians; default 3)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/attn.h"
#include "core/kv.h"
#include "core/store.h"
#include "tests/bench/bench_util.h"

enum { H = 8, HKV = 2, D = 64, LEFT = 1023, SINKS = 4, TOKENS = 16 * 1024, SPAN = 256 };
enum { PAGE = KV_PAGE_ROWS };   /* rows are let go a page at a time */
/* The most rows the rolling session holds: the sinks' pages, the window,
 * and the rest of the page being let go; it holds PAGE fewer after each
 * page goes. */
enum { HELD_MOST = (SINKS + PAGE - 1) / PAGE * PAGE + LEFT + PAGE - 1 };

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The lengths at which the per-token median is taken (over SPAN steps
 * ending there). */
static const size_t marks[] = {2 * 1024, 4 * 1024, 8 * 1024, 16 * 1024};
#define NMARKS (sizeof marks / sizeof marks[0])

struct run {
    double us[NMARKS];      /* median microseconds per token before each mark */
    double plain_us;        /* a session that does not roll, at the held rows */
    size_t max_held, max_bytes;
};

/* Decode `tokens` steps on a new session; per-token times into t[tokens]. */
static int decode(struct sess_store *st, bool rolling, size_t tokens, double *t,
                  size_t *max_held, size_t *max_bytes)
{
    struct sess_spec sp = {.shape = {.h = H, .h_kv = HKV, .d_k = D, .d_v = D},
                           .params = {.dtype = ATTN_F32, .scale = attn_default_scale(D),
                                      .rope = true, .rope_base = 10000},
                           .max_tokens = TOKENS + 1};
    if (rolling)
        sp.window = (struct attn_window){.on = true, .left = LEFT, .right = -1, .sinks = SINKS};
    char id[SESS_ID_MAX];
    struct sess *s;
    if (sess_create(st, &sp, id) != CORE_OK || sess_acquire(st, id, &s) != CORE_OK)
        return -1;
    float k[HKV * D], v[HKV * D], q[H * D], o[H * D];
    struct attn_ws *ws = attn_ws_new();
    struct sess_query qq = {.q = q, .n = 1, .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                            .outputs = ATTN_OUT_OUTPUT};
    int rc = 0;
    for (size_t i = 0; i < tokens && rc == 0; i++) {
        for (size_t j = 0; j < HKV * D; j++) {
            k[j] = frand();
            v[j] = frand();
        }
        for (size_t j = 0; j < H * D; j++)
            q[j] = frand();
        struct attn_result res = {.output = o};
        double t0 = bench_mono_s();
        rc = sess_attend(st, s, k, v, 1, &qq, &res, ws) == CORE_OK ? 0 : -1;
        t[i] = bench_mono_s() - t0;
        size_t held = kv_held(sess_cache(s)), bytes = kv_bytes(sess_cache(s));
        *max_held = held > *max_held ? held : *max_held;
        *max_bytes = bytes > *max_bytes ? bytes : *max_bytes;
    }
    attn_ws_free(ws);
    sess_release(st, s);
    sess_delete(st, id);
    return rc;
}

static int one_run(struct run *r)
{
    struct sess_config cfg = {.max_sessions = 4, .max_cache_bytes = 0};
    struct sess_store *st = sess_store_new(&cfg);
    double *t = malloc(TOKENS * sizeof *t), tmp[SPAN];
    size_t held = 0, bytes = 0, ph = 0, pb = 0;
    int rc = st && t ? decode(st, true, TOKENS, t, &held, &bytes) : -1;
    for (size_t m = 0; rc == 0 && m < NMARKS; m++) {
        memcpy(tmp, t + marks[m] - SPAN, sizeof tmp);
        r->us[m] = bench_median(tmp, SPAN) * 1e6;
    }
    r->max_held = held;
    r->max_bytes = bytes;
    /* the plain session at as many rows as the rolling one holds
     * (HELD_MOST - PAGE + 1 .. HELD_MOST): its last PAGE steps, not SPAN
     * steps that would start ~190 rows lower */
    if (rc == 0)
        rc = decode(st, false, HELD_MOST, t, &ph, &pb);
    if (rc == 0) {
        memcpy(tmp, t + HELD_MOST - PAGE, PAGE * sizeof *tmp);
        r->plain_us = bench_median(tmp, PAGE) * 1e6;
    }
    free(t);
    sess_store_free(st);
    return rc;
}

int main(int argc, char **argv)
{
    size_t reps = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 3;
    if (reps < 1 || reps > 50)
        reps = 3;
    struct run *runs = calloc(reps, sizeof *runs);
    double v[50];
    for (size_t i = 0; i < reps; i++)
        if (!runs || one_run(&runs[i]) != 0) {
            fprintf(stderr, "bench_roll: a decode step failed\n");
            return 1;
        }
    double us[NMARKS], plain;
    for (size_t m = 0; m < NMARKS; m++) {
        for (size_t i = 0; i < reps; i++)
            v[i] = runs[i].us[m];
        us[m] = bench_median(v, reps);
    }
    for (size_t i = 0; i < reps; i++)
        v[i] = runs[i].plain_us;
    plain = bench_median(v, reps);
    size_t bound = HELD_MOST, row = HKV * 2 * D * sizeof(float);
    printf("rolling decode, f32 h=%d h_kv=%d d=%d RoPE, window left %d sinks %d, "
           "%d tokens, %zu runs\n", H, HKV, D, LEFT, SINKS, TOKENS, reps);
    for (size_t m = 0; m < NMARKS; m++)
        printf("  tokens %6zu: %.1f us/token (median of the %d steps before)\n", marks[m],
               us[m], SPAN);
    printf("  plain session at %zu rows: %.1f us/token\n", bound, plain);
    printf("  held rows at most %zu (bound %zu), bytes at most %zu (%.2f MiB)\n",
           runs[0].max_held, bound, runs[0].max_bytes, runs[0].max_bytes / 1048576.0);
    char ratio[64];
    snprintf(ratio, sizeof ratio, "%.2f of 2k tokens", us[NMARKS - 1] / us[0]);
    printf("BENCHROW|rolling decode us/token at 16k tokens vs 2k (window 1023+4)|-|-|"
           "at 2k tokens|%.1f|%.1f|us|%s|<=1.15|%s\n", us[0], us[NMARKS - 1], ratio,
           us[NMARKS - 1] <= 1.15 * us[0] ? "PASS" : "MISS");
    snprintf(ratio, sizeof ratio, "%.2f of plain", us[NMARKS - 1] / plain);
    printf("BENCHROW|rolling decode at 16k tokens vs a plain session of the held rows|-|-|"
           "plain %zu rows|%.1f|%.1f|us|%s|<=1.3|%s\n", bound, plain, us[NMARKS - 1], ratio,
           us[NMARKS - 1] <= 1.3 * plain ? "PASS" : "MISS");
    snprintf(ratio, sizeof ratio, "%.2f of bound", (double)runs[0].max_bytes /
                                                       (double)((bound + 64) * row));
    printf("BENCHROW|rolling session bytes held over 16k tokens|bound (rows+64)*row|%zu|-|-|"
           "%zu|B|%s|<=bound|%s\n", (bound + 64) * row, runs[0].max_bytes, ratio,
           runs[0].max_held <= bound && runs[0].max_bytes <= (bound + 64) * row ? "PASS"
                                                                                : "MISS");
    free(runs);
    return 0;
}
