/*
 * core/attn_blame_impl.h — what the two blame scans share
 * (core/attn_blame.c, core/attn_blame_empty.c): an attn_run of the
 * request in scratch of its own, and the query heads the scan looks at.
 */
#ifndef ATTND_CORE_ATTN_BLAME_IMPL_H
#define ATTND_CORE_ATTN_BLAME_IMPL_H

#include <stdbool.h>

#include "attn_blame.h"
#include "attn_run.h"

struct attn_blame_run {
    struct attn_run x;
    void *scratch;                  /* x points into it */
    bool *want;                     /* [h]: the query heads heads [nh] name (NULL: all) */
};

/* Open b for r (checked): CORE_ELIMIT / CORE_ENOMEM, b then closed. */
enum core_status attn_blame_run_open(struct attn_blame_run *b, const struct attn_request *r,
                                     const size_t *heads, size_t nh);
void attn_blame_run_close(struct attn_blame_run *b);

#endif
