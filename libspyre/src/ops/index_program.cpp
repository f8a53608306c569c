// SPDX-License-Identifier: MIT
#include "ops/index_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

struct Layout {
    uint64_t table = 0, rows = 0, idx = 0, end = 0;
};

Layout layout(const IndexShape& s) {
    const uint64_t id = s.idx_inner ? s.I : 1;
    Layout l;
    l.rows = up128(s.V * s.I * s.es + kStick);
    l.idx = l.rows + up128(s.N * s.I * s.es + kStick);
    l.end = l.idx + up128(s.N * id * s.index_bytes + kStick);
    return l;
}

// Loads the slab of `bytes` at DDR r[ddr] into LX from `lx_base`; r[lx] = the LX address of
// its first byte (the slab keeps its offset inside the stick). r[al] = the aligned DDR start.
void load_slab(ProgramBuilder& b, int ddr, int al, int lx, int64_t lx_base, uint64_t bytes) {
    using isa::Alu;
    b.alu(Alu::AND, 9, ddr, 0, 127);
    b.sub(al, ddr, 9);
    b.addi(lx, 9, lx_base);
    b.li(10, lx_base);
    b.addi(11, 9, int64_t(bytes));
    b.span(al);
    b.load(10, al, 11);
}

void store_slab(ProgramBuilder& b, int al, int lx, uint64_t bytes) {
    using isa::Alu;
    b.alu(Alu::AND, 9, lx, 0, 127);  // the slab's offset in its stick
    b.sub(10, lx, 9);
    b.addi(11, 9, int64_t(bytes));
    b.span(al);
    b.store(10, al, 11);
}

}  // namespace

uint64_t index_lx_bytes(const IndexShape& s) { return layout(s).end; }

