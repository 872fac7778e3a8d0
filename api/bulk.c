/*
 * api/bulk.c — a large request's tensor bytes decoded or copied, checked,
 * and split over the helper pool (see api/bulk.h).
 *
 * Each job is cut into pieces of PIECE_OUT bytes of output, and a piece
 * into blocks of BLOCK_OUT bytes: a block is decoded (or copied) and then
 * checked at once, so the check reads it from L1 instead of memory (a
 * decode of a whole 2048 x 128 float32 tensor and then a scan of it read
 * 1 MB twice; measured: docs/benchmarks.md, section "On the AVX2 EPYC").
 * Float32 text needs no scan
 * at all unless the decoder, which checks each block in its registers,
 * saw an infinity or NaN there. The pieces run on the calling
 * thread and on whichever of the pool's helpers join: 2 cores for the
 * decode that comes before every large pass.
 */
#include "api/bulk.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "api/codec/base64.h"
#include "api/read.h"
#include "core/half.h"
#include "core/pool.h"

/* 8192 base64 characters: a multiple of 4 characters and, as bytes, of
 * every element size. */
#define BLOCK_OUT ((size_t)6144)
#define PIECE_OUT (16 * BLOCK_OUT)
/* Less output than this in all runs on the calling thread alone: waking a
 * helper costs more than it saves. */
#define POOL_MIN_OUT (4 * PIECE_OUT)

/* Whether no element of the block is an infinity or NaN that e's job
 * does not allow: the readers' own scans (api/read_tensor.c, core/half.c),
 * which run over fixed inner blocks that the compiler vectorises. */
static bool block_finite(const unsigned char *p, size_t bytes, const struct api_bulk *b)
{
    switch (b->elem) {
    case API_BULK_F32:
        return api_first_nonfinite(p, false, bytes / 4, b->allow_neg_inf) == bytes / 4;
    case API_BULK_F64:
        return api_first_nonfinite(p, true, bytes / 8, b->allow_neg_inf) == bytes / 8;
    case API_BULK_F16:
    case API_BULK_BF16:
        return half_first_nonfinite((const uint16_t *)(const void *)p, bytes / 2,
                                    b->elem == API_BULK_F16, b->allow_neg_inf) == bytes / 2;
    case API_BULK_NONE:
        break;
    }
    return true;
}

struct bulk_run {
    struct api_bulk *jobs;
    size_t n;
    size_t out[API_BULK_MAX];       /* output bytes of each job */
    size_t first[API_BULK_MAX + 1]; /* its first piece; first[n]: all pieces */
    atomic_bool bad[API_BULK_MAX], nonfinite[API_BULK_MAX];
};

/* Piece i: its job's output bytes [o, end), a block at a time. */
static void bulk_piece(void *arg, size_t i, struct attn_ws *ws)
{
    struct bulk_run *r = arg;
    size_t j = 0;

    (void)ws;
    while (i >= r->first[j + 1])
        j++;
    const struct api_bulk *b = &r->jobs[j];
    unsigned char *dst = b->dst;
    size_t o = (i - r->first[j]) * PIECE_OUT, end = o + PIECE_OUT;
    bool finite = true;

    if (end > r->out[j])
        end = r->out[j];
    for (; o < end; o += BLOCK_OUT) {
        size_t o2 = end - o < BLOCK_OUT ? end : o + BLOCK_OUT;
        /* float32 from text: checked strictly by the decoder; only a block
         * it finds an infinity or NaN in is scanned for what b allows */
        bool f32 = b->elem == API_BULK_F32, strict = false;
        if (b->text) {
            /* characters [o/3*4, c2): whole groups; padding only at the very end */
            size_t c1 = o / 3 * 4, c2 = o2 == r->out[j] ? b->len : o2 / 3 * 4;
            if ((c2 < b->len && b->text[c2 - 1] == '=') ||
                !api_base64_decode_f32(b->text + c1, c2 - c1, dst + o, f32 ? &strict : NULL)) {
                atomic_store_explicit(&r->bad[j], true, memory_order_relaxed);
                return;
            }
        } else if (b->dst != b->src) {
            memcpy(dst + o, (const unsigned char *)b->src + o, o2 - o);
        }
        finite = finite && (strict || block_finite(dst + o, o2 - o, b));
    }
    if (!finite)
        atomic_store_explicit(&r->nonfinite[j], true, memory_order_relaxed);
}

bool api_bulk_run(struct api_bulk *jobs, size_t n, struct attn_pool *pool)
{
    struct bulk_run r;
    size_t j, total = 0;
    bool ok = true;

    if (n > API_BULK_MAX)
        return false;
    r.jobs = jobs;
    r.n = n;
    r.first[0] = 0;
    for (j = 0; j < n; j++) {
        if (jobs[j].text && !api_base64_decoded_len(jobs[j].text, jobs[j].len, &r.out[j]))
            return false;
        if (!jobs[j].text)
            r.out[j] = jobs[j].len;
        r.first[j + 1] = r.first[j] + (r.out[j] + PIECE_OUT - 1) / PIECE_OUT;
        total += r.out[j];
        atomic_init(&r.bad[j], false);
        atomic_init(&r.nonfinite[j], false);
    }
    /* no stop is read (ws NULL): the whole of it takes about a millisecond */
    attn_pool_run(total >= POOL_MIN_OUT ? pool : NULL, bulk_piece, &r, r.first[n], NULL);
    for (j = 0; j < n; j++) {
        jobs[j].bad = atomic_load(&r.bad[j]);
        jobs[j].nonfinite = atomic_load(&r.nonfinite[j]);
        ok = ok && !jobs[j].bad;
    }
    return ok;
}
