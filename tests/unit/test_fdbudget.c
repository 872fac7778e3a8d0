/*
 * tests/unit/test_fdbudget.c — server/fdbudget.c's open-file budget: the
 * plan from given limits (raised as far as needed, never lowered, never past
 * the hard limit; the connections what is left after the reserve), and the
 * real thing on this process's own RLIMIT_NOFILE.
 *
 * server/ objects are not linked into unit tests (only core/ is), so the
 * file under test is compiled in here; it needs nothing but its header.
 */
#include "server/fdbudget.c"

#include <sys/resource.h>
#include <unistd.h>

#include "tests/harness.h"

static struct srv_fd_budget plan(unsigned long soft, unsigned long hard, unsigned wanted)
{
    struct srv_fd_budget b;
    srv_fd_plan(soft, hard, 4, wanted, 2, &b);
    return b;
}

TEST(reserve_grows_with_open_files_and_transport_threads)
{
    struct srv_fd_budget a, b, c;
    srv_fd_plan(100000, 100000, 4, 10, 2, &a);
    srv_fd_plan(100000, 100000, 5, 10, 2, &b);
    srv_fd_plan(100000, 100000, 4, 10, 3, &c);
    CHECK(a.reserved > 4 + 2);
    CHECK(b.reserved == a.reserved + 1);
    CHECK(c.reserved == a.reserved + 1);
}

TEST(enough_already_is_left_alone)
{
    struct srv_fd_budget b = plan(100000, 100000, 1000);
    CHECK(!b.raised);
    CHECK(b.soft == 100000 && b.hard == 100000);
    CHECK(b.connections == 1000);
    b = plan(5000, 5000, 10);               /* more than needed: not lowered */
    CHECK(!b.raised && b.soft == 5000 && b.connections == 10);
}

TEST(low_soft_limit_is_raised_as_far_as_needed)
{
    struct srv_fd_budget b = plan(64, 4096, 1000);
    CHECK(b.raised);
    CHECK(b.soft == b.reserved + 1000);
    CHECK(b.hard == 4096);
    CHECK(b.connections == 1000);
    b = plan(1024, RLIM_INFINITY, 1000);
    CHECK(b.raised && b.soft == b.reserved + 1000 && b.connections == 1000);
}

TEST(low_hard_limit_lowers_the_connections)
{
    struct srv_fd_budget b = plan(64, 512, 1000);
    CHECK(b.raised && b.soft == 512);
    CHECK(b.connections == 512 - b.reserved);
    b = plan(64, 64, 1000);
    CHECK(!b.raised && b.soft == 64);
    CHECK(b.connections == 64 - b.reserved);
    unsigned long r = b.reserved;
    b = plan(r + 1, r + 1, 1000);           /* room for exactly one */
    CHECK(b.connections == 1);
    b = plan(r, r, 1000);                   /* for none */
    CHECK(b.connections == 0);
    b = plan(16, 16, 1000);
    CHECK(b.connections == 0);
}

TEST(budget_raises_this_process_soft_limit)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 1024) {
        printf("  (hard limit %lu: the raise is not tried)\n", (unsigned long)rl.rlim_max);
        return;
    }
    struct rlimit low = {64, rl.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    struct srv_fd_budget a, b;
    CHECK(srv_fd_budget(100, 2, &a) == 0);
    struct rlimit now;
    CHECK(getrlimit(RLIMIT_NOFILE, &now) == 0);
    CHECK(a.raised);
    CHECK(now.rlim_cur == a.soft && a.soft == a.reserved + 100);
    CHECK(now.rlim_max == rl.rlim_max && a.hard == rl.rlim_max);
    CHECK(a.connections == 100);
    int extra[3];                           /* three more open: three more kept */
    for (int i = 0; i < 3; i++)
        CHECK((extra[i] = dup(1)) >= 0);
    CHECK(srv_fd_budget(100, 2, &b) == 0);
    CHECK(b.reserved == a.reserved + 3);
    for (int i = 0; i < 3; i++)
        close(extra[i]);
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

int main(void)
{
    RUN(reserve_grows_with_open_files_and_transport_threads);
    RUN(enough_already_is_left_alone);
    RUN(low_soft_limit_is_raised_as_far_as_needed);
    RUN(low_hard_limit_lowers_the_connections);
    RUN(budget_raises_this_process_soft_limit);
    TEST_MAIN_END();
}
