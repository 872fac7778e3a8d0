/*
 * core/positions.c — positions, segments and windows of one pass
 * (core/attn_run.h).
 *
 * attn_run_init flattens the batch and resolves what the request leaves to
 * defaults: with segments, each query's and key's position counts within
 * its segment (P_k = earlier keys of the segment, P_q = L_s − n_s + earlier
 * queries, or the count alone with a top-left causal mask). Segments are
 * grouped by sorting (id, kind, index) once per segment batch, which also
 * gives each query its segment's key span and whether that span is one
 * contiguous run. attn_run_keys then turns causal, window and sinks into
 * key intervals by binary search over the key positions of the row's
 * segment (they rise within a run, checked once per batch element), so a
 * row costs O(log L) to describe and the passes touch only its keys.
 */
#include "attn_run.h"

#include <stdlib.h>
#include <string.h>

/* One query or key in the segment sort. */
struct seg_item {
    int64_t id;
    size_t idx;
    int kind;                   /* 0 key, 1 query: keys of a segment first */
};

static int seg_cmp(const void *a, const void *b)
{
    const struct seg_item *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind - y->kind;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static size_t rbatches(const struct attn_request *r)
{
    return r->shape.B ? r->shape.B : 1;
}

/* The scratch layout: what is resolved and where it goes. */
struct run_layout {
    size_t sg_b, km_b;
    bool cnt_q, cnt_k;          /* positions counted within segments */
    size_t off_pq, off_pk, off_sa, off_se, off_sc, off_km, off_items, total;
};

static bool add_part(size_t *at, size_t count, size_t esz, size_t *off)
{
    size_t b;
    if (!core_mul(count, esz, &b) || !core_add(b, 15, &b))
        return false;
    *off = *at;
    return core_add(*at, b & ~(size_t)15, at);
}

static bool layout(const struct attn_request *r, struct run_layout *y)
{
    size_t n = r->shape.n, L = r->shape.L, B = rbatches(r), at = 0, nl;
    memset(y, 0, sizeof *y);
    bool seg = r->seg_q != NULL;
    y->sg_b = seg ? r->seg_batches : 0;
    y->cnt_q = seg && !r->pos_q;
    y->cnt_k = seg && !r->pos_k;
    bool kb = (r->pos_k && r->pos_k_batches == B) || (seg && r->seg_batches == B);
    y->km_b = r->pos_k || seg ? (kb ? B : 1) : 0;
    size_t sq, sk;
    if (!core_mul(y->sg_b, n, &sq) || !core_mul(y->sg_b, L, &sk) || !core_add(n, L, &nl))
        return false;
    return add_part(&at, y->cnt_q ? sq : 0, sizeof(int64_t), &y->off_pq) &&
           add_part(&at, y->cnt_k ? sk : 0, sizeof(int64_t), &y->off_pk) &&
           add_part(&at, sq, sizeof(size_t), &y->off_sa) &&
           add_part(&at, sq, sizeof(size_t), &y->off_se) &&
           add_part(&at, sq, 1, &y->off_sc) && add_part(&at, y->km_b, 1, &y->off_km) &&
           add_part(&at, seg ? nl : 0, sizeof(struct seg_item), &y->off_items) &&
           (y->total = at, true);
}

bool attn_run_bytes(const struct attn_request *r, size_t *bytes)
{
    struct run_layout y;
    if (!layout(r, &y))
        return false;
    *bytes = y.total;
    return true;
}

/* Segment batch sb: counts, spans and contiguity of every query. */
static void resolve_segments(const struct attn_request *r, size_t sb, struct seg_item *it,
                             int64_t *pq, int64_t *pk, size_t *sa, size_t *se, uint8_t *sc)
{
    size_t n = r->shape.n, L = r->shape.L;
    const int64_t *sq = r->seg_q + sb * n, *sk = r->seg_k + sb * L;
    for (size_t j = 0; j < L; j++)
        it[j] = (struct seg_item){sk[j], j, 0};
    for (size_t i = 0; i < n; i++)
        it[L + i] = (struct seg_item){sq[i], i, 1};
    qsort(it, n + L, sizeof *it, seg_cmp);
    bool top = r->causal == ATTN_CAUSAL_TOP_LEFT;
    for (size_t g = 0; g < n + L;) {
        size_t e = g;
        while (e < n + L && it[e].id == it[g].id)
            e++;
        size_t nk = 0;
        while (g + nk < e && it[g + nk].kind == 0)
            nk++;
        size_t nq = e - g - nk;
        size_t a = nk ? it[g].idx : 0, z = nk ? it[g + nk - 1].idx + 1 : 0;
        for (size_t t = 0; t < nk; t++)
            if (pk)
                pk[it[g + t].idx] = (int64_t)t;
        for (size_t t = 0; t < nq; t++) {
            size_t i = it[g + nk + t].idx;
            if (pq)
                pq[i] = top ? (int64_t)t : (int64_t)nk - (int64_t)nq + (int64_t)t;
            sa[i] = a;
            se[i] = z;
            sc[i] = z - a == nk;
        }
        g = e;
    }
}

void attn_run_init(struct attn_run *x, const struct attn_request *r, void *scratch)
{
    size_t B = rbatches(r), n = r->shape.n, L = r->shape.L;
    memset(x, 0, sizeof *x);
    x->r = *r;
    x->B = B;
    x->h = r->shape.h;
    x->h_kv = r->shape.h_kv;
    x->r.shape.h = B * r->shape.h;
    x->r.shape.h_kv = B * r->shape.h_kv;
    x->r.shape.B = B;
    x->general = r->pos_q || r->pos_k || r->seg_q || r->window.on;
    struct run_layout y;
    layout(r, &y);                  /* checked by attn_run_bytes */
    char *m = scratch;
    x->pq = r->pos_q;
    x->pq_b = r->pos_q_batches;
    x->pk = r->pos_k;
    x->pk_b = r->pos_k_batches;
    if (r->seg_q) {
        int64_t *pq = y.cnt_q ? (int64_t *)(void *)(m + y.off_pq) : NULL;
        int64_t *pk = y.cnt_k ? (int64_t *)(void *)(m + y.off_pk) : NULL;
        size_t *sa = (size_t *)(void *)(m + y.off_sa), *se = (size_t *)(void *)(m + y.off_se);
        uint8_t *sc = (uint8_t *)(m + y.off_sc);
        for (size_t sb = 0; sb < y.sg_b; sb++)
            resolve_segments(r, sb, (struct seg_item *)(void *)(m + y.off_items),
                             pq ? pq + sb * n : NULL, pk ? pk + sb * L : NULL, sa + sb * n,
                             se + sb * n, sc + sb * n);
        if (pq) {
            x->pq = pq;
            x->pq_b = y.sg_b;
        }
        if (pk) {
            x->pk = pk;
            x->pk_b = y.sg_b;
        }
        x->sa = sa;
        x->se = se;
        x->scontig = sc;
        x->sg_b = y.sg_b;
    }
    if (y.km_b) {
        uint8_t *km = (uint8_t *)(m + y.off_km);
        for (size_t b = 0; b < y.km_b; b++) {
            const int64_t *p = x->pk + (x->pk_b == 1 ? 0 : b) * L;
            const int64_t *s = r->seg_k ? r->seg_k + (r->seg_batches == 1 ? 0 : b) * L : NULL;
            bool up = true;
            for (size_t j = 1; j < L && up; j++)
                if ((!s || s[j] == s[j - 1]) && p[j] < p[j - 1])
                    up = false;
            km[b] = up;
        }
        x->kmono = km;
        x->km_b = y.km_b;
    }
}

int64_t attn_run_qpos(const struct attn_run *x, size_t hh, size_t i)
{
    const struct attn_request *r = &x->r;
    if (x->pq)
        return x->pq[(x->pq_b == 1 ? 0 : attn_run_qbatch(x, hh)) * r->shape.n + i];
    if (r->causal == ATTN_CAUSAL_TOP_LEFT)
        return (int64_t)i;
    return (int64_t)r->shape.L - (int64_t)r->shape.n + (int64_t)i;
}

int64_t attn_run_kpos(const struct attn_run *x, size_t b, size_t j)
{
    return x->pk ? x->pk[(x->pk_b == 1 ? 0 : b) * x->r.shape.L + j] : (int64_t)j;
}

/* a + b saturated to the int64_t range (positions near 2^63 with a window) */
static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t s;
    if (__builtin_add_overflow(a, b, &s))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return s;
}

