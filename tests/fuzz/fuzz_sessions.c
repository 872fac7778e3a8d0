/*
 * tests/fuzz/fuzz_sessions.c — libFuzzer target: sequences of session
 * operations on the store (core/store.h), decoded from bytes, with the
 * store's invariants checked after every step against a simple model.
 *
 * Byte 0 picks the eviction policy and the global limits; then each op is a
 * byte (op kind + which session) followed by its arguments:
 *   create (rolling, with a window of left <= 7 and sinks 0 or 2 and
 *   max_tokens 64..304, when the first argument's top bit is set; else a
 *   float32 one may store its rows as float16, bfloat16 or int8), append,
 *   attend (optionally
 *   appending), truncate, fork, delete, advance the clock (and sometimes
 *   sweep), acquire a garbage id.
 * K/V values come from the input too; two byte values stand for NaN and
 * 1e308 so non-finite rejections (all or nothing) are exercised.
 *
 * The model knows each live session's length, max_tokens, ttl and when it
 * was last used. After every step: every modelled session is acquired; a
 * session may vanish only by TTL expiry (the clock passed its ttl) or by the
 * LRU policy; one whose ttl has clearly passed must be gone; lengths equal
 * the model (failed operations changed nothing) and the rows held stay <=
 * max_tokens (a rolling session's length may pass it; its rows held stay
 * within its sinks' pages, left and one page, and a truncate into the rows
 * it let go is the only truncate within the length it may refuse);
 * after a sweep the store's session count and accounted bytes equal the sum
 * over the live sessions, within max_sessions and max_cache_bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/store.h"

#define FZ_MAX 8                    /* sessions tracked by the model */
#define FZ_ROWS 6                   /* rows appended at most per op */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

struct fz_sess {
    bool live;
    char id[SESS_ID_MAX];
    size_t h, h_kv, d_k, d_v;
    enum attn_dtype dtype;
    size_t length;
    size_t max_tokens;
    bool rolling;                   /* window {left, sinks} */
    size_t left, sinks;
    double ttl;
    double last_used;               /* model clock when last acquired */
};

struct fz {
    const uint8_t *p;
    size_t left;
    struct sess_store *st;
    struct sess_config cfg;
    double now;
    struct fz_sess s[FZ_MAX];
    struct attn_ws *ws;
};

static void fz_fail(const char *what, size_t i)
{
    fprintf(stderr, "fuzz_sessions: %s (session slot %zu)\n", what, i);
    abort();
}

static uint8_t fz_byte(struct fz *f)
{
    if (!f->left)
        return 0;
    f->left--;
    return *f->p++;
}

static double fz_clock(void *arg)
{
    return ((struct fz *)arg)->now;
}

/* A value for k/v/q: small numbers, plus NaN and 1e308 now and then. */
static double fz_value(struct fz *f)
{
    uint8_t b = fz_byte(f);
    if (b == 0xff)
        return NAN;
    if (b == 0xfe)
        return 1e308;
    return ((double)b - 128.0) / 32.0;
}

/* n values of dtype into a new buffer. */
static void *fz_values(struct fz *f, enum attn_dtype dt, size_t n)
{
    void *buf = malloc(n ? n * attn_dtype_size(dt) : 1);
    if (!buf)
        abort();
    for (size_t i = 0; i < n; i++) {
        double x = fz_value(f);
        if (dt == ATTN_F32)
            ((float *)buf)[i] = (float)x;
        else
            ((double *)buf)[i] = x;
    }
    return buf;
}

static int fz_free_slot(struct fz *f)
{
    for (int i = 0; i < FZ_MAX; i++)
        if (!f->s[i].live)
            return i;
    return -1;
}

