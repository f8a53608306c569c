// SPDX-License-Identifier: MIT
// Program validation: header, opcodes, reserved fields, registers, operands, loops, branches.
#include "program.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace spyre::eng {

OpInfo op_info(uint8_t op) {
    switch (static_cast<Op>(op)) {
        case Op::NOP:
            return {true, 0, 0, "NOP"};
        case Op::HALT:
            return {true, 0, 0, "HALT"};
        case Op::LI:
            return {true, F_A | F_IMM, 0, "LI"};
        case Op::ARG:
            return {true, F_A | F_IMM, 0, "ARG"};
        case Op::ALU:
            return {true, F_A | F_B | F_C | F_FUNC | F_IMM, 0, "ALU"};
        case Op::BR:
            return {true, F_B | F_C | F_FUNC | F_IMM, 0, "BR"};
        case Op::LOOP:
            return {true, F_A | F_B | F_IMM, 0, "LOOP"};
        case Op::ENDLOOP:
            return {true, 0, 0, "ENDLOOP"};
        case Op::LXLD:
            return {true, F_A | F_B | F_IMM, 0, "LXLD"};
        case Op::LXST:
            return {true, F_B | F_C | F_IMM, 0, "LXST"};
        case Op::SPAN:
            return {true, F_B | F_IMM, 0, "SPAN"};
        case Op::LOAD:
            return {true, F_A | F_B | F_C | F_D | F_IMM, 6, "LOAD"};
        case Op::STORE:
            return {true, F_A | F_B | F_C | F_D | F_IMM, 6, "STORE"};
        case Op::MM:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FLAGS, 6, "MM"};
        case Op::VUN:
            return {true, F_DT | F_A | F_B | F_D | F_FUNC | F_IMM, 4, "VUN"};
        case Op::VBIN:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC | F_FLAGS | F_IMM, 5, "VBIN"};
        case Op::VRED:
            return {true, F_DT | F_A | F_B | F_D | F_FUNC | F_FLAGS, 3, "VRED"};
        case Op::VTRANS:
            return {true, F_DT | F_A | F_B | F_D, 4, "VTRANS"};
        case Op::VSEL:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC | F_FLAGS | F_IMM, 7, "VSEL"};
        case Op::VIOTA:
            return {true, F_DT | F_A | F_B | F_D | F_FUNC | F_IMM, 7, "VIOTA"};
        case Op::VFMA:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC | F_FLAGS | F_IMM, 7, "VFMA"};
        case Op::VINT:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC | F_FLAGS | F_IMM, 5, "VINT"};
        case Op::VRNG:
            return {true, F_DT | F_A | F_D | F_FUNC | F_IMM, 7, "VRNG"};
        case Op::SEND:
            return {true, F_A | F_C | F_FUNC, 0, "SEND"};
        case Op::RECV:
            return {true, F_A | F_C | F_FUNC, 0, "RECV"};
        case Op::ALLRED:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC, 0, "ALLRED"};
        case Op::BAR:
            return {true, F_B, 0, "BAR"};
        case Op::MCLOAD:
            return {true, F_A | F_B | F_C | F_D | F_FUNC | F_IMM, 6, "MCLOAD"};
    }
    return {false, 0, 0, "?"};
}

__attribute__((format(printf, 5, 6))) void set_fail(Failure& f, int code, int core, uint64_t pc,
                                                    const char* fmt, ...) {
    f.code = code;
    f.core = core;
    f.pc = pc;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(f.msg, sizeof f.msg, fmt, ap);
    va_end(ap);
}

// An operand modifier byte (isa::operand_mode): broadcast mode below max_mode, a type nibble
// naming a valid type or 0, and no type for IMM.
static const char* operand_mode_error(uint8_t m, uint8_t max_mode) {
    const uint8_t mode = m & 15, tn = m >> 4;
    if (mode >= max_mode) return "bad broadcast mode";
    if (tn > isa::kVecTypes) return "bad operand type";
    if (mode == static_cast<uint8_t>(isa::Bcast::IMM) && tn) return "IMM operand with a type";
    return nullptr;
}

