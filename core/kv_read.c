/*
 * core/kv_read.c — reading a session's key/value cache: its rows as stored
 * or widened to the compute dtype, and attention over them, in place over
 * the pages where the kernels can read them so, else over a gathered copy
 * (see kv.h; the layout is core/kv.c's).
 */
#include "kv_impl.h"
#include "attn_extras.h"
#include "attn_blame.h"

#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_lowp.h"
#include "tensor.h"

/* ---- reading rows --------------------------------------------------------------- */

size_t kv_seg(const struct kv_cache *c, size_t g, size_t row, struct kv_seg *out)
{
    if (row >= c->len || g >= c->h_kv || dropped(c, row))
        return 0;
    const struct kv_page *pg = c->pg[slot(c, row / P)];
    size_t off = row % P, n = P - off < c->len - row ? P - off : c->len - row;
    bool i8 = c->store == KV_STORE_I8;
    out->k = part_at(c, pg, 0, g, off);
    out->v = part_at(c, pg, 1, g, off);
    out->ks = i8 ? part_at(c, pg, 2, g, off) : NULL;
    out->vs = i8 ? part_at(c, pg, 3, g, off) : NULL;
    return n;
}

/* n rows [n][d] of stored elements (scales sc for int8) -> out (dtype). */
static void widen(const struct kv_cache *c, const void *x, const float *sc, size_t n,
                  size_t d, void *out)
{
    size_t e = n * d;
    if (c->store == KV_STORE_SAME) {
        memcpy(out, x, e * c->esz);
    } else if (c->store == KV_STORE_F16) {
        half_f16_to_f32_n(x, out, e);
    } else if (c->store == KV_STORE_BF16) {
        half_bf16_to_f32_n(x, out, e);
    } else {
        const int8_t *q = x;
        float *o = out;
        for (size_t r = 0; r < n; r++)
            for (size_t i = 0; i < d; i++)
                o[r * d + i] = (float)q[r * d + i] * sc[r];
    }
}

/* Rows [row0, row0 + m) of head g, page by page: widened to the dtype
 * (wide) or copied as stored (with the int8 scales into ks, vs); any
 * destination may be NULL. */
static void read_range(const struct kv_cache *c, size_t g, size_t row0, size_t m, bool wide,
                       void *k, void *v, float *ks, float *vs)
{
    size_t es = wide ? attn_dtype_size(c->dtype) : c->esz;
    struct kv_seg sg;
    for (size_t r = 0, n; r < m; r += n) {
        n = kv_seg(c, g, row0 + r, &sg);
        n = n < m - r ? n : m - r;
        if (n == 0)
            return;
        char *kd = k ? (char *)k + r * c->d_k * es : NULL;
        char *vd = v ? (char *)v + r * c->d_v * es : NULL;
        if (wide) {
            if (kd)
                widen(c, sg.k, sg.ks, n, c->d_k, kd);
            if (vd)
                widen(c, sg.v, sg.vs, n, c->d_v, vd);
            continue;
        }
        if (kd)
            memcpy(kd, sg.k, n * c->d_k * es);
        if (vd)
            memcpy(vd, sg.v, n * c->d_v * es);
        if (ks && sg.ks)
            memcpy(ks + r, sg.ks, n * sizeof(float));
        if (vs && sg.vs)
            memcpy(vs + r, sg.vs, n * sizeof(float));
    }
}

void kv_read_stored(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k,
                    void *v, float *ks, float *vs)
{
    read_range(c, g, row0, m, false, k, v, ks, vs);
}

void kv_read_rows(const struct kv_cache *c, size_t g, size_t row0, size_t m, void *k_out,
                  void *v_out)
{
    read_range(c, g, row0, m, true, k_out, v_out, NULL, NULL);
}

/* ---- attention ------------------------------------------------------------------- */

/* The whole cache widened into one block per head (scores, weights and
 * extras over a narrow cache, extras over any: those passes write or read
 * n·L numbers anyway): buf [h_kv][len][d_k + d_v], kp/vp [h_kv] the
 * per-head K, V. NULL on ENOMEM / overflow. */
static void *gather(const struct kv_cache *c, const void **kp, const void **vp)
{
    size_t es = attn_dtype_size(c->dtype), per, total, L = kv_held(c);
    size_t front = kv_held_front(c), from = kv_held_from(c);
    if (!core_add(c->d_k, c->d_v, &per) || !core_mul3(per, L, c->h_kv, &total) ||
        total > SIZE_MAX / 8)
        return NULL;
    char *buf = malloc(total * es);
    if (!buf)
        return NULL;
    for (size_t g = 0; g < c->h_kv; g++) {
        char *kg = buf + g * L * per * es, *vg = kg + L * c->d_k * es;
        kv_read_rows(c, g, 0, front, kg, vg);
        if (c->gap)
            kv_read_rows(c, g, from, c->len - from, kg + front * c->d_k * es,
                         vg + front * c->d_v * es);
        kp[g] = kg;
        vp[g] = vg;
    }
    return buf;
}

/* The page table as [h_kv][pages] pointers per part (K, V, and the int8
 * scales when ks is not NULL); false on ENOMEM. */
