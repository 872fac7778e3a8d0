/*
 * tests/unit/test_journal.c — the journal (core/journal.c) and the store's
 * durability over it (core/durable.c): CRC-32C against a bitwise reference,
 * record framing, torn and corrupt files, every kind of change surviving a
 * reopen with identical bytes, snapshots written while threads append,
 * TTL across a restart, a refused write (file size limit standing in for a
 * full disk) leaving the session as it was, export/import, and the lock
 * that keeps a directory to one store (a second store that compares reads
 * a copy of the directory; flock is stood in for to fail as file systems
 * do).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/kv.h"
#include "core/persist.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/store_util.h"

static char dir[64];
static char copy_dir[72];       /* a copy of dir, for a second store to read */

static void quiet(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    if (getenv("TEST_VERBOSE"))
        printf("    log %s: %s\n", level == SESS_LOG_INFO ? "info" : "warn", msg);
}

static char last_log[512];

static void keep_log(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    if (strstr(msg, "records kept"))
        snprintf(last_log, sizeof last_log, "%s", msg);
    quiet(NULL, level, msg);
}

static void clear_dir(void)
{
    store_clear_dir(dir);
}

/* copy_dir made a copy of dir's files as they are now (a store keeps its
 * directory to itself, so a second store reads a copy). */
static void copy_state(void)
{
    store_clear_dir(copy_dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int in = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        char to[sizeof copy_dir + 260];
        snprintf(to, sizeof to, "%s/%s", copy_dir, e->d_name);
        int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        char buf[1 << 16];
        ssize_t n = 0;
        while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
            CHECK(write(out, buf, (size_t)n) == n);
        CHECK(in >= 0 && out >= 0 && n == 0);
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
    }
    if (d)
        closedir(d);
}

typedef uint32_t crc_fn(uint32_t crc, const void *p, size_t n);

/* crc against the bitwise reference: the check value, every offset and
 * length through 1100 bytes, continuing, the three-chain blocks' edges. */
static void crc_matches_reference(crc_fn *crc)
{
    CHECK_EQ_INT(crc(0, "123456789", 9), 0xE3069283u);
    unsigned char buf[1100];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off < sizeof buf; n += 37)
            CHECK_EQ_INT(crc(0, buf + off, n), test_crc32_bitwise(0x82F63B78u, buf + off, n));
    /* continuing a checksum equals checksumming the whole */
    CHECK_EQ_INT(crc(crc(0, buf, 500), buf + 500, 600),
                 test_crc32_bitwise(0x82F63B78u, buf, 1100));
    /* lengths around the three-chain blocks (3 x 256 and 3 x 8192 bytes) */
    static const size_t lens[] = {767, 768, 769, 775, 1536, 24575, 24576, 24577,
                                  24576 + 768 + 9, 3 * 24576 + 3 * 768 + 7};
    size_t big = 3 * 24576 + 3 * 768 + 16;
    unsigned char *b = malloc(big);
    if (!b)
        return;
    for (size_t i = 0; i < big; i++)
        b[i] = (unsigned char)(i * 2654435761u >> 13);
    for (size_t off = 0; off < 3; off++)
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
            CHECK_EQ_INT(crc(0x12345678u, b + off, lens[i]),
                         crc(crc(0x12345678u, b + off, 5), b + off + 5,
                                    lens[i] - 5));
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        CHECK_EQ_INT(crc(0, b + 1, lens[i]), test_crc32_bitwise(0x82F63B78u, b + 1, lens[i]));
    free(b);
}

TEST(crc32c_matches_reference)
{
    crc_matches_reference(jnl_crc32c);      /* the CPU's instruction, if any */
    crc_matches_reference(jnl_crc32c_table);
    unsigned char buf[3000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 167 + 3);
    for (size_t n = 0; n <= sizeof buf; n += 97)
        CHECK_EQ_INT(jnl_crc32c(7, buf, n), jnl_crc32c_table(7, buf, n));
}

