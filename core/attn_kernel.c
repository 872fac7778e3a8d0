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

/* Rows the later of two threads runs when they take tiles of B rows (R
 * rows per head, `heads` heads) in order, each the next one when free, at
 * a cost proportional to rows. */
static size_t two_thread_rows(size_t R, size_t heads, size_t B)
{
    size_t a = 0, b = 0;
    for (size_t h = 0; h < heads; h++)
        for (size_t t0 = 0; t0 < R; t0 += B) {
            size_t rows = R - t0 < B ? R - t0 : B;
            if (a <= b)
                a += rows;
            else
                b += rows;
        }
    return a > b ? a : b;
}

size_t attn_fused_group_rows(void)
{
    switch (attn_kernel_active()) {
#ifdef ATTN_HAVE_FUSED
    case ATTN_KERNEL_AVX512:
        return ATTN_FUSED_QG_AVX512;
    case ATTN_KERNEL_AVX2:
        return ATTN_FUSED_QG_AVX2;
#endif
    default:
        return 0;
    }
}

/* Why the tile is chosen per pass: the pieces of a split pass are its
 * tiles, and a 2-core pass ends when the later core does, so a tile that
 * leaves one core a short last piece wastes the other (with tiles of 192
 * rows a 1024-row head is five tiles and a 64-row tail). Tiles are whole
 * groups of the kernel (a partial group costs a register-tiled pass of
 * its own). The largest tile within 1/64 of the soonest finish is taken:
 * larger tiles mean fewer tiles, each superblock of K and V read by more
 * groups from L2. Beyond 64 tiles of cap rows the tail is at most 1/32 of
 * a thread's rows and cap stays. Tuned: docs/benchmarks.md, section "The
 * fused kernels at n=L=1024 d=64". */
size_t attn_fused_tile_rows(size_t R, size_t heads, size_t cap, size_t group)
{
    if (R <= cap)
        return R;
    if (!group || group > cap / 2 || heads * ((R + cap - 1) / cap) > 64)
        return cap;
    size_t at_cap = two_thread_rows(R, heads, cap), fewest = at_cap;
    for (size_t B = cap / group * group; B >= cap / 2; B -= group) {
        size_t s = two_thread_rows(R, heads, B);
        fewest = s < fewest ? s : fewest;
    }
    if (64 * at_cap <= 65 * fewest)
        return cap;
    size_t B = cap / group * group;
    while (64 * two_thread_rows(R, heads, B) > 65 * fewest)
        B -= group;
    return B;
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
