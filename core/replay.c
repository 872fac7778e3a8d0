/*
 * core/replay.c — reading a state directory back into the session store
 * at start-up (sess_replay_dir, called by core/durable.c, which writes the
 * files; their layout and the records are described there). Each record
 * read is applied by core/replay_apply.c.
 *
 * The newest snapshot is loaded (or, when it is damaged, an older one the
 * crash of a snapshot's clean-up left with every journal after it:
 * fall_back), then every journal of its generation and
 * later is replayed in order: each record is applied to the session it
 * names when its lsn is newer than the session's (core/durable.c says why
 * that is enough). Damage is logged with what was kept and dropped (see
 * sess_replay_dir for what goes on being read), and every damaged file is
 * kept (an earlier one is never replaced) with a warn line saying so and
 * why: a copy, NAME.copy, when the replay used some of it, the file itself,
 * NAME.setaside, when nothing of it was applied. A
 * damaged journal is cut back to the records before its damage, which the
 * journals written from now on build on, copy or no copy for want of room
 * (the files are handled in core/replay_files.c). A read that fails with
 * an I/O error (EIO) is damage at that byte. A file that cannot be read
 * now (opened or read, sess_state_error_transient), memory running short
 * while a session is rebuilt, or a copy that cannot be made for a reason
 * that says nothing of the room for it, says nothing of the files: the
 * start fails then rather than go on without them. Last it says
 * whether the store may go on from the newest snapshot as it is, without
 * writing a new one (struct sess_replayed): only when nothing of this was
 * needed and the journal after the snapshot is empty.
 */
#include "replay_impl.h"
#include "replay.h"
#include "replay_files.h"
#include "kv.h"
#include "persist_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double sess_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* How reading a file ended. */
enum file_end {
    FILE_WHOLE,         /* every record read (or no such file) */
    FILE_DAMAGED,       /* a bad record of any kind, or no header (a torn
                           last record cannot be told from damage in the
                           middle by its length); of a snapshot: any record
                           dropped, or (begun by BEGIN) its END record
                           missing or wrong */
    FILE_UNREAD,        /* not read, for a reason that says nothing of it
                           (sess_state_error_transient), or memory ran short
                           rebuilding a session of it: the start fails */
};

/* Memory ran short rebuilding a session from the record at byte at of
 * path (rp->nomem): the start fails as for a file that cannot be read now
 * (sess_state_error_transient), and one with memory to spare restores it. */
static enum file_end short_of_memory(const struct rdir *d, const struct replay *rp,
                                     const char *path, size_t at)
{
    const char *q = rp->nomem_id[0] ? "\"" : "";
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: out of memory rebuilding "
              "the session %s%s%s from its record at byte %zu: not starting; nothing in "
              "the state directory was changed", path, q,
              rp->nomem_id[0] ? rp->nomem_id : "(its id unreadable)", q, at);
    return FILE_UNREAD;
}

/* A read of path failed for a reason that says nothing of it
 * (sess_state_error_transient: r->err): the start fails, as for a file
 * that cannot be opened now. */
static enum file_end unreadable_now(const struct rdir *d, const struct jnl_reader *r,
                                    const char *path)
{
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s cannot be read at byte %zu "
              "(%s): not starting; nothing in the state directory was changed", path,
              r->err_at, r->why);
    return FILE_UNREAD;
}

/* Log a dropped snapshot record (at byte at, p[n] its untrusted payload). */
static void log_lost_record(const struct rdir *d, const char *path, const char *why,
                            size_t at, const unsigned char *p, size_t n)
{
    char id[SESS_ID_MAX];
    bool named = n > 12 && sess_encoded_id(p + 12, n - 12, id);
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: %s at byte %zu: the "
              "session %s%s%s dropped, the records after it read on", path, why, at,
              named ? "\"" : "", named ? id : "(its id unreadable)", named ? "\"" : "");
}

