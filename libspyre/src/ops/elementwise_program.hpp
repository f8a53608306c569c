// SPDX-License-Identifier: MIT
// The op library's elementwise programs: unary functions, casts, binary arithmetic and compares,
// where/select and fused multiply-adds over dense tensors, with the broadcasts the vector unit
// does natively (scalar, host value, row, column). Every core streams its own stick-aligned part
// of the output through double-buffered LX chunks; the planner picks the core count and the
// chunk size by pricing the very program on the cycle model (Documentation/ops-elementwise.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class EwOp : uint8_t {
    // unary: out = f(a)
    RELU,
    GELU,       // erf form
    GELU_TANH,  // tanh approximation
    SILU,
    SIGMOID,  // 1 / (1 + exp(-x)), four vector passes in fp32
    EXP,
    LOG,
    TANH,
    NEG,
    ABS,
    SQRT,
    RSQRT,
    RECIP,
    SIN,
    COS,
    // FLOOR .. ATANH: one VUN each (the public SPYRE_UNARY_FLOOR .. ATANH in order)
    // clang-format off
    SPYRE_ISA_VUN_FUNCTIONS(SPYRE_ISA_ENUMERATOR)
    // clang-format on
    CAST,  // copy converted to the output type
    // binary: out = a OP b; ADD/SUB compute a + alpha*b and a - alpha*b
    ADD,
    SUB,
    MUL,
    DIV,
    MAX,  // NaN-propagating
    MIN,
    EQ,  // compares write 1.0 / 0.0 in the output type
    NE,
    LT,
    LE,
    GT,
    GE,
    WHERE,   // out = cond != 0 ? a : b
    AFFINE,  // out = a * scale + shift, one fused multiply-add
    CLAMP,   // out = min(max(a, b), cond): torch.clamp with lower bound b, upper bound cond
    // integers only (VINT): floor division, remainder, bitwise ops, shifts, bitwise not
    FLOOR_DIV,
    REM,
    AND,
    OR,
    XOR,
    SHL,
    SHR,
    NOT,  // unary
    COUNT
};

bool ew_is_unary(EwOp op);  // RELU .. CAST, NOT
// Whether the shape computes exactly in integers (VINT): integer operands (ADD..GE, NEG, ABS
// and the integer-only ops), or a CAST from or to I64 / U8 or between two integer types.
struct EwShape;
bool ew_is_int(const EwShape& s);
const char* ew_name(EwOp op);

// One input. mode: NONE = a full rows x cols tensor; SCALAR = one element in device memory;
// IMM = the host value `imm` (no device memory; a launch argument of the program, see
// ew_launch_args); ROW = a [cols] vector (the same for every row); COL = a [rows] vector (one
// element per row). Full operands start 128-byte aligned; broadcast ones may start at any
// element-aligned address.
struct EwOperand {
    isa::DType t = isa::DType::F16;
    isa::Bcast mode = isa::Bcast::NONE;
    float imm = 0.0f;
    int64_t iimm = 0;  // the IMM value of integer shapes (ew_is_int)
};

// What an elementwise program computes: a dense row-major output of rows x cols elements (a
// flat tensor of n elements is rows = 1, cols = n; torch-style broadcasts collapse to this).
// a, b (binary, WHERE), cond (WHERE) per EwOperand. At least one of a and b is full for ops that
// have b, except that both may be broadcast when the output is full anyway (e.g. a ROW + b COL).
// cond is NONE, SCALAR, ROW or COL (CLAMP's upper bound: any mode, a float type). Types: F32,
// F16, BF16 (and I8/I32 for out and cond); integer shapes (ew_is_int): a and b of one integer
// type (I8, I32, I64, U8), out of that type (any integer type for compares), ialpha for ADD/SUB.
struct EwShape {
    EwOp op = EwOp::RELU;
    uint64_t rows = 1, cols = 0;
    isa::DType out = isa::DType::F16;
    EwOperand a, b, cond;
    float alpha = 1.0f;                // ADD / SUB
    int64_t ialpha = 1;                // ADD / SUB of integer shapes
    float scale = 1.0f, shift = 0.0f;  // AFFINE
};

