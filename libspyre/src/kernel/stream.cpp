// Streams on the kernel backend. A stream is a ring of the card plus a timeline syncobj of
// its own: its n-th job signals point n. Jobs of one stream go to one ring of one driver file,
// so the driver runs them in order; an event is a (syncobj, point) pair and a wait on another
// stream becomes an in-sync of that stream's next job (a device-side dependency). Outcomes
// are collected ("reaped") in order by whoever synchronizes or queries: JOB_WAIT of a finished
// job is a cheap poll. No lock but the stream's own is held across a job wait.
#include <xf86drm.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <format>
#include <span>
#include <vector>

#include "error.hpp"
#include "kernel/device.hpp"
#include "spyre/program_builder.hpp"

extern "C" {
#include "spyre_hw.h"
}

namespace spyre {

namespace {

// Launch results: launches without statistics get a short slot (outcome, message and totals,
// not the per-core array), launches whose statistics are wanted a full one. Both are used
// round robin; a slot is reused once its previous launch was reaped.
constexpr uint32_t kShortSlots = 1024;
constexpr uint64_t kShortSlotBytes = offsetof(drm_spyre_launch_result, num_cores);
constexpr uint32_t kFullSlots = 64;
constexpr uint64_t kFullSlotBytes = (sizeof(drm_spyre_launch_result) + 63) & ~uint64_t(63);
constexpr uint64_t kFullBase = kShortSlots * kShortSlotBytes;
constexpr uint32_t kLaunchResultSlots = kShortSlots + kFullSlots;
static_assert(kShortSlotBytes % 8 == 0);
constexpr size_t kMaxStreamInflight = DRM_SPYRE_JOB_HISTORY - 64;
constexpr uint64_t kProgramFillMin = 8ull << 20;
constexpr int64_t kFillLx = 16384;
constexpr size_t kMaxBatch = 64;
// Fills held in a batch (replay_locked): up to this size a block of the whole fill, while a
// staging slot keeps room for kFillBlock blocks of a full batch (BatchStream::kMaxHeld, 256).
constexpr uint64_t kHeldFillWhole = 64ull << 10;
constexpr uint64_t kHeldFillReserve = 256 * 4096;

uint64_t slot_offset(uint32_t slot) {
    return slot < kShortSlots ? slot * kShortSlotBytes
                              : kFullBase + (slot - kShortSlots) * kFullSlotBytes;
}
uint64_t slot_bytes(uint32_t slot) { return slot < kShortSlots ? kShortSlotBytes : kFullSlotBytes; }

// `size` bytes at `p` of the 8-byte pattern `p8` repeated from its first byte (a fill's block in
// a staging slot): the pattern written once, then doubled by memcpy.
void fill_by_doubling(std::byte* p, uint64_t p8, uint64_t size) {
    uint64_t filled = std::min<uint64_t>(size, sizeof p8);
    std::memcpy(p, &p8, filled);
    while (filled < size) {
        const uint64_t n = std::min(filled, size - filled);
        std::memcpy(p + filled, p, n);
        filled += n;
    }
}

static_assert(SPYRE_LAUNCH_MAX_ARGS == DRM_SPYRE_LAUNCH_MAX_ARGS);
static_assert(SPYRE_LAUNCH_MAX_CORES == DRM_SPYRE_LAUNCH_MAX_CORES);
static_assert(SPYRE_LAUNCH_MAX_BUFFERS <= DRM_SPYRE_LAUNCH_MAX_BOS);
static_assert(SPYRE_LAUNCH_UNITS == DRM_SPYRE_LAUNCH_UNITS);

// A SEM_SIGNAL (into `bo`) or SEM_WAIT (on `bo`) at `offset` of it, with its extension `ext`
// (which must outlive the SUBMIT).
drm_spyre_cmd sem_cmd(uint32_t op, const Bo& bo, uint64_t offset, const drm_spyre_sem& ext) {
    drm_spyre_cmd c{};
    c.op = op;
    if (op == DRM_SPYRE_CMD_SEM_WAIT) {
        c.src_handle = bo.handle();
        c.src_offset = offset;
    } else {
        c.dst_handle = bo.handle();
        c.dst_offset = offset;
    }
    c.ext = reinterpret_cast<uintptr_t>(&ext);
    c.ext_size = sizeof ext;
    return c;
}

drm_spyre_cmd copy_cmd(const Bo& dst, uint64_t dst_offset, const Bo& src, uint64_t src_offset,
                       uint64_t size) {
    drm_spyre_cmd c{};
    c.op = DRM_SPYRE_CMD_COPY;
    c.src_handle = src.handle();
    c.dst_handle = dst.handle();
    c.src_offset = src_offset;
    c.dst_offset = dst_offset;
    c.size = size;
    return c;
}

Bo& root_bo(Buffer& b) { return static_cast<Bo&>(b.root()); }

// Commands of a job and the COPY_2D extensions they point to (stable addresses).
struct CmdList {
    std::vector<drm_spyre_cmd> cmds;
    std::deque<drm_spyre_copy_2d> exts;
    void clear() {
        cmds.clear();
        exts.clear();
    }
    // height rows of width bytes, src_pitch and dst_pitch apart.
    void push_copy_2d(const Bo& dst, uint64_t dst_offset, const Bo& src, uint64_t src_offset,
                      uint64_t width, uint64_t height, uint64_t src_pitch, uint64_t dst_pitch) {
        drm_spyre_copy_2d& e = exts.emplace_back();
        e.height = height;
        e.src_pitch = src_pitch;
        e.dst_pitch = dst_pitch;
        drm_spyre_cmd c = copy_cmd(dst, dst_offset, src, src_offset, width);
        c.op = DRM_SPYRE_CMD_COPY_2D;
        c.ext = reinterpret_cast<uintptr_t>(&e);
        c.ext_size = sizeof(e);
        cmds.push_back(c);
    }
};

}  // namespace

class KernelStream;

class KMarker final : public Marker {
  public:
    explicit KMarker(std::shared_ptr<KernelStream> s) : s_(std::move(s)) {}
    bool done() override;
    void wait() override;
    uint64_t cycles() override { return cycles_; }
    int64_t time_ns() override { return time_; }
    const void* stream_id() const override { return s_.get(); }
    // With the card's job clock (hw 1.7) the times of all streams of the card compare.
    const void* clock_id() const override;

    std::shared_ptr<KernelStream> s_;
    std::atomic<bool> resolved_{false}, done_{false};
    std::atomic<uint64_t> point_{0}, cycles_{0};
    uint64_t not_before_ = 0;  // job clock: the card time the host had seen when recorded
    std::atomic<int64_t> time_{0};
};

class KernelStream final : public Stream, public std::enable_shared_from_this<KernelStream> {
  public:
    KernelStream(KernelDevice* dev, uint32_t ring, int priority) : dev_(dev) {
        ring_ = ring;
        priority_ = priority;
        sync_ = dev_->create_syncobj();
    }
    // One ring runs its jobs in order, whichever streams queued them (a SEM_WAIT at its head
    // holds back what follows).
    bool shares_queue_with(const Stream& other) const override {
        const auto* k = dynamic_cast<const KernelStream*>(&other);
        return k && k->dev_ == dev_ && k->ring_ == ring_;
    }
    ~KernelStream() override {
        try {
            synchronize();
        } catch (const Error&) {
        }
        // Staging slots last used by this stream must not ask a destroyed (or reused) handle.
        dev_->forget_syncobj(sync_);
        dev_->destroy_syncobj(sync_);
    }

    void copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                   uint64_t size) override {
        uint64_t host_off = 0;
        if (Bo* pinned = dev_->find_host_range(src, size, &host_off)) {
            enqueue([=, this] {
                copy_direct(root_bo(*dst), dst->root_offset() + dst_offset, *pinned, host_off, size,
                            "pinned host->device", {dst});
            });
            return;
        }
        // Pageable memory is copied into staging slots before the call returns (or, behind a
        // host function, into a private copy), so the caller may reuse it at once.
        auto snapshot = std::make_shared<std::vector<std::byte>>();
        const bool async = !current_op();
        enqueue(
            [=, this] {
                const void* from = snapshot->empty() ? src : snapshot->data();
                copy_htod_staged(dst, dst_offset, from, size);
            },
            [=] {
                if (async)
                    snapshot->assign(static_cast<const std::byte*>(src),
                                     static_cast<const std::byte*>(src) + size);
            });
    }

