/*
 * server/log.c — formats log lines (JSON or text) into a bounded buffer and
 * writes them whole under a mutex, so lines from the loop and the worker
 * threads never interleave. Request lines are batched: appended to a 64 KiB
 * buffer that is written when full, by a flusher thread at most
 * FLUSH_DELAY_MS after its first line, and before every event line (so the
 * order holds and a warn/error, which often precedes an _exit, takes every
 * request line before it along), on SIGHUP reopen and at close. One write
 * per request line under load cost more than the line's formatting. Strings are JSON-escaped (control
 * bytes as \u00XX, bytes that are not well-formed UTF-8 as \ufffd); nothing
 * is sprintf'd without a bound. A string that does not fit is cut at a whole
 * character, keeping LINE_RESERVE bytes for the rest of the line, so even a
 * cut line is one valid JSON object. Hand-written rather than jansson's
 * json_dumps: a line is built in a fixed buffer with no allocation, and
 * jansson cannot cut a string to fit.
 */
#include "server/log.h"

#include "api/codec/utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <time.h>

#define BATCH_CAP ((size_t)64 << 10)
#define FLUSH_DELAY_MS 50

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER;   /* batch got its first line, or stop */
static char batch[BATCH_CAP];       /* request lines not yet written (log_mu) */
static size_t batch_len;
static pthread_t flusher;
static bool flusher_on, flusher_stop;
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

/* Decimal digits of v; hand-written because snprintf's format parsing was
 * a visible part of a small request's cost. */
static void put_u64(struct line *l, uint64_t v)
{
    char d[20];
    size_t i = sizeof d;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(l, d + i, sizeof d - i);
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
        const unsigned char *q = p;
        while (*q >= 0x20 && *q < 0x7f && *q != '"' && *q != '\\')
            q++;                            /* a run of plain ASCII: copied at once */
        if (q != p) {
            size_t run = (size_t)(q - p), room = str_room(l);
            put(l, (const char *)p, run < room ? run : room);
            if (run > room)
                return;
            p = q;
            continue;
        }
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

/* The date and time to the second are formatted once a second per thread. */
static void put_ts(struct line *l)
{
    static _Thread_local time_t sec = -1;
    static _Thread_local char b[40];
    static _Thread_local size_t n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
        sec = ts.tv_sec;
    }
    put(l, b, n);
    long ms = ts.tv_nsec / 1000000;
    char f[5] = {'.', (char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                 (char)('0' + ms % 10), 'Z'};
    put(l, f, sizeof f);
}

/* Caller holds log_mu. */
static void write_locked(const char *s, size_t n)
{
    FILE *fp = log_fp ? log_fp : stdout;
    fwrite(s, 1, n, fp);
    fflush(fp);
}

/* Caller holds log_mu. */
static void flush_locked(void)
{
    if (batch_len) {
        write_locked(batch, batch_len);
        batch_len = 0;
    }
}

/* Writes a batch FLUSH_DELAY_MS after its first line (or at stop). */
static void *flusher_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&log_mu);
    while (!flusher_stop) {
        if (!batch_len) {
            pthread_cond_wait(&log_cv, &log_mu);
            continue;
        }
        struct timespec due;
        clock_gettime(CLOCK_REALTIME, &due);
        due.tv_nsec += FLUSH_DELAY_MS * 1000000L;
        if (due.tv_nsec >= 1000000000L) {
            due.tv_sec++;
            due.tv_nsec -= 1000000000L;
        }
        while (!flusher_stop && batch_len &&
               pthread_cond_timedwait(&log_cv, &log_mu, &due) == 0) {
        }
        flush_locked();
    }
    pthread_mutex_unlock(&log_mu);
    return NULL;
}

/* Caller holds log_mu. Starts the flusher with all signals blocked (they
 * belong to the loop thread); false if it cannot run. */
