// SPDX-License-Identifier: MIT
// Cost API of the engine's cycle model, usable without executing anything: the cost of one
// instruction from its operands, and the cycles of a whole phase (per-core sequences of
// operations, replayed by the same discrete-event model the engine uses after a job). The engine
// charges exactly these numbers (engine/tests/cost_test.cpp checks it). Documentation/isa.md
// "Cycle model" defines every rule and names the source of every constant.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "spyre/engine.h"
#include "spyre/isa.hpp"

namespace spyre::cost {

// LX sticks touched by `rows` rows of `row_bytes` bytes at addr, addr + stride, ...
uint64_t lx_sticks(uint64_t addr, uint64_t rows, uint64_t stride, uint64_t row_bytes);

// MM: cycles on the systolic arrays (without the fill latency charged from idle).
uint64_t mm_cycles(const spyre_engine_config& cfg, isa::DType in, uint64_t m, uint64_t n,
                   uint64_t k);
// Peak multiply-accumulates per cycle of one core for an MM input type.
double mm_peak_macs_per_cycle(const spyre_engine_config& cfg, isa::DType in);

// Vector instruction: lane-limited compute cycles, then the LX stick rule: each operand stream
// moves vec_lx_sticks_per_cycle sticks per cycle, so strided or columnar access pays per stick.
// src2: type of a second source operand if it has its own (mixed-type VBIN/VSEL/VFMA).
uint64_t vec_compute_cycles(const spyre_engine_config& cfg, isa::Op op, uint8_t func,
                            isa::DType dst, isa::DType src, uint64_t rows, uint64_t cols,
                            isa::DType src2 = isa::DType::COUNT);
uint64_t vec_cycles(const spyre_engine_config& cfg, uint64_t compute_cycles,
                    uint64_t max_stream_sticks);

// DDR traffic of a LOAD/STORE: whole sticks per row.
uint64_t dma_bytes(uint64_t row_bytes, uint64_t rows);
// Cycles of a transfer of `bytes` when it has DDR to itself (port-limited) and when it shares
// DDR with `sharers - 1` other transfers; both without the start-up latency.
uint64_t dma_cycles_alone(const spyre_engine_config& cfg, uint64_t bytes);
uint64_t dma_cycles_shared(const spyre_engine_config& cfg, uint64_t bytes, uint32_t sharers);

uint64_t ring_send_cycles(const spyre_engine_config& cfg, uint64_t bytes);
// Ring hops between the two farthest members of a group (bit mask) on a ring of `ncores`, going
// the short way round: a group of adjacent cores spans members - 1 hops.
uint64_t ring_span(uint32_t ncores, uint64_t members);
// Ring all-reduce of `bytes` over `members` cores, `hops` ring hops per step.
uint64_t allreduce_cycles(const spyre_engine_config& cfg, uint64_t members, uint64_t bytes,
                          uint64_t hops);

// A phase: per-core sequences of operations, priced by the engine's replay. LX ranges drive the
// hazards exactly as in the engine (an op waits for queued ops it conflicts with).
struct LxSpan {
    uint64_t lo = 0, hi = 0;
};

struct PhaseResult {
    uint64_t cycles = 0;                         // job cycles, launch overhead included
    std::vector<spyre_engine_core_stats> cores;  // busy, wait_cycles, end_cycle per core
};

class Phase {
  public:
    Phase(const spyre_engine_config& cfg, uint32_t cores);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

    // `instructions` of scalar issue (each instruction, timed ones included, issues in a cycle).
    void issue(uint32_t core, uint64_t instructions);
    void load(uint32_t core, LxSpan lx, uint64_t bytes);
    void store(uint32_t core, LxSpan lx, uint64_t bytes);
    void mm(uint32_t core, uint64_t cycles, LxSpan a, LxSpan b, LxSpan c, bool accumulate);
    void vec(uint32_t core, uint64_t cycles, const std::vector<LxSpan>& reads, LxSpan write);
    // Collectives over a group (bit mask of cores). multicast: one DDR read of `bytes` delivered
    // to each member at lx[i] (one entry per member, in core order).
    void barrier(uint64_t members);
    void allreduce(uint64_t members, uint64_t bytes);
    void multicast(uint64_t members, const std::vector<LxSpan>& lx, uint64_t bytes);
    void halt();  // every core halts (call last)

    PhaseResult run() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace spyre::cost
