// SPDX-License-Identifier: MIT
#include "ops/rotary_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Alu;
using isa::Bcast;
using isa::DType;
using isa::VBin;

struct Layout {
    uint64_t x, c, sn, t, o, out, total;
};

Layout layout(const RotaryShape& s, uint64_t bl) {
    const uint64_t row = s.D * isa::dtype_size(s.t), crow = s.D * isa::dtype_size(s.ct);
    Layout l{};
    l.x = 0;
    l.c = l.x + up128(bl * row);
    l.sn = l.c + up128(bl * crow);
    l.t = l.sn + up128(bl * crow);
    l.o = l.t + up128(bl * s.D / 2 * 4);
    l.out = l.o + up128(bl * s.D * 4);
    l.total = l.out + up128(bl * row);
    return l;
}

}  // namespace

RotaryShape RotaryShape::resolved() const {
    RotaryShape r = *this;
    const uint64_t row = D * isa::dtype_size(t), crow = D * isa::dtype_size(ct);
    if (!x_st[0] && !x_st[1] && !x_st[2])
        r.x_st[2] = row, r.x_st[1] = L * row, r.x_st[0] = H * L * row;
    if (!o_st[0] && !o_st[1] && !o_st[2])
        r.o_st[2] = row, r.o_st[1] = L * row, r.o_st[0] = H * L * row;
    if (!c_st[0] && !c_st[1]) r.c_st[1] = crow;  // shared by the batch
    return r;
}

std::vector<uint8_t> build_rotary(const RotaryShape& shape, const RotaryPlan& p) {
    const RotaryShape s = shape.resolved();
    const int64_t es = isa::dtype_size(s.t), ces = isa::dtype_size(s.ct);
    const int64_t D = s.D, h = D / 2, row = D * es, crow = D * ces, bl = p.bl;
    const int64_t nlb = s.L / bl, units = s.B * s.H * nlb, ncores = p.cores;
    if (D % 2 || row % kStick || crow % kStick || s.L % bl)
        throw std::invalid_argument("rotary plan does not fit the shape");
    const Layout l = layout(s, p.bl);
    ProgramBuilder b;
    // r3..r6 x, cos, sin, out; r7 unit; r8 batch; r9 head; r10 position block; r11.. scratch;
    // r20 iteration; r21..r27 descriptors.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2), b.arg(6, 3);
    ProgramBuilder::Label next = b.label();
    b.loopi((units + ncores - 1) / ncores, 20);
    b.muli(7, 20, ncores);
    b.add(7, 7, 1);
    b.li(11, units);
    b.br(isa::Cond::GEU, 7, 11, next);
    b.li(11, nlb);
    b.alu(Alu::REMU, 10, 7, 11);
    b.alu(Alu::DIVU, 7, 7, 11);
    b.li(11, int64_t(s.H));
    b.alu(Alu::REMU, 9, 7, 11);
    b.alu(Alu::DIVU, 8, 7, 11);
    // rows of x: x + b*sb + h*sh + lb*bl*sl
    auto rows_of = [&](ProgramBuilder::Reg dst, ProgramBuilder::Reg base, const uint64_t* st) {
        b.muli(dst, 8, int64_t(st[0]));
        b.muli(11, 9, int64_t(st[1]));
        b.add(dst, dst, 11);
        b.muli(11, 10, bl * int64_t(st[2]));
        b.add(dst, dst, 11);
        b.add(dst, dst, base);
    };
    auto move = [&](bool load, int64_t lx, ProgramBuilder::Reg ddr, int64_t len, int64_t stride) {
        b.li(12, lx);
        b.li(13, len);
        b.set_regs(21, {bl, stride, up128(len), 1, 0, 0});
        b.span(ddr);
        if (load)
            b.load(12, ddr, 13, 21);
        else
            b.store(12, ddr, 13, 21);
    };
    rows_of(14, 3, s.x_st);
    move(true, int64_t(l.x), 14, row, int64_t(s.x_st[2]));
    // cos and sin rows: base + b*cb + lb*bl*cl
    for (int i = 0; i < 2; ++i) {
        b.muli(15, 8, int64_t(s.c_st[0]));
        b.muli(11, 10, bl * int64_t(s.c_st[1]));
        b.add(15, 15, 11);
        b.add(15, 15, i ? 5 : 4);
        move(true, int64_t(i ? l.sn : l.c), 15, crow, int64_t(s.c_st[1]));
    }
    const int64_t xs = up128(row), cs = up128(crow), ts = h * 4, os = D * 4;
    auto vb = [&](VBin f, int64_t dst, int64_t dstride, DType dt, int64_t a, int64_t astride,
                  DType at, int64_t c, int64_t cstride, DType ct) {
        b.li(16, dst), b.li(17, a), b.li(18, c);
        b.set_regs(21, {bl, h, dstride, astride, cstride});
        b.vbin2(f, Bcast::NONE, dt, at, ct, 16, 17, 18, 21);
    };
    // t = x2 * sin1; o1 = x1 * cos1 - t
    vb(VBin::MUL, l.t, ts, DType::F32, l.x + h * es, xs, s.t, l.sn, cs, s.ct);
    vb(VBin::MUL, l.o, os, DType::F32, l.x, xs, s.t, l.c, cs, s.ct);
    vb(VBin::SUB, l.o, os, DType::F32, l.o, os, DType::F32, l.t, ts, DType::F32);
    // t = x1 * sin2; o2 = x2 * cos2 + t
    vb(VBin::MUL, l.t, ts, DType::F32, l.x, xs, s.t, l.sn + h * ces, cs, s.ct);
    b.li(16, int64_t(l.o + h * 4)), b.li(17, int64_t(l.x + h * es)),
        b.li(18, int64_t(l.c + h * ces));
    b.set_regs(21, {bl, h, os, xs, cs, int64_t(l.t), ts});
    b.vfma(DType::F32, s.t, 16, 17, 18, 21, Bcast::NONE, Bcast::NONE, 0.0f, 0.0f, s.ct, DType::F32);
    // round once and store
    b.li(16, int64_t(l.out)), b.li(17, int64_t(l.o));
    b.set_regs(21, {bl, D, xs, os});
    b.vun(isa::VUn::COPY, s.t, DType::F32, 16, 17, 21);
    rows_of(14, 6, s.o_st);
    move(false, int64_t(l.out), 14, row, int64_t(s.o_st[2]));
    b.bind(next);
    b.endloop();
    b.halt();
    return b.finish();
}

