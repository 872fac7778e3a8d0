/*
 * core/attn_impl.h — the forward pass, written once for one element type.
 *
 * core/attn.c includes this file twice: with T = float, SFX = f32 and with
 * T = double, SFX = f64 (and the matching BLAS/exp names), so float32 and
 * float64 share one implementation instead of two copies. Everything here is
 * static; the public entry points in attn.c dispatch on the dtype.
 *
 * Required before inclusion: T, SFX, ATTN_GEMM (cblas_sgemm/dgemm),
 * ATTN_NEXTDOWN (the next T toward -inf), optionally ATTN_MAX_FINITE (a
 * faster max_finite for T), ATTN_FLASH_FUSED (flash_keys by another
 * kernel when it applies) and ATTN_VDOT/ATTN_VAXPY/ATTN_VAXPY4 (vector
 * forms of dot, axpy and axpy4), and
 * struct attn_rows (one kv head's rows: one block or pages) and
 * attn.c's shared helpers (attn_query_pos, attn_causal_lim, attn_tile_keys,
 * attn_head_slope, ATTN_CHUNK, ATTN_HALF, ATTN_LOOP_ROWS, ATTN_TILE_MAX,
 * vexp_shift_SFX).
 *
 * With a causal mask, a tile's products stop at the last key any of its rows
 * may see (Lt columns instead of L): about half the work of a causal prefill.
 *
 * The pass for one kv head g: its G = h/h_kv query heads are contiguous, so
 * their G·n query rows form one contiguous block of rows in q, scores,
 * weights and output. Those rows are processed in tiles of at most B rows:
 *   prep_q   q rows + bias_q, RoPE at the query positions   -> qb [B][d_k]
 *   qk       scale · qb · Kᵀ (gemm, or plain loops for very few rows)
 *   finish   attn_bias, ALiBi, mask, causal  (masked = -inf)
 *   softmax  row shift m / max(m,0) / max(m,sink), extra term in the sum
 *   pv       P · V (gemm, or plain loops for very few rows); when weights
 *            are not returned, P stays unnormalised and the output rows are
 *            scaled by 1/denominator instead
 * When only the output is asked for (and a kv head has more than
 * ATTN_LOOP_ROWS query rows), flash_rows replaces qk..pv: keys in blocks
 * with an online softmax, scratch [B][ATTN_FLASH_KEYS] whatever L is
 * (for float32 scores that are plain but for a softcap, each row's keys one
 * range: the fused kernel, AVX-512 or AVX2, that core/attn_kernel.c
 * chooses; core/attn_fused.h).
 */

#define FN(name) ATTN_CAT(name, SFX)

/* x [rows][d] rotated in place: the first r dims of row t
 * at position pos[t] (pos0 + t when pos is NULL), scaled frequencies, and
 * YaRN's factor on the rotated dims. */
static void FN(rope_rows)(T *x, size_t rows, size_t d, const int64_t *pos, int64_t pos0,
                          const struct attn_params *p)
{
    size_t r = attn_rope_dims(p, d), half = r / 2;
    double ms = attn_rope_mscale(p);
    /* Pairs outer, rows inner: one frequency per pair, not per element. */
    for (size_t i = 0; i < half; i++) {
        double theta = attn_rope_inv_freq(p, r, i);
        size_t a = p->rope_pairs == ATTN_ROPE_HALF ? i : 2 * i;
        size_t b = p->rope_pairs == ATTN_ROPE_HALF ? i + half : 2 * i + 1;
        for (size_t t = 0; t < rows; t++) {
            double ang = (double)(pos ? pos[t] : pos0 + (int64_t)t) * theta;
            double c = cos(ang), sn = sin(ang);
            T *row = x + t * d;
            double xa = row[a], xb = row[b];
            double ya = xa * c - xb * sn, yb = xa * sn + xb * c;
            if (ms != 1) {
                ya *= ms;
                yb *= ms;
            }
            row[a] = (T)ya;
            row[b] = (T)yb;
        }
    }
}

/* src [m][d] + bias [d] (or a plain copy when bias is NULL) -> dst [m][d];
 * dst may equal src. */
static void FN(add_bias_rows)(const T *src, const T *bias, size_t m, size_t d,
                              T *dst)
{
    if (!bias) {
        if (dst != src)
            memmove(dst, src, m * d * sizeof(T));
        return;
    }
    for (size_t r = 0; r < m; r++)
        for (size_t c = 0; c < d; c++)
            dst[r * d + c] = src[r * d + c] + bias[c];
}

/* k_in [B·h_kv][m][d_k] -> k_out[g] [m][d_k]: + bias_k (head g % h_kv),
 * RoPE with row t of kv head g at pos[(g / h_kv)·stride + t] (stride 0:
 * the same positions for every batch element), or pos0 + t when pos is
 * NULL. */
static void FN(prepare_k)(const struct attn_shape *s, const struct attn_params *p,
                          const struct attn_inputs *in, size_t m, const int64_t *pos,
                          size_t stride, int64_t pos0, void *const *k_out)
{
    const T *k = in->k, *bk = in->bias_k;
    size_t heads = s->h_kv * (s->B ? s->B : 1);
    for (size_t g = 0; g < heads; g++) {
        T *dst = k_out[g];
        const T *bias = bk ? bk + (in->bias_k_heads == 1 ? 0 : g % s->h_kv) * s->d_k : NULL;
        FN(add_bias_rows)(k + g * m * s->d_k, bias, m, s->d_k, dst);
        if (p->rope)
            FN(rope_rows)(dst, m, s->d_k, pos ? pos + g / s->h_kv * stride : NULL, pos0, p);
    }
}

