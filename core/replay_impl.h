/*
 * core/replay_impl.h — what the replay of a state directory (core/replay.c,
 * which reads the files) and the application of their records to the
 * store (core/replay_apply.c) share. Not for other modules.
 */
#ifndef ATTND_CORE_REPLAY_IMPL_H
#define ATTND_CORE_REPLAY_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_impl.h"

/* A session that records name but the replay does not hold, while the
 * sessions the journals start from are not all there. */
struct absent {
    char id[SESS_ID_MAX];           /* "": a free slot */
    uint64_t records;               /* its records not applied */
    bool deleted;                   /* a later DELETE: nothing of it is lost */
};

/* What a replay has seen. */
struct replay {
    uint64_t applied, skipped, failed, max_lsn;
    bool base_whole;                /* every session of the snapshot restored */
    struct absent *absent;          /* open addressing; n_slots a power of 2 */
    size_t n_slots, n_absent;
    uint64_t absent_untracked;      /* their records when memory ran out */
    uint64_t file_absent;           /* their records in the file being read */
    struct kv_dedup *dedup;         /* while the snapshot is read: its pages */
    bool whole_pages;               /* a journal's whole-session record held
                                       whole pages (a keyed fork, an import) */
    uint64_t journal_records;       /* records read from the journals */
    uint64_t old_format;            /* sessions read in an older encoding */
    uint64_t snapshot_bytes;        /* the size of the snapshot read */
    bool snapshot_begun;            /* it began with BEGIN (else an older
                                       attnd's: written again at start) */
    bool nomem;                     /* memory ran short rebuilding a session:
                                       the replay stops, the start fails */
    char nomem_id[SESS_ID_MAX];     /* that session's id ("": unread) */
};

/* Apply one record to the store; false when its payload is malformed or
 * its lsn out of range (treated as damage). snapshot: a snapshot's record
 * (a whole session, the first of its id standing). */
bool sess_replay_apply(struct sess_store *st, struct replay *rp, uint64_t lsn,
                       const void *p, size_t n, bool snapshot);

#endif
