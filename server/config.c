/*
 * server/config.c — flags and ATTND_* environment twins -> struct srv_config.
 *
 * One table (opts[]) names every setting once: its flag, its environment
 * twin (derived: --max-body-bytes <-> ATTND_MAX_BODY_BYTES), its kind, range,
 * default and help line. Defaults are applied by parsing the table's default
 * text through the same setter as user input, so --help always shows what is
 * in force. Hand-written rather than getopt_long because getopt cannot carry
 * the environment twins, the ranges or the generated help.
 */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/api.h"
#include "server/assets.h"
#include "server/resources.h"
#include "core/journal.h"

enum opt_kind {
    OPT_STR,        /* char array at off, size len */
    OPT_SECRET,     /* the same, never empty when given (a key's or a
                       certificate's file): unset means none */
    OPT_DIR,        /* the same, never empty when given (--state-dir: an
                       empty value would quietly keep nothing) */
    OPT_FILE,       /* the same, never empty when given (--port-file,
                       --log-file: an unset shell variable would write no
                       port file, and a script would wait for it) */
    OPT_ID,         /* the same, [A-Za-z0-9_-] only (--replica-id) */
    OPT_KEY,        /* an OPT_SECRET that is an API key: printable ASCII
                       without spaces (no token in a header could match
                       another) */
    OPT_UINT,       /* unsigned at off, [min, max] */
    OPT_SIZE,       /* size_t at off, [min, max], k/m/g suffix (x1024) */
    OPT_SECONDS,    /* double at off, [min, max], finite */
    OPT_NUMBER,     /* the same, not a time */
    OPT_LOGFMT,     /* json | text */
    OPT_POLICY,     /* reject | lru */
    OPT_FSYNC,      /* always | everysec | no */
    OPT_CORS,       /* comma-separated origins */
    OPT_KERNEL,     /* auto | avx512 | avx2 | none */
    OPT_WARMUP,     /* NxLxD or HxNxLxD, each with an optional :dtype, comma-separated */
};

struct opt {
    const char *name;               /* flag without "--" */
    enum opt_kind kind;
    size_t off;                     /* offsetof(struct srv_config, field) */
    size_t len;                     /* OPT_STR: sizeof the array */
    double min, max;                /* numeric range, inclusive */
    const char *def;                /* default as text (NULL: computed) */
    const char *help;
};

#define F(field) offsetof(struct srv_config, field), sizeof(((struct srv_config *)0)->field)
#define N(field) offsetof(struct srv_config, field), 0

