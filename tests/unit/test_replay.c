/*
 * tests/unit/test_replay.c — start-up from a state directory whose files
 * are damaged or missing (core/replay.c): a snapshot record that fails its
 * checksum loses only its session, and the journal after it is still
 * replayed onto the others, with its records of the lost one counted; a
 * snapshot whose framing is lost keeps what came before; a missing
 * snapshot is said, and its sessions' records are counted as not restored
 * while records of sessions deleted later stay quiet; a journal's bad
 * record of any kind, a last one cut short too, stops the journals after
 * it (prefix rule), and the journal is cut back to its good records, with
 * or without a copy of the rest (or the start is refused), so the next
 * start reads on, but a copy that cannot be made for want of a file
 * descriptor fails the start and cuts nothing; every file set aside is named in a warn line and an
 * earlier kept file is never replaced; a record at the largest lsns is
 * damage; a snapshot larger than the address space is read a record at a
 * time; memory running short while a session is rebuilt fails the start
 * and changes nothing; a file whose header
 * names another generation than its name is not replayed; a journal
 * missing after only a copy of it was kept is a gap, one set aside (or
 * kept as .damaged by an older attnd) is passed over, and a start says how
 * many kept files there are.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/state_dir.h"
#include "tests/store_util.h"

static struct sess_store *open_dir(void)
{
    return open_dir_ttl(3600);
}

/*
 * The state every case damages: six sessions s[0..5] of 40 rows and f, a
 * fork of s[0], in snapshot.2 (in this order, each on its own); then in
 * journal.2 only: 1 row appended to s[1], s[2] truncated to 10, s[3]
 * deleted, 2 rows appended to s[4] and s[4] deleted, n created with 2
 * rows, 3 rows appended to f. want[] holds the lengths (s[0..5], f, n;
 * -1: gone).
 */
static char s[6][SESS_ID_MAX], f[SESS_ID_MAX], n[SESS_ID_MAX];
static const long want[8] = {40, 41, 10, -1, -1, 40, 43, 2};

static void build_state(void)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st != NULL);
    if (!st)
        return;
    for (int i = 0; i < 6; i++) {
        CHECK(new_session(st, s[i]) == CORE_OK);
        CHECK(store_add_rows(st, s[i], 40, 8, (unsigned)i * 7) == CORE_OK);
    }
    CHECK(store_fork_of(st, s[0], f) == CORE_OK);
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);
    CHECK(exists("snapshot.0000000000000002") && !exists("snapshot.0000000000000001"));
    CHECK(store_add_rows(st, s[1], 1, 8, 99) == CORE_OK);
    CHECK(store_truncate_of(st, s[2], 10) == CORE_OK);
    CHECK(sess_delete(st, s[3]) == CORE_OK);
    CHECK(store_add_rows(st, s[4], 2, 8, 98) == CORE_OK);
    CHECK(sess_delete(st, s[4]) == CORE_OK);
    CHECK(new_session(st, n) == CORE_OK);
    CHECK(store_add_rows(st, n, 2, 8, 97) == CORE_OK);
    CHECK(store_add_rows(st, f, 3, 8, 96) == CORE_OK);
    sess_store_free(st);
}

#define SNAP "snapshot.0000000000000002"
#define J1 "journal.0000000000000001"
#define J2 "journal.0000000000000002"

/* The offset of snapshot record i (0 the first) and its bytes. */
static long record_at(int i, long *bytes)
{
    return session_record_in(SNAP, i, bytes);
}

/* The id snapshot record i holds, into id. */
static void record_id(int i, char *id)
{
    long bytes, off = record_at(i, &bytes);
    int fd = open(path_of("snapshot.0000000000000002"), O_RDONLY);
    uint32_t len = 0;
    /* frame: len, lsn; payload: type, wall; session: magic, version, bom, id */
    CHECK(pread(fd, &len, 4, off + 4 + 8 + 12 + 16) == 4);
    CHECK(len > 0 && len < SESS_ID_MAX);
    CHECK(pread(fd, id, len, off + 4 + 8 + 12 + 20) == (ssize_t)len);
    id[len] = '\0';
    close(fd);
}

/* Whether every session has its wanted length, but those in lost (ids)
 * gone. */
