// SPDX-License-Identifier: MIT
#include "ops/fused_program.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
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

constexpr const char* kNames[] = {"load", "const", "neg",   "abs",   "relu", "exp",
                                  "log",  "sqrt",  "rsqrt", "recip", "tanh", "sigmoid",
                                  "silu", "gelu",  "sin",   "cos",   "cast", "add",
                                  "sub",  "mul",   "div",   "max",   "min",  "store"};
static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(FkOp::COUNT));

bool unary(FkOp op) { return op >= FkOp::NEG && op <= FkOp::CAST; }
uint64_t es_of(DType t) { return isa::dtype_size(t); }

const char* type_name(DType t) {
    return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16";
}

DType parse_type(const std::string& s, const std::string& line) {
    if (s == "f32") return DType::F32;
    if (s == "f16") return DType::F16;
    if (s == "bf16") return DType::BF16;
    throw std::invalid_argument("fused kernel: unsupported type '" + s + "' in '" + line + "'");
}

// ---- lowering the description to vector passes ----

// Where a value lives: an input chunk (IN, parity region), a scalar input slot (SIN), a fp32
// temporary slot (TMP), an output chunk (OUT, parity region), the zero scalar, or an immediate.
enum class Loc : uint8_t { IN, SIN, TMP, OUT, ZERO, IMM };

struct Opd {
    Loc loc = Loc::IMM;
    int idx = 0;
    DType t = DType::F32;
    float imm = 0.0f;
    Bcast mode() const {
        return loc == Loc::IMM                         ? Bcast::IMM
               : (loc == Loc::SIN || loc == Loc::ZERO) ? Bcast::SCALAR
                                                       : Bcast::NONE;
    }
    bool full() const { return mode() == Bcast::NONE; }
};

// One vector pass: VUN d = f(x); VBIN d = x f y; VFMA d = x * y + z; VSEL d = z != 0 ? x : y.
struct Pass {
    isa::Op op;
    uint8_t func;
    Opd d, x, y, z;
};

struct Lowered {
    std::vector<Pass> passes;
    uint32_t tmp_slots = 0;
};

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
            return isa::VUn::COPY;
    }
}

isa::VBin vbin_of(FkOp op) {
    return static_cast<isa::VBin>(static_cast<uint8_t>(op) - static_cast<uint8_t>(FkOp::ADD));
}

