/*
 * tests/unit/test_verify.c — core/verify: the built-in example against the
 * published table, each check where it must pass and where its premise
 * fails, float32 and large magnitudes (injected core faults that must make
 * checks fail: test_verify_faults.c).
 *
 * The published table of the seed article is the only hard-coded expectation;
 * the softmax1 table and every other expected number are computed here in
 * long double from the inputs, independently of core/ and core/verify.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/verify.h"
#include "tests/harness.h"
#include "tests/unit/verify_testlib.h"

/* The published figures of the seed article, rounded to 6 decimals. */
static const double PUB_SCORES[4][3] = {
    {0.707107, 0.0, -0.707107},
    {0.707107, 0.707107, -0.707107},
    {2.828427, 2.121320, 1.414214},
    {1.414214, 1.414214, 0.0},
};
static const double PUB_WEIGHTS[4][3] = {
    {0.575975, 0.283995, 0.140029},
    {0.445808, 0.445808, 0.108383},
    {0.575975, 0.283995, 0.140029},
    {0.445808, 0.445808, 0.108383},
};

TEST(builtin_matches_published_table)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 3; j++) {
            const struct verify_condition *t = &r.table[VERIFY_TABLE_STANDARD][c];
            CHECK_NEAR(t->scores[j], PUB_SCORES[c][j], 5e-7);
            CHECK_NEAR(t->weights[j], PUB_WEIGHTS[c][j], 5e-7);
            /* "to 6 decimals": rounding gives the published text */
            CHECK_NEAR(round(t->weights[j] * 1e6) / 1e6, PUB_WEIGHTS[c][j], 1e-12);
            CHECK_NEAR(round(t->scores[j] * 1e6) / 1e6, PUB_SCORES[c][j], 1e-12);
        }
    CHECK_STR(r.table[0][0].name, "no_bias");
    CHECK_STR(r.table[0][1].name, "q_bias");
    CHECK_STR(r.table[0][2].name, "k_bias");
    CHECK_STR(r.table[0][3].name, "both");
    verify_report_free(&r);
}

/* softmax1 of the four conditions, computed here in long double. */
TEST(builtin_softmax1_table)
{
    static const long double q[2] = {1, 0}, k[3][2] = {{1, 0}, {0, 1}, {-1, 0}};
    static const long double bq[2] = {0, 1}, bk[2] = {3, -2};
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    for (int c = 0; c < 4; c++) {
        long double s[3], sum = 1.0L;
        for (int j = 0; j < 3; j++) {
            long double d = 0;
            for (int x = 0; x < 2; x++)
                d += (q[x] + ((c & 1) ? bq[x] : 0)) * (k[j][x] + ((c & 2) ? bk[x] : 0));
            s[j] = d / sqrtl(2.0L);
            sum += expl(s[j]);
        }
        const struct verify_condition *t = &r.table[VERIFY_TABLE_SOFTMAX1][c];
        for (int j = 0; j < 3; j++) {
            CHECK_NEAR(t->scores[j], (double)s[j], 1e-14);
            CHECK_NEAR(t->weights[j], (double)(expl(s[j]) / sum), 1e-14);
        }
    }
    /* softmax1 is not shift invariant: no-bias and K-bias rows differ */
    CHECK(fabs(r.table[1][0].weights[0] - r.table[1][2].weights[0]) > 0.05);
    verify_report_free(&r);
}

TEST(builtin_every_check)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK_EQ_INT(r.n_checks, 27);
    CHECK(r.passed);
    CHECK_NEAR(r.tolerance, 1e-12, 0);
    for (size_t i = 0; i < r.n_checks; i++) {
        const struct verify_check *ck = &r.checks[i];
        CHECK_EQ_INT(ck->id, (long long)i + 1);
        CHECK(ck->passed);
        CHECK(ck->claim && strlen(ck->claim) > 20);
        CHECK(isfinite(ck->max_abs_diff));
        CHECK_NEAR(ck->tolerance, 1e-12, 0);
        /* the keys of the example span R^2: only check 7 has no premise */
        CHECK(ck->applicable == (ck->id != 7));
        if (ck->applicable && !ck->expect_change)
            CHECK(ck->max_abs_diff <= 1e-12);
        CHECK(ck->n_data > 0);
    }
    verify_report_free(&r);
}

/* Every note and claim is whole: it ends its sentence (no buffer cuts one
 * short, as check 16's once was "...with RoPE (base 10"), the longest of
 * every configuration included. */
TEST(notes_are_whole_sentences)
{
    static const enum attn_softmax sm[3] = {ATTN_SOFTMAX_STANDARD, ATTN_SOFTMAX_ONE,
                                            ATTN_SOFTMAX_SINK};
    size_t longest = 0;
    for (int v = 0; v < 6; v++) {
        struct verify_input in;
        struct verify_report r;
        verify_builtin(&in);
        in.softmax = sm[v % 3];
        in.sink_logit = 0.5;
        in.rope = v >= 3;
        in.rope_base = 10000;
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        for (size_t i = 0; i < r.n_checks; i++) {
            const struct verify_check *ck = &r.checks[i];
            size_t cl = strlen(ck->claim);
            CHECK(cl > 0 && ck->claim[cl - 1] == '.');
            if (!ck->note)
                continue;
            size_t nl = strlen(ck->note);
            CHECK(nl > 0 && ck->note[nl - 1] == '.');
            longest = nl > longest ? nl : longest;
            if (ck->id == 16 && !in.rope)
                CHECK(strstr(ck->note, "with RoPE (base 10000).") != NULL);
        }
        verify_report_free(&r);
    }
    CHECK(longest > 240);       /* the old buffer's size: this one was cut */
}

