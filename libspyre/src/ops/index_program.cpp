// SPDX-License-Identifier: MIT
#include "ops/index_program.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

struct Layout {
    uint64_t table = 0, rows = 0, idx = 0, end = 0;
};

Layout layout(const IndexShape& s) {
    Layout l;
    l.rows = up128(s.V * s.I * s.es + kStick);
    l.idx = l.rows + up128(s.tile() * s.I * s.es + kStick);
    l.end = l.idx + up128(s.tile() * s.id() * s.index_bytes + kStick);
    return l;
}

// Whether units of work write disjoint sticks (else one core takes them all): a gather's
// units start at o * N + t * n_tile positions of rows, a scatter's at o * V of the table.
bool units_on_whole_sticks(const IndexShape& s) {
    const uint64_t pos = s.I * s.es;
    if (s.mode != IndexMode::GATHER) return s.V * pos % kStick == 0;
    return (s.O == 1 || s.N * pos % kStick == 0) &&
           (s.n_tiles == 1 || s.tile() * pos % kStick == 0);
}

uint64_t units(const IndexShape& s) { return s.mode == IndexMode::GATHER ? s.O * s.n_tiles : s.O; }

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
    const int64_t id = int64_t(s.id()), run = s.idx_inner ? 1 : I;
    const bool gather = s.mode == IndexMode::GATHER;
    const uint64_t table_bytes = s.V * s.I * s.es;
    // per slab o (strides) and per tile (loads)
    const uint64_t rows_stride = s.N * s.I * s.es, idx_stride = s.N * uint64_t(id) * ib;
    const uint64_t rows_tile = s.tile() * s.I * s.es, idx_tile = s.tile() * uint64_t(id) * ib;
    ProgramBuilder b;
    // r3 table, r4 idx, r5 rows (DDR); r6 first unit of this core, r7 its unit count; r8 the
    // index value; r9..r15 scratch; r16 unit loop, r17 unit; r25 slab o, r31 tile t, r2 the
    // slab whose table is in LX (gather); r18/r19 table aligned DDR / LX, r20/r21 rows,
    // r12/r22 idx; r23 n, r24 i; r26.. descriptor.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.muli(6, 1, int64_t(p.per_core));
    b.li(9, int64_t(units(s)));
    b.sub(7, 9, 6);
    b.li(9, int64_t(p.per_core));
    b.alu(Alu::MIN, 7, 7, 9);
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 7, done);  // no units for this core
    b.li(2, -1);
    const bool float_t = s.t == DType::F32 || s.t == DType::F16 || s.t == DType::BF16;
    // one row of `run` elements: rows, cols, dst_stride, src(1)_stride, src2_stride
    if (s.mode != IndexMode::SCATTER_ADD && float_t)
        b.set_regs(26, {1, run, es, run * es});  // VTRANS 1 x run -> run x 1: a bit copy
    else
        b.set_regs(26, {1, run, run * es, run * es, run * es});
    auto load_table = [&] {
        b.muli(9, 25, int64_t(table_bytes));
        b.add(13, 3, 9);
        load_slab(b, 13, 18, 19, int64_t(0), table_bytes);
    };
    // rows and idx tile t of slab o into LX, then every index of the tile applied
    auto tile = [&] {
        b.muli(9, 25, int64_t(rows_stride));
        b.muli(10, 31, int64_t(rows_tile));
        b.add(9, 9, 10);
        b.add(13, 5, 9);
        load_slab(b, 13, 20, 21, int64_t(l.rows), rows_tile);
        if (s.idx_outer) {
            b.muli(9, 25, int64_t(idx_stride));
        } else {
            b.li(9, 0);
        }
        b.muli(10, 31, int64_t(idx_tile));
        b.add(9, 9, 10);
        b.add(13, 4, 9);
        load_slab(b, 13, 12, 22, int64_t(l.idx), idx_tile);
        b.loopi(int64_t(s.tile()), 23);
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
                const int dst = gather ? 15 : 14;
                const int src = gather ? 14 : 15;
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
    };
    b.loop(7, 0, 16);
    {
        b.add(17, 6, 16);
        if (gather) {
            b.alu(Alu::DIVU, 25, 17, 0, int64_t(s.n_tiles));
            b.alu(Alu::REMU, 31, 17, 0, int64_t(s.n_tiles));
            ProgramBuilder::Label loaded = b.label();
            b.br(isa::Cond::EQ, 25, 2, loaded);
            load_table();
            b.mov(2, 25);
            b.bind(loaded);
            tile();
            store_slab(b, 20, 21, rows_tile);
        } else {
            b.mov(25, 17);
            load_table();
            b.loopi(int64_t(s.n_tiles), 31);
            tile();
            b.endloop();
            store_slab(b, 18, 19, table_bytes);
        }
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
    const uint32_t most = units_on_whole_sticks(s) ? max_cores : 1u;
    IndexPlan best{};
    const uint64_t tb = up128(s.O * s.V * s.I * s.es), rb = up128(s.O * s.N * s.I * s.es);
    const uint64_t xb = up128((s.idx_outer ? s.O : 1) * s.N * s.id() * s.index_bytes);
    const uint64_t n = units(s);
    for (uint32_t cores : {most, most / 2, most / 4, 1u}) {
        if (!cores) continue;
        IndexPlan p;
        p.per_core = std::max<uint64_t>(1, (n + cores - 1) / cores);
        p.cores =
            static_cast<uint32_t>(std::min<uint64_t>(cores, (n + p.per_core - 1) / p.per_core));
        p.cycles =
            pricer.price(build_index(s, p), p.cores, {0, tb, tb + xb}, tb + xb + rb).total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    return best;
}

std::vector<IndexLaunch> split_index(const IndexShape& s, uint64_t lx_budget, uint32_t max_cores) {
    IndexShape one = s;
    one.n_tile = 1;
    if (index_lx_bytes(one) > lx_budget)
        throw std::invalid_argument("index: the indexed dim of the table (one slab of " +
                                    std::to_string(s.V * s.I * s.es) +
                                    " bytes) does not fit in a core's scratchpad");
    const uint64_t per_n = s.I * s.es + s.id() * s.index_bytes;
    const uint64_t fit = std::min<uint64_t>(s.N, (lx_budget - index_lx_bytes(one)) / per_n + 1);
    uint64_t tile = fit;
    if (s.mode == IndexMode::GATHER && s.O < max_cores) {
        // enough (o, tile) units for every core, each tile on whole sticks of rows if it can be
        const uint64_t per_slab = (max_cores + s.O - 1) / s.O;
        tile = std::min(fit, (s.N + per_slab - 1) / per_slab);
        const uint64_t step = kStick / std::gcd<uint64_t>(kStick, s.I * s.es);
        if (tile < s.N && tile >= step) tile -= tile % step;
    }
    std::vector<IndexLaunch> out;
    IndexLaunch whole{s, 0};
    whole.s.n_tile = tile;
    whole.s.n_tiles = s.N / tile;
    out.push_back(whole);
    if (const uint64_t rest = s.N % tile) {
        IndexLaunch last{s, s.N - rest};
        last.s.n_tile = rest;
        last.s.n_tiles = 1;
        out.push_back(last);
    }
    return out;
}

}  // namespace spyre::ops
