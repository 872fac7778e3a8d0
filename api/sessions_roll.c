/*
 * api/sessions_roll.c — rolling sessions on the wire (see sessions_roll.h).
 *
 * A rolling session is created with "window": {"left": W, "sinks": S}: its
 * queries are causal (bottom-right) with that window, and the rows no later
 * query can see are let go (core/store.h says which). "right" does not
 * apply (causal) and "left" is required (without it nothing could go).
 * Its GET answers carry "window" and "held": the ranges [start, end) of the
 * rows it holds, and every [n][L] of its passes (scores, weights, qk,
 * attn_bias, mask, top-k indices) has one column per held row, in order.
 */
#include "api/sessions_roll.h"

#include <stdio.h>
#include <string.h>

#include "api/read.h"

bool api_roll_read_window(struct api_call *c, const json_t *v, struct attn_window *w)
{
    return api_read_window(c, v, "/window", w) && api_roll_check_window(c, w, "/window", "");
}

bool api_roll_check_window(struct api_call *c, const struct attn_window *w, const char *prefix,
                           const char *spell)
{
    char path[API_PATH_MAX], name[32];

    if (!w->on)
        return true;
    if (w->right >= 0) {
        snprintf(name, sizeof name, "%sright", spell);
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path, prefix, name),
                 "a rolling session is causal: \"%s\" does not apply", name);
        return false;
    }
    if (w->left < 0) {
        snprintf(name, sizeof name, "%sleft", spell);
        api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path, prefix, name),
                 "a rolling session needs \"%s\" (the rows before each query it sees)", name);
        return false;
    }
    return true;
}

bool api_roll_check_tokens(struct api_call *c, const struct attn_window *w,
                           size_t max_tokens, bool given, const char *path)
{
    size_t held = w->on ? sess_roll_held_max(w) : 0;
    if (!w->on || max_tokens == 0 || max_tokens > held)
        return true;
    api_fail(c, API_ERR_INVALID_FIELD, path, "a rolling session with window "
             "left %lld and %lld sinks holds up to %zu rows between appends (rows go "
             "64 at a time), so max_tokens must be at least %zu for it to take a row "
             "each step; it is %zu%s", (long long)w->left, (long long)w->sinks, held,
             held + 1, max_tokens, given ? "" : " (the default, attnd's --max-tokens)");
    return false;
}

/* What a v2 start may send instead when its window does not fit under
 * max_tokens (over 0), into out: the largest window_left with these
 * sinks, or else the most window_sinks (whole pages) with window_left 0,
 * or that no window fits. held grows by one row with each row of
 * window_left (sess_roll_held_max). */
static void seq_window_advice(const struct attn_window *w, size_t max_tokens, char *out,
                              size_t size)
{
    struct attn_window sinks_only = *w, none = *w;
    sinks_only.left = 0;
    none.left = none.sinks = 0;
    size_t held0 = sess_roll_held_max(&sinks_only), least = sess_roll_held_max(&none);
    if (held0 < max_tokens)
        snprintf(out, size, "send a window_left of at most %zu with these window_sinks",
                 max_tokens - 1 - held0);
    else if (least < max_tokens)
        snprintf(out, size, "send window_sinks of at most %zu (with window_left 0)",
                 (max_tokens - 1 - least) / KV_PAGE_ROWS * KV_PAGE_ROWS);
    else
        snprintf(out, size, "no window fits: start the sequence without one");
}

bool api_roll_check_seq_tokens(struct api_call *c, const struct attn_window *w,
                               size_t max_tokens)
{
    size_t held = w->on ? sess_roll_held_max(w) : 0;
    char advice[96], need[48];
    if (!w->on || max_tokens == 0 || max_tokens > held)
        return true;
    seq_window_advice(w, max_tokens, advice, sizeof advice);
    if (held == SIZE_MAX)
        snprintf(need, sizeof need, "more than any --max-tokens");
    else
        snprintf(need, sizeof need, "a --max-tokens of at least %zu", held + 1);
    api_fail(c, API_ERR_INVALID_FIELD, "/parameters/window_left", "a rolling sequence with "
             "window_left %lld and window_sinks %lld holds up to %zu rows between appends "
             "(rows go 64 at a time), so taking a row each step needs %s; this replica's "
             "--max-tokens is %zu, which a sequence's parameters cannot raise: %s",
             (long long)w->left, (long long)w->sinks, held, need, max_tokens, advice);
    return false;
}

bool api_roll_check_bytes(struct api_call *c, const struct sess_spec *sp, const char *path)
{
    const struct attn_window *w = &sp->window;
    size_t max = c->ctx->store ? sess_store_config(c->ctx->store)->max_cache_bytes : 0;
    size_t need = sess_roll_bytes_need(sp), rows = sess_roll_held_max(w);
    char bytes[48];
    if (!w->on || max == 0 || need <= max)
        return true;
    if (need == SIZE_MAX)
        snprintf(bytes, sizeof bytes, "more cache bytes than fit in memory");
    else
        snprintf(bytes, sizeof bytes, "%zu cache bytes", need);
    api_fail(c, API_ERR_LIMIT_EXCEEDED, path, "a rolling session with window left %lld "
             "and %lld sinks holds up to %zu rows between appends (rows go 64 at a "
             "time) and one more while it appends: %s, over the whole cache "
             "(--max-cache-bytes %zu); a smaller window, fewer sinks or a narrower "
             "kv_dtype fits", (long long)w->left, (long long)w->sinks, rows, bytes, max);
    return false;
}