static const struct opt opts[] = {
    {"host", OPT_STR, F(host), 0, 0, "127.0.0.1", "address to listen on (0.0.0.0 for all)"},
    {"port", OPT_UINT, N(port), 0, 65535, "8080", "TCP port; 0 picks a free one"},
    {"port-file", OPT_FILE, F(port_file), 0, 0, "", "write the bound port to this file"},
    {"workers", OPT_UINT, N(workers), 1, 256, NULL,
     "compute requests one client runs at once, and one more small one; the pool has twice "
     "as many threads and one more. Usable CPUs: the fewest of those online, in the affinity "
     "mask and in the cgroup's CPU quota"},
    {"http-threads", OPT_UINT, N(http_threads), 1, 64, NULL,
     "transport threads"},
    {"max-body-bytes", OPT_SIZE, N(max_body_bytes), 1, 4294967296.0, "64m",
     "largest request body (k/m/g suffixes)"},
    {"max-elements", OPT_SIZE, N(max_elements), 1, 1e15, "4194304",
     "numbers in one request's inputs, and in its response"},
    {"max-sessions", OPT_SIZE, N(max_sessions), 1, 1e9, "1024", "live sessions at most"},
    {"max-cache-bytes", OPT_SIZE, N(max_cache_bytes), 1, 1e15, "1g",
     "KV cache bytes over all sessions"},
    {"session-ttl", OPT_SECONDS, N(session_ttl_s), 1, 31536000, "3600",
     "default session time to live, seconds"},
    {"max-tokens", OPT_SIZE, N(max_tokens), 1, 1e12, "32768",
     "default and largest max_tokens of a session"},
    {"api-key", OPT_KEY, F(api_key), 0, 0, "",
     "require 'Authorization: Bearer KEY' (all but the open routes below)"},
    {"cors-origins", OPT_CORS, N(cors_buf), 0, 0, "",
     "comma-separated browser origins allowed to call the API, each scheme://host[:port] "
     "exactly as the browser sends it in Origin (no path, no trailing slash), or '*' for any"},
    {"cache-policy", OPT_POLICY, N(cache_lru), 0, 0, "reject",
     "when the cache is full: reject (503) | lru (evict idle sessions)"},
    {"kernel", OPT_KERNEL, N(kernel), 0, 0, "auto",
     "fused float32 kernel: auto | avx512 | avx2 | none (narrower ones test a CPU's fallbacks)"},
    {"replica-id", OPT_ID, F(replica_id), 0, 0, "",
     "prefix of session ids on this replica (letters, digits, '-' and '_'; ids are "
     "'PREFIX.' + random)"},
    {"state-dir", OPT_DIR, F(state_dir), 0, 0, "",
     "journal every session change here; restore sessions on start"},
    {"fsync", OPT_FSYNC, N(fsync_mode), 0, 0, "everysec",
     "when the journal reaches the disk: always (before each answer) | everysec | no"},
    {"snapshot-min-bytes", OPT_SIZE, N(snapshot_min_bytes), 0, 1e15, "64m",
     "rewrite the journal into a snapshot once past this and the last snapshot"},
    {"log-format", OPT_LOGFMT, N(log_format), 0, 0, "json", "json | text"},
    {"log-file", OPT_FILE, F(log_file), 0, 0, "", "append logs here (SIGHUP reopens)"},
    {"drain-timeout", OPT_SECONDS, N(drain_timeout_s), 0, 3600, "30",
     "seconds to let in-flight requests finish on SIGTERM; then those still computing are "
     "answered 503 draining (nothing of them applied), one whose change is journaled "
     "already answers for itself, and attnd exits 1"},
    {"conn-timeout", OPT_UINT, N(conn_timeout_s), 1, 86400, "30", "idle connection timeout, seconds"},
    {"read-timeout", OPT_SECONDS, N(read_timeout_s), 0, 86400, "30",
     "seconds a request's headers may take past --conn-timeout of idleness, and before its "
     "body must average --min-body-rate (slow clients are closed); 0: no such deadline"},
    {"min-body-rate", OPT_SIZE, N(min_body_rate), 0, 1e12, "1k",
     "bytes a second a request body must average once --read-timeout has passed; 0: any"},
    {"max-connections", OPT_UINT, N(max_connections), 1, 100000, "1000", "open connections at most"},
    {"max-connections-per-ip", OPT_UINT, N(max_connections_per_ip), 1, 100000, "256",
     "open connections per client address (behind a proxy all have its address: set it to "
     "--max-connections there)"},
    {"socket-rcvbuf", OPT_SIZE, N(socket_rcvbuf), 0, 1073741824.0, "2m",
     "receive buffer asked for each connection (SO_RCVBUF; unused above net.core.rmem_max); "
     "0: the kernel's autotuning"},
    {"loopback-congestion", OPT_STR, F(loopback_congestion), 0, 0, "auto",
     "TCP congestion control for clients on 127.0.0.0/8 and ::1: auto (cubic, else reno; "
     "neither paces) | a name | '' (the system's)"},
    {"tls-cert", OPT_SECRET, F(tls_cert), 0, 0, "",
     "serve HTTPS with this PEM certificate chain (SIGHUP reloads)"},
    {"tls-key", OPT_SECRET, F(tls_key), 0, 0, "", "PEM private key of --tls-cert (mode 600 or 640)"},
    {"api-key-file", OPT_SECRET, F(api_key_file), 0, 0, "",
     "accepted keys, one 'name:key' a line (SIGHUP reloads)"},
    {"rate-limit", OPT_NUMBER, N(rate_limit), 0, 1e6, "0",
     "requests per second per key (or address: behind a proxy, one for all); 0: off"},
    {"rate-burst", OPT_UINT, N(rate_burst), 0, 1000000, "0",
     "requests at once past --rate-limit; 0: one second's worth"},
    {"max-inflight-per-key", OPT_UINT, N(max_inflight_per_key), 0, 1000000, "0",
     "requests in flight per key (or address); 0: off"},
    {"request-timeout", OPT_SECONDS, N(request_timeout_s), 0, 86400, "60",
     "seconds a request may take on the pool (504 deadline_exceeded); 0: none"},
    {"warm-up", OPT_WARMUP, N(warm_up), 0, 0, "",
     "before listening, run an output-only request of each shape (NxLxD or HxNxLxD, then "
     ":float64, :float16 or :bfloat16 if not float32; comma-separated, at most 4), base64 and "
     "OIP v2 binary, on every compute thread, so the first ones find their buffers ready"},
};

