/*
 * tests/api/test_api_sessions_move.c — GET /v1/sessions/{id}/export and
 * POST /v1/sessions/import in-process: a round trip of every dtype and
 * kv_dtype with every setting is bit for bit (the re-export holds the same
 * bytes after the id and clock, GET .../kv and attention answer the same
 * text); every refusal (truncated, corrupt, foreign, another version,
 * trailing bytes, the wrong media type, over max_tokens, --max-elements or
 * the whole cache, a full store) answers its status and code and leaves
 * the store's sessions, bytes and created count as they were; an old
 * (version 1) state file and a version 3 export still import; route
 * labels, 404, 405, 401.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/journal.h"
#include "core/store.h"
#include "tests/harness.h"
#include "tests/api/api_testlib.h"

static struct api_ctx ctx;
static const char *const octet[] = {"Content-Type", "application/octet-stream", NULL};

/* One request with a body of n bytes (binary allowed); the status. */
static int call(const char *method, const char *path, const char *const *headers,
                const void *body, size_t n, struct api_response *r)
{
    t_call_n(&ctx, method, path, headers, body, n, r);
    return r->status;
}

static int json_call(const char *method, const char *path, const char *body,
                     struct api_response *r)
{
    return call(method, path, NULL, body, body ? strlen(body) : 0, r);
}

/* The "id" of a JSON reply into out[128]. */
static void reply_id(const struct api_response *r, char *out)
{
    json_t *j = t_json(r);
    const char *id = json_string_value(json_object_get(j, "id"));
    snprintf(out, 128, "%s", id ? id : "");
    json_decref(j);
}

static char path_buf[256];
static const char *P(const char *id, const char *suffix)
{
    snprintf(path_buf, sizeof path_buf, "/v1/sessions/%s%s", id, suffix);
    return path_buf;
}

/* A [rows][w] JSON matrix of numbers from the shared RNG, into b. */
static void matrix(char *b, size_t size, size_t rows, size_t w, uint64_t *rng)
{
    size_t n = (size_t)snprintf(b, size, "[");
    for (size_t i = 0; i < rows; i++) {
        n += (size_t)snprintf(b + n, size - n, "%s[", i ? "," : "");
        for (size_t j = 0; j < w; j++) {
            double x = (double)(t_rng_next(rng) >> 11) / 9007199254740992.0 * 4 - 2;
            n += (size_t)snprintf(b + n, size - n, "%s%.9g", j ? "," : "", x);
        }
        n += (size_t)snprintf(b + n, size - n, "]");
    }
    snprintf(b + n, size - n, "]");
}

/* Create a session from body and append `rows` random rows (one head);
 * its id into sid[128]. */
static void make_session(const char *body, size_t d_k, size_t d_v, size_t rows,
                         uint64_t seed, char *sid)
{
    static char k[16384], v[16384], kv[40000];
    struct api_response r;
    uint64_t rng = seed;
    CHECK_EQ_INT(json_call("POST", "/v1/sessions", body, &r), 201);
    reply_id(&r, sid);
    api_response_free(&r);
    if (rows == 0)
        return;
    matrix(k, sizeof k, rows, d_k, &rng);
    matrix(v, sizeof v, rows, d_v, &rng);
    snprintf(kv, sizeof kv, "{\"k\":%s,\"v\":%s}", k, v);
    CHECK_EQ_INT(json_call("POST", P(sid, "/kv"), kv, &r), 200);
    api_response_free(&r);
}

/* GET .../export into a malloc'd copy. */
static void *export_bytes(const char *sid, size_t *n)
{
    struct api_response r;
    void *out = NULL;
    CHECK_EQ_INT(call("GET", P(sid, "/export"), NULL, NULL, 0, &r), 200);
    CHECK_STR(r.content_type, "application/octet-stream");
    CHECK_STR(r.route, "/v1/sessions/{id}/export");
    *n = r.body_len;
    if (r.status == 200) {
        out = malloc(r.body_len);
        memcpy(out, r.body, r.body_len);
    }
    api_response_free(&r);
    return out;
}

/* Offset of the bytes after the id and the clock (idle_s): magic 8,
 * version 4, bom 4, id_len 4, id, packed 4, six u64, ttl, idle. */
static size_t after_clock(const unsigned char *p)
{
    uint32_t id_len;
    memcpy(&id_len, p + 16, 4);
    return 20 + id_len + 4 + 6 * 8 + 8 + 8;
}

