/*
 * server/sched.h — the compute pool's scheduler: two queues per client
 * (API key name or address), one of small jobs and one of large, served
 * round robin over the clients, each client running at most `per_client`
 * jobs at once (one more when it is small) on a pool of more threads than
 * that, so that one client's backlog never makes another's request wait
 * for it, and a client's large backlog never makes its own small requests
 * wait. Jobs finish on the loop thread (done), whichever pool thread ran
 * them.
 */
#ifndef ATTND_SERVER_SCHED_H
#define ATTND_SERVER_SCHED_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "server/limits.h"

struct srv_sched;
struct sched_client;

struct srv_job {
    void (*run)(struct srv_job *j);     /* on a pool thread */
    void (*done)(struct srv_job *j);    /* then on the loop thread */
    char client[SRV_CLIENT_ID_MAX];     /* whose queue */
    bool small;                         /* which of its two queues */
    /* the scheduler's */
    struct srv_job *next;
    struct sched_client *cl;
};

/* Pool threads are libuv's (UV_THREADPOOL_SIZE); per_client >= 1. */
struct srv_sched *srv_sched_new(uv_loop_t *loop, unsigned per_client);

/* Loop thread: queue j behind its client's earlier jobs of its size. */
void srv_sched_push(struct srv_sched *s, struct srv_job *j);

/* Loop thread: if j is still queued (no thread has taken it), take it out
 * and run it and its done callback here, at once; whether it did. For a
 * job whose client has gone: its run must then be quick (it answers
 * without computing), and what it holds is let go now, not once a
 * thread comes free behind others' long jobs. */
bool srv_sched_cancel(struct srv_sched *s, struct srv_job *j);

/*
 * Small work first, within one piece: while a small request computes
 * (between fg_begin and fg_end), a large one pauses at its next piece
 * boundary (srv_sched_bg_pause as its attn_stop pause) until no small one
 * computes, for at most SRV_BG_PAUSE_MS at a time, so a stream of small
 * requests slows large ones but never stops them.
 */
#define SRV_BG_PAUSE_MS 20
void srv_sched_fg_begin(struct srv_sched *s);
void srv_sched_fg_end(struct srv_sched *s);
void srv_sched_bg_pause(void *s);

/*
 * Inside a piece, a large pass also offers its core to any thread waiting
 * for one: its attn_stop yield (srv_sched_bg_yield with s), called between
 * blocks of keys, calls sched_yield() at most once every SRV_BG_YIELD_US on
 * its thread while s holds other jobs (queued or running, whoever's), and
 * once every SRV_BG_YIELD_ALONE_US while the pass's own job is the only one.
 * A piece of a large pass takes milliseconds, and a thread woken meanwhile
 * on its core (the transport's, a small request's, a client's) could wait
 * for the kernel's next tick to get it (4 ms at HZ=250 on a kernel that
 * lets the running task finish its slice); a yield lets it run then, and
 * costs about half a microsecond when nothing waits.
 */
#ifndef SRV_BG_YIELD_US
#define SRV_BG_YIELD_US 200
#endif
#ifndef SRV_BG_YIELD_ALONE_US
#define SRV_BG_YIELD_ALONE_US 2000
#endif
void srv_sched_bg_yield(void *s);

/* Loop thread: close (once no job is queued or running). Free it after
 * the loop has stopped running (uv_run returned): leftover tickets. */
void srv_sched_close(struct srv_sched *s);
void srv_sched_free(struct srv_sched *s);

#endif