/* v_in [B·h_kv][m][d_v] -> v_out[g] [m][d_v]: + bias_v (head g % h_kv). */
static void FN(prepare_v)(const struct attn_shape *s, const struct attn_inputs *in,
                          size_t m, void *const *v_out)
{
    const T *v = in->v, *bv = in->bias_v;
    size_t heads = s->h_kv * (s->B ? s->B : 1);
    for (size_t g = 0; g < heads; g++) {
        const T *bias = bv ? bv + (in->bias_v_heads == 1 ? 0 : g % s->h_kv) * s->d_v : NULL;
        FN(add_bias_rows)(v + g * m * s->d_v, bias, m, s->d_v, v_out[g]);
    }
}

/* Global query rows [row0, row0+nb) (row = head·n + i) -> qb [nb][d_k]:
 * + bias_q of the row's head, RoPE at the row's query position. */
static void FN(prep_q)(const struct attn_run *x, const struct attn_inputs *in,
                       size_t row0, size_t nb, T *qb)
{
    const struct attn_request *r = &x->r;
    size_t n = r->shape.n, d = r->shape.d_k;
    const T *q = in->q, *bq = in->bias_q;
    size_t t = 0;
    while (t < nb) {
        size_t gr = row0 + t, hh = gr / n, i = gr % n;
        size_t run = n - i < nb - t ? n - i : nb - t;   /* rows of head hh */
        const T *bias = bq ? bq + (in->bias_q_heads == 1 ? 0 : attn_run_head(x, hh)) * d
                           : NULL;
#ifdef ATTN_WIDEN
        if (x->q_elem) {                    /* 2-byte q: widened, then as float32 */
            ATTN_WIDEN(x->q_elem, in->q, gr * d, run * d, qb + t * d);
            FN(add_bias_rows)(qb + t * d, bias, run, d, qb + t * d);
        } else
#endif
            FN(add_bias_rows)(q + gr * d, bias, run, d, qb + t * d);
        if (r->params.rope) {
            const int64_t *pos =
                x->pq ? x->pq + (x->pq_b == 1 ? 0 : attn_run_qbatch(x, hh)) * n + i : NULL;
            FN(rope_rows)(qb + t * d, run, d, pos, pos ? 0 : attn_run_qpos(x, hh, i),
                          &r->params);
        }
        t += run;
    }
}

#if defined(ATTN_VDOT) && defined(ATTN_VAXPY) && defined(ATTN_VAXPY4)
/* A vector form of dot, axpy4 and axpy for this T (core/simd_neon.h). */
static T FN(dot)(const T *restrict a, const T *restrict b, size_t d)
{
    return ATTN_VDOT(a, b, d);
}

static void FN(axpy4)(T *restrict o, const T *w, const T *restrict x0, const T *restrict x1,
                      const T *restrict x2, const T *restrict x3, size_t d)
{
    ATTN_VAXPY4(o, w, x0, x1, x2, x3, d);
}

static void FN(axpy)(T *restrict o, T w, const T *restrict x, size_t d)
{
    ATTN_VAXPY(o, w, x, d);
}
#else
/* a [d] · b [d], with ATTN_CHUNK independent partial sums so the compiler
 * vectorises it without -ffast-math (why hand-written: BLAS dot per key is
 * call-bound at d ≈ 128). */