/* Offset of the rolling-window fields of an export without ALiBi slopes
 * or per-head sinks: after the clock, scale softmax sink rope base pairs
 * alibi has_slopes, softcap has_sinks, rope_dims scaling type and 7 f64.
 * The window's 40 bytes are followed by version 5's u32 yarn_truncate,
 * then the three u64 bias head counts. */
static size_t window_at(const unsigned char *p)
{
    return after_clock(p) + 8 + 4 + 8 + 4 + 8 + 4 + 4 + 4 + 8 + 4 + 8 + 4 + 7 * 8;
}

/* The text of one answer (GET kv, attention) of a session. */
static char *answer(const char *method, const char *sid, const char *suffix,
                    const char *body)
{
    struct api_response r;
    json_call(method, P(sid, suffix), body, &r);
    char *text = r.status == 200 ? strndup(r.body, r.body_len) : strdup("(failed)");
    char *meta = strstr(text, ",\"meta\"");      /* elapsed_us differs */
    if (meta)
        *meta = '\0';
    api_response_free(&r);
    return text;
}

static struct sess_stats stats(void)
{
    struct sess_stats s;
    sess_store_stats(ctx.store, &s);
    return s;
}

/* Import p[n]; the new id into out[128]; returns the status. */
static int import(const void *p, size_t n, char *out, struct api_response *keep)
{
    struct api_response r;
    int status = call("POST", "/v1/sessions/import", octet, p, n, &r);
    out[0] = '\0';
    if (status == 201)
        reply_id(&r, out);
    if (keep)
        *keep = r;
    else
        api_response_free(&r);
    return status;
}

static const struct {
    const char *create;
    size_t d_k, d_v, rows;
} cases[] = {
    {"{\"d_k\":4,\"d_v\":3,\"dtype\":\"float64\"}", 4, 3, 5},
    {"{\"d_k\":4,\"d_v\":3,\"dtype\":\"float32\",\"max_tokens\":40,\"ttl_s\":90}", 4, 3, 7},
    {"{\"d_k\":4,\"d_v\":4,\"dtype\":\"float32\",\"kv_dtype\":\"float16\","
     "\"rope\":{\"base\":500,\"pairs\":\"half\"}}", 4, 4, 6},
    {"{\"d_k\":8,\"d_v\":2,\"dtype\":\"float32\",\"kv_dtype\":\"bfloat16\","
     "\"rope\":{\"dims\":4,\"scaling\":{\"type\":\"yarn\",\"factor\":4,"
     "\"original_max_position\":64,\"beta_fast\":16}}}", 8, 2, 9},
    {"{\"d_k\":4,\"d_v\":3,\"dtype\":\"float32\",\"kv_dtype\":\"int8\",\"softcap\":5,"
     "\"softmax\":\"sink\",\"sink_logit\":0.25}", 4, 3, 11},
    {"{\"d_k\":4,\"d_v\":3,\"dtype\":\"float32\",\"kv_dtype\":\"int8\",\"alibi\":true,"
     "\"bias\":{\"q\":[1,0,0,2],\"k\":[0,1,0,0],\"v\":[0.5,0,1]}}", 4, 3, 3},
    {"{\"d_k\":2,\"d_v\":2,\"dtype\":\"float16\",\"scale\":0.75}", 2, 2, 4},
    {"{\"d_k\":2,\"d_v\":2,\"dtype\":\"bfloat16\",\"rope\":{\"scaling\":{\"type\":\"linear\","
     "\"factor\":2}}}", 2, 2, 4},
    {"{\"d_k\":4,\"d_v\":3,\"dtype\":\"float64\",\"softmax\":\"softmax1\","
     "\"rope\":{\"scaling\":{\"type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
     "\"high_freq_factor\":4,\"original_max_position\":16}}}", 4, 3, 8},
    {"{\"d_k\":2,\"d_v\":2,\"dtype\":\"float32\"}", 2, 2, 0},
    /* gpt-oss's yarn: truncate false */
    {"{\"d_k\":8,\"d_v\":3,\"dtype\":\"float64\",\"softmax\":\"sink\",\"sink_logit\":0.3,"
     "\"rope\":{\"base\":150000,\"pairs\":\"half\",\"scaling\":{\"type\":\"yarn\","
     "\"factor\":32,\"original_max_position\":4096,\"beta_fast\":32,\"beta_slow\":1,"
     "\"truncate\":false}}}", 8, 3, 70},
};

