/*
 * core/kv_lowp_impl.h — the decode loop over one contiguous range of a kv
 * head's stored rows, written once for the vector instruction sets: private
 * to core/kv_lowp.c, which includes it once per set (AVX-512, AVX2) after
 * defining the primitives below.
 *
 * Per block of LP_KB keys of the range, for each of the R query rows:
 * scores straight from the stored K rows (widened in registers), the
 * block's online-softmax step lane-wise (exponentials as vectors, the block
 * sum in double), then the weights (int8: times each V row's scale, applied
 * once per row) against the stored V rows. The output of a row lives in
 * LP_NA registers per pass over the block, one multiply-add per register
 * and key, so no chain of multiply-adds waits on the one before it. The
 * rows LP_PF_BYTES ahead in the range are asked for (into L2) by the
 * first query row's loops a line or two at a time: K lines inside the
 * score loop of the rows 4 ahead's (dot4), V lines inside the value loop,
 * a row's lines with that row's multiply-adds; int8's row scales of those
 * rows at the block's start. Asking for a block's K and V lines 4 rows at
 * a time between score groups (and none while the values ran) stalled on
 * the prefetches once the line fill buffers were full (measured:
 * docs/benchmarks.md, section "Half precision", the prefetches stalled).
 * A range that
 * starts a window (rg->cold: no range before it asked for anything) asks
 * for its rows up to LP_PF_BYTES at once first, so that its first blocks
 * do not wait on one demand miss after another.
 *
 * Required before inclusion:
 *   LP_FN                the helpers' attributes (static, inline, target)
 *   LP_ENTRY             the entry point's (static, target)
 *   LP_VEC, LP_LANES     the register type and its float lanes
 *   LP_NA                output registers per pass over a block
 *   LP_RANGE_F16, _BF16, _I8   the entry points' names (one per storage form)
 *   LP_(name)            each helper's name in this instance (a suffix)
 *   LP_(ld)(st, row, e)  LP_LANES stored elements of row from e -> floats
 *   LP_(ldf), (stf), (set1), (zero), (fma), (add), (mul), (max)
 *   LP_(exp)(x)          e^x lane-wise, for x <= ~0 (-inf gives 0)
 *   LP_(hsum)(x)         float sum of the lanes; LP_(hsum_d): in double
 *   LP_(hsum4)(a, b, c, d, x)   the four sums into x [4]
 *   LP_(hmax)(x)         largest lane
 */

/* q · row over d stored elements (d a multiple of LP_LANES). */
LP_FN float LP_(dot)(enum kv_store st, const float *q, const void *row, size_t d)
{
    LP_VEC a0 = LP_(zero)(), a1 = LP_(zero)();
    size_t c = 0;
    for (; c + 2 * LP_LANES <= d; c += 2 * LP_LANES) {
        a0 = LP_(fma)(LP_(ldf)(q + c), LP_(ld)(st, row, c), a0);
        a1 = LP_(fma)(LP_(ldf)(q + c + LP_LANES), LP_(ld)(st, row, c + LP_LANES), a1);
    }
    if (c < d)
        a0 = LP_(fma)(LP_(ldf)(q + c), LP_(ld)(st, row, c), a0);
    return LP_(hsum)(LP_(add)(a0, a1));
}

/* Ask for the cache lines of bytes [from, to) of a stream at p. */
LP_FN void LP_(prefetch)(const char *p, size_t from, size_t to)
{
    for (size_t b = from & ~(size_t)63; b < to; b += 64)
        __builtin_prefetch(p + b, 0, LP_PF_LOCALITY);
}

/* q · the 4 rows at row, row + rb, ... (rb bytes apart) -> x [4]: four
 * chains at once, reduced together (LP_(hsum4)); and the nl cache lines
 * from pf asked for, spread evenly over the loop's steps. */
