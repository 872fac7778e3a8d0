/*
 * server/log.c — formats log lines (JSON or text) into a bounded buffer and
 * writes each with a single fwrite under a mutex, so lines from the loop and
 * the worker threads never interleave. Strings are JSON-escaped (control
 * bytes as \u00XX, bytes that are not well-formed UTF-8 as \ufffd); nothing
 * is sprintf'd without a bound. A string that does not fit is cut at a whole
 * character, keeping LINE_RESERVE bytes for the rest of the line, so even a
 * cut line is one valid JSON object.
 */
#include "server/log.h"

#include "api/utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static enum srv_log_format log_fmt = SRV_LOG_JSON;
static FILE *log_fp;                /* NULL: stdout */
static char log_path[1024];

/* A line under construction; overflow truncates (and is still one line). */
struct line {
    char buf[2048];
    size_t len;
};

/* Bytes kept free while writing strings: the closing quotes, the numeric
 * fields of a request line (at most ~110 bytes) and the closing brace. */
#define LINE_RESERVE 160

/* Room left for string text, keeping LINE_RESERVE for the rest. */
static size_t str_room(const struct line *l)
{
    size_t cap = sizeof l->buf - 2 - LINE_RESERVE;
    return l->len < cap ? cap - l->len : 0;
}

static void put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof l->buf - 2 - l->len;   /* keep space for "\n\0" */
    if (n > room)
        n = room;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void putf(struct line *l, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* JSON string body (without quotes), cut at a whole character or escape
 * when it would eat into LINE_RESERVE. */
static void put_esc(struct line *l, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        char e[6];
        const char *out = e;
        size_t n = 1, w;
        if (*p == '"' || *p == '\\') {
            e[0] = '\\';
            e[1] = (char)*p;
            w = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            memcpy(e, "\\u00", 4);
            e[4] = hex[*p >> 4];
            e[5] = hex[*p & 15];
            w = 6;
        } else if ((n = api_utf8_seq(p)) == 0) {
            out = "\\ufffd";   /* not UTF-8: the replacement character */
            n = 1;
            w = 6;
        } else {
            out = (const char *)p;
            w = n;
        }
        if (w > str_room(l))
            return;
        put(l, out, w);
        p += n;
    }
}

static void put_ts(struct line *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char b[40];
    size_t n = strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    put(l, b, n);
    putf(l, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void emit(struct line *l)
{
    l->buf[l->len++] = '\n';
    pthread_mutex_lock(&log_mu);
    FILE *fp = log_fp ? log_fp : stdout;
    fwrite(l->buf, 1, l->len, fp);
    fflush(fp);
    pthread_mutex_unlock(&log_mu);
}

int srv_log_open(enum srv_log_format fmt, const char *path)
{
    log_fmt = fmt;
    if (!path || !path[0])
        return 0;
    size_t n = strlen(path);
    if (n >= sizeof log_path)
        return -ENAMETOOLONG;
    memcpy(log_path, path, n + 1);
    FILE *fp = fopen(log_path, "ae");
    if (!fp)
        return -errno;
    log_fp = fp;
    return 0;
}

int srv_log_reopen(void)
{
    if (!log_path[0])
        return 0;
    FILE *fp = fopen(log_path, "ae");
    if (!fp)
        return -errno;
    pthread_mutex_lock(&log_mu);
    FILE *old = log_fp;
    log_fp = fp;
    pthread_mutex_unlock(&log_mu);
    if (old)
        fclose(old);
    return 0;
}

void srv_log_close(void)
{
    pthread_mutex_lock(&log_mu);
    if (log_fp)
        fclose(log_fp);
    log_fp = NULL;
    pthread_mutex_unlock(&log_mu);
}

static void begin(struct line *l, const char *level, const char *msg)
{
    l->len = 0;
    if (log_fmt == SRV_LOG_JSON) {
        puts_(l, "{\"ts\":\"");
        put_ts(l);
        puts_(l, "\",\"level\":\"");
        put_esc(l, level);
        puts_(l, "\",\"msg\":\"");
        put_esc(l, msg);
        puts_(l, "\"");
    } else {
        put_ts(l);
        puts_(l, " ");
        puts_(l, level);
        puts_(l, " ");
        puts_(l, msg);
    }
}

/* A text field; left out whole when not even its key fits any more. */
static void field_str(struct line *l, const char *k, const char *v)
{
    if (str_room(l) < strlen(k) + 6)
        return;
    if (log_fmt == SRV_LOG_JSON) {
        puts_(l, ",\"");
        put_esc(l, k);
        puts_(l, "\":\"");
        put_esc(l, v);
        puts_(l, "\"");
    } else {
        bool quote = strchr(v, ' ') != NULL || v[0] == '\0';
        putf(l, " %s=%s", k, quote ? "\"" : "");
        put_esc(l, v);
        if (quote)
            puts_(l, "\"");
    }
}

static void field_u64(struct line *l, const char *k, uint64_t v)
{
    if (log_fmt == SRV_LOG_JSON)
        putf(l, ",\"%s\":%llu", k, (unsigned long long)v);
    else
        putf(l, " %s=%llu", k, (unsigned long long)v);
}

static void end(struct line *l)
{
    if (log_fmt == SRV_LOG_JSON)
        puts_(l, "}");
    emit(l);
}

void srv_log_request(const char *method, const char *route, int status,
                     uint64_t bytes_in, uint64_t bytes_out, uint64_t us)
{
    struct line l;
    if (log_fmt == SRV_LOG_TEXT) {
        l.len = 0;
        put_ts(&l);
        puts_(&l, " ");
        put_esc(&l, method ? method : "-");
        puts_(&l, " ");
        put_esc(&l, route ? route : "-");
        putf(&l, " %d in=%llu out=%llu %lluus", status, (unsigned long long)bytes_in,
             (unsigned long long)bytes_out, (unsigned long long)us);
        emit(&l);
        return;
    }
    begin(&l, "info", "request");
    field_str(&l, "method", method ? method : "-");
    field_str(&l, "route", route ? route : "-");
    field_u64(&l, "status", (uint64_t)(status < 0 ? 0 : status));
    field_u64(&l, "bytes_in", bytes_in);
    field_u64(&l, "bytes_out", bytes_out);
    field_u64(&l, "us", us);
    end(&l);
}

void srv_log_event(const char *level, const char *msg, const char *const *kv)
{
    struct line l;
    begin(&l, level, msg);
    for (size_t i = 0; kv && kv[i] && kv[i + 1]; i += 2)
        field_str(&l, kv[i], kv[i + 1]);
    end(&l);
}

void srv_log_msgf(const char *level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    srv_log_event(level, msg, NULL);
}
