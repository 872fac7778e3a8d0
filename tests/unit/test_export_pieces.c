/*
 * tests/unit/test_export_pieces.c — core/persist.h's export read piece by
 * piece from a snapshot (sess_export_begin/read) against the whole-buffer
 * export (sess_export) of the same moment: byte for byte, for every piece
 * size from 1 byte up (and sizes that end inside the header, a row, a page
 * run and the checksum), for float64, float32 and its float16, bfloat16
 * and int8 storage, a rolling session that let rows go, a fork that wrote
 * into its shared last page, and an empty session. The snapshot holds
 * while the session is appended to, truncated and deleted (the bytes stay
 * those of begin and import to the session of then), and a snapshot freed
 * midway gives back every page its deleted session left it. Once the rows
 * are read out, the snapshot lets the session's pages go. sess_export_bytes
 * counts the bytes of the export of then without writing them, for each of
 * these sessions and one with biases, ALiBi slopes, sink logits and a key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/persist.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/store_util.h"

#define H_KV 2
#define D 8

static struct sess_store *st;
static double now_s = 1000.0;

static double fixed_clock(void *arg)
{
    (void)arg;
    return now_s;
}

static struct sess_stats stats(void)
{
    struct sess_stats s;
    sess_store_stats(st, &s);
    return s;
}

/* Append m rows (values from seed) to session id. */
static void append(const char *id, enum attn_dtype dt, size_t m, unsigned seed)
{
    size_t es = attn_dtype_size(dt), count = (size_t)H_KV * m * D;
    unsigned char *k = malloc(count * es + 1), *v = malloc(count * es + 1);
    for (size_t i = 0; i < count; i++) {
        double a = (double)((int)((i + seed) * 37 % 101) - 50) / 16.0;
        double b = (double)((int)((i + seed) * 53 % 97) - 48) / 8.0;
        if (dt == ATTN_F32) {
            ((float *)k)[i] = (float)a;
            ((float *)v)[i] = (float)b;
        } else {
            ((double *)k)[i] = a;
            ((double *)v)[i] = b;
        }
    }
    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    if (m)
        CHECK_EQ_INT(sess_append(st, s, k, v, m, -1), CORE_OK);
    sess_release(st, s);
    free(k);
    free(v);
}

/* A new session: dtype, storage, window (left < 0: none). */
static void make(char *id, enum attn_dtype dt, int kv_store, long left, long sinks)
{
    struct sess_spec sp = {.shape = {.h = 2 * H_KV, .h_kv = H_KV, .d_k = D, .d_v = D}};
    sp.params.dtype = dt;
    sp.params.scale = 0.25;
    sp.kv_store = (enum kv_store)kv_store;
    sp.max_tokens = 100000;
    if (left >= 0) {
        sp.window = (struct attn_window){.on = true, .left = left, .right = -1, .sinks = sinks};
    }
    CHECK_EQ_INT(sess_create(st, &sp, id), CORE_OK);
}

/* The whole-buffer export of id now (malloc'd). */
static unsigned char *whole(const char *id, size_t *n)
{
    struct sess *s;
    void *b = NULL;
    *n = 0;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    CHECK_EQ_INT(sess_export(st, s, &b, n), CORE_OK);
    sess_release(st, s);
    return b;
}

static struct sess_exporter *begin(const char *id)
{
    struct sess *s;
    enum core_status rc = CORE_EINVAL;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    struct sess_exporter *ex = sess_export_begin(st, s, &rc);
    sess_release(st, s);
    CHECK_EQ_INT(rc, CORE_OK);
    CHECK(ex != NULL);
    return ex;
}

/* Read ex to its end in pieces of `piece` bytes (every read but the last
 * must fill its piece); the bytes (malloc'd) and their count. */
static unsigned char *read_all(struct sess_exporter *ex, size_t piece, size_t *n)
{
    size_t total = sess_export_size(ex), at = 0;
    unsigned char *b = malloc(total + piece + 1);
    for (;;) {
        size_t got = sess_export_read(ex, b + at, piece);
        at += got;
        if (got < piece)
            break;
        CHECK(at <= total);
        if (at > total)
            break;
    }
    CHECK(at == total);
    CHECK(sess_export_read(ex, b, piece) == 0);  /* past the end */
    *n = at;
    return b;
}

/* What sess_export_bytes counts for session id now. */
static size_t counted(const char *id)
{
    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    size_t n = sess_export_bytes(st, s);
    sess_release(st, s);
    return n;
}

/* Every piece size gives session id's whole export, whose bytes
 * sess_export_bytes counts. */
