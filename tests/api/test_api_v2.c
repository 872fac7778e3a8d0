/*
 * tests/api/test_api_v2.c — the Open Inference Protocol v2 in-process:
 * server/model metadata and health, JSON inference (flat and nested data,
 * FP32/FP64, biases, request parameters, output selection, masked scores,
 * several heads), and errors in the protocol's {"error":"..."} shape with
 * Triton's status mapping. Elsewhere: the binary tensor data extension
 * (test_api_v2_binary.c), the sequence extension (test_api_v2_seq_basics.c)
 * and what a sequence's later requests may say (test_api_v2_seq.c).
 */
#include <float.h>
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

TEST(server_metadata_and_health)
{
    struct api_response r;
    json_t *j, *ext;
    size_t i;
    int seen = 0;

    v2("GET", "", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "attnd");
    CHECK_STR(json_string_value(json_object_get(j, "version")), "0.1.0-test");
    ext = json_object_get(j, "extensions");
    for (i = 0; i < json_array_size(ext); i++) {
        const char *e = json_string_value(json_array_get(ext, i));
        seen += strcmp(e, "binary_tensor_data") == 0 || strcmp(e, "sequence") == 0;
    }
    CHECK_EQ_INT(seen, 2);
    json_decref(j);
    api_response_free(&r);

    v2("GET", "/health/live", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    v2("GET", "/health/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    ctx.draining = 1;
    v2("GET", "/health/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 503);
    api_response_free(&r);
    v2("GET", "/models/attention/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 503);
    api_response_free(&r);
    ctx.draining = 0;
    v2("GET", "/health/live", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

TEST(model_metadata)
{
    static const char *const names[] = {"q", "k", "v", "bias_q", "bias_k",
                                        "bias_v", "attn_bias", "mask",
                                        "sink_logits", "positions_q", "positions_k",
                                        "segments_q", "segments_k"};
    static const char *const types[] = {"FP64", "FP64", "FP64", "FP64", "FP64",
                                        "FP64", "FP64", "BOOL", "FP64", "INT64",
                                        "INT64", "INT64", "INT64"};
    struct api_response r;
    json_t *j, *in, *out;
    size_t i, k;

    v2("GET", "/models/attention", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "attention");
    in = json_object_get(j, "inputs");
    out = json_object_get(j, "outputs");
    CHECK_EQ_INT(json_array_size(in), 15);     /* + tokens_q, tokens_k (BYTES) */
    CHECK_EQ_INT(json_array_size(out), 13);    /* + the part-2 returns and labels */
    CHECK_STR(json_string_value(json_object_get(json_array_get(in, 14), "datatype")), "BYTES");
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 9), "name")),
              "top_k_indices");
    for (i = 0; i < 13 && i < json_array_size(in); i++) {
        json_t *t = json_array_get(in, i), *shape = json_object_get(t, "shape");
        CHECK_STR(json_string_value(json_object_get(t, "name")), names[i]);
        CHECK_STR(json_string_value(json_object_get(t, "datatype")), types[i]);
        CHECK(json_array_size(shape) >= (i == 8 ? 1 : 2));
        for (k = 0; k < json_array_size(shape); k++)
            CHECK_EQ_INT(json_integer_value(json_array_get(shape, k)), -1);
    }
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 2), "name")), "output");
    json_decref(j);
    api_response_free(&r);

    v2("GET", "/models/attention/versions/1/ready", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    v2("GET", "/models/other", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
    v2("GET", "/models/attention/versions/2", NULL, NULL, 0, &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
}

TEST(infer_seed_example)
{
    int st;
    json_t *j = infer("{\"id\":\"req-7\",\"inputs\":[" SEED_IN "]}", &st);
    json_t *w = output(j, "weights"), *o = output(j, "output");

    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(j, "id")), "req-7");
    CHECK_STR(json_string_value(json_object_get(j, "model_name")), "attention");
    CHECK(w && o && output(j, "scores"));
    CHECK_STR(json_string_value(json_object_get(w, "datatype")), "FP64");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 0)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(w, "shape"), 1)), 3);
    CHECK_NEAR(dat(w, 0), 0.575975, 5e-7);
    CHECK_NEAR(dat(w, 1), 0.283995, 5e-7);
    CHECK_NEAR(dat(w, 2), 0.140029, 5e-7);
    CHECK_NEAR(dat(o, 0), dat(w, 0), 1e-15);
    CHECK_NEAR(dat(o, 1), dat(w, 1), 1e-15);
    json_decref(j);
}

