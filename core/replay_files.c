/*
 * core/replay_files.c — the files of a state directory as a replay
 * (core/replay.c) meets them: their names and generations, and what is done
 * with a damaged one. A file nothing of which is applied is set aside:
 * renamed to the first free NAME.setaside[.N], never read again. A file the
 * replay used stays where it is, and a copy is kept as the first free
 * NAME.copy[.N], its holes kept (a sparse file's copy takes the room of
 * its data, not of its size); a damaged journal is cut back to the
 * records before its damage. Files older than a damaged newest snapshot
 * that the start did not use are set aside as well. An earlier kept file
 * is never replaced or removed, and a start says how many there are
 * (sess_state_count_kept).
 *
 * The names tell a file set aside from a copy: a journal missing from the
 * sequence is passed over only when it was set aside (an earlier start then
 * wrote the journals after it without it), never when only a copy of it is
 * there (it was applied, and later journals build on it). An attnd before
 * these names kept both as NAME.damaged[.N]; such a journal.G.damaged is
 * still taken as set aside, as that attnd took it (this attnd writes no
 * .damaged file, so there is no copy of its own to mistake for one).
 */
#include "replay_files.h"
#include "replay.h"
#include "store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sess_state_name(char *out, size_t size, const char *dir, const char *pre,
                     uint64_t gen, const char *suf)
{
    snprintf(out, size, "%s/%s%016" PRIx64 "%s", dir, pre, gen, suf);
}

/* The suffixes of kept files: set aside, a copy, and either by an attnd
 * before these two. */
#define SET_ASIDE "setaside"
#define COPY "copy"
#define OLD_KEPT "damaged"

/* The k-th name a kept path may take: path.SUF, path.SUF.1, ... */
static void kept_name(char *out, size_t size, const char *path, const char *suf,
                      unsigned k)
{
    if (k == 0)
        snprintf(out, size, "%s.%s", path, suf);
    else
        snprintf(out, size, "%s.%s.%u", path, suf, k);
}

/* Tries of kept_name before giving up: an earlier kept file is never
 * removed or replaced, it may be the only copy of what was lost. */
#define KEPT_NAMES 1000u

/* Rename path to the first free path.setaside[.N], never read again,
 * saying so and why. */
void sess_state_set_aside(const struct rdir *d, const char *path, const char *why)
{
    char kept[1200];
    int e = EEXIST;
    for (unsigned k = 0; e == EEXIST && k < KEPT_NAMES; k++) {
        kept_name(kept, sizeof kept, path, SET_ASIDE, k);
        struct stat sb;
        /* link fails on a name taken; where hard links are not supported,
         * rename to a name that is free */
        if (link(path, kept) == 0)
            e = unlink(path) == 0 ? 0 : errno;
        else if ((e = errno) != EEXIST)
            e = lstat(kept, &sb) == 0 ? EEXIST : rename(path, kept) == 0 ? 0 : errno;
    }
    if (e == 0)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s set aside as %s: %s",
                  path, kept, why);
    else
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s could not be set aside "
                  "as %s (%s): %s", path, kept, strerror(e), why);
}

/* Copy the bytes [at, end) of in to the same offsets of out (end < 0: up
 * to the end of in, wherever the copy finds it); 0 or an errno. */
static int copy_range(int in, int out, off_t at, off_t end)
{
    char buf[1 << 16];
    while (end < 0 || at < end) {
        size_t want = end >= 0 && end - at < (off_t)sizeof buf ? (size_t)(end - at)
                                                                : sizeof buf;
        ssize_t n = pread(in, buf, want, at);
        if (n == 0)
            break;                  /* in ended early (it shrank): no more */
        if (n < 0) {
            if (errno != EINTR)
                return errno;
            continue;
        }
        for (ssize_t w = 0, k; w < n; w += k > 0 ? k : 0)
            if ((k = pwrite(out, buf + w, (size_t)(n - w), at + w)) < 0 && errno != EINTR)
                return errno;
        at += n;
    }
    return 0;
}

