// SPDX-License-Identifier: MIT
// Prices a device program exactly on the engine's cycle model without data: a timing-only run
// (SPYRE_ENGINE_JOB_TIMING_ONLY) of the very image that would be launched. Every planner of the
// op library compares its candidates this way.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "spyre/engine.h"

namespace spyre::ops {

// A program that needs more than one job may do: more timed operations than the engine records
// for one job's cycle model, or more instructions or modeled cycles than its budgets. Planners
// skip such candidates; a plan with none left is refused (cached_plan: NOT_SUPPORTED).
struct JobTooLarge : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// How a JobTooLarge's message begins (also in the NOT_SUPPORTED error it becomes).
inline constexpr const char* kJobTooLargeText = "more work than one launch may do";

class Pricer {
  public:
    explicit Pricer(const spyre_engine_config& cfg);
    ~Pricer();
    Pricer(const Pricer&) = delete;
    Pricer& operator=(const Pricer&) = delete;

    const spyre_engine_config& config() const { return cfg_; }
    uint64_t lx_budget() const { return spyre_engine_lx_usable(&cfg_); }
    // Runs `image` on `cores` cores with `args`, one window [0, mem_size). Throws JobTooLarge
    // past the engine's budgets for one job, std::runtime_error (with the engine's message) if
    // the program faults.
    spyre_engine_result price(const std::vector<uint8_t>& image, uint32_t cores,
                              const std::vector<uint64_t>& args, uint64_t mem_size) const;

  private:
    spyre_engine_config cfg_;
    spyre_engine* eng_ = nullptr;
};

// The default engine configuration (what the card model and the simulator run).
spyre_engine_config default_engine_config();

}  // namespace spyre::ops
