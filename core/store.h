/*
 * core/store.h — the session store: id -> session (a KV cache with its fixed
 * parameters), with per-session locks, TTL expiry, byte accounting against
 * global limits, eviction policy, and atomic save/restore to a directory.
 *
 * Thread-safe: the api worker threads call it concurrently; requests on one
 * session are serialised, a reader never sees half an append, and a session
 * being deleted or expired is never freed while a request still uses it.
 * Knows neither HTTP nor JSON.
 *
 * Locking: a store mutex guards the id map, the LRU list and the global
 * byte count; each session has its own mutex, held from sess_acquire to
 * sess_release, so requests on one session run one at a time. A session
 * carries a reference count: delete, expiry and eviction unlink it from the
 * map at once, but it is freed only when the last holder releases it (a
 * holder that finds it unlinked gets CORE_ENOTFOUND from every operation).
 * Lock order: session mutex, then store mutex — never the other way.
 *
 * Accounting: caches hold their rows in pages that forks share (kv.h);
 * the global count is the bytes of every page, each counted once however
 * many sessions hold it. Growth is checked against max_cache_bytes before
 * any memory is allocated; a fork allocates nothing until it writes into a
 * shared page. Eviction counts only what a session alone holds.
 */
#ifndef ATTND_CORE_STORE_H
#define ATTND_CORE_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "journal.h"
#include "kv.h"
#include "status.h"

enum sess_policy {
    SESS_POLICY_REJECT = 0,     /* writes over budget: CORE_ECAPACITY */
    SESS_POLICY_LRU,            /* evict least recently used idle sessions */
};

struct sess_config {
    size_t max_sessions;        /* live sessions at most */
    size_t max_cache_bytes;     /* accounted bytes over all sessions at most */
    double default_ttl_s;       /* ttl of a session that names none */
    size_t default_max_tokens;  /* max_tokens of a session that names none */
    size_t max_tokens;          /* rows a session holds at most whatever its
                                   max_tokens (one restored from before the
                                   limit was lowered); 0: its max_tokens */
    enum sess_policy policy;
    const char *replica_id;     /* prefix of new ids ("r1."), or NULL */
};

/* Aggregate numbers for /metrics and /v1/info. */
struct sess_stats {
    size_t sessions;            /* live sessions */
    size_t bytes;               /* accounted cache bytes */
    uint64_t created;           /* sessions ever created */
    uint64_t evictions;         /* removed by the LRU policy */
    uint64_t expirations;       /* removed by TTL */
    /* the journal (all 0 without one) */
    uint64_t journal_bytes;     /* current journal file, header included */
    uint64_t snapshot_bytes;    /* the last snapshot (written, or kept at
                                   the start) */
    uint64_t journal_records;   /* records written */
    uint64_t journal_failures;  /* changes refused: their record failed */
    uint64_t journal_lost;      /* best-effort records (evictions, expiry,
                                   touches) and fsyncs that failed */
    uint64_t snapshots;         /* snapshots written */
    uint64_t snapshot_failures; /* snapshot attempts that failed (the journal
                                   is kept and keeps growing) */
};

struct sess_store;

/* Clock in seconds (monotonic); injectable for tests. */
typedef double (*sess_clock_fn)(void *arg);

struct sess_store *sess_store_new(const struct sess_config *cfg);
void sess_store_free(struct sess_store *st);
void sess_store_set_clock(struct sess_store *st, sess_clock_fn fn, void *arg);

/* Remove expired sessions; returns how many. Called from a libuv timer. */
size_t sess_store_sweep(struct sess_store *st);

void sess_store_stats(struct sess_store *st, struct sess_stats *out);

/* The configuration the store was made with (fixed for its life). */
const struct sess_config *sess_store_config(const struct sess_store *st);

/* Files kept for a look in the state directory (copies of damaged files
 * and files set aside at a start, which attnd never reads or removes) and
 * their bytes, counted now by listing it; 0 without one. */
void sess_store_kept_files(struct sess_store *st, uint64_t *files, uint64_t *bytes);

/* Log sink for saving, loading and the journal: news (sessions restored,
 * a snapshot written) at SESS_LOG_INFO, problems (a file skipped, records
 * dropped, a write failed) at SESS_LOG_WARN. */
