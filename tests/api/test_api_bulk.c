/*
 * tests/api/test_api_bulk.c — api/bulk.c: base64 decoded and bytes copied a
 * block at a time, split over a pool, each block checked for infinities
 * and NaNs. Checked against references written here (tests/base64_ref.h
 * for the bytes; the element check from the exponent field read with
 * shifts) on the calling thread alone and on a pool of one helper: every
 * element format; lengths around the block (6144 bytes) and piece (96 KiB)
 * boundaries; an infinity, NaN or -inf at the first, last and boundary
 * elements; -inf passing a job that allows it; the largest finite
 * numbers and subnormals passing; '=' and
 * bytes outside the alphabet anywhere, padding inside the text at a block's
 * end included, making a job bad; several jobs at once.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/base64_ref.h"
#include "tests/harness.h"
#include "api/bulk.h"
#include "core/pool.h"

static uint64_t rng_state = 0x51ED2701A3C4B5D7ull;
static uint64_t rng(void)
{
    return t_rng_next(&rng_state);
}

static struct attn_pool *pool;      /* one helper */

static const size_t esize[5] = {1, 4, 8, 2, 2};    /* by enum api_bulk_elem */

/* Reference: element i of p (format e) is an infinity or NaN. */
static bool ref_bad(const unsigned char *p, size_t i, enum api_bulk_elem e)
{
    uint64_t u = 0;
    for (size_t k = 0; k < esize[e]; k++)
        u |= (uint64_t)p[i * esize[e] + k] << (8 * k);
    switch (e) {
    case API_BULK_F32:
        return ((u >> 23) & 0xFF) == 0xFF;
    case API_BULK_F64:
        return ((u >> 52) & 0x7FF) == 0x7FF;
    case API_BULK_F16:
        return ((u >> 10) & 0x1F) == 0x1F;
    case API_BULK_BF16:
        return ((u >> 7) & 0xFF) == 0xFF;
    case API_BULK_NONE:
        break;
    }
    return false;
}

static bool ref_any_bad(const unsigned char *p, size_t bytes, enum api_bulk_elem e)
{
    if (e == API_BULK_NONE)
        return false;
    for (size_t i = 0; i < bytes / esize[e]; i++)
        if (ref_bad(p, i, e))
            return true;
    return false;
}

/* Random finite elements of format e: random bytes, the exponent of each
 * bad one cleared (or, for some, set to the largest finite exponent). */
static void fill_finite(unsigned char *p, size_t bytes, enum api_bulk_elem e)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)rng();
    if (e == API_BULK_NONE)
        return;
    size_t es = esize[e], top = es - 1;
    for (size_t i = 0; i < bytes / es; i++)
        while (ref_bad(p, i, e))
            p[i * es + top] ^= (unsigned char)(1u << (rng() % 7)); /* an exponent bit */
}

/* Store one element at index i: exp all ones (mant: 0 infinity, else NaN),
 * sign as given. */
static void put_special(unsigned char *p, size_t i, enum api_bulk_elem e, bool neg, bool nan)
{
    uint64_t u = 0;
    switch (e) {
    case API_BULK_F32: u = 0x7F800000u | (nan ? 1u : 0u) | (neg ? 0x80000000u : 0u); break;
    case API_BULK_F64:
        u = 0x7FF0000000000000ull | (nan ? 0x8000000000000ull : 0u) |
            (neg ? 0x8000000000000000ull : 0u);
        break;
    case API_BULK_F16: u = 0x7C00u | (nan ? 0x200u : 0u) | (neg ? 0x8000u : 0u); break;
    case API_BULK_BF16: u = 0x7F80u | (nan ? 0x40u : 0u) | (neg ? 0x8000u : 0u); break;
    case API_BULK_NONE: return;
    }
    for (size_t k = 0; k < esize[e]; k++)
        p[i * esize[e] + k] = (unsigned char)(u >> (8 * k));
}

/* One job of bytes raw[bytes] (as base64 text when text) through
 * api_bulk_run with and without the pool; checks the bytes out and the
 * flags against the references. */
static void check_job(const unsigned char *raw, size_t bytes, enum api_bulk_elem e, bool text)
{
    char *t = text ? malloc(bytes / 3 * 4 + 8) : NULL;
    size_t tlen = text ? ref_b64_encode(raw, bytes, t) : bytes;
    unsigned char *out = malloc(bytes + 1);
    bool want_bad = ref_any_bad(raw, bytes, e);

    for (int p = 0; p < 2; p++) {
        memset(out, 0xA5, bytes + 1);
        struct api_bulk job = {.text = t, .src = text ? NULL : raw, .len = tlen, .dst = out,
                               .elem = e};
        CHECK(api_bulk_run(&job, 1, p ? pool : NULL));
        CHECK(!job.bad);
        CHECK(memcmp(out, raw, bytes) == 0);
        CHECK(out[bytes] == 0xA5);              /* nothing written past it */
        CHECK(job.nonfinite == want_bad);
    }
    free(t);
    free(out);
}

