/*
 * core/persist_impl.h — what the writer (core/persist.c) and the reader
 * (core/persist_read.c) of a session's encoding share; not for other files.
 */
#ifndef ATTND_CORE_PERSIST_IMPL_H
#define ATTND_CORE_PERSIST_IMPL_H

#define PERSIST_MAGIC "ATTNDSES"
#define PERSIST_VERSION 6u
#define PERSIST_BOM 0x01020304u

#endif
