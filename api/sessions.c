/*
 * api/sessions.c — everything under /v1/sessions: the KV-cache sessions
 * over core/store.h.
 *
 *   POST   /v1/sessions                 create        201 + Location
 *   GET    /v1/sessions/{id}            describe
 *   DELETE /v1/sessions/{id}            delete        204
 *   POST   /v1/sessions/{id}/kv         append rows   (expected_length: 409)
 *   GET    /v1/sessions/{id}/kv         the cached K and V
 *   POST   /v1/sessions/{id}/attention  append k/v if given, then attend q
 *                                       (api/sessions_attend.c)
 *   POST   /v1/sessions/{id}/truncate   keep the first `length` rows
 *   POST   /v1/sessions/{id}/fork       copy into a new session  201
 *   GET    /v1/sessions/{id}/export     the session as bytes (handled in
 *                                       api/sessions_move.c, as is
 *   POST   /v1/sessions/import          the import: an exact route of
 *                                       api/router.c)
 *
 * HEAD is answered wherever GET is, as GET (the transport sends no body);
 * an export's HEAD counts its bytes without taking a snapshot.
 *
 * A request on a session holds it (sess_acquire .. sess_release) from the
 * moment its body is validated against the session's fixed parameters
 * (dtype, heads, widths: read with the session's dtype) until the cache has
 * been read or changed; the response is written after releasing it.
 * Everything that can be refused (shapes, expected_length, response size,
 * the attention options) is checked before the cache changes. A create or
 * fork with an Idempotency-Key whose session exists is answered for it
 * before anything else (api/idem.c).
 */
#include "api/internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/read.h"
#include "api/sessions_impl.h"
#include "api/sessions_roll.h"
#include "api/codec/write.h"
#include "core/kv.h"
#include "core/store.h"

static const char route_root[] = "/v1/sessions";
static const char route_id[] = "/v1/sessions/{id}";
static const char route_kv[] = "/v1/sessions/{id}/kv";
static const char route_attention[] = "/v1/sessions/{id}/attention";
static const char route_truncate[] = "/v1/sessions/{id}/truncate";
static const char route_fork[] = "/v1/sessions/{id}/fork";

/* ---- small helpers ------------------------------------------------------ */

/* A member of obj, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer member in [lo, hi] (api_read_size); absent -> *out = dflt
 * (required: error). */
static bool read_int(struct api_call *c, const json_t *obj, const char *key,
                     bool required, size_t lo, size_t hi, size_t dflt,
                     size_t *out)
{
    char path[API_PATH_MAX];
    json_t *v = member(obj, key);
    api_pointer_key(path, sizeof path, "", key);
    *out = dflt;
    if (!v) {
        if (required)
            api_fail(c, API_ERR_INVALID_FIELD, path, "\"%s\" is required", key);
        return !required;
    }
    return api_read_size(c, v, path, lo, hi, out);
}

/* The session's bias vectors as its create spelled them, or null. */
static json_t *bias_json(const struct sess_spec *sp)
{
    enum attn_dtype dt = sp->params.dtype;
    json_t *b;

    if (!sp->bias_q && !sp->bias_k && !sp->bias_v)
        return json_null();
    if (!(b = json_object()))
        return NULL;
    if (sp->bias_q)
        json_object_set_new(b, "q", api_vectors_json(sp->bias_q, dt, sp->bias_q_heads,
                                                     sp->shape.d_k));
    if (sp->bias_k)
        json_object_set_new(b, "k", api_vectors_json(sp->bias_k, dt, sp->bias_k_heads,
                                                     sp->shape.d_k));
    if (sp->bias_v)
        json_object_set_new(b, "v", api_vectors_json(sp->bias_v, dt, sp->bias_v_heads,
                                                     sp->shape.d_v));
    return b;
}

