/*
 * core/attn.h — scaled dot-product attention on plain arrays.
 *
 * One forward pass covers every variant the API offers: grouped-query heads,
 * q/k/v bias vectors, additive score bias with -inf entries, boolean masks,
 * causal masks (bottom-right or top-left), ALiBi, RoPE, explicit scale, and
 * the standard / softmax1 / sink softmax. float32 and float64 share one
 * implementation. No HTTP, no JSON; cblas.h is included only in core/.
 *
 * The pass is split so that a session's KV cache and a stateless request run
 * the very same code:
 *   attn_prepare_kv   raw k, v rows -> stored rows (bias added, RoPE applied
 *                     at their positions)
 *   attn_forward_kv   raw q against prepared k, v (bias + RoPE on q here)
 *   attn_forward      the stateless request: its k, v rows prepared into
 *                     scratch by the code attn_prepare_kv runs (read in
 *                     place where that would be a plain copy), then the
 *                     pass attn_forward_kv runs (core/attn.c says how)
 *
 * Positions: keys sit at 0..L-1 and queries at
 * L-n..L-1 (bottom-right, also when causal is off) or 0..n-1 with
 * ATTN_CAUSAL_TOP_LEFT, unless pos_q / pos_k give them; with segments the
 * defaults count within each segment. The same positions drive the causal
 * mask (a query at p attends keys at positions <= p), the window, RoPE and
 * ALiBi. Per head, query row i, key j the order of operations is: bias
 * vectors, RoPE, scale·q·k, softcap, + attn_bias − ALiBi, allowed = mask ∧
 * causal ∧ window ∧ same segment, the softmax variant, Σ p·v.
 *
 * Batches (shape.B > 1) are B independent passes in one call; the rows of
 * every result and of attn_forward_kv_rows count over B·h·n, a kv view
 * holds B·h_kv heads, and one large batch splits over the pool like one
 * large pass. The output comes from one algorithm whatever else is
 * returned (so its bits do not depend on `outputs`, the pool, or a
 * session's cache versus the stateless pass).
 */
#ifndef ATTND_CORE_ATTN_H
#define ATTND_CORE_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"
#include "status.h"
#include "tensor.h"

enum attn_softmax {
    ATTN_SOFTMAX_STANDARD = 0,  /* exp(s) / sum exp(s) */
    ATTN_SOFTMAX_ONE,           /* exp(s) / (1 + sum exp(s)) */
    ATTN_SOFTMAX_SINK,          /* exp(s) / (exp(sink) + sum exp(s)) */
};

enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_BOTTOM_RIGHT,   /* query i at position L-n+i */
    ATTN_CAUSAL_TOP_LEFT,       /* query i at position i (PyTorch is_causal) */
};

enum attn_rope_pairs {
    ATTN_ROPE_INTERLEAVED = 0,  /* dims (2i, 2i+1) */
    ATTN_ROPE_HALF,             /* dims (i, i + d/2) */
};

/* RoPE frequency scalings. */
enum attn_rope_scaling_type {
    ATTN_ROPE_SCALING_NONE = 0,
    ATTN_ROPE_SCALING_LINEAR,       /* f_i / factor */
    ATTN_ROPE_SCALING_NTK,          /* base' = base * factor^(r/(r-2)) */
    ATTN_ROPE_SCALING_LLAMA3,       /* Llama 3.1's wavelength bands */
    ATTN_ROPE_SCALING_YARN,         /* YaRN ramp + attention factor */
};

struct attn_rope_scaling {
    enum attn_rope_scaling_type type;
    double factor;                  /* every type but NONE; > 0 */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3; > low_freq_factor */
    double original_max_position;   /* llama3, yarn; > 0 */
    double beta_fast, beta_slow;    /* yarn (the caller fills the defaults 32, 1) */
    double attention_factor;        /* yarn; 0 = 0.1 ln(factor) + 1 */
    bool no_truncate;               /* yarn: the correction range is not rounded
                                       (HF "truncate": false, gpt-oss); false =
                                       floor(low), ceil(high) as HF's default */
};

/* attn_params.rope_dims of a rotary embedding that rotates no dims. */
#define ATTN_ROPE_DIMS_ZERO ((size_t)-1)

/* Sliding window with attention sinks:
 * key j is allowed when P_q(i) - left <= P_k(j) <= P_q(i) + right (a
 * negative side is unbounded), or when P_k(j) < sinks. */
