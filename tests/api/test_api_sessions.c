/*
 * tests/api/test_api_sessions.c — every /v1/sessions endpoint and error,
 * in-process: create (201, Location, defaults, each invalid field), append
 * (expected_length 409, session_full 409, shapes 422, all or nothing), the
 * cached K/V after bias, attention through the session equal to the
 * stateless /v1/attention text for text, truncate, fork isolation, delete,
 * 404 for unknown ids, 405 with Allow, capacity 503 with Retry-After, a
 * rolling session's query refused where the rows it reaches were let go,
 * and its create where its window cannot fit --max-cache-bytes.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/store.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;
static char sid[128];

/* POST/GET path body; returns status, keeps the response in *r. */
static int req(const char *method, const char *path, const char *body,
               struct api_response *r)
{
    t_call(&ctx, method, path, body, r);
    return r->status;
}

/* Status only. */
static int st_of(const char *method, const char *path, const char *body)
{
    struct api_response r;
    int s = req(method, path, body, &r);
    api_response_free(&r);
    return s;
}

/* Create a session from body; its id into out (size 128). */
static int create(const char *body, char *out)
{
    struct api_response r;
    int s = req("POST", "/v1/sessions", body, &r);
    json_t *j = t_json(&r);
    const char *id = json_string_value(json_object_get(j, "id"));
    snprintf(out, 128, "%s", id ? id : "");
    json_decref(j);
    api_response_free(&r);
    return s;
}

static char path_buf[256];
static const char *P(const char *id, const char *suffix)
{
    snprintf(path_buf, sizeof path_buf, "/v1/sessions/%s%s", id, suffix);
    return path_buf;
}

/* Integer member of the JSON body of a GET /v1/sessions/{id}. */
static long long info_int(const char *id, const char *key)
{
    struct api_response r;
    req("GET", P(id, ""), NULL, &r);
    json_t *j = t_json(&r);
    long long v = r.status == 200 ? json_integer_value(json_object_get(j, key)) : -1;
    json_decref(j);
    api_response_free(&r);
    return v;
}

/* Check the error reply r has status, code and path. */
#define CHECK_ERR(r, want_status, want_code, want_path)                   \
    do {                                                                   \
        CHECK_EQ_INT((r)->status, want_status);                            \
        CHECK_STR(t_err_code(r), want_code);                               \
        CHECK_STR(t_err_path(r), want_path);                               \
    } while (0)

TEST(create_returns_201_location_and_object)
{
    struct api_response r;
    CHECK_EQ_INT(req("POST", "/v1/sessions", "{\"d_k\":2,\"d_v\":3}", &r), 201);
    CHECK_STR(r.route, "/v1/sessions");
    json_t *j = t_json(&r);
    const char *id = json_string_value(json_object_get(j, "id"));
    CHECK(id != NULL && strlen(id) == 22);
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/sessions/%s", id ? id : "");
    CHECK_STR(t_hdr(&r, "Location"), loc);
    {   /* no route below a session: unmatched, never /v1/sessions */
        struct api_response u;
        char nope[160];
        snprintf(nope, sizeof nope, "%s/nope", loc);
        CHECK_EQ_INT(req("GET", nope, NULL, &u), 404);
        CHECK_STR(u.route, "unmatched");
        api_response_free(&u);
    }
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "length")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "heads")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "kv_heads")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "d_k")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "d_v")), 3);
    CHECK_STR(json_string_value(json_object_get(j, "dtype")), "float64");
    CHECK_STR(json_string_value(json_object_get(j, "softmax")), "standard");
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "bytes")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "max_tokens")), 4096);
    CHECK_NEAR(json_number_value(json_object_get(j, "expires_in_s")), 600, 0.01);
    json_decref(j);
    api_response_free(&r);

    /* every option */
    CHECK_EQ_INT(create("{\"d_k\":4,\"d_v\":2,\"heads\":4,\"kv_heads\":2,"
                        "\"dtype\":\"float32\",\"softmax\":\"sink\",\"sink_logit\":1,"
                        "\"scale\":0.25,\"bias\":{\"q\":[1,2,3,4],\"k\":[[0,0,0,1],[1,0,0,0]],"
                        "\"v\":[1,1]},\"rope\":{\"base\":100,\"pairs\":\"half\"},"
                        "\"alibi\":true,\"max_tokens\":8,\"ttl_s\":5}", sid), 201);
    CHECK_EQ_INT(info_int(sid, "heads"), 4);
    CHECK_EQ_INT(info_int(sid, "max_tokens"), 8);
    req("GET", P(sid, ""), NULL, &r);
    CHECK_STR(r.route, "/v1/sessions/{id}");
    j = t_json(&r);
    CHECK_STR(json_string_value(json_object_get(j, "dtype")), "float32");
    CHECK_STR(json_string_value(json_object_get(j, "softmax")), "sink");
    CHECK_NEAR(json_number_value(json_object_get(j, "expires_in_s")), 5, 0.01);
    json_decref(j);
    api_response_free(&r);
}

