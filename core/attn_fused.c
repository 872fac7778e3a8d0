/*
 * core/attn_fused.c — the fused output-only float32 kernel for AVX-512
 * (attn_fused.h; core/attn_fused_avx2.c is the same design for AVX2, and
 * core/attn_kernel.c chooses between them).
 *
 * Why hand-written rather than two sgemm calls per key block: with d = 64..128
 * the blocks are thin gemms (k = d for Q·Kᵀ, n = d for P·V) that OpenBLAS
 * packs on every call and runs well below its square-matrix rate, and the
 * score block makes a round trip through memory between the two calls. Here
 * both products are register-tiled micro-kernels over operands that need no
 * packing, and the block of scores never leaves L1.
 *
 * The layout is transposed: a group of QG = 48 query rows lies across three
 * 16-lane registers, one lane per query (a group of 16 or 32 rows uses one
 * or two). Per group:
 *   qt [d_k][QG]   scale · log2(e) · qᵀ (the only copy made)
 *   st [BC][QG]    scores of BC keys, key j a row: K[j][c] is broadcast, so
 *                  K is read in place; then 2^(s - m) in place, so every
 *                  softmax step (max, exp, sums) is lane-wise, no shuffles
 *   ot [d_v][QG]   Σ_j V[j][c] · st[j]: V[j][c] is broadcast, V in place
 * Online softmax per lane: running max m, sum l (double); a block that
 * raises m rescales ot and l by 2^(m_old - m_new) first. The scores are in
 * base 2 (qt holds scale·log2(e)·q, the same one rounding as scale·q), so
 * each exponential is 2^x: an exact reduction and one polynomial.
 *
 * One micro-kernel (rank1_tile) does both products: 8×3 = 24 accumulators
 * plus 3 operand registers and one broadcast; 8 keys × 48 queries for the
 * scores, 8 value columns × 48 queries for the output, near the FMA peak
 * with its operands in L1. A call covers the row tile's groups superblock
 * by superblock of keys, so K and V come from L2 for all but the first
 * group. Blocks are of 64 keys, which measured faster than 32 or 128
 * (tuned: docs/benchmarks.md, section "The fused kernels at n=L=1024
 * d=64").
 */
#include "attn_fused_isa.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "simd512.h"

#ifdef ATTN_HAVE_FUSED

/* Every function here is compiled for AVX-512 whatever the build's -march
 * (a portable build, e.g. the Docker image's, still carries the kernel);
 * core/attn_kernel.c calls in only when the CPU has it. */
#define FUSED_FN __attribute__((target("avx512f,avx512dq")))

#define QG 48           /* query rows per group */
#define NZ 3            /* registers per group (16 lanes each) */
#define KR 8            /* keys per score micro-tile */
#define CR 8            /* value columns per output micro-tile */
#define BC 64           /* keys per online-softmax block */
#define SUM_KEYS 8      /* keys per float sum, then double (block_exp2) */
#define LANES 16
#define FUSED_VEC __m512
/* work after st: vt [BC][CR], kt [KR][dk] (the padded last tiles) */
#define FUSED_WORK_FLOATS(dk) (BC * CR + KR * (dk))
#define FUSED_ROWS_FN attn_fused_rows_avx512
#define FUSED_SCRATCH_FN attn_fused_scratch_avx512
#define FUSED_WIDE_FN attn_fused_wide_avx512
_Static_assert(QG == ATTN_FUSED_QG_AVX512, "attn_fused_group_rows says QG");
_Static_assert(QG == 16 * NZ, "one lane per query");
_Static_assert(KR == 8 && CR == 8, "rank1_tile is 8 rows");

/* The lanes' running state, their key ranges and the softcap. */
struct fused_group {
    __m512 m[NZ];               /* running max, -inf before any key */
    __m512d l[2 * NZ];          /* running sum, lanes 0-7 / 8-15 of m[z] */
    __m512i lo[NZ], lim[NZ];    /* lane sees keys [lo, lim) */
    size_t lim_min, lim_max;    /* see group_init (attn_fused_impl.h) */
    size_t lo_max, lo_start;
    float cap2, icap2;          /* softcap in base 2 and its inverse; 0: off */
    float big;                  /* largest |score| taken (fused_big) */
    int nz;                     /* registers holding rows: ceil(rows / 16) */
};

/* lo, hi [QG] lanes' ranges -> g's registers; m = -inf, l = 0. */
static FUSED_FN void group_load(struct fused_group *g, const int32_t *lo, const int32_t *hi)
{
    for (int z = 0; z < NZ; z++) {
        g->m[z] = _mm512_set1_ps(-INFINITY);
        g->l[2 * z] = g->l[2 * z + 1] = _mm512_setzero_pd();
        g->lo[z] = _mm512_loadu_si512(lo + 16 * z);
        g->lim[z] = _mm512_loadu_si512(hi + 16 * z);
    }
}