enum sess_log_level { SESS_LOG_INFO, SESS_LOG_WARN };
typedef void (*sess_log_fn)(void *arg, enum sess_log_level level, const char *msg);

/* Write every session into dir atomically (temp file, fsync, rename). */
enum core_status sess_store_save(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg);

/* Restore the sessions saved in dir; bad files are logged and skipped.
 * CORE_ESTORAGE when a file cannot be read now for a reason that says
 * nothing of it (too many open files, memory short, a permission): logged,
 * and the files after it are not read; CORE_EIO when dir cannot be
 * opened. */
enum core_status sess_store_load(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg);

/* ---- the journal (--state-dir) ------------------------------------------ */

struct sess_journal_config {
    const char *dir;            /* created if missing */
    enum jnl_fsync fsync;
    uint64_t rewrite_min_bytes; /* no snapshot before the journal is this big */
    sess_log_fn log;
    void *log_arg;
};

/*
 * Restore dir's snapshot and journals into the (empty) store, write a new
 * snapshot (unless the store holds exactly what the newest one holds and
 * its journal is empty: that journal is then reopened, core/durable.c),
 * and from then on journal every change: create, append,
 * truncate, fork, delete, and (best effort) evictions, expiries and uses.
 * A change whose record cannot be written fails with CORE_ESTORAGE and
 * leaves the session as it was. Damaged records end the replay (logged
 * with how many were kept and dropped). CORE_EIO when dir cannot be used,
 * or when a damaged journal cannot be cut back to its records before the
 * damage (later changes would follow it); CORE_ESTORAGE when a file in
 * dir cannot be read for a reason that says nothing of it (too many files
 * open, memory short, a permission: no file was changed);
 * a failed first snapshot is logged and retried by maintain.
 * Call before the store is shared between threads.
 */
enum core_status sess_store_open_journal(struct sess_store *st,
                                         const struct sess_journal_config *cfg);

/* fdatasync the journal (the --fsync everysec timer). */
enum core_status sess_store_journal_sync(struct sess_store *st);

/* Rewrite the state into a new snapshot when the journal has outgrown the
 * last one (or when forced, or after a failed write); only one runs at a
 * time. Sessions are copied one at a time, each under its own lock. */
enum core_status sess_store_journal_maintain(struct sess_store *st, bool force);

/*
 * A request's say over whether its changes may still be journaled, for a
 * server that answers a request before its work is done (attnd, when
 * --drain-timeout runs out: 503, "nothing of it was applied"). The thread
 * running the request binds the request's sess_commit (sess_commit_bind);
 * each journal record that thread writes for a change first claims it,
 * and sess_commit_withdraw (any thread) takes it instead. Exactly one of
 * the two wins: once withdrawn, every change of the request fails with
 * CORE_ESTORAGE before its record is written and leaves the session as it
 * was (as a record that cannot be written does; not counted as a journal
 * failure); once claimed, the withdrawal fails and the request goes on.
 * Best-effort records (uses, evictions, expiries) neither claim nor wait.
 * Without a journal nothing is refused: nothing of the store outlives the
 * process then.
 */
struct sess_commit {
    atomic_int state;               /* 0 (zeroed): open; claimed; withdrawn */
};

/* Bind c to the calling thread's records from now on; NULL unbinds. */
void sess_commit_bind(struct sess_commit *c);

/* Withdraw c: true when no record of its request has been written and none
 * will be (withdrawn now or before); false when one has been claimed. */
bool sess_commit_withdraw(struct sess_commit *c);

/* ---- sessions ----------------------------------------------------------- */

/* Longest id text, with its NUL: replica prefix (<= 63) + '.' + 22. */
#define SESS_ID_MAX 88

/* Base64url characters of the random part of an id (128 bits). */
#define SESS_ID_RANDOM_LEN 22

/* Longest name of a named session (sess_create_named), with its NUL: it
 * takes the random part's place in the id, after the replica prefix (at
 * most 63 characters and its '.'). */
#define SESS_NAME_MAX 24

/*
 * What a session fixes at creation. Arrays are borrowed by sess_create and
 * copied into the session.
 */
