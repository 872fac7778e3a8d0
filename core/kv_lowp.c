/*
 * core/kv_lowp.c — decode attention over a float16 / bfloat16 / int8 cache
 * (kv_lowp.h).
 *
 * Decoding is memory-bound: a step reads every cached row once, so reading
 * 2-byte (or 1-byte) rows instead of 4-byte ones is the speed-up, and only
 * as long as nothing converts the whole cache first and the arithmetic per
 * row stays below the time its bytes take to arrive.
 *
 * The loops work on one contiguous range of one kv head's rows (struct
 * lp_range: pointers and a row count), carrying each query row's online
 * softmax state (struct lp_state) from range to range, so a cache kept in
 * blocks calls them once per block. Three of them, chosen by the active
 * fused kernel (core/attn_kernel.c, so --kernel forces them too): AVX-512
 * and AVX2 (core/kv_lowp_impl.h, rows widened in registers: F16C / a shift
 * / int8 to float, the int8 row scale applied once per score and once per
 * weight), and a portable one that widens a block of LP_KB rows into an
 * L1 buffer first.
 *
 * The driver cuts the keys into at most LP_WIN windows of about
 * LP_WIN_BYTES stored bytes or more, the last three of four or more
 * smaller (lp_cut), runs them as pieces on the workspace's pool and merges
 * them as attn_combine merges attn_forward_kv_keys' windows (the cut and
 * the loop depend only on the request, so the bits do not depend on how
 * many helpers joined).
 *
 * The other output-only passes (more query rows, masks, ALiBi, windows,
 * ...: kv_lowp_attend_windows) widen the cache a window of keys at a time
 * into a bounded scratch, run attn_forward_kv_keys on each and merge the
 * windows; passes that return scores or weights widen the whole cache
 * (core/kv.c), as they write n·L numbers anyway.
 */
#include "kv_lowp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_fused.h"
#include "half.h"
#include "pool.h"

/* Keys per block. The K and V lines of the rows LP_PF_BYTES ahead are
 * asked for a line or two at a time inside the score and value loops
 * (core/kv_lowp_impl.h). 16 keys: larger blocks do less per-block work
 * (faster from L3) but are slower cold, which is what a decode step is.
 * Tuned: docs/benchmarks.md, section "Half precision" (decode over narrow
 * caches). */
#ifndef LP_KB
#define LP_KB 16
#endif
/* Windows: at most LP_WIN of at least LP_WIN_BYTES stored bytes (the last
 * three smaller: lp_cut). A helper that joins late leaves up to one
 * window's time at the end with a core idle, so windows are small enough
 * to keep that gap short (tuned: docs/benchmarks.md, section "Half
 * precision"). */
#ifndef LP_WIN
#define LP_WIN 16
#endif
#ifndef LP_WIN_BYTES
#define LP_WIN_BYTES ((size_t)512 << 10)
#endif
/* Bytes between the windows' partial results (two cache lines: the
 * hardware fetches lines in pairs). */
#define LP_LINE 128
#ifndef LP_PF_BYTES
#define LP_PF_BYTES 8192            /* K+V bytes ahead asked for */
#endif
/* Into L2, not L1 (__builtin_prefetch's locality 2 is prefetcht1; 3 is
 * prefetcht0): faster on an AVX-512 Zen 4, no different elsewhere (tuned:
 * docs/benchmarks.md, section "Half precision", prefetcht1 on an AVX-512
 * Zen 4). */
#ifndef LP_PF_LOCALITY
#define LP_PF_LOCALITY 2
#endif

bool kv_lowp_takes(const struct attn_request *r)
{
    const struct attn_shape *s = &r->shape;
    return r->outputs == ATTN_OUT_OUTPUT && r->params.dtype == ATTN_F32 && !r->attn_bias &&
           !r->mask && !r->params.alibi && r->params.softcap == 0 && !r->window.on &&
           !r->seg_q && !r->seg_k && !r->pos_q && !r->pos_k && s->B <= 1 && s->h_kv &&
           s->h % s->h_kv == 0 && s->h / s->h_kv * s->n <= KV_LOWP_ROWS;
}

/* One window's partial results: o [rows][d_v], m [rows], l [rows]. */
struct lp_part {
    float *o, *m;
    double *l;
};

