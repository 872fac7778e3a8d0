/*
 * tests/api/test_api_idempotency.c — the Idempotency-Key header of POST
 * /v1/sessions, /v1/sessions/{id}/fork and /v1/sessions/import in-process:
 * a malformed key is 400 and makes nothing; a repeat with the same key and
 * request answers 201 for the first one's session (same id, Location,
 * Idempotent-Replayed: true) and makes nothing, another request with the
 * key is 422 idempotency_key_reused; keys are per API key; a deleted,
 * expired or evicted session's key is free again; an export carries no key; the key and its
 * digest outlive the store (journal replay, and a snapshot with its
 * journal) over a state directory; racing creates with one key make one
 * session; the CORS preflight allows the header
 * and answers expose Idempotent-Replayed.
 */
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

static size_t sessions(void)
{
    struct sess_stats s;
    sess_store_stats(ctx.store, &s);
    return s.sessions;
}

/* A request with an Idempotency-Key (NULL: none) and, when bearer is not
 * NULL, that API key; its status. */
static int keyed(const char *method, const char *path, const char *key, const char *bearer,
                 const char *type, const void *body, size_t n, struct api_response *r)
{
    char auth[128];
    const char *h[8] = {"Content-Type", type ? type : "application/json"};
    int i = 2;
    if (key) {
        h[i++] = "Idempotency-Key";
        h[i++] = key;
    }
    if (bearer) {
        snprintf(auth, sizeof auth, "Bearer %s", bearer);
        h[i++] = "Authorization";
        h[i++] = auth;
    }
    h[i] = NULL;
    t_call_n(&ctx, method, path, h, body, n, r);
    return r->status;
}

static int create(const char *key, const char *body, struct api_response *r)
{
    return keyed("POST", "/v1/sessions", key, NULL, NULL, body, strlen(body), r);
}

/* The "id" of r into out[128] (and r freed). */
static void take_id(struct api_response *r, char *out)
{
    json_t *j = t_json(r);
    const char *id = json_string_value(json_object_get(j, "id"));
    snprintf(out, 128, "%s", id ? id : "");
    json_decref(j);
    api_response_free(r);
}

/* A create (key NULL: none) that must make a session: its id into out[128]. */
static void created(const char *key, const char *body, char *out)
{
    struct api_response r;
    CHECK_EQ_INT(create(key, body, &r), 201);
    take_id(&r, out);
}

/* r answers 201 for session id as a replay; r freed. */
static void check_replayed(struct api_response *r, const char *id)
{
    char got[128], loc[200];
    CHECK_EQ_INT(r->status, 201);
    CHECK(t_hdr(r, "Idempotent-Replayed") && strcmp(t_hdr(r, "Idempotent-Replayed"), "true") == 0);
    snprintf(loc, sizeof loc, "/v1/sessions/%s", id);
    CHECK(t_hdr(r, "Location") && strcmp(t_hdr(r, "Location"), loc) == 0);
    take_id(r, got);
    CHECK_STR(got, id);
}

static const char body1[] = "{\"d_k\":2,\"d_v\":2}";
static const char body2[] = "{\"d_k\":2,\"d_v\":3}";

