/*
 * core/attn.c — scaled dot-product attention: scratch memory, BLAS set-up
 * and the dtype dispatch around the one implementation in
 * core/attn_impl.h (included below for float and for double), and the
 * serial pass on the calling thread; core/attn_split.c cuts a pass into
 * pieces of that serial pass (core/attn_pass.h is what the two share);
 * core/attn_check.c validates requests.
 *
 * A session and a stateless request give bit-identical results because
 * they share the pieces that make the bits: both prepare keys and values
 * with the same prepare_k / prepare_v of core/attn_impl.h at the keys'
 * positions (attn_prepare_kv for a session's cache, view_fill below for
 * attn_forward), and both run the same attn_forward_kv_ws
 * (core/attn_split.c) over the prepared rows. Where preparing would be a
 * plain copy (no bias, no RoPE) the stateless pass reads the input rows in
 * place: the same bits without the copy. 2-byte k or v (attn_forward_half)
 * that need no preparing are read in place by the key-blocked output-only
 * pass, which widens them a block at a time (exactly: every 2-byte value is
 * a float32); otherwise they are widened whole first (widen_kv) and
 * prepared as float32 rows.
 */
#include "attn.h"
#include "attn_fused.h"
#include "attn_pass.h"
#include "attn_run.h"
#include "half.h"
#include "rope.h"
#include "stop.h"
#include "simd512.h"
#include "simd_neon.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__x86_64__) && defined(__GLIBC__)
#define ATTN_HAVE_MVEC 1
/* glibc's libmvec (linked through libm.so's AS_NEEDED clause): 8-lane expf
 * and 4-lane exp for AVX2, within 4 ulp. Used for the softmax exponentials,
 * which a scalar libm call per element would make slower than the gemms. */
__m256 _ZGVdN8v_expf(__m256 x);
__m256d _ZGVdN4v_exp(__m256d x);
#endif

#define ATTN_CAT2(a, b) a##_##b
#define ATTN_CAT(a, b) ATTN_CAT2(a, b)

/* Partial sums / lanes in the hand-vectorised loops (dot's reduction tree
 * is written for exactly 16). */
#define ATTN_CHUNK 16
_Static_assert(ATTN_CHUNK == 16, "dot() reduces 16 partial sums");
/* A half chunk after the whole ones: small heads (d = 8, 24, ...) take one
 * vector step there instead of a scalar loop. */
#define ATTN_HALF (ATTN_CHUNK / 2)
/* Those plain loops ask for the K/V row this many rows ahead (prefetcht0,
 * not the non-temporal hint, which is slower): tuned: docs/benchmarks.md,
 * section "What limits each row". */
#ifndef ATTN_PF_ROWS
#define ATTN_PF_ROWS 16
#endif
/* Target bytes of one tile's score rows, and the tile height bounds. */
#ifndef ATTN_TILE_BYTES
#define ATTN_TILE_BYTES ((size_t)1 << 20)
#endif
#define ATTN_TILE_MIN 32

struct attn_ws *attn_ws_new(void)
{
    return calloc(1, sizeof(struct attn_ws));
}

static void ws_release(struct attn_ws *ws)
{
    for (int i = 0; i < WS_N; i++) {
        free(ws->buf[i]);
        ws->buf[i] = NULL;
        ws->cap[i] = 0;
    }
}

void attn_ws_free(struct attn_ws *ws)
{
    if (!ws)
        return;
    ws_release(ws);
    free(ws);
}

size_t attn_ws_bytes(const struct attn_ws *ws)
{
    size_t t = 0;
    for (int i = 0; ws && i < WS_N; i++)
        t += ws->cap[i];
    return t;
}

/* Region i of ws with at least `need` bytes, or NULL (out of memory). */
void *attn_ws_reserve(struct attn_ws *ws, int i, size_t need)
{
    if (ws->cap[i] >= need && ws->buf[i])
        return ws->buf[i];
    size_t sz;
    if (!core_add(need, 63, &sz))
        return NULL;
    sz &= ~(size_t)63;
    if (sz == 0)
        sz = 64;
    free(ws->buf[i]);
    ws->buf[i] = aligned_alloc(64, sz);
    ws->cap[i] = ws->buf[i] ? sz : 0;
    return ws->buf[i];
}

void attn_ws_set_pool(struct attn_ws *ws, struct attn_pool *pool)
{
    if (ws)
        ws->pool = pool;
}

void attn_ws_set_stop(struct attn_ws *ws, struct attn_stop *stop)
{
    if (ws)
        ws->stop = stop;
}

struct attn_stop *attn_ws_stop(const struct attn_ws *ws)
{
    return ws ? ws->stop : NULL;
}

bool attn_ws_boundary(const struct attn_ws *ws)
{
    return ws && attn_stop_boundary(ws->stop);
}

double attn_default_scale(size_t d_k)
{
    return 1.0 / sqrt((double)d_k);
}

double attn_alibi_slope(size_t i, size_t h)
{
    return exp2(-8.0 * (double)(i + 1) / (double)h);
}

void attn_blas_init(int threads)
{
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}