LP_FN void LP_(dot4)(enum kv_store st, const float *q, const char *row, size_t rb, size_t d,
                     float *x, const char *pf, size_t nl)
{
    LP_VEC a0 = LP_(zero)(), a1 = a0, a2 = a0, a3 = a0;
    /* lines a step: 4 rows of d elements over d / LP_LANES steps are
     * 4 · LP_LANES · esz bytes a step, one line (int8, or AVX2) or two */
    const bool two = st != KV_STORE_I8 && LP_LANES * 2 * 4 > 64;
    size_t l = 0;
    for (size_t c = 0; c < d; c += LP_LANES) {
        if (l < nl)
            __builtin_prefetch(pf + 64 * l++, 0, LP_PF_LOCALITY);
        if (two && l < nl)
            __builtin_prefetch(pf + 64 * l++, 0, LP_PF_LOCALITY);
        LP_VEC qv = LP_(ldf)(q + c);
        a0 = LP_(fma)(qv, LP_(ld)(st, row, c), a0);
        a1 = LP_(fma)(qv, LP_(ld)(st, row + rb, c), a1);
        a2 = LP_(fma)(qv, LP_(ld)(st, row + 2 * rb, c), a2);
        a3 = LP_(fma)(qv, LP_(ld)(st, row + 3 * rb, c), a3);
    }
    LP_(hsum4)(a0, a1, a2, a3, x);
}

/* srow [LP_KB] = scale · q · the na rows at K (rb bytes apart; int8: times
 * each row's scale ks[j]), -inf past them; the K lines of the first npf
 * rows at pk (rows ahead) asked for. False when one is not finite. */
LP_FN bool LP_(scores)(enum kv_store st, const float *q, float scale, const char *K, size_t rb,
                       size_t d, const float *ks, size_t na, float *srow, const char *pk,
                       size_t npf)
{
    bool ok = true;
    size_t j = 0;
    for (; j + 4 <= na; j += 4) {   /* and the K lines of 4 rows ahead, one or two a step */
        size_t e = j + 4 < npf ? j + 4 : npf, nl = j < e ? ((e - j) * rb + 63) / 64 : 0;
        LP_(dot4)(st, q, K + j * rb, rb, d, srow + j, pk + j * rb, nl);
    }
    if (j < npf)
        LP_(prefetch)(pk, j * rb, npf * rb);
    for (; j < na; j++)
        srow[j] = LP_(dot)(st, q, K + j * rb, d);
    if (na == LP_KB) {          /* a whole block: the scale (int8: times each row's) as vectors */
        LP_VEC sv = LP_(set1)(scale), bad = LP_(zero)();
        for (j = 0; j < LP_KB; j += LP_LANES) {
            LP_VEC x = LP_(mul)(LP_(ldf)(srow + j), sv);
            if (st == KV_STORE_I8)
                x = LP_(mul)(x, LP_(ldf)(ks + j));
            bad = LP_(add)(bad, LP_(mul)(x, LP_(zero)()));     /* NaN once one is not finite */
            LP_(stf)(srow + j, x);
        }
        return LP_(hsum)(bad) == 0;
    }
    for (j = 0; j < na; j++) {
        float x = scale * srow[j];
        if (st == KV_STORE_I8)
            x *= ks[j];
        ok &= isfinite(x) != 0;
        srow[j] = x;
    }
    for (; j < LP_KB; j++)
        srow[j] = -INFINITY;
    return ok;
}

/* o [dv] += Σ_j p[j] · V row j, nb rows of stride dv elements (esz bytes
 * each); dv a multiple of LP_LANES. The first npf rows at pv (rows ahead)
 * are asked for, row j's lines next to row j's multiply-adds. */
