/*
 * core/journal.c — the checksummed append-only record file (see journal.h).
 *
 * CRC-32C is hand-written: none of the build's libraries (libuv, jansson,
 * libmicrohttpd, OpenBLAS) exports it, zlib's crc32 is the IEEE polynomial
 * without the hardware instruction, and every record of an append (64 KiB
 * of rows) is checksummed on the request's path, so the SSE4.2 crc32
 * instruction (chosen at run time; about 20x the table's speed) matters.
 * Elsewhere the table method by eight bytes (slicing-by-8) is used; both
 * agree with the standard check value (CRC-32C of "123456789" is
 * 0xE3069283, tests/unit/test_journal.c).
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define JNL_VERSION 1u
#define JNL_BOM 0x01020304u
/* A record longer than this is damage, not data (a session is far smaller). */
#define JNL_MAX_RECORD ((uint64_t)1 << 40)

/* ---- CRC-32C ------------------------------------------------------------ */

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
#if defined(__x86_64__)
static bool crc_hw;     /* SSE4.2's crc32 instruction (x86-64 only) */
#endif

static uint32_t crc_soft(uint32_t c, const unsigned char *b, size_t n)
{
    while (n && ((uintptr_t)b & 7)) {
        c = crc_tab[0][(c ^ *b++) & 0xFF] ^ (c >> 8);
        n--;
    }
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        w ^= c;     /* little-endian: the low byte is the first */
        c = crc_tab[7][w & 0xFF] ^ crc_tab[6][(w >> 8) & 0xFF] ^
            crc_tab[5][(w >> 16) & 0xFF] ^ crc_tab[4][(w >> 24) & 0xFF] ^
            crc_tab[3][(w >> 32) & 0xFF] ^ crc_tab[2][(w >> 40) & 0xFF] ^
            crc_tab[1][(w >> 48) & 0xFF] ^ crc_tab[0][w >> 56];
    }
    while (n--)
        c = crc_tab[0][(c ^ *b++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of one
 * a cycle, so one chain of it runs at a third of its speed: three blocks
 * are checksummed side by side and joined (Mark Adler's crc32c.c): the CRC
 * of A then B is the CRC of A shifted over |B| zero bytes, xor the CRC of
 * B from 0, the shift a linear map of the 32-bit register, tabulated per
 * byte of it for the two block sizes. One chain was a tenth of a large
 * import's receiving thread (measured: docs/benchmarks.md, section
 * "Moving a session").
 */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long[4][256], crc_short[4][256];

/* The product of the 32x32 matrix m over GF(2) (columns) and v. */
static uint32_t gf2_times(const uint32_t *m, uint32_t v)
{
    uint32_t sum = 0;
    for (; v; v >>= 1, m++)
        if (v & 1)
            sum ^= *m;
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *m)
{
    for (int i = 0; i < 32; i++)
        sq[i] = gf2_times(m, m[i]);
}

/* Tables of the operator that feeds len zero bytes (a power of two) to
 * a CRC register, one per byte of the register. */
static void crc_zeros(uint32_t t[4][256], size_t len)
{
    uint32_t even[32], odd[32], row = 1;
    odd[0] = 0x82F63B78u;               /* one zero bit */
    for (int i = 1; i < 32; i++, row <<= 1)
        odd[i] = row;
    gf2_square(even, odd);              /* two bits */
    gf2_square(odd, even);              /* four */
    const uint32_t *op = odd;
    for (size_t n = len; n; n >>= 1) {  /* 8 bits, 16, ...: len bytes */
        gf2_square(op == odd ? even : odd, op);
        op = op == odd ? even : odd;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 0; k < 4; k++)
            t[k][i] = gf2_times(op, i << (8 * k));
}

static uint32_t crc_shift(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
}

/* Blocks of 3 x len bytes, three chains at once; the rest is left. */
__attribute__((target("sse4.2")))
static uint64_t crc_triple(uint64_t c0, const unsigned char **b, size_t *n, size_t len,
                           uint32_t t[4][256])
{
    for (; *n >= 3 * len; *n -= 3 * len, *b += 3 * len) {
        uint64_t c1 = 0, c2 = 0;
        for (const unsigned char *p = *b, *end = *b + len; p < end; p += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + len, 8);
            memcpy(&w2, p + 2 * len, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c0 = crc_shift(t, (uint32_t)c0) ^ c1;
        c0 = crc_shift(t, (uint32_t)c0) ^ c2;
    }
    return c0;
}

__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t c, const unsigned char *b, size_t n)
{
    uint64_t c64 = c;
    c64 = crc_triple(c64, &b, &n, CRC_LONG, crc_long);
    c64 = crc_triple(c64, &b, &n, CRC_SHORT, crc_short);
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    uint32_t c32 = (uint32_t)c64;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *b++);
    return c32;
}
#endif

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = crc_tab[0][crc_tab[t - 1][i] & 0xFF] ^
                            (crc_tab[t - 1][i] >> 8);
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    if (crc_hw) {
        crc_zeros(crc_long, CRC_LONG);
        crc_zeros(crc_short, CRC_SHORT);
    }
#endif
}