/* OpenBLAS builds its configuration text in a static buffer on every call
 * (openblas_get_config appends to it), so concurrent callers would garble
 * it: it is read once. */
static char blas_text[256];
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_text_init(void)
{
    const char *c = openblas_get_config();
    snprintf(blas_text, sizeof blas_text, "%s", c && *c ? c : "unknown");
}

const char *attn_blas_config(void)
{
    pthread_once(&blas_once, blas_text_init);
    return blas_text;
}

#if defined(__AVX512F__) && defined(__x86_64__)
/* max of x [n] (-inf when n = 0); *ok = 0 when an entry is not finite
 * (+inf and NaN by compare masks, -inf by the minimum). The generic
 * max_finite in attn_impl.h does the same; this one is explicit 16-lane
 * code because the compiler kept the finiteness flag scalar there, a
 * visible share of a prefill (measured: docs/benchmarks.md, section "What
 * limits each row"). */
static float vmax_finite_f32(const float *x, size_t n, int *ok)
{
    __m512 mx = _mm512_set1_ps(-INFINITY), mn = _mm512_set1_ps(INFINITY);
    __mmask16 bad = 0;
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(x + j);
        mx = _mm512_max_ps(mx, v);
        mn = _mm512_min_ps(mn, v);
        bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(k, x + j);
        mx = _mm512_mask_max_ps(mx, k, mx, v);
        mn = _mm512_mask_min_ps(mn, k, mn, v);
        bad |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    }
    float m = _mm512_reduce_max_ps(mx), lo = _mm512_reduce_min_ps(mn);
    *ok = !bad && m != INFINITY && (n == 0 || lo != -INFINITY);
    return m;
}
#define ATTN_MAX_FINITE_F32 vmax_finite_f32
#endif

/* The scalar form of vexp_shift_f32 / _f64: a row shorter than one vector
 * (a worked example's three keys) takes the correctly rounded libm
 * exponential for every entry. */
static inline double exp_shift_f32(const float *x, float *y, size_t n, float sh)
{
    double sum = 0;
    for (size_t j = 0; j < n; j++) {
        y[j] = expf(x[j] - sh);
        sum += y[j];
    }
    return sum;
}

static inline double exp_shift_f64(const double *x, double *y, size_t n, double sh)
{
    double sum = 0;
    for (size_t j = 0; j < n; j++) {
        y[j] = exp(x[j] - sh);
        sum += y[j];
    }
    return sum;
}

/* x [n] -> y [n] = exp(x - sh) (y may equal x); returns Σ y in double.
 * Every entry of a row goes through the same exponential: a row shorter
 * than a vector the scalar one, a longer row the vector one (its tail in
 * a masked vector), so equal scores of a row give equal weights wherever
 * they sit: a tie stays a tie for argmax and top-k. */
static double vexp_shift_f32(const float *x, float *y, size_t n, float sh)
{
#if defined(__AVX512F__) && defined(__x86_64__)
    if (n < 16)
        return exp_shift_f32(x, y, n, sh);
    __m512 vs512 = _mm512_set1_ps(sh);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 e = _mm512_maskz_mov_ps(
            k, simd_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vs512)));
        _mm512_mask_storeu_ps(y + j, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                   _mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
#elif defined(ATTN_HAVE_MVEC)
    if (n < 8)
        return exp_shift_f32(x, y, n, sh);
    __m256 vs = _mm256_set1_ps(sh);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + j), vs));
        _mm256_storeu_ps(y + j, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    if (j < n) {                        /* the tail: lanes past n masked off */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 e = _mm256_and_ps(_mm256_castsi256_ps(m),
                                 _ZGVdN8v_expf(_mm256_sub_ps(_mm256_maskload_ps(x + j, m), vs)));
        _mm256_maskstore_ps(y + j, m, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(a0, a1));
    return (t[0] + t[1]) + (t[2] + t[3]);
#elif defined(ATTN_NEON)
    return neon_exp_shift_f32(x, y, n, sh);
#else
    return exp_shift_f32(x, y, n, sh);
#endif
}

/* x [n] -> y [n] = exp(x - sh) (y may equal x); returns Σ y. One
 * exponential for every entry of a row, as vexp_shift_f32. */
static double vexp_shift_f64(const double *x, double *y, size_t n, double sh)
{
#ifdef ATTN_HAVE_MVEC
    if (n < 4)
        return exp_shift_f64(x, y, n, sh);
    double sum = 0;
    __m256d vs = _mm256_set1_pd(sh);
    __m256d a0 = _mm256_setzero_pd();
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d e = _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(x + j), vs));
        _mm256_storeu_pd(y + j, e);
        a0 = _mm256_add_pd(a0, e);
    }
    if (j < n) {                        /* the tail, masked as vexp_shift_f32's */
        __m256i m = _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)(n - j)),
                                       _mm256_setr_epi64x(0, 1, 2, 3));
        __m256d e = _ZGVdN4v_exp(_mm256_sub_pd(_mm256_maskload_pd(x + j, m), vs));
        e = _mm256_and_pd(_mm256_castsi256_pd(m), e);
        _mm256_maskstore_pd(y + j, m, e);
        a0 = _mm256_add_pd(a0, e);
    }
    double t[4];
    _mm256_storeu_pd(t, a0);
    sum = (t[0] + t[1]) + (t[2] + t[3]);
    return sum;
