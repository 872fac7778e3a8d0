/*
 * core/replay.h — what the journal's writer (core/durable.c) and its reader
 * (core/replay.c) share: the record types, the state files' names, and the
 * replay of a state directory at start-up. Not for other modules: the
 * store's journal is used through core/store.h.
 */
#ifndef ATTND_CORE_REPLAY_H
#define ATTND_CORE_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The type of a journal record (core/durable.c describes each). */
enum sess_rec {
    SESS_REC_SESS = 1, SESS_REC_APPEND, SESS_REC_TRUNC, SESS_REC_DELETE,
    SESS_REC_TOUCH, SESS_REC_FORK,
    SESS_REC_END,                   /* a snapshot's last record */
    SESS_REC_BEGIN                  /* a snapshot's first record */
};

/* The payload of SESS_REC_END: u32 type, f64 wall, u64 records before it. */
#define SESS_REC_END_BYTES 20u
/* The payload of SESS_REC_BEGIN: u32 type, f64 wall. */
#define SESS_REC_BEGIN_BYTES 12u

/* Uses without a change are journaled at most this often per session. */
#define SESS_TOUCH_EVERY_S 1.0

/* The wall clock in seconds (records carry it for the TTL). */
double sess_wall_now(void);

/* dir/<pre><gen as 16 hex digits><suf> into out[size]. */
void sess_state_name(char *out, size_t size, const char *dir, const char *pre,
                     uint64_t gen, const char *suf);

/* Whether name is <pre><16 hex digits> of a generation > 0 (into *g). */
bool sess_state_gen(const char *name, const char *pre, uint64_t *g);

/* What sess_replay_dir found. */
struct sess_replayed {
    uint64_t next_lsn;          /* the lsn after the last one read */
    uint64_t newest;            /* the newest generation found (0: none) */
    uint64_t snapshot_bytes;    /* the size of snapshot.<newest> when kept */
    /* Why a new snapshot must be written before anything is journaled
     * (for the log), or "" when snapshot.<newest> can be kept: it was read
     * whole, journal.<newest> is the only journal from its generation on
     * and holds no record, nothing read failed, was dropped or was set
     * aside, every session is in the current encoding and none expired
     * meanwhile, so the store holds exactly what that snapshot holds, and
     * that journal may take the changes. */
    char rewrite[160];
};

/*
 * Restore the newest snapshot in dir and replay the journals after it into
 * st (empty, restoring), logging what was kept and dropped; *out says
 * what was found. CORE_EIO when a damaged journal could not be cut back to
 * its records before the damage; CORE_ESTORAGE when dir cannot be listed
 * or a file in it cannot be read for a reason that says nothing of what it
 * holds (too many files open, memory short, a permission), or memory runs
 * short rebuilding a session (the record may be good), or a damaged
 * journal's copy cannot be made for such a reason, and then no file in dir
 * was changed; CORE_ESTORAGE too when the copy of a damaged snapshot, or
 * of a journal holding changes to sessions not restored, cannot be made
 * for such a reason (a journal may have been cut back, with its copy). Both are logged; the store must not write to
 * dir then.
 */
enum core_status sess_replay_dir(struct sess_store *st, const char *dir, sess_log_fn log,
                                 void *log_arg, struct sess_replayed *out);

#endif
