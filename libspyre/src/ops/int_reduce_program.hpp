// SPDX-License-Identifier: MIT
// Exact integer reductions along the last dim (spyre_op_reduce SUM / MAX / MIN on int8, int32,
// int64, uint8): VRED's integer path into an int64 accumulator per row, VINT to combine column
// chunks and to convert the result (Documentation/ops-rowwise.md "Integer reductions").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/api_common.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

// What the program reduces: x dense [rows, cols] of type t (any start alignment of the rows),
// out dense [rows] of type out (starting on a stick); f SUM, MAX or MIN.
struct IntReduceShape {
    isa::Red f = isa::Red::SUM;
    isa::DType t = isa::DType::I64, out = isa::DType::I64;
    uint64_t rows = 0, cols = 0;
};

// The SPMD program (args: 0 = x, 1 = out) and its core count. Every core reduces a run of
// whole output sticks' rows; each row streams through LX in chunks of up to `chunk` elements.
std::vector<uint8_t> build_int_reduce(const IntReduceShape& s, uint32_t cores, uint64_t chunk);

// out[r] = reduce(x[r, :]) queued on `stream`: the plan entry that ran.
std::shared_ptr<const PlanEntry> int_reduce(spyre_stream_t stream, const IntReduceShape& s,
                                            const Tensor& x, const Tensor& o);

}  // namespace spyre::ops