/* The session object of GET /v1/sessions/{id}; new reference. */
static json_t *session_json(const struct sess_spec *sp,
                            const struct sess_info *info)
{
    json_int_t max_tokens = sp->max_tokens > (size_t)INT64_MAX
                                ? (json_int_t)INT64_MAX
                                : (json_int_t)sp->max_tokens;
    /* milliseconds are plenty, and keep the text short */
    double expires = info->expires_in_s >= 0
                         ? floor(info->expires_in_s * 1000 + 0.5) / 1000 : 0;
    const struct attn_params *p = &sp->params;
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:I, s:I, s:I, "
                     "s:f, s:f, s:f, s:o, s:o, s:o, s:o, s:o}",
                     "id", info->id, "length", (json_int_t)info->length,
                     "heads", (json_int_t)sp->shape.h,
                     "kv_heads", (json_int_t)sp->shape.h_kv,
                     "d_k", (json_int_t)sp->shape.d_k,
                     "d_v", (json_int_t)sp->shape.d_v,
                     "dtype", api_dtype_name(sp->params.dtype, (enum api_half)sp->half),
                     "kv_dtype", kv_store_name(sp->kv_store, sp->params.dtype),
                     "softmax", api_softmax_name(sp->params.softmax),
                     "bytes", (json_int_t)info->bytes,
                     "shared_bytes", (json_int_t)info->shared_bytes,
                     "max_tokens", max_tokens,
                     "expires_in_s", expires, "ttl_s", sp->ttl_s,
                     "scale", p->scale,
                     "sink_logit", api_sinks_json(p, sp->shape.h),
                     "softcap", p->softcap > 0 ? json_real(p->softcap) : json_null(),
                     "rope", api_rope_json(p, sp->shape.d_k),
                     "alibi", api_alibi_json(p, sp->shape.h),
                     "bias", bias_json(sp));
    if (o)
        api_roll_describe(o, sp, &info->held);
    return o;
}

/* Answer with a held session's object and release it. */
static void reply_session(struct api_call *c, struct sess *s, int status)
{
    struct sess_store *st = c->ctx->store;
    struct sess_info info;
    sess_get_info(st, s, &info);
    json_t *j = session_json(sess_spec(s), &info);
    sess_release(st, s);
    api_reply_json(c, status, j);
}

void api_sessions_reply_held(struct api_call *c, struct sess *s, const char *id)
{
    char loc[sizeof route_root + SESS_ID_MAX + 1];
    snprintf(loc, sizeof loc, "%s/%s", route_root, id);
    reply_session(c, s, 201);
    if (c->resp->status == 201)
        api_response_header(c->resp, "Location", loc);
}

bool api_sessions_reply_created(struct api_call *c, const char *id)
{
    struct sess *s;
    if (sess_acquire(c->ctx->store, id, &s) != CORE_OK)
        return false;
    api_sessions_reply_held(c, s, id);
    return true;
}

/* Look up id; answers 404 session_not_found and returns NULL if absent. */
struct sess *api_sess_acquire(struct api_call *c, const char *id)
{
    struct sess *s = NULL;
    if (sess_acquire(c->ctx->store, id, &s) != CORE_OK) {
        api_fail(c, API_ERR_SESSION_NOT_FOUND, NULL, NULL);
        return NULL;
    }
    c->half = (enum api_half)sess_spec(s)->half;    /* rows and results in its dtype */
    return s;
}

/* ---- reading rows of a session's shape ------------------------------------ */

/*
 * A per-head tensor member: [rows][width] when heads == 1, or
 * [heads][rows][width]; read in the session's dtype. *rows is set.
 */
bool api_sess_read_heads(struct api_call *c, const json_t *body, const char *key,
                       enum attn_dtype dt, size_t heads, size_t width,
                       size_t *budget, struct api_tensor *t, size_t *rows)
{
    char path[API_PATH_MAX];
    struct api_tensor_spec spec = {dt, API_ELEM_REAL, 2, 3, budget};
    size_t h, cols;
    api_pointer_key(path, sizeof path, "", key);
    if (!api_read_tensor(c, member(body, key), path, &spec, t))
        return false;
    api_tensor_heads(t, &h, rows, &cols);
    if (t->rank == 2 && heads != 1) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "the session has %zu heads here: send [%zu][rows][%zu]",
                 heads, heads, width);
        return false;
    }
    if (h != heads || cols != width) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, path,
                 "expected [%zu][rows][%zu] (the session's shape), got "
                 "[%zu][%zu][%zu]", heads, width, h, *rows, cols);
        return false;
    }
    return true;
}

