// SPDX-License-Identifier: MIT
// The op library's row-wise programs on the engine: softmax, log_softmax, layer_norm, rms_norm,
// sum, mean, max, min and argmax against a double-precision host reference over many shapes
// (row lengths from 1 to beyond one LX tile, row counts that do not divide over the cores), the
// three data types, 1 and 32 cores, every block plan of a shape, forced long-row plans (rows not
// on stick boundaries), the naive programs (bit-identical to the planned ones), -inf / NaN /
// huge inputs, and the modeled gains (planned vs naive, 32 cores vs the DDR roofline).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "ops/rowwise_planner.hpp"
#include "ops_test_util.hpp"
#include "spyre/numerics.hpp"
#include "spyre/programs/softmax_naive.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

uint64_t up(uint64_t x) { return (x + 127) / 128 * 128; }
uint64_t es_of(DType t) { return isa::dtype_size(t); }

// Spacing of the type's numbers at |v| (the subnormal spacing below the normal range).
double ulp(DType t, double v) {
    const int p = t == DType::F16 ? 10 : t == DType::BF16 ? 7 : 23;
    const int emin = t == DType::F16 ? -14 : -126;
    int e = std::isfinite(v) && v != 0 ? std::ilogb(v) : emin;
    e = std::max(e, emin);
    return std::ldexp(1.0, e - p);
}
double unit_roundoff(DType t) {
    return t == DType::F16 ? 0x1p-11 : t == DType::BF16 ? 0x1p-8 : 0x1p-24;
}

const char* tname(DType t) { return t == DType::F16 ? "f16" : t == DType::BF16 ? "bf16" : "f32"; }

// An op's operands in one device memory, each tensor in its own window (a stray access of
// the program faults), the output prefilled with 0xff (NaN / -1) so unwritten elements fail.
struct Case {
    RowwiseOp op;
    RowwiseShape s;
    std::vector<uint8_t> mem;
    uint64_t in = 0, out = 0, w = 0, b = 0, scr = 0, in_b = 0, out_b = 0, w_b = 0, b_b = 0;
    std::vector<double> x, wv, bv;  // the stored values
};

enum class Fill { UNIFORM, WIDE, SPECIAL };

Case make_case(RowwiseOp op, RowwiseShape s, uint32_t seed, Fill fill = Fill::UNIFORM,
               uint64_t scratch = 0) {
    Case c;
    c.op = op, c.s = s;
    const uint64_t es = es_of(s.t), n = s.rows * s.cols;
    c.in_b = n * es;
    c.out_b = rowwise_output_bytes(op, s);
    c.w_b = s.has_weight ? s.cols * es_of(s.weight_t) : 0;
    c.b_b = s.has_bias ? s.cols * es_of(s.bias_t) : 0;
    c.in = 0;
    c.out = up(c.in_b) + 128;
    c.w = c.out + up(c.out_b) + 128;
    c.b = c.w + up(c.w_b) + 128;
    c.scr = c.b + up(c.b_b) + 128;
    c.mem.assign(c.scr + up(scratch) + 128, 0);
    std::memset(&c.mem[c.out], 0xff, c.out_b);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-4, 4), wide(-30, 30), pick(0, 1);
    const double big = s.t == DType::F16 ? 60000.0 : 1e30;
    c.x.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
        double v = fill == Fill::WIDE ? wide(rng) : u(rng);
        if (fill == Fill::SPECIAL) {
            const double r = pick(rng);
            if (r < 0.1)
                v = -INFINITY;
            else if (r < 0.15)
                v = big * (pick(rng) < 0.5 ? -1 : 1);
        }
        test::store_elem(s.t, v, &c.mem[c.in + i * es]);
        c.x[i] = test::load_elem(s.t, &c.mem[c.in + i * es]);
    }
    for (uint64_t j = 0; j < s.cols; ++j) {
        if (s.has_weight) {
            test::store_elem(s.weight_t, u(rng), &c.mem[c.w + j * es_of(s.weight_t)]);
            c.wv.push_back(test::load_elem(s.weight_t, &c.mem[c.w + j * es_of(s.weight_t)]));
        }
        if (s.has_bias) {
            test::store_elem(s.bias_t, u(rng), &c.mem[c.b + j * es_of(s.bias_t)]);
            c.bv.push_back(test::load_elem(s.bias_t, &c.mem[c.b + j * es_of(s.bias_t)]));
        }
    }
    return c;
}

spyre_engine* engine() {
    static spyre_engine* eng = [] {
        spyre_engine_config cfg;
        spyre_engine_config_default(&cfg);
        cfg.num_threads = 2;
        return spyre_engine_create(&cfg);
    }();
    return eng;
}

const Pricer& pricer() {
    static Pricer p(default_engine_config());
    return p;
}

// Runs one launch; returns the result (status checked by the caller).
spyre_engine_result launch(Case& c, const std::vector<uint8_t>& prog, uint32_t cores) {
    std::vector<spyre_engine_window> w = {{c.in, c.in_b}, {c.out, c.out_b}};
    if (c.w_b) w.push_back({c.w, c.w_b});
    if (c.b_b) w.push_back({c.b, c.b_b});
    if (c.mem.size() > c.scr + 128) w.push_back({c.scr, c.mem.size() - 128 - c.scr});
    const uint64_t args[5] = {c.in, c.out, c.w, c.b, c.scr};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args;
    job.num_args = 5;
    job.num_cores = cores;
    job.mem = c.mem.data();
    job.mem_size = c.mem.size();
    job.windows = w.data();
    job.num_windows = static_cast<uint32_t>(w.size());
    spyre_engine_result r{};
    spyre_engine_run(engine(), &job, &r);
    return r;
}

