// SPDX-License-Identifier: MIT
// Row-wise programs: the block path (blocks of whole rows in LX), the naive programs and the
// plan checks. The long-row path is in rowwise_long_rows.cpp.
#include <cstdio>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "ops/rowwise_emit.hpp"

namespace spyre::ops {
namespace rowwise_detail {
namespace {

struct Ctx {
    const RowwiseShape& s;
    const RowwisePlan& p;
    RowwiseOp op;
    Em& e;
    Bufs& u;
    uint64_t C, es, rb;
    DType t;
    bool mis;   // blocks may start inside a stick (their data at X + rOff)
    bool xchg;  // cores meet inside sticks (core_boundary_exchange)
};

// reg = the block's first input element
void xaddr(Ctx& c, uint8_t reg) {
    c.e.addr(reg, c.u.X);
    if (c.mis) c.e.b.add(reg, reg, rOff);
}
// reg = the block's first element of what is normalized: x, or h = x + residual
void haddr(Ctx& c, uint8_t reg) {
    if (!c.s.add_residual) return xaddr(c, reg);
    c.e.addr(reg, c.u.RES);
    if (c.mis) c.e.b.add(reg, reg, rOff);
}

// ---- block-path pieces: rRows rows of the block; rSlot = slot base ----

// S = row sums of `rows x C` elements of type et at address register src (row stride).
void sum_rows(Ctx& c, const Buf& S, uint8_t src, DType et, uint64_t stride) {
    Em& e = c.e;
    e.addr(rA0, S);
    if (!c.p.sum_on_matrix) {
        e.vred(Red::SUM, DType::F32, et, rA0, src, R(rRows), I(c.C), I(stride));
        return;
    }
    // ones[1 x K] x E^T: E as stored is N x K (TRANS_B); K split in chunks of at most 4096
    const uint64_t ees = es_of(et);
    e.addr(rA3, et == DType::F32 ? c.u.ONES32 : c.u.ONES);
    for (uint64_t k0 = 0; k0 < c.C; k0 += kMatK) {
        const uint64_t kc = std::min(kMatK, c.C - k0);
        e.b.addi(rT3, src, static_cast<int64_t>(k0 * ees));
        e.desc({I(1), R(rRows), I(kc), I(kc * ees), I(stride), I(4)});
        e.b.matmul(et, rA0, rA3, rT3, rD, k0 > 0, false, true);
    }
}

// RS = rsqrt(V / C + eps), V and RS per-row fp32 (1 x rows).
void rstd(Ctx& c, const Buf& V, const Buf& RS) {
    Em& e = c.e;
    e.addr(rA0, V);
    e.addr(rA3, RS);
    const Val one = I(1);
    e.vbin(VBin::DIV, Bcast::IMM, DType::F32, DType::F32, DType::F32, rA3, rA0, 0, one, R(rRows),
           I(0), I(0), I(0), static_cast<float>(c.C));
    e.vbin(VBin::ADD, Bcast::IMM, DType::F32, DType::F32, DType::F32, rA3, rA3, 0, one, R(rRows),
           I(0), I(0), I(0), c.s.eps);
    e.vun(VUn::RSQRT, DType::F32, DType::F32, rA3, rA3, one, R(rRows), I(0), I(0));
}

void softmax_max_sub(Ctx& c) {  // M = rowmax(X); D = X - M (fp32)
    Em& e = c.e;
    const int64_t C = c.C, rb = c.rb, es = c.es;
    xaddr(c, rA1);
    e.addr(rA0, c.u.M);
    e.vred(Red::MAX, c.t, c.t, rA0, rA1, R(rRows), I(C), I(rb));
    e.addr(rA2, c.u.D);
    e.vbin(VBin::SUB, Bcast::COL, DType::F32, c.t, c.t, rA2, rA1, rA0, R(rRows), I(C), I(4 * C),
           I(rb), I(es));
}
// Where E = exp(D) lives: X (input type), or fp32 in D (softmax) or Q (log_softmax keeps D).
void e_addr(Ctx& c, uint8_t reg) {
    if (!c.s.fp32_exp)
        xaddr(c, reg);
    else
        c.e.addr(reg, c.s.log ? c.u.Q : c.u.D);
}
void softmax_exp(Ctx& c) {  // E = exp(D)
    Em& e = c.e;
    e_addr(c, rA1);
    e.addr(rA2, c.u.D);
    const bool f = c.s.fp32_exp;
    e.vun(VUn::EXP, f ? DType::F32 : c.t, DType::F32, rA1, rA2, R(rRows), I(c.C),
          I(f ? 4 * c.C : c.rb), I(4 * c.C));
}
void softmax_sum(Ctx& c) {  // S = rowsum(E)
    e_addr(c, rA1);
    if (c.s.fp32_exp)
        sum_rows(c, c.u.S, rA1, DType::F32, 4 * c.C);
    else
        sum_rows(c, c.u.S, rA1, c.t, c.rb);
}
void softmax_out(Ctx& c) {  // X = E * (1/S), or X = D - log(S)
    Em& e = c.e;
    const int64_t C = c.C, rb = c.rb;
    e.addr(rA0, c.u.S);
    e.addr(rA3, c.u.RR);
    xaddr(c, rA1);
    if (!c.s.log && c.s.fp32_exp) {
        e.vun(VUn::RECIP, DType::F32, DType::F32, rA3, rA0, I(1), R(rRows), I(0), I(0));
        e.addr(rA2, c.u.D);
        e.vbin(VBin::MUL, Bcast::COL, c.t, DType::F32, DType::F32, rA1, rA2, rA3, R(rRows), I(C),
               I(rb), I(4 * C), I(4));
    } else if (!c.s.log) {
        const DType rt = recip_type(c.s);
        e.vun(VUn::RECIP, rt, DType::F32, rA3, rA0, I(1), R(rRows), I(0), I(0));
        e.vbin(VBin::MUL, Bcast::COL, c.t, c.t, rt, rA1, rA1, rA3, R(rRows), I(C), I(rb), I(rb),
               I(es_of(rt)));
    } else {
        e.vun(VUn::LOG, DType::F32, DType::F32, rA3, rA0, I(1), R(rRows), I(0), I(0));
        e.addr(rA2, c.u.D);
        e.vbin(VBin::SUB, Bcast::COL, c.t, DType::F32, DType::F32, rA1, rA2, rA3, R(rRows), I(C),
               I(rb), I(4 * C), I(4));
    }
}

void ln_mean(Ctx& c) {  // S = rowsum(X); M = S / C (fp32)
    Em& e = c.e;
    xaddr(c, rA1);
    sum_rows(c, c.u.S, rA1, c.t, c.rb);
    e.addr(rA0, c.u.S);
    e.addr(rA3, c.u.M);
    e.vbin(VBin::DIV, Bcast::IMM, DType::F32, DType::F32, DType::F32, rA3, rA0, 0, I(1), R(rRows),
           I(0), I(0), I(0), static_cast<float>(c.C));
}
void ln_center(Ctx& c) {  // D = X - M
    Em& e = c.e;
    const int64_t C = c.C;
    xaddr(c, rA1);
    e.addr(rA0, c.u.M);
    e.addr(rA2, c.u.D);
    e.vbin(VBin::SUB, Bcast::COL, DType::F32, c.t, DType::F32, rA2, rA1, rA0, R(rRows), I(C),
           I(4 * C), I(c.rb), I(4));
}
void ln_var(Ctx& c) {  // Q = D * D; S = rowsum(Q); RS = rsqrt(S / C + eps)
    Em& e = c.e;
    const int64_t C = c.C;
    e.addr(rA2, c.u.D);
    e.addr(rA1, c.u.Q);
    e.vbin(VBin::MUL, Bcast::NONE, DType::F32, DType::F32, DType::F32, rA1, rA2, rA2, R(rRows),
           I(C), I(4 * C), I(4 * C), I(4 * C));
    sum_rows(c, c.u.S, rA1, DType::F32, 4 * C);
    rstd(c, c.u.S, c.u.RS);
}
void ln_out(Ctx& c) {  // X = (D [* W]) * RS [+ B]
    Em& e = c.e;
    const int64_t C = c.C;
    const RowwiseShape& s = c.s;
    e.addr(rA2, c.u.D);
    e.addr(rA3, c.u.RS);
    xaddr(c, rA1);
    if (s.has_weight) {
        e.addr(rA0, c.u.W);
        e.vbin(VBin::MUL, Bcast::ROW, DType::F32, DType::F32, s.weight_t, rA2, rA2, rA0, R(rRows),
               I(C), I(4 * C), I(4 * C), I(0));
    }
    if (s.has_bias) {
        e.addr(rA0, c.u.B);
        e.vfma(c.t, DType::F32, rA1, rA2, rA3, Bcast::COL, DType::F32, 0.0f, rA0, Bcast::ROW,
               s.bias_t, 0.0f, R(rRows), I(C), I(c.rb), I(4 * C), I(4), I(0));
    } else {
        e.vbin(VBin::MUL, Bcast::COL, c.t, DType::F32, DType::F32, rA1, rA2, rA3, R(rRows), I(C),
               I(c.rb), I(4 * C), I(4));
    }
}

void rms_add(Ctx& c) {  // RES = X + RES in the input type (h, rounded as torch rounds it)
    Em& e = c.e;
    xaddr(c, rA1);
    haddr(c, rA2);
    e.vbin(VBin::ADD, Bcast::NONE, c.t, c.t, c.t, rA2, rA1, rA2, R(rRows), I(c.C), I(c.rb), I(c.rb),
           I(c.rb));
}
void rms_stats(Ctx& c) {  // Q = H * H; RS = rsqrt(rowsum(Q) / C + eps)
    Em& e = c.e;
    const int64_t C = c.C;
    haddr(c, rA1);
    e.addr(rA2, c.u.Q);
    e.vbin(VBin::MUL, Bcast::NONE, DType::F32, c.t, c.t, rA2, rA1, rA1, R(rRows), I(C), I(4 * C),
           I(c.rb), I(c.rb));
    sum_rows(c, c.u.S, rA2, DType::F32, 4 * C);
    rstd(c, c.u.S, c.u.RS);
}
void rms_out(Ctx& c) {  // X = H [* W] * RS (H: X itself, or RES with add_residual)
    Em& e = c.e;
    const int64_t C = c.C;
    haddr(c, rA1);
    e.addr(rA3, c.u.RS);
    if (c.s.has_weight) {
        e.addr(rA0, c.u.W);
        e.addr(rA2, c.u.T);
        e.vbin(VBin::MUL, Bcast::ROW, DType::F32, c.t, c.s.weight_t, rA2, rA1, rA0, R(rRows), I(C),
               I(4 * C), I(c.rb), I(0));
        xaddr(c, rA1);
        e.vbin(VBin::MUL, Bcast::COL, c.t, DType::F32, DType::F32, rA1, rA2, rA3, R(rRows), I(C),
               I(c.rb), I(4 * C), I(4));
    } else {
        xaddr(c, rA0);
        e.vbin(VBin::MUL, Bcast::COL, c.t, c.t, DType::F32, rA0, rA1, rA3, R(rRows), I(C), I(c.rb),
               I(c.rb), I(4));
    }
}

void reduce_stat(Ctx& c) {  // SUM/MAX/MIN -> O; MEAN: S; ARGMAX: M
    Em& e = c.e;
    xaddr(c, rA1);
    switch (c.op) {
        case RowwiseOp::SUM:
            e.b.mov(rA0, rOb);
            e.vred(Red::SUM, c.t, c.t, rA0, rA1, R(rRows), I(c.C), I(c.rb));
            break;
        case RowwiseOp::MEAN:
            e.addr(rA0, c.u.S);
            e.vred(Red::SUM, DType::F32, c.t, rA0, rA1, R(rRows), I(c.C), I(c.rb));
            break;
        case RowwiseOp::MAX:
        case RowwiseOp::MIN:
            e.b.mov(rA0, rOb);
            e.vred(c.op == RowwiseOp::MAX ? Red::MAX : Red::MIN, c.t, c.t, rA0, rA1, R(rRows),
                   I(c.C), I(c.rb));
            break;
        default:  // ARGMAX
            e.addr(rA0, c.u.M);
            e.vred(Red::MAX, c.t, c.t, rA0, rA1, R(rRows), I(c.C), I(c.rb));
            break;
    }
}
void reduce_final(Ctx& c) {  // MEAN: O = S / C; ARGMAX: O = first index of the max (or NaN)
    Em& e = c.e;
    const int64_t C = c.C, rb = c.rb, es = c.es;
    if (c.op == RowwiseOp::MEAN) {
        e.addr(rA0, c.u.S);
        e.b.mov(rA3, rOb);
        e.vbin(VBin::DIV, Bcast::IMM, c.t, DType::F32, DType::F32, rA3, rA0, 0, I(1), R(rRows),
               I(0), I(0), I(0), static_cast<float>(c.C));
        return;
    }
    if (c.op != RowwiseOp::ARGMAX) return;
    // mask = (X == max) + (X != X): the max positions, or the NaN positions when the max is NaN
    xaddr(c, rA1);
    e.addr(rA0, c.u.M);
    e.addr(rA2, c.u.MK);
    e.vbin(VBin::NE, Bcast::NONE, c.t, c.t, c.t, rA2, rA1, rA1, R(rRows), I(C), I(rb), I(rb),
           I(rb));
    e.vbin(VBin::EQ, Bcast::COL, c.t, c.t, c.t, rA1, rA1, rA0, R(rRows), I(C), I(rb), I(rb), I(es));
    e.vbin(VBin::ADD, Bcast::NONE, c.t, c.t, c.t, rA1, rA1, rA2, R(rRows), I(C), I(rb), I(rb),
           I(rb));
    // V = mask ? j : j + 2^23 (exact), O = min over the row
    e.addr(rA2, c.u.VV);
    e.addr(rA3, c.u.IOTA);
    e.vfma(DType::F32, c.t, rA2, rA1, 0, Bcast::IMM, DType::F32, -kIotaBias, rA3, Bcast::ROW,
           DType::F32, 0.0f, R(rRows), I(C), I(4 * C), I(rb), I(0), I(0));
    e.b.mov(rA0, rOb);
    e.vred(Red::MIN, DType::I32, DType::F32, rA0, rA2, R(rRows), I(C), I(4 * C));
}

// ---- block path: the op's buffers and steps ----

struct Step {
    std::function<void(Ctx&)> fn;
};

// Buffers of the block path for block_rows rows (naive: statistics streamed, see steps).
Layout block_layout(RowwiseOp op, const RowwiseShape& s, uint64_t bk, bool matrix, bool mis,
                    Bufs& u) {
    Layout L;
    const uint64_t C = s.cols, es = es_of(s.t), rb = C * es;
    const uint64_t stat = bk * 4;
    u.X = L.per_slot(bk * rb + (mis ? kStick : 0));
    if (mis && has_tail(op)) u.CARRY = L.shared(kStick);
    switch (op) {
        case RowwiseOp::SOFTMAX:
            u.M = L.per_slot(stat);
            u.S = L.per_slot(stat);
            u.RR = L.per_slot(stat);
            u.D = s.log || s.fp32_exp ? L.per_slot(bk * C * 4) : L.shared(bk * C * 4);
            if (s.log && s.fp32_exp) u.Q = L.shared(bk * C * 4);
            break;
        case RowwiseOp::LAYER_NORM:
            u.M = L.per_slot(stat);
            u.S = L.per_slot(stat);
            u.RS = L.per_slot(stat);
            u.D = L.per_slot(bk * C * 4);
            u.Q = L.shared(bk * C * 4);
            break;
        case RowwiseOp::RMS_NORM:
            u.S = L.per_slot(stat);
            u.RS = L.per_slot(stat);
            u.Q = L.shared(bk * C * 4);
            if (s.has_weight) u.T = L.shared(bk * C * 4);
            if (s.add_residual) {
                u.RES = L.per_slot(bk * rb + (mis ? kStick : 0));
                if (mis) u.CARRY_RES = L.shared(kStick);
            }
            break;
        default:
            // outputs staged in two groups of out_group rows (stores start on sticks)
            u.O = L.shared(2 * up128(out_group(op, s, bk) * es_of(out_type(op, s))));
            u.M = L.per_slot(stat);
            u.S = L.per_slot(stat);
            if (op == RowwiseOp::ARGMAX) {
                u.MK = L.shared(bk * rb);
                u.VV = L.shared(bk * C * 4);
                u.IOTA = L.shared(C * 4);
            }
            break;
    }
    if (matrix) {
        const uint64_t k = std::min(C, kMatK);
        if (s.t != DType::F32 && op != RowwiseOp::RMS_NORM) u.ONES = L.shared(k * es);
        if (op != RowwiseOp::SOFTMAX || s.t == DType::F32) u.ONES32 = L.shared(k * 4);
    }
    if ((op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM) && s.has_weight)
        u.W = L.shared(C * es_of(s.weight_t));
    if (op == RowwiseOp::LAYER_NORM && s.has_bias) u.B = L.shared(C * es_of(s.bias_t));
    return L;
}

// A DDR stream of one buffer per block: ddr = base_reg + base_imm + first_row * bpr.
struct Stream {
    Buf buf;
    uint8_t base_reg;
    uint64_t base_imm;
    uint64_t bpr;
    bool offset = false;  // rows of the tensor: blocks may start inside a stick
    int arg = -1;         // >= 0: the base is this launch argument (read into rT0), not base_reg
    Buf carry{};          // an offset output's carry stick (default: u.CARRY)
};

// One kernel of the block path: the streams it loads and stores per block and its steps.
struct Kernel {
    std::vector<Stream> ins, outs;
    std::vector<Step> head, tail;
    bool affine = true;        // loads the weight and bias
    bool grouped_out = false;  // reductions: outputs staged in u.O, stored per group
};

}  // namespace

void emit_prologue(Em& e, RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p, bool naive) {
    ProgramBuilder& b = e.b;
    b.arg(rIn, 0);
    b.arg(rOut, 1);
    if (s.has_weight && (op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM)) b.arg(rW, 2);
    if (s.has_bias && op == RowwiseOp::LAYER_NORM) b.arg(rB, 3);
    if (naive) b.arg(rScr, 4);
    // rows [row0, row0 + nrows): units [id*U/n, (id+1)*U/n)
    const int64_t U = ceil_div(s.rows, p.row_unit), n = p.cores;
    const int64_t unit = p.row_unit;
    b.muli(rT0, 1, U);
    b.alu(Alu::DIVU, rT0, rT0, 0, n);
    b.addi(rT1, 1, 1);
    b.muli(rT1, rT1, U);
    b.alu(Alu::DIVU, rT1, rT1, 0, n);
    b.muli(rRow0, rT0, unit);
    b.muli(rT1, rT1, unit);
    b.alu(Alu::MINU, rT1, rT1, 0, static_cast<int64_t>(s.rows));
    b.sub(rNrows, rT1, rRow0);
}

// Constant buffers: ones rows for the matrix sums, the argmax index row, weight and bias.
void emit_constants(Em& e, const RowwiseShape& s, const Bufs& u, bool affine) {
    const int64_t C = s.cols;
    const int64_t k = std::min<int64_t>(C, kMatK);
    if (u.ONES.valid) {
        e.addr(rA0, u.ONES);
        e.vun(VUn::SET, s.t, s.t, rA0, rA0, I(1), I(k), I(0), I(0), 1.0f);
    }
    if (u.ONES32.valid) {
        e.addr(rA0, u.ONES32);
        e.vun(VUn::SET, DType::F32, DType::F32, rA0, rA0, I(1), I(k), I(0), I(0), 1.0f);
    }
    if (u.IOTA.valid) {  // j + 2^23
        e.addr(rA0, u.IOTA);
        e.desc({I(1), I(C), I(4 * C), I(0), I(0), I(1), I(static_cast<int64_t>(kIotaBias))});
        e.b.viota(DType::F32, rA0, rD);
    }
    if (affine && u.W.valid) e.load_const(u.W, rW, s.cols * es_of(s.weight_t));
    if (affine && u.B.valid) e.load_const(u.B, rB, s.cols * es_of(s.bias_t));
}

namespace {

// Block geometry of block index `bi`: rRows, rStart (first row), rSlot; with mis, rOff (the
// block's first byte within its stick; bi may be rOff's register).
void block_geometry(Ctx& c, uint8_t bi, uint64_t slot_bytes) {
    ProgramBuilder& b = c.e.b;
    const int64_t bk = c.p.block_rows;
    b.muli(rT0, bi, bk);
    b.sub(rRows, rNrows, rT0);
    b.alu(Alu::MINU, rRows, rRows, 0, bk);
    b.add(rStart, rRow0, rT0);
    b.alu(Alu::REMU, rSlot, bi, 0, c.p.slots);
    b.muli(rSlot, rSlot, static_cast<int64_t>(slot_bytes));
    if (c.mis) {
        b.muli(rOff, rStart, static_cast<int64_t>(c.rb));
        b.alu(Alu::AND, rOff, rOff, 0, kStick - 1);
    }
}

// Loads or stores the block's streams. A block starting inside a stick moves from the stick
// boundary below it; its store first puts the previous block's output tail (the carry) in
// front of its own rows, and keeps its own last partial stick as the next carry.
void block_dma(Ctx& c, const std::vector<Stream>& ss, bool load) {
    Em& e = c.e;
    for (const Stream& st : ss) {
        const bool off = st.offset && c.mis;
        const Buf& carry = st.carry.valid ? st.carry : c.u.CARRY;
        e.b.muli(rT1, rStart, static_cast<int64_t>(st.bpr));
        if (st.arg >= 0) {
            e.b.arg(rT0, static_cast<uint32_t>(st.arg));
            e.b.add(rT1, rT1, rT0);
        } else {
            e.b.add(rT1, rT1, st.base_reg);
        }
        if (st.base_imm) e.b.addi(rT1, rT1, static_cast<int64_t>(st.base_imm));
        e.b.muli(rT2, rRows, static_cast<int64_t>(st.bpr));
        e.addr(rT3, st.buf);
        if (off) {
            e.b.sub(rT1, rT1, rOff);
            e.b.add(rT2, rT2, rOff);
        }
        if (off && !load) {
            e.b.alu(Alu::DIVU, rA1, rOff, 0, c.es);
            e.addr(rA0, carry);
            e.copy(c.t, rT3, rA0, R(rA1));
        }
        if (off && !load && c.xchg) {
            // the core's first block starts inside a stick the previous core stores: send it
            // this core's bytes of that stick and store from the next stick on
            ProgramBuilder::Label no_send = e.b.label();
            e.b.br(Cond::NE, rStart, rRow0, no_send);
            e.b.br(Cond::EQ, rHead, 0, no_send);
            e.b.li(rA2, kStick);
            e.b.sub(rA2, rA2, rHead);
            e.b.add(rA3, rT3, rHead);
            e.b.send(isa::Dir::PREV, rA3, rA2);
            e.b.addi(rT3, rT3, kStick);
            e.b.addi(rT1, rT1, kStick);
            e.b.addi(rT2, rT2, -static_cast<int64_t>(kStick));
            e.b.bind(no_send);
        }
        if (off && !load && c.xchg) {
            // the core's last block ends inside a stick the next core continues: receive the
            // next core's first bytes behind this block's and store the stick whole (after the
            // send, so that single-block cores do not wait for each other in a chain)
            ProgramBuilder::Label no_recv = e.b.label();
            e.b.add(rA2, rStart, rRows);
            e.b.add(rA3, rRow0, rNrows);
            e.b.br(Cond::NE, rA2, rA3, no_recv);
            e.cmp_br(Cond::EQ, rA2, static_cast<int64_t>(c.s.rows), no_recv);
            e.b.muli(rA2, rA2, static_cast<int64_t>(c.rb));
            e.b.alu(Alu::AND, rA2, rA2, 0, kStick - 1);
            e.b.br(Cond::EQ, rA2, 0, no_recv);
            e.b.li(rA3, kStick);
            e.b.sub(rA2, rA3, rA2);
            e.b.add(rA3, rT3, rT2);
            e.b.recv(isa::Dir::PREV, rA3, rA2);
            e.b.add(rT2, rT2, rA2);
            e.b.bind(no_recv);
        }
        e.dma(load, rT3, rT1, rT2);
        if (off && !load) {
            e.b.alu(Alu::AND, rA1, rT2, 0, kStick - 1);
            e.b.alu(Alu::DIVU, rA1, rA1, 0, c.es);
            e.b.alu(Alu::AND, rA2, rT2, 0, ~int64_t(kStick - 1));
            e.b.add(rA2, rA2, rT3);
            e.addr(rA0, carry);
            e.copy(c.t, rA0, rA2, R(rA1));
        }
    }
}

// rOb = this block's first output in the staging buffer (two groups, by group parity).
// Block rows relative to the core: rStart - rRow0.
void group_pointer(Em& e, const RowwiseShape& s, const RowwisePlan& p, const Layout& L,
                   const Bufs& u) {
    ProgramBuilder& b = e.b;
    const int64_t G = out_group(p.op, s, p.block_rows), oes = es_of(out_type(p.op, s));
    b.sub(rT0, rStart, rRow0);
    b.alu(Alu::DIVU, rT1, rT0, 0, G);
    b.alu(Alu::AND, rT1, rT1, 0, 1);
    b.muli(rT1, rT1, static_cast<int64_t>(up128(G * oes)));
    b.alu(Alu::REMU, rT0, rT0, 0, G);
    b.muli(rT0, rT0, oes);
    b.add(rOb, rT0, rT1);
    b.addi(rOb, rOb, static_cast<int64_t>(L.abs(u.O, p.slots)));
}

// Stores the group when this block completes it (or is the core's last).
void group_store(Em& e, const RowwiseShape& s, const RowwisePlan& p, const Layout& L,
                 const Bufs& u) {
    ProgramBuilder& b = e.b;
    const int64_t G = out_group(p.op, s, p.block_rows), oes = es_of(out_type(p.op, s));
    ProgramBuilder::Label store = b.label(), done = b.label();
    b.sub(rT0, rStart, rRow0);
    b.add(rT0, rT0, rRows);  // end of the block, relative
    b.br(Cond::EQ, rT0, rNrows, store);
    b.alu(Alu::REMU, rT1, rT0, 0, G);
    b.br(Cond::NE, rT1, 0, done);
    b.bind(store);
    b.addi(rT1, rT0, -1);
    b.alu(Alu::DIVU, rT1, rT1, 0, G);  // group index
    b.alu(Alu::AND, rT2, rT1, 0, 1);
    b.muli(rT2, rT2, static_cast<int64_t>(up128(G * oes)));
    b.addi(rT2, rT2, static_cast<int64_t>(L.abs(u.O, p.slots)));
    b.muli(rT1, rT1, G);  // first row of the group, relative
    b.sub(rT3, rT0, rT1);
    b.muli(rT3, rT3, oes);
    b.add(rT1, rT1, rRow0);
    b.muli(rT1, rT1, oes);
    b.add(rT1, rT1, rOut);
    e.dma(false, rT2, rT1, rT3);
    b.bind(done);
}

// Planned block plans of ops with [R, C] outputs and rows of at least a stick split the rows
// over the cores at any row: two cores then meet inside a stick, which the earlier core stores
// whole, with the later core's first bytes sent to it over the ring (a stick then spans at
// most two cores).
bool core_boundary_exchange(RowwiseOp op, const RowwiseShape& s) {
    const uint64_t rb = s.cols * es_of(s.t);
    return has_tail(op) && rb >= kStick && rb % kStick != 0;
}

// Planned blocks of any row count: a block may start inside a stick unless its rows are whole
// sticks (naive plans keep stick-aligned blocks for their statistics streams).
bool misaligned_blocks(const RowwiseShape& s, const RowwisePlan& p) {
    return !p.naive && (s.cols * es_of(s.t)) % kStick != 0;
}

std::vector<uint8_t> emit_block_kernel(RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p,
                                       const Layout& L, Bufs& u, const Kernel& k, bool naive) {
    Em e;
    e.L = &L;
    e.slots = p.slots;
    const uint64_t rb = s.cols * es_of(s.t);
    Ctx c{s,
          p,
          op,
          e,
          u,
          s.cols,
          es_of(s.t),
          rb,
          s.t,
          misaligned_blocks(s, p),
          !naive && core_boundary_exchange(op, s)};
    ProgramBuilder& b = e.b;
    emit_prologue(e, op, s, p, naive);
    if (c.xchg) {
        b.muli(rHead, rRow0, static_cast<int64_t>(rb));
        b.alu(Alu::AND, rHead, rHead, 0, kStick - 1);
    }
    emit_constants(e, s, u, k.affine);
    const int64_t bk = p.block_rows;
    b.addi(rCount, rNrows, bk - 1);
    b.alu(Alu::DIVU, rCount, rCount, 0, bk);
    const uint64_t sb = L.slot_bytes();
    const bool prefetch = p.slots >= 2;
    const int64_t skew = p.skew;
    if (prefetch) {
        b.li(rBlk, 0);
        block_geometry(c, rBlk, sb);
        block_dma(c, k.ins, true);
    }
    b.loop(rCount, skew, rLoop);
    if (prefetch) {  // load block j + 1
        ProgramBuilder::Label no_next = b.label();
        b.addi(rBlk, rLoop, 1);
        b.br(Cond::GEU, rBlk, rCount, no_next);
        block_geometry(c, rBlk, sb);
        block_dma(c, k.ins, true);
        b.bind(no_next);
    }
    {  // head of block j
        ProgramBuilder::Label no_head = b.label();
        if (skew) b.br(Cond::GEU, rLoop, rCount, no_head);
        block_geometry(c, rLoop, sb);
        if (!prefetch) block_dma(c, k.ins, true);
        if (k.grouped_out) group_pointer(e, s, p, L, u);
        for (const Step& st : k.head) st.fn(c);
        if (!skew) {
            for (const Step& st : k.tail) st.fn(c);
            block_dma(c, k.outs, false);
            if (k.grouped_out) group_store(e, s, p, L, u);
        }
        b.bind(no_head);
    }
    if (skew) {  // tail of block j - skew
        ProgramBuilder::Label no_tail = b.label();
        e.cmp_br(Cond::LTU, rLoop, skew, no_tail);
        b.addi(rBlk, rLoop, -skew);
        block_geometry(c, rBlk, sb);
        for (const Step& st : k.tail) st.fn(c);
        block_dma(c, k.outs, false);
        b.bind(no_tail);
    }
    b.endloop();
    b.halt();
    return b.finish();
}

// The planned block kernel: head = statistics, tail = output.
Kernel planned_kernel(RowwiseOp op, const RowwiseShape& s, const Bufs& u) {
    const uint64_t rb = s.cols * es_of(s.t);
    Kernel k;
    k.ins.push_back({u.X, rIn, 0, rb, true});
    switch (op) {
        case RowwiseOp::SOFTMAX:
            k.head = {{softmax_max_sub}, {softmax_exp}, {softmax_sum}};
            k.tail = {{softmax_out}};
            k.outs.push_back({u.X, rOut, 0, rb, true});
            break;
        case RowwiseOp::LAYER_NORM:
            k.head = {{ln_mean}, {ln_center}, {ln_var}};
            k.tail = {{ln_out}};
            k.outs.push_back({u.X, rOut, 0, rb, true});
            break;
        case RowwiseOp::RMS_NORM:
            k.head = {{rms_stats}};
            k.tail = {{rms_out}};
            k.outs.push_back({u.X, rOut, 0, rb, true});
            if (s.add_residual) {  // h = x + residual first; h is stored beside the output
                k.ins.push_back({u.RES, 0, 0, rb, true, kArgResidual});
                k.head.insert(k.head.begin(), {rms_add});
                k.outs.push_back({u.RES, 0, 0, rb, true, kArgOutResidual, u.CARRY_RES});
            }
            break;
        default:
            k.head = {{reduce_stat}, {reduce_final}};
            k.grouped_out = true;
            break;
    }
    return k;
}

// Scratch of the naive kernels: one DDR array per intermediate.
struct NaiveScratch {
    uint64_t e = 0, m = 0, s = 0, rs = 0, total = 0;
};

NaiveScratch naive_scratch(RowwiseOp op, const RowwiseShape& sh) {
    NaiveScratch n;
    const uint64_t R = sh.rows, rb = sh.cols * es_of(sh.t);
    uint64_t at = 0;
    auto take = [&](uint64_t bytes) {
        const uint64_t a = at;
        at += up128(bytes);
        return a;
    };
    switch (op) {
        case RowwiseOp::SOFTMAX:
            n.m = take(R * es_of(sh.t));
            n.e = take(R * (sh.fp32_exp ? sh.cols * 4 : rb));
            n.s = take(R * 4);
            break;
        case RowwiseOp::LAYER_NORM:
            n.m = take(R * 4);
            n.rs = take(R * 4);
            break;
        case RowwiseOp::RMS_NORM:
            n.rs = take(R * 4);
            break;
        case RowwiseOp::MEAN:
            n.s = take(R * 4);
            break;
        case RowwiseOp::ARGMAX:
            n.m = take(R * es_of(sh.t));
            break;
        default:
            break;
    }
    n.total = at;
    return n;
}

// The naive kernels: each step is its own launch, statistics and exp(x - max) go through DDR,
// pointwise work is fused into its consumer (as Inductor schedules it without LX planning).
std::vector<Kernel> naive_kernels(RowwiseOp op, const RowwiseShape& s, const Bufs& u) {
    const uint64_t rb = s.cols * es_of(s.t), es = es_of(s.t);
    const NaiveScratch n = naive_scratch(op, s);
    const Stream x{u.X, rIn, 0, rb}, out{u.X, rOut, 0, rb};
    std::vector<Kernel> ks;
    switch (op) {
        case RowwiseOp::SOFTMAX: {
            const Stream m{u.M, rScr, n.m, es}, sum{u.S, rScr, n.s, 4};
            // E in the input type (in X), or fp32 (in D; log_softmax computes it there too)
            const Stream e =
                s.fp32_exp ? Stream{u.D, rScr, n.e, 4 * s.cols} : Stream{u.X, rScr, n.e, rb};
            auto exp_into_d = [](Ctx& c) {
                c.e.addr(rA2, c.u.D);
                c.e.vun(VUn::EXP, DType::F32, DType::F32, rA2, rA2, R(rRows), I(c.C), I(4 * c.C),
                        I(4 * c.C));
            };
            auto sum_d = [](Ctx& c) {
                c.e.addr(rA1, c.u.D);
                sum_rows(c, c.u.S, rA1, DType::F32, 4 * c.C);
            };
            auto max_only = [](Ctx& c) {
                xaddr(c, rA1);
                c.e.addr(rA0, c.u.M);
                c.e.vred(Red::MAX, c.t, c.t, rA0, rA1, R(rRows), I(c.C), I(c.rb));
            };
            auto sub_only = [](Ctx& c) {
                xaddr(c, rA1);
                c.e.addr(rA0, c.u.M);
                c.e.addr(rA2, c.u.D);
                c.e.vbin(VBin::SUB, Bcast::COL, DType::F32, c.t, c.t, rA2, rA1, rA0, R(rRows),
                         I(c.C), I(4 * c.C), I(c.rb), I(c.es));
            };
            ks.push_back({{x}, {m}, {{max_only}}, {}});
            if (s.fp32_exp) {
                ks.push_back({{x, m}, {e}, {{sub_only}, {exp_into_d}}, {}});
                ks.push_back({{e}, {sum}, {{sum_d}}, {}});
            } else {
                ks.push_back({{x, m}, {e}, {{sub_only}, {softmax_exp}}, {}});
                ks.push_back({{e}, {sum}, {{softmax_sum}}, {}});
            }
            if (!s.log)
                ks.push_back({{e, sum}, {out}, {{softmax_out}}, {}});
            else
                ks.push_back({{x, m, sum}, {out}, {{sub_only}, {softmax_out}}, {}});
            break;
        }
        case RowwiseOp::LAYER_NORM: {
            const Stream mean{u.M, rScr, n.m, 4}, rs{u.RS, rScr, n.rs, 4};
            ks.push_back({{x}, {mean}, {{ln_mean}}, {}, false});
            ks.push_back({{x, mean}, {rs}, {{ln_center}, {ln_var}}, {}, false});
            ks.push_back({{x, mean, rs}, {out}, {{ln_center}, {ln_out}}, {}});
            break;
        }
        case RowwiseOp::RMS_NORM: {
            const Stream rs{u.RS, rScr, n.rs, 4};
            ks.push_back({{x}, {rs}, {{rms_stats}}, {}, false});
            ks.push_back({{x, rs}, {out}, {{rms_out}}, {}});
            break;
        }
        case RowwiseOp::MEAN: {
            const Stream sum{u.S, rScr, n.s, 4};
            ks.push_back({{x}, {sum}, {{reduce_stat}}, {}});
            ks.push_back({{sum}, {}, {{reduce_final}}, {}});
            ks.back().grouped_out = true;
            break;
        }
        case RowwiseOp::ARGMAX: {
            const Stream m{u.M, rScr, n.m, es};
            ks.push_back({{x}, {m}, {{reduce_stat}}, {}});
            ks.push_back({{x, m}, {}, {{reduce_final}}, {}});
            ks.back().grouped_out = true;
            break;
        }
        default:
            ks.push_back(planned_kernel(op, s, u));
            break;
    }
    return ks;
}

void check_dtype(DType t, const char* what) {
    if (t != DType::F16 && t != DType::BF16 && t != DType::F32)
        throw std::invalid_argument(std::string("rowwise: ") + what +
                                    " must be float16, bfloat16 or float32");
}

uint64_t block_lx(RowwiseOp op, const RowwiseShape& s, uint64_t bk, uint32_t slots, bool matrix,
                  bool naive) {
    Bufs u;
    RowwisePlan p;
    p.naive = naive;
    const Layout L = block_layout(op, s, bk, matrix, misaligned_blocks(s, p), u);
    return L.total(slots);
}

}  // namespace
}  // namespace rowwise_detail

using namespace rowwise_detail;

const char* rowwise_op_name(RowwiseOp op, bool log) {
    switch (op) {
        case RowwiseOp::SOFTMAX:
            return log ? "log_softmax" : "softmax";
        case RowwiseOp::LAYER_NORM:
            return "layer_norm";
        case RowwiseOp::RMS_NORM:
            return "rms_norm";
        case RowwiseOp::SUM:
            return "sum";
        case RowwiseOp::MEAN:
            return "mean";
        case RowwiseOp::MAX:
            return "max";
        case RowwiseOp::MIN:
            return "min";
        case RowwiseOp::ARGMAX:
            return "argmax";
    }
    return "?";
}

std::string plan_name(const RowwisePlan& p) {
    char buf[160];
    if (p.block_rows)
        std::snprintf(buf, sizeof buf, "%s%u cores, unit %llu, blocks of %llu rows, %u slots%s%s",
                      p.naive ? "naive, " : "", p.cores, (unsigned long long)p.row_unit,
                      (unsigned long long)p.block_rows, p.slots, p.skew ? ", skewed" : "",
                      p.sum_on_matrix ? ", sums on the matrix unit" : "");
    else
        std::snprintf(buf, sizeof buf, "%u cores, unit %llu, long rows in chunks of %llu columns",
                      p.cores, (unsigned long long)p.row_unit, (unsigned long long)p.chunk_cols);
    return buf;
}

void check_rowwise(RowwiseOp op, const RowwiseShape& s) {
    check_dtype(s.t, "the input type");
    if (s.rows == 0 || s.cols == 0)
        throw std::invalid_argument("rowwise: rows and cols must be at least 1");
    if (s.cols > kRowwiseMaxCols)
        throw std::invalid_argument(
            "rowwise: rows of more than 8388608 (2^23) elements are not "
            "supported (fp32 element counts and indices)");
    const bool norm = op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
    if (norm && s.has_weight && s.weight_t != s.t && s.weight_t != DType::F32)
        throw std::invalid_argument("rowwise: weight must have the input type or float32");
    if (op == RowwiseOp::LAYER_NORM && s.has_bias && s.bias_t != s.t && s.bias_t != DType::F32)
        throw std::invalid_argument("rowwise: bias must have the input type or float32");
    if (op == RowwiseOp::RMS_NORM && s.has_bias)
        throw std::invalid_argument("rowwise: rms_norm has no bias");
    if (op != RowwiseOp::RMS_NORM && s.add_residual)
        throw std::invalid_argument("rowwise: only rms_norm adds a residual");
    if (norm && !(s.eps >= 0.0f)) throw std::invalid_argument("rowwise: eps must be >= 0");
}

uint64_t rowwise_row_unit(RowwiseOp op, const RowwiseShape& s, bool naive, bool long_rows) {
    const uint64_t es = es_of(s.t);
    // planned blocks of output rows: cores may meet inside a stick (shared over the ring)
    if (!naive && !long_rows && core_boundary_exchange(op, s)) return 1;
    uint64_t u = stick_rows(s.cols * es);
    if (!has_tail(op)) u = std::lcm(u, stick_rows(es_of(out_type(op, s))));
    if (naive) {  // the statistics streams: input type (max) and fp32 rows
        u = std::lcm(u, stick_rows(4));
        if (op == RowwiseOp::SOFTMAX || op == RowwiseOp::ARGMAX) u = std::lcm(u, stick_rows(es));
        if (op == RowwiseOp::SOFTMAX && s.fp32_exp) u = std::lcm(u, stick_rows(s.cols * 4));
    }
    return u;
}

uint64_t rowwise_block_unit(RowwiseOp op, const RowwiseShape& s, bool naive) {
    // planned blocks may start inside a stick (and reductions stage their outputs)
    return naive ? rowwise_row_unit(op, s, naive) : 1;
}

std::optional<RowwisePlan> fit_rowwise_block(RowwiseOp op, const RowwiseShape& s, uint32_t cores,
                                             uint64_t block_rows, uint32_t slots, uint32_t skew,
                                             bool sum_on_matrix, uint64_t lx_budget, bool naive) {
    check_rowwise(op, s);
    const uint64_t unit = rowwise_row_unit(op, s, naive);
    const uint64_t units = ceil_div(s.rows, unit);
    if (cores == 0 || cores > units || block_rows == 0) return std::nullopt;
    const uint64_t core_rows = core_rows_max(s, unit, cores);
    const uint64_t bunit = rowwise_block_unit(op, s, naive);
    if (block_rows % bunit && block_rows < core_rows) return std::nullopt;
    if (block_rows > core_rows) block_rows = core_rows;
    if (slots < 1 + (slots > 1 ? 1u : 0u) + skew || slots > 3 || skew > 1) return std::nullopt;
    if (skew && !has_tail(op)) return std::nullopt;
    // fp32 sums of fp32 values: VRED (the matrix unit runs fp32 at 1/4 and accumulates in fp32)
    const bool f32_sums = s.t == DType::F32 || (op == RowwiseOp::SOFTMAX && s.fp32_exp);
    if (sum_on_matrix && (!has_row_sums(op) || f32_sums || block_rows > kMatK)) return std::nullopt;
    if (naive && (slots != 2 || skew || s.add_residual)) return std::nullopt;
    const uint64_t lx = block_lx(op, s, block_rows, slots, sum_on_matrix, naive);
    if (lx > lx_budget) return std::nullopt;
    RowwisePlan p;
    p.op = op, p.naive = naive, p.cores = cores, p.row_unit = unit, p.block_rows = block_rows;
    p.slots = slots, p.skew = skew, p.sum_on_matrix = sum_on_matrix, p.lx_bytes = lx;
    return p;
}

namespace {
// A plan from elsewhere (a cache, a caller) must still describe a valid split of this shape.
void check_plan(const RowwiseShape& s, const RowwisePlan& p) {
    const uint64_t unit = rowwise_row_unit(p.op, s, p.naive, !p.block_rows);
    const bool ok = p.cores >= 1 && p.row_unit == unit && p.cores <= ceil_div(s.rows, unit) &&
                    (p.block_rows || (p.chunk_cols && (p.chunk_cols * es_of(s.t)) % kStick == 0 &&
                                      p.chunk_cols <= kIotaBias));
    if (!ok) throw std::invalid_argument("rowwise: the plan does not fit this shape");
    if (p.block_rows) {
        const auto f = fit_rowwise_block(p.op, s, p.cores, p.block_rows, p.slots, p.skew,
                                         p.sum_on_matrix, UINT64_MAX, p.naive);
        if (!f || f->block_rows != p.block_rows)
            throw std::invalid_argument("rowwise: the plan's blocks do not fit this shape");
    }
}
}  // namespace

std::vector<uint8_t> build_rowwise(const RowwiseShape& s, const RowwisePlan& p) {
    check_rowwise(p.op, s);
    check_plan(s, p);
    if (p.naive)
        throw std::invalid_argument("rowwise: a naive plan builds with build_rowwise_naive");
    if (!p.block_rows) {
        if (s.add_residual)
            throw std::invalid_argument("rowwise: the long-row path does not add a residual");
        return build_long_rows(p.op, s, p);
    }
    Bufs u;
    const Layout L =
        block_layout(p.op, s, p.block_rows, p.sum_on_matrix, misaligned_blocks(s, p), u);
    return emit_block_kernel(p.op, s, p, L, u, planned_kernel(p.op, s, u), false);
}

RowwiseNaive build_rowwise_naive(const RowwiseShape& s, const RowwisePlan& p) {
    check_rowwise(p.op, s);
    if (!p.naive || !p.block_rows) throw std::invalid_argument("rowwise: not a naive block plan");
    check_plan(s, p);
    Bufs u;
    const Layout L =
        block_layout(p.op, s, p.block_rows, p.sum_on_matrix, misaligned_blocks(s, p), u);
    RowwiseNaive n;
    for (const Kernel& k : naive_kernels(p.op, s, u))
        n.kernels.push_back(emit_block_kernel(p.op, s, p, L, u, k, true));
    n.scratch_bytes = naive_scratch(p.op, s).total;
    return n;
}

uint64_t rowwise_output_bytes(RowwiseOp op, const RowwiseShape& s) {
    if (has_tail(op)) return s.rows * s.cols * es_of(s.t);
    return s.rows * es_of(out_type(op, s));
}

}  // namespace spyre::ops
