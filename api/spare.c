/*
 * api/spare.c — large request buffers kept for the next request (see
 * api/spare.h): API_SPARE_SLOTS slots under one mutex, at most
 * API_SPARE_BYTES bytes kept in all; a request takes the smallest kept
 * block that holds it without being more than twice its size (or the very
 * block it would make, spare_fits), so a small buffer does not pin a huge
 * one. A new block of SPARE_HUGE bytes or more is 2 MiB-aligned, a whole
 * number of 2 MiB pages, and asks for transparent huge pages (as
 * core/kv_slab.c's slabs and core/persist.c's encodings do): its first
 * writer faults it in 2 MiB at a time instead of 4 KiB (a 134 MB import
 * body took 32,855 page faults). Under AddressSanitizer a kept block is
 * poisoned until it is handed out again, so a use after api_spare_free is
 * still reported although the block is not freed.
 */
#include "api/spare.h"

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SPARE_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SPARE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SPARE_POISON(p, n) ((void)(p), (void)(n))
#define SPARE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Enough for a few large requests at once: each keeps up to about six
 * blocks (its body, server/http_body.c's; its tensors, result and
 * response). One bound for all of them (the transport's bodies once had
 * slots of their own). */
#define API_SPARE_SLOTS 24
/* Blocks of this size and more are made of transparent huge pages. */
#define SPARE_HUGE ((size_t)2 << 20)

static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t cap;
} spare[API_SPARE_SLOTS];
static size_t spare_bytes;

/* need (at most SIZE_MAX - SPARE_HUGE) rounded up to whole 2 MiB pages:
 * what huge_new asks for. */
static size_t huge_round(size_t need)
{
    return (need + SPARE_HUGE - 1) / SPARE_HUGE * SPARE_HUGE;
}

/* Whether a kept block of cap bytes may serve need: it holds need and is
 * at most twice it, or it is the block need itself would make. A huge
 * block may hold one 2 MiB page more than huge_new asked for (glibc's
 * aligned_alloc leaves it behind an mmap'd block, depending on the
 * address the kernel gave): a need of 2 to 3 MiB asks for 4 MiB and may
 * hold 6, which the twice rule alone refused to that very need. */
static bool spare_fits(size_t cap, size_t need)
{
    return cap >= need && (cap / 2 <= need ||
                           (need >= SPARE_HUGE && need <= SIZE_MAX / 2 &&
                            cap == huge_round(need) + SPARE_HUGE));
}

/* The smallest kept block that fits need, taken out; or NULL. */
static void *spare_take(size_t need, size_t *cap)
{
    size_t best = API_SPARE_SLOTS;
    void *p = NULL;

    pthread_mutex_lock(&spare_mu);
    for (size_t i = 0; i < API_SPARE_SLOTS; i++)
        if (spare[i].p && spare_fits(spare[i].cap, need) &&
            (best == API_SPARE_SLOTS || spare[i].cap < spare[best].cap))
            best = i;
    if (best < API_SPARE_SLOTS) {
        p = spare[best].p;
        *cap = spare[best].cap;
        SPARE_UNPOISON(p, *cap);
        spare[best].p = NULL;
        spare_bytes -= *cap;
    }
    pthread_mutex_unlock(&spare_mu);
    return p;
}

/* The bytes of malloc'd block p that api/spare hands out and counts: a
 * huge block (2 MiB-aligned) its whole 2 MiB pages, not the part of one
 * that glibc's aligned_alloc may leave behind them; any other block its
 * usable size. */
static size_t block_cap(void *p)
{
    size_t cap = p ? malloc_usable_size(p) : 0;
    if (cap >= SPARE_HUGE && (uintptr_t)p % SPARE_HUGE == 0)
        cap = cap / SPARE_HUGE * SPARE_HUGE;
    return cap;
}

/* A new block of need >= SPARE_HUGE bytes rounded up to 2 MiB pages, all
 * of them asking for transparent huge pages (a refusal leaves 4 KiB
 * pages); *cap gets their bytes (glibc's slack may hold one more). NULL
 * when out of memory. */
static void *huge_new(size_t need, size_t *cap)
{
    if (need > SIZE_MAX - SPARE_HUGE)
        return NULL;
    void *p = aligned_alloc(SPARE_HUGE, huge_round(need));
    if (!p)
        return NULL;
    *cap = block_cap(p);
#ifdef MADV_HUGEPAGE
    madvise(p, *cap, MADV_HUGEPAGE);
#endif
    return p;
}

/* A new block for need (huge_new's from SPARE_HUGE on); NULL when out of
 * memory. */
static void *block_new(size_t need, size_t *got)
{
    void *p = need >= SPARE_HUGE ? huge_new(need, got) : NULL;

    if (!p) {
        p = malloc(need ? need : 1);
        *got = p ? malloc_usable_size(p) : 0;
    }
    return p;
}

void *api_spare_alloc(size_t need, size_t *cap)
{
    size_t got = 0;
    void *p = need >= API_SPARE_MIN ? spare_take(need, &got) : NULL;

    if (!p)
        p = block_new(need, &got);
    /* Out of memory (an address-space or memory limit) with blocks kept:
     * they go first, as the next requests' speed is worth less than this
     * one's answer, which up to API_SPARE_BYTES of idle blocks would
     * otherwise turn into a 503. */
    if (!p && api_spare_kept(NULL) > 0) {
        api_spare_drop();
        p = block_new(need, &got);
    }
    if (cap)
        *cap = got;
    return p;
}

void api_spare_free(void *p)
{
    size_t cap = block_cap(p);
    bool kept = false;

    if (cap < API_SPARE_MIN) {
        free(p);
        return;
    }
    pthread_mutex_lock(&spare_mu);
    for (size_t i = 0; i < API_SPARE_SLOTS && !kept && cap <= API_SPARE_BYTES - spare_bytes; i++)
        if (!spare[i].p) {
            SPARE_POISON(p, cap);
            spare[i].p = p;
            spare[i].cap = cap;
            spare_bytes += cap;
            kept = true;
        }
    pthread_mutex_unlock(&spare_mu);
    if (!kept)
        free(p);
}

size_t api_spare_kept(size_t *bytes)
{
    size_t n = 0;

    pthread_mutex_lock(&spare_mu);
    for (size_t i = 0; i < API_SPARE_SLOTS; i++)
        n += spare[i].p != NULL;
    if (bytes)
        *bytes = spare_bytes;
    pthread_mutex_unlock(&spare_mu);
    return n;
}

/* A write per page, not madvise(MADV_POPULATE_WRITE): that needs Linux
 * 5.14, and the image runs on whatever kernel its host has. */
void api_spare_touch(void)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;

    pthread_mutex_lock(&spare_mu);
    for (size_t i = 0; i < API_SPARE_SLOTS; i++)
        if (spare[i].p) {
            volatile char *p = spare[i].p;
            SPARE_UNPOISON(spare[i].p, spare[i].cap);
            for (size_t off = 0; off < spare[i].cap; off += step)
                p[off] = 0;
            SPARE_POISON(spare[i].p, spare[i].cap);
        }
    pthread_mutex_unlock(&spare_mu);
}

void api_spare_drop(void)
{
    pthread_mutex_lock(&spare_mu);
    for (size_t i = 0; i < API_SPARE_SLOTS; i++)
        if (spare[i].p) {
            SPARE_UNPOISON(spare[i].p, spare[i].cap);
            free(spare[i].p);
            spare[i].p = NULL;
        }
    spare_bytes = 0;
    pthread_mutex_unlock(&spare_mu);
}