static bool page_table(const struct kv_cache *c, const void ***kv, const float ***ks)
{
    size_t pages = (kv_held(c) + P - 1) / P, n = c->h_kv * pages;
    const void **ptr = malloc(2 * n * sizeof *ptr);
    const float **sp = ks ? malloc(2 * n * sizeof *sp) : NULL;
    if (!ptr || (ks && !sp)) {
        free(ptr);
        free(sp);
        return false;
    }
    for (size_t g = 0; g < c->h_kv; g++)
        for (size_t p = 0; p < pages; p++) {
            /* the headers are cold in a long decode step (page_table's
             * loads of pg->hs were one miss after another, on the caller
             * alone: docs/benchmarks.md, "Half precision"): ask 16 ahead */
            if (g == 0 && p + 16 < pages)
                __builtin_prefetch(c->pg[p + 16]);
            ptr[g * pages + p] = pk(c, c->pg[p], g);
            ptr[n + g * pages + p] = pv(c, c->pg[p], g);
            if (sp) {
                sp[g * pages + p] = c->store == KV_STORE_I8 ? pks(c, c->pg[p], g) : NULL;
                sp[n + g * pages + p] = c->store == KV_STORE_I8 ? pvs(c, c->pg[p], g) : NULL;
            }
        }
    *kv = ptr;
    if (ks)
        *ks = sp;
    return true;
}

/* A pass over the pages in place: attn_kv_view's paged form, or for a
 * narrow cache (output only) kv_lowp's. */
static enum core_status attend_paged(const struct kv_cache *c, const struct attn_request *r,
                                     const struct attn_inputs *in, struct attn_result *out,
                                     struct attn_ws *ws)
{
    size_t pages = (kv_held(c) + P - 1) / P, n = c->h_kv * pages;
    bool narrow = c->store != KV_STORE_SAME;
    const void **ptr;
    const float **sp = NULL;
    if (!page_table(c, &ptr, narrow ? &sp : NULL))
        return CORE_ENOMEM;
    enum core_status st;
    if (narrow) {
        struct kv_lowp_view lv = {c->store, ptr, ptr + n,
                                  c->store == KV_STORE_I8 ? sp : NULL,
                                  c->store == KV_STORE_I8 ? sp + n : NULL, P, pages};
        st = kv_lowp_takes(r) ? kv_lowp_attend(r, in, &lv, out, ws)
                              : kv_lowp_attend_windows(r, in, &lv, out, ws);
    } else {
        struct attn_kv_view view = {.k = ptr, .v = ptr + n, .page_rows = P, .pages = pages};
        st = attn_forward_kv(r, in, &view, out, ws);
    }
    free(ptr);
    free(sp);
    return st;
}

enum core_status kv_attend(const struct kv_cache *c,
                           const struct attn_request *r,
                           const struct attn_inputs *in,
                           struct attn_result *out, struct attn_ws *ws)
{
    return kv_attend_x(c, r, in, NULL, NULL, out, ws);
}

/* The positions of a pass over a cache that let rows go: keys at their
 * rows, queries at len - n + i (bottom-right) or i (top-left), into rr;
 * the array to free (NULL on ENOMEM). */
static int64_t *held_positions(const struct kv_cache *c, const struct attn_request *r,
                               struct attn_request *rr)
{
    size_t n = r->shape.n, L = kv_held(c), front = kv_held_front(c);
    if (n > SIZE_MAX / 8 - L)
        return NULL;
    int64_t *pos = malloc((n + L) * sizeof *pos);
    if (!pos)
        return NULL;
    for (size_t i = 0; i < n; i++)
        pos[i] = r->causal == ATTN_CAUSAL_TOP_LEFT ? (int64_t)i : (int64_t)c->len - (int64_t)n + (int64_t)i;
    for (size_t j = 0; j < L; j++)
        pos[n + j] = (int64_t)(j < front ? j : j - front + kv_held_from(c));
    rr->pos_q = pos;
    rr->pos_k = pos + n;
    rr->pos_q_batches = rr->pos_k_batches = 1;
    return pos;
}

/* A narrow cache's output, for a query that asked for more than the
 * output (a pass over widened rows, which sums in another order): from the
 * output-only pass, so that the output does not depend on what else is
 * asked for (README). Its rows of the heads x chose, [B][nh][n][d_v], over
 * out->output. Empty rows: the general pass has judged them already (an
 * error stopped it), and both give them 0. */
static enum core_status narrow_output(const struct kv_cache *c, const struct attn_request *r,
                                      const struct attn_inputs *in, const struct attn_extras *x,
                                      struct attn_result *out, struct attn_ws *ws)
{
    const size_t *heads = x ? x->heads : NULL;
    size_t h = r->shape.h, B = r->shape.B ? r->shape.B : 1;
    size_t nh = heads ? x->nh : h;
    size_t row = r->shape.n * r->shape.d_v * attn_dtype_size(r->params.dtype);
    struct attn_request ro = *r;
    ro.outputs = ATTN_OUT_OUTPUT;
    ro.empty_rows = ATTN_EMPTY_ZERO;
    struct attn_result all = {.output = heads ? malloc(B * h * row) : out->output};
    if (!all.output)
        return CORE_ENOMEM;
    enum core_status st = attend_paged(c, &ro, in, &all, ws);
    for (size_t b = 0; heads && st == CORE_OK && b < B; b++)
        for (size_t a = 0; a < nh; a++)
            memcpy((char *)out->output + (b * nh + a) * row,
                   (const char *)all.output + (b * h + heads[a]) * row, row);
    if (heads)
        free(all.output);
    return st;
}

