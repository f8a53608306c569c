// SPDX-License-Identifier: MIT
#include "ops/elementwise_program.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "ops/chunk_loop.hpp"
#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Bcast;
using isa::DType;
using Reg = ProgramBuilder::Reg;

uint64_t es_of(DType t) { return isa::dtype_size(t); }

// Where a vector operand lives. A, B, COND are the inputs (full ones in the chunk buffers,
// broadcast ones wherever their mode puts them); OUT is the output chunk; TMP an fp32 chunk for
// multi-pass ops; ZERO an fp32 zero at LX 0 (a mask that selects y); ARG a scalar the caller
// gives at launch (LX stick 0, see kArgLx); IMM a constant of the program itself (no storage).
enum class Loc : uint8_t { A, B, COND, OUT, TMP, ZERO, ARG, IMM };

struct Opd {
    Loc loc = Loc::IMM;
    DType t = DType::F32;
    Bcast mode = Bcast::IMM;
    float imm = 0.0f;
    int64_t iimm = 0;  // VINT IMM
    uint8_t slot = 0;  // ARG: launch argument kFirstScalarArg + slot
};

// Scalars are launch arguments, not immediates, so that one program serves every value (an
// optimizer's step size changes every call): the program reads argument kFirstScalarArg + i with
// ARG and stores it with LXST at kArgLx + 8 i, in stick 0 beside the zero scalar, where the
// vector instructions read it as a SCALAR operand (fp32 for the float ops: the fp32 value the
// immediate had, bit for bit; the source type for VINT: its low bytes).
constexpr uint32_t kFirstScalarArg = 4;
constexpr uint64_t kArgLx = 8;
constexpr size_t kMaxScalars = 16 - kFirstScalarArg;  // a launch takes 16 arguments
static_assert(kArgLx + 8 * kMaxScalars <= kStick, "the numbers share stick 0");

// The scalars of one shape in slot order, collected while its passes are made.
struct Scalars {
    std::vector<uint64_t> bits;
    Opd slot(uint64_t v, DType t) {
        if (bits.size() >= kMaxScalars) throw std::logic_error("elementwise: too many scalars");
        bits.push_back(v);
        Opd o{Loc::ARG, t, Bcast::SCALAR, 0.0f, 0, static_cast<uint8_t>(bits.size() - 1)};
        return o;
    }
    Opd f32(float v) { return slot(std::bit_cast<uint32_t>(v), DType::F32); }
    Opd integer(int64_t v, DType t) { return slot(static_cast<uint64_t>(v), t); }
};

// One vector pass over the chunk. VUN: d = f(x); VBIN: d = x f y; VFMA: d = x * y + z;
// VSEL: d = z != 0 ? x : y (invert: z != 0 ? y : x).
struct Step {
    isa::Op op;
    uint8_t func;
    Opd d, x, y, z;
    bool invert = false;
};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool valid_type(DType t) { return static_cast<uint8_t>(t) < isa::kVecTypes; }

bool has_b(EwOp op) { return !ew_is_unary(op) && op != EwOp::AFFINE; }
bool has_cond(EwOp op) { return op == EwOp::WHERE || op == EwOp::CLAMP; }

bool fits(int64_t v, DType t) {
    switch (t) {
        case DType::I8:
            return v >= -128 && v <= 127;
        case DType::U8:
            return v >= 0 && v <= 255;
        case DType::I32:
            return v >= INT32_MIN && v <= INT32_MAX;
        default:
            return true;
    }
}

// Whether the integer scalar b goes in as a launch argument: VINT reads a SCALAR operand in the
// source type, so a value outside a's type would be wrapped first. That changes nothing for the
// wrapping ops; the others (compares, division, shifts, max/min) keep such a value (which torch
// refuses for most ops anyway) as an immediate of their program.
bool int_scalar_is_arg(const EwShape& s) {
    switch (s.op) {
        case EwOp::ADD:
        case EwOp::SUB:
        case EwOp::MUL:
        case EwOp::AND:
        case EwOp::OR:
        case EwOp::XOR:
            return true;
        default:
            return fits(s.b.iimm, s.a.t);
    }
}

// An input as a pass operand; a host value (IMM mode) becomes a launch-argument scalar.
Opd input(const EwShape& s, Loc l, Scalars& sc) {
    const EwOperand& o = l == Loc::A ? s.a : l == Loc::B ? s.b : s.cond;
    if (o.mode != Bcast::IMM) return {l, o.t, o.mode, o.imm, o.iimm};
    if (!ew_is_int(s)) return sc.f32(o.imm);
    if (int_scalar_is_arg(s)) return sc.integer(o.iimm, s.a.t);
    return {l, o.t, o.mode, o.imm, o.iimm};
}
Opd out_opd(const EwShape& s) { return {Loc::OUT, s.out, Bcast::NONE, 0.0f}; }
Opd tmp_opd() { return {Loc::TMP, DType::F32, Bcast::NONE, 0.0f}; }
Opd imm_opd(float v) { return {Loc::IMM, DType::F32, Bcast::IMM, v}; }
Opd zero_opd() { return {Loc::ZERO, DType::F32, Bcast::SCALAR, 0.0f}; }

// TMP = y, exactly (a select whose mask is the zero scalar): a broadcast operand made full.
Step materialize(const Opd& y) {
    return {isa::Op::VSEL, 0, tmp_opd(), tmp_opd(), y, zero_opd(), false};
}

Step vun(isa::VUn f, Opd d, Opd x) { return {isa::Op::VUN, static_cast<uint8_t>(f), d, x, {}, {}}; }
Step vbin(isa::VBin f, Opd d, Opd x, Opd y) {
    return {isa::Op::VBIN, static_cast<uint8_t>(f), d, x, y, {}};
}
Step vint(isa::VInt f, Opd d, Opd x, Opd y = {}) {
    return {isa::Op::VINT, static_cast<uint8_t>(f), d, x, y, {}};
}
Step vfma(Opd d, Opd x, Opd y, Opd z) { return {isa::Op::VFMA, 0, d, x, y, z}; }
Step vsel(Opd d, Opd x, Opd y, Opd mask, bool invert) {
    return {isa::Op::VSEL, 0, d, x, y, mask, invert};
}

