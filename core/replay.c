/*
 * core/replay.c — reading a state directory back into the session store
 * at start-up (sess_replay_dir, called by core/durable.c, which writes the
 * files; their layout and the records are described there).
 *
 * The newest snapshot is loaded, then every journal of its generation and
 * later is replayed in order: each record is applied to the session it
 * names when its lsn is newer than the session's (core/durable.c says why
 * that is enough). A damaged file is logged with what was kept and
 * dropped, and set aside as NAME.damaged.
 */
#include "store_impl.h"
#include "replay.h"
#include "kv.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where a replay reads and logs. */
struct rdir {
    const char *dir;
    sess_log_fn log;
    void *log_arg;
};

double sess_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sess_state_name(char *out, size_t size, const char *dir, const char *pre,
                     uint64_t gen, const char *suf)
{
    snprintf(out, size, "%s/%s%016" PRIx64 "%s", dir, pre, gen, suf);
}

/* ---- reading records ------------------------------------------------------ */
/* A cursor over one record's payload. */
struct cur {
    const unsigned char *p;
    size_t left;
    bool bad;
};

static void take(struct cur *c, void *out, size_t n)
{
    if (c->bad || n > c->left) {
        c->bad = true;
        memset(out, 0, n);
        return;
    }
    memcpy(out, c->p, n);
    c->p += n;
    c->left -= n;
}

/* The id of a record into id[SESS_ID_MAX]; false when malformed. */
static bool take_id(struct cur *c, char *id)
{
    uint32_t n = 0;
    take(c, &n, 4);
    if (c->bad || n == 0 || n >= SESS_ID_MAX || n > c->left)
        return false;
    take(c, id, n);
    id[n] = '\0';
    return memchr(id, '\0', n) == NULL;
}

/* What a replay has seen. */
struct replay {
    uint64_t applied, skipped, failed, max_lsn;
    struct kv_dedup *dedup;         /* while the snapshot is read: its pages */
};

