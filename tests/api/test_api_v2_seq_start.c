/*
 * tests/api/test_api_v2_seq_start.c — a v2 sequence_start on a sequence id
 * in use, in-process: one refused for its input, for its results (a score
 * past FP16's range), for the cache's room, or stopped at its deadline
 * leaves the earlier sequence exactly as it was (its rows and settings:
 * the next request answers as it did before, bit for bit) and writes
 * nothing to the journal; an answered one replaces it; and after a
 * restart from the state directory (also from a journal cut just before
 * the start's record) the sequence is the earlier or the new one, never
 * none.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/v2_testlib.h"
#include "core/attn.h"
#include "core/stop.h"
#include "core/store.h"

/* An FP16 input called name of shape [rows, 2] (data: "a,b,..."). */
#define IN16(name, rows, data) "{\"name\":\"" name "\",\"datatype\":\"FP16\",\"shape\":[" \
    #rows ",2],\"data\":[" data "]}"

/* The earlier sequence: two rows, scale 1, FP16. */
#define START(id) "{\"parameters\":{\"sequence_id\":\"" id "\",\"sequence_start\":true,"     \
    "\"scale\":1},\"inputs\":[" IN16("q", 1, "1,0") "," IN16("k", 2, "1,0,0,1") ","       \
    IN16("v", 2, "1,2,3,4") "]}"

/* Its next request: a query alone (appends nothing). */
#define NEXT(id) "{\"parameters\":{\"sequence_id\":\"" id "\"},\"inputs\":["                \
    IN16("q", 1, "0.5,0.25") "]}"

/* Starts of sequence id that are refused after they are read: for their
 * input (every key masked, with empty_rows "error"), for their results
 * (a score past FP16's range), each with other settings than the
 * earlier sequence's (softmax1, another scale). */
#define REFUSED_STARTS(id) {                                                            \
    "{\"parameters\":{\"sequence_id\":\"" id "\",\"sequence_start\":true,\"softmax\":"     \
    "\"softmax1\",\"empty_rows\":\"error\"},\"inputs\":[" IN16("q", 1, "1,0") ","             \
    IN16("k", 3, "1,0,0,1,1,1") "," IN16("v", 3, "1,2,3,4,5,6") ",{\"name\":\"mask\","          \
    "\"datatype\":\"BOOL\",\"shape\":[1,3],\"data\":[false,false,false]}]}",                 \
    "{\"parameters\":{\"sequence_id\":\"" id "\",\"sequence_start\":true,\"scale\":2},"      \
    "\"inputs\":[" IN16("q", 1, "300,300") "," IN16("k", 1, "300,300") ","                  \
    IN16("v", 1, "5,6") "],\"outputs\":[{\"name\":\"scores\"}]}"}
#define N_REFUSED 2

/* The answer's sequence_length (-1 when absent). */
static long seq_length(json_t *j)
{
    json_t *n = json_object_get(json_object_get(j, "parameters"), "sequence_length");
    return n ? (long)json_integer_value(n) : -1;
}

/* NEXT on pctx answers 200 with the weights and output of want, bit for
 * bit, and the length 2 of the earlier sequence. */
static void answers_as(struct api_ctx *pctx, const char *next, json_t *want)
{
    int st;
    json_t *j = infer_on(pctx, next, &st);

    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(seq_length(j), 2);
    CHECK(json_equal(json_object_get(output(j, "output"), "data"),
                     json_object_get(output(want, "output"), "data")));
    CHECK(json_equal(json_object_get(output(j, "weights"), "data"),
                     json_object_get(output(want, "weights"), "data")));
    json_decref(j);
}

/* The earlier sequence started on pctx with start, and the answer of its
 * next request (new reference), which it must give again later. */