static T FN(dot)(const T *restrict a, const T *restrict b, size_t d)
{
    T acc[ATTN_CHUNK] = {0};
    size_t c = 0;
    for (; c + ATTN_CHUNK <= d; c += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++)
            acc[u] += a[c + u] * b[c + u];
    if (c + ATTN_HALF <= d) {               /* d = 8, 24, ...: one vector more */
        for (size_t u = 0; u < ATTN_HALF; u++)
            acc[u] += a[c + u] * b[c + u];
        c += ATTN_HALF;
    }
    for (; c < d; c++)
        acc[c % ATTN_CHUNK] += a[c] * b[c];
    /* pairwise, each step a fixed-length loop the compiler vectorises */
    for (size_t u = 0; u < 8; u++)
        acc[u] += acc[u + 8];
    for (size_t u = 0; u < 4; u++)
        acc[u] += acc[u + 4];
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

/* o [d] += w[0]·x0 + ... + w[3]·x3 (rows [d]): four keys per pass over o,
 * so o is loaded and stored a quarter as often. */
static void FN(axpy4)(T *restrict o, const T *w, const T *restrict x0, const T *restrict x1,
                      const T *restrict x2, const T *restrict x3, size_t d)
{
    T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    size_t c = 0;
    for (; c + ATTN_CHUNK <= d; c += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++)
            o[c + u] += (w0 * x0[c + u] + w1 * x1[c + u]) +
                        (w2 * x2[c + u] + w3 * x3[c + u]);
    if (c + ATTN_HALF <= d) {
        for (size_t u = 0; u < ATTN_HALF; u++)
            o[c + u] += (w0 * x0[c + u] + w1 * x1[c + u]) +
                        (w2 * x2[c + u] + w3 * x3[c + u]);
        c += ATTN_HALF;
    }
    for (; c < d; c++)
        o[c] += (w0 * x0[c] + w1 * x1[c]) + (w2 * x2[c] + w3 * x3[c]);
}

/* o [d] += w · x [d] */
static void FN(axpy)(T *restrict o, T w, const T *restrict x, size_t d)
{
    size_t c = 0;
    for (; c + ATTN_CHUNK <= d; c += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++)
            o[c + u] += w * x[c + u];
    if (c + ATTN_HALF <= d) {
        for (size_t u = 0; u < ATTN_HALF; u++)
            o[c + u] += w * x[c + u];
        c += ATTN_HALF;
    }
    for (; c < d; c++)
        o[c] += w * x[c];
}
#endif

/* x [n]: ask for its cache lines ahead of the loop that reads them. */
static inline void FN(prefetch_row)(const T *x, size_t n)
{
    const char *p = (const char *)x;
    for (size_t b = 0; b < n * sizeof(T); b += 64)
        __builtin_prefetch(p + b, 0, 3);
}

/* Row j of one kv head's K or V (struct attn_rows in attn.c). */
static inline const T *FN(row)(const struct attn_rows *r, size_t j)
{
    if (!r->pg)
        return (const T *)r->base + j * r->d;
    size_t a = r->j0 + j;
    return (const T *)r->pg[a >> r->sh] + (a & (((size_t)1 << r->sh) - 1)) * r->d;
}

/* Rows of r from row j on that lie side by side in memory, counted on at
 * least until `want` when they do: the rest of j's page, then whole pages
 * while each starts where the one before it ends (a cache's neighbouring
 * slab slots, core/kv_slab.h). SIZE_MAX for rows in one block. */
static inline size_t FN(run)(const struct attn_rows *r, size_t j, size_t want)
{
    if (!r->pg)
        return SIZE_MAX;
    size_t a = r->j0 + j, pr = (size_t)1 << r->sh, b = a >> r->sh;
    size_t n = pr - (a & (pr - 1));
    uintptr_t step = (uintptr_t)(pr * r->d * sizeof(T));
    for (; n < want && b + 1 < r->np && (uintptr_t)r->pg[b + 1] == (uintptr_t)r->pg[b] + step;
         b++)
        n += pr;
    return n;
}

/* Rows [a, e) of r -> dst [e - a][d], a run of pages at a time. */
static void FN(copy_rows)(const struct attn_rows *r, size_t a, size_t e, T *dst)
{
    for (size_t j = a, n; j < e; j += n) {
        n = FN(run)(r, j, e - j);
        n = n < e - j ? n : e - j;
        memcpy(dst + (j - a) * r->d, FN(row)(r, j), n * r->d * sizeof(T));
    }
}

/* Rows [a, e) of r as one block [e - a][d]: in place when they lie side
 * by side in memory (always, for rows in one block), else copied into buf
 * [e - a][d]. */
static const T *FN(block)(const struct attn_rows *r, size_t a, size_t e, T *buf)
{
    if (FN(run)(r, a, e - a) >= e - a)
        return FN(row)(r, a);
    FN(copy_rows)(r, a, e, buf);
    return buf;
}

/* A walk over rows j, j+1, ... of r: a pointer step within a run of pages
 * side by side in memory (so a cache whose pages took neighbouring slab
 * slots reads as one block, and the prefetch cursor runs ahead across page
 * ends), a page lookup only where a run ends (measured: docs/benchmarks.md,
 * section "Paged views read in place"). */
struct FN(cur) {
    const struct attn_rows *r;
    const T *p;
    size_t left, j;
};

static inline const T *FN(next)(struct FN(cur) *c)
{
    if (!c->left) {
        c->p = FN(row)(c->r, c->j);
        c->left = FN(run)(c->r, c->j, SIZE_MAX);
    }
    const T *p = c->p;
    c->p += c->r->d;
    c->left--;
    c->j++;
    return p;
}

/* qb [nb][d_k], K rows [c0, c0+Lt) -> S [nb][Lt] (row stride ld) = scale ·
 * qb · Kᵀ. Few rows (decode) read K once with plain loops, row by row (so
 * pages are read in place): memory-bound, and OpenBLAS gemv/gemm reach far
 * less bandwidth there (bench/RESULTS.md, Surprises 2); more rows take one
 * gemm over Kb, those rows in one block (held_rows). */
static void FN(qk)(const T *qb, size_t nb, const struct attn_rows *K, const T *Kb, size_t c0,
                   size_t Lt, size_t ld, size_t d_k, T scale, T *S)
{
    if (Lt == 0)
        return;
    if (nb <= ATTN_LOOP_ROWS) {
        struct FN(cur) kc = {K, NULL, 0, c0}, pc = {K, NULL, 0, c0 + ATTN_PF_ROWS};
        for (size_t j = 0; j < Lt; j++) {
            const T *kr = FN(next)(&kc);
            if (j + ATTN_PF_ROWS < Lt)
                FN(prefetch_row)(FN(next)(&pc), d_k);
            for (size_t t = 0; t < nb; t++)
                S[t * ld + j] = scale * FN(dot)(qb + t * d_k, kr, d_k);
        }
        return;
    }
    ATTN_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)Lt, (int)d_k,
              scale, qb, (int)d_k, Kb, (int)d_k, 0, S, (int)ld);
}

/* P [nb][Lt] (row stride ld), V rows [c0, c0+Lt) -> O [nb][d_v] = P · V
 * (more than ATTN_LOOP_ROWS rows: one gemm over Vb, those rows in one
 * block) */
