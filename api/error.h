/*
 * api/error.h — the error model of the wire protocol.
 *
 * One table (api/error.c) maps every wire error code of DESIGN.md
 * ("invalid_json", "shape_mismatch", ...) to its HTTP status and a default
 * message, and one function maps core's enum core_status to a wire code.
 * Handlers never pick HTTP statuses for errors themselves.
 */
#ifndef ATTND_API_ERROR_H
#define ATTND_API_ERROR_H

#include "core/status.h"

/* HTTP status of a wire error code; 500 for an unknown code. */
int api_error_status(const char *code);

/* Default human message of a wire error code; never NULL. */
const char *api_error_text(const char *code);

/* true when code is in the table. */
int api_error_known(const char *code);

/* The single core status -> wire code mapping ("internal" for CORE_OK and
 * anything unexpected). */
const char *api_core_code(enum core_status st);

#endif
