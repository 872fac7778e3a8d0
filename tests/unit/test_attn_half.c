/*
 * tests/unit/test_attn_half.c — attn_forward_half (core/attn.h): a pass over
 * q, k, v held as float16 or bfloat16 gives the very bits of attn_forward
 * over the same values widened to float32 beforehand (the path half requests
 * took before the pass read them itself), for every kernel this CPU runs,
 * with and without helpers, over odd shapes, tails, GQA, batches, causal
 * masks, windows (with sinks), segments (contiguous and interleaved),
 * softcap, softmax variants, masks, ALiBi, attention biases, q/k/v biases,
 * RoPE, every `return`, decode, and scores past what the fused kernel
 * takes; and the key-blocked pass reads
 * 2-byte k and v without a float32 copy of them in its workspace.
 */
#include "core/attn.h"
#include "core/attn_fused.h"
#include "core/half.h"
#include "core/pool.h"
#include "tests/harness.h"

#include <stdlib.h>
#include <string.h>

struct hcase {
    const char *name;
    size_t n, L, dk, dv, h, h_kv, B;
    enum attn_causal causal;
    int64_t wleft, wright, wsinks;  /* window when wleft or wright >= 0 */
    int seg;                        /* 0 none, 1 contiguous runs, 2 interleaved */
    double softcap;
    enum attn_softmax softmax;
    bool bias_q, bias_k, bias_v, rope;
    unsigned outputs;
    double amp;                     /* inputs uniform in [-amp, amp] */
    int score;                      /* 1 a mask, 2 ALiBi, 3 an attention bias
                                       (the key-blocked pass without the fused
                                       kernel); 0 none */
};

static const struct hcase cases[] = {
    {"gqa causal d128 3 superblocks", 300, 613, 128, 128, 2, 1, 0, ATTN_CAUSAL_BOTTOM_RIGHT,
     -1, -1, 0, 0, 0, ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"softcap window odd d", 197, 1000, 40, 24, 3, 3, 0, ATTN_CAUSAL_NONE, 100, 5, 0, 0, 30,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 3, 0},
    {"batch top-left softmax1", 250, 250, 33, 17, 4, 2, 2, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0,
     0, ATTN_SOFTMAX_ONE, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"contiguous segments sink", 400, 400, 64, 64, 2, 1, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1,
     0, 1, 0, ATTN_SOFTMAX_SINK, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"window with sinks", 300, 300, 48, 48, 2, 2, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 50, -1, 4, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"interleaved segments", 200, 260, 24, 40, 2, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 2, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"bias q k v and rope", 150, 333, 32, 32, 2, 1, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0,
     0, ATTN_SOFTMAX_STANDARD, 1, 1, 1, 1, ATTN_OUT_OUTPUT, 2, 0},
    {"bias q only", 150, 333, 32, 32, 2, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 1, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"output and weights", 100, 130, 16, 24, 2, 1, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0,
     0, ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT | ATTN_OUT_WEIGHTS, 2, 0},
    {"scores only", 60, 77, 16, 8, 1, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_SCORES, 2, 0},
    {"decode split by keys", 1, 5000, 64, 64, 2, 2, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0,
     0, ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0},
    {"scores past the fused range", 70, 90, 16, 16, 1, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 7.9e18, 0},
    {"mask", 130, 700, 24, 24, 2, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 1},
    {"alibi causal", 130, 140, 24, 24, 2, 2, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 2},
    {"attention bias", 90, 600, 16, 8, 2, 1, 0, ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0,
     ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 3},
};

/* n values uniform in [-amp, amp], rounded to elem -> bits [n] and their
 * float32 widening wide [n]. */
static void fill(uint64_t *rng, enum attn_elem e, double amp, size_t n, uint16_t *bits,
                 float *wide)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(t_rng_next(rng) >> 11) / 9007199254740992.0;
        float x = (float)((2 * u - 1) * amp);
        bits[i] = e == ATTN_ELEM_F16 ? half_f16_from_f32(x) : half_bf16_from_f32(x);
        wide[i] = e == ATTN_ELEM_F16 ? half_f16_to_f32(bits[i]) : half_bf16_to_f32(bits[i]);
    }
}

struct hbuf {
    uint16_t *q, *k, *v;
    float *qf, *kf, *vf, bq[256], bk[256], bv[256];
    int64_t *sq, *sk;
    uint8_t *mask;                  /* [n][L] */
    float *ab;                      /* [n][L] */
    size_t nq, nk, nv;
};

