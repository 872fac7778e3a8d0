/*
 * tests/api/test_api_idem_concurrency.c — a request with an Idempotency-Key
 * that comes while the first request with that key still waits for its
 * session's journal record, in-process over a state directory.
 *
 * The first request (A, on its own thread) is held inside its record's
 * write (jnl_append, wrapped at link time: -Wl,--wrap=jnl_append) until the
 * second (B) has found A's session under the key (sess_idem_find, wrapped
 * too); then A's write succeeds or fails with EIO. B must be answered for
 * A's session when it was kept, and make its own when it was not (the key
 * is free again): never 404 for a session it did not ask about. An import
 * is not made twice from one body: it is answered 503 (retry) then.
 */
#include <errno.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* the state directory's helpers: this test needs only its store */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/state_dir.h"
#pragma GCC diagnostic pop
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;

/* ---- the hold on A's record, and B's finding of A's session -------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static pthread_t first, second;     /* A's thread, whose next record is held; B's */
static bool armed, held, released, fails, a_on, b_on;
static bool hold_b_until_a_held;    /* B's first lookup waits for A's hold */
static bool b_waits;                /* and is waiting */
static int b_found;                 /* B's lookups that found A's session */

enum core_status __real_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no);
enum core_status __wrap_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no);
bool __real_sess_idem_find(struct sess_store *st, const struct sess_idem *idem, char *id,
                           bool *same);
bool __wrap_sess_idem_find(struct sess_store *st, const struct sess_idem *idem, char *id,
                           bool *same);

enum core_status __wrap_jnl_append(struct jnl *j, uint64_t lsn, const struct iovec *parts,
                                   int n, bool no_wait, int *err_no)
{
    pthread_mutex_lock(&mu);
    bool hold = armed && a_on && pthread_equal(pthread_self(), first);
    if (hold) {
        armed = false;
        held = true;
        pthread_cond_broadcast(&changed);
        while (!released)
            pthread_cond_wait(&changed, &mu);
    }
    bool fail = hold && fails;
    pthread_mutex_unlock(&mu);
    if (fail) {
        *err_no = EIO;
        return CORE_ESTORAGE;
    }
    return __real_jnl_append(j, lsn, parts, n, no_wait, err_no);
}

bool __wrap_sess_idem_find(struct sess_store *st, const struct sess_idem *idem, char *id,
                           bool *same)
{
    pthread_mutex_lock(&mu);
    bool is_b = b_on && pthread_equal(pthread_self(), second);
    if (is_b && hold_b_until_a_held) {  /* B's look before A is linked */
        bool none = __real_sess_idem_find(st, idem, id, same);
        CHECK(!none);
        hold_b_until_a_held = false;
        b_waits = true;
        pthread_cond_broadcast(&changed);
        while (!held)
            pthread_cond_wait(&changed, &mu);
        pthread_mutex_unlock(&mu);
        return none;
    }
    pthread_mutex_unlock(&mu);
    bool found = __real_sess_idem_find(st, idem, id, same);
    pthread_mutex_lock(&mu);
    if (found && is_b && held) {
        b_found++;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&mu);
    return found;
}

/* ---- requests ------------------------------------------------------------ */

struct req {
    const char *path, *type, *key;
    const void *body;
    size_t n;
    bool is_a;                      /* run_as: the request held */
    struct api_response r;
};

static void run(struct req *q)
{
    const char *h[] = {"Content-Type", q->type, "Idempotency-Key", q->key, NULL};
    t_call_n(&ctx, "POST", q->path, h, q->body, q->n, &q->r);
}

/* A's or B's thread (its req's is_a): it says which it is before its
 * request. */
static void *run_as(void *arg)
{
    struct req *q = arg;
    pthread_mutex_lock(&mu);
    *(q->is_a ? &first : &second) = pthread_self();
    *(q->is_a ? &a_on : &b_on) = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
    run(q);
    return NULL;
}

static size_t sessions(void)
{
    struct sess_stats s;
    sess_store_stats(ctx.store, &s);
    return s.sessions;
}

/* The "id" of r into out[128]. */
static void id_of(const struct api_response *r, char *out)
{
    json_t *j = t_json(r);
    const char *id = json_string_value(json_object_get(j, "id"));
    snprintf(out, 128, "%s", id ? id : "");
    json_decref(j);
}

/*
 * A (a, on its own thread) is held in its record's write, and B (b, on
 * another) is sent: after A is held, or (early) before A is sent, B's
 * first lookup of the key then waiting for A's hold, so that B meets A's
 * session only when making its own. A's write goes on (a_fails: fails with
 * EIO) once B has found A's session.
 */
