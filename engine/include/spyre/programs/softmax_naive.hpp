// SPDX-License-Identifier: MIT
// The calibration case of the cycle model (Documentation/isa.md "Calibration"): softmax over the
// rows of a (rows, cols) fp16 tensor on ONE core with no scratchpad planning, i.e. every
// intermediate goes back to DDR between kernels, as IBM measured it without LX planning
// (32.51 us for (512, 1024), torch-spyre docs/source/compiler/scratchpad_planning.md).
//
// Four kernels, one launch each, as Inductor decomposes softmax with pointwise ops fused into
// their consumers: M = rowmax(X); E = exp(X - M); S = rowsum(E); O = E / S. Each kernel streams
// row tiles through two LX buffers (the load of the next tile overlaps the compute of this one,
// as the vendor's backend double-buffers). fp16 data and statistics.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "spyre/program_builder.hpp"

namespace spyre::programs {

struct SoftmaxNaive {
    // Device addresses (the caller places the tensors; all 128-byte aligned).
    uint64_t x, m, e, s, o;
    uint64_t rows, cols, tile_rows;
    std::vector<std::vector<uint8_t>> kernels;  // launch each, in order, on one core
};

inline SoftmaxNaive build_softmax_naive(uint64_t rows, uint64_t cols, uint64_t base = 0,
                                        uint64_t tile_rows = 64) {
    using isa::DType;
    if (rows % (2 * tile_rows) || (cols * 2) % 128 || tile_rows * 2 % 128)
        throw std::invalid_argument(
            "softmax_naive: rows must be a multiple of two tiles, rows "
            "and tile statistics of whole sticks");
    SoftmaxNaive p{};
    const uint64_t row_b = cols * 2, tile_b = tile_rows * row_b, stat_b = tile_rows * 2;
    const uint64_t tensor = rows * row_b, stats = rows * 2;
    p.rows = rows, p.cols = cols, p.tile_rows = tile_rows;
    p.x = base, p.e = base + tensor, p.o = base + 2 * tensor;
    p.m = base + 3 * tensor, p.s = base + 3 * tensor + stats;
    const uint64_t tiles = rows / tile_rows;
    // LX: two tile buffers, two output buffers, two statistics buffers
    const uint64_t in_buf[2] = {0, tile_b};
    const uint64_t out_buf[2] = {2 * tile_b, 3 * tile_b};
    const uint64_t st_buf[2] = {4 * tile_b, 4 * tile_b + stat_b};

    // kernel(kind): 0 rowmax, 1 exp(x - m), 2 rowsum, 3 divide
    for (int kind = 0; kind < 4; ++kind) {
        ProgramBuilder b;
        // r20..: vector descriptors; r10 tile counter; r11/r12 DDR cursors
        b.set_regs(20, {static_cast<int64_t>(tile_rows), static_cast<int64_t>(cols),
                        static_cast<int64_t>(row_b), static_cast<int64_t>(row_b),
                        2});  // rows, cols, dst stride, src1 stride, src2 (column) stride
        b.set_regs(26, {static_cast<int64_t>(tile_rows), static_cast<int64_t>(cols),
                        static_cast<int64_t>(row_b)});  // VRED: rows, cols, src stride
        const uint64_t src = kind == 0 || kind == 1 ? p.x : p.e;
        const uint64_t stat_src = kind == 1 ? p.m : p.s;
        const uint64_t stat_dst = kind == 0 ? p.m : p.s;
        const uint64_t dst = kind == 1 ? p.e : p.o;
        b.li(11, static_cast<int64_t>(src));
        b.li(12, static_cast<int64_t>(kind == 0 || kind == 2 ? stat_dst : stat_src));
        b.li(13, static_cast<int64_t>(dst));
        b.li(14, static_cast<int64_t>(tile_b));
        b.li(15, static_cast<int64_t>(stat_b));
        b.loopi(static_cast<int64_t>(tiles / 2));
        for (int half = 0; half < 2; ++half) {
            b.li(3, static_cast<int64_t>(in_buf[half]));
            b.li(4, static_cast<int64_t>(out_buf[half]));
            b.li(5, static_cast<int64_t>(st_buf[half]));
            b.load(3, 11, 14);
            if (kind == 0 || kind == 2) {
                b.vred(kind == 0 ? isa::Red::MAX : isa::Red::SUM, 0, DType::F16, DType::F16, 5, 3,
                       26);
                b.store(5, 12, 15);
            } else {
                b.load(5, 12, 15);
                if (kind == 1) {
                    b.vbin(isa::VBin::SUB, isa::Bcast::COL, DType::F16, DType::F16, 4, 3, 5, 20);
                    b.vun(isa::VUn::EXP, DType::F16, DType::F16, 4, 4, 20);
                } else {
                    b.vbin(isa::VBin::DIV, isa::Bcast::COL, DType::F16, DType::F16, 4, 3, 5, 20);
                }
                b.store(4, 13, 14);
                b.add(13, 13, 14);
            }
            b.add(11, 11, 14);
            b.add(12, 12, 15);
        }
        b.endloop();
        b.halt();
        p.kernels.push_back(b.finish());
    }
    return p;
}

}  // namespace spyre::programs
