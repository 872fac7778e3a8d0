/*
 * api/sessions_move.c — moving a session between replicas:
 *
 *   GET  /v1/sessions/{id}/export   the session as bytes      200
 *   HEAD /v1/sessions/{id}/export   GET's headers, nothing built
 *   POST /v1/sessions/import        a new session from them   201 + Location
 *
 * The bytes are core/persist.h's export format (application/octet-stream;
 * the README's "Session export format" lays it out). An import's header is
 * checked (magic, version, lengths, settings) and against this replica's
 * limits before anything is allocated for its rows, its rows as they
 * arrive and its checksum at the end: a body that is not one whole export
 * is 422 invalid_export, one over a limit 422 limit_exceeded, one that
 * would fit an emptier cache 503 capacity_exhausted, and none of them
 * creates anything. The new session gets an id of this replica and is
 * journaled as a create is. An Idempotency-Key (api/idem.c) is checked
 * once the body is in: a session that holds it already is answered for
 * (whatever the importer found meanwhile), and the bytes' digest is taken
 * as they arrive.
 *
 * Over HTTP the body is not buffered: server/ opens an api_stream at the
 * headers (api_stream_open) and feeds it each piece as it is received, so
 * the rows go from the socket's buffer straight into the session's pages
 * (core/persist.h's piecewise import); api_handle then finishes it. A
 * request without a stream (in-process callers) imports its body whole
 * through the same reader.
 *
 * An export goes the other way the same: to a transport that takes a body
 * piece by piece (req->pieces_ok) it is a snapshot of the session (its
 * pages shared, core/persist.h's sess_export_begin) read into the
 * transport's buffer as the socket takes it, never built whole; the
 * session's own requests go on meanwhile and the snapshot's pages are let
 * go once its rows are read out (before the last bytes are sent) or the
 * client is gone. Others get the bytes whole. A HEAD takes no snapshot:
 * the session is held only while its export's bytes are counted (its
 * header's, and the rows' from their number), for GET's Content-Length.
 */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/persist.h"
#include "core/store.h"

const char api_route_export[] = "/v1/sessions/{id}/export";

static const char octet_stream[] = "application/octet-stream";

/* An export read piece by piece: a snapshot of the session's pages. */
struct api_pieces {
    struct sess_exporter *ex;
};

size_t api_pieces_read(struct api_pieces *b, void *buf, size_t n)
{
    return sess_export_read(b->ex, buf, n);
}

void api_pieces_free(struct api_pieces *b)
{
    if (!b)
        return;
    sess_export_free(b->ex);
    free(b);
}

