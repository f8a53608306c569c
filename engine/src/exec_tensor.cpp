// SPDX-License-Identifier: MIT
// Tensor instructions of the vector unit: VTRANS, VSEL, VIOTA, VFMA (Documentation/isa.md
// "Vector unit"). Each exec_* checks its operands (TOO_LARGE, then MISALIGNED, then LX_RANGE),
// charges the cycle model in one marked block, then runs its kernel (kernels_tensor.cpp).
#include <bit>
#include <cstdio>

#include "engine_impl.hpp"
#include "spyre/cost.hpp"

namespace spyre::eng {

namespace {

using VOp = VecOpd;

// Operand modifier byte (isa::operand_mode): broadcast in the low nibble, type + 1 (0 = the
// instruction's source type) in the high one. Validated statically.
isa::Bcast mod_mode(uint8_t m) { return static_cast<isa::Bcast>(m & 15); }
DType mod_type(uint8_t m, DType src) { return (m >> 4) ? static_cast<DType>((m >> 4) - 1) : src; }

float imm_f32(uint64_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits)); }

}  // namespace

bool Engine::vec_shape_ok(Core& c, const char* name, uint64_t rows, uint64_t cols) {
    if (rows > lx_usable_ || cols > lx_usable_ || u128{rows} * cols > lx_usable_)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "%s: %llu x %llu elements exceed LX", name,
                    (unsigned long long)rows, (unsigned long long)cols);
    return true;
}

// Checks the alignment of every operand, then their LX ranges (rows x cols, broadcast shapes);
// ranges[i] receives operand i's bytes (empty for IMM).
bool Engine::check_vec_ops(Core& c, const char* name, uint64_t rows, uint64_t cols,
                           const VecOpd* const* ops, int n, Range* ranges) {
    return check_vec_align(c, name, ops, n) &&
           check_vec_ranges(c, name, rows, cols, ops, n, ranges);
}

bool Engine::check_vec_align(Core& c, const char* name, const VecOpd* const* ops, int n) {
    for (int i = 0; i < n; ++i) {
        const VOp& o = *ops[i];
        const uint64_t es = isa::dtype_size(o.t);
        const bool strided = o.mode == isa::Bcast::NONE || o.mode == isa::Bcast::COL;
        if (o.mode != isa::Bcast::IMM && (o.addr % es || (strided && o.stride % es)))
            return fail(c, SPYRE_ENGINE_ERR_MISALIGNED,
                        "%s %s: address 0x%llx / stride %llu not aligned to its %llu-byte elements",
                        name, o.what, (unsigned long long)o.addr, (unsigned long long)o.stride,
                        (unsigned long long)es);
    }
    return true;
}

bool Engine::check_vec_ranges(Core& c, const char* name, uint64_t rows, uint64_t cols,
                              const VecOpd* const* ops, int n, Range* ranges) {
    char what[48];
    for (int i = 0; i < n; ++i) {
        const VOp& o = *ops[i];
        const uint64_t es = isa::dtype_size(o.t);
        std::snprintf(what, sizeof what, "%s %s", name, o.what);
        bool ok = true;
        switch (o.mode) {
            case isa::Bcast::NONE:
                ok = check_lx(c, what, o.addr, rows, o.stride, cols * es, &ranges[i]);
                break;
            case isa::Bcast::SCALAR:
                ok = check_lx(c, what, o.addr, 1, 0, es, &ranges[i]);
                break;
            case isa::Bcast::ROW:
                ok = check_lx(c, what, o.addr, 1, 0, cols * es, &ranges[i]);
                break;
            case isa::Bcast::COL:
                ok = check_lx(c, what, o.addr, rows, o.stride, es, &ranges[i]);
                break;
            default:
                ranges[i] = {0, 0};
                break;
        }
        if (!ok) return false;
    }
    return true;
}

// LX sticks an operand touches over rows x cols elements (its own broadcast shape).
uint64_t Engine::vop_sticks(const VecOpd& o, uint64_t rows, uint64_t cols) const {
    const uint64_t es = isa::dtype_size(o.t);
    switch (o.mode) {
        case isa::Bcast::NONE:
            return cost::lx_sticks(o.addr, rows, o.stride, cols * es);
        case isa::Bcast::SCALAR:
            return cost::lx_sticks(o.addr, 1, 0, es);
        case isa::Bcast::ROW:
            return cost::lx_sticks(o.addr, 1, 0, cols * es);
        case isa::Bcast::COL:
            return cost::lx_sticks(o.addr, rows, o.stride, es);
        default:
            return 0;
    }
}

