/*
 * core/verify.h — numeric checks of what biases and softmax variants change.
 *
 * verify_run() takes one attention head (q [n][d_k], k [L][d_k], v [L][d_v],
 * optional bias vectors bQ, bK, bV) and runs the checks of the API's "Verify"
 * section: a common key bias is a per-row shift that standard softmax
 * cancels, a query bias is not, softmax1 keeps ratios but not weights, equals
 * attention with a zero key prepended, and so on: checks 1-16 in the
 * documented order, then three more the seed documents support (17 sink =
 * extra key, 18 the exception over the allowed keys, 19 softmax1's positive
 * derivative), then six of current models' options (core/verify_models.c: 20
 * segments = per-segment requests, 21 window over every key = no window, 22
 * softcap bounded and monotone, 23 per-head sinks -inf / 0 = standard /
 * softmax1, 24 llama3 factor 1 = plain RoPE, 25 dims 0 = no RoPE), then two
 * of half precision (core/verify_half.c: 26 a half or int8 KV cache within a
 * derived bound, 27 a float16 key bias's lost bits). Every side of every
 * comparison that involves attention is computed by the core's real code
 * paths (attn_forward, and kv_append/kv_attend for the session check), each
 * side by its own call, so a regression in the core makes a check fail. The
 * other side is either another core call on changed inputs or plain
 * arithmetic done here in double precision. Nothing expected is hard-coded.
 *
 * A check reports {id, name, claim, applicable, passed, max_abs_diff,
 * tolerance, note, data}; data is a short list of named numeric arrays
 * (scalar, vector or matrix) that a teaching page shows. The report also
 * holds the seed article's table: four conditions (no bias, Q bias only,
 * common K bias only, both) with scores and weights, under standard softmax
 * and under softmax1. No JSON here: api/verify.c serialises the report.
 */
#ifndef ATTND_CORE_VERIFY_H
#define ATTND_CORE_VERIFY_H

#include <stdbool.h>
#include <stddef.h>

#include "attn.h"
#include "attn_blame.h"
#include "status.h"
#include "tensor.h"

/* Default tolerances (absolute, on max_abs_diff). float32 keeps about seven
 * significant digits, and check 15 adds 1000 to every score, which leaves
 * about four decimals of the score in float32. */
#define VERIFY_TOL_F64 1e-12
#define VERIFY_TOL_F32 1e-4

/* A check's effective tolerance is the larger of the base tolerance (the
 * request's, or the default) and the rounding bound of what it compares:
 * VERIFY_ROUND_ULPS * (d_k + 2) * u * M, with u the dtype's unit roundoff
 * and M = scale * (max ||q_i|| + max(||bQ||, 1)) * (max ||k_j|| + ||bK||)
 * (each bias only for a check whose scores include it, the rows of k among
 * the q_i for check 6; each |sink logit| too for a check that may run the
 * sink softmax), times
 * max(1, max |v| + max |bV|) for a check that compares outputs. M bounds
 * the sum of |terms| of every score the checks build (RoPE keeps norms),
 * and a score's rounding error, and so a weight's and a row sum's, is a few
 * u times that sum per key dimension. Scores up to a few units keep the base
 * tolerance; large ones no longer fail true properties by rounding alone. */
#define VERIFY_ROUND_ULPS 8.0

#define VERIFY_MAX_CHECKS 28
#define VERIFY_MAX_SINKS 16
#define VERIFY_MAX_DATA 12

/* The forward pass verify calls; attn_forward unless a test injects a fault. */
typedef enum core_status (*verify_forward_fn)(const struct attn_request *r,
                                               const struct attn_inputs *in,
                                               struct attn_result *out,
                                               struct attn_ws *ws);

/* One head of raw inputs, all arrays of dtype, borrowed. */
struct verify_input {
    enum attn_dtype dtype;
    size_t n, L, d_k, d_v;          /* q [n][d_k], k [L][d_k], v [L][d_v] */
    const void *q, *k, *v;
    const void *bias_q;             /* [d_k] or NULL (absent) */
    const void *bias_k;             /* [d_k] or NULL */
    const void *bias_v;             /* [d_v] or NULL */
    double scale;                   /* > 0, or 0 for 1/sqrt(d_k) */
    enum attn_softmax softmax;      /* used by checks 16 and 17 */
    double sink_logit;              /* ATTN_SOFTMAX_SINK only */
    bool rope;                      /* the RoPE of checks 14 and 16; when off,
                                       check 14 uses base 10000 interleaved */
    double rope_base;
    enum attn_rope_pairs rope_pairs;
    size_t rope_dims;               /* with rope: rotated dims as attn_params
                                       encodes them (0 = d_k) */
    struct attn_rope_scaling rope_scaling;  /* with rope */
    double softcap;                 /* check 22's c, or 0: half the largest |score| */
    /* current models' options of the request, each NULL / off when not given:
     * positions [n] / [L] (either) drive RoPE, causal and the window in
     * checks 14, 20, 21, 24 and 25; segments [n] / [L] (both) are check
     * 20's packing (else the first and second halves); the window's right
     * side and sinks are check 21's; sinks [n_sinks] are check 23's heads
     * (each against the sink softmax with that logit). */
    const int64_t *pos_q, *pos_k;
    const int64_t *seg_q, *seg_k;
    struct attn_window window;
    const double *sinks;            /* at most VERIFY_MAX_SINKS */
    size_t n_sinks;
    double tolerance;               /* > 0, or 0 for the dtype's default (the
                                       base of each check's tolerance) */
    verify_forward_fn forward;      /* NULL: attn_forward */
    struct attn_ws *ws;             /* scratch, or NULL */
};

