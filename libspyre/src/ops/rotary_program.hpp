// SPDX-License-Identifier: MIT
// Rotary position embedding on the cores, in the rotate-half convention (GPT-NeoX, Llama,
// Granite): out = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] for the two halves
// of each head row, computed in fp32 and rounded once.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

// x and out [B, H, L, D] with byte strides (batch, head, position) and contiguous rows of D
// elements (D even, D x element size a multiple of 128 bytes); cos and sin [B, L, D] with byte
// strides (batch, position), batch stride 0 when shared. Every stride a multiple of 128 bytes.
struct RotaryShape {
    uint64_t B = 1, H = 1, L = 1, D = 128;
    isa::DType t = isa::DType::F16;                     // x and out
    isa::DType ct = isa::DType::F16;                    // cos and sin
    uint64_t x_st[3] = {}, o_st[3] = {}, c_st[2] = {};  // 0 = dense
    RotaryShape resolved() const;
};

struct RotaryPlan {
    uint64_t bl = 1;  // positions per work unit
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// Launch arguments: 0 = x, 1 = cos, 2 = sin, 3 = out. out may be x (in place).
std::vector<uint8_t> build_rotary(const RotaryShape& s, const RotaryPlan& p);
RotaryPlan plan_rotary(const Pricer& pricer, const RotaryShape& s, uint32_t max_cores);

}  // namespace spyre::ops
