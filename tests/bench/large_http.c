/*
 * tests/bench/large_http.c — the client side of tests/bench/large_client.py:
 * a lean HTTP/1.1 client in the manner of wrk, so that the time of a large
 * request holds what the server and the loopback cost and as little of the
 * client's own work as possible (Python's http.client allocated a new
 * 1.4 MB bytes object for every answer and parsed it in the interpreter).
 *
 *   large_http PORT FILE...
 *
 * Each FILE is one whole request (request line, headers and body), sent
 * as it is. Commands on standard input, one a line, each answered with one
 * line on standard output:
 *   h I         send FILE I on the kept-alive connection to 127.0.0.1:PORT
 *               and read the response (status line, headers, Content-Length
 *               bytes of body): "MS STATUS BODY_BYTES CPU_MS"
 *   d I PATH    the same, and the response body written to PATH
 *   r P I N     raw: send FILE I on a connection of its own to 127.0.0.1:P
 *               and read exactly N bytes back: "MS CPU_MS"
 *   q           quit (as at the end of the input), closing every connection
 * MS runs from just before the first byte is sent to just after the last
 * one is read (CLOCK_MONOTONIC); CPU_MS is this process's user + system
 * time over the same span. The receive buffer is kept and grows only, so
 * no request after the first faults in pages. A failure prints a line
 * starting "error" and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 8
#define MAX_RAW 4

struct file {
    char *data;
    size_t len;
};

static struct file files[MAX_FILES];
static size_t n_files;
static char *rbuf;                  /* the kept receive buffer */
static size_t rcap;

static void fail(const char *what)
{
    printf("error %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
    fflush(stdout);
    exit(1);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static void load(const char *path, struct file *f)
{
    FILE *fp = fopen(path, "rb");
    long n;
    if (!fp || fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0)
        fail("cannot read a request file");
    f->len = (size_t)n;
    f->data = malloc(f->len ? f->len : 1);
    if (!f->data || fread(f->data, 1, f->len, fp) != f->len)
        fail("cannot read a request file");
    fclose(fp);
}

static int connect_to(int port)
{
    struct sockaddr_in a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        fail("connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The receive buffer holds at least n bytes, what it held kept (its new
 * pages touched at once, outside any timing that follows). */
static void room(size_t n)
{
    if (n <= rcap)
        return;
    size_t cap = rcap ? rcap : (size_t)1 << 20;
    while (cap < n)
        cap *= 2;
    char *p = realloc(rbuf, cap);
    if (!p)
        fail("out of memory");
    memset(p + rcap, 0, cap - rcap);
    rbuf = p;
    rcap = cap;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail("send");
        p += k;
        n -= (size_t)k;
    }
}

/* Read into rbuf at *got until it holds at least want bytes. */
static void recv_until(int fd, size_t *got, size_t want)
{
    room(want);
    while (*got < want) {
        ssize_t k = recv(fd, rbuf + *got, rcap - *got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail("recv (connection closed)");
        *got += (size_t)k;
    }
}

/* The value of header name (case-insensitive) in head[len], or NULL. */
static const char *header(const char *head, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = head; p + nl + 1 < head + len; p++)
        if ((p == head || p[-1] == '\n') && strncasecmp(p, name, nl) == 0 && p[nl] == ':')
            return p + nl + 1;
    return NULL;
}

/* One request on the kept connection; the body is at rbuf + *body_at. */
static void http_once(int fd, const struct file *f, int *status, size_t *body_at,
                      size_t *body_len)
{
    size_t got = 0, end = 0;
    send_all(fd, f->data, f->len);
    room(64 << 10);
    for (;;) {
        ssize_t k = recv(fd, rbuf + got, rcap - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail("recv (no response)");
        got += (size_t)k;
        char *p = memmem(rbuf, got, "\r\n\r\n", 4);
        if (p) {
            end = (size_t)(p - rbuf) + 4;
            break;
        }
        if (got == rcap)
            room(rcap * 2);
    }
    const char *cl = header(rbuf, end, "Content-Length");
    if (end < 12 || strncmp(rbuf, "HTTP/1.", 7) != 0 || !cl)
        fail("a response without a status line or Content-Length");
    *status = (int)strtol(rbuf + 9, NULL, 10);
    *body_len = strtoull(cl, NULL, 10);
    *body_at = end;
    recv_until(fd, &got, end + *body_len);
}

int main(int argc, char **argv)
{
    int raw_port[MAX_RAW] = {0}, raw_fd[MAX_RAW], fd = -1, port;
    char line[4096], path[4000];

    if (argc < 3 || argc - 2 > MAX_FILES) {
        fprintf(stderr, "usage: large_http PORT FILE...\n");
        return 2;
    }
    port = (int)strtol(argv[1], NULL, 10);
    for (int i = 2; i < argc; i++)
        load(argv[i], &files[n_files++]);
    while (fgets(line, sizeof line, stdin)) {
        unsigned i;
        int p;
        size_t n;
        errno = 0;
        if (line[0] == 'h' || line[0] == 'd') {
            int status;
            size_t at, len;
            if ((line[0] == 'h' ? sscanf(line + 1, "%u", &i)
                                : sscanf(line + 1, "%u %3999s", &i, path) - 1) != 1 ||
                i >= n_files)
                fail("bad command");
            if (fd < 0)
                fd = connect_to(port);
            double c0 = cpu_ms(), t0 = now_ms();
            http_once(fd, &files[i], &status, &at, &len);
            double t1 = now_ms(), c1 = cpu_ms();
            if (line[0] == 'd') {
                FILE *out = fopen(path, "wb");
                if (!out || fwrite(rbuf + at, 1, len, out) != len || fclose(out) != 0)
                    fail("cannot write the response body");
            }
            printf("%.4f %d %zu %.3f\n", t1 - t0, status, len, c1 - c0);
        } else if (line[0] == 'r') {
            int k = 0;
            if (sscanf(line + 1, "%d %u %zu", &p, &i, &n) != 3 || i >= n_files)
                fail("bad command");
            while (k < MAX_RAW && raw_port[k] && raw_port[k] != p)
                k++;
            if (k == MAX_RAW)
                fail("too many raw ports");
            if (!raw_port[k]) {
                raw_port[k] = p;
                raw_fd[k] = connect_to(p);
            }
            size_t got = 0;
            room(n);
            double c0 = cpu_ms(), t0 = now_ms();
            send_all(raw_fd[k], files[i].data, files[i].len);
            recv_until(raw_fd[k], &got, n);
            double t1 = now_ms(), c1 = cpu_ms();
            printf("%.4f %.3f\n", t1 - t0, c1 - c0);
        } else if (line[0] == 'q') {
            break;
        } else {
            fail("bad command");
        }
        fflush(stdout);
    }
    return 0;
}
