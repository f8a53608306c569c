// SPDX-License-Identifier: MIT
// Per-core state of a running job: registers, loops, scratchpad (LX) bookkeeping, timing state
// and ring buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "program.hpp"
#include "timing.hpp"

namespace spyre::eng {

enum class St : uint8_t { Running, BlockedRecv, AtBarrier, AtAllred, AtMcast, Halted, Failed };

struct Msg {
    std::vector<uint8_t> data;
    uint64_t id;  // job-wide message number (the cycle model matches RECV to SEND by it)
    uint32_t pc;
};

// A LOAD whose copy into LX is deferred: its LX rows alias their DDR source, which the
// instructions that only read them (MM) read in place. The copy is made (settled) before anything
// else accesses the rows and before a STORE writes over the source: this core's, or another
// core's once the copy has outlived a phase end (an ordering point: `shared`). A halted core's
// copies are dropped (deferred.cpp; isa.md "Host implementation notes").
struct Deferred {
    uint64_t lo, hi;          // LX bounding box: rows lo + i * ls, i < n, of len bytes
    uint64_t len, ls, n, ds;  // row bytes, LX stride, rows, source stride
    const uint8_t* src;       // row 0's source in host memory
    uint64_t ddr_lo, ddr_hi;  // the source's device-memory offsets (bounding box)
};

struct LoopFrame {
    uint32_t start, end;
    uint64_t count, index;
    uint8_t idx_reg;
};

struct Core {
    uint32_t id = 0;
    uint64_t r[isa::kNumRegs] = {};
    uint32_t pc = 0;
    St st = St::Running;
    LoopFrame loops[isa::kMaxLoopDepth] = {};
    uint32_t depth = 0;
    uint64_t span_base = 0;
    uint8_t* lx = nullptr;
    uint64_t lx_hw = 0;  // highest LX byte written + 1 (becomes stale at the next job start)
    // One bit per LX stick: the stick must read as zero but its bytes may still hold an earlier
    // job's data. Sticks are zeroed lazily when first touched, or just marked clean when a LOAD
    // overwrites them completely (saves zeroing the scratchpads at every job start).
    uint64_t* stale = nullptr;
    std::vector<Deferred> deferred;  // at most kMaxDeferred, oldest first
    // Its deferred copies outlived a phase end: other cores' STOREs over their sources copy them
    // first, so every use of `deferred` holds defer_mu (set between phases only).
    bool shared = false;
    std::recursive_mutex* defer_mu = nullptr;
    // timing: the record of timed operations, replayed by the cycle model after the job, and
    // a lower bound of the core's cycles (checked against the cycle budget while running)
    Trace trace;
    uint64_t unit_cost[kTUnits] = {};
    spyre_engine_core_stats stats = {};
    // ring: messages sent this phase (by direction) and messages delivered to this core
    std::vector<Msg> out[2];
    std::deque<Msg> in[2];
    uint64_t in_bytes[2] = {};
    uint64_t group = 0;     // cores of the collective this core waits in (bit mask)
    uint32_t map_hint = 0;  // translated job: index of the run this core used last
    // time slice (Engine::run_slice): the core stops before instruction number slice_end
    uint64_t slice_end = UINT64_MAX;
    bool sliced = false;  // it did, in the phase that just ran
    Failure fail;

    // A core the job does not use: halted, its scratchpad marked stale by the caller.
    void park(uint32_t core_id) {
        id = core_id;
        st = St::Halted;
        lx_hw = 0;
        deferred.clear();
        shared = false;
        trace.trim();
        for (int d = 0; d < 2; ++d) {
            out[d].clear();
            in[d].clear();
            in_bytes[d] = 0;
        }
    }