// Runs a plan (naive: all its launches); the result of the last launch.
spyre_engine_result run_plan(Case& c, const RowwisePlan& p) {
    if (!p.naive) return launch(c, build_rowwise(c.s, p), p.cores);
    const RowwiseNaive n = build_rowwise_naive(c.s, p);
    EXPECT_LE(c.mem.size() - c.scr - 128, up(n.scratch_bytes) + 128);
    spyre_engine_result r{};
    for (const auto& k : n.kernels) {
        r = launch(c, k, p.cores);
        if (r.status) break;
    }
    return r;
}

uint64_t scratch_of(const Case& c, const RowwisePlan& p) {
    return p.naive ? build_rowwise_naive(c.s, p).scratch_bytes : 0;
}

// ---- double reference and tolerances ----

struct Ref {
    std::vector<double> y, tol;  // per output element
    bool exact = false;          // max/min/argmax: bit-exact
};

Ref reference(const Case& c) {
    const RowwiseShape& s = c.s;
    const uint64_t R = s.rows, C = s.cols;
    const double uo = unit_roundoff(s.t);
    Ref r;
    const bool full =
        c.op == RowwiseOp::SOFTMAX || c.op == RowwiseOp::LAYER_NORM || c.op == RowwiseOp::RMS_NORM;
    r.y.resize(full ? R * C : R);
    r.tol.resize(r.y.size());
    for (uint64_t i = 0; i < R; ++i) {
        const double* x = &c.x[i * C];
        double mx = -INFINITY, mn = INFINITY, sum = 0, asum = 0;
        bool nan = false;
        uint64_t arg = 0;
        for (uint64_t j = 0; j < C; ++j) {
            if (std::isnan(x[j])) {  // the first NaN is the argmax
                if (!nan) arg = j;
                nan = true;
            } else if (!nan && x[j] > x[arg]) {
                arg = j;
            }
            mx = std::fmax(mx, x[j]);
            mn = std::fmin(mn, x[j]);
            sum += x[j];
            asum += std::fabs(x[j]);
        }
        if (nan) mx = mn = NAN;
        switch (c.op) {
            case RowwiseOp::SOFTMAX: {
                double se = 0;
                for (uint64_t j = 0; j < C; ++j) se += std::exp(x[j] - mx);
                for (uint64_t j = 0; j < C; ++j) {
                    const double d = x[j] - mx;
                    double y = s.log ? d - std::log(se) : std::exp(d) / se;
                    // 16-bit: exp(d), 1/sum and the product each round once to the type;
                    // fp32: x - max rounds in fp32 (relative error |d| 2^-24 of the result)
                    // log: exp(d) in the type makes the sum off by up to uo (1 - 1/sum)
                    // relative, and the fp32 sum rounds (2^-24 absolute on log(sum))
                    // fp32_exp: exp and 1/sum stay fp32, one rounding to the type
                    const double ue = s.fp32_exp ? 0x1p-24 : uo;
                    double tol = s.log        ? 3 * ulp(s.t, y) + 2 * ue * (1 - 1 / se) + 0x1p-22
                                 : s.fp32_exp ? ulp(s.t, y)
                                              : 3 * ulp(s.t, y);
                    if (s.t == DType::F32 && y != 0)
                        tol += (4 + std::fabs(d)) * 0x1p-23 * std::fabs(y);
                    r.y[i * C + j] = y;
                    r.tol[i * C + j] = tol;
                }
                break;
            }
            case RowwiseOp::LAYER_NORM:
            case RowwiseOp::RMS_NORM: {
                const bool ln = c.op == RowwiseOp::LAYER_NORM;
                const double mean = ln ? sum / C : 0;
                double q = 0;
                for (uint64_t j = 0; j < C; ++j) q += (x[j] - mean) * (x[j] - mean);
                const double rs = 1 / std::sqrt(q / C + double(s.eps));
                for (uint64_t j = 0; j < C; ++j) {
                    const double w = s.has_weight ? c.wv[j] : 1, b = s.has_bias ? c.bv[j] : 0;
                    const double y = (x[j] - mean) * rs * w + b;
                    // fp32 statistics: the mean's and the sums' rounding scale with the terms
                    // (long rows add per-chunk fp32 partial sums: up to sum |x| 2^-24)
                    const double terms = std::fabs(x[j]) + std::fabs(mean) + asum / C;
                    r.y[i * C + j] = y;
                    r.tol[i * C + j] =
                        2 * ulp(s.t, y) + 8 * 0x1p-24 * (terms * rs * std::fabs(w) + std::fabs(b));
                }
                break;
            }
            case RowwiseOp::SUM:
                r.y[i] = sum;
                r.tol[i] = ulp(s.t, sum) + 0x1p-22 * asum;
                break;
            case RowwiseOp::MEAN:
                r.y[i] = sum / C;
                r.tol[i] = 2 * ulp(s.t, sum / C) + 0x1p-22 * asum / C;
                break;
            case RowwiseOp::MAX:
                r.y[i] = mx;
                r.exact = true;
                break;
            case RowwiseOp::MIN:
                r.y[i] = mn;
                r.exact = true;
                break;
            case RowwiseOp::ARGMAX:
                r.y[i] = double(arg);
                r.exact = true;
                break;
        }
    }
    return r;
}

