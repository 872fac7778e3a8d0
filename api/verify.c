/*
 * api/verify.c — GET/POST /v1/verify and /verify.
 *
 * Owned by the verify engineer; replaced wholesale. This minimal version
 * only lets the router link: it answers 404 not_found until the real
 * handler lands.
 */
#include "api/internal.h"

void api_verify(struct api_call *c)
{
    api_fail(c, "not_found", NULL, "verify is not available in this build");
}
