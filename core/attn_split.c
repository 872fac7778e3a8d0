/*
 * core/attn_split.c — one forward pass cut into pieces (see attn_pool in
 * attn.h): a long decode split by key windows whose partial results are
 * combined, a large pass split by query-row tiles over the helper pool,
 * and a part of a pass (rows [rb, re)) computed with the bits the whole
 * pass gives those rows. Every piece is the serial pass of core/attn.c
 * (attn_forward_kv_serial) on the tiles the serial loop cuts, so how a
 * pass is split never changes its result.
 */
#include "attn_pass.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Passes below this many multiply-adds (rows·keys·(d_k+d_v)) are not split
 * by rows: waking a helper costs tens of microseconds. */
#ifndef ATTN_SPLIT_MACS
#define ATTN_SPLIT_MACS ((size_t)1 << 22)
#endif
/* Decode passes are split by keys into windows of at least this many bytes
 * of keys and values, at most ATTN_SPLIT_WIN windows, whenever there are two
 * or more (with or without a pool, so the result depends only on the
 * request: a session step and the stateless pass agree bit for bit). */
#define ATTN_WIN_BYTES ((size_t)1 << 20)
#define ATTN_SPLIT_WIN 8

struct piece_res {
    enum core_status st;
    size_t n_empty;
};

struct split_job {
    const struct attn_run *x;
    const struct attn_inputs *in;
    const struct attn_kv_view *kv;
    const struct attn_result *out;  /* shared result buffers */
    size_t B, R, tpg;               /* row pieces: tile rows, rows per kv head, tiles per kv head */
    size_t wk;                      /* key pieces: window width */
    struct attn_partial *parts;     /* key pieces: one per window */
    struct piece_res *res;          /* per piece */
};

/* Row piece i: one tile of B rows of one kv head's row block, exactly as
 * the serial loop cuts them (so the bits are the serial pass's). */
static void row_piece(void *arg, size_t i, struct attn_ws *ws)
{
    struct split_job *j = arg;
    size_t g = i / j->tpg, rb = g * j->R + (i % j->tpg) * j->B;
    size_t re = rb + j->B < (g + 1) * j->R ? rb + j->B : (g + 1) * j->R;
    struct attn_result o = *j->out;
    struct attn_win w = {0, j->x->r.shape.L, NULL};
    j->res[i].st = attn_forward_kv_serial(j->x, j->in, j->kv, &o, ws, rb, re, &w);
    j->res[i].n_empty = o.n_empty;
}

/* Key piece i: every row against window i into parts[i]. */
static void key_piece(void *arg, size_t i, struct attn_ws *ws)
{
    struct split_job *j = arg;
    const struct attn_shape *s = &j->x->r.shape;
    size_t L = s->L, k0 = i * j->wk;
    size_t k1 = k0 + j->wk < L ? k0 + j->wk : L;
    struct attn_win w = {k0, k1 - k0, &j->parts[i]};
    struct attn_result none = {0};
    j->res[i].st = attn_forward_kv_serial(j->x, j->in, j->kv, &none, ws, 0, s->h * s->n, &w);
}

/* First failure in piece order (what the serial pass would report first). */
static enum core_status first_error(const struct piece_res *res, size_t np)
{
    for (size_t i = 0; i < np; i++)
        if (res[i].st != CORE_OK)
            return res[i].st;
    return CORE_OK;
}

/* Bytes of keys and values a pass reads; SIZE_MAX on overflow. */
static size_t kv_bytes(const struct attn_shape *s, size_t esz)
{
    size_t a, b;
    if (!core_mul3(s->h_kv, s->L, s->d_k + s->d_v, &a) || !core_mul(a, esz, &b))
        return SIZE_MAX;
    return b;
}

/* The whole pass split by query-row tiles over the pool. */
static enum core_status split_rows(const struct attn_run *x, const struct attn_inputs *in,
                                   const struct attn_kv_view *kv, struct attn_result *out,
                                   struct attn_ws *ws, size_t B, size_t R, size_t tiles)
{
    struct piece_res *res = attn_ws_reserve(ws, WS_PART, tiles * sizeof *res);
    if (!res)
        return CORE_ENOMEM;
    struct split_job j = {x, in, kv, out, B, R, (R + B - 1) / B, 0, NULL, res};
    if (!attn_pool_run(ws->pool, row_piece, &j, tiles, ws))
        return CORE_ESTOPPED;
    out->n_empty = 0;
    for (size_t i = 0; i < tiles; i++)
        out->n_empty += res[i].n_empty;
    return first_error(res, tiles);
}

