// SPDX-License-Identifier: MIT
// Job scheduler: job checks, core reset, phases of parallel core execution separated by
// ring deliveries and collective releases, deadlock detection, results.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "engine_impl.hpp"

namespace spyre::eng {

// Host threads for a config: num_threads, or one per host CPU; never more than the cores (a
// phase runs at most num_cores cores in parallel, more threads would only idle).
unsigned pool_threads(const spyre_engine_config& cfg) {
    unsigned t = cfg.num_threads ? cfg.num_threads : std::thread::hardware_concurrency();
    return std::clamp(t, 1u, cfg.num_cores);
}

// Test hook: SPYRE_ENGINE_TEST_THROW_CORE=<n> makes core n throw a C++ exception when it starts
// running (checks that an exception on a pool thread becomes a job error). -1 = off.
int test_throw_core() {
    const char* v = std::getenv("SPYRE_ENGINE_TEST_THROW_CORE");
    return v && *v ? std::atoi(v) : -1;
}

// Test hook: SPYRE_ENGINE_TEST_LX_POISON=1 fills the scratchpads of a job's cores with 0xff
// bytes at every job (and linked part) start instead of zero: finds the programs that read
// LX they have not written.
bool test_lx_poison() {
    const char* v = std::getenv("SPYRE_ENGINE_TEST_LX_POISON");
    return v && *v && std::atoi(v) != 0;
}

// Fills the result of a job that stopped with failure fl; returns its code.
static int finish_fail(spyre_engine_result& res, const Failure& fl) {
    res.status = -1;
    res.error = fl.code;
    res.core = fl.core;
    res.pc = fl.pc;
    std::memcpy(res.message, fl.msg, sizeof res.message);
    res.message[sizeof res.message - 1] = 0;
    if (fl.code == SPYRE_ENGINE_ERR_MMU_FAULT) {
        res.fault_va = fl.fault_va;
        res.fault_access = fl.fault_access;
    }
    return fl.code;
}

int Engine::run(const spyre_engine_job& job, spyre_engine_result& res) {
    return run_slice(&job, 0, res);
}

int Engine::run_slice(const spyre_engine_job* job, uint64_t slice, spyre_engine_result& res) {
    std::lock_guard<std::mutex> lk(run_mu_);
    const bool resume = !job;
    if (resume && !suspended_) {
        Failure f;
        std::memset(&res, 0, sizeof res);
        set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0, "no preempted job to resume");
        return finish_fail(res, f);
    }
    // a host failure (exception) below leaves no job to resume
    suspended_ = false;
    if (!resume) {
        const int rc = start(*job, res);
        if (rc != kStarted) return rc;
    }
    // the slice: at most `slice` more instructions per core
    for (uint32_t i = 0; i < ncores_; ++i) {
        Core& c = cores_[i];
        c.slice_end = slice && c.stats.instructions <= UINT64_MAX - slice
                          ? c.stats.instructions + slice
                          : UINT64_MAX;
        c.sliced = false;
    }
    Failure f;
    bool failed = false;
    run_ = RunHint{};
    const auto t0 = std::chrono::steady_clock::now();
    if (!loop(f, failed)) {
        suspended_ = true;
        return kPreempted;
    }
    if (!resume && !slice) {  // a whole run: how long it took decides how the next one runs
        *hint_ = run_;
        hint_->known = true;
        hint_->inline_run = inline_;
        hint_->ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count());
    }
    return finish(res, f, failed);
}

// Drops a preempted job: its cores' registers, loops, traces and messages. The scratchpads keep
// their bytes, which the next job sees as stale (zero).
void Engine::discard() {
    std::lock_guard<std::mutex> lk(run_mu_);
    suspended_ = false;
    for (Core& c : cores_) {
        uint8_t* lx = c.lx;
        uint64_t* stale = c.stale;
        std::recursive_mutex* mu = c.defer_mu;
        const uint64_t hw = c.lx_hw;
        c.~Core();
        new (&c) Core();
        c.lx = lx;
        c.stale = stale;
        c.defer_mu = mu;
        c.lx_hw = hw;
        c.st = St::Halted;
    }
    colls_ = {};
    mcasts_ = {};
    prog_ = nullptr;
    job_ = nullptr;
    maps_ = nullptr;
    nmaps_ = 0;
}

// Scratchpad bytes the job's cores have written so far (whole sticks): what a context switch
// saves and restores.
uint64_t Engine::context_bytes() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < ncores_ && i < cores_.size(); ++i)
        n += ceil_div(std::min(cores_[i].lx_hw, cfg_.lx_bytes), kS) * kS;
    return n;
}