#undef F
#undef N

#define N_OPTS (sizeof opts / sizeof opts[0])

/* Parse a whole-string unsigned decimal with an optional k/m/g suffix. */
static bool parse_u64(const char *s, bool suffix, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return false;                   /* rejects "", "-1", " 1", "+1" */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return false;
    uint64_t mul = 1;
    if (suffix && *end) {
        switch (tolower((unsigned char)*end)) {
        case 'k': mul = 1ull << 10; break;
        case 'm': mul = 1ull << 20; break;
        case 'g': mul = 1ull << 30; break;
        default: return false;
        }
        end++;
    }
    if (*end != '\0')
        return false;
    uint64_t r;
    if (__builtin_mul_overflow((uint64_t)v, mul, &r))
        return false;
    *out = r;
    return true;
}

/* A whole-string decimal number (strtod would also take hexadecimal:
 * "--drain-timeout 0x10" was 16 seconds). */
static bool parse_double(const char *s, double *out)
{
    if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.') ||
        s[strspn(s, "0123456789.eE+-")] != '\0')
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool set_str(char *dst, size_t cap, const char *v)
{
    size_t n = strlen(v);
    if (n >= cap)
        return false;
    memcpy(dst, v, n + 1);
    return true;
}

/* A text setting into its array of cap bytes; one too long says so in
 * why (without the value: it may be a secret). */
static bool set_text(char *dst, size_t cap, const char *v, char *why, size_t why_cap)
{
    if (set_str(dst, cap, v))
        return true;
    snprintf(why, why_cap, "%zu characters, at most %zu", strlen(v), cap - 1);
    return false;
}

/* An API key as --api-key-file takes one (server/keys.c): the token of
 * 'Authorization: Bearer KEY' is printable ASCII without spaces, and the
 * whitespace around it is not part of it, so a key with a space or a line
 * break in it (a Secret made from a file that ends in a newline) would
 * start attnd with every request refused 401. */
static bool set_key(char *dst, size_t cap, const char *v, char *why, size_t why_cap)
{
    for (const char *p = v; *p; p++)
        if (!isgraph((unsigned char)*p)) {
            snprintf(why, why_cap, "a key is printable ASCII without spaces; this one holds "
                     "%s at character %zu", isspace((unsigned char)*p) ? "whitespace (a space, "
                     "tab or line break)" : "another byte", (size_t)(p - v) + 1);
            return false;
        }
    return set_text(dst, cap, v, why, why_cap);
}

/* Whether o is an origin as a browser sends it in Origin (RFC 6454
 * serialisation: lower-case scheme "://" host, ":" port only when not the
 * scheme's default) or "*"; else false with the reason in why. An entry
 * with a path or a trailing slash (copied from the address bar) would
 * never equal an Origin header, and the page would fail with a CORS error
 * while attnd ran quietly. */
