// The simulator backend's devices, buffers and streams over simulated cards (sim/card.hpp).
// Copies are memcpy; launches run the card's compute engine with the listed buffers as the job's
// memory windows. Timing-only cards move no data (reads give zeros) and keep program images on
// the host, with their buffers.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <format>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "peer_link.hpp"
#include "sim/card.hpp"

namespace spyre {

namespace {

using namespace sim;

constexpr int kMaxSimDevices = 64;

class SimBuffer final : public Buffer {
  public:
    SimBuffer(std::shared_ptr<SimCard> card, uint64_t addr, uint64_t size, uint64_t alloc)
        : card_(std::move(card)), addr_(addr), size_(size), alloc_(alloc) {}
    ~SimBuffer() override { card_->release(addr_, alloc_); }
    uint64_t size() const override { return size_; }
    uint64_t alloc_size() const override { return alloc_; }
    uint64_t dev_addr() const override { return addr_; }
    void* map() override {
        if (card_->timing_only())
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("spyre-sim{} is a timing-only simulated card "
                             "(SPYRE_SIM_TIMING_ONLY=1): its memory holds no data to map",
                             card_->index()));
        return card_->base() + addr_;
    }
    std::byte* ptr(uint64_t offset) const { return card_->base() + addr_ + offset; }
    // Timing-only cards: the program image of a program buffer (Device::write_program).
    std::vector<std::byte>& host_program() { return host_program_; }

  private:
    std::shared_ptr<SimCard> card_;
    uint64_t addr_, size_, alloc_;
    std::vector<std::byte> host_program_;
};

// An event's point on its card's timeline (sim/timeline.hpp). The host seeing it complete
// (done, wait) moves the card's observed time; a stream's worker waiting for it does not.
class SimMarker final : public Marker {
  public:
    SimMarker(const void* stream, std::shared_ptr<SimCard> card)
        : stream_(stream), card_(std::move(card)) {}
    bool done() override {
        std::lock_guard lock(mu_);
        if (done_) card_->timeline().observe(cycles_);
        return done_;
    }
    void wait() override {
        wait_on_worker();
        card_->timeline().observe(cycles());
    }
    void wait_on_worker() {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return done_; });
    }
    uint64_t cycles() override {
        std::lock_guard lock(mu_);
        return cycles_;
    }
    int64_t time_ns() override {
        std::lock_guard lock(mu_);
        return time_;
    }
    const void* stream_id() const override { return stream_; }
    const void* clock_id() const override { return card_.get(); }
    const SimCard* card() const { return card_.get(); }
    void complete(uint64_t cycles) {
        {
            std::lock_guard lock(mu_);
            done_ = true;
            cycles_ = cycles;
            time_ = monotonic_ns();
        }
        cv_.notify_all();
    }

  private:
    const void* stream_;
    std::shared_ptr<SimCard> card_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    uint64_t cycles_ = 0;
    int64_t time_ = 0;
};

class SimDevice;

// Semaphore writes of every simulated stream (of every card) wake the workers waiting for a
// semaphore; a waiter also polls (50 us doubling to 1 ms) for values the host writes through a
// mapped buffer, which wake nobody.
struct SemWakeup {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t gen = 0;  // under mu: bumped at every semaphore write
};
SemWakeup& sem_wakeup() {
    static SemWakeup w;
    return w;
}

