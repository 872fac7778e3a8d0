/*
 * tests/unit/test_durable_start.c — which starts of a journaled store write
 * a snapshot (core/durable.c, core/replay.c). A start whose restore gives
 * exactly what the newest snapshot holds (read whole, its journal empty
 * and the only one after it, nothing expired) keeps that snapshot: no file
 * is written or replaced, the empty journal takes the changes, and the
 * next start restores every session byte for byte. Every other start
 * writes one and says why: records in the journal, a damaged snapshot, a
 * damaged journal (cut back, even to nothing), an empty journal of an
 * unfinished snapshot after it, a session expired meanwhile, state files
 * of an older attnd (one that cannot be read now fails the start and is
 * kept; a damaged one is set aside), sessions in an older encoding (not version 5, which
 * sessions without an idempotency key are still written in), sessions last used
 * in the future of a wall clock that went back, a journal with another
 * name (a hard-linked copy). Start/stop cycles with and without changes
 * leave one snapshot and one journal. Restored sessions keep their order
 * of use (lru eviction). jnl_reopen_empty takes only the empty journal of
 * its generation, with no other name. A start whose journal cannot be made
 * says that no journal is open, and so does the first change refused.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/persist.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/state_dir.h"
#include "tests/store_util.h"

/* Sessions without a TTL (unless their spec has one): a use journals
 * nothing, so a run that only reads leaves its journal empty. */
static struct sess_store *open_dir(void)
{
    return open_dir_ttl(0);
}

static struct sess_stats stats_of(struct sess_store *st)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    return ss;
}

/* ---- the files of the directory ------------------------------------------ */

enum { MAX_FILES = 32 };

/* Every file of dir but LOCK: name, inode, size, modification time. */
struct files {
    int n;
    char name[MAX_FILES][64];
    ino_t ino[MAX_FILES];
    off_t size[MAX_FILES];
    struct timespec mtime[MAX_FILES];
};

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void list_files(struct files *f)
{
    memset(f, 0, sizeof *f);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && f->n < MAX_FILES)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "LOCK") &&
            strlen(e->d_name) < sizeof f->name[0])
            memcpy(f->name[f->n++], e->d_name, strlen(e->d_name) + 1);
    if (d)
        closedir(d);
    qsort(f->name, (size_t)f->n, sizeof f->name[0], by_name);
    for (int i = 0; i < f->n; i++) {
        struct stat sb;
        CHECK(stat(path_of(f->name[i]), &sb) == 0);
        f->ino[i] = sb.st_ino;
        f->size[i] = sb.st_size;
        f->mtime[i] = sb.st_mtim;
    }
}

/* Whether a and b are the same files, none of them written since. */
static bool same_files(const struct files *a, const struct files *b)
{
    bool same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++)
        same = strcmp(a->name[i], b->name[i]) == 0 && a->ino[i] == b->ino[i] &&
               a->size[i] == b->size[i] && a->mtime[i].tv_sec == b->mtime[i].tv_sec &&
               a->mtime[i].tv_nsec == b->mtime[i].tv_nsec;
    if (!same)
        for (int i = 0; i < (a->n > b->n ? a->n : b->n); i++)
            printf("    %-28s %-28s\n", i < a->n ? a->name[i] : "-", i < b->n ? b->name[i] : "-");
    return same;
}

/* The generations of the snapshots and journals in dir (0: none). */
static void gens_of(int *snapshots, int *journals, uint64_t *newest_snapshot)
{
    struct files f;
    list_files(&f);
    *snapshots = *journals = 0;
    *newest_snapshot = 0;
    for (int i = 0; i < f.n; i++) {
        uint64_t g;
        if (sscanf(f.name[i], "snapshot.%16" SCNx64, &g) == 1 && strlen(f.name[i]) == 25) {
            (*snapshots)++;
            if (g > *newest_snapshot)
                *newest_snapshot = g;
        } else if (strncmp(f.name[i], "journal.", 8) == 0 && strlen(f.name[i]) == 24) {
            (*journals)++;
        }
    }
}

/* ---- the sessions -------------------------------------------------------- */

enum { N_SESS = 6 };
static char ids[N_SESS][SESS_ID_MAX];
static void *want[N_SESS];          /* each one's export; NULL: gone */
static size_t want_n[N_SESS];

static enum core_status new_f32(struct sess_store *st, char *id)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 8, .d_v = 8},
                           .params = {.dtype = ATTN_F32, .scale = 0.25}};
    return sess_create(st, &sp, id);
}

