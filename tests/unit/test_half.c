/*
 * tests/unit/test_half.c — core/half.c against a reference written apart.
 *
 * The reference rounding knows nothing of bit tricks: it lists every finite
 * non-negative value of the format (exact doubles, built from the fields
 * with ldexp), finds the two neighbours of x by binary search, and compares
 * x with their midpoint (exact in double: at most 12 significant bits);
 * a tie picks the even encoding, and past the largest finite value the
 * next neighbour is infinity (as IEEE 754 rounds: 2^(emax+1) stands for
 * it). Every float16 and bfloat16 bit pattern is widened and checked; the
 * narrowing is checked on every midpoint and its float32/float64
 * neighbours, on random values over the whole range, on the subnormal and
 * overflow edges by name, and F16C against the portable path bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "tests/harness.h"
#include "tests/half_ref.h"

static uint32_t bits32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Every float16 pattern widens to its exact value, portable and F16C alike,
 * and narrows back to itself from float32 and from float64. */
TEST(f16_every_pattern)
{
    static uint16_t all[65536], back[65536], back2[65536];
    static float wide[65536], wide2[65536];
    int bad = 0;
    for (unsigned h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    half_f16_to_f32_n_portable(all, wide, 65536);
    half_f16_to_f32_n(all, wide2, 65536);
    for (unsigned h = 0; h < 65536; h++) {
        unsigned a = h & 0x7FFF;
        if (bits32(wide[h]) != bits32(wide2[h]) || bits32(half_f16_to_f32((uint16_t)h)) != bits32(wide[h]))
            bad++;
        if (a > 0x7C00) {                   /* NaN: stays NaN, sign kept */
            if (!isnan(wide[h]) || (signbit(wide[h]) != 0) != ((h >> 15) != 0))
                bad++;
            continue;
        }
        double ref = a == 0x7C00 ? INFINITY : R16.vals[a];
        if (h & 0x8000)
            ref = -ref;
        if ((double)wide[h] != ref || (signbit(wide[h]) != 0) != ((h >> 15) != 0))
            bad++;
        if (half_f16_from_f32(wide[h]) != h || half_f16_from_f64((double)wide[h]) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(half_f32_to_f16_n_portable(wide, back, 65536) == 0x7C00);    /* first inf */
    CHECK(half_f32_to_f16_n(wide, back2, 65536) == 0x7C00);
    bad = 0;
    for (unsigned h = 0; h < 65536; h++)
        if (back[h] != back2[h] || ((h & 0x7FFF) <= 0x7C00 && back[h] != h))
            bad++;
    CHECK_EQ_INT(bad, 0);
}

TEST(bf16_every_pattern)
{
    static uint16_t all[65536], back[65536];
    static float wide[65536];
    int bad = 0;
    for (unsigned h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    half_bf16_to_f32_n(all, wide, 65536);
    for (unsigned h = 0; h < 65536; h++) {
        unsigned a = h & 0x7FFF;
        if (bits32(half_bf16_to_f32((uint16_t)h)) != bits32(wide[h]))
            bad++;
        if (a > 0x7F80) {
            if (!isnan(wide[h]))
                bad++;
            continue;
        }
        double ref = a == 0x7F80 ? INFINITY : RB16.vals[a];
        if (h & 0x8000)
            ref = -ref;
        if ((double)wide[h] != ref || (signbit(wide[h]) != 0) != ((h >> 15) != 0))
            bad++;
        if (half_bf16_from_f32(wide[h]) != h || half_bf16_from_f64((double)wide[h]) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(half_f32_to_bf16_n(wide, back, 65536) == 0x7F80);
    bad = 0;
    for (unsigned h = 0; h < 65536; h++)
        if ((h & 0x7FFF) <= 0x7F80 && back[h] != h)
            bad++;
    CHECK_EQ_INT(bad, 0);
}

/* One float input checked every way the library rounds it. */
static int check_f32(float x)
{
    uint16_t r16 = ref_round(&R16, (double)x), rb = ref_round(&RB16, (double)x), o[3];
    int bad = 0;
    bad += half_f16_from_f32(x) != r16;
    bad += half_f16_from_f64((double)x) != r16;
    bad += half_bf16_from_f32(x) != rb;
    bad += half_bf16_from_f64((double)x) != rb;
    half_f32_to_f16_n_portable(&x, &o[0], 1);
    half_f32_to_f16_n(&x, &o[1], 1);
    half_f32_to_bf16_n(&x, &o[2], 1);
    bad += o[0] != r16;
    bad += o[1] != r16;
    bad += o[2] != rb;
    return bad;
}

static int check_f64(double x)
{
    return (half_f16_from_f64(x) != ref_round(&R16, x)) +
           (half_bf16_from_f64(x) != ref_round(&RB16, x));
}

/* Every midpoint between neighbours (and between the largest finite value
 * and infinity), exactly and one float32 / float64 step either side. */
static int midpoints(const struct reffmt *f, int is16)
{
    int bad = 0;
    for (unsigned h = 0; h < f->inf; h++) {
        double mid = (f->vals[h] + f->vals[h + 1]) / 2;
        float m32 = (float)mid;             /* exact: <= 12 significant bits */
        double xs[5] = {mid, nextafter(mid, 0), nextafter(mid, INFINITY),
                        (double)nextafterf(m32, 0), (double)nextafterf(m32, INFINITY)};
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 5; i++) {
                double x = s ? -xs[i] : xs[i];
                bad += check_f64(x);
                if (i == 0 || i >= 3)
                    bad += check_f32((float)x);
                if (i == 0) {
                    bool want = is16 ? half_f16_is_midpoint(x) : half_bf16_is_midpoint(x);
                    bad += !want;
                }
            }
        bad += is16 ? half_f16_is_midpoint(f->vals[h]) : half_bf16_is_midpoint(f->vals[h]);
    }
    return bad;
}

TEST(rounding_at_every_midpoint)
{
    CHECK_EQ_INT(midpoints(&R16, 1), 0);
    CHECK_EQ_INT(midpoints(&RB16, 0), 0);
}

TEST(rounding_random)
{
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint64_t r = next_u64();
        float x = from32((uint32_t)r);
        if (isfinite(x))
            bad += check_f32(x);
        /* doubles over the formats' ranges: exponents -150..130 */
        double d = ldexp(1.0 + (double)(r >> 12) * 0x1p-52, (int)((r >> 3) % 281) - 150);
        bad += check_f64(r & 1 ? -d : d);
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(named_edges)
{
    /* float16 subnormals: 2^-24 is the smallest; 2^-25 ties to 0 */
    CHECK_EQ_INT(half_f16_from_f64(0x1p-24), 0x0001);
    CHECK_EQ_INT(half_f16_from_f64(0x1p-25), 0x0000);
    CHECK_EQ_INT(half_f16_from_f64(nextafter(0x1p-25, 1)), 0x0001);
    CHECK_EQ_INT(half_f16_from_f64(3 * 0x1p-25), 0x0002);       /* tie to even */
    CHECK_EQ_INT(half_f16_from_f64(5 * 0x1p-25), 0x0002);
    CHECK_EQ_INT(half_f16_from_f64(-0x1p-26), 0x8000);
    CHECK_EQ_INT(half_f16_from_f64(0x1p-14 - 0x1p-25), 0x0400);  /* rounds up to normal */
    CHECK_EQ_INT(half_f16_from_f32(0x1p-14f - 0x1p-25f), 0x0400);
    /* float16 overflow: 65504 is the largest; 65520 ties to infinity */
    CHECK_EQ_INT(half_f16_from_f64(65504), 0x7BFF);
    CHECK_EQ_INT(half_f16_from_f64(nextafter(65520, 0)), 0x7BFF);
    CHECK_EQ_INT(half_f16_from_f64(65520), 0x7C00);
    CHECK_EQ_INT(half_f16_from_f32(-65520.0f), 0xFC00);
    CHECK_EQ_INT(half_f16_from_f64(1e300), 0x7C00);
    CHECK(!half_f16_is_finite(half_f16_from_f64(1e5)));
    CHECK(half_f16_is_finite(0x7BFF));
    /* bfloat16 ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    CHECK_EQ_INT(half_bf16_from_f64(1 + 0x1p-8), 0x3F80);
    CHECK_EQ_INT(half_bf16_from_f64(1 + 3 * 0x1p-8), 0x3F82);
    CHECK_EQ_INT(half_bf16_from_f32(1 + 0x1p-8f + 0x1p-23f), 0x3F81);
    CHECK_EQ_INT(half_bf16_from_f64(nextafter(1 + 0x1p-8, 2)), 0x3F81);
    /* bfloat16 subnormals and overflow */
    CHECK_EQ_INT(half_bf16_from_f64(0x1p-133), 0x0001);
    CHECK_EQ_INT(half_bf16_from_f64(0x1p-134), 0x0000);
    CHECK_EQ_INT(half_bf16_from_f32(0x1p-134f * 3), 0x0002);
    CHECK_EQ_INT(half_bf16_from_f64(0x1.FEp127), 0x7F7F);
    CHECK_EQ_INT(half_bf16_from_f64(0x1.FFp127), 0x7F80);      /* ties to infinity */
    CHECK_EQ_INT(half_bf16_from_f32(0x1.FEFFFEp127f), 0x7F7F);
    CHECK(!half_bf16_is_finite(half_bf16_from_f32(3.4e38f)));
    CHECK(half_bf16_is_finite(0x7F7F) && !half_bf16_is_finite(0xFF80));
    /* the bulk converters name the first overflow */
    float v[20] = {1, 2, 3};
    uint16_t o[20];
    v[13] = 70000.0f;
    v[17] = -1e6f;
    CHECK_EQ_INT(half_f32_to_f16_n(v, o, 20), 13);
    CHECK_EQ_INT(half_f32_to_f16_n_portable(v, o, 20), 13);
    CHECK_EQ_INT(half_f32_to_f16_n(v, o, 13), 13);
    CHECK_EQ_INT(half_f32_to_bf16_n(v, o, 20), 20);
    v[19] = INFINITY;
    CHECK_EQ_INT(half_f32_to_bf16_n(v, o, 20), 19);
}

/* F16C and the portable path agree on every float32 with the low bits that
 * decide the rounding, over the whole exponent range (every exponent, every
 * pattern of the top fraction bits and of the 13 discarded bits' top and
 * bottom), and on random bits; NaN payloads included. */
TEST(f16c_matches_portable)
{
    static float in[1 << 16];
    static uint16_t a[1 << 16], b[1 << 16];
    static float wa[1 << 16], wb[1 << 16];
    int bad = 0;
    if (!half_f16c_available()) {
        printf("  (no F16C on this CPU: portable path only)\n");
        return;
    }
    for (uint32_t hi = 0; hi < 512; hi++) {             /* sign + exponent */
        for (uint32_t j = 0; j < (1u << 16); j++) {
            uint32_t mant = (j & 0x3FF) << 13 | ((j >> 10) & 7) << 10 | (j >> 13) |
                            ((j >> 12) & 1) << 3;
            in[j] = from32(hi << 23 | (mant & 0x7FFFFF));
        }
        size_t ia = half_f32_to_f16_n_portable(in, a, 1 << 16);
        size_t ib = half_f32_to_f16_n_f16c(in, b, 1 << 16);
        bad += ia != ib;
        bad += memcmp(a, b, sizeof a) != 0;
    }
    for (int r = 0; r < 32; r++) {
        for (uint32_t j = 0; j < (1u << 16); j++)
            in[j] = from32((uint32_t)next_u64());
        half_f32_to_f16_n_portable(in, a, (1 << 16) - r);
        half_f32_to_f16_n_f16c(in, b, (1 << 16) - r);
        bad += memcmp(a, b, ((1 << 16) - r) * sizeof *a) != 0;
    }
    for (uint32_t j = 0; j < (1u << 16); j++)
        a[j] = (uint16_t)j;
    half_f16_to_f32_n_portable(a, wa, 1 << 16);
    half_f16_to_f32_n_f16c(a, wb, 1 << 16);
    bad += memcmp(wa, wb, sizeof wa) != 0;
    for (size_t n = 0; n < 20; n++) {                   /* tails */
        half_f16_to_f32_n_f16c(a + 3, wb, n);
        for (size_t i = 0; i < n; i++)
            bad += bits32(wb[i]) != bits32(wa[i + 3]);
    }
    CHECK_EQ_INT(bad, 0);
}

/* The bfloat16 array converters over lengths around their 64-element
 * blocks (whole blocks, then a tail) and at odd offsets, element by
 * element against the scalar conversions: random float32 bits (NaN,
 * infinities, subnormals among them) and every bfloat16 pattern. */
TEST(bf16_arrays_blocks_and_tails)
{
    static const size_t lens[] = {0, 1, 31, 63, 64, 65, 127, 128, 129, 191, 200};
    float in[203], wide[203];
    uint16_t h[203], all[203];
    int bad = 0;
    for (int round = 0; round < 64; round++) {
        for (size_t i = 0; i < 203; i++) {
            in[i] = from32((uint32_t)next_u64());
            all[i] = (uint16_t)(round * 1021 + i * 331);
        }
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
            for (size_t off = 0; off < 3; off++) {
                size_t n = lens[li], first = n;
                memset(h, 0, sizeof h);
                size_t got = half_f32_to_bf16_n(in + off, h, n);
                for (size_t i = 0; i < n; i++) {
                    uint16_t r = half_bf16_from_f32(in[off + i]);
                    bad += h[i] != r;
                    if (first == n && (r & 0x7F80) == 0x7F80)
                        first = i;
                }
                bad += got != first;
                bad += h[n] != 0;                       /* nothing past n */
                memset(wide, 0, sizeof wide);
                half_bf16_to_f32_n(all + off, wide, n);
                for (size_t i = 0; i < n; i++)
                    bad += bits32(wide[i]) != bits32(half_bf16_to_f32(all[off + i]));
                bad += bits32(wide[n]) != 0;
            }
    }
    CHECK_EQ_INT(bad, 0);
}

/* half_first_nonfinite against a plain scan: a non-finite pattern (each
 * infinity and NaN of both formats) at every place of 200 elements (across
 * the 64-element blocks), -inf skipped only when allowed, two in a row. */
static size_t first_bad_ref(const uint16_t *h, size_t n, bool f16, bool allow)
{
    uint16_t e = f16 ? 0x7C00 : 0x7F80;
    for (size_t i = 0; i < n; i++)
        if ((h[i] & e) == e && !(allow && h[i] == (e | 0x8000)))
            return i;
    return n;
}

TEST(first_nonfinite_bits)
{
    static const uint16_t pat[2][4] = {{0x7C00, 0xFC00, 0x7E00, 0xFC01},
                                       {0x7F80, 0xFF80, 0x7FC0, 0xFF81}};
    uint16_t h[200];
    int bad = 0;
    for (int f = 0; f < 2; f++)
        for (int p = 0; p < 4; p++)
            for (size_t at = 0; at < 200; at++)
                for (int allow = 0; allow < 2; allow++) {
                    for (size_t i = 0; i < 200; i++)
                        h[i] = (uint16_t)(0x3C00 + i);      /* finite in both */
                    h[at] = pat[f][p];
                    if (at + 1 < 200 && p == 1)
                        h[at + 1] = pat[f][0];              /* -inf, then +inf */
                    for (size_t n = at; n <= 200; n += 67)
                        bad += half_first_nonfinite(h, n, f == 0, allow) !=
                               first_bad_ref(h, n, f == 0, allow);
                }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(half_first_nonfinite(h, 0, true, false), 0);
}

int main(void)
{
    ref_init(&R16);
    ref_init(&RB16);
    RUN(f16_every_pattern);
    RUN(bf16_every_pattern);
    RUN(rounding_at_every_midpoint);
    RUN(rounding_random);
    RUN(named_edges);
    RUN(f16c_matches_portable);
    RUN(first_nonfinite_bits);
    RUN(bf16_arrays_blocks_and_tails);
    TEST_MAIN_END();
}
