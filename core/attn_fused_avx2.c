/*
 * core/attn_fused_avx2.c — the fused output-only float32 kernel for CPUs
 * with AVX2 and FMA (attn_fused.h; core/attn_kernel.c chooses it where
 * AVX-512 is missing, or when asked to).
 *
 * The design of core/attn_fused.c, function for function, on 8-lane
 * registers (read that file's comment first). What differs is what 16
 * registers instead of 32 allow:
 *   QG = 16 query rows per group, two 8-lane registers (a group of 8 rows
 *           or fewer uses one)
 *   the micro-kernel (rank1_tile) is 6 rows × 2 registers: 12 accumulators
 *           plus 2 operand registers and one broadcast, 15 of the 16; per
 *           step 12 multiply-adds against 8 loads
 *   KR = CR = 6 keys per score tile, value columns per output tile; the
 *           row count of a tile is a compile-time constant in each copy of
 *           the micro-kernel, so a last tile of fewer rows (d_v = 64 or 128
 *           leaves 4 or 2 columns) reads and computes only those rows and
 *           needs no padded copy of K or V
 *   BC = 96 keys per online-softmax block (16 tiles of 6)
 *   2^x puts n into the exponent bits (simd256.h: no scalef), and the
 *           range test is a compare of |s| against its bound (no fpclass)
 * Everything else is the same: the transposed layout (qt [d_k][QG],
 * st [BC][QG], ot [d_v][QG]), K and V read in place by broadcasts, the
 * lane-wise online softmax in base 2 with double sums, superblocks of keys
 * that every group of a tile reads from L2.
 */
/* Nothing wider than AVX2 in this file, whatever -march says (a native
 * build on an AVX-512 machine would otherwise let the compiler use EVEX
 * encodings, 32 registers and embedded broadcasts here, which an AVX2 CPU
 * cannot run). Before any include, so the intrinsics this file inlines are
 * defined for the same target. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("no-avx512f")
#endif

#include "attn_fused_isa.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "simd256.h"

#ifdef ATTN_HAVE_FUSED

/* Compiled for AVX2 + FMA whatever the build's -march; core/attn_kernel.c
 * calls in only when the CPU has them. */
#define FUSED_FN __attribute__((target("avx2,fma")))
#define FUSED_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

#define QG 16           /* query rows per group */
#define NZ 2            /* registers per group (8 lanes each) */
#define KR 6            /* keys per score micro-tile */
#define CR 6            /* value columns per output micro-tile */
#define BC 96           /* keys per online-softmax block */
#define SUM_KEYS 8      /* keys per float sum, then double (block_exp2) */
#define LANES 8
#define FUSED_VEC __m256
#define FUSED_WORK_FLOATS(dk) ((void)(dk), (size_t)0)  /* no padded copies */
#define FUSED_ROWS_FN attn_fused_rows_avx2
#define FUSED_SCRATCH_FN attn_fused_scratch_avx2
#define FUSED_WIDE_FN attn_fused_wide_avx2
_Static_assert(QG == ATTN_FUSED_QG_AVX2, "attn_fused_group_rows says QG");
_Static_assert(QG == 8 * NZ, "one lane per query");
_Static_assert(KR == 6 && CR == 6, "rank1_tile_rows is written for 6 rows");
_Static_assert(BC % KR == 0 && BC % 8 == 0, "whole tiles and sums of 8 per block");

/* The lanes' running state, their key ranges and the softcap. */
struct fused_group {
    __m256 m[NZ];               /* running max, -inf before any key */
    __m256d l[2 * NZ];          /* running sum, lanes 0-3 / 4-7 of m[z] */
    __m256i lo[NZ], lim[NZ];    /* lane sees keys [lo, lim) */
    size_t lim_min, lim_max;    /* see group_init (attn_fused_impl.h) */
    size_t lo_max, lo_start;
    float cap2, icap2;          /* softcap in base 2 and its inverse; 0: off */
    float big;                  /* largest |score| taken (fused_big) */
    int nz;                     /* registers holding rows: ceil(rows / 8) */
};

