/*
 * server/assets.h — static files embedded at build time (server/embed.sh):
 * the demo page and its scripts, served without touching the disk.
 */
#ifndef ATTND_SERVER_ASSETS_H
#define ATTND_SERVER_ASSETS_H

#include <stddef.h>

struct srv_asset {
    const char *path;                /* "/index.html" */
    const unsigned char *data;       /* NUL-terminated copy of the file */
    size_t size;                     /* bytes, without the NUL */
};

/* Terminated by an entry with path == NULL. */
extern const struct srv_asset srv_assets[];

/* Other paths two of the files are served at as well. */
static const struct {
    const char *path, *file;
} srv_asset_aliases[] = {{"/", "/index.html"}, {"/v1/openapi.json", "/openapi.json"}};

#endif