TEST(round_trip_every_dtype_bit_for_bit)
{
    char sid[128], nid[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        make_session(cases[i].create, cases[i].d_k, cases[i].d_v, cases[i].rows, 7 + i, sid);
        size_t n, n2;
        unsigned char *a = export_bytes(sid, &n);
        struct api_response r;
        CHECK_EQ_INT(import(a, n, nid, &r), 201);
        CHECK_STR(r.route, "/v1/sessions/import");
        CHECK(strncmp(nid, "t9.", 3) == 0);         /* this replica's prefix */
        CHECK(strcmp(nid, sid) != 0);
        CHECK_STR(t_hdr(&r, "Location"), P(nid, ""));
        json_t *j = t_json(&r);
        CHECK_EQ_INT((int)json_integer_value(json_object_get(j, "length")),
                     (int)cases[i].rows);
        json_decref(j);
        api_response_free(&r);
        unsigned char *b = export_bytes(nid, &n2);
        CHECK(a && b && n == n2);
        if (a && b && n == n2) {
            size_t off = after_clock(a);
            CHECK(memcmp(a, b, 16) == 0);
            CHECK(memcmp(a + off, b + off, n - off - 4) == 0);
        }
        char *ka = answer("GET", sid, "/kv", NULL), *kb = answer("GET", nid, "/kv", NULL);
        CHECK_STR(ka, kb);
        char q[512];
        uint64_t rng = 99 + i;
        static char body[1024];
        matrix(q, sizeof q, 2, cases[i].d_k, &rng);
        snprintf(body, sizeof body, "{\"q\":%s,\"return\":[\"output\",\"weights\"]}", q);
        char *xa = answer("POST", sid, "/attention", body);
        char *xb = answer("POST", nid, "/attention", body);
        if (cases[i].rows)
            CHECK(strcmp(xa, "(failed)") != 0);
        CHECK_STR(xa, xb);
        if (th_cur_failed)
            printf("  case %zu: %s\n", i, cases[i].create);
        free(ka);
        free(kb);
        free(xa);
        free(xb);
        free(a);
        free(b);
    }
}

/* The import of p[n] answers status and code and changes nothing. */
static void refused(const void *p, size_t n, int status, const char *code, const char *msg)
{
    struct sess_stats before = stats(), after;
    struct api_response r;
    char nid[128];
    CHECK_EQ_INT(import(p, n, nid, &r), status);
    CHECK_STR(t_err_code(&r), code);
    if (msg && !(r.body && strstr(r.body, msg))) {
        CHECK(!"message");
        printf("  wanted \"%s\" in %.*s\n", msg, (int)r.body_len, r.body);
    }
    api_response_free(&r);
    after = stats();
    CHECK(after.sessions == before.sessions);
    CHECK(after.bytes == before.bytes);
    CHECK(after.created == before.created);
}

/* p[n] with its CRC-32C recomputed. */
static void fix_crc(unsigned char *p, size_t n)
{
    uint32_t c = jnl_crc32c(0, p, n - 4);
    memcpy(p + n - 4, &c, 4);
}

