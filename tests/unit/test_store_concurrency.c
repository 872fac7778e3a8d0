/*
 * tests/unit/test_store_concurrency.c — many threads on shared sessions:
 * appenders and attenders on one session (final length = sum of appends,
 * every row intact and each thread's rows in its own order), and a churn of
 * create / append / fork / delete / sweep / lru eviction on a small store
 * (no crash, no use-after-free, accounting consistent at the end), and a
 * parent and its forks (sharing pages) appending, attending, truncating,
 * forking and deleting at once (every shared row intact, each page counted
 * once, all freed at the end); the same for a rolling parent whose forks
 * let go of pages the others still hold. Run under ThreadSanitizer by `make tsan`
 * (its name contains "concurrency").
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/store.h"
#include "tests/harness.h"

#define D 4             /* d_k = d_v */
#define APPENDERS 4
#define APPENDS 60      /* per appender */

static struct sess_store *st;
static char shared_id[SESS_ID_MAX];
static size_t appended[APPENDERS];     /* rows each appender got in */

static struct sess_spec spec(void)
{
    struct sess_spec s = {.shape = {.h = 2, .h_kv = 1, .d_k = D, .d_v = D},
                          .params = {.dtype = ATTN_F64, .scale = 0.5}};
    return s;
}

/* Rows tagged t*100000 + seq: every number of the row is the tag. */
static void *appender(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg, seq = 0;
    for (int i = 0; i < APPENDS; i++) {
        size_t m = 1 + (size_t)i % 3;
        double k[3 * D], v[3 * D];
        for (size_t r = 0; r < m; r++)
            for (size_t j = 0; j < D; j++) {
                k[r * D + j] = (double)(t * 100000 + seq + r);
                v[r * D + j] = -(double)(t * 100000 + seq + r);
            }
        struct sess *s;
        if (sess_acquire(st, shared_id, &s) != CORE_OK)
            continue;
        if (sess_append(st, s, k, v, m, -1) == CORE_OK) {
            seq += m;
            appended[t] += m;
        }
        sess_release(st, s);
    }
    return NULL;
}

static int attend_failures;

static void *attender(void *arg)
{
    (void)arg;
    double q[2 * D] = {0.1, 0.2, 0.3, 0.4, -1, 0, 1, 0};
    for (int i = 0; i < 40; i++) {
        struct sess *s;
        if (sess_acquire(st, shared_id, &s) != CORE_OK)
            continue;
        size_t L = sess_length(s);
        if (L > 0) {
            double *o = malloc(2 * D * sizeof *o);
            struct sess_query qq = {.q = q, .n = 1, .outputs = ATTN_OUT_OUTPUT};
            struct attn_result out = {.output = o};
            if (sess_attend(st, s, NULL, NULL, 0, &qq, &out, NULL) != CORE_OK ||
                sess_length(s) != L)
                __atomic_add_fetch(&attend_failures, 1, __ATOMIC_RELAXED);
            free(o);
        }
        sess_release(st, s);
    }
    return NULL;
}

TEST(many_appenders_one_session)
{
    struct sess_config cfg = {.default_ttl_s = 600};
    st = sess_store_new(&cfg);
    struct sess_spec sp = spec();
    CHECK_EQ_INT(sess_create(st, &sp, shared_id), CORE_OK);
    pthread_t th[APPENDERS + 2];
    for (size_t t = 0; t < APPENDERS; t++)
        pthread_create(&th[t], NULL, appender, (void *)(uintptr_t)t);
    for (size_t t = APPENDERS; t < APPENDERS + 2; t++)
        pthread_create(&th[t], NULL, attender, NULL);
    for (size_t t = 0; t < APPENDERS + 2; t++)
        pthread_join(th[t], NULL);
    CHECK_EQ_INT(attend_failures, 0);

    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, shared_id, &s), CORE_OK);
    size_t total = 0;
    for (size_t t = 0; t < APPENDERS; t++) {
        total += appended[t];
        CHECK_EQ_INT(appended[t], APPENDS / 3 * 6);   /* 1+2+3 per 3 */
    }
    CHECK_EQ_INT(sess_length(s), total);
    size_t L = sess_length(s);
    double *k = malloc(L * D * sizeof *k), *v = malloc(L * D * sizeof *v);
    kv_read_stored(sess_cache(s), 0, 0, L, k, v, NULL, NULL);
    size_t next[APPENDERS] = {0};
    int bad = 0;
    for (size_t r = 0; r < sess_length(s); r++) {
        double tag = k[r * D];
        size_t t = (size_t)tag / 100000, seq = (size_t)tag % 100000;
        for (size_t j = 0; j < D; j++)
            if (k[r * D + j] != tag || v[r * D + j] != -tag)
                bad++;
        if (t >= APPENDERS || seq != next[t])
            bad++;
        else
            next[t]++;
    }
    CHECK_EQ_INT(bad, 0);
    free(k);
    free(v);
    sess_release(st, s);
    sess_store_free(st);
}

