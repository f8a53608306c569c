// SPDX-License-Identifier: MIT
#include "ops/attention_backward_program.hpp"

#include <algorithm>
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
using Reg = ProgramBuilder::Reg;

// LX of one unit of either pass: R = g * (query rows per head of a tile) rows, bk keys a tile.
// dq pass: acc = dQ [R, D], out = the rounded dQ (the O rows before it); dK/dV pass: acc = dK and
// acc2 = dV [bk, D], out = one of them rounded. The operands that change from tile to tile are
// double buffered (the next tile's arrive while this one computes): K, V and the mask in the dQ
// pass; Q, dO, the mask and the row statistics (stage: lse, dstage: delta) in the dK/dV pass.
// Single-buffered sets have [1] == [0].
struct Layout {
    uint64_t q[2], dout[2], o, k[2], v[2], mask[2], s, dp, p16, ds, stage[2], dstage[2], nlse,
        delta, acc, acc2, out, total;
};

uint64_t mask_row_bytes(const AttentionShape& s, uint64_t bk) {
    return bk * isa::dtype_size(s.mask_t);
}

bool blocks_fit(const AttentionGradShape& g, uint64_t bq, uint64_t bk) {
    const AttentionShape& s = g.a;
    return bq > 0 && bq <= s.Lq && s.Lq % bq == 0 && lse_block_fits(s.Lq, bq) &&
           (s.Hq / s.Hkv) * bq <= isa::kMaxMatDim && bk <= isa::kMaxMatDim &&
           (s.mask == AttentionShape::Mask::NONE || mask_row_bytes(s, bk) % kStick == 0);
}

Layout layout(const AttentionGradShape& gs, bool dkv, uint64_t bq, uint64_t bk) {
    const AttentionShape& s = gs.a;
    const uint64_t es = isa::dtype_size(s.t), g = s.Hq / s.Hkv, R = g * bq, Db = s.D * es;
    Layout l{};
    uint64_t at = 0;
    auto take = [&](uint64_t bytes) {
        const uint64_t a = at;
        at += up128(bytes);
        return a;
    };
    auto pair = [&](uint64_t* set, uint64_t bytes, bool twice) {
        set[0] = take(bytes);
        set[1] = twice ? take(bytes) : set[0];
    };
    pair(l.q, R * Db, dkv);
    pair(l.dout, R * Db, dkv);
    l.o = dkv ? 0 : take(R * Db);
    pair(l.k, bk * Db, !dkv);
    pair(l.v, bk * Db, !dkv);
    const uint64_t mrows = (s.m_st[1] ? g : 1) * (s.m_st[2] ? bq : 1);
    if (s.mask != AttentionShape::Mask::NONE)
        pair(l.mask, mrows * up128(mask_row_bytes(s, bk)), true);
    l.s = take(R * bk * 4);
    l.dp = take(R * bk * 4);
    l.p16 = s.t == DType::F32 ? l.s : take(R * bk * es);
    l.ds = take(R * bk * es);
    pair(l.stage, g * up128(bq * 4), dkv);
    pair(l.dstage, g * up128(bq * 4), dkv);
    l.nlse = take(R * 4);
    l.delta = take(R * 4);
    if (dkv) {
        l.acc = take(bk * s.D * 4);
        l.acc2 = take(bk * s.D * 4);
        l.out = take(bk * Db);
    } else {
        l.acc = take(R * s.D * 4);
        l.out = l.o;
    }
    l.total = at;
    return l;
}

// Bytes spanned by a [B, H, L, D] tensor with byte strides st.
uint64_t extent(const uint64_t* st, uint64_t B, uint64_t H, uint64_t L, uint64_t row) {
    return up128((B - 1) * st[0] + (H - 1) * st[1] + (L - 1) * st[2] + row);
}

