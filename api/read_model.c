/*
 * api/read_model.c — the request fields of current models (DESIGN.md part
 * 2): explicit positions, packed-sequence segments, sliding windows with
 * sinks, softcap, per-head sink logits, and RoPE with partial rotary and
 * frequency scaling. Each reader turns a jansson value into the fields of
 * struct attn_params / attn_request that core/attn.h defines and answers
 * every bad value with a 422 naming its JSON pointer, before anything is
 * computed; also a session's kv_dtype (/v1/sessions and OIP v2's
 * sequence_start). Integer arrays (positions, segments) are [n] / [L] or,
 * with a batch, [B][n] / [B][L]; a [n] array is shared by every batch
 * element.
 *
 * Integers here are exact JSON integers (or integral reals, see get_int)
 * with |x| <= 2^53: positions and window sizes are added and subtracted in
 * core without overflow, and every one is exact as a double (RoPE angles).
 */
#include "api/read.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^53: the largest position, window side or segment id magnitude. */
#define API_INT_MAX 9007199254740992LL

/* A member of obj, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static const char *sub(char *out, const char *prefix, const char *key)
{
    return api_pointer_key(out, API_PATH_MAX, prefix, key);
}

/* A JSON integer in [lo, hi], or an integral real there (a body holding an
 * integer literal beyond 64 bits is parsed with every integer as a real,
 * see api/reply.c). */
static bool get_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
    double x;

    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < lo || i > hi)
            return false;
        *out = (int64_t)i;
        return true;
    }
    if (!json_is_real(v))
        return false;
    x = json_real_value(v);
    if (!(x >= (double)lo && x <= (double)hi) || x != floor(x))
        return false;
    *out = (int64_t)x;
    return true;
}

static bool get_finite(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

/* ---- integer rows: positions and segments ------------------------------- */

/* One integer vector (or [B][len] matrix) being read. */
struct int_rows {
    const char *what;               /* "n" or "L", for messages */
    size_t len;                     /* entries a row must have */
    size_t batch;                   /* B (1 without a batch) */
    int64_t lo, hi;                 /* accepted values */
    int64_t *data;                  /* out: malloc'd [batches][len] */
    size_t batches;                 /* out: 1 or batch */
};

/* The entries of one row arr (path p) into dst. */
static bool int_row(struct api_call *c, const json_t *arr, const char *p,
                    const struct int_rows *ir, int64_t *dst)
{
    char pi[API_PATH_MAX];
    size_t i;

    if (json_array_size(arr) != ir->len) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, p, "expected %zu entries (%s), got %zu",
                 ir->len, ir->what, json_array_size(arr));
        return false;
    }
    for (i = 0; i < ir->len; i++)
        if (!get_int(json_array_get(arr, i), ir->lo, ir->hi, &dst[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, p, i),
                     ir->lo < 0 ? "expected an integer of magnitude at most 2^53" :
                     "expected an integer >= 0 (at most 2^53)");
            return false;
        }
    return true;
}

/* [len] or [1 or batch][len] integers at v (path p). */
static bool read_int_rows(struct api_call *c, const json_t *v, const char *p,
                          size_t *budget, struct int_rows *ir)
{
    char pb[API_PATH_MAX];
    size_t rows = 1, count, bytes, b;
    bool nested;

    if (!json_is_array(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, p, "expected an array of integers "
                 "([%s], or [B][%s] with a batch)", ir->what, ir->what);
        return false;
    }
    nested = json_array_size(v) > 0 && json_is_array(json_array_get(v, 0));
    if (nested) {
        rows = json_array_size(v);
        if (rows != 1 && rows != ir->batch) {
            api_fail(c, API_ERR_SHAPE_MISMATCH, p, "expected [%s] or [B][%s] with "
                     "B = %zu (the batch), got %zu rows", ir->what, ir->what,
                     ir->batch, rows);
            return false;
        }
    }
    if (!core_mul(rows, ir->len, &count) || count > *budget) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, p, "more numbers than the request's "
                 "remaining limit of %zu (--max-elements)", *budget);
        return false;
    }
    if (!core_mul(count, sizeof *ir->data, &bytes) ||
        !(ir->data = malloc(bytes ? bytes : 1))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, p, "out of memory");
        return false;
    }
    for (b = 0; b < rows; b++) {
        const json_t *row = nested ? json_array_get(v, b) : v;
        const char *pr = nested ? api_pointer_index(pb, sizeof pb, p, b) : p;
        if (!json_is_array(row)) {
            api_fail(c, API_ERR_INVALID_FIELD, pr, "expected an array of integers");
            break;
        }
        if (!int_row(c, row, pr, ir, ir->data + b * ir->len))
            break;
    }
    if (b < rows) {
        free(ir->data);
        ir->data = NULL;
        return false;
    }
    *budget -= count;
    ir->batches = rows;
    return true;
}

