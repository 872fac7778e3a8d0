/*
 * core/stop.c — the deadline and cancel checks of core/stop.h: one relaxed
 * atomic load and, with a deadline, one clock_gettime (vDSO, tens of
 * nanoseconds) per piece of a pass, plus whatever the runner's pause does.
 */
#include "stop.h"

#include <time.h>

uint64_t attn_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool attn_stop_due(const struct attn_stop *s)
{
    if (!s)
        return false;
    if (s->cancel && atomic_load_explicit(s->cancel, memory_order_relaxed))
        return true;
    return s->deadline_ns && attn_now_ns() >= s->deadline_ns;
}

bool attn_stop_boundary(const struct attn_stop *s)
{
    if (s && s->pause)
        s->pause(s->pause_arg);
    return attn_stop_due(s);
}

void attn_stop_within_ms(struct attn_stop *s, uint64_t ms)
{
    uint64_t now = s->start_ns ? s->start_ns : attn_now_ns(), d;
    if (__builtin_mul_overflow(ms, (uint64_t)1000000, &d) || __builtin_add_overflow(now, d, &d))
        return;
    if (!s->deadline_ns || d < s->deadline_ns)
        s->deadline_ns = d;
}
