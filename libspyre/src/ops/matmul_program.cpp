// SPDX-License-Identifier: MIT
#include "ops/matmul_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

// The accumulator's type: fp32, int32 for int8 inputs (the I8 MM's wrapping sums).
DType acc_type(const MatmulShape& s) { return s.in == DType::I8 ? DType::I32 : DType::F32; }

// The output is the accumulator itself (stored as it is, no rounding pass).
bool accumulator_out(const MatmulShape& s) { return s.out == acc_type(s); }

struct Layout {
    uint64_t a_bytes, b_bytes, buf, c, c2, out, bias, cos, sin, t, u, bconv, scale, total;
};

// The rounded (or rotated) result needs its own LX rows unless it is the fp32 sub-tile itself.
bool staged_out(const MatmulShape& s) { return !accumulator_out(s) || s.rotary; }

// The rows a core stores of each sm-row sub-tile (a K split shares them out when they divide).
uint64_t stored_rows(uint64_t sm, uint64_t gk) { return gk > 1 && sm % gk == 0 ? sm / gk : sm; }

// Rotary: the cos/sin rows of a block of `rows` stored rows (starting at a multiple of rows)
// load as one strided run of positions of one sequence, or as whole sequences.
bool rotary_rows_load(const MatmulShape& s, uint64_t rows) {
    return s.M == s.rot_l || s.rot_l % rows == 0 || rows % s.rot_l == 0;
}

Layout layout(const MatmulShape& s, uint64_t sm, uint64_t sn, uint64_t kc, uint64_t nb) {
    const uint64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    Layout l{};
    l.a_bytes = up128(sm * kc * es);
    l.b_bytes = up128(kc * sn * weight_size(s));
    l.buf = l.a_bytes + l.b_bytes * (s.gated ? 2 : 1);
    l.c = nb * l.buf;
    l.c2 = l.c + up128(sm * sn * 4);
    l.out = l.c2 + (s.gated ? up128(sm * sn * 4) : 0);
    l.bias = l.out + (staged_out(s) ? up128(sm * sn * oes) : 0);
    l.cos = l.bias + (s.has_bias ? up128(sn * isa::dtype_size(s.bias_t)) : 0);
    // rotary: the sub-tile rows' cos and sin rows, and two fp32 half-head temporaries
    const uint64_t crow = s.rotary ? up128(s.rot_d * isa::dtype_size(s.rot_t)) : 0;
    const uint64_t half = s.rotary ? up128(sm * s.rot_d / 2 * 4) : 0;
    l.sin = l.cos + sm * crow;
    l.t = l.sin + sm * crow;
    l.u = l.t + half;
    // w_i8: the chunk of B converted to the input type (one buffer: converted just before its
    // MM), and the sub-tile's scales
    l.bconv = l.u + half;
    l.scale = l.bconv + (s.w_i8 ? up128(kc * sn * es) : 0);
    l.total = l.scale + (s.has_scale ? up128(sn * isa::dtype_size(s.scale_t)) : 0);
    return l;
}

}  // namespace

