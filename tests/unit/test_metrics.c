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

/* More status codes on one route than its table holds: the rest are
 * counted as code="other", never under another status (the 17th status
 * was once added to the 16th's counter). */
TEST(codes_beyond_the_table_fold_into_other)
{
    struct srv_metrics *m = srv_metrics_new();
    CHECK(m != NULL);
    if (!m)
        return;
    for (int i = 0; i < MAX_CODES + 4; i++) {
        srv_metrics_begin(m);
        srv_metrics_end(m, "/v1/attention", 400 + i, 1, 2, 0.001, NULL);
    }
    srv_metrics_begin(m);
    srv_metrics_end(m, "/v1/attention", 400, 1, 2, 0.001, NULL);
    size_t len = 0;
    char *text = srv_metrics_render(m, &len);
    CHECK(text != NULL);
    if (!text) {
        srv_metrics_free(m);
        return;
    }
    CHECK_EQ_INT(count_lines(text, "attnd_requests_total{"), MAX_CODES);
    CHECK(strstr(text, "attnd_requests_total{route=\"/v1/attention\",code=\"400\"} 2\n"));
    char line[128];
    snprintf(line, sizeof line, "attnd_requests_total{route=\"/v1/attention\",code=\"%d\"} 1\n",
             400 + MAX_CODES - 2);
    CHECK(strstr(text, line) != NULL);      /* the last status with a slot of its own */
    CHECK(strstr(text, "attnd_requests_total{route=\"/v1/attention\",code=\"other\"} 5\n"));
    free(text);
    srv_metrics_free(m);
}

/* Key names past the 63rd fold into key="other" (README, Operations);
 * the clients limited by address keep key="-", whenever they come: "-"
 * once took a name's slot (62 names had their own), and past the 63rd
 * name the address-limited clients were counted as key="other". */
static void key_table(bool dash_first)
{
    struct srv_metrics *m = srv_metrics_new();
    CHECK(m != NULL);
    if (!m)
        return;
    char name[32];
    if (dash_first)
        srv_metrics_count(m, SRV_EV_RATE_LIMITED, NULL);
    for (int i = 0; i < 70; i++) {
        snprintf(name, sizeof name, "k%d", i);
        srv_metrics_begin(m);
        srv_metrics_end(m, "/v1/info", 200, 0, 2, 0.001, name);
    }
    srv_metrics_count(m, SRV_EV_RATE_LIMITED, NULL);
    srv_metrics_count(m, SRV_EV_RATE_LIMITED, "k69");
    size_t len = 0;
    char *text = srv_metrics_render(m, &len);
    srv_metrics_free(m);
    CHECK(text != NULL);
    if (!text)
        return;
    CHECK_EQ_INT(count_lines(text, "attnd_key_requests_total{"), 64);
    CHECK(strstr(text, "attnd_key_requests_total{key=\"k62\"} 1\n") != NULL);
    CHECK(strstr(text, "attnd_key_requests_total{key=\"k63\"}") == NULL);
    CHECK(strstr(text, "attnd_key_requests_total{key=\"other\"} 7\n") != NULL);
    CHECK(strstr(text, "attnd_key_requests_total{key=\"-\"}") == NULL);
    CHECK(strstr(text, dash_first ? "attnd_rate_limited_total{key=\"-\"} 2\n"
                                  : "attnd_rate_limited_total{key=\"-\"} 1\n") != NULL);
    CHECK(strstr(text, "attnd_rate_limited_total{key=\"other\"} 1\n") != NULL);
    free(text);
}

TEST(key_names_past_the_63rd_fold_into_other_and_dash_stays)
{
    key_table(true);
    key_table(false);
}

int main(void)
{
    RUN(routes_beyond_the_table_fold_into_other);
    RUN(codes_beyond_the_table_fold_into_other);
    RUN(key_names_past_the_63rd_fold_into_other_and_dash_stays);
    TEST_MAIN_END();
}
