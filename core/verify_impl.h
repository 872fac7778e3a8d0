/*
 * core/verify_impl.h — what core/verify.c shares with the checks kept in
 * core/verify_bias.c, verify_softmax1.c, verify_session.c, verify_models.c
 * and verify_half.c (internal to core/): the context, the one way a check
 * runs attention (verify_pass), small arithmetic, and the records a check
 * fills.
 */
#ifndef ATTND_CORE_VERIFY_IMPL_H
#define ATTND_CORE_VERIFY_IMPL_H

#include "verify.h"

#include <math.h>

/* One forward pass in double: scores, weights [n][L], output [n][d_v]. */
struct vpass {
    double *s, *w, *o;
};

/* What one forward pass runs on (raw rows; bias vectors NULL when off). */
struct vrun {
    const double *q, *k, *v;
    size_t n, L;
    const double *bq, *bk, *bv;
    enum attn_softmax sm;
    double sink;
    bool rope;
    double rope_base;
    enum attn_rope_pairs rope_pairs;
    size_t h;                       /* query heads (q [h][n][d_k]); 0 = 1 */
    /* the option a check of core/verify_models.c sets, on the request last */
    void (*tweak)(struct attn_request *rq, const void *arg);
    const void *tweak_arg;
    bool positions;                 /* the request's positions (on the
                                       caller's n queries and L keys) */
    const int64_t *pq, *pk;         /* explicit positions of this run, or NULL */
    const double *attn_bias;        /* [n][L] or NULL */
    const uint8_t *mask;            /* [n][L], nonzero = may attend, or NULL */
    enum attn_causal causal;
};

enum { C_NONE = 0, C_Q = 1, C_K = 2, C_BOTH = 3 };

/* Score shifts of check 12 (softmax1_row_sums) and key bias sizes of check
 * 27 (beit_key_bias_float16): the lengths of their arrays. */
#define VERIFY_ROW_SUM_SHIFTS 4
#define VERIFY_BEIT_SIZES 7

struct vx {
    const struct verify_input *in;
    size_t n, L, dk, dv;
    enum attn_dtype dt;
    double scale, tol;              /* tol: the base (request's or default) */
    double nq, nkq, nk, nbq, nbk;   /* largest norms: rows of q, of k (as
                                       queries, nkq = nk), bias.q, bias.k */
    double msink, mv;               /* largest |sink logit|; max(1, max |v|
                                       + max |bV|) */
    double *q, *k, *v;              /* inputs as double */
    double *bq, *bk, *bv;           /* NULL when absent */
    double *zk;                     /* zeros [d_k] */
    verify_forward_fn fwd;
    struct attn_ws *ws;
    enum core_status err;           /* why the last vx_bytes failed */
    void **allocs;                  /* everything vx_bytes handed out */
    size_t n_allocs, cap_allocs;
    struct vpass p[2][4];           /* [standard|softmax1][C_*] */
    struct attn_blame *blame;       /* the report's: set by the first pass that
                                       overflows (verify_pass) */
};

#define NEED(p)                                                            \
    do {                                                                   \
        if (!(p))                                                          \
            return c->err;                                                 \
    } while (0)

#define TRY(e)                                                             \
    do {                                                                   \
        enum core_status st_ = (e);                                        \
        if (st_ != CORE_OK)                                                \
            return st_;                                                    \
    } while (0)

/* count·size zeroed bytes owned by c (freed with it); NULL with c->err set. */
void *verify_bytes(struct vx *c, size_t count, size_t size);

/* a·b zeroed doubles owned by c (freed with it); NULL with c->err set. */
double *verify_dbl(struct vx *c, size_t a, size_t b);

/* The shared inputs with the biases of cond (C_*), value bias off. */
struct vrun verify_base_run(const struct vx *c, enum attn_softmax sm, int cond);

/* The core request of r (shape, params, positions, mask, the tweak). */
void verify_request(const struct vx *c, const struct vrun *r, struct attn_request *rq);

/* Converts the inputs of r to the dtype into in (and rq's attn_bias). */
enum core_status verify_inputs(struct vx *c, const struct vrun *r,
                               struct attn_request *rq, struct attn_inputs *in);

/* Copy count core results of the dtype into double dst. */
void verify_unload(const struct vx *c, const void *src, double *dst, size_t count);

/* Attention of r through the core (or the injected forward pass); out gets
 * new double arrays: s, w [h·n][L], o [h·n][d_v]. */
enum core_status verify_pass(struct vx *c, const struct vrun *r, struct vpass *out);

/* What a check's rounding scales with (verify_tol), as flags: SCORES for
 * scores, weights and row sums, OUTPUTS when outputs are compared too; BQ
 * and BK when its scores include bias.q / bias.k; KEY_ROWS when keys are
 * used as queries too; SINK when it may run the sink softmax (the request's
 * softmax, or sinks of its own). 0: the base tolerance alone. */
enum {
    VERIFY_MAG_BQ = 1,              /* = C_Q */
    VERIFY_MAG_BK = 2,              /* = C_K */
    VERIFY_MAG_SCORES = 4,
    VERIFY_MAG_OUTPUTS = 8,
    VERIFY_MAG_KEY_ROWS = 16,
    VERIFY_MAG_SINK = 32,
};

/* The effective tolerance of a check of magnitude flags mag: the base
 * tolerance, or the rounding bound of the compared magnitudes when that is
 * larger (verify.h, VERIFY_ROUND_ULPS). */
double verify_tol(const struct vx *c, int mag);