static json_t *started(struct api_ctx *pctx, const char *start, const char *next)
{
    int st;
    json_t *j = infer_on(pctx, start, &st);

    CHECK_EQ_INT(st, 200);
    json_decref(j);
    j = infer_on(pctx, next, &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

static uint64_t journal_records(struct api_ctx *pctx)
{
    struct sess_stats s;

    sess_store_stats(pctx->store, &s);
    return s.journal_records;
}

TEST(a_refused_start_keeps_the_earlier_sequence)
{
    static const char *const refused[N_REFUSED] = REFUSED_STARTS("k1");
    int st;
    json_t *want, *j;

    want = started(&ctx, START("k1"), NEXT("k1"));
    for (size_t i = 0; i < N_REFUSED; i++) {
        j = infer(refused[i], &st);
        CHECK_EQ_INT(st, 400);
        CHECK(v2_err(j) != NULL);
        json_decref(j);
        answers_as(&ctx, NEXT("k1"), want);
    }
    json_decref(want);
}

/* A start whose rows do not fit the cache beside the earlier sequence's is
 * refused (503), one whose window could never fit it (400), and each
 * leaves that one as it was. */
TEST(a_start_the_cache_cannot_hold_keeps_the_earlier_sequence)
{
    struct api_ctx pctx;
    struct sess_config sc = {.max_sessions = 4, .max_cache_bytes = 16384,
                             .default_ttl_s = 600, .default_max_tokens = 4096};
    struct t_body b = {0};
    int st;
    json_t *want, *j;

    t_ctx_init(&pctx);
    pctx.store = sess_store_new(&sc);
    want = started(&pctx, START("full"), NEXT("full"));
    /* 2000 rows of FP32 k and v: 32000 bytes, twice the cache */
    t_body_puts(&b, "{\"parameters\":{\"sequence_id\":\"full\",\"sequence_start\":true},"
                "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],"
                "\"data\":[1,0]}");
    for (int t = 0; t < 2; t++) {
        t_body_puts(&b, t ? ",{\"name\":\"v\"" : ",{\"name\":\"k\"");
        t_body_puts(&b, ",\"datatype\":\"FP32\",\"shape\":[2000,2],\"data\":[0");
        for (int i = 1; i < 4000; i++)
            t_body_puts(&b, ",1");
        t_body_puts(&b, "]}");
    }
    t_body_puts(&b, "]}");
    j = infer_on(&pctx, b.p, &st);
    CHECK_EQ_INT(st, 503);
    json_decref(j);
    free(b.p);
    answers_as(&pctx, NEXT("full"), want);
    /* a rolling start whose window alone passes the whole cache: 2063 rows
     * held and one appended, at least 8 bytes a row */
    j = infer_on(&pctx, "{\"parameters\":{\"sequence_id\":\"full\",\"sequence_start\":true,"
                 "\"window_left\":2000},\"inputs\":[" IN16("q", 1, "1,0") ","
                 IN16("k", 1, "1,0") "," IN16("v", 1, "1,2") "]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "(--max-cache-bytes 16384)") &&
          strstr(v2_err(j), "[limit_exceeded at /parameters/window_left]"));
    json_decref(j);
    answers_as(&pctx, NEXT("full"), want);
    json_decref(want);
    sess_store_free(pctx.store);
}

/* A start stopped at its deadline (504) keeps the earlier sequence: the
 * stop is attached to the request's workspace, due already, and the pass
 * (1024 queries over 1024 keys) is large enough to be cut into pieces,
 * between which the stop is read. */
TEST(a_start_past_its_deadline_keeps_the_earlier_sequence)
{
    struct t_body b = {0};
    struct attn_stop stop = {.deadline_ns = 1};
    struct attn_ws *ws = attn_ws_new();
    struct api_request req;
    struct api_response resp;
    struct api_call c;
    char num[32];
    json_t *want, *j;

    want = started(&ctx, START("dl"), NEXT("dl"));
    t_body_puts(&b, "{\"parameters\":{\"sequence_id\":\"dl\",\"sequence_start\":true},"
                "\"outputs\":[{\"name\":\"output\"}],\"inputs\":[");
    for (int t = 0; t < 3; t++) {
        snprintf(num, sizeof num, "%s{\"name\":\"%c\"", t ? "," : "", "qkv"[t]);
        t_body_puts(&b, num);
        t_body_puts(&b, ",\"datatype\":\"FP32\",\"shape\":[1024,4],\"data\":[");
        for (int i = 0; i < 4096; i++) {
            snprintf(num, sizeof num, "%s%d", i ? "," : "", (i * 7 + t) % 5 - 2);
            t_body_puts(&b, num);
        }
        t_body_puts(&b, "]}");
    }
    t_body_puts(&b, "]}");
    attn_ws_set_stop(ws, &stop);
    memset(&req, 0, sizeof req);
    req.method = "POST";
    req.path = "/v2/models/attention/infer";
    req.header = t_header_fn;
    req.header_arg = (void *)t_json_headers;
    req.body = b.p;
    req.body_len = b.len;
    req.ws = ws;
    memset(&resp, 0, sizeof resp);
    resp.status = 500;
    c.ctx = &ctx;
    c.req = &req;
    c.resp = &resp;
    c.t0_us = api_now_us();
    c.answered = false;
    api_v2(&c, "/models/attention/infer");
    CHECK_EQ_INT(resp.status, 504);
    j = t_json(&resp);
    CHECK(v2_err(j) && strstr(v2_err(j), "deadline"));
    json_decref(j);
    api_response_free(&resp);
    attn_ws_free(ws);
    free(b.p);
    answers_as(&ctx, NEXT("dl"), want);
    json_decref(want);
}

/* An answered start replaces the earlier sequence: its rows and its
 * settings (softmax1 now: the earlier "standard" is refused as another
 * value), under the same session id. */
TEST(an_answered_start_replaces_the_earlier_sequence)
{
    int st;
    json_t *a, *j;

    a = infer(START("rp"), &st);
    CHECK_EQ_INT(st, 200);
    j = infer("{\"parameters\":{\"sequence_id\":\"rp\",\"sequence_start\":true,"
              "\"softmax\":\"softmax1\"},\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(seq_length(j), 3);
    CHECK(json_equal(json_object_get(json_object_get(j, "parameters"), "session_id"),
                     json_object_get(json_object_get(a, "parameters"), "session_id")));
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"rp\",\"softmax\":\"standard\"},"
              "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/parameters/softmax"));
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"rp\",\"sequence_end\":true},"
              "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0]},{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[0,0]},{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,1]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(seq_length(j), 4);
    json_decref(j);
    json_decref(a);
}

/* ---- a restart -------------------------------------------------------------- */

static const struct sess_config restart_cfg = {.default_ttl_s = 600,
                                               .default_max_tokens = 64};

/* The one journal file of dir (the store writes a new one at each start:
 * the newest); false when there is none. */
static bool journal_of(const char *dir, char *path, size_t size)
{
    char cmd[256];
    FILE *f;
    bool ok;

    snprintf(cmd, sizeof cmd, "ls %s/journal.* | tail -1", dir);
    f = popen(cmd, "r");
    ok = f && fgets(path, (int)size, f) != NULL;
    if (f)
        pclose(f);
    if (ok)
        path[strcspn(path, "\n")] = '\0';
    return ok;
}

static void shell(const char *cmd)
{
    CHECK(system(cmd) == 0);
}

/* With a state directory: a refused start writes no record, and after a
 * restart the earlier sequence answers as before; an answered start's
 * one record replaces it, and a restart from the journal cut just before
 * that record finds the earlier sequence, from the whole journal the new
 * one. */
TEST(the_kept_or_replaced_sequence_outlives_a_restart)
{
    static const char *const refused[N_REFUSED] = REFUSED_STARTS("p");
    struct api_ctx pctx;
    char dir[64], cut[80], jpath[200], cmd[512];
    uint64_t before;
    struct sess_stats ss;
    int st;
    json_t *want, *j;

    snprintf(dir, sizeof dir, "/tmp/attnd-test-seqstart-%ld", (long)getpid());
    snprintf(cut, sizeof cut, "%s-cut", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, cut);
    shell(cmd);
    t_ctx_init(&pctx);
    if (!(pctx.store = v2t_store_in(dir, &restart_cfg)))
        return;
    want = started(&pctx, START("p"), NEXT("p"));
    for (size_t i = 0; i < N_REFUSED; i++) {
        before = journal_records(&pctx);
        j = infer_on(&pctx, refused[i], &st);
        CHECK_EQ_INT(st, 400);
        CHECK_EQ_INT(journal_records(&pctx), before);       /* nothing written */
        json_decref(j);
    }
    sess_store_free(pctx.store);

    pctx.store = v2t_store_in(dir, &restart_cfg);     /* a restart */
    answers_as(&pctx, NEXT("p"), want);
    sess_store_stats(pctx.store, &ss);
    before = ss.journal_bytes;
    j = infer_on(&pctx, "{\"parameters\":{\"sequence_id\":\"p\",\"sequence_start\":true,"
                 "\"softmax\":\"softmax1\"},\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    sess_store_free(pctx.store);
    /* a copy of the directory whose journal ends before the start's record */
    snprintf(cmd, sizeof cmd, "cp -r %s %s", dir, cut);
    shell(cmd);
    CHECK(journal_of(cut, jpath, sizeof jpath));
    snprintf(cmd, sizeof cmd, "truncate -s %llu %s", (unsigned long long)before, jpath);
    shell(cmd);

    pctx.store = v2t_store_in(cut, &restart_cfg);     /* crashed before the record */
    answers_as(&pctx, NEXT("p"), want);
    sess_store_free(pctx.store);
    pctx.store = v2t_store_in(dir, &restart_cfg);     /* after it */
    j = infer_on(&pctx, "{\"parameters\":{\"sequence_id\":\"p\",\"softmax\":\"standard\"},"
                 "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
                 "\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);                      /* softmax1 now */
    json_decref(j);
    j = infer_on(&pctx, "{\"parameters\":{\"sequence_id\":\"p\"},\"inputs\":["
                 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}",
                 &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(seq_length(j), 3);
    json_decref(j);
    sess_store_free(pctx.store);
    pctx.store = v2t_store_in(dir, &restart_cfg);     /* again: from its snapshot */
    j = infer_on(&pctx, "{\"parameters\":{\"sequence_id\":\"p\",\"softmax\":\"softmax1\"},"
                 "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
                 "\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(seq_length(j), 3);
    json_decref(j);
    sess_store_free(pctx.store);
    json_decref(want);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, cut);
    shell(cmd);
}

int main(void)
{
    if (!v2t_setup())
        return 1;
    RUN(a_refused_start_keeps_the_earlier_sequence);
    RUN(a_start_the_cache_cannot_hold_keeps_the_earlier_sequence);
    RUN(a_start_past_its_deadline_keeps_the_earlier_sequence);
    RUN(an_answered_start_replaces_the_earlier_sequence);
    RUN(the_kept_or_replaced_sequence_outlives_a_restart);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