/* A [len] row shared by every batch element copied into [batch][len]
 * (segments of q and k share one batch count in core). */
static bool int_rows_widen(struct api_call *c, const char *p, size_t *budget,
                           struct int_rows *ir)
{
    size_t count, bytes, b;
    int64_t *wide;

    if (ir->batches == ir->batch)
        return true;
    if (!core_mul(ir->batch, ir->len, &count) || count - ir->len > *budget) {
        api_fail(c, API_ERR_LIMIT_EXCEEDED, p, "more numbers than the request's "
                 "remaining limit of %zu (--max-elements)", *budget);
        return false;
    }
    if (!core_mul(count, sizeof *wide, &bytes) || !(wide = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, p, "out of memory");
        return false;
    }
    for (b = 0; b < ir->batch; b++)
        memcpy(wide + b * ir->len, ir->data, ir->len * sizeof *wide);
    *budget -= count - ir->len;
    free(ir->data);
    ir->data = wide;
    ir->batches = ir->batch;
    return true;
}

static size_t batch_of(const struct attn_shape *s)
{
    return s->B ? s->B : 1;
}

bool api_read_seqs(struct api_call *c, const json_t *positions,
                   const json_t *segments, const char *prefix,
                   const struct attn_shape *s, size_t *budget,
                   struct api_seqs *out)
{
    static const char *const fields[] = {"q", "k", NULL};
    char pp[API_PATH_MAX], ps[API_PATH_MAX], p[API_PATH_MAX];
    struct int_rows pq = {"n", s->n, batch_of(s), 0, API_INT_MAX, NULL, 0};
    struct int_rows pk = {"L", s->L, batch_of(s), 0, API_INT_MAX, NULL, 0};
    struct int_rows sq = {"n", s->n, batch_of(s), -API_INT_MAX, API_INT_MAX, NULL, 0};
    struct int_rows sk = {"L", s->L, batch_of(s), -API_INT_MAX, API_INT_MAX, NULL, 0};
    const json_t *v;

    memset(out, 0, sizeof *out);
    sub(pp, prefix, "positions");
    sub(ps, prefix, "segments");
    if (positions) {
        if (!json_is_object(positions)) {
            api_fail(c, API_ERR_INVALID_FIELD, pp, "expected {\"q\":[…],\"k\":[…]}");
            return false;
        }
        if (!api_check_fields(c, positions, pp, fields))
            return false;
        if ((v = member(positions, "q")) &&
            !read_int_rows(c, v, sub(p, pp, "q"), budget, &pq))
            goto fail;
        if ((v = member(positions, "k")) &&
            !read_int_rows(c, v, sub(p, pp, "k"), budget, &pk))
            goto fail;
    }
    if (segments) {
        if (!json_is_object(segments)) {
            api_fail(c, API_ERR_INVALID_FIELD, ps, "expected {\"q\":[…],\"k\":[…]}");
            goto fail;
        }
        if (!api_check_fields(c, segments, ps, fields))
            goto fail;
        for (int i = 0; i < 2; i++) {
            const char *key = fields[i];
            if (!member(segments, key)) {
                api_fail(c, API_ERR_INVALID_FIELD, sub(p, ps, key),
                         "segments need both \"q\" and \"k\"");
                goto fail;
            }
            if (!read_int_rows(c, member(segments, key), sub(p, ps, key),
                               budget, i ? &sk : &sq))
                goto fail;
        }
        if (sq.batches != sk.batches &&
            (!int_rows_widen(c, sub(p, ps, "q"), budget, &sq) ||
             !int_rows_widen(c, sub(p, ps, "k"), budget, &sk)))
            goto fail;
    }
    out->pos_q = pq.data;
    out->pos_q_batches = pq.batches;
    out->pos_k = pk.data;
    out->pos_k_batches = pk.batches;
    out->seg_q = sq.data;
    out->seg_k = sk.data;
    out->seg_batches = sq.batches;
    return true;
fail:
    free(pq.data);
    free(pk.data);
    free(sq.data);
    free(sk.data);
    return false;
}

