// SPDX-License-Identifier: MIT
// SPMD matmul program for the Spyre engine, written with spyre::ProgramBuilder. Shared by the
// engine's tests and benchmark, libspyre's op library and guest tests.
//
//   C[M][N] = A[M][K] x B[K][N], all row-major and contiguous in device memory.
//   in = F16 / BF16: A, B and C of that type (fp32 accumulation, rounded once at the end);
//   in = F32: A, B, C fp32; in = I8: A, B int8, C int32 (wrapping accumulation).
//   Launch arguments: 0 = A, 1 = B, 2 = C (device addresses, 128-byte aligned).
//
// The cores form a grid of gm x gn output tiles (tm x tn each, gm = cores / gn). A core computes
// its tile in sub-tiles of sm x sn; each sub-tile streams K in chunks of kc: per chunk it loads
// sm x kc of A and kc x sn of B (double buffered: the next chunk loads while the matrix unit
// works) and runs one MM that accumulates into an fp32 (int32) sub-tile in LX; then the sub-tile
// is converted to the output type and stored. K need not fit in LX.
// Planning (plan_matmul) keeps everything within 80% of lx_bytes (the 20% reserve of the real
// card) and minimises the bytes each core loads from DDR; ties prefer double buffering, larger
// K chunks and the larger gn.
// Requirements (std::invalid_argument otherwise): M divisible by some gm, rows of A and tile rows
// of B/C multiples of 128 bytes (K x es, and a 64-element multiple of N for 16-bit types, 32 for
// fp32, 128 for int8).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "spyre/program_builder.hpp"

