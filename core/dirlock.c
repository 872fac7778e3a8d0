/*
 * core/dirlock.c — one process per state directory. Two attnd on one
 * directory would each replay it, then write journals and snapshots over
 * each other's; so the session store holds an exclusive flock on LOCK in
 * the directory from before its replay until it is freed. The kernel drops
 * the lock when the process ends, however it ends, so a crash leaves
 * nothing stale. LOCK holds the holder's pid and host, for the message a
 * second process gives. On a file system without locks the store goes on
 * unguarded, with a warning. On NFS, Linux makes flock a whole-file POSIX
 * lock: processes still exclude each other (with a lock daemon, or NFSv4),
 * but within one process a second lock would be granted, which is why
 * tests give a second store a copy of the directory.
 */
#include "dirlock.h"

#include "store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Who holds the lock on fd: what its holder wrote, or "unknown". */
static void lock_holder(int fd, char *out, size_t cap)
{
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? (size_t)n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    if (!out[0])
        snprintf(out, cap, "unknown");
}

/* "pid N on HOST" into the locked fd: written, then cut to its length, so
 * a reader never finds it empty. The pid alone means little from another
 * host or container, hence the host. */
static void lock_write_holder(int fd, const char *path, const struct sess_journal_config *cfg)
{
    char host[128] = "";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    char text[192];
    int len = snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), host);
    ssize_t n = pwrite(fd, text, (size_t)len, 0);
    if (n != len || ftruncate(fd, len) != 0)
        sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: cannot write the holder "
                  "into %s: %s (the lock holds all the same)", path,
                  n >= 0 && n != len ? "short write" : strerror(errno));
}

/* Whether flock's errno means the file system has no locks at all. */
static bool no_locks_here(int e)
{
    return e == ENOLCK || e == EOPNOTSUPP || e == ENOTSUP || e == ENOSYS;
}

/* Whether fd is the file path names now (not one removed and made anew
 * since it was opened). */
static bool still_named(int fd, const char *path)
{
    struct stat held, named;
    return fstat(fd, &held) == 0 && stat(path, &named) == 0 &&
           held.st_ino == named.st_ino && held.st_dev == named.st_dev;
}

/* The outcome of a refused flock (errno e) on fd, which it closes:
 * CORE_EBUSY when another process holds the lock, CORE_OK where the file
 * system has no locks (the store goes on unguarded), else CORE_EIO; each
 * logged. */
static enum core_status lock_refused(const struct sess_journal_config *cfg, const char *path,
                                     int fd, int e)
{
    enum core_status rc = CORE_EIO;
    if (e == EWOULDBLOCK) {
        char holder[160];
        lock_holder(fd, holder, sizeof holder);
        sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: %s is in use by another "
                  "process (%s): a state directory serves one attnd at a time",
                  cfg->dir, holder);
        rc = CORE_EBUSY;
    } else if (no_locks_here(e)) {
        sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: %s cannot be locked "
                  "(%s): going on without the lock; no other attnd may use %s",
                  path, strerror(e), cfg->dir);
        rc = CORE_OK;
    } else {
        sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: cannot lock %s: %s",
                  path, strerror(e));
    }
    close(fd);
    return rc;
}

/* Up to 8 opens: each LOCK found replaced after its lock is let go. */
int sess_dirlock_take(const struct sess_journal_config *cfg, enum core_status *rc)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/LOCK", cfg->dir);
    for (int tries = 0; tries < 8; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: cannot open %s: %s",
                      path, strerror(errno));
            break;
        }
        int r;
        while ((r = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR)
            ;
        if (r != 0) {
            *rc = lock_refused(cfg, path, fd, errno);
            return -1;
        }
        if (still_named(fd, path)) {
            lock_write_holder(fd, path, cfg);
            *rc = CORE_OK;
            return fd;
        }
        close(fd);
        if (tries == 7)
            sess_logf(cfg->log, cfg->log_arg, SESS_LOG_WARN, "journal: %s was replaced "
                      "each time it was locked (8 times): another process keeps making "
                      "it", path);
    }
    *rc = CORE_EIO;
    return -1;
}