/* ---- churn ------------------------------------------------------------- */

#define SLOTS 8
static pthread_mutex_t ids_mu = PTHREAD_MUTEX_INITIALIZER;
static char ids[SLOTS][SESS_ID_MAX];
static int stop;   /* atomic */
static uint64_t test_clock_us;  /* atomic: the churn test's clock */

/* Every id ever created (including forks), for the final accounting. */
#define ALL_MAX 4096
static char all_ids[ALL_MAX][SESS_ID_MAX];
static size_t n_all;

static void remember(const char *id)
{
    pthread_mutex_lock(&ids_mu);
    if (n_all < ALL_MAX)
        memcpy(all_ids[n_all++], id, SESS_ID_MAX);
    pthread_mutex_unlock(&ids_mu);
}

static void pick(unsigned *seed, char *out)
{
    pthread_mutex_lock(&ids_mu);
    memcpy(out, ids[(size_t)rand_r(seed) % SLOTS], SESS_ID_MAX);
    pthread_mutex_unlock(&ids_mu);
}

static void *churner(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    double k[2 * D] = {1, 2, 3, 4, 5, 6, 7, 8}, v[2 * D] = {0};
    double q[2 * D] = {1, 0, 0, 0, 0, 1, 0, 0}, o[2 * D];
    char id[SESS_ID_MAX];
    for (int i = 0; i < 300; i++) {
        __atomic_add_fetch(&test_clock_us, 1000, __ATOMIC_ACQ_REL);   /* 1 ms per op */
        int op = rand_r(&seed) % 6;
        pick(&seed, id);
        if (op == 0) {
            struct sess_spec sp = spec();
            sp.ttl_s = 0.2;     /* 200 ops of any churner */
            char nid[SESS_ID_MAX];
            if (sess_create(st, &sp, nid) == CORE_OK) {
                remember(nid);
                pthread_mutex_lock(&ids_mu);
                memcpy(ids[(size_t)rand_r(&seed) % SLOTS], nid, SESS_ID_MAX);
                pthread_mutex_unlock(&ids_mu);
            }
        } else if (op == 1) {
            sess_delete(st, id);
        } else {
            struct sess *s;
            if (sess_acquire(st, id, &s) != CORE_OK)
                continue;
            if (op == 2 || op == 3) {
                sess_append(st, s, k, v, 2, -1);
            } else if (op == 4) {
                struct sess_query qq = {.q = q, .n = 1, .outputs = ATTN_OUT_OUTPUT};
                struct attn_result out = {.output = o};
                sess_attend(st, s, k, v, 1, &qq, &out, NULL);
            } else {
                char fid[SESS_ID_MAX];
                if (rand_r(&seed) % 2) {
                    if (sess_fork(st, s, fid) == CORE_OK)
                        remember(fid);
                }
                else
                    sess_truncate(st, s, sess_length(s) / 2);
            }
            sess_release(st, s);
        }
    }
    return NULL;
}

/* The churn runs on a test clock that only the churners advance (1 ms per
 * operation), so which sessions expire depends on the interleaving of the
 * operations, not on how slow the machine is (valgrind) or how often the
 * sweeper gets a core: a sweeper-driven clock (1 ms per sweep) let every
 * session expire on a loaded 2-core machine while one churner waited for
 * a core. Sessions created in the last 200 operations (about 33 creates)
 * are still alive at the end. */

static double test_clock(void *arg)
{
    (void)arg;
    return (double)__atomic_load_n(&test_clock_us, __ATOMIC_ACQUIRE) * 1e-6;
}

