/*
 * api/internal.h — what the api/ handlers share: the per-request call
 * object, the reply helpers (api/reply.c: JSON error object, JSON tree,
 * prebuilt buffer), body parsing with its wire errors and JSON pointers
 * (api/body.c), and the handler entry points the router dispatches to.
 *
 * A handler receives a struct api_call and must answer exactly once through
 * one of the api_reply_* / api_fail* functions (a second answer replaces the
 * first). Error replies always have the shape
 *   {"error":{"code":"...","message":"...","path":"/json/pointer"|null}}
 * with the status taken from the one table, API_ERROR_MAP. CORS headers are
 * added by the router after the handler returns, so handlers never add them.
 */
#ifndef ATTND_API_INTERNAL_H
#define ATTND_API_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/codec/buf.h"
#include "api/error.h"
#include "api/codec/half.h"
#include "api/codec/write.h"
#include "core/status.h"
#include "core/store.h"

/* Nesting depth at which a JSON body is refused with json_too_deep. */
#define API_MAX_JSON_DEPTH 32
/* What jansson's tree of a body may cost (api/body.c): bytes per number
 * --max-elements allows, and per byte of the text. Past it: 422
 * limit_exceeded before jansson reads anything. */
#define API_JSON_COST_PER_ELEMENT 64
#define API_JSON_COST_PER_BYTE 4
#define API_JSON_COST_FLOOR ((size_t)16 << 20)  /* what any text may cost */

struct api_call {
    struct api_ctx *ctx;                /* shared state (config, store, metrics) */
    const struct api_request *req;      /* the request, borrowed */
    struct api_response *resp;          /* the answer being built */
    uint64_t t0_us;                     /* api_now_us() when handling began */
    bool answered;                      /* a reply helper has run */
    bool trusted;                       /* made up by attnd (api_handle_trusted) */
    char key_name[API_KEY_NAME_MAX];    /* the API key's name ("default" for
                                           cfg.api_key), or "" without keys */
    enum api_half half;                 /* the request's float16/bfloat16
                                           dtype, or none; tensor readers
                                           round to it (api/codec/half.h) */
};

/* --max-elements, lowered by the request's own cap, or SIZE_MAX when
 * neither is set (every reader's budget). */
static inline size_t api_max_elements(const struct api_call *c)
{
    size_t cap = c->ctx->cfg.max_elements ? c->ctx->cfg.max_elements : SIZE_MAX;
    size_t req = c->req->max_elements;
    return req && req < cap ? req : cap;
}

/* Whether the server is draining (set from the loop thread). */
static inline bool api_draining(const struct api_call *c)
{
    return atomic_load_explicit(&c->ctx->draining, memory_order_relaxed) != 0;
}

/* Monotonic clock in microseconds. */
uint64_t api_now_us(void);

/* api_handle for a request attnd makes up itself (api/warm.c): no API key
 * is asked for, and no CORS headers are added. */
void api_handle_trusted(struct api_ctx *ctx, const struct api_request *req,
                        struct api_response *resp);

/* Header value of the request by case-insensitive name, or NULL. */
const char *api_header(const struct api_call *c, const char *name);

/*
 * Error reply: status from the table for code (API_ERR_...), body the error
 * object; c->resp->error is set to code. path is a JSON pointer ("" = whole body) or NULL (no field);
 * fmt/... the message (NULL: the table's default text).
 */