static void request(const struct hcase *c, struct hbuf *b, struct attn_request *r)
{
    memset(r, 0, sizeof *r);
    r->shape = (struct attn_shape){c->h, c->h_kv, c->n, c->L, c->dk, c->dv, c->B};
    r->params.dtype = ATTN_F32;
    r->params.scale = attn_default_scale(c->dk);
    r->params.softmax = c->softmax;
    r->params.sink_logit = 0.5;
    r->params.softcap = c->softcap;
    r->params.rope = c->rope;
    r->params.rope_base = 10000;
    r->causal = c->causal;
    r->outputs = c->outputs;
    if (c->wleft >= 0 || c->wright >= 0)
        r->window = (struct attn_window){true, c->wleft, c->wright, c->wsinks};
    if (c->seg) {
        r->seg_q = b->sq;
        r->seg_k = b->sk;
        r->seg_batches = 1;
    }
    if (c->score == 1) {
        r->mask = b->mask;
        r->mask_heads = 1;
    }
    r->params.alibi = c->score == 2;
    if (c->score == 3) {
        r->attn_bias = b->ab;
        r->attn_bias_heads = 1;
    }
}

static void segments(const struct hcase *c, struct hbuf *b)
{
    b->sq = malloc(c->n * sizeof *b->sq);
    b->sk = malloc(c->L * sizeof *b->sk);
    for (size_t i = 0; i < c->n; i++)
        b->sq[i] = c->seg == 1 ? (int64_t)(i * 3 / c->n) : (int64_t)(i % 3);
    for (size_t j = 0; j < c->L; j++)
        b->sk[j] = c->seg == 1 ? (int64_t)(j * 3 / c->L) : (int64_t)((j / 7) % 3);
}

static bool alloc_buf(const struct hcase *c, enum attn_elem e, struct hbuf *b)
{
    size_t B = c->B ? c->B : 1;
    memset(b, 0, sizeof *b);
    b->nq = B * c->h * c->n * c->dk;
    b->nk = B * c->h_kv * c->L * c->dk;
    b->nv = B * c->h_kv * c->L * c->dv;
    b->q = malloc(b->nq * 2);
    b->k = malloc(b->nk * 2);
    b->v = malloc(b->nv * 2);
    b->qf = malloc(b->nq * 4);
    b->kf = malloc(b->nk * 4);
    b->vf = malloc(b->nv * 4);
    if (!b->q || !b->k || !b->v || !b->qf || !b->kf || !b->vf)
        return false;
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (c->n * 131 + c->L);
    fill(&rng, e, c->amp, b->nq, b->q, b->qf);
    fill(&rng, e, c->amp, b->nk, b->k, b->kf);
    fill(&rng, e, c->amp, b->nv, b->v, b->vf);
    for (size_t i = 0; i < 256; i++) {
        b->bq[i] = (float)(i % 7) * 0.125f - 0.375f;
        b->bk[i] = (float)(i % 5) * 0.25f - 0.5f;
        b->bv[i] = (float)(i % 3) * 0.5f - 0.5f;
    }
    if (c->seg)
        segments(c, b);
    if (c->score == 1 || c->score == 3) {
        b->mask = malloc(c->n * c->L);
        b->ab = malloc(c->n * c->L * sizeof(float));
        for (size_t i = 0; i < c->n * c->L; i++) {
            b->mask[i] = (t_rng_next(&rng) & 3) != 0;   /* 3 keys in 4 */
            b->ab[i] = b->mask[i] ? (float)(i % 11) * 0.25f - 1 : -INFINITY;
        }
    }
    return true;
}

static void free_buf(struct hbuf *b)
{
    free(b->q), free(b->k), free(b->v), free(b->qf), free(b->kf), free(b->vf);
    free(b->sq), free(b->sk), free(b->mask), free(b->ab);
}

struct hout {
    float *sc, *wt, *ot;
    uint8_t *empty;
    struct attn_result res;
};

static void out_alloc(const struct hcase *c, struct hout *o)
{
    size_t rows = (c->B ? c->B : 1) * c->h * c->n;
    o->sc = calloc(rows * c->L, 4);
    o->wt = calloc(rows * c->L, 4);
    o->ot = calloc(rows * c->dv, 4);
    o->empty = calloc(rows, 1);
    o->res = (struct attn_result){.scores = o->sc, .weights = o->wt, .output = o->ot,
                                  .empty = o->empty};
}

