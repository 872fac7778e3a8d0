/*
 * tests/unit/test_named.c — sessions whose id is worked out from a name
 * (core/store.h's sess_create_named, sess_named_id), as v2 sequences use
 * them: the id is the replica prefix and the name, a taken id is
 * CORE_EEXIST, and an id made again after a delete replays as the last
 * session made under it. sess_delete waits for the request holding the
 * session, so no record of that request can land after the delete's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/kv.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/store_util.h"

static char dir[64];

static struct sess_store *open_in(const char *where)
{
    struct sess_config cfg = {.default_ttl_s = 3600, .default_max_tokens = 100000,
                              .policy = SESS_POLICY_REJECT, .replica_id = "n0"};
    struct sess_store *st = sess_store_new(&cfg);
    struct sess_journal_config jc = {.dir = where, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40};
    if (st && where && sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        st = NULL;
    }
    CHECK(st != NULL);
    return st;
}

static struct sess_spec small_spec(void)
{
    struct sess_spec sp = {.shape = {.h = 2, .h_kv = 1, .d_k = 4, .d_v = 4},
                           .params = {.dtype = ATTN_F32, .scale = 0.5}};
    return sp;
}

/* The first stored K value of id's row `row` (head 0). */
static float first_k(struct sess_store *st, const char *id, size_t row)
{
    struct sess *s;
    float k[4] = {0}, v[4];
    if (sess_acquire(st, id, &s) != CORE_OK)
        return -99;
    kv_read_stored(sess_cache(s), 0, row, 1, k, v, NULL, NULL);
    sess_release(st, s);
    return k[0];
}

TEST(a_name_gives_the_id_and_is_taken_once)
{
    struct sess_store *st = open_in(NULL);
    struct sess_spec sp = small_spec();
    char id[SESS_ID_MAX], want[SESS_ID_MAX], other[SESS_ID_MAX];

    CHECK(sess_named_id(st, "v2i42", want));
    CHECK_STR(want, "n0.v2i42");
    CHECK(sess_create_named(st, &sp, "v2i42", id, NULL) == CORE_OK);
    CHECK_STR(id, want);
    CHECK(sess_create_named(st, &sp, "v2i42", other, NULL) == CORE_EEXIST);
    CHECK(sess_create_named(st, &sp, "v2i43", other, NULL) == CORE_OK);
    CHECK(sess_delete(st, id) == CORE_OK);
    CHECK(sess_create_named(st, &sp, "v2i42", other, NULL) == CORE_OK);
    CHECK_STR(other, want);
    /* names the id could not hold, or that would not come out the same */
    static const char *const bad[] = {"", "a.b", "a b", "a/b", "x%00",
                                      "abcdefghijklmnopqrstuvwx"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(!sess_named_id(st, bad[i], want));
        CHECK(sess_create_named(st, &sp, bad[i], other, NULL) == CORE_EINVAL);
    }
    CHECK(sess_named_id(st, "abcdefghijklmnopqrstuvw", want));      /* 23 */
    sp.shape.h_kv = 3;                  /* a bad spec is still a bad spec */
    CHECK(sess_create_named(st, &sp, "v2i44", other, NULL) == CORE_ESHAPE);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    CHECK_EQ_INT(ss.sessions, 2);
    sess_store_free(st);
}

struct holder {
    struct sess_store *st;
    const char *id;
    atomic_int held, released;
};

static void *hold_a_while(void *p)
{
    struct holder *h = p;
    struct sess *s;
    if (sess_acquire(h->st, h->id, &s) != CORE_OK) {
        atomic_store(&h->held, -1);
        return NULL;
    }
    atomic_store(&h->held, 1);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&h->released, 1);
    sess_release(h->st, s);
    return NULL;
}

/* Without the wait, a request holding the old session could journal an
 * append after the delete and the new session's create, and a replay would
 * give it to the new session. */
TEST(a_delete_waits_for_the_request_holding_the_session)
{
    struct sess_store *st = open_in(dir);
    struct sess_spec sp = small_spec();
    char id[SESS_ID_MAX];
    CHECK(sess_create_named(st, &sp, "held", id, NULL) == CORE_OK);
    struct holder h = {.st = st, .id = id};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hold_a_while, &h) == 0);
    while (atomic_load(&h.held) == 0)
        sched_yield();
    CHECK(sess_delete(st, id) == CORE_OK);
    CHECK_EQ_INT(atomic_load(&h.released), 1);
    pthread_join(t, NULL);
    CHECK(!sess_exists(st, id));
    sess_store_free(st);
}

