/*
 * api/reply.c — answering a call: the DESIGN.md error object, JSON and
 * prebuilt-text replies, request body parsing with its wire errors, and
 * JSON-pointer helpers. Every handler answers through these functions, so
 * the status of an error always comes from the table in api/error.c.
 */
#include "api/internal.h"
#include "api/numread.h"
#include "api/utf8.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
    free(c->resp->body);
    c->resp->body = NULL;
    c->resp->body_len = 0;
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
    if (code == API_ERR_CAPACITY_EXHAUSTED)
        api_response_header(c->resp, "Retry-After", "1");
    reply_json(c, api_error_status(code), body, code);
}

void api_fail_core(struct api_call *c, enum core_status st, const char *path)
{
    api_fail(c, api_core_error(st), path, "%s", core_status_text(st));
}

void api_fail_method(struct api_call *c, const char *allow)
{
    api_fail(c, API_ERR_METHOD_NOT_ALLOWED, NULL, "method %s not allowed; allowed: %s",
             c->req->method ? c->req->method : "(none)", allow);
    api_response_header(c->resp, "Allow", allow);
}

/* Last resort when even the error body cannot be built. */
static void reply_internal_static(struct api_call *c)
{
    static const char text[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"internal error\","
        "\"path\":null}}";

    reply_reset(c);
    c->resp->status = 500;
    c->resp->error = API_ERR_INTERNAL;
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
        reply_internal_static(c);
        return;
    }
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        reply_internal_static(c);
        return;
    }
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = error;
    c->resp->content_type = "application/json";
    c->resp->body = text;
    c->resp->body_len = strlen(text);
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
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = API_ERR_NONE;
    c->resp->content_type = "application/json";
    c->resp->body = text;
    c->resp->body_len = len;
}

void api_reply_empty(struct api_call *c, int status)
{
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = API_ERR_NONE;
}

void api_reply_text(struct api_call *c, int status, const char *content_type,
                    const char *text, size_t len)
{
    char *copy = malloc(len + 1);

    if (!copy) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    reply_reset(c);
    c->resp->status = status;
    c->resp->error = API_ERR_NONE;
    c->resp->content_type = content_type;
    c->resp->body = copy;
    c->resp->body_len = len;
}

/* ---- body parsing ----------------------------------------------------- */

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/*
 * application/json, optionally followed by "; charset=utf-8" (the value
 * case-insensitive, optionally quoted). Any other type or parameter: false.
 */
static bool media_type_ok(const char *ct)
{
    static const char type[] = "application/json";
    const char *p;

    if (!ct)
        return false;
    p = skip_ws(ct);
    if (strncasecmp(p, type, sizeof type - 1) != 0)
        return false;
    p = skip_ws(p + sizeof type - 1);
    while (*p == ';') {
        p = skip_ws(p + 1);
        if (*p == '\0')
            return true;
        if (strncasecmp(p, "charset=", 8) != 0)
            return false;
        p += 8;
        if (strncasecmp(p, "\"utf-8\"", 7) == 0)
            p += 7;
        else if (strncasecmp(p, "utf-8", 5) == 0)
            p += 5;
        else
            return false;
        p = skip_ws(p);
    }
    return *p == '\0';
}

/* End of the string whose opening quote is at s[i] (index after the closing
 * quote), or n. memchr does the scanning: base64 strings run to megabytes. */
