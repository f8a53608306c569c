// SPDX-License-Identifier: MIT
#include "ops/rowwise_planner.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ops/sticks.hpp"

namespace spyre::ops {
namespace {

bool sums_rows(RowwiseOp op) {
    return op == RowwiseOp::SOFTMAX || op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
}
bool two_stage(RowwiseOp op) { return sums_rows(op); }  // ops with an output pass

uint32_t usable_cores(RowwiseOp op, const RowwiseShape& s, uint32_t max_cores, bool naive) {
    const uint64_t units =
        (s.rows + rowwise_row_unit(op, s, naive) - 1) / rowwise_row_unit(op, s, naive);
    return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(max_cores, units)));
}

// Blocks smaller than this are dominated by per-instruction latency; they are not priced
// unless nothing bigger fits.
constexpr uint64_t kMinBlockBytes = 16384;

// Block sizes worth pricing: the row unit times powers of two from kMinBlockBytes of input
// on, and a core's whole range.
std::vector<uint64_t> block_sizes(uint64_t unit, uint64_t core_rows, uint64_t row_bytes) {
    std::vector<uint64_t> v;
    uint64_t b = unit;
    while (b * 2 < core_rows && b * 2 * row_bytes <= kMinBlockBytes) b *= 2;
    for (; b < core_rows; b *= 2) v.push_back(b);
    v.push_back(core_rows);
    return v;
}

std::vector<RowwisePlan> block_candidates(RowwiseOp op, const RowwiseShape& s, uint32_t cores,
                                          uint64_t lx_budget, bool naive, int matrix) {
    std::vector<RowwisePlan> out;
    const uint64_t unit = rowwise_row_unit(op, s, naive);
    const uint64_t units = (s.rows + unit - 1) / unit;
    const uint64_t core_rows = std::min((units + cores - 1) / cores * unit, s.rows);
    struct Pipe {
        uint32_t slots, skew;
    };
    std::vector<Pipe> pipes = {{2, 0}};
    if (!naive && two_stage(op)) pipes.push_back({3, 1});
    const uint64_t rb = s.cols * isa::dtype_size(s.t);
    for (int single = 0; single < 2 && out.empty(); ++single) {
        // one buffer (no overlap) only when no double-buffered block fits
        if (single) {
            if (naive) break;
            pipes = {{1, 0}};
        }
        for (uint64_t bk :
             block_sizes(rowwise_block_unit(op, s, naive), core_rows, single ? 0 : rb))
            for (const Pipe& pp : pipes)
                for (int m = 0; m < 2; ++m) {
                    if (matrix >= 0 && m != matrix) continue;
                    if (m && !sums_rows(op)) continue;
                    if (auto f = fit_rowwise_block(op, s, cores, bk, pp.slots, pp.skew, m != 0,
                                                   lx_budget, naive))
                        out.push_back(*f);
                }
    }
    return out;
}

}  // namespace

std::vector<RowwisePlan> rowwise_candidates(RowwiseOp op, const RowwiseShape& s, uint32_t max_cores,
                                            uint64_t lx_budget) {
    check_rowwise(op, s);
    uint32_t cores = usable_cores(op, s, max_cores, false);
    std::vector<RowwisePlan> out = block_candidates(op, s, cores, lx_budget, false, -1);
    // long-row plans compete once a block holds only a row or two (their chunks pipeline
    // where a single-row block cannot overlap its load, compute and store)
    uint64_t most_rows = 0;
    for (const RowwisePlan& p : out) most_rows = std::max(most_rows, p.block_rows);
    if (most_rows > 2) return out;
    if (s.add_residual) {  // the long-row path has no residual stream
        if (out.empty())
            throw std::invalid_argument(
                "rowwise add_rms_norm: a row does not fit LX beside its residual (the rms_norm "
                "of rows this long runs as long rows, which add no residual)");
        return out;
    }
    // long rows: chunks of sticks, from the largest that fits down to 1/16 of it (the cores
    // split whole sticks of rows)
    const uint64_t lu = rowwise_row_unit(op, s, false, true);
    cores = static_cast<uint32_t>(std::max<uint64_t>(
        1, std::min<uint64_t>(std::min(max_cores, cores), (s.rows + lu - 1) / lu)));
    const uint64_t es = isa::dtype_size(s.t), per_stick = 128 / es;
    uint64_t best = 0;
    for (uint64_t cc = per_stick; cc <= s.cols + per_stick; cc *= 2)
        if (fit_rowwise_chunked(op, s, cores, cc, lx_budget)) best = cc;
    if (!best) {  // try the largest fitting chunk below the smallest power of two that failed
        for (uint64_t cc = per_stick; cc <= kRowwiseMaxCols; cc *= 2)
            if (fit_rowwise_chunked(op, s, cores, cc, lx_budget)) best = cc;
    }
    for (uint64_t cc = best; cc >= per_stick && cc * 16 >= best; cc /= 2)
        if (auto f = fit_rowwise_chunked(op, s, cores, cc, lx_budget)) out.push_back(*f);
    if (out.empty())
        throw std::invalid_argument(std::string("rowwise ") + rowwise_op_name(op, s.log) +
                                    ": the row's buffers do not fit LX (weight and bias of a "
                                    "long row stay in LX)");
    return out;
}