#else
    return exp_shift_f64(x, y, n, sh);
#endif
}

/* Output-only passes over the whole key range take the key-blocked path
 * (attn_impl.h flash_rows): tiles of up to ATTN_FLASH_ROWS query rows,
 * ATTN_FLASH_KEYS keys per block. Larger row tiles than the materialising
 * path: gemm packs K and V once per row tile, so the packing cost falls
 * with the tile height, while the [rows][keys] block (1 MiB of float32)
 * stays in L2; wider key blocks re-pack the query tile less often (each
 * gemm call packs its A). Tuned: docs/benchmarks.md, section "What limits
 * each row". Few rows per kv head (decode) keep the plain loops
 * (memory-bound). */
#ifndef ATTN_FLASH_ROWS
#define ATTN_FLASH_ROWS 512
#endif
#ifndef ATTN_FLASH_KEYS
#define ATTN_FLASH_KEYS 512
#endif

static bool attn_flash(const struct attn_request *r, const struct attn_win *w)
{
    size_t R = r->shape.h / r->shape.h_kv * r->shape.n;   /* rows per kv head */
    return r->outputs == ATTN_OUT_OUTPUT && !w->part && R > ATTN_LOOP_ROWS;
}

bool attn_output_blocked(const struct attn_request *r)
{
    struct attn_request o = *r;
    struct attn_win w = {0, r->shape.L, NULL};
    o.outputs = ATTN_OUT_OUTPUT;
    return r->shape.h_kv > 0 && attn_flash(&o, &w);
}

#ifdef ATTN_HAVE_FUSED
/* The fused kernels hold the softcap c in base 2 as a float and divide by
 * it: c·log2 e and its inverse must both be finite floats (c within about
 * [2.1e-39, 2.35e38]; a softcap outside, which the API takes up to
 * FLT_MAX, made every score NaN there). 0: no softcap. */
static bool fused_softcap_ok(double c)
{
    float cap2 = (float)(c * M_LOG2E);
    return c == 0 || (isfinite(cap2) && cap2 > 0 && isfinite(1.0f / cap2));
}
#endif

/* The fused kernel (core/attn_kernel.c) takes the request's scores:
 * float32, plain but for a softcap it can hold (no attention bias, mask or
 * ALiBi; key ranges are per row), and the CPU runs the kernel. */
static bool attn_fused_scores(const struct attn_request *r)
{
#ifdef ATTN_HAVE_FUSED
    return r->params.dtype == ATTN_F32 && !r->attn_bias && !r->mask && !r->params.alibi &&
           r->shape.L <= INT32_MAX && fused_softcap_ok(r->params.softcap) &&
           attn_fused_available();
#else
    (void)r;
    return false;
#endif
}

const char *attn_dtype_kernel(enum attn_dtype dt)
{
    return dt == ATTN_F32 && attn_fused_available() ? attn_kernel_name(attn_kernel_active())
                                                    : "blas";
}

/* The pass goes through the fused kernel: key-blocked, fused scores. */
static bool attn_fused_pass(const struct attn_request *r, const struct attn_win *w)
{
    return attn_flash(r, w) && attn_fused_scores(r);
}

/* Row tiles of the fused pass: at most 4 groups of 48 rows. Small enough
 * that a 1024-row head makes several pieces, so a helper that wakes late
 * still takes its share (with 512-row tiles one core often ran both of two
 * pieces), and large enough that each tile reads K and V from L3 only once
 * per 4 groups; attn_fused_tile_rows picks the size up to this, in whole
 * groups of the kernel, that splits the rows most evenly over two cores
 * (core/attn_kernel.c says why, with the measurements). */
#ifndef ATTN_FUSED_ROWS
#define ATTN_FUSED_ROWS 192
#endif
_Static_assert(ATTN_FUSED_ROWS <= ATTN_FLASH_ROWS, "flash_rows' arrays hold a tile");

/* Rows of one kv head's K or V as a pass reads them (attn_impl.h): base
 * [..][d] in one block (pg NULL), or np pages of 2^sh rows (a paged
 * attn_kv_view) with row j at key j0 + j. */
struct attn_rows {
    const void *base;
    const void *const *pg;
    unsigned sh;
    size_t j0, d, np;
};

/* (attn_impl.h) rows [a, e) of r in one block, in place or copied into buf */
static const float *block_f32(const struct attn_rows *r, size_t a, size_t e, float *buf);

/* src (2-byte, as e) elements [at, at + n) -> dst [n] float32, exactly. */
static void widen_f32(enum attn_elem e, const void *src, size_t at, size_t n, float *dst)
{
    const uint16_t *h = (const uint16_t *)src + at;
    if (e == ATTN_ELEM_F16)
        half_f16_to_f32_n(h, dst, n);
    else
        half_bf16_to_f32_n(h, dst, n);
}

