/*
 * core/store_ops.c — operations on a held session (store.h): its settings
 * and rows held, append, attend, truncate, and what a rolling session lets
 * go after each committed append. The map, the locks, the accounting and
 * the lifetime of sessions are core/store.c's; every change here is
 * journaled through core/durable.c's hooks under the session's own lock.
 */
#include "store_impl.h"
#include "attn_blame.h"
#include "attn_extras.h"

#include <string.h>

const struct sess_spec *sess_spec(const struct sess *s) { return &s->spec; }
size_t sess_length(const struct sess *s) { return kv_length(s->kv); }
const struct kv_cache *sess_cache(const struct sess *s) { return s->kv; }

void sess_held_rows(const struct sess *s, struct sess_held *out)
{
    out->length = kv_length(s->kv);
    out->front = kv_held_front(s->kv);
    out->from = kv_held_from(s->kv);
}

size_t sess_reach(const struct sess *s, size_t n, size_t m)
{
    size_t end = kv_length(s->kv) + m, left = (size_t)s->spec.window.left;
    if (!s->spec.window.on || n > end || end - n < left)
        return 0;
    return end - n - left;
}

size_t sess_roll_held_max(const struct attn_window *w)
{
    const size_t page = KV_PAGE_ROWS, big = SIZE_MAX / 4;
    size_t sinks = (size_t)w->sinks, left = (size_t)w->left;
    if (sinks > big || left > big)
        return SIZE_MAX;
    return (sinks + page - 1) / page * page + left + page - 1;
}

size_t sess_roll_bytes_need(const struct sess_spec *sp)
{
    const struct attn_shape *sh = &sp->shape;
    size_t rows = sess_roll_held_max(&sp->window), b;
    if (!sp->window.on)
        return 0;
    if (rows == SIZE_MAX ||
        !kv_rows_bytes_for(sp->params.dtype, sp->kv_store, sh->h_kv, sh->d_k, sh->d_v,
                           rows + 1, &b))
        return SIZE_MAX;
    return b;
}

size_t sess_min_length(const struct sess *s)
{
    size_t from = kv_held_from(s->kv);
    return from ? from + (size_t)s->spec.window.left : 0;
}

/* A rolling session lets go of what no later query can see (store.h). */
static void roll(struct sess *s)
{
    const struct attn_window *w = &s->spec.window;
    size_t len = kv_length(s->kv), left = (size_t)w->left;
    if (w->on && len > left)
        kv_roll(s->kv, (size_t)w->sinks, len - left);
}

void sess_get_info(struct sess_store *st, const struct sess *s,
                   struct sess_info *out)
{
    memcpy(out->id, s->id, SESS_ID_MAX);
    out->length = kv_length(s->kv);
    out->max_tokens = s->spec.max_tokens;
    out->ttl_s = s->spec.ttl_s;
    kv_bytes_split(s->kv, &out->bytes, &out->shared_bytes);
    sess_held_rows(s, &out->held);
    pthread_mutex_lock(&st->mu);
    out->expires_in_s = sess_expires_in(st, s);
    pthread_mutex_unlock(&st->mu);
}

size_t sess_max_rows(const struct sess_store *st, const struct sess *s)
{
    size_t cap = st->cfg.max_tokens;
    return cap && cap < s->spec.max_tokens ? cap : s->spec.max_tokens;
}

/* sess_append without its journal record. */
static enum core_status append_rows(struct sess_store *st, struct sess *s,
                                    const void *k, const void *v, size_t m,
                                    long long expected_length)
{
    size_t len = kv_length(s->kv), need;
    if (!s->detached && !sess_is_linked(st, s))
        return CORE_ENOTFOUND;
    if (expected_length >= 0 && (unsigned long long)expected_length != len)
        return CORE_ELENGTH;
    if (m == 0 || !k || !v)
        return CORE_EINVAL;
    if (!core_add(len, m, &need))
        return CORE_ELIMIT;
    /* a rolling session's max_tokens bounds the rows it holds; the
     * replica's limit too, but for a replay (rows it took once) */
    size_t cap = st->restoring ? s->spec.max_tokens : sess_max_rows(st, s);
    if ((s->spec.window.on ? kv_held(s->kv) + m : need) > cap)
        return CORE_EFULL;
    size_t claimed;
    bool tight;
    enum core_status rc = sess_claim_rows(st, s, need, &claimed, &tight);
    if (rc != CORE_OK)
        return rc;
    struct attn_inputs in = {.k = k, .v = v, .bias_k = s->spec.bias_k,
                             .bias_v = s->spec.bias_v,
                             .bias_k_heads = s->spec.bias_k_heads,
                             .bias_v_heads = s->spec.bias_v_heads};
    /* the room is made only once the rows are known good: a refused
     * append reserves, copies and counts nothing */
    rc = kv_append_ex(s->kv, &s->spec.params, &in, m, tight);
    sess_unclaim_rows(st, claimed);
    return rc;
}

/* Journal an append that has been applied (from the mark taken before
 * it); rolled back to the mark when the record cannot be written (the
 * answer is then CORE_ESTORAGE), else the mark is let go. A detached
 * session's rows are journaled whole once it is put in place
 * (core/store_put.c): an APPEND under its id now would land on the
 * session that id names. */
