// SPDX-License-Identifier: MIT
#include "ops/fused_program.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "ops/chunk_loop.hpp"
#include "ops/sticks.hpp"
#include "spyre/numerics.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Bcast;
using isa::DType;
using Reg = ProgramBuilder::Reg;

// clang-format off
constexpr const char* kNames[] = {
    "load", "const", "neg", "abs", "relu", "exp", "log", "sqrt", "rsqrt", "recip", "tanh",
    "sigmoid", "silu", "gelu", "sin", "cos",
    SPYRE_ISA_VUN_FUNCTIONS(SPYRE_ISA_NAME)
    "cast", "add", "sub", "mul", "div", "max", "min", "eq", "ne", "lt", "le", "gt", "ge", "rsum",
    "rmax", "rmin", "where", "fma", "iota", "floordiv", "remainder", "and", "or", "xor", "shl", "shr",
    "not", "store"};
// clang-format on
static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(FkOp::COUNT));

// An input's kind (`scalar` set by hand means SCALAR).
FkKind in_kind(const FkInput& x) { return x.scalar ? FkKind::SCALAR : x.kind; }

// An output's kind (FULL unless a row kernel's description says "row").
FkKind out_kind(const FusedKernel& k, size_t j) {
    return j < k.out_kinds.size() ? k.out_kinds[j] : FkKind::FULL;
}

// An output's view (empty: dense).
const FkView& out_view(const FusedKernel& k, size_t j) {
    static const FkView dense;
    return j < k.out_views.size() ? k.out_views[j] : dense;
}

// The view as given by the description ("<offset> <size>:<stride> ..."), normalized: size-1
// dims dropped, a dim merged into the next when they are one run; refused (the caller runs the
// eager form) unless the last dim is contiguous and the rows (the last dim) and every row start
// are whole sticks, so that each row is one LOAD/STORE into the chunk's dense buffer. Outputs
// take no stride 0 (positions storing to one element). One contiguous dim from 0 is dense.
FkView parse_view(const std::vector<std::string>& w, size_t from, uint64_t es, bool output,
                  const std::string& line) {
    auto bad = [&](const std::string& why) {
        throw std::invalid_argument("fused kernel: " + why + " in '" + line + "'");
    };
    auto number = [&](const std::string& t) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
        if (t.empty() || *end || t[0] == '-' || v >= (1ull << 48)) bad("bad view number " + t);
        return static_cast<uint64_t>(v);
    };
    if (w.size() < from + 2) bad("expected 'view <offset> <size>:<stride> ...'");
    FkView v;
    v.offset = number(w[from]);
    for (size_t i = from + 1; i < w.size(); ++i) {
        const size_t colon = w[i].find(':');
        if (colon == std::string::npos) bad("expected <size>:<stride>, not " + w[i]);
        const uint64_t size = number(w[i].substr(0, colon)),
                       stride = number(w[i].substr(colon + 1));
        if (size == 0) bad("a view of no elements");
        if (size == 1) continue;
        if (!v.sizes.empty() && v.strides.back() == stride * size) {  // one run with the next
            v.sizes.back() *= size;
            v.strides.back() = stride;
            continue;
        }
        v.sizes.push_back(size), v.strides.push_back(stride);
    }
    if (v.sizes.empty()) v.sizes.push_back(1), v.strides.push_back(1);
    const size_t D = v.sizes.size();
    // a transposed block: [P, Q] positions of a dense [Q, P] matrix
    v.transposed = !output && D >= 2 && v.strides[D - 2] == 1 && v.strides[D - 1] == v.sizes[D - 2];
    if (v.transposed) {
        // tiles of one stick's columns when the matrix's rows are whole sticks, else whole
        const uint64_t P = v.sizes[D - 2];
        v.tile = (P * es) % kStick ? P : kStick / es;
        if ((v.offset * es) % kStick) bad("the view's blocks do not start on sticks");
        for (size_t d = 0; d + 2 < D; ++d)
            if ((v.strides[d] * es) % kStick) bad("the view's blocks do not start on sticks");
        return v;
    }
    if (v.strides.back() != 1) bad("the view's last dim is not contiguous");
    if ((v.row() * es) % kStick || (v.offset * es) % kStick)
        bad("the view's rows are not whole sticks");
    for (size_t d = 0; d + 1 < v.sizes.size(); ++d) {
        if ((v.strides[d] * es) % kStick) bad("the view's rows do not start on sticks");
        if (output && v.strides[d] == 0) bad("an output view stores one element twice");
    }
    if (v.sizes.size() == 1 && v.offset == 0) return {};
    return v;
}

std::string format_view(const FkView& v) {
    std::string s = " view " + std::to_string(v.offset);
    for (size_t d = 0; d < v.sizes.size(); ++d)
        s += " " + std::to_string(v.sizes[d]) + ":" + std::to_string(v.strides[d]);
    return s;
}

bool unary(FkOp op) { return op >= FkOp::NEG && op <= FkOp::CAST; }
bool reduction(FkOp op) { return op >= FkOp::RSUM && op <= FkOp::RMIN; }
uint64_t es_of(DType t) { return isa::dtype_size(t); }

const char* type_name(DType t) {
    return t == DType::F32   ? "f32"
           : t == DType::F16 ? "f16"
           : t == DType::I64 ? "i64"
           : t == DType::I32 ? "i32"
           : t == DType::U8  ? "u8"
           : t == DType::I8  ? "bool"
                             : "bf16";
}

// ints: also the integer types (i64, i32, u8 and bool, torch_spyre's 0/1 bytes as I8)
DType parse_type(const std::string& s, const std::string& line, bool ints = false) {
    if (s == "f32") return DType::F32;
    if (s == "f16") return DType::F16;
    if (s == "bf16") return DType::BF16;
    if (ints && s == "i64") return DType::I64;
    if (ints && s == "i32") return DType::I32;
    if (ints && s == "u8") return DType::U8;
    if (ints && s == "bool") return DType::I8;
    throw std::invalid_argument("fused kernel: unsupported type '" + s + "' in '" + line + "'");
}

// ---- lowering the description to vector passes ----

// Where a value lives: an input chunk (IN, parity region), a scalar input slot (SIN), a fp32
// temporary slot (TMP), an output chunk (OUT, parity region), the zero scalar, or an immediate;
// in row kernels also per-row values (a row input's chunk RIN, a fp32 row slot RTMP, a row
// output's chunk ROUT) and a column input (CIN, loaded once).
enum class Loc : uint8_t { IN, SIN, TMP, OUT, ZERO, IMM, RIN, CIN, RTMP, ROUT };

// A pass runs over the chunk's rows x cols elements (FULL) or over its per-row values (ROWS).
enum class Shape : uint8_t { FULL, ROWS };

struct Opd {
    Loc loc = Loc::IMM;
    int idx = 0;
    DType t = DType::F32;  // an IMM of an integer type is the integer iv
    float imm = 0.0f;
    int64_t iv = 0;
    bool per_row() const { return loc == Loc::RIN || loc == Loc::RTMP || loc == Loc::ROUT; }
    bool uniform() const { return loc == Loc::IMM || loc == Loc::SIN || loc == Loc::ZERO; }
    Bcast mode(Shape s) const {
        if (loc == Loc::IMM) return Bcast::IMM;
        if (loc == Loc::SIN || loc == Loc::ZERO) return Bcast::SCALAR;
        if (s == Shape::FULL && per_row()) return Bcast::COL;  // element r of a per-row vector
        if (loc == Loc::CIN) return Bcast::ROW;                // element c of a column vector
        return Bcast::NONE;
    }
    bool full(Shape s) const { return mode(s) == Bcast::NONE; }
};

// One vector pass: VUN d = f(x); VBIN d = x f y; VFMA d = x * y + z; VSEL d = z != 0 ? x : y
// (inv: z != 0 ? y : x); VRED d = f over each row of x.
struct Pass {
    isa::Op op;
    uint8_t func;
    Shape shape;
    Opd d, x, y, z;
    bool inv = false;
    int instr = -1;  // the description's instruction it computes (long rows: its phase)
};

struct Lowered {
    std::vector<Pass> passes;
    uint32_t tmp_slots = 0, row_slots = 0;
    uint32_t tmp_es = 4;   // bytes per element of a full temporary: 8 when one holds I64
    uint32_t row_es = 4;   // and of a per-row one (an integer reduction's I64)
    std::vector<Opd> val;  // where each instruction's value lives
};

static_assert(int(FkOp::ATANH) - int(FkOp::FLOOR) == int(isa::VUn::ATANH) - int(isa::VUn::FLOOR));

isa::VUn vun_of(FkOp op) {
    switch (op) {
        case FkOp::NEG:
            return isa::VUn::NEG;
        case FkOp::ABS:
            return isa::VUn::ABS;
        case FkOp::RELU:
            return isa::VUn::RELU;
        case FkOp::EXP:
            return isa::VUn::EXP;
        case FkOp::LOG:
            return isa::VUn::LOG;
        case FkOp::SQRT:
            return isa::VUn::SQRT;
        case FkOp::RSQRT:
            return isa::VUn::RSQRT;
        case FkOp::RECIP:
            return isa::VUn::RECIP;
        case FkOp::TANH:
            return isa::VUn::TANH;
        case FkOp::SILU:
            return isa::VUn::SILU;
        case FkOp::GELU:
            return isa::VUn::GELU;
        case FkOp::SIN:
            return isa::VUn::SIN;
        case FkOp::COS:
            return isa::VUn::COS;
        default:
            if (op >= FkOp::FLOOR && op <= FkOp::ATANH)
                return static_cast<isa::VUn>(static_cast<uint8_t>(isa::VUn::FLOOR) +
                                             static_cast<uint8_t>(op) -
                                             static_cast<uint8_t>(FkOp::FLOOR));
            return isa::VUn::COPY;
    }
}

isa::VBin vbin_of(FkOp op) {
    return static_cast<isa::VBin>(static_cast<uint8_t>(op) - static_cast<uint8_t>(FkOp::ADD));
}

// x op y == y op' x
FkOp mirrored(FkOp op) {
    switch (op) {
        case FkOp::LT:
            return FkOp::GT;
        case FkOp::GT:
            return FkOp::LT;
        case FkOp::LE:
            return FkOp::GE;
        case FkOp::GE:
            return FkOp::LE;
        case FkOp::ADD:
        case FkOp::MUL:
        case FkOp::MAX:
        case FkOp::MIN:
        case FkOp::EQ:
        case FkOp::NE:
        case FkOp::AND:
        case FkOp::OR:
        case FkOp::XOR:
            return op;
        default:
            return FkOp::COUNT;  // not commutable
    }
}

[[noreturn]] void unsupported(const std::string& why) {
    throw std::invalid_argument("fused kernel: " + why);
}

bool is_int(const Opd& o) { return isa::int_type(o.t); }

// ops of integers only: floordiv, remainder, the bitwise ops and shifts
bool int_only(FkOp op) { return op >= FkOp::FLOORDIV && op <= FkOp::NOT; }

// Whether the kernel has integer values (inputs, constants, casts, integer-only ops).
bool has_ints(const FusedKernel& k) {
    for (const FkInput& x : k.inputs)
        if (isa::int_type(x.t)) return true;
    for (const FkInstr& c : k.code)
        if (((c.op == FkOp::CONST || c.op == FkOp::CAST) && isa::int_type(c.t)) || int_only(c.op))
            return true;
    return false;
}

// an integer immediate as the fp32 path's (rounded once, as VINT CVT)
Opd imm_float(const Opd& o) {
    return {Loc::IMM, 0, DType::F32, is_int(o) ? static_cast<float>(o.iv) : o.imm};
}

// a float immediate as an integer: toward zero, NaN 0, saturated (VINT CVT's rule)
int64_t trunc_imm(float f) {
    if (f != f) return 0;
    if (f >= 0x1p63f) return std::numeric_limits<int64_t>::max();
    if (f <= -0x1p63f) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(f);
}

// a float immediate an integer op takes as an integer: a whole number
bool whole(const Opd& o) {
    return o.loc == Loc::IMM && !is_int(o) && std::trunc(o.imm) == o.imm &&
           std::fabs(o.imm) < 0x1p62f;
}

isa::VInt vint_of(FkOp op) {
    switch (op) {
        case FkOp::ADD:
            return isa::VInt::ADD;
        case FkOp::SUB:
            return isa::VInt::SUB;
        case FkOp::MUL:
            return isa::VInt::MUL;
        case FkOp::MAX:
            return isa::VInt::MAX;
        case FkOp::MIN:
            return isa::VInt::MIN;
        case FkOp::FLOORDIV:
            return isa::VInt::DIV;
        case FkOp::REMAINDER:
            return isa::VInt::REM;
        case FkOp::AND:
            return isa::VInt::AND;
        case FkOp::OR:
            return isa::VInt::OR;
        case FkOp::XOR:
            return isa::VInt::XOR;
        case FkOp::SHL:
            return isa::VInt::SHL;
        case FkOp::SHR:
            return isa::VInt::SHR;
        case FkOp::NOT:
            return isa::VInt::NOT;
        case FkOp::NEG:
            return isa::VInt::NEG;
        case FkOp::ABS:
            return isa::VInt::ABS;
        default:  // EQ..GE
            return static_cast<isa::VInt>(static_cast<uint8_t>(isa::VInt::EQ) +
                                          static_cast<uint8_t>(op) -
                                          static_cast<uint8_t>(FkOp::EQ));
    }
}

