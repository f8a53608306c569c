// SPDX-License-Identifier: MIT
#include "ops/column_program.hpp"

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
using isa::VUn;

bool softmax(const ColumnShape& s) { return s.op == RowwiseOp::SOFTMAX; }

// LX of one tile: x (and the softmax result in place), fp32 work rows, per-column statistics.
struct Layout {
    uint64_t x, w, m, sum, r, rt, total;
};

Layout layout(const ColumnShape& s, uint64_t ic) {
    const uint64_t es = isa::dtype_size(s.t);
    Layout l{};
    uint64_t at = 0;
    auto take = [&](uint64_t bytes) {
        const uint64_t a = at;
        at += up128(bytes);
        return a;
    };
    l.x = take(s.R * ic * es);
    if (softmax(s)) {
        l.w = take(s.R * ic * 4);
        l.m = take(ic * 4);
        l.sum = take(ic * 4);
    } else {
        l.r = take(ic * 4);
        l.rt = take(ic * es);
    }
    l.total = at;
    return l;
}

void validate(const ColumnShape& s) {
    const uint64_t es = isa::dtype_size(s.t);
    if (s.op != RowwiseOp::SOFTMAX && s.op != RowwiseOp::SUM && s.op != RowwiseOp::MEAN &&
        s.op != RowwiseOp::MAX && s.op != RowwiseOp::MIN)
        throw std::invalid_argument("columns: softmax, sum, mean, max or min");
    if (s.t != DType::F16 && s.t != DType::BF16 && s.t != DType::F32)
        throw std::invalid_argument("columns: float32, float16 or bfloat16");
    if (s.A == 0 || s.R == 0 || s.I == 0 || (s.I * es) % kStick)
        throw std::invalid_argument("columns: the inner dims must be whole sticks");
}

}  // namespace

uint64_t column_lx_bytes(const ColumnShape& s, uint64_t ic) { return layout(s, ic).total; }

