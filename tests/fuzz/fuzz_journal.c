/*
 * tests/fuzz/fuzz_journal.c — libFuzzer target: start-up from a --state-dir
 * whose snapshot and journal a crash, a full disk or a hostile hand left
 * behind (sess_store_open_journal of core/store.h; the readers of
 * core/journal.c and core/durable.c).
 *
 * Input: byte 0 holds flags, bytes 1-2 (little-endian) where the snapshot
 * ends, the rest is the snapshot's bytes, then the journal's. Flag bit 0
 * recomputes the CRC-32C of every frame whose length fits, so mutations get
 * past the checksums and reach the record parsers and the replay; bit 1
 * writes no snapshot; bit 2 writes no journal. The files are
 * snapshot.0000000000000001 and journal.0000000000000001 in a directory on
 * /dev/shm (where fsync costs nothing), opened by a store with small limits.
 *
 * Oracles, beyond ASan/UBSan/LeakSanitizer: opening never fails on bad
 * bytes; the store stays within max_sessions and max_cache_bytes; every
 * live session can be acquired and its length is within max_tokens; the
 * directory is then a clean snapshot, and opening it again gives the same
 * sessions with the same lengths.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/kv.h"
#include "core/replay.h"
#include "core/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char fj_dir[64];

static void fj_fail(const char *what)
{
    fprintf(stderr, "fuzz_journal: %s\n", what);
    abort();
}

static void fj_clear(void)
{
    DIR *d = opendir(fj_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

static void fj_cleanup(void)
{
    fj_clear();
    rmdir(fj_dir);
}

/* Write p[n] as dir/name, its frames' checksums recomputed when fix. */
static void fj_write(const char *name, const uint8_t *p, size_t n, bool fix)
{
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        fj_fail("malloc");
    memcpy(b, p, n);
    for (size_t off = JNL_HEADER_BYTES; fix && off + 4 <= n;) {
        uint32_t len;
        memcpy(&len, b + off, 4);
        if (len < 8 || len > n - off - 4 || n - off - 4 - len < 4)
            break;
        uint32_t crc = jnl_crc32c(0, b + off + 4, len);
        memcpy(b + off + 4 + len, &crc, 4);
        off += 4 + (size_t)len + 4;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/%s", fj_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n))
        fj_fail("cannot write the test file");
    fclose(f);
    free(b);
}

static void fj_quiet(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    (void)level;
    (void)msg;
}

static struct sess_store *fj_open(void)
{
    struct sess_config cfg = {
        .max_sessions = 4, .max_cache_bytes = 1u << 20, .default_ttl_s = 60,
        .default_max_tokens = 64, .policy = SESS_POLICY_REJECT, .replica_id = "f",
    };
    struct sess_store *st = sess_store_new(&cfg);
    if (!st)
        fj_fail("sess_store_new");
    struct sess_journal_config jc = {.dir = fj_dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = 1u << 30,
                                     .log = fj_quiet};
    if (sess_store_open_journal(st, &jc) != CORE_OK)
        fj_fail("opening a state directory with bad bytes failed as a whole");
    return st;
}

/* Every session's id and length; checks the store's limits. */
struct fj_seen {
    size_t n;
    char id[8][SESS_ID_MAX];
    size_t len[8];
    bool lasting[8];        /* will not expire before the second start */
};

static void fj_walk(struct sess_store *st, struct fj_seen *seen)
{
    struct sess_stats ss;
    sess_store_stats(st, &ss);
    if (ss.sessions > 4 || ss.bytes > (1u << 20))
        fj_fail("the store is over its limits after a replay");
    /* ids are not enumerable through store.h: the snapshot written at open
     * lists them; read them back from there */
    seen->n = 0;
    char path[400];
    DIR *d = opendir(fj_dir);
    struct dirent *e;
    path[0] = '\0';
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "snapshot.", 9) == 0 && strlen(e->d_name) == 25)
            snprintf(path, sizeof path, "%s/%s", fj_dir, e->d_name);
    if (d)
        closedir(d);
    struct jnl_reader r;
    if (!path[0] || jnl_read_open(&r, path, JNL_MAGIC_SNAPSHOT) != CORE_OK)
        fj_fail("no readable snapshot after opening");
    uint64_t lsn;
    const void *p;
    size_t n;
    int got;
    bool first = true;
    while ((got = jnl_read_next(&r, &lsn, &p, &n)) == 1 && seen->n < 8) {
        /* payload: u32 type, f64 wall, then persist's encoding: magic,
         * version, bom, u32 id_len, id; or, first, the begin record and,
         * last, the end record */
        uint32_t idlen, type = 0;
        if (n >= 4)
            memcpy(&type, p, 4);
        if (first != (type == SESS_REC_BEGIN))
            fj_fail("the snapshot's first record is not its begin record, or not only it");
        if (first) {
            if (n != SESS_REC_BEGIN_BYTES || lsn != 0)
                fj_fail("the snapshot's begin record is malformed");
            first = false;
            continue;
        }
        if (type == SESS_REC_END) {
            uint64_t count = 0;
            if (n != SESS_REC_END_BYTES || r.off != r.size)
                fj_fail("the snapshot's end record is malformed or not its last");
            memcpy(&count, (const char *)p + 12, 8);
            if (count != seen->n)
                fj_fail("the snapshot's end record counts another number of records");
            continue;
        }
        if (n < 12 + 20)
            fj_fail("a snapshot record too short");
        memcpy(&idlen, (const char *)p + 12 + 16, 4);
        if (idlen == 0 || idlen >= SESS_ID_MAX || n < 12 + 20 + idlen)
            fj_fail("a snapshot record with a bad id");
        memcpy(seen->id[seen->n], (const char *)p + 32, idlen);
        seen->id[seen->n][idlen] = '\0';
        struct sess *s;
        if (sess_acquire(st, seen->id[seen->n], &s) != CORE_OK)
            fj_fail("a session in the snapshot cannot be acquired");
        seen->len[seen->n] = sess_length(s);
        struct sess_info info;
        sess_get_info(st, s, &info);
        seen->lasting[seen->n] = info.expires_in_s < 0 || info.expires_in_s > 10;
        if (seen->len[seen->n] > sess_spec(s)->max_tokens)
            fj_fail("a restored session is longer than its max_tokens");
        sess_release(st, s);
        seen->n++;
    }
    if (got < 0)
        fj_fail("the snapshot written at open is damaged");
    if (seen->n != ss.sessions)
        fj_fail("the snapshot does not hold every session");
    jnl_read_close(&r);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    attn_blas_init(1);
    snprintf(fj_dir, sizeof fj_dir, "/dev/shm/fuzz_journal.XXXXXX");
    if (!mkdtemp(fj_dir)) {
        snprintf(fj_dir, sizeof fj_dir, "/tmp/fuzz_journal.XXXXXX");
        if (!mkdtemp(fj_dir))
            fj_fail("mkdtemp");
    }
    atexit(fj_cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    if (!fj_dir[0])
        LLVMFuzzerInitialize(NULL, NULL);
    uint8_t flags = data[0];
    size_t split = (size_t)data[1] | (size_t)data[2] << 8;
    const uint8_t *body = data + 3;
    size_t n = size - 3;
    if (split > n)
        split = n;
    fj_clear();
    if (!(flags & 2))
        fj_write("snapshot.0000000000000001", body, split, flags & 1);
    if (!(flags & 4))
        fj_write("journal.0000000000000001", body + split, n - split, flags & 1);
    struct sess_store *st = fj_open();
    struct fj_seen a, b;
    fj_walk(st, &a);
    sess_store_free(st);
    st = fj_open();
    fj_walk(st, &b);
    for (size_t j = 0; j < b.n; j++) {
        size_t i = 0;
        while (i < a.n && strcmp(a.id[i], b.id[j]) != 0)
            i++;
        if (i == a.n || a.len[i] != b.len[j])
            fj_fail("a second start found another session or length");
    }
    for (size_t i = 0; i < a.n; i++) {
        size_t j = 0;
        while (j < b.n && strcmp(a.id[i], b.id[j]) != 0)
            j++;
        if (j == b.n && a.lasting[i])
            fj_fail("a second start lost a session");
    }
    sess_store_free(st);
    return 0;
}
