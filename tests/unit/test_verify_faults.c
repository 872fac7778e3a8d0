/*
 * tests/unit/test_verify_faults.c — core/verify against a core that is
 * wrong on purpose: forward passes with an injected fault (the classic
 * wrong softmax1, a key bias dropped, noise, a model option ignored) must
 * make the checks that cover them fail, and the right core pass them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/verify.h"
#include "tests/harness.h"
#include "tests/unit/verify_testlib.h"

/* The classic wrong softmax1: add 1 after subtracting the row maximum. */
static enum core_status fwd_wrong_softmax1(const struct attn_request *r,
                                           const struct attn_inputs *in,
                                           struct attn_result *out,
                                           struct attn_ws *ws)
{
    enum core_status st = attn_forward(r, in, out, ws);
    if (st != CORE_OK || r->params.softmax != ATTN_SOFTMAX_ONE ||
        r->params.dtype != ATTN_F64)
        return st;
    size_t n = r->shape.n, L = r->shape.L, dv = r->shape.d_v;
    const double *v = in->v;
    double *s = out->scores, *w = out->weights, *o = out->output;
    for (size_t i = 0; i < n; i++) {
        double m = s[i * L], sum = 1.0;
        for (size_t j = 1; j < L; j++)
            m = s[i * L + j] > m ? s[i * L + j] : m;
        for (size_t j = 0; j < L; j++)
            sum += exp(s[i * L + j] - m);
        for (size_t j = 0; j < L; j++)
            w[i * L + j] = exp(s[i * L + j] - m) / sum;
        for (size_t d = 0; d < dv; d++) {
            double acc = 0.0;
            for (size_t j = 0; j < L; j++)
                acc += w[i * L + j] * (v[j * dv + d] +
                       (in->bias_v ? ((const double *)in->bias_v)[d] : 0.0));
            o[i * dv + d] = acc;
        }
    }
    return st;
}

/* A core whose weights are off by 1e-9. */
static enum core_status fwd_noisy(const struct attn_request *r,
                                  const struct attn_inputs *in,
                                  struct attn_result *out, struct attn_ws *ws)
{
    enum core_status st = attn_forward(r, in, out, ws);
    if (st == CORE_OK && r->params.dtype == ATTN_F64)
        ((double *)out->weights)[0] += 1e-9;
    return st;
}

TEST(core_faults_fail_checks)
{
    struct verify_input in;
    struct verify_report r;
    verify_builtin(&in);
    in.forward = fwd_wrong_softmax1;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!r.passed);
    CHECK(!find(&r, "softmax1_zero_key")->passed);
    CHECK(!find(&r, "softmax1_row_sums")->passed);
    CHECK(!find(&r, "max_subtraction")->passed);
    CHECK(!find(&r, "softmax1_own_score")->passed);
    CHECK(find(&r, "k_bias_weights_unchanged")->passed);
    verify_report_free(&r);

    verify_builtin(&in);
    in.forward = fwd_no_k_bias;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!r.passed);
    CHECK(!find(&r, "k_bias_row_constant")->passed);
    CHECK(!find(&r, "four_term_decomposition")->passed);
    verify_report_free(&r);

    verify_builtin(&in);
    in.forward = fwd_noisy;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!r.passed);
    CHECK(!find(&r, "softmax1_ratios")->passed);
    verify_report_free(&r);
}

/* Cores that get one of issue 16's options wrong (fault_mode picks it). */
static int fault_mode;

