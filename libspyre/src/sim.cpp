// The simulator backend: in-process simulated Spyre cards. A card is process-wide (every open
// of index i shares its memory, allocator and counters, as opens of one accel node do), backed
// by a sparse anonymous mapping (MAP_NORESERVE: pages materialise on first touch and are given
// back when a buffer is freed). Copies are memcpy; launches run the compute engine with the
// listed buffers as the job's memory windows.
//
// Timing-only cards (SPYRE_SIM_TIMING_ONLY=1, Documentation/libspyre.md "Timing-only
// simulator"): every launch runs as a SPYRE_ENGINE_JOB_TIMING_ONLY job (the same cycle model,
// nothing computed), copies and fills move no data (reads from the card give zeros) and the
// device memory is address space that is never touched, so a card can be far larger than the
// host's memory. Program images stay on the host, with their buffers.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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

#include "backend.hpp"
#include "error.hpp"
#include "peer_link.hpp"
#include "spyre/engine.h"

extern "C" {
#include "spyre_hw.h"
}

namespace spyre {

namespace {

constexpr uint64_t kSimPage = 4096;
constexpr uint64_t kDefaultSimMemory = 1ull << 30;
// A timing-only card holds no data: room for an 8B-parameter fp16 model and its KV caches.
constexpr uint64_t kDefaultTimingOnlyMemory = 256ull << 30;
constexpr int kMaxSimDevices = 64;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool sim_timing_only_from_env() {
    const char* s = std::getenv("SPYRE_SIM_TIMING_ONLY");
    if (!s || !*s || std::strcmp(s, "0") == 0) return false;
    if (std::strcmp(s, "1") == 0) return true;
    fail(SPYRE_ERROR_INVALID_ARGUMENT,
         std::format("SPYRE_SIM_TIMING_ONLY=\"{}\" is neither 1 (timing-only simulated cards) nor "
                     "0 (computing ones)",
                     s));
}

uint64_t sim_memory_from_env(bool timing_only) {
    const char* s = std::getenv("SPYRE_SIM_MEMORY");
    if (!s || !*s) return timing_only ? kDefaultTimingOnlyMemory : kDefaultSimMemory;
    uint64_t v = 0;
    if (!parse_bytes(s, &v) || v < (1ull << 20) || v > (1ull << 47))
        fail(SPYRE_ERROR_INVALID_ARGUMENT,
             std::format("SPYRE_SIM_MEMORY=\"{}\" is not a memory size between 1 MiB and 128 TiB "
                         "(bytes, or with a K/M/G/T suffix, e.g. 16G)",
                         s));
    return round_up(v, kSimPage);
}

// The simulated faults of one card index (spyre_sim_inject_fault, Documentation/libspyre.md
// "Simulated faults"), apart from the card so that a fault armed before the card is opened
// holds. Atomics first: every launch and copy asks.
class SimFaults {
  public:
    void arm(spyre_sim_fault fault, uint64_t after_launches) {
        std::lock_guard lock(mu_);
        if (fault == SPYRE_SIM_FAULT_NONE) lost_ = false;
        armed_fault_ = fault;
        after_ = after_launches;
        armed_ = fault != SPYRE_SIM_FAULT_NONE;
    }
    bool lost() const { return lost_; }
    // The fault the launch about to run takes: NONE but for the armed one.
    spyre_sim_fault take_launch() {
        if (!armed_ && !lost_) return SPYRE_SIM_FAULT_NONE;
        std::lock_guard lock(mu_);
        if (lost_) return SPYRE_SIM_FAULT_LOST;
        if (!armed_) return SPYRE_SIM_FAULT_NONE;
        if (after_ > 0) {
            --after_;
            return SPYRE_SIM_FAULT_NONE;
        }
        armed_ = false;
        if (armed_fault_ == SPYRE_SIM_FAULT_LOST) lost_ = true;
        return armed_fault_;
    }

