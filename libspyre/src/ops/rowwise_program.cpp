// SPDX-License-Identifier: MIT
#include "ops/rowwise_program.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Alu;
using isa::Bcast;
using isa::Cond;
using isa::DType;
using isa::Red;
using isa::VBin;
using isa::VUn;

constexpr uint64_t kStick = 128;
constexpr uint64_t kMatK = isa::kMaxMatDim;  // MM K (and N) limit
constexpr float kIotaBias = 8388608.0f;      // 2^23: j + 2^23 is exact in fp32 for j < 2^23
constexpr float kNoIndex = 1073741824.0f;    // 2^30: above every index

uint64_t up128(uint64_t x) { return (x + kStick - 1) / kStick * kStick; }
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
uint64_t es_of(DType t) { return isa::dtype_size(t); }
// Rows whose bytes are a whole number of sticks.
uint64_t stick_rows(uint64_t row_bytes) { return kStick / std::gcd(row_bytes, kStick); }

// The most rows a core gets: units are split as evenly as possible.
uint64_t core_rows_max(const RowwiseShape& s, uint64_t unit, uint64_t cores) {
    return std::min(ceil_div(ceil_div(s.rows, unit), cores) * unit, s.rows);
}

bool has_tail(RowwiseOp op) {
    return op == RowwiseOp::SOFTMAX || op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
}
bool has_row_sums(RowwiseOp op) {
    return op == RowwiseOp::SOFTMAX || op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
}
DType out_type(RowwiseOp op, const RowwiseShape& s) {
    return op == RowwiseOp::ARGMAX ? DType::I32 : s.t;
}
// Type of 1/sum in softmax: the input type while that keeps 1/sum a normal number (sum <= cols,
// so fp16 needs cols <= 2^14), else fp32 (the multiply then runs on the fp32 lanes).
DType recip_type(const RowwiseShape& s) {
    if (s.t == DType::F16 && s.cols > 16384) return DType::F32;
    return s.t;
}

// Reductions stage their per-row outputs in groups of this many rows: a multiple of the block
// and of the rows whose outputs fill whole sticks, so blocks need not be stick-sized.
uint64_t out_group(RowwiseOp op, const RowwiseShape& s, uint64_t bk) {
    return std::lcm(bk, stick_rows(es_of(out_type(op, s))));
}

// ---- registers ----
constexpr uint8_t rIn = 3, rOut = 4, rW = 5, rB = 6, rScr = 7;
constexpr uint8_t rRow0 = 8, rNrows = 9, rCount = 10, rLoop = 11;
constexpr uint8_t rBlk = 12, rRows = 13, rSlot = 14, rStart = 15;  // block path
constexpr uint8_t rJ = 12, rCols = 13, rLo = 15;                   // long-row path (+ rSlot)
constexpr uint8_t rA0 = 16, rA1 = 17, rA2 = 18, rA3 = 19;          // LX addresses
constexpr uint8_t rD = 20;                                         // r20..r26 descriptor
constexpr uint8_t rT0 = 27, rT1 = 28, rT2 = 29, rT3 = 30, rT4 = 31;
constexpr uint8_t rP = 7, rRr = 27, rAddr = 28, rLen = 29;  // long-row path geometry
constexpr uint8_t rOb = 5;  // reductions (no weight): this block's outputs in the staging buffer
// Blocks that start inside a stick: the block's byte offset in its first stick. Shares r12 with
// rBlk, which is dead once the block's geometry is computed.
constexpr uint8_t rOff = 12;
constexpr uint8_t rHead = 7;  // planned (no scratch): this core's first byte within its stick

struct Val {
    bool reg;
    int64_t v;
};
Val R(uint8_t r) { return {true, r}; }
Val I(int64_t v) { return {false, v}; }

// ---- LX layout: per-slot buffers (one copy per slot) and shared ones ----
struct Buf {
    uint64_t off = 0;
    bool slot = false;
    bool valid = false;
};

class Layout {
  public:
    Buf per_slot(uint64_t bytes) {
        Buf b{slot_bytes_, true, true};
        slot_bytes_ += up128(bytes);
        return b;
    }
    Buf shared(uint64_t bytes) {
        Buf b{shared_bytes_, false, true};
        shared_bytes_ += up128(bytes);
        return b;
    }
    uint64_t slot_bytes() const { return slot_bytes_; }
    uint64_t total(uint32_t slots) const { return slots * slot_bytes_ + shared_bytes_; }
    uint64_t abs(const Buf& b, uint32_t slots) const {
        return b.slot ? b.off : slots * slot_bytes_ + b.off;
    }

  private:
    uint64_t slot_bytes_ = 0, shared_bytes_ = 0;
};

// Emitter: ProgramBuilder plus operands given as registers or immediates.
class Em {
  public:
    ProgramBuilder b;
    const Layout* L = nullptr;
    uint32_t slots = 1;

