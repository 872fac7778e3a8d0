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
 *   FUSED_FN, FUSED_VEC     the functions' target attribute; the register type
 *   FUSED_WORK_FLOATS(dk)   floats of the ISA's own block scratch after st
 *   FUSED_ROWS_FN, FUSED_SCRATCH_FN   the entry points' names
 *   struct fused_group      with lim_min, lim_max (size_t) and nz (int)
 *   group_load(g, lv)       lanes' limits lv [QG] into g, m = -inf, l = 0
 *   group_store(g, mv, lv)  g's running max and sum -> mv, lv [QG]
 *   scores(qt, dk, K, kw, st, work, nz)       st [kw][QG] = K · qt
 *   block_softmax(st, kw, k0, g, alpha)       attn_fused.c says what
 *   rescale(ot, dv, alpha, nz)                ot *= alpha lane-wise
 *   values(st, kw, V, dv, ot, work, nz)       ot [dv][QG] += Vᵀ · st
 */

/* q [rows][dk] -> qt [dk][QG] = scale2 · qᵀ, unused lanes 0. */
static FUSED_FN void pack_queries(const float *q, size_t rows, size_t dk, float scale2,
                                  float *qt)
{
    memset(qt, 0, dk * QG * sizeof(float));
    for (size_t t = 0; t < rows; t++)
        for (size_t c = 0; c < dk; c++)
            qt[c * QG + t] = scale2 * q[t * dk + c];
}

/* Lanes past `rows` (queries 0) get the largest limit, so they never make
 * a block take the masked path; their results are dropped. */
static FUSED_FN void group_init(struct fused_group *g, const int32_t *lim, size_t rows)
{
    int32_t lv[QG];
    g->lim_min = (size_t)-1;
    g->lim_max = 0;
    for (size_t t = 0; t < rows; t++) {
        size_t x = (size_t)lim[t];
        g->lim_min = x < g->lim_min ? x : g->lim_min;
        g->lim_max = x > g->lim_max ? x : g->lim_max;
    }
    for (size_t t = 0; t < QG; t++)
        lv[t] = t < rows ? lim[t] : (int32_t)g->lim_max;
    g->nz = (int)((rows + LANES - 1) / LANES);
    group_load(g, lv);
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

/* Keys [k0, ke) for one group: qt [dk][QG], ot [dv][QG], state g. */
static FUSED_FN bool group_keys(struct fused_group *g, const float *qt, float *ot, size_t k0,
                                size_t ke, const float *K, const float *V, size_t dk, size_t dv,
                                float *st, float *work)
{
    for (; k0 < ke; k0 += BC) {
        size_t kw = ke - k0 < BC ? ke - k0 : BC;
        FUSED_VEC alpha[NZ];
        scores(qt, dk, K + k0 * dk, kw, st, work, g->nz);
        if (!block_softmax(st, kw, k0, g, alpha))
            return false;
        rescale(ot, dv, alpha, g->nz);
        values(st, kw, V + k0 * dv, dv, ot, work, g->nz);
    }
    return true;
}

/* attn_fused_rows (attn_fused.h) on this instruction set: every group of
 * the tile packed, then superblock by superblock of keys each group in
 * turn (K and V from L2 for all but the first), then unpacked. */
FUSED_FN bool FUSED_ROWS_FN(const float *q, size_t nb, size_t d_k, float scale, const float *K,
                            const float *V, size_t d_v, const int32_t *lim, float *O, float *m,
                            double *l, float *scratch)
{
    size_t ng = (nb + QG - 1) / QG, all = 0, ks = attn_fused_superblock(d_k, d_v, BC);
    float scale2 = (float)(scale * M_LOG2E);    /* scores in base 2 */
    struct fused_group *g = (struct fused_group *)(void *)scratch;
    float *qt = scratch + ng * GROUP_FLOATS, *ot = qt + ng * d_k * QG;
    float *st = ot + ng * d_v * QG, *work = st + BC * QG;
    for (size_t i = 0; i < ng; i++) {
        size_t rows = nb - i * QG < QG ? nb - i * QG : QG;
        pack_queries(q + i * QG * d_k, rows, d_k, scale2, qt + i * d_k * QG);
        group_init(&g[i], lim + i * QG, rows);
        memset(ot + i * d_v * QG, 0, d_v * QG * sizeof(float));
        all = g[i].lim_max > all ? g[i].lim_max : all;
    }
    for (size_t s0 = 0; s0 < all; s0 += ks)
        for (size_t i = 0; i < ng; i++) {
            size_t ke = s0 + ks < g[i].lim_max ? s0 + ks : g[i].lim_max;
            if (!group_keys(&g[i], qt + i * d_k * QG, ot + i * d_v * QG, s0, ke, K, V, d_k,
                            d_v, st, work))
                return false;
        }
    for (size_t i = 0; i < ng; i++) {
        size_t rows = nb - i * QG < QG ? nb - i * QG : QG;
        unpack(ot + i * d_v * QG, &g[i], rows, d_v, O + i * QG * d_v, m + i * QG,
               l + i * QG);
    }
    return true;
}