/* ||x|| of x [d], without overflow or underflow of the squares. */
double verify_norm(const double *x, size_t d);

/* max |a - b| over count numbers (NaN propagates as a failure). */
double verify_maxdiff(const double *a, const double *b, size_t count);

static inline double verify_dot(const double *a, const double *b, size_t d)
{
    double s = 0.0;
    for (size_t i = 0; i < d; i++)
        s += a[i] * b[i];
    return s;
}

/* The larger of a and b; a NaN a wins (so a NaN difference fails). */
static inline double verify_max2(double a, double b)
{
    return (a >= b || isnan(a)) ? a : b;
}

/* Index of the largest of x[0..L). */
static inline size_t verify_argmax(const double *x, size_t L)
{
    size_t r = 0;
    for (size_t j = 1; j < L; j++)
        if (x[j] > x[r])
            r = j;
    return r;
}

/* scale * q_i . k_j for q [n][d_k], k [L][d_k] -> out [n][L]. */
void verify_ref_scores(const struct vx *c, const double *q, size_t n,
                       const double *k, size_t L, double *out);

/* a - b, elementwise, into a new array owned by c. */
double *verify_sub(struct vx *c, const double *a, const double *b, size_t count);

/* Row sums of w [n][L] into a new array [n] owned by c. */
double *verify_rowsums(struct vx *c, const double *w, size_t n, size_t L);

/* Round derived inputs to the dtype in place, so the reference arithmetic
 * sees exactly the numbers the core receives. */
void verify_round(const struct vx *c, double *x, size_t count);

/* double [count] -> array of the dtype (src itself for float64); *ok false
 * when an allocation failed. NULL src gives NULL. */
const void *verify_cast(struct vx *c, const double *src, size_t count, bool *ok);

/* Records of a check: named arrays, a note, not applicable (with why). */
enum core_status verify_ck_mat(struct verify_check *ck, const char *name, size_t rows,
                               size_t cols, const double *src);
enum core_status verify_ck_vec(struct verify_check *ck, const char *name, size_t cols,
                               const double *src);
enum core_status verify_ck_num(struct verify_check *ck, const char *name, double x);
__attribute__((format(printf, 2, 3))) void verify_ck_note(struct verify_check *ck,
                                                         const char *fmt, ...);
enum core_status verify_ck_na(struct verify_check *ck, const char *why);

/* The premises checks 7, 10, 14 and 18 test on the inputs before their
 * passes (verify_report_numbers counts their arrays only when they hold):
 * check 7 finds a bQ with equal dot products with every key, bias.k adds
 * something to some row's scores (false without it), why RoPE would leave
 * the key bias one shift per row (NULL: it does not), two keys share their
 * dot product with bias.q. */
enum core_status verify_q_exception_applies(struct vx *c, bool *applies);
bool verify_k_bias_shifts(const struct vx *c);
const char *verify_rope_keeps_shift(const struct vx *c);
enum core_status verify_q_allowed_applies(struct vx *c, bool *applies);

/* Checks 1-8 and 18 (core/verify_bias.c). */
enum core_status verify_check_base_scores(struct vx *c, struct verify_check *ck);
enum core_status verify_check_k_row_constant(struct vx *c, struct verify_check *ck);
enum core_status verify_check_k_weights(struct vx *c, struct verify_check *ck);
enum core_status verify_check_q_relative(struct vx *c, struct verify_check *ck);
enum core_status verify_check_four_terms(struct vx *c, struct verify_check *ck);
enum core_status verify_check_every_row(struct vx *c, struct verify_check *ck);
enum core_status verify_check_q_exception(struct vx *c, struct verify_check *ck);
enum core_status verify_check_per_key_shift(struct vx *c, struct verify_check *ck);
enum core_status verify_check_q_allowed(struct vx *c, struct verify_check *ck);

/* Checks 9-13, 15, 17 and 19 (core/verify_softmax1.c). */
enum core_status verify_check_softmax1_ratios(struct vx *c, struct verify_check *ck);
enum core_status verify_check_softmax1_shift(struct vx *c, struct verify_check *ck);
enum core_status verify_check_zero_key(struct vx *c, struct verify_check *ck);
enum core_status verify_check_row_sums(struct vx *c, struct verify_check *ck);
enum core_status verify_check_v_bias(struct vx *c, struct verify_check *ck);
enum core_status verify_check_max_sub(struct vx *c, struct verify_check *ck);
enum core_status verify_check_sink(struct vx *c, struct verify_check *ck);
enum core_status verify_check_own_score(struct vx *c, struct verify_check *ck);

/* Checks 14 and 16 (core/verify_session.c). */
enum core_status verify_check_rope(struct vx *c, struct verify_check *ck);
enum core_status verify_check_session(struct vx *c, struct verify_check *ck);

/* Checks 20-25, current models' options (core/verify_models.c). */
enum core_status verify_check_segments(struct vx *c, struct verify_check *ck);
enum core_status verify_check_window_all(struct vx *c, struct verify_check *ck);
enum core_status verify_check_softcap(struct vx *c, struct verify_check *ck);
enum core_status verify_check_head_sinks(struct vx *c, struct verify_check *ck);
enum core_status verify_check_llama3_one(struct vx *c, struct verify_check *ck);
enum core_status verify_check_dims_zero(struct vx *c, struct verify_check *ck);

/* Checks 26 and 27, half precision (core/verify_half.c). */
enum core_status verify_check_kv_dtypes(struct vx *c, struct verify_check *ck);
enum core_status verify_check_beit_key_bias(struct vx *c, struct verify_check *ck);

#endif
