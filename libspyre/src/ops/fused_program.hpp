// SPDX-License-Identifier: MIT
// Fused pointwise kernels: a small kernel description (inputs, outputs and a straight-line list
// of ops over one flat loop of n elements, the form torch.compile's Spyre backend emits for each
// fused pointwise kernel) compiled to ONE engine program. Every core streams its stick-aligned
// part of the n elements through double-buffered LX chunks; intermediates stay in LX in fp32
// (integer values exact in I32 or I64), each output is rounded once when stored. The planner prices
// the program on the cycle model (Documentation/torch_compile.md "Kernel descriptions").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class FkOp : uint8_t {
    LOAD,   // value of input `arg` (a full input: element i; a scalar input: its one element)
    CONST,  // the fp32 number imm
    // unary
    NEG,
    ABS,
    RELU,
    EXP,
    LOG,
    SQRT,
    RSQRT,
    RECIP,
    TANH,
    SIGMOID,
    SILU,
    GELU,
    SIN,
    COS,
    // FLOOR..ATANH: the engine's VUN FLOOR..ATANH, in the same order (rounding exact, the
    // functions the double value rounded once to fp32)
    // clang-format off
    SPYRE_ISA_VUN_FUNCTIONS(SPYRE_ISA_ENUMERATOR)
    // clang-format on
    CAST,  // rounded to type t (fp32: unchanged)
    // binary
    ADD,
    SUB,
    MUL,
    DIV,
    MAX,  // NaN-propagating
    MIN,
    // compares (1.0 true, 0.0 false)
    EQ,
    NE,
    LT,
    LE,
    GT,
    GE,
    // row reductions of a full value (row kernels): one fp32 value per row
    RSUM,
    RMAX,  // NaN-propagating
    RMIN,
    WHERE,  // a != 0 ? b : c (ternary; NaN is true)
    FMA,    // a * b + c: exact product and sum, rounded once (VFMA; ternary, floats)
    IOTA,   // row kernels: the position's column index c (fp32, exact: at most 2^24 columns);
            // flat kernels: the position itself (I32, exact: at most 2^31 positions)
    // integers only: Python's // and % (the divisor's sign), exact
    FLOORDIV,
    REMAINDER,
    // integers only: bitwise and shifts (VINT AND..SHR, NOT; torch's rules for shift counts
    // out of range: SHL 0, SHR the sign fill), exact
    AND,
    OR,
    XOR,
    SHL,
    SHR,
    NOT,    // unary
    STORE,  // output `arg` = value a (rounded once to the output's type)
    COUNT
};

const char* fk_name(FkOp op);

// How an operand is indexed: FULL n dense elements, SCALAR one element for every position,
// ROW one element per row (index r), COL one element per column (index c). ROW and COL only in
// row kernels; outputs are FULL or ROW.
enum class FkKind : uint8_t { FULL, SCALAR, ROW, COL };

// A FULL operand read (flat and row kernels) or written (flat kernels) through a strided view
// instead of densely (in a row kernel each row or block of the view is whole rows):
// position p (row-major over `sizes`, whose product is n) is element offset + sum_k idx_k(p) *
// strides[k] of the tensor. parse_fused normalizes it (size-1 dims dropped, dims that are one
// run merged) and takes it only when the last dim is contiguous, every row (the last dim) and
// every row start is whole sticks: the program moves it as rows of sizes.back() elements, one
// LOAD/STORE per row, into the chunk's dense LX buffer. Inputs may instead end in a transposed
// block (the last two dims P:1 Q:P, a [Q, P] matrix read as [P, Q]: x.t()): one LOAD per
// block (per tile of a stick's columns when the rows are whole sticks) into LX, then a VTRANS
// into the chunk; the block starts on a stick. Empty: dense.
struct FkView {
    uint64_t offset = 0;
    std::vector<uint64_t> sizes, strides;  // elements
    bool transposed = false;               // the last two dims are a transposed block
    uint64_t tile = 0;  // transposed: its P columns moved `tile` at a time (P, or a stick's)
    bool empty() const { return sizes.empty(); }
    uint64_t row() const { return sizes.empty() ? 0 : sizes.back(); }
    // positions moved together: a row, or a transposed block's tile * Q
    uint64_t block() const { return transposed ? sizes.back() * tile : row(); }
    // elements of the tensor the view reaches: offset + sum (size - 1) * stride + 1
    uint64_t extent() const;
};

struct FkInput {
    isa::DType t = isa::DType::F32;
    bool scalar = false;  // kind == SCALAR
    FkKind kind = FkKind::FULL;
    FkView view;  // FULL inputs ("in f16 view ...")
};

struct FkOutput {
    isa::DType t = isa::DType::F32;
    FkKind kind = FkKind::FULL;
};

