// SPDX-License-Identifier: MIT
#include "ops/attention_program.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <format>
#include <limits>
#include <stdexcept>

#include "ops/attention_emit.hpp"
#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Alu;
using isa::Bcast;
using isa::DType;
using isa::VBin;
using isa::VUn;

// LX layout of one work unit: R = group * bq rows.
struct Layout {
    uint64_t q, q2, s[2], p, o, k[3], v[3], mask[3], m_old, m_new, corr, stat, l, out, lse, total;
};

// Bytes of one key block's row of the mask in LX (a whole number of sticks, see mask_fits).
uint64_t mask_row_bytes(const AttentionShape& s, uint64_t bk) {
    return bk * isa::dtype_size(s.mask_t);
}

// The mask's block of a key block starts at a stick boundary only if bk mask elements are
// whole sticks (bool masks: bk >= 128).
bool mask_fits(const AttentionShape& s, uint64_t bk) {
    return s.mask == AttentionShape::Mask::NONE || mask_row_bytes(s, bk) % kStick == 0;
}

Layout layout(const AttentionShape& s, uint64_t bq, uint64_t bk, bool prefetch_q) {
    const uint64_t es = isa::dtype_size(s.t), g = s.Hq / s.Hkv, R = g * bq;
    Layout l{};
    uint64_t at = 0;
    auto take = [&](uint64_t bytes) {
        const uint64_t a = at;
        at += up128(bytes);
        return a;
    };
    l.q = take(R * s.D * es);
    l.q2 = prefetch_q ? take(R * s.D * es) : l.q;  // the next unit's Q rows
    l.s[0] = take(R * bk * 4);
    l.s[1] = take(R * bk * 4);
    l.p = take(R * bk * es);
    l.o = take(R * s.D * 4);
    for (int i = 0; i < 3; ++i) l.k[i] = take(bk * s.D * es), l.v[i] = take(bk * s.D * es);
    // the mask's rows of a key block, triple buffered with K and V
    const uint64_t mask_rows = (s.m_st[1] ? g : 1) * (s.m_st[2] ? bq : 1);
    const uint64_t mask_bytes =
        s.mask == AttentionShape::Mask::NONE ? 0 : mask_rows * up128(mask_row_bytes(s, bk));
    for (int i = 0; i < 3; ++i) l.mask[i] = mask_bytes ? take(mask_bytes) : 0;
    l.m_old = take(R * 4);
    l.m_new = take(R * 4);
    l.corr = take(R * 4);
    l.stat = take(R * 4);
    l.l = take(R * 4);
    // the g heads' logsumexp rows, each starting on a stick (one store for the group)
    l.lse = s.lse ? take(g * up128(bq * 4)) : 0;
    // the output tile is converted after the last block: it reuses the score buffers if they
    // are large enough (they are contiguous), which lets larger query blocks fit
    // (not with the next unit's Q prefetched: its scores would wait for the store)
    if (!prefetch_q && up128(R * s.D * es) <= l.p - l.s[0])
        l.out = l.s[0];
    else
        l.out = take(R * s.D * es);
    l.total = at;
    return l;
}

}  // namespace

AttentionShape AttentionShape::resolved() const {
    AttentionShape r = *this;
    const uint64_t row = D * isa::dtype_size(t);
    auto fill = [&](uint64_t* st, uint64_t H, uint64_t L) {
        if (st[0] || st[1] || st[2]) return;
        st[2] = row, st[1] = L * row, st[0] = H * L * row;
    };
    fill(r.q_st, Hq, Lq);
    fill(r.k_st, Hkv, Lk);
    fill(r.v_st, Hkv, Lk);
    fill(r.o_st, Hq, Lq);
    if (lse && !l_st[0] && !l_st[1]) dense_row_stat_strides(Hq, Lq, r.l_st);
    return r;
}

uint64_t attention_lx_bytes(const AttentionShape& s, uint64_t bq, uint64_t bk, bool prefetch_q) {
    return layout(s, bq, bk, prefetch_q).total;
}

