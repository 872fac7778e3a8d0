/*
 * core/store_impl.h — the session store's internals shared by store.c (the
 * map, locks, accounting) and persist.c (save/load). Not for other modules:
 * everything else goes through core/store.h.
 */
#ifndef ATTND_CORE_STORE_IMPL_H
#define ATTND_CORE_STORE_IMPL_H

#include <pthread.h>

#include "store.h"

/* FNV-1a, 64-bit, of the text s carried on from h (SESS_HASH_SEED to
 * begin): the hash of the store's tables (ids, idempotency keys) and of
 * the replay's. */
#define SESS_HASH_SEED 14695981039346656037ull
static inline uint64_t sess_hash_text(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

struct sess {
    char id[SESS_ID_MAX];           /* NUL-terminated */
    struct sess_spec spec;          /* arrays point at the owned copies below */
    void *bias_q, *bias_k, *bias_v; /* owned copies, or NULL */
    double *slopes;                 /* owned copy of ALiBi slopes [h], or NULL */
    double *sinks;                  /* owned copy of per-head sink logits [h], or NULL */
    struct kv_cache *kv;            /* the cache; guarded by mu */
    pthread_mutex_t mu;             /* held from acquire to release */
    /* Guarded by the store mutex: */
    size_t refs;                    /* holders (acquire .. release) */
    bool linked;                    /* in the map (false once removed) */
    double last_used;               /* clock at the last acquire/release */
    struct sess *lru_prev, *lru_next; /* most recently used at lru_head */
    struct sess *hnext;             /* hash chain; graveyard link once removed */
    struct sess_idem *idem;         /* its idempotency key, or NULL */
    struct sess *inext;             /* chain of the key index (store mutex) */
    /* Journal (core/durable.c): */
    uint64_t jlsn;                  /* lsn of the last journaled change (mu) */
    double jtouch;                  /* store clock of the last record (mu) */
    bool detached;                  /* made by sess_create_detached, not yet put
                                       in place: its changes are not journaled
                                       (core/store_put.c) */
};

struct sess_durable;

struct sess_store {
    struct sess_config cfg;         /* cfg.replica_id points at replica */
    char replica[65];               /* sanitised id prefix and '.', "" for none */
    pthread_mutex_t mu;             /* guards everything below */
    struct sess **buckets;          /* hash table of linked sessions */
    struct sess **ibuckets;         /* the same of those with a key, by key
                                       (n_buckets chains too) */
    size_t n_buckets;               /* power of two */
    size_t count;                   /* linked sessions */
    struct sess *lru_head, *lru_tail;
    struct kv_acct acct;            /* bytes of every page of linked (and
                                       held, removed) sessions, each once */
    size_t claimed;                 /* admitted, not yet allocated */
    uint64_t created, evictions, expirations;
    sess_clock_fn clock;
    void *clock_arg;
    struct sess_durable *dur;       /* the journal, or NULL (set before use) */
    bool restoring;                 /* the journal's replay: no limits apply */
};

/* While on, sessions and rows are admitted whatever the limits say: what
 * the state directory holds was accepted once, and restoring it under lower
 * limits (or with a fork's shared pages now its own, as a snapshot holds
 * them) must not drop any of it. Set by core/durable.c around a replay. */
void sess_store_restoring(struct sess_store *st, bool on);

/* Current time of the store's clock (seconds). */
double sess_now(struct sess_store *st);

/* A new unlinked session from spec (validated, arrays copied); NULL on
 * error with *err set. The cache is empty. */
struct sess *sess_new_from_spec(const struct sess_spec *spec,
                                enum core_status *err);

/* Fill in a session's max_tokens and ttl defaults from the store's config. */
void sess_resolve_defaults(struct sess_store *st, struct sess *s);

/* link_journaled of a new named session s (id set), left held into *held
 * (as sess_create_named leaves it); CORE_EEXIST (the id is taken): s is
 * left as it was, unlinked, for the caller; any other error destroys it. */
enum core_status sess_link_named_held(struct sess_store *st, struct sess *s,
                                      struct sess **held);

/* store_idem.c: give an unlinked session a copy of idem (NULL: none);
 * false when memory is short. */
bool sess_set_idem(struct sess *s, const struct sess_idem *idem);

/* store_idem.c, store mutex held: the linked session holding k's key (or
 * NULL); s into and out of the key index (nothing for a session without
 * a key); the index's chains moved into to[n_to] (a grown table). */
struct sess *sess_idem_lookup(struct sess_store *st, const struct sess_idem *k);
void sess_idem_link(struct sess_store *st, struct sess *s);
void sess_idem_unlink(struct sess_store *st, struct sess *s);
void sess_idem_rehash(struct sess_store *st, struct sess **to, size_t n_to);

/* Free an unlinked, unreferenced session. */
void sess_destroy(struct sess *s);

/*
 * Link s (not yet linked; id already set, or generated when id[0] == 0)
 * into the store, admitting its bytes and one more session against the
 * limits (lru policy evicts idle sessions). idle_s: seconds it has already
 * been idle (0 for new). CORE_ECAPACITY when it does not fit; CORE_EEXIST
 * when the id is already taken, or s's idempotency key (while restoring,
 * the key passes to s instead: it was made later). On success the id is copied to
 * id_out[SESS_ID_MAX] (may be NULL) before s becomes visible to others; s
 * itself must not be touched afterwards (it may already be evicted).
 */
enum core_status sess_link(struct sess_store *st, struct sess *s,
                           double idle_s, char *id_out);

/*
 * Link a new session s and journal it whole (create, fork, import) before
 * anyone learns its id; destroys s on failure. Errors as sess_link, and
 * CORE_ESTORAGE when its record could not be written. held non-NULL: on
 * CORE_OK s is left held into *held (sess_release it).
 */
enum core_status sess_link_journaled(struct sess_store *st, struct sess *s,
                                     char *id_out, struct sess **held);

/* Whether s is still in the map (store mutex taken). */
bool sess_is_linked(struct sess_store *st, const struct sess *s);

/*
 * Claim the bytes of making `need` rows of s writable before allocating
 * them (admitted against the limits; lru may evict idle sessions): *claimed
 * bytes, *tight when only the exact last page fits. sess_unclaim_rows once
 * the pages are allocated (or not). CORE_ECAPACITY, CORE_ENOTFOUND,
 * CORE_ELIMIT.
 */
enum core_status sess_claim_rows(struct sess_store *st, struct sess *s, size_t need,
                                 size_t *claimed, bool *tight);
void sess_unclaim_rows(struct sess_store *st, size_t bytes);
/* Claim `bytes` for the rows of a new session before allocating them (an
 * import): admitted with one more session against the limits (lru may
 * evict idle sessions); sess_unclaim_rows once its pages are allocated
 * into a cache counting in st->acct (kv_set_acct; sess_link then adds
 * no bytes for it), or not.
 * CORE_ECAPACITY. */
enum core_status sess_claim_new(struct sess_store *st, size_t bytes);

/* A new unlinked session with s's settings sharing every page of its
 * cache (no id yet); NULL with *err set. s held. */
struct sess *sess_fork_unlinked(const struct sess *s, enum core_status *err);

/* sess_delete_held without letting go of s: its DELETE record written,
 * then s unlinked (later requests answer CORE_ENOTFOUND) and still held.
 * CORE_ESTORAGE when the record could not be written (s as it was),
 * CORE_ENOTFOUND when it was removed meanwhile. */
enum core_status sess_end_held(struct sess_store *st, struct sess *s);

/* sess_release without counting as a use (save walks sessions this way). */
void sess_unhold(struct sess_store *st, struct sess *s);

/* Seconds s may still stay idle before expiry (negative: never expires);
 * store mutex held. */
double sess_expires_in(struct sess_store *st, const struct sess *s);

/* Take a reference on every linked session (without locking them); free
 * the array; NULL when memory is short. */
struct sess **sess_hold_all(struct sess_store *st, size_t *n);

/* persist.c: a held session's bytes (the state-file format) into *out
 * (malloc'd). CORE_ENOMEM. */
enum core_status sess_encode(struct sess_store *st, struct sess *s,
                             void **out, size_t *n);

/* persist_read.c: p[n] as a new unlinked session with its id set, *idle_s
 * its idle seconds when encoded and *version the version of its encoding.
 * CORE_ENOMEM when memory is short (the bytes may be good), CORE_ECORRUPT
 * when the bytes are bad (a length asking for more than they hold is bad
 * bytes); *out NULL then and *why the reason (NULL on success). */
enum core_status sess_decode(const void *p, size_t n, struct sess **out,
                             double *idle_s, uint32_t *version, const char **why);
/* persist_read.c: the id that the bytes of an encoded session name, into
 * id[SESS_ID_MAX], read without checking the rest (to name a damaged
 * one); false when it cannot be read. */
bool sess_encoded_id(const void *p, size_t n, char *id);

/* state_files.c: remove every <id>.sess file in dir (folded into a
 * snapshot) and every stray temporary file (.NAME.tmp). */
void sess_remove_state_files(const char *dir);

/* state_files.c: sess_store_load, with *found the <id>.sess files seen
 * (restored or skipped); set_aside: a skipped file is renamed to
 * NAME.setaside (sess_remove_state_files would remove it). */
enum core_status sess_load_state_files(struct sess_store *st, const char *dir,
                                       sess_log_fn log, void *log_arg, bool set_aside,
                                       size_t *found);

void sess_logf(sess_log_fn log, void *arg, enum sess_log_level level,
               const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* store.c: whether the calling thread may journal a change (store.h's
 * sess_commit): true, and its bound commit claimed, unless withdrawn. */
bool sess_commit_claim(void);

/*
 * durable.c: journal records of changes, each CORE_OK at once when the
 * store has no journal; CORE_ESTORAGE when the record could not be written
 * (nothing of it is then in the journal). Called with s held (its mu).
 */
enum core_status sess_dur_sess(struct sess_store *st, struct sess *s);
/* The fork record of child (new, held) from parent (held): O(1) (the
 * parent's id and length), or whole while a snapshot is being written. */
enum core_status sess_dur_fork(struct sess_store *st, struct sess *parent,
                               struct sess *child);
enum core_status sess_dur_append(struct sess_store *st, struct sess *s,
                                 const void *k, const void *v, size_t m);
enum core_status sess_dur_truncate(struct sess_store *st, struct sess *s,
                                   size_t length);
/* Without s held; best: nothing waits for the disk (eviction and expiry,
 * under the store mutex) and a failure is only counted. */
enum core_status sess_dur_delete(struct sess_store *st, const char *id,
                                 bool best);
/* A use without a change, written at most every few seconds per session so
 * the TTL clock survives a restart (best effort). */
void sess_dur_touch(struct sess_store *st, struct sess *s);
/* The journal's numbers into out (nothing for NULL). */
void sess_dur_stats(struct sess_durable *d, struct sess_stats *out);
void sess_dur_kept(struct sess_durable *d, uint64_t *files, uint64_t *bytes);
/* Free the journal state (sess_store_free). */
void sess_dur_free(struct sess_durable *d);

#endif
