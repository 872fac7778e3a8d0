/*
 * core/tensor.h — element types, the highest rank, checked size arithmetic.
 *
 * The core works on plain row-major arrays of float or double, described by
 * the shapes of core/attn.h; this header holds what every layer needs to
 * speak of them. Every size computed from untrusted dimensions goes through
 * the checked helpers below before anything is allocated.
 */
#ifndef ATTND_CORE_TENSOR_H
#define ATTND_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum attn_dtype { ATTN_F64 = 0, ATTN_F32 = 1 };

/* The most dimensions a tensor of a request may have. */
#define ATTN_MAX_RANK 4

static inline size_t attn_dtype_size(enum attn_dtype t)
{
    return t == ATTN_F32 ? sizeof(float) : sizeof(double);
}

static inline const char *attn_dtype_name(enum attn_dtype t)
{
    return t == ATTN_F32 ? "float32" : "float64";
}

/* *out = a * b; false (and *out untouched) on overflow. */
static inline bool core_mul(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a * b * c; false on overflow. */
static inline bool core_mul3(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    return core_mul(a, b, &ab) && core_mul(ab, c, out);
}

/* *out = a + b; false on overflow. */
static inline bool core_add(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

#endif
