/*
 * api/reply.c — answering a call: the error object
 * {"error":{"code","message","path"}}, JSON, prebuilt-text and empty
 * replies, and the response's header slots. Every handler answers through
 * these functions, so the status of an error always comes from the one
 * table (API_ERROR_MAP in api/error.h) and resp->error records which one.
 */
#include "api/internal.h"
#include "api/spare.h"
#include "api/codec/utf8.h"
#include "core/attn.h"
#include "core/stop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t api_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *api_header(const struct api_call *c, const char *name)
{
    if (!c->req->header)
        return NULL;
    return c->req->header(c->req->header_arg, name);
}

/* Drop whatever an earlier answer left (a second answer replaces it). */
static void reply_reset(struct api_call *c)
{
    api_spare_free(c->resp->body);
    api_pieces_free(c->resp->pieces);
    c->resp->body = NULL;
    c->resp->pieces = NULL;
    c->resp->body_len = 0;
    c->resp->head = false;
    c->resp->content_type = NULL;
    c->answered = true;
}

/* Replace every byte that is not part of well-formed UTF-8 with '?', so
 * text echoed from a request (or cut by truncation) is valid JSON. */
static void utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;

    while (*p) {
        size_t n = api_utf8_seq(p);
        if (n == 0) {
            *p++ = '?';
        } else {
            p += n;
        }
    }
}

static void reply_json(struct api_call *c, int status, json_t *body,
                       enum api_err error);

void api_fail(struct api_call *c, enum api_err code, const char *path,
              const char *fmt, ...)
{
    char msg[512], pbuf[256];
    json_t *body;

    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    } else {
        snprintf(msg, sizeof msg, "%s", api_error_text(code));
    }
    utf8_sanitize(msg);
    if (path) {
        snprintf(pbuf, sizeof pbuf, "%s", path);
        utf8_sanitize(pbuf);
        path = pbuf;
    }
    /* Headers a handler set for a success (Location, ...) do not belong on
     * an error; CORS headers are added later by the router. */
    c->resp->n_headers = 0;
    body = json_pack("{s:{s:s, s:s, s:s?}}", "error", "code",
                     api_error_code(code), "message", msg, "path", path);
    if (code == API_ERR_CAPACITY_EXHAUSTED ||
        code == API_ERR_STORAGE_UNAVAILABLE)
        api_response_header(c->resp, "Retry-After", "1");
    reply_json(c, api_error_status(code), body, code);
}

/* A pass stopped early while the server drains, before its own deadline:
 * the drain's grace ran out on a request left to answer for itself
 * (server/http_work.c's srv_http_cancel), not a deadline of the client's. */
static bool stopped_by_drain(const struct api_call *c)
{
    const struct attn_stop *s = c->req->ws ? attn_ws_stop(c->req->ws) : NULL;

    return api_draining(c) && !(s && s->deadline_ns && attn_now_ns() >= s->deadline_ns);
}

void api_fail_core(struct api_call *c, enum core_status st, const char *path)
{
    if (st == CORE_ESTOPPED && stopped_by_drain(c)) {
        api_fail(c, API_ERR_DRAINING, path, "attnd is shutting down and stopped this "
                 "request before it finished (--drain-timeout)");
        return;
    }
    api_fail(c, api_core_error(st), path, "%s", core_status_text(st));
}

void api_fail_compute(struct api_call *c, enum core_status st, enum attn_dtype dt)
{
    if (st != CORE_ENONFINITE) {
        api_fail_core(c, st, NULL);
        return;
    }
    /* the inputs were checked finite: the pass itself overflowed */
    api_fail(c, API_ERR_NON_FINITE, NULL, "a score or an output is not finite in %s: q·k "
             "with its scale and biases overflowed; scale the inputs down%s",
             dt == ATTN_F64 ? "float64" : "float32",
             dt == ATTN_F64 ? "" : " or compute in float64");
}

unsigned api_method_bit(const char *m)
{
    if (!m)
        return 0;
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0)
        return API_M_GET;
    if (strcmp(m, "POST") == 0)
        return API_M_POST;
    if (strcmp(m, "DELETE") == 0)
        return API_M_DELETE;
    return 0;
}

unsigned api_route_methods(const struct api_route_methods *table, size_t n,
                           const char *route)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].route == route)
            return table[i].methods;
    return 0;
}