Lowered lower(const FusedKernel& k) {
    const size_t n = k.code.size();
    // the last instruction reading each value, and the one output a value goes to if a single
    // store is its only use (then the producing pass writes the output chunk directly)
    std::vector<int> last(n, -1), uses(n, 0), store_of(n, -1);
    for (size_t i = 0; i < n; ++i)
        for (int v : {k.code[i].a, k.code[i].b})
            if (v >= 0) last[v] = static_cast<int>(i), ++uses[v];
    for (size_t i = 0; i < n; ++i)
        if (k.code[i].op == FkOp::STORE && uses[k.code[i].a] == 1)
            store_of[k.code[i].a] = k.code[i].arg;

    Lowered L;
    std::vector<Opd> val(n);
    std::vector<bool> free_slot;
    auto alloc = [&]() {
        for (size_t s = 0; s < free_slot.size(); ++s)
            if (free_slot[s]) return free_slot[s] = false, static_cast<int>(s);
        free_slot.push_back(false);
        L.tmp_slots = static_cast<uint32_t>(free_slot.size());
        return static_cast<int>(free_slot.size() - 1);
    };
    auto release = [&](const Opd& o) {
        if (o.loc == Loc::TMP) free_slot[o.idx] = true;
    };
    const Opd zero{Loc::ZERO, 0, DType::F32, 0.0f};
    // a broadcast operand as a full fp32 temporary (a select whose zero mask picks y, exact)
    auto materialize = [&](const Opd& y) {
        const Opd t{Loc::TMP, alloc(), DType::F32, 0.0f};
        L.passes.push_back({isa::Op::VSEL, 0, t, t, y, zero});
        return t;
    };
    for (size_t i = 0; i < n; ++i) {
        const FkInstr& in = k.code[i];
        if (in.op == FkOp::LOAD) {
            const FkInput& x = k.inputs[in.arg];
            val[i] = {x.scalar ? Loc::SIN : Loc::IN, in.arg, x.t, 0.0f};
            continue;
        }
        if (in.op == FkOp::CONST) {
            val[i] = {Loc::IMM, 0, DType::F32, in.imm};
            continue;
        }
        if (in.op == FkOp::STORE) {
            const Opd& v = val[in.a];
            const Opd o{Loc::OUT, in.arg, k.outputs[in.arg], 0.0f};
            if (store_of[in.a] == in.arg && v.loc == Loc::OUT) continue;  // written in place
            if (v.loc == Loc::IMM)
                L.passes.push_back(
                    {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::SET), o, v, {}, {}});
            else if (!v.full())
                L.passes.push_back({isa::Op::VSEL, 0, o, o, v, zero});
            else
                L.passes.push_back(
                    {isa::Op::VUN, static_cast<uint8_t>(isa::VUn::COPY), o, v, {}, {}});
            if (last[in.a] == static_cast<int>(i)) release(v);
            continue;
        }
        Opd x = val[in.a], y = in.b >= 0 ? val[in.b] : Opd{};
        if (in.op == FkOp::CAST && (in.t == DType::F32 || x.loc == Loc::IMM)) {
            // fp32 is every value's compute type; an immediate is rounded on the host
            val[i] = x;
            if (x.loc == Loc::IMM && in.t == DType::F16)
                val[i].imm = num::f16_to_f32(num::f32_to_f16(x.imm));
            if (x.loc == Loc::IMM && in.t == DType::BF16)
                val[i].imm = num::bf16_to_f32(num::f32_to_bf16(x.imm));
            if (x.loc == Loc::TMP) last[in.a] = last[i] = -1;  // the alias keeps its slot
            continue;
        }
        std::vector<int> scratch;
        if (!x.full() && (unary(in.op) || !y.full() ||
                          !(in.op == FkOp::ADD || in.op == FkOp::MUL || in.op == FkOp::MAX ||
                            in.op == FkOp::MIN || in.op == FkOp::SUB))) {
            x = materialize(x);
            scratch.push_back(x.idx);
        }
        // operands whose last use this is free their slots first: passes may run in place
        for (int v : {in.a, in.b})
            if (v >= 0 && last[v] == static_cast<int>(i)) release(val[v]);
        const bool to_out =
            store_of[i] >= 0 && (in.op != FkOp::CAST || in.t == k.outputs[store_of[i]]);
        Opd d = to_out ? Opd{Loc::OUT, store_of[i], k.outputs[store_of[i]], 0.0f}
                       : Opd{Loc::TMP, alloc(), in.op == FkOp::CAST ? in.t : DType::F32, 0.0f};
        if (in.op == FkOp::CAST) {
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(isa::VUn::COPY), d, x, {}, {}});
        } else if (in.op == FkOp::SIGMOID) {  // 1 / (1 + exp(-x)) in fp32 (ops-elementwise.md)
            const Opd t{Loc::TMP, alloc(), DType::F32, 0.0f};
            const Opd one{Loc::IMM, 0, DType::F32, 1.0f};
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(isa::VUn::NEG), t, x, {}, {}});
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(isa::VUn::EXP), t, t, {}, {}});
            L.passes.push_back(
                {isa::Op::VBIN, static_cast<uint8_t>(isa::VBin::ADD), t, t, one, {}});
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(isa::VUn::RECIP), d, t, {}, {}});
            scratch.push_back(t.idx);
        } else if (unary(in.op)) {
            L.passes.push_back({isa::Op::VUN, static_cast<uint8_t>(vun_of(in.op)), d, x, {}, {}});
        } else if (x.full()) {
            L.passes.push_back({isa::Op::VBIN, static_cast<uint8_t>(vbin_of(in.op)), d, x, y, {}});
        } else if (in.op == FkOp::SUB) {  // c - y = fma(y, -1, c): one rounding, as VBIN SUB
            const Opd m1{Loc::IMM, 0, DType::F32, -1.0f};
            L.passes.push_back({isa::Op::VFMA, 0, d, y, m1, x});
        } else {  // commutative: the full operand first
            L.passes.push_back({isa::Op::VBIN, static_cast<uint8_t>(vbin_of(in.op)), d, y, x, {}});
        }
        for (int s : scratch) free_slot[s] = true;
        val[i] = d;
    }
    return L;
}

// LX placement: stick 0 the zero scalar, two sticks per scalar input, the two parity regions
// (a chunk buffer per full input and per output), then the fp32 temporaries.
struct Layout {
    std::vector<uint64_t> sin, in, out;  // scalar slots; chunk buffers (parity relative)
    uint64_t regions = 0, region = 0, tmp = 0, slot = 0, total = 0;
};

