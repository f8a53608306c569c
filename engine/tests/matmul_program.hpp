// SPDX-License-Identifier: MIT
// Builder-written SPMD fp16 matmul used by the end-to-end test and the benchmark:
// C[M][N] (fp16) = A[M][K] (fp16) x B[K][N] (fp16), all row-major in device memory.
// args: 0 = A, 1 = B, 2 = C. Cores form a grid of (cores/gn) x gn output tiles; each core loads
// its A rows and B columns in sticks, runs one MM tile per 64-column block and stores its tile.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "spyre/program_builder.hpp"

namespace spyre::test {

inline std::vector<uint8_t> build_matmul_program(uint64_t M, uint64_t N, uint64_t K, uint64_t cores,
                                                 isa::DType in = isa::DType::F16) {
    using isa::DType;
    const uint64_t es = isa::dtype_size(in);
    // column grid: as many 64-wide column blocks as possible, at most `cores`
    uint64_t gn = 1;
    while (gn * 2 <= cores && N % (gn * 2 * 64) == 0) gn *= 2;
    const uint64_t gm = cores / gn;
    if (M % gm || N % gn || (N / gn) * es % 128 || K * es % 128)
        throw std::invalid_argument("shape does not split evenly into sticks");
    const int64_t tm = M / gm, tn = N / gn;
    const int64_t arow = K * es, brow = tn * es, crow32 = tn * 4, crow = tn * es;
    const int64_t lx_a = 0, lx_b = lx_a + tm * arow, lx_c = lx_b + K * brow,
                  lx_o = lx_c + tm * crow32;
    if (lx_o + tm * crow > (2 << 20)) throw std::invalid_argument("tile does not fit in LX");
    ProgramBuilder b;
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.li(6, gn);
    b.alu(isa::Alu::DIVU, 7, 1, 6);  // mi
    b.alu(isa::Alu::REMU, 8, 1, 6);  // ni
    // A tile: rows mi*tm .. +tm, all of K
    b.muli(9, 7, tm * arow);
    b.add(9, 9, 3);
    b.li(10, lx_a), b.li(11, arow);
    b.set_regs(20, {tm, arow, arow, 1, 0, 0});
    b.load(10, 9, 11, 20);
    // B tile: all K rows, columns ni*tn .. +tn
    b.muli(9, 8, brow);
    b.add(9, 9, 4);
    b.li(10, lx_b), b.li(11, brow);
    b.set_regs(20, {int64_t(K), int64_t(N * es), brow, 1, 0, 0});
    b.load(10, 9, 11, 20);
    // C = A x B (fp32), then fp16
    b.li(12, lx_c), b.li(13, lx_a), b.li(14, lx_b);
    b.set_regs(20, {tm, tn, int64_t(K), arow, brow, crow32});
    b.matmul(in, 12, 13, 14, 20, false);
    b.li(15, lx_o);
    b.set_regs(20, {tm, tn, crow, crow32});
    b.vun(isa::VUn::COPY, in == DType::F32 ? DType::F32 : DType::F16, DType::F32, 15, 12, 20);
    // store: rows mi*tm.., columns ni*tn..
    b.muli(9, 7, tm * int64_t(N * es));
    b.muli(16, 8, crow);
    b.add(9, 9, 16);
    b.add(9, 9, 5);
    b.li(11, crow);
    b.set_regs(20, {tm, int64_t(N * es), crow, 1, 0, 0});
    b.store(15, 9, 11, 20);
    b.halt();
    return b.finish();
}

}  // namespace spyre::test