// long_rows: the lowering of the column-chunked program (rows longer than a chunk): per-row
// slots are never shared (a per-row value lives across the phases over the row) and reductions
// go to fp32 row slots (their accumulators), never straight into a row output.
Lowered lower(const FusedKernel& k, bool long_rows = false) {
    const size_t n = k.code.size();
    // the last instruction reading each value, and the one output a value goes to if a single
    // store is its only use (then the producing pass writes the output chunk directly)
    std::vector<int> last(n, -1), uses(n, 0), store_of(n, -1);
    for (size_t i = 0; i < n; ++i)
        for (int v : {k.code[i].a, k.code[i].b, k.code[i].c})
            if (v >= 0) last[v] = static_cast<int>(i), ++uses[v];
    for (size_t i = 0; i < n; ++i)
        if (k.code[i].op == FkOp::STORE && uses[k.code[i].a] == 1)
            store_of[k.code[i].a] = k.code[i].arg;

    // row kernels: integer full values and their reductions (rows that fit a core: long rows
    // combine partial reductions in fp32), integer outputs per row only
    if (long_rows && has_ints(k)) unsupported("integer values in long rows");
    for (size_t j = 0; j < k.outputs.size(); ++j)
        if (k.cols && isa::int_type(k.outputs[j]) && out_kind(k, j) != FkKind::ROW)
            unsupported("an integer full output in a row kernel");
    Lowered L;
    std::vector<Opd> val(n);
    std::vector<bool> free_full, free_row;
    auto alloc = [&](Shape s) {
        auto& pool = s == Shape::FULL ? free_full : free_row;
        for (size_t i = 0; i < pool.size(); ++i)
            if (pool[i])
                return pool[i] = false, Opd{s == Shape::FULL ? Loc::TMP : Loc::RTMP,
                                            static_cast<int>(i), DType::F32, 0.0f};
        pool.push_back(false);
        (s == Shape::FULL ? L.tmp_slots : L.row_slots) = static_cast<uint32_t>(pool.size());
        return Opd{s == Shape::FULL ? Loc::TMP : Loc::RTMP, static_cast<int>(pool.size() - 1),
                   DType::F32, 0.0f};
    };
    auto release = [&](const Opd& o) {
        if (o.loc == Loc::TMP) free_full[o.idx] = true;
        if (o.loc == Loc::RTMP && !long_rows) free_row[o.idx] = true;  // long: one per value
    };
    const Opd zero{Loc::ZERO, 0, DType::F32, 0.0f};
    // a broadcast operand as a full fp32 temporary of shape s (a select whose zero mask picks
    // y, exact)
    auto materialize = [&](const Opd& y, Shape s) {
        const Opd t = alloc(s);
        L.passes.push_back({isa::Op::VSEL, 0, s, t, t, y, zero});
        return t;
    };
    // ---- integer values: exact, VINT on I32 or I64 (row kernels: full values) ----
    auto emit_int = [&](isa::VInt f, const Opd& d, const Opd& x, const Opd& y) {
        L.passes.push_back({isa::Op::VINT, static_cast<uint8_t>(f), Shape::FULL, d, x, y, {}});
    };
    auto int_tmp = [&](DType t) {
        Opd o = alloc(Shape::FULL);
        o.t = t;
        return o;
    };
    // o as an operand of type t of an integer op: an immediate, itself, or converted into a
    // temporary (kept in `scratch` until the op is emitted)
    auto as_int = [&](const Opd& o, DType t, std::vector<Opd>& scratch) {
        if (o.loc == Loc::IMM) {
            Opd r = o;
            r.t = t;
            if (!is_int(o) && t == DType::I32)  // a float saturates, an integer wraps
                r.iv = std::clamp<int64_t>(trunc_imm(o.imm), INT32_MIN, INT32_MAX);
            else if (!is_int(o))
                r.iv = trunc_imm(o.imm);
            else if (t == DType::I32)
                r.iv = static_cast<int32_t>(static_cast<uint32_t>(r.iv));
            return r;
        }
        if (o.t == t) return o;
        if (!o.full(Shape::FULL)) unsupported("a scalar input converted in an integer op");
        const Opd c = int_tmp(t);
        emit_int(isa::VInt::CVT, c, o, {});
        scratch.push_back(c);
        return c;
    };
    // o as an operand of the fp32 vector path (types F32..I32; I64 and U8 converted)
    auto as_float = [&](const Opd& o, std::vector<Opd>& scratch) {
        if (o.loc == Loc::IMM && is_int(o)) return imm_float(o);
        if (o.loc == Loc::IMM || (o.t != DType::I64 && o.t != DType::U8)) return o;
        if (!o.full(Shape::FULL)) unsupported("an i64 or u8 scalar input in a float op");
        const Opd c = alloc(Shape::FULL);
        emit_int(isa::VInt::CVT, c, o, {});
        scratch.push_back(c);
        return c;
    };
    auto out_opd = [&](int o) {
        const bool row = out_kind(k, o) == FkKind::ROW;
        return Opd{row ? Loc::ROUT : Loc::OUT, o, k.outputs[o], 0.0f};
    };
    // An instruction on integer values, lowered to VINT passes (an integer reduction to VRED's
    // integer path); false: the fp32 path's. Integer ops run when every operand is an integer (a
    // whole float constant counts), in I64 if an operand is (or a constant needs it), else I32;
    // compares give I32 0/1 (or the bool output's bytes); where is m * a - (m - 1) * b on the 0/1
    // mask m, exact in wrapping arithmetic; casts to and from integers are VINT CVT.
    auto int_lowering = [&](const FkInstr& in, size_t i, Opd x, Opd y, Opd z,
                            std::vector<Opd>& scratch) {
        const FkOp op = in.op;
        const bool cmp = op >= FkOp::EQ && op <= FkOp::GE;
        const bool binary = (op >= FkOp::ADD && op <= FkOp::GE && op != FkOp::DIV) ||
                            (int_only(op) && op != FkOp::NOT);
        auto intish = [](const Opd& o) { return is_int(o) || whole(o); };
        bool int_op = false;
        if (op == FkOp::NOT) {
            if (!is_int(x)) unsupported("'not' takes an integer");
            int_op = true;
        } else if (int_only(op)) {
            if (!intish(x) || !intish(y))
                unsupported(std::string("'") + fk_name(op) + "' takes integers");
            int_op = true;
        } else if (binary) {
            int_op = (is_int(x) || is_int(y)) && intish(x) && intish(y);
        } else if (op == FkOp::NEG || op == FkOp::ABS) {
            int_op = is_int(x);
        } else if (op == FkOp::WHERE) {
            int_op = (is_int(y) || is_int(z)) && intish(y) && intish(z);
        } else if (op == FkOp::CAST) {
            int_op = is_int(x) || isa::int_type(in.t);
        } else if (reduction(op) && is_int(x)) {
            // exact: VRED's integer path into I64 per row (sum wraps, max/min exact)
            if (!k.cols || !x.full(Shape::FULL))
                unsupported("a reduction needs a row kernel and a full operand");
            const auto f = op == FkOp::RSUM   ? isa::Red::SUM
                           : op == FkOp::RMAX ? isa::Red::MAX
                                              : isa::Red::MIN;
            for (int v : {in.a})
                if (last[v] == static_cast<int>(i)) release(val[v]);
            Opd d;
            if (store_of[i] >= 0 && k.outputs[store_of[i]] == DType::I64 &&
                out_kind(k, store_of[i]) == FkKind::ROW) {
                d = out_opd(store_of[i]);
            } else {
                d = alloc(Shape::ROWS);
                d.t = DType::I64;
            }
            L.passes.push_back({isa::Op::VRED, static_cast<uint8_t>(f), Shape::FULL, d, x, {}, {}});
            val[i] = d;
            return true;
        }
        if (!int_op) return false;
        for (const Opd* o : {&x, &y, &z})
            if (o->per_row()) unsupported("an integer op of per-row values");
        // the compute type: I64 if an operand is (an i64 constant too, or a whole float one
        // beyond int32), else I32 (torch's promotion; a float constant is Inductor's 0.0)
        DType T = DType::I32;
        for (const Opd* o : {&x, &y, &z})
            if (o->t == DType::I64 ||
                (whole(*o) && trunc_imm(o->imm) != static_cast<int32_t>(trunc_imm(o->imm))))
                T = DType::I64;
        auto release_operands = [&] {
            for (int v : {in.a, in.b, in.c})
                if (v >= 0 && last[v] == static_cast<int>(i)) release(val[v]);
        };
        // the destination of type t: the output it alone is stored to, if of that type
        auto dest = [&](DType t) {
            if (store_of[i] >= 0 && k.outputs[store_of[i]] == t &&
                out_kind(k, store_of[i]) == FkKind::FULL)
                return out_opd(store_of[i]);
            Opd d = alloc(Shape::FULL);
            d.t = t;
            return d;
        };
        auto finish = [&](const Opd& d) {
            for (const Opd& t : scratch) release(t);
            val[i] = d;
            return true;
        };
        if (op == FkOp::CAST) {
            const DType to = in.t;
            if (x.loc == Loc::IMM) {                   // folded on the host
                if (!isa::int_type(to)) return false;  // the fp32 path rounds the immediate
                val[i] = as_int(x, to, scratch);
                return true;
            }
            if (!x.full(Shape::FULL)) unsupported("a cast of a scalar input to or from integers");
            if (x.t == to) {  // the value itself (its slot kept)
                val[i] = x;
                if (x.loc == Loc::TMP) last[in.a] = last[i] = -1;
                return true;
            }
            // in place only if not wider: a row kernel's pass of many rows writes row r at r
            // times the wider stride, over source rows not yet read
            const bool wider = k.cols && es_of(to) > es_of(x.t);
            if (!wider) release_operands();
            const Opd d = dest(to);
            if (wider) release_operands();
            emit_int(isa::VInt::CVT, d, x, {});
            return finish(d);
        }
        if (op == FkOp::NEG || op == FkOp::ABS || op == FkOp::NOT) {
            if (x.loc == Loc::IMM) {
                const int64_t v = x.iv;
                const uint64_t u = static_cast<uint64_t>(v);
                const uint64_t r = op == FkOp::NOT            ? ~u
                                   : op == FkOp::NEG || v < 0 ? 0 - u
                                                              : u;  // wrapping
                val[i] = x, val[i].iv = static_cast<int64_t>(r);
                return true;
            }
            if (x.t != DType::I64) T = DType::I32;
            const Opd a = as_int(x, T, scratch);
            if (!a.full(Shape::FULL)) unsupported("neg, abs or not of a scalar input");
            release_operands();
            const Opd d = dest(T);
            emit_int(vint_of(op), d, a, {});
            return finish(d);
        }
        if (op == FkOp::WHERE) {  // d = m * y - (m - 1) * z, m = (x != 0) of type T
            if (!x.full(Shape::FULL)) unsupported("an integer where of a constant or scalar mask");
            const Opd b = as_int(y, T, scratch), c = as_int(z, T, scratch);
            Opd m = int_tmp(T);
            if (is_int(x)) {
                emit_int(isa::VInt::NE, m, x, Opd{Loc::IMM, 0, x.t});
            } else {  // a float mask: NaN is true
                Opd m32 = m;
                if (T != DType::I32) m32 = int_tmp(DType::I32);
                L.passes.push_back({isa::Op::VBIN,
                                    static_cast<uint8_t>(isa::VBin::NE),
                                    Shape::FULL,
                                    m32,
                                    x,
                                    Opd{Loc::IMM, 0, DType::F32, 0.0f},
                                    {}});
                if (T != DType::I32) {
                    emit_int(isa::VInt::CVT, m, m32, {});
                    release(m32);
                }
            }
            const Opd t1 = int_tmp(T);
            emit_int(isa::VInt::MUL, t1, m, b);
            emit_int(isa::VInt::SUB, m, m, Opd{Loc::IMM, 0, T, 0.0f, 1});
            emit_int(isa::VInt::MUL, m, m, c);
            release_operands();
            const Opd d = dest(T);
            emit_int(isa::VInt::SUB, d, t1, m);
            scratch.push_back(t1), scratch.push_back(m);
            return finish(d);
        }
        // binary: the full operand first (commuted, or a mirrored compare), else made full
        Opd a = as_int(x, T, scratch), b = as_int(y, T, scratch);
        FkOp f = op;
        if (!a.full(Shape::FULL)) {
            if (!b.full(Shape::FULL))
                unsupported(std::string("integer '") + fk_name(op) + "' of constants and scalars");
            if (mirrored(f) != FkOp::COUNT) {
                std::swap(a, b);
                f = mirrored(f);
            } else {  // a - b = -b + a; a // b, a % b of a made full: b * 0 + a
                const Opd t = int_tmp(T);
                if (f == FkOp::SUB) {
                    emit_int(isa::VInt::NEG, t, b, {});
                    f = FkOp::ADD;
                    b = a;
                } else {
                    emit_int(isa::VInt::MUL, t, b, Opd{Loc::IMM, 0, T});
                    emit_int(isa::VInt::ADD, t, t, a);
                }
                a = t;
                scratch.push_back(t);
            }
        }
        release_operands();
        DType dt = T;
        if (cmp) {  // 0/1: as the bool (or other integer) output it goes to, else I32
            dt = DType::I32;
            if (store_of[i] >= 0 && isa::int_type(k.outputs[store_of[i]]))
                dt = k.outputs[store_of[i]];
        }
        const Opd d = dest(dt);
        emit_int(vint_of(f), d, a, b);
        return finish(d);
    };
    size_t tagged = 0;
    auto tag = [&](size_t i) {  // the passes pushed since the last tag compute instruction i
        for (; tagged < L.passes.size(); ++tagged) L.passes[tagged].instr = static_cast<int>(i);
    };
    for (size_t i = 0; i < n; ++i) {
        if (i) tag(i - 1);
        const FkInstr& in = k.code[i];
        if (in.op == FkOp::LOAD) {
            const FkInput& x = k.inputs[in.arg];
            const Loc loc = in_kind(x) == FkKind::SCALAR ? Loc::SIN
                            : in_kind(x) == FkKind::ROW  ? Loc::RIN
                            : in_kind(x) == FkKind::COL  ? Loc::CIN
                                                         : Loc::IN;
            val[i] = {loc, in.arg, x.t, 0.0f};
            continue;
        }
        if (in.op == FkOp::CONST) {
            val[i] = {Loc::IMM, 0, isa::int_type(in.t) ? in.t : DType::F32, in.imm, in.iv};
            continue;
        }
        if (in.op == FkOp::IOTA) {  // VIOTA: the column index (plus the chunk's first column)
            val[i] = alloc(Shape::FULL);
            if (!k.cols) val[i].t = DType::I32;  // flat kernels: the position, exact
            L.passes.push_back({isa::Op::VIOTA, 0, Shape::FULL, val[i], {}, {}, {}});
            continue;
        }
        if (in.op == FkOp::STORE) {
            const Opd& v = val[in.a];
            const Opd o = out_opd(in.arg);
            const Shape s = o.loc == Loc::ROUT ? Shape::ROWS : Shape::FULL;
            if (s == Shape::ROWS && (v.loc == Loc::CIN || !(v.per_row() || v.uniform())))
                unsupported("a row output stored from a value that is not one per row");
            if (store_of[in.a] == in.arg && v.loc == o.loc) continue;  // written in place
            if ((is_int(v) || is_int(o)) && v.loc != Loc::IMM && (!k.cols || is_int(v))) {
                // VINT CVT between any two types (float -> int truncates); row kernels: of an
                // integer value (an integer reduction's I64 per row)
                if (!v.full(s)) unsupported("a scalar input stored to or from an integer type");
                L.passes.push_back(
                    {isa::Op::VINT, static_cast<uint8_t>(isa::VInt::CVT), s, o, v, {}, {}});
                if (last[in.a] == static_cast<int>(i)) release(v);
                continue;
            }
            if (!k.cols && is_int(o)) {  // a constant: zeros (fp32 0 converted), then + v
                const Opd t = alloc(Shape::FULL);
                L.passes.push_back(
                    {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::SET), s, t, Opd{}, {}, {}});
                emit_int(isa::VInt::CVT, o, t, {});
                std::vector<Opd> none;
                emit_int(isa::VInt::ADD, o, o, as_int(v, o.t, none));
                release(t);
                continue;
            }
            if (isa::int_type(o.t)) {  // an index or a bool: VINT CVT of the fp32 per-row value
                if (v.loc != Loc::RTMP) unsupported("an i64 or bool output stored from a constant");
                L.passes.push_back(
                    {isa::Op::VINT, static_cast<uint8_t>(isa::VInt::CVT), s, o, v, {}, {}});
            } else if (v.loc == Loc::IMM)
                L.passes.push_back({isa::Op::VUN,
                                    static_cast<uint8_t>(isa::VUn::SET),
                                    s,
                                    o,
                                    is_int(v) ? imm_float(v) : v,
                                    {},
                                    {}});
            else if (!v.full(s))
                L.passes.push_back({isa::Op::VSEL, 0, s, o, o, v, zero});
            else
                L.passes.push_back(
                    {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::COPY), s, o, v, {}, {}});
            if (last[in.a] == static_cast<int>(i)) release(v);
            continue;
        }
        Opd x = val[in.a], y = in.b >= 0 ? val[in.b] : Opd{}, z = in.c >= 0 ? val[in.c] : Opd{};
        std::vector<Opd> scratch;
        if (int_lowering(in, i, x, y, z, scratch)) continue;
        {  // the fp32 path takes F32..I32 operands
            x = as_float(x, scratch);
            if (in.b >= 0) y = as_float(y, scratch);
            if (in.c >= 0) z = as_float(z, scratch);
        }
        if (in.op == FkOp::CAST && (in.t == DType::F32 || x.loc == Loc::IMM)) {
            // fp32 is every value's compute type; an immediate is rounded on the host
            val[i] = x;
            if (x.loc == Loc::IMM && in.t == DType::F16)
                val[i].imm = num::f16_to_f32(num::f32_to_f16(x.imm));
            if (x.loc == Loc::IMM && in.t == DType::BF16)
                val[i].imm = num::bf16_to_f32(num::f32_to_bf16(x.imm));
            if (x.loc == Loc::TMP || x.loc == Loc::RTMP)
                last[in.a] = last[i] = -1;  // the alias keeps its slot
            continue;
        }
        // the pass's shape: full if any operand is (or a per-row meets a per-column value, or
        // all are uniform), else per row
        bool any_full = false, any_row = false, any_col = false;
        for (int v : {in.a, in.b, in.c}) {
            if (v < 0) continue;
            const Opd& o = val[v];
            any_row |= o.per_row(), any_col |= o.loc == Loc::CIN;
            any_full |= !o.per_row() && !o.uniform() && o.loc != Loc::CIN;
        }
        const Shape s = any_full || any_col || !any_row ? Shape::FULL : Shape::ROWS;
        if (!any_full && !any_row && any_col && k.cols)
            unsupported(std::string("'") + fk_name(in.op) + "' of column values only");
        if (reduction(in.op) && (!k.cols || !x.full(Shape::FULL)))
            unsupported("a reduction needs a row kernel and a full operand");
        FkOp op = in.op;
        bool inv = false;
        if (op == FkOp::WHERE) {      // x the mask, y the value where it is nonzero, z the other
            if (x.loc == Loc::IMM) {  // a constant mask: a full one
                const Opd t = alloc(s);
                L.passes.push_back(
                    {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::SET), s, t, x, {}, {}});
                x = t;
                scratch.push_back(t);
            }
            // VSEL's first choice must be full: else the inverted select, else a full copy
            if (!y.full(s) && z.full(s)) {
                std::swap(y, z);
                inv = true;
            } else if (!y.full(s)) {
                y = materialize(y, s);
                scratch.push_back(y);
            }
        } else if (op == FkOp::FMA) {  // VFMA's s1 is full: the product commutes
            if (!x.full(s) && y.full(s)) {
                std::swap(x, y);
            } else if (!x.full(s)) {
                x = materialize(x, s);
                scratch.push_back(x);
            }
        } else if (!x.full(s) && !unary(op) && !reduction(op) && y.full(s) &&
                   mirrored(op) != FkOp::COUNT) {
            std::swap(x, y);  // commutative (or a mirrored compare): the full operand first
            op = mirrored(op);
        } else if (!x.full(s) && !(op == FkOp::SUB && y.full(s))) {
            x = materialize(x, s);
            scratch.push_back(x);
        }
        // operands whose last use this is free their slots first: passes may run in place,
        // but not over a 16-bit temporary (a cast's) in a row kernel: the fp32 result's rows
        // are wider and would overwrite the temporary's rows not yet read
        std::vector<int> after;
        for (int v : {in.a, in.b, in.c})
            if (v >= 0 && last[v] == static_cast<int>(i)) {
                if (k.cols && val[v].loc == Loc::TMP && es_of(val[v].t) < 4)
                    after.push_back(v);
                else
                    release(val[v]);
            }
        const Shape ds = reduction(op) ? Shape::ROWS : s;
        const bool cmp = op >= FkOp::EQ && op <= FkOp::GE;
        const bool to_out = store_of[i] >= 0 && !(long_rows && reduction(op)) &&
                            (!isa::int_type(k.outputs[store_of[i]]) ||
                             (!k.cols && cmp && k.outputs[store_of[i]] == DType::I8)) &&
                            (out_kind(k, store_of[i]) == FkKind::ROW) == (ds == Shape::ROWS) &&
                            (op != FkOp::CAST || in.t == k.outputs[store_of[i]]);
        Opd d = to_out ? out_opd(store_of[i]) : alloc(ds);
        if (!to_out && op == FkOp::CAST) d.t = in.t;
        if (op == FkOp::CAST) {
            L.passes.push_back(
                {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::COPY), s, d, x, {}, {}});
        } else if (reduction(op)) {
            const auto f = op == FkOp::RSUM   ? isa::Red::SUM
                           : op == FkOp::RMAX ? isa::Red::MAX
                                              : isa::Red::MIN;
            L.passes.push_back({isa::Op::VRED, static_cast<uint8_t>(f), s, d, x, {}, {}});
        } else if (op == FkOp::WHERE) {  // x's mask picks y, else z: VSEL d = x != 0 ? y : z
            L.passes.push_back({isa::Op::VSEL, 0, s, d, y, z, x, inv});
        } else if (op == FkOp::FMA) {  // d = fma(x, y, z), one rounding
            L.passes.push_back({isa::Op::VFMA, 0, s, d, x, y, z});
        } else if (op == FkOp::SIGMOID) {  // 1 / (1 + exp(-x)) in fp32 (ops-elementwise.md)
            const Opd t = alloc(s);
            const Opd one{Loc::IMM, 0, DType::F32, 1.0f};
            L.passes.push_back(
                {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::NEG), s, t, x, {}, {}});
            L.passes.push_back(
                {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::EXP), s, t, t, {}, {}});
            L.passes.push_back(
                {isa::Op::VBIN, static_cast<uint8_t>(isa::VBin::ADD), s, t, t, one, {}});
            L.passes.push_back(
                {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::RECIP), s, d, t, {}, {}});
            scratch.push_back(t);
        } else if (unary(op)) {
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(vun_of(op)), s, d, x, {}, {}});
        } else if (x.full(s)) {
            L.passes.push_back({isa::Op::VBIN, static_cast<uint8_t>(vbin_of(op)), s, d, x, y, {}});
        } else {  // SUB: c - y = fma(y, -1, c): one rounding, as VBIN SUB
            const Opd m1{Loc::IMM, 0, DType::F32, -1.0f};
            L.passes.push_back({isa::Op::VFMA, 0, s, d, y, m1, x});
        }
        for (const Opd& t : scratch) release(t);
        for (int v : after) release(val[v]);
        val[i] = d;
    }
    if (n) tag(n - 1);
    for (const Pass& p : L.passes)
        if (p.d.loc == Loc::TMP && p.d.t == DType::I64) L.tmp_es = 8;
    for (const Pass& p : L.passes)
        if (p.d.loc == Loc::RTMP && p.d.t == DType::I64) L.row_es = 8;
    L.val = std::move(val);
    return L;
}