/* The whole pass (output only) split by key windows, then combined. */
static enum core_status split_keys(const struct attn_run *x, const struct attn_inputs *in,
                                   const struct attn_kv_view *kv, struct attn_result *out,
                                   struct attn_ws *ws, size_t nwin)
{
    const struct attn_request *r = &x->r;
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype), rows = s->h * s->n;
    size_t wk = (s->L + nwin - 1) / nwin;
    nwin = (s->L + wk - 1) / wk;
    /* per window: o [rows][d_v] (64-byte rounded), m, l [rows] doubles */
    size_t ob = (rows * s->d_v * esz + 63) & ~(size_t)63, per, total, head;
    head = nwin * (sizeof(struct attn_partial) + sizeof(struct piece_res));
    head = (head + 63) & ~(size_t)63;
    if (!core_mul(rows, 2 * sizeof(double), &per) || !core_add(per, ob, &per) ||
        !core_mul(per, nwin, &total) || !core_add(total, head, &total))
        return CORE_ELIMIT;
    char *mem = attn_ws_reserve(ws, WS_PART, total);
    if (!mem)
        return CORE_ENOMEM;
    struct attn_partial *parts = (struct attn_partial *)(void *)mem;
    struct piece_res *res = (struct piece_res *)(void *)(parts + nwin);
    for (size_t i = 0; i < nwin; i++) {
        char *b = mem + head + i * per;
        parts[i].o = b;
        parts[i].m = (double *)(void *)(b + ob);
        parts[i].l = parts[i].m + rows;
    }
    struct split_job j = {x, in, kv, out, 0, 0, 0, wk, parts, res};
    if (!attn_pool_run(ws->pool, key_piece, &j, nwin, ws))
        return CORE_ESTOPPED;
    enum core_status st = first_error(res, nwin);
    if (st != CORE_OK)
        return st;
    return attn_combine_run(x, parts, nwin, out);
}

static enum core_status forward_kv_split(const struct attn_run *x,
                                         const struct attn_inputs *in,
                                         const struct attn_kv_view *kv,
                                         struct attn_result *out, struct attn_ws *ws,
                                         size_t rb, size_t re, const struct attn_win *w);

/* base + (slot - glob) rows of row_bytes: the pointer that puts global row
 * glob at row slot of base's block (an integer, so no out-of-object pointer
 * is formed; only rows inside the block are written through it). */
static void *rows_at(void *base, size_t slot, size_t glob, size_t row_bytes)
{
    if (!base)
        return NULL;
    uintptr_t b = (uintptr_t)base;
    return (void *)(slot >= glob ? b + (slot - glob) * row_bytes : b - (glob - slot) * row_bytes);
}

/* A score sink that passes on only the rows [rb, re) (a piece computes
 * rows around them that belong to other pieces). */
struct sink_range {
    const struct attn_score_sink *to;
    size_t rb, re, esz;
};

static bool clip_rows(const struct sink_range *f, size_t *row0, size_t *rows, size_t *skip)
{
    size_t a = *row0 > f->rb ? *row0 : f->rb, e = *row0 + *rows < f->re ? *row0 + *rows : f->re;
    if (a >= e)
        return false;
    *skip = a - *row0;
    *row0 = a;
    *rows = e - a;
    return true;
}

static void range_feed(void *ctx, size_t row0, size_t rows, size_t k0, size_t kw, const void *s,
                       size_t ts, size_t js, const int32_t *lo, const int32_t *hi)
{
    const struct sink_range *f = ctx;
    size_t skip;
    if (clip_rows(f, &row0, &rows, &skip))
        f->to->feed(f->to->ctx, row0, rows, k0, kw, (const char *)s + skip * ts * f->esz, ts, js,
                    lo ? lo + skip : NULL, hi ? hi + skip : NULL);
}

static void range_reset(void *ctx, size_t row0, size_t rows)
{
    const struct sink_range *f = ctx;
    size_t skip;
    if (clip_rows(f, &row0, &rows, &skip))
        f->to->reset(f->to->ctx, row0, rows);
}