Layout layout(const FusedKernel& k, const Lowered& L, uint64_t E) {
    Layout l;
    uint64_t at = kStick;
    l.sin.assign(k.inputs.size(), 0);
    l.in.assign(k.inputs.size(), 0);
    for (size_t i = 0; i < k.inputs.size(); ++i)
        if (k.inputs[i].scalar) l.sin[i] = at, at += 2 * kStick;
    l.regions = at;
    uint64_t r = 0;
    for (size_t i = 0; i < k.inputs.size(); ++i)
        if (!k.inputs[i].scalar) l.in[i] = r, r += up128(E * es_of(k.inputs[i].t));
    for (DType t : k.outputs) l.out.push_back(r), r += up128(E * es_of(t));
    l.region = r;
    l.tmp = l.regions + 2 * r;
    l.slot = up128(E * 4);
    l.total = l.tmp + L.tmp_slots * l.slot;
    return l;
}

// Registers: r7 chunk start (element), r8 the core's end, r9 chunk elements, r10 parity offset,
// r11 chunk count; r12-r18 scratch; r20-r22 operand addresses, r24-r30 vector descriptors; r31
// the span base.
using chunk_loop::rE, chunk_loop::rEnd, chunk_loop::rN, chunk_loop::rPar, chunk_loop::rPos;

class Emitter {
  public:
    Emitter(const FusedKernel& k, uint64_t n, const FusedPlan& p)
        : k_(k), n_(n), p_(p), L_(lower(k)), l_(layout(k, L_, p.chunk)) {}
    std::vector<uint8_t> build();

  private:
    const FusedKernel& k_;
    uint64_t n_;
    const FusedPlan& p_;
    Lowered L_;
    Layout l_;
    ProgramBuilder b_;

