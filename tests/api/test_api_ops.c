/*
 * tests/api/test_api_ops.c — the operations endpoints and the router's
 * shared policies, in-process: /healthz, /readyz (draining), /v1/info,
 * /metrics, 404 / 405 with Allow, route templates, CORS (allowed, refused,
 * preflight: each route's own methods, static files too), Bearer auth on
 * and off, api_transport_error, api_reads_body.
 */
#include <stdlib.h>

#include "core/store.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;

TEST(healthz_ok)
{
    struct api_response r;
    json_t *j;

    t_call(&ctx, "GET", "/healthz", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.route, "/healthz");
    CHECK_STR(r.content_type, "application/json");
    j = t_json(&r);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    api_response_free(&r);
}

TEST(readyz_draining)
{
    struct api_response r;

    t_call(&ctx, "GET", "/readyz", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    ctx.draining = 1;
    t_call(&ctx, "GET", "/readyz", NULL, &r);
    CHECK_EQ_INT(r.status, 503);
    CHECK_STR(t_err_code(&r), "draining");
    api_response_free(&r);
    t_call(&ctx, "GET", "/healthz", NULL, &r);
    CHECK_EQ_INT(r.status, 200);       /* alive while draining */
    api_response_free(&r);
    ctx.draining = 0;
}

TEST(info_fields)
{
    struct api_response r;
    json_t *j, *lim;

    t_call(&ctx, "GET", "/v1/info", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    j = t_json(&r);
    CHECK_STR(json_string_value(json_object_get(j, "version")), "0.1.0-test");
    CHECK(json_is_string(json_object_get(j, "blas")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "threads"), "workers")), 2);
    lim = json_object_get(j, "limits");
    CHECK_EQ_INT(json_integer_value(json_object_get(lim, "max_elements")), 1 << 20);
    CHECK_EQ_INT(json_integer_value(json_object_get(lim, "max_body_bytes")), 1 << 20);
    CHECK_EQ_INT(json_integer_value(json_object_get(lim, "max_tokens")), 4096);
    json_decref(j);
    api_response_free(&r);
}

static char *fake_metrics(void *arg, size_t *len)
{
    const char *text = arg;
    char *p = malloc(strlen(text) + 1);

    memcpy(p, text, strlen(text) + 1);
    *len = strlen(text);
    return p;
}

