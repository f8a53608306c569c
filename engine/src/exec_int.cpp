// SPDX-License-Identifier: MIT
// VINT: exact integer elementwise operations and conversions (Documentation/isa.md "VINT").
// Checks its operands (TOO_LARGE, MISALIGNED, LX_RANGE), charges the cycle model like VBIN, then
// runs kernels_int.cpp; a zero divisor of DIV/REM fails the job with DIV_ZERO.
#include "engine_impl.hpp"
#include "spyre/cost.hpp"

namespace spyre::eng {

// a = dst, b = src1, c = src2, d = rows, cols, dst_stride, src1_stride, src2_stride;
// flags = src2 broadcast mode (IMM: the 64-bit imm), func = isa::VInt.
bool Engine::exec_vint(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const auto f = static_cast<isa::VInt>(in.func);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VINT", rows, cols)) return false;
    const bool unary = isa::vint_unary(f);
    const auto mode = unary ? isa::Bcast::IMM : static_cast<isa::Bcast>(in.flags & 15);
    const VecOpd dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    const VecOpd s1{"src1", c.r[in.b], st, isa::Bcast::NONE, d[3]};
    const VecOpd s2{"src2", mode == isa::Bcast::IMM ? 0 : c.r[in.c], st, mode, d[4]};
    const VecOpd* const ops[] = {&dst, &s1, &s2};
    Range r[3];
    if (!check_vec_ops(c, "VINT", rows, cols, ops, 3, r)) return false;
    // ---- timing: VBIN's rule (cost::vec_compute_cycles), 64-bit elements at half rate ----
    const uint64_t compute = cost::vec_compute_cycles(cfg_, isa::Op::VINT, in.func, dt, st, rows,
                                                      cols, unary ? isa::DType::COUNT : st);
    uint64_t max_sticks = 0;
    for (const VecOpd* o : ops) {
        const uint64_t s = vop_sticks(*o, rows, cols);
        max_sticks = std::max(max_sticks, s);
        c.stats.vec_sticks += s;
    }
    const int nr = mode == isa::Bcast::IMM ? 1 : 2;
    if (!unit_op(c, SPYRE_UNIT_VECTOR, 0, cost::vec_cycles(cfg_, compute, max_sticks),
                 cfg_.vec_latency, r + 1, nr, &r[0], 1, nullptr))
        return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, r + 1, nr, r[0], rows, dst.stride, cols * isa::dtype_size(dt));
    const kern::IntOperand o2{c.lx + s2.addr, mode, s2.stride, in.imm};
    const int64_t bad = kern::vint(f, dt, st, c.lx + dst.addr, dst.stride, c.lx + s1.addr,
                                   s1.stride, o2, rows, cols, &cancel_tok_);
    if (bad >= 0)
        return fail(c, SPYRE_ENGINE_ERR_DIV_ZERO, "VINT %s: zero divisor at row %llu, column %llu",
                    f == isa::VInt::DIV ? "DIV" : "REM",
                    static_cast<unsigned long long>(static_cast<uint64_t>(bad) / cols),
                    static_cast<unsigned long long>(static_cast<uint64_t>(bad) % cols));
    return true;
}

}  // namespace spyre::eng