std::vector<uint8_t> build_attention(const AttentionShape& shape, const AttentionPlan& p) {
    const AttentionShape s = shape.resolved();
    const int64_t es = isa::dtype_size(s.t), g = s.Hq / s.Hkv, bq = p.bq, bk = p.bk;
    const int64_t R = g * bq, D = s.D, Db = D * es;
    const int64_t nqb = s.Lq / bq, nkb = (s.Lk + bk - 1) / bk;
    const int64_t units = s.B * s.Hkv * nqb, ncores = p.cores;
    const int64_t off = s.Lk - s.Lq;
    // with the length at run time any block may be the short last one
    const bool rt = s.runtime_lk, tail = rt || s.Lk % bk != 0;
    const float scale = s.scale != 0.0f ? s.scale : 1.0f / std::sqrt(float(D));
    if (s.Hq % s.Hkv || s.Lq % bq || Db % kStick || R > int64_t(isa::kMaxMatDim) ||
        !mask_fits(s, p.bk) || (s.lse && !lse_block_fits(s.Lq, p.bq)) || (rt && s.causal))
        throw std::invalid_argument("attention plan does not fit the shape");
    const bool masked = s.mask != AttentionShape::Mask::NONE;
    const int64_t mes = isa::dtype_size(s.mask_t), mrow = bk * mes;
    // mask rows loaded per head (1: one row broadcast over the queries) and heads per group
    // (1: one mask shared by the group's heads)
    const int64_t mrows = s.m_st[2] ? bq : 1, mheads = s.m_st[1] ? g : 1;
    // A positive scale commutes with the row max: it is applied inside the fused multiply-add
    // that subtracts the max instead of in a pass of its own (an additive mask already takes
    // it in its VFMA).
    const bool fold_scale = scale > 0 && s.mask != AttentionShape::Mask::ADD;
    const Layout l = layout(s, p.bq, p.bk, p.prefetch_q);
    const float ninf = -std::numeric_limits<float>::infinity();

    ProgramBuilder b;
    // r2 the mask rows of the unit; r3..r6 Q, K, V, out; r7 unit; r8 (b, kv head) index; r9 query
    // block; r10..r12, r18, r19, r28..r31 scratch; r13/r14 K/V block addresses; r15 key block
    // index; r16 key blocks of the unit; r17 mask offset; r20 iteration; r21..r27 descriptors.
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2), b.arg(6, 3);
    auto vdesc = [&](std::initializer_list<int64_t> v) { b.set_regs(21, v); };
    auto lxreg = [&](ProgramBuilder::Reg r, uint64_t addr) { b.li(r, int64_t(addr)); };
    ProgramBuilder::Label next = b.label();
    // Units in order of decreasing cost (causal: the last query blocks see the most keys),
    // dealt to the cores in rounds that alternate direction, so every core gets a similar sum:
    // position = round * ncores + (round odd ? ncores - 1 - core : core);
    // (b, kv head) = position % BH, query block = nqb - 1 - position / BH.
    const int64_t BH = s.B * s.Hkv;
    using Reg = ProgramBuilder::Reg;
    // unit_of: the unit of round `round` on this core: its position, (b, kv head) index, query
    // block, b and kv head (r10, r11 scratch)
    auto unit_of = [&](Reg round, Reg pos, Reg bh, Reg qb, Reg bi, Reg kvh) {
        b.alu(Alu::AND, 10, round, 0, 1);
        b.muli(11, 1, -2);
        b.addi(11, 11, ncores - 1);
        b.mul(11, 11, 10);
        b.add(pos, 1, 11);
        b.muli(10, round, ncores);
        b.add(pos, pos, 10);
        b.li(10, BH);
        b.alu(Alu::REMU, bh, pos, 10);
        b.alu(Alu::DIVU, qb, pos, 10);
        b.li(10, nqb - 1);
        b.sub(qb, 10, qb);
        b.li(10, int64_t(s.Hkv));
        b.alu(Alu::DIVU, bi, bh, 10);
        b.alu(Alu::REMU, kvh, bh, 10);
    };
    b.loopi((units + ncores - 1) / ncores, 20);
    // r7 position, r8 (b, kv head), r9 query block, r30 = b, r31 = kv head of this unit
    unit_of(20, 7, 8, 9, 30, 31);
    b.li(10, units);
    b.br(isa::Cond::GEU, 7, 10, next);
    if (masked) {  // r2 = mask + b*mb + kvh*g*mh + qb*bq*ml (r2 held the core count)
        b.arg(2, 4);
        b.muli(10, 30, int64_t(s.m_st[0]));
        b.add(2, 2, 10);
        b.muli(10, 31, g * int64_t(s.m_st[1]));
        b.add(2, 2, 10);
        b.muli(10, 9, bq * int64_t(s.m_st[2]));
        b.add(2, 2, 10);
    }
    // the base of head h of the group in q or out: base + b*sb + (kvh*g + h)*sh + qb*bq*sl
    // (unit registers bi, kvh, qb; r30, r31, r9 for this unit)
    auto head_rows = [&](Reg dst, Reg base, const uint64_t* st, int64_t h, Reg bi = 30,
                         Reg kvh = 31, Reg qb = 9) {
        b.muli(dst, bi, int64_t(st[0]));
        b.muli(10, kvh, g * int64_t(st[1]));
        b.add(dst, dst, 10);
        b.muli(10, qb, bq * int64_t(st[2]));
        b.add(dst, dst, 10);
        b.addi(dst, dst, h * int64_t(st[1]));
        b.add(dst, dst, base);
    };
    // Q rows of the g heads of a unit: head h of the group at LX rows h*bq of the Q buffer
    // (l.q, or with prefetching the buffer of the round's parity)
    auto load_q = [&](Reg round, Reg bi, Reg kvh, Reg qb) {
        for (int64_t h = 0; h < g; ++h) {
            head_rows(12, 3, s.q_st, h, bi, kvh, qb);
            b.alu(Alu::AND, 28, round, 0, 1);
            b.muli(28, 28, int64_t(l.q2 - l.q));
            b.addi(28, 28, int64_t(l.q + h * bq * Db));
            b.li(11, Db);
            b.span(12);  // operands may lie anywhere: each access sets the span to its rows
            if (bq > 1) {
                vdesc({bq, int64_t(s.q_st[2]), Db, 1, 0, 0});
                b.load(28, 12, 11, 21);
            } else {
                b.load(28, 12, 11);
            }
        }
    };
    if (!p.prefetch_q) {
        load_q(20, 30, 31, 9);
    } else {
        // the first unit loads its own rows; every unit loads the next one's into the other
        // buffer, so they arrive while this unit computes
        ProgramBuilder::Label later = b.label(), last = b.label();
        b.br(isa::Cond::NE, 20, 0, later);
        load_q(20, 30, 31, 9);
        b.bind(later);
        b.addi(17, 20, 1);
        unit_of(17, 18, 19, 16, 13, 14);
        b.li(10, units);
        b.br(isa::Cond::GEU, 18, 10, last);
        load_q(17, 13, 14, 16);
        b.bind(last);
    }
    // m = -inf, l = 0, O = 0
    lxreg(28, l.m_old);
    vdesc({1, R, R * 4, R * 4});
    b.vun(VUn::SET, DType::F32, DType::F32, 28, 0, 21, ninf);
    lxreg(28, l.l);
    b.vun(VUn::SET, DType::F32, DType::F32, 28, 0, 21, 0.0f);
    lxreg(28, l.o);
    vdesc({R, D, D * 4, D * 4});
    b.vun(VUn::SET, DType::F32, DType::F32, 28, 0, 21, 0.0f);
    if (rt) {  // r16 = ceil(Lk / bk) of launch argument 6 (bk is a power of two)
        b.arg(16, 6);
        b.addi(16, 16, bk - 1);
        b.alu(Alu::SHR, 16, 16, 0, std::countr_zero(uint64_t(bk)));
    } else {
        attention_emit::key_block_count(b, s.causal, 9, bq, bk, off, nkb);
    }
    // K/V of (b, kv head): + b * batch stride + kvh * head stride (arguments 7..10 at run time)
    auto kv_base = [&](Reg dst, Reg base, const uint64_t* st, uint32_t arg) {
        if (rt && s.B == 1) {  // no batch term
            b.arg(dst, arg + 1);
            b.mul(dst, 31, dst);
            b.add(dst, dst, base);
            return;
        }
        if (rt) {
            b.arg(dst, arg);
            b.mul(dst, 30, dst);
            b.arg(10, arg + 1);
            b.mul(10, 31, 10);
        } else {
            b.muli(dst, 30, int64_t(st[0]));
            b.muli(10, 31, int64_t(st[1]));
        }
        b.add(dst, dst, 10);
        b.add(dst, dst, base);
    };
    kv_base(13, 4, s.k_st, 7);
    kv_base(14, 5, s.v_st, 9);
    // Software-pipelined over key blocks: while the vector unit runs block kb's softmax update,
    // the scores S = Q K^T of block kb+1 are on the matrix unit and block kb+2 is on its way
    // from DDR (K, V and mask triple buffered, S double buffered); then P V of block kb
    // follows. Issue is in order, so the program order is what lets the units overlap: with the
    // load only one block ahead, the scores' MM waited for its K block and held up the vector
    // work issued behind it.
    // buffer(dst, set, i): the LX address of buffer i (register) of an evenly spaced set
    auto buffer = [&](ProgramBuilder::Reg dst, const uint64_t* set, ProgramBuilder::Reg i) {
        b.muli(dst, i, int64_t(set[1] - set[0]));
        b.addi(dst, dst, int64_t(set[0]));
    };
    // load(blk): K/V block `blk` (register) into buffers blk % 3 (r29), with its mask columns.
    auto load = [&](ProgramBuilder::Reg blk) {
        b.li(10, 3);
        b.alu(Alu::REMU, 29, blk, 10);
        buffer(30, l.k, 29);
        buffer(31, l.v, 29);
        // rows of this block: min(bk, Lk - blk*bk)
        b.muli(18, blk, bk);
        if (rt)
            b.arg(19, 6);
        else
            b.li(19, int64_t(s.Lk));
        b.sub(19, 19, 18);
        b.li(10, bk);
        b.alu(Alu::MINU, 19, 19, 10);
        b.muli(11, 18, int64_t(s.k_st[2]));
        b.add(11, 11, 13);
        b.muli(12, 18, int64_t(s.v_st[2]));
        b.add(12, 12, 14);
        if (tail) {  // a short last block: zero the buffers so the rows past Lk are finite
            ProgramBuilder::Label full = b.label();
            b.br(isa::Cond::EQ, 19, 10, full);
            vdesc({bk, D, Db, Db});
            b.vun(VUn::SET, s.t, s.t, 30, 0, 21, 0.0f);
            b.vun(VUn::SET, s.t, s.t, 31, 0, 21, 0.0f);
            b.bind(full);
        }
        b.li(10, Db);
        b.mov(21, 19);
        b.li(22, int64_t(s.k_st[2])), b.li(23, Db), b.li(24, 1), b.li(25, 0), b.li(26, 0);
        b.span(11);
        b.load(30, 11, 10, 21);
        b.li(22, int64_t(s.v_st[2]));
        b.span(12);
        b.load(31, 12, 10, 21);
        if (masked) {  // the block's mask columns of every head's query rows
            buffer(12, l.mask, 29);
            b.muli(11, 18, mes);
            b.add(11, 11, 2);
            b.muli(10, 19, mes);
            vdesc({mrows, int64_t(s.m_st[2]), mrow, mheads, int64_t(s.m_st[1]), mrows * mrow});
            b.span(11);
            b.load(12, 11, 10, 21);
        }
    };
    // qk(blk): the scores of block blk into S buffer blk & 1.
    auto qk = [&](ProgramBuilder::Reg blk) {
        b.li(10, 3);
        b.alu(Alu::REMU, 29, blk, 10);
        buffer(30, l.k, 29);
        b.alu(Alu::AND, 29, blk, 0, 1);
        buffer(28, l.s, 29);
        b.alu(Alu::AND, 29, 20, 0, 1);  // this unit's Q buffer
        b.muli(29, 29, int64_t(l.q2 - l.q));
        b.addi(29, 29, int64_t(l.q));
        vdesc({R, bk, D, Db, Db, bk * 4});
        b.matmul(s.t, 28, 29, 30, 21, false, false, true);
    };
    // ahead(n, f): f(kb + n) if that block exists (kb = r15, 0 before the loop)
    auto ahead = [&](int64_t n, auto&& f) {
        ProgramBuilder::Label none = b.label();
        b.addi(17, 15, n);
        b.br(isa::Cond::GEU, 17, 16, none);
        f(ProgramBuilder::Reg{17});
        b.bind(none);
    };
    b.li(15, 0);
    load(0);
    ahead(1, load);
    qk(0);
    b.loop(16, 0, 15);
    {
        ahead(2, load);
        ahead(1, qk);
        // this block's buffers
        b.li(10, 3);
        b.alu(Alu::REMU, 29, 15, 10);
        buffer(31, l.v, 29);
        if (masked) buffer(30, l.mask, 29);
        b.alu(Alu::AND, 29, 15, 0, 1);
        buffer(28, l.s, 29);
        // S = scale * S, + mask (ADD, one fused multiply-add) or where(mask, S, -inf) (KEEP),
        // per head's rows unless the group shares one mask row
        const bool one_pass = mrows == 1 && mheads == 1;
        if (s.mask != AttentionShape::Mask::ADD && !fold_scale) {
            vdesc({R, bk, bk * 4, bk * 4, 0});
            b.vbin(VBin::MUL, Bcast::IMM, DType::F32, DType::F32, 28, 28, 0, 21, scale);
        }
        for (int64_t h = 0; masked && h < (one_pass ? 1 : g); ++h) {
            b.addi(29, 28, h * bq * bk * 4);
            vdesc({one_pass ? R : bq, bk, bk * 4, bk * 4, 0});
            b.addi(26, 30, s.m_st[1] ? h * mrows * mrow : 0);
            b.li(27, mrows > 1 ? mrow : 0);
            if (s.mask == AttentionShape::Mask::ADD)
                b.vfma(DType::F32, DType::F32, 29, 29, 0, 21, Bcast::IMM, Bcast::NONE, scale, 0.0f,
                       isa::kSrcType, s.mask_t);
            else
                b.vsel(DType::F32, DType::F32, 29, 29, 0, 21, Bcast::IMM, ninf, false, Bcast::NONE,
                       DType::I8);
        }
        // masks: keys past Lk, and the causal limit of each head's rows; each only on the
        // blocks it changes (a mask pass costs as much as any other pass over S)
        if (tail) attention_emit::mask_key_tail(b, 15, R, bk, s.Lk, rt ? 6 : -1);
        if (s.causal) attention_emit::mask_causal(b, 9, 15, g, bq, bk, off);
        // online softmax: m_new = max(m_old, rowmax(S)); corr = exp(m_old - m_new)
        lxreg(29, l.stat);
        vdesc({R, bk, bk * 4});
        b.vred(isa::Red::MAX, 0, DType::F32, DType::F32, 29, 28, 21);
        if (fold_scale) {  // rowmax(scale S) = scale rowmax(S) exactly (rounding is monotonic)
            vdesc({1, R, R * 4, R * 4, 0});
            b.vbin(VBin::MUL, Bcast::IMM, DType::F32, DType::F32, 29, 29, 0, 21, scale);
        }
        lxreg(10, l.m_new);
        lxreg(11, l.m_old);
        vdesc({1, R, R * 4, R * 4, R * 4});
        b.vbin(VBin::MAX, Bcast::NONE, DType::F32, DType::F32, 10, 11, 29, 21);
        lxreg(12, l.corr);
        b.vbin(VBin::SUB, Bcast::NONE, DType::F32, DType::F32, 12, 11, 10, 21);
        vdesc({1, R, R * 4, R * 4});
        b.vun(VUn::EXP, DType::F32, DType::F32, 12, 12, 21);
        // rows whose keys were all masked so far have m_new = -inf, and -inf - -inf is NaN:
        // mask = m_new > -inf; corr = mask ? corr : 0; m_safe = mask ? m_new : 0 (stat)
        lxreg(29, l.stat);
        vdesc({1, R, R * 4, R * 4, 0});
        b.vbin(VBin::GT, Bcast::IMM, DType::F32, DType::F32, 29, 10, 0, 21, ninf);
        b.set_regs(21, {1, R, R * 4, R * 4, 0, int64_t(l.stat), R * 4});
        b.vsel(DType::F32, DType::F32, 12, 12, 0, 21, Bcast::IMM, 0.0f);
        b.vsel(DType::F32, DType::F32, 29, 10, 0, 21, Bcast::IMM, 0.0f);
        // S = exp(S - m_safe), or with the scale folded in, exp(scale S - m_safe) from one
        // fused multiply-add
        if (fold_scale) {
            vdesc({1, R, R * 4, R * 4});
            b.vun(VUn::NEG, DType::F32, DType::F32, 29, 29, 21);
            b.set_regs(21, {R, bk, bk * 4, bk * 4, 0, int64_t(l.stat), 4});
            b.vfma(DType::F32, DType::F32, 28, 28, 0, 21, Bcast::IMM, Bcast::COL, scale);
        } else {
            vdesc({R, bk, bk * 4, bk * 4, 4});
            b.vbin(VBin::SUB, Bcast::COL, DType::F32, DType::F32, 28, 28, 29, 21);
        }
        vdesc({R, bk, bk * 4, bk * 4});
        b.vun(VUn::EXP, DType::F32, DType::F32, 28, 28, 21);
        // l = l * corr + rowsum(S)
        lxreg(29, l.stat);
        vdesc({R, bk, bk * 4});
        b.vred(isa::Red::SUM, 0, DType::F32, DType::F32, 29, 28, 21);
        lxreg(11, l.l);
        b.set_regs(21, {1, R, R * 4, R * 4, R * 4, int64_t(l.stat), R * 4});
        b.vfma(DType::F32, DType::F32, 11, 11, 12, 21);
        // O = O * corr + P V, P = S in the input type
        lxreg(11, l.o);
        vdesc({R, D, D * 4, D * 4, 4});
        b.vbin(VBin::MUL, Bcast::COL, DType::F32, DType::F32, 11, 11, 12, 21);
        lxreg(29, l.p);
        vdesc({R, bk, bk * es, bk * 4});
        b.vun(VUn::COPY, s.t, DType::F32, 29, 28, 21);
        vdesc({R, D, bk, bk * es, Db, D * 4});
        b.matmul(s.t, 11, 29, 31, 21, true);
        // m_old = m_new
        lxreg(10, l.m_new);
        lxreg(11, l.m_old);
        vdesc({1, R, R * 4, R * 4});
        b.vun(VUn::COPY, DType::F32, DType::F32, 11, 10, 21);
    }
    b.endloop();
    // out = O / l, in the input type, to the g heads' rows
    lxreg(10, l.o);
    lxreg(11, l.l);
    vdesc({R, D, D * 4, D * 4, 4});
    b.vbin(VBin::DIV, Bcast::COL, DType::F32, DType::F32, 10, 10, 11, 21);
    lxreg(12, l.out);
    vdesc({R, D, Db, D * 4});
    b.vun(VUn::COPY, s.t, DType::F32, 12, 10, 21);
    b.li(10, int64_t(s.Hkv));
    b.alu(Alu::DIVU, 30, 8, 10);
    b.alu(Alu::REMU, 31, 8, 10);
    for (int64_t h = 0; h < g; ++h) {
        head_rows(12, 6, s.o_st, h);
        lxreg(28, l.out + h * bq * Db);
        b.li(11, Db);
        b.span(12);
        if (bq > 1) {
            vdesc({bq, int64_t(s.o_st[2]), Db, 1, 0, 0});
            b.store(28, 12, 11, 21);
        } else {
            b.store(28, 12, 11);
        }
    }
    if (s.lse) {  // lse = m + log(l) of the g heads' rows: lse + b*lb + kvh*g*lh + qb*bq*4
        const int64_t LP = int64_t(up128(bq * 4));
        lxreg(10, l.stat);
        lxreg(11, l.l);
        vdesc({1, R, R * 4, R * 4});
        b.vun(VUn::LOG, DType::F32, DType::F32, 10, 11, 21);
        lxreg(11, l.m_old);
        lxreg(12, l.lse);
        vdesc({g, bq, LP, bq * 4, bq * 4});
        b.vbin(VBin::ADD, Bcast::NONE, DType::F32, DType::F32, 12, 10, 11, 21);
        b.arg(11, 5);
        b.muli(10, 30, int64_t(s.l_st[0]));
        b.add(11, 11, 10);
        b.muli(10, 31, g * int64_t(s.l_st[1]));
        b.add(11, 11, 10);
        b.muli(10, 9, bq * 4);
        b.add(11, 11, 10);
        b.li(10, bq * 4);
        b.span(11);
        vdesc({g, int64_t(s.l_st[1]), LP, 1, 0, 0});
        b.store(12, 11, 10, 21);
    }
    b.bind(next);
    b.endloop();
    b.halt();
    return b.finish();
}