/* Two heads over one kv head of 4 float64 values, with RoPE; m rows. */
static enum core_status new_f64(struct sess_store *st, char *id, size_t m)
{
    struct sess_spec sp = {.shape = {.h = 2, .h_kv = 1, .d_k = 4, .d_v = 4},
                           .params = {.dtype = ATTN_F64, .scale = 0.5, .rope = true,
                                      .rope_base = 10000}};
    enum core_status rc = sess_create(st, &sp, id);
    double k[64], v[64];
    for (size_t i = 0; i < m * 4 && i < 64; i++) {
        k[i] = (double)(i * 37 % 101) / 50.0 - 1;
        v[i] = (double)(i * 53 % 97) / 48.0 - 1;
    }
    struct sess *s;
    if (rc == CORE_OK && (rc = sess_acquire(st, id, &s)) == CORE_OK) {
        rc = sess_append(st, s, k, v, m, -1);
        sess_release(st, s);
    }
    return rc;
}

/* The export of session id (malloc'd), NULL when it is not there. */
static void *export_of(struct sess_store *st, const char *id, size_t *n)
{
    struct sess *s;
    void *p = NULL;
    *n = 0;
    if (sess_acquire(st, id, &s) != CORE_OK)
        return NULL;
    if (sess_export(st, s, &p, n) != CORE_OK)
        p = NULL;
    sess_release(st, s);
    return p;
}

/* want[] := what st holds now. */
static void note_all(struct sess_store *st)
{
    for (int i = 0; i < N_SESS; i++) {
        free(want[i]);
        want[i] = export_of(st, ids[i], &want_n[i]);
    }
}

/* Whether st holds every session of want[] byte for byte, and no other. */
static bool as_noted(struct sess_store *st)
{
    bool ok = st != NULL;
    size_t count = 0;
    for (int i = 0; ok && i < N_SESS; i++) {
        size_t n;
        void *p = export_of(st, ids[i], &n);
        count += p != NULL;
        if ((p == NULL) != (want[i] == NULL) ||
            (p && (n != want_n[i] || memcmp(p, want[i], n) != 0))) {
            printf("    session %d differs (%zu bytes, want %zu)\n", i, n, want_n[i]);
            ok = false;
        }
        free(p);
    }
    return ok && stats_of(st).sessions == count;
}

/*
 * A fresh directory holding snapshot.2 (written as a drain writes it) and
 * an empty journal.2: a float32 session of 100 rows, a fork of it with 3
 * more, one cut from 70 rows to 65, a float64 one of two heads with RoPE,
 * an empty one, and one deleted.
 */
static void build_state(void)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st != NULL);
    if (!st)
        return;
    CHECK(new_f32(st, ids[0]) == CORE_OK && store_add_rows(st, ids[0], 100, 8, 1) == CORE_OK);
    CHECK(store_fork_of(st, ids[0], ids[1]) == CORE_OK);
    CHECK(store_add_rows(st, ids[1], 3, 8, 2) == CORE_OK);
    CHECK(new_f32(st, ids[2]) == CORE_OK && store_add_rows(st, ids[2], 70, 8, 3) == CORE_OK);
    CHECK(store_truncate_of(st, ids[2], 65) == CORE_OK);
    CHECK(new_f64(st, ids[3], 9) == CORE_OK);
    CHECK(new_f32(st, ids[4]) == CORE_OK);
    CHECK(new_f32(st, ids[5]) == CORE_OK && store_add_rows(st, ids[5], 5, 8, 4) == CORE_OK);
    CHECK(sess_delete(st, ids[5]) == CORE_OK);
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
    note_all(st);
    sess_store_free(st);
    CHECK(exists("snapshot.0000000000000002") && exists("journal.0000000000000002"));
    CHECK(!exists("snapshot.0000000000000001") && !exists("journal.0000000000000001"));
}

#define SNAP2 "snapshot.0000000000000002"
#define J2 "journal.0000000000000002"

/* ---- keeping the snapshot ------------------------------------------------ */

