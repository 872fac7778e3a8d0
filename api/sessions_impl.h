/*
 * api/sessions_impl.h — what api/sessions.c shares with the files that
 * answer the rest of a session's routes (api/sessions_attend.c): looking a
 * session up, and reading rows of its shape.
 */
#ifndef ATTND_API_SESSIONS_IMPL_H
#define ATTND_API_SESSIONS_IMPL_H

#include "api/internal.h"
#include "core/store.h"

/* Look up id: the session held, or NULL after answering 404
 * session_not_found. Sets c->half to its dtype's. */
struct sess *api_sess_acquire(struct api_call *c, const char *id);

/* A per-head tensor member key: [rows][width] when heads == 1, or
 * [heads][rows][width]; read in dtype dt. *rows is set. */
bool api_sess_read_heads(struct api_call *c, const json_t *body, const char *key,
                         enum attn_dtype dt, size_t heads, size_t width,
                         size_t *budget, struct api_tensor *t, size_t *rows);

/* Optional k and v (both or neither; both when required) of a held
 * session of spec sp; *m = rows (0 when absent). */
bool api_sess_read_kv(struct api_call *c, const json_t *body, const struct sess_spec *sp,
                      bool required, size_t *budget, struct api_tensor *k,
                      struct api_tensor *v, size_t *m);

/* 409 length_conflict unless expected (>= 0) is the held session's
 * length; "expected_length" of body (-1 when absent). */
bool api_sess_check_expected(struct api_call *c, const struct sess *s, long long expected);
bool api_sess_read_expected(struct api_call *c, const json_t *body, long long *out);

/* POST /v1/sessions/{id}/attention (api/sessions_attend.c). */
void api_sessions_attention(struct api_call *c, const char *id);

#endif