void api_seqs_request(const struct api_seqs *q, struct attn_request *r)
{
    r->pos_q = q->pos_q;
    r->pos_q_batches = q->pos_q ? q->pos_q_batches : 0;
    r->pos_k = q->pos_k;
    r->pos_k_batches = q->pos_k ? q->pos_k_batches : 0;
    r->seg_q = q->seg_q;
    r->seg_k = q->seg_k;
    r->seg_batches = q->seg_q ? q->seg_batches : 0;
}

void api_seqs_free(struct api_seqs *q)
{
    free(q->pos_q);
    free(q->pos_k);
    free(q->seg_q);
    free(q->seg_k);
    memset(q, 0, sizeof *q);
}

/* ---- window, softcap, sinks ---------------------------------------------- */

bool api_read_window(struct api_call *c, const json_t *v, const char *path,
                     struct attn_window *w)
{
    static const char *const fields[] = {"left", "right", "sinks", NULL};
    int64_t *dst[3] = {&w->left, &w->right, &w->sinks};
    char p[API_PATH_MAX];

    memset(w, 0, sizeof *w);
    if (!v)
        return true;
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "expected {\"left\":…,\"right\":…,\"sinks\":…}");
        return false;
    }
    if (!api_check_fields(c, v, path, fields))
        return false;
    for (int i = 0; i < 3; i++) {
        const json_t *e = member(v, fields[i]);
        *dst[i] = i < 2 ? -1 : 0;       /* a missing side is unbounded */
        if (e && !api_window_side(e, dst[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, sub(p, path, fields[i]),
                     "expected an integer >= 0 (at most 2^53)");
            return false;
        }
    }
    w->on = true;
    return true;
}

bool api_window_side(const json_t *v, int64_t *out)
{
    return get_int(v, 0, API_INT_MAX, out);
}

bool api_read_softcap(struct api_call *c, const json_t *v, const char *path,
                      double *softcap)
{
    *softcap = 0;
    if (!v)
        return true;
    if (!get_finite(v, softcap) || !(*softcap > 0)) {
        *softcap = 0;
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected a positive number "
                 "(the cap c of c*tanh(s/c))");
        return false;
    }
    return true;
}

bool api_read_sinks(struct api_call *c, const json_t *obj, const char *prefix,
                    size_t heads, struct attn_params *p, double **sinks)
{
    char ps[API_PATH_MAX], pi[API_PATH_MAX];
    const json_t *s = member(obj, "sink_logit");
    size_t i, bytes;

    *sinks = NULL;
    p->sink_logits = NULL;
    if (!api_read_softmax_ex(c, obj, prefix, true, &p->softmax, &p->sink_logit))
        return false;
    if (!json_is_array(s))
        return true;
    sub(ps, prefix, "sink_logit");
    if (json_array_size(s) != heads) {
        api_fail(c, API_ERR_SHAPE_MISMATCH, ps, "expected %zu sink logits (one per "
                 "query head), got %zu", heads, json_array_size(s));
        return false;
    }
    if (!core_mul(heads, sizeof **sinks, &bytes) || !(*sinks = malloc(bytes))) {
        api_fail(c, API_ERR_CAPACITY_EXHAUSTED, ps, "out of memory");
        return false;
    }
    for (i = 0; i < heads; i++)
        if (!get_finite(json_array_get(s, i), &(*sinks)[i])) {
            free(*sinks);
            *sinks = NULL;
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_index(pi, sizeof pi, ps, i),
                     "expected a finite number");
            return false;
        }
    if (!api_read_round_half(c, ps, true, true, *sinks, heads)) {
        free(*sinks);
        *sinks = NULL;
        return false;
    }
    p->sink_logit = (*sinks)[0];
    p->sink_logits = *sinks;
    return true;
}

