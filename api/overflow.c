/*
 * api/overflow.c — the 422 non_finite of a float32 or float64 pass that
 * overflowed, at the input to blame: the pass stops without saying where
 * (its loops stay fast), so on this error path alone core/attn_blame.c
 * scans the prepared inputs for the culprit, and the answer's path points
 * at its row (/q/3, /k/1/0, /attn_bias/2/5) or, where the request holds
 * it flat (base64, an OIP v2 input), at the array with the row in the
 * message; an ALiBi term that took a score past the range points at the
 * head's slope (/alibi/slopes/1), or, a session's being fixed at its
 * create, at the request as a whole (""). When the scan finds nothing the
 * path is null. A session's pass is scanned by its store
 * (api/session_blame.c); its rows map onto the request here, a row the
 * session held already onto path "" and its cache position
 * (api_fail_blame).
 *
 * The 422 empty_row of a pass with empty_rows "error" points the same way
 * at the first query row with no key it may attend to (the passes stop
 * there without saying which), and says what took its keys away.
 */
#include "api/internal.h"

#include <stdio.h>

#include "api/read.h"
#include "core/attn_blame.h"

void api_blame_at_tensors(struct api_blame_at *at, const struct api_tensor *q,
                          const struct api_tensor *k, const struct api_tensor *v,
                          const struct api_tensor *attn_bias)
{
    const struct api_tensor *t[4] = {q, k, v, attn_bias};
    static const char *const rows[4] = {"/q", "/k", "/v", "/attn_bias"},
                         *const flat[4] = {"/q/data", "/k/data", "/v/data", "/attn_bias/data"};
    for (int i = 0; i < 4; i++) {
        at->ptr[i] = t[i]->packed ? flat[i] : rows[i];
        at->rank[i] = t[i]->packed ? 0 : t[i]->rank;
    }
    at->alibi = "/alibi";
}

static const char *blame_name(enum attn_blame_input in)
{
    return in == ATTN_BLAME_Q   ? "q"
           : in == ATTN_BLAME_K ? "k"
           : in == ATTN_BLAME_V ? "v"
                                : "attn_bias";
}

/* The array's pointer and rank (0: flat) that holds input in. */
static void where(const struct api_blame_at *at, enum attn_blame_input in, const char **ptr,
                  int *rank)
{
    int i = in == ATTN_BLAME_Q ? 0 : in == ATTN_BLAME_K ? 1 : in == ATTN_BLAME_V ? 2 : 3;
    *ptr = at->ptr[i];
    *rank = at->rank[i];
}

/* The pointer of b's row (and key, for attn_bias) in an array of rank:
 * the leading [B][h] indices it has, then the row. Flat: the array's own.
 * An attn_bias given once for every head (or every batch element) is
 * pointed at where it was given, not at the query head it was added to. */
static const char *row_pointer(const struct attn_blame *b, const struct attn_request *r,
                               const char *ptr, int rank, char *p, size_t size)
{
    bool bias = b->input == ATTN_BLAME_ATTN_BIAS;
    size_t bb = b->b, head = b->head;
    if (bias && r->attn_bias_heads == 1)
        bb = head = 0;
    else if (bias && r->attn_bias_heads == r->shape.h)
        bb = 0;
    int lead = rank - 2;                    /* [B][h] before [row][col] */
    int k = snprintf(p, size, "%s", ptr);
    if (rank == 0)
        return p;
    if (lead >= 2)
        k += snprintf(p + k, size - (size_t)k, "/%zu", bb);
    if (lead >= 1)
        k += snprintf(p + k, size - (size_t)k, "/%zu", head);
    k += snprintf(p + k, size - (size_t)k, "/%zu", b->row);
    if (bias)
        snprintf(p + k, size - (size_t)k, "/%zu", b->key);
    return p;
}