uint32_t jnl_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_sse42(c, b, n);
#endif
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    for (; n; n--)
        c = crc_tab[0][(c ^ *b++) & 0xFF] ^ (c >> 8);
    return ~c;
#else
    return ~crc_soft(c, b, n);
#endif
}

/* ---- writing ------------------------------------------------------------ */

struct jnl {
    int fd;
    uint64_t end;               /* bytes known good */
    enum jnl_fsync mode;
    bool broken;                /* could not cut back a failed append */
};

/* fsync the directory holding path (so a create or rename is durable). */
static int fsync_parent(const char *path)
{
    size_t n = strlen(path);
    char *copy = malloc(n + 1);
    if (!copy)
        return ENOMEM;
    memcpy(copy, path, n + 1);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* Write all of iov[n] at off; 0 or the errno. */
static int pwrite_all(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        off += (uint64_t)w;
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* The header of a file of this magic and generation. */
static void make_header(unsigned char h[JNL_HEADER_BYTES], const char *magic, uint64_t gen)
{
    uint32_t ver = JNL_VERSION, bom = JNL_BOM;
    memcpy(h, magic, 8);
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &bom, 4);
    memcpy(h + 16, &gen, 8);
}

struct jnl *jnl_create(const char *path, const char *magic, uint64_t gen,
                       enum jnl_fsync mode, int *err_no)
{
    struct jnl *j = calloc(1, sizeof *j);
    if (!j) {
        *err_no = ENOMEM;
        return NULL;
    }
    j->mode = mode;
    j->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        *err_no = errno;
        free(j);
        return NULL;
    }
    unsigned char h[JNL_HEADER_BYTES];
    make_header(h, magic, gen);
    struct iovec iov = {h, sizeof h};
    int e = pwrite_all(j->fd, &iov, 1, 0);
    if (e == 0 && fdatasync(j->fd) != 0)
        e = errno;
    if (e == 0)
        e = fsync_parent(path);
    if (e != 0) {
        close(j->fd);
        unlink(path);
        free(j);
        *err_no = e;
        return NULL;
    }
    j->end = JNL_HEADER_BYTES;
    return j;
}

