/*
 * core/kv_lowp.c — decode attention over a float16 / bfloat16 / int8 cache
 * (kv_lowp.h).
 *
 * Decoding is memory-bound: a step reads every cached row once, so reading
 * 2-byte (or 1-byte) rows instead of 4-byte ones is the speed-up, and only
 * as long as nothing converts the whole cache first. Here each key row is
 * widened into a d-float buffer that stays in L1 (F16C / a shift / int8 ×
 * scale), used for every query row of its kv head, and dropped: per key
 * block of KB keys, scores (q · k, one dot per query row), the block's
 * online-softmax step (running max m, sum l in double, the output rescaled
 * when m rises), then the widened V rows accumulate into the outputs. The
 * keys are cut into at most LP_WIN windows of at least LP_WIN_BYTES stored
 * bytes, run as pieces on the workspace's pool and merged as
 * attn_combine merges attn_forward_kv_keys' windows (the cut depends only
 * on the request, so the bits do not depend on how many helpers joined).
 *
 * Everything the loops do not take (kv_lowp_takes) goes through the
 * widened cache and attn_forward_kv (core/kv.c).
 */
#include "kv_lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "pool.h"

#define KB 32                       /* keys per block */
#define LP_WIN 8
#define LP_WIN_BYTES ((size_t)1 << 20)
#define LP_PF 48                    /* rows ahead asked for (prefetcht0) */

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

/* One key block's online-softmax step for one query row: srow [nb] scores
 * (-inf where masked) with block maximum mb become exp(s - m) against the
 * row's running maximum m, rescaling the row's output and sum when the block
 * raises m, and the block's sum joins l. false: no allowed key in the block
 * (srow zeroed, nothing else changed). */
static inline bool block_softmax(struct lp_part *p, size_t row, size_t dv, float *srow,
                                 size_t nb, float mb)
{
    float m0 = p->m[row];
    if (mb == -INFINITY) {
        memset(srow, 0, nb * sizeof(float));
        return false;
    }
    if (mb > m0) {
        float a = m0 == -INFINITY ? 0 : expf(m0 - mb);
        float *o = p->o + row * dv;
        for (size_t c = 0; c < dv; c++)
            o[c] *= a;
        p->l[row] *= a;
        p->m[row] = m0 = mb;
    }
    double l = 0;
    for (size_t jj = 0; jj < nb; jj++) {
        srow[jj] = srow[jj] == -INFINITY ? 0 : expf(srow[jj] - m0);
        l += srow[jj];
    }
    p->l[row] += l;
    return true;
}

struct lp_job {
    const struct attn_request *r;
    const struct kv_lowp_view *v;
    const float *q;                 /* prepared queries [h][n][d_k] */
    const size_t *lim;              /* [n] causal limits */
    size_t wk;                      /* window width */
    struct lp_part *parts;          /* [windows] */
    int *bad;                       /* [windows]: a score was not finite */
};

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