TEST(refusals_create_nothing)
{
    char sid[128];
    size_t n;
    make_session(cases[4].create, 4, 3, 11, 3, sid);
    unsigned char *a = export_bytes(sid, &n);
    unsigned char *b = malloc(n + 8);
    if (!a || !b)
        return;
    refused(a, 0, 422, "invalid_export", "truncated");
    refused(a, 3, 422, "invalid_export", "truncated");
    refused(a, 40, 422, "invalid_export", "truncated");
    refused(a, n - 1, 422, "invalid_export", "truncated");
    refused(a, n / 2, 422, "invalid_export", "truncated");
    memcpy(b, a, n);
    b[n - 20] ^= 1;                                     /* a row's bit */
    refused(b, n, 422, "invalid_export", "checksum mismatch");
    memcpy(b, a, n);
    b[n - 1] ^= 0x80;                                   /* the checksum's */
    refused(b, n, 422, "invalid_export", "checksum mismatch");
    memcpy(b, a, n);
    memcpy(b, "ATTNDJNL", 8);                           /* another file */
    refused(b, n, 422, "invalid_export", "wrong magic");
    memcpy(b, a, n);
    b[8] = 99;                                          /* a later version */
    fix_crc(b, n);
    refused(b, n, 422, "invalid_export", "unknown version");
    memcpy(b, a, n);
    uint32_t bom = 0x04030201;                          /* other byte order */
    memcpy(b + 12, &bom, 4);
    fix_crc(b, n);
    refused(b, n, 422, "invalid_export", "byte order");
    memcpy(b, a, n);
    memcpy(b + n, "\0\0\0\0", 4);                       /* trailing bytes */
    fix_crc(b, n + 4);
    refused(b, n + 4, 422, "invalid_export", "trailing bytes");
    /* rows let go (first_row > 0) by a session without a window */
    memcpy(b, a, n);
    size_t off = window_at(a);
    uint64_t first = 3;
    memcpy(b + off, &first, 8);
    fix_crc(b, n);
    refused(b, n, 422, "invalid_export", "bad window field");
    /* a window with a right side (a rolling session is causal) */
    memcpy(b, a, n);
    uint32_t on = 1;
    int64_t win[3] = {8, 2, 0};
    memcpy(b + off + 8, &on, 4);
    memcpy(b + off + 16, win, sizeof win);
    fix_crc(b, n);
    refused(b, n, 422, "invalid_export", "bad window field");
    /* yarn_truncate other than 0 or 1, and 0 (no rounding) without yarn */
    uint32_t truncs[2] = {2, 0};
    for (int i = 0; i < 2; i++) {
        memcpy(b, a, n);
        memcpy(b + off + 40, &truncs[i], 4);
        fix_crc(b, n);
        refused(b, n, 422, "invalid_export", "bad header field");
    }
    /* a non-finite int8 scale behind a right checksum */
    memcpy(b, a, n);
    uint32_t pad_from = (uint32_t)(off + 8 + 4 + 4 + 24 + 4 + 24);
    size_t scales = pad_from + (8 - pad_from % 8) % 8;
    float inf = INFINITY;
    memcpy(b + scales, &inf, 4);
    fix_crc(b, n);
    refused(b, n, 422, "invalid_export", "not finite");
    /* the media type */
    {
        struct api_response r;
        struct sess_stats before = stats();
        CHECK_EQ_INT(call("POST", "/v1/sessions/import", NULL, a, n, &r), 415);
        CHECK_STR(t_err_code(&r), "unsupported_media_type");
        api_response_free(&r);
        CHECK(stats().sessions == before.sessions);
    }
    /* limits: max_tokens (the export's is 4096), --max-elements */
    ctx.cfg.max_tokens = 100;
    refused(a, n, 422, "limit_exceeded", "max_tokens");
    ctx.cfg.max_tokens = 4096;
    ctx.cfg.max_elements = 6;
    refused(a, n, 422, "limit_exceeded", "element limit");
    ctx.cfg.max_elements = 1 << 20;
    free(a);
    free(b);
}

/* The bytes one import of p[n] is accounted (in a store without limits). */
static size_t accounted(const void *p, size_t n)
{
    struct sess_store *old = ctx.store;
    struct sess_config cfg = {.default_ttl_s = 600, .replica_id = "t9"};
    char nid[128];
    ctx.store = sess_store_new(&cfg);
    CHECK_EQ_INT(import(p, n, nid, NULL), 201);
    size_t bytes = stats().bytes;
    sess_store_free(ctx.store);
    ctx.store = old;
    return bytes;
}

/* Limits are checked before the rows are allocated: a session over the
 * whole cache is a limit (422), one over what is free now is capacity
 * (503) unless the lru policy can evict idle sessions for it. */
TEST(cache_limits_before_allocation)
{
    struct sess_store *old = ctx.store;
    char sid[128], big[128], nid[128];
    size_t n, nb;
    make_session("{\"d_k\":16,\"d_v\":16}", 16, 16, 40, 5, big);
    void *bigx = export_bytes(big, &nb);
    make_session("{\"d_k\":4,\"d_v\":4}", 4, 4, 20, 6, sid);
    void *a = export_bytes(sid, &n);
    size_t one = accounted(a, n);
    CHECK(one > 0 && accounted(bigx, nb) > 3 * one);
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096,
                              .max_sessions = 2, .max_cache_bytes = 3 * one,
                              .replica_id = "t9"};
    ctx.store = sess_store_new(&cfg);
    refused(bigx, nb, 422, "limit_exceeded", "whole cache");
    CHECK_EQ_INT(import(a, n, nid, NULL), 201);
    CHECK_EQ_INT(import(a, n, nid, NULL), 201);
    refused(a, n, 503, "capacity_exhausted", "retry later");     /* max_sessions */
    CHECK_EQ_INT((int)stats().sessions, 2);
    sess_store_free(ctx.store);
    cfg.max_sessions = 0;
    cfg.max_cache_bytes = one + one / 2;
    ctx.store = sess_store_new(&cfg);
    CHECK_EQ_INT(import(a, n, nid, NULL), 201);
    refused(a, n, 503, "capacity_exhausted", "cache bytes");    /* bytes held now */
    sess_store_free(ctx.store);
    cfg.policy = SESS_POLICY_LRU;
    ctx.store = sess_store_new(&cfg);
    CHECK_EQ_INT(import(a, n, nid, NULL), 201);
    CHECK_EQ_INT(import(a, n, sid, NULL), 201);
    CHECK_EQ_INT((int)stats().sessions, 1);
    CHECK_EQ_INT((int)stats().evictions, 1);
    sess_store_free(ctx.store);
    ctx.store = old;
    free(a);
    free(bigx);
}