inline uint64_t ew_elements(const EwShape& s) { return s.rows * s.cols; }

// How the work is divided: `cores` cores, each streaming chunks of up to `chunk` elements (a
// multiple of the stick unit, see ew_unit) through double-buffered LX.
struct EwPlan {
    uint32_t cores = 1;
    uint64_t chunk = 0;
    bool row_resident = true;  // ROW operands loaded once per core (else per chunk, chunk <= cols)
    uint64_t lx_bytes = 0;     // LX the program uses per core
    uint64_t cycles = 0;       // modeled cycles (timing-only run), filled by plan_elementwise
    uint64_t ddr_bytes = 0;    // DDR bytes moved by the priced run
};

// Elements per chunk step: every full operand and the output start on a stick at multiples of it.
uint64_t ew_unit(const EwShape& s);
// Throws std::invalid_argument (with the reason) if the shape is not one this program computes.
void ew_validate(const EwShape& s);
// LX bytes per core of a plan; 0 if the chunk does not suit the shape.
uint64_t ew_lx_bytes(const EwShape& s, uint64_t chunk, bool row_resident);
// The largest chunk that fits lx_budget.
uint64_t ew_max_chunk(const EwShape& s, uint64_t lx_budget, bool row_resident);
// Whether ROW operands stay in LX for the whole run (they do unless they would take more than a
// quarter of lx_budget; then they are streamed with every chunk).
bool ew_row_resident(const EwShape& s, uint64_t lx_budget);
// An unpriced plan on `cores` cores: chunk elements per step (0 = a third of a core's share,
// capped by LX), rounded to the unit.
EwPlan ew_make_plan(const EwShape& s, uint32_t cores, uint64_t lx_budget, uint64_t chunk = 0);

// What a program depends on: s with its host values (IMM operands, alpha, scale, shift) taken
// out, except for what decides the passes: whether a float ADD/SUB with a full a has alpha 1
// (one plain pass) or not (a fused multiply-add), the class of an integer ADD/SUB's alpha with
// a tensor b (1, -1, other), and an integer scalar that a non-wrapping op cannot take in a's type
// (e.g. int8 < 300), which stays an immediate. Shapes with equal structures share one program;
// the values are its launch arguments. (A plan key holds the structure, never a value.)
EwShape ew_structure(const EwShape& s);

// The scalars of s in the order the program reads them (arguments 4, 5, ...): fp32 bits for the
// float ops (the value rounded to fp32 as the immediate was), the int64 value for VINT.
std::vector<uint64_t> ew_scalar_args(const EwShape& s);
// All launch arguments: 0 = a, 1 = out, 2 = b, 3 = cond (device addresses; pass 0 for IMM or
// absent operands, they are not read), then ew_scalar_args(s).
std::vector<uint64_t> ew_launch_args(const EwShape& s, uint64_t a, uint64_t out, uint64_t b,
                                     uint64_t cond);

// The SPMD program of ew_structure(s), launched with ew_launch_args(s, ...). Runs on
// plan.cores cores.
std::vector<uint8_t> build_elementwise(const EwShape& s, const EwPlan& p);

// Prices every candidate (core counts up to max_cores, several chunk sizes) on the cycle model
// and returns the fastest. Throws std::invalid_argument for unsupported shapes.
EwPlan plan_elementwise(const Pricer& pricer, const EwShape& s, uint32_t max_cores);
// Exact cycles and DDR bytes of one plan (a timing-only run); fills p.cycles / p.ddr_bytes.
EwPlan price_elementwise(const Pricer& pricer, const EwShape& s, EwPlan p);

std::string ew_plan_name(const EwPlan& p);  // e.g. "32 cores, chunk 16384"

}  // namespace spyre::ops
