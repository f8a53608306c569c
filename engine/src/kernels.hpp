// SPDX-License-Identifier: MIT
// Numeric kernels of the engine: dtype row conversions, matmul, vector ops, reductions.
// Loops are written so that g++ -O2/-O3 vectorizes the inner dimension.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "spyre/isa.hpp"

namespace spyre::kern {

// Cooperative cancellation of a running job: the long kernels (matmul, vector ops) poll it every
// few thousand elements or rows and return early, leaving their output partly written, once it
// reports true. Either source may be absent.
struct Cancel {
    const std::atomic<bool>* engine = nullptr;  // spyre_engine_cancel()
    const int32_t* job = nullptr;               // spyre_engine_job.cancel (read atomically)
    bool operator()() const {
        return (engine && engine->load(std::memory_order_relaxed)) ||
               (job && __atomic_load_n(job, __ATOMIC_RELAXED) != 0);
    }
};
inline bool cancelled(const Cancel* c) { return c && (*c)(); }

// Converts n elements of type t at p (any alignment) to fp32.
void load_row(isa::DType t, const uint8_t* p, size_t n, float* out);
// Converts n fp32 values to type t (RNE, saturating for integers) and stores them at p.
void store_row(isa::DType t, uint8_t* p, size_t n, const float* in);

struct MatmulArgs {
    isa::DType in;  // F16, BF16, F32 (fp32 accumulate) or I8 (int32 accumulate)
    uint8_t* c;
    const uint8_t* a;
    const uint8_t* b;
    uint64_t m, n, k, lda, ldb, ldc;  // strides in bytes
    bool accumulate;
    const Cancel* cancel = nullptr;  // polled between micro-kernel tiles
    bool b_trans = false;            // B stored transposed: N x K, row stride ldb
    // Nonzero: A (B) lies in memory whose bytes stay the same as long as this value does (no
    // value is used twice for different bytes): an implementation may reuse its packing of an
    // earlier MM with the same operand and value (the engine: exec_mm, Engine::ddr_gen_).
    uint64_t a_gen = 0, b_gen = 0;
};
// C[i][j] = fma(A[i][k], B[k][j], C[i][j]) for k ascending (fp32 accumulation, one rounding per
// step), or wrapping int32 accumulation for I8. A and B are read completely (converted and
// packed) before C is written, so C may overlap them. A transposed B is transposed while it is
// packed where the implementation can (fp32 on avx512), else copied transposed first.
void matmul(const MatmulArgs& args);
// Drops the calling thread's packings (MatmulArgs::a_gen, b_gen) of operands with bytes in
// [lo, hi): they are about to be written.
void forget_packed(const uint8_t* lo, const uint8_t* hi);

// Kernel implementations (Documentation/isa.md "Kernel implementations"): "portable" (plain
// C++, always), "avx2" (AVX2 + FMA + F16C) and "avx512" (AVX-512 F/BW/VL/DQ, VNNI for int8 when
// present), all bit-identical. By default the fastest one this CPU runs, or the one named by
// SPYRE_ENGINE_KERNELS (portable|avx2|avx512|auto) when the CPU runs it.
// kernels_name(): the implementation in use. kernels_supported(name): whether this CPU runs it.
// set_kernels(name): switches to it (nullptr: back to the default); false, and nothing changes,
// for a name that is unknown or not supported. Not to be called while jobs run.
const char* kernels_name();
bool kernels_supported(const char* name);
bool set_kernels(const char* name);

void vunary(isa::VUn f, isa::DType dt, isa::DType st, uint8_t* dst, const uint8_t* src,
            uint64_t rows, uint64_t cols, uint64_t dstride, uint64_t sstride, float imm,
            const Cancel* cancel = nullptr);
void vbinary(isa::VBin f, isa::Bcast mode, isa::DType dt, isa::DType st, uint8_t* dst,
             const uint8_t* s1, const uint8_t* s2, uint64_t rows, uint64_t cols, uint64_t dstride,
             uint64_t s1stride, uint64_t s2stride, float imm, const Cancel* cancel = nullptr);
void vreduce(isa::Red f, int axis, isa::DType dt, isa::DType st, uint8_t* dst, const uint8_t* src,
             uint64_t rows, uint64_t cols, uint64_t sstride, const Cancel* cancel = nullptr);
// Elementwise combination for ALLRED: acc = acc OP x.
void combine(isa::Red f, float* acc, const float* x, size_t n);

// The elementwise functions of VUN and VBIN on fp32 rows (y may alias x / a).
void apply_unary(isa::VUn f, float* y, const float* x, size_t n, float imm);
void apply_binary(isa::VBin f, float* y, const float* a, const float* b, size_t n);

// ---- tensor kernels (kernels_tensor.cpp): VTRANS, VSEL, VIOTA, VFMA, mixed-type VBIN ----

// One source operand of a vector instruction: row r of `cols` elements is p + r * stride
// (NONE), p (ROW), the single element p (SCALAR), p + r * stride (COL, one element) or imm.
struct VecOperand {
    const uint8_t* p = nullptr;
    isa::DType t = isa::DType::F32;
    isa::Bcast mode = isa::Bcast::NONE;
    uint64_t stride = 0;
    float imm = 0.0f;
};

// dst[j][i] = src[i][j] (src rows x cols, dst cols x rows). The same type copies bits; else
// converted like VUN COPY. src is read completely before dst is written (they may overlap).
void transpose(isa::DType dt, isa::DType st, uint8_t* dst, const uint8_t* src, uint64_t rows,
               uint64_t cols, uint64_t dstride, uint64_t sstride, const Cancel* cancel = nullptr);
// MM operand transposition: returns a per-thread buffer holding the cols x rows transpose of
// the es-byte elements at src (rows x cols, row stride sstride), rows contiguous. slot 0 / 1
// name two independent buffers (A and B).
const uint8_t* transposed_copy(int slot, uint32_t es, const uint8_t* src, uint64_t rows,
                               uint64_t cols, uint64_t sstride);
// VBIN with src2 of its own type: dst = s1 OP s2.
void vbinary_mixed(isa::VBin f, isa::DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows,
                   uint64_t cols, const VecOperand& s1, const VecOperand& s2,
                   const Cancel* cancel = nullptr);
// VSEL: dst = (mask != 0) != invert ? x : y.
void vselect(isa::DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
             const VecOperand& x, const VecOperand& y, const VecOperand& mask, bool invert,
             const Cancel* cancel = nullptr);
// VIOTA: v = alpha*i + beta*j + gamma (wrapping int64). IOTA: dst = v; MASK: dst = v >= 0 ?
// src : fill.
void viota(isa::Iota f, isa::DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
           const VecOperand& src, int64_t alpha, int64_t beta, int64_t gamma, float fill,
           const Cancel* cancel = nullptr);
// VFMA: dst = fma(s1, s2, s3) in fp32, rounded once to dt.
void vfma(isa::DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
          const VecOperand& s1, const VecOperand& s2, const VecOperand& s3,
          const Cancel* cancel = nullptr);

// ---- integer kernels (kernels_int.cpp): VINT and VRED's integer path ----

// Second VINT operand: p (+ r * stride for NONE / COL rows) in the source type, or imm (IMM).
struct IntOperand {
    const uint8_t* p = nullptr;
    isa::Bcast mode = isa::Bcast::NONE;
    uint64_t stride = 0;
    int64_t imm = 0;
};
// dst = s1 OP s2 (or OP s1 for the unary functions, CVT any types). Returns -1, or for DIV/REM
// the element index (r * cols + c) of the first zero divisor: rows before it are written.
int64_t vint(isa::VInt f, isa::DType dt, isa::DType st, uint8_t* dst, uint64_t dstride,
             const uint8_t* s1, uint64_t s1stride, const IntOperand& s2, uint64_t rows,
             uint64_t cols, const Cancel* cancel = nullptr);
// VRED SUM/MAX/MIN/PROD in wrapping int64, wrapped to dt.
void vreduce_int(isa::Red f, int axis, isa::DType dt, isa::DType st, uint8_t* dst,
                 const uint8_t* src, uint64_t rows, uint64_t cols, uint64_t sstride,
                 const Cancel* cancel = nullptr);

}  // namespace spyre::kern