TEST(create_errors_name_the_field)
{
    struct api_response r;
    static const struct { const char *body, *code, *path; } cases[] = {
        {"{\"d_k\":0,\"d_v\":3}", "invalid_field", "/d_k"},
        {"{\"d_k\":2}", "invalid_field", "/d_v"},
        {"{\"d_k\":2.5,\"d_v\":3}", "invalid_field", "/d_k"},
        {"{\"d_k\":\"2\",\"d_v\":3}", "invalid_field", "/d_k"},
        {"{\"d_k\":2,\"d_v\":3,\"nope\":1}", "invalid_field", "/nope"},
        {"{\"d_k\":2,\"d_v\":3,\"heads\":3,\"kv_heads\":2}", "shape_mismatch", "/kv_heads"},
        {"{\"d_k\":3,\"d_v\":3,\"rope\":true}", "invalid_field", "/rope"},
        {"{\"d_k\":2,\"d_v\":3,\"bias\":{\"k\":[1,2,3]}}", "shape_mismatch", "/bias/k"},
        {"{\"d_k\":2,\"d_v\":3,\"max_tokens\":5000}", "invalid_field", "/max_tokens"},
        {"{\"d_k\":2,\"d_v\":3,\"max_tokens\":0}", "invalid_field", "/max_tokens"},
        {"{\"d_k\":2,\"d_v\":3,\"ttl_s\":-1}", "invalid_field", "/ttl_s"},
        {"{\"d_k\":2,\"d_v\":3,\"scale\":0}", "invalid_field", "/scale"},
        {"{\"d_k\":2,\"d_v\":3,\"dtype\":\"int8\"}", "invalid_field", "/dtype"},
        {"{\"d_k\":2,\"d_v\":3,\"softmax\":\"sink\"}", "invalid_field", "/sink_logit"},
        {"{\"d_k\":2000000,\"d_v\":3}", "invalid_field", "/d_k"},
        /* float32 math (float32, float16, bfloat16) holds these as floats */
        {"{\"d_k\":2,\"d_v\":3,\"dtype\":\"float32\",\"scale\":1e39}", "invalid_field", "/scale"},
        {"{\"d_k\":2,\"d_v\":3,\"dtype\":\"float16\",\"softcap\":1e39}", "invalid_field",
         "/softcap"},
        {"{\"d_k\":2,\"d_v\":3,\"dtype\":\"float32\",\"softmax\":\"sink\",\"sink_logit\":-1e39}",
         "non_finite", "/sink_logit"},
        {"{\"d_k\":2,\"d_v\":3,\"heads\":2,\"dtype\":\"float32\",\"softmax\":\"sink\","
         "\"sink_logit\":[1,1e39]}", "non_finite", "/sink_logit/1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        req("POST", "/v1/sessions", cases[i].body, &r);
        CHECK_EQ_INT(r.status, 422);
        CHECK_STR(t_err_code(&r), cases[i].code);
        CHECK_STR(t_err_path(&r), cases[i].path);
        if (r.status != 422)
            printf("    case %zu: %.*s\n", i, (int)r.body_len, r.body);
        api_response_free(&r);
    }
    req("POST", "/v1/sessions", "{\"d_k\":2,", &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_STR(t_err_code(&r), "invalid_json");
    api_response_free(&r);
    req("GET", "/v1/sessions", NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "POST");
    api_response_free(&r);
}

TEST(append_get_kv_and_conflicts)
{
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":3,\"bias\":{\"k\":[10,20]},\"max_tokens\":4}", sid), 201);
    CHECK_EQ_INT(req("POST", P(sid, "/kv"),
                     "{\"k\":[[1,0],[0,1]],\"v\":[[1,0,0],[0,1,0]],\"expected_length\":0}", &r), 200);
    CHECK_STR(r.route, "/v1/sessions/{id}/kv");
    json_t *j = t_json(&r);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "length")), 2);
    CHECK(json_integer_value(json_object_get(j, "bytes")) >= 2 * 5 * 8);
    json_decref(j);
    api_response_free(&r);

    /* stored after bias */
    CHECK_EQ_INT(req("GET", P(sid, "/kv"), NULL, &r), 200);
    CHECK(r.body && strstr(r.body, "\"k\":[[11,20],[10,21]]") != NULL);
    CHECK(r.body && strstr(r.body, "\"v\":[[1,0,0],[0,1,0]]") != NULL);
    CHECK(r.body && strstr(r.body, "\"length\":2") != NULL);
    api_response_free(&r);

    req("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1,0,0]],\"expected_length\":5}", &r);
    CHECK_ERR(&r, 409, "length_conflict", "/expected_length");
    api_response_free(&r);
    /* 2^63 read as a real once wrapped to a negative "don't check" */
    req("POST", P(sid, "/kv"),
        "{\"k\":[[1,0]],\"v\":[[1,0,0]],\"expected_length\":9223372036854775808}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/expected_length");
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0,0]],\"v\":[[1,0,0]]}", &r);
    CHECK_ERR(&r, 422, "shape_mismatch", "/k");
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0]]}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/v");
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0],[1,1]],\"v\":[[1,0,0]]}", &r);
    CHECK_ERR(&r, 422, "shape_mismatch", "/v");
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1,0,\"x\"]]}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_path(&r), "/v/0/2");
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0],[1,0],[1,0]],\"v\":[[1,0,0],[1,0,0],[1,0,0]]}", &r);
    CHECK_ERR(&r, 409, "session_full", "(null)");
    const char *full = "the session holds 2 rows; 3 more would pass its max_tokens of 4";
    CHECK(r.body && memmem(r.body, r.body_len, full, strlen(full)) != NULL);
    api_response_free(&r);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1,0,0]],\"x\":1}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/x");
    api_response_free(&r);
    /* nothing of the refused requests landed */
    CHECK_EQ_INT(info_int(sid, "length"), 2);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1,0],[2,0]],\"v\":[[1,0,0],[2,0,0]],\"expected_length\":2}"), 200);
    CHECK_EQ_INT(info_int(sid, "length"), 4);
    CHECK_EQ_INT(st_of("PUT", P(sid, "/kv"), "{}"), 405);
}