std::vector<uint8_t> build_column(const ColumnShape& s, const ColumnPlan& p) {
    validate(s);
    const int64_t es = isa::dtype_size(s.t), ic = int64_t(p.ic), R = int64_t(s.R);
    const int64_t I = int64_t(s.I), nct = I / ic, units = int64_t(s.A) * nct, ncores = p.cores;
    if (ic <= 0 || I % ic || (ic * es) % int64_t(kStick))
        throw std::invalid_argument("columns: a tile must be whole sticks dividing the inner dims");
    const Layout l = layout(s, p.ic);
    ProgramBuilder b;
    // r3 x, r4 out; r7 tile, r8 outer index, r9 column tile; r10..r12 scratch; r13 the x tile
    // in LX; r15..r17 statistics; r20 round; r21..r26 descriptors
    b.arg(3, 0), b.arg(4, 1);
    auto desc = [&](std::initializer_list<int64_t> v) { b.set_regs(21, v); };
    ProgramBuilder::Label next = b.label();
    b.loopi((units + ncores - 1) / ncores, 20);
    b.muli(7, 20, ncores);
    b.add(7, 7, 1);
    b.li(10, units);
    b.br(isa::Cond::GEU, 7, 10, next);
    b.li(10, nct);
    b.alu(Alu::DIVU, 8, 7, 10);
    b.alu(Alu::REMU, 9, 7, 10);
    // the tile's first element: x + a*R*I*es + c*ic*es (softmax output likewise)
    b.muli(11, 8, R * I * es);
    b.muli(12, 9, ic * es);
    b.add(11, 11, 12);
    b.add(12, 3, 11);
    b.li(13, int64_t(l.x));
    b.li(14, ic * es);
    desc({R, I * es, ic * es, 1, 0, 0});
    b.span(12);
    b.load(13, 12, 14, 21);
    if (softmax(s)) {
        b.li(15, int64_t(l.m)), b.li(16, int64_t(l.w)), b.li(17, int64_t(l.sum));
        desc({R, ic, ic * es});
        b.vred(isa::Red::MAX, 1, DType::F32, s.t, 15, 13, 21);
        desc({R, ic, ic * 4, ic * es, 0});  // w = x - m (fp32)
        b.vbin2(VBin::SUB, Bcast::ROW, DType::F32, s.t, DType::F32, 16, 13, 15, 21);
        desc({R, ic, ic * 4, ic * 4});
        b.vun(VUn::EXP, DType::F32, DType::F32, 16, 16, 21);
        desc({R, ic, ic * 4});
        b.vred(isa::Red::SUM, 1, DType::F32, DType::F32, 17, 16, 21);
        if (s.log) {  // y = (x - m) - log(sum), x - m again in fp32
            desc({1, ic, ic * 4, ic * 4});
            b.vun(VUn::LOG, DType::F32, DType::F32, 17, 17, 21);
            desc({R, ic, ic * 4, ic * es, 0});
            b.vbin2(VBin::SUB, Bcast::ROW, DType::F32, s.t, DType::F32, 16, 13, 15, 21);
        }
        desc({R, ic, ic * es, ic * 4, 0});  // y in x's type, over the x tile
        b.vbin(s.log ? VBin::SUB : VBin::DIV, Bcast::ROW, s.t, DType::F32, 13, 16, 17, 21);
        b.add(12, 4, 11);
        desc({R, I * es, ic * es, 1, 0, 0});
        b.span(12);
        b.store(13, 12, 14, 21);
    } else {
        b.li(15, int64_t(l.r)), b.li(16, int64_t(l.rt));
        const bool extreme = s.op == RowwiseOp::MAX || s.op == RowwiseOp::MIN;
        desc({R, ic, ic * es});
        if (extreme) {  // exact in x's type
            b.vred(s.op == RowwiseOp::MAX ? isa::Red::MAX : isa::Red::MIN, 1, s.t, s.t, 16, 13, 21);
        } else {  // summed in double, rounded to fp32, then (mean: / R in fp32) to x's type
            b.vred(isa::Red::SUM, 1, DType::F32, s.t, 15, 13, 21);
            desc({1, ic, ic * es, ic * 4, 0});
            if (s.op == RowwiseOp::MEAN)
                b.vbin(VBin::DIV, Bcast::IMM, s.t, DType::F32, 16, 15, 0, 21, float(R));
            else
                b.vun(VUn::COPY, s.t, DType::F32, 16, 15, 21);
        }
        // out[a, c*ic ..]: out + (a*I + c*ic)*es
        b.muli(11, 8, I * es);
        b.muli(12, 9, ic * es);
        b.add(11, 11, 12);
        b.add(12, 4, 11);
        b.span(12);
        b.store(16, 12, 14);
    }
    b.bind(next);
    b.endloop();
    b.halt();
    return b.finish();
}

ColumnPlan plan_column(const Pricer& pricer, const ColumnShape& s, uint32_t max_cores) {
    validate(s);
    const uint64_t es = isa::dtype_size(s.t), unit = kStick / es;
    const uint64_t x_bytes = up128(s.A * s.R * s.I * es);
    const uint64_t out_bytes = softmax(s) ? x_bytes : up128(s.A * s.I * es);
    ColumnPlan best{};
    int priced = 0;
    // tiles of whole sticks that divide the inner dims, widest first (fewer, longer DMA rows)
    for (uint64_t ic = s.I; ic >= unit && priced < 6; ic -= unit) {
        if (s.I % ic || ic % unit || column_lx_bytes(s, ic) > pricer.lx_budget()) continue;
        ColumnPlan p;
        p.ic = ic;
        p.cores = uint32_t(std::min<uint64_t>(max_cores, s.A * (s.I / ic)));
        p.cycles = pricer.price(build_column(s, p), p.cores, {0, x_bytes}, x_bytes + out_bytes)
                       .total_cycles;
        ++priced;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    if (!best.cycles) throw std::invalid_argument("columns: no tile of the reduced dim fits LX");
    return best;
}

}  // namespace spyre::ops
