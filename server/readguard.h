/*
 * server/readguard.h — deadlines for reading a request (server/readguard.c):
 * its headers within --read-timeout seconds past --conn-timeout of
 * idleness, its body at --min-body-rate bytes a second on average once
 * --read-timeout seconds have passed since the headers.
 */
#ifndef ATTND_SERVER_READGUARD_H
#define ATTND_SERVER_READGUARD_H

#include <stdbool.h>
#include <stddef.h>

struct srv_readguard;
struct srv_rg_conn;

/* A guard; idle_s is --conn-timeout, read_s --read-timeout (0: no
 * deadline at all), min_rate --min-body-rate (0: any rate). NULL when
 * memory is short. */
struct srv_readguard *srv_readguard_new(double idle_s, double read_s, double min_rate);
void srv_readguard_free(struct srv_readguard *g);

/* Seconds on the monotonic clock the functions below take as now. */
double srv_readguard_now(void);

/* A connection on socket fd opened (MHD's NOTIFY_STARTED): its record, or
 * NULL when the guard is off or memory is short (then it is not guarded).
 * srv_readguard_close (NOTIFY_CLOSED, before MHD closes fd) drops it. */
struct srv_rg_conn *srv_readguard_open(struct srv_readguard *g, int fd, double now);
void srv_readguard_close(struct srv_readguard *g, struct srv_rg_conn *c);

/* A request's headers are in (its body, if any, comes next); some body
 * bytes arrived; the whole body is in (no deadline while it is answered);
 * its answer went out (the next request's headers are awaited from now).
 * c may be NULL. */
void srv_readguard_headers(struct srv_readguard *g, struct srv_rg_conn *c, double now);
void srv_readguard_body(struct srv_readguard *g, struct srv_rg_conn *c, size_t n);
void srv_readguard_read(struct srv_readguard *g, struct srv_rg_conn *c);
void srv_readguard_answered(struct srv_readguard *g, struct srv_rg_conn *c, double now);

/* Shut down (shutdown(2), both ways) the socket of every connection past
 * its deadline at now; MHD then sees the stream end and closes it. How
 * many were shut. */
size_t srv_readguard_sweep(struct srv_readguard *g, double now);

/* Whether a sweep shut c's socket (c may be NULL: false). */
bool srv_readguard_was_shut(struct srv_readguard *g, const struct srv_rg_conn *c);

#endif