TEST(multi_head_shapes)
{
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":1,\"heads\":2,\"kv_heads\":2}", sid), 201);
    req("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1]]}", &r);
    CHECK_ERR(&r, 422, "shape_mismatch", "/k");
    api_response_free(&r);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[[1,0]],[[0,1]]],\"v\":[[[1]],[[2]]]}"), 200);
    CHECK_EQ_INT(req("GET", P(sid, "/kv"), NULL, &r), 200);
    CHECK(r.body && strstr(r.body, "\"k\":[[[1,0]],[[0,1]]]") != NULL);
    CHECK(r.body && strstr(r.body, "\"v\":[[[1]],[[2]]]") != NULL);
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]]}", &r);
    CHECK_ERR(&r, 422, "shape_mismatch", "/q");
    api_response_free(&r);
    CHECK_EQ_INT(st_of("POST", P(sid, "/attention"), "{\"q\":[[[1,0]],[[0,1]]]}"), 200);
}

/* The session's answer for each decode step equals /v1/attention on the
 * whole K/V (bottom-right causal), as text: same bytes in float64. */
TEST(attention_equals_stateless_text)
{
    const char *opts = "\"heads\":2,\"kv_heads\":1,\"bias\":{\"q\":[0.5,-1],\"k\":[3,-2],\"v\":[1,2]},"
                       "\"rope\":{\"base\":10000},\"alibi\":true";
    char body[2048];
    snprintf(body, sizeof body, "{\"d_k\":2,\"d_v\":2,%s}", opts);
    CHECK_EQ_INT(create(body, sid), 201);
    const char *ks[] = {"[0.1,0.7]", "[-1.5,0.25]", "[2,1]", "[0.3,-0.9]"};
    const char *vs[] = {"[1,0]", "[0,1]", "[0.5,0.5]", "[-1,2]"};
    const char *qs[] = {"[[[1,0]],[[0,1]]]", "[[[0.2,0.3]],[[1,1]]]",
                        "[[[-1,0.5]],[[0.7,0.1]]]", "[[[0,2]],[[3,-1]]]"};
    char kall[512] = "", vall[512] = "";
    for (int step = 0; step < 4; step++) {
        struct api_response a, b;
        snprintf(body, sizeof body, "{\"q\":%s,\"k\":[[%s]],\"v\":[[%s]],\"causal\":true}",
                 qs[step], ks[step], vs[step]);
        CHECK_EQ_INT(req("POST", P(sid, "/attention"), body, &a), 200);
        CHECK_STR(a.route, "/v1/sessions/{id}/attention");
        size_t kl = strlen(kall), vl = strlen(vall);
        snprintf(kall + kl, sizeof kall - kl, "%s%s", step ? "," : "", ks[step]);
        snprintf(vall + vl, sizeof vall - vl, "%s%s", step ? "," : "", vs[step]);
        snprintf(body, sizeof body,
                 "{\"q\":%s,\"k\":[[%s]],\"v\":[[%s]],\"causal\":true,"
                 "\"bias\":{\"q\":[0.5,-1],\"k\":[3,-2],\"v\":[1,2]},"
                 "\"rope\":{\"base\":10000},\"alibi\":true}", qs[step], kall, vall);
        CHECK_EQ_INT(req("POST", "/v1/attention", body, &b), 200);
        /* compare everything before "elapsed_us" */
        const char *ea = a.body ? strstr(a.body, "\"elapsed_us\"") : NULL;
        const char *eb = b.body ? strstr(b.body, "\"elapsed_us\"") : NULL;
        CHECK(ea && eb && ea - a.body == eb - b.body &&
              memcmp(a.body, b.body, (size_t)(ea - a.body)) == 0);
        api_response_free(&a);
        api_response_free(&b);
    }
    CHECK_EQ_INT(info_int(sid, "length"), 4);
}

