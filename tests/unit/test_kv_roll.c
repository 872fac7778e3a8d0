/*
 * tests/unit/test_kv_roll.c — rolling caches (kv_roll): pages let go in the
 * middle, sinks kept, lengths and positions counting every row; attention
 * over the held rows equal to the stateless pass over those rows at their
 * absolute positions (bit for bit) and to the stateless pass with the same
 * window over every row ever appended (to rounding); fork, truncate,
 * rollback and restore (kv_skip) of a rolled cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/kv.h"
#include "tests/harness.h"

#define P KV_PAGE_ROWS

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* n random numbers of dtype dt (malloc'd). */
static void *rnd(enum attn_dtype dt, size_t n)
{
    void *p = malloc(n * attn_dtype_size(dt) + 8);
    for (size_t i = 0; i < n; i++) {
        if (dt == ATTN_F32)
            ((float *)p)[i] = (float)urand();
        else
            ((double *)p)[i] = urand();
    }
    return p;
}

/* The rows of a rolling cache: sinks S, window left W. */
struct roll {
    size_t S, W;
};

static void roll_after(struct kv_cache *c, struct roll w)
{
    size_t len = kv_length(c);
    kv_roll(c, w.S, len > w.W ? len - w.W : 0);
}

/* One head of raw rows [L][d] chosen by index list idx[n] into out. */
static void pick(const void *all, size_t d, size_t es, const size_t *idx, size_t n, void *out)
{
    for (size_t j = 0; j < n; j++)
        memcpy((char *)out + j * d * es, (const char *)all + idx[j] * d * es, d * es);
}

TEST(roll_keeps_sinks_and_the_window)
{
    const size_t d = 4, S = 5, W = 100, N = 1000;
    struct roll w = {S, W};
    struct kv_cache *c = kv_new(ATTN_F64, 1, d, d);
    double *k = rnd(ATTN_F64, N * d), *v = rnd(ATTN_F64, N * d);
    size_t max_bytes = 0;
    for (size_t i = 0; i < N; i++) {
        CHECK_EQ_INT(kv_append_prepared(c, k + i * d, v + i * d, 1), CORE_OK);
        roll_after(c, w);
        size_t b = kv_bytes(c);
        max_bytes = b > max_bytes ? b : max_bytes;
        /* held rows: the sinks' page and at most W + one page more */
        CHECK(kv_held(c) <= P + W + P - 1);
    }
    CHECK_EQ_INT(kv_length(c), N);
    CHECK_EQ_INT(kv_held_front(c), P);
    CHECK_EQ_INT(kv_held_from(c), (N - W) / P * P);
    CHECK_EQ_INT(kv_held(c), P + N - (N - W) / P * P);
    /* bytes stay bounded: never more than 1 + ceil(W / P) + 1 pages */
    CHECK(max_bytes <= (2 + (W + P - 1) / P) * P * kv_row_bytes(c));
    CHECK(kv_bytes(c) == kv_capacity(c) * kv_row_bytes(c) - ((kv_held_from(c) - P) * kv_row_bytes(c)));
    /* held rows read back; dropped ones are absent */
    struct kv_seg sg;
    CHECK_EQ_INT(kv_seg(c, 0, P, &sg), 0);
    CHECK_EQ_INT(kv_seg(c, 0, kv_held_from(c) - 1, &sg), 0);
    CHECK(kv_seg(c, 0, S - 1, &sg) > 0);
    double row[4];
    for (size_t r = 0; r < N; r++) {
        if (r >= P && r < kv_held_from(c))
            continue;
        kv_read_stored(c, 0, r, 1, row, NULL, NULL, NULL);
        CHECK(memcmp(row, k + r * d, sizeof row) == 0);
    }
    /* another keep does nothing once rows are gone */
    size_t from = kv_held_from(c);
    kv_roll(c, 3 * P, kv_length(c));
    CHECK_EQ_INT(kv_held_from(c), from);
    kv_free(c);
    free(k);
    free(v);
}

/*
 * A decode through a rolling cache (RoPE, ALiBi, biases, GQA): every step
 * equals the stateless pass over the held rows at their absolute positions
 * bit for bit, and the stateless pass with the window over every row ever
 * appended within tol (the key split depends on L, so not bit for bit).
 */