TEST(a_start_after_a_drain_keeps_its_snapshot)
{
    build_state();
    struct files before, after;
    list_files(&before);
    struct sess_store *st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: snapshot 0000000000000002 kept: 5 sessions"));
    CHECK(strstr(logged, "written") == NULL && strstr(logged, "warn") == NULL);
    list_files(&after);
    CHECK(same_files(&before, &after));         /* nothing written, nothing removed */
    struct stat sb;
    CHECK(stat(path_of(SNAP2), &sb) == 0);
    CHECK(st && stats_of(st).snapshots == 0);
    CHECK(st && stats_of(st).snapshot_bytes == (uint64_t)sb.st_size);
    /* the changes go into journal.2, after the snapshot it follows */
    CHECK(st && store_add_rows(st, ids[0], 2, 8, 5) == CORE_OK);
    CHECK(st && store_truncate_of(st, ids[1], 50) == CORE_OK);
    CHECK(st && sess_delete(st, ids[2]) == CORE_OK);
    CHECK(st && new_f32(st, ids[5]) == CORE_OK);
    CHECK(st && store_add_rows(st, ids[5], 7, 8, 6) == CORE_OK);
    if (st) {
        note_all(st);
        sess_store_free(st);                    /* as a kill: no snapshot */
    }
    CHECK(stat(path_of(J2), &sb) == 0 && sb.st_size > JNL_HEADER_BYTES);
    /* the next start reads snapshot.2 and journal.2: everything as it was */
    st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: a new snapshot is written at start: records in the journal "
               "since snapshot.0000000000000002: 5"));
    CHECK(said("journal: snapshot 0000000000000003 written: 5 sessions"));
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
    CHECK(!exists(SNAP2) && !exists(J2));
    /* and the one after that keeps the snapshot that start wrote */
    st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: snapshot 0000000000000003 kept: 5 sessions"));
    if (st)
        sess_store_free(st);
}

/* Starts that only read sessions, or that change some, one after another:
 * one snapshot and one journal stay, and only a start after changes
 * writes a snapshot (a new generation). */
TEST(many_starts_leave_one_snapshot_and_one_journal)
{
    build_state();
    int written = 0, kept = 0;
    uint64_t gen_before = 2;
    for (int cycle = 0; cycle < 24; cycle++) {
        struct sess_store *st = open_dir();
        CHECK(st && as_noted(st));
        bool wrote = strstr(logged, "a new snapshot is written at start") != NULL;
        written += wrote;
        kept += strstr(logged, "kept: 5 sessions") != NULL;
        /* a change every third run */
        bool change = cycle % 3 == 2;
        if (st && change) {
            CHECK(store_add_rows(st, ids[4], 1, 8, (unsigned)cycle) == CORE_OK);
            note_all(st);
        }
        if (st)
            sess_store_free(st);
        int snapshots, journals;
        uint64_t gen;
        gens_of(&snapshots, &journals, &gen);
        CHECK_EQ_INT(snapshots, 1);
        CHECK_EQ_INT(journals, 1);
        CHECK(gen == gen_before + (wrote ? 1 : 0));
        gen_before = gen;
        struct files f;
        list_files(&f);
        CHECK_EQ_INT(f.n, 2);
    }
    CHECK_EQ_INT(written, 7);       /* the starts after a change: 3, 6, ..., 21 */
    CHECK_EQ_INT(kept, 24 - 7);
}

/* ---- starts that write one -------------------------------------------------- */

/* The newest snapshot's generation after a start that wrote one, and that
 * the old files went. */
static void check_written_over(uint64_t old_gen, const char *reason)
{
    int snapshots, journals;
    uint64_t gen;
    CHECK(said(reason));
    gens_of(&snapshots, &journals, &gen);
    CHECK(gen > old_gen);
    CHECK_EQ_INT(snapshots, 1);
    CHECK_EQ_INT(journals, 1);
}