/* A member whose value is null counts as absent (README, Quick start), on
 * a session's attention as on /v1/attention: timeout_ms too. */
TEST(attention_null_members_are_absent)
{
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":2}", sid), 201);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1,0]]}"), 200);
    req("POST", P(sid, "/attention"),
        "{\"q\":[[1,0]],\"k\":null,\"v\":null,\"timeout_ms\":null,\"return\":null,"
        "\"digits\":null,\"causal\":null,\"mask\":null,\"attn_bias\":null,\"heads\":null,"
        "\"weights_top_k\":null,\"tokens\":null,\"window\":null,\"expected_length\":null}", &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body && strstr(r.body, "\"output\":[[1,0]]"));
    api_response_free(&r);
    CHECK_EQ_INT(info_int(sid, "length"), 1);
}

TEST(attention_errors_leave_cache_unchanged)
{
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":2}", sid), 201);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]]}", &r);
    CHECK_ERR(&r, 422, "empty_matrix", "/k");
    api_response_free(&r);
    /* the empty cache is at fault, not the attn_bias or mask that no
     * shape ([1][0]) could match */
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"attn_bias\":[[0]]}", &r);
    CHECK_ERR(&r, 422, "empty_matrix", "/k");
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"mask\":[[true]]}", &r);
    CHECK_ERR(&r, 422, "empty_matrix", "/k");
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"mask\":[[true]],\"expected_length\":3}",
        &r);
    CHECK_ERR(&r, 409, "length_conflict", "/expected_length");
    api_response_free(&r);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1,0]],\"v\":[[1,0]]}"), 200);
    /* attn_bias must cover the cache after the append: [1][2], not [1][1] */
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"k\":[[0,1]],\"v\":[[0,1]],\"attn_bias\":[[0]]}", &r);
    CHECK_ERR(&r, 422, "shape_mismatch", "/attn_bias");
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"k\":[[0,1]],\"v\":[[0,1]],\"expected_length\":0}", &r);
    CHECK_ERR(&r, 409, "length_conflict", "/expected_length");
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"k\":[[0,1]]}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/v");
    api_response_free(&r);
    req("POST", P(sid, "/attention"), "{\"q\":[[1,0]],\"return\":[\"nope\"]}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/return/0");
    api_response_free(&r);
    /* every key masked with empty_rows "error": 422 and the append undone */
    req("POST", P(sid, "/attention"),
        "{\"q\":[[1,0]],\"k\":[[0,1]],\"v\":[[0,1]],\"mask\":[[false,false]],\"empty_rows\":\"error\"}", &r);
    CHECK_ERR(&r, 422, "empty_row", "/q/0");
    api_response_free(&r);
    CHECK_EQ_INT(info_int(sid, "length"), 1);
    /* a good one with a mask, attn_bias (null = -inf) and return */
    CHECK_EQ_INT(req("POST", P(sid, "/attention"),
                     "{\"q\":[[1,0]],\"k\":[[0,1]],\"v\":[[0,1]],\"mask\":[[true,true]],"
                     "\"attn_bias\":[[null,0]],\"return\":[\"weights\"],\"expected_length\":1}", &r), 200);
    CHECK(r.body && strstr(r.body, "\"weights\":[[0,1]]") != NULL);
    CHECK(r.body && strstr(r.body, "\"output\"") == NULL);
    api_response_free(&r);
    CHECK_EQ_INT(info_int(sid, "length"), 2);
}

