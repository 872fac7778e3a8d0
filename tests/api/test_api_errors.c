/*
 * tests/api/test_api_errors.c — every request error of POST /v1/attention,
 * table-driven: the body, the HTTP status, the wire code and the JSON
 * pointer of the offending field. Also the body-level errors (media type,
 * invalid JSON, duplicate keys, nesting depth) and the error object shape.
 */
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/read.h"

static struct api_ctx ctx;

#define QKV "\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1,0],[0,1],[0,0]]"
#define KV "\"k\":[[1,0],[0,1],[-1,0]],\"v\":[[1,0],[0,1],[0,0]]"
/* base64 of the float64 NaN 0x7ff8000000000000 (little-endian) */
#define NAN_B64 "AAAAAAAA+H8="

struct err_case {
    const char *body;
    int status;
    const char *code;
    const char *path;       /* "(null)" for a JSON null path */
};

static const struct err_case cases[] = {
    /* body-level */
    {"{", 400, "invalid_json", ""},
    {"[1,2]", 400, "invalid_json", ""},
    /* duplicate keys and numbers past a double: the member being read */
    {"{\"q\":1,\"q\":2}", 400, "duplicate_key", "/q"},
    {"{" QKV ",\"bias\":{\"k\":[1,0],\"k\":[0,0]}}", 400, "duplicate_key", "/bias/k"},
    {"{" QKV ",\"tokens\":{\"q\":[\"a\\\"],[{\"],\"q\":1}}", 400, "duplicate_key",
     "/tokens/q"},
    {"{" QKV ",\"heads\":[0,{\"x\\u002fy\":[],\"x/y\":1}]}", 400, "duplicate_key",
     "/heads/1/x~1y"},
    {"{\"\":1,\"\":2}", 400, "duplicate_key", "/"},
    {"{\"q\":[[1e400]]}", 422, "non_finite", "/q/0/0"},
    {"{\"q\":[[1,0],[0, -1e400]]," KV "}", 422, "non_finite", "/q/1/1"},
    {"{" QKV ",\"rope\":{\"base\":[],\"factor\":1e999}}", 422, "non_finite",
     "/rope/factor"},
    /* required and unknown fields */
    {"{" KV "}", 422, "invalid_field", "/q"},
    {"{\"q\":[[1,0]],\"v\":[[1]]}", 422, "invalid_field", "/k"},
    {"{" QKV ",\"casual\":true}", 422, "invalid_field", "/casual"},
    {"{" QKV ",\"a/b~c\":1}", 422, "invalid_field", "/a~1b~0c"},
    {"{\"q\":\"hello\"," KV "}", 422, "invalid_field", "/q"},
    {"{\"q\":[1,0]," KV "}", 422, "invalid_field", "/q"},
    {"{\"q\":[[[[[1]]]]]," KV "}", 422, "invalid_field", "/q/0/0/0/0"},
    {"{\"q\":[[1,\"x\"]]," KV "}", 422, "invalid_field", "/q/0/1"},
    {"{\"q\":[[1,null]]," KV "}", 422, "invalid_field", "/q/0/1"},
    {"{\"q\":[[1,true]]," KV "}", 422, "invalid_field", "/q/0/1"},
    /* options */
    {"{" QKV ",\"dtype\":\"float8\"}", 422, "invalid_field", "/dtype"},
    {"{" QKV ",\"scale\":-1}", 422, "invalid_field", "/scale"},
    {"{" QKV ",\"scale\":0}", 422, "invalid_field", "/scale"},
    {"{" QKV ",\"scale\":\"1\"}", 422, "invalid_field", "/scale"},
    {"{" QKV ",\"softmax\":\"hard\"}", 422, "invalid_field", "/softmax"},
    {"{" QKV ",\"softmax\":\"sink\"}", 422, "invalid_field", "/sink_logit"},
    {"{" QKV ",\"sink_logit\":1}", 422, "invalid_field", "/sink_logit"},
    /* float32 math holds scale, softcap and sink logits as floats */
    {"{" QKV ",\"dtype\":\"float32\",\"scale\":1e39}", 422, "invalid_field", "/scale"},
    {"{" QKV ",\"dtype\":\"bfloat16\",\"softcap\":3.5e38}", 422, "invalid_field", "/softcap"},
    {"{" QKV ",\"dtype\":\"float32\",\"softmax\":\"sink\",\"sink_logit\":1e39}", 422,
     "non_finite", "/sink_logit"},
    {"{" QKV ",\"dtype\":\"float32\",\"softmax\":\"sink\",\"sink_logit\":[1e39]}", 422,
     "non_finite", "/sink_logit/0"},
    {"{" QKV ",\"causal\":\"sideways\"}", 422, "invalid_field", "/causal"},
    {"{" QKV ",\"causal\":1}", 422, "invalid_field", "/causal"},
    {"{" QKV ",\"alibi\":\"yes\"}", 422, "invalid_field", "/alibi"},
    {"{" QKV ",\"alibi\":{\"slope\":[1]}}", 422, "invalid_field", "/alibi/slope"},
    {"{" QKV ",\"alibi\":{\"slopes\":[1,2]}}", 422, "shape_mismatch", "/alibi/slopes"},
    {"{" QKV ",\"alibi\":{\"slopes\":[\"a\"]}}", 422, "invalid_field", "/alibi/slopes/0"},
    {"{\"q\":[[1,0,0]],\"k\":[[1,0,0]],\"v\":[[1]],\"rope\":true}", 422,
     "invalid_field", "/rope"},
    {"{" QKV ",\"rope\":{\"base\":0}}", 422, "invalid_field", "/rope/base"},
    {"{" QKV ",\"rope\":{\"pairs\":\"odd\"}}", 422, "invalid_field", "/rope/pairs"},
    {"{" QKV ",\"rope\":{\"theta\":1}}", 422, "invalid_field", "/rope/theta"},
    {"{" QKV ",\"rope\":3}", 422, "invalid_field", "/rope"},
    {"{" QKV ",\"empty_rows\":\"skip\"}", 422, "invalid_field", "/empty_rows"},
    {"{" QKV ",\"return\":[]}", 422, "invalid_field", "/return"},
    {"{" QKV ",\"return\":\"scores\"}", 422, "invalid_field", "/return"},
    {"{" QKV ",\"return\":[\"scores\",\"logits\"]}", 422, "invalid_field", "/return/1"},
    {"{" QKV ",\"encoding\":\"hex\"}", 422, "invalid_field", "/encoding"},
    {"{" QKV ",\"digits\":0}", 422, "invalid_field", "/digits"},
    {"{" QKV ",\"digits\":18}", 422, "invalid_field", "/digits"},
    {"{" QKV ",\"digits\":2.5}", 422, "invalid_field", "/digits"},
    {"{" QKV ",\"bias\":[1,2]}", 422, "invalid_field", "/bias"},
    {"{" QKV ",\"bias\":{\"o\":[1,2]}}", 422, "invalid_field", "/bias/o"},
    {"{" QKV ",\"bias\":{\"k\":[1,\"x\"]}}", 422, "invalid_field", "/bias/k/1"},
    {"{" QKV ",\"mask\":[[true,1,true]]}", 422, "invalid_field", "/mask/0/1"},
    {"{" QKV ",\"attn_bias\":[[0,true,0]]}", 422, "invalid_field", "/attn_bias/0/1"},
    /* ragged */
    {"{\"q\":[[1,0]],\"k\":[[1,0],[0],[-1,0]],\"v\":[[1],[2],[3]]}", 422,
     "ragged_matrix", "/k/1"},
    {"{\"q\":[[1,0]],\"k\":[[1,0],3,[-1,0]],\"v\":[[1],[2],[3]]}", 422,
     "ragged_matrix", "/k/1"},
    {"{\"q\":[[[1,0]],[[1,0],[0,1]]],\"k\":[[[1,0]]],\"v\":[[[1]]]}", 422,
     "ragged_matrix", "/q/1"},
    {"{\"q\":[[[1,0]],[[1]]],\"k\":[[[1,0]]],\"v\":[[[1]]]}", 422,
     "ragged_matrix", "/q/1/0"},
    {"{" QKV ",\"mask\":[[true,true,true],[true]]}", 422, "ragged_matrix", "/mask/1"},
    /* shapes */
    {"{\"q\":[[1,0,0]]," KV "}", 422, "shape_mismatch", "/k"},
    {"{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2],[3]]}", 422,
     "shape_mismatch", "/v"},
    {"{\"q\":[[[1,0]]]," KV "}", 422, "shape_mismatch", "/k"},
    {"{\"q\":[[[1,0]],[[1,0]],[[1,0]]],\"k\":[[[1,0]],[[1,0]]],"
     "\"v\":[[[1]],[[1]]]}", 422, "shape_mismatch", "/k"},
    {"{\"q\":[[[1,0]]],\"k\":[[[1,0]]],\"v\":[[[1]],[[2]]]}", 422,
     "shape_mismatch", "/v"},
    {"{" QKV ",\"bias\":{\"q\":[1,2,3]}}", 422, "shape_mismatch", "/bias/q"},
    {"{" QKV ",\"bias\":{\"v\":[[1,2],[3,4]]}}", 422, "shape_mismatch", "/bias/v"},
    {"{" QKV ",\"attn_bias\":[[0,0]]}", 422, "shape_mismatch", "/attn_bias"},
    {"{" QKV ",\"mask\":[[[true,true,true]],[[true,true,true]]]}", 422,
     "shape_mismatch", "/mask"},
    /* empty */
    {"{\"q\":[]," KV "}", 422, "empty_matrix", "/q"},
    {"{\"q\":[[1,0]],\"k\":[[]],\"v\":[[1]]}", 422, "empty_matrix", "/k/0"},
    {"{\"q\":[[1,0]],\"k\":[[1,0],[]],\"v\":[[1],[2]]}", 422, "empty_matrix", "/k/1"},
    {"{\"q\":[[1,0]],\"k\":{\"shape\":[3,0],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"v\":[[1],[2],[3]]}", 422, "empty_matrix", "/k/shape/1"},
    /* non-finite */
    {"{\"q\":[[1e39,0]]," KV ",\"dtype\":\"float32\"}", 422, "non_finite", "/q/0/0"},
    {"{\"q\":[[1,0]]," KV ",\"bias\":{\"v\":[0,-1e300]},\"dtype\":\"float32\"}", 422,
     "non_finite", "/bias/v/1"},
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"" NAN_B64 "\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "non_finite", "/q/data"},
    /* base64 form */
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAA\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/data"},
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAA*AAAA=\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/data"},
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"int8\",\"data\":\"AA==\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/dtype"},
    {"{\"q\":{\"shape\":[1,1,1,1,1],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/shape"},
    {"{\"q\":{\"shape\":[1,-1],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/shape/1"},
    /* a size, but past any request (2^63; and 1e30): too large, not "not a size" */
    {"{\"q\":{\"shape\":[1,9223372036854775808],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "limit_exceeded", "/q/shape/1"},
    {"{\"q\":{\"shape\":[1e30,1],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "limit_exceeded", "/q/shape/0"},
    {"{\"q\":{\"shape\":[1,1.5],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/shape/1"},
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":5},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/data"},
    {"{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"\",\"x\":1},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "invalid_field", "/q/x"},
    /* limits: element budget and an overflowing product */
    {"{\"q\":{\"shape\":[4294967296,4294967296],\"dtype\":\"float64\",\"data\":\"\"},"
     "\"k\":[[1]],\"v\":[[1]]}", 422, "limit_exceeded", "/q"},
    /* empty rows as an error */
    {"{" QKV ",\"mask\":[[false,false,false]],\"empty_rows\":\"error\"}", 422,
     "empty_row", "/q/0"},
};

TEST(error_table)
{
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_response r;
        const struct err_case *e = &cases[i];
        json_t *j, *err;

        t_call(&ctx, "POST", "/v1/attention", e->body, &r);
        j = t_json(&r);
        err = json_object_get(j, "error");
        if (r.status != e->status || strcmp(t_err_code(&r), e->code) != 0 ||
            strcmp(t_err_path(&r), e->path) != 0)
            printf("  case %zu: %s\n    -> %d %.*s\n", i, e->body, r.status,
                   (int)r.body_len, r.body ? r.body : "");
        CHECK_EQ_INT(r.status, e->status);
        CHECK_STR(t_err_code(&r), e->code);
        CHECK_STR(t_err_path(&r), e->path);
        CHECK(json_is_string(json_object_get(err, "message")));
        CHECK_EQ_INT(json_object_size(j), 1);
        CHECK_EQ_INT(json_object_size(err), 3);
        CHECK_STR(r.content_type, "application/json");
        json_decref(j);
        api_response_free(&r);
    }
}

