/*
 * api/error.c — the rows of the one table of wire error codes (declared with
 * API_ERROR_MAP in api/error.h: code, HTTP status, default text) and the one
 * mapping from core status to wire error.
 */
#include "api/error.h"

#include <stddef.h>
#include <string.h>

struct api_error_def {
    const char *code;
    int status;
    const char *text;
};

/* Indexed by enum api_err. */
static const struct api_error_def api_errors[API_ERR_COUNT] = {
#define API_ERROR_ROW(id, code, status, text) [API_ERR_##id] = {code, status, text},
    API_ERROR_MAP(API_ERROR_ROW)
#undef API_ERROR_ROW
};

static const struct api_error_def *error_def(enum api_err e)
{
    if ((int)e < 0 || e >= API_ERR_COUNT)
        e = API_ERR_INTERNAL;
    return &api_errors[e];
}

int api_error_status(enum api_err e)
{
    return error_def(e)->status;
}

const char *api_error_code(enum api_err e)
{
    return error_def(e)->code;
}

const char *api_error_text(enum api_err e)
{
    return error_def(e)->text;
}

bool api_error_parse(const char *code, enum api_err *e)
{
    size_t i;

    if (!code)
        return false;
    for (i = 0; i < API_ERR_COUNT; i++)
        if (strcmp(api_errors[i].code, code) == 0) {
            *e = (enum api_err)i;
            return true;
        }
    return false;
}

enum api_err api_core_error(enum core_status st)
{
    switch (st) {
    case CORE_EINVAL: return API_ERR_INVALID_FIELD;
    case CORE_ESHAPE: return API_ERR_SHAPE_MISMATCH;
    case CORE_ELIMIT: return API_ERR_LIMIT_EXCEEDED;
    case CORE_EEMPTYROW: return API_ERR_EMPTY_ROW;
    case CORE_ENONFINITE: return API_ERR_NON_FINITE;
    case CORE_ENOTFOUND: return API_ERR_SESSION_NOT_FOUND;
    case CORE_ELENGTH: return API_ERR_LENGTH_CONFLICT;
    case CORE_EFULL: return API_ERR_SESSION_FULL;
    case CORE_ECAPACITY:
    case CORE_ENOMEM:           /* a bounded request that still failed to
                                   allocate: transient, retry later */
        return API_ERR_CAPACITY_EXHAUSTED;
    case CORE_ESTORAGE: return API_ERR_STORAGE_UNAVAILABLE;
    case CORE_ESTOPPED:         /* the request's deadline (a cancelled one
                                   has nobody left to answer, or is answered
                                   draining: api_fail_core) */
        return API_ERR_DEADLINE_EXCEEDED;
    case CORE_EIO:
    case CORE_ECORRUPT:
    case CORE_EBUSY:            /* only at start (a state directory in use) */
    case CORE_EEXIST:           /* answered by the caller (a v2 sequence) */
    case CORE_OK:
        break;
    }
    return API_ERR_INTERNAL;
}