/* Optional k and v (both or neither) of a held session; *m = rows (0 when
 * absent). */
bool api_sess_read_kv(struct api_call *c, const json_t *body,
                    const struct sess_spec *sp, bool required, size_t *budget,
                    struct api_tensor *k, struct api_tensor *v, size_t *m)
{
    const struct attn_shape *sh = &sp->shape;
    bool hk = member(body, "k") != NULL, hv = member(body, "v") != NULL;
    size_t mv;
    *m = 0;
    if (!hk && !hv && !required)
        return true;
    if (!hk || !hv) {
        api_fail(c, API_ERR_INVALID_FIELD, hk ? "/v" : "/k",
                 "\"k\" and \"v\" are required together");
        return false;
    }
    if (!api_sess_read_heads(c, body, "k", sp->params.dtype, sh->h_kv, sh->d_k, budget,
                    k, m) ||
        !api_sess_read_heads(c, body, "v", sp->params.dtype, sh->h_kv, sh->d_v, budget,
                    v, &mv))
        return false;
    if (mv != *m) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/v", "v has %zu rows, k has %zu", mv, *m);
        return false;
    }
    return true;
}

/* 409 length_conflict unless expected (>= 0) is the held session's length,
 * the rows ever appended; a rolling session's message also says how many
 * of them it holds, which is not what expected_length is compared with. */
bool api_sess_check_expected(struct api_call *c, const struct sess *s,
                          long long expected)
{
    size_t length = sess_length(s), held = kv_held(sess_cache(s));
    char rolled[80] = "";

    if (expected < 0 || (size_t)expected == length)
        return true;
    if (held != length)
        snprintf(rolled, sizeof rolled, " (every row appended; it holds %zu of them)", held);
    api_fail(c, API_ERR_LENGTH_CONFLICT, "/expected_length",
             "the session's length is %zu rows%s, expected_length is %lld",
             length, rolled, expected);
    return false;
}

/* Optional "expected_length": -1 when absent. */
bool api_sess_read_expected(struct api_call *c, const json_t *body,
                          long long *out)
{
    size_t x;
    *out = -1;
    if (!member(body, "expected_length"))
        return true;
    if (!read_int(c, body, "expected_length", false, 0, (size_t)INT64_MAX, 0, &x))
        return false;
    *out = (long long)x;
    return true;
}

/* ---- POST /v1/sessions ------------------------------------------------------ */

static const char *const create_fields[] = {
    "d_k", "d_v", "heads", "kv_heads", "dtype", "softmax", "sink_logit",
    "scale", "bias", "rope", "alibi", "max_tokens", "ttl_s", "kv_dtype", "softcap",
    "window", NULL};

/* Everything a create request owns while it is being read. */
struct create_req {
    struct sess_spec spec;
    struct api_bias bias;
    double *slopes;
    double *sinks;                  /* per-head sink logits or NULL */
};

static bool read_dims(struct api_call *c, const json_t *body,
                      struct attn_shape *sh)
{
    size_t lim = api_max_elements(c), w;
    if (!read_int(c, body, "d_k", true, 1, lim, 0, &sh->d_k) ||
        !read_int(c, body, "d_v", true, 1, lim, 0, &sh->d_v) ||
        !read_int(c, body, "heads", false, 1, lim, 1, &sh->h) ||
        !read_int(c, body, "kv_heads", false, 1, lim, sh->h, &sh->h_kv))
        return false;
    if (sh->h % sh->h_kv != 0) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, "/kv_heads",
                 "heads (%zu) must be a multiple of kv_heads (%zu)", sh->h, sh->h_kv);
        return false;
    }
    /* one row of q, and one row of k and v over all heads, must fit in a
     * request */
    if (!core_mul(sh->h, sh->d_k, &w) || w > lim ||
        !core_add(sh->d_k, sh->d_v, &w) || !core_mul(w, sh->h_kv, &w) || w > lim) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, "/heads",
                 "a row over all heads would pass --max-elements (%zu)", lim);
        return false;
    }
    return true;
}

