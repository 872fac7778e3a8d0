/*
 * server/worker.h — the compute threads' attention scratch and the core's
 * helper pool (server/worker.c).
 */
#ifndef ATTND_SERVER_WORKER_H
#define ATTND_SERVER_WORKER_H

#include <stdbool.h>

struct attn_ws;

/* Before the first request: the helper pool for `workers` compute threads
 * on `cpus` CPUs (min(workers, cpus) - 1 helpers, none below two), which
 * joins a pass only while may_help(arg) answers true. */
void srv_worker_start(unsigned workers, unsigned cpus, bool (*may_help)(void *arg), void *arg);

/* Whether `threads` threads with the stacks of libuv's pool (8 MiB each)
 * can exist at once: each is made and all are joined again. 0, or the
 * errno of the first that could not be made (EAGAIN: no room in the
 * address space, ulimit -v, or a thread limit), with *made the number
 * made before it. */
int srv_worker_pool_fits(unsigned threads, unsigned *made);

/* The calling pool thread's attention scratch (created on first use, freed
 * by srv_worker_free); NULL if it cannot be allocated. */
struct attn_ws *srv_worker_ws(void);

/* After the pool's threads are gone (uv_library_shutdown). */
void srv_worker_free(void);

#endif
