/*
 * core/journal.c — the checksummed append-only record file (see journal.h).
 *
 * CRC-32C is hand-written: none of the build's libraries (libuv, jansson,
 * libmicrohttpd, OpenBLAS) exports it, zlib's crc32 is the IEEE polynomial
 * without the hardware instruction, and every record of an append (64 KiB
 * of rows) is checksummed on the request's path, so the CPU's own CRC-32C
 * instruction matters: SSE4.2's crc32 on x86-64 (about 20x the table's
 * speed), ARMv8's crc32cx on arm64 (optional before ARMv8.1, so asked of
 * the kernel's HWCAP), each chosen at run time. Elsewhere the table method
 * by eight bytes (slicing-by-8) is used; all agree with the standard check
 * value (CRC-32C of "123456789" is 0xE3069283, tests/unit/test_journal.c).
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <arm_acle.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#define JNL_BOM 0x01020304u
/* A record longer than this is damage, not data (a session is far smaller). */
#define JNL_MAX_RECORD ((uint64_t)1 << 40)

/* ---- CRC-32C ------------------------------------------------------------ */

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
/* arm64 with gcc, little-endian: clang spells the target attribute
 * otherwise and declares the intrinsics only with the feature on, and the
 * words below are loaded in little-endian order. */
#if defined(__x86_64__) || (defined(__aarch64__) && !defined(__clang__) && \
                            __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
#define CRC_HW 1
static bool crc_hw;     /* the CPU's CRC-32C instruction (x86-64, arm64) */
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

#if defined(CRC_HW)
#if defined(__x86_64__)
#define CRC_TARGET __attribute__((target("sse4.2")))
CRC_TARGET static inline uint32_t crc_hw8(uint32_t c, uint64_t w)
{
    return (uint32_t)__builtin_ia32_crc32di(c, w);
}
CRC_TARGET static inline uint32_t crc_hw1(uint32_t c, unsigned char b)
{
    return __builtin_ia32_crc32qi(c, b);
}
#else
#define CRC_TARGET __attribute__((target("+crc")))
CRC_TARGET static inline uint32_t crc_hw8(uint32_t c, uint64_t w)
{
    return __crc32cd(c, w);
}
CRC_TARGET static inline uint32_t crc_hw1(uint32_t c, unsigned char b)
{
    return __crc32cb(c, b);
}
#endif

/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of one
 * a cycle on x86-64 (crc32cx: 2 and 1 on Arm's Neoverse cores), so one
 * chain of it runs at a third (a half) of its speed: three blocks
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
CRC_TARGET
static uint32_t crc_triple(uint32_t c0, const unsigned char **b, size_t *n, size_t len,
                           uint32_t t[4][256])
{
    for (; *n >= 3 * len; *n -= 3 * len, *b += 3 * len) {
        uint32_t c1 = 0, c2 = 0;
        for (const unsigned char *p = *b, *end = *b + len; p < end; p += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + len, 8);
            memcpy(&w2, p + 2 * len, 8);
            c0 = crc_hw8(c0, w0);
            c1 = crc_hw8(c1, w1);
            c2 = crc_hw8(c2, w2);
        }
        c0 = crc_shift(t, c0) ^ c1;
        c0 = crc_shift(t, c0) ^ c2;
    }
    return c0;
}

CRC_TARGET
static uint32_t crc_instr(uint32_t c, const unsigned char *b, size_t n)
{
    c = crc_triple(c, &b, &n, CRC_LONG, crc_long);
    c = crc_triple(c, &b, &n, CRC_SHORT, crc_short);
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = crc_hw8(c, w);
    }
    while (n--)
        c = crc_hw1(c, *b++);
    return c;
}

/* Whether this CPU has the instruction, and the tables to join chains. */
static void crc_hw_init(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#else
    crc_hw = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
    if (crc_hw) {
        crc_zeros(crc_long, CRC_LONG);
        crc_zeros(crc_short, CRC_SHORT);
    }
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
#if defined(CRC_HW)
    crc_hw_init();
#endif
}

uint32_t jnl_crc32c(uint32_t crc, const void *p, size_t n)
{
#if defined(CRC_HW)
    pthread_once(&crc_once, crc_init);
    if (crc_hw)
        return ~crc_instr(~crc, p, n);
#endif
    return jnl_crc32c_table(crc, p, n);
}