/*
 * More sessions that a span of a snapshot skipped over may have held
 * (p[n] the damaged record's untrusted payload): its length is only as
 * good as the rest of the record, and may reach over the records after it
 * to a later one that passes its checksum. Each session encoding begins
 * with the persist magic; one past the record's own is logged with the id
 * after it. How many were found.
 */
static uint64_t log_spanned(const struct rdir *d, const char *path, size_t at,
                            const unsigned char *p, size_t n)
{
    static const char magic[] = PERSIST_MAGIC;
    uint64_t found = 0;
    for (size_t i = 13; n >= 8 && i <= n - 8; i++) {
        if (memcmp(p + i, magic, 8) != 0)
            continue;
        char id[SESS_ID_MAX];
        bool named = sess_encoded_id(p + i, n - i, id);
        found++;
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: the record at byte %zu "
                  "spans another session's header at byte %zu: the session %s%s%s is "
                  "dropped with it", path, at, at + 12 + i, named ? "\"" : "",
                  named ? id : "(its id unreadable)", named ? "\"" : "");
    }
    return found;
}

/* Whether p[n] (of lsn 0) is a snapshot's end record (SESS_REC_END), with
 * the count of records it names into *count. */
static bool end_record(uint64_t lsn, const void *p, size_t n, uint64_t *count)
{
    uint32_t type;
    if (lsn != 0 || n != SESS_REC_END_BYTES)
        return false;
    memcpy(&type, p, 4);
    memcpy(count, (const unsigned char *)p + 12, 8);
    return type == SESS_REC_END;
}

/* Whether p[n] (of lsn 0) is a snapshot's begin record (SESS_REC_BEGIN). */
static bool begin_record(uint64_t lsn, const void *p, size_t n)
{
    uint32_t type;
    if (lsn != 0 || n != SESS_REC_BEGIN_BYTES)
        return false;
    memcpy(&type, p, 4);
    return type == SESS_REC_BEGIN;
}

/* Why a snapshot read to its end is not whole, into why[size] ("" when it
 * is): begun by BEGIN, its END record is missing (the file was cut,
 * perhaps between two records); or its END names another count of records
 * than were met, or is not its last. A snapshot with neither (an older
 * attnd's) is whole when nothing in it was dropped. */
static void not_whole(char *why, size_t size, const struct jnl_reader *r, bool begun,
                      bool ended, uint64_t named, uint64_t frames)
{
    why[0] = '\0';
    if (!begun && !ended)
        return;                     /* written before BEGIN and END */
    if (!ended)
        snprintf(why, size, "no end record after its %" PRIu64 " records: it was cut "
                 "short at byte %zu, and the sessions after that are lost", frames, r->size);
    else if (r->off != r->size)
        snprintf(why, size, "%zu bytes after its end record at byte %zu, not read",
                 r->size - r->off, r->off - JNL_FRAME_BYTES - SESS_REC_END_BYTES);
    else if (named != frames)
        snprintf(why, size, "its end record names %" PRIu64 " records, %" PRIu64 " were "
                 "found", named, frames);
}

/*
 * Read a snapshot's records, each a whole session on its own: a damaged one
 * is dropped and the rest read on while the framing holds. A read that
 * fails with an error that says something of the file (EIO: the device
 * cannot read it) ends the snapshot there, as lost framing does: the
 * records after the unreadable bytes could be found again only by
 * searching for a length whose record's checksum holds, which is not
 * done, so the sessions from there on are lost (and the log says so).
 * A snapshot begun by BEGIN ends with END, naming how many records came
 * between them: without it, or with another count, it is damaged as well
 * (the sessions past a cut between two records are lost); one without
 * BEGIN is an older attnd's, read as before. None is read past its END.
 */