static bool is_imm(uint8_t m) { return (m & 15) == static_cast<uint8_t>(isa::Bcast::IMM); }

// VRED on integers (an I64 or U8 type): integer source and destination, SUM/MAX/MIN/PROD.
template <class Bad>
static bool check_vred_int(const Instr& in, Bad& bad) {
    const uint8_t lo = in.dt & 15, hi = in.dt >> 4;
    if (!any_dtype_ok(lo) || !any_dtype_ok(hi) || !isa::int_type(static_cast<DType>(lo)) ||
        !isa::int_type(static_cast<DType>(hi)))
        return bad("integer reduction: source and destination must be I8, I32, I64 or U8");
    if (in.func >= static_cast<uint8_t>(isa::Red::COUNT)) return bad("bad reduction function");
    if (in.flags > 1) return bad("axis must be 0 or 1");
    if (in.imm) return bad("reserved imm nonzero");
    return true;
}

// VINT: integer source (any type for CVT); arithmetic keeps the source type, compares write any
// integer type; src2 has the source type (no type nibble); unary functions take no src2.
template <class Bad>
static bool check_vint(const Instr& in, Bad& bad) {
    const uint8_t lo = in.dt & 15, hi = in.dt >> 4;
    if (!any_dtype_ok(lo) || !any_dtype_ok(hi)) return bad("bad data type");
    if (in.func >= static_cast<uint8_t>(isa::VInt::COUNT)) return bad("bad integer function");
    const auto f = static_cast<isa::VInt>(in.func);
    const DType dt = static_cast<DType>(lo), st = static_cast<DType>(hi);
    if (f != isa::VInt::CVT && !isa::int_type(st)) return bad("source must be I8, I32, I64 or U8");
    if (isa::vint_compare(f) && !isa::int_type(dt))
        return bad("compare destination must be I8, I32, I64 or U8");
    if (!isa::vint_compare(f) && f != isa::VInt::CVT && dt != st)
        return bad("destination type must equal the source type");
    if (isa::vint_unary(f)) {
        if (in.c || in.flags || in.imm) return bad("unary function: c, flags and imm must be 0");
        return true;
    }
    if ((in.flags & 15) >= static_cast<uint8_t>(isa::Bcast::COUNT))
        return bad("bad broadcast mode");
    if (in.flags >> 4) return bad("src2 has the source type: type nibble must be 0");
    if (is_imm(in.flags) && in.c) return bad("src2 is IMM: c must be r0");
    if (!is_imm(in.flags) && in.imm) return bad("imm set but src2 is not IMM");
    return true;
}

