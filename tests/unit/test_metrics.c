/*
 * tests/unit/test_metrics.c — server/metrics.c's route table and renderer.
 *
 * server/ objects are not linked into unit tests (only core/ is), so the one
 * file under test is compiled in here; it needs nothing of server/ but its
 * own header.
 */
#include "server/metrics.c"

#include "tests/harness.h"

/* Lines of text that start with prefix. */
static size_t count_lines(const char *text, const char *prefix)
{
    size_t n = 0, k = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        n += strncmp(p, prefix, k) == 0;
    return n;
}

/* More route templates than the table holds: the overflow folds into one
 * "other" row (the table once wrote past its end after filling up). */
TEST(routes_beyond_the_table_fold_into_other)
{
    struct srv_metrics *m = srv_metrics_new();
    CHECK(m != NULL);
    if (!m)
        return;
    char route[32];
    for (int i = 0; i < 3 * MAX_ROUTES; i++) {
        snprintf(route, sizeof route, "/r%d", i);
        srv_metrics_begin(m);
        srv_metrics_end(m, route, 200, 1, 2, 0.001, NULL);
    }
    size_t len = 0;
    char *text = srv_metrics_render(m, &len);
    CHECK(text != NULL);
    CHECK_EQ_INT(count_lines(text, "attnd_requests_total{"), MAX_ROUTES);
    CHECK(strstr(text, "attnd_requests_total{route=\"other\",code=\"200\"} 129\n") != NULL);
    CHECK(strstr(text, "attnd_requests_in_flight 0\n") != NULL);
    CHECK(strstr(text, "attnd_request_bytes_total 192\n") != NULL);
    free(text);
    srv_metrics_free(m);
}

int main(void)
{
    RUN(routes_beyond_the_table_fold_into_other);
    TEST_MAIN_END();
}
