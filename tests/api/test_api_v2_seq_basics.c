/*
 * tests/api/test_api_v2_seq_basics.c — the Open Inference Protocol v2
 * sequence extension in-process: start, continue and end on sessions
 * (decoding equals the stateless pass), its rules, YaRN with truncation,
 * sequences as named sessions that outlive a restart, and how their names
 * are made.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "tests/api/v2_testlib.h"
#include "api/internal.h"
#include "api/v2/v2.h"
#include "api/v2/v2_impl.h"
#include "core/store.h"

/* ---- sequences ----------------------------------------------------------- */

TEST(sequence_decode_equals_stateless)
{
    int st;
    json_t *a, *b, *full, *gone;
    char sid[SESS_ID_MAX] = "";
    struct sess *s = NULL;

    a = infer("{\"parameters\":{\"sequence_id\":42,\"sequence_start\":true,"
              "\"causal\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,2,3,4]},"
              "{\"name\":\"bias_k\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[0.5,-1]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(a, "parameters"),
                                                    "sequence_id")), 42);
    if (json_string_value(json_object_get(json_object_get(a, "parameters"), "session_id")))
        snprintf(sid, sizeof sid, "%s", json_string_value(json_object_get(
                 json_object_get(a, "parameters"), "session_id")));
    CHECK(sid[0] != '\0');
    CHECK(sess_acquire(ctx.store, sid, &s) == CORE_OK);
    if (sid[0] && s) {
        CHECK_EQ_INT(sess_length(s), 2);
        sess_release(ctx.store, s);
    }
    /* one more key/value row and one query; the session remembers bias_k */
    b = infer("{\"parameters\":{\"sequence_id\":42,\"causal\":true,\"sequence_end\":true},"
              "\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[0.3,0.7]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[2,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[5,6]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(b, "parameters"),
                                                    "sequence_length")), 3);
    full = infer("{\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[0.3,0.7]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,2,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,2,3,4,5,6]},"
              "{\"name\":\"bias_k\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[0.5,-1]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(b, "output"), 0), dat(output(full, "output"), 0), 1e-14);
    CHECK_NEAR(dat(output(b, "output"), 1), dat(output(full, "output"), 1), 1e-14);
    CHECK_NEAR(dat(output(b, "weights"), 2), dat(output(full, "weights"), 2), 1e-14);
    /* sequence_end deleted the session */
    CHECK(sess_acquire(ctx.store, sid, &s) == CORE_ENOTFOUND);
    gone = infer("{\"parameters\":{\"sequence_id\":42},\"inputs\":["
                 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    CHECK(v2_err(gone) != NULL);
    json_decref(a);
    json_decref(b);
    json_decref(full);
    json_decref(gone);
}

TEST(sequence_rules)
{
    int st;
    json_t *j;

    /* continuing a sequence that never started */
    j = infer("{\"parameters\":{\"sequence_id\":\"nope\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(j);
    /* start without k and v */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_start\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
    /* start, then an option fixed at start is refused later */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_start\":true},"
              "\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"softmax\":\"softmax1\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/parameters/softmax"));
    json_decref(j);
    /* a query alone attends the cache; FP32 data is converted to the
     * session's FP64 */
    j = infer("{\"parameters\":{\"sequence_id\":\"s1\",\"sequence_end\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(j, "weights"), 0), 0.575975, 5e-7);
    CHECK_STR(json_string_value(json_object_get(output(j, "weights"), "datatype")), "FP64");
    json_decref(j);
    /* a start whose first pass fails leaves no sequence behind */
    j = infer("{\"parameters\":{\"sequence_id\":\"s2\",\"sequence_start\":true,"
              "\"empty_rows\":\"error\"},\"inputs\":[" SEED_IN ",{\"name\":\"mask\","
              "\"datatype\":\"BOOL\",\"shape\":[1,3],\"data\":[false,false,false]}]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
    j = infer("{\"parameters\":{\"sequence_id\":\"s2\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(j);
    /* sequence_start without an id */
    j = infer("{\"parameters\":{\"sequence_start\":true},\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 400);
    json_decref(j);
    /* a batched (rank-4) q at the start: refused as a later request's is,
     * whatever its B, and nothing is started */
    for (int b = 1; b <= 2; b++) {
        char body[640];
        snprintf(body, sizeof body, "{\"parameters\":{\"sequence_id\":\"s4\","
                 "\"sequence_start\":true},\"inputs\":["
                 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[%d,1,1,2],\"data\":[%s]},"
                 "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[%d,1,1,2],\"data\":[%s]},"
                 "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[%d,1,1,2],\"data\":[%s]}]}",
                 b, b == 1 ? "1,0" : "1,0,0,1", b, b == 1 ? "1,0" : "1,0,0,1", b,
                 b == 1 ? "1,2" : "1,2,3,4");
        j = infer(body, &st);
        CHECK_EQ_INT(st, 400);
        CHECK(v2_err(j) && strstr(v2_err(j), "a sequence's q must be [n,d_k] or [h,n,d_k] "
                                             "[shape_mismatch at /inputs/0/shape]"));
        json_decref(j);
        j = infer("{\"parameters\":{\"sequence_id\":\"s4\"},\"inputs\":["
                  "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]}]}",
                  &st);
        CHECK_EQ_INT(st, 404);
        json_decref(j);
    }
}

/* A sequence_end that is refused, before its pass or for its results,
 * ends nothing: the sequence keeps its rows and takes the next request. */
TEST(a_refused_end_keeps_the_sequence)
{
    static const char *const ends[] = {
        /* a setting fixed at the start, another value */
        "{\"parameters\":{\"sequence_id\":\"e1\",\"sequence_end\":true,"
        "\"softmax\":\"softmax1\"},\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,0]},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,1]},"
        "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[5,6]}]}",
        /* q of another width */
        "{\"parameters\":{\"sequence_id\":\"e1\",\"sequence_end\":true},\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,3],\"data\":[1,0,0]}]}",
        /* a score past FP16's range: refused for its results */
        "{\"parameters\":{\"sequence_id\":\"e1\",\"sequence_end\":true},\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[300,300]},"
        "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[300,300]},"
        "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[5,6]}],"
        "\"outputs\":[{\"name\":\"scores\"}]}"};
    int st;
    json_t *j;
    struct sess *s = NULL;

    j = infer("{\"parameters\":{\"sequence_id\":\"e1\",\"sequence_start\":true},"
              "\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,0]},"
              "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[2,2],\"data\":[1,2,3,4]}]}",
              &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        j = infer(ends[i], &st);
        CHECK_EQ_INT(st, 400);
        CHECK(v2_err(j) != NULL);
        json_decref(j);
        CHECK(sess_acquire(ctx.store, "v2se1", &s) == CORE_OK);
        if (s) {
            CHECK_EQ_INT(sess_length(s), 2);
            sess_release(ctx.store, s);
            s = NULL;
        }
    }
    j = infer("{\"parameters\":{\"sequence_id\":\"e1\",\"sequence_end\":true},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,0]},"
              "{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[1,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,2],\"data\":[5,6]}]}",
              &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "parameters"),
                                                    "sequence_length")), 3);
    json_decref(j);
    CHECK(sess_acquire(ctx.store, "v2se1", &s) == CORE_ENOTFOUND);
}

/* A sequence started with yarn's rope_truncate false keeps it: its decode
 * step equals the stateless request with rope_truncate false, bit for bit,
 * and not the one with the default; a later rope_truncate is refused as
 * fixed at the start. */
TEST(sequence_yarn_truncate)
{
#define YARN_P "\"rope_base\":100,\"rope_scaling\":\"yarn\",\"rope_factor\":4," \
    "\"rope_original_max_position\":256"
#define KV3 "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,4],"             \
    "\"data\":[1,0,2,0,0,1,0,-1,0.5,0.5,1,1]},{\"name\":\"v\",\"datatype\":\"FP64\"," \
    "\"shape\":[3,2],\"data\":[1,2,3,4,5,6]}"
#define Q1 "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,4],\"data\":[1,1,0,1]}"
    int st;
    json_t *a, *b, *full, *dflt, *j;

    a = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"sequence_start\":true,"
              "\"causal\":true," YARN_P ",\"rope_truncate\":false},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,4],"
              "\"data\":[1,0,2,0,0,1,0,-1]},{\"name\":\"k\",\"datatype\":\"FP64\","
              "\"shape\":[2,4],\"data\":[1,0,2,0,0,1,0,-1]},{\"name\":\"v\","
              "\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,2,3,4]}]}", &st);
    CHECK_EQ_INT(st, 200);
    j = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"rope_truncate\":true},"
              "\"inputs\":[" Q1 "]}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "/parameters/rope_truncate"));
    json_decref(j);
    b = infer("{\"parameters\":{\"sequence_id\":\"yt\",\"causal\":true,"
              "\"sequence_end\":true},\"inputs\":[" Q1 ","
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,4],"
              "\"data\":[0.5,0.5,1,1]},{\"name\":\"v\",\"datatype\":\"FP64\","
              "\"shape\":[1,2],\"data\":[5,6]}]}", &st);
    CHECK_EQ_INT(st, 200);
    full = infer("{\"parameters\":{\"causal\":true," YARN_P ",\"rope_truncate\":false},"
                 "\"inputs\":[" Q1 "," KV3 "]}", &st);
    CHECK_EQ_INT(st, 200);
    dflt = infer("{\"parameters\":{\"causal\":true," YARN_P "},\"inputs\":[" Q1 ","
                 KV3 "]}", &st);
    CHECK_EQ_INT(st, 200);
    for (size_t i = 0; i < 2; i++) {
        CHECK(dat(output(b, "output"), i) == dat(output(full, "output"), i));
        CHECK(dat(output(b, "output"), i) != dat(output(dflt, "output"), i));
    }
    json_decref(a);
    json_decref(b);
    json_decref(full);
    json_decref(dflt);
