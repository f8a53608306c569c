// SPDX-License-Identifier: MIT
// VRNG: counter-based random numbers in the vector unit (Documentation/isa.md "VRNG"). Element
// (i, j) is element n = base + i * row_step + j of the stream (seed, offset), so the values do
// not depend on how a program splits the work over cores or tiles.
#include <bit>
#include <cstring>

#include "engine_impl.hpp"
#include "spyre/cost.hpp"
#include "spyre/numerics.hpp"
#include "spyre/philox.hpp"

namespace spyre::eng {

namespace {

void store_value(DType t, uint8_t* p, float v) {
    if (t == DType::F32) {
        std::memcpy(p, &v, 4);
    } else {
        const uint16_t h = t == DType::F16 ? num::f32_to_f16(v) : num::f32_to_bf16(v);
        std::memcpy(p, &h, 2);
    }
}

// Fills rows x cols elements; a block is computed once for the (up to) four elements it feeds.
void vrng_kernel(isa::Rng f, DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
                 uint64_t seed, uint64_t offset, uint64_t base, uint64_t row_step, float scale,
                 float shift, const kern::Cancel* cancel) {
    const uint64_t es = isa::dtype_size(dt);
    for (uint64_t i = 0; i < rows; ++i) {
        if (kern::cancelled(cancel)) return;
        uint8_t* row = dst + i * dstride;
        const uint64_t n0 = base + i * row_step;  // wrapping, like the scalar ALU
        uint64_t have = ~uint64_t{0};
        rng::Block b{};
        for (uint64_t j = 0; j < cols; ++j) {
            const uint64_t n = n0 + j;
            if ((n >> 2) != have) b = rng::stream_block(seed, offset, n), have = n >> 2;
            if (f == isa::Rng::BITS)
                std::memcpy(row + j * es, &b[n & 3], 4);
            else
                store_value(dt, row + j * es, rng::value(f, dt, b, n, scale, shift));
        }
    }
}

}  // namespace

// VRNG: a = dst, d = rows, cols, dst_stride, seed, offset, base, row_step; func BITS / UNIFORM /
// NORMAL; imm = scale (bits 0-31) and shift (bits 32-63) as fp32.
bool Engine::exec_vrng(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15);
    const auto f = static_cast<isa::Rng>(in.func);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VRNG", rows, cols)) return false;
    const VecOpd dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    const VecOpd* const ops[] = {&dst};
    Range r[1];
    if (!check_vec_ops(c, "VRNG", rows, cols, ops, 1, r)) return false;
    // ---- timing: a vector op over rows x cols elements at the VRNG rate ----
    const uint64_t per_vec = cost::vec_compute_cycles(cfg_, isa::Op::VRNG, in.func, dt, dt, 1, 1);
    if (!vec_timing(c, rows * cols, isa::dtype_size(dt) == 4, per_vec, nullptr, 0, r[0],
                    {vop_sticks(dst, rows, cols)}))
        return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, nullptr, 0, r[0], rows, dst.stride, cols * isa::dtype_size(dt));
    const uint64_t imm = static_cast<uint64_t>(in.imm);
    vrng_kernel(f, dt, c.lx + dst.addr, dst.stride, rows, cols, d[3], d[4], d[5], d[6],
                std::bit_cast<float>(static_cast<uint32_t>(imm)),
                std::bit_cast<float>(static_cast<uint32_t>(imm >> 32)), &cancel_tok_);
    return true;
}

}  // namespace spyre::eng
