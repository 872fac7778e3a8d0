/*
 * tests/api/test_api_json_cost.c — what reading a JSON body may cost
 * (api/body.c): api_json_read_cost is an upper bound of the bytes jansson
 * holds at its peak while reading a text (counted here by jansson's own
 * allocation hooks, each block as glibc's chunk of it), for texts of every
 * kind of value, and not a loose one for arrays of numbers; a body whose
 * tree would cost more than its allowance is refused with 422
 * limit_exceeded before jansson reads it, on every route that reads JSON
 * (/v1/attention beside its fast arrays, sessions, /v2 infer); and a body
 * of --max-elements numbers in nested JSON arrays still fits, in rows of
 * sixteen, two or one.
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/internal.h"
#include "core/store.h"

static struct api_ctx ctx;

/* jansson's bytes now and at their peak, as glibc chunks (usable size and
 * the 8-byte header). Single-threaded: every call here is on this thread. */
static size_t live, peak;

static void *count_malloc(size_t n)
{
    void *p = malloc(n);
    if (p) {
        live += malloc_usable_size(p) + 8;
        if (live > peak)
            peak = live;
    }
    return p;
}

static void count_free(void *p)
{
    if (p)
        live -= malloc_usable_size(p) + 8;
    free(p);
}

/* The peak of jansson's bytes while it reads text (the tree freed after). */
static size_t read_peak(const char *text, size_t n)
{
    json_error_t err;
    size_t before = live;
    peak = live;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    CHECK(root != NULL);
    size_t got = peak - before;
    json_decref(root);
    return got;
}

/* {"x":[item,item,...]} with count items. */
static char *repeated(const char *item, size_t count, size_t *len)
{
    struct t_body b = {0};
    t_body_puts(&b, "{\"x\":[");
    for (size_t i = 0; i < count; i++) {
        if (i)
            t_body_puts(&b, ",");
        t_body_puts(&b, item);
    }
    t_body_puts(&b, "]}");
    *len = b.len;
    return b.p;
}

/* {"k0":0,"k1":1,...}: one object of count members. */
static char *wide_object(size_t count, size_t *len)
{
    struct t_body b = {0};
    char item[48];
    t_body_puts(&b, "{");
    for (size_t i = 0; i < count; i++) {
        snprintf(item, sizeof item, "%s\"k%zu\":%zu", i ? "," : "", i, i);
        t_body_puts(&b, item);
    }
    t_body_puts(&b, "}");
    *len = b.len;
    return b.p;
}

/* {"s":"AAAA..."}: one string of n characters. */
static char *long_string(size_t n, size_t *len)
{
    char *p = malloc(n + 16);
    memcpy(p, "{\"s\":\"", 6);
    memset(p + 6, 'A', n);
    memcpy(p + 6 + n, "\"}", 3);
    *len = n + 8;
    return p;
}

/* A session append of rows x d numbers in each of k and v over heads
 * heads, as nested JSON arrays. */
static char *kv_body(size_t heads, size_t rows, size_t d, size_t *len)
{
    struct t_body b = {0};
    char num[32];
    uint64_t state = 11;
    for (int t = 0; t < 2; t++) {
        t_body_puts(&b, t ? ",\"v\":[" : "{\"k\":[");
        for (size_t h = 0; h < heads; h++) {
            t_body_puts(&b, h ? ",[" : "[");
            for (size_t r = 0; r < rows; r++) {
                t_body_puts(&b, r ? ",[" : "[");
                for (size_t j = 0; j < d; j++) {
                    double x = (double)(t_rng_next(&state) >> 11) / 9007199254740992.0;
                    snprintf(num, sizeof num, "%s%.6f", j ? "," : "", x * 2 - 1);
                    t_body_puts(&b, num);
                }
                t_body_puts(&b, "]");
            }
            t_body_puts(&b, "]");
        }
        t_body_puts(&b, "]");
    }
    t_body_puts(&b, "}");
    *len = b.len;
    return b.p;
}

TEST(cost_bounds_what_jansson_holds)
{
    static const char *const items[] = {
        "{}", "[]", "0", "-1.5e-7", "123456789012", "\"\"", "\"abcdefgh\"",
        "\"a\\u00e9\\n\"", "{\"a\":1}", "{\"a\":1,\"b\":[2,3],\"c\":{\"d\":null}}",
        "[0]", "[[1,2],[3,4]]", "null", "true", "false", "[{},[],\"\",0]", NULL};
    size_t len;
    for (int i = 0; items[i]; i++) {
        char *text = repeated(items[i], 20000, &len);
        size_t got = read_peak(text, len), cost = api_json_read_cost(text, len);
        if (got > cost)
            fprintf(stderr, "  %s x 20000: jansson held %zu, the bound says %zu\n", items[i],
                    got, cost);
        CHECK(got <= cost);
        free(text);
    }
    char *text = wide_object(100000, &len);
    CHECK(read_peak(text, len) <= api_json_read_cost(text, len));
    free(text);
    text = long_string((size_t)3 << 20, &len);      /* a base64 tensor's string */
    CHECK(read_peak(text, len) <= api_json_read_cost(text, len));
    free(text);
    text = kv_body(4, 300, 16, &len);
    CHECK(read_peak(text, len) <= api_json_read_cost(text, len));
    free(text);
    /* an array just past a power of two: its old and new tables both held */
    for (size_t n = (1u << 16) + 1; n <= (1u << 18) + 1; n = (n - 1) * 2 + 1) {
        text = repeated("0.5", n, &len);
        CHECK(read_peak(text, len) <= api_json_read_cost(text, len));
        free(text);
    }
}

