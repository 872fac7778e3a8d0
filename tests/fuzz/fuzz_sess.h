/*
 * tests/fuzz/fuzz_sess.h — what the session fuzz targets (fuzz_persist,
 * fuzz_import) ask of a session they made from bytes: one query of 0.5s
 * over the whole cache fails cleanly or answers finite numbers.
 * Header-only, like tests/harness.h.
 */
#ifndef ATTND_FUZZ_SESS_H
#define ATTND_FUZZ_SESS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/store.h"

/* Attend one query over held session s (scores, weights and output);
 * returns false when an output is not finite. Sessions wider than 4096
 * numbers a row or with more than 65536 scores are skipped (slow, not
 * wrong). */
static inline bool fz_attend_finite(struct sess_store *st, struct sess *s)
{
    const struct sess_spec *sp = sess_spec(s);
    struct sess_query q;
    struct attn_request r;
    size_t es = attn_dtype_size(sp->params.dtype);
    bool finite = true;

    memset(&q, 0, sizeof q);
    q.n = 1;
    q.outputs = ATTN_OUT_ALL;
    if (sess_request(s, &q, 0, &r) != CORE_OK || attn_check(&r) != CORE_OK)
        return true;
    if (r.shape.h * r.shape.d_k > 4096 || r.shape.h * r.shape.L > 65536 ||
        r.shape.h * r.shape.d_v > 4096)
        return true;
    void *qv = calloc(r.shape.h * r.shape.d_k, es);
    void *sc = calloc(r.shape.h * r.shape.L + 1, es);
    void *w = calloc(r.shape.h * r.shape.L + 1, es);
    void *out = calloc(r.shape.h * r.shape.d_v, es);
    if (!qv || !sc || !w || !out)
        abort();
    for (size_t i = 0; i < r.shape.h * r.shape.d_k; i++) {
        if (es == sizeof(float))
            ((float *)qv)[i] = 0.5f;
        else
            ((double *)qv)[i] = 0.5;
    }
    q.q = qv;
    struct attn_result res = {.scores = sc, .weights = w, .output = out};
    if (sess_attend(st, s, NULL, NULL, 0, &q, &res, NULL) == CORE_OK) {
        for (size_t i = 0; i < r.shape.h * r.shape.d_v; i++) {
            double x = es == sizeof(float) ? ((float *)out)[i] : ((double *)out)[i];
            finite = finite && isfinite(x);
        }
    }
    free(qv);
    free(sc);
    free(w);
    free(out);
    return finite;
}

#endif
