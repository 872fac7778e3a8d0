/*
 * tests/api/half_testlib.h — what the in-process tests of float16 /
 * bfloat16 requests share: random 2-byte values and base64 tensors of
 * them, as 2-byte values or as float32 of the same values.
 */
#ifndef ATTND_TEST_HALF_TESTLIB_H
#define ATTND_TEST_HALF_TESTLIB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "api/codec/base64.h"
#include "api/codec/buf.h"
#include "core/half.h"

/* n values of [-2, 2) rounded to float16 (else bfloat16); malloc'd. */
static inline uint16_t *t_rand_half(uint64_t *rng, size_t n, bool f16)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float x = (float)((double)(t_rng_next(rng) >> 11) / 9007199254740992.0 * 4 - 2);
        h[i] = f16 ? half_f16_from_f32(x) : half_bf16_from_f32(x);
    }
    return h;
}

/* {"shape":shape,"dtype":dt,"data":base64 of h [n]} into b; f32: the
 * values widened to float32, else the 2-byte ones. */
static inline void t_half_b64_tensor(struct api_buf *b, const char *shape, const uint16_t *h,
                                     size_t n, bool f16, bool f32)
{
    api_buf_printf(b, "{\"shape\":%s,\"dtype\":\"%s\",\"data\":\"", shape,
                   f32 ? "float32" : f16 ? "float16" : "bfloat16");
    if (f32) {
        float *f = malloc(n * sizeof *f);
        for (size_t i = 0; i < n; i++)
            f[i] = f16 ? half_f16_to_f32(h[i]) : half_bf16_to_f32(h[i]);
        api_base64_encode(b, f, n * sizeof *f);
        free(f);
    } else {
        api_base64_encode(b, h, n * 2);
    }
    api_buf_puts(b, "\"}");
}

#endif
