/*
 * core/store.c — the session store (see store.h): a hash map of id ->
 * session, an LRU list, per-session mutexes, reference counts, TTL expiry
 * and byte accounting against the global limits; linking, forking and
 * removing sessions. A session is made from its spec by core/store_new.c;
 * what a request does with a held session (append, attend, truncate,
 * roll) is core/store_ops.c's.
 *
 * The map is a small chained hash table written here because C has no
 * usable one (hsearch is global and cannot delete) and none of our
 * dependencies (libuv, jansson, libmicrohttpd) exports one for core/.
 * Sessions removed while held are put on a local "graveyard" list and freed
 * outside the store mutex, or by their last sess_release.
 */
#include "store_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- clock ------------------------------------------------------------- */

static double monotonic_clock(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sess_now(struct sess_store *st)
{
    return st->clock(st->clock_arg);
}

/* ---- ids --------------------------------------------------------------- */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* 16 random bytes -> 22 base64url characters (no padding) + NUL. */
static enum core_status random_id(char out[SESS_ID_RANDOM_LEN + 1])
{
    unsigned char b[18] = {0};  /* 16 random + 2 zero bytes to finish a group */
    size_t got = 0;
    while (got < 16) {
        ssize_t r = getrandom(b + got, 16 - got, 0);
        if (r <= 0)
            return CORE_EIO;
        got += (size_t)r;
    }
    size_t o = 0;
    for (size_t i = 0; i < 18 && o < SESS_ID_RANDOM_LEN; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
        for (int s = 18; s >= 0 && o < SESS_ID_RANDOM_LEN; s -= 6)
            out[o++] = b64url[(w >> s) & 63];
    }
    out[o] = '\0';
    return CORE_OK;
}

/* Keep [A-Za-z0-9_-] of the replica id (at most 63 characters; attnd
 * refuses others at start) and end it with '.', so ids stay URL- and
 * file-name-safe and the prefix ends where a proxy's routing map expects
 * ("r1." never begins "r1x." nor "r1-a."). */
static void set_replica(struct sess_store *st, const char *r)
{
    size_t o = 0;
    for (; r && *r && o < sizeof st->replica - 2; r++) {
        char ch = *r;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '_' || ch == '-')
            st->replica[o++] = ch;
    }
    if (o > 0)
        st->replica[o++] = '.';
    st->replica[o] = '\0';
}

/* ---- hash map and LRU (store mutex held) --------------------------------- */

static size_t hash_id(const char *id)
{
    return (size_t)sess_hash_text(SESS_HASH_SEED, id);
}

static struct sess *find(struct sess_store *st, const char *id)
{
    struct sess *s = st->buckets[hash_id(id) & (st->n_buckets - 1)];
    while (s && strcmp(s->id, id) != 0)
        s = s->hnext;
    return s;
}

/* Double the table when it is more than twice as full as it is wide; a
 * failed growth just keeps longer chains. */
static void maybe_grow(struct sess_store *st)
{
    if (st->count < 2 * st->n_buckets || st->n_buckets > SIZE_MAX / 4)
        return;
    size_t nb = st->n_buckets * 2;
    struct sess **b = calloc(nb, sizeof *b), **ib = calloc(nb, sizeof *ib);
    if (!b || !ib) {
        free(b);
        free(ib);
        return;
    }
    for (size_t i = 0; i < st->n_buckets; i++) {
        struct sess *s = st->buckets[i];
        while (s) {
            struct sess *next = s->hnext;
            size_t j = hash_id(s->id) & (nb - 1);
            s->hnext = b[j];
            b[j] = s;
            s = next;
        }
    }
    sess_idem_rehash(st, ib, nb);
    free(st->buckets);
    free(st->ibuckets);
    st->buckets = b;
    st->ibuckets = ib;
    st->n_buckets = nb;
}

static void lru_unlink(struct sess_store *st, struct sess *s)
{
    if (s->lru_prev)
        s->lru_prev->lru_next = s->lru_next;
    else
        st->lru_head = s->lru_next;
    if (s->lru_next)
        s->lru_next->lru_prev = s->lru_prev;
    else
        st->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
}

