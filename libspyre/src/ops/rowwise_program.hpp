// SPDX-License-Identifier: MIT
// The op library's row-wise programs: softmax, log_softmax, layer_norm, rms_norm and the
// reductions sum, mean, max, min and argmax, all along the last dimension of a dense row-major
// tensor viewed as [rows, cols]. Documentation/ops-rowwise.md describes the plans, the LX layout
// and the figures; rowwise_planner.hpp chooses a plan by pricing candidates on the cycle model.
//
// Launch arguments (device addresses, every tensor dense row-major and 128-byte aligned):
//   0 = input [rows, cols] of type t
//   1 = output: [rows, cols] of type t (softmax, log_softmax, layer_norm, rms_norm);
//       [rows] of type t (sum, mean, max, min) or int32 (argmax)
//   2 = weight [cols] (layer_norm, rms_norm; when has_weight), 3 = bias [cols] (layer_norm;
//       when has_bias)
//   4 = scratch (naive programs only: RowwiseNaive::scratch_bytes of device memory)
//   5 = residual [rows, cols] of type t, 6 = out_residual [rows, cols] of type t (rms_norm
//       with add_residual: h = input + residual is written to 6 and normalized into 1)
// Launch exactly plan.cores cores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spyre/engine.h"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class RowwiseOp : uint8_t {
    SOFTMAX,  // log_softmax is SOFTMAX with RowwiseShape::log
    LAYER_NORM,
    RMS_NORM,
    SUM,
    MEAN,
    MAX,
    MIN,
    ARGMAX,
};

const char* rowwise_op_name(RowwiseOp op, bool log = false);

// What a row-wise op computes; rows = product of the leading dims, cols = the last dim.
struct RowwiseShape {
    uint64_t rows = 0, cols = 0;
    isa::DType t = isa::DType::F16;  // F16, BF16 or F32; statistics are fp32 inside
    bool log = false;                // softmax: log_softmax
    // softmax: exp(x - max) stays fp32 through the row sum and the scale (one rounding, within
    // an ulp; about 1.3x the vector work on one core). Default: exp rounded to the input type.
    bool fp32_exp = false;
    float eps = 1e-5f;                      // layer_norm, rms_norm
    bool has_weight = false;                // layer_norm, rms_norm: y * weight
    isa::DType weight_t = isa::DType::F16;  // t or F32
    bool has_bias = false;                  // layer_norm: + bias
    isa::DType bias_t = isa::DType::F16;    // t or F32
    // rms_norm: normalize h = input + residual (rounded to t, as torch does) and write h too,
    // in the same pass (block plans only: rows that need the long-row path are refused)
    bool add_residual = false;
};

// Launch arguments of add_residual (see the top of this file).
inline constexpr int kArgResidual = 5, kArgOutResidual = 6;

// Largest supported row length: indices and element counts stay exact in fp32.
inline constexpr uint64_t kRowwiseMaxCols = uint64_t{1} << 23;

// How the rows are computed. Rows are split over `cores` in units of `row_unit` rows,
// contiguous per core: units of whole sticks of rows, or single rows where two cores that meet
// inside a stick share it over the ring (block plans of ops with [rows, cols] outputs).
//  - Block path (block_rows > 0): a core streams blocks of block_rows whole rows through
//    `slots` LX buffers (1: no overlap, 2: the next block loads while this one computes,
//    3 with skew 1: the statistics of block i+1 are computed before block i is finished, so
//    the matrix unit's row sums overlap the vector unit). A block may start inside a stick.
//  - Long-row path (block_rows == 0): one row at a time in chunks of chunk_cols columns, two
//    chunk buffers; the statistics of a row are combined from per-chunk partials, and the row
//    is read again for the output (softmax 2 passes, layer_norm 3, rms_norm 2; reductions 1).
struct RowwisePlan {
    RowwiseOp op = RowwiseOp::SOFTMAX;
    bool naive = false;  // every intermediate goes through DDR (one launch per step)
    uint32_t cores = 1;
    uint64_t row_unit = 1;
    uint64_t block_rows = 0;
    uint64_t chunk_cols = 0;
    uint32_t slots = 2;
    uint32_t skew = 0;
    bool sum_on_matrix = false;  // row sums as ones x E^T on the matrix unit (fp32 accumulate)
    uint64_t lx_bytes = 0;       // LX used per core
    uint64_t cycles = 0;         // modeled cycles of the launch(es), 0 = not priced
    std::vector<uint64_t> kernel_cycles;  // naive: each launch
    spyre_engine_result stats{};          // of the pricing run (naive: the last launch)
};

std::string plan_name(const RowwisePlan& p);

// Throws std::invalid_argument with the reason if the op/shape is not supported.
void check_rowwise(RowwiseOp op, const RowwiseShape& s);

// Row unit of the op's split (and of the naive program's statistics streams); long_rows: of
// the long-row path.
uint64_t rowwise_row_unit(RowwiseOp op, const RowwiseShape& s, bool naive, bool long_rows = false);
// Block sizes are multiples of this (or a core's whole range).
uint64_t rowwise_block_unit(RowwiseOp op, const RowwiseShape& s, bool naive);

// A block plan with these parameters if it fits into lx_budget, else nothing.
std::optional<RowwisePlan> fit_rowwise_block(RowwiseOp op, const RowwiseShape& s, uint32_t cores,
                                             uint64_t block_rows, uint32_t slots, uint32_t skew,
                                             bool sum_on_matrix, uint64_t lx_budget,
                                             bool naive = false);
// A long-row plan with chunks of chunk_cols columns if it fits, else nothing.
std::optional<RowwisePlan> fit_rowwise_chunked(RowwiseOp op, const RowwiseShape& s, uint32_t cores,
                                               uint64_t chunk_cols, uint64_t lx_budget);

// The SPMD program of a (non-naive) plan.
std::vector<uint8_t> build_rowwise(const RowwiseShape& s, const RowwisePlan& p);

// The naive program: one kernel per step, launched in order on plan.cores cores with the same
// arguments; intermediates live in the scratch buffer (argument 4).
struct RowwiseNaive {
    std::vector<std::vector<uint8_t>> kernels;
    uint64_t scratch_bytes = 0;
};
RowwiseNaive build_rowwise_naive(const RowwiseShape& s, const RowwisePlan& p);

// Output bytes of the op (dense): rows x cols x es, or rows x (es | 4 for argmax).
uint64_t rowwise_output_bytes(RowwiseOp op, const RowwiseShape& s);

}  // namespace spyre::ops