void api_sessions_export(struct api_call *c, const char *id)
{
    struct sess_store *st = c->ctx->store;
    struct sess *s;
    void *bytes = NULL;
    size_t n = 0;
    struct api_pieces *pieces = NULL;
    if (sess_acquire(st, id, &s) != CORE_OK) {
        api_fail(c, API_ERR_SESSION_NOT_FOUND, NULL, NULL);
        return;
    }
    if (strcmp(c->req->method, "HEAD") == 0) {
        n = sess_export_bytes(st, s);
        sess_release(st, s);
        api_reply_head(c, 200, octet_stream, n);
        return;
    }
    enum core_status rc = CORE_ENOMEM;
    if (!c->req->pieces_ok) {           /* in-process: the bytes whole */
        rc = sess_export(st, s, &bytes, &n);
    } else if ((pieces = malloc(sizeof *pieces)) &&
               !(pieces->ex = sess_export_begin(st, s, &rc))) {
        free(pieces);
        pieces = NULL;
    }
    sess_release(st, s);
    if (rc != CORE_OK)
        api_fail_core(c, rc, NULL);
    else if (pieces)
        api_reply_pieces(c, 200, octet_stream, pieces, sess_export_size(pieces->ex));
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

/* The limits of this replica on an import. */
static struct sess_import_limits import_limits(const struct api_call *c)
{
    struct sess_import_limits lim = {
        .max_row_elements = api_max_elements(c),
        .max_tokens = c->ctx->cfg.max_tokens,
        .max_bytes = c->ctx->cfg.max_body_bytes,
    };
    return lim;
}

/* The checks an import answers before reading its body: the refusal, or
 * API_ERR_NONE, and its message in *msg. */
static enum api_err import_refusal(struct api_call *c, const char **msg)
{
    if (!c->ctx->store) {
        *msg = "sessions are not available";
        return API_ERR_CAPACITY_EXHAUSTED;
    }
    if (!octet_type(api_header(c, "Content-Type"))) {
        *msg = "Content-Type must be application/octet-stream";
        return API_ERR_UNSUPPORTED_MEDIA_TYPE;
    }
    if ((*msg = api_body_encoding_fault(c)))
        return API_ERR_UNSUPPORTED_MEDIA_TYPE;
    return API_ERR_NONE;
}

/* import_refusal answered, and the Idempotency-Key read into *k (*has);
 * false when refused. */
static bool import_acceptable(struct api_call *c, struct api_idem *k, bool *has)
{
    const char *msg = NULL;
    enum api_err e = import_refusal(c, &msg);
    if (e != API_ERR_NONE)
        api_fail(c, e, NULL, "%s", msg);
    return e == API_ERR_NONE && api_idem_read(c, API_IDEM_IMPORT, NULL, k, has);
}

/* An upload taken as it arrives: its import, fed piece by piece, and the
 * digest of its bytes for its Idempotency-Key. */
struct api_stream {
    struct sess_importer *im;
    bool keyed;                     /* every byte is wanted for the digest */
    struct api_idem k;
};

struct api_stream *api_sessions_import_open(struct api_call *c, size_t total)
{
    /* a request the handler refuses before the body is buffered as usual */
    const char *msg;
    struct api_idem k;
    bool keyed;
    if (import_refusal(c, &msg) != API_ERR_NONE || !api_idem_valid(c) ||
        !api_idem_read(c, API_IDEM_IMPORT, NULL, &k, &keyed))
        return NULL;
    struct sess_import_limits lim = import_limits(c);
    struct api_stream *s = malloc(sizeof *s);
    if (s && !(s->im = sess_import_begin(c->ctx->store, &lim, total))) {
        free(s);
        s = NULL;
    }
    if (s) {
        s->keyed = keyed;
        s->k = k;
    }
    return s;
}

bool api_stream_feed(struct api_stream *s, const void *p, size_t n)
{
    bool ok = sess_import_feed(s->im, p, n) == CORE_OK;
    if (s->keyed)
        api_idem_more(&s->k, p, n);
    return ok || s->keyed;
}

void api_stream_close(struct api_stream *s)
{
    if (!s)
        return;
    sess_import_free(s->im);
    free(s);
}

void api_sessions_import(struct api_call *c)
{
    char id[SESS_ID_MAX], why[SESS_WHY_MAX] = "";
    struct api_stream *stream = c->req->stream, whole = {0};
    struct api_idem k;
    bool keyed;
    if (!import_acceptable(c, &k, &keyed))
        return;
    if (!stream) {                  /* in-process: the body whole, as one piece */
        struct sess_import_limits lim = import_limits(c);
        whole.im = sess_import_begin(c->ctx->store, &lim, c->req->body_len);
        if (!whole.im) {
            api_fail_core(c, CORE_ENOMEM, NULL);
            return;
        }
        whole.keyed = keyed;
        whole.k = k;
        api_stream_feed(&whole, c->req->body, c->req->body_len);
        stream = &whole;
    }
    enum core_status rc = CORE_OK;
    struct sess *made = NULL;
    if (stream->keyed) {
        api_idem_end(&stream->k);
        if (api_idem_replay(c, &stream->k))
            rc = CORE_EEXIST;       /* answered */
        else
            sess_import_set_idem(stream->im, &stream->k.k);
    }
    if (rc == CORE_OK) {
        rc = sess_import_end(stream->im, id, &made);
        snprintf(why, sizeof why, "%s", sess_import_why(stream->im));
    }
    sess_import_free(whole.im);
    if (c->answered)
        return;
    if (rc == CORE_OK || rc == CORE_EEXIST)
        api_idem_created(c, rc, id, made, stream->keyed ? &stream->k : NULL, false);
    else if (rc == CORE_ECORRUPT)
        api_fail(c, API_ERR_INVALID_EXPORT, "", "not a whole session export: %s", why);
    else if (rc == CORE_ELIMIT)
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "", "the session is over a limit: %s", why);
    else if (rc == CORE_ECAPACITY)
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "%s, retry later", why);
    else
        api_fail_core(c, rc, NULL);
}
