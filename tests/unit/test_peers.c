/*
 * tests/unit/test_peers.c — server/peers.c: open connections per client
 * address for --max-connections-per-ip.
 *
 * server/ objects are not linked into unit tests (only core/ is), so the
 * file under test is compiled in here.
 */
#include "server/peers.c"

#include "tests/harness.h"

static struct sockaddr_in v4(const char *text)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    inet_pton(AF_INET, text, &a.sin_addr);
    return a;
}

static struct sockaddr_in6 v6(const char *text)
{
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    inet_pton(AF_INET6, text, &a.sin6_addr);
    return a;
}

#define SA(x) ((const struct sockaddr *)(const void *)&(x))

TEST(an_address_is_refused_at_the_cap_and_admitted_after_a_close)
{
    struct srv_peers *p = srv_peers_new(2);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    unsigned open = 99;
    CHECK(srv_peers_admit(p, SA(a), &open));
    CHECK_EQ_INT(open, 0);
    srv_peers_count(p, SA(a), 1);
    srv_peers_count(p, SA(a), 1);
    CHECK(!srv_peers_admit(p, SA(a), &open));
    CHECK_EQ_INT(open, 2);
    CHECK(srv_peers_admit(p, SA(b), &open));     /* another address: its own count */
    CHECK_EQ_INT(open, 0);
    srv_peers_count(p, SA(a), -1);
    CHECK(srv_peers_admit(p, SA(a), &open));
    CHECK_EQ_INT(open, 1);
    srv_peers_count(p, SA(a), -1);
    CHECK(p->buckets[bucket_of((const unsigned char *)&a.sin_addr, 4)] == NULL);  /* freed */
    srv_peers_free(p);
}

TEST(a_mapped_ipv4_address_is_the_same_client)
{
    struct srv_peers *p = srv_peers_new(1);
    struct sockaddr_in a = v4("192.0.2.7");
    struct sockaddr_in6 m = v6("::ffff:192.0.2.7"), o = v6("2001:db8::7");
    unsigned open;
    srv_peers_count(p, SA(a), 1);
    CHECK(!srv_peers_admit(p, SA(m), &open));
    CHECK(srv_peers_admit(p, SA(o), &open));
    char name[64];
    srv_peers_name(SA(m), name, sizeof name);
    CHECK_STR(name, "192.0.2.7");
    srv_peers_name(SA(o), name, sizeof name);
    CHECK_STR(name, "2001:db8::7");
    srv_peers_count(p, SA(m), -1);
    CHECK(srv_peers_admit(p, SA(a), &open));
    srv_peers_free(p);
}

TEST(no_cap_counts_nothing_and_a_stray_close_is_harmless)
{
    struct srv_peers *p = srv_peers_new(0);
    struct sockaddr_in a = v4("10.0.0.1");
    unsigned open;
    for (int i = 0; i < 1000; i++)
        srv_peers_count(p, SA(a), 1);
    CHECK(srv_peers_admit(p, SA(a), &open));
    srv_peers_free(p);
    p = srv_peers_new(3);
    srv_peers_count(p, SA(a), -1);              /* never opened: ignored */
    CHECK(srv_peers_admit(p, SA(a), &open));
    CHECK_EQ_INT(open, 0);
    /* many addresses, some in one bucket: each keeps its own count */
    for (unsigned i = 0; i < 5000; i++) {
        struct sockaddr_in x = v4("10.0.0.0");
        x.sin_addr.s_addr = htonl(0x0a000000u + i);
        srv_peers_count(p, SA(x), 1);
    }
    for (unsigned i = 0; i < 5000; i++) {
        struct sockaddr_in x = v4("10.0.0.0");
        x.sin_addr.s_addr = htonl(0x0a000000u + i);
        CHECK(srv_peers_admit(p, SA(x), &open) && open == 1);
        srv_peers_count(p, SA(x), -1);
    }
    for (unsigned i = 0; i < N_BUCKETS; i++)
        CHECK(p->buckets[i] == NULL);
    srv_peers_free(p);
}

int main(void)
{
    RUN(an_address_is_refused_at_the_cap_and_admitted_after_a_close);
    RUN(a_mapped_ipv4_address_is_the_same_client);
    RUN(no_cap_counts_nothing_and_a_stray_close_is_harmless);
    TEST_MAIN_END();
}
