/*
 * api/sessions_roll.h — the wire side of rolling sessions (core/store.h):
 * the `window` of a create, what a rolling session's queries and truncates
 * may ask, and the `window` and `held` members of its descriptions.
 */
#ifndef ATTND_API_SESSIONS_ROLL_H
#define ATTND_API_SESSIONS_ROLL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/internal.h"
#include "core/store.h"

/* The create body's "window" ({"left":W, "sinks":S}; absent: off) into
 * *w; false after a 422 at its path. */
bool api_roll_read_window(struct api_call *c, const json_t *v, struct attn_window *w);

/* A rolling session's max_tokens (given, or the default) must pass the
 * rows it holds between appends (sess_roll_held_max), or it would stop at
 * max_tokens for good: else 422 at path (/v1's /max_tokens). max_tokens 0
 * (the store's default, unknown here) and a window off pass. */
bool api_roll_check_tokens(struct api_call *c, const struct attn_window *w,
                           size_t max_tokens, bool given, const char *path);

/* api_roll_check_tokens for a v2 sequence's start, which has no
 * max_tokens to send and takes --max-tokens (max_tokens here): its 400
 * at /parameters/window_left advises the window_left (or window_sinks)
 * that fits instead. */
bool api_roll_check_seq_tokens(struct api_call *c, const struct attn_window *w,
                               size_t max_tokens);

/* A rolling session of spec sp must fit --max-cache-bytes at its most
 * (sess_roll_bytes_need), or it would be refused an append for good once
 * it held that many rows: else 422 limit_exceeded at path (/v1: /window;
 * a v2 sequence at its window_left), naming the bytes and the cap. A
 * window off, or no cap, passes. */
bool api_roll_check_bytes(struct api_call *c, const struct sess_spec *sp, const char *path);

/* A window read for a rolling session (w->on; nothing to check when off):
 * "left" required, no "right" (422 at prefix/<spell>left or
 * prefix/<spell>right, the message naming it). /v1 spells them "left" and
 * "right" under "/window" (spell ""), OIP v2's sequence_start
 * "window_left" and "window_right" under "/parameters" (spell "window_"). */
bool api_roll_check_window(struct api_call *c, const struct attn_window *w, const char *prefix,
                           const char *spell);

/* "window" and "held" added to a session object or a GET kv answer
 * (rolling sessions only; nothing otherwise). */
void api_roll_describe(json_t *obj, const struct sess_spec *sp, const struct sess_held *h);

/* A rolling session's query: no "window" of its own, "causal" absent or
 * bottom-right (422 otherwise), and n query rows after appending m reach
 * only held rows (409 length_conflict at /q otherwise). true when fine or
 * the session does not roll. */
bool api_roll_check_query(struct api_call *c, const struct sess *s, const json_t *body,
                          const struct sess_query *q, size_t m);

/* The part of api_roll_check_query that does not read the body: causal
 * (causal_given: the request sent one) bottom-right, else 422 at
 * causal_path; n query rows after appending m reach only held rows, else
 * 409 length_conflict at q_path. OIP v2's sequences call it with their
 * own paths. */
bool api_roll_check_pass(struct api_call *c, const struct sess *s, bool causal_given,
                         enum attn_causal causal, size_t n, size_t m, const char *causal_path,
                         const char *q_path);

/* 409 length_conflict at /length unless a truncate to length keeps the
 * rows the window needs. */
bool api_roll_check_truncate(struct api_call *c, const struct sess *s, size_t length);

#endif
