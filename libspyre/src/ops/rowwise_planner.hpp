// SPDX-License-Identifier: MIT
// Plans of the row-wise ops (rowwise_program.hpp): enumerates the core split, block sizes,
// buffering and where the row sums run, prices every candidate exactly on the engine's cycle
// model (a timing-only run of the very program) and returns the fastest.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "ops/rowwise_program.hpp"

namespace spyre::ops {

// Every plan for at most max_cores cores that fits LX: block plans if a row unit fits,
// else long-row plans.
std::vector<RowwisePlan> rowwise_candidates(RowwiseOp op, const RowwiseShape& s, uint32_t max_cores,
                                            uint64_t lx_budget);

// Exact cycles and statistics of a plan (naive: the launches added up). Throws
// std::runtime_error if the program faults.
RowwisePlan price_rowwise(const Pricer& pricer, const RowwiseShape& s, RowwisePlan p);

// The fastest candidate. Throws std::invalid_argument if the op/shape is not supported.
RowwisePlan plan_rowwise(const Pricer& pricer, RowwiseOp op, const RowwiseShape& s,
                         uint32_t max_cores);
// The fastest naive plan (same row split rules, intermediates through DDR). With `like`, the
// row sums run where like's do, so the result is bit-identical to like's block plan.
RowwisePlan plan_rowwise_naive(const Pricer& pricer, RowwiseOp op, const RowwiseShape& s,
                               uint32_t max_cores, const RowwisePlan* like = nullptr);

// Per-op entry points (launch arguments in rowwise_program.hpp).
inline RowwisePlan plan_softmax(const Pricer& pr, const RowwiseShape& s, uint32_t max_cores) {
    return plan_rowwise(pr, RowwiseOp::SOFTMAX, s, max_cores);  // s.log: log_softmax
}
inline RowwisePlan plan_layer_norm(const Pricer& pr, const RowwiseShape& s, uint32_t max_cores) {
    return plan_rowwise(pr, RowwiseOp::LAYER_NORM, s, max_cores);
}
inline RowwisePlan plan_rms_norm(const Pricer& pr, const RowwiseShape& s, uint32_t max_cores) {
    return plan_rowwise(pr, RowwiseOp::RMS_NORM, s, max_cores);
}
// op: SUM, MEAN, MAX, MIN or ARGMAX
inline RowwisePlan plan_reduction(const Pricer& pr, RowwiseOp op, const RowwiseShape& s,
                                  uint32_t max_cores) {
    return plan_rowwise(pr, op, s, max_cores);
}
inline std::vector<uint8_t> build_softmax(const RowwiseShape& s, const RowwisePlan& p) {
    return build_rowwise(s, p);
}
inline std::vector<uint8_t> build_layer_norm(const RowwiseShape& s, const RowwisePlan& p) {
    return build_rowwise(s, p);
}
inline std::vector<uint8_t> build_rms_norm(const RowwiseShape& s, const RowwisePlan& p) {
    return build_rowwise(s, p);
}
inline std::vector<uint8_t> build_reduction(const RowwiseShape& s, const RowwisePlan& p) {
    return build_rowwise(s, p);
}

// DDR roofline of the op: input + output (+ weight and bias) bytes at the DDR bandwidth.
uint64_t rowwise_roofline_cycles(const spyre_engine_config& cfg, RowwiseOp op,
                                 const RowwiseShape& s);

}  // namespace spyre::ops
