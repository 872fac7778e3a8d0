/*
 * api/codec/textat.h — the text of one value of a JSON body by its JSON
 * pointer, for readers that need the digits as sent, not jansson's value.
 */
#ifndef ATTND_API_TEXTAT_H
#define ATTND_API_TEXTAT_H

#include <stdbool.h>
#include <stddef.h>

struct api_early;

/*
 * The value at JSON pointer ptr (plain tokens: the api's own names and
 * array indices; "" is the whole body) in body[0..len) -> its text
 * [*vs, *ve) (a number's characters, or a container or string with its
 * brackets or quotes); false when it is absent. early: the body's
 * strings with holes (api/early.h), or NULL. The body must be JSON that
 * jansson accepted.
 */
bool api_text_at(const char *body, size_t len, const struct api_early *early,
                 const char *ptr, const char **vs, const char **ve);

#endif