/* lo, hi [QG] lanes' ranges -> g's registers; m = -inf, l = 0. */
static FUSED_FN void group_load(struct fused_group *g, const int32_t *lo, const int32_t *hi)
{
    for (int z = 0; z < NZ; z++) {
        g->m[z] = _mm256_set1_ps(-INFINITY);
        g->l[2 * z] = g->l[2 * z + 1] = _mm256_setzero_pd();
        g->lo[z] = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 8 * z));
        g->lim[z] = _mm256_loadu_si256((const __m256i *)(const void *)(hi + 8 * z));
    }
}

/* The softcap in base 2 on seen scores: cap2·tanh(v / cap2). */
FUSED_INLINE __m256 cap8(__m256 v, __m256 cap2, __m256 icap2)
{
    return _mm256_mul_ps(cap2, simd_tanh8(_mm256_mul_ps(v, icap2)));
}

/* The one micro-kernel of both products: R rows of QG lanes (R <= 6 and
 * nz constants at every use),
 *   out[r] (+)= Σ_i b[r·rs + i·bs] · p[i]     for i < count, r < R,
 * p [count][QG]; out [R][QG] is loaded first when `add`. Always inlined:
 * each caller has one of the strides constant (scores bs = 1, values
 * rs = 1), as in attn_fused.c. */
