// SPDX-License-Identifier: MIT
// The engine: runs one job at a time on its cores. Split by concern over several files:
// operands.cpp (operand checks), timing.cpp (cycle model), exec_dma.cpp, exec_compute.cpp,
// collectives.cpp (ring, barrier, all-reduce), translate.cpp (job address translation),
// interpreter.cpp (per-core instruction loop),
// scheduler.cpp (job set-up, phases, results) and api.cpp (C API).
#pragma once

#include <atomic>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

#include "core.hpp"
#include "kernels.hpp"
#include "program_cache.hpp"
#include "replay_cache.hpp"
#include "thread_pool.hpp"

namespace spyre::eng {

// Host threads for a config (scheduler.cpp).
unsigned pool_threads(const spyre_engine_config& cfg);
int test_throw_core();
bool test_lx_poison();
bool config_valid(const spyre_engine_config& c);
// A translated job's runs are sorted, disjoint, non-empty and inside mem_size (translate.cpp).
bool mappings_valid(const spyre_engine_job& job, Failure& f);

// A vector-unit operand as an instruction names it: LX address, type, broadcast, row stride,
// and the fp32 value of an IMM operand.
struct VecOpd {
    const char* what;
    uint64_t addr;
    DType t;
    isa::Bcast mode;
    uint64_t stride;
    float imm = 0.0f;
};

class Engine {
  public:
    explicit Engine(const spyre_engine_config& cfg)
        : cfg_(cfg),
          pool_(pool_threads(cfg)),
          cores_(cfg.num_cores),
          lx_mem_(uint64_t{cfg.lx_bytes} * cfg.num_cores) {
        stale_words_ = (cfg.lx_bytes / kS + 63) / 64;
        stale_mem_.reset(new uint64_t[stale_words_ * cfg.num_cores]());
        defer_mu_.reset(new std::recursive_mutex[cfg.num_cores]);
        for (uint32_t i = 0; i < cfg.num_cores; ++i) {
            cores_[i].lx = lx_mem_.get() + uint64_t{i} * cfg.lx_bytes;
            cores_[i].stale = stale_mem_.get() + uint64_t{i} * stale_words_;
            cores_[i].lx_hw = 0;
            cores_[i].defer_mu = &defer_mu_[i];
        }
        cancel_tok_.engine = &cancel_;
        throw_core_ = test_throw_core();
        lx_poison_ = test_lx_poison();
    }

    const spyre_engine_config& config() const { return cfg_; }
    void cancel() { cancel_.store(true, std::memory_order_relaxed); }
    int run(const spyre_engine_job& job, spyre_engine_result& res);
    // Time slicing (spyre_engine_run_slice): job == nullptr resumes the preempted job.
    static constexpr int kPreempted = SPYRE_ENGINE_PREEMPTED;
    int run_slice(const spyre_engine_job* job, uint64_t slice, spyre_engine_result& res);
    // Linked launches (spyre_engine_run_linked): the parts back to back as one job.
    int run_linked(const spyre_engine_job* parts, uint32_t n, spyre_engine_result& res);
    void discard();
    uint64_t context_bytes() const;

  private:
    // job state
    const Program* prog_ = nullptr;
    const spyre_engine_job* job_ = nullptr;
    uint32_t ncores_ = 0;
    uint8_t* mem_ = nullptr;
    bool timing_only_ = false;  // SPYRE_ENGINE_JOB_TIMING_ONLY: no data moves, no arithmetic
    uint64_t mem_size_ = 0;
    std::vector<spyre_engine_window> windows_;
    // translated job (translate.cpp): sorted runs, nullptr = physical
    const spyre_engine_mapping* maps_ = nullptr;
    uint32_t nmaps_ = 0;
    uint64_t max_instr_ = 0, max_cycles_ = 0;
    uint64_t lx_usable_ = 0;  // lx_bytes less the reserve
    // cross-core events of the job, for the replay
    uint64_t msg_count_ = 0;
    std::atomic<uint64_t> job_records_{0};
    std::vector<CollectiveInfo> colls_;
    std::vector<MulticastInfo> mcasts_;