static void lru_push_front(struct sess_store *st, struct sess *s)
{
    s->lru_prev = NULL;
    s->lru_next = st->lru_head;
    if (st->lru_head)
        st->lru_head->lru_prev = s;
    else
        st->lru_tail = s;
    st->lru_head = s;
}

/* Remove s from the map, the LRU list and the accounting. If nobody holds
 * it, it goes onto *grave (freed by bury() after the mutex is released).
 * journal: write its delete (eviction, expiry; best effort). */
static void unlink_sess(struct sess_store *st, struct sess *s,
                        struct sess **grave, bool journal)
{
    if (journal)
        sess_dur_delete(st, s->id, true);
    struct sess **pp = &st->buckets[hash_id(s->id) & (st->n_buckets - 1)];
    while (*pp && *pp != s)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = s->hnext;
    s->hnext = NULL;
    sess_idem_unlink(st, s);        /* its key is free again */
    lru_unlink(st, s);
    st->count--;
    s->linked = false;
    if (s->refs == 0) {
        /* its pages go now, so the count admit() reads drops at once */
        kv_free(s->kv);
        s->kv = NULL;
        s->hnext = *grave;
        *grave = s;
    }
}

static void bury(struct sess *grave)
{
    while (grave) {
        struct sess *next = grave->hnext;
        sess_destroy(grave);
        grave = next;
    }
}

static double ttl_of(const struct sess *s)
{
    return s->spec.ttl_s;
}

static bool expired(const struct sess *s, double now)
{
    return s->refs == 0 && ttl_of(s) > 0 && now - s->last_used >= ttl_of(s);
}

/* Bytes in use: allocated pages and admitted claims. */
static size_t used_bytes(struct sess_store *st)
{
    return atomic_load_explicit(&st->acct.bytes, memory_order_relaxed) + st->claimed;
}

/* Bytes that evicting the idle sessions other than `keep` frees for sure:
 * each one's own pages (a page another session still holds stays). */
static size_t idle_bytes(struct sess_store *st, const struct sess *keep,
                         size_t *idle_count)
{
    size_t b = 0, n = 0;
    for (struct sess *s = st->lru_tail; s; s = s->lru_prev)
        if (s->refs == 0 && s != keep) {
            size_t own;
            kv_bytes_split(s->kv, &own, NULL);
            b += own;
            n++;
        }
    *idle_count = n;
    return b;
}

/* Evict the least recently used idle session other than keep: for bytes
 * (own), the least recent that alone holds any page, when there is one (a
 * session whose pages are all shared frees nothing); false when there is
 * none at all. */
static bool evict_one(struct sess_store *st, const struct sess *keep, bool own,
                      struct sess **grave)
{
    struct sess *any = NULL;
    for (struct sess *s = st->lru_tail; s; s = s->lru_prev) {
        if (s->refs != 0 || s == keep)
            continue;
        size_t b = 1;
        if (own)
            kv_bytes_split(s->kv, &b, NULL);
        if (b > 0) {
            any = s;
            break;
        }
        if (!any)
            any = s;
    }
    if (!any)
        return false;
    unlink_sess(st, any, grave, true);
    st->evictions++;
    return true;
}

/* Remove the sessions whose TTL ran out (onto *grave, each journaled and
 * counted as an expiry); how many. */
static size_t drop_expired(struct sess_store *st, struct sess **grave)
{
    double now = sess_now(st);
    size_t n = 0;
    for (struct sess *s = st->lru_tail, *prev; s; s = prev) {
        prev = s->lru_prev;
        if (expired(s, now)) {
            unlink_sess(st, s, grave, true);
            st->expirations++;
            n++;
        }
    }
    return n;
}

/*
 * Make room for `add_sessions` more sessions and the global byte count
 * growing by `add_bytes`, first taking out the sessions whose TTL ran out
 * and the sweep has not removed yet (they answer 404 already), then
 * evicting idle sessions (lru policy) if needed. Nothing is evicted
 * unless may_evict and eviction can make it fit. Everything fits while
 * the store is restoring.
 */