#ifdef ATTN_HAVE_FUSED
static enum attn_fused_elem fused_elem(enum attn_elem e)
{
    return e == ATTN_ELEM_F16 ? ATTN_FUSED_F16 : e == ATTN_ELEM_BF16 ? ATTN_FUSED_BF16
                                                                    : ATTN_FUSED_F32;
}

/* The fused kernel's superblocks of a paged view (attn_fused_keys.span):
 * keys [a, e) of K and V in place where their pages lie side by side in
 * memory, else copied into buf (attn_fused_wide_floats of them). */
struct fused_span {
    const struct attn_rows *k, *v;
    float *buf;
};

static void fused_span(void *ctx, size_t a, size_t e, const float **k, const float **v)
{
    const struct fused_span *f = ctx;
    *k = block_f32(f->k, a, e, f->buf);
    *v = block_f32(f->v, a, e, f->buf + (e - a) * f->k->d);
}

/* flash_keys (attn_impl.h) by the fused kernel (core/attn_kernel.c) when
 * the scores are plain but for a softcap and every row's allowed keys are
 * one exact range (attn_run.h: causal, window without sinks below it,
 * contiguous segments). Sets m, l and the unnormalised O as flash_keys would, and
 * *st; false when the kernel does not apply, or met a score it cannot take
 * (flash_keys then runs and reports it, or finishes exactly a score past
 * the kernel's bound: attn_fused_impl.h's fused_big). S: scratch of
 * attn_fused_scratch_floats (attn_forward_kv_serial); a view of 2-byte
 * rows is widened into ws's WS_WIDE; a paged view's superblocks come
 * through fused_span, with C its copies' scratch. */
static bool fused_keys_f32(const struct attn_run *x, size_t row0, size_t nb, const float *qb,
                           const struct attn_rows *K, const struct attn_rows *V, float *S,
                           struct attn_ws *ws, float *C, float *O, float *m, double *l,
                           enum core_status *st)
{
    const struct attn_request *r = &x->r;
    if (!attn_fused_scores(r))          /* flash_rows runs for key-blocked passes only */
        return false;
    int32_t lo[ATTN_FLASH_ROWS], hi[ATTN_FLASH_ROWS];
    for (size_t t = 0; t < nb; t++) {
        struct attn_keys k;
        attn_run_keys(x, (row0 + t) / r->shape.n, (row0 + t) % r->shape.n, &k);
        if (!k.exact || k.slo < k.shi)
            return false;
        lo[t] = (int32_t)k.lo;
        hi[t] = (int32_t)k.hi;
    }
    float *W = NULL;                    /* the superblocks of a view of 2-byte rows */
    size_t wide = attn_fused_wide_floats(r->shape.d_k, r->shape.d_v, r->shape.L);
    if ((x->k_elem || x->v_elem) && !(W = attn_ws_reserve(ws, WS_WIDE, wide * sizeof(float))))
        return false;                   /* flash_keys reports it */
    *st = CORE_OK;
    struct fused_span span = {K, V, C};
    struct attn_fused_keys keys = {lo, hi, (float)r->params.softcap, r->score_sink, row0,
                                   fused_elem(x->k_elem), fused_elem(x->v_elem), W,
                                   K->pg ? fused_span : NULL, &span, x->stop};
    return attn_fused_rows(qb, nb, r->shape.d_k, (float)r->params.scale, K->base, V->base,
                           r->shape.d_v, &keys, O, m, l, S);
}
#define ATTN_FLASH_FUSED fused_keys_f32
#endif

#define T float
#define SFX f32
#ifdef ATTN_MAX_FINITE_F32
#define ATTN_MAX_FINITE ATTN_MAX_FINITE_F32
#endif
#define ATTN_GEMM cblas_sgemm
#define ATTN_WIDEN widen_f32
#define ATTN_NEXTDOWN(x) nextafterf((x), -INFINITY)
#ifdef ATTN_NEON
#define ATTN_VDOT neon_dot_f32
#define ATTN_VAXPY neon_axpy_f32
#define ATTN_VAXPY4 neon_axpy4_f32
#endif
#include "attn_impl.h"
#undef T
#undef SFX
#undef ATTN_MAX_FINITE
#undef ATTN_FLASH_FUSED
#undef ATTN_VDOT
#undef ATTN_VAXPY
#undef ATTN_VAXPY4
#undef ATTN_GEMM
#undef ATTN_WIDEN
#undef ATTN_NEXTDOWN

#define T double
#define SFX f64
#define ATTN_GEMM cblas_dgemm
#define ATTN_NEXTDOWN(x) nextafter((x), -INFINITY)
#include "attn_impl.h"
#undef T
#undef SFX
#undef ATTN_GEMM
#undef ATTN_NEXTDOWN

/* ---- the passes ------------------------------------------------------- */

void attn_prepare_kv(const struct attn_shape *s, const struct attn_params *p,
                     const struct attn_inputs *in, size_t m, int64_t pos0,
                     void *const *k_out, void *const *v_out)
{
    if (p->dtype == ATTN_F32) {
        prepare_k_f32(s, p, in, m, NULL, 0, pos0, k_out);
        prepare_v_f32(s, in, m, v_out);
    } else {
        prepare_k_f64(s, p, in, m, NULL, 0, pos0, k_out);
        prepare_v_f64(s, in, m, v_out);
    }
}

