/*
 * tests/unit/test_attn_check.c — what the attention core refuses before it
 * computes anything: attn_check's shapes, parameters, outputs and products
 * too large for BLAS or size_t; attn_check_inputs' bias heads and missing
 * inputs; a scratch that cannot be allocated is CORE_ENOMEM, not an abort.
 * Also the status names and texts and the BLAS configuration text.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/attn.h"
#include "tests/harness.h"


static struct attn_request valid_request(void)
{
    struct attn_request r = {0};
    r.shape = (struct attn_shape){4, 2, 3, 5, 8, 8, 1};
    r.params.dtype = ATTN_F64;
    r.params.scale = 0.5;
    r.params.rope_base = 10000;
    r.outputs = ATTN_OUT_ALL;
    return r;
}

TEST(check_rejects_bad_requests)
{
    struct attn_request r = valid_request();
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.shape.h_kv = 3;                                   /* 4 % 3 != 0 */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.h_kv = 8;                                   /* more kv heads than heads */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.n = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.shape.d_v = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.params.rope = true;
    r.shape.d_k = 7;                                    /* RoPE needs even d_k */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.attn_bias = &r;                                   /* any non-NULL pointer */
    r.attn_bias_heads = 2;                              /* neither 1 nor h */
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r.attn_bias_heads = 4;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r = valid_request();
    r.mask = (const uint8_t *)&r;
    r.mask_heads = 3;
    CHECK_EQ_INT(attn_check(&r), CORE_ESHAPE);
    r = valid_request();
    r.params.scale = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.scale = NAN;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.params.softmax = ATTN_SOFTMAX_SINK;
    r.params.sink_logit = INFINITY;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.sink_logit = 1e300;                        /* finite, but not as float32 */
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.dtype = ATTN_F32;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.params.sink_logit = 1e30;
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    r.params.scale = 1e39;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.params.rope = true;
    r.params.rope_base = -1;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r = valid_request();
    r.outputs = 0;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    r.outputs = 8;
    CHECK_EQ_INT(attn_check(&r), CORE_EINVAL);
    CHECK_EQ_INT(attn_check(NULL), CORE_EINVAL);
}

TEST(check_rejects_overflowing_products)
{
    struct attn_request r = valid_request();
    r.shape.h = r.shape.h_kv = 1;
    r.shape.n = (size_t)1 << 31;                        /* beyond BLAS int */
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = (size_t)1 << 30;         /* h·n·L·8 overflows */
    r.shape.n = r.shape.L = (size_t)1 << 20;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = (size_t)1 << 26;         /* h_kv·L·d_k·8 overflows */
    r.shape.L = r.shape.d_k = (size_t)1 << 20;
    r.shape.n = 1;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
    r = valid_request();
    r.shape.h = r.shape.h_kv = SIZE_MAX;
    CHECK_EQ_INT(attn_check(&r), CORE_ELIMIT);
}

TEST(check_inputs_bias_heads)
{
    struct attn_request r = valid_request();
    double dummy[1];
    struct attn_inputs in = {dummy, dummy, dummy, NULL, NULL, NULL, 1, 1, 1};
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_OK);
    in.bias_q = dummy;
    in.bias_q_heads = 2;                                /* neither 1 nor h = 4 */
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_ESHAPE);
    in.bias_q_heads = 4;
    in.bias_k = dummy;
    in.bias_k_heads = 4;                                /* k bias is per kv head: 2 */
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_ESHAPE);
    in.bias_k_heads = 2;
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_OK);
    in.v = NULL;
    CHECK_EQ_INT(attn_check_inputs(&r, &in), CORE_EINVAL);
}

TEST(status_names)
{
    CHECK_STR(core_status_name(CORE_EEMPTYROW), "CORE_EEMPTYROW");
    CHECK_STR(core_status_text(CORE_OK), "ok");
    CHECK_STR(core_status_name((enum core_status)-99), "CORE_UNKNOWN");
}

#if !defined(__SANITIZE_ADDRESS__)
/* A request that passes attn_check but whose scratch cannot be allocated
 * returns CORE_ENOMEM (never aborts); inputs are not read before that. */
TEST(enomem_is_a_value)
{
    struct attn_request r = valid_request();
    r.shape = (struct attn_shape){1, 1, 1, (size_t)1 << 28, (size_t)1 << 28, 1, 1};
    CHECK_EQ_INT(attn_check(&r), CORE_OK);
    double dummy[1] = {0}, outb[1];
    struct attn_inputs in = {dummy, dummy, dummy, NULL, dummy, NULL, 1, 1, 1};
    struct attn_result out = {NULL, NULL, outb, NULL, 0};
    r.outputs = ATTN_OUT_OUTPUT;
    CHECK_EQ_INT(attn_forward(&r, &in, &out, NULL), CORE_ENOMEM);
}
#endif

TEST(blas_config_text)
{
    CHECK(attn_blas_config() != NULL && strlen(attn_blas_config()) > 0);
}

int main(void)
{
    RUN(check_rejects_bad_requests);
    RUN(check_rejects_overflowing_products);
    RUN(check_inputs_bias_heads);
    RUN(status_names);
#if !defined(__SANITIZE_ADDRESS__)
    RUN(enomem_is_a_value);
#endif
    RUN(blas_config_text);
    TEST_MAIN_END();
}
