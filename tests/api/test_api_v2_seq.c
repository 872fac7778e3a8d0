/*
 * tests/api/test_api_v2_seq.c — what an OIP v2 sequence's later requests
 * may say about the settings its sequence_start fixed, in-process: a
 * repeat of the same value is accepted and answers as leaving it out, bit
 * for bit; another value is refused (400) naming the parameter and the
 * sequence's value; a window at sequence_start makes a rolling session
 * that answers as /v1's rolling session with that window (bit for bit,
 * and GET /v1/sessions shows its window); kv_dtype at sequence_start
 * stores the cache as /v1's kv_dtype does.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/internal.h"
#include "core/store.h"

#define INFER "/v2/models/attention/infer"

static struct api_ctx ctx;

/* One request; the parsed answer (new reference) and its status. */
static json_t *post(const char *method, const char *path, const char *body, int *status)
{
    struct api_response r;
    json_t *j;

    t_call(&ctx, method, path, body, &r);
    *status = r.status;
    if (r.status >= 300 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    j = t_json(&r);
    api_response_free(&r);
    return j;
}

/* ---- bodies ----------------------------------------------------------------- */

/* Values of X [heads][T][d], rows [r0, r1): flat (v2 "data") or nested
 * [heads][rows][d] (/v1). */
static void put_rows(struct t_body *b, const double *X, size_t heads, size_t T, size_t d,
                     size_t r0, size_t r1, bool nested)
{
    char num[40];

    for (size_t g = 0; g < heads; g++) {
        t_body_puts(b, g ? "," : "");
        t_body_puts(b, nested ? "[" : "");
        for (size_t r = r0; r < r1; r++) {
            t_body_puts(b, r > r0 ? "," : "");
            t_body_puts(b, nested ? "[" : "");
            for (size_t j = 0; j < d; j++) {
                snprintf(num, sizeof num, "%s%.17g", j ? "," : "", X[(g * T + r) * d + j]);
                t_body_puts(b, num);
            }
            t_body_puts(b, nested ? "]" : "");
        }
        t_body_puts(b, nested ? "]" : "");
    }
}

/* A v2 input named name of rows [r0, r1) of X. */
static void put_input(struct t_body *b, const char *name, const char *dt, const double *X,
                      size_t heads, size_t T, size_t d, size_t r0, size_t r1)
{
    char head[160];

    snprintf(head, sizeof head, "{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%zu,%zu,%zu],"
             "\"data\":[", name, dt, heads, r1 - r0, d);
    t_body_puts(b, head);
    put_rows(b, X, heads, T, d, r0, r1, false);
    t_body_puts(b, "]}");
}

/* Random q [H][T][D], k and v [HKV][T][D] of one model, float32-exact. */
#define H 2
#define HKV 1
#define D 4
#define T 200
static double Q[H * T * D], K[HKV * T * D], V[HKV * T * D];

static void fill(void)
{
    uint64_t st = 12345;
    float *f = t_values(&st, (H + 2 * HKV) * T * D);

    for (size_t i = 0; i < H * T * D; i++)
        Q[i] = 2 * f[i];
    for (size_t i = 0; i < HKV * T * D; i++) {
        K[i] = 2 * f[H * T * D + i];
        V[i] = f[(H + HKV) * T * D + i];
    }
    free(f);
}

/* A v2 request of sequence seq: parameters params (members, may be ""),
 * query rows [q0, q1), key rows [k0, k1) (none when k0 == k1), datatype
 * dt, extra inputs more (",{...}" or ""), outputs weights and output. */
static json_t *v2_step(const char *seq, const char *params, size_t q0, size_t q1, size_t k0,
                       size_t k1, const char *dt, const char *more, int *status)
{
    struct t_body b = {0};
    json_t *j;

    t_body_puts(&b, "{\"parameters\":{\"sequence_id\":\"");
    t_body_puts(&b, seq);
    t_body_puts(&b, *params ? "\"," : "\"");
    t_body_puts(&b, params);
    t_body_puts(&b, "},\"outputs\":[{\"name\":\"weights\"},{\"name\":\"output\"}],\"inputs\":[");
    put_input(&b, "q", dt, Q, H, T, D, q0, q1);
    if (k1 > k0) {
        t_body_puts(&b, ",");
        put_input(&b, "k", dt, K, HKV, T, D, k0, k1);
        t_body_puts(&b, ",");
        put_input(&b, "v", dt, V, HKV, T, D, k0, k1);
    }
    t_body_puts(&b, more);
    t_body_puts(&b, "]}");
    j = post("POST", INFER, b.p, status);
    free(b.p);
    return j;
}

/* The same step on the /v1 session sid (opts: members, may be ""). */
static json_t *v1_step(const char *sid, const char *opts, size_t q0, size_t q1, size_t k0,
                       size_t k1, int *status)
{
    struct t_body b = {0};
    char path[128];
    json_t *j;

    t_body_puts(&b, "{\"return\":[\"weights\",\"output\"],\"q\":[");
    put_rows(&b, Q, H, T, D, q0, q1, true);
    t_body_puts(&b, "]");
    if (k1 > k0) {
        t_body_puts(&b, ",\"k\":[");
        put_rows(&b, K, HKV, T, D, k0, k1, true);
        t_body_puts(&b, "],\"v\":[");
        put_rows(&b, V, HKV, T, D, k0, k1, true);
        t_body_puts(&b, "]");
    }
    t_body_puts(&b, *opts ? "," : "");
    t_body_puts(&b, opts);
    t_body_puts(&b, "}");
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", sid);
    j = post("POST", path, b.p, status);
    free(b.p);
    return j;
}

/* ---- answers ---------------------------------------------------------------- */

static json_t *v2_out(json_t *resp, const char *name)
{
    json_t *outs = json_object_get(resp, "outputs");

    for (size_t i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        if (strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
            return json_object_get(o, "data");
    }
    return NULL;
}

/* The numbers of a (nested) array in order into out[cap]; their count. */
static size_t flatten(const json_t *a, double *out, size_t cap, size_t at)
{
    if (json_is_number(a)) {
        if (at < cap)
            out[at] = json_number_value(a);
        return at + 1;
    }
    for (size_t i = 0; i < json_array_size(a); i++)
        at = flatten(json_array_get(a, i), out, cap, at);
    return at;
}

/* Whether two arrays hold the same numbers, bit for bit (each printed as
 * its shortest round-trip text), in the same order. */
static bool same_numbers(const json_t *a, const json_t *b)
{
    static double x[1 << 16], y[1 << 16];
    size_t n = flatten(a, x, 1 << 16, 0), m = flatten(b, y, 1 << 16, 0);

    if (n != m || n == 0 || n > (1 << 16))
        return false;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof x[i]) != 0)
            return false;
    return true;
}