static void fz_create(struct fz *f)
{
    int slot = fz_free_slot(f);
    uint8_t a = fz_byte(f), b = fz_byte(f), c = fz_byte(f);
    struct sess_spec spec;

    memset(&spec, 0, sizeof spec);
    spec.shape.h_kv = 1 + (a & 1);
    spec.shape.h = spec.shape.h_kv * (1 + ((a >> 1) & 1));
    spec.shape.d_k = 1 + ((a >> 2) & 3);
    spec.shape.d_v = 1 + ((a >> 4) & 3);
    spec.params.dtype = (a & 64) ? ATTN_F32 : ATTN_F64;
    spec.params.scale = attn_default_scale(spec.shape.d_k);
    spec.params.softmax = (enum attn_softmax)(b % 3);
    spec.params.sink_logit = 1.0;
    spec.params.rope = (b & 4) != 0;        /* odd d_k: must be refused */
    spec.params.rope_base = 10000;
    spec.params.alibi = (b & 8) != 0;
    spec.max_tokens = (c & 15);             /* 0: the default */
    if (a & 0x80) {     /* pages are 64 rows: room to let some go */
        spec.window = (struct attn_window){.on = true, .left = (b >> 4) & 7, .right = -1,
                                           .sinks = (b >> 7) * 2};
        spec.max_tokens = 64 + 16 * (c & 15);
    } else if (spec.params.dtype == ATTN_F32) {  /* b's spare bits: a narrower cache */
        spec.kv_store = (enum kv_store)((b >> 4) & 3);
    }
    spec.ttl_s = 1 + (c >> 4);
    char id[SESS_ID_MAX];
    enum core_status rc = sess_create(f->st, &spec, id);
    if (rc == CORE_OK && spec.params.rope && spec.shape.d_k % 2)
        fz_fail("RoPE with odd d_k accepted", 0);
    if (rc != CORE_OK || slot < 0) {
        if (rc == CORE_OK)                  /* no slot to model it: delete */
            if (sess_delete(f->st, id) != CORE_OK)
                fz_fail("cannot delete a session just created", 0);
        return;
    }
    struct fz_sess *s = &f->s[slot];
    memset(s, 0, sizeof *s);
    s->live = true;
    memcpy(s->id, id, sizeof id);
    s->h = spec.shape.h;
    s->h_kv = spec.shape.h_kv;
    s->d_k = spec.shape.d_k;
    s->d_v = spec.shape.d_v;
    s->dtype = spec.params.dtype;
    s->max_tokens = spec.max_tokens ? spec.max_tokens : f->cfg.default_max_tokens;
    s->ttl = spec.ttl_s;
    s->last_used = f->now;
    s->rolling = spec.window.on;
    s->left = (size_t)spec.window.left;
    s->sinks = (size_t)spec.window.sinks;
}

/* The modelled session picked by the op byte, acquired; NULL if none. */
static struct sess *fz_pick(struct fz *f, uint8_t op, struct fz_sess **out)
{
    struct fz_sess *m = &f->s[(op >> 4) % FZ_MAX];
    struct sess *s;

    if (!m->live)
        return NULL;
    enum core_status rc = sess_acquire(f->st, m->id, &s);
    if (rc == CORE_ENOTFOUND)       /* the last check saw it live, no time passed */
        fz_fail("a live session vanished between steps", (size_t)(m - f->s));
    if (rc != CORE_OK)
        fz_fail("acquire failed other than not-found", 0);
    m->last_used = f->now;
    *out = m;
    return s;
}

static void fz_append(struct fz *f, uint8_t op)
{
    struct fz_sess *m;
    struct sess *s = fz_pick(f, op, &m);
    if (!s)
        return;
    uint8_t a = fz_byte(f);
    size_t rows = a % (FZ_ROWS + 1);
    long long expect = (a & 0x80) ? (long long)m->length + ((a >> 3) & 1) : -1;
    void *k = fz_values(f, m->dtype, m->h_kv * rows * m->d_k);
    void *v = fz_values(f, m->dtype, m->h_kv * rows * m->d_v);
    enum core_status rc = sess_append(f->st, s, k, v, rows, expect);
    if (rc == CORE_OK) {
        if (expect >= 0 && (size_t)expect != m->length)
            fz_fail("append ignored expected_length", 0);
        m->length += rows;
    } else if (rc == CORE_EFULL && m->length + rows <= m->max_tokens) {
        fz_fail("session_full below max_tokens", 0);
    }
    if (sess_length(s) != m->length)
        fz_fail("length after append differs from the model", 0);
    sess_release(f->st, s);
    free(k);
    free(v);
}

