/*
 * tests/unit/test_snapshot_older.c — a damaged newest snapshot beside the
 * older files it replaced (core/replay.c, core/replay_files.c), as a crash
 * between its rename and their removal leaves them: when they are an older
 * snapshot with every journal after it, and that snapshot reads whole,
 * they are read instead and every session comes back as it was (the
 * damaged snapshot is set aside); otherwise the replay goes on from the
 * damaged snapshot as before, and the older files, never read, are set
 * aside, not removed with the new snapshot. Before, the start restored
 * what the damaged snapshot still held and removed the older files.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

static struct sess_store *open_dir(void)
{
    return open_dir_ttl(0);
}

#define SNAP2 "snapshot.0000000000000002"
#define SNAP3 "snapshot.0000000000000003"
#define J2 "journal.0000000000000002"
#define J3 "journal.0000000000000003"

enum { N = 5 };
static char ids[N][SESS_ID_MAX];
static size_t lens[N];              /* (size_t)-1: gone */

static void note(struct sess_store *st)
{
    for (int i = 0; i < N; i++)
        lens[i] = store_length_of(st, ids[i]);
}

/* Whether st holds every noted session at its length, and no other. */
static bool as_noted(struct sess_store *st)
{
    if (!st)
        return false;
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    size_t live = 0;
    bool ok = true;
    for (int i = 0; i < N; i++) {
        size_t n = store_length_of(st, ids[i]);
        live += lens[i] != (size_t)-1;
        if (n != lens[i]) {
            printf("    session %d: length %zu, want %zu\n", i, n, lens[i]);
            ok = false;
        }
    }
    return ok && ss.sessions == live;
}

static void rename_in(const char *from, const char *to)
{
    char a[200];
    snprintf(a, sizeof a, "%s", path_of(from));
    CHECK(rename(a, path_of(to)) == 0);
}

static void link_in(const char *from, const char *to)
{
    char a[200];
    snprintf(a, sizeof a, "%s", path_of(from));
    CHECK(link(a, path_of(to)) == 0);
}

/*
 * snapshot.2 with its journal.2 (changes after it), and snapshot.3 with its
 * journal.3 (changes after that), all four there, as if the start that
 * wrote snapshot.3 had crashed before it removed the older two.
 */
static void leftovers(void)
{
    store_clear_dir(dir);
    struct sess_store *st = open_dir();
    for (int i = 0; st && i < 3; i++) {
        CHECK(new_session(st, ids[i]) == CORE_OK);
        CHECK(store_add_rows(st, ids[i], (size_t)(10 + i), 8, (unsigned)i) == CORE_OK);
    }
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    CHECK(st && store_add_rows(st, ids[0], 4, 8, 20) == CORE_OK);
    CHECK(st && new_session(st, ids[3]) == CORE_OK);
    CHECK(st && store_add_rows(st, ids[3], 6, 8, 21) == CORE_OK);
    CHECK(st && sess_delete(st, ids[1]) == CORE_OK);
    link_in(SNAP2, "keep.s2");
    link_in(J2, "keep.j2");
    CHECK(st && sess_store_journal_maintain(st, true) == CORE_OK);
    CHECK(exists(SNAP3) && !exists(SNAP2) && !exists(J2));
    CHECK(st && store_add_rows(st, ids[2], 3, 8, 22) == CORE_OK);
    CHECK(st && store_truncate_of(st, ids[0], 5) == CORE_OK);
    CHECK(st && new_session(st, ids[4]) == CORE_OK);
    if (st) {
        note(st);
        sess_store_free(st);            /* as a kill: no snapshot */
    }
    rename_in("keep.s2", SNAP2);
    rename_in("keep.j2", J2);
}

/* Flip a byte in the rows of the first session of snapshot name. */
static void damage(const char *name)
{
    long bytes, off = session_record_in(name, 0, &bytes);
    flip(name, off + bytes - 20);
}

/* snapshot.3 cut short before its end record (all its sessions there). */
static void cut_end(const char *name)
{
    long bytes, off = session_record_in(name, 3, &bytes);
    CHECK(bytes == SNAP_END_BYTES);
    CHECK(truncate(path_of(name), off) == 0);
}