    // run_slice's steps: start (checks, core reset), loop (phases; false = preempted), finish
    static constexpr int kStarted = -2;
    // `linked`: a later part of a linked job (a pending cancel stays pending)
    int start(const spyre_engine_job& job, spyre_engine_result& res, bool linked = false);
    bool loop(Failure& f, bool& failed);
    int finish(spyre_engine_result& res, Failure& f, bool failed);
    ProgramCache programs_;    // holds the running (or preempted) job's validated program
    RunHint* hint_ = nullptr;  // the running program's host time
    bool inline_ = false;      // the job runs on the calling thread alone
    // the running phase's cores run on the calling thread one after another (inline_, or a
    // phase that took less than kInlineNs in the program's last run: a linear's short first and
    // last phases around its MM do not wake the pool)
    bool phase_inline_ = false;
    // Device memory generation for the matmul kernels' packing cache (kern::MatmulArgs::a_gen,
    // b_gen): a fresh value, unique over all engines, at the start of every phase whose cores run
    // one after another (on the calling thread, or a pool of one thread), where a STORE (the only
    // writes to device memory) drops the packings of the bytes it writes (kern::forget_packed;
    // a STORE through split mappings takes a fresh value); 0 in the phases on several threads
    // (no caching: other cores' STOREs would race).
    uint64_t ddr_gen_ = 0;
    static uint64_t fresh_ddr_gen() {
        static std::atomic<uint64_t> n{0};
        return n.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    RunHint run_;  // this run's phase times (copied to *hint_ after a whole run)
    // A program runs on the calling thread alone if its last run took less host time than this
    // on the pool (twice this if it ran alone): about what waking pool threads costs.
    static constexpr uint64_t kInlineNs = 20000;
    bool suspended_ = false;  // a preempted job waits in the cores for run_slice(nullptr)

    bool run_core(Core& c);
    bool fail(Core& c, int code, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
    bool check_lx(Core& c, const char* what, uint64_t addr, uint64_t rows, uint64_t stride,
                  uint64_t row_bytes, Range* out);
    bool check_ddr_row(Core& c, uint64_t addr, uint64_t len);
    // Translation (translate.cpp): the run holding va (nullptr if none), cached per core; the
    // translation of a checked transfer (fails the job with MMU_FAULT); a split row's copy.
    const spyre_engine_mapping* map_find(Core& c, uint64_t va) const {
        const uint32_t h = c.map_hint;  // the run used last (unsigned wrap rejects va < run)
        if (h < nmaps_ && va - maps_[h].va < maps_[h].len) return &maps_[h];
        return map_search(c, va);
    }
    const spyre_engine_mapping* map_search(Core& c, uint64_t va) const;
    bool check_map_row(Core& c, const char* what, uint64_t va, uint64_t len, bool write);
    void copy_mapped_row(Core& c, uint8_t* lx, uint64_t va, uint64_t len, bool to_lx);
    // Cycle model, engine side (record.cpp): timed operations go to the core's trace, which
    // the Timeline replays after the job (timing.hpp). `latency` non-zero: the unit's start-up
    // latency is charged when it starts from idle. dep must be 0 and end_out is set to 0 (the
    // times are known only after the replay); lane >= 0 is a ring direction.
    bool unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                 const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                 int lane = -1);
    bool dma_op(Core& c, bool is_load, uint64_t bytes, const Range& lx);
    // Adds cycles to the core's lower bound and fails the job past the cycle budget.
    bool charge(Core& c, int unit, uint64_t cycles);
    uint64_t hazards(const Core& c, const Range* reads, int nr, const Range* writes, int nw) const {
        return c.trace.hazards(reads, nr, writes, nw);
    }
    // Replays the traces; fills the per-core timing statistics, returns the job's cycles.
    uint64_t replay(spyre_engine_result& res);

    // A checked DDR <-> LX transfer (exec_dma.cpp).
    struct DmaDesc {
        uint64_t lx, ddr, len, n1, ds1, ls1, n2, ds2, ls2;
        Range lx_range;
        uint64_t bytes;  // DDR traffic (whole sticks); 0 = nothing to move
        // device address = DDR address + shift (mod 2^64; 0 when physical), unless split: a
        // translated transfer whose rows span several runs, translated row by row
        uint64_t shift = 0;
        bool split = false;
    };
    bool decode_dma(Core& c, const Instr& in, bool is_load, const char* what, DmaDesc& d);
    bool translate_dma(Core& c, const char* what, bool is_load, uint64_t ddr_hi, DmaDesc& d);
    void move_dma(Core& c, const DmaDesc& d, bool is_load);
    // Deferred LOAD copies (core.hpp): loads of fewer bytes are copied at once; a core keeps at
    // most kMaxDeferred (an LX access checks them all).
    static constexpr uint64_t kDeferMinBytes = 8192;
    static constexpr size_t kMaxDeferred = 8;
    void defer_load(Core& c, uint64_t lx, const uint8_t* src, uint64_t ddr, uint64_t len,
                    uint64_t n, uint64_t ls, uint64_t ds);
    bool exec_dma(Core& c, const Instr& in, bool is_load);
    bool exec_mm(Core& c, const Instr& in);
    bool exec_vec(Core& c, const Instr& in);
    // tensor instructions (exec_tensor.cpp)
    bool exec_vtrans(Core& c, const Instr& in);
    bool exec_vsel(Core& c, const Instr& in);
    bool exec_viota(Core& c, const Instr& in);
    bool exec_vfma(Core& c, const Instr& in);
    bool exec_vint(Core& c, const Instr& in);  // exec_int.cpp
    bool exec_vrng(Core& c, const Instr& in);  // exec_rng.cpp
    bool vec_shape_ok(Core& c, const char* name, uint64_t rows, uint64_t cols);
    bool check_vec_ops(Core& c, const char* name, uint64_t rows, uint64_t cols,
                       const VecOpd* const* ops, int n, Range* ranges);
    bool check_vec_align(Core& c, const char* name, const VecOpd* const* ops, int n);
    bool check_vec_ranges(Core& c, const char* name, uint64_t rows, uint64_t cols,
                          const VecOpd* const* ops, int n, Range* ranges);
    bool vec_timing(Core& c, uint64_t elems, bool wide, uint64_t per_vec, const Range* reads,
                    int nr, const Range& w, std::initializer_list<uint64_t> sticks);
    uint64_t vop_sticks(const VecOpd& o, uint64_t rows, uint64_t cols) const;
    void vec_touch(Core& c, const Range* reads, int nr, const Range& w, uint64_t out_rows,
                   uint64_t dstride, uint64_t out_bytes);
    bool exec_send(Core& c, const Instr& in);
    int exec_recv(Core& c, const Instr& in);  // 1 done, 0 blocked, -1 failed
    // Collectives over a core group (collectives.cpp), released by the scheduler once every
    // member waits in the same one.
    uint64_t group_of(const Core& c) const;  // the group a waiting core named (bit mask)
    bool release_group(const std::vector<Core*>& members, Failure& f);
    void release_barrier(const std::vector<Core*>& members);
    bool release_allred(const std::vector<Core*>& members, Failure& f);
    bool release_mcload(const std::vector<Core*>& members, Failure& f);
    uint64_t ring_span(uint64_t members) const;
    bool release_collectives(Failure& f, bool& failed);  // ring hops between the farthest members

    spyre_engine_config cfg_;
    ThreadPool pool_;
    std::vector<Core> cores_;
    LxMem lx_mem_;
    std::unique_ptr<uint64_t[]> stale_mem_;
    std::unique_ptr<std::recursive_mutex[]> defer_mu_;  // Core::defer_mu
    uint64_t stale_words_ = 0;
    std::atomic<bool> cancel_{false};
    kern::Cancel cancel_tok_;  // cancel_ and the running job's cancel flag
    int throw_core_ = -1;
    bool lx_poison_ = false;  // SPYRE_ENGINE_TEST_LX_POISON
    std::mutex run_mu_;

    bool cancelled() const { return cancel_tok_(); }
    Timeline timeline_{cfg_};
    ReplayCache replays_;  // timings of recent jobs (replay_cache.hpp)
};

}  // namespace spyre::eng
