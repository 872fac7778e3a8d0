/*
 * api/spare.h — large request buffers kept for the next request.
 *
 * A large request's tensors, result and response are megabytes each; freed
 * to glibc they went back to a per-thread heap (or, past its mmap
 * threshold, to the kernel), and the next request, served by another
 * thread of the pool, faulted the same amount in again. Blocks of
 * API_SPARE_MIN bytes and more freed through api_spare_free are kept in a
 * few process-wide slots instead and handed out again by api_spare_alloc.
 * Request bodies (server/http_body.c) are kept here too, so that one
 * bound covers all the memory kept. New blocks of 2 MiB and more are made
 * of transparent huge pages where the kernel has them (api/spare.c).
 * Every block is an ordinary malloc'd block: free() may release one that
 * came from api_spare_alloc, and api_spare_free takes any malloc'd block.
 */
#ifndef ATTND_API_SPARE_H
#define ATTND_API_SPARE_H

#include <stddef.h>

#define API_SPARE_MIN ((size_t)256 << 10)
#define API_SPARE_BYTES ((size_t)96 << 20)   /* kept in all, at most */

/* At least need bytes (malloc'd): a kept block of need to 2 * need bytes,
 * or one as large as a new one for need may come out (glibc may add a
 * 2 MiB page), when there is one; else a new one (of 2 MiB pages from
 * 2 MiB on: 2 MiB-aligned, need rounded up to them, huge pages asked
 * for). *cap (may be NULL) gets its usable size. When no memory can be
 * had, the kept blocks are freed and it is asked for again; NULL when
 * even then there is none. */
void *api_spare_alloc(size_t need, size_t *cap);

/* Keep p (malloc'd, or NULL) for a later api_spare_alloc when it is large
 * and the slots have room; free it otherwise. */
void api_spare_free(void *p);

/* Blocks and bytes kept now (tests, and the --warm-up log line). */
size_t api_spare_kept(size_t *bytes);

/* Write to every page of every kept block, so that the next requests to
 * take them fault nothing in (--warm-up: a request leaves pages of its
 * blocks untouched, such as the parts of a body its decoder skipped, which
 * another request's layout may use). */
void api_spare_touch(void);

/* Free every kept block (tests start from empty slots with it; and
 * api_spare_alloc, out of memory). */
void api_spare_drop(void);

#endif