// A simulated stream: a worker thread running the stream's work in order. Copies are memcpy
// into the card's memory, launches run the card's engine (one at a time per card), so a copy on
// one stream overlaps a launch on another. Event waits block the waiting stream's worker.
class SimStream final : public Stream {
  public:
    SimStream(SimDevice* dev, std::shared_ptr<SimCard> card, int priority);
    ~SimStream() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        work_cv_.notify_all();
        worker_.join();
    }

    void copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                   uint64_t size) override;
    void copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) override;
    void copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                   uint64_t src_offset, uint64_t size) override {
        refuse_if_lost();
        push([=, this] { run_dtod(dst, dst_offset, src, src_offset, size); });
    }
    void copy_3d(const Copy3D& c) override;
    void copy_peer(const PeerCopy& c) override;
    void write_value(const SemOp& s) override;
    void wait_value(const SemOp& s) override;
    void fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
              uint32_t psize) override {
        refuse_if_lost();
        push([=, this] { run_fill(dst, offset, size, pattern, psize); });
    }
    void launch(const LaunchRequest& req, spyre_launch_stats* stats) override {
        refuse_if_lost();
        push([=, this] { run_launch(req, stats); });
    }
    void replay(const GraphRef& g) override;
    void host_func(void (*fn)(void*), void* user) override {
        push([=] { fn(user); });
    }
    MarkerRef record() override {
        auto m = std::make_shared<SimMarker>(this, card_);
        push([=, this] { m->complete(end_); }, false);
        return m;
    }
    // Later work starts after the event's point when it is on this card's timeline (another
    // card's time is not comparable: the wait only orders the work).
    void wait(const MarkerRef& m) override {
        if (m->stream_id() == this) return;
        push([=, this] {
            auto* sm = dynamic_cast<SimMarker*>(m.get());
            if (!sm) return m->wait();
            sm->wait_on_worker();
            if (sm->card() == card_.get()) end_ = std::max(end_, sm->cycles());
        });
    }
    void synchronize() override {
        std::unique_lock lock(mu_);
        wait_done(lock, enq_);
        card_->timeline().observe(done_end_);
        if (sticky_) {
            Error e = *sticky_;
            sticky_.reset();
            throw e;
        }
    }
    std::optional<Error> failure() override {
        std::lock_guard lock(mu_);
        return sticky_;
    }
    bool query() override {
        std::lock_guard lock(mu_);
        if (done_ != enq_) return false;
        card_->timeline().observe(done_end_);
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
        wait_done(lock, op->last_seq);
        card_->timeline().observe(done_end_);
        if (op->err) throw *op->err;
    }

  private:
    // Work for a lost card is refused at once, as the driver refuses a job for a removed card.
    void refuse_if_lost();
    struct Item {
        std::function<void()> fn;
        std::shared_ptr<OpStatus> op;
        uint64_t seq;
        uint64_t not_before;  // the card's observed time when it was queued
    };
    // The worker is woken only when it sleeps and waiters only when there are any: a futex
    // call per launch was a good part of an op's host time (torch_spyre.md "Dispatch overhead").
    // Each item of work counts as a submission (spyre_runtime_stats); markers do not.
    void push(std::function<void()> fn, bool counted = true) {
        bool wake;
        const uint64_t not_before = card_->timeline().observed();
        {
            std::lock_guard lock(mu_);
            auto op = current_op();
            uint64_t seq = ++enq_;
            if (counted) dev_counters().jobs_submitted++;
            if (op) op->last_seq = seq;
            q_.push_back({std::move(fn), op, seq, not_before});
            wake = worker_idle_;
        }
        if (wake) work_cv_.notify_one();
    }
    // A waiter is woken when the item it waits for is done, not at every item before it (a
    // synchronize after 8 decode steps, ~170 launches queued, paid a futex wake and a context
    // switch per launch): wake_at_ is the smallest item any waiter waits for, and every waiter
    // still waiting after a wake-up enters its item again.
    void wait_done(std::unique_lock<std::mutex>& lock, uint64_t seq) {
        while (done_ < seq) {
            wake_at_ = std::min(wake_at_, seq);
            done_cv_.wait(lock);
        }
    }
    void run() {
        std::unique_lock lock(mu_);
        for (;;) {
            while (!stop_ && q_.empty()) {
                worker_idle_ = true;
                work_cv_.wait(lock);
                worker_idle_ = false;
            }
            if (q_.empty()) return;
            Item it = std::move(q_.front());
            q_.pop_front();
            lock.unlock();
            end_ = std::max(end_, it.not_before);
            std::optional<Error> err;
            try {
                it.fn();
            } catch (const Error& e) {
                err = e;
            } catch (const std::exception& e) {
                err = Error(SPYRE_ERROR_INTERNAL, e.what());
            }
            it.fn = nullptr;  // drop buffer references outside the lock
            lock.lock();
            if (err) {
                if (it.op) {
                    if (!it.op->err) it.op->err = err;
                } else if (!sticky_) {
                    sticky_ = err;
                }
            }
            done_ = it.seq;
            done_end_ = end_;
            if (done_ >= wake_at_) {
                wake_at_ = UINT64_MAX;
                done_cv_.notify_all();
            }
        }
    }
    std::byte* ptr(Buffer& b, uint64_t offset, uint64_t size);
    bool pinned(const void* p, uint64_t size);
    // The work of one operation, on the worker thread.
    void run_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                  uint64_t src_offset, uint64_t size) {
        std::byte* to = ptr(*dst, dst_offset, size);
        const std::byte* from = ptr(*src, src_offset, size);
        if (!card_->timing_only()) std::memmove(to, from, size);
        card_->count_copy(&drm_spyre_telemetry::d2d_bytes, size);
    }
    void run_fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
                  uint32_t psize) {
        std::byte* p = ptr(*dst, offset, size);
        if (card_->timing_only()) {
            // no data moves
        } else if (psize == 1) {
            std::memset(p, static_cast<int>(pattern & 0xff), size);
        } else {
            for (uint64_t i = 0; i < size; i += psize) std::memcpy(p + i, &pattern, psize);
        }
        card_->count_copy(&drm_spyre_telemetry::h2d_bytes, size);
    }
    void run_copy_3d(const Copy3D& c);
    void run_wait_value(const SemOp& s);
    void run_write_value(const SemOp& s);
    void run_copy_peer(const PeerCopy& c);
    RuntimeCounters& dev_counters();
    void run_launch(const LaunchRequest& req, spyre_launch_stats* stats);
    void run_linked(const GraphNode* nodes, uint32_t n);
    void take_fault(const LaunchRequest& req);
    spyre_engine_job launch_job(const LaunchRequest& req,
                                std::vector<spyre_engine_window>& windows);

    SimDevice* dev_;
    std::shared_ptr<SimCard> card_;
    // Modeled end of the stream's last job on the card's timeline (sim/timeline.hpp); worker
    // thread only. done_end_: its value when item done_ finished (under mu_).
    uint64_t end_ = 0;
    uint64_t done_end_ = 0;
    std::mutex mu_;
    std::condition_variable work_cv_;  // the worker waits for items
    std::condition_variable done_cv_;  // synchronize() and run_sync() wait for done_
    std::deque<Item> q_;
    uint64_t enq_ = 0, done_ = 0;
    bool stop_ = false;
    bool worker_idle_ = false;
    uint64_t wake_at_ = UINT64_MAX;  // the first item a waiter waits for (wait_done)
    std::optional<Error> sticky_;
    std::thread worker_;
};