    void set(uint8_t reg, Val v) {
        if (v.reg)
            b.mov(reg, static_cast<uint8_t>(v.v));
        else
            b.li(reg, v.v);
    }
    void desc(std::initializer_list<Val> vals) {
        uint8_t r = rD;
        for (const Val& v : vals) set(r++, v);
    }
    // reg = address of buffer (per-slot buffers relative to rSlot) + extra
    void addr(uint8_t reg, const Buf& buf, int64_t extra = 0) {
        if (!buf.valid) throw std::logic_error("rowwise: buffer not in the layout");
        if (buf.slot)
            b.addi(reg, rSlot, static_cast<int64_t>(buf.off) + extra);
        else
            b.li(reg, static_cast<int64_t>(L->abs(buf, slots)) + extra);
    }
    void vred(Red f, DType dt, DType st, uint8_t dst, uint8_t src, Val rows, Val cols,
              Val sstride) {
        desc({rows, cols, sstride});
        b.vred(f, 0, dt, st, dst, src, rD);
    }
    void vun(VUn f, DType dt, DType st, uint8_t dst, uint8_t src, Val rows, Val cols, Val dstr,
             Val sstr, float imm = 0.0f) {
        desc({rows, cols, dstr, sstr});
        b.vun(f, dt, st, dst, src, rD, imm);
    }
    void vbin(VBin f, Bcast m, DType dt, DType st, DType s2t, uint8_t dst, uint8_t s1, uint8_t s2,
              Val rows, Val cols, Val dstr, Val s1str, Val s2str, float imm = 0.0f) {
        desc({rows, cols, dstr, s1str, s2str});
        if (m == Bcast::IMM || s2t == st) s2t = isa::kSrcType;
        b.vbin2(f, m, dt, st, s2t, dst, s1, m == Bcast::IMM ? 0 : s2, rD, imm);
    }
    // dst = s1 * s2 + s3; s3 by address register
    void vfma(DType dt, DType st, uint8_t dst, uint8_t s1, uint8_t s2, Bcast m2, DType t2,
              float imm2, uint8_t s3, Bcast m3, DType t3, float imm3, Val rows, Val cols, Val dstr,
              Val s1str, Val s2str, Val s3str) {
        desc({rows, cols, dstr, s1str, s2str, m3 == Bcast::IMM ? I(0) : R(s3), s3str});
        if (m2 == Bcast::IMM || t2 == st) t2 = isa::kSrcType;
        if (m3 == Bcast::IMM || t3 == st) t3 = isa::kSrcType;
        b.vfma(dt, st, dst, s1, m2 == Bcast::IMM ? 0 : s2, rD, m2, m3, imm2, imm3, t2, t3);
    }
    // Bit-exact copy of n elements (a 1 x n transpose keeps the bits).
    void copy(DType t, uint8_t dst, uint8_t src, Val n) {
        desc({I(1), n, I(es_of(t)), I(0)});
        b.vtrans(t, t, dst, src, rD);
    }
    void cmp_br(Cond c, uint8_t reg, int64_t imm, ProgramBuilder::Label l) {
        if (imm == 0) {
            b.br(c, reg, 0, l);
        } else {
            b.li(rT4, imm);
            b.br(c, reg, rT4, l);
        }
    }
    void dma(bool load, uint8_t lx, uint8_t ddr, uint8_t len) {
        b.span(ddr);  // the transfer alone decides the span: any tensor placement works
        if (load)
            b.load(lx, ddr, len);
        else
            b.store(lx, ddr, len);
    }
    // Loads `bytes` from DDR (reg) into a shared buffer once.
    void load_const(const Buf& buf, uint8_t ddr, uint64_t bytes) {
        addr(rA0, buf);
        b.li(rT0, static_cast<int64_t>(bytes));
        b.mov(rT1, ddr);
        dma(true, rA0, rT1, rT0);
    }
};

// ---- the buffers an op uses (block path) ----
struct Bufs {
    Buf X, D, Q, T, MK, VV;  // matrices
    Buf M, S, RR, RS, O;     // per-row statistics / outputs
    Buf ONES, ONES32, IOTA;  // constants
    Buf W, B;                // affine parameters
    Buf CARRY;               // the previous block's last partial output stick
};

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