struct sess_spec {
    struct attn_shape shape;        /* h, h_kv, d_k, d_v (n and L ignored) */
    struct attn_params params;      /* dtype, scale, softmax, rope, alibi,
                                       softcap; params.alibi_slopes and
                                       params.sink_logits [h] or NULL */
    const void *bias_q;             /* [bias_q_heads][d_k] of dtype, or NULL */
    const void *bias_k;             /* [bias_k_heads][d_k] of dtype, or NULL */
    const void *bias_v;             /* [bias_v_heads][d_v] of dtype, or NULL */
    size_t bias_q_heads;            /* 1 or h (0 when absent) */
    size_t bias_k_heads;            /* 1 or h_kv (0 when absent) */
    size_t bias_v_heads;            /* 1 or h_kv (0 when absent) */
    size_t max_tokens;              /* rows at most; 0 = cfg.default_max_tokens */
    double ttl_s;                   /* idle seconds before expiry; <= 0 = default */
    enum kv_store kv_store;         /* how the cache stores rows (kv_dtype);
                                       narrower than the dtype only for float32 */
    unsigned half;                  /* the api's wire dtype, kept as given: 0
                                       none, 1 float16, 2 bfloat16 (params.dtype
                                       is then float32) */
    struct attn_window window;      /* on: a rolling session (below); left >= 0,
                                       right < 0 (causal: unused), sinks >= 0 */
};

/*
 * Rolling sessions (spec.window.on). Every query is causal (bottom-right)
 * with the session's window: key j is seen by a query at position p when
 * p - left <= j <= p, or j < sinks. After each append is committed, the
 * cache lets go of the whole pages below length - left past the sinks'
 * pages (kv_roll): a query that appends m rows and asks n <= m of them
 * only reaches rows at or after the old length - left, so it never misses
 * one. The rows held are [0, held_front) and [held_from, length); at most
 * ceil(sinks/64)*64 + left + 63 of them. The length and the positions keep
 * counting every row ever appended; max_tokens bounds the rows held
 * (with an append's), not the length. A query whose first row would reach
 * back past held_from is CORE_ELENGTH (n <= m never does); a truncate to
 * less than held_from + left (once rows were let go) too. Passes run over
 * the held rows: L of every [n][L] is the rows held plus those appended.
 */
struct sess;
struct sess_held {
    size_t front;                   /* rows [0, front) held (the sinks' pages) */
    size_t from;                    /* rows [from, length) held; 0: every row */
    size_t length;
};
void sess_held_rows(const struct sess *s, struct sess_held *out);

/* The oldest row a query of n rows after appending m reaches back to
 * (its window's start; 0 for a session that does not roll). */
size_t sess_reach(const struct sess *s, size_t n, size_t m);

/* The most rows a rolling session with window w holds between appends:
 * ceil(sinks/64)*64 + left + 63 (saturating). Its max_tokens must pass
 * this for an append of one row always to fit. */
size_t sess_roll_held_max(const struct attn_window *w);

/* The cache bytes a rolling session of spec sp takes to go on appending a
 * row at a time on an otherwise empty cache: sess_roll_held_max + 1 rows
 * (those held, and the append before the roll lets a page go) at its row
 * bytes as stored. The held pages are full but the last, which an append
 * sizes to its rows when the cache is tight, so this is the least room
 * that always fits; a --max-cache-bytes below it leaves the session
 * refused (capacity) once it holds that many. SIZE_MAX on overflow, 0
 * when sp does not roll. */
size_t sess_roll_bytes_need(const struct sess_spec *sp);

/* The rows s may hold (for a rolling session, with an append's): its
 * max_tokens, or cfg.max_tokens when that is lower (a session restored
 * after the limit was lowered, which an append past it finds CORE_EFULL). */
size_t sess_max_rows(const struct sess_store *st, const struct sess *s);

/* The shortest length sess_truncate accepts (0 unless rows were let go). */
size_t sess_min_length(const struct sess *s);

/* A session held by one request (between sess_acquire and sess_release). */
struct sess;

