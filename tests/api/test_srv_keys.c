/*
 * tests/api/test_srv_keys.c — server/keys.c's check of a Bearer token: the
 * key it matches and its name, the near misses refused, and a cost that
 * a client's overlong token does not multiply.
 *
 * server/ objects are not linked into api tests (api/ and core/ are), so
 * the file under test is compiled in here, with server/log.c for its
 * messages.
 */
#include "server/keys.c"
#include "server/log.c"

#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

#define N_KEYS 4095            /* and the single key: KEYS_MAX */

static char dir[] = "/tmp/attnd-test-keys-XXXXXX";
static char file[sizeof dir + 16];

/* A key file of N_KEYS keys, k0:key0-0123456789abcdef ... */
static struct srv_keys *open_many(void)
{
    snprintf(file, sizeof file, "%s/keys", dir);
    FILE *f = fopen(file, "w");
    if (!f)
        return NULL;
    for (int i = 0; i < N_KEYS; i++)
        fprintf(f, "k%d:key%d-0123456789abcdef\n", i, i);
    fclose(f);
    chmod(file, 0600);
    char why[256] = "";
    struct srv_keys *k = srv_keys_open(file, "the-single-key", why, sizeof why);
    if (!k)
        fprintf(stderr, "  %s\n", why);
    return k;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

TEST(a_key_and_its_name)
{
    struct srv_keys *k = open_many();
    CHECK(k != NULL);
    if (!k)
        return;
    char name[SRV_KEY_NAME_MAX] = "";
    CHECK(srv_keys_check(k, "key4094-0123456789abcdef", name));
    CHECK_STR(name, "k4094");
    CHECK(srv_keys_check(k, "key7-0123456789abcdef \t", name));
    CHECK_STR(name, "k7");
    CHECK(srv_keys_check(k, "the-single-key", name));
    CHECK_STR(name, "default");
    CHECK(!srv_keys_check(k, "key7-0123456789abcdeF", name));    /* last byte */
    CHECK(!srv_keys_check(k, "key7-0123456789abcde", name));     /* a prefix */
    CHECK(!srv_keys_check(k, "key7-0123456789abcdefx", name));   /* longer */
    CHECK(!srv_keys_check(k, "", name));
    srv_keys_free(k);
}

/* The token's length is the client's: past the longest key it may be,
 * its length must not multiply the work of every request. */
TEST(an_overlong_token_costs_no_more_than_a_long_key)
{
    struct srv_keys *k = open_many();
    CHECK(k != NULL);
    if (!k)
        return;
    size_t big = 60000;
    char *tok = malloc(big + 1);
    memset(tok, 'a', big);
    tok[big] = '\0';
    char name[SRV_KEY_NAME_MAX];
    char at_max[KEY_MAX + 1];
    memset(at_max, 'a', KEY_MAX);
    at_max[KEY_MAX] = '\0';
    double t0 = cpu_s();
    for (int i = 0; i < 5; i++)
        CHECK(!srv_keys_check(k, at_max, name));
    double t1 = cpu_s();
    for (int i = 0; i < 5; i++)
        CHECK(!srv_keys_check(k, tok, name));
    double t2 = cpu_s();
    double near = t1 - t0, over = t2 - t1;
    if (over > 10 * near + 0.01)
        fprintf(stderr, "  %zu-byte token: %.4f s, %d-byte: %.4f s\n", big, over, KEY_MAX,
                near);
    CHECK(over <= 10 * near + 0.01);     /* thread CPU time; unbounded: about 117 times */
    free(tok);
    srv_keys_free(k);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(a_key_and_its_name);
    RUN(an_overlong_token_costs_no_more_than_a_long_key);
    unlink(file);
    rmdir(dir);
    TEST_MAIN_END();
}
