// SPDX-License-Identifier: MIT
// softmax, log_softmax and the reductions sum, mean, max, min along a dim that is not the last
// one, in one pass over DDR: a dense [A, R, I] tensor (R the reduced dim, I the product of the
// dims after it, I elements a whole number of sticks) is cut into [R, ic] tiles that the vector
// unit reduces across rows (VRED axis 1) in LX. Documentation/ops-rowwise.md "Any dim".
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "ops/rowwise_program.hpp"

namespace spyre::ops {

// Launch arguments: 0 = x [A, R, I] (dense, 128-byte aligned), 1 = out: [A, R, I] of x's type
// (softmax) or [A, I] (reductions), dense and 128-byte aligned.
struct ColumnShape {
    RowwiseOp op = RowwiseOp::SOFTMAX;  // SOFTMAX (log: log_softmax), SUM, MEAN, MAX, MIN
    bool log = false;
    uint64_t A = 1, R = 1, I = 0;
    isa::DType t = isa::DType::F16;
};

struct ColumnPlan {
    uint64_t ic = 0;     // columns of a tile (a whole number of sticks, divides I)
    uint32_t cores = 1;  // tiles dealt round robin
    uint64_t cycles = 0;
};

// Throws std::invalid_argument if the shape is not one the program takes (op, I not whole
// sticks) or no tile fits LX.
ColumnPlan plan_column(const Pricer& pricer, const ColumnShape& s, uint32_t max_cores);
std::vector<uint8_t> build_column(const ColumnShape& s, const ColumnPlan& p);
uint64_t column_lx_bytes(const ColumnShape& s, uint64_t ic);

}  // namespace spyre::ops
