/*
 * api/read.h — readers from jansson values into core types.
 *
 * Each reader takes the JSON value (NULL when the member is absent, which
 * yields the default), the JSON pointer of that value (RFC 6901, e.g.
 * "/k" or "/bias/q"), and answers the call with the error object — path
 * extended down to the offending element, e.g. "/k/2/1" — before returning
 * false. Nothing is allocated for a request before its element count has
 * been checked (with checked arithmetic) against the element budget.
 *
 * The readers are separately callable so the sessions and verify handlers
 * can reuse them; api_read_attention_pre() combines them for /v1/attention
 * (api_read_attention() is the same without the fast reader's arrays).
 */
#ifndef ATTND_API_READ_H
#define ATTND_API_READ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/codec/half.h"
#include "api/internal.h"
#include "api/extras.h"
#include "api/codec/numread.h"
#include "api/codec/write.h"
#include "core/attn.h"
#include "core/kv.h"

/* Longest JSON pointer a reader reports (longer ones are truncated). */
#define API_PATH_MAX 128

/* What the elements of a tensor may be. */
enum api_elem {
    API_ELEM_REAL = 0,      /* finite numbers (and in dtype range) */
    API_ELEM_NULLABLE,      /* numbers, null = -inf (attn_bias) */
    API_ELEM_BOOL,          /* true/false -> uint8_t 1/0 (mask) */
};

/* A tensor read from JSON; owns data. */
struct api_tensor {
    enum attn_dtype dtype;          /* element type of data (REAL/NULLABLE) */
    enum api_elem elem;             /* API_ELEM_BOOL: data is uint8_t */
    int rank;                       /* 0 when absent, else 1..ATTN_MAX_RANK */
    size_t shape[ATTN_MAX_RANK];
    size_t count;                   /* product of shape */
    void *data;                     /* malloc'd, or NULL when absent */
    enum api_half half;             /* NONE, or data holds the 2-byte values
                                       (api_read_tensor_keep) */
    bool packed;                    /* sent in the base64 form (no row pointers) */
};

struct api_tensor_spec {
    enum attn_dtype dtype;          /* element type to store (converted) */
    enum api_elem elem;
    int min_rank, max_rank;         /* accepted ranks, within 1..ATTN_MAX_RANK */
    size_t *budget;                 /* elements still allowed in this request;
                                       reduced on success (limit_exceeded when
                                       passed); NULL: cfg.max_elements alone */
};

/*
 * Read nested arrays (or the base64 form, unless elem is BOOL: then
 * "dtype":"bool" with one byte per element) into out. Errors:
 * invalid_field (types, rank, base64 form), ragged_matrix (a row whose
 * length differs; path of that row), empty_matrix (a zero dimension),
 * non_finite (NaN/Inf in base64, float32 overflow), limit_exceeded.
 */
bool api_read_tensor(struct api_call *c, const json_t *v, const char *path,
                     const struct api_tensor_spec *spec,
                     struct api_tensor *out);

/* Index of the first element of src[n] (float32, or float64 when f64, in
 * the host's order) that is not finite, -inf allowed when allow_neg_inf;
 * n when all are. Bit tests in blocks, at memory speed. */
size_t api_first_nonfinite(const void *src, bool f64, size_t n, bool allow_neg_inf);

/* api_read_tensor(), taking the array from pre (by path) when the fast
 * reader of api_parse_body_pre() read it (pre may be NULL), except that a
 * base64 tensor of a float32 REAL spec sent in the request's own half format
 * (c->half) stays in its 2-byte form (out->half set; checked finite, not
 * widened): for a pass that widens it itself (attn_forward_half). */
bool api_read_tensor_keep(struct api_call *c, const json_t *v, const char *path,
                          const struct api_tensor_spec *spec, const struct api_pre *pre,
                          struct api_tensor *out);

void api_tensor_free(struct api_tensor *t);

/* A tensor kept 2-byte (t->half) widened to float32 in place of its data;
 * false when out of memory (t unchanged). */
bool api_tensor_widen(struct api_tensor *t);

/* What t's data holds, as attn_forward_half takes it. */
enum attn_elem api_tensor_elem(const struct api_tensor *t);

/* api_tensor_widen on bare data [count] (a 2-byte OIP v2 input): 2-byte
 * values of format *half widened to float32 in place of *data (the 2-byte
 * block freed) and *half set to API_HALF_NONE; nothing to do when *half is
 * already NONE; false when out of memory (nothing changed). */
