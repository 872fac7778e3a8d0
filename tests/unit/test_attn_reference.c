/*
 * tests/unit/test_attn_reference.c — the attention core against the
 * independent long double reference of tests/attn_ref.h.
 *
 * Randomized configurations cover every option in both dtypes with shapes
 * including 1, primes and 257, and one case turns every option on at once;
 * the named tests cover the worked example of the seed document, softmax1
 * as a prepended zero key, huge magnitudes, d_k = 1 and L = 1, empty rows
 * (both policies, from a mask or an all -inf attn_bias), GQA, causal
 * alignment, ALiBi's standard slopes, scores alone, and float32 overflow.
 * The paths that must agree with one another (tiled, session, split, fused,
 * pooled) are tests/unit/test_attn.c's; validation is
 * tests/unit/test_attn_check.c's.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/attn.h"
#include "tests/attn_ref.h"
#include "tests/harness.h"

/* ---- randomized configurations ---------------------------------------- */

static void random_suite(enum attn_dtype dt, int cases)
{
    cases = t_cases(cases);
    struct attn_ws *ws = attn_ws_new();
    int failures = 0;
    for (int i = 0; i < cases; i++) {
        struct tcase c;
        random_case(&c, dt);
        /* every other case without a workspace (the temporary one) */
        int bad = run_case(&c, i % 2 ? ws : NULL);
        tcase_free(&c);
        if (bad && ++failures > 3)
            break;
    }
    CHECK(failures == 0);
    attn_ws_free(ws);
}

TEST(random_f64_matches_reference) { random_suite(ATTN_F64, 300); }
TEST(random_f32_matches_reference) { random_suite(ATTN_F32, 300); }

/* Every option at once, both dtypes, decode (loop path) and prefill (gemm). */
TEST(all_options_combined)
{
    for (int dt = 0; dt < 2; dt++) {
        for (int variant = 0; variant < 3; variant++) {
            struct tcase c;
            plain_case(&c, (enum attn_dtype)dt, 1, 1, 1, 1, 1, 1);
            tcase_free(&c);
            c.h = 6;
            c.h_kv = 2;
            c.n = variant == 0 ? 1 : 40;
            c.L = 37;
            c.dk = 16;
            c.dv = 11;
            c.bq = 2;
            c.bk = 2;
            c.bv = 1;
            c.abias = 2;
            c.mask = 1;
            c.causal = variant == 2 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT;
            c.alibi = variant == 1 ? 2 : 1;
            c.rope = 1;
            c.pairs = variant == 1 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
            c.sm = (enum attn_softmax)variant;
            c.sink = 0.7;
            c.scale = 0.3;
            tcase_fill(&c);
            CHECK(run_case(&c, NULL) == 0);
            tcase_free(&c);
        }
    }
}

/* ---- the worked example of the seed document ------------------------- */

/* q=(1,0); k=(1,0),(0,1),(-1,0); bQ=(0,1); bK=(3,-2); d_k=2. */
TEST(seed_table_four_bias_conditions)
{
    static const double exp_s[4][3] = {{0.707107, 0, -0.707107},
                                       {0.707107, 0.707107, -0.707107},
                                       {2.828427, 2.121320, 1.414214},
                                       {1.414214, 1.414214, 0}};
    static const double exp_w[2][3] = {{0.575975, 0.283995, 0.140029},
                                       {0.445808, 0.445808, 0.108383}};
    double q[2] = {1, 0}, k[6] = {1, 0, 0, 1, -1, 0}, v[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    double bq[2] = {0, 1}, bk[2] = {3, -2};
    for (int cond = 0; cond < 4; cond++) {   /* none, Q, K, both */
        int with_q = cond == 1 || cond == 3, with_k = cond >= 2;
        struct attn_request r = {0};
        r.shape = (struct attn_shape){1, 1, 1, 3, 2, 3, 1};
        r.params.dtype = ATTN_F64;
        r.params.scale = attn_default_scale(2);
        r.outputs = ATTN_OUT_ALL;
        struct attn_inputs in = {q, k, v, with_q ? bq : NULL, with_k ? bk : NULL, NULL, 1, 1, 1};
        double s[3], w[3], o[3];
        struct attn_result out = {s, w, o, NULL, 0};
        CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_OK);
        for (int j = 0; j < 3; j++) {
            CHECK_NEAR(s[j], exp_s[cond][j], 5e-7);
            CHECK_NEAR(w[j], exp_w[with_q][j], 5e-7);
            CHECK_NEAR(o[j], w[j], 1e-15);   /* v is the identity */
        }
    }
}

