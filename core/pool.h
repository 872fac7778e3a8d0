/*
 * core/pool.h — the helper pool (attn_pool): splitting one large attention
 * pass over cores.
 */
#ifndef ATTND_CORE_POOL_H
#define ATTND_CORE_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct attn_ws;     /* core/attn.h */

/*
 * Splitting one large pass over cores. An attn_pool is a few helper threads
 * that join the calling thread on the pieces of one pass: query-row tiles of
 * a prefill, key windows of a long decode (attn_forward_kv_keys +
 * attn_combine). A workspace with a pool attached (attn_ws_set_pool) splits
 * every pass that is large enough; small passes run on the calling thread
 * alone. The pieces depend only on the request, never on how many helpers
 * join, so results do not depend on the load. One pass uses the pool at a
 * time: a pass that finds it busy, or whose may_help(arg) answers false
 * (the server: other requests are waiting for a worker), runs all of its
 * pieces on the calling thread; helpers also ask may_help before each piece
 * they take, so they step back as soon as other work arrives. A helper runs
 * a job's pieces with the caller's stop (attn_ws_set_stop) attached to its
 * own workspace. BLAS stays single-threaded inside pieces. may_help may be
 * NULL (always help).
 */
struct attn_pool;
struct attn_pool *attn_pool_new(size_t helpers, bool (*may_help)(void *arg), void *arg);
void attn_pool_free(struct attn_pool *pool);

/* Runs fn(arg, i, ws_i) for every piece i < pieces and returns when all are
 * done; ws_i is the calling thread's ws or a helper's own workspace. pool
 * may be NULL (everything runs on the calling thread). Before each piece
 * the stop attached to ws (attn_ws_set_stop) is read: once it is due, the
 * remaining pieces are skipped and the call returns false (true: every
 * piece ran). */
typedef void (*attn_piece_fn)(void *arg, size_t piece, struct attn_ws *ws);
bool attn_pool_run(struct attn_pool *pool, attn_piece_fn fn, void *arg, size_t pieces,
                   struct attn_ws *ws);

#endif