void api_fail(struct api_call *c, enum api_err code, const char *path,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Error reply for a core status, via the single core -> wire mapping; the
 * message is core_status_text(st). */
void api_fail_core(struct api_call *c, enum core_status st, const char *path);
/* A failed attention pass: as api_fail_core, but a non-finite result (the
 * inputs being finite, an overflow in the pass) says so and what to do. */
void api_fail_compute(struct api_call *c, enum core_status st, enum attn_dtype dt);

/* Where a pass's q, k, v and attn_bias sit in the request: their JSON
 * pointers and ranks as sent (rank 0: held flat, base64 data or an OIP v2
 * input, whose rows the message names instead). */
struct api_blame_at {
    const char *ptr[4];             /* q, k, v, attn_bias */
    int rank[4];
    const char *alibi;              /* the alibi setting ("/alibi": its slopes
                                       are "/alibi/slopes/<h>" when given);
                                       NULL: a session's, fixed at its create
                                       and in no request (path "") */
};
struct api_tensor;
/* at for q, k, v, attn_bias as read from a /v1 body: "/q" and its rank,
 * or "/q/data" (rank 0) for a base64 one; alibi "/alibi". */
void api_blame_at_tensors(struct api_blame_at *at, const struct api_tensor *q,
                          const struct api_tensor *k, const struct api_tensor *v,
                          const struct api_tensor *attn_bias);
struct attn_inputs;
/* A float32/float64 pass of r on in (q, k, v not 2-byte) that answered
 * CORE_ENONFINITE: 422 non_finite at the row of the input that overflowed
 * (core/attn_blame.h; heads [nh] the query heads computed, NULL: all), or
 * api_fail_compute's answer when none is found (api/overflow.c). */
void api_fail_overflow(struct api_call *c, const struct attn_request *r,
                       const struct attn_inputs *in, const size_t *heads, size_t nh,
                       const struct api_blame_at *at);
struct attn_blame;
/* A session pass's k / v rows: those below `cached` are the rows the
 * session held already (row j at cache position j below front, j - front
 * + from past the rows let go; from 0: none was), the rest the request's
 * own. */
struct api_blame_cache {
    size_t cached, front, from;
};
/* 422 non_finite at the input b names (found already); cache NULL for a
 * stateless pass. A row the session held already has path "" (the request
 * as a whole: the session it addresses) and its cache position in the
 * message. */
void api_fail_blame(struct api_call *c, const struct attn_request *r,
                    const struct attn_blame *b, const struct api_blame_at *at,
                    const struct api_blame_cache *cache);
struct attn_blame_empty;
/* A pass of r that answered CORE_EEMPTYROW (empty_rows "error"): 422
 * empty_row at the first query row with no key (heads [nh] the query heads
 * computed, NULL: all), q at q_ptr of q_rank as in api_blame_at, the
 * message saying why its keys were taken away; api_fail_core's answer
 * when none is found (api/overflow.c). */
void api_fail_empty_row(struct api_call *c, const struct attn_request *r, const size_t *heads,
                        size_t nh, const char *q_ptr, int q_rank);
/* The same for a row found already (e: core/attn_blame.h); keys_what
 * names the pass's keys in the message ("" or e.g. " (cached rows and
 * this request's)"). */
void api_fail_empty_blame(struct api_call *c, const struct attn_request *r,
                          const struct attn_blame_empty *e, const char *keys_what,
                          const char *q_ptr, int q_rank);

/* A route's methods as bits. Each route's one set of them answers a wrong
 * method (405 and its Allow) and a CORS preflight (its allowed methods). */
enum {
    API_M_GET = 1u << 0,            /* and HEAD (RFC 9110 9.3.2: GET without the body) */
    API_M_POST = 1u << 1,
    API_M_DELETE = 1u << 2,
};

/* The bit of "GET", "HEAD", "POST" or "DELETE"; 0 for any other. */
unsigned api_method_bit(const char *method);

/* A route template and its methods: a row of a subtree's table. */
struct api_route_methods {
    const char *route;              /* the template, compared by address */
    unsigned methods;
};

/* The methods of route in table[0..n) (0: not there). */
unsigned api_route_methods(const struct api_route_methods *table, size_t n,
                           const char *route);

/* "GET, HEAD, POST" for an Allow or Access-Control-Allow-Methods header
 * (API_M_GET is both GET and HEAD). */
void api_methods_text(unsigned methods, char *out, size_t size);

/* 405 method_not_allowed with Allow listing methods (API_M_* bits). */
void api_fail_method(struct api_call *c, unsigned methods);

/* Reply with a JSON tree; body is stolen (decref'd here). A NULL body or a
 * failing dump (memory not found for either) answers 503
 * capacity_exhausted with Retry-After. */
void api_reply_json(struct api_call *c, int status, json_t *body);

/* Reply with prebuilt JSON text; buf's data is taken (buf is reset). A
 * failed buffer answers 422 response_too_large if it hit its cap, else
 * 500 internal. */
void api_reply_buf(struct api_call *c, int status, struct api_buf *buf);

/* Reply without a body (e.g. 204). */
void api_reply_empty(struct api_call *c, int status);

/* Reply with bytes of the given static content type; bytes (malloc'd) are
 * taken and freed with the response. */
void api_reply_bytes(struct api_call *c, int status, const char *content_type,
                     void *bytes, size_t len);

/* A HEAD answer without building the body: the headers GET would send,
 * its Content-Length len (api.h's resp->head). */
void api_reply_head(struct api_call *c, int status, const char *content_type, size_t len);

/* Reply with a body read piece by piece (api.h's api_pieces, taken and
 * freed with the response), len bytes in all, of a static content type. */
void api_reply_pieces(struct api_call *c, int status, const char *content_type,
                      struct api_pieces *pieces, size_t len);

/*
 * Parse the request body as a JSON object. Refuses with:
 *   415 unsupported_media_type  Content-Type is not application/json
 *                               (a charset parameter is allowed), or a
 *                               Content-Encoding other than identity
 *   400 invalid_json            empty body, syntax error, not an object
 *   400 duplicate_key           a key repeats within one object
 *   400 json_too_deep           nesting beyond API_MAX_JSON_DEPTH
 *   422 limit_exceeded          its tree would cost more than
 *                               API_JSON_COST_PER_ELEMENT x --max-elements
 *                               + an array's cost for up to as many arrays
 *                               + API_JSON_COST_PER_BYTE x its length, and
 *                               more than API_JSON_COST_FLOOR
 * Returns a new reference, or NULL after answering with the error.
 */
json_t *api_parse_body(struct api_call *c);

/* Same, but an empty body (no Content-Type needed) yields an empty object. */
json_t *api_parse_body_optional(struct api_call *c);

/* What a 415 says of the request's Content-Encoding, or NULL when it is
 * absent or "identity": attnd decodes no other (gzip, deflate: what
 * tritonclient's request_compression_algorithm sets), and a body read
 * as if it were plain would fail as invalid JSON or data. */
const char *api_body_encoding_fault(const struct api_call *c);
/* An upper bound of the bytes jansson allocates to read the JSON text s[0..n)
 * (api/body.c's measured costs per object, array, member, value, string). */
size_t api_json_read_cost(const char *s, size_t n);

struct api_pre;     /* api/codec/numread.h */

/* The members api_parse_body_pre reads fast, and the trees it shares for
 * bodies made of nothing else (one per subset of the first
 * API_FAST_KEYS_SHARED names, built at first use, kept until exit). One
 * static per call site: {.names = (a NULL-terminated static array)}. */
#define API_FAST_KEYS_SHARED 4
struct api_fast_keys {
    const char *const *names;
    _Atomic(json_t *) trees[1u << API_FAST_KEYS_SHARED];
};

/*
 * api_parse_body() with the fast numeric reader: the top-level members
 * named in keys->names (e.g. {"q","k","v",NULL}) that are plain numeric
 * arrays are read straight into *pre (free with api_pre_free) and stand as
 * 0 in the returned tree; give pre to the readers (api_read_tensor_keep,
 * api_read_attention_pre). Errors are exactly those of api_parse_body().
 * The tree is a new reference for json_decref; when the fast reader took
 * the whole body it is one of keys->trees, which must not be modified
 * (json_decref on it is a no-op).
 */
json_t *api_parse_body_pre(struct api_call *c, struct api_fast_keys *keys,
                           struct api_pre *pre);

/*
 * Refuse members of obj not listed in allowed (NULL-terminated):
 * 422 invalid_field with path prefix + "/" + escaped key. prefix is the
 * JSON pointer of obj ("" for the body). A member whose value is null is
 * absent whatever its name, as a known member's null is (clients that
 * write every field of their own model, null when unset, are read).
 * Returns false after answering.
 */
bool api_check_fields(struct api_call *c, const json_t *obj,
                      const char *prefix, const char *const *allowed);

/* Append the JSON pointer of key (RFC 6901 escaping ~ -> ~0, / -> ~1) to
 * prefix into out[size]; truncates safely. Returns out. */
char *api_pointer_key(char *out, size_t size, const char *prefix,
                      const char *key);

/* Append "/<index>" to prefix into out[size]. Returns out. */
char *api_pointer_index(char *out, size_t size, const char *prefix,
                        size_t index);

struct attn_request;  /* core/attn.h */
struct attn_result;

/* Result buffers for r's selected outputs (api/result.c), sized with
 * checked arithmetic; false on overflow or ENOMEM. Free with
 * api_result_free whether it succeeded or not. */
bool api_result_alloc(const struct attn_request *r, struct attn_result *res);
void api_result_free(struct attn_result *res);

/* ---- handlers (router.c dispatches; each answers through c) ----------- */

/* POST /v1/attention (api/attention.c). */
void api_attention(struct api_call *c);

/* GET /healthz, /readyz, /v1/info, /metrics (api/ops.c). */
void api_ops_healthz(struct api_call *c);
void api_ops_readyz(struct api_call *c);
void api_ops_info(struct api_call *c);
void api_ops_metrics(struct api_call *c);

/* GET/POST /v1/verify and /verify (api/verify.c, the verify engineer's).
 * The router checks the method (its route table). */
void api_verify(struct api_call *c);

/* Everything under /v1/sessions (api/sessions.c, the sessions engineer's).
 * rest is the path after "/v1/sessions": "" or "/{id}" or "/{id}/kv" ...
 * The handler sets c->resp->route to a template ("/v1/sessions/{id}/kv"),
 * never the raw id, and checks the method against api_sessions_methods. */
void api_sessions(struct api_call *c, const char *rest);
/* The methods "/v1/sessions" + rest answers (API_M_* bits; 0: no route). */
unsigned api_sessions_methods(const char *rest);

/* Answer 201 with the session just created, forked or imported under id
 * (its object, and Location); false, answering nothing, when it is gone
 * already (evicted, deleted, expired, or its record failed). (api/sessions.c) */
bool api_sessions_reply_created(struct api_call *c, const char *id);
/* The same for s, the new session under id, held since it was made
 * (released here): whatever its TTL, nothing took it in between. */
void api_sessions_reply_held(struct api_call *c, struct sess *s, const char *id);

/* 503 capacity_exhausted for a session or rows the store has no room for,
 * saying what it holds against which limit. (api/sessions.c) */
void api_sessions_fail_full(struct api_call *c);

/* The answer to an append of m rows to s refused with rc (pass: the
 * attention's own pass refused it), for /v1 sessions and v2 sequences. */
void api_sess_fail_append(struct api_call *c, enum core_status rc, const struct sess *s,
                          size_t m, bool pass);

/* 422 non_finite for a pass on held session s that appended m rows:
 * pass false, the rows (finite as read) overflowed as stored, after the
 * bias and RoPE; pass true, those rows or the pass itself (the pass alone
 * when m is 0). (api/sessions.c) */
void api_sessions_fail_nonfinite(struct api_call *c, const struct sess *s, size_t m, bool pass);

/* 422 non_finite for a pass of r on held session s (m rows appended, then
 * rolled back) that overflowed: at the input b names, the store's finding
 * (a k / v row j below r's L - m is one the session held already, the
 * rest the request's, at at), or api_sessions_fail_nonfinite's answer
 * when b names none. (api/session_blame.c) */
void api_session_fail_overflow(struct api_call *c, const struct sess *s,
                               const struct attn_request *r, size_t m,
                               const struct attn_blame *b, const struct api_blame_at *at);

/* GET (and HEAD) /v1/sessions/{id}/export and POST /v1/sessions/import
 * (api/sessions_move.c); api_route_export is the first's template. */
extern const char api_route_export[];
void api_sessions_export(struct api_call *c, const char *id);
void api_sessions_import(struct api_call *c);
/* api_stream_open's part for the import route, once routed and authorized
 * (api/sessions_move.c). */
struct api_stream *api_sessions_import_open(struct api_call *c, size_t total);

/*
 * The Idempotency-Key header of a create, fork or import (api/idem.c).
 * api_idem_read: the header as the key of this request in *k (scope: the
 * API key's name), with the digest begun for route (and parent, the forked
 * session's id, or NULL); *has false when absent. false: a malformed one,
 * answered 400. api_idem_more adds the body's bytes to the digest;
 * api_idem_end finishes it (once, after the last bytes).
 * api_idem_replay: when a live session holds the key, answer for it (201
 * as a create with Idempotent-Replayed: true when the digests match, else
 * 422 idempotency_key_reused) and return true; false: there is none (or
 * it went while this request waited for its record to be written).
 * api_idem_created: the answer to a create, fork or import that returned
 * rc with the new session's id and the session, held (CORE_OK: it is
 * released here; CORE_EEXIST: none, another request with the key came
 * first, and is answered for as a replay). It returns false,
 * answering nothing, only when again is true and that first session went
 * before it could be answered for (its journal record failed, or it was
 * deleted): the key is free, and the caller makes its session again
 * (at most API_IDEM_TRIES times in all).
 */
#define API_IDEM_TRIES 3
enum api_idem_route { API_IDEM_CREATE = 1, API_IDEM_FORK, API_IDEM_IMPORT };
struct api_idem {
    struct sess_idem k;
    uint32_t crc;                   /* of the route, parent and body so far */
    uint64_t len;                   /* body bytes so far */
};
bool api_idem_read(struct api_call *c, enum api_idem_route route, const char *parent,
                   struct api_idem *k, bool *has);
/* Whether the header is absent or well-formed (nothing answered). */
bool api_idem_valid(const struct api_call *c);
void api_idem_more(struct api_idem *k, const void *p, size_t n);
void api_idem_end(struct api_idem *k);
bool api_idem_replay(struct api_call *c, const struct api_idem *k);
bool api_idem_created(struct api_call *c, enum core_status rc, const char *id,
                      struct sess *held, const struct api_idem *k, bool again);

/* Whether req's route and method read base64 strings decoded as the body
 * arrived (api/early.c opens a decoder for them alone). */
bool api_route_takes_early(const struct api_request *req);

/* The route template of "/v1/sessions" + rest, or "unmatched" (static
 * text), for replies the router answers itself (401, OPTIONS). */
const char *api_sessions_route(const char *rest);


/*
 * The attention response's size check, shared by /v1/attention and session
 * attention: answers 422 response_too_large (path /return) when the selected
 * outputs hold more than --max-elements numbers; else sets *cap, the byte
 * cap of the response buffer. x: the part-2 returns, or NULL. (api/attention.c)
 */
struct api_extras;
bool api_attention_fits(struct api_call *c, const struct attn_request *r,
                        const struct api_extras *x, enum api_encoding encoding,
                        size_t *cap);

/*
 * Write the attention response described by *v (elapsed_us is filled in
 * here) into a buffer capped at cap, answer 200 with it, and free v->res's
 * arrays (res is the caller's, passed again as non-const). (api/attention.c)
 */
void api_reply_attention(struct api_call *c, struct api_attention_view *v,
                         struct attn_result *res, size_t cap);

/*
 * Whether the results can be answered: a half request's are rounded in
 * place to its dtype, and a value past that range, or a qk that
 * overflowed, answers 422 non_finite (false). api_reply_attention runs it
 * unless v->checked; a session's attention runs it before its append is
 * kept (sess_query.accept), so a refused request appends nothing.
 * (api/attention.c)
 */
bool api_attention_accept(struct api_call *c, struct api_attention_view *v,
                          struct attn_result *res);

#endif