/* softmax1 over L keys == standard softmax over a zero key + those L keys
 * (with a zero value): weights of the real keys and outputs agree. */
TEST(softmax1_equals_prepended_zero_key)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase a;
        plain_case(&a, (enum attn_dtype)dt, 2, 1, 5, 9, 4, 3);
        a.sm = ATTN_SOFTMAX_ONE;
        a.bq = 1;
        a.biasq = rnd_array(&a, 4, -1, 1);
        struct tcase b = a;   /* shares q, v shape; own k, v with the zero row */
        b.sm = ATTN_SOFTMAX_STANDARD;
        b.L = a.L + 1;
        b.k = calloc(b.L * b.dk, sizeof(double));
        b.v = calloc(b.L * b.dv, sizeof(double));
        memcpy(b.k + b.dk, a.k, a.L * a.dk * sizeof(double));
        memcpy(b.v + b.dv, a.v, a.L * a.dv * sizeof(double));
        /* the zero key must score 0 even with a Q bias: zero keys dot to 0 */
        struct tcore ta, tb;
        tcore_init(&a, &ta);
        tcore_init(&b, &tb);
        CHECK_EQ_INT(attn_forward(&ta.req, &ta.in, &ta.out, NULL), CORE_OK);
        CHECK_EQ_INT(attn_forward(&tb.req, &tb.in, &tb.out, NULL), CORE_OK);
        double tol = dt == ATTN_F64 ? 1e-14 : 1e-6;
        for (size_t row = 0; row < a.h * a.n; row++) {
            double sum = 0;
            for (size_t j = 0; j < a.L; j++) {
                double wa = get_val(ta.weights, row * a.L + j, a.dt);
                CHECK_NEAR(wa, get_val(tb.weights, row * b.L + j + 1, a.dt), tol);
                sum += wa;
            }
            CHECK(sum > 0 && sum < 1);
            for (size_t t = 0; t < a.dv; t++)
                CHECK_NEAR(get_val(ta.output, row * a.dv + t, a.dt),
                           get_val(tb.output, row * b.dv + t, a.dt), tol);
        }
        tcore_free(&ta);
        tcore_free(&tb);
        free(b.k);
        free(b.v);
        tcase_free(&a);
    }
}

/* ---- edge cases ------------------------------------------------------- */

/* One head, d_k = 1, scale 1: scores are exactly q·k. */
static enum core_status run_1d(enum attn_dtype dt, enum attn_softmax sm, double sink,
                               size_t n, size_t L, const double *q, const double *k,
                               const double *v, double *s, double *w, double *o)
{
    struct tcase c;
    memset(&c, 0, sizeof c);
    c.dt = dt;
    c.h = c.h_kv = 1;
    c.n = n;
    c.L = L;
    c.dk = c.dv = 1;
    c.scale = 1;
    c.sm = sm;
    c.sink = sink;
    c.outputs = ATTN_OUT_ALL;
    c.q = (double *)(uintptr_t)q;
    c.k = (double *)(uintptr_t)k;
    c.v = (double *)(uintptr_t)v;
    struct tcore t;
    tcore_init(&c, &t);
    enum core_status st = attn_forward(&t.req, &t.in, &t.out, NULL);
    for (size_t i = 0; i < n * L; i++) {
        s[i] = get_val(t.scores, i, dt);
        w[i] = get_val(t.weights, i, dt);
    }
    for (size_t i = 0; i < n; i++)
        o[i] = get_val(t.output, i, dt);
    tcore_free(&t);
    return st;
}

TEST(huge_scores_stay_finite)
{
    /* scores ±1e30: q = 1e15, k = ±1e15 */
    double q[1] = {1e15}, k[2] = {1e15, -1e15}, v[2] = {2, 3}, s[2], w[2], o[1];
    for (int dt = 0; dt < 2; dt++) {
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_STANDARD, 0, 1, 2, q, k, v,
                            s, w, o), CORE_OK);
        CHECK_NEAR(s[0], 1e30, 1e24);
        CHECK_NEAR(s[1], -1e30, 1e24);
        CHECK(w[0] == 1 && w[1] == 0 && o[0] == 2);
        for (int sm = 1; sm < 3; sm++) {   /* softmax1 and sink: the big one wins */
            CHECK_EQ_INT(run_1d((enum attn_dtype)dt, (enum attn_softmax)sm, 5, 1, 2, q, k,
                                v, s, w, o), CORE_OK);
            CHECK(w[0] == 1 && w[1] == 0 && o[0] == 2);
        }
    }
}