static_assert(int(EwOp::ATANH) - int(EwOp::FLOOR) == int(isa::VUn::ATANH) - int(isa::VUn::FLOOR));
isa::VUn native_unary(EwOp op) {
    switch (op) {
        case EwOp::RELU:
            return isa::VUn::RELU;
        case EwOp::GELU:
            return isa::VUn::GELU;
        case EwOp::GELU_TANH:
            return isa::VUn::GELU_TANH;
        case EwOp::SILU:
            return isa::VUn::SILU;
        case EwOp::EXP:
            return isa::VUn::EXP;
        case EwOp::LOG:
            return isa::VUn::LOG;
        case EwOp::TANH:
            return isa::VUn::TANH;
        case EwOp::NEG:
            return isa::VUn::NEG;
        case EwOp::ABS:
            return isa::VUn::ABS;
        case EwOp::SQRT:
            return isa::VUn::SQRT;
        case EwOp::RSQRT:
            return isa::VUn::RSQRT;
        case EwOp::RECIP:
            return isa::VUn::RECIP;
        case EwOp::SIN:
            return isa::VUn::SIN;
        case EwOp::COS:
            return isa::VUn::COS;
        default:
            // FLOOR .. ATANH are the ISA's FLOOR .. ATANH in the same order
            if (op >= EwOp::FLOOR && op <= EwOp::ATANH)
                return static_cast<isa::VUn>(static_cast<uint8_t>(isa::VUn::FLOOR) +
                                             static_cast<uint8_t>(op) -
                                             static_cast<uint8_t>(EwOp::FLOOR));
            return isa::VUn::COPY;
    }
}

isa::VBin binary_func(EwOp op) {
    return static_cast<isa::VBin>(static_cast<uint8_t>(op) - static_cast<uint8_t>(EwOp::ADD));
}

// a op b == b op' a for the order compares
isa::VBin swapped(isa::VBin f) {
    switch (f) {
        case isa::VBin::LT:
            return isa::VBin::GT;
        case isa::VBin::LE:
            return isa::VBin::GE;
        case isa::VBin::GT:
            return isa::VBin::LT;
        case isa::VBin::GE:
            return isa::VBin::LE;
        default:
            return f;
    }
}

isa::VInt int_func(EwOp op) {
    switch (op) {
        case EwOp::ADD:
            return isa::VInt::ADD;
        case EwOp::SUB:
            return isa::VInt::SUB;
        case EwOp::MUL:
            return isa::VInt::MUL;
        case EwOp::MAX:
            return isa::VInt::MAX;
        case EwOp::MIN:
            return isa::VInt::MIN;
        case EwOp::EQ:
            return isa::VInt::EQ;
        case EwOp::NE:
            return isa::VInt::NE;
        case EwOp::LT:
            return isa::VInt::LT;
        case EwOp::LE:
            return isa::VInt::LE;
        case EwOp::GT:
            return isa::VInt::GT;
        case EwOp::GE:
            return isa::VInt::GE;
        case EwOp::FLOOR_DIV:
            return isa::VInt::DIV;
        case EwOp::REM:
            return isa::VInt::REM;
        case EwOp::AND:
            return isa::VInt::AND;
        case EwOp::OR:
            return isa::VInt::OR;
        case EwOp::XOR:
            return isa::VInt::XOR;
        case EwOp::SHL:
            return isa::VInt::SHL;
        case EwOp::SHR:
            return isa::VInt::SHR;
        case EwOp::NEG:
            return isa::VInt::NEG;
        case EwOp::ABS:
            return isa::VInt::ABS;
        case EwOp::NOT:
            return isa::VInt::NOT;
        default:
            return isa::VInt::CVT;
    }
}

isa::VInt int_swapped(isa::VInt f) {
    switch (f) {
        case isa::VInt::LT:
            return isa::VInt::GT;
        case isa::VInt::LE:
            return isa::VInt::GE;
        case isa::VInt::GT:
            return isa::VInt::LT;
        case isa::VInt::GE:
            return isa::VInt::LE;
        default:
            return f;
    }
}