/* An integer literal beyond 64 bits is a JSON number like any other: it is
 * read as the real of its value, and the body's other integers (the
 * shapes, which take integers only) stay integers. */
TEST(integer_literals_beyond_64_bits)
{
    static const char *const texts[][2] = {
        {"100000000000000000000", "1e20"},
        {"9223372036854775808", "9223372036854775808.0"},
        {"-9223372036854775809", "-9223372036854775809.0"},
        {"-9223372036854775808", "-9223372036854775808.0"},    /* fits: an integer */
        {"123456789012345678901234567890", "1.2345678901234567890123456789e29"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        json_t *j[2];
        int st[2];
        for (int t = 0; t < 2; t++) {
            char b[512];
            snprintf(b, sizeof b, "{\"inputs\":["
                     "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[%s,1]},"
                     "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1e-19,0,0,1]},"
                     "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[1,2]}],"
                     "\"outputs\":[{\"name\":\"output\"}]}", texts[i][t]);
            j[t] = infer(b, &st[t]);
        }
        CHECK_EQ_INT(st[0], 200);
        CHECK_EQ_INT(st[1], 200);
        CHECK(j[0] && j[1] && json_equal(output(j[0], "output"), output(j[1], "output")));
        if (st[0] != 200)
            printf("  %s: %s\n", texts[i][0], json_string_value(json_object_get(j[0], "error")));
        json_decref(j[0]);
        json_decref(j[1]);
    }
}

TEST(nested_data_equals_flat_and_fp32)
{
    int st;
    json_t *j = infer("{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[[1,0]]},"
        "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[[1,0],[0,1],[-1,0]]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[[1,0],[0,1],[0,0]]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(w, "datatype")), "FP32");
    CHECK_NEAR(dat(w, 0), 0.575975, 1e-6);
    CHECK_NEAR(dat(w, 2), 0.140029, 1e-6);
    json_decref(j);
}

TEST(bias_and_parameters)
{
    int st;
    json_t *j = infer("{\"inputs\":[" SEED_IN ",{\"name\":\"bias_q\",\"datatype\":"
                      "\"FP64\",\"shape\":[2],\"data\":[0,1]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(w, 0), 0.445808, 5e-7);
    CHECK_NEAR(dat(w, 1), 0.445808, 5e-7);
    CHECK_NEAR(dat(w, 2), 0.108383, 5e-7);
    json_decref(j);

    /* softmax1: weights sum below 1; scale 1 changes the scores */
    j = infer("{\"parameters\":{\"softmax\":\"softmax1\",\"scale\":1},\"inputs\":["
              SEED_IN "]}", &st);
    w = output(j, "weights");
    CHECK_EQ_INT(st, 200);
    CHECK(dat(w, 0) + dat(w, 1) + dat(w, 2) < 1.0);
    CHECK_NEAR(dat(output(j, "scores"), 0), 1.0, 1e-15);
    CHECK_NEAR(dat(w, 0) / dat(w, 1), exp(1.0), 1e-12);
    json_decref(j);

    /* two queries, causal top_left: the first sees only key 0 */
    j = infer("{\"parameters\":{\"causal\":\"top_left\"},\"inputs\":["
              "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[2,2],\"data\":[1,0,0,1]},"
              "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[2,1],\"data\":[5,7]}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(j, "weights"), 0), 1.0, 0);
    CHECK_NEAR(dat(output(j, "output"), 0), 5.0, 0);
    CHECK(json_is_null(json_array_get(json_object_get(output(j, "scores"), "data"), 1)));
    json_decref(j);
}

/* A member whose value is null counts as absent, as on /v1: the answer
 * equals the one without it. */
TEST(null_members_are_absent)
{
    int st, st0;
    json_t *j0 = infer("{\"inputs\":[" SEED_IN "]}", &st0);
    json_t *j = infer("{\"id\":null,\"parameters\":{\"causal\":null,\"scale\":null,"
                      "\"softmax\":null,\"sink_logit\":null,\"alibi\":null,\"softcap\":null,"
                      "\"sequence_id\":null,\"sequence_start\":null,\"heads\":null,"
                      "\"timeout_ms\":null},\"inputs\":[" SEED_IN "],\"outputs\":null}", &st);
    CHECK_EQ_INT(st0, 200);
    CHECK_EQ_INT(st, 200);
    json_object_del(j0, "id");
    CHECK(j && j0 && json_equal(j, j0));
    json_decref(j);
    json_decref(j0);
    j = infer("{\"parameters\":null,\"inputs\":[" SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
}

TEST(attn_bias_null_and_mask)
{
    int st;
    json_t *j = infer("{\"inputs\":[" SEED_IN ","
        "{\"name\":\"attn_bias\",\"datatype\":\"FP64\",\"shape\":[1,3],\"data\":[0,null,0]},"
        "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],\"data\":[true,true,false]}]}", &st);
    json_t *w = output(j, "weights");

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(w, 0), 1.0, 1e-15);
    CHECK_NEAR(dat(w, 1), 0.0, 0);
    CHECK_NEAR(dat(w, 2), 0.0, 0);
    CHECK(json_is_null(json_array_get(json_object_get(output(j, "scores"), "data"), 2)));
    json_decref(j);
}

TEST(three_d_heads)
{
    int st;
    json_t *j = infer("{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[2,1,2],\"data\":[1,0,0,1]},"
        "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[1,2,2],\"data\":[1,0,0,1]},"
        "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[1,2,1],\"data\":[1,2]}],"
        "\"outputs\":[{\"name\":\"output\"}]}", &st);
    json_t *o = output(j, "output"), *shape = json_object_get(o, "shape");

    CHECK_EQ_INT(st, 200);
    CHECK(output(j, "weights") == NULL && output(j, "scores") == NULL);
    CHECK_EQ_INT(json_array_size(shape), 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(shape, 0)), 2);
    /* head 0 prefers key 0 (value 1), head 1 key 1 (value 2) */
    CHECK(dat(o, 0) < 1.5 && dat(o, 1) > 1.5);
    json_decref(j);
}

/* ---- errors -------------------------------------------------------------- */

/* Status and that the message mentions want. */
static void check_bad(const char *body, int status, const char *want)
{
    int st;
    json_t *j = infer(body, &st);
    const char *e = v2_err(j);

    CHECK_EQ_INT(st, status);
    CHECK(e != NULL);
    if (e && want && !strstr(e, want)) {
        th_cur_failed = 1;
        printf("  error \"%s\" lacks \"%s\"\n", e, want);
    }
    json_decref(j);
}

#define FP32_IN                                                               \
    "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"   \
    "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"   \
    "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]}"

/* KServe's client (InferRequest.to_rest) puts "model_name" beside "inputs";
 * the body may name the route's model and version, and no other. */
TEST(body_names_the_model_as_kserve_sends_it)
{
    int st;
    json_t *j = infer("{\"id\":\"6f1c\",\"model_name\":\"attention\",\"inputs\":["
                      SEED_IN "]}", &st);

    CHECK_EQ_INT(st, 200);
    CHECK_NEAR(dat(output(j, "weights"), 0), 0.575975, 5e-7);
    json_decref(j);
    j = infer("{\"model_name\":\"attention\",\"model_version\":\"1\",\"inputs\":["
              SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    /* an empty version is the default one (gRPC-style clients) */
    j = infer("{\"model_name\":\"attention\",\"model_version\":\"\",\"inputs\":["
              SEED_IN "]}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(j);
    check_bad("{\"model_name\":\"\",\"inputs\":[" SEED_IN "]}", 400,
              "[invalid_field at /model_name]");
    check_bad("{\"model_name\":\"resnet\",\"inputs\":[" SEED_IN "]}", 400,
              "[invalid_field at /model_name]");
    check_bad("{\"model_name\":7,\"inputs\":[" SEED_IN "]}", 400,
              "[invalid_field at /model_name]");
    check_bad("{\"model_version\":\"2\",\"inputs\":[" SEED_IN "]}", 400,
              "[invalid_field at /model_version]");
}

/* tritonclient's request_compression_algorithm sends Content-Encoding
 * gzip or deflate: attnd decodes neither, and says so (400 in this
 * protocol) rather than reading the bytes as JSON. */
TEST(compressed_body_is_refused_as_such)
{
    static const char body[] = "{\"inputs\":[" SEED_IN "]}";
    const char *h[] = {"Content-Encoding", "gzip", NULL};
    struct api_response r;
    json_t *j;

    v2("POST", "/models/attention/infer", h, body, sizeof body - 1, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "Content-Encoding must be identity") &&
          strstr(v2_err(j), "[unsupported_media_type]"));
    json_decref(j);
    api_response_free(&r);
}

TEST(errors_in_v2_shape)
{
    struct api_response r;
    json_t *j;

    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"INT8\",\"shape\":[1,2],"
              "\"data\":[1,0]}]}", 400, "/inputs/0/datatype");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"zz\",\"datatype\":\"FP64\","
              "\"shape\":[1],\"data\":[1]}]}", 400, "/inputs/3/name");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0,3]}]}", 400, "/inputs/0/data");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1]},{\"name\":\"k\"}]}", 400, "/inputs/0/data");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,0],"
              "\"data\":[]}]}", 400, "/inputs/0/shape/1");
    /* a dimension past 64 bits (read as a real) is too large, not "not an
     * integer", as in /v1's base64 shape; 2.5 is no integer */
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\","
              "\"shape\":[18446744073709551616,2],\"data\":[1,0]}]}", 400,
              "[limit_exceeded at /inputs/0/shape/0]");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\","
              "\"shape\":[1e30,2],\"data\":[1,0]}]}", 400,
              "[limit_exceeded at /inputs/0/shape/0]");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\","
              "\"shape\":[2.5,2],\"data\":[1,0]}]}", 400,
              "[invalid_field at /inputs/0/shape/0]");
    check_bad("{\"inputs\":[" SEED_IN "],\"outputs\":[{\"name\":\"attention\"}]}",
              400, "/outputs/0/name");
    /* labels alone compute nothing: refused with a message, as /v1's empty
     * "return" is (a sequence's append too, which would else be refused as
     * a bare "invalid argument") */
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"tokens_q\",\"datatype\":\"BYTES\","
              "\"shape\":[1],\"data\":[\"a\"]}],\"outputs\":[{\"name\":\"tokens_q\"}]}",
              400, "tokens_q and tokens_k only echo their inputs [invalid_field at /outputs]");
    check_bad("{\"parameters\":{\"sequence_id\":\"labels\",\"sequence_start\":true},"
              "\"inputs\":[" SEED_IN ",{\"name\":\"tokens_k\",\"datatype\":\"BYTES\","
              "\"shape\":[3],\"data\":[\"a\",\"b\",\"c\"]}],"
              "\"outputs\":[{\"name\":\"tokens_k\"}]}",
              400, "[invalid_field at /outputs]");
    check_bad("{\"inputs\":[" SEED_IN "],\"outputs\":[{\"name\":\"scores\"},"
              "{\"name\":\"output\",\"parameters\":{\"binary_data\":1}}]}", 400,
              "[invalid_field at /outputs/1/parameters/binary_data]");
    check_bad("{\"inputs\":[" SEED_IN "],\"parameters\":{\"softmax\":\"max\"}}",
              400, "/parameters/softmax");
    check_bad("{\"inputs\":[" SEED_IN "],\"parameters\":{\"bogus\":1}}",
              400, "/parameters/bogus");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"mask\",\"datatype\":\"BOOL\","
              "\"shape\":[1,3],\"data\":[1,1,0]}]}", 400, "/inputs/3/data/0");
    check_bad("{\"inputs\":[" SEED_IN ",{\"name\":\"attn_bias\",\"datatype\":\"FP64\","
              "\"shape\":[1,2],\"data\":[0,0]}]}", 400, "/inputs/3/shape");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],"
              "\"data\":[1,0]},{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,3],"
              "\"data\":[1,0,0,1,0,0,1,0,0]},{\"name\":\"v\",\"datatype\":\"FP64\","
              "\"shape\":[3,2],\"data\":[1,0,0,1,0,0]}]}", 400, "/inputs/1/shape");
    check_bad("{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1],"
              "\"data\":[1e39]}]}", 400, "/inputs/0/data/0");
    /* FP32 math holds scale, softcap and sink_logit as floats */
    check_bad("{\"inputs\":[" FP32_IN "],\"parameters\":{\"scale\":1e39}}", 400,
              "/parameters/scale");
    check_bad("{\"inputs\":[" FP32_IN "],\"parameters\":{\"softcap\":1e39}}", 400,
              "/parameters/softcap");
    check_bad("{\"inputs\":[" FP32_IN "],\"parameters\":{\"softmax\":\"sink\","
              "\"sink_logit\":1e39}}", 400, "/parameters/sink_logit");
    check_bad("{\"inputs\":[" SEED_IN ",", 400, NULL);       /* invalid JSON */
    check_bad("{\"inputs\":[]}", 400, "/inputs");

    /* empty_rows error: a fully masked row */
    check_bad("{\"parameters\":{\"empty_rows\":\"error\"},\"inputs\":[" SEED_IN
              ",{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],"
              "\"data\":[false,false,false]}]}", 400, "3 masked; with empty_rows \"zero\" it "
              "would answer 0 [empty_row at /inputs/0]");

    /* method and route errors keep their status, in the v2 shape */
    v2("GET", "/models/attention/infer", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "POST");
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
    v2("GET", "/nothing", NULL, NULL, 0, &r);
    j = t_json(&r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(v2_err(j) != NULL);
    json_decref(j);
    api_response_free(&r);
}

