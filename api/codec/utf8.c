/*
 * api/codec/utf8.c — the one UTF-8 well-formedness check (see utf8.h). Written
 * here because jansson only validates whole strings and glibc's mbrtowc
 * depends on the process locale.
 */
#include "api/codec/utf8.h"

size_t api_utf8_seq(const unsigned char *s)
{
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n, i;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        n = 2;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        n = 3;
        if (s[0] == 0xE0)
            lo = 0xA0;          /* overlong */
        else if (s[0] == 0xED)
            hi = 0x9F;          /* surrogates */
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        n = 4;
        if (s[0] == 0xF0)
            lo = 0x90;          /* overlong */
        else if (s[0] == 0xF4)
            hi = 0x8F;          /* beyond U+10FFFF */
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}