/* The query side of one kv head's pass: its R = G·n rows (query head
 * g·G + t / n, row t % n), prepared [R][dk]; lim [n] the rows' causal
 * limits (keys with index < lim are seen). */
struct lp_query {
    const float *q;
    size_t R, n;
    const size_t *lim;
    size_t dk, dv;
    float scale;
};

/* A contiguous range of one kv head's stored rows: k [cnt][dk] and
 * v [cnt][dv] elements in the store's form, int8's row scales ks, vs
 * [cnt] (NULL otherwise); key0 the index of its first row in the cache. */
struct lp_range {
    const void *k, *v;
    const float *ks, *vs;
    size_t cnt, key0;
    const void *nk, *nv;            /* the next range's rows (prefetched ahead), or NULL */
    const float *nks, *nvs;         /* and their int8 scales (NULL otherwise) */
    size_t ncnt;                    /* and their count */
    bool cold;                      /* no range before it asked for its first rows */
};

/* The running state of a head's R query rows over the keys read so far:
 * o [R][dv] (unnormalised), m [R] running max (-inf before any key),
 * l [R] sum of e^(s - m). */
struct lp_state {
    float *o, *m;
    double *l;
};

/* A range loop: the range's rows into the state; scratch sb of
 * lp_scratch_floats floats. False when an allowed score is not finite. */
typedef bool (*lp_range_fn)(enum kv_store st, const struct lp_query *q,
                            const struct lp_range *rg, struct lp_state *s, float *sb);

static size_t lp_scratch_floats(size_t R, size_t dk, size_t dv)
{
    return LP_KB * (R + (dk > dv ? dk : dv));
}

/* One key block's online-softmax step for one query row (the portable
 * loop): srow [nb] scores (-inf where masked) with block maximum mb become
 * exp(s - m) against the row's running maximum, rescaling the row's output
 * o [dv] and sum when the block raises m, and the block's sum joins l.
 * false: no allowed key in the block (srow zeroed, nothing else changed). */
static inline bool block_softmax(float *m, double *l, float *o, size_t dv, float *srow,
                                 size_t nb, float mb)
{
    float m0 = *m;
    if (mb == -INFINITY) {
        memset(srow, 0, nb * sizeof(float));
        return false;
    }
    if (mb > m0) {
        float a = m0 == -INFINITY ? 0 : expf(m0 - mb);
        for (size_t c = 0; c < dv; c++)
            o[c] *= a;
        *l *= a;
        *m = m0 = mb;
    }
    double sum = 0;
    for (size_t jj = 0; jj < nb; jj++) {
        srow[jj] = srow[jj] == -INFINITY ? 0 : expf(srow[jj] - m0);
        sum += srow[jj];
    }
    *l += sum;
    return true;
}

/* The 64-byte vector types below only pass between static always-inline
 * helpers of this file, never across a call boundary, so GCC's note that
 * their ABI differs without AVX-512 (-Wpsabi) does not apply; without this
 * a portable build (-O2, no -march) fails under -Werror. */
#pragma GCC diagnostic ignored "-Wpsabi"

/* 16 floats (GCC vector extensions: one AVX-512 register, two AVX2 or four
 * SSE ones, NEON alike, whatever the build's -march). */