TEST(softmax1_large_magnitudes)
{
    double q[1] = {1}, v[2] = {2, 3}, s[2], w[2], o[1];
    for (int dt = 0; dt < 2; dt++) {
        /* +1000: exp(1000) would overflow; the shift max(m,0) = 1000 keeps it finite */
        double kp[2] = {1000, 999};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kp, v, s, w,
                            o), CORE_OK);
        double e1 = 1 / (1 + exp(-1.0));   /* exp(-1000) is lost, as it should be */
        CHECK_NEAR(w[0], e1, 1e-6);
        CHECK_NEAR(w[1], 1 - e1, 1e-6);
        CHECK(isfinite(o[0]));
        /* -1000: weights exp(-1000) ~ 0 and the row sum goes to 0, not 1 */
        double kn[2] = {-1000, -1000};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kn, v, s, w,
                            o), CORE_OK);
        CHECK(w[0] == 0 && w[1] == 0 && o[0] == 0);
        /* "subtract the max then add 1" would give 1/3 each here; correct is ~0 */
        double kz[2] = {-30, -30};
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 1, 2, q, kz, v, s, w,
                            o), CORE_OK);
        CHECK_NEAR(w[0], exp(-30.0) / (1 + 2 * exp(-30.0)), 1e-18);
        /* sink: shift max(m, sink) with a large sink */
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, 1000, 1, 2, q, kz, v, s,
                            w, o), CORE_OK);
        CHECK(w[0] == 0 && isfinite(o[0]));
        /* sinks at ±1e30: all mass on the sink / none on it */
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, 1e30, 1, 2, q, kz, v, s,
                            w, o), CORE_OK);
        CHECK(w[0] == 0 && w[1] == 0 && o[0] == 0);
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_SINK, -1e30, 1, 2, q, kp, v, s,
                            w, o), CORE_OK);
        CHECK_NEAR(w[0], e1, 1e-6);
        CHECK_NEAR(w[0] + w[1], 1, 1e-6);
    }
}

TEST(d_k_1_and_L_1)
{
    double q[3] = {0.5, -2, 7}, k[1] = {3}, v[1] = {-4}, s[3], w[3], o[3];
    for (int dt = 0; dt < 2; dt++) {
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_STANDARD, 0, 3, 1, q, k, v, s,
                            w, o), CORE_OK);
        for (int i = 0; i < 3; i++) {
            CHECK(s[i] == q[i] * 3 && w[i] == 1 && o[i] == -4);
        }
        CHECK_EQ_INT(run_1d((enum attn_dtype)dt, ATTN_SOFTMAX_ONE, 0, 3, 1, q, k, v, s, w,
                            o), CORE_OK);
        CHECK_NEAR(w[0], 1 / (1 + exp(-1.5)), 1e-6);        /* m = 1.5 > 0 */
        CHECK_NEAR(w[1], exp(-6.0) / (1 + exp(-6.0)), 1e-6); /* m = -6 < 0 */
    }
}

/* A case with one head whose second row has no allowed key. */
static void empty_row_case(struct tcase *c, enum attn_dtype dt, enum attn_empty_rows er)
{
    plain_case(c, dt, 2, 1, 3, 4, 3, 2);
    c->mask = 1;
    c->mk = malloc(3 * 4);
    memset(c->mk, 1, 3 * 4);
    memset(c->mk + 4, 0, 4);   /* row 1, shared by both heads */
    c->er = er;
}

