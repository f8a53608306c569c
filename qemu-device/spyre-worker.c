/*
 * Spyre-style PCIe AI accelerator model: worker threads.
 *
 * Commands that take long in host time (LAUNCH, large DMA_COPY) are
 * validated on the main loop, then handed to a worker thread as a SpyreJob;
 * their ring stays busy (HEAD on the command, STATUS.BUSY, nothing else
 * consumed) while other rings keep going. A worker runs its jobs one at a
 * time in FIFO order without the BQL, then moves the job to its done list
 * and schedules a bottom half, which completes the command on the main loop
 * (completion entry, interrupts, telemetry) and ends the ring's BUSY.
 *
 * A job the worker could not finish in one turn (a LAUNCH preempted by time
 * slicing: its run returned false) goes back to the tail of the queue in
 * state QUEUED with preempted set, so the waiting jobs run round-robin;
 * every path that drops queued jobs drops it the same way.
 *
 * Fault containment: a worker touches only device memory and, through
 * spyre_host_read/write, guest RAM that is mapped directly; it never
 * dispatches MMIO, so it never needs the BQL. A ring ABORT or a reset sets
 * the job's cancel flag, which the copy loop and the compute engine poll
 * (cancellation lands within milliseconds), and never waits: a queued or
 * finished job is dropped at once, a running one is reaped by the bottom
 * half once the worker let go of it. Only a PCI reset and unrealize wait
 * for the running jobs, which is bounded because the worker waits for
 * nothing the main loop holds.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "qemu/timer.h"
#include "spyre.h"
#include "trace.h"

SpyreJob *spyre_job_new(SpyreState *s, SpyreJobKind kind, unsigned n,
                        uint32_t idx, const struct spyre_hw_cmd *c)
{
    SpyreJob *j = g_new0(SpyreJob, 1);

    j->kind = kind;
    j->ring = n;
    j->idx = idx;
    j->epoch = s->rings[n].epoch;
    j->seqno = c->hdr.seqno;
    j->flags = c->hdr.flags;
    j->eng_slot = -1;
    return j;
}

void spyre_job_free(SpyreJob *j)
{
    spyre_mmu_unref(j->map);
    g_free(j->windows);
    g_free(j->res);
    g_free(j->prog);
    g_free(j);
}

static void *spyre_worker_thread(void *opaque)
{
    SpyreWorker *w = opaque;
    SpyreJob *j;
    bool done;

    /* Host DMA translates guest addresses under RCU. */
    rcu_register_thread();
    qemu_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && QSIMPLEQ_EMPTY(&w->queue)) {
            qemu_cond_wait(&w->cond, &w->lock);
        }
        if (w->stop) {
            break;
        }
        j = QSIMPLEQ_FIRST(&w->queue);
        QSIMPLEQ_REMOVE_HEAD(&w->queue, next);
        j->state = SPYRE_JOB_RUNNING;
        j->preempted = false;
        j->run_start_ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
        w->running = j;
        qemu_mutex_unlock(&w->lock);

        done = true;
        if (!qatomic_read(&j->cancel)) {
            done = w->run(w->s, w, j);
        }

        qemu_mutex_lock(&w->lock);
        w->running = NULL;
        j->exec_ns += qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) - j->run_start_ns;
        /*
         * A job cancelled meanwhile is done, preempted or not: a reset or
         * unrealize waiting for the running job reaps it from the done list.
         */
        if (done || qatomic_read(&j->cancel)) {
            j->state = SPYRE_JOB_DONE;
            QSIMPLEQ_INSERT_TAIL(&w->done, j, next);
            qemu_bh_schedule(w->bh);
        } else {
            /* Preempted: behind the jobs that wait (round-robin). */
            j->state = SPYRE_JOB_QUEUED;
            j->preempted = true;
            QSIMPLEQ_INSERT_TAIL(&w->queue, j, next);
        }
        qemu_cond_broadcast(&w->idle_cond);
    }
    qemu_mutex_unlock(&w->lock);
    rcu_unregister_thread();
    return NULL;
}

/*
 * Main loop: a job left its worker (finished, cancelled or dropped from the
 * queue). Complete it if it is still live, end its ring's BUSY. Returns the
 * interrupt causes to raise.
 */
static uint32_t spyre_job_reap(SpyreState *s, SpyreJob *j)
{
    SpyreRing *r = &s->rings[j->ring];
    bool cancelled = qatomic_read(&j->cancel);
    bool live = false;
    uint32_t causes;

    assert(s->jobs_outstanding > 0);
    s->jobs_outstanding--;
    if (!j->orphan) {
        assert(r->job == j);
        r->job = NULL;
        live = !cancelled && (r->status & SPYRE_RING_STATUS_ENABLED) &&
               r->epoch == j->epoch;
        if (!live && !cancelled) {
            /* The ring was disabled (and maybe re-enabled) meanwhile. */
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: command %u finished after its "
                          "ring was disabled; completion dropped\n",
                          j->ring, j->idx);
        }
    }
    trace_spyre_job_reaped(j->ring, j->idx, cancelled, j->orphan, live);
    causes = j->w->complete(s, j, live);
    spyre_job_free(j);
    return causes;
}