// Checks the job and resets the cores; kStarted, or the job's error (result filled).
int Engine::start(const spyre_engine_job& job, spyre_engine_result& res, bool linked) {
    // a later part of a linked job: a cancel of the job stays pending
    if (!linked) cancel_.store(false, std::memory_order_relaxed);
    cancel_tok_.job = job.cancel;
    std::memset(&res, 0, sizeof res);
    Failure f;
    // job arguments
    const uint32_t nc = job.num_cores ? job.num_cores : cfg_.num_cores;
    res.num_cores = nc;
    if (nc > cfg_.num_cores || job.num_args > isa::kMaxArgs || (job.num_args && !job.args) ||
        (job.num_windows && !job.windows) ||
        (job.mem_size && !job.mem && !(job.flags & SPYRE_ENGINE_JOB_TIMING_ONLY)) ||
        (job.flags & ~SPYRE_ENGINE_JOB_TIMING_ONLY)) {
        set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                 "invalid job (cores %u, args %u, windows %u, flags 0x%x)", nc, job.num_args,
                 job.num_windows, job.flags);
        return finish_fail(res, f);
    }
    if (!mappings_valid(job, f)) return finish_fail(res, f);
    windows_.clear();
    uint64_t span0 = UINT64_MAX;
    for (uint32_t i = 0; i < job.num_windows; ++i) {
        const auto& w = job.windows[i];
        if (w.size == 0) continue;
        // physical windows lie in device memory; virtual ones only must not wrap
        const uint64_t limit = job.mappings ? UINT64_MAX : job.mem_size;
        if (w.addr > limit || w.size > limit - w.addr) {
            set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                     "window %u (0x%llx+%llu) beyond device memory %llu", i,
                     (unsigned long long)w.addr, (unsigned long long)w.size,
                     (unsigned long long)job.mem_size);
            return finish_fail(res, f);
        }
        windows_.push_back(w);
        span0 = std::min(span0, w.addr & ~uint64_t{kS - 1});
    }
    if (span0 == UINT64_MAX) span0 = 0;
    prog_ = programs_.get(static_cast<const uint8_t*>(job.program), job.program_size, f, &hint_);
    if (!prog_) return finish_fail(res, f);
    // A program whose last run was short runs on the calling thread alone: waking pool threads
    // would cost more than they save. Results never depend on it (section 7 of isa.md).
    inline_ = hint_->known && hint_->ns < (hint_->inline_run ? kInlineNs * 2 : kInlineNs);
    job_ = &job;
    ncores_ = nc;
    mem_ = static_cast<uint8_t*>(job.mem);
    maps_ = job.mappings;
    nmaps_ = job.mappings ? job.num_mappings : 0;
    timing_only_ = job.flags & SPYRE_ENGINE_JOB_TIMING_ONLY;
    mem_size_ = job.mem_size;
    max_instr_ = job.max_instructions    ? job.max_instructions
                 : cfg_.max_instructions ? cfg_.max_instructions
                                         : UINT64_MAX;
    max_cycles_ = job.max_cycles ? job.max_cycles : cfg_.max_cycles ? cfg_.max_cycles : UINT64_MAX;
    lx_usable_ = spyre_engine_lx_usable(&cfg_);
    msg_count_ = 0;
    job_records_.store(0, std::memory_order_relaxed);
    colls_.clear();
    mcasts_.clear();

    // reset cores (what the previous job or part wrote becomes stale: it reads as zero)
    for (uint32_t i = 0; i < cfg_.num_cores; ++i) {
        Core& c = cores_[i];
        uint64_t* stale = c.stale;
        const uint64_t sticks = ceil_div(std::min(c.lx_hw, cfg_.lx_bytes), kS);
        for (uint64_t w = 0; w < sticks / 64; ++w) stale[w] = ~uint64_t{0};
        if (sticks % 64) stale[sticks / 64] |= ~(~uint64_t{0} << (sticks % 64));
        if (i >= nc) {  // idle in this job: nothing more to reset
            c.park(i);
            continue;
        }
        c.reset(i);
        if (lx_poison_ && !timing_only_) {  // test hook: LX not written by the job is garbage
            std::memset(c.lx, 0xff, cfg_.lx_bytes);
            std::fill(stale, stale + stale_words_, uint64_t{0});
            c.lx_hw = cfg_.lx_bytes;
        }
        c.r[isa::kRegCoreId] = i;
        c.r[isa::kRegNumCores] = nc;
        c.span_base = span0;
        c.trace.reset(cfg_.queue_depth, &job_records_);
    }
    return kStarted;
}