static bool origin_ok(const char *o, char *why, size_t cap)
{
    if (strcmp(o, "*") == 0)
        return true;
    const char *sep = strstr(o, "://");
    const char *p = o;
    while (p < (sep ? sep : o) && (islower((unsigned char)*p) || isdigit((unsigned char)*p) ||
                                   *p == '+' || *p == '-' || *p == '.'))
        p++;
    if (!sep || sep == o || p != sep || !islower((unsigned char)o[0])) {
        snprintf(why, cap, "'%s' is not an origin: expected scheme://host[:port] "
                 "(lower case, e.g. https://app.example.com) or '*'", o);
        return false;
    }
    const char *host = sep + 3, *h = host;
    if (*h == '[') {                    /* an IPv6 literal */
        while (*h && *h != ']' && (isxdigit((unsigned char)*h) || *h == ':' || *h == '.' ||
                                   *h == '['))
            h++;
        if (*h == ']')
            h++;
    } else {
        while (islower((unsigned char)*h) || isdigit((unsigned char)*h) || *h == '-' ||
               *h == '.' || *h == '_')
            h++;
    }
    const char *port = NULL;
    if (*h == ':') {
        port = h + 1;
        h = port;
        while (isdigit((unsigned char)*h))
            h++;
    }
    bool port_bad = port && (h == port || *port == '0' || h - port > 5 ||
                             strtoul(port, NULL, 10) > 65535);
    if (h == host || *h != '\0' || port_bad) {
        const char *slash = *h == '/' ? "no path or trailing slash: " : "";
        snprintf(why, cap, "'%s' is not an origin: %sexpected scheme://host[:port] "
                 "(lower case), exactly as the browser sends it in Origin", o, slash);
        return false;
    }
    if (port && ((strncmp(o, "http://", 7) == 0 && strcmp(port, "80") == 0) ||
                 (strncmp(o, "https://", 8) == 0 && strcmp(port, "443") == 0))) {
        snprintf(why, cap, "'%s': browsers leave the scheme's default port out of Origin; "
                 "write it without :%s", o, port);
        return false;
    }
    return true;
}

/* Split "a, b,c" into cfg->cors_origins (pointers into cfg->cors_buf),
 * each an origin or "*" (origin_ok). */
static bool set_cors(struct srv_config *cfg, const char *v, char *why, size_t cap)
{
    if (!set_str(cfg->cors_buf, sizeof cfg->cors_buf, v))
        return false;
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(cfg->cors_buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t')
            tok++;
        char *e = tok + strlen(tok);
        while (e > tok && (e[-1] == ' ' || e[-1] == '\t'))
            *--e = '\0';
        if (*tok == '\0')
            continue;
        if (n == SRV_MAX_CORS_ORIGINS)
            return false;
        if (!origin_ok(tok, why, cap))
            return false;
        cfg->cors_origins[n++] = tok;
    }
    cfg->cors_origins[n] = NULL;
    return true;
}

/* A --replica-id: letters, digits, '-' and '_' ("" for none). The session
 * store puts it and a '.' before each id, and a proxy routes on that
 * prefix (docker/nginx.conf's map: "^/v1/sessions/ID\."): a '.', a space
 * or a '/' in it would be dropped from the ids or make one replica's
 * prefix begin another's. */
static bool set_id(char *dst, size_t cap, const char *v)
{
    if (strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") !=
        strlen(v))
        return false;
    return set_str(dst, cap, v);
}

/* Apply one value; false if it does not parse or is out of range (why:
 * the reason, when the kind's hint does not say it all; else left ""). */