#undef YARN_P
#undef KV3
#undef Q1
}

/* One row of sequence seq (a JSON value) on pctx: started anew when start;
 * the answer's sequence_length (-status on an error) and session_id. */
static long seq_row(struct api_ctx *pctx, const char *seq, bool start, char *sid)
{
    char body[512];
    int st;
    json_t *j, *p;
    long len;

    snprintf(body, sizeof body,
             "{\"parameters\":{\"sequence_id\":%s%s},\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
             "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]},"
             "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,1],\"data\":[1]}]}",
             seq, start ? ",\"sequence_start\":true" : "");
    j = infer_on(pctx, body, &st);
    p = json_object_get(j, "parameters");
    len = st == 200 ? (long)json_integer_value(json_object_get(p, "sequence_length")) : -st;
    if (sid)
        snprintf(sid, SESS_ID_MAX, "%s", st == 200 ?
                 json_string_value(json_object_get(p, "session_id")) : "");
    json_decref(j);
    return len;
}

static struct sess_store *store_in(const char *dir)
{
    static const struct sess_config sc = {.default_ttl_s = 600, .default_max_tokens = 64,
                                          .replica_id = "r1"};

    return v2t_store_in(dir, &sc);
}

/* A sequence lives in the session named after its id: any number of them,
 * each found again after a restart, and a start ends the one before. */