/* Snapshot of a session for GET /v1/sessions/{id}. */
struct sess_info {
    char id[SESS_ID_MAX];
    size_t length;                  /* cached rows per head */
    size_t bytes;                   /* storage bytes this session alone holds */
    size_t shared_bytes;            /* storage bytes it shares with others */
    size_t max_tokens;
    double ttl_s;
    double expires_in_s;            /* seconds until expiry if left idle */
    struct sess_held held;          /* the rows held (sess_held_rows) */
};

/*
 * Create an empty session from spec (validated: dimensions, h % h_kv, bias
 * head counts, RoPE with even d_k, positive scale/base, finite sink, ALiBi
 * slopes finite). Writes its id (NUL-terminated) into id[SESS_ID_MAX].
 * CORE_EINVAL/CORE_ESHAPE on a bad spec; CORE_ECAPACITY when max_sessions
 * are live (reject policy, or lru with no idle session to evict);
 * CORE_ENOMEM; CORE_EIO if getrandom fails.
 */
enum core_status sess_create(struct sess_store *st, const struct sess_spec *spec,
                             char *id);

/*
 * sess_create with an id worked out from name rather than drawn at random:
 * this store's replica prefix followed by name (1 to SESS_NAME_MAX - 1 of
 * [A-Za-z0-9_-]), so whoever knows the name finds the session again, also
 * after a restart (sess_named_id). held non-NULL: the new session is left
 * held into *held (sess_release or sess_delete_held it), so no request
 * for the name can come between its making and its first use. CORE_EEXIST
 * when a session has that id (delete it first); CORE_EINVAL for a bad
 * name; else errors as sess_create. Such an id is used again after a
 * delete: sess_delete waits for the request holding the old session, so
 * none of its journal records can follow the new one's.
 */
enum core_status sess_create_named(struct sess_store *st,
                                   const struct sess_spec *spec,
                                   const char *name, char *id, struct sess **held);

/* The id of the session named name (sess_create_named), into
 * id[SESS_ID_MAX]; false for a bad name. */
bool sess_named_id(struct sess_store *st, const char *name, char *id);

/*
 * A new session for a name that may be in use (a v2 sequence_start), made
 * detached (core/store_put.c): it has the name's id (into id[SESS_ID_MAX]
 * when id is non-NULL) but is in no map, so no request finds it, and
 * nothing of it is journaled; its maker runs passes on it as on a held
 * session (sess_attend_x: its rows count against max_cache_bytes as they
 * are made, and it against max_sessions only once put in place). Then it
 * is either dropped (sess_drop_detached: the store is as it was, the
 * session under its id too) or put in place (sess_put_detached). Errors
 * as sess_create_named.
 */
enum core_status sess_create_detached(struct sess_store *st, const struct sess_spec *spec,
                                      const char *name, char *id, struct sess **out);
void sess_drop_detached(struct sess_store *st, struct sess *s);

/*
 * Put detached s in place under its id with one journal record (the whole
 * session, as a create's), so a restart finds what was there before or s,
 * never neither. old: the session under that id, held by the caller since
 * before s's pass (so nothing else changed it meanwhile), which keeps its
 * place, lock and holders but takes s's settings and rows, its own going
 * (and its idempotency key); NULL when there was none: s is linked (one
 * session more against the limits), or, when another was made under the
 * id meanwhile, that one is acquired and replaced as old would be. On
 * CORE_OK *held is the session now under the id, held (sess_release it).
 * s is consumed whatever the outcome; on an error old is as it was, and
 * still held. CORE_EEXIST when others kept making and deleting the id
 * meanwhile; else errors as sess_create_named (CORE_ESTORAGE: the record
 * could not be written, or the caller's request was withdrawn).
 */
enum core_status sess_put_detached(struct sess_store *st, struct sess *s, struct sess *old,
                                   struct sess **held);

/*
 * Look up id, take a reference, lock the session and refresh its TTL and
 * LRU position. CORE_ENOTFOUND for an unknown or expired id. On CORE_OK the
 * caller must call sess_release(st, *out) exactly once.
 */
enum core_status sess_acquire(struct sess_store *st, const char *id,
                              struct sess **out);

/* Unlock and drop the reference (frees a session already removed). */
void sess_release(struct sess_store *st, struct sess *s);

