/*
 * tests/unit/test_kv_lowp.c — float16, bfloat16 and int8 session caches
 * (core/kv.c's storage forms, core/kv_lowp.c's decode loops).
 *
 * Storage: the rows a narrow cache holds are the rows a float32 cache of
 * the same appends holds (after bias and RoPE), rounded once: bit-equal to
 * core/half's rounding for float16/bfloat16; for int8 the scale is
 * max|x|/127 and every value within half a scale step of x (a reference
 * written here in double). Attention: the decode loops against an
 * independent long double softmax over the cache's own widened rows, for
 * every softmax variant, causal corner, grouped heads and q bias; the same
 * pass through the widening fallback (asking for weights) agrees; a long
 * cache split into windows gives the same bits with and without a helper
 * pool, and pages side by side in memory the bits of pages apart. Also:
 * overflow refused with the cache unchanged, bytes per row as
 * stored, fork and truncate keep the stored form.
 */
#include <math.h>
#include <stdatomic.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "core/half.h"
#include "core/kv.h"
#include "core/kv_lowp.h"
#include "core/pool.h"
#include "core/stop.h"
#include "tests/harness.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *frnd(size_t n, float amp)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * amp;
    return p;
}

enum { HKV = 2, H = 4, DK = 24, DV = 20 };

static const enum kv_store stores[3] = {KV_STORE_F16, KV_STORE_BF16, KV_STORE_I8};

/* The same appends into a float32 cache and a narrow one: 3 appends of 5,
 * 1 and 7 rows, with a K bias per head and RoPE. */
static void fill(struct kv_cache *a, struct kv_cache *b, float amp)
{
    static const size_t m[3] = {5, 1, 7};
    float *bk = frnd(HKV * DK, 0.5f), *bv = frnd(HKV * DV, 0.5f);
    struct attn_params p = {.dtype = ATTN_F32, .scale = 0.3, .rope = true,
                            .rope_base = 10000};
    for (int i = 0; i < 3; i++) {
        float *k = frnd(HKV * m[i] * DK, amp), *v = frnd(HKV * m[i] * DV, amp);
        struct attn_inputs in = {.k = k, .v = v, .bias_k = bk, .bias_v = bv,
                                 .bias_k_heads = HKV, .bias_v_heads = HKV};
        CHECK_EQ_INT(kv_append(a, &p, &in, m[i]), CORE_OK);
        CHECK_EQ_INT(kv_append(b, &p, &in, m[i]), CORE_OK);
        free(k);
        free(v);
    }
    free(bk);
    free(bv);
}

/* x [d] stored as b's widened row w [d]: the storage rule holds. */
static int row_ok(enum kv_store st, const float *x, const float *w, size_t d)
{
    int bad = 0;
    if (st == KV_STORE_F16 || st == KV_STORE_BF16) {
        for (size_t i = 0; i < d; i++) {
            uint16_t h = st == KV_STORE_F16 ? half_f16_from_f32(x[i]) : half_bf16_from_f32(x[i]);
            float r = st == KV_STORE_F16 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
            bad += memcmp(&r, &w[i], sizeof r) != 0;
        }
        return bad;
    }
    double amax = 0, scale;
    for (size_t i = 0; i < d; i++)
        amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
    scale = amax / 127;
    for (size_t i = 0; i < d; i++) {
        double q = scale > 0 ? w[i] / scale : 0;
        bad += fabs(w[i] - x[i]) > scale * 0.5 * (1 + 1e-5) + 1e-30;
        bad += fabs(q - nearbyint(q)) > 1e-3 || fabs(q) > 127.0001;
    }
    return bad;
}

