/*
 * core/verify_models.c — the checks of current models' options behind
 * /v1/verify (ids 20 to 25, after core/verify.c's nineteen): packed
 * segments, a window that spans every key, softcap, per-head sinks, llama3
 * with factor 1, partial rotary with no dims.
 *
 * Each check runs the core (verify_pass) on the request's head with one
 * option set through vrun.tweak, and compares it with what the option must
 * equal: other core passes on changed inputs (each segment alone, no
 * window, standard softmax and softmax1, plain RoPE, no RoPE) or plain
 * arithmetic done here (c·tanh(s/c) of the scores without softcap, the
 * scores' order). Nothing expected is hard-coded.
 */
#include "verify_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the options, as request tweaks ---------------------------------------- */

struct seg_arg {
    const int64_t *sq, *sk;
};

static void tweak_segments(struct attn_request *rq, const void *arg)
{
    const struct seg_arg *a = arg;
    rq->seg_q = a->sq;
    rq->seg_k = a->sk;
    rq->seg_batches = 1;
}

static void tweak_softcap(struct attn_request *rq, const void *arg)
{
    rq->params.softcap = *(const double *)arg;
}

static void tweak_head_sinks(struct attn_request *rq, const void *arg)
{
    rq->params.softmax = ATTN_SOFTMAX_SINK;
    rq->params.sink_logits = arg;
}

static void tweak_llama3_one(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->params.rope_scaling = (struct attn_rope_scaling){
        .type = ATTN_ROPE_SCALING_LLAMA3,
        .factor = 1,
        .low_freq_factor = 1,
        .high_freq_factor = 4,
        .original_max_position = 8192,
    };
}

static void tweak_unscaled(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->params.rope_scaling = (struct attn_rope_scaling){0};
}

static void tweak_dims_zero(struct attn_request *rq, const void *arg)
{
    (void)arg;
    rq->params.rope_dims = ATTN_ROPE_DIMS_ZERO;
    /* ntk's base' = base·factor^(r/(r-2)) has no value for r = 0 (the core
     * refuses it); no dims rotate, so no scaling changes anything */
    if (rq->params.rope_scaling.type == ATTN_ROPE_SCALING_NTK)
        rq->params.rope_scaling = (struct attn_rope_scaling){0};
}

/* The request's RoPE (base, pairs) on r, or the default when it has none
 * (none when d_k is odd: RoPE rotates pairs). */
static void with_rope(const struct vx *c, struct vrun *r)
{
    r->rope = c->dk % 2 == 0;
    if (c->in->rope) {
        r->rope_base = c->in->rope_base;
        r->rope_pairs = c->in->rope_pairs;
    }
}

static double max_abs(const double *x, size_t count)
{
    double m = 0;
    for (size_t i = 0; i < count; i++)
        m = fabs(x[i]) > m || isnan(x[i]) ? fabs(x[i]) : m;
    return m;
}

/* ---- check 20: segments ------------------------------------------------------ */

/* A row and its segment id; rows sorted by (id, row) make each segment one
 * run, its rows in their original order. */
struct seg_row {
    int64_t id;
    size_t row;
};

