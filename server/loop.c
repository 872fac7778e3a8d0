/*
 * server/loop.c — attnd's process: one libuv loop owns signals, timers, the
 * compute pool and (through server/http.c) the transport.
 *
 * Start: the open-file limit raised for --max-connections, or the cap
 * lowered to what it leaves room for (server/fdbudget.c), before anything
 * opens; UV_THREADPOOL_SIZE from --workers (before the first uv_queue_work),
 * single-threaded BLAS per worker (attn_blas_init(1)), the core's helper
 * pool that lets one large request use idle cores, the compute pool's
 * threads (made now: libuv aborts when it cannot), the session store
 * (restored from --state-dir's snapshot and journal), the --warm-up
 * requests on the pool (SIGINT/SIGTERM meanwhile: stop after the request
 * in hand, exit 0 without listening), the transport, the port file.
 * Run: a 1 s housekeeping timer queues a TTL sweep on the pool; a thread of
 * its own fsyncs the journal each second (--fsync everysec) and rewrites
 * it into a snapshot when it has outgrown the last one.
 * Drain (SIGINT/SIGTERM): ctx.draining = 1 (/readyz 503), stop accepting,
 * let in-flight requests finish, write a snapshot, close everything, exit 0;
 * past --drain-timeout, uploads and downloads are cut and, with requests
 * still computing, those answer 503 draining (server/http_work.c's
 * srv_http_cut), the snapshot is written once the answers are out (or
 * CUT_GRACE_MS has passed) and attnd exits 1. A second signal during a
 * drain, the final snapshot or the warm-up exits 1 at once as well.
 */
#include "server/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "api/api.h"
#include "api/spare.h"
#include "core/attn.h"
#include "core/store.h"
#include "server/fdbudget.h"
#include "server/http.h"
#include "server/keys.h"
#include "server/limits.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/resources.h"
#include "server/tls.h"
#include "server/warm.h"
#include "server/worker.h"

#define HOUSEKEEPING_MS 1000
/* Past --drain-timeout: how long the 503s of the requests still computing
 * (and the answers of those left to answer) get to leave, looked at every
 * CUT_POLL_MS. On a local network they leave in well under a millisecond;
 * a client that reads slowly is cut at the end of it. */
#define CUT_GRACE_MS 2000
#define CUT_POLL_MS 10
/* Past that grace, the requests still computing are cancelled: how long
 * their 503s get to leave (a pass stops within one piece). */
#define CANCEL_GRACE_MS 1000

struct proc {
    uv_loop_t loop;
    uv_signal_t sig_int, sig_term, sig_hup;
    uv_timer_t housekeeping;
    uv_timer_t drain_timer;         /* --drain-timeout */
    uv_timer_t finish_timer;        /* runs finish() outside the transport */
    uv_work_t sweep;                /* TTL sweep on the pool */
    bool sweeping;
    bool draining, finished;
    bool loop_ready;                /* uv_loop_init done */
    uv_handle_t *made[6];           /* the handles made: 3 timers, 3 signals */
    unsigned n_made;
    int exit_code;
    uint64_t cut_until;             /* uv_now: exit by then (drain timeout) */
    bool cancelled;                 /* past cut_until: the rest cancelled */
    const char *starting;           /* start: what a signal comes while (the
                                       pool's threads made, the state read),
                                       or NULL */
    struct srv_config *cfg;
    struct api_ctx ctx;
    struct srv_metrics *metrics;
    struct sess_store *store;
    struct srv_http *http;          /* freed after the helper pool stops */
    struct srv_tls *tls;            /* --tls-cert/--tls-key, or NULL */
    struct srv_keys *keys;          /* --api-key(-file), or NULL */
    struct srv_limits *limits;      /* --rate-limit, --max-inflight-per-key */
};

/* ---- the helper pool's policy ------------------------------------------- */

/* The helpers (server/worker.c) join a pass only while that request is the
 * only one computing, and in the --warm-up requests (one at a time, before
 * the transport starts: server/warm.c). */