/* Whether id names a live session, without holding it or counting as a
 * use (its TTL and LRU position stay as they are; never waits for a busy
 * session). */
bool sess_exists(struct sess_store *st, const char *id);

/* Remove id once the request holding it (if any) is done; later requests
 * answer CORE_ENOTFOUND. CORE_ENOTFOUND when unknown or expired. Never
 * call it while holding that session (it would wait for itself). */
enum core_status sess_delete(struct sess_store *st, const char *id);

/* sess_delete of a session the caller holds, which it lets go of (as
 * sess_release): nobody can take the session between the request and the
 * delete, nor a session made again under its id be deleted instead. */
enum core_status sess_delete_held(struct sess_store *st, struct sess *s);

/* ---- operations on a held session (between acquire and release) -------- */

/* The fixed parameters; arrays point into the session (valid while held). */
const struct sess_spec *sess_spec(const struct sess *s);

/* Rows cached per head. */
size_t sess_length(const struct sess *s);

/* The cache itself, read-only (GET .../kv, save). */
const struct kv_cache *sess_cache(const struct sess *s);

void sess_get_info(struct sess_store *st, const struct sess *s,
                   struct sess_info *out);

/*
 * Append m raw rows: k [h_kv][m][d_k], v [h_kv][m][d_v] of the session's
 * dtype; stored after the session's bias and RoPE. expected_length < 0
 * means "don't check". All or nothing. Errors: CORE_ENOTFOUND (deleted
 * meanwhile), CORE_ELENGTH (length != expected_length), CORE_EFULL (over
 * max_tokens), CORE_ECAPACITY (over max_cache_bytes: reject policy, or lru
 * without enough idle sessions to evict), CORE_EINVAL, CORE_ELIMIT,
 * CORE_ENOMEM, CORE_ENONFINITE.
 */
enum core_status sess_append(struct sess_store *st, struct sess *s,
                             const void *k, const void *v, size_t m,
                             long long expected_length);

struct attn_blame;
struct attn_blame_empty;

/* One attention request against a session. */
struct sess_query {
    const void *q;                  /* [h][n][d_k] raw queries, session dtype */
    size_t n;                       /* query rows per head */
    enum attn_causal causal;        /* NONE or BOTTOM_RIGHT (or TOP_LEFT) */
    enum attn_empty_rows empty_rows;
    const void *attn_bias;          /* [attn_bias_heads][n][L] or NULL */
    size_t attn_bias_heads;         /* 1 or h */
    const uint8_t *mask;            /* [mask_heads][n][L] or NULL */
    size_t mask_heads;              /* 1 or h */
    unsigned outputs;               /* ATTN_OUT_* bits */
    struct attn_window window;      /* sliding window over the cache's positions */
    /* sess_attend_x: called on the results once the pass has succeeded and
     * before its append is kept (NULL: none); false refuses them (a value
     * the caller cannot represent), and the append is rolled back as for a
     * pass that failed (CORE_ENONFINITE). */
    bool (*accept)(void *arg, struct attn_result *out, struct attn_extras_out *xo);
    void *accept_arg;
    /* sess_attend_x: the session ends with this pass (a v2 sequence_end):
     * its one record is the session's DELETE, written once the pass has
     * succeeded in place of the append's, and the session is then removed
     * (still held by the caller, who lets go of it with sess_release). When
     * that record cannot be written the append is rolled back and the
     * session stays as it was (CORE_ESTORAGE), so a crash or a refusal
     * never leaves the rows appended and the session not removed. Ignored
     * for a detached session (nothing of it is journaled). */
    bool end;
    /* sess_attend_x: when the pass stops on a query row with no allowed
     * key (CORE_EEMPTYROW), that row and why (kv_blame_empty), found before
     * the append is rolled back; NULL: not wanted. */
    struct attn_blame_empty *empty;
    /* sess_attend_x: when the pass itself overflows (CORE_ENONFINITE, not
     * q->accept's refusal), the input to blame (kv_blame: a key or value
     * row j is the j-th held row, the appended ones last), found before
     * the append is rolled back; NULL: not wanted. */
    struct attn_blame *blame;
};