static enum file_end read_snapshot(struct sess_store *st, const struct rdir *d,
                                   struct replay *rp, struct jnl_reader *r,
                                   const char *path)
{
    uint64_t lsn, lost = 0, bytes = 0, frames = 0, named = 0;
    bool begun = false, ended = false;
    const void *p;
    size_t n, at;
    int got;
    for (;;) {
        while (!ended && (got = jnl_read_next(r, &lsn, &p, &n)) == 1) {
            if (!begun && frames == 0 && lost == 0 && begin_record(lsn, p, n)) {
                r->kept--;          /* the first record: not a session */
                begun = true;
                continue;
            }
            if (end_record(lsn, p, n, &named)) {
                r->kept--;          /* not a session */
                ended = true;
                break;
            }
            frames++;
            uint64_t failed = rp->failed;
            bool ok = sess_replay_apply(st, rp, lsn, p, n, true);
            if (rp->nomem)
                return short_of_memory(d, rp, path, r->off - JNL_FRAME_BYTES - n);
            if (ok && rp->failed == failed)
                continue;
            r->kept--;              /* whole but unusable: that session only */
            lost++;
            bytes += JNL_FRAME_BYTES + n;
            log_lost_record(d, path, "unreadable record", r->off - JNL_FRAME_BYTES - n,
                            p, n);
        }
        if (ended) {
            got = 0;
            break;
        }
        if (got == 0 || !jnl_read_skip(r, &p, &n, &at))
            break;
        frames++;
        lost++;
        bytes += JNL_FRAME_BYTES + n;
        char why[80];
        snprintf(why, sizeof why, "checksum mismatch (%zu bytes skipped)",
                 (size_t)JNL_FRAME_BYTES + n);
        log_lost_record(d, path, why, at, p, n);
        lost += log_spanned(d, path, at, p, n);
    }
    if (got < 0 && r->err && sess_state_error_transient(r->err))
        return unreadable_now(d, r, path);
    rp->snapshot_begun = begun;
    char unended[200] = "";
    if (got == 0)
        not_whole(unended, sizeof unended, r, begun, ended, named, frames);
    if (got == 0 && lost == 0 && !unended[0]) {
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: %s: %" PRIu64 " records "
                  "kept, 0 dropped", path, r->kept);
        return FILE_WHOLE;
    }
    char tail[300] = "", dropped[40] = "";
    if (bytes > 0)
        snprintf(dropped, sizeof dropped, " (%" PRIu64 " bytes)", bytes);
    if (got < 0 && r->err)
        snprintf(tail, sizeof tail, ", and the %zu bytes from byte %zu on, where a read "
                 "failed (%s at byte %zu): the records after it cannot be found without "
                 "reading it", r->size - r->off, r->off, r->why, r->err_at);
    else if (got < 0)
        snprintf(tail, sizeof tail, ", and the %zu bytes from byte %zu on, where the "
                 "framing is lost (%s)", r->size - r->off, r->off, r->why);
    else if (unended[0])
        snprintf(tail, sizeof tail, "; it is not whole: %s", unended);
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: %" PRIu64 " records kept, "
              "%" PRIu64 " dropped%s%s; the sessions they held are lost, the journals are "
              "replayed onto the others", path, r->kept, lost, dropped, tail);
    return FILE_DAMAGED;
}

/*
 * Replay a journal's records in order, up to its first bad one: a record
 * cut short, failing its checksum or malformed, or one a read fails in
 * with an error that says something of the file (EIO), is damage there,
 * and nothing after it is applied; *good: the bytes before it.
 */
