// SPDX-License-Identifier: MIT
// The op library's matmul program: C = epilogue(A x B + bias) on a (gm, gn, gk) grid of cores,
// with multicast of shared panels and K-split partial sums reduced over ring-adjacent cores.
// Operands are in stick layout (rows 128-byte aligned, see Documentation/ops.md); the planner
// (matmul_planner.hpp) chooses the split and prices it on the engine's cycle model.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "spyre/isa.hpp"

namespace spyre::ops {

// What a matmul computes. Byte strides; every operand row starts 128-byte aligned.
//   A: M x K (row stride lda); B: K x N (ldb) or, with trans_b, N x K (B^T stored, e.g. the
//   [out, in] weight of a linear layer); C: M x N of type out (ldc); bias: N elements of bias_t.
//   batch > 1 repeats the product with byte strides batch_a/_b/_c (0 = operand shared).
struct MatmulShape {
    uint64_t M = 0, N = 0, K = 0;
    isa::DType in = isa::DType::F16;
    isa::DType out = isa::DType::F16;  // F32 output keeps the fp32 accumulation
    bool trans_b = false;
    bool has_bias = false;
    isa::DType bias_t = isa::DType::F16;
    bool has_act = false;  // epilogue on the fp32 result, before rounding to `out`
    isa::VUn act = isa::VUn::RELU;
    // Gated (GLU) product: C = act(A x B) * (A x B2), B2 shaped and strided like B (launch
    // argument 4), e.g. SwiGLU's gate and up projections in one pass over A. No bias.
    bool gated = false;
    // Rotary epilogue (rotate-half, as spyre_op_rotary): C's columns are heads of rot_d, each
    // row m is position m % rot_l of sequence m / rot_l, and every head row becomes
    // c * cos + rotate_half(c) * sin on the fp32 result (cos/sin rows of rot_t at launch
    // arguments 5/6 + sequence * rot_cb + position * rot_cl; rot_cb 0 = shared). No bias, no
    // activation, no gating, batch 1. Sub-tiles then hold whole heads.
    bool rotary = false;
    uint64_t rot_d = 0, rot_l = 0, rot_cb = 0, rot_cl = 0;
    isa::DType rot_t = isa::DType::F16;
    // Weight-only int8 (w_i8): B is stored as int8 (ldb in int8 bytes) and converted to `in`
    // in LX before each MM (exact: every int8 value is a float16/bfloat16/float32); with
    // has_scale the fp32 result's columns are multiplied by per-column scales of scale_t
    // (launch argument 5) before the bias and the activation. No gate, no rotary.
    bool w_i8 = false;
    bool has_scale = false;
    isa::DType scale_t = isa::DType::F32;
    uint64_t lda = 0, ldb = 0, ldc = 0;
    uint64_t batch = 1, batch_a = 0, batch_b = 0, batch_c = 0;
};

// How the cores share the work. core = (mi * gn + ni) * gk + ki.
struct MatmulSplit {
    uint32_t gm = 1, gn = 1, gk = 1;  // cores along M, N and K (gm * gn * gk cores)
    uint64_t sm = 0, sn = 0, kc = 0;  // sub-tile rows/columns and K chunk
    bool double_buffered = false;
    bool multicast = true;            // A panels to the gn cores that share them, B to the gm cores
    uint64_t lx_bytes = 0;            // LX the program uses per core
    uint64_t ddr_bytes_per_core = 0;  // A and B bytes each core receives
};

inline uint64_t matmul_cores(const MatmulSplit& s) { return uint64_t{s.gm} * s.gn * s.gk; }

// Bytes of one stored element of B (int8 with w_i8).
inline uint64_t weight_size(const MatmulShape& s) { return s.w_i8 ? 1 : isa::dtype_size(s.in); }

// The best sub-tiling of one (gm, gn, gk) grid within lx_budget bytes, or nothing if the shape
// does not divide over that grid in whole sticks.
std::optional<MatmulSplit> fit_matmul_split(const MatmulShape& s, uint32_t gm, uint32_t gn,
                                            uint32_t gk, uint64_t lx_budget, bool multicast);

// The SPMD program (launch arguments: 0 = A, 1 = B, 2 = C, 3 = bias, 4 = B2, 5 = cos or the
// scales, 6 = sin device addresses).
std::vector<uint8_t> build_matmul(const MatmulShape& s, const MatmulSplit& p);

}  // namespace spyre::ops