struct attn_window {
    bool on;
    int64_t left, right;            /* < 0 = unbounded side */
    int64_t sinks;                  /* >= 0 */
};

enum attn_empty_rows {
    ATTN_EMPTY_ZERO = 0,        /* weights 0, output 0, row flagged */
    ATTN_EMPTY_ERROR,           /* CORE_EEMPTYROW */
};

/* Bits of attn_request.outputs. */
enum {
    ATTN_OUT_SCORES = 1u << 0,
    ATTN_OUT_WEIGHTS = 1u << 1,
    ATTN_OUT_OUTPUT = 1u << 2,
    ATTN_OUT_ALL = 7u,
};

/* Dimensions of one pass. */
struct attn_shape {
    size_t h;       /* query heads (1 for a 2-D q) */
    size_t h_kv;    /* key/value heads; h % h_kv == 0 */
    size_t n;       /* query rows per head */
    size_t L;       /* key/value rows per head */
    size_t d_k;     /* query/key width */
    size_t d_v;     /* value width */
    size_t B;       /* batch elements; 0 or 1 = no batch. Arrays hold B
                       consecutive elements: q [B][h][n][d_k],
                       k [B][h_kv][L][d_k], v [B][h_kv][L][d_v], outputs
                       [B][h][n][..], empty [B][h][n] */
};

/* What stays fixed for a session (and is per request when stateless). */
struct attn_params {
    enum attn_dtype dtype;          /* element type of every array */
    double scale;                   /* > 0, already resolved (1/sqrt(d_k) default) */
    enum attn_softmax softmax;
    double sink_logit;              /* ATTN_SOFTMAX_SINK only */
    bool rope;                      /* rotate q and k after bias */
    double rope_base;               /* > 0, typically 10000 */
    enum attn_rope_pairs rope_pairs;
    bool alibi;                     /* add -slope_h * |pos_q - pos_k| */
    const double *alibi_slopes;     /* [h], or NULL for 2^(-8(i+1)/h) */
    double softcap;                 /* c > 0: s = c·tanh(s/c) (step 5); 0 = off */
    const double *sink_logits;      /* [h] per query head (ATTN_SOFTMAX_SINK),
                                       or NULL: sink_logit for every head; an
                                       entry may be -inf (no sink: standard) */
    size_t rope_dims;               /* rotate the first r dims (even); 0 = d_k,
                                       ATTN_ROPE_DIMS_ZERO = none (dims 0) */
    struct attn_rope_scaling rope_scaling;
};

/* Raw (unbiased, unrotated) input arrays, all of params.dtype, borrowed. */
struct attn_inputs {
    const void *q;                  /* [h][n][d_k] */
    const void *k;                  /* [h_kv][L][d_k] */
    const void *v;                  /* [h_kv][L][d_v] */
    const void *bias_q;             /* [bias_q_heads][d_k] or NULL */
    const void *bias_k;             /* [bias_k_heads][d_k] or NULL */
    const void *bias_v;             /* [bias_v_heads][d_v] or NULL */
    size_t bias_q_heads;            /* 1 (shared) or h */
    size_t bias_k_heads;            /* 1 (shared) or h_kv */
    size_t bias_v_heads;            /* 1 (shared) or h_kv */
};

struct attn_score_sink;

/* Per-pass options that are not data arrays. */
struct attn_request {
    struct attn_shape shape;
    struct attn_params params;
    enum attn_causal causal;
    enum attn_empty_rows empty_rows;
    const void *attn_bias;          /* [attn_bias_heads][n][L] of dtype, -inf allowed, or NULL */
    size_t attn_bias_heads;         /* 1 (every head), h or B·h */
    const uint8_t *mask;            /* [mask_heads][n][L], nonzero = may attend, or NULL */
    size_t mask_heads;              /* 1 (every head), h or B·h */
    unsigned outputs;               /* ATTN_OUT_* bits, at least one */
    /* Explicit positions, integers >= 0, or NULL
     * for the defaults: [pos_q_batches][n], [pos_k_batches][L], each count
     * 1 (every batch element) or B. */
    const int64_t *pos_q;
    size_t pos_q_batches;
    const int64_t *pos_k;
    size_t pos_k_batches;
    /* Packed sequences: query i may attend key j only when seg_q[i] ==
     * seg_k[j]; [seg_batches][n] / [seg_batches][L] (both or neither),
     * seg_batches 1 or B. Default positions then count within a segment. */
    const int64_t *seg_q;
    const int64_t *seg_k;
    size_t seg_batches;
    struct attn_window window;
    /* attn_bias_heads / mask_heads may be 1, h or B·h; bias_q_heads 1 or h,
     * bias_k/v_heads 1 or h_kv, the same for every batch element. */
    const struct attn_score_sink *score_sink;   /* see below; NULL: none */
};