TEST(a_damaged_snapshot_is_rewritten)
{
    build_state();
    struct stat sb;
    CHECK(stat(path_of(SNAP2), &sb) == 0);
    flip(SNAP2, (long)sb.st_size - SNAP_END_BYTES - 20);   /* the last session's rows */
    struct sess_store *st = open_dir();
    CHECK(st && stats_of(st).sessions == 4);
    check_written_over(2, "journal: a new snapshot is written at start: files were "
                          "damaged or missing");
    CHECK(exists(SNAP2 ".copy"));
    if (st) {
        note_all(st);
        sess_store_free(st);
    }
    /* the rewritten state is the new base: the next start keeps it */
    st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: snapshot 0000000000000003 kept: 4 sessions"));
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/* journal.2's only record damaged: cut back, it holds nothing after its
 * header, but a record was dropped: the start writes a snapshot. */
TEST(a_journal_cut_back_to_nothing_is_not_taken_for_an_empty_one)
{
    build_state();
    struct sess_store *st = open_dir();
    CHECK(st && store_add_rows(st, ids[4], 4, 8, 9) == CORE_OK);
    if (st)
        sess_store_free(st);
    struct stat sb;
    CHECK(stat(path_of(J2), &sb) == 0 && sb.st_size > JNL_HEADER_BYTES);
    flip(J2, (long)sb.st_size - 10);            /* in its rows */
    st = open_dir();
    CHECK(st && as_noted(st));                  /* the append is gone: as built */
    CHECK(said("1 dropped"));
    CHECK(said("journal.0000000000000002: a copy is kept as"));
    check_written_over(2, "journal: a new snapshot is written at start: files were "
                          "damaged or missing");
    CHECK(exists(J2 ".copy"));
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: snapshot 0000000000000003 kept"));
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/* snapshot.2, an empty journal.2, and an empty journal.3 after it (the
 * switch of a snapshot that was not finished): the start writes one, and
 * the journals go with the old snapshot. */
TEST(an_empty_journal_of_an_unfinished_snapshot_is_folded_in)
{
    build_state();
    int err = 0;
    struct jnl *j = jnl_create(path_of("journal.0000000000000003"), JNL_MAGIC_JOURNAL, 3,
                               JNL_FSYNC_NO, &err);
    CHECK(j != NULL);
    jnl_close(j);
    struct sess_store *st = open_dir();
    CHECK(st && as_noted(st));
    check_written_over(2, "journal: a new snapshot is written at start: "
                          "journal.0000000000000003 follows snapshot.0000000000000002");
    CHECK(exists("snapshot.0000000000000004") && !exists("journal.0000000000000003"));
    if (st)
        sess_store_free(st);
}

/* A session whose TTL ran out since the snapshot was written is gone, and
 * the start writes the snapshot without it. */
TEST(a_session_expired_since_the_snapshot_is_folded_in)
{
    build_state();
    struct sess_store *st = open_dir();
    char gone[SESS_ID_MAX];
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 8, .d_v = 8},
                           .params = {.dtype = ATTN_F32, .scale = 0.25}, .ttl_s = 0.05};
    CHECK(st && sess_create(st, &sp, gone) == CORE_OK);
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st)
        sess_store_free(st);
    struct timespec nap = {0, 200 * 1000 * 1000};   /* 4 TTLs */
    nanosleep(&nap, NULL);
    st = open_dir();
    CHECK(st && as_noted(st) && !sess_exists(st, gone));
    check_written_over(3, "journal: a new snapshot is written at start: sessions expired "
                          "since snapshot.0000000000000003 was written: 1");
    if (st)
        sess_store_free(st);
}

/* <id>.sess files of an older attnd's drain are taken in, written into a
 * snapshot and removed. */
TEST(state_files_of_an_older_attnd_are_folded_in)
{
    build_state();
    struct sess_config cfg = {.max_sessions = 10, .max_cache_bytes = 1 << 20,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r1"};
    struct sess_store *old = sess_store_new(&cfg);
    char extra[SESS_ID_MAX];
    CHECK(old && new_f32(old, extra) == CORE_OK);
    CHECK(old && store_add_rows(old, extra, 6, 8, 11) == CORE_OK);
    CHECK(old && sess_store_save(old, dir, NULL, NULL) == CORE_OK);
    if (old)
        sess_store_free(old);
    struct sess_store *st = open_dir();
    CHECK(st && store_length_of(st, extra) == 6);
    check_written_over(2, "journal: a new snapshot is written at start: session files of "
                          "an older attnd were read");
    char name[SESS_ID_MAX + 8];
    snprintf(name, sizeof name, "%s.sess", extra);
    CHECK(!exists(name));
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && store_length_of(st, extra) == 6);
    CHECK(said("kept: 6 sessions"));
    if (st)
        sess_store_free(st);
}

/* A damaged <id>.sess file of an older attnd is not restored, and it is
 * set aside as NAME.setaside, as a damaged journal is, not removed with
 * the files the snapshot took in. */