/* x for r with its scratch malloc'd into *m (free it after x's use). */
static enum core_status run_alloc(const struct attn_request *r, struct attn_run *x, void **m)
{
    size_t bytes;
    *m = NULL;
    if (!attn_run_bytes(r, &bytes))
        return CORE_ELIMIT;
    *m = bytes ? aligned_alloc(16, (bytes + 15) & ~(size_t)15) : NULL;
    if (bytes && !*m)
        return CORE_ENOMEM;
    attn_run_init(x, r, *m);
    return CORE_OK;
}

enum core_status attn_prepare_q(const struct attn_request *r, const struct attn_inputs *in,
                                size_t row0, size_t nb, void *qb)
{
    struct attn_run x;
    void *m;
    enum core_status st = run_alloc(r, &x, &m);
    if (st != CORE_OK)
        return st;
    if (r->params.dtype == ATTN_F32)
        prep_q_f32(&x, in, row0, nb, qb);
    else
        prep_q_f64(&x, in, row0, nb, qb);
    free(m);
    return CORE_OK;
}

struct attn_pool *attn_ws_pool(const struct attn_ws *ws)
{
    return ws ? ws->pool : NULL;
}

/* Query rows per tile: about ATTN_TILE_BYTES of score rows, within bounds;
 * ATTN_FLASH_ROWS on the key-blocked path, ATTN_FUSED_ROWS on the fused one. */
size_t attn_tile_rows(const struct attn_request *r, const struct attn_win *w, size_t R, size_t L,
                      size_t esz)
{
    if (attn_fused_pass(r, w))
        return attn_fused_tile_rows(R, r->shape.h_kv, ATTN_FUSED_ROWS, attn_fused_group_rows());
    if (attn_flash(r, w)) {
        /* a window's tile reads its rows' span of keys: left + tile rows */
        size_t b = ATTN_FLASH_ROWS;
        if (r->window.on && r->window.left >= 0 && (uint64_t)r->window.left < 4 * b)
            b = r->window.left / 4 < 64 ? 64 : ((size_t)r->window.left / 4 + 15) / 16 * 16;
        return R < b ? R : b;
    }
    size_t b = ATTN_TILE_BYTES / (L * esz);
    if (b < ATTN_TILE_MIN)
        b = ATTN_TILE_MIN;
    if (b > ATTN_TILE_MAX)
        b = ATTN_TILE_MAX;
    return b < R ? b : R;
}

/* Requested result buffers must be present. */
static bool result_ok(const struct attn_request *r, const struct attn_result *out)
{
    return out && (!(r->outputs & ATTN_OUT_SCORES) || out->scores) &&
           (!(r->outputs & ATTN_OUT_WEIGHTS) || out->weights) &&
           (!(r->outputs & ATTN_OUT_OUTPUT) || out->output);
}

/* forward_kv of rows [rb, re) against window w, on a workspace that
 * exists, on the calling thread. */
enum core_status attn_forward_kv_serial(const struct attn_run *x, const struct attn_inputs *in,
                                        const struct attn_kv_view *kv, struct attn_result *out,
                                        struct attn_ws *ws, size_t rb, size_t re,
                                        const struct attn_win *w)
{
    const struct attn_request *r = &x->r;
    const struct attn_shape *s = &r->shape;
    size_t esz = attn_dtype_size(r->params.dtype);
    size_t R = s->h / s->h_kv * s->n;
    size_t B = attn_tile_rows(r, w, R, w->kw, esz);
    /* qb [B][d_k] rounded to 64 bytes, then pb [B][L] when weights are not
     * kept but the output is needed. Bounded by attn_check (TILE_MAX·(L+d_k)). */
    size_t qb_bytes = (B * s->d_k * esz + 63) & ~(size_t)63;
    bool need_pb = !(r->outputs & ATTN_OUT_WEIGHTS) && (r->outputs & ATTN_OUT_OUTPUT);
    size_t pb_keys = attn_flash(r, w) && w->kw > ATTN_FLASH_KEYS ? ATTN_FLASH_KEYS : w->kw;
    size_t pb_bytes = need_pb ? B * pb_keys * esz : 0;
#ifdef ATTN_HAVE_FUSED
    /* the larger of the two: a score the fused kernel cannot take sends the
     * tile on to flash_keys, which needs its [B][keys] block */
    size_t fused = attn_fused_scratch_floats(B, s->d_k, s->d_v) * sizeof(float);
    if (attn_fused_pass(r, w) && pb_bytes < fused)
        pb_bytes = fused;
#endif
    size_t bytes = qb_bytes + pb_bytes;
    char *blk = attn_ws_reserve(ws, WS_BLK, bytes);
    if (!blk)
        return CORE_ENOMEM;
    void *pb = need_pb ? blk + qb_bytes : NULL;
    /* a paged view read by the key-blocked pass: its pages in place, one
     * block of keys (or the fused kernel's superblock) copied where they do
     * not lie side by side, so the scratch does not grow with L */
    void *cb = NULL;
    if (kv->page_rows && attn_flash(r, w)) {
        size_t keys = w->kw < ATTN_FLASH_KEYS ? w->kw : ATTN_FLASH_KEYS;
        size_t cbytes = keys * (s->d_k + s->d_v) * esz;
#ifdef ATTN_HAVE_FUSED
        size_t sb = attn_fused_wide_floats(s->d_k, s->d_v, w->kw) * sizeof(float);
        if (attn_fused_pass(r, w) && cbytes < sb)
            cbytes = sb;
#endif
        if (!(cb = attn_ws_reserve(ws, WS_PAGE, cbytes)))
            return CORE_ENOMEM;
    }
    out->n_empty = 0;
    if (r->params.dtype == ATTN_F32)
        return forward_kv_f32(x, in, kv, out, rb, re, w, B, (float *)(void *)blk, pb, cb, ws);
    return forward_kv_f64(x, in, kv, out, rb, re, w, B, (double *)(void *)blk, pb, cb, ws);
}