/* window_left, window_right and window_sinks take what /v1's window sides
 * take: an integral real (1.0) is that integer, 1.5 is refused as /v1
 * refuses it. */
TEST(window_sides_take_integral_reals_as_v1)
{
    static const char *const sides[][2] = {
        {"window_left", "left"}, {"window_right", "right"}, {"window_sinks", "sinks"}};

    for (size_t i = 0; i < 3; i++) {
        static const char *const vals[3] = {"1", "1.0", "1.5"};
        json_t *j[3];
        int st[3], v1[3];

        for (int t = 0; t < 3; t++) {
            char b[640], want[128];
            struct api_response r;
            snprintf(b, sizeof b, "{\"parameters\":{\"window_left\":0,\"%s\":%s},"
                     "\"inputs\":[" SEED_IN "]}", sides[i][0], vals[t]);
            if (i == 0)     /* window_left itself, alone */
                snprintf(b, sizeof b, "{\"parameters\":{\"window_left\":%s},"
                         "\"inputs\":[" SEED_IN "]}", vals[t]);
            j[t] = infer(b, &st[t]);
            snprintf(b, sizeof b, "{\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],"
                     "\"v\":[[1,0],[0,1],[0,0]],\"window\":{%s\"%s\":%s}}",
                     i == 0 ? "" : "\"left\":0,", sides[i][1], vals[t]);
            t_call(&ctx, "POST", "/v1/attention", b, &r);
            v1[t] = r.status;
            api_response_free(&r);
            if (t == 2) {
                snprintf(want, sizeof want, "%s must be an integer >= 0 (at most 2^53) "
                         "[invalid_field at /parameters/%s]", sides[i][0], sides[i][0]);
                CHECK(v2_err(j[2]) && strstr(v2_err(j[2]), want));
            }
        }
        CHECK_EQ_INT(v1[0], 200);
        CHECK_EQ_INT(v1[1], 200);
        CHECK_EQ_INT(v1[2], 422);
        CHECK_EQ_INT(st[0], 200);
        CHECK_EQ_INT(st[1], 200);
        CHECK_EQ_INT(st[2], 400);
        CHECK(j[0] && j[1] && json_equal(j[0], j[1]));
        if (st[1] != 200)
            printf("  %s 1.0: %s\n", sides[i][0], v2_err(j[1]) ? v2_err(j[1]) : "?");
        for (int t = 0; t < 3; t++)
            json_decref(j[t]);
    }
}