// Elements of an operand per unit of work: a flat kernel's position, a row kernel's row.
uint64_t per_unit(const FusedKernel& k, FkKind kind) {
    return kind == FkKind::FULL && k.cols ? k.cols : 1;
}

// LX placement: stick 0 the zero scalar, two sticks per scalar input, each column input, the two
// parity regions (a chunk buffer per full or row input and per output), then the fp32
// temporaries (full, then per row). E: the chunk's elements (row kernels: rows).
struct Layout {
    std::vector<uint64_t> sin, in, out;  // scalar and column slots; chunk buffers (parity relative)
    std::vector<uint64_t> tin;           // transposed view inputs' blocks as loaded (parity rel.)
    uint64_t regions = 0, region = 0, tmp = 0, slot = 0, rtmp = 0, rslot = 0, total = 0;
    // long rows: every row input's and row output's values for all rows (inputs, then
    // outputs), and the stick a chunk's partial reduction goes to
    std::vector<uint64_t> rows;
    uint64_t part = 0;
};

Layout layout(const FusedKernel& k, const Lowered& L, uint64_t E) {
    Layout l;
    uint64_t at = kStick;
    l.sin.assign(k.inputs.size(), 0);
    l.in.assign(k.inputs.size(), 0);
    for (size_t i = 0; i < k.inputs.size(); ++i) {
        if (in_kind(k.inputs[i]) == FkKind::SCALAR) l.sin[i] = at, at += 2 * kStick;
        if (in_kind(k.inputs[i]) == FkKind::COL)
            l.sin[i] = at, at += up128(k.cols * es_of(k.inputs[i].t));
    }
    l.regions = at;
    uint64_t r = 0;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
        const FkKind kind = in_kind(k.inputs[i]);
        if (kind == FkKind::FULL || kind == FkKind::ROW)
            l.in[i] = r, r += up128(E * per_unit(k, kind) * es_of(k.inputs[i].t));
    }
    for (size_t j = 0; j < k.outputs.size(); ++j)
        l.out.push_back(r), r += up128(E * per_unit(k, out_kind(k, j)) * es_of(k.outputs[j]));
    l.tin.assign(k.inputs.size(), 0);
    for (size_t i = 0; i < k.inputs.size(); ++i) {  // transposed blocks as loaded, each on a stick
        const FkView& v = k.inputs[i].view;
        if (v.transposed)  // E positions (row kernels: E rows of cols) in whole blocks
            l.tin[i] = r, r += E * per_unit(k, FkKind::FULL) / v.block() *
                               up128(v.block() * es_of(k.inputs[i].t));
    }
    l.region = r;
    l.tmp = l.regions + 2 * r;
    l.slot = up128(E * per_unit(k, FkKind::FULL) * L.tmp_es);
    l.rtmp = l.tmp + L.tmp_slots * l.slot;
    l.rslot = up128(E * L.row_es);
    l.total = l.rtmp + L.row_slots * l.rslot;
    return l;
}

// ---- long rows: all cores on one row at a time, the row streamed in column chunks ----

// The phases of a long-row program. A value's level is the number of reductions it waits for
// (a reduction's result is ready after the streaming pass over the row that accumulates it):
// streaming pass q over the row runs the full passes the reductions of level-q operands and
// the stores of level-q full outputs need (full values of lower levels are computed again:
// nothing full outlives a chunk); per-row passes of level q run before it, once per row.
struct Phases {
    std::vector<int> lvl;                    // per instruction
    std::vector<std::vector<bool>> run;      // per streaming pass: the instructions it computes
    std::vector<std::vector<bool>> in, out;  // per streaming pass: inputs loaded, outputs stored
    uint32_t streams = 0;
};

