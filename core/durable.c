/*
 * core/durable.c — the session store's journal and snapshots (the
 * sess_store_*journal* functions of store.h, the sess_dur_* hooks of
 * store_impl.h).
 *
 * Files in the state directory, generation G a 16-hex-digit number:
 *   LOCK         locked by the store that uses the directory (below)
 *   snapshot.G   every session when generation G began (a jnl file:
 *                one BEGIN record, SESS records, one END record;
 *                core/journal.h), written as .snapshot.G.tmp, fsync'd,
 *                renamed, directory fsync'd
 *   journal.G    every change since generation G began
 * Start-up loads the newest snapshot S, then replays journal.M for every
 * M >= S in order (core/replay.c: a damaged snapshot record loses only its
 * session; a journal's first damaged record stops the replay). A new
 * generation then begins and older files go once its snapshot is on disk;
 * a failed snapshot leaves journal.S, journal.S+1, ... for the next start.
 * A crash between a snapshot's rename and that removal leaves the older
 * files beside it. They are not needed while S reads whole; when it does
 * not, an older snapshot O, when it reads whole and every journal from O
 * to S is there, is read instead with every journal from O on: those are
 * the whole history since generation O began, as when snapshot S failed,
 * which the lsn rules below take, and S holds nothing they do not (its
 * sessions are copies of states those journals record), so S is set
 * aside. Otherwise the older files, which the start did not use, are set
 * aside (never removed) and the replay goes on from what S held.
 * A start after which the store holds exactly what snapshot S holds (S
 * read whole, journal.S the only journal after it and empty, nothing
 * failed, dropped, set aside or expired, no session in an older encoding,
 * no state file of an older attnd taken in: struct sess_replayed) writes
 * no snapshot: journal.S, only its header, is reopened and takes the
 * changes, so the next start reads snapshot S and journal.S, which is what
 * a snapshot written now and its journal would give it; older files go as
 * after a snapshot. No file is added, so starts without changes do not
 * make the chain grow.
 *
 * Records (payload of a jnl record; lsn: one counter for the store):
 *   u32 type, f64 wall-clock seconds of the change, then by type:
 *   SESS    a whole session (persist.c's encoding): create, import,
 *           snapshot, a fork while a snapshot is being written, and a
 *           session put in place under an id in use (core/store_put.c:
 *           in a journal it replaces a session of its id whose last
 *           change is older)
 *   APPEND  u32 id_len, id, u64 m, u64 k_bytes, u64 v_bytes, raw k, raw v
 *           (as given to sess_append: replay prepares them the same way)
 *   TRUNC   u32 id_len, id, u64 length
 *   DELETE  u32 id_len, id
 *   TOUCH   u32 id_len, id (a use: the TTL clock)
 *   FORK    u32 id_len, parent id, u32 id_len, id, u64 length: a fork of
 *           the parent as it was then (O(1): no row)
 *   END     u64 count: a snapshot's last record (lsn 0), the number of SESS
 *           records before it
 *   BEGIN   nothing more: a snapshot's first record (lsn 0), which says
 *           that an END record closes it
 * A snapshot that begins with BEGIN and is cut between two records, or
 * before END, or whose END counts other records than were met, reads as
 * damaged (the sessions before the cut are restored, a copy kept, a new
 * snapshot written), not as a whole one of fewer sessions. A snapshot
 * without BEGIN was written by an attnd from before these records: it is
 * read as it was, and written again at start, with them. The header stays
 * version 1 (core/journal.h): an attnd from before reads a snapshot with
 * them, drops BEGIN and END as two records it does not know (a warn line),
 * restores every session, keeps a copy and writes a snapshot of its own.
 * A session remembers the lsn of its last change (jlsn). A snapshot holds
 * each session at some point after its generation began, with that lsn, so
 * replay applies a record to a session only when its lsn is newer than the
 * session's: records the snapshot already holds are skipped. This works
 * because every change is applied and journaled under the session's own
 * lock (an append is applied, then journaled, and rolled back if the record
 * fails; a truncate is journaled, then applied), and a snapshot copies a
 * session under that same lock; a delete is journaled before the session
 * is unlinked, with the session marked so the snapshot waits for the
 * outcome. A fork or create is journaled whole, so its record never depends
 * on another session's state at the time, with one exception.
 *
 * A fork is written as FORK (the parent's id and length) unless a snapshot
 * is being written (rewriting: from the generation switch until its last
 * session is copied), when it is a whole SESS record. Replay forks the
 * parent as the journal has rebuilt it by then, which is the parent of the
 * time: every change of the parent before the fork has a smaller lsn, and
 * the snapshot the replay starts from holds the parent from before the
 * fork, because the fork came after that snapshot's walk (a fork during
 * the walk is whole, and one between the switch and the walk made a child
 * the walk copies, so its record is skipped). A FORK record whose parent
 * is missing, newer than the record or of another length fails (counted
 * and logged with the replay's numbers).
 *
 * Time to live: records carry the wall clock, so a session idle for longer
 * than its TTL across a restart is not brought back; uses without a change
 * are journaled at most once a second per session (TOUCH).
 *
 * Locks: the journal mutex is the innermost lock (taken under a session's
 * mutex or the store mutex, never the other way).
 *
 * One process at a time: the store holds the directory's LOCK
 * (core/dirlock.c) from before the replay until it is freed.
 */