struct jnl *jnl_reopen_empty(const char *path, const char *magic, uint64_t gen,
                             enum jnl_fsync mode, int *err_no)
{
    struct jnl *j = calloc(1, sizeof *j);
    if (!j) {
        *err_no = ENOMEM;
        return NULL;
    }
    j->mode = mode;
    j->end = JNL_HEADER_BYTES;
    j->fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    unsigned char want[JNL_HEADER_BYTES], got[JNL_HEADER_BYTES];
    make_header(want, magic, gen);
    struct stat sb;
    int e = 0;
    if (j->fd < 0 || fstat(j->fd, &sb) != 0)
        e = errno;
    else if (sb.st_nlink != 1)
        e = EMLINK;                 /* another name (a hard-linked copy of the
                                       directory) would see what is appended */
    else if (!S_ISREG(sb.st_mode) || sb.st_size != JNL_HEADER_BYTES ||
             pread(j->fd, got, sizeof got, 0) != (ssize_t)sizeof got ||
             memcmp(got, want, sizeof got) != 0)
        e = EINVAL;                 /* not the empty file of this generation */
    else if (fdatasync(j->fd) != 0)
        e = errno;
    else
        e = fsync_parent(path);
    if (e != 0) {
        if (j->fd >= 0)
            close(j->fd);
        free(j);
        *err_no = e;
        return NULL;
    }
    return j;
}

void jnl_close(struct jnl *j)
{
    if (!j)
        return;
    close(j->fd);
    free(j);
}

uint64_t jnl_size(const struct jnl *j) { return j->end; }
bool jnl_broken(const struct jnl *j) { return j->broken; }

/* Cut the file back to the last good end after a failed append. */
static void cut_back(struct jnl *j)
{
    while (ftruncate(j->fd, (off_t)j->end) != 0) {
        if (errno != EINTR) {
            j->broken = true;
            return;
        }
    }
}

enum core_status jnl_append(struct jnl *j, uint64_t lsn,
                            const struct iovec *parts, int n, bool no_wait,
                            int *err_no)
{
    enum { MAX_PARTS = 14 };
    int e = 0;
    uint64_t len = 8;
    for (int i = 0; i < n; i++)
        len += parts[i].iov_len;
    if (j->broken)
        e = EIO;
    else if (n > MAX_PARTS || len > JNL_MAX_RECORD || len > UINT32_MAX)
        e = EFBIG;
    if (e != 0) {
        if (err_no)
            *err_no = e;
        return CORE_ESTORAGE;
    }
    uint32_t len32 = (uint32_t)len;
    uint32_t crc = jnl_crc32c(0, &lsn, 8);
    struct iovec iov[MAX_PARTS + 3];
    iov[0] = (struct iovec){&len32, 4};
    iov[1] = (struct iovec){&lsn, 8};
    for (int i = 0; i < n; i++) {
        iov[2 + i] = parts[i];
        crc = jnl_crc32c(crc, parts[i].iov_base, parts[i].iov_len);
    }
    iov[2 + n] = (struct iovec){&crc, 4};
    e = pwrite_all(j->fd, iov, n + 3, j->end);
    if (e == 0 && j->mode == JNL_FSYNC_ALWAYS && !no_wait &&
        fdatasync(j->fd) != 0)
        e = errno;
    if (e != 0) {
        cut_back(j);
        if (err_no)
            *err_no = e;
        return CORE_ESTORAGE;
    }
    j->end += 4 + len + 4;
    return CORE_OK;
}

enum core_status jnl_sync(struct jnl *j, int *err_no)
{
    if (fdatasync(j->fd) == 0)
        return CORE_OK;
    if (err_no)
        *err_no = errno;
    /* after a failed fsync the kernel may have dropped the dirty pages:
     * what was acknowledged is no longer known to be on disk */
    j->broken = true;
    return CORE_ESTORAGE;
}

/* ---- reading ------------------------------------------------------------ */

static enum core_status check_header(struct jnl_reader *r, const char *magic)
{
    uint32_t ver, bom;
    if (r->size < JNL_HEADER_BYTES) {
        r->why = "shorter than its header";
        return CORE_ECORRUPT;
    }
    memcpy(&ver, r->base + 8, 4);
    memcpy(&bom, r->base + 12, 4);
    memcpy(&r->gen, r->base + 16, 8);
    if (memcmp(r->base, magic, 8) != 0)
        r->why = "not a file of this kind";
    else if (ver != JNL_VERSION)
        r->why = "unsupported version";
    else if (bom != JNL_BOM)
        r->why = "other byte order";
    r->off = JNL_HEADER_BYTES;
    return r->why ? CORE_ECORRUPT : CORE_OK;
}

