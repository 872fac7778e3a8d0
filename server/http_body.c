/*
 * server/http_body.c — request body buffers of the transport: one buffer
 * per request, grown within a global budget over all connections (past it:
 * 503 capacity_exhausted), with small buffers kept on the request struct
 * and large ones kept in shared spare slots for the next uploads.
 * Runs on the MHD threads (and the loop thread for a released body).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_impl.h"

#define BODY_INITIAL_CAP 4096
/* Body buffers up to this size are kept with the request struct for the
 * next request (req_free): a malloc and free of the body per request
 * showed in profiles of small requests. */
#define KEEP_BODY_MAX 4096
/* Larger bodies, up to SPARE_BODY_MAX bytes, go back to SPARE_BODIES
 * shared slots when their request ends, for the next large upload: a fresh
 * buffer of megabytes per request had its pages faulted in by the first
 * copy into it (~100 page faults per 1.4 MB base64 request, a tenth of its
 * CPU in perf). One slot per connection uploading at once is what removes
 * the faults; at most SPARE_BYTES_MAX bytes stay held. */
#define SPARE_BODY_MAX ((size_t)8 << 20)
#define SPARE_BYTES_MAX ((size_t)32 << 20)

/* ---- body buffers within the global budget ------------------------------ */

static bool budget_take(struct srv_http *h, size_t n)
{
    size_t cur = atomic_load(&h->body_bytes);
    do {
        if (n > h->body_budget - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n));
    return true;
}

/* A large body buffer into a free spare slot; false when none is free or
 * it would take the slots past SPARE_BYTES_MAX. */
static bool spare_body_put(struct srv_http *h, char *p, size_t cap)
{
    bool kept = false;
    pthread_mutex_lock(&h->spare_mu);
    bool room = cap <= SPARE_BYTES_MAX - h->spare_bytes;
    for (size_t i = 0; room && i < SPARE_BODIES && !kept; i++)
        if (!h->spare_body[i].p) {
            h->spare_body[i].p = p;
            h->spare_body[i].cap = cap;
            h->spare_bytes += cap;
            kept = true;
        }
    pthread_mutex_unlock(&h->spare_mu);
    return kept;
}

/* The smallest spare buffer of need to 2 * need bytes (its size in *cap),
 * or NULL: a small upload does not take (and charge the budget for) a
 * buffer many times its size. */
static char *spare_body_take(struct srv_http *h, size_t need, size_t *cap)
{
    char *p = NULL;
    size_t best = SPARE_BODIES;
    pthread_mutex_lock(&h->spare_mu);
    for (size_t i = 0; i < SPARE_BODIES; i++)
        if (h->spare_body[i].p && h->spare_body[i].cap >= need &&
            h->spare_body[i].cap / 2 <= need &&
            (best == SPARE_BODIES || h->spare_body[i].cap < h->spare_body[best].cap))
            best = i;
    if (best < SPARE_BODIES) {
        p = h->spare_body[best].p;
        *cap = h->spare_body[best].cap;
        h->spare_body[best].p = NULL;
        h->spare_bytes -= *cap;
    }
    pthread_mutex_unlock(&h->spare_mu);
    return p;
}

/* Free (or keep, when small; or put back, when large) the body and return
 * its bytes to the budget. */
void http_body_release(struct req *r)
{
    if (r->body && !r->keep && r->cap <= KEEP_BODY_MAX) {
        r->keep = r->body;
        r->keep_cap = r->cap;
    } else if (!(r->body && r->cap > KEEP_BODY_MAX && r->cap <= SPARE_BODY_MAX &&
                 spare_body_put(r->h, r->body, r->cap))) {
        free(r->body);
    }
    atomic_fetch_sub(&r->h->body_bytes, r->cap);
    r->body = NULL;
    r->len = r->cap = 0;
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
        size_t sc;
        char *sp = spare_body_take(r->h, cap, &sc);
        if (sp && budget_take(r->h, sc)) {
            r->body = sp;
            r->cap = sc;
            return true;
        }
        if (sp && !spare_body_put(r->h, sp, sc))   /* over budget: try cap alone */
            free(sp);
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
    memcpy(r->body + r->len, data, n);
    r->len += n;
    return true;
}