#include "store_impl.h"
#include "dirlock.h"
#include "replay.h"
#include "replay_files.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REWRITE_RETRY_S 10.0


struct sess_durable {
    pthread_mutex_t mu;             /* guards all below */
    pthread_cond_t idle;            /* syncing dropped to 0 */
    char dir[1024];
    enum jnl_fsync mode;
    uint64_t rewrite_min;
    sess_log_fn log;
    void *log_arg;
    struct jnl *j;                  /* the current journal, or NULL */
    uint64_t gen;                   /* its generation */
    uint64_t next_lsn;
    uint64_t snapshot_bytes;
    int syncing;                    /* fsyncs running outside the mutex */
    bool rewriting;
    bool failing;                   /* the last write failed (log once) */
    double retry_at;                /* store clock: next rewrite after a failure */
    uint64_t records, failures, lost, snapshots, snapshot_failures;
    int lock_fd;                    /* LOCK, flocked for the store's life; -1:
                                       the file system has no locks */
};

/* ---- writing records ------------------------------------------------------ */

/* Write one record (parts[0] is filled with the head); *lsn_out (may be
 * NULL) gets its lsn. best: counted as lost, not as a refused change, and
 * never waits for the disk. quiet (may be NULL): write only when no
 * snapshot is being written, else write nothing and set *quiet false.
 * A change's record first claims the calling thread's bound sess_commit
 * (store.h), and is refused unwritten when its request was withdrawn. */
static enum core_status write_rec_q(struct sess_durable *d, enum sess_rec type,
                                    struct iovec *parts, int n, bool best,
                                    uint64_t *lsn_out, bool *quiet)
{
    unsigned char head[12];
    uint32_t t = type;
    double w = sess_wall_now();
    memcpy(head, &t, 4);
    memcpy(head + 4, &w, 8);
    parts[0] = (struct iovec){head, sizeof head};
    if (!best && !sess_commit_claim())
        return CORE_ESTORAGE;       /* its request was withdrawn: nothing written */
    int e = ENOENT;
    pthread_mutex_lock(&d->mu);
    if (quiet && (*quiet = !d->rewriting) == false) {
        pthread_mutex_unlock(&d->mu);
        return CORE_OK;
    }
    uint64_t lsn = d->next_lsn++;
    enum core_status rc = d->j ? jnl_append(d->j, lsn, parts, n, best, &e)
                               : CORE_ESTORAGE;
    bool was_failing = d->failing;
    if (rc == CORE_OK) {
        d->records++;
        d->failing = false;
    } else {
        if (best)
            d->lost++;
        else
            d->failures++;
        d->failing = true;
    }
    bool open = d->j != NULL;
    pthread_mutex_unlock(&d->mu);
    if (rc != CORE_OK && !was_failing && !open)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: no journal is open (the "
                  "snapshot that opens one failed); changes are refused until one succeeds "
                  "(retried every %gs)", REWRITE_RETRY_S);
    else if (rc != CORE_OK && !was_failing)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: writing a record failed (%s); "
                  "changes are refused until it succeeds", strerror(e));
    else if (rc == CORE_OK && was_failing)
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: writes succeed again");
    if (rc == CORE_OK && lsn_out)
        *lsn_out = lsn;
    return rc;
}