TEST(builtin_row_constant_and_q_change)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_array *c = arr(find(&r, "k_bias_row_constant"), "row_constant");
    CHECK(c && c->cols == 1);
    if (c)
        CHECK_NEAR(c->data[0], 3.0 / sqrt(2.0), 1e-15);
    /* bQ.(k_j - k_1): (0,1).(0,0)=0, (0,1).(-1,1)=1, (0,1).(-2,0)=0 */
    const struct verify_array *e =
        arr(find(&r, "q_bias_relative_scores"), "expected_difference_change");
    CHECK(e && e->cols == 3);
    if (e) {
        CHECK_NEAR(e->data[0], 0.0, 0);
        CHECK_NEAR(e->data[1], 1.0 / sqrt(2.0), 1e-15);
        CHECK_NEAR(e->data[2], 0.0, 1e-15);
    }
    /* check 6 uses q and the three keys as queries: c = 3, 3, -2, -3 over sqrt 2 */
    const struct verify_array *rc = arr(find(&r, "every_query_row"), "row_constant");
    CHECK(rc && rc->cols == 4);
    if (rc) {
        CHECK_NEAR(rc->data[1], 3.0 / sqrt(2.0), 1e-15);
        CHECK_NEAR(rc->data[2], -2.0 / sqrt(2.0), 1e-15);
        CHECK_NEAR(rc->data[3], -3.0 / sqrt(2.0), 1e-15);
    }
    /* check 7: the key differences (-1,1), (-2,0) have rank 2 = d_k */
    const struct verify_array *rk = arr(find(&r, "q_bias_exception"), "key_difference_rank");
    CHECK(rk && rk->rank == 0 && rk->data[0] == 2);
    /* check 18: bQ=(0,1) has dot product 0 with keys 1 and 3; key 2 masked */
    const struct verify_array *al =
        arr(find(&r, "q_bias_exception_allowed_keys"), "allowed_keys");
    CHECK(al && al->cols == 3);
    if (al) {
        CHECK_NEAR(al->data[0], 1, 0);
        CHECK_NEAR(al->data[1], 0, 0);
        CHECK_NEAR(al->data[2], 1, 0);
    }
    /* check 19: raising s_1 by 1 under softmax1, predicted here */
    const struct verify_check *c19 = find(&r, "softmax1_own_score");
    const struct verify_array *after = arr(c19, "weights_after");
    CHECK(after != NULL);
    if (after) {
        long double s1 = 1.414213562373095L + 1, s2 = 1.414213562373095L;
        long double den = 1 + expl(s1) + expl(s2) + expl(0.0L);
        CHECK_NEAR(after->data[0], (double)(expl(s1) / den), 1e-15);
        CHECK_NEAR(after->data[2], (double)(1 / den), 1e-15);
    }
    /* per-key shift and RoPE are detected changes */
    const struct verify_check *k8 = find(&r, "per_key_shift_counterexample");
    CHECK(k8 && k8->expect_change && k8->max_abs_diff > 0.01);
    const struct verify_check *k14 = find(&r, "rope_breaks_k_bias");
    CHECK(k14 && k14->expect_change && k14->max_abs_diff > 1e-3);
    verify_report_free(&r);
}

TEST(caller_data_all_pass)
{
    struct data d;
    struct verify_input in;
    struct verify_report r;
    caller_input(&in, &d, 3, 5, 4, 3);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(r.passed);
    CHECK_EQ_INT(r.n, 3);
    /* 4 key differences in R^4 of random keys span it: no exception */
    CHECK(!find(&r, "q_bias_exception")->applicable);
    /* random bQ has five different dot products: no pair to compare */
    CHECK(!find(&r, "q_bias_exception_allowed_keys")->applicable);
    CHECK(find(&r, "session_decode")->applicable);
    verify_report_free(&r);
}

TEST(caller_data_with_rope_and_sink)
{
    struct data d;
    struct verify_input in;
    struct verify_report r;
    caller_input(&in, &d, 2, 5, 4, 3);
    in.rope = true;
    in.rope_base = 100.0;
    in.rope_pairs = ATTN_ROPE_HALF;
    in.softmax = ATTN_SOFTMAX_SINK;
    in.sink_logit = 0.75;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(r.passed);
    const struct verify_check *s = find(&r, "sink_extra_key");
    CHECK(s && s->applicable && s->passed);
    const struct verify_array *sl = arr(s, "sink_logit");
    CHECK(sl && sl->data[0] == 0.75);
    CHECK(strstr(find(&r, "rope_breaks_k_bias")->note, "base 100") != NULL);
    CHECK(arr(find(&r, "v_bias_output_shift"), "output_shift_sink") != NULL);
    verify_report_free(&r);
}

TEST(float32_tolerance)
{
    struct data d;
    float q[12], k[20], v[15], bq[4], bk[4], bv[3];
    struct verify_input in;
    struct verify_report r;
    caller_input(&in, &d, 3, 5, 4, 3);
    for (int i = 0; i < 12; i++) q[i] = (float)d.q[i];
    for (int i = 0; i < 20; i++) k[i] = (float)d.k[i];
    for (int i = 0; i < 15; i++) v[i] = (float)d.v[i];
    for (int i = 0; i < 4; i++) { bq[i] = (float)d.bq[i]; bk[i] = (float)d.bk[i]; }
    for (int i = 0; i < 3; i++) bv[i] = (float)d.bv[i];
    in.dtype = ATTN_F32;
    in.q = q; in.k = k; in.v = v;
    in.bias_q = bq; in.bias_k = bk; in.bias_v = bv;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(r.passed);
    CHECK_NEAR(r.tolerance, VERIFY_TOL_F32, 0);
    CHECK(r.tolerance_note && strstr(r.tolerance_note, "float32"));
    CHECK_EQ_INT(r.dtype, ATTN_F32);
    verify_report_free(&r);
}