static void rolling_decode(enum attn_dtype dt, enum kv_store store, double tol_held,
                           double tol_full)
{
    const size_t h = 4, h_kv = 2, d = 8, S = 3, W = 70, N = 400;
    const size_t steps[] = {37, 1, 5, 1, 1, 64, 1, 2, 1};
    size_t es = attn_dtype_size(dt);
    void *k = rnd(dt, h_kv * N * d), *v = rnd(dt, h_kv * N * d), *q = rnd(dt, h * N * d);
    void *bq = rnd(dt, d), *bk = rnd(dt, h_kv * d);
    struct attn_params p = {.dtype = dt, .scale = attn_default_scale(d), .rope = true,
                            .rope_base = 10000, .rope_pairs = ATTN_ROPE_INTERLEAVED,
                            .alibi = true};
    struct kv_cache *c = kv_new_store(dt, store, h_kv, d, d);
    struct attn_ws *ws = attn_ws_new();
    struct attn_window win = {.on = true, .left = (int64_t)W, .right = -1, .sinks = (int64_t)S};
    size_t len = 0, worst_bits = 0, st = 0;
    char *buf = malloc(4 * h_kv * N * d * es + 64);
    size_t *idx = malloc(N * sizeof *idx);
    int64_t *pk = malloc(N * sizeof *pk), pq[64];
    double max_held = 0, max_full = 0;
    while (len < N) {
        size_t m = steps[st++ % (sizeof steps / sizeof steps[0])];
        m = m < N - len ? m : N - len;
        char *ks = buf, *vs = ks + h_kv * m * d * es, *qs = vs + h_kv * m * d * es;
        for (size_t g = 0; g < h_kv; g++) {
            memcpy(ks + g * m * d * es, (char *)k + (g * N + len) * d * es, m * d * es);
            memcpy(vs + g * m * d * es, (char *)v + (g * N + len) * d * es, m * d * es);
        }
        for (size_t i = 0; i < h; i++)
            memcpy(qs + i * m * d * es, (char *)q + (i * N + len) * d * es, m * d * es);
        struct attn_inputs ain = {.k = ks, .v = vs, .bias_k = bk, .bias_k_heads = h_kv};
        CHECK_EQ_INT(kv_append(c, &p, &ain, m), CORE_OK);
        len += m;
        struct attn_request r = {
            .shape = {.h = h, .h_kv = h_kv, .n = m, .L = len, .d_k = d, .d_v = d},
            .params = p, .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .window = win,
            .attn_bias_heads = 1, .mask_heads = 1, .outputs = ATTN_OUT_OUTPUT};
        size_t so = h * m * d * es;
        void *oc = malloc(so), *oh = malloc(so), *of = malloc(so);
        struct attn_inputs qin = {.q = qs, .bias_q = bq, .bias_q_heads = 1};
        struct attn_result rc = {.output = oc};
        CHECK_EQ_INT(kv_attend(c, &r, &qin, &rc, ws), CORE_OK);
        /* the held rows, raw, at their positions */
        size_t L = 0;
        for (size_t j = 0; j < len; j++)
            if (j < kv_held_front(c) || j >= kv_held_from(c))
                idx[L++] = j;
        CHECK_EQ_INT(L, kv_held(c));
        char *kh = qs + h * m * d * es, *vh = kh + h_kv * L * d * es;
        for (size_t g = 0; g < h_kv; g++) {
            pick((char *)k + g * N * d * es, d, es, idx, L, kh + g * L * d * es);
            pick((char *)v + g * N * d * es, d, es, idx, L, vh + g * L * d * es);
        }
        for (size_t j = 0; j < L; j++)
            pk[j] = (int64_t)idx[j];
        for (size_t i = 0; i < m; i++)
            pq[i] = (int64_t)(len - m + i);
        struct attn_request rh = r;
        rh.shape.L = L;
        rh.pos_q = pq;
        rh.pos_k = pk;
        rh.pos_q_batches = rh.pos_k_batches = 1;
        struct attn_inputs hin = {.q = qs, .k = kh, .v = vh, .bias_q = bq, .bias_q_heads = 1,
                                  .bias_k = bk, .bias_k_heads = h_kv};
        struct attn_result rhr = {.output = oh};
        CHECK_EQ_INT(attn_forward(&rh, &hin, &rhr, ws), CORE_OK);
        /* every row ever appended, the same window */
        char *kf = malloc(h_kv * len * d * es), *vf = malloc(h_kv * len * d * es);
        for (size_t g = 0; g < h_kv; g++) {
            memcpy(kf + g * len * d * es, (char *)k + g * N * d * es, len * d * es);
            memcpy(vf + g * len * d * es, (char *)v + g * N * d * es, len * d * es);
        }
        struct attn_inputs fin = {.q = qs, .k = kf, .v = vf, .bias_q = bq, .bias_q_heads = 1,
                                  .bias_k = bk, .bias_k_heads = h_kv};
        struct attn_result rf = {.output = of};
        CHECK_EQ_INT(attn_forward(&r, &fin, &rf, ws), CORE_OK);
        if (memcmp(oc, of, so) != 0)
            worst_bits++;
        for (size_t i = 0; i < h * m * d; i++) {
            double a = dt == ATTN_F32 ? ((float *)oc)[i] : ((double *)oc)[i];
            double b = dt == ATTN_F32 ? ((float *)oh)[i] : ((double *)oh)[i];
            double f = dt == ATTN_F32 ? ((float *)of)[i] : ((double *)of)[i];
            max_held = fmax(max_held, fabs(a - b));
            max_full = fmax(max_full, fabs(a - f));
        }
        free(kf);
        free(vf);
        free(oc);
        free(oh);
        free(of);
        roll_after(c, (struct roll){S, W});
        CHECK(kv_held(c) <= P + W + P - 1);
    }
    CHECK(kv_held_from(c) > 0);
    CHECK(max_held <= tol_held);
    CHECK(max_full <= tol_full);
    printf("  %s/%s: |rolling - held| %.3g, |rolling - full| %.3g, steps not bit-equal "
           "to full %zu of %zu\n", attn_dtype_name(dt), kv_store_name(store, dt), max_held,
           max_full, worst_bits, st);
    free(buf);
    free(idx);
    free(pk);
    attn_ws_free(ws);
    kv_free(c);
    free(k);
    free(v);
    free(q);
    free(bq);
    free(bk);
}

