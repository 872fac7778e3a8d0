/*
 * core/stop.h — stopping a pass early: a deadline and a cancel flag that a
 * pass reads at its piece boundaries (core/pool.c), so a request past its
 * time, or whose client went away, frees its worker within one piece; and
 * the runner's two hooks: a pause at those boundaries and a yield between
 * blocks of keys inside a piece.
 */
#ifndef ATTND_CORE_STOP_H
#define ATTND_CORE_STOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Attached to a workspace (attn_ws_set_stop) by whoever runs the pass. */
struct attn_stop {
    const atomic_bool *cancel;      /* stop once set (from any thread); NULL: never */
    /* Called at every piece boundary before the checks, on the thread about
     * to run the next piece (a helper's too): the runner may hold a large
     * pass there while smaller work uses the cores. NULL: none. */
    void (*pause)(void *arg);
    void *pause_arg;
    /* Called inside a piece of a key-blocked pass (output only) between
     * blocks of keys (the fused kernels' superblocks, the loop kernel's key
     * blocks: tens to hundreds of microseconds apart, where a piece can take
     * milliseconds), on the thread computing: the runner may give its core
     * to threads waiting for one. Passes that return scores or weights call
     * only the pause. Called often, so it must be cheap. NULL: none. */
    void (*yield)(void *arg);
    void *yield_arg;
    uint64_t deadline_ns;           /* stop past this attn_now_ns() time; 0: none */
    uint64_t start_ns;              /* when the request began (attn_stop_within_ms); 0: now */
};

/* CLOCK_MONOTONIC in nanoseconds (the clock of deadline_ns). */
uint64_t attn_now_ns(void);

/* Whether a pass under s must stop now (s may be NULL: never). */
bool attn_stop_due(const struct attn_stop *s);

/* A piece boundary: s's pause, then attn_stop_due. */
bool attn_stop_boundary(const struct attn_stop *s);

/* Between blocks of keys: s's yield, if any (s may be NULL). */
static inline void attn_stop_yield(const struct attn_stop *s)
{
    if (s && s->yield)
        s->yield(s->yield_arg);
}

/* Lower s's deadline to start_ns (or now) + ms milliseconds (a request's
 * own timeout; never raises it). */
void attn_stop_within_ms(struct attn_stop *s, uint64_t ms);

#endif
