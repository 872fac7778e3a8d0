/*
 * tests/unit/test_attn_models_equiv.c — the attention of current models
 * (issue 16): the promises that hold between runs of the core rather than
 * against a reference. Bit for bit: a batch equals its elements run alone;
 * the output does not depend on `return`, a heads subset, the worker count
 * or the session path. Within rounding: a request of contiguous segments
 * equals one request per segment. The cases are built with
 * tests/models_ref.h (tests/unit/test_attn_models.c checks them against its
 * long double reference).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/kv.h"
#include "core/pool.h"
#include "tests/harness.h"
#include "tests/models_ref.h"

static bool same(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

/* Batch element b of c as a request of its own (its slices of every array). */
static void batch_element(const struct mc *c, size_t b, struct mc *e)
{
    size_t h = c->h, n = c->n, L = c->L;
    *e = *c;
    e->B = 0;
    e->q = malloc(h * n * c->dk * sizeof(double));
    memcpy(e->q, c->q + b * h * n * c->dk, h * n * c->dk * sizeof(double));
    e->k = malloc(c->hkv * L * c->dk * sizeof(double));
    memcpy(e->k, c->k + b * c->hkv * L * c->dk, c->hkv * L * c->dk * sizeof(double));
    e->v = malloc(c->hkv * L * c->dv * sizeof(double));
    memcpy(e->v, c->v + b * c->hkv * L * c->dv, c->hkv * L * c->dv * sizeof(double));
    e->pq = c->pq ? ints(n) : NULL;
    if (c->pq)
        memcpy(e->pq, c->pq + (c->pqb == 1 ? 0 : b) * n, n * sizeof(int64_t));
    e->pqb = 1;
    e->pk = c->pk ? ints(L) : NULL;
    if (c->pk)
        memcpy(e->pk, c->pk + (c->pkb == 1 ? 0 : b) * L, L * sizeof(int64_t));
    e->pkb = 1;
    e->sq = c->sq ? ints(n) : NULL;
    e->sk = c->sk ? ints(L) : NULL;
    if (c->sq) {
        memcpy(e->sq, c->sq + (c->sgb == 1 ? 0 : b) * n, n * sizeof(int64_t));
        memcpy(e->sk, c->sk + (c->sgb == 1 ? 0 : b) * L, L * sizeof(int64_t));
    }
    e->sgb = 1;
    e->ab = NULL;
    e->abh = 0;
    if (c->ab) {
        size_t from = c->abh == c->B * h ? b * h : 0, heads = c->abh == c->B * h ? h : c->abh;
        e->abh = heads;
        e->ab = malloc(heads * n * L * sizeof(double));
        memcpy(e->ab, c->ab + from * n * L, heads * n * L * sizeof(double));
    }
    e->mk = NULL;
    e->mkh = 0;
    e->sinks = NULL;
    if (c->sinks) {
        e->sinks = malloc(h * sizeof(double));
        memcpy(e->sinks, c->sinks, h * sizeof(double));
    }
    e->bq = e->bk = e->bv = NULL;
    e->bqh = e->bkh = e->bvh = 0;
}

/* A batch gives each element the bits it gets alone, on every path. */
TEST(batch_equals_elements)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    attn_ws_set_pool(ws, pool);
    for (int t = 0; t < 8; t++) {
        struct mc c;
        size_t n = t < 4 ? 5 : 200, L = t < 4 ? 9 : 600;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 3, 2, 1, n, L, 16, 8);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.outputs = t % 4 == 3 ? ATTN_OUT_OUTPUT : ATTN_OUT_ALL;
        c.rope = 1;
        c.win = (struct attn_window){true, (int64_t)L / 3, -1, 2};
        c.pkb = 3;
        c.pk = positions(3, L, 1, true);
        c.abh = 2 * 3;
        c.ab = rnd_arr(&c, c.abh * n * L, -1, 1);
        if (t % 4 == 3) {
            free(c.ab);
            c.ab = NULL;
            c.abh = 0;
            set_segments(&c, 3, 2, false);
        }
        c.sm = ATTN_SOFTMAX_SINK;
        c.sinks = malloc(2 * sizeof(double));
        c.sinks[0] = 0.5;
        c.sinks[1] = -0.5;
        struct cres all;
        CHECK_EQ_INT(core_run(&c, &all, ws), CORE_OK);
        size_t esz = c.dt == ATTN_F32 ? 4 : 8, per = c.h * n;
        for (size_t b = 0; b < 3; b++) {
            struct mc e;
            batch_element(&c, b, &e);
            struct cres one;
            CHECK_EQ_INT(core_run(&e, &one, NULL), CORE_OK);
            CHECK(same((char *)all.out.output + b * per * c.dv * esz, one.out.output,
                       per * c.dv * esz));
            if (c.outputs & ATTN_OUT_WEIGHTS)
                CHECK(same((char *)all.out.weights + b * per * L * esz, one.out.weights,
                           per * L * esz));
            core_free(&one);
            mc_free(&e);
        }
        core_free(&all);
        mc_free(&c);
    }
    attn_ws_free(ws);
    attn_pool_free(pool);
}

