// SPDX-License-Identifier: MIT
// Spyre engine ISA: opcodes, fields and encoding. Documentation/isa.md is the specification.
#pragma once

#include <cstdint>
#include <cstring>

namespace spyre::isa {

inline constexpr uint32_t kMagic = 0x50595053;  // "SPYP" little endian
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 32;
inline constexpr uint32_t kInstrBytes = 16;
inline constexpr uint32_t kNumRegs = 32;
inline constexpr uint32_t kMaxArgs = 16;
inline constexpr uint32_t kStickBytes = 128;
inline constexpr uint32_t kMaxLoopDepth = 8;
inline constexpr uint32_t kMaxInstructions = 1u << 20;
inline constexpr uint32_t kMaxMatDim = 4096;

// Registers with a fixed meaning at program start.
inline constexpr uint8_t kRegZero = 0;      // always reads 0, writes are ignored
inline constexpr uint8_t kRegCoreId = 1;    // core id, 0 .. num_cores-1
inline constexpr uint8_t kRegNumCores = 2;  // cores running the program

enum class Op : uint8_t {
    NOP = 0x00,
    HALT = 0x01,
    LI = 0x02,
    ARG = 0x03,
    ALU = 0x04,
    BR = 0x05,
    LOOP = 0x06,
    ENDLOOP = 0x07,
    LXLD = 0x08,
    LXST = 0x09,
    SPAN = 0x0a,
    LOAD = 0x10,
    STORE = 0x11,
    MCLOAD = 0x12,
    MM = 0x20,
    VUN = 0x21,
    VBIN = 0x22,
    VRED = 0x23,
    VTRANS = 0x24,
    VSEL = 0x25,
    VIOTA = 0x26,
    VFMA = 0x27,
    VINT = 0x28,  // exact integer elementwise ops and conversions
    VRNG = 0x29,
    SEND = 0x30,
    RECV = 0x31,
    ALLRED = 0x32,
    BAR = 0x33,
};

// The VUN functions FLOOR..ATANH (function codes 16..36) in code order, as X(ENUMERATOR,
// name): VUn and libspyre's op lists that map onto them one to one (its elementwise and fused
// kernel ops) expand this one list, so their orders cannot drift apart. ROUND is half to even;
// SIGN is (x > 0) - (x < 0): NaN and -0 give +0.
// clang-format off
#define SPYRE_ISA_VUN_FUNCTIONS(X)                                                                \
    X(FLOOR, floor) X(CEIL, ceil) X(TRUNC, trunc) X(ROUND, round) X(SIGN, sign) X(ERF, erf)       \
    X(ERFC, erfc) X(LOG1P, log1p) X(EXPM1, expm1) X(EXP2, exp2) X(LOG2, log2) X(LOG10, log10)     \
    X(TAN, tan) X(ASIN, asin) X(ACOS, acos) X(ATAN, atan) X(SINH, sinh) X(COSH, cosh)             \
    X(ASINH, asinh) X(ACOSH, acosh) X(ATANH, atanh)
// clang-format on
// Expanders for it: the enumerators of an enum, and their names.
#define SPYRE_ISA_ENUMERATOR(e, name) e,
#define SPYRE_ISA_NAME(e, name) #name,

enum class Alu : uint8_t {
    ADD,
    SUB,
    MUL,
    DIVU,
    REMU,
    AND,
    OR,
    XOR,
    SHL,
    SHR,
    SRA,
    MIN,
    MAX,
    MINU,
    MAXU,
    SLT,
    SLTU,
    SEQ,
    COUNT
};
enum class Cond : uint8_t { ALWAYS, EQ, NE, LT, GE, LTU, GEU, COUNT };
// I64 and U8 are only valid in VINT, VRED's integer path and MM-free integer programs; the
// other vector instructions take F32..I32 (kVecTypes).
enum class DType : uint8_t { F32, F16, BF16, I8, I32, I64, U8, COUNT };
inline constexpr uint8_t kVecTypes = 5;  // F32 .. I32: the types of the fp32 vector path
inline constexpr bool int_type(DType t) {
    return t == DType::I8 || t == DType::I32 || t == DType::I64 || t == DType::U8;
}
enum class VUn : uint8_t {
    COPY,
    SET,
    NEG,
    ABS,
    RELU,
    EXP,
    RSQRT,
    SQRT,
    RECIP,
    TANH,
    GELU,
    SILU,
    LOG,
    SIN,
    COS,
    GELU_TANH,
    // 16.. (function codes that were invalid before: the program format stays version 1)
    // clang-format off
    SPYRE_ISA_VUN_FUNCTIONS(SPYRE_ISA_ENUMERATOR)
    // clang-format on
    COUNT
};
// EQ..GE compare and give 1.0 (true) or 0.0 (false) in the destination type.
enum class VBin : uint8_t { ADD, SUB, MUL, DIV, MAX, MIN, EQ, NE, LT, LE, GT, GE, COUNT };
enum class Bcast : uint8_t { NONE, SCALAR, ROW, COL, IMM, COUNT };
// PROD only on VRED's integer path (an I64 or U8 operand).
enum class Red : uint8_t { SUM, MAX, MIN, PROD, COUNT };
// VINT functions: exact integer arithmetic with two's-complement wrapping (Documentation/isa.md).
enum class VInt : uint8_t {
    ADD,
    SUB,
    MUL,
    DIV,  // floor division (Python / torch.floor_divide)
    REM,  // remainder with the divisor's sign (Python % / torch.remainder)
    MAX,
    MIN,
    AND,
    OR,
    XOR,
    SHL,
    SHR,  // arithmetic (logical for U8)
    EQ,   // EQ..GE write 1 / 0 in the destination type
    NE,
    LT,
    LE,
    GT,
    GE,
    NEG,  // unary from here on: src2 unused
    ABS,
    NOT,
    CVT,  // conversion between any two types
    COUNT
};
inline constexpr bool vint_unary(VInt f) { return f >= VInt::NEG; }
inline constexpr bool vint_compare(VInt f) { return f >= VInt::EQ && f <= VInt::GE; }
// VIOTA functions: IOTA writes alpha*i + beta*j + gamma; MASK keeps src where that is >= 0.
enum class Iota : uint8_t { IOTA, MASK, COUNT };
// VRNG functions (spyre/philox.hpp): raw Philox words (I32), uniform [0, 1), standard normal.
enum class Rng : uint8_t { BITS, UNIFORM, NORMAL, COUNT };
enum class Dir : uint8_t { NEXT, PREV, COUNT };

inline constexpr uint8_t kMmAccumulate = 1;  // MM flags bit 0: C += A*B (else C = A*B)
inline constexpr uint8_t kMmTransA = 2;      // MM flags bit 1: A stored K x M (A^T row-major)
inline constexpr uint8_t kMmTransB = 4;      // MM flags bit 2: B stored N x K (B^T row-major)

// Operand modifier byte of a second/third vector operand (VBIN and VSEL flags, VFMA flags and
// func): low nibble = broadcast mode, high nibble = the operand's own type + 1, where 0 means
// "the instruction's source type" (so every pre-existing VBIN encoding keeps its meaning).
inline constexpr DType kSrcType = DType::COUNT;  // "same as the source type" for operand_mode
inline constexpr uint8_t operand_mode(Bcast m, DType t = kSrcType) {
    const uint8_t tn = t == kSrcType ? 0 : static_cast<uint8_t>(static_cast<uint8_t>(t) + 1);
    return static_cast<uint8_t>((tn << 4) | static_cast<uint8_t>(m));
}
// VSEL func byte: bit 0 = invert (dst = mask ? y : x), bit 1 reserved (0), bits 2-3 = mask
// broadcast (NONE, SCALAR, ROW, COL), bits 4-7 = mask type + 1 (0 = source type).
inline constexpr uint8_t kSelInvert = 1;
inline constexpr uint8_t sel_func(bool invert, Bcast mask_mode = Bcast::NONE,
                                  DType mask_t = kSrcType) {
    const uint8_t tn =
        mask_t == kSrcType ? 0 : static_cast<uint8_t>(static_cast<uint8_t>(mask_t) + 1);
    return static_cast<uint8_t>((tn << 4) | (static_cast<uint8_t>(mask_mode) << 2) |
                                (invert ? kSelInvert : 0));
}

inline constexpr uint32_t dtype_size(DType t) {
    switch (t) {
        case DType::F32:
            return 4;
        case DType::F16:
            return 2;
        case DType::BF16:
            return 2;
        case DType::I8:
            return 1;
        case DType::I32:
            return 4;
        case DType::I64:
            return 8;
        case DType::U8:
            return 1;
        default:
            return 0;
    }
}

// Integer element of type t at p, widened (signed types sign-extend; floats are not integers).
inline int64_t load_int(DType t, const uint8_t* p) {
    switch (t) {
        case DType::I8:
            return static_cast<int8_t>(*p);
        case DType::U8:
            return *p;
        case DType::I32: {
            int32_t v;
            std::memcpy(&v, p, 4);
            return v;
        }
        default: {
            int64_t v;
            std::memcpy(&v, p, 8);
            return v;
        }
    }
}

// Stores the low bits of v as type t (two's-complement wrapping).
inline void store_int(DType t, uint8_t* p, int64_t v) {
    switch (t) {
        case DType::I8:
        case DType::U8:
            *p = static_cast<uint8_t>(v);
            break;
        case DType::I32: {
            const auto w = static_cast<int32_t>(static_cast<uint32_t>(v));
            std::memcpy(p, &w, 4);
            break;
        }
        default:
            std::memcpy(p, &v, 8);
            break;
    }
}

// dt byte of VUN/VBIN/VRED: source type in the high nibble, destination type in the low one.
inline constexpr uint8_t dt_pair(DType dst, DType src) {
    return static_cast<uint8_t>((static_cast<uint8_t>(src) << 4) | static_cast<uint8_t>(dst));
}

// One 16-byte instruction. Byte layout: op, dt, a, b, c, d, func, flags, imm (int64 LE).
struct Instr {
    uint8_t op = 0, dt = 0, a = 0, b = 0, c = 0, d = 0, func = 0, flags = 0;
    int64_t imm = 0;
};
static_assert(sizeof(Instr) == kInstrBytes);

inline void encode(const Instr& in, uint8_t* out) {
    out[0] = in.op, out[1] = in.dt, out[2] = in.a, out[3] = in.b;
    out[4] = in.c, out[5] = in.d, out[6] = in.func, out[7] = in.flags;
    uint64_t v = static_cast<uint64_t>(in.imm);
    for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(v >> (8 * i));
}

inline Instr decode(const uint8_t* p) {
    Instr in;
    in.op = p[0], in.dt = p[1], in.a = p[2], in.b = p[3];
    in.c = p[4], in.d = p[5], in.func = p[6], in.flags = p[7];
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[8 + i]) << (8 * i);
    in.imm = static_cast<int64_t>(v);
    return in;
}

// Program header, little endian, kHeaderBytes long.
struct Header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_bytes;
    uint32_t num_instructions;
    uint32_t flags;        // must be 0
    uint32_t reserved[4];  // must be 0
};
static_assert(sizeof(Header) == kHeaderBytes);

}  // namespace spyre::isa