// One line of the kernel. Values are numbered by their instruction's index; a and b name the
// operand values, arg the input (LOAD) or output (STORE).
struct FkInstr {
    FkOp op = FkOp::CONST;
    int32_t a = -1, b = -1, c = -1, arg = -1;  // c: WHERE's third operand
    isa::DType t = isa::DType::F32;            // CAST; CONST: I64 or I32 for an integer one
    float imm = 0.0f;                          // CONST
    int64_t iv = 0;                            // an integer CONST
};

struct FusedKernel {
    std::vector<FkInput> inputs;
    std::vector<isa::DType> outputs;
    std::vector<FkKind> out_kinds;  // per output
    std::vector<FkView> out_views;  // per output (empty: dense); FULL outputs of flat kernels
    std::vector<FkInstr> code;
    // 0: a flat kernel over n positions. Else a row kernel: the n positions are n / cols rows
    // of cols contiguous positions (position r * cols + c).
    uint64_t cols = 0;
};

// The text form (one item per line, '#' comments):
//   spyre.kernel 1
//   rows 4096            # optional: a row kernel, rows of 4096 positions
//   in f16 full          # input 0 ...; "scalar", "row" or "col" (row kernels) too
//   in f32 view 512 2:6144 16:384 32:1   # flat kernels: a strided view, "offset size:stride.."
//   out f16              # output 0 ...; "out f32 view ...": a strided view (flat kernels, no
//                        # stride 0); "out f32 row": one element per row; "out i64 row" and
//                        # "out bool row" (0/1 bytes) from a per-row value (rargmax, rany)
//   %0 = load 0
//   %1 = const 1.5
//   %2 = mul %0 %1
//   %3 = cast %2 bf16
//   %4 = const -100 i64  # an integer constant (i64 or i32), exact
//   store 0 %2
// Flat kernels also take integer operands ("in i64|i32|u8|bool full|scalar", "out i64|i32|u8|
// bool"), row kernels integer inputs and integer reductions into "out i64 row": integer values
// are exact (VINT on I32 or I64), see Documentation/torch_compile.md "Integer values".
// Throws std::invalid_argument naming the line for anything else (unknown ops, undefined
// values, more than 16 inputs and outputs, an output stored twice or never).
FusedKernel parse_fused(const std::string& text);
std::string format_fused(const FusedKernel& k);

struct FusedPlan {
    uint32_t cores = 1;
    uint64_t chunk = 0;     // elements (row kernels: rows) per core step, a multiple of fused_unit
    uint64_t lx_bytes = 0;  // per core
    uint32_t passes = 0;    // vector instructions per chunk
    uint64_t cycles = 0, ddr_bytes = 0;
    // long rows (row kernels only): not 0 means every core takes a share of each row's columns
    // and streams it in chunks of col_chunk columns, once per phase (a pass over the row per
    // level of reductions, the partial reductions combined over the cores by ALLRED); chunk is
    // then unused. Rows longer than a core's scratchpad run so, and few long rows on many cores.
    uint64_t col_chunk = 0;
    // long rows: the cores in groups of cores / groups, rows dealt to the groups in turn
    uint32_t groups = 1;
    uint32_t phases = 0;  // long rows: streaming passes over each row (reductions nested)
};

// Elements (row kernels: rows) per unit of the work split: every chunk starts on a stick. With
// n, a row kernel's unit is at most its n / cols rows (then one chunk holds them all).
uint64_t fused_unit(const FusedKernel& k, uint64_t n = 0);
uint64_t fused_lx_bytes(const FusedKernel& k, uint64_t chunk);
// Whether the row kernel can run as long rows over n positions (full operands' rows start on a
// stick, or one row; the row operands of all rows fit a small part of LX).
// Elements of the tensor an operand of that kind (and view) reaches in a call over n positions.
uint64_t fused_operand_elems(const FusedKernel& k, uint64_t n, FkKind kind, const FkView& view);
// Whether every view of the kernel is of n positions (the product of its sizes).
bool fused_views_fit(const FusedKernel& k, uint64_t n);
bool fused_long_rows_ok(const FusedKernel& k, uint64_t n, uint64_t lx_budget);
// The SPMD program over n elements. Launch arguments: inputs 0..I-1, then outputs I..I+O-1
// (device addresses; full, row and col operands 128-byte aligned, scalar inputs element
// aligned).
std::vector<uint8_t> build_fused(const FusedKernel& k, uint64_t n, const FusedPlan& p);
FusedPlan price_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, FusedPlan p);
FusedPlan plan_fused(const Pricer& pricer, const FusedKernel& k, uint64_t n, uint32_t max_cores);
std::string fused_plan_name(const FusedPlan& p);

}  // namespace spyre::ops