/* A POST to path answered 422 non_finite at ptr whose message has want. */
static void check_non_finite_at(const char *path, const char *body, const char *ptr,
                                const char *want)
{
    struct api_response r;
    req("POST", path, body, &r);
    CHECK_ERR(&r, 422, "non_finite", ptr);
    CHECK(r.body && strstr(r.body, want));
    if (r.body && !strstr(r.body, want))
        printf("  %.*s\n", (int)r.body_len, r.body);
    api_response_free(&r);
}

/* The same with path null (rows that overflowed as stored). */
static void check_non_finite(const char *path, const char *body, const char *want)
{
    struct api_response r;
    req("POST", path, body, &r);
    CHECK_ERR(&r, 422, "non_finite", "(null)");
    CHECK(r.body && strstr(r.body, want));
    api_response_free(&r);
}

/* Rows that are finite as sent but overflow once stored (a float32
 * session's K bias, a float16 cache) are refused with a message saying
 * so, not "value is not finite"; a query alone that overflows names its
 * row, as /v1/attention does. */
TEST(rows_past_the_cache_range_say_so)
{
    const char *f16 = "outside the float16 range its cache stores rows in";
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":2,\"dtype\":\"float32\",\"kv_dtype\":\"float16\"}",
                        sid), 201);
    check_non_finite(P(sid, "/kv"), "{\"k\":[[1e6,0]],\"v\":[[1,0]]}", f16);
    check_non_finite(P(sid, "/attention"), "{\"q\":[[1,0]],\"k\":[[1e6,0]],\"v\":[[1,0]]}", f16);
    CHECK_EQ_INT(info_int(sid, "length"), 0);
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":2,\"dtype\":\"float32\",\"bias\":{\"k\":[3e38,0]}}",
                        sid), 201);
    check_non_finite(P(sid, "/kv"), "{\"k\":[[3e38,0]],\"v\":[[1,0]]}",
                     "outside the float32 range its cache stores rows in");
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1e20,1e20]],\"v\":[[1,0]]}"), 200);
    check_non_finite_at(P(sid, "/attention"), "{\"q\":[[1e20,1e20]]}", "/q/0",
                        "the score of query row 0 with key 0 is not finite in float32");
}

TEST(truncate_fork_delete)
{
    struct api_response r;
    char fid[128];
    CHECK_EQ_INT(create("{\"d_k\":1,\"d_v\":1}", sid), 201);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1],[2],[3]],\"v\":[[4],[5],[6]]}"), 200);
    CHECK_EQ_INT(req("POST", P(sid, "/fork"), NULL, &r), 201);
    CHECK_STR(r.route, "/v1/sessions/{id}/fork");
    json_t *j = t_json(&r);
    snprintf(fid, sizeof fid, "%s", json_string_value(json_object_get(j, "id")));
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "length")), 3);
    CHECK(t_hdr(&r, "Location") && strstr(t_hdr(&r, "Location"), fid) != NULL);
    json_decref(j);
    api_response_free(&r);
    CHECK(strcmp(fid, sid) != 0);
    /* the fork shares the page of 3 rows (16 bytes each): none copied */
    CHECK_EQ_INT(info_int(sid, "bytes"), 0);
    CHECK_EQ_INT(info_int(sid, "shared_bytes"), 3 * 16);
    CHECK_EQ_INT(info_int(fid, "bytes"), 0);
    CHECK_EQ_INT(info_int(fid, "shared_bytes"), 3 * 16);

    CHECK_EQ_INT(req("POST", P(sid, "/truncate"), "{\"length\":1}", &r), 200);
    CHECK_STR(r.route, "/v1/sessions/{id}/truncate");
    api_response_free(&r);
    CHECK_EQ_INT(info_int(sid, "length"), 1);
    CHECK_EQ_INT(info_int(fid, "length"), 3);
    CHECK_EQ_INT(st_of("POST", P(fid, "/kv"), "{\"k\":[[7]],\"v\":[[8]]}"), 200);
    req("GET", P(sid, "/kv"), NULL, &r);
    CHECK(r.body && strstr(r.body, "\"k\":[[1]],\"v\":[[4]]") != NULL);
    api_response_free(&r);
    req("GET", P(fid, "/kv"), NULL, &r);
    CHECK(r.body && strstr(r.body, "\"k\":[[1],[2],[3],[7]],\"v\":[[4],[5],[6],[8]]") != NULL);
    api_response_free(&r);
    /* the fork's write copied the page: each now holds its own */
    CHECK_EQ_INT(info_int(fid, "bytes"), 4 * 16);
    CHECK_EQ_INT(info_int(fid, "shared_bytes"), 0);
    CHECK_EQ_INT(info_int(sid, "bytes"), 3 * 16);
    CHECK_EQ_INT(info_int(sid, "shared_bytes"), 0);

    req("POST", P(sid, "/truncate"), "{\"length\":2}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/length");
    api_response_free(&r);
    req("POST", P(sid, "/truncate"), "{}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/length");
    api_response_free(&r);
    req("POST", P(sid, "/fork"), "{\"x\":1}", &r);
    CHECK_ERR(&r, 422, "invalid_field", "/x");
    api_response_free(&r);
    CHECK_EQ_INT(st_of("GET", P(sid, "/truncate"), NULL), 405);
    CHECK_EQ_INT(st_of("POST", P(sid, "/truncate"), "{\"length\":0}"), 200);
    req("GET", P(sid, "/kv"), NULL, &r);
    CHECK(r.body && strstr(r.body, "\"length\":0,\"dtype\":\"float64\",\"kv_dtype\":\"float64\",\"k\":[],\"v\":[]") != NULL);
    api_response_free(&r);

    CHECK_EQ_INT(req("DELETE", P(sid, ""), NULL, &r), 204);
    CHECK(r.body_len == 0);
    api_response_free(&r);
    req("DELETE", P(sid, ""), NULL, &r);
    CHECK_ERR(&r, 404, "session_not_found", "(null)");
    api_response_free(&r);
    CHECK_EQ_INT(info_int(fid, "length"), 4);   /* the fork lives on */
    req("PUT", P(fid, ""), "{}", &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "GET, HEAD, DELETE");
    api_response_free(&r);
}