/* The v2 answer a equals the /v1 answer b (weights and output). */
static bool same_answer(json_t *a, json_t *b)
{
    return same_numbers(v2_out(a, "weights"), json_object_get(b, "weights")) &&
           same_numbers(v2_out(a, "output"), json_object_get(b, "output"));
}

static const char *err_text(json_t *j)
{
    const char *e = json_string_value(json_object_get(j, "error"));
    return e ? e : "";
}

/* A 400 whose message has every one of want[] (NULL-terminated). */
static void check_refused(json_t *j, int status, const char *const *want)
{
    CHECK_EQ_INT(status, 400);
    for (; *want; want++)
        if (!strstr(err_text(j), *want)) {
            th_cur_failed = 1;
            printf("  error \"%s\" lacks \"%s\"\n", err_text(j), *want);
        }
}

static const char *session_of(json_t *v2resp)
{
    return json_string_value(json_object_get(json_object_get(v2resp, "parameters"),
                                             "session_id"));
}

/* ---- tests ------------------------------------------------------------------ */

/* Every fixed setting at once: the start's parameters and inputs. */
#define FIXED "\"causal\":true,\"scale\":0.25,\"softcap\":5,\"softmax\":\"sink\"," \
    "\"sink_logit\":0.5,\"alibi\":true,\"rope_base\":100,\"rope_pairs\":\"half\","    \
    "\"rope_scaling\":\"yarn\",\"rope_factor\":4,\"rope_original_max_position\":64," \
    "\"rope_truncate\":false,\"kv_dtype\":\"float32\""