/* What a start reads from the older chain: every session as noted. */
static void read_instead(void)
{
    struct sess_store *st = open_dir();
    CHECK(as_noted(st));
    CHECK(said("journal: snapshot.0000000000000003 is damaged, and "
               "snapshot.0000000000000002 with every journal after it is still there: those "
               "are read instead"));
    CHECK(said(SNAP3 " set aside as "));
    CHECK(said(SNAP3 ".setaside: damaged; snapshot.0000000000000002 and the journals "
               "after it, which hold all it held, were read instead"));
    CHECK(said("journal: snapshot 0000000000000004 written: 4 sessions"));
    if (st)
        sess_store_free(st);
    CHECK(exists(SNAP3 ".setaside") && !exists(SNAP2) && !exists(J2) && !exists(J3));
    st = open_dir();
    CHECK(as_noted(st));
    CHECK(said("journal: snapshot 0000000000000004 kept: 4 sessions"));
    if (st)
        sess_store_free(st);
}

/* snapshot.3 damaged (a session's record, or not whole): snapshot.2,
 * journal.2 and journal.3 give every session as it was; snapshot.3 is set
 * aside, the files read go with the new snapshot, and the next start keeps
 * that one. */
TEST(an_older_whole_chain_is_read_instead)
{
    for (int how = 0; how < 2; how++) {
        leftovers();
        (how == 0 ? damage : cut_end)(SNAP3);
        read_instead();
    }
}

/* The older files set aside, each named in a warn line, and the replay
 * gone on from snapshot.3: its first session is lost, the other three
 * there. */
static void older_kept(const char *const *names, int n)
{
    struct sess_store *st = open_dir();
    CHECK(st != NULL);
    struct sess_stats ss = {0};
    if (st)
        sess_store_stats(st, &ss);
    CHECK(ss.sessions == 3);            /* 4 noted, the damaged one lost */
    for (int i = 0; i < n; i++) {
        char line[600];
        snprintf(line, sizeof line, "%s set aside as %s.setaside: older than the damaged "
                 "snapshot.0000000000000003 and not used", path_of(names[i]),
                 path_of(names[i]));
        CHECK(said(line));
        char kept[64];
        snprintf(kept, sizeof kept, "%s.setaside", names[i]);
        CHECK(exists(kept) && !exists(names[i]));
    }
    CHECK(exists(SNAP3 ".copy"));
    if (st)
        sess_store_free(st);
}

/* journal.2 missing: snapshot.2 alone is not the history since it, so it is
 * not read, but kept. */
TEST(an_older_snapshot_without_its_journal_is_kept)
{
    leftovers();
    CHECK(unlink(path_of(J2)) == 0);
    damage(SNAP3);
    static const char *const names[] = {SNAP2};
    older_kept(names, 1);
}

/* snapshot.2 damaged too: snapshot.3 is read again, and snapshot.2 and
 * journal.2 are kept. */
TEST(an_older_snapshot_damaged_too_is_kept)
{
    leftovers();
    damage(SNAP3);
    damage(SNAP2);
    static const char *const names[] = {SNAP2, J2};
    older_kept(names, 2);
    CHECK(said("journal: snapshot.0000000000000002 is damaged too: "
               "snapshot.0000000000000003 is read again"));
}

/* A whole snapshot.3: the older files are leftovers it replaces, read or
 * not, and go with the next snapshot as before (nothing set aside). */
TEST(older_files_beside_a_whole_snapshot_go)
{
    leftovers();
    struct sess_store *st = open_dir();
    CHECK(as_noted(st));
    CHECK(strstr(logged, "set aside") == NULL && strstr(logged, "warn") == NULL);
    if (st)
        sess_store_free(st);
    CHECK(!exists(SNAP2) && !exists(J2) && !exists(SNAP3));
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-snapold-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(an_older_whole_chain_is_read_instead);
    RUN(an_older_snapshot_without_its_journal_is_kept);
    RUN(an_older_snapshot_damaged_too_is_kept);
    RUN(older_files_beside_a_whole_snapshot_go);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