std::optional<MatmulSplit> fit_matmul_split(const MatmulShape& s, uint32_t gm, uint32_t gn,
                                            uint32_t gk, uint64_t lx_budget, bool multicast) {
    const uint64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    if (!gm || !gn || !gk || s.M % gm || s.N % gn || s.K % gk) return std::nullopt;
    // the K split's partial sums meet in an ALLRED, which combines floats only
    if (gk > 1 && acc_type(s) != DType::F32) return std::nullopt;
    const uint64_t tm = s.M / gm, tn = s.N / gn, kt = s.K / gk;
    const uint64_t wes = weight_size(s);
    const uint64_t col_unit = kStick / oes;  // C columns per stick: stores start on a stick
    const uint64_t b_unit = s.trans_b ? 1 : kStick / wes;
    const uint64_t n_unit = std::max(col_unit, b_unit);
    // A (and B^T) rows are loaded in whole sticks
    const uint64_t k_unit = s.trans_b ? kStick / std::min(es, wes) : kStick / es;
    if (tn % n_unit || kt % k_unit) return std::nullopt;
    // rotary: a core's columns and each sub-tile are whole heads
    if (s.rotary && (!s.rot_d || tn % s.rot_d)) return std::nullopt;
    std::optional<MatmulSplit> best;
    auto better = [&](const MatmulSplit& g) {
        if (!best) return true;
        if (g.ddr_bytes_per_core != best->ddr_bytes_per_core)
            return g.ddr_bytes_per_core < best->ddr_bytes_per_core;
        if (g.double_buffered != best->double_buffered) return g.double_buffered;
        if (g.kc != best->kc) return g.kc > best->kc;
        return g.sm * g.sn > best->sm * best->sn;
    };
    const uint64_t max_dim = isa::kMaxMatDim;
    for (uint64_t sm = std::min(tm, max_dim); sm >= 1; --sm) {
        if (tm % sm) continue;
        // a K-split store shares the rows of a sub-tile among the gk cores
        for (uint64_t sn = n_unit; sn <= std::min(tn, max_dim); sn += n_unit) {
            if (tn % sn) continue;
            // rotary: whole heads, and the rows of one sub-tile in one sequence
            if (s.rotary && (sn % s.rot_d || !rotary_rows_load(s, stored_rows(sm, gk)))) continue;
            for (uint64_t nb : {2, 1}) {
                uint64_t kc = 0;
                for (uint64_t c = std::min(kt, max_dim) / k_unit * k_unit; c >= k_unit;
                     c -= k_unit) {
                    if (kt % c) continue;
                    if (layout(s, sm, sn, c, nb).total <= lx_budget) {
                        kc = c;
                        break;
                    }
                }
                if (!kc) continue;
                const uint64_t steps = (tm / sm) * (tn / sn) * (kt / kc);
                if (nb == 2 && steps == 1) continue;
                MatmulSplit g;
                g.gm = gm, g.gn = gn, g.gk = gk;
                g.sm = sm, g.sn = sn, g.kc = kc;
                g.double_buffered = nb == 2;
                g.multicast = multicast;
                g.lx_bytes = layout(s, sm, sn, kc, nb).total;
                g.ddr_bytes_per_core =
                    kt * (es * tm * tn / sn + wes * (s.gated ? 2 : 1) * tm * tn / sm);
                if (better(g)) best = g;
                break;
            }
        }
        // a bigger sm only lowers B traffic; stop once the sub-tile rows no longer fit at all
        if (best && sm < best->sm / 4) break;
    }
    return best;
}