// Checks every output element; returns the largest error in units of the tolerance.
double check_output(const Case& c, const Ref& ref, const std::string& what) {
    const DType ot = c.op == RowwiseOp::ARGMAX ? DType::I32 : c.s.t;
    const uint64_t oes = es_of(ot);
    double worst = 0;
    int fails = 0;
    for (uint64_t k = 0; k < ref.y.size(); ++k) {
        const double got = test::load_elem(ot, &c.mem[c.out + k * oes]);
        double want = ref.y[k];
        uint8_t rounded[4];
        test::store_elem(c.s.t, want, rounded);  // beyond the type's range: +-inf
        if (ot != DType::I32 && std::isinf(test::load_elem(c.s.t, rounded)))
            want = test::load_elem(c.s.t, rounded);
        bool ok;
        if (std::isnan(want))
            ok = std::isnan(got);
        else if (ref.exact || std::isinf(want))
            ok = got == want;
        else {
            const double err = std::fabs(got - want);
            ok = err == 0 || err <= ref.tol[k];
            if (err) worst = std::max(worst, err / ref.tol[k]);
        }
        if (!ok && fails++ < 5) {
            const uint64_t row = ref.y.size() == c.s.rows ? k : k / c.s.cols;
            ADD_FAILURE() << what << ": element " << k << " (row " << row << ") got " << got
                          << " want " << want << " tol " << ref.tol[k];
        }
    }
    return worst;
}

std::string describe(const Case& c, const RowwisePlan& p) {
    return std::string(rowwise_op_name(c.op, c.s.log)) + " " + tname(c.s.t) + " " +
           std::to_string(c.s.rows) + "x" + std::to_string(c.s.cols) + " [" + plan_name(p) + "]";
}

// Runs plan p on case c and checks it against the reference.
void run_checked(Case& c, const RowwisePlan& p, const Ref* ref = nullptr) {
    const std::string what = describe(c, p);
    const spyre_engine_result r = run_plan(c, p);
    ASSERT_EQ(r.status, 0) << what << ": " << r.message;
    if (ref)
        check_output(c, *ref, what);
    else
        check_output(c, reference(c), what);
}

RowwiseShape shape(uint64_t R, uint64_t C, DType t) {
    RowwiseShape s;
    s.rows = R, s.cols = C, s.t = t;
    return s;
}

struct OpVariant {
    RowwiseOp op;
    bool log = false, weight = false, bias = false;
    DType wt = DType::F32;  // F32 or the input type (COUNT)
    bool fp32_exp = false;
};

RowwiseShape with(const OpVariant& v, RowwiseShape s) {
    s.log = v.log;
    s.fp32_exp = v.fp32_exp;
    s.has_weight = v.weight, s.has_bias = v.bias;
    s.weight_t = v.wt == DType::COUNT ? s.t : v.wt;
    s.bias_t = v.wt == DType::COUNT ? s.t : v.wt;
    return s;
}

const std::vector<OpVariant> kAllOps = {
    {RowwiseOp::SOFTMAX},
    {RowwiseOp::SOFTMAX, true},
    {RowwiseOp::SOFTMAX, false, false, false, DType::F32, true},
    {RowwiseOp::SOFTMAX, true, false, false, DType::F32, true},
    {RowwiseOp::LAYER_NORM},
    {RowwiseOp::LAYER_NORM, false, true, true, DType::F32},
    {RowwiseOp::LAYER_NORM, false, true, false, DType::COUNT},
    {RowwiseOp::LAYER_NORM, false, false, true, DType::COUNT},
    {RowwiseOp::RMS_NORM},
    {RowwiseOp::RMS_NORM, false, true, false, DType::COUNT},
    {RowwiseOp::RMS_NORM, false, true, false, DType::F32},
    {RowwiseOp::SUM},
    {RowwiseOp::MEAN},
    {RowwiseOp::MAX},
    {RowwiseOp::MIN},
    {RowwiseOp::ARGMAX},
};

class RowwiseSweep : public ::testing::TestWithParam<DType> {};

// Every op over row lengths 1 .. 4096+ and row counts 1 .. 512 on 1 and 32 cores, as planned.
TEST_P(RowwiseSweep, PlannedMatchesReference) {
    const DType t = GetParam();
    struct RC {
        uint64_t R, C;
    };
    const std::vector<RC> shapes = {{1, 1},    {3, 7},    {33, 63}, {512, 64},
                                    {33, 65},  {3, 1000}, {512, 1}, {33, 1024},
                                    {1, 4096}, {3, 4100}, {512, 7}, {512, 1000}};
    uint32_t seed = 1;
    for (const OpVariant& v : kAllOps)
        for (const RC& rc : shapes)
            for (uint32_t cores : {1u, 32u}) {
                const RowwiseShape s = with(v, shape(rc.R, rc.C, t));
                const RowwisePlan p = plan_rowwise(pricer(), v.op, s, cores);
                EXPECT_LE(p.cores, cores);
                Case c = make_case(v.op, s, seed++);
                run_checked(c, p);
            }
}

INSTANTIATE_TEST_SUITE_P(Types, RowwiseSweep,
                         ::testing::Values(DType::F16, DType::BF16, DType::F32),
                         [](const auto& info) { return std::string(tname(info.param)); });

