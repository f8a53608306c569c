// SPDX-License-Identifier: MIT
// spyre_op_random's program: each core takes an even share of the n elements in units of 128
// (so every chunk's output starts on a stick), and walks it in chunks, alternating between two
// LX regions so the store of one chunk overlaps the VRNG of the next. Element k of the output
// is stream element k (VRNG base = the chunk's first element index).
#include "ops/random_program.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "ops/chunk_loop.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using chunk_loop::rE, chunk_loop::rN, chunk_loop::rPar, chunk_loop::rPos;
using isa::DType;

constexpr uint64_t kUnit = 128;  // elements per unit: every chunk starts on a stick (1-byte types)
constexpr uint64_t kMaxChunk = 16384;  // elements per VRNG: 3 x 64 KiB per region at most
constexpr uint64_t kStick = 128;

uint64_t up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// LX layout of one region: the output chunk, the fp32 uniforms and the probabilities
// (BERNOULLI only).
struct Layout {
    uint64_t out = 0, u = 0, p = 0, region = 0;
};

Layout layout(const RandShape& s, uint64_t chunk) {
    Layout l;
    l.out = 0;
    uint64_t at = up(chunk * isa::dtype_size(s.out), kStick);
    if (s.dist == RandDist::BERNOULLI) {
        l.u = at, at += up(chunk * 4, kStick);
        if (s.p_tensor) l.p = at, at += up(chunk * isa::dtype_size(s.p_t), kStick);
    }
    l.region = at;
    return l;
}

void dma(ProgramBuilder& b, bool load, uint8_t lx, uint8_t ddr, uint8_t len) {
    // the span follows the transfer (a tensor may lie anywhere in a large buffer)
    b.alu(isa::Alu::AND, 31, ddr, 0, -static_cast<int64_t>(kStick));
    b.span(31);
    if (load)
        b.load(lx, ddr, len);
    else
        b.store(lx, ddr, len);
}

}  // namespace

std::vector<uint8_t> build_random(const RandShape& s, const RandPlan& p) {
    const uint64_t E = p.chunk, U = (s.n + kUnit - 1) / kUnit;
    const Layout l = layout(s, E);
    ProgramBuilder b;
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2), b.arg(6, 3);
    chunk_loop::emit_core_range(b, s.n, kUnit, U, p.cores, E);
    b.loop(rN);
    {
        // desc r20..r26: 1 row of rE elements, stride 0, seed, offset, base = rPos, row_step 0
        b.li(20, 1), b.add(21, rE, 0), b.li(22, 0), b.add(23, 4, 0), b.add(24, 5, 0);
        b.add(25, rPos, 0), b.li(26, 0);
        b.addi(12, rPar, static_cast<int64_t>(l.out));
        switch (s.dist) {
            case RandDist::UNIFORM:
                b.vrng(isa::Rng::UNIFORM, s.out, 12, 20, s.scale, s.shift);
                break;
            case RandDist::NORMAL:
                b.vrng(isa::Rng::NORMAL, s.out, 12, 20, s.scale, s.shift);
                break;
            case RandDist::BITS:
                b.vrng(isa::Rng::BITS, DType::I32, 12, 20);
                break;
            case RandDist::BERNOULLI: {
                b.addi(13, rPar, static_cast<int64_t>(l.u));
                b.vrng(isa::Rng::UNIFORM, DType::F32, 13, 20);
                // desc r20..r24 for VBIN: 1 row of rE, strides 0
                b.li(22, 0), b.li(23, 0), b.li(24, 0);
                if (s.p_tensor) {
                    b.addi(14, rPar, static_cast<int64_t>(l.p));
                    b.muli(15, rPos, isa::dtype_size(s.p_t)), b.add(15, 15, 6);
                    b.muli(16, rE, isa::dtype_size(s.p_t));
                    dma(b, true, 14, 15, 16);
                    b.vbin2(isa::VBin::LT, isa::Bcast::NONE, s.out, DType::F32, s.p_t, 12, 13, 14,
                            20);
                } else {
                    b.vbin(isa::VBin::LT, isa::Bcast::IMM, s.out, DType::F32, 12, 13, 0, 20, s.p);
                }
                break;
            }
        }
        const uint64_t oes = isa::dtype_size(s.out);
        b.muli(13, rPos, oes), b.add(13, 13, 3);
        b.muli(14, rE, oes);
        dma(b, false, 12, 13, 14);
        chunk_loop::emit_advance(b, E, l.region);
    }
    b.endloop();
    b.halt();
    return b.finish();
}

RandPlan plan_random(const Pricer& pricer, const RandShape& s, uint32_t cores_limit) {
    if (s.n == 0) throw std::invalid_argument("random: no elements");
    const uint64_t U = (s.n + kUnit - 1) / kUnit;
    RandPlan p;
    p.cores = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint32_t>(cores_limit, 1), U));
    p.chunk = std::min(kMaxChunk, (U + p.cores - 1) / p.cores * kUnit);
    // price it: output (and probabilities) at disjoint stick-aligned addresses
    const uint64_t out_bytes = up(s.n * isa::dtype_size(s.out), kStick);
    const uint64_t p_bytes = s.p_tensor ? up(s.n * isa::dtype_size(s.p_t), kStick) : 0;
    const auto r = pricer.price(build_random(s, p), p.cores, {0, 1, 0, out_bytes},
                                out_bytes + p_bytes + kStick);
    p.cycles = r.total_cycles;
    return p;
}

std::string random_plan_name(const RandPlan& p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%u cores, chunk %llu", p.cores,
                  static_cast<unsigned long long>(p.chunk));
    return buf;
}

}  // namespace spyre::ops