void api_methods_text(unsigned methods, char *out, size_t size)
{
    static const struct { unsigned bit; const char *name; } names[] = {
        {API_M_GET, "GET, HEAD"}, {API_M_POST, "POST"}, {API_M_DELETE, "DELETE"}};
    size_t n = 0;

    if (size == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n < size; i++)
        if (methods & names[i].bit)
            n += (size_t)snprintf(out + n, size - n, "%s%s", n ? ", " : "", names[i].name);
}

void api_fail_method(struct api_call *c, unsigned methods)
{
    char allow[32];

    api_methods_text(methods, allow, sizeof allow);
    api_fail(c, API_ERR_METHOD_NOT_ALLOWED, NULL, "method %s not allowed; allowed: %s",
             c->req->method ? c->req->method : "(none)", allow);
    api_response_header(c->resp, "Allow", allow);
}

/* Last resort when a body cannot be built: jansson's tree of it or its
 * text could not be allocated, which is all that fails there, so the
 * answer is the one for memory not found, 503 capacity_exhausted with
 * Retry-After (not 500 internal, which tells a client not to retry),
 * from a fixed text. Headers set for the answer that could not be built
 * (Location) go. */
static void reply_no_memory(struct api_call *c)
{
    static const char text[] =
        "{\"error\":{\"code\":\"capacity_exhausted\",\"message\":\"out of memory\","
        "\"path\":null}}";

    reply_reset(c);
    c->resp->n_headers = 0;
    api_response_header(c->resp, "Retry-After", "1");
    c->resp->status = api_error_status(API_ERR_CAPACITY_EXHAUSTED);
    c->resp->error = API_ERR_CAPACITY_EXHAUSTED;
    c->resp->content_type = "application/json";
    c->resp->body = malloc(sizeof text);
    if (c->resp->body) {
        memcpy(c->resp->body, text, sizeof text);
        c->resp->body_len = sizeof text - 1;
    }
}

/* api_reply_json, recording error (API_ERR_NONE for a success). */
static void reply_json(struct api_call *c, int status, json_t *body,
                       enum api_err error)
{
    char *text;

    if (!body) {
        reply_no_memory(c);
        return;
    }
    struct api_buf b;
    size_t len;
    api_buf_init(&b, SIZE_MAX / 2);     /* bounded by the tree built */
    api_write_json(&b, body);           /* reals shortest, unlike json_dumps */
    json_decref(body);
    text = api_buf_ok(&b) ? api_buf_take(&b, &len) : NULL;
    api_buf_free(&b);
    if (!text) {
        reply_no_memory(c);
        return;
    }
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = error;
    c->resp->content_type = "application/json";
    c->resp->body = text;
    c->resp->body_len = len;
}

void api_reply_json(struct api_call *c, int status, json_t *body)
{
    reply_json(c, status, body, API_ERR_NONE);
}

void api_reply_buf(struct api_call *c, int status, struct api_buf *buf)
{
    size_t len;
    char *text;

    if (!api_buf_ok(buf)) {
        bool too_large = buf->too_large;
        api_buf_free(buf);
        if (too_large)
            api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL, NULL);
        else
            api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    text = api_buf_take(buf, &len);
    api_reply_bytes(c, status, "application/json", text, len);
}

void api_reply_empty(struct api_call *c, int status)
{
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = API_ERR_NONE;
}

void api_reply_bytes(struct api_call *c, int status, const char *content_type,
                     void *bytes, size_t len)
{
    api_reply_empty(c, status);
    c->resp->content_type = content_type;
    c->resp->body = bytes;
    c->resp->body_len = len;
}

void api_response_header(struct api_response *resp, const char *name,
                         const char *value)
{
    struct api_header *h;

    if (resp->n_headers >= API_MAX_HEADERS)
        return;
    h = &resp->headers[resp->n_headers++];
    snprintf(h->name, sizeof h->name, "%s", name);
    snprintf(h->value, sizeof h->value, "%s", value);
}

void api_reply_head(struct api_call *c, int status, const char *content_type, size_t len)
{
    api_reply_bytes(c, status, content_type, NULL, len);
    c->resp->head = true;
}

void api_reply_pieces(struct api_call *c, int status, const char *content_type,
                      struct api_pieces *pieces, size_t len)
{
    api_reply_bytes(c, status, content_type, NULL, len);
    c->resp->pieces = pieces;
}

void api_response_free(struct api_response *resp)
{
    api_spare_free(resp->body);
    api_pieces_free(resp->pieces);
    resp->pieces = NULL;
    resp->body = NULL;
    resp->body_len = 0;
    resp->head = false;
}