TEST(exception_applicable_when_keys_lie_in_a_plane)
{
    /* keys in the xy-plane: bQ = e_z has dot product 0 with each */
    double q[3] = {0.3, -1.0, 2.0};
    double k[3 * 3] = {1, 0, 0, 0, 1, 0, -1, 0, 0}, v[3] = {1, 2, 3};
    double bq[3] = {1, 1, 1};
    struct verify_input in;
    struct verify_report r;
    memset(&in, 0, sizeof in);
    in.n = 1; in.L = 3; in.d_k = 3; in.d_v = 1;
    in.q = q; in.k = k; in.v = v; in.bias_q = bq;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *ck = find(&r, "q_bias_exception");
    CHECK(ck && ck->applicable && ck->passed);
    const struct verify_array *b = arr(ck, "bias_q_used");
    CHECK(b && b->cols == 3);
    if (b) {   /* (1,1,1) projected onto the z axis */
        CHECK_NEAR(b->data[0], 0.0, 1e-15);
        CHECK_NEAR(b->data[1], 0.0, 1e-15);
        CHECK_NEAR(b->data[2], 1.0, 1e-15);
    }
    CHECK(strstr(ck->note, "projected") != NULL);
    /* absent k and v biases: their checks have no premise, and say so */
    const char *kb[] = {"k_bias_row_constant", "k_bias_weights_unchanged",
                        "softmax1_not_shift_invariant", "v_bias_output_shift",
                        "rope_breaks_k_bias"};
    for (size_t i = 0; i < sizeof kb / sizeof kb[0]; i++) {
        const struct verify_check *x = find(&r, kb[i]);
        CHECK(x && !x->applicable && x->passed && x->note && x->note[0]);
    }
    /* d_k odd: no RoPE variant in check 16, still applicable */
    CHECK(find(&r, "session_decode")->applicable);
    CHECK(r.passed);
    verify_report_free(&r);
}

TEST(exception_uses_given_bq_when_it_already_qualifies)
{
    /* the seed's exception: bQ = (0,1) with keys (1,0), (-1,0) */
    double q[2] = {1, 0}, k[4] = {1, 0, -1, 0}, v[2] = {1, -1}, bq[2] = {0, 1};
    struct verify_input in;
    struct verify_report r;
    memset(&in, 0, sizeof in);
    in.n = 1; in.L = 2; in.d_k = 2; in.d_v = 1;
    in.q = q; in.k = k; in.v = v; in.bias_q = bq;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *ck = find(&r, "q_bias_exception");
    CHECK(ck && ck->applicable && ck->passed);
    CHECK(strstr(ck->note, "already") != NULL);
    /* check 4 agrees: the difference change is 0 */
    const struct verify_check *c4 = find(&r, "q_bias_relative_scores");
    CHECK(c4 && c4->passed);
    const struct verify_array *w = arr(c4, "weight_change");
    CHECK(w && w->data[0] <= 1e-15);
    verify_report_free(&r);
}

TEST(premises_that_fail)
{
    /* one key: no shift can change weights; zero query: nothing changes */
    double q[2] = {0, 0}, k[2] = {1, 2}, v[1] = {3}, bk[2] = {1, 1};
    struct verify_input in;
    struct verify_report r;
    memset(&in, 0, sizeof in);
    in.n = 1; in.L = 1; in.d_k = 2; in.d_v = 1;
    in.q = q; in.k = k; in.v = v; in.bias_k = bk;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!find(&r, "per_key_shift_counterexample")->applicable);
    CHECK(!find(&r, "rope_breaks_k_bias")->applicable);
    /* q.bK = 0: softmax1 sees no shift */
    CHECK(!find(&r, "softmax1_not_shift_invariant")->applicable);
    CHECK(r.passed);
    verify_report_free(&r);

    double q2[4] = {0, 0, 0, 0}, k2[4] = {1, 2, 3, 4}, v2[2] = {1, 2};
    in.n = 2; in.L = 2; in.q = q2; in.k = k2; in.v = v2;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *c8 = find(&r, "per_key_shift_counterexample");
    CHECK(!c8->applicable && strstr(c8->note, "zero"));
    verify_report_free(&r);

    /* q = (0, 1) and keys that differ only where q is 0: every key scores
     * the same, so a common key bias cannot show float16's loss of k0 */
    double q4[2] = {0, 1}, k4[4] = {1, 1, 0, 1}, v4[2] = {3, 4};
    in.n = 1; in.L = 2; in.q = q4; in.k = k4; in.v = v4; in.bias_k = NULL;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *c27 = find(&r, "beit_key_bias_float16");
    CHECK(c27 && !c27->applicable && c27->passed && strstr(c27->note, "same score"));
    CHECK(r.passed);
    verify_report_free(&r);
    /* the same keys with q = (1, 1) tell them apart: float16 shows the loss */
    double q5[2] = {1, 1};
    in.q = q5;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    c27 = find(&r, "beit_key_bias_float16");
    CHECK(c27 && c27->applicable && c27->passed && c27->max_abs_diff > 1e-3);
    verify_report_free(&r);
    /* scores near 90000 apart by 0.3: no weight saturates, but every
     * float16 score overflows, so the loss cannot be shown */
    double q6[1] = {300}, k6[2] = {300, 300.001};
    in.d_k = 1; in.q = q6; in.k = k6;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    c27 = find(&r, "beit_key_bias_float16");
    CHECK(c27 && !c27->applicable && c27->passed && strstr(c27->note, "65504"));
    CHECK(r.passed);
    verify_report_free(&r);
    /* scores near 50000 apart by 4.5: float16 rounds the two keys alike
     * (an error of 0.011 with no bias at all), and every score with a bias
     * (size 1 on) overflows; that error used to pass the check */
    double q7[1] = {45000}, k7[2] = {1.1, 1.1001}, bk7[1] = {1};
    in.q = q7; in.k = k7; in.bias_k = bk7;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    c27 = find(&r, "beit_key_bias_float16");
    CHECK(c27 && !c27->applicable && c27->passed && strstr(c27->note, "65504"));
    verify_report_free(&r);
    in.bias_k = NULL;
    in.d_k = 2; in.k = k4;                  /* k6 has one dim */
    in.bias_k = bk;

    /* more queries than keys: causal decoding has no premise */
    double q3[6] = {1, 0, 0, 1, 1, 1};
    in.n = 3; in.L = 2; in.q = q3;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!find(&r, "session_decode")->applicable);
    verify_report_free(&r);
}

