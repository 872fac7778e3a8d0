/*
 * server/loop.h — the process around the transport: the libuv loop with its
 * signals (SIGINT/SIGTERM drain, SIGHUP log reopen), the housekeeping timer
 * (session TTL sweeps), the compute pool's helper policy, the session
 * store's life (load on start, save on drain) and the drain itself.
 */
#ifndef ATTND_SERVER_LOOP_H
#define ATTND_SERVER_LOOP_H

#include "server/config.h"

/* Run attnd until drained; returns the process exit code. cfg must outlive
 * the call (api_ctx points into it). */
int srv_loop_run(struct srv_config *cfg);

#endif