static enum core_status write_rec(struct sess_durable *d, enum sess_rec type,
                                  struct iovec *parts, int n, bool best,
                                  uint64_t *lsn_out)
{
    return write_rec_q(d, type, parts, n, best, lsn_out, NULL);
}

enum core_status sess_dur_sess(struct sess_store *st, struct sess *s)
{
    if (!st->dur)
        return CORE_OK;
    void *blob;
    size_t n;
    if (sess_encode(st, s, &blob, &n) != CORE_OK)
        return CORE_ENOMEM;
    struct iovec parts[2] = {{0}, {blob, n}};
    enum core_status rc = write_rec(st->dur, SESS_REC_SESS, parts, 2, false,
                                    &s->jlsn);
    free(blob);
    if (rc == CORE_OK)
        s->jtouch = sess_now(st);
    return rc;
}

/* Sets parts[1..2] to the id; idlen must outlive the write. */
static void id_parts(struct iovec *parts, const char *id, uint32_t *idlen)
{
    *idlen = (uint32_t)strlen(id);
    parts[1] = (struct iovec){idlen, 4};
    parts[2] = (struct iovec){(void *)id, *idlen};
}

enum core_status sess_dur_append(struct sess_store *st, struct sess *s,
                                 const void *k, const void *v, size_t m)
{
    if (!st->dur)
        return CORE_OK;
    const struct attn_shape *sh = &s->spec.shape;
    size_t es = attn_dtype_size(s->spec.params.dtype);
    uint64_t sizes[3] = {m, (uint64_t)m * sh->h_kv * sh->d_k * es,
                         (uint64_t)m * sh->h_kv * sh->d_v * es};
    uint32_t idlen;
    struct iovec parts[6];
    id_parts(parts, s->id, &idlen);
    parts[3] = (struct iovec){sizes, sizeof sizes};
    parts[4] = (struct iovec){(void *)k, sizes[1]};
    parts[5] = (struct iovec){(void *)v, sizes[2]};
    enum core_status rc = write_rec(st->dur, SESS_REC_APPEND, parts, 6, false,
                                    &s->jlsn);
    if (rc == CORE_OK)
        s->jtouch = sess_now(st);
    return rc;
}

enum core_status sess_dur_truncate(struct sess_store *st, struct sess *s,
                                   size_t length)
{
    if (!st->dur)
        return CORE_OK;
    uint64_t len = length;
    uint32_t idlen;
    struct iovec parts[4];
    id_parts(parts, s->id, &idlen);
    parts[3] = (struct iovec){&len, sizeof len};
    enum core_status rc = write_rec(st->dur, SESS_REC_TRUNC, parts, 4, false,
                                    &s->jlsn);
    if (rc == CORE_OK)
        s->jtouch = sess_now(st);
    return rc;
}

enum core_status sess_dur_fork(struct sess_store *st, struct sess *parent,
                               struct sess *child)
{
    if (!st->dur)
        return CORE_OK;
    uint64_t len = kv_length(parent->kv);
    uint32_t plen, clen;
    struct iovec parts[6];
    id_parts(parts, parent->id, &plen);
    id_parts(parts + 2, child->id, &clen);
    parts[5] = (struct iovec){&len, sizeof len};
    bool quiet;
    enum core_status rc = write_rec_q(st->dur, SESS_REC_FORK, parts, 6, false, &child->jlsn,
                                      &quiet);
    if (rc == CORE_OK && !quiet)
        return sess_dur_sess(st, child);     /* a snapshot is being written */
    if (rc == CORE_OK)
        child->jtouch = sess_now(st);
    return rc;
}

