/*
 * api/v2/v2_impl.h — what the files of the Open Inference Protocol v2 share
 * (api/v2/v2.c routes and describes the model, api/v2/v2_tensor.c reads input
 * tensors, api/v2/v2_infer.c runs one inference request, api/v2/v2_seq.c maps
 * sequence ids onto sessions, api/v2/v2_fixed.c compares what a later request
 * of a sequence repeats with what its start fixed): the model's input
 * slots, the state of one inference request, and the functions that cross
 * between those files.
 */
#ifndef ATTND_API_V2_IMPL_H
#define ATTND_API_V2_IMPL_H

#include "api/extras.h"
#include "api/read.h"
#include "api/v2/v2.h"
#include "core/attn.h"
#include "core/store.h"

#define V2_MODEL "attention"
#define V2_VERSION "1"
#define V2_HDR_LEN "Inference-Header-Content-Length"

/* The inputs and outputs of the model. */
enum v2_slot {
    V2_Q, V2_K, V2_V, V2_BQ, V2_BK, V2_BV, V2_AB, V2_MASK,
    V2_SINKS,                       /* sink_logits [h], FP32/FP64 */
    V2_PQ, V2_PK, V2_SQ, V2_SK,     /* positions_q/k, segments_q/k: INT32/INT64 */
    V2_NSLOT
};

/* Slots holding integers (stored as int64_t). */
static inline bool v2_slot_int(int slot)
{
    return slot >= V2_PQ && slot <= V2_SK;
}

/* Outputs: scores, weights, output (the ATTN_OUT_* bit indices), then the
 * part-2 returns and the echoed labels (api/v2/v2_extras.c). */
enum v2_out_index {
    V2_QK = 3, V2_LSE, V2_ENT, V2_MAXW, V2_ARGMAX, V2_MASS, V2_TOPK_IDX, V2_TOPK_VAL,
    V2_TOK_Q, V2_TOK_K, V2_NOUT
};
#define V2_BIT(k) (1u << (k))

/*
 * What each input accepts: the one list that read_wire (api/v2/v2_tensor.c)
 * checks a datatype against and that the model metadata (api/v2/v2.c)
 * publishes, with the ranks its shape may have. A new datatype or rank is
 * added here (and to read_wire's conversions, and the shape checks).
 */
struct v2_input_spec {
    const char *datatypes[5];       /* NULL-terminated; metadata names the first */
    int min_rank, max_rank;
};
extern const struct v2_input_spec api_v2_inputs[V2_NSLOT];

/* Input names by slot (api/v2/v2.c), output names by index
 * (api/v2/v2_extras.c). */
extern const char *const api_v2_slot_names[V2_NSLOT];
extern const char *const api_v2_out_names[V2_NOUT];

/* An input tensor, converted to the computation's dtype (mask: uint8_t;
 * positions and segments: int64_t), except q, k and v sent in the
 * request's own FP16/BF16 datatype: kept in that 2-byte form (half set)
 * for the pass that widens them itself (attn_forward_half), and widened
 * (api_widen_2byte) before any other. */
struct v2_tensor {
    bool present;
    size_t index;                   /* position in "inputs" (for paths) */
    int rank;
    size_t shape[ATTN_MAX_RANK];
    size_t count;
    void *data;                     /* malloc'd, or in the body when borrowed */
    bool borrowed;                  /* data points into the request body (a
                                       binary input read in place): not freed,
                                       never written */
    enum api_half half;             /* NONE, or data holds 2-byte values */
    bool wide;                      /* data holds doubles whatever the request's
                                       dtype (sink_logits beside float32 q: an
                                       option, as /v1's sink_logit) */
};