/* Main loop: complete the finished jobs of a worker. */
static void spyre_worker_bh(void *opaque)
{
    SpyreWorker *w = opaque;
    SpyreState *s = w->s;
    QSIMPLEQ_HEAD(, SpyreJob) done = QSIMPLEQ_HEAD_INITIALIZER(done);
    SpyreJob *j;
    uint32_t causes = 0;

    qemu_mutex_lock(&w->lock);
    QSIMPLEQ_CONCAT(&done, &w->done);
    qemu_mutex_unlock(&w->lock);

    while ((j = QSIMPLEQ_FIRST(&done))) {
        QSIMPLEQ_REMOVE_HEAD(&done, next);
        causes |= spyre_job_reap(s, j);
    }
    spyre_reset_progress(s);
    if (causes) {
        spyre_raise(s, causes);
    }
    /* The rings that waited for their job may have more work. */
    qemu_bh_schedule(s->bh);
}

void spyre_worker_init(SpyreState *s, SpyreWorker *w, const char *name)
{
    w->s = s;
    w->name = name;
    qemu_mutex_init(&w->lock);
    qemu_cond_init(&w->cond);
    qemu_cond_init(&w->idle_cond);
    QSIMPLEQ_INIT(&w->queue);
    QSIMPLEQ_INIT(&w->done);
    w->running = NULL;
    w->stop = false;
    w->bh = qemu_bh_new_guarded(spyre_worker_bh, w,
                                &DEVICE(s)->mem_reentrancy_guard);
    qemu_thread_create(&w->thread, name, spyre_worker_thread, w,
                       QEMU_THREAD_JOINABLE);
    w->started = true;
}

/* Main loop: queue a job; its ring must point to it (SpyreRing.job). */
void spyre_worker_submit(SpyreWorker *w, SpyreJob *j)
{
    j->w = w;
    w->s->jobs_outstanding++;
    qemu_mutex_lock(&w->lock);
    j->state = SPYRE_JOB_QUEUED;
    QSIMPLEQ_INSERT_TAIL(&w->queue, j, next);
    qemu_cond_signal(&w->cond);
    qemu_mutex_unlock(&w->lock);
}

/*
 * Main loop, never blocks: cancel job j. A queued or finished job is taken
 * off its worker and reaped now; a running one keeps its ring BUSY until
 * the worker let go of it and the bottom half reaped it.
 */
void spyre_worker_abort(SpyreState *s, SpyreJob *j)
{
    SpyreWorker *w = j->w;
    bool now = true;

    qatomic_set(&j->cancel, 1);
    qemu_mutex_lock(&w->lock);
    switch (j->state) {
    case SPYRE_JOB_QUEUED:
        QSIMPLEQ_REMOVE(&w->queue, j, SpyreJob, next);
        break;
    case SPYRE_JOB_DONE:
        QSIMPLEQ_REMOVE(&w->done, j, SpyreJob, next);
        break;
    case SPYRE_JOB_RUNNING:
        now = false;
        break;
    }
    qemu_mutex_unlock(&w->lock);
    if (now) {
        spyre_job_reap(s, j);
    }
}

/*
 * Main loop: nanoseconds job j has held its worker so far (EXEC_TIME), or
 * -1 while it is not in progress (queued and never started, or finished
 * and not yet reaped). *running tells whether it holds the worker now; a
 * job preempted by time slicing is in progress without holding it.
 */
int64_t spyre_worker_exec_ns(SpyreJob *j, bool *running)
{
    SpyreWorker *w = j->w;
    int64_t ns = -1;

    *running = false;
    qemu_mutex_lock(&w->lock);
    if (j->state == SPYRE_JOB_RUNNING) {
        ns = j->exec_ns + qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) -
             j->run_start_ns;
        *running = true;
    } else if (j->state == SPYRE_JOB_QUEUED && j->preempted) {
        ns = j->exec_ns;
    }
    qemu_mutex_unlock(&w->lock);
    return ns;
}

/*
 * Main loop (reset, unrealize): cancel and disown every job of the worker.
 * Queued and finished jobs are reaped now. The running one is cancelled;
 * with wait, this waits until the worker let go of it (bounded: the worker
 * waits for nothing the caller holds) and reaps it too, else the bottom
 * half reaps it later.
 */
void spyre_worker_disown_all(SpyreWorker *w, bool wait)
{
    QSIMPLEQ_HEAD(, SpyreJob) drop = QSIMPLEQ_HEAD_INITIALIZER(drop);
    SpyreJob *j;

    if (!w->started) {
        return;
    }
    qemu_mutex_lock(&w->lock);
    QSIMPLEQ_CONCAT(&drop, &w->queue);
    if (w->running) {
        qatomic_set(&w->running->cancel, 1);
        w->running->orphan = true;
        while (wait && w->running) {
            qemu_cond_wait(&w->idle_cond, &w->lock);
        }
    }
    QSIMPLEQ_CONCAT(&drop, &w->done);
    qemu_mutex_unlock(&w->lock);

    while ((j = QSIMPLEQ_FIRST(&drop))) {
        QSIMPLEQ_REMOVE_HEAD(&drop, next);
        qatomic_set(&j->cancel, 1);
        j->orphan = true;
        spyre_job_reap(w->s, j);
    }
}

void spyre_worker_fini(SpyreWorker *w)
{
    if (!w->started) {
        return;
    }
    spyre_worker_disown_all(w, true);
    qemu_mutex_lock(&w->lock);
    w->stop = true;
    qemu_cond_signal(&w->cond);
    qemu_mutex_unlock(&w->lock);
    qemu_thread_join(&w->thread);
    w->started = false;
    qemu_bh_delete(w->bh);
    qemu_cond_destroy(&w->idle_cond);
    qemu_cond_destroy(&w->cond);
    qemu_mutex_destroy(&w->lock);
}
