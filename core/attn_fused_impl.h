/*
 * core/attn_fused_impl.h — the part of a fused kernel that does not depend
 * on its instruction set, written once: packing the queries, the groups'
 * limits, the loop over superblocks, groups and key blocks, unpacking, and
 * the scratch layout. Private to core/attn_fused.c (AVX-512) and
 * core/attn_fused_avx2.c (AVX2), each of which includes it at its end.
 *
 * Required before inclusion (see either kernel file):
 *   QG, LANES, NZ, BC       rows per group, lanes per register, registers
 *                           per group, keys per block
 *   SUM_KEYS                keys per float sum in block_softmax (a divisor
 *                           of BC), then added in double
 *   FUSED_FN, FUSED_VEC     the functions' target attribute; the register type
 *   FUSED_WORK_FLOATS(dk)   floats of the ISA's own block scratch after st
 *   FUSED_ROWS_FN, FUSED_SCRATCH_FN, FUSED_WIDE_FN   the entry points' names
 *   struct fused_group      with lim_min, lim_max, lo_max, lo_start (size_t),
 *                           nz (int), cap2, icap2, big (float)
 *   group_load(g, lo, hi)   lanes' ranges lo, hi [QG] into g, m = -inf, l = 0
 *   group_store(g, mv, lv)  g's running max and sum -> mv, lv [QG]
 *   scores(qt, dk, K, kw, st, work, nz)       st [kw][QG] = K · qt
 *   block_softmax(st, kw, k0, g, alpha)       attn_fused.c says what (with
 *                           the softcap, when g->cap2 > 0, on the seen scores)
 *   rescale(ot, dv, alpha, nz)                ot *= alpha lane-wise
 *   values(st, kw, V, dv, ot, work, nz)       ot [dv][QG] += Vᵀ · st
 */
#include <float.h>

#include "attn.h"
#include "half.h"
#include "stop.h"

_Static_assert(BC % SUM_KEYS == 0, "blocks end on whole runs of the float sums");

/* q [rows][dk] -> qt [dk][QG] = scale2 · qᵀ, unused lanes 0. */
static FUSED_FN void pack_queries(const float *q, size_t rows, size_t dk, float scale2,
                                  float *qt)
{
    memset(qt, 0, dk * QG * sizeof(float));
    for (size_t t = 0; t < rows; t++)
        for (size_t c = 0; c < dk; c++)
            qt[c * QG + t] = scale2 * q[t * dk + c];
}

/* Row t of the group sees keys [lo[t], hi[t]). The loop covers
 * [lo_start, lim_max): lo_start the smallest lo of a row that sees a key,
 * rounded down to a multiple of SUM_KEYS, lim_max the largest hi. Blocks
 * end at multiples of BC (group_keys: the first one shorter when lo_start
 * is not a multiple), so a row's seen keys fall into the same blocks, and
 * into the same runs of SUM_KEYS of its float sums (block_exp2), whatever
 * its neighbours: the keys a block adds for another row are -inf to it,
 * weights of exactly 0, and a row's bits do not depend on its neighbours.
 * Starting at a multiple of BC instead cost a sliding window half a block
 * per group: at n = 8192, window.left = 1024, 1.051 score pairs computed
 * per allowed pair on AVX2 (now 1.015), 1.070 on AVX-512 (now 1.048).
 * A block takes the unmasked path when every row sees all of it:
 * k0 >= lo_max and k0 + kw <= lim_min (rows that see nothing count there
 * with hi = 0). Lanes past `rows` (queries 0) see the whole loop range, so
 * they never make a block take the masked path; their results are dropped.
 * cap2: the softcap in base 2 (c·log2 e), 0 when off; big: fused_big. */
static FUSED_FN void group_init(struct fused_group *g, const struct attn_fused_keys *keys,
                                size_t t0, size_t rows, float cap2, float big)
{
    int32_t lov[QG], hiv[QG];
    size_t lo_min = (size_t)-1;
    g->lim_min = (size_t)-1;
    g->lim_max = g->lo_max = 0;
    for (size_t t = 0; t < rows; t++) {
        size_t lo = (size_t)keys->lo[t0 + t], hi = (size_t)keys->hi[t0 + t];
        if (lo >= hi)
            lo = hi = 0;                /* sees nothing */
        else {
            lo_min = lo < lo_min ? lo : lo_min;
            g->lim_max = hi > g->lim_max ? hi : g->lim_max;
        }
        g->lim_min = hi < g->lim_min ? hi : g->lim_min;
        g->lo_max = lo > g->lo_max ? lo : g->lo_max;
        lov[t] = (int32_t)lo;
        hiv[t] = (int32_t)hi;
    }
    g->lo_start = g->lim_max ? lo_min / SUM_KEYS * SUM_KEYS : 0;
    for (size_t t = rows; t < QG; t++) {
        lov[t] = (int32_t)g->lo_start;
        hiv[t] = (int32_t)g->lim_max;
    }
    g->nz = (int)((rows + LANES - 1) / LANES);
    g->cap2 = cap2;
    g->icap2 = cap2 > 0 ? 1.0f / cap2 : 0;
    g->big = big;
    group_load(g, lov, hiv);
}