/* The journal holds two sessions under one id; the replay keeps the last. */
TEST(an_id_made_again_replays_as_the_last_session)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
    struct sess_store *st = open_in(dir);
    struct sess_spec sp = small_spec();
    char id[SESS_ID_MAX], again[SESS_ID_MAX];
    CHECK(sess_create_named(st, &sp, "seq", id, NULL) == CORE_OK);
    CHECK(store_add_rows(st, id, 5, 4, 100) == CORE_OK);
    CHECK(sess_store_journal_maintain(st, true) == CORE_OK);    /* a snapshot */
    CHECK(sess_delete(st, id) == CORE_OK);
    CHECK(sess_create_named(st, &sp, "seq", again, NULL) == CORE_OK);
    CHECK(store_add_rows(st, again, 3, 4, 200) == CORE_OK);
    float want = first_k(st, again, 0);
    CHECK(want != first_k(st, again, 1));
    sess_store_free(st);

    st = open_in(dir);              /* the snapshot, then the journal */
    CHECK_EQ_INT(store_length_of(st, id), 3);
    CHECK(first_k(st, id, 0) == want);
    CHECK(sess_delete(st, id) == CORE_OK);
    CHECK(sess_create_named(st, &sp, "seq", again, NULL) == CORE_OK);
    CHECK(store_add_rows(st, again, 2, 4, 300) == CORE_OK);
    sess_store_free(st);

    st = open_in(dir);              /* the start's snapshot, then the journal */
    CHECK_EQ_INT(store_length_of(st, id), 2);
    sess_store_free(st);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The longest replica prefix (63 characters and '.') and the longest name
 * fit an id whole: two names differing in their last character are two
 * sessions. */
TEST(the_longest_prefix_and_name_fit)
{
    char replica[64], a[SESS_ID_MAX], b[SESS_ID_MAX];
    memset(replica, 'r', 63);
    replica[63] = '\0';
    struct sess_config cfg = {.default_max_tokens = 16, .replica_id = replica};
    struct sess_store *st = sess_store_new(&cfg);
    struct sess_spec sp = small_spec();
    char name[SESS_NAME_MAX];
    memset(name, 'n', SESS_NAME_MAX - 1);               /* the longest name */
    name[SESS_NAME_MAX - 1] = '\0';
    CHECK(sess_create_named(st, &sp, name, a, NULL) == CORE_OK);
    name[SESS_NAME_MAX - 2] = 'm';                      /* its last character other */
    CHECK(sess_create_named(st, &sp, name, b, NULL) == CORE_OK);
    CHECK_EQ_INT(strlen(a), 63 + 1 + SESS_NAME_MAX - 1);
    CHECK(strcmp(a, b) != 0);
    sess_store_free(st);
}

/* A session made held is nobody else's until let go: a request for its
 * name waits, and finds it gone once sess_delete_held removed it. */
TEST(made_held_and_deleted_held)
{
    struct sess_store *st = open_in(NULL);
    struct sess_spec sp = small_spec();
    char id[SESS_ID_MAX];
    struct sess *s = NULL;
    CHECK(sess_create_named(st, &sp, "h1", id, &s) == CORE_OK && s != NULL);
    if (!s)
        return;
    struct holder h = {.st = st, .id = id};
    pthread_t t;
    /* another request for the name waits for the maker's first use */
    CHECK(pthread_create(&t, NULL, hold_a_while, &h) == 0);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_EQ_INT(atomic_load(&h.held), 0);
    CHECK_EQ_INT(sess_length(s), 0);
    CHECK(sess_delete_held(st, s) == CORE_OK);          /* and lets it go */
    pthread_join(t, NULL);
    CHECK_EQ_INT(atomic_load(&h.held), -1);             /* found it gone */
    CHECK(!sess_exists(st, id));
    CHECK(sess_create_named(st, &sp, "h1", id, NULL) == CORE_OK);   /* made again */
    sess_store_free(st);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-named-%ld", (long)getpid());
    RUN(a_name_gives_the_id_and_is_taken_once);
    RUN(a_delete_waits_for_the_request_holding_the_session);
    RUN(an_id_made_again_replays_as_the_last_session);
    RUN(the_longest_prefix_and_name_fit);
    RUN(made_held_and_deleted_held);
    TEST_MAIN_END();
}