namespace {
// Bytes spanned by a [B, H, L, D] tensor with byte strides st.
uint64_t extent(const uint64_t* st, uint64_t B, uint64_t H, uint64_t L, uint64_t row) {
    return up128((B - 1) * st[0] + (H - 1) * st[1] + (L - 1) * st[2] + row);
}
}  // namespace

uint64_t attention_tensor_bytes(const AttentionShape& shape, int which) {
    const AttentionShape s = shape.resolved();
    const uint64_t row = s.D * isa::dtype_size(s.t);
    if (which == 5) return s.lse ? extent(s.l_st, s.B, s.Hq, 1, s.Lq * 4) : 0;
    if (which == 4)
        return s.mask == AttentionShape::Mask::NONE
                   ? 0
                   : extent(s.m_st, s.B, s.Hq, s.Lq, s.Lk * isa::dtype_size(s.mask_t));
    switch (which) {
        case 0:
            return extent(s.q_st, s.B, s.Hq, s.Lq, row);
        case 1:
            return extent(s.k_st, s.B, s.Hkv, s.Lk, row);
        case 2:
            return extent(s.v_st, s.B, s.Hkv, s.Lk, row);
        default:
            return extent(s.o_st, s.B, s.Hq, s.Lq, row);
    }
}

std::vector<uint64_t> attention_length_args(const AttentionShape& shape) {
    const AttentionShape s = shape.resolved();
    return {s.Lk, s.k_st[0], s.k_st[1], s.v_st[0], s.v_st[1]};
}