#define BIAS_K ",{\"name\":\"bias_k\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[0.5,0,-1,0.25]}"

/* A later request may repeat every fixed setting with the sequence's
 * value (an explicit default scale too), and answers as one that leaves
 * them out, bit for bit. */
TEST(repeat_same_value_is_accepted)
{
    int st;
    json_t *a, *b, *c, *d;

    a = v2_step("rep-omit", "\"sequence_start\":true," FIXED, 0, 20, 0, 20, "FP32", BIAS_K, &st);
    CHECK_EQ_INT(st, 200);
    json_decref(a);
    a = v2_step("rep-same", "\"sequence_start\":true," FIXED, 0, 20, 0, 20, "FP32", BIAS_K, &st);
    CHECK_EQ_INT(st, 200);
    json_decref(a);
    for (size_t t = 20; t < 24; t++) {
        a = v2_step("rep-omit", "\"causal\":true", t, t + 1, t, t + 1, "FP32", "", &st);
        CHECK_EQ_INT(st, 200);
        b = v2_step("rep-same", FIXED, t, t + 1, t, t + 1, "FP32", BIAS_K, &st);
        CHECK_EQ_INT(st, 200);
        CHECK(same_numbers(v2_out(a, "output"), v2_out(b, "output")));
        CHECK(same_numbers(v2_out(a, "weights"), v2_out(b, "weights")));
        json_decref(a);
        json_decref(b);
    }
    /* the default scale 1/sqrt(d_k) = 0.5, sent later, is the default */
    c = v2_step("rep-dflt", "\"sequence_start\":true", 0, 3, 0, 3, "FP64", "", &st);
    CHECK_EQ_INT(st, 200);
    d = v2_step("rep-dflt", "\"scale\":0.5,\"softmax\":\"standard\",\"alibi\":false,"
                "\"sequence_end\":true", 3, 4, 3, 4, "FP64", "", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(c);
    json_decref(d);
    /* rope_dims 0 at the start is no RoPE; repeating it is the same */
    c = v2_step("rep-nope", "\"sequence_start\":true,\"rope_dims\":0", 0, 3, 0, 3, "FP64", "",
                &st);
    CHECK_EQ_INT(st, 200);
    d = v2_step("rep-nope", "\"rope_dims\":0,\"sequence_end\":true", 3, 4, 3, 4, "FP64", "", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(c);
    json_decref(d);
}

/* Another value is refused at the parameter, naming the sequence's value,
 * and leaves the sequence as it was. */
TEST(repeat_other_value_is_refused)
{
    static const struct { const char *params, *want[3]; } bad[] = {
        {"\"scale\":0.3", {"/parameters/scale", "0.25", NULL}},
        {"\"softcap\":6", {"/parameters/softcap", "is 5", NULL}},
        {"\"softmax\":\"standard\"", {"/parameters/softmax", "\"sink\"", NULL}},
        {"\"softmax\":\"sink\",\"sink_logit\":1", {"/parameters/sink_logit", "0.5", NULL}},
        {"\"alibi\":false", {"/parameters/alibi", "slopes", NULL}},
        {"\"rope_base\":200,\"rope_pairs\":\"half\"", {"/parameters/rope_base", "100", NULL}},
        {"\"rope_base\":100", {"/parameters/rope_pairs", "\"half\"", NULL}},
        {"\"rope_base\":100,\"rope_pairs\":\"half\",\"rope_scaling\":\"yarn\","
         "\"rope_factor\":4,\"rope_original_max_position\":64",
         {"/parameters/rope_truncate", "false", NULL}},
        {"\"kv_dtype\":\"float16\"", {"/parameters/kv_dtype", "\"float32\"", NULL}},
        /* dims 0 rotates nothing: not this sequence's 4 dims */
        {"\"rope_base\":100,\"rope_pairs\":\"half\",\"rope_scaling\":\"yarn\","
         "\"rope_factor\":4,\"rope_original_max_position\":64,\"rope_truncate\":false,"
         "\"rope_dims\":0", {"/parameters/rope_dims", "is 4", NULL}},
    };
    int st;
    json_t *j;

    j = v2_step("other", "\"sequence_start\":true," FIXED, 0, 20, 0, 20, "FP32", BIAS_K, &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = v2_step("other", bad[i].params, 20, 21, 20, 21, "FP32", "", &st);
        check_refused(j, st, bad[i].want);
        json_decref(j);
    }
    j = v2_step("other", "", 20, 21, 20, 21, "FP32",
                ",{\"name\":\"bias_k\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[0,0,0,0]}",
                &st);
    check_refused(j, st, (const char *const[]){"/inputs/3", "bias_k", NULL});
    json_decref(j);
    /* nothing was appended by the refused requests */
    j = v2_step("other", "\"sequence_end\":true", 20, 21, 0, 0, "FP32", "", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "parameters"),
                                                    "sequence_length")), 20);
    json_decref(j);
}