enum core_status jnl_read_open(struct jnl_reader *r, const char *path,
                               const char *magic)
{
    memset(r, 0, sizeof *r);
    int fd;
    while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR)
        continue;
    if (fd < 0) {
        r->err = errno;
        r->why = strerror(errno);
        return errno == ENOENT ? CORE_ENOTFOUND : CORE_EIO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        r->err = errno;
        r->why = strerror(errno);
        close(fd);
        return CORE_EIO;
    }
    r->size = (size_t)sb.st_size;
    if (r->size >= JNL_HEADER_BYTES) {
        void *m = mmap(NULL, r->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            r->err = errno;
            r->why = strerror(errno);
            close(fd);
            return CORE_EIO;
        }
        r->base = m;
        r->mapped = true;
    }
    close(fd);
    enum core_status rc = check_header(r, magic);
    if (rc != CORE_OK)
        jnl_read_close(r);
    return rc;
}

void jnl_read_close(struct jnl_reader *r)
{
    if (r->mapped)
        munmap((void *)r->base, r->size);
    r->mapped = false;
    r->base = NULL;
}

/* The frame at off: its total bytes, or 0 when its length does not fit. */
static uint64_t frame_at(const struct jnl_reader *r, size_t off, uint32_t *len)
{
    if (r->size - off < 4)
        return 0;
    memcpy(len, r->base + off, 4);
    if (*len < 8 || *len > r->size - off - 4 || r->size - off - 4 - *len < 4)
        return 0;
    return 4 + (uint64_t)*len + 4;
}

/* Whether the frame at off fits and its checksum matches. */
static bool frame_good(const struct jnl_reader *r, size_t off)
{
    uint32_t n;
    if (frame_at(r, off, &n) == 0)
        return false;
    const unsigned char *p = r->base + off + 4;
    uint32_t crc;
    memcpy(&crc, p + n, 4);
    return jnl_crc32c(0, p, n) == crc;
}

int jnl_read_next(struct jnl_reader *r, uint64_t *lsn, const void **payload,
                  size_t *len)
{
    if (r->why)
        return -1;
    if (r->off == r->size)
        return 0;
    uint32_t n;
    uint64_t total = frame_at(r, r->off, &n);
    if (total == 0) {
        r->why = "record cut short";
        return -1;
    }
    const unsigned char *p = r->base + r->off + 4;
    if (!frame_good(r, r->off)) {
        r->why = "checksum mismatch";
        return -1;
    }
    memcpy(lsn, p, 8);
    *payload = p + 8;
    *len = n - 8;
    r->off += total;
    r->kept++;
    return 1;
}

uint64_t jnl_read_rest(const struct jnl_reader *r, uint64_t *bytes)
{
    uint64_t frames = 0;
    size_t off = r->off;
    *bytes = r->size - r->off;
    while (off < r->size) {
        uint32_t n;
        uint64_t total = frame_at(r, off, &n);
        frames++;
        if (total == 0)
            break;
        off += total;
    }
    return frames;
}

int jnl_read_skip(struct jnl_reader *r, const void **payload, size_t *len, size_t *at)
{
    uint32_t n;
    uint64_t total = r->why ? frame_at(r, r->off, &n) : 0;
    if (total == 0 || frame_good(r, r->off))
        return 0;                   /* cut short, or not a bad checksum */
    size_t next = r->off + (size_t)total;
    if (next != r->size && !frame_good(r, next))
        return 0;
    *payload = r->base + r->off + 12;
    *len = n - 8;
    *at = r->off;
    r->off = next;
    r->why = NULL;
    return 1;
}
