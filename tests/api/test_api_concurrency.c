/*
 * tests/api/test_api_concurrency.c — api_handle() from several threads at
 * once (the server's worker pool does this): every thread sends the same
 * mix of requests (attention in JSON and base64, float32, errors, probes,
 * preflight) and must get byte-identical answers to a single-threaded run.
 * Run under ThreadSanitizer by `make tsan` (its name says concurrency).
 * (It found /v1/info garbling OpenBLAS's configuration text, which
 * openblas_get_config rebuilds in a static buffer on every call.)
 */
#include <pthread.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "core/attn.h"

static struct api_ctx ctx;

struct req_case {
    const char *method, *path, *body;
};

static const struct req_case cases[] = {
    {"POST", "/v1/attention", "{\"q\":[[1,0]],\"k\":[[1,0],[0,1],[-1,0]],"
                              "\"v\":[[1,0],[0,1],[0,0]],\"bias\":{\"q\":[0,1]}}"},
    {"POST", "/v1/attention", "{\"q\":[[[1,0.5]],[[0.25,1]]],\"k\":[[[1,0],[0,1]]],"
                              "\"v\":[[[3],[4]]],\"dtype\":\"float32\",\"causal\":true}"},
    {"POST", "/v1/attention", "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\","
                              "\"data\":\"AAAAAAAA8D8=\"},\"k\":[[1],[2]],\"v\":[[1],[2]],"
                              "\"encoding\":\"base64\"}"},
    {"POST", "/v1/attention", "{\"q\":[[1,0]],\"k\":[[1,0],[0]],\"v\":[[1],[2]]}"},
    {"POST", "/v1/attention", "{\"q\":[[1,0]],\"q\":[[1,0]]}"},
    {"GET", "/healthz", NULL},
    {"GET", "/v1/info", NULL},
    {"OPTIONS", "/v1/attention", NULL},
    {"GET", "/nope", NULL},
    /* bodies of q, k, v only: the fast reader takes them whole and the
     * shared placeholder trees (api/reply.c) are built and reused */
    {"POST", "/v1/attention", "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]]}"},
    {"POST", "/v1/attention", "{\"v\":[[1],[2]],\"q\":[[0,1]],\"k\":[[1,0],[0,1]]}"},
    {"POST", "/v1/attention", "{\"q\":[[1,0]],\"k\":[[1,0]]}"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

struct answer {
    int status;
    char *body;     /* with meta.elapsed_us cut off, which differs by run */
};

static struct answer expected[N_CASES];

/* The body up to "elapsed_us" (the one member that varies between runs). */
static char *stable_body(const struct api_response *r)
{
    size_t n = r->body_len;
    const char *cut;
    char *s;

    if (!r->body)
        return NULL;
    cut = strstr(r->body, "\"elapsed_us\"");
    if (cut)
        n = (size_t)(cut - r->body);
    s = malloc(n + 1);
    memcpy(s, r->body, n);
    s[n] = '\0';
    return s;
}

static void run_case(size_t i, struct attn_ws *ws, struct answer *out)
{
    static const char *const hdrs[] = {"Content-Type", "application/json",
                                       "Origin", "https://demo.example", NULL};
    struct api_request req;
    struct api_response r;

    memset(&req, 0, sizeof req);
    req.method = cases[i].method;
    req.path = cases[i].path;
    req.header = t_header_fn;
    req.header_arg = (void *)hdrs;
    req.body = cases[i].body;
    req.body_len = cases[i].body ? strlen(cases[i].body) : 0;
    req.ws = ws;
    api_handle(&ctx, &req, &r);
    out->status = r.status;
    out->body = stable_body(&r);
    api_response_free(&r);
}

static int same(const struct answer *a, const struct answer *b)
{
    if (a->status != b->status)
        return 0;
    if (!a->body || !b->body)
        return a->body == b->body;
    return strcmp(a->body, b->body) == 0;
}

#define ROUNDS 200

static void *worker(void *arg)
{
    struct attn_ws *ws = attn_ws_new();
    long *mismatches = arg;
    size_t round, i;

    for (round = 0; round < ROUNDS; round++) {
        for (i = 0; i < N_CASES; i++) {
            struct answer a;
            size_t k = (i + round) % N_CASES;   /* threads interleave differently */
            run_case(k, ws, &a);
            if (!same(&a, &expected[k]) && (*mismatches)++ < 2)
                printf("  case %zu: %d %s\n    expected %d %s\n", k, a.status,
                       a.body ? a.body : "", expected[k].status,
                       expected[k].body ? expected[k].body : "");
            free(a.body);
        }
    }
    attn_ws_free(ws);
    return NULL;
}

TEST(concurrency_expected_answers)
{
    CHECK_EQ_INT(expected[0].status, 200);
    CHECK_EQ_INT(expected[1].status, 200);
    CHECK_EQ_INT(expected[2].status, 200);
    CHECK_EQ_INT(expected[3].status, 422);
    CHECK_EQ_INT(expected[4].status, 400);
    CHECK_EQ_INT(expected[5].status, 200);
    CHECK_EQ_INT(expected[6].status, 200);
    CHECK_EQ_INT(expected[7].status, 204);
    CHECK_EQ_INT(expected[8].status, 404);
    CHECK_EQ_INT(expected[9].status, 200);
    CHECK_EQ_INT(expected[10].status, 200);
    CHECK_EQ_INT(expected[11].status, 422);
}

TEST(concurrency_same_answers)
{
    pthread_t th[4];
    long mismatches[4] = {0};
    size_t i;

    for (i = 0; i < 4; i++)
        CHECK(pthread_create(&th[i], NULL, worker, &mismatches[i]) == 0);
    for (i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (i = 0; i < 4; i++)
        CHECK_EQ_INT(mismatches[i], 0);
}

int main(void)
{
    static const char *const origins[] = {"https://demo.example", NULL};
    size_t i;

    attn_blas_init(1);          /* as the server does before its workers */
    t_ctx_init(&ctx);
    ctx.cfg.cors_origins = origins;
    /* expected answers, computed single-threaded with a temporary scratch */
    for (i = 0; i < N_CASES; i++)
        run_case(i, NULL, &expected[i]);
    RUN(concurrency_expected_answers);
    RUN(concurrency_same_answers);
    for (i = 0; i < N_CASES; i++)
        free(expected[i].body);
    TEST_MAIN_END();
}