static bool read_ttl(struct api_call *c, const json_t *body, double *ttl)
{
    json_t *v = member(body, "ttl_s");
    *ttl = c->ctx->cfg.session_ttl_s;
    if (!v)
        return true;
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (!json_is_number(v) || !(x > 0) || x > 31536000.0) {
        api_fail(c, API_ERR_INVALID_FIELD, "/ttl_s",
                 "expected seconds in (0, 31536000]");
        return false;
    }
    *ttl = x;
    return true;
}

static bool read_create(struct api_call *c, const json_t *body,
                        struct create_req *cr)
{
    struct sess_spec *sp = &cr->spec;
    struct attn_params *p = &sp->params;
    size_t budget = api_max_elements(c);
    size_t tok_max = c->ctx->cfg.max_tokens ? c->ctx->cfg.max_tokens : SIZE_MAX;
    bool given;
    if (!api_check_fields(c, body, "", create_fields) ||
        !api_read_dtype(c, member(body, "dtype"), "/dtype", &p->dtype, &c->half) ||
        !read_dims(c, body, &sp->shape) ||
        !api_read_sinks(c, body, "", sp->shape.h, p, &cr->sinks) ||
        !api_read_scale(c, member(body, "scale"), "/scale", &p->scale, &given) ||
        !api_read_softcap(c, member(body, "softcap"), "/softcap", &p->softcap) ||
        !api_check_float32_params(c, p, sp->shape.h, "") ||
        !api_read_rope(c, member(body, "rope"), "/rope", sp->shape.d_k, p) ||
        !api_read_alibi(c, member(body, "alibi"), "/alibi", sp->shape.h,
                        &p->alibi, &cr->slopes) ||
        !api_read_bias(c, member(body, "bias"), "/bias", p->dtype, &sp->shape,
                       &budget, &cr->bias) ||
        !read_int(c, body, "max_tokens", false, 1, tok_max,
                  c->ctx->cfg.max_tokens, &sp->max_tokens) ||
        !read_ttl(c, body, &sp->ttl_s) ||
        !api_roll_read_window(c, member(body, "window"), &sp->window) ||
        !api_roll_check_tokens(c, &sp->window, sp->max_tokens,
                               member(body, "max_tokens") != NULL, "/max_tokens"))
        return false;
    sp->half = c->half;
    if (!api_read_kv_dtype(c, member(body, "kv_dtype"), "/kv_dtype", p->dtype, c->half,
                           &sp->kv_store) ||
        !api_roll_check_bytes(c, sp, "/window"))
        return false;
    if (!given)
        p->scale = attn_default_scale(sp->shape.d_k);
    p->alibi_slopes = cr->slopes;
    struct attn_inputs in = {0};
    api_bias_inputs(&cr->bias, &in);
    sp->bias_q = in.bias_q;
    sp->bias_k = in.bias_k;
    sp->bias_v = in.bias_v;
    sp->bias_q_heads = in.bias_q_heads;
    sp->bias_k_heads = in.bias_k_heads;
    sp->bias_v_heads = in.bias_v_heads;
    return true;
}

/* The Idempotency-Key of a create or fork (api/idem.c) over the body as
 * sent: *k set and *has, or false when answered (a malformed key, or a
 * session that holds the key already: its replay or 422). */
static bool read_idem(struct api_call *c, enum api_idem_route route, const char *parent,
                      struct api_idem *k, bool *has)
{
    if (!api_idem_read(c, route, parent, k, has))
        return false;
    if (!*has)
        return true;
    api_idem_more(k, c->req->body, c->req->body_len);
    api_idem_end(k);
    return !api_idem_replay(c, k);
}

static void sessions_create(struct api_call *c)
{
    struct create_req cr;
    struct api_idem k;
    bool keyed;
    char id[SESS_ID_MAX];
    memset(&cr, 0, sizeof cr);
    if (!read_idem(c, API_IDEM_CREATE, NULL, &k, &keyed))
        return;
    json_t *body = api_parse_body(c);
    if (!body)
        return;
    bool ok = read_create(c, body, &cr);
    json_decref(body);
    if (ok) {
        enum core_status rc;
        struct sess *made = NULL;
        for (int tries = 1;; tries++) {
            rc = sess_create_idem(c->ctx->store, &cr.spec, keyed ? &k.k : NULL, id, &made);
            if (api_idem_created(c, rc, id, made, keyed ? &k : NULL, tries < API_IDEM_TRIES))
                break;
        }
    }
    api_bias_free(&cr.bias);
    free(cr.slopes);
    free(cr.sinks);
}