// Runs phases until the job ends (returns true; f and failed tell how) or a core used up its
// slice (returns false: every core stands at an instruction boundary, its messages delivered).
bool Engine::loop(Failure& f, bool& failed) {
    const uint32_t nc = ncores_;
    const Program& prog = *prog_;
    std::vector<uint32_t> runnable;
    for (uint32_t phase = 0;; ++phase) {
        runnable.clear();
        for (uint32_t i = 0; i < nc; ++i)
            if (cores_[i].st == St::Running) runnable.push_back(i);
        if (!runnable.empty()) {
            // as for a whole job (start): a phase that was short in the last run runs alone
            const bool timed = phase < RunHint::kPhases;
            const uint32_t bit = timed ? 1u << phase : 0;
            phase_inline_ =
                inline_ ||
                (timed && hint_->known &&
                 hint_->phase_ns[phase] < (hint_->phase_inline & bit ? kInlineNs * 2 : kInlineNs));
            // the cores run one after another: device memory changes only by their STOREs
            const bool sequential = phase_inline_ || pool_.threads() == 1 || runnable.size() == 1;
            ddr_gen_ = sequential ? fresh_ddr_gen() : 0;
            const auto p0 =
                timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
            if (phase_inline_)
                for (uint32_t i : runnable) run_core(cores_[i]);
            else
                pool_.parallel_for(runnable.size(),
                                   [&](size_t k) { run_core(cores_[runnable[k]]); });
            if (timed) {
                run_.phase_ns[phase] = static_cast<uint32_t>(std::min<int64_t>(
                    UINT32_MAX, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - p0)
                                    .count()));
                if (phase_inline_) run_.phase_inline |= bit;
            }
            // deferred copies: a halted core's LX is read no more; those of a core that waits
            // at an ordering point become shared: other cores may write their sources next
            for (uint32_t i : runnable) {
                Core& c = cores_[i];
                if (c.st == St::Halted || c.st == St::Failed) c.deferred.clear();
                c.shared = nc > 1 && !c.deferred.empty();
            }
            for (uint32_t i : runnable)
                if (cores_[i].st == St::Failed) {
                    f = cores_[i].fail;
                    failed = true;
                    break;
                }
            if (failed) break;
            // deliver this phase's ring messages (each channel has a single sender)
            for (uint32_t i = 0; i < nc && !failed; ++i) {
                for (int d = 0; d < 2 && !failed; ++d) {
                    Core& s = cores_[i];
                    Core& dst = cores_[d == 0 ? (i + 1) % nc : (i + nc - 1) % nc];
                    for (Msg& m : s.out[d]) {
                        // number the message; the send's trace record carries the number
                        const uint64_t rec = m.id;
                        m.id = msg_count_++;
                        s.trace.ops()[rec].aux = m.id;
                        if (dst.in_bytes[d] + m.data.size() > cfg_.ring_max_bytes) {
                            set_fail(f, SPYRE_ENGINE_ERR_RING, static_cast<int>(i), m.pc,
                                     "SEND: core %u has more than %llu bytes undelivered", dst.id,
                                     (unsigned long long)cfg_.ring_max_bytes);
                            failed = true;
                            break;
                        }
                        dst.in_bytes[d] += m.data.size();
                        dst.in[d].push_back(std::move(m));
                    }
                    s.out[d].clear();
                }
            }
            if (failed) break;
            for (uint32_t i = 0; i < nc; ++i) {
                Core& c = cores_[i];
                if (c.st == St::BlockedRecv && !c.in[prog.code[c.pc].func].empty())
                    c.st = St::Running;
            }
            bool sliced = false;
            for (uint32_t i : runnable) sliced |= cores_[i].sliced;
            if (sliced && !cancelled()) {  // the preempted job's LX holds its bytes
                for (uint32_t i = 0; i < nc; ++i) {
                    lx_settle_all(cores_[i]);
                    cores_[i].shared = false;
                }
                return false;
            }
            continue;
        }
        if (cancelled()) {
            set_fail(f, SPYRE_ENGINE_ERR_CANCELLED, -1, 0, "job cancelled");
            failed = true;
            break;
        }
        // nobody can run: release the collectives whose groups are complete, else report why
        // the job cannot go on
        if (!release_collectives(f, failed)) continue;
        if (failed) break;
        break;  // every core has halted
    }
    return true;
}