static void fz_attend(struct fz *f, uint8_t op)
{
    struct fz_sess *m;
    struct sess *s = fz_pick(f, op, &m);
    if (!s)
        return;
    uint8_t a = fz_byte(f);
    size_t rows = a & 3, n = 1 + ((a >> 2) & 3);
    struct sess_query q;
    struct attn_request r;

    memset(&q, 0, sizeof q);
    q.n = n;
    q.causal = (enum attn_causal)((a >> 4) % 3);
    q.empty_rows = (a & 64) ? ATTN_EMPTY_ERROR : ATTN_EMPTY_ZERO;
    q.outputs = ATTN_OUT_ALL;
    void *k = fz_values(f, m->dtype, m->h_kv * rows * m->d_k);
    void *v = fz_values(f, m->dtype, m->h_kv * rows * m->d_v);
    q.q = fz_values(f, m->dtype, m->h * n * m->d_k);
    void *scores = NULL, *weights = NULL, *output = NULL;
    if (sess_request(s, &q, rows, &r) == CORE_OK && attn_check(&r) == CORE_OK) {
        size_t es = attn_dtype_size(m->dtype), L = r.shape.L;
        scores = calloc(m->h * n * (L ? L : 1), es);
        weights = calloc(m->h * n * (L ? L : 1), es);
        output = calloc(m->h * n * m->d_v, es);
        if (!scores || !weights || !output)
            abort();
        struct attn_result res = {.scores = scores, .weights = weights, .output = output};
        enum core_status rc = sess_attend(f->st, s, k, v, rows, &q, &res, f->ws);
        if (rc == CORE_OK) {
            m->length += rows;
            for (size_t i = 0; i < m->h * n * m->d_v; i++) {
                double x = m->dtype == ATTN_F32 ? ((float *)output)[i]
                                                : ((double *)output)[i];
                if (!isfinite(x))
                    fz_fail("attend answered a non-finite output", 0);
            }
        }
    }
    if (sess_length(s) != m->length)
        fz_fail("length after attend differs from the model", 0);
    sess_release(f->st, s);
    free(scores);
    free(weights);
    free(output);
    free((void *)q.q);
    free(k);
    free(v);
}

static void fz_truncate(struct fz *f, uint8_t op)
{
    struct fz_sess *m;
    struct sess *s = fz_pick(f, op, &m);
    if (!s)
        return;
    size_t len = fz_byte(f) % (m->length + 2);
    enum core_status rc = sess_truncate(f->st, s, len);
    if (rc == CORE_OK) {
        if (len > m->length)
            fz_fail("truncate beyond the length accepted", 0);
        m->length = len;
    } else if (len <= m->length &&
               !(rc == CORE_ELENGTH && m->rolling && len < sess_min_length(s))) {
        fz_fail("truncate within the length refused", 0);
    }
    if (sess_length(s) != m->length)
        fz_fail("length after truncate differs from the model", 0);
    sess_release(f->st, s);
}

static void fz_fork(struct fz *f, uint8_t op)
{
    struct fz_sess *m;
    struct sess *s = fz_pick(f, op, &m);
    if (!s)
        return;
    char id[SESS_ID_MAX];
    enum core_status rc = sess_fork(f->st, s, id);
    sess_release(f->st, s);
    if (rc != CORE_OK)
        return;
    int slot = fz_free_slot(f);
    if (slot < 0) {
        if (sess_delete(f->st, id) != CORE_OK)
            fz_fail("cannot delete a fork just made", 0);
        return;
    }
    f->s[slot] = *m;
    memcpy(f->s[slot].id, id, sizeof id);
    f->s[slot].last_used = f->now;
}

static void fz_delete(struct fz *f, uint8_t op)
{
    struct fz_sess *m = &f->s[(op >> 4) % FZ_MAX];
    if (!m->live)
        return;
    enum core_status rc = sess_delete(f->st, m->id);
    if (rc != CORE_OK && rc != CORE_ENOTFOUND)
        fz_fail("delete failed", 0);
    m->live = false;
    if (sess_delete(f->st, m->id) != CORE_ENOTFOUND)
        fz_fail("a deleted session deletes twice", 0);
}

static void fz_garbage_id(struct fz *f)
{
    char id[SESS_ID_MAX + 8];
    size_t n = fz_byte(f) % sizeof id;
    struct sess *s;

    for (size_t i = 0; i < n; i++)
        id[i] = (char)(fz_byte(f) | 1);     /* no NUL inside */
    id[n] = '\0';
    for (int i = 0; i < FZ_MAX; i++)
        if (f->s[i].live && strcmp(f->s[i].id, id) == 0)
            return;
    if (sess_acquire(f->st, id, &s) != CORE_ENOTFOUND)
        fz_fail("a garbage id was found", 0);
}

