/*
 * server/peers.h — open connections per client address, for
 * --max-connections-per-ip. attnd counts them itself (libmicrohttpd's
 * own per-address limit is off) so that a refusal can say which limit
 * refused it: libmicrohttpd logs one "Server reached connection limit"
 * for its total and its per-address caps alike, and behind a proxy every
 * connection comes from one address, so the difference decides what an
 * operator must change.
 */
#ifndef ATTND_SERVER_PEERS_H
#define ATTND_SERVER_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct srv_peers;

/* cap: connections per address at most (0: no cap, nothing counted). */
struct srv_peers *srv_peers_new(unsigned cap);
void srv_peers_free(struct srv_peers *p);

/* Whether a new connection from sa may open (its address has fewer than
 * cap open); *open: how many it has. Addresses other than IPv4 and IPv6
 * (a Unix socket) always may. Thread-safe. */
bool srv_peers_admit(struct srv_peers *p, const struct sockaddr *sa, unsigned *open);

/* A connection from sa opened (+1) or closed (-1). Thread-safe. */
void srv_peers_count(struct srv_peers *p, const struct sockaddr *sa, int delta);

/* The address's text ("127.0.0.1", "::1") into buf (at least 46 bytes). */
void srv_peers_name(const struct sockaddr *sa, char *buf, size_t cap);

#endif
