/*
 * server/http_body.c — request body buffers of the transport: one buffer
 * per request, grown within a global budget over all connections (past it:
 * 503 capacity_exhausted), with small buffers kept on the request struct
 * and large ones kept in api/spare.c's process-wide slots for the next
 * large request.
 * Runs on the MHD threads (and the loop thread for a released body).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api/spare.h"

#include "server/http_impl.h"

#define BODY_INITIAL_CAP 4096
/* Body buffers up to this size are kept with the request struct for the
 * next request (req_free): a malloc and free of the body per request
 * showed in profiles of small requests. */
#define KEEP_BODY_MAX 4096
/* Larger bodies go to api/spare.c's process-wide slots when their request
 * ends (kept from API_SPARE_MIN bytes on), for the next large upload or a
 * large request's tensors and response: a fresh buffer of megabytes per
 * request had its pages faulted in by the first copy into it (~100 page
 * faults per 1.4 MB base64 request, a tenth of its CPU in perf); a new
 * one of 2 MiB and more is of transparent huge pages (api/spare.c: a 134
 * MB import body took 32,855 page faults in 4 KiB pages, 153 now). Bodies
 * once had slots of their own here (32 MiB) beside api/spare.c's (96
 * MiB); one set of slots puts one bound on all the memory kept. */

/* ---- body buffers within the global budget ------------------------------ */

/* Take n bytes of the budget when room more bytes stay free after them. */
static bool budget_take_leaving(struct srv_http *h, size_t n, size_t room)
{
    size_t cur = atomic_load(&h->body_bytes);
    do {
        if (n > h->body_budget - cur || room > h->body_budget - cur - n)
            return false;
    } while (!atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n));
    return true;
}

static bool budget_take(struct srv_http *h, size_t n)
{
    return budget_take_leaving(h, n, 0);
}

/* Free (or keep, when small; or put back, when large) the body and return
 * its bytes to the budget; close its stream. */
void http_body_release(struct req *r)
{
    api_stream_close(r->stream);
    r->stream = NULL;
    api_early_free(r->early);
    r->early = NULL;
    if (r->body && !r->keep && r->cap <= KEEP_BODY_MAX) {
        r->keep = r->body;
        r->keep_cap = r->cap;
    } else {
        api_spare_free(r->body);        /* kept when large, else freed */
    }
    atomic_fetch_sub(&r->h->body_bytes, r->cap + r->charged);
    r->body = NULL;
    r->len = r->cap = r->charged = 0;
}

bool http_body_charge(struct req *r, size_t n)
{
    return http_body_charge_leaving(r, n, 0);
}

bool http_body_charge_leaving(struct req *r, size_t n, size_t room)
{
    if (!budget_take_leaving(r->h, n, room))
        return false;
    r->charged += n;
    return true;
}

/* Grow the buffer to cap bytes (within the budget); false if it cannot. */
bool http_body_reserve(struct req *r, size_t cap)
{
    if (cap <= r->cap)
        return true;
    if (r->cap == 0 && r->keep && cap <= r->keep_cap) {
        if (!budget_take(r->h, r->keep_cap))
            return false;
        r->body = r->keep;
        r->cap = r->keep_cap;
        r->keep = NULL;
        return true;
    }
    if (r->cap == 0 && cap > KEEP_BODY_MAX) {
        /* Charged for what it asks: a kept block handed out may be up to
         * twice that (three times at 2 to 3 MiB), but api/spare.c bounds
         * what its blocks hold. */
        if (!budget_take(r->h, cap))
            return false;
        char *p = api_spare_alloc(cap, NULL);
        if (!p) {
            atomic_fetch_sub(&r->h->body_bytes, cap);
            return false;
        }
        r->body = p;
        r->cap = cap;
        return true;
    }
    if (!budget_take(r->h, cap - r->cap))
        return false;
    char *nb = realloc(r->body, cap);
    if (!nb) {
        atomic_fetch_sub(&r->h->body_bytes, cap - r->cap);
        return false;
    }
    r->body = nb;
    r->cap = cap;
    return true;
}

/* Append an upload chunk within the caps; false (r->refuse set) if not. */
bool http_body_append(struct req *r, const char *data, size_t n)
{
    size_t max = r->h->cfg->max_body_bytes;
    if (r->refuse != API_ERR_NONE)
        return false;
    if (n > max - r->len) {
        r->refuse = API_ERR_BODY_TOO_LARGE;
        return false;
    }
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : BODY_INITIAL_CAP;
        while (cap < r->len + n)
            cap = cap > max / 2 ? max : cap * 2;
        if (!http_body_reserve(r, cap)) {
            r->refuse = API_ERR_CAPACITY_EXHAUSTED;
            return false;
        }
    }
    if (r->early)
        api_early_put(r->early, r->body, r->len, data, n);
    else
        memcpy(r->body + r->len, data, n);
    r->len += n;
    return true;
}

/* A streamed chunk (r->bytes_in counts it already): within the body cap
 * and counted in the budget as it arrives (chunked; one announced was
 * charged whole at the headers), then fed; false (r->refuse set) if not.
 * A refusal of the stream's own is answered when the body ends. */
static bool stream_take(struct req *r, const char *data, size_t n)
{
    if (r->bytes_in > r->h->cfg->max_body_bytes)
        r->refuse = API_ERR_BODY_TOO_LARGE;
    else if (r->bytes_in > r->charged && !http_body_charge(r, r->bytes_in - r->charged))
        r->refuse = API_ERR_CAPACITY_EXHAUSTED;
    else
        api_stream_feed(r->stream, data, n);
    return r->refuse == API_ERR_NONE;
}

bool http_body_take(struct req *r, const char *data, size_t n)
{
    return r->stream ? stream_take(r, data, n) : http_body_append(r, data, n);
}