static bool set_opt(struct srv_config *cfg, const struct opt *o, const char *v, char *why,
                    size_t why_cap)
{
    char *base = (char *)cfg;
    uint64_t u;
    double d;
    switch (o->kind) {
    case OPT_STR:
        return set_text(base + o->off, o->len, v, why, why_cap);
    case OPT_SECRET:
    case OPT_DIR:
    case OPT_FILE:
        return v[0] != '\0' && set_text(base + o->off, o->len, v, why, why_cap);
    case OPT_KEY:
        return v[0] != '\0' && set_key(base + o->off, o->len, v, why, why_cap);
    case OPT_ID:
        return set_id(base + o->off, o->len, v);
    case OPT_UINT:
        if (!parse_u64(v, false, &u) || (double)u < o->min || (double)u > o->max)
            return false;
        *(unsigned *)(void *)(base + o->off) = (unsigned)u;
        return true;
    case OPT_SIZE:
        if (!parse_u64(v, true, &u) || (double)u < o->min || (double)u > o->max ||
            u > SIZE_MAX)
            return false;
        *(size_t *)(void *)(base + o->off) = (size_t)u;
        return true;
    case OPT_SECONDS:
    case OPT_NUMBER:
        if (!parse_double(v, &d) || d < o->min || d > o->max)
            return false;
        *(double *)(void *)(base + o->off) = d;
        return true;
    case OPT_LOGFMT:
        if (strcmp(v, "json") == 0)
            cfg->log_format = SRV_LOG_JSON;
        else if (strcmp(v, "text") == 0)
            cfg->log_format = SRV_LOG_TEXT;
        else
            return false;
        return true;
    case OPT_POLICY:
        if (strcmp(v, "reject") == 0)
            cfg->cache_lru = false;
        else if (strcmp(v, "lru") == 0)
            cfg->cache_lru = true;
        else
            return false;
        return true;
    case OPT_FSYNC:
        if (strcmp(v, "no") == 0)
            cfg->fsync_mode = JNL_FSYNC_NO;
        else if (strcmp(v, "everysec") == 0)
            cfg->fsync_mode = JNL_FSYNC_EVERYSEC;
        else if (strcmp(v, "always") == 0)
            cfg->fsync_mode = JNL_FSYNC_ALWAYS;
        else
            return false;
        return true;
    case OPT_CORS:
        return set_cors(cfg, v, why, why_cap);
    case OPT_KERNEL:
        return attn_kernel_parse(v, &cfg->kernel);
    case OPT_WARMUP:
        return api_warm_parse(v, cfg->warm_up, &cfg->n_warm_up);
    }
    return false;
}

/* "max-body-bytes" -> "ATTND_MAX_BODY_BYTES" */
static void env_name(const struct opt *o, char *buf, size_t cap)
{
    size_t n = strlen(o->name);
    if (cap < n + 7)
        return;
    memcpy(buf, "ATTND_", 6);
    for (size_t i = 0; i < n; i++)
        buf[6 + i] = o->name[i] == '-' ? '_' : (char)toupper((unsigned char)o->name[i]);
    buf[6 + n] = '\0';
}

static const char *kind_hint(const struct opt *o)
{
    switch (o->kind) {
    case OPT_UINT: return "an integer";
    case OPT_SIZE: return "an integer (k/m/g suffix allowed)";
    case OPT_SECONDS: return "a number of seconds";
    case OPT_NUMBER: return "a number";
    case OPT_LOGFMT: return "json or text";
    case OPT_POLICY: return "reject or lru";
    case OPT_FSYNC: return "always, everysec or no";
    case OPT_CORS: return "at most 32 origins, 4095 characters";
    case OPT_KERNEL: return "auto, avx512, avx2 or none";
    case OPT_WARMUP:
        return "shapes NxLxD or HxNxLxD (each 1 to 1048576), each optionally :float64, :float16, "
               ":bfloat16 or :float32, comma-separated, at most 4";
    case OPT_SECRET:
    case OPT_KEY:
        return "a non-empty value (leave the flag and its ATTND_* twin unset for none)";
    case OPT_DIR:
        return "a directory (leave the flag and its ATTND_* twin unset for none)";
    case OPT_FILE:
        return "a file name (leave the flag and its ATTND_* twin unset for the default)";
    case OPT_ID:
        return "at most 63 letters, digits, '-' or '_'";
    case OPT_STR: break;
    }
    return "shorter text";
}

/* One line on what was wrong (and a pointer to --help). A secret's value
 * is never echoed; why, when set, says more than the kind's hint. */
static void bad_value(FILE *err, const struct opt *o, const char *where, const char *v,
                      const char *why)
{
    if (why && why[0])
        fprintf(err, "attnd: invalid %s: %s\n", where, why);
    else if (o->kind == OPT_SECRET || o->kind == OPT_KEY)
        fprintf(err, "attnd: invalid %s%s: expected %s\n", where, v[0] ? "" : " (empty)",
                kind_hint(o));
    else if (o->kind == OPT_UINT || o->kind == OPT_SIZE || o->kind == OPT_SECONDS ||
        o->kind == OPT_NUMBER)
        fprintf(err, "attnd: invalid %s '%s': expected %s in [%.16g, %.16g]\n",
                where, v, kind_hint(o), o->min, o->max);
    else
        fprintf(err, "attnd: invalid %s '%s': expected %s\n", where, v, kind_hint(o));
    fprintf(err, "Try 'attnd --help'.\n");
}

