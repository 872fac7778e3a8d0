/*
 * api/early.c — long base64 strings of a body decoded as it arrives (see
 * api/early.h and api/api.h).
 *
 * The body is followed as a sequence of JSON strings and what lies
 * between them (escapes understood, nothing else checked: the readers
 * judge the body later, and a string decoded here is only ever used for
 * the same bytes at the same place). A string that has grown to
 * EARLY_MIN_CHARS characters without an escape is decoded from then on,
 * EARLY_UNIT characters at a time, by the decoder the readers use; a unit
 * ending in '=' waits, so padding is only ever decoded by the reader, at
 * the very end. A string the decoder refuses part way is dropped, and so
 * is every long string past the first EARLY_STRINGS.
 *
 * The whole units of a piece that arrives inside a long string are
 * decoded straight from the transport's buffer and not copied into the
 * body: copying 4 MB into a body buffer cost as much as decoding them.
 * Their place in the body is a hole, left as it was, and the body's
 * readers know it (api/early.h). A hole is filled again by encoding the
 * decoded bytes back (base64 without padding is one to one), when a
 * string is dropped at once, else when a reader asks (api_early_restore).
 */
#include "api/early.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/codec/base64.h"
#include "api/internal.h"
#include "api/spare.h"

#ifndef ATTND_FUZZ_EARLY
/* Smaller bodies are decoded by their readers after they arrive: too
 * little to gain. */
#define EARLY_MIN_BODY ((size_t)1 << 20)
/* A string this long (in characters) is worth a buffer of its own. */
#define EARLY_MIN_CHARS ((size_t)32 << 10)
#else   /* the fuzz build (tests/fuzz/fuzz.mk): small inputs reach it all */
#define EARLY_MIN_BODY ((size_t)64)
#define EARLY_MIN_CHARS ((size_t)64)
#endif
/* 32 characters: 24 bytes, a whole number of elements of every size. */
#define EARLY_UNIT ((size_t)32)
#define EARLY_STRINGS 8

enum early_state {
    EARLY_OUT,                      /* between strings */
    EARLY_IN,                       /* in a string, not yet decoded */
    EARLY_DECODE,                   /* in a long string, decoding it */
    EARLY_SKIP,                     /* in a string that is not decoded */
};

struct early_string {
    size_t start, end;              /* its characters: body[start, end) */
    size_t chars;                   /* the first of them, decoded into data */
    void *data;                     /* owned until taken; after, lent */
    bool taken, holes;
    bool f32_finite;
};

struct api_early {
    char *body;                     /* the transport's buffer */
    size_t total;                   /* the body's announced bytes */
    size_t pos;                     /* the next byte to look at */
    enum early_state st;
    struct early_string cur;        /* EARLY_DECODE: the string (its end
                                       not yet known) */
    size_t n;
    struct early_string s[EARLY_STRINGS];
};

/* The end of what is decoded of the current string (a body offset). */
static size_t decoded_to(const struct api_early *e)
{
    return e->cur.start + e->cur.chars;
}

struct api_early *api_early_open(const struct api_request *req, size_t total)
{
    struct api_early *e;

    if (total == SIZE_MAX || total < EARLY_MIN_BODY || req->stream ||
        !api_route_takes_early(req) || !(e = calloc(1, sizeof *e)))
        return NULL;
    e->total = total;
    return e;
}

/* Fill the holes of s's decoded characters. */
static void refill(char *body, struct early_string *s)
{
    if (s->holes)
        api_base64_encode_to(body + s->start, s->data, s->chars / 4 * 3);
    s->holes = false;
}

/* The current string is not decoded after all: its holes filled, its
 * buffer freed. */
static void drop_current(struct api_early *e)
{
    if (e->cur.data)
        refill(e->body, &e->cur);
    api_spare_free(e->cur.data);
    e->cur.data = NULL;
}

void api_early_free(struct api_early *e)
{
    if (!e)
        return;
    api_spare_free(e->cur.data);
    for (size_t i = 0; i < e->n; i++)
        if (!e->s[i].taken)
            api_spare_free(e->s[i].data);
    free(e);
}

/* Decode the current string's next len characters, at text (whole units,
 * the last not ending in '='); false when the decoder refuses them. */
