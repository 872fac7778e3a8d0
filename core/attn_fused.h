/*
 * core/attn_fused.h — one fused AVX-512 kernel for the output-only float32
 * pass: scores, online softmax and P·V in one loop per group of query rows,
 * nothing of n×L ever stored (core/attn_fused.c says how and why).
 *
 * core/attn.c uses it for the key-blocked path when the scores are plain
 * (no attention bias, mask or ALiBi; causal limits are fine) and keeps its
 * gemm loop for everything else and for builds without AVX-512.
 */
#ifndef ATTND_CORE_ATTN_FUSED_H
#define ATTND_CORE_ATTN_FUSED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The kernel is compiled on x86-64 with gcc or clang (for AVX-512, by
 * function attributes, whatever -march says) and used where the CPU runs it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_HAVE_FUSED 1
#endif

/* True when the kernel is built in and this CPU has AVX-512F and DQ. */
bool attn_fused_available(void);

#ifdef ATTN_HAVE_FUSED
/* Floats of scratch (64-byte aligned) attn_fused_rows needs for up to
 * `rows` query rows of key width d_k, value width d_v. */
size_t attn_fused_scratch_floats(size_t rows, size_t d_k, size_t d_v);

/*
 * q [nb][d_k] prepared query rows, K [Lt][d_k] and V [Lt][d_v] prepared key
 * and value rows, lim [nb]: row t sees keys [0, lim[t]) (lim[t] <= Lt);
 * scores s[t][j] = scale · q[t] · K[j].
 * -> m [nb]  max_j s[t][j] over the keys row t sees (-inf: it sees none),
 *            within a rounding (the kernel works in base 2 and converts back)
 *    l [nb]  Σ_j exp(s[t][j] - m[t])                  (0 for such rows)
 *    O [nb][d_v] Σ_j exp(s[t][j] - m[t]) · V[j]       (unnormalised; 0 rows)
 * scratch: attn_fused_scratch_floats(nb, d_k, d_v) floats, 64-byte aligned.
 * Returns false when a score some row sees is not finite in base 2 (O, m
 * and l are then unspecified): the caller's exact path decides whether that
 * is an error (a score just below FLT_MAX overflows only here).
 */
bool attn_fused_rows(const float *q, size_t nb, size_t d_k, float scale, const float *K,
                     const float *V, size_t d_v, const int32_t *lim, float *O, float *m,
                     double *l, float *scratch);
#endif

#endif