TEST(cost_of_numbers_is_not_loose)
{
    size_t len;
    char *text = repeated("0.125", 200000, &len);
    size_t got = read_peak(text, len), cost = api_json_read_cost(text, len);
    CHECK(got <= cost && cost <= 2 * got);
    free(text);
}

/* Status of one request; jansson's peak during it into *held, and
 * whether its answer is the cost's refusal into *refused. */
static int post(const char *path, const char *body, size_t len, size_t *held, bool *refused)
{
    struct api_response r;
    peak = live;
    size_t before = live;
    t_call_n(&ctx, "POST", path, NULL, body, len, &r);
    *held = peak - before;
    int st = r.status;
    if (st != 200 && getenv("TEST_VERBOSE"))
        printf("  %s: %d %.*s\n", path, st, (int)r.body_len, r.body ? r.body : "");
    *refused = r.body && memmem(r.body, r.body_len, "MiB to read", 11) != NULL &&
               memmem(r.body, r.body_len, "limit_exceeded", 14) != NULL;
    api_response_free(&r);
    return st;
}

TEST(costly_bodies_refused_before_jansson_reads_them)
{
    ctx.cfg.max_elements = 4096;    /* allowed: 256 KiB + 4 per byte */
    size_t len, held;
    bool refused;
    char *objs = repeated("{}", 100000, &len);  /* 300 KB of text, ~23 MB of tree */
    struct t_body b = {0};
    /* /v1/attention: q, k, v read by the fast reader, x left for jansson */
    t_body_put(&b, objs, len - 1);
    t_body_puts(&b, ",\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1,0],[0,1]]}");
    CHECK_EQ_INT(post("/v1/attention", b.p, b.len, &held, &refused), 422);
    CHECK(refused && held < ((size_t)1 << 20));
    /* a session's creation: the whole body through jansson */
    b.len = 0;
    t_body_puts(&b, "{\"d_k\":2,\"d_v\":2,");
    t_body_put(&b, objs + 1, len - 1);
    CHECK_EQ_INT(post("/v1/sessions", b.p, b.len, &held, &refused), 422);
    CHECK(refused && held < ((size_t)1 << 20));
    /* OIP v2 JSON inference (whose errors are all 400) */
    CHECK_EQ_INT(post("/v2/models/attention/infer", objs, len, &held, &refused), 400);
    CHECK(refused && held < ((size_t)1 << 20));
    free(objs);
    /* the same kind of body, small: read, then refused for what it says */
    objs = repeated("{}", 100, &len);
    CHECK_EQ_INT(post("/v1/sessions", objs, len, &held, &refused), 422);
    CHECK(!refused);
    free(objs);
    free(b.p);
    ctx.cfg.max_elements = 1 << 20;
}

/* A session of `heads` heads of width d, and one append of 4096 rows: k and
 * v hold 2^20 numbers, --max-elements of t_ctx_init, in nested arrays. */
static void nested_append_fits(size_t heads, size_t d)
{
    struct api_response r;
    char spec[160], path[160];
    snprintf(spec, sizeof spec, "{\"d_k\":%zu,\"d_v\":%zu,\"heads\":%zu,\"kv_heads\":%zu,"
             "\"max_tokens\":4096}", d, d, heads, heads);
    t_call(&ctx, "POST", "/v1/sessions", spec, &r);
    CHECK_EQ_INT(r.status, 201);
    json_t *j = t_json(&r);
    snprintf(path, sizeof path, "/v1/sessions/%s/kv",
             json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_response_free(&r);
    size_t len, held;
    bool refused;
    char *body = kv_body(heads, 4096, d, &len);
    CHECK_EQ_INT(post(path, body, len, &held, &refused), 200);
    CHECK(!refused);
    free(body);
}

TEST(max_elements_of_nested_numbers_fit)
{
    size_t old_body = ctx.cfg.max_body_bytes;
    ctx.cfg.max_body_bytes = (size_t)64 << 20;
    nested_append_fits(8, 16);
    if (!t_quick())                 /* memcheck, qemu: the two ends only */
        nested_append_fits(64, 2);  /* rows of two: an array per two numbers */
    nested_append_fits(128, 1);     /* rows of one: an array per number */
    ctx.cfg.max_body_bytes = old_body;
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    json_set_alloc_funcs(count_malloc, count_free);
    t_ctx_init(&ctx);
    ctx.store = sess_store_new(&cfg);
    RUN(cost_bounds_what_jansson_holds);
    RUN(cost_of_numbers_is_not_loose);
    RUN(costly_bodies_refused_before_jansson_reads_them);
    RUN(max_elements_of_nested_numbers_fit);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