/* The answer to SEED_IN with softmax "sink" and the input sink_logits [1]
 * of datatype dt: JSON data, or with bin, 2 (or 4) bytes of binary data;
 * q, k and v in datatype qdt. Its status in *st. */
static json_t *sink_infer(const char *qdt, const char *dt, const char *data,
                          const unsigned char *bin, size_t bin_len, int *st)
{
    char body[1024], lenbuf[32], seed[600];
    const char *h[] = {"Content-Type", "application/octet-stream",
                       "Inference-Header-Content-Length", lenbuf, NULL};
    struct api_response r;
    const char *p;
    size_t n, k = 0;
    json_t *j;

    for (p = SEED_IN; *p && k + 1 < sizeof seed; p++) {    /* FP64 -> qdt */
        if (strncmp(p, "FP64", 4) == 0) {
            k += (size_t)snprintf(seed + k, sizeof seed - k, "%s", qdt);
            p += 3;
        } else {
            seed[k++] = *p;
        }
    }
    seed[k] = '\0';
    if (bin)
        n = (size_t)snprintf(body, sizeof body, "{\"parameters\":{\"softmax\":\"sink\"},"
                             "\"inputs\":[%s,{\"name\":\"sink_logits\",\"datatype\":\"%s\","
                             "\"shape\":[1],\"parameters\":{\"binary_data_size\":%zu}}]}",
                             seed, dt, bin_len);
    else
        n = (size_t)snprintf(body, sizeof body, "{\"parameters\":{\"softmax\":\"sink\"},"
                             "\"inputs\":[%s,{\"name\":\"sink_logits\",\"datatype\":\"%s\","
                             "\"shape\":[1],\"data\":%s}]}", seed, dt, data);
    snprintf(lenbuf, sizeof lenbuf, "%zu", n);
    if (bin) {
        memcpy(body + n, bin, bin_len);
        n += bin_len;
    }
    v2("POST", "/models/attention/infer", bin ? h : NULL, body, n, &r);
    *st = r.status;
    j = t_json(&r);
    api_response_free(&r);
    return j;
}