uint32_t jnl_crc32c_table(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    uint32_t c = ~crc;
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

/*
 * The reader reads with pread into a buffer of its own (the window) rather
 * than mapping the file: a disk that cannot read a mapped page raises
 * SIGBUS, not EIO, and so does a page past the end of a file that shrank
 * under the mapping, so a damaged disk would stop attnd at start instead
 * of being told apart as damage (EIO) from a failure that says nothing of
 * the file (ENOMEM, EINTR...; sess_state_error_transient). A read error is
 * a value here (r->err, r->why). The window holds the record being read
 * and reads ahead READ_AHEAD bytes for small ones, so a journal of small
 * records costs a read per READ_AHEAD, not one per record; it grows to the
 * largest record read, never to the file (a snapshot holds every session).
 */
#define READ_AHEAD ((size_t)256 << 10)
/* frame_at: the length could not be read (r->err set) */
#define FRAME_UNREAD UINT64_MAX

/*
 * Read bytes [at, at + want) of fd into p, at least need of them: a read
 * interrupted (EINTR) or short is taken up again, and one that fails or
 * meets the end past need ends it short (what is missing is read again
 * when it is needed). 0 with *got set, the errno of a failed read, or -1
 * when the file ends before need (it shrank since it was opened).
 */
static int read_full(int fd, void *p, size_t at, size_t need, size_t want, size_t *got)
{
    size_t n = 0;
    while (n < want) {
        ssize_t k = pread(fd, (unsigned char *)p + n, want - n, (off_t)(at + n));
        if (k > 0) {
            n += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (n >= need)
            break;
        *got = n;
        return k < 0 ? errno : -1;
    }
    *got = n;
    return 0;
}

/* A read at byte at failed with e (read_full's value, or ENOMEM for the
 * window): r->err, r->err_at and r->why say so. */
static void read_failed(struct jnl_reader *r, size_t at, int e)
{
    r->err_at = at;
    if (e > 0) {
        r->err = e;
        r->why = strerror(e);
    } else {
        /* another process cut the file: a read to try again (the next
         * start reads it as it is then), not damage of what it held */
        r->err = EAGAIN;
        r->why = "the file got shorter while it was read";
    }
}

/*
 * Bytes [at, at + need) of the file, need <= r->size - at, in the window
 * (read when they are not there); NULL when a read fails or memory for
 * the window runs short (r->err set). Valid until the next fetch.
 */
static const unsigned char *fetch(struct jnl_reader *r, size_t at, size_t need)
{
    size_t rel = at - r->win_off;
    bool inside = at >= r->win_off && rel <= r->win_len;
    if (inside && need <= r->win_len - rel)
        return r->win + rel;
    /* a large record alone, with the next one's length */
    size_t want = need > READ_AHEAD ? need + 4 : READ_AHEAD;
    if (want > r->size - at)
        want = r->size - at;
    size_t keep = inside ? r->win_len - rel : 0;   /* < need */
    if (want > r->win_cap) {
        unsigned char *w = malloc(want);
        if (!w) {
            read_failed(r, at, ENOMEM);
            return NULL;
        }
        if (keep)
            memcpy(w, r->win + rel, keep);
        free(r->win);
        r->win = w;
        r->win_cap = want;
    } else if (keep) {
        memmove(r->win, r->win + rel, keep);
    }
    r->win_off = at;
    r->win_len = keep;
    size_t got;
    int e = read_full(r->fd, r->win + keep, at + keep, need - keep, want - keep, &got);
    if (e != 0) {
        read_failed(r, at + keep + got, e);
        return NULL;
    }
    r->win_len += got;
    return r->win;
}

static enum core_status check_header(struct jnl_reader *r, const char *magic)
{
    uint32_t ver, bom;
    if (r->size < JNL_HEADER_BYTES) {
        r->why = "shorter than its header";
        return CORE_ECORRUPT;
    }
    const unsigned char *h = fetch(r, 0, JNL_HEADER_BYTES);
    if (!h)
        return CORE_EIO;
    memcpy(&ver, h + 8, 4);
    memcpy(&bom, h + 12, 4);
    memcpy(&r->gen, h + 16, 8);
    if (memcmp(h, magic, 8) != 0)
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
    while ((r->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR)
        continue;
    if (r->fd < 0) {
        r->err = errno;
        r->why = strerror(errno);
        return errno == ENOENT ? CORE_ENOTFOUND : CORE_EIO;
    }
    struct stat sb;
    if (fstat(r->fd, &sb) != 0) {
        r->err = errno;
        r->why = strerror(errno);
        jnl_read_close(r);
        return CORE_EIO;
    }
    r->size = (size_t)sb.st_size;
    enum core_status rc = check_header(r, magic);
    if (rc != CORE_OK)
        jnl_read_close(r);
    return rc;
}

void jnl_read_close(struct jnl_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    free(r->win);
    r->win = NULL;
    r->win_cap = r->win_off = r->win_len = 0;
}

/* The frame of length len at off: its total bytes, or 0 when it does not
 * fit the file (size - off >= 4). */
static uint64_t frame_fits(size_t size, size_t off, uint32_t len)
{
    if (len < 8 || len > size - off - 4 || size - off - 4 - len < 4)
        return 0;
    return 4 + (uint64_t)len + 4;
}

/* The frame at off: its total bytes, 0 when its length does not fit, or
 * FRAME_UNREAD when it cannot be read (r->err set). */
static uint64_t frame_at(struct jnl_reader *r, size_t off, uint32_t *len)
{
    if (r->size - off < 4)
        return 0;
    const unsigned char *p = fetch(r, off, 4);
    if (!p)
        return FRAME_UNREAD;
    memcpy(len, p, 4);
    return frame_fits(r->size, off, *len);
}

/* Whether the checksum of the frame at p (n its length) matches. */
static bool crc_holds(const unsigned char *p, uint32_t n)
{
    uint32_t crc;
    memcpy(&crc, p + 4 + n, 4);
    return jnl_crc32c(0, p + 4, n) == crc;
}

/*
 * Whether the frame at off fits and its checksum matches, read in pieces
 * outside the window (which holds the record jnl_read_skip returns):
 * 1, 0, or -1 when a read fails (r->err set).
 */
static int frame_good_apart(struct jnl_reader *r, size_t off)
{
    enum { PIECE = 64 << 10 };
    uint32_t n = 0, crc = 0, want = 0;
    size_t got = 0, at = off;
    if (r->size - off < 4)
        return 0;
    int e = read_full(r->fd, &n, at, 4, 4, &got);
    if (e == 0 && frame_fits(r->size, off, n) == 0)
        return 0;
    unsigned char *piece = e == 0 ? malloc(PIECE) : NULL;
    if (e == 0 && !piece)
        e = ENOMEM;
    size_t end = off + 4 + (size_t)n;
    for (at = off + 4; e == 0 && at < end; at += got) {
        size_t k = end - at < PIECE ? end - at : PIECE;
        e = read_full(r->fd, piece, at, k, k, &got);
        if (e != 0)
            break;
        crc = jnl_crc32c(crc, piece, got);
    }
    free(piece);
    if (e == 0)
        e = read_full(r->fd, &want, end, 4, 4, &got);
    if (e != 0) {
        read_failed(r, at + got, e);
        return -1;
    }
    return crc == want;
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
    if (total == 0)
        r->why = "record cut short";
    if (total == 0 || total == FRAME_UNREAD)
        return -1;
    /* a record the window would grow for is checked in pieces first: a
     * damaged length may claim most of a large file, and the window is
     * then not grown to it (nor filled, at the cost of that memory) */
    int good = total > r->win_cap && total > READ_AHEAD ? frame_good_apart(r, r->off) : 1;
    if (good == 0)
        r->why = "checksum mismatch";
    if (good != 1)
        return -1;
    const unsigned char *p = fetch(r, r->off, (size_t)total);
    if (!p)
        return -1;
    if (!crc_holds(p, n)) {
        r->why = "checksum mismatch";
        return -1;
    }
    memcpy(lsn, p + 4, 8);
    *payload = p + 12;
    *len = n - 8;
    r->off += total;
    r->kept++;
    return 1;
}

uint64_t jnl_read_rest(const struct jnl_reader *r, uint64_t *bytes)
{
    uint64_t frames = 0;
    size_t off = r->off, got;
    *bytes = r->size - r->off;
    while (off < r->size) {
        uint32_t n;
        frames++;
        if (r->size - off < 4 || read_full(r->fd, &n, off, 4, 4, &got) != 0)
            break;
        uint64_t total = frame_fits(r->size, off, n);
        if (total == 0)
            break;
        off += total;
    }
    return frames;
}

int jnl_read_skip(struct jnl_reader *r, const void **payload, size_t *len, size_t *at)
{
    uint32_t n;
    if (!r->why || r->err)
        return 0;                   /* not stopped, or by a read error */
    uint64_t total = frame_at(r, r->off, &n);
    if (total == 0 || total == FRAME_UNREAD)
        return 0;                   /* cut short, or unread */
    /* the framing first: a length that leads nowhere is not trusted with
     * a window of its size */
    size_t next = r->off + (size_t)total;
    if (next != r->size && frame_good_apart(r, next) != 1)
        return 0;
    const unsigned char *p = fetch(r, r->off, (size_t)total);
    if (!p || crc_holds(p, n))
        return 0;                   /* unread, or not a bad checksum */
    *payload = p + 12;
    *len = n - 8;
    *at = r->off;
    r->off = next;
    r->why = NULL;
    return 1;
}