TEST(storage_rounds_prepared_rows_once)
{
    for (int s = 0; s < 3; s++) {
        struct kv_cache *a = kv_new(ATTN_F32, HKV, DK, DV);
        struct kv_cache *b = kv_new_store(ATTN_F32, stores[s], HKV, DK, DV);
        CHECK(a && b);
        fill(a, b, 3.0f);
        CHECK_EQ_INT(kv_length(b), 13);
        CHECK_EQ_INT(kv_store(b), stores[s]);
        int bad = 0;
        float wk[13 * DK], wv[13 * DV];
        for (size_t g = 0; g < HKV; g++) {
            kv_read_rows(b, g, 0, 13, wk, wv);
            float xk[13 * DK], xv[13 * DV], ks[13];
            kv_read_stored(a, g, 0, 13, xk, xv, NULL, NULL);
            kv_read_stored(b, g, 0, 13, NULL, NULL, ks, NULL);
            for (size_t r = 0; r < 13; r++) {
                bad += row_ok(stores[s], xk + r * DK, wk + r * DK, DK);
                bad += row_ok(stores[s], xv + r * DV, wv + r * DV, DV);
            }
            if (stores[s] == KV_STORE_I8) {     /* the scale is max|x|/127 exactly */
                float amax = 0;
                for (size_t i = 0; i < DK; i++)
                    amax = fabsf(xk[i]) > amax ? fabsf(xk[i]) : amax;
                CHECK(ks[0] == amax / 127.0f);
            }
        }
        CHECK_EQ_INT(bad, 0);
        size_t esz = stores[s] == KV_STORE_I8 ? 1 : 2;
        CHECK_EQ_INT(kv_row_bytes(b),
                     HKV * ((DK + DV) * esz + (stores[s] == KV_STORE_I8 ? 8 : 0)));
        /* fork and truncate keep the stored rows */
        struct kv_cache *f = kv_fork(b);
        float fk[13 * DK];
        CHECK(f && kv_store(f) == stores[s]);
        kv_read_rows(f, 1, 0, 13, fk, NULL);
        kv_read_rows(b, 1, 0, 13, wk, NULL);
        CHECK(memcmp(fk, wk, sizeof fk) == 0);
        kv_truncate(f, 4);
        kv_read_rows(f, 1, 0, 4, fk, NULL);
        CHECK(memcmp(fk, wk, 4 * DK * sizeof(float)) == 0);
        kv_free(f);
        kv_free(a);
        kv_free(b);
    }
    CHECK(kv_new_store(ATTN_F64, KV_STORE_F16, 1, 2, 2) == NULL);
}

/* int8 rows whose largest value is tiny: a scale that is subnormal (or
 * that max|x|/127 underflows to 0) still stores every value within half a
 * step of the scale used, which is at most one subnormal above max|x|/127,
 * and no value is clamped at 127 (a row at 9.6e-43 was 7% off, one under
 * 9e-44 stored as zeros). */
TEST(int8_tiny_rows_keep_their_values)
{
    static const float amax[] = {1.4e-45f, 2e-44f, 8.8e-44f, 9e-44f, 1.2e-43f, 9.6e-43f,
                                 3.3e-41f, 1e-39f, 1.1e-38f, 1.5e-36f, 1e-30f};
    struct attn_params p = {.dtype = ATTN_F32, .scale = 1};
    for (size_t a = 0; a < sizeof amax / sizeof amax[0]; a++) {
        struct kv_cache *c = kv_new_store(ATTN_F32, KV_STORE_I8, 1, DK, DV);
        float k[DK], v[DV], wk[DK], wv[DV], ks, vs;
        for (size_t i = 0; i < DK; i++)
            k[i] = amax[a] * (float)(DK - i) / DK * (i % 2 ? -1.0f : 1.0f);
        for (size_t i = 0; i < DV; i++)
            v[i] = amax[a] * (float)(i + 1) / DV;
        struct attn_inputs in = {.k = k, .v = v};
        CHECK(c && kv_append(c, &p, &in, 1) == CORE_OK);
        kv_read_rows(c, 0, 0, 1, wk, wv);
        kv_read_stored(c, 0, 0, 1, NULL, NULL, &ks, &vs);
        int bad = 0;
        for (int kind = 0; kind < 2; kind++) {
            const float *x = kind ? v : k, *w = kind ? wv : wk;
            float sc = kind ? vs : ks, ideal = amax[a] / 127.0f;
            bad += !(sc > 0) || sc > (ideal < FLT_MIN ? ideal + FLT_TRUE_MIN : ideal);
            for (size_t i = 0; i < (kind ? DV : DK); i++)
                bad += fabs((double)w[i] - x[i]) > 0.5 * sc * (1 + 1e-4) + FLT_TRUE_MIN;
        }
        CHECK_EQ_INT(bad, 0);
        if (bad)
            printf("  max |x| %g: scales %g %g\n", (double)amax[a], (double)ks, (double)vs);
        kv_free(c);
    }
}