static char *path_in(const char *name)
{
    static char p[300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* Write `n` records "record i" to path; returns the file size. */
static long write_records(const char *path, int n)
{
    int e = 0;
    struct jnl *j = jnl_create(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &e);
    if (!j)
        return -1;
    for (int i = 0; i < n; i++) {
        char text[32];
        int len = snprintf(text, sizeof text, "record %d", i);
        struct iovec part = {text, (size_t)len};
        if (jnl_append(j, (uint64_t)i + 1, &part, 1, false, &e) != CORE_OK)
            return -1;
    }
    long size = (long)jnl_size(j);
    jnl_close(j);
    return size;
}

/* Records readable from path before damage; *why the reason or NULL. */
static int read_records(const char *path, const char **why, uint64_t *rest)
{
    struct jnl_reader r;
    if (jnl_read_open(&r, path, JNL_MAGIC_JOURNAL) != CORE_OK) {
        *why = r.why;
        return -1;
    }
    uint64_t lsn;
    const void *p;
    size_t n;
    int got, count = 0;
    while ((got = jnl_read_next(&r, &lsn, &p, &n)) == 1) {
        char want[32];
        int len = snprintf(want, sizeof want, "record %d", count);
        if (lsn != (uint64_t)count + 1 || n != (size_t)len ||
            memcmp(p, want, n) != 0)
            return -2;
        count++;
    }
    *why = r.why;
    uint64_t bytes;
    *rest = got < 0 ? jnl_read_rest(&r, &bytes) : 0;
    jnl_read_close(&r);
    return count;
}

TEST(records_round_trip_and_damage_is_found)
{
    clear_dir();
    const char *p = path_in("j");
    long size = write_records(p, 10);
    CHECK(size > 0);
    const char *why;
    uint64_t rest;
    CHECK_EQ_INT(read_records(p, &why, &rest), 10);
    CHECK(why == NULL);
    /* cut by a few bytes: the last record is torn */
    CHECK(truncate(p, size - 3) == 0);
    CHECK_EQ_INT(read_records(p, &why, &rest), 9);
    CHECK(why && strstr(why, "cut short"));
    CHECK_EQ_INT(rest, 1);
    /* a byte flipped in the middle: records before it only */
    unlink(p);
    size = write_records(p, 10);
    int fd = open(p, O_RDWR);
    unsigned char b;
    off_t mid = JNL_HEADER_BYTES + 4 * (16 + 8) + 14;   /* inside record 4 */
    CHECK(pread(fd, &b, 1, mid) == 1);
    b ^= 0x40;
    CHECK(pwrite(fd, &b, 1, mid) == 1);
    close(fd);
    CHECK_EQ_INT(read_records(p, &why, &rest), 4);
    CHECK(why && strstr(why, "checksum"));
    CHECK_EQ_INT(rest, 6);
    /* a header of another kind */
    struct jnl_reader r;
    CHECK(jnl_read_open(&r, p, JNL_MAGIC_SNAPSHOT) == CORE_ECORRUPT);
    unlink(p);
}

/* ---- the store over a journal ------------------------------------------- */

static struct sess_store *open_store_in(const char *where, enum jnl_fsync mode,
                                        uint64_t rewrite_min, sess_log_fn log)
{
    struct sess_config cfg = {.max_sessions = 100, .max_cache_bytes = 1 << 26,
                              .default_ttl_s = 3600, .default_max_tokens = 100000,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r0"};
    struct sess_store *st = sess_store_new(&cfg);
    struct sess_journal_config jc = {.dir = where, .fsync = mode,
                                     .rewrite_min_bytes = rewrite_min,
                                     .log = log ? log : quiet};
    if (sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        return NULL;
    }
    return st;
}

static struct sess_store *open_store(enum jnl_fsync mode, uint64_t rewrite_min,
                                     sess_log_fn log)
{
    return open_store_in(dir, mode, rewrite_min, log);
}

/* A second store over what the first has written so far. */
static struct sess_store *open_copy(enum jnl_fsync mode, uint64_t rewrite_min)
{
    copy_state();
    return open_store_in(copy_dir, mode, rewrite_min, NULL);
}

static struct sess_spec spec_f32(void)
{
    static const float bk[4] = {0.5f, -0.25f, 0.125f, 1};
    struct sess_spec s = {
        .shape = {.h = 4, .h_kv = 2, .d_k = 4, .d_v = 3},
        .params = {.dtype = ATTN_F32, .scale = 0.5, .rope = true,
                   .rope_base = 10000},
        .bias_k = bk, .bias_k_heads = 1,
    };
    return s;
}

/* Append m rows made from seed to id. */
static enum core_status append_to(struct sess_store *st, const char *id,
                                  size_t m, unsigned seed)
{
    struct sess *s;
    enum core_status rc = sess_acquire(st, id, &s);
    if (rc != CORE_OK)
        return rc;
    float *k = malloc(m * 2 * 4 * sizeof *k), *v = malloc(m * 2 * 3 * sizeof *v);
    for (size_t i = 0; i < m * 8; i++)
        k[i] = (float)((seed * 2654435761u + i * 40503u) % 1000) / 250.0f - 2;
    for (size_t i = 0; i < m * 6; i++)
        v[i] = (float)((seed * 97u + i * 7919u) % 1000) / 500.0f - 1;
    rc = sess_append(st, s, k, v, m, -1);
    sess_release(st, s);
    free(k);
    free(v);
    return rc;
}

static bool same_rows(struct sess_store *a, struct sess_store *b, const char *id,
                      bool settings);

/* Whether session id has the same rows (bytes) and settings in a and b. */
static bool same_session(struct sess_store *a, struct sess_store *b,
                         const char *id)
{
    return same_rows(a, b, id, true);
}

TEST(every_change_survives_a_reopen)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    CHECK(st != NULL);
    if (!st)
        return;
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], b[SESS_ID_MAX], c[SESS_ID_MAX], f[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(sess_create(st, &sp, b) == CORE_OK);
    sp.ttl_s = 77;
    CHECK(sess_create(st, &sp, c) == CORE_OK);
    CHECK(append_to(st, a, 5, 1) == CORE_OK);
    CHECK(append_to(st, a, 3, 2) == CORE_OK);
    CHECK(append_to(st, b, 4, 3) == CORE_OK);
    CHECK(append_to(st, c, 2, 4) == CORE_OK);
    struct sess *s;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK(sess_truncate(st, s, 6) == CORE_OK);
    CHECK(sess_fork(st, s, f) == CORE_OK);
    sess_release(st, s);
    CHECK(append_to(st, a, 2, 5) == CORE_OK);
    CHECK(append_to(st, f, 1, 6) == CORE_OK);
    CHECK(sess_delete(st, b) == CORE_OK);
    /* a second store opened on a copy of the files sees the same */
    struct sess_store *again = open_copy(JNL_FSYNC_ALWAYS, 1 << 30);
    CHECK(again != NULL);
    if (again) {
        struct sess_stats ss;
        sess_store_stats(again, &ss);
        CHECK_EQ_INT(ss.sessions, 3);
        CHECK(same_session(st, again, a));
        CHECK(same_session(st, again, c));
        CHECK(same_session(st, again, f));
        CHECK(!sess_exists(again, b));
        CHECK(sess_acquire(again, f, &s) == CORE_OK);
        CHECK_EQ_INT(sess_length(s), 7);
        sess_release(again, s);
        sess_store_free(again);
    }
    sess_store_free(st);
}

struct writer_arg {
    struct sess_store *st;
    char id[SESS_ID_MAX];
    unsigned seed;
    int rounds;
};

static void *writer(void *p)
{
    struct writer_arg *w = p;
    for (int i = 0; i < w->rounds; i++) {
        append_to(w->st, w->id, 3, w->seed + (unsigned)i);
        if (i % 17 == 16) {
            struct sess *s;
            if (sess_acquire(w->st, w->id, &s) == CORE_OK) {
                sess_truncate(w->st, s, sess_length(s) / 2);
                sess_release(w->st, s);
            }
        }
    }
    return NULL;
}

static void *rewriter(void *p)
{
    struct sess_store *st = p;
    for (int i = 0; i < 30; i++)
        sess_store_journal_maintain(st, true);
    return NULL;
}

TEST(snapshots_written_during_appends_lose_nothing)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 0, NULL);
    CHECK(st != NULL);
    if (!st)
        return;
    struct sess_spec sp = spec_f32();
    struct writer_arg w[3];
    pthread_t th[4];
    for (int i = 0; i < 3; i++) {
        w[i] = (struct writer_arg){.st = st, .seed = 100u * (unsigned)i,
                                   .rounds = 300};
        CHECK(sess_create(st, &sp, w[i].id) == CORE_OK);
        pthread_create(&th[i], NULL, writer, &w[i]);
    }
    pthread_create(&th[3], NULL, rewriter, st);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    CHECK(ss.snapshots >= 30);
    if (ss.snapshots < 30)
        printf("    snapshots %llu\n", (unsigned long long)ss.snapshots);
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 0);
    CHECK(again != NULL);
    for (int i = 0; again && i < 3; i++)
        CHECK(same_session(st, again, w[i].id));
    sess_store_free(again);
    sess_store_free(st);
}