class SimDevice final : public Device {
  public:
    explicit SimDevice(int index) : card_(get_card(index)) {
        const spyre_engine_config& cfg = card_->config();
        name_ = std::format("spyre-sim{}", index);
        spyre_device_info& i = info_;
        i.index = index;
        std::snprintf(i.name, sizeof i.name, "%s", name_.c_str());
        const bool t = card_->timing_only();
        std::snprintf(i.accel_path, sizeof i.accel_path, "%s",
                      t ? "(none: in-process simulator, TIMING-ONLY, no results)"
                        : "(none: in-process simulator)");
        std::snprintf(i.pci_address, sizeof i.pci_address, "sim:%04x:00:00.0", index);
        std::snprintf(i.driver_name, sizeof i.driver_name, "%s",
                      t ? "spyre-sim (timing-only)" : "spyre-sim");
        std::snprintf(i.driver_version, sizeof i.driver_version, "%s", spyre_get_version_string());
        i.pci_vendor = SPYRE_PCI_VENDOR_ID;
        i.pci_device = SPYRE_PCI_DEVICE_ID;
        i.hw_version_major = 1;
        i.hw_version_minor = 0;
        i.num_cores = cfg.num_cores;
        i.num_rings = 1;
        i.lx_bytes = static_cast<uint32_t>(cfg.lx_bytes);
        i.stick_bytes = SPYRE_ENGINE_STICK_BYTES;
        i.clock_mhz = static_cast<uint32_t>(cfg.clock_hz / 1000000);
        i.devmem_total = card_->size();
        i.max_buffer_bytes = card_->size();
        i.caps = SPYRE_DEVICE_CAP_DMA_COPY | SPYRE_DEVICE_CAP_HOST_BUFFER |
                 SPYRE_DEVICE_CAP_TELEMETRY | SPYRE_DEVICE_CAP_LAUNCH | SPYRE_DEVICE_CAP_SEMAPHORE;
        // Simulated cards copy card to card unless SPYRE_SIM_P2P=0 (a card without CAP_P2P).
        if (const char* p2p = std::getenv("SPYRE_SIM_P2P"); !p2p || std::strcmp(p2p, "0") != 0)
            i.caps |= SPYRE_DEVICE_CAP_P2P;
        i.backend = SPYRE_BACKEND_SIM;
    }

    ~SimDevice() override {
        release_runtime();
        for (auto& [p, n] : host_allocs_) {
            ::munmap(reinterpret_cast<void*>(p), n);
            card_->add_host_bytes(-static_cast<int64_t>(n));
        }
    }

