/*
 * tests/unit/test_idem_restore.c — idempotency keys rebuilt from a state
 * directory whose journal lost the delete of a session (eviction and expiry
 * journal their delete best effort, so a failed write is only counted).
 * The session made with the key after it must hold the key after the
 * restart, as it did before: a retry with the key is answered for it.
 *
 * The lost record is made by wrapping jnl_append at link time
 * (-Wl,--wrap=jnl_append): the next best-effort DELETE fails with EIO.
 */
#include <errno.h>
#include <string.h>

#include "core/replay.h"
/* the state directory's helpers: this test opens its store its own way */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/state_dir.h"
#pragma GCC diagnostic pop
#include "tests/store_util.h"

static bool lose_delete;            /* the next best-effort DELETE fails */

enum core_status __real_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no);
enum core_status __wrap_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no);

enum core_status __wrap_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no)
{
    uint32_t type = 0;
    if (n > 0 && parts[0].iov_len >= sizeof type)
        memcpy(&type, parts[0].iov_base, sizeof type);
    if (lose_delete && no_wait && type == SESS_REC_DELETE) {
        lose_delete = false;
        *err_no = EIO;
        return CORE_ESTORAGE;
    }
    return __real_jnl_append(j, lsn, parts, n, no_wait, err_no);
}

/* The store over dir with room for one session, lru: a create evicts. */
static struct sess_store *open_lru(void)
{
    struct sess_config cfg = {.max_sessions = 1, .default_max_tokens = 1000,
                              .policy = SESS_POLICY_LRU, .replica_id = "r0"};
    return open_dir_cfg(&cfg);
}

/*
 * A (key K) is evicted and its DELETE is lost; B is then made with K.
 * After a restart A is back (the journal never said it went), and K must
 * still name B, the session the store answered for it last.
 */
TEST(the_session_made_last_with_a_key_keeps_it_after_a_restart)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 4, .d_v = 4},
                           .params = {.dtype = ATTN_F32, .scale = 0.5}};
    struct sess_idem k = {.scope = "", .key = "k-restore"};
    memset(k.digest, 0x33, sizeof k.digest);
    char a[SESS_ID_MAX], x[SESS_ID_MAX], b[SESS_ID_MAX], found[SESS_ID_MAX];
    bool same = false;
    struct sess_store *st = open_lru();
    CHECK(st != NULL);
    if (!st)
        return;
    CHECK(sess_create_idem(st, &sp, &k, a, NULL) == CORE_OK);
    lose_delete = true;
    CHECK(sess_create(st, &sp, x) == CORE_OK);      /* evicts A: its delete lost */
    CHECK(!lose_delete);
    CHECK(!sess_exists(st, a));
    CHECK(!sess_idem_find(st, &k, found, &same));
    CHECK(sess_create_idem(st, &sp, &k, b, NULL) == CORE_OK);   /* evicts X */
    CHECK(sess_idem_find(st, &k, found, &same) && same);
    CHECK_STR(found, b);
    sess_store_free(st);

    st = open_lru();
    CHECK(st != NULL);
    if (!st)
        return;
    CHECK(sess_exists(st, a) && sess_exists(st, b));
    found[0] = '\0';
    CHECK(sess_idem_find(st, &k, found, &same) && same);
    CHECK_STR(found, b);
    sess_store_free(st);
    st = open_lru();                /* and after the snapshot of that start */
    CHECK(st != NULL);
    if (!st)
        return;
    found[0] = '\0';
    CHECK(sess_idem_find(st, &k, found, &same) && same);
    CHECK_STR(found, b);
    sess_store_free(st);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/attnd-test-idem-restore-%ld", (long)getpid());
    mkdir(dir, 0700);
    RUN(the_session_made_last_with_a_key_keeps_it_after_a_restart);
    store_clear_dir(dir);
    rmdir(dir);
    TEST_MAIN_END();
}