// One of the two passes. bq/bk: the tile's query rows per head and keys.
class GradBuilder {
  public:
    GradBuilder(const AttentionGradShape& shape, bool dkv, uint64_t bq, uint64_t bk, uint32_t cores)
        : gs_(shape.resolved()),
          s_(gs_.a),
          dkv_(dkv),
          es_(isa::dtype_size(s_.t)),
          g_(s_.Hq / s_.Hkv),
          bq_(bq),
          bk_(bk),
          R_(g_ * bq),
          D_(s_.D),
          Db_(s_.D * es_),
          LP_(up128(bq * 4)),
          nqb_(s_.Lq / bq),
          nkb_((s_.Lk + bk - 1) / bk),
          off_(int64_t(s_.Lk) - int64_t(s_.Lq)),
          cores_(cores),
          scale_(s_.scale != 0.0f ? s_.scale : 1.0f / std::sqrt(float(s_.D))),
          l_(layout(shape, dkv, bq, bk)) {
        if (s_.Hq % s_.Hkv || Db_ % kStick || !blocks_fit(gs_, bq, bk))
            throw std::invalid_argument("attention backward plan does not fit the shape");
    }

    std::vector<uint8_t> build() {
        const int64_t units = int64_t(s_.B * s_.Hkv) * (dkv_ ? nkb_ : nqb_);
        ProgramBuilder::Label next = b_.label();
        b_.loopi((units + cores_ - 1) / cores_, 20);
        unit_of(20);
        b_.li(10, units);
        b_.br(isa::Cond::GEU, 7, 10, next);
        if (dkv_)
            dkv_unit();
        else
            dq_unit();
        b_.bind(next);
        b_.endloop();
        b_.halt();
        return b_.finish();
    }

  private:
    void vdesc(std::initializer_list<int64_t> v) { b_.set_regs(21, v); }
    // dst = buffer `parity` (a register, r0: buffer 0) of a double-buffered set
    void sel(Reg dst, const uint64_t* set, Reg parity) {
        if (parity == 0 || set[1] == set[0]) {
            b_.li(dst, int64_t(set[0]));
            return;
        }
        b_.muli(dst, parity, int64_t(set[1] - set[0]));
        b_.addi(dst, dst, int64_t(set[0]));
    }
    // The tile's operands: fixed buffers, or (double buffered) the registers the pass set before
    // the tile: dQ pass r2 = K, r5 = V; dK/dV pass r2 = Q, r5 = dO; r6 = the mask in both.
    void q_at(Reg dst) { dkv_ ? b_.mov(dst, 2) : lx(dst, l_.q[0]); }
    void dout_at(Reg dst) { dkv_ ? b_.mov(dst, 5) : lx(dst, l_.dout[0]); }
    void k_at(Reg dst) { dkv_ ? lx(dst, l_.k[0]) : b_.mov(dst, 2); }
    void v_at(Reg dst) { dkv_ ? lx(dst, l_.v[0]) : b_.mov(dst, 5); }
    void operands(Reg parity) {
        if (dkv_) {
            sel(2, l_.q, parity), sel(5, l_.dout, parity);
        } else {
            sel(2, l_.k, parity), sel(5, l_.v, parity);
        }
        if (s_.mask != AttentionShape::Mask::NONE) sel(6, l_.mask, parity);
    }
    void lx(Reg r, uint64_t addr) { b_.li(r, int64_t(addr)); }

    // The unit of round `round` on this core: r7 position, r8 (b, kv head), r9 block, r30 b,
    // r31 kv head. Units go by decreasing cost (causal: the last query blocks see the most
    // keys, the first key blocks the most queries), dealt in rounds of alternating direction.
    void unit_of(Reg round) {
        const int64_t BH = int64_t(s_.B * s_.Hkv), nblk = dkv_ ? nkb_ : nqb_;
        b_.alu(Alu::AND, 10, round, 0, 1);
        b_.muli(11, 1, -2);
        b_.addi(11, 11, cores_ - 1);
        b_.mul(11, 11, 10);
        b_.add(7, 1, 11);
        b_.muli(10, round, cores_);
        b_.add(7, 7, 10);
        b_.li(10, BH);
        b_.alu(Alu::REMU, 8, 7, 10);
        b_.alu(Alu::DIVU, 9, 7, 10);
        if (!dkv_) {
            b_.li(10, nblk - 1);
            b_.sub(9, 10, 9);
        }
        b_.li(10, int64_t(s_.Hkv));
        b_.alu(Alu::DIVU, 30, 8, 10);
        b_.alu(Alu::REMU, 31, 8, 10);
    }