/* Stored rows [j, j + m) of block blk (d wide) -> x [m][d] floats. */
static inline __attribute__((always_inline)) void widen_rows_gen(const struct kv_lowp_view *v, const void *blk, const float *sc, size_t d,
                       size_t j, size_t m, float *x)
{
    size_t n = m * d, i;
    if (v->store == KV_STORE_F16) {
        half_f16_to_f32_n((const uint16_t *)blk + j * d, x, n);
    } else if (v->store == KV_STORE_BF16) {
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

static void prefetch_rows(const struct kv_lowp_view *v, const void *blk, size_t d, size_t j,
                          size_t m)
{
    size_t esz = v->store == KV_STORE_I8 ? 1 : 2;
    const char *p = (const char *)blk + j * d * esz;
    for (size_t o = 0; o < m * d * esz; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

/* a · b over d floats. */
static inline __attribute__((always_inline)) float dot_gen(const float *a, const float *b, size_t d)
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
static inline __attribute__((always_inline)) void axpy_gen(float *o, float p, const float *x, size_t d)
{
    size_t i = 0;
    for (; i + 16 <= d; i += 16)
        st(o + i, ld(o + i) + p * ld(x + i));
    for (; i < d; i++)
        o[i] += p * x[i];
}

/* Window w of kv head g: rows t of the group (query head g·G + t / n, row
 * t % n) over keys [k0, k1) -> parts[w]. xb holds KB widened rows, sb
 * [R][KB] the block's scores, then its weights. */
static inline __attribute__((always_inline)) void window_head(
    const struct lp_job *j, size_t w, size_t g, size_t k0, size_t k1, float *xb, float *sb,
    void (*widen_rows)(const struct kv_lowp_view *, const void *, const float *, size_t, size_t,
                       size_t, float *),
    float (*dot)(const float *, const float *, size_t),
    void (*axpy)(float *, float, const float *, size_t))
{
    const struct attn_shape *s = &j->r->shape;
    const struct kv_lowp_view *v = j->v;
    size_t G = s->h / s->h_kv, R = G * s->n, dk = s->d_k, dv = s->d_v, row0 = g * R;
    float scale = (float)j->r->params.scale;
    struct lp_part *p = &j->parts[w];
    const float *ksc = v->ks ? v->ks[g] : NULL, *vsc = v->vs ? v->vs[g] : NULL;

    for (size_t t = 0; t < R; t++) {
        p->m[row0 + t] = -INFINITY;
        p->l[row0 + t] = 0;
        memset(p->o + (row0 + t) * dv, 0, dv * sizeof(float));
    }
    for (size_t b0 = k0; b0 < k1; b0 += KB) {
        size_t nb = k1 - b0 < KB ? k1 - b0 : KB, ahead = b0 + LP_PF * KB / 16;
        if (ahead + nb <= k1) {
            prefetch_rows(v, v->k[g], dk, ahead, nb);
            prefetch_rows(v, v->v[g], dv, ahead, nb);
        }
        widen_rows(v, v->k[g], ksc, dk, b0, nb, xb);
        for (size_t t = 0; t < R; t++) {
            const float *qt = j->q + (row0 + t) * dk;
            size_t lim = j->lim[t % s->n];
            float *srow = sb + t * KB, mb = -INFINITY;
            for (size_t jj = 0; jj < nb; jj++) {
                float x = b0 + jj < lim ? scale * dot(qt, xb + jj * dk, dk) : -INFINITY;
                if (x != -INFINITY && !isfinite(x))
                    j->bad[w] = 1;
                srow[jj] = x;
                mb = x > mb ? x : mb;
            }
            if (!block_softmax(p, row0 + t, dv, srow, nb, mb))
                continue;
        }
        widen_rows(v, v->v[g], vsc, dv, b0, nb, xb);
        for (size_t t = 0; t < R; t++) {
            float *o = p->o + (row0 + t) * dv;
            for (size_t jj = 0; jj < nb; jj++)
                axpy(o, sb[t * KB + jj], xb + jj * dv, dv);
        }
    }
}

static void window_head_gen(const struct lp_job *j, size_t w, size_t g, size_t k0, size_t k1,
                            float *xb, float *sb)
{
    window_head(j, w, g, k0, k1, xb, sb, widen_rows_gen, dot_gen, axpy_gen);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LP_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LP_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 stored elements of a row from element e, widened in a register. */
LP_AVX2_INLINE __m256 load8(enum kv_store st, const void *row, size_t e)
{
    if (st == KV_STORE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + e)));
    if (st == KV_STORE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
            _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + e))), 16));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)((const int8_t *)row + e))));
}

LP_AVX2_INLINE float hsum(__m256 a)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* q · row (d a multiple of 8), the row read in its stored form. */
LP_AVX2_INLINE float dot_stored(enum kv_store st, const float *q, const void *row, size_t d)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 16 <= d; c += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(st, row, c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), load8(st, row, c + 8), a1);
    }
    if (c < d)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(st, row, c), a0);
    return hsum(_mm256_add_ps(a0, a1));
}

/*
 * window_head with every row read in its stored form: the scores straight
 * from the K rows, and the output accumulated 8 columns at a time over the
 * block's V rows (one load and store of the output per block, not per key).
 * d_k and d_v are multiples of 8 (kv_lowp_attend checks).
 */
LP_AVX2_INLINE void window_direct(const struct lp_job *j, size_t w, size_t g, size_t k0,
                                  size_t k1, float *sb, const enum kv_store st)
{
    const struct attn_shape *s = &j->r->shape;
    const struct kv_lowp_view *v = j->v;
    size_t G = s->h / s->h_kv, R = G * s->n, dk = s->d_k, dv = s->d_v, row0 = g * R;
    size_t esz = st == KV_STORE_I8 ? 1 : 2;
    float scale = (float)j->r->params.scale;
    struct lp_part *p = &j->parts[w];
    const char *K = v->k[g], *V = v->v[g];
    const float *ksc = v->ks ? v->ks[g] : NULL, *vsc = v->vs ? v->vs[g] : NULL;

    for (size_t t = 0; t < R; t++) {
        p->m[row0 + t] = -INFINITY;
        p->l[row0 + t] = 0;
        memset(p->o + (row0 + t) * dv, 0, dv * sizeof(float));
    }
    for (size_t b0 = k0; b0 < k1; b0 += KB) {
        size_t nb = k1 - b0 < KB ? k1 - b0 : KB;
        for (size_t jj = 0; jj < nb && b0 + jj + LP_PF < k1; jj++) {
            prefetch_rows(v, K, dk, b0 + jj + LP_PF, 1);
            prefetch_rows(v, V, dv, b0 + jj + LP_PF, 1);
        }
        for (size_t t = 0; t < R; t++) {
            const float *qt = j->q + (row0 + t) * dk;
            size_t lim = j->lim[t % s->n];
            float *srow = sb + t * KB, mb = -INFINITY;
            for (size_t jj = 0; jj < nb; jj++) {
                float x = -INFINITY;
                if (b0 + jj < lim) {
                    x = scale * dot_stored(st, qt, K + (b0 + jj) * dk * esz, dk);
                    if (st == KV_STORE_I8)
                        x *= ksc[b0 + jj];
                    if (!isfinite(x))
                        j->bad[w] = 1;
                }
                srow[jj] = x;
                mb = x > mb ? x : mb;
            }
            if (!block_softmax(p, row0 + t, dv, srow, nb, mb))
                continue;
            if (st == KV_STORE_I8)              /* the V row's scale joins its weight */
                for (size_t jj = 0; jj < nb; jj++)
                    srow[jj] *= vsc[b0 + jj];
            float *o = p->o + (row0 + t) * dv;
            for (size_t c = 0; c < dv; c += 8) {
                __m256 acc = _mm256_loadu_ps(o + c);
                for (size_t jj = 0; jj < nb; jj++)
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(srow[jj]),
                                          load8(st, V + (b0 + jj) * dv * esz, c), acc);
                _mm256_storeu_ps(o + c, acc);
            }
        }
    }
}