static void FN(pv)(const T *P, size_t nb, const struct attn_rows *V, const T *Vb, size_t c0,
                   size_t Lt, size_t ld, size_t d_v, T *O)
{
    if (nb <= ATTN_LOOP_ROWS || Lt == 0) {
        memset(O, 0, nb * d_v * sizeof(T));
        struct FN(cur) vc = {V, NULL, 0, c0}, pc = {V, NULL, 0, c0 + ATTN_PF_ROWS};
        size_t j = 0;
        for (; j + 4 <= Lt; j += 4) {
            const T *v0 = FN(next)(&vc), *v1 = FN(next)(&vc);
            const T *v2 = FN(next)(&vc), *v3 = FN(next)(&vc);
            if (j + ATTN_PF_ROWS + 4 <= Lt)
                for (size_t u = 0; u < 4; u++)
                    FN(prefetch_row)(FN(next)(&pc), d_v);
            for (size_t t = 0; t < nb; t++)
                FN(axpy4)(O + t * d_v, P + t * ld + j, v0, v1, v2, v3, d_v);
        }
        for (; j < Lt; j++) {
            const T *vr = FN(next)(&vc);
            for (size_t t = 0; t < nb; t++)
                FN(axpy)(O + t * d_v, P[t * ld + j], vr, d_v);
        }
        return;
    }
    ATTN_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, (int)d_v, (int)Lt,
              1, P, (int)ld, Vb, (int)d_v, 0, O, (int)d_v);
}

/* A copy of rows [a, e) of one kv head's K or V in buf (WS region `reg`,
 * reserved on first use for kw rows), for gemm tiles whose rows do not lie
 * side by side in memory. */
struct FN(held) {
    T *buf;
    int reg;
    size_t a, e;
};

/* Rows [c0, c1) of r (c0 < c1 <= kw) as the one block a gemm tile reads:
 * in place when they lie side by side in memory, else from h, which grows
 * as the head's tiles move on (a causal prefill's tiles copy each row
 * once) and starts again at c0 when a tile begins outside it. A gemm's
 * bits depend on its column count and a column's place among them
 * (OpenBLAS), so a tile's rows stay one gemm however the pages lie. NULL
 * when memory is short. */
static const T *FN(held_rows)(const struct attn_rows *r, struct FN(held) *h,
                              struct attn_ws *ws, size_t kw, size_t c0, size_t c1)
{
    if (FN(run)(r, c0, c1 - c0) >= c1 - c0)
        return FN(row)(r, c0);
    if (!h->buf && !(h->buf = attn_ws_reserve(ws, h->reg, kw * r->d * sizeof(T))))
        return NULL;
    if (c0 < h->a || c0 > h->e)
        h->a = h->e = c0;
    if (c1 > h->e) {
        FN(copy_rows)(r, h->e, c1, h->buf + (h->e - h->a) * r->d);
        h->e = c1;
    }
    return h->buf + (c0 - h->a) * r->d;
}

/* true when every x [n] is finite */
static bool FN(all_finite)(const T *x, size_t n)
{
    int ok = 1;
    size_t j = 0;
    for (; j + ATTN_CHUNK <= n; j += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++)
            ok &= (x[j + u] - x[j + u]) == 0;   /* false for ±inf and NaN */
    for (; j < n; j++)
        ok &= (x[j] - x[j]) == 0;
    return ok != 0;
}

#ifndef ATTN_MAX_FINITE
/* max of x [n] (-inf when n = 0); *ok = 0 when an entry is not finite.
 * One pass for both, with ATTN_CHUNK lanes so it vectorises. */
static T FN(max_finite)(const T *x, size_t n, int *ok)
{
    T m[ATTN_CHUNK];
    int f = 1;
    for (size_t u = 0; u < ATTN_CHUNK; u++)
        m[u] = -INFINITY;
    size_t j = 0;
    for (; j + ATTN_CHUNK <= n; j += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++) {
            T v = x[j + u];
            m[u] = v > m[u] ? v : m[u];
            f &= (v - v) == 0;
        }
    T r = -INFINITY;
    for (; j < n; j++) {
        r = x[j] > r ? x[j] : r;
        f &= (x[j] - x[j]) == 0;
    }
    for (size_t u = 0; u < ATTN_CHUNK; u++)
        r = m[u] > r ? m[u] : r;
    *ok = f;
    return r;
}
#endif


/* s [kw] = scale·q·k of query row i of head hh against keys k0..k0+kw-1,
 * computed at least for the row's allowed keys -> final scores: softcap,
 * + attn_bias, + ALiBi; keys not allowed (causal, window, segment, mask,
 * -inf bias) = -inf. *mx: the row maximum, -inf when no key is allowed. */