static _Atomic(struct srv_http *) par_http;     /* p->http once it listens */
static atomic_bool par_warming;        /* srv_warm_up's jobs are running */

static bool par_may_help(void *arg)
{
    (void)arg;
    if (atomic_load(&par_warming))
        return true;
    struct srv_http *h = atomic_load(&par_http);
    return h && srv_http_working(h) <= 1;
}

/* ---- sessions ----------------------------------------------------------- */

static void store_log(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    srv_log_msgf(level == SESS_LOG_INFO ? "info" : "warn", "sessions: %s", msg);
}

/* mkdir -p dir (0700 for what it creates); 0 or -errno (-ENOTDIR when dir,
 * or a directory on its way, is another kind of file). */
static int make_dirs(const char *dir)
{
    char path[sizeof ((struct srv_config *)0)->state_dir];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return -ENAMETOOLONG;
    memcpy(path, dir, n + 1);
    for (char *q = path + 1; ; q++) {
        if (*q == '/' || *q == '\0') {
            char c = *q;
            *q = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST)
                return -errno;
            *q = c;
            if (c == '\0')
                break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return -errno;
    if (!S_ISDIR(sb.st_mode))
        return -ENOTDIR;                /* access() would say EACCES */
    return access(dir, W_OK | X_OK) == 0 ? 0 : -errno;
}

static struct sess_store *store_open(const struct srv_config *cfg)
{
    struct sess_config sc = {
        .max_sessions = cfg->max_sessions,
        .max_cache_bytes = cfg->max_cache_bytes,
        .default_ttl_s = cfg->session_ttl_s,
        .default_max_tokens = cfg->max_tokens,
        .max_tokens = cfg->max_tokens,
        .policy = cfg->cache_lru ? SESS_POLICY_LRU : SESS_POLICY_REJECT,
        .replica_id = cfg->replica_id[0] ? cfg->replica_id : NULL,
    };
    struct sess_store *st = sess_store_new(&sc);
    if (!st) {
        srv_log_msgf("error", "cannot create the session store");
        return NULL;
    }
    if (cfg->state_dir[0]) {
        int e = make_dirs(cfg->state_dir);
        if (e == -ENOTDIR) {
            srv_log_msgf("error", "--state-dir %s is not a directory (it, or a "
                         "component of its path, is another kind of file)", cfg->state_dir);
            sess_store_free(st);
            return NULL;
        }
        if (e != 0) {
            /* the ids: a container's volume is often owned by another
             * user than the image's (Kubernetes: securityContext.fsGroup) */
            srv_log_msgf("error", "--state-dir %s is not a writable directory: %s "
                         "(attnd runs as uid %ld, gid %ld)", cfg->state_dir, strerror(-e),
                         (long)getuid(), (long)getgid());
            sess_store_free(st);
            return NULL;
        }
        srv_log_msgf("info", "sessions: restoring from %s", cfg->state_dir);
        struct sess_journal_config jc = {
            .dir = cfg->state_dir, .fsync = (enum jnl_fsync)cfg->fsync_mode,
            .rewrite_min_bytes = cfg->snapshot_min_bytes, .log = store_log};
        enum core_status rc = sess_store_open_journal(st, &jc);
        if (rc != CORE_OK) {
            /* an I/O failure's file and cause are in the warnings the store
             * logged before: "input/output error" alone read as a disk's */
            srv_log_msgf("error", "--state-dir %s: cannot open the journal: %s",
                         cfg->state_dir, rc == CORE_EIO ? "a file could not be read or "
                         "written (the warnings before this line say which and why)"
                         : core_status_text(rc));
            sess_store_free(st);
            return NULL;
        }
        struct sess_stats s;
        sess_store_stats(st, &s);
        srv_log_msgf("info", "sessions restored from %s: %zu", cfg->state_dir,
                     s.sessions);
    }
    return st;
}

/*
 * The journal's thread: --fsync everysec and the snapshot rewrite run here
 * once a second, not on the compute pool, which an fsync or a snapshot on
 * a slow disk would hold for as long as it takes.
 */
static pthread_t jnl_thread;
static pthread_mutex_t jnl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jnl_cv = PTHREAD_COND_INITIALIZER;
static bool jnl_running, jnl_stop;

static void *jnl_main(void *arg)
{
    struct proc *p = arg;
    pthread_mutex_lock(&jnl_mu);
    while (!jnl_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += HOUSEKEEPING_MS / 1000;
        pthread_cond_timedwait(&jnl_cv, &jnl_mu, &ts);
        if (jnl_stop)
            break;
        pthread_mutex_unlock(&jnl_mu);
        if (p->cfg->fsync_mode == JNL_FSYNC_EVERYSEC)
            sess_store_journal_sync(p->store);
        sess_store_journal_maintain(p->store, false);
        pthread_mutex_lock(&jnl_mu);
    }
    pthread_mutex_unlock(&jnl_mu);
    return NULL;
}

static void jnl_thread_stop(void)
{
    pthread_mutex_lock(&jnl_mu);
    jnl_stop = true;
    pthread_cond_signal(&jnl_cv);
    pthread_mutex_unlock(&jnl_mu);
    if (jnl_running)
        pthread_join(jnl_thread, NULL);
    jnl_running = false;
}

static void store_save(struct proc *p)
{
    if (!p->store || !p->cfg->state_dir[0])
        return;
    jnl_thread_stop();              /* a snapshot it runs would skip this one */
    /* every change is in the journal already; a snapshot makes the next
     * start quick */
    struct sess_stats s;
    if (sess_store_journal_maintain(p->store, true) == CORE_OK) {
        sess_store_stats(p->store, &s);     /* after: the snapshot waited for the pool */
        srv_log_msgf("info", "sessions saved to %s: %zu", p->cfg->state_dir, s.sessions);
    } else
        srv_log_msgf("warn", "sessions: the final snapshot failed; the journal "
                     "in %s has every change", p->cfg->state_dir);
}

static void sweep_work(uv_work_t *w)
{
    struct proc *p = w->data;
    size_t n = sess_store_sweep(p->store);
    if (n > 0)
        srv_log_msgf("info", "sessions expired: %zu", n);
}

static void sweep_done(uv_work_t *w, int status)
{
    (void)status;
    struct proc *p = w->data;
    p->sweeping = false;
}

static void housekeeping_cb(uv_timer_t *t)
{
    struct proc *p = t->data;
    if (p->limits)
        srv_limits_sweep(p->limits, uv_hrtime());
    srv_http_sweep_reads(p->http);
    if (!p->store || p->sweeping || p->draining)
        return;
    p->sweep.data = p;
    if (uv_queue_work(&p->loop, &p->sweep, sweep_work, sweep_done) == 0)
        p->sweeping = true;
}

/* ---- drain and shutdown ------------------------------------------------- */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void close_all(struct proc *p);
static void exit_on_signal(void);
static void finish_cb(uv_timer_t *t);

static void finish(struct proc *p)
{
    if (p->finished)
        return;
    if (p->http && srv_http_seal(p->http) > 0) {
        /* a request reached the pool after the idle report: wait for it */
        uv_timer_start(&p->finish_timer, finish_cb, 10, 0);
        return;
    }
    p->finished = true;
    close_all(p);                   /* a signal from here on exits 1 at once */
    store_save(p);
    srv_http_stop(p->http);
}

static void finish_cb(uv_timer_t *t)
{
    finish(t->data);
}

/* The transport has no request in flight: finish on the next turn. */
static void on_idle(void *arg)
{
    struct proc *p = arg;
    uv_timer_start(&p->finish_timer, finish_cb, 0, 0);
}

/* After the cut: the snapshot and exit 1 once the answers owed are out,
 * or at cut_until, when the computations of those left to answer are
 * cancelled and get CANCEL_GRACE_MS more to send their 503s. The pool threads may still be running the cut requests,
 * whose changes can no longer be journaled (core/store.h's sess_commit),
 * so the snapshot holds only what was journaled; one of them holding its
 * session's lock (an append being rolled back) delays the snapshot until
 * it lets go. If the requests end and the answers are out before, finish()
 * may come first (on_idle): it exits 1 as well (p->exit_code). */
static void cut_wait_cb(uv_timer_t *t)
{
    struct proc *p = t->data;
    size_t owed = srv_http_owed(p->http);
    if (owed > 0 && uv_now(&p->loop) < p->cut_until)
        return;
    if (owed > 0 && !p->cancelled) {
        srv_log_msgf("warn", "drain timeout: %zu answer(s) not sent in %d ms: their "
                     "computations are stopped", owed, CUT_GRACE_MS);
        srv_http_cancel(p->http);       /* each answers 503 draining */
        p->cancelled = true;
        p->cut_until = uv_now(&p->loop) + CANCEL_GRACE_MS;
        return;
    }
    if (owed > 0)
        srv_log_msgf("warn", "drain timeout: %zu answer(s) not sent: cut", owed);
    exit_on_signal();               /* the loop is not turning while it saves */
    store_save(p);
    srv_log_msgf("info", "stopped (exit 1)");
    fflush(stdout);
    _exit(1);
}

static void drain_timeout_cb(uv_timer_t *t)
{
    struct proc *p = t->data;
    size_t busy = srv_http_working(p->http);
    if (busy == 0) {                    /* only uploads/downloads left: cut them */
        srv_log_msgf("warn", "drain timeout: closing %zu unfinished connection(s)",
                     srv_http_in_flight(p->http));
        finish(p);
        return;
    }
    p->exit_code = 1;
    size_t left = 0, cut = srv_http_cut(p->http, &left);
    srv_log_msgf("error", "drain timeout: %zu request(s) still computing: %zu answered 503 "
                 "draining (nothing of them applied), %zu left to answer for themselves "
                 "(answering already, or a change of theirs journaled); exiting 1 once "
                 "answered, in %d ms at most", busy, cut, left, CUT_GRACE_MS);
    p->cut_until = uv_now(&p->loop) + CUT_GRACE_MS;
    uv_timer_start(&p->drain_timer, cut_wait_cb, CUT_POLL_MS, CUT_POLL_MS);
}

static void start_drain(struct proc *p, const char *why)
{
    p->draining = true;
    atomic_store_explicit(&p->ctx.draining, 1, memory_order_relaxed);
    srv_log_msgf("info", "draining (%s): %zu request(s) in flight, timeout %gs", why,
                 srv_http_in_flight(p->http), p->cfg->drain_timeout_s);
    uv_timer_start(&p->drain_timer, drain_timeout_cb,
                   (uint64_t)(p->cfg->drain_timeout_s * 1000.0), 0);
    srv_http_quiesce(p->http, on_idle, p);
}

/* SIGHUP: certificate and key, API keys; a failure keeps what is in use. */
static void reload(struct proc *p)
{
    char why[1200];
    if (p->tls) {
        if (srv_tls_reload(p->tls, why, sizeof why) == 0)
            srv_log_msgf("info", "SIGHUP: TLS certificate and key reloaded");
        else
            srv_log_msgf("error", "SIGHUP: TLS reload failed, the old pair stays: %s", why);
    }
    if (p->keys && p->cfg->api_key_file[0]) {
        if (srv_keys_reload(p->keys, why, sizeof why) == 0)
            srv_log_msgf("info", "SIGHUP: API keys reloaded: %zu", srv_keys_count(p->keys));
        else
            srv_log_msgf("error", "SIGHUP: API key reload failed, the old keys stay: %s", why);
    }
}

/* Set by a signal in the warm-up (par_warming: nothing accepted yet); the
 * pool threads running it read it. */
static atomic_bool warm_stop;

static void signal_cb(uv_signal_t *s, int signum)
{
    struct proc *p = s->data;
    if (signum == SIGHUP) {
        int rc = srv_log_reopen();
        srv_log_msgf(rc == 0 ? "info" : "error", "SIGHUP: log reopened%s%s",
                     rc == 0 ? "" : ": ", rc == 0 ? "" : strerror(-rc));
        reload(p);
        return;
    }
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    if (p->starting) {              /* acted on once that is done */
        atomic_store(&warm_stop, true);
        srv_log_msgf("info", "%s while %s: stopping before listening", name, p->starting);
        return;
    }
    if (p->draining || atomic_load(&warm_stop)) {
        srv_log_msgf("warn", "second %s during %s: exiting now", name,
                     p->draining ? "drain" : "the warm-up");
        fflush(stdout);
        _exit(1);
    }
    if (atomic_load(&par_warming)) {
        atomic_store(&warm_stop, true);
        srv_log_msgf("info", "%s during the warm-up: stopping before listening", name);
        return;
    }
    start_drain(p, name);
}

/* ---- start -------------------------------------------------------------- */

/* Write the bound port atomically (temp file + rename). */
static int write_port_file(const char *path, unsigned port)
{
    char tmp[1100];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return -ENAMETOOLONG;
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -errno;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

_Static_assert(SRV_KEY_NAME_MAX == API_KEY_NAME_MAX, "one length of a key's name");

static bool check_key(void *arg, const char *token, char name[API_KEY_NAME_MAX])
{
    return srv_keys_check(arg, token, name);
}

/* TLS material and API keys: a file that cannot be used stops the start
 * with exit code 2, as a bad flag does. */
static bool load_secrets(struct proc *p)
{
    const struct srv_config *c = p->cfg;
    char why[1200];
    if (c->tls_cert[0]) {
        p->tls = srv_tls_open(c->tls_cert, c->tls_key, why, sizeof why);
        if (!p->tls) {
            srv_log_msgf("error", "%s", why);
            return false;
        }
        srv_tls_install(p->tls);
    }
    if (c->api_key_file[0] || c->api_key[0]) {
        p->keys = srv_keys_open(c->api_key_file, c->api_key, why, sizeof why);
        if (!p->keys) {
            srv_log_msgf("error", "%s", why);
            return false;
        }
    }
    p->limits = srv_limits_new(c->rate_limit, c->rate_burst, c->max_inflight_per_key);
    return p->limits != NULL;
}

static void init_ctx(struct proc *p)
{
    struct srv_config *c = p->cfg;
    struct api_config *a = &p->ctx.cfg;
    a->max_body_bytes = c->max_body_bytes;
    a->max_elements = c->max_elements;
    a->max_tokens = c->max_tokens;
    a->session_ttl_s = c->session_ttl_s;
    a->api_key = c->api_key[0] && !p->keys ? c->api_key : NULL;
    if (p->keys) {                          /* --api-key is one of them */
        a->auth = check_key;
        a->auth_arg = p->keys;
    }
    a->cors_origins = c->cors_origins[0] ? c->cors_origins : NULL;
    a->static_route = srv_http_asset_route;
    a->workers = (int)c->workers;
    a->version = ATTND_VERSION;
    p->ctx.store = p->store;
    p->ctx.metrics = srv_metrics_render;
    p->ctx.metrics_arg = p->metrics;
}

/* Before the warm-up: signals are served from then on; the housekeeping
 * timer starts with the transport (srv_warm_up runs the loop until its own
 * jobs are done). Each handle made is listed in p->made, so that a failure
 * part-way closes only those. 0 or a libuv error. */
static int made(struct proc *p, uv_handle_t *h, int rc)
{
    if (rc == 0)
        p->made[p->n_made++] = h;
    return rc;
}

static int init_handles(struct proc *p)
{
    uv_timer_t *timers[] = {&p->housekeeping, &p->drain_timer, &p->finish_timer};
    for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
        int rc = made(p, (uv_handle_t *)timers[i], uv_timer_init(&p->loop, timers[i]));
        if (rc != 0)
            return rc;
        timers[i]->data = p;
    }
    uv_signal_t *sigs[] = {&p->sig_int, &p->sig_term, &p->sig_hup};
    const int nums[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int rc = made(p, (uv_handle_t *)sigs[i], uv_signal_init(&p->loop, sigs[i]));
        if (rc == 0) {
            sigs[i]->data = p;
            rc = uv_signal_start(sigs[i], signal_cb, nums[i]);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* --max-connections within the open-file limit (server/fdbudget.c): raises
 * the soft limit, or lowers the cap with a warning (the default's too: a
 * replica that serves fewer connections than configured is worth an
 * operator's look); false if not even one connection fits. */
static bool budget_files(struct srv_config *c)
{
    struct srv_fd_budget b;
    int rc = srv_fd_budget(c->max_connections, c->http_threads, &b);
    if (rc != 0) {
        srv_log_msgf("error", "cannot read the open-file limit: %s", strerror(-rc));
        return false;
    }
    if (b.raise_error)
        srv_log_msgf("warn", "cannot raise the soft open-file limit from %lu towards %lu: %s",
                     b.soft, b.reserved + c->max_connections, strerror(b.raise_error));
    if (b.connections == 0) {
        srv_log_msgf("error", "the open-file limit (ulimit -n) is %lu: attnd keeps %lu "
                     "descriptors for its own files (more with more --http-threads) and "
                     "needs one more per connection", b.soft, b.reserved);
        return false;
    }
    if (b.connections < c->max_connections) {
        srv_log_msgf("warn",
                     "--max-connections %u lowered to %u: the open-file limit is %lu (hard "
                     "limit %lu) and attnd keeps %lu descriptors for its own files; raise the "
                     "hard limit (ulimit -Hn, LimitNOFILE=, --ulimit nofile=) to %lu to serve "
                     "%u", c->max_connections, b.connections, b.soft, b.hard, b.reserved,
                     b.reserved + c->max_connections, c->max_connections);
        c->max_connections = b.connections;
    }
    return true;
}

static void pool_nothing(uv_work_t *w)
{
    (void)w;
}

static void pool_nothing_done(uv_work_t *w, int status)
{
    (void)status;
    *(bool *)w->data = true;
}

/* libuv makes its pool's threads at the first uv_queue_work and aborts the
 * process when one cannot be made: under an address-space limit (ulimit
 * -v, systemd's LimitAS=) that would be at the first large request,
 * killed with every other in flight by SIGABRT and no word in the log.
 * So the threads are tried first (a clear error and exit 1), then made
 * here, before the sessions are read and anything is accepted. The loop
 * turns until the job is done: a signal meanwhile is served
 * (p->starting). */
static bool start_pool(struct proc *p, unsigned threads)
{
    unsigned made = 0;
    int e = srv_worker_pool_fits(threads, &made);
    if (e != 0) {
        srv_log_msgf("error", "cannot start the compute pool: %u of its %u threads (twice "
                     "--workers, and one; 8 MiB of stack each) could be made: %s; lower "
                     "--workers or raise the address-space limit (ulimit -v, LimitAS=)",
                     made, threads, strerror(e));
        return false;
    }
    uv_work_t w;
    bool done = false;
    w.data = &done;
    if (uv_queue_work(&p->loop, &w, pool_nothing, pool_nothing_done) == 0)
        while (!done)
            uv_run(&p->loop, UV_RUN_ONCE);
    return true;
}

/* When the process may use fewer CPUs than are online (server/resources.c). */
static void log_cpus(const struct srv_resources *r)
{
    if (r->cpus >= r->online)
        return;
    char quota[24] = "none";
    if (r->cpu_quota)
        snprintf(quota, sizeof quota, "%u", r->cpu_quota);
    srv_log_msgf("info", "CPUs: %u of the %u online (affinity mask %u, cgroup quota %s); "
                 "--workers and --http-threads default to %u", r->cpus, r->online,
                 r->affinity, quota, r->cpus);
}

/* A warning when the cgroup's memory limit (server/resources.c) is below
 * what attnd may hold at once: the KV cache, the request bodies being
 * received and the large blocks kept for the next requests. */
static void check_memory(const struct srv_config *c)
{
    unsigned long long limit = c->res.memory_limit;
    unsigned long long bodies = srv_http_body_budget(c->max_body_bytes);
    unsigned long long cache = c->max_cache_bytes, kept = API_SPARE_BYTES;
    if (limit == 0 || cache + bodies + kept <= limit)
        return;
    const double mib = 1024.0 * 1024.0;
    srv_log_msgf("warn", "the cgroup's memory limit is %.0f MiB, less than attnd may hold at "
                 "once: %.0f MiB of KV cache (--max-cache-bytes), %.0f MiB of request bodies "
                 "(8 x --max-body-bytes, at least 256 MiB) and %.0f MiB of blocks kept for "
                 "the next requests; under load the kernel may kill attnd: lower "
                 "--max-cache-bytes or --max-body-bytes, or raise the limit",
                 (double)limit / mib, (double)cache / mib, (double)bodies / mib,
                 (double)kept / mib);
}

/* The "listening" event: what this process serves, and with which limits. */
static void log_listening(const struct proc *p, unsigned port)
{
    const struct srv_config *c = p->cfg;
    char ps[16], ws[16], cpus[16], pid[24], body[32], elems[32], conns[16], files[24];
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_NOFILE, &rl);
    snprintf(conns, sizeof conns, "%u", c->max_connections);
    snprintf(files, sizeof files, "%llu", (unsigned long long)rl.rlim_cur);
    snprintf(ps, sizeof ps, "%u", port);
    snprintf(ws, sizeof ws, "%u", c->workers);
    snprintf(cpus, sizeof cpus, "%u", c->res.cpus);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    snprintf(body, sizeof body, "%zu", c->max_body_bytes);
    snprintf(elems, sizeof elems, "%zu", c->max_elements);
    const char *kv[] = {"version", ATTND_VERSION, "host", c->host, "port", ps,
                        "workers", ws, "cpus", cpus, "pid", pid, "max_body_bytes", body,
                        "max_elements", elems, "max_connections", conns,
                        "open_files", files, "auth", p->keys ? "on" : "off",
                        "tls", p->tls ? "on" : "off",
                        "cors", c->cors_origins[0] ? "on" : "off",
                        "cache_policy", c->cache_lru ? "lru" : "reject",
                        "state_dir", c->state_dir[0] ? c->state_dir : "-", NULL};
    srv_log_event("info", "listening", kv);
}

static bool start(struct proc *p)
{
    /* Twice --workers, plus one: one client runs --workers requests at
     * once (one more when small), the spare threads start other clients'
     * at once (server/sched.c). */
    char n[16];
    unsigned threads = p->cfg->workers * 2 + 1 > 1024 ? 1024 : p->cfg->workers * 2 + 1;
    snprintf(n, sizeof n, "%u", threads);
    setenv("UV_THREADPOOL_SIZE", n, 1);     /* before the first uv_queue_work */
    log_cpus(&p->cfg->res);
    check_memory(p->cfg);
    if (!budget_files(p->cfg) || !load_secrets(p)) {
        p->exit_code = 2;
        return false;
    }
    attn_blas_init(1);
    srv_worker_start(p->cfg->workers, p->cfg->res.cpus, par_may_help, NULL);
    p->metrics = srv_metrics_new();
    if (!p->metrics)
        return false;
    int rc = uv_loop_init(&p->loop);
    if (rc != 0) {
        srv_log_msgf("error", "cannot start the event loop: %s", uv_strerror(rc));
        return false;
    }
    p->loop_ready = true;
    if ((rc = init_handles(p)) != 0) {
        srv_log_msgf("error", "cannot set up the timers and signal handling: %s",
                     uv_strerror(rc));
        return false;
    }
    /* Signals are caught from here on. One that comes while the pool's
     * threads are made (a second with hundreds of them) or the state is
     * read (seconds for a large one) is acted on once that is done: as
     * PID 1 in a container, an uncaught SIGTERM is dropped, and the daemon
     * would go on to listen until it was killed. */
    p->starting = "the compute pool was started";
    if (!start_pool(p, threads))
        return false;
    if (atomic_load(&warm_stop))
        return false;
    p->starting = "the sessions were restored";
    p->store = store_open(p->cfg);
    uv_run(&p->loop, UV_RUN_NOWAIT);
    p->starting = NULL;
    if (!p->store || atomic_load(&warm_stop))
        return false;
    if (p->cfg->state_dir[0])
        jnl_running = pthread_create(&jnl_thread, NULL, jnl_main, p) == 0;
    srv_metrics_set_store(p->metrics, p->store);
    init_ctx(p);
    if (!srv_warm_up(&p->loop, &p->ctx, p->cfg, threads, &par_warming, &warm_stop)) {
        p->exit_code = 2;
        return false;
    }
    if (atomic_load(&warm_stop))
        return false;
    uv_timer_start(&p->housekeeping, housekeeping_cb, HOUSEKEEPING_MS, HOUSEKEEPING_MS);
    struct srv_http_guard guard = {p->keys, p->limits, p->tls != NULL};
    p->http = srv_http_new(&p->loop, p->cfg, &p->ctx, p->metrics, &guard);
    if (!p->http)
        return false;
    if ((rc = srv_http_listen(p->http)) != 0) {
        p->exit_code = rc;
        return false;
    }
    atomic_store(&par_http, p->http);
    unsigned port = srv_http_port(p->http);
    if (p->cfg->port_file[0]) {
        rc = write_port_file(p->cfg->port_file, port);
        if (rc != 0) {
            srv_log_msgf("error", "cannot write --port-file %s: %s", p->cfg->port_file,
                         strerror(-rc));
            return false;
        }
    }
    log_listening(p, port);
    return true;
}

static void exit_now(int signum)
{
    (void)signum;
    _exit(1);
}

/* Closing the signal handles gives SIGINT, SIGTERM and SIGHUP their
 * default action back, which would end attnd by the signal, with no exit
 * code of its own, and a signal caught but not yet run is dropped with its
 * handle. From here on every SIGINT or SIGTERM is a second signal (a first
 * one began the drain, or the process is stopping), so each exits 1 at
 * once, as in a drain. The handler calls _exit only: it may interrupt the
 * log's mutex or malloc, so it cannot write a log line. The journal has
 * every change by then, so exiting in the final snapshot loses nothing.
 * SIGHUP (a log rotation's) is ignored: there is nothing left to reload. */
static void exit_on_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exit_now;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGHUP, &sa, NULL);
}

static void close_all(struct proc *p)
{
    for (unsigned i = 0; i < p->n_made; i++)
        close_handle(p->made[i]);
    exit_on_signal();
}

int srv_loop_run(struct srv_config *cfg)
{
    struct proc *p = calloc(1, sizeof *p);
    if (!p)
        return 1;
    p->cfg = cfg;
    int code = 1;
    if (start(p)) {
        uv_run(&p->loop, UV_RUN_DEFAULT);
        code = p->exit_code;
    } else {
        /* 2: an open-file limit too low, unusable TLS or key file, failed
         * --warm-up (a signal then too), a --host that cannot be listened
         * on; 0: a signal in the restore or the warm-up */
        code = p->exit_code == 2 ? 2 : atomic_load(&warm_stop) ? 0 : 1;
        if (p->n_made > 0) {                /* failed after handles were made */
            srv_http_stop(p->http);
            p->finished = true;
            close_all(p);
            uv_run(&p->loop, UV_RUN_DEFAULT);
        }
    }
    if (p->loop_ready)
        uv_loop_close(&p->loop);            /* every handle made is closed by now */
    uv_library_shutdown();                  /* joins the pool threads */
    srv_worker_free();
    /* only now: the helpers read it (par_http) until they are joined */
    atomic_store(&par_http, NULL);
    srv_http_free(p->http);
    jnl_thread_stop();
    if (p->store)
        sess_store_free(p->store);
    srv_metrics_free(p->metrics);
    srv_tls_free(p->tls);
    srv_keys_free(p->keys);
    srv_limits_free(p->limits);
    srv_log_msgf("info", "stopped (exit %d)", code);
    free(p);
    return code;
}
