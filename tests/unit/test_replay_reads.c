/*
 * tests/unit/test_replay_reads.c — start-up from a state directory whose
 * files cannot all be read (core/journal.c's reader, core/replay.c). The
 * program is linked with -Wl,--wrap=pread,--wrap=read (Makefile), so
 * every pread and read of the store goes through __wrap_pread and
 * __wrap_read below, which fail those of one chosen file from a chosen
 * byte on, as a disk with a bad region does: the bytes before it come as
 * a short read, the next read fails with the chosen errno. An I/O error
 * (EIO) in the middle of a journal stops its replay there, as a bad record
 * does: the records before it are kept, the journal is cut back to them
 * (its copy cannot be read either, so none is kept, and the log says so)
 * and the start goes on; one in the middle of a snapshot loses the
 * sessions from there on and keeps those before. An error that says
 * nothing of the file (ENOMEM), or a file that ends early (it shrank while
 * it was read), fails the start with every file of the directory as it
 * was, to the byte; an interrupted read (EINTR) is tried again, and reads
 * that come back short, a few bytes at a time, are taken up again.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/state_dir.h"
#include "tests/store_util.h"

/* ---- the fault ------------------------------------------------------------ */

/* What the wrappers do to reads of one file: from byte at on, fail with
 * err (-1: end the file there, as one that shrank), times times (-1:
 * always); and, when chunk > 0, return at most chunk bytes a read. */
static struct {
    char path[PATH_MAX];            /* "": no fault */
    long at;
    int err, times;
    size_t chunk;
    unsigned long changed;          /* reads the wrappers changed */
    size_t largest;                 /* the most bytes one pread asked for */
} fault;

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n);

/* Whether fd is the file of the fault. */
static bool faulty(int fd)
{
    char link[64], target[PATH_MAX];
    if (!fault.path[0])
        return false;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, target, sizeof target - 1);
    if (k <= 0)
        return false;
    target[k] = '\0';
    return strcmp(target, fault.path) == 0;
}

/* How many of the n bytes at off of the fault's file a read may return:
 * n, fewer, 0 (the file ends), or -1 with errno set. */
static ssize_t allowed(size_t n, long off)
{
    size_t most = n;
    if (fault.chunk > 0 && most > fault.chunk) {
        most = fault.chunk;
        fault.changed++;
    }
    if (fault.times == 0 || off + (long)most <= fault.at)
        return (ssize_t)most;
    if (off < fault.at) {           /* the bytes before the bad ones */
        fault.changed++;
        return (ssize_t)(fault.at - off);
    }
    fault.changed++;
    if (fault.times > 0)
        fault.times--;
    if (fault.err < 0)
        return 0;
    errno = fault.err;
    return -1;
}

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
    if (!faulty(fd))
        return __real_pread(fd, buf, n, off);
    if (n > fault.largest)
        fault.largest = n;
    ssize_t k = allowed(n, (long)off);
    return k <= 0 ? k : __real_pread(fd, buf, (size_t)k, off);
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
    off_t off = faulty(fd) ? lseek(fd, 0, SEEK_CUR) : -1;
    if (off < 0)
        return __real_read(fd, buf, n);
    ssize_t k = allowed(n, (long)off);
    return k <= 0 ? k : __real_read(fd, buf, (size_t)k);
}

/* Reads of the state file name fail from byte at on with err. */
static void fault_on(const char *name, long at, int err, int times, size_t chunk)
{
    char *p = realpath(path_of(name), NULL);
    CHECK(p != NULL);
    snprintf(fault.path, sizeof fault.path, "%s", p ? p : "");
    free(p);
    fault.at = at;
    fault.err = err;
    fault.times = times;
    fault.chunk = chunk;
    fault.changed = 0;
    fault.largest = 0;
}

static void fault_off(void)
{
    fault.path[0] = '\0';
}

/* ---- the state -------------------------------------------------------------- */

#define J1 "journal.0000000000000001"
#define J2 "journal.0000000000000002"
#define SNAP "snapshot.0000000000000002"

static struct sess_store *open_dir(void)
{
    return open_dir_ttl(3600);
}

/* A fresh directory whose journal.1 holds session a (record 0) and 5
 * appends of 2 rows (records 1 to 5). */