TEST(unknown_ids_and_routes)
{
    struct api_response r;
    const char *paths[] = {"", "/kv", "/attention", "/truncate", "/fork"};
    const char *methods[] = {"GET", "POST", "POST", "POST", "POST"};
    const char *bodies[] = {NULL, "{\"k\":[[1]],\"v\":[[1]]}", "{\"q\":[[1]]}",
                            "{\"length\":0}", NULL};
    for (size_t i = 0; i < 5; i++) {
        req(methods[i], P("AAAAAAAAAAAAAAAAAAAAAA", paths[i]), bodies[i], &r);
        CHECK_ERR(&r, 404, "session_not_found", "(null)");
        api_response_free(&r);
    }
    char longid[200];
    memset(longid, 'A', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    req("GET", P(longid, ""), NULL, &r);
    CHECK_ERR(&r, 404, "session_not_found", "(null)");
    api_response_free(&r);
    req("GET", P("AAAA", "/nope"), NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(t_err_code(&r), "not_found");
    api_response_free(&r);
}

static bool body_has(const struct api_response *r, const char *text)
{
    return r->body && memmem(r->body, r->body_len, text, strlen(text)) != NULL;
}

TEST(capacity_503_with_retry_after)
{
    struct sess_store *old = ctx.store;
    struct sess_config cfg = {.max_sessions = 1, .max_cache_bytes = 8 * 10,
                              .default_ttl_s = 600, .default_max_tokens = 4096};
    ctx.store = sess_store_new(&cfg);
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\"}", sid), 201);
    req("POST", "/v1/sessions", "{\"d_k\":1,\"d_v\":1}", &r);
    CHECK_ERR(&r, 503, "capacity_exhausted", "(null)");
    CHECK_STR(t_hdr(&r, "Retry-After"), "1");
    /* the message says what is held against which limit */
    CHECK(body_has(&r, "holds 1 sessions (--max-sessions 1) and 0 cache bytes "
                       "(--max-cache-bytes 80)"));
    api_response_free(&r);
    /* 8 bytes a row: 10 rows fit, 11 do not */
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"),
                       "{\"k\":[[1],[2],[3],[4],[5],[6],[7],[8],[9]],"
                       "\"v\":[[1],[2],[3],[4],[5],[6],[7],[8],[9]]}"), 200);
    req("POST", P(sid, "/attention"), "{\"q\":[[1]],\"k\":[[1],[2]],\"v\":[[1],[2]]}", &r);
    CHECK_ERR(&r, 503, "capacity_exhausted", "(null)");
    CHECK_STR(t_hdr(&r, "Retry-After"), "1");
    CHECK(body_has(&r, "holds 1 sessions (--max-sessions 1) and 72 cache bytes "
                       "(--max-cache-bytes 80)"));
    api_response_free(&r);
    /* reads keep working */
    CHECK_EQ_INT(st_of("POST", P(sid, "/attention"), "{\"q\":[[1]]}"), 200);
    CHECK_EQ_INT(st_of("GET", P(sid, "/kv"), NULL), 200);
    CHECK_EQ_INT(info_int(sid, "length"), 9);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1]],\"v\":[[1]]}"), 200);
    sess_store_free(ctx.store);
    ctx.store = old;
}

