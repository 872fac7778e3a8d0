/*
 * core/persist_read.c — reading the encoding of a session that
 * core/persist.c writes (its format is described there): sess_decode for
 * the state files and the journal, sess_import and the importer for a
 * session moved from another replica.
 *
 * Reading goes piece by piece (struct sess_importer), so that an upload is
 * imported as it arrives, never held whole: the header is gathered until
 * it reads whole (each attempt waits for the bytes its first missing field
 * needs), then checked (sizes, limits, settings) and the session's pages
 * claimed and allocated; then each piece of rows is checksummed, copied
 * straight into its page and checked for finiteness there while it is in
 * cache; the trailing checksum is compared at the end. Decoding a state
 * file (sess_decode) is the same reader over one piece, without a store.
 *
 * The IEEE CRC-32 of versions 1 to 3 is hand-written (a 256-entry table)
 * because zlib is not among the build dependencies; version 4 uses the
 * journal's CRC-32C, which has the SSE4.2 instruction.
 */
#include "persist.h"
#include "persist_impl.h"
#include "store_impl.h"

#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- reading ------------------------------------------------------------ */

struct rd {
    const unsigned char *base; /* the first byte */
    const unsigned char *p;    /* next byte */
    size_t left;               /* bytes that may be read */
    uint32_t version;
    const char *err;           /* first problem, or NULL */
    bool nomem;                /* err is memory short, not the bytes */
    size_t need;               /* err from a short read: the bytes from base it
                                  wanted (SIZE_MAX: more than any); else 0 */
};

/* A read of n bytes past what is there. */
static void short_read(struct rd *r, size_t n)
{
    size_t at = (size_t)(r->p - r->base);
    r->err = "truncated";
    r->need = n > SIZE_MAX - at ? SIZE_MAX : at + n;
}