// Every block plan of a shape gives the same bits (the numerics depend on the op only).
TEST(OpsRowwise, EveryBlockPlanGivesTheSameBits) {
    for (const OpVariant& v : kAllOps)
        for (DType t : {DType::F16, DType::F32}) {
            const RowwiseShape s = with(v, shape(130, 200, t));
            Case base = make_case(v.op, s, 7);
            const Ref ref = reference(base);
            std::vector<uint8_t> first;
            int n = 0;
            for (uint32_t cores : {1u, 3u, 32u}) {
                // all block sizes and buffering, with and without matrix-unit sums
                std::vector<RowwisePlan> plans;
                for (uint64_t bk : {1, 2, 8, 16, 64, 130})
                    for (uint32_t sl : {1u, 2u, 3u})
                        for (int m = 0; m < 2; ++m)
                            if (auto f = fit_rowwise_block(v.op, s, cores, bk, sl, sl == 3, m,
                                                           pricer().lx_budget()))
                                plans.push_back(*f);
                for (const RowwisePlan& p : plans) {
                    Case c = base;
                    run_checked(c, p, &ref);
                    std::vector<uint8_t> out(c.mem.begin() + c.out,
                                             c.mem.begin() + c.out + c.out_b);
                    if (p.sum_on_matrix) continue;  // fp32 MM sums round differently
                    if (first.empty())
                        first = out;
                    else
                        EXPECT_EQ(first, out) << describe(c, p);
                    ++n;
                }
            }
            EXPECT_GE(n, 6) << rowwise_op_name(v.op, v.log);
        }
}

// rms_norm with add_residual (spyre_op_add_rms_norm) under every block plan: h = x + residual
// bit-exact (rounded to the type), and the output bit-identical to rms_norm's under the same
// plan run on h; rows that split sticks (blocks and cores meet inside them), 1, 3 and 32 cores.
TEST(OpsRowwise, AddResidualEveryBlockPlanMatchesRmsNormOfTheSum) {
    for (DType t : {DType::F16, DType::BF16, DType::F32}) {
        RowwiseShape s = shape(130, 200, t);
        s.has_weight = true, s.weight_t = t;
        const Case base = make_case(RowwiseOp::RMS_NORM, s, 11);
        const uint64_t es = es_of(t), n = s.rows * s.cols, bytes = n * es;
        // residual and h behind the case's memory; h starts as NaN
        const uint64_t res = up(base.mem.size()) + 128, h = res + up(bytes) + 128;
        std::vector<uint8_t> mem = base.mem;
        mem.resize(h + up(bytes) + 128, 0);
        std::memset(&mem[h], 0xff, bytes);
        std::mt19937 rng(12);
        std::uniform_real_distribution<double> u(-4, 4);
        Case sum = base;  // the same case with x = the rounded sum
        for (uint64_t i = 0; i < n; ++i) {
            test::store_elem(t, u(rng), &mem[res + i * es]);
            const double v = base.x[i] + test::load_elem(t, &mem[res + i * es]);
            test::store_elem(t, v, &sum.mem[sum.in + i * es]);
            sum.x[i] = test::load_elem(t, &sum.mem[sum.in + i * es]);
        }
        RowwiseShape sr = s;
        sr.add_residual = true;
        int plans = 0;
        for (uint32_t cores : {1u, 3u, 32u})
            for (uint64_t bk : {1, 2, 8, 64, 130})
                for (uint32_t sl : {1u, 2u, 3u})
                    for (int m = 0; m < 2; ++m) {
                        const auto p = fit_rowwise_block(RowwiseOp::RMS_NORM, sr, cores, bk, sl,
                                                         sl == 3, m, pricer().lx_budget());
                        if (!p) continue;
                        ++plans;
                        std::vector<uint8_t> run = mem;
                        const std::vector<uint8_t> prog = build_rowwise(sr, *p);
                        std::vector<spyre_engine_window> w = {{base.in, bytes},
                                                              {base.out, bytes},
                                                              {base.w, s.cols * es},
                                                              {res, bytes},
                                                              {h, bytes}};
                        const uint64_t args[7] = {base.in, base.out, base.w, 0, 0, res, h};
                        spyre_engine_job job{};
                        job.program = prog.data();
                        job.program_size = prog.size();
                        job.args = args;
                        job.num_args = 7;
                        job.num_cores = p->cores;
                        job.mem = run.data();
                        job.mem_size = run.size();
                        job.windows = w.data();
                        job.num_windows = static_cast<uint32_t>(w.size());
                        spyre_engine_result r{};
                        spyre_engine_run(engine(), &job, &r);
                        const std::string what = std::string(tname(t)) + " " + plan_name(*p);
                        ASSERT_EQ(r.status, 0) << what << ": " << r.message;
                        ASSERT_EQ(0, std::memcmp(&run[h], &sum.mem[sum.in], bytes)) << what;
                        RowwisePlan plain = *p;  // rms_norm of the sum under the same plan
                        Case c = sum;
                        c.s = s;
                        const spyre_engine_result rr = run_plan(c, plain);
                        ASSERT_EQ(rr.status, 0) << what << ": " << rr.message;
                        ASSERT_EQ(0, std::memcmp(&run[base.out], &c.mem[c.out], bytes)) << what;
                        // and correct: the plain plan against the double reference
                        check_output(c, reference(c), what);
                    }
        EXPECT_GE(plans, 12) << tname(t);
    }
}

// Row sums on the matrix unit over rows longer than one MM (K chunks of 4096, accumulated).
TEST(OpsRowwise, MatrixSumsOverLongRows) {
    for (const OpVariant& v : {OpVariant{RowwiseOp::SOFTMAX}, OpVariant{RowwiseOp::SOFTMAX, true},
                               OpVariant{RowwiseOp::LAYER_NORM}, OpVariant{RowwiseOp::RMS_NORM}})
        for (DType t : {DType::F16, DType::BF16}) {
            const RowwiseShape s = with(v, shape(20, 9000, t));
            int n = 0;
            for (uint64_t bk : {1, 8})
                if (auto p = fit_rowwise_block(v.op, s, 3, bk, 3, 1, true, pricer().lx_budget())) {
                    Case c = make_case(v.op, s, 9);
                    run_checked(c, *p);
                    ++n;
                }
            EXPECT_GT(n, 0);
        }
}