enum core_status sess_dur_delete(struct sess_store *st, const char *id,
                                 bool best)
{
    if (!st->dur)
        return CORE_OK;
    uint32_t idlen;
    struct iovec parts[3];
    id_parts(parts, id, &idlen);
    return write_rec(st->dur, SESS_REC_DELETE, parts, 3, best, NULL);
}

void sess_dur_touch(struct sess_store *st, struct sess *s)
{
    if (!st->dur || !(s->spec.ttl_s > 0))
        return;
    double now = sess_now(st);
    if (now - s->jtouch < SESS_TOUCH_EVERY_S)
        return;
    uint32_t idlen;
    struct iovec parts[3];
    id_parts(parts, s->id, &idlen);
    if (write_rec(st->dur, SESS_REC_TOUCH, parts, 3, true, NULL) == CORE_OK)
        s->jtouch = now;
}

/* ---- snapshots ------------------------------------------------------------ */

/* Remove snapshot.G / journal.G files older than gen (stray temporary
 * files go through sess_remove_state_files). */
static void remove_one(const char *path, void *arg)
{
    (void)arg;
    unlink(path);
}

static void remove_old(const char *dir, uint64_t gen)
{
    sess_state_each_older(dir, gen, remove_one, NULL);
}

/* Start generation d->gen + 1 (unless the journal is still empty); with
 * d->mu held. */
static enum core_status switch_journal(struct sess_durable *d, int *err)
{
    if (d->j && !jnl_broken(d->j) && jnl_size(d->j) == JNL_HEADER_BYTES)
        return CORE_OK;
    char path[1100];
    sess_state_name(path, sizeof path, d->dir, "journal.", d->gen + 1, "");
    unlink(path);                   /* a leftover of a failed start */
    struct jnl *nj = jnl_create(path, JNL_MAGIC_JOURNAL, d->gen + 1, d->mode,
                                err);
    if (!nj)
        return CORE_ESTORAGE;
    while (d->syncing > 0)
        pthread_cond_wait(&d->idle, &d->mu);
    if (d->j) {
        if (jnl_sync(d->j, NULL) != CORE_OK)
            d->lost++;
        jnl_close(d->j);
    }
    d->j = nj;
    d->gen++;
    return CORE_OK;
}

/* Copy one held session into the snapshot; false when the write failed. */
static bool snap_one(struct sess_store *st, struct sess *s, struct jnl *sj,
                     uint64_t *count, int *err)
{
    /* a delete journals under s->mu: it is done or not yet begun */
    pthread_mutex_lock(&s->mu);
    if (!sess_is_linked(st, s)) {
        sess_unhold(st, s);
        return true;
    }
    void *blob;
    size_t n;
    uint64_t lsn = s->jlsn;
    enum core_status rc = sess_encode(st, s, &blob, &n);
    sess_unhold(st, s);
    if (rc != CORE_OK) {
        *err = ENOMEM;
        return false;
    }
    unsigned char head[12];
    uint32_t t = SESS_REC_SESS;
    double w = sess_wall_now();
    memcpy(head, &t, 4);
    memcpy(head + 4, &w, 8);
    struct iovec parts[2] = {{head, sizeof head}, {blob, n}};
    rc = jnl_append(sj, lsn, parts, 2, true, err);
    free(blob);
    if (rc == CORE_OK)
        (*count)++;
    return rc == CORE_OK;
}

/* A snapshot's marker record (lsn 0, no change's): BEGIN, its first, says
 * an END closes it; END, its last, holds how many SESS records precede it,
 * so that a reader tells a snapshot cut between two records from a whole
 * one. */
static bool snap_marker(struct jnl *sj, uint32_t type, uint64_t count, int *err)
{
    unsigned char rec[SESS_REC_END_BYTES];
    double w = sess_wall_now();
    memcpy(rec, &type, 4);
    memcpy(rec + 4, &w, 8);
    memcpy(rec + 12, &count, 8);
    struct iovec part = {rec, type == SESS_REC_END ? SESS_REC_END_BYTES
                                                   : SESS_REC_BEGIN_BYTES};
    return jnl_append(sj, 0, &part, 1, true, err) == CORE_OK;
}