static void *sweeper(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        sess_store_sweep(st);
        struct sess_stats stats;
        sess_store_stats(st, &stats);
    }
    return NULL;
}

TEST(churn_create_delete_evict_expire)
{
    struct sess_config cfg = {.max_sessions = 6, .max_cache_bytes = 64 * 1024,
                              .policy = SESS_POLICY_LRU, .default_ttl_s = 1};
    st = sess_store_new(&cfg);
    sess_store_set_clock(st, test_clock, NULL);
    struct sess_spec sp = spec();
    for (size_t i = 0; i < SLOTS; i++)
        if (sess_create(st, &sp, ids[i]) == CORE_OK)
            remember(ids[i]);
    pthread_t th[5];
    for (size_t t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, churner, (void *)(uintptr_t)(t + 1));
    pthread_create(&th[4], NULL, sweeper, NULL);
    for (size_t t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th[4], NULL);
    /* the clock stood still since the last churner left: drop what has
     * expired, then count every session */
    sess_store_sweep(st);
    struct sess_stats stats;
    sess_store_stats(st, &stats);
    CHECK(stats.sessions <= 6);
    CHECK(stats.bytes <= 64 * 1024);
    size_t sum = 0, shared = 0, seen = 0;
    for (size_t i = 0; i < n_all; i++) {
        struct sess *s;
        if (sess_acquire(st, all_ids[i], &s) != CORE_OK)
            continue;
        struct sess_info info;
        sess_get_info(st, s, &info);
        CHECK_EQ_INT(info.bytes + info.shared_bytes, kv_bytes(sess_cache(s)));
        sum += info.bytes;
        shared += info.shared_bytes;
        seen++;
        sess_release(st, s);
    }
    CHECK_EQ_INT(seen, stats.sessions);
    CHECK(seen > 0);
    /* forks share pages: each counts once */
    CHECK(stats.bytes >= sum && stats.bytes <= sum + shared);
    CHECK(shared > 0 || stats.bytes == sum);
    CHECK(stats.created >= SLOTS);
    CHECK(stats.evictions + stats.expirations > 0);
    sess_store_free(st);
}

/* ---- a parent and its forks at once -------------------------------------- */

#define PREFIX 150              /* the parent's rows: 2 full pages and a partial one */
#define FORKERS 4

static char parent_id[SESS_ID_MAX];
static int fork_bad;

/* Rows [a, b) of a held session hold their index (k) and its negative (v). */
static bool rows_intact(const struct sess *s, size_t a, size_t b)
{
    double k[D], v[D];
    for (size_t r = a; r < b; r++) {
        kv_read_stored(sess_cache(s), 0, r, 1, k, v, NULL, NULL);
        for (size_t j = 0; j < D; j++)
            if (k[j] != (double)r || v[j] != -(double)r)
                return false;
    }
    return true;
}

static bool prefix_intact(const struct sess *s, size_t n)
{
    return rows_intact(s, 0, n);
}

/* A fork of the parent into c, acquired into *out; false (counted bad)
 * when either fails. */
static bool fork_parent(char *c, struct sess **out)
{
    struct sess *s;
    bool ok = sess_acquire(st, parent_id, &s) == CORE_OK;
    if (ok) {
        ok = sess_fork(st, s, c) == CORE_OK;
        sess_release(st, s);
    }
    ok = ok && sess_acquire(st, c, out) == CORE_OK;
    if (!ok)
        __atomic_add_fetch(&fork_bad, 1, __ATOMIC_RELAXED);
    return ok;
}

/* One query without rows on a held session; 1 when it fails. */
static int attend_once(struct sess *s)
{
    double q[2 * D] = {0.5, -0.5, 0.25, 1, 0, 1, 0, -1}, o[2 * D];
    struct sess_query qq = {.q = q, .n = 1, .outputs = ATTN_OUT_OUTPUT};
    struct attn_result out = {.output = o};
    return sess_attend(st, s, NULL, NULL, 0, &qq, &out, NULL) != CORE_OK;
}

/* FORKERS threads of forker and one of parent, joined. */
static void run_at_once(void *(*forker_fn)(void *), void *(*parent_fn)(void *))
{
    pthread_t th[FORKERS + 1];
    for (size_t t = 0; t < FORKERS; t++)
        pthread_create(&th[t], NULL, forker_fn, (void *)(uintptr_t)t);
    pthread_create(&th[FORKERS], NULL, parent_fn, NULL);
    for (size_t t = 0; t <= FORKERS; t++)
        pthread_join(th[t], NULL);
}