FUSED_INLINE void rank1_tile(const float *p, size_t count, const float *b, size_t rs,
                             size_t bs, bool add, float *out, int R, int nz)
{
    __m256 a[KR][NZ];
#pragma GCC unroll 6
    for (int r = 0; r < KR; r++)
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++)
            a[r][z] = add && r < R && z < nz ? _mm256_loadu_ps(out + r * QG + 8 * z)
                                             : _mm256_setzero_ps();
    for (size_t i = 0; i < count; i++) {
        const float *pi = p + i * QG, *bi = b + i * bs;
        __m256 p0 = _mm256_loadu_ps(pi);
        __m256 p1 = nz > 1 ? _mm256_loadu_ps(pi + 8) : p0;
#pragma GCC unroll 6
        for (int r = 0; r < KR; r++) {
            if (r >= R)
                continue;
            __m256 x = _mm256_broadcast_ss(bi + (size_t)r * rs);
            a[r][0] = _mm256_fmadd_ps(x, p0, a[r][0]);
            if (nz > 1)
                a[r][1] = _mm256_fmadd_ps(x, p1, a[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < KR; r++)
        if (r < R)
#pragma GCC unroll 2
            for (int z = 0; z < NZ; z++)
                if (z < nz)
                    _mm256_storeu_ps(out + r * QG + 8 * z, a[r][z]);
}

/* rank1_tile for 1 or 2 registers of lanes. */
FUSED_INLINE void rank1_tile_nz(const float *p, size_t count, const float *b, size_t rs,
                                size_t bs, bool add, float *out, int R, int nz)
{
    if (nz == 2)
        rank1_tile(p, count, b, rs, bs, add, out, R, 2);
    else
        rank1_tile(p, count, b, rs, bs, add, out, R, 1);
}

/* rank1_tile for rows = 1..6: one specialised copy each. */
FUSED_INLINE void rank1_tile_rows(const float *p, size_t count, const float *b, size_t rs,
                                  size_t bs, bool add, size_t rows, float *out, int nz)
{
    switch (rows) {
    case 6: rank1_tile_nz(p, count, b, rs, bs, add, out, 6, nz); break;
    case 5: rank1_tile_nz(p, count, b, rs, bs, add, out, 5, nz); break;
    case 4: rank1_tile_nz(p, count, b, rs, bs, add, out, 4, nz); break;
    case 3: rank1_tile_nz(p, count, b, rs, bs, add, out, 3, nz); break;
    case 2: rank1_tile_nz(p, count, b, rs, bs, add, out, 2, nz); break;
    default: rank1_tile_nz(p, count, b, rs, bs, add, out, 1, nz); break;
    }
}

/* K [kw][dk] (row stride dk) -> st [kw][QG] = K · qt: 6 keys a tile, each
 * key's row broadcast element by element against qt [dk][QG]. */
static FUSED_FN void scores(const float *qt, size_t dk, const float *K, size_t kw, float *st,
                            float *work, int nz)
{
    (void)work;
    for (size_t j0 = 0; j0 < kw; j0 += KR) {
        size_t kr = kw - j0 < KR ? kw - j0 : KR;
        rank1_tile_rows(qt, dk, K + j0 * dk, dk, 1, false, kr, st + j0 * QG, nz);
    }
}

/* pt [kw][QG], V [kw][dv] -> ot [dv][QG] += Vᵀ · pt, 6 value columns a
 * tile (the last one fewer). */
static FUSED_FN void values(const float *pt, size_t kw, const float *V, size_t dv, float *ot,
                            float *work, int nz)
{
    (void)work;
    for (size_t c0 = 0; c0 < dv; c0 += CR) {
        size_t cr = dv - c0 < CR ? dv - c0 : CR;
        rank1_tile_rows(pt, kw, V + c0, 1, dv, true, cr, ot + c0 * QG, nz);
    }
}

/* All lanes of x that are NaN or past big in magnitude (±inf among them). */
FUSED_INLINE __m256 too_big(__m256 x, __m256 big)
{
    __m256 ax = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    return _mm256_cmp_ps(ax, big, _CMP_NLE_UQ);
}

/* Scores st [kw][QG] of keys k0.. -> keys a lane may not see set to -inf,
 * the seen ones softcapped when g->cap2 > 0 (after the range test);
 * mx: the lanes' block maxima (-inf in registers past g->nz, which the
 * micro-kernel did not write). False when a seen score is NaN or past
 * g->big in magnitude (fused_big). */
static FUSED_FN bool block_max(float *st, size_t kw, size_t k0, const struct fused_group *g,
                               __m256 mx[NZ])
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    /* locals, not mx[] or g->: stores through st may alias those */
    __m256 m0 = ninf, m1 = ninf, bad = _mm256_setzero_ps();
    __m256i lo[NZ], lim[NZ];
    for (int z = 0; z < NZ; z++) {
        lo[z] = g->lo[z];
        lim[z] = g->lim[z];
    }
    int nz = g->nz;
    bool cap = g->cap2 > 0;
    __m256 cap2 = _mm256_set1_ps(g->cap2), icap2 = _mm256_set1_ps(g->icap2);
    __m256 big = _mm256_set1_ps(g->big);
    if (k0 >= g->lo_max && k0 + kw <= g->lim_min && nz == NZ) {  /* every lane sees every key */
        for (size_t j = 0; j < kw; j++) {
            float *p = st + j * QG;
            __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
            bad = _mm256_or_ps(bad, _mm256_or_ps(too_big(v0, big), too_big(v1, big)));
            if (cap) {
                v0 = cap8(v0, cap2, icap2);
                v1 = cap8(v1, cap2, icap2);
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p + 8, v1);
            }
            m0 = _mm256_max_ps(m0, v0);
            m1 = _mm256_max_ps(m1, v1);
        }
    } else {
        for (size_t j = 0; j < kw; j++) {
            __m256i key = _mm256_set1_epi32((int32_t)(k0 + j));
            __m256 v[NZ] = {ninf, ninf};
            for (int z = 0; z < nz; z++) {
                float *p = st + j * QG + 8 * z;
                /* lo <= key < lim */
                __m256 seen = _mm256_castsi256_ps(_mm256_andnot_si256(
                    _mm256_cmpgt_epi32(lo[z], key), _mm256_cmpgt_epi32(lim[z], key)));
                __m256 x = _mm256_loadu_ps(p);
                bad = _mm256_or_ps(bad, _mm256_and_ps(seen, too_big(x, big)));
                if (cap)
                    x = cap8(x, cap2, icap2);
                v[z] = _mm256_blendv_ps(ninf, x, seen);
                _mm256_storeu_ps(p, v[z]);
            }
            m0 = _mm256_max_ps(m0, v[0]);
            m1 = _mm256_max_ps(m1, v[1]);
        }
    }
    mx[0] = m0;
    mx[1] = m1;
    return _mm256_movemask_ps(bad) == 0;
}

/* lanes lo/hi of x as doubles */
FUSED_INLINE __m256d lo_pd(__m256 x)
{
    return _mm256_cvtps_pd(_mm256_castps256_ps128(x));
}

FUSED_INLINE __m256d hi_pd(__m256 x)
{
    return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
}

/* st [kw][QG] -> 2^(st - sh) in place, lane-wise, in the first nz
 * registers; sum: the lanes' sums (float over 8 keys, then double; 0 past
 * nz), lanes 0-3 / 4-7 of each register. Locals throughout (as block_max). */
