/*
 * core/replay_apply.c — applying one record of a state file to the session
 * store at start-up (sess_replay_apply, for core/replay.c, which reads the
 * files): a whole session, or a change to the one it names when its lsn is
 * newer than the session's (core/durable.c describes the records and says
 * why that is enough), with the records of sessions not held counted.
 */
#include "replay_impl.h"
#include "replay.h"
#include "kv.h"
#include "persist_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static size_t id_hash(const char *id)
{
    return (size_t)sess_hash_text(SESS_HASH_SEED, id);
}

/* The entry of id (added when add and missing); NULL when not there, or
 * when memory runs out. */
static struct absent *absent_at(struct replay *rp, const char *id, bool add)
{
    if (add && (rp->n_absent + 1) * 2 > rp->n_slots) {
        size_t n = rp->n_slots ? rp->n_slots * 2 : 64;
        struct absent *a = calloc(n, sizeof *a);
        if (!a)
            return NULL;
        for (size_t i = 0; i < rp->n_slots; i++) {
            if (!rp->absent[i].id[0])
                continue;
            size_t k = id_hash(rp->absent[i].id) & (n - 1);
            while (a[k].id[0])
                k = (k + 1) & (n - 1);
            a[k] = rp->absent[i];
        }
        free(rp->absent);
        rp->absent = a;
        rp->n_slots = n;
    }
    if (!rp->n_slots)
        return NULL;
    size_t k = id_hash(id) & (rp->n_slots - 1);
    for (; rp->absent[k].id[0]; k = (k + 1) & (rp->n_slots - 1))
        if (strcmp(rp->absent[k].id, id) == 0)
            return &rp->absent[k];
    if (!add)
        return NULL;
    snprintf(rp->absent[k].id, SESS_ID_MAX, "%s", id);
    rp->n_absent++;
    return &rp->absent[k];
}

/* A record of session id, which the store does not hold. With every
 * session of the snapshot restored it was deleted, evicted or expired
 * (its record is already held); otherwise it may be one the snapshot lost,
 * counted as such unless a later DELETE says it went anyway. */
static void note_absent(struct replay *rp, const char *id)
{
    if (rp->base_whole) {
        rp->skipped++;
        return;
    }
    rp->file_absent++;
    struct absent *a = absent_at(rp, id, true);
    if (a)
        a->records++;
    else
        rp->absent_untracked++;
}

/* A DELETE of session id, which the store does not hold. */
static void note_deleted(struct replay *rp, const char *id)
{
    rp->skipped++;
    struct absent *a = rp->base_whole ? NULL : absent_at(rp, id, false);
    if (a)
        a->deleted = true;
}

/* Whether rc says memory ran short rebuilding session id (NULL: its id
 * unread), noted in rp: that says nothing of the record, which a start
 * with memory to spare applies, so the replay stops there (it is not
 * counted as failed, and the session is not dropped as damaged). */
static bool note_nomem(struct replay *rp, enum core_status rc, const char *id)
{
    if (rc != CORE_ENOMEM)
        return false;
    rp->nomem = true;
    snprintf(rp->nomem_id, sizeof rp->nomem_id, "%s", id ? id : "");
    return true;
}

/* A copy of n bytes at p with the alignment of any element type. */
static void *aligned_copy(const unsigned char *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

/* Whether the session s->id is held already with a change as new as lsn
 * (the snapshot holds it, and this record with it): false, with the one
 * held deleted, when a journal's whole-session record is newer than it
 * (a v2 sequence_start that replaced it, core/store_put.c; or a session
 * made again under its name after an eviction whose record was lost). */
static bool held_already(struct sess_store *st, const struct sess *s, uint64_t lsn,
                         bool snapshot)
{
    struct sess *old;
    if (snapshot)                       /* one record a session: the first stands */
        return sess_exists(st, s->id);
    if (sess_acquire(st, s->id, &old) != CORE_OK)
        return false;
    if (old->jlsn >= lsn) {
        sess_unhold(st, old);
        return true;
    }
    sess_delete_held(st, old);          /* no journal yet: nothing written */
    return false;
}

static void apply_sess(struct sess_store *st, struct replay *rp, uint64_t lsn,
                       double wall, struct cur *c, bool snapshot)
{
    struct sess *s;
    double idle = 0;
    uint32_t version;
    const char *why;
    enum core_status rc = sess_decode(c->p, c->left, &s, &idle, &version, &why);
    if (rc != CORE_OK) {
        char id[SESS_ID_MAX];
        bool named = rc == CORE_ENOMEM && sess_encoded_id(c->p, c->left, id);
        if (!note_nomem(rp, rc, named ? id : NULL))
            rp->failed++;
        return;
    }
    if (held_already(st, s, lsn, snapshot)) {
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
    if (!snapshot && kv_length(kv) >= KV_PAGE_ROWS)
        rp->whole_pages = true;
    rp->applied++;
    if (version < PERSIST_VERSION_NO_KEY)
        rp->old_format++;
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
    bool as_then = false;               /* the parent as it was at the fork */
    enum core_status rc = sess_acquire(st, parent, &p);
    if (rc == CORE_OK) {
        as_then = p->jlsn < lsn && kv_length(p->kv) == len;
        if (as_then)
            f = sess_fork_unlinked(p, &rc);
        sess_unhold(st, p);
    }
    if (!f && note_nomem(rp, rc, id))
        return;
    if (f) {
        memcpy(f->id, id, SESS_ID_MAX);
        f->jlsn = lsn;
        f->jtouch = wall;
        if (sess_link(st, f, 0, NULL) == CORE_OK) {
            rp->applied++;
            return;
        }
        sess_destroy(f);
    } else if (!as_then && !rp->base_whole) {
        /* the parent, or the child forked before the snapshot was
         * written, may be one the snapshot lost */
        note_absent(rp, id);
        return;
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
            note_deleted(rp, id);
        return;
    }
    struct sess *s;
    if (sess_acquire(st, id, &s) != CORE_OK) {
        note_absent(rp, id);
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
            rc = !fits ? CORE_EINVAL
                 : k && v ? sess_append(st, s, k, v, (size_t)sizes[0], -1) : CORE_ENOMEM;
            free(k);
            free(v);
        }
        if (rc == CORE_OK) {
            s->jlsn = lsn;
            s->jtouch = wall;
            rp->applied++;
        } else if (!note_nomem(rp, rc, id)) {
            rp->failed++;
        }
    }
    /* the session's clocks are set when the replay ends; no journal yet */
    sess_unhold(st, s);
}

/* Lsns count up from 1, one a change: a writer never gets near 2^63 (three
 * centuries at 10^9 a second). A record at or past it is damaged or forged;
 * applied, it would carry the next lsn round to 0, below every session's,
 * and the next start would skip the changes made from then on. */
#define LSN_LIMIT ((uint64_t)1 << 63)

bool sess_replay_apply(struct sess_store *st, struct replay *rp, uint64_t lsn,
                       const void *p, size_t n, bool snapshot)
{
    struct cur c = {.p = p, .left = n};
    uint32_t type = 0;
    double wall = 0;
    take(&c, &type, 4);
    take(&c, &wall, 8);
    if (c.bad || isnan(wall) || lsn >= LSN_LIMIT)
        return false;
    if (lsn > rp->max_lsn)
        rp->max_lsn = lsn;
    if (type == SESS_REC_SESS) {
        apply_sess(st, rp, lsn, wall, &c, snapshot);
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

