// SPDX-License-Identifier: MIT
// The long-row path of the row-wise programs: rows that do not fit LX with their fp32 scratch,
// one row at a time in column chunks (Documentation/ops-rowwise.md "Long-row path").
#include <cmath>
#include <limits>

#include "ops/rowwise_emit.hpp"

namespace spyre::ops {
namespace rowwise_detail {
namespace {

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

}  // namespace

std::vector<uint8_t> build_long_rows(RowwiseOp op, const RowwiseShape& s, const RowwisePlan& p) {
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

}  // namespace rowwise_detail

using namespace rowwise_detail;

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

}  // namespace spyre::ops