typedef float v16f __attribute__((vector_size(64)));
typedef int8_t v16i8 __attribute__((vector_size(16)));
typedef int32_t v16i32 __attribute__((vector_size(64)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) v16f ld(const float *p)
{
    v16f x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline __attribute__((always_inline)) void st(float *p, v16f x)
{
    memcpy(p, &x, sizeof x);
}

/* Stored rows [j, j + m) of a range (d wide, int8 row scales sc) -> x [m][d]
 * floats. */
static void widen_rows(enum kv_store store, const void *blk, const float *sc, size_t d,
                       size_t j, size_t m, float *x)
{
    size_t n = m * d, i;
    if (store == KV_STORE_F16) {
        half_f16_to_f32_n((const uint16_t *)blk + j * d, x, n);
    } else if (store == KV_STORE_BF16) {
        const uint16_t *h = (const uint16_t *)blk + j * d;
        for (i = 0; i + 16 <= n; i += 16) {
            v16u16 a;
            memcpy(&a, h + i, sizeof a);
            v16u32 w = __builtin_convertvector(a, v16u32) << 16;
            memcpy(x + i, &w, sizeof w);
        }
        for (; i < n; i++)
            x[i] = half_bf16_to_f32(h[i]);
    } else {
        const int8_t *q = (const int8_t *)blk + j * d;
        for (size_t r = 0; r < m; r++) {
            float s = sc[j + r];
            const int8_t *qr = q + r * d;
            float *xr = x + r * d;
            for (i = 0; i + 16 <= d; i += 16) {
                v16i8 a;
                memcpy(&a, qr + i, sizeof a);
                st(xr + i, __builtin_convertvector(__builtin_convertvector(a, v16i32), v16f) * s);
            }
            for (; i < d; i++)
                xr[i] = (float)qr[i] * s;
        }
    }
}

/* a · b over d floats. */
static inline float dot_gen(const float *a, const float *b, size_t d)
{
    v16f acc = {0};
    float s = 0;
    size_t i = 0;
    for (; i + 16 <= d; i += 16)
        acc += ld(a + i) * ld(b + i);
    for (; i < d; i++)
        s += a[i] * b[i];
    for (int u = 0; u < 16; u++)
        s += acc[u];
    return s;
}

/* o [d] += p · x [d] */
static inline void axpy_gen(float *o, float p, const float *x, size_t d)
{
    size_t i = 0;
    for (; i + 16 <= d; i += 16)
        st(o + i, ld(o + i) + p * ld(x + i));
    for (; i < d; i++)
        o[i] += p * x[i];
}

/* The portable range loop (any d): per block of LP_KB keys, the K rows
 * widened into xb (after sb's [R][LP_KB] scores), scores, the softmax
 * step, then the widened V rows into the outputs. */
static bool range_gen(enum kv_store store, const struct lp_query *q, const struct lp_range *rg,
                      struct lp_state *s, float *sb)
{
    size_t dk = q->dk, dv = q->dv;
    float *xb = sb + LP_KB * q->R;
    bool ok = true;
    for (size_t b0 = 0; b0 < rg->cnt; b0 += LP_KB) {
        size_t nb = rg->cnt - b0 < LP_KB ? rg->cnt - b0 : LP_KB;
        widen_rows(store, rg->k, rg->ks, dk, b0, nb, xb);
        for (size_t t = 0; t < q->R; t++) {
            const float *qt = q->q + t * dk;
            size_t lim = q->lim[t % q->n];
            float *srow = sb + t * LP_KB, mb = -INFINITY;
            for (size_t jj = 0; jj < nb; jj++) {
                float x = rg->key0 + b0 + jj < lim ? q->scale * dot_gen(qt, xb + jj * dk, dk)
                                                   : -INFINITY;
                if (x != -INFINITY && !isfinite(x))
                    ok = false;
                srow[jj] = x;
                mb = x > mb ? x : mb;
            }
            block_softmax(&s->m[t], &s->l[t], s->o + t * dv, dv, srow, nb, mb);
        }
        widen_rows(store, rg->v, rg->vs, dv, b0, nb, xb);
        for (size_t t = 0; t < q->R; t++) {
            float *o = s->o + t * dv;
            for (size_t jj = 0; jj < nb; jj++)
                axpy_gen(o, sb[t * LP_KB + jj], xb + jj * dv, dv);
        }
    }
    return ok;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "simd256.h"
#include "simd512.h"

_Static_assert(LP_KB % 16 == 0, "the softmax step takes a block in whole 16-lane registers");

/* ---- AVX-512 (d_k, d_v multiples of 16) ---- */
#define LP_FN static inline __attribute__((always_inline, target("avx512f,avx512dq")))
#define LP_ENTRY static __attribute__((target("avx512f,avx512dq")))
#define LP_VEC __m512
#define LP_LANES 16
#define LP_NA 8
#define LP_RANGE_F16 range_512_f16
#define LP_RANGE_BF16 range_512_bf16
#define LP_RANGE_I8 range_512_i8
#define LP_(name) lp_##name##_512

/* 16 stored elements of a row from element e, widened in a register. */
LP_FN __m512 LP_(ld)(enum kv_store st, const void *row, size_t e)
{
    if (st == KV_STORE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)row + e)));
    if (st == KV_STORE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)row + e))), 16));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)row + e))));
}