    void copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) override {
        uint64_t host_off = 0;
        if (Bo* pinned = dev_->find_host_range(dst, size, &host_off)) {
            enqueue([=, this] {
                copy_direct(*pinned, host_off, root_bo(*src), src->root_offset() + src_offset, size,
                            "device->pinned host", {src});
            });
            return;
        }
        // Into pageable memory: synchronous (returns when the data has arrived).
        auto body = [=, this] {
            enqueue([=, this] { copy_dtoh_staged(dst, src, src_offset, size); });
        };
        if (current_op())
            body();
        else
            run_sync(body);
    }

    void copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                   uint64_t src_offset, uint64_t size) override {
        enqueue([=, this] {
            copy_direct(root_bo(*dst), dst->root_offset() + dst_offset, root_bo(*src),
                        src->root_offset() + src_offset, size, "device->device", {dst, src});
        });
    }

    void copy_3d(const Copy3D& c) override;

    // Card to card: the other card's buffer is this card's PEER BO (imported once, kept with
    // the buffer); this card's DMA engine moves the bytes.
    void copy_peer(const PeerCopy& c) override {
        if (c.imported) return copy_to_import(c);
        std::shared_ptr<Bo> imp = resolve_peer(c);
        const uint64_t poff = c.peer->root_offset() + c.peer_offset;
        const uint64_t loff = c.local->root_offset() + c.local_offset;
        enqueue([=, this] {
            try {
                if (c.to_peer)
                    copy_direct(*imp, poff, root_bo(*c.local), loff, c.size, "device->peer",
                                {c.local, c.peer, imp});
                else
                    copy_direct(root_bo(*c.local), loff, *imp, poff, c.size, "peer->device",
                                {c.local, c.peer, imp});
            } catch (const Error& e) {
                // The driver refuses jobs naming a revoked PEER BO with -ENODEV: the peer went.
                if (e.status() == SPYRE_ERROR_DEVICE_LOST && dev_->alive())
                    fail_peer_lost(c, e.what());
                throw;
            }
        });
    }

    // Semaphores (DRM_SPYRE_CAP_SEMAPHORE, checked by api.cpp): one SEM_SIGNAL or SEM_WAIT
    // command as a job of its own, so it keeps its place after the stream's batched launches
    // and event waits (submit() queues those first). A write into a peer card's buffer names
    // the buffer's PEER BO on this card, as copies to peers do.
    void write_value(const SemOp& s) override {
        if (s.imported) return write_value_to_import(s);
        std::shared_ptr<Bo> imp;
        if (s.peer_dev) imp = resolve_peer(s);
        enqueue([=, this] {
            Bo& bo = imp ? *imp : root_bo(*s.buf);
            drm_spyre_sem ext{};
            ext.value = s.value;
            const drm_spyre_cmd c =
                sem_cmd(DRM_SPYRE_CMD_SEM_SIGNAL, bo, s.buf->root_offset() + s.offset, ext);
            std::vector<BufferRef> refs{s.buf};
            if (imp) refs.push_back(imp);
            try {
                submit({&c, 1},
                       std::format("semaphore write of {} at offset {}{}", s.value, s.offset,
                                   imp ? std::format(" of a buffer of {}", s.peer_dev->name())
                                       : std::string()),
                       std::move(refs));
            } catch (const Error& e) {
                // The driver refuses jobs naming a revoked PEER BO with -ENODEV: the peer went.
                if (imp && e.status() == SPYRE_ERROR_DEVICE_LOST && dev_->alive())
                    fail(SPYRE_ERROR_DEVICE_LOST,
                         std::format("peer {} was removed or its driver unbound: {} cannot write "
                                     "a semaphore in its memory ({})",
                                     s.peer_dev->name(), dev_->name(), e.what()));
                throw;
            }
        });
    }

    // The PEER BO on this card of a peer copy's buffer on the peer card (imported once, kept
    // with the buffer); DEVICE_LOST naming the peer when it has gone.
    std::shared_ptr<Bo> resolve_peer(const PeerCopy& c) {
        auto& peer = static_cast<KernelDevice&>(*c.peer_dev);  // api.cpp: can_access_peer
        if (!peer.alive()) fail_peer_lost(c, "it no longer answers");
        return dev_->import_peer(root_bo(*c.peer), peer);
    }
    [[noreturn]] void fail_peer_lost(const PeerCopy& c, const std::string& why) {
        fail(SPYRE_ERROR_DEVICE_LOST,
             std::format("peer {} was removed or its driver unbound: {} cannot copy {} {} "
                         "its memory ({})",
                         c.peer_dev->name(), dev_->name(), format_bytes(c.size),
                         c.to_peer ? "into" : "from", why));
    }
    // The PEER BO of a semaphore write into a peer card's buffer.
    std::shared_ptr<Bo> resolve_peer(const SemOp& s) {
        auto& peer = static_cast<KernelDevice&>(*s.peer_dev);  // api.cpp: access enabled
        if (!peer.alive())
            fail(SPYRE_ERROR_DEVICE_LOST,
                 std::format("peer {} was removed or its driver unbound: {} cannot write a "
                             "semaphore in its memory",
                             peer.name(), dev_->name()));
        return dev_->import_peer(root_bo(*s.buf), peer);
    }

    // Into a PEER BO imported from another process's dma-buf (the collectives between
    // processes): refused with -ENODEV once the exporting card has gone.
    void write_value_to_import(const SemOp& s) {
        std::shared_ptr<Bo> imp = std::static_pointer_cast<Bo>(s.imported);
        enqueue([=, this] {
            drm_spyre_sem ext{};
            ext.value = s.value;
            const drm_spyre_cmd c = sem_cmd(DRM_SPYRE_CMD_SEM_SIGNAL, *imp, s.offset, ext);
            try {
                submit({&c, 1},
                       std::format("semaphore write of {} into a buffer shared by another "
                                   "process",
                                   s.value),
                       {imp});
            } catch (const Error& e) {
                if (e.status() == SPYRE_ERROR_DEVICE_LOST && dev_->alive())
                    fail(SPYRE_ERROR_DEVICE_LOST,
                         std::format("the peer card of a buffer shared by another process was "
                                     "removed or its driver unbound: {}",
                                     e.what()));
                throw;
            }
        });
    }

    void wait_value(const SemOp& s) override {
        enqueue([=, this] {
            drm_spyre_sem ext{};
            ext.value = s.value;
            ext.timeout_us = s.timeout_us;
            const drm_spyre_cmd c = sem_cmd(DRM_SPYRE_CMD_SEM_WAIT, root_bo(*s.buf),
                                            s.buf->root_offset() + s.offset, ext);
            submit({&c, 1},
                   std::format("semaphore wait for a value >= {} at offset {}", s.value, s.offset),
                   {s.buf});
            pending_.back().sem = std::make_shared<SemOp>(s);
        });
    }

    // Into a PEER BO imported from another process's dma-buf: the driver refuses a job
    // naming it with -ENODEV once the exporting card has gone (revoked).
    void copy_to_import(const PeerCopy& c) {
        std::shared_ptr<Bo> imp = std::static_pointer_cast<Bo>(c.imported);
        const uint64_t loff = c.local->root_offset() + c.local_offset;
        enqueue([=, this] {
            try {
                copy_direct(*imp, c.peer_offset, root_bo(*c.local), loff, c.size,
                            "device->peer (another process)", {c.local, imp});
            } catch (const Error& e) {
                if (e.status() == SPYRE_ERROR_DEVICE_LOST && dev_->alive())
                    fail(SPYRE_ERROR_DEVICE_LOST,
                         std::format("the peer card of a buffer shared by another process was "
                                     "removed or its driver unbound: {}",
                                     e.what()));
                throw;
            }
        });
    }

    void fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
              uint32_t psize) override {
        // Large fills run a fill program on the cores (measured faster than DMA replication
        // from 8 MiB on the card model); loaded here, outside the stream lock.
        BufferRef prog;
        if (size >= kProgramFillMin && (dev_->info().caps & DRM_SPYRE_CAP_LAUNCH) &&
            !std::getenv("SPYRE_FILL_DMA_ONLY"))
            prog = fill_program();
        enqueue([=, this] { fill_locked(dst, offset, size, pattern, psize, prog); });
    }

    void launch(const LaunchRequest& req, spyre_launch_stats* stats) override {
        enqueue([=, this] { launch_locked(req, stats); });
    }

    void replay(const GraphRef& g) override {
        // The PEER BOs of a batch's peer copies and semaphore writes into peer cards, imported
        // here as when queued alone (outside the stream lock); a lost peer fails its node only.
        std::shared_ptr<PeerImports> imps;
        for (size_t i = 0; i < g->nodes.size(); ++i) {
            const GraphNode& n = g->nodes[i];
            const bool peer_copy = n.op == GraphNode::Op::CopyPeer && !n.peer.imported;
            const bool peer_sem = n.op == GraphNode::Op::SemWrite && n.sem.peer_dev;
            if (!peer_copy && !peer_sem) continue;
            if (!imps) imps = std::make_shared<PeerImports>();
            try {
                imps->bos[i] = peer_copy ? resolve_peer(n.peer) : resolve_peer(n.sem);
            } catch (const Error& e) {
                imps->errors.emplace(i, e);
            }
        }
        enqueue([=, this] { replay_locked(*g, imps.get()); });
        for (const GraphNode& n : g->nodes)
            if (n.op == GraphNode::Op::Record) n.on_record(record());
    }

    void host_func(void (*fn)(void*), void* user) override {
        enqueue([=, this] {
            flush_batch();
            flush_in_syncs();
            blocked_ = true;
            dev_->post_host_func(shared_from_this(), point_, fn, user);
        });
    }

    MarkerRef record() override {
        auto m = std::make_shared<KMarker>(shared_from_this());
        m->not_before_ = dev_->observed();
        enqueue([=, this] {
            flush_batch();
            flush_in_syncs();
            m->point_ = point_;
            if (point_ <= reaped_) {
                complete_marker(m);
            } else {
                markers_.push_back(m);
            }
            m->resolved_ = true;
            cv_.notify_all();
        });
        return m;
    }

    void wait(const MarkerRef& m) override {
        // A marker of another stream of this card that has no point yet (its stream is held
        // back by a host function): wait for its point here, holding no lock. Waiting in the
        // queued work (under mu_, or on the completion thread when this stream is held back
        // too) would block this stream's host functions, which that host function may be
        // queued behind: a deadlock (the collectives' push stream, issue 25).
        if (auto* km = dynamic_cast<KMarker*>(m.get());
            km && km->s_.get() != this && km->s_->dev_ == dev_ && !km->resolved_) {
            std::unique_lock lk(km->s_->mu_);
            km->s_->cv_.wait(lk, [&] { return km->resolved_.load(); });
        }
        enqueue([=, this] {
            flush_batch();  // work queued before the wait does not wait
            auto* km = dynamic_cast<KMarker*>(m.get());
            if (km && km->s_.get() == this) return;  // stream order covers it
            if (km && km->s_->dev_ == dev_ && km->resolved_) {
                if (km->done_) return;
                drm_spyre_sync s{};
                s.handle = km->s_->sync_;
                s.point = km->point_;
                in_syncs_.push_back(s);
                if (in_syncs_.size() == DRM_SPYRE_MAX_SYNCS) flush_in_syncs();
                return;
            }
            m->wait();  // another card (or not recorded yet): a host round trip
        });
    }

    void synchronize() override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !blocked_ && deferred_.empty(); });
        flush_batch();
        flush_in_syncs();
        wait_done(point_, &lock);
        if (sticky_) {
            Error e = *sticky_;
            sticky_.reset();
            throw e;
        }
    }

    std::optional<Error> failure() override {
        std::lock_guard lock(mu_);
        reap(0);  // the finished jobs' errors into sticky_
        return sticky_;
    }

    bool query() override {
        std::lock_guard lock(mu_);
        if (blocked_ || !deferred_.empty()) return false;
        flush_batch();
        flush_in_syncs();
        reap(0);
        if (!pending_.empty()) return false;
        if (sticky_) {
            Error e = *sticky_;
            sticky_.reset();
            throw e;
        }
        return true;
    }

    void run_sync(const std::function<void()>& body) override {
        auto op = std::make_shared<OpStatus>();
        auto& cur = current_op();
        auto saved = cur;
        cur = op;
        try {
            body();
        } catch (...) {
            cur = saved;
            throw;
        }
        cur = saved;
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return op->outstanding == 0; });
        wait_done(op->last_point, &lock);
        if (op->err) throw *op->err;
    }

    // Completion thread, once the job that was in flight when a batch opened has finished.
    void flush_from_thread() {
        std::lock_guard lock(mu_);
        try {
            flush_batch();
        } catch (const Error& e) {
            record_error(nullptr, e);
        }
    }

    // Completion thread, after a host function: runs the work queued behind it.
    void run_deferred() {
        std::lock_guard lock(mu_);
        blocked_ = false;
        while (!blocked_ && !deferred_.empty()) {
            Deferred d = std::move(deferred_.front());
            deferred_.pop_front();
            cur_op_ = d.op;
            try {
                d.fn();
            } catch (const Error& e) {
                record_error(d.op.get(), e);
            } catch (const std::exception& e) {
                record_error(d.op.get(), Error(SPYRE_ERROR_INTERNAL, e.what()));
            }
            if (d.op) d.op->outstanding--;
            cur_op_ = nullptr;
        }
        cv_.notify_all();
    }

    // Waits until the job of timeline point p has finished and collects the outcomes up to it.
    // The caller holds mu_ (through *lk, which is released while waiting, or directly if lk is
    // null). Waits with JOB_WAIT on the job: the driver wakes it straight from the completion,
    // which is quicker than a syncobj timeline wait; a ring runs a stream's jobs in order, so
    // all earlier points are done too.
    void wait_done(uint64_t p, std::unique_lock<std::mutex>* lk) {
        if (p <= reaped_) return;
        uint64_t id = 0;
        for (auto it = pending_.rbegin(); it != pending_.rend(); ++it)
            if (it->point == p) {
                id = it->job_id;
                break;
            }
        if (lk) lk->unlock();
        try {
            if (id)
                dev_->wait_job(id, std::format("job at stream point {}", p));
            else
                dev_->wait_point(sync_, p, std::format("stream work up to point {}", p));
        } catch (const Error& e) {
            if (lk) lk->lock();
            if (e.status() == SPYRE_ERROR_DEVICE_LOST) abandon_pending();
            throw;
        } catch (...) {
            if (lk) lk->lock();
            throw;
        }
        if (lk) lk->lock();
        reap(p);
    }

    // The card is gone: no pending job will finish. Their buffer references go now, not when
    // the stream goes (the default stream lives as long as its device).
    void abandon_pending() {
        for (auto& p : pending_) p.refs.clear();
    }

    // Collects the outcome of finished jobs up to `done_upto` (0: ask the syncobj).
    void reap(uint64_t done_upto) {
        if (!pending_.empty() && pending_.front().point > done_upto)
            done_upto = std::max(done_upto, dev_->syncobj_value(sync_));
        while (!pending_.empty() && pending_.front().point <= done_upto) {
            finish(pending_.front());
            pending_.pop_front();
            while (!markers_.empty() && markers_.front()->point_ <= reaped_) {
                complete_marker(markers_.front());
                markers_.pop_front();
            }
        }
    }

    KernelDevice* dev_;
    uint32_t sync_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;

  private:
    // A LAUNCH of a job: its result slot, its index among the job's commands (the driver's
    // failed_cmd) and the label it was queued under (spyre_push_launch_label), if any.
    struct LaunchTag {
        int slot = -1;
        uint32_t cmd = 0;
        std::shared_ptr<const std::string> label;
    };
    // A SEM_WAIT of a job of several commands: its index (the driver's failed_cmd) and the
    // wait, whose timeout is reported as when queued alone.
    struct SemTag {
        uint32_t cmd = 0;
        std::shared_ptr<const SemOp> sem;
    };
    // KernelStream::replay: the PEER BOs of a batch's nodes (by index), or why there is none.
    struct PeerImports {
        std::map<size_t, std::shared_ptr<Bo>> bos;
        std::map<size_t, Error> errors;
    };
    struct Pending {
        uint64_t point = 0, job_id = 0;
        std::string what;
        std::vector<BufferRef> refs;
        int slot = -1;  // launch result slot
        spyre_launch_stats* stats = nullptr;
        std::shared_ptr<OpStatus> op;
        std::shared_ptr<const std::string> label;  // of the one launch (slot >= 0)
        std::vector<LaunchTag> batch;      // a batch of launches: their slots, commands and labels
        std::shared_ptr<const SemOp> sem;  // a semaphore wait: its timeout is reported as such
        std::vector<SemTag> sems;          // the semaphore waits of a replay's job
    };
    struct Deferred {
        std::function<void()> fn;
        std::shared_ptr<OpStatus> op;
    };

    // Runs fn (which submits) under the stream lock now, or later behind a host function.
    void enqueue(std::function<void()> fn, std::function<void()> on_defer = {}) {
        std::unique_lock lock(mu_);
        auto op = current_op();
        if (blocked_ || !deferred_.empty()) {
            if (on_defer) on_defer();
            if (op) op->outstanding++;
            deferred_.push_back({std::move(fn), op});
            return;
        }
        cur_op_ = op;
        try {
            fn();
        } catch (...) {
            cur_op_ = nullptr;
            throw;
        }
        cur_op_ = nullptr;
    }

    void record_error(OpStatus* op, const Error& e) {
        if (op) {
            if (!op->err) op->err = e;
        } else if (!sticky_) {
            sticky_ = e;
        }
    }

    // The marker's modeled time (Documentation/libspyre.md "Modeled time"): without the job
    // clock the stream's jobs' cycles summed so far; with it (hw 1.7) the end of the stream's
    // last job on the card's clock, and at least what the host had seen complete on the card
    // when it recorded the marker. Known neither (nothing reaped on this card yet): the start of
    // the stream's next job, set when that job is reaped.
    void complete_marker(const std::shared_ptr<KMarker>& m) {
        if (dev_->job_clock()) {
            m->cycles_ = std::max(end_, m->not_before_);
            if (!m->cycles_) unanchored_.push_back(m);
        } else {
            m->cycles_ = cycles_;
        }
        m->time_ = monotonic_ns();
        m->done_ = true;
    }

    void finish(Pending& p) {
        reaped_ = p.point;
        drm_spyre_job_wait w{};
        try {
            w = dev_->reap_job(p.job_id, p.what);
            // A SEM_WAIT that timed out (a job of its own, or failed_cmd of a replay's job).
            const SemOp* timed_out = nullptr;
            if (w.status == DRM_SPYRE_JOB_DEVICE_ERROR && w.hw_status == SPYRE_STATUS_ERR_TIMEOUT) {
                if (p.sem) timed_out = p.sem.get();
                for (const SemTag& t : p.sems)
                    if (t.cmd == w.failed_cmd) timed_out = t.sem.get();
            }
            cycles_ += w.cycles;
            if (w.end_cycle) {
                for (auto& m : unanchored_)
                    if (!m->cycles_) m->cycles_ = w.start_cycle;
                unanchored_.clear();
                end_ = std::max<uint64_t>(end_, w.end_cycle);
                dev_->observe(w.end_cycle);
            }
            if (p.slot >= 0) {
                drm_spyre_launch_result r{};
                std::memcpy(&r, result_ptr_ + slot_offset(p.slot),
                            std::min<uint64_t>(slot_bytes(p.slot), sizeof r));
                r.message[sizeof r.message - 1] = '\0';
                const std::string* label = p.label.get();
                if (w.status == DRM_SPYRE_JOB_DEVICE_ERROR &&
                    w.hw_status == SPYRE_STATUS_ERR_PROGRAM) {
                    int err = r.error ? static_cast<int>(r.error) : static_cast<int>(w.hw_detail);
                    if (r.error) fail_program(dev_->name(), err, r.core, r.pc, r.message, label);
                    fail_program(dev_->name(), err, -1, 0, "the driver returned no launch result",
                                 label);
                }
                if (w.status != DRM_SPYRE_JOB_OK) dev_->fail_job(w, p.what, label);
                if (r.error)
                    fail_program(dev_->name(), static_cast<int>(r.error), r.core, r.pc, r.message,
                                 label);
                if (p.stats) stats_from_result(r, dev_->info().clock_mhz, p.stats);
            } else if (!p.batch.empty()) {
                // The first launch that faulted (later commands of the job still ran).
                for (const LaunchTag& t : p.batch) {
                    drm_spyre_launch_result r{};
                    std::memcpy(&r, result_ptr_ + slot_offset(t.slot),
                                std::min<uint64_t>(slot_bytes(t.slot), sizeof r));
                    r.message[sizeof r.message - 1] = '\0';
                    if (r.error && (!timed_out || t.cmd < w.failed_cmd))
                        fail_program(dev_->name(), static_cast<int>(r.error), r.core, r.pc,
                                     r.message, t.label.get());
                }
                if (timed_out) fail_sem_timeout(*timed_out);
                // Otherwise the failing command, when it is a launch, names who queued it
                // (failed_cmd is meaningful for a device error only).
                const std::string* label = nullptr;
                if (w.status == DRM_SPYRE_JOB_DEVICE_ERROR)
                    for (const LaunchTag& t : p.batch)
                        if (t.cmd == w.failed_cmd) label = t.label.get();
                if (w.status == DRM_SPYRE_JOB_DEVICE_ERROR &&
                    w.hw_status == SPYRE_STATUS_ERR_PROGRAM)
                    fail_program(dev_->name(), static_cast<int>(w.hw_detail), -1, 0,
                                 "the driver returned no launch result", label);
                if (w.status != DRM_SPYRE_JOB_OK) dev_->fail_job(w, p.what, label);
            } else if (w.status != DRM_SPYRE_JOB_OK) {
                if (timed_out) fail_sem_timeout(*timed_out);
                dev_->fail_job(w, p.what);
            }
        } catch (const Error& e) {
            record_error(p.op.get(), e);
        }
    }

    // A SEM_WAIT that timed out (ERR_TIMEOUT): the value it wanted and the one the semaphore
    // holds now (read through the buffer's mapping; the card saw it at the deadline).
    [[noreturn]] void fail_sem_timeout(const SemOp& s) {
        std::string seen = "an unknown value (the buffer cannot be mapped)";
        try {
            const auto* p = static_cast<const std::byte*>(s.buf->root().map()) +
                            s.buf->root_offset() + s.offset;
            uint64_t v;
            std::memcpy(&v, p, sizeof v);
            seen = std::to_string(v);
        } catch (const Error&) {
        }
        fail(SPYRE_ERROR_TIMEOUT,
             std::format("semaphore wait on {} timed out after {} us: the semaphore at offset {} "
                         "of its buffer holds {}, the wait wanted a value >= {}",
                         dev_->name(), s.timeout_us, s.offset, seen, s.value));
    }

    // Queues one job on the ring; the caller holds mu_.
    void submit(std::span<const drm_spyre_cmd> cmds, std::string what, std::vector<BufferRef> refs,
                int slot = -1, spyre_launch_stats* stats = nullptr,
                std::vector<LaunchTag> batch = {},
                std::shared_ptr<const std::string> label = nullptr) {
        flush_batch();                                // batched launches were queued first
        if (pending_.size() >= kMaxStreamInflight) {  // bounded: wait for the oldest
            dev_->counters().backpressure_waits++;
            wait_done(pending_.front().point, nullptr);
        }
        drm_spyre_submit s{};
        s.cmds = reinterpret_cast<uintptr_t>(cmds.data());
        s.cmd_count = static_cast<uint32_t>(cmds.size());
        s.ring = ring_;
        s.priority = dev_->submit_priority(priority_);
        if (!in_syncs_.empty()) {
            s.in_syncs = reinterpret_cast<uintptr_t>(in_syncs_.data());
            s.in_sync_count = static_cast<uint32_t>(in_syncs_.size());
        }
        s.out_sync = sync_;
        s.out_point = point_ + 1;
        uint64_t id = dev_->submit(s);
        ++point_;
        in_syncs_.clear();
        pending_.push_back({point_,
                            id,
                            std::move(what),
                            std::move(refs),
                            slot,
                            stats,
                            cur_op_,
                            std::move(label),
                            std::move(batch),
                            nullptr,
                            {}});
        if (cur_op_) cur_op_->last_point = point_;
    }

    // Event waits not yet attached to a job get a NOP job of their own.
    void flush_in_syncs() {
        if (in_syncs_.empty()) return;
        drm_spyre_cmd c{};
        c.op = DRM_SPYRE_CMD_NOP;
        submit({&c, 1}, "event wait", {});
    }

    void copy_direct(Bo& dst, uint64_t dst_offset, Bo& src, uint64_t src_offset, uint64_t size,
                     const char* direction, std::vector<BufferRef> refs) {
        std::vector<drm_spyre_cmd> cmds;
        uint64_t done = 0;
        while (done < size) {
            cmds.clear();
            uint64_t job_start = done;
            while (done < size && cmds.size() < DRM_SPYRE_MAX_CMDS) {
                uint64_t n = std::min(kMaxCmdBytes, size - done);
                cmds.push_back(copy_cmd(dst, dst_offset + done, src, src_offset + done, n));
                done += n;
            }
            submit(cmds,
                   std::format("{} copy of {} at source offset {:#x}, destination offset {:#x}",
                               direction, format_bytes(done - job_start), src_offset + job_start,
                               dst_offset + job_start),
                   refs);
        }
    }

    // A staging slot released at the current point when the scope ends (or idle if nothing
    // was submitted with it).
    struct SlotGuard {
        KernelStream* s;
        KStagingSlot* slot;
        uint64_t point_before;
        ~SlotGuard() {
            if (slot)
                s->dev_->release_slot(slot, s->point_ > point_before ? s->sync_ : 0, s->point_);
        }
    };

    void copy_htod_staged(const BufferRef& dst, uint64_t dst_offset, const void* src,
                          uint64_t size) {
        Bo& bo = root_bo(*dst);
        const uint64_t base = dst->root_offset() + dst_offset;
        ChunkPlan plan(size, base, dev_->chunk_bytes(), 1);
        const auto* in = static_cast<const std::byte*>(src);
        for (uint64_t i = 0; i < plan.count(); ++i) {
            Chunk c = plan.at(i);
            SlotGuard g{this, dev_->acquire_slot(), point_};
            std::memcpy(g.slot->ptr, in + c.host_offset, c.size);
            drm_spyre_cmd cmd = copy_cmd(bo, c.dev_offset, *g.slot->bo, 0, c.size);
            submit({&cmd, 1},
                   std::format("host->device copy of {} to offset {:#x}, chunk {} of {}",
                               format_bytes(size), dst_offset, i, plan.count()),
                   {dst});
        }
    }

    // Runs inside run_sync (cur_op_ set): waits for each chunk.
    void copy_dtoh_staged(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) {
        Bo& bo = root_bo(*src);
        const uint64_t base = src->root_offset() + src_offset;
        ChunkPlan plan(size, base, dev_->chunk_bytes(), 1);
        auto* out = static_cast<std::byte*>(dst);
        struct InFlight {
            KStagingSlot* slot = nullptr;
            uint64_t point = 0;
        };
        std::deque<InFlight> q;
        OpStatus* op = cur_op_.get();
        auto issue = [&](uint64_t i) {
            Chunk c = plan.at(i);
            KStagingSlot* slot = dev_->acquire_slot();
            drm_spyre_cmd cmd = copy_cmd(*slot->bo, 0, bo, c.dev_offset, c.size);
            try {
                submit({&cmd, 1},
                       std::format("device->host copy of {} from offset {:#x}, chunk {} of {}",
                                   format_bytes(size), src_offset, i, plan.count()),
                       {src});
            } catch (...) {
                dev_->release_slot(slot, 0, 0);
                throw;
            }
            q.push_back({slot, point_});
        };
        auto release_all = [&] {
            for (auto& f : q) dev_->release_slot(f.slot, sync_, f.point);
            q.clear();
        };
        try {
            // Two chunks in flight: the DMA of chunk i + 1 overlaps the CPU copy of chunk i.
            for (uint64_t i = 0; i < std::min<uint64_t>(plan.count(), 2); ++i) issue(i);
            for (uint64_t i = 0; i < plan.count(); ++i) {
                InFlight f = q.front();
                wait_done(f.point, nullptr);
                if (op && op->err) {
                    release_all();
                    return;
                }
                Chunk c = plan.at(i);
                std::memcpy(out + c.host_offset, f.slot->ptr, c.size);
                q.pop_front();
                dev_->release_slot(f.slot, 0, 0);
                if (i + 2 < plan.count()) issue(i + 2);
            }
        } catch (...) {
            release_all();
            throw;
        }
    }

    // The 8-byte pattern whose byte k is byte (phase + k) of the repeated psize-byte pattern.
    static uint64_t pattern8(uint64_t pattern, uint32_t psize, uint64_t phase) {
        uint8_t b[16];
        for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(pattern >> (8 * (i % psize)));
        uint64_t r;
        std::memcpy(&r, b + phase % psize, 8);
        return r;
    }

    static const std::vector<uint8_t>& fill_image() {
        static const std::vector<uint8_t> img = [] {
            // Each core: fill 16 KiB of scratchpad with the pattern (arg 2), then STORE it over
            // its slice (arg 1 bytes, a multiple of 128) of the destination (arg 0, 128-aligned).
            spyre::ProgramBuilder b;
            b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
            b.mul(6, 1, 4);
            b.add(3, 3, 6);
            b.li(7, 0);
            b.loopi(kFillLx / 8);
            b.lxst(7, 5, 0);
            b.addi(7, 7, 8);
            b.endloop();
            b.li(9, kFillLx), b.li(10, 0);
            b.alu(spyre::isa::Alu::DIVU, 11, 4, 9);
            b.alu(spyre::isa::Alu::REMU, 12, 4, 9);
            // a core addresses 256 MiB from its span base (isa.md): the span follows the
            // stores, so any slice of any buffer is in reach
            b.loop(11);
            b.span(3);
            b.store(10, 3, 9);
            b.add(3, 3, 9);
            b.endloop();
            b.span(3);
            b.store(10, 3, 12);  // the rest (len 0 is a no-op)
            b.halt();
            return b.finish();
        }();
        return img;
    }

    BufferRef fill_program() {
        return dev_->load_program_image(fill_image().data(), fill_image().size());
    }

    void fill_locked(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
                     uint32_t psize, const BufferRef& prog) {
        const uint64_t p8 = pattern8(pattern, psize, 0);
        if (prog) {
            const uint32_t cores = dev_->info().num_cores;
            const uint64_t addr = dst->dev_addr() + offset;
            const uint64_t head = std::min(size, (128 - addr % 128) % 128);
            const uint64_t slice = (size - head) / cores / 128 * 128;
            if (slice) {
                const uint64_t mid = slice * cores;
                if (head) fill_dma(dst, offset, head, p8);
                LaunchRequest req;
                req.program = prog;
                req.num_cores = cores;
                req.num_args = 3;
                req.args[0] = addr + head;
                req.args[1] = slice;
                req.args[2] = pattern8(pattern, psize, head);
                req.buffers = {dst};
                req.program_size = fill_image().size();
                launch_locked(req, nullptr);
                if (size > head + mid)
                    fill_dma(dst, offset + head + mid, size - head - mid,
                             pattern8(pattern, psize, head + mid));
                return;
            }
        }
        fill_dma(dst, offset, size, p8);
    }

    // Fills by DMA: the 8-byte pattern written once into a staging slot, replicated by COPY
    // commands.
    void fill_dma(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern) {
        Bo& bo = root_bo(*dst);
        const uint64_t base = dst->root_offset() + offset;
        SlotGuard g{this, dev_->acquire_slot(), point_};
        const uint64_t chunk = dev_->chunk_bytes();  // a multiple of 4096: whole patterns
        const uint64_t block = std::min(size, chunk);
        fill_by_doubling(g.slot->ptr, pattern, block);
        std::vector<drm_spyre_cmd> cmds;
        uint64_t done = 0;
        while (done < size) {
            cmds.clear();
            while (done < size && cmds.size() < DRM_SPYRE_MAX_CMDS) {
                uint64_t n = std::min(block, size - done);
                cmds.push_back(copy_cmd(bo, base + done, *g.slot->bo, 0, n));
                done += n;
            }
            submit(cmds, std::format("fill of {} at offset {:#x}", format_bytes(size), offset),
                   {dst});
        }
    }

    void launch_locked(const LaunchRequest& req, spyre_launch_stats* stats) {
        if (!(dev_->info().caps & DRM_SPYRE_CAP_LAUNCH))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: the driver or card cannot run programs (no "
                             "DRM_SPYRE_CAP_LAUNCH); update the spyre driver and the card model, "
                             "or use SPYRE_BACKEND=sim",
                             dev_->name()));
        if (!result_bo_) {
            auto bo = dev_->create_bo(kFullBase + kFullSlots * kFullSlotBytes, DRM_SPYRE_BO_HOST);
            result_ptr_ = static_cast<std::byte*>(bo->map());
            result_bo_ = std::move(bo);
        }
        // Asynchronous launches while the stream has work in flight are batched: several
        // LAUNCH commands in one job, submitted when the batch is full, when other work is
        // queued or the stream is synchronized, or (completion thread) when the stream's last
        // job finishes, so the card never waits for the batch.
        const bool batchable = !stats && !cur_op_ && !batch_off_;
        if (batchable && batch_.cmds.empty()) {
            reap(0);
            if (!pending_.empty() && !flush_posted_) {
                flush_posted_ = true;
                dev_->post_flush(shared_from_this(), pending_.back().job_id);
            }
        }
        const bool to_batch = batchable && (!batch_.cmds.empty() || !pending_.empty());
        if (!to_batch) flush_batch();

        const uint32_t slot =
            stats ? kShortSlots + static_cast<uint32_t>(full_launches_++ % kFullSlots)
                  : static_cast<uint32_t>(launches_++ % kShortSlots);
        if (slot_point_[slot] > reaped_) {  // bounded: the slot's previous launch first
            dev_->counters().backpressure_waits++;
            wait_done(slot_point_[slot], nullptr);
        }
        std::memset(result_ptr_ + slot_offset(slot), 0, slot_bytes(slot));

        std::vector<std::unique_ptr<LaunchCmd>> exts;
        drm_spyre_cmd c = launch_cmd(req, slot, exts);
        if (to_batch) {
            batch_.cmds.push_back(c);
            batch_.launches.push_back(
                {static_cast<int>(slot), static_cast<uint32_t>(batch_.cmds.size() - 1), req.label});
            batch_.exts.push_back(std::move(exts.back()));
            for (const BufferRef& b : req.buffers) batch_.refs.push_back(b);
            batch_.refs.push_back(req.program);
            if (batch_.cmds.size() >= kMaxBatch) flush_batch();
            return;
        }
        std::vector<BufferRef> refs = req.buffers;
        refs.push_back(req.program);
        submit(
            {&c, 1},
            std::format("launch of a {}-instruction program on {} core{}",
                        (req.program_size - 32) / 16, req.num_cores, req.num_cores == 1 ? "" : "s"),
            std::move(refs), static_cast<int>(slot), stats, {}, req.label);
        slot_point_[slot] = point_;
    }

    // The commands of a graph in order, as few jobs as the driver's limits allow: at most
    // DRM_SPYRE_MAX_CMDS commands and DRM_SPYRE_FILE_MAX_LAUNCHES launches (one result slot
    // each) per SUBMIT. The caller holds mu_.
    void replay_locked(const Graph& g, const PeerImports* imps) {
        if (g.launches && !(dev_->info().caps & DRM_SPYRE_CAP_LAUNCH))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: the graph launches programs but the driver or card cannot run "
                             "them (no DRM_SPYRE_CAP_LAUNCH)",
                             dev_->name()));
        if (g.launches && !result_bo_) {
            auto bo = dev_->create_bo(kFullBase + kFullSlots * kFullSlotBytes, DRM_SPYRE_BO_HOST);
            result_ptr_ = static_cast<std::byte*>(bo->map());
            result_bo_ = std::move(bo);
        }
        flush_batch();
        const bool has_2d = dev_->info().caps & DRM_SPYRE_CAP_COPY_2D;
        constexpr size_t kMaxLaunches = std::min<size_t>(DRM_SPYRE_FILE_MAX_LAUNCHES, kShortSlots);
        Batch b;
        std::deque<drm_spyre_copy_2d> exts2d;
        std::deque<drm_spyre_sem> sem_exts;
        size_t part = 0;
        // The PEER BO a batch's node names on this card (a peer card's buffer), if any.
        auto peer_bo = [&](const GraphNode& n) -> std::shared_ptr<Bo> {
            if (!imps) return nullptr;
            auto it = imps->bos.find(static_cast<size_t>(&n - g.nodes.data()));
            return it == imps->bos.end() ? nullptr : it->second;
        };
        // The first node of the current job naming a PEER BO: a job the driver refuses with
        // -ENODEV (a revoked PEER BO) fails as that node would alone.
        const GraphNode* peer_node = nullptr;
        // The buffers of a node: every job with a command of it holds them (a node may span
        // two jobs).
        const GraphNode* cur = nullptr;
        auto add_refs = [&](const GraphNode& n) {
            std::shared_ptr<Bo> imp = peer_bo(n);
            if (imp) b.refs.push_back(imp);
            switch (n.op) {
                case GraphNode::Op::SemWrite:
                case GraphNode::Op::SemWait:
                    if (n.sem.buf) b.refs.push_back(n.sem.buf);
                    if (n.sem.imported) b.refs.push_back(n.sem.imported);
                    if ((imp || n.sem.imported) && !peer_node) peer_node = &n;
                    break;
                case GraphNode::Op::CopyPeer:
                    b.refs.push_back(n.peer.local);
                    if (n.peer.peer) b.refs.push_back(n.peer.peer);
                    if (n.peer.imported) b.refs.push_back(n.peer.imported);
                    if (!peer_node) peer_node = &n;
                    break;
                case GraphNode::Op::Launch:
                    for (const BufferRef& r : n.launch.buffers) b.refs.push_back(r);
                    b.refs.push_back(n.launch.program);
                    break;
                case GraphNode::Op::CopyDtoD:
                    b.refs.push_back(n.dst), b.refs.push_back(n.src);
                    break;
                case GraphNode::Op::Copy3D:
                    b.refs.push_back(n.copy.dst.buf), b.refs.push_back(n.copy.src.buf);
                    break;
                case GraphNode::Op::Fill:
                    b.refs.push_back(n.dst);
                    if (n.pattern_block) b.refs.push_back(n.pattern_block);
                    break;
                case GraphNode::Op::Record:
                    break;
            }
        };
        auto flush = [&] {
            if (b.cmds.empty()) return;
            try {
                submit(b.cmds,
                       std::format("graph replay part {} ({} commands, {} launches)", part++,
                                   b.cmds.size(), b.launches.size()),
                       std::move(b.refs), -1, nullptr, b.launches);
            } catch (const Error& e) {
                if (peer_node && e.status() == SPYRE_ERROR_DEVICE_LOST && dev_->alive())
                    fail_peer_node(*peer_node, e);
                throw;
            }
            pending_.back().sems = std::move(b.sems);
            for (const LaunchTag& t : b.launches) slot_point_[t.slot] = point_;
            b = Batch{};
            exts2d.clear();
            sem_exts.clear();
            peer_node = nullptr;
            if (cur) add_refs(*cur);
        };
        // Room for `cmds` more commands (and a launch) in the current job.
        auto room = [&](size_t cmds, bool launch) {
            if (b.cmds.size() + cmds > DRM_SPYRE_MAX_CMDS ||
                (launch && b.launches.size() + 1 > kMaxLaunches))
                flush();
        };
        auto copy = [&](Bo& dst, uint64_t doff, Bo& src, uint64_t soff, uint64_t size) {
            for (uint64_t done = 0; done < size;) {
                const uint64_t n = std::min(kMaxCmdBytes, size - done);
                room(1, false);
                b.cmds.push_back(copy_cmd(dst, doff + done, src, soff + done, n));
                done += n;
            }
        };
        auto copy_2d = [&](Bo& dst, uint64_t doff, Bo& src, uint64_t soff, uint64_t width,
                           uint64_t height, uint64_t spitch, uint64_t dpitch) {
            room(1, false);
            drm_spyre_copy_2d& e = exts2d.emplace_back();
            e.height = height;
            e.src_pitch = spitch;
            e.dst_pitch = dpitch;
            drm_spyre_cmd c = copy_cmd(dst, doff, src, soff, width);
            c.op = DRM_SPYRE_CMD_COPY_2D;
            c.ext = reinterpret_cast<uintptr_t>(&e);
            c.ext_size = sizeof e;
            b.cmds.push_back(c);
        };
        // Pattern blocks of fills held by a batch (no pattern_block): written into one staging
        // slot (pinned host memory the card reads), one block per pattern, released at the
        // replay's last job (freed by the slot's timeline point, as a staged copy's). A fill of
        // up to kHeldFillWhole gets a block of its whole size while the slot has room beyond
        // the kFillBlock blocks of a full batch: one COPY, as when queued alone (the same
        // modeled cycles); a larger one a kFillBlock block, a COPY_2D and a tail. A full slot
        // ends the job that reads it and the next blocks go to another slot.
        SlotGuard fslot{this, nullptr, 0};
        uint64_t fslot_used = 0;
        struct HostBlock {
            uint64_t p8, offset, size;
        };
        std::vector<HostBlock> host_blocks;
        const uint64_t chunk = dev_->chunk_bytes();
        auto host_block = [&](uint64_t p8, uint64_t fill) -> HostBlock {
            for (const HostBlock& hb : host_blocks)
                if (hb.p8 == p8 && hb.size >= fill) return {p8, hb.offset, fill};
            auto round = [](uint64_t n) { return (n + 63) & ~uint64_t(63); };
            uint64_t size = std::min(fill, kFillBlock);
            if (fill <= kHeldFillWhole && round(fill) + kHeldFillReserve <= chunk - fslot_used)
                size = fill;
            else
                for (const HostBlock& hb : host_blocks)
                    if (hb.p8 == p8 && hb.size >= size) return {p8, hb.offset, size};
            if (!fslot.slot || fslot_used + round(size) > chunk) {
                if (fslot.slot) {
                    flush();
                    dev_->release_slot(fslot.slot, sync_, point_);
                    fslot.slot = nullptr;
                }
                fslot.point_before = point_;
                fslot.slot = dev_->acquire_slot();
                fslot_used = 0;
                host_blocks.clear();
            }
            fill_by_doubling(fslot.slot->ptr + fslot_used, p8, size);
            host_blocks.push_back({p8, fslot_used, size});
            fslot_used += round(size);
            return host_blocks.back();
        };
        // A node whose peer has gone is left out; its error is thrown once the rest is queued.
        std::optional<Error> first_err;
        for (const GraphNode& n : g.nodes) {
            if (imps) {
                auto it = imps->errors.find(static_cast<size_t>(&n - g.nodes.data()));
                if (it != imps->errors.end()) {
                    if (!first_err) first_err = it->second;
                    continue;
                }
            }
            cur = nullptr;  // a job begun here holds no earlier node's buffers
            if (n.op == GraphNode::Op::Launch) room(1, true);
            if (n.op == GraphNode::Op::SemWrite || n.op == GraphNode::Op::SemWait) room(1, false);
            cur = &n;
            add_refs(n);
            switch (n.op) {
                case GraphNode::Op::SemWrite:
                case GraphNode::Op::SemWait: {
                    // As write_value / write_value_to_import / wait_value build them.
                    const SemOp& so = n.sem;
                    drm_spyre_sem& ext = sem_exts.emplace_back();
                    ext.value = so.value;
                    if (n.op == GraphNode::Op::SemWait) {
                        ext.timeout_us = so.timeout_us;
                        b.sems.push_back(
                            {static_cast<uint32_t>(b.cmds.size()), std::make_shared<SemOp>(so)});
                        b.cmds.push_back(sem_cmd(DRM_SPYRE_CMD_SEM_WAIT, root_bo(*so.buf),
                                                 so.buf->root_offset() + so.offset, ext));
                    } else if (so.imported) {
                        b.cmds.push_back(sem_cmd(DRM_SPYRE_CMD_SEM_SIGNAL,
                                                 static_cast<Bo&>(*so.imported), so.offset, ext));
                    } else {
                        std::shared_ptr<Bo> imp = peer_bo(n);
                        b.cmds.push_back(sem_cmd(DRM_SPYRE_CMD_SEM_SIGNAL,
                                                 imp ? *imp : root_bo(*so.buf),
                                                 so.buf->root_offset() + so.offset, ext));
                    }
                    break;
                }
                case GraphNode::Op::CopyPeer: {
                    const PeerCopy& pc = n.peer;
                    Bo& local = root_bo(*pc.local);
                    const uint64_t loff = pc.local->root_offset() + pc.local_offset;
                    if (pc.imported) {
                        copy(static_cast<Bo&>(*pc.imported), pc.peer_offset, local, loff, pc.size);
                        break;
                    }
                    std::shared_ptr<Bo> imp = peer_bo(n);
                    const uint64_t poff = pc.peer->root_offset() + pc.peer_offset;
                    if (pc.to_peer)
                        copy(*imp, poff, local, loff, pc.size);
                    else
                        copy(local, loff, *imp, poff, pc.size);
                    break;
                }
                case GraphNode::Op::Launch: {
                    const LaunchRequest& req = n.launch;
                    const uint32_t slot = static_cast<uint32_t>(launches_++ % kShortSlots);
                    if (slot_point_[slot] > reaped_) {
                        dev_->counters().backpressure_waits++;
                        wait_done(slot_point_[slot], nullptr);
                    }
                    std::memset(result_ptr_ + slot_offset(slot), 0, slot_bytes(slot));
                    b.cmds.push_back(launch_cmd(req, slot, b.exts));
                    b.launches.push_back({static_cast<int>(slot),
                                          static_cast<uint32_t>(b.cmds.size() - 1), req.label});
                    break;
                }
                case GraphNode::Op::CopyDtoD:
                    copy(root_bo(*n.dst), n.dst->root_offset() + n.dst_offset, root_bo(*n.src),
                         n.src->root_offset() + n.src_offset, n.size);
                    break;
                case GraphNode::Op::Copy3D: {
                    const Copy3D& c = n.copy;
                    Bo& dbo = root_bo(*c.dst.buf);
                    Bo& sbo = root_bo(*c.src.buf);
                    const uint64_t d0 = c.dst.buf->root_offset() + c.dst.offset;
                    const uint64_t s0 = c.src.buf->root_offset() + c.src.offset;
                    const bool rows_2d = has_2d && c.height > 1 && c.width <= UINT32_MAX &&
                                         c.height <= UINT32_MAX && c.src.pitch <= UINT32_MAX &&
                                         c.dst.pitch <= UINT32_MAX;
                    for (uint64_t z = 0; z < c.depth; ++z) {
                        const uint64_t dz = d0 + z * c.dst.slice_pitch;
                        const uint64_t sz = s0 + z * c.src.slice_pitch;
                        if (rows_2d) {
                            copy_2d(dbo, dz, sbo, sz, c.width, c.height, c.src.pitch, c.dst.pitch);
                            continue;
                        }
                        for (uint64_t r = 0; r < c.height; ++r)
                            copy(dbo, dz + r * c.dst.pitch, sbo, sz + r * c.src.pitch, c.width);
                    }
                    break;
                }
                case GraphNode::Op::Fill: {
                    if (!n.size) break;
                    // The pattern block repeated over the destination: one COPY_2D with a
                    // source pitch of 0, and the rest.
                    Bo* pbo_p = nullptr;
                    uint64_t p0 = 0, blk = 0;
                    if (n.pattern_block) {
                        pbo_p = &root_bo(*n.pattern_block);
                        p0 = n.pattern_block->root_offset();
                        blk = n.pattern_block->size();
                    } else {
                        const HostBlock hb =
                            host_block(pattern8(n.pattern, n.pattern_size, 0), n.size);
                        pbo_p = fslot.slot->bo.get();
                        p0 = hb.offset;
                        blk = hb.size;  // the fill's size or kFillBlock: whole patterns
                    }
                    Bo& pbo = *pbo_p;
                    Bo& dbo = root_bo(*n.dst);
                    const uint64_t d0 = n.dst->root_offset() + n.dst_offset;
                    const uint64_t rows = n.size / blk, tail = n.size % blk;
                    if (rows > 1 && has_2d && rows <= UINT32_MAX) {
                        copy_2d(dbo, d0, pbo, p0, blk, rows, 0, blk);
                    } else {
                        for (uint64_t r = 0; r < rows; ++r) copy(dbo, d0 + r * blk, pbo, p0, blk);
                    }
                    if (tail) copy(dbo, d0 + rows * blk, pbo, p0, tail);
                    break;
                }
                case GraphNode::Op::Record:
                    break;
            }
        }
        cur = nullptr;
        flush();
        if (first_err) throw *first_err;
    }

    // A job naming a PEER BO refused as the peer's card went (-ENODEV): the error of the
    // node's operation queued alone.
    [[noreturn]] void fail_peer_node(const GraphNode& n, const Error& e) {
        if (n.op == GraphNode::Op::CopyPeer && !n.peer.imported) fail_peer_lost(n.peer, e.what());
        if (n.op == GraphNode::Op::SemWrite && !n.sem.imported)
            fail(SPYRE_ERROR_DEVICE_LOST,
                 std::format("peer {} was removed or its driver unbound: {} cannot write "
                             "a semaphore in its memory ({})",
                             n.sem.peer_dev->name(), dev_->name(), e.what()));
        fail(SPYRE_ERROR_DEVICE_LOST,
             std::format("the peer card of a buffer shared by another process was "
                         "removed or its driver unbound: {}",
                         e.what()));
    }

  public:
    // Submits the batched launches as one job. The caller holds mu_.
    void flush_batch() {
        flush_posted_ = false;
        if (batch_.cmds.empty() || in_flush_) return;
        in_flush_ = true;
        Batch b = std::move(batch_);
        batch_ = Batch{};
        try {
            submit(b.cmds, std::format("batch of {} launches", b.cmds.size()), std::move(b.refs),
                   -1, nullptr, b.launches);
        } catch (...) {
            in_flush_ = false;
            throw;
        }
        in_flush_ = false;
        for (const LaunchTag& t : b.launches) slot_point_[t.slot] = point_;
    }

  private:
    struct LaunchCmd {
        drm_spyre_launch l{};
        std::vector<uint32_t> handles;
    };
    // The LAUNCH command of req with its result in `slot`; its extension is appended to exts
    // (which must live until the SUBMIT).
    drm_spyre_cmd launch_cmd(const LaunchRequest& req, uint32_t slot,
                             std::vector<std::unique_ptr<LaunchCmd>>& exts) {
        auto lc = std::make_unique<LaunchCmd>();
        for (const BufferRef& b : req.buffers) {
            uint32_t h = root_bo(*b).handle();
            if (std::find(lc->handles.begin(), lc->handles.end(), h) == lc->handles.end())
                lc->handles.push_back(h);
        }
        drm_spyre_launch& l = lc->l;
        l.num_cores = req.num_cores;
        l.num_args = req.num_args;
        for (uint32_t i = 0; i < req.num_args; ++i) l.args[i] = req.args[i];
        l.bo_handles = reinterpret_cast<uintptr_t>(lc->handles.data());
        l.bo_count = static_cast<uint32_t>(lc->handles.size());
        l.result_handle = result_bo_->handle();
        l.result_offset = slot_offset(slot);
        l.result_size = static_cast<uint32_t>(
            std::min<uint64_t>(slot_bytes(slot), sizeof(drm_spyre_launch_result)));

        drm_spyre_cmd c{};
        c.op = DRM_SPYRE_CMD_LAUNCH;
        c.src_handle = root_bo(*req.program).handle();
        c.src_offset = req.program->root_offset();
        c.size = req.program_size;
        c.ext = reinterpret_cast<uintptr_t>(&lc->l);
        c.ext_size = sizeof lc->l;
        exts.push_back(std::move(lc));
        return c;
    }
    struct Batch {
        std::vector<drm_spyre_cmd> cmds;
        std::vector<std::unique_ptr<LaunchCmd>> exts;
        std::vector<LaunchTag> launches;
        std::vector<BufferRef> refs;
        std::vector<SemTag> sems;  // replay_locked: the job's SEM_WAITs
    };
    Batch batch_;
    bool flush_posted_ = false, in_flush_ = false;
    const bool batch_off_ = std::getenv("SPYRE_NO_LAUNCH_BATCH") != nullptr;

    // ---- state guarded by mu_ ----
    uint64_t point_ = 0;   // last submitted timeline point
    uint64_t reaped_ = 0;  // outcomes collected up to this point
    uint64_t cycles_ = 0;  // modeled cycles of the reaped jobs
    uint64_t end_ = 0;     // job clock (hw 1.7): the latest end_cycle of the reaped jobs
    std::vector<std::shared_ptr<KMarker>> unanchored_;  // complete_marker: time still 0
    std::deque<Pending> pending_;
    std::deque<std::shared_ptr<KMarker>> markers_;
    std::vector<drm_spyre_sync> in_syncs_;
    std::optional<Error> sticky_;
    std::shared_ptr<OpStatus> cur_op_;
    bool blocked_ = false;  // a host function is pending: later work waits in deferred_
    std::deque<Deferred> deferred_;
    std::unique_ptr<Bo> result_bo_;
    std::byte* result_ptr_ = nullptr;
    uint64_t launches_ = 0, full_launches_ = 0;
    uint64_t slot_point_[kLaunchResultSlots] = {};

    friend class KMarker;
};

