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
    uint64_t max;
};

/* The generations in dir into *g (g->journal sorted, malloc'd); 0 or an
 * errno (g->journal freed). */
int sess_state_scan(const char *dir, struct gens *g);

/* Rename path to the first free path.setaside[.N], never read again. */
void sess_state_set_aside(const struct rdir *d, const char *path, const char *why);

/* Keep a copy of path, which stays where it is, as the first free
 * path.copy[.N] (a hard link when whole); whether one was kept. */
bool sess_state_keep_copy(const struct rdir *d, const char *path, const char *why,
                          bool whole);

/* Cut a damaged journal back to its first good bytes; false when it
 * failed (logged). */
bool sess_state_cut_back(const struct rdir *d, const char *path, size_t good, bool copied);

/* Whether every journal of generations [from, to) was set aside by an
 * earlier start. */
bool sess_state_set_aside_before(const struct rdir *d, uint64_t from, uint64_t to);

/* Log (info) how many kept files (set aside or copies) the directory
 * holds and their bytes, when there are any. */
void sess_state_log_kept(const struct rdir *d);

#endif