/* The softcap in base 2 on seen scores: cap2·tanh(v / cap2). */
static FUSED_FN __m512 cap16(__m512 v, __m512 cap2, __m512 icap2)
{
    return _mm512_mul_ps(cap2, simd_tanh16(_mm512_mul_ps(v, icap2)));
}

/* The one micro-kernel of both products: 8 rows of QG lanes,
 *   out[r] (+)= Σ_i b[r·rs + i·bs] · p[i]     for i < count, r < 8,
 * p [count][QG]; out [rows][QG] is loaded first when `add`, and only its
 * first `rows` rows are written. Always inlined: each caller has one of the
 * strides constant (scores bs = 1, values rs = 1), which keeps the eight
 * broadcasts on one index register instead of eight pointers to advance. */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) void
rank1_tile(const float *p, size_t count, const float *b, size_t rs, size_t bs, bool add,
           size_t rows, float *out, int nz)
{
    __m512 a[8][NZ];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
#pragma GCC unroll 3
        for (int z = 0; z < NZ; z++)
            a[r][z] = add && (size_t)r < rows && z < nz
                          ? _mm512_loadu_ps(out + r * QG + 16 * z)
                          : _mm512_setzero_ps();
    for (size_t i = 0; i < count; i++) {
        const float *pi = p + i * QG, *bi = b + i * bs;
        __m512 p0 = _mm512_loadu_ps(pi);
        __m512 p1 = nz > 1 ? _mm512_loadu_ps(pi + 16) : p0;
        __m512 p2 = nz > 2 ? _mm512_loadu_ps(pi + 32) : p0;
#pragma GCC unroll 8
        for (size_t r = 0; r < 8; r++) {
            __m512 x = _mm512_set1_ps(bi[r * rs]);
            a[r][0] = _mm512_fmadd_ps(x, p0, a[r][0]);
            if (nz > 1)
                a[r][1] = _mm512_fmadd_ps(x, p1, a[r][1]);
            if (nz > 2)
                a[r][2] = _mm512_fmadd_ps(x, p2, a[r][2]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        if ((size_t)r < rows)
#pragma GCC unroll 3
            for (int z = 0; z < NZ; z++)
                if (z < nz)
                    _mm512_storeu_ps(out + r * QG + 16 * z, a[r][z]);
}

/* rank1_tile for nz = 1, 2 or 3 registers of lanes: one specialised copy
 * each (a group of fewer than 33 rows does a third or two thirds of the
 * multiply-adds, not all of them). */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) void
rank1_tile_nz(const float *p, size_t count, const float *b, size_t rs, size_t bs, bool add,
              size_t rows, float *out, int nz)
{
    if (nz == 3)
        rank1_tile(p, count, b, rs, bs, add, rows, out, 3);
    else if (nz == 2)
        rank1_tile(p, count, b, rs, bs, add, rows, out, 2);
    else
        rank1_tile(p, count, b, rs, bs, add, rows, out, 1);
}

/* K [kw][dk] (row stride dk) -> st [kw][QG] = K · qt: 8 keys a tile, each
 * key's row broadcast element by element against qt [dk][QG]. A last tile
 * of fewer keys goes through kt [KR][dk] (in work): its rows, the last one
 * repeated. */
static FUSED_FN void scores(const float *qt, size_t dk, const float *K, size_t kw, float *st,
                            float *work, int nz)
{
    float *kt = work + BC * CR;
    size_t j0 = 0;
    for (; j0 + KR <= kw; j0 += KR)
        rank1_tile_nz(qt, dk, K + j0 * dk, dk, 1, false, KR, st + j0 * QG, nz);
    if (j0 == kw)
        return;
    size_t kr = kw - j0;
    for (size_t r = 0; r < KR; r++)
        memcpy(kt + r * dk, K + (j0 + (r < kr ? r : kr - 1)) * dk, dk * sizeof(float));
    rank1_tile_nz(qt, dk, kt, dk, 1, false, kr, st + j0 * QG, nz);
}

/* pt [kw][QG] weights, v: value rows of stride vs, columns [0, CR) ->
 * ot [cr][QG] += Σ_j v[j][r] · pt[j] for rows r < cr. */
static FUSED_FN void value_tile(const float *pt, size_t kw, const float *v, size_t vs,
                                size_t cr, float *ot, int nz)
{
    rank1_tile_nz(pt, kw, v, 1, vs, true, cr, ot, nz);
}

/* pt [kw][QG], V [kw][dv] -> ot [dv][QG] += Vᵀ · pt. The last columns, when
 * dv is not a multiple of CR, go through vt [kw][CR] (in work): a copy of
 * them with the last one repeated, so the micro-tile never reads past a row. */
static FUSED_FN void values(const float *pt, size_t kw, const float *V, size_t dv, float *ot,
                            float *work, int nz)
{
    float *vt = work;
    for (size_t c0 = 0; c0 < dv; c0 += CR) {
        size_t cr = dv - c0 < CR ? dv - c0 : CR;
        if (cr == CR) {
            value_tile(pt, kw, V + c0, dv, CR, ot + c0 * QG, nz);
            continue;
        }
        for (size_t j = 0; j < kw; j++)
            for (size_t r = 0; r < CR; r++)
                vt[j * CR + r] = V[j * dv + c0 + (r < cr ? r : cr - 1)];
        value_tile(pt, kw, vt, CR, cr, ot + c0 * QG, nz);
    }
}

/* Lanes of x that are NaN or past big in magnitude. */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) __mmask16
too_big(__mmask16 k, __m512 x, __m512 big)
{
    return _mm512_mask_cmp_ps_mask(k, _mm512_abs_ps(x), big, _CMP_NLE_UQ);
}

/* Scores st [kw][QG] of keys k0.. -> keys a lane may not see set to -inf,
 * the seen ones softcapped when g->cap2 > 0 (after the range test, as
 * the exact path does); mx: the lanes' block maxima (-inf in registers past
 * g->nz, which the micro-kernel did not write). False when a seen score is
 * NaN or past g->big in magnitude (fused_big). */
static FUSED_FN bool block_max(float *st, size_t kw, size_t k0, const struct fused_group *g,
                               __m512 mx[NZ])
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    /* locals, not mx[] or g->: stores through st may alias those, which kept
     * the running maxima in memory (a store-forwarding chain per key) */
    __m512 m0 = ninf, m1 = ninf, m2 = ninf;
    __m512i lo[NZ], lim[NZ];
    __mmask16 bad = 0;
    for (int z = 0; z < NZ; z++) {
        lo[z] = g->lo[z];
        lim[z] = g->lim[z];
    }
    int nz = g->nz;
    bool cap = g->cap2 > 0;
    __m512 cap2 = _mm512_set1_ps(g->cap2), icap2 = _mm512_set1_ps(g->icap2);
    __m512 big = _mm512_set1_ps(g->big);
    if (k0 >= g->lo_max && k0 + kw <= g->lim_min && nz == NZ) {  /* every lane sees every key */
        for (size_t j = 0; j < kw; j++) {
            float *p = st + j * QG;
            __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16),
                   v2 = _mm512_loadu_ps(p + 32);
            bad |= too_big(0xffff, v0, big) | too_big(0xffff, v1, big) |
                   too_big(0xffff, v2, big);
            if (cap) {
                v0 = cap16(v0, cap2, icap2);
                v1 = cap16(v1, cap2, icap2);
                v2 = cap16(v2, cap2, icap2);
                _mm512_storeu_ps(p, v0);
                _mm512_storeu_ps(p + 16, v1);
                _mm512_storeu_ps(p + 32, v2);
            }
            m0 = _mm512_max_ps(m0, v0);
            m1 = _mm512_max_ps(m1, v1);
            m2 = _mm512_max_ps(m2, v2);
        }
    } else {
        for (size_t j = 0; j < kw; j++) {
            __m512i key = _mm512_set1_epi32((int32_t)(k0 + j));
            __m512 v[NZ] = {ninf, ninf, ninf};
            for (int z = 0; z < nz; z++) {
                float *p = st + j * QG + 16 * z;
                __mmask16 seen = _mm512_cmpgt_epi32_mask(lim[z], key) &
                                 _mm512_cmple_epi32_mask(lo[z], key);
                __m512 x = _mm512_loadu_ps(p);
                bad |= too_big(seen, x, big);
                if (cap)
                    x = cap16(x, cap2, icap2);
                v[z] = _mm512_mask_mov_ps(ninf, seen, x);
                _mm512_storeu_ps(p, v[z]);
            }
            m0 = _mm512_max_ps(m0, v[0]);
            m1 = _mm512_max_ps(m1, v[1]);
            m2 = _mm512_max_ps(m2, v[2]);
        }
    }
    mx[0] = m0;
    mx[1] = m1;
    mx[2] = m2;
    return bad == 0;
}