TEST(a_failed_snapshot_is_counted)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], tmp[100];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    /* the next snapshot's temporary name is taken: it fails */
    snprintf(tmp, sizeof tmp, ".snapshot.%016x.tmp", 2);
    CHECK(mkdir(path_in(tmp), 0700) == 0);
    struct sess_stats ss;
    CHECK(sess_store_journal_maintain(st, true) == CORE_ESTORAGE);
    sess_store_stats(st, &ss);
    CHECK_EQ_INT(ss.snapshot_failures, 1);
    CHECK_EQ_INT(ss.snapshots, 1);              /* the one written at open */
    CHECK(rmdir(path_in(tmp)) == 0);
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
    sess_store_stats(st, &ss);
    CHECK_EQ_INT(ss.snapshot_failures, 1);
    CHECK_EQ_INT(ss.snapshots, 2);
    sess_store_free(st);
}

TEST(torn_journal_keeps_what_came_before)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    for (unsigned i = 0; i < 5; i++)
        CHECK(append_to(st, a, 2, i) == CORE_OK);
    sess_store_free(st);
    /* the newest journal loses its last 5 bytes: the fifth append goes */
    DIR *d = opendir(dir);
    struct dirent *e;
    char jpath[400] = "";
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "journal.", 8) == 0)
            snprintf(jpath, sizeof jpath, "%s/%s", dir, e->d_name);
    closedir(d);
    struct stat sb;
    CHECK(stat(jpath, &sb) == 0);
    CHECK(truncate(jpath, sb.st_size - 5) == 0);
    last_log[0] = '\0';
    st = open_store(JNL_FSYNC_NO, 1 << 30, keep_log);
    struct sess *s;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK_EQ_INT(sess_length(s), 8);
    sess_release(st, s);
    CHECK(strstr(last_log, "5 records kept, 1 dropped") != NULL);
    sess_store_free(st);
}