/* {"k":[[1],[2],...],"v":[same]} of n rows of d = 1, into out. */
static const char *rows_body(char *out, size_t size, size_t n)
{
    size_t at = 0;
    for (int part = 0; part < 2; part++) {
        at += (size_t)snprintf(out + at, size - at, "%s\"%s\":[", part ? "," : "{",
                               part ? "v" : "k");
        for (size_t i = 0; i < n; i++)
            at += (size_t)snprintf(out + at, size - at, "%s[%zu]", i ? "," : "", i % 7);
        at += (size_t)snprintf(out + at, size - at, "]");
    }
    snprintf(out + at, size - at, "}");
    return out;
}

/* A rolling session (left 5, 1 sink) after 197 rows holds 0..63 and
 * 192..196: the append let go of row 191, which a query of the last row
 * without an append reaches. The 409 says to append with the query (not
 * "at most 0 rows"), and a query with one appended row goes. */
TEST(rolling_query_alone_after_a_page_goes)
{
    static char body[4096];
    char id[128];
    struct api_response r;
    CHECK_EQ_INT(create("{\"d_k\":1,\"d_v\":1,\"window\":{\"left\":5,\"sinks\":1}}", id),
                 201);
    CHECK_EQ_INT(st_of("POST", P(id, "/kv"), rows_body(body, sizeof body, 197)), 200);
    req("POST", P(id, "/attention"), "{\"q\":[[1]]}", &r);
    CHECK_ERR(&r, 409, "length_conflict", "/q");
    CHECK(!body_has(&r, "at most 0"));
    CHECK(body_has(&r, "reach back to row 191 (window left 5), and the last append let the "
                       "rows before 192 go; send the next token's key and value rows with "
                       "the query"));
    api_response_free(&r);
    CHECK_EQ_INT(st_of("POST", P(id, "/attention"), "{\"q\":[[1]],\"k\":[[1]],\"v\":[[1]]}"),
                 200);
    CHECK_EQ_INT(st_of("POST", P(id, "/attention"), "{\"q\":[[1]]}"), 200);
    req("POST", P(id, "/attention"), "{\"q\":[[1],[2]]}", &r);
    CHECK_ERR(&r, 409, "length_conflict", "/q");
    CHECK(body_has(&r, "2 query rows after appending 0 would reach back to row 191 (window "
                       "left 5), before row 192, the first held; send at most 1 query rows"));
    api_response_free(&r);
    CHECK_EQ_INT(st_of("DELETE", P(id, ""), NULL), 204);
}

/* A rolling session whose window cannot fit --max-cache-bytes is refused
 * at create: left 5 and 1 sink hold up to 64 + 5 + 63 = 132 rows between
 * appends and 133 during one, 16 bytes a row of d 1 in float64 (10 in
 * int8: 2 bytes and two float scales). One byte less than that is 422 at
 * /window; exactly that takes a row at a time for good. A session that
 * does not roll is not held to it (its max_tokens is a ceiling). */
TEST(rolling_window_over_the_cache_is_refused)
{
    struct sess_store *old = ctx.store;
    const char *roll = "{\"d_k\":1,\"d_v\":1,\"window\":{\"left\":5,\"sinks\":1}}";
    const char *roll8 = "{\"d_k\":1,\"d_v\":1,\"dtype\":\"float32\",\"kv_dtype\":\"int8\","
                        "\"window\":{\"left\":5,\"sinks\":1}}";
    struct sess_config cfg = {.max_cache_bytes = 133 * 16 - 1, .default_ttl_s = 600,
                              .default_max_tokens = 4096};
    struct api_response r;
    char id[128];
    ctx.store = sess_store_new(&cfg);
    req("POST", "/v1/sessions", roll, &r);
    CHECK_ERR(&r, 422, "limit_exceeded", "/window");
    CHECK(body_has(&r, "holds up to 132 rows between appends"));
    CHECK(body_has(&r, "2128 cache bytes, over the whole cache (--max-cache-bytes 2127)"));
    api_response_free(&r);
    CHECK_EQ_INT(create(roll8, id), 201);
    CHECK_EQ_INT(create("{\"d_k\":1,\"d_v\":1,\"max_tokens\":4096}", id), 201);
    sess_store_free(ctx.store);
    cfg.max_cache_bytes = 133 * 10 - 1;
    ctx.store = sess_store_new(&cfg);
    req("POST", "/v1/sessions", roll8, &r);
    CHECK_ERR(&r, 422, "limit_exceeded", "/window");
    CHECK(body_has(&r, "1330 cache bytes"));
    api_response_free(&r);
    sess_store_free(ctx.store);
    cfg.max_cache_bytes = 133 * 16;
    ctx.store = sess_store_new(&cfg);
    CHECK_EQ_INT(create(roll, id), 201);
    int refused = 0;
    for (int i = 0; i < 400; i++)
        refused += st_of("POST", P(id, "/kv"), "{\"k\":[[1]],\"v\":[[1]]}") != 200;
    CHECK_EQ_INT(refused, 0);
    CHECK_EQ_INT(info_int(id, "length"), 400);
    sess_store_free(ctx.store);
    ctx.store = old;
}