TEST(malformed_keys_are_400_and_make_nothing)
{
    char long_key[300];
    memset(long_key, 'a', 256);
    long_key[256] = '\0';
    const char *bad[] = {"", "two words", "tab\there", "caf\xc3\xa9", long_key};
    struct api_response r;
    size_t before = sessions();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(create(bad[i], body1, &r), 400);
        CHECK_STR(t_err_code(&r), "bad_request");
        api_response_free(&r);
        CHECK_EQ_INT(keyed("POST", "/v1/sessions/import", bad[i], NULL,
                           "application/octet-stream", "x", 1, &r), 400);
        CHECK_STR(t_err_code(&r), "bad_request");
        api_response_free(&r);
    }
    CHECK_EQ_INT((int)sessions(), (int)before);
    long_key[255] = '\0';               /* 255 bytes, every printable one */
    CHECK_EQ_INT(create(long_key, body1, &r), 201);
    api_response_free(&r);
    CHECK_EQ_INT(create("!~\"#%&'()*+,-./:;<=>?@[\\]^_`{|}", body1, &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    api_response_free(&r);
    CHECK_EQ_INT((int)sessions(), (int)before + 2);
}

TEST(a_repeat_replays_and_another_request_is_422)
{
    struct api_response r;
    char id[128];
    CHECK_EQ_INT(create("k-replay", body1, &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    take_id(&r, id);
    size_t n = sessions();
    create("k-replay", body1, &r);
    check_replayed(&r, id);
    CHECK_EQ_INT(create("k-replay", body2, &r), 422);
    CHECK_STR(t_err_code(&r), "idempotency_key_reused");
    api_response_free(&r);
    /* the same body under another route is another request too */
    CHECK_EQ_INT(keyed("POST", "/v1/sessions/import", "k-replay", NULL,
                       "application/octet-stream", body1, strlen(body1), &r), 422);
    CHECK_STR(t_err_code(&r), "idempotency_key_reused");
    api_response_free(&r);
    CHECK_EQ_INT((int)sessions(), (int)n);
    /* without the key: a new session, as ever */
    CHECK_EQ_INT(create(NULL, body1, &r), 201);
    api_response_free(&r);
    CHECK_EQ_INT((int)sessions(), (int)n + 1);
}

TEST(a_deleted_sessions_key_is_free_again)
{
    struct api_response r;
    char id[128], id2[128], path[200];
    created("k-free", body1, id);
    create("k-free", body1, &r);        /* held while the session lives */
    check_replayed(&r, id);
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    t_call(&ctx, "DELETE", path, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    api_response_free(&r);
    CHECK_EQ_INT(create("k-free", body2, &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    take_id(&r, id2);
    CHECK(strcmp(id, id2) != 0);
}

/* The clock of the stores below: seconds, moved by hand. */
static double now_s = 1000.0;

static double hand_clock(void *arg)
{
    (void)arg;
    return now_s;
}

/* A create with key makes a new session (201 without Idempotent-Replayed),
 * not the one of id, which is gone; r freed. */
static void made_anew(const char *key, const char *id)
{
    struct api_response r;
    char id2[128], path[200];
    CHECK_EQ_INT(create(key, body1, &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    take_id(&r, id2);
    CHECK(id2[0] && strcmp(id, id2) != 0);
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    t_call(&ctx, "GET", path, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
    create(key, body1, &r);             /* the new session holds the key */
    check_replayed(&r, id2);
}

/*
 * A session that expired (its TTL ran out) lets its key go: found expired
 * by the next create with the key, or removed by a sweep before it.
 */
TEST(an_expired_sessions_key_is_free_again)
{
    struct sess_store *mem = ctx.store;
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096,
                              .replica_id = "t9"};
    ctx.store = sess_store_new(&cfg);
    sess_store_set_clock(ctx.store, hand_clock, NULL);
    static const char *const keys[] = {"k-ttl", "k-ttl-swept"};
    for (int swept = 0; swept < 2; swept++) {
        struct api_response r;
        char id[128];
        created(keys[swept], body1, id);
        now_s += 599;                   /* within its TTL (600 s): held */
        create(keys[swept], body1, &r);
        check_replayed(&r, id);
        now_s += 601;                   /* idle past its TTL */
        if (swept)
            CHECK_EQ_INT((int)sess_store_sweep(ctx.store), 2);
        made_anew(keys[swept], id);
    }
    sess_store_free(ctx.store);
    ctx.store = mem;
}

/* A session evicted for room (--cache-policy lru) lets its key go. */
TEST(an_evicted_sessions_key_is_free_again)
{
    struct sess_store *mem = ctx.store;
    struct sess_config cfg = {.max_sessions = 2, .default_ttl_s = 600,
                              .default_max_tokens = 4096, .policy = SESS_POLICY_LRU,
                              .replica_id = "t10"};
    ctx.store = sess_store_new(&cfg);
    sess_store_set_clock(ctx.store, hand_clock, NULL);
    struct api_response r;
    char id[128];
    created("k-lru", body1, id);
    for (int i = 0; i < 2; i++) {       /* the second one evicts it */
        now_s += 1;
        CHECK_EQ_INT(create(NULL, body1, &r), 201);
        api_response_free(&r);
    }
    struct sess_stats st;
    sess_store_stats(ctx.store, &st);
    CHECK_EQ_INT((int)st.evictions, 1);
    made_anew("k-lru", id);
    sess_store_free(ctx.store);
    ctx.store = mem;
}

TEST(fork_and_import_replay)
{
    struct api_response r;
    char parent[128], other[128], child[128], imp[128], path[200];
    created(NULL, body1, parent);
    created(NULL, body1, other);
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", parent);
    CHECK_EQ_INT(keyed("POST", path, "k-fork", NULL, NULL, NULL, 0, &r), 201);
    take_id(&r, child);
    size_t n = sessions();
    keyed("POST", path, "k-fork", NULL, NULL, NULL, 0, &r);
    check_replayed(&r, child);
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", other);
    CHECK_EQ_INT(keyed("POST", path, "k-fork", NULL, NULL, NULL, 0, &r), 422);
    CHECK_STR(t_err_code(&r), "idempotency_key_reused");
    api_response_free(&r);

    size_t len;
    char *bytes = t_export(&ctx, child, &len);
    CHECK_EQ_INT(keyed("POST", "/v1/sessions/import", "k-import", NULL,
                       "application/octet-stream", bytes, len, &r), 201);
    take_id(&r, imp);
    keyed("POST", "/v1/sessions/import", "k-import", NULL, "application/octet-stream",
          bytes, len, &r);
    check_replayed(&r, imp);
    CHECK_EQ_INT((int)sessions(), (int)n + 1);
    /* the export carries no key: the fork's key is not the import's */
    CHECK_EQ_INT(keyed("POST", "/v1/sessions/import", NULL, NULL, "application/octet-stream",
                       bytes, len, &r), 201);
    api_response_free(&r);
    keyed("POST", path, "k-fork-2", NULL, NULL, NULL, 0, &r);     /* child's own key */
    api_response_free(&r);
    free(bytes);
}

/* One of the racing creates of one_session_for_racing_creates: its id. */
static void *race_one(void *arg)
{
    struct api_response r;
    int status = create("k-race", body1, &r);
    take_id(&r, arg);
    if (status != 201)
        ((char *)arg)[0] = '\0';
    return NULL;
}

/* Creates with one key at the same time make one session, and every one
 * is answered 201 for it. */
TEST(one_session_for_racing_creates)
{
    enum { N = 8 };
    pthread_t t[N];
    static char ids[N][128];
    size_t before = sessions();
    for (int i = 0; i < N; i++)
        CHECK(pthread_create(&t[i], NULL, race_one, ids[i]) == 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT((int)sessions(), (int)before + 1);
    for (int i = 0; i < N; i++) {
        CHECK(ids[i][0] != '\0');
        CHECK_STR(ids[i], ids[0]);
    }
}

/* Two API keys named alice and bob (a valid token is the name + "-token"). */
static bool two_keys(void *arg, const char *token, char name[API_KEY_NAME_MAX])
{
    (void)arg;
    if (strcmp(token, "alice-token") && strcmp(token, "bob-token"))
        return false;
    snprintf(name, API_KEY_NAME_MAX, "%.*s", (int)(strchr(token, '-') - token), token);
    return true;
}

TEST(keys_are_per_api_key)
{
    struct api_response r;
    char a[128], b[128];
    ctx.cfg.auth = two_keys;
    CHECK_EQ_INT(keyed("POST", "/v1/sessions", "k-scope", "alice-token", NULL, body1,
                       strlen(body1), &r), 201);
    take_id(&r, a);
    CHECK_EQ_INT(keyed("POST", "/v1/sessions", "k-scope", "bob-token", NULL, body2,
                       strlen(body2), &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    take_id(&r, b);
    CHECK(strcmp(a, b) != 0);
    keyed("POST", "/v1/sessions", "k-scope", "alice-token", NULL, body1, strlen(body1), &r);
    check_replayed(&r, a);
    keyed("POST", "/v1/sessions", "k-scope", "bob-token", NULL, body2, strlen(body2), &r);
    check_replayed(&r, b);
    ctx.cfg.auth = NULL;
    /* without keys: one scope of its own */
    CHECK_EQ_INT(create("k-scope", body2, &r), 201);
    CHECK(t_hdr(&r, "Idempotent-Replayed") == NULL);
    api_response_free(&r);
}

TEST(cors_allows_and_exposes_the_headers)
{
    static const char *const origins[] = {"http://localhost:3000", NULL};
    static const char *const pre[] = {"Origin", "http://localhost:3000",
                                      "Access-Control-Request-Method", "POST", NULL};
    struct api_response r;
    ctx.cfg.cors_origins = origins;
    t_call_h(&ctx, "OPTIONS", "/v1/sessions", pre, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    CHECK(t_hdr(&r, "Access-Control-Allow-Headers") &&
          strstr(t_hdr(&r, "Access-Control-Allow-Headers"), "Idempotency-Key"));
    api_response_free(&r);
    static const char *const post[] = {"Origin", "http://localhost:3000", "Content-Type",
                                       "application/json", NULL};
    t_call_h(&ctx, "POST", "/v1/sessions", post, body1, &r);
    CHECK_EQ_INT(r.status, 201);
    CHECK(t_hdr(&r, "Access-Control-Expose-Headers") &&
          strstr(t_hdr(&r, "Access-Control-Expose-Headers"), "Idempotent-Replayed"));
    api_response_free(&r);
    ctx.cfg.cors_origins = NULL;
}

/* The store over dir again, as after a crash (its journal as it is). */
static void reopen(void)
{
    sess_store_free(ctx.store);
    ctx.store = open_dir_ttl(600);
    CHECK(ctx.store != NULL);
}

/* The three sessions of keys_survive_journal_replay_and_snapshots, whose
 * create (id) and fork (by fork_path: child) replay, and nothing else is
 * made. */
static void still_keyed(const char *id, const char *fork_path, const char *child)
{
    struct api_response r;
    CHECK_EQ_INT((int)sessions(), 3);
    create("k-durable", body1, &r);
    check_replayed(&r, id);
    keyed("POST", fork_path, "k-durable-fork", NULL, NULL, NULL, 0, &r);
    check_replayed(&r, child);
    CHECK_EQ_INT(create("k-durable", body2, &r), 422);
    CHECK_STR(t_err_code(&r), "idempotency_key_reused");
    api_response_free(&r);
    CHECK_EQ_INT((int)sessions(), 3);
}

TEST(keys_survive_journal_replay_and_snapshots)
{
    struct sess_store *mem = ctx.store;
    struct api_response r;
    char id[128], parent[128], child[128], path[200];
    snprintf(dir, sizeof dir, "/tmp/attnd-test-idem-%d", (int)getpid());
    mkdir(dir, 0700);
    ctx.store = open_dir_ttl(600);
    CHECK(ctx.store != NULL);
    created("k-durable", body1, id);
    created(NULL, body1, parent);
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", parent);
    CHECK_EQ_INT(keyed("POST", path, "k-durable-fork", NULL, NULL, NULL, 0, &r), 201);
    take_id(&r, child);
    reopen();                           /* the journal replayed */
    still_keyed(id, path, child);
    CHECK(sess_store_journal_maintain(ctx.store, true) == CORE_OK);
    reopen();                           /* the snapshot, and its journal */
    still_keyed(id, path, child);
    sess_store_free(ctx.store);
    ctx.store = mem;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096,
                              .replica_id = "t8"};
    t_ctx_init(&ctx);
    attn_blas_init(1);
    ctx.store = sess_store_new(&cfg);
    RUN(malformed_keys_are_400_and_make_nothing);
    RUN(a_repeat_replays_and_another_request_is_422);
    RUN(a_deleted_sessions_key_is_free_again);
    RUN(an_expired_sessions_key_is_free_again);
    RUN(an_evicted_sessions_key_is_free_again);
    RUN(fork_and_import_replay);
    RUN(one_session_for_racing_creates);
    RUN(keys_are_per_api_key);
    RUN(cors_allows_and_exposes_the_headers);
    RUN(keys_survive_journal_replay_and_snapshots);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