/*
 * Copy in, of size bytes, into the empty out, its holes kept: only the
 * data extents SEEK_DATA and SEEK_HOLE find are written, and out is then
 * made size bytes long, so a hole at the end stays one too (a damaged
 * journal may be mostly hole: one of 64 GiB, copied whole, filled a disk).
 * Where SEEK_DATA is not known (EINVAL: an old kernel or file system), the
 * whole file is copied, as a file with no holes is. 0 or an errno.
 *
 * The extents are copied with pread and pwrite, not copy_file_range(2),
 * which would spare the bytes their trip through user space: it needs
 * this loop anyway as its fallback (EXDEV across file systems on most
 * kernels, EINVAL or EOPNOTSUPP on some file systems, ENOSYS under a
 * seccomp filter), for a copy made once per damaged file at a start, now
 * of its data alone; and with pread the copy reads the file with the
 * calls the replay reads it with, so a disk's read error (EIO: no copy,
 * the damaged tail dropped) meets both alike, and
 * tests/unit/test_replay_reads.c fails both the same way.
 */
static int copy_extents(int in, int out, off_t size)
{
    for (off_t at = 0; at < size;) {
        off_t data = lseek(in, at, SEEK_DATA);
        if (data < 0 && errno == EINVAL && at == 0)
            return copy_range(in, out, 0, -1);
        if (data < 0 && errno == ENXIO)
            break;                  /* no data from at on: a hole to the end */
        if (data < 0)
            return errno;
        if (data >= size)
            break;                  /* in grew: only its first size bytes */
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return errno;
        if (hole <= data) {         /* the file changed under the seeks: the rest whole */
            int e = copy_range(in, out, data, size);
            return e != 0 ? e : ftruncate(out, size) == 0 ? 0 : errno;
        }
        int e = copy_range(in, out, data, hole < size ? hole : size);
        if (e != 0)
            return e;
        at = hole;
    }
    return ftruncate(out, size) == 0 ? 0 : errno;
}

/* Copy the file from into to, which must not exist, its holes kept
 * (copy_extents); 0 or an errno (EEXIST: to exists and is left as it is). */
static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), e = 0;
    struct stat sb;
    if (in >= 0 && fstat(in, &sb) != 0) {
        e = errno;
        close(in);
        return e;
    }
    int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0)
        e = errno;
    if (e == 0)
        e = copy_extents(in, out, sb.st_size);
    if (e == 0 && fsync(out) != 0)
        e = errno;
    if (in >= 0)
        close(in);
    if (out >= 0) {
        close(out);
        if (e != 0)
            unlink(to);             /* only a partial copy of our own */
    }
    return e;
}

bool sess_state_error_transient(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM || e == EAGAIN || e == EINTR ||
           e == ENOBUFS || e == EACCES || e == EPERM;
}

/*
 * Keep a copy of path, which stays where it is (the replay used it, and a
 * later start must find it again: a new snapshot removes it), as the first
 * free path.copy[.N], saying so and why: a hard link when whole is true
 * (the file is not changed after), a copy otherwise. 0, or the errno of
 * the failure: logged unless sess_state_error_transient (the caller says
 * then why the start fails).
 */
int sess_state_keep_copy(const struct rdir *d, const char *path, const char *why,
                         bool whole)
{
    char kept[1200];
    int e = EEXIST;
    for (unsigned k = 0; e == EEXIST && k < KEPT_NAMES; k++) {
        kept_name(kept, sizeof kept, path, COPY, k);
        if (whole && link(path, kept) == 0)
            e = 0;
        else if (whole && errno == EEXIST)
            e = EEXIST;
        else
            e = copy_file(path, kept);
    }
    if (e != 0) {
        if (!sess_state_error_transient(e))
            sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: no copy could be "
                      "kept as %s (%s): %s", path, kept, strerror(e), why);
        return e;
    }
    sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s: a copy is kept as %s: %s",
              path, kept, why);
    return 0;
}