    void check_present() override {
        if (card_->faults().lost()) fail_lost(name_);
    }
    drm_spyre_mem_info query_mem() override { return card_->mem_info(); }
    drm_spyre_telemetry query_telemetry() override { return card_->telemetry(); }
    std::vector<uint64_t> core_active_cycles() override { return card_->core_active_cycles(); }
    // A graph's consecutive launches run as one engine job (spyre_engine_run_linked).
    uint32_t max_linked_launches() override { return SPYRE_ENGINE_MAX_PARTS; }
    uint32_t max_linked_windows() override { return 1024; }
    bool holds_fill(uint64_t) override { return true; }
    // The other simulated cards: one modeled peer link each (peer_link.hpp), no PCI path.
    std::vector<drm_spyre_peer> query_peers() override {
        std::vector<drm_spyre_peer> peers;
        for (int j = 0; j < sim_device_count(); ++j) {
            if (j == info_.index) continue;
            drm_spyre_peer p{};
            p.accel_minor = static_cast<uint32_t>(j);
            if (info_.caps & SPYRE_DEVICE_CAP_P2P) p.flags = DRM_SPYRE_PEER_P2P;
            peers.push_back(p);
        }
        return peers;
    }

    std::unique_ptr<Buffer> alloc(uint64_t size) override {
        uint64_t bytes = size <= UINT64_MAX - kSimPage ? round_up(size, kSimPage) : UINT64_MAX;
        uint64_t addr = 0;
        if (card_->faults().lost()) fail_lost(name_);
        if (bytes > card_->size() || !card_->allocate(bytes, &addr)) {
            auto m = card_->mem_info();
            uint64_t free = m.devmem_total - m.devmem_used;
            std::string detail =
                std::format(", {} free of {}", format_bytes(free), format_bytes(m.devmem_total));
            if (m.devmem_largest_free < free && size <= free)
                detail +=
                    std::format(" (largest free block {})", format_bytes(m.devmem_largest_free));
            if (size > card_->size())
                detail += "; raise SPYRE_SIM_MEMORY for a larger simulated card";
            fail(SPYRE_ERROR_OUT_OF_MEMORY, std::format("out of device memory on {}: asked {}{}",
                                                        name_, format_bytes(size), detail));
        }
        return std::make_unique<SimBuffer>(card_, addr, size, bytes);
    }

    void* host_alloc(uint64_t size) override {
        uint64_t bytes = round_up(size, kSimPage);
        void* p =
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            fail(SPYRE_ERROR_OUT_OF_MEMORY,
                 std::format("out of pinned host memory on {}: asked {} ({})", name_,
                             format_bytes(size), errno_text(errno)));
        std::lock_guard lock(host_mu_);
        host_allocs_[reinterpret_cast<uintptr_t>(p)] = bytes;
        card_->add_host_bytes(static_cast<int64_t>(bytes));
        return p;
    }

    void host_free(void* ptr) override {
        std::lock_guard lock(host_mu_);
        auto it = host_allocs_.find(reinterpret_cast<uintptr_t>(ptr));
        if (it == host_allocs_.end()) fail_unknown_host_pointer(ptr, name_);
        ::munmap(ptr, it->second);
        card_->add_host_bytes(-static_cast<int64_t>(it->second));
        host_allocs_.erase(it);
    }

    void write_program(const BufferRef& buf, const void* image, size_t size) override {
        if (!card_->timing_only()) return Device::write_program(buf, image, size);
        auto& keep = static_cast<SimBuffer&>(buf->root()).host_program();
        const auto* p = static_cast<const std::byte*>(image);
        keep.assign(p, p + size);
    }

    StreamRef create_stream(int priority, bool is_default) override {
        auto st = std::make_shared<SimStream>(this, card_, priority);
        if (!is_default) register_stream(st);
        return st;
    }

    const std::shared_ptr<SimCard>& card() const { return card_; }

    // Another simulated card of this process, both with CAP_P2P.
    bool can_access_peer(Device& peer) override {
        auto* p = dynamic_cast<SimDevice*>(&peer);
        return p && p->card_ != card_ && (info_.caps & SPYRE_DEVICE_CAP_P2P) &&
               (p->info_.caps & SPYRE_DEVICE_CAP_P2P);
    }

    bool is_pinned(const void* ptr, uint64_t size) {
        std::lock_guard lock(host_mu_);
        uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
        auto it = host_allocs_.upper_bound(p);
        if (it == host_allocs_.begin()) return false;
        --it;
        return p - it->first < it->second && size <= it->second - (p - it->first);
    }

    // Pointer to [offset, offset + size) of a buffer, checked against the card like the
    // device's DMA engine checks its commands.
    std::byte* checked(Buffer& b, uint64_t offset, uint64_t size) {
        if (card_->faults().lost()) fail_lost(name_);
        auto& sb = static_cast<SimBuffer&>(b.root());
        offset += b.root_offset();
        uint64_t addr = sb.dev_addr() + offset;
        if (offset > sb.alloc_size() || size > sb.alloc_size() - offset || addr > card_->size() ||
            size > card_->size() - addr)
            fail(SPYRE_ERROR_INTERNAL,
                 std::format("{}: copy range {:#x}+{} outside the buffer at {:#x} ({} bytes)",
                             name_, addr, size, sb.dev_addr(), sb.alloc_size()));
        return sb.ptr(offset);
    }