/* A rolling session whose window cannot fit this replica's whole cache
 * is refused at import as its create would be (422, naming the window),
 * even while it holds few rows: left 5 and 1 sink hold up to 132 rows
 * between appends and 133 during one, 16 bytes a row of d 1 in float64. */
TEST(rolling_window_over_the_cache_is_refused_at_import)
{
    struct sess_store *old = ctx.store;
    char sid[128], nid[128];
    size_t n;
    make_session("{\"d_k\":1,\"d_v\":1,\"window\":{\"left\":5,\"sinks\":1}}", 1, 1, 3, 8,
                 sid);
    void *a = export_bytes(sid, &n);
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096,
                              .max_cache_bytes = 133 * 16 - 1, .replica_id = "t9"};
    ctx.store = sess_store_new(&cfg);
    refused(a, n, 422, "limit_exceeded", "window left 5 and 1 sinks");
    CHECK_EQ_INT((int)stats().sessions, 0);
    sess_store_free(ctx.store);
    cfg.max_cache_bytes = 133 * 16;             /* exactly the bound: taken */
    ctx.store = sess_store_new(&cfg);
    CHECK_EQ_INT(import(a, n, nid, NULL), 201);
    sess_store_free(ctx.store);
    ctx.store = old;
    free(a);
}

/* The version 3 form of a version 5 export of an int8 session without
 * biases, slopes or per-head sinks (no window fields, no yarn_truncate, no
 * padding, the scales after the rows, CRC-32 IEEE) into out; its size. */
static size_t as_version3(const unsigned char *a, size_t n, size_t h_kv, size_t len,
                          unsigned char *out)
{
    size_t w = window_at(a), m = 0, sb = 2 * h_kv * len * sizeof(float);
    size_t rows_at = (w + 40 + 4 + 24 + 7) / 8 * 8;     /* window, truncate, bias heads, pad */
    memcpy(out, a, w);
    out[8] = 3;
    m = w;
    memcpy(out + m, a + w + 40 + 4, 24);                /* bias heads: 0 0 0 */
    m += 24;
    memcpy(out + m, a + rows_at + sb, n - 4 - rows_at - sb);   /* K, V */
    m += n - 4 - rows_at - sb;
    memcpy(out + m, a + rows_at, sb);                   /* K scales, V scales */
    m += sb;
    uint32_t c = test_crc32_bitwise(0xEDB88320u, out, m);
    memcpy(out + m, &c, 4);
    return m + 4;
}

/* b[n], an older form of session sid's export, imports (201) as a session
 * answering query q as sid does. */
static void imports_the_same(const char *sid, const unsigned char *b, size_t n, const char *q)
{
    char nid[128];
    struct api_response r;
    CHECK_EQ_INT(import(b, n, nid, &r), 201);
    if (r.status != 201)
        printf("  %.*s\n", (int)r.body_len, r.body);
    api_response_free(&r);
    char *xa = answer("POST", sid, "/attention", q), *xb = answer("POST", nid, "/attention", q);
    CHECK(strcmp(xa, "(failed)") != 0);
    CHECK_STR(xa, xb);
    free(xa);
    free(xb);
}

/* A version 3 export (int8: its scales after the rows) imports with the
 * same attention bits as the version 4 one. */
TEST(version_3_imports_the_same)
{
    char sid[128];
    size_t n;
    make_session("{\"d_k\":4,\"d_v\":3,\"heads\":2,\"kv_heads\":2,\"dtype\":\"float32\","
                 "\"kv_dtype\":\"int8\",\"rope\":{\"base\":100}}", 4, 3, 0, 1, sid);
    struct api_response r;
    /* two heads of 6 rows */
    CHECK_EQ_INT(json_call("POST", P(sid, "/kv"),
                           "{\"k\":[[[1,2,3,4],[0,1,0,1],[2,0,1,1],[1,1,1,1],[3,2,1,0],[0,0,1,2]],"
                           "[[4,3,2,1],[1,0,1,0],[1,1,0,2],[2,2,2,2],[0,1,2,3],[2,1,0,0]]],"
                           "\"v\":[[[1,0,0],[0,1,0],[0,0,1],[1,1,0],[0,1,1],[1,0,1]],"
                           "[[2,0,0],[0,2,0],[0,0,2],[2,2,0],[0,2,2],[2,0,2]]]}", &r), 200);
    api_response_free(&r);
    unsigned char *a = export_bytes(sid, &n), *b = malloc(n);
    if (!a || !b)
        return;
    size_t n3 = as_version3(a, n, 2, 6, b);
    CHECK(n3 < n);
    imports_the_same(sid, b, n3,
                     "{\"q\":[[[1,0,2,1]],[[0,1,1,3]]],\"return\":[\"output\",\"weights\"]}");
    free(a);
    free(b);
}

