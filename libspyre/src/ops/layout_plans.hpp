// SPDX-License-Identifier: MIT
// Cached plans of the layout programs for the other op families: zero-padding an operand into
// stick rows and dropping the padding of a result (ops/layout_program.hpp), on one card.
#pragma once

#include <memory>

#include "ops/api_common.hpp"
#include "ops/layout_program.hpp"

namespace spyre::ops {

// The pad program for s on card c; SPYRE_ERROR_NOT_SUPPORTED (Error) if it cannot take s.
// Launch arguments: source address, destination address.
std::shared_ptr<const PlanEntry> pad_plan(const Card& c, const PadShape& s);
// The unpad program for s on card c, likewise (destination dense and 128-byte aligned).
std::shared_ptr<const PlanEntry> unpad_plan(const Card& c, const UnpadShape& s);

}  // namespace spyre::ops
