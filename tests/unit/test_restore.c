/*
 * tests/unit/test_restore.c — a state directory restored under limits it
 * no longer fits (core/durable.c with core/store.c's admit): every session
 * comes back when --max-sessions or --max-cache-bytes was lowered; the
 * start says so; the reject policy then refuses new sessions until enough
 * are deleted, the lru policy evicts for them. Forks share their parent's
 * pages again after a restore, from the journal (FORK records) and from a
 * snapshot (which holds them whole: core/kv_dedup.c), and grow apart as
 * before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/store.h"
#include "tests/harness.h"
#include "tests/store_util.h"

static char dir[64];
static char warned[512];

static void keep_warnings(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    if (level == SESS_LOG_WARN)
        snprintf(warned, sizeof warned, "%s", msg);
}

static void empty_dir(void)
{
    char cmd[192];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
}

/* The store over dir with these limits (0: none). */
static struct sess_store *reopen(size_t max_sessions, size_t max_bytes,
                                 enum sess_policy policy)
{
    struct sess_config cfg = {.max_sessions = max_sessions, .max_cache_bytes = max_bytes,
                              .default_ttl_s = 3600, .default_max_tokens = 100000,
                              .policy = policy, .replica_id = "t0"};
    struct sess_store *st = sess_store_new(&cfg);
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40,
                                     .log = keep_warnings};
    warned[0] = '\0';
    if (st && sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        st = NULL;
    }
    CHECK(st != NULL);
    return st;
}

static enum core_status new_session(struct sess_store *st, char *id)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 8, .d_v = 8},
                           .params = {.dtype = ATTN_F32, .scale = 0.25}};
    return sess_create(st, &sp, id);
}

static enum core_status add_rows(struct sess_store *st, const char *id, size_t rows)
{
    return store_add_rows(st, id, rows, 8, 0);
}

/* n sessions of `rows` rows each, their ids into ids. */
static void sessions_of(struct sess_store *st, char (*ids)[SESS_ID_MAX], int n, size_t rows)
{
    for (int i = 0; i < n; i++) {
        CHECK(new_session(st, ids[i]) == CORE_OK);
        CHECK(add_rows(st, ids[i], rows) == CORE_OK);
    }
}

static struct sess_stats stats_of(struct sess_store *st)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    return ss;
}

TEST(lowered_limits_keep_every_session)
{
    empty_dir();
    char ids[6][SESS_ID_MAX], extra[SESS_ID_MAX];
    struct sess_store *st = reopen(100, 0, SESS_POLICY_REJECT);
    sessions_of(st, ids, 6, 100);
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);    /* a snapshot */
    CHECK(add_rows(st, ids[0], 5) == CORE_OK);                  /* and a journal */
    sess_store_free(st);

    st = reopen(3, 0, SESS_POLICY_REJECT);
    CHECK_EQ_INT(stats_of(st).sessions, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(store_length_of(st, ids[i]), i == 0 ? 105 : 100);
    CHECK(strstr(warned, "6 sessions of at most 3") != NULL);
    CHECK(strstr(warned, "every one is kept") != NULL);
    CHECK(new_session(st, extra) == CORE_ECAPACITY);
    for (int i = 0; i < 4; i++)
        CHECK(sess_delete(st, ids[i]) == CORE_OK);
    CHECK(new_session(st, extra) == CORE_OK);
    sess_store_free(st);

    st = reopen(0, 0, SESS_POLICY_REJECT);          /* nothing was lost for good */
    CHECK_EQ_INT(stats_of(st).sessions, 3);
    CHECK(sess_exists(st, ids[4]) && sess_exists(st, ids[5]) && sess_exists(st, extra));
    CHECK(warned[0] == '\0');
    sess_store_free(st);
}

TEST(forks_from_a_snapshot_share_their_pages_again)
{
    empty_dir();
    char ids[4][SESS_ID_MAX];
    struct sess_store *st = reopen(0, 0, SESS_POLICY_REJECT);
    CHECK(new_session(st, ids[0]) == CORE_OK);
    CHECK(add_rows(st, ids[0], 1024) == CORE_OK);
    size_t one = stats_of(st).bytes;
    for (int i = 1; i < 4; i++)
        CHECK(store_fork_of(st, ids[0], ids[i]) == CORE_OK);
    CHECK(add_rows(st, ids[2], 10) == CORE_OK);     /* its own last page */
    size_t before = stats_of(st).bytes;
    CHECK(before < one + one / 4);                  /* the forks share its pages */
    sess_store_free(st);

    /* from the journal, the forks are forks again: it still fits */
    st = reopen(0, one + one / 2, SESS_POLICY_REJECT);
    CHECK_EQ_INT(stats_of(st).sessions, 4);
    CHECK_EQ_INT(stats_of(st).bytes, before);
    CHECK(warned[0] == '\0');
    sess_store_free(st);        /* the start wrote a snapshot: each session whole */

    /* from the snapshot: every page of the same bytes shared again */
    st = reopen(0, one + one / 2, SESS_POLICY_REJECT);
    CHECK_EQ_INT(stats_of(st).sessions, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(store_length_of(st, ids[i]), i == 2 ? 1034 : 1024);
    CHECK(stats_of(st).bytes <= before);
    CHECK(warned[0] == '\0');
    CHECK(add_rows(st, ids[1], 64) == CORE_OK);
    CHECK(add_rows(st, ids[0], 8) == CORE_OK);
    CHECK_EQ_INT(store_length_of(st, ids[1]), 1088);
    CHECK_EQ_INT(store_length_of(st, ids[0]), 1032);
    CHECK_EQ_INT(store_length_of(st, ids[3]), 1024);
    sess_store_free(st);
}

TEST(lru_evicts_for_new_sessions_after_a_restore_over_its_limits)
{
    empty_dir();
    char ids[6][SESS_ID_MAX], extra[SESS_ID_MAX];
    struct sess_store *st = reopen(0, 0, SESS_POLICY_LRU);
    sessions_of(st, ids, 6, 10);
    sess_store_free(st);
    st = reopen(3, 0, SESS_POLICY_LRU);
    CHECK_EQ_INT(stats_of(st).sessions, 6);
    CHECK(strstr(warned, "least recently used") != NULL);
    CHECK(new_session(st, extra) == CORE_OK);
    CHECK_EQ_INT(stats_of(st).sessions, 3);
    CHECK_EQ_INT(stats_of(st).evictions, 4);
    CHECK(sess_exists(st, extra));
    sess_store_free(st);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-restore-%ld", (long)getpid());
    RUN(lowered_limits_keep_every_session);
    RUN(forks_from_a_snapshot_share_their_pages_again);
    RUN(lru_evicts_for_new_sessions_after_a_restore_over_its_limits);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
    TEST_MAIN_END();
}