/*
 * Cut a damaged journal back to its first good bytes, the records before
 * its damage: they were applied, and the journals written from now on
 * build on them, so the next start must not meet the damage again (it
 * would set those journals aside). A copy of the whole file is kept first
 * (why says why), once the file is open for the cut, so that no copy is
 * made of a file that cannot be cut. ftruncate needs no free space: with
 * no room for a copy (ENOSPC and the like) the journal is cut back all the
 * same, the damaged tail dropped without a copy; a copy that cannot be
 * made for a reason that says nothing of the room (sess_state_error_transient)
 * fails the start instead, nothing changed.
 */
enum state_cut sess_state_cut_back(const struct rdir *d, const char *path, size_t good,
                                   const char *why)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int e = fd < 0 ? errno : sess_state_keep_copy(d, path, why, false);
    if (fd >= 0 && e != 0 && sess_state_error_transient(e)) {
        close(fd);
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s is damaged, and no copy "
                  "of it could be kept before it is cut back (%s): not starting; nothing "
                  "in the state directory was changed", path, strerror(e));
        return STATE_CUT_NOT_NOW;
    }
    bool copied = fd >= 0 && e == 0;
    if (fd < 0 || ftruncate(fd, (off_t)good) != 0 || fsync(fd) != 0) {
        if (fd >= 0) {
            e = errno;
            close(fd);
        }
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s could not be cut back to "
                  "the %zu bytes before its damage (%s): not starting, the changes "
                  "acknowledged from now on would follow the damage and be set aside at "
                  "the next start", path, good, strerror(e));
        return STATE_CUT_FAILED;
    }
    close(fd);
    if (!copied)
        sess_logf(d->log, d->log_arg, SESS_LOG_WARN, "journal: %s cut back to the %zu bytes "
                  "before its damage: the damaged tail was dropped without a copy",
                  path, good);
    return STATE_CUT_DONE;
}

/* Whether every journal of generations [from, to) was set aside by an
 * earlier start (which then wrote the later ones without them): a
 * journal.G.setaside, or a journal.G.damaged of an older attnd (the top
 * of this file says why); a journal.G.copy is not. */
bool sess_state_set_aside_before(const struct rdir *d, uint64_t from, uint64_t to)
{
    char kept[1100], old[1100];
    struct stat sb;
    if (to - from > 64)
        return false;
    for (uint64_t gen = from; gen < to; gen++) {
        sess_state_name(kept, sizeof kept, d->dir, "journal.", gen, "." SET_ASIDE);
        sess_state_name(old, sizeof old, d->dir, "journal.", gen, "." OLD_KEPT);
        if (stat(kept, &sb) != 0 && stat(old, &sb) != 0)
            return false;
    }
    return true;
}

bool sess_state_journals_from(const struct gens *g, uint64_t from, uint64_t to)
{
    uint64_t n = 0;                 /* g->journal is sorted, each once */
    for (size_t i = 0; i < g->n_journal; i++)
        n += g->journal[i] >= from && g->journal[i] < to;
    return from <= to && n == to - from;
}

void sess_state_each_older(const char *dir, uint64_t gen,
                           void (*fn)(const char *path, void *arg), void *arg)
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd)) != NULL) {
        uint64_t v;
        char path[1100];
        if ((sess_state_gen(e->d_name, "snapshot.", &v) ||
             sess_state_gen(e->d_name, "journal.", &v)) && v < gen) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            fn(path, arg);
        }
    }
    if (dd)
        closedir(dd);
}

struct aside_arg {
    const struct rdir *d;
    const char *why;
};

static void aside_one(const char *path, void *arg)
{
    const struct aside_arg *a = arg;
    sess_state_set_aside(a->d, path, a->why);
}

void sess_state_set_aside_older(const struct rdir *d, uint64_t gen, const char *why)
{
    /* the names set aside no longer match: none is met twice */
    struct aside_arg a = {d, why};
    sess_state_each_older(d->dir, gen, aside_one, &a);
}

