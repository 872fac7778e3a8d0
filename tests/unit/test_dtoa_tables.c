/*
 * tests/unit/test_dtoa_tables.c — api/codec/dtoa.c's two tables of powers of
 * ten
 * (Schubfach's g and Dragonbox's c) against a reference built another way:
 * 10^|p| as an exact big integer, with floor(log2 10^p) read off its bit
 * length, shifted down for p >= 0, and for p < 0 the power of two divided
 * by 10^|p| / 2^|p| = 5^|p| by restoring long division, one bit at a time.
 * Round-trip tests of the printed numbers (tests/api/test_api_numbers.c)
 * do not see an entry off by a few units; this compares every entry. The
 * file under test is compiled in here (its tables are static); it needs
 * nothing but libc.
 */
#include "api/codec/dtoa.c"

#include "tests/harness.h"

#define REF_LIMBS 48                /* 1536 bits: 10^326 needs 1083 */

struct ref {
    uint32_t w[REF_LIMBS];          /* little-endian */
};

static void ref_set(struct ref *a, uint32_t v)
{
    memset(a, 0, sizeof *a);
    a->w[0] = v;
}

static void ref_mul(struct ref *a, uint32_t m)
{
    uint64_t carry = 0;
    for (int i = 0; i < REF_LIMBS; i++) {
        uint64_t v = (uint64_t)a->w[i] * m + carry;
        a->w[i] = (uint32_t)v;
        carry = v >> 32;
    }
}

static int ref_bit(const struct ref *a, int i)
{
    return i >= 0 && i < 32 * REF_LIMBS ? (int)(a->w[i / 32] >> (i % 32) & 1) : 0;
}

/* Bits needed to write a (0 for 0). */
static int ref_bitlen(const struct ref *a)
{
    for (int i = 32 * REF_LIMBS - 1; i >= 0; i--)
        if (ref_bit(a, i))
            return i + 1;
    return 0;
}

static int ref_cmp(const struct ref *a, const struct ref *b)
{
    for (int i = REF_LIMBS - 1; i >= 0; i--)
        if (a->w[i] != b->w[i])
            return a->w[i] < b->w[i] ? -1 : 1;
    return 0;
}

static void ref_sub(struct ref *a, const struct ref *b)
{
    int64_t borrow = 0;
    for (int i = 0; i < REF_LIMBS; i++) {
        int64_t v = (int64_t)a->w[i] - b->w[i] - borrow;
        borrow = v < 0;
        a->w[i] = (uint32_t)(v + (borrow << 32));
    }
}

static void ref_shl1(struct ref *a, int low_bit)
{
    for (int i = REF_LIMBS - 1; i > 0; i--)
        a->w[i] = a->w[i] << 1 | a->w[i - 1] >> 31;
    a->w[0] = a->w[0] << 1 | (uint32_t)low_bit;
}

/* floor(2^t / d) by restoring long division; *wide: it needs more than
 * 128 bits (the tables' entries never do). */
static u128 ref_pow2_div(int t, const struct ref *d, bool *wide)
{
    struct ref r;
    u128 q = 0;

    ref_set(&r, 0);
    *wide = false;
    for (int i = t; i >= 0; i--) {
        ref_shl1(&r, i == t);
        *wide = *wide || q >> 127;
        q <<= 1;
        if (ref_cmp(&r, d) >= 0) {
            ref_sub(&r, d);
            q |= 1;
        }
    }
    return q;
}

/* floor(a / 2^s) (s may be negative: a * 2^-s), which must fit in 128
 * bits; *inexact: bits were dropped. */
static u128 ref_shift(const struct ref *a, int s, bool *inexact, bool *wide)
{
    u128 q = 0;
    int top = ref_bitlen(a) - 1;

    *inexact = false;
    for (int i = 0; i < s; i++)
        *inexact = *inexact || ref_bit(a, i);
    *wide = top - s >= 128;
    for (int i = 127; i >= 0; i--)
        q = q << 1 | (u128)ref_bit(a, i + s);
    return q;
}

/* floor(10^p / 2^(e - shift)) with e = floor(log2 10^p); *inexact as above. */
static u128 ref_entry(int p, int shift, bool *inexact, bool *wide, int *e_out)
{
    struct ref ten;
    int k = p < 0 ? -p : p;

    ref_set(&ten, 1);
    for (int i = 0; i < k; i++)
        ref_mul(&ten, 10);
    if (p >= 0) {
        int e = ref_bitlen(&ten) - 1;
        *e_out = e;
        return ref_shift(&ten, e - shift, inexact, wide);
    }
    /* 10^p = 2^-k / 5^k; floor(log2 10^p) = -bitlen(10^k) (10^k, k > 0, is
     * no power of two); floor(10^p / 2^s) = floor(2^(-k - s) / 5^k) */
    int e = -ref_bitlen(&ten);
    struct ref five;
    ref_set(&five, 1);
    for (int i = 0; i < k; i++)
        ref_mul(&five, 5);
    *e_out = e;
    *inexact = true;                /* 5^k never divides a power of two */
    return ref_pow2_div(-k - (e - shift), &five, wide);
}

TEST(schubfach_g_every_entry)
{
    int bad = 0, wide_n = 0, log_bad = 0;

    g_ensure();
    for (int k = G_KMIN; k <= G_KMAX; k++) {        /* g_hi[k] is for 10^-k */
        bool inexact, wide;
        int e;
        u128 g = ref_entry(-k, 125, &inexact, &wide, &e) + 1;
        wide_n += wide;
        log_bad += e != flog2pow10(-k);
        if ((g_hi[k - G_KMIN] != (uint64_t)(g >> 63) ||
             g_lo[k - G_KMIN] != ((uint64_t)g & ((1ull << 63) - 1))) && bad++ < 5)
            printf("  g for 10^%d: table %016llx %016llx, reference %016llx %016llx\n", -k,
                   (unsigned long long)g_hi[k - G_KMIN], (unsigned long long)g_lo[k - G_KMIN],
                   (unsigned long long)(g >> 63),
                   (unsigned long long)((uint64_t)g & ((1ull << 63) - 1)));
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(wide_n, 0);
    CHECK_EQ_INT(log_bad, 0);
}

TEST(dragonbox_c_every_entry)
{
    int bad = 0, wide_n = 0, log_bad = 0;

    g_ensure();
    for (int p = D_KMIN; p <= D_KMAX; p++) {
        bool inexact, wide;
        int e;
        u128 c = ref_entry(p, 127, &inexact, &wide, &e) + inexact;
        wide_n += wide;
        log_bad += e != flog2pow10(p);
        if ((d_hi[p - D_KMIN] != (uint64_t)(c >> 64) || d_lo[p - D_KMIN] != (uint64_t)c) &&
            bad++ < 5)
            printf("  c for 10^%d: table %016llx %016llx, reference %016llx %016llx\n", p,
                   (unsigned long long)d_hi[p - D_KMIN], (unsigned long long)d_lo[p - D_KMIN],
                   (unsigned long long)(c >> 64), (unsigned long long)c);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(wide_n, 0);
    CHECK_EQ_INT(log_bad, 0);
}

int main(void)
{
    RUN(schubfach_g_every_entry);
    RUN(dragonbox_c_every_entry);
    TEST_MAIN_END();
}
