/*
 * server/readguard.c — deadlines for reading a request, which libmicrohttpd
 * does not have: its connection timeout is an idle timer that every byte
 * restarts, so a client that sends a byte every few seconds holds a
 * connection (and a slot of --max-connections) for ever. Each connection
 * is followed through MHD's notifications and the request handler's
 * calls: the headers of a request must be in within --conn-timeout +
 * --read-timeout seconds of the connection opening or of the previous
 * answer (idleness up to --conn-timeout, then the headers themselves), and
 * from --read-timeout seconds after the headers on, the body must have
 * come at --min-body-rate bytes a second on average. A sweep on the loop
 * thread, once a second, shuts down the socket of a connection past them;
 * MHD then reads the end of the stream and closes the connection as any
 * other. The record is dropped by MHD's close notification, which comes
 * before MHD closes the descriptor, and under the same mutex as the sweep,
 * so a descriptor the sweep shuts is still that connection's.
 */
#include "server/readguard.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

enum rg_phase { RG_HEADERS, RG_BODY, RG_BUSY };

struct srv_rg_conn {
    int fd;
    enum rg_phase phase;
    double since;                   /* start of the phase */
    uint64_t body_bytes;            /* RG_BODY: bytes so far */
    bool shut;                      /* shut down once already */
    struct srv_rg_conn *prev, *next;
};

struct srv_readguard {
    double idle_s, read_s, min_rate;
    pthread_mutex_t mu;             /* guards the list and every record */
    struct srv_rg_conn *head;
};

struct srv_readguard *srv_readguard_new(double idle_s, double read_s, double min_rate)
{
    struct srv_readguard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->idle_s = idle_s;
    g->read_s = read_s;
    g->min_rate = min_rate;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

void srv_readguard_free(struct srv_readguard *g)
{
    if (!g)
        return;
    while (g->head) {
        struct srv_rg_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

double srv_readguard_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct srv_rg_conn *srv_readguard_open(struct srv_readguard *g, int fd, double now)
{
    if (!g || !(g->read_s > 0) || fd < 0)
        return NULL;
    struct srv_rg_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->phase = RG_HEADERS;
    c->since = now;
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head)
        g->head->prev = c;
    g->head = c;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void srv_readguard_close(struct srv_readguard *g, struct srv_rg_conn *c)
{
    if (!g || !c)
        return;
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

static void enter(struct srv_readguard *g, struct srv_rg_conn *c, enum rg_phase phase,
                  double now)
{
    if (!g || !c)
        return;
    pthread_mutex_lock(&g->mu);
    c->phase = phase;
    c->since = now;
    c->body_bytes = 0;
    pthread_mutex_unlock(&g->mu);
}

void srv_readguard_headers(struct srv_readguard *g, struct srv_rg_conn *c, double now)
{
    enter(g, c, RG_BODY, now);
}

void srv_readguard_body(struct srv_readguard *g, struct srv_rg_conn *c, size_t n)
{
    if (!g || !c)
        return;
    pthread_mutex_lock(&g->mu);
    c->body_bytes += n;
    pthread_mutex_unlock(&g->mu);
}

void srv_readguard_read(struct srv_readguard *g, struct srv_rg_conn *c)
{
    enter(g, c, RG_BUSY, 0);
}

void srv_readguard_answered(struct srv_readguard *g, struct srv_rg_conn *c, double now)
{
    enter(g, c, RG_HEADERS, now);
}

/* Whether c is past its deadline at now (g->mu held). */
static bool overdue(const struct srv_readguard *g, const struct srv_rg_conn *c, double now)
{
    double t = now - c->since;
    if (c->phase == RG_HEADERS)
        return t > g->idle_s + g->read_s;
    if (c->phase == RG_BODY)
        return g->min_rate > 0 && t > g->read_s && (double)c->body_bytes < g->min_rate * t;
    return false;
}

size_t srv_readguard_sweep(struct srv_readguard *g, double now)
{
    size_t shut = 0;
    if (!g)
        return 0;
    pthread_mutex_lock(&g->mu);
    for (struct srv_rg_conn *c = g->head; c; c = c->next)
        if (!c->shut && overdue(g, c, now)) {
            shutdown(c->fd, SHUT_RDWR);
            c->shut = true;
            shut++;
        }
    pthread_mutex_unlock(&g->mu);
    return shut;
}

bool srv_readguard_was_shut(struct srv_readguard *g, const struct srv_rg_conn *c)
{
    if (!g || !c)
        return false;
    pthread_mutex_lock(&g->mu);
    bool shut = c->shut;
    pthread_mutex_unlock(&g->mu);
    return shut;
}