/* A /v1 session made from spec; its id into sid. */
static void v1_create(const char *spec, char *sid)
{
    int st;
    json_t *j = post("POST", "/v1/sessions", spec, &st);

    CHECK_EQ_INT(st, 201);
    snprintf(sid, SESS_ID_MAX, "%s", j ? json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
}

/* GET /v1/sessions/<id> (new reference). */
static json_t *get_session(const char *id)
{
    char path[160];
    int st;
    json_t *j;

    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    j = post("GET", path, NULL, &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

/* The v2 sequence seq, started with the parameters start, and the new /v1
 * session sid, made with the same settings, fed the same rows: a prefill
 * of rows [0, prefill) (/v1 with v1first), then `step` rows a request up
 * to T, every other later v2 request sending repeat, the others nothing.
 * Every answer must be the same, bit for bit. The sequence's session id
 * into v2sid. */
static void run_twins(const char *seq, const char *start, const char *repeat, const char *sid,
                      const char *v1first, size_t prefill, size_t step, const char *dt,
                      char *v2sid)
{
    int st, st1;
    json_t *a, *b;
    size_t t = 0, e = prefill;

    *v2sid = '\0';
    while (t < T) {
        a = v2_step(seq, t == 0 ? start : (t / step) % 2 ? repeat : "", t, e, t, e, dt, "", &st);
        b = v1_step(sid, t == 0 ? v1first : "", t, e, t, e, &st1);
        CHECK_EQ_INT(st, 200);
        CHECK_EQ_INT(st1, 200);
        if (!same_answer(a, b)) {
            th_cur_failed = 1;
            printf("  %s: rows %zu..%zu differ from the /v1 session\n", seq, t, e);
        }
        if (session_of(a))
            snprintf(v2sid, SESS_ID_MAX, "%s", session_of(a));
        json_decref(a);
        json_decref(b);
        t = e;
        e = t + step < T ? t + step : T;
    }
}

/* A window at sequence_start makes a rolling session: later requests
 * without it answer as the /v1 rolling session with the same window, bit
 * for bit, through rows let go (weights have one column per held row), and
 * GET /v1/sessions shows its window and held rows. The same window may be
 * repeated; another one, or a window at the start that cannot roll, is
 * refused as /v1 refuses it. */
TEST(window_at_start_rolls_as_v1)
{
    int st, st1;
    json_t *a, *b, *g1, *g2;
    char sid[SESS_ID_MAX], v2sid[SESS_ID_MAX];

    v1_create("{\"d_k\":4,\"d_v\":4,\"heads\":2,\"kv_heads\":1,\"rope\":{\"base\":100},"
              "\"window\":{\"left\":5,\"sinks\":2}}", sid);
    run_twins("roll", "\"sequence_start\":true,\"causal\":true,\"rope_base\":100,"
              "\"window_left\":5,\"window_sinks\":2", "\"window_left\":5,\"window_sinks\":2,"
              "\"causal\":true", sid, "", 130, 7, "FP64", v2sid);
    g2 = get_session(v2sid);
    g1 = get_session(sid);
    CHECK(json_equal(json_object_get(g2, "window"), json_object_get(g1, "window")));
    CHECK(json_equal(json_object_get(g2, "held"), json_object_get(g1, "held")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(g2, "window"), "left")), 5);
    CHECK(json_array_size(json_object_get(g2, "held")) == 2);   /* rows were let go */
    json_decref(g1);
    json_decref(g2);
    /* its sequence_length counts every row appended, as GET's length does,
     * not the rows held */
    a = v2_step("roll", "", T - 1, T, T - 1, T, "FP64", "", &st);
    CHECK_EQ_INT(st, 200);
    g2 = get_session(v2sid);
    CHECK_EQ_INT(json_integer_value(json_object_get(g2, "length")), T + 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(a, "parameters"),
                                                    "sequence_length")), T + 1);
    json_decref(g2);
    json_decref(a);
    /* another window, causal false, or a query reaching past the held rows */
    a = v2_step("roll", "\"window_left\":6", 0, 1, 0, 0, "FP64", "", &st);
    check_refused(a, st, (const char *const[]){"/parameters/window_left", "window_left 5", NULL});
    json_decref(a);
    a = v2_step("roll", "\"window_left\":5,\"window_sinks\":2,\"window_right\":0", 0, 1, 0, 0,
                "FP64", "", &st);
    check_refused(a, st, (const char *const[]){"/parameters/window_right", NULL});
    json_decref(a);
    a = v2_step("roll", "\"causal\":false", 0, 1, 0, 0, "FP64", "", &st);
    check_refused(a, st, (const char *const[]){"/parameters/causal", NULL});
    json_decref(a);
    a = v2_step("roll", "", 0, 100, 0, 0, "FP64", "", &st);
    check_refused(a, st, (const char *const[]){"length_conflict", "/inputs/0", NULL});
    json_decref(a);
    /* at the start: as /v1's create */
    a = v2_step("roll-r", "\"sequence_start\":true,\"window_left\":5,\"window_right\":1",
                0, 3, 0, 3, "FP64", "", &st);
    check_refused(a, st, (const char *const[]){"/parameters/window_right", NULL});
    json_decref(a);
    a = v2_step("roll-s", "\"sequence_start\":true,\"window_sinks\":1", 0, 3, 0, 3, "FP64", "",
                &st);
    check_refused(a, st, (const char *const[]){"/parameters/window_left", NULL});
    json_decref(a);
    /* a sequence without a window takes one per request, as a /v1 session */
    v1_create("{\"d_k\":4,\"d_v\":4,\"heads\":2,\"kv_heads\":1}", sid);
    a = v2_step("nowin", "\"sequence_start\":true", 0, 10, 0, 10, "FP64", "", &st);
    b = v1_step(sid, "", 0, 10, 0, 10, &st1);
    json_decref(a);
    json_decref(b);
    a = v2_step("nowin", "\"window_left\":2,\"causal\":true", 10, 12, 10, 12, "FP64", "", &st);
    b = v1_step(sid, "\"window\":{\"left\":2},\"causal\":true", 10, 12, 10, 12, &st1);
    CHECK(st == 200 && st1 == 200 && same_answer(a, b));
    json_decref(a);
    json_decref(b);
}