/* sink_logits takes FP16 and BF16 as the biases do (the metadata says
 * so): 2-byte binary values widened exactly, JSON numbers as sent, and in
 * an FP16/BF16 request everything rounded to its format as FP32 logits
 * are; a value the request's format cannot hold is refused at the data. */
TEST(sink_logits_take_fp16_and_bf16)
{
    static const unsigned char f16[2] = {0x80, 0x3D}, bf16[2] = {0xB0, 0x3F};  /* 1.375 */
    static const unsigned char big[2] = {0xC3, 0x47};   /* BF16 99840: beyond float16 */
    static const unsigned char inf[2] = {0x00, 0x7C};   /* FP16 inf */
    struct api_response r;
    json_t *want, *j, *types = NULL;
    int st, st0;

    v2("GET", "/models/attention", NULL, NULL, 0, &r);
    j = t_json(&r);
    for (size_t i = 0; i < json_array_size(json_object_get(j, "inputs")); i++) {
        json_t *t = json_array_get(json_object_get(j, "inputs"), i);
        if (strcmp(json_string_value(json_object_get(t, "name")), "sink_logits") == 0)
            types = json_object_get(json_object_get(t, "parameters"), "datatypes");
    }
    CHECK_EQ_INT(json_array_size(types), 4);
    CHECK_STR(json_string_value(json_array_get(types, 2)), "FP16");
    CHECK_STR(json_string_value(json_array_get(types, 3)), "BF16");
    json_decref(j);
    api_response_free(&r);

    want = sink_infer("FP64", "FP64", "[1.375]", NULL, 0, &st0);
    CHECK_EQ_INT(st0, 200);
    const struct {
        const char *dt, *data;
        const unsigned char *bin;
    } same[] = {{"FP16", NULL, f16}, {"BF16", NULL, bf16}, {"FP16", "[1.375]", NULL},
                {"BF16", "[1.375]", NULL}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        j = sink_infer("FP64", same[i].dt, same[i].data, same[i].bin, 2, &st);
        CHECK_EQ_INT(st, 200);
        CHECK(j && want && json_equal(j, want));
        if (st != 200)
            printf("  %s: %s\n", same[i].dt, v2_err(j) ? v2_err(j) : "?");
        json_decref(j);
    }
    json_decref(want);

    /* an FP16 request: 0.1 rounds to float16 whatever sink_logits' datatype */
    want = sink_infer("FP16", "FP32", "[0.1]", NULL, 0, &st0);
    CHECK_EQ_INT(st0, 200);
    j = sink_infer("FP16", "FP16", "[0.1]", NULL, 0, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(j && want && json_equal(j, want));
    json_decref(j);
    json_decref(want);

    j = sink_infer("FP16", "BF16", NULL, big, 2, &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "element 0 is not a finite number of float16 "
                                         "[non_finite at /inputs/3/data]"));
    json_decref(j);
    j = sink_infer("FP64", "FP16", NULL, inf, 2, &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "[non_finite at /inputs/3/data]"));
    json_decref(j);
}

