/*
 * server/http_assets.c — the files built into the binary (server/web/:
 * the teaching page, its scripts and style, the OpenAPI document), served
 * on GET and HEAD by the transport itself: their content type, the route
 * they are counted and logged under, and the answer with the headers every
 * other answer carries (CORS, X-Request-Id, Connection: close while the
 * server drains).
 */
#include "server/http_impl.h"

#include <stdatomic.h>
#include <string.h>

#include <microhttpd.h>

#include "server/assets.h"

static const char *content_type_of(const char *path)
{
    static const struct { const char *ext, *type; } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
        {".md", "text/markdown; charset=utf-8"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

const struct srv_asset *http_find_asset(const char *method, const char *url)
{
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return NULL;
    const char *name = url;
    for (size_t i = 0; i < sizeof srv_asset_aliases / sizeof srv_asset_aliases[0]; i++)
        if (strcmp(url, srv_asset_aliases[i].path) == 0)
            name = srv_asset_aliases[i].file;
    for (const struct srv_asset *a = srv_assets; a->path; a++)
        if (strcmp(a->path, name) == 0)
            return a;
    return NULL;
}

/* The route template a file is logged and counted under. */
static const char *asset_route(const char *url, const struct srv_asset *a)
{
    return strcmp(url, "/v1/openapi.json") == 0 ? "/v1/openapi.json"
         : strcmp(a->path, "/index.html") == 0 ? "/" : "/{asset}";
}

const char *srv_http_asset_route(const char *path)
{
    const struct srv_asset *a = http_find_asset("GET", path);
    return a ? asset_route(path, a) : NULL;
}

enum MHD_Result http_serve_asset(struct req *r, const struct srv_asset *a)
{
    struct MHD_Response *mr = MHD_create_response_from_buffer(
        a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!mr)
        return MHD_NO;
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, content_type_of(a->path));
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(mr, "X-Content-Type-Options", "nosniff");
    /* CORS as on every other answer: a page of an allowed origin may read
     * the OpenAPI document its preflight was told it may GET */
    struct api_request q;
    http_api_req_init(r, &q, http_req_header);
    api_cors_headers(r->h->ctx, &q, &r->resp);
    for (size_t i = 0; i < r->resp.n_headers && i < API_MAX_HEADERS; i++)
        MHD_add_response_header(mr, r->resp.headers[i].name, r->resp.headers[i].value);
    r->resp.n_headers = 0;
    if (atomic_load(&r->h->quiesced))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_add_response_header(mr, "X-Request-Id", r->id);
    r->status = 200;
    r->route = asset_route(r->url, a);
    r->bytes_out = http_body_sent(r, a->size);
    r->state = REQ_ANSWERED;
    enum MHD_Result ret = MHD_queue_response(r->conn, MHD_HTTP_OK, mr);
    MHD_destroy_response(mr);
    return ret;
}