/* RoPE turns a common key bias into a shift per key only when the keys sit
 * at different positions and both bK and some q_i + bQ have rotated dims;
 * otherwise check 14's premise fails: not applicable, where it used to
 * fail the report and blame saturated weights. */
TEST(rope_premise_needs_keys_apart_and_rotated_dims)
{
    static const double q[8] = {1, 0, 1, 0, 0.5, 0.5, 0.2, 0.1};
    static const double k[12] = {1, 0, 0, 1, 0, 1, 1, 0, -1, 0, 0.5, 0.5};
    static const double v[3] = {1, 2, 3}, bq[4] = {0, 1, 0, 0};
    static const double bk_low[4] = {3, -2, 0, 0}, bk_high[4] = {0, 0, 3, -2};
    static const double q_high[8] = {0, 0, 1, 0, 0, 0, 0.2, 0.1};
    static const int64_t apart[3] = {0, 3, 8}, together[3] = {5, 5, 5};
    static const struct {
        const double *q, *bq, *bk;
        const int64_t *pk;
        const char *why;            /* NULL: applicable, and the weights move */
    } cases[] = {
        {q, bq, bk_low, apart, NULL},
        {q, bq, bk_low, NULL, NULL},
        {q, bq, bk_low, together, "one position"},
        {q, bq, bk_high, apart, "bias.k is zero"},
        {q_high, NULL, bk_low, apart, "q_i + bQ is zero"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct verify_input in;
        struct verify_report r;
        memset(&in, 0, sizeof in);
        in.n = 2; in.L = 3; in.d_k = 4; in.d_v = 1;
        in.q = cases[i].q; in.k = k; in.v = v;
        in.bias_q = cases[i].bq;
        in.bias_k = cases[i].bk;
        in.rope = true;
        in.rope_base = 100;
        in.rope_dims = 2;
        in.pos_k = cases[i].pk;
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        const struct verify_check *c14 = find(&r, "rope_breaks_k_bias");
        CHECK(c14 && c14->passed);
        if (cases[i].why) {
            CHECK(c14 && !c14->applicable && strstr(c14->note, cases[i].why));
            CHECK(r.passed);
        } else {
            CHECK(c14 && c14->applicable && c14->max_abs_diff > 1e-3);
        }
        verify_report_free(&r);
    }
}

/* One head of n queries and L keys of d_k = 2 dims, one value column. */
static void two_dims(struct verify_input *in, size_t n, size_t L, const double *q,
                     const double *k, const double *v)
{
    memset(in, 0, sizeof *in);
    in->n = n; in->L = L; in->d_k = 2; in->d_v = 1;
    in->q = q; in->k = k; in->v = v;
}

/* Run one query row against two keys of two dims, one value column. */
static enum core_status two_keys(struct verify_report *r, const double *q,
                                 const double *k, const double *v)
{
    struct verify_input in;
    two_dims(&in, 1, 2, q, k, v);
    return run(&in, r);
}

/* Scores 7000 apart: the weights are exactly 1 and 0, so no counterexample
 * can show a change; the checks say so instead of passing. */
TEST(saturated_weights_fail_counterexamples)
{
    double q[2] = {100, 0}, k[4] = {100, 0, 0, 1}, v[2] = {1, 2};
    struct verify_report r;
    CHECK_EQ_INT(two_keys(&r, q, k, v), CORE_OK);
    const struct verify_check *c8 = find(&r, "per_key_shift_counterexample");
    CHECK(c8 && c8->applicable && !c8->passed);
    CHECK(c8 && strstr(c8->note, "saturate") != NULL);
    /* after, not instead of, how the check ran (and check 27 its data) */
    CHECK(c8 && strstr(c8->note, "Key j is shifted by") == c8->note);
    const struct verify_check *c27 = find(&r, "beit_key_bias_float16");
    CHECK(c27 && !c27->passed && strstr(c27->note, "weight_error_float16:") &&
          strstr(c27->note, "saturate"));
    CHECK(!r.passed);
    /* the invariance checks still hold */
    CHECK(find(&r, "base_scores")->passed);
    CHECK(find(&r, "max_subtraction")->passed);
    verify_report_free(&r);
}

/* Scores near -1400: +1000 leaves them near -400, where softmax1's 1
 * dominates the denominator, so its shifted weights are the standard
 * ones times a tiny row sum, not the standard ones; the check predicts
 * that instead of failing on a true property. */
TEST(max_subtraction_negative_scores)
{
    double q[2] = {-2000, 0}, k[4] = {1, 0, 0.99, 0}, v[2] = {1, 2};
    struct verify_report r;
    CHECK_EQ_INT(two_keys(&r, q, k, v), CORE_OK);
    const struct verify_check *c15 = find(&r, "max_subtraction");
    CHECK(c15 && c15->applicable && c15->passed);
    CHECK(c15 && c15->max_abs_diff <= 1e-12);
    const struct verify_array *w1 = arr(c15, "weights_shifted_softmax1");
    CHECK(w1 && w1->data[0] < 1e-100 && w1->data[1] < 1e-100);
    verify_report_free(&r);
}

/* Adding 1000 rounds every score by up to 1000 units of rounding, which
 * the base tolerance allows for in weights of at most 1; outputs carry
 * that error times |v|. Values near 100 used to fail check 15 at 2e-12
 * against 1e-12 in float64 (and values near 10 at 1.4e-4 in float32). */
TEST(max_subtraction_large_values)
{
    double q[2] = {0.1, 0.2}, k[6] = {0.3, -0.1, 0.2, 0.5, -0.4, 0.1};
    double v[3] = {100, -100, 50};
    struct verify_input in;
    struct verify_report r;
    two_dims(&in, 1, 3, q, k, v);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *c15 = find(&r, "max_subtraction");
    CHECK(c15 && c15->applicable && c15->passed);
    CHECK(c15 && c15->max_abs_diff > 1e-12 && c15->max_abs_diff <= c15->tolerance);
    CHECK(c15 && c15->tolerance <= 1e-10);
    CHECK(r.passed);
    verify_report_free(&r);
}

/* Scores 42 apart: softmax1's largest weight is 1 - 4e-19, which is 1.0
 * in double, so raising its score by 1 cannot raise it further; the
 * derivative check must not call that a failure. */
TEST(own_score_saturated_weight)
{
    double q[2] = {60, 0}, k[4] = {1, 0, 0, 1}, v[2] = {1, 2};
    struct verify_report r;
    CHECK_EQ_INT(two_keys(&r, q, k, v), CORE_OK);
    const struct verify_check *c19 = find(&r, "softmax1_own_score");
    const struct verify_array *w = arr(c19, "weights_before");
    CHECK(w && w->data[0] == 1.0);
    CHECK(c19 && c19->applicable && c19->passed);
    verify_report_free(&r);
}

/* bK = (1100, 0) shifts row 0's scores by -778 (q_0 = (-1, 0)): its
 * softmax1 weights underflow to 0, so their ratios cannot be measured;
 * row 1 (q_1 = (0, 1)) sees no shift and keeps them. The check compares
 * the measurable row and does not fail on the other; with row 0 alone
 * nothing can be measured. */
TEST(softmax1_shift_underflowing_row)
{
    double q[4] = {-1, 0, 0, 1}, k[4] = {1, 0, 0.5, 1}, v[2] = {1, 2}, bk[2] = {1100, 0};
    struct verify_input in;
    struct verify_report r;
    two_dims(&in, 2, 2, q, k, v);
    in.bias_k = bk;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *c10 = find(&r, "softmax1_not_shift_invariant");
    CHECK(c10 && c10->applicable && c10->passed && c10->max_abs_diff <= 1e-12);
    CHECK(c10 && c10->note && strstr(c10->note, "1 rows had an underflowing"));
    CHECK(r.passed);
    verify_report_free(&r);
    in.n = 1;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    c10 = find(&r, "softmax1_not_shift_invariant");
    CHECK(c10 && !c10->applicable && c10->passed);
    CHECK(r.passed);
    verify_report_free(&r);
}

/* float32 scores 21 apart: softmax1's row sum is 1 - 6e-10, which the
 * float32 weights sum to 1; scores near -120 after check 12's shift of
 * 100 give a row sum of 1e-52, which float32 weights underflow to 0.
 * Neither is a failure of "row sums lie in (0, 1)". */
TEST(row_sums_float32_ends)
{
    static const float qs[2][2] = {{30, 0}, {-30, 0}}, ks[2][4] = {{1, 0, 0, 1},
                                                                  {1, 0, 0.9f, 0}};
    float v[2] = {1, 2};
    for (int t = 0; t < 2; t++) {
        struct verify_input in;
        struct verify_report r;
        memset(&in, 0, sizeof in);
        in.dtype = ATTN_F32;
        in.n = 1; in.L = 2; in.d_k = 2; in.d_v = 1;
        in.q = qs[t]; in.k = ks[t]; in.v = v;
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        const struct verify_check *c12 = find(&r, "softmax1_row_sums");
        CHECK(c12 && c12->applicable && c12->passed);
        verify_report_free(&r);
    }
}

TEST(bad_input)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    in.n = 0;
    CHECK_EQ_INT(verify_run(&in, &r), CORE_EINVAL);
    verify_report_free(&r);
    verify_builtin(&in);
    in.tolerance = -1;
    CHECK_EQ_INT(verify_run(&in, &r), CORE_EINVAL);
    verify_report_free(&r);
    verify_builtin(&in);
    in.scale = NAN;
    CHECK_EQ_INT(verify_run(&in, &r), CORE_EINVAL);
    verify_report_free(&r);
}

