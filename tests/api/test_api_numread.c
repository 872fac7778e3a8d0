/*
 * tests/api/test_api_numread.c — the fast numeric-array reader against
 * jansson (the differential check issue 9 asks for), deterministic so it
 * runs in `make test`:
 *  - generated arrays in many textual forms (integers, -0, fractions,
 *    -?D.F with 1-10 fraction digits, exponents, 17+ digit mantissas,
 *    whitespace) and thousands of random
 *    byte mutations of them: the reader takes a text exactly when jansson
 *    parses it to a rectangular numeric array of finite values (rank 1..3,
 *    no empty level), and then every value is bit-identical (but for the
 *    sign of an integer -0 when jansson must retry with integers as reals);
 *  - whole /v1/attention bodies (nested arrays and base64 tensor objects),
 *    mutated: reading with the fast path
 *    (api_parse_body_pre + api_read_attention_pre) and without it gives the
 *    same outcome — the same error object, or the same q, k, v bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/harness.h"
#include "tests/api/api_testlib.h"
#include "api/codec/base64.h"
#include "api/internal.h"
#include "api/codec/numread.h"
#include "api/read.h"
#include "tests/api/numread_diff.h"

static struct api_ctx ctx;

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng(void)
{
    return t_rng_next(&rng_state);
}

/* ---- generated texts --------------------------------------------------- */

static void put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t l = strlen(s);

    if (*n + l < cap) {
        memcpy(buf + *n, s, l);
        *n += l;
        buf[*n] = '\0';
    }
}

static void gen_number(char *out, size_t cap)
{
    static const char *const fixed[] = {
        "0", "-0", "0.0", "-0.0", "1", "-1", "0.5", "1e5", "1E5", "1e+5", "1e-5",
        "-2.5e-3", "123456789012345678", "12345678901234567890123",
        "9007199254740993", "9007199254740992", "0.1", "0.30000000000000004",
        "2.2250738585072014e-308", "4.9e-324", "1e-400", "1.7976931348623157e308",
        "1e308", "1e309", "-1e309", "0.000000000000000000000000000001",
        "3.14159265358979323846264338327950288", "1e22", "1e23", "8e-23",
        "100000000000000000000000", "0e0", "-0e-0", "5e-324", "2e-323"};
    uint64_t r = rng();

    switch (r % 5) {
    case 0:
        snprintf(out, cap, "%s", fixed[(r >> 8) % (sizeof fixed / sizeof fixed[0])]);
        break;
    case 1: {
        uint64_t bits = rng();
        double x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x))
            x = 1.5;
        snprintf(out, cap, "%.*g", (int)(1 + (r >> 8) % 17), x);
        break;
    }
    case 2:
        snprintf(out, cap, "%lld", (long long)(rng() >> ((r >> 8) % 64)) *
                                   ((r >> 20) & 1 ? -1 : 1));
        break;
    case 3: {                               /* -?D.F, numread's commonest form */
        int m = (int)(1 + (r >> 8) % 10), i;  /* 1..10 fraction digits */
        size_t n = (size_t)snprintf(out, cap, "%s%d.", (r >> 12) & 1 ? "-" : "",
                                    (int)((r >> 13) % 10));
        for (i = 0; i < m && n + 1 < cap; i++)
            out[n++] = (char)('0' + rng() % 10);
        out[n] = '\0';
        break;
    }
    default:
        snprintf(out, cap, "%s%llu.%llue%s%d", (r >> 8) & 1 ? "-" : "",
                 (unsigned long long)(rng() % 100000),
                 (unsigned long long)(rng() % 1000000000000ull),
                 (r >> 9) & 1 ? "-" : "", (int)((r >> 10) % 330));
        break;
    }
}

static const char *gen_ws(void)
{
    static const char *const ws[] = {"", "", "", " ", "\n", "\t", " \r\n "};
    return ws[rng() % 7];
}