    // dst = base argument + b*st0 + kvh*heads*st1 + blk*rows*st2 (r10 scratch); heads = g for
    // the query side's tensors, 1 for K, V and their gradients
    void rows_addr(Reg dst, int arg, const uint64_t* st, Reg blk, int64_t rows, int64_t heads) {
        b_.arg(dst, uint32_t(arg));
        b_.muli(10, 30, int64_t(st[0]));
        b_.add(dst, dst, 10);
        b_.muli(10, 31, heads * int64_t(st[1]));
        b_.add(dst, dst, 10);
        b_.muli(10, blk, rows * int64_t(st[2]));
        b_.add(dst, dst, 10);
    }

    // The g heads' bq rows of query block `qb` of a [B, Hq, Lq, D] tensor <-> LX (head h at
    // rows h*bq), one DMA.
    void head_rows(bool store, const uint64_t* set, Reg parity, int arg, const uint64_t* st,
                   Reg qb) {
        rows_addr(12, arg, st, qb, bq_, g_);
        sel(28, set, parity);
        b_.li(11, Db_);
        b_.span(12);
        vdesc({bq_, int64_t(st[2]), Db_, g_, int64_t(st[1]), bq_ * Db_});
        if (store)
            b_.store(28, 12, 11, 21);
        else
            b_.load(28, 12, 11, 21);
    }

    // The g heads' bq values of query block qb of an fp32 [B, Hq, Lq] statistic <-> the stage
    // buffer (a stick per head).
    void stat_rows(bool store, const uint64_t* set, Reg parity, int arg, const uint64_t* st,
                   Reg qb) {
        const uint64_t st3[3] = {st[0], st[1], 4};
        rows_addr(12, arg, st3, qb, bq_, g_);
        sel(28, set, parity);
        b_.li(11, bq_ * 4);
        b_.span(12);
        vdesc({g_, int64_t(st[1]), int64_t(LP_), 1, 0, 0});
        if (store)
            b_.store(28, 12, 11, 21);
        else
            b_.load(28, 12, 11, 21);
    }
    // a stage buffer (a stick per head) -> R contiguous values, negated or not
    void unstage(uint64_t dst, const uint64_t* set, Reg parity, VUn f) {
        lx(10, dst);
        sel(11, set, parity);
        vdesc({g_, bq_, bq_ * 4, int64_t(LP_)});
        b_.vun(f, DType::F32, DType::F32, 10, 11, 21);
    }

    // The K and V rows of key block kb (r18 = rows in it; a short last block is zeroed first so
    // the rows past Lk are finite).
    void load_kv(Reg kb, Reg parity) {
        b_.muli(19, kb, bk_);
        b_.li(18, int64_t(s_.Lk));
        b_.sub(18, 18, 19);
        b_.li(10, bk_);
        b_.alu(Alu::MINU, 18, 18, 10);
        sel(28, l_.k, parity);
        sel(29, l_.v, parity);
        if (s_.Lk % bk_) {
            ProgramBuilder::Label full = b_.label();
            b_.br(isa::Cond::EQ, 18, 10, full);
            vdesc({bk_, D_, Db_, Db_});
            b_.vun(VUn::SET, s_.t, s_.t, 28, 0, 21, 0.0f);
            b_.vun(VUn::SET, s_.t, s_.t, 29, 0, 21, 0.0f);
            b_.bind(full);
        }
        const AttentionShape& s = s_;
        for (int kv = 0; kv < 2; ++kv) {
            const uint64_t* st = kv ? s.v_st : s.k_st;
            rows_addr(12, kv ? kGradV : kGradK, st, kb, bk_, 1);
            b_.li(11, Db_);
            b_.mov(21, 18);
            b_.li(22, int64_t(st[2])), b_.li(23, Db_), b_.li(24, 1), b_.li(25, 0), b_.li(26, 0);
            b_.span(12);
            b_.load(kv ? 29 : 28, 12, 11, 21);
        }
    }