TEST(a_damaged_state_file_of_an_older_attnd_is_set_aside)
{
    build_state();
    struct sess_config cfg = {.max_sessions = 10, .max_cache_bytes = 1 << 20,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r1"};
    struct sess_store *old = sess_store_new(&cfg);
    char extra[SESS_ID_MAX] = "";
    CHECK(old && new_f32(old, extra) == CORE_OK);
    CHECK(old && store_add_rows(old, extra, 6, 8, 11) == CORE_OK);
    CHECK(old && sess_store_save(old, dir, NULL, NULL) == CORE_OK);
    if (old)
        sess_store_free(old);
    char name[SESS_ID_MAX + 8], kept[SESS_ID_MAX + 20];
    snprintf(name, sizeof name, "%s.sess", extra);
    snprintf(kept, sizeof kept, "%s.sess.setaside", extra);
    flip(name, 100);
    struct sess_store *st = open_dir();
    CHECK(st && store_length_of(st, extra) == (size_t)-1);
    CHECK(st && as_noted(st));
    CHECK(said("skipping") && said("set aside as"));
    CHECK(!exists(name));
    CHECK(exists(kept));
    if (st)
        sess_store_free(st);
    st = open_dir();                    /* never read again, never removed */
    CHECK(st && as_noted(st) && exists(kept));
    if (st)
        sess_store_free(st);
    unlink(path_of(kept));
}

/* The big session (tests/store_util.h) saved as an <id>.sess file, as an
 * older attnd's drain left it (made in a child: in_child says why). */
static void save_big(int to_parent)
{
    struct sess_config cfg = {.max_sessions = 10, .max_cache_bytes = 1 << 26,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r1"};
    struct sess_store *old = sess_store_new(&cfg);
    char id[SESS_ID_MAX] = "";
    CHECK(old && store_new_big(old, id) == CORE_OK);
    CHECK(old && sess_store_save(old, dir, NULL, NULL) == CORE_OK);
    CHECK(write(to_parent, id, strlen(id)) == (ssize_t)strlen(id));
    if (old)
        sess_store_free(old);
}

/*
 * An <id>.sess file of an older attnd that cannot be read now (too many
 * open files, memory short; a permission alike) is not taken for a bad
 * one: the start fails and the file stays. Before, it was skipped, and
 * the snapshot the start wrote without its session let the file be
 * removed. The descriptor limit is set at each number past those open
 * now: whatever else the start needs them for, the file never goes unless
 * its session was restored, and at one of them its read is what stops the
 * start. Memory: the file of a session of 32 MiB, with 8 MiB of address
 * space to spare.
 */
TEST(a_state_file_that_cannot_be_read_now_is_kept)
{
    bool met = false;
    for (int more = 0; more < 10; more++) {
        build_state();
        struct sess_config cfg = {.max_sessions = 10, .max_cache_bytes = 1 << 20,
                                  .policy = SESS_POLICY_REJECT, .replica_id = "r1"};
        struct sess_store *old = sess_store_new(&cfg);
        char extra[SESS_ID_MAX], name[SESS_ID_MAX + 8];
        CHECK(old && new_f32(old, extra) == CORE_OK);
        CHECK(old && store_add_rows(old, extra, 6, 8, 11) == CORE_OK);
        CHECK(old && sess_store_save(old, dir, NULL, NULL) == CORE_OK);
        if (old)
            sess_store_free(old);
        snprintf(name, sizeof name, "%s.sess", extra);
        struct sess_store *st = open_under(open_dir, RLIMIT_NOFILE,
                                           (unsigned long long)(next_fd() + more));
        bool restored = st && store_length_of(st, extra) == 6;
        CHECK(restored || exists(name));
        if (!restored && !exists(name))
            printf("    its file removed, its session not restored, at %d more\n", more);
        char line[300];
        snprintf(line, sizeof line, "session load: %s/%s cannot be read now (%s)", dir, name,
                 strerror(EMFILE));
        if (strstr(logged, line)) {
            met = true;
            CHECK(st == NULL && exists(name));
            CHECK(said("could not all be read: not starting"));
        }
        if (st)
            sess_store_free(st);
    }
    CHECK(met);

    if (!as_limit_holds())
        return;
    build_state();
    char big[SESS_ID_MAX], name[SESS_ID_MAX + 8], line[300];
    in_child(save_big, big);
    snprintf(name, sizeof name, "%s.sess", big);
    CHECK(big[0] && exists(name));
    struct sess_store *st = open_under(open_dir, RLIMIT_AS, address_space() + (8ULL << 20));
    CHECK(st == NULL && exists(name));
    snprintf(line, sizeof line, "session load: %s/%s cannot be read now (out of memory)",
             dir, name);
    CHECK(said(line));
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && store_length_of(st, big) == STORE_BIG_ROWS);
    CHECK(!exists(name));
    if (st)
        sess_store_free(st);
}

/*
 * snapshot.2, of one float32 session without biases (id), rewritten with
 * that session in the version 4 encoding, as an attnd before version 5
 * wrote it: version 5 less its u32 yarn_truncate (after the window), the
 * zero padding before the rows moved with it, the CRC-32C redone. Layout:
 * core/persist.c; for this session the yarn field is at 252 + the id's
 * length, followed by the three u64 bias counts.
 */
static void snapshot_in_version_4(const char *id)
{
    FILE *f = fopen(path_of(SNAP2), "rb");
    static unsigned char buf[1 << 16], out[1 << 16], rec[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    uint32_t len = 0;
    size_t at = JNL_HEADER_BYTES + SNAP_BEGIN_BYTES;      /* after the begin record */
    memcpy(&len, buf + at, 4);
    size_t end = at + 4 + (size_t)len + 4;  /* one record, then the end record */
    CHECK(n > at + 48 && n < sizeof buf && n == end + SNAP_END_BYTES);
    if (!(n > at + 48 && n == end + SNAP_END_BYTES))
        return;
    const unsigned char *enc = buf + at + 4 + 8 + 12;
    size_t enc_n = len - 8 - 12, yarn = 252 + strlen(id), counts_end = yarn + 4 + 24;
    size_t pad5 = (8 - counts_end % 8) % 8, pad4 = (8 - (counts_end - 4) % 8) % 8;
    size_t rows = counts_end + pad5, rows_n = enc_n - 4 - rows, o = 0;
    memcpy(out, enc, yarn);
    o = yarn;
    memcpy(out + o, enc + yarn + 4, 24);
    o += 24;
    memset(out + o, 0, pad4);
    o += pad4;
    memcpy(out + o, enc + rows, rows_n);
    o += rows_n;
    uint32_t version = 4, crc;
    memcpy(out + 8, &version, 4);
    crc = jnl_crc32c(0, out, o);
    memcpy(out + o, &crc, 4);
    o += 4;
    /* the record around it: u32 len, u64 lsn, u32 type, f64 wall, encoding,
     * crc; and, as that attnd wrote it, no begin or end record */
    uint32_t len4 = (uint32_t)(8 + 12 + o);
    memcpy(rec, buf, JNL_HEADER_BYTES);
    memcpy(rec + JNL_HEADER_BYTES, &len4, 4);
    memcpy(rec + JNL_HEADER_BYTES + 4, buf + at + 4, 8 + 12);
    memcpy(rec + JNL_HEADER_BYTES + 4 + 20, out, o);
    crc = jnl_crc32c(0, rec + JNL_HEADER_BYTES + 4, len4);
    memcpy(rec + JNL_HEADER_BYTES + 4 + len4, &crc, 4);
    size_t total = JNL_HEADER_BYTES + 4 + len4 + 4;
    f = fopen(path_of(SNAP2), "wb");
    CHECK(f && fwrite(rec, 1, total, f) == total);
    if (f)
        fclose(f);
}

/* A snapshot of an older attnd, whole, in an older encoding of its
 * sessions: the start writes it again in the current one. */
TEST(a_snapshot_in_an_older_encoding_is_written_again)
{
    store_clear_dir(dir);
    for (int i = 0; i < N_SESS; i++) {
        free(want[i]);
        want[i] = NULL;
    }
    struct sess_store *st = open_dir();
    CHECK(st && new_f32(st, ids[0]) == CORE_OK);
    CHECK(st && store_add_rows(st, ids[0], 70, 8, 12) == CORE_OK);
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st) {
        note_all(st);
        sess_store_free(st);
    }
    snapshot_in_version_4(ids[0]);
    st = open_dir();
    CHECK(st && as_noted(st));                  /* read as it was */
    check_written_over(2, "journal: a new snapshot is written at start: sessions of "
                          "snapshot.0000000000000002 in an encoding older than version 5: 1");
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && as_noted(st));
    CHECK(said("journal: snapshot 0000000000000003 kept: 1 sessions"));
    if (st)
        sess_store_free(st);
}