TEST(empty_rows_policy_zero)
{
    for (int dt = 0; dt < 2; dt++) {
        for (int sm = 0; sm < 3; sm++) {
            struct tcase c;
            empty_row_case(&c, (enum attn_dtype)dt, ATTN_EMPTY_ZERO);
            c.sm = (enum attn_softmax)sm;
            c.sink = 0.5;
            struct tcore t;
            tcore_init(&c, &t);
            CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
            CHECK_EQ_INT(t.out.n_empty, 2);
            for (size_t hh = 0; hh < 2; hh++)
                for (size_t i = 0; i < 3; i++) {
                    size_t row = hh * 3 + i;
                    CHECK_EQ_INT(t.empty[row], i == 1);
                    for (size_t j = 0; j < 4; j++) {
                        double sc = get_val(t.scores, row * 4 + j, c.dt);
                        double wt = get_val(t.weights, row * 4 + j, c.dt);
                        CHECK(i == 1 ? (sc == -INFINITY && wt == 0)
                                     : (isfinite(sc) && wt > 0));
                    }
                    for (size_t j = 0; j < 2; j++) {
                        double ov = get_val(t.output, row * 2 + j, c.dt);
                        CHECK(isfinite(ov) && (i != 1 || ov == 0));
                    }
                }
            CHECK(run_case(&c, NULL) == 0);
            tcore_free(&t);
            tcase_free(&c);
        }
    }
}

TEST(empty_rows_policy_error)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        empty_row_case(&c, (enum attn_dtype)dt, ATTN_EMPTY_ERROR);
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_EEMPTYROW);
        tcore_free(&t);
        /* with every key allowed the same request succeeds */
        memset(c.mk, 1, 12);
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        CHECK_EQ_INT(t.out.n_empty, 0);
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* An all -inf attn_bias row is empty too. */
TEST(attn_bias_minus_inf_row_is_empty)
{
    struct tcase c;
    plain_case(&c, ATTN_F64, 1, 1, 2, 3, 2, 2);
    c.abias = 1;
    c.ab = calloc(6, sizeof(double));
    for (int j = 0; j < 3; j++)
        c.ab[j] = -INFINITY;
    c.ab[4] = -INFINITY;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    CHECK_EQ_INT(t.out.n_empty, 1);
    CHECK(t.empty[0] == 1 && t.empty[1] == 0);
    CHECK(((double *)t.scores)[4] == -INFINITY && ((double *)t.weights)[4] == 0);
    CHECK(run_case(&c, NULL) == 0);
    tcore_free(&t);
    tcase_free(&c);
}

/* Query head i reads kv head floor(i*h_kv/h): each head equals a one-head
 * pass against its kv head. */
TEST(gqa_heads_read_their_group)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 6, 2, 3, 5, 4, 3);
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        for (size_t hh = 0; hh < 6; hh++) {
            size_t g = hh * 2 / 6;
            struct tcase one;
            plain_case(&one, c.dt, 1, 1, 3, 5, 4, 3);
            memcpy(one.q, c.q + hh * 3 * 4, 3 * 4 * sizeof(double));
            memcpy(one.k, c.k + g * 5 * 4, 5 * 4 * sizeof(double));
            memcpy(one.v, c.v + g * 5 * 3, 5 * 3 * sizeof(double));
            struct tcore t1;
            tcore_init(&one, &t1);
            CHECK_EQ_INT(attn_forward(&t1.req, &t1.in, &t1.out, NULL), CORE_OK);
            for (size_t x = 0; x < 3 * 3; x++)
                CHECK_NEAR(get_val(t1.output, x, c.dt), get_val(t.output, hh * 9 + x, c.dt),
                           1e-6);
            tcore_free(&t1);
            tcase_free(&one);
        }
        CHECK(run_case(&c, NULL) == 0);
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* n > L, bottom-right: query i sits at L-n+i, so the first n-L rows see no key. */
TEST(causal_n_greater_than_L)
{
    for (int dt = 0; dt < 2; dt++) {
        struct tcase c;
        plain_case(&c, (enum attn_dtype)dt, 1, 1, 5, 3, 2, 2);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        struct tcore t;
        tcore_init(&c, &t);
        CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
        CHECK_EQ_INT(t.out.n_empty, 2);
        for (size_t i = 0; i < 5; i++) {
            CHECK_EQ_INT(t.empty[i], i < 2);
            for (size_t j = 0; j < 3; j++) {
                int allowed = (long)j <= (long)i - 2;
                double sc = get_val(t.scores, i * 3 + j, c.dt);
                CHECK(allowed ? isfinite(sc) : sc == -INFINITY);
            }
        }
        CHECK_NEAR(get_val(t.weights, 2 * 3 + 0, c.dt), 1, 0);   /* row 2: key 0 only */
        CHECK(run_case(&c, NULL) == 0);
        c.er = ATTN_EMPTY_ERROR;
        CHECK(run_case(&c, NULL) == 0);   /* expects CORE_EEMPTYROW */
        tcore_free(&t);
        tcase_free(&c);
    }
}

