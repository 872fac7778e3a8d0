/*
 * server/peers.c — open connections per client address (server/peers.h).
 * A chained hash table of the addresses that have a connection open, under
 * one mutex: an entry is made when an address's first connection opens and
 * freed when its last one closes, so the table holds at most
 * --max-connections entries. Admission and counting are separate calls
 * (libmicrohttpd asks its accept policy before it has made the connection,
 * and reports only connections it made): two connections accepted at once
 * on two transport threads may both pass, so an address can go past the
 * cap by at most the transport threads less one.
 */
#include "server/peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 1024u

struct peer {
    struct peer *next;
    unsigned char addr[16];             /* IPv4 in its first 4 bytes */
    unsigned char len;                  /* 4 or 16 */
    unsigned open;                      /* connections open from it */
};

struct srv_peers {
    pthread_mutex_t mu;
    unsigned cap;                       /* per address; 0: off */
    struct peer *buckets[N_BUCKETS];
};

/* The address bytes of sa (an IPv4-mapped IPv6 address as IPv4); 0 for
 * anything but IPv4 and IPv6. */
static size_t addr_of(const struct sockaddr *sa, unsigned char out[16])
{
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(out, a->s6_addr + 12, 4);
            return 4;
        }
        memcpy(out, a->s6_addr, 16);
        return 16;
    }
    return 0;
}

/* FNV-1a over the address bytes. */
static unsigned bucket_of(const unsigned char *a, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ a[i]) * 16777619u;
    return h & (N_BUCKETS - 1);
}

/* The entry's link for the address (*link NULL: none); mutex held. */
static struct peer **find(struct srv_peers *p, const unsigned char *a, size_t len)
{
    struct peer **link = &p->buckets[bucket_of(a, len)];
    while (*link && ((*link)->len != len || memcmp((*link)->addr, a, len) != 0))
        link = &(*link)->next;
    return link;
}

struct srv_peers *srv_peers_new(unsigned cap)
{
    struct srv_peers *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->cap = cap;
    return p;
}

void srv_peers_free(struct srv_peers *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < N_BUCKETS; i++)
        for (struct peer *e = p->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

bool srv_peers_admit(struct srv_peers *p, const struct sockaddr *sa, unsigned *open)
{
    unsigned char a[16];
    size_t len = addr_of(sa, a);
    *open = 0;
    if (!p || p->cap == 0 || len == 0)
        return true;
    pthread_mutex_lock(&p->mu);
    struct peer *e = *find(p, a, len);
    *open = e ? e->open : 0;
    pthread_mutex_unlock(&p->mu);
    return *open < p->cap;
}

void srv_peers_count(struct srv_peers *p, const struct sockaddr *sa, int delta)
{
    unsigned char a[16];
    size_t len = addr_of(sa, a);
    if (!p || p->cap == 0 || len == 0)
        return;
    pthread_mutex_lock(&p->mu);
    struct peer **link = find(p, a, len);
    struct peer *e = *link;
    if (delta > 0) {
        if (!e && (e = calloc(1, sizeof *e)) != NULL) {
            memcpy(e->addr, a, len);
            e->len = (unsigned char)len;
            *link = e;
        }
        if (e)
            e->open++;
    } else if (e && --e->open == 0) {
        *link = e->next;
        free(e);
    }
    pthread_mutex_unlock(&p->mu);
}

void srv_peers_name(const struct sockaddr *sa, char *buf, size_t cap)
{
    unsigned char a[16];
    size_t len = addr_of(sa, a);
    if (len == 0 || !inet_ntop(len == 4 ? AF_INET : AF_INET6, a, buf, (socklen_t)cap))
        snprintf(buf, cap, "?");
}
