/*
 * server/tcp.h — what attnd asks the kernel for on each accepted TCP
 * connection: a receive buffer large enough for a large body to arrive
 * without stalling on the window (--socket-rcvbuf), and, for clients on
 * the loopback interface, a congestion control that does not pace
 * (--loopback-congestion). Each is checked once at start-up on a socket
 * of its own, so that nothing is asked per connection that the kernel
 * would refuse or cap.
 */
#ifndef ATTND_SERVER_TCP_H
#define ATTND_SERVER_TCP_H

#include <stddef.h>
#include <sys/socket.h>

#define SRV_TCP_CC_MAX 16           /* TCP_CA_NAME_MAX of the kernel */

struct srv_tcp {
    int rcvbuf;                     /* SO_RCVBUF to set, 0: the kernel's tuning */
    char loopback_cc[SRV_TCP_CC_MAX];   /* TCP_CONGESTION for loopback peers, "" none */
};

/* What of rcvbuf (bytes, 0: none) and loopback_cc (a name, "auto" for
 * cubic or else reno, "": none) this kernel takes; what it does not is
 * logged and left out. */
void srv_tcp_init(struct srv_tcp *t, size_t rcvbuf, const char *loopback_cc);

/* Apply t to the accepted socket fd whose peer is peer (a refusal leaves
 * the kernel's defaults: nothing here is needed for correctness). */
void srv_tcp_tune(const struct srv_tcp *t, int fd, const struct sockaddr *peer);

#endif