static enum core_status FN(finish_scores)(const struct attn_run *x, size_t hh, size_t i,
                                          size_t k0, size_t kw, T *s, T *mx)
{
    const struct attn_request *r = &x->r;
    size_t L = r->shape.L, n = r->shape.n, kb = attn_run_qbatch(x, hh);
    struct attn_keys k;
    attn_run_keys(x, hh, i, &k);
    /* the two intervals, window-relative and clipped to [0, kw) */
    size_t iv[2][2] = {{k.slo, k.shi}, {k.lo, k.hi}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            size_t v = iv[a][b] <= k0 ? 0 : iv[a][b] - k0;
            iv[a][b] = v < kw ? v : kw;
        }
    const T *b = r->attn_bias;
    size_t bh = attn_run_bcast_head(x, r->attn_bias_heads, hh);
    if (b)
        b += (bh * n + i) * L + k0;
    const uint8_t *mk = r->mask;
    size_t mh = attn_run_bcast_head(x, r->mask_heads, hh);
    if (mk)
        mk += (mh * n + i) * L + k0;
    bool alibi = r->params.alibi;
    double slope = 0, cap = r->params.softcap;
    if (alibi)
        slope = r->params.alibi_slopes ? r->params.alibi_slopes[attn_run_head(x, hh)]
                                       : attn_alibi_slope(attn_run_head(x, hh), x->h);
    int64_t pos = attn_run_qpos(x, hh, i);
    bool plain = !b && !mk && !alibi && cap == 0 && k.exact;

    T m = -INFINITY;
    size_t at = 0;
    for (int a = 0; a < 2; a++) {
        size_t lo = iv[a][0], hi = iv[a][1];
        if (lo >= hi)
            continue;
        for (size_t j = at; j < lo; j++)
            s[j] = -INFINITY;
        at = hi;
        if (plain) {                        /* the common case, vectorisable */
            int ok;
#ifdef ATTN_MAX_FINITE
            T mm = ATTN_MAX_FINITE(s + lo, hi - lo, &ok);
#else
            T mm = FN(max_finite)(s + lo, hi - lo, &ok);
#endif
            if (!ok)
                return CORE_ENONFINITE;
            m = mm > m ? mm : m;
            continue;
        }
        for (size_t j = lo; j < hi; j++) {
            if ((mk && !mk[j]) || (b && b[j] == -INFINITY) ||
                (!k.exact && !attn_run_allowed(x, hh, i, k0 + j))) {
                s[j] = -INFINITY;
                continue;
            }
            T v = s[j];
            if (cap != 0) {
                if (!isfinite(v))
                    return CORE_ENONFINITE;
                v = (T)(cap * tanh((double)v / cap));
            }
            if (b)
                v += b[j];
            if (alibi)
                v = (T)((double)v - slope * fabs((double)(pos - attn_run_kpos(x, kb, k0 + j))));
            if (!isfinite(v))
                return CORE_ENONFINITE;
            s[j] = v;
            m = v > m ? v : m;
        }
    }
    for (size_t j = at; j < kw; j++)
        s[j] = -INFINITY;
    *mx = m;
    return CORE_OK;
}

/* x [n] *= f */
static void FN(scale_row)(T *x, size_t n, T f)
{
    size_t j = 0;
    for (; j + ATTN_CHUNK <= n; j += ATTN_CHUNK)
        for (size_t u = 0; u < ATTN_CHUNK; u++)
            x[j + u] *= f;
    for (; j < n; j++)
        x[j] *= f;
}

/* s [L] final scores with finite maximum m -> w [L] = exp(s - shift)
 * (w may equal s); returns the denominator (>= 1, or inf). Shift: m
 * (standard), max(m, 0) (softmax1), max(m, sink) (sink); the extra term
 * exp(0 - shift) / exp(sink - shift) joins the sum computed after the shift,
 * so it neither overflows nor is lost. The caller divides the weights by
 * the returned sum. */
static double FN(softmax_row)(enum attn_softmax sm, double sink, const T *s, T *w, size_t L,
                              T m)
{
    double shift = m, extra = 0;
    if (sm == ATTN_SOFTMAX_ONE && shift < 0)
        shift = 0;
    else if (sm == ATTN_SOFTMAX_SINK && shift < sink)
        shift = sink;
    /* The shift as T, rounded down: every s <= m <= sh keeps exp(s - sh) <= 1,
     * and a sink shift gives an extra term >= 1 (or inf, when the sink is
     * beyond T's precision: then the weights are 0, their correct limit). */
    T sh = (T)shift;
    if ((double)sh > shift)
        sh = ATTN_NEXTDOWN(sh);
    if (sm == ATTN_SOFTMAX_ONE)
        extra = exp(0.0 - (double)sh);
    else if (sm == ATTN_SOFTMAX_SINK)
        extra = exp(sink - (double)sh);
    return FN(vexp_shift)(s, w, L, sh) + extra;
}

/* Rows [row0, row0+nb) against the window w: S [nb][kw] holds scale·q·k in
 * its columns [c0, c1) (no allowed key lies outside). Finishes the scores,
 * writes exp(s - shift) to P (when P is not NULL; P may equal S). inv [nb]:
 * each row's 1/denominator (0 for rows with no allowed key). With
 * `normalise` (P is the caller's weights) P is scaled here and complete up
 * to kw; otherwise only P's columns [c0, c1) are written, unnormalised. A
 * full pass flags empty rows; a key-split pass (w->part) records each row's
 * window maximum and sum instead (an empty window is no error). */
static enum core_status FN(finish_block)(const struct attn_run *x, const struct attn_win *w,
                                         size_t row0, size_t nb, size_t c0, size_t c1, T *S,
                                         T *P, bool normalise, T *inv,
                                         struct attn_result *out)
{
    const struct attn_request *r = &x->r;
    size_t n = r->shape.n, kw = w->kw;
    /* partial sums: shift by the max only */
    enum attn_softmax sm = w->part ? ATTN_SOFTMAX_STANDARD : r->params.softmax;
    for (size_t t = 0; t < nb; t++) {
        size_t gr = row0 + t;
        T m;
        enum core_status st =
            FN(finish_scores)(x, gr / n, gr % n, w->k0, kw, S + t * kw, &m);
        if (st != CORE_OK)
            return st;
        bool any = m != -INFINITY;
        double sum = 0;
        inv[t] = 0;
        if (any && P) {
            T *pr = P + t * kw;
            sum = FN(softmax_row)(sm, attn_run_sink(x, gr / n), S + t * kw + c0, pr + c0,
                                  c1 - c0, m);
            inv[t] = (T)(1.0 / sum);
            if (normalise) {
                FN(scale_row)(pr + c0, c1 - c0, inv[t]);
                memset(pr, 0, c0 * sizeof(T));
                memset(pr + c1, 0, (kw - c1) * sizeof(T));
            }
        } else if (P) {
            memset(P + t * kw, 0, kw * sizeof(T));
        }
        if (w->part) {
            w->part->m[gr] = m;
            w->part->l[gr] = sum;
            continue;
        }
        if (out->empty)
            out->empty[gr] = !any;
        if (!any) {
            out->n_empty++;
            if (r->empty_rows == ATTN_EMPTY_ERROR)
                return CORE_EEMPTYROW;
        }
    }
    return CORE_OK;
}

