// SPDX-License-Identifier: MIT
// Work division for matmul: enumerates the (gm, gn, gk) grids of the cores, sub-tiles each one
// into LX, ranks them with a roofline estimate and prices the best few exactly on the engine's
// cycle model (a timing-only run of the very program that would be launched).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/matmul_program.hpp"
#include "ops/pricing.hpp"
#include "spyre/engine.h"

namespace spyre::ops {

struct PricedSplit {
    MatmulSplit split;
    uint64_t estimate_cycles = 0;  // roofline estimate used for ranking
    uint64_t cycles = 0;           // exact, from the cycle model (0 = not priced)
    spyre_engine_result stats{};   // of the timing-only run (when priced)
};

std::string split_name(const MatmulSplit& s);  // e.g. "m8 n4 k1"

class MatmulPlanner {
  public:
    explicit MatmulPlanner(const spyre_engine_config& cfg) : pricer_(cfg) {}

    const spyre_engine_config& config() const { return pricer_.config(); }
    uint64_t lx_budget() const { return pricer_.lx_budget(); }

    // Every grid with gm * gn * gk <= cores that tiles the shape, with its estimate, ranked
    // best first. multicast: share panels by MCLOAD (false: every core reads its own).
    std::vector<PricedSplit> candidates(const MatmulShape& s, bool multicast = true) const;
    // Exact cycles of one split (timing-only run). Throws std::runtime_error on a program fault.
    PricedSplit price(const MatmulShape& s, const MatmulSplit& p) const;
    // The plan: the `exact` best-ranked candidates and the naive plan priced, the fastest
    // returned.
    PricedSplit plan(const MatmulShape& s, int exact = 8) const;
    // The naive plan a compiler without work division makes: all cores along M (the largest
    // power of two that divides M), no multicast, no K split.
    PricedSplit naive(const MatmulShape& s) const;

  private:
    Pricer pricer_;
    uint64_t estimate(const MatmulShape& s, const MatmulSplit& p) const;
};

}  // namespace spyre::ops
