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

/* On the loop thread, before it runs anything else: each of the pool's
 * `threads` threads runs cfg's --warm-up requests in turn (each with its
 * own scratch; the pool's threads start with it), with *warming set
 * meanwhile. Logs each shape at info; false (logged at error) when one was
 * not answered 200. */
bool srv_warm_up(uv_loop_t *loop, struct api_ctx *ctx, const struct srv_config *cfg,
                 unsigned threads, atomic_bool *warming);

#endif
