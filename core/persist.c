/*
 * core/persist.c — the one encoding of a session (settings, clock, rows),
 * used by the state files (core/state_files.c), the journal and its
 * snapshots (core/durable.c), and moving a session between replicas
 * (export and import, core/persist.h).
 *
 * A session's bytes come from sess_encode and go back through sess_decode
 * (or sess_import); a setting added to sessions is added to write_sess and
 * read_header here (with the version raised) and so reaches every one of
 * those at once. Rows are read from the cache by write_rows and written
 * into it by append_rows alone.
 *
 * Format, version 4 (all integers u32/u64/i64 and floats f64 in host byte
 * order; a byte-order mark makes a file from another byte order read as
 * corrupt):
 *   "ATTNDSES" u32 version=4 u32 bom=0x01020304
 *   u32 id_len, id bytes
 *   u32 dtype | half << 8 | kv_store << 16
 *   u64 h h_kv d_k d_v length max_tokens  f64 ttl_s idle_s
 *   f64 scale u32 softmax f64 sink u32 rope f64 rope_base u32 rope_pairs
 *   u32 alibi u32 has_slopes [f64 slopes[h]]
 *   (version 3) f64 softcap u32 has_sinks [f64 sink_logits[h]] u64 rope_dims
 *   u32 scaling_type f64 factor low_freq_factor high_freq_factor
 *   original_max_position beta_fast beta_slow attention_factor
 *   (version 4) u64 first_row u32 window_on u32 reserved=0
 *   i64 window_left window_right window_sinks: the rolling window
 *   (window_on 1: left >= 0, right -1, sinks >= 0; window_on 0: -1 -1 0).
 *   first_row 0: every row [0, length) is held and follows. Otherwise the
 *   session let rows go: the rows that follow are [0, front) and
 *   [first_row, length), front = sinks rounded up to a multiple of 64 (the
 *   cache's page), first_row a multiple of 64 past front and at most
 *   length - left; "[length]" below then means those held rows
 *   u64 bias_q_heads bias_k_heads bias_v_heads, then each present bias
 *   (version 4) zero bytes up to a multiple of 8 from the start, then for
 *   int8 the K scales per head [length] and the V scales per head [length]
 *   (f32), then K rows per head [length][d_k] and V rows per head
 *   [length][d_v] in the cache's storage form (kv_elem_bytes each): every
 *   array at its element's alignment when the bytes start at one
 *   u32 crc: CRC-32C (version 4; journal.c's) of every byte before it
 * Version 3 (rows before the int8 scales, no padding, no window, CRC-32
 * IEEE), version 2 (no softcap, sinks, rope_dims or scaling: those settings
 * off) and version 1 (no half or kv_store, rows in the dtype) still read.
 * Reading is bounded by the bytes' size: no length read from them is
 * allocated before it is known to fit in what is left; rows are read in
 * place (copied once into the cache) unless they are misaligned.
 *
 * The IEEE CRC-32 of versions 1 to 3 is hand-written (a 256-entry table)
 * because zlib is not among the build dependencies; version 4 uses the
 * journal's CRC-32C, which has the SSE4.2 instruction.
 */
#include "persist.h"
#include "store_impl.h"

#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PERSIST_MAGIC "ATTNDSES"
#define PERSIST_VERSION 4u
#define PERSIST_BOM 0x01020304u

/* ---- CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) ------------------- */