/* Keys [k0, k0 + kw) of one kv head's K [..][dk] and V [..][dv] as
 * blocks of T rows: *Kb, *Vb point at key k0, in place (pages side by
 * side in memory, or one block), or copied into C [kw][dk] and C + kw·dk
 * (pages apart), or (a view of 2-byte rows in one block, x->k_elem /
 * v_elem) widened into W [kw][dk] and W + kw·dk. */
static void FN(kv_block)(const struct attn_run *x, const struct attn_rows *K,
                         const struct attn_rows *V, size_t k0, size_t kw, T *W, T *C,
                         const T **Kb, const T **Vb)
{
    size_t dk = K->d;
    (void)x, (void)W;
#ifdef ATTN_WIDEN
    if (x->k_elem)
        ATTN_WIDEN(x->k_elem, K->base, k0 * dk, kw * dk, W);
    if (x->v_elem)
        ATTN_WIDEN(x->v_elem, V->base, k0 * V->d, kw * V->d, W + kw * dk);
#endif
    *Kb = x->k_elem ? W : FN(block)(K, k0, k0 + kw, C);
    *Vb = x->v_elem ? W + kw * dk : FN(block)(V, k0, k0 + kw, C ? C + kw * dk : NULL);
}

/* Rows [row0, row0+nb) of one kv head, output only: the tile's keys
 * (sinks [s0, s1) and main [m0, m1), see attn_run_tile_keys) in blocks of
 * ATTN_FLASH_KEYS aligned to multiples of it, with an online softmax (per
 * row a running max m and sum l; when m grows, l and the output row are
 * rescaled by exp(m_old - m_new)); blocks that hold none of the tile's keys
 * are skipped, so a window or segment costs its keys, not L. The scratch S
 * is [nb][ATTN_FLASH_KEYS] whatever L is, and each block's products stay
 * in cache. qb [nb][d_k] prepared queries -> m, l [nb] and O [nb][d_v] =
 * Σ exp(s - m) v, unnormalised. W, C: kv_block's scratch for 2-byte rows
 * and for a block of pages apart ([ATTN_FLASH_KEYS][d_k + d_v]). */
static enum core_status FN(flash_keys)(const struct attn_run *x, size_t row0, size_t nb,
                                       const size_t *tk, const T *qb, const struct attn_rows *K,
                                       const struct attn_rows *V, T *S, T *W, T *C, T *O, T *m,
                                       double *l)
{
    const struct attn_shape *s = &x->r.shape;
    size_t n = s->n, dk = s->d_k, dv = s->d_v, KB = ATTN_FLASH_KEYS;
    size_t start, end;
    attn_run_tile_span(tk, &start, &end);
    const struct attn_score_sink *sink = x->r.score_sink;
    for (size_t t = 0; t < nb; t++) {
        m[t] = -INFINITY;
        l[t] = 0;
    }
    memset(O, 0, nb * dv * sizeof(T));
    for (size_t k0 = start / KB * KB; k0 < end; k0 += KB) {
        size_t kw = end - k0 < KB ? end - k0 : KB;
        if (!(k0 < tk[1] && k0 + kw > tk[0]) && !(k0 < tk[3] && k0 + kw > tk[2]))
            continue;                       /* none of the tile's keys here */
        attn_stop_yield(x->stop);
        const T *Kb, *Vb;
        FN(kv_block)(x, K, V, k0, kw, W, C, &Kb, &Vb);
        ATTN_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)kw, (int)dk,
                  (T)x->r.params.scale, qb, (int)dk, Kb, (int)dk, 0, S, (int)kw);
        for (size_t t = 0; t < nb; t++) {
            size_t gr = row0 + t;
            T *row = S + t * kw, mb;
            enum core_status st = FN(finish_scores)(x, gr / n, gr % n, k0, kw, row, &mb);
            if (st != CORE_OK)
                return st;
            if (sink)
                sink->feed(sink->ctx, gr, 1, k0, kw, row, 0, 1, NULL, NULL);
            if (mb == -INFINITY) {          /* no allowed key in this block */
                memset(row, 0, kw * sizeof(T));
                continue;
            }
            if (mb > m[t]) {
                if (m[t] != -INFINITY) {
                    double a = exp((double)m[t] - (double)mb);
                    l[t] *= a;
                    FN(scale_row)(O + t * dv, dv, (T)a);
                }
                m[t] = mb;
            }
            l[t] += FN(vexp_shift)(row, row, kw, m[t]);
        }
        ATTN_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, (int)dv, (int)kw, 1,
                  S, (int)kw, Vb, (int)dv, 1, O, (int)dv);
    }
    return CORE_OK;
}

/* flash_keys, or the fused kernel (ATTN_FLASH_FUSED: float32, AVX-512 or
 * AVX2) when it applies, then the rows normalised: O [nb][d_v] gets the
 * output rows. The extra term of softmax1 / sink (the row's head's sink
 * logit) joins here with the shift max(m, 0) / max(m, sink), in double, so
 * the denominator is >= 1 and nothing overflows. C: the scratch of a block
 * or superblock of pages apart (NULL for rows in one block). */
