// SPDX-License-Identifier: MIT
// The engine: runs one job at a time on its cores. Split by concern over several files:
// operands.cpp (operand checks), timing.cpp (cycle model), exec_dma.cpp, exec_compute.cpp,
// collectives.cpp (ring, barrier, all-reduce), interpreter.cpp (per-core instruction loop),
// scheduler.cpp (job set-up, phases, results) and api.cpp (C API).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "core.hpp"
#include "kernels.hpp"
#include "thread_pool.hpp"

namespace spyre::eng {

// Host threads for a config (scheduler.cpp).
unsigned pool_threads(const spyre_engine_config& cfg);
int test_throw_core();
bool config_valid(const spyre_engine_config& c);

class Engine {
  public:
    explicit Engine(const spyre_engine_config& cfg)
        : cfg_(cfg),
          pool_(pool_threads(cfg)),
          cores_(cfg.num_cores),
          lx_mem_(uint64_t{cfg.lx_bytes} * cfg.num_cores) {
        stale_words_ = (cfg.lx_bytes / kS + 63) / 64;
        stale_mem_.reset(new uint64_t[stale_words_ * cfg.num_cores]());
        for (uint32_t i = 0; i < cfg.num_cores; ++i) {
            cores_[i].lx = lx_mem_.get() + uint64_t{i} * cfg.lx_bytes;
            cores_[i].stale = stale_mem_.get() + uint64_t{i} * stale_words_;
            cores_[i].lx_hw = 0;
        }
        cancel_tok_.engine = &cancel_;
        throw_core_ = test_throw_core();
    }

    const spyre_engine_config& config() const { return cfg_; }
    void cancel() { cancel_.store(true, std::memory_order_relaxed); }
    int run(const spyre_engine_job& job, spyre_engine_result& res);

  private:
    // job state
    const Program* prog_ = nullptr;
    const spyre_engine_job* job_ = nullptr;
    uint32_t ncores_ = 0;
    uint8_t* mem_ = nullptr;
    uint64_t mem_size_ = 0;
    std::vector<spyre_engine_window> windows_;
    uint64_t max_instr_ = 0, max_cycles_ = 0;

    bool run_core(Core& c);
    bool fail(Core& c, int code, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
    bool check_lx(Core& c, const char* what, uint64_t addr, uint64_t rows, uint64_t stride,
                  uint64_t row_bytes, Range* out);
    bool check_ddr_row(Core& c, uint64_t addr, uint64_t len);
    // cycle model helpers
    uint64_t hazard(const Core& c, const Range* reads, int nr, const Range* writes, int nw) const;
    bool unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                 const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                 int lane = -1);
    uint64_t dma_cycles(uint64_t bytes) const;

    bool exec_dma(Core& c, const Instr& in, bool is_load);
    bool exec_mm(Core& c, const Instr& in);
    bool exec_vec(Core& c, const Instr& in);
    bool exec_send(Core& c, const Instr& in);
    int exec_recv(Core& c, const Instr& in);  // 1 done, 0 blocked, -1 failed
    void release_barrier(std::vector<Core*>& live);
    bool release_allred(std::vector<Core*>& live, Failure& f);

    spyre_engine_config cfg_;
    ThreadPool pool_;
    std::vector<Core> cores_;
    LxMem lx_mem_;
    std::unique_ptr<uint64_t[]> stale_mem_;
    uint64_t stale_words_ = 0;
    std::atomic<bool> cancel_{false};
    kern::Cancel cancel_tok_;  // cancel_ and the running job's cancel flag
    int throw_core_ = -1;
    std::mutex run_mu_;

    bool cancelled() const { return cancel_tok_(); }
};

}  // namespace spyre::eng