bool api_check_float32_params(struct api_call *c, const struct attn_params *p,
                              size_t heads, const char *prefix)
{
    char ps[API_PATH_MAX], pi[API_PATH_MAX];
    const char *name = p->scale > FLT_MAX ? "scale" : p->softcap > FLT_MAX ? "softcap" : NULL;

    if (p->dtype != ATTN_F32)
        return true;
    if (name) {
        /* the bound exactly: %.9g's 3.40282347e+38 lies above FLT_MAX */
        api_fail(c, API_ERR_INVALID_FIELD, sub(ps, prefix, name), "expected a positive "
                 "number up to %.17g (the math runs in float32)", (double)FLT_MAX);
        return false;
    }
    if (p->softmax != ATTN_SOFTMAX_SINK)
        return true;
    sub(ps, prefix, "sink_logit");
    for (size_t i = 0; i < (p->sink_logits ? heads : 1); i++)
        if (fabs(p->sink_logits ? p->sink_logits[i] : p->sink_logit) > FLT_MAX) {
            api_fail(c, API_ERR_NON_FINITE, p->sink_logits
                     ? api_pointer_index(pi, sizeof pi, ps, i) : ps,
                     "number is outside the float32 range");
            return false;
        }
    return true;
}

bool api_read_kv_dtype(struct api_call *c, const json_t *v, const char *path,
                       enum attn_dtype dtype, enum api_half half, enum kv_store *out)
{
    static const char *const names[] = {"float32", "float16", "bfloat16", "int8", NULL};
    const char *s = json_string_value(v);
    int i;

    *out = half == API_HALF_F16 ? KV_STORE_F16
           : half == API_HALF_BF16 ? KV_STORE_BF16 : KV_STORE_SAME;
    if (!v)
        return true;
    if (dtype == ATTN_F64) {
        if (s && strcmp(s, "float64") == 0)
            return true;
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "a float64 session keeps a float64 cache: expected \"float64\"");
        return false;
    }
    for (i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            break;
    if (!s || !names[i]) {
        api_fail(c, API_ERR_INVALID_FIELD, path,
                 "expected \"float32\", \"float16\", \"bfloat16\" or \"int8\"");
        return false;
    }
    *out = (enum kv_store)i;    /* names[] follows enum kv_store for float32 caches */
    return true;
}

/* ---- RoPE ----------------------------------------------------------------- */

/* A scaling parameter: its name, where it goes, whether it must be given. */
struct scaling_param {
    const char *name;
    size_t offset;                  /* into struct attn_rope_scaling */
    bool required;
    double dflt;                    /* when not required and absent */
};

#define SP(name, req, dflt) {#name, offsetof(struct attn_rope_scaling, name), req, dflt}

static const struct scaling_type {
    const char *name;
    enum attn_rope_scaling_type type;
    struct scaling_param params[6];  /* up to a NULL name */
} scaling_types[] = {
    {"linear", ATTN_ROPE_SCALING_LINEAR, {SP(factor, true, 0)}},
    {"ntk", ATTN_ROPE_SCALING_NTK, {SP(factor, true, 0)}},
    {"llama3", ATTN_ROPE_SCALING_LLAMA3,
     {SP(factor, true, 0), SP(low_freq_factor, true, 0),
      SP(high_freq_factor, true, 0), SP(original_max_position, true, 0)}},
    {"yarn", ATTN_ROPE_SCALING_YARN,
     {SP(factor, true, 0), SP(original_max_position, true, 0),
      SP(beta_fast, false, 32), SP(beta_slow, false, 1),
      SP(attention_factor, false, 0)}},
};

#undef SP

static double *param_slot(struct attn_rope_scaling *sc, const struct scaling_param *sp)
{
    return (double *)((char *)sc + sp->offset);
}