    // The state of a core at a job start, keeping the scratchpad (lx, stale) and the storage of
    // the containers: every job start resets the job's cores, and constructing a Core allocates
    // (its deques). Every member above is set here but lx, stale and trace (the caller resets
    // the trace). Deferred copies are dropped: the previous job's LX reads as zero.
    void reset(uint32_t core_id) {
        id = core_id;
        std::fill(std::begin(r), std::end(r), 0);
        pc = 0;
        st = St::Running;
        std::fill(std::begin(loops), std::end(loops), LoopFrame{});
        depth = 0;
        span_base = 0;
        lx_hw = 0;
        deferred.clear();
        shared = false;
        std::fill(std::begin(unit_cost), std::end(unit_cost), 0);
        stats = {};
        for (int d = 0; d < 2; ++d) {
            out[d].clear();
            in[d].clear();
            in_bytes[d] = 0;
        }
        group = 0;
        map_hint = 0;
        slice_end = UINT64_MAX;
        sliced = false;
        fail = Failure{};
    }
};

using Range = LxRange;

// Deferred copies (deferred.cpp): copies those overlapping LX [lo, hi) into LX; with `drop`,
// those lying inside [lo, hi) are dropped instead (about to be overwritten completely).
void lx_settle(Core& c, uint64_t lo, uint64_t hi, bool drop);
void lx_settle_all(Core& c);
// Copies those whose source overlaps device-memory offsets [lo, hi) (before a write there).
void ddr_settle(Core& c, uint64_t lo, uint64_t hi);
// The host bytes of an operand of `rows` rows of row_bytes at LX addr, stride apart, if it lies
// in one deferred copy's rows: its source (*stride_out its row stride), else nullptr.
const uint8_t* lx_alias(const Core& c, uint64_t addr, uint64_t rows, uint64_t stride,
                        uint64_t row_bytes, uint64_t* stride_out);

// The deferred copies an access to LX [lo, hi) needs settled (lx_settle).
inline void lx_settle_for(Core& c, uint64_t lo, uint64_t hi, bool drop) {
    if (c.shared) {
        std::lock_guard<std::recursive_mutex> g(*c.defer_mu);
        if (!c.deferred.empty()) lx_settle(c, lo, hi, drop);
    } else if (!c.deferred.empty()) {
        lx_settle(c, lo, hi, drop);
    }
}

// Zeroes the stale sticks overlapping LX bytes [lo, hi) (before any access to them).
inline void lx_touch(Core& c, uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    lx_settle_for(c, lo, hi, false);
    const uint64_t s0 = lo / kS, s1 = (hi + kS - 1) / kS;
    for (uint64_t w = s0 / 64; w <= (s1 - 1) / 64; ++w) {
        uint64_t mask = ~uint64_t{0};
        if (w == s0 / 64) mask &= ~uint64_t{0} << (s0 % 64);
        if (w == (s1 - 1) / 64 && s1 % 64) mask &= ~(~uint64_t{0} << (s1 % 64));
        uint64_t bits = c.stale[w] & mask;
        if (!bits) continue;
        c.stale[w] &= ~bits;
        while (bits) {
            const int b = std::countr_zero(bits);
            bits &= bits - 1;
            std::memset(c.lx + (w * 64 + b) * kS, 0, kS);
        }
    }
}
inline void lx_touch(Core& c, const Range& r) { lx_touch(c, r.lo, r.hi); }

// LX bytes [lo, hi) are about to be overwritten completely: whole sticks inside need no zeroing.
inline void lx_overwrite(Core& c, uint64_t lo, uint64_t hi) {
    if (lo < hi) lx_settle_for(c, lo, hi, true);
    const uint64_t s0 = (lo + kS - 1) / kS, s1 = hi / kS;
    if (s1 <= s0) {
        lx_touch(c, lo, hi);
        return;
    }
    lx_touch(c, lo, s0 * kS);
    lx_touch(c, s1 * kS, hi);
    for (uint64_t w = s0 / 64; w <= (s1 - 1) / 64; ++w) {
        uint64_t mask = ~uint64_t{0};
        if (w == s0 / 64) mask &= ~uint64_t{0} << (s0 % 64);
        if (w == (s1 - 1) / 64 && s1 % 64) mask &= ~(~uint64_t{0} << (s1 % 64));
        c.stale[w] &= ~mask;
    }
}

// Zeroed scratchpad memory of all cores. On Linux an anonymous mapping advised to use huge pages
// (the scratchpads total tens of MiB and every job streams through them: fewer TLB misses).
struct LxMem {
    uint8_t* p = nullptr;
    size_t size = 0;
    bool mapped = false;
    explicit LxMem(size_t n) : size(n) {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
        void* m = n ? mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                    : MAP_FAILED;
        if (m != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
            madvise(m, n, MADV_HUGEPAGE);
#endif
            p = static_cast<uint8_t*>(m);
            mapped = true;
            return;
        }
#endif
        p = new uint8_t[n]();
    }
    ~LxMem() {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
        if (mapped) {
            munmap(p, size);
            return;
        }
#endif
        delete[] p;
    }
    LxMem(const LxMem&) = delete;
    LxMem& operator=(const LxMem&) = delete;
    uint8_t* get() const { return p; }
};

}  // namespace spyre::eng
