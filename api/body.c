/*
 * api/body.c — reading a request body: the media type check, the JSON
 * parse with its wire errors (invalid_json, duplicate_key, json_too_deep,
 * unsupported_media_type), the fast numeric reader's entry point
 * (api_parse_body_pre, which takes plain numeric arrays out of the text
 * before jansson sees the rest), the check for unknown members, and the
 * JSON-pointer builders every reader uses to name the field at fault.
 */
#include "api/internal.h"
#include "api/early.h"
#include "api/codec/numread.h"
#include "api/read.h"
#include "core/attn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- body parsing ----------------------------------------------------- */

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/*
 * application/json, optionally followed by "; charset=utf-8" (the value
 * case-insensitive, optionally quoted): NULL. Anything else: what the 415
 * says is wrong with it.
 */
static const char *media_type_fault(const char *ct)
{
    static const char type[] = "application/json";
    static const char wrong_type[] = "Content-Type must be application/json";
    const char *p;

    if (!ct)
        return wrong_type;
    p = skip_ws(ct);
    if (strncasecmp(p, type, sizeof type - 1) != 0)
        return wrong_type;
    p = skip_ws(p + sizeof type - 1);
    while (*p == ';') {
        p = skip_ws(p + 1);
        if (*p == '\0')
            return NULL;
        if (strncasecmp(p, "charset=", 8) != 0)
            return "application/json takes no parameter but charset=utf-8";
        p += 8;
        if (strncasecmp(p, "\"utf-8\"", 7) == 0)
            p += 7;
        else if (strncasecmp(p, "utf-8", 5) == 0)
            p += 5;
        else
            return "the only charset accepted is utf-8 (JSON is UTF-8: RFC 8259)";
        p = skip_ws(p);
    }
    return *p == '\0' ? NULL : wrong_type;
}

/* End of the string whose opening quote is at s[i] (index after the closing
 * quote), or n. memchr does the scanning: base64 strings run to megabytes. */