namespace spyre::programs {

struct MatmulGrid {
    uint64_t gm, gn;  // cores along M and N
    uint64_t tm, tn;  // tile rows and columns per core
    uint64_t sm, sn;  // sub-tile computed at a time (divide tm, tn)
    uint64_t kc;      // K elements per chunk (divides K)
    bool double_buffered;
    uint64_t lx_bytes_used;
    uint64_t ddr_bytes_per_core;  // A and B bytes each core loads
};

// Output type of build_matmul_program for an input type.
inline isa::DType matmul_out_type(isa::DType in) {
    return in == isa::DType::I8 ? isa::DType::I32 : in;
}

// LX usable by a program: 80% of the scratchpad, in whole sticks.
inline uint64_t matmul_lx_budget(uint64_t lx_bytes) { return lx_bytes * 4 / 5 / 128 * 128; }

namespace detail {

inline uint64_t up128(uint64_t x) { return (x + 127) / 128 * 128; }

struct MmLayout {
    uint64_t a_bytes, b_bytes, buf, c, out, total;  // LX offsets/sizes
};

// LX layout: nb buffers of {A chunk, B chunk}, the fp32 sub-tile, the converted sub-tile.
inline MmLayout mm_layout(uint64_t sm, uint64_t sn, uint64_t kc, uint64_t es, uint64_t oes,
                          bool convert, uint64_t nb) {
    MmLayout l{};
    l.a_bytes = up128(sm * kc * es);
    l.b_bytes = up128(kc * sn * es);
    l.buf = l.a_bytes + l.b_bytes;
    l.c = nb * l.buf;
    l.out = l.c + up128(sm * sn * 4);
    l.total = l.out + (convert ? up128(sm * sn * oes) : 0);
    return l;
}

}  // namespace detail

// Picks the core grid, sub-tiles and K chunk (see above). Throws std::invalid_argument if no
// plan exists.
inline MatmulGrid plan_matmul(uint64_t M, uint64_t N, uint64_t K, uint64_t cores,
                              isa::DType in = isa::DType::F16, uint64_t lx_bytes = 2u << 20) {
    const uint64_t es = isa::dtype_size(in);
    const isa::DType out = matmul_out_type(in);
    const uint64_t oes = isa::dtype_size(out);
    const bool convert = out != isa::DType::F32 && out != isa::DType::I32;
    if (es == 0 || in == isa::DType::I32) throw std::invalid_argument("matmul input type");
    if (cores == 0 || M == 0 || N == 0 || K == 0) throw std::invalid_argument("empty matmul");
    const uint64_t budget = matmul_lx_budget(lx_bytes);
    const uint64_t col_unit = 128 / std::min(es, oes);  // columns per stick of B and C
    const uint64_t k_unit = 128 / es;                   // K elements per stick of A
    if (K % k_unit)
        throw std::invalid_argument("matmul: a row of A is not a multiple of 128 bytes");
    MatmulGrid best{};
    bool found = false;
    auto better = [&](const MatmulGrid& g) {
        if (!found) return true;
        if (g.ddr_bytes_per_core != best.ddr_bytes_per_core)
            return g.ddr_bytes_per_core < best.ddr_bytes_per_core;
        if (g.double_buffered != best.double_buffered) return g.double_buffered;
        if (g.kc != best.kc) return g.kc > best.kc;
        return g.gn > best.gn;
    };
    uint64_t gmax = 1;
    while (gmax * 2 <= cores && N % (gmax * 2 * col_unit) == 0) gmax *= 2;
    for (uint64_t gn = gmax; gn >= 1; gn /= 2) {
        const uint64_t gm = cores / gn;
        if (gm == 0 || M % gm || N % gn || (N / gn) % col_unit) continue;
        const uint64_t tm = M / gm, tn = N / gn;
        for (uint64_t sm = 1; sm <= std::min<uint64_t>(tm, isa::kMaxMatDim); ++sm) {
            if (tm % sm) continue;
            for (uint64_t sn = col_unit; sn <= std::min<uint64_t>(tn, isa::kMaxMatDim);
                 sn += col_unit) {
                if (tn % sn) continue;
                // the largest K chunk that fits, double buffered when there are several steps
                for (uint64_t nb : {2, 1}) {
                    uint64_t kc = 0;
                    for (uint64_t c = std::min<uint64_t>(K, isa::kMaxMatDim) / k_unit * k_unit;
                         c >= k_unit; c -= k_unit) {
                        if (K % c) continue;
                        if (detail::mm_layout(sm, sn, c, es, oes, convert, nb).total <= budget) {
                            kc = c;
                            break;
                        }
                    }
                    if (!kc) continue;
                    const uint64_t steps = (tm / sm) * (tn / sn) * (K / kc);
                    if (nb == 2 && steps == 1) continue;  // nothing to overlap
                    const MatmulGrid g{gm,
                                       gn,
                                       tm,
                                       tn,
                                       sm,
                                       sn,
                                       kc,
                                       nb == 2,
                                       detail::mm_layout(sm, sn, kc, es, oes, convert, nb).total,
                                       K * es * (tm * tn / sn + tm * tn / sm)};
                    if (better(g)) best = g, found = true;
                    break;
                }
            }
        }
    }
    if (found) return best;
    throw std::invalid_argument("matmul shape does not split into stick-aligned tiles");
}

inline std::vector<uint8_t> build_matmul_program(uint64_t M, uint64_t N, uint64_t K, uint64_t cores,
                                                 isa::DType in = isa::DType::F16,
                                                 uint64_t lx_bytes = 2u << 20) {
    using isa::DType;
    const MatmulGrid g = plan_matmul(M, N, K, cores, in, lx_bytes);
    const DType out = matmul_out_type(in);
    const bool convert = out != DType::F32 && out != DType::I32;
    const int64_t es = isa::dtype_size(in), oes = isa::dtype_size(out);
    const int64_t sm = g.sm, sn = g.sn, kc = g.kc, nk = K / g.kc;
    const detail::MmLayout l =
        detail::mm_layout(g.sm, g.sn, g.kc, es, oes, convert, g.double_buffered ? 2 : 1);
    const int64_t Kb = K * es, Nb = N * es, Nob = N * oes;
    ProgramBuilder b;
    // r3..r5 A, B, C; r7/r8 tile coordinates; r9/r13/r14 the core's A, B, C tile bases;
    // r15 chunk counter (buffer parity); r16/r17 sub-tile indices; r18/r19 A/B chunk addresses;
    // r10..r12 scratch; r22..r27 descriptors.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.li(6, g.gn);
    b.alu(isa::Alu::DIVU, 7, 1, 6);  // mi
    b.alu(isa::Alu::REMU, 8, 1, 6);  // ni
    b.muli(9, 7, g.tm * Kb);
    b.add(9, 9, 3);
    b.muli(13, 8, g.tn * es);
    b.add(13, 13, 4);
    b.muli(14, 7, g.tm * Nob);
    b.muli(10, 8, g.tn * oes);
    b.add(14, 14, 10);
    b.add(14, 14, 5);
    b.li(15, 0);
    // one K chunk: loads into buffer (r15 & 1), MM into the fp32 sub-tile
    auto chunk = [&](bool acc) {
        b.alu(isa::Alu::AND, 10, 15, 0, 1);
        b.muli(10, 10, g.double_buffered ? l.buf : 0);
        b.addi(11, 10, 0);          // A chunk
        b.addi(12, 10, l.a_bytes);  // B chunk
        b.li(10, kc * es);
        b.set_regs(22, {sm, Kb, kc * es, 1, 0, 0});
        b.load(11, 18, 10, 22);
        b.li(10, sn * es);
        b.set_regs(22, {kc, Nb, sn * es, 1, 0, 0});
        b.load(12, 19, 10, 22);
        b.li(10, l.c);
        b.set_regs(22, {sm, sn, kc, kc * es, sn * es, sn * 4});
        b.matmul(in, 10, 11, 12, 22, acc);
        b.addi(15, 15, 1);
    };
    b.loopi(g.tm / g.sm, 16);
    b.loopi(g.tn / g.sn, 17);
    b.muli(18, 16, sm * Kb);
    b.add(18, 18, 9);
    b.muli(19, 17, sn * es);
    b.add(19, 19, 13);
    chunk(false);
    if (nk > 1) {
        b.loopi(nk - 1);
        b.addi(18, 18, kc * es);
        b.addi(19, 19, kc * Nb);
        chunk(true);
        b.endloop();
    }
    // fp32 sub-tile -> output type, then to C rows si*sm.., columns sj*sn..
    int64_t src = l.c, row = sn * 4;
    if (convert) {
        b.li(10, l.out), b.li(11, l.c);
        b.set_regs(22, {sm, sn, sn * oes, sn * 4});
        b.vun(isa::VUn::COPY, out, DType::F32, 10, 11, 22);
        src = l.out, row = sn * oes;
    }
    b.muli(11, 16, sm * Nob);
    b.muli(12, 17, sn * oes);
    b.add(11, 11, 12);
    b.add(11, 11, 14);
    b.li(10, src), b.li(12, sn * oes);
    b.set_regs(22, {sm, Nob, row, 1, 0, 0});
    b.store(10, 11, 12, 22);
    b.endloop();
    b.endloop();
    b.halt();
    return b.finish();
}

}  // namespace spyre::programs