struct v2_infer {
    json_t *hdr;                    /* the JSON part (new reference) */
    const json_t *params;           /* request parameters (borrowed) or NULL */
    const unsigned char *bin;       /* binary part of the body */
    size_t bin_len, bin_used;
    enum attn_dtype dt;             /* of the computation */
    enum api_half half;             /* FP16/BF16 q: the wire precision (dt is F32) */
    size_t budget;                  /* input elements still allowed */
    struct v2_tensor t[V2_NSLOT];
    /* options */
    struct attn_params p;
    bool scale_given;
    enum attn_causal causal;
    enum attn_empty_rows empty_rows;
    double *slopes;                 /* malloc'd ALiBi slopes or NULL */
    double *sinks;                  /* per-head sink logits (malloc'd) or NULL */
    struct attn_window window;      /* window_*: a sequence_start's rolls */
    enum kv_store kv_store;         /* kv_dtype (sequence_start), or its default */
    struct api_seqs seqs;           /* positions and segments, owned */
    unsigned outputs, binary;       /* V2_BIT(output index) selected / binary */
    int order[V2_NOUT], n_order;    /* the selected output indexes, in the order asked */
    struct api_extras ext;          /* heads, top-k, extras, labels */
    size_t tok_index[2];            /* positions of tokens_q / tokens_k in inputs */
    /* sequence */
    bool seq, seq_start, seq_end;
    const json_t *seq_id;           /* borrowed */
    uint64_t seq_num;               /* an integer sequence_id (1..2^64-1), else 0 */
    char seq_name[SESS_NAME_MAX];   /* its session's name (api_v2_seq_name) */
    char sid[SESS_ID_MAX];
    struct sess *sess;              /* held session, or NULL; a start's detached
                                       one (fresh) until it is put in place */
    bool fresh;                     /* sess is detached (core/store.h's
                                       sess_create_detached) */
    struct sess *old;               /* a start's earlier session of the id, held
                                       until the start is answered, or NULL */
};

/* obj[key] when obj is an object, else NULL (borrowed); a JSON null is
 * absent, as everywhere in the api. */