/* First j in [a, e) with kpos(j) > v (keys of batch b rise over [a, e)). */
static size_t first_above(const struct attn_run *x, size_t b, size_t a, size_t e, int64_t v)
{
    while (a < e) {
        size_t mid = a + (e - a) / 2;
        if (attn_run_kpos(x, b, mid) > v)
            e = mid;
        else
            a = mid + 1;
    }
    return a;
}

/* The bounds on P_k of a row at position P: lo <= P_k <= hi (window and
 * causal), and P_k < sinks allowed by the window whatever the distance. */
static void pos_bounds(const struct attn_request *r, int64_t P, int64_t *lo, int64_t *hi,
                       int64_t *sinks, int64_t *chi)
{
    const struct attn_window *w = &r->window;
    *chi = r->causal != ATTN_CAUSAL_NONE ? P : INT64_MAX;     /* causal alone */
    *hi = *chi;
    *lo = INT64_MIN;
    *sinks = 0;
    if (!w->on)
        return;
    if (w->right >= 0 && sat_add(P, w->right) < *hi)
        *hi = sat_add(P, w->right);
    if (w->left >= 0)
        *lo = sat_add(P, -w->left);
    *sinks = w->sinks;
}

/* Segment id of query i / key j of head hh's batch element. */
static bool same_segment(const struct attn_run *x, size_t hh, size_t i, size_t j)
{
    const struct attn_request *r = &x->r;
    if (!r->seg_q)
        return true;
    size_t sb = r->seg_batches == 1 ? 0 : attn_run_qbatch(x, hh);
    return r->seg_q[sb * r->shape.n + i] == r->seg_k[sb * r->shape.L + j];
}