    // One tile: query block qb (the g heads' R rows in l.q, l.dout, l.nlse, l.delta) against key
    // block kb (l.k, l.v): P, dP, dS, and the pass's matmuls into its accumulators.
    // The mask rows of tile (qb, kb) into mask buffer `parity`: + kb*bk*mes, min(bk, Lk - kb*bk)
    // columns.
    void load_mask(Reg qb, Reg kb, Reg parity) {
        const AttentionShape& s = s_;
        if (s.mask == AttentionShape::Mask::NONE) return;
        const int64_t mes = isa::dtype_size(s.mask_t), mrow = bk_ * mes, bk = bk_;
        const int64_t mrows = s.m_st[2] ? bq_ : 1, mheads = s.m_st[1] ? g_ : 1;
        {
            rows_addr(12, kGradMask, s.m_st, qb, bq_, g_);
            b_.muli(10, kb, bk * mes);
            b_.add(12, 12, 10);
            b_.muli(19, kb, -bk);
            b_.addi(19, 19, int64_t(s.Lk));
            b_.li(10, bk);
            b_.alu(Alu::MINU, 19, 19, 10);
            b_.muli(11, 19, mes);
            sel(28, l_.mask, parity);
            vdesc({mrows, int64_t(s.m_st[2]), mrow, mheads, int64_t(s.m_st[1]), mrows * mrow});
            b_.span(12);
            b_.load(28, 12, 11, 21);
        }
    }

    // One tile: query block qb (the g heads' R rows of Q and dO, l.nlse, l.delta) against key
    // block kb (K, V), the operands where operands() put them: P, dP, dS, and the pass's matmuls
    // into its accumulators.
    void tile(Reg qb, Reg kb) {
        const AttentionShape& s = s_;
        const float ninf = -std::numeric_limits<float>::infinity();
        const int64_t mes = isa::dtype_size(s.mask_t), mrow = bk_ * mes;
        const int64_t mrows = s.m_st[2] ? bq_ : 1, mheads = s.m_st[1] ? g_ : 1;
        const int64_t R = R_, bk = bk_, D = D_, Db = Db_, es = es_;
        // S = Q K^T
        lx(28, l_.s);
        q_at(29);
        k_at(10);
        vdesc({R, bk, D, Db, Db, bk * 4});
        b_.matmul(s.t, 28, 29, 10, 21, false, false, true);
        // S = scale S + mask - lse (the exponent of P)
        if (s.mask == AttentionShape::Mask::ADD) {
            const bool one_pass = mrows == 1 && mheads == 1;
            for (int64_t h = 0; h < (one_pass ? 1 : g_); ++h) {
                b_.addi(29, 28, h * bq_ * bk * 4);
                vdesc({one_pass ? R : bq_, bk, bk * 4, bk * 4, 0});
                b_.addi(26, 6, s.m_st[1] ? h * mrows * mrow : 0);
                b_.li(27, mrows > 1 ? mrow : 0);
                b_.vfma(DType::F32, DType::F32, 29, 29, 0, 21, Bcast::IMM, Bcast::NONE, scale_,
                        0.0f, isa::kSrcType, s.mask_t);
            }
            lx(29, l_.nlse);
            vdesc({R, bk, bk * 4, bk * 4, 4});
            b_.vbin(VBin::ADD, Bcast::COL, DType::F32, DType::F32, 28, 28, 29, 21);
        } else {
            b_.set_regs(21, {R, bk, bk * 4, bk * 4, 0, int64_t(l_.nlse), 4});
            b_.vfma(DType::F32, DType::F32, 28, 28, 0, 21, Bcast::IMM, Bcast::COL, scale_);
        }
        if (s.mask == AttentionShape::Mask::KEEP) {
            for (int64_t h = 0; h < g_; ++h) {
                b_.addi(29, 28, h * bq_ * bk * 4);
                vdesc({bq_, bk, bk * 4, bk * 4, 0});
                b_.addi(26, 6, s.m_st[1] ? h * mrows * mrow : 0);
                b_.li(27, mrows > 1 ? mrow : 0);
                b_.vsel(DType::F32, DType::F32, 29, 29, 0, 21, Bcast::IMM, ninf, false, Bcast::NONE,
                        DType::I8);
            }
        }
        if (s.Lk % bk) attention_emit::mask_key_tail(b_, kb, R, bk, s.Lk);
        if (s.causal) attention_emit::mask_causal(b_, qb, kb, g_, bq_, bk, off_);
        // P = exp(S), and P in the input type for the matrix unit
        vdesc({R, bk, bk * 4, bk * 4});
        b_.vun(VUn::EXP, DType::F32, DType::F32, 28, 28, 21);
        if (l_.p16 != l_.s) {
            lx(29, l_.p16);
            vdesc({R, bk, bk * es, bk * 4});
            b_.vun(VUn::COPY, s.t, DType::F32, 29, 28, 21);
        }
        if (dkv_) {  // dV += P^T dO
            lx(11, l_.acc2);
            lx(29, l_.p16);
            dout_at(12);
            vdesc({bk, D, R, bk * es, Db, D * 4});
            b_.matmul(s.t, 11, 29, 12, 21, true, true);
        }
        // dP = dO V^T - delta; dS = P dP in the input type
        lx(11, l_.dp);
        dout_at(12);
        v_at(3);
        vdesc({R, bk, D, Db, Db, bk * 4});
        b_.matmul(s.t, 11, 12, 3, 21, false, false, true);
        lx(12, l_.delta);
        vdesc({R, bk, bk * 4, bk * 4, 4});
        b_.vbin(VBin::SUB, Bcast::COL, DType::F32, DType::F32, 11, 11, 12, 21);
        lx(12, l_.ds);
        vdesc({R, bk, bk * es, bk * 4, bk * 4});
        b_.vbin(VBin::MUL, Bcast::NONE, s.t, DType::F32, 12, 28, 11, 21);
        lx(11, l_.acc);
        if (dkv_) {  // dK += dS^T Q
            q_at(3);
            vdesc({bk, D, R, bk * es, Db, D * 4});
            b_.matmul(s.t, 11, 12, 3, 21, true, true);
        } else {  // dQ += dS K
            k_at(3);
            vdesc({R, D, bk, bk * es, Db, D * 4});
            b_.matmul(s.t, 11, 12, 3, 21, true);
        }
    }

