/*
 * core/verify_session.c — the checks of /v1/verify that depend on token
 * positions (ids 14 and 16): RoPE turns a common key bias into a shift per
 * position, and decoding one row at a time through a session's KV cache
 * (kv_append / kv_attend) equals the stateless request.
 */
#include "verify_impl.h"

#include <math.h>
#include <string.h>

#include "kv.h"
#include "rope.h"

/* ---- check 14: RoPE --------------------------------------------------- */

/* True when x [d] is zero in its first r dims (the ones RoPE turns). */
static bool unrotated(const double *x, size_t r)
{
    for (size_t i = 0; i < r; i++)
        if (x[i] != 0.0)
            return false;
    return true;
}

/* Why RoPE leaves the common key bias one shift per query row here, or
 * NULL. The shift of score (i, j) is (R(P_q(i)) (q_i + bQ)) . (R(P_k(j)) bK)
 * plus the unrotated dims' product: one number per row when every key is at
 * one position, or when bK, or every q_i + bQ, is zero in the rotated dims. */
const char *verify_rope_keeps_shift(const struct vx *c)
{
    struct attn_params p = {.rope_dims = c->in->rope ? c->in->rope_dims : 0};
    const int64_t *pk = c->in->pos_k;
    size_t r = attn_rope_dims(&p, c->dk), dk = c->dk;
    bool apart = !pk, q_turns = false;
    for (size_t j = 1; pk && j < c->L; j++)
        apart = apart || pk[j] != pk[0];
    if (!apart)
        return "Every key is at one position: RoPE turns every key alike, so the key "
               "bias stays one shift per query row.";
    if (unrotated(c->bk, r))
        return "bias.k is zero in the dims RoPE turns (rope.dims), so it stays one shift "
               "per query row.";
    for (size_t i = 0; i < c->n && !q_turns; i++)
        for (size_t d = 0; d < r && !q_turns; d++)
            q_turns = c->q[i * dk + d] + (c->bq ? c->bq[d] : 0.0) != 0.0;
    return q_turns ? NULL
                   : "Every q_i + bQ is zero in the dims RoPE turns (rope.dims), so the "
                     "key bias stays one shift per query row.";
}

enum core_status verify_check_rope(struct vx *c, struct verify_check *ck)
{
    if (!c->bk)
        return verify_ck_na(ck, "no bias.k was given");
    if (c->dk % 2)
        return verify_ck_na(ck, "RoPE rotates pairs of dimensions, and d_k is odd.");
    if (c->L < 2)
        return verify_ck_na(ck, "With one key every weight is 1, whatever the shift.");
    const char *same = verify_rope_keeps_shift(c);
    if (same)
        return verify_ck_na(ck, same);
    size_t n = c->n, L = c->L;
    struct vrun r = verify_base_run(c, ATTN_SOFTMAX_STANDARD, C_Q);
    struct vpass a, b;
    r.rope = true;
    r.positions = true;
    if (c->in->rope) {
        r.rope_base = c->in->rope_base;
        r.rope_pairs = c->in->rope_pairs;
    }
    TRY(verify_pass(c, &r, &a));
    r.bk = c->bk;
    TRY(verify_pass(c, &r, &b));
    double *sr, *s0, *spread;
    NEED(sr = verify_sub(c, b.s, a.s, n * L));
    NEED(s0 = verify_sub(c, c->p[0][C_BOTH].s, c->p[0][C_Q].s, n * L));
    NEED(spread = verify_dbl(c, n, 1));
    for (size_t i = 0; i < n; i++) {
        const double *x = sr + i * L;
        double lo = x[0], hi = x[0];
        for (size_t j = 1; j < L; j++) {
            lo = x[j] < lo ? x[j] : lo;
            hi = x[j] > hi ? x[j] : hi;
        }
        spread[i] = hi - lo;
    }
    ck->expect_change = true;
    ck->max_abs_diff = verify_maxdiff(a.w, b.w, n * L);
    verify_ck_note(ck, "RoPE base %g, %s pairs%s; %s; passes when the weights change.",
            r.rope_base, r.rope_pairs == ATTN_ROPE_HALF ? "half" : "interleaved",
            c->in->rope ? " (the request's)" : " (the default, as the request "
            "has none)", c->in->pos_q || c->in->pos_k ? "at the request's positions"
            : "keys at positions 0..L-1, queries at L-n..L-1");
    TRY(verify_ck_mat(ck, "score_shift_with_rope", n, L, sr));
    TRY(verify_ck_mat(ck, "score_shift_without_rope", n, L, s0));
    TRY(verify_ck_vec(ck, "score_shift_spread", n, spread));
    TRY(verify_ck_mat(ck, "weights_without_k_bias", n, L, a.w));
    return verify_ck_mat(ck, "weights_with_k_bias", n, L, b.w);
}

/* ---- check 16: a session's KV cache ------------------------------------ */

/* Append rows [from, from+m) of k, v to cache kc. */
static enum core_status kv_rows(struct vx *c, struct kv_cache *kc,
                                const struct attn_params *p, size_t from,
                                size_t m)
{
    bool ok = true;
    struct attn_inputs in;
    memset(&in, 0, sizeof in);
    in.k = verify_cast(c, c->k + from * c->dk, m * c->dk, &ok);
    in.v = verify_cast(c, c->v + from * c->dv, m * c->dv, &ok);
    in.bias_k = verify_cast(c, c->bk, c->dk, &ok);
    in.bias_v = verify_cast(c, c->bv, c->dv, &ok);
    in.bias_k_heads = in.bias_v_heads = 1;
    if (!ok)
        return c->err;
    return kv_append(kc, p, &in, m);
}