int64_t wrap_mul(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// The VINT passes of an integer shape (exact, so operands may be swapped or scaled freely).
// Scratch is the full b's own chunk buffer (b * alpha in place), never a temporary.
std::vector<Step> int_steps(const EwShape& s, Scalars& sc) {
    const Opd A = input(s, Loc::A, sc), O = out_opd(s);
    const isa::VInt f = int_func(s.op);
    if (ew_is_unary(s.op)) return {vint(f, O, A)};
    const bool fa = A.mode == Bcast::NONE, fb = s.b.mode == Bcast::NONE;
    if (s.op == EwOp::ADD || s.op == EwOp::SUB) {
        // a + k * b, k = alpha or -alpha (wrapping like torch's integer alpha)
        const int64_t k = s.op == EwOp::SUB ? wrap_mul(s.ialpha, -1) : s.ialpha;
        if (s.b.mode == Bcast::IMM) {  // k * b folded into one scalar
            if (!fa) throw std::invalid_argument("a and b both broadcast (make one contiguous)");
            return {vint(isa::VInt::ADD, O, A, sc.integer(wrap_mul(k, s.b.iimm), s.a.t))};
        }
        const Opd B = input(s, Loc::B, sc);
        if (!fa && !fb) throw std::invalid_argument("a and b both broadcast (make one contiguous)");
        if (k == 1) return {fa ? vint(isa::VInt::ADD, O, A, B) : vint(isa::VInt::ADD, O, B, A)};
        if (k == -1 && fa) return {vint(isa::VInt::SUB, O, A, B)};
        if (!fb) throw std::invalid_argument("alpha with a broadcast b");
        std::vector<Step> st;
        if (k == -1)
            st.push_back(vint(isa::VInt::NEG, B, B));
        else
            st.push_back(vint(isa::VInt::MUL, B, B, sc.integer(k, s.a.t)));
        st.push_back(fa ? vint(isa::VInt::ADD, O, A, B) : vint(isa::VInt::ADD, O, B, A));
        return st;
    }
    const Opd B = input(s, Loc::B, sc);
    if (!fa && !fb) throw std::invalid_argument("a and b both broadcast (make one contiguous)");
    if (fa) return {vint(f, O, A, B)};
    switch (f) {
        case isa::VInt::DIV:
        case isa::VInt::REM:
        case isa::VInt::SHL:
        case isa::VInt::SHR:
            throw std::invalid_argument("a broadcast a needs a commutative op (make a contiguous)");
        default:
            return {vint(int_swapped(f), O, B, A)};
    }
}

// The passes of an op. Every formula is written so that the result equals the op rounded as
// the ISA rounds it: broadcast-first operands are swapped only where that is exact, otherwise
// made full first (VSEL copy, exact in fp32).
// Host values become launch-argument scalars in sc, in the order the passes name them.
std::vector<Step> make_steps(const EwShape& s, Scalars& sc) {
    if (ew_is_int(s)) return int_steps(s, sc);
    const Opd O = out_opd(s), T = tmp_opd();
    std::vector<Step> st;
    if (ew_is_unary(s.op)) {
        const Opd A = input(s, Loc::A, sc);
        if (s.op == EwOp::CAST) return {vun(isa::VUn::COPY, O, A)};
        if (s.op == EwOp::SIGMOID)  // 1 / (1 + exp(-x)): no cancellation for x << 0
            return {vun(isa::VUn::NEG, T, A), vun(isa::VUn::EXP, T, T),
                    vbin(isa::VBin::ADD, T, T, imm_opd(1.0f)), vun(isa::VUn::RECIP, O, T)};
        return {vun(native_unary(s.op), O, A)};
    }
    const Opd A = input(s, Loc::A, sc);
    if (s.op == EwOp::AFFINE) {
        const Opd scale = sc.f32(s.scale);
        return {vfma(O, A, scale, sc.f32(s.shift))};
    }
    const Opd B = input(s, Loc::B, sc);
    const Opd C = has_cond(s.op) ? input(s, Loc::COND, sc) : Opd{};
    const bool fa = A.mode == Bcast::NONE, fb = B.mode == Bcast::NONE;
    const isa::VBin f = binary_func(s.op);
    if (s.op == EwOp::ADD || s.op == EwOp::SUB) {
        // alpha == 1 with a full a is one plain pass (a program of its own); any other alpha
        // is the scalar k of a fused multiply-add
        if (fa && s.alpha == 1.0f) {
            st.push_back(vbin(f, O, A, B));
            return st;
        }
        const Opd k = sc.f32(s.op == EwOp::SUB ? -s.alpha : s.alpha);
        if (fb) {  // a + k*b as one fused multiply-add (exact for any k), a any mode
            st.push_back(vfma(O, B, k, A));
        } else {  // b broadcast: made full first
            st.push_back(materialize(B));
            st.push_back(vfma(O, T, k, A));
        }
        return st;
    }
    Opd a = A;
    if (!fa && !fb) {  // e.g. a ROW > b COL: a made full
        st.push_back(materialize(A));
        a = T;
    }
    const bool a_full = a.mode == Bcast::NONE;
    if (s.op == EwOp::CLAMP) {
        // max then min in fp32, rounded once: both passes select one of their inputs, so this
        // equals torch's clamp in the output type (NaN propagates, hi wins when lo > hi)
        if (!a_full) st.push_back(materialize(a)), a = T;
        st.push_back(vbin(isa::VBin::MAX, T, a, B));
        st.push_back(vbin(isa::VBin::MIN, O, T, C));
        return st;
    }
    if (s.op == EwOp::WHERE) {
        if (a_full)
            st.push_back(vsel(O, a, B, C, false));
        else  // cond ? a : b == !cond ? b : a with the full b as x
            st.push_back(vsel(O, B, a, C, true));
        return st;
    }
    if (a_full) {
        st.push_back(vbin(f, O, a, B));
    } else if (s.op == EwOp::MUL || s.op == EwOp::EQ || s.op == EwOp::NE || s.op == EwOp::LT ||
               s.op == EwOp::LE || s.op == EwOp::GT || s.op == EwOp::GE) {
        st.push_back(vbin(swapped(f), O, B, a));  // exact with the operands swapped
    } else {  // DIV, MAX, MIN (signed zeros) keep the operand order
        st.push_back(materialize(a));
        st.push_back(vbin(f, O, T, B));
    }
    return st;
}

bool uses_tmp(const std::vector<Step>& st) {
    for (const Step& x : st)
        for (const Opd* o : {&x.d, &x.x, &x.y, &x.z})
            if (o->loc == Loc::TMP) return true;
    return false;
}

// Operand descriptors of the three inputs, in argument order a, b, cond.
struct Input {
    bool present = false;
    Loc loc = Loc::A;
    DType t = DType::F16;
    Bcast mode = Bcast::NONE;
    Reg ddr = 0;  // register holding the device address
};

std::vector<Input> inputs(const EwShape& s) {
    std::vector<Input> in(3);
    in[0] = {true, Loc::A, s.a.t, s.a.mode, 3};
    in[1] = {has_b(s.op), Loc::B, s.b.t, s.b.mode, 5};
    in[2] = {has_cond(s.op), Loc::COND, s.cond.t, s.cond.mode, 6};
    return in;
}

// LX placement of one plan. Per-chunk buffers come twice (parity regions `region` apart).
struct Layout {
    uint64_t scalar[3] = {};              // SCALAR operand slots (2 sticks: any start offset)
    uint64_t row[3] = {};                 // resident ROW operands
    uint64_t buf[3] = {};                 // full operand chunk (parity region relative)
    uint64_t col[3] = {};                 // COL segment (parity region relative)
    uint64_t seg1[3] = {}, seg2[3] = {};  // streamed ROW segments (parity region relative)
    uint64_t out = 0;                     // output chunk (parity region relative; may alias a buf)
    uint64_t regions = 0, region = 0, tmp = 0, total = 0;
    bool alias = false;
};

Layout layout(const EwShape& s, uint64_t E, bool row_resident) {
    Layout l;
    const auto in = inputs(s);
    const uint64_t C = s.cols;
    uint64_t at = kStick;  // stick 0: the zero scalar
    for (int i = 0; i < 3; ++i) {
        if (!in[i].present) continue;
        if (in[i].mode == Bcast::SCALAR) l.scalar[i] = at, at += 2 * kStick;
        if (in[i].mode == Bcast::ROW && row_resident)
            l.row[i] = at, at += up128(kStick - 1 + C * es_of(in[i].t));
    }
    l.regions = at;
    uint64_t r = 0;
    int alias_of = -1;
    for (int i = 0; i < 3; ++i) {
        if (!in[i].present) continue;
        const uint64_t es = es_of(in[i].t);
        switch (in[i].mode) {
            case Bcast::NONE:
                l.buf[i] = r, r += up128(E * es);
                if (alias_of < 0 && es == es_of(s.out)) alias_of = i;
                break;
            case Bcast::COL:
                l.col[i] = r, r += up128(kStick - 1 + (E / C + 2) * es);
                break;
            case Bcast::ROW:
                if (!row_resident) {
                    l.seg1[i] = r, r += up128(kStick - 1 + E * es);
                    l.seg2[i] = r, r += up128(kStick - 1 + E * es);
                }
                break;
            default:
                break;
        }
    }
    if (alias_of >= 0) {
        l.alias = true;
        l.out = l.buf[alias_of];
    } else {
        l.out = r, r += up128(E * es_of(s.out));
    }
    l.region = r;
    l.tmp = l.regions + 2 * r;
    Scalars sc;
    l.total = l.tmp + (uses_tmp(make_steps(s, sc)) ? up128(E * 4) : 0);
    return l;
}

bool has_mode(const EwShape& s, Bcast m) {
    for (const Input& i : inputs(s))
        if (i.present && i.mode == m) return true;
    return false;
}

// ---- program emission ----
//
// Registers: r3 a, r4 out, r5 b, r6 cond (device addresses); r7 chunk start (element), r8 the
// core's end, r9 chunk elements, r10 parity offset, r11 chunk count; r16 head, r17 mid rows,
// r18 tail, r19 c0 (column of the chunk start) of the current chunk; r12-r15, r20-r23 scratch
// and operand addresses; r24-r30 vector descriptors.
using chunk_loop::rE, chunk_loop::rEnd, chunk_loop::rN, chunk_loop::rPar, chunk_loop::rPos;
constexpr Reg rHead = 16, rMid = 17, rTail = 18, rC0 = 19;

class Emitter {
  public:
    Emitter(const EwShape& s, const EwPlan& p)
        : s_(s),
          p_(p),
          in_(inputs(s)),
          l_(layout(s, p.chunk, p.row_resident)),
          steps_(make_steps(s, scalars_)) {}

    std::vector<uint8_t> build();

  private:
    const EwShape& s_;
    const EwPlan& p_;
    std::vector<Input> in_;
    Layout l_;
    Scalars scalars_;
    std::vector<Step> steps_;
    ProgramBuilder b_;

    bool segmented() const { return has_mode(s_, Bcast::ROW) || has_mode(s_, Bcast::COL); }
    int index(Loc l) const { return l == Loc::A ? 0 : l == Loc::B ? 1 : 2; }
    void dma(bool load, Reg lx, Reg ddr, Reg len) {
        // the span follows the transfer (operands may lie far apart); an empty transfer may
        // name an unaligned address past the end
        b_.alu(isa::Alu::AND, 31, ddr, 0, -static_cast<int64_t>(kStick));
        b_.span(31);
        if (load)
            b_.load(lx, ddr, len);
        else
            b_.store(lx, ddr, len);
    }
    // rd = (rs > 0) ? rd : 0
    void keep_if_positive(Reg rd, Reg rs, Reg tmp) {
        b_.alu(isa::Alu::SLTU, tmp, 0, rs);
        b_.mul(rd, rd, tmp);
    }
    // rd = register rs rounded down to a stick, slack = the remainder
    void split_stick(Reg aligned, Reg slack, Reg rs) {
        b_.alu(isa::Alu::AND, slack, rs, 0, kStick - 1);
        b_.sub(aligned, rs, slack);
    }
    void emit_loads(Reg pos, Reg e, Reg par);
    void emit_segments();
    void emit_step(const Step& st, int seg);
    void emit_addr(Reg rd, const Opd& o, int seg);
    Bcast seg_mode(const Opd& o, int seg) const {
        return (o.mode == Bcast::COL && seg != 1) ? Bcast::SCALAR : o.mode;
    }
};

// Loads of the chunk [pos, pos + e) into the parity region `par` (e = 0: nothing moves).
void Emitter::emit_loads(Reg pos, Reg e, Reg par) {
    const uint64_t C = s_.cols;
    for (int i = 0; i < 3; ++i) {
        const Input& x = in_[i];
        if (!x.present) continue;
        const uint64_t es = es_of(x.t);
        if (x.mode == Bcast::NONE) {
            b_.addi(12, par, static_cast<int64_t>(l_.regions + l_.buf[i]));
            b_.muli(13, pos, es);
            b_.add(13, 13, x.ddr);
            b_.muli(14, e, es);
            dma(true, 12, 13, 14);
        } else if (x.mode == Bcast::COL) {
            // the rows the chunk touches: pos / C .. (pos + e - 1) / C
            b_.alu(isa::Alu::DIVU, 20, pos, 0, C);
            b_.muli(13, 20, es);
            b_.add(13, 13, x.ddr);
            split_stick(13, 15, 13);
            b_.alu(isa::Alu::REMU, 21, pos, 0, C);
            b_.add(14, 21, e);
            b_.addi(14, 14, C - 1);
            b_.alu(isa::Alu::DIVU, 14, 14, 0, C);
            b_.muli(14, 14, es);
            b_.add(14, 14, 15);
            keep_if_positive(14, e, 22);
            b_.addi(12, par, static_cast<int64_t>(l_.regions + l_.col[i]));
            dma(true, 12, 13, 14);
        } else if (x.mode == Bcast::ROW && !p_.row_resident) {
            // b[c0 .. c0 + head) and b[0 .. e - head) (e <= C)
            b_.alu(isa::Alu::REMU, 21, pos, 0, C);
            b_.li(22, C);
            b_.sub(22, 22, 21);
            b_.alu(isa::Alu::REMU, 22, 22, 0, C);
            b_.alu(isa::Alu::MINU, 22, 22, e);
            b_.muli(13, 21, es);
            b_.add(13, 13, x.ddr);
            split_stick(13, 15, 13);
            b_.muli(14, 22, es);
            b_.add(14, 14, 15);
            keep_if_positive(14, 22, 23);
            b_.addi(12, par, static_cast<int64_t>(l_.regions + l_.seg1[i]));
            dma(true, 12, 13, 14);
            split_stick(13, 15, x.ddr);
            b_.sub(23, e, 22);
            b_.muli(14, 23, es);
            b_.add(14, 14, 15);
            keep_if_positive(14, 23, 23);
            b_.addi(12, par, static_cast<int64_t>(l_.regions + l_.seg2[i]));
            dma(true, 12, 13, 14);
        }
    }
}

// Segments of a chunk of a rows x C output starting at column c0: head = the rest of the first
// row (0 if c0 == 0), mid = whole rows, tail = the start of the last row. seg 3 = the whole chunk
// as one row (no ROW/COL operand).
void Emitter::emit_segments() {
    const uint64_t C = s_.cols;
    b_.alu(isa::Alu::REMU, rC0, rPos, 0, C);
    b_.li(rHead, C);
    b_.sub(rHead, rHead, rC0);
    b_.alu(isa::Alu::REMU, rHead, rHead, 0, C);
    b_.alu(isa::Alu::MINU, rHead, rHead, rE);
    b_.sub(rMid, rE, rHead);
    b_.alu(isa::Alu::REMU, rTail, rMid, 0, C);
    b_.alu(isa::Alu::DIVU, rMid, rMid, 0, C);
}

// rd = LX address of operand o in segment seg (0 head, 1 mid, 2 tail, 3 whole chunk). r15 holds
// the segment's element offset in the chunk.
void Emitter::emit_addr(Reg rd, const Opd& o, int seg) {
    const uint64_t C = s_.cols;
    auto chunk_buf = [&](uint64_t base, uint64_t es, bool parity) {
        b_.muli(rd, 15, es);
        if (parity) b_.add(rd, rd, rPar);
        b_.addi(rd, rd, static_cast<int64_t>(parity ? l_.regions + base : base));
    };
    switch (o.loc) {
        case Loc::IMM:
        case Loc::ZERO:
            b_.li(rd, 0);
            return;
        case Loc::ARG:
            b_.li(rd, static_cast<int64_t>(kArgLx + 8 * o.slot));
            return;
        case Loc::TMP:
            chunk_buf(l_.tmp, 4, false);
            return;
        case Loc::OUT:
            chunk_buf(l_.out, es_of(s_.out), true);
            return;
        default:
            break;
    }
    const int i = index(o.loc);
    const Input& x = in_[i];
    const uint64_t es = es_of(x.t);
    switch (x.mode) {
        case Bcast::NONE:
            chunk_buf(l_.buf[i], es, true);
            return;
        case Bcast::SCALAR:
            b_.alu(isa::Alu::AND, rd, x.ddr, 0, kStick - 1);
            b_.addi(rd, rd, static_cast<int64_t>(l_.scalar[i]));
            return;
        case Bcast::ROW:
            if (p_.row_resident) {
                b_.alu(isa::Alu::AND, rd, x.ddr, 0, kStick - 1);
                b_.addi(rd, rd, static_cast<int64_t>(l_.row[i]));
                if (seg == 0) {
                    b_.muli(14, rC0, es);
                    b_.add(rd, rd, 14);
                }
            } else if (seg == 0) {
                b_.muli(14, rC0, es);
                b_.add(14, 14, x.ddr);
                b_.alu(isa::Alu::AND, rd, 14, 0, kStick - 1);
                b_.add(rd, rd, rPar);
                b_.addi(rd, rd, static_cast<int64_t>(l_.regions + l_.seg1[i]));
            } else {
                b_.alu(isa::Alu::AND, rd, x.ddr, 0, kStick - 1);
                b_.add(rd, rd, rPar);
                b_.addi(rd, rd, static_cast<int64_t>(l_.regions + l_.seg2[i]));
            }
            return;
        case Bcast::COL: {
            // segment row 0 of the chunk is its first row; mid starts one row later if there
            // is a head, the tail after the mid rows
            b_.alu(isa::Alu::DIVU, 14, rPos, 0, C);
            b_.muli(14, 14, es);
            b_.add(14, 14, x.ddr);
            b_.alu(isa::Alu::AND, rd, 14, 0, kStick - 1);
            b_.add(rd, rd, rPar);
            b_.addi(rd, rd, static_cast<int64_t>(l_.regions + l_.col[i]));
            if (seg >= 1) {
                b_.alu(isa::Alu::SLTU, 14, 0, rHead);
                if (seg == 2) b_.add(14, 14, rMid);
                b_.muli(14, 14, es);
                b_.add(rd, rd, 14);
            }
            return;
        }
        default:
            b_.li(rd, 0);
            return;
    }
}

void Emitter::emit_step(const Step& st, int seg) {
    const uint64_t C = s_.cols;
    // element offset of the segment in the chunk
    if (seg == 1)
        b_.mov(15, rHead);
    else if (seg == 2) {
        b_.muli(15, rMid, C);
        b_.add(15, 15, rHead);
    } else {
        b_.li(15, 0);
    }
    // rows and columns
    switch (seg) {
        case 0:
            b_.li(24, 1), b_.mov(25, rHead);
            break;
        case 1:
            b_.mov(24, rMid), b_.li(25, C);
            break;
        case 2:
            b_.li(24, 1), b_.mov(25, rTail);
            break;
        default:
            b_.li(24, 1), b_.mov(25, rE);
            break;
    }
    auto stride = [&](const Opd& o) -> int64_t {
        const Bcast m = seg_mode(o, seg);
        if (m == Bcast::NONE) return static_cast<int64_t>(C * es_of(o.t));
        if (m == Bcast::COL) return static_cast<int64_t>(es_of(o.t));
        return 0;
    };
    emit_addr(20, st.d, seg);
    emit_addr(21, st.x, seg);
    b_.li(26, stride(st.d));
    b_.li(27, stride(st.x));
    switch (st.op) {
        case isa::Op::VUN:
            b_.vun(static_cast<isa::VUn>(st.func), st.d.t, st.x.t, 20, 21, 24);
            break;
        case isa::Op::VBIN: {
            const Bcast m = seg_mode(st.y, seg);
            Reg y = 0;
            if (m != Bcast::IMM) emit_addr(22, st.y, seg), y = 22;
            b_.li(28, stride(st.y));
            b_.vbin2(static_cast<isa::VBin>(st.func), m, st.d.t, st.x.t,
                     m == Bcast::IMM ? isa::kSrcType : st.y.t, 20, 21, y, 24, st.y.imm);
            break;
        }
        case isa::Op::VINT: {
            const Bcast m = seg_mode(st.y, seg);
            Reg y = 0;
            if (m != Bcast::IMM) emit_addr(22, st.y, seg), y = 22;
            b_.li(28, stride(st.y));
            b_.vint(static_cast<isa::VInt>(st.func), m, st.d.t, st.x.t, 20, 21, y, 24,
                    m == Bcast::IMM ? st.y.iimm : 0);
            break;
        }
        case isa::Op::VFMA:
        case isa::Op::VSEL: {
            const Bcast my = seg_mode(st.y, seg), mz = seg_mode(st.z, seg);
            Reg y = 0;
            if (my != Bcast::IMM) emit_addr(22, st.y, seg), y = 22;
            b_.li(28, stride(st.y));
            emit_addr(29, st.z, seg);
            b_.li(30, stride(st.z));
            const DType ty = my == Bcast::IMM ? isa::kSrcType : st.y.t;
            const DType tz = mz == Bcast::IMM ? isa::kSrcType : st.z.t;
            if (st.op == isa::Op::VFMA)
                b_.vfma(st.d.t, st.x.t, 20, 21, y, 24, my, mz, st.y.imm, st.z.imm, ty, tz);
            else
                b_.vsel(st.d.t, st.x.t, 20, 21, y, 24, my, st.y.imm, st.invert, mz, tz, ty);
            break;
        }
        default:
            throw std::logic_error("elementwise: unexpected step");
    }
}

std::vector<uint8_t> Emitter::build() {
    const uint64_t n = ew_elements(s_), u = ew_unit(s_), E = p_.chunk;
    const uint64_t U = (n + u - 1) / u, P = p_.cores;
    b_.arg(3, 0), b_.arg(4, 1);
    if (in_[1].present && in_[1].mode != Bcast::IMM) b_.arg(5, 2);
    if (in_[2].present && in_[2].mode != Bcast::IMM) b_.arg(6, 3);
    // the scalars of this call
    for (size_t i = 0; i < scalars_.bits.size(); ++i) {
        b_.arg(12, kFirstScalarArg + static_cast<uint32_t>(i));
        b_.lxst(0, 12, static_cast<int64_t>(kArgLx + 8 * i));
    }
    // the zero scalar (a select mask that always picks y)
    b_.set_regs(24, {1, 1, 4, 4});
    b_.vun(isa::VUn::SET, DType::F32, DType::F32, 0, 0, 24, 0.0f);
    // broadcast operands loaded once
    for (int i = 0; i < 3; ++i) {
        const Input& x = in_[i];
        if (!x.present) continue;
        const bool row = x.mode == Bcast::ROW && p_.row_resident;
        if (x.mode != Bcast::SCALAR && !row) continue;
        split_stick(13, 15, x.ddr);
        b_.addi(14, 15, static_cast<int64_t>((row ? s_.cols : 1) * es_of(x.t)));
        b_.li(12, static_cast<int64_t>(row ? l_.row[i] : l_.scalar[i]));
        dma(true, 12, 13, 14);
    }
    chunk_loop::emit_core_range(b_, n, u, U, P, E);
    emit_loads(rPos, rE, rPar);
    b_.loop(rN);
    {
        chunk_loop::emit_next_chunk(b_, E, l_.region);
        emit_loads(chunk_loop::rNextPos, chunk_loop::rNextE, chunk_loop::rNextPar);
        if (segmented()) emit_segments();
        for (const Step& st : steps_) {
            if (segmented())
                for (int seg = 0; seg < 3; ++seg) emit_step(st, seg);
            else
                emit_step(st, 3);
        }
        const uint64_t oes = es_of(s_.out);
        b_.addi(12, rPar, static_cast<int64_t>(l_.regions + l_.out));
        b_.muli(13, rPos, oes);
        b_.add(13, 13, 4);
        b_.muli(14, rE, oes);
        dma(false, 12, 13, 14);
        chunk_loop::emit_advance(b_, E, l_.region);
    }
    b_.endloop();
    b_.halt();
    return b_.finish();
}

// Device memory of a priced run: operands at disjoint stick-aligned addresses.
struct PriceMem {
    std::vector<uint64_t> args;
    uint64_t size = 0;
};

PriceMem price_mem(const EwShape& s) {
    PriceMem m;
    Scalars sc;
    (void)make_steps(s, sc);
    m.args.assign(kFirstScalarArg + sc.bits.size(), 0);
    uint64_t at = 0;
    auto place = [&](uint64_t bytes) {
        const uint64_t a = at;
        at += up128(std::max<uint64_t>(bytes, 1));
        return a;
    };
    auto bytes = [&](const EwOperand& o) -> uint64_t {
        const uint64_t es = es_of(o.t);
        switch (o.mode) {
            case Bcast::NONE:
                return ew_elements(s) * es;
            case Bcast::ROW:
                return s.cols * es;
            case Bcast::COL:
                return s.rows * es;
            case Bcast::SCALAR:
                return es;
            default:
                return 0;
        }
    };
    m.args[0] = place(bytes(s.a));
    m.args[1] = place(ew_elements(s) * es_of(s.out));
    if (has_b(s.op)) m.args[2] = place(bytes(s.b));
    if (has_cond(s.op)) m.args[3] = place(bytes(s.cond));
    m.size = at;
    return m;
}

}  // namespace

