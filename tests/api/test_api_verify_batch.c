/*
 * tests/api/test_api_verify_batch.c — POST /v1/verify with heads (rank-3 q)
 * and batches (rank-4 q, GQA k/v) in-process: every element of the batch
 * report equals the report of the one-head request built here from that
 * element's slices (its q head, its kv head's k and v, its bias rows, its
 * batch element's positions and segments, its sink logit), the overall
 * verdict and the "failed" list agree with the elements, and a half
 * overflow names the element's value by its JSON pointer.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;

/* POST body (a json_t, consumed) to /v1/verify; the parsed answer. */
static json_t *post(json_t *body, int *status)
{
    struct api_response r;
    char *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_t *j;

    json_decref(body);
    t_call(&ctx, "POST", "/v1/verify", text, &r);
    free(text);
    *status = r.status;
    j = t_json(&r);
    if (r.status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    api_response_free(&r);
    return j;
}

/* Numbers with two decimals, reproducible: x_i of a small LCG in [-1, 1]. */
static double num(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (double)((int)((*seed >> 16) % 201) - 100) / 100.0;
}

static json_t *vec(unsigned *seed, size_t cols)
{
    json_t *a = json_array();
    for (size_t j = 0; j < cols; j++)
        json_array_append_new(a, json_real(num(seed)));
    return a;
}

static json_t *mat(unsigned *seed, size_t rows, size_t cols)
{
    json_t *a = json_array();
    for (size_t i = 0; i < rows; i++)
        json_array_append_new(a, vec(seed, cols));
    return a;
}

/* [outer][rows][cols] */
static json_t *heads(unsigned *seed, size_t outer, size_t rows, size_t cols)
{
    json_t *a = json_array();
    for (size_t i = 0; i < outer; i++)
        json_array_append_new(a, mat(seed, rows, cols));
    return a;
}

static json_t *ints(const int *x, size_t count)
{
    json_t *a = json_array();
    for (size_t i = 0; i < count; i++)
        json_array_append_new(a, json_integer(x[i]));
    return a;
}

/* a[i] of a nested array, a new reference. */
static json_t *at(const json_t *a, size_t i)
{
    return json_incref(json_array_get(a, i));
}

/* The batch's passed and failed against its elements' checks. */
static void check_verdicts(const json_t *j, bool want_failure)
{
    const json_t *els = json_object_get(j, "elements"), *failed = json_object_get(j, "failed");
    bool all = true;
    size_t e, f = 0, n_failed = 0;
    json_t *el;

    json_array_foreach(els, e, el) {
        bool ok = json_is_true(json_object_get(el, "passed"));
        all = all && ok;
        if (ok)
            continue;
        n_failed++;
        const json_t *fe = json_array_get(failed, f++), *ids = json_object_get(fe, "checks");
        CHECK(json_equal(json_object_get(fe, "head"), json_object_get(el, "head")));
        CHECK(json_equal(json_object_get(fe, "kv_head"), json_object_get(el, "kv_head")));
        const json_t *fb = json_object_get(fe, "batch"), *eb = json_object_get(el, "batch");
        CHECK(fb ? eb && json_equal(fb, eb) : !eb);
        size_t i, k = 0;
        json_t *ck;
        json_array_foreach(json_object_get(el, "checks"), i, ck)
            if (!json_is_true(json_object_get(ck, "passed")))
                CHECK(json_equal(json_array_get(ids, k++), json_object_get(ck, "id")));
        CHECK_EQ_INT(k, json_array_size(ids));
    }
    CHECK_EQ_INT(json_array_size(failed), n_failed);
    CHECK(json_is_boolean(json_object_get(j, "passed")));
    CHECK_EQ_INT(json_is_true(json_object_get(j, "passed")), all);
    CHECK_EQ_INT(n_failed > 0, want_failure);
}

enum { B = 2, H = 4, HKV = 2, N = 3, L = 4, DK = 4, DV = 2 };

/* A rank-4 GQA batch with every per-head and per-element option; each of
 * its B*H elements equals the one-head request of its slices. */
TEST(batch_equals_one_head_reports)
{
    unsigned seed = 7;
    json_t *q = json_array(), *k = json_array(), *v = json_array();
    for (int b = 0; b < B; b++) {
        json_array_append_new(q, heads(&seed, H, N, DK));
        json_array_append_new(k, heads(&seed, HKV, L, DK));
        json_array_append_new(v, heads(&seed, HKV, L, DV));
    }
    json_t *bq = mat(&seed, H, DK), *bk = mat(&seed, HKV, DK), *bv = vec(&seed, DV);
    static const int pq[B][N] = {{4, 9, 6}, {1, 2, 3}}, pk[L] = {0, 3, 5, 8};
    static const int sq[B][N] = {{1, 0, 1}, {0, 0, 0}}, sk[B][L] = {{0, 1, 1, 0}, {0, 0, 1, 0}};
    static const double sinks[H] = {0.25, -2, 0, 1.5};
    json_t *sinks_j = json_array();
    for (int h = 0; h < H; h++)
        json_array_append_new(sinks_j, json_real(sinks[h]));
    json_t *opts = json_pack("{s:{s:i,s:i},s:f,s:s,s:{s:f,s:i,s:{s:s,s:f}}}",
                             "window", "left", 4, "sinks", 1, "softcap", 1.5, "softmax", "sink",
                             "rope", "base", 500.0, "dims", 2, "scaling", "type", "linear",
                             "factor", 2.0);
    json_t *body = json_deep_copy(opts);
    json_object_set(body, "q", q);
    json_object_set(body, "k", k);
    json_object_set(body, "v", v);
    json_object_set_new(body, "bias", json_pack("{s:O,s:O,s:O}", "q", bq, "k", bk, "v", bv));
    json_t *pq_j = json_array(), *sq_j = json_array(), *sk_j = json_array();
    for (int b = 0; b < B; b++) {
        json_array_append_new(pq_j, ints(pq[b], N));
        json_array_append_new(sq_j, ints(sq[b], N));
        json_array_append_new(sk_j, ints(sk[b], L));
    }
    json_object_set_new(body, "positions", json_pack("{s:o,s:o}", "q", pq_j, "k", ints(pk, L)));
    json_object_set_new(body, "segments", json_pack("{s:o,s:o}", "q", sq_j, "k", sk_j));
    json_object_set(body, "sink_logit", sinks_j);

    int st;
    json_t *j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "rank")), 4);
    json_t *shape = json_object_get(j, "shape");
    CHECK_EQ_INT(json_integer_value(json_object_get(shape, "batch")), B);
    CHECK_EQ_INT(json_integer_value(json_object_get(shape, "heads")), H);
    CHECK_EQ_INT(json_integer_value(json_object_get(shape, "kv_heads")), HKV);
    CHECK_EQ_INT(json_integer_value(json_object_get(shape, "d_v")), DV);
    CHECK(json_object_get(j, "checks") == NULL);
    json_t *els = json_object_get(j, "elements");
    CHECK_EQ_INT(json_array_size(els), B * H);
    check_verdicts(j, false);
    for (int e = 0; e < B * H && json_array_size(els) == B * H; e++) {
        int b = e / H, h = e % H, g = h / (H / HKV);
        json_t *one = json_deep_copy(opts), *qb = json_array_get(q, (size_t)b);
        json_object_set_new(one, "q", at(qb, (size_t)h));
        json_object_set_new(one, "k", at(json_array_get(k, (size_t)b), (size_t)g));
        json_object_set_new(one, "v", at(json_array_get(v, (size_t)b), (size_t)g));
        json_object_set_new(one, "bias", json_pack("{s:o,s:o,s:O}", "q", at(bq, (size_t)h),
                                                   "k", at(bk, (size_t)g), "v", bv));
        json_object_set_new(one, "positions", json_pack("{s:o,s:o}", "q", ints(pq[b], N),
                                                        "k", ints(pk, L)));
        json_object_set_new(one, "segments", json_pack("{s:o,s:o}", "q", ints(sq[b], N),
                                                       "k", ints(sk[b], L)));
        json_object_set_new(one, "sink_logit", json_pack("[f]", sinks[h]));
        int st1;
        json_t *rep = post(one, &st1);
        CHECK_EQ_INT(st1, 200);
        json_object_del(rep, "elapsed_us");
        json_t *el = json_deep_copy(json_array_get(els, (size_t)e));
        CHECK_EQ_INT(json_integer_value(json_object_get(el, "batch")), b);
        CHECK_EQ_INT(json_integer_value(json_object_get(el, "head")), h);
        CHECK_EQ_INT(json_integer_value(json_object_get(el, "kv_head")), g);
        json_object_del(el, "batch");
        json_object_del(el, "head");
        json_object_del(el, "kv_head");
        CHECK(json_equal(el, rep));
        if (!json_equal(el, rep))
            printf("  element %d differs from its one-head report\n", e);
        CHECK(json_is_true(json_object_get(rep, "passed")));
        json_decref(el);
        json_decref(rep);
    }
    json_decref(j);
    json_decref(opts);
    json_decref(q);
    json_decref(k);
    json_decref(v);
    json_decref(bq);
    json_decref(bk);
    json_decref(bv);
    json_decref(sinks_j);
}

