/*
 * server/keys.c — API keys: parsed from --api-key-file, checked in
 * constant time, swapped whole on SIGHUP.
 *
 * File format: one key per line, `name:key` (split at the first colon) or a
 * bare `key` (named key-LINE); blank lines and lines starting with '#' are
 * skipped, spaces around name and key trimmed. Names are 1-63 characters of
 * [A-Za-z0-9_.-] but not "-" or "other", which the metrics give the
 * clients without a key and the names past their table (names become log
 * fields and metric labels); keys are 1-511
 * printable characters without spaces. A duplicate name or key, a bad line,
 * an empty file, a file over 1 MiB or one that others may read refuses the
 * whole file (at start: exit 2; on reload: the keys in use stay). The set
 * is a flat array behind a read-write lock: a lookup copies the name out, so
 * a reload never frees what a reader still holds.
 *
 * Constant time: every key is compared over the token's whole length (a
 * byte past a key's end compares against 0 and the lengths are compared as
 * data), and the loop never stops at a match, so the time depends on the
 * token's length and the number of keys, not on which bytes matched. A
 * token of KEY_MAX bytes or more, longer than any key, is compared over its
 * first KEY_MAX only (and matches none): the client chooses the token's
 * length, and a 60 KB one against 4096 keys took 125 ms of a transport
 * thread (every request is identified there, probes included).
 */
#include "server/keys.h"

#include "api/api.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/log.h"

#define KEY_MAX 512
#define FILE_MAX ((long)1 << 20)
#define KEYS_MAX 4096

struct key {
    char name[SRV_KEY_NAME_MAX];
    char key[KEY_MAX];
    size_t len;
};

struct key_set {
    struct key *v;
    size_t n, cap;
};

struct srv_keys {
    pthread_rwlock_t lock;
    struct key_set set;
    char file[1024];
    char single[KEY_MAX];
};


static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= SRV_KEY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

static bool key_ok(const char *s, size_t n)
{
    if (n == 0 || n >= KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)s[i]))
            return false;
    return true;
}

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

static int add_key(struct key_set *ks, const char *name, size_t nn, const char *key,
                   size_t kn, char *why, size_t cap, const char *where)
{
    for (size_t i = 0; i < ks->n; i++) {
        if (strlen(ks->v[i].name) == nn && memcmp(ks->v[i].name, name, nn) == 0)
            return srv_whyf(why, cap, "%s: the name '%.*s' is used twice", where, (int)nn, name);
        if (ks->v[i].len == kn && memcmp(ks->v[i].key, key, kn) == 0)
            return srv_whyf(why, cap, "%s: the same key appears twice", where);
    }
    if (ks->n == KEYS_MAX)
        return srv_whyf(why, cap, "%s: more than %d keys", where, KEYS_MAX);
    if (ks->n == ks->cap) {
        size_t nc = ks->cap ? ks->cap * 2 : 4;
        struct key *nv = realloc(ks->v, nc * sizeof *nv);
        if (!nv)
            return srv_whyf(why, cap, "out of memory");
        ks->v = nv;
        ks->cap = nc;
    }
    struct key *k = &ks->v[ks->n++];
    memcpy(k->name, name, nn);
    k->name[nn] = '\0';
    memcpy(k->key, key, kn);
    k->len = kn;
    return 0;
}

/* One line of the file (not NUL-terminated) into ks. */
static int parse_line(struct key_set *ks, const char *s, size_t n, size_t lineno,
                      const char *file, char *why, size_t cap)
{
    trim(&s, &n);
    if (n == 0 || s[0] == '#')
        return 0;
    char where[1100], auto_name[32];
    snprintf(where, sizeof where, "--api-key-file %s line %zu", file, lineno);
    const char *colon = memchr(s, ':', n);
    const char *name = auto_name, *key = s;
    size_t nn, kn = n;
    if (colon) {
        name = s;
        nn = (size_t)(colon - s);
        key = colon + 1;
        kn = n - nn - 1;
        trim(&name, &nn);
        trim(&key, &kn);
        if (!name_ok(name, nn))
            return srv_whyf(why, cap, "%s: a name is 1-63 characters of A-Z a-z 0-9 _ . -", where);
        if (nn == 1 && name[0] == '-')
            return srv_whyf(why, cap, "%s: the name '-' is taken: it labels the clients "
                            "without a key in /metrics", where);
        if (nn == 5 && memcmp(name, "other", 5) == 0)
            return srv_whyf(why, cap, "%s: the name 'other' is taken: it labels the keys "
                            "past the 63rd name in /metrics", where);
    } else {
        nn = (size_t)snprintf(auto_name, sizeof auto_name, "key-%zu", lineno);
    }
    if (!key_ok(key, kn))
        return srv_whyf(why, cap, "%s: a key is 1-511 printable characters without spaces", where);
    return add_key(ks, name, nn, key, kn, why, cap, where);
}