    // acc (rows x D fp32) * scale -> out in the input type (or a plain conversion)
    void round_out(uint64_t acc, int64_t rows, float mul) {
        lx(10, l_.out);
        lx(11, acc);
        vdesc({rows, D_, Db_, D_ * 4, 0});
        b_.vbin(VBin::MUL, Bcast::IMM, s_.t, DType::F32, 10, 11, 0, 21, mul);
    }

    void dq_unit() {
        const AttentionGradShape& gs = gs_;
        const int64_t R = R_, D = D_, Db = Db_;
        const uint64_t o2[2] = {l_.o, l_.o};
        head_rows(false, l_.q, 0, kGradQ, gs.a.q_st, 9);
        head_rows(false, l_.dout, 0, kGradDout, gs.do_st, 9);
        head_rows(false, o2, 0, kGradOut, gs.a.o_st, 9);
        // delta = rowsum(dO * O), to DDR for the dK/dV pass
        lx(10, l_.acc);
        lx(11, l_.dout[0]);
        lx(12, l_.o);
        vdesc({R, D, D * 4, Db, Db});
        b_.vbin(VBin::MUL, Bcast::NONE, DType::F32, s_.t, 10, 11, 12, 21);
        lx(11, l_.delta);
        vdesc({R, D, D * 4});
        b_.vred(isa::Red::SUM, 0, DType::F32, DType::F32, 11, 10, 21);
        lx(10, l_.stage[0]);
        vdesc({g_, bq_, int64_t(LP_), bq_ * 4});
        b_.vun(VUn::COPY, DType::F32, DType::F32, 10, 11, 21);
        stat_rows(true, l_.stage, 0, kGradDelta, gs.d_st, 9);
        stat_rows(false, l_.stage, 0, kGradLse, gs.a.l_st, 9);
        unstage(l_.nlse, l_.stage, 0, VUn::NEG);
        lx(10, l_.acc);
        vdesc({R, D, D * 4, D * 4});
        b_.vun(VUn::SET, DType::F32, DType::F32, 10, 0, 21, 0.0f);
        attention_emit::key_block_count(b_, s_.causal, 9, bq_, bk_, off_, nkb_);
        // key block kb + 1 (with its mask) loads while block kb computes
        b_.li(17, 0);
        load_kv(17, 0);
        load_mask(9, 17, 0);
        b_.loop(16, 0, 15);
        {
            ProgramBuilder::Label last = b_.label();
            b_.addi(17, 15, 1);
            b_.br(isa::Cond::GEU, 17, 16, last);
            b_.alu(Alu::AND, 3, 17, 0, 1);
            load_kv(17, 3);
            b_.alu(Alu::AND, 3, 17, 0, 1);
            load_mask(9, 17, 3);
            b_.bind(last);
            b_.alu(Alu::AND, 3, 15, 0, 1);
            operands(3);
            tile(9, 15);
        }
        b_.endloop();
        round_out(l_.acc, R, scale_);
        const uint64_t out2[2] = {l_.out, l_.out};
        head_rows(true, out2, 0, kGradDq, gs.dq_st, 9);
    }

