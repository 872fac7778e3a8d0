/*
 * server/fdbudget.c — the open-file budget. Every connection holds a
 * descriptor, and so do libuv, the transport's threads, the journal, its
 * snapshots and the files SIGHUP rereads. At start attnd raises its soft
 * RLIMIT_NOFILE (often 1024) towards the hard limit, as far as
 * --max-connections and its own descriptors need; when the hard limit is
 * lower, the connection cap is lowered to what fits, so that a full house
 * of connections never takes the descriptors the journal needs. Without
 * this, accept() fails with EMFILE: libmicrohttpd logs a warning for each
 * try and, on a thread that holds no connection yet, retries at once, and a
 * journal rotation or snapshot fails.
 *
 * The reserve is counted, not measured, so that it holds however the
 * descriptors are used later: the ones open now (stdio, --log-file), plus
 * the table below. poll() (the transport's mode) has no FD_SETSIZE bound,
 * so a soft limit above 1024 is safe.
 */
#include "server/fdbudget.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>

enum {
    FD_LIBUV = 6,       /* epoll; signal lock pipe and loop signal pipe; async eventfd */
    FD_HTTP = 2,        /* listening socket; the TCP probe socket at start (server/tcp.c) */
    FD_PER_HTTP_THREAD = 1,     /* each transport thread's wake-up eventfd (with a pool of
                                   threads, libmicrohttpd's master has none) */
    FD_STATE = 6,       /* the state directory's LOCK; journal; the next one while
                           it rotates; its directory; a snapshot being written;
                           a file read at restore */
    FD_RELOAD = 4,      /* key file; certificate and key; --log-file reopened (SIGHUP) */
    FD_LIBRARIES = 16,  /* libraries' own: GnuTLS's configuration, /etc/localtime, ... */
};

void srv_fd_plan(unsigned long soft, unsigned long hard, unsigned long open_now,
                 unsigned wanted, unsigned http_threads, struct srv_fd_budget *out)
{
    unsigned long reserved = open_now + FD_LIBUV + FD_HTTP + FD_STATE + FD_RELOAD +
                             FD_LIBRARIES + (unsigned long)http_threads * FD_PER_HTTP_THREAD;
    unsigned long need = reserved + wanted;
    unsigned long limit = soft;
    if (limit < need && hard > limit)
        limit = hard < need ? hard : need;
    out->soft = limit;
    out->hard = hard;
    out->reserved = reserved;
    out->raised = limit > soft;
    out->raise_error = 0;
    unsigned long room = limit > reserved ? limit - reserved : 0;
    out->connections = room < wanted ? (unsigned)room : wanted;
}

/* Descriptors open now: /proc/self/fd's entries but the directory's own;
 * where /proc is missing, each descriptor below the soft limit (at most
 * 65536) is asked. */
static unsigned long open_descriptors(unsigned long soft)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d && (errno == EMFILE || errno == ENFILE))
        return soft;                    /* none left */
    unsigned long n = 0;
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            n += e->d_name[0] != '.';
        closedir(d);
        return n ? n - 1 : 0;
    }
    unsigned long top = soft < 65536 ? soft : 65536;
    for (unsigned long fd = 0; fd < top; fd++)
        n += fcntl((int)fd, F_GETFD) != -1;
    return n;
}

int srv_fd_budget(unsigned wanted, unsigned http_threads, struct srv_fd_budget *out)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    unsigned long open_now = open_descriptors(rl.rlim_cur);
    srv_fd_plan(rl.rlim_cur, rl.rlim_max, open_now, wanted, http_threads, out);
    if (out->raised) {
        struct rlimit up = {out->soft, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) != 0) {   /* then plan within the old */
            int e = errno;
            srv_fd_plan(rl.rlim_cur, rl.rlim_cur, open_now, wanted, http_threads, out);
            out->hard = rl.rlim_max;
            out->raise_error = e;
        }
    }
    return 0;
}
