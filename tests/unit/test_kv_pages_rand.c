/*
 * tests/unit/test_kv_pages_rand.c — randomized session caches attended in
 * place, against the same rows in one block, bit for bit.
 *
 * Each case: a cache of odd shape (L at and around page, 512-key block and
 * fused superblock ends, or anything below 2600; d_k != d_v, d from 1 to
 * 512; up to 16 query heads per kv head), built by uneven appends, with
 * another cache's appends in between (its pages then lie apart, or in runs),
 * maybe forked (the fork's first pages are the parent's, then its own) and
 * maybe rolling (sinks kept, pages below the window let go); attended with
 * random options (causal corners, a window with sinks, softcap, softmax
 * variants, ALiBi, an attention bias; output, or scores and weights; lse,
 * statistics and top-k on float32/float64 caches), with and without a
 * helper pool, sometimes stopped at a piece boundary and run again, on one
 * workspace for every case (as a worker's). float32/float64 caches are
 * compared with attn_forward (attn_forward_extras) over the held rows (at
 * their positions once rows were let go); float16, bfloat16 and int8
 * caches with a cache of the same rows appended at once.
 *
 * KV_RAND_CASES (300), KV_RAND_SEED, KV_RAND_NARROW (narrow caches only)
 * and KV_RAND_KERNEL (avx512, avx2, none) widen a run by hand. A run of
 * pages counted one row long at odd rows (attn_impl.h's run) makes about
 * 1% of cases differ (3 of this seed's 300), hence 300.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_extras.h"
#include "core/attn_fused.h"
#include "core/kv.h"
#include "core/pool.h"
#include "core/stop.h"
#include "tests/harness.h"

#define P KV_PAGE_ROWS

static uint64_t rng = 0x5DEECE66Dull;

static size_t pick(size_t n)
{
    return (size_t)(t_rng_next(&rng) % n);
}

static double urand(void)
{
    return (double)(t_rng_next(&rng) >> 11) / 9007199254740992.0 * 2 - 1;
}

static void *rnd(enum attn_dtype dt, size_t n, double a)
{
    void *p = malloc(n * attn_dtype_size(dt) + 8);
    for (size_t i = 0; i < n; i++) {
        if (dt == ATTN_F32)
            ((float *)p)[i] = (float)(a * urand());
        else
            ((double *)p)[i] = a * urand();
    }
    return p;
}

/* A length near something that matters. */
static size_t some_len(void)
{
    static const size_t ends[] = {1, 2, 63, 64, 65, 127, 128, 129, 511, 512, 513, 575, 576,
                                  1023, 1024, 1025, 1536, 2047, 2048, 2049};
    if (pick(3) == 0)
        return 1 + pick(2600);
    return ends[pick(sizeof ends / sizeof ends[0])];
}

static size_t fails, not_ok, prefill, stopped, with_extras;

/* A stop that becomes due at its `at`-th piece boundary. */
struct count_stop {
    struct attn_stop s;
    atomic_bool cancel;
    atomic_size_t seen;
    size_t at;
};

static void count_pause(void *arg)
{
    struct count_stop *c = arg;
    if (atomic_fetch_add(&c->seen, 1) + 1 >= c->at)
        atomic_store(&c->cancel, true);
}

/* The extras' arrays of `rows` rows and top k in one zeroed block (so
 * two of them compare with one memcmp); nothing when !on. */
struct extras_bufs {
    struct attn_extras_out o;
    void *mem;
    size_t bytes;
};

static void extras_alloc(struct extras_bufs *x, bool on, size_t rows, size_t k, size_t es)
{
    memset(x, 0, sizeof *x);
    if (!on)
        return;
    x->bytes = rows * (4 * es + 8 + k * (8 + es));
    char *m = x->mem = calloc(1, x->bytes);
    x->o.lse = m;
    x->o.entropy = m + rows * es;
    x->o.max_weight = m + 2 * rows * es;
    x->o.mass = m + 3 * rows * es;
    x->o.argmax = (int64_t *)(void *)(m + 4 * rows * es);
    x->o.top_idx = x->o.argmax + rows;
    x->o.top_val = x->o.top_idx + rows * k;
}