TEST(overflow_refused_cache_unchanged)
{
    struct kv_cache *c = kv_new_store(ATTN_F32, KV_STORE_F16, 1, 4, 4);
    struct attn_params p = {.dtype = ATTN_F32, .scale = 0.5};
    float k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    struct attn_inputs in = {.k = k, .v = v};
    CHECK_EQ_INT(kv_append(c, &p, &in, 2), CORE_OK);
    k[5] = 70000.0f;                            /* past float16's 65504 */
    CHECK_EQ_INT(kv_append(c, &p, &in, 2), CORE_ENONFINITE);
    CHECK_EQ_INT(kv_length(c), 2);
    k[5] = 6;
    CHECK_EQ_INT(kv_append_prepared(c, k, v, 2), CORE_OK);
    CHECK_EQ_INT(kv_length(c), 4);
    kv_free(c);
    /* bfloat16 and int8 take float32's range */
    c = kv_new_store(ATTN_F32, KV_STORE_I8, 1, 4, 4);
    k[5] = 1e30f;
    CHECK_EQ_INT(kv_append(c, &p, &in, 2), CORE_OK);
    kv_free(c);
}

/* Long double reference: q [h][n][dk] (+ bias_q [dk]) against the cache's
 * widened rows; r's causal corner, softmax variant and sink; h query heads
 * over the cache's h_kv. */
static void reference_hd(const struct kv_cache *c, const struct attn_request *r, size_t h,
                         size_t dk, size_t dv, const float *q, const float *bq, float *out)
{
    size_t L = kv_length(c), n = r->shape.n, G = h / kv_heads(c);
    float *k = malloc(L * dk * sizeof(float)), *v = malloc(L * dv * sizeof(float));
    long double *s = malloc(L * sizeof(long double));
    for (size_t hh = 0; hh < h; hh++) {
        kv_read_rows(c, hh / G, 0, L, k, v);
        for (size_t i = 0; i < n; i++) {
            long double m = -INFINITY, den = 0;
            size_t lim = L;
            if (r->causal == ATTN_CAUSAL_BOTTOM_RIGHT)
                lim = L - n + i + 1;
            else if (r->causal == ATTN_CAUSAL_TOP_LEFT)
                lim = i + 1 < L ? i + 1 : L;
            for (size_t j = 0; j < lim; j++) {
                long double d = 0;
                for (size_t e = 0; e < dk; e++)
                    d += (long double)(q[(hh * n + i) * dk + e] + (bq ? bq[e] : 0)) * k[j * dk + e];
                s[j] = d * (long double)r->params.scale;
                m = s[j] > m ? s[j] : m;
            }
            if (r->params.softmax == ATTN_SOFTMAX_ONE)
                den = expl(-m);
            else if (r->params.softmax == ATTN_SOFTMAX_SINK)
                den = expl((long double)r->params.sink_logit - m);
            for (size_t j = 0; j < lim; j++)
                den += expl(s[j] - m);
            for (size_t e = 0; e < dv; e++) {
                long double o = 0;
                for (size_t j = 0; j < lim; j++)
                    o += expl(s[j] - m) * v[j * dv + e];
                out[(hh * n + i) * dv + e] = (float)(o / den);
            }
        }
    }
    free(k);
    free(v);
    free(s);
}