    void dkv_unit() {
        const AttentionGradShape& gs = gs_;
        load_kv(9, 0);
        b_.mov(4, 18);  // rows of this key block, for the stores
        lx(10, l_.acc);
        vdesc({bk_, D_, D_ * 4, D_ * 4});
        b_.vun(VUn::SET, DType::F32, DType::F32, 10, 0, 21, 0.0f);
        lx(10, l_.acc2);
        b_.vun(VUn::SET, DType::F32, DType::F32, 10, 0, 21, 0.0f);
        // query blocks that see a key of the block: from max(0, kb*bk - off) / bq on
        if (s_.causal) {
            b_.muli(13, 9, bk_);
            b_.addi(13, 13, -off_);
            b_.alu(Alu::MAX, 13, 13, 0);
            b_.li(10, bq_);
            b_.alu(Alu::DIVU, 13, 13, 10);
        } else {
            b_.li(13, 0);
        }
        b_.li(16, nqb_);
        b_.sub(16, 16, 13);
        // query block qb + 1's rows, statistics and mask load while block qb computes
        auto prefetch = [&](Reg qb, Reg parity) {
            head_rows(false, l_.q, parity, kGradQ, gs.a.q_st, qb);
            head_rows(false, l_.dout, parity, kGradDout, gs.do_st, qb);
            stat_rows(false, l_.stage, parity, kGradLse, gs.a.l_st, qb);
            stat_rows(false, l_.dstage, parity, kGradDelta, gs.d_st, qb);
            load_mask(qb, 9, parity);
        };
        prefetch(13, 0);
        b_.loop(16, 0, 15);
        {
            ProgramBuilder::Label last = b_.label();
            b_.addi(17, 15, 1);
            b_.br(isa::Cond::GEU, 17, 16, last);
            b_.alu(Alu::AND, 3, 17, 0, 1);
            b_.add(17, 13, 17);
            prefetch(17, 3);
            b_.bind(last);
            b_.add(14, 13, 15);
            b_.alu(Alu::AND, 3, 15, 0, 1);
            unstage(l_.nlse, l_.stage, 3, VUn::NEG);
            unstage(l_.delta, l_.dstage, 3, VUn::COPY);
            operands(3);
            tile(14, 9);
        }
        b_.endloop();
        // dK = scale acc, dV = acc2, rounded, the block's rows
        for (int kv = 0; kv < 2; ++kv) {
            round_out(kv ? l_.acc2 : l_.acc, bk_, kv ? 1.0f : scale_);
            const uint64_t* st = kv ? gs.dv_st : gs.dk_st;
            rows_addr(12, kv ? kGradDv : kGradDk, st, 9, bk_, 1);
            lx(28, l_.out);
            b_.li(11, Db_);
            b_.mov(21, 4);
            b_.li(22, int64_t(st[2])), b_.li(23, Db_), b_.li(24, 1), b_.li(25, 0), b_.li(26, 0);
            b_.span(12);
            b_.store(28, 12, 11, 21);
        }
    }

