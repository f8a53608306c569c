// SPDX-License-Identifier: MIT
// arange on the cores: out[i] = start + i * step for integer start and step (launch
// arguments, so one program serves every start). Each core writes
// chunks of whole sticks: VIOTA computes the affine values exactly in 64 bits; int64 outputs
// take an int32 iota widened and scaled by VINT (VIOTA has no int64 destination).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

struct ArangeShape {
    uint64_t n = 0;
    isa::DType t = isa::DType::I64;  // F32, F16, BF16, I32 or I64
    uint64_t es = 8;
};

struct ArangePlan {
    uint64_t chunk = 0;  // elements per chunk (whole sticks for every type)
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// Launch arguments: 0 = out (dense, starting on a stick), 1 = start, 2 = step (int64).
std::vector<uint8_t> build_arange(const ArangeShape& s, const ArangePlan& p);
ArangePlan plan_arange(const Pricer& pricer, const ArangeShape& s, uint32_t max_cores);

}  // namespace spyre::ops