static void journal_of_five(char *a)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st && new_session(st, a) == CORE_OK);
    for (unsigned i = 0; i < 5; i++)
        CHECK(st && store_add_rows(st, a, 2, 8, i) == CORE_OK);
    if (st)
        sess_store_free(st);
}

/*
 * A fresh directory whose snapshot.2 holds sessions s[0..4] of 10 + i rows
 * (in its records 0 to 4, in the order rec[] gives by record), and whose
 * journal.2 then appends 1 row to the sessions of records 0 and 4.
 */
static char s[5][SESS_ID_MAX];
static int rec[5];                  /* rec[k]: the session of record k */

static void snapshot_of_five(void)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    for (int i = 0; i < 5; i++) {
        CHECK(st && new_session(st, s[i]) == CORE_OK);
        CHECK(st && store_add_rows(st, s[i], 10 + (size_t)i, 8, (unsigned)i) == CORE_OK);
    }
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    CHECK(exists(SNAP));
    for (int k = 0; k < 5; k++) {   /* the id after the frame, the record's */
        long bytes, off = session_record_in(SNAP, k, &bytes);  /* type and wall, the */
        char id[SESS_ID_MAX] = "";                      /* persist header */
        uint32_t len = 0;
        int fd = open(path_of(SNAP), O_RDONLY);
        CHECK(pread(fd, &len, 4, off + 4 + 8 + 12 + 16) == 4 && len < SESS_ID_MAX);
        CHECK(pread(fd, id, len, off + 4 + 8 + 12 + 20) == (ssize_t)len);
        close(fd);
        rec[k] = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(id, s[i]) == 0)
                rec[k] = i;
        CHECK(rec[k] >= 0);
    }
    CHECK(st && store_add_rows(st, s[rec[0]], 1, 8, 50) == CORE_OK);
    CHECK(st && store_add_rows(st, s[rec[4]], 1, 8, 51) == CORE_OK);
    if (st)
        sess_store_free(st);
}

/* The length each session of snapshot_of_five has after its journal. */
static long length_of(int i)
{
    return 10 + i + (i == rec[0] || i == rec[4]);
}

/* ---- I/O errors: damage ------------------------------------------------------ */

/*
 * EIO in the middle of journal.1's fourth append (record 4): the replay
 * stops there as at a bad record, a keeps the rows of the three before,
 * and the start goes on. The disk cannot read the copy either, so none is
 * kept (said), and journal.1 is cut back to the records before the error,
 * as for any damage: the next start, with nothing failing, restores the
 * same rows, and the journals written meanwhile follow (journal.2 here;
 * the first start's snapshot fails, so that journal.1 stays to be looked
 * at).
 * Before, the mapping gave SIGBUS at the bad page (here nothing failed:
 * all 10 rows came back, and the checks below say so).
 */
TEST(an_io_error_mid_journal_keeps_the_records_before_it)
{
    char a[SESS_ID_MAX];
    journal_of_five(a);
    fail_snapshots(true);
    long bytes, off = record_in(J1, 4, &bytes);
    fault_on(J1, off + bytes / 2, EIO, -1, 0);
    struct sess_store *st = open_dir();
    fault_off();
    CHECK(st && store_length_of(st, a) == 6);
    char line[300];
    snprintf(line, sizeof line, "%s: a read failed (%s at byte %ld) in the record at byte "
             "%ld: 4 records kept, 2 dropped", path_of(J1), strerror(EIO), off + bytes / 2,
             off);
    CHECK(said(line));
    snprintf(line, sizeof line, "no copy could be kept as %s.copy (%s)", path_of(J1),
             strerror(EIO));
    CHECK(said(line));
    CHECK(said("the damaged tail was dropped without a copy"));
    CHECK(!exists(J1 ".copy"));
    struct stat sb;
    CHECK(stat(path_of(J1), &sb) == 0 && sb.st_size == off);
    CHECK(st && store_add_rows(st, a, 1, 8, 60) == CORE_OK);     /* journal.2 */
    if (st)
        sess_store_free(st);
    fail_snapshots(false);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 7);
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/*
 * EIO in the middle of snapshot.2's third record: the sessions of the two
 * before it are restored, with their journal's changes; the three from
 * there on are lost (the reader cannot find the records after bytes it
 * cannot read), the log says from which byte and why, and journal.2's
 * record of the lost session of record 4 is counted as not restored. The
 * snapshot is kept as a copy (a hard link: nothing is read).
 */
