/*
 * api/codec/halfread.h — JSON numbers rounded to float16 / bfloat16 exactly.
 *
 * A number is read as the correctly rounded double v (strtod, jansson or
 * api/codec/numread.c). Rounding v to the half format equals rounding the
 * decimal
 * itself everywhere except where v lands exactly on a midpoint between two
 * half values while the decimal does not (a decimal of 17 or more digits
 * within half a float64 unit of the midpoint: "1.00048828125000001" reads
 * as the float16 tie 1 + 2^-11, yet lies above it). There, and only there,
 * the decimal text decides: api_half_from_text compares it with the
 * midpoint exactly.
 */
#ifndef ATTND_API_HALFREAD_H
#define ATTND_API_HALFREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sign (-1, 0, 1) of the RFC 8259 number s[0..len) minus the finite x. */
int api_decimal_cmp(const char *s, size_t len, double x);

/* The float16 (bf16 false) or bfloat16 encoding nearest (ties to even) to
 * the decimal s[0..len), whose correctly rounded double is v. */
uint16_t api_half_from_text(const char *s, size_t len, double v, bool bf16);

#endif