static bool flusher_start_locked(void)
{
    if (flusher_on)
        return true;
    if (flusher_stop)
        return false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    flusher_on = pthread_create(&flusher, NULL, flusher_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return flusher_on;
}

/* An event line: written at once, after the batched lines before it. */
static void emit(struct line *l)
{
    l->buf[l->len++] = '\n';
    pthread_mutex_lock(&log_mu);
    flush_locked();
    write_locked(l->buf, l->len);
    pthread_mutex_unlock(&log_mu);
}

/* A request line: into the batch (written at once without a flusher). */
static void emit_batched(struct line *l)
{
    l->buf[l->len++] = '\n';
    pthread_mutex_lock(&log_mu);
    if (!flusher_start_locked()) {
        flush_locked();
        write_locked(l->buf, l->len);
    } else {
        if (l->len > BATCH_CAP - batch_len)
            flush_locked();
        bool first = batch_len == 0;
        memcpy(batch + batch_len, l->buf, l->len);   /* a line (2 KiB) fits an empty batch */
        batch_len += l->len;
        if (first)
            pthread_cond_signal(&log_cv);
    }
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
    flush_locked();                     /* lines before the rotation: old file */
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
    bool join = flusher_on;
    flusher_stop = true;                /* later request lines are written at once */
    flusher_on = false;
    pthread_cond_signal(&log_cv);
    pthread_mutex_unlock(&log_mu);
    if (join)
        pthread_join(flusher, NULL);
    pthread_mutex_lock(&log_mu);
    flush_locked();
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
        put_esc(l, msg);    /* a control byte from the environment stays on its line */
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

/* k is a literal key (no escaping needed). */
static void field_u64(struct line *l, const char *k, uint64_t v)
{
    if (log_fmt == SRV_LOG_JSON) {
        puts_(l, ",\"");
        puts_(l, k);
        puts_(l, "\":");
    } else {
        puts_(l, " ");
        puts_(l, k);
        puts_(l, "=");
    }
    put_u64(l, v);
}

static void end(struct line *l)
{
    if (log_fmt == SRV_LOG_JSON)
        puts_(l, "}");
    emit(l);
}

/* The method as logged: the client's token, which libmicrohttpd takes at
 * any length, cut to METHOD_MAX bytes at a whole character. Uncut, a
 * method of a few kilobytes filled the line and left its route, code and
 * request id out. The other strings of a request line are bounded already
 * (a route template, an id of at most 64 characters, a key's name). */
#define METHOD_MAX 64

static const char *method_shown(const char *method, char buf[METHOD_MAX + 1])
{
    if (!method)
        return "-";
    size_t n = strnlen(method, METHOD_MAX + 1);
    if (n <= METHOD_MAX)
        return method;
    n = METHOD_MAX;
    while (n > 0 && ((unsigned char)method[n] & 0xc0) == 0x80)
        n--;                            /* not inside a UTF-8 sequence */
    memcpy(buf, method, n);
    buf[n] = '\0';
    return buf;
}

void srv_log_request(const char *method, const char *route, int status,
                     uint64_t bytes_in, uint64_t bytes_out, uint64_t us, const char *key,
                     const char *id, const char *code)
{
    struct line l;
    char method_buf[METHOD_MAX + 1];
    method = method_shown(method, method_buf);
    if (log_fmt == SRV_LOG_TEXT) {
        l.len = 0;
        put_ts(&l);
        puts_(&l, " ");
        put_esc(&l, method);
        puts_(&l, " ");
        put_esc(&l, route ? route : "-");
        puts_(&l, " ");
        put_u64(&l, (uint64_t)(status < 0 ? 0 : status));
        puts_(&l, " in=");
        put_u64(&l, bytes_in);
        puts_(&l, " out=");
        put_u64(&l, bytes_out);
        puts_(&l, " ");
        put_u64(&l, us);
        puts_(&l, "us");
        if (key) {
            puts_(&l, " key=");
            put_esc(&l, key);
        }
        if (code) {
            puts_(&l, " code=");
            put_esc(&l, code);
        }
        if (id) {
            puts_(&l, " id=");
            put_esc(&l, id);
        }
        emit_batched(&l);
        return;
    }
    /* begin() and field_str() with their constant parts written at once
     * (the same bytes): this line is written for every request. */
    l.len = 0;
    puts_(&l, "{\"ts\":\"");
    put_ts(&l);
    puts_(&l, "\",\"level\":\"info\",\"msg\":\"request\",\"method\":\"");
    put_esc(&l, method);
    puts_(&l, "\",\"route\":\"");
    put_esc(&l, route ? route : "-");
    puts_(&l, "\"");
    field_u64(&l, "status", (uint64_t)(status < 0 ? 0 : status));
    field_u64(&l, "bytes_in", bytes_in);
    field_u64(&l, "bytes_out", bytes_out);
    field_u64(&l, "us", us);
    if (key) {
        puts_(&l, ",\"key\":\"");
        put_esc(&l, key);
        puts_(&l, "\"");
    }
    if (code) {
        puts_(&l, ",\"code\":\"");
        put_esc(&l, code);
        puts_(&l, "\"");
    }
    if (id) {
        puts_(&l, ",\"id\":\"");
        put_esc(&l, id);
        puts_(&l, "\"");
    }
    puts_(&l, "}");
    emit_batched(&l);
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

const char *srv_mode_others(unsigned mode)
{
    static const char *const what[8] = {
        "use", "run", "change", "change and run", "read", "read and run", "read and change",
        "read, change and run",
    };
    return what[mode & 07];
}

int srv_whyf(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}
