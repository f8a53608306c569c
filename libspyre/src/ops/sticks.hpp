// SPDX-License-Identifier: MIT
// The stick: the 128-byte unit of every LX layout and aligned DDR access (hardware.md), shared by
// the op programs and the op library's C API.
#pragma once

#include <cstdint>

namespace spyre::ops {

inline constexpr uint64_t kStick = 128;

// x rounded up to whole sticks.
inline constexpr uint64_t up128(uint64_t x) { return (x + kStick - 1) / kStick * kStick; }

}  // namespace spyre::ops