/* A setting repeated in part stands for the sequence's: window_sinks
 * alone on a rolling sequence, "sink" without its logits (the sequence's
 * stand); each answers as leaving it out does. A part that differs is
 * refused at itself. */
TEST(bare_repeats_take_the_sequences)
{
    static const struct {
        const char *start, *repeat, *other, *where;
    } cases[] = {
        {"\"causal\":true,\"window_left\":5,\"window_sinks\":2", "\"window_sinks\":2",
         "\"window_sinks\":3", "/parameters/window_sinks"},
        {"\"softmax\":\"sink\",\"sink_logit\":0.25", "\"softmax\":\"sink\"",
         "\"softmax\":\"sink\",\"sink_logit\":0.5", "/parameters/sink_logit"},
    };
    char start[160], omit[16], bare[16];
    int st, st2;

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(omit, sizeof omit, "omit-%zu", i);
        snprintf(bare, sizeof bare, "bare-%zu", i);
        snprintf(start, sizeof start, "\"sequence_start\":true,%s", cases[i].start);
        json_t *a = v2_step(omit, start, 0, 3, 0, 3, "FP64", "", &st);
        json_t *b = v2_step(bare, start, 0, 3, 0, 3, "FP64", "", &st2);
        CHECK(st == 200 && st2 == 200);
        json_decref(a);
        json_decref(b);
        a = v2_step(omit, "", 3, 4, 3, 4, "FP64", "", &st);
        b = v2_step(bare, cases[i].repeat, 3, 4, 3, 4, "FP64", "", &st2);
        CHECK_EQ_INT(st, 200);
        CHECK_EQ_INT(st2, 200);
        CHECK(same_numbers(v2_out(a, "weights"), v2_out(b, "weights")));
        CHECK(same_numbers(v2_out(a, "output"), v2_out(b, "output")));
        json_decref(a);
        json_decref(b);
        a = v2_step(bare, cases[i].other, 4, 5, 4, 5, "FP64", "", &st);
        check_refused(a, st, (const char *const[]){cases[i].where, NULL});
        json_decref(a);
    }
}