bool streamed(const Opd& o) {
    return o.loc == Loc::IN || o.loc == Loc::TMP || o.loc == Loc::OUT || o.loc == Loc::CIN;
}

Phases phases_of(const FusedKernel& k, const Lowered& L) {
    const size_t n = k.code.size();
    Phases ph;
    ph.lvl.assign(n, 0);
    int top = -1;  // the highest level streamed
    for (size_t i = 0; i < n; ++i) {
        const FkInstr& in = k.code[i];
        int l = 0;
        for (int v : {in.a, in.b, in.c})
            if (v >= 0) l = std::max(l, ph.lvl[v]);
        if (reduction(in.op)) top = std::max(top, l), ++l;
        if (in.op == FkOp::STORE && out_kind(k, in.arg) == FkKind::FULL) top = std::max(top, l);
        ph.lvl[i] = l;
    }
    ph.streams = static_cast<uint32_t>(top + 1);
    for (uint32_t q = 0; q < ph.streams; ++q) {
        std::vector<bool> run(n, false), ins(k.inputs.size(), false), outs(k.outputs.size(), false);
        std::vector<int> todo;
        for (size_t i = 0; i < n; ++i) {
            const FkInstr& in = k.code[i];
            const bool target = (reduction(in.op) && ph.lvl[in.a] == static_cast<int>(q)) ||
                                (in.op == FkOp::STORE && out_kind(k, in.arg) == FkKind::FULL &&
                                 ph.lvl[i] == static_cast<int>(q));
            if (target) todo.push_back(static_cast<int>(i));
            if (target && in.op == FkOp::STORE) outs[in.arg] = true;
        }
        while (!todo.empty()) {  // the full values the targets need, back to the loads
            const int i = todo.back();
            todo.pop_back();
            if (run[i]) continue;
            run[i] = true;
            const FkInstr& in = k.code[i];
            if (in.op == FkOp::LOAD) ins[in.arg] = true;
            for (int v : {in.a, in.b, in.c})
                if (v >= 0 && streamed(L.val[v])) todo.push_back(v);
        }
        ph.run.push_back(std::move(run));
        ph.in.push_back(std::move(ins));
        ph.out.push_back(std::move(outs));
    }
    return ph;
}

// Columns per unit of a long row's work split: every chunk of every full and column operand
// starts on a stick (from a stick-aligned row start).
// A view's rows cut in pieces for long rows' chunks: the largest piece of whole sticks, at
// most 2048 elements, that divides the row (the view's last dim split in two).
FkView long_view(const FkView& v, uint64_t es) {
    const uint64_t L = v.row(), stick = kStick / es;
    uint64_t piece = L;
    for (uint64_t q = std::min<uint64_t>(L, 2048) / stick * stick; q >= stick; q -= stick)
        if (L % q == 0) {
            piece = q;
            break;
        }
    if (piece == L) return v;
    FkView w = v;
    w.sizes.back() = L / piece;
    w.strides.back() = piece;
    w.sizes.push_back(piece), w.strides.push_back(1);
    return w;
}

uint64_t long_unit(const FusedKernel& k) {
    uint64_t u = 1;
    auto need = [&](FkKind kind, DType t) {
        if (kind == FkKind::FULL || kind == FkKind::COL) u = std::lcm(u, kStick / es_of(t));
    };
    for (const FkInput& x : k.inputs) need(in_kind(x), x.t);
    for (size_t j = 0; j < k.outputs.size(); ++j) need(out_kind(k, j), k.outputs[j]);
    // a view whose rows are runs of the kernel's row: chunks of whole pieces of runs (one DMA
    // each, long_view)
    for (const FkInput& x : k.inputs)
        if (!x.view.empty()) u = std::lcm(u, long_view(x.view, es_of(x.t)).row());
    for (size_t j = 0; j < k.outputs.size(); ++j)
        if (!out_view(k, j).empty())
            u = std::lcm(u, long_view(out_view(k, j), es_of(k.outputs[j])).row());
    return u;
}

// Long rows take a view whose every row is a run of the kernel's row (a row of N runs of HW):
// a chunk of the row's columns is whole runs.
bool long_view_ok(const FusedKernel& k, const FkView& v) {
    return v.empty() || (!v.transposed && v.row() <= k.cols && k.cols % v.row() == 0);
}

// Whether the n positions can run as long rows: every full operand's rows start on a stick (or
// there is one row), and the row operands of all rows fit a small part of LX.
bool long_rows_ok(const FusedKernel& k, uint64_t n, uint64_t budget) {
    if (!k.cols || n % k.cols || has_ints(k)) return false;
    const uint64_t N = n / k.cols;
    uint64_t row_bytes = 0;
    auto check = [&](FkKind kind, DType t) {
        if (kind == FkKind::FULL && N > 1 && (k.cols * es_of(t)) % kStick) return false;
        if (kind == FkKind::ROW) row_bytes += up128(N * es_of(t));
        return true;
    };
    for (const FkInput& x : k.inputs)
        if (!check(in_kind(x), x.t) || !long_view_ok(k, x.view)) return false;
    for (size_t j = 0; j < k.outputs.size(); ++j)
        if (!check(out_kind(k, j), k.outputs[j]) || !long_view_ok(k, out_view(k, j))) return false;
    return row_bytes <= budget / 8;
}

// E: columns per chunk; N: rows.
Layout layout_long(const FusedKernel& k, const Lowered& L, uint64_t E, uint64_t N) {
    Layout l;
    const size_t I = k.inputs.size(), O = k.outputs.size();
    uint64_t at = kStick;
    l.sin.assign(I, 0);
    l.in.assign(I, 0);
    l.out.assign(O, 0);
    l.rows.assign(I + O, 0);
    for (size_t i = 0; i < I; ++i) {
        if (in_kind(k.inputs[i]) == FkKind::SCALAR) l.sin[i] = at, at += 2 * kStick;
        if (in_kind(k.inputs[i]) == FkKind::ROW)
            l.rows[i] = at, at += up128(N * es_of(k.inputs[i].t));
    }
    for (size_t j = 0; j < O; ++j)
        if (out_kind(k, j) == FkKind::ROW) l.rows[I + j] = at, at += up128(N * es_of(k.outputs[j]));
    l.part = at, at += kStick;
    l.regions = at;
    uint64_t r = 0;
    for (size_t i = 0; i < I; ++i) {
        const FkKind kind = in_kind(k.inputs[i]);
        if (kind == FkKind::FULL || kind == FkKind::COL)
            l.in[i] = r, r += up128(E * es_of(k.inputs[i].t));
    }
    for (size_t j = 0; j < O; ++j)
        if (out_kind(k, j) == FkKind::FULL) l.out[j] = r, r += up128(E * es_of(k.outputs[j]));
    l.region = r;
    l.tmp = l.regions + 2 * r;
    l.slot = up128(E * 4);
    l.rtmp = l.tmp + L.tmp_slots * l.slot;
    l.rslot = kStick;
    l.total = l.rtmp + L.row_slots * l.rslot;
    return l;
}

// Registers: r7 chunk start (element; row kernels: row), r8 the core's end, r9 chunk elements
// (rows), r10 parity offset, r11 chunk count; r12-r18 scratch; r20-r22 operand addresses,
// r24-r30 vector descriptors; r31 the span base.
using chunk_loop::rE, chunk_loop::rEnd, chunk_loop::rN, chunk_loop::rPar, chunk_loop::rPos;

class Emitter {
  public:
    Emitter(const FusedKernel& k, uint64_t n, const FusedPlan& p)
        : k_(k),
          n_(n),
          p_(p),
          long_(p.col_chunk != 0),
          L_(lower(k, long_)),
          l_(long_ ? layout_long(k, L_, p.col_chunk, n / k.cols) : layout(k, L_, p.chunk)) {}
    std::vector<uint8_t> build();
    std::vector<uint8_t> build_long();

  private:
    const FusedKernel& k_;
    uint64_t n_;
    const FusedPlan& p_;
    bool long_;  // long rows: r19 the row, r2 its first position
    Lowered L_;
    Layout l_;
    ProgramBuilder b_;

