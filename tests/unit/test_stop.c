/*
 * tests/unit/test_stop.c — early stops of a pass (core/stop.h): a set
 * cancel flag or a past deadline makes a large pass return CORE_ESTOPPED at
 * a piece boundary, with and without a helper pool; a stop that is not due
 * changes no bit of the result (the pass is cut into the serial pass's own
 * tiles); the pause hook is called at the boundaries; the yield hook is
 * called between blocks of keys inside the pieces, on every kernel and in
 * the lse and top-k pass, on the helpers too, as often with helpers as
 * without and without changing a bit; timeout_ms
 * only ever lowers a deadline.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "core/pool.h"
#include "core/stop.h"
#include "tests/harness.h"

#define N 1024              /* n = L: 1024 * 1024 * 64 multiply-adds, at least two tiles on every
                               path (512-row tiles without a fused kernel, e.g. arm64) */
#define D 32

struct pass {
    struct attn_request r;
    struct attn_inputs in;
    struct attn_result out;
    float *q, *k, *v;
};

static void pass_init(struct pass *p)
{
    memset(p, 0, sizeof *p);
    p->q = malloc(N * D * sizeof(float));
    p->k = malloc(N * D * sizeof(float));
    p->v = malloc(N * D * sizeof(float));
    unsigned x = 12345;
    for (size_t i = 0; i < N * D; i++) {
        x = x * 1103515245u + 12345u;
        p->q[i] = (float)((x >> 8) % 2001) / 1000.0f - 1.0f;
        p->k[i] = (float)((x >> 4) % 1999) / 1000.0f - 1.0f;
        p->v[i] = (float)(x % 1997) / 1000.0f - 1.0f;
    }
    p->r.shape.h = p->r.shape.h_kv = 1;
    p->r.shape.n = p->r.shape.L = N;
    p->r.shape.d_k = p->r.shape.d_v = D;
    p->r.params.dtype = ATTN_F32;
    p->r.params.scale = attn_default_scale(D);
    p->r.outputs = ATTN_OUT_OUTPUT;
    p->in.q = p->q;
    p->in.k = p->k;
    p->in.v = p->v;
    p->out.output = calloc(N * D, sizeof(float));
}

static void pass_free(struct pass *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->out.output);
}

static atomic_int pauses;

static void count_pause(void *arg)
{
    (void)arg;
    atomic_fetch_add(&pauses, 1);
}

static void check_stops(struct attn_pool *pool)
{
    struct pass p, ref;
    pass_init(&p);
    pass_init(&ref);
    struct attn_ws *ws = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    CHECK_EQ_INT(attn_forward(&ref.r, &ref.in, &ref.out, NULL), CORE_OK);

    atomic_bool cancel = false;
    struct attn_stop st = {.cancel = &cancel, .pause = count_pause};
    attn_ws_set_stop(ws, &st);
    atomic_store(&pauses, 0);
    CHECK_EQ_INT(attn_forward(&p.r, &p.in, &p.out, ws), CORE_OK);
    CHECK(memcmp(p.out.output, ref.out.output, N * D * sizeof(float)) == 0);
    CHECK(atomic_load(&pauses) >= 2);           /* one call per piece */

    atomic_store(&cancel, true);
    CHECK_EQ_INT(attn_forward(&p.r, &p.in, &p.out, ws), CORE_ESTOPPED);
    atomic_store(&cancel, false);

    st.deadline_ns = attn_now_ns() - 1;        /* already past */
    CHECK_EQ_INT(attn_forward(&p.r, &p.in, &p.out, ws), CORE_ESTOPPED);
    st.deadline_ns = attn_now_ns() + 600ull * 1000000000ull;
    CHECK_EQ_INT(attn_forward(&p.r, &p.in, &p.out, ws), CORE_OK);
    CHECK(memcmp(p.out.output, ref.out.output, N * D * sizeof(float)) == 0);

    attn_ws_set_stop(ws, NULL);                 /* detached: nothing stops it */
    atomic_store(&cancel, true);
    CHECK_EQ_INT(attn_forward(&p.r, &p.in, &p.out, ws), CORE_OK);
    attn_ws_free(ws);
    pass_free(&p);
    pass_free(&ref);
}

TEST(stops_without_a_pool)
{
    check_stops(NULL);
}

TEST(stops_with_a_helper_pool)
{
    struct attn_pool *pool = attn_pool_new(2, NULL, NULL);
    CHECK(pool != NULL);
    check_stops(pool);
    attn_pool_free(pool);
}