static size_t string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n;) {
        const char *q = memchr(s + i, '"', n - i);
        size_t j, bs = 0;
        if (!q)
            return n;
        j = (size_t)(q - s);
        while (j - bs > i && s[j - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return j + 1;       /* not escaped */
        i = j + 1;
    }
    return n;
}

/* Byte classes for the depth scan: 1 quote, 2 opening, 3 closing bracket. */
static const unsigned char depth_class[256] = {
    ['"'] = 1, ['['] = 2, ['{'] = 2, [']'] = 3, ['}'] = 3};

/* Nesting depth of the JSON text (strings skipped) exceeds the limit?
 * Checked before jansson sees the text so hostile nesting costs one scan. */
static bool too_deep(const char *s, size_t n)
{
    size_t i = 0, depth = 0;

    while (i < n) {
        switch (depth_class[(unsigned char)s[i]]) {
        case 0:
            i++;
            break;
        case 1:
            i = string_end(s, n, i);
            break;
        case 2:
            if (++depth > API_MAX_JSON_DEPTH)
                return true;
            i++;
            break;
        default:
            if (depth > 0)
                depth--;
            i++;
            break;
        }
    }
    return false;
}

/* A raw NUL byte is never JSON (outside strings only whitespace may sit
 * between tokens, inside them control bytes must be escaped), but jansson
 * stops reading a number at one and goes on: [[1,0\0]] read as [[1,0]].
 * Refuse it first (memchr: far faster than the parse). */
static bool has_raw_nul(struct api_call *c, const char *s, size_t n)
{
    const char *z = memchr(s, '\0', n);

    if (!z)
        return false;
    api_fail(c, API_ERR_INVALID_JSON, "", "raw NUL byte at offset %zu", (size_t)(z - s));
    return true;
}

static json_t *parse_text(struct api_call *c, const char *s, size_t n)
{
    json_error_t err;
    json_t *root;

    if (has_raw_nul(c, s, n))
        return NULL;
    if (too_deep(s, n)) {
        api_fail(c, API_ERR_JSON_TOO_DEEP, "", "JSON nesting deeper than %d",
                 API_MAX_JSON_DEPTH);
        return NULL;
    }
    root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
    if (!root && json_error_code(&err) == json_error_numeric_overflow) {
        /* An integer literal beyond long long is still a JSON number:
         * read every integer as a real instead. */
        root = json_loadb(s, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL,
                          &err);
    }
    if (!root) {
        switch (json_error_code(&err)) {
        case json_error_duplicate_key:
            api_fail(c, API_ERR_DUPLICATE_KEY, "", "%s (line %d, column %d)",
                     err.text, err.line, err.column);
            break;
        case json_error_stack_overflow:
            api_fail(c, API_ERR_JSON_TOO_DEEP, "", "%s", err.text);
            break;
        case json_error_numeric_overflow:
            api_fail(c, API_ERR_NON_FINITE, "", "%s (line %d, column %d)",
                     err.text, err.line, err.column);
            break;
        default:
            api_fail(c, API_ERR_INVALID_JSON, "", "%s (line %d, column %d)",
                     err.text, err.line, err.column);
            break;
        }
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_fail(c, API_ERR_INVALID_JSON, "", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

static json_t *parse_body(struct api_call *c, bool optional)
{
    const struct api_request *r = c->req;

    if (r->body_len == 0 || !r->body) {
        if (optional)
            return json_object();
        api_fail(c, API_ERR_INVALID_JSON, "", "request body is empty");
        return NULL;
    }
    if (!media_type_ok(api_header(c, "Content-Type"))) {
        api_fail(c, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                 "Content-Type must be application/json");
        return NULL;
    }
    return parse_text(c, r->body, r->body_len);
}

json_t *api_parse_body(struct api_call *c)
{
    return parse_body(c, false);
}

json_t *api_parse_body_optional(struct api_call *c)
{
    return parse_body(c, true);
}

/* The tree jansson would read from a body whose members the fast reader
 * all took: {"<key>":0,...} (pre->whole). A new reference, or NULL. */
static json_t *pre_tree_build(const struct api_pre *pre)
{
    json_t *root = json_object();
    size_t i;

    for (i = 0; root && i < pre->n; i++)
        if (json_object_set_new(root, pre->e[i].path + 1, json_integer(0)) != 0) {
            json_decref(root);
            root = NULL;
        }
    return root;
}

/*
 * The same tree, shared: it depends only on which of the keys are present,
 * and nobody modifies it (the readers look members up), so keys->trees
 * holds one per subset of the first API_FAST_KEYS_SHARED names, built at
 * first use and published with a compare-and-swap. It is made immortal the
 * way jansson's own true/false/null are, a reference count of (size_t)-1
 * (jansson.h's json_incref/json_decref then leave it alone), so handing it
 * out is no atomic on a shared cache line, and json_decref by the caller
 * stays right. Building it per request was ~2k instructions with its
 * json_delete, a twentieth of a small request's api_handle. Bodies outside
 * the table get a tree of their own.
 */
static json_t *pre_tree(struct api_fast_keys *keys, const struct api_pre *pre)
{
    const char *const *names = keys->names;
    unsigned mask = 0;
    size_t i, k;
    json_t *t, *none = NULL;

    for (i = 0; i < pre->n; i++) {
        for (k = 0; k < API_FAST_KEYS_SHARED && names[k]; k++)
            if (strcmp(names[k], pre->e[i].path + 1) == 0)
                break;
        if (k == API_FAST_KEYS_SHARED || !names[k] || (mask & 1u << k))
            return pre_tree_build(pre);
        mask |= 1u << k;
    }
    if ((t = atomic_load(&keys->trees[mask])))
        return t;
    if (!(t = pre_tree_build(pre)))
        return NULL;
    t->refcount = (size_t)-1;               /* before it is published */
    if (!atomic_compare_exchange_strong(&keys->trees[mask], &none, t)) {
        t->refcount = 1;
        json_decref(t);                     /* another thread's is in */
        t = none;
    }
    return t;
}

json_t *api_parse_body_pre(struct api_call *c, struct api_fast_keys *keys,
                           struct api_pre *pre)
{
    const struct api_request *r = c->req;
    size_t max = api_max_elements(c);
    json_error_t err;
    size_t len;
    char *text;
    json_t *root;

    memset(pre, 0, sizeof *pre);
    /* The rewrite follows the whole body and refuses nesting beyond the
     * limit, so a rewritten text needs no too_deep() scan. */
    if (r->body_len == 0 || !r->body ||
        !media_type_ok(api_header(c, "Content-Type")))
        return parse_body(c, false);
    if (!(text = api_pre_rewrite(r->body, r->body_len, keys->names, max,
                                 API_MAX_JSON_DEPTH, pre, &len))) {
        if (pre->whole && (root = pre_tree(keys, pre)))
            return root;        /* nothing left for jansson to read */
        api_pre_free(pre);
        return parse_body(c, false);
    }
    /* A raw NUL in the arrays the rewrite took out fails their readers; one
     * in the rest is caught here, and parse_text reports it. */
    root = memchr(text, '\0', len) ? NULL
         : json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!root || !json_is_object(root)) {
        /* report the error as found in the original text */
        json_decref(root);
        api_pre_free(pre);
        return parse_body(c, false);
    }
    return root;
}

/* ---- JSON pointers ---------------------------------------------------- */

char *api_pointer_key(char *out, size_t size, const char *prefix,
                      const char *key)
{
    size_t n;

    if (size == 0)
        return out;
    /* prefix + "/" copied by hand: readers build these paths on every
     * request (snprintf's format parsing showed in profiles); cut to fit,
     * as snprintf would. */
    n = strlen(prefix);
    if (n >= size - 1) {
        memcpy(out, prefix, size - 1);
        out[size - 1] = '\0';
        return out;
    }
    memcpy(out, prefix, n);
    out[n++] = '/';
    for (; *key && n + 1 < size; key++) {
        if (*key == '~' || *key == '/') {
            if (n + 2 >= size)
                break;
            out[n++] = '~';
            out[n++] = *key == '~' ? '0' : '1';
        } else {
            out[n++] = *key;
        }
    }
    out[n] = '\0';
    return out;
}

char *api_pointer_index(char *out, size_t size, const char *prefix,
                        size_t index)
{
    if (size)
        snprintf(out, size, "%s/%zu", prefix, index);
    return out;
}

bool api_check_fields(struct api_call *c, const json_t *obj,
                      const char *prefix, const char *const *allowed)
{
    const char *key;
    json_t *val;

    json_object_foreach((json_t *)obj, key, val) {
        const char *const *a;
        bool ok = false;
        char path[128];

        for (a = allowed; *a; a++)
            if (strcmp(*a, key) == 0) {
                ok = true;
                break;
            }
        if (!ok) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                     prefix, key), "unknown field \"%s\"", key);
            return false;
        }
    }
    return true;
}