    // Long rows, groups of P cores each (G of them): r3 the core's group (core id r1 / P), r4 its
    // index in the group, r5 the group's core mask (0 with one group).
    void group_regs(uint64_t P, uint64_t G) {
        b_.alu(isa::Alu::DIVU, 3, 1, 0, static_cast<int64_t>(P));
        b_.alu(isa::Alu::REMU, 4, 1, 0, static_cast<int64_t>(P));
        b_.li(5, 0);
        if (G > 1) {
            b_.li(5, static_cast<int64_t>((1ull << P) - 1));
            b_.muli(6, 3, P);
            b_.alu(isa::Alu::SHL, 5, 5, 6, 0);
        }
    }
    void dma(bool load, Reg lx, Reg ddr, Reg len) {
        b_.alu(isa::Alu::AND, 31, ddr, 0, -static_cast<int64_t>(kStick));
        b_.span(31);
        if (load)
            b_.load(lx, ddr, len);
        else
            b_.store(lx, ddr, len);
    }
    // one chunk [pos, pos + e) of operand `arg` (elements per unit `pu`) between DDR and LX
    void chunk_dma(bool load, uint32_t arg, uint64_t lx, uint64_t bytes_per_unit, Reg pos, Reg e,
                   Reg par, const FkView& view = {}) {
        if (!view.empty() && k_.cols) {  // a row kernel's chunk of rows: its positions
            b_.muli(15, pos, k_.cols);
            b_.muli(19, e, k_.cols);
            return view_dma(load, arg, lx, bytes_per_unit / k_.cols, 15, 19, par, view);
        }
        if (!view.empty()) return view_dma(load, arg, lx, bytes_per_unit, pos, e, par, view);
        b_.addi(12, par, static_cast<int64_t>(l_.regions + lx));
        b_.arg(13, arg);
        b_.muli(14, pos, bytes_per_unit);
        b_.add(13, 13, 14);
        b_.muli(14, e, bytes_per_unit);
        dma(load, 12, 13, 14);
    }
    // r6 += the element offset (bytes of es) of index r5 over the view's outer `dims` dims:
    // sum_d idx_d * stride_d, idx_d from r5 innermost first (r5 and r13 clobbered)
    void view_offset(const FkView& v, size_t dims, uint64_t es) {
        for (size_t d = dims; d-- > 0;) {
            if (d) {
                b_.alu(isa::Alu::REMU, 13, 5, 0, static_cast<int64_t>(v.sizes[d]));
                b_.alu(isa::Alu::DIVU, 5, 5, 0, static_cast<int64_t>(v.sizes[d]));
            } else {
                b_.mov(13, 5);  // the outermost dim's index is what is left
            }
            b_.muli(13, 13, v.strides[d] * es);
            b_.add(6, 6, 13);
        }
    }
    // a chunk of a viewed operand (flat kernels; pos and e whole rows): row q of the chunk,
    // row pos / L + q of the view, goes between LX lx + q * L * es and DDR at the row's element
    // offset + sum_d idx_d * stride_d (idx_d of the row index, innermost outer dim last)
    void view_dma(bool load, uint32_t arg, uint64_t lx, uint64_t es, Reg pos, Reg e, Reg par,
                  const FkView& v) {
        if (v.transposed) return block_load(arg, lx, es, pos, e, par, v);
        const uint64_t L = v.row();
        b_.alu(isa::Alu::DIVU, 2, pos, 0, static_cast<int64_t>(L));
        b_.alu(isa::Alu::DIVU, 3, e, 0, static_cast<int64_t>(L));
        b_.loop(3, 0, 4);
        {
            b_.add(5, 2, 4);  // the row of the view
            b_.arg(6, arg);
            b_.addi(6, 6, static_cast<int64_t>(v.offset * es));
            view_offset(v, v.sizes.size() - 1, es);
            b_.muli(12, 4, L * es);
            b_.add(12, 12, par);
            b_.addi(12, 12, static_cast<int64_t>(l_.regions + lx));
            b_.li(14, static_cast<int64_t>(L * es));
            dma(load, 12, 6, 14);
        }
        b_.endloop();
    }
    // a chunk of a transposed view input (pos and e whole blocks): block q of the chunk, the
    // dense [Q, P] matrix at the block's element offset + sum_d idx_d * stride_d (the outer
    // dims), is one LOAD into its stick-aligned slot of the input's block area, then a VTRANS
    // into the chunk buffer as [P, Q] (the positions' order)
    // A tiled block (v.tile < P: the matrix's rows are whole sticks) is moved a tile of
    // `tile` of its P columns at a time: one LOAD of Q rows of tile elements (a descriptor
    // with the matrix's row stride) and a VTRANS of [Q, tile], so a block need not fit LX.
    void block_load(uint32_t arg, uint64_t lx, uint64_t es, Reg pos, Reg e, Reg par,
                    const FkView& v) {
        const size_t D = v.sizes.size();
        const uint64_t P = v.sizes[D - 2], Q = v.sizes[D - 1], T = v.tile, TQ = T * Q;
        const size_t i = arg;
        b_.alu(isa::Alu::DIVU, 2, pos, 0, static_cast<int64_t>(TQ));
        b_.alu(isa::Alu::DIVU, 3, e, 0, static_cast<int64_t>(TQ));
        b_.loop(3, 0, 4);
        {
            b_.add(5, 2, 4);  // the tile of the view
            b_.arg(6, arg);
            b_.addi(6, 6, static_cast<int64_t>(v.offset * es));
            if (T < P) {  // the tile's first column, then the block of the view
                b_.alu(isa::Alu::REMU, 13, 5, 0, static_cast<int64_t>(P / T));
                b_.muli(13, 13, T * es);
                b_.add(6, 6, 13);
                b_.alu(isa::Alu::DIVU, 5, 5, 0, static_cast<int64_t>(P / T));
            }
            view_offset(v, D - 2, es);
            b_.muli(12, 4, up128(TQ * es));
            b_.add(12, 12, par);
            b_.addi(12, 12, static_cast<int64_t>(l_.regions + l_.tin[i]));
            if (T < P) {  // Q rows of T elements, the matrix's row stride apart
                b_.li(14, static_cast<int64_t>(T * es));
                b_.set_regs(24, {static_cast<int64_t>(Q), static_cast<int64_t>(P * es),
                                 static_cast<int64_t>(T * es), 1, 0, 0});
                b_.alu(isa::Alu::AND, 31, 6, 0, -static_cast<int64_t>(kStick));
                b_.span(31);
                b_.load(12, 6, 14, 24);
            } else {
                b_.li(14, static_cast<int64_t>(TQ * es));
                dma(true, 12, 6, 14);
            }
            b_.muli(13, 4, TQ * es);
            b_.add(13, 13, par);
            b_.addi(13, 13, static_cast<int64_t>(l_.regions + lx));
            b_.set_regs(24, {static_cast<int64_t>(Q), static_cast<int64_t>(T),
                             static_cast<int64_t>(Q * es), static_cast<int64_t>(T * es)});
            b_.vtrans(k_.inputs[i].t, k_.inputs[i].t, 13, 12, 24);
        }
        b_.endloop();
    }
    // loads of the full and row inputs' chunk [pos, pos + e) into parity region par
    void loads(Reg pos, Reg e, Reg par) {
        for (size_t i = 0; i < k_.inputs.size(); ++i) {
            const FkKind kind = in_kind(k_.inputs[i]);
            if (kind == FkKind::FULL || kind == FkKind::ROW)
                chunk_dma(true, static_cast<uint32_t>(i), l_.in[i],
                          per_unit(k_, kind) * es_of(k_.inputs[i].t), pos, e, par,
                          k_.inputs[i].view);
        }
    }
    void addr(Reg rd, const Opd& o) {
        if (long_ && (o.loc == Loc::RIN || o.loc == Loc::ROUT)) {  // element r of all rows
            const size_t at = o.loc == Loc::RIN ? o.idx : k_.inputs.size() + o.idx;
            b_.muli(rd, 19, es_of(o.t));
            b_.addi(rd, rd, static_cast<int64_t>(l_.rows[at]));
            return;
        }
        if (long_ && o.loc == Loc::CIN) {  // a column input's chunk
            b_.addi(rd, rPar, static_cast<int64_t>(l_.regions + l_.in[o.idx]));
            return;
        }
        switch (o.loc) {
            case Loc::IN:
            case Loc::RIN:
                b_.addi(rd, rPar, static_cast<int64_t>(l_.regions + l_.in[o.idx]));
                return;
            case Loc::OUT:
            case Loc::ROUT:
                b_.addi(rd, rPar, static_cast<int64_t>(l_.regions + l_.out[o.idx]));
                return;
            case Loc::TMP:
                b_.li(rd, static_cast<int64_t>(l_.tmp + o.idx * l_.slot));
                return;
            case Loc::RTMP:
                b_.li(rd, static_cast<int64_t>(l_.rtmp + o.idx * l_.rslot));
                return;
            case Loc::CIN:
                b_.li(rd, static_cast<int64_t>(l_.sin[o.idx]));
                return;
            case Loc::SIN:
                b_.arg(rd, static_cast<uint32_t>(o.idx));
                b_.alu(isa::Alu::AND, rd, rd, 0, kStick - 1);
                b_.addi(rd, rd, static_cast<int64_t>(l_.sin[o.idx]));
                return;
            default:
                b_.li(rd, 0);
                return;
        }
    }
    static isa::VBin fold_of(uint8_t red) {
        const auto f = static_cast<isa::Red>(red);
        return f == isa::Red::SUM   ? isa::VBin::ADD
               : f == isa::Red::MAX ? isa::VBin::MAX
                                    : isa::VBin::MIN;
    }
    static DType typ(const Opd& o) { return o.loc == Loc::IMM ? isa::kSrcType : o.t; }
    // bytes from one row of an operand to the next in a full pass
    uint64_t stride(const Opd& o, Shape s) const {
        const Bcast m = o.mode(s);
        return m == Bcast::NONE ? k_.cols * es_of(o.t) : m == Bcast::COL ? es_of(o.t) : 0;
    }
    // a row kernel's descriptor: the chunk's rows x cols, or its rows as one vector
    void descriptor(const Pass& p) {
        if (!k_.cols) return;  // flat: one row of e elements, set once per chunk
        if (long_) {           // one row: the chunk's columns, or the row's one value
            b_.li(24, 1), b_.li(26, 0), b_.li(27, 0), b_.li(28, 0), b_.li(30, 0);
            if (p.shape == Shape::ROWS)
                b_.li(25, 1);
            else
                b_.mov(25, rE);
            return;
        }
        if (p.shape == Shape::ROWS) {
            b_.li(24, 1), b_.mov(25, rE), b_.li(26, 0), b_.li(27, 0), b_.li(28, 0), b_.li(30, 0);
            return;
        }
        b_.mov(24, rE), b_.li(25, static_cast<int64_t>(k_.cols));
        if (p.op == isa::Op::VRED) {  // rows, cols, src_stride
            b_.li(26, static_cast<int64_t>(stride(p.x, p.shape)));
            return;
        }
        b_.li(26, static_cast<int64_t>(stride(p.d, p.shape)));
        b_.li(27, static_cast<int64_t>(stride(p.x, p.shape)));
        b_.li(28, static_cast<int64_t>(p.y.loc == Loc::IMM ? 0 : stride(p.y, p.shape)));
        b_.li(30, static_cast<int64_t>(p.z.loc == Loc::IMM ? 0 : stride(p.z, p.shape)));
    }
    void pass(const Pass& p) {
        if (p.op == isa::Op::VIOTA) {  // rows, cols, dst_stride, src_stride, alpha, beta, gamma
            if (long_ || !k_.cols)     // the chunk's columns (flat: positions) from its first
                b_.li(24, 1), b_.mov(25, rE), b_.li(26, 0), b_.mov(30, rPos);
            else
                b_.mov(24, rE), b_.li(25, static_cast<int64_t>(k_.cols)),
                    b_.li(26, static_cast<int64_t>(k_.cols * 4)), b_.li(30, 0);
            b_.li(27, 0), b_.li(28, 0), b_.li(29, 1);
            addr(20, p.d);
            b_.viota(p.d.t, 20, 24);
            if (!k_.cols) b_.li(30, 0);  // flat: the descriptor set once per chunk
            return;
        }
        descriptor(p);
        addr(20, p.d);
        addr(21, p.x);
        const Shape s = p.shape;
        switch (p.op) {
            case isa::Op::VUN:
                b_.vun(static_cast<isa::VUn>(p.func), p.d.t,
                       p.x.loc == Loc::IMM ? DType::F32 : p.x.t, 20, 21, 24, p.x.imm);
                return;
            case isa::Op::VRED:
                if (long_) {  // the chunk's partial, then folded into the row's accumulator
                    b_.li(22, static_cast<int64_t>(l_.part));
                    b_.vred(static_cast<isa::Red>(p.func), 0, DType::F32, p.x.t, 22, 21, 24);
                    b_.li(25, 1);
                    b_.vbin2(fold_of(p.func), Bcast::NONE, DType::F32, DType::F32, DType::F32, 20,
                             20, 22, 24, 0.0f);
                    return;
                }
                b_.vred(static_cast<isa::Red>(p.func), 0, p.d.t, p.x.t, 20, 21, 24);
                return;
            case isa::Op::VBIN:
                if (p.y.loc != Loc::IMM) addr(22, p.y);
                b_.vbin2(static_cast<isa::VBin>(p.func), p.y.mode(s), p.d.t, p.x.t, typ(p.y), 20,
                         21, p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.imm);
                return;
            case isa::Op::VFMA:
            case isa::Op::VSEL:
                if (p.y.loc != Loc::IMM) addr(22, p.y);
                addr(29, p.z);
                if (p.op == isa::Op::VFMA)
                    b_.vfma(p.d.t, p.x.t, 20, 21, p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.mode(s),
                            p.z.mode(s), p.y.imm, p.z.imm, typ(p.y), typ(p.z));
                else
                    b_.vsel(p.d.t, p.x.t, 20, 21, p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.mode(s),
                            p.y.imm, p.inv, p.z.mode(s), typ(p.z), typ(p.y));
                return;
            case isa::Op::VINT:
                if (p.y.loc != Loc::IMM) addr(22, p.y);
                b_.vint(static_cast<isa::VInt>(p.func), p.y.mode(s), p.d.t, p.x.t, 20, 21,
                        p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.loc == Loc::IMM ? p.y.iv : 0);
                return;
            default:
                throw std::logic_error("fused kernel: unexpected pass");
        }
    }
};

std::vector<uint8_t> Emitter::build() {
    if (long_) return build_long();
    // work items: positions, or rows of a row kernel
    const uint64_t N = k_.cols ? n_ / k_.cols : n_;
    const uint64_t u = fused_unit(k_, n_), E = p_.chunk, U = (N + u - 1) / u, P = p_.cores;
    const auto I = static_cast<uint32_t>(k_.inputs.size());
    // the zero scalar (a select mask that always picks y)
    b_.set_regs(24, {1, 1, 4, 4});
    b_.vun(isa::VUn::SET, DType::F32, DType::F32, 0, 0, 24, 0.0f);
    for (uint32_t i = 0; i < I; ++i) {  // scalar and column inputs, loaded once
        if (in_kind(k_.inputs[i]) == FkKind::COL) {
            b_.arg(13, i);
            b_.li(14, static_cast<int64_t>(k_.cols * es_of(k_.inputs[i].t)));
            b_.li(12, static_cast<int64_t>(l_.sin[i]));
            dma(true, 12, 13, 14);
        }
        if (in_kind(k_.inputs[i]) != FkKind::SCALAR) continue;
        b_.arg(13, i);
        b_.alu(isa::Alu::AND, 15, 13, 0, kStick - 1);
        b_.sub(13, 13, 15);
        b_.addi(14, 15, static_cast<int64_t>(es_of(k_.inputs[i].t)));
        b_.li(12, static_cast<int64_t>(l_.sin[i]));
        dma(true, 12, 13, 14);
    }
    chunk_loop::emit_core_range(b_, N, u, U, P, E);
    loads(rPos, rE, rPar);
    b_.loop(rN);
    {
        chunk_loop::emit_next_chunk(b_, E, l_.region);
        loads(chunk_loop::rNextPos, chunk_loop::rNextE, chunk_loop::rNextPar);
        // flat kernels: one row of e elements per pass (strides unused)
        if (!k_.cols)
            b_.li(24, 1), b_.mov(25, rE), b_.li(26, 0), b_.li(27, 0), b_.li(28, 0), b_.li(30, 0);
        for (const Pass& p : L_.passes) pass(p);
        for (size_t j = 0; j < k_.outputs.size(); ++j)
            chunk_dma(false, static_cast<uint32_t>(I + j), l_.out[j],
                      per_unit(k_, out_kind(k_, j)) * es_of(k_.outputs[j]), rPos, rE, rPar,
                      out_view(k_, j));
        chunk_loop::emit_advance(b_, E, l_.region);
    }
    b_.endloop();
    b_.halt();
    return b_.finish();
}