static bool out_same(const struct hcase *c, const struct hout *a, const struct hout *b)
{
    size_t rows = (c->B ? c->B : 1) * c->h * c->n;
    return !memcmp(a->sc, b->sc, rows * c->L * 4) && !memcmp(a->wt, b->wt, rows * c->L * 4) &&
           !memcmp(a->ot, b->ot, rows * c->dv * 4) && !memcmp(a->empty, b->empty, rows) &&
           a->res.n_empty == b->res.n_empty;
}

static void out_free(struct hout *o)
{
    free(o->sc), free(o->wt), free(o->ot), free(o->empty);
}

/* One case, one element type, on the active kernel, on ws: half and
 * widened passes agree bit for bit (and in status). Quick: a quarter of
 * the queries of a case of 100 and more. */
static bool same_bits(const struct hcase *c, enum attn_elem e, struct attn_ws *ws)
{
    struct hcase fewer = *c;
    if (t_quick() && c->n >= 100) {
        fewer.n = c->n / 4;     /* every key block is still read */
        c = &fewer;
    }
    struct hbuf b;
    struct attn_request r;
    struct hout w, h;
    bool ok = alloc_buf(c, e, &b);
    request(c, &b, &r);
    out_alloc(c, &w);
    out_alloc(c, &h);
    struct attn_inputs fin = {b.qf, b.kf, b.vf, c->bias_q ? b.bq : NULL,
                              c->bias_k ? b.bk : NULL, c->bias_v ? b.bv : NULL, 1, 1, 1};
    struct attn_inputs hin = fin;
    hin.q = b.q;
    hin.k = b.k;
    hin.v = b.v;
    struct attn_elems he = {e, e, e};
    enum core_status sf = attn_forward(&r, &fin, &w.res, ws);
    enum core_status sh = attn_forward_half(&r, &hin, &he, &h.res, ws);
    ok = ok && sf == sh && out_same(c, &w, &h);
    if (!ok)
        printf("  %s %s kernel %s: status %d / %d\n", c->name,
               e == ATTN_ELEM_F16 ? "float16" : "bfloat16",
               attn_kernel_name(attn_kernel_active()), (int)sf, (int)sh);
    /* q alone in 2-byte form, k and v float32: the same again */
    struct attn_elems qe = {e, ATTN_ELEM_F32, ATTN_ELEM_F32};
    struct attn_inputs qin = fin;
    qin.q = b.q;
    out_free(&h);
    out_alloc(c, &h);
    enum core_status sq = attn_forward_half(&r, &qin, &qe, &h.res, ws);
    ok = ok && sq == sf && out_same(c, &w, &h);
    out_free(&w);
    out_free(&h);
    free_buf(&b);
    return ok;
}

static const enum attn_kernel kernels[] = {ATTN_KERNEL_NONE, ATTN_KERNEL_AVX2,
                                           ATTN_KERNEL_AVX512};

/* Quick (memcheck, qemu): the pool only on the kernel in use, and one
 * element type a case, float16 and bfloat16 in turn. */
TEST(half_bits_every_case_kernel_and_pool)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    unsigned have = attn_kernel_supported();
    enum attn_kernel in_use = attn_kernel_choose(ATTN_KERNEL_AUTO, have);
    bool quick = t_quick();
    for (size_t ki = 0; ki < sizeof kernels / sizeof *kernels; ki++) {
        if (!(have & (1u << kernels[ki])))
            continue;
        attn_kernel_set(kernels[ki]);
        for (int p = 0; p < (quick && kernels[ki] != in_use ? 1 : 2); p++) {
            struct attn_ws *ws = attn_ws_new();
            attn_ws_set_pool(ws, p ? pool : NULL);
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                /* float16 when the case fits its range; quick: bfloat16
                 * only where float16 does not run */
                bool f16 = cases[i].amp <= 65504 && (!quick || i % 2 == 0);
                if (f16)
                    CHECK(same_bits(&cases[i], ATTN_ELEM_F16, ws));
                if (!quick || !f16)
                    CHECK(same_bits(&cases[i], ATTN_ELEM_BF16, ws));
            }
            attn_ws_free(ws);
        }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
    attn_pool_free(pool);
}

/* The output-only key-blocked pass grows its workspace by its widening
 * scratch only (a superblock of keys on the fused kernels, a 512-key block
 * without them), never by a float32 copy of k and v (here 4 MiB). */