static bool get(struct rd *r, void *p, size_t n)
{
    if (r->err)
        return false;
    if (n > r->left) {
        short_read(r, n);
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
    if (a > SIZE_MAX || b > SIZE_MAX || !core_mul3((size_t)a, (size_t)b, es, &bytes)) {
        short_read(r, SIZE_MAX);
        return NULL;
    }
    if (bytes > r->left) {
        short_read(r, bytes);
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
        r->err = core_status_text(CORE_ENOMEM);
        r->nomem = true;
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
    bool has_idem;                  /* (version 6) made with a key */
    struct sess_idem idem;
};

/* Free l's arrays (a session made of it holds copies). */
static void loaded_free(struct loaded *l)
{
    free(l->slopes);
    free(l->sinks);
    free(l->bq);
    free(l->bk);
    free(l->bv);
    l->slopes = l->sinks = NULL;
    l->bq = l->bk = l->bv = NULL;
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

/* The version 5 yarn_truncate: 1 (HF's default rounding) or 0, and 0
 * only with yarn (versions 1 to 4 leave the default). */
static void read_truncate(struct rd *r, struct loaded *l)
{
    struct attn_rope_scaling *sc = &l->spec.params.rope_scaling;
    uint32_t t = get_u32(r);
    if (!r->err && (t > 1 || (t == 0 && sc->type != ATTN_ROPE_SCALING_YARN)))
        r->err = "bad header field";
    sc->no_truncate = t == 0;
}

/* The version 6 idempotency key: scope (no NUL) and key (1..255 bytes
 * of 0x21..0x7e, as the api takes them) and the digest. */
static void read_idem(struct rd *r, struct loaded *l)
{
    uint32_t has = get_u32(r), n;
    if (!r->err && has > 1)
        r->err = "bad header field";
    if (r->err || !has)
        return;
    n = get_u32(r);
    if (!r->err && n >= SESS_IDEM_SCOPE_MAX)
        r->err = "bad idempotency key";
    get(r, l->idem.scope, r->err ? 0 : n);
    if (!r->err && memchr(l->idem.scope, '\0', n))
        r->err = "bad idempotency key";
    n = get_u32(r);
    if (!r->err && (n == 0 || n >= SESS_IDEM_KEY_MAX))
        r->err = "bad idempotency key";
    get(r, l->idem.key, r->err ? 0 : n);
    for (uint32_t i = 0; !r->err && i < n; i++)
        if (l->idem.key[i] < 0x21 || l->idem.key[i] > 0x7e)
            r->err = "bad idempotency key";
    get(r, l->idem.digest, sizeof l->idem.digest);
    l->has_idem = !r->err;
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
        r->err = "wrong magic: not an attnd session";
    r->version = get_u32(r);
    if (!r->err && (r->version < 1 || r->version > PERSIST_VERSION))
        r->err = "unknown version";
    uint32_t bom = get_u32(r);          /* a short read keeps its "truncated" */
    if (!r->err && bom != PERSIST_BOM)
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
    if (r->version >= 5)
        read_truncate(r, l);
    if (r->version >= 6)
        read_idem(r, l);
    if (!r->err && l->rows > l->spec.max_tokens)     /* rows held at most */
        r->err = "bad header field";
}

/* The biases and (version 4) the zero padding before the rows: the rest
 * of the header. */
static void read_biases(struct rd *r, struct loaded *l)
{
    struct sess_spec *sp = &l->spec;
    const struct attn_shape *sh = &sp->shape;
    size_t es = attn_dtype_size(sp->params.dtype);
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
    if (r->version >= 4) {
        size_t n_pad = (8 - (size_t)(r->p - r->base) % 8) % 8;
        const unsigned char *pad = take(r, n_pad, 1, 1);
        for (size_t i = 0; pad && !r->err && i < n_pad; i++)
            if (pad[i])
                r->err = "bad padding";
    }
}

/* One array of the rows: [h_kv][held rows][w bytes] of part `kind` of the
 * cache (kv_fill_at's), elements of es bytes. */
struct rows_part {
    int kind;
    size_t w, es;
};

/* The arrays of the rows in their order (version 4: the int8 scales, K,
 * V; before: K, V, the scales) into out[4]; their count, and their bytes
 * in *bytes; 0 with *bytes SIZE_MAX when those overflow. */
static int rows_parts(const struct loaded *l, uint32_t version, struct rows_part out[4],
                      size_t *bytes)
{
    const struct sess_spec *sp = &l->spec;
    size_t es = attn_dtype_size(sp->params.dtype), h_kv = sp->shape.h_kv, n = 0, all = 0;
    size_t ses = sp->kv_store == KV_STORE_SAME ? es : sp->kv_store == KV_STORE_I8 ? 1 : 2;
    bool i8 = sp->kv_store == KV_STORE_I8;
    struct rows_part k = {0, 0, ses}, v = {1, 0, ses};
    struct rows_part ks = {2, sizeof(float), sizeof(float)}, vs = {3, sizeof(float), sizeof(float)};
    *bytes = SIZE_MAX;
    if (!core_mul(sp->shape.d_k, ses, &k.w) || !core_mul(sp->shape.d_v, ses, &v.w))
        return 0;
    if (i8 && version >= 4) {
        out[n++] = ks;
        out[n++] = vs;
    }
    out[n++] = k;
    out[n++] = v;
    if (i8 && version < 4) {
        out[n++] = ks;
        out[n++] = vs;
    }
    for (size_t i = 0; i < n; i++) {
        size_t b;
        if (l->rows > SIZE_MAX || !core_mul3((size_t)l->rows, h_kv, out[i].w, &b) ||
            !core_add(all, b, &all))
            return 0;
    }
    *bytes = all;
    return (int)n;
}

/* ---- import, piece by piece ---------------------------------------------- */

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

enum imp_phase {
    IMP_HEAD,       /* the header's bytes are gathered in hb */
    IMP_ROWS,       /* rows are copied into the cache */
    IMP_SUM,        /* the trailing checksum's 4 bytes */
    IMP_DONE,       /* all there: any more is trailing */
};

struct sess_importer {
    struct sess_store *st;          /* NULL: a decode (no limits, claim or link) */
    struct sess_import_limits lim;  /* all 0: none */
    size_t total;                   /* the bytes announced, or SIZE_MAX */
    enum core_status rc;            /* CORE_OK, or the first refusal */
    const char *bad;                /* its reason as a static text */
    char why[SESS_WHY_MAX];         /* its reason for the caller */
    enum imp_phase phase;
    unsigned char *hb;              /* the header so far (IMP_HEAD) */
    size_t hn, hcap, need;          /* its bytes, room, and the bytes that the
                                       next attempt to read it needs */
    uint32_t version;
    struct loaded l;                /* the header read (its arrays freed) */
    struct sess *s;                 /* the new session, unlinked, being filled */
    bool has_idem;                  /* an import's own key (sess_import_set_idem) */
    struct sess_idem idem;
    size_t claimed;                 /* bytes claimed in st while allocating */
    struct rows_part parts[4];
    int pi;                         /* the array of rows arriving */
    size_t g, row, b;               /* its head, held row, byte in that row */
    size_t front;                   /* held row r is row r below front, else
                                       l.first + (r - front) */
    size_t left;                    /* bytes of rows still to come */
    uint32_t crc;                   /* of every byte before the checksum */
    unsigned char sum[4];           /* the trailing checksum */
    size_t sn;
};

/* The running checksum of the encoding's version over p[n]. */
static uint32_t crc_more(uint32_t version, uint32_t crc, const void *p, size_t n)
{
    return version >= 4 ? jnl_crc32c(crc, p, n) : crc_update(ieee_table(), crc, p, n);
}

/* Everything built so far goes at once: the session and its pages, the
 * claim, the header's bytes. */
static void drop_all(struct sess_importer *im)
{
    sess_destroy(im->s);
    im->s = NULL;
    if (im->claimed)
        sess_unclaim_rows(im->st, im->claimed);
    im->claimed = 0;
    free(im->hb);
    im->hb = NULL;
    im->hn = im->hcap = 0;
    loaded_free(&im->l);
}

/* The first refusal: rc with text (static) as its reason and prefix
 * before it in why (text NULL: why is said already, the reason is rc's
 * text); everything built is dropped. */
static void refuse(struct sess_importer *im, enum core_status rc, const char *prefix,
                   const char *text)
{
    if (im->rc != CORE_OK)
        return;
    im->rc = rc;
    im->bad = text ? text : core_status_text(rc);
    if (text)
        say(im->why, "%s%s", prefix ? prefix : "", text);
    drop_all(im);
}

/* A failure to make a session of read bytes: too big (CORE_ELIMIT) and
 * out of memory stay what they are; anything else means the bytes are bad
 * (a setting out of range, a non-finite value). */
static enum core_status bad_bytes(enum core_status rc)
{
    return rc == CORE_ELIMIT || rc == CORE_ENOMEM ? rc : CORE_ECORRUPT;
}

/* The importing replica's limits on the header read (max_cache: its whole
 * cache, 0 unbounded); why set when over. */
static enum core_status import_limits(const struct loaded *l,
                                      const struct sess_import_limits *lim, size_t max_cache,
                                      char *why)
{
    const struct attn_shape *sh = &l->spec.shape;
    size_t max = lim->max_row_elements, q, kv;
    if (max && (!core_mul(sh->h, sh->d_k, &q) || q > max ||
                !core_add(sh->d_k, sh->d_v, &kv) || !core_mul(kv, sh->h_kv, &kv) ||
                kv > max)) {
        say(why, "a row over all heads is over this replica's element limit (%zu)", max);
        return CORE_ELIMIT;
    }
    if (lim->max_tokens && l->spec.max_tokens > lim->max_tokens) {
        say(why, "its max_tokens (%zu) is over this replica's limit (%zu)",
            l->spec.max_tokens, lim->max_tokens);
        return CORE_ELIMIT;
    }
    /* as a create is refused (api_roll_check_bytes): else it would be
     * refused an append for good once it held that many rows */
    size_t need = sess_roll_bytes_need(&l->spec);
    if (l->spec.window.on && max_cache && need > max_cache) {
        say(why, "it rolls with window left %lld and %lld sinks, holding up to %zu rows and "
            "one more while it appends: over this replica's whole cache (%zu bytes)",
            (long long)l->spec.window.left, (long long)l->spec.window.sinks,
            sess_roll_held_max(&l->spec.window), max_cache);
        return CORE_ELIMIT;
    }
    return CORE_OK;
}

/* The bytes of the new session's pages claimed in the store before they
 * are allocated: over the whole cache is a limit, over what is free now
 * (lru: after evicting idle sessions) capacity. why set when refused. */
static enum core_status import_claim(struct sess_importer *im)
{
    size_t bytes, max = im->st->cfg.max_cache_bytes;
    /* a fresh cache filled exactly holds its rows times a row's bytes (no
     * kv_plan walk of every page: seconds for a header announcing 1e10) */
    if (im->l.rows > SIZE_MAX || !core_mul((size_t)im->l.rows, kv_row_bytes(im->s->kv), &bytes)) {
        say(im->why, "its rows do not fit in memory");
        return CORE_ELIMIT;
    }
    if (max && bytes > max) {
        say(im->why, "it needs %zu cache bytes, over this replica's whole cache (%zu)",
            bytes, max);
        return CORE_ELIMIT;
    }
    if (sess_claim_new(im->st, bytes) != CORE_OK) {
        say(im->why, "no room for %zu more cache bytes and one more session now", bytes);
        return CORE_ECAPACITY;
    }
    im->claimed = bytes;
    return CORE_OK;
}

/* The body's bytes at most: those announced, else the transport's cap (a
 * header or rows past it are never all sent, and the rows' pages are
 * claimed before they arrive), else SIZE_MAX. */
static size_t body_most(const struct sess_importer *im)
{
    return im->total != SIZE_MAX ? im->total : im->lim.max_bytes ? im->lim.max_bytes : SIZE_MAX;
}

/* The header is whole (its first `used` bytes of hb): the size of the
 * rows against the bytes announced, the limits, the settings, the claim,
 * and the pages the rows go to. */
static void head_done(struct sess_importer *im, size_t used)
{
    struct loaded *l = &im->l;
    size_t rows_bytes, end, most = body_most(im);
    if (!rows_parts(l, im->version, im->parts, &rows_bytes) || !core_add(used, rows_bytes, &end) || end > SIZE_MAX - 4 ||
        end + 4 > most) {
        refuse(im, CORE_ECORRUPT, NULL, "truncated");
        return;
    }
    if (im->total != SIZE_MAX && end + 4 < im->total) {
        refuse(im, CORE_ECORRUPT, NULL, "trailing bytes");
        return;
    }
    enum core_status rc = CORE_OK;
    if (im->st && (rc = import_limits(l, &im->lim, im->st->cfg.max_cache_bytes, im->why)) !=
                      CORE_OK) {
        refuse(im, rc, NULL, NULL);
        return;
    }
    if (!(im->s = sess_new_from_spec(&l->spec, &rc))) {
        refuse(im, bad_bytes(rc), "its settings: ", core_status_text(rc));
        return;
    }
    loaded_free(l);                 /* the session holds copies */
    /* a decode keeps the key; an import takes its request's instead */
    if (!im->st && l->has_idem && !sess_set_idem(im->s, &l->idem)) {
        refuse(im, CORE_ENOMEM, NULL, core_status_text(CORE_ENOMEM));
        return;
    }
    if (im->st && (rc = import_claim(im)) != CORE_OK) {
        refuse(im, rc, NULL, NULL);
        return;
    }
    if (im->st)
        kv_set_acct(im->s->kv, &im->st->acct);  /* counted from the first page */
    im->front = l->first ? (size_t)front_rows(l) : (size_t)l->rows;
    rc = kv_fill_open(im->s->kv, im->front, (size_t)l->first, (size_t)l->length);
    if (im->claimed)
        sess_unclaim_rows(im->st, im->claimed);
    im->claimed = 0;
    if (rc != CORE_OK) {
        refuse(im, bad_bytes(rc), "its rows: ", core_status_text(rc));
        return;
    }
    im->left = rows_bytes;
    im->phase = rows_bytes ? IMP_ROWS : IMP_SUM;
}

/* Read the header from hb if it is whole: the bytes it took (and the
 * import goes on with the rows), else 0: a refusal, or waiting for the
 * bytes that the first missing field needs (one that cannot fit in the
 * bytes announced is "truncated" at once). */
static size_t head_try(struct sess_importer *im)
{
    size_t most = body_most(im);
    most = most == SIZE_MAX ? SIZE_MAX : most < 4 ? 0 : most - 4;  /* before the checksum */
    loaded_free(&im->l);
    memset(&im->l, 0, sizeof im->l);
    struct rd r = {.base = im->hb, .p = im->hb, .left = im->hn < most ? im->hn : most};
    read_header(&r, &im->l);
    read_biases(&r, &im->l);
    if (r.err) {
        loaded_free(&im->l);
        if (r.need > im->hn && r.need <= most)
            im->need = r.need;      /* more bytes to come */
        else
            refuse(im, r.nomem ? CORE_ENOMEM : CORE_ECORRUPT, NULL, r.err);
        return 0;
    }
    size_t used = (size_t)(r.p - r.base);
    im->version = r.version;
    im->crc = crc_more(im->version, 0, im->hb, used);
    head_done(im, used);
    return im->rc == CORE_OK ? used : 0;
}

static void feed(struct sess_importer *im, const unsigned char *p, size_t n);

/* Gather header bytes from p[n] up to what the next attempt to read it
 * needs, and try; bytes gathered past a whole header go on as rows.
 * Returns the bytes taken. */
static size_t head_feed(struct sess_importer *im, const unsigned char *p, size_t n)
{
    size_t k = im->need - im->hn < n ? im->need - im->hn : n;
    if (im->hn + k > im->hcap) {
        size_t cap = im->hcap ? im->hcap : 4096;
        while (cap < im->hn + k)
            cap = cap > SIZE_MAX / 2 ? im->hn + k : cap * 2;
        unsigned char *q = realloc(im->hb, cap);
        if (!q) {
            refuse(im, CORE_ENOMEM, NULL, core_status_text(CORE_ENOMEM));
            return n;
        }
        im->hb = q;
        im->hcap = cap;
    }
    memcpy(im->hb + im->hn, p, k);
    im->hn += k;
    size_t used = im->hn < im->need ? 0 : head_try(im);
    if (used) {
        unsigned char *hb = im->hb;
        size_t hn = im->hn;
        im->hb = NULL;
        im->hn = im->hcap = 0;
        feed(im, hb + used, hn - used);
        free(hb);
    }
    return k;
}

/* Copy rows from p[n] into the cache, with the checksum and the check of
 * every element completed; returns the bytes taken. Each piece goes to
 * one page's contiguous rows of one head and part, checked there while it
 * is in cache. */
static size_t rows_feed(struct sess_importer *im, const unsigned char *p, size_t n)
{
    struct kv_cache *kv = im->s->kv;
    size_t took = 0, held = (size_t)im->l.rows, h_kv = kv_heads(kv);
    while (n && im->left) {
        const struct rows_part *pt = &im->parts[im->pi];
        size_t row = im->row < im->front ? im->row : (size_t)im->l.first + (im->row - im->front);
        void *at;
        size_t run = kv_fill_at(kv, pt->kind, im->g, row, &at);
        if (run > held - im->row)
            run = held - im->row;
        size_t room = run * pt->w - im->b, k = room < n ? room : n;
        unsigned char *d = at;
        im->crc = crc_more(im->version, im->crc, p, k);
        memcpy(d + im->b, p, k);
        /* the elements this piece completes (one may have begun before) */
        size_t lo = im->b / pt->es * pt->es, hi = (im->b + k) / pt->es * pt->es;
        took += k;
        if (hi > lo && !kv_stored_finite(kv, pt->kind, d + lo, (hi - lo) / pt->es)) {
            refuse(im, CORE_ECORRUPT, "its rows: ", core_status_text(CORE_ENONFINITE));
            return took;
        }
        p += k;
        n -= k;
        im->left -= k;
        im->row += (im->b + k) / pt->w;
        im->b = (im->b + k) % pt->w;
        if (im->row == held) {
            im->row = 0;
            if (++im->g == h_kv) {
                im->g = 0;
                im->pi++;
            }
        }
    }
    if (!im->left)
        im->phase = IMP_SUM;
    return took;
}

static void feed(struct sess_importer *im, const unsigned char *p, size_t n)
{
    while (n && im->rc == CORE_OK) {
        size_t k = n;
        switch (im->phase) {
        case IMP_HEAD:
            k = head_feed(im, p, n);
            break;
        case IMP_ROWS:
            k = rows_feed(im, p, n);
            break;
        case IMP_SUM:
            k = 4 - im->sn < n ? 4 - im->sn : n;
            memcpy(im->sum + im->sn, p, k);
            im->sn += k;
            if (im->sn == 4)
                im->phase = IMP_DONE;
            break;
        case IMP_DONE:
            refuse(im, CORE_ECORRUPT, NULL, "trailing bytes");
            break;
        }
        p += k;
        n -= k;
    }
}

struct sess_importer *sess_import_begin(struct sess_store *st,
                                        const struct sess_import_limits *lim,
                                        size_t total)
{
    struct sess_importer *im = calloc(1, sizeof *im);
    if (!im)
        return NULL;
    im->st = st;
    if (lim)
        im->lim = *lim;
    im->total = total;
    im->need = 1;
    return im;
}

enum core_status sess_import_feed(struct sess_importer *im, const void *p, size_t n)
{
    feed(im, p, n);
    return im->rc;
}

/* The bytes ended: whole, with the right checksum? The session's length
 * is then set (rc CORE_OK). */
static void finish(struct sess_importer *im)
{
    if (im->rc != CORE_OK)
        return;
    if (im->phase != IMP_DONE) {
        refuse(im, CORE_ECORRUPT, NULL, "truncated");
        return;
    }
    uint32_t want;
    memcpy(&want, im->sum, sizeof want);
    if (want != im->crc) {
        refuse(im, CORE_ECORRUPT, NULL, "checksum mismatch");
        return;
    }
    kv_fill_close(im->s->kv, (size_t)im->l.length);
}

enum core_status sess_import_end(struct sess_importer *im, char *id, struct sess **held)
{
    finish(im);
    if (im->rc != CORE_OK)
        return im->rc;
    struct sess *s = im->s;
    im->s = NULL;
    s->id[0] = '\0';               /* a new id of this replica */
    if (!sess_set_idem(s, im->has_idem ? &im->idem : NULL)) {
        sess_destroy(s);
        im->rc = CORE_ENOMEM;
        say(im->why, "%s", core_status_text(im->rc));
        return im->rc;
    }
    im->rc = sess_link_journaled(im->st, s, id, held);
    if (im->rc == CORE_ECAPACITY)
        say(im->why, "no room for one more session now");
    else if (im->rc != CORE_OK)
        say(im->why, "%s", core_status_text(im->rc));
    return im->rc;
}

void sess_import_set_idem(struct sess_importer *im, const struct sess_idem *idem)
{
    im->has_idem = idem != NULL;
    if (idem)
        im->idem = *idem;
}

const char *sess_import_why(const struct sess_importer *im)
{
    return im->why;
}

void sess_import_free(struct sess_importer *im)
{
    if (!im)
        return;
    drop_all(im);
    free(im);
}

enum core_status sess_import(struct sess_store *st, const void *p, size_t n,
                             const struct sess_import_limits *lim, char *id,
                             char *why)
{
    struct sess_importer *im = sess_import_begin(st, lim, n);
    if (!im)
        return CORE_ENOMEM;
    sess_import_feed(im, p, n);
    enum core_status rc = sess_import_end(im, id, NULL);
    say(why, "%s", im->why);
    sess_import_free(im);
    return rc;
}

bool sess_encoded_id(const void *p, size_t n, char *id)
{
    struct rd r = {.base = p, .p = p, .left = n};
    struct loaded l = {0};
    char magic[8] = {0};
    get(&r, magic, 8);
    get_u32(&r);                /* version and byte-order mark */
    get_u32(&r);
    read_id(&r, &l);
    memcpy(id, l.id, SESS_ID_MAX);
    return !r.err && memcmp(magic, PERSIST_MAGIC, 8) == 0;
}

enum core_status sess_decode(const void *p, size_t n, struct sess **out,
                             double *idle_s, uint32_t *version, const char **why)
{
    struct sess_importer *im = sess_import_begin(NULL, NULL, n);
    *out = NULL;
    *why = core_status_text(CORE_ENOMEM);
    if (!im)
        return CORE_ENOMEM;
    feed(im, p, n);
    finish(im);
    /* every length was bounded by the bytes there before anything was
     * allocated for it: only memory short says nothing of them */
    enum core_status rc = im->rc == CORE_OK || im->rc == CORE_ENOMEM ? im->rc
                                                                     : CORE_ECORRUPT;
    *why = rc == CORE_OK ? NULL : im->bad;
    if (rc == CORE_OK) {
        *out = im->s;
        im->s = NULL;
        memcpy((*out)->id, im->l.id, SESS_ID_MAX);
        *idle_s = im->l.idle_s;
        *version = im->version;
    }
    sess_import_free(im);
    return rc;
}