TEST(metrics_enabled_and_not)
{
    struct api_response r;

    t_call(&ctx, "GET", "/metrics", NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(t_err_code(&r), "not_found");
    api_response_free(&r);
    ctx.metrics = fake_metrics;
    ctx.metrics_arg = (void *)"attnd_up 1\n";
    t_call(&ctx, "GET", "/metrics", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.content_type && strncmp(r.content_type, "text/plain", 10) == 0);
    CHECK(r.body_len == 11 && memcmp(r.body, "attnd_up 1\n", 11) == 0);
    api_response_free(&r);
    ctx.metrics = NULL;
}

TEST(not_found_and_method)
{
    struct api_response r;

    t_call(&ctx, "GET", "/nope", NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(t_err_code(&r), "not_found");
    CHECK_STR(t_err_path(&r), "(null)");
    CHECK_STR(r.route, "unmatched");
    api_response_free(&r);

    t_call(&ctx, "GET", "/v1/attention", NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_err_code(&r), "method_not_allowed");
    CHECK_STR(t_hdr(&r, "Allow"), "POST");
    CHECK_STR(r.route, "/v1/attention");
    api_response_free(&r);

    t_call(&ctx, "DELETE", "/v1/verify", NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "GET, HEAD, POST");
    api_response_free(&r);

    t_call(&ctx, "POST", "/healthz", "{}", &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "GET, HEAD");
    api_response_free(&r);

    /* a prefix of a route is not the route */
    t_call(&ctx, "POST", "/v1/attentionx", "{}", &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
    t_call(&ctx, "GET", "/v1/sessionsx", NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(r.route, "unmatched");
    api_response_free(&r);
}

TEST(route_templates_never_raw_ids)
{
    struct api_response r;

    t_call(&ctx, "GET", "/v1/sessions/abcdef0123456789", NULL, &r);
    CHECK(r.route && strstr(r.route, "abcdef") == NULL);
    CHECK(r.route && strncmp(r.route, "/v1/sessions", 12) == 0);
    api_response_free(&r);
    t_call(&ctx, "GET", "/verify", NULL, &r);
    CHECK_STR(r.route, "/verify");
    api_response_free(&r);
    /* the /v2 subtree reaches its handler (the Open Inference Protocol) */
    t_call(&ctx, "GET", "/v2/health/live", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.route && strncmp(r.route, "/v2", 3) == 0);
    api_response_free(&r);
    t_call(&ctx, "GET", "/v2x", NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(r.route, "unmatched");
    api_response_free(&r);
    /* no route inside a subtree: unmatched too, never the subtree's root */
    {
        static const char *const nowhere[] = {
            "/v2/nope", "/v2/models/other", "/v2/models/attention/versions/9/infer",
            "/v2/models/attention/nope",
        };
        for (size_t i = 0; i < sizeof nowhere / sizeof nowhere[0]; i++) {
            t_call(&ctx, "GET", nowhere[i], NULL, &r);
            CHECK_EQ_INT(r.status, 404);
            CHECK_STR(r.route, "unmatched");
            api_response_free(&r);
        }
    }
}

static const char *const origins[] = {"https://demo.example", "http://localhost:3000", NULL};

TEST(cors_allowed_origin)
{
    const char *const h[] = {"Origin", "https://demo.example", NULL};
    struct api_response r;

    ctx.cfg.cors_origins = origins;
    t_call_h(&ctx, "GET", "/healthz", h, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "https://demo.example");
    CHECK_STR(t_hdr(&r, "Vary"), "Origin");
    CHECK(t_hdr(&r, "Access-Control-Allow-Credentials") == NULL);
    api_response_free(&r);
    /* errors carry CORS headers too */
    t_call_h(&ctx, "GET", "/nope", h, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "https://demo.example");
    api_response_free(&r);
    /* a 405's Allow and the request id are readable by the page */
    t_call_h(&ctx, "GET", "/v1/attention", h, NULL, &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK(t_hdr(&r, "Allow") != NULL);
    CHECK(strstr(t_hdr(&r, "Access-Control-Expose-Headers"), "Allow,") != NULL);
    CHECK(strstr(t_hdr(&r, "Access-Control-Expose-Headers"), "X-Request-Id") != NULL);
    api_response_free(&r);
    ctx.cfg.cors_origins = NULL;
}

TEST(cors_refused_origin)
{
    const char *const h[] = {"Origin", "https://evil.example", NULL};
    struct api_response r;

    ctx.cfg.cors_origins = origins;
    t_call_h(&ctx, "GET", "/healthz", h, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK(t_hdr(&r, "Access-Control-Allow-Origin") == NULL);
    CHECK(t_hdr(&r, "Access-Control-Allow-Methods") == NULL);
    CHECK_STR(t_hdr(&r, "Vary"), "Origin");
    api_response_free(&r);
    ctx.cfg.cors_origins = NULL;
    /* no allowlist: no CORS headers at all */
    t_call_h(&ctx, "GET", "/healthz", h, NULL, &r);
    CHECK(t_hdr(&r, "Access-Control-Allow-Origin") == NULL);
    CHECK(t_hdr(&r, "Vary") == NULL);
    api_response_free(&r);
}

TEST(cors_preflight)
{
    const char *const ok[] = {"Origin", "http://localhost:3000",
                              "Access-Control-Request-Method", "POST", NULL};
    const char *const bad[] = {"Origin", "http://localhost:3001",
                               "Access-Control-Request-Method", "POST", NULL};
    struct api_response r;

    ctx.cfg.cors_origins = origins;
    ctx.cfg.api_key = "s3cret";         /* preflight needs no token */
    t_call_h(&ctx, "OPTIONS", "/v1/attention", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    CHECK(r.body == NULL);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "http://localhost:3000");
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Methods"), "POST");
    CHECK(t_hdr(&r, "Access-Control-Allow-Headers") &&
          strstr(t_hdr(&r, "Access-Control-Allow-Headers"), "Authorization") &&
          strstr(t_hdr(&r, "Access-Control-Allow-Headers"), "Content-Type"));
    CHECK_STR(t_hdr(&r, "Access-Control-Max-Age"), "600");
    /* what tracing libraries add to a fetch */
    CHECK(strstr(t_hdr(&r, "Access-Control-Allow-Headers"), "X-Request-Id") != NULL);
    CHECK(strstr(t_hdr(&r, "Access-Control-Allow-Headers"), "traceparent") != NULL);
    api_response_free(&r);

    t_call_h(&ctx, "OPTIONS", "/v2/models/attention/infer", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Methods"), "POST");
    CHECK(strstr(t_hdr(&r, "Access-Control-Allow-Headers"),
                 "Inference-Header-Content-Length") != NULL);
    api_response_free(&r);

    /* the methods of the path's route, not of its subtree */
    t_call_h(&ctx, "OPTIONS", "/v1/sessions/x/kv", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Methods"), "GET, HEAD, POST");
    api_response_free(&r);

    t_call_h(&ctx, "OPTIONS", "/v1/attention", bad, NULL, &r);
    CHECK_EQ_INT(r.status, 204);
    CHECK(t_hdr(&r, "Access-Control-Allow-Origin") == NULL);
    CHECK(t_hdr(&r, "Access-Control-Allow-Methods") == NULL);
    api_response_free(&r);

    t_call_h(&ctx, "OPTIONS", "/nope", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
    ctx.cfg.cors_origins = NULL;
    ctx.cfg.api_key = NULL;
}

/* The test's static files, as server/http.c's srv_http_asset_route. */
static const char *test_static_route(const char *path)
{
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
        return "/";
    if (strcmp(path, "/v1/openapi.json") == 0)
        return "/v1/openapi.json";
    return strcmp(path, "/app.js") == 0 ? "/{asset}" : NULL;
}

/* Every route's preflight offers exactly the methods it answers: those
 * not offered are 405 with the same list in Allow, those offered are
 * not (HEAD is GET's). The static files answer GET and HEAD (the
 * transport serves them). */
TEST(preflight_methods_are_the_routes)
{
    static const struct {
        const char *path, *methods;
    } routes[] = {
        {"/healthz", "GET, HEAD"}, {"/readyz", "GET, HEAD"}, {"/metrics", "GET, HEAD"},
        {"/v1/info", "GET, HEAD"},
        {"/v1/attention", "POST"}, {"/v1/sessions/import", "POST"},
        {"/v1/verify", "GET, HEAD, POST"}, {"/verify", "GET, HEAD, POST"},
        {"/v1/sessions", "POST"}, {"/v1/sessions/x", "GET, HEAD, DELETE"},
        {"/v1/sessions/x/kv", "GET, HEAD, POST"}, {"/v1/sessions/x/export", "GET, HEAD"},
        {"/v1/sessions/x/attention", "POST"}, {"/v1/sessions/x/truncate", "POST"},
        {"/v1/sessions/x/fork", "POST"},
        {"/v2", "GET, HEAD"}, {"/v2/health/live", "GET, HEAD"},
        {"/v2/health/ready", "GET, HEAD"}, {"/v2/models/attention", "GET, HEAD"},
        {"/v2/models/attention/versions/1", "GET, HEAD"},
        {"/v2/models/attention/ready", "GET, HEAD"}, {"/v2/models/attention/infer", "POST"},
        {"/v2/models/attention/versions/1/infer", "POST"},
        {"/", "GET, HEAD"}, {"/index.html", "GET, HEAD"}, {"/v1/openapi.json", "GET, HEAD"},
        {"/app.js", "GET, HEAD"},
    };
    static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE", "PUT", "PATCH"};
    const char *const ok[] = {"Origin", "http://localhost:3000", NULL};
    struct sess_config scfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    struct api_response r;

    ctx.cfg.cors_origins = origins;
    ctx.cfg.static_route = test_static_route;
    ctx.store = sess_store_new(&scfg);
    CHECK(ctx.store != NULL);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *p = routes[i].path;

        t_call_h(&ctx, "OPTIONS", p, ok, NULL, &r);
        CHECK_EQ_INT(r.status, 204);
        CHECK_STR(t_hdr(&r, "Access-Control-Allow-Methods"), routes[i].methods);
        if (r.status != 204)
            printf("  OPTIONS %s\n", p);
        api_response_free(&r);
        for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
            const char *allowed = strstr(routes[i].methods, methods[m]);

            t_call(&ctx, methods[m], p, "{}", &r);
            if (allowed) {
                CHECK(r.status != 405);
            } else {
                CHECK_EQ_INT(r.status, 405);
                if (strncmp(p, "/v2", 3) != 0)      /* v2: the protocol's shape */
                    CHECK_STR(t_err_code(&r), "method_not_allowed");
                CHECK_STR(t_hdr(&r, "Allow"), routes[i].methods);
            }
            if (allowed ? r.status == 405 : r.status != 405)
                printf("  %s %s: %d\n", methods[m], p, r.status);
            api_response_free(&r);
        }
    }
    /* a path no route has, below a subtree or not, offers nothing */
    t_call_h(&ctx, "OPTIONS", "/v1/sessions/x/nope", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(t_hdr(&r, "Access-Control-Allow-Methods") == NULL);
    api_response_free(&r);
    t_call_h(&ctx, "OPTIONS", "/v2/models/other/infer", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    CHECK(t_hdr(&r, "Access-Control-Allow-Methods") == NULL);
    api_response_free(&r);
    t_call_h(&ctx, "OPTIONS", "/style.cssx", ok, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    api_response_free(&r);
    /* a static file's 405 needs no key: the files are open routes */
    ctx.cfg.api_key = "s3cret";
    t_call(&ctx, "POST", "/v1/openapi.json", "{}", &r);
    CHECK_EQ_INT(r.status, 405);
    CHECK_STR(t_hdr(&r, "Allow"), "GET, HEAD");
    CHECK_STR(r.route, "/v1/openapi.json");
    api_response_free(&r);
    ctx.cfg.api_key = NULL;
    sess_store_free(ctx.store);
    ctx.store = NULL;
    ctx.cfg.static_route = NULL;
    ctx.cfg.cors_origins = NULL;
}

TEST(cors_wildcard_never_echoes_credentials)
{
    static const char *const any[] = {"*", NULL};
    const char *const h[] = {"Origin", "https://x.example", NULL};
    struct api_response r;

    ctx.cfg.cors_origins = any;
    t_call_h(&ctx, "GET", "/healthz", h, NULL, &r);
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "*");
    CHECK(t_hdr(&r, "Access-Control-Allow-Credentials") == NULL);
    api_response_free(&r);
    ctx.cfg.cors_origins = NULL;
}

TEST(auth_on)
{
    const char *const good[] = {"Authorization", "Bearer s3cret", NULL};
    const char *const wrong[] = {"Authorization", "Bearer s3creT", NULL};
    const char *const longer[] = {"Authorization", "Bearer s3cret2", NULL};
    const char *const basic[] = {"Authorization", "Basic czNjcmV0", NULL};
    struct api_response r;

    ctx.cfg.api_key = "s3cret";
    t_call_h(&ctx, "GET", "/v1/info", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    CHECK_STR(t_err_code(&r), "unauthorized");
    CHECK(t_hdr(&r, "WWW-Authenticate") &&
          strncmp(t_hdr(&r, "WWW-Authenticate"), "Bearer", 6) == 0);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/v1/info", wrong, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/v1/info", longer, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/v1/info", basic, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/v1/info", good, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    /* whitespace around the token is not part of the field value (RFC
     * 9110 5.5); inside it, it is */
    {
        static const char *const padded[] = {"Bearer s3cret   ", "Bearer s3cret\t",
                                             "Bearer \t s3cret \t", "bearer  s3cret "};
        static const char *const broken[] = {"Bearer s3 cret", "Bearer s3cret x",
                                             "Bearer   ", "Bearer"};
        for (size_t i = 0; i < 4; i++) {
            const char *const hp[] = {"Authorization", padded[i], NULL};
            t_call_h(&ctx, "GET", "/v1/info", hp, NULL, &r);
            CHECK_EQ_INT(r.status, 200);
            api_response_free(&r);
            const char *const hb[] = {"Authorization", broken[i], NULL};
            t_call_h(&ctx, "GET", "/v1/info", hb, NULL, &r);
            CHECK_EQ_INT(r.status, 401);
            api_response_free(&r);
        }
    }
    /* every route but the probes needs the token, unknown routes included */
    t_call_h(&ctx, "POST", "/v1/attention", NULL, "{}", &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/v1/sessions/abc", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/verify", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 401);
    api_response_free(&r);
    /* a refusal inside a subtree carries the route's template, or
     * "unmatched" where there is none, never the subtree's root */
    {
        static const char *const paths[][2] = {
            {"/v1/sessions/abc", "/v1/sessions/{id}"},
            {"/v1/sessions/abc/kv", "/v1/sessions/{id}/kv"},
            {"/v1/sessions/abc/fork", "/v1/sessions/{id}/fork"},
            {"/v1/sessions/abc/nope", "unmatched"},
            {"/v1/sessions", "/v1/sessions"},
            {"/v2", "/v2"},
            {"/v2/models/attention/infer", "/v2/models/{model}/infer"},
            {"/v2/models/attention/versions/1/ready", "/v2/models/{model}/ready"},
            {"/v2/nope", "unmatched"},
            {"/v2/models/other", "unmatched"},
        };
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            t_call_h(&ctx, "GET", paths[i][0], NULL, NULL, &r);
            CHECK_EQ_INT(r.status, 401);
            CHECK_STR(r.route, paths[i][1]);
            api_response_free(&r);
            t_call_h(&ctx, "OPTIONS", paths[i][0], NULL, NULL, &r);
            CHECK_STR(r.route, paths[i][1]);
            api_response_free(&r);
        }
    }
    t_call_h(&ctx, "GET", "/healthz", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    t_call_h(&ctx, "GET", "/readyz", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    ctx.cfg.api_key = NULL;
}

TEST(auth_off)
{
    struct api_response r;

    ctx.cfg.api_key = "";
    t_call_h(&ctx, "GET", "/v1/info", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
    ctx.cfg.api_key = NULL;
    t_call_h(&ctx, "GET", "/v1/info", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    api_response_free(&r);
}

/* A request of method to path with the headers h (name, value, ..., NULL),
 * no body. */
static void t_request(struct api_request *req, const char *method, const char *path,
                      const char *const *h)
{
    memset(req, 0, sizeof *req);
    req->method = method;
    req->path = path;
    req->header = t_header_fn;
    req->header_arg = (void *)h;
}

TEST(transport_error)
{
    struct api_request req;
    struct api_response r;
    const char *const h[] = {"Origin", "https://demo.example", NULL};

    t_request(&req, "POST", "/v1/attention", h);
    ctx.cfg.cors_origins = origins;
    api_transport_error(&ctx, &req, API_ERR_BODY_TOO_LARGE, "body over 1 MiB", &r);
    CHECK_EQ_INT(r.status, 413);
    CHECK_STR(r.route, "/v1/attention");    /* counted under the route asked for */
    CHECK_STR(t_err_code(&r), "body_too_large");
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "https://demo.example");
    api_response_free(&r);
    api_transport_error(&ctx, &req, API_ERR_BAD_REQUEST, NULL, &r);
    CHECK_EQ_INT(r.status, 400);
    api_response_free(&r);
    api_transport_error(&ctx, &req, API_ERR_COUNT, NULL, &r);
    CHECK_EQ_INT(r.status, 500);
    CHECK_STR(t_err_code(&r), "internal");
    api_response_free(&r);
    req.path = "/v1/sessions/r1.abc/kv";
    api_transport_error(&ctx, &req, API_ERR_RATE_LIMITED, NULL, &r);
    CHECK_EQ_INT(r.status, 429);
    CHECK_STR(r.route, "/v1/sessions/{id}/kv");
    api_response_free(&r);
    req.path = "/no/such/route";
    api_transport_error(&ctx, &req, API_ERR_RATE_LIMITED, NULL, &r);
    CHECK_STR(r.route, "unmatched");
    api_response_free(&r);
    CHECK_STR(api_route_of(NULL, "/v2/models/attention/infer"), "/v2/models/{model}/infer");
    CHECK_STR(api_route_of(NULL, NULL), "unmatched");
    /* a static file's refusal (a POST to the page over --rate-limit) is
     * counted under the file's template, as its 405 is */
    ctx.cfg.static_route = test_static_route;
    req.path = "/app.js";
    api_transport_error(&ctx, &req, API_ERR_RATE_LIMITED, NULL, &r);
    CHECK_STR(r.route, "/{asset}");
    api_response_free(&r);
    CHECK_STR(api_route_of(&ctx, "/v1/openapi.json"), "/v1/openapi.json");
    CHECK_STR(api_route_of(&ctx, "/"), "/");
    CHECK_STR(api_route_of(&ctx, "/v1/attention"), "/v1/attention");
    CHECK_STR(api_route_of(&ctx, "/nothing.js"), "unmatched");
    ctx.cfg.static_route = NULL;
    CHECK_STR(api_route_of(&ctx, "/"), "unmatched");
    ctx.cfg.cors_origins = NULL;
}

/* api_reads_body: true for the requests whose answer depends on their
 * body; for the others api_handle answers alike with a body or without. */
TEST(reads_body)
{
    static const char *const none[] = {NULL};
    static const char *const good[] = {"Authorization", "Bearer s3cret", NULL};
    static const char *const wrong[] = {"Authorization", "Bearer s3creT", NULL};
    static const struct {
        const char *method, *path;
        int h;                          /* none, good, wrong */
        bool reads;
    } cases[] = {
        {"POST", "/v1/attention", 1, true}, {"POST", "/v1/verify", 1, true},
        {"POST", "/v2/models/attention/infer", 1, true}, {"POST", "/v1/sessions", 1, true},
        {"POST", "/v1/sessions/abc/kv", 1, true}, {"POST", "/v1/sessions/import", 1, true},
        {"POST", "/v1/attention", 0, false}, {"POST", "/v1/attention", 2, false},
        {"POST", "/v2/models/attention/infer", 0, false}, {"POST", "/v1/sessions/abc", 1, false},
        {"POST", "/v1/sessions/abc/nope", 1, false}, {"GET", "/v1/info", 1, false},
        {"GET", "/v1/verify", 1, false}, {"DELETE", "/v1/sessions/abc", 1, false},
        {"OPTIONS", "/v1/attention", 0, false}, {"PUT", "/v1/attention", 1, false},
        {"POST", "/healthz", 0, false}, {"POST", "/v2/health/live", 0, false},
        {"POST", "/nothing", 1, false}, {"POST", "/app.js", 1, false},
        {"GET", "/", 0, false},
    };
    const char *const *const hs[] = {none, good, wrong};
    struct api_request req;
    struct api_response with, without;

    ctx.cfg.static_route = test_static_route;
    ctx.cfg.api_key = "s3cret";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        t_request(&req, cases[i].method, cases[i].path, hs[cases[i].h]);
        bool got = api_reads_body(&ctx, &req);
        if (got != cases[i].reads)
            fprintf(stderr, "  %s %s (headers %d): %d\n", cases[i].method, cases[i].path,
                    cases[i].h, got);
        CHECK(got == cases[i].reads);
        if (cases[i].reads)
            continue;
        api_handle(&ctx, &req, &without);
        req.body = "{";
        req.body_len = 1;
        api_handle(&ctx, &req, &with);
        CHECK_EQ_INT(with.status, without.status);
        api_response_free(&with);
        api_response_free(&without);
    }
    /* a body that is read: the same request is refused for it */
    static const char *const json[] = {"Authorization", "Bearer s3cret", "Content-Type",
                                       "application/json", NULL};
    t_request(&req, "POST", "/v1/attention", json);
    req.body = "{";
    req.body_len = 1;
    api_handle(&ctx, &req, &with);
    CHECK_EQ_INT(with.status, 400);
    api_response_free(&with);
    ctx.cfg.api_key = NULL;
    t_request(&req, "POST", "/v1/attention", none);
    CHECK(api_reads_body(&ctx, &req));
    ctx.cfg.static_route = NULL;
}

/* The CORS headers alone, for the static files the transport serves:
 * those of any answer, and nothing else set. */
TEST(cors_headers_alone)
{
    struct api_request req;
    struct api_response r;
    const char *const allowed[] = {"Origin", "https://demo.example", NULL};
    const char *const other[] = {"Origin", "https://other.example", NULL};

    t_request(&req, "GET", "/v1/openapi.json", allowed);
    ctx.cfg.cors_origins = origins;
    api_cors_headers(&ctx, &req, &r);
    CHECK_STR(t_hdr(&r, "Vary"), "Origin");
    CHECK_STR(t_hdr(&r, "Access-Control-Allow-Origin"), "https://demo.example");
    CHECK(strstr(t_hdr(&r, "Access-Control-Expose-Headers"), "X-Request-Id") != NULL);
    CHECK(r.body == NULL && r.pieces == NULL && r.n_headers == 3);
    req.header_arg = (void *)other;
    api_cors_headers(&ctx, &req, &r);
    CHECK_STR(t_hdr(&r, "Vary"), "Origin");
    CHECK(t_hdr(&r, "Access-Control-Allow-Origin") == NULL && r.n_headers == 1);
    ctx.cfg.cors_origins = NULL;
    api_cors_headers(&ctx, &req, &r);
    CHECK(r.n_headers == 0);
}

/* Where the transport may answer: probes on its thread for GET and HEAD
 * only, tiny stateless attention for POST only, the rest on the pool. */
TEST(route_places)
{
    static const struct {
        const char *method, *path;
        enum api_place place;
    } cases[] = {
        {"GET", "/healthz", API_PLACE_PROBE},      {"HEAD", "/readyz", API_PLACE_PROBE},
        {"GET", "/metrics", API_PLACE_PROBE},      {"GET", "/v2/health/live", API_PLACE_PROBE},
        {"HEAD", "/v2/health/ready", API_PLACE_PROBE},
        {"GET", "/v2/models/attention/ready", API_PLACE_PROBE},
        {"HEAD", "/v2/models/attention/versions/1/ready", API_PLACE_PROBE},
        {"POST", "/v2/models/attention/ready", API_PLACE_POOL},
        {"GET", "/v2/models/other/ready", API_PLACE_POOL},
        {"POST", "/healthz", API_PLACE_POOL},      {"GET", "/v2/health", API_PLACE_POOL},
        {"POST", "/v1/attention", API_PLACE_INLINE}, {"GET", "/v1/attention", API_PLACE_POOL},
        {"POST", "/v1/sessions", API_PLACE_POOL},  {"GET", "/v1/info", API_PLACE_POOL},
        {"POST", "/v2/models/attention/infer", API_PLACE_POOL},
        {"GET", "/nowhere", API_PLACE_POOL},       {NULL, NULL, API_PLACE_POOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        enum api_place got = api_route_place(cases[i].method, cases[i].path);
        CHECK_EQ_INT((int)got, (int)cases[i].place);
        if (got != cases[i].place)
            printf("  %s %s\n", cases[i].method ? cases[i].method : "(null)",
                   cases[i].path ? cases[i].path : "(null)");
    }
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(healthz_ok);
    RUN(readyz_draining);
    RUN(info_fields);
    RUN(metrics_enabled_and_not);
    RUN(not_found_and_method);
    RUN(route_templates_never_raw_ids);
    RUN(cors_allowed_origin);
    RUN(cors_refused_origin);
    RUN(cors_preflight);
    RUN(preflight_methods_are_the_routes);
    RUN(cors_wildcard_never_echoes_credentials);
    RUN(auth_on);
    RUN(auth_off);
    RUN(transport_error);
    RUN(reads_body);
    RUN(cors_headers_alone);
    RUN(route_places);
    TEST_MAIN_END();
}
