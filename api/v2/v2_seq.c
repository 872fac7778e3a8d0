/*
 * api/v2/v2_seq.c — where an Open Inference Protocol v2 sequence lives: in the
 * session named after its sequence_id (core/store.h's sess_named_id), made
 * anew by a sequence_start detached from the store and put in place, over
 * the earlier sequence of the id, only once the start is answered.
 * A sequence is found again from its id alone, by any request and after a
 * restart (the session comes back from --state-dir under the same id), with
 * no map to keep. Names: an integer id n (1..2^64-1) is "v2i<n>"; a
 * string of at most 20 characters of [A-Za-z0-9_-] is "v2s<string>"; any
 * other string is "v2h" and 20 base64url characters (120 bits) of a hash
 * of its bytes.
 */
#include "api/v2/v2_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/sessions_roll.h"

#define PLAIN_MAX (SESS_NAME_MAX - 4)   /* a string kept as it is: 20 */
#define HASH_CHARS (SESS_NAME_MAX - 4)  /* 6 bits each: 120 of the 128 */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdu;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53u;
    k ^= k >> 33;
    return k;
}

/*
 * 128 bits of p[n]: two multiplicative lanes (FNV-1a's and a golden-ratio
 * one) crossed and finished by MurmurHash3's mixer. Written here because
 * none of the four libraries has a hash; it need not be cryptographic: a
 * sequence id is the client's own handle, and whoever knows one can use
 * that sequence already.
 */
static void hash128(const unsigned char *p, size_t n, uint64_t out[2])
{
    uint64_t a = 0xcbf29ce484222325u, b = 0x6a09e667f3bcc909u ^ n;
    size_t i;

    for (i = 0; i < n; i++) {
        a = (a ^ p[i]) * 0x100000001b3u;
        b = (b ^ p[i]) * 0x9e3779b97f4a7c15u;
        b ^= b >> 29;
    }
    out[0] = fmix64(a ^ (b << 17 | b >> 47));
    out[1] = fmix64(b ^ out[0]);
}

static bool plain(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > PLAIN_MAX)
        return false;
    for (i = 0; i < n; i++)
        if (!memchr(b64url, s[i], sizeof b64url - 1))
            return false;
    return true;
}

void api_v2_seq_name_num(uint64_t num, char *name)
{
    snprintf(name, SESS_NAME_MAX, "v2i%" PRIu64, num);  /* 23 characters at most */
}

bool api_v2_seq_name(const json_t *id, char *name)
{
    if (json_is_integer(id) && json_integer_value(id) > 0) {
        api_v2_seq_name_num((uint64_t)json_integer_value(id), name);
        return true;
    }
    if (!json_is_string(id))
        return false;
    const char *s = json_string_value(id);
    size_t n = json_string_length(id), i, o = 3;
    if (plain(s, n)) {
        snprintf(name, SESS_NAME_MAX, "v2s%s", s);
        return true;
    }
    uint64_t h[2];
    hash128((const unsigned char *)s, n, h);
    memcpy(name, "v2h", 3);
    for (i = 0; i < HASH_CHARS; i++)
        name[o++] = b64url[(h[i % 2] >> (6 * (i / 2))) & 63];
    name[o] = '\0';
    return true;
}

/* sequence_start: a new session from this request's shapes and options,
 * named after the sequence id, made detached (its first pass runs on it
 * away from the store); the earlier sequence of the id, if any, is held
 * meanwhile (x->old: requests on it wait) and is replaced only once the
 * start is answered (api_v2_seq_commit), so a start refused for any reason
 * leaves it as it was. Its window_* make it a rolling session
 * (api_roll_check_window checked them). */
bool api_v2_seq_create(struct api_call *c, struct v2_infer *x, const struct attn_request *r,
                       const struct attn_inputs *in)
{
    struct sess_spec sp;
    enum core_status st;

    memset(&sp, 0, sizeof sp);
    sp.shape = r->shape;
    sp.shape.n = sp.shape.L = 0;
    sp.params = r->params;
    sp.bias_q = in->bias_q;
    sp.bias_k = in->bias_k;
    sp.bias_v = in->bias_v;
    sp.bias_q_heads = in->bias_q ? in->bias_q_heads : 0;
    sp.bias_k_heads = in->bias_k ? in->bias_k_heads : 0;
    sp.bias_v_heads = in->bias_v ? in->bias_v_heads : 0;
    sp.half = x->half;
    sp.kv_store = x->kv_store;
    sp.window = x->window;          /* on: a rolling session, as /v1's "window" */
    if (!api_roll_check_bytes(c, &sp, "/parameters/window_left"))
        return false;
    if (!sess_named_id(c->ctx->store, x->seq_name, x->sid)) {
        api_fail_core(c, CORE_EINVAL, NULL);
        return false;
    }
    if (sess_acquire(c->ctx->store, x->sid, &x->old) != CORE_OK)
        x->old = NULL;
    st = sess_create_detached(c->ctx->store, &sp, x->seq_name, x->sid, &x->sess);
    if (st != CORE_OK) {
        api_fail_core(c, st, NULL);
        return false;
    }
    x->fresh = true;
    return true;
}

/* An answered sequence_start that also ends its sequence: its own
 * session is never put in place, and only an earlier sequence of the id
 * (or one started meanwhile) goes, in its one DELETE record; when that
 * record cannot be written the answer becomes the error and the earlier
 * sequence goes on as it was. */
static void end_at_start(struct api_call *c, struct v2_infer *x)
{
    struct sess *old = x->old;
    enum core_status st = CORE_OK;

    sess_drop_detached(c->ctx->store, x->sess);
    x->sess = x->old = NULL;
    x->fresh = false;
    if (old || sess_acquire(c->ctx->store, x->sid, &old) == CORE_OK)
        st = sess_delete_held(c->ctx->store, old);
    if (st != CORE_OK && st != CORE_ENOTFOUND)
        api_fail_core(c, st, NULL);
}

/* An answered (200) sequence_start: its session put in place under the
 * id, replacing the earlier sequence's in one journal record, and held as
 * a going sequence's is; if that fails, the answer becomes the error and
 * the earlier sequence goes on as it was. */
void api_v2_seq_commit(struct api_call *c, struct v2_infer *x)
{
    struct sess *held;
    enum core_status st;

    if (x->seq_end) {
        end_at_start(c, x);
        return;
    }
    st = sess_put_detached(c->ctx->store, x->sess, x->old, &held);

    x->sess = NULL;
    x->fresh = false;
    if (st == CORE_OK) {
        x->sess = held;
        x->old = NULL;                  /* it is held now, with the new rows */
        return;
    }
    if (st == CORE_EEXIST)
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, "/parameters/sequence_id",
                 "other requests are starting this sequence at the same time; try again");
    else if (st == CORE_ECAPACITY)
        api_sessions_fail_full(c);      /* --max-sessions: /v1's create says so too */
    else
        api_fail_core(c, st, NULL);
}

void api_v2_seq_let_go(struct api_call *c, struct v2_infer *x)
{
    /* an answered sequence_end removed its session with its pass
     * (sess_query's end), in the one record of its change */
    if (x->fresh)
        sess_drop_detached(c->ctx->store, x->sess);
    else if (x->sess)
        sess_release(c->ctx->store, x->sess);
    if (x->old)
        sess_release(c->ctx->store, x->old);
    x->sess = x->old = NULL;
    x->fresh = false;
}
