/*
 * tests/api/v2_testlib.h — in-process helpers shared by the Open Inference
 * Protocol v2 tests (test_api_v2*.c): one call to api_v2 on a context, a
 * JSON inference with its parsed answer, output lookup, the v2 error
 * string, the seed example's inputs, and the shared context with a small
 * session store. Header-only, like api_testlib.h: each test program
 * includes it once.
 */
#ifndef ATTND_V2_TESTLIB_H
#define ATTND_V2_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/internal.h"
#include "api/v2/v2.h"
#include "core/store.h"

/* The context the tests share (each test program has its own). */
static struct api_ctx ctx;

/* One call to api_v2 on pctx with the path "/v2" + rest; body of len bytes. */
static inline void v2_on(struct api_ctx *pctx, const char *method, const char *rest,
                  const char *const *hdrs, const char *body, size_t len,
                  struct api_response *resp)
{
    static char path[256];
    struct api_request req;
    struct api_call c;

    snprintf(path, sizeof path, "/v2%s", rest);
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = path;
    req.header = t_header_fn;
    req.header_arg = (void *)(hdrs ? hdrs : t_json_headers);
    req.body = body;
    req.body_len = len;
    memset(resp, 0, sizeof *resp);
    resp->status = 500;
    c.ctx = pctx;
    c.req = &req;
    c.resp = resp;
    c.t0_us = api_now_us();
    c.answered = false;
    api_v2(&c, rest);
}

/* The same on the shared ctx. */
static inline void v2(const char *method, const char *rest, const char *const *hdrs,
               const char *body, size_t len, struct api_response *resp)
{
    v2_on(&ctx, method, rest, hdrs, body, len, resp);
}

/* JSON request on pctx; the parsed answer (new reference) and its status. */
static inline json_t *infer_on(struct api_ctx *pctx, const char *body, int *status)
{
    struct api_response r;
    json_t *j;

    v2_on(pctx, "POST", "/models/attention/infer", NULL, body, strlen(body), &r);
    *status = r.status;
    if (r.status != 200 && getenv("TEST_VERBOSE"))
        printf("  %d %.*s\n", r.status, (int)r.body_len, r.body ? r.body : "");
    j = t_json(&r);
    api_response_free(&r);
    return j;
}

static inline json_t *infer(const char *body, int *status)
{
    return infer_on(&ctx, body, status);
}

/* The output called name of a response. */
static inline json_t *output(json_t *resp, const char *name)
{
    json_t *outs = json_object_get(resp, "outputs");
    size_t i;

    for (i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        if (strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
            return o;
    }
    return NULL;
}

static inline double dat(json_t *o, size_t i)
{
    return json_number_value(json_array_get(json_object_get(o, "data"), i));
}

/* The error of a v2 reply is one string. */
static inline const char *v2_err(json_t *j)
{
    return json_string_value(json_object_get(j, "error"));
}

#define SEED_IN                                                               \
    "{\"name\":\"q\",\"datatype\":\"FP64\",\"shape\":[1,2],\"data\":[1,0]},"   \
    "{\"name\":\"k\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,-1,0]}," \
    "{\"name\":\"v\",\"datatype\":\"FP64\",\"shape\":[3,2],\"data\":[1,0,0,1,0,0]}"

/* A store with cfg journaled in dir (made if missing; restored from it when
 * it holds a journal, as at a restart); NULL, a failed check, when it
 * cannot be opened. */
static inline struct sess_store *v2t_store_in(const char *dir, const struct sess_config *cfg)
{
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40};
    struct sess_store *st = sess_store_new(cfg);

    if (st && sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        st = NULL;
    }
    CHECK(st != NULL);
    return st;
}

/* The shared context with a small session store; false when it cannot be
 * made (the caller reports and exits). */
static inline bool v2t_setup(void)
{
    struct sess_config sc;

    t_ctx_init(&ctx);
    memset(&sc, 0, sizeof sc);
    sc.max_sessions = 16;
    sc.max_cache_bytes = 1 << 20;
    sc.default_ttl_s = 600;
    sc.default_max_tokens = 1024;
    ctx.store = sess_store_new(&sc);
    if (!ctx.store) {
        printf("no store\n0 passed, 1 failed\n");
        return false;
    }
    return true;
}

#endif
