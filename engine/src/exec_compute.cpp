// SPDX-License-Identifier: MIT
// MM (systolic arrays) and the vector instructions VUN, VBIN, VRED.
#include <bit>

#include "engine_impl.hpp"
#include "spyre/cost.hpp"

namespace spyre::eng {

bool Engine::exec_mm(Core& c, const Instr& in) {
    const DType t = static_cast<DType>(in.dt);
    const uint64_t* d = &c.r[in.d];
    const uint64_t m = d[0], n = d[1], k = d[2], lda = d[3], ldb = d[4], ldc = d[5];
    const uint64_t ca = c.r[in.a], aa = c.r[in.b], ba = c.r[in.c];
    if (m == 0 || n == 0) return true;
    if (m > isa::kMaxMatDim || n > isa::kMaxMatDim || k > isa::kMaxMatDim)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "MM: %llux%llux%llu exceeds 4096",
                    (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
    const uint64_t es = isa::dtype_size(t);
    if (aa % es || ba % es || lda % es || ldb % es || ca % 4 || ldc % 4)
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED,
                    "MM: operand addresses/strides not element aligned");
    // transposed operands: A stored K x M, B stored N x K
    const bool ta = in.flags & isa::kMmTransA, tb = in.flags & isa::kMmTransB;
    Range ra, rb, rc;
    if (!check_lx(c, "MM A", aa, ta ? k : m, lda, (ta ? m : k) * es, &ra) ||
        !check_lx(c, "MM B", ba, tb ? n : k, ldb, (tb ? k : n) * es, &rb) ||
        !check_lx(c, "MM C", ca, m, ldc, n * 4, &rc))
        return false;
    const uint64_t cycles = cost::mm_cycles(cfg_, t, m, n, k);
    const bool acc = in.flags & isa::kMmAccumulate;
    Range reads[3] = {ra, rb, rc};
    if (!unit_op(c, SPYRE_UNIT_MATRIX, 0, cycles, cfg_.mm_fill_latency, reads, acc ? 3 : 2, &rc, 1,
                 nullptr))
        return false;
    c.stats.macs += m * n * k;
    // the same MACs in fp16 MAC slots: utilisation against the peak of the type used
    c.stats.mac_slots += t == DType::I8    ? ceil_div(m * n * k, cfg_.mm_int8_speedup)
                         : t == DType::F32 ? m * n * k * cfg_.mm_fp32_slowdown
                                           : m * n * k;
    // operands in deferred LOAD copies are read from their source (before C's LX is touched:
    // a C over them settles or drops the copy, the source keeps the bytes)
    // a shared copy's source may be written by another core's STORE, which copies it first:
    // the lock is held while the MM reads it
    std::unique_lock<std::recursive_mutex> g(*c.defer_mu, std::defer_lock);
    if (c.shared) g.lock();
    uint64_t la = lda, lb = ldb;
    const uint8_t* a =
        timing_only_ ? nullptr : lx_alias(c, aa, ta ? k : m, lda, (ta ? m : k) * es, &la);
    const uint8_t* bm =
        timing_only_ ? nullptr : lx_alias(c, ba, tb ? n : k, ldb, (tb ? k : n) * es, &lb);
    const bool a_ddr = a != nullptr, b_ddr = bm != nullptr;
    if (!a) lx_touch(c, ra), a = c.lx + aa;
    if (!bm) lx_touch(c, rb), bm = c.lx + ba;
    if (!acc && (m == 1 || ldc == n * 4))
        lx_overwrite(c, rc.lo, rc.hi);  // C is contiguous and written completely
    else
        lx_touch(c, rc);
    if (timing_only_) return true;
    // the kernel takes row-major A: a transposed A is copied (read before C is written, so C may
    // still overlap it); a transposed B is transposed by the kernel (kernels.hpp)
    if (ta && k) a = kern::transposed_copy(0, es, a, k, m, la), la = k * es;
    kern::MatmulArgs mm{t, c.lx + ca, a, bm, m, n, k, la, lb, ldc, acc, &cancel_tok_, tb};
    // operands read in place from device memory may reuse their packing while it is unchanged
    mm.a_gen = a_ddr && !ta ? ddr_gen_ : 0;
    mm.b_gen = b_ddr ? ddr_gen_ : 0;
    kern::matmul(mm);
    return true;
}

bool Engine::exec_vec(Core& c, const Instr& in) {
    const Op op = static_cast<Op>(in.op);
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    // VBIN flags high nibble: src2's own type + 1 (0: the source type)
    const DType s2t =
        op == Op::VBIN && (in.flags >> 4) ? static_cast<DType>((in.flags >> 4) - 1) : st;
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    const uint64_t dst = c.r[in.a], s1 = c.r[in.b], s2 = op == Op::VBIN ? c.r[in.c] : 0;
    const char* name = op_info(in.op).name;
    if (rows == 0 || cols == 0) return true;
    if (rows > lx_usable_ || cols > lx_usable_ || u128{rows} * cols > lx_usable_)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "%s: %llu x %llu elements exceed LX", name,
                    (unsigned long long)rows, (unsigned long long)cols);
    const uint64_t des = isa::dtype_size(dt), ses = isa::dtype_size(st),
                   s2es = isa::dtype_size(s2t);
    const float imm = std::bit_cast<float>(static_cast<uint32_t>(in.imm));
    Range reads[2] = {}, w{};
    int nr = 0;
    uint64_t dstride = 0, s1stride = 0, s2stride = 0;
    uint64_t out_rows = rows, out_bytes = cols * des;
    isa::Bcast mode = isa::Bcast::NONE;
    if (op == Op::VRED) {
        s1stride = d[2];
        const int axis = in.flags;
        out_rows = 1;
        out_bytes = (axis == 0 ? rows : cols) * des;
    } else {
        dstride = d[2];
        s1stride = d[3];
        if (op == Op::VBIN) {
            s2stride = d[4];
            mode = static_cast<isa::Bcast>(in.flags & 15);
        }
    }
    const bool uses_s2 = op == Op::VBIN && mode != isa::Bcast::IMM;
    const bool uses_s2stride = mode == isa::Bcast::NONE || mode == isa::Bcast::COL;
    if (dst % des || s1 % ses || (uses_s2 && s2 % s2es) || dstride % des || s1stride % ses ||
        (uses_s2 && uses_s2stride && s2stride % s2es))
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "%s: addresses/strides not element aligned",
                    name);
    if (!check_lx(c, name, dst, out_rows, dstride, out_bytes, &w)) return false;
    const bool reads_src1 = !(op == Op::VUN && in.func == static_cast<uint8_t>(isa::VUn::SET));
    if (reads_src1 && !check_lx(c, name, s1, rows, s1stride, cols * ses, &reads[nr++]))
        return false;
    if (op == Op::VBIN) {
        bool ok = true;
        switch (mode) {
            case isa::Bcast::NONE:
                ok = check_lx(c, name, s2, rows, s2stride, cols * s2es, &reads[nr++]);
                break;
            case isa::Bcast::SCALAR:
                ok = check_lx(c, name, s2, 1, 0, s2es, &reads[nr++]);
                break;
            case isa::Bcast::ROW:
                ok = check_lx(c, name, s2, 1, 0, cols * s2es, &reads[nr++]);
                break;
            case isa::Bcast::COL:
                ok = check_lx(c, name, s2, rows, s2stride, s2es, &reads[nr++]);
                break;
            default:
                break;
        }
        if (!ok) return false;
    }
    // cycles: lane-limited compute, or the LX sticks of the busiest operand stream
    const uint64_t compute =
        cost::vec_compute_cycles(cfg_, op, in.func, dt, st, rows, cols, uses_s2 ? s2t : st);
    uint64_t sticks = 0, max_sticks = 0;
    {
        uint64_t sk[3] = {};
        sk[0] = cost::lx_sticks(dst, out_rows, dstride, out_bytes);
        if (reads_src1) sk[1] = cost::lx_sticks(s1, rows, s1stride, cols * ses);
        if (op == Op::VBIN) {
            switch (mode) {
                case isa::Bcast::NONE:
                    sk[2] = cost::lx_sticks(s2, rows, s2stride, cols * s2es);
                    break;
                case isa::Bcast::SCALAR:
                    sk[2] = cost::lx_sticks(s2, 1, 0, s2es);
                    break;
                case isa::Bcast::ROW:
                    sk[2] = cost::lx_sticks(s2, 1, 0, cols * s2es);
                    break;
                case isa::Bcast::COL:
                    sk[2] = cost::lx_sticks(s2, rows, s2stride, s2es);
                    break;
                default:
                    break;
            }
        }
        for (uint64_t x : sk) sticks += x, max_sticks = std::max(max_sticks, x);
    }
    const uint64_t cycles = cost::vec_cycles(cfg_, compute, max_sticks);
    c.stats.vec_sticks += sticks;
    if (!unit_op(c, SPYRE_UNIT_VECTOR, 0, cycles, cfg_.vec_latency, reads, nr, &w, 1, nullptr))
        return false;
    for (int i = 0; i < nr; ++i) lx_touch(c, reads[i]);
    // a contiguous destination is written completely: its stale sticks need no zeroing
    if (out_rows && out_bytes && (out_rows == 1 || dstride == out_bytes))
        lx_overwrite(c, w.lo, w.hi);
    else
        lx_touch(c, w);
    if (timing_only_) return true;
    switch (op) {
        case Op::VUN:
            kern::vunary(static_cast<isa::VUn>(in.func), dt, st, c.lx + dst, c.lx + s1, rows, cols,
                         dstride, s1stride, imm, &cancel_tok_);
            break;
        case Op::VBIN:
            if (s2t == st) {
                kern::vbinary(static_cast<isa::VBin>(in.func), mode, dt, st, c.lx + dst, c.lx + s1,
                              c.lx + s2, rows, cols, dstride, s1stride, s2stride, imm,
                              &cancel_tok_);
            } else {
                kern::vbinary_mixed(static_cast<isa::VBin>(in.func), dt, c.lx + dst, dstride, rows,
                                    cols, {c.lx + s1, st, isa::Bcast::NONE, s1stride, 0.0f},
                                    {c.lx + s2, s2t, mode, s2stride, imm}, &cancel_tok_);
            }
            break;
        default:
            if (vred_int_path(in.dt)) {
                kern::vreduce_int(static_cast<isa::Red>(in.func), in.flags, dt, st, c.lx + dst,
                                  c.lx + s1, rows, cols, s1stride, &cancel_tok_);
                break;
            }
            kern::vreduce(static_cast<isa::Red>(in.func), in.flags, dt, st, c.lx + dst, c.lx + s1,
                          rows, cols, s1stride, &cancel_tok_);
            break;
    }
    return true;
}

}  // namespace spyre::eng