    void dma(bool load, Reg lx, Reg ddr, Reg len) {
        b_.alu(isa::Alu::AND, 31, ddr, 0, -static_cast<int64_t>(kStick));
        b_.span(31);
        if (load)
            b_.load(lx, ddr, len);
        else
            b_.store(lx, ddr, len);
    }
    // loads of the full inputs' chunk [pos, pos + e) into parity region par
    void loads(Reg pos, Reg e, Reg par) {
        for (size_t i = 0; i < k_.inputs.size(); ++i) {
            if (k_.inputs[i].scalar) continue;
            const uint64_t es = es_of(k_.inputs[i].t);
            b_.addi(12, par, static_cast<int64_t>(l_.regions + l_.in[i]));
            b_.arg(13, static_cast<uint32_t>(i));
            b_.muli(14, pos, es);
            b_.add(13, 13, 14);
            b_.muli(14, e, es);
            dma(true, 12, 13, 14);
        }
    }
    void addr(Reg rd, const Opd& o) {
        switch (o.loc) {
            case Loc::IN:
                b_.addi(rd, rPar, static_cast<int64_t>(l_.regions + l_.in[o.idx]));
                return;
            case Loc::OUT:
                b_.addi(rd, rPar, static_cast<int64_t>(l_.regions + l_.out[o.idx]));
                return;
            case Loc::TMP:
                b_.li(rd, static_cast<int64_t>(l_.tmp + o.idx * l_.slot));
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
    static DType typ(const Opd& o) { return o.loc == Loc::IMM ? isa::kSrcType : o.t; }
    void pass(const Pass& p) {
        addr(20, p.d);
        addr(21, p.x);
        switch (p.op) {
            case isa::Op::VUN:
                b_.vun(static_cast<isa::VUn>(p.func), p.d.t,
                       p.x.loc == Loc::IMM ? DType::F32 : p.x.t, 20, 21, 24, p.x.imm);
                return;
            case isa::Op::VBIN:
                if (p.y.loc != Loc::IMM) addr(22, p.y);
                b_.vbin2(static_cast<isa::VBin>(p.func), p.y.mode(), p.d.t, p.x.t, typ(p.y), 20, 21,
                         p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.imm);
                return;
            case isa::Op::VFMA:
            case isa::Op::VSEL:
                if (p.y.loc != Loc::IMM) addr(22, p.y);
                addr(29, p.z);
                if (p.op == isa::Op::VFMA)
                    b_.vfma(p.d.t, p.x.t, 20, 21, p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.mode(),
                            p.z.mode(), p.y.imm, p.z.imm, typ(p.y), typ(p.z));
                else
                    b_.vsel(p.d.t, p.x.t, 20, 21, p.y.loc == Loc::IMM ? 0 : 22, 24, p.y.mode(),
                            p.y.imm, false, p.z.mode(), typ(p.z), typ(p.y));
                return;
            default:
                throw std::logic_error("fused kernel: unexpected pass");
        }
    }
};

std::vector<uint8_t> Emitter::build() {
    const uint64_t u = fused_unit(k_), E = p_.chunk, U = (n_ + u - 1) / u, P = p_.cores;
    const auto I = static_cast<uint32_t>(k_.inputs.size());
    // the zero scalar (a select mask that always picks y)
    b_.set_regs(24, {1, 1, 4, 4});
    b_.vun(isa::VUn::SET, DType::F32, DType::F32, 0, 0, 24, 0.0f);
    for (uint32_t i = 0; i < I; ++i) {  // scalar inputs, loaded once
        if (!k_.inputs[i].scalar) continue;
        b_.arg(13, i);
        b_.alu(isa::Alu::AND, 15, 13, 0, kStick - 1);
        b_.sub(13, 13, 15);
        b_.addi(14, 15, static_cast<int64_t>(es_of(k_.inputs[i].t)));
        b_.li(12, static_cast<int64_t>(l_.sin[i]));
        dma(true, 12, 13, 14);
    }
    chunk_loop::emit_core_range(b_, n_, u, U, P, E);
    loads(rPos, rE, rPar);
    b_.loop(rN);
    {
        chunk_loop::emit_next_chunk(b_, E, l_.region);
        loads(chunk_loop::rNextPos, chunk_loop::rNextE, chunk_loop::rNextPar);
        // one row of e elements per pass (strides unused)
        b_.li(24, 1), b_.mov(25, rE), b_.li(26, 0), b_.li(27, 0), b_.li(28, 0), b_.li(30, 0);
        for (const Pass& p : L_.passes) pass(p);
        for (size_t j = 0; j < k_.outputs.size(); ++j) {
            const uint64_t es = es_of(k_.outputs[j]);
            b_.addi(12, rPar, static_cast<int64_t>(l_.regions + l_.out[j]));
            b_.arg(13, static_cast<uint32_t>(I + j));
            b_.muli(14, rPos, es);
            b_.add(13, 13, 14);
            b_.muli(14, rE, es);
            dma(false, 12, 13, 14);
        }
        chunk_loop::emit_advance(b_, E, l_.region);
    }
    b_.endloop();
    b_.halt();
    return b_.finish();
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
        if (w[0] == "in") {
            if (w.size() != 3 || (w[2] != "full" && w[2] != "scalar") || !k.code.empty())
                bad("expected 'in <type> full|scalar' before the ops");
            k.inputs.push_back({parse_type(w[1], line), w[2] == "scalar"});
            continue;
        }
        if (w[0] == "out") {
            if (w.size() != 2 || !k.code.empty()) bad("expected 'out <type>' before the ops");
            k.outputs.push_back(parse_type(w[1], line));
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
        if (w.size() < 4 || w[1] != "=" || w[0][0] != '%' || values.count(w[0]))
            bad("expected '%v = <op> ...'");
        const auto it = std::find(std::begin(kNames), std::end(kNames), w[2]);
        if (it == std::end(kNames) || *it == std::string("store")) bad("unknown op " + w[2]);
        ins.op = static_cast<FkOp>(it - std::begin(kNames));
        const size_t nargs = w.size() - 3;
        if (ins.op == FkOp::LOAD) {
            if (nargs != 1) bad("expected 'load <input>'");
            ins.arg = index(w[3], k.inputs.size());
        } else if (ins.op == FkOp::CONST) {
            char* end = nullptr;
            ins.imm = std::strtof(w[3].c_str(), &end);
            if (nargs != 1 || *end) bad("expected 'const <number>'");
        } else if (ins.op == FkOp::CAST) {
            if (nargs != 2) bad("expected 'cast <value> <type>'");
            ins.a = value(w[3]);
            ins.t = parse_type(w[4], line);
        } else if (unary(ins.op)) {
            if (nargs != 1) bad("expected one operand");
            ins.a = value(w[3]);
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
    return k;
}

std::string format_fused(const FusedKernel& k) {
    std::string s = "spyre.kernel 1\n";
    for (const FkInput& x : k.inputs)
        s += std::string("in ") + type_name(x.t) + (x.scalar ? " scalar\n" : " full\n");
    for (DType t : k.outputs) s += std::string("out ") + type_name(t) + "\n";
    for (size_t i = 0; i < k.code.size(); ++i) {
        const FkInstr& c = k.code[i];
        if (c.op == FkOp::STORE) {
            s += "store " + std::to_string(c.arg) + " %" + std::to_string(c.a) + "\n";
            continue;
        }
        s += "%" + std::to_string(i) + " = " + fk_name(c.op);
        if (c.op == FkOp::LOAD) s += " " + std::to_string(c.arg);
        if (c.op == FkOp::CONST) {
            char buf[32];
            std::snprintf(buf, sizeof buf, " %.9g", c.imm);
            s += buf;
        }
        if (c.a >= 0) s += " %" + std::to_string(c.a);
        if (c.b >= 0) s += " %" + std::to_string(c.b);
        if (c.op == FkOp::CAST) s += std::string(" ") + type_name(c.t);
        s += "\n";
    }
    return s;
}

uint64_t fused_unit(const FusedKernel& k) {
    uint64_t min_es = 4;
    for (const FkInput& x : k.inputs)
        if (!x.scalar) min_es = std::min<uint64_t>(min_es, es_of(x.t));
    for (DType t : k.outputs) min_es = std::min<uint64_t>(min_es, es_of(t));
    return kStick / min_es;
}

uint64_t fused_lx_bytes(const FusedKernel& k, uint64_t chunk) {
    if (chunk == 0 || chunk % fused_unit(k)) return 0;
    return layout(k, lower(k), chunk).total;
}

std::vector<uint8_t> build_fused(const FusedKernel& k, uint64_t n, const FusedPlan& p) {
    if (n == 0) throw std::invalid_argument("fused kernel: empty (nothing to launch)");
    if (p.cores == 0 || !fused_lx_bytes(k, p.chunk))
        throw std::invalid_argument("fused kernel: plan does not suit the kernel");
    Emitter e(k, n, p);
    return e.build();
}

FusedPlan price_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, FusedPlan p) {
    const auto image = build_fused(k, n, p);
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (const FkInput& x : k.inputs)
        args.push_back(at), at += up128(x.scalar ? es_of(x.t) : n * es_of(x.t));
    for (DType t : k.outputs) args.push_back(at), at += up128(n * es_of(t));
    const spyre_engine_result r = pricer.price(image, p.cores, args, at);
    p.cycles = r.total_cycles;
    p.ddr_bytes = r.ddr_read_bytes + r.ddr_write_bytes;
    p.lx_bytes = fused_lx_bytes(k, p.chunk);
    p.passes = static_cast<uint32_t>(lower(k).passes.size());
    return p;
}

FusedPlan plan_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, uint32_t max_cores) {
    if (n == 0) throw std::invalid_argument("fused kernel: empty (nothing to launch)");
    const uint64_t u = fused_unit(k), units = (n + u - 1) / u, budget = pricer.lx_budget();
    // LX grows linearly in the chunk: the largest that fits, by bisection on units
    uint64_t lo = 0, hi = budget / u + 1;
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        (fused_lx_bytes(k, mid * u) <= budget ? lo : hi) = mid;
    }
    const uint64_t emax = lo * u;
    if (emax == 0) throw std::invalid_argument("fused kernel: no chunk fits LX");
    max_cores = std::max<uint32_t>(1, std::min<uint32_t>(max_cores, pricer.config().num_cores));
    FusedPlan best{};
    for (uint32_t c = 1;; c = std::min(2 * c, max_cores)) {
        if (c <= units || c == 1) {
            const uint64_t per_core = (units + c - 1) / c * u;
            std::vector<uint64_t> chunks;
            for (uint64_t s : {1, 2, 4, 8})
                chunks.push_back(std::min(emax, ((per_core + s - 1) / s + u - 1) / u * u));
            std::sort(chunks.begin(), chunks.end());
            chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
            for (uint64_t e : chunks) {
                if (n / e >= 50000) continue;  // the engine times at most 2M operations per job
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
    char buf[96];
    std::snprintf(buf, sizeof buf, "%u cores, chunk %llu, %u passes", p.cores,
                  static_cast<unsigned long long>(p.chunk), p.passes);
    return buf;
}

}  // namespace spyre::ops
