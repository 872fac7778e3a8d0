/*
 * tests/unit/test_stop.c — early stops of a pass (core/stop.h): a set
 * cancel flag or a past deadline makes a large pass return CORE_ESTOPPED at
 * a piece boundary, with and without a helper pool; a stop that is not due
 * changes no bit of the result (the pass is cut into the serial pass's own
 * tiles); the pause hook is called at the boundaries; the yield hook is
 * called between blocks of keys inside the pieces, on every kernel, as
 * often with helpers as without and without changing a bit; timeout_ms
 * only ever lowers a deadline.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
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

static atomic_int yields;

static void count_yield(void *arg)
{
    (void)arg;
    atomic_fetch_add(&yields, 1);
}

/* n = 1024 rows against L = 4096 keys of width 32: four 1024-key
 * superblocks per tile in the fused kernels, eight 512-key blocks in the
 * loop kernel, and at least two tiles on every path (512 rows a tile
 * without a fused kernel). */
#define YN 1024
#define YL 4096
#define YD 32

static float *filled(size_t count, unsigned seed)
{
    float *a = malloc(count * sizeof(float));
    for (size_t i = 0; a && i < count; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return a;
}

/* Yields and pauses of one pass of r on kernel k, with pool or without;
 * its output into o. */
static void yield_pass(const struct attn_request *r, const struct attn_inputs *in,
                       struct attn_pool *pool, float *o, int *n_yields, int *n_pauses)
{
    struct attn_ws *ws = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    struct attn_stop st = {.pause = count_pause, .yield = count_yield};
    attn_ws_set_stop(ws, &st);
    struct attn_result out = {.output = o};
    atomic_store(&yields, 0);
    atomic_store(&pauses, 0);
    CHECK_EQ_INT(attn_forward(r, in, &out, ws), CORE_OK);
    *n_yields = atomic_load(&yields);
    *n_pauses = atomic_load(&pauses);
    attn_ws_free(ws);
}

TEST(yields_between_key_blocks_on_every_kernel)
{
    float *q = filled(YN * YD, 1), *k = filled(YL * YD, 2), *v = filled(YL * YD, 3);
    float *ref = calloc(YN * YD, sizeof(float)), *o = calloc(YN * YD, sizeof(float));
    struct attn_pool *pool = attn_pool_new(2, NULL, NULL);
    CHECK(q && k && v && ref && o && pool);
    struct attn_request r = {0};
    r.shape.h = r.shape.h_kv = 1;
    r.shape.n = YN;
    r.shape.L = YL;
    r.shape.d_k = r.shape.d_v = YD;
    r.params.dtype = ATTN_F32;
    r.params.scale = attn_default_scale(YD);
    r.outputs = ATTN_OUT_OUTPUT;
    struct attn_inputs in = {.q = q, .k = k, .v = v};
    unsigned have = attn_kernel_supported();
    for (int kn = ATTN_KERNEL_NONE; kn < ATTN_KERNEL_AUTO; kn++) {
        if (!(have & (1u << kn)))
            continue;
        attn_kernel_set((enum attn_kernel)kn);
        struct attn_result plain = {.output = ref};
        CHECK_EQ_INT(attn_forward(&r, &in, &plain, NULL), CORE_OK);
        int y_alone, p_alone, y_pool, p_pool;
        yield_pass(&r, &in, NULL, o, &y_alone, &p_alone);
        CHECK(memcmp(o, ref, YN * YD * sizeof(float)) == 0);
        yield_pass(&r, &in, pool, o, &y_pool, &p_pool);
        CHECK(memcmp(o, ref, YN * YD * sizeof(float)) == 0);
        CHECK(p_alone >= 2);                    /* cut into tiles */
        CHECK(y_alone >= 4 * p_alone);          /* inside the tiles, not only between */
        CHECK_EQ_INT(y_pool, y_alone);          /* the helpers' blocks yield too */
        CHECK_EQ_INT(p_pool, p_alone);
        if (p_alone < 2 || y_alone < 4 * p_alone || y_pool != y_alone)
            fprintf(stderr, "kernel %s: %d yields, %d with helpers, %d pieces\n",
                    attn_kernel_name((enum attn_kernel)kn), y_alone, y_pool, p_alone);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
    attn_pool_free(pool);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(o);
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