// Long rows: every core takes an even share of each row's columns (in long_unit units) and
// streams it in double-buffered chunks of p.col_chunk columns, once per phase; after a phase
// the per-core partial reductions are combined by ALLRED (fp32, core order), so every core
// holds the row's reduced values for the next phase. Row inputs are loaded for all rows at
// the start, row outputs kept in LX and stored by core 0 at the end.
std::vector<uint8_t> Emitter::build_long() {
    const uint64_t C = k_.cols, N = n_ / C, u = long_unit(k_), E = p_.col_chunk;
    const uint64_t G = p_.groups, P = p_.cores / G, U = (C + u - 1) / u;  // P: cores per row
    const auto I = static_cast<uint32_t>(k_.inputs.size());
    const Phases ph = phases_of(k_, L_);
    b_.set_regs(24, {1, 1, 4, 4});
    b_.vun(isa::VUn::SET, DType::F32, DType::F32, 0, 0, 24, 0.0f);
    for (uint32_t i = 0; i < I; ++i) {  // scalar inputs, and row inputs of all rows
        const FkInput& x = k_.inputs[i];
        if (in_kind(x) == FkKind::ROW) {
            b_.arg(13, i);
            b_.li(14, static_cast<int64_t>(N * es_of(x.t)));
            b_.li(12, static_cast<int64_t>(l_.rows[i]));
            dma(true, 12, 13, 14);
        }
        if (in_kind(x) != FkKind::SCALAR) continue;
        b_.arg(13, i);
        b_.alu(isa::Alu::AND, 15, 13, 0, kStick - 1);
        b_.sub(13, 13, 15);
        b_.addi(14, 15, static_cast<int64_t>(es_of(x.t)));
        b_.li(12, static_cast<int64_t>(l_.sin[i]));
        dma(true, 12, 13, 14);
    }
    // r3 the core's group, r4 its index in the group, r5 the group's core mask (set below and
    // again after a view's chunk, which takes them), r2 the row's first position
    auto restore_long_regs = [&]() {
        group_regs(P, G);
        b_.muli(2, 19, C);
    };
    // a chunk [pos, pos + e) of the row's columns for operand arg (a full one at the row's
    // position r2, a column input from column 0)
    auto chunk = [&](bool load, uint32_t arg, bool col, uint64_t lx, DType t, Reg pos, Reg e,
                     Reg par) {
        const FkView& v = arg < I ? k_.inputs[arg].view : out_view(k_, arg - I);
        if (!v.empty()) {  // whole runs of the view, one DMA each (view_dma takes r2-r6)
            b_.add(21, 2, pos);
            b_.mov(22, e);
            view_dma(load, arg, lx, es_of(t), 21, 22, par, long_view(v, es_of(t)));
            restore_long_regs();
            return;
        }
        b_.addi(12, par, static_cast<int64_t>(l_.regions + lx));
        b_.arg(13, arg);
        if (col)
            b_.mov(14, pos);
        else
            b_.add(14, 2, pos);
        b_.muli(14, 14, es_of(t));
        b_.add(13, 13, 14);
        b_.muli(14, e, es_of(t));
        dma(load, 12, 13, 14);
    };
    // a core whose share of a row is one chunk keeps its input chunks across the phases: each
    // input is read from DDR once per row (the next-chunk loads are empty, parity stays 0)
    const bool resident = (U + P - 1) / P * u <= E;
    auto loaded_before = [&](uint32_t q, uint32_t i) {
        for (uint32_t r = 0; r < q; ++r)
            if (ph.in[r][i]) return true;
        return false;
    };
    auto loads = [&](uint32_t q, Reg pos, Reg e, Reg par) {
        for (uint32_t i = 0; i < I; ++i)
            if (ph.in[q][i] && !(resident && loaded_before(q, i)))
                chunk(true, i, in_kind(k_.inputs[i]) == FkKind::COL, l_.in[i], k_.inputs[i].t, pos,
                      e, par);
    };
    auto row_passes = [&](int level, bool and_above) {
        for (const Pass& p : L_.passes)
            if (p.shape == Shape::ROWS && p.op != isa::Op::VRED &&
                (ph.lvl[p.instr] == level || (and_above && ph.lvl[p.instr] > level)))
                pass(p);
    };
    // r3 the core's group, r4 its index in the group, r5 the group's core mask; the group's
    // rows are r3, r3 + G, ... (r19), r2 the row's first position
    group_regs(P, G);
    if (G > 1) {
        for (size_t j = 0; j < k_.outputs.size(); ++j) {  // rows of other groups stay 0
            if (out_kind(k_, j) != FkKind::ROW) continue;
            b_.set_regs(24, {1, static_cast<int64_t>(N), 0, 0, 0});
            b_.li(20, static_cast<int64_t>(l_.rows[I + j]));
            if (isa::int_type(k_.outputs[j]))  // x ^ x: integer types have no VUN SET
                b_.vint(isa::VInt::XOR, Bcast::NONE, k_.outputs[j], k_.outputs[j], 20, 20, 20, 24);
            else
                b_.vun(isa::VUn::SET, k_.outputs[j], DType::F32, 20, 0, 24, 0.0f);
        }
    }
    b_.li(6, static_cast<int64_t>(N + G - 1));
    b_.sub(6, 6, 3);
    b_.alu(isa::Alu::DIVU, 6, 6, 0, static_cast<int64_t>(G));
    b_.loop(6, 0, 23);
    {
        b_.muli(19, 23, G);
        b_.add(19, 19, 3);
        b_.muli(2, 19, C);
        for (uint32_t q = 0; q < ph.streams; ++q) {
            row_passes(static_cast<int>(q), false);
            std::vector<const Pass*> reds;
            for (const Pass& p : L_.passes)
                if (p.op == isa::Op::VRED && ph.run[q][p.instr]) reds.push_back(&p);
            for (const Pass* r : reds) {  // the accumulators start at the reduction's identity
                const auto f = static_cast<isa::Red>(r->func);
                const float id = f == isa::Red::SUM   ? 0.0f
                                 : f == isa::Red::MAX ? -std::numeric_limits<float>::infinity()
                                                      : std::numeric_limits<float>::infinity();
                b_.set_regs(24, {1, 1, 0, 0, 0});
                addr(20, r->d);
                b_.vun(isa::VUn::SET, DType::F32, DType::F32, 20, 0, 24, id);
            }
            chunk_loop::emit_core_range(b_, C, u, U, P, E, 4);
            loads(q, rPos, rE, rPar);
            b_.loop(rN);
            {
                chunk_loop::emit_next_chunk(b_, E, l_.region);
                loads(q, chunk_loop::rNextPos, chunk_loop::rNextE, chunk_loop::rNextPar);
                for (const Pass& p : L_.passes)
                    if (p.shape == Shape::FULL && ph.run[q][p.instr]) pass(p);
                for (size_t j = 0; j < k_.outputs.size(); ++j)
                    if (ph.out[q][j])
                        chunk(false, static_cast<uint32_t>(I + j), false, l_.out[j], k_.outputs[j],
                              rPos, rE, rPar);
                chunk_loop::emit_advance(b_, E, l_.region);
            }
            b_.endloop();
            if (P > 1)
                for (const Pass* r : reds) {
                    b_.li(12, 1);
                    addr(20, r->d);
                    b_.allreduce(static_cast<isa::Red>(r->func), DType::F32, 20, 20, 12, 5);
                }
        }
        row_passes(static_cast<int>(ph.streams), true);
    }
    b_.endloop();
    // the ALLRED that gathers the groups' rows takes float types: integer row values (indices
    // and counts of rows under 2^23 elements, exact in fp32) go through fp32 in place (VINT CVT
    // reads a row before it writes it) and back on the core that stores them
    auto int_rows_to_fp32 = [&](bool to_fp32) {
        for (size_t j = 0; j < k_.outputs.size(); ++j) {
            const DType t = k_.outputs[j];
            if (out_kind(k_, j) != FkKind::ROW || !isa::int_type(t)) continue;
            b_.set_regs(24, {1, static_cast<int64_t>(N), 0, 0, 0});
            b_.li(20, static_cast<int64_t>(l_.rows[I + j]));
            b_.vint(isa::VInt::CVT, Bcast::NONE, to_fp32 ? DType::F32 : t, to_fp32 ? t : DType::F32,
                    20, 20, 0, 24);
        }
    };
    auto gathered = [&](size_t j) {
        return isa::int_type(k_.outputs[j]) ? DType::F32 : k_.outputs[j];
    };
    if (G > 1) {  // every group's rows to every core: the other cores' rows are 0 (exact sums)
        int_rows_to_fp32(true);
        const auto leader = b_.label();
        b_.br(isa::Cond::EQ, 4, 0, leader);
        for (size_t j = 0; j < k_.outputs.size(); ++j) {
            if (out_kind(k_, j) != FkKind::ROW) continue;
            b_.set_regs(24, {1, static_cast<int64_t>(N), 0, 0, 0});
            b_.li(20, static_cast<int64_t>(l_.rows[I + j]));
            b_.vun(isa::VUn::SET, gathered(j), DType::F32, 20, 0, 24, 0.0f);
        }
        b_.bind(leader);
        for (size_t j = 0; j < k_.outputs.size(); ++j) {
            if (out_kind(k_, j) != FkKind::ROW) continue;
            b_.li(12, static_cast<int64_t>(N));
            b_.li(20, static_cast<int64_t>(l_.rows[I + j]));
            b_.allreduce(isa::Red::SUM, gathered(j), 20, 20, 12);
        }
    }
    const auto done = b_.label();
    b_.br(isa::Cond::NE, 1, 0, done);    // core 0 stores the row outputs
    if (G > 1) int_rows_to_fp32(false);  // back to each integer output's own type
    for (size_t j = 0; j < k_.outputs.size(); ++j) {
        if (out_kind(k_, j) != FkKind::ROW) continue;
        b_.arg(13, static_cast<uint32_t>(I + j));
        b_.li(14, static_cast<int64_t>(N * es_of(k_.outputs[j])));
        b_.li(12, static_cast<int64_t>(l_.rows[I + j]));
        dma(false, 12, 13, 14);
    }
    b_.bind(done);
    b_.halt();
    return b_.finish();
}

// ---- pow: x ** y as the ops above ----

// A value's number when it is a constant (a CONST, or a CAST of one: rounded as the lowering
// rounds it).
bool const_of(const FusedKernel& k, int v, float& c) {
    const FkInstr& in = k.code[v];
    if (in.op == FkOp::CONST) return c = in.imm, true;
    if (in.op != FkOp::CAST || isa::int_type(in.t) || !const_of(k, in.a, c)) return false;
    if (in.t == DType::F16) c = num::f16_to_f32(num::f32_to_f16(c));
    if (in.t == DType::BF16) c = num::bf16_to_f32(num::f32_to_bf16(c));
    return true;
}

// Appends one op (a constant) to k's code; returns its value.
int emit(FusedKernel& k, FkOp op, int a, int b, int c) {
    FkInstr e;
    e.op = op, e.a = a, e.b = b, e.c = c;
    k.code.push_back(e);
    return static_cast<int>(k.code.size() - 1);
}
int emit_const(FusedKernel& k, float v) {
    FkInstr e;
    e.op = FkOp::CONST, e.imm = v;
    k.code.push_back(e);
    return static_cast<int>(k.code.size() - 1);
}

// x ** y with torch.pow's (std::pow's) special cases, in fp32: exp2(y * log2|x|), the
// exponent forced to 0 where y == 0 or |x| == 1 (x ** 0 = 1 for NaN x too, 1 ** y = 1 for NaN
// or inf y), the sign of a negative base (-0 too) for an odd integer y, NaN for a finite
// negative base and a non-integer y (log2 of x itself: NaN; -inf is taken as +inf, so
// (-inf) ** 0.5 = inf as std::pow). Constants specialise: y in {2, 3, -2, 0.5, -0.5, -1} as
// aten's CPU kernel (x * x, x * x * x, 1 / (x * x), sqrt, rsqrt, recip), other integers up to
// 8 by multiplies (of 1 / x for negative ones, as Inductor's pow_recursive), a positive finite
// base c as exp2(y * log2(c)) with log2(c) from the host, two constants folded on the host;
// the sign and NaN fix-ups only where the constant exponent needs them. Returns the value.
int add_pow(FusedKernel& k, int x, int y) {
    auto add = [&](FkOp op, int a = -1, int b = -1, int c = -1) { return emit(k, op, a, b, c); };
    auto cst = [&](float v) { return emit_const(k, v); };
    constexpr float inf = std::numeric_limits<float>::infinity();
    float cx = 0.0f, cy = 0.0f;
    const bool kx = const_of(k, x, cx), ky = const_of(k, y, cy);
    if (kx && ky) return cst(static_cast<float>(std::pow(double(cx), double(cy))));
    if (ky) {
        if (cy == 0.0f) return cst(1.0f);
        if (cy == 1.0f) return x;
        if (cy == 0.5f) return add(FkOp::SQRT, x);
        if (cy == -0.5f) return add(FkOp::RSQRT, x);
        if (cy == -1.0f) return add(FkOp::RECIP, x);
        if (cy == -2.0f) return add(FkOp::RECIP, add(FkOp::MUL, x, x));
        if (cy == std::floor(cy) && std::fabs(cy) <= 8.0f) {  // by squaring: 2 .. 8, -3 .. -8
            int b = cy < 0 ? add(FkOp::RECIP, x) : x, r = -1;
            for (int e = static_cast<int>(std::fabs(cy));;) {
                if (e & 1) r = r < 0 ? b : add(FkOp::MUL, r, b);
                if (!(e >>= 1)) return r;
                b = add(FkOp::MUL, b, b);
            }
        }
    }
    if (kx && !ky && cx == 1.0f) return cst(1.0f);
    if (kx && !ky && cx > 0.0f && cx < inf)  // y = 0 gives exp2(0), inf/NaN y their limits
        return add(FkOp::EXP2, add(FkOp::MUL, y, cst(float(std::log2(double(cx))))));
    // y's kind: integer (inf counts: std::pow takes it as even), odd, or neither (NaN too)
    const bool y_int = ky && cy == std::floor(cy),
               y_odd = y_int && std::fabs(std::fmod(cy, 2.0f)) == 1.0f;
    const int zero = cst(0.0f);
    int ny = -1;  // y is not an integer (or NaN): 1.0
    if (!ky) ny = add(FkOp::NE, add(FkOp::FLOOR, y), y);
    int s = -1;  // what log2 takes: |x|, or x itself (-inf as +inf) for a non-integer y
    if (!y_int) s = add(FkOp::WHERE, add(FkOp::EQ, x, cst(-inf)), cst(inf), x);
    if (!ky) s = add(FkOp::WHERE, ny, s, add(FkOp::ABS, x));
    if (y_int) s = add(FkOp::ABS, x);
    const int l = add(FkOp::LOG2, s);
    int t = add(FkOp::MUL, y, l);
    if (!ky || !std::isfinite(cy)) {  // 0 where |x| == 1 (log2 0) or y == 0: 0 * inf, NaN
        int z = add(FkOp::EQ, l, zero);
        if (!ky) z = add(FkOp::MAX, z, add(FkOp::EQ, y, zero));
        t = add(FkOp::WHERE, z, zero, t);
    }
    int p = add(FkOp::EXP2, t);
    if (ky && !y_odd) return p;
    // a negative base (-0 and -inf too: min(x, 1 / x) < 0) to an odd integer power
    int flip = add(FkOp::LT, add(FkOp::MIN, x, add(FkOp::RECIP, x)), zero);
    if (!ky) {  // y odd: y - 2 * floor(y / 2) == 1 (exact; inf gives NaN: even)
        const int h = add(FkOp::FLOOR, add(FkOp::MUL, y, cst(0.5f)));
        const int odd = add(FkOp::EQ, add(FkOp::SUB, y, add(FkOp::MUL, h, cst(2.0f))), cst(1.0f));
        flip = add(FkOp::MUL, flip, odd);
    }
    return add(FkOp::WHERE, flip, add(FkOp::NEG, p), p);
}

// ---- atan2: atan2(y, x) as the ops above ----