/* A snapshot holding a session with an idempotency key (version 6) and
 * sessions without one (version 5, as before keys): neither is an older
 * encoding, so the start after a drain keeps it, and the key is found
 * again, held by the same session. */
TEST(a_snapshot_with_keyed_and_unkeyed_sessions_is_kept)
{
    build_state();
    struct sess_store *st = open_dir();
    struct sess_idem idem = {.scope = "tenant", .key = "create-7"};
    memset(idem.digest, 0x5a, sizeof idem.digest);
    char keyed[SESS_ID_MAX], found[SESS_ID_MAX];
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 8, .d_v = 8},
                           .params = {.dtype = ATTN_F32, .scale = 0.25}};
    CHECK(st && sess_create_idem(st, &sp, &idem, keyed, NULL) == CORE_OK);
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && said("journal: snapshot 0000000000000003 kept: 6 sessions"));
    bool same = false;
    CHECK(st && sess_idem_find(st, &idem, found, &same) && same && strcmp(found, keyed) == 0);
    idem.digest[0] ^= 1;
    CHECK(st && sess_idem_find(st, &idem, found, &same) && !same);
    if (st)
        sess_store_free(st);
}

/* snapshot.2, of one session, as if written with the wall clock ahead by
 * ahead_s seconds: its record's wall-clock time moved, its checksum made
 * again (u32 len, then u64 lsn, u32 type, f64 wall, ...; u32 crc). */
