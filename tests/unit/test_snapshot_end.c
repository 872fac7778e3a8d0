/*
 * tests/unit/test_snapshot_end.c — a snapshot shows that it is whole
 * (core/durable.c writes it, core/replay.c reads it): it begins with a
 * BEGIN record and ends with an END record naming how many records came
 * between them. One cut between two records (or before END), or missing a
 * record its END counts, is damaged, not taken for a smaller whole one:
 * the sessions it still holds are restored, a copy is kept for a look and
 * counted, and a new snapshot is written. A snapshot without BEGIN, as an
 * attnd before these records wrote it, still loads whole, and the start
 * writes it again with them. The header stays version 1, and BEGIN and END
 * are records an older attnd drops one by one (its reader keeps SESS
 * records only), so after a rollback it restores every session.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/replay.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/state_dir.h"
#include "tests/store_util.h"

static struct sess_store *open_dir(void)
{
    return open_dir_ttl(0);
}

#define SNAP2 "snapshot.0000000000000002"
#define SNAP3 "snapshot.0000000000000003"

enum { N = 5 };
static char ids[N][SESS_ID_MAX];

/* A fresh directory holding snapshot.2 of N sessions, session i of
 * 3 * i + 1 rows, and an empty journal.2. */
static void build_state(void)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    for (int i = 0; st && i < N; i++) {
        CHECK(new_session(st, ids[i]) == CORE_OK);
        CHECK(store_add_rows(st, ids[i], (size_t)(3 * i + 1), 8, (unsigned)i) == CORE_OK);
    }
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    if (st)
        sess_store_free(st);
    CHECK(exists(SNAP2) && exists("journal.0000000000000002"));
}

/* How many sessions st holds, each at its length. */
static int held(struct sess_store *st)
{
    int n = 0;
    for (int i = 0; st && i < N; i++)
        n += store_length_of(st, ids[i]) == (size_t)(3 * i + 1);
    return n;
}

static uint64_t kept_files(struct sess_store *st)
{
    uint64_t files = 0, bytes = 0;
    if (st)
        sess_store_kept_files(st, &files, &bytes);
    return files;
}

static uint32_t version_of(const char *name)
{
    uint32_t v = 0;
    int fd = open(path_of(name), O_RDONLY);
    CHECK(fd >= 0 && pread(fd, &v, 4, 8) == 4);
    if (fd >= 0)
        close(fd);
    return v;
}

/* The next start keeps the snapshot the last one wrote, every session in it. */
static void next_start_keeps(const char *gen_name, int sessions)
{
    struct sess_store *st = open_dir();
    char line[120];
    snprintf(line, sizeof line, "journal: snapshot %s kept: %d sessions", gen_name, sessions);
    CHECK(st && held(st) == sessions);
    CHECK(said(line));
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/* Cut snapshot.2 before record 3 and before its end record (record N): each
 * time the sessions before the cut are restored, and the snapshot is not
 * taken for a whole one. Before the end record, such a cut read as a whole
 * snapshot of fewer sessions: nothing said, nothing kept, and the start
 * kept it. */
TEST(a_snapshot_cut_between_records_is_damaged)
{
    static const int cuts[] = {3, N};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        build_state();
        long bytes, off = session_record_in(SNAP2, cuts[c], &bytes);
        CHECK(truncate(path_of(SNAP2), off) == 0);
        struct sess_store *st = open_dir();
        CHECK(st && held(st) == cuts[c]);
        char line[600];
        snprintf(line, sizeof line, "%s: %d records kept, 0 dropped; it is not whole: no end "
                 "record after its %d records: it was cut short at byte %ld", path_of(SNAP2),
                 cuts[c], cuts[c], off);
        CHECK(said(line));
        CHECK(said("journal: a new snapshot is written at start: files were damaged or "
                   "missing"));
        CHECK(exists(SNAP2 ".copy") && kept_files(st) == 1);
        if (st)
            sess_store_free(st);
        CHECK(!exists(SNAP2) && exists(SNAP3));
        next_start_keeps("0000000000000003", cuts[c]);
    }
}

/* Record 2 taken out of snapshot.2: the framing holds, but its end record
 * counts N records and N - 1 are there. */
