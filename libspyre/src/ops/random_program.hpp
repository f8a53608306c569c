// SPDX-License-Identifier: MIT
// The random-number program of spyre_op_random (Documentation/ops.md "Random numbers"): n
// dense elements split over the cores in chunks; each chunk is one VRNG whose stream index is
// the element's global index, so the values do not depend on the split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class RandDist : uint8_t { UNIFORM, NORMAL, BITS, BERNOULLI };

struct RandShape {
    RandDist dist = RandDist::UNIFORM;
    uint64_t n = 0;
    isa::DType out = isa::DType::F32;
    float scale = 1.0f, shift = 0.0f;  // UNIFORM / NORMAL: fma(x, scale, shift)
    float p = 0.5f;                    // BERNOULLI with a scalar probability
    bool p_tensor = false;             // BERNOULLI: probabilities from a dense tensor
    isa::DType p_t = isa::DType::F32;
};

struct RandPlan {
    uint32_t cores = 1;
    uint64_t chunk = 0;   // elements per VRNG (a multiple of 128)
    uint64_t cycles = 0;  // modeled cycles of a timing-only run
};

// Program arguments: 0 out address, 1 seed, 2 offset, 3 probability tensor address.
std::vector<uint8_t> build_random(const RandShape& s, const RandPlan& p);
// Cores and chunk for n elements (cores_limit: at most that many cores), priced.
RandPlan plan_random(const Pricer& pricer, const RandShape& s, uint32_t cores_limit);
std::string random_plan_name(const RandPlan& p);

}  // namespace spyre::ops