static enum file_end read_journal(struct sess_store *st, const struct rdir *d,
                                  struct replay *rp, struct jnl_reader *r,
                                  const char *path, size_t *good)
{
    uint64_t lsn;
    const void *p;
    size_t n;
    int got;
    while ((got = jnl_read_next(r, &lsn, &p, &n)) == 1) {
        bool ok = sess_replay_apply(st, rp, lsn, p, n, false);
        if (rp->nomem)
            return short_of_memory(d, rp, path, r->off - JNL_FRAME_BYTES - n);
        if (!ok) {
            r->kept--;
            r->off -= JNL_FRAME_BYTES + n;
            r->why = "malformed record";
            got = -1;
            break;
        }
    }
    if (got < 0 && r->err && sess_state_error_transient(r->err))
        return unreadable_now(d, r, path);
    *good = r->off;
    rp->journal_records += r->kept;
    if (got == 0) {
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: %s: %" PRIu64 " records kept, "
                  "0 dropped", path, r->kept);
        return FILE_WHOLE;
    }
    char why[160];
    if (r->err)
        snprintf(why, sizeof why, "a read failed (%s at byte %zu) in the record", r->why,
                 r->err_at);
    else
        snprintf(why, sizeof why, "%s", r->why);
    uint64_t bytes, dropped = jnl_read_rest(r, &bytes);
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: %s at byte %zu: %" PRIu64
              " records kept, %" PRIu64 " dropped (%" PRIu64 " bytes); nothing after "
              "it is applied", path, why, r->off, r->kept, dropped, bytes);
    return FILE_DAMAGED;
}

/*
 * Replay one file, of generation gen by its name, into the store, logging
 * what was kept and dropped (a journal stops at its first bad record: what
 * follows it is not applied). A header of another generation is a bad
 * header: the file was copied or renamed from elsewhere, and its lsns
 * belong to another history.
 */
static enum file_end replay_file(struct sess_store *st, const struct rdir *d,
                                 struct replay *rp, const char *path, uint64_t gen,
                                 bool snapshot, size_t *good)
{
    struct jnl_reader r;
    *good = 0;
    enum core_status rc = jnl_read_open(&r, path, snapshot ? JNL_MAGIC_SNAPSHOT
                                                         : JNL_MAGIC_JOURNAL);
    if (rc == CORE_ENOTFOUND)
        return FILE_WHOLE;
    /* any other error is damage, EIO above all: the device could not read
     * the file, and a start refused until someone repairs it would hold
     * back every session the other files keep (the file itself is kept) */
    if (rc == CORE_EIO && sess_state_error_transient(r.err)) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s cannot be read (%s): "
                  "not starting; nothing in the state directory was changed", path, r.why);
        return FILE_UNREAD;
    }
    if (rc != CORE_OK) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s unreadable (%s): 0 records "
                  "kept", path, r.why);
        return FILE_DAMAGED;
    }
    if (r.gen != gen) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s unreadable (its header "
                  "says generation %" PRIu64 ", its name %" PRIu64 ": copied or renamed "
                  "from another file): 0 records kept", path, r.gen, gen);
        jnl_read_close(&r);
        return FILE_DAMAGED;
    }
    if (snapshot)
        rp->snapshot_bytes = r.size;
    enum file_end e = snapshot ? read_snapshot(st, d, rp, &r, path)
                               : read_journal(st, d, rp, &r, path, good);
    jnl_read_close(&r);
    return e;
}

/* A last use this far after the wall clock's present means the clock went
 * back since it was written (more than a slewing NTP moves it). */
#define FUTURE_USE_S 1.0

/* A snapshot lists its sessions most recently used first, and the replay
 * links each at the head of the LRU list: turned around, the list is in
 * the snapshot's order, and eviction takes the least recently used first
 * (sessions without a time to live record no idle time: this order is
 * all there is to know of their use). The journals' creates are linked at
 * the head after them, as they were made. */
static void reverse_lru(struct sess_store *st)
{
    pthread_mutex_lock(&st->mu);
    struct sess *s = st->lru_head;
    st->lru_tail = s;
    while (s) {
        struct sess *next = s->lru_next;
        s->lru_next = s->lru_prev;
        s->lru_prev = next;
        st->lru_head = s;
        s = next;
    }
    pthread_mutex_unlock(&st->mu);
}

