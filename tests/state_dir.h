/*
 * tests/state_dir.h — a journaled session store over one test program's
 * state directory, with every line its start logs kept for the checks
 * (tests/unit/test_replay.c, tests/unit/test_replay_reads.c,
 * tests/unit/test_durable_start.c), and what they look at in it. The
 * program sets dir before the first use.
 */
#ifndef ATTND_TESTS_STATE_DIR_H
#define ATTND_TESTS_STATE_DIR_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/replay.h"
#include "core/store.h"
#include "tests/harness.h"

static char dir[64];
static char logged[65536];          /* every line of the last open */

static void keep_log(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s %s\n",
             level == SESS_LOG_WARN ? "warn" : "info", msg);
    if (getenv("TEST_VERBOSE"))
        printf("    log %s: %s\n", level == SESS_LOG_WARN ? "warn" : "info", msg);
}

/* A clock that stands still: a session is used at most once a second as
 * far as the journal knows (TOUCH), and nothing expires within a run. */
static double still(void *arg)
{
    (void)arg;
    return 1000.0;
}

/* The store of cfg over dir, on the still clock (NULL when it refuses to
 * open). */
static struct sess_store *open_dir_cfg(const struct sess_config *cfg)
{
    struct sess_store *st = sess_store_new(cfg);
    sess_store_set_clock(st, still, NULL);
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40, .log = keep_log};
    logged[0] = '\0';
    if (sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        return NULL;
    }
    return st;
}

/* The store over dir (NULL when it refuses to open), its sessions' TTL
 * default_ttl_s unless they say (0: none, so a use journals nothing). */