// Long-row plans forced on short rows: chunks of a few sticks, rows starting inside a stick
// (cols * es not a multiple of 128), several chunks per row, empty last chunks.
TEST(OpsRowwise, LongRowPlansMatchReference) {
    struct RC {
        uint64_t R, C, cc;  // cc in sticks
    };
    const std::vector<RC> shapes = {
        {5, 1000, 2}, {33, 65, 1}, {3, 4100, 8}, {7, 300, 64}, {2, 1, 1}};
    uint32_t seed = 100;
    for (const OpVariant& v : kAllOps)
        for (DType t : {DType::F16, DType::BF16, DType::F32})
            for (const RC& rc : shapes)
                for (uint32_t cores : {1u, 3u}) {
                    const RowwiseShape s = with(v, shape(rc.R, rc.C, t));
                    const uint64_t cc = rc.cc * 128 / es_of(t);
                    const auto p = fit_rowwise_chunked(v.op, s, cores, cc, pricer().lx_budget());
                    if (!p) continue;  // fewer row units than cores
                    Case c = make_case(v.op, s, seed++, Fill::WIDE);
                    run_checked(c, *p);
                }
}

// Rows longer than LX holds (no block of one row fits) plan as long rows; rows that fit one at a
// time plan either way, whichever prices faster.
TEST(OpsRowwise, RowsBeyondLxPlanAsLongRows) {
    for (const OpVariant& v : {OpVariant{RowwiseOp::SOFTMAX}, OpVariant{RowwiseOp::SOFTMAX, true},
                               OpVariant{RowwiseOp::MEAN}, OpVariant{RowwiseOp::ARGMAX}}) {
        const RowwiseShape s = with(v, shape(3, 450001, DType::F32));  // 1.8 MB per row
        const RowwisePlan p = plan_rowwise(pricer(), v.op, s, 32);
        EXPECT_EQ(p.block_rows, 0u) << plan_name(p);
        Case c = make_case(v.op, s, 5);
        run_checked(c, p);
    }
    for (const OpVariant& v : {OpVariant{RowwiseOp::LAYER_NORM, false, true, true, DType::F32},
                               OpVariant{RowwiseOp::RMS_NORM, false, true, false, DType::COUNT}}) {
        const RowwiseShape s = with(v, shape(3, 150001, DType::F32));
        Case c = make_case(v.op, s, 5);
        run_checked(c, plan_rowwise(pricer(), v.op, s, 32));
        // weight and bias of a long row stay in LX: 2 x 1.8 MB do not
        EXPECT_THROW(plan_rowwise(pricer(), v.op, with(v, shape(3, 450001, DType::F32)), 32),
                     std::invalid_argument);
    }
    const RowwiseShape s = shape(2, 1000001, DType::F16);
    const RowwisePlan p = plan_rowwise(pricer(), RowwiseOp::SOFTMAX, s, 32);
    EXPECT_EQ(p.block_rows, 0u);
    Case c = make_case(RowwiseOp::SOFTMAX, s, 6);
    run_checked(c, p);
}

// Rows of a stick or more that do not fill whole sticks split over all cores at any row: the
// stick two cores share is stored by the earlier one, with the later one's bytes sent over
// the ring.
TEST(OpsRowwise, CoresMeetInsideSticks) {
    for (const OpVariant& v : {OpVariant{RowwiseOp::SOFTMAX}, OpVariant{RowwiseOp::SOFTMAX, true},
                               OpVariant{RowwiseOp::LAYER_NORM, false, true, true, DType::F32},
                               OpVariant{RowwiseOp::RMS_NORM}})
        for (DType t : {DType::F16, DType::BF16, DType::F32})
            for (uint64_t R : {2, 37}) {
                const RowwiseShape s = with(v, shape(R, t == DType::F32 ? 33 : 1001, t));
                const RowwisePlan p = plan_rowwise(pricer(), v.op, s, 32);
                EXPECT_EQ(p.row_unit, 1u);
                EXPECT_EQ(p.cores, std::min<uint64_t>(R, 32));
                Case c = make_case(v.op, s, 13);
                run_checked(c, p);
                // one block per row, and the whole range per core
                for (uint64_t bk : {1, 64})
                    if (auto f = fit_rowwise_block(v.op, s, 32 > R ? R : 32, bk, 2, 0, false,
                                                   pricer().lx_budget())) {
                        Case cb = make_case(v.op, s, 13);
                        run_checked(cb, *f);
                    }
            }
}

// Many short rows: large blocks, many blocks per core, a partial last stick.
TEST(OpsRowwise, ManyShortRows) {
    for (const OpVariant& v : {OpVariant{RowwiseOp::SOFTMAX}, OpVariant{RowwiseOp::RMS_NORM},
                               OpVariant{RowwiseOp::SUM}, OpVariant{RowwiseOp::ARGMAX}})
        for (DType t : {DType::F16, DType::F32}) {
            const RowwiseShape s = with(v, shape(100003, 3, t));
            const RowwisePlan p = plan_rowwise(pricer(), v.op, s, 32);
            Case c = make_case(v.op, s, 8);
            run_checked(c, p);
        }
}

