/*
 * api/codec/textat.c — the text of one value of a JSON body, found by its
 * JSON pointer (textat.h). jansson gives a value, not its text; a reader
 * that must see the digits as sent (a float16 midpoint re-rounded from its
 * decimal, an OIP v2 sequence_id beyond jansson's signed 64 bits) walks
 * the body here. The walk trusts the body's syntax: jansson has accepted
 * it already; strings with holes (api/early.h) are stepped over unread.
 */
#include "api/codec/textat.h"

#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "api/early.h"

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string starting at p ('"'); one with holes (early,
 * api/early.h) is stepped over without being read. */
static const char *skip_string(const struct api_early *early, const char *p, const char *e)
{
    const char *q = api_early_quote(early, p);

    if (q)
        return q + 1;
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\')
            p++;
    return p < e ? p + 1 : e;
}

/* Past the value starting at p. */
static const char *skip_value(const struct api_early *early, const char *p, const char *e)
{
    int depth = 0;
    do {
        if (p >= e)
            return e;
        if (*p == '"') {
            p = skip_string(early, p, e);
            continue;
        }
        if (*p == '[' || *p == '{')
            depth++;
        else if (*p == ']' || *p == '}')
            depth--;
        else if (depth == 0) {              /* a number or a literal */
            while (p < e && *p != ',' && *p != ']' && *p != '}' && *p != ' ' &&
                   *p != '\n' && *p != '\t' && *p != '\r')
                p++;
            return p;
        }
        p++;
    } while (depth > 0);
    return p;
}

/* Whether the key string [ks, ke) (its quotes included) is the pointer
 * token tok[0..tl) (the api's own names: no ~ escapes) as jansson reads
 * it: a key with escapes ("\\u0071" is "q") is decoded first. */
static bool key_is(const char *ks, const char *ke, const char *tok, size_t tl)
{
    size_t n = (size_t)(ke - ks) - 2;
    json_t *k;
    bool is;

    if (n < tl || n > 6 * tl)
        return false;   /* a byte of a key takes 1 to 6 characters (\\u00XX):
                           a long string (holes, early) is never read */
    if (!memchr(ks + 1, '\\', n))
        return n == tl && memcmp(ks + 1, tok, tl) == 0;
    k = json_loadb(ks, (size_t)(ke - ks), JSON_DECODE_ANY, NULL);
    is = json_is_string(k) && json_string_length(k) == tl &&
         memcmp(json_string_value(k), tok, tl) == 0;
    json_decref(k);
    return is;
}

/* The value at pointer ptr below the value at p -> [*vs, *ve); false when
 * absent. Pointer tokens are plain (the api's own names and indices). */
static bool locate(const struct api_early *early, const char *p, const char *e,
                   const char *ptr, const char **vs, const char **ve)
{
    p = skip_ws(p, e);
    while (*ptr == '/') {
        const char *tok = ++ptr;
        size_t tl;
        while (*ptr && *ptr != '/')
            ptr++;
        tl = (size_t)(ptr - tok);
        if (p >= e)
            return false;
        if (*p == '{') {
            bool found = false;
            for (p = skip_ws(p + 1, e); p < e && *p == '"';) {
                const char *ks = p, *kend = skip_string(early, p, e);
                bool match = kend - ks >= 2 && key_is(ks, kend, tok, tl);
                p = skip_ws(kend, e);
                p = skip_ws(p + 1, e);          /* ':' */
                if (match) {
                    found = true;
                    break;
                }
                p = skip_ws(skip_value(early, p, e), e);
                if (p < e && *p == ',')
                    p = skip_ws(p + 1, e);
            }
            if (!found)
                return false;
        } else if (*p == '[') {
            size_t idx = 0, i;
            for (i = 0; i < tl; i++) {
                if (tok[i] < '0' || tok[i] > '9' || idx > SIZE_MAX / 10)
                    return false;
                idx = idx * 10 + (size_t)(tok[i] - '0');
            }
            p = skip_ws(p + 1, e);
            for (i = 0; i < idx && p < e && *p != ']'; i++) {
                p = skip_ws(skip_value(early, p, e), e);
                if (p < e && *p == ',')
                    p = skip_ws(p + 1, e);
            }
            if (p >= e || *p == ']')
                return false;
        } else {
            return false;
        }
    }
    *vs = p;
    *ve = skip_value(early, p, e);
    return true;
}

bool api_text_at(const char *body, size_t len, const struct api_early *early,
                 const char *ptr, const char **vs, const char **ve)
{
    return body && locate(early, body, body + len, ptr, vs, ve);
}
