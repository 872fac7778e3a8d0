/*
 * tests/fuzz/fuzz_import.c — libFuzzer target: POST /v1/sessions/import's
 * parser, sess_import of core/persist.h, over bodies a broken proxy, a
 * truncated upload or a hostile client sends.
 *
 * Input: byte 0 holds flags, the rest is the body. Flag bit 0 rewrites the
 * body's last 4 bytes with its right CRC-32C (so mutations get past the
 * checksum and reach the parser, the limits and the cache); bit 1 makes the
 * store's policy lru (else reject); bit 2 fills the store with one session
 * first; bit 3 passes no limits (else --max-elements 4096, --max-tokens
 * 4096); bit 4 feeds the body piece by piece as an upload arrives
 * (sess_import_begin/feed/end) in pieces of 1, 7, 61 or 4093 bytes (bits
 * 5-6), its size announced unless bit 7 is set. The store holds at most 2
 * sessions and 256 KiB.
 *
 * Oracles, beyond ASan/UBSan/LeakSanitizer: the answer is CORE_OK or one of
 * the documented refusals, with a reason for the three the API words; a
 * refusal leaves the store's sessions, bytes and created count as they
 * were; an import stays within the limits (sessions, bytes, max_tokens,
 * the row width), can be acquired, attends cleanly or with finite numbers,
 * and exports again to bytes that import again into the same bytes (past
 * the id and the clock).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/journal.h"
#include "core/persist.h"
#include "core/store.h"
#include "tests/fuzz/fuzz_sess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FI_MAX_BYTES (256u << 10)
#define FI_LIMIT 4096

static void fi_fail(const char *what)
{
    fprintf(stderr, "fuzz_import: %s\n", what);
    abort();
}

static struct sess_store *fi_store(bool lru)
{
    struct sess_config cfg = {
        .max_sessions = 2, .max_cache_bytes = FI_MAX_BYTES, .default_ttl_s = 60,
        .default_max_tokens = 64, .replica_id = "fz",
        .policy = lru ? SESS_POLICY_LRU : SESS_POLICY_REJECT,
    };
    struct sess_store *st = sess_store_new(&cfg);
    if (!st)
        fi_fail("sess_store_new");
    return st;
}

static void fi_stats(struct sess_store *st, struct sess_stats *s)
{
    sess_store_stats(st, s);
}

/* Offset past the id and the clock of an encoding (after magic, version,
 * bom, id, the packed dtypes, six u64 and two f64), or 0 if too short. */
static size_t fi_after_clock(const unsigned char *p, size_t n)
{
    uint32_t id_len;
    if (n < 20)
        return 0;
    memcpy(&id_len, p + 16, 4);
    size_t off = 20 + (size_t)id_len + 4 + 6 * 8 + 16;
    return id_len < 256 && off <= n ? off : 0;
}

/* The ttl_s of an encoding (0 when too short): one under a second may run
 * out before the session is looked at. */
static double fi_ttl(const unsigned char *p, size_t n)
{
    size_t off = fi_after_clock(p, n);
    double ttl = 0;
    if (off)
        memcpy(&ttl, p + off - 16, sizeof ttl);
    return ttl;
}

/* The export of id (held now), malloc'd. */
static void *fi_export(struct sess_store *st, const char *id, size_t *n)
{
    struct sess *s;
    void *bytes = NULL;
    if (sess_acquire(st, id, &s) != CORE_OK)
        return NULL;                    /* a ttl under a second ran out */
    if (sess_export(st, s, &bytes, n) != CORE_OK)
        bytes = NULL;
    sess_release(st, s);
    return bytes;
}