/* A journal's whole-session records (a keyed fork, a fork written while a
 * snapshot was, an import) rebuilt their sessions with pages of their own:
 * every session's whole pages are shared again where their bytes are equal,
 * as the snapshot's are while it is read, so a fork counts its parent's
 * pages once after a crash too. The page kept is the first seen of its
 * bytes, so the caches that share pages already (fork records) go first:
 * a copy seen first would take their forks away from a parent whose page
 * is partly used (not looked at), leaving it a page of its own that it
 * shared before. No request runs yet: no cache changes during the pass
 * (kv_dedup_add's rule). */
static void share_again(struct sess_store *st)
{
    size_t n;
    struct sess **all = sess_hold_all(st, &n);
    struct kv_dedup *d = all ? kv_dedup_new() : NULL;     /* out of memory: copies */
    for (int pass = 0; d && pass < 2; pass++)     /* those that share pages first */
        for (size_t i = 0; i < n; i++) {
            size_t shared;
            kv_bytes_split(all[i]->kv, NULL, &shared);
            if ((shared > 0) == (pass == 0))
                kv_dedup_add(d, all[i]->kv);
        }
    kv_dedup_free(d);
    for (size_t i = 0; all && i < n; i++) {
        pthread_mutex_lock(&all[i]->mu);
        sess_unhold(st, all[i]);
    }
    free(all);
}

/* The store's sessions take their idle time from the replayed wall clock;
 * the count of sessions last used in the wall clock's future (the clock
 * went back: their idle time counts from now, and the snapshot must be
 * written again so that later starts do not count from theirs). */
static size_t settle_clocks(struct sess_store *st)
{
    double wall = sess_wall_now();
    size_t future = 0;
    pthread_mutex_lock(&st->mu);
    double now = sess_now(st);
    for (struct sess *s = st->lru_head; s; s = s->lru_next) {
        double idle = wall - s->jtouch;
        future += idle < -FUTURE_USE_S;
        s->last_used = now - (idle > 0 ? idle : 0);
        s->jtouch = now - SESS_TOUCH_EVERY_S;
    }
    pthread_mutex_unlock(&st->mu);
    return future;
}

/* Journal records of sessions not restored: the entries a DELETE did not
 * explain go into *records and *sessions, the rest count as held. */
static void count_absent(struct replay *rp, uint64_t *records, uint64_t *sessions)
{
    *records = rp->absent_untracked;
    *sessions = 0;
    for (size_t i = 0; i < rp->n_slots; i++) {
        const struct absent *a = &rp->absent[i];
        if (!a->id[0])
            continue;
        if (a->deleted) {
            rp->skipped += a->records;
        } else {
            *records += a->records;
            (*sessions)++;
        }
    }
}

/* Keep a copy of the file at path, which a new snapshot removes (why says
 * why); 0, or when no copy could be kept for a reason that says nothing of
 * the file or the room for it, that errno, logged: the start fails then,
 * rather than remove the file without a copy, and one once the cause is
 * fixed keeps it. */
static int kept_or_not(const struct rdir *d, const char *path, const char *why)
{
    int e = sess_state_keep_copy(d, path, why, true);
    if (e == 0 || !sess_state_error_transient(e))
        return 0;
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: no copy could be kept (%s): "
              "not starting, so that it is not removed without one; a start once the "
              "cause is fixed keeps it", path, strerror(e));
    return e;
}

/* Why the journals written from now on cannot simply follow snapshot
 * g->snapshot (struct sess_replayed says when they can), into why[size];
 * "" when they can. damage: a file was damaged, missing or set aside. */