/* Range of each parameter, checked once every parameter is read. Returns
 * the name of the parameter at fault (message in *msg), or NULL. */
static const char *scaling_check(const struct attn_rope_scaling *sc,
                                 const char **msg)
{
    if (!(sc->factor >= 1)) {
        *msg = "factor must be a number >= 1";
        return "factor";
    }
    if (sc->type == ATTN_ROPE_SCALING_LLAMA3) {
        if (!(sc->low_freq_factor > 0)) {
            *msg = "low_freq_factor must be a positive number";
            return "low_freq_factor";
        }
        if (!(sc->high_freq_factor > sc->low_freq_factor)) {
            *msg = "high_freq_factor must be greater than low_freq_factor";
            return "high_freq_factor";
        }
    }
    if (sc->type == ATTN_ROPE_SCALING_LLAMA3 || sc->type == ATTN_ROPE_SCALING_YARN) {
        double m = sc->original_max_position;
        if (!(m >= 1 && m <= (double)API_INT_MAX && m == floor(m))) {
            *msg = "original_max_position must be an integer >= 1";
            return "original_max_position";
        }
    }
    if (sc->type == ATTN_ROPE_SCALING_YARN) {
        if (!(sc->beta_slow > 0)) {
            *msg = "beta_slow must be a positive number";
            return "beta_slow";
        }
        if (!(sc->beta_fast >= sc->beta_slow)) {
            *msg = "beta_fast must be a number >= beta_slow";
            return "beta_fast";
        }
        if (!(sc->attention_factor >= 0)) {
            *msg = "attention_factor must be a positive number";
            return "attention_factor";
        }
    }
    return NULL;
}

/*
 * How a request spells RoPE. /v1 nests it: {"base","pairs","dims",
 * "scaling":{"type",parameters…}} (unknown members refused here). OIP v2
 * parameters are flat scalars: rope_base, rope_pairs, rope_dims,
 * rope_scaling (the type), rope_factor, rope_beta_fast, …, rope_truncate
 * (unknown members refused by the caller's list). Errors name the member as spelt.
 */
struct rope_spelling {
    const json_t *obj;              /* holds base, pairs, dims */
    const char *path;               /* obj's pointer */
    const json_t *scaling;          /* holds the type and parameters, or NULL */
    const char *scaling_path;
    const char *prefix;             /* of every member name: "" or "rope_" */
    const char *type_key;           /* "type" or "rope_scaling" */
    bool nested;                    /* /v1: refuse members not listed */
};

/* Pointer of member prefix+name below path. */
static const char *spelt(char *out, const char *path, const char *prefix,
                         const char *name)
{
    char key[64];

    snprintf(key, sizeof key, "%s%s", prefix, name);
    return sub(out, path, key);
}

static const json_t *spelt_member(const json_t *obj, const char *prefix,
                                  const char *name)
{
    char key[64];

    snprintf(key, sizeof key, "%s%s", prefix, name);
    return member(obj, key);
}

/* yarn's "truncate" (a boolean, default true as in Hugging Face's
 * _compute_yarn_parameters): false keeps the correction range unrounded,
 * as gpt-oss's config asks. */
static bool read_truncate(struct api_call *c, const struct rope_spelling *rs,
                          struct attn_rope_scaling *sc)
{
    const json_t *e = spelt_member(rs->scaling, rs->prefix, "truncate");
    char p[API_PATH_MAX];

    if (e && !json_is_boolean(e)) {
        api_fail(c, API_ERR_INVALID_FIELD, spelt(p, rs->scaling_path, rs->prefix,
                 "truncate"), "expected true or false");
        return false;
    }
    sc->no_truncate = e && json_is_false(e);
    return true;
}

static bool read_scaling(struct api_call *c, const struct rope_spelling *rs,
                         struct attn_rope_scaling *sc)
{
    static const char *const known[] = {"type", "factor", "low_freq_factor",
        "high_freq_factor", "original_max_position", "beta_fast", "beta_slow",
        "attention_factor", "truncate", NULL};
    const char *const *every = known + 1;
    const json_t *v = rs->scaling;
    const char *path = rs->scaling_path;
    char p[API_PATH_MAX];
    const char *allowed[9], *type = json_string_value(member(v, rs->type_key));
    const struct scaling_type *st = NULL;
    const char *bad, *msg = "";
    size_t i, j, n = 0;