const void* KMarker::clock_id() const {
    return s_->dev_->job_clock() ? static_cast<const void*>(s_->dev_) : s_.get();
}

bool KMarker::done() {
    if (done_) return true;
    if (!resolved_) return false;
    std::lock_guard lock(s_->mu_);
    s_->reap(0);
    return done_;
}

void KMarker::wait() {
    std::unique_lock lock(s_->mu_);
    s_->cv_.wait(lock, [&] { return resolved_.load(); });
    if (done_) return;
    s_->wait_done(point_, &lock);
}

void KernelStream::copy_3d(const Copy3D& c3) {
    // Slices of one row are rows of one slice: the rows a COPY_2D can take at once.
    Copy3D c = c3;
    if (c.height == 1 && c.depth > 1) {
        c.height = c.depth, c.depth = 1;
        c.src.pitch = c.src.slice_pitch, c.dst.pitch = c.dst.slice_pitch;
    }
    const uint64_t rows = c.height * c.depth;
    auto row_off = [=](const CopySide& s, uint64_t r) {
        return (r / c.height) * s.slice_pitch + (r % c.height) * s.pitch;
    };
    auto span_of = [&](const CopySide& s) {
        return row_off(s, rows - 1) + c.width;  // bytes from the first row's start
    };
    // Resolve each side to a BO + base offset when it is device memory or pinned host memory.
    auto resolve = [&](const CopySide& s, Bo** bo, uint64_t* base) {
        if (s.buf) {
            *bo = &root_bo(*s.buf);
            *base = s.buf->root_offset() + s.offset;
            return true;
        }
        *bo = dev_->find_host_range(s.host, span_of(s), base);
        return *bo != nullptr;
    };
    Bo *sbo = nullptr, *dbo = nullptr;
    uint64_t sbase = 0, dbase = 0;
    const bool s_direct = resolve(c.src, &sbo, &sbase);
    const bool d_direct = resolve(c.dst, &dbo, &dbase);
    std::vector<BufferRef> refs;
    if (c.src.buf) refs.push_back(c.src.buf);
    if (c.dst.buf) refs.push_back(c.dst.buf);

    // Commands for rows [r0, r1) between two BOs (a packed side holds row r0 first, rows
    // back to back): one COPY_2D per run of rows with uniform pitches (the rows of one slice)
    // when the card has it, else COPY commands, merging adjacent rows.
    // SPYRE_COPY_2D=0 forces one command per row (for comparisons, spyre-bench).
    const char* env_2d = std::getenv("SPYRE_COPY_2D");
    const bool has_2d = (dev_->info().caps & DRM_SPYRE_CAP_COPY_2D) && c.width <= UINT32_MAX &&
                        !(env_2d && std::strcmp(env_2d, "0") == 0);
    auto row_cmds = [=](Bo& d, uint64_t dbase2, bool d_packed, Bo& s, uint64_t sbase2,
                        bool s_packed, uint64_t r0, uint64_t r1, CmdList& out) {
        const uint64_t sp = s_packed ? c.width : c.src.pitch;
        const uint64_t dp = d_packed ? c.width : c.dst.pitch;
        const bool pitched =
            has_2d && sp <= UINT32_MAX && dp <= UINT32_MAX && (sp != c.width || dp != c.width);
        for (uint64_t r = r0; r < r1;) {
            const uint64_t so = sbase2 + (s_packed ? (r - r0) * c.width : row_off(c.src, r));
            const uint64_t dof = dbase2 + (d_packed ? (r - r0) * c.width : row_off(c.dst, r));
            const uint64_t run =
                std::min<uint64_t>({r1, (r / c.height + 1) * c.height, r + UINT32_MAX}) - r;
            if (pitched && run > 1) {
                out.push_copy_2d(d, dof, s, so, c.width, run, sp, dp);
                r += run;
                continue;
            }
            if (!out.cmds.empty()) {
                auto& last = out.cmds.back();
                if (last.op == DRM_SPYRE_CMD_COPY && last.src_offset + last.size == so &&
                    last.dst_offset + last.size == dof && last.size + c.width <= kMaxCmdBytes) {
                    last.size += c.width;
                    ++r;
                    continue;
                }
            }
            out.cmds.push_back(copy_cmd(d, dof, s, so, c.width));
            ++r;
        }
    };
    auto submit_cmds = [=, this](CmdList& l, const char* what) {
        for (size_t i = 0; i < l.cmds.size(); i += DRM_SPYRE_MAX_CMDS) {
            size_t n = std::min<size_t>(DRM_SPYRE_MAX_CMDS, l.cmds.size() - i);
            submit(
                {l.cmds.data() + i, n},
                std::format("{} 3-D copy of {} x {} x {} bytes", what, c.width, c.height, c.depth),
                refs);
        }
    };

    if (s_direct && d_direct) {
        enqueue([=, this] {
            CmdList cmds;
            row_cmds(*dbo, dbase, false, *sbo, sbase, false, 0, rows, cmds);
            submit_cmds(cmds, "strided");
        });
        return;
    }
    const uint64_t chunk = dev_->chunk_bytes();
    if (c.width > chunk) {  // rows larger than a staging slot: one staged copy per row
        for (uint64_t r = 0; r < rows; ++r) {
            if (c.dst.buf)
                copy_htod(c.dst.buf, c.dst.offset + row_off(c.dst, r),
                          c.src.host + row_off(c.src, r), c.width);
            else
                copy_dtoh(c.dst.host + row_off(c.dst, r), c.src.buf,
                          c.src.offset + row_off(c.src, r), c.width);
        }
        return;
    }
    const uint64_t per_slot = chunk / c.width;
    if (c.dst.buf) {
        // Pageable host -> device: gather rows into a slot, scatter them with one job.
        auto snapshot = std::make_shared<std::vector<std::byte>>();
        const bool async = !current_op();
        const CopySide src = c.src;
        enqueue(
            [=, this] {
                CmdList cmds;
                for (uint64_t r0 = 0; r0 < rows; r0 += per_slot) {
                    uint64_t r1 = std::min(rows, r0 + per_slot);
                    SlotGuard g{this, dev_->acquire_slot(), point_};
                    for (uint64_t r = r0; r < r1; ++r) {
                        const std::byte* from = snapshot->empty() ? src.host + row_off(src, r)
                                                                  : snapshot->data() + r * c.width;
                        std::memcpy(g.slot->ptr + (r - r0) * c.width, from, c.width);
                    }
                    cmds.clear();
                    row_cmds(*dbo, dbase, false, *g.slot->bo, 0, true, r0, r1, cmds);
                    submit_cmds(cmds, "host->device");
                }
            },
            [=] {
                if (!async) return;
                snapshot->resize(rows * c.width);
                for (uint64_t r = 0; r < rows; ++r)
                    std::memcpy(snapshot->data() + r * c.width, src.host + row_off(src, r),
                                c.width);
            });
        return;
    }
    // Device -> pageable host: synchronous.
    auto body = [=, this] {
        enqueue([=, this] {
            OpStatus* op = cur_op_.get();
            CmdList cmds;
            for (uint64_t r0 = 0; r0 < rows; r0 += per_slot) {
                uint64_t r1 = std::min(rows, r0 + per_slot);
                SlotGuard g{this, dev_->acquire_slot(), point_};
                cmds.clear();
                row_cmds(*g.slot->bo, 0, true, *sbo, sbase, false, r0, r1, cmds);
                submit_cmds(cmds, "device->host");
                wait_done(point_, nullptr);
                if (op && op->err) return;
                for (uint64_t r = r0; r < r1; ++r)
                    std::memcpy(c.dst.host + row_off(c.dst, r), g.slot->ptr + (r - r0) * c.width,
                                c.width);
            }
        });
    };
    if (current_op())
        body();
    else
        run_sync(body);
}

