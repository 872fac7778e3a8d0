/*
 * api/session_blame.c — the 422 non_finite of a session's attention (or a
 * v2 sequence's step) whose pass overflowed, at the input to blame. The
 * store looks for it (core/attn_blame.h, through sess_query.blame) before
 * it rolls the append back, over the session's rows as the pass read
 * them; here its row becomes a pointer into the request: a query row of
 * q, an attn_bias entry, or a k / v row the request appended. A row the
 * session held already is in no request: the path is then "" (the request
 * as a whole, and the session it addresses) and the message names its
 * cache position. When nothing is found the answer is
 * api_sessions_fail_nonfinite's, with path null.
 */
#include "api/internal.h"

#include "core/attn_blame.h"
#include "core/kv.h"
#include "core/store.h"

void api_session_fail_overflow(struct api_call *c, const struct sess *s,
                               const struct attn_request *r, size_t m,
                               const struct attn_blame *b, const struct api_blame_at *at)
{
    if (b->input == ATTN_BLAME_NONE) {
        api_sessions_fail_nonfinite(c, s, m, true);
        return;
    }
    const struct kv_cache *kv = sess_cache(s);
    struct api_blame_cache cache = {.cached = r->shape.L - m, .front = kv_held_front(kv),
                                    .from = kv_held_from(kv)};
    api_fail_blame(c, r, b, at, &cache);
}
