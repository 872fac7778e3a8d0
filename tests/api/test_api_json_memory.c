/*
 * tests/api/test_api_json_memory.c — a JSON body read when memory cannot
 * be found for it (api/body.c): jansson calls an allocation that failed
 * inside a string "invalid token", and attnd answered such a valid body 400
 * invalid_json, which a client does not retry. Here jansson's allocator
 * (under the api's hook, which keeps the allocator it finds) refuses every
 * block of 1 MiB or more: a body holding a 2 MiB string is 503
 * capacity_exhausted with Retry-After, whether jansson reads the whole body
 * (a session create) or what /v1/attention's fast reader leaves of it; the
 * read stops asking for memory at its first failure (jansson asked again
 * for every byte of the string); and with memory back the same bodies are
 * read, and refused for what they say (422 at their unknown member). When
 * no JSON can be built at all, not even the error's, the answer is still
 * 503 capacity_exhausted with Retry-After (it was 500 internal, which
 * tells a client not to retry).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "core/store.h"

static struct api_ctx ctx;

/* Blocks of fail_from bytes or more are refused while fail_from is set;
 * refused counts the requests for them. Single-threaded. */
static size_t fail_from, refused;

static void *small_malloc(size_t n)
{
    if (fail_from && n >= fail_from) {
        refused++;
        return NULL;
    }
    return malloc(n);
}

/* {"<head>...,"x":"AAAA…"} with a string of n bytes, NUL-terminated. */
static char *body_with_string(const char *head, size_t n)
{
    size_t h = strlen(head);
    char *b = malloc(h + n + 8);
    memcpy(b, head, h);
    memcpy(b + h, "\"x\":\"", 5);
    memset(b + h + 5, 'A', n);
    memcpy(b + h + 5 + n, "\"}", 3);
    return b;
}

static void check_refused_then_read(const char *path, const char *head)
{
    char *body = body_with_string(head, (size_t)2 << 20);
    struct api_response r;

    fail_from = (size_t)1 << 20;
    refused = 0;
    t_call(&ctx, "POST", path, body, &r);
    fail_from = 0;
    CHECK_EQ_INT(r.status, 503);
    CHECK(strcmp(t_err_code(&r), "capacity_exhausted") == 0);
    CHECK(t_hdr(&r, "Retry-After") && strcmp(t_hdr(&r, "Retry-After"), "1") == 0);
    CHECK(refused >= 1 && refused <= 2);    /* not once more per byte */
    api_response_free(&r);

    t_call(&ctx, "POST", path, body, &r);   /* memory back: read, then refused */
    CHECK_EQ_INT(r.status, 422);
    CHECK(strcmp(t_err_code(&r), "invalid_field") == 0);
    CHECK(strcmp(t_err_path(&r), "/x") == 0);
    api_response_free(&r);
    free(body);
}

TEST(a_body_jansson_cannot_find_memory_for_is_503)
{
    check_refused_then_read("/v1/sessions", "{\"d_k\":2,\"d_v\":2,");
}

TEST(what_the_fast_reader_leaves_is_503_too)
{
    check_refused_then_read("/v1/attention",
                            "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1,2],[3,4]],");
}

TEST(a_small_body_reads_while_large_blocks_fail)
{
    struct api_response r;

    fail_from = (size_t)1 << 20;
    t_call(&ctx, "POST", "/v1/attention",
           "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1,2],[3,4]],\"digits\":3}", &r);
    fail_from = 0;
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

static void check_no_memory(const struct api_response *r)
{
    CHECK_EQ_INT(r->status, 503);
    CHECK(strcmp(t_err_code(r), "capacity_exhausted") == 0);
    CHECK(t_hdr(r, "Retry-After") && strcmp(t_hdr(r, "Retry-After"), "1") == 0);
}

TEST(no_json_at_all_is_still_503)
{
    struct api_response r;

    fail_from = 1;                              /* every block jansson asks for */
    t_call(&ctx, "POST", "/v1/attention",
           "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1,2],[3,4]],\"digits\":3}", &r);
    fail_from = 0;
    check_no_memory(&r);
    api_response_free(&r);

    fail_from = 1;
    t_call(&ctx, "GET", "/healthz", NULL, &r);
    fail_from = 0;
    check_no_memory(&r);
    api_response_free(&r);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    json_set_alloc_funcs(small_malloc, free);       /* the api's hook keeps it */
    t_ctx_init(&ctx);
    ctx.cfg.max_body_bytes = (size_t)8 << 20;
    ctx.store = sess_store_new(&cfg);
    RUN(a_body_jansson_cannot_find_memory_for_is_503);
    RUN(what_the_fast_reader_leaves_is_503_too);
    RUN(a_small_body_reads_while_large_blocks_fail);
    RUN(no_json_at_all_is_still_503);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
