/*
 * core/attn_fused.h — the fused kernels of the output-only float32 pass:
 * scores, online softmax and P·V in one loop per group of query rows,
 * nothing of n×L ever stored. One kernel per instruction set, the same
 * design in each (core/attn_fused.c says how and why):
 *   avx512  core/attn_fused.c       AVX-512F + DQ, 16-lane registers
 *   avx2    core/attn_fused_avx2.c  AVX2 + FMA, 8-lane registers
 *   none    core/attn.c keeps its gemm loop (OpenBLAS)
 * core/attn_kernel.c chooses one at run time from the CPU's features (the
 * widest it runs) or from what the caller asks for (attn_kernel_set: a
 * narrower one, so the others are tested and measured on any machine).
 *
 * core/attn.c uses the chosen kernel for the key-blocked path when the
 * scores are plain but for a softcap (no attention bias, mask or ALiBi) and
 * each row's keys are one range (causal, window, contiguous segments), and
 * keeps its gemm loop for everything else.
 */
#ifndef ATTND_CORE_ATTN_FUSED_H
#define ATTND_CORE_ATTN_FUSED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct attn_stop;   /* core/stop.h */

/* The kernels are compiled on x86-64 with gcc or clang (each for its own
 * instruction set by function attributes, whatever -march says). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_HAVE_FUSED 1
#endif

/* Ordered from narrowest: a kernel the CPU lacks falls back to the next
 * narrower one it has. AUTO: the widest the CPU runs. */
enum attn_kernel {
    ATTN_KERNEL_NONE,
    ATTN_KERNEL_AVX2,
    ATTN_KERNEL_AVX512,
    ATTN_KERNEL_AUTO,
};

/* "none", "avx2", "avx512", "auto" */
const char *attn_kernel_name(enum attn_kernel k);

/* The name's kernel -> *k; false for any other text. */
bool attn_kernel_parse(const char *name, enum attn_kernel *k);

/* Bit 1 << k for each kernel this build has and this CPU runs (NONE always). */
unsigned attn_kernel_supported(void);

/* The kernel `want` resolves to on a machine whose supported set is `have`
 * (bits as attn_kernel_supported): want itself when it is in have, else the
 * widest narrower one in have (AUTO: the widest). Pure, for tests. */
enum attn_kernel attn_kernel_choose(enum attn_kernel want, unsigned have);

/* Use attn_kernel_choose(want, attn_kernel_supported()) from now on and
 * return it. Meant for start-up (a flag, a test, a benchmark row): passes
 * running at the same time may take either kernel. */
enum attn_kernel attn_kernel_set(enum attn_kernel want);

/* The kernel in use: AUTO's choice until attn_kernel_set says otherwise. */
enum attn_kernel attn_kernel_active(void);

/* True when a fused kernel is in use (attn_kernel_active() != NONE). */
bool attn_fused_available(void);

/* Query rows per group of the kernel in use (48 for avx512, 16 for avx2,
 * 0 for none): what a tile of the fused pass is best cut into. */
size_t attn_fused_group_rows(void);

/* Query rows per tile of a fused pass with R rows per kv head over `heads`
 * kv heads, tiles at most cap rows, cut in groups of `group` rows: R when
 * R <= cap, else the multiple of group in [cap / 2, cap] whose tiles two
 * threads, each taking the next tile when free (core/pool.c), finish
 * soonest, or the largest one within 1/64 of that (cap when group is 0
 * or above cap / 2).
 * Pure: a pass and its pieces cut the same tiles. */
size_t attn_fused_tile_rows(size_t R, size_t heads, size_t cap, size_t group);

/* Floats of scratch (64-byte aligned) attn_fused_rows needs for up to
 * `rows` query rows of key width d_k, value width d_v, whichever kernel
 * runs (the largest of their needs). */
size_t attn_fused_scratch_floats(size_t rows, size_t d_k, size_t d_v);

struct attn_score_sink;

/* What attn_fused_rows' K or V holds: float32 rows, or 2-byte rows
 * (float16, bfloat16) that the kernel widens (exactly) a superblock of keys
 * at a time into `wide`, so no float32 copy of the whole matrix exists and
 * every row's arithmetic, in the same order, gives the float32 kernel's
 * bits on the widened values. */
enum attn_fused_elem { ATTN_FUSED_F32, ATTN_FUSED_F16, ATTN_FUSED_BF16 };

/* Which keys each row of attn_fused_rows sees, and the softcap. */
struct attn_fused_keys {
    const int32_t *lo, *hi;         /* [nb]: row t sees keys [lo[t], hi[t]); none
                                       when lo[t] >= hi[t] */
    float softcap;                  /* c > 0: scores c·tanh(s/c); 0: off */
    const struct attn_score_sink *sink;  /* fed each block's raw base-2 scores
                                            (attn.h), or NULL */
    size_t row0;                    /* the sink's global row of row 0 */
    enum attn_fused_elem k_elem, v_elem;  /* what K and V hold (0: float32) */
    float *wide;                    /* when either is 2-byte: attn_fused_wide_floats
                                       floats, 64-byte aligned */
    /* K and V not in one block each (a paged cache): when span is not NULL
     * the kernel asks it, superblock by superblock, for float32 rows of
     * keys [a, e) (*k, *v: row 0 is key a; e - a at most
     * attn_fused_wide_floats(d_k, d_v, L) / (d_k + d_v), so a copy fits
     * that scratch) and reads those instead of K and V (which it then
     * ignores). The rows stay valid until the next call. */
    void (*span)(void *ctx, size_t a, size_t e, const float **k, const float **v);
    void *span_ctx;
    const struct attn_stop *stop;   /* its yield (core/stop.h) runs before each
                                       superblock; NULL: none */
};

/* Floats of the `wide` scratch for 2-byte K or V rows of widths d_k, d_v
 * and L keys, whichever kernel runs. */
size_t attn_fused_wide_floats(size_t d_k, size_t d_v, size_t L);

/*
 * q [nb][d_k] prepared query rows, K [Lt][d_k] and V [Lt][d_v] prepared key
 * and value rows (float32, or 2-byte as keys->k_elem, v_elem say), keys:
 * the keys row t sees (hi[t] <= Lt) and the softcap;
 * scores s[t][j] = scale · q[t] · K[j], then c·tanh(s/c) with a softcap.
 * Key blocks end at multiples of the kernel's block size whatever the
 * rows' ranges (the first one starts at the rows' first key, rounded down
 * to 8), so a row's result does not depend on its neighbours.
 * -> m [nb]  max_j s[t][j] over the keys row t sees (-inf: it sees none),
 *            within a rounding (the kernels work in base 2 and convert back)
 *    l [nb]  Σ_j exp(s[t][j] - m[t])                  (0 for such rows)
 *    O [nb][d_v] Σ_j exp(s[t][j] - m[t]) · V[j]       (unnormalised; 0 rows)
 * scratch: attn_fused_scratch_floats(nb, d_k, d_v) floats, 64-byte aligned.
 * Returns false when no fused kernel is in use, or when a score some row
 * sees is not finite in base 2 (before the softcap) (O, m and l are then unspecified): the
 * caller's exact path decides whether that is an error (a score just below
 * FLT_MAX overflows only here).
 */
bool attn_fused_rows(const float *q, size_t nb, size_t d_k, float scale, const void *K,
                     const void *V, size_t d_v, const struct attn_fused_keys *keys, float *O,
                     float *m, double *l, float *scratch);

#endif