static void range_done(void *ctx, size_t row, double l, bool base2)
{
    const struct sink_range *f = ctx;
    if (row >= f->rb && row < f->re)
        f->to->done(f->to->ctx, row, l, base2);
}

/* Global rows [t0, t1) run as one piece into scratch, then rows [rb, re)
 * of it (a part) copied to out: the piece computes exactly what it computes
 * inside the whole pass. Its other rows are not the caller's (heads not
 * chosen), so it runs with empty_rows "zero", and only an empty row of
 * [rb, re) is CORE_EEMPTYROW under "error". */
static enum core_status piece_copy(const struct attn_run *x, const struct attn_inputs *in,
                                   const struct attn_kv_view *kv, struct attn_result *out,
                                   struct attn_ws *ws, size_t t0, size_t t1, size_t rb,
                                   size_t re, const struct attn_win *w, bool whole)
{
    const struct attn_request *r = &x->r;
    size_t esz = attn_dtype_size(r->params.dtype), m = t1 - t0;
    size_t lb = r->shape.L * esz, vb = r->shape.d_v * esz;
    bool sc = out->scores && (r->outputs & ATTN_OUT_SCORES);
    bool wt = out->weights && (r->outputs & ATTN_OUT_WEIGHTS);
    bool ot = out->output && (r->outputs & ATTN_OUT_OUTPUT);
    size_t row = (sc + wt) * lb + ot * vb + 1;      /* bounded by attn_check per row */
    size_t bytes;
    if (!core_mul(m, row, &bytes))
        return CORE_ELIMIT;
    char *mem = malloc(bytes ? bytes : 1);
    if (!mem)
        return CORE_ENOMEM;
    char *ps = mem, *pw = ps + sc * m * lb, *po = pw + wt * m * lb, *pe = po + ot * m * vb;
    struct attn_result tmp = {
        .scores = sc ? rows_at(ps, 0, t0, lb) : NULL,
        .weights = wt ? rows_at(pw, 0, t0, lb) : NULL,
        .output = ot ? rows_at(po, 0, t0, vb) : NULL,
        .empty = rows_at(pe, 0, t0, 1),
    };
    struct attn_run y = *x;             /* its score sink sees [rb, re) only */
    y.r.empty_rows = ATTN_EMPTY_ZERO;
    struct sink_range f = {x->r.score_sink, rb, re, esz};
    struct attn_score_sink fs = {&f, range_feed, range_reset, range_done};
    if (x->r.score_sink)
        y.r.score_sink = &fs;
    enum core_status st = whole ? forward_kv_split(&y, in, kv, &tmp, ws, t0, t1, w)
                                : attn_forward_kv_serial(&y, in, kv, &tmp, ws, t0, t1, w);
    for (size_t g = rb; st == CORE_OK && g < re; g++) {
        size_t t = g - t0;
        if (sc)
            memcpy((char *)out->scores + g * lb, ps + t * lb, lb);
        if (wt)
            memcpy((char *)out->weights + g * lb, pw + t * lb, lb);
        if (ot)
            memcpy((char *)out->output + g * vb, po + t * vb, vb);
        if (out->empty)
            out->empty[g] = (uint8_t)pe[t];
        out->n_empty += pe[t] != 0;
        if (pe[t] && r->empty_rows == ATTN_EMPTY_ERROR)
            st = CORE_EEMPTYROW;
    }
    free(mem);
    return st;
}

/* Key windows the whole pass of r (flattened) is split into: a long decode
 * of output only, few rows per kv head; 0 when it is not split by keys. */
static size_t key_windows(const struct attn_request *r)
{
    const struct attn_shape *s = &r->shape;
    size_t kvb = kv_bytes(s, attn_dtype_size(r->params.dtype));
    bool split = r->outputs == ATTN_OUT_OUTPUT && s->h / s->h_kv * s->n <= ATTN_LOOP_ROWS &&
                 kvb / ATTN_WIN_BYTES >= 2 && s->L >= 2;
    return split ? kvb / ATTN_WIN_BYTES : 0;
}

/* Rows [rb, re) (a part of the pass) with the bits the whole pass gives
 * them: its tiles (per kv head, from the head's first row, B rows) are run
 * whole, the ones that straddle the range into scratch; a decode the whole
 * pass splits by keys is run whole and its rows copied. */