// atan2(y, x) with std::atan2's special cases, in fp32, as the eager kernel composes it
// (torch_spyre/csrc/aten/BinaryMath.cpp atan2_of): atan(y / x) moved by +-pi (y's sign) into
// x's half plane where x's sign bit is set (-0 too: min(x, 1 / x) < 0); two zeros give y
// (x +0) or +-pi (x -0), two infinities +-pi/4 (x +inf) or +-3pi/4 (x -inf), by y's sign; NaN
// in, NaN out. The quotient's rounding moves atan by at most its own relative error (|d atan /
// atan| <= |dq / q|), so the result is within about 1.5 ulps of the exact one (fp32) before
// the output's rounding. A constant operand's sign is taken on the host and the fix-ups it
// cannot need are left out; two constants fold. Returns the value.
int add_atan2(FusedKernel& k, int y, int x) {
    auto add = [&](FkOp op, int a = -1, int b = -1, int c = -1) { return emit(k, op, a, b, c); };
    auto cst = [&](float v) { return emit_const(k, v); };
    constexpr double pi = 3.14159265358979323846;
    constexpr float inf = std::numeric_limits<float>::infinity();
    float cy = 0.0f, cx = 0.0f;
    const bool ky = const_of(k, y, cy), kx = const_of(k, x, cx);
    if (ky && kx) return cst(std::atan2(cy, cx));
    const int zero = cst(0.0f);
    // 1.0 where v's sign bit is set (-0 and -inf too), else 0.0 (NaN: 0)
    auto sign_bit = [&](int v) {
        return add(FkOp::LT, add(FkOp::MIN, v, add(FkOp::RECIP, v)), zero);
    };
    const bool x_neg_k = kx && std::signbit(cx);
    const int x_neg = kx ? -1 : sign_bit(x);
    int y_neg_v = -1, half_v = -1;  // made when needed
    auto y_neg = [&] { return y_neg_v >= 0 ? y_neg_v : (y_neg_v = sign_bit(y)); };
    auto half = [&] {  // +-pi by y's sign
        if (half_v < 0)
            half_v = ky ? cst(static_cast<float>(std::signbit(cy) ? -pi : pi))
                        : add(FkOp::WHERE, y_neg(), cst(static_cast<float>(-pi)),
                              cst(static_cast<float>(pi)));
        return half_v;
    };
    const int a = add(FkOp::ATAN, add(FkOp::DIV, y, x));
    int r = kx ? (x_neg_k ? add(FkOp::ADD, a, half()) : a)
               : add(FkOp::WHERE, x_neg, add(FkOp::ADD, a, half()), a);
    // two zeros: y itself for x = +0, +-pi for x = -0
    if (!(ky && cy != 0.0f) && !(kx && cx != 0.0f)) {
        const int zx = kx ? -1 : add(FkOp::EQ, x, zero), zy = ky ? -1 : add(FkOp::EQ, y, zero);
        const int zeros = zx < 0 ? zy : zy < 0 ? zx : add(FkOp::MUL, zx, zy);
        const int at_zero = kx ? (x_neg_k ? half() : y) : add(FkOp::WHERE, x_neg, half(), y);
        r = add(FkOp::WHERE, zeros, at_zero, r);
    }
    // two infinities: +-pi/4 for x = +inf, +-3pi/4 for x = -inf, by y's sign
    if (!(ky && !std::isinf(cy)) && !(kx && !std::isinf(cx))) {
        auto is_inf = [&](int v) { return add(FkOp::EQ, add(FkOp::ABS, v), cst(inf)); };
        const int ix = kx ? -1 : is_inf(x), iy = ky ? -1 : is_inf(y);
        const int infs = ix < 0 ? iy : iy < 0 ? ix : add(FkOp::MUL, ix, iy);
        auto diagonal = [&](bool xn, bool yn) {
            return cst(static_cast<float>((xn ? 0.75 : 0.25) * (yn ? -pi : pi)));
        };
        int d;
        if (kx)
            d = add(FkOp::WHERE, y_neg(), diagonal(x_neg_k, true), diagonal(x_neg_k, false));
        else if (ky)
            d = add(FkOp::WHERE, x_neg, diagonal(true, std::signbit(cy)),
                    diagonal(false, std::signbit(cy)));
        else
            d = add(FkOp::WHERE, x_neg,
                    add(FkOp::WHERE, y_neg(), diagonal(true, true), diagonal(true, false)),
                    add(FkOp::WHERE, y_neg(), diagonal(false, true), diagonal(false, false)));
        r = add(FkOp::WHERE, infs, d, r);
    }
    return r;
}

}  // namespace

const char* fk_name(FkOp op) { return op < FkOp::COUNT ? kNames[static_cast<size_t>(op)] : "?"; }

FusedKernel parse_fused(const std::string& text) {
    FusedKernel k;
    std::istringstream in(text);
    std::string line;
    std::map<std::string, int> values;
    bool header = false;
    std::vector<int> stored;
    auto bad = [&](const std::string& why) {
        throw std::invalid_argument("fused kernel: " + why + " in '" + line + "'");
    };
    while (std::getline(in, line)) {
        std::string body = line.substr(0, line.find('#'));
        std::istringstream ls(body);
        std::vector<std::string> w;
        for (std::string t; ls >> t;) w.push_back(t);
        if (w.empty()) continue;
        if (!header) {
            if (w.size() != 2 || w[0] != "spyre.kernel" || w[1] != "1")
                bad("expected 'spyre.kernel 1'");
            header = true;
            continue;
        }
        if (w[0] == "rows") {
            char* end = nullptr;
            const unsigned long long c = w.size() == 2 ? std::strtoull(w[1].c_str(), &end, 10) : 0;
            if (w.size() != 2 || *end || c == 0 || c > (1ull << 32) || k.cols ||
                !k.inputs.empty() || !k.outputs.empty())
                bad("expected 'rows <positions per row>' before the inputs");
            k.cols = c;
            continue;
        }
        if (w[0] == "in" && w.size() > 2 && w[2] == "view") {
            if (!k.code.empty()) bad("a view input before the ops");
            FkInput x{parse_type(w[1], line, true), false, FkKind::FULL, {}};
            x.view = parse_view(w, 3, es_of(x.t), false, line);
            // row kernels: each row or block of the view is whole rows of the kernel, or each
            // row of the kernel whole rows of the view (BatchNorm's sums over N and HW of NCHW:
            // a channel's row is N runs of HW, one LOAD each)
            if (k.cols && !x.view.empty() && x.view.block() % k.cols &&
                (x.view.transposed || k.cols % x.view.row()))
                bad("a view's rows or blocks are not whole rows of the kernel");
            k.inputs.push_back(x);
            continue;
        }
        if (w[0] == "out" && w.size() > 2 && w[2] == "view") {
            if (!k.code.empty()) bad("a view output before the ops");
            k.outputs.push_back(parse_type(w[1], line, !k.cols));
            k.out_kinds.resize(k.outputs.size(), FkKind::FULL);
            k.out_views.resize(k.outputs.size());
            k.out_views.back() = parse_view(w, 3, es_of(k.outputs.back()), true, line);
            // row kernels: a full output whose view rows are whole rows of the kernel or whose
            // rows are whole view rows (a channel's N runs of HW), moved as the inputs' views
            const FkView& v = k.out_views.back();
            if (k.cols && !v.empty() && v.row() % k.cols && k.cols % v.row())
                bad("a view's rows are not whole rows of the kernel");
            continue;
        }
        if (w[0] == "in") {
            const bool rowk = k.cols != 0;
            if (w.size() != 3 || !k.code.empty() ||
                !(w[2] == "full" || w[2] == "scalar" || (rowk && (w[2] == "row" || w[2] == "col"))))
                bad(rowk ? "expected 'in <type> full|scalar|row|col' before the ops"
                         : "expected 'in <type> full|scalar' before the ops");
            const FkKind kind = w[2] == "full"     ? FkKind::FULL
                                : w[2] == "scalar" ? FkKind::SCALAR
                                : w[2] == "row"    ? FkKind::ROW
                                                   : FkKind::COL;
            k.inputs.push_back({parse_type(w[1], line, true), kind == FkKind::SCALAR, kind, {}});
            continue;
        }
        if (w[0] == "out") {
            if (!(w.size() == 2 || (w.size() == 3 && w[2] == "row" && k.cols)) || !k.code.empty())
                bad(k.cols ? "expected 'out <type> [row]' before the ops"
                           : "expected 'out <type>' before the ops");
            // integers: flat kernels' full outputs, row kernels' i64 and bool row outputs
            const DType t = parse_type(w[1], line, true);
            if (k.cols && isa::int_type(t) &&
                (w.size() != 3 || (t != DType::I64 && t != DType::I8)))
                bad("a row kernel's integer output must be an i64 or bool row output");
            k.outputs.push_back(t);
            k.out_kinds.push_back(w.size() == 3 ? FkKind::ROW : FkKind::FULL);
            continue;
        }
        auto value = [&](const std::string& s) {
            auto it = values.find(s);
            if (it == values.end()) bad("undefined value " + s);
            return it->second;
        };
        auto index = [&](const std::string& s, size_t limit) {
            char* end = nullptr;
            const long v = std::strtol(s.c_str(), &end, 10);
            if (s.empty() || *end || v < 0 || static_cast<size_t>(v) >= limit)
                bad("bad index " + s);
            return static_cast<int32_t>(v);
        };
        FkInstr ins;
        if (w[0] == "store") {
            if (w.size() != 3) bad("expected 'store <output> <value>'");
            ins.op = FkOp::STORE;
            ins.arg = index(w[1], k.outputs.size());
            ins.a = value(w[2]);
            if (std::find(stored.begin(), stored.end(), ins.arg) != stored.end())
                bad("output stored twice");
            stored.push_back(ins.arg);
            k.code.push_back(ins);
            continue;
        }
        if (w.size() == 3 && w[1] == "=" && w[2] == "iota" && w[0][0] == '%' &&
            !values.count(w[0])) {
            if (k.cols > (1u << 24)) bad("'iota' needs rows of at most 2^24 positions");
            ins.op = FkOp::IOTA;
            values[w[0]] = static_cast<int>(k.code.size());
            k.code.push_back(ins);
            continue;
        }
        if (w.size() < 4 || w[1] != "=" || w[0][0] != '%' || values.count(w[0]))
            bad("expected '%v = <op> ...'");
        auto add = [&](FkOp op, int a = -1, int b = -1, int c = -1, float imm = 0.0f) {
            FkInstr e;
            e.op = op, e.a = a, e.b = b, e.c = c, e.imm = imm;
            k.code.push_back(e);
            return static_cast<int>(k.code.size() - 1);
        };
        if (w[2] == "rany") {  // 1 if any of the row is nonzero (NaN counts), else 0
            if (w.size() != 4) bad("expected one operand");
            if (!k.cols) bad("'rany' needs a row kernel");
            const int x = value(w[3]);
            values[w[0]] = add(FkOp::RMAX, add(FkOp::NE, x, add(FkOp::CONST)));
            continue;
        }
        if (w[2] == "pow") {  // x ** y: expanded into the ops above (add_pow)
            if (w.size() != 5) bad("expected 'pow <base> <exponent>'");
            values[w[0]] = add_pow(k, value(w[3]), value(w[4]));
            continue;
        }
        if (w[2] == "atan2") {  // atan2(y, x): expanded into the ops above (add_atan2)
            if (w.size() != 5) bad("expected 'atan2 <y> <x>'");
            values[w[0]] = add_atan2(k, value(w[3]), value(w[4]));
            continue;
        }
        if (w[2] == "rargmax" || w[2] == "rargmin") {
            // the first column holding the row's max (min), or its first NaN: rmin over the
            // columns where x equals the extreme or is NaN, +inf elsewhere
            if (w.size() != 4) bad("expected one operand");
            if (!k.cols || k.cols > (1u << 24)) bad("an arg reduction needs rows of at most 2^24");
            const int x = value(w[3]);
            const int m = add(w[2] == "rargmax" ? FkOp::RMAX : FkOp::RMIN, x);
            const int mask = add(FkOp::MAX, add(FkOp::EQ, x, m), add(FkOp::NE, x, x));
            const int inf = add(FkOp::CONST, -1, -1, -1, std::numeric_limits<float>::infinity());
            values[w[0]] = add(FkOp::RMIN, add(FkOp::WHERE, mask, add(FkOp::IOTA), inf));
            continue;
        }
        const auto it = std::find(std::begin(kNames), std::end(kNames), w[2]);
        if (it == std::end(kNames) || *it == std::string("store")) bad("unknown op " + w[2]);
        ins.op = static_cast<FkOp>(it - std::begin(kNames));
        const size_t nargs = w.size() - 3;
        if (ins.op == FkOp::LOAD) {
            if (nargs != 1) bad("expected 'load <input>'");
            ins.arg = index(w[3], k.inputs.size());
        } else if (ins.op == FkOp::CONST && nargs == 2) {  // an integer: "const -100 i64"
            char* end = nullptr;
            errno = 0;
            ins.iv = std::strtoll(w[3].c_str(), &end, 10);
            ins.t = w[4] == "i64" ? DType::I64 : w[4] == "i32" ? DType::I32 : DType::F32;
            if (*end || w[3].empty() || errno || ins.t == DType::F32 ||
                (ins.t == DType::I32 && ins.iv != static_cast<int32_t>(ins.iv)))
                bad("expected 'const <integer> i64|i32'");
            ins.imm = static_cast<float>(ins.iv);
        } else if (ins.op == FkOp::CONST) {
            char* end = nullptr;
            ins.imm = std::strtof(w[3].c_str(), &end);
            if (nargs != 1 || *end) bad("expected 'const <number>'");
        } else if (ins.op == FkOp::CAST) {
            if (nargs != 2) bad("expected 'cast <value> <type>'");
            ins.a = value(w[3]);
            ins.t = parse_type(w[4], line, true);
            if (ins.t == DType::I8 || ins.t == DType::U8) bad("casts are to f32|f16|bf16|i64|i32");
        } else if (unary(ins.op) || reduction(ins.op) || ins.op == FkOp::NOT) {
            if (nargs != 1) bad("expected one operand");
            ins.a = value(w[3]);
        } else if (ins.op == FkOp::WHERE || ins.op == FkOp::FMA) {
            if (nargs != 3)
                bad(ins.op == FkOp::WHERE ? "expected 'where <mask> <value> <value>'"
                                          : "expected 'fma <value> <value> <value>'");
            ins.a = value(w[3]);
            ins.b = value(w[4]);
            ins.c = value(w[5]);
        } else {
            if (nargs != 2) bad("expected two operands");
            ins.a = value(w[3]);
            ins.b = value(w[4]);
        }
        values[w[0]] = static_cast<int>(k.code.size());
        k.code.push_back(ins);
    }
    line = "";
    if (!header) bad("empty kernel");
    if (k.outputs.empty()) bad("no output");
    if (k.inputs.size() + k.outputs.size() > 16) bad("more than 16 inputs and outputs");
    if (stored.size() != k.outputs.size()) bad("an output is never stored");
    lower(k);  // what the generator cannot take (e.g. a reduction of a broadcast value) throws
    return k;
}