TEST(sequences_are_named_sessions_that_outlive_a_restart)
{
    struct api_ctx pctx;
    char dir[64], cmd[160], sid[SESS_ID_MAX], name[SESS_NAME_MAX];
    size_t i, started = 0;

    snprintf(dir, sizeof dir, "/tmp/attnd-test-v2seq-%ld", (long)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
    t_ctx_init(&pctx);
    if (!(pctx.store = store_in(dir)))
        return;
    CHECK_EQ_INT(seq_row(&pctx, "7", true, sid), 1);
    CHECK_STR(sid, "r1.v2i7");
    CHECK_EQ_INT(seq_row(&pctx, "\"abc-_9\"", true, sid), 1);
    CHECK_STR(sid, "r1.v2sabc-_9");
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", true, sid), 1);
    CHECK(strncmp(sid, "r1.v2h", 6) == 0 && strlen(sid) == 26);
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", false, NULL), 2);
    CHECK_EQ_INT(seq_row(&pctx, "\"a c\"", false, NULL), -404);
    for (i = 0; i < 5000; i++) {         /* more than the old map's 4096 */
        snprintf(name, sizeof name, "%zu", 100 + i);
        started += seq_row(&pctx, name, true, NULL) == 1;
    }
    CHECK_EQ_INT(started, 5000);
    CHECK_EQ_INT(seq_row(&pctx, "7", false, NULL), 2);
    sess_store_free(pctx.store);

    pctx.store = store_in(dir);          /* a restart */
    CHECK_EQ_INT(seq_row(&pctx, "7", false, sid), 3);
    CHECK_STR(sid, "r1.v2i7");
    CHECK_EQ_INT(seq_row(&pctx, "\"a b\"", false, NULL), 3);
    CHECK_EQ_INT(seq_row(&pctx, "5099", false, NULL), 2);
    CHECK_EQ_INT(seq_row(&pctx, "7", true, sid), 1);   /* started anew */
    CHECK_STR(sid, "r1.v2i7");
    sess_store_free(pctx.store);

    pctx.store = store_in(dir);
    CHECK_EQ_INT(seq_row(&pctx, "7", false, NULL), 2);
    sess_store_free(pctx.store);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* SEED_IN's k and v. */
#define SEED_KV                                                               \
    "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,-1,0]}," \
    "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,0,0]}"

/* One request on sequence id (its JSON text) with q [1,2] = [1,0] (and the
 * seed's k and v at a start), q in binary when bin: the answer's text. */
static int seq_text(const char *id, bool start, bool bin, char *out, size_t size)
{
    char body[1024], lenbuf[32];
    const char *h[] = {"Content-Type", "application/octet-stream",
                       "Inference-Header-Content-Length", lenbuf, NULL};
    struct api_response r;
    size_t n;
    int st;

    n = (size_t)snprintf(body, sizeof body, "{\"parameters\":{\"sequence_id\":%s%s},"
                         "\"inputs\":[%s%s]}", id, start ? ",\"sequence_start\":true" : "",
                         bin ? "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
                               "\"parameters\":{\"binary_data_size\":16}}"
                             : "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
                               "\"data\":[1,0]}",
                         start ? "," SEED_KV : "");
    snprintf(lenbuf, sizeof lenbuf, "%zu", n);
    if (bin) {
        const double q[2] = {1, 0};
        memcpy(body + n, q, sizeof q);  /* little-endian, as the tests' hosts */
        n += sizeof q;
    }
    v2("POST", "/models/attention/infer", bin ? h : NULL, body, n, &r);
    snprintf(out, size, "%.*s", (int)r.body_len, r.body ? r.body : "");
    st = r.status;
    api_response_free(&r);
    return st;
}

/* Triton's sequence ids are uint64: every id up to 2^64-1 is its own
 * sequence (two of them that are one double apart are not one), answered
 * with its exact digits; beyond, or a real, is a 400 that says the range. */
/* Triton: a sequence_id of 0 or "" says the request is not part of a
 * sequence. So a start with either needs an id, and a plain request with
 * either is answered as one without a sequence (no session is made). */
TEST(an_empty_sequence_id_is_no_sequence)
{
    static const char *const none[] = {"\"\"", "0"};
    char t[2048], body[1024];
    struct sess_stats before, after;
    struct api_response r;

    for (size_t i = 0; i < 2; i++) {
        sess_store_stats(ctx.store, &before);
        CHECK_EQ_INT(seq_text(none[i], true, false, t, sizeof t), 400);
        CHECK(strstr(t, "sequence_start and sequence_end need a sequence_id") != NULL);
        /* with k and v and no start: a plain stateless answer */
        size_t n = (size_t)snprintf(body, sizeof body, "{\"parameters\":{\"sequence_id\":%s},"
                                    "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\","
                                    "\"shape\":[1,2],\"data\":[1,0]}," SEED_KV "]}", none[i]);
        v2("POST", "/models/attention/infer", NULL, body, n, &r);
        CHECK_EQ_INT(r.status, 200);
        CHECK(r.body && !memmem(r.body, r.body_len, "session_id", 10));
        api_response_free(&r);
        sess_store_stats(ctx.store, &after);
        CHECK_EQ_INT((int)after.created, (int)before.created);
    }
}

TEST(sequence_ids_are_uint64_exactly)
{
    static const char *const big[] = {"18446744073709551615", "9223372036854775808"};
    char t[2048];

    for (size_t i = 0; i < 2; i++) {
        char want[96];
        CHECK_EQ_INT(seq_text(big[i], true, false, t, sizeof t), 200);
        snprintf(want, sizeof want, "\"sequence_id\":%s,", big[i]);
        CHECK(strstr(t, want) != NULL);
        snprintf(want, sizeof want, "\"session_id\":\"v2i%s\"", big[i]);
        CHECK(strstr(t, want) != NULL);
        if (!strstr(t, want))
            printf("  %s: %s\n", big[i], t);
    }
    /* 2^64-2 and 2^64-1 are the same double: not the same sequence */
    CHECK_EQ_INT(seq_text("18446744073709551614", false, false, t, sizeof t), 404);
    CHECK_EQ_INT(seq_text("18446744073709551615", false, true, t, sizeof t), 200);
    CHECK(strstr(t, "\"sequence_length\":3,") != NULL);
    CHECK_EQ_INT(seq_text("9223372036854775809", false, false, t, sizeof t), 404);
    CHECK_EQ_INT(seq_text("9223372036854775808", false, false, t, sizeof t), 200);
    static const char *const bad[] = {"18446744073709551616", "100000000000000000000",
                                      "1.8446744073709552e19", "-9223372036854775809",
                                      "-1", "7.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(seq_text(bad[i], true, false, t, sizeof t), 400);
        CHECK(strstr(t, "sequence_id must be an integer 1..18446744073709551615 (uint64; "
                        "0 is none) or a string of 1 to 63 bytes (an empty one is none) [invalid_field at "
                        "/parameters/sequence_id]") != NULL);
    }
}

/* Names: one per id, in the characters and length an id part may have. */
TEST(sequence_names)
{
    static const char *const ids[] = {
        "1", "9223372036854775807", "\"x\"", "\"abcdefghijklmnopqrst\"",
        "\"abcdefghijklmnopqrstu\"", "\"a.b\"", "\"a b\"", "\"a c\"",
        "\"\\u00e9t\\u00e9\"", "\"123456789012345678901234567890123456789012345678901234567890123\""};
    char names[10][SESS_NAME_MAX];
    size_t i, j;

    for (i = 0; i < 10; i++) {
        json_t *id = json_loads(ids[i], JSON_DECODE_ANY, NULL);
        CHECK(api_v2_seq_name(id, names[i]));
        CHECK(strlen(names[i]) >= 4 && strlen(names[i]) < SESS_NAME_MAX);
        CHECK(strspn(names[i], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-_") == strlen(names[i]));
        for (j = 0; j < i; j++)
            CHECK(strcmp(names[i], names[j]) != 0);
        json_decref(id);
    }
    CHECK_STR(names[1], "v2i9223372036854775807");
    api_v2_seq_name_num(UINT64_MAX, names[0]);
    CHECK_STR(names[0], "v2i18446744073709551615");
    CHECK_STR(names[3], "v2sabcdefghijklmnopqrst");
    CHECK(strncmp(names[4], "v2h", 3) == 0);
}

int main(void)
{
    if (!v2t_setup())
        return 1;
    RUN(sequence_decode_equals_stateless);
    RUN(sequence_rules);
    RUN(a_refused_end_keeps_the_sequence);
    RUN(sequence_yarn_truncate);
    RUN(sequences_are_named_sessions_that_outlive_a_restart);
    RUN(sequence_ids_are_uint64_exactly);
    RUN(an_empty_sequence_id_is_no_sequence);
    RUN(sequence_names);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
