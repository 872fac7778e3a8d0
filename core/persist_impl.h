/*
 * core/persist_impl.h — what the writer (core/persist.c) and the reader
 * (core/persist_read.c) of a session's encoding share; not for other files.
 */
#ifndef ATTND_CORE_PERSIST_IMPL_H
#define ATTND_CORE_PERSIST_IMPL_H

#define PERSIST_MAGIC "ATTNDSES"
/* The newest version read; a session without an idempotency key is
 * written as PERSIST_VERSION_NO_KEY, so that an export, and a state
 * directory holding no key, read in an attnd before version 6. */
#define PERSIST_VERSION 6u
#define PERSIST_VERSION_NO_KEY 5u
#define PERSIST_BOM 0x01020304u

#endif