/*
 * A reader of the scores of the key-blocked output-only pass (the pass
 * attn_output_blocked says r takes), e.g. core/attn_extras.c's top-k: it
 * sees every block of scores once, as the pass makes them, and never makes
 * the pass store n·L of them. Other passes do not call it. Rows are global
 * (head·n + i); a pass calls a row's feeds in increasing key order, then
 * its done, from the thread that runs the row. Calls:
 *   feed   scores of rows [row0, row0+rows) against keys [k0, k0+kw):
 *          entry (t, j) at s[t·ts + j·js], of the request's dtype. With lo
 *          NULL they are the final scores, masked keys -inf. With lo, hi
 *          (float32 only; the fused kernels) they are raw base-2 scores,
 *          scale·log2(e)·q·k before any softcap, and row t sees the keys
 *          [lo[t], hi[t]) only.
 *   reset  forget what rows [row0, row0+rows) were fed (the pass starts
 *          them over on another path)
 *   done   row's sum l = Σ exp(s - M) over its allowed keys, M its largest
 *          fed score (0 when it has none); base2: its feeds were raw
 *          base-2 scores
 */
struct attn_score_sink {
    void *ctx;
    void (*feed)(void *ctx, size_t row0, size_t rows, size_t k0, size_t kw, const void *s,
                 size_t ts, size_t js, const int32_t *lo, const int32_t *hi);
    void (*reset)(void *ctx, size_t row0, size_t rows);
    void (*done)(void *ctx, size_t row, double l, bool base2);
};

/* True when the output-only pass of r (r->outputs = ATTN_OUT_OUTPUT, all
 * of r's rows or any part of them) is key-blocked and calls
 * r->score_sink. */
bool attn_output_blocked(const struct attn_request *r);

/*
 * Caller-owned result buffers, each NULL unless its ATTN_OUT_* bit is set.
 * Masked scores are written as -INFINITY (the API prints them as null); every
 * other number written is finite.
 */
struct attn_result {
    void *scores;                   /* [h][n][L] final s_ij: scale, attn_bias, ALiBi */
    void *weights;                  /* [h][n][L] */
    void *output;                   /* [h][n][d_v] */
    uint8_t *empty;                 /* [h][n] set to 1 for rows with no allowed key; may be NULL */
    size_t n_empty;                 /* out: how many (head,row) pairs were empty */
};

/* Prepared keys and values per kv head (e.g. a session's cache). Paged
 * (page_rows > 0, a power of two; unbatched passes of attn_forward_kv,
 * _rows and _keys only): k and v hold [h_kv][pages] page pointers, and row
 * j of head g is row j % page_rows of page g·pages + j / page_rows. Pages
 * are read in place, pages that lie side by side in memory as one block;
 * where a path needs a block of keys in one piece (the key-blocked pass's
 * blocks, the fused kernel's superblocks) and its pages lie apart, that
 * block alone is copied into scratch, and gemm tiles (scores, weights)
 * copy their rows once per kv head. The bits are those of the same rows
 * in one block. */
struct attn_kv_view {
    const void *const *k;           /* [h_kv] pointers, each [L][d_k] */
    const void *const *v;           /* [h_kv] pointers, each [L][d_v] */
    size_t page_rows;               /* 0: whole heads */
    size_t pages;                   /* pages per head (paged) */
};

/* Reusable scratch memory (one per worker thread); grows, never shrinks
 * below what the largest pass needed. Not thread-safe: one user at a time. */
struct attn_ws;
struct attn_ws *attn_ws_new(void);
void attn_ws_free(struct attn_ws *ws);
size_t attn_ws_bytes(const struct attn_ws *ws);

/* Attach (or with NULL detach) a helper pool (core/pool.h); the pool must
 * outlive the use. */
void attn_ws_set_pool(struct attn_ws *ws, struct attn_pool *pool);

/* Attach (or with NULL detach) an early stop (core/stop.h): every pass on ws
 * then calls attn_ws_boundary before each piece (a tile of query rows, a
 * key window) and, once the stop is due, returns CORE_ESTOPPED at that
 * boundary, having written only into its result buffers and ws.
 * attn_ws_boundary: the stop's pause, then whether it is due. */