TEST(an_io_error_mid_snapshot_keeps_the_sessions_before_it)
{
    snapshot_of_five();
    struct stat sb;
    CHECK(stat(path_of(SNAP), &sb) == 0);
    uint32_t whole = file_crc(path_of(SNAP));
    long bytes, off = session_record_in(SNAP, 2, &bytes);
    fault_on(SNAP, off + bytes / 2, EIO, -1, 0);
    struct sess_store *st = open_dir();
    fault_off();
    CHECK(st != NULL);
    for (int k = 0; k < 5 && st; k++) {
        size_t want = k < 2 ? (size_t)length_of(rec[k]) : (size_t)-1;
        CHECK(store_length_of(st, s[rec[k]]) == want);
    }
    char line[400];
    snprintf(line, sizeof line, "%s: 2 records kept, 0 dropped, and the %ld bytes from byte "
             "%ld on, where a read failed (%s at byte %ld)", path_of(SNAP),
             (long)sb.st_size - off, off, strerror(EIO), off + bytes / 2);
    CHECK(said(line));
    CHECK(said("1 for 1 sessions not restored"));
    CHECK(said("snapshot.0000000000000002: a copy is kept as"));
    CHECK(exists(SNAP ".copy") && file_crc(path_of(SNAP ".copy")) == whole);
    if (st)
        sess_store_free(st);
}

/*
 * The length of the snapshot's last record damaged to claim most of a
 * large file (64 MiB of hole after the records, which the length stops
 * 100 bytes short of, so the framing does not hold after it either): the
 * record's checksum is taken in pieces before the reader's buffer would
 * grow to that length, so no read (and no buffer) of its size is made,
 * and the sessions of the records before it come back. Before, the
 * buffer was grown to the claimed size and filled: memory a damaged bit
 * could ask for up to the file's size (a read of 64 MiB here).
 */
TEST(a_damaged_length_is_not_trusted_with_a_buffer_of_its_size)
{
    snapshot_of_five();
    long bytes, off = session_record_in(SNAP, 4, &bytes);
    long size = off + bytes + (64L << 20);
    uint32_t claim = (uint32_t)(size - off - 4 - 4 - 100);
    int fd = open(path_of(SNAP), O_WRONLY);
    CHECK(fd >= 0 && ftruncate(fd, size) == 0);
    CHECK(fd >= 0 && pwrite(fd, &claim, 4, off) == 4);
    if (fd >= 0)
        close(fd);
    fault_on(SNAP, LONG_MAX, 0, 0, 0);          /* only watched */
    struct sess_store *st = open_dir();
    size_t largest = fault.largest;
    fault_off();
    CHECK(st != NULL);
    CHECK(largest > 0 && largest <= (size_t)1 << 20);
    for (int k = 0; k < 5 && st; k++) {
        size_t want = k < 4 ? (size_t)length_of(rec[k]) : (size_t)-1;
        CHECK(store_length_of(st, s[rec[k]]) == want);
    }
    CHECK(said("checksum mismatch"));
    if (st)
        sess_store_free(st);
}

/* ---- errors that say nothing of the file -------------------------------------- */

/*
 * A read of name that fails from byte at of it on with err (ENOMEM; -1:
 * the file ends there) fails the start: the warn line names the file, the
 * byte and the error, and every file of the directory is as it was, to
 * the byte. With the fault gone, the next start restores everything.
 */
static void fails_unchanged(const char *name, long at, int err, void (*check)(struct sess_store *))
{
    static char before[8192], after[8192];
    listing(before, sizeof before);
    fault_on(name, at, err, -1, 0);
    struct sess_store *st = open_dir();
    fault_off();
    CHECK(st == NULL);
    if (st)
        sess_store_free(st);
    char line[400];
    snprintf(line, sizeof line, "%s cannot be read at byte %ld (%s): not starting; nothing in "
             "the state directory was changed", path_of(name), at,
             err > 0 ? strerror(err) : "the file got shorter while it was read");
    CHECK(said(line));
    listing(after, sizeof after);
    CHECK(strcmp(before, after) == 0);
    if (strcmp(before, after) != 0)
        printf("    before:\n%s    after:\n%s", before, after);
    st = open_dir();
    CHECK(st != NULL);
    if (st) {
        check(st);
        sess_store_free(st);
    }
}