/* After every step: the store agrees with the model. */
static void fz_check(struct fz *f, bool swept)
{
    size_t live = 0, bytes = 0, shared = 0;

    for (size_t i = 0; i < FZ_MAX; i++) {
        struct fz_sess *m = &f->s[i];
        struct sess *s;
        if (!m->live)
            continue;
        double idle = f->now - m->last_used;
        enum core_status rc = sess_acquire(f->st, m->id, &s);
        if (rc == CORE_ENOTFOUND) {
            if (f->cfg.policy != SESS_POLICY_LRU && idle < m->ttl)
                fz_fail("a session vanished before its ttl", i);
            m->live = false;
            continue;
        }
        if (rc != CORE_OK)
            fz_fail("acquire failed", i);
        if (idle > m->ttl + 1e-6)
            fz_fail("a session outlived its ttl", i);
        struct sess_info info;
        sess_get_info(f->st, s, &info);
        if (sess_length(s) != m->length || info.length != m->length)
            fz_fail("length differs from the model", i);
        size_t held = kv_held(sess_cache(s));
        if (held > m->max_tokens || info.max_tokens != m->max_tokens ||
            (!m->rolling && held != m->length))
            fz_fail("max_tokens not kept", i);
        if (m->rolling && info.held.from &&
            (held > (m->sinks + 63) / 64 * 64 + m->left + 63 ||
             info.held.from + m->left > m->length))
            fz_fail("a rolling session holds more than its window", i);
        if (info.bytes + info.shared_bytes <
            held * m->h_kv * (m->d_k + m->d_v) * kv_elem_bytes(sess_cache(s)))
            fz_fail("accounted bytes below the cached rows", i);
        m->last_used = f->now;
        live++;
        bytes += info.bytes;
        shared += info.shared_bytes;
        sess_release(f->st, s);
    }
    struct sess_stats stats;
    sess_store_stats(f->st, &stats);
    if (stats.sessions > f->cfg.max_sessions || stats.bytes > f->cfg.max_cache_bytes)
        fz_fail("global limits exceeded", 0);
    /* shared pages count once: between the sum of own bytes and that plus
     * every session's shared bytes */
    if (swept && (stats.sessions != live || stats.bytes < bytes ||
                  stats.bytes > bytes + shared || (!shared && stats.bytes != bytes))) {
        fprintf(stderr, "store: %zu sessions %zu bytes; model: %zu sessions %zu bytes\n",
                stats.sessions, stats.bytes, live, bytes);
        fz_fail("accounting differs from the sum over sessions", 0);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    attn_blas_init(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz f;

    if (size < 1)
        return 0;
    memset(&f, 0, sizeof f);
    f.p = data;
    f.left = size;
    uint8_t g = fz_byte(&f);
    f.cfg.max_sessions = 1 + (g & 7);
    f.cfg.max_cache_bytes = (size_t)256 << ((g >> 3) & 7);
    f.cfg.default_ttl_s = 5;
    f.cfg.default_max_tokens = 12;
    f.cfg.policy = (g & 64) ? SESS_POLICY_LRU : SESS_POLICY_REJECT;
    f.now = 1000;
    f.st = sess_store_new(&f.cfg);
    f.ws = attn_ws_new();
    if (!f.st || !f.ws)
        abort();
    sess_store_set_clock(f.st, fz_clock, &f);

    for (int steps = 0; f.left && steps < 64; steps++) {
        uint8_t op = fz_byte(&f);
        bool swept = true;
        switch (op & 7) {
        case 0: fz_create(&f); break;
        case 1: fz_append(&f, op); break;
        case 2: fz_attend(&f, op); break;
        case 3: fz_truncate(&f, op); break;
        case 4: fz_fork(&f, op); break;
        case 5: fz_delete(&f, op); break;
        case 6:
            f.now += (double)(op >> 3) * 0.5;
            if (op & 0x80)
                sess_store_sweep(f.st);
            else
                swept = false;
            break;
        default: fz_garbage_id(&f); break;
        }
        if (swept)
            sess_store_sweep(f.st);
        fz_check(&f, swept);
    }
    sess_store_free(f.st);
    attn_ws_free(f.ws);
    return 0;
}
