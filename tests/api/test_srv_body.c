/*
 * tests/api/test_srv_body.c — server/http_body.c, the request body buffers
 * of the transport, on their own (no sockets): a large body goes back to
 * api/spare.c's process-wide slots when its request ends and the next
 * large request, body or tensors, takes the same block (one bound on the
 * memory kept); small bodies stay with the request struct, middling ones
 * are freed; the body budget is charged and returned; a large body is
 * 2 MiB-aligned (api/spare.c's huge-page blocks).
 *
 * server/ objects are not linked into api tests (api/ and core/ are), so
 * the one file under test is compiled in here; it needs nothing of server/
 * but its headers.
 */
#include "server/http_body.c"

#include "api/spare.h"
#include "server/config.h"
#include "tests/harness.h"

static struct srv_config cfg;
static struct srv_http h;

/* A fresh request on a transport with a body budget of budget bytes. */
static void fresh(struct req *r, size_t budget)
{
    cfg.max_body_bytes = (size_t)64 << 20;
    memset(&h, 0, sizeof h);
    h.cfg = &cfg;
    h.body_budget = budget;
    atomic_init(&h.body_bytes, 0);
    memset(r, 0, sizeof *r);
    r->h = &h;
    r->refuse = API_ERR_NONE;       /* not 0 */
}

/* Append n bytes of value v in pieces of MHD's read size. */
static bool upload(struct req *r, size_t n, char v)
{
    static char piece[32 << 10];
    memset(piece, v, sizeof piece);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof piece ? n - done : sizeof piece;
        if (!http_body_append(r, piece, k))
            return false;
        done += k;
    }
    return true;
}

TEST(large_body_goes_to_the_process_wide_spare_slots)
{
    api_spare_drop();
    struct req r;
    size_t len = (size_t)3 << 20;
    fresh(&r, (size_t)256 << 20);
    CHECK(http_body_reserve(&r, len));             /* the announced Content-Length */
    CHECK((uintptr_t)r.body % ((size_t)2 << 20) == 0);     /* of 2 MiB huge pages */
    CHECK(upload(&r, len, 'a'));
    CHECK(r.len == len && r.body[len - 1] == 'a');
    CHECK(atomic_load(&h.body_bytes) == len);
    char *body = r.body;
    http_body_release(&r);
    CHECK(atomic_load(&h.body_bytes) == 0);
    size_t bytes = 0;
    CHECK_EQ_INT(api_spare_kept(&bytes), 1);       /* kept in api/spare.c */
    CHECK(bytes >= len);
    size_t cap;
    char *t = api_spare_alloc(len, &cap);          /* a large request's tensors */
    CHECK(t == body && cap >= len);
    api_spare_free(t);
    api_spare_drop();
}

TEST(large_body_takes_a_block_kept_by_the_api)
{
    api_spare_drop();
    size_t len = (size_t)2 << 20;
    char *resp = malloc(len + 4096);                /* a response the api gave back */
    CHECK(resp != NULL);
    api_spare_free(resp);
    CHECK_EQ_INT(api_spare_kept(NULL), 1);
    struct req r;
    fresh(&r, (size_t)256 << 20);
    CHECK(http_body_reserve(&r, len));
    CHECK(r.body == resp);                          /* the same pages, already in */
    CHECK_EQ_INT(api_spare_kept(NULL), 0);
    CHECK(upload(&r, len, 'b'));
    CHECK(r.body[0] == 'b' && r.body[len - 1] == 'b');
    http_body_release(&r);
    CHECK(atomic_load(&h.body_bytes) == 0);
    CHECK_EQ_INT(api_spare_kept(NULL), 1);
    api_spare_drop();
}

TEST(small_bodies_stay_with_the_request_middling_ones_are_freed)
{
    api_spare_drop();
    struct req r;
    fresh(&r, (size_t)256 << 20);
    CHECK(upload(&r, 1000, 'c'));
    char *small = r.body;
    http_body_release(&r);
    CHECK(r.keep == small && r.keep_cap <= KEEP_BODY_MAX);
    CHECK(http_body_reserve(&r, 900));
    CHECK(r.body == small && r.keep == NULL);       /* the kept buffer again */
    http_body_release(&r);
    free(r.keep);
    r.keep = NULL;
    CHECK(http_body_reserve(&r, 100000));           /* under API_SPARE_MIN */
    CHECK(upload(&r, 100000, 'd'));
    http_body_release(&r);
    CHECK_EQ_INT(api_spare_kept(NULL), 0);          /* freed, not kept */
    CHECK(atomic_load(&h.body_bytes) == 0);
}

TEST(body_over_the_budget_is_refused_and_charges_nothing)
{
    api_spare_drop();
    struct req r, s;
    size_t len = (size_t)1 << 20;
    fresh(&r, len + len / 2);
    s = r;
    CHECK(http_body_reserve(&r, len));
    CHECK(!http_body_reserve(&s, len));             /* the second does not fit */
    CHECK(s.body == NULL && s.cap == 0);
    CHECK(atomic_load(&h.body_bytes) == len);
    CHECK(!upload(&s, len, 'e'));
    CHECK(s.refuse == API_ERR_CAPACITY_EXHAUSTED);
    http_body_release(&r);
    http_body_release(&s);
    CHECK(atomic_load(&h.body_bytes) == 0);
    CHECK(http_body_reserve(&s, len));              /* the budget came back */
    http_body_release(&s);
    api_spare_drop();
}

int main(void)
{
    RUN(large_body_goes_to_the_process_wide_spare_slots);
    RUN(large_body_takes_a_block_kept_by_the_api);
    RUN(small_bodies_stay_with_the_request_middling_ones_are_freed);
    RUN(body_over_the_budget_is_refused_and_charges_nothing);
    TEST_MAIN_END();
}