static enum core_status admit(struct sess_store *st, size_t add_sessions,
                              size_t add_bytes, const struct sess *keep,
                              bool may_evict, struct sess **grave)
{
    if (st->restoring)
        return CORE_OK;
    size_t max_s = st->cfg.max_sessions, max_b = st->cfg.max_cache_bytes;
    size_t used = used_bytes(st);
    bool fits_s = max_s == 0 || st->count + add_sessions <= max_s;
    bool fits_b = max_b == 0 || (used <= max_b && add_bytes <= max_b - used);
    if (!(fits_s && fits_b) && drop_expired(st, grave) > 0) {
        used = used_bytes(st);
        fits_s = max_s == 0 || st->count + add_sessions <= max_s;
        fits_b = max_b == 0 || (used <= max_b && add_bytes <= max_b - used);
    }
    if (fits_s && fits_b)
        return CORE_OK;
    if (st->cfg.policy != SESS_POLICY_LRU || !may_evict)
        return CORE_ECAPACITY;
    size_t idle_n, idle_b = idle_bytes(st, keep, &idle_n);
    if (max_s && st->count + add_sessions > max_s + idle_n)
        return CORE_ECAPACITY;
    if (max_b && (add_bytes > max_b || used - (idle_b < used ? idle_b : used) >
                                           max_b - add_bytes))
        return CORE_ECAPACITY;
    for (;;) {
        used = used_bytes(st);
        fits_s = max_s == 0 || st->count + add_sessions <= max_s;
        fits_b = max_b == 0 || (used <= max_b && add_bytes <= max_b - used);
        if (fits_s && fits_b)
            return CORE_OK;
        if (!evict_one(st, keep, fits_s, grave))
            return CORE_ECAPACITY;
    }
}

/* ---- store ------------------------------------------------------------- */

void sess_store_restoring(struct sess_store *st, bool on)
{
    pthread_mutex_lock(&st->mu);
    st->restoring = on;
    pthread_mutex_unlock(&st->mu);
}

struct sess_store *sess_store_new(const struct sess_config *cfg)
{
    struct sess_store *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->cfg = *cfg;
    set_replica(st, cfg->replica_id);
    st->cfg.replica_id = st->replica;
    st->n_buckets = 64;
    st->buckets = calloc(st->n_buckets, sizeof *st->buckets);
    st->ibuckets = calloc(st->n_buckets, sizeof *st->ibuckets);
    if (!st->buckets || !st->ibuckets || pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st->buckets);
        free(st->ibuckets);
        free(st);
        return NULL;
    }
    st->clock = monotonic_clock;
    return st;
}

/* ---- a request's say over its records (store.h's sess_commit) ----------- */

enum { COMMIT_OPEN, COMMIT_CLAIMED, COMMIT_WITHDRAWN };

static _Thread_local struct sess_commit *bound_commit;

void sess_commit_bind(struct sess_commit *c)
{
    bound_commit = c;
}

/* Move c from open to `to`; true if it is `to` now (moved, or before). */
static bool commit_take(struct sess_commit *c, int to)
{
    int open = COMMIT_OPEN;
    return atomic_compare_exchange_strong(&c->state, &open, to) || open == to;
}

bool sess_commit_withdraw(struct sess_commit *c)
{
    return commit_take(c, COMMIT_WITHDRAWN);
}

bool sess_commit_claim(void)
{
    return !bound_commit || commit_take(bound_commit, COMMIT_CLAIMED);
}

/* Frees every session; no request may hold one any more. */
void sess_store_free(struct sess_store *st)
{
    if (!st)
        return;
    struct sess *grave = NULL;
    while (st->lru_head)
        unlink_sess(st, st->lru_head, &grave, false);
    bury(grave);
    sess_dur_free(st->dur);
    pthread_mutex_destroy(&st->mu);
    free(st->buckets);
    free(st->ibuckets);
    free(st);
}

