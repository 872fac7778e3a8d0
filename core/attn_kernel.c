/*
 * core/attn_kernel.c — which fused kernel runs (attn_fused.h): the CPU's
 * features, the caller's choice, and the calls into the chosen kernel.
 *
 * The choice is one atomic value, read by every key-blocked pass: AUTO's
 * answer (the widest kernel the CPU runs) until attn_kernel_set stores
 * another. A request for a kernel the CPU lacks falls back to the widest
 * narrower one it has, and attn_kernel_set returns what it chose so the
 * caller can say so.
 */
#include "attn_fused_isa.h"

#include <stdatomic.h>
#include <string.h>

static const char *const kernel_names[] = {
    [ATTN_KERNEL_NONE] = "none",
    [ATTN_KERNEL_AVX2] = "avx2",
    [ATTN_KERNEL_AVX512] = "avx512",
    [ATTN_KERNEL_AUTO] = "auto",
};

const char *attn_kernel_name(enum attn_kernel k)
{
    return (unsigned)k <= ATTN_KERNEL_AUTO ? kernel_names[k] : "?";
}

bool attn_kernel_parse(const char *name, enum attn_kernel *k)
{
    for (unsigned i = 0; i <= ATTN_KERNEL_AUTO; i++)
        if (name && strcmp(name, kernel_names[i]) == 0) {
            *k = (enum attn_kernel)i;
            return true;
        }
    return false;
}

unsigned attn_kernel_supported(void)
{
    unsigned have = 1u << ATTN_KERNEL_NONE;
#ifdef ATTN_HAVE_FUSED
    __builtin_cpu_init();       /* callable before the constructors have run */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        have |= 1u << ATTN_KERNEL_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        have |= 1u << ATTN_KERNEL_AVX512;
#endif
    return have;
}

enum attn_kernel attn_kernel_choose(enum attn_kernel want, unsigned have)
{
    int k = (unsigned)want >= ATTN_KERNEL_AUTO ? ATTN_KERNEL_AVX512 : (int)want;
    for (; k > ATTN_KERNEL_NONE; k--)
        if (have & (1u << k))
            break;
    return (enum attn_kernel)k;
}

/* -1: not chosen yet (AUTO on first use) */
static _Atomic int active = -1;

enum attn_kernel attn_kernel_set(enum attn_kernel want)
{
    enum attn_kernel k = attn_kernel_choose(want, attn_kernel_supported());
    atomic_store_explicit(&active, (int)k, memory_order_relaxed);
    return k;
}

enum attn_kernel attn_kernel_active(void)
{
    int k = atomic_load_explicit(&active, memory_order_relaxed);
    if (k < 0) {
        k = (int)attn_kernel_choose(ATTN_KERNEL_AUTO, attn_kernel_supported());
        int expect = -1;    /* a concurrent attn_kernel_set wins */
        if (!atomic_compare_exchange_strong(&active, &expect, k))
            k = expect;
    }
    return (enum attn_kernel)k;
}

bool attn_fused_available(void)
{
    return attn_kernel_active() != ATTN_KERNEL_NONE;
}

size_t attn_fused_scratch_floats(size_t rows, size_t d_k, size_t d_v)
{
#ifdef ATTN_HAVE_FUSED
    size_t a = attn_fused_scratch_avx512(rows, d_k, d_v);
    size_t b = attn_fused_scratch_avx2(rows, d_k, d_v);
    return a > b ? a : b;
#else
    (void)rows, (void)d_k, (void)d_v;
    return 0;
#endif
}

size_t attn_fused_wide_floats(size_t d_k, size_t d_v, size_t L)
{
#ifdef ATTN_HAVE_FUSED
    size_t a = attn_fused_wide_avx512(d_k, d_v, L), b = attn_fused_wide_avx2(d_k, d_v, L);
    return a > b ? a : b;
#else
    (void)d_k, (void)d_v, (void)L;
    return 0;
#endif
}

bool attn_fused_rows(const float *q, size_t nb, size_t d_k, float scale, const void *K,
                     const void *V, size_t d_v, const struct attn_fused_keys *keys, float *O,
                     float *m, double *l, float *scratch)
{
    switch (attn_kernel_active()) {
#ifdef ATTN_HAVE_FUSED
    case ATTN_KERNEL_AVX512:
        return attn_fused_rows_avx512(q, nb, d_k, scale, K, V, d_v, keys, O, m, l, scratch);
    case ATTN_KERNEL_AVX2:
        return attn_fused_rows_avx2(q, nb, d_k, scale, K, V, d_v, keys, O, m, l, scratch);
#endif
    default:
        (void)q, (void)nb, (void)d_k, (void)scale, (void)K, (void)V, (void)d_v, (void)keys;
        (void)O, (void)m, (void)l, (void)scratch;
        return false;
    }
}