/* ---- POST /v1/sessions/{id}/kv ------------------------------------------- */

static const char *const append_fields[] = {"k", "v", "expected_length", NULL};

/* The wire error for a failed append of m rows to s (expected_length has
 * a path; a full session says by how much). */
void api_sessions_fail_full(struct api_call *c)
{
    const struct sess_config *cfg = sess_store_config(c->ctx->store);
    struct sess_stats s;
    sess_store_stats(c->ctx->store, &s);
    api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "no room in the session store: it holds %zu "
             "sessions (--max-sessions %zu) and %zu cache bytes (--max-cache-bytes %zu)%s; "
             "delete sessions, or retry later", s.sessions, cfg->max_sessions, s.bytes,
             cfg->max_cache_bytes, cfg->policy == SESS_POLICY_LRU
                 ? ", and the sessions that would have to go are in use" : "");
}

void api_sessions_fail_nonfinite(struct api_call *c, const struct sess *s, size_t m, bool pass)
{
    const struct sess_spec *sp = sess_spec(s);
    const char *store = kv_store_name(sp->kv_store, sp->params.dtype);
    if (pass && m == 0) {
        api_fail_compute(c, CORE_ENONFINITE, sp->params.dtype);     /* no rows: the pass's */
    } else if (!pass) {
        /* the rows were read finite: bias, RoPE or the storage form overflowed */
        api_fail(c, API_ERR_NON_FINITE, NULL, "a key or value row, after the session's bias "
                 "and RoPE, is outside the %s range its cache stores rows in (kv_dtype); "
                 "scale the rows down", store);
    } else {
        api_fail(c, API_ERR_NON_FINITE, NULL, "a key or value row, after the session's bias "
                 "and RoPE, is outside the %s range its cache stores rows in (kv_dtype), or "
                 "a score or an output is not finite in %s: q·k with its scale and biases "
                 "overflowed; scale the inputs down", store,
                 sp->params.dtype == ATTN_F64 ? "float64" : "float32");
    }
}

void api_sess_fail_append(struct api_call *c, enum core_status rc, const struct sess *s, size_t m,
                        bool pass)
{
    if (rc == CORE_ENONFINITE) {
        api_sessions_fail_nonfinite(c, s, m, pass);
    } else if (rc == CORE_ECAPACITY) {
        api_sessions_fail_full(c);
    } else if (rc == CORE_ELENGTH) {
        api_fail_core(c, rc, "/expected_length");
    } else if (rc == CORE_EFULL) {
        size_t cap = sess_max_rows(c->ctx->store, s), own = sess_spec(s)->max_tokens;
        if (cap < own)
            api_fail(c, API_ERR_SESSION_FULL, NULL, "the session holds %zu rows; %zu more "
                     "would pass this replica's --max-tokens of %zu, lowered since the "
                     "session was made with max_tokens %zu: it takes rows up to %zu here "
                     "(export it to a replica whose --max-tokens allows %zu for more)",
                     kv_held(sess_cache(s)), m, cap, own, cap, own);
        else
            api_fail(c, API_ERR_SESSION_FULL, NULL, "the session holds %zu rows; %zu more "
                     "would pass its max_tokens of %zu", kv_held(sess_cache(s)), m, own);
    } else {
        api_fail_core(c, rc, NULL);
    }
}