/* The output's bits do not depend on `return`, on the helpers, or on the
 * session path (the rows appended to a cache at continuing positions). */
TEST(output_bits_reproducible)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *pws = attn_ws_new();
    attn_ws_set_pool(pws, pool);
    for (int t = 0; t < 8; t++) {
        struct mc c;
        size_t n = t < 4 ? 3 : 130, L = t < 4 ? 50 : 400;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 4, 2, n, L, 16, 8);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.rope = 1;
        c.dims = 8;
        set_rope_scaling(&c, ATTN_ROPE_SCALING_LLAMA3);
        c.softcap = t % 4 < 2 ? 0 : 1.5;
        c.sm = ATTN_SOFTMAX_SINK;
        c.sinks = malloc(4 * sizeof(double));
        for (size_t i = 0; i < 4; i++)
            c.sinks[i] = rnd(-1, 1);
        size_t esz = c.dt == ATTN_F32 ? 4 : 8, ob = c.h * n * c.dv * esz;
        unsigned sets[4] = {ATTN_OUT_OUTPUT, ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT, ATTN_OUT_ALL,
                            ATTN_OUT_SCORES | ATTN_OUT_OUTPUT};
        struct cres base;
        c.outputs = ATTN_OUT_OUTPUT;
        CHECK_EQ_INT(core_run(&c, &base, NULL), CORE_OK);
        for (int u = 0; u < 4; u++) {
            c.outputs = sets[u];
            struct cres x;
            CHECK_EQ_INT(core_run(&c, &x, u % 2 ? pws : NULL), CORE_OK);
            CHECK(same(base.out.output, x.out.output, ob));
            core_free(&x);
        }
        /* a heads subset (any order, with or without extras, with or without
         * the pool): each chosen head's output has the bits of the whole pass */
        static const size_t pick[2] = {3, 1};
        struct cres all;
        c.outputs = ATTN_OUT_ALL;
        CHECK_EQ_INT(core_run(&c, &all, NULL), CORE_OK);
        for (int u = 0; u < 4; u++) {
            struct cres x;
            c.outputs = u < 2 ? ATTN_OUT_OUTPUT : ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT;
            core_setup(&c, &x);
            size_t hob = n * c.dv * esz, rows = 2 * n;
            int64_t *am = malloc(rows * sizeof *am);
            void *lse = malloc(rows * esz), *ent = malloc(rows * esz), *mw = malloc(rows * esz);
            void *mass = malloc(rows * esz);
            struct attn_extras xs = {u % 2 ? ATTN_X_LSE | ATTN_X_STATS : 0, pick, 2, 0};
            struct attn_extras_out xo = {NULL, lse, ent, mw, mass, am, NULL, NULL};
            CHECK_EQ_INT(attn_forward_extras(&x.rq, &x.in, NULL, &xs, &x.out, &xo,
                                             u >= 2 ? pws : NULL), CORE_OK);
            for (size_t a = 0; a < 2; a++) {
                bool eq = same((const char *)base.out.output + pick[a] * hob,
                               (const char *)x.out.output + a * hob, hob);
                size_t wb = n * L * esz;
                if (u >= 2)     /* the weights too: the whole pass's bits */
                    eq = eq && same((const char *)all.out.weights + pick[a] * wb,
                                    (const char *)x.out.weights + a * wb, wb);
                if (!eq)
                    printf("  t=%d u=%d head %zu differs\n", t, u, pick[a]);
                CHECK(eq);
            }
            free(am); free(lse); free(ent); free(mw); free(mass);
            core_free(&x);
        }
        core_free(&all);
        /* session: append the keys in two pieces, attend the queries */
        struct kv_cache *kc = kv_new(c.dt, c.hkv, c.dk, c.dv);
        size_t m1 = L / 3;
        for (int piece = 0; piece < 2; piece++) {
            size_t a = piece ? m1 : 0, m = piece ? L - m1 : m1;
            double *kk = malloc(c.hkv * m * c.dk * sizeof(double));
            double *vv = malloc(c.hkv * m * c.dv * sizeof(double));
            for (size_t g = 0; g < c.hkv; g++) {
                memcpy(kk + g * m * c.dk, c.k + (g * L + a) * c.dk, m * c.dk * sizeof(double));
                memcpy(vv + g * m * c.dv, c.v + (g * L + a) * c.dv, m * c.dv * sizeof(double));
            }
            void *kc_k = conv(kk, c.hkv * m * c.dk, c.dt), *kc_v = conv(vv, c.hkv * m * c.dv, c.dt);
            struct attn_inputs in = {NULL, kc_k, kc_v, NULL, NULL, NULL, 0, 0, 0};
            struct cres tmp;
            core_setup(&c, &tmp);
            CHECK_EQ_INT(kv_append(kc, &tmp.rq.params, &in, m), CORE_OK);
            core_free(&tmp);
            free(kk);
            free(vv);
            free(kc_k);
            free(kc_v);
        }
        struct cres sx;
        c.outputs = ATTN_OUT_WEIGHTS | ATTN_OUT_OUTPUT;
        core_setup(&c, &sx);
        CHECK_EQ_INT(kv_attend(kc, &sx.rq, &sx.in, &sx.out, NULL), CORE_OK);
        CHECK(same(base.out.output, sx.out.output, ob));
        core_free(&sx);
        kv_free(kc);
        core_free(&base);
        mc_free(&c);
    }
    attn_ws_free(pws);
    attn_pool_free(pool);
}