LP_FN __m512 LP_(ldf)(const float *p) { return _mm512_loadu_ps(p); }
LP_FN void LP_(stf)(float *p, __m512 x) { _mm512_storeu_ps(p, x); }
LP_FN __m512 LP_(set1)(float x) { return _mm512_set1_ps(x); }
LP_FN __m512 LP_(zero)(void) { return _mm512_setzero_ps(); }
LP_FN __m512 LP_(fma)(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
LP_FN __m512 LP_(add)(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
LP_FN __m512 LP_(mul)(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
LP_FN __m512 LP_(max)(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
LP_FN __m512 LP_(exp)(__m512 x) { return simd_exp16(x); }
LP_FN float LP_(hsum)(__m512 x) { return _mm512_reduce_add_ps(x); }
LP_FN float LP_(hmax)(__m512 x) { return _mm512_reduce_max_ps(x); }

LP_FN void LP_(hsum4)(__m512 a, __m512 b, __m512 c, __m512 d, float *x)
{
    /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then the four sums */
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 s = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab),
                                                                  _mm512_castps_pd(cd))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab),
                                                                  _mm512_castps_pd(cd))));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    _mm_storeu_ps(x, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

LP_FN double LP_(hsum_d)(__m512 x)
{
    __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_reduce_add_pd(_mm512_add_pd(a, b));
}

#include "kv_lowp_impl.h"

#undef LP_FN
#undef LP_ENTRY
#undef LP_VEC
#undef LP_LANES
#undef LP_NA
#undef LP_RANGE_F16
#undef LP_RANGE_BF16
#undef LP_RANGE_I8
#undef LP_

/* ---- AVX2 + FMA + F16C (d_k, d_v multiples of 8) ---- */
#define LP_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define LP_ENTRY static __attribute__((target("avx2,fma,f16c")))
#define LP_VEC __m256
#define LP_LANES 8
#define LP_NA 8
#define LP_RANGE_F16 range_256_f16
#define LP_RANGE_BF16 range_256_bf16
#define LP_RANGE_I8 range_256_i8
#define LP_(name) lp_##name##_256

LP_FN __m256 LP_(ld)(enum kv_store st, const void *row, size_t e)
{
    if (st == KV_STORE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + e)));
    if (st == KV_STORE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
            _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + e))), 16));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)((const int8_t *)row + e))));
}

