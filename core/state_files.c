/*
 * core/state_files.c — saving the store to one file per session and
 * restoring it (sess_store_save / sess_store_load of store.h), and the log
 * sink the state files and the journal share. A file holds one session in
 * core/persist.c's encoding (sess_encode / sess_decode).
 *
 * One file per session, "<id>.sess", written atomically: ".<id>.tmp" is
 * written, fsync'd and renamed over the old file, then the directory is
 * fsync'd. Files of sessions that no longer exist are removed after a save.
 * A bad file is logged and skipped by a load; a journaled store's start,
 * which removes the <id>.sess files once they are in its snapshot, first
 * sets a skipped one aside (NAME.setaside, core/replay_files.c) so that
 * what it held is kept for a look as a damaged journal's is.
 */
#include "store_impl.h"
#include "replay_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PERSIST_SUFFIX ".sess"

/* ---- logging ------------------------------------------------------------ */

void sess_logf(sess_log_fn log, void *arg, enum sess_log_level level,
               const char *fmt, ...)
{
    if (!log)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log(arg, level, msg);
}

/* ---- saving ------------------------------------------------------------- */

static void path_of(char *out, size_t size, const char *dir, const char *pre,
                    const char *id, const char *suf)
{
    snprintf(out, size, "%s/%s%s%s", dir, pre, id, suf);
}

/* Write one held session to dir/<id>.sess atomically. */
static bool save_one(struct sess_store *st, struct sess *s, const char *dir,
                     sess_log_fn log, void *log_arg)
{
    char tmp[4096], fin[4096];
    path_of(tmp, sizeof tmp, dir, ".", s->id, ".tmp");
    path_of(fin, sizeof fin, dir, "", s->id, PERSIST_SUFFIX);
    void *bytes;
    size_t n;
    if (sess_encode(st, s, &bytes, &n) != CORE_OK) {
        sess_logf(log, log_arg, SESS_LOG_WARN, "session save: %s: out of memory", s->id);
        return false;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        sess_logf(log, log_arg, SESS_LOG_WARN, "session save: cannot create %s: %s", tmp,
              strerror(errno));
        free(bytes);
        return false;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (char *)bytes + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    free(bytes);
    bool ok = done == n && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    if (ok && rename(tmp, fin) != 0)
        ok = false;
    if (!ok) {
        sess_logf(log, log_arg, SESS_LOG_WARN, "session save: writing %s failed: %s", fin,
              strerror(errno));
        unlink(tmp);
    }
    return ok;
}

/* True for a name "<something>.sess". */
static bool is_sess_file(const char *name)
{
    size_t n = strlen(name), k = strlen(PERSIST_SUFFIX);
    return n > k && name[0] != '.' && strcmp(name + n - k, PERSIST_SUFFIX) == 0;
}

/* Is the session file `name` one of the ids in ids[n]? */
static bool saved_now(const char *name, char (*ids)[SESS_ID_MAX], size_t n)
{
    size_t k = strlen(name) - strlen(PERSIST_SUFFIX);
    for (size_t i = 0; i < n; i++)
        if (strlen(ids[i]) == k && memcmp(ids[i], name, k) == 0)
            return true;
    return false;
}

/* Remove *.sess files of sessions not saved now, and stray temp files. */
static void remove_stale(const char *dir, char (*ids)[SESS_ID_MAX], size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        bool stale_tmp = e->d_name[0] == '.' && len > 4 &&
                         strcmp(e->d_name + len - 4, ".tmp") == 0;
        bool stale = is_sess_file(e->d_name) && !saved_now(e->d_name, ids, n);
        if (stale || stale_tmp)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

void sess_remove_state_files(const char *dir)
{
    remove_stale(dir, NULL, 0);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Take a reference on every linked session (the store mutex is released
 * before any of them is locked: lock order). */
struct sess **sess_hold_all(struct sess_store *st, size_t *n)
{
    pthread_mutex_lock(&st->mu);
    struct sess **all = malloc((st->count ? st->count : 1) * sizeof *all);
    size_t k = 0;
    for (struct sess *s = st->lru_head; all && s; s = s->lru_next) {
        s->refs++;
        all[k++] = s;
    }
    pthread_mutex_unlock(&st->mu);
    *n = k;
    return all;
}

enum core_status sess_store_save(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        sess_logf(log, log_arg, SESS_LOG_WARN, "session save: cannot create %s: %s", dir,
              strerror(errno));
        return CORE_EIO;
    }
    size_t n;
    struct sess **all = sess_hold_all(st, &n);
    char (*ids)[SESS_ID_MAX] = calloc(n ? n : 1, sizeof *ids);
    if (!all || !ids) {
        for (size_t i = 0; all && i < n; i++) {
            pthread_mutex_lock(&all[i]->mu);
            sess_unhold(st, all[i]);
        }
        free(all);
        free(ids);
        return CORE_ENOMEM;
    }
    size_t saved = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        struct sess *s = all[i];
        pthread_mutex_lock(&s->mu);
        if (save_one(st, s, dir, log, log_arg))
            memcpy(ids[saved++], s->id, SESS_ID_MAX);
        else
            ok = false;
        sess_unhold(st, s);
    }
    if (ok)
        remove_stale(dir, ids, saved);
    fsync_dir(dir);
    free(all);
    free(ids);
    return ok ? CORE_OK : CORE_EIO;
}

/* ---- loading ------------------------------------------------------------ */

/* The whole file at path, malloc'd; NULL with *why set and *err the
 * errno (ENOMEM: memory short). */
static void *slurp(const char *path, size_t *n, const char **why, int *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    void *p = NULL;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        *err = errno;
        *why = strerror(errno);
    } else if (!(p = malloc(sb.st_size > 0 ? (size_t)sb.st_size : 1))) {
        *err = ENOMEM;
        *why = "out of memory";
    } else {
        size_t done = 0;
        while (done < (size_t)sb.st_size) {
            ssize_t r = read(fd, (char *)p + done, (size_t)sb.st_size - done);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            done += (size_t)r;
        }
        *n = done;
    }
    if (fd >= 0)
        close(fd);
    return p;
}