/* r's run (attn_run.h) with its scratch in ws. */
static enum core_status run_init(const struct attn_request *r, struct attn_ws *ws,
                                 struct attn_run *x)
{
    size_t bytes;
    if (!attn_run_bytes(r, &bytes))
        return CORE_ELIMIT;
    void *m = bytes ? attn_ws_reserve(ws, WS_RUN, bytes) : NULL;
    if (bytes && !m)
        return CORE_ENOMEM;
    attn_run_init(x, r, m);
    x->stop = attn_ws_stop(ws);
    return CORE_OK;
}

static bool kv_view_ok(const struct attn_request *r, const struct attn_kv_view *kv)
{
    if (!kv || !kv->k || !kv->v)
        return false;
    size_t heads = r->shape.h_kv * (r->shape.B ? r->shape.B : 1), n = heads;
    if (kv->page_rows) {            /* unbatched, pages of 2^k rows covering L */
        size_t pr = kv->page_rows;
        if ((pr & (pr - 1)) || r->shape.B > 1 || kv->pages > SIZE_MAX / pr ||
            kv->pages * pr < r->shape.L || !core_mul(heads, kv->pages, &n))
            return false;
    }
    for (size_t g = 0; g < n; g++)
        if (!kv->k[g] || !kv->v[g])
            return false;
    return true;
}

/* Checks shared by the forward_kv entry points: request, q and its bias,
 * the view. */
static enum core_status check_kv_call(const struct attn_request *r,
                                      const struct attn_inputs *in,
                                      const struct attn_kv_view *kv)
{
    enum core_status st = attn_check(r);
    if (st != CORE_OK)
        return st;
    if (!in || !in->q)
        return CORE_EINVAL;
    if (in->bias_q && in->bias_q_heads != 1 && in->bias_q_heads != r->shape.h)
        return CORE_ESHAPE;
    return kv_view_ok(r, kv) ? CORE_OK : CORE_EINVAL;
}

/* The run of r, then attn_forward_kv_ws, on ws or a temporary workspace. */
static enum core_status forward_kv_any(const struct attn_request *r,
                                       const struct attn_inputs *in,
                                       const struct attn_kv_view *kv,
                                       struct attn_result *out, struct attn_ws *ws,
                                       size_t rb, size_t re, const struct attn_win *w)
{
    struct attn_ws tmp = {0};
    struct attn_ws *use = ws ? ws : &tmp;
    struct attn_run x;
    enum core_status st = run_init(r, use, &x);
    if (st == CORE_OK)
        st = attn_forward_kv_ws(&x, in, kv, out, use, rb, re, w);
    if (!ws)
        ws_release(&tmp);
    return st;
}

static size_t all_rows(const struct attn_request *r)
{
    return r->shape.h * (r->shape.B ? r->shape.B : 1) * r->shape.n;
}

enum core_status attn_forward_kv_rows(const struct attn_request *r,
                                      const struct attn_inputs *in,
                                      const struct attn_kv_view *kv,
                                      struct attn_result *out, struct attn_ws *ws,
                                      size_t row_begin, size_t row_end)
{
    enum core_status st = check_kv_call(r, in, kv);
    if (st != CORE_OK)
        return st;
    if (row_begin >= row_end || row_end > all_rows(r) || !result_ok(r, out))
        return CORE_EINVAL;
    struct attn_win w = {0, r->shape.L, NULL};
    return forward_kv_any(r, in, kv, out, ws, row_begin, row_end, &w);
}

enum core_status attn_forward_kv_keys(const struct attn_request *r,
                                      const struct attn_inputs *in,
                                      const struct attn_kv_view *kv,
                                      struct attn_partial *part, struct attn_ws *ws,
                                      size_t key_begin, size_t key_end)
{
    enum core_status st = check_kv_call(r, in, kv);
    if (st != CORE_OK)
        return st;
    if (r->outputs != ATTN_OUT_OUTPUT || key_begin >= key_end || key_end > r->shape.L ||
        !part || !part->o || !part->m || !part->l)
        return CORE_EINVAL;
    struct attn_win w = {key_begin, key_end - key_begin, part};
    struct attn_result none = {0};
    return forward_kv_any(r, in, kv, &none, ws, 0, all_rows(r), &w);
}