/* The largest |score| in base 2 (scale2·q·k) block_max lets through:
 * past it the pass goes to the exact path (attn_fused_rows returns false),
 * which reports a score it cannot take or finishes it exactly. The exact
 * path forms q·k before the scale, as the contract orders them, so with
 * a scale below 1 q·k can overflow while the kernel's score, whose q was
 * scaled first, is finite: a request then answered 200 output-only on a
 * fused kernel and 422 non_finite with weights or on `none`. Half of
 * FLT_MAX·scale2 leaves room for the sums' other order and roundings. */
static float fused_big(float scale2)
{
    return scale2 >= 2 ? FLT_MAX : (float)((double)FLT_MAX * scale2 / 2);
}

/* The group's lanes -> O [rows][dv], m [rows] (natural base), l [rows]. */
static FUSED_FN void unpack(const float *ot, const struct fused_group *g, size_t rows,
                            size_t dv, float *O, float *m, double *l)
{
    float mv[QG];
    double lv[QG];
    group_store(g, mv, lv);
    for (size_t t = 0; t < rows; t++) {
        m[t] = (float)(mv[t] * M_LN2);
        l[t] = lv[t];
        for (size_t c = 0; c < dv; c++)
            O[t * dv + c] = ot[c * QG + t];
    }
}

/* Floats of one group's state in the scratch (64-byte multiple). */
#define GROUP_FLOATS ((sizeof(struct fused_group) + 63) / 64 * 16)

/* Scratch: per group its state, qt [d_k][QG] and ot [d_v][QG]; then one
 * block's st [BC][QG] and the ISA's own work floats. */
size_t FUSED_SCRATCH_FN(size_t rows, size_t d_k, size_t d_v)
{
    size_t ng = (rows + QG - 1) / QG;
    return ng * (GROUP_FLOATS + QG * (d_k + d_v)) + QG * BC + FUSED_WORK_FLOATS(d_k);
}

/* Superblocks of 2-byte keys are widened whole into `wide`: ks rows of
 * d_k + d_v floats, at most the L keys there are. */
size_t FUSED_WIDE_FN(size_t d_k, size_t d_v, size_t L)
{
    size_t ks = attn_fused_superblock(d_k, d_v, BC);
    return (ks < L ? ks : L) * (d_k + d_v);
}

/* src [n] of elem -> dst [n] float32, exactly (elem is 2-byte). */
static void widen(enum attn_fused_elem elem, const void *src, float *dst, size_t n)
{
    if (elem == ATTN_FUSED_F16)
        half_f16_to_f32_n(src, dst, n);
    else
        half_bf16_to_f32_n(src, dst, n);
}

/* Rows [a, e) of X [..][d] (elem) as float32 rows whose row 0 is key *x0:
 * X itself (x0 = 0) when it holds float32, else rows [a, e) widened into
 * dst [e - a][d] (x0 = a). */
static const float *wide_rows(enum attn_fused_elem elem, const void *X, size_t d, size_t a,
                              size_t e, float *dst, size_t *x0)
{
    if (elem == ATTN_FUSED_F32) {
        *x0 = 0;
        return X;
    }
    widen(elem, (const uint16_t *)X + a * d, dst, (e - a) * d);
    *x0 = a;
    return dst;
}

/* Keys [k0, ke) for one group: qt [dk][QG], ot [dv][QG], state g; its
 * rows [t0, t0 + rows) of keys, whose sink (if any) sees each block's raw
 * scores. Row 0 of K is key k_0, row 0 of V key v_0. */