namespace {
// The engine's timing-only run of an attention image on the tensors of s laid out one after
// the other.
spyre_engine_result price_image(const Pricer& pricer, const std::vector<uint8_t>& image,
                                uint32_t cores, const AttentionShape& s) {
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (int which = 0; which < 6; ++which) {
        args.push_back(at);
        at += attention_tensor_bytes(s, which);
    }
    if (s.runtime_lk)
        for (uint64_t a : attention_length_args(s)) args.push_back(a);
    return pricer.price(image, cores, args, at);
}
}  // namespace

void price_attention(const Pricer& pricer, const AttentionShape& s, AttentionPlan& p) {
    p.stats = price_image(pricer, build_attention(s, p), p.cores, s);
    p.cycles = p.stats.total_cycles;
}

LengthPrices price_attention_lengths(const Pricer& pricer, const std::vector<uint8_t>& image,
                                     uint32_t cores, const AttentionShape& s, uint64_t lo,
                                     uint64_t hi) {
    LengthPrices out;
    for (int i = 0; i < kLengthPoints; ++i) {
        const uint64_t lk = lo + (hi - lo) * uint64_t(i) / (kLengthPoints - 1);
        if (!out.empty() && out.back().first == lk) continue;
        AttentionShape at = s;
        at.Lk = lk;
        out.emplace_back(lk, price_image(pricer, image, cores, at).total_cycles);
    }
    return out;
}

