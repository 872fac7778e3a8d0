/*
 * tests/api/test_srv_limits.c — server/limits.c's admission per client:
 * the token bucket and the in-flight cap, what the sweep frees, and the
 * table's cap on clients known by address, which must not lift the limits
 * of a client known by its API key.
 *
 * server/ objects are not linked into api tests, so the file under test is
 * compiled in here.
 */
#include "server/limits.c"

#include <stdio.h>

#include "tests/harness.h"

#define SEC 1000000000ull

TEST(a_bucket_refills_at_its_rate)
{
    struct srv_limits *l = srv_limits_new(2, 2, 0);     /* 2 a second, 2 at once */
    CHECK(l && srv_limits_on(l));
    if (!l)
        return;
    unsigned retry = 0;
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", SEC, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", SEC, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", SEC, &retry), SRV_ADMIT_RATE);
    CHECK_EQ_INT(retry, 1);
    /* another client has its own bucket */
    CHECK_EQ_INT(srv_limits_enter(l, "k:bob", SEC, &retry), SRV_ADMIT_OK);
    /* half a second gives one token back */
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", SEC + SEC / 2, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", SEC + SEC / 2, &retry), SRV_ADMIT_RATE);
    srv_limits_free(l);
}

TEST(the_inflight_cap_and_the_sweep)
{
    struct srv_limits *l = srv_limits_new(0, 0, 1);     /* one in flight */
    if (!l)
        return;
    unsigned retry = 0;
    CHECK_EQ_INT(srv_limits_enter(l, "a:10.0.0.1", SEC, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "a:10.0.0.1", SEC, &retry), SRV_ADMIT_INFLIGHT);
    srv_limits_sweep(l, 2 * SEC);                       /* in flight: kept */
    CHECK_EQ_INT(l->n, 1);
    CHECK_EQ_INT(srv_limits_enter(l, "a:10.0.0.1", 2 * SEC, &retry), SRV_ADMIT_INFLIGHT);
    srv_limits_leave(l, "a:10.0.0.1");
    srv_limits_sweep(l, 3 * SEC);                       /* idle: freed */
    CHECK_EQ_INT(l->n, 0);
    CHECK_EQ_INT(srv_limits_enter(l, "a:10.0.0.1", 3 * SEC, &retry), SRV_ADMIT_OK);
    srv_limits_free(l);
}

/* MAX_CLIENTS addresses, each with a request in flight (the sweep keeps
 * them), fill the table: a new address is admitted without limits, as
 * designed, but an API key's client still gets its entry and its limits. */
TEST(a_flood_of_addresses_does_not_lift_a_key_s_limits)
{
    struct srv_limits *l = srv_limits_new(1, 1, 1);
    if (!l)
        return;
    unsigned retry = 0;
    char id[SRV_CLIENT_ID_MAX];
    for (unsigned i = 0; i < MAX_CLIENTS; i++) {
        snprintf(id, sizeof id, "a:2001:db8::%x", i);
        CHECK_EQ_INT(srv_limits_enter(l, id, SEC, &retry), SRV_ADMIT_OK);
    }
    CHECK_EQ_INT(l->n, MAX_CLIENTS);
    srv_limits_sweep(l, 2 * SEC);
    CHECK_EQ_INT(l->n, MAX_CLIENTS);
    /* one more address: no entry, no limit */
    CHECK_EQ_INT(srv_limits_enter(l, "a:192.0.2.1", 2 * SEC, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "a:192.0.2.1", 2 * SEC, &retry), SRV_ADMIT_OK);
    /* a key: its bucket and its in-flight cap hold */
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", 2 * SEC, &retry), SRV_ADMIT_OK);
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", 2 * SEC, &retry), SRV_ADMIT_INFLIGHT);
    srv_limits_leave(l, "k:alice");
    CHECK_EQ_INT(srv_limits_enter(l, "k:alice", 2 * SEC, &retry), SRV_ADMIT_RATE);
    srv_limits_free(l);
}

int main(void)
{
    RUN(a_bucket_refills_at_its_rate);
    RUN(the_inflight_cap_and_the_sweep);
    RUN(a_flood_of_addresses_does_not_lift_a_key_s_limits);
    TEST_MAIN_END();
}
