/*
 * server/limits.c — token buckets and in-flight counts per client.
 *
 * A chained hash table of clients (FNV-1a of the id) behind one mutex: an
 * admission is a lookup, a refill (tokens += elapsed · rate, capped at the
 * burst) and a decrement, far cheaper than the request it admits. A client
 * with nothing in flight and a full bucket holds no information, so the
 * housekeeping sweep frees it. Clients known by address are capped
 * (MAX_CLIENTS): a new address past the cap is admitted unlimited rather
 * than refused, so that a flood of source addresses cannot lock out
 * everyone else. Clients known by API key (SRV_CLIENT_KEYED ids) always get their
 * entry: they are as many as the key file's names (at most KEYS_MAX), and
 * a flood of addresses must not lift a key's limits either.
 */
#include "server/limits.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_SLOTS 1024
#define MAX_CLIENTS 65536

struct client {
    struct client *next;
    double tokens;
    uint64_t t_ns;                  /* last refill */
    unsigned inflight;
    char id[SRV_CLIENT_ID_MAX];
};

struct srv_limits {
    pthread_mutex_t mu;
    double rate, burst;
    unsigned max_inflight;
    size_t n;
    struct client *slot[N_SLOTS];
};

static size_t hash(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h % N_SLOTS);
}

struct srv_limits *srv_limits_new(double rate, unsigned burst, unsigned max_inflight)
{
    struct srv_limits *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->rate = rate;
    l->burst = burst ? (double)burst : fmax(1.0, ceil(rate));
    l->max_inflight = max_inflight;
    return l;
}

void srv_limits_free(struct srv_limits *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < N_SLOTS; i++)
        for (struct client *c = l->slot[i], *n; c; c = n) {
            n = c->next;
            free(c);
        }
    pthread_mutex_destroy(&l->mu);
    free(l);
}

bool srv_limits_on(const struct srv_limits *l)
{
    return l && (l->rate > 0 || l->max_inflight > 0);
}

static struct client *find(struct srv_limits *l, const char *id, bool create, uint64_t now)
{
    size_t s = hash(id);
    for (struct client *c = l->slot[s]; c; c = c->next)
        if (strcmp(c->id, id) == 0)
            return c;
    if (!create || (l->n >= MAX_CLIENTS && strncmp(id, SRV_CLIENT_KEYED, strlen(SRV_CLIENT_KEYED)) != 0))
        return NULL;
    struct client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    size_t n = strlen(id);
    memcpy(c->id, id, n < sizeof c->id ? n + 1 : sizeof c->id);
    c->id[sizeof c->id - 1] = '\0';
    c->tokens = l->burst;
    c->t_ns = now;
    c->next = l->slot[s];
    l->slot[s] = c;
    l->n++;
    return c;
}

static void refill(const struct srv_limits *l, struct client *c, uint64_t now)
{
    if (now > c->t_ns)
        c->tokens = fmin(l->burst, c->tokens + (double)(now - c->t_ns) * 1e-9 * l->rate);
    c->t_ns = now;
}

enum srv_admit srv_limits_enter(struct srv_limits *l, const char *id, uint64_t now_ns,
                                unsigned *retry_s)
{
    enum srv_admit v = SRV_ADMIT_OK;
    pthread_mutex_lock(&l->mu);
    struct client *c = find(l, id, true, now_ns);
    if (c) {
        if (l->max_inflight && c->inflight >= l->max_inflight) {
            v = SRV_ADMIT_INFLIGHT;
            *retry_s = 1;
        } else if (l->rate > 0) {
            refill(l, c, now_ns);
            if (c->tokens < 1.0) {
                v = SRV_ADMIT_RATE;
                double wait = (1.0 - c->tokens) / l->rate;
                *retry_s = wait < 1.0 ? 1u : wait > 86400 ? 86400u : (unsigned)ceil(wait);
            } else {
                c->tokens -= 1.0;
            }
        }
        if (v == SRV_ADMIT_OK)
            c->inflight++;
    }
    pthread_mutex_unlock(&l->mu);
    return v;
}

void srv_limits_leave(struct srv_limits *l, const char *id)
{
    pthread_mutex_lock(&l->mu);
    struct client *c = find(l, id, false, 0);
    if (c && c->inflight)
        c->inflight--;
    pthread_mutex_unlock(&l->mu);
}

void srv_limits_sweep(struct srv_limits *l, uint64_t now_ns)
{
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < N_SLOTS; i++)
        for (struct client **pc = &l->slot[i]; *pc;) {
            struct client *c = *pc;
            if (l->rate > 0)
                refill(l, c, now_ns);
            if (c->inflight == 0 && (l->rate <= 0 || c->tokens >= l->burst)) {
                *pc = c->next;
                free(c);
                l->n--;
            } else {
                pc = &c->next;
            }
        }
    pthread_mutex_unlock(&l->mu);
}
