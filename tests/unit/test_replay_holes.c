/*
 * tests/unit/test_replay_holes.c — the copy a start keeps of a damaged
 * sparse state file (core/replay_files.c) keeps its holes: it has the
 * original's bytes and size, and takes the room of its data alone. A
 * journal with records at its start, then zeros (its damage: a record cut
 * short) in a hole, data further on and a hole to the end is copied
 * before it is cut back; so is one whose data goes on to its very end. A
 * file beginning with a hole, and one that is all hole, are copied the
 * same way; where the file system knows no SEEK_DATA (EINVAL, as an old
 * kernel says), every byte is copied, as before. The program is linked
 * with -Wl,--wrap=lseek (Makefile) for that: __wrap_lseek below fails
 * SEEK_DATA when told to. Before, the copy wrote every byte of the size:
 * a damaged journal of 64 GiB, mostly hole, filled the disk. The files
 * here are a few tens of MiB long and hold a few KiB (the disk is shared).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/replay_files.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/state_dir.h"
#include "tests/store_util.h"

#define J1 "journal.0000000000000001"
#define MIB (1L << 20)

/* The most room a copy of the files here may take on the disk: their data
 * is a few KiB, their size tens of MiB. */
#define ROOM_MAX MIB

/* SEEK_DATA fails with EINVAL (no_seek_data), as where it is not known;
 * seek_data counts the calls. */
static bool no_seek_data;
static unsigned seek_data;

off_t __real_lseek(int fd, off_t off, int whence);
off_t __wrap_lseek(int fd, off_t off, int whence);

off_t __wrap_lseek(int fd, off_t off, int whence)
{
    if (whence == SEEK_DATA) {
        seek_data++;
        if (no_seek_data) {
            errno = EINVAL;
            return -1;
        }
    }
    return __real_lseek(fd, off, whence);
}

static struct sess_store *open_dir(void)
{
    return open_dir_ttl(3600);
}

/* journal.1 alone: session a, created, then ten appends of 8 rows (about
 * 6 KiB of records). */
static void journal_of_ten(char *a)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    CHECK(st && new_session(st, a) == CORE_OK);
    for (unsigned i = 0; st && i < 10; i++)
        CHECK(store_add_rows(st, a, 8, 8, i) == CORE_OK);
    if (st)
        sess_store_free(st);
}

/* Write n bytes of a pattern of seed at offset at of the file name (made
 * when it is not there). */
static void put_data(const char *name, long at, size_t n, unsigned seed)
{
    unsigned char *b = malloc(n);
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; b && i < n; i++)
        b[i] = (unsigned char)(t_rng_next(&rng) >> 56);
    int fd = open(path_of(name), O_WRONLY | O_CREAT, 0600);
    CHECK(b && fd >= 0 && pwrite(fd, b, n, at) == (ssize_t)n);
    if (fd >= 0)
        close(fd);
    free(b);
}

/* Make the file name size bytes long: what is added is a hole. */
static void grow_to(const char *name, long size)
{
    CHECK(truncate(path_of(name), size) == 0);
}

/* The size bytes of the file name, malloc'd (NULL when it cannot be read). */
static unsigned char *contents(const char *name, long size)
{
    unsigned char *b = malloc((size_t)size);
    int fd = open(path_of(name), O_RDONLY);
    long got = 0;
    ssize_t k = 1;
    while (b && fd >= 0 && got < size && k > 0)
        got += (k = pread(fd, b + got, (size_t)(size - got), got)) > 0 ? k : 0;
    if (fd >= 0)
        close(fd);
    if (got != size) {
        free(b);
        return NULL;
    }
    return b;
}

/* Whether the file system of the test's directory keeps a hole in a file
 * (some network or FUSE ones do not: there the copies' room is not
 * checked, only their bytes). Probed once with a 4 MiB file. */
static bool holes_kept(void)
{
    static int kept = -1;
    if (kept < 0) {
        const char *p = path_of("hole-probe");
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        struct stat sb;
        kept = fd >= 0 && pwrite(fd, "x", 1, 4 * MIB - 1) == 1 && fstat(fd, &sb) == 0 &&
               (long long)sb.st_blocks * 512 < 4 * MIB;
        if (fd >= 0)
            close(fd);
        unlink(p);
        if (!kept)
            printf("    this file system keeps no holes: the copies' room is not checked\n");
    }
    return kept;
}

/* Whether the file name holds want (size bytes) and no more, in no more
 * than ROOM_MAX bytes of the disk (else what differs is printed). */
static bool same_and_sparse(const char *name, const unsigned char *want, long size)
{
    struct stat sb;
    if (stat(path_of(name), &sb) != 0) {
        printf("    %s: %s\n", name, strerror(errno));
        return false;
    }
    bool ok = sb.st_size == size;
    if (!ok)
        printf("    %s: %lld bytes, want %ld\n", name, (long long)sb.st_size, size);
    if ((long long)sb.st_blocks * 512 >= ROOM_MAX && holes_kept()) {
        printf("    %s: %lld bytes on the disk for %ld, want fewer than %ld\n", name,
               (long long)sb.st_blocks * 512, size, ROOM_MAX);
        ok = false;
    }
    unsigned char *got = sb.st_size == size ? contents(name, size) : NULL;
    if (sb.st_size == size && (!got || memcmp(got, want, (size_t)size) != 0)) {
        long at = 0;
        while (got && at < size && got[at] == want[at])
            at++;
        printf("    %s: its bytes differ from the original's (first at byte %ld)\n", name,
               at);
        ok = false;
    }
    free(got);
    return ok;
}