TEST(element_budget)
{
    int st;
    size_t saved = ctx.cfg.max_elements;
    json_t *j;

    ctx.cfg.max_elements = 10;
    j = infer("{\"inputs\":[" SEED_IN "]}", &st);   /* 14 input numbers */
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "limit_exceeded"));
    json_decref(j);
    ctx.cfg.max_elements = saved;
}

/* FP32 data reads as /v1's float32 does: rounded first, refused only when
 * it rounds past the range. 3.4028235e+38, the shortest text of FLT_MAX
 * (what attnd prints for it, as the output here), lies above FLT_MAX
 * and must be taken. */
TEST(fp32_data_at_the_range_rounds_first)
{
    static const char *const fmt = "{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[0]},"
        "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[0]},"
        "{\"name\":\"v\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[%s,%s]}],"
        "\"outputs\":[{\"name\":\"output\"}]}";
    static const char *const wires[] = {"FP32", "FP64"};
    char body[512];
    int st;

    for (int w = 0; w < 2; w++) {
        snprintf(body, sizeof body, fmt, wires[w], "3.4028235e+38", "-3.4028235e38");
        json_t *j = infer(body, &st);
        json_t *o = output(j, "output");
        CHECK_EQ_INT(st, 200);
        CHECK((float)dat(o, 0) == FLT_MAX && (float)dat(o, 1) == -FLT_MAX);
        json_decref(j);

        /* just past the midpoint between FLT_MAX and 2^128: infinity */
        snprintf(body, sizeof body, fmt, wires[w], "1", "3.4028235677973367e38");
        j = infer(body, &st);
        CHECK_EQ_INT(st, 400);
        CHECK(v2_err(j) && strstr(v2_err(j), "[non_finite at /inputs/2/data/1]"));
        json_decref(j);
    }
}