static enum core_status fwd_model_fault(const struct attn_request *r,
                                        const struct attn_inputs *in,
                                        struct attn_result *out, struct attn_ws *ws)
{
    struct attn_request x = *r;
    if (fault_mode == 0)
        x.seg_q = x.seg_k = NULL;               /* segments ignored */
    else if (fault_mode == 1 && x.window.on)
        x.window.left = 1;                      /* the window's left side lost */
    else if (fault_mode == 2 && x.params.softcap > 0)
        x.params.softcap *= 2;                  /* the cap doubled */
    else if (fault_mode == 3)
        x.params.sink_logits = NULL;            /* per-head sinks ignored */
    else if (fault_mode == 4 && x.params.rope_scaling.type == ATTN_ROPE_SCALING_LLAMA3)
        x.params.rope_scaling.factor = 2;       /* factor lost */
    else if (fault_mode == 5 && x.params.rope_dims == ATTN_ROPE_DIMS_ZERO)
        x.params.rope_dims = 0;                 /* dims 0 read as all */
    return attn_forward(&x, in, out, ws);
}

TEST(model_checks_pass_and_catch_faults)
{
    static const char *const names[6] = {
        "segments_per_segment", "window_over_every_key", "softcap_monotone_bounded",
        "head_sink_limits",     "llama3_factor_one",     "rope_dims_zero"};
    for (int dt = 0; dt < 2; dt++) {
        struct data d;
        struct verify_input in;
        struct verify_report r;
        caller_input(&in, &d, 4, 6, 16, 3);
        if (dt) {
            in.dtype = ATTN_F32;
            float *f[3];
            const double *src[3] = {in.q, in.k, in.v};
            size_t cnt[3] = {4 * 16, 6 * 16, 6 * 3};
            for (int a = 0; a < 3; a++) {
                f[a] = malloc(cnt[a] * sizeof(float));
                for (size_t i = 0; i < cnt[a]; i++)
                    f[a][i] = (float)src[a][i];
            }
            in.q = f[0];
            in.k = f[1];
            in.v = f[2];
            in.bias_q = in.bias_k = in.bias_v = NULL;
            CHECK_EQ_INT(run(&in, &r), CORE_OK);
            for (int i = 0; i < 6; i++)
                CHECK(find(&r, names[i]) && find(&r, names[i])->passed);
            verify_report_free(&r);
            for (int a = 0; a < 3; a++)
                free(f[a]);
            continue;
        }
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        for (int i = 0; i < 6; i++) {
            const struct verify_check *ck = find(&r, names[i]);
            CHECK(ck && ck->applicable && ck->passed && ck->id == 20 + i);
        }
        verify_report_free(&r);
        in.softcap = 0.5;
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        CHECK(find(&r, "softcap_monotone_bounded")->passed);
        CHECK(arr(find(&r, "softcap_monotone_bounded"), "softcap")->data[0] == 0.5);
        verify_report_free(&r);
        in.forward = fwd_model_fault;
        for (fault_mode = 0; fault_mode < 6; fault_mode++) {
            CHECK_EQ_INT(run(&in, &r), CORE_OK);
            for (int i = 0; i < 6; i++)
                CHECK(find(&r, names[i])->passed == (i != fault_mode));
            verify_report_free(&r);
        }
    }
}

/* Cores wrong only in a combination that the request's own options reach. */
static enum core_status fwd_combo_fault(const struct attn_request *r,
                                        const struct attn_inputs *in,
                                        struct attn_result *out, struct attn_ws *ws)
{
    struct attn_request x = *r;
    if (fault_mode == 0 && x.seg_q && x.pos_q)
        x.pos_q = NULL;                         /* positions lost with segments */
    else if (fault_mode == 1 && x.window.on && x.window.left >= 0 && x.window.right >= 0)
        x.window.right = -1;                    /* right side lost beside a left one */
    else if (fault_mode == 2 && x.params.softmax == ATTN_SOFTMAX_SINK && x.params.sink_logits &&
             x.shape.h > 2)
        x.params.sink_logits = NULL;            /* many per-head sinks read as one */
    return attn_forward(&x, in, out, ws);
}

/* The request's own positions, segments (interleaved), window, per-head
 * sinks, softcap and scaled partial RoPE: the checks run on them (their
 * numbers are in the notes and data), pass with the real core, and catch a
 * core wrong only where those options meet. */