bool api_widen_2byte(void **data, enum api_half *half, size_t count);

/* What data of format h holds (API_HALF_NONE: float32), as
 * attn_forward_half takes it. */
enum attn_elem api_half_elem(enum api_half h);

/* Interpret a rank-2 tensor as 1 head, a rank-3 one as shape[0] heads and
 * a rank-4 one as shape[0] batch elements of shape[1] heads: heads, rows,
 * cols (per batch element). */
void api_tensor_heads(const struct api_tensor *t, size_t *heads,
                      size_t *rows, size_t *cols);

/* The shape of q, k, v as /v1/attention takes them: one rank (2 one head,
 * 3 heads, 4 a batch), one batch size, k's width that of q, q's heads a
 * multiple of k's, v with k's heads and rows. 422 shape_mismatch at /k or
 * /v otherwise. */
bool api_qkv_shape(struct api_call *c, const struct api_tensor *q, const struct api_tensor *k,
                   const struct api_tensor *v, struct attn_shape *s);

/*
 * An integer in [min, max] (e.g. d_k, length, max_tokens): a JSON integer,
 * or an integral real (a body holding an integer literal beyond 64 bits is
 * parsed with every integer as a real, see api/reply.c). v must be present;
 * invalid_field otherwise.
 */
/* Whether v is a whole number past what a size reader takes (a literal
 * beyond 2^53, or 2^64 and up, which the body parser reads as a real): a
 * size, but too large for any request, limit_exceeded where it stands. */
bool api_size_too_large(const json_t *v);

bool api_read_size(struct api_call *c, const json_t *v, const char *path,
                   size_t min, size_t max, size_t *out);

/* "float64" (default) | "float32" | "float16" | "bfloat16". For the two
 * half formats *out is ATTN_F32 (the math runs in float32) and *half says
 * which; otherwise *half is API_HALF_NONE. */
bool api_read_dtype(struct api_call *c, const json_t *v, const char *path,
                    enum attn_dtype *out, enum api_half *half);

/* Positive finite number; absent -> *given = false (caller resolves the
 * default 1/sqrt(d_k)). */
bool api_read_scale(struct api_call *c, const json_t *v, const char *path,
                    double *out, bool *given);

/* Members "softmax" ("standard" default | "softmax1" | "sink") and
 * "sink_logit" (required with, and only allowed with, "sink") of obj, whose
 * pointer is prefix ("" for the body). */
bool api_read_softmax(struct api_call *c, const json_t *obj,
                      const char *prefix, enum attn_softmax *softmax,
                      double *sink_logit);

/* api_read_softmax; with sink_array, sink_logit may also be an array (not
 * read here: api_read_sinks reads it). */
bool api_read_softmax_ex(struct api_call *c, const json_t *obj,
                         const char *prefix, bool sink_array,
                         enum attn_softmax *softmax, double *sink_logit);

/* Numbers of a half request that are not tensors (sink logits): x [n]
 * (finite) rounded in place to the call's half dtype, as its tensors are;
 * nothing when the call has none. from_text: x was read from the body's
 * decimal text at path (path/i for each element when array), which decides
 * a number whose double is a midpoint. Answers 422 non_finite at the
 * element that overflows. */
bool api_read_round_half(struct api_call *c, const char *path, bool array,
                         bool from_text, double *x, size_t n);

/* false (default) | true | "bottom_right" | "top_left". */
bool api_read_causal(struct api_call *c, const json_t *v, const char *path,
                     enum attn_causal *out);

/* true | false (default) | {"slopes":[h positive-or-zero finite numbers]}.
 * *slopes is malloc'd [heads] or NULL (standard slopes). */
bool api_read_alibi(struct api_call *c, const json_t *v, const char *path,
                    size_t heads, bool *on, double **slopes);

/* "zero" (default) | "error". */
bool api_read_empty_rows(struct api_call *c, const json_t *v,
                         const char *path, enum attn_empty_rows *out);

/* "json" (default) | "base64". */
bool api_read_encoding(struct api_call *c, const json_t *v, const char *path,
                       enum api_encoding *out);

/* Integer 1..17; absent -> 0 (shortest round-trip). */
bool api_read_digits(struct api_call *c, const json_t *v, const char *path,
                     int *digits);

