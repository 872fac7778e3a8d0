/*
 * core/replay_files.h — the files of a state directory as core/replay.c
 * meets them (core/replay_files.c): their generations, and setting aside,
 * copying and cutting back the damaged ones. Not for other modules.
 */
#ifndef ATTND_CORE_REPLAY_FILES_H
#define ATTND_CORE_REPLAY_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Where a replay reads and logs. */
struct rdir {
    const char *dir;
    sess_log_fn log;
    void *log_arg;
};

/* Generations of snapshot.G and journal.G files in dir. */
struct gens {
    uint64_t *journal;
    size_t n_journal;
    uint64_t snapshot;              /* newest; 0 = none */
    uint64_t older;                 /* the newest before it; 0 = none */
    uint64_t max;
};

/* The generations in dir into *g (g->journal sorted, malloc'd); 0 or an
 * errno (g->journal freed). */
int sess_state_scan(const char *dir, struct gens *g);

/* Rename path to the first free path.setaside[.N], never read again. */
void sess_state_set_aside(const struct rdir *d, const char *path, const char *why);

/*
 * Whether errno e, from opening, reading or copying a state file, says
 * nothing of the file or of the room on the device: too many files open,
 * memory short (for the reader's buffer too), interrupted, to be tried
 * again (EAGAIN: the journal reader's, when the file got shorter while it
 * was read), or a permission (a mistake of whoever set the directory up).
 * The start fails then without changing anything, and a later one goes
 * on. Any other errno is taken as what it says: EIO as damage, ENOSPC as
 * no room for a copy.
 */
bool sess_state_error_transient(int e);

/* Whether every journal of generations [from, to) is in g. */
bool sess_state_journals_from(const struct gens *g, uint64_t from, uint64_t to);

/* fn(path, arg) for every snapshot.G and journal.G of dir with G < gen
 * (fn may rename or remove it). */
void sess_state_each_older(const char *dir, uint64_t gen,
                           void (*fn)(const char *path, void *arg), void *arg);

/* Set aside every snapshot.G and journal.G of dir with G < gen (why: why,
 * for the log line each gets). */
void sess_state_set_aside_older(const struct rdir *d, uint64_t gen, const char *why);

/* Keep a copy of path, which stays where it is, as the first free
 * path.copy[.N] (a hard link when whole); 0, or the errno of the failure
 * (logged unless sess_state_error_transient). */
int sess_state_keep_copy(const struct rdir *d, const char *path, const char *why,
                         bool whole);

/* How sess_state_cut_back ended. */
enum state_cut {
    STATE_CUT_DONE,         /* cut back, with a copy or without one (no room) */
    STATE_CUT_FAILED,       /* not cut back (logged): the start fails */
    STATE_CUT_NOT_NOW,      /* neither copied nor cut back, for a reason that
                               says nothing of it (logged): the start fails,
                               nothing changed */
};

/* Keep a copy of a damaged journal (why: why, for the log) and cut it
 * back to its first good bytes. */
enum state_cut sess_state_cut_back(const struct rdir *d, const char *path, size_t good,
                                   const char *why);

/* Whether every journal of generations [from, to) was set aside by an
 * earlier start. */
bool sess_state_set_aside_before(const struct rdir *d, uint64_t from, uint64_t to);

/* How many kept files (set aside or copies) dir holds, and their bytes;
 * 0 or the errno of a directory that could not be read (counts so far). */
int sess_state_count_kept(const char *dir, uint64_t *files, uint64_t *bytes);

/* Log (info) how many kept files (set aside or copies) the directory
 * holds and their bytes, when there are any. */
void sess_state_log_kept(const struct rdir *d);

#endif