/* A start over journal.1, as it is now, of size bytes: the journal is
 * damaged at its first hole (the zeros after the records of
 * journal_of_ten: a record cut short), so a's 80 rows are restored, journal.1 is cut back to
 * them and a copy of it is kept, which must be the journal as it was. */
static void start_keeps_a_sparse_copy(const char *a, long size)
{
    unsigned char *was = contents(J1, size);
    CHECK(was != NULL);
    struct sess_store *st = open_dir();
    CHECK(st && store_length_of(st, a) == 80);
    CHECK(said("journal.0000000000000001: a copy is kept as"));
    CHECK(exists(J1 ".copy"));
    struct stat sb;
    CHECK(stat(path_of(J1), &sb) != 0 || sb.st_size < 64 * 1024);  /* cut back */
    CHECK(was && same_and_sparse(J1 ".copy", was, size));
    if (st)
        sess_store_free(st);
    free(was);
}

/*
 * Records at the start, 6 KiB of data 20 MiB in (not on a block's
 * boundary), and a hole to the end at 48 MiB: the copy is of 48 MiB with
 * the same bytes, its last 28 MiB a hole too.
 */
TEST(a_sparse_damaged_journal_is_copied_with_its_holes)
{
    char a[SESS_ID_MAX];
    journal_of_ten(a);
    grow_to(J1, 48 * MIB);
    put_data(J1, 20 * MIB + 1000, 6 * 1024, 1);
    start_keeps_a_sparse_copy(a, 48 * MIB);
}

/*
 * Records at the start, a hole, 4 KiB of data 16 MiB in, a hole again, and
 * 5000 bytes of data ending the file at 40 MiB + 1234 (an end not on a
 * block's boundary): the last extent is copied to the very end.
 */
TEST(a_sparse_journal_ending_in_data_is_copied_to_its_last_byte)
{
    char a[SESS_ID_MAX];
    journal_of_ten(a);
    long size = 40 * MIB + 1234;
    put_data(J1, 16 * MIB, 4096, 2);
    put_data(J1, size - 5000, 5000, 3);
    start_keeps_a_sparse_copy(a, size);
}

/*
 * A file that begins with a hole (its first data 24 MiB + 10 in, 3000
 * bytes to its very end) and one that is all hole (16 MiB, no data) are
 * copied as they are, holes kept (the copy a start keeps of a journal,
 * sess_state_keep_copy, whole false: the journal will be cut back).
 */
TEST(a_file_beginning_with_a_hole_is_copied_with_it)
{
    store_clear_dir(dir);
    const struct rdir d = {dir, keep_log, NULL};
    const char *names[2] = {"begins-with-a-hole", "all-hole"};
    const long sizes[2] = {24 * MIB + 3010, 16 * MIB};
    for (int i = 0; i < 2; i++) {
        int fd = open(path_of(names[i]), O_WRONLY | O_CREAT | O_EXCL, 0600);
        CHECK(fd >= 0);
        if (fd >= 0)
            close(fd);
        grow_to(names[i], sizes[i]);
        if (i == 0)
            put_data(names[i], sizes[i] - 3000, 3000, 4);
        unsigned char *was = contents(names[i], sizes[i]);
        CHECK(was != NULL);
        char path[200], copy[200];
        snprintf(path, sizeof path, "%s", path_of(names[i]));
        snprintf(copy, sizeof copy, "%s.copy", names[i]);
        logged[0] = '\0';
        CHECK(sess_state_keep_copy(&d, path, "a test", false) == 0);
        CHECK(said("a copy is kept as"));
        CHECK(was && same_and_sparse(copy, was, sizes[i]));
        free(was);
    }
}

/* Where SEEK_DATA is not known, the file (a hole of 200 KiB, then 3000
 * bytes) is copied byte for byte: the same bytes, its hole written out. */
TEST(a_file_is_copied_whole_where_seek_data_is_not_known)
{
    store_clear_dir(dir);
    const struct rdir d = {dir, keep_log, NULL};
    const long size = 200 * 1024 + 3000;
    put_data("no-seek-data", size - 3000, 3000, 5);
    unsigned char *was = contents("no-seek-data", size);
    char path[200];
    snprintf(path, sizeof path, "%s", path_of("no-seek-data"));
    no_seek_data = true;
    seek_data = 0;
    CHECK(sess_state_keep_copy(&d, path, "a test", false) == 0);
    no_seek_data = false;
    CHECK(seek_data == 1);
    unsigned char *got = contents("no-seek-data.copy", size);
    struct stat sb;
    CHECK(stat(path_of("no-seek-data.copy"), &sb) == 0 && sb.st_size == size);
    CHECK((long long)sb.st_blocks * 512 >= size);          /* written out */
    CHECK(was && got && memcmp(was, got, (size_t)size) == 0);
    free(got);
    free(was);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-replay-holes-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(a_sparse_damaged_journal_is_copied_with_its_holes);
    RUN(a_sparse_journal_ending_in_data_is_copied_to_its_last_byte);
    RUN(a_file_beginning_with_a_hole_is_copied_with_it);
    RUN(a_file_is_copied_whole_where_seek_data_is_not_known);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