/* --help's word for a default: the text, "usable CPUs" when computed,
 * and for an empty one what it means ("none", or stdout for the log). */
static const char *shown_default(const struct opt *o)
{
    if (!o->def)
        return "usable CPUs";
    if (o->def[0])
        return o->def;
    return strcmp(o->name, "log-file") == 0 ? "stdout" : "none";
}

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: attnd [--flag VALUE | --flag=VALUE]...\n"
            "attnd %s: scaled dot-product attention over HTTP/JSON.\n\n"
            "Every flag has an environment twin (--max-body-bytes <-> ATTND_MAX_BODY_BYTES);\n"
            "a flag wins over its twin. An ATTND_* variable a typo away from a twin\n"
            "is warned of at start; other ATTND_* variables are left alone.\n\n",
            ATTND_VERSION);
    char env[64];
    for (size_t i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        env_name(o, env, sizeof env);
        fprintf(out, "  --%-24s %s\n  %-26s [%s; default: %s]\n", o->name, o->help, "",
                env, shown_default(o));
    }
    fprintf(out, "  --%-24s %s\n  --%-24s %s\n", "help", "print this help and exit",
             "version", "print the version and exit");
    /* the probes the api answers, then the static files the transport
     * serves (never behind the key) */
    fprintf(out, "\nOpen routes (answered without the API key):");
    for (const char *const *p = api_open_paths; *p; p++)
        fprintf(out, " %s", *p);
    for (size_t i = 0; i < sizeof srv_asset_aliases / sizeof srv_asset_aliases[0]; i++)
        fprintf(out, " %s", srv_asset_aliases[i].path);
    for (const struct srv_asset *a = srv_assets; a->path; a++)
        fprintf(out, " %s", a->path);
    fprintf(out, "\n");
}

static const struct opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(opts[i].name) == len && memcmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

static bool is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* given[i]: opts[i] is on the command line, so its ATTND_* twin is not
 * read at all (a flag wins over its twin, even one whose value is bad).
 * Scans as srv_config_parse does; what it cannot read it leaves to it.
 * True when --help, -h or --version is there, not as a flag's value: the
 * twins are not read then either, so that a bad one does not hide the
 * help its message points to. */
static bool flags_given(int argc, char **argv, bool given[N_OPTS])
{
    bool asks = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a) || strcmp(a, "--version") == 0)
            asks = true;
        if (strncmp(a, "--", 2) != 0)
            continue;
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        const struct opt *o = find_opt(a + 2, len);
        if (!o)
            continue;
        given[o - opts] = true;
        if (!eq)
            i++;                            /* its value */
    }
    return asks;
}

/* The optimal-string-alignment distance of a and b (edits, adjacent
 * swaps counting one), case folded, given up past limit. Hand-written:
 * none of attnd's libraries offers one, and it is a dozen lines. */