static void reference(const struct kv_cache *c, const struct attn_request *r, const float *q,
                      const float *bq, float *out)
{
    reference_hd(c, r, H, DK, DV, q, bq, out);
}

TEST(decode_against_reference)
{
    static const enum attn_causal cz[3] = {ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_CAUSAL_TOP_LEFT,
                                           ATTN_CAUSAL_NONE};
    for (int s = 0; s < 3; s++) {
        struct kv_cache *a = kv_new(ATTN_F32, HKV, DK, DV);
        struct kv_cache *b = kv_new_store(ATTN_F32, stores[s], HKV, DK, DV);
        fill(a, b, 2.0f);
        for (int sm = 0; sm < 3; sm++)
            for (int cc = 0; cc < 3; cc++) {
                size_t n = 3;
                float *q = frnd(H * n * DK, 2.0f), *bq = frnd(DK, 0.5f);
                float out[H * 3 * DV], ref[H * 3 * DV], wide[H * 3 * DV];
                float weights[H * 3 * 13];
                struct attn_request r = {.shape = {H, HKV, n, 0, DK, DV},
                                         .params = {.dtype = ATTN_F32, .scale = 0.4,
                                                    .softmax = (enum attn_softmax)sm,
                                                    .sink_logit = 0.7},
                                         .causal = cz[cc], .outputs = ATTN_OUT_OUTPUT};
                struct attn_inputs in = {.q = q, .bias_q = bq, .bias_q_heads = 1};
                struct attn_result res = {.output = out};
                CHECK_EQ_INT(kv_attend(b, &r, &in, &res, NULL), CORE_OK);
                reference(b, &(struct attn_request){.shape = {H, HKV, n, 13, DK, DV},
                                                    .params = r.params, .causal = r.causal},
                          q, bq, ref);
                double worst = 0;
                for (size_t i = 0; i < H * n * DV; i++)
                    worst = fmax(worst, fabs(out[i] - ref[i]));
                CHECK(worst < 2e-5);
                /* the widening fallback (weights asked for) agrees */
                r.outputs = ATTN_OUT_OUTPUT | ATTN_OUT_WEIGHTS;
                struct attn_result res2 = {.output = wide, .weights = weights};
                CHECK_EQ_INT(kv_attend(b, &r, &in, &res2, NULL), CORE_OK);
                worst = 0;
                for (size_t i = 0; i < H * n * DV; i++)
                    worst = fmax(worst, fabs(out[i] - wide[i]));
                CHECK(worst < 2e-5);
                free(q);
                free(bq);
            }
        kv_free(a);
        kv_free(b);
    }
}

/* A one-head cache of L random rows of width d stored as st, a decode
 * request over it (*r) and its query (*q, d floats, malloc'd). */
static struct kv_cache *long_cache(enum kv_store st, size_t L, size_t d,
                                   struct attn_request *r, float **q)
{
    struct kv_cache *c = kv_new_store(ATTN_F32, st, 1, d, d);
    float *k = frnd(L * d, 1.0f), *v = frnd(L * d, 1.0f);
    struct attn_params p = {.dtype = ATTN_F32, .scale = 0.088};
    struct attn_inputs in = {.k = k, .v = v};
    CHECK_EQ_INT(kv_append(c, &p, &in, L), CORE_OK);
    *r = (struct attn_request){.shape = {1, 1, 1, L, d, d}, .params = p,
                               .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .outputs = ATTN_OUT_OUTPUT};
    *q = frnd(d, 3.0f);
    free(k);
    free(v);
    return c;
}