RotaryPlan plan_rotary(const Pricer& pricer, const RotaryShape& shape, uint32_t max_cores) {
    const RotaryShape s = shape.resolved();
    const uint64_t row = s.D * isa::dtype_size(s.t), crow = s.D * isa::dtype_size(s.ct);
    if (s.D % 2 || row % kStick || crow % kStick)
        throw std::invalid_argument(
            "rotary: the head dim must be even and a head row a multiple of 128 bytes");
    for (const uint64_t* st : {s.x_st, s.o_st})
        for (int d = 0; d < 3; ++d)
            if (st[d] % kStick)
                throw std::invalid_argument("rotary: strides must be multiples of 128 bytes");
    if (s.c_st[0] % kStick || s.c_st[1] % kStick)
        throw std::invalid_argument("rotary: cos/sin strides must be multiples of 128 bytes");
    auto extent = [](const uint64_t* st, int n, const uint64_t* dims, uint64_t r) {
        uint64_t e = r;
        for (int d = 0; d < n; ++d) e += (dims[d] - 1) * st[d];
        return up128(e);
    };
    const uint64_t xd[3] = {s.B, s.H, s.L}, cd[2] = {s.B, s.L};
    const uint64_t xb = extent(s.x_st, 3, xd, row), cb = extent(s.c_st, 2, cd, crow);
    const uint64_t ob = extent(s.o_st, 3, xd, row);
    RotaryPlan best{};
    for (uint64_t bl : {256, 128, 64, 32, 16, 8, 4, 2, 1}) {
        if (bl > s.L || s.L % bl || layout(s, bl).total > pricer.lx_budget()) continue;
        const uint64_t units = s.B * s.H * (s.L / bl);
        for (uint32_t cores : {max_cores, max_cores / 2, max_cores / 4}) {
            if (!cores) continue;
            RotaryPlan p{bl, static_cast<uint32_t>(std::min<uint64_t>(cores, units)), 0};
            p.cycles = pricer
                           .price(build_rotary(s, p), p.cores, {0, xb, xb + cb, xb + 2 * cb},
                                  xb + 2 * cb + ob)
                           .total_cycles;
            if (!best.cycles || p.cycles < best.cycles) best = p;
        }
    }
    if (!best.cycles)
        throw std::invalid_argument("rotary: no block of positions fits the scratchpad");
    return best;
}

}  // namespace spyre::ops
