/*
 * core/persist.c — the one encoding of a session (settings, clock, rows),
 * used by the state files (core/state_files.c), the journal and its
 * snapshots (core/durable.c), and moving a session between replicas
 * (export and import, core/persist.h). This file writes it (sess_encode,
 * and export piece by piece); core/persist_read.c reads it (sess_decode,
 * import piece by piece).
 *
 * A session's bytes come from sess_encode and go back through sess_decode
 * (or sess_import); a setting added to sessions is added to write_sess here
 * and read_header in core/persist_read.c (with the version raised) and so
 * reaches every one of those at once. Rows are read from the cache by
 * write_rows and written into it by the importer alone.
 *
 * Format, version 6 for a session with an idempotency key and version 5,
 * which is version 6 without has_key, for every other one and for every
 * export, so that an attnd before version 6 reads them (all integers
 * u32/u64/i64 and floats f64 in host byte order; a byte-order mark makes a
 * file from another byte order read as corrupt):
 *   "ATTNDSES" u32 version=6|5 u32 bom=0x01020304
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
 *   (version 5) u32 yarn_truncate: 1 rounds yarn's correction range (HF's
 *   default "truncate": true, and every scaling but yarn), 0 does not
 *   (truncate false, gpt-oss); versions 1 to 4 read as 1.
 *   (version 6) u32 has_key: 1, the session was made with an idempotency
 *   key (store.h's sess_idem), then u32 scope_len, scope, u32 key_len,
 *   key, 16 digest bytes (0, read as no key, is never written). An export
 *   holds no key (it stays on its replica), and an import takes none from
 *   its bytes.
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
 * Version 4 (no yarn_truncate), version 3 (rows before the int8 scales,
 * no padding, no window, CRC-32 IEEE), version 2 (no softcap, sinks, rope_dims or scaling: those settings
 * off) and version 1 (no half or kv_store, rows in the dtype) still read.
 * Reading is bounded by the bytes' size: no length read from them is
 * allocated before it is known to fit in what is left (or, when the size
 * is not known ahead, before those bytes have arrived).
 *
 * Export goes piece by piece too (struct sess_exporter): the bytes before
 * the rows are written at once into a small buffer, the cache is forked
 * (a snapshot sharing its pages), and each read copies the next run of
 * stored rows from those pages with the CRC-32C taken over the copy while
 * it is in cache, the checksum last; the walk is write_rows's, so the
 * bytes are sess_encode's. Over HTTP they go from the pages into the
 * transport's buffer, never into a buffer of the whole export.
 */
#include "persist.h"
#include "persist_impl.h"
#include "store_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- encoding ----------------------------------------------------------- */

/* A growing byte buffer with the CRC-32C of what it holds; ok turns false
 * when memory runs out. A counting one only adds up the bytes. */
struct wr {
    unsigned char *p;
    size_t n, cap;
    uint32_t crc;
    bool ok;
    bool count;                     /* count the bytes, keep none (p stays NULL) */
};

