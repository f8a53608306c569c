// SPDX-License-Identifier: MIT
// Internals shared by the row-wise programs (rowwise_program.cpp: block path and naive
// programs; rowwise_long_rows.cpp: the long-row path): constants, the register map, the LX
// layout and the instruction emitter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "ops/rowwise_program.hpp"
#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops::rowwise_detail {

using isa::Alu;
using isa::Bcast;
using isa::Cond;
using isa::DType;
using isa::Red;
using isa::VBin;
using isa::VUn;

constexpr uint64_t kMatK = isa::kMaxMatDim;  // MM K (and N) limit
constexpr float kIotaBias = 8388608.0f;      // 2^23: j + 2^23 is exact in fp32 for j < 2^23
constexpr float kNoIndex = 1073741824.0f;    // 2^30: above every index

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
inline uint64_t es_of(DType t) { return isa::dtype_size(t); }
// Rows whose bytes are a whole number of sticks.
inline uint64_t stick_rows(uint64_t row_bytes) { return kStick / std::gcd(row_bytes, kStick); }

// The most rows a core gets: units are split as evenly as possible.
inline uint64_t core_rows_max(const RowwiseShape& s, uint64_t unit, uint64_t cores) {
    return std::min(ceil_div(ceil_div(s.rows, unit), cores) * unit, s.rows);
}

inline bool has_tail(RowwiseOp op) {
    return op == RowwiseOp::SOFTMAX || op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
}
inline bool has_row_sums(RowwiseOp op) {
    return op == RowwiseOp::SOFTMAX || op == RowwiseOp::LAYER_NORM || op == RowwiseOp::RMS_NORM;
}
inline DType out_type(RowwiseOp op, const RowwiseShape& s) {
    return op == RowwiseOp::ARGMAX ? DType::I32 : s.t;
}
// Type of 1/sum in softmax: the input type while that keeps 1/sum a normal number (sum <= cols,
// so fp16 needs cols <= 2^14), else fp32 (the multiply then runs on the fp32 lanes).
inline DType recip_type(const RowwiseShape& s) {
    if (s.t == DType::F16 && s.cols > 16384) return DType::F32;
    return s.t;
}

// Reductions stage their per-row outputs in groups of this many rows: a multiple of the block
// and of the rows whose outputs fill whole sticks, so blocks need not be stick-sized.
inline uint64_t out_group(RowwiseOp op, const RowwiseShape& s, uint64_t bk) {
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
inline Val R(uint8_t r) { return {true, r}; }
inline Val I(int64_t v) { return {false, v}; }

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
    Buf RES, CARRY_RES;      // add_residual: residual in, then h = x + residual; h's carry
};

// Arguments, the core's row range; then the constants of a block kernel (ones rows for the
// matrix sums, the argmax index row, weight and bias when `affine`).
void emit_prologue(Em& e, RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p, bool naive);
void emit_constants(Em& e, const RowwiseShape& s, const Bufs& u, bool affine);

// The long-row path (rowwise_long_rows.cpp).
std::vector<uint8_t> build_long_rows(RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p);

}  // namespace spyre::ops::rowwise_detail
