/*
 * api/sessions.c — everything under /v1/sessions.
 *
 * Owned by the sessions engineer; replaced wholesale. This minimal version
 * only lets the router link: it answers 404 not_found until the real
 * handler lands.
 */
#include "api/internal.h"

void api_sessions(struct api_call *c, const char *rest)
{
    (void)rest;
    c->resp->route = "/v1/sessions";
    api_fail(c, "not_found", NULL, "sessions are not available in this build");
}