/* Read the file's keys into ks. */
static int parse_file(struct key_set *ks, const char *file, char *why, size_t cap)
{
    struct stat st;
    if (stat(file, &st) != 0)
        return srv_whyf(why, cap, "--api-key-file %s: %s", file, strerror(errno));
    if (st.st_mode & S_IRWXO)
        return srv_whyf(why, cap, "--api-key-file %s: mode %04o lets other users %s it; "
                    SRV_SECRET_MODE_FIX, file, (unsigned)(st.st_mode & 07777),
                    srv_mode_others(st.st_mode));
    FILE *f = fopen(file, "re");
    if (!f)
        return srv_whyf(why, cap, "--api-key-file %s: %s", file, strerror(errno));
    char *buf = malloc((size_t)FILE_MAX + 1);
    size_t len = buf ? fread(buf, 1, (size_t)FILE_MAX + 1, f) : 0;
    bool err = ferror(f);
    fclose(f);
    int rc = 0;
    if (!buf)
        rc = srv_whyf(why, cap, "out of memory");
    else if (err)
        rc = srv_whyf(why, cap, "--api-key-file %s: read error", file);
    else if (len > (size_t)FILE_MAX)
        rc = srv_whyf(why, cap, "--api-key-file %s: larger than 1 MiB", file);
    size_t lineno = 1;
    for (size_t i = 0; rc == 0 && i < len; lineno++) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len;
        rc = parse_line(ks, buf + i, end - i, lineno, file, why, cap);
        i = end + 1;
    }
    if (buf) {
        memset(buf, 0, len < (size_t)FILE_MAX ? len : (size_t)FILE_MAX);
        free(buf);
    }
    if (rc == 0 && ks->n == 0)
        rc = srv_whyf(why, cap, "--api-key-file %s: no keys in it", file);
    return rc;
}

static void set_free(struct key_set *ks)
{
    if (ks->v) {
        memset(ks->v, 0, ks->cap * sizeof *ks->v);
        free(ks->v);
    }
    ks->v = NULL;
    ks->n = ks->cap = 0;
}

static int load(struct srv_keys *k, struct key_set *out, char *why, size_t cap)
{
    struct key_set ks = {NULL, 0, 0};
    int rc = 0;
    if (k->single[0])
        rc = add_key(&ks, "default", 7, k->single, strlen(k->single), why, cap, "--api-key");
    if (rc == 0 && k->file[0])
        rc = parse_file(&ks, k->file, why, cap);
    if (rc != 0) {
        set_free(&ks);
        return rc;
    }
    *out = ks;
    return 0;
}

struct srv_keys *srv_keys_open(const char *file, const char *single, char *why, size_t cap)
{
    struct srv_keys *k = calloc(1, sizeof *k);
    if (!k) {
        srv_whyf(why, cap, "out of memory");
        return NULL;
    }
    if (strlen(file) >= sizeof k->file || strlen(single) >= sizeof k->single) {
        srv_whyf(why, cap, "--api-key-file path or --api-key too long");
        free(k);
        return NULL;
    }
    memcpy(k->file, file, strlen(file) + 1);
    memcpy(k->single, single, strlen(single) + 1);
    if (load(k, &k->set, why, cap) != 0) {
        free(k);
        return NULL;
    }
    pthread_rwlock_init(&k->lock, NULL);
    return k;
}

int srv_keys_reload(struct srv_keys *k, char *why, size_t cap)
{
    struct key_set ks;
    if (load(k, &ks, why, cap) != 0)
        return -1;
    pthread_rwlock_wrlock(&k->lock);
    struct key_set old = k->set;
    k->set = ks;
    pthread_rwlock_unlock(&k->lock);
    set_free(&old);
    return 0;
}

size_t srv_keys_count(struct srv_keys *k)
{
    pthread_rwlock_rdlock(&k->lock);
    size_t n = k->set.n;
    pthread_rwlock_unlock(&k->lock);
    return n;
}

bool srv_keys_check(struct srv_keys *k, const char *token, char name[SRV_KEY_NAME_MAX])
{
    size_t tn = api_field_len(token);
    size_t hit = SIZE_MAX, cmp = tn < KEY_MAX ? tn : KEY_MAX;
    pthread_rwlock_rdlock(&k->lock);
    for (size_t i = 0; i < k->set.n; i++) {
        const struct key *e = &k->set.v[i];
        unsigned diff = (unsigned)(e->len != tn);
        for (size_t j = 0; j < cmp; j++)
            diff |= (unsigned char)(token[j] ^ (j < e->len ? e->key[j] : 0));
        size_t mask = (size_t)0 - (size_t)(diff == 0);    /* all ones on a match */
        hit = (hit & ~mask) | (i & mask);
    }
    bool ok = hit != SIZE_MAX;
    if (ok)
        memcpy(name, k->set.v[hit].name, SRV_KEY_NAME_MAX);
    pthread_rwlock_unlock(&k->lock);
    return ok;
}

void srv_keys_free(struct srv_keys *k)
{
    if (!k)
        return;
    set_free(&k->set);
    pthread_rwlock_destroy(&k->lock);
    memset(k->single, 0, sizeof k->single);
    free(k);
}
