// SPDX-License-Identifier: MIT
// Small helpers shared by the engine's translation units.
#pragma once

#include <cstdint>

#include "spyre/engine.h"
#include "spyre/isa.hpp"

namespace spyre::eng {

using isa::DType;
using isa::Instr;
using isa::Op;
using u128 = unsigned __int128;

constexpr uint32_t kS = isa::kStickBytes;

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
inline uint64_t round_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }

}  // namespace spyre::eng