/* A copy of n bytes at p with the alignment of any element type. */
static void *aligned_copy(const unsigned char *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

static void apply_sess(struct sess_store *st, struct replay *rp, uint64_t lsn,
                       double wall, struct cur *c)
{
    struct sess *s;
    double idle = 0;
    if (sess_decode(c->p, c->left, &s, &idle) != NULL) {
        rp->failed++;
        return;
    }
    if (sess_exists(st, s->id)) {       /* the snapshot already has it */
        sess_destroy(s);
        rp->skipped++;
        return;
    }
    s->jlsn = lsn;
    s->jtouch = wall - idle;            /* wall clock until the replay ends */
    struct kv_cache *kv = s->kv;
    if (sess_link(st, s, 0, NULL) != CORE_OK) {
        sess_destroy(s);
        rp->failed++;
        return;
    }
    /* a fork's rows, whole in the snapshot, share its parent's pages again;
     * s cannot go meanwhile: nothing is evicted or deleted in a replay,
     * which runs before any request */
    kv_dedup_add(rp->dedup, kv);
    rp->applied++;
}

/* Replay a FORK record (the parent's id read): the child forked from the
 * parent as the replay has rebuilt it, unless the child is there already. */
static void apply_fork(struct sess_store *st, struct replay *rp, uint64_t lsn, double wall,
                       struct cur *c, const char *parent)
{
    char id[SESS_ID_MAX];
    uint64_t len = 0;
    if (!take_id(c, id)) {
        c->bad = true;
        return;
    }
    take(c, &len, sizeof len);
    if (c->bad || c->left != 0) {
        c->bad = true;
        return;
    }
    if (sess_exists(st, id)) {          /* the snapshot already has it */
        rp->skipped++;
        return;
    }
    struct sess *p, *f = NULL;
    enum core_status rc = sess_acquire(st, parent, &p);
    if (rc == CORE_OK) {
        if (p->jlsn < lsn && kv_length(p->kv) == len)
            f = sess_fork_unlinked(p, &rc);
        sess_unhold(st, p);
    }
    if (f) {
        memcpy(f->id, id, SESS_ID_MAX);
        f->jlsn = lsn;
        f->jtouch = wall;
        if (sess_link(st, f, 0, NULL) == CORE_OK) {
            rp->applied++;
            return;
        }
        sess_destroy(f);
    }
    rp->failed++;
}

/* Apply one change record to the session it names. */
static void apply_change(struct sess_store *st, struct replay *rp,
                         enum sess_rec type, uint64_t lsn, double wall,
                         struct cur *c, const char *id)
{
    uint64_t sizes[3] = {0};
    if (type == SESS_REC_APPEND) {
        take(c, sizes, sizeof sizes);
        if (c->bad || sizes[1] > c->left || sizes[2] != c->left - sizes[1]) {
            c->bad = true;
            return;
        }
    } else if (type == SESS_REC_TRUNC) {
        take(c, sizes, 8);
    }
    if (c->bad || c->left != (type == SESS_REC_APPEND ? sizes[1] + sizes[2] : 0)) {
        c->bad = true;
        return;
    }
    if (type == SESS_REC_DELETE) {
        if (sess_delete(st, id) == CORE_OK)
            rp->applied++;
        else
            rp->skipped++;
        return;
    }
    struct sess *s;
    if (sess_acquire(st, id, &s) != CORE_OK) {
        rp->skipped++;              /* deleted, evicted or never restored */
        return;
    }
    if (type == SESS_REC_TOUCH) {
        if (wall > s->jtouch)
            s->jtouch = wall;
        rp->applied++;
    } else if (lsn <= s->jlsn) {
        rp->skipped++;
    } else {
        enum core_status rc;
        if (type == SESS_REC_TRUNC) {
            rc = sizes[0] <= SIZE_MAX ? sess_truncate(st, s, (size_t)sizes[0])
                                      : CORE_EINVAL;
        } else {
            const struct attn_shape *sh = &s->spec.shape;
            size_t es = attn_dtype_size(s->spec.params.dtype), kb, vb;
            bool fits = sizes[0] > 0 && sizes[0] <= SIZE_MAX &&
                        core_mul3((size_t)sizes[0], sh->h_kv, sh->d_k * es, &kb) &&
                        core_mul3((size_t)sizes[0], sh->h_kv, sh->d_v * es, &vb) &&
                        kb == sizes[1] && vb == sizes[2];
            void *k = fits ? aligned_copy(c->p, kb) : NULL;
            void *v = fits ? aligned_copy(c->p + kb, vb) : NULL;
            rc = k && v ? sess_append(st, s, k, v, (size_t)sizes[0], -1)
                        : CORE_EINVAL;
            free(k);
            free(v);
        }
        if (rc == CORE_OK) {
            s->jlsn = lsn;
            s->jtouch = wall;
            rp->applied++;
        } else {
            rp->failed++;
        }
    }
    /* the session's clocks are set when the replay ends; no journal yet */
    sess_unhold(st, s);
}

/* Apply one record; false when its payload is malformed (treated as damage). */
static bool apply(struct sess_store *st, struct replay *rp, uint64_t lsn,
                  const void *p, size_t n, bool snapshot)
{
    struct cur c = {.p = p, .left = n};
    uint32_t type = 0;
    double wall = 0;
    take(&c, &type, 4);
    take(&c, &wall, 8);
    if (c.bad || isnan(wall))
        return false;
    if (lsn > rp->max_lsn)
        rp->max_lsn = lsn;
    if (type == SESS_REC_SESS) {
        apply_sess(st, rp, lsn, wall, &c);
        return true;
    }
    char id[SESS_ID_MAX];
    if (snapshot || type < SESS_REC_APPEND || type > SESS_REC_FORK || !take_id(&c, id))
        return false;
    if (type == SESS_REC_FORK)
        apply_fork(st, rp, lsn, wall, &c, id);
    else
        apply_change(st, rp, (enum sess_rec)type, lsn, wall, &c, id);
    return !c.bad;
}

/*
 * Replay one file into the store. false when it was damaged (logged with
 * what was kept and dropped; the caller applies nothing after it).
 */
static bool replay_file(struct sess_store *st, const struct rdir *d,
                        struct replay *rp, const char *path, bool snapshot,
                        uint64_t *dropped)
{
    *dropped = 0;
    struct jnl_reader r;
    enum core_status rc = jnl_read_open(&r, path, snapshot ? JNL_MAGIC_SNAPSHOT
                                                         : JNL_MAGIC_JOURNAL);
    if (rc == CORE_ENOTFOUND)
        return true;
    if (rc != CORE_OK) {
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s unreadable (%s): 0 records "
                  "kept, the file dropped", path, r.why);
        *dropped = 2;
        return false;
    }
    uint64_t lsn;
    const void *p;
    size_t n;
    int got;
    while ((got = jnl_read_next(&r, &lsn, &p, &n)) == 1) {
        if (!apply(st, rp, lsn, p, n, snapshot)) {
            r.kept--;
            r.off -= JNL_FRAME_BYTES + n;
            r.why = "malformed record";
            got = -1;
            break;
        }
    }
    bool ok = got == 0;
    if (ok) {
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: %s: %" PRIu64 " records kept, "
                  "0 dropped", path, r.kept);
    } else {
        uint64_t bytes;
        *dropped = jnl_read_rest(&r, &bytes);
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: %s at byte %zu: %" PRIu64
                  " records kept, %" PRIu64 " dropped (%" PRIu64 " bytes); "
                  "nothing after it is applied", path, r.why, r.off, r.kept,
                  *dropped, bytes);
    }
    jnl_read_close(&r);
    return ok;
}

