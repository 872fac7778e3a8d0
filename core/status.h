/*
 * core/status.h — the one table of core error codes.
 *
 * Every core function that can fail returns enum core_status: CORE_OK (0) or
 * a negative code. The table is an X-macro so the enum and the name/text
 * lookups cannot drift apart (the libuv pattern). api/error.c owns the single
 * mapping from these codes to HTTP statuses and wire error codes.
 */
#ifndef ATTND_CORE_STATUS_H
#define ATTND_CORE_STATUS_H

/* X(name, value, text) */
#define CORE_STATUS_MAP(X)                                                  \
    X(CORE_OK, 0, "ok")                                                     \
    X(CORE_EINVAL, -1, "invalid argument")                                  \
    X(CORE_ESHAPE, -2, "shapes do not agree")                               \
    X(CORE_ELIMIT, -3, "size limit exceeded")                               \
    X(CORE_ENOMEM, -4, "out of memory")                                     \
    X(CORE_EEMPTYROW, -5, "a query row has no key it may attend to")        \
    X(CORE_ENONFINITE, -6, "value is not finite")                           \
    X(CORE_ENOTFOUND, -7, "not found")                                      \
    X(CORE_ELENGTH, -8, "length does not match the expected length")        \
    X(CORE_EFULL, -9, "session is full")                                    \
    X(CORE_ECAPACITY, -10, "capacity exhausted")                            \
    X(CORE_EIO, -11, "input/output error")                                  \
    X(CORE_ECORRUPT, -12, "stored data is corrupt")                         \
    X(CORE_ESTORAGE, -13, "storage unavailable")                             \
    X(CORE_ESTOPPED, -14, "stopped early: past its deadline, or cancelled") \
    X(CORE_EBUSY, -15, "in use by another process")                         \
    X(CORE_EEXIST, -16, "already exists")

enum core_status {
#define CORE_STATUS_ENUM(name, value, text) name = value,
    CORE_STATUS_MAP(CORE_STATUS_ENUM)
#undef CORE_STATUS_ENUM
};

/* Symbolic name ("CORE_ESHAPE") and human text; never NULL. */
const char *core_status_name(enum core_status st);
const char *core_status_text(enum core_status st);

#endif
