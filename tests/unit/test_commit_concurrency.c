/*
 * tests/unit/test_commit_concurrency.c — a request's say over its journal
 * records (core/store.h's sess_commit), which attnd's drain timeout uses to
 * answer a request 503 "nothing of it was applied" while its thread goes
 * on: once withdrawn, every change of the bound thread is refused unwritten
 * and leaves the store as it was (also after a reopen), without counting as
 * a journal failure; once a record has claimed it, the withdrawal fails;
 * threads racing a withdrawal each end one way or the other, never both.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/store.h"
#include "tests/harness.h"
#include "tests/store_util.h"

#define D 8                     /* d_k = d_v of every session here */

static char dir[64];

static void clear_dir(void)
{
    store_clear_dir(dir);
}

static struct sess_store *open_store(void)
{
    struct sess_config cfg = {.default_ttl_s = 3600, .default_max_tokens = 1 << 20,
                              .policy = SESS_POLICY_REJECT};
    struct sess_store *st = sess_store_new(&cfg);
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40};
    if (st && sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        st = NULL;
    }
    CHECK(st != NULL);
    return st;
}

static struct sess_spec spec(void)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = D, .d_v = D},
                           .params = {.dtype = ATTN_F32, .scale = 0.5}};
    return sp;
}

static size_t sessions_in(struct sess_store *st)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    return ss.sessions;
}

TEST(a_withdrawn_request_changes_nothing)
{
    clear_dir();
    struct sess_store *st = open_store();
    if (!st)
        return;
    struct sess_spec sp = spec();
    char a[SESS_ID_MAX], b[SESS_ID_MAX];
    CHECK(sess_create(st, &sp, a) == CORE_OK);
    CHECK(store_add_rows(st, a, 4, D, 0) == CORE_OK);
    struct sess_commit c;
    memset(&c, 0, sizeof c);
    sess_commit_bind(&c);
    CHECK(sess_commit_withdraw(&c));
    CHECK(sess_commit_withdraw(&c));            /* and stays withdrawn */
    CHECK(store_add_rows(st, a, 3, D, 1) == CORE_ESTORAGE);
    CHECK(store_truncate_of(st, a, 1) == CORE_ESTORAGE);
    CHECK(store_fork_of(st, a, b) == CORE_ESTORAGE);
    CHECK(sess_create(st, &sp, b) == CORE_ESTORAGE);
    CHECK(sess_delete(st, a) == CORE_ESTORAGE);
    CHECK_EQ_INT(store_length_of(st, a), 4);
    CHECK_EQ_INT(sessions_in(st), 1);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    CHECK_EQ_INT(ss.journal_failures, 0);       /* not the disk's fault */
    sess_commit_bind(NULL);                     /* another request: unbound */
    CHECK(store_add_rows(st, a, 2, D, 2) == CORE_OK);
    sess_store_free(st);
    st = open_store();
    if (!st)
        return;
    CHECK_EQ_INT(store_length_of(st, a), 6);
    CHECK_EQ_INT(sessions_in(st), 1);
    sess_store_free(st);
}

TEST(a_claimed_request_cannot_be_withdrawn)
{
    clear_dir();
    struct sess_store *st = open_store();
    if (!st)
        return;
    struct sess_spec sp = spec();
    char a[SESS_ID_MAX];
    struct sess_commit c;
    memset(&c, 0, sizeof c);
    sess_commit_bind(&c);
    CHECK(sess_create(st, &sp, a) == CORE_OK);  /* its record claims c */
    CHECK(!sess_commit_withdraw(&c));
    CHECK(store_add_rows(st, a, 5, D, 0) == CORE_OK);
    sess_commit_bind(NULL);
    struct sess_commit idle;                    /* wrote nothing: withdrawable */
    memset(&idle, 0, sizeof idle);
    CHECK(sess_commit_withdraw(&idle));
    sess_store_free(st);
    st = open_store();
    if (st)
        CHECK_EQ_INT(store_length_of(st, a), 5);
    sess_store_free(st);
}

/* Threads each append to their own session under their own commit while
 * the main thread withdraws every commit: each append lands exactly when
 * its withdrawal failed. */
#define RACERS 4
#define RACE_ROWS 2048

struct racer {
    pthread_t t;
    struct sess_store *st;
    char id[SESS_ID_MAX];
    struct sess_commit c;
    atomic_bool go;
    enum core_status rc;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    while (!atomic_load(&r->go))
        ;
    sess_commit_bind(&r->c);
    r->rc = store_add_rows(r->st, r->id, RACE_ROWS, D, 3);
    sess_commit_bind(NULL);
    return NULL;
}

TEST(withdrawals_racing_appends_end_one_way)
{
    struct sess_spec sp = spec();
    for (int round = 0; round < t_cases(20); round++) {
        clear_dir();
        struct sess_store *st = open_store();
        if (!st)
            return;
        struct racer rs[RACERS];
        bool withdrawn[RACERS];
        memset(rs, 0, sizeof rs);
        for (int i = 0; i < RACERS; i++) {
            rs[i].st = st;
            CHECK(sess_create(st, &sp, rs[i].id) == CORE_OK);
            CHECK(pthread_create(&rs[i].t, NULL, race, &rs[i]) == 0);
        }
        for (int i = 0; i < RACERS; i++)
            atomic_store(&rs[i].go, true);
        for (int i = RACERS - 1; i >= 0; i--) {
            if ((round + i) % 3 == 0)
                usleep(50);
            withdrawn[i] = sess_commit_withdraw(&rs[i].c);
        }
        for (int i = 0; i < RACERS; i++) {
            pthread_join(rs[i].t, NULL);
            CHECK_EQ_INT(rs[i].rc, withdrawn[i] ? CORE_ESTORAGE : CORE_OK);
            CHECK_EQ_INT(store_length_of(st, rs[i].id), withdrawn[i] ? 0 : RACE_ROWS);
        }
        sess_store_free(st);
        st = open_store();
        for (int i = 0; st && i < RACERS; i++)
            CHECK_EQ_INT(store_length_of(st, rs[i].id), withdrawn[i] ? 0 : RACE_ROWS);
        sess_store_free(st);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-commit-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(a_withdrawn_request_changes_nothing);
    RUN(a_claimed_request_cannot_be_withdrawn);
    RUN(withdrawals_racing_appends_end_one_way);
    clear_dir();
    rmdir(dir);
    TEST_MAIN_END();
}