TEST(a_snapshot_missing_a_record_is_damaged)
{
    build_state();
    long bytes, off = session_record_in(SNAP2, 2, &bytes);
    struct stat sb;
    CHECK(stat(path_of(SNAP2), &sb) == 0);
    size_t size = (size_t)sb.st_size;
    unsigned char *buf = malloc(size);
    int fd = open(path_of(SNAP2), O_RDWR);
    CHECK(buf && fd >= 0 && pread(fd, buf, size, 0) == (ssize_t)size);
    if (buf && fd >= 0) {
        memmove(buf + off, buf + off + bytes, size - (size_t)(off + bytes));
        CHECK(pwrite(fd, buf, size - (size_t)bytes, 0) == (ssize_t)(size - (size_t)bytes));
        CHECK(ftruncate(fd, (off_t)(size - (size_t)bytes)) == 0);
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    struct sess_store *st = open_dir();
    CHECK(st && held(st) == N - 1 && store_length_of(st, ids[2]) == (size_t)-1);
    char line[100];
    snprintf(line, sizeof line, "it is not whole: its end record names %d records, %d were "
             "found", N, N - 1);
    CHECK(said(line));
    CHECK(exists(SNAP2 ".copy") && kept_files(st) == 1);
    if (st)
        sess_store_free(st);
    next_start_keeps("0000000000000003", N - 1);
}

/* snapshot.2 as an attnd before BEGIN and END wrote it: the header, its
 * session records, nothing before or after them. It loads whole and
 * quietly, and the start writes it again with BEGIN and END. */
TEST(a_snapshot_without_begin_and_end_still_loads)
{
    build_state();
    long bytes, from = session_record_in(SNAP2, 0, &bytes);
    long to = session_record_in(SNAP2, N, &bytes);
    CHECK(from == JNL_HEADER_BYTES + SNAP_BEGIN_BYTES && bytes == SNAP_END_BYTES);
    static unsigned char buf[1 << 16];
    int fd = open(path_of(SNAP2), O_RDWR);
    size_t n = (size_t)(to - from);
    CHECK(fd >= 0 && n < sizeof buf && pread(fd, buf, n, from) == (ssize_t)n);
    CHECK(fd >= 0 && pwrite(fd, buf, n, JNL_HEADER_BYTES) == (ssize_t)n);
    CHECK(fd >= 0 && ftruncate(fd, JNL_HEADER_BYTES + (off_t)n) == 0);
    if (fd >= 0)
        close(fd);
    struct sess_store *st = open_dir();
    CHECK(st && held(st) == N);
    char line[400];
    snprintf(line, sizeof line, "%s: %d records kept, 0 dropped", path_of(SNAP2), N);
    CHECK(said(line));
    CHECK(said("journal: a new snapshot is written at start: snapshot.0000000000000002 has "
               "no begin and end records (an older attnd wrote it)"));
    CHECK(strstr(logged, "warn") == NULL && kept_files(st) == 0);
    if (st)
        sess_store_free(st);
    CHECK(!exists(SNAP2) && exists(SNAP3) && version_of(SNAP3) == 1);
    uint32_t type = 0;                  /* after u32 len and u64 lsn */
    fd = open(path_of(SNAP3), O_RDONLY);
    CHECK(fd >= 0 && pread(fd, &type, 4, JNL_HEADER_BYTES + 12) == 4);
    CHECK(type == SESS_REC_BEGIN);
    if (fd >= 0)
        close(fd);
    next_start_keeps("0000000000000003", N);
}

/*
 * A snapshot written now, as an attnd from before BEGIN and END reads it
 * (a rollback to the previous image). That reader (core/journal.c's
 * check_header, core/replay.c's apply and read_snapshot up to 767fda2)
 * refuses a header of any version but 1 whole, restoring no session; past
 * it, it keeps a snapshot record whose payload's u32 type is SESS, and
 * drops any other record whose framing holds on its own (u32 type, f64
 * wall not NaN, lsn below the limit: apply returns false), reading on
 * after it. So every session is restored when: the header is version 1,
 * every record reads whole, the two records that are not SESS are BEGIN
 * first and END last, each with its lsn 0 and a wall-clock time, and the
 * SESS records are one a session. Before, the header was version 2.
 */
TEST(a_new_snapshot_is_read_whole_by_an_older_attnd)
{
    build_state();
    CHECK(version_of(SNAP2) == 1 && JNL_VERSION == 1);
    struct jnl_reader r;
    CHECK(jnl_read_open(&r, path_of(SNAP2), JNL_MAGIC_SNAPSHOT) == CORE_OK);
    uint64_t lsn;
    const void *p;
    size_t n;
    int got, records = 0, sess = 0, other = 0;
    uint32_t first = 0, last = 0;
    while ((got = jnl_read_next(&r, &lsn, &p, &n)) == 1) {
        uint32_t type = 0;
        double wall = NAN;
        CHECK(n >= 12);
        if (n < 12)
            break;
        memcpy(&type, p, 4);
        memcpy(&wall, (const unsigned char *)p + 4, 8);
        CHECK(!isnan(wall) && wall > 1e9);
        if (records++ == 0)
            first = type;
        last = type;
        if (type == SESS_REC_SESS) {
            sess++;
            continue;
        }
        other++;                    /* what the older reader drops, alone */
        CHECK(lsn == 0);
    }
    CHECK(got == 0 && r.off == r.size);         /* every record, whole */
    jnl_read_close(&r);
    CHECK(sess == N && other == 2 && records == N + 2);
    CHECK(first == SESS_REC_BEGIN && last == SESS_REC_END);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-snapend-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(a_snapshot_cut_between_records_is_damaged);
    RUN(a_snapshot_missing_a_record_is_damaged);
    RUN(a_snapshot_without_begin_and_end_still_loads);
    RUN(a_new_snapshot_is_read_whole_by_an_older_attnd);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