bool ew_is_unary(EwOp op) {
    return static_cast<uint8_t>(op) <= static_cast<uint8_t>(EwOp::CAST) || op == EwOp::NOT;
}

bool ew_is_int(const EwShape& s) {
    auto wide = [](DType t) { return t == DType::I64 || t == DType::U8; };
    switch (s.op) {
        case EwOp::CAST:
            return (isa::int_type(s.a.t) && isa::int_type(s.out)) || wide(s.a.t) || wide(s.out);
        case EwOp::NEG:
        case EwOp::ABS:
        case EwOp::ADD:
        case EwOp::SUB:
        case EwOp::MUL:
        case EwOp::MAX:
        case EwOp::MIN:
        case EwOp::EQ:
        case EwOp::NE:
        case EwOp::LT:
        case EwOp::LE:
        case EwOp::GT:
        case EwOp::GE:
            return isa::int_type(s.a.t);
        default:
            return s.op >= EwOp::FLOOR_DIV && s.op < EwOp::COUNT;
    }
}

const char* ew_name(EwOp op) {
    // clang-format off
    static const char* const names[] = {
        "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "exp", "log", "tanh", "neg", "abs",
        "sqrt", "rsqrt", "reciprocal", "sin", "cos",
        SPYRE_ISA_VUN_FUNCTIONS(SPYRE_ISA_NAME)
        "cast", "add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
        "ge", "where", "affine", "clamp", "floor_divide", "remainder", "bitwise_and",
        "bitwise_or", "bitwise_xor", "lshift", "rshift", "bitwise_not"};
    // clang-format on
    static_assert(sizeof names / sizeof names[0] == static_cast<size_t>(EwOp::COUNT));
    return op < EwOp::COUNT ? names[static_cast<size_t>(op)] : "?";
}