static void kv_append_req(struct api_call *c, const char *id)
{
    struct api_tensor k = {0}, v = {0};
    size_t budget = api_max_elements(c), m;
    long long expected;
    json_t *body = api_parse_body(c);
    if (!body)
        return;
    if (!api_check_fields(c, body, "", append_fields) ||
        !api_sess_read_expected(c, body, &expected)) {
        json_decref(body);
        return;
    }
    struct sess *s = api_sess_acquire(c, id);
    if (!s) {
        json_decref(body);
        return;
    }
    bool ok = api_sess_check_expected(c, s, expected) &&
              api_sess_read_kv(c, body, sess_spec(s), true, &budget, &k, &v, &m);
    json_decref(body);
    if (ok) {
        enum core_status rc = sess_append(c->ctx->store, s, k.data, v.data, m,
                                          expected);
        if (rc == CORE_OK) {
            reply_session(c, s, 200);
            s = NULL;
        } else {
            api_sess_fail_append(c, rc, s, m, false);
        }
    }
    if (s)
        sess_release(c->ctx->store, s);
    api_tensor_free(&k);
    api_tensor_free(&v);
}

/* ---- GET /v1/sessions/{id}/kv -------------------------------------------- */

/* Append one cached matrix (all heads) of the cache: rank 2 for one head.
 * A narrow cache's rows are widened for printing (float16/bfloat16 rows
 * print as themselves, int8 rows as q·scale in float32). */
static bool write_cached(struct api_buf *b, const struct kv_cache *kv, bool keys)
{
    size_t H = kv_heads(kv), L = kv_held(kv), d = keys ? kv_d_k(kv) : kv_d_v(kv);
    size_t front = kv_held_front(kv), from = kv_held_from(kv);
    size_t es = attn_dtype_size(kv_dtype(kv));
    size_t shape[2] = {L, d};
    enum kv_store st = kv_store(kv);
    void *wide = NULL;
    if (L && !(wide = malloc(L * d * attn_dtype_size(kv_dtype(kv)))))
        return false;                       /* L·d was bounded by --max-elements */
    if (H > 1)
        api_buf_putc(b, '[');
    for (size_t g = 0; g < H; g++) {
        if (g)
            api_buf_putc(b, ',');
        if (L == 0) {
            api_buf_puts(b, "[]");
            continue;
        }
        /* the held rows: all of them, or the front ones and the tail */
        kv_read_rows(kv, g, 0, front, keys ? wide : NULL, keys ? NULL : wide);
        if (from)
            kv_read_rows(kv, g, from, kv_length(kv) - from,
                         keys ? (char *)wide + front * d * es : NULL,
                         keys ? NULL : (char *)wide + front * d * es);
        if (st == KV_STORE_SAME) {
            api_write_matrix(b, wide, kv_dtype(kv), 2, shape, 0, false);
        } else {
            if (st == KV_STORE_I8)
                api_write_matrix(b, wide, ATTN_F32, 2, shape, 0, false);
            else
                api_write_matrix_half(b, wide, st == KV_STORE_F16 ? API_HALF_F16
                                      : API_HALF_BF16, 2, shape, 0);
        }
    }
    if (H > 1)
        api_buf_putc(b, ']');
    free(wide);
    return true;
}

/* A rolling session's "window" and "held" members, each with a comma
 * after it (nothing for other sessions). */
static bool put_held(struct api_buf *b, const struct sess *s)
{
    struct sess_held h;
    json_t *o = json_object();
    sess_held_rows(s, &h);
    if (o)
        api_roll_describe(o, sess_spec(s), &h);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t)
        return false;
    size_t n = strlen(t);
    if (n > 2)
        api_buf_printf(b, "%.*s,", (int)(n - 2), t + 1);
    free(t);
    return true;
}