    const AttentionGradShape gs_;
    const AttentionShape& s_;
    const bool dkv_;
    const int64_t es_, g_, bq_, bk_, R_, D_, Db_;
    const uint64_t LP_;
    const int64_t nqb_, nkb_, off_;
    const int64_t cores_;
    const float scale_;
    const Layout l_;
    ProgramBuilder b_;
};

}  // namespace

AttentionGradShape AttentionGradShape::resolved() const {
    AttentionGradShape r = *this;
    r.a.lse = true;
    r.a = r.a.resolved();
    const uint64_t row = a.D * isa::dtype_size(a.t);
    auto fill = [&](uint64_t* st, uint64_t H, uint64_t L) {
        if (st[0] || st[1] || st[2]) return;
        st[2] = row, st[1] = L * row, st[0] = H * L * row;
    };
    fill(r.do_st, a.Hq, a.Lq);
    fill(r.dq_st, a.Hq, a.Lq);
    fill(r.dk_st, a.Hkv, a.Lk);
    fill(r.dv_st, a.Hkv, a.Lk);
    if (!r.d_st[0] && !r.d_st[1]) dense_row_stat_strides(a.Hq, a.Lq, r.d_st);
    return r;
}

uint64_t attention_dq_lx_bytes(const AttentionGradShape& s, uint64_t bq, uint64_t bk) {
    return blocks_fit(s, bq, bk) ? layout(s, false, bq, bk).total : 0;
}
uint64_t attention_dkv_lx_bytes(const AttentionGradShape& s, uint64_t kq, uint64_t kk) {
    return blocks_fit(s, kq, kk) ? layout(s, true, kq, kk).total : 0;
}

std::vector<uint8_t> build_attention_dq(const AttentionGradShape& s, const AttentionGradPlan& p) {
    return GradBuilder(s, false, p.bq, p.bk, p.dq_cores).build();
}
std::vector<uint8_t> build_attention_dkv(const AttentionGradShape& s, const AttentionGradPlan& p) {
    return GradBuilder(s, true, p.kq, p.kk, p.dkv_cores).build();
}

uint64_t attention_grad_tensor_bytes(const AttentionGradShape& shape, int which) {
    const AttentionGradShape s = shape.resolved();
    const AttentionShape& a = s.a;
    const uint64_t row = a.D * isa::dtype_size(a.t);
    switch (which) {
        case kGradQ:
        case kGradK:
        case kGradV:
        case kGradOut:
        case kGradMask:
        case kGradLse:
            return attention_tensor_bytes(a, which);
        case kGradDout:
            return extent(s.do_st, a.B, a.Hq, a.Lq, row);
        case kGradDelta:
            return extent(s.d_st, a.B, a.Hq, 1, a.Lq * 4);
        case kGradDq:
            return extent(s.dq_st, a.B, a.Hq, a.Lq, row);
        case kGradDk:
            return extent(s.dk_st, a.B, a.Hkv, a.Lk, row);
        default:
            return extent(s.dv_st, a.B, a.Hkv, a.Lk, row);
    }
}