static atomic_int yields, helper_yields;
static pthread_t test_thread;

static void count_yield(void *arg)
{
    (void)arg;
    atomic_fetch_add(&yields, 1);
    if (!pthread_equal(pthread_self(), test_thread))
        atomic_fetch_add(&helper_yields, 1);
}

/* n = 1024 rows against L = 4096 keys of width 32: four 1024-key
 * superblocks per tile in the fused kernels, eight 512-key blocks in the
 * loop kernel, and at least two tiles on every path (512 rows a tile
 * without a fused kernel). */
#define YN 1024
#define YL 4096
#define YD 32
#define YK 4                /* top-k of the extras pass */

/* count numbers in [-1, 1) from the harness's generator, seeded. */
static float *filled(size_t count, uint64_t seed)
{
    float *a = malloc(count * sizeof(float));
    for (size_t i = 0; a && i < count; i++)
        a[i] = (float)(t_rng_next(&seed) >> 40) / (float)(1u << 23) - 1.0f;
    return a;
}

struct ypass {
    const struct attn_request *r;
    const struct attn_inputs *in;
    bool extras;            /* attn_forward_extras with lse and top-k of the second of
                               two heads (cut into pieces of its own, each a pass on
                               the thread's own workspace), else attn_forward */
    float *o, *lse, *top_val;
    int64_t *top_idx;
    int yields, helper_yields, pauses;
};

/* One pass of y on ws (stop attached or not): its outputs, and the calls
 * of the stop's hooks it made. */
static enum core_status ypass_run(struct ypass *y, struct attn_ws *ws)
{
    struct attn_result out = {.output = y->o};
    atomic_store(&yields, 0);
    atomic_store(&helper_yields, 0);
    atomic_store(&pauses, 0);
    enum core_status st;
    if (y->extras) {
        static const size_t second[1] = {1};
        struct attn_extras x = {ATTN_X_LSE | ATTN_X_TOPK, second, 1, YK};
        struct attn_extras_out xo = {.lse = y->lse, .top_idx = y->top_idx,
                                     .top_val = y->top_val};
        st = attn_forward_extras(y->r, y->in, NULL, &x, &out, &xo, ws);
    } else {
        st = attn_forward(y->r, y->in, &out, ws);
    }
    y->yields = atomic_load(&yields);
    y->helper_yields = atomic_load(&helper_yields);
    y->pauses = atomic_load(&pauses);
    return st;
}

static struct ypass ypass_new(const struct attn_request *r, const struct attn_inputs *in,
                              bool extras)
{
    struct ypass y = {r, in, extras, calloc(YN * YD, sizeof(float)),
                      calloc(YN, sizeof(float)), calloc(YN * YK, sizeof(float)),
                      calloc(YN * YK, sizeof(int64_t)), 0, 0, 0};
    return y;
}

static void ypass_free(struct ypass *y)
{
    free(y->o);
    free(y->lse);
    free(y->top_val);
    free(y->top_idx);
}

static bool ypass_same(const struct ypass *a, const struct ypass *b)
{
    return memcmp(a->o, b->o, YN * YD * sizeof(float)) == 0 &&
           memcmp(a->lse, b->lse, YN * sizeof(float)) == 0 &&
           memcmp(a->top_val, b->top_val, YN * YK * sizeof(float)) == 0 &&
           memcmp(a->top_idx, b->top_idx, YN * YK * sizeof(int64_t)) == 0;
}

/* The pass of ref's kind with a stop whose yield counts: the same bits as
 * ref, yields inside the pieces, and as many with a helper pool as without
 * (once helpers have taken pieces: up to 20 tries, since a helper may wake
 * too late for a pass; one try when quick, as under memcheck, which runs
 * one thread at a time and where helpers seldom join, and qemu). */