std::vector<uint8_t> build_index(const IndexShape& s, const IndexPlan& p) {
    using isa::Alu;
    using isa::DType;
    const Layout l = layout(s);
    const int64_t es = int64_t(s.es), ib = s.index_bytes, I = int64_t(s.I);
    const int64_t id = s.idx_inner ? I : 1, run = s.idx_inner ? 1 : I;
    const uint64_t table_bytes = s.V * s.I * s.es, rows_bytes = s.N * s.I * s.es;
    const uint64_t idx_bytes = s.N * uint64_t(id) * ib;
    ProgramBuilder b;
    // r3 table, r4 idx, r5 rows (DDR); r6 first slab of this core, r7 its slab count; r8 the
    // index value; r9..r15 scratch; r16 slab loop, r17 o; r18/r19 table aligned DDR / LX,
    // r20/r21 rows, r12/r22 idx; r23 n, r24 i; r26.. descriptor.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.muli(6, 1, int64_t(p.per_core));
    b.li(9, int64_t(s.O));
    b.sub(7, 9, 6);
    b.li(9, int64_t(p.per_core));
    b.alu(Alu::MIN, 7, 7, 9);
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 7, done);  // no slabs for this core
    const bool float_t = s.t == DType::F32 || s.t == DType::F16 || s.t == DType::BF16;
    // one row of `run` elements: rows, cols, dst_stride, src(1)_stride, src2_stride
    if (s.mode != IndexMode::SCATTER_ADD && float_t)
        b.set_regs(26, {1, run, es, run * es});  // VTRANS 1 x run -> run x 1: a bit copy
    else
        b.set_regs(26, {1, run, run * es, run * es, run * es});
    b.loop(7, 0, 16);
    {
        b.add(17, 6, 16);
        b.muli(9, 17, int64_t(table_bytes));
        b.add(13, 3, 9);
        load_slab(b, 13, 18, 19, int64_t(0), table_bytes);
        b.muli(9, 17, int64_t(rows_bytes));
        b.add(13, 5, 9);
        load_slab(b, 13, 20, 21, int64_t(l.rows), rows_bytes);
        if (s.idx_outer) {
            b.muli(9, 17, int64_t(idx_bytes));
            b.add(13, 4, 9);
        } else {
            b.mov(13, 4);
        }
        load_slab(b, 13, 12, 22, int64_t(l.idx), idx_bytes);
        b.loopi(int64_t(s.N), 23);
        {
            b.loopi(id, 24);
            {
                // index position p = n * id + i
                b.muli(9, 23, id);
                b.add(9, 9, 24);
                b.muli(9, 9, ib);
                b.add(9, 9, 22);
                if (ib == 8) {
                    b.lxld(8, 9, 0);
                } else {
                    // LXLD reads aligned 8-byte words: the low or high int32 of the word
                    b.alu(Alu::SHR, 13, 9, 0, 2);
                    b.alu(Alu::AND, 13, 13, 0, 1);
                    b.alu(Alu::AND, 9, 9, 0, ~int64_t{7});
                    b.lxld(8, 9, 0);
                    b.muli(13, 13, 32);
                    b.alu(Alu::SHR, 8, 8, 13);
                    b.li(13, 32);
                    b.alu(Alu::SHL, 8, 8, 13);
                    b.alu(Alu::SRA, 8, 8, 13);  // sign-extended
                }
                if (s.wrap_negative) {
                    ProgramBuilder::Label pos = b.label();
                    b.br(isa::Cond::GE, 8, 0, pos);
                    b.addi(8, 8, int64_t(s.V));
                    b.bind(pos);
                }
                // bounds check (unsigned: a negative index is huge): outside [0, V) stops the
                // job with DIV_ZERO here, like a device-side assert
                ProgramBuilder::Label ok = b.label();
                b.li(13, int64_t(s.V));
                b.br(isa::Cond::LTU, 8, 13, ok);
                b.alu(Alu::DIVU, 13, 13, 0);
                b.bind(ok);
                // r14 = table element (v, i), r15 = rows element (n, i)
                b.muli(14, 8, I);
                b.add(14, 14, 24);
                b.muli(14, 14, es);
                b.add(14, 14, 19);
                b.muli(15, 23, I);
                b.add(15, 15, 24);
                b.muli(15, 15, es);
                b.add(15, 15, 21);
                const int dst = s.mode == IndexMode::GATHER ? 15 : 14;
                const int src = s.mode == IndexMode::GATHER ? 14 : 15;
                if (s.mode == IndexMode::SCATTER_ADD) {
                    if (float_t)
                        b.vbin(isa::VBin::ADD, isa::Bcast::NONE, s.t, s.t, 14, 14, 15, 26);
                    else
                        b.vint(isa::VInt::ADD, isa::Bcast::NONE, s.t, s.t, 14, 14, 15, 26);
                } else if (float_t) {
                    b.vtrans(s.t, s.t, dst, src, 26);
                } else {
                    b.vint(isa::VInt::CVT, isa::Bcast::IMM, s.t, s.t, dst, src, 0, 26);
                }
            }
            b.endloop();
        }
        b.endloop();
        if (s.mode == IndexMode::GATHER)
            store_slab(b, 20, 21, rows_bytes);
        else
            store_slab(b, 18, 19, table_bytes);
    }
    b.endloop();
    b.bind(done);
    b.halt();
    return b.finish();
}

IndexPlan plan_index(const Pricer& pricer, const IndexShape& s, uint32_t max_cores) {
    if (s.index_bytes != 4 && s.index_bytes != 8)
        throw std::invalid_argument("index: indices must be int32 or int64");
    if (index_lx_bytes(s) > pricer.lx_budget())
        throw std::invalid_argument("index: one slab of the operands does not fit in LX");
    // Cores write whole slabs; more than one core only when every written slab starts on a stick
    // (else two cores would store the same stick).
    const uint64_t written = s.mode == IndexMode::GATHER ? s.N * s.I * s.es : s.V * s.I * s.es;
    const uint32_t most = written % kStick ? 1u : max_cores;
    IndexPlan best{};
    const uint64_t id = s.idx_inner ? s.I : 1;
    const uint64_t tb = up128(s.O * s.V * s.I * s.es), rb = up128(s.O * s.N * s.I * s.es);
    const uint64_t xb = up128((s.idx_outer ? s.O : 1) * s.N * id * s.index_bytes);
    for (uint32_t cores : {most, most / 2, most / 4, 1u}) {
        if (!cores) continue;
        IndexPlan p;
        p.per_core = std::max<uint64_t>(1, (s.O + cores - 1) / cores);
        p.cores =
            static_cast<uint32_t>(std::min<uint64_t>(cores, (s.O + p.per_core - 1) / p.per_core));
        p.cycles =
            pricer.price(build_index(s, p), p.cores, {0, tb, tb + xb}, tb + xb + rb).total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    return best;
}

}  // namespace spyre::ops