// Linked launches: each part runs as a job of its own (start, loop, finish) and the results
// are put together on one time line: part k's work starts after part k-1's last core has
// drained, a barrier and the clear of the scratchpad sticks part k-1 wrote; only the first
// part pays the launch overhead.
int Engine::run_linked(const spyre_engine_job* parts, uint32_t n, spyre_engine_result& res) {
    std::lock_guard<std::mutex> lk(run_mu_);
    suspended_ = false;  // a linked job drops a preempted one, as any start does
    std::memset(&res, 0, sizeof res);
    Failure f;
    const auto same = [&](const spyre_engine_job& p) {
        const spyre_engine_job& a = parts[0];
        return p.mem == a.mem && p.mem_size == a.mem_size && p.flags == a.flags &&
               p.mappings == a.mappings && p.num_mappings == a.num_mappings &&
               p.cancel == a.cancel && !p.preempt;
    };
    bool ok = parts && n >= 1 && n <= SPYRE_ENGINE_MAX_PARTS;
    for (uint32_t k = 0; ok && k < n; ++k) ok = same(parts[k]);
    if (!ok) {
        set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                 "invalid linked job (%u parts: 1..%u sharing memory, flags, mappings and "
                 "cancel flag, no preempt flag)",
                 n, SPYRE_ENGINE_MAX_PARTS);
        return finish_fail(res, f);
    }
    const uint64_t overhead = cfg_.launch_overhead_cycles;
    uint64_t offset = 0;  // job cycle at which the part's own cycle `overhead` falls, less it
    spyre_engine_result part;
    spyre_engine_core_stats acc[SPYRE_ENGINE_MAX_CORES] = {};
    uint32_t max_cores = 0;
    int rc = SPYRE_ENGINE_OK;
    for (uint32_t k = 0; k < n; ++k) {
        if (k > 0) {  // the barrier, then every core clears what it wrote (in parallel)
            uint64_t clear = 0;
            for (const Core& c : cores_)
                clear = std::max(clear, ceil_div(ceil_div(std::min(c.lx_hw, cfg_.lx_bytes), kS),
                                                 uint64_t{cfg_.vec_lx_sticks_per_cycle}));
            const uint64_t between = cfg_.barrier_latency + clear;
            offset += between;
            res.link_cycles += static_cast<uint32_t>(std::min<uint64_t>(between, UINT32_MAX));
        }
        rc = start(parts[k], part, k > 0);
        if (rc == kStarted) {
            Failure pf;
            bool failed = false;
            loop(pf, failed);  // never preempted: no slice, no preempt flag
            rc = finish(part, pf, failed);
        }
        max_cores = std::max(max_cores, part.num_cores);
        for (uint32_t i = 0; i < part.num_cores && i < SPYRE_ENGINE_MAX_CORES; ++i) {
            const spyre_engine_core_stats& s = part.cores[i];
            spyre_engine_core_stats& a = acc[i];
            for (int u = 0; u < SPYRE_UNIT_COUNT; ++u) a.busy[u] += s.busy[u];
            a.wait_cycles += s.wait_cycles;
            a.end_cycle = offset + s.end_cycle;
            a.instructions += s.instructions;
            a.ddr_read_bytes += s.ddr_read_bytes;
            a.ddr_write_bytes += s.ddr_write_bytes;
            a.ring_bytes += s.ring_bytes;
            a.macs += s.macs;
            a.dma_load_busy += s.dma_load_busy;
            a.dma_store_busy += s.dma_store_busy;
            a.vec_sticks += s.vec_sticks;
            a.mac_slots += s.mac_slots;
        }
        res.total_cycles = offset + part.total_cycles;
        res.ddr_read_bytes += part.ddr_read_bytes;
        res.ddr_write_bytes += part.ddr_write_bytes;
        res.ring_bytes += part.ring_bytes;
        res.instructions += part.instructions;
        res.macs += part.macs;
        res.part = k;
        if (rc != SPYRE_ENGINE_OK) {
            res.status = part.status;
            res.error = part.error;
            res.core = part.core;
            res.pc = part.pc;
            std::memcpy(res.message, part.message, sizeof res.message);
            res.fault_va = part.fault_va;
            res.fault_access = part.fault_access;
            break;
        }
        offset += std::max(part.total_cycles, overhead) - overhead;
    }
    res.num_cores = max_cores;
    for (uint32_t i = 0; i < max_cores; ++i) {
        acc[i].idle_cycles = res.total_cycles - std::min(acc[i].end_cycle, res.total_cycles);
        res.cores[i] = acc[i];
    }
    return rc;
}