static void kv_get_req(struct api_call *c, const char *id)
{
    struct sess *s = api_sess_acquire(c, id);
    if (!s)
        return;
    const struct kv_cache *kv = sess_cache(s);
    size_t L = kv_held(kv), numbers, cap, w;
    /* each number with its comma, plus a row's brackets (at most one row
     * per number), plus the keys */
    if (!core_add(kv_d_k(kv), kv_d_v(kv), &w) ||
        !core_mul3(L, w, kv_heads(kv), &numbers) || numbers > api_max_elements(c) ||
        !core_mul(numbers, API_NUM_MAX + 4, &cap) || !core_add(cap, 4096, &cap)) {
        sess_release(c->ctx->store, s);
        api_fail(c, API_ERR_RESPONSE_TOO_LARGE, NULL,
                 "the cache holds more than %zu numbers (--max-elements)",
                 api_max_elements(c));
        return;
    }
    struct api_buf b;
    api_buf_init(&b, cap);
    const struct sess_spec *sp = sess_spec(s);
    api_buf_printf(&b, "{\"length\":%zu,\"dtype\":\"%s\",\"kv_dtype\":\"%s\",", kv_length(kv),
                   api_dtype_name(kv_dtype(kv), (enum api_half)sp->half),
                   kv_store_name(kv_store(kv), kv_dtype(kv)));
    bool ok = put_held(&b, s);
    api_buf_puts(&b, "\"k\":");
    ok = ok && write_cached(&b, kv, true);
    api_buf_puts(&b, ",\"v\":");
    ok = ok && write_cached(&b, kv, false);
    api_buf_putc(&b, '}');
    sess_release(c->ctx->store, s);
    if (!ok) {
        api_buf_free(&b);
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return;
    }
    api_reply_buf(c, 200, &b);
}

/* ---- truncate, fork, get, delete ----------------------------------------- */

static void truncate_req(struct api_call *c, const char *id)
{
    static const char *const fields[] = {"length", NULL};
    size_t length;
    json_t *body = api_parse_body(c);
    if (!body)
        return;
    bool ok = api_check_fields(c, body, "", fields) &&
              read_int(c, body, "length", true, 0, (size_t)INT64_MAX, 0, &length);
    json_decref(body);
    if (!ok)
        return;
    struct sess *s = api_sess_acquire(c, id);
    if (!s)
        return;
    if (length > sess_length(s)) {
        size_t len = sess_length(s);
        sess_release(c->ctx->store, s);
        api_fail(c, API_ERR_INVALID_FIELD, "/length",
                 "length must be 0..%zu (the session's length)", len);
        return;
    }
    if (!api_roll_check_truncate(c, s, length)) {
        sess_release(c->ctx->store, s);
        return;
    }
    enum core_status rc = sess_truncate(c->ctx->store, s, length);
    if (rc != CORE_OK) {
        sess_release(c->ctx->store, s);
        api_fail_core(c, rc, NULL);
        return;
    }
    reply_session(c, s, 200);
}

/* A fork is a new session: one whose max_tokens is over --max-tokens (a
 * session restored after the limit was lowered) is refused as its create
 * or the import of its export is, 422 limit_exceeded; s released then. */
static bool fork_within_tokens(struct api_call *c, struct sess *s)
{
    size_t cap = sess_max_rows(c->ctx->store, s), own = sess_spec(s)->max_tokens;
    if (cap == own)
        return true;
    sess_release(c->ctx->store, s);
    api_fail(c, API_ERR_LIMIT_EXCEEDED, NULL, "the session's max_tokens (%zu) is over this "
             "replica's --max-tokens (%zu), lowered since it was made: a fork would be a new "
             "session over the limit, refused as its create or the import of its export "
             "is; export it to a replica whose --max-tokens allows %zu to fork it there",
             own, cap, own);
    return false;
}

static void fork_req(struct api_call *c, const char *id)
{
    static const char *const none[] = {NULL};
    char nid[SESS_ID_MAX];
    struct api_idem k;
    bool keyed;
    if (!read_idem(c, API_IDEM_FORK, id, &k, &keyed))
        return;
    json_t *body = api_parse_body_optional(c);
    if (!body)
        return;
    bool ok = api_check_fields(c, body, "", none);
    json_decref(body);
    if (!ok)
        return;
    struct sess *s = api_sess_acquire(c, id);
    if (!s || !fork_within_tokens(c, s))
        return;
    struct sess *made = NULL;
    enum core_status rc = sess_fork_idem(c->ctx->store, s, keyed ? &k.k : NULL, nid, &made);
    sess_release(c->ctx->store, s);
    /* not tried again: this fork waited for the parent, which the one
     * before it with the key held until its record was written or failed,
     * so it met that one's session linked only if it was kept */
    api_idem_created(c, rc, nid, made, keyed ? &k : NULL, false);
}