/* A random nested array of rank 1..3 (sometimes ragged). */
static size_t gen_array(char *buf, size_t cap)
{
    int rank = (int)(1 + rng() % 3), i0, i1, i2;
    int s0 = (int)(1 + rng() % 4), s1 = (int)(1 + rng() % 4), s2 = (int)(1 + rng() % 5);
    size_t n = 0;
    char num[64];

    buf[0] = '\0';
    put(buf, cap, &n, gen_ws());
    put(buf, cap, &n, "[");
    for (i0 = 0; i0 < s0; i0++) {
        if (i0)
            put(buf, cap, &n, ",");
        put(buf, cap, &n, gen_ws());
        if (rank == 1) {
            gen_number(num, sizeof num);
            put(buf, cap, &n, num);
            continue;
        }
        put(buf, cap, &n, "[");
        for (i1 = 0; i1 < s1 + (rng() % 16 == 0); i1++) {
            if (i1)
                put(buf, cap, &n, ",");
            put(buf, cap, &n, gen_ws());
            if (rank == 2) {
                gen_number(num, sizeof num);
                put(buf, cap, &n, num);
                put(buf, cap, &n, gen_ws());
                continue;
            }
            put(buf, cap, &n, "[");
            for (i2 = 0; i2 < s2; i2++) {
                if (i2)
                    put(buf, cap, &n, ",");
                gen_number(num, sizeof num);
                put(buf, cap, &n, num);
            }
            put(buf, cap, &n, "]");
        }
        put(buf, cap, &n, "]");
        put(buf, cap, &n, gen_ws());
    }
    put(buf, cap, &n, "]");
    put(buf, cap, &n, gen_ws());
    return n;
}

/* Flip, insert or delete one byte, from an alphabet that matters. */
static size_t mutate(char *buf, size_t n, size_t cap)
{
    static const char alphabet[] = "[]{},:.-+eE0123456789 \"\nxnq\\";
    size_t pos = n ? (size_t)(rng() % n) : 0;
    char ch = alphabet[rng() % (sizeof alphabet - 1)];

    switch (rng() % 3) {
    case 0:
        if (n)
            buf[pos] = ch;
        break;
    case 1:
        if (n + 1 < cap) {
            memmove(buf + pos + 1, buf + pos, n - pos + 1);
            buf[pos] = ch;
            n++;
        }
        break;
    default:
        if (n) {
            memmove(buf + pos, buf + pos + 1, n - pos);
            n--;
        }
        break;
    }
    buf[n] = '\0';
    return n;
}

TEST(fixed_texts_agree)
{
    static const char *const texts[] = {
        "[1,2,3]", "[[1,2],[3,4]]", "[[[1],[2]],[[3],[4]]]", "[]", "[[]]", "[[1],[]]",
        "[[1,2],[3]]", "[[1,2],3]", "[1,[2]]", "[[[[1]]]]", "[[[[[1]]]]]", "[1,]", "[,1]", "[01]",
        "[1.]", "[.5]", "[+1]", "[1e]", "[1e+]", "[-]", "[--1]", "[0x10]", "[Infinity]",
        "[NaN]", "[1 2]", "[1,2", "[1,2]]", "[true]", "[null]", "[\"1\"]", "[1e999]",
        "[-1e999]", "[ 1 , 2 ]", "[\t1\n,\r2 ]", "[-0]", "[-0.0]", "[1E2]", "[1e-2]",
        "[123456789012345678901234567890]", "[0.1e1]", "[1]x", "[1] ", "[[1,2],[3,4]] ",
        "[1\x00]", "[1,\xff]",
        /* the -?D.F form at its edges: 1 and 8 fraction digits, 9 (too many
         * for one word), a space or an exponent before the delimiter, a
         * non-digit inside, the end of the text */
        "[0.5,-0.5,9.99999999,-9.99999999,1.000000001]", "[1.5 ,2.25\n]",
        "[1.5e3,2.5E-1]", "[1.2x4,5]", "[1.5,-0.0]", "[[0.12345678],[-1.2]]",
        "[1.5", "[1.23456789]", "[1.2.3]", "[1.-2]"};
    size_t i;

    for (i = 0; i < sizeof texts / sizeof texts[0]; i++)
        CHECK(numread_agree(texts[i], strlen(texts[i])));
}