  private:
    std::shared_ptr<SimCard> card_;
    std::mutex host_mu_;
    std::map<uintptr_t, uint64_t> host_allocs_;
};

SimStream::SimStream(SimDevice* dev, std::shared_ptr<SimCard> card, int priority)
    : dev_(dev), card_(std::move(card)) {
    priority_ = priority;
    worker_ = std::thread([this] { run(); });
}

std::byte* SimStream::ptr(Buffer& b, uint64_t offset, uint64_t size) {
    return dev_->checked(b, offset, size);
}

bool SimStream::pinned(const void* p, uint64_t size) { return dev_->is_pinned(p, size); }

RuntimeCounters& SimStream::dev_counters() { return dev_->counters(); }

void SimStream::refuse_if_lost() {
    if (card_->faults().lost()) fail_lost(dev_->name());
}

void SimStream::copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                          uint64_t size) {
    refuse_if_lost();
    if (card_->timing_only()) {  // nothing to keep: no data moves
        push([=, this] {
            ptr(*dst, dst_offset, size);  // the range checks of the real copy
            card_->count_copy(&drm_spyre_telemetry::h2d_bytes, size);
        });
        return;
    }
    if (!current_op() && !pinned(src, size)) {
        // Pageable memory: copied before the call returns, so the caller may reuse it.
        auto snap = std::make_shared<std::vector<std::byte>>(
            static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + size);
        push([=, this] {
            std::memcpy(ptr(*dst, dst_offset, size), snap->data(), size);
            card_->count_copy(&drm_spyre_telemetry::h2d_bytes, size);
        });
        return;
    }
    push([=, this] {
        std::memcpy(ptr(*dst, dst_offset, size), src, size);
        card_->count_copy(&drm_spyre_telemetry::h2d_bytes, size);
    });
}

void SimStream::copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) {
    refuse_if_lost();
    auto body = [=, this] {
        push([=, this] {
            const std::byte* from = ptr(*src, src_offset, size);
            if (card_->timing_only())
                std::memset(dst, 0, size);  // the card holds no data: reads give zeros
            else
                std::memcpy(dst, from, size);
            card_->count_copy(&drm_spyre_telemetry::d2h_bytes, size);
        });
    };
    if (current_op() || pinned(dst, size))
        body();
    else
        run_sync(body);  // into pageable memory: synchronous
}

// A lost peer (spyre_sim_inject_fault) fails a peer copy or semaphore write into its memory.
static void check_peer_copy(const std::shared_ptr<SimDevice>& peer, const PeerCopy& c,
                            const std::string& self) {
    if (peer->card()->faults().lost())
        fail(SPYRE_ERROR_DEVICE_LOST,
             std::format("peer {} was removed (a simulated loss: spyre_sim_inject_fault): {} "
                         "cannot copy {} {} its memory",
                         peer->name(), self, format_bytes(c.size), c.to_peer ? "into" : "from"));
}

static void check_peer_sem(const std::shared_ptr<SimDevice>& peer, const std::string& self) {
    if (peer && peer->card()->faults().lost())
        fail(SPYRE_ERROR_DEVICE_LOST,
             std::format("peer {} was removed (a simulated loss: spyre_sim_inject_fault): {} "
                         "cannot write a semaphore in its memory",
                         peer->name(), self));
}

void SimStream::copy_peer(const PeerCopy& c) {
    refuse_if_lost();
    if (c.imported)  // never made: simulated cards export no dma-bufs
        fail(SPYRE_ERROR_NOT_SUPPORTED, "simulated cards share no memory with other processes");
    // api.cpp: can_access_peer
    check_peer_copy(std::static_pointer_cast<SimDevice>(c.peer_dev), c, dev_->name());
    push([=, this] { run_copy_peer(c); });
}

// On the worker (queued alone, or held in a batch's replay).
void SimStream::run_copy_peer(const PeerCopy& c) {
    if (c.imported)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "simulated cards share no memory with other processes");
    auto peer = std::static_pointer_cast<SimDevice>(c.peer_dev);
    check_peer_copy(peer, c, dev_->name());
    std::byte* local = ptr(*c.local, c.local_offset, c.size);
    std::byte* remote = peer->checked(*c.peer, c.peer_offset, c.size);
    if (!card_->timing_only() && !peer->card()->timing_only())
        std::memcpy(c.to_peer ? remote : local, c.to_peer ? local : remote, c.size);
    // The issuing card's DMA engine moves the bytes over the peer link (hardware.md 11).
    end_ =
        card_->timeline().place(CardTimeline::Unit::Dma, end_,
                                peer_copy_cycles(card_->config(), peer->card()->config(), c.size));
    card_->count_peer_copy(c.to_peer, c.size);
}