/* "row 3 of head 1 of batch element 0" (the parts the shape has) */
static void row_text(const struct attn_blame *b, const struct attn_shape *s, bool kv, char *t,
                     size_t size)
{
    int k = snprintf(t, size, "row %zu", b->row);
    if ((kv ? s->h_kv : s->h) > 1)
        k += snprintf(t + k, size - (size_t)k, " of %shead %zu", kv ? "kv " : "", b->head);
    if (s->B > 1)
        snprintf(t + k, size - (size_t)k, " of batch element %zu", b->b);
}

/* A session's k/v row j: its position in the cache (rows let go skipped). */
static size_t cache_pos(const struct api_blame_cache *cache, size_t j)
{
    return !cache->from || j < cache->front ? j : j - cache->front + cache->from;
}

/* An ALiBi term took query row b->row's score with key `key` past the
 * range: 422 at the head's slope (at the setting with the standard ones;
 * alibi NULL: a session's, fixed at its create, the request as a whole). */
static void fail_alibi(struct api_call *c, const struct attn_request *r,
                       const struct attn_blame *b, size_t key, const char *alibi,
                       const char *dt, const char *tip)
{
    char p[API_PATH_MAX], row[96];
    const struct attn_params *pa = &r->params;
    double slope = pa->alibi_slopes ? pa->alibi_slopes[b->head]
                                    : attn_alibi_slope(b->head, r->shape.h);
    if (!alibi)
        p[0] = 0;
    else if (pa->alibi_slopes)
        snprintf(p, sizeof p, "%s/slopes/%zu", alibi, b->head);
    else
        snprintf(p, sizeof p, "%s", alibi);
    row_text(b, &r->shape, false, row, sizeof row);
    api_fail(c, API_ERR_NON_FINITE, p, "the score of query %s with key %zu is not finite "
             "in %s once ALiBi is added (-slope·|P_q - P_k| = %.6Lg with head %zu's slope "
             "%.9g%s); %s a smaller slope%s", row, key, dt, b->alibi, b->head, slope,
             alibi ? "" : ", fixed when the session was created",
             alibi ? "use" : "create the session with", tip);
}

void api_fail_blame(struct api_call *c, const struct attn_request *r,
                    const struct attn_blame *found, const struct api_blame_at *at,
                    const struct api_blame_cache *cache)
{
    const char *dt = r->params.dtype == ATTN_F64 ? "float64" : "float32";
    const char *tip = r->params.dtype == ATTN_F64 ? "" : " or compute in float64";
    struct attn_blame b = *found;
    const char *ptr;
    int rank;
    char p[API_PATH_MAX], row[96];
    bool kv = b.input == ATTN_BLAME_K || b.input == ATTN_BLAME_V;
    size_t key = cache ? cache_pos(cache, b.key) : b.key;
    if (b.input == ATTN_BLAME_ALIBI) {
        fail_alibi(c, r, &b, key, at->alibi, dt, tip);
        return;
    }
    if (cache && kv && b.row < cache->cached) {
        /* a row the session held already: the request as a whole */
        p[0] = 0;
        int k = snprintf(row, sizeof row, "row at cache position %zu", cache_pos(cache, b.row));
        if (r->shape.h_kv > 1)
            snprintf(row + k, sizeof row - (size_t)k, " of kv head %zu", b.head);
    } else {
        if (cache && kv)
            b.row -= cache->cached;     /* the request's own k / v row */
        where(at, b.input, &ptr, &rank);
        row_pointer(&b, r, ptr, rank, p, sizeof p);
        row_text(&b, &r->shape, kv, row, sizeof row);
    }
    const char *name = blame_name(b.input);
    if (b.stage == ATTN_BLAME_PREPARED)
        api_fail(c, API_ERR_NON_FINITE, p, "%s %s is not finite in %s after its bias and "
                 "RoPE; scale the inputs down%s", name, row, dt, tip);
    else if (b.stage == ATTN_BLAME_OUTPUT)
        api_fail(c, API_ERR_NON_FINITE, p, "an output is not finite in %s: v %s holds "
                 "%.9Lg, too near the range for a weighted sum of %zu rows; scale v down%s",
                 dt, row, b.value, r->shape.L, tip);
    else if (b.stage == ATTN_BLAME_QK)
        api_fail(c, API_ERR_NON_FINITE, p, "q·k of query %s with key %zu is %.6Lg, past "
                 "%s's range before the scale %.9g is applied; scale q or k down, and the "
                 "scale up by as much%s", row, key, b.value, dt, r->params.scale, tip);
    else if (b.input == ATTN_BLAME_ATTN_BIAS)
        api_fail(c, API_ERR_NON_FINITE, p, "the score of query %s with key %zu is not finite "
                 "in %s once attn_bias is added (%.6Lg); scale attn_bias down%s", row, key,
                 dt, b.value, tip);
    else
        api_fail(c, API_ERR_NON_FINITE, p, "the score of query %s with key %zu is not "
                 "finite in %s: scale·q·k with its biases is %.6Lg; scale the inputs "
                 "down%s", row, key, dt, b.value, tip);
}