static const size_t lengths[] = {0, 1, 2, 3, 8, 6143, 6144, 6145, 12288, 98303, 98304,
                                 98305, 4 * 98304 - 8, 4 * 98304 + 24, 1048576};

TEST(bulk_finite_round_trip)
{
    for (int e = API_BULK_NONE; e <= API_BULK_BF16; e++)
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
            size_t bytes = lengths[li] / esize[e] * esize[e];
            unsigned char *raw = malloc(bytes + 1);
            fill_finite(raw, bytes, (enum api_bulk_elem)e);
            check_job(raw, bytes, (enum api_bulk_elem)e, true);
            check_job(raw, bytes, (enum api_bulk_elem)e, false);
            free(raw);
        }
}

/* One special element at first, last, block and piece boundaries, random. */
TEST(bulk_finds_every_special)
{
    for (int e = API_BULK_F32; e <= API_BULK_BF16; e++) {
        size_t bytes = 4 * 98304 + 6144 * 3, n = bytes / esize[e];
        unsigned char *raw = malloc(bytes);
        size_t at[] = {0, n - 1, 6144 / esize[e] - 1, 6144 / esize[e], 98304 / esize[e] - 1,
                       98304 / esize[e], 2 * 98304 / esize[e] + 7, rng() % n};
        for (size_t a = 0; a < sizeof at / sizeof *at; a++)
            for (int kind = 0; kind < 3; kind++) {          /* +inf, -inf, NaN */
                fill_finite(raw, bytes, (enum api_bulk_elem)e);
                put_special(raw, at[a], (enum api_bulk_elem)e, kind == 1, kind == 2);
                check_job(raw, bytes, (enum api_bulk_elem)e, true);
                check_job(raw, bytes, (enum api_bulk_elem)e, false);
            }
        free(raw);
    }
}

/* The largest finite numbers and subnormals pass. */
TEST(bulk_extremes_are_finite)
{
    static const unsigned char f32[] = {0xFF, 0xFF, 0x7F, 0x7F, 0xFF, 0xFF, 0x7F, 0xFF,
                                        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80};
    static const unsigned char f16[] = {0xFF, 0x7B, 0xFF, 0xFB, 0x01, 0x00, 0x00, 0x80};
    static const unsigned char bf16[] = {0x7F, 0x7F, 0x7F, 0xFF, 0x01, 0x00, 0x00, 0x80};
    static const unsigned char f64[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xEF, 0x7F,
                                        0x01, 0, 0, 0, 0, 0, 0, 0};
    check_job(f32, sizeof f32, API_BULK_F32, true);
    check_job(f16, sizeof f16, API_BULK_F16, true);
    check_job(bf16, sizeof bf16, API_BULK_BF16, true);
    check_job(f64, sizeof f64, API_BULK_F64, true);
    for (size_t i = 0; i < 4; i++) {
        struct api_bulk job = {.src = f32 + 4 * i, .len = 4, .dst = (unsigned char[4]){0},
                               .elem = API_BULK_F32};
        CHECK(api_bulk_run(&job, 1, NULL) && !job.nonfinite);
    }
}

/* A job that allows -inf (a mask's): -inf passes, +inf and NaN do not,
 * from text and from bytes, wherever they are (the float32 decoder's own
 * strict check finds -inf too and leaves it to the block's scan). */
TEST(bulk_allows_neg_inf_when_asked)
{
    for (int e = API_BULK_F32; e <= API_BULK_F64; e++) {
        size_t bytes = 98304 + 6144 + 24, n = bytes / esize[e];
        unsigned char *raw = malloc(bytes), *out = malloc(bytes);
        char *t = malloc(bytes / 3 * 4 + 8);
        size_t at[] = {0, n - 1, 6144 / esize[e], rng() % n};
        for (size_t a = 0; a < sizeof at / sizeof *at; a++)
            for (int kind = 0; kind < 3; kind++) {          /* -inf, +inf, NaN */
                fill_finite(raw, bytes, (enum api_bulk_elem)e);
                put_special(raw, at[a], (enum api_bulk_elem)e, kind == 0, kind == 2);
                size_t len = ref_b64_encode(raw, bytes, t);
                for (int text = 0; text < 2; text++)
                    for (int p = 0; p < 2; p++) {
                        struct api_bulk job = {.text = text ? t : NULL, .src = raw,
                                               .len = text ? len : bytes, .dst = out,
                                               .elem = (enum api_bulk_elem)e,
                                               .allow_neg_inf = true};
                        CHECK(api_bulk_run(&job, 1, p ? pool : NULL));
                        CHECK(memcmp(out, raw, bytes) == 0);
                        CHECK(job.nonfinite == (kind != 0));
                    }
            }
        free(raw);
        free(out);
        free(t);
    }
}

