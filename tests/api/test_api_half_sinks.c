/*
 * tests/api/test_api_half_sinks.c — the sink logits of a float16 or
 * bfloat16 request are rounded to its format, as its q, k and v are: on
 * /v1/attention, sessions, /v1/verify and OIP v2, a request with the sink
 * logit as typed answers exactly what the same request with the logit's
 * rounded value answers. The scores here sit near 50 so that a sink moved
 * by the rounding moves every weight by more than the format's last digit
 * (the equalities fail where the logit is used unrounded). A text whose
 * double is a midpoint rounds by the text; an overflow is 422 non_finite
 * at the element.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "core/half.h"
#include "core/store.h"

static struct api_ctx ctx;

/* q, k, v: every score q.k/sqrt(4) = 50; v rows apart. */
#define Q "[[[5,5,5,5],[5,5,5,4.5]],[[5,5,5,5],[5,5,4.5,5]]]"
#define K "[[[5,5,5,5],[5,5,5,5],[5,5,5,5]]]"
#define V "[[[1,0,0,0],[0,1,0,0],[0,0,1,0]]]"

static const char *dtname(bool f16)
{
    return f16 ? "float16" : "bfloat16";
}

/* The shortest decimal text of x rounded to the format. */
static void rounded_text(char *out, size_t cap, double x, bool f16)
{
    float f = f16 ? half_f16_to_f32(half_f16_from_f64(x)) : half_bf16_to_f32(half_bf16_from_f64(x));
    snprintf(out, cap, "%.9g", (double)f);
}

/* The answer to body on path, its status in *status, its elapsed time and
 * session ids dropped. */
static json_t *answer(const char *path, const char *body, int *status)
{
    struct api_response r;
    t_call(&ctx, "POST", path, body, &r);
    *status = r.status;
    json_t *j = t_json(&r);
    api_response_free(&r);
    json_object_del(json_object_get(j, "meta"), "elapsed_us");
    json_object_del(j, "elapsed_us");
    json_object_del(j, "id");
    json_object_del(j, "session");
    return j;
}