static struct sess_store *open_dir_ttl(double default_ttl_s)
{
    struct sess_config cfg = {.max_sessions = 100, .max_cache_bytes = 1 << 26,
                              .default_ttl_s = default_ttl_s, .default_max_tokens = 100000,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r0"};
    return open_dir_cfg(&cfg);
}

/* A new session of one float32 head, d_k = d_v = 8, its id into id. */
static inline enum core_status new_session(struct sess_store *st, char *id)
{
    struct sess_spec sp = {.shape = {.h = 1, .h_kv = 1, .d_k = 8, .d_v = 8},
                           .params = {.dtype = ATTN_F32, .scale = 0.25}};
    return sess_create(st, &sp, id);
}

static char *path_of(const char *name)
{
    static char p[200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static bool exists(const char *name)
{
    struct stat sb;
    return stat(path_of(name), &sb) == 0;
}

/* Whether the last open logged text (else the log is printed). */
static bool said(const char *text)
{
    if (strstr(logged, text))
        return true;
    printf("    not in the log: %s\n%s", text, logged);
    return false;
}

/* Flip a bit of the byte at offset at of the file name. */
static inline void flip(const char *name, long at)
{
    int fd = open(path_of(name), O_RDWR);
    unsigned char b = 0;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

/* Under AddressSanitizer a failed allocation returns NULL, as malloc does,
 * instead of ending the program: tests make memory run short (RLIMIT_AS). */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif

/* The address space this process uses now, in bytes. */
static inline unsigned long long address_space(void)
{
    unsigned long long pages = 0;
    FILE *fp = fopen("/proc/self/statm", "r");
    CHECK(fp && fscanf(fp, "%llu", &pages) == 1);
    if (fp)
        fclose(fp);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* Whether RLIMIT_AS stops this process's allocations here: not under
 * qemu-user, which takes no address-space limit for its guest (the tests
 * that need one skip there, saying so). */
static inline bool as_limit_holds(void)
{
    struct rlimit was, small;
    if (getrlimit(RLIMIT_AS, &was) != 0)
        return false;
    small = was;
    small.rlim_cur = (rlim_t)(address_space() + (64ULL << 20));
    if (setrlimit(RLIMIT_AS, &small) != 0)
        return false;
    void *m = mmap(NULL, 1ULL << 30, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    CHECK(setrlimit(RLIMIT_AS, &was) == 0);
    if (m == MAP_FAILED)
        return true;
    munmap(m, 1ULL << 30);
    printf("    skipped: RLIMIT_AS does not stop an allocation here (qemu-user)\n");
    return false;
}

/* The lowest free file descriptor: the number the next open takes. */
static inline int next_fd(void)
{
    int fd = dup(0);
    if (fd >= 0)
        close(fd);
    return fd;
}

/* open_fn() with the soft limit of resource (RLIMIT_AS, RLIMIT_NOFILE...)
 * at cur, restored after. */
static inline struct sess_store *open_under(struct sess_store *(*open_fn)(void), int resource,
                                            unsigned long long cur)
{
    struct rlimit was, small;
    CHECK(getrlimit(resource, &was) == 0);
    small = was;
    small.rlim_cur = (rlim_t)cur;
    CHECK(setrlimit(resource, &small) == 0);
    struct sess_store *st = open_fn();
    CHECK(setrlimit(resource, &was) == 0);
    return st;
}

/* Run fn in a child process, its CHECKs failing the test that runs it,
 * with to_parent a pipe to this process: what it writes there into
 * out[SESS_ID_MAX] (may be NULL). What the child allocates is not left
 * over here (empty slabs are kept, freed heap too), for a start under a
 * memory limit to use again without asking for more. */
static inline void in_child(void (*fn)(int to_parent), char *out)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        th_cur_failed = 0;
        fn(fds[1]);
        fflush(stdout);
        _exit(th_cur_failed ? 1 : 0);
    }
    close(fds[1]);
    char got[SESS_ID_MAX] = "";
    ssize_t got_n = read(fds[0], got, sizeof got - 1);
    close(fds[0]);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (out)
        snprintf(out, SESS_ID_MAX, "%s", got_n > 0 ? got : "");
}

/* The bytes of a snapshot's begin record, its first, and of its end
 * record, its last (core/durable.c). */
#define SNAP_BEGIN_BYTES ((long)JNL_FRAME_BYTES + (long)SESS_REC_BEGIN_BYTES)
#define SNAP_END_BYTES ((long)JNL_FRAME_BYTES + (long)SESS_REC_END_BYTES)

/* The offset of record i (0 the first) of the state file name and its
 * bytes (frame included). */
static inline long record_in(const char *name, int i, long *bytes)
{
    int fd = open(path_of(name), O_RDONLY);
    long off = JNL_HEADER_BYTES;
    uint32_t len = 0;
    for (int k = 0; fd >= 0 && k <= i; k++) {
        if (pread(fd, &len, 4, off) != 4)
            break;
        if (k < i)
            off += 4 + (long)len + 4;
    }
    if (fd >= 0)
        close(fd);
    *bytes = 4 + (long)len + 4;
    return off;
}

/* The offset of session record i (0 the first, after the begin record; the
 * number of sessions: the end record) of snapshot name and its bytes. */
static inline long session_record_in(const char *name, int i, long *bytes)
{
    return record_in(name, i + 1, bytes);
}

/* Snapshots 2 and 3 fail (their temporary names are taken), so a start
 * leaves the journals as they are and begins the next one; on: undo. */
static inline void fail_snapshots(bool on)
{
    for (int gen = 2; gen <= 3; gen++) {
        char name[64];
        snprintf(name, sizeof name, ".snapshot.%016x.tmp", gen);
        CHECK((on ? mkdir(path_of(name), 0700) : rmdir(path_of(name))) == 0);
    }
}

/* The CRC-32C of the contents of path (0 when it cannot be read). */
static inline uint32_t file_crc(const char *path)
{
    static unsigned char buf[1 << 16];
    int fd = open(path, O_RDONLY);
    uint32_t crc = 0;
    ssize_t got;
    while (fd >= 0 && (got = read(fd, buf, sizeof buf)) > 0)
        crc = jnl_crc32c(crc, buf, (size_t)got);
    if (fd >= 0)
        close(fd);
    return crc;
}

/* Every file of dir by name, with its size and the CRC-32C of its
 * contents, into out[size]: what a start must leave as it is. LOCK is
 * named only: each store writes its holder there. */
static inline void listing(char *out, size_t size)
{
    struct dirent **names;
    int k = scandir(dir, &names, NULL, alphasort);
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        struct stat sb;
        char p[400];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
        bool file = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
        if (strcmp(names[i]->d_name, "LOCK") == 0)
            file = false;
        if (at < size)
            at += (size_t)snprintf(out + at, size - at, "%s %lld %08x\n", names[i]->d_name,
                                   file ? (long long)sb.st_size : 0LL,
                                   file ? (unsigned)file_crc(p) : 0u);
        free(names[i]);
    }
    if (k >= 0)
        free(names);
}

#endif