LP_FN void LP_(values)(enum kv_store st, const float *p, size_t nb, const char *V, size_t dv,
                     size_t esz, float *o, const char *pv, size_t npf)
{
    size_t c0 = 0, vb = dv * esz, vl = (vb + 63) / 64;
    for (; c0 + LP_NA * LP_LANES <= dv; c0 += LP_NA * LP_LANES) {
        LP_VEC a[LP_NA];
#pragma GCC unroll 16
        for (int u = 0; u < LP_NA; u++)
            a[u] = LP_(ldf)(o + c0 + (size_t)u * LP_LANES);
        for (size_t j = 0; j < nb; j++) {
            if (c0 == 0 && j < npf)             /* V row j's lines ahead */
                for (size_t l = 0; l < vl; l++)
                    __builtin_prefetch(pv + j * vb + l * 64, 0, LP_PF_LOCALITY);
            LP_VEC w = LP_(set1)(p[j]);
            const char *row = V + j * dv * esz;
#pragma GCC unroll 16
            for (int u = 0; u < LP_NA; u++)
                a[u] = LP_(fma)(w, LP_(ld)(st, row, c0 + (size_t)u * LP_LANES), a[u]);
        }
#pragma GCC unroll 16
        for (int u = 0; u < LP_NA; u++)
            LP_(stf)(o + c0 + (size_t)u * LP_LANES, a[u]);
    }
    for (; c0 < dv; c0 += LP_LANES) {           /* the last columns, two chains */
        LP_VEC a0 = LP_(ldf)(o + c0), a1 = LP_(zero)();
        size_t j = 0;
        for (; j + 2 <= nb; j += 2) {
            if (c0 == 0 && j < npf)             /* rows narrower than one pass above */
                LP_(prefetch)(pv, j * vb, (j + 2 < npf ? j + 2 : npf) * vb);
            a0 = LP_(fma)(LP_(set1)(p[j]), LP_(ld)(st, V + j * dv * esz, c0), a0);
            a1 = LP_(fma)(LP_(set1)(p[j + 1]), LP_(ld)(st, V + (j + 1) * dv * esz, c0), a1);
        }
        if (j < nb)
            a0 = LP_(fma)(LP_(set1)(p[j]), LP_(ld)(st, V + j * dv * esz, c0), a0);
        LP_(stf)(o + c0, LP_(add)(a0, a1));
    }
}

/* One query row's online-softmax step over srow [LP_KB] (-inf past the
 * block's keys and where masked): the row's running max, sum and output
 * rescaled when the block raises the max, srow -> e^(s - m). False: no
 * allowed key in the block (srow zeroed, nothing else changed). */
LP_FN bool LP_(softmax)(float *srow, float *m, double *l, float *o, size_t dv)
{
    LP_VEC mx = LP_(ldf)(srow);
    for (size_t j = LP_LANES; j < LP_KB; j += LP_LANES)
        mx = LP_(max)(mx, LP_(ldf)(srow + j));
    float mb = LP_(hmax)(mx), m0 = *m;
    if (mb == -INFINITY) {
        memset(srow, 0, LP_KB * sizeof(float));
        return false;
    }
    if (mb > m0) {
        float a = m0 == -INFINITY ? 0 : expf(m0 - mb);
        LP_VEC av = LP_(set1)(a);
        for (size_t c = 0; c < dv; c += LP_LANES)
            LP_(stf)(o + c, LP_(mul)(LP_(ldf)(o + c), av));
        *l *= a;
        *m = m0 = mb;
    }
    LP_VEC sh = LP_(set1)(-m0), sum = LP_(zero)();
    for (size_t j = 0; j < LP_KB; j += LP_LANES) {
        LP_VEC e = LP_(exp)(LP_(add)(LP_(ldf)(srow + j), sh));
        LP_(stf)(srow + j, e);
        sum = LP_(add)(sum, e);
    }
    *l += LP_(hsum_d)(sum);
    return true;
}


/* The range's rows against the query rows q, into the running state s
 * (see struct lp_range, struct lp_state). sb: LP_KB · R floats. False
 * when an allowed score is not finite. */