// The semaphore's value (then its cycle) as the card's memory holds them: 16-byte aligned, so
// both words are naturally aligned for atomic access.
std::atomic_ref<uint64_t> sem_word(std::byte* sem, int i) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(sem + 8 * i));
}

// In stream order: {value, the stream's modeled end so far} into the semaphore (also on a
// timing-only card: its memory holds no data, but semaphores order the streams), then every
// waiting worker is woken. Into a peer card's buffer the stream's card writes over the peer
// link; the cycle stays the writer's (a waiter's clock joins it, Lamport style).
void SimStream::write_value(const SemOp& s) {
    refuse_if_lost();
    // api.cpp: access enabled
    check_peer_sem(std::static_pointer_cast<SimDevice>(s.peer_dev), dev_->name());
    push([=, this] { run_write_value(s); });
}

void SimStream::run_write_value(const SemOp& s) {
    auto peer = std::static_pointer_cast<SimDevice>(s.peer_dev);
    check_peer_sem(peer, dev_->name());
    std::byte* p = peer ? peer->checked(*s.buf, s.offset, SPYRE_SEMAPHORE_BYTES)
                        : ptr(*s.buf, s.offset, SPYRE_SEMAPHORE_BYTES);
    sem_word(p, 1).store(end_, std::memory_order_relaxed);
    sem_word(p, 0).store(s.value, std::memory_order_release);
    SemWakeup& w = sem_wakeup();
    {
        std::lock_guard lock(w.mu);
        ++w.gen;
    }
    w.cv.notify_all();
}

void SimStream::wait_value(const SemOp& s) {
    refuse_if_lost();
    push([=, this] { run_wait_value(s); });
}

// On the worker: blocks this stream (no library lock held) until the value reaches s.value or
// s.timeout_us of host time passed; the stream's modeled time then joins the writer's cycle.
void SimStream::run_wait_value(const SemOp& s) {
    using clock = std::chrono::steady_clock;
    std::byte* p = ptr(*s.buf, s.offset, SPYRE_SEMAPHORE_BYTES);
    const auto deadline = clock::now() + std::chrono::microseconds(s.timeout_us);
    auto backoff = std::chrono::microseconds(50);
    SemWakeup& w = sem_wakeup();
    for (;;) {
        uint64_t gen;
        {
            std::lock_guard lock(w.mu);
            gen = w.gen;
        }
        const uint64_t v = sem_word(p, 0).load(std::memory_order_acquire);
        if (v >= s.value) {
            end_ = std::max(end_, sem_word(p, 1).load(std::memory_order_relaxed));
            return;
        }
        if (card_->faults().lost()) fail_lost(dev_->name());
        const auto now = clock::now();
        if (now >= deadline)
            fail(SPYRE_ERROR_TIMEOUT,
                 std::format("semaphore wait on {} timed out after {} us: the semaphore at "
                             "offset {} of its buffer holds {}, the wait wanted a value >= {}",
                             dev_->name(), s.timeout_us, s.offset, v, s.value));
        std::unique_lock lock(w.mu);
        w.cv.wait_until(lock, std::min<clock::time_point>(now + backoff, deadline),
                        [&] { return w.gen != gen; });
        backoff = std::min<std::chrono::microseconds>(backoff * 2, std::chrono::milliseconds(1));
    }
}

void SimStream::copy_3d(const Copy3D& c) {
    refuse_if_lost();
    const uint64_t rows = c.height * c.depth;
    auto row_off = [=](const CopySide& s, uint64_t r) {
        return (r / c.height) * s.slice_pitch + (r % c.height) * s.pitch;
    };
    auto span = [&](const CopySide& s) { return row_off(s, rows - 1) + c.width; };
    Copy3D cc = c;
    std::shared_ptr<std::vector<std::byte>> snap;
    if (!c.src.buf && !current_op() && !pinned(c.src.host, span(c.src)) && !card_->timing_only()) {
        snap = std::make_shared<std::vector<std::byte>>(c.src.host, c.src.host + span(c.src));
        cc.src.host = snap->data();
    }
    auto body = [=, this] {
        push([=, this] {
            run_copy_3d(cc);
            (void)snap;
        });
    };
    if (!c.dst.buf && !current_op() && !pinned(c.dst.host, span(c.dst)))
        run_sync(body);
    else
        body();
}