static void same_in_every_piece(const char *id, const char *what)
{
    size_t n;
    unsigned char *a = whole(id, &n);
    CHECK(counted(id) == n);
    if (counted(id) != n)
        printf("  %s: %zu bytes counted, %zu exported\n", what, counted(id), n);
    static const size_t big[] = {127, 128, 129, 4093, 4096, 65536, 1 << 20};
    size_t sizes[96 + sizeof big / sizeof big[0] + 2], ns = 0;
    for (size_t p = 1; p <= 96; p++)
        sizes[ns++] = p;
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        sizes[ns++] = big[i];
    sizes[ns++] = n > 1 ? n - 1 : 1;
    sizes[ns++] = n;
    for (size_t i = 0; i < ns; i++) {
        struct sess_exporter *ex = begin(id);
        if (!ex)
            break;
        CHECK(sess_export_size(ex) == n);
        size_t nb;
        unsigned char *b = read_all(ex, sizes[i], &nb);
        bool same = nb == n && memcmp(a, b, n) == 0;
        CHECK(same);
        if (!same) {
            printf("  %s: piece %zu differs (%zu vs %zu bytes)\n", what, sizes[i], nb, n);
            free(b);
            sess_export_free(ex);
            break;
        }
        free(b);
        sess_export_free(ex);
    }
    free(a);
}

