/*
 * api/ops.c — the operations endpoints: /healthz (alive), /readyz (503
 * draining while the server drains), /v1/info (version, BLAS configuration,
 * threads, limits) and /metrics (Prometheus text rendered by server/).
 */
#include "api/internal.h"

#include <stdlib.h>

#include "core/attn.h"
#include "core/attn_fused.h"

void api_ops_healthz(struct api_call *c)
{
    api_reply_json(c, 200, json_pack("{s:s}", "status", "ok"));
}

void api_ops_readyz(struct api_call *c)
{
    if (api_draining(c)) {
        api_fail(c, API_ERR_DRAINING, NULL, NULL);
        return;
    }
    api_reply_json(c, 200, json_pack("{s:s}", "status", "ready"));
}

/* A size_t limit as a JSON integer (clamped: JSON integers here are
 * long long). */
static json_t *size_json(size_t v)
{
    return json_integer(v > (size_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

void api_ops_info(struct api_call *c)
{
    const struct api_config *cfg = &c->ctx->cfg;
    const char *blas = attn_blas_config();

    api_reply_json(c, 200, json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:s}, s:{s:i}, s:{s:o, s:o, s:o, s:f}, s:b, s:b}",
        "version", cfg->version ? cfg->version : ATTND_VERSION,
        "blas", blas,
        "fused_kernel", attn_kernel_name(attn_kernel_active()),
        "kernels",
        "float32", attn_dtype_kernel(ATTN_F32),
        "float64", attn_dtype_kernel(ATTN_F64),
        "threads", "workers", cfg->workers,
        "limits",
        "max_body_bytes", size_json(cfg->max_body_bytes),
        "max_elements", size_json(cfg->max_elements),
        "max_tokens", size_json(cfg->max_tokens),
        "session_ttl_s", cfg->session_ttl_s,
        "auth", (cfg->api_key && *cfg->api_key) || cfg->auth,
        "cors", cfg->cors_origins && cfg->cors_origins[0]));
}

void api_ops_metrics(struct api_call *c)
{
    size_t len = 0;
    char *text;

    if (!c->ctx->metrics) {
        api_fail(c, API_ERR_NOT_FOUND, NULL, "metrics are not enabled");
        return;
    }
    text = c->ctx->metrics(c->ctx->metrics_arg, &len);
    if (!text) {
        api_fail(c, API_ERR_INTERNAL, NULL, "metrics rendering failed");
        return;
    }
    api_reply_empty(c, 200);
    c->resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    c->resp->body = text;       /* malloc'd by the renderer: now ours */
    c->resp->body_len = len;
}
