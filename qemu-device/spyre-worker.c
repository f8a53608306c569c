/*
 * Spyre-style PCIe AI accelerator model: worker threads.
 *
 * Commands that take long in host time (LAUNCH, large DMA_COPY) are
 * validated on the main loop, then handed to a worker thread as a SpyreJob;
 * their ring stays busy (HEAD on the command, nothing else consumed) while
 * other rings keep going. A worker runs its jobs one at a time in FIFO
 * order without the BQL, then moves the job to its done list and schedules
 * a bottom half, which completes the command on the main loop (completion
 * entry, interrupts, telemetry).
 *
 * Reset and unrealize cancel the running job and wait for it, then drop
 * every queued and finished job: no completion is written after a reset.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "spyre.h"
#include "trace.h"

/* How often a reset re-issues the cancel while it waits for a job. */
#define SPYRE_CANCEL_RETRY_MS   10

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
    return j;
}

void spyre_job_free(SpyreJob *j)
{
    g_free(j->windows);
    g_free(j->res);
    g_free(j);
}

static void *spyre_worker_thread(void *opaque)
{
    SpyreWorker *w = opaque;
    SpyreJob *j;

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
        w->running = j;
        qemu_mutex_unlock(&w->lock);

        w->run(w->s, w, j);

        qemu_mutex_lock(&w->lock);
        w->running = NULL;
        QSIMPLEQ_INSERT_TAIL(&w->done, j, next);
        qemu_cond_broadcast(&w->idle_cond);
        qemu_bh_schedule(w->bh);
    }
    qemu_mutex_unlock(&w->lock);
    rcu_unregister_thread();
    return NULL;
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
        SpyreRing *r = &s->rings[j->ring];
        bool live = (r->status & SPYRE_RING_STATUS_ENABLED) &&
                    r->epoch == j->epoch;

        QSIMPLEQ_REMOVE_HEAD(&done, next);
        r->busy = false;
        if (!live) {
            /* The ring was disabled (and maybe re-enabled) meanwhile. */
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: command %u finished after its "
                          "ring was disabled; completion dropped\n",
                          j->ring, j->idx);
        }
        causes |= w->complete(s, j, live);
        spyre_job_free(j);
    }
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
    w->cancel_flag = false;
    w->bh = qemu_bh_new_guarded(spyre_worker_bh, w,
                                &DEVICE(s)->mem_reentrancy_guard);
    qemu_thread_create(&w->thread, name, spyre_worker_thread, w,
                       QEMU_THREAD_JOINABLE);
    w->started = true;
}

/* Main loop: queue a job; its ring must be marked busy by the caller. */
void spyre_worker_submit(SpyreWorker *w, SpyreJob *j)
{
    qemu_mutex_lock(&w->lock);
    QSIMPLEQ_INSERT_TAIL(&w->queue, j, next);
    qemu_cond_signal(&w->cond);
    qemu_mutex_unlock(&w->lock);
}

/*
 * Drop every job: queued ones are freed, the running one is cancelled and
 * waited for, finished ones are discarded. Main loop (reset, unrealize).
 */
void spyre_worker_cancel_all(SpyreWorker *w)
{
    SpyreJob *j;

    if (!w->started) {
        return;
    }
    qemu_mutex_lock(&w->lock);
    while ((j = QSIMPLEQ_FIRST(&w->queue))) {
        QSIMPLEQ_REMOVE_HEAD(&w->queue, next);
        spyre_job_free(j);
    }
    qatomic_set(&w->cancel_flag, true);
    while (w->running) {
        /*
         * Repeat the cancel: the engine forgets one that arrives before
         * its run starts.
         */
        if (w->cancel) {
            w->cancel(w->s, w);
        }
        qemu_cond_timedwait(&w->idle_cond, &w->lock, SPYRE_CANCEL_RETRY_MS);
    }
    qatomic_set(&w->cancel_flag, false);
    while ((j = QSIMPLEQ_FIRST(&w->done))) {
        QSIMPLEQ_REMOVE_HEAD(&w->done, next);
        spyre_job_free(j);
    }
    qemu_mutex_unlock(&w->lock);
    qemu_bh_cancel(w->bh);
}

void spyre_worker_fini(SpyreWorker *w)
{
    if (!w->started) {
        return;
    }
    spyre_worker_cancel_all(w);
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