/* Bodies of q, k, v only are read whole by the fast reader, and their
 * placeholder trees are shared per set of keys present (api/reply.c):
 * each subset, in turns, must still be answered as its own. */
TEST(whole_bodies_by_key_set)
{
    static const struct {
        const char *body, *missing;     /* NULL: answered 200 */
    } seq[] = {
        {"{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]]}", NULL},
        {"{\"q\":[[1,0]],\"k\":[[1,0],[0,1]]}", "/v"},
        {"{\"k\":[[1,0],[0,1]],\"v\":[[1],[2]]}", "/q"},
        {"{\"q\":[[1,0]]}", "/k"},
        {"{\"q\":[[1,0]],\"v\":[[1],[2]]}", "/k"},
        {"{\"v\":[[1],[2]],\"k\":[[1,0],[0,1]],\"q\":[[0,1]]}", NULL},
        {"{\"k\":[[1,0],[0,1]]}", "/q"},
    };
    size_t round, i;

    for (round = 0; round < 2; round++)
        for (i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            struct api_response r;
            json_t *j, *msg;

            t_call(&ctx, "POST", "/v1/attention", seq[i].body, &r);
            if (!seq[i].missing) {
                CHECK_EQ_INT(r.status, 200);
                api_response_free(&r);
                continue;
            }
            CHECK_EQ_INT(r.status, 422);
            CHECK_STR(t_err_code(&r), "invalid_field");
            CHECK_STR(t_err_path(&r), seq[i].missing);
            j = t_json(&r);
            msg = json_object_get(json_object_get(j, "error"), "message");
            CHECK(msg && strstr(json_string_value(msg), "missing") != NULL);
            json_decref(j);
            api_response_free(&r);
        }
}

