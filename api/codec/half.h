/*
 * api/codec/half.h — float16 / bfloat16 requests on the wire ("Precisions"):
 * numbers in, results out.
 *
 * A half request computes in float32 (params.dtype = ATTN_F32) on inputs
 * that are rounded to the half format when read (api/read_tensor.c asks
 * api_half_round for every number of a tensor read while c->half is set);
 * every result matrix is then rounded in place (api_half_round_result) and
 * printed shortest (api_write_matrix_half) or sent as 2-byte little-endian
 * base64 (api_write_matrix_b64_half).
 */
#ifndef ATTND_API_HALF_H
#define ATTND_API_HALF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/codec/buf.h"
#include "core/attn.h"

enum api_half {
    API_HALF_NONE = 0,              /* float32 / float64: no half format */
    API_HALF_F16,                   /* IEEE 754 binary16 */
    API_HALF_BF16,                  /* bfloat16 */
};

/* "float16" / "bfloat16" (NULL for API_HALF_NONE). */
const char *api_half_name(enum api_half h);

/* A request's "dtype" as clients name it: its half format's name when it
 * has one (half != API_HALF_NONE), else dt's ("float32", "float64"). */
const char *api_dtype_name(enum attn_dtype dt, enum api_half half);

/* The bytes of one element of a request's tensors on the wire: 2 in a half
 * format, else dt's. */
size_t api_dtype_size(enum attn_dtype dt, enum api_half half);

/* x (finite) rounded to the format, widened back to float into *out;
 * false when it overflows. With tie non-NULL (x was read from decimal
 * text), *tie is set when x is exactly a midpoint, i.e. when the text must
 * decide (api_half_fix_ties), and such a midpoint never fails here (its
 * text may round below the overflow); with tie NULL (a binary value) x
 * itself is the value and rounds as it is. */
bool api_half_round(enum api_half h, double x, float *out, bool *tie);

/* The format's bits of a float that api_half_round produced. */
uint16_t api_half_bits(enum api_half h, float x);

/*
 * Re-round from their decimal text the numbers of the tensor whose JSON
 * value sits at `path` (a JSON pointer) in the body text: data [count]
 * (elements in row-major, i.e. textual, order; nulls of a nullable tensor
 * count as elements and are left alone). Only numbers whose double is a
 * midpoint change. Returns the index of an element that now overflows (the
 * caller answers 422 non_finite at its path), or count when all are fine;
 * a body where the path cannot be found changes nothing. early: the
 * body's strings with holes (api/early.h), or NULL.
 */
struct api_early;
size_t api_half_fix_ties(const char *body, size_t len, const struct api_early *early,
                         const char *path, enum api_half h, float *data, size_t count);

/*
 * Round a float32 matrix in place to the format: x [n]; -inf stays (masked
 * scores travel as null), and so does NaN (an undefined lse, also null).
 * Returns the index of the first finite value that overflows, or n.
 */
size_t api_half_round_matrix(enum api_half h, float *x, size_t n);

/* Matrices as api_write_matrix / api_write_matrix_b64 write them, for
 * values already rounded to h: shortest text of the half value (or digits
 * significant digits), non-finite as null; base64 of 2-byte little-endian
 * values with "dtype":"float16"|"bfloat16". */
bool api_write_matrix_half(struct api_buf *b, const float *data, enum api_half h, int rank,
                           const size_t *shape, int digits);
bool api_write_matrix_b64_half(struct api_buf *b, const float *data, enum api_half h,
                               int rank, const size_t *shape);

#endif