/* Write snapshot.gen of every session; CORE_ESTORAGE with *err set. */
static enum core_status write_snapshot(struct sess_store *st,
                                       struct sess_durable *d, uint64_t gen,
                                       uint64_t *bytes, uint64_t *count,
                                       int *err)
{
    char tmp[1100], fin[1100];
    sess_state_name(tmp, sizeof tmp, d->dir, ".snapshot.", gen, ".tmp");
    sess_state_name(fin, sizeof fin, d->dir, "snapshot.", gen, "");
    unlink(tmp);
    struct jnl *sj = jnl_create(tmp, JNL_MAGIC_SNAPSHOT, gen, JNL_FSYNC_NO, err);
    if (!sj)
        return CORE_ESTORAGE;
    size_t n = 0;
    struct sess **all = NULL;
    bool ok = snap_marker(sj, SESS_REC_BEGIN, 0, err);
    if (ok) {
        all = sess_hold_all(st, &n);
        ok = all != NULL;
        if (!ok)
            *err = ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (ok)
            ok = snap_one(st, all[i], sj, count, err);
        else {
            pthread_mutex_lock(&all[i]->mu);
            sess_unhold(st, all[i]);
        }
    }
    free(all);
    if (ok)
        ok = snap_marker(sj, SESS_REC_END, *count, err);
    if (ok)
        ok = jnl_sync(sj, err) == CORE_OK;
    *bytes = jnl_size(sj);
    jnl_close(sj);
    if (ok && rename(tmp, fin) != 0) {
        *err = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        return CORE_ESTORAGE;
    }
    int dfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0)
            ok = false;
        close(dfd);
    }
    if (!ok) {
        *err = errno;
        return CORE_ESTORAGE;
    }
    remove_old(d->dir, gen);
    return CORE_OK;
}

enum core_status sess_store_journal_maintain(struct sess_store *st, bool force)
{
    struct sess_durable *d = st->dur;
    if (!d)
        return CORE_OK;
    double now = sess_now(st);
    pthread_mutex_lock(&d->mu);
    bool broken = !d->j || jnl_broken(d->j);
    uint64_t size = d->j ? jnl_size(d->j) : 0;
    bool due = force || broken ||
               (size > d->rewrite_min && size > d->snapshot_bytes);
    if (d->rewriting || !due || (!force && now < d->retry_at)) {
        pthread_mutex_unlock(&d->mu);
        return CORE_OK;
    }
    int err = 0;
    enum core_status rc = switch_journal(d, &err);
    uint64_t gen = d->gen;
    d->rewriting = rc == CORE_OK;
    pthread_mutex_unlock(&d->mu);
    uint64_t bytes = 0, count = 0;
    if (rc == CORE_OK)
        rc = write_snapshot(st, d, gen, &bytes, &count, &err);
    pthread_mutex_lock(&d->mu);
    d->rewriting = false;
    if (rc == CORE_OK) {
        d->snapshot_bytes = bytes;
        d->snapshots++;
    } else {
        d->snapshot_failures++;
        d->retry_at = now + REWRITE_RETRY_S;
    }
    bool open = d->j != NULL;
    pthread_mutex_unlock(&d->mu);
    if (rc == CORE_OK)
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: snapshot %016" PRIx64 " written: "
                  "%" PRIu64 " sessions, %" PRIu64 " bytes", gen, count, bytes);
    else
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: snapshot failed (%s); %s, "
                  "retried in %gs", strerror(err),
                  open ? "the journal is kept" : "no journal is open to take changes (they are "
                  "refused) until one succeeds", REWRITE_RETRY_S);
    return rc;
}

enum core_status sess_store_journal_sync(struct sess_store *st)
{
    struct sess_durable *d = st->dur;
    if (!d)
        return CORE_OK;
    pthread_mutex_lock(&d->mu);
    struct jnl *j = d->j;
    if (!j || d->mode == JNL_FSYNC_NO) {
        pthread_mutex_unlock(&d->mu);
        return CORE_OK;
    }
    d->syncing++;                   /* j is not closed while this runs */
    pthread_mutex_unlock(&d->mu);
    int err = 0;
    enum core_status rc = jnl_sync(j, &err);
    pthread_mutex_lock(&d->mu);
    if (rc != CORE_OK)
        d->lost++;
    if (--d->syncing == 0)
        pthread_cond_broadcast(&d->idle);
    pthread_mutex_unlock(&d->mu);
    if (rc != CORE_OK)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: fsync failed (%s); a new "
                  "snapshot will be written", strerror(err));
    return rc;
}