/* A text with one wrong byte (or '=' inside, padding-like at a block's
 * end included) is bad, with or without the pool. */
TEST(bulk_rejects_bad_text)
{
    size_t bytes = 3 * 98304 + 30, n;
    unsigned char *raw = malloc(bytes), *out = malloc(bytes);
    char *t = malloc(bytes / 3 * 4 + 8);
    fill_finite(raw, bytes, API_BULK_NONE);
    n = ref_b64_encode(raw, bytes, t);
    size_t at[] = {0, 8190, 8191, 8192, 131071, 131072, n - 5, rng() % (n - 4)};
    const char bad[] = {'=', '=', '-', ' ', '\0', (char)0xC3, '.', '='};
    for (size_t a = 0; a < sizeof at / sizeof *at; a++)
        for (int p = 0; p < 2; p++) {
            char keep0 = t[at[a] - (at[a] > 0)], keep = t[at[a]], keep2 = t[at[a] + 1];
            t[at[a]] = bad[a];
            if (a == 1) {               /* "A==" ending the first block: */
                t[at[a] + 1] = '=';     /* canonical padding, were it the end */
                t[at[a] - 1] = 'A';
            }
            struct api_bulk job = {.text = t, .len = n, .dst = out, .elem = API_BULK_F32};
            CHECK(!api_bulk_run(&job, 1, p ? pool : NULL));
            CHECK(job.bad);
            t[at[a] + 1] = keep2;
            t[at[a]] = keep;
            t[at[a] - (at[a] > 0)] = keep0;
        }
    free(raw);
    free(out);
    free(t);
}

/* Several jobs at once: each one's bytes and flags its own. */
TEST(bulk_several_jobs)
{
    enum { J = 5 };
    size_t bytes[J] = {98304 * 2 + 4, 4, 0, 6144 * 5, 98304 * 3};
    enum api_bulk_elem el[J] = {API_BULK_F32, API_BULK_F32, API_BULK_F64, API_BULK_F16,
                                API_BULK_F64};
    unsigned char *raw[J], *out[J];
    char *t[J];
    struct api_bulk jobs[J];
    for (int p = 0; p < 2; p++)
        for (int special = 0; special < J; special++) {
            for (int j = 0; j < J; j++) {
                raw[j] = malloc(bytes[j] + 1);
                out[j] = malloc(bytes[j] + 1);
                t[j] = malloc(bytes[j] / 3 * 4 + 8);
                fill_finite(raw[j], bytes[j], el[j]);
                if (j == special && bytes[j])
                    put_special(raw[j], bytes[j] / esize[el[j]] / 2, el[j], false, true);
                bool text = j % 2 == 0;
                size_t len = text ? ref_b64_encode(raw[j], bytes[j], t[j]) : bytes[j];
                jobs[j] = (struct api_bulk){.text = text ? t[j] : NULL, .src = raw[j],
                                            .len = len, .dst = out[j], .elem = el[j]};
            }
            CHECK(api_bulk_run(jobs, J, p ? pool : NULL));
            for (int j = 0; j < J; j++) {
                CHECK(!jobs[j].bad);
                CHECK(memcmp(out[j], raw[j], bytes[j]) == 0);
                CHECK(jobs[j].nonfinite == (j == special && bytes[j] != 0));
                free(raw[j]);
                free(out[j]);
                free(t[j]);
            }
        }
    CHECK(!api_bulk_run(jobs, API_BULK_MAX + 1, NULL));
}

int main(void)
{
    pool = attn_pool_new(1, NULL, NULL);
    if (!pool)
        return 1;
    RUN(bulk_finite_round_trip);
    RUN(bulk_finds_every_special);
    RUN(bulk_extremes_are_finite);
    RUN(bulk_allows_neg_inf_when_asked);
    RUN(bulk_rejects_bad_text);
    RUN(bulk_several_jobs);
    attn_pool_free(pool);
    TEST_MAIN_END();
}