uint64_t interpolate_cycles(const LengthPrices& pts, uint64_t Lk) {
    if (pts.empty()) return 0;
    if (Lk <= pts.front().first) return pts.front().second;
    for (size_t i = 1; i < pts.size(); ++i)
        if (Lk <= pts[i].first) {
            const auto [x0, y0] = pts[i - 1];
            const auto [x1, y1] = pts[i];
            const double f = double(Lk - x0) / double(x1 - x0);
            return uint64_t(std::llround(double(y0) + f * (double(y1) - double(y0))));
        }
    return pts.back().second;
}

namespace {

void check_plannable(const AttentionShape& s) {
    if (s.Hkv == 0 || s.Hq % s.Hkv || s.D == 0 || (s.D * isa::dtype_size(s.t)) % kStick)
        throw std::invalid_argument(
            "attention: Hq must be a multiple of Hkv and a head row a multiple of 128 bytes");
    const AttentionShape r = s.resolved();
    for (int d = 0; d < 2; ++d)
        if (r.l_st[d] % kStick)
            throw std::invalid_argument(
                "attention: the logsumexp's batch and head strides must be multiples of 128 "
                "bytes");
    for (const uint64_t* st : {r.q_st, r.k_st, r.v_st, r.o_st, r.m_st})
        for (int d = 0; d < 3; ++d)
            if (st[d] % kStick)
                throw std::invalid_argument(
                    "attention: batch, head and position strides must be multiples of 128 bytes");
}

}  // namespace