TEST(expired_sessions_stay_gone)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    sp.ttl_s = 1;
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    sp.ttl_s = 60;
    CHECK(sess_create(st, &sp, b) == CORE_OK);
    CHECK(append_to(st, a, 1, 1) == CORE_OK);
    sess_store_free(st);
    usleep(1200 * 1000);
    st = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    CHECK(!sess_exists(st, a));
    CHECK(sess_exists(st, b));
    sess_store_free(st);
}

/* Files may not grow past `bytes` (writes past it fail, SIGXFSZ
 * ignored); the limit before into *old. */
static bool limit_file_size(uint64_t bytes, struct rlimit *old)
{
    struct rlimit lim;
    getrlimit(RLIMIT_FSIZE, old);
    signal(SIGXFSZ, SIG_IGN);
    lim = *old;
    lim.rlim_cur = bytes;
    return setrlimit(RLIMIT_FSIZE, &lim) == 0;
}

TEST(a_refused_write_leaves_the_session_as_it_was)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(append_to(st, a, 4, 9) == CORE_OK);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    /* files may not grow past their size now: the next record fails */
    struct rlimit old;
    CHECK(limit_file_size(ss.journal_bytes + 600, &old));
    CHECK(append_to(st, a, 64, 10) == CORE_ESTORAGE);
    CHECK(sess_create(st, &sp, b) == CORE_OK);   /* a small record still fits */
    CHECK(append_to(st, b, 64, 11) == CORE_ESTORAGE);
    struct sess *s;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK_EQ_INT(sess_length(s), 4);
    sess_release(st, s);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK(append_to(st, a, 64, 12) == CORE_OK);
    sess_store_stats(st, &ss);
    CHECK_EQ_INT(ss.journal_failures, 2);
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(same_session(st, again, a));
    CHECK(same_session(st, again, b));
    sess_store_free(again);
    sess_store_free(st);
}

/* An append whose record cannot be written is undone whole, on a fork
 * too: the shared last page the append copied is given back (the bytes
 * and the sharing as they were). */
TEST(a_refused_write_on_a_fork_keeps_its_shared_page)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], f[SESS_ID_MAX];
    struct sess *s;
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(append_to(st, a, 70, 9) == CORE_OK);  /* a partly filled second page */
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK(sess_fork(st, s, f) == CORE_OK);
    sess_release(st, s);
    struct sess_stats before, after;
    sess_store_stats(st, &before);
    struct rlimit old;
    CHECK(limit_file_size(before.journal_bytes + 100, &old));
    CHECK(append_to(st, f, 8, 10) == CORE_ESTORAGE);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    sess_store_stats(st, &after);
    CHECK_EQ_INT(after.bytes, before.bytes);
    CHECK(sess_acquire(st, f, &s) == CORE_OK);
    struct sess_info info;
    sess_get_info(st, s, &info);
    CHECK_EQ_INT(sess_length(s), 70);
    CHECK_EQ_INT(info.bytes, 0);                /* every page still shared */
    sess_release(st, s);
    sess_store_free(st);
}