static bool as_wanted(struct sess_store *st, const char *const *lost, int n_lost)
{
    const char *ids[8] = {s[0], s[1], s[2], s[3], s[4], s[5], f, n};
    bool ok = true;
    for (int i = 0; i < 8; i++) {
        long w = want[i];
        for (int k = 0; k < n_lost; k++)
            if (strcmp(lost[k], ids[i]) == 0)
                w = -1;
        size_t got = store_length_of(st, ids[i]);
        if ((w < 0 && got != (size_t)-1) || (w >= 0 && got != (size_t)w)) {
            printf("    session %d: length %ld, want %ld\n", i,
                   got == (size_t)-1 ? -1L : (long)got, w);
            ok = false;
        }
    }
    return ok;
}

TEST(an_intact_state_restores_everything_quietly)
{
    build_state();
    struct sess_store *st = open_dir();
    CHECK(st && as_wanted(st, NULL, 0));
    CHECK(said("0 failed, 0 for 0 sessions not restored"));
    CHECK(strstr(logged, "warn") == NULL);
    sess_store_free(st);
}

TEST(a_damaged_snapshot_record_loses_only_its_session)
{
    /* s[1] (a change in the journal), s[5] (none) and f (the last record:
     * its length leads to the end of the file) */
    static const int which[] = {1, 5, 6};
    for (size_t c = 0; c < sizeof which / sizeof which[0]; c++) {
        build_state();
        char id[SESS_ID_MAX], line[160];
        record_id(which[c], id);
        long bytes, off = record_at(which[c], &bytes);
        flip("snapshot.0000000000000002", off + bytes - 20);   /* in its rows */
        struct sess_store *st = open_dir();
        const char *lost[1] = {id};
        CHECK(st && as_wanted(st, lost, 1));
        snprintf(line, sizeof line, "the session \"%s\" dropped", id);
        CHECK(said(line));
        CHECK(said("6 records kept, 1 dropped"));
        CHECK(said("snapshot.0000000000000002: a copy is kept as"));
        CHECK(exists("snapshot.0000000000000002.copy"));
        bool journaled = strcmp(id, s[1]) == 0 || strcmp(id, s[2]) == 0 ||
                         strcmp(id, f) == 0;       /* changed in the journal */
        CHECK(said(journaled ? "1 for 1 sessions not restored"
                             : "0 for 0 sessions not restored"));
        CHECK(exists("journal.0000000000000002.copy") == journaled);
        if (journaled)
            CHECK(said("journal.0000000000000002: a copy is kept as"));
        sess_store_free(st);
        /* the next start reads the new generation: the same sessions */
        st = open_dir();
        CHECK(st && as_wanted(st, lost, 1));
        CHECK(strstr(logged, "warn") == NULL);
        sess_store_free(st);
    }
}

TEST(a_snapshot_whose_framing_is_lost_keeps_what_came_before)
{
    build_state();
    char ids[7][SESS_ID_MAX];
    for (int i = 0; i < 7; i++)
        record_id(i, ids[i]);
    long bytes, off = record_at(3, &bytes);
    flip("snapshot.0000000000000002", off + 2);        /* record 3's length */
    struct sess_store *st = open_dir();
    const char *lost[4] = {ids[3], ids[4], ids[5], ids[6]};
    CHECK(st && as_wanted(st, lost, 4));
    CHECK(said("3 records kept, 0 dropped, and the"));
    CHECK(said("where the framing is lost (record cut short)"));
    CHECK(said("snapshot.0000000000000002: a copy is kept as"));
    /* s[3] and s[4] were deleted in the journal: not counted as lost */
    uint64_t records = 0, sessions = 0;
    for (int i = 3; i < 7; i++) {
        bool changed = strcmp(ids[i], s[1]) == 0 || strcmp(ids[i], s[2]) == 0 ||
                       strcmp(ids[i], f) == 0;
        records += changed;
        sessions += changed;
    }
    char line[120];
    snprintf(line, sizeof line, "%llu for %llu sessions not restored",
             (unsigned long long)records, (unsigned long long)sessions);
    CHECK(said(line));
    sess_store_free(st);
}