std::string format_fused(const FusedKernel& k) {
    static const char* const kinds[] = {" full\n", " scalar\n", " row\n", " col\n"};
    std::string s = "spyre.kernel 1\n";
    if (k.cols) s += "rows " + std::to_string(k.cols) + "\n";
    for (const FkInput& x : k.inputs)
        s += std::string("in ") + type_name(x.t) +
             (x.view.empty() ? kinds[static_cast<int>(in_kind(x))] : format_view(x.view) + "\n");
    for (size_t j = 0; j < k.outputs.size(); ++j)
        s += std::string("out ") + type_name(k.outputs[j]) +
             (out_kind(k, j) == FkKind::ROW ? " row\n"
              : out_view(k, j).empty()      ? "\n"
                                            : format_view(out_view(k, j)) + "\n");
    for (size_t i = 0; i < k.code.size(); ++i) {
        const FkInstr& c = k.code[i];
        if (c.op == FkOp::STORE) {
            s += "store " + std::to_string(c.arg) + " %" + std::to_string(c.a) + "\n";
            continue;
        }
        s += "%" + std::to_string(i) + " = " + fk_name(c.op);
        if (c.op == FkOp::LOAD) s += " " + std::to_string(c.arg);
        if (c.op == FkOp::CONST && isa::int_type(c.t)) {
            s += " " + std::to_string(c.iv) + " " + type_name(c.t) + "\n";
            continue;
        }
        if (c.op == FkOp::CONST) {
            char buf[32];
            std::snprintf(buf, sizeof buf, " %.9g", c.imm);
            s += buf;
        }
        for (int v : {c.a, c.b, c.c})
            if (v >= 0) s += " %" + std::to_string(v);
        if (c.op == FkOp::CAST) s += std::string(" ") + type_name(c.t);
        s += "\n";
    }
    return s;
}

uint64_t fused_unit(const FusedKernel& k, uint64_t n) {
    if (k.cols && n) {  // fewer rows than a unit: one chunk of them all starts on a stick
        const uint64_t g = fused_unit(k);
        return std::max<uint64_t>(1, std::min(g, n / k.cols));
    }
    if (k.cols) {  // rows whose every full and row operand's chunk starts on a stick
        uint64_t g = 1;
        auto need = [&](FkKind kind, DType t) {
            if (kind != FkKind::FULL && kind != FkKind::ROW) return;
            const uint64_t bytes = per_unit(k, kind) * es_of(t);
            g = std::lcm(g, kStick / std::gcd<uint64_t>(kStick, bytes));
        };
        for (const FkInput& x : k.inputs) {
            need(in_kind(x), x.t);
            if (!x.view.empty())  // whole blocks (a row of several view rows: any row)
                g = std::lcm(g, std::max<uint64_t>(1, x.view.block() / k.cols));
        }
        for (size_t j = 0; j < k.outputs.size(); ++j) {
            need(out_kind(k, j), k.outputs[j]);
            if (!out_view(k, j).empty())
                g = std::lcm(g, std::max<uint64_t>(1, out_view(k, j).row() / k.cols));
        }
        return g;
    }
    uint64_t min_es = 4, rows = 1;  // chunks of whole rows of every view
    auto need = [&](DType t, const FkView& v) {
        min_es = std::min<uint64_t>(min_es, es_of(t));
        rows = std::lcm(rows, std::max<uint64_t>(1, v.block()));
    };
    for (const FkInput& x : k.inputs)
        if (!x.scalar) need(x.t, x.view);
    for (size_t j = 0; j < k.outputs.size(); ++j) need(k.outputs[j], out_view(k, j));
    return std::lcm(kStick / min_es, rows);
}

uint64_t fused_lx_bytes(const FusedKernel& k, uint64_t chunk) {
    if (chunk == 0) return 0;
    return layout(k, lower(k), chunk).total;
}

bool fused_long_rows_ok(const FusedKernel& k, uint64_t n, uint64_t lx_budget) {
    return long_rows_ok(k, n, lx_budget);
}

uint64_t FkView::extent() const {
    uint64_t e = offset + 1;
    for (size_t d = 0; d < sizes.size(); ++d) e += (sizes[d] - 1) * strides[d];
    return e;
}

uint64_t fused_operand_elems(const FusedKernel& k, uint64_t n, FkKind kind, const FkView& view) {
    if (!view.empty()) return view.extent();
    return kind == FkKind::SCALAR ? 1
           : kind == FkKind::ROW  ? (k.cols ? n / k.cols : n)
           : kind == FkKind::COL  ? k.cols
                                  : n;
}

bool fused_views_fit(const FusedKernel& k, uint64_t n) {
    auto fits = [n](const FkView& v) {
        return v.empty() || std::accumulate(v.sizes.begin(), v.sizes.end(), uint64_t{1},
                                            std::multiplies<>()) == n;
    };
    for (const FkInput& x : k.inputs)
        if (!fits(x.view)) return false;
    for (const FkView& v : k.out_views)
        if (!fits(v)) return false;
    return true;
}

namespace {

// A flat kernel's iota is the position as I32: n at most 2^31.
void check_flat_iota(const FusedKernel& k, uint64_t n) {
    if (k.cols || n <= (1ull << 31)) return;
    for (const FkInstr& c : k.code)
        if (c.op == FkOp::IOTA)
            throw std::invalid_argument("fused kernel: 'iota' over more than 2^31 positions");
}

}  // namespace

std::vector<uint8_t> build_fused(const FusedKernel& k, uint64_t n, const FusedPlan& p) {
    if (n == 0) throw std::invalid_argument("fused kernel: empty (nothing to launch)");
    check_flat_iota(k, n);
    if (!fused_views_fit(k, n))
        throw std::invalid_argument("fused kernel: a view is not of n positions");
    if (p.col_chunk) {
        if (p.cores == 0 || p.groups == 0 || p.cores % p.groups || p.groups > n / k.cols ||
            p.col_chunk % long_unit(k) || !long_rows_ok(k, n, ~0ull))
            throw std::invalid_argument("fused kernel: plan does not suit the kernel");
        Emitter e(k, n, p);
        return e.build();
    }
    if (p.cores == 0 || !p.chunk || p.chunk % fused_unit(k, n) || (k.cols && n % k.cols))
        throw std::invalid_argument("fused kernel: plan does not suit the kernel");
    Emitter e(k, n, p);
    return e.build();
}

FusedPlan price_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, FusedPlan p) {
    const auto image = build_fused(k, n, p);
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (const FkInput& x : k.inputs)
        args.push_back(at), at += up128(fused_operand_elems(k, n, in_kind(x), x.view) * es_of(x.t));
    for (size_t j = 0; j < k.outputs.size(); ++j)
        args.push_back(at), at += up128(fused_operand_elems(k, n, out_kind(k, j), out_view(k, j)) *
                                        es_of(k.outputs[j]));
    const spyre_engine_result r = pricer.price(image, p.cores, args, at);
    p.cycles = r.total_cycles;
    p.ddr_bytes = r.ddr_read_bytes + r.ddr_write_bytes;
    const Lowered L = lower(k, p.col_chunk != 0);
    p.passes = static_cast<uint32_t>(L.passes.size());
    if (p.col_chunk) {
        p.lx_bytes = layout_long(k, L, p.col_chunk, n / k.cols).total;
        p.phases = phases_of(k, L).streams;
    } else {
        p.lx_bytes = fused_lx_bytes(k, p.chunk);
    }
    return p;
}

namespace {

// The fastest long-row plan (all cores on each row, column chunks), or none (cycles 0).
FusedPlan plan_long(const Pricer& pricer, const FusedKernel& k, uint64_t n, uint32_t max_cores) {
    FusedPlan best{};
    const uint64_t budget = pricer.lx_budget();
    if (!long_rows_ok(k, n, budget)) return best;
    const uint64_t C = k.cols, N = n / C, u = long_unit(k), units = (C + u - 1) / u;
    const Lowered L = lower(k, true);
    const uint32_t streams = phases_of(k, L).streams;
    uint64_t lo = 0, hi = budget / u + 1;  // the largest chunk (in units) that fits LX
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        (layout_long(k, L, mid * u, N).total <= budget ? lo : hi) = mid;
    }
    if (lo == 0) return best;
    // g groups of c cores: the rows dealt to the groups, each row's columns over its group
    for (uint32_t g = 1; g <= N && g <= max_cores; g *= 2)
        for (uint32_t c = 1; g * c <= max_cores; c *= 2) {
            if (c > units && c > 1) break;
            const uint64_t per_core = (units + c - 1) / c * u, rows = (N + g - 1) / g;
            std::vector<uint64_t> chunks;
            for (uint64_t s : {1, 2, 4})
                chunks.push_back(std::min(lo * u, ((per_core + s - 1) / s + u - 1) / u * u));
            std::sort(chunks.begin(), chunks.end());
            chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
            for (uint64_t e : chunks) {
                // the engine times at most 2M operations per job
                if (rows * streams * ((per_core + e - 1) / e) * g * c >= 50000) continue;
                FusedPlan p;
                p.cores = g * c, p.groups = g, p.col_chunk = e;
                p = price_fused(pricer, k, n, p);
                if (!best.cycles || p.cycles < best.cycles) best = p;
            }
        }
    return best;
}

}  // namespace

FusedPlan plan_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, uint32_t max_cores) {
    if (n == 0) throw std::invalid_argument("fused kernel: empty (nothing to launch)");
    check_flat_iota(k, n);
    if (!fused_views_fit(k, n))
        throw std::invalid_argument("fused kernel: a view is not of n positions");
    max_cores = std::max<uint32_t>(1, std::min<uint32_t>(max_cores, pricer.config().num_cores));
    const uint64_t N = k.cols ? n / k.cols : n;  // work items: positions or rows
    const uint64_t u = fused_unit(k, n), units = (N + u - 1) / u, budget = pricer.lx_budget();
    // rows that do not fit a core's scratchpad, or fewer rows than cores: long rows too
    const bool rows_fit = !k.cols || fused_lx_bytes(k, u) <= budget;
    const FusedPlan lp =
        k.cols && (!rows_fit || N < max_cores) ? plan_long(pricer, k, n, max_cores) : FusedPlan{};
    if (!rows_fit) {
        if (!lp.cycles)
            throw std::invalid_argument("fused kernel: rows of " + std::to_string(k.cols) +
                                        " elements do not fit a core's scratchpad");
        return lp;
    }
    // LX grows linearly in the chunk: the largest that fits, by bisection on units
    uint64_t lo = 0, hi = budget / u + 1;
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        (fused_lx_bytes(k, mid * u) <= budget ? lo : hi) = mid;
    }
    const uint64_t emax = lo * u;
    if (emax == 0) throw std::invalid_argument("fused kernel: no chunk fits LX");
    FusedPlan best = lp;
    for (uint32_t c = 1;; c = std::min(2 * c, max_cores)) {
        if (c <= units || c == 1) {
            const uint64_t per_core = (units + c - 1) / c * u;
            std::vector<uint64_t> chunks;
            for (uint64_t s : {1, 2, 4, 8})
                chunks.push_back(std::min(emax, ((per_core + s - 1) / s + u - 1) / u * u));
            std::sort(chunks.begin(), chunks.end());
            chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
            for (uint64_t e : chunks) {
                if (N / e >= 50000) continue;  // the engine times at most 2M operations per job
                FusedPlan p;
                p.cores = c, p.chunk = e;
                p = price_fused(pricer, k, n, p);
                if (!best.cycles || p.cycles < best.cycles) best = p;
            }
        }
        if (c == max_cores) break;
    }
    if (!best.cycles)
        throw std::invalid_argument("fused kernel: no plan within the engine's limits");
    return best;
}

std::string fused_plan_name(const FusedPlan& p) {
    char buf[128];
    if (p.col_chunk) {
        std::snprintf(buf, sizeof buf,
                      "%u cores (%u per row), long rows: chunks of %llu columns, %u phases, %u "
                      "passes",
                      p.cores, p.cores / std::max<uint32_t>(1, p.groups),
                      static_cast<unsigned long long>(p.col_chunk), p.phases, p.passes);
        return buf;
    }
    std::snprintf(buf, sizeof buf, "%u cores, chunk %llu, %u passes", p.cores,
                  static_cast<unsigned long long>(p.chunk), p.passes);
    return buf;
}

}  // namespace spyre::ops
