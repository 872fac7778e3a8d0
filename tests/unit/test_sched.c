/*
 * tests/unit/test_sched.c — server/sched.c: the yield of large passes
 * (its clock against the period of the scheduler's job count: short while
 * other jobs are queued or running, long when the pass is alone), that
 * count as jobs run on a real libuv loop and pool, a client's small
 * jobs passing its large ones, and a queued job cancelled at once.
 *
 * server/ objects are not linked into unit tests (only core/ is), so the one
 * file under test is compiled in here; it needs nothing of server/ but its
 * own header and core/stop.h.
 */
#include "server/sched.c"

#include "tests/harness.h"

/* The two periods of a pass's yield, in ns. */
static const uint64_t alone = (uint64_t)SRV_BG_YIELD_ALONE_US * 1000u;
static const uint64_t shared = (uint64_t)SRV_BG_YIELD_US * 1000u;

/* A scheduler of one job per client on a new loop (NULL: failed). */
static struct srv_sched *sched_up(uv_loop_t *loop)
{
    CHECK(shared < alone);
    CHECK(uv_loop_init(loop) == 0);
    struct srv_sched *s = srv_sched_new(loop, 1);
    CHECK(s != NULL);
    return s;
}

static void sched_down(uv_loop_t *loop, struct srv_sched *s)
{
    srv_sched_close(s);
    uv_run(loop, UV_RUN_DEFAULT);
    srv_sched_free(s);
    CHECK(uv_loop_close(loop) == 0);
}

/* bg_yield_at on a scheduler whose job count is set by hand: a yield
 * once the period of that count has passed since the last, then not
 * again until it has passed once more. */
TEST(yield_waits_out_the_period_of_the_job_count)
{
    uv_loop_t loop;
    struct srv_sched *s = sched_up(&loop);
    if (!s)
        return;
    uint64_t last = 0, t = alone;
    atomic_store(&s->jobs, 1);                  /* the pass's own job alone */
    CHECK(bg_yield_at(s, &last, t));            /* first: due */
    CHECK(last == t);
    CHECK(!bg_yield_at(s, &last, t + shared));  /* alone: the shared period is not enough */
    CHECK(!bg_yield_at(s, &last, t + alone - 1));
    CHECK(bg_yield_at(s, &last, t + alone));
    t += alone;
    atomic_store(&s->jobs, 3);                  /* others queued or running */
    CHECK(!bg_yield_at(s, &last, t + shared - 1));
    CHECK(bg_yield_at(s, &last, t + shared));
    CHECK(last == t + shared);
    atomic_store(&s->jobs, 0);
    sched_down(&loop, s);
}

struct probe {
    struct srv_job job;
    struct srv_sched *s;
    const atomic_bool *gate;        /* the job reads its period once this is set */
    uint64_t period_ns;             /* what the job's yield would use */
    int done;
};

static void probe_run(struct srv_job *j)
{
    struct probe *p = (struct probe *)(void *)j;
    uint64_t until = attn_now_ns() + 10000000000ull;
    while (!atomic_load(p->gate) && attn_now_ns() < until) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    p->period_ns = yield_every_ns(p->s);
    srv_sched_bg_yield(p->s);       /* on a pool thread, as a pass calls it */
}

static void probe_done(struct srv_job *j)
{
    ((struct probe *)(void *)j)->done++;
}

static void probe_init(struct probe *p, struct srv_sched *s, const char *client,
                       const atomic_bool *gate)
{
    memset(p, 0, sizeof *p);
    p->job.run = probe_run;
    p->job.done = probe_done;
    snprintf(p->job.client, sizeof p->job.client, "%s", client);
    p->s = s;
    p->gate = gate;
}

/* Runs the loop until every probe is done (bounded: 10 s). */
static void run_until_done(uv_loop_t *loop, struct probe *ps, size_t n)
{
    uint64_t until = attn_now_ns() + 10000000000ull;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += !ps[i].done;
        if (!left || attn_now_ns() > until)
            break;
        uv_run(loop, UV_RUN_ONCE);
    }
}

TEST(yield_period_follows_the_other_jobs)
{
    uv_loop_t loop;
    struct srv_sched *s = sched_up(&loop);
    if (!s)
        return;

    atomic_bool open = true, after_push = false;
    struct probe one;
    probe_init(&one, s, "a", &open);
    srv_sched_push(s, &one.job);
    run_until_done(&loop, &one, 1);
    CHECK_EQ_INT(one.done, 1);
    CHECK(one.period_ns == alone);              /* the only job */
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 0);

    /* One client may run one job at a time: the second waits for the
     * first, which (held until both are pushed, since a pool thread may
     * start it at once) runs while another job is queued; the second runs
     * alone once the first has ended. */
    struct probe two[2];
    probe_init(&two[0], s, "b", &after_push);
    probe_init(&two[1], s, "b", &open);
    srv_sched_push(s, &two[0].job);
    srv_sched_push(s, &two[1].job);
    atomic_store(&after_push, true);
    run_until_done(&loop, two, 2);
    CHECK_EQ_INT(two[0].done + two[1].done, 2);
    CHECK(two[0].period_ns == shared);
    CHECK(two[1].period_ns == alone);
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 0);

    sched_down(&loop, s);
}