void sess_store_set_clock(struct sess_store *st, sess_clock_fn fn, void *arg)
{
    pthread_mutex_lock(&st->mu);
    st->clock = fn ? fn : monotonic_clock;
    st->clock_arg = fn ? arg : NULL;
    pthread_mutex_unlock(&st->mu);
}

size_t sess_store_sweep(struct sess_store *st)
{
    struct sess *grave = NULL;
    pthread_mutex_lock(&st->mu);
    size_t n = drop_expired(st, &grave);
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    return n;
}

void sess_store_stats(struct sess_store *st, struct sess_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    out->sessions = st->count;
    out->bytes = atomic_load_explicit(&st->acct.bytes, memory_order_relaxed);
    out->created = st->created;
    out->evictions = st->evictions;
    out->expirations = st->expirations;
    pthread_mutex_unlock(&st->mu);
    sess_dur_stats(st->dur, out);
}

const struct sess_config *sess_store_config(const struct sess_store *st)
{
    return &st->cfg;
}

void sess_store_kept_files(struct sess_store *st, uint64_t *files, uint64_t *bytes)
{
    sess_dur_kept(st->dur, files, bytes);
}

/* ---- sessions: linking and lifetime ---------------------------------------- */

/* The live session holding k's key, or NULL: an expired one is removed
 * (onto *grave), as sess_acquire removes it. Store mutex held. */
static struct sess *live_idem(struct sess_store *st, const struct sess_idem *k,
                              struct sess **grave)
{
    struct sess *s = sess_idem_lookup(st, k);
    if (s && expired(s, sess_now(st))) {
        unlink_sess(st, s, grave, true);
        st->expirations++;
        s = NULL;
    }
    return s;
}

bool sess_idem_find(struct sess_store *st, const struct sess_idem *idem, char *id,
                    bool *same)
{
    struct sess *grave = NULL;
    pthread_mutex_lock(&st->mu);
    struct sess *s = live_idem(st, idem, &grave);
    if (s) {
        memcpy(id, s->id, SESS_ID_MAX);
        *same = memcmp(s->idem->digest, idem->digest, SESS_IDEM_DIGEST) == 0;
    }
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    return s != NULL;
}

enum core_status sess_link(struct sess_store *st, struct sess *s,
                           double idle_s, char *id_out)
{
    char rnd[SESS_ID_RANDOM_LEN + 1];
    bool fresh = s->id[0] == '\0';
    enum core_status rc = CORE_OK;
    struct sess *grave = NULL;
    sess_resolve_defaults(st, s);
    /* a fork's pages are counted already (it shares its parent's count) */
    bool counted = kv_get_acct(s->kv) == &st->acct;
    size_t add = counted ? 0 : kv_bytes(s->kv);
    pthread_mutex_lock(&st->mu);
    for (int tries = 0; fresh; tries++) {
        rc = tries < 4 ? random_id(rnd) : CORE_EIO;
        if (rc != CORE_OK)
            break;
        snprintf(s->id, sizeof s->id, "%s%s", st->replica, rnd);
        if (!find(st, s->id))
            break;
    }
    if (rc == CORE_OK && !fresh && find(st, s->id))
        rc = CORE_EEXIST;
    struct sess *holder = rc == CORE_OK && s->idem ? live_idem(st, s->idem, &grave) : NULL;
    if (holder && st->restoring) {
        /* the holder's delete was lost (eviction and expiry journal it best
         * effort): the store gave the key to s after it, so s keeps it */
        sess_idem_unlink(st, holder);
        free(holder->idem);
        holder->idem = NULL;
    } else if (holder) {
        rc = CORE_EEXIST;
    }
    if (rc == CORE_OK)
        rc = admit(st, 1, add, NULL, true, &grave);
    if (rc == CORE_OK) {
        size_t j = hash_id(s->id) & (st->n_buckets - 1);
        s->hnext = st->buckets[j];
        st->buckets[j] = s;
        sess_idem_link(st, s);
        lru_push_front(st, s);
        s->linked = true;
        s->last_used = sess_now(st) - (idle_s > 0 ? idle_s : 0);
        st->count++;
        if (!counted)
            kv_set_acct(s->kv, &st->acct);
        st->created++;
        maybe_grow(st);
        /* copied under the mutex: once it is released, another thread may
         * already evict or delete s */
        if (id_out)
            memcpy(id_out, s->id, SESS_ID_MAX);
    } else if (fresh) {
        s->id[0] = '\0';
    }
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    return rc;
}