TEST(an_imported_session_is_journaled_under_a_new_id)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(append_to(st, a, 6, 21) == CORE_OK);
    struct sess *s;
    void *bytes = NULL;
    size_t n = 0;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK(sess_export(st, s, &bytes, &n) == CORE_OK);
    sess_release(st, s);
    CHECK(sess_import(st, bytes, n, NULL, b, NULL) == CORE_OK);
    CHECK(strcmp(a, b) != 0 && strncmp(b, "r0.", 3) == 0);
    /* cut, flipped or foreign bytes create nothing */
    struct sess_stats before, after;
    sess_store_stats(st, &before);
    char c[SESS_ID_MAX];
    CHECK(sess_import(st, bytes, n - 1, NULL, c, NULL) == CORE_ECORRUPT);
    ((unsigned char *)bytes)[n / 2] ^= 1;
    CHECK(sess_import(st, bytes, n, NULL, c, NULL) == CORE_ECORRUPT);
    CHECK(sess_import(st, "ATTNDJNL", 8, NULL, c, NULL) == CORE_ECORRUPT);
    sess_store_stats(st, &after);
    CHECK_EQ_INT(after.sessions, before.sessions);
    free(bytes);
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(same_session(st, again, b));
    CHECK(same_session(st, again, a));
    sess_store_free(again);
    sess_store_free(st);
}

/* Whether id holds the same rows (bytes), in the same places, in a and b
 * (the held ranges of a rolling session too), and with settings the same
 * ttl and max_tokens. */
static bool same_rows(struct sess_store *a, struct sess_store *b, const char *id,
                      bool settings)
{
    struct sess *x, *y;
    if (sess_acquire(a, id, &x) != CORE_OK)
        return false;
    if (sess_acquire(b, id, &y) != CORE_OK) {
        sess_release(a, x);
        return false;
    }
    struct sess_held hx, hy;
    sess_held_rows(x, &hx);
    sess_held_rows(y, &hy);
    const struct kv_cache *cx = sess_cache(x), *cy = sess_cache(y);
    const struct attn_window *wx = &sess_spec(x)->window, *wy = &sess_spec(y)->window;
    bool same = memcmp(&hx, &hy, sizeof hx) == 0 && wx->on == wy->on &&
                (!wx->on || (wx->left == wy->left && wx->sinks == wy->sinks)) &&
                (!settings || (sess_spec(x)->ttl_s == sess_spec(y)->ttl_s &&
                               sess_spec(x)->max_tokens == sess_spec(y)->max_tokens));
    size_t len = kv_held(cx), tail = hx.from ? hx.length - hx.from : 0;
    float *rx = calloc(len * 7 + 1, sizeof(float)), *ry = calloc(len * 7 + 1, sizeof(float));
    for (size_t g = 0; same && len && g < kv_heads(cx); g++) {
        kv_read_stored(cx, g, 0, hx.front, rx, rx + len * 4, NULL, NULL);
        kv_read_stored(cy, g, 0, hy.front, ry, ry + len * 4, NULL, NULL);
        if (tail) {
            kv_read_stored(cx, g, hx.from, tail, rx + hx.front * 4, rx + len * 4 + hx.front * 3,
                           NULL, NULL);
            kv_read_stored(cy, g, hy.from, tail, ry + hy.front * 4, ry + len * 4 + hy.front * 3,
                           NULL, NULL);
        }
        same = memcmp(rx, ry, len * 7 * sizeof(float)) == 0;
    }
    free(rx);
    free(ry);
    sess_release(a, x);
    sess_release(b, y);
    return same;
}

static bool same_held(struct sess_store *a, struct sess_store *b, const char *id)
{
    return same_rows(a, b, id, false);
}

