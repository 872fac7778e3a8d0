/*
 * tests/api/test_api_v2_seq_concurrency.c — v2 sequence_starts of one id
 * racing each other, requests of the sequence they replace, and snapshots,
 * in-process: the sequence is there all along (every later request is
 * answered 200, never 404), every start that can be answered is (200,
 * never the 503 of racing starts), every refused one is refused for its
 * own fault, and a restart from the state directory finds the sequence as
 * the store held it last. Run under ThreadSanitizer by `make tsan` (its
 * name says concurrency).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/v2_testlib.h"
#include "core/store.h"

#define INFER "/v2/models/attention/infer"
#define ROUNDS 150

#define IN16(name, rows, data) "{\"name\":\"" name "\",\"datatype\":\"FP16\",\"shape\":[" \
    #rows ",2],\"data\":[" data "]}"

static const char *const start_ok =
    "{\"parameters\":{\"sequence_id\":\"c\",\"sequence_start\":true},\"inputs\":["
    IN16("q", 1, "1,0") "," IN16("k", 2, "1,0,0,1") "," IN16("v", 2, "1,2,3,4") "]}";
/* refused for its results: a score past FP16's range */
static const char *const start_bad =
    "{\"parameters\":{\"sequence_id\":\"c\",\"sequence_start\":true},\"inputs\":["
    IN16("q", 1, "300,300") "," IN16("k", 1, "300,300") "," IN16("v", 1, "5,6") "],"
    "\"outputs\":[{\"name\":\"scores\"}]}";
static const char *const next =
    "{\"parameters\":{\"sequence_id\":\"c\"},\"inputs\":["
    IN16("q", 1, "0.5,0.25") "," IN16("k", 1, "1,1") "," IN16("v", 1, "0,1") "]}";

static atomic_bool done;            /* ctx: v2_testlib.h's */

struct worker {
    const char *body;
    int want;                       /* the status every answer must have */
    int wrong;                      /* answers with another */
    int last_wrong;
};

static void *work(void *arg)
{
    struct worker *w = arg;

    for (int i = 0; i < ROUNDS; i++) {
        struct api_response r;
        t_call(&ctx, "POST", INFER, w->body, &r);
        if (r.status != w->want) {
            w->wrong++;
            w->last_wrong = r.status;
        }
        api_response_free(&r);
    }
    return NULL;
}

static void *snapshots(void *arg)
{
    (void)arg;
    while (!atomic_load(&done))
        sess_store_journal_maintain(ctx.store, true);
    return NULL;
}

static const struct sess_config cfg = {.max_sessions = 8, .default_ttl_s = 600,
                                       .default_max_tokens = 4096};

/* The length of the sequence's session (-1: none). */
static long length_of(struct sess_store *st)
{
    struct sess *s;
    long n;

    if (sess_acquire(st, "v2sc", &s) != CORE_OK)
        return -1;
    n = (long)sess_length(s);
    sess_release(st, s);
    return n;
}

TEST(racing_starts_never_leave_the_sequence_missing)
{
    struct worker w[4] = {{start_ok, 200, 0, 0}, {start_ok, 200, 0, 0},
                          {start_bad, 400, 0, 0}, {next, 200, 0, 0}};
    pthread_t t[5];
    char dir[64], cmd[128];
    struct api_response r;
    long len;

    snprintf(dir, sizeof dir, "/tmp/attnd-test-seqrace-%ld", (long)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    t_ctx_init(&ctx);
    if (!(ctx.store = v2t_store_in(dir, &cfg)))
        return;
    t_call(&ctx, "POST", INFER, start_ok, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, work, &w[i]);
    pthread_create(&t[4], NULL, snapshots, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    atomic_store(&done, true);
    pthread_join(t[4], NULL);
    for (int i = 0; i < 4; i++)
        if (w[i].wrong) {
            th_cur_failed = 1;
            printf("  worker %d: %d answers not %d (the last %d)\n", i, w[i].wrong,
                   w[i].want, w[i].last_wrong);
        }
    len = length_of(ctx.store);
    CHECK(len >= 2);
    sess_store_free(ctx.store);
    ctx.store = v2t_store_in(dir, &cfg);                  /* a restart */
    if (ctx.store) {
        CHECK_EQ_INT(length_of(ctx.store), len);
        sess_store_free(ctx.store);
    }
    CHECK(system(cmd) == 0);
}

int main(void)
{
    RUN(racing_starts_never_leave_the_sequence_missing);
    TEST_MAIN_END();
}