static bool decode_from(struct api_early *e, const char *text, size_t len)
{
    unsigned char *dst = (unsigned char *)e->cur.data + e->cur.chars / 4 * 3;
    bool finite;

    /* dst is at a multiple of 24 bytes: its elements are the tensor's */
    if (!api_base64_decode_f32(text, len, dst, &finite))
        return false;
    e->cur.f32_finite = e->cur.f32_finite && finite;
    e->cur.chars += len;
    return true;
}

/* The end of the last whole unit of the current string's characters
 * before to that does not end in '=' (never before decoded_to). */
static size_t unit_end(const struct api_early *e, size_t to)
{
    size_t x = e->cur.start + (to - e->cur.start) / EARLY_UNIT * EARLY_UNIT;
    if (x > decoded_to(e) && e->body[x - 1] == '=')
        x -= EARLY_UNIT;
    return x;
}

/* Decode the body's characters of the current string from decoded_to up
 * to to (whole units); false when the decoder refuses them. */
static bool decode_to(struct api_early *e, size_t to)
{
    size_t at = decoded_to(e);

    return decode_from(e, e->body + at, to - at);
}

/* A long string begins at start: its buffer, for as many bytes as the
 * rest of the body could decode to (written only as far as the string
 * goes: the strings together write 3/4 of the body's bytes at most). */
static bool begin_decode(struct api_early *e, size_t start)
{
    size_t need = (e->total - start) / 4 * 3;

    if (e->n == EARLY_STRINGS)
        return false;
    e->cur = (struct early_string){.start = start, .f32_finite = true};
    if (!(e->cur.data = api_spare_alloc(need ? need : 1, NULL)))
        return false;
    e->st = EARLY_DECODE;
    return true;
}

/* The current string ends at body[end] (its closing quote): kept. */
static void finish(struct api_early *e, size_t end)
{
    size_t x = unit_end(e, end);

    if (x > decoded_to(e) && !decode_to(e, x)) {
        drop_current(e);
    } else {
        if (e->cur.holes && decoded_to(e) == end) {
            /* its last unit written back: readers look at the last two
             * characters for padding */
            size_t at = end - EARLY_UNIT;
            api_base64_encode_to(e->body + at,
                                 (unsigned char *)e->cur.data + (at - e->cur.start) / 4 * 3,
                                 EARLY_UNIT / 4 * 3);
        }
        e->cur.end = end;
        e->s[e->n++] = e->cur;
        e->cur.data = NULL;
    }
    e->st = EARLY_OUT;
    e->pos = end + 1;
}

/* The current string is not base64 (an escape, or a character the decoder
 * refused): skipped from what was decoded of it to its end. */
static void give_up_current(struct api_early *e)
{
    e->pos = decoded_to(e);
    drop_current(e);
    e->st = EARLY_SKIP;
}

/* EARLY_DECODE over the body up to len: the whole units there are; then,
 * in what is left (less than two units, unless the decoder refused one),
 * the string's end. */
static void step_decode(struct api_early *e, size_t len)
{
    size_t x = unit_end(e, len);
    bool refused = x > decoded_to(e) && !decode_to(e, x);
    size_t at = decoded_to(e);
    const char *q = memchr(e->body + at, '"', len - at);
    size_t lim = q ? (size_t)(q - e->body) : len;

    if (memchr(e->body + at, '\\', lim - at) || (!q && refused))
        give_up_current(e);
    else if (q)
        finish(e, lim);
    else
        e->pos = len;                   /* the rest of a unit is to come */
}

/* In a string, from e->pos up to len: the first quote (*lim its offset,
 * or len when there is none yet) and the first backslash before it. */
static const char *first_escape(const struct api_early *e, size_t len, size_t *lim)
{
    const char *q = memchr(e->body + e->pos, '"', len - e->pos);

    *lim = q ? (size_t)(q - e->body) : len;
    return memchr(e->body + e->pos, '\\', *lim - e->pos);
}

/* EARLY_IN: the string whose characters begin at start (e->cur.start
 * until it is decoded), looked at up to len. */
static void step_in(struct api_early *e, size_t len)
{
    size_t start = e->cur.start, lim;
    const char *bs = first_escape(e, len, &lim);
    bool q = lim < len;

    if (bs) {
        e->st = EARLY_SKIP;
        e->pos = (size_t)(bs - e->body);
    } else if (lim - start >= EARLY_MIN_CHARS && begin_decode(e, start)) {
        e->pos = start;                 /* EARLY_DECODE goes on from here */
    } else if (q) {
        e->st = EARLY_OUT;
        e->pos = lim + 1;
    } else {
        e->pos = len;
    }
}