LP_FN bool LP_(range)(enum kv_store st, const struct lp_query *q, const struct lp_range *rg,
                      struct lp_state *s, float *sb)
{
    size_t dk = q->dk, dv = q->dv, esz = st == KV_STORE_I8 ? 1 : 2;
    size_t kb = dk * esz, vb = dv * esz;
    const char *K = rg->k, *V = rg->v;
    bool ok = true;
    if (rg->cold) {                         /* the rows before the first block's ahead */
        size_t n = (size_t)LP_PF_BYTES / (kb + vb);
        n = n < rg->cnt ? n : rg->cnt;
        LP_(prefetch)(K, 0, n * kb);
        LP_(prefetch)(V, 0, n * vb);
        if (rg->ks) {
            LP_(prefetch)((const char *)rg->ks, 0, n * sizeof(float));
            LP_(prefetch)((const char *)rg->vs, 0, n * sizeof(float));
        }
    }
    for (size_t b0 = 0; b0 < rg->cnt; b0 += LP_KB) {
        size_t nb = rg->cnt - b0 < LP_KB ? rg->cnt - b0 : LP_KB;
        /* the rows LP_PF_BYTES ahead of this block, within the range */
        size_t ahead = (size_t)LP_PF_BYTES / (kb + vb);
        size_t p0 = b0 + ahead, p1 = p0 + nb < rg->cnt ? p0 + nb : rg->cnt;
        size_t npf = p0 < p1 ? p1 - p0 : 0;
        const char *pk = K + p0 * kb, *pv = V + p0 * vb;
        const float *pks = rg->ks ? rg->ks + p0 : NULL, *pvs = rg->vs ? rg->vs + p0 : NULL;
        if (!npf && rg->nk && p0 >= rg->cnt && p0 - rg->cnt < rg->ncnt) {
            size_t r = p0 - rg->cnt;        /* ahead lies in the next range */
            pk = (const char *)rg->nk + r * kb;
            pv = (const char *)rg->nv + r * vb;
            pks = rg->nks ? rg->nks + r : NULL;
            pvs = rg->nvs ? rg->nvs + r : NULL;
            npf = rg->ncnt - r < nb ? rg->ncnt - r : nb;
        }
        if (npf && pks) {                   /* int8: those rows' scales */
            LP_(prefetch)((const char *)pks, 0, npf * sizeof(float));
            LP_(prefetch)((const char *)pvs, 0, npf * sizeof(float));
        }
        for (size_t t = 0; t < q->R; t++) {
            const float *qt = q->q + t * dk;
            /* (t % n: a division per block and row, a measurable share of
             * an int8 step from L2: docs/benchmarks.md, "Half precision") */
            size_t lim = q->lim[q->n == 1 ? 0 : t % q->n], key = rg->key0 + b0;
            size_t na = lim <= key ? 0 : lim - key < nb ? lim - key : nb;
            float *srow = sb + t * LP_KB;
            ok &= LP_(scores)(st, qt, q->scale, K + b0 * kb, kb, dk,
                              rg->ks ? rg->ks + b0 : NULL, na, srow, pk, t == 0 ? npf : 0);
            float *o = s->o + t * dv;
            if (!LP_(softmax)(srow, &s->m[t], &s->l[t], o, dv))
                continue;
            if (st == KV_STORE_I8 && na == LP_KB)   /* the V row's scale joins its weight */
                for (size_t j = 0; j < LP_KB; j += LP_LANES)
                    LP_(stf)(srow + j, LP_(mul)(LP_(ldf)(srow + j), LP_(ldf)(rg->vs + b0 + j)));
            else if (st == KV_STORE_I8)
                for (size_t j = 0; j < na; j++)
                    srow[j] *= rg->vs[b0 + j];
            LP_(values)(st, srow, na, V + b0 * vb, dv, esz, o, pv, t == 0 ? npf : 0);
        }
    }
    return ok;
}

/* One entry per storage form, so that the form is a constant in the
 * loops (no test of it per widened vector). */
#define LP_ENTRY_FOR(name, form)                                                      \
    LP_ENTRY bool name(enum kv_store st, const struct lp_query *q,                    \
                       const struct lp_range *rg, struct lp_state *s, float *sb)      \
    {                                                                                 \
        (void)st;                                                                     \
        return LP_(range)(form, q, rg, s, sb);                                        \
    }
LP_ENTRY_FOR(LP_RANGE_F16, KV_STORE_F16)
LP_ENTRY_FOR(LP_RANGE_BF16, KV_STORE_BF16)
LP_ENTRY_FOR(LP_RANGE_I8, KV_STORE_I8)
#undef LP_ENTRY_FOR
