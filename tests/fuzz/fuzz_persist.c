/*
 * tests/fuzz/fuzz_persist.c — libFuzzer target: restoring sessions from
 * --state-dir files (sess_store_load of core/store.h, format in
 * core/persist.c) that a crash, a full disk or a hostile hand left behind.
 *
 * Input: byte 0 holds flags, the rest is the content of one "<id>.sess"
 * file. Flag bit 0 appends the file's correct checksum (CRC-32 up to version
 * 3, CRC-32C from version 4), so mutations get past
 * the checksum and reach the parser and the restore; bit 1 writes the file a
 * second time under another name (a duplicate id). The file is loaded into a
 * fresh store with small limits.
 *
 * Oracles, beyond ASan/UBSan/LeakSanitizer: loading never fails as a whole
 * (bad files are skipped); the store stays within max_sessions and
 * max_cache_bytes and holds at most one session per distinct id; a restored
 * session can be acquired by the id in the file (unless the file's ttl had
 * run out), its length is within max_tokens, its ttl is positive and finite, and attending over it either fails cleanly or answers finite
 * numbers; saving the restored store and loading that again gives the same
 * sessions and bytes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/journal.h"
#include "core/store.h"
#include "tests/fuzz/fuzz_sess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char pz_dir[64], pz_dir2[64];
static uint32_t pz_crc_tab[256];

static void pz_fail(const char *what)
{
    fprintf(stderr, "fuzz_persist: %s\n", what);
    abort();
}

/* CRC-32 (IEEE), as core/persist_read.c checks it, to forge valid files. */
static uint32_t pz_crc(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = pz_crc_tab[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

static void pz_clear(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

static void pz_write(const char *name, const uint8_t *p, size_t n, bool crc)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", pz_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        pz_fail("cannot write the test file");
    if (n && fwrite(p, 1, n, f) != n)
        pz_fail("short write");
    if (crc) {
        uint32_t version = 0, c;
        if (n >= 12)
            memcpy(&version, p + 8, sizeof version);
        c = version >= 4 ? jnl_crc32c(0, p, n) : pz_crc(p, n);
        fwrite(&c, 1, sizeof c, f);
    }
    fclose(f);
}

static struct sess_store *pz_store(void)
{
    struct sess_config cfg = {
        .max_sessions = 4, .max_cache_bytes = 1u << 20, .default_ttl_s = 60,
        .default_max_tokens = 64, .policy = SESS_POLICY_REJECT,
    };
    struct sess_store *st = sess_store_new(&cfg);
    if (!st)
        pz_fail("sess_store_new");
    return st;
}

/* The id stored in the file (after magic, version, bom), or "" if none. */
static void pz_file_id(const uint8_t *p, size_t n, char *id)
{
    uint32_t len;
    id[0] = '\0';
    if (n < 20)
        return;
    memcpy(&len, p + 16, sizeof len);
    if (len == 0 || len >= SESS_ID_MAX || n < 20 + (size_t)len)
        return;
    memcpy(id, p + 20, len);
    id[len] = '\0';
}

/* ttl_s - idle_s of the file: how long the restored session has left
 * (offsets after the id: u32 dtype, 6 x u64, then f64 ttl_s, f64 idle_s). */
static double pz_file_time_left(const uint8_t *p, size_t n, size_t id_len)
{
    size_t off = 20 + id_len + 4 + 6 * 8;
    double ttl, idle;
    if (n < off + 16)
        return 0;
    memcpy(&ttl, p + off, sizeof ttl);
    memcpy(&idle, p + off + 8, sizeof idle);
    if (!(idle >= 0) || !isfinite(ttl))
        return 0;                   /* corrupt clock fields: no promise */
    return ttl - idle;
}

static void pz_cleanup(void)
{
    pz_clear(pz_dir);
    pz_clear(pz_dir2);
    rmdir(pz_dir);
    rmdir(pz_dir2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    attn_blas_init(1);
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        pz_crc_tab[i] = c;
    }
    snprintf(pz_dir, sizeof pz_dir, "/tmp/fuzz_persist.XXXXXX");
    snprintf(pz_dir2, sizeof pz_dir2, "/tmp/fuzz_persist2.XXXXXX");
    if (!mkdtemp(pz_dir) || !mkdtemp(pz_dir2))
        pz_fail("mkdtemp");
    atexit(pz_cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!pz_dir[0])
        LLVMFuzzerInitialize(NULL, NULL);
    const uint8_t *file = data + 1;
    size_t n = size - 1;
    bool crc = data[0] & 1, twice = data[0] & 2;

    pz_clear(pz_dir);
    pz_clear(pz_dir2);
    pz_write("a.sess", file, n, crc);
    if (twice)
        pz_write("b.sess", file, n, crc);

    struct sess_store *st = pz_store();
    if (sess_store_load(st, pz_dir, NULL, NULL) != CORE_OK)
        pz_fail("load of a readable directory failed as a whole");
    struct sess_stats stats;
    sess_store_stats(st, &stats);
    if (stats.sessions > 1)
        pz_fail("one id restored more than once");
    if (stats.bytes > (1u << 20))
        pz_fail("restored past max_cache_bytes");

    if (stats.sessions == 1) {
        char id[SESS_ID_MAX];
        struct sess *s;
        pz_file_id(file, n, id);
        enum core_status rc = sess_acquire(st, id, &s);
        if (rc == CORE_ENOTFOUND && !(pz_file_time_left(file, n, strlen(id)) > 1.0)) {
            sess_store_free(st);        /* restored already expired: fine */
            return 0;
        }
        if (rc != CORE_OK)
            pz_fail("a restored session cannot be acquired by its id");
        struct sess_info info;
        sess_get_info(st, s, &info);
        if (info.length > info.max_tokens)
            pz_fail("restored past max_tokens");
        if (!(info.ttl_s > 0) || !isfinite(info.ttl_s) || !isfinite(info.expires_in_s))
            pz_fail("restored with a ttl that is not a positive finite number");
        if (!fz_attend_finite(st, s))
            pz_fail("a restored session answered a non-finite output");
        sess_release(st, s);

        if (sess_store_save(st, pz_dir2, NULL, NULL) == CORE_OK) {
            struct sess_store *st2 = pz_store();
            struct sess_stats stats2;
            if (sess_store_load(st2, pz_dir2, NULL, NULL) != CORE_OK)
                pz_fail("reload failed");
            sess_store_stats(st2, &stats2);
            if (stats2.sessions != stats.sessions || stats2.bytes != stats.bytes)
                pz_fail("save + load changed the store");
            sess_store_free(st2);
        }
    }
    sess_store_free(st);
    return 0;
}