TEST(a_missing_snapshot_is_said_and_its_sessions_counted)
{
    build_state();
    CHECK(unlink(path_of("snapshot.0000000000000002")) == 0);
    struct sess_store *st = open_dir();
    const char *lost[6] = {s[0], s[1], s[2], s[5], f};
    CHECK(st && as_wanted(st, lost, 5));
    CHECK(said("warn journal: snapshot.0000000000000002 is missing"));
    /* s[1]'s append, s[2]'s truncate and f's append; s[3] and s[4] were
     * deleted, so their records are already held */
    CHECK(said("0 failed, 3 for 3 sessions not restored"));
    CHECK(said("warn journal: replayed"));
    CHECK(said("journal.0000000000000002: a copy is kept as"));
    sess_store_free(st);
}

/* A fresh directory whose journal.1 holds session a (made here) and 4
 * appends of 2 rows; snapshot.1 is empty. */
static void journal_of_four(char *a)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st && new_session(st, a) == CORE_OK);
    for (unsigned i = 0; i < 4; i++)
        CHECK(store_add_rows(st, a, 2, 8, i) == CORE_OK);
    sess_store_free(st);
}

TEST(a_torn_journal_tail_is_cut_back_and_the_next_journal_follows_it)
{
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    journal_of_four(a);
    /* the last append cut short, as a crash leaves it */
    struct stat sb;
    CHECK(stat(path_of("journal.0000000000000001"), &sb) == 0);
    CHECK(truncate(path_of("journal.0000000000000001"), sb.st_size - 5) == 0);
    fail_snapshots(true);
    struct sess_store *st = open_dir();
    CHECK(st && store_length_of(st, a) == 6);
    CHECK(said("snapshot failed"));
    CHECK(said("record cut short"));
    CHECK(strstr(logged, "write never finished") == NULL);
    CHECK(said("journal.0000000000000001: a copy is kept as"));
    CHECK(exists("journal.0000000000000001") && exists("journal.0000000000000002"));
    CHECK(store_add_rows(st, a, 5, 8, 50) == CORE_OK);
    CHECK(new_session(st, b) == CORE_OK);
    sess_store_free(st);
    fail_snapshots(false);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 11);
    CHECK(st && store_length_of(st, b) == 0);
    CHECK(strstr(logged, "warn") == NULL);       /* journal.1 was cut back */
    sess_store_free(st);
}

TEST(a_damaged_journal_stops_the_replay_and_names_what_it_sets_aside)
{
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    journal_of_four(a);
    fail_snapshots(true);
    struct sess_store *st = open_dir();         /* one more row, in journal.2 */
    CHECK(st && store_add_rows(st, a, 1, 8, 40) == CORE_OK);
    sess_store_free(st);
    /* a byte of journal.1's second append flipped */
    long off = JNL_HEADER_BYTES;
    int fd = open(path_of("journal.0000000000000001"), O_RDONLY);
    uint32_t len = 0;
    for (int k = 0; k < 2 && pread(fd, &len, 4, off) == 4; k++)
        off += 4 + (long)len + 4;
    CHECK(pread(fd, &len, 4, off) == 4);
    close(fd);
    flip("journal.0000000000000001", off + (long)len);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 2);
    CHECK(said("3 dropped"));
    CHECK(said("journal.0000000000000001: a copy is kept as"));
    CHECK(said("journal.0000000000000002 set aside as"));
    CHECK(said("it follows the damaged journal.0000000000000001"));
    CHECK(exists("journal.0000000000000002.setaside") && !exists("journal.0000000000000002"));
    CHECK(store_add_rows(st, a, 5, 8, 50) == CORE_OK);    /* into journal.3 */
    CHECK(new_session(st, b) == CORE_OK);
    sess_store_free(st);
    fail_snapshots(false);
    /* journal.1, cut back to what was applied, then journal.3, written on
     * top of it: both replayed whole */
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 7 && store_length_of(st, b) == 0);
    CHECK(strstr(logged, "warn") == NULL);
    sess_store_free(st);
}

/* Write p[size] at byte at of the file name. */
static void put(const char *name, long at, const void *p, size_t size)
{
    int fd = open(path_of(name), O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, p, size, at) == (ssize_t)size);
    if (fd >= 0)
        close(fd);
}

/*
 * A bad length in the middle of journal.1 (its top byte set, or the word
 * zeroed, as a zeroed block leaves it) reads as a record cut short, just
 * as a crash leaves the last one: journal.2, written on top of the records
 * after it, is set aside. a: 4 rows, truncated to 1, 2 more (journal.1),
 * then 5 more (journal.2); the damaged truncate leaves 4, never 9.
 */
