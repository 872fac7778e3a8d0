/*
 * api/error.h — the error model of the wire protocol.
 *
 * One table, API_ERROR_MAP below, lists every wire error code ("invalid_json",
 * "shape_mismatch", ...) with its HTTP status and a default message. It
 * generates enum api_err (API_ERR_INVALID_JSON, ...), which handlers pass to
 * api_fail, so a misspelt code is a compile error rather than a 500 at run
 * time; api/error.c holds the table's rows and the one function that maps
 * core's enum core_status to a wire code. Handlers never pick HTTP statuses
 * for errors themselves. A new code is one new row here (and a line in the
 * README's error list).
 */
#ifndef ATTND_API_ERROR_H
#define ATTND_API_ERROR_H

#include <stdbool.h>

#include "core/status.h"

/* X(ID, "code", HTTP status, default text) */
#define API_ERROR_MAP(X)                                                      \
    X(INVALID_JSON, "invalid_json", 400, "request body is not valid JSON")    \
    X(DUPLICATE_KEY, "duplicate_key", 400,                                    \
      "a key appears twice in one JSON object")                               \
    X(JSON_TOO_DEEP, "json_too_deep", 400, "JSON nesting is too deep")        \
    X(BAD_REQUEST, "bad_request", 400, "malformed HTTP request")              \
    X(UNAUTHORIZED, "unauthorized", 401, "a valid Bearer token is required")  \
    X(NOT_FOUND, "not_found", 404, "no such route")                           \
    X(SESSION_NOT_FOUND, "session_not_found", 404,                            \
      "no such session (unknown or expired)")                                 \
    X(METHOD_NOT_ALLOWED, "method_not_allowed", 405,                          \
      "method not allowed on this route")                                     \
    X(LENGTH_CONFLICT, "length_conflict", 409,                                \
      "cache length differs from expected_length")                            \
    X(SESSION_FULL, "session_full", 409, "the session has reached max_tokens")\
    X(BODY_TOO_LARGE, "body_too_large", 413,                                  \
      "request body exceeds the size limit")                                  \
    X(UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", 415,                  \
      "request body must be application/json")                                \
    X(RATE_LIMITED, "rate_limited", 429,                                      \
      "too many requests for this key or address, retry later")               \
    X(INVALID_FIELD, "invalid_field", 422, "invalid field")                   \
    X(RAGGED_MATRIX, "ragged_matrix", 422, "matrix rows differ in length")    \
    X(SHAPE_MISMATCH, "shape_mismatch", 422, "shapes do not agree")           \
    X(EMPTY_MATRIX, "empty_matrix", 422, "matrix has a zero dimension")       \
    X(NON_FINITE, "non_finite", 422,                                          \
      "value is not a finite number of the dtype")                            \
    X(LIMIT_EXCEEDED, "limit_exceeded", 422, "request exceeds a size limit")  \
    X(INVALID_EXPORT, "invalid_export", 422,                                  \
      "the body is not a whole session export")                               \
    X(RESPONSE_TOO_LARGE, "response_too_large", 422,                          \
      "response would exceed the size limit")                                 \
    X(EMPTY_ROW, "empty_row", 422, "a query row has no key it may attend to") \
    X(IDEMPOTENCY_KEY_REUSED, "idempotency_key_reused", 422,                  \
      "the Idempotency-Key was used with another request")                    \
    X(INTERNAL, "internal", 500, "internal error")                            \
    X(CAPACITY_EXHAUSTED, "capacity_exhausted", 503,                          \
      "capacity exhausted, retry later")                                      \
    X(DRAINING, "draining", 503, "the server is draining")                    \
    X(STORAGE_UNAVAILABLE, "storage_unavailable", 503,                        \
      "the change could not be journaled, retry later")                       \
    X(DEADLINE_EXCEEDED, "deadline_exceeded", 504,                            \
      "the request did not finish before its deadline")

enum api_err {
    API_ERR_NONE = -1,              /* not an error (a reply that succeeded) */
#define API_ERR_ENUM(id, code, status, text) API_ERR_##id,
    API_ERROR_MAP(API_ERR_ENUM)
#undef API_ERR_ENUM
    API_ERR_COUNT
};

/* HTTP status of an error; 500 for a value outside the table. */
int api_error_status(enum api_err e);

/* The wire code ("invalid_json"); "internal" outside the table. */
const char *api_error_code(enum api_err e);

/* Default human message; never NULL. */
const char *api_error_text(enum api_err e);

/* The error whose wire code is code; false (and *e untouched) if none. */
bool api_error_parse(const char *code, enum api_err *e);

/* The single core status -> wire error mapping (API_ERR_INTERNAL for
 * CORE_OK and anything unexpected). */
enum api_err api_core_error(enum core_status st);

#endif