/* What h holds, as text for messages. */
static void held_text(char *out, size_t size, const struct sess_held *h)
{
    if (h->from && h->front)
        snprintf(out, size, "rows 0..%zu (the sinks' pages) and %zu..%zu", h->front - 1,
                 h->from, h->length - 1);
    else if (h->from && h->from < h->length)
        snprintf(out, size, "rows %zu..%zu", h->from, h->length - 1);
    else if (h->from)
        snprintf(out, size, "no row (every row before %zu was let go)", h->from);
    else if (h->length)
        snprintf(out, size, "every row, 0..%zu", h->length - 1);
    else
        snprintf(out, size, "no row yet");
}

void api_roll_describe(json_t *obj, const struct sess_spec *sp, const struct sess_held *h)
{
    if (!sp->window.on)
        return;
    json_t *held = json_array();
    if (h->from) {
        if (h->front)
            json_array_append_new(held, json_pack("[I,I]", (json_int_t)0,
                                                  (json_int_t)h->front));
        json_array_append_new(held, json_pack("[I,I]", (json_int_t)h->from,
                                              (json_int_t)h->length));
    } else if (h->length) {
        json_array_append_new(held, json_pack("[I,I]", (json_int_t)0, (json_int_t)h->length));
    }
    json_object_set_new(obj, "window",
                        json_pack("{s:I, s:I}", "left", (json_int_t)sp->window.left,
                                  "sinks", (json_int_t)sp->window.sinks));
    json_object_set_new(obj, "held", held);
}

bool api_roll_check_query(struct api_call *c, const struct sess *s, const json_t *body,
                          const struct sess_query *q, size_t m)
{
    const struct sess_spec *sp = sess_spec(s);
    const json_t *causal = json_object_get(body, "causal");
    if (!sp->window.on)
        return true;
    if (q->window.on) {
        api_fail(c, API_ERR_INVALID_FIELD, "/window",
                 "this session rolls with its own window (left %lld, sinks %lld): "
                 "its queries take no other", (long long)sp->window.left,
                 (long long)sp->window.sinks);
        return false;
    }
    return api_roll_check_pass(c, s, causal && !json_is_null(causal), q->causal, q->n, m,
                               "/causal", "/q");
}

bool api_roll_check_pass(struct api_call *c, const struct sess *s, bool causal_given,
                         enum attn_causal causal, size_t n, size_t m, const char *causal_path,
                         const char *q_path)
{
    const struct sess_spec *sp = sess_spec(s);
    if (!sp->window.on)
        return true;
    if (causal_given && causal != ATTN_CAUSAL_BOTTOM_RIGHT) {
        api_fail(c, API_ERR_INVALID_FIELD, causal_path,
                 "a rolling session is causal (bottom-right): send true or leave it out");
        return false;
    }
    struct sess_held h;
    sess_held_rows(s, &h);
    size_t reach = sess_reach(s, n, m);
    if (h.from <= reach)
        return true;
    char held[128];
    /* n <= m always passes (rolls keep length - left), so most >= m here */
    size_t most = h.length + m - (size_t)sp->window.left - h.from;
    held_text(held, sizeof held, &h);
    if (most == 0)
        api_fail(c, API_ERR_LENGTH_CONFLICT, q_path,
                 "the session holds %s: a query without appended rows would reach "
                 "back to row %zu (window left %lld), and the last append let the rows "
                 "before %zu go; send the next token's key and value rows with the "
                 "query (a query may ask as many rows as it appends), or fork the "
                 "session before such an append to ask again without one",
                 held, reach, (long long)sp->window.left, h.from);
    else
        api_fail(c, API_ERR_LENGTH_CONFLICT, q_path,
                 "the session holds %s: %zu query rows after appending %zu would reach "
                 "back to row %zu (window left %lld), before row %zu, the first held; "
                 "send at most %zu query rows with %zu appended (at most %zu more than "
                 "the rows appended)", held, n, m, reach, (long long)sp->window.left,
                 h.from, most, m, most - m);
    return false;
}

bool api_roll_check_truncate(struct api_call *c, const struct sess *s, size_t length)
{
    size_t min = sess_min_length(s);
    if (length >= min)
        return true;
    struct sess_held h;
    char held[128];
    sess_held_rows(s, &h);
    held_text(held, sizeof held, &h);
    api_fail(c, API_ERR_LENGTH_CONFLICT, "/length",
             "the session holds %s, and its window (left %lld) needs the %lld rows "
             "before the end: length must be %zu..%zu", held,
             (long long)sess_spec(s)->window.left, (long long)sess_spec(s)->window.left,
             min, h.length);
    return false;
}