static void bad_length_mid_journal(bool zeroed)
{
    char a[SESS_ID_MAX];
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st && new_session(st, a) == CORE_OK);
    for (unsigned i = 0; i < 4; i++)
        CHECK(store_add_rows(st, a, 1, 8, i) == CORE_OK);
    CHECK(store_truncate_of(st, a, 1) == CORE_OK);
    CHECK(store_add_rows(st, a, 2, 8, 77) == CORE_OK);
    sess_store_free(st);
    fail_snapshots(true);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 3);
    CHECK(store_add_rows(st, a, 5, 8, 50) == CORE_OK);   /* into journal.2 */
    sess_store_free(st);
    long bytes, off = record_in(J1, 5, &bytes);            /* the truncate */
    uint32_t len;
    memcpy(&len, zeroed ? "\0\0\0\0" : "\0\0\0\x7f", 4);
    if (zeroed)
        put(J1, off, &len, 4);
    else
        put(J1, off + 3, (const char *)&len + 3, 1);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 4);
    CHECK(said("journal.0000000000000001: record cut short at byte"));
    CHECK(said("journal.0000000000000002 set aside as"));
    if (st)
        sess_store_free(st);
    fail_snapshots(false);
}

TEST(a_length_flipped_mid_journal_sets_the_next_journal_aside)
{
    bad_length_mid_journal(false);
}

TEST(a_length_zeroed_mid_journal_sets_the_next_journal_aside)
{
    bad_length_mid_journal(true);
}

/* journal_of_four, then journal.2 after it with one more row (its
 * snapshot failed, as the next start's does: fail_snapshots is on). */
static void two_journals(char *a)
{
    journal_of_four(a);
    fail_snapshots(true);
    struct sess_store *st = open_dir();         /* one more row, in journal.2 */
    CHECK(st && store_add_rows(st, a, 1, 8, 40) == CORE_OK);
    if (st)
        sess_store_free(st);
}

/*
 * journal.1 damaged in its second append, journal.2 after it: the start
 * that finds it keeps a=2 and sets journal.2 aside.
 */
static void damage_j1(char *a)
{
    two_journals(a);
    long bytes, off = record_in(J1, 2, &bytes);  /* the 2nd append's rows */
    flip(J1, off + bytes - 10);
}

/*
 * The copy of a damaged journal fails (here the file size limit; on a
 * full disk, ENOSPC): the journal is cut back all the same, so what the
 * run acknowledges next (journal.3) follows a clean journal.1 and is
 * replayed by the next start.
 */