static enum core_status forward_kv_part(const struct attn_run *x, const struct attn_inputs *in,
                                        const struct attn_kv_view *kv,
                                        struct attn_result *out, struct attn_ws *ws,
                                        size_t rb, size_t re, const struct attn_win *w)
{
    const struct attn_request *r = &x->r;
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype);
    size_t rows = s->h * s->n, R = s->h / s->h_kv * s->n;
    if (key_windows(r))
        return piece_copy(x, in, kv, out, ws, 0, rows, rb, re, w, true);
    size_t B = attn_tile_rows(r, w, R, s->L, esz), n_empty = 0;
    for (size_t t0 = rb - (rb % R) % B; t0 < re;) {
        size_t g1 = (t0 / R + 1) * R, t1 = t0 + B < g1 ? t0 + B : g1;
        out->n_empty = 0;
        enum core_status st = t0 >= rb && t1 <= re
                                  ? attn_forward_kv_serial(x, in, kv, out, ws, t0, t1, w)
                                  : piece_copy(x, in, kv, out, ws, t0, t1, t0 > rb ? t0 : rb,
                                               t1 < re ? t1 : re, w, false);
        if (st != CORE_OK)
            return st;
        n_empty += out->n_empty;
        t0 = t1;
    }
    out->n_empty = n_empty;
    return CORE_OK;
}

/* attn_forward_kv_serial, or the same pass split into pieces: by key
 * windows for a long decode (always, see ATTN_WIN_BYTES), by query-row
 * tiles for a large pass when ws has a pool or a stop (which is read
 * between tiles; the tiles are the serial pass's, so the bits are the
 * same). Only whole passes are split. */
static enum core_status forward_kv_split(const struct attn_run *x,
                                         const struct attn_inputs *in,
                                         const struct attn_kv_view *kv,
                                         struct attn_result *out, struct attn_ws *ws,
                                         size_t rb, size_t re, const struct attn_win *w)
{
    const struct attn_request *r = &x->r;
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype);
    size_t rows = s->h * s->n, R = s->h / s->h_kv * s->n;
    if (w->part || w->kw != s->L)
        return attn_forward_kv_serial(x, in, kv, out, ws, rb, re, w);
    if (rb != 0 || re != rows)
        return forward_kv_part(x, in, kv, out, ws, rb, re, w);
    size_t nwin = key_windows(r);
    if (nwin)
        return split_keys(x, in, kv, out, ws, nwin < ATTN_SPLIT_WIN ? nwin : ATTN_SPLIT_WIN);
    size_t B = attn_tile_rows(r, w, R, s->L, esz), tiles = s->h_kv * ((R + B - 1) / B), macs;
    if ((!ws->pool && !ws->stop) || tiles < 2 || R <= ATTN_LOOP_ROWS ||
        (core_mul3(rows, s->L, s->d_k + s->d_v, &macs) && macs < ATTN_SPLIT_MACS))
        return attn_forward_kv_serial(x, in, kv, out, ws, rb, re, w);
    return split_rows(x, in, kv, out, ws, B, R, tiles);
}

/* forward_kv_split, with the output always computed by the output-only
 * pass: a request that also returns scores or weights gets its output
 * from the very algorithm (key blocks, windows, tiles) that output alone
 * would use, and the scores/weights from a second pass without P·V, so
 * the output's bits do not depend on `return`. */
enum core_status attn_forward_kv_ws(const struct attn_run *x, const struct attn_inputs *in,
                                    const struct attn_kv_view *kv, struct attn_result *out,
                                    struct attn_ws *ws, size_t rb, size_t re,
                                    const struct attn_win *w)
{
    unsigned o = x->r.outputs;
    if (!(o & ATTN_OUT_OUTPUT) || o == ATTN_OUT_OUTPUT || w->part)
        return forward_kv_split(x, in, kv, out, ws, rb, re, w);
    struct attn_run y = *x;
    y.r.outputs = ATTN_OUT_OUTPUT;
    enum core_status st = forward_kv_split(&y, in, kv, out, ws, rb, re, w);
    if (st != CORE_OK)
        return st;
    y.r.outputs = o & ~(unsigned)ATTN_OUT_OUTPUT;
    return forward_kv_split(&y, in, kv, out, ws, rb, re, w);
}