/* lanes lo/hi of x as doubles */
static FUSED_FN __m512d lo_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(x));
}

static FUSED_FN __m512d hi_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

/* st [kw][QG] -> 2^(st - sh) in place, lane-wise, in the first nz
 * registers; sum: the lanes' sums (float over 8 keys, then double; 0 past
 * nz), lanes 0-7 / 8-15 of each register.
 * Locals throughout: stores through st may alias arrays, which kept the
 * sums in memory. */
static FUSED_FN void block_exp2(float *st, size_t kw, const __m512 sh[NZ], __m512d sum[2 * NZ],
                                int nz)
{
    __m512 h0 = sh[0], h1 = sh[1], h2 = sh[2];
    __m512d d0 = _mm512_setzero_pd(), d1 = d0, d2 = d0, d3 = d0, d4 = d0, d5 = d0;
    for (size_t j0 = 0; j0 < kw; j0 += SUM_KEYS) {
        size_t je = kw - j0 < SUM_KEYS ? kw : j0 + SUM_KEYS;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0;
        for (size_t j = j0; j < je; j++) {
            float *p = st + j * QG;
            __m512 e0 = simd_exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p), h0));
            _mm512_storeu_ps(p, e0);
            a0 = _mm512_add_ps(a0, e0);
            if (nz > 1) {
                __m512 e1 = simd_exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p + 16), h1));
                _mm512_storeu_ps(p + 16, e1);
                a1 = _mm512_add_ps(a1, e1);
            }
            if (nz > 2) {
                __m512 e2 = simd_exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p + 32), h2));
                _mm512_storeu_ps(p + 32, e2);
                a2 = _mm512_add_ps(a2, e2);
            }
        }
        d0 = _mm512_add_pd(d0, lo_pd(a0));
        d1 = _mm512_add_pd(d1, hi_pd(a0));
        d2 = _mm512_add_pd(d2, lo_pd(a1));
        d3 = _mm512_add_pd(d3, hi_pd(a1));
        d4 = _mm512_add_pd(d4, lo_pd(a2));
        d5 = _mm512_add_pd(d5, hi_pd(a2));
    }
    sum[0] = d0;
    sum[1] = d1;
    sum[2] = d2;
    sum[3] = d3;
    sum[4] = d4;
    sum[5] = d5;
}