  private:
    std::mutex mu_;
    std::atomic<bool> armed_{false}, lost_{false};
    spyre_sim_fault armed_fault_ = SPYRE_SIM_FAULT_NONE;
    uint64_t after_ = 0;
};

SimFaults& sim_faults(int index) {
    static std::mutex mu;
    static auto* faults = new std::map<int, std::unique_ptr<SimFaults>>;
    std::lock_guard lock(mu);
    auto& f = (*faults)[index];
    if (!f) f = std::make_unique<SimFaults>();
    return *f;
}

// The error of every command on a lost simulated card.
[[noreturn]] void fail_lost(const std::string& device, const std::string* label = nullptr) {
    std::string text =
        std::format("{} was removed (a simulated loss: spyre_sim_inject_fault)", device);
    if (label) text += "; launched by " + *label;
    fail(SPYRE_ERROR_DEVICE_LOST, text);
}

// One simulated card.
class SimCard {
  public:
    SimCard(int index, uint64_t mem_size, bool timing_only)
        : index_(index), size_(mem_size), timing_only_(timing_only), faults_(sim_faults(index)) {
        void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            fail(SPYRE_ERROR_OUT_OF_MEMORY,
                 std::format("spyre-sim{}: cannot reserve {} of address space for the simulated "
                             "device memory ({}); lower SPYRE_SIM_MEMORY",
                             index, format_bytes(size_), errno_text(errno)));
        base_ = static_cast<std::byte*>(p);
        free_[0] = size_;
        spyre_engine_config_default(&cfg_);
    }
    ~SimCard() {
        if (engine_) spyre_engine_destroy(engine_);
        ::munmap(base_, size_);
    }

    int index() const { return index_; }
    uint64_t size() const { return size_; }
    bool timing_only() const { return timing_only_; }
    std::byte* base() const { return base_; }
    const spyre_engine_config& config() const { return cfg_; }
    SimFaults& faults() const { return faults_; }

    // First-fit range allocation of `bytes` (a multiple of kSimPage). Returns false if no
    // free range is large enough.
    bool allocate(uint64_t bytes, uint64_t* addr) {
        std::lock_guard lock(mu_);
        for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->second < bytes) continue;
            *addr = it->first;
            uint64_t rest = it->second - bytes;
            uint64_t next = it->first + bytes;
            free_.erase(it);
            if (rest) free_[next] = rest;
            used_ += bytes;
            return true;
        }
        return false;
    }

    void release(uint64_t addr, uint64_t bytes) {
        // Give the pages back: the next buffer at this address starts from zero pages.
        ::madvise(base_ + addr, bytes, MADV_DONTNEED);
        std::lock_guard lock(mu_);
        used_ -= bytes;
        auto next = free_.lower_bound(addr);
        const bool merge_next = next != free_.end() && addr + bytes == next->first;
        if (next != free_.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == addr) {  // extend the range below
                prev->second += bytes + (merge_next ? next->second : 0);
                if (merge_next) free_.erase(next);
                return;
            }
        }
        if (merge_next) {
            bytes += next->second;
            free_.erase(next);
        }
        free_[addr] = bytes;
    }

    drm_spyre_mem_info mem_info() {
        std::lock_guard lock(mu_);
        drm_spyre_mem_info m{};
        m.devmem_total = size_;
        m.devmem_used = used_;
        for (const auto& [a, s] : free_)
            m.devmem_largest_free = std::max<uint64_t>(m.devmem_largest_free, s);
        m.host_bo_bytes = host_bytes_;
        return m;
    }

    void add_host_bytes(int64_t delta) {
        std::lock_guard lock(mu_);
        host_bytes_ += delta;
    }

    // Counts one completed copy command of `bytes` in telemetry field `field`.
    void count_copy(__u64 drm_spyre_telemetry::* field, uint64_t bytes) {
        std::lock_guard lock(mu_);
        tele_.*field += bytes;
        tele_.cmds_completed++;
        tele_.jobs_submitted++;
        tele_.jobs_completed++;
    }

    // A peer copy issued by this card: counted in the direction of the peer side (a peer is
    // "host" to the DMA engine) and in the P2P counters; the peer's card counts nothing.
    void count_peer_copy(bool to_peer, uint64_t bytes) {
        count_copy(to_peer ? &drm_spyre_telemetry::d2h_bytes : &drm_spyre_telemetry::h2d_bytes,
                   bytes);
        std::lock_guard lock(mu_);
        (to_peer ? tele_.p2p_wr_bytes : tele_.p2p_rd_bytes) += bytes;
    }

    drm_spyre_telemetry telemetry() {
        std::lock_guard lock(mu_);
        drm_spyre_telemetry t = tele_;
        // Synthetic sensors of an idle board (the simulator models no thermals).
        t.temp_mc = 40000;
        t.power_mw = 15000;
        t.power_cap_mw = 75000;
        return t;
    }

    // Runs one launch (one at a time per card); fills *res.
    void run(const spyre_engine_job& job, spyre_engine_result* res) {
        std::lock_guard lock(engine_mu_);
        if (!engine_) {
            engine_ = spyre_engine_create(&cfg_);
            if (!engine_)
                fail(SPYRE_ERROR_OUT_OF_MEMORY,
                     std::format("spyre-sim{}: cannot create the compute engine", index_));
        }
        {
            std::lock_guard lock2(mu_);
            tele_.jobs_submitted++;
        }
        spyre_engine_run(engine_, &job, res);
        std::lock_guard lock2(mu_);
        tele_.cmds_completed++;
        tele_.jobs_completed++;
        tele_.launches++;
        tele_.engine_cycles += res->total_cycles;
        tele_.engine_instructions += res->instructions;
        tele_.engine_macs += res->macs;
        tele_.engine_ddr_read_bytes += res->ddr_read_bytes;
        tele_.engine_ddr_write_bytes += res->ddr_write_bytes;
        tele_.engine_ring_bytes += res->ring_bytes;
        if (core_active_.size() < res->num_cores) core_active_.resize(res->num_cores);
        for (uint32_t c = 0; c < res->num_cores && c < SPYRE_ENGINE_MAX_CORES; ++c)
            core_active_[c] += res->cores[c].end_cycle;
        if (res->error) {
            tele_.jobs_failed++;
            tele_.cmd_errors++;
            tele_.launch_errors++;
        }
    }

    std::vector<uint64_t> core_active_cycles() {
        std::lock_guard lock(mu_);
        std::vector<uint64_t> v = core_active_;
        v.resize(cfg_.num_cores);
        return v;
    }

  private:
    const int index_;
    const uint64_t size_;
    const bool timing_only_;
    SimFaults& faults_;
    std::byte* base_ = nullptr;
    spyre_engine_config cfg_{};

    std::mutex mu_;                      // allocator, counters
    std::map<uint64_t, uint64_t> free_;  // free ranges: address -> bytes (coalesced)
    uint64_t used_ = 0;
    uint64_t host_bytes_ = 0;
    drm_spyre_telemetry tele_{};
    std::vector<uint64_t> core_active_;  // per core, sum of launch end cycles

    std::mutex engine_mu_;
    spyre_engine* engine_ = nullptr;
};

