/*
 * server/limits.h — per-client admission: a token bucket (--rate-limit
 * requests per second, --rate-burst at once) and a cap on requests in
 * flight (--max-inflight-per-key). A client is its API key's name, or its
 * address when the request carries no valid key.
 */
#ifndef ATTND_SERVER_LIMITS_H
#define ATTND_SERVER_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_CLIENT_ID_MAX 72        /* "k:" or "a:" + name or address, NUL */
#define SRV_CLIENT_KEYED "k:"       /* the prefix of a client known by API key */

struct srv_limits;

enum srv_admit {
    SRV_ADMIT_OK = 0,
    SRV_ADMIT_RATE,                 /* bucket empty */
    SRV_ADMIT_INFLIGHT,             /* too many in flight */
};

/* rate: tokens per second (0: no rate limit); burst: bucket size (0: one
 * second's worth, at least 1); max_inflight: 0 = no cap. */
struct srv_limits *srv_limits_new(double rate, unsigned burst, unsigned max_inflight);
void srv_limits_free(struct srv_limits *l);

/* Whether any limit is on (otherwise enter/leave need not be called). */
bool srv_limits_on(const struct srv_limits *l);

/* Admit one request of client id at time now_ns (monotonic). On
 * SRV_ADMIT_OK the request counts as in flight until srv_limits_leave;
 * otherwise *retry_s is the whole seconds after which a retry can pass. */
enum srv_admit srv_limits_enter(struct srv_limits *l, const char *id, uint64_t now_ns,
                                unsigned *retry_s);
void srv_limits_leave(struct srv_limits *l, const char *id);

/* Forget idle clients whose bucket has refilled (housekeeping). */
void srv_limits_sweep(struct srv_limits *l, uint64_t now_ns);

#endif
