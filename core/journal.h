/*
 * core/journal.h — an append-only file of checksummed records (the write-ahead
 * journal of --state-dir, and the snapshot file, which has the same framing).
 *
 * File: a 24-byte header, then records.
 *   header: 8-byte magic ("ATTNDJNL" or "ATTNDSNP"), u32 version = 1,
 *           u32 byte-order mark 0x01020304, u64 generation
 *   version: 1 for both, and it stays 1: every attnd before refuses a file
 *           of another version whole, so a snapshot of version 2 would
 *           restore nothing after a rollback to one. What a snapshot adds
 *           (its BEGIN and END records, core/durable.c) are records that an
 *           older attnd drops one by one, reading the sessions around them.
 *   record: u32 len, u64 lsn, (len - 8) payload bytes, u32 crc
 *           len counts lsn and payload; crc is CRC-32C of those len bytes
 * Integers are in host byte order (the mark makes a file from another byte
 * order unreadable rather than misread). The checksum trails the record, so
 * a record is written in one pass, and a record cut short by a crash (its
 * length reaching past the end of the file, or its checksum not matching)
 * is told apart from a whole one.
 *
 * Appending is all or nothing: a record is written with pwritev at the end
 * the journal knows, and when any part of that fails (disk full, I/O error)
 * the file is cut back to that end, so the next record never lands behind a
 * torn one; a journal that cannot be cut back is marked broken and refuses
 * every later append (its owner starts a new file). Not thread-safe: the
 * owner serialises calls (core/durable.c holds its mutex).
 *
 * Reading: jnl_read_open opens a file and jnl_read_next reads it record
 * by record (with pread, into a buffer of the reader's that grows to the
 * largest record, never to the file), stopping at the first damaged one
 * or at a read that fails, and saying why; jnl_read_rest counts the frames
 * after it (in a journal they are never applied: nothing after a bad
 * record is). A snapshot's records are independent of each other, so its
 * reader may step over a damaged record with jnl_read_skip when the
 * framing around it still holds.
 */
#ifndef ATTND_CORE_JOURNAL_H
#define ATTND_CORE_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "status.h"

#define JNL_MAGIC_JOURNAL "ATTNDJNL"
#define JNL_MAGIC_SNAPSHOT "ATTNDSNP"
#define JNL_HEADER_BYTES 24u
#define JNL_VERSION 1u              /* of journals and snapshots alike */
#define JNL_FRAME_BYTES 16u         /* len + lsn + crc around a payload */

/* CRC-32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t jnl_crc32c(uint32_t crc, const void *p, size_t n);
/* The same by the table method alone, whatever instruction the CPU has:
 * what a CPU without one runs, for the tests that check both. */
uint32_t jnl_crc32c_table(uint32_t crc, const void *p, size_t n);

/* When appended records reach the disk. */
enum jnl_fsync {
    JNL_FSYNC_NO = 0,           /* when the OS writes them back */
    JNL_FSYNC_EVERYSEC,         /* jnl_sync from a timer (the default) */
    JNL_FSYNC_ALWAYS,           /* fdatasync before jnl_append returns */
};

struct jnl;

/*
 * Create path (O_EXCL) with its header, fsync it and its directory.
 * magic: JNL_MAGIC_JOURNAL or JNL_MAGIC_SNAPSHOT. NULL on failure with
 * *err_no set to the errno.
 */
struct jnl *jnl_create(const char *path, const char *magic, uint64_t gen,
                       enum jnl_fsync mode, int *err_no);

/*
 * Open path, a file jnl_create made that holds nothing after its header, to
 * append to it as if it had just been created: the header must be the one
 * jnl_create writes for magic and gen. It and its directory are fsync'd, as
 * jnl_create does. NULL on failure with *err_no set (EINVAL: another
 * header, records after it, or not a regular file; EMLINK: the file has
 * another name, as in a copy of the directory made with hard links, which
 * would take in what is appended here).
 */
struct jnl *jnl_reopen_empty(const char *path, const char *magic, uint64_t gen,
                             enum jnl_fsync mode, int *err_no);

/* Close (no fsync; call jnl_sync first when it matters). */
void jnl_close(struct jnl *j);

/*
 * Append one record of payload parts[n] (total > 0 bytes) with this lsn.
 * CORE_OK once written (and fdatasync'd for JNL_FSYNC_ALWAYS, unless
 * no_wait); CORE_ESTORAGE when it could not be, with the file as before
 * and *err_no (may be NULL) set.
 */
enum core_status jnl_append(struct jnl *j, uint64_t lsn,
                            const struct iovec *parts, int n, bool no_wait,
                            int *err_no);

/* fdatasync what was appended. CORE_ESTORAGE (and the journal broken) when
 * it fails: records since the last sync may not be on disk. */
enum core_status jnl_sync(struct jnl *j, int *err_no);

uint64_t jnl_size(const struct jnl *j);     /* bytes, header included */
bool jnl_broken(const struct jnl *j);

/* ---- reading ------------------------------------------------------------ */

struct jnl_reader {
    int fd;                     /* the file (-1 once closed) */
    size_t size, off;           /* size when opened; off: next record */
    uint64_t gen;               /* from the header */
    uint64_t kept;              /* records returned */
    const char *why;            /* why reading stopped early, or NULL */
    int err;                    /* the errno when jnl_read_open or a read
                                   failed (r->why its text), else 0 */
    size_t err_at;              /* the byte where that read failed */
    unsigned char *win;         /* bytes [win_off, win_off + win_len) of the
                                   file, in win_cap bytes */
    size_t win_cap, win_off, win_len;
};

/* Open path and check its header (magic as jnl_create). CORE_ENOTFOUND
 * when it does not exist, CORE_EIO when it cannot be opened or its header
 * read (r->err the errno: an open or read interrupted by a signal is tried
 * again), CORE_ECORRUPT for a bad header (r->why says which); on CORE_OK
 * call jnl_read_close. */
enum core_status jnl_read_open(struct jnl_reader *r, const char *path,
                               const char *magic);

void jnl_read_close(struct jnl_reader *r);

/*
 * The next record: 1 with *lsn, *payload, *len set (payload points into
 * the reader's buffer, unaligned, until the next call on r); 0 at a clean
 * end; -1 at a damaged record (r->why set, r->off at its start) or when a
 * read fails (r->err and r->err_at set as well: EIO from the device, or
 * ENOMEM for the buffer, EAGAIN when the file got shorter since it was
 * opened, ...).
 */
int jnl_read_next(struct jnl_reader *r, uint64_t *lsn, const void **payload,
                  size_t *len);

/* After -1: frames from r->off to the end whose lengths fit (at least 1,
 * the damaged one; a length that cannot be read ends the count as one that
 * does not fit), and the bytes they span. */
uint64_t jnl_read_rest(const struct jnl_reader *r, uint64_t *bytes);

/*
 * After -1 at a record whose checksum does not match: step over it when its
 * length still leads to the exact end of the file or to a record whose own
 * checksum matches (the framing holds, only this record is bad). 1 then,
 * with *payload and *len its (untrusted) payload, valid as jnl_read_next's,
 * and *at its offset, r->off past it and r->why cleared; 0 when the framing
 * is lost (r unchanged), after a read error, or when a read fails here
 * (r->err set, r->off unchanged).
 */
int jnl_read_skip(struct jnl_reader *r, const void **payload, size_t *len, size_t *at);

#endif