uint64_t ew_unit(const EwShape& s) {
    uint64_t min_es = es_of(s.out);
    for (const Input& x : inputs(s))
        if (x.present && x.mode == Bcast::NONE) min_es = std::min<uint64_t>(min_es, es_of(x.t));
    return kStick / min_es;
}

void ew_validate(const EwShape& s) {
    auto bad = [&](const std::string& why) {
        throw std::invalid_argument(std::string("elementwise ") + ew_name(s.op) + ": " + why);
    };
    if (s.op >= EwOp::COUNT) bad("unknown op");
    if (s.rows == 0 || s.cols == 0) bad("empty output (nothing to launch)");
    for (const EwOperand* o : {&s.a, &s.b, &s.cond})
        if (o->mode >= Bcast::COUNT) bad("bad broadcast mode");
    if (ew_is_int(s)) {
        const bool compare = s.op >= EwOp::EQ && s.op <= EwOp::GE;
        if (s.op == EwOp::CAST) {
            if (static_cast<uint8_t>(s.out) >= static_cast<uint8_t>(DType::COUNT) ||
                static_cast<uint8_t>(s.a.t) >= static_cast<uint8_t>(DType::COUNT))
                bad("bad type");
        } else {
            if (!isa::int_type(s.a.t)) bad("a must be int8, int32, int64 or uint8");
            if (compare ? !isa::int_type(s.out) : s.out != s.a.t)
                bad(compare ? "out must be an integer type" : "out must have a's type");
            if (has_b(s.op) && s.b.mode != Bcast::IMM && s.b.t != s.a.t)
                bad("b must have a's type");
        }
        if (ew_is_unary(s.op) && s.a.mode != Bcast::NONE) bad("a must have the output's shape");
        Scalars sc;
        (void)int_steps(s, sc);  // throws for the broadcasts it does not take
        return;
    }
    if (s.op >= EwOp::FLOOR_DIV) bad("integer operands only");
    const bool compare = s.op >= EwOp::EQ && s.op <= EwOp::GE;
    const bool any_out = compare || s.op == EwOp::CAST || s.op == EwOp::WHERE;
    if (!valid_type(s.out) || (!any_out && !is_float(s.out)))
        bad("output type must be fp32, fp16 or bf16");
    if (!valid_type(s.a.t) || (s.op != EwOp::CAST && s.op != EwOp::WHERE && !is_float(s.a.t)))
        bad("a must be fp32, fp16 or bf16");
    for (const EwOperand* o : {&s.a, &s.b, &s.cond})
        if (o->mode >= Bcast::COUNT) bad("bad broadcast mode");
    if ((ew_is_unary(s.op) || s.op == EwOp::AFFINE) && s.a.mode != Bcast::NONE)
        bad("a must have the output's shape");
    if (has_b(s.op) && (!valid_type(s.b.t) || (s.op != EwOp::WHERE && !is_float(s.b.t))))
        bad("b must be fp32, fp16 or bf16");
    if (s.op == EwOp::WHERE && (!valid_type(s.cond.t) || s.cond.mode == Bcast::IMM))
        bad("cond must be a tensor in device memory");
    if (s.op == EwOp::CLAMP && (!valid_type(s.cond.t) || !is_float(s.cond.t)))
        bad("the upper bound must be fp32, fp16 or bf16");
}