static void unref(struct sess_store *st, struct sess *s, bool touch);

/*
 * Link a new session s and journal it (whole for a create or an import; a
 * fork of parent as durable.c's FORK record); destroys s on failure. It is
 * locked before it is linked and stays locked until its record is written,
 * holding a reference, so nobody can change, delete, evict or expire it
 * before then (a delete record ahead of its create would resurrect it; a
 * named id is known before it is made). A failed record unlinks it again.
 * held non-NULL: on success s is left held (as sess_acquire leaves it)
 * into *held, so nobody can come between its making and its first use.
 */
static enum core_status link_journaled_keep(struct sess_store *st, struct sess *s,
                                           struct sess *parent, char *id_out,
                                           struct sess **held, bool keep)
{
    s->refs = 1;
    pthread_mutex_lock(&s->mu);
    enum core_status rc = sess_link(st, s, 0, id_out);
    if (rc != CORE_OK) {
        s->refs = 0;
        pthread_mutex_unlock(&s->mu);
        if (!keep || rc != CORE_EEXIST)
            sess_destroy(s);
        return rc;
    }
    /* a FORK record has no room for a key: a keyed fork goes whole */
    rc = parent && !s->idem ? sess_dur_fork(st, parent, s) : sess_dur_sess(st, s);
    if (rc != CORE_OK) {
        struct sess *grave = NULL;
        pthread_mutex_lock(&st->mu);
        if (s->linked) {
            unlink_sess(st, s, &grave, false);
            st->created--;
        }
        pthread_mutex_unlock(&st->mu);
    }
    if (rc == CORE_OK && held)
        *held = s;
    else
        unref(st, s, true);
    return rc;
}

/* link_journaled_keep, destroying s when it cannot be linked. */
static enum core_status link_journaled(struct sess_store *st, struct sess *s,
                                      struct sess *parent, char *id_out,
                                      struct sess **held)
{
    return link_journaled_keep(st, s, parent, id_out, held, false);
}

enum core_status sess_link_named_held(struct sess_store *st, struct sess *s,
                                      struct sess **held)
{
    return link_journaled_keep(st, s, NULL, NULL, held, true);
}

enum core_status sess_link_journaled(struct sess_store *st, struct sess *s,
                                     char *id_out, struct sess **held)
{
    return link_journaled(st, s, NULL, id_out, held);
}

enum core_status sess_create(struct sess_store *st, const struct sess_spec *spec,
                             char *id)
{
    return sess_create_idem(st, spec, NULL, id, NULL);
}

enum core_status sess_create_idem(struct sess_store *st, const struct sess_spec *spec,
                                  const struct sess_idem *idem, char *id,
                                  struct sess **held)
{
    enum core_status rc;
    struct sess *s = sess_new_from_spec(spec, &rc);
    if (!s)
        return rc;
    if (!sess_set_idem(s, idem)) {
        sess_destroy(s);
        return CORE_ENOMEM;
    }
    return sess_link_journaled(st, s, id, held);
}

/* The longest prefix and name fit an id. */
_Static_assert(sizeof ((struct sess_store *)0)->replica - 1 + SESS_NAME_MAX <= SESS_ID_MAX,
               "a replica prefix and a name must fit SESS_ID_MAX");

bool sess_named_id(struct sess_store *st, const char *name, char *id)
{
    size_t n = name ? strnlen(name, SESS_NAME_MAX) : 0;
    if (n == 0 || n >= SESS_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr(b64url, name[i]))
            return false;
    int w = snprintf(id, SESS_ID_MAX, "%s%s", st->replica, name);
    return w > 0 && w < SESS_ID_MAX;
}