/* One random case; true when every compared byte matched. */
static bool one_case(unsigned seed_case, struct attn_pool *pool, bool narrow_only)
{
    static const size_t ds[] = {1, 3, 8, 16, 64, 80, 128, 256, 512};
    static const size_t groups[] = {1, 2, 3, 8, 16};
    enum attn_dtype dt = pick(2) ? ATTN_F32 : ATTN_F64;
    enum kv_store store = narrow_only || (dt == ATTN_F32 && pick(3) == 0)
                              ? (enum kv_store)(1 + pick(3)) : KV_STORE_SAME;
    if (store != KV_STORE_SAME)
        dt = ATTN_F32;
    size_t es = attn_dtype_size(dt);
    size_t h_kv = 1 + pick(2), grp = groups[pick(5)], h = h_kv * grp;
    size_t dk = ds[pick(9)], dv = pick(3) ? dk : ds[pick(9)];
    size_t L = some_len();
    while (h_kv * L * (dk + dv) > ((size_t)3 << 20))    /* keep a case small */
        L = L / 2 + 1;
    bool fork = pick(3) == 0, roll = pick(3) == 0;
    size_t Lf = fork ? 1 + pick(300) : 0;               /* the fork's own rows */
    size_t T = L + Lf;
    void *k = rnd(dt, h_kv * T * dk, 1), *v = rnd(dt, h_kv * T * dv, 1);
    struct kv_cache *c = kv_new_store(dt, store, h_kv, dk, dv), *o = kv_new_store(dt, store, h_kv, dk, dv);
    void *kb = malloc(h_kv * T * dk * es + 8), *vb = malloc(h_kv * T * dv * es + 8);
    void *ok = rnd(dt, h_kv * 4 * P * (dk > dv ? dk : dv), 1);
    int inter = (int)pick(3);       /* 0: alone, 1: another cache between, 2: sometimes */
    /* rows [a, e) of every head into the cache, in uneven appends */
    size_t at = 0;
    struct kv_cache *dst = c;
    size_t S = 1 + pick(80), W = 1 + pick(300);
    for (int part = 0; part < (fork ? 2 : 1); part++) {
        size_t end = part ? T : L;
        while (at < end) {
            size_t m = pick(4) == 0 ? P : 1 + pick(pick(2) ? 7 : 200);
            m = m < end - at ? m : end - at;
            for (size_t g = 0; g < h_kv; g++) {
                memcpy((char *)kb + g * m * dk * es, (char *)k + (g * T + at) * dk * es,
                       m * dk * es);
                memcpy((char *)vb + g * m * dv * es, (char *)v + (g * T + at) * dv * es,
                       m * dv * es);
            }
            CHECK_EQ_INT(kv_append_prepared(dst, kb, vb, m), CORE_OK);
            at += m;
            if (inter == 1 || (inter == 2 && pick(2)))
                CHECK_EQ_INT(kv_append_prepared(o, ok, ok, 1 + pick(P)), CORE_OK);
            if (roll) {
                size_t len = kv_length(dst);
                kv_roll(dst, S, len > W ? len - W : 0);
            }
        }
        if (fork && part == 0) {
            dst = kv_fork(c);
            if (pick(2))                /* the parent writes on too */
                CHECK_EQ_INT(kv_append_prepared(c, kb, vb, 1), CORE_OK);
        }
    }
    size_t len = kv_length(dst), held = kv_held(dst);
    /* the request */
    size_t n = pick(3) == 0 ? 1 + pick(4) : (pick(2) ? 1 + pick(len) : 1 + pick(200));
    n = n < len ? n : len;
    if (h * n * (held + dk + dv) > ((size_t)4 << 20))
        n = 1;
    struct attn_request r = {
        .shape = {.h = h, .h_kv = h_kv, .n = n, .L = held, .d_k = dk, .d_v = dv},
        .params = {.dtype = dt, .scale = attn_default_scale(dk)},
        .attn_bias_heads = 1, .mask_heads = 1, .outputs = ATTN_OUT_OUTPUT};
    r.causal = (enum attn_causal)pick(3);
    if (roll && r.causal == ATTN_CAUSAL_NONE)
        r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (pick(3) == 0) {
        r.window.on = true;
        r.window.left = pick(3) ? (int64_t)pick(700) : -1;
        r.window.right = pick(2) ? (int64_t)pick(50) : -1;
        r.window.sinks = pick(2) ? (int64_t)pick(130) : 0;
    }
    if (pick(4) == 0)
        r.params.softcap = 1 + 30 * (urand() + 1);
    int sm = (int)pick(4);
    if (sm == 1)
        r.params.softmax = ATTN_SOFTMAX_ONE;
    if (sm == 2) {
        r.params.softmax = ATTN_SOFTMAX_SINK;
        r.params.sink_logit = urand() * 3;
    }
    if (pick(5) == 0)
        r.params.alibi = true;
    void *bias = NULL;
    if (pick(6) == 0 && n * held < ((size_t)1 << 20)) {
        bias = rnd(dt, n * held, 2);
        r.attn_bias = bias;
    }
    int outs = (int)pick(4);
    r.outputs = outs == 0 ? ATTN_OUT_ALL : outs == 1 ? ATTN_OUT_SCORES | ATTN_OUT_WEIGHTS
                                                     : ATTN_OUT_OUTPUT;
    if (h * n * held > ((size_t)2 << 20))
        r.outputs = ATTN_OUT_OUTPUT;
    void *q = rnd(dt, h * n * dk, 2);
    /* the held rows in one block and their positions */
    size_t front = kv_held_front(dst), from = kv_held_from(dst);
    void *kh = malloc(h_kv * held * dk * es + 8), *vh = malloc(h_kv * held * dv * es + 8);
    int64_t *pos = malloc((n + held) * sizeof *pos);
    for (size_t g = 0; g < h_kv; g++)
        for (size_t j = 0; j < held; j++) {
            size_t row = j < front ? j : j - front + from;
            /* the fork's rows: [0, L) of c's, then its own */
            memcpy((char *)kh + (g * held + j) * dk * es, (char *)k + (g * T + row) * dk * es,
                   dk * es);
            memcpy((char *)vh + (g * held + j) * dv * es, (char *)v + (g * T + row) * dv * es,
                   dv * es);
            pos[n + j] = (int64_t)row;
        }
    for (size_t i = 0; i < n; i++)
        pos[i] = r.causal == ATTN_CAUSAL_TOP_LEFT ? (int64_t)i : (int64_t)(len - n + i);
    struct attn_request rs = r;
    if (kv_held_from(dst)) {
        rs.pos_q = pos;
        rs.pos_k = pos + n;
        rs.pos_q_batches = rs.pos_k_batches = 1;
    }
    size_t sw = h * n * held * es, so = h * n * dv * es;
    bool sc = r.outputs & ATTN_OUT_SCORES, wt = r.outputs & ATTN_OUT_WEIGHTS,
         ot = r.outputs & ATTN_OUT_OUTPUT;
    struct attn_result a = {sc ? malloc(sw) : NULL, wt ? malloc(sw) : NULL,
                            ot ? malloc(so) : NULL, NULL, 0};
    struct attn_result b = {sc ? malloc(sw) : NULL, wt ? malloc(sw) : NULL,
                            ot ? malloc(so) : NULL, NULL, 0};
    static struct attn_ws *ws;         /* one workspace for every case, as a worker's */
    if (!ws)
        ws = attn_ws_new();
    attn_ws_set_pool(ws, pick(2) ? pool : NULL);
    /* sometimes the extras too (lse, statistics, top-k): a float32/float64
     * cache's rows gathered into one block per head */
    struct attn_extras xx = {ATTN_X_LSE | ATTN_X_STATS | ATTN_X_TOPK, NULL, 0, 1 + pick(8)};
    bool ext = store == KV_STORE_SAME && pick(4) == 0;
    struct extras_bufs xa, xb;
    extras_alloc(&xa, ext, h * n, xx.top_k, es);
    extras_alloc(&xb, ext, h * n, xx.top_k, es);
    struct attn_inputs full = {.q = q, .k = kh, .v = vh};
    struct attn_inputs qin = {.q = q};
    enum core_status sa;
    struct kv_cache *one = NULL;
    if (store == KV_STORE_SAME) {
        sa = ext ? attn_forward_extras(&rs, &full, NULL, &xx, &a, &xa.o, ws)
                 : attn_forward(&rs, &full, &a, ws);
    } else {                            /* the same rows appended at once */
        one = kv_new_store(dt, store, h_kv, dk, dv);
        size_t nrow = fork ? T : L;
        void *k1 = malloc(h_kv * nrow * dk * es + 8), *v1 = malloc(h_kv * nrow * dv * es + 8);
        for (size_t g = 0; g < h_kv; g++) {
            memcpy((char *)k1 + g * nrow * dk * es, (char *)k + g * T * dk * es, nrow * dk * es);
            memcpy((char *)v1 + g * nrow * dv * es, (char *)v + g * T * dv * es, nrow * dv * es);
        }
        CHECK_EQ_INT(kv_append_prepared(one, k1, v1, nrow), CORE_OK);
        if (roll)
            kv_roll(one, S, len > W ? len - W : 0);
        CHECK_EQ_INT(kv_held(one), held);
        free(k1), free(v1);
        sa = kv_attend(one, &r, &qin, &a, ws);
    }
    struct count_stop cs = {.at = 1 + pick(6)};
    cs.s.cancel = &cs.cancel;
    cs.s.pause = count_pause;
    cs.s.pause_arg = &cs;
    bool stop = pick(8) == 0;
    if (stop)
        attn_ws_set_stop(ws, &cs.s);
    enum core_status sb = ext ? kv_attend_x(dst, &r, &qin, &xx, &xb.o, &b, ws)
                              : kv_attend(dst, &r, &qin, &b, ws);
    attn_ws_set_stop(ws, NULL);
    if (stop && sb == CORE_ESTOPPED) {      /* stopped at a boundary: again, whole */
        stopped++;
        sb = ext ? kv_attend_x(dst, &r, &qin, &xx, &xb.o, &b, ws)
                 : kv_attend(dst, &r, &qin, &b, ws);
    }
    bool same = sa == sb;
    not_ok += sa != CORE_OK;
    prefill += n > 16;
    with_extras += ext;
    if (sa == CORE_OK && sb == CORE_OK) {
        same = (!sc || memcmp(a.scores, b.scores, sw) == 0) &&
               (!wt || memcmp(a.weights, b.weights, sw) == 0) &&
               (!ot || memcmp(a.output, b.output, so) == 0) &&
               (!ext || memcmp(xa.mem, xb.mem, xa.bytes) == 0);
    }
    if (!same) {
        fails++;
        printf("  case %u: %s/%d h=%zu h_kv=%zu n=%zu L=%zu (len %zu front %zu from %zu) dk=%zu "
               "dv=%zu fork=%d roll=%d inter=%d causal=%d win=%d(%lld,%lld,%lld) cap=%g sm=%d "
               "alibi=%d bias=%d outs=%u extras=%d pool=%d st %d/%d\n",
               seed_case, attn_dtype_name(dt), (int)store, h, h_kv, n, held, len, front, from, dk, dv,
               fork, roll, inter, (int)r.causal, r.window.on, (long long)r.window.left,
               (long long)r.window.right, (long long)r.window.sinks, r.params.softcap, sm,
               r.params.alibi, bias != NULL, r.outputs, ext, attn_ws_pool(ws) != NULL, (int)sa,
               (int)sb);
    }
    free(a.scores), free(a.weights), free(a.output);
    free(xa.mem), free(xb.mem);
    free(b.scores), free(b.weights), free(b.output);
    free(q), free(bias), free(kh), free(vh), free(pos), free(k), free(v), free(kb), free(vb);
    free(ok);
    if (dst != c)
        kv_free(dst);
    if (one)
        kv_free(one);
    kv_free(c);
    kv_free(o);
    return same;
}

TEST(random_sessions_equal_stateless)
{
    struct attn_pool *pool = attn_pool_new(1, NULL, NULL);
    const char *e = getenv("KV_RAND_CASES");
    unsigned cases = e ? (unsigned)strtoul(e, NULL, 10) : 300;
    if (!e && t_quick())        /* memcheck, qemu-user: one in 25 */
        cases = 12;
    const char *s = getenv("KV_RAND_SEED");
    if (s)
        rng = strtoull(s, NULL, 10) | 1;
    bool narrow = getenv("KV_RAND_NARROW") != NULL;
    enum attn_kernel kern;
    const char *kn = getenv("KV_RAND_KERNEL");
    if (kn && attn_kernel_parse(kn, &kern))
        printf("  kernel %s\n", attn_kernel_name(attn_kernel_set(kern)));
    for (unsigned i = 0; i < cases; i++)
        one_case(i, pool, narrow);
    printf("  %u cases (%zu refused, %zu of over 16 rows, %zu stopped, %zu with extras), %zu differ\n",
           cases, not_ok, prefill, stopped, with_extras, fails);
    CHECK(fails == 0);
    attn_pool_free(pool);
}

int main(void)
{
    RUN(random_sessions_equal_stateless);
    TEST_MAIN_END();
}
