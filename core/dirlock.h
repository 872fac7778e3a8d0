/*
 * core/dirlock.h — the state directory's LOCK, taken by the session store
 * (core/durable.c) so that one process at a time uses a directory.
 */
#ifndef ATTND_CORE_DIRLOCK_H
#define ATTND_CORE_DIRLOCK_H

#include "status.h"
#include "store.h"

/* cfg->dir's LOCK taken, with its holder ("pid N on HOST") written in: its
 * fd, to keep open for as long as the directory is used. Else -1 with *rc:
 * CORE_EBUSY when another process holds it, CORE_EIO when LOCK cannot be
 * opened or locked, CORE_OK where the file system has no locks (ENOLCK on
 * an NFS mount without a lock daemon, EOPNOTSUPP): the caller goes on
 * unguarded. Every refusal is logged through cfg->log. A LOCK
 * removed and made anew between the open and the lock is opened again, so
 * that two processes never hold locks on two different files of that
 * name. */
int sess_dirlock_take(const struct sess_journal_config *cfg, enum core_status *rc);

#endif