static LP_AVX2 void window_head_avx2(const struct lp_job *j, size_t w, size_t g, size_t k0,
                                     size_t k1, float *xb, float *sb)
{
    (void)xb;
    switch (j->v->store) {
    case KV_STORE_F16: window_direct(j, w, g, k0, k1, sb, KV_STORE_F16); break;
    case KV_STORE_BF16: window_direct(j, w, g, k0, k1, sb, KV_STORE_BF16); break;
    default: window_direct(j, w, g, k0, k1, sb, KV_STORE_I8); break;
    }
}

static bool lp_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           half_f16c_available();
}
#else
static bool lp_avx2(void)
{
    return false;
}
#define window_head_avx2 window_head_gen
#endif

static void window_piece(void *arg, size_t w, struct attn_ws *ws)
{
    (void)ws;
    const struct lp_job *j = arg;
    const struct attn_shape *s = &j->r->shape;
    size_t k0 = w * j->wk, k1 = k0 + j->wk < s->L ? k0 + j->wk : s->L;
    size_t G = s->h / s->h_kv, R = G * s->n;
    size_t dmax = s->d_k > s->d_v ? s->d_k : s->d_v;
    float *buf = malloc((KB * dmax + KB * R) * sizeof(float));
    if (!buf) {
        j->bad[w] = 2;
        return;
    }
    bool avx2 = lp_avx2() && s->d_k % 8 == 0 && s->d_v % 8 == 0;
    for (size_t g = 0; g < s->h_kv; g++) {
        if (avx2)
            window_head_avx2(j, w, g, k0, k1, buf, buf + KB * dmax);
        else
            window_head_gen(j, w, g, k0, k1, buf, buf + KB * dmax);
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
    size_t nwin = bytes / LP_WIN_BYTES;
    nwin = nwin < 1 ? 1 : nwin > LP_WIN ? LP_WIN : nwin;
    size_t wk = (s->L + nwin - 1) / nwin;
    nwin = (s->L + wk - 1) / wk;
    size_t per = rows * (s->d_v + 1) * sizeof(float) + rows * sizeof(double);
    char *mem = malloc(rows * s->d_k * sizeof(float) + s->n * sizeof(size_t) +
                       nwin * (per + sizeof(struct lp_part) + sizeof(int)) + 64);
    if (!mem)
        return CORE_ENOMEM;
    /* layout: parts, doubles (l), floats (q, o, m), limits, flags */
    struct lp_part *parts = (struct lp_part *)(void *)mem;
    double *ls = (double *)(void *)(parts + nwin);
    float *q = (float *)(void *)(ls + nwin * rows);
    float *fl = q + rows * s->d_k;
    size_t *lim = (size_t *)(void *)(((uintptr_t)(fl + nwin * rows * (s->d_v + 1)) + 7) &
                                     ~(uintptr_t)7);
    int *bad = (int *)(void *)(lim + s->n);
    for (size_t w = 0; w < nwin; w++) {
        parts[w].l = ls + w * rows;
        parts[w].o = fl + w * rows * (s->d_v + 1);
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
    struct lp_job job = {r, v, q, lim, wk, parts, bad};
    attn_pool_run(ws ? attn_ws_pool(ws) : NULL, window_piece, &job, nwin, ws);
    for (size_t w = 0; w < nwin && st == CORE_OK; w++)
        st = bad[w] == 2 ? CORE_ENOMEM : bad[w] ? CORE_ENONFINITE : CORE_OK;
    if (st == CORE_OK)
        st = combine(r, parts, nwin, out);
    free(mem);
    return st;
}
