/*
 * core/store_idem.c — the session store's index of idempotency keys
 * (store.h's sess_idem): a chained hash table beside the id map, over the
 * same number of buckets (store.c grows both at once), of the linked
 * sessions made with a key, by scope and key. Every function here runs
 * under the store mutex but sess_set_idem (an unlinked session). The
 * table is written here for the reason store.c gives for the id map.
 */
#include "store_impl.h"

#include <stdlib.h>
#include <string.h>

/* The hash of a key's scope, a NUL and the key (the NUL keeps "ab"+"c"
 * apart from "a"+"bc"). */
static size_t hash_idem(const struct sess_idem *k)
{
    uint64_t h = sess_hash_text(SESS_HASH_SEED, k->scope) * 1099511628211ull;
    return (size_t)sess_hash_text(h, k->key);
}

static bool same_key(const struct sess_idem *a, const struct sess_idem *b)
{
    return strcmp(a->scope, b->scope) == 0 && strcmp(a->key, b->key) == 0;
}

struct sess *sess_idem_lookup(struct sess_store *st, const struct sess_idem *k)
{
    struct sess *s = st->ibuckets[hash_idem(k) & (st->n_buckets - 1)];
    while (s && !same_key(s->idem, k))
        s = s->inext;
    return s;
}

void sess_idem_link(struct sess_store *st, struct sess *s)
{
    if (!s->idem)
        return;
    size_t j = hash_idem(s->idem) & (st->n_buckets - 1);
    s->inext = st->ibuckets[j];
    st->ibuckets[j] = s;
}

void sess_idem_unlink(struct sess_store *st, struct sess *s)
{
    if (!s->idem)
        return;
    struct sess **pp = &st->ibuckets[hash_idem(s->idem) & (st->n_buckets - 1)];
    while (*pp && *pp != s)
        pp = &(*pp)->inext;
    if (*pp)
        *pp = s->inext;
    s->inext = NULL;
}

void sess_idem_rehash(struct sess_store *st, struct sess **to, size_t n_to)
{
    for (size_t i = 0; i < st->n_buckets; i++)
        for (struct sess *s = st->ibuckets[i]; s;) {
            struct sess *next = s->inext;
            size_t j = hash_idem(s->idem) & (n_to - 1);
            s->inext = to[j];
            to[j] = s;
            s = next;
        }
}

bool sess_set_idem(struct sess *s, const struct sess_idem *idem)
{
    free(s->idem);
    s->idem = NULL;
    if (!idem)
        return true;
    s->idem = malloc(sizeof *s->idem);
    if (s->idem)
        memcpy(s->idem, idem, sizeof *idem);
    return s->idem != NULL;
}