TEST(response_size_limit)
{
    struct api_response r;
    size_t old = ctx.cfg.max_elements;
    CHECK_EQ_INT(create("{\"d_k\":1,\"d_v\":1}", sid), 201);
    CHECK_EQ_INT(st_of("POST", P(sid, "/kv"), "{\"k\":[[1],[2],[3],[4],[5]],\"v\":[[1],[2],[3],[4],[5]]}"), 200);
    ctx.cfg.max_elements = 8;
    req("POST", P(sid, "/attention"), "{\"q\":[[1],[2]]}", &r);   /* 2*5*2 + 2 */
    CHECK_ERR(&r, 422, "response_too_large", "/return");
    api_response_free(&r);
    req("GET", P(sid, "/kv"), NULL, &r);                            /* 10 numbers */
    CHECK_ERR(&r, 422, "response_too_large", "(null)");
    api_response_free(&r);
    CHECK_EQ_INT(st_of("POST", P(sid, "/attention"), "{\"q\":[[1]],\"return\":[\"output\"]}"), 200);
    ctx.cfg.max_elements = old;
}

/* A clock that moves tick_s seconds at every read (0: stands still). */
static double clock_s = 1000, tick_s;
static double ticking(void *arg)
{
    (void)arg;
    clock_s += tick_s;
    return clock_s;
}

/* The new session of a 201: its id (size 128) and Location checked. */
static void check_created(struct api_response *r, char *out)
{
    CHECK_EQ_INT(r->status, 201);
    json_t *j = t_json(r);
    const char *id = json_string_value(json_object_get(j, "id"));
    snprintf(out, 128, "%s", id ? id : "");
    const char *loc = t_hdr(r, "Location");
    CHECK(loc && strcmp(loc, P(out, "")) == 0);
    json_decref(j);
    api_response_free(r);
}

/*
 * A create or an import (a fork too, by the same code) answers 201 with
 * the session it made, however short its TTL: the session is held from
 * its making to its answer, so the clock moving past its ttl_s in between
 * (or an eviction) does not turn its 201 into a 404 session_not_found.
 * Last: it leaves the store on this clock.
 */
TEST(a_short_ttl_session_is_answered_for_as_made)
{
    struct api_response r;
    char a[128], b[128], x[128];
    sess_store_set_clock(ctx.store, ticking, NULL);
    tick_s = 1;                         /* every read: past a 0.5 s TTL */
    req("POST", "/v1/sessions", "{\"d_k\":2,\"d_v\":2,\"ttl_s\":0.5}", &r);
    check_created(&r, a);
    CHECK_EQ_INT(st_of("GET", P(a, ""), NULL), 404);     /* and then it went */

    tick_s = 0;
    CHECK_EQ_INT(create("{\"d_k\":2,\"d_v\":2,\"ttl_s\":0.5}", b), 201);
    size_t n;
    char *bytes = t_export(&ctx, b, &n);
    static const char *const octet[] = {"Content-Type", "application/octet-stream", NULL};
    tick_s = 1;
    t_call_n(&ctx, "POST", "/v1/sessions/import", octet, bytes, n, &r);
    check_created(&r, x);
    free(bytes);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    t_ctx_init(&ctx);
    ctx.store = sess_store_new(&cfg);
    RUN(create_returns_201_location_and_object);
    RUN(create_errors_name_the_field);
    RUN(append_get_kv_and_conflicts);
    RUN(multi_head_shapes);
    RUN(attention_equals_stateless_text);
    RUN(attention_null_members_are_absent);
    RUN(attention_errors_leave_cache_unchanged);
    RUN(rows_past_the_cache_range_say_so);
    RUN(truncate_fork_delete);
    RUN(unknown_ids_and_routes);
    RUN(capacity_503_with_retry_after);
    RUN(response_size_limit);
    RUN(rolling_query_alone_after_a_page_goes);
    RUN(rolling_window_over_the_cache_is_refused);
    RUN(a_short_ttl_session_is_answered_for_as_made);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