static void snapshot_from_the_future(double ahead_s)
{
    FILE *f = fopen(path_of(SNAP2), "r+b");
    static unsigned char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    uint32_t len = 0;
    size_t at = JNL_HEADER_BYTES + SNAP_BEGIN_BYTES;      /* after the begin record */
    memcpy(&len, buf + at, 4);
    bool one = n > at + 24 && n == at + 4 + (size_t)len + 4 + SNAP_END_BYTES;
    CHECK(f && one);
    if (f && one) {
        unsigned char *rec = buf + at + 4;
        double wall;
        memcpy(&wall, rec + 12, 8);
        wall += ahead_s;
        memcpy(rec + 12, &wall, 8);
        uint32_t crc = jnl_crc32c(0, rec, len);
        memcpy(rec + len, &crc, 4);
        CHECK(fseek(f, 0, SEEK_SET) == 0 && fwrite(buf, 1, n, f) == n);
    }
    if (f)
        fclose(f);
}

/* A session last used after the present, by a wall clock that went back
 * since the snapshot was written: its idle time counts from this start,
 * and the snapshot is written again, or every later start would count
 * from this one again and the session outlive its time to live. */
TEST(a_snapshot_written_by_a_clock_ahead_is_written_again)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st && new_f32(st, ids[0]) == CORE_OK);
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st)
        sess_store_free(st);
    snapshot_from_the_future(10 * 86400.0);
    st = open_dir();
    CHECK(st && sess_exists(st, ids[0]));
    check_written_over(2, "journal: a new snapshot is written at start: sessions last used "
                          "after the present by the wall clock (it went back): 1");
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(said("journal: snapshot 0000000000000003 kept: 1 sessions"));
    if (st)
        sess_store_free(st);
}

/* A journal file with another name, as in a copy of the state directory
 * made with hard links (cp -al), is not appended to: the other copy would
 * replay what this one does. The start writes a snapshot instead. */
TEST(a_journal_with_another_name_is_not_reopened)
{
    build_state();
    char other[200];
    snprintf(other, sizeof other, "%s-copy-of-journal", dir);
    unlink(other);
    CHECK(link(path_of(J2), other) == 0);
    struct sess_store *st = open_dir();
    CHECK(st && as_noted(st));
    check_written_over(2, "journal: a new snapshot is written at start: "
                          "journal.0000000000000002 cannot be reopened (Too many links)");
    CHECK(st && store_add_rows(st, ids[0], 2, 8, 9) == CORE_OK);
    if (st)
        sess_store_free(st);
    struct stat sb;
    CHECK(stat(other, &sb) == 0 && sb.st_size == JNL_HEADER_BYTES);  /* untouched */
    unlink(other);
}

/* ---- the order of eviction after a start ----------------------------------- */

static double ticks = 2000.0;

/* A clock that moves one second each time it is read. */
static double ticking(void *arg)
{
    (void)arg;
    return ticks += 1.0;
}

static struct sess_store *open_lru(size_t max_sessions)
{
    struct sess_config cfg = {.max_sessions = max_sessions, .max_cache_bytes = 1 << 26,
                              .default_max_tokens = 100000, .policy = SESS_POLICY_LRU,
                              .replica_id = "r0"};
    struct sess_store *st = sess_store_new(&cfg);
    if (!st)
        return NULL;
    sess_store_set_clock(st, ticking, NULL);
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40, .log = keep_log};
    if (sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        return NULL;
    }
    return st;
}

/* Restored sessions keep their order of use: with --cache lru, the least
 * recently used goes first after a start as before it (the snapshot lists
 * them most recent first, and the replay had reversed them). */
TEST(a_start_keeps_the_order_of_use)
{
    store_clear_dir(dir);
    char a[SESS_ID_MAX], b[SESS_ID_MAX], c[SESS_ID_MAX], d[SESS_ID_MAX];
    struct sess_store *st = open_lru(3);
    CHECK(st && new_f32(st, a) == CORE_OK && new_f32(st, b) == CORE_OK &&
          new_f32(st, c) == CORE_OK);
    CHECK(st && store_add_rows(st, b, 1, 8, 1) == CORE_OK);    /* b, then c, then a */
    CHECK(st && store_add_rows(st, c, 1, 8, 2) == CORE_OK);
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st)
        sess_store_free(st);
    /* a start that keeps the snapshot: a, the least recently used, goes */
    st = open_lru(3);
    CHECK(said("kept: 3 sessions"));
    CHECK(st && new_f32(st, d) == CORE_OK);
    CHECK(st && !sess_exists(st, a) && sess_exists(st, b) && sess_exists(st, c));
    if (st)
        sess_store_free(st);                    /* a crash: the journal has d */
    /* one that writes it, after the journal's create of d: then b */
    st = open_lru(3);
    CHECK(said("a new snapshot is written at start: records in the journal"));
    CHECK(st && new_f32(st, a) == CORE_OK);
    CHECK(st && !sess_exists(st, b) && sess_exists(st, c) && sess_exists(st, d));
    if (st)
        sess_store_free(st);
}