static void rewrite_why(char *why, size_t size, const struct gens *g,
                        const struct replay *rp, bool damage, size_t expired,
                        size_t future)
{
    uint64_t unused = rp->failed + rp->skipped;
    why[0] = '\0';
    if (!g->snapshot)
        snprintf(why, size, "there is no snapshot yet");
    else if (damage)
        snprintf(why, size, "files were damaged or missing (logged above)");
    else if (rp->journal_records > 0)
        snprintf(why, size, "records in the journal since snapshot.%016" PRIx64 ": %"
                 PRIu64, g->snapshot, rp->journal_records);
    else if (g->max != g->snapshot)
        snprintf(why, size, "journal.%016" PRIx64 " follows snapshot.%016" PRIx64 " (a "
                 "snapshot was begun and not finished)", g->max, g->snapshot);
    else if (unused > 0)
        snprintf(why, size, "records of snapshot.%016" PRIx64 " not applied: %" PRIu64,
                 g->snapshot, unused);
    else if (rp->old_format > 0)
        snprintf(why, size, "sessions of snapshot.%016" PRIx64 " in an encoding older "
                 "than version %u: %" PRIu64, g->snapshot, PERSIST_VERSION_NO_KEY,
                 rp->old_format);
    else if (!rp->snapshot_begun)
        snprintf(why, size, "snapshot.%016" PRIx64 " has no begin and end records (an "
                 "older attnd wrote it)", g->snapshot);
    else if (expired > 0)
        snprintf(why, size, "sessions expired since snapshot.%016" PRIx64 " was "
                 "written: %zu", g->snapshot, expired);
    else if (future > 0)
        snprintf(why, size, "sessions last used after the present by the wall clock "
                 "(it went back): %zu", future);
}

/* Read snapshot.gen into the store (empty), as the base the journals are
 * replayed onto. */
static enum file_end read_base(struct sess_store *st, const struct rdir *d,
                               struct replay *rp, uint64_t gen)
{
    char path[1100];
    size_t good;
    sess_state_name(path, sizeof path, d->dir, "snapshot.", gen, "");
    rp->dedup = kv_dedup_new();         /* out of memory: copies */
    enum file_end e = replay_file(st, d, rp, path, gen, true, &good);
    kv_dedup_free(rp->dedup);
    rp->dedup = NULL;
    reverse_lru(st);
    return e;
}

/* Empty the store (restoring, no journal: nothing is written) and rp, for
 * another base; false when memory is short (nothing was removed). */
static bool start_over(struct sess_store *st, struct replay *rp)
{
    size_t n;
    struct sess **all = sess_hold_all(st, &n);
    if (!all)
        return false;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&all[i]->mu);
        sess_delete_held(st, all[i]);
    }
    free(all);
    free(rp->absent);
    *rp = (struct replay){.base_whole = true};
    return true;
}

/* How the base was chosen when the newest snapshot is damaged. */
struct base_choice {
    uint64_t passed;        /* the damaged newest snapshot, read past (0: none) */
    bool keep_older;        /* files older than it, not read: set aside */
};

/*
 * The newest snapshot S (g->snapshot) is damaged (e the way its reading
 * ended). Files older than it are leftovers of the snapshot that replaced
 * them (a crash between its rename and their removal): when they are an
 * older snapshot O and every journal from O to S, they are read instead,
 * if O reads whole: O and the journals from O on are the whole history
 * since generation O began, as after a snapshot S that failed (which the
 * replay's lsn rules take: core/durable.c), and S holds nothing they do
 * not. g->snapshot is then O, and S is set aside (c->passed). Otherwise
 * the replay goes on from what S held, and the older files, never read,
 * are set aside rather than removed with the new snapshot (c->keep_older).
 */
static enum file_end fall_back(struct sess_store *st, const struct rdir *d,
                               struct replay *rp, struct gens *g, enum file_end e,
                               struct base_choice *c)
{
    uint64_t s = g->snapshot, o = g->older;
    if (e != FILE_DAMAGED)
        return e;
    c->keep_older = o || (g->n_journal > 0 && g->journal[0] < s);
    if (!o || !sess_state_journals_from(g, o, s) || !start_over(st, rp))
        return e;
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: snapshot.%016" PRIx64 " is "
              "damaged, and snapshot.%016" PRIx64 " with every journal after it is still "
              "there: those are read instead", s, o);
    e = read_base(st, d, rp, o);
    if (e == FILE_WHOLE) {
        c->passed = s;
        c->keep_older = false;
        g->snapshot = o;
        return e;
    }
    if (e == FILE_UNREAD)
        return e;
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: snapshot.%016" PRIx64 " is damaged "
              "too: snapshot.%016" PRIx64 " is read again", o, s);
    if (!start_over(st, rp)) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: out of memory starting the "
                  "replay again: not starting; nothing in the state directory was changed");
        return FILE_UNREAD;
    }
    return read_base(st, d, rp, s);
}