/* out[m] (an older form's bytes up to the bias heads) padded to 8, with
 * a's rows from rows_at and the CRC-32C: its size. */
static size_t finish_older(unsigned char *out, size_t m, const unsigned char *a, size_t n,
                           size_t rows_at)
{
    while (m % 8)
        out[m++] = 0;
    memcpy(out + m, a + rows_at, n - 4 - rows_at);      /* K, V */
    m += n - 4 - rows_at;
    uint32_t c = test_crc32_bitwise(0x82F63B78u, out, m);
    memcpy(out + m, &c, 4);
    return m + 4;
}

/* The version 4 form of a version 5 export of a session without biases,
 * slopes, per-head sinks or int8 rows (no yarn_truncate; the padding
 * before the rows redone) into out; its size. */
static size_t as_version4(const unsigned char *a, size_t n, unsigned char *out)
{
    size_t w = window_at(a), m = w + 40;
    size_t rows_at = (w + 40 + 4 + 24 + 7) / 8 * 8;
    memcpy(out, a, m);                                  /* up to the window's end */
    out[8] = 4;
    memcpy(out + m, a + w + 40 + 4, 24);                /* bias heads: 0 0 0 */
    return finish_older(out, m + 24, a, n, rows_at);
}

/* The version 6 form of a version 5 export of a session without biases,
 * as a state file holds a session made with an idempotency key: has_key
 * 1, scope "", key, 16 digest bytes after yarn_truncate, the padding
 * before the rows redone, into out; its size. */
static size_t as_version6(const unsigned char *a, size_t n, const char *key,
                          unsigned char *out)
{
    size_t w = window_at(a), m = w + 44;
    size_t rows_at = (w + 44 + 24 + 7) / 8 * 8;
    uint32_t one = 1, zero = 0, key_len = (uint32_t)strlen(key);
    memcpy(out, a, m);                                  /* up to yarn_truncate */
    out[8] = 6;
    memcpy(out + m, &one, 4);
    memcpy(out + m + 4, &zero, 4);                      /* scope "" */
    memcpy(out + m + 8, &key_len, 4);
    memcpy(out + m + 12, key, key_len);
    m += 12 + key_len;
    memset(out + m, 0xab, 16);                          /* the digest */
    m += 16;
    memcpy(out + m, a + w + 44, 24);                    /* bias heads: 0 0 0 */
    return finish_older(out, m + 24, a, n, rows_at);
}

/* An export is version 5, whatever key its session was made with, so an
 * attnd before keys imports it; version 6 bytes (a state file's form of a
 * keyed session) import the same, and the import takes no key from them:
 * a create with that key afterwards makes a new session. */
TEST(an_export_is_version_5_and_an_import_takes_no_key)
{
    char tid[128], nid[128];
    size_t n;
    make_session("{\"d_k\":4,\"d_v\":3,\"rope\":{\"base\":10000}}", 4, 3, 20, 9, tid);
    unsigned char *a = export_bytes(tid, &n), *b = malloc(n + 300);
    if (!a || !b)
        return;
    uint32_t version = 0;
    memcpy(&version, a + 8, 4);
    CHECK_EQ_INT(version, 5);
    size_t n6 = as_version6(a, n, "retry-1", b);
    CHECK(n6 > n);
    imports_the_same(tid, b, n6,
                     "{\"q\":[[1,0,2,1]],\"return\":[\"output\",\"weights\"]}");
    struct sess_idem idem = {.scope = "", .key = "retry-1"};
    bool same = false;
    CHECK(!sess_idem_find(ctx.store, &idem, nid, &same));
    free(a);
    free(b);
}

/* A version 4 export (written before yarn's truncate was kept, so by a
 * session that rounded: its K rows are rotated so) reads as HF's default,
 * truncate true: a yarn session's export turned into version 4 imports
 * answering with the bits of the session (whose queries are rotated with
 * the same frequencies as its stored K only if truncate is read as true),
 * and echoes truncate true. */