static size_t typo_distance(const char *a, const char *b, size_t limit)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63 || (na > nb ? na - nb : nb - na) > limit)
        return limit + 1;
    size_t d[64][64];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int ca = toupper((unsigned char)a[i - 1]), cb = toupper((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == toupper((unsigned char)b[j - 2]) &&
                cb == toupper((unsigned char)a[i - 2]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

/* Each ATTND_* variable (any case) that is not a setting's twin but is
 * one edit from one (two for names of 8 or more letters past ATTND_), or
 * the same in another case, goes to cfg->env_typos. Others, such as the
 * shipped nginx's ATTND_POOL or a test harness's, are left alone: they
 * belong to other programs that share the environment. */
static void find_env_typos(struct srv_config *cfg)
{
    extern char **environ;
    char env[64];
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len <= 6 || len > 63 || strncasecmp(*e, "ATTND_", 6) != 0)
            continue;
        char name[64];
        memcpy(name, *e, len);
        name[len] = '\0';
        size_t limit = len - 6 >= 8 ? 2 : 1, best = limit + 1;
        const char *twin = NULL;
        for (size_t i = 0; i < N_OPTS; i++) {
            env_name(&opts[i], env, sizeof env);
            if (strcmp(env, name) == 0) {
                twin = NULL;
                break;
            }
            size_t d = strcasecmp(env, name) == 0 ? 0 : typo_distance(env, name, limit);
            if (d < best) {
                best = d;
                twin = opts[i].name;
            }
        }
        if (!twin || cfg->n_env_typos == SRV_MAX_ENV_TYPOS)
            continue;
        struct srv_env_typo *t = &cfg->env_typos[cfg->n_env_typos++];
        memcpy(t->name, name, len + 1);
        for (size_t i = 0; i < N_OPTS; i++)
            if (opts[i].name == twin)
                env_name(&opts[i], t->twin, sizeof t->twin);
    }
}

/* Defaults, then the twins of the flags not given (none when read_env is
 * false). */
static bool apply_defaults_and_env(struct srv_config *cfg, const bool given[N_OPTS],
                                   bool read_env, FILE *err)
{
    memset(cfg, 0, sizeof *cfg);
    srv_resources_read(&cfg->res);
    cfg->workers = cfg->res.cpus;
    cfg->http_threads = cfg->workers < 64 ? cfg->workers : 64;  /* --http-threads' range */
    char env[64], why[256];
    for (size_t i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        why[0] = '\0';
        /* a secret's default is none: the zeroed field */
        bool none = (o->kind == OPT_SECRET || o->kind == OPT_KEY || o->kind == OPT_DIR ||
                     o->kind == OPT_FILE) &&
                    o->def && !o->def[0];
        if (o->def && !none && !set_opt(cfg, o, o->def, why, sizeof why)) {
            fprintf(err, "attnd: internal error: bad default for --%s\n", o->name);
            return false;
        }
        env_name(o, env, sizeof env);
        const char *v = given[i] || !read_env ? NULL : getenv(env);
        if (v && !set_opt(cfg, o, v, why, sizeof why)) {
            char where[96];
            snprintf(where, sizeof where, "value of %s", env);
            bad_value(err, o, where, v, why);
            return false;
        }
    }
    if (read_env)
        find_env_typos(cfg);
    return true;
}

enum srv_config_result srv_config_parse(struct srv_config *cfg, int argc,
                                        char **argv, FILE *out, FILE *err)
{
    bool given[N_OPTS] = {false};

    bool asks = flags_given(argc, argv, given);
    if (!apply_defaults_and_env(cfg, given, !asks, err))
        return SRV_CONFIG_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            print_help(out);
            return SRV_CONFIG_EXIT_OK;
        }
        if (strcmp(a, "--version") == 0) {
            fprintf(out, "attnd %s\n", ATTND_VERSION);
            return SRV_CONFIG_EXIT_OK;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(err, "attnd: unexpected argument '%s'\nTry 'attnd --help'.\n", a);
            return SRV_CONFIG_EXIT_USAGE;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = find_opt(name, len);
        if (!o) {
            fprintf(err, "attnd: unknown flag '--%.*s'\nTry 'attnd --help'.\n", (int)len, name);
            return SRV_CONFIG_EXIT_USAGE;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(err, "attnd: --%s needs a value\nTry 'attnd --help'.\n", o->name);
                return SRV_CONFIG_EXIT_USAGE;
            }
            v = argv[++i];
        }
        char why[256] = "";
        if (!set_opt(cfg, o, v, why, sizeof why)) {
            char where[64];
            snprintf(where, sizeof where, "--%s", o->name);
            bad_value(err, o, where, v, why);
            return SRV_CONFIG_EXIT_USAGE;
        }
    }
    if (!cfg->tls_cert[0] != !cfg->tls_key[0]) {
        fprintf(err, "attnd: --tls-cert and --tls-key go together\nTry 'attnd --help'.\n");
        return SRV_CONFIG_EXIT_USAGE;
    }
    return SRV_CONFIG_RUN;
}