void SimStream::run_copy_3d(const Copy3D& c) {
    const uint64_t rows = c.height * c.depth;
    auto row_off = [&](const CopySide& s, uint64_t r) {
        return (r / c.height) * s.slice_pitch + (r % c.height) * s.pitch;
    };
    for (uint64_t r = 0; r < rows; ++r) {
        const std::byte* from = c.src.buf
                                    ? ptr(*c.src.buf, c.src.offset + row_off(c.src, r), c.width)
                                    : c.src.host + row_off(c.src, r);
        std::byte* to = c.dst.buf ? ptr(*c.dst.buf, c.dst.offset + row_off(c.dst, r), c.width)
                                  : c.dst.host + row_off(c.dst, r);
        if (!card_->timing_only())
            std::memmove(to, from, c.width);
        else if (!c.dst.buf)
            std::memset(to, 0, c.width);  // a read from the card: zeros
    }
}

// A graph is one work item: its operations run in order on the worker, each run of linked
// launches as one engine job; a failing operation does not stop the rest (as on the card; a
// failing part of a linked job ends that job), the first error is the item's.
//
// A batch's peer copy or semaphore write into a peer that is lost when the batch is queued
// fails as when queued alone (DEVICE_LOST naming the peer, thrown here once the rest of the
// batch is queued) and is left out.
void SimStream::replay(const GraphRef& g) {
    refuse_if_lost();
    std::optional<Error> refused;
    auto skip = std::make_shared<std::vector<bool>>();
    for (size_t i = 0; i < g->nodes.size(); ++i) {
        const GraphNode& n = g->nodes[i];
        try {
            if (n.op == GraphNode::Op::CopyPeer && n.peer.peer_dev)
                check_peer_copy(std::static_pointer_cast<SimDevice>(n.peer.peer_dev), n.peer,
                                dev_->name());
            else if (n.op == GraphNode::Op::SemWrite)
                check_peer_sem(std::static_pointer_cast<SimDevice>(n.sem.peer_dev), dev_->name());
        } catch (const Error& e) {
            if (!refused) refused = e;
            skip->resize(g->nodes.size());
            (*skip)[i] = true;
        }
    }
    push([=, this] {
        std::optional<Error> first;
        for (const GraphNode& n : g->nodes) {
            if (!skip->empty() && (*skip)[&n - g->nodes.data()]) continue;
            try {
                switch (n.op) {
                    case GraphNode::Op::Launch: {
                        // the first launch of a linked run runs the run; the others are in it
                        const size_t i = &n - g->nodes.data();
                        const uint32_t linked = i < g->link.size() ? g->link[i] : 1;
                        if (linked > 1)
                            run_linked(&n, linked);
                        else if (linked == 1)
                            run_launch(n.launch, nullptr);
                        break;
                    }
                    case GraphNode::Op::CopyDtoD:
                        run_dtod(n.dst, n.dst_offset, n.src, n.src_offset, n.size);
                        break;
                    case GraphNode::Op::Copy3D:
                        run_copy_3d(n.copy);
                        break;
                    case GraphNode::Op::Fill:
                        run_fill(n.dst, n.dst_offset, n.size, n.pattern, n.pattern_size);
                        break;
                    case GraphNode::Op::SemWrite:
                        run_write_value(n.sem);
                        break;
                    case GraphNode::Op::SemWait:  // blocks the worker, as when queued alone
                        run_wait_value(n.sem);
                        break;
                    case GraphNode::Op::CopyPeer:
                        run_copy_peer(n.peer);
                        break;
                    case GraphNode::Op::Record:
                        break;
                }
            } catch (const Error& e) {
                if (!first) first = e;
            }
        }
        if (first) throw *first;
    });
    for (const GraphNode& n : g->nodes)
        if (n.op == GraphNode::Op::Record) n.on_record(record());
    if (refused) throw *refused;
}

// The simulated fault (spyre_sim_inject_fault) the launch about to run takes, thrown.
void SimStream::take_fault(const LaunchRequest& req) {
    switch (card_->faults().take_launch()) {
        case SPYRE_SIM_FAULT_LOST:
            fail_lost(dev_->name(), req.label.get());
        case SPYRE_SIM_FAULT_PROGRAM:
            fail_program(dev_->name(), SPYRE_ENGINE_ERR_DDR_WINDOW, 0, 0,
                         "a simulated fault (spyre_sim_inject_fault)", req.label.get());
        case SPYRE_SIM_FAULT_NONE:
            break;
    }
}