/* A client's small job does not wait behind its large ones: with one job
 * of each size at a time, a small job pushed behind two large ones runs
 * while the first large one is held, and the second large one waits for
 * the first. */
TEST(small_jobs_pass_their_clients_large_ones)
{
    uv_loop_t loop;
    struct srv_sched *s = sched_up(&loop);
    if (!s)
        return;
    atomic_bool held = false, open = true;
    struct probe p[3];                          /* large, large, small */
    probe_init(&p[0], s, "c", &held);
    probe_init(&p[1], s, "c", &open);
    probe_init(&p[2], s, "c", &open);
    p[2].job.small = true;
    for (int i = 0; i < 3; i++)
        srv_sched_push(s, &p[i].job);
    run_until_done(&loop, &p[2], 1);
    CHECK_EQ_INT(p[2].done, 1);
    CHECK_EQ_INT(p[0].done + p[1].done, 0);    /* the second large one is queued */
    atomic_store(&held, true);
    run_until_done(&loop, p, 3);
    CHECK_EQ_INT(p[0].done + p[1].done, 2);
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 0);
    sched_down(&loop, s);
}

/* A client holds at most per_client + 1 threads, the one more only for a
 * small job: with two jobs at a time, client "d" keeps three large and
 * two small jobs held, and client "e"'s job still starts at once on the
 * pool's fourth thread (with per-size caps "d" would hold all four);
 * meanwhile "d" runs three jobs at most, two of them large at most. */
TEST(a_client_holds_at_most_one_thread_more)
{
    uv_loop_t loop;
    CHECK(uv_loop_init(&loop) == 0);
    struct srv_sched *s = srv_sched_new(&loop, 2);   /* libuv's pool: 4 threads */
    if (!s)
        return;
    atomic_bool held = false, open = true;
    struct probe d[5], e;
    for (int i = 0; i < 5; i++) {
        probe_init(&d[i], s, "d", &held);
        d[i].job.small = i >= 3;
    }
    probe_init(&e, s, "e", &open);
    for (int i = 0; i < 5; i++)
        srv_sched_push(s, &d[i].job);
    srv_sched_push(s, &e.job);
    run_until_done(&loop, &e, 1);
    CHECK_EQ_INT(e.done, 1);
    pthread_mutex_lock(&s->mu);
    struct sched_client *c = s->clients;
    while (c && strcmp(c->id, "d") != 0)
        c = c->next;
    CHECK(c != NULL);
    if (c) {
        CHECK(c->lane[0].running + c->lane[1].running <= 3);
        CHECK(c->lane[1].running <= 2);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_store(&held, true);
    run_until_done(&loop, d, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(d[i].done, 1);
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 0);
    sched_down(&loop, s);
}

/* A job still queued is taken out and run with its done callback at once
 * by srv_sched_cancel; one a thread has taken is not. With one job of
 * client "f" held on a thread and three queued behind it, the middle one
 * and then the last (the queue's tail) are cancelled; a job pushed after
 * them queues behind the one left and runs once the held one ends. */
TEST(a_queued_job_is_cancelled_at_once)
{
    uv_loop_t loop;
    struct srv_sched *s = sched_up(&loop);
    if (!s)
        return;
    atomic_bool held = false, open = true;
    struct probe f[5];
    for (int i = 0; i < 5; i++)
        probe_init(&f[i], s, "f", i == 0 ? &held : &open);
    for (int i = 0; i < 4; i++)
        srv_sched_push(s, &f[i].job);
    for (;;) {                                  /* until a thread has taken f[0] */
        pthread_mutex_lock(&s->mu);
        bool taken = s->clients && s->clients->lane[1].running == 1;
        pthread_mutex_unlock(&s->mu);
        if (taken)
            break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    CHECK(!srv_sched_cancel(s, &f[0].job));     /* running */
    CHECK(srv_sched_cancel(s, &f[2].job));
    CHECK_EQ_INT(f[2].done, 1);
    CHECK(srv_sched_cancel(s, &f[3].job));
    CHECK_EQ_INT(f[3].done, 1);
    CHECK(!srv_sched_cancel(s, &f[3].job));     /* not queued twice */
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 2);
    srv_sched_push(s, &f[4].job);
    atomic_store(&held, true);
    run_until_done(&loop, f, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(f[i].done, 1);
    CHECK_EQ_INT((int)atomic_load(&s->jobs), 0);
    sched_down(&loop, s);
}

int main(void)
{
    RUN(yield_waits_out_the_period_of_the_job_count);
    RUN(yield_period_follows_the_other_jobs);
    RUN(small_jobs_pass_their_clients_large_ones);
    RUN(a_client_holds_at_most_one_thread_more);
    RUN(a_queued_job_is_cancelled_at_once);
    TEST_MAIN_END();
}