/* EARLY_SKIP: to the end of a string, past its escapes (a backslash that
 * is the last byte so far waits for the byte it escapes). */
static void step_skip(struct api_early *e, size_t len)
{
    size_t lim;
    const char *bs = first_escape(e, len, &lim);

    if (bs) {
        size_t at = (size_t)(bs - e->body);
        e->pos = at + 1 < len ? at + 2 : at;
    } else if (lim < len) {
        e->st = EARLY_OUT;
        e->pos = lim + 1;
    } else {
        e->pos = len;
    }
}

/* Follow the body up to len (every byte of it in place but the holes). */
static void follow(struct api_early *e, size_t len)
{
    while (e->pos < len) {
        size_t before = e->pos;
        enum early_state st = e->st;
        switch (e->st) {
        case EARLY_OUT: {
            const char *q = memchr(e->body + e->pos, '"', len - e->pos);
            if (!q) {
                e->pos = len;
            } else {
                e->st = EARLY_IN;
                e->cur.start = e->pos = (size_t)(q - e->body) + 1;
            }
            break;
        }
        case EARLY_IN:
            step_in(e, len);
            break;
        case EARLY_DECODE:
            step_decode(e, len);
            break;
        case EARLY_SKIP:
            step_skip(e, len);
            break;
        }
        if (e->pos == before && e->st == st)
            break;                      /* waits for more bytes */
    }
}

void api_early_put(struct api_early *e, char *body, size_t off, const char *data, size_t n)
{
    e->body = body;
    if (off > e->total || n > e->total - off) {
        memcpy(body + off, data, n);    /* more than announced: not followed */
        return;
    }
    if (e->st == EARLY_DECODE) {
        /* to the next unit boundary through the body, then whole units
         * straight from data */
        size_t k = (EARLY_UNIT - (off - e->cur.start) % EARLY_UNIT) % EARLY_UNIT;
        if (k > n)
            k = n;
        memcpy(body + off, data, k);
        follow(e, off + k);
        off += k;
        data += k;
        n -= k;
        if (e->st == EARLY_DECODE && decoded_to(e) == off) {
            size_t u = n / EARLY_UNIT * EARLY_UNIT;
            if (u && data[u - 1] == '=')
                u -= EARLY_UNIT;
            if (u && decode_from(e, data, u)) {
                e->cur.holes = true;
                e->pos = decoded_to(e);
                off += u;
                data += u;
                n -= u;
            }
        }
    }
    memcpy(body + off, data, n);
    follow(e, off + n);
}

void api_early_settle(struct api_early *e)
{
    if (e && e->st == EARLY_DECODE)
        give_up_current(e);             /* a string the body ends inside */
}

/* The index of the string whose characters begin at text, or e->n. */
static size_t string_at(const struct api_early *e, const char *text)
{
    size_t i = 0;

    while (i < e->n && text != e->body + e->s[i].start)
        i++;
    return i;
}

bool api_early_take(struct api_early *e, const char *text, size_t len,
                    struct api_early_bytes *out)
{
    size_t i = e ? string_at(e, text) : 0;

    if (!e || i == e->n || e->s[i].taken || e->s[i].end - e->s[i].start != len)
        return false;
    out->data = e->s[i].data;
    out->chars = e->s[i].chars;
    out->f32_finite = e->s[i].f32_finite;
    e->s[i].taken = true;
    return true;
}

const char *api_early_quote(const struct api_early *e, const char *p)
{
    size_t i = e ? string_at(e, p + 1) : 0;

    return e && i < e->n && e->s[i].holes ? e->body + e->s[i].end : NULL;
}

void api_early_restore(struct api_early *e, bool taken_too)
{
    api_early_settle(e);
    for (size_t i = 0; e && i < e->n; i++)
        if (!e->s[i].taken || taken_too)
            refill(e->body, &e->s[i]);
}

size_t api_early_taken(const struct api_early *e)
{
    size_t n = 0;

    for (size_t i = 0; e && i < e->n; i++)
        n += e->s[i].taken;
    return n;
}