/* A named numeric array: rank 0 (one number), 1 [cols] or 2 [rows][cols]. */
struct verify_array {
    const char *name;               /* static */
    int rank;
    size_t rows, cols;              /* rows is 1 for rank 0 and 1 */
    double *data;                   /* malloc'd rows*cols, owned by the report */
};

struct verify_check {
    int id;                         /* 1.. in the documented order */
    const char *name;               /* short slug, static */
    const char *claim;              /* one plain sentence, static */
    bool applicable;                /* false: the premise cannot be built here */
    bool passed;                    /* true when not applicable (vacuous) */
    double max_abs_diff;            /* the number compared with tolerance */
    double tolerance;               /* effective: the report's tolerance, or
                                       the rounding bound of the magnitudes
                                       compared when larger */
    bool expect_change;             /* a counterexample: passes when
                                       max_abs_diff > tolerance */
    bool precision_study;           /* data measure precisions themselves
                                       (a half request prints them in
                                       float64, not rounded to its dtype) */
    char *note;                     /* NULL or one sentence on how it was run
                                       (malloc'd, whole: never cut to a size) */
    struct verify_array data[VERIFY_MAX_DATA];
    size_t n_data;
};

/* One row of the seed's table: scores and weights [n][L]. */
struct verify_condition {
    const char *name;               /* "no_bias", "q_bias", "k_bias", "both" */
    double *scores;                 /* malloc'd [n][L] */
    double *weights;                /* malloc'd [n][L] */
};

enum { VERIFY_TABLE_STANDARD = 0, VERIFY_TABLE_SOFTMAX1 = 1 };

struct verify_report {
    enum attn_dtype dtype;
    size_t n, L, d_k, d_v;
    double scale;                   /* resolved */
    double tolerance;               /* resolved base tolerance */
    const char *tolerance_note;     /* static sentence on how it was chosen */
    bool passed;                    /* every check passed */
    struct verify_check checks[VERIFY_MAX_CHECKS];
    size_t n_checks;
    struct verify_condition table[2][4];   /* [STANDARD|SOFTMAX1][condition] */
    /* When verify_run answered CORE_ENONFINITE: the row of the request's
     * q, k or v the failing pass overflowed on (core/attn_blame.h; b and
     * head 0), found on that error path alone; input NONE when the scan
     * found none or the culprit was a check's own variant of the inputs. */
    struct attn_blame blame;
};

/*
 * Run every check. in: one head as above (n, L, d_k, d_v >= 1). out is
 * overwritten; free it with verify_report_free() whatever the status.
 * Errors: CORE_EINVAL (bad dimensions, scale, tolerance), CORE_ELIMIT (size
 * overflow), CORE_ENOMEM, or a core error of a forward pass.
 */
enum core_status verify_run(const struct verify_input *in,
                            struct verify_report *out);

void verify_report_free(struct verify_report *r);

/* Numbers in the report's data arrays and table (for response limits);
 * false on overflow. */
bool verify_report_elements(const struct verify_report *r, size_t *count);

/*
 * The numbers verify_run's report of in will hold in its data arrays and
 * table (what verify_report_elements counts of it), found before running:
 * each check's arrays at their sizes, for the checks whose premises hold.
 * Exact but for three premises known only from a check's passes, counted
 * as holding (an upper bound then): check 10 with every row's largest
 * weight underflowing (4nL + 3n + 1 fewer), check 26 with k or v past
 * float16's range (6), check 27 overflowing or with keys alike (22).
 * Check 7's premise needs the rank of the key differences when L > d_k,
 * O(L·d_k²) (as much as check 7 itself): without rank its 3nL + L + d_k
 * numbers are counted as holding then, and *unsure gets them (0 when the
 * count is exact so far). Costs O((n + L)·d_k) besides, and a sort of L
 * dot products (check 18). Errors: verify_run's CORE_EINVAL, CORE_ELIMIT
 * (also a count past SIZE_MAX), CORE_ENOMEM.
 */
enum core_status verify_report_numbers(const struct verify_input *in, bool rank,
                                       size_t *count, size_t *unsure);

/*
 * The built-in example: q = (1,0); k1 = (1,0), k2 = (0,1),
 * k3 = (-1,0); bQ = (0,1); bK = (3,-2); d_k = 2. The values are the 3x3
 * identity, v_j = e_j, so each output row shows its weights; bV =
 * (1, -1, 0.5). float64, default scale and tolerance, standard softmax, no
 * RoPE. The arrays are static.
 */
void verify_builtin(struct verify_input *in);

#endif