static size_t string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n;) {
        const char *q = memchr(s + i, '"', n - i);
        size_t j, bs = 0;
        if (!q)
            return n;
        j = (size_t)(q - s);
        while (j - bs > i && s[j - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return j + 1;       /* not escaped */
        i = j + 1;
    }
    return n;
}

/* What reading a JSON text costs: its nesting and, for jansson's tree, the
 * values it holds. Counted in one pass before jansson sees the text, so a
 * hostile body (millions of {} in an unknown member: each 3 bytes of text,
 * 232 bytes of tree) costs one scan, not gigabytes. */
struct text_scan {
    bool too_deep;
    size_t objects, arrays, members, commas, strings, string_bytes;
};

/* Byte classes of the scan: 1 quote, 2 '{', 3 '[', 4 closing bracket,
 * 5 ':', 6 ','. */
static const unsigned char scan_class[256] = {
    ['"'] = 1, ['{'] = 2, ['['] = 3, [']'] = 4, ['}'] = 4, [':'] = 5, [','] = 6};

/* Counts the text's containers, members, commas and strings (strings
 * skipped whole); stops at nesting deeper than the limit (too_deep). */
static void scan_text(const char *s, size_t n, struct text_scan *t)
{
    size_t i = 0, depth = 0, end;

    memset(t, 0, sizeof *t);
    while (i < n) {
        switch (scan_class[(unsigned char)s[i]]) {
        case 0:
            break;
        case 1:
            end = string_end(s, n, i);
            t->strings++;
            t->string_bytes += end - i;
            i = end;
            continue;
        case 2:
        case 3:
            if (++depth > API_MAX_JSON_DEPTH) {
                t->too_deep = true;
                return;
            }
            if (s[i] == '{')
                t->objects++;
            else
                t->arrays++;
            break;
        case 4:
            if (depth > 0)
                depth--;
            break;
        case 5:
            t->members++;
            break;
        default:
            t->commas++;
            break;
        }
        i++;
    }
}

/* What jansson 2.14 allocates for a text's tree, in bytes with glibc's
 * malloc overhead and the slot a parent keeps for each value, measured and
 * rounded up (test_api_json_cost checks that they bound it): an object 232
 * (its struct and first hash buckets), an array 136, a member about 90
 * beside its value and key, a number 40 (just over 56 while an array of
 * them grows: its old and new slot tables are both held), a string 88 and
 * up to 3 times its text (the lexer's buffer grows by doubling, then the
 * value is copied). Every value but the first follows a comma. Not counted: the
 * lexer's buffer for one very long number or key, at most about 2.5 times
 * that token, inside the allowance's bytes per byte of text. */
#define COST_OBJECT 256
#define COST_ARRAY 160
#define COST_MEMBER 128
#define COST_VALUE 64
#define COST_STRING 96
#define COST_STRING_BYTE 3

static size_t scan_cost(const struct text_scan *t)
{
    return t->objects * COST_OBJECT + t->arrays * COST_ARRAY + t->members * COST_MEMBER +
           (t->commas + 1) * COST_VALUE + t->strings * COST_STRING +
           t->string_bytes * COST_STRING_BYTE;
}

size_t api_json_read_cost(const char *s, size_t n)
{
    struct text_scan t;

    scan_text(s, n, &t);
    return scan_cost(&t);
}

/* a + b, or SIZE_MAX past it. */
static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* a * b, or SIZE_MAX past it. */
static size_t mul_sat(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* What a text of n bytes holding `arrays` arrays may cost to read:
 * API_JSON_COST_PER_ELEMENT bytes per number --max-elements allows (a JSON
 * array of that many numbers costs 64 each), an array's cost for each of
 * up to that many arrays (a matrix of that many numbers in rows of one has
 * one per number), and API_JSON_COST_PER_BYTE per byte of text (base64
 * strings read by jansson); never less than API_JSON_COST_FLOOR, so that a
 * small body over a low --max-elements meets the readers' own limit, which
 * says more. */
static size_t read_cost_allowed(const struct api_call *c, size_t n, size_t arrays)
{
    size_t elems = api_max_elements(c);
    size_t a = add_sat(mul_sat(elems, API_JSON_COST_PER_ELEMENT),
                       mul_sat(arrays < elems ? arrays : elems, COST_ARRAY));
    a = add_sat(a, mul_sat(n, API_JSON_COST_PER_BYTE));
    return a < API_JSON_COST_FLOOR ? API_JSON_COST_FLOOR : a;
}

/* Whether the text's nesting and tree fit the limits; else the error. */
static bool text_fits(struct api_call *c, const char *s, size_t n)
{
    struct text_scan t;
    size_t cost, allowed;

    scan_text(s, n, &t);
    if (t.too_deep) {
        api_fail(c, API_ERR_JSON_TOO_DEEP, "", "JSON nesting deeper than %d",
                 API_MAX_JSON_DEPTH);
        return false;
    }
    cost = scan_cost(&t);
    allowed = read_cost_allowed(c, n, t.arrays);
    if (cost <= allowed)
        return true;
    api_fail(c, API_ERR_LIMIT_EXCEEDED, "", "the JSON would take about %zu MiB to read "
             "(%zu objects, %zu arrays, %zu values in all), more than the %zu MiB allowed "
             "(%d bytes per --max-elements number and %d per array up to as many, %d per "
             "byte of body, at least %zu MiB): send large tensors base64-encoded",
             cost >> 20, t.objects, t.arrays, t.commas + 1, allowed >> 20,
             API_JSON_COST_PER_ELEMENT, COST_ARRAY, API_JSON_COST_PER_BYTE,
             API_JSON_COST_FLOOR >> 20);
    return false;
}

/* A raw NUL byte is never JSON (outside strings only whitespace may sit
 * between tokens, inside them control bytes must be escaped), but jansson
 * stops reading a number at one and goes on: [[1,0\0]] read as [[1,0]].
 * Refuse it first (memchr: far faster than the parse). */
static bool has_raw_nul(struct api_call *c, const char *s, size_t n)
{
    const char *z = memchr(s, '\0', n);

    if (!z)
        return false;
    api_fail(c, API_ERR_INVALID_JSON, "", "raw NUL byte at offset %zu", (size_t)(z - s));
    return true;
}

/*
 * Where a parse error is: the JSON pointer of the member or element jansson
 * was reading at byte pos of s (its error position: just past a duplicate
 * key, or inside a number too large for a double). jansson says where, not
 * in which member, so the valid text before pos is walked again, keeping
 * the pointer of the value being read: the key after an object's key
 * string, the index after an array's '[' or ','. Error paths only.
 */
struct ptr_walk {
    char *out;
    size_t size;
    size_t base[API_MAX_JSON_DEPTH + 2];    /* out's length at each container */
    size_t index[API_MAX_JSON_DEPTH + 2];   /* arrays: the element's */
    bool object[API_MAX_JSON_DEPTH + 2];
    int depth;
};

static void walk_set_index(struct ptr_walk *w)
{
    size_t b = w->base[w->depth - 1];

    if (b < w->size)
        snprintf(w->out + b, w->size - b, "/%zu", w->index[w->depth - 1]);
}

/* A key string s[0..n) with its quotes: decoded by jansson (escapes). */
static void walk_set_key(struct ptr_walk *w, const char *s, size_t n)
{
    char tmp[API_PATH_MAX];
    json_t *k = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    size_t b = w->base[w->depth - 1];

    w->out[b < w->size ? b : w->size - 1] = '\0';
    api_pointer_key(tmp, sizeof tmp, w->out, json_is_string(k) ? json_string_value(k) : "");
    snprintf(w->out, w->size, "%s", tmp);
    json_decref(k);
}

static void pointer_at(const char *s, size_t n, size_t pos, char *out, size_t size)
{
    struct ptr_walk w = {.out = out, .size = size};
    bool want_key = false;

    out[0] = '\0';
    for (size_t i = 0; i < pos; i++) {
        char ch = s[i];
        if (ch == '"') {
            size_t end = string_end(s, n, i);
            if (end > pos)
                return;                 /* the error is inside this string */
            if (want_key)
                walk_set_key(&w, s + i, end - i);
            want_key = false;
            i = end - 1;
        } else if ((ch == '{' || ch == '[') && w.depth < API_MAX_JSON_DEPTH + 2) {
            w.base[w.depth] = strlen(out);
            w.object[w.depth] = ch == '{';
            w.index[w.depth++] = 0;
            want_key = ch == '{';
            if (ch == '[')
                walk_set_index(&w);
        } else if ((ch == '}' || ch == ']') && w.depth > 0) {
            out[w.base[--w.depth]] = '\0';
            want_key = false;
        } else if (ch == ',' && w.depth > 0) {
            want_key = w.object[w.depth - 1];
            w.index[w.depth - 1]++;
            if (want_key)
                out[w.base[w.depth - 1]] = '\0';
            else
                walk_set_index(&w);
        }
    }
}

/* Whether s[i] may start a number token: not inside a word or another
 * number (the text is judged by jansson, not here). */
static bool number_starts(const char *s, size_t i)
{
    char b = i ? s[i - 1] : ' ';

    return (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) &&
           !(b == '-' || b == '+' || b == '.' || (b >= '0' && b <= '9') ||
             (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'));
}

/* The end of the number token at s[i]; *big: it is an integer literal
 * (no fraction, no exponent) beyond long long, which jansson refuses as
 * an integer (JSON has no leading zeros: its digits say its size). */
static size_t number_end(const char *s, size_t n, size_t i, bool *big)
{
    static const char max[] = "9223372036854775807", neg_max[] = "9223372036854775808";
    bool neg = s[i] == '-';
    size_t d = i + neg, j = d;

    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    *big = false;
    if (j < n && (s[j] == '.' || s[j] == 'e' || s[j] == 'E')) {
        while (j < n && (s[j] == '.' || s[j] == 'e' || s[j] == 'E' || s[j] == '+' ||
                         s[j] == '-' || (s[j] >= '0' && s[j] <= '9')))
            j++;
        return j;
    }
    if (j - d != sizeof max - 1)
        *big = j - d > sizeof max - 1;
    else
        *big = memcmp(s + d, neg ? neg_max : max, sizeof max - 1) > 0;
    return j;
}

/* Copy s[0, n) to out (NULL: only count), ".0" after every integer
 * literal beyond long long; returns the bytes written (or that would be). */
static size_t copy_big_as_reals(const char *s, size_t n, char *out)
{
    size_t i = 0, k = 0;

    while (i < n) {
        size_t from = i;
        bool big = false;
        if (s[i] == '"')
            i = string_end(s, n, i);
        else if (number_starts(s, i))
            i = number_end(s, n, i, &big);
        else
            i++;
        if (out)
            memcpy(out + k, s + from, i - from);
        k += i - from;
        if (big) {
            if (out)
                memcpy(out + k, ".0", 2);
            k += 2;
        }
    }
    return k;
}

/*
 * Allocation failures inside jansson. jansson reports one met inside a
 * string as a syntax error ("invalid token", json_error_invalid_syntax),
 * which would answer a valid body read under memory pressure (an
 * address-space limit, a large request beside others) 400 invalid_json,
 * which a client does not retry. Its allocations go through this hook,
 * which notes a failure for the thread reading a body; once one failed,
 * the rest of that read fail at once: jansson would otherwise try again
 * for each byte of a long string (37 s for a 2.8 MB base64 string under a
 * limit), and a byte it could not append is dropped, not reported, so a
 * string read on after one could come out short. The hook is installed
 * once, keeping the allocator in place before it (server/main.c installs
 * it before any thread starts).
 */
static void *(*json_next_malloc)(size_t);
static pthread_once_t json_hook_once = PTHREAD_ONCE_INIT;
static _Thread_local bool json_reading, json_failed;

static void *json_hook_malloc(size_t n)
{
    if (json_reading && json_failed)
        return NULL;
    void *p = json_next_malloc(n);
    if (!p && json_reading)
        json_failed = true;
    return p;
}

static void json_hook_install(void)
{
    json_free_t next_free;

    json_get_alloc_funcs(&json_next_malloc, &next_free);
    json_set_alloc_funcs(json_hook_malloc, next_free);
}

void api_json_hook(void)
{
    pthread_once(&json_hook_once, json_hook_install);
}

/* json_loadb, with *failed set when an allocation failed in it (root is
 * then NULL). */
static json_t *loadb_watched(const char *s, size_t n, size_t flags, json_error_t *err,
                             bool *failed)
{
    json_t *root;

    api_json_hook();
    json_reading = true;
    json_failed = false;
    root = json_loadb(s, n, flags, err);
    json_reading = false;
    *failed = json_failed;
    if (*failed) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* 503 capacity_exhausted for a body that memory could not be found to read. */
static void fail_no_memory(struct api_call *c, size_t n)
{
    api_fail(c, API_ERR_CAPACITY_EXHAUSTED, NULL,
             "out of memory while reading the %zu-byte JSON body; retry it", n);
}

/* The text with ".0" after every integer literal beyond long long (a real
 * of the same value), malloc'd (*out_n its length); NULL when there is
 * none or no memory. jansson then reads just those as reals: its
 * JSON_DECODE_INT_AS_REAL would make every integer of the body a real,
 * which readers that take integers only refuse (OIP v2's shapes). */
static char *big_integers_as_reals(const char *s, size_t n, size_t *out_n)
{
    size_t k = copy_big_as_reals(s, n, NULL);
    char *out;

    if (k == n || !(out = malloc(k)))
        return NULL;
    *out_n = copy_big_as_reals(s, n, out);
    return out;
}

/* jansson's tree of the text; an integer literal beyond long long is
 * still a JSON number, read as a real. On an error, *err is the one of
 * the text as sent. */
static json_t *load_text(const char *s, size_t n, json_error_t *err, bool *failed)
{
    json_t *root = loadb_watched(s, n, JSON_REJECT_DUPLICATES, err, failed);
    size_t n2;
    char *s2;

    if (root || *failed || json_error_code(err) != json_error_numeric_overflow)
        return root;
    if ((s2 = big_integers_as_reals(s, n, &n2))) {
        root = loadb_watched(s2, n2, JSON_REJECT_DUPLICATES, err, failed);
        free(s2);
        if (root || *failed)
            return root;
    }
    /* the error as found in the text sent (its positions) */
    return loadb_watched(s, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, err, failed);
}

static json_t *parse_text(struct api_call *c, const char *s, size_t n)
{
    json_error_t err;
    json_t *root;
    char at[API_PATH_MAX];
    bool failed;

    if (has_raw_nul(c, s, n))
        return NULL;
    if (!text_fits(c, s, n))
        return NULL;
    root = load_text(s, n, &err, &failed);
    if (failed) {
        fail_no_memory(c, n);
        return NULL;
    }
    if (!root) {
        switch (json_error_code(&err)) {
        case json_error_duplicate_key:
            pointer_at(s, n, (size_t)err.position, at, sizeof at);
            api_fail(c, API_ERR_DUPLICATE_KEY, at, "%s (line %d, column %d)",
                     err.text, err.line, err.column);
            break;
        case json_error_stack_overflow:
            api_fail(c, API_ERR_JSON_TOO_DEEP, "", "%s", err.text);
            break;
        case json_error_numeric_overflow:
            pointer_at(s, n, (size_t)err.position, at, sizeof at);
            api_fail(c, API_ERR_NON_FINITE, at, "%s (line %d, column %d)",
                     err.text, err.line, err.column);
            break;
        default:
            /* jansson's text names its own flag: say what the client sent */
            api_fail(c, API_ERR_INVALID_JSON, "", "%s (line %d, column %d)",
                     strstr(err.text, "JSON_ALLOW_NUL") ? "\\u0000 is not allowed in a string"
                                                        : err.text,
                     err.line, err.column);
            break;
        }
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_fail(c, API_ERR_INVALID_JSON, "", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

const char *api_body_encoding_fault(const struct api_call *c)
{
    const char *ce = api_header(c, "Content-Encoding");
    const char *p = ce ? skip_ws(ce) : NULL;
    size_t n = p ? strlen(p) : 0;

    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (!p || n == 0 || (n == 8 && strncasecmp(p, "identity", 8) == 0))
        return NULL;
    return "Content-Encoding must be identity (or absent): attnd decodes no compressed "
           "body; send it uncompressed";
}

static json_t *parse_body(struct api_call *c, bool optional)
{
    const struct api_request *r = c->req;
    const char *fault = api_body_encoding_fault(c);

    if (fault) {
        api_fail(c, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL, "%s", fault);
        return NULL;
    }
    if (r->body_len == 0 || !r->body) {
        if (optional)
            return json_object();
        api_fail(c, API_ERR_INVALID_JSON, "", "request body is empty");
        return NULL;
    }
    fault = media_type_fault(api_header(c, "Content-Type"));
    if (fault) {
        api_fail(c, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL, "%s", fault);
        return NULL;
    }
    /* the strings decoded as the body arrived, back in it (those a fast
     * reader took were put back before it let them go) */
    api_early_restore(r->early, false);
    return parse_text(c, r->body, r->body_len);
}

json_t *api_parse_body(struct api_call *c)
{
    return parse_body(c, false);
}

json_t *api_parse_body_optional(struct api_call *c)
{
    return parse_body(c, true);
}

/* The tree jansson would read from a body whose members the fast reader
 * all took: {"<key>":0,...} (pre->whole). A new reference, or NULL. */
static json_t *pre_tree_build(const struct api_pre *pre)
{
    json_t *root = json_object();
    size_t i;

    for (i = 0; root && i < pre->n; i++)
        if (json_object_set_new(root, pre->e[i].path + 1, json_integer(0)) != 0) {
            json_decref(root);
            root = NULL;
        }
    return root;
}

/*
 * The same tree, shared: it depends only on which of the keys are present,
 * and nobody modifies it (the readers look members up), so keys->trees
 * holds one per subset of the first API_FAST_KEYS_SHARED names, built at
 * first use and published with a compare-and-swap. It is made immortal the
 * way jansson's own true/false/null are, a reference count of (size_t)-1
 * (jansson.h's json_incref/json_decref then leave it alone), so handing it
 * out is no atomic on a shared cache line, and json_decref by the caller
 * stays right. Building it per request was ~2k instructions with its
 * json_delete, a twentieth of a small request's api_handle. Bodies outside
 * the table get a tree of their own.
 */
static json_t *pre_tree(struct api_fast_keys *keys, const struct api_pre *pre)
{
    const char *const *names = keys->names;
    unsigned mask = 0;
    size_t i, k;
    json_t *t, *none = NULL;

    for (i = 0; i < pre->n; i++) {
        for (k = 0; k < API_FAST_KEYS_SHARED && names[k]; k++)
            if (strcmp(names[k], pre->e[i].path + 1) == 0)
                break;
        if (k == API_FAST_KEYS_SHARED || !names[k] || (mask & 1u << k))
            return pre_tree_build(pre);
        mask |= 1u << k;
    }
    if ((t = atomic_load(&keys->trees[mask])))
        return t;
    if (!(t = pre_tree_build(pre)))
        return NULL;
    t->refcount = (size_t)-1;               /* before it is published */
    if (!atomic_compare_exchange_strong(&keys->trees[mask], &none, t)) {
        t->refcount = 1;
        json_decref(t);                     /* another thread's is in */
        t = none;
    }
    return t;
}

json_t *api_parse_body_pre(struct api_call *c, struct api_fast_keys *keys,
                           struct api_pre *pre)
{
    const struct api_request *r = c->req;
    size_t max = api_max_elements(c);
    json_error_t err;
    size_t len;
    char *text;
    json_t *root;

    memset(pre, 0, sizeof *pre);
    /* The rewrite follows the whole body and refuses nesting beyond the
     * limit, so a rewritten text needs no too_deep() scan. */
    if (r->body_len == 0 || !r->body ||
        media_type_fault(api_header(c, "Content-Type")) || api_body_encoding_fault(c))
        return parse_body(c, false);
    if (!(text = api_pre_rewrite(r->body, r->body_len, keys->names, max, API_MAX_JSON_DEPTH,
                                 attn_ws_pool(r->ws), r->early, pre, &len))) {
        if (pre->whole) {
            if ((root = pre_tree(keys, pre)))
                return root;    /* nothing left for jansson to read */
            api_early_restore(r->early, true);
        }                       /* else api_pre_rewrite has restored it */
        api_pre_free(pre);
        return parse_body(c, false);
    }
    if (!text_fits(c, text, len)) {     /* what is left for jansson */
        free(text);
        api_early_restore(r->early, true);
        api_pre_free(pre);
        return NULL;
    }
    /* A raw NUL in the arrays the rewrite took out fails their readers; one
     * in the rest is caught here, and parse_text reports it. */
    bool failed = false;
    root = memchr(text, '\0', len) ? NULL
         : loadb_watched(text, len, JSON_REJECT_DUPLICATES, &err, &failed);
    free(text);
    if (failed) {
        api_early_restore(r->early, true);
        api_pre_free(pre);
        fail_no_memory(c, r->body_len);
        return NULL;
    }
    if (!root || !json_is_object(root)) {
        /* report the error as found in the original text */
        json_decref(root);
        api_early_restore(r->early, true);
        api_pre_free(pre);
        return parse_body(c, false);
    }
    return root;
}

/* ---- JSON pointers ---------------------------------------------------- */

char *api_pointer_key(char *out, size_t size, const char *prefix,
                      const char *key)
{
    size_t n;

    if (size == 0)
        return out;
    /* prefix + "/" copied by hand: readers build these paths on every
     * request (snprintf's format parsing showed in profiles); cut to fit,
     * as snprintf would. */
    n = strlen(prefix);
    if (n >= size - 1) {
        memcpy(out, prefix, size - 1);
        out[size - 1] = '\0';
        return out;
    }
    memcpy(out, prefix, n);
    out[n++] = '/';
    for (; *key && n + 1 < size; key++) {
        if (*key == '~' || *key == '/') {
            if (n + 2 >= size)
                break;
            out[n++] = '~';
            out[n++] = *key == '~' ? '0' : '1';
        } else {
            out[n++] = *key;
        }
    }
    out[n] = '\0';
    return out;
}

char *api_pointer_index(char *out, size_t size, const char *prefix,
                        size_t index)
{
    if (size)
        snprintf(out, size, "%s/%zu", prefix, index);
    return out;
}

bool api_check_fields(struct api_call *c, const json_t *obj,
                      const char *prefix, const char *const *allowed)
{
    const char *key;
    json_t *val;

    json_object_foreach((json_t *)obj, key, val) {
        const char *const *a;
        bool ok = json_is_null(val);    /* absent, as a known member's null */
        char path[128];

        for (a = allowed; *a && !ok; a++)
            if (strcmp(*a, key) == 0) {
                ok = true;
                break;
            }
        if (!ok) {
            api_fail(c, API_ERR_INVALID_FIELD, api_pointer_key(path, sizeof path,
                     prefix, key), "unknown field \"%s\"", key);
            return false;
        }
    }
    return true;
}
