/*
 * server/log.h — attnd's log: one line per request and per process event.
 *
 * JSON lines by default (one object per line: ts, level, msg and fields),
 * or a short human form with --log-format text. Request lines carry the
 * method, the route template (never the path: it can hold a session id),
 * status, bytes in and out, microseconds, the API key's name, the request
 * id (the client's X-Request-Id when it is well-formed, else one made
 * here) and a failed request's error code; never a body, a key or any
 * other header.
 * Lines go to stdout or to --log-file, which SIGHUP reopens (log rotation).
 * Thread-safe: a line is written whole under a lock. Request lines are
 * batched (written within 50 ms, before any event line, on reopen and at
 * srv_log_close); event lines are written at once.
 */
#ifndef ATTND_SERVER_LOG_H
#define ATTND_SERVER_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "server/config.h"

/* Start logging; path "" or NULL means stdout. Returns 0 or -errno. */
int srv_log_open(enum srv_log_format fmt, const char *path);

/* Reopen the log file (SIGHUP); no-op on stdout. Returns 0 or -errno. */
int srv_log_reopen(void);

void srv_log_close(void);

/* One request: method as sent, route template (NULL: "-"), the name of the
 * API key it carried (NULL: none; never the key itself), its request id
 * (NULL: none) and the error code it was answered with (NULL: none). */
void srv_log_request(const char *method, const char *route, int status,
                     uint64_t bytes_in, uint64_t bytes_out, uint64_t us, const char *key,
                     const char *id, const char *code);

/* A process event; level is "info", "warn" or "error". kv holds extra
 * key/value pairs of text (NULL-terminated: k1, v1, k2, v2, ..., NULL). */
void srv_log_event(const char *level, const char *msg, const char *const *kv);

/* Format why a file could not be used into why (for the caller to log or
 * print); returns -1, so that `return srv_whyf(...)` reports a failure. */
int srv_whyf(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* What a file's mode lets users outside its owner and group do, for such a
 * message: "read", "change", "read and change", "run" ... (static text). */
const char *srv_mode_others(unsigned mode);

/* What to do about a secret file that other users may use, after "...; ":
 * chmod for a file of one's own, defaultMode for a Kubernetes Secret volume
 * (mounted 0644 unless told; 0440 with the pod's fsGroup is read by its
 * group, which the checks accept). */
#define SRV_SECRET_MODE_FIX \
    "chmod 600 (or 640) it; for a Kubernetes Secret volume, set defaultMode: 0440 " \
    "(the pod's fsGroup reads it)"

/* printf-style message as a plain event. */
void srv_log_msgf(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
