/*
 * core/attn_fused_isa.h — what the per-instruction-set fused kernels share
 * with core/attn_kernel.c, which calls them (private to core/): each
 * kernel's entry points, with attn_fused_rows' contract (attn_fused.h), and
 * the superblock size both use.
 */
#ifndef ATTND_CORE_ATTN_FUSED_ISA_H
#define ATTND_CORE_ATTN_FUSED_ISA_H

#include "attn_fused.h"

#ifdef ATTN_HAVE_FUSED
/* Query rows per group of each kernel (its QG). */
#define ATTN_FUSED_QG_AVX512 48
#define ATTN_FUSED_QG_AVX2 16

/* Keys per superblock: K and V rows of about ATTN_FUSED_KV_BYTES, which every
 * group of a tile reads in turn while they stay in L2 (streaming all of K
 * and V from L3 once per group left the broadcasts waiting on memory). */
#ifndef ATTN_FUSED_KV_BYTES
#define ATTN_FUSED_KV_BYTES ((size_t)256 << 10)
#endif

/* Keys per superblock for rows of d_k + d_v floats: a multiple of the
 * kernel's key block bc, at least one block. */
static inline size_t attn_fused_superblock(size_t d_k, size_t d_v, size_t bc)
{
    size_t ks = ATTN_FUSED_KV_BYTES / ((d_k + d_v) * sizeof(float)) / bc * bc;
    return ks > bc ? ks : bc;
}

size_t attn_fused_scratch_avx512(size_t rows, size_t d_k, size_t d_v);
size_t attn_fused_wide_avx512(size_t d_k, size_t d_v, size_t L);
bool attn_fused_rows_avx512(const float *q, size_t nb, size_t d_k, float scale,
                            const void *K, const void *V, size_t d_v,
                            const struct attn_fused_keys *keys, float *O, float *m, double *l,
                            float *scratch);

size_t attn_fused_scratch_avx2(size_t rows, size_t d_k, size_t d_v);
size_t attn_fused_wide_avx2(size_t d_k, size_t d_v, size_t L);
bool attn_fused_rows_avx2(const float *q, size_t nb, size_t d_k, float scale,
                          const void *K, const void *V, size_t d_v,
                          const struct attn_fused_keys *keys, float *O, float *m, double *l,
                          float *scratch);
#endif

#endif