bool check_operands(const Instr& in, uint32_t pc, Failure& f) {
    auto bad = [&](const char* what) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, pc, "%s: %s", op_info(in.op).name, what);
        return false;
    };
    const uint8_t lo = in.dt & 15, hi = in.dt >> 4;
    const uint64_t uimm = static_cast<uint64_t>(in.imm);
    constexpr uint8_t kModes = static_cast<uint8_t>(isa::Bcast::COUNT);
    switch (static_cast<Op>(in.op)) {
        case Op::ALU:
            if (in.func >= static_cast<uint8_t>(isa::Alu::COUNT)) return bad("bad ALU function");
            break;
        case Op::BR:
            if (in.func >= static_cast<uint8_t>(isa::Cond::COUNT)) return bad("bad condition");
            break;
        case Op::ARG:
            if (in.imm < 0 || in.imm >= static_cast<int64_t>(isa::kMaxArgs))
                return bad("argument index >= 16");
            break;
        case Op::MM: {
            if (in.dt != static_cast<uint8_t>(DType::F16) &&
                in.dt != static_cast<uint8_t>(DType::BF16) &&
                in.dt != static_cast<uint8_t>(DType::I8) &&
                in.dt != static_cast<uint8_t>(DType::F32))
                return bad("input type must be f16, bf16, i8 or f32");
            if (in.flags & ~(isa::kMmAccumulate | isa::kMmTransA | isa::kMmTransB))
                return bad("reserved flag bits set");
            break;
        }
        case Op::VRED:
            if (vred_int_path(in.dt)) return check_vred_int(in, bad);
            [[fallthrough]];
        case Op::VUN:
        case Op::VBIN: {
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            if (static_cast<uint64_t>(in.imm) >> 32) return bad("imm must be fp32 bits");
            Op op = static_cast<Op>(in.op);
            if (op == Op::VUN && in.func >= static_cast<uint8_t>(isa::VUn::COUNT))
                return bad("bad unary function");
            if (op == Op::VBIN) {
                if (in.func >= static_cast<uint8_t>(isa::VBin::COUNT))
                    return bad("bad binary function");
                if (const char* e = operand_mode_error(in.flags, kModes)) return bad(e);
            }
            if (op == Op::VRED) {
                if (in.func >= static_cast<uint8_t>(isa::Red::PROD))
                    return bad("bad reduction function (PROD needs an I64 or U8 type)");
                if (in.flags > 1) return bad("axis must be 0 or 1");
            }
            break;
        }
        case Op::MCLOAD:
            if (in.func >= isa::kNumRegs) return bad("group register beyond r31");
            break;
        case Op::VTRANS:
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            break;
        case Op::VSEL: {
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            if (in.func & 2) return bad("reserved func bit 1 set");
            if ((in.func >> 4) > isa::kVecTypes) return bad("bad mask type");
            if (const char* e = operand_mode_error(in.flags, kModes)) return bad(e);
            if (uimm >> 32) return bad("imm must be fp32 bits");
            if (!is_imm(in.flags) && in.imm) return bad("imm set but y is not IMM");
            if (is_imm(in.flags) && in.c) return bad("y is IMM: c must be r0");
            break;
        }
        case Op::VIOTA: {
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            if (in.func >= static_cast<uint8_t>(isa::Iota::COUNT)) return bad("bad function");
            if (uimm >> 32) return bad("imm must be fp32 bits");
            if (in.func == static_cast<uint8_t>(isa::Iota::IOTA) && (in.b || in.imm || hi))
                return bad("IOTA: b, imm and the source type must be 0");
            break;
        }
        case Op::VFMA: {
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            if (const char* e = operand_mode_error(in.flags, kModes)) return bad(e);
            if (const char* e = operand_mode_error(in.func, kModes)) return bad(e);
            if (!is_imm(in.flags) && (uimm & 0xffffffffu))
                return bad("imm low half set, s2 not IMM");
            if (!is_imm(in.func) && (uimm >> 32)) return bad("imm high half set, s3 not IMM");
            if (is_imm(in.flags) && in.c) return bad("s2 is IMM: c must be r0");
            break;
        }
        case Op::VINT:
            return check_vint(in, bad);
        case Op::VRNG: {
            if (!dtype_ok(lo) || hi) return bad("bad data type (no source type)");
            if (in.func >= static_cast<uint8_t>(isa::Rng::COUNT)) return bad("bad function");
            const bool bits = in.func == static_cast<uint8_t>(isa::Rng::BITS);
            if (bits && lo != static_cast<uint8_t>(DType::I32)) return bad("BITS writes i32 only");
            if (!bits && !float_dtype(static_cast<DType>(lo)))
                return bad("UNIFORM/NORMAL write f32, f16 or bf16 only");
            if (bits && in.imm) return bad("BITS: imm must be 0");
            break;
        }
        case Op::SEND:
        case Op::RECV:
            if (in.func >= static_cast<uint8_t>(isa::Dir::COUNT)) return bad("bad direction");
            break;
        case Op::ALLRED:
            if (!dtype_ok(in.dt) || !float_dtype(static_cast<DType>(in.dt)))
                return bad("type must be f32, f16 or bf16");
            if (in.func >= static_cast<uint8_t>(isa::Red::PROD))  // SUM, MAX, MIN
                return bad("bad reduction function");
            break;
        default:
            break;
    }
    return true;
}