TEST(limit_exceeded_path)
{
    struct api_response r;

    ctx.cfg.max_elements = 10;      /* q 2 + k 6 fit, v 6 does not */
    t_call(&ctx, "POST", "/v1/attention", "{" QKV "}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "limit_exceeded");
    CHECK_STR(t_err_path(&r), "/v");
    api_response_free(&r);
    ctx.cfg.max_elements = 1 << 20;
    /* a shape whose product overflows is not said to hold SIZE_MAX numbers */
    t_call(&ctx, "POST", "/v1/attention", "{\"q\":{\"shape\":[4294967296,4294967296,2],"
           "\"dtype\":\"float64\",\"data\":\"\"},\"k\":[[1]],\"v\":[[1]]}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "limit_exceeded");
    CHECK_STR(t_err_path(&r), "/q");
    CHECK(r.body && !memmem(r.body, r.body_len, "18446744073709551615", 20) &&
          memmem(r.body, r.body_len, "overflows", 9));
    api_response_free(&r);
}

TEST(media_types)
{
    static const char *const bad[] = {"text/plain", "application/jsonx",
                                      "application/json; charset=latin1",
                                      "application/x-www-form-urlencoded", NULL};
    static const char *const good[] = {"application/json", "Application/JSON",
                                       "application/json;charset=utf-8",
                                       "application/json; charset=\"UTF-8\"", NULL};
    const char *h[] = {"Content-Type", NULL, NULL};
    struct api_response r;
    size_t i;

    for (i = 0; bad[i]; i++) {
        h[1] = bad[i];
        t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
        CHECK_EQ_INT(r.status, 415);
        CHECK_STR(t_err_code(&r), "unsupported_media_type");
        api_response_free(&r);
    }
    for (i = 0; good[i]; i++) {
        h[1] = good[i];
        t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
        CHECK_EQ_INT(r.status, 200);
        api_response_free(&r);
    }
    /* no Content-Type at all */
    h[0] = NULL;
    t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
    CHECK_EQ_INT(r.status, 415);
    api_response_free(&r);
    /* the message says what is wrong: another charset is not another type */
    h[0] = "Content-Type";
    h[1] = "application/json; charset=latin1";
    t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
    CHECK_EQ_INT(r.status, 415);
    CHECK(r.body && strstr(r.body, "the only charset accepted is utf-8") != NULL);
    api_response_free(&r);
    h[1] = "text/plain; charset=utf-8";
    t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
    CHECK(r.body && strstr(r.body, "Content-Type must be application/json") != NULL);
    api_response_free(&r);
    h[1] = "application/json; boundary=x";
    t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
    CHECK(r.body && strstr(r.body, "no parameter but charset=utf-8") != NULL);
    api_response_free(&r);
}

/* A body sent compressed (Content-Encoding gzip or deflate, as
 * tritonclient's request_compression_algorithm sends it) is 415, not read
 * as if it were plain (a gzip body was 400 invalid_json "raw NUL byte", one
 * labelled gzip but plain was computed); identity is plain. */
TEST(content_encodings)
{
    static const struct { const char *value; int status; } encodings[] = {
        {"gzip", 415}, {"deflate", 415}, {"br", 415}, {"gzip, identity", 415},
        {"identity", 200}, {" Identity ", 200}, {"", 200}};
    const char *h[] = {"Content-Type", "application/json", "Content-Encoding", NULL, NULL};
    struct api_response r;

    for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++) {
        h[3] = encodings[i].value;
        t_call_h(&ctx, "POST", "/v1/attention", h, "{" QKV "}", &r);
        CHECK_EQ_INT(r.status, encodings[i].status);
        CHECK(encodings[i].status == 200 ||
              (r.body && strstr(r.body, "Content-Encoding must be identity") &&
               strcmp(t_err_code(&r), "unsupported_media_type") == 0));
        api_response_free(&r);
    }
}

TEST(empty_body)
{
    struct api_response r;

    t_call(&ctx, "POST", "/v1/attention", "", &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_STR(t_err_code(&r), "invalid_json");
    CHECK_STR(t_err_path(&r), "");
    api_response_free(&r);
}

TEST(too_deep)
{
    char body[256];
    struct api_response r;
    size_t i, n = 0;

    n += (size_t)snprintf(body, sizeof body, "{\"q\":");
    for (i = 0; i < 40; i++)
        body[n++] = '[';
    for (i = 0; i < 40; i++)
        body[n++] = ']';
    body[n++] = '}';
    body[n] = '\0';
    t_call(&ctx, "POST", "/v1/attention", body, &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_STR(t_err_code(&r), "json_too_deep");
    api_response_free(&r);
    /* brackets inside strings do not count */
    n = (size_t)snprintf(body, sizeof body, "{\"x\":\"");
    for (i = 0; i < 40; i++)
        body[n++] = '[';
    n += (size_t)snprintf(body + n, sizeof body - n, "\"}");
    t_call(&ctx, "POST", "/v1/attention", body, &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "invalid_field");
    CHECK_STR(t_err_path(&r), "/x");
    api_response_free(&r);
}

/* The depth limit holds the same when the fast reader takes q, k, v: the
 * body object is level 1, so "x" may nest 31 more levels, not 32. */
TEST(too_deep_beside_fast_arrays)
{
    char body[512];
    struct api_response r;
    size_t i, n;
    int levels;

    for (levels = 31; levels <= 32; levels++) {
        n = (size_t)snprintf(body, sizeof body, "{" QKV ",\"x\":");
        for (i = 0; i < (size_t)levels; i++)
            body[n++] = '[';
        for (i = 0; i < (size_t)levels; i++)
            body[n++] = ']';
        body[n++] = '}';
        body[n] = '\0';
        t_call(&ctx, "POST", "/v1/attention", body, &r);
        if (levels == 31) {
            CHECK_EQ_INT(r.status, 422);        /* parsed: x is unknown */
            CHECK_STR(t_err_path(&r), "/x");
        } else {
            CHECK_EQ_INT(r.status, 400);
            CHECK_STR(t_err_code(&r), "json_too_deep");
        }
        api_response_free(&r);
    }
}

TEST(read_size)
{
    struct api_request req;
    struct api_response resp;
    struct api_call c;
    json_t *j = json_loads("[7, 7.0, 7.5, -1, \"7\", 0, 100]", 0, NULL);
    size_t v = 0;

    memset(&req, 0, sizeof req);
    memset(&resp, 0, sizeof resp);
    memset(&c, 0, sizeof c);
    c.ctx = &ctx;
    c.req = &req;
    c.resp = &resp;
    CHECK(api_read_size(&c, json_array_get(j, 0), "/a", 1, 99, &v) && v == 7);
    CHECK(api_read_size(&c, json_array_get(j, 1), "/a", 1, 99, &v) && v == 7);
    CHECK(!api_read_size(&c, json_array_get(j, 2), "/a", 1, 99, &v));
    CHECK(!api_read_size(&c, json_array_get(j, 3), "/a", 1, 99, &v));
    CHECK(!api_read_size(&c, json_array_get(j, 4), "/a", 1, 99, &v));
    CHECK(!api_read_size(&c, json_array_get(j, 5), "/a", 1, 99, &v));
    CHECK(!api_read_size(&c, json_array_get(j, 6), "/x/0", 1, 99, &v));
    CHECK_EQ_INT(resp.status, 422);
    CHECK_STR(t_err_path(&resp), "/x/0");
    CHECK(!api_read_size(&c, NULL, "/a", 1, 99, &v));
    api_response_free(&resp);
    json_decref(j);
}

TEST(big_integer_literal_is_a_number)
{
    struct api_response r;

    t_call(&ctx, "POST", "/v1/attention",
           "{\"q\":[[100000000000000000000000]],\"k\":[[1]],\"v\":[[1]]}", &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

/* A member whose value is null is absent, whatever its name: a client
 * that writes every field of its own request model, null when unset, is
 * read; a typo with a value is still refused by name (the table above). */
TEST(a_null_member_is_absent_whatever_its_name)
{
    static const char *const bodies[] = {
        "{" QKV ",\"casual\":null}",
        "{" QKV ",\"rope\":{\"base\":10000,\"theta\":null},\"headers\":null}",
        "{" QKV ",\"return\":[\"output\"],\"bias\":{\"q\":null,\"extra\":null}}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        struct api_response r;
        t_call(&ctx, "POST", "/v1/attention", bodies[i], &r);
        CHECK_EQ_INT(r.status, 200);
        if (r.status != 200)
            printf("  %s: %.*s\n", bodies[i], (int)r.body_len, r.body);
        api_response_free(&r);
    }
}

TEST(invalid_utf8_in_echoed_text)
{
    struct api_response r;
    json_t *j;

    /* the method is echoed in the 405 message: invalid UTF-8 must not break
     * the JSON error body */
    t_call(&ctx, "PUT\xff", "/v1/attention", NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    j = t_json(&r);
    CHECK(j != NULL);
    json_decref(j);
    api_response_free(&r);
    /* paths echoed in 404 messages: overlong, surrogate, beyond U+10FFFF,
     * truncated sequences */
    {
        static const char *const paths[] = {"/\xf0\x80\x80\x80", "/\xed\xa0\x80",
                                            "/\xf4\x90\x80\x80", "/\xc0\xaf", "/\xe2\x82",
                                            "/ok\xc3\xa9"};
        size_t i;
        for (i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            t_call(&ctx, "GET", paths[i], NULL, &r);
            CHECK_EQ_INT(r.status, 404);
            j = t_json(&r);
            CHECK(j != NULL);
            json_decref(j);
            api_response_free(&r);
        }
    }
}

/* jansson refuses \u0000 naming its own flag; the answer says what was sent. */
TEST(nul_escape_is_named_as_sent)
{
    struct api_response r;

    t_call(&ctx, "POST", "/v1/attention", "{\"q\":[[1]],\"k\":[[1]],\"v\":[[1]],"
           "\"tokens\":{\"q\":[\"a\\u0000\"],\"k\":[\"b\"]}}", &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_STR(t_err_code(&r), "invalid_json");
    const char *want = "\\\\u0000 is not allowed in a string";     /* as JSON text */
    CHECK(r.body && memmem(r.body, r.body_len, want, strlen(want)));
    CHECK(r.body && !memmem(r.body, r.body_len, "JSON_ALLOW_NUL", 14));
    api_response_free(&r);
}

/* Finite inputs whose scores overflow: the message says so, and how out,
 * from /v1/attention and from /v1/verify (one head and several). */
TEST(overflow_in_the_pass_is_named)
{
    static const char *const overflow[][3] = {
        {"/v1/attention", "{\"q\":[[1e200]],\"k\":[[1e200]],\"v\":[[1]]}",
         "not finite in float64"},
        {"/v1/attention", "{\"q\":[[1e30]],\"k\":[[1e30]],\"v\":[[1]],"
         "\"dtype\":\"float32\"}", "or compute in float64"},
        {"/v1/verify", "{\"q\":[[1e200]],\"k\":[[1e200]],\"v\":[[1]]}",
         "not finite in float64"},
        {"/v1/verify", "{\"q\":[[[1e200]],[[1]]],\"k\":[[[1e200]],[[1]]],"
         "\"v\":[[[1]],[[1]]]}", "query row 0 of head 0 with key 0 is not finite in float64"}};
    struct api_response r;

    for (size_t i = 0; i < 4; i++) {
        t_call(&ctx, "POST", overflow[i][0], overflow[i][1], &r);
        CHECK_EQ_INT(r.status, 422);
        CHECK_STR(t_err_code(&r), "non_finite");
        CHECK(r.body && memmem(r.body, r.body_len, overflow[i][2], strlen(overflow[i][2])));
        api_response_free(&r);
    }
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(error_table);
    RUN(whole_bodies_by_key_set);
    RUN(limit_exceeded_path);
    RUN(media_types);
    RUN(content_encodings);
    RUN(empty_body);
    RUN(too_deep);
    RUN(too_deep_beside_fast_arrays);
    RUN(read_size);
    RUN(big_integer_literal_is_a_number);
    RUN(a_null_member_is_absent_whatever_its_name);
    RUN(invalid_utf8_in_echoed_text);
    RUN(nul_escape_is_named_as_sent);
    RUN(overflow_in_the_pass_is_named);
    TEST_MAIN_END();
}