/* After every fork went: the parent alone, sharing nothing, its pages the
 * store's whole count; deleting it leaves 0 bytes. *s: the parent, held
 * (released here). */
static void check_parent_alone(struct sess *s)
{
    struct sess_stats stats;
    sess_store_stats(st, &stats);
    CHECK_EQ_INT(stats.sessions, 1);
    struct sess_info info;
    sess_get_info(st, s, &info);
    CHECK_EQ_INT(info.shared_bytes, 0);             /* every fork let go */
    CHECK_EQ_INT(stats.bytes, info.bytes);
    CHECK_EQ_INT(stats.bytes, kv_bytes(sess_cache(s)));
    sess_release(st, s);
    CHECK_EQ_INT(sess_delete(st, parent_id), CORE_OK);
    sess_store_stats(st, &stats);
    CHECK_EQ_INT(stats.bytes, 0);
    sess_store_free(st);
}

/* Append m rows tagged `tag` to a held session; false on failure. */
static bool add_rows(struct sess *s, size_t m, double tag)
{
    double k[8 * D], v[8 * D];
    for (size_t i = 0; i < m * D; i++)
        k[i] = v[i] = tag;
    return sess_append(st, s, k, v, m, -1) == CORE_OK;
}

/* Fork the parent, write into the fork (copying the shared last page),
 * attend, truncate into shared pages, fork the fork, delete in either
 * order; the parent's rows must read the same throughout. */