uint64_t ew_lx_bytes(const EwShape& s, uint64_t chunk, bool row_resident) {
    const uint64_t u = ew_unit(s);
    if (chunk == 0 || chunk % u) return 0;
    if (!row_resident && has_mode(s, Bcast::ROW) && chunk > s.cols) return 0;
    return layout(s, chunk, row_resident).total;
}

uint64_t ew_max_chunk(const EwShape& s, uint64_t lx_budget, bool row_resident) {
    const uint64_t u = ew_unit(s);
    // total grows linearly in the chunk: bisect on units
    uint64_t lo = 0, hi = lx_budget / u + 1;
    if (!row_resident && has_mode(s, Bcast::ROW)) hi = std::min(hi, s.cols / u + 1);
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        const uint64_t b = ew_lx_bytes(s, mid * u, row_resident);
        if (b && b <= lx_budget)
            lo = mid;
        else
            hi = mid;
    }
    return lo * u;
}

EwShape ew_structure(const EwShape& s) {
    EwShape n = s;
    const bool add_sub = s.op == EwOp::ADD || s.op == EwOp::SUB;
    for (EwOperand* o : {&n.a, &n.b, &n.cond}) {
        o->imm = 0.0f;
        o->iimm = 0;
    }
    n.scale = n.shift = 0.0f;
    n.alpha = 1.0f, n.ialpha = 1;
    if (ew_is_int(s)) {
        if (s.b.mode == Bcast::IMM && !int_scalar_is_arg(s)) n.b.iimm = s.b.iimm;  // baked
        // k = +-alpha decides the passes when b is a tensor: 1, -1 or any other (a scalar)
        if (add_sub && s.b.mode != Bcast::IMM)
            n.ialpha = s.ialpha == 1 || s.ialpha == -1 ? s.ialpha : 2;
    } else if (add_sub && !(s.a.mode == Bcast::NONE && s.alpha == 1.0f)) {
        n.alpha = 2.0f;  // a fused multiply-add with the scalar k
    }
    return n;
}

