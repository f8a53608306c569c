// Simulated cards of the simulator backend (Documentation/libspyre.md "Simulator backend"): a
// card is process-wide (every open of index i shares its memory, allocator and counters, as opens
// of one accel node do), backed by a sparse anonymous mapping (MAP_NORESERVE: pages materialise
// on first touch and are given back when a buffer is freed), and runs launches on its compute
// engine, one at a time. Its simulated faults live apart from it (SimFaults).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <format>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.hpp"
#include "error.hpp"
#include "sim/timeline.hpp"
#include "spyre/engine.h"

extern "C" {
#include "spyre_hw.h"
}

namespace spyre::sim {

constexpr uint64_t kSimPage = 4096;

inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

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

SimFaults& sim_faults(int index);

// The error of every command on a lost simulated card.
[[noreturn]] void fail_lost(const std::string& device, const std::string* label = nullptr);

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
    // The card's modeled time: its units and what the host has seen complete (timeline.hpp).
    CardTimeline& timeline() { return timeline_; }
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
    void run(const spyre_engine_job& job, spyre_engine_result* res) { run_linked(&job, 1, res); }
    // Runs n launches as one linked job (spyre_engine_run_linked; n == 1: an ordinary launch).
    void run_linked(const spyre_engine_job* jobs, uint32_t n, spyre_engine_result* res) {
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
        if (n == 1)
            spyre_engine_run(engine_, jobs, res);
        else
            spyre_engine_run_linked(engine_, jobs, n, res);
        std::lock_guard lock2(mu_);
        tele_.cmds_completed += n;
        tele_.jobs_completed++;
        tele_.launches += n;
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
    CardTimeline timeline_;
};

// The card of index i, created on first use from $SPYRE_SIM_MEMORY and $SPYRE_SIM_TIMING_ONLY.
// Cards live while an open device or a buffer uses them.
std::shared_ptr<SimCard> get_card(int index);

}  // namespace spyre::sim