/* Rank-3 heads in float32, shared bias vectors and a single sink logit:
 * the elements equal one-head float32 requests; no "batch" index. */
TEST(heads_equal_one_head_reports)
{
    unsigned seed = 11;
    json_t *q = heads(&seed, 3, 2, 2), *k = heads(&seed, 1, 3, 2), *v = heads(&seed, 1, 3, 1);
    json_t *bias = json_pack("{s:o}", "k", vec(&seed, 2));
    json_t *body = json_pack("{s:O,s:O,s:O,s:O,s:s,s:s,s:f}", "q", q, "k", k, "v", v, "bias",
                             bias, "dtype", "float32", "softmax", "sink", "sink_logit", 0.5);
    int st;
    json_t *j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "rank")), 3);
    CHECK(json_object_get(json_object_get(j, "shape"), "batch") == NULL);
    CHECK_STR(json_string_value(json_object_get(j, "dtype")), "float32");
    json_t *els = json_object_get(j, "elements");
    CHECK_EQ_INT(json_array_size(els), 3);
    check_verdicts(j, false);
    for (size_t h = 0; h < json_array_size(els); h++) {
        json_t *one = json_pack("{s:o,s:o,s:o,s:O,s:s,s:s,s:f}", "q", at(q, h), "k", at(k, 0),
                                "v", at(v, 0), "bias", bias, "dtype", "float32", "softmax",
                                "sink", "sink_logit", 0.5);
        int st1;
        json_t *rep = post(one, &st1);
        json_t *el = json_deep_copy(json_array_get(els, h));
        CHECK(json_object_get(el, "batch") == NULL);
        CHECK_EQ_INT(json_integer_value(json_object_get(el, "kv_head")), 0);
        json_object_del(el, "head");
        json_object_del(el, "kv_head");
        json_object_del(rep, "elapsed_us");
        CHECK(json_equal(el, rep));
        json_decref(el);
        json_decref(rep);
    }
    json_decref(j);
    json_decref(q);
    json_decref(k);
    json_decref(v);
    json_decref(bias);
}

