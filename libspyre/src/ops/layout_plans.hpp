// SPDX-License-Identifier: MIT
// Cached plans of the layout programs for the other op families: zero-padding an operand into
// stick rows, dropping the padding of a result and making a strided view dense
// (ops/layout_program.hpp), on one card.
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
// Queues the copy program dst = src (any strided view of src's shape; dst dense, 128-byte
// aligned, same element size) on card c; returns its plan. Copies with bytes moved unchanged.
std::shared_ptr<const PlanEntry> queue_copy(const Card& c, spyre_stream_t stream, const Tensor& src,
                                            const Tensor& dst);

}  // namespace spyre::ops
