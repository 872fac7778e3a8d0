/*
 * core/persist.h — moving a session between replicas: a held session as
 * bytes (export), and a new session of this store from such bytes (import).
 * The bytes are core/persist.c's encoding of a session, the one the state
 * files and the journal use (format in persist.c and the README).
 *
 * Import reads the encoding piece by piece as it arrives (an upload is
 * never held whole): the header is checked (magic, version, byte order,
 * every length against the bytes announced, the settings) and then the
 * limits, and the rows' bytes are claimed in the store before they are
 * allocated; each piece of rows is copied into the new session's pages
 * and checked there (finite values), and the checksum and the end of the
 * bytes are checked last. A refusal frees what was built at once and
 * changes nothing in the store.
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
    size_t max_bytes;           /* the body's bytes at most when their number
                                   is not announced (the transport's cap) */
};

/* A held session as bytes (magic, version, settings, rows in their stored
 * form, CRC-32C), malloc'd into *out. CORE_ENOMEM. */
enum core_status sess_export(struct sess_store *st, struct sess *s,
                             void **out, size_t *n);

/*
 * sess_export piece by piece, from a snapshot (a session export streamed
 * over HTTP without a buffer of its own):
 *   sess_export_begin  a snapshot of held session s (O(pages): its cache
 *                      forked, every page shared, and the bytes before the
 *                      rows written, the clock read now); s may be released
 *                      and changed at once after: an append into the shared
 *                      last page copies it, a truncate, roll or delete only
 *                      drops references, so the snapshot's rows stay as
 *                      they were. NULL with *rc = CORE_ENOMEM.
 *   sess_export_size   its bytes in all (what sess_export gives then)
 *   sess_export_read   the next up to n of them into buf: the rows copied
 *                      page run by page run from the shared pages, their
 *                      CRC-32C computed as they go, the checksum last;
 *                      fewer than n only at the end (0 past it); once
 *                      the rows are out it lets go of the snapshot's pages
 *   sess_export_free   lets go of the snapshot's pages if that has not
 *                      happened yet (a page its session let go meanwhile
 *                      is freed now); NULL: no-op
 * The bytes are sess_export's at the moment of begin, byte for byte. The
 * snapshot's pages count in st's bytes until it is freed, so st must
 * outlive it. One thread at a time per exporter; the session's own
 * requests may run meanwhile on other threads.
 */
struct sess_exporter;
struct sess_exporter *sess_export_begin(struct sess_store *st, struct sess *s,
                                        enum core_status *rc);
size_t sess_export_size(const struct sess_exporter *ex);
size_t sess_export_read(struct sess_exporter *ex, void *buf, size_t n);
void sess_export_free(struct sess_exporter *ex);

/*
 * The bytes sess_export would give for held session s now (what
 * sess_export_size of a snapshot begun now says), counted without writing
 * them or taking a snapshot: a HEAD of an export.
 */
size_t sess_export_bytes(struct sess_store *st, struct sess *s);

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
 * Nothing is allocated for the rows before the limits are checked and
 * their bytes claimed. A body with several faults is refused for the
 * first one found in reading order (its checksum is compared last).
 */
enum core_status sess_import(struct sess_store *st, const void *p, size_t n,
                             const struct sess_import_limits *lim, char *id,
                             char *why);

/*
 * sess_import piece by piece (sess_import is begin, one feed, end, free):
 *   sess_import_begin  an import into st of `total` bytes (SIZE_MAX: not
 *                      known ahead; then a short or long body is found
 *                      out only as it ends); lim may be NULL. NULL when
 *                      memory is short.
 *   sess_import_feed   the next n bytes: CORE_OK, or the refusal (the
 *                      first one found, as sess_import's; later feeds do
 *                      nothing and return it). Everything built is freed
 *                      at a refusal.
 *   sess_import_end    the bytes ended: checks the end and the checksum and
 *                      links the session under a new id (into
 *                      id[SESS_ID_MAX]); sess_import's statuses. held
 *                      non-NULL: on CORE_OK the session is left held into
 *                      *held (sess_release it), as sess_create_idem's.
 *   sess_import_set_idem  the new session's idempotency key (store.h;
 *                      NULL: none, as before the call), for end: the key
 *                      taken already is CORE_EEXIST there; the bytes' own
 *                      key, if any, is never taken
 *   sess_import_why    the reason of a refusal ("" before one)
 *   sess_import_free   frees it and whatever it built (a refused, ended or
 *                      abandoned import: the client went away); NULL: no-op.
 * The store must outlive the import. One thread at a time per import.
 */
struct sess_importer;
struct sess_importer *sess_import_begin(struct sess_store *st,
                                        const struct sess_import_limits *lim,
                                        size_t total);
enum core_status sess_import_feed(struct sess_importer *im, const void *p, size_t n);
enum core_status sess_import_end(struct sess_importer *im, char *id, struct sess **held);
void sess_import_set_idem(struct sess_importer *im, const struct sess_idem *idem);
const char *sess_import_why(const struct sess_importer *im);
void sess_import_free(struct sess_importer *im);

#endif