/* Attend query row i of q through the cache; weights [len] and output
 * [d_v] into w, o (double). */
static enum core_status kv_query(struct vx *c, const struct kv_cache *kc,
                                 const struct vrun *r, size_t i, double *w,
                                 double *o)
{
    struct attn_request rq;
    struct attn_inputs in;
    struct vrun one = *r;
    size_t len = kv_length(kc), es = attn_dtype_size(c->dt);
    one.q = r->q + i * c->dk;
    one.n = 1;
    one.L = len;
    one.k = one.v = NULL;
    verify_request(c, &one, &rq);
    TRY(verify_inputs(c, &one, &rq, &in));
    struct attn_result res;
    memset(&res, 0, sizeof res);
    NEED(res.scores = verify_bytes(c, len, es));
    NEED(res.weights = verify_bytes(c, len, es));
    NEED(res.output = verify_bytes(c, c->dv, es));
    TRY(kv_attend(kc, &rq, &in, &res, c->ws));
    verify_unload(c, res.weights, w, len);
    verify_unload(c, res.output, o, c->dv);
    return CORE_OK;
}

static enum core_status decode_steps(struct vx *c, struct kv_cache *kc,
                                     const struct vrun *r, double *dec_w,
                                     double *dec_o)
{
    struct attn_request rq;
    verify_request(c, r, &rq);
    size_t n = c->n, L = c->L, pre = L - n;
    if (pre)
        TRY(kv_rows(c, kc, &rq.params, 0, pre));
    for (size_t i = 0; i < n; i++) {
        TRY(kv_rows(c, kc, &rq.params, pre + i, 1));
        TRY(kv_query(c, kc, r, i, dec_w + i * L, dec_o + i * c->dv));
    }
    return CORE_OK;
}

/* Stateless attention with queries at L-n..L-1 (causal bottom-right) into
 * full, vs. a cache that is prefilled with L-n rows and then gets one key
 * per query row, attending that row after each append (dec_w [n][L], dec_o
 * [n][d_v]). Both with the request's softmax and biases and the given RoPE. */
static enum core_status decode_compare(struct vx *c, bool rope, double base,
                                       enum attn_rope_pairs pairs,
                                       double *dec_w, double *dec_o,
                                       struct vpass *full)
{
    struct vrun r = verify_base_run(c, c->in->softmax, C_BOTH);
    r.bv = c->bv;
    r.rope = rope;
    r.rope_base = base;
    r.rope_pairs = pairs;
    r.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    TRY(verify_pass(c, &r, full));
    struct kv_cache *kc = kv_new(c->dt, 1, c->dk, c->dv);
    if (!kc)
        return CORE_ENOMEM;
    enum core_status st = decode_steps(c, kc, &r, dec_w, dec_o);
    kv_free(kc);
    return st;
}

enum core_status verify_check_session(struct vx *c, struct verify_check *ck)
{
    size_t n = c->n, L = c->L, dv = c->dv;
    if (n > L)
        return verify_ck_na(ck, "q has more rows than k: causal decoding would leave "
                     "the first queries without keys.");
    bool rope2 = !c->in->rope && c->dk % 2 == 0;  /* add a RoPE variant */
    double *w[2], *o[2];
    struct vpass full[2];
    double m = 0.0;
    for (int v = 0; v < (rope2 ? 2 : 1); v++) {
        bool rope = v == 1;
        NEED(w[v] = verify_dbl(c, n, L));
        NEED(o[v] = verify_dbl(c, n, dv));
        TRY(decode_compare(c, rope ? true : c->in->rope,
                           c->in->rope ? c->in->rope_base : 10000.0,
                           c->in->rope ? c->in->rope_pairs
                                       : ATTN_ROPE_INTERLEAVED,
                           w[v], o[v], &full[v]));
        m = verify_max2(m, verify_maxdiff(w[v], full[v].w, n * L));
        m = verify_max2(m, verify_maxdiff(o[v], full[v].o, n * dv));
    }
    ck->max_abs_diff = m;
    verify_ck_note(ck, "The cache is prefilled with the first L-n keys, then gets one "
            "key per query row and attends that row; the recomputation is "
            "causal (bottom-right) over all keys. With the request's softmax "
            "and biases, %s. The cache holds %s rows%s.", c->in->rope ? "with the request's RoPE"
            : rope2 ? "once without and once with RoPE (base 10000)"
            : "without RoPE (d_k is odd)", attn_dtype_name(c->dt),
            c->dt == ATTN_F32 ? " (a float16 or bfloat16 request runs in float32 too: "
            "kv_dtype_bound bounds the narrower caches a session may keep)" : "");
    TRY(verify_ck_mat(ck, "weights_decoded", n, L, w[0]));
    TRY(verify_ck_mat(ck, "weights_recomputed", n, L, full[0].w));
    TRY(verify_ck_mat(ck, "output_decoded", n, dv, o[0]));
    TRY(verify_ck_mat(ck, "output_recomputed", n, dv, full[0].o));
    if (rope2) {
        TRY(verify_ck_mat(ck, "weights_decoded_rope", n, L, w[1]));
        TRY(verify_ck_mat(ck, "weights_recomputed_rope", n, L, full[1].w));
    }
    return CORE_OK;
}