TEST(half_reads_kv_without_a_copy)
{
    struct hcase c = {"prefill", 384, 2048, 64, 64, 4, 4, 0,
                      ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0,
                      ATTN_SOFTMAX_STANDARD, 0, 0, 0, 0, ATTN_OUT_OUTPUT, 2, 0};
    if (t_quick())
        c.n = 24;   /* the workspace follows the keys; one query block and a tail */
    unsigned have = attn_kernel_supported();
    size_t whole = c.h_kv * c.L * (c.dk + c.dv) * sizeof(float);
    size_t block = 512 * (c.dk + c.dv) * sizeof(float);    /* flash_keys' */
    size_t fw = attn_fused_wide_floats(c.dk, c.dv, c.L) * sizeof(float);
    CHECK(block * 8 <= whole && fw * 8 <= whole);
    for (size_t ki = 0; ki < sizeof kernels / sizeof *kernels; ki++) {
        if (!(have & (1u << kernels[ki])))
            continue;
        attn_kernel_set(kernels[ki]);
        size_t wide = kernels[ki] == ATTN_KERNEL_NONE ? block : fw;
        for (int e = ATTN_ELEM_F16; e <= ATTN_ELEM_BF16; e++) {
            struct attn_ws *wf = attn_ws_new(), *wh = attn_ws_new();
            struct hbuf b;
            struct attn_request r;
            struct hout o;
            CHECK(alloc_buf(&c, (enum attn_elem)e, &b));
            request(&c, &b, &r);
            out_alloc(&c, &o);
            struct attn_inputs fin = {b.qf, b.kf, b.vf, NULL, NULL, NULL, 1, 1, 1};
            struct attn_inputs hin = {b.q, b.k, b.v, NULL, NULL, NULL, 1, 1, 1};
            struct attn_elems he = {(enum attn_elem)e, (enum attn_elem)e, (enum attn_elem)e};
            CHECK(attn_forward(&r, &fin, &o.res, wf) == CORE_OK);
            CHECK(attn_forward_half(&r, &hin, &he, &o.res, wh) == CORE_OK);
            CHECK(attn_ws_bytes(wh) <= attn_ws_bytes(wf) + wide + 64);
            /* with a key bias, k is prepared: widened whole, and biased
             * there, so no more than the float32 pass's prepared copy */
            fin.bias_k = hin.bias_k = b.bk;
            fin.bias_k_heads = hin.bias_k_heads = 1;
            CHECK(attn_forward(&r, &fin, &o.res, wf) == CORE_OK);
            CHECK(attn_forward_half(&r, &hin, &he, &o.res, wh) == CORE_OK);
            CHECK(attn_ws_bytes(wh) >= whole / 2);
            CHECK(attn_ws_bytes(wh) <= attn_ws_bytes(wf) + wide + 64);
            out_free(&o);
            free_buf(&b);
            attn_ws_free(wf);
            attn_ws_free(wh);
        }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

TEST(half_refusals)
{
    uint16_t x[4] = {0};
    float o[4];
    struct attn_request r = {0};
    r.shape = (struct attn_shape){1, 1, 1, 1, 4, 4, 0};
    r.params.dtype = ATTN_F64;
    r.params.scale = 0.5;
    r.outputs = ATTN_OUT_OUTPUT;
    struct attn_inputs in = {x, x, x, NULL, NULL, NULL, 1, 1, 1};
    struct attn_result res = {.output = o};
    struct attn_elems he = {ATTN_ELEM_F16, ATTN_ELEM_F16, ATTN_ELEM_F16};
    CHECK(attn_forward_half(&r, &in, &he, &res, NULL) == CORE_EINVAL);   /* float64 */
    r.params.dtype = ATTN_F32;
    CHECK(attn_forward_half(&r, &in, NULL, &res, NULL) == CORE_EINVAL);
    he.k = (enum attn_elem)7;
    CHECK(attn_forward_half(&r, &in, &he, &res, NULL) == CORE_EINVAL);
    he.k = ATTN_ELEM_F16;
    CHECK(attn_forward_half(&r, &in, &he, &res, NULL) == CORE_OK);
    CHECK(o[0] == 0 && o[3] == 0);
}

int main(void)
{
    RUN(half_bits_every_case_kernel_and_pool);
    RUN(half_reads_kv_without_a_copy);
    RUN(half_refusals);
    TEST_MAIN_END();
}