TEST(rolling_decode_f64) { rolling_decode(ATTN_F64, KV_STORE_SAME, 0, 1e-12); }
TEST(rolling_decode_f32) { rolling_decode(ATTN_F32, KV_STORE_SAME, 0, 2e-6); }
/* narrow rows: the held pass reads them as stored, the references widen
 * the raw ones, so both are to the storage's rounding */
TEST(rolling_decode_f16) { rolling_decode(ATTN_F32, KV_STORE_F16, 5e-3, 5e-3); }
TEST(rolling_decode_int8) { rolling_decode(ATTN_F32, KV_STORE_I8, 5e-2, 5e-2); }

/* Rows [0, n) of a one-head f64 cache with d = 2: row r is (r, -r). */
static void fill(struct kv_cache *c, size_t from, size_t to)
{
    for (size_t r = from; r < to; r++) {
        double k[2] = {(double)r, -(double)r}, v[2] = {(double)r, 1};
        CHECK_EQ_INT(kv_append_prepared(c, k, v, 1), CORE_OK);
    }
}

static bool row_is(const struct kv_cache *c, size_t r)
{
    double k[2] = {-1, -1};
    struct kv_seg sg;
    if (kv_seg(c, 0, r, &sg) == 0)
        return false;
    kv_read_stored(c, 0, r, 1, k, NULL, NULL, NULL);
    return k[0] == (double)r && k[1] == -(double)r;
}

