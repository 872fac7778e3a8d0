/*
 * server/config.h — the static configuration surface of attnd.
 *
 * Every setting is a command-line flag (--max-body-bytes 1048576 or
 * --max-body-bytes=1048576) with an ATTND_* environment twin
 * (ATTND_MAX_BODY_BYTES); a flag wins over its twin, a twin over the
 * default. Numbers are validated strictly (whole string, range); a bad value
 * is reported with the flag's name and the process exits 2.
 */
#ifndef ATTND_SERVER_CONFIG_H
#define ATTND_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "api/warm.h"
#include "core/attn_fused.h"
#include "server/resources.h"

#define SRV_MAX_CORS_ORIGINS 32

enum srv_log_format { SRV_LOG_JSON = 0, SRV_LOG_TEXT };

#define SRV_MAX_ENV_TYPOS 8

struct srv_config {
    char host[256];                 /* bind address (numeric or name) */
    unsigned port;                  /* 0: pick a free port */
    char port_file[1024];           /* write the bound port here, or "" */
    struct srv_resources res;       /* what this process may use of the machine */
    unsigned workers;               /* compute threads per client (the pool has twice as many) */
    unsigned http_threads;          /* libmicrohttpd polling threads */
    size_t max_body_bytes;          /* request body cap */
    size_t max_elements;            /* numbers per request (in and out) */
    size_t max_sessions;            /* live sessions at most */
    size_t max_cache_bytes;         /* KV cache bytes over all sessions */
    double session_ttl_s;           /* default session ttl */
    size_t max_tokens;              /* default session max_tokens */
    char api_key[512];              /* Bearer token, "" for none */
    char cors_buf[4096];            /* storage behind cors_origins */
    const char *cors_origins[SRV_MAX_CORS_ORIGINS + 1]; /* NULL-terminated */
    bool cache_lru;                 /* --cache-policy lru (else reject) */
    enum attn_kernel kernel;        /* --kernel: the fused kernel asked for */
    char replica_id[64];            /* prefix of session ids, or "" */
    char state_dir[1024];           /* journal and snapshots here, or "" */
    unsigned fsync_mode;            /* --fsync: enum jnl_fsync */
    size_t snapshot_min_bytes;      /* no snapshot before the journal is this big */
    enum srv_log_format log_format; /* json | text */
    char log_file[1024];            /* append logs here (SIGHUP reopens), "" = stdout */
    double drain_timeout_s;         /* SIGTERM: longest wait for in-flight requests */
    unsigned conn_timeout_s;        /* idle connection timeout */
    double read_timeout_s;          /* headers past idleness; body grace, 0 = none */
    size_t min_body_rate;           /* body bytes a second on average, 0 = any */
    unsigned max_connections;       /* open connections at most */
    unsigned max_connections_per_ip;/* open connections per client address */
    size_t socket_rcvbuf;           /* SO_RCVBUF per connection, 0 = the kernel's */
    char loopback_congestion[16];   /* TCP_CONGESTION for loopback peers, "" = the system's */
    char tls_cert[1024];            /* PEM certificate chain, "" = plain HTTP */
    char tls_key[1024];             /* PEM private key (with tls_cert) */
    char api_key_file[1024];        /* name:key lines, "" for none */
    double rate_limit;              /* requests per second per client, 0 = off */
    unsigned rate_burst;            /* bucket size, 0 = one second's worth */
    unsigned max_inflight_per_key;  /* requests in flight per client, 0 = off */
    double request_timeout_s;       /* deadline on the pool, 0 = none */
    struct api_warm_shape warm_up[API_WARM_MAX];  /* --warm-up: run before listening */
    size_t n_warm_up;
    /* ATTND_* variables that are no setting's twin but within a typo of
     * one (ATTND_MAX_BODY_BYTE, attnd_port): main warns of each, since an
     * unknown variable is otherwise ignored without a word */
    struct srv_env_typo {
        char name[64];              /* as in the environment */
        char twin[64];              /* the setting it is nearest to */
    } env_typos[SRV_MAX_ENV_TYPOS];
    size_t n_env_typos;
};

/* What srv_config_parse asks of the caller. */
enum srv_config_result {
    SRV_CONFIG_RUN = 0,             /* start the daemon */
    SRV_CONFIG_EXIT_OK,             /* --help / --version printed: exit 0 */
    SRV_CONFIG_EXIT_USAGE,          /* error printed to stderr: exit 2 */
};

/* Defaults, then ATTND_* from the environment, then argv. Messages go to
 * out (help, version) and err (errors). */
enum srv_config_result srv_config_parse(struct srv_config *cfg, int argc,
                                        char **argv, FILE *out, FILE *err);

#endif