/* Generations of snapshot.G and journal.G files in dir. */
struct gens {
    uint64_t *journal;
    size_t n_journal;
    uint64_t snapshot;              /* newest; 0 = none */
    uint64_t max;
};

bool sess_state_gen(const char *name, const char *pre, uint64_t *g)
{
    size_t k = strlen(pre);
    if (strncmp(name, pre, k) != 0 || strlen(name) != k + 16)
        return false;
    uint64_t v = 0;
    for (const char *q = name + k; *q; q++) {
        int x = *q >= '0' && *q <= '9' ? *q - '0'
              : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
        if (x < 0)
            return false;
        v = v << 4 | (uint64_t)x;
    }
    *g = v;
    return v > 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool scan_gens(const char *dir, struct gens *g)
{
    memset(g, 0, sizeof *g);
    DIR *dd = opendir(dir);
    if (!dd)
        return false;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(dd)) != NULL) {
        uint64_t v;
        if (sess_state_gen(e->d_name, "snapshot.", &v)) {
            if (v > g->snapshot)
                g->snapshot = v;
        } else if (sess_state_gen(e->d_name, "journal.", &v)) {
            if (g->n_journal == cap) {
                cap = cap ? cap * 2 : 8;
                uint64_t *q = realloc(g->journal, cap * sizeof *q);
                if (!q)
                    break;
                g->journal = q;
            }
            g->journal[g->n_journal++] = v;
        } else {
            continue;
        }
        if (v > g->max)
            g->max = v;
    }
    closedir(dd);
    if (g->n_journal > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(g->journal, g->n_journal, sizeof *g->journal, cmp_u64);
    return true;
}

/* The store's sessions take their idle time from the replayed wall clock. */
static void settle_clocks(struct sess_store *st)
{
    double wall = sess_wall_now();
    pthread_mutex_lock(&st->mu);
    double now = sess_now(st);
    for (struct sess *s = st->lru_head; s; s = s->lru_next) {
        double idle = wall - s->jtouch;
        s->last_used = now - (idle > 0 ? idle : 0);
        s->jtouch = now - SESS_TOUCH_EVERY_S;
    }
    pthread_mutex_unlock(&st->mu);
}

void sess_replay_dir(struct sess_store *st, const char *dir, sess_log_fn log,
                     void *log_arg, uint64_t *next_lsn, uint64_t *newest)
{
    const struct rdir rd = {dir, log, log_arg}, *d = &rd;
    struct gens g;
    char path[1100];
    struct replay rp = {0};
    if (!scan_gens(d->dir, &g))
        return;
    /* A crash leaves at most one torn record at the end of the last
     * journal; any other damage keeps the file, and every file after it,
     * as NAME.damaged (never read again) */
    bool ok = true, keep = false;
    for (size_t i = 0; i <= g.n_journal; i++) {
        bool snap = i == 0;
        uint64_t gen = snap ? g.snapshot : g.journal[i - 1], dropped = 0;
        if (gen == 0 || gen < g.snapshot)
            continue;
        sess_state_name(path, sizeof path, d->dir, snap ? "snapshot." : "journal.",
                        gen, "");
        if (ok) {
            rp.dedup = snap ? kv_dedup_new() : NULL;   /* out of memory: copies */
            ok = replay_file(st, d, &rp, path, snap, &dropped);
            kv_dedup_free(rp.dedup);
            rp.dedup = NULL;
            keep = !ok && (snap || dropped > 1 || i < g.n_journal);
        }
        if (!ok && keep) {
            char kept[1200];
            snprintf(kept, sizeof kept, "%s.damaged", path);
            rename(path, kept);
        }
    }
    free(g.journal);
    settle_clocks(st);
    size_t expired = sess_store_sweep(st);
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    if (g.max > 0)
        sess_logf(d->log, d->log_arg, rp.failed ? SESS_LOG_WARN : SESS_LOG_INFO,
                  "journal: replayed %" PRIu64 " changes "
                  "(%" PRIu64 " already held, %" PRIu64 " failed); %zu "
                  "sessions, %zu expired meanwhile", rp.applied, rp.skipped,
                  rp.failed, ss.sessions, expired);
    *next_lsn = rp.max_lsn + 1;
    *newest = g.max;
}