/* timeout_ms: an integer 1..86400000; lowers the deadline of the stop the
 * caller attached to the request's workspace (the server always attaches
 * one; --request-timeout is its default). Absent: no change. */
bool api_read_timeout(struct api_call *c, const json_t *v, const char *path);
/* The same in microseconds, as Triton's "timeout" parameter: an integer
 * 0..86400000000, 0 meaning none; the deadline is the whole milliseconds
 * it rounds up to. */
bool api_read_timeout_us(struct api_call *c, const json_t *v, const char *path);

/* Bias vectors: each of q, k, v is [d] (shared by all heads) or per head
 * ([h][d_k] for q, [h_kv][d_k] for k, [h_kv][d_v] for v). */
struct api_bias {
    struct api_tensor q, k, v;      /* rank 0 (absent), 1 or 2 */
    size_t q_heads, k_heads, v_heads; /* 1 (shared) or per head; 0 absent */
};

/* Read {"q":…,"k":…,"v":…} (each optional) against s->h, h_kv, d_k, d_v. */
bool api_read_bias(struct api_call *c, const json_t *v, const char *path,
                   enum attn_dtype dt, const struct attn_shape *s,
                   size_t *budget, struct api_bias *out);

void api_bias_free(struct api_bias *b);

/* Point in->bias_* at b's arrays (NULL when absent). */
void api_bias_inputs(const struct api_bias *b, struct attn_inputs *in);

/*
 * A score-shaped matrix: [n][L] (every head, *heads = 1), [h][n][L]
 * (*heads = h) or [B][h][n][L] (*heads = B*h; [1][..] and [..][1] broadcast
 * as in PyTorch, a [B][1][n][L] copied to every head). elem NULLABLE for
 * attn_bias (null = -inf), BOOL for mask.
 */
/* A [B][1][n][L] matrix *data (n*L = nl, esz bytes an element, *count
 * elements, malloc'd) replaced by its copy to every one of h heads,
 * [B][h][n][L]; the added elements come off *budget (422 limit_exceeded at
 * path beyond it; capacity_exhausted without memory). */
bool api_widen_heads(struct api_call *c, const char *path, size_t B, size_t h, size_t nl,
                     size_t esz, size_t *budget, void **data, size_t *count);

bool api_read_score_matrix(struct api_call *c, const json_t *v,
                           const char *path, enum api_elem elem,
                           enum attn_dtype dt, const struct attn_shape *s,
                           size_t *budget, struct api_tensor *out,
                           size_t *heads);

/* ---- the fields of current models (api/read_model.c) ---------------- */

/* Positions and segments of one request, owned: each [batches][n] (q) or
 * [batches][L] (k), batches 1 (shared) or B; NULL when absent. */
struct api_seqs {
    int64_t *pos_q, *pos_k;
    size_t pos_q_batches, pos_k_batches;
    int64_t *seg_q, *seg_k;         /* both or neither */
    size_t seg_batches;
};

/*
 * "positions" {"q":[n],"k":[L]} (either; integers 0..2^53) and "segments"
 * {"q":[n],"k":[L]} (both; any integers), each row [len] or [B][len], as
 * members of the object at prefix ("" for the body); positions/segments
 * are those members' values (NULL when absent). Against s->n, s->L, s->B.
 */
bool api_read_seqs(struct api_call *c, const json_t *positions,
                   const json_t *segments, const char *prefix,
                   const struct attn_shape *s, size_t *budget,
                   struct api_seqs *out);
/* Point r's pos_*, seg_* fields at q's arrays. */
void api_seqs_request(const struct api_seqs *q, struct attn_request *r);
void api_seqs_free(struct api_seqs *q);

/* A position or window side in [0, 2^53]: a JSON integer or an integral
 * real (2.0), as /v1's window takes it (OIP v2's window_* too). */
bool api_window_side(const json_t *v, int64_t *out);

/* {"left":W_l,"right":W_r,"sinks":S}, each optional, integers 0..2^53; a
 * missing side is unbounded (-1). Absent: w->on = false. */
bool api_read_window(struct api_call *c, const json_t *v, const char *path,
                     struct attn_window *w);

/* A positive number; absent -> 0 (off). */
bool api_read_softcap(struct api_call *c, const json_t *v, const char *path,
                      double *softcap);