static void crc_table(uint32_t t[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
}

static uint32_t crc_update(const uint32_t t[256], uint32_t crc, const void *p,
                           size_t n)
{
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = t[(crc ^ b[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* ---- encoding ----------------------------------------------------------- */

/* A growing byte buffer with the CRC-32C of what it holds; ok turns false
 * when memory runs out. */
struct wr {
    unsigned char *p;
    size_t n, cap;
    uint32_t crc;
    bool ok;
};

static void put(struct wr *w, const void *p, size_t n)
{
    if (!w->ok || n == 0)
        return;
    if (n > w->cap - w->n) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap - w->n < n && cap < SIZE_MAX / 2)
            cap *= 2;
        unsigned char *q = cap - w->n >= n ? realloc(w->p, cap) : NULL;
        if (!q) {
            w->ok = false;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->n, p, n);
    w->crc = jnl_crc32c(w->crc, w->p + w->n, n);
    w->n += n;
}

static void put_u32(struct wr *w, uint32_t x) { put(w, &x, sizeof x); }
static void put_u64(struct wr *w, uint64_t x) { put(w, &x, sizeof x); }
static void put_f64(struct wr *w, double x) { put(w, &x, sizeof x); }
static void put_i64(struct wr *w, int64_t x) { put(w, &x, sizeof x); }

/* Zero bytes up to the next multiple of 8 from the start. */
static void put_pad(struct wr *w)
{
    static const unsigned char zero[8];
    put(w, zero, (8 - w->n % 8) % 8);
}

/* Head g's held rows of one part (0 K, 1 V, 2 K scales, 3 V scales),
 * page by page as the cache holds them: [0, front), then [from, length)
 * when rows were let go. */
static void put_rows(struct wr *w, const struct kv_cache *kv, size_t g, int part)
{
    size_t es = kv_elem_bytes(kv), len = kv_length(kv), front = kv_held_front(kv);
    size_t width[4] = {kv_d_k(kv) * es, kv_d_v(kv) * es, sizeof(float), sizeof(float)};
    struct kv_seg sg;
    for (size_t r = 0, n; r < len; r += n) {
        if (r == front && kv_held_from(kv))
            r = kv_held_from(kv);
        n = r < len ? kv_seg(kv, g, r, &sg) : 0;
        if (n == 0)
            break;
        const void *src[4] = {sg.k, sg.v, sg.ks, sg.vs};
        put(w, src[part], n * width[part]);
    }
}

/* The rows [0, length) of every head in the storage form: int8 scales
 * first, then K, then V (the one place the cache's rows are read). */
static void write_rows(struct wr *w, const struct kv_cache *kv)
{
    static const int order[4] = {2, 3, 0, 1};  /* int8 scales first */
    for (int o = kv_store(kv) == KV_STORE_I8 ? 0 : 2; o < 4; o++)
        for (size_t g = 0; g < kv_heads(kv); g++)
            put_rows(w, kv, g, order[o]);
}

static pthread_once_t tab_once = PTHREAD_ONCE_INIT;
static uint32_t crc_tab_ieee[256];

static void tab_init(void)
{
    crc_table(crc_tab_ieee);
}

static const uint32_t *ieee_table(void)
{
    pthread_once(&tab_once, tab_init);
    return crc_tab_ieee;
}

/* Serialise a held session. */
static void write_sess(struct wr *w, struct sess_store *st, struct sess *s)
{
    const struct sess_spec *sp = &s->spec;
    const struct attn_shape *sh = &sp->shape;
    const struct attn_params *pa = &sp->params;
    size_t es = attn_dtype_size(pa->dtype), len = kv_length(s->kv);
    uint32_t id_len = (uint32_t)strlen(s->id);
    put(w, PERSIST_MAGIC, 8);
    put_u32(w, PERSIST_VERSION);
    put_u32(w, PERSIST_BOM);
    put_u32(w, id_len);
    put(w, s->id, id_len);
    put_u32(w, (uint32_t)pa->dtype | (uint32_t)sp->half << 8 | (uint32_t)sp->kv_store << 16);
    put_u64(w, sh->h);
    put_u64(w, sh->h_kv);
    put_u64(w, sh->d_k);
    put_u64(w, sh->d_v);
    put_u64(w, len);
    put_u64(w, sp->max_tokens);
    put_f64(w, sp->ttl_s);
    pthread_mutex_lock(&st->mu);
    double left = sess_expires_in(st, s);
    pthread_mutex_unlock(&st->mu);
    put_f64(w, left >= 0 ? sp->ttl_s - left : 0);
    put_f64(w, pa->scale);
    put_u32(w, (uint32_t)pa->softmax);
    put_f64(w, pa->sink_logit);
    put_u32(w, pa->rope);
    put_f64(w, pa->rope_base);
    put_u32(w, (uint32_t)pa->rope_pairs);
    put_u32(w, pa->alibi);
    put_u32(w, pa->alibi_slopes != NULL);
    if (pa->alibi_slopes)
        put(w, pa->alibi_slopes, sh->h * sizeof(double));
    const struct attn_rope_scaling *sc = &pa->rope_scaling;
    put_f64(w, pa->softcap);
    put_u32(w, pa->sink_logits != NULL);
    if (pa->sink_logits)
        put(w, pa->sink_logits, sh->h * sizeof(double));
    put_u64(w, pa->rope_dims);
    put_u32(w, (uint32_t)sc->type);
    const double scaling[] = {sc->factor, sc->low_freq_factor, sc->high_freq_factor,
                              sc->original_max_position, sc->beta_fast,
                              sc->beta_slow, sc->attention_factor};
    put(w, scaling, sizeof scaling);
    const struct attn_window *win = &sp->window;
    put_u64(w, kv_held_from(s->kv));
    put_u32(w, win->on);
    put_u32(w, 0);
    put_i64(w, win->on ? win->left : -1);
    put_i64(w, -1);
    put_i64(w, win->on ? win->sinks : 0);
    put_u64(w, sp->bias_q_heads);
    put_u64(w, sp->bias_k_heads);
    put_u64(w, sp->bias_v_heads);
    put(w, sp->bias_q, sp->bias_q_heads * sh->d_k * es);
    put(w, sp->bias_k, sp->bias_k_heads * sh->d_k * es);
    put(w, sp->bias_v, sp->bias_v_heads * sh->d_v * es);
    put_pad(w);
    write_rows(w, s->kv);
    uint32_t crc = w->crc;
    put_u32(w, crc);
}

/* A block of `bytes` (free with free()) for a whole encoding. A large one
 * is 2 MiB-aligned and asks for transparent huge pages: a fresh block is
 * faulted in page by page as it is written, and with 4 KiB pages that
 * costs more than the copy (0.8 vs 4 GB/s measured on the build VM). */
static void *encoding_block(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < 4 * huge || bytes > SIZE_MAX - huge)
        return malloc(bytes);
    size_t n = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, n);
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

enum core_status sess_encode(struct sess_store *st, struct sess *s,
                             void **out, size_t *n)
{
    struct wr w = {.ok = true};
    size_t rows = kv_held(s->kv) * kv_row_bytes(s->kv);
    if (rows > 0 && rows <= SIZE_MAX - 65536) {   /* one block, as a rule */
        w.p = encoding_block(rows + 65536);
        w.cap = w.p ? rows + 65536 : 0;
    }
    write_sess(&w, st, s);
    if (!w.ok) {
        free(w.p);
        return CORE_ENOMEM;
    }
    *out = w.p;
    *n = w.n;
    return CORE_OK;
}

/* ---- reading ------------------------------------------------------------ */

struct rd {
    const unsigned char *base; /* the first byte */
    const unsigned char *p;    /* next byte */
    size_t left;               /* bytes before the trailing crc */
    uint32_t version;
    const char *err;           /* first problem, or NULL */
};

static bool get(struct rd *r, void *p, size_t n)
{
    if (r->err)
        return false;
    if (n > r->left) {
        r->err = "truncated";
        return false;
    }
    if (n)
        memcpy(p, r->p, n);
    r->p += n;
    r->left -= n;
    return true;
}

static uint32_t get_u32(struct rd *r)
{
    uint32_t x = 0;
    get(r, &x, sizeof x);
    return x;
}

static uint64_t get_u64(struct rd *r)
{
    uint64_t x = 0;
    get(r, &x, sizeof x);
    return x;
}

static double get_f64(struct rd *r)
{
    double x = 0;
    get(r, &x, sizeof x);
    return x;
}

/* a*b elements of es bytes where they are (not copied, maybe misaligned);
 * NULL for none, and r->err set when they are not all there. */
static const void *take(struct rd *r, uint64_t a, uint64_t b, size_t es)
{
    size_t bytes;
    if (r->err || a == 0 || b == 0)
        return NULL;
    if (a > SIZE_MAX || b > SIZE_MAX ||
        !core_mul3((size_t)a, (size_t)b, es, &bytes) || bytes > r->left) {
        r->err = "truncated";
        return NULL;
    }
    const void *p = r->p;
    r->p += bytes;
    r->left -= bytes;
    return p;
}

/* malloc and read a*b elements of es bytes, refusing sizes beyond the
 * bytes left. */
static void *get_array(struct rd *r, uint64_t a, uint64_t b, size_t es)
{
    const void *at = take(r, a, b, es);
    if (!at)
        return NULL;
    size_t bytes = (size_t)a * (size_t)b * es;
    void *p = malloc(bytes);
    if (!p) {
        r->err = "out of memory";
        return NULL;
    }
    memcpy(p, at, bytes);
    return p;
}

/* Everything read from one encoding before it becomes a session. */
struct loaded {
    char id[SESS_ID_MAX];
    struct sess_spec spec;
    uint64_t length;
    uint64_t first;                 /* first_row: 0, or where the tail starts */
    uint64_t rows;                  /* rows that follow (the held ones) */
    double idle_s;
    double *slopes, *sinks;
    void *bq, *bk, *bv;
    const void *k, *v;              /* rows where they are read [h_kv][length][d] */
    const void *ks, *vs;            /* int8 scales where they are [h_kv][length] */
};

static void loaded_free(struct loaded *l)
{
    free(l->slopes);
    free(l->sinks);
    free(l->bq);
    free(l->bk);
    free(l->bv);
}

/* The version 3 settings: softcap, per-head sinks, RoPE dims and scaling
 * (their ranges are checked again by sess_new_from_spec's attn_check). */
static void read_model(struct rd *r, struct loaded *l)
{
    struct attn_params *pa = &l->spec.params;
    struct attn_rope_scaling *sc = &pa->rope_scaling;
    double scaling[7] = {0};
    pa->softcap = get_f64(r);
    uint32_t has_sinks = get_u32(r);
    if (!r->err && has_sinks > 1)
        r->err = "bad header field";
    if (has_sinks)
        l->sinks = get_array(r, l->spec.shape.h, 1, sizeof(double));
    pa->sink_logits = l->sinks;
    pa->rope_dims = get_u64(r);
    uint32_t type = get_u32(r);
    get(r, scaling, sizeof scaling);
    if (!r->err && (type > ATTN_ROPE_SCALING_YARN || pa->rope_dims > l->spec.shape.d_k))
        r->err = "bad header field";
    sc->type = (enum attn_rope_scaling_type)type;
    sc->factor = scaling[0];
    sc->low_freq_factor = scaling[1];
    sc->high_freq_factor = scaling[2];
    sc->original_max_position = scaling[3];
    sc->beta_fast = scaling[4];
    sc->beta_slow = scaling[5];
    sc->attention_factor = scaling[6];
}

/* Rows of the front part of a session that let rows go: its sinks'
 * pages. */
static uint64_t front_rows(const struct loaded *l)
{
    uint64_t s = (uint64_t)l->spec.window.sinks;
    return (s + KV_PAGE_ROWS - 1) / KV_PAGE_ROWS * KV_PAGE_ROWS;
}

/* The version 4 rolling window and the rows held (l->length read). */
static void read_window(struct rd *r, struct loaded *l)
{
    struct attn_window *w = &l->spec.window;
    l->first = get_u64(r);
    uint32_t on = get_u32(r), reserved = get_u32(r);
    int64_t window[3];
    get(r, window, sizeof window);
    if (r->err)
        return;
    w->on = on == 1;
    w->left = window[0];
    w->right = window[1];
    w->sinks = window[2];
    if (on > 1 || reserved != 0 ||
        (on && (window[0] < 0 || window[1] != -1 || window[2] < 0 ||
                window[0] > INT64_MAX / 2 || window[2] > INT64_MAX / 2)) ||
        (!on && l->first != 0)) {
        r->err = "bad window field";
        return;
    }
    if (!on)
        *w = (struct attn_window){0};   /* as a session created without one */
    if (l->first == 0)
        return;
    uint64_t front = front_rows(l);
    if (l->first % KV_PAGE_ROWS || l->first <= front || l->first > l->length ||
        l->length - l->first < (uint64_t)w->left) {
        r->err = "bad first_row";
        return;
    }
    l->rows = front + (l->length - l->first);
}

/* The id: 1..SESS_ID_MAX-1 characters of [A-Za-z0-9._-], not starting
 * with '.' (save writes "<id>.sess"; a dot file is skipped by a load). */
static void read_id(struct rd *r, struct loaded *l)
{
    uint32_t id_len = get_u32(r);
    if (!r->err && (id_len == 0 || id_len >= SESS_ID_MAX))
        r->err = "bad id";
    get(r, l->id, r->err ? 0 : id_len);
    if (!r->err && l->id[0] == '.')
        r->err = "bad id";
    for (uint32_t i = 0; !r->err && i < id_len; i++) {
        char ch = l->id[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
            r->err = "bad id";
    }
}

/* Header fields up to the biases; r->err set on a bad value. */
static void read_header(struct rd *r, struct loaded *l)
{
    char magic[8] = {0};
    get(r, magic, 8);
    if (!r->err && memcmp(magic, PERSIST_MAGIC, 8) != 0)
        r->err = "not a session export (wrong magic)";
    r->version = get_u32(r);
    if (!r->err && (r->version < 1 || r->version > PERSIST_VERSION))
        r->err = "unknown version";
    if (!r->err && get_u32(r) != PERSIST_BOM)
        r->err = "other byte order";
    read_id(r, l);
    uint32_t packed = get_u32(r), dtype = packed & 0xFF, half = packed >> 8 & 0xFF;
    uint32_t store = packed >> 16;
    if (!r->err && (half > 2 || store > KV_STORE_I8 ||
                    (store != KV_STORE_SAME && dtype != 1) || (half && dtype != 1)))
        r->err = "bad header field";
    l->spec.half = half;
    l->spec.kv_store = (enum kv_store)store;
    struct attn_shape *sh = &l->spec.shape;
    sh->h = get_u64(r);
    sh->h_kv = get_u64(r);
    sh->d_k = get_u64(r);
    sh->d_v = get_u64(r);
    l->length = get_u64(r);
    l->spec.max_tokens = get_u64(r);
    l->spec.ttl_s = get_f64(r);
    l->idle_s = get_f64(r);
    struct attn_params *pa = &l->spec.params;
    pa->dtype = dtype == 1 ? ATTN_F32 : ATTN_F64;
    pa->scale = get_f64(r);
    uint32_t softmax = get_u32(r);
    pa->softmax = (enum attn_softmax)softmax;
    pa->sink_logit = get_f64(r);
    uint32_t rope = get_u32(r);
    pa->rope = rope != 0;
    pa->rope_base = get_f64(r);
    uint32_t pairs = get_u32(r);
    pa->rope_pairs = (enum attn_rope_pairs)pairs;
    uint32_t alibi = get_u32(r), has_slopes = get_u32(r);
    pa->alibi = alibi != 0;
    if (!r->err && (dtype > 1 || softmax > 2 || rope > 1 || pairs > 1 ||
                    alibi > 1 || has_slopes > 1 || l->spec.max_tokens == 0))
        r->err = "bad header field";
    /* save writes ttl 0 for "never expires"; an infinite ttl would be a
     * session that never expires and reports a non-finite expires_in */
    if (!r->err && (!isfinite(l->spec.ttl_s) || !(l->spec.ttl_s >= 0) ||
                    !isfinite(l->idle_s) || !(l->idle_s >= 0)))
        r->err = "bad clock field";
    if (has_slopes)
        l->slopes = get_array(r, sh->h, 1, sizeof(double));
    pa->alibi_slopes = l->slopes;
    if (r->version >= 3)
        read_model(r, l);
    l->rows = l->length;
    if (r->version >= 4)
        read_window(r, l);
    if (!r->err && l->rows > l->spec.max_tokens)     /* rows held at most */
        r->err = "bad header field";
}

/* Where the rows are: after zero padding to a multiple of 8, the int8
 * scales, K and V (version 4); K, V and then the scales before. */
static void read_rows(struct rd *r, struct loaded *l, size_t kn, size_t vn, size_t ses)
{
    bool i8 = l->spec.kv_store == KV_STORE_I8;
    size_t h_kv = l->spec.shape.h_kv;
    if (r->version >= 4) {
        size_t n_pad = (8 - (size_t)(r->p - r->base) % 8) % 8;
        const unsigned char *pad = take(r, n_pad, 1, 1);
        for (size_t i = 0; pad && !r->err && i < n_pad; i++)
            if (pad[i])
                r->err = "bad padding";
    }
    if (i8 && r->version >= 4) {
        l->ks = take(r, l->rows, h_kv, sizeof(float));
        l->vs = take(r, l->rows, h_kv, sizeof(float));
    }
    l->k = take(r, kn, 1, ses);
    l->v = take(r, vn, 1, ses);
    if (i8 && r->version < 4) {
        l->ks = take(r, l->length, h_kv, sizeof(float));
        l->vs = take(r, l->length, h_kv, sizeof(float));
    }
}

/* Biases and rows. */
static void read_body(struct rd *r, struct loaded *l)
{
    struct sess_spec *sp = &l->spec;
    const struct attn_shape *sh = &sp->shape;
    size_t es = attn_dtype_size(sp->params.dtype), kn, vn;
    sp->bias_q_heads = get_u64(r);
    sp->bias_k_heads = get_u64(r);
    sp->bias_v_heads = get_u64(r);
    if (r->err)
        return;
    if (sp->bias_q_heads > 1 + (uint64_t)sh->h ||
        sp->bias_k_heads > 1 + (uint64_t)sh->h_kv ||
        sp->bias_v_heads > 1 + (uint64_t)sh->h_kv) {
        r->err = "bad bias heads";
        return;
    }
    l->bq = get_array(r, sp->bias_q_heads, sh->d_k, es);
    l->bk = get_array(r, sp->bias_k_heads, sh->d_k, es);
    l->bv = get_array(r, sp->bias_v_heads, sh->d_v, es);
    sp->bias_q = l->bq;
    sp->bias_k = l->bk;
    sp->bias_v = l->bv;
    if (l->rows > SIZE_MAX || !core_mul3((size_t)l->rows, sh->h_kv, sh->d_k, &kn) ||
        !core_mul3((size_t)l->rows, sh->h_kv, sh->d_v, &vn)) {
        r->err = "truncated";
        return;
    }
    size_t ses = sp->kv_store == KV_STORE_SAME ? es : sp->kv_store == KV_STORE_I8 ? 1 : 2;
    read_rows(r, l, kn, vn, ses);
}

/* Parse n encoded bytes into l; NULL or the reason they are bad. The rows
 * stay where they are (l->k ... point into p). */
static const char *parse(const void *p, size_t n, struct loaded *l)
{
    if (n < 4)
        return "truncated";
    struct rd r = {.base = p, .p = p, .left = n - 4};
    read_header(&r, l);
    read_body(&r, l);
    if (!r.err && r.left != 0)
        r.err = "trailing bytes";
    if (!r.err) {
        uint32_t want, crc = r.version >= 4 ? jnl_crc32c(0, p, n - 4)
                                            : crc_update(ieee_table(), 0, p, n - 4);
        memcpy(&want, (const unsigned char *)p + n - 4, sizeof want);
        if (want != crc)
            r.err = "checksum mismatch";
    }
    return r.err;
}

/* p itself when it is aligned for align, else a malloc'd copy of its bytes
 * into *copy (NULL when memory is short). */
static const void *aligned(const void *p, size_t align, size_t bytes, void **copy)
{
    if (!p || (uintptr_t)p % align == 0)
        return p;
    *copy = malloc(bytes);
    if (*copy)
        memcpy(*copy, p, bytes);
    return *copy;
}

/* Rows [r0, r0 + n) of every head of the arrays [h_kv][m][width] of p
 * (parts: K, V, K scales, V scales), each part gathered into one new
 * block [h_kv][n][width] in out[4]; false when memory is short. */
static bool gather_part(const struct kv_cache *kv, const void *const p[4], size_t m,
                        size_t r0, size_t n, void *out[4])
{
    size_t es = kv_elem_bytes(kv), h_kv = kv_heads(kv);
    size_t width[4] = {kv_d_k(kv) * es, kv_d_v(kv) * es, sizeof(float), sizeof(float)};
    for (int i = 0; i < 4; i++) {
        out[i] = NULL;
        if (!p[i])
            continue;
        if (!(out[i] = malloc(h_kv * n * width[i] + 1)))
            return false;
        for (size_t g = 0; g < h_kv; g++)
            memcpy((char *)out[i] + g * n * width[i],
                   (const char *)p[i] + (g * m + r0) * width[i], n * width[i]);
    }
    return true;
}

/* A session that let rows go: its front rows, the jump to first_row, its
 * tail (rows [m] per head in p, held ones only). */
static enum core_status append_rolled(struct kv_cache *kv, const struct loaded *l,
                                      const void *const p[4], size_t m)
{
    size_t front = (size_t)front_rows(l), tail = m - front;
    void *a[4] = {NULL}, *b[4] = {NULL};
    enum core_status rc = CORE_ENOMEM;
    if (gather_part(kv, p, m, 0, front, a) && gather_part(kv, p, m, front, tail, b)) {
        rc = front ? kv_append_stored(kv, a[0], a[1], a[2], a[3], front) : CORE_OK;
        if (rc == CORE_OK)
            rc = kv_skip(kv, (size_t)l->first);
        if (rc == CORE_OK && tail)
            rc = kv_append_stored(kv, b[0], b[1], b[2], b[3], tail);
    }
    for (int i = 0; i < 4; i++) {
        free(a[i]);
        free(b[i]);
    }
    return rc;
}

/* Copy the parsed rows into the session's empty cache (the one place the
 * cache's rows are written from the format). */
static enum core_status append_rows(struct kv_cache *kv, const struct loaded *l)
{
    size_t m = (size_t)l->rows, h_kv = kv_heads(kv), es = kv_elem_bytes(kv);
    if (m == 0)
        return l->first ? kv_skip(kv, (size_t)l->first) : CORE_OK;
    void *tmp[4] = {NULL, NULL, NULL, NULL};
    const void *k = aligned(l->k, es, m * h_kv * kv_d_k(kv) * es, &tmp[0]);
    const void *v = aligned(l->v, es, m * h_kv * kv_d_v(kv) * es, &tmp[1]);
    const void *ks = aligned(l->ks, sizeof(float), m * h_kv * sizeof(float), &tmp[2]);
    const void *vs = aligned(l->vs, sizeof(float), m * h_kv * sizeof(float), &tmp[3]);
    enum core_status rc = CORE_ENOMEM;
    const void *parts[4] = {k, v, ks, vs};
    if (k && v && (!l->ks || ks) && (!l->vs || vs))
        rc = l->first ? append_rolled(kv, l, parts, m)
                      : kv_append_stored(kv, k, v, ks, vs, m);
    for (int i = 0; i < 4; i++)
        free(tmp[i]);
    return rc;
}

const char *sess_decode(const void *p, size_t n, struct sess **out,
                        double *idle_s)
{
    struct loaded l = {0};
    const char *why = parse(p, n, &l);
    struct sess *s = NULL;
    if (!why) {
        enum core_status rc;
        s = sess_new_from_spec(&l.spec, &rc);
        if (s)
            rc = append_rows(s->kv, &l);
        if (!s || rc != CORE_OK) {
            why = core_status_text(rc);
            sess_destroy(s);
            s = NULL;
        } else {
            memcpy(s->id, l.id, SESS_ID_MAX);
            *idle_s = l.idle_s;
        }
    }
    loaded_free(&l);
    *out = s;
    return why;
}

/* ---- import ------------------------------------------------------------- */

static void say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(char *why, const char *fmt, ...)
{
    if (!why)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, SESS_WHY_MAX, fmt, ap);
    va_end(ap);
}

/* The importing replica's limits on the parsed header. */
static enum core_status import_limits(const struct loaded *l,
                                      const struct sess_import_limits *lim, char *why)
{
    const struct attn_shape *sh = &l->spec.shape;
    size_t max = lim ? lim->max_row_elements : 0, q, kv;
    if (max && (!core_mul(sh->h, sh->d_k, &q) || q > max ||
                !core_add(sh->d_k, sh->d_v, &kv) || !core_mul(kv, sh->h_kv, &kv) ||
                kv > max)) {
        say(why, "a row over all heads is over this replica's element limit (%zu)", max);
        return CORE_ELIMIT;
    }
    if (lim && lim->max_tokens && l->spec.max_tokens > lim->max_tokens) {
        say(why, "its max_tokens (%zu) is over this replica's limit (%zu)",
            l->spec.max_tokens, lim->max_tokens);
        return CORE_ELIMIT;
    }
    return CORE_OK;
}

/* Whether s's cache, grown to `length` rows, fits the store: checked
 * before the rows are allocated. */
static enum core_status import_room(struct sess_store *st, const struct sess *s,
                                    uint64_t length, char *why)
{
    size_t bytes = 0, max = st->cfg.max_cache_bytes;
    if (length > SIZE_MAX || kv_plan(s->kv, (size_t)length, &bytes, NULL) != CORE_OK) {
        say(why, "its rows do not fit in memory");
        return CORE_ELIMIT;
    }
    if (max && bytes > max) {
        say(why, "it needs %zu cache bytes, over this replica's whole cache (%zu)",
            bytes, max);
        return CORE_ELIMIT;
    }
    enum core_status rc = sess_admissible(st, bytes);
    if (rc != CORE_OK)
        say(why, "no room for %zu more cache bytes and one more session now", bytes);
    return rc;
}

/* A failure to make a session of parsed bytes: too big (CORE_ELIMIT) and
 * out of memory stay what they are; anything else means the bytes are bad
 * (a setting out of range, a non-finite value). */
static enum core_status bad_bytes(enum core_status rc)
{
    return rc == CORE_ELIMIT || rc == CORE_ENOMEM ? rc : CORE_ECORRUPT;
}

enum core_status sess_import(struct sess_store *st, const void *p, size_t n,
                             const struct sess_import_limits *lim, char *id,
                             char *why)
{
    struct loaded l = {0};
    struct sess *s = NULL;
    enum core_status rc = CORE_OK;
    const char *bad = parse(p, n, &l);
    say(why, "%s", bad ? bad : "");
    if (bad)
        rc = CORE_ECORRUPT;
    else
        rc = import_limits(&l, lim, why);
    if (rc == CORE_OK && !(s = sess_new_from_spec(&l.spec, &rc))) {
        say(why, "its settings: %s", core_status_text(rc));
        rc = bad_bytes(rc);
    }
    if (rc == CORE_OK)
        rc = import_room(st, s, l.rows, why);
    if (rc == CORE_OK && (rc = append_rows(s->kv, &l)) != CORE_OK) {
        say(why, "its rows: %s", core_status_text(rc));
        rc = bad_bytes(rc);
    }
    loaded_free(&l);
    if (rc != CORE_OK) {
        sess_destroy(s);
        return rc;
    }
    s->id[0] = '\0';               /* a new id of this replica */
    rc = sess_link_journaled(st, s, id);
    if (rc == CORE_ECAPACITY)
        say(why, "no room for one more session now");
    return rc;
}

enum core_status sess_export(struct sess_store *st, struct sess *s,
                             void **out, size_t *n)
{
    return sess_encode(st, s, out, n);
}
