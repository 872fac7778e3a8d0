/*
 * server/metrics.c — a small fixed table of per-route counters behind one
 * mutex (updates come from the transport threads, renders from a worker), and a
 * Prometheus text renderer into a growing buffer. A mutex rather than
 * atomics: an update touches a dozen fields of one route and costs far less
 * than the request it counts.
 */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/store.h"

#define MAX_ROUTES 64
#define MAX_CODES 16                    /* status codes a route; the rest: "other" */
#define CODE_OTHER 0
#define N_BUCKETS 14
#define MAX_NAMES 63                    /* key-name series; the rest fold into "other" */
#define MAX_KEYS (MAX_NAMES + 2)        /* and "other" and "-" (no key) beside them */

static const double bucket_le[N_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

struct route_stats {
    char name[96];                      /* route template */
    int codes[MAX_CODES];               /* HTTP status of each counter */
    uint64_t code_count[MAX_CODES];
    size_t n_codes;
    uint64_t bucket[N_BUCKETS];         /* non-cumulative counts */
    uint64_t count;                     /* all observations (+Inf) */
    double sum;                         /* seconds */
};

struct key_stats {
    char name[64];                      /* API key name, or "-" for none */
    uint64_t requests, rate_limited;
};

struct srv_metrics {
    pthread_mutex_t mu;
    struct key_stats keys[MAX_KEYS];
    size_t n_keys, n_names;             /* slots in use; of them, key names' */
    uint64_t deadline_exceeded, cancelled;
    int64_t on_pool;                    /* queued for or computing on the pool */
    struct route_stats routes[MAX_ROUTES];
    size_t n_routes;
    int64_t in_flight;
    int64_t connections;                /* open TCP connections */
    uint64_t bytes_in, bytes_out;
    struct sess_store *store;
};

struct srv_metrics *srv_metrics_new(void)
{
    struct srv_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(struct srv_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_set_store(struct srv_metrics *m, struct sess_store *st)
{
    pthread_mutex_lock(&m->mu);
    m->store = st;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_begin(struct srv_metrics *m)
{
    pthread_mutex_lock(&m->mu);
    m->in_flight++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_connection(struct srv_metrics *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->connections += delta;
    pthread_mutex_unlock(&m->mu);
}

/* The route's slot; the last slot is "other" once the table is full. */
static struct route_stats *route_slot(struct srv_metrics *m, const char *route)
{
    if (!route || !route[0] || strlen(route) >= sizeof m->routes[0].name)
        route = "other";
    for (size_t i = 0; i < m->n_routes; i++)
        if (strcmp(m->routes[i].name, route) == 0)
            return &m->routes[i];
    if (m->n_routes >= MAX_ROUTES - 1)   /* "other" takes the last slot */
        route = "other";
    for (size_t i = 0; i < m->n_routes; i++)
        if (strcmp(m->routes[i].name, route) == 0)
            return &m->routes[i];
    struct route_stats *r = &m->routes[m->n_routes++];
    memcpy(r->name, route, strlen(route) + 1);
    return r;
}

/* The status's counter; once the table is full the last slot is
 * code="other" (status 0), so a status past it is never counted under
 * another status's label. */
static void count_code(struct route_stats *r, int status)
{
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < r->n_codes; i++)
            if (r->codes[i] == status) {
                r->code_count[i]++;
                return;
            }
        if (r->n_codes < MAX_CODES - 1)
            break;
        status = CODE_OTHER;
    }
    r->codes[r->n_codes] = status;
    r->code_count[r->n_codes++] = 1;
}

/* The key's slot: the first MAX_NAMES names have one each, later names
 * share "other"; "-" (the clients without a key) has its own beside them,
 * whenever it comes. */
static struct key_stats *key_slot(struct srv_metrics *m, const char *key)
{
    if (!key || !key[0] || strlen(key) >= sizeof m->keys[0].name)
        key = "-";
    bool dash = strcmp(key, "-") == 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n_keys; i++)
            if (strcmp(m->keys[i].name, key) == 0)
                return &m->keys[i];
        if (dash || m->n_names < MAX_NAMES)
            break;
        key = "other";
    }
    if (!dash && strcmp(key, "other") != 0)
        m->n_names++;
    struct key_stats *k = &m->keys[m->n_keys++];
    memcpy(k->name, key, strlen(key) + 1);
    return k;
}

void srv_metrics_count(struct srv_metrics *m, enum srv_metric_event ev, const char *key)
{
    pthread_mutex_lock(&m->mu);
    switch (ev) {
    case SRV_EV_RATE_LIMITED:
        key_slot(m, key)->rate_limited++;
        break;
    case SRV_EV_DEADLINE:
        m->deadline_exceeded++;
        break;
    case SRV_EV_CANCELLED:
        m->cancelled++;
        break;
    case SRV_EV_POOL_IN:
        m->on_pool++;
        break;
    case SRV_EV_POOL_OUT:
        m->on_pool--;
        break;
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_end(struct srv_metrics *m, const char *route, int status,
                     uint64_t bytes_in, uint64_t bytes_out, double seconds, const char *key)
{
    pthread_mutex_lock(&m->mu);
    if (key)
        key_slot(m, key)->requests++;
    m->in_flight--;
    m->bytes_in += bytes_in;
    m->bytes_out += bytes_out;
    struct route_stats *r = route_slot(m, route);
    count_code(r, status);
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bucket_le[b])
        b++;
    if (b < N_BUCKETS)
        r->bucket[b]++;
    r->count++;
    r->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---------------------------------------------------------- */

struct out {
    char *buf;
    size_t len, cap;
    bool oom;
};

__attribute__((format(printf, 2, 3)))
static void outf(struct out *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *nb = realloc(o->buf, cap);
        if (!nb) {
            o->oom = true;
            return;
        }
        o->buf = nb;
        o->cap = cap;
    }
}

static void render_requests(struct out *o, const struct srv_metrics *m)
{
    outf(o, "# HELP attnd_requests_total HTTP requests answered, by route template and status code.\n"
            "# TYPE attnd_requests_total counter\n");
    for (size_t i = 0; i < m->n_routes; i++) {
        const struct route_stats *r = &m->routes[i];
        for (size_t c = 0; c < r->n_codes; c++) {
            char code[16];
            if (r->codes[c] == CODE_OTHER)
                snprintf(code, sizeof code, "other");
            else
                snprintf(code, sizeof code, "%d", r->codes[c]);
            outf(o, "attnd_requests_total{route=\"%s\",code=\"%s\"} %llu\n", r->name, code,
                 (unsigned long long)r->code_count[c]);
        }
    }
    outf(o, "# HELP attnd_request_duration_seconds Time from request headers to response sent.\n"
            "# TYPE attnd_request_duration_seconds histogram\n");
    for (size_t i = 0; i < m->n_routes; i++) {
        const struct route_stats *r = &m->routes[i];
        uint64_t cum = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cum += r->bucket[b];
            outf(o, "attnd_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                 r->name, bucket_le[b], (unsigned long long)cum);
        }
        outf(o, "attnd_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                "attnd_request_duration_seconds_sum{route=\"%s\"} %.9g\n"
                "attnd_request_duration_seconds_count{route=\"%s\"} %llu\n",
             r->name, (unsigned long long)r->count, r->name, r->sum, r->name,
             (unsigned long long)r->count);
    }
    outf(o, "# HELP attnd_requests_in_flight Requests received and not yet answered.\n"
            "# TYPE attnd_requests_in_flight gauge\n"
            "attnd_requests_in_flight %lld\n"
            "# HELP attnd_connections_open Client connections open.\n"
            "# TYPE attnd_connections_open gauge\n"
            "attnd_connections_open %lld\n"
            "# HELP attnd_request_bytes_total Request body bytes received.\n"
            "# TYPE attnd_request_bytes_total counter\n"
            "attnd_request_bytes_total %llu\n"
            "# HELP attnd_response_bytes_total Response body bytes sent.\n"
            "# TYPE attnd_response_bytes_total counter\n"
            "attnd_response_bytes_total %llu\n",
         (long long)m->in_flight, (long long)m->connections,
         (unsigned long long)m->bytes_in,
         (unsigned long long)m->bytes_out);
    outf(o, "# HELP attnd_key_requests_total Requests answered, by API key name.\n"
            "# TYPE attnd_key_requests_total counter\n");
    for (size_t i = 0; i < m->n_keys; i++)
        if (strcmp(m->keys[i].name, "-") != 0)
            outf(o, "attnd_key_requests_total{key=\"%s\"} %llu\n", m->keys[i].name,
                 (unsigned long long)m->keys[i].requests);
    outf(o, "# HELP attnd_rate_limited_total Requests refused with 429 rate_limited, by API "
            "key name (\"-\": clients without a key, limited by address).\n"
            "# TYPE attnd_rate_limited_total counter\n");
    uint64_t limited = 0;
    for (size_t i = 0; i < m->n_keys; i++)
        if (m->keys[i].rate_limited) {
            limited += m->keys[i].rate_limited;
            outf(o, "attnd_rate_limited_total{key=\"%s\"} %llu\n", m->keys[i].name,
                 (unsigned long long)m->keys[i].rate_limited);
        }
    if (!limited)
        outf(o, "attnd_rate_limited_total{key=\"-\"} 0\n");
    outf(o, "# HELP attnd_deadline_exceeded_total Requests stopped at their deadline "
            "(504 deadline_exceeded).\n"
            "# TYPE attnd_deadline_exceeded_total counter\n"
            "attnd_deadline_exceeded_total %llu\n"
            "# HELP attnd_cancelled_total Requests whose client hung up while they were "
            "on the compute pool (their computation stops at its next piece).\n"
            "# TYPE attnd_cancelled_total counter\n"
            "attnd_cancelled_total %llu\n"
            "# HELP attnd_requests_on_pool Requests queued for or computing on the compute pool.\n"
            "# TYPE attnd_requests_on_pool gauge\n"
            "attnd_requests_on_pool %lld\n",
         (unsigned long long)m->deadline_exceeded, (unsigned long long)m->cancelled,
         (long long)m->on_pool);
}

static void render_sessions(struct out *o, struct sess_store *st)
{
    struct sess_stats s;
    sess_store_stats(st, &s);
    outf(o, "# HELP attnd_sessions Live sessions.\n"
            "# TYPE attnd_sessions gauge\n"
            "attnd_sessions %zu\n"
            "# HELP attnd_kv_cache_bytes Bytes accounted to session KV caches.\n"
            "# TYPE attnd_kv_cache_bytes gauge\n"
            "attnd_kv_cache_bytes %zu\n"
            "# HELP attnd_session_evictions_total Sessions evicted by the LRU policy.\n"
            "# TYPE attnd_session_evictions_total counter\n"
            "attnd_session_evictions_total %llu\n"
            "# HELP attnd_session_expirations_total Sessions removed by TTL.\n"
            "# TYPE attnd_session_expirations_total counter\n"
            "attnd_session_expirations_total %llu\n",
         s.sessions, s.bytes,
         (unsigned long long)s.evictions, (unsigned long long)s.expirations);
    outf(o, "# HELP attnd_journal_bytes Bytes of the current session journal.\n"
            "# TYPE attnd_journal_bytes gauge\n"
            "attnd_journal_bytes %llu\n"
            "# HELP attnd_snapshot_bytes Bytes of the last session snapshot.\n"
            "# TYPE attnd_snapshot_bytes gauge\n"
            "attnd_snapshot_bytes %llu\n"
            "# HELP attnd_journal_records_total Records written to the journal.\n"
            "# TYPE attnd_journal_records_total counter\n"
            "attnd_journal_records_total %llu\n"
            "# HELP attnd_journal_write_failures_total Changes refused (503 "
            "storage_unavailable): their journal record could not be written.\n"
            "# TYPE attnd_journal_write_failures_total counter\n"
            "attnd_journal_write_failures_total %llu\n"
            "# HELP attnd_journal_lost_total Best-effort records (evictions, expiries, "
            "uses) and fsyncs that failed.\n"
            "# TYPE attnd_journal_lost_total counter\n"
            "attnd_journal_lost_total %llu\n"
            "# HELP attnd_snapshots_total Session snapshots written.\n"
            "# TYPE attnd_snapshots_total counter\n"
            "attnd_snapshots_total %llu\n"
            "# HELP attnd_snapshot_failures_total Session snapshots that failed (the "
            "journal is kept and grows until one succeeds).\n"
            "# TYPE attnd_snapshot_failures_total counter\n"
            "attnd_snapshot_failures_total %llu\n",
         (unsigned long long)s.journal_bytes, (unsigned long long)s.snapshot_bytes,
         (unsigned long long)s.journal_records, (unsigned long long)s.journal_failures,
         (unsigned long long)s.journal_lost, (unsigned long long)s.snapshots,
         (unsigned long long)s.snapshot_failures);
    uint64_t kept_files, kept_bytes;
    sess_store_kept_files(st, &kept_files, &kept_bytes);
    outf(o, "# HELP attnd_state_kept_files Files in the state directory kept for a look "
            "(copies of damaged files, files set aside), which attnd never removes.\n"
            "# TYPE attnd_state_kept_files gauge\n"
            "attnd_state_kept_files %llu\n"
            "# HELP attnd_state_kept_bytes Bytes of the files kept for a look.\n"
            "# TYPE attnd_state_kept_bytes gauge\n"
            "attnd_state_kept_bytes %llu\n",
         (unsigned long long)kept_files, (unsigned long long)kept_bytes);
}

char *srv_metrics_render(void *arg, size_t *len)
{
    struct srv_metrics *m = arg;
    struct out o = {.cap = 8192};
    o.buf = malloc(o.cap);
    if (!o.buf)
        return NULL;
    pthread_mutex_lock(&m->mu);
    render_requests(&o, m);
    struct sess_store *st = m->store;
    pthread_mutex_unlock(&m->mu);
    if (st)                             /* the store has its own locks */
        render_sessions(&o, st);
    if (o.oom) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}