void rms_stats(Ctx& c) {  // Q = X * X; RS = rsqrt(rowsum(Q) / C + eps)
    Em& e = c.e;
    const int64_t C = c.C;
    xaddr(c, rA1);
    e.addr(rA2, c.u.Q);
    e.vbin(VBin::MUL, Bcast::NONE, DType::F32, c.t, c.t, rA2, rA1, rA1, R(rRows), I(C), I(4 * C),
           I(c.rb), I(c.rb));
    sum_rows(c, c.u.S, rA2, DType::F32, 4 * C);
    rstd(c, c.u.S, c.u.RS);
}
void rms_out(Ctx& c) {  // X = X [* W] * RS
    Em& e = c.e;
    const int64_t C = c.C;
    xaddr(c, rA1);
    e.addr(rA3, c.u.RS);
    if (c.s.has_weight) {
        e.addr(rA0, c.u.W);
        e.addr(rA2, c.u.T);
        e.vbin(VBin::MUL, Bcast::ROW, DType::F32, c.t, c.s.weight_t, rA2, rA1, rA0, R(rRows), I(C),
               I(4 * C), I(c.rb), I(0));
        e.vbin(VBin::MUL, Bcast::COL, c.t, DType::F32, DType::F32, rA1, rA2, rA3, R(rRows), I(C),
               I(c.rb), I(4 * C), I(4));
    } else {
        e.vbin(VBin::MUL, Bcast::COL, c.t, c.t, DType::F32, rA1, rA1, rA3, R(rRows), I(C), I(c.rb),
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
};

// One kernel of the block path: the streams it loads and stores per block and its steps.
struct Kernel {
    std::vector<Stream> ins, outs;
    std::vector<Step> head, tail;
    bool affine = true;        // loads the weight and bias
    bool grouped_out = false;  // reductions: outputs staged in u.O, stored per group
};

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
        e.b.muli(rT1, rStart, static_cast<int64_t>(st.bpr));
        e.b.add(rT1, rT1, st.base_reg);
        if (st.base_imm) e.b.addi(rT1, rT1, static_cast<int64_t>(st.base_imm));
        e.b.muli(rT2, rRows, static_cast<int64_t>(st.bpr));
        e.addr(rT3, st.buf);
        if (off) {
            e.b.sub(rT1, rT1, rOff);
            e.b.add(rT2, rT2, rOff);
        }
        if (off && !load && c.xchg) {
            // the core's last block ends inside a stick the next core continues: receive the
            // next core's first bytes behind this block's and store the stick whole
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
        if (off && !load) {
            e.b.alu(Alu::DIVU, rA1, rOff, 0, c.es);
            e.addr(rA0, c.u.CARRY);
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
        e.dma(load, rT3, rT1, rT2);
        if (off && !load) {
            e.b.alu(Alu::AND, rA1, rT2, 0, kStick - 1);
            e.b.alu(Alu::DIVU, rA1, rA1, 0, c.es);
            e.b.alu(Alu::AND, rA2, rT2, 0, ~int64_t(kStick - 1));
            e.b.add(rA2, rA2, rT3);
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

// =============================================================================================
// Long-row path: one row at a time in chunks of Cc columns (virtual column space: the row's
// first chunk starts at the stick boundary below the row, so every chunk after it starts on a
// stick; a chunk is [max(row start, a), min(row end, a + Cc*es)) of the DDR range from a).

struct ChunkBufs {
    Buf X;                         // per slot: Cc*es bytes
    Buf D, MK, IOTA;               // Cc fp32 / input type / fp32
    Buf PM, PS, GI, CS, WV;        // per-chunk partials of the row (nch entries)
    Buf SH, MR, SR, RR, MEAN, RS;  // row scalars
    Buf CARRY, OB, W, B;
};

struct ChunkGeo {
    uint64_t C, es, rb, cc, ccb, nch, passes, bo;
};

ChunkGeo chunk_geo(RowwiseOp op, const RowwiseShape& s, uint64_t cc, uint64_t rows_per_core) {
    ChunkGeo g{};
    g.C = s.cols, g.es = es_of(s.t), g.rb = g.C * g.es, g.cc = cc, g.ccb = cc * g.es;
    const uint64_t gcd = std::gcd(g.rb, kStick);
    const uint64_t o_max = (kStick - std::min(gcd, kStick)) / g.es;
    g.nch = ceil_div(o_max + g.C, cc);
    g.passes = op == RowwiseOp::LAYER_NORM ? 3 : has_tail(op) ? 2 : 1;
    const uint64_t ou = stick_rows(es_of(out_type(op, s)));
    g.bo = std::min<uint64_t>(ceil_div(std::max<uint64_t>(rows_per_core, 1), ou) * ou, 4096);
    return g;
}

Layout chunk_layout(RowwiseOp op, const RowwiseShape& s, const ChunkGeo& g, ChunkBufs& u) {
    Layout L;
    u.X = L.per_slot(g.ccb);
    const uint64_t arr = g.nch * 4;
    u.D = L.shared(g.cc * 4);
    u.PM = L.shared(arr);
    u.PS = L.shared(arr);
    u.WV = L.shared(arr);
    u.SH = L.shared(4);
    u.MR = L.shared(4);
    u.SR = L.shared(4);
    u.RR = L.shared(4);
    u.MEAN = L.shared(4);
    u.RS = L.shared(4);
    if (has_tail(op)) {
        u.CARRY = L.shared(kStick);
    } else {
        u.OB = L.shared(g.bo * es_of(out_type(op, s)));
    }
    if (op == RowwiseOp::ARGMAX) {
        u.MK = L.shared(g.ccb);
        u.IOTA = L.shared(g.cc * 4);
        u.GI = L.shared(arr);
        u.CS = L.shared(arr);
    }
    if ((op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM) && s.has_weight)
        u.W = L.shared(g.C * es_of(s.weight_t));
    if (op == RowwiseOp::LAYER_NORM && s.has_bias) u.B = L.shared(g.C * es_of(s.bias_t));
    return L;
}

// Geometry of chunk k (register) for a load: rT0 = LX slot base, rT1 = DDR address (input),
// rT2 = bytes. Uses rA0..rA3.
void chunk_load_geo(Em& e, uint8_t k, const ChunkGeo& g, uint64_t slot_bytes) {
    ProgramBuilder& b = e.b;
    const int64_t ccb = g.ccb;
    b.alu(Alu::REMU, rA0, k, 0, g.nch);  // j
    b.alu(Alu::DIVU, rA1, k, 0, g.nch);
    b.alu(Alu::DIVU, rA1, rA1, 0, g.passes);  // row within the core
    b.add(rA1, rA1, rRow0);
    b.muli(rA1, rA1, g.rb);                    // row offset
    b.alu(Alu::AND, rA2, rA1, 0, kStick - 1);  // off
    b.muli(rA3, rA0, ccb);                     // j * ccb
    b.sub(rT1, rA1, rA2);
    b.add(rT1, rT1, rA3);  // aligned chunk start (relative)
    // bytes = clamp(off + rb - j*ccb, 0, ccb)
    b.addi(rT2, rA2, g.rb);
    b.sub(rT2, rT2, rA3);
    b.alu(Alu::MIN, rT2, rT2, 0, ccb);
    b.alu(Alu::MAX, rT2, rT2, 0, 0);
    b.alu(Alu::AND, rT0, k, 0, 1);
    b.muli(rT0, rT0, static_cast<int64_t>(slot_bytes));
}

// Geometry of chunk k (register) for the body: rJ, rP, rRr, rSlot, rLo, rCols, rAddr (aligned
// chunk start relative to the tensor), rLen (bytes from rAddr to the chunk's end, 0 if empty).
void chunk_body_geo(Em& e, uint8_t k, const ChunkGeo& g, uint64_t slot_bytes) {
    ProgramBuilder& b = e.b;
    const int64_t ccb = g.ccb;
    b.alu(Alu::REMU, rJ, k, 0, g.nch);
    b.alu(Alu::DIVU, rRr, k, 0, g.nch);
    b.alu(Alu::REMU, rP, rRr, 0, g.passes);
    b.alu(Alu::DIVU, rRr, rRr, 0, g.passes);
    b.add(rA1, rRr, rRow0);
    b.muli(rA1, rA1, g.rb);
    b.alu(Alu::AND, rA2, rA1, 0, kStick - 1);  // off
    b.muli(rA3, rJ, ccb);
    b.sub(rAddr, rA1, rA2);
    b.add(rAddr, rAddr, rA3);
    b.sub(rLo, rA2, rA3);
    b.alu(Alu::MAX, rLo, rLo, 0, 0);
    b.addi(rLen, rA2, g.rb);
    b.sub(rLen, rLen, rA3);
    b.alu(Alu::MIN, rLen, rLen, 0, ccb);
    b.alu(Alu::MAX, rLen, rLen, 0, 0);
    b.sub(rCols, rLen, rLo);
    b.alu(Alu::MAX, rCols, rCols, 0, 0);
    b.alu(Alu::DIVU, rCols, rCols, 0, g.es);
    b.alu(Alu::AND, rSlot, k, 0, 1);
    b.muli(rSlot, rSlot, static_cast<int64_t>(slot_bytes));
}

struct CCtx {
    const RowwiseShape& s;
    RowwiseOp op;
    Em& e;
    ChunkBufs& u;
    ChunkGeo g;
    DType t;
};

// rA1 = the chunk's data (slot + lo)
void chunk_x(CCtx& c) { c.e.b.add(rA1, rSlot, rLo); }
// reg = buffer + rJ * 4 (partial entry j)
void entry(CCtx& c, uint8_t reg, const Buf& arr, uint64_t es = 4) {
    c.e.b.muli(reg, rJ, static_cast<int64_t>(es));
    c.e.addr(rT4, arr);
    c.e.b.add(reg, reg, rT4);
}
// reg = byte offset of the chunk's data inside its row (column * es)
void chunk_col_bytes(CCtx& c, uint8_t reg) {
    ProgramBuilder& b = c.e.b;
    b.add(reg, rRr, rRow0);
    b.muli(reg, reg, c.g.rb);
    b.sub(reg, rAddr, reg);
    b.add(reg, reg, rLo);
}
void set_arr(CCtx& c, const Buf& arr, DType t, float v) {
    c.e.addr(rA0, arr);
    c.e.vun(VUn::SET, t, t, rA0, rA0, I(1), I(c.g.nch), I(0), I(0), v);
}

// pass 0 of softmax: per-chunk max (PM, input type) and sum of exp(x - max) (PS)
void csm_stats(CCtx& c) {
    Em& e = c.e;
    chunk_x(c);
    entry(c, rA0, c.u.PM, es_of(c.t));
    e.vred(Red::MAX, c.t, c.t, rA0, rA1, I(1), R(rCols), I(0));
    // a chunk of -inf only (max -inf) is shifted by -FLT_MAX so that it sums to 0, not NaN
    e.addr(rA3, c.u.SH);
    e.vbin(VBin::MAX, Bcast::IMM, DType::F32, c.t, DType::F32, rA3, rA0, 0, I(1), I(1), I(0), I(0),
           I(0), -std::numeric_limits<float>::max());
    e.addr(rA2, c.u.D);
    e.vbin(VBin::SUB, Bcast::SCALAR, DType::F32, c.t, DType::F32, rA2, rA1, rA3, I(1), R(rCols),
           I(0), I(0), I(0));
    e.vun(VUn::EXP, DType::F32, DType::F32, rA2, rA2, I(1), R(rCols), I(0), I(0));
    entry(c, rA0, c.u.PS);
    e.vred(Red::SUM, DType::F32, DType::F32, rA0, rA2, I(1), R(rCols), I(0));
}
// end of pass 0: MR = max, SR = sum(PS * exp(PM - MR)), RR = 1/SR or log(SR)
void csm_combine(CCtx& c) {
    Em& e = c.e;
    const int64_t n = c.g.nch;
    e.addr(rA1, c.u.PM);
    e.addr(rA0, c.u.MR);
    e.vred(Red::MAX, c.t, c.t, rA0, rA1, I(1), I(n), I(0));
    e.addr(rA2, c.u.WV);
    e.vbin(VBin::SUB, Bcast::SCALAR, DType::F32, c.t, c.t, rA2, rA1, rA0, I(1), I(n), I(0), I(0),
           I(0));
    e.vun(VUn::EXP, DType::F32, DType::F32, rA2, rA2, I(1), I(n), I(0), I(0));
    e.addr(rA3, c.u.PS);
    e.vbin(VBin::MUL, Bcast::NONE, DType::F32, DType::F32, DType::F32, rA2, rA2, rA3, I(1), I(n),
           I(0), I(0), I(0));
    e.addr(rA0, c.u.SR);
    e.vred(Red::SUM, DType::F32, DType::F32, rA0, rA2, I(1), I(n), I(0));
    e.addr(rA3, c.u.RR);
    e.vun(c.s.log ? VUn::LOG : VUn::RECIP, DType::F32, DType::F32, rA3, rA0, I(1), I(1), I(0),
          I(0));
}
// pass 1: X = exp(X - MR) * RR, or X = (X - MR) - RR
void csm_out(CCtx& c) {
    Em& e = c.e;
    chunk_x(c);
    e.addr(rA0, c.u.MR);
    e.addr(rA2, c.u.D);
    e.addr(rA3, c.u.RR);
    e.vbin(VBin::SUB, Bcast::SCALAR, DType::F32, c.t, c.t, rA2, rA1, rA0, I(1), R(rCols), I(0),
           I(0), I(0));
    if (!c.s.log) {
        e.vun(VUn::EXP, DType::F32, DType::F32, rA2, rA2, I(1), R(rCols), I(0), I(0));
        e.vbin(VBin::MUL, Bcast::SCALAR, c.t, DType::F32, DType::F32, rA1, rA2, rA3, I(1), R(rCols),
               I(0), I(0), I(0));
    } else {
        e.vbin(VBin::SUB, Bcast::SCALAR, c.t, DType::F32, DType::F32, rA1, rA2, rA3, I(1), R(rCols),
               I(0), I(0), I(0));
    }
}

// PS[j] = sum of the chunk (fp32), optionally of (x - MEAN)^2 or x^2
void c_sum(CCtx& c, int what) {  // 0: x, 1: (x - MEAN)^2, 2: x^2
    Em& e = c.e;
    chunk_x(c);
    uint8_t src = rA1;
    DType st = c.t;
    if (what) {
        e.addr(rA2, c.u.D);
        if (what == 1) {
            e.addr(rA3, c.u.MEAN);
            e.vbin(VBin::SUB, Bcast::SCALAR, DType::F32, c.t, DType::F32, rA2, rA1, rA3, I(1),
                   R(rCols), I(0), I(0), I(0));
            e.vbin(VBin::MUL, Bcast::NONE, DType::F32, DType::F32, DType::F32, rA2, rA2, rA2, I(1),
                   R(rCols), I(0), I(0), I(0));
        } else {
            e.vbin(VBin::MUL, Bcast::NONE, DType::F32, c.t, c.t, rA2, rA1, rA1, I(1), R(rCols),
                   I(0), I(0), I(0));
        }
        src = rA2;
        st = DType::F32;
    }
    entry(c, rA0, c.u.PS);
    e.vred(Red::SUM, DType::F32, st, rA0, src, I(1), R(rCols), I(0));
}
// dst (1 element) = sum(PS) [/ C]; rsqrt: RS = rsqrt(sum / C + eps)
void c_total(CCtx& c, const Buf& dst, DType dt, bool div, bool rsqrt) {
    Em& e = c.e;
    e.addr(rA1, c.u.PS);
    e.addr(rA0, c.u.SR);
    e.vred(Red::SUM, DType::F32, DType::F32, rA0, rA1, I(1), I(c.g.nch), I(0));
    e.addr(rA3, dst);
    if (div)
        e.vbin(VBin::DIV, Bcast::IMM, dt, DType::F32, DType::F32, rA3, rA0, 0, I(1), I(1), I(0),
               I(0), I(0), static_cast<float>(c.g.C));
    if (rsqrt) {
        e.vbin(VBin::ADD, Bcast::IMM, DType::F32, DType::F32, DType::F32, rA3, rA3, 0, I(1), I(1),
               I(0), I(0), I(0), c.s.eps);
        e.vun(VUn::RSQRT, DType::F32, DType::F32, rA3, rA3, I(1), I(1), I(0), I(0));
    }
}
// norm output pass: X = ((X - MEAN) [* W]) * RS [+ B] (layer_norm), X [* W] * RS (rms_norm)
void c_norm_out(CCtx& c) {
    Em& e = c.e;
    const RowwiseShape& s = c.s;
    const bool ln = c.op == RowwiseOp::LAYER_NORM;
    chunk_x(c);
    e.addr(rA2, c.u.D);
    e.addr(rA3, c.u.RS);
    if (ln) {
        e.addr(rA0, c.u.MEAN);
        e.vbin(VBin::SUB, Bcast::SCALAR, DType::F32, c.t, DType::F32, rA2, rA1, rA0, I(1), R(rCols),
               I(0), I(0), I(0));
    }
    uint8_t y = ln ? rA2 : rA1;
    DType yt = ln ? DType::F32 : c.t;
    if (s.has_weight) {  // W + column * wes
        chunk_col_bytes(c, rA0);
        if (es_of(s.weight_t) != c.g.es) e.b.muli(rA0, rA0, es_of(s.weight_t) / c.g.es);
        e.addr(rT4, c.u.W);
        e.b.add(rA0, rA0, rT4);
        e.vbin(VBin::MUL, Bcast::ROW, DType::F32, yt, s.weight_t, rA2, y, rA0, I(1), R(rCols), I(0),
               I(0), I(0));
        y = rA2, yt = DType::F32;
    }
    if (ln && s.has_bias) {
        chunk_col_bytes(c, rA0);
        if (es_of(s.bias_t) != c.g.es) e.b.muli(rA0, rA0, es_of(s.bias_t) / c.g.es);
        e.addr(rT4, c.u.B);
        e.b.add(rA0, rA0, rT4);
        e.vfma(c.t, DType::F32, rA1, y, rA3, Bcast::SCALAR, DType::F32, 0.0f, rA0, Bcast::ROW,
               s.bias_t, 0.0f, I(1), R(rCols), I(0), I(0), I(0), I(0));
    } else {
        e.vbin(VBin::MUL, Bcast::SCALAR, c.t, yt, DType::F32, rA1, y, rA3, I(1), R(rCols), I(0),
               I(0), I(0));
    }
}

// reductions, per chunk
void c_red_chunk(CCtx& c) {
    Em& e = c.e;
    switch (c.op) {
        case RowwiseOp::SUM:
        case RowwiseOp::MEAN:
            c_sum(c, 0);
            return;
        case RowwiseOp::MAX:
        case RowwiseOp::MIN:
            chunk_x(c);
            entry(c, rA0, c.u.PM, es_of(c.t));
            e.vred(c.op == RowwiseOp::MAX ? Red::MAX : Red::MIN, c.t, c.t, rA0, rA1, I(1), R(rCols),
                   I(0));
            return;
        default:
            break;
    }
    // ARGMAX: PM[j] = max; GI[j] = first index (in the chunk) of the max or of a NaN
    chunk_x(c);
    entry(c, rA0, c.u.PM, es_of(c.t));
    e.vred(Red::MAX, c.t, c.t, rA0, rA1, I(1), R(rCols), I(0));
    e.addr(rA2, c.u.MK);
    e.vbin(VBin::NE, Bcast::NONE, c.t, c.t, c.t, rA2, rA1, rA1, I(1), R(rCols), I(0), I(0), I(0));
    e.vbin(VBin::EQ, Bcast::SCALAR, c.t, c.t, c.t, rA1, rA1, rA0, I(1), R(rCols), I(0), I(0), I(0));
    e.vbin(VBin::ADD, Bcast::NONE, c.t, c.t, c.t, rA1, rA1, rA2, I(1), R(rCols), I(0), I(0), I(0));
    e.addr(rA2, c.u.D);
    e.addr(rA3, c.u.IOTA);
    e.vfma(DType::F32, c.t, rA2, rA1, 0, Bcast::IMM, DType::F32, -kIotaBias, rA3, Bcast::ROW,
           DType::F32, 0.0f, I(1), R(rCols), I(0), I(0), I(0), I(0));
    entry(c, rA0, c.u.GI);
    e.vred(Red::MIN, DType::F32, DType::F32, rA0, rA2, I(1), R(rCols), I(0));
}
// reductions, end of the row: OB[rr % bo] = result; store the staged rows when full or last
void c_red_row(CCtx& c) {
    Em& e = c.e;
    ProgramBuilder& b = e.b;
    const int64_t n = c.g.nch, bo = c.g.bo;
    const DType ot = out_type(c.op, c.s);
    const int64_t oes = es_of(ot);
    b.alu(Alu::REMU, rT3, rRr, 0, bo);
    b.muli(rA3, rT3, oes);
    e.addr(rT4, c.u.OB);
    b.add(rA3, rA3, rT4);  // rA3 = this row's output element
    switch (c.op) {
        case RowwiseOp::SUM:
            e.addr(rA1, c.u.PS);
            e.vred(Red::SUM, c.t, DType::F32, rA3, rA1, I(1), I(n), I(0));
            break;
        case RowwiseOp::MEAN:
            e.addr(rA1, c.u.PS);
            e.addr(rA0, c.u.SR);
            e.vred(Red::SUM, DType::F32, DType::F32, rA0, rA1, I(1), I(n), I(0));
            e.vbin(VBin::DIV, Bcast::IMM, c.t, DType::F32, DType::F32, rA3, rA0, 0, I(1), I(1),
                   I(0), I(0), I(0), static_cast<float>(c.g.C));
            break;
        case RowwiseOp::MAX:
        case RowwiseOp::MIN:
            e.addr(rA1, c.u.PM);
            e.vred(c.op == RowwiseOp::MAX ? Red::MAX : Red::MIN, c.t, c.t, rA3, rA1, I(1), I(n),
                   I(0));
            break;
        default: {  // ARGMAX over the chunks
            // CS[j] = first column of chunk j = max(j * cc - o, 0), o = off / es
            b.add(rA0, rRr, rRow0);
            b.muli(rA0, rA0, c.g.rb);
            b.alu(Alu::AND, rA0, rA0, 0, kStick - 1);
            b.alu(Alu::DIVU, rA0, rA0, 0, c.g.es);
            b.sub(rA0, 0, rA0);
            e.addr(rA1, c.u.CS);
            e.desc({I(1), I(n), I(0), I(0), I(0), I(c.g.cc), R(rA0)});
            b.viota(DType::F32, rA1, rD);
            e.vbin(VBin::MAX, Bcast::IMM, DType::F32, DType::F32, DType::F32, rA1, rA1, 0, I(1),
                   I(n), I(0), I(0), I(0), 0.0f);
            e.addr(rA2, c.u.GI);
            e.vbin(VBin::ADD, Bcast::NONE, DType::F32, DType::F32, DType::F32, rA2, rA2, rA1, I(1),
                   I(n), I(0), I(0), I(0));
            // mask over the chunk maxima, as within a chunk
            e.addr(rA1, c.u.PM);
            e.addr(rA0, c.u.MR);
            e.vred(Red::MAX, c.t, c.t, rA0, rA1, I(1), I(n), I(0));
            e.addr(rT4, c.u.WV);
            e.vbin(VBin::NE, Bcast::NONE, DType::F32, c.t, c.t, rT4, rA1, rA1, I(1), I(n), I(0),
                   I(0), I(0));
            e.addr(rA1, c.u.PM);
            e.addr(rT3, c.u.D);  // D is free at the end of the row
            e.vbin(VBin::EQ, Bcast::SCALAR, DType::F32, c.t, c.t, rT3, rA1, rA0, I(1), I(n), I(0),
                   I(0), I(0));
            e.vbin(VBin::ADD, Bcast::NONE, DType::F32, DType::F32, DType::F32, rT3, rT3, rT4, I(1),
                   I(n), I(0), I(0), I(0));
            // WV = mask ? GI : 2^30; out = min
            e.desc({I(1), I(n), I(0), I(0), I(0), R(rT3), I(0)});
            b.vsel(DType::F32, DType::F32, rT4, rA2, 0, rD, Bcast::IMM, kNoIndex, false,
                   Bcast::NONE, DType::F32);
            b.alu(Alu::REMU, rA3, rRr, 0, bo);
            b.muli(rA3, rA3, oes);
            e.addr(rA0, c.u.OB);
            b.add(rA3, rA3, rA0);
            e.vred(Red::MIN, DType::I32, DType::F32, rA3, rT4, I(1), I(n), I(0));
            break;
        }
    }
    // flush when the staging buffer is full or this is the core's last row
    ProgramBuilder::Label flush = b.label(), done = b.label();
    b.alu(Alu::REMU, rT3, rRr, 0, bo);
    e.cmp_br(Cond::EQ, rT3, bo - 1, flush);
    b.addi(rA1, rRr, 1);
    b.br(Cond::NE, rA1, rNrows, done);
    b.bind(flush);
    b.sub(rA1, rRr, rT3);
    b.add(rA1, rA1, rRow0);
    b.muli(rA1, rA1, oes);
    b.add(rA1, rA1, rOut);
    b.addi(rA2, rT3, 1);
    b.muli(rA2, rA2, oes);
    e.addr(rA0, c.u.OB);
    e.dma(false, rA0, rA1, rA2);
    b.bind(done);
}

std::vector<uint8_t> build_chunked(RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p) {
    const ChunkGeo g = chunk_geo(op, s, p.chunk_cols, core_rows_max(s, p.row_unit, p.cores));
    ChunkBufs u;
    const Layout L = chunk_layout(op, s, g, u);
    Em e;
    e.L = &L;
    e.slots = 2;
    ProgramBuilder& b = e.b;
    CCtx c{s, op, e, u, g, s.t};
    emit_prologue(e, op, s, p, false);
    {  // constants
        Bufs cu;
        cu.W = u.W, cu.B = u.B;
        emit_constants(e, s, cu, true);
        if (u.IOTA.valid) {
            e.addr(rA0, u.IOTA);
            e.desc({I(1), I(g.cc), I(0), I(0), I(0), I(1), I(static_cast<int64_t>(kIotaBias))});
            b.viota(DType::F32, rA0, rD);
        }
    }
    const uint64_t sb = L.slot_bytes();
    b.muli(rCount, rNrows, static_cast<int64_t>(g.passes * g.nch));
    // first chunk
    b.li(rT3, 0);
    chunk_load_geo(e, rT3, g, sb);
    b.add(rT1, rT1, rIn);
    e.dma(true, rT0, rT1, rT2);
    b.loop(rCount, 0, rLoop);
    {
        ProgramBuilder::Label no_next = b.label();
        b.addi(rT3, rLoop, 1);
        b.br(Cond::GEU, rT3, rCount, no_next);
        chunk_load_geo(e, rT3, g, sb);
        b.add(rT1, rT1, rIn);
        e.dma(true, rT0, rT1, rT2);
        b.bind(no_next);
    }
    chunk_body_geo(e, rLoop, g, sb);
    ProgramBuilder::Label end = b.label();
    const bool tail = has_tail(op);
    for (uint64_t q = 0; q < g.passes; ++q) {
        ProgramBuilder::Label next = b.label();
        if (g.passes > 1) e.cmp_br(Cond::NE, rP, static_cast<int64_t>(q), next);
        const bool last_pass = q + 1 == g.passes;
        if (q == 0) {  // start of a row: partials of empty chunks must be neutral
            ProgramBuilder::Label not_first = b.label();
            b.br(Cond::NE, rJ, 0, not_first);
            switch (op) {
                case RowwiseOp::SOFTMAX:
                case RowwiseOp::ARGMAX:
                case RowwiseOp::MAX:
                    set_arr(c, u.PM, s.t, -INFINITY);
                    break;
                case RowwiseOp::MIN:
                    set_arr(c, u.PM, s.t, INFINITY);
                    break;
                default:
                    break;
            }
            if (op != RowwiseOp::MAX && op != RowwiseOp::MIN) set_arr(c, u.PS, DType::F32, 0.0f);
            if (op == RowwiseOp::ARGMAX) set_arr(c, u.GI, DType::F32, kNoIndex);
            b.bind(not_first);
        } else if (op == RowwiseOp::LAYER_NORM && q == 1) {
            ProgramBuilder::Label not_first = b.label();
            b.br(Cond::NE, rJ, 0, not_first);
            set_arr(c, u.PS, DType::F32, 0.0f);
            b.bind(not_first);
        }
        // chunk work
        if (!tail) {
            c_red_chunk(c);
        } else if (op == RowwiseOp::SOFTMAX) {
            if (q == 0)
                csm_stats(c);
            else
                csm_out(c);
        } else if (op == RowwiseOp::LAYER_NORM) {
            if (q == 0)
                c_sum(c, 0);
            else if (q == 1)
                c_sum(c, 1);
            else
                c_norm_out(c);
        } else {  // RMS_NORM
            if (q == 0)
                c_sum(c, 2);
            else
                c_norm_out(c);
        }
        if (tail && last_pass) {
            // restore the previous row's output tail in front of the row's first chunk
            // (lo > 0 only there), store, and keep this chunk's last partial stick
            b.alu(Alu::DIVU, rT3, rLo, 0, g.es);
            e.addr(rA0, u.CARRY);
            e.copy(s.t, rSlot, rA0, R(rT3));
            b.add(rA2, rAddr, rOut);
            e.dma(false, rSlot, rA2, rLen);
            b.alu(Alu::AND, rT3, rLen, 0, kStick - 1);
            b.alu(Alu::DIVU, rT3, rT3, 0, g.es);
            b.alu(Alu::AND, rA1, rLen, 0, ~int64_t(kStick - 1));
            b.add(rA1, rA1, rSlot);
            e.copy(s.t, rA0, rA1, R(rT3));
        }
        // end of the row's pass
        ProgramBuilder::Label not_last = b.label();
        e.cmp_br(Cond::NE, rJ, static_cast<int64_t>(g.nch - 1), not_last);
        if (!tail) {
            c_red_row(c);
        } else if (op == RowwiseOp::SOFTMAX) {
            if (q == 0) csm_combine(c);
        } else if (op == RowwiseOp::LAYER_NORM) {
            if (q == 0) c_total(c, u.MEAN, DType::F32, true, false);
            if (q == 1) c_total(c, u.RS, DType::F32, true, true);
        } else if (q == 0) {
            c_total(c, u.RS, DType::F32, true, true);
        }
        b.bind(not_last);
        if (g.passes > 1 && !last_pass) b.jmp(end);
        b.bind(next);
    }
    b.bind(end);
    b.endloop();
    b.halt();
    return b.finish();
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
    if (naive && (slots != 2 || skew)) return std::nullopt;
    const uint64_t lx = block_lx(op, s, block_rows, slots, sum_on_matrix, naive);
    if (lx > lx_budget) return std::nullopt;
    RowwisePlan p;
    p.op = op, p.naive = naive, p.cores = cores, p.row_unit = unit, p.block_rows = block_rows;
    p.slots = slots, p.skew = skew, p.sum_on_matrix = sum_on_matrix, p.lx_bytes = lx;
    return p;
}

std::optional<RowwisePlan> fit_rowwise_chunked(RowwiseOp op, const RowwiseShape& s, uint32_t cores,
                                               uint64_t chunk_cols, uint64_t lx_budget) {
    check_rowwise(op, s);
    const uint64_t es = es_of(s.t);
    const uint64_t unit = rowwise_row_unit(op, s, false, true);
    const uint64_t units = ceil_div(s.rows, unit);
    if (cores == 0 || cores > units || chunk_cols == 0 || (chunk_cols * es) % kStick) return {};
    if (chunk_cols > kIotaBias) return std::nullopt;
    const ChunkGeo g = chunk_geo(op, s, chunk_cols, core_rows_max(s, unit, cores));
    ChunkBufs u;
    const Layout L = chunk_layout(op, s, g, u);
    if (L.total(2) > lx_budget) return std::nullopt;
    RowwisePlan p;
    p.op = op, p.cores = cores, p.row_unit = unit, p.block_rows = 0, p.chunk_cols = chunk_cols;
    p.slots = 2, p.lx_bytes = L.total(2);
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
    if (!p.block_rows) return build_chunked(p.op, s, p);
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
