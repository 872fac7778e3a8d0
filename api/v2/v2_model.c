/*
 * api/v2/v2_model.c — the options of current models (DESIGN.md part 2) in an
 * Open Inference Protocol v2 request. The protocol's parameters are
 * scalars, so /v1's objects are spelt flat: softcap, window_left,
 * window_right, window_sinks, rope_base, rope_pairs, rope_dims,
 * rope_scaling (the type) and rope_<parameter>; arrays travel as inputs:
 * sink_logits [h] (FP64, FP32, FP16 or BF16, kept as doubles as /v1's
 * sink_logit is, rounded only to an FP16/BF16 request's format),
 * positions_q / segments_q [n] or [B,n] and
 * positions_k / segments_k [L] or [B,L] (INT32/INT64); and a sequence's
 * kv_dtype. Values are checked as /v1 checks them, with errors at the
 * parameter or input at fault.
 */
#include "api/v2/v2_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^53, as api/read_model.c: positions and segment ids. */
#define V2_INT_MAX 9007199254740992LL

/* Pointer "/inputs/<index>" of slot t, or of its member suffix. */
static const char *input_path(char *out, const struct v2_tensor *t,
                              const char *suffix)
{
    char p[API_PATH_MAX];

    api_pointer_index(p, sizeof p, "/inputs", t->index);
    if (*suffix)
        return api_pointer_key(out, API_PATH_MAX, p, suffix);
    memcpy(out, p, API_PATH_MAX);
    return out;
}

static bool read_window(struct api_call *c, struct v2_infer *x)
{
    static const char *const keys[] = {"window_left", "window_right",
                                       "window_sinks"};
    int64_t *dst[3] = {&x->window.left, &x->window.right, &x->window.sinks};
    char p[API_PATH_MAX];

    memset(&x->window, 0, sizeof x->window);
    x->window.left = x->window.right = -1;
    for (int i = 0; i < 3; i++) {
        const json_t *v = member(x->params, keys[i]);
        if (!v)
            continue;
        if (!api_window_side(v, dst[i])) {       /* /v1's window: 2.0 too */
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(p, sizeof p,
                     "/parameters", keys[i]), "%s must be an integer >= 0 "
                     "(at most 2^53)", keys[i]);
            return false;
        }
        x->window.on = true;
    }
    return true;
}

/* The input sink_logits [h] -> x->sinks (doubles), with softmax "sink". */
static bool read_sinks(struct api_call *c, struct v2_infer *x, size_t h)
{
    const struct v2_tensor *t = &x->t[V2_SINKS];
    char p[API_PATH_MAX];
    size_t i;

    if (!t->present)
        return true;
    if (x->p.softmax != ATTN_SOFTMAX_SINK || member(x->params, "sink_logit")) {
        api_fail(c, API_ERR_INVALID_FIELD, input_path(p, t, ""), "the input "
                 "sink_logits needs softmax \"sink\" and no sink_logit parameter");
        return false;
    }
    if (t->rank != 1 || t->shape[0] != h) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, input_path(p, t, "shape"),
                 "sink_logits is [h] = [%zu] (one per query head)", h);
        return false;
    }
    if (!(x->sinks = malloc(h * sizeof *x->sinks))) {   /* h fits: t holds h */
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return false;
    }
    for (i = 0; i < h; i++)
        x->sinks[i] = x->dt == ATTN_F32 && !t->wide ? (double)((const float *)t->data)[i]
                                                    : ((const double *)t->data)[i];
    x->p.sink_logits = x->sinks;
    x->p.sink_logit = x->sinks[0];
    return true;
}

/* kv_dtype: how a sequence's session stores K and V (/v1/sessions'
 * reader); nothing else keeps a cache. */
static bool read_kv_dtype(struct api_call *c, struct v2_infer *x)
{
    const json_t *v = member(x->params, "kv_dtype");

    if (v && !x->seq) {
        api_fail(c, API_ERR_INVALID_FIELD, "/parameters/kv_dtype", "kv_dtype is how a "
                 "sequence's session stores K and V: it needs a sequence_id");
        return false;
    }
    return api_read_kv_dtype(c, v, "/parameters/kv_dtype", x->dt, x->half, &x->kv_store);
}

bool api_v2_read_model(struct api_call *c, struct v2_infer *x,
                       const struct attn_shape *s)
{
    return read_window(c, x) &&
           api_read_softcap(c, member(x->params, "softcap"), "/parameters/softcap",
                            &x->p.softcap) &&
           api_read_rope_flat(c, x->params, "/parameters", s->d_k, &x->p) &&
           read_sinks(c, x, s->h) && read_kv_dtype(c, x);
}

bool api_v2_refuse_seqs(struct api_call *c, const struct v2_infer *x)
{
    char p[API_PATH_MAX];

    for (int i = V2_PQ; i <= V2_SK; i++)
        if (x->t[i].present) {
            api_fail(c, API_ERR_INVALID_FIELD, input_path(p, &x->t[i], ""),
                     "%s: a sequence's positions continue from its length "
                     "(one sequence, no segments)", api_v2_slot_names[i]);
            return false;
        }
    return true;
}

/* The pointer below path (into out) of the *left-th number of JSON data
 * v, flat or nested, in the order it was read (row-major); false (with
 * *left counted down) when v holds fewer. */