namespace {

// The modeled cycles of one pass's program, 0 if it is more work than one job may do.
uint64_t price(const Pricer& pricer, const AttentionGradShape& s, const std::vector<uint8_t>& img,
               uint32_t cores) {
    std::vector<uint64_t> args(kGradArgs);
    uint64_t at = 0;
    for (int i = 0; i < kGradArgs; ++i) args[i] = at, at += attention_grad_tensor_bytes(s, i);
    try {
        return pricer.price(img, cores, args, at).total_cycles;
    } catch (const JobTooLarge&) {
        return 0;
    }
}

void check_grad_plannable(const AttentionGradShape& gs) {
    const AttentionShape& s = gs.a;
    if (s.Hkv == 0 || s.Hq % s.Hkv || s.D == 0 || (s.D * isa::dtype_size(s.t)) % kStick)
        throw std::invalid_argument(
            "attention backward: Hq must be a multiple of Hkv and a head row a multiple of 128 "
            "bytes");
    const AttentionGradShape r = gs.resolved();
    for (const uint64_t* st :
         {r.a.q_st, r.a.k_st, r.a.v_st, r.a.o_st, r.a.m_st, r.do_st, r.dq_st, r.dk_st, r.dv_st})
        for (int d = 0; d < 3; ++d)
            if (st[d] % kStick)
                throw std::invalid_argument(
                    "attention backward: batch, head and position strides must be multiples of "
                    "128 bytes");
    for (const uint64_t* st : {r.a.l_st, r.d_st})
        for (int d = 0; d < 2; ++d)
            if (st[d] % kStick)
                throw std::invalid_argument(
                    "attention backward: the logsumexp's batch and head strides must be "
                    "multiples of 128 bytes");
}

}  // namespace

AttentionGradPlan plan_attention_grad(const Pricer& pricer, const AttentionGradShape& s,
                                      uint32_t max_cores, int passes) {
    check_grad_plannable(s);
    const AttentionShape& a = s.a;
    const uint64_t budget = pricer.lx_budget();
    std::vector<uint64_t> bqs = {256, 128, 64, 32};
    if (std::find(bqs.begin(), bqs.end(), a.Lq) == bqs.end()) bqs.insert(bqs.begin(), a.Lq);
    AttentionGradPlan best;
    bool too_large = false;
    // dQ pass: units (b, kv head, query block)
    for (uint64_t bq : passes & 1 ? bqs : std::vector<uint64_t>{})
        for (uint64_t bk : {64, 128}) {
            const uint64_t lxb = attention_dq_lx_bytes(s, bq, bk);
            if (!lxb || lxb > budget) continue;
            AttentionGradPlan p = best;
            p.bq = bq, p.bk = bk, p.dq_lx = lxb;
            p.dq_cores = uint32_t(std::min<uint64_t>(max_cores, a.B * a.Hkv * (a.Lq / bq)));
            const uint64_t c = price(pricer, s, build_attention_dq(s, p), p.dq_cores);
            too_large = too_large || !c;
            if (c && (!best.dq_cycles || c < best.dq_cycles))
                best.bq = bq, best.bk = bk, best.dq_lx = lxb, best.dq_cores = p.dq_cores,
                best.dq_cycles = c;
        }
    // dK/dV pass: units (b, kv head, key block)
    for (uint64_t kq : passes & 2 ? bqs : std::vector<uint64_t>{})
        for (uint64_t kk : {32, 64, 128, 256}) {
            const uint64_t lxb = attention_dkv_lx_bytes(s, kq, kk);
            if (!lxb || lxb > budget) continue;
            AttentionGradPlan p = best;
            p.kq = kq, p.kk = kk, p.dkv_lx = lxb;
            p.dkv_cores =
                uint32_t(std::min<uint64_t>(max_cores, a.B * a.Hkv * ((a.Lk + kk - 1) / kk)));
            const uint64_t c = price(pricer, s, build_attention_dkv(s, p), p.dkv_cores);
            too_large = too_large || !c;
            if (c && (!best.dkv_cycles || c < best.dkv_cycles))
                best.kq = kq, best.kk = kk, best.dkv_lx = lxb, best.dkv_cores = p.dkv_cores,
                best.dkv_cycles = c;
        }
    if (((passes & 1) && !best.dq_cycles) || ((passes & 2) && !best.dkv_cycles))
        throw std::invalid_argument(
            too_large ? std::format("attention backward: {} x {} positions over {} kv heads are "
                                    "more work than one launch may do (the engine's budget of "
                                    "timed operations per job)",
                                    a.Lq, a.Lk, a.B * a.Hkv)
                      : std::string("attention backward: no block sizes fit the scratchpad"));
    return best;
}

}  // namespace spyre::ops