/* Float32 math (dtype float32, float16 or bfloat16) holds scale, softcap
 * and the sink logits as floats: one past float32's range is refused at
 * prefix/scale, /softcap (invalid_field) or /sink_logit[/i] (non_finite),
 * where attn_check would refuse it without a field. */
bool api_check_float32_params(struct api_call *c, const struct attn_params *p,
                              size_t heads, const char *prefix);

/* A session's kv_dtype, how its cache stores K and V: "float32",
 * "float16", "bfloat16" or "int8" (float32 math), only "float64" for a
 * float64 session; absent -> the session's own (float16 / bfloat16 rows
 * for those wire dtypes, else its dtype). /v1/sessions and OIP v2's
 * sequence_start read it. */
bool api_read_kv_dtype(struct api_call *c, const json_t *v, const char *path,
                       enum attn_dtype dtype, enum api_half half, enum kv_store *out);

/* Members "softmax" and "sink_logit" of obj (at prefix) into p: sink_logit
 * a finite number or [heads] of them (*sinks malloc'd, p->sink_logits
 * pointing at it; NULL otherwise). */
bool api_read_sinks(struct api_call *c, const json_t *obj, const char *prefix,
                    size_t heads, struct attn_params *p, double **sinks);

/* RoPE into p (rope, rope_base, rope_pairs, rope_dims, rope_scaling):
 * absent or false -> off; true -> the defaults; {"base":10000,
 * "pairs":"interleaved"|"half","dims":r (even, <= d_k; 0 = no RoPE),
 * "scaling":{"type":"linear"|"ntk"|"llama3"|"yarn", parameters}}; yarn's
 * parameters include "truncate" (boolean, default true). */
bool api_read_rope(struct api_call *c, const json_t *v, const char *path,
                   size_t d_k, struct attn_params *p);

/* The same from OIP v2's flat parameters (path "/parameters"): rope_base,
 * rope_pairs, rope_dims, rope_scaling (the type), rope_factor,
 * rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position,
 * rope_beta_fast, rope_beta_slow, rope_attention_factor, rope_truncate
 * (a boolean); any of the first four turns RoPE on. */
bool api_read_rope_flat(struct api_call *c, const json_t *params,
                        const char *path, size_t d_k, struct attn_params *p);

/* p's RoPE as the request would spell it (false when off); new reference. */
json_t *api_rope_json(const struct attn_params *p, size_t d_k);
/* p's sink logit(s): a number, [heads] numbers, or null without "sink". */
json_t *api_sinks_json(const struct attn_params *p, size_t heads);
/* p's ALiBi as the request would spell it: true (the default slopes),
 * {"slopes":[h numbers]}, or false when off. */
json_t *api_alibi_json(const struct attn_params *p, size_t heads);
/* heads x d numbers of dt at data as a bias member is spelled: [d] for one
 * head, else [heads][d]; float32 ones in their shortest digits. NULL data:
 * null. New reference. */
json_t *api_vectors_json(const void *data, enum attn_dtype dt, size_t heads, size_t d);

/* A whole POST /v1/attention body, owned. */
struct api_attention_req {
    struct attn_request r;          /* options + shape; pointers into below */
    struct attn_inputs in;          /* pointers into q, k, v, bias */
    struct api_tensor q, k, v;      /* q [n][d_k] or [h][n][d_k]; k, v alike */
    struct api_bias bias;
    struct api_tensor attn_bias;    /* rank 0 when absent */
    struct api_tensor mask;         /* rank 0 when absent */
    double *alibi_slopes;           /* malloc'd [h] or NULL */
    double *sink_logits;            /* malloc'd [h] or NULL */
    struct api_seqs seqs;           /* positions, segments */
    int q_rank;                     /* 2, 3 or 4: the rank of every output */
    enum api_encoding encoding;
    int digits;                     /* 0 = shortest round-trip */
    struct api_extras x;            /* heads, top-k, qk/lse/stats, tokens */
};

/* Read and validate the whole body (an object) into out; on false the call
 * has been answered and out needs no free. */
bool api_read_attention(struct api_call *c, const json_t *body,
                        struct api_attention_req *out);

/* The same for a body parsed with api_parse_body_pre(): q, k, v are taken
 * from pre when the fast reader read them. */
bool api_read_attention_pre(struct api_call *c, const json_t *body,
                            const struct api_pre *pre,
                            struct api_attention_req *out);

void api_attention_req_free(struct api_attention_req *r);

#endif