static void get_req(struct api_call *c, const char *id)
{
    struct sess *s = api_sess_acquire(c, id);
    if (s)
        reply_session(c, s, 200);
}

static void delete_req(struct api_call *c, const char *id)
{
    if (sess_delete(c->ctx->store, id) != CORE_OK)
        api_fail(c, API_ERR_SESSION_NOT_FOUND, NULL, NULL);
    else
        api_reply_empty(c, 204);
}

/* ---- routing -------------------------------------------------------------- */

static bool is_method(const struct api_call *c, const char *m)
{
    return strcmp(c->req->method, m) == 0;
}

/* Split "/{id}[/action]" into id and action ("" if none); an overlong id
 * becomes "" (unknown to the store: 404 session_not_found). false: no id. */
static bool split_rest(const char *rest, char *id, const char **action)
{
    const char *p = rest + 1, *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0)
        return false;
    if (n >= SESS_ID_MAX)
        n = 0;
    memcpy(id, p, n);
    id[n] = '\0';
    *action = slash ? slash + 1 : "";
    return true;
}

/* The actions below a session taking POST alone, with their templates. */
static const struct {
    const char *name, *route;
    void (*fn)(struct api_call *, const char *);
} session_posts[] = {{"attention", route_attention, api_sessions_attention},
                     {"truncate", route_truncate, truncate_req},
                     {"fork", route_fork, fork_req}};

const char *api_sessions_route(const char *rest)
{
    char id[SESS_ID_MAX];
    const char *action;

    if (rest[0] == '\0' || strcmp(rest, "/") == 0)
        return route_root;
    if (!split_rest(rest, id, &action))
        return "unmatched";
    if (action[0] == '\0')
        return route_id;
    if (strcmp(action, "kv") == 0)
        return route_kv;
    if (strcmp(action, "export") == 0)
        return api_route_export;
    for (size_t i = 0; i < sizeof session_posts / sizeof session_posts[0]; i++)
        if (strcmp(action, session_posts[i].name) == 0)
            return session_posts[i].route;
    return "unmatched";
}

/* The methods of each route below /v1/sessions: what api_sessions
 * answers, its 405s' Allow and the router's CORS preflight. */
static const struct api_route_methods session_methods[] = {
    {route_root, API_M_POST}, {route_id, API_M_GET | API_M_DELETE},
    {route_kv, API_M_GET | API_M_POST}, {api_route_export, API_M_GET},
    {route_attention, API_M_POST}, {route_truncate, API_M_POST}, {route_fork, API_M_POST}};

unsigned api_sessions_methods(const char *rest)
{
    return api_route_methods(session_methods, sizeof session_methods / sizeof session_methods[0],
                             api_sessions_route(rest));
}

/* Dispatch "/{id}/action" by action and method (the method is one the
 * route answers: api_sessions checked it; HEAD is GET's). */
static void on_session(struct api_call *c, const char *id, const char *action)
{
    bool get = is_method(c, "GET") || is_method(c, "HEAD");
    if (action[0] == '\0') {
        get ? get_req(c, id) : delete_req(c, id);
    } else if (strcmp(action, "kv") == 0) {
        get ? kv_get_req(c, id) : kv_append_req(c, id);
    } else if (strcmp(action, "export") == 0) {
        api_sessions_export(c, id);
    } else {
        for (size_t i = 0; i < sizeof session_posts / sizeof session_posts[0]; i++)
            if (strcmp(action, session_posts[i].name) == 0)
                session_posts[i].fn(c, id);
    }
}

void api_sessions(struct api_call *c, const char *rest)
{
    char id[SESS_ID_MAX];
    const char *action = "";
    unsigned methods = api_sessions_methods(rest);
    c->resp->route = api_sessions_route(rest);
    if (!c->ctx->store) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "sessions are not available");
        return;
    }
    if (!methods) {
        api_fail(c, API_ERR_NOT_FOUND, NULL, "no such route under /v1/sessions");
        return;
    }
    if (!(api_method_bit(c->req->method) & methods)) {
        api_fail_method(c, methods);
        return;
    }
    if (c->resp->route == route_root)
        sessions_create(c);
    else if (split_rest(rest, id, &action))
        on_session(c, id, action);
}