static int by_id_then_row(const void *a, const void *b)
{
    const struct seg_row *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

/* ids [count] as rows sorted by (id, row), owned by c; NULL with c->err. */
static struct seg_row *sort_rows(struct vx *c, const int64_t *ids, size_t count)
{
    struct seg_row *s = verify_bytes(c, count, sizeof *s);
    if (!s)
        return NULL;
    for (size_t i = 0; i < count; i++)
        s[i] = (struct seg_row){ids[i], i};
    qsort(s, count, sizeof *s, by_id_then_row);
    return s;
}

/* The end of the run of s [count] from `from` whose ids equal id. */
static size_t run_end(const struct seg_row *s, size_t count, size_t from, int64_t id)
{
    while (from < count && s[from].id == id)
        from++;
    return from;
}

/* The request's segments, or the first n/2 queries and L/2 keys as
 * segment 0 and the rest as segment 1. */
static enum core_status segment_ids(struct vx *c, const int64_t **sq, const int64_t **sk)
{
    if (c->in->seg_q && c->in->seg_k) {
        *sq = c->in->seg_q;
        *sk = c->in->seg_k;
        return CORE_OK;
    }
    int64_t *q = verify_bytes(c, c->n, sizeof(int64_t));
    int64_t *k = verify_bytes(c, c->L, sizeof(int64_t));
    NEED(q && k);
    for (size_t i = 0; i < c->n; i++)
        q[i] = i >= c->n / 2;
    for (size_t j = 0; j < c->L; j++)
        k[j] = j >= c->L / 2;
    *sq = q;
    *sk = k;
    return CORE_OK;
}

/* The request of segment id alone: its queries and keys gathered (with
 * their explicit positions, when the request has them) -> out. */
static enum core_status segment_alone(struct vx *c, const struct vrun *base, const size_t *qi,
                                      size_t nq, const size_t *kj, size_t nk,
                                      struct vpass *out)
{
    size_t dk = c->dk, dv = c->dv;
    double *q, *k, *v;
    NEED(q = verify_dbl(c, nq, dk));
    NEED(k = verify_dbl(c, nk, dk));
    NEED(v = verify_dbl(c, nk, dv));
    int64_t *pq = NULL, *pk = NULL;
    if (c->in->pos_q)
        NEED(pq = verify_bytes(c, nq, sizeof(int64_t)));
    if (c->in->pos_k)
        NEED(pk = verify_bytes(c, nk, sizeof(int64_t)));
    for (size_t i = 0; i < nq; i++) {
        memcpy(q + i * dk, c->q + qi[i] * dk, dk * sizeof(double));
        if (pq)
            pq[i] = c->in->pos_q[qi[i]];
    }
    for (size_t j = 0; j < nk; j++) {
        memcpy(k + j * dk, c->k + kj[j] * dk, dk * sizeof(double));
        memcpy(v + j * dv, c->v + kj[j] * dv, dv * sizeof(double));
        if (pk)
            pk[j] = c->in->pos_k[kj[j]];
    }
    struct vrun rs = *base;
    rs.q = q;
    rs.n = nq;
    rs.k = k;
    rs.v = v;
    rs.L = nk;
    rs.pq = pq;
    rs.pk = pk;
    return verify_pass(c, &rs, out);
}

enum core_status verify_check_segments(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    bool given = c->in->seg_q && c->in->seg_k;
    if (!given && L < 2)
        return verify_ck_na(ck, "Two segments need at least two keys.");
    const int64_t *sq = NULL, *sk = NULL;
    TRY(segment_ids(c, &sq, &sk));
    struct seg_arg sa = {sq, sk};
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    r.positions = true;
    with_rope(c, &r);
    struct vpass all;
    struct vrun ra = r;
    ra.tweak = tweak_segments;
    ra.tweak_arg = &sa;
    TRY(verify_pass(c, &ra, &all));
    size_t *qi, *kj, segs = 0;
    struct seg_row *qs, *ks;
    double *alone;                  /* each row from its segment's own request */
    NEED(qi = verify_bytes(c, n, sizeof(size_t)));
    NEED(kj = verify_bytes(c, L, sizeof(size_t)));
    NEED(alone = verify_dbl(c, n, dv));
    NEED(qs = sort_rows(c, sq, n));
    NEED(ks = sort_rows(c, sk, L));
    double worst = 0;
    /* one walk over the sorted rows: O((n + L) log(n + L)) besides the passes
     * and the n x L weights each segment's rows are compared on */
    for (size_t a = 0, b = 0, a_end; a < n; a = a_end) {
        int64_t id = qs[a].id;
        a_end = run_end(qs, n, a, id);
        while (b < L && ks[b].id < id)
            b++;
        size_t b_end = run_end(ks, L, b, id), nq = a_end - a, nk = b_end - b;
        for (size_t t = 0; t < nq; t++)
            qi[t] = qs[a + t].row;
        for (size_t u = 0; u < nk; u++)
            kj[u] = ks[b + u].row;
        b = b_end;
        double d = 0;
        if (nk == 0) {              /* no key: the packed rows are empty */
            for (size_t t = 0; t < nq; t++)
                d = verify_max2(d, verify_max2(max_abs(all.w + qi[t] * L, L),
                                               max_abs(all.o + qi[t] * dv, dv)));
        } else {
            struct vpass part;
            TRY(segment_alone(c, &r, qi, nq, kj, nk, &part));
            segs++;
            for (size_t t = 0; t < nq; t++) {
                const double *w = all.w + qi[t] * L;
                double inside = 0;
                for (size_t u = 0; u < nk; u++)
                    d = verify_max2(d, fabs(w[kj[u]] - part.w[t * nk + u]));
                for (size_t j = 0; j < L; j++)
                    inside += sk[j] == id ? 0 : fabs(w[j]);     /* other segments: 0 */
                d = verify_max2(d, inside);
                d = verify_max2(d, verify_maxdiff(all.o + qi[t] * dv, part.o + t * dv, dv));
                memcpy(alone + qi[t] * dv, part.o + t * dv, dv * sizeof(double));
            }
        }
        worst = verify_max2(worst, d);
    }
    ck->max_abs_diff = worst;
    verify_ck_note(ck, "%s; %zu segment%s with keys, each run alone; causal (bottom-right "
                   "within each segment%s), both biases, the request's softmax%s.",
                   given ? "The request's segments" : "The first n/2 queries and L/2 keys "
                   "are segment 0, the rest segment 1", segs, segs == 1 ? "" : "s",
                   c->in->pos_q || c->in->pos_k ? ", at the request's positions" : "",
                   !r.rope ? "" : c->in->rope ? " and RoPE" : " and the default RoPE");
    TRY(verify_ck_mat(ck, "weights_packed", n, L, all.w));
    TRY(verify_ck_mat(ck, "output_packed", n, dv, all.o));
    return verify_ck_mat(ck, "output_per_segment", n, dv, alone);
}

/* ---- check 21: a window over every key ---------------------------------------- */

static void tweak_window(struct attn_request *rq, const void *arg)
{
    rq->window = *(const struct attn_window *)arg;
}

enum core_status verify_check_window_all(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    const struct attn_window *given = &c->in->window;
    /* a left side past every distance P_q - P_k (positions are >= 0) */
    int64_t span = (int64_t)L;
    for (size_t i = 0; c->in->pos_q && i < n; i++)
        span = c->in->pos_q[i] > span ? c->in->pos_q[i] : span;
    struct attn_window wide = {true, span, given->on ? given->right : -1,
                               given->on ? given->sinks : 0};
    struct attn_window open = wide;
    open.left = -1;
    open.on = open.right >= 0 || open.sinks > 0;
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    /* causal, unless the request's window bounds the right side itself */
    r.causal = open.right >= 0 ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_BOTTOM_RIGHT;
    r.positions = true;
    with_rope(c, &r);
    struct vpass plain, win;
    r.tweak = tweak_window;
    r.tweak_arg = &open;
    TRY(verify_pass(c, &r, &plain));
    r.tweak_arg = &wide;
    TRY(verify_pass(c, &r, &win));
    ck->max_abs_diff = fmax(verify_maxdiff(plain.w, win.w, n * L),
                            verify_maxdiff(plain.o, win.o, n * dv));
    verify_ck_note(ck, "window {left: %lld%s}%s%s, against the same without its left side.",
                   (long long)span, open.on ? ", the request's right and sinks" : "",
                   open.right >= 0 ? "" : " with causal",
                   c->in->pos_q || c->in->pos_k ? " at the request's positions" : "");
    TRY(verify_ck_mat(ck, "weights_window", n, L, win.w));
    TRY(verify_ck_mat(ck, "weights_no_window", n, L, plain.w));
    if (!given->on)
        return CORE_OK;
    struct vpass req;                   /* what the request's own window gives */
    r.tweak_arg = given;
    TRY(verify_pass(c, &r, &req));
    return verify_ck_mat(ck, "weights_request_window", n, L, req.w);
}

/* ---- check 22: softcap ----------------------------------------------------------- */

struct row_order {
    const double *s;
};

static int by_score(const void *a, const void *b, void *arg)
{
    const double *s = ((const struct row_order *)arg)->s;
    double x = s[*(const size_t *)a], y = s[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

enum core_status verify_check_softcap(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L;
    const double *s0 = c->p[0][C_NONE].s;   /* the scores without softcap */
    double cap = c->in->softcap;
    if (!(cap > 0)) {                       /* half the largest score: it bends */
        cap = max_abs(s0, n * L) / 2;
        if (!(cap > 0))
            cap = 1;
    }
    if (c->dt == ATTN_F32)
        cap = (float)cap;
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_NONE);
    r.tweak = tweak_softcap;
    r.tweak_arg = &cap;
    struct vpass p;
    TRY(verify_pass(c, &r, &p));
    double *expect, *order;
    size_t *idx;
    NEED(expect = verify_dbl(c, n * L, 1));
    NEED(order = verify_dbl(c, n, 1));
    NEED(idx = verify_bytes(c, L, sizeof(size_t)));
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double *sr = s0 + i * L, *cr = p.s + i * L;
        for (size_t j = 0; j < L; j++) {
            expect[i * L + j] = cap * tanh(sr[j] / cap);
            worst = fmax(worst, fabs(cr[j]) - cap);     /* bounded by c */
        }
        /* monotone: in the order of the uncapped scores, capped ones never fall */
        struct row_order ro = {sr};
        for (size_t j = 0; j < L; j++)
            idx[j] = j;
        qsort_r(idx, L, sizeof *idx, by_score, &ro);
        double fall = 0;
        for (size_t j = 1; j < L; j++)
            fall = fmax(fall, cr[idx[j - 1]] - cr[idx[j]]);
        order[i] = fall;
        worst = fmax(worst, fall);
    }
    double d = verify_maxdiff(p.s, expect, n * L);
    ck->max_abs_diff = isnan(d) ? d : fmax(worst, d);
    verify_ck_note(ck, "softcap c = %g%s; max_abs_diff is the largest of: |s| - c, "
                   "a capped score below one whose uncapped score is smaller, and the "
                   "distance to c*tanh(s/c) computed here from the uncapped scores.",
                   cap, c->in->softcap > 0 ? " (the request's)"
                                           : " (half the largest |score|)");
    TRY(verify_ck_num(ck, "softcap", cap));
    TRY(verify_ck_mat(ck, "scores_uncapped", n, L, s0));
    TRY(verify_ck_mat(ck, "scores_capped", n, L, p.s));
    TRY(verify_ck_mat(ck, "scores_expected", n, L, expect));
    return verify_ck_vec(ck, "largest_fall_per_row", n, order);
}

/* ---- check 23: per-head sinks ------------------------------------------------------ */

enum core_status verify_check_head_sinks(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dk = c->dk, dv = c->dv, m = c->in->sinks ? c->in->n_sinks : 0;
    size_t h = 2 + m;               /* -inf, 0, then the request's logits */
    double *qh, *sinks;
    NEED(qh = verify_dbl(c, h * n, dk));
    NEED(sinks = verify_dbl(c, h, 1));
    for (size_t a = 0; a < h; a++)
        memcpy(qh + a * n * dk, c->q, n * dk * sizeof(double));
    sinks[0] = -INFINITY;
    sinks[1] = 0;
    for (size_t a = 0; a < m; a++)
        sinks[2 + a] = c->in->sinks[a];
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_SINK, C_NONE);
    r.q = qh;
    r.h = h;
    r.tweak = tweak_head_sinks;
    r.tweak_arg = sinks;
    struct vpass p;
    TRY(verify_pass(c, &r, &p));
    const struct vpass *std = &c->p[0][C_NONE], *one = &c->p[1][C_NONE];
    double d = fmax(verify_maxdiff(p.w, std->w, n * L), verify_maxdiff(p.o, std->o, n * dv));
    d = fmax(d, fmax(verify_maxdiff(p.w + n * L, one->w, n * L),
                     verify_maxdiff(p.o + n * dv, one->o, n * dv)));
    for (size_t a = 0; a < m; a++) {    /* each against one head with that logit */
        struct vrun ra = verify_base_run(c, ATTN_SOFTMAX_SINK, C_NONE);
        struct vpass pa;
        ra.sink = sinks[2 + a];
        TRY(verify_pass(c, &ra, &pa));
        d = fmax(d, fmax(verify_maxdiff(p.w + (2 + a) * n * L, pa.w, n * L),
                         verify_maxdiff(p.o + (2 + a) * n * dv, pa.o, n * dv)));
    }
    ck->max_abs_diff = d;
    if (m)
        verify_ck_note(ck, "%zu heads with the same q: head 0 with sink -inf against standard "
                       "softmax, head 1 with sink 0 against softmax1, heads 2.. with the "
                       "request's %zu sink logits, each against one head with that "
                       "sink_logit (no biases).", h, m);
    else
        verify_ck_note(ck, "Two heads with the same q: head 0 with sink -inf against "
                       "standard softmax, head 1 with sink 0 against softmax1 (no biases).");
    TRY(verify_ck_mat(ck, "weights_sink_minus_inf", n, L, p.w));
    TRY(verify_ck_mat(ck, "weights_standard", n, L, std->w));
    TRY(verify_ck_mat(ck, "weights_sink_zero", n, L, p.w + n * L));
    TRY(verify_ck_mat(ck, "weights_softmax1", n, L, one->w));
    if (m)
        TRY(verify_ck_mat(ck, "weights_request_sinks", m * n, L, p.w + 2 * n * L));
    return CORE_OK;
}