TEST(a_journal_is_cut_back_when_no_copy_can_be_kept)
{
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    damage_j1(a);
    struct rlimit was, small = {.rlim_cur = 200, .rlim_max = RLIM_INFINITY};
    CHECK(getrlimit(RLIMIT_FSIZE, &was) == 0);
    small.rlim_max = was.rlim_max;
    signal(SIGXFSZ, SIG_IGN);                   /* EFBIG instead */
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    struct sess_store *st = open_dir();
    CHECK(setrlimit(RLIMIT_FSIZE, &was) == 0);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(st && store_length_of(st, a) == 2);
    CHECK(said("journal.0000000000000001: no copy could be kept"));
    CHECK(said("the damaged tail was dropped without a copy"));
    CHECK(!exists("journal.0000000000000001.copy"));
    CHECK(st && store_add_rows(st, a, 5, 8, 50) == CORE_OK);   /* journal.3 */
    CHECK(st && new_session(st, b) == CORE_OK);
    if (st)
        sess_store_free(st);
    fail_snapshots(false);
    st = open_dir();
    CHECK(st && store_length_of(st, a) == 7 && store_length_of(st, b) == 0);
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/* Set or clear the immutable flag of the file name; false when the file
 * system or the user cannot. */
static bool immutable(const char *name, bool on)
{
    int fd = open(path_of(name), O_RDONLY), flags = 0;
    bool ok = fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
    ok = ok && ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A damaged journal that cannot be cut back: the start is refused, the
 * changes it would acknowledge would be set aside by the next one. */
TEST(a_journal_that_cannot_be_cut_back_refuses_the_start)
{
    char a[SESS_ID_MAX];
    damage_j1(a);
    if (!immutable(J1, true)) {
        printf("    skipped: no immutable flag here (needs root and ext4, xfs or the like)\n");
        fail_snapshots(false);
        return;
    }
    struct sess_store *st = open_dir();
    CHECK(st == NULL);
    CHECK(said("could not be cut back to the"));
    CHECK(said("not starting"));
    if (st)
        sess_store_free(st);
    CHECK(immutable(J1, false));
    fail_snapshots(false);
}

/*
 * A damaged snapshot length that reaches over the next record to a later
 * one that passes its checksum drops both sessions: the log says how many
 * bytes were skipped and names the second session too, and the count is
 * not "1 dropped".
 */
TEST(a_length_over_a_later_record_names_every_session_it_drops)
{
    build_state();
    char id4[SESS_ID_MAX], id5[SESS_ID_MAX];
    record_id(4, id4);
    record_id(5, id5);
    long b4, b5, o4 = record_at(4, &b4);
    record_at(5, &b5);
    uint32_t len = (uint32_t)(b4 - 8 + b5);
    put(SNAP, o4, &len, 4);
    struct sess_store *st = open_dir();
    char line[200];
    snprintf(line, sizeof line, "checksum mismatch (%ld bytes skipped) at byte %ld: the "
             "session \"%s\" dropped", b4 + b5, o4, id4);
    CHECK(said(line));
    snprintf(line, sizeof line, "the session \"%s\" is dropped with it", id5);
    CHECK(said(line));
    snprintf(line, sizeof line, "2 dropped (%ld bytes)", b4 + b5);
    CHECK(said(line));
    CHECK(st && store_length_of(st, id5) == (size_t)-1);
    if (st)
        sess_store_free(st);
}

/*
 * A record at lsn 2^64-1 (here a CRC-valid record of the wrong kind at the
 * end of the snapshot) is damage: it does not carry the next lsn round to
 * 0, under which the next start would take this run's changes as held.
 */
TEST(a_record_at_the_largest_lsn_is_damage)
{
    build_state();
    unsigned char rec[4 + 8 + 12 + 4];
    uint32_t len = 8 + 12, type = 2;            /* an APPEND */
    uint64_t lsn = UINT64_MAX;
    double wall = 0;
    memcpy(rec, &len, 4);
    memcpy(rec + 4, &lsn, 8);
    memcpy(rec + 12, &type, 4);
    memcpy(rec + 16, &wall, 8);
    uint32_t crc = jnl_crc32c(0, rec + 4, len);
    memcpy(rec + 24, &crc, 4);
    struct stat sb;
    CHECK(stat(path_of(SNAP), &sb) == 0);
    put(SNAP, (long)sb.st_size, rec, sizeof rec);
    struct sess_store *st = open_dir();
    CHECK(st && store_add_rows(st, s[5], 1, 8, 5) == CORE_OK);
    CHECK(st && store_add_rows(st, n, 3, 8, 6) == CORE_OK);
    if (st)
        sess_store_free(st);
    st = open_dir();
    CHECK(st && store_length_of(st, s[5]) == 41 && store_length_of(st, n) == 5);
    if (st)
        sess_store_free(st);
}

/*
 * A copy kept as NAME.copy is never replaced: journal.2's copy with
 * its damaged tail stays when a later start keeps journal.2 (cut back)
 * again, as NAME.copy.1.
 */
TEST(an_earlier_damaged_copy_is_never_replaced)
{
    build_state();
    for (int gen = 3; gen <= 4; gen++) {        /* the starts' snapshots fail */
        char name[64];
        snprintf(name, sizeof name, ".snapshot.%016x.tmp", gen);
        CHECK(mkdir(path_of(name), 0700) == 0);
    }
    struct stat sb;
    CHECK(stat(path_of(J2), &sb) == 0);
    long whole = (long)sb.st_size;
    flip(J2, whole - 20);                       /* f's append, in its rows */
    struct sess_store *st = open_dir();
    CHECK(said("journal.0000000000000002: a copy is kept as"));
    if (st)
        sess_store_free(st);
    int k = 0;                                  /* s[1], changed in journal.2 */
    for (char id[SESS_ID_MAX]; k < 7 && (record_id(k, id), strcmp(id, s[1]) != 0);)
        k++;
    CHECK(k < 7);
    long b1, o1 = record_at(k, &b1);
    flip(SNAP, o1 + b1 - 20);
    st = open_dir();
    CHECK(said("journal.0000000000000002: a copy is kept as"));
    CHECK(stat(path_of("journal.0000000000000002.copy"), &sb) == 0 &&
          sb.st_size == whole);
    CHECK(exists("journal.0000000000000002.copy.1"));
    if (st)
        sess_store_free(st);
    for (int gen = 3; gen <= 4; gen++) {
        char name[64];
        snprintf(name, sizeof name, ".snapshot.%016x.tmp", gen);
        CHECK(rmdir(path_of(name)) == 0);
    }
}

/*
 * A snapshot far larger than the address space the start may take (here
 * by a hole of 4 GiB at its end, against a limit of 1 GiB more than now,
 * as in a container with a memory limit) is read a record at a time, not
 * mapped whole: every session is restored, the hole is bytes after the
 * snapshot's end record (not read), and the snapshot is kept as a copy (a hard link: the
 * hole is not written out). Before, the mapping failed with ENOMEM and
 * the start with it. Only a snapshot: a damaged journal's copy is written
 * byte by byte, the hole too.
 */
TEST(a_snapshot_larger_than_the_address_space_is_read_a_record_at_a_time)
{
    build_state();
    struct stat sb;
    CHECK(stat(path_of(SNAP), &sb) == 0);
    CHECK(truncate(path_of(SNAP), sb.st_size + (4LL << 30)) == 0);
    struct sess_store *st = open_under(open_dir, RLIMIT_AS, address_space() + (1ULL << 30));
    CHECK(st && as_wanted(st, NULL, 0));
    char line[200];
    snprintf(line, sizeof line, "7 records kept, 0 dropped; it is not whole: %lld bytes "
             "after its end record at byte %lld, not read", 4LL << 30,
             (long long)sb.st_size - SNAP_END_BYTES);
    CHECK(said(line));
    CHECK(said("snapshot.0000000000000002: a copy is kept as"));
    if (st)
        sess_store_free(st);
}

/* The big session (tests/store_util.h), against BIG_SPARE bytes of
 * address space to spare besides the files read. */
#define BIG_SPARE (8ULL << 20)
static char big[SESS_ID_MAX];

/* The big session, its rows appended in one record, into the journal
 * (made in a child: in_child says why). */
static void make_big(int to_parent)
{
    struct sess_store *st = open_dir();
    char id[SESS_ID_MAX] = "";
    CHECK(st && store_new_big(st, id) == CORE_OK);
    CHECK(write(to_parent, id, strlen(id)) == (ssize_t)strlen(id));
    if (st)
        sess_store_free(st);
}

/* The file the big session is in now: read under the limit. */
static const char *big_in;

/* A start with address space for the files it reads and BIG_SPARE more:
 * it fails, naming the big session, and says nothing was changed. */
static void open_short_of_memory(int to_parent)
{
    (void)to_parent;
    struct stat sb;
    CHECK(stat(path_of(big_in), &sb) == 0);
    struct sess_store *st = open_under(open_dir, RLIMIT_AS, address_space() +
                                       (unsigned long long)sb.st_size + BIG_SPARE);
    CHECK(st == NULL);
    if (st)
        sess_store_free(st);
    char line[400];
    snprintf(line, sizeof line, "journal: %s: out of memory rebuilding the session \"%s\" "
             "from its record at byte", path_of(big_in), big);
    CHECK(said(line));
    CHECK(said(": not starting; nothing in the state directory was changed"));
}

/* A start without the limit restores every session, the big one whole. */
static void open_whole(int to_parent)
{
    (void)to_parent;
    struct sess_store *st = open_dir();
    CHECK(st && as_wanted(st, NULL, 0));
    CHECK(st && store_length_of(st, big) == STORE_BIG_ROWS);
    CHECK(strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
}

/*
 * Memory running short while a session is rebuilt (its rows, from a
 * snapshot's record or a journal's append) says nothing of the record: the
 * start fails naming the session, and no file is renamed, copied, cut back,
 * written or removed; a start with memory to spare restores everything.
 * Before, the session was dropped as if its record were damaged (from a
 * snapshot) or kept without its rows (from a journal), and the snapshot
 * the start wrote lost it for good.
 */
TEST(memory_short_rebuilding_a_session_fails_the_start_and_changes_nothing)
{
    static char before[4096], after[4096];
    if (!as_limit_holds())
        return;
    build_state();
    in_child(make_big, big);        /* snapshot.3; journal.3: big, its rows */
    CHECK(big[0] != '\0');
    static const char *const where[] = {"journal.0000000000000003",
                                        "snapshot.0000000000000004"};
    for (int c = 0; c < 2; c++) {
        big_in = where[c];
        listing(before, sizeof before);
        in_child(open_short_of_memory, NULL);
        listing(after, sizeof after);
        CHECK(strcmp(before, after) == 0);
        if (strcmp(before, after) != 0)
            printf("    before:\n%s    after:\n%s", before, after);
        in_child(open_whole, NULL); /* writes snapshot.4, big in it */
    }
}

/*
 * The copy of a damaged journal cannot be made for want of a file
 * descriptor (EMFILE; ENFILE and memory short alike): that says nothing of
 * the room for it, so the start fails and the journal is neither copied nor
 * cut back (on a full disk it is cut back without a copy, above). The
 * limit is set at each number of descriptors past those open now: whatever
 * else the start needs them for, the journal is never cut back without a
 * copy, and at one of them the copy is what stops the start. Before, the
 * journal was cut back there, its damaged tail dropped without a copy.
 */
TEST(a_copy_that_cannot_be_made_now_fails_the_start_and_cuts_nothing)
{
    static char before[4096], after[4096];
    /* valgrind opens the file and then refuses the descriptor over the
     * limit: the copy's name is left created, where the kernel creates
     * nothing (it takes the descriptor first) */
    const char *vg = getenv("ATTND_VALGRIND");
    if (vg && strcmp(vg, "1") == 0) {
        printf("    skipped under valgrind: its file descriptors are emulated\n");
        return;
    }
    bool met = false;
    for (int extra = 0; extra < 8; extra++) {
        char a[SESS_ID_MAX];
        damage_j1(a);
        struct stat whole, sb;
        CHECK(stat(path_of(J1), &whole) == 0);
        listing(before, sizeof before);
        struct sess_store *st = open_under(open_dir, RLIMIT_NOFILE,
                                           (unsigned long long)(next_fd() + extra));
        bool cut = stat(path_of(J1), &sb) == 0 && sb.st_size < whole.st_size;
        CHECK(!cut || exists(J1 ".copy"));
        if (cut && !exists(J1 ".copy"))
            printf("    cut back without a copy at %d descriptors more\n", extra);
        char line[200];
        snprintf(line, sizeof line, "no copy of it could be kept before it is cut back (%s): "
                 "not starting; nothing in the state directory was changed",
                 strerror(EMFILE));
        if (strstr(logged, line)) {
            met = true;
            CHECK(st == NULL);
            listing(after, sizeof after);
            CHECK(strcmp(before, after) == 0);
        }
        if (st)
            sess_store_free(st);
        fail_snapshots(false);
    }
    CHECK(met);
}

/* Copy the file from over the file to (both names in dir). */
static void copy_over(const char *from, const char *to)
{
    static char buf[1 << 16];
    char src[200];
    snprintf(src, sizeof src, "%s", path_of(from));
    int in = open(src, O_RDONLY), out = open(path_of(to), O_WRONLY | O_TRUNC);
    ssize_t got;
    CHECK(in >= 0 && out >= 0);
    while (in >= 0 && out >= 0 && (got = read(in, buf, sizeof buf)) > 0)
        CHECK(write(out, buf, (size_t)got) == got);
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
}

/*
 * A file whose header says another generation than its name (copied or
 * renamed from another file) is not replayed: journal.2 made a copy of
 * journal.1, whose records are all held already, would hide that
 * journal.2's own changes are gone; a snapshot renamed to a later
 * generation would be read as that generation's. Each is handled as a
 * bad header, with both generations in its warn line.
 */
TEST(a_file_whose_header_names_another_generation_is_not_replayed)
{
    char a[SESS_ID_MAX];
    two_journals(a);
    copy_over(J1, J2);
    struct sess_store *st = open_dir();
    CHECK(st && store_length_of(st, a) == 8);
    CHECK(said("journal.0000000000000002 unreadable (its header says generation 1, its "
               "name 2"));
    CHECK(said("journal.0000000000000002 set aside as"));
    CHECK(!exists(J2));
    if (st)
        sess_store_free(st);
    fail_snapshots(false);

    build_state();
    char from[200];
    snprintf(from, sizeof from, "%s", path_of(SNAP));
    CHECK(rename(from, path_of("snapshot.0000000000000003")) == 0);
    st = open_dir();
    CHECK(st && store_length_of(st, s[0]) == (size_t)-1);
    CHECK(said("snapshot.0000000000000003 unreadable (its header says generation 2, its "
               "name 3"));
    if (st)
        sess_store_free(st);
}

/*
 * A journal that was applied and kept in place, with a copy of its damaged
 * tail, then went missing: the journals after it build on its records, so
 * its absence is a gap and they are set aside, not replayed (before, the
 * copy, named as files set aside were, made it pass for one). A journal
 * an older attnd set aside as NAME.damaged is still passed over. The
 * start logs how many kept files the directory holds.
 */
TEST(a_journal_missing_after_a_copy_of_it_was_kept_is_a_gap)
{
    char a[SESS_ID_MAX];
    journal_of_four(a);
    struct stat sb;                             /* the last append torn */
    CHECK(stat(path_of(J1), &sb) == 0 && truncate(path_of(J1), sb.st_size - 5) == 0);
    fail_snapshots(true);
    struct sess_store *st = open_dir();         /* journal.1 cut back, copied */
    CHECK(st && store_length_of(st, a) == 6);
    CHECK(st && store_add_rows(st, a, 1, 8, 40) == CORE_OK);     /* journal.2 */
    CHECK(said("journal.0000000000000001: a copy is kept as"));
    if (st)
        sess_store_free(st);
    CHECK(unlink(path_of(J1)) == 0);
    st = open_dir();
    CHECK(said("journal.0000000000000001 before it is missing"));
    CHECK(said("journal.0000000000000002 set aside as"));
    CHECK(exists(J2 ".setaside") && !exists(J2));
    CHECK(said("files kept for a look: 2 ("));
    if (st)
        sess_store_free(st);
    fail_snapshots(false);

    two_journals(a);                            /* journal.1 set aside, the */
    char from[200];                             /* name an older attnd gave */
    snprintf(from, sizeof from, "%s", path_of(J1));
    CHECK(rename(from, path_of(J1 ".damaged")) == 0);
    st = open_dir();
    CHECK(st && strstr(logged, "before it is missing") == NULL);
    CHECK(exists(J2) && !exists(J2 ".setaside"));
    CHECK(said("files kept for a look: 1 ("));
    if (st)
        sess_store_free(st);
    fail_snapshots(false);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-replay-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(an_intact_state_restores_everything_quietly);
    RUN(a_damaged_snapshot_record_loses_only_its_session);
    RUN(a_snapshot_whose_framing_is_lost_keeps_what_came_before);
    RUN(a_missing_snapshot_is_said_and_its_sessions_counted);
    RUN(a_torn_journal_tail_is_cut_back_and_the_next_journal_follows_it);
    RUN(a_damaged_journal_stops_the_replay_and_names_what_it_sets_aside);
    RUN(a_length_flipped_mid_journal_sets_the_next_journal_aside);
    RUN(a_length_zeroed_mid_journal_sets_the_next_journal_aside);
    RUN(a_journal_is_cut_back_when_no_copy_can_be_kept);
    RUN(a_journal_that_cannot_be_cut_back_refuses_the_start);
    RUN(a_copy_that_cannot_be_made_now_fails_the_start_and_cuts_nothing);
    RUN(a_length_over_a_later_record_names_every_session_it_drops);
    RUN(a_record_at_the_largest_lsn_is_damage);
    RUN(an_earlier_damaged_copy_is_never_replaced);
    RUN(a_snapshot_larger_than_the_address_space_is_read_a_record_at_a_time);
    RUN(memory_short_rebuilding_a_session_fails_the_start_and_changes_nothing);
    RUN(a_file_whose_header_names_another_generation_is_not_replayed);
    RUN(a_journal_missing_after_a_copy_of_it_was_kept_is_a_gap);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
