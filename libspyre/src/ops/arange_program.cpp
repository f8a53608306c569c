// SPDX-License-Identifier: MIT
#include "ops/arange_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {

std::vector<uint8_t> build_arange(const ArangeShape& s, const ArangePlan& p) {
    using isa::Alu;
    using isa::DType;
    const int64_t chunk = int64_t(p.chunk), es = int64_t(s.es);
    const int64_t nch = int64_t((s.n + p.chunk - 1) / p.chunk);
    const int64_t lx_iota = 0, lx_out = int64_t(up128(p.chunk * 4));
    ProgramBuilder b;
    // r3 out; r7 this core's chunk count; r16 its loop index; r17 chunk; r18 first element;
    // r19 count; r9 scratch; r20.. VIOTA descriptor (7), r27.. VINT descriptor (5).
    b.arg(3, 0), b.arg(12, 1), b.arg(13, 2);  // out, start, step
    const int64_t lx_const = lx_out + int64_t(up128(p.chunk * 8));
    if (s.t == DType::I64) {  // step and start as int64 SCALAR operands of VINT
        b.li(9, lx_const);
        b.lxst(9, 13, 0);
        b.lxst(9, 12, 8);
    }
    b.li(9, nch);
    b.sub(7, 9, 1);
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 7, done);
    b.addi(7, 7, int64_t(p.cores) - 1);
    b.alu(Alu::DIVU, 7, 7, 0, int64_t(p.cores));  // chunks c = core + k * cores
    b.loop(7, 0, 16);
    {
        b.muli(17, 16, int64_t(p.cores));
        b.add(17, 17, 1);
        b.muli(18, 17, chunk);
        b.li(9, int64_t(s.n));
        b.sub(19, 9, 18);
        b.li(9, chunk);
        b.alu(Alu::MIN, 19, 19, 9);
        // VIOTA: rows 1, cols count, strides 0, alpha 0, beta, gamma
        b.mov(21, 19);
        b.li(20, 1), b.li(22, 0), b.li(23, 0), b.li(24, 0);
        b.li(9, lx_out);
        if (s.t == DType::I64) {
            b.li(25, 1);
            b.mov(26, 18);  // j + first: exact in int32 (n < 2^31)
            b.li(10, lx_iota);
            b.viota(DType::I32, 10, 20);
            b.li(27, 1), b.mov(28, 19), b.li(29, 0), b.li(30, 0), b.li(31, 0);
            b.vint(isa::VInt::CVT, isa::Bcast::IMM, DType::I64, DType::I32, 9, 10, 0, 27);
            b.li(10, lx_const);
            b.vint(isa::VInt::MUL, isa::Bcast::SCALAR, DType::I64, DType::I64, 9, 9, 10, 27);
            b.addi(10, 10, 8);
            b.vint(isa::VInt::ADD, isa::Bcast::SCALAR, DType::I64, DType::I64, 9, 9, 10, 27);
        } else {
            b.mov(25, 13);
            b.mul(26, 18, 13);
            b.add(26, 26, 12);  // start + step * (first + j)
            b.viota(s.t, 9, 20);
        }
        b.muli(10, 18, es);
        b.add(10, 10, 3);
        b.muli(11, 19, es);
        b.span(10);
        b.store(9, 10, 11);
    }
    b.endloop();
    b.bind(done);
    b.halt();
    return b.finish();
}

ArangePlan plan_arange(const Pricer& pricer, const ArangeShape& s, uint32_t max_cores) {
    using isa::DType;
    if (s.t != DType::F32 && s.t != DType::F16 && s.t != DType::BF16 && s.t != DType::I32 &&
        s.t != DType::I64)
        throw std::invalid_argument("arange: out must be fp32, fp16, bf16, int32 or int64");
    if (s.n >= (uint64_t{1} << 31)) throw std::invalid_argument("arange: too many elements");
    ArangePlan best{};
    for (uint32_t cores : {max_cores, max_cores / 4, 1u}) {
        if (!cores) continue;
        ArangePlan p;
        // whole sticks of every element size (128 elements), at most 64 KiB of int64 per chunk
        const uint64_t per = (s.n + uint64_t(cores) * 128 - 1) / (uint64_t(cores) * 128);
        p.chunk = std::clamp<uint64_t>(per * 128, 128, 8192);
        const uint64_t nch = (s.n + p.chunk - 1) / p.chunk;
        p.cores = static_cast<uint32_t>(std::min<uint64_t>(cores, nch));
        p.cycles =
            pricer.price(build_arange(s, p), p.cores, {0, 0, 1}, up128(s.n * s.es)).total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    return best;
}

}  // namespace spyre::ops