static enum core_status FN(flash_rows)(const struct attn_run *x, size_t row0, size_t nb,
                                       const T *qb, const struct attn_rows *K,
                                       const struct attn_rows *V, T *S, struct attn_ws *ws,
                                       T *C, T *O, struct attn_result *out)
{
    const struct attn_request *r = &x->r;
    size_t dv = r->shape.d_v, n = r->shape.n, tk[4];
    T m[ATTN_FLASH_ROWS];
    double l[ATTN_FLASH_ROWS];
    enum core_status st = CORE_OK;      /* set by the fused kernel or flash_keys */
    const struct attn_score_sink *ss = r->score_sink;
    bool fused = false;
    attn_run_tile_keys(x, row0, nb, &tk[0], &tk[1], &tk[2], &tk[3]);
#ifdef ATTN_FLASH_FUSED
    fused = ATTN_FLASH_FUSED(x, row0, nb, qb, K, V, S, ws, C, O, m, l, &st);
#endif
    if (!fused) {
        if (ss)                             /* the fused kernel may have fed some */
            ss->reset(ss->ctx, row0, nb);
        T *W = NULL;                        /* kv_block's, for a view of 2-byte rows */
        size_t kb = r->shape.L < ATTN_FLASH_KEYS ? r->shape.L : ATTN_FLASH_KEYS;
        if ((x->k_elem || x->v_elem) &&
            !(W = attn_ws_reserve(ws, WS_WIDE, kb * (r->shape.d_k + dv) * sizeof(T))))
            return CORE_ENOMEM;
        st = FN(flash_keys)(x, row0, nb, tk, qb, K, V, S, W, C, O, m, l);
    }
    if (st != CORE_OK)
        return st;
    for (size_t t = 0; t < nb; t++) {
        size_t gr = row0 + t;
        bool any = m[t] != -INFINITY;
        if (ss)
            ss->done(ss->ctx, gr, l[t], fused);
        if (out->empty)
            out->empty[gr] = !any;
        if (!any) {                         /* O's row stayed 0 */
            out->n_empty++;
            if (r->empty_rows == ATTN_EMPTY_ERROR)
                return CORE_EEMPTYROW;
            continue;
        }
        double mx = m[t], shift = mx, extra = 0, sink = attn_run_sink(x, gr / n);
        if (r->params.softmax == ATTN_SOFTMAX_ONE) {
            shift = mx > 0 ? mx : 0;
            extra = exp(0.0 - shift);
        } else if (r->params.softmax == ATTN_SOFTMAX_SINK) {
            shift = mx > sink ? mx : sink;
            extra = exp(sink - shift);
        }
        double f = exp(mx - shift);
        FN(scale_row)(O + t * dv, dv, (T)(f / (l[t] * f + extra)));
    }
    return FN(all_finite)(O, nb * dv) ? CORE_OK : CORE_ENONFINITE;
}

/* The columns [*c0, *c1) of window w that hold every allowed key of rows
 * [row0, row0+nb) (sinks and main keys together). */
static void FN(tile_cols)(const struct attn_run *x, const struct attn_win *w, size_t row0,
                          size_t nb, size_t *c0, size_t *c1)
{
    size_t tk[4];
    attn_run_tile_keys(x, row0, nb, &tk[0], &tk[1], &tk[2], &tk[3]);
    size_t a, e;
    attn_run_tile_span(tk, &a, &e);
    a = a <= w->k0 ? 0 : a - w->k0;
    e = e <= w->k0 ? 0 : e - w->k0;
    *c0 = a < w->kw ? a : w->kw;
    *c1 = e < w->kw ? e : w->kw;
    if (*c1 < *c0)
        *c1 = *c0;
}

/* See attn_forward_kv_rows / attn_forward_kv_keys in attn.h: global query
 * rows [rb, re) (row = head·n + i) against the keys of window w; arguments
 * already validated, scratch in qb [B][d_k] and pb [B][kw] (pb only when
 * weights are not requested), and for a paged view cb, the key-blocked
 * pass's block or superblock of pages that do not lie side by side in
 * memory (NULL otherwise). Pages are read in place: the plain loops follow
 * them, and a block that BLAS or the fused kernel reads in one piece is
 * taken in place when its pages lie side by side, else copied (the
 * key-blocked pass: that block alone, cb; gemm tiles: their rows, once per
 * head, into WS_PAGE / WS_PAGE_V). A view of 2-byte rows (x->k_elem,
 * v_elem; only the key-blocked pass reads them) is widened into ws's
 * WS_WIDE. When the weights are not kept, P holds unnormalised
 * exp(s - shift) and the output rows are scaled instead: d_v
 * multiplications per row, not L (a key-split pass leaves them unscaled). */