/* ---- opening and closing ---------------------------------------------------- */

/*
 * Go on from snapshot.G (G = rr->newest), which the replay found to hold
 * every session as restored, with its empty journal.G taking the changes
 * (st->dur is d, the store not shared yet). Older files go, as after a
 * snapshot. False, with why[size] set, when journal.G cannot be reopened.
 */
static bool keep_snapshot(struct sess_store *st, struct sess_durable *d,
                          const struct sess_replayed *rr, char *why, size_t size)
{
    char path[1100];
    int err = 0;
    sess_state_name(path, sizeof path, d->dir, "journal.", rr->newest, "");
    struct jnl *j = jnl_reopen_empty(path, JNL_MAGIC_JOURNAL, rr->newest, d->mode, &err);
    if (!j) {
        snprintf(why, size, "journal.%016" PRIx64 " cannot be reopened (%s)", rr->newest,
                 strerror(err));
        return false;
    }
    d->j = j;
    d->gen = rr->newest;
    d->snapshot_bytes = rr->snapshot_bytes;
    remove_old(d->dir, d->gen);
    sess_remove_state_files(d->dir);        /* stray temporary files */
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: snapshot %016" PRIx64 " kept: "
              "%zu sessions, %" PRIu64 " bytes; nothing has changed since, so no new "
              "snapshot is needed and journal.%016" PRIx64 " takes the changes",
              d->gen, ss.sessions, d->snapshot_bytes, d->gen);
    return true;
}

/* The restored sessions are kept whatever the limits: say so when they are
 * over them, since the cache then refuses (or, lru, evicts for) growth. */
static void warn_over_limits(struct sess_store *st, const struct sess_journal_config *cfg)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    size_t max_s = st->cfg.max_sessions, max_b = st->cfg.max_cache_bytes;
    bool over_s = max_s && ss.sessions > max_s, over_b = max_b && ss.bytes > max_b;
    if (!over_s && !over_b)
        return;
    char what[160] = "";
    int at = over_s ? snprintf(what, sizeof what, "%zu sessions of at most %zu",
                               ss.sessions, max_s) : 0;
    if (over_b)
        snprintf(what + at, sizeof what - (size_t)at, "%s%zu cache bytes of at most %zu",
                 at ? ", " : "", ss.bytes, max_b);
    sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: the restored sessions are "
              "over the cache's limits (%s): every one is kept; %s", what,
              st->cfg.policy == SESS_POLICY_LRU
                  ? "the least recently used are evicted as new sessions and rows need room"
                  : "new sessions and rows are refused until enough are deleted");
}

/* The same of the token limit: the restored sessions whose max_tokens is
 * over cfg.max_tokens (lowered since they were made) are kept whole, and
 * take rows only up to it (sess_max_rows). */
static void warn_over_tokens(struct sess_store *st, const struct sess_journal_config *cfg)
{
    size_t cap = st->cfg.max_tokens, over = 0, most = 0, full = 0;
    if (!cap)
        return;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->n_buckets; i++)
        for (const struct sess *s = st->buckets[i]; s; s = s->hnext) {
            if (s->spec.max_tokens <= cap)
                continue;
            over++;
            most = s->spec.max_tokens > most ? s->spec.max_tokens : most;
            full += kv_held(s->kv) >= cap;
        }
    pthread_mutex_unlock(&st->mu);
    if (!over)
        return;
    sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: restored sessions are over "
              "the token limit (%zu with a max_tokens over %zu rows, the largest %zu; %zu of "
              "them hold %zu rows already): every one is kept and answers as before, but "
              "takes rows only up to %zu, and is not forked or imported here; its export "
              "imports on a replica whose limit allows it", over, cap, most, full, cap, cap);
}

