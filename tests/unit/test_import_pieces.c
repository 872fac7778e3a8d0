/*
 * tests/unit/test_import_pieces.c — core/persist.h's import fed piece by
 * piece, as an upload arrives: every way of cutting the bytes (1 byte at a
 * time, pieces that end inside a header field, a row or an element) gives
 * the session one whole feed gives (the same export bytes past the id and
 * clock); and the refusals found at a piece's edge: a corrupt byte in the
 * last piece (checksum), a body cut short inside a row (truncated), a
 * non-finite value whose bytes straddle two pieces (refused at the piece
 * that completes it), bytes past the end, and an import abandoned midway
 * (a client gone) all leave the store's sessions, bytes and created count
 * as they were, with every page given back at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/journal.h"
#include "core/persist.h"
#include "core/store.h"
#include "tests/harness.h"

#define H_KV 2
#define D 8
#define ROWS 150            /* two full pages and part of a third */

static struct sess_store *st;

static struct sess_stats stats(void)
{
    struct sess_stats s;
    sess_store_stats(st, &s);
    return s;
}

/* A float32 session of ROWS rows (kv_store: its storage form); its
 * export into *n bytes (malloc'd). */
static unsigned char *make_export(int kv_store, size_t *n)
{
    struct sess_spec sp = {.shape = {.h = 2 * H_KV, .h_kv = H_KV, .d_k = D, .d_v = D}};
    sp.params.dtype = ATTN_F32;
    sp.params.scale = 0.25;
    sp.kv_store = (enum kv_store)kv_store;
    char id[SESS_ID_MAX];
    struct sess *s;
    float *k = malloc(H_KV * ROWS * D * sizeof *k), *v = malloc(H_KV * ROWS * D * sizeof *v);
    void *bytes = NULL;
    for (size_t i = 0; i < H_KV * ROWS * D; i++) {
        k[i] = (float)((int)(i * 37 % 101) - 50) / 16.0f;
        v[i] = (float)((int)(i * 53 % 97) - 48) / 8.0f;
    }
    CHECK_EQ_INT(sess_create(st, &sp, id), CORE_OK);
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    CHECK_EQ_INT(sess_append(st, s, k, v, ROWS, -1), CORE_OK);
    CHECK_EQ_INT(sess_export(st, s, &bytes, n), CORE_OK);
    sess_release(st, s);
    CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
    free(k);
    free(v);
    return bytes;
}

/* Offset past the id and the clock of an encoding (fuzz_import's). */
static size_t after_clock(const unsigned char *p)
{
    uint32_t id_len;
    memcpy(&id_len, p + 16, 4);
    return 20 + (size_t)id_len + 4 + 6 * 8 + 16;
}

/* Import p[n] in pieces of the sizes cut[] (cycled; total: the size
 * announced, or SIZE_MAX); the status, and the new id into id. */
static enum core_status import_cut(const unsigned char *p, size_t n, size_t total,
                                   const size_t *cut, size_t n_cut, char *id, char *why)
{
    struct sess_importer *im = sess_import_begin(st, NULL, total);
    CHECK(im != NULL);
    if (!im)
        return CORE_ENOMEM;
    for (size_t at = 0, i = 0; at < n; i++) {
        size_t k = cut[i % n_cut] < n - at ? cut[i % n_cut] : n - at;
        sess_import_feed(im, p + at, k);
        at += k;
    }
    enum core_status rc = sess_import_end(im, id, NULL);
    snprintf(why, SESS_WHY_MAX, "%s", sess_import_why(im));
    sess_import_free(im);
    return rc;
}

/* The export of session id, which must equal a[n] past the id and clock. */
static void same_export(const char *id, const unsigned char *a, size_t n)
{
    struct sess *s;
    void *b = NULL;
    size_t nb = 0;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    CHECK_EQ_INT(sess_export(st, s, &b, &nb), CORE_OK);
    sess_release(st, s);
    size_t off = after_clock(a);
    CHECK(nb == n && memcmp(a, b, 16) == 0 &&
          memcmp(a + off, (unsigned char *)b + off, n - off - 4) == 0);
    free(b);
}

TEST(every_cut_imports_the_same)
{
    static const size_t cuts[][4] = {
        {1, 1, 1, 1}, {3, 5, 7, 11}, {4093, 1, 64, 4095}, {100, 2048, 13, 9999},
    };
    for (int store = 0; store <= 3; store++) {
        size_t n;
        unsigned char *a = make_export(store, &n);
        if (!a)
            continue;
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++)
            for (int known = 0; known < 2; known++) {
                char id[SESS_ID_MAX], why[SESS_WHY_MAX];
                struct sess_stats before = stats();
                enum core_status rc = import_cut(a, n, known ? n : SIZE_MAX, cuts[c], 4,
                                                 id, why);
                CHECK_EQ_INT(rc, CORE_OK);
                if (rc != CORE_OK) {
                    printf("  kv_store %d, cut %zu: %s\n", store, c, why);
                    continue;
                }
                CHECK(stats().created == before.created + 1);
                same_export(id, a, n);
                CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
                CHECK(stats().bytes == before.bytes);
            }
        free(a);
    }
}

