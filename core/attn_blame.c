/*
 * core/attn_blame.c — the input a stateless float32/float64 pass that
 * stopped on a value that is not finite overflowed on (see attn_blame.h).
 * Error path only: it prepares q, k and v again as the pass did
 * (attn_prepare_q, attn_prepare_view), then looks at the prepared rows,
 * the scores of the allowed keys (formed past the dtype's range, so a
 * product that overflows the dtype is seen as such: blame_dot) and the v
 * rows, in that order.
 */
#include "attn_blame.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "attn_blame_impl.h"

/* What one scan reads: the flattened pass and its prepared rows. */
struct blame_scan {
    const struct attn_request *r;
    struct attn_run x;
    const void *qb;                 /* [B·h][n][d_k] prepared */
    void **kp, **vp;                /* [B·h_kv] prepared rows */
    bool f32;
    double lim;                     /* a magnitude taken as past the dtype's range */
    size_t macs;                    /* multiply-adds left */
    const bool *want;               /* [h] query heads to scan */
};

static double elem(const void *p, bool f32, size_t i)
{
    return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* max |x| of row [d] (+inf when one is not finite) */
static double row_max(const void *p, bool f32, size_t at, size_t d)
{
    double m = 0;
    for (size_t c = 0; c < d; c++) {
        double a = fabs(elem(p, f32, at + c));
        if (!(a <= DBL_MAX))
            return INFINITY;
        m = a > m ? a : m;
    }
    return m;
}

static void set(struct attn_blame *o, enum attn_blame_input in, enum attn_blame_stage st,
                size_t b, size_t head, size_t row)
{
    o->input = in;
    o->stage = st;
    o->b = b;
    o->head = head;
    o->row = row;
}

/* A prepared q, k or v row that is not finite (bias or RoPE overflowed). */
static bool blame_prepared(const struct blame_scan *s, struct attn_blame *o)
{
    const struct attn_shape *sh = &s->r->shape;
    size_t h = s->x.h, hk = s->x.h_kv, B = s->x.B ? s->x.B : 1;
    for (size_t hh = 0; hh < B * h; hh++)
        for (size_t i = 0; s->want[hh % h] && i < sh->n; i++)
            if (row_max(s->qb, s->f32, (hh * sh->n + i) * sh->d_k, sh->d_k) == INFINITY) {
                set(o, ATTN_BLAME_Q, ATTN_BLAME_PREPARED, hh / h, hh % h, i);
                return true;
            }
    for (int kv = 0; kv < 2; kv++) {
        size_t d = kv ? sh->d_v : sh->d_k;
        for (size_t g = 0; g < B * hk; g++)
            for (size_t j = 0; j < sh->L; j++)
                if (row_max(kv ? s->vp[g] : s->kp[g], s->f32, j * d, d) == INFINITY) {
                    set(o, kv ? ATTN_BLAME_V : ATTN_BLAME_K, ATTN_BLAME_PREPARED, g / hk,
                        g % hk, j);
                    return true;
                }
    }
    return false;
}

/* Key j of query row i of flattened head hh is allowed (causal, window,
 * segments, mask, a bias that is not -inf). */
static bool allowed(const struct blame_scan *s, size_t hh, size_t i, size_t j)
{
    const struct attn_request *r = s->r;
    size_t n = r->shape.n, L = r->shape.L;
    if (r->mask) {
        size_t mh = attn_run_bcast_head(&s->x, r->mask_heads, hh);
        if (!r->mask[(mh * n + i) * L + j])
            return false;
    }
    if (r->attn_bias) {
        size_t bh = attn_run_bcast_head(&s->x, r->attn_bias_heads, hh);
        if (elem(r->attn_bias, s->f32, (bh * n + i) * L + j) == -INFINITY)
            return false;
    }
    return attn_run_allowed(&s->x, hh, i, j);
}

/* The attn_bias entry of (hh, i, j), 0 without one. */
static double bias_at(const struct blame_scan *s, size_t hh, size_t i, size_t j)
{
    const struct attn_request *r = s->r;
    size_t n = r->shape.n;
    if (!r->attn_bias)
        return 0;
    size_t bh = attn_run_bcast_head(&s->x, r->attn_bias_heads, hh);
    return elem(r->attn_bias, s->f32, (bh * n + i) * r->shape.L + j);
}

/* max |finite attn_bias entry| (0 without one) */
static double bias_max(const struct blame_scan *s)
{
    const struct attn_request *r = s->r;
    size_t cnt = r->attn_bias ? r->attn_bias_heads * r->shape.n * r->shape.L : 0;
    double m = 0;
    for (size_t t = 0; t < cnt; t++) {
        double a = fabs(elem(r->attn_bias, s->f32, t));
        m = a <= DBL_MAX && a > m ? a : m;
    }
    return m;
}

/* e >= 0 such that m·2^-e is below 2 (0 for m below 1 or not finite). */
static int exponent_of(double m)
{
    return m >= 1 && m <= DBL_MAX ? ilogb(m) : 0;
}

/*
 * q·k of one query row and one key row [d] whose max |x| are qm and km, as
 * a value past the dtype's range when it is. A float32 product is exact in
 * double and d of them stay far below DBL_MAX; float64 rows are first
 * scaled by powers of two (exact) so that no product overflows, and the
 * sum is scaled back in long double. Summing in long double alone would do on x86-64 (the x87's
 * 80 bits), but arm64's long double is IEEE quad done in software: over
 * ATTN_BLAME_MACS multiply-adds that took 47.7 s under qemu where x86-64
 * took 0.85.
 */
static long double blame_dot(const void *q, const void *k, bool f32, size_t d, double qm,
                             double km)
{
    double sum = 0;
    if (f32) {
        const float *a = q, *b = k;
        for (size_t c = 0; c < d; c++)
            sum += (double)a[c] * (double)b[c];
        return sum;
    }
    const double *a = q, *b = k;
    int ea = exponent_of(qm), eb = exponent_of(km);
    double sa = ldexp(1, -ea), sb = ldexp(1, -eb);
    for (size_t c = 0; c < d; c++)
        sum += (a[c] * sa) * (b[c] * sb);
    return ldexpl(sum, ea + eb);
}

/* Score of (hh, i) with key j of kv head g (flattened), whose rows' max |x|
 * are qm and km -> 1 when it is past the range (*o set), 0 when not, -1
 * when the budget ran out. */
static int blame_score(struct blame_scan *s, size_t hh, size_t i, size_t g, size_t j,
                       double qm, double km, struct attn_blame *o)
{
    const struct attn_request *r = s->r;
    size_t dk = r->shape.d_k, h = s->x.h;
    if (s->macs < dk)
        return -1;
    s->macs -= dk;
    size_t es = s->f32 ? sizeof(float) : sizeof(double);
    long double dot = blame_dot((const char *)s->qb + (hh * r->shape.n + i) * dk * es,
                                (const char *)s->kp[g] + j * dk * es, s->f32, dk, qm, km);
    long double sc = (long double)r->params.scale * dot;
    o->key = j;
    o->value = sc;
    if (!(fabsl(sc) < (long double)s->lim)) {
        set(o, ATTN_BLAME_Q, ATTN_BLAME_SCORE, hh / h, hh % h, i);
        return 1;
    }
    if (!(fabsl(dot) < (long double)s->lim)) {  /* the pass forms q·k before the scale */
        o->value = dot;
        set(o, ATTN_BLAME_Q, ATTN_BLAME_QK, hh / h, hh % h, i);
        return 1;
    }
    double cap = r->params.softcap, bias = bias_at(s, hh, i, j);
    long double capped = cap != 0 ? (long double)(cap * tanh((double)sc / cap)) : sc;
    long double ali = 0;
    if (r->params.alibi) {
        double slope = r->params.alibi_slopes ? r->params.alibi_slopes[hh % h]
                                              : attn_alibi_slope(hh % h, h);
        int64_t pq = attn_run_qpos(&s->x, hh, i), pk = attn_run_kpos(&s->x, hh / h, j);
        ali = -(long double)slope * fabsl((long double)pq - (long double)pk);
    }
    long double v = capped + bias + ali;
    if (fabsl(v) < (long double)s->lim)
        return 0;
    o->value = v;
    o->alibi = ali;
    /* an added term is to blame when it is at least half the score it is
     * added to (the larger of the two when both are) */
    enum attn_blame_input in = ATTN_BLAME_Q;
    long double half = fabsl(capped) / 2;
    if (fabsl(ali) >= half && fabsl(ali) >= (long double)fabs(bias))
        in = ATTN_BLAME_ALIBI;
    else if ((long double)fabs(bias) >= half)
        in = ATTN_BLAME_ATTN_BIAS;
    set(o, in, ATTN_BLAME_SCORE, hh / h, hh % h, i);
    return 1;
}

/* The first allowed score (or q·k before a scale below 1) past the range;
 * rows and keys whose bound max(scale, 1)·d_k·max|q_i|·max|k_j| +
 * max|attn_bias| stays below it are skipped. -1 when the budget ran out. */
static int blame_scores(struct blame_scan *s, struct attn_blame *o)
{
    const struct attn_shape *sh = &s->r->shape;
    size_t h = s->x.h, hk = s->x.h_kv, B = s->x.B ? s->x.B : 1, L = sh->L;
    double sc = s->r->params.scale > 1 ? s->r->params.scale : 1;
    double f = sc * (double)sh->d_k, bm = bias_max(s);
    double *km = malloc(L * sizeof *km);
    if (!km)
        return -1;
    int found = 0;
    for (size_t hh = 0; hh < B * h && !found; hh++) {
        if (!s->want[hh % h])
            continue;
        size_t g = hh / h * hk + hh % h * hk / h, dk = sh->d_k;
        double kmax = 0;
        for (size_t j = 0; j < L; j++) {
            km[j] = row_max(s->kp[g], s->f32, j * dk, dk);
            kmax = km[j] > kmax ? km[j] : kmax;
        }
        for (size_t i = 0; i < sh->n && !found; i++) {
            double qm = row_max(s->qb, s->f32, (hh * sh->n + i) * dk, dk);
            if (!s->r->params.alibi && f * qm * kmax + bm < s->lim)
                continue;
            for (size_t j = 0; j < L && !found; j++)
                if ((s->r->params.alibi || f * qm * km[j] + bm >= s->lim) &&
                    allowed(s, hh, i, j))
                    found = blame_score(s, hh, i, g, j, qm, km[j], o);
        }
    }
    free(km);
    return found;
}

/* The v row with the largest |value| of the kv heads the scanned query
 * heads read, when L times it can reach the range. */
static bool blame_output(const struct blame_scan *s, struct attn_blame *o)
{
    const struct attn_shape *sh = &s->r->shape;
    size_t h = s->x.h, hk = s->x.h_kv, B = s->x.B ? s->x.B : 1;
    double best = -1;
    for (size_t hh = 0; hh < B * h; hh++) {
        size_t g = hh / h * hk + hh % h * hk / h;
        for (size_t j = 0; s->want[hh % h] && j < sh->L; j++) {
            double m = row_max(s->vp[g], s->f32, j * sh->d_v, sh->d_v);
            if (m > best) {
                best = m;
                set(o, ATTN_BLAME_V, ATTN_BLAME_OUTPUT, g / hk, g % hk, j);
            }
        }
    }
    o->value = best;
    if (best * (double)sh->L >= s->lim)
        return true;
    o->input = ATTN_BLAME_NONE;
    return false;
}

/* Prepared rows, then scores past the range itself, then (as the pass's
 * sums in another order, or its base-2 exponent, may overflow where the
 * exact value does not) past a quarter of it, then the v rows. */
static void scan(struct blame_scan *s, struct attn_blame *o)
{
    if (blame_prepared(s, o))
        return;
    int st = blame_scores(s, o);
    s->lim /= 4;
    if (st == 0)
        st = blame_scores(s, o);
    if (st == 0)
        blame_output(s, o);
    else if (st < 0)
        o->input = ATTN_BLAME_NONE;
}

enum core_status attn_blame_run_open(struct attn_blame_run *b, const struct attn_request *r,
                                     const size_t *heads, size_t nh)
{
    size_t bytes, h = r->shape.h;
    b->scratch = NULL;
    b->want = NULL;
    if (!attn_run_bytes(r, &bytes))
        return CORE_ELIMIT;
    b->scratch = bytes ? aligned_alloc(16, (bytes + 15) & ~(size_t)15) : NULL;
    b->want = calloc(h ? h : 1, sizeof *b->want);
    if ((bytes && !b->scratch) || !b->want) {
        attn_blame_run_close(b);
        return CORE_ENOMEM;
    }
    for (size_t a = 0; a < (heads ? nh : h); a++)
        if (!heads || heads[a] < h)
            b->want[heads ? heads[a] : a] = true;
    attn_run_init(&b->x, r, b->scratch);
    return CORE_OK;
}

void attn_blame_run_close(struct attn_blame_run *b)
{
    free(b->want);
    free(b->scratch);
    b->want = NULL;
    b->scratch = NULL;
}

/* The scan of r over prepared q (qb) and k, v rows (kp, vp [B·h_kv]). */
static enum core_status blame_prepared_rows(const struct attn_request *r, const void *qb,
                                            void **kp, void **vp, const size_t *heads,
                                            size_t nh, struct attn_blame *out)
{
    struct attn_blame_run run;
    enum core_status st = attn_blame_run_open(&run, r, heads, nh);
    if (st != CORE_OK)
        return st;
    struct blame_scan s = {.r = r, .f32 = r->params.dtype == ATTN_F32, .x = run.x,
                           .macs = ATTN_BLAME_MACS, .qb = qb, .kp = kp, .vp = vp,
                           .want = run.want};
    s.lim = s.f32 ? FLT_MAX : DBL_MAX;
    scan(&s, out);
    attn_blame_run_close(&run);
    return CORE_OK;
}

/* Prepared q of r [B·h][n][d_k] (malloc'd) -> *qb. */
static enum core_status prepare_q(const struct attn_request *r, const struct attn_inputs *in,
                                  void **qb)
{
    const struct attn_shape *sh = &r->shape;
    size_t B = sh->B > 1 ? sh->B : 1, qn;
    *qb = NULL;
    if (!core_mul3(B * sh->h, sh->n, sh->d_k, &qn) ||
        !core_mul(qn, attn_dtype_size(r->params.dtype), &qn))
        return CORE_ELIMIT;
    if (!(*qb = malloc(qn ? qn : 1)))
        return CORE_ENOMEM;
    return attn_prepare_q(r, in, 0, B * sh->h * sh->n, *qb);
}

enum core_status attn_blame(const struct attn_request *r, const struct attn_inputs *in,
                            const size_t *heads, size_t nh, struct attn_blame *out)
{
    const struct attn_shape *sh = &r->shape;
    size_t B = sh->B > 1 ? sh->B : 1;
    *out = (struct attn_blame){.input = ATTN_BLAME_NONE};
    void *qb, *store = NULL;
    void **kp = calloc(B * sh->h_kv, sizeof *kp), **vp = calloc(B * sh->h_kv, sizeof *vp);
    enum core_status st = prepare_q(r, in, &qb);
    if (st == CORE_OK && (!kp || !vp))
        st = CORE_ENOMEM;
    if (st == CORE_OK)
        st = attn_prepare_view(r, in, kp, vp, &store);
    if (st == CORE_OK)
        st = blame_prepared_rows(r, qb, kp, vp, heads, nh, out);
    free(store);
    free(vp);
    free(kp);
    free(qb);
    return st;
}

enum core_status attn_blame_kv(const struct attn_request *r, const struct attn_inputs *in,
                               void **kp, void **vp, const size_t *heads, size_t nh,
                               struct attn_blame *out)
{
    void *qb;
    *out = (struct attn_blame){.input = ATTN_BLAME_NONE};
    enum core_status st = prepare_q(r, in, &qb);
    if (st == CORE_OK)
        st = blame_prepared_rows(r, qb, kp, vp, heads, nh, out);
    free(qb);
    return st;
}