/* What an accepted import (of body[n]) must hold to. */
static void fi_accepted(struct sess_store *st, const char *id,
                        const struct sess_import_limits *lim,
                        const unsigned char *body, size_t n)
{
    struct sess *s;
    struct sess_info info;
    if (strncmp(id, "fz.", 3) != 0)
        fi_fail("an imported id lacks this replica's prefix");
    if (sess_acquire(st, id, &s) != CORE_OK) {
        double ttl = fi_ttl(body, n);
        if (ttl > 0 && ttl < 1)
            return;                     /* expired already */
        fi_fail("an imported session cannot be acquired");
    }
    sess_get_info(st, s, &info);
    const struct attn_shape *sh = &sess_spec(s)->shape;
    /* max_tokens bounds the rows held: all of them, or a rolling
     * session's sinks' pages and window */
    size_t held = info.held.from ? info.held.front + (info.held.length - info.held.from)
                                 : info.length;
    if (held > info.max_tokens || (lim && info.max_tokens > lim->max_tokens))
        fi_fail("imported past max_tokens");
    if (lim && (sh->h * sh->d_k > lim->max_row_elements ||
                sh->h_kv * (sh->d_k + sh->d_v) > lim->max_row_elements))
        fi_fail("imported past the row width limit");
    if (!fz_attend_finite(st, s))
        fi_fail("an imported session answered a non-finite output");
    sess_release(st, s);

    /* export, import into a fresh store, export again: the same bytes */
    size_t n1 = 0, n2 = 0;
    unsigned char *a = fi_export(st, id, &n1);
    struct sess_store *st2 = fi_store(false);
    char id2[SESS_ID_MAX];
    if (a && sess_import(st2, a, n1, NULL, id2, NULL) == CORE_OK) {
        unsigned char *b = fi_export(st2, id2, &n2);
        size_t off = fi_after_clock(a, n1);
        if (b && (n1 != n2 || off == 0 || memcmp(a, b, 16) != 0 ||
                  memcmp(a + off, b + off, n1 - off - 4) != 0))
            fi_fail("export -> import -> export changed the bytes");
        free(b);
    } else if (a) {
        fi_fail("an export of an imported session does not import");
    }
    free(a);
    sess_store_free(st2);
}

/* The import of body[n], whole or (flags bit 4) piece by piece. */
static enum core_status fi_import(struct sess_store *st, const unsigned char *body, size_t n,
                                  const struct sess_import_limits *lp, uint8_t flags,
                                  char *id, char *why)
{
    static const size_t piece[4] = {1, 7, 61, 4093};
    if (!(flags & 16))
        return sess_import(st, body, n, lp, id, why);
    struct sess_importer *im = sess_import_begin(st, lp, (flags & 128) ? SIZE_MAX : n);
    if (!im)
        fi_fail("sess_import_begin");
    size_t k = piece[(flags >> 5) & 3];
    for (size_t at = 0; at < n; at += k)
        sess_import_feed(im, body + at, k < n - at ? k : n - at);
    enum core_status rc = sess_import_end(im, id, NULL);
    snprintf(why, SESS_WHY_MAX, "%s", sess_import_why(im));
    sess_import_free(im);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool blas;
    if (!blas) {
        attn_blas_init(1);
        blas = true;
    }
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t n = size - 1;
    unsigned char *body = malloc(n ? n : 1);   /* its own, exactly sized block */
    if (!body)
        fi_fail("malloc");
    memcpy(body, data + 1, n);
    if ((flags & 1) && n >= 4) {
        uint32_t c = jnl_crc32c(0, body, n - 4);
        memcpy(body + n - 4, &c, 4);
    }
    struct sess_store *st = fi_store(flags & 2);
    char id[SESS_ID_MAX], why[SESS_WHY_MAX];
    if (flags & 4) {
        struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 4, .d_v = 4}};
        sp.params.dtype = ATTN_F64;
        sp.params.scale = 0.5;
        if (sess_create(st, &sp, id) != CORE_OK)
            fi_fail("sess_create");
    }
    struct sess_import_limits lim = {.max_row_elements = FI_LIMIT, .max_tokens = FI_LIMIT};
    const struct sess_import_limits *lp = (flags & 8) ? NULL : &lim;
    struct sess_stats before, after;
    fi_stats(st, &before);
    why[0] = '\0';
    enum core_status rc = fi_import(st, body, n, lp, flags, id, why);
    fi_stats(st, &after);
    if (after.bytes > FI_MAX_BYTES || after.sessions > 2)
        fi_fail("imported past the store's limits");
    if (rc == CORE_OK) {
        if (after.created != before.created + 1)
            fi_fail("an import was not counted as created");
        fi_accepted(st, id, lp, body, n);
    } else {
        if (rc != CORE_ECORRUPT && rc != CORE_ELIMIT && rc != CORE_ECAPACITY &&
            rc != CORE_ENOMEM)
            fi_fail(core_status_text(rc));      /* an undocumented status */
        if (rc != CORE_ENOMEM && why[0] == '\0')
            fi_fail(core_status_text(rc));      /* a refusal without a reason */
        if (after.created != before.created || after.bytes > before.bytes ||
            after.sessions > before.sessions)
            fi_fail("a refused import changed the store");
        if (!(flags & 2) && (after.bytes != before.bytes || after.sessions != before.sessions))
            fi_fail("a refused import changed the store");
    }
    sess_store_free(st);
    free(body);
    return 0;
}