// Cards live while an open device or a buffer uses them.
std::shared_ptr<SimCard> get_card(int index) {
    static std::mutex mu;
    static std::map<int, std::weak_ptr<SimCard>>* cards = new std::map<int, std::weak_ptr<SimCard>>;
    std::lock_guard lock(mu);
    if (auto c = (*cards)[index].lock()) return c;
    const bool timing_only = sim_timing_only_from_env();
    auto c = std::make_shared<SimCard>(index, sim_memory_from_env(timing_only), timing_only);
    (*cards)[index] = c;
    if (timing_only)  // results of this card are not computed: never let them pass for real ones
        std::fprintf(stderr,
                     "libspyre: spyre-sim%d is TIMING-ONLY (SPYRE_SIM_TIMING_ONLY=1): modeled "
                     "times are exact, results are not computed (reads give zeros); %s of "
                     "address space as device memory\n",
                     index, format_bytes(c->size()).c_str());
    return c;
}

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

class SimMarker final : public Marker {
  public:
    explicit SimMarker(const void* stream) : stream_(stream) {}
    bool done() override {
        std::lock_guard lock(mu_);
        return done_;
    }
    void wait() override {
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
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    uint64_t cycles_ = 0;
    int64_t time_ = 0;
};

class SimDevice;

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
        auto m = std::make_shared<SimMarker>(this);
        push([=, this] { m->complete(cycles_); }, false);
        return m;
    }
    void wait(const MarkerRef& m) override {
        if (m->stream_id() == this) return;
        push([=] { m->wait(); });
    }
    void synchronize() override {
        std::unique_lock lock(mu_);
        wait_done(lock, enq_);
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
        if (op->err) throw *op->err;
    }

  private:
    // Work for a lost card is refused at once, as the driver refuses a job for a removed card.
    void refuse_if_lost();
    struct Item {
        std::function<void()> fn;
        std::shared_ptr<OpStatus> op;
        uint64_t seq;
    };
    // The worker is woken only when it sleeps and waiters only when there are any: a futex
    // call per launch was a good part of an op's host time (torch_spyre.md "Dispatch overhead").
    // Each item of work counts as a submission (spyre_runtime_stats); markers do not.
    void push(std::function<void()> fn, bool counted = true) {
        bool wake;
        {
            std::lock_guard lock(mu_);
            auto op = current_op();
            uint64_t seq = ++enq_;
            if (counted) dev_counters().jobs_submitted++;
            if (op) op->last_seq = seq;
            q_.push_back({std::move(fn), op, seq});
            wake = worker_idle_;
        }
        if (wake) work_cv_.notify_one();
    }
    void wait_done(std::unique_lock<std::mutex>& lock, uint64_t seq) {
        ++waiters_;
        done_cv_.wait(lock, [&] { return done_ >= seq; });
        --waiters_;
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
            if (waiters_) done_cv_.notify_all();
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
    RuntimeCounters& dev_counters();
    void run_launch(const LaunchRequest& req, spyre_launch_stats* stats);

    SimDevice* dev_;
    std::shared_ptr<SimCard> card_;
    uint64_t cycles_ = 0;  // worker thread only
    std::mutex mu_;
    std::condition_variable work_cv_;  // the worker waits for items
    std::condition_variable done_cv_;  // synchronize() and run_sync() wait for done_
    std::deque<Item> q_;
    uint64_t enq_ = 0, done_ = 0;
    bool stop_ = false;
    bool worker_idle_ = false;
    int waiters_ = 0;
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
                 SPYRE_DEVICE_CAP_TELEMETRY | SPYRE_DEVICE_CAP_LAUNCH;
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

void SimStream::copy_peer(const PeerCopy& c) {
    refuse_if_lost();
    if (c.imported)  // never made: simulated cards export no dma-bufs
        fail(SPYRE_ERROR_NOT_SUPPORTED, "simulated cards share no memory with other processes");
    auto peer = std::static_pointer_cast<SimDevice>(c.peer_dev);  // api.cpp: can_access_peer
    auto peer_lost = [peer, c, this] {
        if (peer->card()->faults().lost())
            fail(SPYRE_ERROR_DEVICE_LOST,
                 std::format("peer {} was removed (a simulated loss: spyre_sim_inject_fault): {} "
                             "cannot copy {} {} its memory",
                             peer->name(), dev_->name(), format_bytes(c.size),
                             c.to_peer ? "into" : "from"));
    };
    peer_lost();
    push([=, this] {
        peer_lost();
        std::byte* local = ptr(*c.local, c.local_offset, c.size);
        std::byte* remote = peer->checked(*c.peer, c.peer_offset, c.size);
        if (!card_->timing_only() && !peer->card()->timing_only())
            std::memcpy(c.to_peer ? remote : local, c.to_peer ? local : remote, c.size);
        // The issuing card's DMA engine moves the bytes over the peer link (hardware.md 11).
        cycles_ += peer_copy_cycles(card_->config(), peer->card()->config(), c.size);
        card_->count_peer_copy(c.to_peer, c.size);
    });
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

// A graph is one work item: its operations run in order on the worker; a failing one does not
// stop the rest (as on the card), the first error is the item's.
void SimStream::replay(const GraphRef& g) {
    refuse_if_lost();
    push([=, this] {
        std::optional<Error> first;
        for (const GraphNode& n : g->nodes) {
            try {
                switch (n.op) {
                    case GraphNode::Op::Launch:
                        run_launch(n.launch, nullptr);
                        break;
                    case GraphNode::Op::CopyDtoD:
                        run_dtod(n.dst, n.dst_offset, n.src, n.src_offset, n.size);
                        break;
                    case GraphNode::Op::Copy3D:
                        run_copy_3d(n.copy);
                        break;
                    case GraphNode::Op::Fill:
                        run_fill(n.dst, n.dst_offset, n.size, n.pattern, n.pattern_size);
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
}

void SimStream::run_launch(const LaunchRequest& req, spyre_launch_stats* stats) {
    switch (card_->faults().take_launch()) {
        case SPYRE_SIM_FAULT_LOST:
            fail_lost(dev_->name(), req.label.get());
        case SPYRE_SIM_FAULT_PROGRAM:
            fail_program(dev_->name(), SPYRE_ENGINE_ERR_DDR_WINDOW, 0, 0,
                         "a simulated fault (spyre_sim_inject_fault)", req.label.get());
        case SPYRE_SIM_FAULT_NONE:
            break;
    }
    {
        std::vector<spyre_engine_window> windows;
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
        spyre_engine_result res{};
        card_->run(job, &res);
        cycles_ += res.total_cycles;
        if (res.error)
            fail_program(dev_->name(), res.error, res.core, res.pc, res.message, req.label.get());
        if (stats) stats_from_result(res, dev_->info().clock_mhz, stats);
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
    sim_faults(index).arm(fault, after_launches);
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