/* An exponent of 7 or more digits saturates the reader's count; after
 * 99990 leading zeros of a fraction the saturated count lands the value
 * back in the exact range: "0.0...01e1000000" overflows (jansson refuses
 * it); it must not read as 1e9. */
TEST(saturated_exponent_after_leading_zeros)
{
    static const char *const exps[] = {"1000000", "1000022", "9999999", "100000"};
    size_t zeros = 99990, cap = zeros + 64;
    char *t = malloc(cap);

    CHECK(t != NULL);
    for (size_t i = 0; t && i < sizeof exps / sizeof exps[0]; i++) {
        size_t n = 0;
        memcpy(t, "[0.", 3), n = 3;
        memset(t + n, '0', zeros), n += zeros;
        n += (size_t)snprintf(t + n, cap - n, "1e%s]", exps[i]);
        CHECK(numread_agree(t, n));
    }
    free(t);
}

TEST(generated_and_mutated_agree)
{
    char buf[8192];
    int i, m, bad = 0;

    for (i = 0; i < 1500; i++) {
        size_t n = gen_array(buf, sizeof buf - 8);
        if (!numread_agree(buf, n) && bad++ > 5)
            break;
        for (m = 0; m < 4; m++) {
            n = mutate(buf, n, sizeof buf);
            if (!numread_agree(buf, n) && bad++ > 5)
                break;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(count_limits)
{
    struct api_numarray a;

    CHECK(api_numarray_parse("[1,2]", 5, SIZE_MAX, &a) == 5);   /* no limit */
    CHECK_EQ_INT(a.count, 2);
    CHECK(a.data[0] == 1 && a.data[1] == 2);
    api_numarray_free(&a);
    CHECK(api_numarray_parse("[[1,2],[3,4]]", 13, 4, &a) == 13);
    api_numarray_free(&a);
    CHECK(api_numarray_parse("[[1,2],[3,4]]", 13, 3, &a) == 0); /* over the cap */
    CHECK(api_numarray_parse("[1,2]", 4, 10, &a) == 0);         /* cut short */
}

/* ---- whole bodies: fast path == jansson path -------------------------- */

struct outcome {
    int ok;
    char err[600];
    struct api_attention_req a;
};

static void outcome_free(struct outcome *o)
{
    if (o->ok)
        api_attention_req_free(&o->a);
}

/* A POST /v1/attention call of body (len bytes) with JSON headers, into
 * c over the caller's req and resp (free resp with api_response_free). */
static void call_init(struct api_call *c, struct api_request *req,
                      struct api_response *resp, const char *body, size_t len)
{
    memset(req, 0, sizeof *req);
    memset(resp, 0, sizeof *resp);
    memset(c, 0, sizeof *c);
    req->method = "POST";
    req->path = "/v1/attention";
    req->header = t_header_fn;
    req->header_arg = (void *)t_json_headers;
    req->body = body;
    req->body_len = len;
    c->ctx = &ctx;
    c->req = req;
    c->resp = resp;
}

static void read_body(const char *body, size_t len, int fast, struct outcome *o)
{
    static const char *const qkv[] = {"q", "k", "v", NULL};
    static struct api_fast_keys keys = {.names = qkv};
    struct api_request req;
    struct api_response resp;
    struct api_call c;
    struct api_pre pre;
    json_t *root;

    call_init(&c, &req, &resp, body, len);
    memset(o, 0, sizeof *o);
    memset(&pre, 0, sizeof pre);
    root = fast ? api_parse_body_pre(&c, &keys, &pre) : api_parse_body(&c);
    if (root) {
        o->ok = fast ? api_read_attention_pre(&c, root, &pre, &o->a)
                     : api_read_attention(&c, root, &o->a);
        json_decref(root);
    }
    api_pre_free(&pre);
    if (!o->ok)
        snprintf(o->err, sizeof o->err, "%d %.*s", resp.status,
                 (int)resp.body_len, resp.body ? resp.body : "");
    api_response_free(&resp);
}

static int same_tensor(const struct api_tensor *x, const struct api_tensor *y,
                       int loose)
{
    size_t i;

    if (x->rank != y->rank || x->count != y->count || x->dtype != y->dtype ||
        memcmp(x->shape, y->shape, sizeof x->shape) != 0)
        return 0;
    if (x->dtype == ATTN_F64)
        return same_values(x->data, y->data, x->count, loose);
    for (i = 0; i < x->count; i++) {
        float a = ((const float *)x->data)[i], b = ((const float *)y->data)[i];
        if (loose ? !(a == b) : memcmp(&a, &b, sizeof a) != 0)
            return 0;
    }
    return 1;
}

static int bodies_agree(const char *body, size_t len)
{
    struct outcome f, s;
    int ok, loose = int_overflow(body, len);

    read_body(body, len, 1, &f);
    read_body(body, len, 0, &s);
    ok = f.ok == s.ok && (f.ok ? same_tensor(&f.a.q, &s.a.q, loose) &&
                                 same_tensor(&f.a.k, &s.a.k, loose) &&
                                 same_tensor(&f.a.v, &s.a.v, loose)
                               : strcmp(f.err, s.err) == 0);
    if (!ok)
        printf("  body outcomes differ: %.*s\n    fast: %s\n    jansson: %s\n",
               (int)len, body, f.ok ? "ok" : f.err,
               s.ok ? "ok" : s.err);
    outcome_free(&f);
    outcome_free(&s);
    return ok;
}

TEST(bodies_agree_fixed)
{
    static const char *const bodies[] = {
        "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]]}",
        "{\"q\":[[1,0]],\"k\":[[1,0],[0,1]],\"v\":[[1],[2]],\"dtype\":\"float32\"}",
        "{\"q\":[[1e39,0]],\"k\":[[1,0]],\"v\":[[1]],\"dtype\":\"float32\"}",
        "{\"q\":[1,0],\"k\":[[1,0]],\"v\":[[1]]}",
        "{\"q\":[[[[1]]]],\"k\":[[1,0]],\"v\":[[1]]}",
        "{\"q\":[[1,0]],\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]]}",
        "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],}",
        "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]]} x",
        "{\"q\":[[1,0]] \"k\":[[1,0]],\"v\":[[1]]}",
        "{\"x\":\"\\\"q\\\":[[1]]\",\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]]}",
        "{\"\\u0071\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]]}",
        "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"big\":100000000000000000000000}",
        "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1e999]]}",
        "{\"q\":[[1,0]],\"k\":[[1,0]],\"v\":[[1]],\"bias\":{\"q\":[0,1]}}",
        " { \"q\" : [ [ 1 , 0 ] ] , \"k\" : [[1,0]] , \"v\" : [[1]] } ",
        "{\"q\":[[1,0]],\"k\":{\"shape\":[1,2],\"dtype\":\"float64\",\"data\":\"\"},\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA+H8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8H8=\"},"
        "\"k\":[[1]],\"v\":[[1]],\"dtype\":\"float32\"}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\",\"x\":1},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\",\"data\":\"\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1,1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float64\",\"data\":\"AAAAAAAA\\u0038D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1],\"dtype\":\"float\\u0036\\u0034\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,01],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}",
        "{\"q\":{\"shape\":[1,1.0],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8=\"},"
        "\"k\":[[1]],\"v\":[[1]]}"};
    size_t i;

    for (i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        CHECK(bodies_agree(bodies[i], strlen(bodies[i])));
}

/* A base64 tensor object: random shape, dtype, member order and values
 * (sometimes non-finite, sometimes a wrong byte count). */
static void gen_b64(char *out, size_t cap)
{
    int rank = (int)(1 + rng() % 3), i, f32 = (int)(rng() & 1);
    size_t shape[3], count = 1, bytes, n = 0;
    unsigned char raw[512];
    char shape_txt[64], dt[32], *data;
    struct api_buf b;
    const char *order[3][3] = {{"s", "t", "d"}, {"d", "s", "t"}, {"t", "d", "s"}};
    int o = (int)(rng() % 3);

    for (i = 0; i < rank; i++) {
        shape[i] = 1 + rng() % 4;
        count *= shape[i];
    }
    bytes = count * (f32 ? 4 : 8);
    for (i = 0; i < (int)bytes; i++)
        raw[i] = (unsigned char)rng();
    if (rng() % 4) {                         /* mostly finite numbers */
        size_t k;
        for (k = 0; k < count; k++) {
            double x = (double)(rng() % 2001) / 100.0 - 10;
            if (f32) {
                float fx = (float)x;
                memcpy(raw + 4 * k, &fx, 4);
            } else {
                memcpy(raw + 8 * k, &x, 8);
            }
        }
    }
    if (rng() % 8 == 0 && bytes > 1)
        bytes--;                             /* wrong length */
    api_buf_init(&b, 4096);
    api_base64_encode(&b, raw, bytes);
    data = api_buf_take(&b, &n);
    n = 0;
    n += (size_t)snprintf(shape_txt, sizeof shape_txt, "[%zu", shape[0]);
    for (i = 1; i < rank; i++)
        n += (size_t)snprintf(shape_txt + n, sizeof shape_txt - n, ", %zu", shape[i]);
    snprintf(shape_txt + n, sizeof shape_txt - n, "]");
    snprintf(dt, sizeof dt, "\"%s\"", f32 ? "float32" : "float64");
    n = 0;
    out[0] = '\0';
    put(out, cap, &n, "{");
    for (i = 0; i < 3; i++) {
        const char *m = order[o][i];
        if (i)
            put(out, cap, &n, ",");
        put(out, cap, &n, gen_ws());
        if (*m == 's') {
            put(out, cap, &n, "\"shape\":");
            put(out, cap, &n, shape_txt);
        } else if (*m == 't') {
            put(out, cap, &n, "\"dtype\" : ");
            put(out, cap, &n, dt);
        } else {
            put(out, cap, &n, "\"data\":\"");
            put(out, cap, &n, data ? data : "");
            put(out, cap, &n, "\"");
        }
    }
    put(out, cap, &n, gen_ws());
    put(out, cap, &n, "}");
    free(data);
}

TEST(bodies_agree_base64)
{
    char buf[8192], arr[3][2048];
    int i, m, t, bad = 0;

    for (i = 0; i < 300 && bad < 5; i++) {
        size_t n = 0;
        for (t = 0; t < 3; t++) {
            if (rng() % 3)
                gen_b64(arr[t], sizeof arr[t]);
            else
                gen_array(arr[t], sizeof arr[t]);
        }
        buf[0] = '\0';
        put(buf, sizeof buf, &n, "{\"q\":");
        put(buf, sizeof buf, &n, arr[0]);
        put(buf, sizeof buf, &n, ",\"k\":");
        put(buf, sizeof buf, &n, arr[1]);
        put(buf, sizeof buf, &n, ",\"v\":");
        put(buf, sizeof buf, &n, arr[2]);
        put(buf, sizeof buf, &n, rng() & 1 ? ",\"dtype\":\"float32\"}" : "}");
        if (!bodies_agree(buf, n))
            bad++;
        for (m = 0; m < 3; m++) {
            n = mutate(buf, n, sizeof buf);
            if (!bodies_agree(buf, n))
                bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(bodies_agree_mutated)
{
    char buf[8192], arr[3][2048];
    int i, m, bad = 0;

    for (i = 0; i < 300 && bad < 5; i++) {
        size_t n = 0;
        int t;
        for (t = 0; t < 3; t++)
            gen_array(arr[t], sizeof arr[t]);
        buf[0] = '\0';
        put(buf, sizeof buf, &n, "{\"q\":");
        put(buf, sizeof buf, &n, arr[0]);
        put(buf, sizeof buf, &n, ",\"k\":");
        put(buf, sizeof buf, &n, arr[1]);
        put(buf, sizeof buf, &n, ",\"v\":");
        put(buf, sizeof buf, &n, arr[2]);
        put(buf, sizeof buf, &n, rng() & 1 ? ",\"dtype\":\"float32\"}" : "}");
        if (!bodies_agree(buf, n))
            bad++;
        for (m = 0; m < 3; m++) {
            n = mutate(buf, n, sizeof buf);
            if (!bodies_agree(buf, n))
                bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* The placeholder trees of wholly fast-read bodies are shared per keys
 * list (struct api_fast_keys): a second list, with other names at the same
 * positions, must get its own names, every time. */
TEST(whole_body_trees_per_keys_list)
{
    static const char *const qkv[] = {"q", "k", "v", NULL}, *const xy[] = {"x", "y", NULL};
    static struct api_fast_keys lists[] = {{.names = qkv}, {.names = xy}};
    static const char *const texts[] = {"{\"q\":[[1,0]],\"k\":[[1,0]]}",
                                        "{\"x\":[1,2],\"y\":[3]}"};
    int round, i;

    for (round = 0; round < 2; round++)
        for (i = 0; i < 2; i++) {
            struct api_request req;
            struct api_response resp;
            struct api_call c;
            struct api_pre pre;
            json_t *root;

            call_init(&c, &req, &resp, texts[i], strlen(texts[i]));
            memset(&pre, 0, sizeof pre);
            root = api_parse_body_pre(&c, &lists[i], &pre);
            CHECK(root != NULL);
            CHECK_EQ_INT(json_object_size(root), 2);
            CHECK(json_object_get(root, lists[i].names[0]) != NULL);
            CHECK(json_object_get(root, lists[i].names[1]) != NULL);
            json_decref(root);
            api_pre_free(&pre);
            api_response_free(&resp);
        }
}

/* api_b64tensor_parse's data string whose length the shape and dtype
 * before it give (its quote checked there, not searched for): an exact
 * string is read; one a quad short or long, or with a quote inside, is
 * refused (the jansson path then answers); data first still reads. */
TEST(b64_tensor_sized_data)
{
    /* 2 x 2 float32 = 16 bytes = 24 base64 characters (two '=') */
    static const char good[] = "AACAPwAAAEAAAEBAAACAQA==";
    static const struct {
        const char *text;
        size_t count;                   /* 0: refused */
    } cases[] = {
        {"{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":\"AACAPwAAAEAAAEBAAACAQA==\"}", 4},
        {"{\"dtype\":\"float32\",\"shape\":[2,2],\"data\":\"AACAPwAAAEAAAEBAAACAQA==\"} ", 4},
        {"{\"data\":\"AACAPwAAAEAAAEBAAACAQA==\",\"shape\":[2,2],\"dtype\":\"float32\"}", 4},
        {"{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":\"AACAPwAAAEAAAEBA\"}", 0},
        {"{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":\"AACAPwAAAEAAAEBAAACAQA==AAAA\"}", 0},
        {"{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":\"AACAPwAA\",\"x\":\"AAAAAA\"}", 0},
        {"{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":\"AACAPwAAAEAAAEBAAACAQA==", 0},
        {"{\"shape\":[2,2],\"dtype\":\"float16\",\"data\":\"ADwAQABCAEQ=\"}", 4},
        {"{\"shape\":[1,2],\"dtype\":\"float64\",\"data\":\"AAAAAAAA8D8AAAAAAAAAQA==\"}", 2},
    };
    CHECK(strlen(good) == 24);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_numarray a;
        size_t len = strlen(cases[i].text);
        size_t used = api_b64tensor_parse(cases[i].text, len, 1000, &a);
        if (cases[i].count == 0) {
            CHECK(used == 0);
            continue;
        }
        CHECK(used > 0 && used <= len && cases[i].text[used - 1] == '}');
        CHECK(a.count == cases[i].count && a.raw != NULL);
        if (used)
            api_numarray_free(&a);
    }
}

int main(void)
{
    t_ctx_init(&ctx);
    RUN(fixed_texts_agree);
    RUN(saturated_exponent_after_leading_zeros);
    RUN(generated_and_mutated_agree);
    RUN(count_limits);
    RUN(bodies_agree_fixed);
    RUN(bodies_agree_mutated);
    RUN(bodies_agree_base64);
    RUN(whole_body_trees_per_keys_list);
    RUN(b64_tensor_sized_data);
    TEST_MAIN_END();
}
