/*
 * server/fdbudget.h — the open-file budget (server/fdbudget.c): how many
 * connections the process's RLIMIT_NOFILE leaves room for once attnd's own
 * files are set aside, after raising the soft limit as far as is needed.
 */
#ifndef ATTND_SERVER_FDBUDGET_H
#define ATTND_SERVER_FDBUDGET_H

#include <stdbool.h>

struct srv_fd_budget {
    unsigned long soft;         /* RLIMIT_NOFILE's soft limit, after raising */
    unsigned long hard;         /* and its hard limit */
    unsigned long reserved;     /* descriptors kept for all but connections */
    unsigned connections;       /* connections that fit, at most those wanted */
    bool raised;                /* the soft limit was raised */
    int raise_error;            /* errno of a raise that failed (then planned
                                   within the old soft limit), else 0 */
};

/* The plan alone, from the limits and the descriptors open now: the soft
 * limit becomes the smaller of the hard limit and what `wanted` connections
 * with `http_threads` transport threads need (never lower than it was). */
void srv_fd_plan(unsigned long soft, unsigned long hard, unsigned long open_now,
                 unsigned wanted, unsigned http_threads, struct srv_fd_budget *out);

/* Reads the limits and the descriptors open now, raises the soft limit as
 * planned and fills *out. 0, or -errno if the limits cannot be read (then
 * *out is untouched). Call before libuv or the transport opens anything. */
int srv_fd_budget(unsigned wanted, unsigned http_threads, struct srv_fd_budget *out);

#endif