static void race(struct req *a, struct req *b, bool a_fails, bool early)
{
    pthread_t ta, tb;
    pthread_mutex_lock(&mu);
    armed = true;
    held = released = a_on = b_on = b_waits = false;
    fails = a_fails;
    b_found = 0;
    a->is_a = true;
    b->is_a = false;
    hold_b_until_a_held = early;
    pthread_mutex_unlock(&mu);
    if (early) {
        CHECK(pthread_create(&tb, NULL, run_as, b) == 0);
        pthread_mutex_lock(&mu);
        while (!b_waits)
            pthread_cond_wait(&changed, &mu);
        pthread_mutex_unlock(&mu);
    }
    CHECK(pthread_create(&ta, NULL, run_as, a) == 0);
    pthread_mutex_lock(&mu);
    while (!held)
        pthread_cond_wait(&changed, &mu);
    pthread_mutex_unlock(&mu);
    if (!early)
        CHECK(pthread_create(&tb, NULL, run_as, b) == 0);
    pthread_mutex_lock(&mu);
    while (b_found == 0)
        pthread_cond_wait(&changed, &mu);
    released = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_mutex_lock(&mu);
    a_on = b_on = false;
    pthread_mutex_unlock(&mu);
}

static const char body[] = "{\"d_k\":2,\"d_v\":2}";

static struct req create_req(const char *key)
{
    return (struct req){.path = "/v1/sessions", .type = "application/json", .key = key,
                        .body = body, .n = strlen(body)};
}

/* B finds A's session waiting for its record, and is answered for it once
 * it is written: one session. */
TEST(a_kept_first_session_is_replayed)
{
    struct req a = create_req("k-kept"), b = create_req("k-kept");
    char ida[128], idb[128];
    size_t before = sessions();
    race(&a, &b, false, false);
    CHECK_EQ_INT(a.r.status, 201);
    CHECK_EQ_INT(b.r.status, 201);
    id_of(&a.r, ida);
    id_of(&b.r, idb);
    CHECK_STR(idb, ida);
    CHECK(t_hdr(&b.r, "Idempotent-Replayed") != NULL);
    CHECK_EQ_INT((int)sessions(), (int)before + 1);
    api_response_free(&a.r);
    api_response_free(&b.r);
}

/* A's record fails: A is 503 and its session gone, and B, which found it
 * before its lookup or when making its own, makes one of its own. */
static void lost_first_session(const char *key, bool early)
{
    struct req a = create_req(key), b = create_req(key);
    char idb[128], path[200];
    size_t before = sessions();
    race(&a, &b, true, early);
    CHECK_EQ_INT(a.r.status, 503);
    CHECK_STR(t_err_code(&a.r), "storage_unavailable");
    CHECK_EQ_INT(b.r.status, 201);
    CHECK(t_hdr(&b.r, "Idempotent-Replayed") == NULL);
    id_of(&b.r, idb);
    CHECK_EQ_INT((int)sessions(), (int)before + 1);
    snprintf(path, sizeof path, "/v1/sessions/%s", idb);
    struct api_response r;
    t_call(&ctx, "GET", path, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    /* and B's session holds the key now */
    struct req c = create_req(key);
    run(&c);
    CHECK_EQ_INT(c.r.status, 201);
    CHECK(t_hdr(&c.r, "Idempotent-Replayed") != NULL);
    api_response_free(&c.r);
    api_response_free(&a.r);
    api_response_free(&b.r);
}

TEST(a_lost_first_session_found_at_the_lookup_is_made_again)
{
    lost_first_session("k-lost", false);
}

TEST(a_lost_first_session_met_when_linking_is_made_again)
{
    lost_first_session("k-lost-late", true);
}

/* An import met A's session when linking its own: its body is used up, so
 * it is 503 with a word to retry, and the retry imports. */
TEST(an_import_meeting_a_lost_first_session_is_503_retry)
{
    struct api_response r;
    char id[128];
    t_call(&ctx, "POST", "/v1/sessions", body, &r);
    CHECK_EQ_INT(r.status, 201);
    id_of(&r, id);
    api_response_free(&r);
    size_t len;
    char *bytes = t_export(&ctx, id, &len);
    struct req a = {.path = "/v1/sessions/import", .type = "application/octet-stream",
                    .key = "k-import", .body = bytes, .n = len};
    struct req b = a;
    size_t before = sessions();
    race(&a, &b, true, true);
    CHECK_EQ_INT(a.r.status, 503);
    CHECK_EQ_INT(b.r.status, 503);
    CHECK_STR(t_err_code(&b.r), "capacity_exhausted");
    CHECK(memmem(b.r.body, b.r.body_len, "retry", 5) != NULL);
    CHECK_EQ_INT((int)sessions(), (int)before);
    api_response_free(&a.r);
    api_response_free(&b.r);
    run(&b);
    CHECK_EQ_INT(b.r.status, 201);
    CHECK_EQ_INT((int)sessions(), (int)before + 1);
    api_response_free(&b.r);
    free(bytes);
}

int main(void)
{
    t_ctx_init(&ctx);
    attn_blas_init(1);
    snprintf(dir, sizeof dir, "/tmp/attnd-test-idemrace-%d", (int)getpid());
    mkdir(dir, 0700);
    ctx.store = open_dir_ttl(600);
    CHECK(ctx.store != NULL);
    RUN(a_kept_first_session_is_replayed);
    RUN(a_lost_first_session_found_at_the_lookup_is_made_again);
    RUN(a_lost_first_session_met_when_linking_is_made_again);
    RUN(an_import_meeting_a_lost_first_session_is_503_retry);
    sess_store_free(ctx.store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
