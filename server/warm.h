/*
 * server/warm.h — the --warm-up requests at start-up (api/warm.h), run on
 * every thread of the compute pool before the transport starts.
 */
#ifndef ATTND_SERVER_WARM_H
#define ATTND_SERVER_WARM_H

#include <stdatomic.h>
#include <stdbool.h>

#include <uv.h>

#include "api/api.h"
#include "server/config.h"

/* On the loop thread, before the transport starts: each of the pool's
 * `threads` threads runs cfg's --warm-up requests in turn (each with its
 * own scratch; the pool's threads start with it), with *warming set
 * meanwhile. The loop runs until those jobs are done, so handles already
 * on it (the signals) are served meanwhile; once *stop is set, no thread
 * starts another shape, and the caller, which set it, does not listen.
 * Logs each shape warmed at info; false (logged at error) when one was not
 * answered 200, true otherwise, stopped or not. */
bool srv_warm_up(uv_loop_t *loop, struct api_ctx *ctx, const struct srv_config *cfg,
                 unsigned threads, atomic_bool *warming, const atomic_bool *stop);

#endif