std::vector<uint64_t> ew_scalar_args(const EwShape& s) {
    Scalars sc;
    (void)make_steps(s, sc);
    return std::move(sc.bits);
}

std::vector<uint64_t> ew_launch_args(const EwShape& s, uint64_t a, uint64_t out, uint64_t b,
                                     uint64_t cond) {
    std::vector<uint64_t> args{a, out, b, cond};
    const std::vector<uint64_t> scalars = ew_scalar_args(s);
    args.insert(args.end(), scalars.begin(), scalars.end());
    return args;
}

std::vector<uint8_t> build_elementwise(const EwShape& s, const EwPlan& p) {
    ew_validate(s);
    const EwShape n = ew_structure(s);
    if (p.cores == 0 || !ew_lx_bytes(n, p.chunk, p.row_resident))
        throw std::invalid_argument("elementwise: plan does not suit the shape");
    Emitter e(n, p);
    return e.build();
}

std::string ew_plan_name(const EwPlan& p) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%u cores, chunk %llu%s", p.cores,
                  static_cast<unsigned long long>(p.chunk),
                  p.row_resident ? "" : ", streamed row operand");
    return buf;
}

EwPlan price_elementwise(const Pricer& pricer, const EwShape& s, EwPlan p) {
    const auto image = build_elementwise(s, p);
    const PriceMem m = price_mem(s);
    const spyre_engine_result r = pricer.price(image, p.cores, m.args, m.size);
    p.cycles = r.total_cycles;
    p.ddr_bytes = r.ddr_read_bytes + r.ddr_write_bytes;
    p.lx_bytes = ew_lx_bytes(s, p.chunk, p.row_resident);
    return p;
}