bool validate(const uint8_t* bytes, uint64_t size, Program& p, Failure& f) {
    if (bytes == nullptr || size < isa::kHeaderBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "program shorter than its header");
        return false;
    }
    isa::Header h;
    std::memcpy(&h, bytes, sizeof h);
    if (h.magic != isa::kMagic) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "bad magic 0x%08x", h.magic);
        return false;
    }
    if (h.version != isa::kVersion || h.header_bytes != isa::kHeaderBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "unsupported version %u / header %u",
                 h.version, h.header_bytes);
        return false;
    }
    if (h.flags || h.reserved[0] || h.reserved[1] || h.reserved[2] || h.reserved[3]) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "nonzero header flags/reserved");
        return false;
    }
    if (h.num_instructions == 0 || h.num_instructions > isa::kMaxInstructions ||
        size != isa::kHeaderBytes + uint64_t{h.num_instructions} * isa::kInstrBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0,
                 "%u instructions do not match program size %llu", h.num_instructions,
                 static_cast<unsigned long long>(size));
        return false;
    }
    const uint32_t n = h.num_instructions;
    p.code.resize(n);
    p.match.assign(n, 0);
    std::vector<int32_t> parent(n, -1);
    std::vector<uint32_t> stack;
    for (uint32_t i = 0; i < n; ++i) {
        const Instr in = isa::decode(bytes + isa::kHeaderBytes + uint64_t{i} * isa::kInstrBytes);
        p.code[i] = in;
        OpInfo oi = op_info(in.op);
        if (!oi.valid) {
            set_fail(f, SPYRE_ENGINE_ERR_ILLEGAL_OPCODE, -1, i, "illegal opcode 0x%02x", in.op);
            return false;
        }
        const uint8_t fields[8] = {in.dt, in.a, in.b, in.c, in.d, in.func, in.flags, 0};
        for (int b = 0; b < 7; ++b) {
            if (!(oi.fields & (1u << b)) && fields[b]) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, i, "%s: reserved field %d nonzero",
                         oi.name, b + 1);
                return false;
            }
        }
        if (!(oi.fields & F_IMM) && in.imm) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, i, "%s: reserved imm nonzero", oi.name);
            return false;
        }
        for (int b = 1; b <= 3; ++b) {
            if (fields[b] >= isa::kNumRegs) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_REGISTER, -1, i, "%s: register r%u", oi.name,
                         fields[b]);
                return false;
            }
        }
        if (oi.fields & F_D) {
            // d = 0 on a transfer: no descriptor (one row)
            bool used = in.d != 0 || (in.op != static_cast<uint8_t>(Op::LOAD) &&
                                      in.op != static_cast<uint8_t>(Op::STORE) &&
                                      in.op != static_cast<uint8_t>(Op::MCLOAD));
            if (in.d >= isa::kNumRegs || (used && in.d + oi.desc_regs > isa::kNumRegs)) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_REGISTER, -1, i,
                         "%s: descriptor r%u..r%u beyond r31", oi.name, in.d,
                         in.d + oi.desc_regs - 1);
                return false;
            }
        }
        if (!check_operands(in, i, f)) return false;
        const Op op = static_cast<Op>(in.op);
        parent[i] = stack.empty() ? -1 : static_cast<int32_t>(stack.back());
        if (op == Op::LOOP) {
            if (stack.size() >= isa::kMaxLoopDepth) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, i, "loops nested deeper than %u",
                         isa::kMaxLoopDepth);
                return false;
            }
            stack.push_back(i);
        } else if (op == Op::ENDLOOP) {
            if (stack.empty()) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, i, "ENDLOOP without LOOP");
                return false;
            }
            p.match[i] = stack.back();
            p.match[stack.back()] = i;
            stack.pop_back();
        }
    }
    if (!stack.empty()) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, stack.back(), "LOOP without ENDLOOP");
        return false;
    }
    for (uint32_t i = 0; i < n; ++i) {
        const Instr& in = p.code[i];
        if (in.op != static_cast<uint8_t>(Op::BR)) continue;
        if (in.imm < 0 || in.imm >= static_cast<int64_t>(n)) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_BRANCH, -1, i, "branch target %lld out of range",
                     static_cast<long long>(in.imm));
            return false;
        }
        if (parent[in.imm] != parent[i]) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_BRANCH, -1, i,
                     "branch to %lld crosses a loop boundary", static_cast<long long>(in.imm));
            return false;
        }
    }
    return true;
}

}  // namespace spyre::eng