TEST(version_4_reads_yarn_truncate_true)
{
    char tid[128], nid[128];
    size_t n;
    make_session("{\"d_k\":8,\"d_v\":3,\"rope\":{\"base\":150000,\"pairs\":\"half\","
                 "\"scaling\":{\"type\":\"yarn\",\"factor\":32,"
                 "\"original_max_position\":4096}}}", 8, 3, 40, 5, tid);
    unsigned char *a = export_bytes(tid, &n), *b = malloc(n);
    if (!a || !b)
        return;
    uint32_t version, trunc;
    memcpy(&version, a + 8, 4);
    memcpy(&trunc, a + window_at(a) + 40, 4);
    CHECK_EQ_INT(version, 5);
    CHECK_EQ_INT(trunc, 1);
    size_t n4 = as_version4(a, n, b);
    CHECK_EQ_INT(n4, n - 8);                            /* 4 bytes and 4 of padding */
    struct api_response r;
    CHECK_EQ_INT(import(b, n4, nid, &r), 201);
    if (r.status != 201)
        printf("  %.*s\n", (int)r.body_len, r.body);
    api_response_free(&r);
    const char *q = "{\"q\":[[1,0,2,1,-1,0.5,0,1]],\"return\":[\"output\",\"weights\"]}";
    char *xt = answer("POST", tid, "/attention", q), *xn = answer("POST", nid, "/attention", q);
    CHECK(strcmp(xn, "(failed)") != 0);
    CHECK_STR(xn, xt);
    json_call("GET", P(nid, ""), NULL, &r);
    json_t *j = t_json(&r);
    api_response_free(&r);
    CHECK(json_is_true(json_object_get(json_object_get(json_object_get(j, "rope"), "scaling"),
                                       "truncate")));
    json_decref(j);
    free(xt);
    free(xn);
    free(a);
    free(b);
}

/* A version 1 state file attnd wrote (the persist fuzz corpus keeps it
 * without its checksum after flag byte 1) still imports. */
TEST(old_state_file_imports)
{
    FILE *f = fopen("tests/fuzz/corpus/persist/state-0-1", "rb");
    unsigned char buf[4096];
    char nid[128];
    CHECK(f != NULL);
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf - 4, f);
    fclose(f);
    uint32_t c = test_crc32_bitwise(0xEDB88320u, buf + 1, n - 1);
    memcpy(buf + n, &c, 4);
    struct api_response r;
    ctx.cfg.max_tokens = 32768;                 /* the file's */
    CHECK_EQ_INT(import(buf + 1, n + 3, nid, &r), 201);
    if (r.status != 201)
        printf("  %.*s\n", (int)r.body_len, r.body);
    api_response_free(&r);
    buf[n] ^= 1;
    refused(buf + 1, n + 3, 422, "invalid_export", "checksum mismatch");
    ctx.cfg.max_tokens = 4096;
}

/* To a transport that takes a body piece by piece, the export is a body
 * of pieces (no buffer) holding the whole export's bytes; one dropped
 * unread lets its snapshot go (ASan: no leak). */
TEST(export_in_pieces_to_a_transport_that_takes_them)
{
    char sid[128];
    make_session("{\"d_k\":4,\"d_v\":3,\"heads\":2,\"kv_heads\":1,\"dtype\":\"float32\","
                 "\"kv_dtype\":\"int8\"}", 4, 3, 70, 99, sid);
    size_t n;
    unsigned char *a = export_bytes(sid, &n);
    struct api_request q = {.method = "GET", .path = P(sid, "/export"), .pieces_ok = true};
    struct api_response r, r2;
    api_handle(&ctx, &q, &r);
    api_handle(&ctx, &q, &r2);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.content_type, "application/octet-stream");
    CHECK(r.body == NULL && r.pieces != NULL && r.body_len == n);
    unsigned char *b = calloc(1, n + 7);
    size_t at = 0, got;
    while (r.pieces && a && (got = api_pieces_read(r.pieces, b + at, 7)) > 0)
        at += got;
    size_t off = a ? after_clock(a) : 0;
    CHECK(a && at == n && memcmp(a, b, 16) == 0 && memcmp(a + off, b + off, n - off - 4) == 0);
    api_response_free(&r);
    api_response_free(&r2);                     /* never read */
    CHECK(r2.pieces == NULL);
    struct api_response d;
    CHECK_EQ_INT(call("DELETE", P(sid, ""), NULL, NULL, 0, &d), 204);
    api_response_free(&d);
    free(a);
    free(b);
}

/* HEAD of an export answers GET's status, type and length with no body,
 * and takes no snapshot (no pieces), for either transport; an unknown
 * session is GET's 404, and without the key GET's 401. */
