/*
 * api/error.c — the one table of wire error codes (code, HTTP status,
 * default text) and the one mapping from core status to wire code.
 */
#include "api/error.h"

#include <stddef.h>
#include <string.h>

/* X(code, status, text) */
#define API_ERROR_MAP(X)                                                      \
    X("invalid_json", 400, "request body is not valid JSON")                 \
    X("duplicate_key", 400, "a key appears twice in one JSON object")        \
    X("json_too_deep", 400, "JSON nesting is too deep")                      \
    X("bad_request", 400, "malformed HTTP request")                          \
    X("unauthorized", 401, "a valid Bearer token is required")               \
    X("not_found", 404, "no such route")                                     \
    X("session_not_found", 404, "no such session (unknown or expired)")      \
    X("method_not_allowed", 405, "method not allowed on this route")         \
    X("length_conflict", 409, "cache length differs from expected_length")   \
    X("session_full", 409, "the session has reached max_tokens")             \
    X("body_too_large", 413, "request body exceeds the size limit")          \
    X("unsupported_media_type", 415, "request body must be application/json") \
    X("invalid_field", 422, "invalid field")                                 \
    X("ragged_matrix", 422, "matrix rows differ in length")                  \
    X("shape_mismatch", 422, "shapes do not agree")                          \
    X("empty_matrix", 422, "matrix has a zero dimension")                    \
    X("non_finite", 422, "value is not a finite number of the dtype")        \
    X("limit_exceeded", 422, "request exceeds a size limit")                 \
    X("response_too_large", 422, "response would exceed the size limit")     \
    X("empty_row", 422, "a query row has no key it may attend to")           \
    X("internal", 500, "internal error")                                     \
    X("capacity_exhausted", 503, "capacity exhausted, retry later")          \
    X("draining", 503, "the server is draining")

struct api_error_def {
    const char *code;
    int status;
    const char *text;
};

static const struct api_error_def api_errors[] = {
#define API_ERROR_ROW(code, status, text) {code, status, text},
    API_ERROR_MAP(API_ERROR_ROW)
#undef API_ERROR_ROW
};

static const struct api_error_def *error_find(const char *code)
{
    size_t i;

    if (!code)
        return NULL;
    for (i = 0; i < sizeof api_errors / sizeof api_errors[0]; i++)
        if (strcmp(api_errors[i].code, code) == 0)
            return &api_errors[i];
    return NULL;
}

int api_error_status(const char *code)
{
    const struct api_error_def *d = error_find(code);
    return d ? d->status : 500;
}

const char *api_error_text(const char *code)
{
    const struct api_error_def *d = error_find(code);
    return d ? d->text : "internal error";
}

int api_error_known(const char *code)
{
    return error_find(code) != NULL;
}

const char *api_core_code(enum core_status st)
{
    switch (st) {
    case CORE_EINVAL: return "invalid_field";
    case CORE_ESHAPE: return "shape_mismatch";
    case CORE_ELIMIT: return "limit_exceeded";
    case CORE_EEMPTYROW: return "empty_row";
    case CORE_ENONFINITE: return "non_finite";
    case CORE_ENOTFOUND: return "session_not_found";
    case CORE_ELENGTH: return "length_conflict";
    case CORE_EFULL: return "session_full";
    case CORE_ECAPACITY:
    case CORE_ENOMEM:           /* a bounded request that still failed to
                                   allocate: transient, retry later */
        return "capacity_exhausted";
    case CORE_EIO:
    case CORE_ECORRUPT:
    case CORE_OK:
        break;
    }
    return "internal";
}