static void *forker(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    for (int i = 0; i < 40; i++) {
        char c[SESS_ID_MAX], g[SESS_ID_MAX];
        struct sess *s;
        int bad = 0;
        if (!fork_parent(c, &s))
            continue;
        size_t len0 = sess_length(s);
        bad += len0 < PREFIX || !prefix_intact(s, PREFIX);
        bad += !add_rows(s, 1 + (size_t)i % 5, (double)(1000 + t));
        bad += attend_once(s);
        bad += sess_truncate(st, s, PREFIX - 1 - (size_t)i % 30) != CORE_OK;
        bad += !add_rows(s, 2, (double)(2000 + t));
        bad += sess_fork(st, s, g) != CORE_OK;
        bad += !prefix_intact(s, PREFIX - 1 - (size_t)i % 30);
        sess_release(st, s);
        if (i % 2) {
            bad += sess_delete(st, c) != CORE_OK;
            bad += sess_delete(st, g) != CORE_OK;
        } else {
            bad += sess_delete(st, g) != CORE_OK;
            bad += sess_delete(st, c) != CORE_OK;
        }
        if (bad)
            __atomic_add_fetch(&fork_bad, bad, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The parent itself appends past its prefix (into its shared last page)
 * and truncates back, while the forks read and copy. */
static void *parent_writer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 80; i++) {
        struct sess *s;
        if (sess_acquire(st, parent_id, &s) != CORE_OK)
            continue;
        int bad = !add_rows(s, 1 + (size_t)i % 7, -5.0);
        bad += sess_truncate(st, s, PREFIX) != CORE_OK;
        bad += !prefix_intact(s, PREFIX);
        sess_release(st, s);
        if (bad)
            __atomic_add_fetch(&fork_bad, bad, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(forks_append_truncate_delete_at_once)
{
    struct sess_config cfg = {.default_ttl_s = 600};
    st = sess_store_new(&cfg);
    struct sess_spec sp = spec();
    CHECK_EQ_INT(sess_create(st, &sp, parent_id), CORE_OK);
    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, parent_id, &s), CORE_OK);
    for (size_t r = 0; r < PREFIX; r++) {
        double k[D], v[D];
        for (size_t j = 0; j < D; j++) {
            k[j] = (double)r;
            v[j] = -(double)r;
        }
        CHECK_EQ_INT(sess_append(st, s, k, v, 1, -1), CORE_OK);
    }
    sess_release(st, s);
    run_at_once(forker, parent_writer);
    CHECK_EQ_INT(fork_bad, 0);
    CHECK_EQ_INT(sess_acquire(st, parent_id, &s), CORE_OK);
    CHECK(prefix_intact(s, PREFIX));
    check_parent_alone(s);
}

/* ---- rolling sessions and their forks at once ---------------------------- */

/* Append rows [from, to) tagged by their index to a held session. */
static bool add_indexed(struct sess *s, size_t from, size_t to)
{
    bool ok = true;
    for (size_t r = from; ok && r < to; r++) {
        double k[D], v[D];
        for (size_t j = 0; j < D; j++) {
            k[j] = (double)r;
            v[j] = -(double)r;
        }
        ok = sess_append(st, s, k, v, 1, -1) == CORE_OK;
    }
    return ok;
}

/* A decode step on a rolling session: append the next row (tagged by its
 * index) and attend with it; 1 when it fails. A query that appends its
 * rows always finds them held; one without rows may reach back past the
 * rows a rolling session holds (409 by design: store.h). */
static int attend_appending(struct sess *s)
{
    double q[2 * D] = {0.5, -0.5, 0.25, 1, 0, 1, 0, -1}, o[2 * D], k[D], v[D];
    size_t r = sess_length(s);
    for (size_t j = 0; j < D; j++) {
        k[j] = (double)r;
        v[j] = -(double)r;
    }
    struct sess_query qq = {.q = q, .n = 1, .outputs = ATTN_OUT_OUTPUT};
    struct attn_result out = {.output = o};
    return sess_attend(st, s, k, v, 1, &qq, &out, NULL) != CORE_OK;
}

/* Fork the rolling parent and roll the fork on (letting go of pages the
 * parent and the other forks still hold), attend, fork again, delete. */
static void *roll_forker(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    for (int i = 0; i < 30; i++) {
        char c[SESS_ID_MAX], g[SESS_ID_MAX];
        struct sess *s;
        struct sess_held h;
        int bad = 0;
        if (!fork_parent(c, &s))
            continue;
        sess_held_rows(s, &h);
        bad += !rows_intact(s, 0, h.front) || !rows_intact(s, h.from, h.length);
        bad += !add_indexed(s, h.length, h.length + 70 - 1 + t * 13);
        bad += attend_appending(s);
        bad += sess_fork(st, s, g) != CORE_OK;
        sess_held_rows(s, &h);
        bad += !rows_intact(s, 0, h.front) || !rows_intact(s, h.from, h.length);
        sess_release(st, s);
        bad += sess_delete(st, i % 2 ? c : g) != CORE_OK;
        bad += sess_delete(st, i % 2 ? g : c) != CORE_OK;
        if (bad)
            __atomic_add_fetch(&fork_bad, bad, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The rolling parent rolls on while its forks read and roll. */
static void *roll_parent(void *arg)
{
    (void)arg;
    for (int i = 0; i < 60; i++) {
        struct sess *s;
        if (sess_acquire(st, parent_id, &s) != CORE_OK)
            continue;
        size_t len = sess_length(s);
        int bad = !add_indexed(s, len, len + 1 + (size_t)i % 9);
        sess_release(st, s);
        if (bad)
            __atomic_add_fetch(&fork_bad, bad, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(rolling_forks_roll_at_once)
{
    struct sess_config cfg = {.default_ttl_s = 600};
    st = sess_store_new(&cfg);
    fork_bad = 0;
    struct sess_spec sp = spec();
    sp.window = (struct attn_window){.on = true, .left = 40, .right = -1, .sinks = 3};
    CHECK_EQ_INT(sess_create(st, &sp, parent_id), CORE_OK);
    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, parent_id, &s), CORE_OK);
    CHECK(add_indexed(s, 0, 300));
    sess_release(st, s);
    run_at_once(roll_forker, roll_parent);
    CHECK_EQ_INT(fork_bad, 0);
    CHECK_EQ_INT(sess_acquire(st, parent_id, &s), CORE_OK);
    struct sess_held h;
    sess_held_rows(s, &h);
    CHECK(h.from > 0 && rows_intact(s, 0, h.front) && rows_intact(s, h.from, h.length));
    check_parent_alone(s);
}

int main(void)
{
    RUN(many_appenders_one_session);
    RUN(churn_create_delete_evict_expire);
    RUN(forks_append_truncate_delete_at_once);
    RUN(rolling_forks_roll_at_once);
    TEST_MAIN_END();
}