/*
 * The attn_request this query makes against the session's current length L
 * (shape {h,h_kv,n,L,d_k,d_v}, the session's params, the query's options):
 * callers size result buffers from it and check it with attn_check before
 * appending. L is what the length will be after appending `m_extra` rows;
 * for a rolling session, the rows held then (its causal and window replace
 * the query's).
 */
enum core_status sess_request(const struct sess *s, const struct sess_query *q,
                              size_t m_extra, struct attn_request *out);

/*
 * Append m rows (k, v as sess_append; m == 0 appends nothing), then attend q
 * against the whole cache: results [h][n][L] with L the new length (queries
 * at L-n..L-1). If the attention fails after an append, or q->accept
 * refuses its results, the append is rolled back: the request is all or
 * nothing. Errors as sess_append, plus attn_forward_kv's (CORE_ESHAPE,
 * CORE_EEMPTYROW, CORE_ENONFINITE, ...; the last also when q->accept said
 * no).
 */
enum core_status sess_attend(struct sess_store *st, struct sess *s,
                             const void *k, const void *v, size_t m,
                             const struct sess_query *q,
                             struct attn_result *out, struct attn_ws *ws);

/* sess_attend with the extras of core/attn_extras.h (x NULL: none). */
enum core_status sess_attend_x(struct sess_store *st, struct sess *s,
                               const void *k, const void *v, size_t m,
                               const struct sess_query *q, const struct attn_extras *x,
                               struct attn_extras_out *xo, struct attn_result *out,
                               struct attn_ws *ws);

/* Keep the first `length` rows. CORE_EINVAL if length > current length;
 * CORE_ELENGTH below sess_min_length (a rolling session's window would
 * miss rows it let go); CORE_ENOTFOUND if deleted meanwhile. */
enum core_status sess_truncate(struct sess_store *st, struct sess *s,
                               size_t length);

/* A new session with the same parameters sharing every page of the cache
 * (no row is copied; the first write into a shared page copies that page);
 * its id into id[SESS_ID_MAX]. Errors as sess_create. */
enum core_status sess_fork(struct sess_store *st, struct sess *s, char *id);

/*
 * Idempotency keys (the api's Idempotency-Key header): a create, fork or
 * import may carry a key, unique among the live sessions of its scope (the
 * API key's name, or "" for none), with a digest of what was asked. The
 * key is journaled and snapshotted with the session and is free again once
 * the session is deleted, expires or is evicted. Looking a key up and
 * linking a session with it happen under the store mutex, so of two
 * creates with one key exactly one links; the other gets CORE_EEXIST.
 */
#define SESS_IDEM_SCOPE_MAX 64      /* scope bytes with the NUL */
#define SESS_IDEM_KEY_MAX 256       /* key bytes with the NUL (1..255) */
#define SESS_IDEM_DIGEST 16         /* digest bytes (opaque to the store) */

struct sess_idem {
    char scope[SESS_IDEM_SCOPE_MAX];
    char key[SESS_IDEM_KEY_MAX];
    unsigned char digest[SESS_IDEM_DIGEST];
};

/* The live session whose key is idem's (scope and key): its id into
 * id[SESS_ID_MAX] and *same whether its digest is idem's; false when
 * there is none (an expired one is removed here, as sess_acquire does). */
bool sess_idem_find(struct sess_store *st, const struct sess_idem *idem, char *id,
                    bool *same);

/* sess_create and sess_fork with a key (NULL: none): CORE_EEXIST when a
 * live session holds the key already (sess_idem_find names it); a keyed
 * fork is journaled whole (its rows written once), as a create is.
 * held non-NULL: on CORE_OK the new session is left held into *held (as
 * sess_acquire leaves it; sess_release it), so that neither its TTL nor an
 * eviction can take it before its creator has answered for it. */
enum core_status sess_create_idem(struct sess_store *st, const struct sess_spec *spec,
                                  const struct sess_idem *idem, char *id,
                                  struct sess **held);
enum core_status sess_fork_idem(struct sess_store *st, struct sess *s,
                                const struct sess_idem *idem, char *id,
                                struct sess **held);

/* Export and import (moving a session between replicas): core/persist.h. */

#endif