static bool leaf_pointer(const json_t *v, size_t *left, const char *path, char *out)
{
    char sub[API_PATH_MAX];

    if (!json_is_array(v)) {
        if (*left == 0) {
            memcpy(out, path, API_PATH_MAX);
            return true;
        }
        (*left)--;
        return false;
    }
    for (size_t j = 0; j < json_array_size(v); j++)
        if (leaf_pointer(json_array_get(v, j), left,
                         api_pointer_index(sub, sizeof sub, path, j), out))
            return true;
    return false;
}

/* The refusal of element i of t (slot), out of [lo, 2^53]: at that
 * element of its JSON data (/inputs/<index>/data/...), or at the input
 * when its data came as binary, the message naming it by its indices. */
static void refuse_seq_element(struct api_call *c, const struct v2_infer *x,
                               const struct v2_tensor *t, enum v2_slot slot, size_t i,
                               int64_t lo)
{
    char p[API_PATH_MAX], data_path[API_PATH_MAX], at[48];
    const json_t *in = json_array_get(member(x->hdr, "inputs"), t->index);
    const json_t *data = json_is_object(in) ? member(in, "data") : NULL;
    size_t left = i;

    if (!data || !leaf_pointer(data, &left, input_path(data_path, t, "data"), p))
        input_path(p, t, "");
    size_t len = t->shape[t->rank - 1];
    if (t->rank == 2)
        snprintf(at, sizeof at, "[%zu][%zu]", i / len, i % len);
    else
        snprintf(at, sizeof at, "[%zu]", i);
    api_fail(c, API_ERR_INVALID_FIELD, p, "%s%s is %lld: expected %s", api_v2_slot_names[slot],
             at, (long long)((const int64_t *)t->data)[i],
             lo < 0 ? "an integer of magnitude at most 2^53"
                    : "an integer >= 0 (at most 2^53)");
}

/* One of positions_q/k, segments_q/k (slot): [len] or [1|B, len], values
 * in [lo, 2^53]; its row count into *batches. */
static bool seq_input(struct api_call *c, const struct v2_infer *x, enum v2_slot slot,
                      size_t len, size_t B, int64_t lo, size_t *batches)
{
    char p[API_PATH_MAX];
    const struct v2_tensor *t = &x->t[slot];
    const int64_t *d = t->data;
    size_t i;

    *batches = t->rank == 2 ? t->shape[0] : 1;
    if (t->rank > 2 || t->shape[t->rank - 1] != len ||
        (*batches != 1 && *batches != B)) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, input_path(p, t, "shape"),
                 "%s is [%zu] or [B,%zu] with B = %zu", api_v2_slot_names[slot],
                 len, len, B);
        return false;
    }
    for (i = 0; i < t->count; i++)
        if (d[i] < lo || d[i] > V2_INT_MAX) {
            refuse_seq_element(c, x, t, slot, i, lo);
            return false;
        }
    return true;
}

/* A copy of t's data with `rows` rows ([len] repeated when t has one). */
static int64_t *seq_copy(const struct v2_tensor *t, size_t len, size_t rows)
{
    size_t have = t->rank == 2 ? t->shape[0] : 1, r;
    int64_t *out = malloc(rows * len * sizeof *out);  /* fits: B*len was read */

    if (!out)
        return NULL;
    for (r = 0; r < rows; r++)
        memcpy(out + r * len, (const int64_t *)t->data + (have == 1 ? 0 : r * len),
               len * sizeof *out);
    return out;
}

bool api_v2_read_seqs(struct api_call *c, struct v2_infer *x,
                      const struct attn_shape *s)
{
    const struct v2_tensor *pq = &x->t[V2_PQ], *pk = &x->t[V2_PK];
    const struct v2_tensor *sq = &x->t[V2_SQ], *sk = &x->t[V2_SK];
    struct api_seqs *o = &x->seqs;
    size_t B = s->B ? s->B : 1, bq = 0, bk = 0, rows;
    char p[API_PATH_MAX];

    if ((pq->present && !seq_input(c, x, V2_PQ, s->n, B, 0, &o->pos_q_batches)) ||
        (pk->present && !seq_input(c, x, V2_PK, s->L, B, 0, &o->pos_k_batches)) ||
        (sq->present && !seq_input(c, x, V2_SQ, s->n, B, -V2_INT_MAX, &bq)) ||
        (sk->present && !seq_input(c, x, V2_SK, s->L, B, -V2_INT_MAX, &bk)))
        return false;
    if (sq->present != sk->present) {
        api_fail(c, API_ERR_INVALID_FIELD, input_path(p, sq->present ? sq : sk, ""),
                 "segments_q and segments_k go together");
        return false;
    }
    rows = bq > bk ? bq : bk;
    if ((pq->present && !(o->pos_q = seq_copy(pq, s->n, o->pos_q_batches))) ||
        (pk->present && !(o->pos_k = seq_copy(pk, s->L, o->pos_k_batches))) ||
        (sq->present && (!(o->seg_q = seq_copy(sq, s->n, rows)) ||
                         !(o->seg_k = seq_copy(sk, s->L, rows))))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL, "out of memory");
        return false;
    }
    o->seg_batches = rows;
    return true;
}
