/*
 * api/early.h — the long base64 strings of a request body decoded while
 * the body is still arriving (the transport's side is in api/api.h:
 * api_early_open, api_early_put, api_early_free), and taken by the tensor
 * readers once it has (api/codec/numread.c).
 *
 * A large base64 request used to decode its megabytes of strings after
 * the last byte had arrived, on a worker just woken, and its transport
 * spent as long again copying them into the body (measured:
 * docs/benchmarks.md, section "Decoding while the body arrives"). The
 * transport's thread decodes each piece from its own buffer instead,
 * leaving only the last characters of each string to the reader. What the
 * reader gets is what decoding the whole string would give: the same
 * decoder over the same bytes (a string that is not pure base64 is not
 * decoded, and its reader reports it as it would without this decoder).
 *
 * The characters decoded so are not copied into the body: its readers
 * step over those strings (api_early_quote) or have them written back
 * first (api_early_restore). Every reader of a body that came with an
 * early decoder does one or the other.
 */
#ifndef ATTND_API_EARLY_H
#define ATTND_API_EARLY_H

#include <stdbool.h>
#include <stddef.h>

struct api_early;   /* api/api.h */

/* The body has all arrived: a string it ends inside (no closing quote)
 * is written back and dropped. Call it before the first reader looks at
 * the body (api_early_restore does too). NULL: no-op. */
void api_early_settle(struct api_early *e);

/* What api_early_take hands over: the decoded bytes of the first chars
 * characters of a string (a multiple of 32: a whole number of elements of
 * every size), a block of api/spare.h, now the caller's. The rest of the
 * string is the caller's to decode from the body. f32_finite: no 4-byte
 * element of them has an exponent of all ones (api_first_nonfinite's
 * strict check); false says nothing. */
struct api_early_bytes {
    void *data;
    size_t chars;
    bool f32_finite;
};

/* The string of len characters at text in the body (just inside its
 * opening quote), taken out of e: true with *out filled when e decoded
 * some of it and saw it end exactly there (once); false otherwise (e NULL
 * too). Its holes stay until api_early_restore(e, true), which reads
 * out->data: call that (when needed) before freeing it. */
bool api_early_take(struct api_early *e, const char *text, size_t len,
                    struct api_early_bytes *out);

/* For a string whose opening quote is at p in the body: its closing
 * quote when the string has holes, else NULL (e NULL too). A reader that
 * steps over strings goes there instead of reading them. */
const char *api_early_quote(const struct api_early *e, const char *p);

/* Fill the holes of the strings not taken (and of the taken ones too,
 * taken_too: their bytes must still be alive), so the body reads as it
 * was sent. NULL: no-op. */
void api_early_restore(struct api_early *e, bool taken_too);

/* How many strings decoded here a reader took (tests). */
size_t api_early_taken(const struct api_early *e);

#endif
