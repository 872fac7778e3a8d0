/*
 * core/persist.h — moving a session between replicas: a held session as
 * bytes (export), and a new session of this store from such bytes (import).
 * The bytes are core/persist.c's encoding of a session, the one the state
 * files and the journal use (format in persist.c and the README).
 *
 * Import reads the whole encoding and checks it (magic, version, byte
 * order, every length against the bytes present, the settings, the
 * checksum) and then the limits, before it allocates the rows: a refused
 * import changes nothing in the store.
 */
#ifndef ATTND_CORE_PERSIST_H
#define ATTND_CORE_PERSIST_H

#include <stddef.h>

#include "status.h"
#include "store.h"

/* Room for sess_import's reason, with its NUL. */
#define SESS_WHY_MAX 160

/* What an importing replica allows (0 = no limit). */
struct sess_import_limits {
    size_t max_row_elements;    /* heads * d_k and kv_heads * (d_k + d_v) */
    size_t max_tokens;          /* the imported session's max_tokens */
};

/* A held session as bytes (magic, version, settings, rows in their stored
 * form, CRC-32C), malloc'd into *out. CORE_ENOMEM. */
enum core_status sess_export(struct sess_store *st, struct sess *s,
                             void **out, size_t *n);

/*
 * A new session from sess_export's bytes p[n], under a new id of this store
 * (into id[SESS_ID_MAX]), journaled as a create is. lim may be NULL. Errors,
 * with why[SESS_WHY_MAX] (may be NULL) saying what was wrong:
 *   CORE_ECORRUPT   not one whole session: truncated, trailing bytes, a bad
 *                   checksum, another magic, version or byte order, a bad
 *                   setting or a non-finite stored value
 *   CORE_ELIMIT     over a limit of lim, or more bytes than the whole
 *                   max_cache_bytes
 *   CORE_ECAPACITY  it would fit an emptier store (max_sessions, or
 *                   max_cache_bytes with what is held now)
 *   CORE_ENOMEM, CORE_ESTORAGE, CORE_EIO as sess_create
 * Nothing is allocated for the rows before the limits are checked.
 */
enum core_status sess_import(struct sess_store *st, const void *p, size_t n,
                             const struct sess_import_limits *lim, char *id,
                             char *why);

#endif