// Cycle model of a vector-unit operation over `elems` elements, as VUN/VBIN/VRED
// (exec_compute.cpp, cost.hpp): ceil(elems / lanes of both corelets) x per_vec cycles (32-bit
// types on the narrower lanes), or the LX sticks of the busiest operand stream at
// vec_lx_sticks_per_cycle; the latency is charged from idle; LX hazards on the ranges.
bool Engine::vec_timing(Core& c, uint64_t elems, bool wide, uint64_t per_vec, const Range* reads,
                        int nr, const Range& w, std::initializer_list<uint64_t> sticks) {
    const uint64_t lanes =
        uint64_t{wide ? cfg_.vec_lanes_32 : cfg_.vec_lanes_16} * cfg_.corelets_per_core;
    uint64_t max_sticks = 0;
    for (uint64_t s : sticks) {
        max_sticks = std::max(max_sticks, s);
        c.stats.vec_sticks += s;
    }
    const uint64_t cycles = cost::vec_cycles(cfg_, ceil_div(elems, lanes) * per_vec, max_sticks);
    return unit_op(c, SPYRE_UNIT_VECTOR, 0, cycles, cfg_.vec_latency, reads, nr, &w, 1, nullptr);
}

// Zeroes stale sticks of the sources; a destination written completely needs no zeroing.
void Engine::vec_touch(Core& c, const Range* reads, int nr, const Range& w, uint64_t out_rows,
                       uint64_t dstride, uint64_t out_bytes) {
    for (int i = 0; i < nr; ++i) lx_touch(c, reads[i]);
    if (out_rows == 1 || dstride == out_bytes)
        lx_overwrite(c, w.lo, w.hi);
    else
        lx_touch(c, w);
}

// VTRANS: a = dst, b = src, d = rows, cols (of src), dst_stride, src_stride. dst = src^T.
bool Engine::exec_vtrans(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VTRANS", rows, cols)) return false;
    const VOp src{"src", c.r[in.b], st, isa::Bcast::NONE, d[3]};
    // the destination is cols rows of `rows` elements
    const VOp dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    Range rs, rd;
    const VOp* const ops[] = {&dst, &src};
    if (!check_vec_align(c, "VTRANS", ops, 2) ||
        !check_vec_ranges(c, "VTRANS", cols, rows, ops, 1, &rd) ||
        !check_vec_ranges(c, "VTRANS", rows, cols, ops + 1, 1, &rs))
        return false;
    // ---- timing: a vector op over rows x cols elements ----
    const bool wide = isa::dtype_size(dt) == 4 || isa::dtype_size(st) == 4;
    const uint64_t sticks_src =
        cost::lx_sticks(src.addr, rows, src.stride, cols * isa::dtype_size(st));
    const uint64_t sticks_dst =
        cost::lx_sticks(dst.addr, cols, dst.stride, rows * isa::dtype_size(dt));
    if (!vec_timing(c, rows * cols, wide, 1, &rs, 1, rd, {sticks_src, sticks_dst})) return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, &rs, 1, rd, cols, dst.stride, rows * isa::dtype_size(dt));
    kern::transpose(dt, st, c.lx + dst.addr, c.lx + src.addr, rows, cols, dst.stride, src.stride,
                    &cancel_tok_);
    return true;
}

// VSEL: a = dst, b = x, c = y, d = rows, cols, dst_stride, x_stride, y_stride, mask address,
// mask_stride; flags = y operand mode, func = invert | mask mode << 2 | mask type nibble << 4.
bool Engine::exec_vsel(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VSEL", rows, cols)) return false;
    const VOp dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    const VOp x{"x", c.r[in.b], st, isa::Bcast::NONE, d[3]};
    const VOp y{"y",
                c.r[in.c],
                mod_type(in.flags, st),
                mod_mode(in.flags),
                d[4],
                imm_f32(static_cast<uint64_t>(in.imm))};
    const VOp m{"mask", d[5], mod_type(in.func, st), static_cast<isa::Bcast>((in.func >> 2) & 3),
                d[6]};
    const VOp* const ops[] = {&dst, &x, &y, &m};
    Range r[4];
    if (!check_vec_ops(c, "VSEL", rows, cols, ops, 4, r)) return false;
    // ---- timing: a vector op over rows x cols elements ----
    bool wide = false;
    for (const VOp* o : {&dst, &x, &y, &m})
        wide |= o->mode != isa::Bcast::IMM && isa::dtype_size(o->t) == 4;
    if (!vec_timing(c, rows * cols, wide, 1, r + 1, 3, r[0],
                    {vop_sticks(dst, rows, cols), vop_sticks(x, rows, cols),
                     vop_sticks(y, rows, cols), vop_sticks(m, rows, cols)}))
        return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, r + 1, 3, r[0], rows, dst.stride, cols * isa::dtype_size(dt));
    auto vo = [&](const VOp& o) {
        return kern::VecOperand{c.lx + (o.mode == isa::Bcast::IMM ? 0 : o.addr), o.t, o.mode,
                                o.stride, o.imm};
    };
    kern::vselect(dt, c.lx + dst.addr, dst.stride, rows, cols, vo(x), vo(y), vo(m),
                  in.func & isa::kSelInvert, &cancel_tok_);
    return true;
}