static enum core_status FN(forward_kv)(const struct attn_run *x, const struct attn_inputs *in,
                                       const struct attn_kv_view *kv,
                                       struct attn_result *out, size_t rb, size_t re,
                                       const struct attn_win *w, size_t B, T *qb, T *pb,
                                       T *cb, struct attn_ws *ws)
{
    const struct attn_request *r = &x->r;
    const struct attn_shape *s = &r->shape;
    size_t kw = w->kw, R = s->h / s->h_kv * s->n;
    T *sc = (r->outputs & ATTN_OUT_SCORES) ? out->scores : NULL;
    T *wt = (r->outputs & ATTN_OUT_WEIGHTS) ? out->weights : NULL;
    T *ot = (r->outputs & ATTN_OUT_OUTPUT) ? out->output : NULL;
    if (w->part)
        ot = w->part->o;
    /* output only, whole pass: key blocks with an online softmax */
    bool flash = attn_flash(r, w);
    if ((x->k_elem || x->v_elem) && (!flash || kv->page_rows || w->k0))
        return CORE_EINVAL;                 /* 2-byte rows: read by that pass only */
    T scale = (T)r->params.scale;
    T inv[ATTN_TILE_MAX];
    struct FN(held) hk = {NULL, WS_PAGE, 0, 0}, hv = {NULL, WS_PAGE_V, 0, 0};

    unsigned sh = kv->page_rows ? (unsigned)__builtin_ctzl(kv->page_rows) : 0;
    for (size_t g = rb / R; g < s->h_kv && g * R < re; g++) {
        struct attn_rows kr = {NULL, NULL, sh, w->k0, s->d_k, 0}, vr = kr;
        vr.d = s->d_v;
        if (kv->page_rows) {
            kr.pg = kv->k + g * kv->pages;
            vr.pg = kv->v + g * kv->pages;
            kr.np = vr.np = kv->pages;
        } else {
            kr.base = (const T *)kv->k[g] + w->k0 * s->d_k;
            vr.base = (const T *)kv->v[g] + w->k0 * s->d_v;
        }
        hk.a = hk.e = hv.a = hv.e = 0;          /* nothing of this head copied yet */
        size_t lo = rb > g * R ? rb : g * R, hi = re < (g + 1) * R ? re : (g + 1) * R;
        for (size_t row0 = lo; row0 < hi; row0 += B) {
            size_t nb = hi - row0 < B ? hi - row0 : B;
            T *P = wt ? wt + row0 * kw : ot ? pb : NULL;
            T *S = sc ? sc + row0 * kw : P;
            FN(prep_q)(x, in, row0, nb, qb);
            if (flash) {
                enum core_status st = FN(flash_rows)(x, row0, nb, qb, &kr, &vr, pb, ws, cb,
                                                     ot + row0 * s->d_v, out);
                if (st != CORE_OK)
                    return st;
                continue;
            }
            size_t c0, c1;
            FN(tile_cols)(x, w, row0, nb, &c0, &c1);
            bool gemm = nb > ATTN_LOOP_ROWS && c1 > c0;
            const T *Kb = gemm ? FN(held_rows)(&kr, &hk, ws, kw, c0, c1) : NULL;
            if (gemm && !Kb)
                return CORE_ENOMEM;
            FN(qk)(qb, nb, &kr, Kb, c0, c1 - c0, kw, s->d_k, scale, S + c0);
            enum core_status st =
                FN(finish_block)(x, w, row0, nb, c0, c1, S, P, wt != NULL, inv, out);
            if (st != CORE_OK)
                return st;
            if (ot) {
                T *O = ot + row0 * s->d_v;
                const T *Vb = gemm ? FN(held_rows)(&vr, &hv, ws, kw, c0, c1) : NULL;
                if (gemm && !Vb)
                    return CORE_ENOMEM;
                FN(pv)(P + c0, nb, &vr, Vb, c0, c1 - c0, kw, s->d_v, O);
                if (!wt && !w->part)
                    for (size_t t = 0; t < nb; t++)
                        FN(scale_row)(O + t * s->d_v, s->d_v, inv[t]);
                if (!FN(all_finite)(O, nb * s->d_v))
                    return CORE_ENONFINITE;
            }
        }
    }
    return CORE_OK;
}

/* parts[p]: o [rows][d_v], m, l [rows] of key windows that together cover
 * the keys -> out->output [rows][d_v]: rescale each window's sums to the
 * common shift (max m, or max(m, 0) / max(m, sink)), add the extra term
 * once, divide. Factors in double; the denominator is >= 1 (the window
 * holding the max contributes l >= 1, or the extra term is 1). */
static enum core_status FN(combine)(const struct attn_run *x, const struct attn_partial *parts,
                                    size_t np, struct attn_result *out)
{
    const struct attn_request *r = &x->r;
    const struct attn_params *p = &r->params;
    size_t rows = r->shape.h * r->shape.n, dv = r->shape.d_v;
    T *o = out->output;
    out->n_empty = 0;
    for (size_t gr = 0; gr < rows; gr++) {
        double M = -INFINITY, sink = attn_run_sink(x, gr / r->shape.n);
        for (size_t q = 0; q < np; q++)
            M = parts[q].m[gr] > M ? parts[q].m[gr] : M;
        bool any = M != -INFINITY;
        if (out->empty)
            out->empty[gr] = !any;
        T *orow = o + gr * dv;
        memset(orow, 0, dv * sizeof(T));
        if (!any) {
            out->n_empty++;
            if (r->empty_rows == ATTN_EMPTY_ERROR)
                return CORE_EEMPTYROW;
            continue;
        }
        double shift = M, den = 0;
        if (p->softmax == ATTN_SOFTMAX_ONE && shift < 0)
            shift = 0;
        else if (p->softmax == ATTN_SOFTMAX_SINK && shift < sink)
            shift = sink;
        if (p->softmax == ATTN_SOFTMAX_ONE)
            den = exp(0.0 - shift);
        else if (p->softmax == ATTN_SOFTMAX_SINK)
            den = exp(sink - shift);
        for (size_t q = 0; q < np; q++)
            if (parts[q].m[gr] != -INFINITY)
                den += parts[q].l[gr] * exp(parts[q].m[gr] - shift);
        for (size_t q = 0; q < np; q++) {
            if (parts[q].m[gr] == -INFINITY)
                continue;
            double f = exp(parts[q].m[gr] - shift) / den;
            const T *po = (const T *)parts[q].o + gr * dv;
            for (size_t c = 0; c < dv; c++)
                orow[c] += (T)((double)po[c] * f);
        }
        if (!FN(all_finite)(orow, dv))
            return CORE_ENONFINITE;
    }
    return CORE_OK;
}

#undef FN