// Operands farther apart than one core's 256 MiB DDR span: every transfer sets its own span.
TEST(OpsRowwise, OperandsBeyondOneSpan) {
    const uint64_t far = uint64_t{600} << 20;  // untouched pages of a big buffer cost nothing
    std::unique_ptr<uint8_t[]> mem(new uint8_t[far + (1 << 20)]);
    for (RowwiseOp op : {RowwiseOp::SOFTMAX, RowwiseOp::SUM})
        for (bool long_rows : {false, true}) {
            const RowwiseShape s = shape(64, 1000, DType::F16);
            Case c = make_case(op, s, 4);
            const auto chunked =
                fit_rowwise_chunked(op, s, op == RowwiseOp::SUM ? 1 : 4, 256, pricer().lx_budget());
            ASSERT_TRUE(chunked.has_value());
            const RowwisePlan p = long_rows ? *chunked : plan_rowwise(pricer(), op, s, 32);
            std::memcpy(mem.get(), &c.mem[c.in], c.in_b);
            std::memset(mem.get() + far, 0xff, c.out_b);
            const auto prog = build_rowwise(s, p);
            const spyre_engine_window w[2] = {{0, c.in_b}, {far, c.out_b}};
            const uint64_t args[2] = {0, far};
            spyre_engine_job job{};
            job.program = prog.data();
            job.program_size = prog.size();
            job.args = args;
            job.num_args = 2;
            job.num_cores = p.cores;
            job.mem = mem.get();
            job.mem_size = far + (1 << 20);
            job.windows = w;
            job.num_windows = 2;
            spyre_engine_result r{};
            ASSERT_EQ(spyre_engine_run(engine(), &job, &r), 0) << r.message;
            std::memcpy(&c.mem[c.out], mem.get() + far, c.out_b);
            check_output(c, reference(c), describe(c, p));
        }
}

// -inf, huge values and whole rows of -inf (NaN, as max-subtracted softmax gives).
TEST(OpsRowwise, SoftmaxIsStableForInfAndHugeValues) {
    for (DType t : {DType::F16, DType::BF16, DType::F32})
        for (bool log : {false, true})
            for (uint64_t C : {7, 1000}) {
                RowwiseShape s = shape(64, C, t);
                s.log = log;
                Case c = make_case(RowwiseOp::SOFTMAX, s, 11, Fill::SPECIAL);
                // row 1: all -inf; row 2: one finite value among -inf; row 3: huge values;
                // row 4: one +inf (NaN row)
                test::store_elem(t, INFINITY, &c.mem[(4 * C + C / 3) * es_of(t)]);
                for (uint64_t j = 0; j < C; ++j) {
                    test::store_elem(t, -INFINITY, &c.mem[(1 * C + j) * es_of(t)]);
                    test::store_elem(t, j == C / 2 ? 3.0 : -INFINITY,
                                     &c.mem[(2 * C + j) * es_of(t)]);
                    test::store_elem(t, j % 3 == 0 ? (t == DType::F16 ? 65504.0 : 3e38) : -1.0,
                                     &c.mem[(3 * C + j) * es_of(t)]);
                }
                for (uint64_t i = 0; i < s.rows * C; ++i)
                    c.x[i] = test::load_elem(t, &c.mem[i * es_of(t)]);
                const Ref ref = reference(c);
                // the row of -inf is NaN, the others are finite probabilities
                EXPECT_TRUE(std::isnan(ref.y[1 * C]));
                EXPECT_TRUE(std::isnan(ref.y[4 * C]));
                EXPECT_FALSE(std::isnan(ref.y[2 * C + C / 2]));
                for (uint32_t cores : {1u, 32u}) {
                    Case cc = c;
                    run_checked(cc, plan_rowwise(pricer(), RowwiseOp::SOFTMAX, s, cores), &ref);
                    // and the long-row path
                    Case cl = c;
                    if (auto p = fit_rowwise_chunked(RowwiseOp::SOFTMAX, s, cores, 256,
                                                     pricer().lx_budget()))
                        run_checked(cl, *p, &ref);
                }
            }
}

// argmax: first index of the max; a NaN is the max (its first index), as in torch.
TEST(OpsRowwise, ArgmaxTiesAndNaN) {
    for (DType t : {DType::F16, DType::BF16, DType::F32}) {
        const uint64_t C = 300;
        RowwiseShape s = shape(6, C, t);
        Case c = make_case(RowwiseOp::ARGMAX, s, 12);
        auto set = [&](uint64_t i, uint64_t j, double v) {
            test::store_elem(t, v, &c.mem[(i * C + j) * es_of(t)]);
        };
        set(0, 10, 100), set(0, 200, 100);                      // tie: 10
        set(1, 5, NAN), set(1, 7, 100), set(1, 250, NAN);       // first NaN: 5
        set(2, 299, 100);                                       // last column
        set(3, 0, INFINITY), set(3, 1, NAN);                    // NaN beats +inf: 1
        for (uint64_t j = 0; j < C; ++j) set(4, j, -INFINITY);  // all -inf: 0
        for (uint64_t i = 0; i < s.rows * C; ++i) c.x[i] = test::load_elem(t, &c.mem[i * es_of(t)]);
        const Ref ref = reference(c);
        EXPECT_EQ(ref.y[0], 10);
        EXPECT_EQ(ref.y[1], 5);
        EXPECT_EQ(ref.y[2], 299);
        EXPECT_EQ(ref.y[3], 1);
        EXPECT_EQ(ref.y[4], 0);
        for (uint32_t cores : {1u, 32u}) {
            Case cb = c;
            run_checked(cb, plan_rowwise(pricer(), RowwiseOp::ARGMAX, s, cores), &ref);
            for (uint64_t cc : {64, 128}) {
                Case cl = c;
                const auto p = fit_rowwise_chunked(RowwiseOp::ARGMAX, s, cores, cc * 2 / es_of(t),
                                                   pricer().lx_budget());
                if (p) run_checked(cl, *p, &ref);
            }
        }
        // max and min propagate NaN
        for (RowwiseOp op : {RowwiseOp::MAX, RowwiseOp::MIN}) {
            Case cm = c;
            cm.op = op;
            cm.out_b = rowwise_output_bytes(op, s);
            std::memset(&cm.mem[cm.out], 0xff, cm.out_b);
            const Ref r = reference(cm);
            EXPECT_TRUE(std::isnan(r.y[1]));
            run_checked(cm, plan_rowwise(pricer(), op, s, 32), &r);
        }
    }
}