/* An import of p[n] in cut pieces is refused with rc and a reason holding
 * msg, and leaves the store as it was. */
static void refused(const unsigned char *p, size_t n, size_t total, size_t cut,
                    enum core_status rc, const char *msg)
{
    struct sess_stats before = stats(), after;
    char id[SESS_ID_MAX], why[SESS_WHY_MAX];
    const size_t cuts[1] = {cut};
    CHECK_EQ_INT(import_cut(p, n, total, cuts, 1, id, why), rc);
    if (!strstr(why, msg)) {
        CHECK(!"reason");
        printf("  wanted \"%s\" in \"%s\"\n", msg, why);
    }
    after = stats();
    CHECK(after.sessions == before.sessions && after.bytes == before.bytes &&
          after.created == before.created);
}

TEST(refusals_at_piece_edges)
{
    size_t n;
    unsigned char *a = make_export(0, &n), *b = malloc(n + 8);
    if (!a || !b)
        return;
    for (int known = 0; known < 2; known++) {
        size_t t = known ? n : SIZE_MAX;
        /* a corrupt byte in the last piece: only the checksum finds it */
        memcpy(b, a, n);
        b[n - 6] ^= 1;
        refused(b, n, t, 4096, CORE_ECORRUPT, "checksum mismatch");
        refused(b, n, t, n - 5, CORE_ECORRUPT, "checksum mismatch");
        /* the checksum itself, alone in the last piece */
        memcpy(b, a, n);
        b[n - 1] ^= 0x40;
        refused(b, n, t, n - 4, CORE_ECORRUPT, "checksum mismatch");
    }
    /* cut short inside a row (the size not known ahead: found at the end) */
    refused(a, n - 4 - 5 * D * 4 - 3, SIZE_MAX, 1000, CORE_ECORRUPT, "truncated");
    refused(a, n - 1, SIZE_MAX, 7, CORE_ECORRUPT, "truncated");
    refused(a, 30, SIZE_MAX, 7, CORE_ECORRUPT, "truncated");
    /* a size announced that the header says is short or long: at once */
    refused(a, n - 1, n - 1, 4096, CORE_ECORRUPT, "truncated");
    /* cut inside the byte-order mark: truncated, not another byte order */
    refused(a, 16, 16, 4096, CORE_ECORRUPT, "truncated");
    refused(a, 17, 17, 4096, CORE_ECORRUPT, "truncated");
    memcpy(b, a, n);
    memcpy(b + n, "\0\0\0\0", 4);
    refused(b, n + 4, n + 4, 4096, CORE_ECORRUPT, "trailing bytes");
    refused(b, n + 4, SIZE_MAX, 4096, CORE_ECORRUPT, "trailing bytes");
    /* a non-finite value whose bytes straddle two pieces (the checksum
     * made right: only the rows' check finds it) */
    memcpy(b, a, n);
    size_t at = n - 4 - 7 * D * 4 - 2 * 4;          /* an element of V */
    float inf = INFINITY;
    memcpy(b + at, &inf, 4);
    uint32_t c = jnl_crc32c(0, b, n - 4);
    memcpy(b + n - 4, &c, 4);
    refused(b, n, n, at + 2, CORE_ECORRUPT, "not finite");
    refused(b, n, SIZE_MAX, 1, CORE_ECORRUPT, "not finite");
    free(a);
    free(b);
}

/* The rows are claimed against --max-cache-bytes when the header arrives
 * (a second import at once does not fit where one does) and counted
 * while they arrive; an import abandoned midway (the client went away)
 * gives all of it back when it is freed. */
TEST(claimed_counted_and_given_back)
{
    size_t n;
    unsigned char *a = make_export(0, &n);
    if (!a)
        return;
    struct sess_store *old = st;
    struct sess_config cfg = {.default_ttl_s = 60, .max_cache_bytes = (size_t)(n * 3 / 2)};
    st = sess_store_new(&cfg);
    struct sess_importer *x = sess_import_begin(st, NULL, n), *y = sess_import_begin(st, NULL, n);
    CHECK(x && y);
    if (x && y) {
        CHECK_EQ_INT(sess_import_feed(x, a, n / 2), CORE_OK);
        CHECK(stats().bytes > 0);                   /* claimed and allocated */
        CHECK_EQ_INT(sess_import_feed(y, a, n / 2), CORE_ECAPACITY);
        sess_import_free(x);                        /* abandoned */
        struct sess_stats after = stats();
        CHECK(after.bytes == 0 && after.sessions == 0 && after.created == 0);
        char id[SESS_ID_MAX];
        x = sess_import_begin(st, NULL, SIZE_MAX);
        CHECK_EQ_INT(sess_import_feed(x, a, n), CORE_OK);
        CHECK_EQ_INT(sess_import_end(x, id, NULL), CORE_OK);
        CHECK(stats().sessions == 1);
    }
    sess_import_free(x);
    sess_import_free(y);
    sess_store_free(st);
    st = old;
    free(a);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    attn_blas_init(1);
    st = sess_store_new(&cfg);
    RUN(every_cut_imports_the_same);
    RUN(refusals_at_piece_edges);
    RUN(claimed_counted_and_given_back);
    sess_store_free(st);
    TEST_MAIN_END();
}