bool attn_run_allowed(const struct attn_run *x, size_t hh, size_t i, size_t j)
{
    if (!same_segment(x, hh, i, j))
        return false;
    int64_t lo, hi, sinks, chi, P = attn_run_qpos(x, hh, i);
    int64_t pk = attn_run_kpos(x, attn_run_qbatch(x, hh), j);
    pos_bounds(&x->r, P, &lo, &hi, &sinks, &chi);
    return pk <= chi && ((pk >= lo && pk <= hi) || pk < sinks);
}

void attn_run_keys(const struct attn_run *x, size_t hh, size_t i, struct attn_keys *k)
{
    const struct attn_request *r = &x->r;
    size_t L = r->shape.L, b = attn_run_qbatch(x, hh), a = 0, e = L;
    int64_t P = attn_run_qpos(x, hh, i);
    k->slo = k->shi = 0;
    k->exact = true;
    if (!x->general) {              /* v1: keys [0, P + 1) under causal */
        k->lo = 0;
        k->hi = r->causal == ATTN_CAUSAL_NONE ? L
                : P < 0                       ? 0
                : (uint64_t)P + 1 < L         ? (size_t)P + 1
                                              : L;
        return;
    }
    bool run = true;
    if (r->seg_q) {
        size_t sb = x->sg_b == 1 ? 0 : b;
        a = x->sa[sb * r->shape.n + i];
        e = x->se[sb * r->shape.n + i];
        run = x->scontig[sb * r->shape.n + i];
    }
    if (x->kmono && !x->kmono[x->km_b == 1 ? 0 : b])
        run = false;
    if (!run) {                     /* test key by key within the span */
        k->lo = a;
        k->hi = e;
        k->exact = false;
        return;
    }
    int64_t plo, phi, sinks, chi;
    pos_bounds(r, P, &plo, &phi, &sinks, &chi);
    k->lo = plo == INT64_MIN ? a : first_above(x, b, a, e, plo - 1);
    k->hi = first_above(x, b, a, e, phi);
    if (k->hi < k->lo)
        k->hi = k->lo;
    if (sinks > 0) {                /* keys [a, s1): P_k < S, and causal */
        size_t s1 = first_above(x, b, a, e, sinks - 1), c1 = first_above(x, b, a, e, chi);
        s1 = s1 < c1 ? s1 : c1;
        if (s1 > a) {
            if (k->lo >= k->hi) {   /* the window holds no key: the sinks alone */
                k->lo = a;
                k->hi = s1;
            } else if (s1 >= k->lo) {   /* they touch: one interval */
                k->lo = a;
                k->hi = s1 > k->hi ? s1 : k->hi;
            } else {
                k->slo = a;
                k->shi = s1;
            }
        }
    }
}

void attn_run_tile_keys(const struct attn_run *x, size_t row0, size_t nb, size_t *s0,
                        size_t *s1, size_t *m0, size_t *m1)
{
    size_t n = x->r.shape.n;
    *s0 = *m0 = SIZE_MAX;
    *s1 = *m1 = 0;
    for (size_t t = 0; t < nb; t++) {
        struct attn_keys k;
        attn_run_keys(x, (row0 + t) / n, (row0 + t) % n, &k);
        if (k.slo < k.shi) {
            *s0 = k.slo < *s0 ? k.slo : *s0;
            *s1 = k.shi > *s1 ? k.shi : *s1;
        }
        if (k.lo < k.hi) {
            *m0 = k.lo < *m0 ? k.lo : *m0;
            *m1 = k.hi > *m1 ? k.hi : *m1;
        }
    }
    if (*s0 >= *s1)
        *s0 = *s1 = 0;
    if (*m0 >= *m1)
        *m0 = *m1 = 0;
}

double attn_run_sink(const struct attn_run *x, size_t hh)
{
    const struct attn_params *p = &x->r.params;
    return p->sink_logits ? p->sink_logits[attn_run_head(x, hh)] : p->sink_logit;
}