struct attn_stop;
void attn_ws_set_stop(struct attn_ws *ws, struct attn_stop *stop);
struct attn_stop *attn_ws_stop(const struct attn_ws *ws);
bool attn_ws_boundary(const struct attn_ws *ws);

/* Resolve the default scale: 1/sqrt(d_k). */
double attn_default_scale(size_t d_k);

/* Standard ALiBi slope of head i of h: 2^(-8(i+1)/h). */
double attn_alibi_slope(size_t i, size_t h);

/*
 * BLAS threading. The server
 * calls attn_blas_init(1) once before starting workers, so every worker runs
 * single-threaded BLAS; nothing else in core/ changes the thread count.
 * attn_blas_config() is openblas_get_config()'s text, read once (for
 * /v1/info; any thread may call it).
 */
void attn_blas_init(int threads);
const char *attn_blas_config(void);

/* What computes the output-only passes with plain scores (no bias, mask or
 * ALiBi) of dtype dt: the fused kernel's name ("avx512", "avx2") or
 * "blas" (OpenBLAS gemm calls and the plain loops). */
const char *attn_dtype_kernel(enum attn_dtype dt);

/*
 * Validate a request before anything is allocated: non-zero dimensions,
 * h % h_kv == 0, head counts of biases/masks, rotated dims even and <= d_k,
 * the RoPE scaling's parameters, positive finite scale/base, finite sinks,
 * softcap >= 0, window sinks >= 0, batch counts of positions/segments 1 or
 * B, positions >= 0, outputs non-empty, and every element count (inputs and
 * outputs, times B) free of overflow. Of the arrays it reads only the
 * positions (and the per-head sinks / slopes).
 * CORE_ESHAPE: a zero dimension or a head count that does not fit;
 * CORE_ELIMIT: a byte count overflows, or L, n, d_k, d_v or h exceed
 * INT_MAX (BLAS takes int); CORE_EINVAL: a bad option value (with float32,
 * scale and sink_logit must also be finite as float).
 */
enum core_status attn_check(const struct attn_request *r);

/*
 * The part of validation that needs the inputs: q, k, v present, each bias
 * head count 1 (shared) or h (q) / h_kv (k, v). CORE_ESHAPE otherwise.
 * attn_forward calls both checks; attn_forward_kv checks q and bias_q only
 * (k, v come from the view).
 */
enum core_status attn_check_inputs(const struct attn_request *r,
                                   const struct attn_inputs *in);

/*
 * Prepare m rows of keys and values for storage.
 * k_in [h_kv][m][d_k], v_in [h_kv][m][d_v] (in->k, in->v; in->bias_k/v used)
 *   -> k_out[g] [m][d_k], v_out[g] [m][d_v] for g < h_kv
 * Row r is at position pos0 + r. k_out/v_out may point into a larger cache.
 */
void attn_prepare_kv(const struct attn_shape *s, const struct attn_params *p,
                     const struct attn_inputs *in, size_t m, int64_t pos0,
                     void *const *k_out, void *const *v_out);

/* Global query rows [row0, row0+nb) (row = head·n + i) -> qb [nb][d_k] of
 * the dtype: + bias_q, RoPE at the query positions, as the pass prepares
 * them (core/attn_extras.c takes q·k from these). CORE_ENOMEM / CORE_ELIMIT
 * when the positions of segments cannot be resolved. */
enum core_status attn_prepare_q(const struct attn_request *r, const struct attn_inputs *in,
                                size_t row0, size_t nb, void *qb);

/* The stateless keys and values of r (checked), prepared as attn_forward
 * prepares them: every batch element (kp, vp [B·h_kv] pointers, kv head
 * b·h_kv + g), bias added and RoPE at the keys' resolved positions (counted
 * within segments by default). *store: malloc'd storage the pointers use
 * (free it), or NULL when they point at the inputs themselves.
 * CORE_ENOMEM / CORE_ELIMIT. */
enum core_status attn_prepare_view(const struct attn_request *r, const struct attn_inputs *in,
                                   void **kp, void **vp, void **store);

/* The pool attached to ws, or NULL (also when ws is NULL). */
struct attn_pool *attn_ws_pool(const struct attn_ws *ws);

/*
 * Errors of attn_forward_kv / attn_forward: those of the checks above;
 * CORE_ENOMEM when scratch cannot be allocated; CORE_EEMPTYROW with
 * ATTN_EMPTY_ERROR (a row with no allowed key; with every softmax variant);
 * CORE_ENONFINITE when a score that is not masked, or an output, is not
 * finite (e.g. float32 q·k overflowing). On error the result buffers hold
 * partial data and must not be used.
 */