static json_t *attention(bool f16, const char *sink)
{
    char b[1024];
    int st;
    snprintf(b, sizeof b, "{\"dtype\":\"%s\",\"softmax\":\"sink\",\"sink_logit\":%s,"
             "\"q\":" Q ",\"k\":" K ",\"v\":" V ",\"return\":[\"weights\",\"output\"]}",
             dtname(f16), sink);
    json_t *j = answer("/v1/attention", b, &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

/* A session made with the sink, then one query that appends k, v. */
static json_t *session(bool f16, const char *sink)
{
    char b[1024], path[128];
    struct api_response r;
    snprintf(b, sizeof b, "{\"d_k\":4,\"d_v\":4,\"heads\":2,\"kv_heads\":1,\"dtype\":\"%s\","
             "\"softmax\":\"sink\",\"sink_logit\":%s}", dtname(f16), sink);
    t_call(&ctx, "POST", "/v1/sessions", b, &r);
    CHECK_EQ_INT(r.status, 201);
    json_t *made = t_json(&r);
    api_response_free(&r);
    snprintf(path, sizeof path, "/v1/sessions/%s/attention",
             json_string_value(json_object_get(made, "id")));
    json_decref(made);
    int st;
    json_t *j = answer(path, "{\"q\":" Q ",\"k\":" K ",\"v\":" V
                       ",\"return\":[\"weights\",\"output\"]}", &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

static json_t *verify(bool f16, const char *sink)
{
    char b[1024];
    int st;
    snprintf(b, sizeof b, "{\"dtype\":\"%s\",\"softmax\":\"sink\",\"sink_logit\":%s,"
             "\"q\":" Q ",\"k\":" K ",\"v\":" V "}", dtname(f16), sink);
    json_t *j = answer("/v1/verify", b, &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

/* OIP v2 with the sink as the parameter (a number) or the input (a list). */
static json_t *v2(bool f16, const char *sink)
{
    static const char qd[] = "[5,5,5,5,5,5,5,4.5,5,5,5,5,5,5,4.5,5]";
    static const char kd[] = "[5,5,5,5,5,5,5,5,5,5,5,5]";
    static const char vd[] = "[1,0,0,0,0,1,0,0,0,0,1,0]";
    const char *dt = f16 ? "FP16" : "BF16";
    char b[2048], param[128] = "", input[256] = "";
    int st;
    if (sink[0] == '[')
        snprintf(input, sizeof input, ",{\"name\":\"sink_logits\",\"datatype\":\"FP32\","
                 "\"shape\":[2],\"data\":%s}", sink);
    else
        snprintf(param, sizeof param, ",\"sink_logit\":%s", sink);
    snprintf(b, sizeof b, "{\"parameters\":{\"softmax\":\"sink\"%s},\"inputs\":["
             "{\"name\":\"q\",\"datatype\":\"%s\",\"shape\":[2,2,4],\"data\":%s},"
             "{\"name\":\"k\",\"datatype\":\"%s\",\"shape\":[1,3,4],\"data\":%s},"
             "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[1,3,4],\"data\":%s}%s],"
             "\"outputs\":[{\"name\":\"weights\"},{\"name\":\"output\"}]}",
             param, dt, qd, dt, kd, dt, vd, input);
    json_t *j = answer("/v2/models/attention/infer", b, &st);
    CHECK_EQ_INT(st, 200);
    return j;
}

typedef json_t *(*route_fn)(bool f16, const char *sink);

static bool same(route_fn f, bool f16, const char *a, const char *b)
{
    json_t *ja = f(f16, a), *jb = f(f16, b);
    bool eq = ja && jb && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return eq;
}

static const struct {
    const char *name;
    route_fn fn;
    bool list;                      /* the route also takes one per head */
    bool scalar;                    /* ... and one number */
} routes[] = {
    {"attention", attention, true, true},
    {"session", session, true, true},
    {"verify", verify, false, true},
    {"v2", v2, true, true},
};

/* 50.3 and -0.7654321 as typed equal their rounded values. */
TEST(sinks_answer_as_their_rounded_values)
{
    for (int f16 = 0; f16 < 2; f16++) {
        char r1[32], r2[32], lr[80];
        rounded_text(r1, sizeof r1, 50.3, f16);
        rounded_text(r2, sizeof r2, 49.7654321, f16);
        snprintf(lr, sizeof lr, "[%s,%s]", r1, r2);
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
            bool ok = same(routes[i].fn, f16, "50.3", r1);
            CHECK(ok);
            if (!ok)
                printf("  %s %s: a number\n", routes[i].name, dtname(f16));
            if (!routes[i].list)
                continue;
            ok = same(routes[i].fn, f16, "[50.3,49.7654321]", lr);
            CHECK(ok);
            if (!ok)
                printf("  %s %s: one per head\n", routes[i].name, dtname(f16));
        }
    }
}

/* A float32 request keeps the sink as typed (and, above, the rounded
 * sink is far enough from 50.3 to show in every route's weights: the
 * equalities fail without the rounding). */
TEST(float32_keeps_the_sink_as_typed)
{
    int sa, sb;
#define F32(s) "{\"dtype\":\"float32\",\"softmax\":\"sink\",\"sink_logit\":" s \
                   ",\"q\":" Q ",\"k\":" K ",\"v\":" V ",\"return\":[\"weights\"]}"
    json_t *ja = answer("/v1/attention", F32("50.3"), &sa);
    json_t *jb = answer("/v1/attention", F32("50.25"), &sb);
    CHECK_EQ_INT(sa, 200);
    CHECK_EQ_INT(sb, 200);
    CHECK(ja && jb && !json_equal(ja, jb));
    json_decref(ja);
    json_decref(jb);
}

/* bfloat16 steps by 0.25 at 50: 50.125 is a midpoint. Its exact text ties
 * to even (50); a text past it whose double is the midpoint goes up. */
TEST(midpoints_round_by_the_text)
{
    const char *above = "50.1250000000000000001";
    CHECK(strtod(above, NULL) == 50.125);
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        if (routes[i].fn == v2)     /* its sink_logits input is binary FP32 */
            continue;
        CHECK(same(routes[i].fn, false, "50.125", "50"));
        CHECK(same(routes[i].fn, false, above, "50.25"));
        if (routes[i].list)
            CHECK(same(routes[i].fn, false, "[1,50.1250000000000000001]", "[1,50.25]"));
    }
    CHECK(same(v2, false, above, "50.25"));
}

static void check_refused(const char *path, const char *body, const char *where)
{
    struct api_response r;
    t_call(&ctx, "POST", path, body, &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "non_finite");
    CHECK_STR(t_err_path(&r), where);
    api_response_free(&r);
}

/* The text decides under a key spelt with escapes too ("\u0071" is "q"):
 * the body is found by the key as jansson reads it. */
TEST(midpoints_round_by_the_text_under_escaped_keys)
{
    const char *above = "50.1250000000000000001";
    char b[1024];
    int sa, sb;
#define ESC(sink) "{\"dtype\":\"bfloat16\",\"softmax\":\"sink\",\"\\u0073ink_logit\":" sink \
                  ",\"q\":" Q ",\"k\":" K ",\"v\":" V ",\"return\":[\"weights\"]}"
    snprintf(b, sizeof b, ESC("%s"), above);
    json_t *ja = answer("/v1/attention", b, &sa);
    json_t *jb = answer("/v1/attention", ESC("50.25"), &sb);
    CHECK_EQ_INT(sa, 200);
    CHECK_EQ_INT(sb, 200);
    CHECK(ja && jb && json_equal(ja, jb));
    json_decref(ja);
    json_decref(jb);
#undef ESC
    /* 65520 is float16's midpoint past 65504: it ties to even, which overflows */
    check_refused("/v1/attention", "{\"dtype\":\"float16\",\"\\u0071\":[[1,65520]],"
                  "\"k\":[[1,0]],\"v\":[[1]]}", "/q/0/1");
    check_refused("/v1/attention", "{\"dtype\":\"float16\",\"q\":[[1,0]],\"k\":[[1,0]],"
                  "\"v\":[[1]],\"\\u0062i\\u0061s\":{\"\\u006B\":[65520,0]}}", "/bias/k/0");
    check_refused("/v1/verify", "{\"dtype\":\"float16\",\"\\u0071\":[[1,65520]],"
                  "\"k\":[[1,0]],\"v\":[[1]]}", "/q/0/1");
}

/* OIP v2 errors are {"error": text}, the code and pointer in brackets. */
static void check_refused_v2(const char *body, const char *where)
{
    struct api_response r;
    char want[96];
    t_call(&ctx, "POST", "/v2/models/attention/infer", body, &r);
    CHECK_EQ_INT(r.status, 400);
    json_t *j = t_json(&r);
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(want, sizeof want, "[non_finite at %s]", where);
    CHECK(e && strstr(e, want));
    json_decref(j);
    api_response_free(&r);
}

/* 70000 is past float16's 65504: refused at the number. */
TEST(an_overflowing_sink_is_refused_at_its_place)
{
    check_refused("/v1/attention", "{\"dtype\":\"float16\",\"softmax\":\"sink\","
                  "\"sink_logit\":70000,\"q\":[[1]],\"k\":[[1]],\"v\":[[1]]}", "/sink_logit");
    check_refused("/v1/attention", "{\"dtype\":\"float16\",\"softmax\":\"sink\","
                  "\"sink_logit\":[0,70000],\"q\":[[[1]],[[1]]],\"k\":[[[1]]],\"v\":[[[1]]]}",
                  "/sink_logit/1");
    check_refused("/v1/sessions", "{\"d_k\":1,\"d_v\":1,\"dtype\":\"float16\","
                  "\"softmax\":\"sink\",\"sink_logit\":-70000}", "/sink_logit");
    check_refused("/v1/verify", "{\"dtype\":\"float16\",\"softmax\":\"sink\","
                  "\"sink_logit\":70000,\"q\":[[1]],\"k\":[[1]],\"v\":[[1]]}", "/sink_logit");
    check_refused_v2("{\"parameters\":{\"softmax\":\"sink\",\"sink_logit\":70000},"
                     "\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP16\",\"shape\":[1,1],"
                     "\"data\":[1]},{\"name\":\"k\",\"datatype\":\"FP16\",\"shape\":[1,1],"
                     "\"data\":[1]},{\"name\":\"v\",\"datatype\":\"FP16\",\"shape\":[1,1],"
                     "\"data\":[1]}]}", "/parameters/sink_logit");
    /* the same number is fine in bfloat16 and float32 */
    struct api_response r;
    t_call(&ctx, "POST", "/v1/attention", "{\"dtype\":\"bfloat16\",\"softmax\":\"sink\","
           "\"sink_logit\":70000,\"q\":[[1]],\"k\":[[1]],\"v\":[[1]]}", &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    t_ctx_init(&ctx);
    ctx.store = sess_store_new(&cfg);
    RUN(sinks_answer_as_their_rounded_values);
    RUN(float32_keeps_the_sink_as_typed);
    RUN(midpoints_round_by_the_text);
    RUN(an_overflowing_sink_is_refused_at_its_place);
    RUN(midpoints_round_by_the_text_under_escaped_keys);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
