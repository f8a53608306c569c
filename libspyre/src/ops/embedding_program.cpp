// SPDX-License-Identifier: MIT
#include "ops/embedding_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {

std::vector<uint8_t> build_embedding(const EmbeddingShape& s, const EmbeddingPlan& p) {
    using isa::Alu;
    const int64_t per = p.per_core, ib = s.index_bytes;
    const int64_t idx_lx = 0, rows_lx = up128(per * ib + kStick);
    const int64_t rb = up128(s.row_bytes);
    if (rows_lx + 2 * rb > 2 << 20) throw std::invalid_argument("embedding plan too large");
    ProgramBuilder b;
    // r3 indices, r4 weight, r5 out; r6 first index of this core; r7 its count; r8 index
    // value; r9..r13 scratch; r14 the LX row buffer (two, alternating).
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.muli(6, 1, per);
    b.li(9, int64_t(s.n));
    b.sub(7, 9, 6);
    b.li(9, per);
    b.alu(Alu::MIN, 7, 7, 9);  // signed: a core past the end gets a count <= 0
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 7, done);  // no indices for this core
    // this core's indices: one LOAD from the stick that holds the first of them; r15 = the
    // first index's byte offset in that stick
    b.muli(9, 6, ib);
    b.alu(Alu::AND, 15, 9, 0, 127);
    b.sub(9, 9, 15);
    b.add(9, 9, 3);
    b.span(9);
    b.muli(10, 7, ib);
    b.add(10, 10, 15);
    b.li(11, idx_lx);
    b.load(11, 9, 10);
    b.loop(7, 0, 12);
    {
        b.muli(9, 12, ib);
        b.add(9, 9, 15);  // byte position of index i in LX
        if (ib == 8) {
            b.lxld(8, 9, idx_lx);
        } else {
            // LXLD reads 8-byte words: take the low or high int32 of the word
            b.alu(Alu::SHR, 13, 9, 0, 2);
            b.alu(Alu::AND, 13, 13, 0, 1);
            b.alu(Alu::AND, 9, 9, 0, ~int64_t{7});
            b.lxld(8, 9, idx_lx);
            b.muli(13, 13, 32);
            b.alu(Alu::SHR, 8, 8, 13);
            b.li(13, 0xffffffff);
            b.alu(Alu::AND, 8, 8, 13);
            // sign-extend: a negative int32 stays out of range
            b.li(13, 32);
            b.alu(Alu::SHL, 8, 8, 13);
            b.alu(Alu::SRA, 8, 8, 13);
        }
        // bounds check (unsigned: negative indices are huge): an index outside [0, V) stops
        // the job with DIV_ZERO here, like a device-side assert
        ProgramBuilder::Label ok = b.label();
        b.li(13, int64_t(s.V));
        b.br(isa::Cond::LTU, 8, 13, ok);
        b.alu(Alu::DIVU, 13, 13, 0);
        b.bind(ok);
        b.muli(9, 8, int64_t(s.w_stride));
        b.add(9, 9, 4);  // the indexed row
        b.alu(Alu::AND, 14, 12, 0, 1);
        b.muli(14, 14, rb);
        b.addi(14, 14, rows_lx);
        b.li(10, int64_t(s.row_bytes));
        b.add(11, 6, 12);
        b.muli(11, 11, int64_t(s.o_stride));
        b.add(11, 11, 5);  // row i of out (the gather) or of the rows (the scatter)
        const uint8_t from = s.scatter ? 11 : 9, to = s.scatter ? 9 : 11;
        b.span(from);
        b.load(14, from, 10);
        b.span(to);
        b.store(14, to, 10);
    }
    b.endloop();
    b.bind(done);
    b.halt();
    return b.finish();
}

EmbeddingPlan plan_embedding(const Pricer& pricer, const EmbeddingShape& s, uint32_t max_cores) {
    if (s.row_bytes == 0 || s.w_stride % kStick || s.o_stride % kStick ||
        (s.index_bytes != 4 && s.index_bytes != 8))
        throw std::invalid_argument(
            "embedding: weight and output rows must start 128-byte aligned (int32 or int64 "
            "indices)");
    EmbeddingPlan best{};
    const uint64_t rb = up128(s.row_bytes);
    for (uint32_t cores : {max_cores, max_cores / 2, max_cores / 4, 1u}) {
        if (!cores) continue;
        EmbeddingPlan p;
        p.per_core = std::max<uint64_t>(1, (s.n + cores - 1) / cores);
        p.cores =
            static_cast<uint32_t>(std::min<uint64_t>(cores, (s.n + p.per_core - 1) / p.per_core));
        if (up128(p.per_core * s.index_bytes + kStick) + 2 * rb > pricer.lx_budget()) continue;
        const uint64_t ib = up128(s.n * s.index_bytes);
        const uint64_t wb = up128((std::max<uint64_t>(s.V, 1) - 1) * s.w_stride + s.row_bytes);
        const uint64_t ob = up128((s.n - 1) * s.o_stride + s.row_bytes);
        p.cycles = pricer.price(build_embedding(s, p), p.cores, {0, ib, ib + wb}, ib + wb + ob)
                       .total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    if (!best.cycles) throw std::invalid_argument("embedding: too many indices for the scratchpad");
    return best;
}

}  // namespace spyre::ops
