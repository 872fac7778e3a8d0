/*
 * core/attn_pass.h — what core/attn.c and core/attn_split.c share of one
 * forward pass (internal to core/): the workspace's layout, the key window
 * a pass reads, and the pass on the calling thread that the splitting in
 * attn_split.c cuts into pieces.
 *
 * attn.c owns the workspace, the validation and the serial pass (the
 * float/double implementation of attn_impl.h); attn_split.c decides
 * whether a pass runs serially, split by query-row tiles over the helper
 * pool, or split by key windows and combined, and runs parts of a pass
 * with the bits the whole pass gives them.
 */
#ifndef ATTND_CORE_ATTN_PASS_H
#define ATTND_CORE_ATTN_PASS_H

#include <stddef.h>

#include "attn.h"
#include "attn_run.h"

/* Tiles of at most this many query rows use plain loops instead of gemm
 * (decode is memory-bound; see tests/bench/bench_core.c). */
#ifndef ATTN_LOOP_ROWS
#define ATTN_LOOP_ROWS 4
#endif

/* The most query rows of one tile (attn.c sizes tiles; attn_check.c bounds
 * a tile's scratch by it). */
#ifndef ATTN_TILE_MAX
#define ATTN_TILE_MAX 256
#endif

/* Regions: prepared k, v; their pointers; tiles' scratch; pieces' parts;
 * the run's resolved positions; rows of a paged view whose pages do not lie
 * side by side (the key-blocked pass's one block or superblock of K and V;
 * a gemm tile's K rows, and V rows in WS_PAGE_V); 2-byte k or v widened
 * whole (attn_forward_half, passes that do not read them in place); and the
 * widening scratch of the key-blocked pass that does (a block or a
 * superblock of keys). */
enum { WS_KV, WS_PTR, WS_BLK, WS_PART, WS_RUN, WS_PAGE, WS_PAGE_V, WS_HALF, WS_WIDE, WS_N };

struct attn_ws {
    void *buf[WS_N];                /* 64-byte aligned regions */
    size_t cap[WS_N];               /* bytes of each region */
    struct attn_pool *pool;         /* helpers for large passes, or NULL */
    struct attn_stop *stop;         /* early stop of passes (core/stop.h), or NULL */
};

/* The keys one pass reads: [k0, k0 + kw) of the cache's L. */
struct attn_win {
    size_t k0, kw;                  /* window start and width */
    struct attn_partial *part;      /* key-split pass: where m, l, o go; else NULL */
};

/* Region i of ws with at least `need` bytes, or NULL (out of memory). */
void *attn_ws_reserve(struct attn_ws *ws, int i, size_t need);

/* Query rows per tile of r's pass against w: R rows per kv head, L keys of
 * esz bytes. */
size_t attn_tile_rows(const struct attn_request *r, const struct attn_win *w, size_t R, size_t L,
                      size_t esz);

/* forward_kv of rows [rb, re) against window w, on a workspace that
 * exists, on the calling thread. */
enum core_status attn_forward_kv_serial(const struct attn_run *x, const struct attn_inputs *in,
                                        const struct attn_kv_view *kv, struct attn_result *out,
                                        struct attn_ws *ws, size_t rb, size_t re,
                                        const struct attn_win *w);

/* parts [np] of x's output-only pass combined into out->output. */
enum core_status attn_combine_run(const struct attn_run *x, const struct attn_partial *parts,
                                  size_t np, struct attn_result *out);

/* (core/attn_split.c) the pass of rows [rb, re) against w, serial or split
 * into pieces, with the output always computed by the output-only pass. */
enum core_status attn_forward_kv_ws(const struct attn_run *x, const struct attn_inputs *in,
                                    const struct attn_kv_view *kv, struct attn_result *out,
                                    struct attn_ws *ws, size_t rb, size_t re,
                                    const struct attn_win *w);

#endif