// The naive programs compute the same bits as the planned ones (same numerics, intermediates
// through DDR instead of LX).
TEST(OpsRowwise, NaiveGivesTheSameBitsAsPlanned) {
    for (const OpVariant& v : kAllOps)
        for (DType t : {DType::F16, DType::BF16, DType::F32})
            for (uint64_t C : {65, 1000}) {
                const RowwiseShape s = with(v, shape(100, C, t));
                for (uint32_t cores : {1u, 32u}) {
                    const RowwisePlan p = plan_rowwise(pricer(), v.op, s, cores);
                    ASSERT_GT(p.block_rows, 0u);
                    const RowwisePlan n = plan_rowwise_naive(pricer(), v.op, s, cores, &p);
                    EXPECT_TRUE(n.naive);
                    EXPECT_EQ(n.sum_on_matrix, p.sum_on_matrix);
                    Case cp = make_case(v.op, s, 21, Fill::UNIFORM);
                    Case cn = make_case(v.op, s, 21, Fill::UNIFORM, scratch_of(cp, n));
                    const Ref ref = reference(cp);
                    run_checked(cp, p, &ref);
                    run_checked(cn, n, &ref);
                    EXPECT_EQ(0, std::memcmp(&cp.mem[cp.out], &cn.mem[cn.out], cp.out_b))
                        << describe(cp, p) << " vs " << describe(cn, n);
                }
            }
}

// Pricing is the real run: the plan's modeled cycles equal those of the run with data.
TEST(OpsRowwise, PricingEqualsTheRealRun) {
    for (const OpVariant& v : {OpVariant{RowwiseOp::SOFTMAX}, OpVariant{RowwiseOp::LAYER_NORM},
                               OpVariant{RowwiseOp::ARGMAX}})
        for (uint32_t cores : {1u, 32u}) {
            const RowwiseShape s = with(v, shape(512, 1024, DType::F16));
            const RowwisePlan p = plan_rowwise(pricer(), v.op, s, cores);
            Case c = make_case(v.op, s, 3);
            const spyre_engine_result r = run_plan(c, p);
            ASSERT_EQ(r.status, 0) << r.message;
            check_output(c, reference(c), describe(c, p));
            EXPECT_EQ(r.total_cycles, p.cycles) << describe(c, p);
            EXPECT_EQ(r.ddr_read_bytes, p.stats.ddr_read_bytes);
            EXPECT_EQ(r.instructions, p.stats.instructions);
        }
}

// The planner picks the fastest of its candidates.
TEST(OpsRowwise, PlannerPicksTheFastestCandidate) {
    const RowwiseShape s = shape(512, 1024, DType::F16);
    for (uint32_t cores : {1u, 32u}) {
        const RowwisePlan p = plan_rowwise(pricer(), RowwiseOp::SOFTMAX, s, cores);
        const auto cands = rowwise_candidates(RowwiseOp::SOFTMAX, s, cores, pricer().lx_budget());
        ASSERT_GT(cands.size(), 4u);
        for (const RowwisePlan& c : cands)
            EXPECT_LE(p.cycles, price_rowwise(pricer(), s, c).cycles) << plan_name(c);
    }
}

// IBM's scratchpad planning gain on softmax (512, 1024) fp16, one core: 32.51 -> 23.67 us
// (-27%). The planned program must gain at least as much over the naive one (same numerics)
// and over the calibration case (programs/softmax_naive.hpp, fp16 statistics).
TEST(OpsRowwise, SoftmaxSingleCoreGainsAtLeast27Percent) {
    const RowwiseShape s = shape(512, 1024, DType::F16);
    const RowwisePlan p = plan_softmax(pricer(), s, 1);
    const RowwisePlan n = plan_rowwise_naive(pricer(), RowwiseOp::SOFTMAX, s, 1, &p);
    EXPECT_EQ(p.cores, 1u);
    EXPECT_EQ(n.kernel_cycles.size(), 4u);
    EXPECT_LE(double(p.cycles), 0.73 * double(n.cycles)) << p.cycles << " vs " << n.cycles;
    const auto cal = programs::build_softmax_naive(512, 1024);
    uint64_t cal_cycles = 0;
    for (const auto& k : cal.kernels)
        cal_cycles += pricer().price(k, 1, {}, cal.s + 512 * 2 + 128).total_cycles;
    EXPECT_LE(double(p.cycles), 0.73 * double(cal_cycles)) << p.cycles << " vs " << cal_cycles;
}

// 32 cores on softmax (512, 1024) fp16 are bound by DDR: within 1.25x of bytes / 204.8 GB/s.
TEST(OpsRowwise, Softmax32CoresNearTheDdrRoofline) {
    const RowwiseShape s = shape(512, 1024, DType::F16);
    const RowwisePlan p = plan_softmax(pricer(), s, 32);
    const uint64_t roof = rowwise_roofline_cycles(pricer().config(), RowwiseOp::SOFTMAX, s);
    EXPECT_EQ(roof, 15360u);  // 2 MiB at 136.5 B/cycle
    EXPECT_LE(double(p.cycles), 1.25 * double(roof)) << plan_name(p);
}