/* One key block: st [kw][QG] scores of keys k0.. -> 2^(s - m_new) in
 * place; m, l updated; alpha = 2^(m_old - m_new) per lane (0 where m_old
 * was -inf). False when a seen score is not finite. */
static FUSED_FN bool block_softmax(float *st, size_t kw, size_t k0, struct fused_group *g,
                                   __m512 alpha[NZ])
{
    __m512 mx[NZ], sh[NZ];
    if (!block_max(st, kw, k0, g, mx))
        return false;
    for (int z = 0; z < NZ; z++) {
        __m512 mn = _mm512_max_ps(g->m[z], mx[z]);
        /* lanes that have seen no key yet shift by 0: 2^(-inf - 0) = 0 */
        sh[z] = _mm512_maskz_mov_ps(
            _mm512_cmp_ps_mask(mn, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ), mn);
        alpha[z] = simd_exp2_16(_mm512_sub_ps(g->m[z], sh[z]));
        g->m[z] = mn;
    }
    __m512d s[2 * NZ];
    block_exp2(st, kw, sh, s, g->nz);
    for (int z = 0; z < NZ; z++) {
        g->l[2 * z] = _mm512_fmadd_pd(g->l[2 * z], lo_pd(alpha[z]), s[2 * z]);
        g->l[2 * z + 1] = _mm512_fmadd_pd(g->l[2 * z + 1], hi_pd(alpha[z]), s[2 * z + 1]);
    }
    return true;
}

/* ot [dv][QG] *= alpha lane-wise in the first nz registers, skipped when
 * every alpha there is 1. */
static FUSED_FN void rescale(float *ot, size_t dv, const __m512 alpha[NZ], int nz)
{
    __mmask16 ne = 0;
    for (int z = 0; z < nz; z++)
        ne |= _mm512_cmp_ps_mask(alpha[z], _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
    if (!ne)
        return;
    for (size_t c = 0; c < dv; c++)
        for (int z = 0; z < nz; z++) {
            float *p = ot + c * QG + 16 * z;
            _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), alpha[z]));
        }
}

/* g's running max and sum -> mv, lv [QG] */
static FUSED_FN void group_store(const struct fused_group *g, float *mv, double *lv)
{
    for (int z = 0; z < NZ; z++) {
        _mm512_storeu_ps(mv + 16 * z, g->m[z]);
        _mm512_storeu_pd(lv + 16 * z, g->l[2 * z]);
        _mm512_storeu_pd(lv + 16 * z + 8, g->l[2 * z + 1]);
    }
}

#include "attn_fused_impl.h"

#endif