/*
 * Attention of raw q against prepared keys/values.
 * q [h][n][d_k] (in->q, in->bias_q used; in->k/v ignored), kv: h_kv heads of
 * [L][d_k] / [L][d_v] -> result (see struct attn_result).
 */
enum core_status attn_forward_kv(const struct attn_request *r,
                                 const struct attn_inputs *in,
                                 const struct attn_kv_view *kv,
                                 struct attn_result *out, struct attn_ws *ws);

/*
 * attn_forward_kv restricted to the global query rows [row_begin, row_end),
 * row = head·n + i (0 <= row_begin < row_end <= h·n): only those rows of
 * scores/weights/output/empty are written, and out->n_empty counts only
 * them. Rows are independent, so a large pass may be split across worker
 * threads, each with its own ws and result struct (sum the n_empty). The
 * rows get the bits the whole pass gives them: the pass's row tiles that
 * straddle the range are computed whole into scratch and the range's rows
 * copied (OpenBLAS's results depend on a gemm's row count and a row's place
 * in it), and a decode the whole pass splits by keys is run whole.
 */
enum core_status attn_forward_kv_rows(const struct attn_request *r,
                                      const struct attn_inputs *in,
                                      const struct attn_kv_view *kv,
                                      struct attn_result *out, struct attn_ws *ws,
                                      size_t row_begin, size_t row_end);

/*
 * Splitting one pass over its keys (a long decode on several cores): each
 * worker runs attn_forward_kv_keys on a window [key_begin, key_end) of the
 * cache into its own struct attn_partial, then attn_combine merges them.
 * Only the output can be split this way (r->outputs == ATTN_OUT_OUTPUT);
 * masks, biases, causal limits and positions keep their full-pass meaning.
 */
struct attn_partial {
    void *o;                        /* [h][n][d_v] of dtype: Σ exp(s - m)·v over the window */
    double *m;                      /* [h][n] window maximum of allowed scores, -inf if none */
    double *l;                      /* [h][n] Σ exp(s - m) over the window (0 if none) */
};

/* One window of keys, all query rows. CORE_EINVAL unless outputs is
 * ATTN_OUT_OUTPUT and 0 <= key_begin < key_end <= L. Empty windows are
 * no error (the policy applies in attn_combine). */
enum core_status attn_forward_kv_keys(const struct attn_request *r,
                                      const struct attn_inputs *in,
                                      const struct attn_kv_view *kv,
                                      struct attn_partial *part, struct attn_ws *ws,
                                      size_t key_begin, size_t key_end);

/* parts[0..np) covering every key exactly once -> out->output (and
 * out->empty, out->n_empty, the empty-row policy) as attn_forward_kv would
 * give, within rounding. */
enum core_status attn_combine(const struct attn_request *r,
                              const struct attn_partial *parts, size_t np,
                              struct attn_result *out);

/*
 * Stateless attention: q [h][n][d_k], k [h_kv][L][d_k], v [h_kv][L][d_v]
 * -> scores/weights [h][n][L], output [h][n][d_v]. ws may be NULL (a
 * temporary one is used).
 */
enum core_status attn_forward(const struct attn_request *r,
                              const struct attn_inputs *in,
                              struct attn_result *out, struct attn_ws *ws);

/* What a float32 pass's q, k or v holds: float32, or 2-byte float16 /
 * bfloat16 values (core/half.h) that the pass widens itself, exactly. */
enum attn_elem { ATTN_ELEM_F32 = 0, ATTN_ELEM_F16, ATTN_ELEM_BF16 };
struct attn_elems {
    enum attn_elem q, k, v;
};

/*
 * attn_forward with q, k, v as e says (r's dtype float32 when any is
 * 2-byte): the same bits as attn_forward on the widened arrays. q is
 * widened a row tile at a time. k and v are read in their 2-byte form by
 * the output-only key-blocked pass (each kernel widens a block or
 * superblock of keys into per-worker scratch) when preparing them is a
 * plain copy (no bias, no RoPE); otherwise they are widened whole (and
 * prepared) into ws, as attn_forward's prepared rows would be.
 */
enum core_status attn_forward_half(const struct attn_request *r,
                                   const struct attn_inputs *in, const struct attn_elems *e,
                                   struct attn_result *out, struct attn_ws *ws);

#endif
