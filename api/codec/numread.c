/*
 * api/codec/numread.c — the dedicated numeric-array reader of
 * api/codec/numread.h and
 * the body rewrite that hands the rest of the body to jansson.
 *
 * Numbers: the RFC 8259 grammar is checked byte by byte; the value comes
 * from Clinger's exact fast path (at most 19 digits, mantissa <= 2^53,
 * |exponent| <= 22: one correctly rounded multiplication or division of
 * exact doubles) or else from strtod on the validated text, so every value
 * is the correctly rounded one, as jansson's. In an array, each element's
 * delimiter is found first by a 16-byte scan (next_delim), so consecutive
 * elements do not wait on each other's digits; the commonest element,
 * -?D.F with up to 8 fraction digits, then takes one word load (leaf_fast),
 * the other short forms (-?I and -?I.F without exponent) a word of 8 bytes
 * at a time (num_fast), and anything else the byte-by-byte grammar.
 * Assumes the "C" LC_NUMERIC locale for strtod (the daemon never calls
 * setlocale).
 */
#include "api/codec/numread.h"

#include <math.h>
#include "api/codec/base64.h"
#include "api/bulk.h"
#include "api/early.h"
#include "api/spare.h"
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool is_digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

/* Byte classes of the reader: 1 JSON whitespace, 2 ',' or ']' (with
 * whitespace, what may follow a number in an array). */
static const unsigned char byte_class[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, [','] = 2, [']'] = 2};

static bool is_ws(char c)
{
    return byte_class[(unsigned char)c] == 1;
}

static const uint64_t pow10_u64[9] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* SWAR over 8 text bytes loaded little-endian and XORed with '0' (digits
 * become bytes 0..9). How many leading bytes are digits (0..8): bit 7 of a
 * byte below is set iff it is not a digit (no carries between bytes). */
static inline int swar_digits(uint64_t a)
{
    uint64_t bad = (((a & 0x7F7F7F7F7F7F7F7Full) + 0x7676767676767676ull) | a) &
                   0x8080808080808080ull;

    return bad ? __builtin_ctzll(bad) / 8 : 8;
}