/* ---- reopening an empty journal --------------------------------------------- */

TEST(reopen_empty_takes_only_the_empty_journal_of_its_generation)
{
    store_clear_dir(dir);
    const char *p = path_of("journal.0000000000000007");
    char path[200];
    snprintf(path, sizeof path, "%s", p);
    int err = 0;
    CHECK(jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &err) == NULL);
    CHECK_EQ_INT(err, ENOENT);
    struct jnl *j = jnl_create(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &err);
    CHECK(j != NULL);
    jnl_close(j);
    CHECK(jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, 8, JNL_FSYNC_NO, &err) == NULL);
    CHECK_EQ_INT(err, EINVAL);
    CHECK(jnl_reopen_empty(path, JNL_MAGIC_SNAPSHOT, 7, JNL_FSYNC_NO, &err) == NULL);
    CHECK_EQ_INT(err, EINVAL);
    /* one with another name */
    char other[200];
    snprintf(other, sizeof other, "%s-other-name", dir);
    unlink(other);
    CHECK(link(path, other) == 0);
    CHECK(jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &err) == NULL);
    CHECK_EQ_INT(err, EMLINK);
    unlink(other);
    /* the right one: appends follow the header, and read back */
    j = jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &err);
    CHECK(j != NULL && jnl_size(j) == JNL_HEADER_BYTES);
    char rec[] = "one record";
    struct iovec part = {rec, sizeof rec};
    CHECK(j && jnl_append(j, 41, &part, 1, false, &err) == CORE_OK);
    jnl_close(j);
    struct jnl_reader r;
    uint64_t lsn = 0;
    const void *got;
    size_t n = 0;
    CHECK(jnl_read_open(&r, path, JNL_MAGIC_JOURNAL) == CORE_OK);
    CHECK(jnl_read_next(&r, &lsn, &got, &n) == 1 && lsn == 41 && n == sizeof rec &&
          memcmp(got, rec, n) == 0);
    CHECK(jnl_read_next(&r, &lsn, &got, &n) == 0);
    jnl_read_close(&r);
    /* a record after the header: not empty */
    CHECK(jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, 7, JNL_FSYNC_NO, &err) == NULL);
    CHECK_EQ_INT(err, EINVAL);
    unlink(path);
}

/* A first start whose journal cannot be written (a file-size limit of 0
 * here; a full disk in the field) goes on with no journal: it says so,
 * and a change is refused for that, not for a "No such file or directory"
 * there is none of; once a snapshot opens one, changes are taken. */
TEST(a_start_with_no_journal_says_so)
{
    store_clear_dir(dir);
    signal(SIGXFSZ, SIG_IGN);                   /* a write past the limit: EFBIG */
    struct sess_store *st = open_under(open_dir, RLIMIT_FSIZE, 0);
    CHECK(st != NULL);
    CHECK(said("journal: snapshot failed (File too large); no journal is open to take "
               "changes (they are refused) until one succeeds"));
    if (st) {
        char id[SESS_ID_MAX];
        logged[0] = '\0';
        CHECK(new_session(st, id) == CORE_ESTORAGE);
        CHECK(said("journal: no journal is open (the snapshot that opens one failed); "
                   "changes are refused until one succeeds"));
        CHECK(strstr(logged, "No such file") == NULL);
        CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
        CHECK(new_session(st, id) == CORE_OK);
        sess_store_free(st);
    }
    store_clear_dir(dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-start-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(a_start_after_a_drain_keeps_its_snapshot);
    RUN(many_starts_leave_one_snapshot_and_one_journal);
    RUN(a_damaged_snapshot_is_rewritten);
    RUN(a_journal_cut_back_to_nothing_is_not_taken_for_an_empty_one);
    RUN(an_empty_journal_of_an_unfinished_snapshot_is_folded_in);
    RUN(a_session_expired_since_the_snapshot_is_folded_in);
    RUN(state_files_of_an_older_attnd_are_folded_in);
    RUN(a_damaged_state_file_of_an_older_attnd_is_set_aside);
    RUN(a_state_file_that_cannot_be_read_now_is_kept);
    RUN(a_snapshot_in_an_older_encoding_is_written_again);
    RUN(a_snapshot_with_keyed_and_unkeyed_sessions_is_kept);
    RUN(a_snapshot_written_by_a_clock_ahead_is_written_again);
    RUN(a_journal_with_another_name_is_not_reopened);
    RUN(a_start_keeps_the_order_of_use);
    RUN(reopen_empty_takes_only_the_empty_journal_of_its_generation);
    RUN(a_start_with_no_journal_says_so);
    for (int i = 0; i < N_SESS; i++)
        free(want[i]);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