std::optional<AttentionPlan> replan_attention(const Pricer& pricer, const AttentionShape& s,
                                              const AttentionPlan& chosen, uint32_t max_cores) {
    check_plannable(s);
    const uint64_t bq = chosen.bq, bk = chosen.bk;
    if (bq == 0 || bq > s.Lq || s.Lq % bq || (s.Hq / s.Hkv) * bq > isa::kMaxMatDim ||
        !mask_fits(s, bk) || (s.lse && !lse_block_fits(s.Lq, bq)))
        return std::nullopt;
    AttentionPlan p;
    p.bq = bq, p.bk = bk;
    const uint64_t units = s.B * s.Hkv * (s.Lq / bq);
    p.cores = static_cast<uint32_t>(std::min<uint64_t>(max_cores, units));
    p.prefetch_q = chosen.prefetch_q && units > p.cores;
    p.lx_bytes = attention_lx_bytes(s, bq, bk, p.prefetch_q);
    if (!p.lx_bytes || p.lx_bytes > pricer.lx_budget()) return std::nullopt;
    price_attention(pricer, s, p);
    return p;
}

namespace {

// Every candidate's blocks and cores priced at s.Lk, and with lo > 0 also at kScorePoints - 1
// more key lengths from lo on, evenly spread; the least sum wins.
constexpr int kScorePoints = 5;
AttentionPlan search(const Pricer& pricer, const AttentionShape& s, uint64_t lo,
                     uint32_t max_cores) {
    check_plannable(s);
    const uint64_t g = s.Hq / s.Hkv;
    const uint64_t budget = pricer.lx_budget();
    AttentionPlan best{};
    uint64_t best_score = 0;
    bool too_large = false;
    std::vector<uint64_t> bqs = {512, 256, 128, 64, 32, 16, 8, 4, 2, 1};
    // with the logsumexp, blocks start on its sticks: also one block of every query (any Lq)
    if (s.lse && std::find(bqs.begin(), bqs.end(), s.Lq) == bqs.end())
        bqs.insert(bqs.begin(), s.Lq);
    for (uint64_t bq : bqs) {
        if (bq > s.Lq || s.Lq % bq || g * bq > isa::kMaxMatDim) continue;
        if (s.lse && !lse_block_fits(s.Lq, bq)) continue;
        for (uint64_t bk : {256, 128, 64}) {
            if (!mask_fits(s, bk) || attention_lx_bytes(s, bq, bk) > budget) continue;
            const uint64_t units = s.B * s.Hkv * (s.Lq / bq);
            AttentionPlan p;
            p.bq = bq, p.bk = bk;
            p.cores = static_cast<uint32_t>(std::min<uint64_t>(max_cores, units));
            for (bool prefetch : {false, true}) {
                // prefetching the next unit's Q needs a second unit on the core
                if (prefetch && (units <= p.cores || attention_lx_bytes(s, bq, bk, true) > budget))
                    continue;
                p.prefetch_q = prefetch;
                p.lx_bytes = attention_lx_bytes(s, bq, bk, prefetch);
                uint64_t score = 0;
                try {
                    price_attention(pricer, s, p);
                    score = p.cycles;
                    for (int i = 0; lo && i < kScorePoints - 1; ++i) {
                        AttentionShape at = s;
                        at.Lk = lo + (s.Lk - lo) * uint64_t(i) / (kScorePoints - 1);
                        AttentionPlan q = p;
                        price_attention(pricer, at, q);
                        score += q.cycles;
                    }
                } catch (const JobTooLarge&) {
                    too_large = true;  // smaller blocks only add work; larger ones may fit
                    continue;
                }
                if (!best.cycles || score < best_score) best = p, best_score = score;
            }
        }
        if (best.cycles && s.Lq / bq >= 32) break;  // enough units; smaller blocks only reread K/V
    }
    if (!best.cycles && too_large)
        throw std::invalid_argument(std::format(
            "attention: {} x {} positions over {} kv heads are more work than one launch may do "
            "(the engine's budget of timed operations per job); split the queries or the batch",
            s.Lq, s.Lk, s.B * s.Hkv));
    if (!best.cycles) throw std::invalid_argument("attention: no block sizes fit the scratchpad");
    return best;
}

}  // namespace

AttentionPlan plan_attention(const Pricer& pricer, const AttentionShape& s, uint32_t max_cores) {
    return search(pricer, s, 0, max_cores);
}

AttentionPlan plan_attention_lengths(const Pricer& pricer, const AttentionShape& s, uint64_t lo,
                                     uint32_t max_cores) {
    if (!s.runtime_lk || s.causal || lo == 0 || lo > s.Lk)
        throw std::invalid_argument("attention: a length range needs runtime_lk, no causal");
    return search(pricer, s, lo == s.Lk ? 0 : lo, max_cores);
}

}  // namespace spyre::ops