bool KernelDevice::holds_fill(uint64_t size) {
    if (!(info_.caps & DRM_SPYRE_CAP_HOST_BO)) return false;
    return size < kProgramFillMin || !(info_.caps & DRM_SPYRE_CAP_LAUNCH) ||
           std::getenv("SPYRE_FILL_DMA_ONLY");
}

StreamRef KernelDevice::create_stream(int priority, bool is_default) {
    const uint32_t n = info_.num_rings;
    uint32_t ring = 0;
    if (is_default || n == 1)
        ring = 0;
    else if (priority < 0)
        ring = n - 1;  // high priority: a ring of its own
    else if (n >= 3)
        ring = 1 + next_ring_++ % (n - 2);
    else
        ring = 1;
    auto s = std::make_shared<KernelStream>(this, ring, priority);
    if (!is_default) register_stream(s);
    return s;
}

void KernelDevice::post_host_func(std::shared_ptr<KernelStream> s, uint64_t point,
                                  void (*fn)(void*), void* user) {
    std::lock_guard lock(cb_mu_);
    if (!cb_thread_.joinable()) cb_thread_ = std::thread([this] { completion_thread(); });
    cb_queue_.push_back({std::move(s), point, fn, user});
    cb_cv_.notify_one();
}

void KernelDevice::post_flush(std::shared_ptr<KernelStream> s, uint64_t job) {
    std::lock_guard lock(cb_mu_);
    if (!cb_thread_.joinable()) cb_thread_ = std::thread([this] { completion_thread(); });
    cb_queue_.push_back({std::move(s), 0, nullptr, nullptr, job});
    cb_cv_.notify_one();
}

void KernelDevice::completion_thread() {
    std::unique_lock lock(cb_mu_);
    for (;;) {
        cb_cv_.wait(lock, [&] { return cb_stop_ || !cb_queue_.empty(); });
        if (cb_queue_.empty()) return;  // stopping
        HostFunc h = std::move(cb_queue_.front());
        cb_queue_.pop_front();
        lock.unlock();
        if (!h.fn) {  // flush a launch batch once the stream's job in flight is done
            try {
                wait_job(h.flush_job, "job before a launch batch");
            } catch (const Error&) {
            }
            h.stream->flush_from_thread();
            h.stream.reset();
            lock.lock();
            continue;
        }
        try {
            wait_point(h.stream->sync_, h.point, "work before a host function");
        } catch (const Error&) {
        }
        h.fn(h.user);
        h.stream->run_deferred();
        h.stream.reset();
        lock.lock();
    }
}

}  // namespace spyre
