/*
 * core/store.h — the session store: id -> session (a KV cache with its fixed
 * parameters), with per-session locks, TTL expiry, byte accounting against
 * global limits, eviction policy, and atomic save/restore to a directory.
 *
 * Thread-safe: the api worker threads call it concurrently; requests on one
 * session are serialised, a reader never sees half an append, and a session
 * being deleted or expired is never freed while a request still uses it.
 * Knows neither HTTP nor JSON.
 *
 * (The sessions work fills in the session-level API below the store API.)
 */
#ifndef ATTND_CORE_STORE_H
#define ATTND_CORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum sess_policy {
    SESS_POLICY_REJECT = 0,     /* writes over budget: CORE_ECAPACITY */
    SESS_POLICY_LRU,            /* evict least recently used idle sessions */
};

struct sess_config {
    size_t max_sessions;        /* live sessions at most */
    size_t max_cache_bytes;     /* accounted bytes over all sessions at most */
    double default_ttl_s;       /* ttl of a session that names none */
    size_t default_max_tokens;  /* max_tokens of a session that names none */
    enum sess_policy policy;
    const char *replica_id;     /* prefix of new ids ("r1."), or NULL */
};

/* Aggregate numbers for /metrics and /v1/info. */
struct sess_stats {
    size_t sessions;            /* live sessions */
    size_t bytes;               /* accounted cache bytes */
    uint64_t created;           /* sessions ever created */
    uint64_t evictions;         /* removed by the LRU policy */
    uint64_t expirations;       /* removed by TTL */
};

struct sess_store;

/* Clock in seconds (monotonic); injectable for tests. */
typedef double (*sess_clock_fn)(void *arg);

struct sess_store *sess_store_new(const struct sess_config *cfg);
void sess_store_free(struct sess_store *st);
void sess_store_set_clock(struct sess_store *st, sess_clock_fn fn, void *arg);

/* Remove expired sessions; returns how many. Called from a libuv timer. */
size_t sess_store_sweep(struct sess_store *st);

void sess_store_stats(struct sess_store *st, struct sess_stats *out);

/* Log sink for save/load problems (a corrupt file is logged and skipped). */
typedef void (*sess_log_fn)(void *arg, const char *msg);

/* Write every session into dir atomically (temp file, fsync, rename). */
enum core_status sess_store_save(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg);

/* Restore the sessions saved in dir; bad files are logged and skipped. */
enum core_status sess_store_load(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg);

#endif