/* An INT64 (or INT32) element past 64 bits is named as such, not as a
 * non-integer: jansson reads such a literal as a real. */
TEST(int_data_past_64_bits_says_so)
{
    static const char *const fmt = "{\"inputs\":["
        "{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"
        "{\"name\":\"k\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,0]},"
        "{\"name\":\"v\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]},"
        "{\"name\":\"positions_q\",\"datatype\":\"%s\",\"shape\":[1],\"data\":[%s]}],"
        "\"parameters\":{\"rope_base\":10000}}";
    static const char *const big[] = {"9223372036854775808", "-9223372036854775809",
                                      "18446744073709551616"};
    char body[512];
    int st;

    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
            snprintf(body, sizeof body, fmt, w ? "INT32" : "INT64", big[i]);
            json_t *j = infer(body, &st);
            CHECK_EQ_INT(st, 400);
            CHECK(v2_err(j) && strstr(v2_err(j), "past INT64's range") &&
                  strstr(v2_err(j), "[invalid_field at /inputs/3/data/0]"));
            json_decref(j);
        }
    snprintf(body, sizeof body, fmt, "INT64", "1.0");
    json_t *j = infer(body, &st);
    CHECK_EQ_INT(st, 400);
    CHECK(v2_err(j) && strstr(v2_err(j), "must be integers"));
    json_decref(j);
}

/* The reply's datatype: the request's half type when q, k and v came in
 * one, else its computation's. */
TEST(datatype_names)
{
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_NONE), "FP32");
    CHECK_STR(api_v2_datatype_name(ATTN_F64, API_HALF_NONE), "FP64");
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_F16), "FP16");
    CHECK_STR(api_v2_datatype_name(ATTN_F32, API_HALF_BF16), "BF16");
}

int main(void)
{
    if (!v2t_setup())
        return 1;
    RUN(server_metadata_and_health);
    RUN(model_metadata);
    RUN(infer_seed_example);
    RUN(integer_literals_beyond_64_bits);
    RUN(nested_data_equals_flat_and_fp32);
    RUN(bias_and_parameters);
    RUN(null_members_are_absent);
    RUN(attn_bias_null_and_mask);
    RUN(three_d_heads);
    RUN(errors_in_v2_shape);
    RUN(compressed_body_is_refused_as_such);
    RUN(body_names_the_model_as_kserve_sends_it);
    RUN(window_sides_take_integral_reals_as_v1);
    RUN(sink_logits_take_fp16_and_bf16);
    RUN(element_budget);
    RUN(fp32_data_at_the_range_rounds_first);
    RUN(int_data_past_64_bits_says_so);
    RUN(datatype_names);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