static char a_id[SESS_ID_MAX];

static void a_whole(struct sess_store *st)
{
    CHECK(store_length_of(st, a_id) == 10);
    CHECK(strstr(logged, "warn") == NULL);
}

static void five_whole(struct sess_store *st)
{
    for (int i = 0; i < 5; i++)
        CHECK(store_length_of(st, s[i]) == (size_t)length_of(i));
}

/* Memory short (ENOMEM) or a file that shrank, in the middle of a journal
 * and of a snapshot: the start fails with nothing changed. Before, nothing
 * failed (the start went on) or the mapping gave SIGBUS. */
TEST(a_read_that_fails_for_want_of_memory_fails_the_start_and_changes_nothing)
{
    static const int errs[] = {ENOMEM, -1};
    for (size_t e = 0; e < sizeof errs / sizeof errs[0]; e++) {
        long bytes, off;
        journal_of_five(a_id);
        off = record_in(J1, 3, &bytes);
        fails_unchanged(J1, off + bytes / 2, errs[e], a_whole);
        snapshot_of_five();
        off = session_record_in(SNAP, 3, &bytes);
        fails_unchanged(SNAP, off + bytes / 2, errs[e], five_whole);
    }
}

/*
 * Memory short reading journal.2 after a damaged snapshot record: the
 * start fails before the snapshot's copy is kept, and before journal.1,
 * read whole before it, or anything else is touched.
 */
TEST(a_read_failing_for_want_of_memory_after_damage_changes_nothing)
{
    snapshot_of_five();
    long bytes, off = session_record_in(SNAP, 1, &bytes);
    flip(SNAP, off + bytes - 20);
    CHECK(exists(J2));
    off = record_in(J2, 1, &bytes);
    static char before[8192], after[8192];
    listing(before, sizeof before);
    fault_on(J2, off + 8, ENOMEM, -1, 0);
    struct sess_store *st = open_dir();
    fault_off();
    CHECK(st == NULL);
    if (st)
        sess_store_free(st);
    CHECK(said("cannot be read at byte"));
    listing(after, sizeof after);
    CHECK(strcmp(before, after) == 0);
    CHECK(!exists(SNAP ".copy"));
}

/* ---- reads interrupted or short ----------------------------------------------- */

/*
 * A read interrupted once (EINTR) in the middle of each file, or every read
 * of it returning at most 7 bytes (then 1: a short read, then the rest),
 * is taken up again: every session comes back whole, without a warning.
 * The wrappers must have changed reads: before, the mapping read nothing.
 */
TEST(interrupted_and_short_reads_are_taken_up_again)
{
    static const size_t chunks[] = {0, 7, 1};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        int times = chunks[c] ? 0 : 1;
        long bytes, off;
        journal_of_five(a_id);
        off = record_in(J1, 3, &bytes);
        fault_on(J1, off + bytes / 2, EINTR, times, chunks[c]);
        struct sess_store *st = open_dir();
        unsigned long changed = fault.changed;
        fault_off();
        CHECK(changed > 0 && (chunks[c] || fault.times == 0));
        CHECK(st && store_length_of(st, a_id) == 10);
        CHECK(strstr(logged, "warn") == NULL);
        if (st)
            sess_store_free(st);

        snapshot_of_five();
        off = session_record_in(SNAP, 3, &bytes);
        fault_on(SNAP, off + bytes / 2, EINTR, times, chunks[c]);
        st = open_dir();
        changed = fault.changed;
        fault_off();
        CHECK(changed > 0 && (chunks[c] || fault.times == 0));
        CHECK(st != NULL);
        if (st) {
            five_whole(st);
            sess_store_free(st);
        }
        CHECK(strstr(logged, "warn") == NULL);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-reads-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(an_io_error_mid_journal_keeps_the_records_before_it);
    RUN(an_io_error_mid_snapshot_keeps_the_sessions_before_it);
    RUN(a_damaged_length_is_not_trusted_with_a_buffer_of_its_size);
    RUN(a_read_that_fails_for_want_of_memory_fails_the_start_and_changes_nothing);
    RUN(a_read_failing_for_want_of_memory_after_damage_changes_nothing);
    RUN(interrupted_and_short_reads_are_taken_up_again);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