/* kv_attend_x over the held rows (rr->shape.L of them). */
static enum core_status attend_held(const struct kv_cache *c, const struct attn_request *r,
                                    const struct attn_inputs *in, const struct attn_extras *x,
                                    struct attn_extras_out *xo, struct attn_result *out,
                                    struct attn_ws *ws)
{
    /* in place: float32/float64 passes without extras; narrow caches'
     * output-only passes (the decode loops, or a window of keys widened at
     * a time) */
    bool narrow = c->store != KV_STORE_SAME;
    if (!x && (!narrow || r->outputs == ATTN_OUT_OUTPUT))
        return attend_paged(c, r, in, out, ws);
    /* a narrow cache's output comes from narrow_output: the general pass
     * leaves it out when it has something else to compute (a heads
     * subset alone still needs it, for its empty rows) */
    bool own_output = narrow && (r->outputs & ATTN_OUT_OUTPUT) && out->output;
    struct attn_request rg = *r;
    if (own_output && ((r->outputs & ~ATTN_OUT_OUTPUT) || (x && x->want)))
        rg.outputs &= ~ATTN_OUT_OUTPUT;
    const void **kp = malloc(2 * c->h_kv * sizeof *kp);
    void *buf = kp ? gather(c, kp, kp + c->h_kv) : NULL;
    enum core_status st = CORE_ENOMEM;
    if (buf) {
        struct attn_kv_view view = {.k = kp, .v = kp + c->h_kv};
        st = x ? attn_forward_extras(&rg, in, &view, x, out, xo, ws)
               : attn_forward_kv(&rg, in, &view, out, ws);
    }
    free(buf);
    free(kp);
    if (st == CORE_OK && own_output)
        st = narrow_output(c, r, in, x, out, ws);
    return st;
}

/* r over the held rows (r checked against the cache: no positions,
 * segments or batch where rows were let go) -> *rr: L the rows held and,
 * when rows were let go, their positions (*pos, to free; NULL when none).
 * The pass and the blame scans after it read the rows so. False on ENOMEM. */
static bool held_request(const struct kv_cache *c, const struct attn_request *r,
                         struct attn_request *rr, int64_t **pos)
{
    *rr = *r;
    rr->shape.L = kv_held(c);
    *pos = NULL;
    return !c->gap || (*pos = held_positions(c, r, rr)) != NULL;
}

enum core_status kv_attend_x(const struct kv_cache *c, const struct attn_request *r,
                             const struct attn_inputs *in, const struct attn_extras *x,
                             struct attn_extras_out *xo, struct attn_result *out,
                             struct attn_ws *ws)
{
    if (r->shape.h_kv != c->h_kv || r->shape.d_k != c->d_k ||
        r->shape.d_v != c->d_v || r->params.dtype != c->dtype)
        return CORE_ESHAPE;
    if (c->len == 0)
        return CORE_ESHAPE;
    if (c->gap && (r->pos_q || r->pos_k || r->seg_q || r->shape.B > 1))
        return CORE_EINVAL;
    struct attn_request rr;
    int64_t *pos;
    if (!held_request(c, r, &rr, &pos))
        return CORE_ENOMEM;
    enum core_status st = attend_held(c, &rr, in, x, xo, out, ws);
    free(pos);
    return st;
}

enum core_status kv_blame(const struct kv_cache *c, const struct attn_request *r,
                          const struct attn_inputs *in, const size_t *heads, size_t nh,
                          struct attn_blame *out)
{
    struct attn_request rr;
    int64_t *pos;
    *out = (struct attn_blame){.input = ATTN_BLAME_NONE};
    if (!held_request(c, r, &rr, &pos))
        return CORE_ENOMEM;
    const void **kp = calloc(2 * c->h_kv + 1, sizeof *kp);
    void *buf = kp ? gather(c, kp, kp + c->h_kv) : NULL;
    enum core_status st = buf ? CORE_OK : CORE_ENOMEM;
    if (st == CORE_OK)      /* the scan only reads them */
        st = attn_blame_kv(&rr, in, (void **)kp, (void **)(kp + c->h_kv), heads, nh, out);
    free(buf);
    free(kp);
    free(pos);
    return st;
}

enum core_status kv_blame_empty(const struct kv_cache *c, const struct attn_request *r,
                                const size_t *heads, size_t nh, struct attn_blame_empty *out)
{
    struct attn_request rr;
    int64_t *pos;
    if (!held_request(c, r, &rr, &pos))
        return CORE_ENOMEM;
    enum core_status st = attn_blame_empty(&rr, heads, nh, out);
    free(pos);
    return st;
}