/* A long decode step cut into windows (8192 rows: 4 windows for int8, the
 * last three shorter, 8 for the 2-byte stores) gives the same bits with
 * and without the pool's helper, within 1e-5 of a float32 pass. */
TEST(long_cache_windows_same_with_pool)
{
    size_t L = 8192, d = 128;
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    CHECK(pool && ws);
    for (int s = 0; s < 3; s++) {
        struct attn_request r;
        float *q, o1[128], o2[128], ref[128];
        struct kv_cache *c = long_cache(stores[s], L, d, &r, &q);
        struct attn_inputs qi = {.q = q};
        attn_ws_set_pool(ws, NULL);
        CHECK_EQ_INT(kv_attend(c, &r, &qi, &(struct attn_result){.output = o1}, ws), CORE_OK);
        attn_ws_set_pool(ws, pool);
        CHECK_EQ_INT(kv_attend(c, &r, &qi, &(struct attn_result){.output = o2}, ws), CORE_OK);
        CHECK(memcmp(o1, o2, sizeof o1) == 0);
        /* against a float32 pass over the widened rows */
        float *wk = malloc(L * d * sizeof(float)), *wv = malloc(L * d * sizeof(float));
        kv_read_rows(c, 0, 0, L, wk, wv);
        const void *kp[1] = {wk}, *vp[1] = {wv};
        struct attn_kv_view view = {.k = kp, .v = vp};
        CHECK_EQ_INT(attn_forward_kv(&r, &qi, &view, &(struct attn_result){.output = ref},
                                     NULL), CORE_OK);
        double worst = 0;
        for (size_t i = 0; i < d; i++)
            worst = fmax(worst, fabs(o1[i] - ref[i]));
        CHECK(worst < 1e-5);
        free(wk);
        free(wv);
        free(q);
        kv_free(c);
    }
    attn_ws_free(ws);
    attn_pool_free(pool);
}

/* The decode loops read pages that follow each other in memory (a cache's
 * neighbouring slab slots) as one range: the same bits as over pages that
 * do not, windows starting off a block (L = 6001: 1201- and 2001-key
 * windows) included. */
TEST(contiguous_pages_same_bits_as_scattered)
{
    size_t L = 6001, d = 128, P = KV_PAGE_ROWS, pages = (L + P - 1) / P;
    struct attn_ws *ws = attn_ws_new();
    for (int s = 0; s < 3; s++) {
        struct attn_request r;
        float *q, o1[128], o2[128];
        struct kv_cache *c = long_cache(stores[s], L, d, &r, &q);
        size_t esz = kv_elem_bytes(c);
        struct kv_seg a, b;
        kv_seg(c, 0, 0, &a);
        kv_seg(c, 0, P, &b);
        CHECK((const char *)b.k == (const char *)a.k + P * d * esz);   /* side by side */
        /* each page copied into allocations of its own, apart */
        const void **kp = calloc(2 * pages, sizeof *kp), **vp = kp + pages;
        const float **sp = calloc(2 * pages, sizeof *sp);
        for (size_t g = 0; g < pages; g++) {
            size_t n = L - g * P < P ? L - g * P : P;
            void *kb = malloc(P * d * esz + 64), *vb = malloc(P * d * esz + 64);
            float *ks = malloc(2 * P * sizeof *ks + 64);
            kv_read_stored(c, 0, g * P, n, kb, vb, ks, ks + P);
            kp[g] = kb;
            vp[g] = vb;
            sp[g] = ks;
            sp[pages + g] = ks + P;
        }
        bool i8 = stores[s] == KV_STORE_I8;
        struct kv_lowp_view lv = {stores[s], kp, vp, i8 ? sp : NULL, i8 ? sp + pages : NULL,
                                  P, pages};
        struct attn_inputs qi = {.q = q};
        CHECK_EQ_INT(kv_attend(c, &r, &qi, &(struct attn_result){.output = o1}, ws), CORE_OK);
        CHECK_EQ_INT(kv_lowp_attend(&r, &qi, &lv, &(struct attn_result){.output = o2}, ws),
                     CORE_OK);
        CHECK(memcmp(o1, o2, sizeof o1) == 0);
        for (size_t g = 0; g < pages; g++) {
            free((void *)kp[g]);
            free((void *)vp[g]);
            free((void *)sp[g]);
        }
        free(kp);
        free(sp);
        free(q);
        kv_free(c);
    }
    attn_ws_free(ws);
}