enum core_status attn_combine_run(const struct attn_run *x, const struct attn_partial *parts,
                                  size_t np, struct attn_result *out)
{
    if (x->r.params.dtype == ATTN_F32)
        return combine_f32(x, parts, np, out);
    return combine_f64(x, parts, np, out);
}

enum core_status attn_combine(const struct attn_request *r,
                              const struct attn_partial *parts, size_t np,
                              struct attn_result *out)
{
    enum core_status st = attn_check(r);
    if (st != CORE_OK)
        return st;
    if (!parts || !np || !out || !out->output || r->outputs != ATTN_OUT_OUTPUT)
        return CORE_EINVAL;
    for (size_t p = 0; p < np; p++)
        if (!parts[p].o || !parts[p].m || !parts[p].l)
            return CORE_EINVAL;
    /* combine reads no positions: the run needs no scratch but the
     * flattening (segments are resolved into scratch, so drop them) */
    struct attn_request f = *r;
    f.seg_q = f.seg_k = NULL;
    f.pos_q = f.pos_k = NULL;
    f.window.on = false;
    struct attn_run x;
    attn_run_init(&x, &f, NULL);
    return attn_combine_run(&x, parts, np, out);
}

enum core_status attn_forward_kv(const struct attn_request *r,
                                 const struct attn_inputs *in,
                                 const struct attn_kv_view *kv,
                                 struct attn_result *out, struct attn_ws *ws)
{
    if (!r)
        return CORE_EINVAL;
    return attn_forward_kv_rows(r, in, kv, out, ws, 0, all_rows(r));
}

/* in->k (bit 1) or in->v (bit 2) is the pass's own scratch: prepared in place. */
enum { OWN_K = 1, OWN_V = 2 };

/* Bytes of stateless prepared keys/values of x (0: the inputs are used as
 * they are, or prepared in place: own); false on overflow. */
static bool view_bytes(const struct attn_run *x, const struct attn_inputs *in, unsigned own,
                       size_t *kvb)
{
    const struct attn_shape *s = &x->r.shape;   /* flattened: B·h_kv kv heads */
    size_t esz = attn_dtype_size(x->r.params.dtype);
    bool prep_k = (in->bias_k || x->r.params.rope) && !(own & OWN_K);
    bool prep_v = in->bias_v && !(own & OWN_V);
    size_t kb = s->L * s->d_k * esz, vb = s->L * s->d_v * esz;  /* per head, checked */
    *kvb = 0;
    return !((prep_k && !core_mul(kb, s->h_kv, kvb)) ||
             (prep_v && !core_add(*kvb, s->h_kv * vb, kvb)));
}

/* Stateless keys and values of r into store (view_bytes of them) at the
 * keys' resolved positions, or into the input rows themselves when own says
 * they are the pass's scratch, or the input rows where preparing is a plain
 * copy: kp, vp [B·h_kv]. */
static void view_fill(const struct attn_request *r, const struct attn_run *x,
                      const struct attn_inputs *in, unsigned own, char *store, void **kp,
                      void **vp)
{
    const struct attn_shape *s = &x->r.shape;
    const struct attn_params *p = &r->params;
    size_t esz = attn_dtype_size(p->dtype);
    bool prep_k = in->bias_k || p->rope, prep_v = in->bias_v != NULL;
    bool sk = prep_k && !(own & OWN_K), sv = prep_v && !(own & OWN_V);   /* into store */
    size_t kb = s->L * s->d_k * esz, vb = s->L * s->d_v * esz;
    /* rows read in place: as the view holds them (2-byte: x->k_elem, v_elem) */
    size_t ki = x->k_elem ? s->L * s->d_k * 2 : kb, vi = x->v_elem ? s->L * s->d_v * 2 : vb;
    for (size_t g = 0; g < s->h_kv; g++) {
        kp[g] = sk ? store + g * kb : (char *)(uintptr_t)in->k + g * ki;
        vp[g] = sv ? store + (sk ? s->h_kv * kb : 0) + g * vb
                   : (char *)(uintptr_t)in->v + g * vi;
    }
    /* key positions: one row per batch element, or the same for all */
    size_t stride = x->pk_b == 1 ? 0 : s->L;
    if (p->dtype == ATTN_F32) {
        if (prep_k)
            prepare_k_f32(&r->shape, p, in, s->L, x->pk, stride, 0, kp);
        if (prep_v)
            prepare_v_f32(&r->shape, in, s->L, vp);
    } else {
        if (prep_k)
            prepare_k_f64(&r->shape, p, in, s->L, x->pk, stride, 0, kp);
        if (prep_v)
            prepare_v_f64(&r->shape, in, s->L, vp);
    }
}

enum core_status attn_prepare_view(const struct attn_request *r, const struct attn_inputs *in,
                                   void **kp, void **vp, void **store)
{
    size_t kvb;
    struct attn_run x;
    void *m;
    *store = NULL;
    enum core_status st = run_alloc(r, &x, &m);
    if (st != CORE_OK)
        return st;
    st = view_bytes(&x, in, 0, &kvb) ? CORE_OK : CORE_ELIMIT;
    char *kv = st == CORE_OK && kvb ? malloc(kvb) : NULL;
    if (st == CORE_OK && kvb && !kv)
        st = CORE_ENOMEM;
    if (st == CORE_OK)
        view_fill(r, &x, in, 0, kv, kp, vp);
    free(m);
    *store = kv;
    return st;
}