    memset(sc, 0, sizeof *sc);
    if (!json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected {\"type\":…, parameters}");
        return false;
    }
    for (i = 0; type && i < sizeof scaling_types / sizeof scaling_types[0]; i++)
        if (strcmp(type, scaling_types[i].name) == 0)
            st = &scaling_types[i];
    if (!st) {
        api_fail(c, API_ERR_INVALID_FIELD, sub(p, path, rs->type_key),
                 "expected \"linear\", \"ntk\", \"llama3\" or \"yarn\"");
        return false;
    }
    allowed[n++] = "type";
    for (i = 0; st->params[i].name; i++)
        allowed[n++] = st->params[i].name;
    if (st->type == ATTN_ROPE_SCALING_YARN)
        allowed[n++] = "truncate";
    allowed[n] = NULL;
    /* Every type's members are known here: another type's is refused below
     * as such when it has a value, and one that is null counts as absent. */
    if (rs->nested && !api_check_fields(c, v, path, known))
        return false;
    for (i = 0; every[i]; i++) {        /* another type's parameter */
        for (j = 1; j < n && strcmp(allowed[j], every[i]) != 0; j++)
            ;
        if (j == n && spelt_member(v, rs->prefix, every[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, spelt(p, path, rs->prefix, every[i]),
                     "not a parameter of \"%s\" scaling", st->name);
            return false;
        }
    }
    sc->type = st->type;
    for (i = 0; st->params[i].name; i++) {
        const struct scaling_param *sp = &st->params[i];
        const json_t *e = spelt_member(v, rs->prefix, sp->name);
        double *slot = param_slot(sc, sp);
        spelt(p, path, rs->prefix, sp->name);
        *slot = sp->dflt;
        if (!e && sp->required) {
            api_fail(c, API_ERR_INVALID_FIELD, p, "\"%s\" scaling needs \"%s%s\"",
                     st->name, rs->prefix, sp->name);
            return false;
        }
        if (e && (!get_finite(e, slot) ||
                  (sp->offset == offsetof(struct attn_rope_scaling, attention_factor) &&
                   !(*slot > 0)))) {
            api_fail(c, API_ERR_INVALID_FIELD, p, "expected a %s number",
                     sp->required ? "finite" : "positive");
            return false;
        }
    }
    if (st->type == ATTN_ROPE_SCALING_YARN && !read_truncate(c, rs, sc))
        return false;
    if ((bad = scaling_check(sc, &msg))) {
        api_fail(c, API_ERR_INVALID_FIELD, spelt(p, path, rs->prefix, bad), "%s", msg);
        return false;
    }
    return true;
}

/* base, pairs, dims and scaling as rs spells them (RoPE is on). */
static bool read_rope(struct api_call *c, const struct rope_spelling *rs,
                      size_t d_k, struct attn_params *p)
{
    char pb[API_PATH_MAX];
    const json_t *e;
    const char *s;
    int64_t dims = (int64_t)d_k;
    bool dims_given = false;

    if ((e = spelt_member(rs->obj, rs->prefix, "base")) &&
        (!get_finite(e, &p->rope_base) || !(p->rope_base > 0))) {
        api_fail(c, API_ERR_INVALID_FIELD, spelt(pb, rs->path, rs->prefix, "base"),
                 "expected a positive number");
        return false;
    }
    if ((e = spelt_member(rs->obj, rs->prefix, "pairs"))) {
        s = json_string_value(e);
        if (!s || (strcmp(s, "interleaved") != 0 && strcmp(s, "half") != 0)) {
            api_fail(c, API_ERR_INVALID_FIELD, spelt(pb, rs->path, rs->prefix, "pairs"),
                     "expected \"interleaved\" or \"half\"");
            return false;
        }
        p->rope_pairs = strcmp(s, "half") == 0 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
    }
    if ((e = spelt_member(rs->obj, rs->prefix, "dims"))) {
        if (!get_int(e, 0, (int64_t)d_k, &dims) || dims % 2 != 0) {
            api_fail(c, API_ERR_INVALID_FIELD, spelt(pb, rs->path, rs->prefix, "dims"),
                     "expected an even integer in 0..%zu (d_k)", d_k);
            return false;
        }
        dims_given = true;
    }
    if (rs->scaling && !read_scaling(c, rs, &p->rope_scaling))
        return false;
    if (!dims_given && d_k % 2 != 0) {
        api_fail(c, API_ERR_INVALID_FIELD, rs->nested ? rs->path :
                 spelt(pb, rs->path, rs->prefix, "base"), "RoPE needs an even d_k "
                 "(got %zu), or an even \"dims\" to rotate", d_k);
        return false;
    }
    if (p->rope_scaling.type == ATTN_ROPE_SCALING_NTK && dims == 2) {
        api_fail(c, API_ERR_INVALID_FIELD, dims_given
                 ? spelt(pb, rs->path, rs->prefix, "dims")
                 : rs->nested ? rs->scaling_path : sub(pb, rs->path, rs->type_key),
                 "\"ntk\" scaling needs more than 2 rotated dims "
                 "(base' = base * factor^(r/(r-2)))");
        return false;
    }
    if (p->rope_scaling.type == ATTN_ROPE_SCALING_YARN && !(p->rope_base > 1)) {
        api_fail(c, API_ERR_INVALID_FIELD, spelt(pb, rs->path, rs->prefix, "base"),
                 "\"yarn\" scaling needs base > 1 (its ranges divide by ln base)");
        return false;
    }
    p->rope_dims = (size_t)dims;
    p->rope = dims > 0;     /* rotating no dims is no RoPE, exactly */
    return true;
}

static void rope_off(struct attn_params *p)
{
    p->rope = false;
    p->rope_base = 10000;
    p->rope_pairs = ATTN_ROPE_INTERLEAVED;
    p->rope_dims = 0;
    memset(&p->rope_scaling, 0, sizeof p->rope_scaling);
}

bool api_read_rope(struct api_call *c, const json_t *v, const char *path,
                   size_t d_k, struct attn_params *p)
{
    static const char *const fields[] = {"base", "pairs", "dims", "scaling", NULL};
    char ps[API_PATH_MAX];
    struct rope_spelling rs = {v, path, member(v, "scaling"),
                               sub(ps, path, "scaling"), "", "type", true};

    rope_off(p);
    if (!v || json_is_false(v))
        return true;
    if (!json_is_true(v) && !json_is_object(v)) {
        api_fail(c, API_ERR_INVALID_FIELD, path, "expected true, false or "
                 "{\"base\",\"pairs\",\"dims\",\"scaling\"}");
        return false;
    }
    if (json_is_object(v) && !api_check_fields(c, v, path, fields))
        return false;
    return read_rope(c, &rs, d_k, p);
}

bool api_read_rope_flat(struct api_call *c, const json_t *params,
                        const char *path, size_t d_k, struct attn_params *p)
{
    static const char *const on[] = {"base", "pairs", "dims", "scaling", NULL};
    static const char *const scaling_only[] = {"factor", "low_freq_factor",
        "high_freq_factor", "original_max_position", "beta_fast", "beta_slow",
        "attention_factor", "truncate", NULL};
    struct rope_spelling rs = {params, path, NULL, path, "rope_", "rope_scaling", false};
    char pb[API_PATH_MAX];
    bool any = false;
    int i;

    rope_off(p);
    for (i = 0; on[i]; i++)
        any = any || spelt_member(params, "rope_", on[i]);
    if (spelt_member(params, "rope_", "scaling"))
        rs.scaling = params;
    for (i = 0; !rs.scaling && scaling_only[i]; i++)
        if (spelt_member(params, "rope_", scaling_only[i])) {
            api_fail(c, API_ERR_INVALID_FIELD, spelt(pb, path, "rope_", scaling_only[i]),
                     "rope_%s needs rope_scaling (the scaling type)", scaling_only[i]);
            return false;
        }
    return !any || read_rope(c, &rs, d_k, p);
}

/* ---- echo (session objects) ---------------------------------------------- */

json_t *api_rope_json(const struct attn_params *p, size_t d_k)
{
    const struct attn_rope_scaling *sc = &p->rope_scaling;
    json_t *j, *s;
    size_t i, t;

    if (!p->rope)
        return json_false();
    j = json_pack("{s:f, s:s, s:I}", "base", p->rope_base, "pairs",
                  p->rope_pairs == ATTN_ROPE_HALF ? "half" : "interleaved",
                  "dims", (json_int_t)(p->rope_dims == ATTN_ROPE_DIMS_ZERO ? 0
                                       : p->rope_dims ? p->rope_dims : d_k));
    if (!j || sc->type == ATTN_ROPE_SCALING_NONE)
        return j;
    for (t = 0; t < sizeof scaling_types / sizeof scaling_types[0]; t++)
        if (scaling_types[t].type == sc->type)
            break;
    if (t == sizeof scaling_types / sizeof scaling_types[0] ||
        !(s = json_pack("{s:s}", "type", scaling_types[t].name))) {
        json_decref(j);
        return NULL;
    }
    for (i = 0; scaling_types[t].params[i].name; i++) {
        const struct scaling_param *sp = &scaling_types[t].params[i];
        double x = *param_slot((struct attn_rope_scaling *)sc, sp);
        if (sp->offset == offsetof(struct attn_rope_scaling, attention_factor) && x == 0)
            x = 0.1 * log(sc->factor) + 1;  /* the default, as core resolves it */
        /* original_max_position is an integer (OpenAPI's too): 4096, not
         * 4096.0, which a typed client's integer field refuses */
        bool whole = sp->offset == offsetof(struct attn_rope_scaling, original_max_position) &&
                     x == floor(x) && fabs(x) <= 9007199254740992.0;
        json_object_set_new(s, sp->name, whole ? json_integer((json_int_t)x) : json_real(x));
    }
    if (sc->type == ATTN_ROPE_SCALING_YARN)
        json_object_set_new(s, "truncate", json_boolean(!sc->no_truncate));
    json_object_set_new(j, "scaling", s);
    return j;
}

json_t *api_alibi_json(const struct attn_params *p, size_t heads)
{
    json_t *a;

    if (!p->alibi)
        return json_false();
    if (!p->alibi_slopes)
        return json_true();
    if (!(a = json_array()))
        return NULL;
    for (size_t i = 0; i < heads; i++)
        json_array_append_new(a, json_real(p->alibi_slopes[i]));
    return json_pack("{s:o}", "slopes", a);
}

/* One float32 as the double of its shortest digits: 0.1f shows as 0.1, and
 * reads back as the same float32. */
static json_t *f32_json(float x)
{
    char text[32];

    text[api_dtoa_f32(text, x)] = '\0';
    return json_real(strtod(text, NULL));
}

static json_t *vector_json(const void *data, enum attn_dtype dt, size_t d)
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < d; i++)
        json_array_append_new(a, dt == ATTN_F64 ? json_real(((const double *)data)[i])
                                                : f32_json(((const float *)data)[i]));
    return a;
}

json_t *api_vectors_json(const void *data, enum attn_dtype dt, size_t heads, size_t d)
{
    size_t width = dt == ATTN_F64 ? sizeof(double) : sizeof(float);
    json_t *a;

    if (!data)
        return json_null();
    if (heads == 1)
        return vector_json(data, dt, d);
    if (!(a = json_array()))
        return NULL;
    for (size_t h = 0; h < heads; h++)
        json_array_append_new(a, vector_json((const char *)data + h * d * width, dt, d));
    return a;
}

json_t *api_sinks_json(const struct attn_params *p, size_t heads)
{
    json_t *a;

    if (p->softmax != ATTN_SOFTMAX_SINK)
        return json_null();
    if (!p->sink_logits)
        return json_real(p->sink_logit);
    if (!(a = json_array()))
        return NULL;
    for (size_t i = 0; i < heads; i++)
        json_array_append_new(a, json_real(p->sink_logits[i]));
    return a;
}