enum core_status sess_create_named(struct sess_store *st,
                                   const struct sess_spec *spec,
                                   const char *name, char *id, struct sess **held)
{
    char want[SESS_ID_MAX];
    if (!sess_named_id(st, name, want))
        return CORE_EINVAL;
    enum core_status rc;
    struct sess *s = sess_new_from_spec(spec, &rc);
    if (!s)
        return rc;
    memcpy(s->id, want, SESS_ID_MAX);
    return link_journaled(st, s, NULL, id, held);
}

enum core_status sess_acquire(struct sess_store *st, const char *id,
                              struct sess **out)
{
    struct sess *grave = NULL;
    *out = NULL;
    if (!id || strnlen(id, SESS_ID_MAX) >= SESS_ID_MAX)
        return CORE_ENOTFOUND;
    pthread_mutex_lock(&st->mu);
    double now = sess_now(st);
    struct sess *s = find(st, id);
    if (s && expired(s, now)) {
        unlink_sess(st, s, &grave, true);
        st->expirations++;
        s = NULL;
    }
    if (s) {
        s->refs++;
        s->last_used = now;
        lru_unlink(st, s);
        lru_push_front(st, s);
    }
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    if (!s)
        return CORE_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    pthread_mutex_lock(&st->mu);
    bool linked = s->linked;
    pthread_mutex_unlock(&st->mu);
    if (!linked) {
        sess_release(st, s);
        return CORE_ENOTFOUND;
    }
    *out = s;
    return CORE_OK;
}

bool sess_exists(struct sess_store *st, const char *id)
{
    if (!id || strnlen(id, SESS_ID_MAX) >= SESS_ID_MAX)
        return false;
    pthread_mutex_lock(&st->mu);
    const struct sess *s = find(st, id);
    bool live = s && !expired(s, sess_now(st));
    pthread_mutex_unlock(&st->mu);
    return live;
}

/* Unlock s and drop a reference; touch: count it as a use (TTL, LRU). */
static void unref(struct sess_store *st, struct sess *s, bool touch)
{
    if (!s)
        return;
    if (touch && sess_is_linked(st, s))     /* (a removed one's id may be made again) */
        sess_dur_touch(st, s);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&st->mu);
    s->refs--;
    if (touch)
        s->last_used = sess_now(st);
    bool dead = !s->linked && s->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (dead)
        sess_destroy(s);
}

void sess_release(struct sess_store *st, struct sess *s)
{
    unref(st, s, true);
}

void sess_unhold(struct sess_store *st, struct sess *s)
{
    unref(st, s, false);
}

enum core_status sess_delete(struct sess_store *st, const char *id)
{
    struct sess *grave = NULL;
    if (!id || strnlen(id, SESS_ID_MAX) >= SESS_ID_MAX)
        return CORE_ENOTFOUND;
    pthread_mutex_lock(&st->mu);
    struct sess *s = find(st, id);
    if (s && expired(s, sess_now(st))) {
        unlink_sess(st, s, &grave, true);
        st->expirations++;
        s = NULL;
    }
    if (s)
        s->refs++;                  /* so it stays while we wait for it */
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    if (!s)
        return CORE_ENOTFOUND;
    /* after the request holding it: its records go before the delete's and
     * none after (the id may be made again, by sess_create_named); a
     * snapshot being written waits here too */
    pthread_mutex_lock(&s->mu);
    return sess_delete_held(st, s);
}

enum core_status sess_end_held(struct sess_store *st, struct sess *s)
{
    struct sess *grave = NULL;
    enum core_status rc = CORE_OK;
    if (st->dur && sess_is_linked(st, s))
        rc = sess_dur_delete(st, s->id, false);
    pthread_mutex_lock(&st->mu);
    if (rc == CORE_OK && s->linked)
        unlink_sess(st, s, &grave, false);  /* held: not buried yet */
    else if (rc == CORE_OK)
        rc = CORE_ENOTFOUND;                /* removed by someone else meanwhile */
    pthread_mutex_unlock(&st->mu);
    return rc;
}