/* kv_dtype at sequence_start stores the cache as /v1's kv_dtype does:
 * float16 rows give the /v1 float16 session's answers, bit for bit, and
 * GET shows it; a float64 sequence and a request without a sequence are
 * refused; a k past the float16 range is refused saying so. */
TEST(kv_dtype_at_start_as_v1)
{
    int st;
    json_t *a, *g;
    char sid[SESS_ID_MAX], v2sid[SESS_ID_MAX];

    v1_create("{\"d_k\":4,\"d_v\":4,\"heads\":2,\"kv_heads\":1,\"dtype\":\"float32\","
              "\"kv_dtype\":\"float16\",\"rope\":{\"base\":100}}", sid);
    run_twins("kv16", "\"sequence_start\":true,\"causal\":true,\"rope_base\":100,"
              "\"kv_dtype\":\"float16\"", "\"kv_dtype\":\"float16\"", sid, "\"causal\":true",
              12, 47, "FP32", v2sid);
    g = get_session(v2sid);
    CHECK_STR(json_string_value(json_object_get(g, "kv_dtype")), "float16");
    json_decref(g);
    a = v2_step("kv64", "\"sequence_start\":true,\"kv_dtype\":\"float16\"", 0, 2, 0, 2, "FP64",
                "", &st);
    check_refused(a, st, (const char *const[]){"/parameters/kv_dtype", "float64", NULL});
    json_decref(a);
    a = post("POST", INFER, "{\"parameters\":{\"kv_dtype\":\"float16\"},\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"
             "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"
             "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    check_refused(a, st, (const char *const[]){"/parameters/kv_dtype", "sequence", NULL});
    json_decref(a);
    /* a k past float16's range is the rows' fault, not only q·k's */
    a = post("POST", INFER, "{\"parameters\":{\"sequence_id\":\"kv16big\",\"sequence_start\":"
             "true,\"kv_dtype\":\"float16\"},\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"
             "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1e6,0]},"
             "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]}]}", &st);
    check_refused(a, st, (const char *const[]){"outside the float16 range its cache stores",
                                               "[non_finite]", NULL});
    json_decref(a);
}

int main(void)
{
    struct sess_config cfg = {.max_sessions = 32, .max_cache_bytes = 8 << 20,
                              .default_ttl_s = 600, .default_max_tokens = 1024};

    t_ctx_init(&ctx);
    ctx.store = sess_store_new(&cfg);
    if (!ctx.store) {
        printf("no store\n0 passed, 1 failed\n");
        return 1;
    }
    fill();
    RUN(repeat_same_value_is_accepted);
    RUN(repeat_other_value_is_refused);
    RUN(window_at_start_rolls_as_v1);
    RUN(bare_repeats_take_the_sequences);
    RUN(kv_dtype_at_start_as_v1);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