/* ---- checks 24 and 25: RoPE scalings and partial rotary ------------------------------ */

/* The pass with RoPE (tweaked) against the pass `other` (RoPE plain or off). */
static enum core_status rope_compare(struct vx *c, struct verify_check *ck,
                                     void (*tweak)(struct attn_request *, const void *),
                                     bool other_rope, const char *name_a,
                                     const char *name_b)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    with_rope(c, &r);
    r.rope = true;                  /* llama3 is not applicable with odd d_k */
    r.positions = true;
    struct vpass a, b;
    struct vrun rb = r;
    rb.rope = other_rope;
    rb.tweak = tweak_unscaled;      /* plain: the request's dims, no scaling */
    TRY(verify_pass(c, &rb, &b));
    r.tweak = tweak;
    TRY(verify_pass(c, &r, &a));
    ck->max_abs_diff = fmax(fmax(verify_maxdiff(a.s, b.s, n * L), verify_maxdiff(a.w, b.w, n * L)),
                            verify_maxdiff(a.o, b.o, n * dv));
    TRY(verify_ck_mat(ck, name_a, n, L, a.w));
    return verify_ck_mat(ck, name_b, n, L, b.w);
}

enum core_status verify_check_llama3_one(struct vx *c, struct verify_check *ck)
{
    if (c->dk % 2)
        return verify_ck_na(ck, "RoPE rotates pairs of dimensions, and d_k is odd.");
    verify_ck_note(ck, "llama3 {factor 1, low_freq_factor 1, high_freq_factor 4, "
                   "original_max_position 8192} against plain RoPE (base %g%s), scores, "
                   "weights and outputs%s.", c->in->rope ? c->in->rope_base : 10000.0,
                   c->in->rope && c->in->rope_dims ? ", the request's dims" : "",
                   c->in->pos_q || c->in->pos_k ? ", at the request's positions" : "");
    return rope_compare(c, ck, tweak_llama3_one, true, "weights_llama3", "weights_plain_rope");
}

enum core_status verify_check_dims_zero(struct vx *c, struct verify_check *ck)
{
    verify_ck_note(ck, "RoPE with dims 0 against no RoPE, scores, weights and outputs.");
    return rope_compare(c, ck, tweak_dims_zero, false, "weights_dims_0", "weights_no_rope");
}