TEST(tolerance_and_elements)
{
    struct verify_input in;
    struct verify_report r;
    size_t count = 0;
    verify_builtin(&in);
    in.tolerance = 1e-9;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK_NEAR(r.tolerance, 1e-9, 0);
    CHECK_NEAR(r.checks[0].tolerance, 1e-9, 0);
    CHECK(verify_report_elements(&r, &count));
    CHECK(count > 16 * 3 && count < 2000);
    verify_report_free(&r);
}

/* ---- the report's size, before running ---------------------------------- */

/* A request of report_numbers_match_the_report: sizes, and what it sets. */
struct size_case {
    size_t n, L, dk, dv;
    int bias;                       /* 1 q, 2 k, 4 v */
    enum attn_softmax sm;
    size_t sinks;                   /* per-head sink logits (check 23) */
    bool rope, window, segments, positions, f32, zero_q;
    int keys;                       /* 0 pseudo-random, 1 on one line (check 7
                                       applies past d_k keys), 2 the first two
                                       equal (check 18 applies) */
};

/* Runs c and compares verify_report_numbers with the report's own count. */
static void size_case_check(const struct size_case *c, size_t *counted, size_t *found)
{
    size_t n = c->n, L = c->L, dk = c->dk, dv = c->dv, total = n * dk + L * dk + L * dv;
    double *x = malloc((total + 2 * dk + dv) * sizeof *x), sinks[3] = {-1, 0.5, 2};
    float *f = malloc((total + 2 * dk + dv) * sizeof *f);
    int64_t pq[64], pk[64], sq[64], sk[64];
    unsigned seed = 11;
    struct verify_input in;
    struct verify_report r;

    fill(x, total + 2 * dk + dv, &seed);
    if (c->zero_q)
        memset(x, 0, n * dk * sizeof *x);
    for (size_t j = 0; j < L && c->keys; j++)
        for (size_t d = 0; d < dk; d++)
            x[n * dk + j * dk + d] = c->keys == 1 ? (double)(j + 1) * x[d + 1]
                                                  : x[n * dk + (j > 1 ? j : 0) * dk + d];
    for (size_t i = 0; i < total + 2 * dk + dv; i++)
        f[i] = (float)x[i];
    const char *b = c->f32 ? (const char *)f : (const char *)x;
    size_t es = c->f32 ? sizeof(float) : sizeof(double);
    memset(&in, 0, sizeof in);
    in.dtype = c->f32 ? ATTN_F32 : ATTN_F64;
    in.n = n;
    in.L = L;
    in.d_k = dk;
    in.d_v = dv;
    in.q = b;
    in.k = b + n * dk * es;
    in.v = b + (n + L) * dk * es;
    in.bias_q = c->bias & 1 ? b + total * es : NULL;
    in.bias_k = c->bias & 2 ? b + (total + dk) * es : NULL;
    in.bias_v = c->bias & 4 ? b + (total + 2 * dk) * es : NULL;
    in.softmax = c->sm;
    in.sink_logit = c->sm == ATTN_SOFTMAX_SINK ? sinks[0] : 0;
    in.sinks = c->sinks ? sinks : NULL;
    in.n_sinks = c->sinks;
    in.rope = c->rope;
    in.rope_base = 10000;
    in.window = (struct attn_window){c->window, 2, -1, c->window};
    for (size_t i = 0; i < 64; i++) {
        pq[i] = (int64_t)(i + 3);
        pk[i] = (int64_t)i;
        sq[i] = (int64_t)(i % 3);
        sk[i] = (int64_t)(i % 2);
    }
    in.pos_q = c->positions ? pq : NULL;
    in.pos_k = c->positions ? pk : NULL;
    in.seg_q = c->segments ? sq : NULL;
    in.seg_k = c->segments ? sk : NULL;
    size_t fast = 0, unsure = 1;
    *counted = *found = 0;
    CHECK_EQ_INT(verify_report_numbers(&in, true, counted, &unsure), CORE_OK);
    CHECK_EQ_INT(unsure, 0);
    CHECK_EQ_INT(verify_report_numbers(&in, false, &fast, &unsure), CORE_OK);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(verify_report_elements(&r, found));
    /* without the rank, check 7's arrays past d_k keys count as holding */
    CHECK_EQ_INT(unsure, L - 1 < dk ? 0 : 3 * n * L + dk + L);
    CHECK_EQ_INT(fast - (find(&r, "q_bias_exception")->applicable ? 0 : unsure), *found);
    if (getenv("TEST_VERBOSE"))
        printf("  n=%zu L=%zu d_k=%zu d_v=%zu: counted %zu, report %zu\n", n, L, dk, dv,
               *counted, *found);
    verify_report_free(&r);
    free(x);
    free(f);
}

