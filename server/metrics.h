/*
 * server/metrics.h — request counters and latency histograms, rendered as
 * Prometheus text for GET /metrics (through api_ctx.metrics).
 *
 * Series: attnd_requests_total{route,code}, attnd_request_duration_seconds
 * (histogram by route), attnd_requests_in_flight, attnd_connections_open,
 * attnd_request_bytes_total, attnd_key_requests_total{key},
 * attnd_rate_limited_total{key}, attnd_deadline_exceeded_total,
 * attnd_cancelled_total, attnd_requests_on_pool,
 * attnd_response_bytes_total, and, when a session store is attached,
 * attnd_sessions, attnd_kv_cache_bytes, attnd_session_evictions_total,
 * attnd_session_expirations_total. Routes are templates (bounded set); the
 * table folds anything past its capacity into route="other".
 */
#ifndef ATTND_SERVER_METRICS_H
#define ATTND_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct sess_store;
struct srv_metrics;

struct srv_metrics *srv_metrics_new(void);
void srv_metrics_free(struct srv_metrics *m);

/* Sessions gauges and counters come from this store (may be NULL). */
void srv_metrics_set_store(struct srv_metrics *m, struct sess_store *st);

void srv_metrics_begin(struct srv_metrics *m);          /* in-flight + 1 */
void srv_metrics_connection(struct srv_metrics *m, int delta);  /* opened +1, closed -1 */
/* One finished request: in-flight - 1 and the counters. route NULL:
 * "other"; key: the API key's name, or NULL for none. */
void srv_metrics_end(struct srv_metrics *m, const char *route, int status,
                     uint64_t bytes_in, uint64_t bytes_out, double seconds, const char *key);

enum srv_metric_event {
    SRV_EV_RATE_LIMITED,            /* attnd_rate_limited_total{key} */
    SRV_EV_DEADLINE,                /* attnd_deadline_exceeded_total */
    SRV_EV_CANCELLED,               /* attnd_cancelled_total */
    SRV_EV_POOL_IN,                 /* attnd_requests_on_pool + 1 */
    SRV_EV_POOL_OUT,                /* attnd_requests_on_pool - 1 */
};

/* Count one event; key: the API key's name, NULL: none. */
void srv_metrics_count(struct srv_metrics *m, enum srv_metric_event ev, const char *key);

/* api_metrics_fn: malloc'd Prometheus text, *len its length; NULL on OOM. */
char *srv_metrics_render(void *m, size_t *len);

#endif