// The modeled figures of Documentation/ops-rowwise.md (printed; the planned program is never
// slower than the naive one).
TEST(OpsRowwiseFigures, Table) {
    struct Row {
        OpVariant v;
        uint64_t R, C;
        DType t;
    };
    const std::vector<Row> rows = {
        {{RowwiseOp::SOFTMAX}, 512, 1024, DType::F16},
        {{RowwiseOp::SOFTMAX, false, false, false, DType::F32, true}, 512, 1024, DType::F16},
        {{RowwiseOp::SOFTMAX}, 512, 1024, DType::BF16},
        {{RowwiseOp::SOFTMAX}, 512, 1024, DType::F32},
        {{RowwiseOp::SOFTMAX, true}, 512, 1024, DType::F16},
        {{RowwiseOp::LAYER_NORM, false, true, true, DType::F32}, 512, 1024, DType::F16},
        {{RowwiseOp::RMS_NORM, false, true, false, DType::COUNT}, 512, 4096, DType::F16},
        {{RowwiseOp::SUM}, 512, 1024, DType::F16},
        {{RowwiseOp::MEAN}, 512, 1024, DType::F16},
        {{RowwiseOp::MAX}, 512, 1024, DType::F16},
        {{RowwiseOp::ARGMAX}, 512, 1024, DType::F16},
        {{RowwiseOp::SOFTMAX}, 4, 300000, DType::F32},
        {{RowwiseOp::SOFTMAX}, 512, 49155, DType::F16},  // Granite logits (vocabulary 49155)
        {{RowwiseOp::SOFTMAX}, 32, 49155, DType::F16},
        {{RowwiseOp::SOFTMAX}, 1, 49155, DType::F16},
    };
    const auto& cfg = pricer().config();
    auto us = [&](uint64_t cyc) { return double(cyc) * 1e6 / double(cfg.clock_hz); };
    std::printf("%-12s %-12s %-5s %5s %10s %10s %7s %10s %6s  plan\n", "op", "shape", "dtype",
                "cores", "planned_us", "naive_us", "gain", "roof_us", "ratio");
    for (const Row& r : rows)
        for (uint32_t cores : {1u, 32u}) {
            const RowwiseShape s = with(r.v, shape(r.R, r.C, r.t));
            const RowwisePlan p = plan_rowwise(pricer(), r.v.op, s, cores);
            double naive_us = 0;
            if (p.block_rows) {
                try {  // the naive programs need a block of whole sticks of rows in LX
                    const RowwisePlan n = plan_rowwise_naive(pricer(), r.v.op, s, cores, &p);
                    naive_us = us(n.cycles);
                    EXPECT_LE(p.cycles, n.cycles) << rowwise_op_name(r.v.op, r.v.log);
                } catch (const std::invalid_argument&) {
                }
            }
            const double roof = us(rowwise_roofline_cycles(cfg, r.v.op, s));
            char shp[32];
            std::snprintf(shp, sizeof shp, "%llux%llu", (unsigned long long)r.R,
                          (unsigned long long)r.C);
            std::printf("%-12s %-12s %-5s %5u %10.2f %10.2f %6.1f%% %10.2f %6.2f  %s\n",
                        r.v.fp32_exp ? "softmax-e32" : rowwise_op_name(r.v.op, r.v.log), shp,
                        tname(r.t), p.cores, us(p.cycles), naive_us,
                        naive_us ? 100 * (1 - us(p.cycles) / naive_us) : 0.0, roof,
                        us(p.cycles) / roof, plan_name(p).c_str());
        }
}

TEST(OpsRowwise, RefusesWhatItDoesNotSupport) {
    EXPECT_THROW(check_rowwise(RowwiseOp::SOFTMAX, shape(1, kRowwiseMaxCols + 1, DType::F16)),
                 std::invalid_argument);
    EXPECT_THROW(check_rowwise(RowwiseOp::SUM, shape(0, 10, DType::F16)), std::invalid_argument);
    EXPECT_THROW(check_rowwise(RowwiseOp::SUM, shape(10, 0, DType::F16)), std::invalid_argument);
    EXPECT_THROW(check_rowwise(RowwiseOp::SUM, shape(10, 10, DType::I8)), std::invalid_argument);
    RowwiseShape s = shape(4, 16, DType::F16);
    s.has_weight = true, s.weight_t = DType::BF16;
    EXPECT_THROW(check_rowwise(RowwiseOp::LAYER_NORM, s), std::invalid_argument);
    s.weight_t = DType::F32, s.has_bias = true;
    EXPECT_THROW(check_rowwise(RowwiseOp::RMS_NORM, s), std::invalid_argument);
    EXPECT_NO_THROW(check_rowwise(RowwiseOp::LAYER_NORM, s));
    EXPECT_THROW(
        plan_rowwise(pricer(), RowwiseOp::MAX, shape(1, kRowwiseMaxCols + 1, DType::F32), 32),
        std::invalid_argument);
    // plans that do not describe the shape
    RowwisePlan bad = *fit_rowwise_block(RowwiseOp::SOFTMAX, shape(64, 64, DType::F16), 4, 8, 2, 0,
                                         false, pricer().lx_budget());
    EXPECT_NO_THROW(build_rowwise(shape(64, 64, DType::F16), bad));
    // rows of 63 fp16 start on a stick every 64 rows: one unit, not 4 cores of blocks of 8
    EXPECT_THROW(build_rowwise(shape(64, 63, DType::F16), bad), std::invalid_argument);
    bad.cores = 0;
    EXPECT_THROW(build_rowwise(shape(64, 64, DType::F16), bad), std::invalid_argument);
    bad.cores = 65;
    EXPECT_THROW(build_rowwise(shape(64, 64, DType::F16), bad), std::invalid_argument);
    // the largest row works
    EXPECT_NO_THROW(
        plan_rowwise(pricer(), RowwiseOp::SUM, shape(1, kRowwiseMaxCols, DType::F32), 32));
}

}  // namespace
}  // namespace spyre::ops