/* The value of the first k (1..8) digit bytes of a (see swar_digits). */
static inline uint64_t swar_value(uint64_t a, int k)
{
    uint64_t d = k == 8 ? a : a << (8 * (8 - k));  /* leading zero digits in front */

    d = (d * 10) + (d >> 8);
    d = (((d & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
         (((d >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >> 32;
    return (uint32_t)d;
}

/* 8 bytes at p as a little-endian word XORed with '0' (see swar_digits). */
static inline uint64_t swar_load(const char *p)
{
    uint64_t x;

    memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x ^ 0x3030303030303030ull;
}

/*
 * Up to 8 digits at p at once (hand-written SWAR: the byte loop below cost
 * ~25 instructions a digit, most of a small request's parse): when 8 bytes
 * are readable, *val gets the value of the run of k (1..8) digits starting
 * at p, and k is returned; 0 when fewer than 8 bytes remain or p is not a
 * digit (the caller then takes one byte the slow way). k < 8 means p[k] is
 * readable and not a digit.
 */
static inline int digits8(const char *p, const char *end, uint64_t *val)
{
    uint64_t a;
    int k;

    if (end - p < 8)
        return 0;
    a = swar_load(p);
    k = swar_digits(a);
    if (k)
        *val = swar_value(a, k);
    return k;
}

/*
 * The common forms of a number, -?I or -?I.F (I at most 7 digits, F at most
 * 15, no exponent, at most 19 digits and a mantissa <= 2^53 in all), when
 * 24 bytes are readable at p: a handful of word operations instead of
 * num_parse's byte-by-byte grammar. Returns the byte after the number
 * (a delimiter, as num_parse checks), or NULL when the text is not of these
 * forms; num_parse then decides. The value is Clinger's exact one, as in
 * num_parse.
 */
static inline const char *num_fast(const char *p, const char *end, double *out)
{
    bool neg = *p == '-';
    uint64_t a, b, w;
    int k, m, m2;
    const char *q;
    double d;

    p += neg;
    if (end - p < 24)
        return NULL;
    if (is_digit(p[0]) && p[1] == '.') {    /* d.ddd: the usual one digit */
        w = (uint64_t)(p[0] - '0');
        k = 1;
    } else {
        a = swar_load(p);
        k = swar_digits(a);
        if (k == 0 || k == 8 || ((a & 0xFF) == 0 && k > 1))
            return NULL;                    /* no digit, long, or leading 0 */
        w = k == 1 ? (a & 0xFF) : swar_value(a, k);
    }
    q = p + k;
    if (*q != '.') {
        if (!byte_class[(unsigned char)*q])
            return NULL;
        d = (double)w;
        *out = w == 0 ? 0.0 : neg ? -d : d;     /* jansson: integer -0 is 0 */
        return q;
    }
    b = swar_load(q + 1);
    m = swar_digits(b);
    if (m == 0)
        return NULL;
    w = w * pow10_u64[m] + swar_value(b, m);
    q += 1 + m;
    if (m == 8) {                           /* a second block of fraction */
        b = swar_load(q);
        m2 = swar_digits(b);
        if (m2 == 8 || k + 8 + m2 > 19)
            return NULL;
        if (m2) {
            w = w * pow10_u64[m2] + swar_value(b, m2);
            q += m2;
            m += m2;
        }
        if (w > (1ull << 53))
            return NULL;
    }
    if (!byte_class[(unsigned char)*q])
        return NULL;                        /* an exponent, or not a number */
    d = (double)w / pow10_exact[m];
    *out = neg ? -d : d;
    return q;
}

/*
 * A run of decimal digits at p (< end) into the mantissa *w of *digits
 * significant digits (at most 19 kept; a dropped digit sets *truncated).
 * Returns the byte after the run; *count gets the digits read. Eight at a
 * time while 8 bytes are readable and the mantissa has room, else one by
 * one.
 */
static inline const char *digit_run(const char *p, const char *end, uint64_t *w,
                                    int *digits, bool *truncated, int *count)
{
    const char *start = p;
    uint64_t v;
    int k;

    while (*digits < 12 && (k = digits8(p, end, &v)) > 0) {
        *w = *w * pow10_u64[k] + v;
        *digits += k;
        p += k;
        if (k < 8) {                        /* p is a non-digit */
            *count = (int)(p - start);
            return p;
        }
    }
    for (; p < end && is_digit(*p); p++) {
        if (*digits < 19) {
            *w = *w * 10 + (uint64_t)(*p - '0');
            ++*digits;
        } else {
            *truncated = true;
        }
    }
    *count = (int)(p - start);
    return p;
}

/*
 * One number at p (< end). Returns the byte after it, or NULL when the text
 * is not a JSON number followed by a delimiter (whitespace, ',' or ']'), or
 * its value is not a finite double.
 */
static const char *num_parse(const char *p, const char *end, double *out)
{
    const char *start = p;
    uint64_t w = 0;
    int digits = 0, e10 = 0, ex = 0, kept, n;
    bool neg = false, is_int = true, truncated = false, eneg = false;

    if (*p == '-') {
        neg = true;
        if (++p == end)
            return NULL;
    }
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        p = digit_run(p, end, &w, &digits, &truncated, &n);
        e10 = n - digits;                   /* integer digits past the 19 kept */
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        is_int = false;
        if (++p == end || !is_digit(*p))
            return NULL;
        if (w == 0) {
            while (*p == '0') {             /* leading zeros of a fraction */
                e10--;
                if (++p == end)
                    break;
            }
        }
        if (p < end && is_digit(*p)) {
            kept = digits;
            p = digit_run(p, end, &w, &digits, &truncated, &n);
            e10 -= digits - kept;           /* fraction digits kept */
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = false;
        if (++p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p == end || !is_digit(*p))
            return NULL;
        for (; p < end && is_digit(*p); p++)
            if (ex < 100000)                /* saturates: strtod reads it then */
                ex = ex * 10 + (*p - '0');
    }
    if (p == end || !byte_class[(unsigned char)*p])
        return NULL;
    e10 += eneg ? -ex : ex;
    if (w == 0) {
        *out = neg && !is_int ? -0.0 : 0.0;     /* jansson: integer -0 is 0 */
    } else if (!truncated && ex < 100000 && w <= (1ull << 53) && e10 >= -22 &&
               e10 <= 22) {
        /* (a saturated exponent may land e10 here after ~1e5 leading zeros
         * of a fraction: "0.000...01e1000000" overflows, it is not 1e9) */
        double d = (double)w;
        d = e10 < 0 ? d / pow10_exact[-e10] : d * pow10_exact[e10];
        *out = neg ? -d : d;
    } else {
        *out = strtod(start, NULL);     /* stops at the delimiter checked above */
        if (!isfinite(*out))
            return NULL;
    }
    return p;
}

struct np {
    const char *p, *end;
    int rank;                       /* 0 until the first number is seen */
    size_t shape[ATTN_MAX_RANK];    /* 0 until the first array of a level closes */
    double *data;
    size_t n, cap, max;
};

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

/* After an element of an array (*pp <= end): whitespace, then ','
 * (returns 1, *pp past it and the whitespace after it) or ']' (returns 0,
 * *pp at it); -1 for anything else. The is_ws tests keep the common case,
 * no whitespace, free of calls. */
static inline int list_next(const char **pp, const char *end)
{
    const char *p = *pp;

    if (p < end && is_ws(*p))
        p = skip_ws(p, end);
    if (p == end || (*p != ',' && *p != ']'))
        return -1;
    if (*p == ']') {
        *pp = p;
        return 0;
    }
    p++;
    if (p < end && is_ws(*p))
        p = skip_ws(p, end);
    *pp = p;
    return 1;
}

/* Room for one more number: false when over max_count or out of memory.
 * The first block is 64 numbers (512 bytes), within glibc's per-thread
 * cache of small chunks: a small request's three arrays then cost three
 * cheap allocations instead of three 2 KiB ones from the shared bins. */
static bool np_grow(struct np *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    double *d;

    if (cap > s->max)
        cap = s->max;
    if (s->n == cap)
        return false;               /* over max_count */
    d = realloc(s->data, cap * sizeof *d);   /* cap <= max_count, checked by caller */
    if (!d)
        return false;
    s->data = d;
    s->cap = cap;
    return true;
}

/*
 * The first ',' or ']' at or after p (<= end), or end: where an array
 * element must end. Found apart from the element's own parse, so the next
 * element's position waits only on this scan (a 16-byte compare), not on
 * the number's digits: consecutive numbers then parse side by side instead
 * of one after the other (hand-written SSE2, the x86-64 baseline; other
 * targets take the byte loop).
 */
static inline const char *next_delim(const char *p, const char *end)
{
#ifdef __SSE2__
    const __m128i comma = _mm_set1_epi8(','), close = _mm_set1_epi8(']');

    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, close)));
        if (m)
            return p + __builtin_ctz(m);
        p += 16;
    }
#endif
    while (p < end && *p != ',' && *p != ']')
        p++;
    return p;
}

/*
 * The commonest element, -?D.F with 1 to 8 fraction digits and nothing
 * between it and its delimiter d (from next_delim): with d known, its
 * length says how many digits to take, so one word load and one check
 * replace num_fast's grammar walk. Returns d, or NULL when the text is not
 * of this form (num_fast / num_parse then decide). The value is Clinger's
 * exact one (mantissa < 10^9), as theirs.
 */
static inline const char *leaf_fast(const char *p, const char *d, const char *end,
                                    double *out)
{
    bool neg = *p == '-';
    const char *s = p + neg;
    size_t m = (size_t)(d - s) - 2;         /* fraction digits, if the form fits */
    uint64_t b, w;
    double x;

    if (d - s < 3 || d - s > 10 || end - s < 10 || !is_digit(s[0]) || s[1] != '.')
        return NULL;
    b = swar_load(s + 2);
    if ((size_t)swar_digits(b) < m)
        return NULL;                        /* a non-digit before d */
    w = (uint64_t)(s[0] - '0') * pow10_u64[m] + swar_value(b, (int)m);
    x = (double)w / pow10_exact[m];
    *out = neg ? -x : x;
    return d;
}

/* The numbers of an innermost array, s->p at its first (after '[' and
 * whitespace); s->p ends after its ']'. Returns how many, or 0 on failure.
 * An element is valid when its number, then whitespace only, reaches the
 * delimiter next_delim found (a number holds no ',' or ']'). */
static size_t np_leaf(struct np *s)
{
    const char *p = s->p, *end = s->end;
    size_t count = 0;

    for (;;) {
        double x;
        const char *q, *d;
        if (p == end)
            return 0;
        d = next_delim(p, end);
        if (!leaf_fast(p, d, end, &x)) {
            if (!(q = num_fast(p, end, &x)) && !(q = num_parse(p, end, &x)))
                return 0;
            if (q != d && skip_ws(q, end) != d)
                return 0;
        }
        if (d == end)
            return 0;
        if (s->n == s->cap && !np_grow(s))
            return 0;
        s->data[s->n++] = x;
        count++;
        if (*d == ']') {
            s->p = d + 1;
            return count;
        }
        p = d + 1;
        if (p < end && is_ws(*p))
            p = skip_ws(p, end);
    }
}

/* The array at s->p (after '['), at nesting level (0 = outermost). */
static bool np_array(struct np *s, int level)
{
    size_t count = 0;
    bool rows;

    s->p = skip_ws(s->p, s->end);
    if (s->p == s->end || *s->p == ']')
        return false;                   /* empty: jansson reports it */
    rows = *s->p == '[';
    if (rows ? (s->rank && level >= s->rank - 1) || level + 1 >= ATTN_MAX_RANK
             : (s->rank && level != s->rank - 1))
        return false;                   /* ragged depth or too deep */
    if (!rows) {
        s->rank = level + 1;
        if (!(count = np_leaf(s)))
            return false;
    } else {
        for (;;) {
            if (s->p == s->end || *s->p != '[')
                return false;
            s->p++;
            if (!np_array(s, level + 1))
                return false;
            count++;
            int more = list_next(&s->p, s->end);
            if (more < 0)
                return false;
            if (!more)
                break;
        }
        s->p++;
    }
    if (s->shape[level] == 0)
        s->shape[level] = count;
    return s->shape[level] == count;
}

size_t api_numarray_parse(const char *s, size_t len, size_t max_count,
                          struct api_numarray *out)
{
    struct np st;
    size_t i, total = 1;

    if (len == 0 || s[0] != '[' || max_count == 0)
        return 0;
    if (max_count > SIZE_MAX / sizeof(double))
        max_count = SIZE_MAX / sizeof(double);  /* what can be allocated at all */
    memset(&st, 0, sizeof st);
    st.p = s + 1;
    st.end = s + len;
    st.max = max_count;
    if (!np_array(&st, 0)) {
        free(st.data);
        return 0;
    }
    for (i = 0; i < (size_t)st.rank; i++)
        total *= st.shape[i];           /* <= n, which fits */
    if (total != st.n) {
        free(st.data);
        return 0;
    }
    memset(out, 0, sizeof *out);
    out->rank = st.rank;
    memcpy(out->shape, st.shape, sizeof st.shape);
    out->count = st.n;
    out->data = st.data;
    return (size_t)(st.p - s);
}

void api_numarray_free(struct api_numarray *a)
{
    free(a->data);
    api_spare_free(a->raw);
    memset(a, 0, sizeof *a);
}

/* ---- base64 tensor objects -------------------------------------------- */

/* A string without escapes or control characters at p ('"'): its text in
 * *t, *n; returns the byte after it, or NULL. A string with holes (early,
 * api/early.h) is not read: its end is known. */
static const char *plain_string(const struct api_early *early, const char *p,
                                const char *end, const char **t, size_t *n)
{
    const char *q = api_early_quote(early, p);

    if (!q)
        q = memchr(p + 1, '"', (size_t)(end - p - 1));

    if (!q)
        return NULL;
    *t = p + 1;
    *n = (size_t)(q - p - 1);
    if (*n < 64) {                  /* keys and dtypes; data is checked by the
                                       base64 decoder, whose alphabet has
                                       neither '\\' nor control characters */
        const char *c;
        for (c = *t; c < q; c++)
            if (*c == '\\' || (unsigned char)*c < 0x20)
                return NULL;
    }
    return q + 1;
}

/* The data string at p ('"') of a tensor whose shape and dtype (esize
 * bytes an element) came before it: its length follows from them (4 base64
 * characters per 3 bytes, padded), so its closing quote is checked there
 * instead of searched for through megabytes (a memchr there was a quarter
 * of reading a large tensor: docs/benchmarks.md, section "On the AVX2
 * EPYC"; the decoder checks every character before the quote). Its text
 * in *t, *n; the byte after it, or NULL when the quote is not there
 * (plain_string decides). */
static const char *sized_string(const char *p, const char *end, int rank,
                                const size_t *shape, size_t esize,
                                const char **t, size_t *n)
{
    size_t count = 1, bytes, k;
    int i;

    for (i = 0; i < rank; i++)
        if (!core_mul(count, shape[i], &count))
            return NULL;
    if (!core_mul(count, esize, &bytes) || bytes > (size_t)(end - p) / 4 * 3)
        return NULL;
    k = (bytes + 2) / 3 * 4;
    if (k + 1 >= (size_t)(end - p) || p[k + 1] != '"')
        return NULL;
    *t = p + 1;
    *n = k;
    return p + k + 2;
}

static bool text_is(const char *t, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(t, lit, n) == 0;
}

/* [d0, d1, d2]: 1..3 positive integers without sign, fraction or exponent
 * (at most 18 digits each). */
static const char *shape_list(const char *p, const char *end, int *rank,
                              size_t *shape)
{
    *rank = 0;
    p = skip_ws(p + 1, end);
    for (;;) {
        size_t v = 0;
        int digits = 0;
        if (p == end || *p < '1' || *p > '9' || *rank == ATTN_MAX_RANK)
            return NULL;
        for (; p < end && is_digit(*p); p++) {
            if (++digits > 18)
                return NULL;
            v = v * 10 + (size_t)(*p - '0');
        }
        shape[(*rank)++] = v;
        p = skip_ws(p, end);
        if (p == end)
            return NULL;
        if (*p == ']')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* The element check of api/bulk.c for a base64 tensor of dtype (half: its
 * 2-byte format). */
static enum api_bulk_elem bulk_elem(enum attn_dtype dtype, enum api_half half)
{
    return half == API_HALF_F16 ? API_BULK_F16
         : half == API_HALF_BF16 ? API_BULK_BF16
         : dtype == ATTN_F64 ? API_BULK_F64 : API_BULK_F32;
}

/* api_b64tensor_parse without the decoding: out->raw is allocated, and
 * *job says what to decode into it (api_bulk_run). */
static size_t b64tensor_scan(const struct api_early *early, const char *s, size_t len,
                             size_t max_count, struct api_numarray *out, struct api_bulk *job)
{
    const char *p = s + 1, *end = s + len, *data = NULL, *t;
    size_t shape[ATTN_MAX_RANK] = {0}, n, data_len = 0, count = 1, bytes, have;
    int rank = 0, i, seen = 0, dtype = -1;
    enum api_half half = API_HALF_NONE;
    void *raw;

    if (len == 0 || s[0] != '{')
        return 0;
    for (;;) {
        p = skip_ws(p, end);
        if (p == end || *p != '"' || !(p = plain_string(early, p, end, &t, &n)))
            return 0;
        p = skip_ws(p, end);
        if (p == end || *p++ != ':')
            return 0;
        p = skip_ws(p, end);
        if (p == end)
            return 0;
        if (text_is(t, n, "shape") && !(seen & 1) && *p == '[') {
            seen |= 1;
            p = shape_list(p, end, &rank, shape);
        } else if (text_is(t, n, "dtype") && !(seen & 2) && *p == '"') {
            seen |= 2;
            if ((p = plain_string(early, p, end, &t, &n))) {
                half = text_is(t, n, "float16") ? API_HALF_F16
                     : text_is(t, n, "bfloat16") ? API_HALF_BF16 : API_HALF_NONE;
                dtype = text_is(t, n, "float64") ? ATTN_F64
                      : text_is(t, n, "float32") || half ? ATTN_F32 : -1;
            }
            if (dtype < 0)
                return 0;
        } else if (text_is(t, n, "data") && !(seen & 4) && *p == '"') {
            /* a string with holes has its end known: no quote is looked
             * for where its characters are not */
            const char *q = (seen & 3) == 3 && !api_early_quote(early, p)
                ? sized_string(p, end, rank, shape,
                               api_dtype_size((enum attn_dtype)dtype, half),
                               &data, &data_len)
                : NULL;
            seen |= 4;
            p = q ? q : plain_string(early, p, end, &data, &data_len);
        } else {
            return 0;
        }
        if (!p || (p = skip_ws(p, end)) == end)
            return 0;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return 0;
    }
    if (seen != 7)
        return 0;
    for (i = 0; i < rank; i++)
        if (!core_mul(count, shape[i], &count))
            return 0;
    if (count > max_count ||
        !core_mul(count, api_dtype_size((enum attn_dtype)dtype, half), &bytes) ||
        !api_base64_decoded_len(data, data_len, &have) || have != bytes ||
        !(raw = api_spare_alloc(bytes, NULL)))
        return 0;
    memset(out, 0, sizeof *out);
    out->rank = rank;
    memcpy(out->shape, shape, sizeof shape);
    out->count = count;
    out->raw = raw;
    out->raw_dtype = (enum attn_dtype)dtype;
    out->raw_half = half;
    *job = (struct api_bulk){.text = data, .len = data_len, .dst = raw,
                             .elem = bulk_elem((enum attn_dtype)dtype, half)};
    return (size_t)(p + 1 - s);
}

size_t api_b64tensor_parse(const char *s, size_t len, size_t max_count,
                           struct api_numarray *out)
{
    struct api_numarray a;
    struct api_bulk job;
    size_t used = b64tensor_scan(NULL, s, len, max_count, &a, &job);

    if (!used)
        return 0;
    if (!api_bulk_run(&job, 1, NULL)) {
        api_numarray_free(&a);
        return 0;
    }
    a.raw_finite = !job.nonfinite;
    *out = a;
    return used;
}

void api_pre_free(struct api_pre *pre)
{
    size_t i;

    for (i = 0; i < pre->n; i++)
        api_numarray_free(&pre->e[i].a);
    pre->n = 0;
    pre->whole = false;
}

struct api_numarray *api_pre_find(const struct api_pre *pre, const char *path)
{
    size_t i;

    for (i = 0; pre && i < pre->n; i++)
        if ((pre->e[i].a.data || pre->e[i].a.raw) &&
            strcmp(pre->e[i].path, path) == 0)
            return (struct api_numarray *)&pre->e[i].a;
    return NULL;
}

/* ---- following the top level of the body ------------------------------ */

/* End of the string starting at p ('"'), or NULL (one with holes, early:
 * not read). */
static const char *skip_string(const struct api_early *early, const char *p,
                               const char *end)
{
    const char *q = api_early_quote(early, p);

    if (q)
        return q + 1;
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* End of any JSON value at p (not validated: jansson does that), or NULL
 * (also when its brackets nest to max_depth: with the enclosing body that
 * is beyond it). */
static const char *skip_value(const struct api_early *early, const char *p,
                              const char *end, size_t max_depth)
{
    size_t depth = 0;

    while (p < end) {
        char c = *p;
        if (c == '"') {
            if (!(p = skip_string(early, p, end)))
                return NULL;
            if (depth == 0)
                return p;
            continue;
        }
        if (c == '[' || c == '{') {
            if (++depth >= max_depth)
                return NULL;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return p;               /* end of the enclosing object */
            if (--depth == 0)
                return p + 1;
        } else if (depth == 0 && (c == ',' || is_ws(c))) {
            return p;
        }
        p++;
    }
    return depth == 0 ? p : NULL;
}

static bool key_listed(const char *k, size_t n, const char *const *keys)
{
    for (; *keys; keys++)
        if (strlen(*keys) == n && memcmp(*keys, k, n) == 0)
            return true;
    return false;
}

struct span {
    size_t start, end;
};

/* Every member taken (members of them), none twice? */
static bool pre_whole(const struct api_pre *pre, size_t members)
{
    size_t i, j;

    if (members != pre->n)
        return false;
    for (i = 0; i < pre->n; i++)
        for (j = 0; j < i; j++)
            if (strcmp(pre->e[i].path, pre->e[j].path) == 0)
                return false;
    return true;
}

/* Walk the top-level object; read listed numeric members into pre (and
 * set pre->whole). */
static bool pre_scan(const char *body, size_t len, const struct api_early *early,
                     const char *const *keys, size_t max_count, size_t max_depth,
                     struct api_pre *pre, struct span *spans, struct api_bulk *jobs,
                     size_t *njobs)
{
    const char *p = body, *end = body + len;
    size_t budget = max_count, members = 0;

    p = skip_ws(p, end);
    if (p == end || *p++ != '{')
        return false;
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return skip_ws(p + 1, end) == end;
    for (;;) {
        const char *k, *ke, *v;
        if (p == end || *p != '"' || !(ke = skip_string(early, p, end)))
            return false;
        k = p + 1;
        p = skip_ws(ke, end);
        if (p == end || *p++ != ':')
            return false;
        v = p = skip_ws(p, end);
        members++;
        if (p < end && (*p == '[' || *p == '{') && pre->n < API_PRE_MAX &&
            key_listed(k, (size_t)(ke - 1 - k), keys) && (size_t)(ke - 1 - k) < 30) {
            struct api_numarray a;
            size_t used = *p == '['
                ? api_numarray_parse(v, (size_t)(end - v), budget, &a)
                : b64tensor_scan(early, v, (size_t)(end - v), budget, &a, &jobs[*njobs]);
            if (used && a.raw)
                ++*njobs;               /* decoded after the scan, all at once */
            if (used) {
                size_t i = pre->n++;
                pre->e[i].path[0] = '/';
                memcpy(pre->e[i].path + 1, k, (size_t)(ke - 1 - k));
                pre->e[i].path[ke - k] = '\0';
                pre->e[i].a = a;
                spans[i].start = (size_t)(v - body);
                spans[i].end = spans[i].start + used;
                budget -= a.count;
                p = v + used;
            } else if (!(p = skip_value(early, v, end, max_depth))) {
                return false;
            }
        } else if (!(p = skip_value(early, v, end, max_depth))) {
            return false;
        }
        p = skip_ws(p, end);
        if (p == end)
            return false;
        if (*p == '}') {
            if (skip_ws(p + 1, end) != end)
                return false;
            pre->whole = pre_whole(pre, members);
            return true;
        }
        if (*p++ != ',')
            return false;
        p = skip_ws(p, end);
    }
}

/* Job j (the base64 tensor of entry a) started from what api/early.c
 * decoded of its string while the body arrived, when it did: a's buffer
 * is that one, the job decodes the rest of the string after it, and a
 * job appended at jobs[*njobs] checks the bytes decoded early unless
 * their early check already covers this dtype. */
static void pre_early(struct api_early *early, struct api_numarray *a,
                      struct api_bulk *jobs, size_t j, size_t *njobs)
{
    struct api_bulk *b = &jobs[j];
    struct api_early_bytes eb;
    size_t bytes;

    if (!api_early_take(early, b->text, b->len, &eb))
        return;
    bytes = eb.chars / 4 * 3;
    api_spare_free(a->raw);
    a->raw = eb.data;
    b->dst = (unsigned char *)eb.data + bytes;
    b->text += eb.chars;
    b->len -= eb.chars;
    if (!(eb.f32_finite && b->elem == API_BULK_F32))
        jobs[(*njobs)++] = (struct api_bulk){.src = eb.data, .dst = eb.data, .len = bytes,
                                             .elem = b->elem};
}

/* Decode the base64 tensors pre_scan took (njobs of them, in pre's order
 * among its entries with raw), over pool's cores; false if any is bad.
 * jobs has room for as many again (pre_early's checks). */
static bool pre_decode(struct api_pre *pre, struct api_early *early,
                       struct api_bulk *jobs, size_t njobs, struct attn_pool *pool)
{
    size_t i, j = 0, all = njobs, check[API_PRE_MAX];

    for (i = 0; i < pre->n; i++)
        if (pre->e[i].a.raw) {
            size_t before = all;
            pre_early(early, &pre->e[i].a, jobs, j++, &all);
            check[i] = all > before ? before : SIZE_MAX;
        }
    /* the strings not taken read as sent: the jobs and the text left for
     * jansson may hold them */
    api_early_restore(early, false);
    if (all && !api_bulk_run(jobs, all, pool))
        return false;
    for (i = j = 0; i < pre->n; i++)
        if (pre->e[i].a.raw) {
            pre->e[i].a.raw_finite = !jobs[j++].nonfinite &&
                                     (check[i] == SIZE_MAX || !jobs[check[i]].nonfinite);
        }
    return true;
}

char *api_pre_rewrite(const char *body, size_t len, const char *const *keys,
                      size_t max_count, size_t max_depth, struct attn_pool *pool,
                      struct api_early *early, struct api_pre *pre, size_t *out_len)
{
    struct span spans[API_PRE_MAX];
    struct api_bulk jobs[2 * API_PRE_MAX];
    size_t i, from = 0, n = 0, njobs = 0;
    char *out;

    memset(pre, 0, sizeof *pre);
    api_early_settle(early);
    if (max_depth < ATTN_MAX_RANK + 2 ||     /* room for the fast arrays */
        !pre_scan(body, len, early, keys, max_count, max_depth, pre, spans, jobs, &njobs) ||
        pre->n == 0 || !pre_decode(pre, early, jobs, njobs, pool)) {
        api_early_restore(early, true);     /* jansson reads it all now */
        api_pre_free(pre);
        return NULL;
    }
    if (pre->whole)
        return NULL;                    /* no text needed: see numread.h */
    /* Only what is left: each span shrinks to 1 byte. A copy sized as the
     * body (4.2 MB for a 2048 x 128 base64 request, of which ~100 bytes
     * were written) went past malloc's mmap threshold: an mmap, a page
     * fault and an munmap (with its TLB shootdown) per request. */
    size_t left = len;
    for (i = 0; i < pre->n; i++)
        left -= spans[i].end - spans[i].start - 1;
    if (!(out = malloc(left + 1))) {
        api_early_restore(early, true);
        api_pre_free(pre);
        return NULL;
    }
    for (i = 0; i < pre->n; i++) {
        memcpy(out + n, body + from, spans[i].start - from);
        n += spans[i].start - from;
        out[n++] = '0';
        from = spans[i].end;
    }
    memcpy(out + n, body + from, len - from);
    n += len - from;
    *out_len = n;
    return out;
}