// VIOTA: a = dst, b = src (MASK), d = rows, cols, dst_stride, src_stride, alpha, beta, gamma;
// func IOTA / MASK; imm = fp32 fill (MASK).
bool Engine::exec_viota(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const auto f = static_cast<isa::Iota>(in.func);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VIOTA", rows, cols)) return false;
    const VOp dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    const VOp src{"src", c.r[in.b], st, f == isa::Iota::MASK ? isa::Bcast::NONE : isa::Bcast::IMM,
                  d[3]};
    const VOp* const ops[] = {&dst, &src};
    Range r[2];
    if (!check_vec_ops(c, "VIOTA", rows, cols, ops, 2, r)) return false;
    // ---- timing: a vector op over rows x cols elements ----
    const bool wide =
        isa::dtype_size(dt) == 4 || (f == isa::Iota::MASK && isa::dtype_size(st) == 4);
    if (!vec_timing(c, rows * cols, wide, 1, r + 1, f == isa::Iota::MASK ? 1 : 0, r[0],
                    {vop_sticks(dst, rows, cols), vop_sticks(src, rows, cols)}))
        return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, r + 1, f == isa::Iota::MASK ? 1 : 0, r[0], rows, dst.stride,
              cols * isa::dtype_size(dt));
    kern::viota(f, dt, c.lx + dst.addr, dst.stride, rows, cols,
                {c.lx + (f == isa::Iota::MASK ? src.addr : 0), st, isa::Bcast::NONE, src.stride},
                static_cast<int64_t>(d[4]), static_cast<int64_t>(d[5]), static_cast<int64_t>(d[6]),
                imm_f32(static_cast<uint64_t>(in.imm)), &cancel_tok_);
    return true;
}

// VFMA: a = dst, b = s1, c = s2, d = rows, cols, dst_stride, s1_stride, s2_stride, s3 address,
// s3_stride; flags = s2 operand mode, func = s3 operand mode; imm = s2 (low) / s3 (high) fp32.
bool Engine::exec_vfma(Core& c, const Instr& in) {
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    if (rows == 0 || cols == 0) return true;
    if (!vec_shape_ok(c, "VFMA", rows, cols)) return false;
    const uint64_t imm = static_cast<uint64_t>(in.imm);
    const VOp dst{"dst", c.r[in.a], dt, isa::Bcast::NONE, d[2]};
    const VOp s1{"s1", c.r[in.b], st, isa::Bcast::NONE, d[3]};
    const VOp s2{"s2", c.r[in.c], mod_type(in.flags, st), mod_mode(in.flags), d[4], imm_f32(imm)};
    const VOp s3{"s3", d[5], mod_type(in.func, st), mod_mode(in.func), d[6], imm_f32(imm >> 32)};
    const VOp* const ops[] = {&dst, &s1, &s2, &s3};
    Range r[4];
    if (!check_vec_ops(c, "VFMA", rows, cols, ops, 4, r)) return false;
    // ---- timing: a vector op over rows x cols elements (one FMA per element) ----
    bool wide = false;
    for (const VOp* o : {&dst, &s1, &s2, &s3})
        wide |= o->mode != isa::Bcast::IMM && isa::dtype_size(o->t) == 4;
    if (!vec_timing(c, rows * cols, wide, 1, r + 1, 3, r[0],
                    {vop_sticks(dst, rows, cols), vop_sticks(s1, rows, cols),
                     vop_sticks(s2, rows, cols), vop_sticks(s3, rows, cols)}))
        return false;
    // ---- data ----
    if (timing_only_) return true;
    vec_touch(c, r + 1, 3, r[0], rows, dst.stride, cols * isa::dtype_size(dt));
    auto vo = [&](const VOp& o) {
        return kern::VecOperand{c.lx + (o.mode == isa::Bcast::IMM ? 0 : o.addr), o.t, o.mode,
                                o.stride, o.imm};
    };
    kern::vfma(dt, c.lx + dst.addr, dst.stride, rows, cols, vo(s1), vo(s2), vo(s3), &cancel_tok_);
    return true;
}

}  // namespace spyre::eng