/*
 * A snapshot holds whole sessions, each on its own, so a damaged or missing
 * one loses its sessions but not the journals' changes to the others: they
 * are replayed onto what it gave, and their records of sessions it lost are
 * counted and dropped. Journals are one ordered history: replay stops at a
 * journal's first bad record of any kind (a last record cut short by a
 * crash cannot be told from damage in the middle by its length), and later
 * journals, which may build on what was lost, are set aside. The journal
 * is then cut back to its records before the damage, before anything new
 * is written, so the journals this run writes follow a clean one. Files
 * older than a damaged newest snapshot are read instead of it or set
 * aside (fall_back), never left for the new snapshot to remove. Whether
 * the newest snapshot can be kept is decided last (rewrite_why).
 */
enum core_status sess_replay_dir(struct sess_store *st, const char *dir, sess_log_fn log,
                                 void *log_arg, struct sess_replayed *out)
{
    const struct rdir rd = {dir, log, log_arg}, *d = &rd;
    struct gens g;
    char path[1100], why[200];
    struct replay rp = {.base_whole = true};
    out->snapshot_bytes = 0;
    int err = sess_state_scan(d->dir, &g);
    if (err != 0) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s cannot be listed (%s): "
                  "not starting", d->dir, strerror(err));
        return CORE_ESTORAGE;
    }
    size_t good;
    bool uncut = false;             /* a damaged journal not cut back */
    bool damage = false;            /* a file damaged, missing or set aside */
    enum file_end base = FILE_WHOLE;
    struct base_choice choice = {0};
    if (g.snapshot) {
        base = fall_back(st, d, &rp, &g, read_base(st, d, &rp, g.snapshot), &choice);
        rp.base_whole = base == FILE_WHOLE;
        damage = base != FILE_WHOLE || choice.passed;
    }
    /* the journals from the snapshot's generation on, one after the other
     * (generation 1 began empty: it needs no snapshot) */
    uint64_t want = g.snapshot ? g.snapshot : 1;
    bool stop = false, *dropping = calloc(g.n_journal + 1, sizeof *dropping);
    if (!dropping && base != FILE_UNREAD) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: out of memory before the "
                  "journals are replayed: not starting; nothing in the state directory "
                  "was changed");
        base = FILE_UNREAD;
    }
    for (size_t i = 0; base != FILE_UNREAD && i < g.n_journal; i++) {
        uint64_t gen = g.journal[i];
        if (gen < g.snapshot)
            continue;
        sess_state_name(path, sizeof path, d->dir, "journal.", gen, "");
        if (!stop && gen != want && !g.snapshot && want == 1) {
            rp.base_whole = false;
            damage = true;
            sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: snapshot.%016" PRIx64
                      " is missing (%s begins generation %" PRIu64 " with it): the sessions "
                      "it held are lost, and the journal's records of them dropped",
                      gen, path, gen);
        } else if (!stop && gen != want && !sess_state_set_aside_before(d, want, gen)) {
            stop = true;
            snprintf(why, sizeof why, "journal.%016" PRIx64 " before it is missing, so its "
                     "changes cannot be applied in order", want);
        }
        if (stop) {
            damage = true;
            sess_state_set_aside(d, path, why);
            continue;
        }
        rp.file_absent = 0;
        enum file_end e = replay_file(st, d, &rp, path, gen, false, &good);
        if (e == FILE_UNREAD) {
            base = FILE_UNREAD;     /* nothing is changed: the start fails */
            break;
        }
        dropping[i] = rp.file_absent > 0;
        want = gen + 1;
        if (e == FILE_DAMAGED) {
            stop = true;
            damage = true;
            enum state_cut cut = STATE_CUT_DONE;
            if (good == 0)              /* no header: nothing of it applied */
                sess_state_set_aside(d, path, "unreadable; nothing of it is applied");
            else
                cut = sess_state_cut_back(d, path, good, "damaged; nothing after its bad "
                                          "record is applied");
            if (cut == STATE_CUT_NOT_NOW) {
                base = FILE_UNREAD;     /* nothing is changed: the start fails */
                break;
            }
            uncut = cut == STATE_CUT_FAILED;
            snprintf(why, sizeof why, "it follows the damaged journal.%016" PRIx64
                     ", so its changes cannot be applied in order", gen);
        }
    }
    if (base == FILE_UNREAD) {
        free(dropping);
        free(rp.absent);
        free(g.journal);
        return CORE_ESTORAGE;
    }
    int nocopy = 0;                 /* a copy not kept, for a reason that says
                                       nothing of the file (the start fails) */
    if (base == FILE_DAMAGED) {
        sess_state_name(path, sizeof path, d->dir, "snapshot.", g.snapshot, "");
        nocopy = kept_or_not(d, path, "damaged; the sessions it still held are restored");
    }
    if (!stop && g.snapshot && want == g.snapshot) {
        damage = true;
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: journal.%016" PRIx64 " is "
                  "missing: the changes made since snapshot.%016" PRIx64 " are lost",
                  g.snapshot, g.snapshot);
    }
    uint64_t lost, lost_sessions;
    count_absent(&rp, &lost, &lost_sessions);
    damage = damage || lost > 0 || lost_sessions > 0;
    /* a journal holding the only record of changes to sessions the snapshot
     * lost is kept for a look, as the snapshot is */
    for (size_t i = 0; lost > 0 && !nocopy && i < g.n_journal; i++) {
        if (!dropping[i])
            continue;
        sess_state_name(path, sizeof path, d->dir, "journal.", g.journal[i], "");
        nocopy = kept_or_not(d, path, "it holds changes to sessions not restored");
    }
    free(dropping);
    free(rp.absent);
    if (nocopy) {
        free(g.journal);
        return CORE_ESTORAGE;
    }
    if (choice.passed) {
        sess_state_name(path, sizeof path, d->dir, "snapshot.", choice.passed, "");
        snprintf(why, sizeof why, "damaged; snapshot.%016" PRIx64 " and the journals after "
                 "it, which hold all it held, were read instead", g.snapshot);
        sess_state_set_aside(d, path, why);
    } else if (choice.keep_older) {
        snprintf(why, sizeof why, "older than the damaged snapshot.%016" PRIx64 " and not "
                 "used (not a whole snapshot with every journal after it): kept, not removed",
                 g.snapshot);
        sess_state_set_aside_older(d, g.snapshot, why);
    }
    free(g.journal);
    sess_state_log_kept(d);
    if (rp.whole_pages)
        share_again(st);
    size_t future = settle_clocks(st);
    size_t expired = sess_store_sweep(st);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    if (g.max > 0)
        sess_logf(d->log, d->log_arg, rp.failed || lost ? SESS_LOG_WARN : SESS_LOG_INFO,
                  "journal: replayed %" PRIu64 " changes "
                  "(%" PRIu64 " already held, %" PRIu64 " failed, %" PRIu64 " for %" PRIu64
                  " sessions not restored); %zu sessions, %zu expired meanwhile",
                  rp.applied, rp.skipped, rp.failed, lost, lost_sessions, ss.sessions,
                  expired);
    rewrite_why(out->rewrite, sizeof out->rewrite, &g, &rp, damage, expired, future);
    if (!out->rewrite[0])
        out->snapshot_bytes = rp.snapshot_bytes;
    out->next_lsn = rp.max_lsn + 1;
    out->newest = g.max;
    return uncut ? CORE_EIO : CORE_OK;
}