/* A tolerance below float32's rounding fails checks: "failed" names each
 * failing element and exactly its failing checks; passed is false. */
TEST(failed_lists_the_failing_checks)
{
    unsigned seed = 5;
    json_t *body = json_pack("{s:o,s:o,s:o,s:s,s:f}", "q", heads(&seed, 2, 3, 2), "k",
                             heads(&seed, 2, 4, 2), "v", heads(&seed, 2, 4, 2), "dtype",
                             "float32", "tolerance", 1e-300);
    int st;
    json_t *j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_is_false(json_object_get(j, "passed")));
    check_verdicts(j, true);
    json_decref(j);
}

/* A float16 batch whose second head's scores pass 65504: 422 non_finite at
 * that value's pointer in the report that was not sent. */
TEST(half_overflow_names_the_element)
{
    struct api_response r;
    t_call(&ctx, "POST", "/v1/verify", "{\"q\":[[[1,0]],[[300,300]]],\"k\":[[[300,300],[0,1]]],"
           "\"v\":[[[1],[2]]],\"dtype\":\"float16\"}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "non_finite");
    CHECK_STR(t_err_path(&r), "/elements/1/checks/0/data/scores_core/0/0");
    api_response_free(&r);
    t_call(&ctx, "POST", "/v1/verify", "{\"q\":[[1,0],[300,300]],\"k\":[[300,300],[0,1]],"
           "\"v\":[[1],[2]],\"dtype\":\"float16\"}", &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_path(&r), "/checks/0/data/scores_core/1/0");
    api_response_free(&r);
}

/* Numbers in a JSON value (booleans are not numbers). */
static size_t numbers_in(const json_t *v)
{
    size_t count = json_is_number(v);

    for (void *it = json_object_iter((json_t *)v); it;
         it = json_object_iter_next((json_t *)v, it))
        count += numbers_in(json_object_iter_value(it));
    for (size_t i = 0; i < json_array_size(v); i++)    /* 0 unless an array */
        count += numbers_in(json_array_get(v, i));
    return count;
}

/* What --max-elements counts of a verify answer: every report's checks'
 * data, tables and inputs echo. */
static size_t report_numbers(const json_t *rep)
{
    const json_t *els = json_object_get(rep, "elements"), *x;
    size_t i, count = 0;

    if (els) {
        json_array_foreach(els, i, x)
            count += report_numbers(x);
        return count;
    }
    count = numbers_in(json_object_get(rep, "inputs")) +
            numbers_in(json_object_get(rep, "table"));
    json_array_foreach(json_object_get(rep, "checks"), i, x)
        count += numbers_in(json_object_get(x, "data"));
    return count;
}

/* Limits count every head: the numbers of all elements against
 * --max-elements (response_too_large at /q), and at most 1024 heads. */
TEST(limits_count_every_head)
{
    size_t saved = ctx.cfg.max_elements;
    struct api_response r;
    static const char one[] = "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]]}";
    static const char four[] = "{\"q\":[[[[1,0]],[[0,1]]],[[[1,1]],[[1,0]]]],"
                               "\"k\":[[[[1,0],[0,1]]],[[[1,0],[0,1]]]],"
                               "\"v\":[[[[1],[2]]],[[[1],[2]]]]}";
    t_call(&ctx, "POST", "/v1/verify", one, &r);
    CHECK_EQ_INT(r.status, 200);
    json_t *rep = t_json(&r);
    api_response_free(&r);
    ctx.cfg.max_elements = report_numbers(rep);    /* one head fits, four heads do not */
    json_decref(rep);
    t_call(&ctx, "POST", "/v1/verify", one, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    t_call(&ctx, "POST", "/v1/verify", four, &r);
    CHECK_EQ_INT(r.status, 422);
    CHECK_STR(t_err_code(&r), "response_too_large");
    CHECK_STR(t_err_path(&r), "/q");
    api_response_free(&r);
    ctx.cfg.max_elements = saved;
    t_call(&ctx, "POST", "/v1/verify", four, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);

    /* 1025 heads of one number each */
    json_t *q = json_array();
    for (int h = 0; h < 1025; h++)
        json_array_append_new(q, json_pack("[[i]]", 1));
    int st;
    json_t *j = post(json_pack("{s:o,s:[[[i]]],s:[[[i]]]}", "q", q, "k", 1, "v", 1), &st);
    CHECK_EQ_INT(st, 422);
    json_t *err = json_object_get(j, "error");
    CHECK_STR(json_string_value(json_object_get(err, "code")), "limit_exceeded");
    CHECK_STR(json_string_value(json_object_get(err, "path")), "/q");
    json_decref(j);
}

/* Before running, verify counts the numbers its report will hold: a limit
 * of exactly that many answers 200, one fewer 422 response_too_large
 * naming the count, for one head with every option, heads with GQA and
 * per-head biases and sinks, a float16 batch; a limit the old bound (96
 * arrays of the largest shape, 5 to 7 times the report) refused. */
TEST(limit_counts_what_the_report_holds)
{
    size_t saved = ctx.cfg.max_elements;
    unsigned seed = 5;
    json_t *bodies[4];
    static const int pq[3] = {4, 5, 6}, pk[5] = {0, 1, 2, 3, 5}, sq[3] = {0, 0, 1},
                     sk[5] = {0, 1, 0, 1, 1}, pq2[2][3] = {{1, 2, 3}, {5, 6, 7}},
                     pk2[2][4] = {{0, 1, 2, 3}, {2, 3, 4, 5}};

    bodies[0] = json_pack("{s:o,s:o,s:o,s:{s:o,s:o,s:o},s:s,s:[f,f],s:{s:s,s:i,s:{s:s,s:i}},"
                          "s:{s:o,s:o},s:{s:o,s:o},s:{s:i,s:i},s:f}",
                          "q", mat(&seed, 3, 4), "k", mat(&seed, 5, 4), "v", mat(&seed, 5, 2),
                          "bias", "q", vec(&seed, 4), "k", vec(&seed, 4), "v", vec(&seed, 2),
                          "softmax", "sink", "sink_logit", 0.5, -1.0, "rope", "pairs", "half",
                          "dims", 2, "scaling", "type", "linear", "factor", 2, "positions",
                          "q", ints(pq, 3), "k", ints(pk, 5), "segments", "q", ints(sq, 3),
                          "k", ints(sk, 5), "window", "left", 2, "sinks", 1, "softcap", 5.0);
    bodies[1] = json_pack("{s:o,s:o,s:o,s:s}", "q", mat(&seed, 8, 8), "k", mat(&seed, 8, 8),
                          "v", mat(&seed, 8, 8), "dtype", "float32");
    bodies[2] = json_pack("{s:o,s:o,s:o,s:{s:o,s:o},s:s,s:[f,f,f,f]}", "q",
                          heads(&seed, 4, 2, 4), "k", heads(&seed, 2, 6, 4), "v",
                          heads(&seed, 2, 6, 3), "bias", "q", mat(&seed, 4, 4), "k",
                          mat(&seed, 2, 4), "softmax", "sink", "sink_logit", 0.0, 1.0, -2.0, 3.0);
    json_t *q4 = json_pack("[o,o]", heads(&seed, 2, 3, 2), heads(&seed, 2, 3, 2));
    json_t *k4 = json_pack("[o,o]", heads(&seed, 1, 4, 2), heads(&seed, 1, 4, 2));
    json_t *v4 = json_pack("[o,o]", heads(&seed, 1, 4, 2), heads(&seed, 1, 4, 2));
    bodies[3] = json_pack("{s:o,s:o,s:o,s:s,s:{s:[o,o],s:[o,o]},s:{s:o}}", "q", q4, "k", k4,
                          "v", v4, "dtype", "float16", "positions", "q", ints(pq2[0], 3),
                          ints(pq2[1], 3), "k", ints(pk2[0], 4), ints(pk2[1], 4),
                          "bias", "v", vec(&seed, 2));
    for (size_t b = 0; b < 4; b++) {
        int st;
        char numbers[64];
        CHECK(bodies[b] != NULL);
        if (!bodies[b])
            continue;
        ctx.cfg.max_elements = saved;
        json_t *j = post(json_incref(bodies[b]), &st);
        CHECK_EQ_INT(st, 200);
        size_t count = report_numbers(j);
        json_decref(j);
        ctx.cfg.max_elements = count;
        j = post(json_incref(bodies[b]), &st);
        CHECK_EQ_INT(st, 200);
        json_decref(j);
        ctx.cfg.max_elements = count - 1;
        j = post(json_incref(bodies[b]), &st);
        CHECK_EQ_INT(st, 422);
        json_t *err = json_object_get(j, "error");
        const char *msg = json_string_value(json_object_get(err, "message"));
        CHECK_STR(json_string_value(json_object_get(err, "code")), "response_too_large");
        snprintf(numbers, sizeof numbers, " %zu numbers (", count);     /* or "at least" */
        CHECK(msg && strstr(msg, numbers));
        if (getenv("TEST_VERBOSE"))
            printf("  body %zu: %zu numbers; %s\n", b, count, msg ? msg : "");
        json_decref(j);
        json_decref(bodies[b]);
    }
    ctx.cfg.max_elements = saved;
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(batch_equals_one_head_reports);
    RUN(heads_equal_one_head_reports);
    RUN(failed_lists_the_failing_checks);
    RUN(half_overflow_names_the_element);
    RUN(limits_count_every_head);
    RUN(limit_counts_what_the_report_holds);
    TEST_MAIN_END();
}