TEST(a_rolling_session_survives_replay_and_snapshots)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    sp.window = (struct attn_window){.on = true, .left = 40, .right = -1, .sinks = 3};
    char a[SESS_ID_MAX], f[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    for (unsigned i = 0; i < 40; i++)
        CHECK(append_to(st, a, 1 + i % 13, 100 + i) == CORE_OK);
    struct sess *s;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    struct sess_held h;
    sess_held_rows(s, &h);
    CHECK(h.from > 0 && h.front == 64 && kv_held(sess_cache(s)) <= 64 + 40 + 63);
    /* truncate: into the rows let go refused, keeping the window applied */
    CHECK_EQ_INT(sess_truncate(st, s, h.from + 39), CORE_ELENGTH);
    CHECK_EQ_INT(sess_truncate(st, s, h.length - 2), CORE_OK);
    CHECK(sess_fork(st, s, f) == CORE_OK);
    sess_release(st, s);
    for (unsigned i = 0; i < 9; i++) {
        CHECK(append_to(st, a, 7, 200 + i) == CORE_OK);
        CHECK(append_to(st, f, 5, 300 + i) == CORE_OK);
    }
    /* replayed from the journal */
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(again != NULL);
    CHECK(same_held(st, again, a));
    CHECK(same_held(st, again, f));
    sess_store_free(again);
    /* from a snapshot, then more appends replayed after it */
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
    CHECK(append_to(st, a, 70, 400) == CORE_OK);
    again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(again != NULL);
    CHECK(same_held(st, again, a));
    CHECK(same_held(st, again, f));
    CHECK(sess_acquire(again, a, &s) == CORE_OK);
    sess_held_rows(s, &h);
    CHECK(h.from > 0 && h.length - h.from <= 40 + 63);
    sess_release(again, s);
    sess_store_free(again);
    sess_store_free(st);
}

static uint64_t journal_bytes(struct sess_store *st)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    return ss.journal_bytes;
}

TEST(a_fork_record_holds_no_rows)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_ALWAYS, 1 << 30, NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX], f[SESS_ID_MAX], g[SESS_ID_MAX], h[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    for (unsigned i = 0; i < 20; i++)
        CHECK(append_to(st, a, 100, 500 + i) == CORE_OK);
    uint64_t before = journal_bytes(st);
    CHECK(store_fork_of(st, a, f) == CORE_OK);
    /* the record: a frame, the head, two ids and a length; not 2000 rows */
    uint64_t grew = journal_bytes(st) - before;
    CHECK(grew < 128);
    if (grew >= 128)
        printf("    a fork record of %llu bytes\n", (unsigned long long)grew);
    /* the parent changes after the fork: the child replays as it was */
    CHECK(append_to(st, a, 5, 600) == CORE_OK);
    struct sess *s;
    CHECK(sess_acquire(st, a, &s) == CORE_OK);
    CHECK(sess_truncate(st, s, 100) == CORE_OK);
    sess_release(st, s);
    CHECK(append_to(st, a, 3, 601) == CORE_OK);
    CHECK(append_to(st, f, 2, 602) == CORE_OK);
    CHECK(store_fork_of(st, f, g) == CORE_OK);            /* a fork of a fork */
    CHECK(append_to(st, f, 1, 603) == CORE_OK);
    CHECK(store_fork_of(st, a, h) == CORE_OK);
    CHECK(sess_delete(st, a) == CORE_OK);           /* the parent goes first */
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(again != NULL);
    CHECK(!sess_exists(again, a));
    CHECK(same_held(st, again, f) && same_session(st, again, f));
    CHECK(same_held(st, again, g) && same_session(st, again, g));
    CHECK(same_held(st, again, h));
    CHECK_EQ_INT(store_length_of(again, f), 2003);
    CHECK_EQ_INT(store_length_of(again, g), 2002);
    CHECK_EQ_INT(store_length_of(again, h), 103);
    sess_store_free(again);
    /* after a snapshot: forks of sessions that came from it */
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
    char k[SESS_ID_MAX];
    CHECK(store_fork_of(st, g, k) == CORE_OK);
    CHECK(append_to(st, g, 4, 604) == CORE_OK);
    again = open_copy(JNL_FSYNC_NO, 1 << 30);
    CHECK(same_held(st, again, k));
    CHECK(same_held(st, again, g));
    CHECK_EQ_INT(store_length_of(again, k), 2002);
    sess_store_free(again);
    sess_store_free(st);
}

struct forker_arg {
    struct sess_store *st;
    char ids[40][SESS_ID_MAX];
    int n;
    atomic_bool done;
};

/* Snapshots one after another until the forker is done. */
static void *rewriter_until(void *p)
{
    struct forker_arg *a = p;
    while (!atomic_load(&a->done))
        sess_store_journal_maintain(a->st, true);
    return NULL;
}