static inline const json_t *member(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

/* POST /v2/models/attention/infer (api/v2/v2_infer.c). */
void api_v2_infer(struct api_call *c);

/* The options of current models (api/v2/v2_model.c): parameters softcap,
 * window_left, window_right, window_sinks, rope_* (api_read_rope_flat) and
 * kv_dtype (sequences only), the input sink_logits. */
bool api_v2_read_model(struct api_call *c, struct v2_infer *x,
                       const struct attn_shape *s);
/* Inputs positions_q/k and segments_q/k ([n] or [B,n]; [L] or [B,L]) into
 * x->seqs. */
bool api_v2_read_seqs(struct api_call *c, struct v2_infer *x,
                      const struct attn_shape *s);
/* A later request of the held sequence x->sess, its fixed settings read
 * as a start reads them (x->p, x->window, x->kv_store; in: its bias
 * inputs): each one it sends must mean what the start fixed (400
 * invalid_field at the first that does not, naming the sequence's value).
 * (api/v2/v2_fixed.c) */
bool api_v2_check_fixed(struct api_call *c, const struct v2_infer *x,
                        const struct attn_inputs *in);
/* Refuse positions and segments inputs in a sequence (start or not). */
bool api_v2_refuse_seqs(struct api_call *c, const struct v2_infer *x);

/* The dtype of a stateless computation: that of q (api/v2/v2_tensor.c). */
void api_v2_pick_dtype(struct v2_infer *x, const json_t *inputs);

/* A parameters object's "content_type" (path: the object's pointer):
 * absent or "np", as MLServer's NumpyCodec marks numeric tensors, or with
 * labels (a BYTES input's strings) "str", as its StringCodec marks them;
 * any other codec's is a 400 naming it. (api/v2/v2_tensor.c) */
bool api_v2_read_content_type(struct api_call *c, const json_t *params, const char *path,
                              bool labels);

/* The binary_data_size of input in (prefix: its pointer) -> *size, -1
 * when its data is in JSON; false after a 400 at its parameters.
 * (api/v2/v2_tensor.c) */
bool api_v2_read_binary_size(struct api_call *c, const json_t *in, const char *prefix,
                             long long *size);

/* Every element of "inputs" into x's slots, in order (binary data follows
 * that order); false after answering with the error. (api/v2/v2_tensor.c) */
bool api_v2_read_inputs(struct api_call *c, struct v2_infer *x,
                        const json_t *inputs);

/* Part-2 returns (api/v2/v2_extras.c): the BYTES inputs tokens_q / tokens_k
 * (keys: tokens_k), the parameters heads and weights_top_k, the outputs
 * selected -> the pass's ATTN_OUT_* bits and x->ext.want, the response's
 * extra bytes, and the extra outputs (JSON, then their binary bytes). */
bool api_v2_read_tokens(struct api_call *c, struct v2_infer *x, const json_t *in,
                        size_t idx, bool keys);
bool api_v2_read_extras_params(struct api_call *c, struct v2_infer *x);
bool api_v2_extras_outputs(struct api_call *c, struct v2_infer *x, unsigned *outputs);
bool api_v2_extras_check(struct api_call *c, struct v2_infer *x, const struct attn_shape *s);
bool api_v2_extras_cap(const struct v2_infer *x, const struct attn_request *r, size_t *cap);
/* float32 values already rounded to h -> their 2-byte little-endian bits. */
void api_v2_put_half_le(struct api_buf *b, const void *data, enum api_half h, size_t n);

/* The response (api/v2/v2_respond.c). api_v2_results_ok: whether the
 * results can be answered (a half request's rounded in place; a value past
 * the range, or a qk that overflowed, answered 422 at its output: false);
 * run before a sequence's append is kept. api_v2_respond: the answer, JSON
 * or binary (its results checked first unless checked). api_v2_response_cap:
 * the bytes it may take; false on overflow. */
bool api_v2_results_ok(struct api_call *c, const struct v2_infer *x,
                       const struct attn_request *r, const struct attn_result *res);
void api_v2_respond(struct api_call *c, const struct v2_infer *x, const struct attn_request *r,
                    const struct attn_result *res, size_t cap, bool checked);
bool api_v2_response_cap(const struct attn_request *r, const struct v2_infer *x, size_t *cap);

void api_v2_extras_write(struct api_buf *b, const struct v2_infer *x,
                         const struct attn_request *r, int k, bool *first);
void api_v2_extras_write_binary(struct api_buf *b, const struct v2_infer *x,
                                const struct attn_request *r, int k);

/* sequence_start (api/v2/v2_seq.c): api_v2_seq_create makes the
 * sequence's new session from the start's request r and inputs in,
 * detached (x->sess, x->fresh), and holds the earlier sequence of the id
 * if any (x->old: its requests wait); api_v2_seq_commit, once the start
 * is answered 200, puts the new session in place over the earlier one (in
 * one journal record) and holds it as x->sess, or, for a start that also
 * ends the sequence, only deletes the earlier one, or turns the answer
 * into the error; false / the error answered. */
bool api_v2_seq_create(struct api_call *c, struct v2_infer *x, const struct attn_request *r,
                       const struct attn_inputs *in);
void api_v2_seq_commit(struct api_call *c, struct v2_infer *x);

/* The end of a sequence request: a start not put in place is dropped and
 * the earlier sequence goes on as it was; anything else held is released
 * (a sequence_end answered removed its session with its pass, in the
 * pass's one journal record: sess_query's end; one refused changed
 * nothing, and the sequence goes on). */
void api_v2_seq_let_go(struct api_call *c, struct v2_infer *x);

/* The name of the session holding sequence id (api/v2/v2_seq.c; a positive
 * integer or a string of 1 to 63 bytes) into name[SESS_NAME_MAX]; false
 * for any other id. */
bool api_v2_seq_name(const json_t *id, char *name);

/* The same for the integer id num (1..2^64-1: Triton's ids are uint64,
 * beyond what a jansson integer holds). */
void api_v2_seq_name_num(uint64_t num, char *name);

#endif
