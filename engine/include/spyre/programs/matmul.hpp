// SPDX-License-Identifier: MIT
// SPMD matmul program for the Spyre engine, written with spyre::ProgramBuilder. Shared by the
// engine's tests and benchmark, libspyre's op library and guest tests.
//
//   C[M][N] = A[M][K] x B[K][N], all row-major and contiguous in device memory.
//   in = F16 / BF16: A, B of that type, C fp16 (fp32 accumulation, rounded once at the end);
//   in = F32: A, B, C fp32.
//   Launch arguments: 0 = A, 1 = B, 2 = C (device addresses, 128-byte aligned).
//
// The cores form a grid of gm x gn output tiles (gm = cores / gn). Each core loads its A rows
// (all of K) and its B columns in sticks, runs one MM, converts and stores its tile. gn is a power
// of two (<= cores) whose 64-column blocks divide N, chosen so the tile fits in LX with the least
// data loaded per core (ties: the largest gn).
// Requirements (std::invalid_argument otherwise): M divisible by gm, a tile row of B/C and a row
// of A a multiple of 128 bytes, and the tile fitting in lx_bytes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "spyre/program_builder.hpp"

namespace spyre::programs {

// The default card's usable scratchpad: 2 MiB less the 20% reserve, in whole sticks (what
// spyre_engine_lx_usable() returns for the default configuration).
inline constexpr uint64_t kUsableLx = (2u << 20) / 128 * 80 / 100 * 128;

struct MatmulGrid {
    uint64_t gm, gn;  // cores along M and N
    uint64_t tm, tn;  // tile rows and columns per core
    uint64_t lx_bytes_used;
};

// Picks the core grid (see above). Throws std::invalid_argument if no grid fits.
inline MatmulGrid plan_matmul(uint64_t M, uint64_t N, uint64_t K, uint64_t cores,
                              isa::DType in = isa::DType::F16, uint64_t lx_bytes = kUsableLx) {
    const uint64_t es = isa::dtype_size(in);
    const uint64_t oes = in == isa::DType::F32 ? 4 : 2;
    if (cores == 0 || M == 0 || N == 0 || K == 0) throw std::invalid_argument("empty matmul");
    uint64_t gmax = 1;
    while (gmax * 2 <= cores && N % (gmax * 2 * 64) == 0) gmax *= 2;
    MatmulGrid best{};
    uint64_t best_load = UINT64_MAX;
    for (uint64_t gn = gmax; gn >= 1; gn /= 2) {
        const uint64_t gm = cores / gn;
        if (gm == 0 || M % gm || N % gn) continue;
        const uint64_t tm = M / gm, tn = N / gn;
        if ((tn * es) % 128 || (tn * oes) % 128 || (K * es) % 128) continue;
        const uint64_t used = tm * K * es + K * tn * es + tm * tn * 4 + tm * tn * oes;
        const uint64_t load = (tm + tn) * K;  // elements each core loads
        if (used <= lx_bytes && load < best_load) best = {gm, gn, tm, tn, used}, best_load = load;
    }
    if (best_load != UINT64_MAX) return best;
    throw std::invalid_argument("matmul shape does not split into stick-aligned tiles fitting LX");
}

inline std::vector<uint8_t> build_matmul_program(uint64_t M, uint64_t N, uint64_t K, uint64_t cores,
                                                 isa::DType in = isa::DType::F16,
                                                 uint64_t lx_bytes = kUsableLx) {
    using isa::DType;
    const uint64_t es = isa::dtype_size(in);
    const DType out = in == DType::F32 ? DType::F32 : DType::F16;
    const uint64_t oes = isa::dtype_size(out);
    const MatmulGrid g = plan_matmul(M, N, K, cores, in, lx_bytes);
    const int64_t tm = g.tm, tn = g.tn;
    const int64_t arow = K * es, brow = tn * es, crow32 = tn * 4, crow = tn * oes;
    const int64_t lx_a = 0, lx_b = lx_a + tm * arow, lx_c = lx_b + K * brow,
                  lx_o = lx_c + tm * crow32;
    ProgramBuilder b;
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.li(6, g.gn);
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
    // C = A x B (fp32), then the output type
    b.li(12, lx_c), b.li(13, lx_a), b.li(14, lx_b);
    b.set_regs(20, {tm, tn, int64_t(K), arow, brow, crow32});
    b.matmul(in, 12, 13, 14, 20, false);
    b.li(15, lx_o);
    b.set_regs(20, {tm, tn, crow, crow32});
    b.vun(isa::VUn::COPY, out, DType::F32, 15, 12, 20);
    // store: rows mi*tm.., columns ni*tn..
    b.muli(9, 7, tm * int64_t(N * oes));
    b.muli(16, 8, crow);
    b.add(9, 9, 16);
    b.add(9, 9, 5);
    b.li(11, crow);
    b.set_regs(20, {tm, int64_t(N * oes), crow, 1, 0, 0});
    b.store(15, 9, 11, 20);
    b.halt();
    return b.finish();
}

}  // namespace spyre::programs