/* Forks of forks with appends between, while snapshots are written. */
static void *forker(void *p)
{
    struct forker_arg *a = p;
    for (int i = 1; i < 40; i++) {
        if (store_fork_of(a->st, a->ids[i - 1], a->ids[i]) != CORE_OK ||
            append_to(a->st, a->ids[i - 1], 3, 700u + (unsigned)i) != CORE_OK ||
            append_to(a->st, a->ids[i], 70, 800u + (unsigned)i) != CORE_OK)
            break;
        a->n = i + 1;
    }
    atomic_store(&a->done, true);
    return NULL;
}

TEST(forks_during_snapshots_replay_as_they_were)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 0, NULL);
    struct sess_spec sp = spec_f32();
    struct forker_arg fa = {.st = st, .n = 1};
    CHECK(sess_create(st, &sp, fa.ids[0]) == CORE_OK);
    CHECK(append_to(st, fa.ids[0], 300, 900) == CORE_OK);
    /* a large session makes every snapshot long enough to fork during it */
    char big[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, big) == CORE_OK);
    for (unsigned i = 0; i < 20; i++)
        CHECK(append_to(st, big, 1000, 950 + i) == CORE_OK);
    atomic_init(&fa.done, false);
    pthread_t th[2];
    pthread_create(&th[0], NULL, forker, &fa);
    pthread_create(&th[1], NULL, rewriter_until, &fa);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    CHECK_EQ_INT(fa.n, 40);
    struct sess_store *again = open_copy(JNL_FSYNC_NO, 0);
    CHECK(again != NULL);
    for (int i = 0; again && i < fa.n; i++)
        CHECK(same_held(st, again, fa.ids[i]) && same_session(st, again, fa.ids[i]));
    sess_store_free(again);
    sess_store_free(st);
}

static char last_warning[512];

/* flock as the file system answers it: the kernel's, or, for the next
 * flock_fails calls, failing with flock_errno (a file system without
 * locks, an interrupted call), or with the directory's LOCK replaced just
 * before the call (another process removing it). Defined here, it stands
 * in for libc's within this program. */
static int flock_errno, flock_fails;
static bool flock_replaces;

int flock(int fd, int op)
{
    if (flock_fails > 0) {
        flock_fails--;
        errno = flock_errno;
        return -1;
    }
    if (flock_replaces) {
        flock_replaces = false;
        char lock[96];
        snprintf(lock, sizeof lock, "%s/LOCK", dir);
        unlink(lock);
        int made = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (made >= 0)
            close(made);
    }
    return (int)syscall(SYS_flock, fd, op);
}

/* Whether a lock on dir/LOCK, as it is named now, would be granted. */
static bool lock_is_free(void)
{
    char lock[96];
    snprintf(lock, sizeof lock, "%s/LOCK", dir);
    int fd = open(lock, O_RDWR | O_CLOEXEC);
    bool free_now = fd >= 0 && syscall(SYS_flock, fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0)
        close(fd);
    return free_now;
}

static void keep_warning(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    if (level == SESS_LOG_WARN)
        snprintf(last_warning, sizeof last_warning, "%s", msg);
}

/* A store opened over dir with its warnings kept in last_warning: the
 * status of the opening; *out is the store either way (the caller frees
 * it). */
static enum core_status open_watched(struct sess_store **out)
{
    struct sess_config cfg = {.max_sessions = 10, .max_cache_bytes = 1 << 20,
                              .default_ttl_s = 60, .default_max_tokens = 100,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r1"};
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = 1 << 30, .log = keep_warning};
    last_warning[0] = '\0';
    *out = sess_store_new(&cfg);
    return *out ? sess_store_open_journal(*out, &jc) : CORE_ENOMEM;
}

/* A directory in use keeps a second store out (CORE_EBUSY, naming the
 * holder's pid, the directory's files untouched), and is free again once
 * the first store is freed. */