void SimStream::run_launch(const LaunchRequest& req, spyre_launch_stats* stats) {
    take_fault(req);
    std::vector<spyre_engine_window> windows;
    const spyre_engine_job job = launch_job(req, windows);
    spyre_engine_result res{};
    card_->run(job, &res);
    end_ = card_->timeline().place(CardTimeline::Unit::Compute, end_, res.total_cycles);
    if (res.error)
        fail_program(dev_->name(), res.error, res.core, res.pc, res.message, req.label.get());
    if (stats) stats_from_result(res, dev_->info().clock_mhz, stats);
}

// n (> 1) consecutive launch nodes of a graph as one linked engine job. Simulated faults are
// taken in launch order: the launches before a faulting one run (linked), then it fails.
void SimStream::run_linked(const GraphNode* nodes, uint32_t n) {
    std::vector<std::vector<spyre_engine_window>> windows(n);
    std::vector<spyre_engine_job> jobs;
    jobs.reserve(n);
    std::optional<Error> fault;
    for (uint32_t k = 0; k < n && !fault; ++k) {
        try {
            take_fault(nodes[k].launch);
        } catch (const Error& e) {
            fault = e;
            break;
        }
        jobs.push_back(launch_job(nodes[k].launch, windows[k]));
    }
    if (!jobs.empty()) {
        spyre_engine_result res{};
        card_->run_linked(jobs.data(), static_cast<uint32_t>(jobs.size()), &res);
        end_ = card_->timeline().place(CardTimeline::Unit::Compute, end_, res.total_cycles);
        if (res.error)
            fail_program(dev_->name(), res.error, res.core, res.pc, res.message,
                         nodes[std::min<uint32_t>(res.part, n - 1)].launch.label.get());
    }
    if (fault) throw *fault;
}

// The engine job of a launch; `windows` receives its windows (the job points to them).
spyre_engine_job SimStream::launch_job(const LaunchRequest& req,
                                       std::vector<spyre_engine_window>& windows) {
    {
        windows.reserve(req.buffers.size() + 1);
        // Like the card: the program's own buffer and the listed buffers (whole allocations of
        // the backend; a sub-allocated buffer exposes its slab).
        auto window = [&](Buffer& b) {
            Buffer& r = b.root();
            windows.push_back({r.dev_addr(), r.alloc_size()});
        };
        window(*req.program);
        for (const BufferRef& b : req.buffers) window(*b);
        spyre_engine_job job{};
        job.program = card_->base() + req.program->dev_addr();
        if (card_->timing_only()) {
            // The same program through the same cycle model, nothing computed; its image is
            // on the host, the card's memory is never touched (job.mem NULL).
            auto& image = static_cast<SimBuffer&>(req.program->root()).host_program();
            if (image.size() < req.program_size)
                fail(SPYRE_ERROR_INTERNAL,
                     std::format("{}: timing-only launch of a buffer that holds no program "
                                 "image",
                                 dev_->name()));
            job.program = image.data();
            job.flags = SPYRE_ENGINE_JOB_TIMING_ONLY;
        }
        job.program_size = req.program_size;
        job.args = req.args;
        job.num_args = req.num_args;
        job.num_cores = req.num_cores;
        job.mem = card_->timing_only() ? nullptr : card_->base();
        job.mem_size = card_->size();
        job.windows = windows.data();
        job.num_windows = static_cast<uint32_t>(windows.size());
        return job;
    }
}
}  // namespace

int sim_device_count() {
    const char* s = std::getenv("SPYRE_SIM_DEVICES");
    if (!s || !*s) return 1;
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (!end || *end || v < 0 || v > kMaxSimDevices)
        fail(SPYRE_ERROR_INVALID_ARGUMENT,
             std::format("SPYRE_SIM_DEVICES=\"{}\" is not a number of simulated cards "
                         "(0..{})",
                         s, kMaxSimDevices));
    return static_cast<int>(v);
}

void sim_inject_fault(int index, spyre_sim_fault fault, uint64_t after_launches) {
    const int n = sim_device_count();
    if (index < 0 || index >= n)
        fail(SPYRE_ERROR_NO_DEVICE,
             std::format("device index {} out of range: {} simulated Spyre device{}", index, n,
                         n == 1 ? "" : "s"));
    sim::sim_faults(index).arm(fault, after_launches);
}

std::shared_ptr<Device> open_sim_device(int index) {
    int n = sim_device_count();
    if (index < 0 || index >= n)
        fail(SPYRE_ERROR_NO_DEVICE,
             n == 0 ? std::string("no Spyre device: SPYRE_BACKEND=sim with SPYRE_SIM_DEVICES=0")
                    : std::format("device index {} out of range: {} simulated Spyre device{} "
                                  "(valid: 0..{}; set SPYRE_SIM_DEVICES for more)",
                                  index, n, n == 1 ? "" : "s", n - 1));
    return std::make_shared<SimDevice>(index);
}

}  // namespace spyre