RowwisePlan price_rowwise(const Pricer& pricer, const RowwiseShape& s, RowwisePlan p) {
    const uint64_t in_b = up128(s.rows * s.cols * isa::dtype_size(s.t));
    const uint64_t out_b = up128(rowwise_output_bytes(p.op, s));
    const uint64_t w_b = up128(s.cols * 4), b_b = up128(s.cols * 4);
    const uint64_t out0 = in_b, w0 = out0 + out_b, b0 = w0 + w_b, scr0 = b0 + b_b;
    std::vector<std::vector<uint8_t>> images;
    uint64_t scratch = 0;
    if (p.naive) {
        RowwiseNaive n = build_rowwise_naive(s, p);
        images = std::move(n.kernels);
        scratch = n.scratch_bytes;
    } else {
        images.push_back(build_rowwise(s, p));
    }
    std::vector<uint64_t> args = {0, out0, w0, b0, scr0};
    uint64_t end = scr0 + up128(scratch);
    if (s.add_residual) {  // residual in, h out (kArgResidual, kArgOutResidual)
        args.push_back(end);
        args.push_back(end + in_b);
        end += 2 * in_b;
    }
    p.cycles = 0;
    p.kernel_cycles.clear();
    for (const auto& img : images) {
        try {
            p.stats = pricer.price(img, p.cores, args, end + 128);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("rowwise plan ") + plan_name(p) + ": " + e.what());
        }
        p.kernel_cycles.push_back(p.stats.total_cycles);
        p.cycles += p.stats.total_cycles;
    }
    return p;
}

RowwisePlan plan_rowwise(const Pricer& pricer, RowwiseOp op, const RowwiseShape& s,
                         uint32_t max_cores) {
    max_cores = std::min(max_cores, pricer.config().num_cores);
    RowwisePlan best;
    for (const RowwisePlan& c : rowwise_candidates(op, s, max_cores, pricer.lx_budget())) {
        RowwisePlan r;
        try {
            r = price_rowwise(pricer, s, c);
        } catch (const std::runtime_error&) {
            continue;  // e.g. beyond the engine's operation budget for one job
        }
        if (!best.cycles || r.cycles < best.cycles) best = r;
    }
    if (!best.cycles)
        throw std::invalid_argument(std::string("rowwise ") + rowwise_op_name(op, s.log) +
                                    ": no plan runs on this engine");
    return best;
}

RowwisePlan plan_rowwise_naive(const Pricer& pricer, RowwiseOp op, const RowwiseShape& s,
                               uint32_t max_cores, const RowwisePlan* like) {
    check_rowwise(op, s);
    max_cores = std::min(max_cores, pricer.config().num_cores);
    const uint32_t cores = usable_cores(op, s, max_cores, true);
    const int matrix = like ? (like->sum_on_matrix ? 1 : 0) : -1;
    RowwisePlan best;
    for (const RowwisePlan& c : block_candidates(op, s, cores, pricer.lx_budget(), true, matrix)) {
        RowwisePlan r;
        try {
            r = price_rowwise(pricer, s, c);
        } catch (const std::runtime_error&) {
            continue;
        }
        if (!best.cycles || r.cycles < best.cycles) best = r;
    }
    if (!best.cycles)
        throw std::invalid_argument(std::string("rowwise ") + rowwise_op_name(op, s.log) +
                                    ": no naive plan (the naive programs need a block of rows "
                                    "in LX)");
    return best;
}

uint64_t rowwise_roofline_cycles(const spyre_engine_config& cfg, RowwiseOp op,
                                 const RowwiseShape& s) {
    double bytes = double(s.rows) * double(s.cols) * isa::dtype_size(s.t) +
                   double(rowwise_output_bytes(op, s));
    if ((op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM) && s.has_weight)
        bytes += double(s.cols) * isa::dtype_size(s.weight_t);
    if (op == RowwiseOp::LAYER_NORM && s.has_bias)
        bytes += double(s.cols) * isa::dtype_size(s.bias_t);
    if (s.add_residual)  // the residual read and h written
        bytes += 2.0 * double(s.rows) * double(s.cols) * isa::dtype_size(s.t);
    return static_cast<uint64_t>(
        std::ceil(bytes * double(cfg.clock_hz) / double(cfg.ddr_bytes_per_s)));
}

}  // namespace spyre::ops
