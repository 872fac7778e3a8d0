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

/* The calling pool thread's attention scratch (created on first use, freed
 * by srv_worker_free); NULL if it cannot be allocated. */
struct attn_ws *srv_worker_ws(void);

/* After the pool's threads are gone (uv_library_shutdown). */
void srv_worker_free(void);

#endif