TEST(head_of_an_export_builds_nothing)
{
    char sid[128];
    make_session("{\"d_k\":4,\"d_v\":3,\"heads\":2,\"kv_heads\":1,\"dtype\":\"float32\"}",
                 4, 3, 70, 5, sid);
    size_t n;
    unsigned char *a = export_bytes(sid, &n);
    free(a);
    for (int pieces_ok = 0; pieces_ok <= 1; pieces_ok++) {
        struct api_request q = {.method = "HEAD", .path = P(sid, "/export"),
                                .pieces_ok = pieces_ok};
        struct api_response r;
        api_handle(&ctx, &q, &r);
        CHECK_EQ_INT(r.status, 200);
        CHECK_STR(r.content_type, "application/octet-stream");
        CHECK(r.head && r.body == NULL && r.pieces == NULL && r.body_len == n);
        CHECK_STR(r.route, "/v1/sessions/{id}/export");
        api_response_free(&r);
    }
    struct api_response r;
    CHECK_EQ_INT(call("HEAD", P("t9.nosuchsession", "/export"), NULL, NULL, 0, &r), 404);
    CHECK_STR(t_err_code(&r), "session_not_found");
    CHECK(!r.head);
    api_response_free(&r);
    ctx.cfg.api_key = "sekret";
    CHECK_EQ_INT(call("HEAD", P(sid, "/export"), NULL, NULL, 0, &r), 401);
    api_response_free(&r);
    ctx.cfg.api_key = NULL;
    CHECK_EQ_INT(call("DELETE", P(sid, ""), NULL, NULL, 0, &r), 204);
    api_response_free(&r);
}

TEST(routes_methods_and_auth)
{
    struct api_response r;
    char sid[128];
    make_session("{\"d_k\":2,\"d_v\":2}", 2, 2, 1, 1, sid);
    CHECK_EQ_INT(call("GET", P("t9.nosuchsession", "/export"), NULL, NULL, 0, &r), 404);
    CHECK_STR(t_err_code(&r), "session_not_found");
    CHECK_STR(r.route, "/v1/sessions/{id}/export");
    api_response_free(&r);
    CHECK_EQ_INT(call("POST", P(sid, "/export"), NULL, NULL, 0, &r), 405);
    CHECK_STR(t_hdr(&r, "Allow"), "GET, HEAD");
    api_response_free(&r);
    CHECK_EQ_INT(call("GET", "/v1/sessions/import", NULL, NULL, 0, &r), 405);
    CHECK_STR(t_hdr(&r, "Allow"), "POST");
    CHECK_STR(r.route, "/v1/sessions/import");
    api_response_free(&r);
    ctx.cfg.api_key = "sekret";
    CHECK_EQ_INT(call("GET", P(sid, "/export"), NULL, NULL, 0, &r), 401);
    CHECK_STR(r.route, "/v1/sessions/{id}/export");
    api_response_free(&r);
    CHECK_EQ_INT(call("POST", "/v1/sessions/import", octet, "x", 1, &r), 401);
    CHECK_STR(r.route, "/v1/sessions/import");
    api_response_free(&r);
    static const char *const keyed[] = {"Authorization", "Bearer sekret", NULL};
    CHECK_EQ_INT(call("GET", P(sid, "/export"), keyed, NULL, 0, &r), 200);
    api_response_free(&r);
    ctx.cfg.api_key = NULL;
    CHECK_EQ_INT(call("OPTIONS", "/v1/sessions/import", NULL, NULL, 0, &r), 204);
    CHECK_STR(r.route, "/v1/sessions/import");
    api_response_free(&r);
}

int main(void)
{
    struct sess_config cfg = {.default_ttl_s = 600, .default_max_tokens = 4096,
                              .replica_id = "t9"};
    t_ctx_init(&ctx);
    attn_blas_init(1);
    ctx.store = sess_store_new(&cfg);
    RUN(round_trip_every_dtype_bit_for_bit);
    RUN(refusals_create_nothing);
    RUN(cache_limits_before_allocation);
    RUN(rolling_window_over_the_cache_is_refused_at_import);
    RUN(old_state_file_imports);
    RUN(version_3_imports_the_same);
    RUN(version_4_reads_yarn_truncate_true);
    RUN(an_export_is_version_5_and_an_import_takes_no_key);
    RUN(export_in_pieces_to_a_transport_that_takes_them);
    RUN(head_of_an_export_builds_nothing);
    RUN(routes_methods_and_auth);
    sess_store_free(ctx.store);
    TEST_MAIN_END();
}