TEST(fork_truncate_and_rollback_of_a_rolled_cache)
{
    struct kv_cache *c = kv_new(ATTN_F64, 1, 2, 2);
    fill(c, 0, 10 * P + 7);
    kv_roll(c, 1, 6 * P + 3);           /* pages 1..5 go */
    CHECK_EQ_INT(kv_held_from(c), 6 * P);
    CHECK_EQ_INT(kv_held_front(c), P);
    CHECK(row_is(c, 0) && row_is(c, P - 1) && !row_is(c, P) && !row_is(c, 6 * P - 1));
    CHECK(row_is(c, 6 * P) && row_is(c, 10 * P + 6));
    size_t bytes = kv_bytes(c);
    /* a fork shares every held page and keeps the gap */
    struct kv_cache *f = kv_fork(c);
    CHECK_EQ_INT(kv_length(f), 10 * P + 7);
    CHECK_EQ_INT(kv_held_from(f), 6 * P);
    size_t own, shared;
    kv_bytes_split(f, &own, &shared);
    CHECK_EQ_INT(own, 0);
    CHECK_EQ_INT(shared, bytes);
    /* the fork writes its own last page; the parent's rows stay */
    struct kv_mark mk;
    kv_mark(f, &mk);
    fill(f, 10 * P + 7, 10 * P + 9);
    CHECK(row_is(f, 10 * P + 8));
    kv_rollback(f, &mk);
    CHECK_EQ_INT(kv_length(f), 10 * P + 7);
    kv_bytes_split(f, &own, &shared);
    CHECK_EQ_INT(own, 0);
    fill(f, 10 * P + 7, 12 * P);
    kv_roll(f, 1, 12 * P - 10);
    CHECK_EQ_INT(kv_held_from(f), 11 * P);
    CHECK(row_is(c, 10 * P + 6) && kv_held_from(c) == 6 * P && kv_length(c) == 10 * P + 7);
    /* truncate: inside the gap does nothing, at or past held_from keeps it */
    kv_truncate(c, 3 * P);
    CHECK_EQ_INT(kv_length(c), 10 * P + 7);
    kv_truncate(c, 6 * P);
    CHECK_EQ_INT(kv_length(c), 6 * P);
    CHECK_EQ_INT(kv_held(c), P);
    fill(c, 6 * P, 6 * P + 2);
    CHECK(row_is(c, 6 * P + 1) && row_is(c, 3));
    /* back into the kept pages: the gap closes */
    kv_truncate(c, 20);
    CHECK_EQ_INT(kv_length(c), 20);
    CHECK_EQ_INT(kv_held_from(c), 0);
    CHECK_EQ_INT(kv_held(c), 20);
    fill(c, 20, 3 * P);
    for (size_t r = 0; r < 3 * P; r++)
        CHECK(row_is(c, r));
    kv_free(f);
    kv_free(c);
}

TEST(skip_restores_a_rolled_cache)
{
    struct kv_cache *a = kv_new(ATTN_F64, 1, 2, 2), *b = kv_new(ATTN_F64, 1, 2, 2);
    fill(a, 0, 9 * P + 5);
    kv_roll(a, P, 7 * P);
    /* b: the front rows, a skip, the tail rows */
    fill(b, 0, P);
    CHECK_EQ_INT(kv_skip(b, 3 * P + 1), CORE_EINVAL);
    CHECK_EQ_INT(kv_skip(b, P), CORE_EINVAL);
    CHECK_EQ_INT(kv_skip(b, 7 * P), CORE_OK);
    CHECK_EQ_INT(kv_skip(b, 8 * P), CORE_EINVAL);
    fill(b, 7 * P, 9 * P + 5);
    CHECK_EQ_INT(kv_length(b), kv_length(a));
    CHECK_EQ_INT(kv_held_from(b), kv_held_from(a));
    CHECK_EQ_INT(kv_held_front(b), kv_held_front(a));
    for (size_t r = 0; r < kv_length(a); r++)
        CHECK(row_is(a, r) == row_is(b, r));
    /* a cache with no front rows (no sinks) */
    struct kv_cache *z = kv_new(ATTN_F64, 1, 2, 2);
    CHECK_EQ_INT(kv_skip(z, 2 * P), CORE_OK);
    fill(z, 2 * P, 2 * P + 3);
    CHECK(!row_is(z, 0) && row_is(z, 2 * P + 2));
    CHECK_EQ_INT(kv_held(z), 3);
    kv_free(a);
    kv_free(b);
    kv_free(z);
}

int main(void)
{
    RUN(roll_keeps_sinks_and_the_window);
    RUN(rolling_decode_f64);
    RUN(rolling_decode_f32);
    RUN(rolling_decode_f16);
    RUN(rolling_decode_int8);
    RUN(fork_truncate_and_rollback_of_a_rolled_cache);
    RUN(skip_restores_a_rolled_cache);
    TEST_MAIN_END();
}