/* The inputs' 2-byte k and v that the pass x will not read in place (it
 * reads them so when x->k_elem / v_elem say) widened whole into WS_HALF
 * (where they are then prepared in place): *wi = *in with those arrays
 * replaced. */
static enum core_status widen_kv(const struct attn_run *x, const struct attn_inputs *in,
                                 const struct attn_elems *e, struct attn_ws *ws,
                                 struct attn_inputs *wi)
{
    const struct attn_shape *s = &x->r.shape;
    bool wk = e->k && !x->k_elem, wv = e->v && !x->v_elem;
    size_t nk = 0, nv = 0, bytes;
    *wi = *in;
    if (!wk && !wv)
        return CORE_OK;
    if ((wk && !core_mul3(s->h_kv, s->L, s->d_k, &nk)) ||
        (wv && !core_mul3(s->h_kv, s->L, s->d_v, &nv)) || !core_add(nk, nv, &bytes) ||
        !core_mul(bytes, sizeof(float), &bytes))
        return CORE_ELIMIT;
    float *f = attn_ws_reserve(ws, WS_HALF, bytes);
    if (!f)
        return CORE_ENOMEM;
    if (wk) {
        widen_f32(e->k, in->k, 0, nk, f);
        wi->k = f;
    }
    if (wv) {
        widen_f32(e->v, in->v, 0, nv, f + nk);
        wi->v = f + nk;
    }
    return CORE_OK;
}

/* Stateless pass on an existing workspace: prepare k, v into WS_KV (or use
 * the input rows where preparing is a plain copy) at the keys' positions,
 * then attn_forward_kv_ws. e: what q, k, v hold (attn_forward_half);
 * 2-byte k or v rows that need no preparing are read in place by the
 * key-blocked output-only pass, and widened whole first otherwise. */
static enum core_status forward_ws(const struct attn_request *r,
                                   const struct attn_inputs *in, const struct attn_elems *e,
                                   struct attn_result *out, struct attn_ws *ws)
{
    struct attn_run x;
    enum core_status st = run_init(r, ws, &x);
    if (st != CORE_OK)
        return st;
    const struct attn_shape *s = &x.r.shape;    /* flattened: B·h_kv kv heads */
    struct attn_win w = {0, s->L, NULL};
    struct attn_inputs wi;
    bool flash = attn_flash(&x.r, &w);
    x.q_elem = e->q;
    x.k_elem = flash && !in->bias_k && !r->params.rope ? e->k : ATTN_ELEM_F32;
    x.v_elem = flash && !in->bias_v ? e->v : ATTN_ELEM_F32;
    st = widen_kv(&x, in, e, ws, &wi);
    if (st != CORE_OK)
        return st;
    in = &wi;
    size_t kvb;
    unsigned own = (e->k && !x.k_elem ? OWN_K : 0) | (e->v && !x.v_elem ? OWN_V : 0);
    if (!view_bytes(&x, in, own, &kvb))
        return CORE_ELIMIT;
    char *store = kvb ? attn_ws_reserve(ws, WS_KV, kvb) : NULL;
    void **ptr = attn_ws_reserve(ws, WS_PTR, 2 * s->h_kv * sizeof(void *));
    if ((kvb && !store) || !ptr)
        return CORE_ENOMEM;
    void **kp = ptr, **vp = ptr + s->h_kv;
    view_fill(r, &x, in, own, store, kp, vp);
    struct attn_kv_view kv = {.k = (const void *const *)kp, .v = (const void *const *)vp};
    return attn_forward_kv_ws(&x, in, &kv, out, ws, 0, s->h * s->n, &w);
}

enum core_status attn_forward_half(const struct attn_request *r,
                                   const struct attn_inputs *in, const struct attn_elems *e,
                                   struct attn_result *out, struct attn_ws *ws)
{
    enum core_status st = attn_check(r);
    if (st == CORE_OK)
        st = attn_check_inputs(r, in);
    if (st != CORE_OK)
        return st;
    if (!result_ok(r, out) || !e || e->q > ATTN_ELEM_BF16 || e->k > ATTN_ELEM_BF16 ||
        e->v > ATTN_ELEM_BF16 || ((e->q || e->k || e->v) && r->params.dtype != ATTN_F32))
        return CORE_EINVAL;
    if (ws)
        return forward_ws(r, in, e, out, ws);
    struct attn_ws tmp = {0};
    st = forward_ws(r, in, e, out, &tmp);
    ws_release(&tmp);
    return st;
}

enum core_status attn_forward(const struct attn_request *r,
                              const struct attn_inputs *in,
                              struct attn_result *out, struct attn_ws *ws)
{
    static const struct attn_elems f32 = {ATTN_ELEM_F32, ATTN_ELEM_F32, ATTN_ELEM_F32};
    return attn_forward_half(r, in, &f32, out, ws);
}