static void check_yields(struct ypass *ref, struct attn_pool *pool, const char *what)
{
    struct ypass alone = ypass_new(ref->r, ref->in, ref->extras);
    struct ypass pooled = ypass_new(ref->r, ref->in, ref->extras);
    struct attn_ws *ws = attn_ws_new();
    struct attn_stop st = {.pause = count_pause, .yield = count_yield};
    attn_ws_set_stop(ws, &st);
    CHECK_EQ_INT(ypass_run(&alone, ws), CORE_OK);
    CHECK(ypass_same(&alone, ref));
    attn_ws_set_pool(ws, pool);
    int tries = t_quick() ? 1 : 20;
    for (int i = 0; i < tries && (i == 0 || pooled.helper_yields == 0); i++)
        CHECK_EQ_INT(ypass_run(&pooled, ws), CORE_OK);
    CHECK(ypass_same(&pooled, ref));
    CHECK(alone.pauses >= 2);                   /* cut into tiles */
    CHECK(alone.yields >= 4 * alone.pauses);    /* inside the tiles, not only between */
    CHECK(alone.yields <= 64 * alone.pauses);   /* per block of keys, not per row */
    CHECK(t_quick() || pooled.helper_yields > 0);   /* the helpers' pieces yield too */
    CHECK_EQ_INT(pooled.yields, alone.yields);
    if (alone.pauses < 2 || alone.yields < 4 * alone.pauses ||
        alone.yields > 64 * alone.pauses || (!t_quick() && pooled.helper_yields == 0) ||
        pooled.yields != alone.yields)
        fprintf(stderr, "%s: %d yields over %d pieces; with helpers %d, %d on helpers\n",
                what, alone.yields, alone.pauses, pooled.yields, pooled.helper_yields);
    attn_ws_free(ws);
    ypass_free(&alone);
    ypass_free(&pooled);
}

TEST(yields_between_key_blocks_on_every_kernel)
{
    test_thread = pthread_self();
    /* two heads: the plain pass reads the first (h = 1), the extras pass
     * the second of both */
    float *q = filled(2 * YN * YD, 1), *k = filled(2 * YL * YD, 2), *v = filled(2 * YL * YD, 3);
    struct attn_pool *pool = attn_pool_new(2, NULL, NULL);
    CHECK(q && k && v && pool);
    struct attn_request r = {0};
    r.shape.h = r.shape.h_kv = 1;
    r.shape.n = YN;
    r.shape.L = YL;
    r.shape.d_k = r.shape.d_v = YD;
    r.params.dtype = ATTN_F32;
    r.params.scale = attn_default_scale(YD);
    r.outputs = ATTN_OUT_OUTPUT;
    struct attn_request r2 = r;
    r2.shape.h = r2.shape.h_kv = 2;
    struct attn_inputs in = {.q = q, .k = k, .v = v};
    /* every kernel here; quick (memcheck, qemu): the one in use */
    unsigned have = t_quick() ? 1u << attn_kernel_active() : attn_kernel_supported();
    for (int kn = ATTN_KERNEL_NONE; kn < ATTN_KERNEL_AUTO; kn++) {
        if (!(have & (1u << kn)))
            continue;
        attn_kernel_set((enum attn_kernel)kn);
        /* quick (memcheck, qemu): the plain pass only, whose pieces are the
         * helpers' too; the extras pass took minutes under memcheck */
        for (int extras = 0; extras < (t_quick() ? 1 : 2); extras++) {
            struct ypass ref = ypass_new(extras ? &r2 : &r, &in, extras);
            CHECK_EQ_INT(ypass_run(&ref, NULL), CORE_OK);   /* no stop: no yields */
            CHECK_EQ_INT(ref.yields, 0);
            char what[64];
            snprintf(what, sizeof what, "kernel %s%s", attn_kernel_name((enum attn_kernel)kn),
                     extras ? ", lse and top-k of one head" : "");
            check_yields(&ref, pool, what);
            ypass_free(&ref);
        }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
    attn_pool_free(pool);
    free(q);
    free(k);
    free(v);
}

TEST(timeout_only_lowers_the_deadline)
{
    struct attn_stop st = {.cancel = NULL};
    st.start_ns = attn_now_ns();
    attn_stop_within_ms(&st, 1000);
    CHECK(st.deadline_ns == st.start_ns + 1000000000ull);
    attn_stop_within_ms(&st, 5000);             /* later: kept */
    CHECK(st.deadline_ns == st.start_ns + 1000000000ull);
    attn_stop_within_ms(&st, 10);               /* sooner: taken */
    CHECK(st.deadline_ns == st.start_ns + 10000000ull);
    attn_stop_within_ms(&st, UINT64_MAX);       /* overflow: ignored */
    CHECK(st.deadline_ns == st.start_ns + 10000000ull);
    CHECK(!attn_stop_due(NULL));
    CHECK(!attn_stop_boundary(NULL));
}

int main(void)
{
    RUN(stops_without_a_pool);
    RUN(stops_with_a_helper_pool);
    RUN(yields_between_key_blocks_on_every_kernel);
    RUN(timeout_only_lowers_the_deadline);
    TEST_MAIN_END();
}
