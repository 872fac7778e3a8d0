/*
 * api/v2_seq.c — the Open Inference Protocol v2 sequence map: a client's
 * sequence id (as text, "i:<uint64>" or "s:<string>") -> the id of the
 * session holding that sequence (a client picks sequence ids, the store
 * picks session ids). The map belongs to the api context (ctx->v2_seqs),
 * so several services in one process (tests) stay apart; it is made at
 * first use, published with a compare-and-swap, and freed by
 * api_ctx_close. At most API_V2_MAX_SEQUENCES entries, found by a linear
 * scan under one mutex (4096 short keys: a few microseconds at worst,
 * next to a request that attends a whole cache).
 */
#include "api/v2_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct v2_seq {
    char key[80];                   /* "i:<uint64>" or "s:<string>" */
    char sid[SESS_ID_MAX];          /* the session holding the sequence */
};

struct api_v2_seqs {
    pthread_mutex_t mu;             /* taken before the store's mutex */
    size_t n;                       /* entries in use */
    struct v2_seq e[API_V2_MAX_SEQUENCES];
};

/* ctx's map, made if it does not exist yet; NULL only without memory. */
static struct api_v2_seqs *seqs_of(struct api_ctx *ctx)
{
    struct api_v2_seqs *m = atomic_load(&ctx->v2_seqs), *none = NULL;

    if (m)
        return m;
    if (!(m = calloc(1, sizeof *m)))
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    if (!atomic_compare_exchange_strong(&ctx->v2_seqs, &none, m)) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        m = none;                   /* another thread's is in */
    }
    return m;
}

static struct v2_seq *seq_slot(struct api_v2_seqs *m, const char *key)
{
    size_t i;

    for (i = 0; i < m->n; i++)
        if (strcmp(m->e[i].key, key) == 0)
            return &m->e[i];
    return NULL;
}

bool api_v2_seq_find(struct api_ctx *ctx, const char *key, char *sid)
{
    struct api_v2_seqs *m = atomic_load(&ctx->v2_seqs);
    struct v2_seq *e;

    if (!m)
        return false;
    pthread_mutex_lock(&m->mu);
    e = seq_slot(m, key);
    if (e)
        memcpy(sid, e->sid, SESS_ID_MAX);
    pthread_mutex_unlock(&m->mu);
    return e != NULL;
}

/* (A restart of the sequence may have replaced the entry meanwhile.) */
void api_v2_seq_forget(struct api_ctx *ctx, const char *key, const char *sid)
{
    struct api_v2_seqs *m = atomic_load(&ctx->v2_seqs);
    struct v2_seq *e;

    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    e = seq_slot(m, key);
    if (e && strcmp(e->sid, sid) == 0)
        *e = m->e[--m->n];
    pthread_mutex_unlock(&m->mu);
}

bool api_v2_seq_put(struct api_ctx *ctx, const char *key, const char *sid,
                    char *old)
{
    struct api_v2_seqs *m = seqs_of(ctx);
    struct v2_seq *e;
    bool ok = true;

    old[0] = '\0';
    if (!m)
        return false;
    pthread_mutex_lock(&m->mu);
    e = seq_slot(m, key);
    if (e) {
        memcpy(old, e->sid, SESS_ID_MAX);
    } else if (m->n < API_V2_MAX_SEQUENCES) {
        e = &m->e[m->n++];
        snprintf(e->key, sizeof e->key, "%s", key);
    } else {
        ok = false;
    }
    if (e)
        snprintf(e->sid, sizeof e->sid, "%s", sid);
    pthread_mutex_unlock(&m->mu);
    return ok;
}

/* Asking the store with sess_exists neither waits for a busy session nor
 * counts as a use (acquiring would keep every mapped session from
 * expiring). */
void api_v2_seq_prune(struct api_ctx *ctx)
{
    struct api_v2_seqs *m = atomic_load(&ctx->v2_seqs);
    size_t i = 0;

    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    while (i < m->n) {
        if (!sess_exists(ctx->store, m->e[i].sid))
            m->e[i] = m->e[--m->n];
        else
            i++;
    }
    pthread_mutex_unlock(&m->mu);
}

void api_v2_seq_free(struct api_ctx *ctx)
{
    struct api_v2_seqs *m = atomic_exchange(&ctx->v2_seqs, NULL);

    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}