void api_fail_overflow(struct api_call *c, const struct attn_request *r,
                       const struct attn_inputs *in, const size_t *heads, size_t nh,
                       const struct api_blame_at *at)
{
    struct attn_blame b;
    if (attn_blame(r, in, heads, nh, &b) != CORE_OK || b.input == ATTN_BLAME_NONE)
        api_fail_compute(c, CORE_ENONFINITE, r->params.dtype);
    else
        api_fail_blame(c, r, &b, at, NULL);
}

/* ", 2 masked" when count is not 0 */
static int why_part(char *t, size_t size, int k, size_t count, const char *what)
{
    if (!count || k < 0 || (size_t)k >= size)
        return k;
    return k + snprintf(t + k, size - (size_t)k, "%s%zu %s", k ? ", " : "", count, what);
}

void api_fail_empty_blame(struct api_call *c, const struct attn_request *r,
                          const struct attn_blame_empty *e, const char *keys_what,
                          const char *q_ptr, int q_rank)
{
    if (!e->found) {
        api_fail_core(c, CORE_EEMPTYROW, NULL);
        return;
    }
    struct attn_blame b = {.input = ATTN_BLAME_Q, .b = e->b, .head = e->head, .row = e->row};
    char p[API_PATH_MAX], row[96], why[256];
    row_pointer(&b, r, q_ptr, q_rank, p, sizeof p);
    row_text(&b, &r->shape, false, row, sizeof row);
    int k = 0;
    why[0] = 0;
    k = why_part(why, sizeof why, k, e->segment, "in another segment");
    k = why_part(why, sizeof why, k, e->causal, "after it (causal)");
    k = why_part(why, sizeof why, k, e->window, "outside its window");
    k = why_part(why, sizeof why, k, e->mask, "masked");
    why_part(why, sizeof why, k, e->bias, "with attn_bias -inf");
    if (e->keys == 0)
        api_fail(c, API_ERR_EMPTY_ROW, p, "query %s has no key to attend to%s; with "
                 "empty_rows \"zero\" it would answer 0", row, keys_what);
    else
        api_fail(c, API_ERR_EMPTY_ROW, p, "query %s has no key it may attend to: of its %zu "
                 "key%s%s, %s; with empty_rows \"zero\" it would answer 0", row, e->keys,
                 e->keys == 1 ? "" : "s", keys_what, why);
}

void api_fail_empty_row(struct api_call *c, const struct attn_request *r, const size_t *heads,
                        size_t nh, const char *q_ptr, int q_rank)
{
    struct attn_blame_empty e;
    if (attn_blame_empty(r, heads, nh, &e) != CORE_OK)
        e.found = false;
    api_fail_empty_blame(c, r, &e, "", q_ptr, q_rank);
}
