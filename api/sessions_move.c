/*
 * api/sessions_move.c — moving a session between replicas:
 *
 *   GET  /v1/sessions/{id}/export   the session as bytes      200
 *   POST /v1/sessions/import        a new session from them   201 + Location
 *
 * The bytes are core/persist.h's export format (application/octet-stream;
 * the README's "Session export format" lays it out). An import is checked
 * whole (magic, version, lengths, settings, checksum) and against this
 * replica's limits before anything is allocated: a body that is not one
 * whole export is 422 invalid_export, one over a limit 422 limit_exceeded,
 * one that would fit an emptier cache 503 capacity_exhausted, and none of
 * them creates anything. The new session gets an id of this replica and is
 * journaled as a create is.
 */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/persist.h"
#include "core/store.h"

const char api_route_export[] = "/v1/sessions/{id}/export";

static const char octet_stream[] = "application/octet-stream";

void api_sessions_export(struct api_call *c, const char *id)
{
    struct sess_store *st = c->ctx->store;
    struct sess *s;
    void *bytes;
    size_t n;
    if (sess_acquire(st, id, &s) != CORE_OK) {
        api_fail(c, API_ERR_SESSION_NOT_FOUND, NULL, NULL);
        return;
    }
    enum core_status rc = sess_export(st, s, &bytes, &n);
    sess_release(st, s);
    if (rc != CORE_OK)
        api_fail_core(c, rc, NULL);
    else
        api_reply_bytes(c, 200, octet_stream, bytes, n);
}

/* Content-Type application/octet-stream, parameters allowed. */
static bool octet_type(const char *ct)
{
    size_t n = sizeof octet_stream - 1;
    while (ct && (*ct == ' ' || *ct == '\t'))
        ct++;
    return ct && strncasecmp(ct, octet_stream, n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

void api_sessions_import(struct api_call *c)
{
    char id[SESS_ID_MAX], why[SESS_WHY_MAX] = "";
    if (!c->ctx->store) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "sessions are not available");
        return;
    }
    if (!octet_type(api_header(c, "Content-Type"))) {
        api_fail(c, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                 "Content-Type must be application/octet-stream");
        return;
    }
    struct sess_import_limits lim = {
        .max_row_elements = api_max_elements(c),
        .max_tokens = c->ctx->cfg.max_tokens,
    };
    enum core_status rc = sess_import(c->ctx->store, c->req->body, c->req->body_len,
                                      &lim, id, why);
    if (rc == CORE_OK)
        api_sessions_reply_created(c, id);
    else if (rc == CORE_ECORRUPT)
        api_fail(c, API_ERR_INVALID_EXPORT, "", "not a whole session export: %s", why);
    else if (rc == CORE_ELIMIT)
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "", "the session is over a limit: %s", why);
    else if (rc == CORE_ECAPACITY)
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "%s, retry later", why);
    else
        api_fail_core(c, rc, NULL);
}
