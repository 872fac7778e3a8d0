/*
 * api/idem.c — the Idempotency-Key header of the routes that make a
 * session (POST /v1/sessions, /v1/sessions/{id}/fork, /v1/sessions/import).
 *
 * A key is 1 to 255 bytes of printable ASCII without spaces (0x21-0x7e);
 * its scope is the API key's name ("" without keys), so two API keys never
 * see each other's sessions. The store (core/store.h's sess_idem) keeps it
 * with the session, durable as the session is, until the session goes.
 * A request whose key a live session holds makes nothing: it is answered
 * for that session, as its create was (201, Location, the session as it is
 * now, and Idempotent-Replayed: true) when it asks for the same thing, and
 * 422 idempotency_key_reused when not.
 *
 * What was asked is a digest of the route, the forked session's id and the
 * body's bytes: their CRC-32C (core/journal.h's, hardware-accelerated) with
 * the body's length and the route beside it. The library hashes linked
 * (GnuTLS's SHA-256) are the transport's alone: the layers keep them out of
 * api/ and core/, and the import's body arrives piece by piece, which a
 * hook would have to follow; a checksum tells a different request with the
 * same key apart but for one chance in 2^32 among bodies of one length.
 */
#include "api/internal.h"

#include <string.h>

#include "core/journal.h"

static const char hdr_key[] = "Idempotency-Key";

bool api_idem_valid(const struct api_call *c)
{
    const char *v = api_header(c, hdr_key);
    size_t n = v ? api_field_len(v) : 0;
    bool ok = !v || (n >= 1 && n < SESS_IDEM_KEY_MAX);
    for (size_t i = 0; v && ok && i < n; i++)
        ok = v[i] >= 0x21 && v[i] <= 0x7e;
    return ok;
}

bool api_idem_read(struct api_call *c, enum api_idem_route route, const char *parent,
                   struct api_idem *k, bool *has)
{
    const char *v = api_header(c, hdr_key);
    *has = false;
    memset(k, 0, sizeof *k);
    if (!api_idem_valid(c)) {
        api_fail(c, API_ERR_BAD_REQUEST, NULL,
                 "Idempotency-Key must be 1 to 255 characters of printable ASCII "
                 "without spaces");
        return false;
    }
    if (!v)
        return true;
    memcpy(k->k.key, v, api_field_len(v));
    snprintf(k->k.scope, sizeof k->k.scope, "%s", c->key_name);
    unsigned char tag = (unsigned char)route;
    k->crc = jnl_crc32c(0, &tag, 1);
    if (parent)
        k->crc = jnl_crc32c(k->crc, parent, strlen(parent) + 1);
    k->k.digest[12] = tag;
    *has = true;
    return true;
}

void api_idem_more(struct api_idem *k, const void *p, size_t n)
{
    k->crc = jnl_crc32c(k->crc, p, n);
    k->len += n;
}

void api_idem_end(struct api_idem *k)
{
    memcpy(k->k.digest, &k->crc, 4);
    memcpy(k->k.digest + 4, &k->len, 8);
}

bool api_idem_replay(struct api_call *c, const struct api_idem *k)
{
    char id[SESS_ID_MAX];
    bool same = false;
    if (!sess_idem_find(c->ctx->store, &k->k, id, &same))
        return false;
    if (!same) {
        api_fail(c, API_ERR_IDEMPOTENCY_KEY_REUSED, NULL,
                 "Idempotency-Key was used with another request, which made "
                 "session %s", id);
        return true;
    }
    /* found while its first request waits for its record: this waits too,
     * and finds it gone when that record failed (the key is free then) */
    if (!api_sessions_reply_created(c, id))
        return false;
    if (c->resp->status == 201)
        api_response_header(c->resp, "Idempotent-Replayed", "true");
    return true;
}

bool api_idem_created(struct api_call *c, enum core_status rc, const char *id,
                      struct sess *held, const struct api_idem *k, bool again)
{
    if (rc == CORE_OK) {
        api_sessions_reply_held(c, held, id);
    } else if (rc == CORE_ECAPACITY) {
        api_sessions_fail_full(c);
    } else if (rc != CORE_EEXIST) {
        api_fail_core(c, rc, NULL);
    } else if (!k) {
        api_fail_core(c, CORE_ECAPACITY, NULL);
    } else if (!api_idem_replay(c, k)) {
        if (again)
            return false;
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "the request that first used this "
                 "Idempotency-Key failed before its session was kept; retry");
    }
    return true;
}