enum core_status sess_store_open_journal(struct sess_store *st,
                                         const struct sess_journal_config *cfg)
{
    if (st->dur || strlen(cfg->dir) >= sizeof st->dur->dir)
        return CORE_EINVAL;
    if (mkdir(cfg->dir, 0700) != 0 && errno != EEXIST) {
        sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: cannot create %s: %s",
                  cfg->dir, strerror(errno));
        return CORE_EIO;
    }
    enum core_status rc = CORE_OK;
    int lock_fd = sess_dirlock_take(cfg, &rc);
    if (rc != CORE_OK)
        return rc;
    struct sess_durable *d = calloc(1, sizeof *d);
    if (!d || pthread_mutex_init(&d->mu, NULL) != 0) {
        free(d);
        if (lock_fd >= 0)
            close(lock_fd);
        return CORE_ENOMEM;
    }
    pthread_cond_init(&d->idle, NULL);
    d->lock_fd = lock_fd;
    snprintf(d->dir, sizeof d->dir, "%s", cfg->dir);
    d->mode = cfg->fsync;
    d->rewrite_min = cfg->rewrite_min_bytes;
    d->log = cfg->log;
    d->log_arg = cfg->log_arg;
    sess_store_restoring(st, true);
    struct sess_replayed rr = {0};
    rc = sess_replay_dir(st, d->dir, d->log, d->log_arg, &rr);
    /* state files of a drain by an older attnd: taken in, then folded into
     * the snapshot below (and removed once it is on disk) */
    size_t found = 0;
    if (rc == CORE_OK &&
        (rc = sess_load_state_files(st, cfg->dir, cfg->log, cfg->log_arg, true, &found)) !=
            CORE_OK)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: the session files of an older "
                  "attnd in %s could not all be read: not starting; they are kept for a "
                  "start once the cause is fixed", d->dir);
    if (rc != CORE_OK) {
        /* a damaged journal not cut back (what this run would write after
         * it would be set aside at the next start), or a file that could
         * not be read now: nothing is written */
        sess_store_restoring(st, false);
        pthread_cond_destroy(&d->idle);
        pthread_mutex_destroy(&d->mu);
        if (d->lock_fd >= 0)
            close(d->lock_fd);
        free(d);
        return rc;
    }
    d->next_lsn = rr.next_lsn;
    d->gen = rr.newest;
    if (found > 0 && !rr.rewrite[0])
        snprintf(rr.rewrite, sizeof rr.rewrite, "session files of an older attnd were "
                 "read");
    sess_store_restoring(st, false);
    warn_over_limits(st, cfg);
    warn_over_tokens(st, cfg);
    st->dur = d;
    if (!rr.rewrite[0] && keep_snapshot(st, d, &rr, rr.rewrite, sizeof rr.rewrite))
        return CORE_OK;
    sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: a new snapshot is written at "
              "start: %s", rr.rewrite);
    if (sess_store_journal_maintain(st, true) == CORE_OK)
        sess_remove_state_files(cfg->dir);
    return CORE_OK;
}

void sess_dur_stats(struct sess_durable *d, struct sess_stats *out)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    out->journal_bytes = d->j ? jnl_size(d->j) : 0;
    out->snapshot_bytes = d->snapshot_bytes;
    out->journal_records = d->records;
    out->journal_failures = d->failures;
    out->journal_lost = d->lost;
    out->snapshots = d->snapshots;
    out->snapshot_failures = d->snapshot_failures;
    pthread_mutex_unlock(&d->mu);
}

void sess_dur_kept(struct sess_durable *d, uint64_t *files, uint64_t *bytes)
{
    *files = *bytes = 0;
    if (d)                          /* d->dir is fixed from its making on */
        sess_state_count_kept(d->dir, files, bytes);
}

void sess_dur_free(struct sess_durable *d)
{
    if (!d)
        return;
    if (d->j) {
        jnl_sync(d->j, NULL);
        jnl_close(d->j);
    }
    pthread_cond_destroy(&d->idle);
    pthread_mutex_destroy(&d->mu);
    if (d->lock_fd >= 0)
        close(d->lock_fd);              /* the directory is free for another */
    free(d);
}
