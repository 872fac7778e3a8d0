# docker/nginx.Dockerfile — nginx for the compose topology, built on the
# same Debian base as attnd's image (make test-container builds it from a
# locally made base; docker/compose.yml can use the official nginx image
# instead). It does what that image's entrypoint does with templates: it
# sources /docker-entrypoint.d/*.envsh (here docker/nginx-resolver.envsh,
# which compose.yml mounts into the official image), then each
# /etc/nginx/templates/NAME.template becomes /etc/nginx/conf.d/NAME with the
# environment's defined variables substituted (envsubst, so nginx's own
# $variables stay), then nginx runs in the foreground.
#
# It runs as www-data (uid 33), not root: the port is above 1024
# (NGINX_LISTEN), the pid file is /tmp/nginx.pid, the temp files are in
# /var/lib/nginx and the rendered templates in /etc/nginx/conf.d, both owned
# by www-data (with a read-only root file system, mount writable volumes on
# /tmp and those two), and the logs go to stdout and stderr.
#
#   podman build -f docker/nginx.Dockerfile --build-arg BASE=... -t attnd-nginx .
ARG BASE=debian:bookworm-20241111-slim@sha256:ca3372ce30b03a591ec573ea975ad8b0ecaf0eb17a354416741f8001bbcae33d
FROM ${BASE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx gettext-base curl \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && rm -f /etc/nginx/sites-enabled/default \
 && mkdir -p /etc/nginx/templates \
 && sed -i -e '/^user /d' -e 's|^pid .*|pid /tmp/nginx.pid;|' /etc/nginx/nginx.conf \
 && install -d -o www-data -g www-data /var/lib/nginx \
 && chown -R www-data:www-data /var/lib/nginx /etc/nginx/conf.d \
 && ln -sf /dev/stdout /var/log/nginx/access.log \
 && ln -sf /dev/stderr /var/log/nginx/error.log
COPY docker/nginx-resolver.envsh /docker-entrypoint.d/15-attnd-resolver.envsh
USER 33:33
STOPSIGNAL SIGQUIT
ENTRYPOINT ["/bin/sh", "-c", "set -e; for f in /docker-entrypoint.d/*.envsh; do [ -e \"$f\" ] || continue; . \"$f\"; done; vars=$(env | cut -d= -f1 | sed 's/^/$/' | tr '\\n' ' '); for t in /etc/nginx/templates/*.template; do [ -e \"$t\" ] || continue; envsubst \"$vars\" < \"$t\" > /etc/nginx/conf.d/$(basename \"$t\" .template); done; exec nginx -g 'daemon off;'"]