bool ew_row_resident(const EwShape& s, uint64_t lx_budget) {
    uint64_t row_bytes = 0;
    for (const Input& x : inputs(s))
        if (x.present && x.mode == Bcast::ROW) row_bytes += up128(kStick - 1 + s.cols * es_of(x.t));
    return row_bytes <= lx_budget / 4;
}

EwPlan ew_make_plan(const EwShape& s, uint32_t cores, uint64_t lx_budget, uint64_t chunk) {
    const uint64_t n = ew_elements(s), u = ew_unit(s), units = (n + u - 1) / u;
    EwPlan p;
    p.cores = cores;
    p.row_resident = ew_row_resident(s, lx_budget);
    const uint64_t emax = ew_max_chunk(s, lx_budget, p.row_resident);
    if (emax == 0) throw std::invalid_argument("elementwise: no chunk fits LX");
    if (chunk == 0) chunk = ((units + cores - 1) / cores + 2) / 3 * u;
    p.chunk = std::clamp<uint64_t>((chunk + u - 1) / u * u, u, emax);
    p.lx_bytes = ew_lx_bytes(s, p.chunk, p.row_resident);
    return p;
}

EwPlan plan_elementwise(const Pricer& pricer, const EwShape& s, uint32_t max_cores) {
    ew_validate(s);
    const uint64_t n = ew_elements(s), u = ew_unit(s), units = (n + u - 1) / u;
    const uint64_t budget = pricer.lx_budget();
    max_cores = std::max<uint32_t>(1, std::min<uint32_t>(max_cores, pricer.config().num_cores));
    const bool resident = ew_row_resident(s, budget);
    const uint64_t emax = ew_max_chunk(s, budget, resident);
    if (emax == 0) throw std::invalid_argument("elementwise: no chunk fits LX");
    std::vector<uint32_t> core_counts;
    for (uint32_t c = 1; c <= max_cores; c *= 2) core_counts.push_back(c);
    core_counts.push_back(max_cores);
    std::sort(core_counts.begin(), core_counts.end());
    core_counts.erase(std::unique(core_counts.begin(), core_counts.end()), core_counts.end());
    EwPlan best{};
    for (uint32_t c : core_counts) {
        if (c > units && c != 1) continue;
        const uint64_t per_core = (units + c - 1) / c * u;
        std::vector<uint64_t> chunks;
        for (uint64_t k : {1, 2, 3, 4, 8, 16}) {
            const uint64_t e = std::min(emax, ((per_core + k - 1) / k + u - 1) / u * u);
            chunks.push_back(e);
        }
        for (uint64_t d : {1, 2, 4})
            if (emax / d >= u) chunks.push_back(emax / d / u * u);
        std::sort(chunks.begin(), chunks.end());
        chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
        for (uint64_t e : chunks) {
            // the engine records at most 2M timed operations per job (~20 per chunk here)
            if (n / e >= 50000) continue;
            EwPlan p;
            p.cores = c, p.chunk = e, p.row_resident = resident;
            p = price_elementwise(pricer, s, p);
            if (!best.cycles || p.cycles < best.cycles ||
                (p.cycles == best.cycles && p.cores < best.cores))
                best = p;
        }
    }
    if (!best.cycles)
        throw std::invalid_argument("elementwise: no plan within the engine's limits");
    return best;
}

}  // namespace spyre::ops