static enum core_status journal_append(struct sess_store *st, struct sess *s,
                                       const void *k, const void *v, size_t m,
                                       struct kv_mark *mark)
{
    enum core_status rc = s->detached ? CORE_OK : sess_dur_append(st, s, k, v, m);
    if (rc != CORE_OK)
        kv_rollback(s->kv, mark);
    else
        kv_unmark(s->kv, mark);
    return rc;
}

/* A pass that ends its session (sess_query's end): the DELETE record in
 * place of the append's, then the session removed; the append (m rows
 * from the mark) kept for the caller's answer, or rolled back when the
 * record could not be written. */
static enum core_status end_pass(struct sess_store *st, struct sess *s, size_t m,
                                 struct kv_mark *mark)
{
    enum core_status rc = sess_end_held(st, s);
    if (m > 0 && rc == CORE_OK)
        kv_unmark(s->kv, mark);
    else if (m > 0)
        kv_rollback(s->kv, mark);
    return rc;
}

enum core_status sess_append(struct sess_store *st, struct sess *s,
                             const void *k, const void *v, size_t m,
                             long long expected_length)
{
    struct kv_mark mark;
    kv_mark(s->kv, &mark);
    enum core_status rc = append_rows(st, s, k, v, m, expected_length);
    if (rc != CORE_OK) {
        kv_unmark(s->kv, &mark);
        return rc;
    }
    rc = journal_append(st, s, k, v, m, &mark);
    if (rc == CORE_OK)
        roll(s);
    return rc;
}

enum core_status sess_request(const struct sess *s, const struct sess_query *q,
                              size_t m_extra, struct attn_request *out)
{
    size_t L;
    if (!core_add(kv_held(s->kv), m_extra, &L))
        return CORE_ELIMIT;
    memset(out, 0, sizeof *out);
    out->shape = s->spec.shape;
    out->shape.n = q->n;
    out->shape.L = L;
    out->params = s->spec.params;
    out->causal = q->causal;
    out->empty_rows = q->empty_rows;
    out->attn_bias = q->attn_bias;
    out->attn_bias_heads = q->attn_bias ? q->attn_bias_heads : 1;
    out->mask = q->mask;
    out->mask_heads = q->mask ? q->mask_heads : 1;
    out->outputs = q->outputs;
    out->window = q->window;
    if (s->spec.window.on) {
        out->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        out->window = s->spec.window;
    }
    return CORE_OK;
}

enum core_status sess_attend(struct sess_store *st, struct sess *s,
                             const void *k, const void *v, size_t m,
                             const struct sess_query *q,
                             struct attn_result *out, struct attn_ws *ws)
{
    return sess_attend_x(st, s, k, v, m, q, NULL, NULL, out, ws);
}

enum core_status sess_attend_x(struct sess_store *st, struct sess *s,
                               const void *k, const void *v, size_t m,
                               const struct sess_query *q, const struct attn_extras *x,
                               struct attn_extras_out *xo, struct attn_result *out,
                               struct attn_ws *ws)
{
    struct attn_request r;
    enum core_status rc = sess_request(s, q, m, &r);
    if (rc == CORE_OK) {
        struct attn_request rc_r = r;   /* extras alone leave outputs 0 */
        if (x && !rc_r.outputs)
            rc_r.outputs = ATTN_OUT_SCORES;
        rc = attn_check(&rc_r);
    }
    if (rc != CORE_OK)
        return rc;
    if (kv_held_from(s->kv) > sess_reach(s, q->n, m))
        return CORE_ELENGTH;    /* its window would start in rows let go */
    struct kv_mark mark = {0};
    if (m > 0) {
        kv_mark(s->kv, &mark);      /* a failed attention gives a copied page back */
        rc = append_rows(st, s, k, v, m, -1);
        if (rc != CORE_OK) {
            kv_unmark(s->kv, &mark);
            return rc;
        }
    }
    struct attn_inputs in = {.q = q->q, .bias_q = s->spec.bias_q,
                             .bias_q_heads = s->spec.bias_q_heads};
    rc = kv_attend_x(s->kv, &r, &in, x, xo, out, ws);
    if (rc == CORE_EEMPTYROW && q->empty &&
        kv_blame_empty(s->kv, &r, x ? x->heads : NULL, x ? x->nh : 0, q->empty) != CORE_OK)
        q->empty->found = false;
    if (rc == CORE_ENONFINITE && q->blame &&
        kv_blame(s->kv, &r, &in, x ? x->heads : NULL, x ? x->nh : 0, q->blame) != CORE_OK)
        q->blame->input = ATTN_BLAME_NONE;
    if (rc == CORE_OK && q->accept && !q->accept(q->accept_arg, out, xo))
        rc = CORE_ENONFINITE;
    if (rc != CORE_OK && m > 0)
        kv_rollback(s->kv, &mark);
    if (rc == CORE_OK && q->end && !s->detached)
        return end_pass(st, s, m, &mark);
    if (rc == CORE_OK && m > 0 && (rc = journal_append(st, s, k, v, m, &mark)) == CORE_OK)
        roll(s);
    return rc;
}

enum core_status sess_truncate(struct sess_store *st, struct sess *s,
                               size_t length)
{
    if (!sess_is_linked(st, s))
        return CORE_ENOTFOUND;
    if (length > kv_length(s->kv))
        return CORE_EINVAL;
    if (length < sess_min_length(s))
        return CORE_ELENGTH;
    enum core_status rc = sess_dur_truncate(st, s, length);
    if (rc != CORE_OK)
        return rc;
    kv_truncate(s->kv, length);
    return CORE_OK;
}