static void put(struct wr *w, const void *p, size_t n)
{
    if (!w->ok || n == 0)
        return;
    if (w->count) {
        w->n += n;
        return;
    }
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

/* A walk over the stored rows in the encoding's order: the int8 scales
 * (K then V), then K, then V; within a part head by head, and within a
 * head page run by page run as the cache holds them ([0, front), then
 * [from, length) when rows were let go). The one place the cache's rows
 * are read: write_rows and the exporter both walk them with it. */
struct rows_walk {
    const struct kv_cache *kv;
    int o;                          /* index in the order of the part walked */
    size_t g, r;                    /* its head, and its next row */
    const unsigned char *seg;       /* the current run of stored bytes */
    size_t seg_left;
};

static void walk_start(struct rows_walk *it, const struct kv_cache *kv)
{
    *it = (struct rows_walk){.kv = kv, .o = kv_store(kv) == KV_STORE_I8 ? 0 : 2};
}

/* The next run of stored bytes into it->seg / it->seg_left; false past
 * the last. */
static bool walk_next(struct rows_walk *it)
{
    static const int order[4] = {2, 3, 0, 1};  /* int8 scales first */
    const struct kv_cache *kv = it->kv;
    size_t es = kv_elem_bytes(kv), len = kv_length(kv), front = kv_held_front(kv);
    size_t from = kv_held_from(kv);
    size_t width[4] = {kv_d_k(kv) * es, kv_d_v(kv) * es, sizeof(float), sizeof(float)};
    while (it->o < 4) {
        int part = order[it->o];
        size_t r = it->r, n;
        struct kv_seg sg;
        if (r == front && from)
            r = from;
        n = r < len ? kv_seg(kv, it->g, r, &sg) : 0;
        if (n == 0) {                   /* this head's part is out */
            it->r = 0;
            if (++it->g == kv_heads(kv)) {
                it->g = 0;
                it->o++;
            }
            continue;
        }
        const void *src[4] = {sg.k, sg.v, sg.ks, sg.vs};
        it->r = r + n;
        it->seg = src[part];
        it->seg_left = n * width[part];
        if (it->seg_left)
            return true;
    }
    return false;
}

/* The held rows of every head in the storage form. */
static void write_rows(struct wr *w, const struct kv_cache *kv)
{
    struct rows_walk it;
    walk_start(&it, kv);
    while (walk_next(&it))
        put(w, it.seg, it.seg_left);
}

/* The version 6 idempotency key (has_key 1 then the key; a session
 * without one is written as version 5, which has no has_key). */
static void write_idem(struct wr *w, const struct sess_idem *k)
{
    if (!k)
        return;
    put_u32(w, 1);
    uint32_t n = (uint32_t)strlen(k->scope);
    put_u32(w, n);
    put(w, k->scope, n);
    n = (uint32_t)strlen(k->key);
    put_u32(w, n);
    put(w, k->key, n);
    put(w, k->digest, sizeof k->digest);
}

/* A held session's bytes before its rows: magic to the padding; its key
 * with them unless this is an export. */
static void write_head(struct wr *w, struct sess_store *st, struct sess *s, bool export)
{
    const struct sess_spec *sp = &s->spec;
    const struct attn_shape *sh = &sp->shape;
    const struct attn_params *pa = &sp->params;
    size_t es = attn_dtype_size(pa->dtype), len = kv_length(s->kv);
    uint32_t id_len = (uint32_t)strlen(s->id);
    const struct sess_idem *key = export ? NULL : s->idem;
    put(w, PERSIST_MAGIC, 8);
    put_u32(w, key ? PERSIST_VERSION : PERSIST_VERSION_NO_KEY);
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
    put_u32(w, !sc->no_truncate);
    write_idem(w, key);
    put_u64(w, sp->bias_q_heads);
    put_u64(w, sp->bias_k_heads);
    put_u64(w, sp->bias_v_heads);
    put(w, sp->bias_q, sp->bias_q_heads * sh->d_k * es);
    put(w, sp->bias_k, sp->bias_k_heads * sh->d_k * es);
    put(w, sp->bias_v, sp->bias_v_heads * sh->d_v * es);
    put_pad(w);
}

/* Serialise a held session. */
static void write_sess(struct wr *w, struct sess_store *st, struct sess *s, bool export)
{
    write_head(w, st, s, export);
    write_rows(w, s->kv);
    uint32_t crc = w->crc;
    put_u32(w, crc);
}

/* A block of `bytes` (free with free()) for a whole encoding. A large one
 * is 2 MiB-aligned and asks for transparent huge pages: a fresh block is
 * faulted in page by page as it is written, and with 4 KiB pages that
 * costs more than the copy (measured: docs/benchmarks.md, section "Moving
 * a session"). */
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

/* sess_encode, or an export's bytes (without the key). */
static enum core_status encode(struct sess_store *st, struct sess *s, bool export,
                               void **out, size_t *n)
{
    struct wr w = {.ok = true};
    size_t rows = kv_held(s->kv) * kv_row_bytes(s->kv);
    if (rows > 0 && rows <= SIZE_MAX - 65536) {   /* one block, as a rule */
        w.p = encoding_block(rows + 65536);
        w.cap = w.p ? rows + 65536 : 0;
    }
    write_sess(&w, st, s, export);
    if (!w.ok) {
        free(w.p);
        return CORE_ENOMEM;
    }
    *out = w.p;
    *n = w.n;
    return CORE_OK;
}

enum core_status sess_encode(struct sess_store *st, struct sess *s,
                             void **out, size_t *n)
{
    return encode(st, s, false, out, n);
}

enum core_status sess_export(struct sess_store *st, struct sess *s,
                             void **out, size_t *n)
{
    return encode(st, s, true, out, n);
}

/* ---- export piece by piece ----------------------------------------------- */

struct sess_exporter {
    struct kv_cache *kv;            /* the snapshot: shares the session's pages */
    unsigned char *head;            /* the bytes before the rows */
    size_t head_n;
    size_t total, done;             /* bytes in all, and given out */
    uint32_t crc;                   /* CRC-32C of the bytes given out */
    struct rows_walk walk;          /* the rows given out so far */
    unsigned char tail[4];          /* the CRC, once the rows are out */
};

struct sess_exporter *sess_export_begin(struct sess_store *st, struct sess *s,
                                        enum core_status *rc)
{
    struct sess_exporter *ex = calloc(1, sizeof *ex);
    struct wr w = {.ok = true};
    *rc = CORE_ENOMEM;
    if (!ex)
        return NULL;
    write_head(&w, st, s, true);
    ex->kv = w.ok ? kv_fork(s->kv) : NULL;
    if (!ex->kv) {
        free(w.p);
        free(ex);
        return NULL;
    }
    ex->head = w.p;
    ex->head_n = w.n;
    ex->crc = w.crc;
    walk_start(&ex->walk, ex->kv);
    ex->total = ex->head_n + kv_held(ex->kv) * kv_row_bytes(ex->kv) + sizeof ex->tail;
    *rc = CORE_OK;
    return ex;
}

size_t sess_export_size(const struct sess_exporter *ex)
{
    return ex->total;
}

size_t sess_export_bytes(struct sess_store *st, struct sess *s)
{
    struct wr w = {.ok = true, .count = true};
    write_head(&w, st, s, true);
    return w.n + kv_held(s->kv) * kv_row_bytes(s->kv) + sizeof(uint32_t);
}

size_t sess_export_read(struct sess_exporter *ex, void *buf, size_t n)
{
    unsigned char *out = buf;
    size_t put = 0, rows_end = ex->total - sizeof ex->tail;
    while (put < n && ex->done < ex->total) {
        size_t m;
        if (ex->done < ex->head_n) {
            m = ex->head_n - ex->done < n - put ? ex->head_n - ex->done : n - put;
            memcpy(out + put, ex->head + ex->done, m);
        } else if (ex->done < rows_end) {
            struct rows_walk *it = &ex->walk;
            if (it->seg_left == 0 && !walk_next(it))
                break;                  /* not reached: total counts the rows */
            m = it->seg_left < n - put ? it->seg_left : n - put;
            memcpy(out + put, it->seg, m);
            ex->crc = jnl_crc32c(ex->crc, out + put, m);  /* while in cache */
            it->seg += m;
            it->seg_left -= m;
        } else {
            if (ex->done == rows_end)   /* the rows are out: the CRC is known */
                memcpy(ex->tail, &ex->crc, sizeof ex->tail);
            size_t at = ex->done - rows_end;
            m = sizeof ex->tail - at < n - put ? sizeof ex->tail - at : n - put;
            memcpy(out + put, ex->tail + at, m);
        }
        put += m;
        ex->done += m;
        if (ex->kv && ex->done >= rows_end) {
            /* the rows are out: their pages are let go now, not when the
             * transport frees the exporter after the last byte is sent, so
             * a client that has the whole export finds the session's
             * bytes its own again, not shared with this snapshot */
            kv_free(ex->kv);
            ex->kv = NULL;
        }
    }
    return put;
}

void sess_export_free(struct sess_exporter *ex)
{
    if (!ex)
        return;
    kv_free(ex->kv);
    free(ex->head);
    free(ex);
}
