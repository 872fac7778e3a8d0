/*
 * api/v2/v2.h — the Open Inference Protocol v2 (KServe / Triton REST) over the
 * attention core and the session store.
 *
 * Routes under /v2 (rest = the path after "/v2"):
 *   GET  ""                          server metadata (name, version, extensions)
 *   GET  /health/live, /health/ready {"live":true} / {"ready":bool} (503 draining)
 *   GET  /models/attention[/versions/1]        model metadata
 *   GET  /models/attention[/versions/1]/ready  {"name","ready"}
 *   POST /models/attention[/versions/1]/infer  inference (JSON or binary)
 * Errors use that protocol's shape, {"error":"message"}, with Triton's
 * status mapping: 400 invalid argument (every client mistake), 404 not
 * found, 405 method (with Allow), 503 unavailable, 500 internal.
 */
#ifndef ATTND_API_V2_H
#define ATTND_API_V2_H

#include "api/internal.h"

/* Handle a request whose path is "/v2" + rest ("" or "/..."). Sets
 * c->resp->route to a template and checks the method (api_v2_methods). */
void api_v2(struct api_call *c, const char *rest);

/* The route template of "/v2" + rest ("/v2/models/{model}/infer", ...), or
 * "unmatched"; static text. The router labels replies it answers itself
 * (401, OPTIONS) with it. */
const char *api_v2_route(const char *rest);

/* The methods "/v2" + rest answers (API_M_* bits; 0: no route there). */
unsigned api_v2_methods(const char *rest);

/* Rewrite an error reply already in c->resp (attnd's error object) into the
 * protocol's {"error":"..."} shape and status mapping; other replies are
 * left alone. api_v2 applies it to its own replies; the router may apply it
 * to errors it answers itself under /v2 (401 unauthorized). */
void api_v2_error_shape(struct api_call *c);

/* The OIP v2 datatype of a request computed in dt whose q, k and v came
 * in half (API_HALF_NONE: in dt): "FP16", "BF16", "FP32" or "FP64";
 * static text. */
const char *api_v2_datatype_name(enum attn_dtype dt, enum api_half half);

#endif