enum core_status sess_delete_held(struct sess_store *st, struct sess *s)
{
    enum core_status rc = sess_end_held(st, s);
    unref(st, s, false);                    /* frees it when ours was the last hold */
    return rc;
}

/* ---- claims and forks (for the operations of store_ops.c) ---------------- */

double sess_expires_in(struct sess_store *st, const struct sess *s)
{
    if (!(s->spec.ttl_s > 0))
        return -1;
    double left = s->spec.ttl_s - (sess_now(st) - s->last_used);
    return left > 0 ? left : 0;
}

bool sess_is_linked(struct sess_store *st, const struct sess *s)
{
    pthread_mutex_lock(&st->mu);
    bool linked = s->linked;
    pthread_mutex_unlock(&st->mu);
    return linked;
}

/*
 * Claim the bytes of making `need` rows writable: plan them (the growth
 * policy's, or with the last page of exactly the rows needed when only
 * that fits the budget (*tight); a shared last page that will be written
 * is copied), admit them (lru may evict idle sessions) and claim *bytes
 * while the pages are allocated (unclaim_rows after).
 */
enum core_status sess_claim_rows(struct sess_store *st, struct sess *s, size_t need,
                                 size_t *claimed, bool *tight_out)
{
    size_t geom, exact;
    enum core_status rc = kv_plan(s->kv, need, &geom, &exact);
    if (rc != CORE_OK)
        return rc;
    struct sess *grave = NULL;
    bool tight = false;
    size_t bytes = geom;
    pthread_mutex_lock(&st->mu);
    if (!s->linked && !s->detached) {
        rc = CORE_ENOTFOUND;
    } else if (admit(st, 0, geom, s, false, &grave) != CORE_OK) {
        tight = true;
        bytes = exact;
        rc = admit(st, 0, exact, s, true, &grave);
    }
    if (rc == CORE_OK)
        st->claimed += bytes;       /* claimed before allocating */
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    *claimed = bytes;
    *tight_out = tight;
    return rc;
}

enum core_status sess_claim_new(struct sess_store *st, size_t bytes)
{
    struct sess *grave = NULL;
    pthread_mutex_lock(&st->mu);
    enum core_status rc = admit(st, 1, bytes, NULL, true, &grave);
    if (rc == CORE_OK)
        st->claimed += bytes;       /* claimed before allocating */
    pthread_mutex_unlock(&st->mu);
    bury(grave);
    return rc;
}

void sess_unclaim_rows(struct sess_store *st, size_t bytes)
{
    pthread_mutex_lock(&st->mu);
    st->claimed -= bytes;
    pthread_mutex_unlock(&st->mu);
}

struct sess *sess_fork_unlinked(const struct sess *s, enum core_status *err)
{
    struct sess *f = sess_new_from_spec(&s->spec, err);
    if (!f)
        return NULL;
    f->spec.max_tokens = s->spec.max_tokens;
    f->spec.ttl_s = s->spec.ttl_s;
    struct kv_cache *copy = kv_fork(s->kv);
    if (!copy) {
        sess_destroy(f);
        *err = CORE_ENOMEM;
        return NULL;
    }
    kv_free(f->kv);
    f->kv = copy;
    return f;
}

enum core_status sess_fork(struct sess_store *st, struct sess *s, char *id)
{
    return sess_fork_idem(st, s, NULL, id, NULL);
}

enum core_status sess_fork_idem(struct sess_store *st, struct sess *s,
                                const struct sess_idem *idem, char *id,
                                struct sess **held)
{
    enum core_status rc;
    struct sess *f = sess_fork_unlinked(s, &rc);
    if (!f)
        return rc;
    if (!sess_is_linked(st, s) || !sess_set_idem(f, idem)) {
        rc = sess_is_linked(st, s) ? CORE_ENOMEM : CORE_ENOTFOUND;
        sess_destroy(f);
        return rc;
    }
    return link_journaled(st, f, s, id, held);
}