// Fills the result of the ended job; returns its error.
int Engine::finish(spyre_engine_result& res, Failure& f, bool failed) {
    const uint32_t nc = ncores_;
    std::memset(&res, 0, sizeof res);
    res.num_cores = nc;
    // results (also filled for failed jobs: statistics up to the failure); the timing comes
    // from the replay of the cores' traces
    replay(res);
    if (!failed && max_cycles_ && res.total_cycles > max_cycles_) {
        set_fail(f, SPYRE_ENGINE_ERR_CYCLE_BUDGET, -1, 0,
                 "cycle budget %llu exceeded (%llu cycles)", (unsigned long long)max_cycles_,
                 (unsigned long long)res.total_cycles);
        failed = true;
    }
    for (uint32_t i = 0; i < nc; ++i) {
        Core& c = cores_[i];
        c.stats.idle_cycles = res.total_cycles - c.stats.end_cycle;
        res.cores[i] = c.stats;
        res.ddr_read_bytes += c.stats.ddr_read_bytes;
        res.ddr_write_bytes += c.stats.ddr_write_bytes;
        res.ring_bytes += c.stats.ring_bytes;
        res.instructions += c.stats.instructions;
        res.macs += c.stats.macs;
    }
    prog_ = nullptr;
    job_ = nullptr;
    maps_ = nullptr;
    nmaps_ = 0;
    if (failed) return finish_fail(res, f);
    return SPYRE_ENGINE_OK;
}

}  // namespace spyre::eng

namespace spyre::eng {

static const char* coll_name(St st) {
    return st == St::AtBarrier ? "BAR" : st == St::AtAllred ? "ALLRED" : "MCLOAD";
}

// Called when no core can run. Releases every collective whose members all wait in it; returns
// false if one was released (the cores run on). Otherwise sets `failed` with the reason (a
// deadlock or a mismatch) or leaves it clear if every core has halted, and returns true.
bool Engine::release_collectives(Failure& f, bool& failed) {
    bool released = false;
    std::vector<Core*> members;
    for (uint32_t i = 0; i < ncores_; ++i) {
        Core& c = cores_[i];
        if (c.st != St::AtBarrier && c.st != St::AtAllred && c.st != St::AtMcast) continue;
        // the lowest member decides for its group
        if (std::countr_zero(c.group) != static_cast<int>(i)) continue;
        members.clear();
        bool complete = true;
        for (uint32_t j = 0; j < ncores_ && complete; ++j) {
            if (!(c.group >> j & 1)) continue;
            Core& m = cores_[j];
            complete = m.st == c.st && m.group == c.group;
            members.push_back(&m);
        }
        if (!complete) continue;
        if (!release_group(members, f)) {
            failed = true;
            return true;
        }
        released = true;
    }
    if (released) return false;
    // nothing to release: find the reason
    for (uint32_t i = 0; i < ncores_; ++i) {
        Core& c = cores_[i];
        if (c.st == St::BlockedRecv) {
            const Instr& in = prog_->code[c.pc];
            const uint32_t from = in.func == 0 ? (i + ncores_ - 1) % ncores_ : (i + 1) % ncores_;
            set_fail(f, SPYRE_ENGINE_ERR_DEADLOCK, static_cast<int>(i), c.pc,
                     "RECV waits for a message from core %u that never comes", from);
            failed = true;
            return true;
        }
    }
    for (uint32_t i = 0; i < ncores_; ++i) {
        Core& c = cores_[i];
        if (c.st == St::Halted) continue;
        for (uint32_t j = 0; j < ncores_; ++j) {
            if (!(c.group >> j & 1)) continue;
            const Core& m = cores_[j];
            if (m.st == St::Halted) {
                set_fail(f, SPYRE_ENGINE_ERR_DEADLOCK, static_cast<int>(i), c.pc,
                         "%s waits for core %u, which has halted", coll_name(c.st), j);
                failed = true;
                return true;
            }
            if (m.st != c.st || m.group != c.group) {
                set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(j), m.pc,
                         "core %u waits in %s (group 0x%llx), core %u in %s (group 0x%llx)", j,
                         coll_name(m.st), (unsigned long long)m.group, i, coll_name(c.st),
                         (unsigned long long)c.group);
                failed = true;
                return true;
            }
        }
    }
    return true;  // all halted
}

}  // namespace spyre::eng