/* A request with contiguous segments equals one request per segment, its
 * rows in the original order. */
TEST(segments_equal_separate_requests)
{
    for (int t = 0; t < 4; t++) {
        struct mc c;
        size_t ns = 3, per_n = t < 2 ? 4 : 150, per_L = t < 2 ? 6 : 300;
        mc_init(&c, t % 2 ? ATTN_F32 : ATTN_F64, 0, 2, 1, ns * per_n, ns * per_L, 8, 4);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.rope = 1;
        c.alibi = 1;
        c.outputs = ATTN_OUT_OUTPUT;
        set_segments(&c, 1, ns, false);
        struct cres all;
        CHECK_EQ_INT(core_run(&c, &all, NULL), CORE_OK);
        double tol = c.dt == ATTN_F32 ? 1e-5 : 1e-12;
        for (size_t sg = 0; sg < ns; sg++) {
            struct mc e;
            mc_init(&e, c.dt, 0, 2, 1, per_n, per_L, 8, 4);
            e.causal = c.causal;
            e.rope = 1;
            e.alibi = 1;
            e.outputs = ATTN_OUT_OUTPUT;
            for (size_t hh = 0; hh < 2; hh++)
                memcpy(e.q + hh * per_n * 8, c.q + (hh * c.n + sg * per_n) * 8,
                       per_n * 8 * sizeof(double));
            memcpy(e.k, c.k + sg * per_L * 8, per_L * 8 * sizeof(double));
            memcpy(e.v, c.v + sg * per_L * 4, per_L * 4 * sizeof(double));
            struct cres one;
            CHECK_EQ_INT(core_run(&e, &one, NULL), CORE_OK);
            double worst = 0;
            for (size_t hh = 0; hh < 2; hh++)
                for (size_t i = 0; i < per_n * 4; i++) {
                    double a = val(all.out.output, (hh * c.n + sg * per_n) * 4 + i, c.dt);
                    double b = val(one.out.output, hh * per_n * 4 + i, c.dt);
                    worst = fmax(worst, fabs(a - b));
                }
            CHECK(worst <= tol);
            core_free(&one);
            mc_free(&e);
        }
        core_free(&all);
        mc_free(&c);
    }
}

int main(void)
{
    RUN(batch_equals_elements);
    RUN(output_bits_reproducible);
    RUN(segments_equal_separate_requests);
    TEST_MAIN_END();
}
