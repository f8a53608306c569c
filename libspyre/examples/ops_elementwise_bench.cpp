// SPDX-License-Identifier: MIT
// Modeled device time of the op library's elementwise and layout programs as their planners
// choose them (Documentation/ops-elementwise.md): for each case the plan on up to 32 cores, its
// modeled time on the cycle model (a timing-only run of the very program), the DDR roofline
// ratio (the tensor bytes the op must move at 204.8 GB/s, over the modeled time, launch
// included) and the plan limited to one core. Deterministic figures, not pass/fail.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/elementwise_program.hpp"
#include "ops/layout_program.hpp"
#include "ops/pricing.hpp"

using namespace spyre;
using namespace spyre::ops;
using isa::Bcast;
using isa::DType;

namespace {

const char* tname(DType t) {
    switch (t) {
        case DType::F32:
            return "fp32";
        case DType::F16:
            return "fp16";
        case DType::BF16:
            return "bf16";
        case DType::I8:
            return "int8";
        default:
            return "int32";
    }
}

struct Row {
    std::string op, shape, dtype, plan;
    double us = 0, roofline = 0, us1 = 0, plan_ms = 0;
};

void print(const Row& r) {
    std::printf("| %-22s | %-22s | %-11s | %-52s | %9.2f | %5.1f%% | %9.2f | %5.0f |\n",
                r.op.c_str(), r.shape.c_str(), r.dtype.c_str(), r.plan.c_str(), r.us, r.roofline,
                r.us1, r.plan_ms);
    std::fflush(stdout);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
    const spyre_engine_config cfg = default_engine_config();
    Pricer pricer(cfg);
    const double hz = double(cfg.clock_hz), bw = double(cfg.ddr_bytes_per_s);
    std::printf(
        "| op | shape | dtype | plan (<= 32 cores) | modeled us | DDR roofline | "
        "1 core us | plan ms |\n|---|---|---|---|---|---|---|---|\n");

    // ---- elementwise ----
    auto ew = [&](EwShape s, const std::string& shape) {
        const auto t0 = std::chrono::steady_clock::now();
        const EwPlan p = plan_elementwise(pricer, s, 32);
        Row r;
        r.plan_ms = ms_since(t0);
        const EwPlan p1 = plan_elementwise(pricer, s, 1);
        const double n = double(ew_elements(s));
        auto bytes_of = [&](const EwOperand& o) {
            const double es = isa::dtype_size(o.t);
            switch (o.mode) {
                case Bcast::NONE:
                    return n * es;
                case Bcast::ROW:
                    return double(s.cols) * es;
                case Bcast::COL:
                    return double(s.rows) * es;
                case Bcast::SCALAR:
                    return es;
                default:
                    return 0.0;
            }
        };
        double bytes = n * isa::dtype_size(s.out) + bytes_of(s.a);
        if (!ew_is_unary(s.op) && s.op != EwOp::AFFINE) bytes += bytes_of(s.b);
        if (s.op == EwOp::WHERE) bytes += bytes_of(s.cond);
        r.op = ew_name(s.op);
        if (s.op == EwOp::ADD && s.alpha != 1.0f) r.op += " (alpha)";
        if (!ew_is_unary(s.op) && s.op != EwOp::AFFINE && s.b.mode != Bcast::NONE) {
            const char* m[] = {"", " b scalar", " b row", " b col", " b imm"};
            r.op += m[static_cast<int>(s.b.mode)];
        }
        r.shape = shape;
        r.dtype = tname(s.a.t);
        if (s.out != s.a.t) r.dtype += std::string("->") + tname(s.out);
        r.plan = ew_plan_name(p);
        r.us = p.cycles / hz * 1e6;
        r.roofline = 100.0 * (bytes / bw) / (p.cycles / hz);
        r.us1 = p1.cycles / hz * 1e6;
        print(r);
    };
    auto flat = [](EwOp op, uint64_t n, DType t, DType out) {
        EwShape s;
        s.op = op, s.rows = 1, s.cols = n, s.a.t = s.b.t = t, s.out = out;
        return s;
    };
    const uint64_t M16 = 1ull << 24, M1 = (1ull << 20) + 3;
    for (uint64_t n : {uint64_t{1}, uint64_t{4097}, uint64_t{65536}, M1, M16})
        ew(flat(EwOp::RELU, n, DType::F16, DType::F16), std::to_string(n));
    for (EwOp op : {EwOp::GELU, EwOp::GELU_TANH, EwOp::SILU, EwOp::SIGMOID, EwOp::EXP, EwOp::LOG,
                    EwOp::TANH, EwOp::SQRT, EwOp::RSQRT, EwOp::RECIP, EwOp::SIN, EwOp::NEG})
        for (DType t : {DType::BF16, DType::F32}) ew(flat(op, M16, t, t), "16M");
    ew(flat(EwOp::CAST, M16, DType::F32, DType::F16), "16M");
    ew(flat(EwOp::CAST, M16, DType::F16, DType::F32), "16M");
    for (EwOp op : {EwOp::ADD, EwOp::MUL, EwOp::DIV, EwOp::MAX})
        for (DType t : {DType::F16, DType::F32}) ew(flat(op, M16, t, t), "16M");
    ew(flat(EwOp::ADD, M1, DType::F16, DType::F16), "1M+3");
    ew(flat(EwOp::LT, M16, DType::F16, DType::I8), "16M");
    {
        EwShape s = flat(EwOp::MUL, M16, DType::F16, DType::F16);
        s.b.mode = Bcast::IMM, s.b.imm = 0.5f;
        ew(s, "16M");
        s.b.mode = Bcast::SCALAR, s.b.t = DType::F32;
        ew(s, "16M");
        s = flat(EwOp::ADD, M16, DType::BF16, DType::BF16);
        s.alpha = 0.25f;
        ew(s, "16M");
        s = flat(EwOp::AFFINE, M16, DType::F16, DType::F16);
        s.scale = 2, s.shift = 1;
        ew(s, "16M");
        s = flat(EwOp::WHERE, M16, DType::F16, DType::F16);
        s.cond.t = DType::I8;
        ew(s, "16M, bool mask");
        for (auto [R, C] : {std::pair<uint64_t, uint64_t>{4096, 4096}, {4095, 4095}, {16, 1000000}})
            for (Bcast m : {Bcast::ROW, Bcast::COL}) {
                s = flat(EwOp::ADD, 0, DType::F16, DType::F16);
                s.rows = R, s.cols = C, s.b.mode = m;
                ew(s, std::to_string(R) + "x" + std::to_string(C));
            }
    }

    // ---- layout ----
    auto lay = [&](const std::string& op, const std::string& shape, const std::string& dtype,
                   double bytes, const std::function<LayoutPlan(uint32_t)>& plan) {
        const auto t0 = std::chrono::steady_clock::now();
        const LayoutPlan p = plan(32);
        Row r;
        r.plan_ms = ms_since(t0);
        const LayoutPlan p1 = plan(1);
        r.op = op, r.shape = shape, r.dtype = dtype, r.plan = layout_plan_name(p);
        r.us = p.cycles / hz * 1e6;
        r.roofline = 100.0 * (bytes / bw) / (p.cycles / hz);
        r.us1 = p1.cycles / hz * 1e6;
        print(r);
    };
    struct M {
        uint64_t R, C;
        uint32_t es;
    };
    for (M m : {M{4096, 4095, 2}, M{4096, 1000, 2}, M{2048, 4096, 2}, M{1000, 4095, 4}}) {
        const std::string shape = std::to_string(m.R) + "x" + std::to_string(m.C);
        const char* dt = m.es == 2 ? "fp16" : "fp32";
        PadShape ps;
        ps.rows = m.R, ps.cols = m.C, ps.es = m.es, ps.src_ld = m.C * m.es;
        ps.dst_ld = (m.C * m.es + 127) / 128 * 128;
        const double bytes = double(m.R) * (m.C * m.es + ps.dst_ld);
        lay("pad", shape, dt, bytes, [&](uint32_t c) { return plan_pad(pricer, ps, c); });
        UnpadShape us;
        us.rows = m.R, us.cols = m.C, us.es = m.es, us.src_ld = ps.dst_ld;
        lay("unpad", shape, dt, bytes, [&](uint32_t c) { return plan_unpad(pricer, us, c); });
    }
    {
        PadShape ps;  // a column slice x[:, 1:1001] of a [4096, 4096] fp16 matrix
        ps.rows = 4096, ps.cols = 1000, ps.es = 2, ps.src_ld = 8192, ps.dst_ld = 2048;
        lay("pad (column slice)", "4096x1000 of 4096", "fp16", 4096.0 * (2000 + 2048),
            [&](uint32_t c) { return plan_pad(pricer, ps, c); });
    }
    struct T {
        uint64_t B, R, C;
        uint32_t es;
    };
    for (T t : {T{1, 4096, 4096, 2}, T{32, 1024, 128, 2}, T{32, 1000, 128, 2}, T{32, 128, 1000, 2},
                T{8, 512, 512, 4}, T{1, 4095, 4095, 2}}) {
        TransposeShape ts;
        ts.batch = t.B, ts.rows = t.R, ts.cols = t.C, ts.es = t.es;
        const std::string shape =
            std::to_string(t.B) + "x" + std::to_string(t.R) + "x" + std::to_string(t.C);
        lay(transpose_to_stick_rows(ts) ? "transpose (tiles)" : "transpose (dense dst)", shape,
            t.es == 2 ? "fp16" : "fp32", 2.0 * t.B * t.R * t.C * t.es,
            [&](uint32_t c) { return plan_transpose(pricer, ts, c); });
    }
    {
        CopyShape c;  // [4, 1000, 32, 128] -> permute(0, 2, 1, 3)
        c.ndim = 4, c.es = 2;
        const uint64_t B = 4, S = 1000, H = 32, D = 128;
        c.sizes[0] = B, c.sizes[1] = H, c.sizes[2] = S, c.sizes[3] = D;
        c.strides[0] = S * H * D, c.strides[1] = D, c.strides[2] = H * D, c.strides[3] = 1;
        const double bytes = 2.0 * B * S * H * D * 2;
        lay("permute(0,2,1,3)", "4x1000x32x128", "fp16", bytes,
            [&](uint32_t k) { return plan_copy(pricer, c, k); });
        c.sizes[1] = H, c.sizes[2] = D, c.sizes[3] = S;  // [4, 32, 1000, 128] -> (0, 1, 3, 2)
        c.strides[1] = S * D, c.strides[2] = 1, c.strides[3] = D;
        lay("permute(0,1,3,2)", "4x32x1000x128", "fp16", bytes,
            [&](uint32_t k) { return plan_copy(pricer, c, k); });
        CopyShape e;  // x[:, ::2] of a [4096, 4096]
        e.ndim = 2, e.es = 2;
        e.sizes[0] = 4096, e.strides[0] = 4096, e.sizes[1] = 2048, e.strides[1] = 2;
        lay("strided copy x[:, ::2]", "4096x2048 of 4096", "fp16", 2.0 * 4096 * 2048 * 2,
            [&](uint32_t k) { return plan_copy(pricer, e, k); });
    }
    return 0;
}