/* Whether name is a kept file: <pre><gen>.<suffix>[.N] of a state file. */
static bool is_kept(const char *name)
{
    static const char *const pres[] = {"snapshot.", "journal."};
    static const char *const sufs[] = {SET_ASIDE, COPY, OLD_KEPT};
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        char base[32];
        size_t k = strlen(pres[i]) + 16;
        uint64_t g;
        if (strlen(name) <= k || name[k] != '.')
            continue;
        memcpy(base, name, k);
        base[k] = '\0';
        if (!sess_state_gen(base, pres[i], &g))
            continue;
        for (size_t j = 0; j < sizeof sufs / sizeof sufs[0]; j++) {
            const char *rest = name + k + 1;
            size_t n = strlen(sufs[j]);
            if (strncmp(rest, sufs[j], n) != 0)
                continue;
            rest += n;
            if (!*rest || (rest[0] == '.' && rest[1] &&
                           strspn(rest + 1, "0123456789") == strlen(rest + 1)))
                return true;
        }
    }
    return false;
}

int sess_state_count_kept(const char *dir, uint64_t *files, uint64_t *bytes)
{
    *files = *bytes = 0;
    DIR *dd = opendir(dir);
    if (!dd)
        return errno;
    struct dirent *e;
    while ((errno = 0, e = readdir(dd)) != NULL) {
        struct stat sb;
        if (is_kept(e->d_name) &&
            fstatat(dirfd(dd), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
            ++*files;
            *bytes += (uint64_t)sb.st_size;
        }
    }
    int err = errno;                /* readdir's own error, or 0 at the end */
    closedir(dd);
    return err;
}

void sess_state_log_kept(const struct rdir *d)
{
    uint64_t files, bytes;
    if (sess_state_count_kept(d->dir, &files, &bytes) == 0 && files > 0)
        sess_logf(d->log, d->log_arg, SESS_LOG_INFO, "journal: files kept for a look: %"
                  PRIu64 " (%" PRIu64 " bytes), copies of damaged files and files set aside "
                  "(NAME.copy, NAME.setaside, NAME.damaged), which attnd never reads or "
                  "removes", files, bytes);
}

bool sess_state_gen(const char *name, const char *pre, uint64_t *g)
{
    size_t k = strlen(pre);
    if (strncmp(name, pre, k) != 0 || strlen(name) != k + 16)
        return false;
    uint64_t v = 0;
    for (const char *q = name + k; *q; q++) {
        int x = *q >= '0' && *q <= '9' ? *q - '0'
              : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
        if (x < 0)
            return false;
        v = v << 4 | (uint64_t)x;
    }
    *g = v;
    return v > 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The generations in dir into *g; 0 or an errno (g->journal freed). */
int sess_state_scan(const char *dir, struct gens *g)
{
    memset(g, 0, sizeof *g);
    DIR *dd = opendir(dir);
    if (!dd)
        return errno;
    size_t cap = 0;
    struct dirent *e;
    int err = 0;
    while (err == 0 && (errno = 0, e = readdir(dd)) != NULL) {
        uint64_t v;
        if (sess_state_gen(e->d_name, "snapshot.", &v)) {
            if (v > g->snapshot) {
                g->older = g->snapshot;
                g->snapshot = v;
            } else if (v > g->older && v < g->snapshot) {
                g->older = v;
            }
        } else if (sess_state_gen(e->d_name, "journal.", &v)) {
            if (g->n_journal == cap) {
                cap = cap ? cap * 2 : 8;
                uint64_t *q = realloc(g->journal, cap * sizeof *q);
                if (!q) {
                    err = ENOMEM;
                    break;
                }
                g->journal = q;
            }
            g->journal[g->n_journal++] = v;
        } else {
            continue;
        }
        if (v > g->max)
            g->max = v;
    }
    if (err == 0 && !e)
        err = errno;                /* readdir's own error, or 0 at the end */
    closedir(dd);
    if (err != 0) {
        free(g->journal);
        g->journal = NULL;
        return err;
    }
    if (g->n_journal > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(g->journal, g->n_journal, sizeof *g->journal, cmp_u64);
    return 0;
}
