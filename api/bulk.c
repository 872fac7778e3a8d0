/*
 * api/bulk.c — a large request's tensor bytes decoded or copied, checked,
 * and split over the helper pool (see api/bulk.h).
 *
 * Each job is cut into pieces of PIECE_OUT bytes of output, and a piece
 * into blocks of BLOCK_OUT bytes: a block is decoded (or copied) and then
 * checked at once, so the check reads it from L1 instead of memory (a
 * decode of a whole 2048 x 128 float32 tensor and then a scan of it read
 * 1 MB twice; on the AMD EPYC of issue 22 the scan alone was 0.38 ms of a
 * 2048² base64 request, the decode 0.7 ms). The pieces run on the calling
 * thread and on whichever of the pool's helpers join: 2 cores for the
 * decode that comes before every large pass.
 */
#include "api/bulk.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "api/base64.h"
#include "core/pool.h"

/* 8192 base64 characters: a multiple of 4 characters and, as bytes, of
 * every element size. */
#define BLOCK_OUT ((size_t)6144)
#define PIECE_OUT (16 * BLOCK_OUT)
/* Less output than this in all runs on the calling thread alone: waking a
 * helper costs more than it saves. */
#define POOL_MIN_OUT (4 * PIECE_OUT)

/* name(u, n): whether no element of u[n] (of type T, exponent mask E, its
 * lowest bit LOW, sign bit SIGN) has an all-ones exponent. (x & E) + LOW
 * sets the sign bit exactly then, and never carries beyond it; the fixed
 * inner count of 64 lets the compiler vectorise the loop at -O2. */
#define FINITE_FN(name, T, E, LOW, SIGN)                                     \
    static bool name(const T *u, size_t n)                                  \
    {                                                                       \
        T acc = 0;                                                          \
        size_t i = 0, j;                                                    \
        for (; i + 64 <= n; i += 64)                                        \
            for (j = 0; j < 64; j++)                                        \
                acc |= (T)((u[i + j] & (E)) + (LOW));                       \
        for (; i < n; i++)                                                  \
            acc |= (T)((u[i] & (E)) + (LOW));                               \
        return !(acc & (SIGN));                                             \
    }

FINITE_FN(finite32, uint32_t, 0x7F800000u, 0x00800000u, 0x80000000u)
FINITE_FN(finite64, uint64_t, 0x7FF0000000000000ull, 0x0010000000000000ull,
          0x8000000000000000ull)
FINITE_FN(finite_f16, uint16_t, 0x7C00u, 0x0400u, 0x8000u)
FINITE_FN(finite_bf16, uint16_t, 0x7F80u, 0x0080u, 0x8000u)

static bool block_finite(const unsigned char *p, size_t bytes, enum api_bulk_elem e)
{
    switch (e) {
    case API_BULK_F32:
        return finite32((const uint32_t *)(const void *)p, bytes / 4);
    case API_BULK_F64:
        return finite64((const uint64_t *)(const void *)p, bytes / 8);
    case API_BULK_F16:
        return finite_f16((const uint16_t *)(const void *)p, bytes / 2);
    case API_BULK_BF16:
        return finite_bf16((const uint16_t *)(const void *)p, bytes / 2);
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
        if (b->text) {
            /* characters [o/3*4, c2): whole groups; padding only at the very end */
            size_t c1 = o / 3 * 4, c2 = o2 == r->out[j] ? b->len : o2 / 3 * 4;
            if ((c2 < b->len && b->text[c2 - 1] == '=') ||
                !api_base64_decode(b->text + c1, c2 - c1, dst + o)) {
                atomic_store_explicit(&r->bad[j], true, memory_order_relaxed);
                return;
            }
        } else {
            memcpy(dst + o, (const unsigned char *)b->src + o, o2 - o);
        }
        finite = finite && block_finite(dst + o, o2 - o, b->elem);
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