static FUSED_FN bool group_keys(struct fused_group *g, const float *qt, float *ot, size_t k0,
                                size_t ke, const float *K, size_t k_0, const float *V,
                                size_t v_0, size_t dk, size_t dv, float *st, float *work,
                                const struct attn_fused_keys *keys, size_t t0, size_t rows)
{
    const struct attn_score_sink *sink = keys->sink;
    for (size_t kw; k0 < ke; k0 += kw) {
        kw = ke - k0 < BC ? ke - k0 : BC;          /* at most BC, as the tiles expect */
        kw = kw < BC - k0 % BC ? kw : BC - k0 % BC; /* to the next multiple of BC */
        FUSED_VEC alpha[NZ];
        scores(qt, dk, K + (k0 - k_0) * dk, kw, st, work, g->nz);
        if (sink)
            sink->feed(sink->ctx, keys->row0 + t0, rows, k0, kw, st, 1, QG, keys->lo + t0,
                       keys->hi + t0);
        if (!block_softmax(st, kw, k0, g, alpha))
            return false;
        rescale(ot, dv, alpha, g->nz);
        values(st, kw, V + (k0 - v_0) * dv, dv, ot, work, g->nz);
    }
    return true;
}

/* attn_fused_rows (attn_fused.h) on this instruction set: every group of
 * the tile packed, then superblock by superblock of keys each group in
 * turn (K and V from L2 for all but the first; 2-byte K or V widened into
 * keys->wide first, or keys->span's rows taken, once per superblock for
 * all the groups), then unpacked. */
FUSED_FN bool FUSED_ROWS_FN(const float *q, size_t nb, size_t d_k, float scale, const void *K,
                            const void *V, size_t d_v, const struct attn_fused_keys *keys,
                            float *O, float *m, double *l, float *scratch)
{
    size_t ng = (nb + QG - 1) / QG, all = 0, first = (size_t)-1;
    size_t ks = attn_fused_superblock(d_k, d_v, BC);
    float scale2 = (float)(scale * M_LOG2E);    /* scores in base 2 */
    float cap2 = keys->softcap > 0 ? (float)(keys->softcap * M_LOG2E) : 0;
    float big = fused_big(scale2);
    struct fused_group *g = (struct fused_group *)(void *)scratch;
    float *qt = scratch + ng * GROUP_FLOATS, *ot = qt + ng * d_k * QG;
    float *st = ot + ng * d_v * QG, *work = st + BC * QG;
    for (size_t i = 0; i < ng; i++) {
        size_t rows = nb - i * QG < QG ? nb - i * QG : QG;
        pack_queries(q + i * QG * d_k, rows, d_k, scale2, qt + i * d_k * QG);
        group_init(&g[i], keys, i * QG, rows, cap2, big);
        memset(ot + i * d_v * QG, 0, d_v * QG * sizeof(float));
        all = g[i].lim_max > all ? g[i].lim_max : all;
        if (g[i].lim_max && g[i].lo_start < first)
            first = g[i].lo_start;
    }
    /* superblocks at multiples of ks (itself a multiple of BC) */
    for (size_t s0 = all ? first / ks * ks : 0; s0 < all; s0 += ks) {
        attn_stop_yield(keys->stop);
        /* the keys any group reads here, as float32 rows */
        size_t a = s0 > first ? s0 : first, e = s0 + ks < all ? s0 + ks : all, k_0 = a, v_0 = a;
        const float *Kf, *Vf;
        if (keys->span) {               /* the caller's rows of [a, e) (pages) */
            keys->span(keys->span_ctx, a, e, &Kf, &Vf);
        } else {
            Kf = wide_rows(keys->k_elem, K, d_k, a, e, keys->wide, &k_0);
            /* no scratch (NULL) when both are float32: no offset from it then */
            float *v_dst = keys->wide ? keys->wide + (e - a) * d_k : NULL;
            Vf = wide_rows(keys->v_elem, V, d_v, a, e, v_dst, &v_0);
        }
        for (size_t i = 0; i < ng; i++) {
            size_t kb = s0 > g[i].lo_start ? s0 : g[i].lo_start;
            size_t ke = s0 + ks < g[i].lim_max ? s0 + ks : g[i].lim_max;
            if (kb < ke && !group_keys(&g[i], qt + i * d_k * QG, ot + i * d_v * QG, kb, ke, Kf,
                                       k_0, Vf, v_0, d_k, d_v, st, work, keys, i * QG,
                                       nb - i * QG < QG ? nb - i * QG : QG))
                return false;
        }
    }
    for (size_t i = 0; i < ng; i++) {
        size_t rows = nb - i * QG < QG ? nb - i * QG : QG;
        unpack(ot + i * d_v * QG, &g[i], rows, d_v, O + i * QG * d_v, m + i * QG,
               l + i * QG);
    }
    return true;
}
