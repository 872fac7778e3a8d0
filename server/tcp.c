/*
 * server/tcp.c — per-connection socket settings (see server/tcp.h).
 *
 * The receive buffer. Left to the kernel's autotuning, a kept-alive
 * connection's buffer stayed at about 1.3 MB: a client sending a 4.2 MB
 * body stalled on the window, and the ACKs that reopened it ran the
 * client's TCP work on the MHD thread (loopback delivers in the sender's
 * context), the thread that also reads and decodes the body. The kernel
 * caps SO_RCVBUF at net.core.rmem_max and then stops tuning the buffer,
 * so a value it would cap (Debian's default rmem_max is 208 KiB, below
 * what autotuning reaches) is not used at all.
 *
 * Pacing on loopback. Where the system's congestion control is BBR, every
 * send is paced to its estimate of the path's bandwidth by a kernel timer:
 * a 1.4 MB answer to a client on the same host left at ~3.3 GB/s, 0.4 ms,
 * on a link with no queue to protect.
 *
 * Together they took 0.16-0.24 ms off a 2048 x 128 base64 request from a
 * client on the same host, and 0.10-0.16 ms of the MHD thread's CPU;
 * each alone was within the noise (docs/benchmarks.md). Loopback peers get a congestion
 * control that does not pace (by default cubic, the kernel's own default,
 * or reno where this process may not choose cubic); every other peer
 * keeps the system's, pacing and all.
 */
#include "server/tcp.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/log.h"

/* The SO_RCVBUF to set for want bytes: want when the kernel takes it
 * whole, else 0. The kernel keeps min(want, rmem_max) and reads back
 * twice what it keeps, so only a read-back of 2·want is want taken whole
 * (a want up to twice rmem_max reads back as at least want, capped). */
static int usable_rcvbuf(size_t want)
{
    int fd, v, got = 0;
    socklen_t len = sizeof got;

    if (want == 0)
        return 0;
    if (want > INT_MAX / 2 || (fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) {
        srv_log_msgf("warn", "tcp: --socket-rcvbuf %zu cannot be set here", want);
        return 0;
    }
    v = (int)want;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) != 0 || got / 2 < v) {
        /* info: Debian's own default rmem_max leads here */
        srv_log_msgf("info", "tcp: --socket-rcvbuf %zu is above net.core.rmem_max: the "
                     "kernel's autotuning sizes each connection's receive buffer", want);
        v = 0;
    }
    close(fd);
    return v;
}

/* Whether the kernel lets this process choose congestion control cc. */
static bool usable_cc(const char *cc)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok = fd >= 0 && strlen(cc) < SRV_TCP_CC_MAX &&
              setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) == 0;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* "auto": cubic where this process may choose it (root, or listed in
 * net.ipv4.tcp_allowed_congestion_control), else reno, which the kernel
 * always allows; neither paces. */
static const char *loopback_choice(const char *asked)
{
    if (!asked || !asked[0])
        return NULL;
    if (strcmp(asked, "auto") != 0) {
        if (usable_cc(asked))
            return asked;
        srv_log_msgf("warn", "tcp: --loopback-congestion %s is not available here "
                     "(net.ipv4.tcp_allowed_congestion_control): loopback clients get "
                     "the system's", asked);
        return NULL;
    }
    if (usable_cc("cubic"))
        return "cubic";
    if (usable_cc("reno"))
        return "reno";
    srv_log_msgf("info", "tcp: neither cubic nor reno can be chosen here: loopback "
                 "clients get the system's congestion control");
    return NULL;
}

void srv_tcp_init(struct srv_tcp *t, size_t rcvbuf, const char *loopback_cc)
{
    const char *cc = loopback_choice(loopback_cc);

    memset(t, 0, sizeof *t);
    t->rcvbuf = usable_rcvbuf(rcvbuf);
    if (cc)
        memcpy(t->loopback_cc, cc, strlen(cc) + 1);
}

/* 127.0.0.0/8, ::1, or 127.x.y.z mapped into IPv6. */
static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

void srv_tcp_tune(const struct srv_tcp *t, int fd, const struct sockaddr *peer)
{
    if (t->rcvbuf)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &t->rcvbuf, sizeof t->rcvbuf);
    if (t->loopback_cc[0] && peer && is_loopback(peer))
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, t->loopback_cc,
                         (socklen_t)strlen(t->loopback_cc));
}
