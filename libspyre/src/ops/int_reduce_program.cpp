// SPDX-License-Identifier: MIT
#include "ops/int_reduce_program.hpp"

#include <algorithm>
#include <format>
#include <limits>

#include "ops/pricing.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

// LX: the int64 accumulator, the chunk's VRED result, one output stick, the chunk buffer.
constexpr int64_t kAcc = 0, kTmp = 128, kOut = 256, kBuf = 384;

int64_t init_of(isa::Red f) {
    return f == isa::Red::SUM   ? 0
           : f == isa::Red::MAX ? std::numeric_limits<int64_t>::min()
                                : std::numeric_limits<int64_t>::max();
}

isa::VInt combine_of(isa::Red f) {
    return f == isa::Red::SUM   ? isa::VInt::ADD
           : f == isa::Red::MAX ? isa::VInt::MAX
                                : isa::VInt::MIN;
}

}  // namespace

std::vector<uint8_t> build_int_reduce(const IntReduceShape& s, uint32_t cores, uint64_t chunk) {
    const int64_t es = isa::dtype_size(s.t), oes = isa::dtype_size(s.out);
    const int64_t C = static_cast<int64_t>(s.cols), R = static_cast<int64_t>(s.rows);
    const int64_t B = 128 / oes;  // rows per output stick
    const int64_t sticks = (R + B - 1) / B;
    const int64_t RB = (sticks + cores - 1) / cores * B;  // rows per core, whole sticks
    const int64_t E = static_cast<int64_t>(chunk), nch = (C + E - 1) / E;
    ProgramBuilder b;
    using isa::Alu;
    b.arg(3, 0), b.arg(4, 1);
    b.alu(Alu::MUL, 5, 1, 0, RB);  // r5 = first row of this core
    b.li(6, R);
    b.sub(6, 6, 5);
    b.alu(Alu::MIN, 6, 6, 0, RB);  // r6 = its rows (<= 0: none)
    b.set_regs(27, {1, 1, 0, 0, 0});
    b.li(10, kAcc), b.li(21, kTmp);
    b.loop(6, 0, 7);
    {
        b.add(8, 5, 7);  // r8 = row
        b.li(9, init_of(s.f));
        b.lxst(10, 9, 0);
        b.alu(Alu::MUL, 11, 8, 0, C * es);
        b.add(11, 11, 3);  // r11 = the row's first byte in DDR
        b.loopi(nch, 12);
        {
            b.alu(Alu::MUL, 13, 12, 0, E);
            b.li(14, C);
            b.sub(13, 14, 13);
            b.alu(Alu::MINU, 13, 13, 0, E);  // r13 = elements of this chunk
            b.alu(Alu::MUL, 15, 12, 0, E * es);
            b.add(15, 15, 11);
            b.alu(Alu::AND, 16, 15, 0, 127);  // the chunk starts r16 bytes into its stick
            b.sub(17, 15, 16);
            b.alu(Alu::MUL, 18, 13, 0, es);
            b.add(18, 18, 16);
            b.span(17);
            b.li(19, kBuf);
            b.load(19, 17, 18);
            b.add(20, 19, 16);
            b.li(24, 1), b.mov(25, 13), b.li(26, 0);
            b.vred(s.f, 0, DType::I64, s.t, 21, 20, 24);
            b.vint(combine_of(s.f), isa::Bcast::NONE, DType::I64, DType::I64, 10, 10, 21, 27);
        }
        b.endloop();
        // the row's result into its slot of the output stick, then the stick's rows so far out
        b.alu(Alu::REMU, 22, 8, 0, B);
        b.alu(Alu::MUL, 20, 22, 0, oes);
        b.addi(20, 20, kOut);
        b.vint(isa::VInt::CVT, isa::Bcast::IMM, s.out, DType::I64, 20, 10, 0, 27);
        b.sub(9, 8, 22);
        b.alu(Alu::MUL, 9, 9, 0, oes);
        b.add(9, 9, 4);
        b.addi(14, 22, 1);
        b.alu(Alu::MUL, 14, 14, 0, oes);
        b.span(9);
        b.li(19, kOut);
        b.store(19, 9, 14);
    }
    b.endloop();
    b.halt();
    return b.finish();
}

std::shared_ptr<const PlanEntry> int_reduce(spyre_stream_t stream, const IntReduceShape& s,
                                            const Tensor& x, const Tensor& o) {
    const Card c = card_of(o.buffer);
    require_same_card(c, {&x}, "reduce");
    const spyre_engine_config cfg = engine_config_of(c.info);
    const uint64_t es = isa::dtype_size(s.t);
    // chunks of up to 512 KiB (the slack of an unaligned start fits in the buffer's last stick)
    const uint64_t chunk = std::max<uint64_t>(1, std::min<uint64_t>(s.cols, (512u << 10) / es));
    const uint64_t B = 128 / isa::dtype_size(s.out);
    const uint32_t cores = static_cast<uint32_t>(
        std::min<uint64_t>(cfg.num_cores, std::max<uint64_t>(1, (s.rows + B - 1) / B)));
    PlanKey key("int_reduce", cfg);
    key.add(s.f, s.t, s.out, s.rows, s.cols);
    auto plan = cached_plan(key.str(), [&] {
        PlanEntry e;
        e.image = build_int_reduce(s, cores, chunk);
        e.cores = cores;
        const Pricer pricer(cfg);
        const uint64_t xbytes = (s.rows * s.cols * es + 127) / 128 * 128;
        const spyre_engine_result r =
            pricer.price(e.image, cores, {0, xbytes + 128},
                         xbytes + 128 + (s.rows * isa::dtype_size(s.out) + 127) / 128 * 128);
        e.cycles = r.total_cycles;
        e.plan = std::format("{} cores, chunk {}", cores, chunk);
        return e;
    });
    launch(c, plan, stream, {x.addr, o.addr}, {x.buffer, o.buffer});
    finish_info(c, *plan);
    return plan;
}

}  // namespace spyre::ops