TEST(pieces_equal_the_whole_export)
{
    char id[SESS_ID_MAX];
    static const struct { enum attn_dtype dt; int store; const char *what; } kinds[] = {
        {ATTN_F64, 0, "float64"}, {ATTN_F32, 0, "float32"}, {ATTN_F32, 1, "float16"},
        {ATTN_F32, 2, "bfloat16"}, {ATTN_F32, 3, "int8"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        make(id, kinds[i].dt, kinds[i].store, -1, 0);
        same_in_every_piece(id, kinds[i].what);        /* empty */
        append(id, kinds[i].dt, 150, (unsigned)i);      /* 2 full pages and part of one */
        append(id, kinds[i].dt, 1, 7);
        same_in_every_piece(id, kinds[i].what);
        CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
    }
}

TEST(pieces_of_rolling_and_forked_sessions)
{
    char id[SESS_ID_MAX], fid[SESS_ID_MAX];
    for (int store = 0; store <= 3; store += 3) {
        make(id, ATTN_F32, store, 100, 5);
        for (unsigned i = 0; i < 12; i++)
            append(id, ATTN_F32, 57, i);                /* rows let go past the sinks */
        struct sess *s;
        struct sess_held held;
        CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
        sess_held_rows(s, &held);
        CHECK_EQ_INT(sess_fork(st, s, fid), CORE_OK);
        sess_release(st, s);
        CHECK(held.from > 0);
        same_in_every_piece(id, "rolling");
        append(fid, ATTN_F32, 3, 99);                   /* its own copy of the last page */
        same_in_every_piece(fid, "fork of rolling");
        same_in_every_piece(id, "rolling parent");
        CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
        same_in_every_piece(fid, "fork, parent deleted");
        CHECK_EQ_INT(sess_delete(st, fid), CORE_OK);
    }
    make(id, ATTN_F64, 0, -1, 0);
    append(id, ATTN_F64, 100, 3);
    struct sess *s;
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    CHECK_EQ_INT(sess_fork(st, s, fid), CORE_OK);
    sess_release(st, s);
    append(fid, ATTN_F64, 30, 4);
    same_in_every_piece(fid, "fork");
    CHECK_EQ_INT(sess_delete(st, fid), CORE_OK);
    CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
}

/* The export begun before changes: the bytes of then, which import to the
 * session of then, while the session goes on; freed midway, every page is
 * given back. */
TEST(snapshot_holds_while_the_session_changes)
{
    for (int store = 0; store <= 3; store++) {
        char id[SESS_ID_MAX], nid[SESS_ID_MAX], why[SESS_WHY_MAX] = "";
        struct sess_stats before = stats();
        make(id, ATTN_F32, store, -1, 0);
        append(id, ATTN_F32, 130, 1);
        size_t n;
        unsigned char *a = whole(id, &n);
        struct sess_exporter *ex = begin(id), *cut = begin(id);
        if (!ex || !cut)
            return;
        unsigned char part[100];
        CHECK(sess_export_read(cut, part, sizeof part) == sizeof part);
        struct sess *s;
        CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
        CHECK_EQ_INT(sess_truncate(st, s, 70), CORE_OK);
        sess_release(st, s);
        append(id, ATTN_F32, 80, 2);                    /* over rows the snapshot holds */
        size_t nb;
        unsigned char *b = read_all(ex, 1000, &nb);
        CHECK(nb == n && memcmp(a, b, n) == 0);
        CHECK_EQ_INT(sess_import(st, b, nb, NULL, nid, why), CORE_OK);
        free(b);
        size_t n2;
        unsigned char *c = whole(nid, &n2);
        uint32_t id_len;
        memcpy(&id_len, a + 16, 4);
        size_t off = 20 + (size_t)id_len + 4 + 6 * 8 + 16;  /* past the id and clock */
        CHECK(n2 == n && strlen(nid) == id_len &&
              memcmp(a + off, c + off, n - off - 4) == 0);
        free(c);
        CHECK(store_length_of(st, id) == 150);                             /* the session went on */
        CHECK_EQ_INT(sess_delete(st, nid), CORE_OK);
        CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
        CHECK(stats().bytes > before.bytes);           /* the snapshots hold its pages */
        sess_export_free(ex);
        sess_export_free(cut);                          /* a client gone midway */
        CHECK(stats().bytes == before.bytes);
        free(a);
    }
}

static struct sess_info info_of(const char *id)
{
    struct sess *s;
    struct sess_info in;
    memset(&in, 0, sizeof in);
    CHECK_EQ_INT(sess_acquire(st, id, &s), CORE_OK);
    sess_get_info(st, s, &in);
    sess_release(st, s);
    return in;
}

/* While an export is read, the session shares its pages with the
 * snapshot; once the rows are read out (the checksum may still be to
 * come), the snapshot lets them go, before the exporter is freed: a client
 * that has the whole export finds the session's bytes its own again. */
TEST(the_pages_are_let_go_once_the_rows_are_out)
{
    char id[SESS_ID_MAX];
    make(id, ATTN_F32, 0, -1, 0);
    append(id, ATTN_F32, 70, 5);
    struct sess_info alone = info_of(id);
    CHECK(alone.bytes > 0 && alone.shared_bytes == 0);
    struct sess_exporter *ex = begin(id);
    if (!ex)
        return;
    CHECK(info_of(id).bytes == 0 && info_of(id).shared_bytes == alone.bytes);
    size_t total = sess_export_size(ex);
    unsigned char *b = malloc(total);
    CHECK(sess_export_read(ex, b, total - 4) == total - 4);    /* all but the CRC */
    CHECK(info_of(id).bytes == alone.bytes && info_of(id).shared_bytes == 0);
    CHECK(sess_export_read(ex, b + total - 4, 4) == 4);
    size_t n;
    unsigned char *w = whole(id, &n);
    CHECK(w && n == total && memcmp(w, b, n) == 0);
    sess_export_free(ex);
    free(w);
    free(b);
    CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
}

/* The parts of the header that only some sessions have: biases of each
 * width, ALiBi slopes and sink logits per head, an idempotency key (which
 * an export leaves out). */
TEST(export_bytes_count_every_part)
{
    double slopes[2 * H_KV], sinks[2 * H_KV], bq[D], bk[H_KV * D], bv[D];
    for (size_t i = 0; i < 2 * H_KV; i++) {
        slopes[i] = 1.0 / (double)(i + 2);
        sinks[i] = 0.25 * (double)i;
    }
    for (size_t i = 0; i < H_KV * D; i++)
        bk[i] = 0.5 * (double)i;
    for (size_t i = 0; i < D; i++)
        bq[i] = bv[i] = -0.125 * (double)i;
    struct sess_spec sp = {
        .shape = {.h = 2 * H_KV, .h_kv = H_KV, .d_k = D, .d_v = D},
        .params = {.dtype = ATTN_F64, .scale = 0.25, .softmax = ATTN_SOFTMAX_SINK,
                   .alibi = true, .alibi_slopes = slopes, .sink_logits = sinks},
        .bias_q = bq, .bias_q_heads = 1, .bias_k = bk, .bias_k_heads = H_KV,
        .bias_v = bv, .bias_v_heads = 1, .max_tokens = 1000};
    struct sess_idem key = {.scope = "default", .key = "a-key-of-some-length"};
    char id[SESS_ID_MAX];
    CHECK_EQ_INT(sess_create_idem(st, &sp, &key, id, NULL), CORE_OK);
    same_in_every_piece(id, "everything on, empty");
    append(id, ATTN_F64, 70, 5);
    same_in_every_piece(id, "everything on");
    CHECK_EQ_INT(sess_delete(st, id), CORE_OK);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096};
    attn_blas_init(1);
    st = sess_store_new(&cfg);
    sess_store_set_clock(st, fixed_clock, NULL);
    RUN(pieces_equal_the_whole_export);
    RUN(pieces_of_rolling_and_forked_sessions);
    RUN(snapshot_holds_while_the_session_changes);
    RUN(the_pages_are_let_go_once_the_rows_are_out);
    RUN(export_bytes_count_every_part);
    sess_store_free(st);
    TEST_MAIN_END();
}