/* verify_report_numbers, before running, counts exactly the numbers the
 * report's data and table hold, for shapes (n > L, one key, odd d_k) and
 * options that turn checks on and off (biases, the sink softmax and
 * per-head sinks, RoPE, a window, segments, positions, float32, keys on
 * one line past d_k, keys sharing bQ.k, a zero q); without the rank, just
 * check 7's arrays past d_k keys are unsure; where a premise only the
 * passes show fails (check 10's underflowing rows), it counts its arrays
 * as an upper bound. The old bound, 96 arrays of the largest shape, was 5
 * to 7 times the report. */
TEST(report_numbers_match_the_report)
{
    static const struct size_case cases[] = {
        {1, 1, 1, 1, 0, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {3, 5, 4, 2, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {5, 3, 4, 2, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {4, 9, 3, 5, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {4, 9, 3, 5, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 1},
        {4, 9, 3, 5, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 2},
        {4, 9, 3, 5, 1, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 2},
        {6, 8, 4, 3, 2, ATTN_SOFTMAX_ONE, 0, true, true, true, true, false, false, 0},
        {6, 8, 4, 3, 7, ATTN_SOFTMAX_SINK, 3, true, true, false, true, false, false, 0},
        {6, 8, 4, 3, 7, ATTN_SOFTMAX_SINK, 1, false, false, true, false, true, false, 0},
        {6, 8, 4, 3, 6, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, true, 0},
        {6, 8, 4, 3, 2, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, true, 0},
        {2, 1, 6, 1, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {16, 16, 16, 16, 7, ATTN_SOFTMAX_STANDARD, 0, false, false, false, false, false, false, 0},
        {7, 40, 8, 8, 3, ATTN_SOFTMAX_STANDARD, 0, false, false, false, true, true, false, 1},
        {20, 12, 5, 9, 4, ATTN_SOFTMAX_ONE, 0, false, true, true, false, false, false, 0},
    };
    size_t counted, found;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_case_check(&cases[i], &counted, &found);
        CHECK_EQ_INT(counted, found);
    }

    /* check 10 not applicable only after its passes (every row's largest
     * softmax1 weight underflows): counted, 4nL + 3n + 1 = 12 over */
    double q[2] = {-1, 0}, k[4] = {1, 0, 0.5, 1}, v[2] = {1, 2}, bk[2] = {1100, 0};
    struct verify_input in;
    struct verify_report r;
    two_dims(&in, 1, 2, q, k, v);
    in.bias_k = bk;
    size_t unsure;
    CHECK_EQ_INT(verify_report_numbers(&in, true, &counted, &unsure), CORE_OK);
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!find(&r, "softmax1_not_shift_invariant")->applicable);
    CHECK(verify_report_elements(&r, &found));
    CHECK_EQ_INT(counted, found + 12);
    verify_report_free(&r);
}

/* ---- injected core faults ------------------------------------------------ */

/* Check 20 on many interleaved segments (ids -5..5 on queries, -6..2 on
 * keys: three segments have queries and no key, one keys and no query):
 * the real core passes,
 * each segment with keys is run alone, and a core that ignores segments
 * is caught. */
/* ---- large magnitudes: rounding alone fails nothing ---------------------- */

/* One query row, three keys of d_k 2, one value column, given biases. */
static enum core_status big_case(struct verify_report *r, const double *q,
                                 const double *k, const double *bq,
                                 const double *bk, verify_forward_fn fwd)
{
    static const double v[3] = {1, 2, 3};
    struct verify_input in;
    two_dims(&in, 1, 3, q, k, v);
    in.bias_q = bq;
    in.bias_k = bk;
    in.forward = fwd;
    return run(&in, r);
}

static const double BIG_K[6] = {1, 0.5, 0.3, 1, -1, 0.2};
static const double BIG_K100[6] = {100, 0.5, 0.3, 100, -100, 0.2};

TEST(large_magnitudes_pass_true_properties)
{
    static const double q1[2] = {1000, 3}, bk1[2] = {1000, -2000};
    static const double q2[2] = {0.1, 0.3}, bq2[2] = {0.5, 0.25}, bk2[2] = {1e6, -2e6};
    static const double bq3[2] = {1e6, -2e6};
    struct verify_report r;
    /* scores near 7e5: rounding of 1e-10 used to fail checks 2, 5 and 6;
     * the weights saturate, so only the counterexamples (and check 10's
     * weight change) cannot show a change */
    CHECK_EQ_INT(big_case(&r, q1, BIG_K, NULL, bk1, NULL), CORE_OK);
    for (size_t i = 0; i < r.n_checks; i++)
        if (!r.checks[i].expect_change && r.checks[i].id != 10)
            CHECK(r.checks[i].passed);
    CHECK(r.checks[1].tolerance > 1e-12 && r.checks[1].tolerance < 1e-8);
    CHECK_NEAR(r.tolerance, 1e-12, 0);
    verify_report_free(&r);
    CHECK_EQ_INT(big_case(&r, q2, BIG_K, bq2, bk2, NULL), CORE_OK);
    CHECK(r.passed);
    verify_report_free(&r);
    CHECK_EQ_INT(big_case(&r, q2, BIG_K100, bq3, NULL, NULL), CORE_OK);
    CHECK(r.passed);
    /* check 1 has no bias: its scores are small and keep the base */
    CHECK_NEAR(r.checks[0].tolerance, 1e-12, 0);
    CHECK(r.checks[3].tolerance > 1e-12);
    verify_report_free(&r);
}

/* q, bQ times 10^eq and k, bK times 10^ek: the same scores for every
 * eq + ek, two query rows, three keys, v as given. */
static enum core_status scaled_case(struct verify_report *r, double eq, double ek,
                                    const double *v)
{
    static const double q0[4] = {3, 1, 1, -2}, k0[6] = {1.1, 3.3, 2.7, 1, -1, 0.5};
    static const double bq0[2] = {1, 1}, bk0[2] = {2, -1};
    static double q[4], k[6], bq[2], bk[2];
    double up = pow(10.0, eq), down = pow(10.0, ek);
    for (int i = 0; i < 4; i++)
        q[i] = q0[i] * up;
    for (int i = 0; i < 6; i++)
        k[i] = k0[i] * down;
    for (int i = 0; i < 2; i++) {
        bq[i] = bq0[i] * up;
        bk[i] = bk0[i] * down;
    }
    struct verify_input in;
    two_dims(&in, 2, 3, q, k, v);
    in.bias_q = bq;
    in.bias_k = bk;
    return run(&in, r);
}

/* The rounding bound is M = scale*|q|*|k| times units of rounding: |q|
 * past 1e154 squares to infinity, and M*|v| past DBL_MAX, where the bound
 * itself is finite. Either used to drop the bound for the base 1e-12, so
 * the scores of a request failed true properties that the same scores of
 * smaller q and larger k passed; and check 8 shifted no key at all. */
TEST(large_norms_keep_the_rounding_bound)
{
    static const double v[3] = {1, 2, 3};
    struct verify_report a, b;
    /* scores near 1e10: q near 1e15 or 1e165 */
    CHECK_EQ_INT(scaled_case(&a, 15, -5, v), CORE_OK);
    CHECK_EQ_INT(scaled_case(&b, 165, -155, v), CORE_OK);
    for (int id = 2; id <= 6; id++) {
        const struct verify_check *x = &a.checks[id - 1], *y = &b.checks[id - 1];
        CHECK(x->passed && y->passed);
        CHECK(y->tolerance > 1e-8);
        CHECK_NEAR(y->tolerance / x->tolerance, 1.0, 1e-9);
    }
    verify_report_free(&a);
    verify_report_free(&b);
    /* scores near 1: q near 1e160; check 8 shifts the keys as it must */
    CHECK_EQ_INT(scaled_case(&b, 160, -160, v), CORE_OK);
    CHECK(b.passed);                    /* 27: float16 cannot hold q, not applicable */
    const struct verify_check *c8 = find(&b, "per_key_shift_counterexample");
    CHECK(c8 && c8->applicable && c8->max_abs_diff > 0.01);
    verify_report_free(&b);
    /* outputs near 1e307: M*max|v| passes DBL_MAX, the bound does not */
    static const double vbig[3] = {1e307, -1e307, 5e306};
    CHECK_EQ_INT(scaled_case(&b, 1, 1, vbig), CORE_OK);
    const struct verify_check *c3 = find(&b, "k_bias_weights_unchanged");
    CHECK(c3 && c3->passed && c3->tolerance > 1e280 && isfinite(c3->tolerance));
    CHECK(find(&b, "max_subtraction")->passed);
    verify_report_free(&b);
}

/* A sink logit's size counts in the rounding bound of the checks that use
 * the sink softmax, and only there: it used to widen every check's
 * tolerance, so a sink of 1e6 gave check 3 (standard softmax, no sink)
 * 7e-9 for its 1e-12, and one of 1e300 made check 8 fail a change of 0.24. */
TEST(sink_logit_bounds_only_sink_checks)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    in.softmax = ATTN_SOFTMAX_SINK;
    in.sink_logit = 1e6;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(r.passed);
    CHECK_NEAR(find(&r, "k_bias_weights_unchanged")->tolerance, 1e-12, 0);
    CHECK_NEAR(find(&r, "per_key_shift_counterexample")->tolerance, 1e-12, 0);
    CHECK(find(&r, "sink_extra_key")->tolerance > 1e-9);
    CHECK(find(&r, "session_decode")->tolerance > 1e-9);
    verify_report_free(&r);
    in.sink_logit = 1e300;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *c8 = find(&r, "per_key_shift_counterexample");
    CHECK(c8 && c8->passed && c8->max_abs_diff > 0.1);
    verify_report_free(&r);
}

/* A core that drops the key bias at scores near 1e6 is still caught. */
TEST(large_magnitudes_catch_faults)
{
    static const double q2[2] = {0.1, 0.3}, bq2[2] = {0.5, 0.25}, bk2[2] = {1e6, -2e6};
    struct verify_report r;
    CHECK_EQ_INT(big_case(&r, q2, BIG_K, bq2, bk2, fwd_no_k_bias), CORE_OK);
    CHECK(!r.passed);
    CHECK(!find(&r, "k_bias_row_constant")->passed);
    CHECK(!find(&r, "four_term_decomposition")->passed);
    CHECK(!find(&r, "every_query_row")->passed);
    verify_report_free(&r);
}

int main(void)
{
    RUN(builtin_matches_published_table);
    RUN(builtin_softmax1_table);
    RUN(builtin_every_check);
    RUN(notes_are_whole_sentences);
    RUN(builtin_row_constant_and_q_change);
    RUN(caller_data_all_pass);
    RUN(caller_data_with_rope_and_sink);
    RUN(float32_tolerance);
    RUN(exception_applicable_when_keys_lie_in_a_plane);
    RUN(exception_uses_given_bq_when_it_already_qualifies);
    RUN(premises_that_fail);
    RUN(rope_premise_needs_keys_apart_and_rotated_dims);
    RUN(saturated_weights_fail_counterexamples);
    RUN(max_subtraction_negative_scores);
    RUN(max_subtraction_large_values);
    RUN(own_score_saturated_weight);
    RUN(softmax1_shift_underflowing_row);
    RUN(row_sums_float32_ends);
    RUN(bad_input);
    RUN(tolerance_and_elements);
    RUN(report_numbers_match_the_report);
    RUN(large_magnitudes_pass_true_properties);
    RUN(large_magnitudes_catch_faults);
    RUN(sink_logit_bounds_only_sink_checks);
    RUN(large_norms_keep_the_rounding_bound);
    TEST_MAIN_END();
}