TEST(a_second_store_is_kept_out_of_a_directory_in_use)
{
    clear_dir();
    struct sess_store *st = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    CHECK(st != NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(append_to(st, a, 4, 3) == CORE_OK);
    char lock[96], holder[200] = "", want[40];
    snprintf(lock, sizeof lock, "%s/LOCK", dir);
    FILE *f = fopen(lock, "r");
    CHECK(f != NULL && fgets(holder, sizeof holder, f) != NULL);
    if (f)
        fclose(f);
    snprintf(want, sizeof want, "pid %ld on ", (long)getpid());
    CHECK(strncmp(holder, want, strlen(want)) == 0);
    struct sess_stats before;
    sess_store_stats(st, &before);

    struct sess_store *second = NULL;
    CHECK(open_watched(&second) == CORE_EBUSY);
    CHECK(strstr(last_warning, "in use by another process") != NULL);
    snprintf(want, sizeof want, "(pid %ld on ", (long)getpid());
    CHECK(strstr(last_warning, want) != NULL);
    sess_store_free(second);
    struct sess_stats after;                /* the refused store wrote nothing */
    sess_store_stats(st, &after);
    CHECK(after.journal_bytes == before.journal_bytes);
    CHECK(append_to(st, a, 4, 4) == CORE_OK);

    sess_store_free(st);                    /* now free: a new store restores a */
    struct sess_store *again = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    CHECK(again != NULL);
    struct sess *s;
    CHECK(again && sess_acquire(again, a, &s) == CORE_OK);
    if (again && s) {
        CHECK_EQ_INT(sess_length(s), 8);
        sess_release(again, s);
    }
    sess_store_free(again);
}

/* open_watched with flock failing with err the next `times` calls. */
static enum core_status open_flock_failing(int err, int times, struct sess_store **out)
{
    flock_errno = err;
    flock_fails = times;
    return open_watched(out);
}

/* Where the file system has no locks the store opens all the same, and
 * says that it goes on unguarded. */
TEST(a_file_system_without_locks_is_used_unguarded)
{
    clear_dir();
    struct sess_store *st = NULL;
    CHECK(open_flock_failing(ENOLCK, 1, &st) == CORE_OK);
    CHECK(strstr(last_warning, "going on without the lock") != NULL);
    struct sess_spec sp = spec_f32();
    char a[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(append_to(st, a, 4, 5) == CORE_OK);
    sess_store_free(st);
    struct sess_store *again = open_store(JNL_FSYNC_NO, 1 << 30, NULL);
    struct sess *s = NULL;
    CHECK(again && sess_acquire(again, a, &s) == CORE_OK);
    if (again && s) {
        CHECK_EQ_INT(sess_length(s), 4);
        sess_release(again, s);
    }
    sess_store_free(again);
}

/* An interrupted flock is tried again; another error refuses the store
 * (CORE_EIO); a LOCK replaced between the open and the lock is opened
 * again, so the lock held is on the file the name holds. */
TEST(the_lock_survives_interruptions_errors_and_a_replaced_file)
{
    clear_dir();
    struct sess_store *st = NULL;
    CHECK(open_flock_failing(EINTR, 2, &st) == CORE_OK);
    CHECK(last_warning[0] == '\0');
    CHECK(!lock_is_free());
    sess_store_free(st);
    CHECK(lock_is_free());

    CHECK(open_flock_failing(EIO, 1, &st) == CORE_EIO);
    CHECK(strstr(last_warning, "cannot lock") != NULL);
    sess_store_free(st);

    flock_replaces = true;
    CHECK(open_watched(&st) == CORE_OK);
    CHECK(!flock_replaces);
    CHECK(!lock_is_free());                 /* held on the LOCK named now */
    sess_store_free(st);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-journal-%ld", (long)getpid());
    snprintf(copy_dir, sizeof copy_dir, "%s-copy", dir);
    mkdir(dir, 0700);
    mkdir(copy_dir, 0700);
    RUN(crc32c_matches_reference);
    RUN(records_round_trip_and_damage_is_found);
    RUN(every_change_survives_a_reopen);
    RUN(snapshots_written_during_appends_lose_nothing);
    RUN(a_failed_snapshot_is_counted);
    RUN(torn_journal_keeps_what_came_before);
    RUN(expired_sessions_stay_gone);
    RUN(a_refused_write_leaves_the_session_as_it_was);
    RUN(a_refused_write_on_a_fork_keeps_its_shared_page);
    RUN(an_imported_session_is_journaled_under_a_new_id);
    RUN(a_rolling_session_survives_replay_and_snapshots);
    RUN(a_fork_record_holds_no_rows);
    RUN(forks_during_snapshots_replay_as_they_were);
    RUN(a_second_store_is_kept_out_of_a_directory_in_use);
    RUN(a_file_system_without_locks_is_used_unguarded);
    RUN(the_lock_survives_interruptions_errors_and_a_replaced_file);
    clear_dir();
    rmdir(dir);
    store_clear_dir(copy_dir);
    rmdir(copy_dir);
    TEST_MAIN_END();
}
