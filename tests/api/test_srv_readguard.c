/*
 * tests/api/test_srv_readguard.c — server/readguard.c on its own, over
 * socket pairs and a clock given by the test: a connection whose headers
 * are not in by --conn-timeout + --read-timeout after it opened (or after
 * its last answer) is shut, and so is one whose body averages under
 * --min-body-rate once --read-timeout has passed; connections being
 * answered, closed ones and those on time are left alone; 0 turns each
 * deadline off.
 *
 * server/ objects are not linked into api tests, so the file under test is
 * compiled in here (it needs nothing of server/ but its header).
 */
#include "server/readguard.c"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "tests/harness.h"

/* A connected pair: [0] stands for attnd's socket, [1] for the client. */
static void pair(int sv[2])
{
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
}

/* Whether the client's end sees its peer shut (end of stream). */
static bool shut(int client)
{
    char b;
    return recv(client, &b, 1, 0) == 0;
}

static void close_pair(int sv[2])
{
    close(sv[0]);
    close(sv[1]);
}

/* A guard of --conn-timeout 30, --read-timeout 10, --min-body-rate 1000
 * with two connections, opened at ta and tb. */
struct two {
    struct srv_readguard *g;
    int a[2], b[2];
    struct srv_rg_conn *ca, *cb;
};

static void two_open(struct two *t, double ta, double tb)
{
    t->g = srv_readguard_new(30, 10, 1000);
    pair(t->a);
    pair(t->b);
    t->ca = srv_readguard_open(t->g, t->a[0], ta);
    t->cb = srv_readguard_open(t->g, t->b[0], tb);
    CHECK(t->ca && t->cb);
}

static void two_close(struct two *t)
{
    srv_readguard_close(t->g, t->ca);
    srv_readguard_close(t->g, t->cb);
    close_pair(t->a);
    close_pair(t->b);
    srv_readguard_free(t->g);
}

TEST(headers_late_past_idleness_and_read_timeout_are_shut)
{
    struct two t;
    two_open(&t, 100, 115);
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 139.9), 0);
    CHECK(!shut(t.a[1]) && !shut(t.b[1]));
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 140.5), 1);   /* 30 + 10 s after opening */
    CHECK(shut(t.a[1]) && !shut(t.b[1]));
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 141), 0);     /* shut once */
    /* b's headers came: its body now runs by the rate */
    srv_readguard_headers(t.g, t.cb, 150);
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 159), 0);     /* no headers deadline now */
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 161), 1);     /* and no body byte in 11 s */
    CHECK(shut(t.b[1]));
    two_close(&t);
}

TEST(a_body_under_the_rate_is_shut_after_the_grace)
{
    struct two t;
    two_open(&t, 0, 0);
    srv_readguard_headers(t.g, t.ca, 1);
    srv_readguard_headers(t.g, t.cb, 1);
    srv_readguard_body(t.g, t.ca, 5000);                /* slow: 5000 bytes in 10+ s */
    srv_readguard_body(t.g, t.cb, 20000);               /* fast enough */
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 10.5), 0);    /* within the grace */
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 11.5), 1);
    CHECK(shut(t.a[1]) && !shut(t.b[1]));
    srv_readguard_body(t.g, t.cb, 1);
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 20), 0);      /* 20001 bytes in 19 s */
    CHECK_EQ_INT(srv_readguard_sweep(t.g, 22), 1);      /* in 21 s: under 1000 B/s */
    CHECK(shut(t.b[1]));
    two_close(&t);
}

TEST(answering_and_idle_between_requests_are_not_reading)
{
    struct srv_readguard *g = srv_readguard_new(30, 10, 1000);
    int a[2];
    pair(a);
    struct srv_rg_conn *c = srv_readguard_open(g, a[0], 0);
    srv_readguard_headers(g, c, 1);
    srv_readguard_read(g, c);                        /* the whole body is in */
    CHECK_EQ_INT(srv_readguard_sweep(g, 500), 0);     /* a long computation */
    srv_readguard_answered(g, c, 500);
    CHECK_EQ_INT(srv_readguard_sweep(g, 539), 0);     /* idle, then headers */
    CHECK_EQ_INT(srv_readguard_sweep(g, 541), 1);
    srv_readguard_close(g, c);
    close_pair(a);
    srv_readguard_free(g);
}

TEST(zero_turns_the_deadlines_off)
{
    struct srv_readguard *off = srv_readguard_new(30, 0, 1000);
    int a[2];
    pair(a);
    CHECK(srv_readguard_open(off, a[0], 0) == NULL);  /* not followed at all */
    CHECK_EQ_INT(srv_readguard_sweep(off, 1e6), 0);
    srv_readguard_free(off);
    struct srv_readguard *any_rate = srv_readguard_new(30, 10, 0);
    struct srv_rg_conn *c = srv_readguard_open(any_rate, a[0], 0);
    srv_readguard_headers(any_rate, c, 0);
    CHECK_EQ_INT(srv_readguard_sweep(any_rate, 1e6), 0);  /* no body rate */
    srv_readguard_answered(any_rate, c, 1e6);
    CHECK_EQ_INT(srv_readguard_sweep(any_rate, 1e6 + 41), 1);  /* headers still */
    srv_readguard_close(any_rate, c);
    /* NULL records (a guard that is off) are accepted everywhere */
    srv_readguard_headers(any_rate, NULL, 0);
    srv_readguard_body(any_rate, NULL, 1);
    srv_readguard_read(any_rate, NULL);
    srv_readguard_answered(any_rate, NULL, 0);
    srv_readguard_close(any_rate, NULL);
    srv_readguard_free(any_rate);
    close_pair(a);
}

int main(void)
{
    RUN(headers_late_past_idleness_and_read_timeout_are_shut);
    RUN(a_body_under_the_rate_is_shut_after_the_grace);
    RUN(answering_and_idle_between_requests_are_not_reading);
    RUN(zero_turns_the_deadlines_off);
    TEST_MAIN_END();
}
