/*
 * core/store_put.c — sessions made detached and put in place (store.h's
 * sess_create_detached, sess_put_detached): a v2 sequence_start makes its
 * new session and runs its first pass on it away from the store, and
 * only a start that is answered replaces the earlier session of its id.
 *
 * Replacing keeps the earlier session's struct (its place in the map, its
 * lock, its holders) and swaps what it holds, settings, rows and journal
 * marks, with the detached one's, under its lock: a request waiting for
 * it goes on with the new session, and a snapshot copies it (under the
 * same lock) either as it was or as it is now, with the lsn of that. The
 * one record is a whole session (SESS) under the id, with an lsn newer
 * than every record of the earlier session (all written under that lock
 * before), and the replay (core/replay.c) lets a journal's SESS record
 * replace a session whose last change is older: a crash before the record
 * restarts with the earlier session, one after it with the new one.
 */
#include "store_impl.h"

#include <stdlib.h>
#include <string.h>

enum core_status sess_create_detached(struct sess_store *st, const struct sess_spec *spec,
                                      const char *name, char *id, struct sess **out)
{
    char want[SESS_ID_MAX];
    enum core_status rc;

    *out = NULL;
    if (!sess_named_id(st, name, want))
        return CORE_EINVAL;
    struct sess *s = sess_new_from_spec(spec, &rc);
    if (!s)
        return rc;
    memcpy(s->id, want, SESS_ID_MAX);
    if (id)
        memcpy(id, want, SESS_ID_MAX);
    sess_resolve_defaults(st, s);
    s->detached = true;
    kv_set_acct(s->kv, &st->acct);      /* its rows count as they are made */
    *out = s;
    return CORE_OK;
}

void sess_drop_detached(struct sess_store *st, struct sess *s)
{
    (void)st;
    sess_destroy(s);
}

#define SWAP(T, a, b) do { T t_ = (a); (a) = (b); (b) = t_; } while (0)

/* What a and b hold: settings, the arrays they own, cache, journal marks
 * (ids, locks, references and places in the map stay). */
static void swap_parts(struct sess *a, struct sess *b)
{
    SWAP(struct sess_spec, a->spec, b->spec);
    SWAP(void *, a->bias_q, b->bias_q);
    SWAP(void *, a->bias_k, b->bias_k);
    SWAP(void *, a->bias_v, b->bias_v);
    SWAP(double *, a->slopes, b->slopes);
    SWAP(double *, a->sinks, b->sinks);
    SWAP(struct kv_cache *, a->kv, b->kv);
    SWAP(uint64_t, a->jlsn, b->jlsn);
    SWAP(double, a->jtouch, b->jtouch);
}

/* s's settings and rows into old (held), journaled first as a whole
 * session under old's id; s is freed (with old's former contents on
 * success). */
static enum core_status replace(struct sess_store *st, struct sess *s, struct sess *old)
{
    pthread_mutex_lock(&st->mu);
    s->last_used = sess_now(st);        /* its record says idle 0 */
    bool linked = old->linked;
    pthread_mutex_unlock(&st->mu);
    enum core_status rc = linked ? sess_dur_sess(st, s) : CORE_ENOTFOUND;
    if (rc != CORE_OK) {
        sess_destroy(s);
        return rc;
    }
    pthread_mutex_lock(&st->mu);
    swap_parts(old, s);
    sess_idem_unlink(st, old);          /* a key was the earlier session's */
    free(old->idem);
    old->idem = NULL;
    st->created++;
    pthread_mutex_unlock(&st->mu);
    sess_destroy(s);                    /* now the earlier settings and rows */
    return CORE_OK;
}

enum core_status sess_put_detached(struct sess_store *st, struct sess *s, struct sess *old,
                                   struct sess **held)
{
    enum core_status rc;

    *held = NULL;
    if (old) {
        rc = replace(st, s, old);
        if (rc == CORE_OK)
            *held = old;
        return rc;
    }
    /* none when the pass began: link s, or replace one made meanwhile */
    for (int tries = 0; tries < 4; tries++) {
        struct sess *o;
        s->detached = false;
        rc = sess_link_named_held(st, s, held);
        if (rc != CORE_EEXIST)
            return rc;
        s->detached = true;
        if (sess_acquire(st, s->id, &o) != CORE_OK)
            continue;                   /* let go of again meanwhile */
        rc = replace(st, s, o);
        if (rc == CORE_OK)
            *held = o;
        else
            sess_release(st, o);
        return rc;
    }
    sess_destroy(s);
    return CORE_EEXIST;
}
