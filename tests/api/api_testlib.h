/*
 * tests/api/api_testlib.h — in-process request helpers for the api tests:
 * a fake header table (the transport's header lookup), one call to
 * api_handle(), and accessors for the JSON body, the error object and the
 * response headers. Header-only, like tests/harness.h.
 */
#ifndef ATTND_API_TESTLIB_H
#define ATTND_API_TESTLIB_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "tests/harness.h"

/* RFC 8259 number grammar. */
static inline int t_json_number_ok(const char *s)
{
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9')
            s++;
    else
        return 0;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(*s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

/* Headers as a NULL-terminated list of name, value pairs. */
static inline const char *t_header_fn(void *arg, const char *name)
{
    const char *const *h = arg;

    for (; h && h[0]; h += 2)
        if (strcasecmp(h[0], name) == 0)
            return h[1];
    return NULL;
}

static const char *const t_json_headers[] = {"Content-Type", "application/json",
                                              NULL};

/* One request with a body of len bytes (binary allowed; may be NULL);
 * headers NULL means Content-Type JSON. */
static inline void t_call_n(struct api_ctx *ctx, const char *method, const char *path,
                            const char *const *headers, const void *body, size_t len,
                            struct api_response *resp)
{
    struct api_request req;

    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = path;
    req.header = t_header_fn;
    req.header_arg = (void *)(headers ? headers : t_json_headers);
    req.body = body;
    req.body_len = len;
    api_handle(ctx, &req, resp);
}

/* One request; body (text) may be NULL. */
static inline void t_call_h(struct api_ctx *ctx, const char *method, const char *path,
                     const char *const *headers, const char *body,
                     struct api_response *resp)
{
    t_call_n(ctx, method, path, headers, body, body ? strlen(body) : 0, resp);
}

static inline void t_call(struct api_ctx *ctx, const char *method, const char *path,
                   const char *body, struct api_response *resp)
{
    t_call_h(ctx, method, path, NULL, body, resp);
}

/* A request body built piece by piece, kept NUL-terminated (binary bytes
 * allowed: len counts). */
struct t_body {
    char *p;
    size_t len, cap;
};

static inline void t_body_put(struct t_body *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = (char *)realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static inline void t_body_puts(struct t_body *b, const char *s)
{
    t_body_put(b, s, strlen(s));
}

/* count float32 values in [-1, 1) from *state (every one finite), malloc'd. */
static inline float *t_values(uint64_t *state, size_t count)
{
    float *v = (float *)malloc(count * sizeof *v);
    for (size_t i = 0; i < count; i++)
        v[i] = (float)((double)(t_rng_next(state) >> 11) / 9007199254740992.0 * 2 - 1);
    return v;
}

static inline void t_ctx_init(struct api_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->cfg.max_body_bytes = 1 << 20;
    ctx->cfg.max_elements = 1 << 20;
    ctx->cfg.max_tokens = 4096;
    ctx->cfg.session_ttl_s = 600;
    ctx->cfg.workers = 2;
    ctx->cfg.version = "0.1.0-test";
    api_json_hook();        /* as server/main.c: before the test's threads use jansson */
}

/* The body parsed as JSON (new reference) or NULL. */
static inline json_t *t_json(const struct api_response *r)
{
    if (!r->body)
        return NULL;
    return json_loadb(r->body, r->body_len, 0, NULL);
}

/* GET /v1/sessions/{id}/export, which must answer 200: its bytes (malloc'd,
 * *len of them). */
static inline char *t_export(struct api_ctx *ctx, const char *id, size_t *len)
{
    char path[200];
    struct api_response r;
    snprintf(path, sizeof path, "/v1/sessions/%s/export", id);
    t_call(ctx, "GET", path, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    *len = r.body_len;
    char *bytes = (char *)malloc(*len ? *len : 1);
    memcpy(bytes, r.body, *len);
    api_response_free(&r);
    return bytes;
}

/* Value of a response header, or NULL. */
static inline const char *t_hdr(const struct api_response *r, const char *name)
{
    size_t i;

    for (i = 0; i < r->n_headers; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

/* Error code and path of an error reply, copied into static storage
 * ("" when absent; "(null)" for a JSON null path). */
static char t_code_buf[64], t_path_buf[256];

static inline const char *t_err_code(const struct api_response *r)
{
    json_t *j = t_json(r);
    const char *s = json_string_value(json_object_get(json_object_get(j, "error"), "code"));

    snprintf(t_code_buf, sizeof t_code_buf, "%s", s ? s : "");
    json_decref(j);
    return t_code_buf;
}

static inline const char *t_err_path(const struct api_response *r)
{
    json_t *j = t_json(r);
    json_t *p = json_object_get(json_object_get(j, "error"), "path");

    snprintf(t_path_buf, sizeof t_path_buf, "%s",
             json_is_null(p) ? "(null)" : json_string_value(p) ? json_string_value(p) : "");
    json_decref(j);
    return t_path_buf;
}

#endif