LP_FN __m256 LP_(ldf)(const float *p) { return _mm256_loadu_ps(p); }
LP_FN void LP_(stf)(float *p, __m256 x) { _mm256_storeu_ps(p, x); }
LP_FN __m256 LP_(set1)(float x) { return _mm256_set1_ps(x); }
LP_FN __m256 LP_(zero)(void) { return _mm256_setzero_ps(); }
LP_FN __m256 LP_(fma)(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
LP_FN __m256 LP_(add)(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
LP_FN __m256 LP_(mul)(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
LP_FN __m256 LP_(max)(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }

LP_FN __m256 LP_(exp)(__m256 x)
{
    return simd_exp2_8(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
}

LP_FN float LP_(hsum)(__m256 a)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

LP_FN float LP_(hmax)(__m256 a)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

LP_FN void LP_(hsum4)(__m256 a, __m256 b, __m256 c, __m256 d, float *x)
{
    /* hadd twice: per 128-bit half [a, b, c, d] partial sums, then the halves */
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(x, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

LP_FN double LP_(hsum_d)(__m256 a)
{
    __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                              _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

#include "kv_lowp_impl.h"

/* The widest loop this CPU and the chosen kernel (core/attn_kernel.c, so
 * --kernel / ATTND_KERNEL force it) run on rows of dk, dv. */
static lp_range_fn lp_choose(enum kv_store st, size_t dk, size_t dv)
{
    enum attn_kernel k = attn_kernel_active();
    if (k == ATTN_KERNEL_AVX512 && dk % 16 == 0 && dv % 16 == 0)
        return st == KV_STORE_F16 ? range_512_f16 : st == KV_STORE_BF16 ? range_512_bf16
                                                                         : range_512_i8;
    if (k != ATTN_KERNEL_NONE && half_f16c_available() && dk % 8 == 0 && dv % 8 == 0)
        return st == KV_STORE_F16 ? range_256_f16 : st == KV_STORE_BF16 ? range_256_bf16
                                                                         : range_256_i8;
    return range_gen;
}
#else
static lp_range_fn lp_choose(enum kv_store st, size_t dk, size_t dv)
{
    (void)st, (void)dk, (void)dv;
    return range_gen;
}
#endif

struct lp_job {
    const struct attn_request *r;
    const struct kv_lowp_view *v;
    const float *q;                 /* prepared queries [h][n][d_k] */
    const size_t *lim;              /* [n] causal limits */
    size_t L, nwin;                 /* keys, windows (lp_cut) */
    lp_range_fn fn;                 /* chosen once per pass: the same bits in every window */
    struct lp_part *parts;          /* [windows] */
    int *bad;                       /* [windows]: a score was not finite */
};

/* The first key of window w of nwin over L keys (L for w = nwin). Fewer
 * than 4 windows: equal, ceil(L / nwin) keys. Otherwise 4 parts each, the
 * last three 2, 1 and 1 part, on LP_KB boundaries: the two cores claim
 * windows in turn, and whichever finishes first waits for the other's last
 * window; equal windows left a core idle for half a window at the end of
 * a step, a last window of a quarter cuts that to an eighth (measured:
 * docs/benchmarks.md, section "Half precision"). */
static size_t lp_cut(size_t L, size_t nwin, size_t w)
{
    if (w >= nwin)
        return L;
    if (nwin < 4)
        return w * ((L + nwin - 1) / nwin) < L ? w * ((L + nwin - 1) / nwin) : L;
    size_t parts = 4 * nwin - 8;
    size_t at = w + 3 <= nwin ? 4 * w : w + 2 == nwin ? 4 * w - 2 : 4 * w - 5;
    /* L * at / parts without overflow: at < parts */
    return (L / parts * at + L % parts * at / parts) / LP_KB * LP_KB;
}

/* Windows of the keys [0, L) of a pass over `bytes` stored bytes. */
static size_t lp_windows(size_t L, size_t bytes)
{
    size_t nwin = bytes / LP_WIN_BYTES;
    nwin = nwin < 1 ? 1 : nwin > LP_WIN ? LP_WIN : nwin;
    while (nwin >= 4 && L / (4 * nwin - 8) < LP_KB)     /* a part of a block or more */
        nwin--;
    if (nwin < 4) {             /* none empty */
        size_t wk = (L + nwin - 1) / nwin;
        nwin = (L + wk - 1) / wk;
    }
    return nwin;
}

/* Whether page b + 1 of a paged view follows page b in memory, in every
 * part (a cache's neighbouring slab slots, core/kv_slab.h). */
static bool lp_follows(const struct kv_lowp_view *v, size_t b, size_t dk, size_t dv, size_t esz)
{
    size_t pr = v->page_rows;
    return (const char *)v->k[b + 1] == (const char *)v->k[b] + pr * dk * esz &&
           (const char *)v->v[b + 1] == (const char *)v->v[b] + pr * dv * esz &&
           (!v->ks || v->ks[b + 1] == v->ks[b] + pr) && (!v->vs || v->vs[b + 1] == v->vs[b] + pr);
}

/* Keys [key, end) of head g from key on, as far as they lie in one block
 * (pages that follow each other in memory, or the whole head) -> *rg
 * (rg->cnt of them). A range grows past a page end only where it holds
 * whole LP_KB blocks, so the loops' blocks, and the bits, are those of
 * one range per page. */
static void lp_seg(const struct kv_lowp_view *v, size_t g, size_t key, size_t end, size_t dk,
                   size_t dv, struct lp_range *rg)
{
    size_t esz = v->store == KV_STORE_I8 ? 1 : 2, b = g, j = key, n = end - key;
    if (v->page_rows) {
        size_t pr = v->page_rows, last = g * v->pages + (end - 1) / pr;
        b = g * v->pages + key / pr;
        j = key % pr;
        n = pr - j < n ? pr - j : n;
        for (size_t e = b; e < last && n % LP_KB == 0 && lp_follows(v, e, dk, dv, esz); e++)
            n += end - key - n < pr ? end - key - n : pr;
    }
    rg->k = (const char *)v->k[b] + j * dk * esz;
    rg->v = (const char *)v->v[b] + j * dv * esz;
    rg->ks = v->ks ? v->ks[b] + j : NULL;
    rg->vs = v->vs ? v->vs[b] + j : NULL;
    rg->cnt = n;
    rg->key0 = key;
    rg->nk = rg->nv = NULL;
    rg->nks = rg->nvs = NULL;
    rg->ncnt = 0;
    rg->cold = false;
}

/* Window w: every kv head's keys [k0, k1), block by block (a page at a
 * time in a paged view) -> parts[w]. */
static void window_piece(void *arg, size_t w, struct attn_ws *ws)
{
    (void)ws;
    const struct lp_job *j = arg;
    const struct attn_shape *s = &j->r->shape;
    const struct kv_lowp_view *v = j->v;
    size_t k0 = lp_cut(j->L, j->nwin, w), k1 = lp_cut(j->L, j->nwin, w + 1);
    size_t G = s->h / s->h_kv, R = G * s->n, dk = s->d_k, dv = s->d_v;
    struct lp_part *p = &j->parts[w];
    float *buf = malloc(lp_scratch_floats(R, dk, dv) * sizeof(float));
    if (!buf) {
        j->bad[w] = 2;
        return;
    }
    for (size_t g = 0; g < s->h_kv; g++) {
        size_t row0 = g * R;
        struct lp_state st = {p->o + row0 * dv, p->m + row0, p->l + row0};
        for (size_t t = 0; t < R; t++) {
            st.m[t] = -INFINITY;
            st.l[t] = 0;
        }
        memset(st.o, 0, R * dv * sizeof(float));
        struct lp_query q = {j->q + row0 * dk, R, s->n, j->lim, dk, dv,
                             (float)j->r->params.scale};
        struct lp_range rg, next;
        lp_seg(v, g, k0, k1, dk, dv, &next);
        next.cold = true;                   /* the window's first rows of this head */
        for (size_t key = k0; key < k1; key += rg.cnt) {
            rg = next;
            if (key + rg.cnt < k1) {        /* the next page, for the prefetch */
                lp_seg(v, g, key + rg.cnt, k1, dk, dv, &next);
                rg.nk = next.k;
                rg.nv = next.v;
                rg.nks = next.ks;
                rg.nvs = next.vs;
                rg.ncnt = next.cnt;
            }
            if (!j->fn(v->store, &q, &rg, &st, buf))
                j->bad[w] = 1;
        }
    }
    free(buf);
}

/* Merge the windows into out (the softmax variant's denominator). */
static enum core_status combine(const struct attn_request *r, const struct lp_part *parts,
                                size_t nwin, struct attn_result *out)
{
    const struct attn_shape *s = &r->shape;
    const struct attn_params *p = &r->params;
    float *o = out->output;
    out->n_empty = 0;
    for (size_t row = 0; row < s->h * s->n; row++) {
        size_t hh = row / s->n;
        double M = -INFINITY, l = 0, m2, den;
        float *orow = o + row * s->d_v;
        for (size_t w = 0; w < nwin; w++)
            M = parts[w].m[row] > M ? parts[w].m[row] : M;
        if (out->empty)
            out->empty[row] = 0;
        if (M == -INFINITY) {                   /* no allowed key */
            if (r->empty_rows == ATTN_EMPTY_ERROR)
                return CORE_EEMPTYROW;
            memset(orow, 0, s->d_v * sizeof(float));
            if (out->empty)
                out->empty[row] = 1;
            out->n_empty++;
            continue;
        }
        double sink = p->softmax == ATTN_SOFTMAX_SINK
                          ? (p->sink_logits ? p->sink_logits[hh] : p->sink_logit) : 0;
        m2 = p->softmax == ATTN_SOFTMAX_STANDARD ? M : M > sink ? M : sink;
        memset(orow, 0, s->d_v * sizeof(float));
        for (size_t w = 0; w < nwin; w++) {
            if (parts[w].m[row] == -INFINITY)
                continue;
            double a = exp(parts[w].m[row] - m2);
            const float *ow = parts[w].o + row * s->d_v;
            l += parts[w].l[row] * a;
            for (size_t c = 0; c < s->d_v; c++)
                orow[c] += (float)(a * ow[c]);
        }
        den = l + (p->softmax == ATTN_SOFTMAX_STANDARD ? 0 : exp(sink - m2));
        for (size_t c = 0; c < s->d_v; c++) {
            orow[c] = (float)(orow[c] / den);
            if (!isfinite(orow[c]))
                return CORE_ENONFINITE;
        }
    }
    return CORE_OK;
}

enum core_status kv_lowp_attend(const struct attn_request *r, const struct attn_inputs *in,
                                const struct kv_lowp_view *v, struct attn_result *out,
                                struct attn_ws *ws)
{
    const struct attn_shape *s = &r->shape;
    enum core_status st = attn_check(r);
    if (st != CORE_OK)
        return st;
    if (!in || !in->q || !out || !out->output || !kv_lowp_takes(r))
        return CORE_EINVAL;
    if (in->bias_q && in->bias_q_heads != 1 && in->bias_q_heads != s->h)
        return CORE_ESHAPE;
    size_t rows = s->h * s->n, esz = v->store == KV_STORE_I8 ? 1 : 2;
    size_t bytes = s->h_kv * s->L * (s->d_k + s->d_v) * esz;   /* checked by attn_check */
    size_t nwin = lp_windows(s->L, bytes);
    /* Each window's partials (l, o, m) on cache lines of their own, LP_LINE
     * apart: packed side by side, the windows the two cores ran at once
     * shared lines that every key block writes (one query row: the 16
     * windows' l were one line), and two cores ran an int8 step from L3 no
     * faster than one. */
    size_t per = (rows * sizeof(double) + rows * (s->d_v + 1) * sizeof(float) + LP_LINE - 1) /
                 LP_LINE * LP_LINE;
    size_t qb = (rows * s->d_k * sizeof(float) + 7) / 8 * 8;
    size_t fb = (s->n * sizeof(size_t) + nwin * sizeof(int) + 7) / 8 * 8;
    char *mem = malloc(LP_LINE + nwin * per + qb + fb + nwin * sizeof(struct lp_part));
    if (!mem)
        return CORE_ENOMEM;
    /* layout: the windows' partials (line-aligned), q, limits, flags, parts */
    char *wb = (char *)(((uintptr_t)mem + LP_LINE - 1) & ~(uintptr_t)(LP_LINE - 1));
    float *q = (float *)(void *)(wb + nwin * per);
    size_t *lim = (size_t *)(void *)((char *)q + qb);
    int *bad = (int *)(void *)(lim + s->n);
    struct lp_part *parts = (struct lp_part *)(void *)((char *)lim + fb);
    for (size_t w = 0; w < nwin; w++) {
        parts[w].l = (double *)(void *)(wb + w * per);
        parts[w].o = (float *)(void *)(parts[w].l + rows);
        parts[w].m = parts[w].o + rows * s->d_v;
        bad[w] = 0;
    }
    for (size_t i = 0; i < s->n; i++) {
        int64_t pos = r->causal == ATTN_CAUSAL_TOP_LEFT
                          ? (int64_t)i : (int64_t)s->L - (int64_t)s->n + (int64_t)i;
        lim[i] = r->causal == ATTN_CAUSAL_NONE ? s->L
                 : pos < 0 ? 0 : (size_t)pos + 1 < s->L ? (size_t)pos + 1 : s->L;
    }
    st = attn_prepare_q(r, in, 0, rows, q);
    if (st != CORE_OK) {
        free(mem);
        return st;
    }
    struct lp_job job = {r, v, q, lim, s->L, nwin, lp_choose(v->store, s->d_k, s->d_v), parts,
                         bad};
    if (!attn_pool_run(ws ? attn_ws_pool(ws) : NULL, window_piece, &job, nwin, ws))
        st = CORE_ESTOPPED;                 /* a stop came due: windows were skipped */
    for (size_t w = 0; w < nwin && st == CORE_OK; w++)
        st = bad[w] == 2 ? CORE_ENOMEM : bad[w] ? CORE_ENONFINITE : CORE_OK;
    if (st == CORE_OK)
        st = combine(r, parts, nwin, out);
    free(mem);
    return st;
}

/* ---- passes the loops do not take, a window of keys at a time ---------- */

/* Stored bytes widened per window: the scratch such a pass holds. */
#define LP_WIDE_BYTES ((size_t)4 << 20)

/* acc (+)= b, window partials of rows [rows] of d_v floats: both rescaled
 * to the larger maximum. */
static void partial_merge(struct attn_partial *acc, const struct attn_partial *b, size_t rows,
                          size_t dv)
{
    float *oa = acc->o;
    const float *ob = b->o;
    for (size_t i = 0; i < rows; i++) {
        double ma = acc->m[i], mb = b->m[i], m = ma > mb ? ma : mb;
        if (mb == -INFINITY)
            continue;
        float fa = ma == -INFINITY ? 0 : (float)exp(ma - m), fb = (float)exp(mb - m);
        for (size_t c = 0; c < dv; c++)
            oa[i * dv + c] = fa * oa[i * dv + c] + fb * ob[i * dv + c];
        acc->l[i] = (ma == -INFINITY ? 0 : acc->l[i] * exp(ma - m)) + b->l[i] * exp(mb - m);
        acc->m[i] = m;
    }
}

enum core_status kv_lowp_attend_windows(const struct attn_request *r,
                                        const struct attn_inputs *in,
                                        const struct kv_lowp_view *v, struct attn_result *out,
                                        struct attn_ws *ws)
{
    const struct attn_shape *s = &r->shape;
    enum core_status st = attn_check(r);
    if (st != CORE_OK)
        return st;
    if (r->outputs != ATTN_OUT_OUTPUT || r->params.dtype != ATTN_F32 || s->B > 1 || !out ||
        !out->output)
        return CORE_EINVAL;
    size_t hk = s->h_kv, dk = s->d_k, dv = s->d_v, rows = s->h * s->n;
    size_t esz = v->store == KV_STORE_I8 ? 1 : 2;
    size_t W = LP_WIDE_BYTES / (hk * (dk + dv) * esz);
    W = W < 256 ? 256 : W > s->L ? s->L : W;
    /* scratch: widened rows of every head, then two partials */
    size_t fl = hk * W * (dk + dv) + 2 * rows * dv;
    float *buf = malloc(fl * sizeof(float));
    double *md = malloc(4 * rows * sizeof(double));
    const void **ptr = malloc(2 * hk * sizeof *ptr);
    if (!buf || !md || !ptr) {
        st = CORE_ENOMEM;
        goto done;
    }
    struct attn_partial acc = {buf + hk * W * (dk + dv), md, md + rows};
    struct attn_partial win = {(float *)acc.o + rows * dv, md + 2 * rows, md + 3 * rows};
    for (size_t i = 0; i < rows; i++) {
        acc.m[i] = -INFINITY;
        acc.l[i] = 0;
    }
    memset(acc.o, 0, rows * dv * sizeof(float));
    struct attn_kv_view view = {.k = ptr, .v = ptr + hk};
    for (size_t k0 = 0; k0 < s->L && st == CORE_OK; k0 += W) {
        size_t m = s->L - k0 < W ? s->L - k0 : W;
        for (size_t g = 0; g < hk; g++) {
            float *kg = buf + g * W * (dk + dv), *vg = kg + W * dk;
            struct lp_range rg;
            for (size_t key = k0; key < k0 + m; key += rg.cnt) {
                lp_seg(v, g, key, k0 + m, dk, dv, &rg);
                widen_rows(v->store, rg.k, rg.ks, dk, 0, rg.cnt, kg + (key - k0) * dk);
                widen_rows(v->store, rg.v, rg.vs, dv, 0, rg.cnt, vg + (key - k0) * dv);
            }
            /* the view is indexed by the cache's key index: row k0 + j of
             * the pass is row j here (only rows [k0, k0 + m) are read) */
            ptr[g] = (const void *)((uintptr_t)kg - k0 * dk * sizeof(float));
            ptr[hk + g] = (const void *)((uintptr_t)vg - k0 * dv * sizeof(float));
        }
        st = attn_forward_kv_keys(r, in, &view, &win, ws, k0, k0 + m);
        if (st == CORE_OK)
            partial_merge(&acc, &win, rows, dv);
    }
    if (st == CORE_OK)
        st = attn_combine(r, &acc, 1, out);
done:
    free(buf);
    free(md);
    free(ptr);
    return st;
}