/* Restore the file at path as a linked session; NULL or the reason, *now
 * set when it says nothing of the file: it could not be read for such a
 * reason (sess_state_error_transient), or memory ran short decoding it. */
static const char *restore(struct sess_store *st, const char *path, bool *now)
{
    size_t n = 0;
    const char *why = NULL;
    int err = 0;
    *now = false;
    void *bytes = slurp(path, &n, &why, &err);
    if (!bytes) {
        *now = sess_state_error_transient(err);
        return why;
    }
    struct sess *s;
    double idle = 0;
    uint32_t version;                   /* not needed: the start writes a snapshot */
    enum core_status rc = sess_decode(bytes, n, &s, &idle, &version, &why);
    free(bytes);
    if (rc != CORE_OK) {
        *now = rc == CORE_ENOMEM;
        return why;
    }
    rc = sess_link(st, s, idle, NULL);
    if (rc != CORE_OK) {
        sess_destroy(s);
        return rc == CORE_EEXIST ? "id already in use" : core_status_text(rc);
    }
    return NULL;
}

enum core_status sess_store_load(struct sess_store *st, const char *dir,
                                 sess_log_fn log, void *log_arg)
{
    size_t found;
    return sess_load_state_files(st, dir, log, log_arg, false, &found);
}

enum core_status sess_load_state_files(struct sess_store *st, const char *dir,
                                       sess_log_fn log, void *log_arg, bool set_aside,
                                       size_t *found)
{
    const struct rdir rd = {.dir = dir, .log = log, .log_arg = log_arg};
    *found = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return CORE_OK;
        sess_logf(log, log_arg, SESS_LOG_WARN, "session load: cannot open %s: %s", dir,
              strerror(errno));
        return CORE_EIO;
    }
    size_t loaded_n = 0, skipped = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_sess_file(e->d_name))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bool now;
        const char *why = restore(st, path, &now);
        if (why && now) {
            sess_logf(log, log_arg, SESS_LOG_WARN, "session load: %s cannot be read now "
                      "(%s): the files after it are not read either", path, why);
            closedir(d);
            *found = loaded_n + skipped + 1;
            return CORE_ESTORAGE;
        }
        if (why) {
            sess_logf(log, log_arg, SESS_LOG_WARN, "session load: skipping %s: %s", path, why);
            skipped++;
            /* damaged for good: renamed (to a name the loop does not take)
             * before the start removes the <id>.sess files it restored */
            if (set_aside)
                sess_state_set_aside(&rd, path, "a session file of an older attnd that "
                                     "could not be restored; nothing of it is applied");
        } else {
            loaded_n++;
        }
    }
    closedir(d);
    *found = loaded_n + skipped;
    if (loaded_n + skipped > 0)
        sess_logf(log, log_arg, skipped ? SESS_LOG_WARN : SESS_LOG_INFO,
                  "session load: %zu restored, %zu skipped",
                  loaded_n, skipped);
    return CORE_OK;
}