/* n=2, L=4: top-left puts query 0 at position 0 (one key), bottom-right at
 * position 2 (three keys). ALiBi and RoPE follow the same positions. */
TEST(causal_top_left_vs_bottom_right)
{
    struct tcase c;
    plain_case(&c, ATTN_F64, 1, 1, 2, 4, 4, 2);
    c.causal = ATTN_CAUSAL_TOP_LEFT;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    const double *w = t.weights;
    CHECK(w[0] == 1 && w[1] == 0 && w[2] == 0 && w[3] == 0);
    CHECK(w[4] > 0 && w[5] > 0 && w[6] == 0 && w[7] == 0);
    tcore_free(&t);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    tcore_init(&c, &t);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    w = t.weights;
    CHECK(w[0] > 0 && w[1] > 0 && w[2] > 0 && w[3] == 0);
    CHECK(w[4] > 0 && w[5] > 0 && w[6] > 0 && w[7] > 0);
    tcore_free(&t);
    for (int causal = 1; causal < 3; causal++) {
        c.causal = (enum attn_causal)causal;
        c.alibi = 1;
        c.rope = 1;
        CHECK(run_case(&c, NULL) == 0);
    }
    tcase_free(&c);
}

TEST(alibi_standard_slopes)
{
    CHECK_NEAR(attn_alibi_slope(0, 8), 0.5, 0);
    CHECK_NEAR(attn_alibi_slope(7, 8), 1.0 / 256, 0);
    CHECK_NEAR(attn_alibi_slope(0, 1), 1.0 / 256, 0);
    CHECK_NEAR(attn_default_scale(4), 0.5, 0);
}

/* Scores only: no softmax needed, but empty rows are still found. */
TEST(scores_only)
{
    struct tcase c;
    empty_row_case(&c, ATTN_F32, ATTN_EMPTY_ZERO);
    c.outputs = ATTN_OUT_SCORES;
    struct tcore t;
    tcore_init(&c, &t);
    CHECK(t.weights == NULL && t.output == NULL);
    CHECK_EQ_INT(attn_forward(&t.req, &t.in, &t.out, NULL), CORE_OK);
    CHECK_EQ_INT(t.out.n_empty, 2);
    CHECK(run_case(&c, NULL) == 0);
    tcore_free(&t);
    tcase_free(&c);
}

/* float32 q·k beyond FLT_MAX is reported, not passed on as inf. */
TEST(f32_overflow_is_nonfinite_error)
{
    double q[1] = {1e30}, k[1] = {1e30}, v[1] = {1}, s[1], w[1], o[1];
    CHECK_EQ_INT(run_1d(ATTN_F32, ATTN_SOFTMAX_STANDARD, 0, 1, 1, q, k, v, s, w, o),
                 CORE_ENONFINITE);
    CHECK_EQ_INT(run_1d(ATTN_F64, ATTN_SOFTMAX_STANDARD, 0, 1, 1, q, k, v, s, w, o),
                 CORE_OK);
    CHECK_NEAR(s[0], 1e60, 1e45);
    CHECK(w[0] == 1 && o[0] == 1);
}

int main(void)
{
    RUN(seed_table_four_bias_conditions);
    RUN(softmax1_equals_prepended_zero_key);
    RUN(huge_scores_stay_finite);
    RUN(softmax1_large_magnitudes);
    RUN(d_k_1_and_L_1);
    RUN(empty_rows_policy_zero);
    RUN(empty_rows_policy_error);
    RUN(attn_bias_minus_inf_row_is_empty);
    RUN(gqa_heads_read_their_group);
    RUN(causal_n_greater_than_L);
    RUN(causal_top_left_vs_bottom_right);
    RUN(alibi_standard_slopes);
    RUN(scores_only);
    RUN(f32_overflow_is_nonfinite_error);
    RUN(all_options_combined);
    RUN(random_f64_matches_reference);
    RUN(random_f32_matches_reference);
    TEST_MAIN_END();
}