std::vector<uint8_t> build_matmul(const MatmulShape& s, const MatmulSplit& p) {
    using isa::Alu;
    const int64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    const int64_t bes = isa::dtype_size(s.bias_t);
    const int64_t gm = p.gm, gn = p.gn, gk = p.gk;
    const int64_t tm = s.M / gm, tn = s.N / gn, kt = s.K / gk;
    const int64_t sm = p.sm, sn = p.sn, kc = p.kc, nk = kt / kc;
    const int64_t lda = s.lda, ldb = s.ldb, ldc = s.ldc;
    if (!p.sm || !p.sn || !p.kc || tm % sm || tn % sn || kt % kc)
        throw std::invalid_argument("matmul split does not tile the shape");
    const Layout l = layout(s, p.sm, p.sn, p.kc, p.double_buffered ? 2 : 1);
    const bool mc_a = p.multicast && gn > 1, mc_b = p.multicast && gm > 1;
    const bool convert = !accumulator_out(s);
    if (s.in == DType::I8 &&
        (s.out != DType::I32 || s.has_bias || s.has_act || s.gated || s.rotary || gk > 1))
        throw std::invalid_argument("int8 matmul: int32 output, no epilogue, no K split");
    if ((s.w_i8 && (s.in == DType::I8 || s.gated || s.rotary)) || (s.has_scale && s.rotary))
        throw std::invalid_argument("int8-weight matmul: float inputs, no gate, no rotary");
    const int64_t wes = int64_t(weight_size(s));
    if (s.rotary &&
        (s.has_bias || s.has_act || s.gated || s.batch != 1 || !s.rot_d || s.rot_d % 2 ||
         sn % int64_t(s.rot_d) || tn % sn || !rotary_rows_load(s, stored_rows(sm, gk))))
        throw std::invalid_argument("rotary matmul: the split does not hold whole heads");
    // K-split: the gk cores of a tile share its store row-wise when the rows divide
    const bool split_store = gk > 1 && sm % gk == 0;
    const int64_t rows_st = int64_t(stored_rows(sm, gk));

    ProgramBuilder b;
    // r3..r6 A, B, C, bias; r7..r9 mi, ni, ki; r10..r12 scratch; r13..r16 the core's A, B, C,
    // bias tile bases; r17 chunk parity; r18/r19 A/B chunk addresses; r20/r21 sub-tile indices;
    // r22..r28 descriptors; r29/r30 multicast groups of A/B; r31 the K-split group.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    if (s.has_bias && s.gated) throw std::invalid_argument("gated matmul takes no bias");
    if (s.has_bias) b.arg(6, 3);
    if (s.gated) {  // r6 = B2 - B: a B2 chunk is at the B chunk's address + r6
        b.arg(6, 4);
        b.sub(6, 6, 4);
    }
    if (s.rotary) {  // r6 cos, r16 sin (no bias, no B2)
        b.arg(6, 5);
        b.arg(16, 6);
    }
    b.li(10, gk);
    b.alu(Alu::REMU, 9, 1, 10);  // ki
    b.alu(Alu::DIVU, 11, 1, 10);
    b.li(10, gn);
    b.alu(Alu::REMU, 8, 11, 10);  // ni
    b.alu(Alu::DIVU, 7, 11, 10);  // mi
    if (mc_a) {                   // cores with the same (mi, ki): bits ki + (mi*gn + j)*gk, j < gn
        uint64_t pat = 0;
        for (int64_t j = 0; j < gn; ++j) pat |= uint64_t{1} << (j * gk);
        b.muli(10, 7, gn * gk);
        b.add(10, 10, 9);
        b.li(29, static_cast<int64_t>(pat));
        b.alu(Alu::SHL, 29, 29, 10);
    }
    if (mc_b) {  // cores with the same (ni, ki): bits ki + (i*gn + ni)*gk, i < gm
        uint64_t pat = 0;
        for (int64_t i = 0; i < gm; ++i) pat |= uint64_t{1} << (i * gn * gk);
        b.muli(10, 8, gk);
        b.add(10, 10, 9);
        b.li(30, static_cast<int64_t>(pat));
        b.alu(Alu::SHL, 30, 30, 10);
    }
    if (gk > 1) {  // the gk adjacent cores of one output tile
        b.sub(10, 1, 9);
        b.li(31, static_cast<int64_t>((uint64_t{1} << gk) - 1));
        b.alu(Alu::SHL, 31, 31, 10);
    }
    b.loopi(static_cast<int64_t>(s.batch));
    // the core's tile bases
    b.muli(13, 7, tm * lda);
    b.muli(10, 9, kt * es);
    b.add(13, 13, 10);
    b.add(13, 13, 3);
    if (s.trans_b) {
        b.muli(14, 8, tn * ldb);
        b.muli(10, 9, kt * wes);
    } else {
        b.muli(14, 9, kt * ldb);
        b.muli(10, 8, tn * wes);
    }
    b.add(14, 14, 10);
    b.add(14, 14, 4);
    b.muli(15, 7, tm * ldc);
    b.muli(10, 8, tn * oes);
    b.add(15, 15, 10);
    b.add(15, 15, 5);
    if (s.has_bias) {
        b.muli(16, 8, tn * bes);
        b.add(16, 16, 6);
    }
    b.li(17, 0);

    auto chunk = [&](bool acc) {
        if (p.double_buffered) {
            b.alu(Alu::AND, 10, 17, 0, 1);
            b.muli(10, 10, l.buf);
        } else {
            b.li(10, 0);
        }
        b.addi(12, 10, l.a_bytes);  // B chunk (A chunk at r10)
        b.li(11, kc * es);
        b.set_regs(22, {sm, lda, kc * es, 1, 0, 0});
        // each access sets the core's 256 MB span to its own rows: operands may lie anywhere
        b.span(18);
        if (mc_a)
            b.mcload(10, 18, 11, 29, 22);
        else
            b.load(10, 18, 11, 22);
        if (s.trans_b) {
            b.li(11, kc * wes);
            b.set_regs(22, {sn, ldb, kc * wes, 1, 0, 0});
        } else {
            b.li(11, sn * wes);
            b.set_regs(22, {kc, ldb, sn * wes, 1, 0, 0});
        }
        b.span(19);
        if (mc_b)
            b.mcload(12, 19, 11, 30, 22);
        else
            b.load(12, 19, 11, 22);
        if (s.gated) {  // the B2 chunk after the B chunk, in LX and (r6 apart) in DDR
            b.add(16, 19, 6);
            b.addi(12, 12, l.b_bytes);
            b.span(16);
            if (mc_b)
                b.mcload(12, 16, 11, 30, 22);
            else
                b.load(12, 16, 11, 22);
            b.addi(12, 12, -int64_t(l.b_bytes));
        }
        if (s.w_i8) {  // the int8 chunk in the input type (exact), where the MM reads B
            const int64_t rows = s.trans_b ? sn : kc, cols = s.trans_b ? kc : sn;
            b.li(28, l.bconv);
            b.set_regs(22, {rows, cols, cols * es, cols});
            b.vun(isa::VUn::COPY, s.in, DType::I8, 28, 12, 22);
            b.mov(12, 28);
        }
        b.li(11, l.c);
        b.set_regs(22, {sm, sn, kc, kc * es, s.trans_b ? kc * es : sn * es, sn * 4});
        b.matmul(s.in, 11, 10, 12, 22, acc, false, s.trans_b);
        if (s.gated) {
            b.li(11, l.c2);
            b.addi(12, 12, l.b_bytes);
            b.matmul(s.in, 11, 10, 12, 22, acc, false, s.trans_b);
        }
        b.addi(17, 17, 1);
    };

    const int64_t rd = int64_t(s.rot_d), rh = rd / 2, res = isa::dtype_size(s.rot_t);
    const int64_t crow = up128(rd * res);
    b.loopi(tm / sm, 20);
    if (s.rotary) {  // cos and sin rows of the sub-tile rows this core stores
        b.muli(10, 7, tm);
        b.muli(11, 20, sm);
        b.add(10, 10, 11);
        if (split_store) {
            b.muli(11, 9, rows_st);
            b.add(10, 10, 11);
        }
        b.li(11, int64_t(s.rot_l));
        b.alu(Alu::REMU, 12, 10, 11);  // position
        b.alu(Alu::DIVU, 10, 10, 11);  // sequence
        b.muli(18, 10, int64_t(s.rot_cb));
        b.muli(12, 12, int64_t(s.rot_cl));
        b.add(18, 18, 12);
        b.li(11, rd * res);
        const int64_t rl = int64_t(s.rot_l);
        if (s.M == s.rot_l || rl % rows_st == 0)  // consecutive positions of one sequence
            b.set_regs(22, {rows_st, int64_t(s.rot_cl), crow, 1, 0, 0});
        else  // whole sequences (e.g. a decode step's one position of each)
            b.set_regs(22,
                       {rl, int64_t(s.rot_cl), crow, rows_st / rl, int64_t(s.rot_cb), rl * crow});
        for (const auto& [lx, base] : {std::pair{l.cos, 6}, std::pair{l.sin, 16}}) {
            b.add(19, 18, static_cast<uint8_t>(base));
            b.li(10, int64_t(lx));
            b.span(19);
            b.load(10, 19, 11, 22);
        }
    }
    b.loopi(tn / sn, 21);
    b.muli(18, 20, sm * lda);
    b.add(18, 18, 13);
    b.muli(19, 21, s.trans_b ? sn * ldb : sn * wes);
    b.add(19, 19, 14);
    chunk(false);
    if (nk > 1) {
        b.loopi(nk - 1);
        b.addi(18, 18, kc * es);
        b.addi(19, 19, s.trans_b ? kc * wes : kc * ldb);
        chunk(true);
        b.endloop();
    }
    ProgramBuilder::Label skip = b.label();
    if (gk > 1) {
        b.li(10, l.c);
        b.li(11, sm * sn);
        b.allreduce(isa::Red::SUM, DType::F32, 10, 10, 11, 31);
        if (s.gated) {
            b.li(10, l.c2);
            b.allreduce(isa::Red::SUM, DType::F32, 10, 10, 11, 31);
        }
        if (!split_store) b.br(isa::Cond::NE, 9, 0, skip);
    }
    // epilogue on rows [row0, row0 + rows_st) of the fp32 sub-tile: r12 = row0 * sn * 4
    if (split_store)
        b.muli(12, 9, rows_st * sn * 4);
    else
        b.li(12, 0);
    b.addi(10, 12, l.c);  // fp32 rows in LX
    // a per-column vector (the sub-tile's sn elements of type t at DDR r11) loaded into LX at
    // `lx` and applied to the fp32 rows by `op`, broadcast over the rows
    auto column_op = [&](isa::VBin op, DType t, int64_t lx) {
        b.li(23, lx);
        b.li(24, sn * isa::dtype_size(t));
        b.span(11);
        b.load(23, 11, 24);
        b.set_regs(24, {rows_st, sn, sn * 4, sn * 4, 0});
        b.vbin2(op, isa::Bcast::ROW, DType::F32, DType::F32, t, 10, 10, 23, 24);
    };
    if (s.has_scale) {  // the sub-tile's columns times their scales (launch argument 5)
        const int64_t ses = isa::dtype_size(s.scale_t);
        b.arg(11, 5);
        b.muli(23, 8, tn * ses);
        b.add(11, 11, 23);
        b.muli(23, 21, sn * ses);
        b.add(11, 11, 23);
        column_op(isa::VBin::MUL, s.scale_t, l.scale);
    }
    if (s.has_bias) {
        b.muli(11, 21, sn * bes);
        b.add(11, 11, 16);
        column_op(isa::VBin::ADD, s.bias_t, l.bias);
    }
    if (s.has_act) {
        b.set_regs(24, {rows_st, sn, sn * 4, sn * 4});
        b.vun(s.act, DType::F32, DType::F32, 10, 10, 24);
    }
    if (s.gated) {  // act(C) * C2, C2's rows at the same offset (r12) in its tile
        b.addi(11, 12, l.c2);
        b.set_regs(24, {rows_st, sn, sn * 4, sn * 4, sn * 4});
        b.vbin(isa::VBin::MUL, isa::Bcast::NONE, DType::F32, DType::F32, 10, 10, 11, 24);
    }
    int64_t row_lx = sn * 4;
    if (s.rotary) {
        // per head: o1 = c1 * cos1 - c2 * sin1, o2 = c2 * cos2 + c1 * sin2 from the fp32 rows
        // (r18 the head's c1), rounded once into the staged rows (r19)
        b.muli(19, 9, split_store ? rows_st * sn * oes : 0);
        b.addi(19, 19, l.out);
        b.mov(18, 10);
        b.loopi(sn / rd);
        b.set_regs(22, {rows_st, rh, rh * 4, sn * 4, crow});
        b.li(10, l.t), b.addi(11, 18, rh * 4), b.li(12, l.sin);
        b.vbin2(isa::VBin::MUL, isa::Bcast::NONE, DType::F32, DType::F32, s.rot_t, 10, 11, 12, 22);
        b.li(10, l.u), b.li(12, l.cos);
        b.vbin2(isa::VBin::MUL, isa::Bcast::NONE, DType::F32, DType::F32, s.rot_t, 10, 18, 12, 22);
        b.li(11, l.t);
        b.set_regs(22, {rows_st, rh, sn * oes, rh * 4, rh * 4});
        b.vbin2(isa::VBin::SUB, isa::Bcast::NONE, s.out, DType::F32, DType::F32, 19, 10, 11, 22);
        b.li(10, l.t), b.li(12, l.sin + rh * res);
        b.set_regs(22, {rows_st, rh, rh * 4, sn * 4, crow});
        b.vbin2(isa::VBin::MUL, isa::Bcast::NONE, DType::F32, DType::F32, s.rot_t, 10, 18, 12, 22);
        b.addi(10, 19, rh * oes), b.addi(11, 18, rh * 4), b.li(12, l.cos + rh * res);
        b.set_regs(22, {rows_st, rh, sn * oes, sn * 4, crow, int64_t(l.t), rh * 4});
        b.vfma(s.out, DType::F32, 10, 11, 12, 22, isa::Bcast::NONE, isa::Bcast::NONE, 0.0f, 0.0f,
               s.rot_t, DType::F32);
        b.addi(18, 18, rd * 4);
        b.addi(19, 19, rd * oes);
        b.endloop();
        b.muli(10, 9, split_store ? rows_st * sn * oes : 0);
        b.addi(10, 10, l.out);
        row_lx = sn * oes;
    } else if (convert) {
        b.muli(11, 9, split_store ? rows_st * sn * oes : 0);
        b.addi(11, 11, l.out);
        b.set_regs(24, {rows_st, sn, sn * oes, sn * 4});
        b.vun(isa::VUn::COPY, s.out, DType::F32, 11, 10, 24);
        b.mov(10, 11);
        row_lx = sn * oes;
    }
    // C rows si*sm + row0 .., columns sj*sn ..
    b.muli(11, 20, sm * ldc);
    b.add(11, 11, 15);
    if (split_store) {
        b.muli(12, 9, rows_st * ldc);
        b.add(11, 11, 12);
    }
    b.muli(12, 21, sn * oes);
    b.add(11, 11, 12);
    b.li(12, sn * oes);
    b.set_regs(22, {rows_st, ldc, row_lx, 1, 0, 0});
    b.span(11);
    b.store(10, 11, 12, 22);
    b.bind(skip);
    b.endloop();
    b.endloop();
    // next batch element
    if (s.batch > 1) {
        if (s.batch_a) b.addi(3, 3, static_cast<int64_t>(s.batch_a));
        if (s.batch_b) b.addi(4, 4, static_cast<int64_t>(s.batch_b));
        b.addi(5, 5, static_cast<int64_t>(s.batch_c));
    }
    b.endloop();
    b.halt();
    return b.finish();
}

}  // namespace spyre::ops