/* The kernels this CPU runs, widest first (each selects its decode loop). */
static int kernels_here(enum attn_kernel ks[3])
{
    static const enum attn_kernel all[3] = {ATTN_KERNEL_AVX512, ATTN_KERNEL_AVX2,
                                            ATTN_KERNEL_NONE};
    unsigned have = attn_kernel_supported();
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (have & (1u << all[i]))
            ks[n++] = all[i];
    return n;
}

/* Every decode loop this CPU has (AVX-512 for d a multiple of 16, AVX2 for
 * a multiple of 8, the portable one for any d, each forced through
 * attn_kernel_set as --kernel does) against the long double reference on
 * the cache's rounded rows: each store, grouped heads with 1 to 3 query
 * rows, both causal corners and none, lengths that end inside a block and
 * span several, a softmax variant with a sink. */
TEST(every_loop_against_reference)
{
    static const size_t dims[5][2] = {{128, 128}, {32, 64}, {48, 80}, {24, 40}, {20, 12}};
    static const size_t lens[3] = {1, 77, 300};
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int ki = 0; ki < nk; ki++) {
        CHECK_EQ_INT(attn_kernel_set(ks[ki]), ks[ki]);
        printf("    kernel %s\n", attn_kernel_name(ks[ki]));
        double worst = 0;
        for (int s = 0; s < 3; s++)
            for (int di = 0; di < 5; di++)
                for (int li = 0; li < 3; li++) {
                    size_t dk = dims[di][0], dv = dims[di][1], L = lens[li], hkv = 2, h = 6;
                    size_t n = L == 1 ? 1 : 1 + (size_t)(li + di) % 3;
                    struct kv_cache *c = kv_new_store(ATTN_F32, stores[s], hkv, dk, dv);
                    float *k = frnd(hkv * L * dk, 1.5f), *v = frnd(hkv * L * dv, 1.5f);
                    CHECK_EQ_INT(kv_append_prepared(c, k, v, L), CORE_OK);
                    float *q = frnd(h * n * dk, 1.0f);
                    float *out = malloc(h * n * dv * sizeof(float));
                    float *ref = malloc(h * n * dv * sizeof(float));
                    struct attn_request r = {
                        .shape = {h, hkv, n, 0, dk, dv},
                        .params = {.dtype = ATTN_F32, .scale = 1 / sqrt((double)dk),
                                   .softmax = li == 2 ? ATTN_SOFTMAX_SINK : ATTN_SOFTMAX_STANDARD,
                                   .sink_logit = 0.3},
                        .causal = (enum attn_causal[]){ATTN_CAUSAL_BOTTOM_RIGHT,
                                                       ATTN_CAUSAL_TOP_LEFT,
                                                       ATTN_CAUSAL_NONE}[(s + di) % 3],
                        .outputs = ATTN_OUT_OUTPUT};
                    struct attn_inputs in = {.q = q};
                    CHECK_EQ_INT(kv_attend(c, &r, &in, &(struct attn_result){.output = out},
                                           NULL), CORE_OK);
                    r.shape.L = L;
                    reference_hd(c, &r, h, dk, dv, q, NULL, ref);
                    for (size_t i = 0; i < h * n * dv; i++)
                        worst = fmax(worst, fabs(out[i] - ref[i]));
                    free(k);
                    free(v);
                    free(q);
                    free(out);
                    free(ref);
                    kv_free(c);
                }
        printf("    largest difference %.3g\n", worst);
        CHECK(worst < 1e-5);
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* A score that overflows float32 is refused by every loop (the cache
 * holds it: int8 and bfloat16 take float32's range). */
TEST(every_loop_refuses_nonfinite_scores)
{
    enum attn_kernel ks[3];
    int nk = kernels_here(ks);
    for (int ki = 0; ki < nk; ki++) {
        attn_kernel_set(ks[ki]);
        for (int s = 1; s < 3; s++) {
            size_t d = 32, L = 70;
            struct kv_cache *c = kv_new_store(ATTN_F32, stores[s], 1, d, d);
            float *k = frnd(L * d, 1.0f), *v = frnd(L * d, 1.0f), *q = frnd(d, 1.0f);
            for (size_t e = 0; e < d; e++)
                k[40 * d + e] = 1e30f;
            q[0] = 1e20f;
            CHECK_EQ_INT(kv_append_prepared(c, k, v, L), CORE_OK);
            float out[32];
            struct attn_request r = {.shape = {1, 1, 1, 0, d, d},
                                     .params = {.dtype = ATTN_F32, .scale = 1.0},
                                     .outputs = ATTN_OUT_OUTPUT};
            CHECK_EQ_INT(kv_attend(c, &r, &(struct attn_inputs){.q = q},
                                   &(struct attn_result){.output = out}, NULL),
                         CORE_ENONFINITE);
            free(k);
            free(v);
            free(q);
            kv_free(c);
        }
    }
    attn_kernel_set(ATTN_KERNEL_AUTO);
}

/* Output-only passes the decode loops do not take (40 query rows per head,
 * a mask, ALiBi) read the cache a window of keys at a time (3000 rows of
 * 8 heads of 128: 3 windows): the same as the float32 pass over the whole
 * widened cache, within rounding; and extras asked for over a narrow cache
 * are computed, as over the widened one. */
TEST(other_passes_window_the_cache)
{
    size_t hkv = 8, h = 8, d = 128, L = 3000, n = t_quick() ? 10 : 40;
    for (int s = 0; s < 3; s++) {
        struct kv_cache *c = kv_new_store(ATTN_F32, stores[s], hkv, d, d);
        float *k = frnd(hkv * L * d, 1.0f), *v = frnd(hkv * L * d, 1.0f);
        float *q = frnd(h * n * d, 1.0f);
        CHECK_EQ_INT(kv_append_prepared(c, k, v, L), CORE_OK);
        float *wk = malloc(hkv * L * d * sizeof(float)), *wv = malloc(hkv * L * d * sizeof(float));
        const void *kp[8], *vp[8];
        for (size_t g = 0; g < hkv; g++) {
            kv_read_rows(c, g, 0, L, wk + g * L * d, wv + g * L * d);
            kp[g] = wk + g * L * d;
            vp[g] = wv + g * L * d;
        }
        struct attn_kv_view view = {.k = kp, .v = vp};
        uint8_t *mask = malloc(n * L);
        for (size_t i = 0; i < n * L; i++)
            mask[i] = (i * 7 + i / L) % 5 != 0;
        float *out = malloc(h * n * d * sizeof(float)), *ref = malloc(h * n * d * sizeof(float));
        struct attn_inputs in = {.q = q};
        for (int variant = 0; variant < 3; variant++) {
            struct attn_request r = {.shape = {h, hkv, variant == 2 ? 1 : n, L, d, d},
                                     .params = {.dtype = ATTN_F32, .scale = 0.09,
                                                .alibi = variant == 2},
                                     .causal = variant == 0 ? ATTN_CAUSAL_BOTTOM_RIGHT
                                                            : ATTN_CAUSAL_NONE,
                                     .mask = variant == 1 ? mask : NULL, .mask_heads = 1,
                                     .outputs = ATTN_OUT_OUTPUT};
            CHECK_EQ_INT(kv_attend(c, &r, &in, &(struct attn_result){.output = out}, NULL),
                         CORE_OK);
            CHECK_EQ_INT(attn_forward_kv(&r, &in, &view, &(struct attn_result){.output = ref},
                                         NULL), CORE_OK);
            double worst = 0;
            for (size_t i = 0; i < h * r.shape.n * d; i++)
                worst = fmax(worst, fabs(out[i] - ref[i]));
            CHECK(worst < 1e-5);
        }
        /* extras over the narrow cache */
        struct attn_request r = {.shape = {h, hkv, 2, L, d, d},
                                 .params = {.dtype = ATTN_F32, .scale = 0.09},
                                 .outputs = ATTN_OUT_OUTPUT};
        float lse[16], lse_ref[16];
        struct attn_extras x = {.want = ATTN_X_LSE};
        struct attn_extras_out xo = {.lse = lse}, xr = {.lse = lse_ref};
        CHECK_EQ_INT(kv_attend_x(c, &r, &in, &x, &xo, &(struct attn_result){.output = out},
                                 NULL), CORE_OK);
        CHECK_EQ_INT(attn_forward_extras(&r, &in, &view, &x,
                                         &(struct attn_result){.output = ref}, &xr, NULL),
                     CORE_OK);
        for (size_t i = 0; i < 16; i++)
            CHECK(fabs(lse[i] - lse_ref[i]) < 1e-5);
        free(k);
        free(v);
        free(q);
        free(wk);
        free(wv);
        free(mask);
        free(out);
        free(ref);
        kv_free(c);
    }
}

/* A due stop (cancelled) ends a long decode over a narrow cache with
 * CORE_ESTOPPED, with and without a helper pool, never with a result
 * merged from windows that did not run. */
TEST(decode_stops_when_due)
{
    size_t L = 6000, d = 128;
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    struct attn_ws *ws = attn_ws_new();
    struct kv_cache *c = kv_new_store(ATTN_F32, KV_STORE_F16, 1, d, d);
    float *k = frnd(L * d, 1.0f), *v = frnd(L * d, 1.0f), *q = frnd(d, 1.0f), o[128];
    CHECK_EQ_INT(kv_append_prepared(c, k, v, L), CORE_OK);
    atomic_bool cancel = true;
    struct attn_stop stop = {.cancel = &cancel};
    attn_ws_set_stop(ws, &stop);
    struct attn_request r = {.shape = {1, 1, 1, L, d, d},
                             .params = {.dtype = ATTN_F32, .scale = 0.088},
                             .outputs = ATTN_OUT_OUTPUT};
    for (int withpool = 0; withpool < 2; withpool++) {
        attn_ws_set_pool(ws, withpool ? pool : NULL);
        CHECK_EQ_INT(kv_attend(c, &r, &(struct attn_inputs){.q = q},
                               &(struct attn_result){.output = o}, ws), CORE_ESTOPPED);
    }
    atomic_store(&cancel, false);
    CHECK_EQ_INT(kv_attend(c, &r, &(struct attn_inputs){.q = q},
                           &(struct attn_result){.output = o}, ws), CORE_OK);
    attn_ws_free(ws);
    attn_pool_free(pool);
    kv_free(c);
    free(k);
    free(v);
    free(q);
}

int main(void)
{
    RUN(storage_rounds_prepared_rows_once);
    RUN(int8_tiny_rows_keep_their_values);
    RUN(overflow_refused_cache_unchanged);
    RUN(decode_against_reference);
    RUN(long_cache_windows_same_with_pool);
    RUN(contiguous_pages_same_bits_as_scattered);
    RUN(every_loop_against_reference);
    RUN(every_loop_refuses_nonfinite_scores);
    RUN(other_passes_window_the_cache);
    RUN(decode_stops_when_due);
    TEST_MAIN_END();
}