TEST(model_checks_on_request_options)
{
    static const int64_t pq[4] = {7, 3, 9, 12}, pk[6] = {0, 2, 4, 6, 8, 10};
    static const int64_t sq[4] = {5, -1, 5, 2}, sk[6] = {2, 5, 5, -1, 2, 5};
    static const double sinks[3] = {0.5, -1.25, 2};
    struct data d;
    struct verify_input in;
    struct verify_report r;
    caller_input(&in, &d, 4, 6, 16, 3);
    in.pos_q = pq;
    in.pos_k = pk;
    in.seg_q = sq;
    in.seg_k = sk;
    in.window = (struct attn_window){true, 3, 2, 1};
    in.softmax = ATTN_SOFTMAX_SINK;
    in.sink_logit = sinks[0];
    in.sinks = sinks;
    in.n_sinks = 3;
    in.softcap = 0.75;
    in.rope = true;
    in.rope_base = 500;
    in.rope_dims = 8;
    in.rope_scaling = (struct attn_rope_scaling){.type = ATTN_ROPE_SCALING_LINEAR, .factor = 4};
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(r.passed);
    const struct verify_check *seg = find(&r, "segments_per_segment");
    CHECK(seg && seg->applicable && strstr(seg->note, "The request's segments; 3 segments"));
    const struct verify_check *win = find(&r, "window_over_every_key");
    CHECK(win && strstr(win->note, "left: 12, the request's right and sinks"));
    CHECK(arr(win, "weights_request_window") != NULL);
    const struct verify_array *ws = arr(find(&r, "head_sink_limits"), "weights_request_sinks");
    CHECK(ws && ws->rows == 3 * 4 && ws->cols == 6);
    CHECK(arr(find(&r, "softcap_monotone_bounded"), "softcap")->data[0] == 0.75);
    CHECK(strstr(find(&r, "llama3_factor_one")->note, "the request's dims"));
    verify_report_free(&r);
    in.forward = fwd_combo_fault;
    static const char *const caught[3] = {"segments_per_segment", "window_over_every_key",
                                          "head_sink_limits"};
    for (fault_mode = 0; fault_mode < 3; fault_mode++) {
        CHECK_EQ_INT(run(&in, &r), CORE_OK);
        if (find(&r, caught[fault_mode])->passed)
            printf("  fault %d not caught\n", fault_mode);
        CHECK(!find(&r, caught[fault_mode])->passed);
        verify_report_free(&r);
    }
    in.forward = NULL;
    in.n_sinks = VERIFY_MAX_SINKS + 1;      /* refused */
    CHECK_EQ_INT(verify_run(&in, &r), CORE_EINVAL);
    verify_report_free(&r);
}

TEST(segments_many_interleaved)
{
    int64_t sq[32], sk[18];
    struct data d;
    struct verify_input in;
    struct verify_report r;
    for (int i = 0; i < 32; i++)
        sq[i] = (i * 7) % 11 - 5;
    for (int j = 0; j < 18; j++)
        sk[j] = (j * 5) % 9 - 6;
    caller_input(&in, &d, 32, 18, 2, 1);
    in.seg_q = sq;
    in.seg_k = sk;
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    const struct verify_check *seg = find(&r, "segments_per_segment");
    CHECK(seg && seg->applicable && seg->passed);
    CHECK(seg && strstr(seg->note, "The request's segments; 8 segments with keys"));
    verify_report_free(&r);
    in.forward = fwd_model_fault;
    fault_mode = 0;                             /* segments ignored */
    CHECK_EQ_INT(run(&in, &r), CORE_OK);
    CHECK(!find(&r, "segments_per_segment")->passed);
    verify_report_free(&r);
}

int main(void)
{
    RUN(segments_many_interleaved);
    RUN(model_checks_pass_and_catch_faults);
    RUN(model_checks_on_request_options);
    RUN(core_faults_fail_checks);
    TEST_MAIN_END();
}