static FUSED_FN void block_exp2(float *st, size_t kw, const __m256 sh[NZ], __m256d sum[2 * NZ],
                                int nz)
{
    __m256 h0 = sh[0], h1 = sh[1];
    __m256d d0 = _mm256_setzero_pd(), d1 = d0, d2 = d0, d3 = d0;
    for (size_t j0 = 0; j0 < kw; j0 += SUM_KEYS) {
        size_t je = kw - j0 < SUM_KEYS ? kw : j0 + SUM_KEYS;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (size_t j = j0; j < je; j++) {
            float *p = st + j * QG;
            __m256 e0 = simd_exp2_8(_mm256_sub_ps(_mm256_loadu_ps(p), h0));
            _mm256_storeu_ps(p, e0);
            a0 = _mm256_add_ps(a0, e0);
            if (nz > 1) {
                __m256 e1 = simd_exp2_8(_mm256_sub_ps(_mm256_loadu_ps(p + 8), h1));
                _mm256_storeu_ps(p + 8, e1);
                a1 = _mm256_add_ps(a1, e1);
            }
        }
        d0 = _mm256_add_pd(d0, lo_pd(a0));
        d1 = _mm256_add_pd(d1, hi_pd(a0));
        d2 = _mm256_add_pd(d2, lo_pd(a1));
        d3 = _mm256_add_pd(d3, hi_pd(a1));
    }
    sum[0] = d0;
    sum[1] = d1;
    sum[2] = d2;
    sum[3] = d3;
}

/* One key block: st [kw][QG] scores of keys k0.. -> 2^(s - m_new) in
 * place; m, l updated; alpha = 2^(m_old - m_new) per lane (0 where m_old
 * was -inf). False when a seen score is not finite. */
static FUSED_FN bool block_softmax(float *st, size_t kw, size_t k0, struct fused_group *g,
                                   __m256 alpha[NZ])
{
    __m256 mx[NZ], sh[NZ];
    if (!block_max(st, kw, k0, g, mx))
        return false;
    for (int z = 0; z < NZ; z++) {
        __m256 mn = _mm256_max_ps(g->m[z], mx[z]);
        /* lanes that have seen no key yet shift by 0: 2^(-inf - 0) = 0 */
        sh[z] = _mm256_and_ps(mn, _mm256_cmp_ps(mn, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ));
        alpha[z] = simd_exp2_8(_mm256_sub_ps(g->m[z], sh[z]));
        g->m[z] = mn;
    }
    __m256d s[2 * NZ];
    block_exp2(st, kw, sh, s, g->nz);
    for (int z = 0; z < NZ; z++) {
        g->l[2 * z] = _mm256_fmadd_pd(g->l[2 * z], lo_pd(alpha[z]), s[2 * z]);
        g->l[2 * z + 1] = _mm256_fmadd_pd(g->l[2 * z + 1], hi_pd(alpha[z]), s[2 * z + 1]);
    }
    return true;
}

/* ot [dv][QG] *= alpha lane-wise in the first nz registers, skipped when
 * every alpha there is 1. */
static FUSED_FN void rescale(float *ot, size_t dv, const __m256 alpha[NZ], int nz)
{
    int ne = 0;
    for (int z = 0; z < nz; z++)
        ne |= _mm256_movemask_ps(_mm256_cmp_ps(alpha[z], _mm256_set1_ps(1.0f), _CMP_NEQ_UQ));
    if (!ne)
        return;
    for (size_t c = 0; c < dv; c++)
        for (int z = 0; z < nz; z++) {
            float *p = ot + c * QG + 8 * z;
            _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), alpha[z]));
        }
}

/* g's running max and sum -> mv, lv [QG] */
static FUSED_FN void group_store(const struct fused_group *g, float *mv, double *lv)
{
    for (int z = 0; z < NZ; z++) {
        _mm256_storeu_ps(mv + 8 * z, g->m[z]);
        _mm256_storeu_pd(lv + 8 * z, g->l[2 * z]);
        _mm256_storeu_pd(lv + 8 * z + 4, g->l[2 * z + 1]);
    }
}

#include "attn_fused_impl.h"

#endif
