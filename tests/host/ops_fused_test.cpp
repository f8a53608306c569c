// SPDX-License-Identifier: MIT
// Fused pointwise kernels (ops/fused_program.hpp, spyre_op_fused) without torch: a kernel
// description -> parse -> plan priced on the cycle model -> ONE program -> run on the engine ->
// compared with a host interpreter of the same description (fp32 arithmetic, functions in double
// rounded to fp32, one rounding per store), over odd sizes, all three float types, scalar
// inputs, constants in either operand, several outputs; the untouched bytes after every output;
// parse errors; and the C API on the simulator (one launch, refusals as NOT_SUPPORTED). Row
// kernels (softmax, log_softmax, layer_norm with weight, bias and row outputs, an RMSNorm with
// a per-row input, compares and where) over odd row lengths and row counts in the three types
// against a row interpreter; rows split over cores; compares and where in flat kernels; every
// VUN function (floor..atanh, sin, cos) in the three types; pow and atan2 (parser expansions)
// against std::pow / std::atan2; rany to bool row outputs; a row kernel's 16-bit temporaries
// not overwritten in place; view operands (strided rows of whole sticks) in and out, and the
// views refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ops/fused_program.hpp"
#include "ops/pricing.hpp"
#include "ops_test_util.hpp"
#include "spyre/numerics.hpp"
#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace spyre::ops {
namespace {

using isa::DType;
using namespace test;

const char* tname(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }

// The chain torch.compile's test runs: relu(x * y + 1.5) - exp(x).
std::string chain(DType t) {
    const std::string s = tname(t);
    return "spyre.kernel 1\nin " + s + " full\nin " + s + " full\nout " + s +
           "\n%0 = load 0\n%1 = load 1\n%2 = mul %0 %1\n%3 = const 1.5\n%4 = add %2 %3\n"
           "%5 = relu %4\n%6 = exp %0\n%7 = sub %5 %6\nstore 0 %7\n";
}

float round_to(DType t, float v) {
    uint8_t b[4];
    store_elem(t, v, b);
    return load_elem(t, b);
}

// One op of a description on fp32 operands (not LOAD, CONST, STORE or the reductions).
float apply(const FkInstr& c, float a, float b, float w) {
    const double d = a;
    switch (c.op) {
        case FkOp::NEG:
            return -a;
        case FkOp::ABS:
            return std::fabs(a);
        case FkOp::RELU:
            return a < 0 ? 0.0f : a;
        case FkOp::EXP:
            return static_cast<float>(std::exp(d));
        case FkOp::LOG:
            return static_cast<float>(std::log(d));
        case FkOp::SQRT:
            return std::sqrt(a);
        case FkOp::RSQRT:
            return static_cast<float>(1.0 / std::sqrt(d));
        case FkOp::RECIP:
            return 1.0f / a;
        case FkOp::TANH:
            return static_cast<float>(std::tanh(d));
        case FkOp::SIGMOID:
            return 1.0f / (static_cast<float>(std::exp(-d)) + 1.0f);
        case FkOp::SILU:
            return static_cast<float>(d / (1.0 + std::exp(-d)));
        case FkOp::SIN:
            return static_cast<float>(std::sin(d));
        case FkOp::COS:
            return static_cast<float>(std::cos(d));
        case FkOp::FLOOR:
            return std::floor(a);
        case FkOp::CEIL:
            return std::ceil(a);
        case FkOp::TRUNC:
            return std::trunc(a);
        case FkOp::ROUND:
            return std::nearbyint(a);  // half to even
        case FkOp::SIGN:
            return static_cast<float>((a > 0.0f) - (a < 0.0f));
        case FkOp::ERF:
            return static_cast<float>(std::erf(d));
        case FkOp::ERFC:
            return static_cast<float>(std::erfc(d));
        case FkOp::LOG1P:
            return static_cast<float>(std::log1p(d));
        case FkOp::EXPM1:
            return static_cast<float>(std::expm1(d));
        case FkOp::EXP2:
            return static_cast<float>(std::exp2(d));
        case FkOp::LOG2:
            return static_cast<float>(std::log2(d));
        case FkOp::LOG10:
            return static_cast<float>(std::log10(d));
        case FkOp::TAN:
            return static_cast<float>(std::tan(d));
        case FkOp::ASIN:
            return static_cast<float>(std::asin(d));
        case FkOp::ACOS:
            return static_cast<float>(std::acos(d));
        case FkOp::ATAN:
            return static_cast<float>(std::atan(d));
        case FkOp::SINH:
            return static_cast<float>(std::sinh(d));
        case FkOp::COSH:
            return static_cast<float>(std::cosh(d));
        case FkOp::ASINH:
            return static_cast<float>(std::asinh(d));
        case FkOp::ACOSH:
            return static_cast<float>(std::acosh(d));
        case FkOp::ATANH:
            return static_cast<float>(std::atanh(d));
        case FkOp::CAST:
            return round_to(c.t, a);
        case FkOp::ADD:
            return a + b;
        case FkOp::SUB:
            return a - b;
        case FkOp::MUL:
            return a * b;
        case FkOp::DIV:
            return a / b;
        case FkOp::MAX:
            return (a > b || a != a) ? a : b;
        case FkOp::MIN:
            return (a < b || a != a) ? a : b;
        case FkOp::EQ:
            return a == b ? 1.0f : 0.0f;
        case FkOp::NE:
            return a != b ? 1.0f : 0.0f;
        case FkOp::LT:
            return a < b ? 1.0f : 0.0f;
        case FkOp::LE:
            return a <= b ? 1.0f : 0.0f;
        case FkOp::GT:
            return a > b ? 1.0f : 0.0f;
        case FkOp::GE:
            return a >= b ? 1.0f : 0.0f;
        case FkOp::WHERE:
            return a != 0.0f ? b : w;  // NaN masks are true
        case FkOp::FMA:
            return std::fma(a, b, w);
        default:
            ADD_FAILURE() << "op not in the reference";
            return 0.0f;
    }
}

// The element of a viewed operand at position i (dense operands: i).
uint64_t view_at(const FkView& v, uint64_t i) {
    if (v.empty()) return i;
    uint64_t at = v.offset;
    for (size_t d = v.sizes.size(); d-- > 0;)
        at += (i % v.sizes[d]) * v.strides[d], i /= v.sizes[d];
    return at;
}

const FkView& view_of_output(const FusedKernel& k, size_t o) {
    static const FkView dense;
    return o < k.out_views.size() ? k.out_views[o] : dense;
}

// Host interpreter of a description at position i.
std::vector<float> reference(const FusedKernel& k, const std::vector<std::vector<uint8_t>>& in,
                             uint64_t i) {
    std::vector<float> v(k.code.size()), out(k.outputs.size());
    for (size_t j = 0; j < k.code.size(); ++j) {
        const FkInstr& c = k.code[j];
        const float a = c.a >= 0 ? v[c.a] : 0.0f, b = c.b >= 0 ? v[c.b] : 0.0f;
        const float w = c.c >= 0 ? v[c.c] : 0.0f;
        if (c.op == FkOp::LOAD) {
            const FkInput& x = k.inputs[c.arg];
            v[j] = load_elem(
                x.t, &in[c.arg][(x.scalar ? 0 : view_at(x.view, i)) * isa::dtype_size(x.t)]);
        } else if (c.op == FkOp::CONST) {
            v[j] = c.imm;
        } else if (c.op == FkOp::STORE) {
            out[c.arg] = round_to(k.outputs[c.arg], v[c.a]);
        } else {
            v[j] = apply(c, a, b, w);
        }
    }
    return out;
}

// Host interpreter of a row kernel over row r: every value as a row of cols fp32 numbers
// (per-row values repeated); reductions in double rounded once (as VRED), NaN-propagating
// max/min. Returns each output's row (row outputs: one element).
std::vector<std::vector<float>> reference_row(const FusedKernel& k,
                                              const std::vector<std::vector<uint8_t>>& in,
                                              uint64_t r) {
    const uint64_t C = k.cols;
    std::vector<std::vector<float>> v(k.code.size()), out(k.outputs.size());
    for (size_t j = 0; j < k.code.size(); ++j) {
        const FkInstr& c = k.code[j];
        std::vector<float>& o = v[j];
        o.assign(C, 0.0f);
        if (c.op == FkOp::LOAD) {
            const FkInput& x = k.inputs[c.arg];
            const uint64_t es = isa::dtype_size(x.t);
            for (uint64_t q = 0; q < C; ++q) {
                const uint64_t at = x.kind == FkKind::FULL  ? view_at(x.view, r * C + q)
                                    : x.kind == FkKind::ROW ? r
                                    : x.kind == FkKind::COL ? q
                                                            : 0;
                o[q] = load_elem(x.t, &in[c.arg][at * es]);
            }
        } else if (c.op == FkOp::CONST) {
            o.assign(C, c.imm);
        } else if (c.op == FkOp::STORE) {
            const bool row = k.out_kinds[c.arg] == FkKind::ROW;
            for (uint64_t q = 0; q < (row ? 1 : C); ++q)
                out[c.arg].push_back(round_to(k.outputs[c.arg], v[c.a][q]));
        } else if (c.op == FkOp::RSUM) {
            double s = 0;
            for (float x : v[c.a]) s += x;
            o.assign(C, static_cast<float>(s));
        } else if (c.op == FkOp::RMAX || c.op == FkOp::RMIN) {
            float m = v[c.a][0];
            for (float x : v[c.a]) {
                if (m != m) break;
                if (x != x || (c.op == FkOp::RMAX ? x > m : x < m)) m = x;
            }
            o.assign(C, m);
        } else {
            for (uint64_t q = 0; q < C; ++q)
                o[q] = apply(c, c.a >= 0 ? v[c.a][q] : 0.0f, c.b >= 0 ? v[c.b][q] : 0.0f,
                             c.c >= 0 ? v[c.c][q] : 0.0f);
        }
    }
    return out;
}

double tol(DType t) { return t == DType::F32 ? 2e-6 : t == DType::F16 ? 1e-3 : 8e-3; }

// Runs `image` on the plan's cores over a memory of `size` bytes (0xA5 where nothing is put)
// holding the inputs at their addresses (the first args); the run must succeed and take exactly
// the priced cycles. Returns the memory after the run.
std::vector<uint8_t> run_priced(const std::vector<uint8_t>& image, const FusedPlan& p,
                                const std::vector<uint64_t>& args,
                                const std::vector<std::vector<uint8_t>>& in, uint64_t size) {
    std::vector<uint8_t> mem(size, 0xA5);
    for (size_t j = 0; j < in.size(); ++j) std::memcpy(&mem[args[j]], in[j].data(), in[j].size());
    const RunResult r = run_image(image, p.cores, args, mem);
    EXPECT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.total_cycles, p.cycles) << "the priced run is the real run";
    return mem;
}

// Plans, builds and runs `text` over n elements on the engine and checks every output element
// against the interpreter, and that the bytes after each output stay untouched.
FusedPlan run_and_check(const std::string& text, uint64_t n, uint32_t max_cores = 32) {
    const FusedKernel k = parse_fused(text);
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, max_cores);
    const auto image = build_fused(k, n, p);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<uint8_t>> in;
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (const FkInput& x : k.inputs) {
        const uint64_t m = x.scalar ? 1 : x.view.empty() ? n : x.view.extent();
        const uint64_t es = isa::dtype_size(x.t);
        in.emplace_back(m * es);
        for (uint64_t i = 0; i < m; ++i) store_elem(x.t, dist(rng), &in.back()[i * es]);
        args.push_back(at + (x.scalar ? 6 * es : 0));  // scalars at any element-aligned address
        at += up128(m * es + 8 * es + 128);
    }
    std::vector<uint64_t> out_at, out_elems;
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        const FkView& v = view_of_output(k, o);
        out_elems.push_back(v.empty() ? n : v.extent());
        out_at.push_back(at), args.push_back(at);
        at += up128(out_elems.back() * isa::dtype_size(k.outputs[o]) + 256);
    }
    const std::vector<uint8_t> mem = run_priced(image, p, args, in, at);
    int bad = 0;
    std::vector<std::vector<bool>> written(k.outputs.size());
    for (size_t o = 0; o < k.outputs.size(); ++o) written[o].assign(out_elems[o], false);
    for (uint64_t i = 0; i < n && bad < 5; ++i) {
        const auto want = reference(k, in, i);
        for (size_t o = 0; o < k.outputs.size(); ++o) {
            const DType t = k.outputs[o];
            const uint64_t e = view_at(view_of_output(k, o), i);
            written[o][e] = true;
            const float got = load_elem(t, &mem[out_at[o] + e * isa::dtype_size(t)]);
            const bool ok = (std::isnan(got) && std::isnan(want[o])) ||
                            std::fabs(got - want[o]) <= tol(t) * (1.0 + std::fabs(want[o]));
            if (!ok)
                ADD_FAILURE() << "output " << o << " [" << i << "] = " << got << ", want "
                              << want[o],
                    ++bad;
        }
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        const uint64_t es = isa::dtype_size(k.outputs[o]);
        const uint64_t end = out_at[o] + out_elems[o] * es;
        for (uint64_t b = end; b < up128(end); ++b) EXPECT_EQ(mem[b], 0xA5) << "past output " << o;
        // a view's gaps (elements no position maps to) are untouched too
        uint64_t touched = 0;
        for (uint64_t e = 0; e < out_elems[o] && bad < 5; ++e)
            if (!written[o][e] && mem[out_at[o] + e * es] != 0xA5)
                ADD_FAILURE() << "output " << o << " element " << e << " is in no position",
                    ++touched, ++bad;
        EXPECT_EQ(touched, 0u);
    }
    return p;
}

class FusedSizes : public ::testing::TestWithParam<std::tuple<DType, uint64_t>> {};

TEST_P(FusedSizes, ChainMatchesTheInterpreter) {
    const auto [t, n] = GetParam();
    const FusedPlan p = run_and_check(chain(t), n);
    EXPECT_GE(p.cores, 1u);
    EXPECT_EQ(p.passes, 5u) << "mul, add, relu, exp, sub: the last writes the output chunk";
}

INSTANTIATE_TEST_SUITE_P(Types, FusedSizes,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Values(1, 7, 65, 1000, 4097, 100003)));

// Plans, builds and runs the row kernel `text` over `rows` rows on the engine and checks every
// output element against reference_row, and that the bytes after each output stay untouched.
// A given long-row plan (cores, groups, col_chunk) is priced and run instead of the planner's.
FusedPlan run_rows_and_check(const std::string& text, uint64_t rows, uint32_t max_cores = 32,
                             const FusedPlan* given = nullptr) {
    const FusedKernel k = parse_fused(text);
    const uint64_t C = k.cols, n = rows * C;
    const Pricer pricer(default_engine_config());
    const FusedPlan p =
        given ? price_fused(pricer, k, n, *given) : plan_fused(pricer, k, n, max_cores);
    const auto image = build_fused(k, n, p);
    std::mt19937 rng(static_cast<uint32_t>(n + C));
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<uint8_t>> in;
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (const FkInput& x : k.inputs) {
        const uint64_t m = !x.view.empty()          ? x.view.extent()
                           : x.kind == FkKind::FULL ? n
                           : x.kind == FkKind::ROW  ? rows
                           : x.kind == FkKind::COL  ? C
                                                    : 1;
        const uint64_t es = isa::dtype_size(x.t);
        in.emplace_back(m * es);
        for (uint64_t i = 0; i < m; ++i) store_elem(x.t, dist(rng), &in.back()[i * es]);
        args.push_back(at + (x.scalar ? 6 * es : 0));
        at += up128(m * es + 8 * es + 128);
    }
    std::vector<uint64_t> out_at, out_n;
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        const FkView& v = view_of_output(k, o);
        out_n.push_back(!v.empty() ? v.extent() : k.out_kinds[o] == FkKind::ROW ? rows : n);
        out_at.push_back(at), args.push_back(at);
        at += up128(out_n.back() * isa::dtype_size(k.outputs[o]) + 256);
    }
    const std::vector<uint8_t> mem = run_priced(image, p, args, in, at);
    int bad = 0;
    for (uint64_t row = 0; row < rows && bad < 5; ++row) {
        const auto want = reference_row(k, in, row);
        for (size_t o = 0; o < k.outputs.size(); ++o) {
            const DType t = k.outputs[o];
            const uint64_t es = isa::dtype_size(t);
            for (uint64_t q = 0; q < want[o].size() && bad < 5; ++q) {
                const uint64_t i = want[o].size() == 1 && k.out_kinds[o] == FkKind::ROW
                                       ? row
                                       : view_at(view_of_output(k, o), row * C + q);
                const float got = load_elem(t, &mem[out_at[o] + i * es]);
                const float w = want[o][q];
                const bool ok = got == w || (std::isnan(got) && std::isnan(w)) ||
                                std::fabs(got - w) <= tol(t) * (1.0 + std::fabs(w));
                if (!ok)
                    ADD_FAILURE() << "output " << o << " row " << row << " [" << q << "] = " << got
                                  << ", want " << w,
                        ++bad;
            }
        }
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        const uint64_t end = out_at[o] + out_n[o] * isa::dtype_size(k.outputs[o]);
        for (uint64_t b = end; b < up128(end); ++b) EXPECT_EQ(mem[b], 0xA5) << "past output " << o;
    }
    return p;
}

// What Inductor makes of softmax, log_softmax, layer_norm (weight, bias; mean and rstd as row
// outputs) and RMSNorm (a [rows, 1] scale and a masked fill): loads of a row, reductions, then
// pointwise use of the reduced values.
std::string softmax(DType t, uint64_t C) {
    const std::string s = tname(t);
    return "spyre.kernel 1\nrows " + std::to_string(C) + "\nin " + s + " full\nout " + s +
           "\n%0 = load 0\n%1 = cast %0 f32\n%2 = rmax %1\n%3 = sub %1 %2\n%4 = exp %3\n"
           "%5 = rsum %4\n%6 = div %4 %5\nstore 0 %6\n";
}
std::string log_softmax(DType t, uint64_t C) {
    const std::string s = tname(t);
    return "spyre.kernel 1\nrows " + std::to_string(C) + "\nin " + s + " full\nout " + s +
           "\n%0 = load 0\n%1 = rmax %0\n%2 = sub %0 %1\n%3 = exp %2\n%4 = rsum %3\n"
           "%5 = log %4\n%6 = sub %2 %5\nstore 0 %6\n";
}
std::string layer_norm(DType t, uint64_t C) {
    const std::string s = tname(t);
    return "spyre.kernel 1\nrows " + std::to_string(C) + "\nin " + s + " full\nin " + s +
           " col\nin " + s + " col\nout " + s +
           "\nout f32 row\nout f32 row\n"
           "%0 = load 0\n%1 = rsum %0\n%2 = const " +
           std::to_string(C) +
           "\n%3 = div %1 %2\n%4 = sub %0 %3\n%5 = mul %4 %4\n%6 = rsum %5\n%7 = div %6 %2\n"
           "%8 = const 1e-05\n%9 = add %7 %8\n%10 = rsqrt %9\n%11 = mul %4 %10\n"
           "%12 = load 1\n%13 = mul %11 %12\n%14 = load 2\n%15 = add %13 %14\nstore 0 %15\n"
           "store 1 %3\nstore 2 %10\n";
}
std::string rms_norm_masked(DType t, uint64_t C) {
    const std::string s = tname(t);
    return "spyre.kernel 1\nrows " + std::to_string(C) + "\nin " + s + " full\nin f32 row\nin " +
           s + " col\nout " + s + "\nout " + s +
           " row\n"
           "%0 = load 0\n%1 = mul %0 %0\n%2 = rsum %1\n%3 = const " +
           std::to_string(C) +
           "\n%4 = div %2 %3\n%5 = const 1e-06\n%6 = add %4 %5\n%7 = rsqrt %6\n"
           "%8 = mul %0 %7\n%9 = load 2\n%10 = mul %8 %9\n%11 = load 1\n%12 = lt %0 %11\n"
           "%13 = const -inf\n%14 = where %12 %13 %10\n%15 = gt %11 %0\n%16 = ge %0 %9\n"
           "%17 = mul %15 %16\n%18 = rmin %14\n%19 = where %17 %18 %14\nstore 0 %19\n"
           "%20 = max %18 %11\nstore 1 %20\n";
}

class FusedRows : public ::testing::TestWithParam<std::tuple<DType, uint64_t>> {};

TEST_P(FusedRows, SoftmaxLayerNormRmsNormMatchTheInterpreter) {
    const auto [t, C] = GetParam();
    for (uint64_t rows : {uint64_t{1}, uint64_t{3}, uint64_t{70}}) {
        SCOPED_TRACE("rows " + std::to_string(rows));
        const FusedPlan p = run_rows_and_check(softmax(t, C), rows);
        EXPECT_EQ(p.passes, 5u) << "rmax, sub, exp, rsum, div into the output";
        run_rows_and_check(log_softmax(t, C), rows);
        run_rows_and_check(layer_norm(t, C), rows);
        run_rows_and_check(rms_norm_masked(t, C), rows);
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FusedRows,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Values(1, 7, 37, 1000)));

// Row kernels over view inputs: softmax over dim 0 of a [C, P] matrix (a transposed block of
// P rows of C), the same under a batch dim (softmax over a middle dim), and rows of a permuted
// input (whole rows of the kernel per view row), in the three types on 1 and 32 cores.
TEST(FusedRows, ViewInputsMatchTheInterpreter) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        auto over = [&](uint64_t C, const std::string& view) {
            std::string text = softmax(t, C);
            const std::string full = "in " + s + " full";
            text.replace(text.find(full), full.size(), "in " + s + " " + view);
            return text;
        };
        const uint64_t L = 128 / isa::dtype_size(t);
        for (uint32_t cores : {1u, 32u}) {
            run_rows_and_check(over(8, "view 0 256:1 8:256"), 256, cores);
            run_rows_and_check(over(37, "view 0 4:2048 32:1 37:32"), 4 * 32, cores);
            run_rows_and_check(over(L, "view 0 6:" + std::to_string(5 * L) + " 5:" +
                                           std::to_string(6 * L) + " " + std::to_string(L) + ":1"),
                               30, cores);
            // rows of several view rows: a channel's N runs of HW in NCHW (BatchNorm's sums
            // over N and HW), [N=4, C=8, HW=2L] and [N=3, C=5, HW=L]
            run_rows_and_check(
                over(8 * L, "view 0 8:" + std::to_string(2 * L) + " 4:" + std::to_string(16 * L) +
                                " " + std::to_string(2 * L) + ":1"),
                8, cores);
            const std::string nchw = "view 0 5:" + std::to_string(L) +
                                     " 3:" + std::to_string(5 * L) + " " + std::to_string(L) + ":1";
            run_rows_and_check(over(3 * L, nchw), 5, cores);
            // and the output stored through the same view (an NCHW result of per-channel rows)
            std::string both = over(3 * L, nchw);
            const std::string out = "out " + s + "\n";
            both.replace(both.find(out), out.size(), "out " + s + " " + nchw + "\n");
            run_rows_and_check(both, 5, cores);
        }
    }
}

TEST(FusedRows, RowsSplitOverCoresAndLongRows) {
    // 32 cores on many short rows; one core agrees
    const FusedPlan many = run_rows_and_check(softmax(DType::F16, 64), 4096);
    const FusedPlan one = run_rows_and_check(softmax(DType::F16, 64), 4096, 1);
    EXPECT_GT(many.cores, 1u);
    EXPECT_EQ(one.cores, 1u);
    EXPECT_LT(many.cycles, one.cycles);
    // rows of 4096 (one row per unit) and a long row (20000 fp16) fit a core; rows of 10^6 do
    // not (the API refuses them)
    run_rows_and_check(softmax(DType::F16, 4096), 40);
    run_rows_and_check(log_softmax(DType::F32, 4096), 9);
    run_rows_and_check(softmax(DType::F16, 20000), 5);
    const FusedKernel huge = parse_fused(softmax(DType::F32, 1000000));
    const Pricer pricer(default_engine_config());
    EXPECT_GT(fused_lx_bytes(huge, fused_unit(huge)), pricer.lx_budget());
    // a 32-row unit (an f32 row output) of rows too long for it, but only 4 rows: one chunk
    const std::string partial =
        "spyre.kernel 1\nrows 8000\nin f32 full\nout f32 row\n%0 = load 0\n%1 = rmax %0\n"
        "store 0 %1\n";
    const FusedKernel pk = parse_fused(partial);
    EXPECT_EQ(fused_unit(pk), 32u);
    EXPECT_GT(fused_lx_bytes(pk, fused_unit(pk)), pricer.lx_budget());
    EXPECT_EQ(fused_unit(pk, 4 * 8000), 4u);
    run_rows_and_check(partial, 4);
    run_rows_and_check(rms_norm_masked(DType::F16, 1999), 5);
}

// Rows longer than a core's scratchpad (or few long rows on many cores): every core streams
// its share of each row's columns, a pass over the row per level of reductions, the partial
// reductions combined by ALLRED.
TEST(FusedRows, LongRowsMatchTheInterpreter) {
    const Pricer pricer(default_engine_config());
    struct Case {
        std::string text;
        uint64_t rows;
        bool must_be_long;
    };
    const std::vector<Case> cases = {
        {softmax(DType::F32, 100000), 2, true},         {log_softmax(DType::F16, 131072), 2, true},
        {layer_norm(DType::BF16, 160000), 2, true},      // column inputs, row outputs
        {rms_norm_masked(DType::F32, 100001), 1, true},  // a row input; one odd row
        {softmax(DType::F16, 32000), 1, false},          // fits: the planner's choice
        {layer_norm(DType::F32, 16384), 3, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE(c.text.substr(0, 40));
        const FusedKernel k = parse_fused(c.text);
        const uint64_t n = c.rows * k.cols;
        EXPECT_TRUE(fused_long_rows_ok(k, n, pricer.lx_budget()));
        const FusedPlan p = run_rows_and_check(c.text, c.rows);
        if (c.must_be_long) {
            EXPECT_GT(p.col_chunk, 0u) << fused_plan_name(p);
            EXPECT_GT(p.cores, 1u) << fused_plan_name(p);
        }
        EXPECT_LE(p.lx_bytes, pricer.lx_budget()) << fused_plan_name(p);
    }
    // rows dealt to groups of cores (2 x 4, 4 x 2, 3 x 1 cores; 5 rows: groups with fewer rows),
    // row outputs gathered from the groups
    for (const auto& [g, c] : {std::pair{2u, 4u}, {4u, 2u}, {3u, 1u}}) {
        SCOPED_TRACE("groups " + std::to_string(g));
        FusedPlan given;
        given.cores = g * c, given.groups = g, given.col_chunk = 2048;
        run_rows_and_check(layer_norm(DType::F16, 8192), 5, 32, &given);
        run_rows_and_check(rms_norm_masked(DType::F32, 8192), 5, 32, &given);
    }
    // BatchNorm's per-channel rows of N runs of HW, too long for a core (5 channels, N = 4,
    // HW = 32768 fp32; the output through the same view; N = 3, HW = 65536 fp16), and given
    // plans of groups (a view chunk takes the group registers: they are set again after it)
    for (DType t : {DType::F32, DType::F16}) {
        const uint64_t N = t == DType::F32 ? 4 : 3, HW = t == DType::F32 ? 32768 : 65536;
        const std::string s = tname(t), nchw = "view 0 5:" + std::to_string(HW) + " " +
                                               std::to_string(N) + ":" + std::to_string(5 * HW) +
                                               " " + std::to_string(HW) + ":1";
        std::string text = layer_norm(t, N * HW);
        const std::string full = "in " + s + " full", out = "out " + s + "\n";
        text.replace(text.find(full), full.size(), "in " + s + " " + nchw);
        text.replace(text.find(out), out.size(), "out " + s + " " + nchw + "\n");
        SCOPED_TRACE(text.substr(0, 120));
        EXPECT_TRUE(fused_long_rows_ok(parse_fused(text), 5 * N * HW, pricer.lx_budget()));
        const FusedPlan p = run_rows_and_check(text, 5);
        EXPECT_GT(p.col_chunk, 0u) << fused_plan_name(p);
        for (const auto& [g, c] : {std::pair{2u, 4u}, {1u, 8u}}) {
            FusedPlan given;
            given.cores = g * c, given.groups = g, given.col_chunk = 4096;
            run_rows_and_check(text, 5, 32, &given);
        }
    }
    // a view row longer than the kernel's row is not streamed
    EXPECT_FALSE(fused_long_rows_ok(
        parse_fused("spyre.kernel 1\nrows 16384\nin f32 view 0 4:32768 2:131072 32768:1\n"
                    "out f32\n%0 = load 0\nstore 0 %0\n"),
        8 * 32768, pricer.lx_budget()));
    // one row of 32,000 fp16 logits: long rows on many cores beat the one core of the row path
    const FusedPlan one = plan_fused(pricer, parse_fused(softmax(DType::F16, 32000)), 32000, 32);
    EXPECT_GT(one.col_chunk, 0u) << fused_plan_name(one);
    // odd rows that do not start on a stick cannot be streamed (but one such row can)
    EXPECT_FALSE(fused_long_rows_ok(parse_fused(softmax(DType::F16, 100001)), 2 * 100001,
                                    pricer.lx_budget()));
    EXPECT_THROW(plan_fused(pricer, parse_fused(softmax(DType::F16, 300001)), 2 * 300001, 32),
                 std::invalid_argument);
}

// argmax / argmin of each row as int64 (rargmax expands to rmax, a mask of the max or NaN,
// iota, where and rmin): ties give the first column, a NaN wins, in rows that fit and in long
// rows (the column index offset by the chunk's first column).
TEST(FusedRows, ArgMaxArgMin) {
    const Pricer pricer(default_engine_config());
    for (const uint64_t C : {uint64_t{37}, uint64_t{1000}, uint64_t{32000}, uint64_t{131072}}) {
        for (const uint64_t rows : {uint64_t{1}, uint64_t{3}, uint64_t{8}}) {
            if (rows == 8 && C != 32000) continue;
            SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(C));
            const std::string text = "spyre.kernel 1\nrows " + std::to_string(C) +
                                     "\nin f16 full\nout i64 row\nout i64 row\n%0 = load 0\n"
                                     "%1 = rargmax %0\n%2 = rargmin %0\nstore 0 %1\nstore 1 %2\n";
            const FusedKernel k = parse_fused(text);
            const uint64_t n = rows * C;
            const FusedPlan p = plan_fused(pricer, k, n, 32);
            if (C == 131072) {
                EXPECT_GT(p.col_chunk, 0u) << fused_plan_name(p);
            }
            // 8 long rows: groups of cores take rows of their own, the int64 indices gathered
            // through fp32 (exact below 2^24)
            if (rows == 8) {
                EXPECT_GT(p.groups, 1u) << fused_plan_name(p);
            }
            std::vector<std::vector<uint8_t>> in(1, std::vector<uint8_t>(n * 2));
            std::vector<float> x(n);
            for (uint64_t i = 0; i < n; ++i) x[i] = float(int((i * 7919) % 2001) - 1000) / 8;
            // ties: the max and the min twice in row 0; a NaN in row 2 (it wins both)
            x[C / 3] = 500, x[C - 1] = 500, x[C / 5] = -500, x[C / 2] = -500;
            if (rows >= 3) x[2 * C + C / 4] = std::numeric_limits<float>::quiet_NaN();
            for (uint64_t i = 0; i < n; ++i) store_elem(DType::F16, x[i], &in[0][i * 2]);
            const uint64_t o0 = up128(n * 2 + 128), o1 = o0 + up128(rows * 8 + 128);
            const std::vector<uint64_t> args = {0, o0, o1};
            const auto mem = run_priced(build_fused(k, n, p), p, args, in, o1 + up128(rows * 8));
            for (uint64_t r = 0; r < rows; ++r) {
                int64_t amax = 0, amin = 0;
                for (uint64_t c = 0; c < C; ++c) {  // torch: the first extreme, NaN first
                    const float v = num::f16_to_f32(num::f32_to_f16(x[r * C + c]));
                    const float bm = num::f16_to_f32(num::f32_to_f16(x[r * C + amax]));
                    const float bn = num::f16_to_f32(num::f32_to_f16(x[r * C + amin]));
                    if (!std::isnan(bm) && (std::isnan(v) || v > bm)) amax = int64_t(c);
                    if (!std::isnan(bn) && (std::isnan(v) || v < bn)) amin = int64_t(c);
                }
                int64_t got_max, got_min;
                std::memcpy(&got_max, &mem[o0 + r * 8], 8);
                std::memcpy(&got_min, &mem[o1 + r * 8], 8);
                EXPECT_EQ(got_max, amax) << "row " << r;
                EXPECT_EQ(got_min, amin) << "row " << r;
            }
        }
    }
    // a row kernel's i64 output must be a row output; a row kernel's iota (fp32) needs rows of
    // at most 2^24 (a flat kernel's is the position as I32: FusedInt.FlatIotaIsThePosition)
    EXPECT_THROW(parse_fused("spyre.kernel 1\nrows 8\nin f32 full\nout i64\n%0 = load 0\n"
                             "store 0 %0\n"),
                 std::invalid_argument);
    EXPECT_THROW(parse_fused("spyre.kernel 1\nrows 33554432\nin f32 full\nout f32\n%0 = iota\n"
                             "store 0 %0\n"),
                 std::invalid_argument);
}

// any of each row as a bool (0/1 bytes): rany expands to rmax of (x != 0), NaN counting as
// nonzero; a mask made in the kernel and a raw value, in rows that fit and in long rows.
TEST(FusedRows, AnyToBoolRowOutputs) {
    const Pricer pricer(default_engine_config());
    for (const uint64_t C : {uint64_t{37}, uint64_t{1000}, uint64_t{131072}}) {
        const uint64_t rows = 5, n = rows * C;
        SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(C));
        const std::string text = "spyre.kernel 1\nrows " + std::to_string(C) +
                                 "\nin f16 full\nout bool row\nout bool row\n%0 = load 0\n"
                                 "%1 = const 2\n%2 = gt %0 %1\n%3 = rany %2\n%4 = rany %0\n"
                                 "store 0 %3\nstore 1 %4\n";
        const FusedKernel k = parse_fused(text);
        EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
        const FusedPlan p = plan_fused(pricer, k, n, 32);
        if (C == 131072) EXPECT_GT(p.col_chunk, 0u) << fused_plan_name(p);
        // row 0: one value above 2 at the end; row 1: zeros; row 2: zeros and a NaN; row 3: all
        // below 2 but nonzero; row 4: zeros and one 3 in the middle
        std::vector<float> x(n, 0.0f);
        for (uint64_t c = 0; c < C; ++c) x[c] = x[3 * C + c] = -1.5f + float(c % 7) / 4;
        x[C - 1] = 2.5f;
        x[2 * C + C / 3] = std::numeric_limits<float>::quiet_NaN();
        x[4 * C + C / 2] = 3.0f;
        std::vector<std::vector<uint8_t>> in(1, std::vector<uint8_t>(n * 2));
        for (uint64_t i = 0; i < n; ++i) store_elem(DType::F16, x[i], &in[0][i * 2]);
        const uint64_t o0 = up128(n * 2 + 128), o1 = o0 + up128(rows + 128);
        const auto mem = run_priced(build_fused(k, n, p), p, {0, o0, o1}, in, o1 + up128(rows));
        const uint8_t above[] = {1, 0, 0, 0, 1}, nonzero[] = {1, 0, 1, 1, 1};
        for (uint64_t r = 0; r < rows; ++r) {
            EXPECT_EQ(mem[o0 + r], above[r]) << "row " << r;
            EXPECT_EQ(mem[o1 + r], nonzero[r]) << "row " << r;
        }
        EXPECT_EQ(mem[o0 + rows], 0xA5) << "past the row output";
    }
    // bool outputs are row outputs; rany needs a row kernel
    EXPECT_THROW(parse_fused("spyre.kernel 1\nrows 8\nin f32 full\nout bool\n%0 = load 0\n"
                             "store 0 %0\n"),
                 std::invalid_argument);
    EXPECT_THROW(parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n"
                             "%1 = rany %0\nstore 0 %1\n"),
                 std::invalid_argument);
}

TEST(FusedRows, ParseErrors) {
    for (const char* bad :
         {// row/col operands and row outputs only in row kernels; reductions too
          "spyre.kernel 1\nin f32 row\nout f32\n%0 = load 0\nstore 0 %0\n",
          "spyre.kernel 1\nin f32 full\nout f32 row\n%0 = load 0\nstore 0 %0\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = rsum %0\nstore 0 %1\n",
          // a reduction of a broadcast value; a full value into a row output
          "spyre.kernel 1\nrows 8\nin f32 row\nout f32 row\n%0 = load 0\n%1 = rsum %0\n"
          "store 0 %1\n",
          "spyre.kernel 1\nrows 8\nin f32 full\nout f32 row\n%0 = load 0\nstore 0 %0\n",
          "spyre.kernel 1\nrows 0\nin f32 full\nout f32\n%0 = load 0\nstore 0 %0\n",
          "spyre.kernel 1\nrows 8\nin f32 full\nout f32\n%0 = load 0\n%1 = where %0 %0\n"
          "store 0 %1\n"}) {
        EXPECT_THROW(parse_fused(bad), std::invalid_argument) << bad;
    }
    const FusedKernel k = parse_fused(rms_norm_masked(DType::BF16, 37));
    EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
}

TEST(Fused, ComparesAndWhereInFlatKernels) {
    run_and_check(
        "spyre.kernel 1\nin f16 full\nin f32 full\nin f32 scalar\nout f16\nout f32\n"
        "%0 = load 0\n%1 = load 1\n%2 = load 2\n%3 = lt %0 %1\n%4 = where %3 %0 %1\n"
        "%5 = ge %2 %0\n%6 = const 0.5\n%7 = where %5 %6 %4\n%8 = eq %0 %0\n%9 = ne %1 %2\n"
        "%10 = add %8 %9\n%11 = le %6 %1\n%12 = gt %1 %6\n%13 = sub %11 %12\n"
        "%14 = where %13 %2 %10\nstore 0 %7\nstore 1 %14\n",
        1001);
}

// fma (Inductor's fused multiply-add: its lerp and layer_norm decompositions) is one VFMA, one
// rounding: operands full, scalar and constant in every place, against std::fma in the
// interpreter; and exactly: (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 fused, 0 as a mul then an add.
TEST(Fused, FmaRoundsOnce) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        run_and_check(
            "spyre.kernel 1\nin " + s + " full\nin " + s + " full\nin f32 scalar\nout " + s +
                "\nout f32\n%0 = load 0\n%1 = load 1\n%2 = load 2\n%3 = fma %0 %1 %2\n"
                "%4 = const 0.75\n%5 = fma %2 %0 %4\n%6 = fma %4 %2 %1\n%7 = fma %4 %4 %0\n"
                "%8 = add %3 %5\n%9 = add %8 %6\n%10 = add %9 %7\nstore 0 %10\nstore 1 %3\n",
            1001);
    }
    const FusedKernel k = parse_fused(
        "spyre.kernel 1\nin f32 full\nin f32 scalar\nout f32\nout f32\n%0 = load 0\n"
        "%1 = load 1\n%2 = fma %0 %0 %1\n%3 = mul %0 %0\n%4 = add %3 %1\nstore 0 %2\n"
        "store 1 %4\n");
    constexpr uint64_t n = 300;
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, 32);
    std::vector<std::vector<uint8_t>> in(2);
    in[0].resize(n * 4), in[1].resize(4);
    for (uint64_t i = 0; i < n; ++i) store_elem(DType::F32, 1.0f + 0x1p-12f, &in[0][i * 4]);
    store_elem(DType::F32, -(1.0f + 0x1p-11f), in[1].data());
    const uint64_t x_at = 0, s_at = up128(n * 4), o0 = s_at + 128, o1 = o0 + up128(n * 4);
    const auto mem =
        run_priced(build_fused(k, n, p), p, {x_at, s_at, o0, o1}, in, o1 + up128(n * 4));
    for (uint64_t i = 0; i < n; ++i) {
        ASSERT_EQ(load_elem(DType::F32, &mem[o0 + i * 4]), 0x1p-24f) << i;
        ASSERT_EQ(load_elem(DType::F32, &mem[o1 + i * 4]), 0.0f) << i;
    }
    EXPECT_THROW(parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n"
                             "%1 = fma %0 %0\nstore 0 %1\n"),
                 std::invalid_argument);
}

// ---- integer values in flat kernels (exact, VINT) ----

// A value of the integer interpreter: an integer of width 32 or 64 bits, or a float; `konst`
// marks a constant (a whole float constant is an integer operand of an integer op).
struct IVal {
    bool is_int = false;
    bool wide = false;  // an int64 (else int32 arithmetic)
    bool konst = false;
    int64_t i = 0;
    float f = 0.0f;
};

int64_t wrap_to(DType t, int64_t v) {
    switch (t) {
        case DType::I32:
            return static_cast<int32_t>(static_cast<uint32_t>(v));
        case DType::I8:
            return static_cast<int8_t>(static_cast<uint8_t>(v));
        case DType::U8:
            return static_cast<uint8_t>(v);
        default:
            return v;
    }
}

// torch's float -> int: toward zero; the engine's NaN 0 and saturation at the type's range
int64_t trunc_to(DType t, float f) {
    if (f != f) return 0;
    const double lo = t == DType::I64   ? -9223372036854775808.0
                      : t == DType::I32 ? -2147483648.0
                      : t == DType::U8  ? 0.0
                                        : -128.0;
    const double hi = t == DType::I64   ? 9223372036854775807.0
                      : t == DType::I32 ? 2147483647.0
                      : t == DType::U8  ? 255.0
                                        : 127.0;
    const double d = std::trunc(double(f));
    if (d <= lo) return t == DType::I64 ? INT64_MIN : static_cast<int64_t>(lo);
    if (d >= hi) return t == DType::I64 ? INT64_MAX : static_cast<int64_t>(hi);
    return static_cast<int64_t>(d);
}

int64_t floordiv(int64_t a, int64_t b) {
    if (a == INT64_MIN && b == -1) return INT64_MIN;
    const int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t pymod(int64_t a, int64_t b) {
    if (b == -1) return 0;
    const int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

float as_f(const IVal& v) { return v.is_int ? static_cast<float>(v.i) : v.f; }
bool whole_const(const IVal& v) {
    return v.konst && !v.is_int && std::trunc(v.f) == v.f && std::fabs(v.f) < 0x1p62f;
}
bool intish(const IVal& v) { return v.is_int || whole_const(v); }
int64_t as_i(const IVal& v) { return v.is_int ? v.i : static_cast<int64_t>(v.f); }
IVal int_val(int64_t v, bool wide) {
    IVal r;
    r.is_int = true, r.wide = wide, r.i = wide ? v : wrap_to(DType::I32, v);
    return r;
}

// Host interpreter of a flat kernel with integer values at position i: each output's value
// (integers exact, floats as `reference`'s).
std::vector<IVal> reference_int(const FusedKernel& k, const std::vector<std::vector<uint8_t>>& in,
                                uint64_t pos) {
    std::vector<IVal> v(k.code.size()), out(k.outputs.size());
    for (size_t j = 0; j < k.code.size(); ++j) {
        const FkInstr& c = k.code[j];
        IVal& r = v[j];
        const IVal a = c.a >= 0 ? v[c.a] : IVal{}, b = c.b >= 0 ? v[c.b] : IVal{};
        const IVal w = c.c >= 0 ? v[c.c] : IVal{};
        // the width of an integer op: 64 bits if an operand is int64 (a constant too) or a
        // whole float constant needs it
        bool wide = false;
        for (const IVal* o : {&a, &b, &w})
            if (o->is_int ? o->wide : whole_const(*o) && as_i(*o) != int32_t(as_i(*o))) wide = true;
        if (c.op == FkOp::LOAD) {
            const FkInput& x = k.inputs[c.arg];
            const uint8_t* p = &in[c.arg][(x.scalar ? 0 : pos) * isa::dtype_size(x.t)];
            if (isa::int_type(x.t)) {
                int64_t q = 0;
                if (x.t == DType::I64) std::memcpy(&q, p, 8);
                if (x.t == DType::I32) q = *reinterpret_cast<const int32_t*>(p);
                if (x.t == DType::I8) q = *reinterpret_cast<const int8_t*>(p);
                if (x.t == DType::U8) q = *p;
                r = int_val(q, x.t == DType::I64);
            } else {
                r.f = load_elem(x.t, p);
            }
        } else if (c.op == FkOp::CONST) {
            r = isa::int_type(c.t) ? int_val(c.iv, c.t == DType::I64) : IVal{};
            if (!isa::int_type(c.t)) r.f = c.imm;
            r.konst = true;
        } else if (c.op == FkOp::STORE) {
            const DType t = k.outputs[c.arg];
            if (isa::int_type(t))
                out[c.arg] = int_val(a.is_int ? wrap_to(t, a.i) : trunc_to(t, a.f), true);
            else
                out[c.arg].f = round_to(t, as_f(a));
        } else if (c.op == FkOp::IOTA) {  // a flat kernel's position
            r = int_val(static_cast<int64_t>(pos), false);
        } else if (c.op == FkOp::CAST) {
            if (isa::int_type(c.t))
                r = int_val(a.is_int ? wrap_to(c.t, a.i) : trunc_to(c.t, a.f), c.t == DType::I64);
            else
                r.f = round_to(c.t, as_f(a));
        } else if (c.op == FkOp::WHERE) {
            const bool m = a.is_int ? a.i != 0 : (a.f != 0.0f || a.f != a.f);
            if ((b.is_int || w.is_int) && intish(b) && intish(w))
                r = int_val(m ? as_i(b) : as_i(w), wide);
            else
                r.f = m ? as_f(b) : as_f(w);
        } else if ((c.op == FkOp::NEG || c.op == FkOp::ABS || c.op == FkOp::NOT) && a.is_int) {
            const uint64_t u = static_cast<uint64_t>(a.i);
            r = int_val(static_cast<int64_t>(c.op == FkOp::NOT              ? ~u
                                             : c.op == FkOp::NEG || a.i < 0 ? 0 - u
                                                                            : u),
                        a.wide);
        } else if (c.b >= 0 && c.op != FkOp::DIV && (a.is_int || b.is_int) && intish(a) &&
                   intish(b)) {
            const int64_t x = as_i(a), y = as_i(b);
            const auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
            switch (c.op) {
                case FkOp::ADD:
                    r = int_val(static_cast<int64_t>(ux + uy), wide);
                    break;
                case FkOp::SUB:
                    r = int_val(static_cast<int64_t>(ux - uy), wide);
                    break;
                case FkOp::MUL:
                    r = int_val(static_cast<int64_t>(ux * uy), wide);
                    break;
                case FkOp::MAX:
                    r = int_val(std::max(x, y), wide);
                    break;
                case FkOp::MIN:
                    r = int_val(std::min(x, y), wide);
                    break;
                case FkOp::FLOORDIV:
                    r = int_val(wide ? floordiv(x, y) : floordiv(int32_t(x), int32_t(y)), wide);
                    break;
                case FkOp::REMAINDER:
                    r = int_val(wide ? pymod(x, y) : pymod(int32_t(x), int32_t(y)), wide);
                    break;
                case FkOp::AND:
                    r = int_val(x & y, wide);
                    break;
                case FkOp::OR:
                    r = int_val(x | y, wide);
                    break;
                case FkOp::XOR:
                    r = int_val(x ^ y, wide);
                    break;
                case FkOp::SHL:  // torch's rule: a count outside [0, width) gives 0
                    r = int_val(y < 0 || y >= (wide ? 64 : 32) ? 0 : static_cast<int64_t>(ux << y),
                                wide);
                    break;
                case FkOp::SHR:  // arithmetic; a count outside [0, width): the sign fill
                    r = int_val(y < 0 || y >= (wide ? 64 : 32) ? (x < 0 ? -1 : 0) : x >> y, wide);
                    break;
                case FkOp::EQ:
                    r = int_val(x == y, false);
                    break;
                case FkOp::NE:
                    r = int_val(x != y, false);
                    break;
                case FkOp::LT:
                    r = int_val(x < y, false);
                    break;
                case FkOp::LE:
                    r = int_val(x <= y, false);
                    break;
                case FkOp::GT:
                    r = int_val(x > y, false);
                    break;
                case FkOp::GE:
                    r = int_val(x >= y, false);
                    break;
                default:
                    ADD_FAILURE() << "op not in the integer reference";
            }
        } else {
            r.f = apply(c, as_f(a), as_f(b), as_f(w));
        }
    }
    return out;
}

// Integers over the whole int64 range, small ones and the edges; never 0 when `nonzero`.
int64_t pick_int(std::mt19937_64& rng, uint64_t i, bool nonzero) {
    static const int64_t edges[] = {
        INT64_MIN,        INT64_MAX,       -1, 1, -7, 7, 2, -2, (1ll << 53) + 1,
        -(1ll << 53) - 3, (1ll << 62) + 5, 0};
    int64_t v = i < std::size(edges) ? edges[i]
                : i % 3 == 0         ? static_cast<int64_t>(rng())
                : i % 3 == 1         ? static_cast<int64_t>(rng() % 2001) - 1000
                                     : static_cast<int64_t>(rng() >> 20) - (1ll << 43);
    if (nonzero && v == 0) v = 3;
    return v;
}

// Plans, builds and runs a kernel with integer operands over n positions: integer inputs from
// pick_int (input j is never 0 when bit j of nonzero is set; bool inputs 0/1, i32/u8 wrapped),
// float ones in [-3, 3] and special values; every output element compared with
// reference_int (integers exactly, floats within the type's tolerance); the bytes after each
// output untouched. Returns the plan.
FusedPlan run_int_check(const std::string& text, uint64_t n, uint32_t nonzero = 0,
                        uint32_t max_cores = 32) {
    const FusedKernel k = parse_fused(text);
    EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, max_cores);
    const auto image = build_fused(k, n, p);
    std::mt19937_64 rng(n);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<std::vector<uint8_t>> in;
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (size_t j = 0; j < k.inputs.size(); ++j) {
        const FkInput& x = k.inputs[j];
        const uint64_t m = x.scalar ? 1 : n, es = isa::dtype_size(x.t);
        in.emplace_back(m * es);
        for (uint64_t i = 0; i < m; ++i) {
            uint8_t* q = &in.back()[i * es];
            const uint64_t e = x.scalar ? 4 : i;  // a scalar: -7
            if (x.t == DType::I8) {
                *q = static_cast<uint8_t>(rng() & 1);
            } else if (isa::int_type(x.t)) {
                int64_t v = wrap_to(x.t, pick_int(rng, e, false));
                if ((nonzero >> j & 1) && v == 0) v = 3;
                std::memcpy(q, &v, es);  // little endian: the low bytes
            } else {
                const float sp[] = {0.0f,
                                    -0.0f,
                                    2.5f,
                                    -2.5f,
                                    1e10f,
                                    -1e10f,
                                    std::numeric_limits<float>::quiet_NaN(),
                                    3e9f};
                store_elem(x.t, i < std::size(sp) ? sp[i] : dist(rng), q);
            }
        }
        args.push_back(at + (x.scalar ? 8 * es : 0));
        at += up128(m * es + 16 * es + 128);
    }
    std::vector<uint64_t> out_at;
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        out_at.push_back(at), args.push_back(at);
        at += up128(n * isa::dtype_size(k.outputs[o]) + 256);
    }
    // the scalars at their (element-aligned, not stick-aligned) addresses
    std::vector<uint8_t> mem(at, 0xA5);
    for (size_t j = 0; j < in.size(); ++j) std::memcpy(&mem[args[j]], in[j].data(), in[j].size());
    const RunResult r = run_image(image, p.cores, args, mem);
    EXPECT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.total_cycles, p.cycles) << "the priced run is the real run";
    int bad = 0;
    for (uint64_t i = 0; i < n && bad < 5; ++i) {
        const auto want = reference_int(k, in, i);
        for (size_t o = 0; o < k.outputs.size(); ++o) {
            const DType t = k.outputs[o];
            const uint64_t es = isa::dtype_size(t);
            const uint8_t* q = &mem[out_at[o] + i * es];
            if (isa::int_type(t)) {
                int64_t got = 0;
                std::memcpy(&got, q, es);
                got = wrap_to(t, got);
                if (got != want[o].i)
                    ADD_FAILURE() << "output " << o << " [" << i << "] = " << got << ", want "
                                  << want[o].i,
                        ++bad;
                continue;
            }
            const float got = load_elem(t, q), w = want[o].f;
            if (!(got == w || (got != got && w != w) ||
                  std::fabs(got - w) <= tol(t) * (1.0 + std::fabs(w))))
                ADD_FAILURE() << "output " << o << " [" << i << "] = " << got << ", want " << w,
                    ++bad;
        }
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
        const uint64_t end = out_at[o] + n * isa::dtype_size(k.outputs[o]);
        for (uint64_t b = end; b < up128(end); ++b) EXPECT_EQ(mem[b], 0xA5) << "past output " << o;
    }
    return p;
}

// int64 arithmetic past 2^53 (wrapping), Python's floor division and remainder of negative
// operands, min/max/abs/neg, compares into bool and i32 outputs, int <-> int and int <-> float
// casts, integer constants beyond fp32's reach, over odd sizes and core counts.
TEST(FusedInt, ArithmeticMatchesTheInterpreter) {
    const std::string text =
        "spyre.kernel 1\nin i64 full\nin i64 full\nin i32 full\nout i64\nout i64\nout i32\n"
        "out bool\nout f32\nout i64\n"
        "%0 = load 0\n%1 = load 1\n%2 = load 2\n"
        "%3 = const 9007199254740993 i64\n%4 = add %0 %3\n%5 = mul %4 %1\n%6 = sub %5 %0\n"
        "%7 = floordiv %0 %1\n%8 = remainder %0 %1\n%9 = add %7 %8\n%10 = max %6 %9\n"
        "%11 = neg %10\n%12 = abs %11\nstore 0 %12\n"
        "%13 = floordiv %2 %2\n%14 = const -3 i64\n%15 = remainder %2 %14\n%16 = mul %2 %15\n"
        "%17 = min %16 %13\n%18 = cast %0 i32\n%19 = add %17 %18\nstore 2 %19\n"
        "%20 = lt %0 %1\nstore 3 %20\n%21 = cast %1 f32\n%22 = cast %2 i64\n%23 = floordiv %22 "
        "%14\n"
        "%24 = cast %23 f32\n%25 = add %21 %24\nstore 4 %25\n"
        "%26 = ge %2 %0\n%27 = cast %26 i64\n%28 = add %27 %7\nstore 5 %28\n"
        "%29 = remainder %1 %14\nstore 1 %29\n";
    for (const uint64_t n : {uint64_t{1}, uint64_t{37}, uint64_t{1000}, uint64_t{20001}}) {
        SCOPED_TRACE(n);
        run_int_check(text, n, /*nonzero=*/0b110);
    }
    run_int_check(text, 4099, 0b110, 1);
}

// Floor division and remainder with the signs spelled out (Python's // and %, torch's
// floor_divide and remainder), and the int64 edge INT64_MIN // -1.
TEST(FusedInt, FloorDivisionAndRemainderOfNegatives) {
    const std::string text =
        "spyre.kernel 1\nin i64 full\nin i64 full\nout i64\nout i64\n%0 = load 0\n%1 = load 1\n"
        "%2 = floordiv %0 %1\n%3 = remainder %0 %1\nstore 0 %2\nstore 1 %3\n";
    const FusedKernel k = parse_fused(text);
    const int64_t a[] = {-7, 7, -7, 7, -6, 0, INT64_MIN, INT64_MIN, (1ll << 60) + 1, -1};
    const int64_t b[] = {2, -2, -2, 2, 3, -5, -1, 3, -(1ll << 59), INT64_MAX};
    const int64_t q[] = {-4, -4, 3, 3, -2, 0, INT64_MIN, -3074457345618258603, -3, -1};
    const int64_t r[] = {1, -1, -1, 1, 0, 0, 0, 1, -(1ll << 59) + 1, INT64_MAX - 1};
    const uint64_t n = std::size(a);
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, 32);
    std::vector<std::vector<uint8_t>> in(2, std::vector<uint8_t>(n * 8));
    std::memcpy(in[0].data(), a, n * 8), std::memcpy(in[1].data(), b, n * 8);
    const uint64_t o0 = 1024, o1 = 2048;
    const auto m2 = run_priced(build_fused(k, n, p), p, {0, 512, o0, o1}, in, 3072);
    for (uint64_t i = 0; i < n; ++i) {
        int64_t gq = 0, gr = 0;
        std::memcpy(&gq, &m2[o0 + i * 8], 8), std::memcpy(&gr, &m2[o1 + i * 8], 8);
        EXPECT_EQ(gq, q[i]) << a[i] << " // " << b[i];
        EXPECT_EQ(gr, r[i]) << a[i] << " % " << b[i];
        EXPECT_EQ(gq, floordiv(a[i], b[i]));
        EXPECT_EQ(gr, pymod(a[i], b[i]));
    }
}

// A row kernel's float value widened to int64 and back before a float reduction: the widening
// cast must not run in place (row r of the I64 result would overwrite source rows not yet read).
TEST(FusedInt, RowKernelWideningCastIsNotInPlace) {
    for (const uint64_t rows : {uint64_t{5}, uint64_t{64}}) {
        SCOPED_TRACE(rows);
        run_rows_and_check(
            "spyre.kernel 1\nrows 37\nin f32 full\nout f32 row\nout f32\n%0 = load 0\n"
            "%1 = const 10.0\n%2 = mul %0 %1\n%3 = floor %2\n%4 = cast %3 i64\n"
            "%5 = cast %4 f32\n%6 = rmax %5\nstore 0 %6\nstore 1 %5\n",
            rows);
    }
}

// A row kernel's 16-bit temporary (a cast to f16/bf16: Inductor's mask `(x < t).half()`)
// used last by an fp32 op: the op must not run in place over it (the fp32 rows are wider and
// overwrote the temporary's rows not yet read: every row after the first was garbage, NaN in
// `(s * (s < 0.5)).sum(-1)` compiled in fp16).
TEST(FusedRows, NarrowTemporaryIsNotOverwrittenInPlace) {
    for (const char* t : {"f16", "bf16"})
        for (const uint64_t rows : {uint64_t{4}, uint64_t{64}}) {
            SCOPED_TRACE(std::string(t) + " " + std::to_string(rows));
            const std::string s = t;
            run_rows_and_check("spyre.kernel 1\nrows 37\nin " + s +
                                   " full\nout f32 row\n"
                                   "out f32\n%0 = load 0\n%1 = const 0.5\n%2 = lt %0 %1\n"
                                   "%3 = cast %2 " +
                                   s +
                                   "\n%4 = mul %0 %3\n%5 = rsum %4\n"
                                   "store 0 %5\n%6 = cast %0 " +
                                   (s == "f16" ? "bf16" : "f16") + "\n%7 = exp %6\nstore 1 %7\n",
                               rows);
        }
}

// Bitwise ops and shifts of int64 and int32 values over the whole range (INT64_MIN/MAX, -1):
// and/or/xor/not, shifts by counts in [-3, 66] and [-3, 34] (torch's rule outside [0, width):
// SHL 0, SHR the sign fill), a constant first (commuted, or made full for a shift), an int32
// op promoted to int64 by its other operand, a u8 operand, a scalar count.
TEST(FusedInt, BitwiseOpsAndShifts) {
    const std::string text =
        "spyre.kernel 1\nin i64 full\nin i64 full\nin i32 full\nin u8 full\nin i64 scalar\n"
        "out i64\nout i64\nout i32\nout i64\nout i32\nout u8\n"
        "%0 = load 0\n%1 = load 1\n%2 = load 2\n%3 = load 3\n%4 = load 4\n"
        "%5 = and %0 %1\n%6 = or %5 %2\n%7 = xor %6 %0\n%8 = not %7\n"
        "%9 = const -6148914691236517206 i64\n%10 = and %9 %8\nstore 0 %10\n"
        "%11 = const 70 i64\n%12 = remainder %1 %11\n%13 = const 3 i64\n%14 = sub %12 %13\n"
        "%15 = shl %0 %14\n%16 = shr %0 %14\n%17 = xor %15 %16\nstore 1 %17\n"
        "%18 = const 38 i32\n%19 = remainder %2 %18\n%20 = const 3 i32\n%21 = sub %19 %20\n"
        "%22 = shl %2 %21\n%23 = shr %2 %21\n%24 = or %22 %23\nstore 2 %24\n"
        "%25 = shr %0 %4\n%26 = const 1 i64\n%27 = shl %26 %14\n%28 = add %25 %27\n"
        "%29 = shl %2 %14\n%30 = add %28 %29\nstore 3 %30\n"
        "%31 = not %2\n%32 = xor %31 %3\nstore 4 %32\n%33 = not %3\nstore 5 %33\n";
    for (const uint64_t n : {uint64_t{1}, uint64_t{12}, uint64_t{999}, uint64_t{20001}}) {
        SCOPED_TRACE(n);
        run_int_check(text, n);
    }
    run_int_check(text, 4099, 0, 1);
}

// The int64 edges spelled out: shifts by 0, 1, 63, 64, -1 of INT64_MIN, INT64_MAX and -1.
TEST(FusedInt, ShiftsAtTheEdges) {
    const std::string text =
        "spyre.kernel 1\nin i64 full\nin i64 full\nout i64\nout i64\n%0 = load 0\n%1 = load 1\n"
        "%2 = shl %0 %1\n%3 = shr %0 %1\nstore 0 %2\nstore 1 %3\n";
    const FusedKernel k = parse_fused(text);
    const int64_t a[] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MAX, INT64_MAX, -1, -1, 5, -5, 3};
    const int64_t b[] = {0, 1, 63, 63, 64, 64, -1, 62, 200, -64};
    const int64_t l[] = {INT64_MIN, 0, 0, INT64_MIN, 0, 0, 0, 1ll << 62, 0, 0};  // 5 << 62: bit 62
    const int64_t r[] = {INT64_MIN, INT64_MIN / 2, -1, 0, 0, -1, -1, 0, -1, 0};
    const uint64_t n = std::size(a);
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, 32);
    std::vector<std::vector<uint8_t>> in(2, std::vector<uint8_t>(n * 8));
    std::memcpy(in[0].data(), a, n * 8), std::memcpy(in[1].data(), b, n * 8);
    const uint64_t o0 = 1024, o1 = 2048;
    const auto m2 = run_priced(build_fused(k, n, p), p, {0, 512, o0, o1}, in, 3072);
    for (uint64_t i = 0; i < n; ++i) {
        int64_t gl = 0, gr = 0;
        std::memcpy(&gl, &m2[o0 + i * 8], 8), std::memcpy(&gr, &m2[o1 + i * 8], 8);
        EXPECT_EQ(gl, l[i]) << a[i] << " << " << b[i];
        EXPECT_EQ(gr, r[i]) << a[i] << " >> " << b[i];
    }
}

// Operands in every position: constants and scalar inputs first (sub, floordiv, remainder,
// compares commuted), where of integers with float, integer and bool masks and constant or
// scalar values (masked_fill, where(m, ids, -100)), u8 and bool inputs, a float compare and
// an integer compare stored as bool (0/1 bytes), a constant stored to integer outputs, and a
// bool output re-read as a mask.
TEST(FusedInt, UniformOperandsWhereAndBoolOutputs) {
    const std::string text =
        "spyre.kernel 1\nin i64 full\nin i64 scalar\nin f16 full\nin bool full\nin u8 full\n"
        "in i32 full\nout i64\nout i64\nout bool\nout bool\nout i32\nout i64\nout f32\n"
        "%0 = load 0\n%1 = load 1\n%2 = load 2\n%3 = load 3\n%4 = load 4\n%5 = load 5\n"
        "%6 = const 1000000000000 i64\n%7 = sub %6 %0\n%8 = floordiv %1 %0\n"
        "%9 = remainder %6 %0\n%10 = add %7 %8\n%11 = sub %10 %9\n%12 = lt %6 %0\n"
        "%13 = where %12 %11 %1\nstore 0 %13\n"
        "%14 = const 0.0\n%15 = gt %2 %14\n%16 = const -100 i64\n%17 = where %15 %0 %16\n"
        "%18 = where %3 %17 %6\n%19 = cast %4 i64\n%20 = add %18 %19\nstore 1 %20\n"
        "store 2 %15\n%21 = ne %0 %1\nstore 3 %21\n"
        "%22 = const 5 i64\n%23 = where %3 %22 %5\n%24 = ge %22 %5\n%25 = add %23 %24\n"
        "store 4 %25\n%26 = const 7 i64\nstore 5 %26\n"
        "%27 = cast %0 f32\n%28 = where %3 %27 %2\n%29 = mul %28 %4\nstore 6 %29\n";
    for (const uint64_t n : {uint64_t{5}, uint64_t{333}, uint64_t{9000}}) {
        SCOPED_TRACE(n);
        run_int_check(text, n, /*nonzero=*/0b1);
    }
}

// Casts of constants fold on the host with VINT CVT's rule (toward zero, NaN 0, saturated at
// the type's range) and keep their type: an i64 constant makes an i32 op an int64 one.
TEST(FusedInt, ConstantCastsFoldOnTheHost) {
    run_int_check(
        "spyre.kernel 1\nin i32 full\nout i64\nout i32\nout i64\nout i32\n%0 = load 0\n"
        "%1 = const -2.7\n%2 = cast %1 i64\n%3 = add %0 %2\nstore 0 %3\n%4 = const 3e9\n"
        "%5 = cast %4 i32\n%6 = add %0 %5\nstore 1 %6\n%7 = const nan\n%8 = cast %7 i64\n"
        "%9 = sub %0 %8\n%10 = mul %9 %0\nstore 2 %10\n%11 = const -1e30\n%12 = cast %11 i32\n"
        "%13 = max %0 %12\nstore 3 %13\n",
        1000);
}

// Positions as values (position ids, arange + offset): a flat kernel's iota is the position
// as an exact I32, here scaled and offset past 2^32 in int64, stored as i32 directly and used
// in a float op; more than 2^31 positions are refused.
TEST(FusedInt, FlatIotaIsThePosition) {
    const std::string text =
        "spyre.kernel 1\nin f32 full\nout i64\nout i32\nout f32\n%0 = iota\n"
        "%1 = const 3 i64\n%2 = mul %0 %1\n%3 = const 5000000000 i64\n%4 = add %2 %3\n"
        "store 0 %4\nstore 1 %0\n%5 = load 0\n%6 = add %5 %0\nstore 2 %6\n";
    for (const uint64_t n : {uint64_t{1}, uint64_t{37}, uint64_t{20001}}) {
        SCOPED_TRACE(n);
        run_int_check(text, n);
    }
    run_int_check(text, 4099, 0, 1);
    const Pricer pricer(default_engine_config());
    EXPECT_THROW(plan_fused(pricer, parse_fused(text), (1ull << 31) + 32, 32),
                 std::invalid_argument);
}

// A compare stored as bool in a flat kernel is ONE pass writing the output's bytes; an i64
// pass costs twice an i32 one on the cycle model (isa.md), so the i64 kernel is dearer.
TEST(FusedInt, PassesAndPricing) {
    const Pricer pricer(default_engine_config());
    auto plan = [&](const std::string& t, uint64_t n) {
        return plan_fused(pricer, parse_fused(t), n, 1);
    };
    const FusedPlan b = plan(
        "spyre.kernel 1\nin f32 full\nout bool\n%0 = load 0\n"
        "%1 = const 0.0\n%2 = gt %0 %1\nstore 0 %2\n",
        4096);
    EXPECT_EQ(b.passes, 1u);
    const auto add = [](const char* t) {
        return std::string("spyre.kernel 1\nin ") + t + " full\nin " + t + " full\nout " + t +
               "\n%0 = load 0\n%1 = load 1\n%2 = add %0 %1\n%3 = mul %2 %1\nstore 0 %3\n";
    };
    const FusedPlan p32 = plan(add("i32"), 65536), p64 = plan(add("i64"), 65536);
    EXPECT_EQ(p32.passes, 2u);
    EXPECT_EQ(p64.passes, 2u);
    EXPECT_GT(p64.cycles, p32.cycles);
}

// Integer reductions in row kernels: VRED's integer path into I64 per row. A count of
// nonzeros ((ids != pad).sum(-1)), an exact int64 sum past 2^53 (wrapping), max and min of
// int64, any of an integer row (to bool), beside a float epilogue over the same rows; rows
// split over cores. Integer values in rows too long for a core are refused (the long-row
// combine is fp32): the caller runs the eager form.
TEST(FusedRows, IntegerSumsCountsAndExtremes) {
    const Pricer pricer(default_engine_config());
    const std::string head = "spyre.kernel 1\nrows ";
    const std::string body =
        "\nin i64 full\nin f16 full\nout i64 row\nout i64 row\nout i64 row\nout i64 row\n"
        "out bool row\nout f16\n%0 = load 0\n%1 = load 1\n%2 = const 0 i64\n%3 = ne %0 %2\n"
        "%4 = rsum %3\nstore 0 %4\n%5 = rsum %0\nstore 1 %5\n%6 = rmax %0\nstore 2 %6\n"
        "%7 = rmin %0\nstore 3 %7\n%8 = rany %0\nstore 4 %8\n%9 = const 0.0\n"
        "%10 = where %3 %1 %9\nstore 5 %10\n";
    for (const auto& [rows, C] : {std::pair<uint64_t, uint64_t>{5, 37}, {3, 1000}, {300, 37}}) {
        SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(C));
        const uint64_t n = rows * C;
        const FusedKernel k = parse_fused(head + std::to_string(C) + body);
        EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
        const FusedPlan p = plan_fused(pricer, k, n, 32);
        EXPECT_EQ(p.col_chunk, 0u);
        std::mt19937_64 rng(n);
        std::vector<int64_t> ids(n);
        std::vector<float> x(n);
        for (uint64_t i = 0; i < n; ++i) {
            ids[i] = (i / C) % 4 == 1 ? 0 : pick_int(rng, i, false);  // row 1 (of 4): zeros
            if (i % 5 == 0) ids[i] = 0;
            x[i] = float(int(i % 17) - 8) / 4;
        }
        std::vector<std::vector<uint8_t>> in(2);
        in[0].resize(n * 8), in[1].resize(n * 2);
        std::memcpy(in[0].data(), ids.data(), n * 8);
        for (uint64_t i = 0; i < n; ++i) store_elem(DType::F16, x[i], &in[1][i * 2]);
        std::vector<uint64_t> args{0, up128(n * 8)};
        uint64_t at = args[1] + up128(n * 2);
        for (int o = 0; o < 5; ++o) args.push_back(at), at += up128(rows * 8 + 128);
        args.push_back(at), at += up128(n * 2 + 128);
        const auto mem = run_priced(build_fused(k, n, p), p, args, in, at);
        for (uint64_t r = 0; r < rows; ++r) {
            int64_t cnt = 0, mx = INT64_MIN, mn = INT64_MAX;
            uint64_t sum = 0;
            for (uint64_t c = 0; c < C; ++c) {
                const int64_t v = ids[r * C + c];
                cnt += v != 0, sum += static_cast<uint64_t>(v);
                mx = std::max(mx, v), mn = std::min(mn, v);
            }
            int64_t got[4];
            for (int o = 0; o < 4; ++o) std::memcpy(&got[o], &mem[args[2 + o] + r * 8], 8);
            EXPECT_EQ(got[0], cnt) << "row " << r;
            EXPECT_EQ(got[1], static_cast<int64_t>(sum)) << "row " << r;
            EXPECT_EQ(got[2], mx) << "row " << r;
            EXPECT_EQ(got[3], mn) << "row " << r;
            EXPECT_EQ(mem[args[6] + r], cnt != 0 ? 1 : 0) << "row " << r;
        }
        for (uint64_t i = 0; i < n; ++i)
            ASSERT_EQ(load_elem(DType::F16, &mem[args[7] + i * 2]), ids[i] != 0 ? x[i] : 0.0f) << i;
        EXPECT_EQ(mem[args[2] + rows * 8], 0xA5) << "past the row output";
    }
    // rows too long for a core: no long-row plan with integer values
    const FusedKernel k = parse_fused(head + "1048576" + body);
    EXPECT_THROW(plan_fused(pricer, k, 2 * 1048576, 32), std::invalid_argument);
}

TEST(FusedInt, Refusals) {
    for (const char* bad :
         {// row kernels: integer outputs are i64 or bool row outputs; no integer op of
          // per-row values
          "spyre.kernel 1\nrows 8\nin i64 full\nout i64\n%0 = load 0\nstore 0 %0\n",
          "spyre.kernel 1\nrows 8\nin i64 row\nout i64 row\n%0 = load 0\n"
          "%1 = const 1 i64\n%2 = add %0 %1\nstore 0 %2\n",
          "spyre.kernel 1\nrows 8\nin f32 full\nout i32 row\n%0 = load 0\n%1 = rsum %0\n"
          "store 0 %1\n",
          // casts to bool/u8 (compares make masks), floordiv of floats, constants
          "spyre.kernel 1\nin i64 full\nout bool\n%0 = load 0\n%1 = cast %0 bool\n"
          "store 0 %1\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = floordiv %0 %0\n"
          "store 0 %1\n",
          // bitwise ops and shifts of floats
          "spyre.kernel 1\nin f32 full\nin i64 full\nout i64\n%0 = load 0\n%1 = load 1\n"
          "%2 = and %1 %0\nstore 0 %2\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = not %0\nstore 0 %1\n",
          "spyre.kernel 1\nin i64 full\nout i64\n%0 = load 0\n%1 = const 1.5\n"
          "%2 = shl %0 %1\nstore 0 %2\n",
          "spyre.kernel 1\nin i64 full\nout i64\n%0 = load 0\n%1 = const 3000000000 i32\n"
          "%2 = add %0 %1\nstore 0 %2\n",
          "spyre.kernel 1\nin i64 full\nout i64\n%0 = load 0\n%1 = const 1.5 i64\n"
          "%2 = add %0 %1\nstore 0 %2\n",
          // an integer op of a scalar and a constant only
          "spyre.kernel 1\nin i64 scalar\nin f32 full\nout i64\nout f32\n%0 = load 0\n"
          "%1 = const 2 i64\n%2 = add %0 %1\nstore 0 %2\n%3 = load 1\nstore 1 %3\n"}) {
        EXPECT_THROW(parse_fused(bad), std::invalid_argument) << bad;
    }
}

TEST(Fused, OneCoreAndManyCoresAgree) {
    const FusedPlan one = run_and_check(chain(DType::F16), 20000, 1);
    const FusedPlan many = run_and_check(chain(DType::F16), 20000, 32);
    EXPECT_EQ(one.cores, 1u);
    EXPECT_GT(many.cores, 1u);
    EXPECT_LT(many.cycles, one.cycles);
}

TEST(Fused, ScalarInputsConstantsFirstAndEveryFunction) {
    // c - x, c / x, scalar * x, max/min with a scalar, and the unary functions
    run_and_check(
        "spyre.kernel 1\nin f32 full\nin bf16 scalar\nout f32\n"
        "%0 = load 0\n%1 = load 1\n%2 = const 2.5\n%3 = sub %2 %0\n%4 = div %2 %0\n"
        "%5 = mul %1 %0\n%6 = max %1 %3\n%7 = min %6 %4\n%8 = add %7 %5\n%9 = sigmoid %8\n"
        "%10 = tanh %9\n%11 = abs %0\n%12 = sqrt %11\n%13 = rsqrt %11\n%14 = log %11\n"
        "%15 = add %12 %13\n%16 = add %15 %14\n%17 = neg %16\n%18 = mul %17 %10\n%19 = silu %18\n"
        "%20 = recip %1\n%21 = add %19 %20\nstore 0 %21\n",
        3001);
}

// Every unary function of the engine's VUN FLOOR..ATANH set (and sin/cos) in a flat kernel, on
// a scaled input that covers each domain (and some outside it: NaN where torch gives NaN), in
// the three types; each result then goes through an add so the function is not the store's
// pass. The parser names them as the printer does.
TEST(Fused, EveryVunFunction) {
    const char* fns[] = {"sin",  "cos",   "floor", "ceil", "trunc", "round", "sign", "erf",
                         "erfc", "log1p", "expm1", "exp2", "log2",  "log10", "tan",  "asin",
                         "acos", "atan",  "sinh",  "cosh", "asinh", "acosh", "atanh"};
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        for (const char* fn : fns) {
            SCOPED_TRACE(std::string(fn) + " " + tname(t));
            // x in [-3, 3): x * 0.3 covers asin/acos/atanh's (-1, 1); |x| + 1 acosh's [1, inf)
            const std::string scale = std::string(fn) == "acosh"
                                          ? "%2 = abs %0\n%3 = add %2 %1\n"
                                          : "%2 = mul %0 %1\n%3 = add %2 %2\n";
            const std::string s = tname(t);
            const std::string text =
                "spyre.kernel 1\nin " + s + " full\nout " + s + "\nout f32\n" +
                "%0 = load 0\n%1 = const " + (std::string(fn) == "acosh" ? "1" : "0.3") + "\n" +
                scale + "%4 = " + fn + " %3\n%5 = add %4 %1\nstore 0 %4\n" + "store 1 %5\n";
            const FusedKernel k = parse_fused(text);
            EXPECT_EQ(fk_name(k.code[4].op), std::string(fn));
            EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
            run_and_check(text, 1001);
        }
    }
}

// Runs a flat description on the engine over inputs given as fp32 values (each stored in its
// input's type; a scalar input takes the first) and returns output 0 as fp32 values.
std::vector<float> run_values(const std::string& text, const std::vector<std::vector<float>>& vals,
                              uint64_t n) {
    const FusedKernel k = parse_fused(text);
    const Pricer pricer(default_engine_config());
    const FusedPlan p = plan_fused(pricer, k, n, 32);
    const auto image = build_fused(k, n, p);
    std::vector<std::vector<uint8_t>> in;
    std::vector<uint64_t> args;
    uint64_t at = 0;
    for (size_t j = 0; j < k.inputs.size(); ++j) {
        const uint64_t m = k.inputs[j].scalar ? 1 : n, es = isa::dtype_size(k.inputs[j].t);
        in.emplace_back(m * es);
        for (uint64_t i = 0; i < m; ++i) store_elem(k.inputs[j].t, vals[j][i], &in.back()[i * es]);
        args.push_back(at);
        at += up128(m * es + 128);
    }
    const DType t = k.outputs[0];
    args.push_back(at);
    const std::vector<uint8_t> mem = run_priced(image, p, args, in, at + up128(n * 4 + 128));
    std::vector<float> out(n);
    for (uint64_t i = 0; i < n; ++i) out[i] = load_elem(t, &mem[at + i * isa::dtype_size(t)]);
    return out;
}

// The spacing of type t's numbers at |v| (subnormals: the smallest).
double ulp_of(DType t, double v) {
    const int m = t == DType::F32 ? 23 : t == DType::F16 ? 10 : 7;
    const int emin = t == DType::F16 ? -14 : -126;
    return std::ldexp(1.0, std::max(std::ilogb(v == 0 ? 1e-300 : v), emin) - m);
}

// torch's x ** c on the CPU (aten's pow kernels): the exponents 2, 3, -2, 0.5, -0.5 and -1 as
// x * x, x * x * x, 1 / (x * x), sqrt, rsqrt and reciprocal in fp32 (sqrt(-0) = -0, sqrt(-inf)
// = NaN, unlike std::pow), the rest std::pow (here in double, rounded once to fp32).
float torch_pow(float x, float y, bool y_const) {
    if (y_const && y == 2.0f) return x * x;
    if (y_const && y == 3.0f) return x * x * x;
    if (y_const && y == -2.0f) return 1.0f / (x * x);
    if (y_const && y == 0.5f) return std::sqrt(x);
    if (y_const && y == -0.5f) return static_cast<float>(1.0 / std::sqrt(double(x)));
    if (y_const && y == -1.0f) return 1.0f / x;
    return static_cast<float>(std::pow(double(x), double(y)));
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// bases and exponents: signed zeros, +-1, negative bases to integer and non-integer powers,
// infinities, NaN, values subnormal in some type (1e-6 in f16, 1e-40 in f32 and bf16), large
const float kPowX[] = {0.0f,   -0.0f,  1.0f, -1.0f, 2.0f, -2.0f,  0.5f,  -0.5f, 3.0f,  -3.0f,
                       10.0f,  -10.0f, 1.5f, -1.5f, kInf, -kInf,  kNaN,  1e-3f, 1e-6f, -1e-6f,
                       1e-40f, 100.0f, 6e4f, 1e20f, 0.9f, 0.999f, 7.25f, -0.75f};
const float kPowY[] = {0.0f,  -0.0f, 1.0f,  -1.0f, 2.0f,  -2.0f,  3.0f,  -3.0f, 0.5f,
                       -0.5f, 1.5f,  -2.5f, 0.3f,  7.0f,  -7.0f,  10.0f, 25.0f, kInf,
                       -kInf, kNaN,  1e-3f, 4.0f,  -5.0f, 1e-40f, 64.0f, -0.25f};

// got against torch's x ** y (in the type's inputs, rounded once to t): NaN where it is NaN,
// zeros and infinities exact with their sign, else within `ulps` of t (as measured below).
// Returns the error in ulps (0 for the exact cases); reports failures.
double g_pow_ratio = 0;  // fp32: the worst (error - 1 ulp) / |y * log2|x|| seen

double check_pow(DType t, float x, float y, bool y_const, float got, double ulps) {
    const float want = round_to(t, torch_pow(x, y, y_const));
    if (std::isnan(want) || std::isnan(got)) {
        EXPECT_TRUE(std::isnan(want) && std::isnan(got))
            << tname(t) << " " << x << " ** " << y << " = " << got << ", want " << want;
        return 0;
    }
    if (want == 0 || std::isinf(want) || got == 0 || std::isinf(got)) {
        EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want))
            << tname(t) << " " << x << " ** " << y << " = " << got << ", want " << want;
        return 0;
    }
    const double e = std::fabs(double(got) - double(want)) / ulp_of(t, want);
    // fp32: exp2(y * log2|x|) carries log2's and the product's roundings into the exponent
    const double ty = std::fabs(double(y) * std::log2(std::fabs(double(x))));
    if (t == DType::F32 && std::isfinite(ty)) ulps += 1.5 * ty;
    if (t == DType::F32 && std::isfinite(ty) && e > 1)
        g_pow_ratio = std::max(g_pow_ratio, (e - 1) / ty);
    EXPECT_LE(e, ulps) << tname(t) << " " << x << " ** " << y << " = " << got << ", want " << want;
    return e;
}

// `pow` (x ** y, parse_fused's expansion into log2, exp2, compares and selects) against
// std::pow in double: every base with every exponent as two full inputs, with the exponent a
// scalar input, with each exponent a constant (the specialised ones as aten computes them), and
// each base a constant, in the three types. The error bound: fp32 results within 8 ulps for
// these values (exp2(y * log2|x|) in fp32: the error grows with |y * log2|x||, ~0.7 ulp per unit
// of it; the constant-exponent multiplies within 2), fp16/bf16 within 1 ulp (the fp32 result
// rounded once).
TEST(Fused, PowMatchesStdPowOverSpecialValues) {
    const size_t NX = std::size(kPowX), NY = std::size(kPowY), n = NX * NY;
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        const double ulps = t == DType::F32 ? 2.0 : 1.0;
        double worst = 0, special = 0;
        std::vector<float> xs(n), ys(n);
        for (size_t i = 0; i < n; ++i)
            xs[i] = round_to(t, kPowX[i / NY]), ys[i] = round_to(t, kPowY[i % NY]);
        // and random pairs: |x| in [1e-4, 1e4) (either sign), y in [-12, 12) (a third integers)
        std::mt19937 rng(22);
        std::uniform_real_distribution<float> lx(-4.0f, 4.0f), uy(-12.0f, 12.0f);
        for (int i = 0; i < 4000; ++i) {
            const float y = uy(rng), x = std::pow(10.0f, lx(rng)) * (i % 4 ? 1.0f : -1.0f);
            xs.push_back(round_to(t, x)), ys.push_back(round_to(t, i % 3 ? y : std::round(y)));
        }
        // tensor ** tensor
        const auto got =
            run_values("spyre.kernel 1\nin " + s + " full\nin " + s + " full\nout " + s +
                           "\n%0 = load 0\n%1 = load 1\n%2 = pow %0 %1\nstore 0 %2\n",
                       {xs, ys}, n);
        for (size_t i = 0; i < n; ++i)
            worst = std::max(worst, check_pow(t, xs[i], ys[i], false, got[i], ulps));
        for (float yv : kPowY) {
            const float y = round_to(t, yv);
            char c[32];
            std::snprintf(c, sizeof c, "%.9g", yv);
            // tensor ** scalar input, tensor ** constant (rounded to t by a cast, as Inductor's)
            const auto gs =
                run_values("spyre.kernel 1\nin " + s + " full\nin " + s + " scalar\nout " + s +
                               "\n%0 = load 0\n%1 = load 1\n%2 = pow %0 %1\nstore 0 %2\n",
                           {std::vector<float>(kPowX, kPowX + NX), {y}}, NX);
            const auto gc = run_values("spyre.kernel 1\nin " + s + " full\nout " + s +
                                           "\n%0 = load 0\n%1 = const " + c + "\n%2 = cast %1 " +
                                           s + "\n%3 = pow %0 %2\nstore 0 %3\n",
                                       {std::vector<float>(kPowX, kPowX + NX)}, NX);
            for (size_t i = 0; i < NX; ++i) {
                const float x = round_to(t, kPowX[i]);
                worst = std::max(worst, check_pow(t, x, y, false, gs[i], ulps));
                const double e = check_pow(t, x, y, true, gc[i], ulps);
                worst = std::max(worst, e);
                // the specialised exponents: multiplies, sqrt, rsqrt, recip
                if ((y == std::floor(y) && std::fabs(y) <= 8) || std::fabs(y) == 0.5f)
                    special = std::max(special, e);
            }
        }
        for (float xv : kPowX) {  // constant ** tensor (AdamW's beta ** step)
            const float x = round_to(t, xv);
            char c[32];
            std::snprintf(c, sizeof c, "%.9g", x);
            const auto g =
                run_values("spyre.kernel 1\nin " + s + " full\nout " + s +
                               "\n%0 = load 0\n%1 = const " + c + "\n%2 = pow %1 %0\nstore 0 %2\n",
                           {std::vector<float>(kPowY, kPowY + NY)}, NY);
            for (size_t i = 0; i < NY; ++i)
                worst = std::max(worst, check_pow(t, x, round_to(t, kPowY[i]), false, g[i], ulps));
        }
        std::printf(
            "pow %s: worst error %.2f ulps, %.2f for the specialised constant exponents "
            "(fp32: %.3f ulps per unit of |y log2|x||)\n",
            s.c_str(), worst, special, g_pow_ratio);
    }
}

// The constant exponents aten specialises become those ops (one pass each for 0.5, -0.5, -1;
// x * x for 2), other small integers multiplies, a positive constant base a multiply and an
// exp2; a tensor exponent the whole expansion; two constants fold.
TEST(Fused, PowSpecialisesConstants) {
    auto ops = [](const std::string& x, const std::string& y) {
        const FusedKernel k = parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n" +
                                          x + "\n" + y + "\n%3 = pow %1 %2\nstore 0 %3\n");
        std::string s;
        for (size_t i = 3; i < k.code.size(); ++i)
            if (k.code[i].op != FkOp::CONST && k.code[i].op != FkOp::STORE)
                s += std::string(s.empty() ? "" : " ") + fk_name(k.code[i].op);
        return s;
    };
    const std::string x = "%1 = cast %0 f32", y = "%2 = cast %0 f32";
    EXPECT_EQ(ops(x, "%2 = const 2"), "mul");
    EXPECT_EQ(ops(x, "%2 = const 3"), "mul mul");
    EXPECT_EQ(ops(x, "%2 = const 0.5"), "sqrt");
    EXPECT_EQ(ops(x, "%2 = const -0.5"), "rsqrt");
    EXPECT_EQ(ops(x, "%2 = const -1"), "recip");
    EXPECT_EQ(ops(x, "%2 = const -2"), "mul recip");
    EXPECT_EQ(ops(x, "%2 = const 8"), "mul mul mul");
    EXPECT_EQ(ops(x, "%2 = const -5"), "recip mul mul mul");
    EXPECT_EQ(ops(x, "%2 = const 0"), "");
    EXPECT_EQ(ops("%1 = const 0.9", y), "mul exp2");
    EXPECT_EQ(ops("%1 = const 1", y), "");
    EXPECT_EQ(ops("%1 = const 2", "%2 = const 10"), "");
    EXPECT_EQ(ops(x, "%2 = const 2.5"), "eq where log2 mul exp2");  // NaN for x < 0
    EXPECT_EQ(ops(x, "%2 = const 9"), "abs log2 mul exp2 recip min lt neg where");
    EXPECT_EQ(ops(x, y),  // a tensor exponent: NaN and sign fix-ups from y's values
              "floor ne eq where abs where log2 mul eq eq max where exp2 recip min lt mul floor "
              "mul sub eq mul neg where");
    EXPECT_THROW(parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = pow %0\n"
                             "store 0 %1\n"),
                 std::invalid_argument);
}

// `atan2` (parse_fused's expansion: atan of the quotient, +-pi into x's half plane, the
// zeros' and infinities' answers by the signs) against std::atan2 in double rounded once to
// the type: every pair of 17 special values (signed zeros, infinities, NaN, values subnormal
// in fp16, large and small) and 4,000 random pairs over 80 decades, as two full inputs, with
// y and with x a scalar input, and each special value as a constant on either side; NaN
// exact, zeros with their sign, the rest within 2 ulps in fp32 (the quotient's rounding, the
// atan's and the addition of pi) and 1 ulp in fp16/bf16 (it prints the worst).
TEST(Fused, Atan2MatchesStdAtan2OverSpecialValues) {
    const float sv[] = {0.0f,  -0.0f,  1.0f, -1.0f, 0.5f,  -2.0f, 3.0f,  -1e-6f, 1e-6f,
                        1e20f, -1e20f, 6e4f, kInf,  -kInf, kNaN,  0.75f, -7.25f};
    const size_t NS = std::size(sv), np = NS * NS;
    auto check = [](DType t, float y, float x, float got, double ulps) {
        const float want = round_to(t, static_cast<float>(std::atan2(double(y), double(x))));
        if (std::isnan(want) || std::isnan(got)) {
            EXPECT_TRUE(std::isnan(want) && std::isnan(got))
                << tname(t) << " atan2(" << y << ", " << x << ") = " << got << ", want " << want;
            return 0.0;
        }
        if (want == 0 || got == 0) {
            EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want))
                << tname(t) << " atan2(" << y << ", " << x << ") = " << got << ", want " << want;
            return 0.0;
        }
        const double e = std::fabs(double(got) - double(want)) / ulp_of(t, want);
        EXPECT_LE(e, ulps) << tname(t) << " atan2(" << y << ", " << x << ") = " << got << ", want "
                           << want;
        return e;
    };
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        const double ulps = t == DType::F32 ? 2.0 : 1.0;
        double worst = 0;
        std::vector<float> ys(np), xs(np);
        for (size_t i = 0; i < np; ++i)
            ys[i] = round_to(t, sv[i / NS]), xs[i] = round_to(t, sv[i % NS]);
        std::mt19937 rng(2);
        std::uniform_real_distribution<float> l(-40.0f, 40.0f);
        for (int i = 0; i < 4000; ++i) {
            const float y = std::pow(10.0f, l(rng) * (t == DType::F16 ? 0.1f : 1.0f)),
                        x = std::pow(10.0f, l(rng) * (t == DType::F16 ? 0.1f : 1.0f));
            ys.push_back(round_to(t, i % 2 ? y : -y)),
                xs.push_back(round_to(t, i % 4 < 2 ? x : -x));
        }
        const auto got =
            run_values("spyre.kernel 1\nin " + s + " full\nin " + s + " full\nout " + s +
                           "\n%0 = load 0\n%1 = load 1\n%2 = atan2 %0 %1\n"
                           "store 0 %2\n",
                       {ys, xs}, ys.size());
        for (size_t i = 0; i < ys.size(); ++i)
            worst = std::max(worst, check(t, ys[i], xs[i], got[i], ulps));
        std::vector<float> col(NS);
        for (size_t i = 0; i < NS; ++i) col[i] = round_to(t, sv[i]);
        for (float v : sv) {
            const float c = round_to(t, v);
            char text[32];
            std::snprintf(text, sizeof text, "%.9g", c);
            const std::string in = "spyre.kernel 1\nin " + s + " full\nin " + s + " scalar\nout " +
                                   s + "\n%0 = load 0\n%1 = load 1\n";
            const std::string k = "spyre.kernel 1\nin " + s + " full\nout " + s +
                                  "\n%0 = load 0\n%1 = const " + text + "\n%2 = cast %1 " + s +
                                  "\n";
            const auto gy = run_values(in + "%2 = atan2 %1 %0\nstore 0 %2\n", {col, {c}}, NS);
            const auto gx = run_values(in + "%2 = atan2 %0 %1\nstore 0 %2\n", {col, {c}}, NS);
            const auto ky = run_values(k + "%3 = atan2 %2 %0\nstore 0 %3\n", {col}, NS);
            const auto kx = run_values(k + "%3 = atan2 %0 %2\nstore 0 %3\n", {col}, NS);
            for (size_t i = 0; i < NS; ++i) {
                worst = std::max(worst, check(t, c, col[i], gy[i], ulps));
                worst = std::max(worst, check(t, col[i], c, gx[i], ulps));
                worst = std::max(worst, check(t, c, col[i], ky[i], ulps));
                worst = std::max(worst, check(t, col[i], c, kx[i], ulps));
            }
        }
        std::printf("atan2 %s: worst error %.2f ulps\n", s.c_str(), worst);
    }
    // two constants fold on the host; a positive constant x needs no fix-ups but the zeros'
    const FusedKernel k = parse_fused(
        "spyre.kernel 1\nin f32 full\nout f32\nout f32\n%0 = const -1\n%1 = const "
        "-0\n%2 = atan2 %1 %0\nstore 0 %2\n%3 = load 0\n%4 = const 2\n"
        "%5 = atan2 %3 %4\nstore 1 %5\n");
    EXPECT_EQ(k.code[2].op, FkOp::CONST);
    EXPECT_EQ(k.code[2].imm, -std::numbers::pi_v<float>);
    std::string ops;
    for (size_t i = 3; i < k.code.size(); ++i)
        if (k.code[i].op != FkOp::CONST && k.code[i].op != FkOp::STORE &&
            k.code[i].op != FkOp::LOAD)
            ops += std::string(ops.empty() ? "" : " ") + fk_name(k.code[i].op);
    EXPECT_EQ(ops, "div atan");
    EXPECT_THROW(parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = atan2 %0\n"
                             "store 0 %1\n"),
                 std::invalid_argument);
}

TEST(Fused, SeveralOutputsCastsAndSharedValues) {
    // one value stored and used further; a bf16 rounding mid-chain; outputs of three types
    run_and_check(
        "spyre.kernel 1\nin f16 full\nin f32 full\nout f32\nout bf16\nout f16\n"
        "%0 = load 0\n%1 = load 1\n%2 = add %0 %1\nstore 0 %2\n%3 = cast %2 bf16\n"
        "%4 = mul %3 %3\nstore 1 %4\n%5 = cast %0 f32\nstore 2 %5\n",
        777);
    // a constant and a scalar stored directly
    run_and_check(
        "spyre.kernel 1\nin f32 scalar\nout f16\nout f32\n%0 = load 0\n%1 = const -0.75\n"
        "store 0 %1\nstore 1 %0\n",
        300);
}

TEST(Fused, ParseErrorsNameTheLine) {
    for (const char* bad :
         {"", "spyre.kernel 2\n", "spyre.kernel 1\nin f64 full\nout f32\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 1\nstore 0 %0\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = hypot %0 %0\nstore 0 %1\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = add %0 %9\nstore 0 %1\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n",
          "spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\nstore 0 %0\nstore 0 %0\n"}) {
        EXPECT_THROW(parse_fused(bad), std::invalid_argument) << bad;
    }
    try {
        parse_fused("spyre.kernel 1\nin f32 full\nout f32\n%0 = load 0\n%1 = hypot %0 %0\n");
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("hypot"), std::string::npos) << e.what();
    }
    const FusedKernel k = parse_fused(chain(DType::BF16));
    EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
}

// Views (torch.compile's permuted, sliced and broadcast operands): inputs and outputs read and
// written through "view <offset> <size>:<stride> ..." in rows of whole sticks, in the three
// types, on one core and on many, against the interpreter reading the same elements; the
// gaps of an output view stay untouched.
TEST(Fused, ViewsMatchTheInterpreter) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        const uint64_t L = 128 / isa::dtype_size(t);  // a row of one stick
        const std::string l = std::to_string(L), l2 = std::to_string(2 * L);
        auto kernel = [&](const std::string& in_view, const std::string& out_view) {
            return "spyre.kernel 1\nin " + s + " " + in_view + "\nin " + s + " full\nout " + s +
                   out_view + "\n%0 = load 0\n%1 = load 1\n%2 = mul %0 %1\n%3 = const 0.5\n" +
                   "%4 = add %2 %3\nstore 0 %4\n";
        };
        // q of a packed qkv, heads to the front: [B, S, 3, H, L] read as [B, H, S, L]
        const std::string heads = "view " + std::to_string(L) + " 2:" + std::to_string(30 * L) +
                                  " 5:" + l + " 3:" + std::to_string(15 * L) + " " + l + ":1";
        for (uint32_t cores : {1u, 32u}) {
            run_and_check(kernel(heads, ""), 2 * 5 * 3 * L, cores);
            // a broadcast along the outer dim (a bias of one row) and along a middle dim
            run_and_check(kernel("view 0 37:0 " + l2 + ":1", ""), 37 * 2 * L, cores);
            run_and_check(kernel("view 0 3:" + l2 + " 11:0 " + l2 + ":1", ""), 3 * 11 * 2 * L,
                          cores);
            // a store into every other row of a wider buffer (a slice of a cat's output), from
            // an offset
            run_and_check(
                kernel("full", " view " + l + " 23:" + std::to_string(4 * L) + " " + l2 + ":1"),
                23 * 2 * L, cores);
            // both at once, many chunks: a transposed pair of outer dims in and a slice out
            run_and_check(
                kernel("view 0 40:" + l + " 50:" + std::to_string(40 * L) + " " + l + ":1",
                       " view 0 40:" + std::to_string(100 * L) + " 50:" + l2 + " " + l + ":1"),
                40 * 50 * L, cores);
        }
    }
    // transposed blocks (x.t(): a dense [Q, P] read as [P, Q]), alone and under an outer dim,
    // odd sizes, many blocks per chunk and blocks over several chunks and cores
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const std::string s = tname(t);
        auto kernel = [&](const std::string& in_view) {
            return "spyre.kernel 1\nin " + s + " " + in_view + "\nin " + s + " full\nout " + s +
                   "\n%0 = load 0\n%1 = load 1\n%2 = add %0 %1\nstore 0 %2\n";
        };
        for (uint32_t cores : {1u, 32u}) {
            run_and_check(kernel("view 0 32:1 64:32"), 32 * 64, cores);
            run_and_check(kernel("view 0 37:256 8:1 24:8"), 37 * 8 * 24, cores);
            run_and_check(kernel("view 128 5:768 7:1 33:7"), 5 * 7 * 33, cores);
        }
    }
    // matrices whose rows are whole sticks move in tiles of one stick's columns (a LOAD of Q
    // rows of a stick, a VTRANS of [Q, tile]): a matrix larger than a core's scratchpad too
    for (DType t : {DType::F32, DType::F16}) {
        const std::string s = tname(t);
        const std::string text = "spyre.kernel 1\nin " + s + " view 0 3:10240 256:1 40:256\nin " +
                                 s + " full\nout " + s +
                                 "\n%0 = load 0\n%1 = load 1\n%2 = sub %0 %1\nstore 0 %2\n";
        EXPECT_EQ(parse_fused(text).inputs[0].view.tile, 128 / isa::dtype_size(t));
        run_and_check(text, 3 * 256 * 40, 1);
        run_and_check(text, 3 * 256 * 40, 32);
        const FusedPlan p =
            run_and_check("spyre.kernel 1\nin " + s + " view 0 1024:1 700:1024\nout " + s +
                              "\n%0 = load 0\n%1 = neg %0\nstore 0 %1\n",
                          1024 * 700, 32);
        EXPECT_GT(1024u * 700 * isa::dtype_size(t), p.lx_bytes) << "the matrix is not in LX";
    }
    {  // a block larger than a core's scratchpad whose rows are not sticks is refused by the
       // planner (the eager form)
        const FusedKernel big = parse_fused(
            "spyre.kernel 1\nin f32 view 0 4097:1 4096:4097\nout f32\n%0 = load 0\n"
            "store 0 %0\n");
        EXPECT_TRUE(big.inputs[0].view.transposed);
        EXPECT_EQ(big.inputs[0].view.tile, 4097u);
        EXPECT_THROW(plan_fused(Pricer(default_engine_config()), big, 4097 * 4096, 32),
                     std::invalid_argument);
    }
    // dims that are one run are merged, size-1 dims dropped; a dense view is "full"
    const FusedKernel k = parse_fused(
        "spyre.kernel 1\nin f32 view 64 4:1024 1:7 8:128 128:1\nin f32 view 0 2:256 256:1\n"
        "out f32\n%0 = load 0\n%1 = load 1\n%2 = add %0 %1\nstore 0 %2\n");
    EXPECT_EQ(k.inputs[0].view.sizes, (std::vector<uint64_t>{4096}));
    EXPECT_EQ(k.inputs[0].view.strides, (std::vector<uint64_t>{1}));
    EXPECT_EQ(k.inputs[0].view.offset, 64u);
    EXPECT_TRUE(k.inputs[1].view.empty());
    EXPECT_EQ(format_fused(parse_fused(format_fused(k))), format_fused(k));
    EXPECT_NE(format_fused(k).find("in f32 view 64 4096:1"), std::string::npos) << format_fused(k);
}

// Views the program cannot move as rows of whole sticks are refused at parse (the caller runs
// its eager form): a transposed last dim, rows or row starts off a stick, an output view with
// a broadcast, a view in a row kernel; and a call whose n is not the view's positions.
TEST(Fused, ViewRefusals) {
    auto with = [](const std::string& in, const std::string& out) {
        return "spyre.kernel 1\nin " + in + "\nout " + out +
               "\n%0 = load 0\n%1 = neg %0\nstore 0 %1\n";
    };
    for (const std::string& bad :
         {with("f32 view 0 8:1 32:16", "f32"), with("f32 full", "f32 view 0 8:1 32:8"),
          with("f32 view 4 8:1 32:8", "f32"), with("f32 view 0 3:100 8:1 32:8", "f32"),
          with("f32 view 0 8:40 16:1", "f32"), with("f32 view 0 8:48 32:1", "f32"),
          with("f32 view 16 8:32 32:1", "f32"), with("f16 view 0 8:64 32:1", "f16"),
          with("f32 full", "f32 view 0 8:0 32:1"), with("f32 view 0 8:32 32:x", "f32"),
          with("f32 view 0 8:32 0:1", "f32"), with("f32 view 0", "f32"),
          std::string("spyre.kernel 1\nrows 48\nin f32 view 0 8:64 32:1\nout f32\n"
                      "%0 = load 0\nstore 0 %0\n"),
          std::string("spyre.kernel 1\nrows 48\nin f32 full\nout f32 view 0 8:64 32:1\n"
                      "%0 = load 0\nstore 0 %0\n")})
        EXPECT_THROW(parse_fused(bad), std::invalid_argument) << bad;
    const FusedKernel k = parse_fused(with("f32 view 0 8:64 32:1", "f32"));
    const Pricer pricer(default_engine_config());
    EXPECT_NO_THROW(plan_fused(pricer, k, 256, 4));
    EXPECT_THROW(plan_fused(pricer, k, 128, 4), std::invalid_argument);
    EXPECT_FALSE(fused_views_fit(k, 128));
    EXPECT_EQ(fused_operand_elems(k, 256, FkKind::FULL, k.inputs[0].view), 7u * 64 + 32);
}

// The operands of chain(F32) through the C API: x (x_step i + x0) and y (yf(i)), n fp32 values
// each, copied to the card (x's buffer 128 bytes longer: room for a view that does not start
// on a stick), and out; the buffers are freed with the struct (they outlive the device handle).
struct ChainOperands {
    uint64_t n = 0;
    spyre_buffer_t bx = nullptr, by = nullptr, bo = nullptr;
    std::vector<float> x, y;
    spyre_tensor in[2]{}, out{};

    // ASSERT_NO_FATAL_FAILURE(ops.init(...))
    void init(spyre_device_t dev, uint64_t elems, float x_step, float x0, float (*yf)(float)) {
        n = elems;
        ASSERT_EQ(spyre_malloc(dev, n * 4 + 128, &bx), SPYRE_SUCCESS) << spyre_last_error();
        ASSERT_EQ(spyre_malloc(dev, n * 4, &by), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_malloc(dev, n * 4, &bo), SPYRE_SUCCESS);
        x.resize(n), y.resize(n);
        for (uint64_t i = 0; i < n; ++i) x[i] = x_step * float(i) + x0, y[i] = yf(float(i));
        ASSERT_EQ(spyre_memcpy_htod(bx, 0, x.data(), n * 4), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_memcpy_htod(by, 0, y.data(), n * 4), SPYRE_SUCCESS);
        const int64_t shape[1] = {int64_t(n)};
        ASSERT_EQ(spyre_tensor_init(&in[0], bx, 0, SPYRE_DTYPE_FLOAT32, 1, shape), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_tensor_init(&in[1], by, 0, SPYRE_DTYPE_FLOAT32, 1, shape), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_tensor_init(&out, bo, 0, SPYRE_DTYPE_FLOAT32, 1, shape), SPYRE_SUCCESS);
    }
    ~ChainOperands() { spyre_free(bx), spyre_free(by), spyre_free(bo); }
    // out read back into `o` and checked against relu(x y + c) - exp(x), c the kernel's constant
    void expect_chain(float c, std::vector<float>& o) const {
        o.assign(n, 0.0f);
        ASSERT_EQ(spyre_memcpy_dtoh(o.data(), bo, 0, n * 4), SPYRE_SUCCESS);
        for (uint64_t i = 0; i < n; ++i) {
            const float r = std::max(x[i] * y[i] + c, 0.0f) - float(std::exp(double(x[i])));
            ASSERT_NEAR(o[i], r, 2e-6 * (1 + std::fabs(r))) << i;
        }
    }
};

// The C API tests: card 0 of the simulator.
class FusedApi : public ::testing::Test {
  protected:
    spyre_device_t dev = nullptr;
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        ASSERT_EQ(spyre_device_open(0, &dev), SPYRE_SUCCESS) << spyre_last_error();
    }
    void TearDown() override {
        spyre_device_close(dev);
        unsetenv("SPYRE_BACKEND");
    }
};

float cos_of(float v) { return std::cos(v); }
float sin_of(float v) { return std::sin(v); }

// The C API on the simulator: one launch, the library's plan, refusals as NOT_SUPPORTED.
TEST_F(FusedApi, OneLaunchOnTheSimulatorAndRefusals) {
    const uint64_t n = 1234;
    ChainOperands ops;
    ASSERT_NO_FATAL_FAILURE(ops.init(dev, n, 0.01f, -5.0f, cos_of));
    spyre_tensor(&in)[2] = ops.in;
    spyre_tensor& out = ops.out;
    const std::string k = chain(DType::F32);
    ASSERT_EQ(spyre_op_fused(nullptr, k.c_str(), n, in, 2, &out, 1), SPYRE_SUCCESS)
        << spyre_last_error();
    spyre_op_info info;
    ASSERT_EQ(spyre_op_get_last_info(&info), SPYRE_SUCCESS);
    EXPECT_STREQ(info.op, "fused");
    EXPECT_EQ(info.launches, 1u);
    EXPECT_GT(info.modeled_ns, 0u);
    std::vector<float> o;
    ASSERT_NO_FATAL_FAILURE(ops.expect_chain(1.5f, o));
    // an input that does not start on a stick, a wrong type, a bad description
    spyre_tensor shifted = in[0];
    shifted.offset = 4;
    const spyre_tensor bad_in[2] = {shifted, in[1]};
    EXPECT_EQ(spyre_op_fused(nullptr, k.c_str(), n, bad_in, 2, &out, 1), SPYRE_ERROR_NOT_SUPPORTED);
    const std::string k16 = chain(DType::F16);
    EXPECT_EQ(spyre_op_fused(nullptr, k16.c_str(), n, in, 2, &out, 1), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(spyre_op_fused(nullptr, "spyre.kernel 1\nbogus\n", n, in, 2, &out, 1),
              SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("bogus"), std::string::npos)
        << spyre_last_error();
}

// Row kernels through the C API: a softmax and a layer norm with column weight and bias and a
// row output, one launch each; refusals: n not whole rows, a row output too small, rows too
// long for a core.
TEST_F(FusedApi, RowKernelsOnTheSimulatorAndRefusals) {
    const uint64_t R = 19, C = 333, n = R * C;
    spyre_buffer_t bx, bw, bo, bm;
    ASSERT_EQ(spyre_malloc(dev, n * 4, &bx), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_malloc(dev, C * 4, &bw), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_malloc(dev, n * 4, &bo), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_malloc(dev, R * 4, &bm), SPYRE_SUCCESS);
    std::vector<float> x(n), w(C), o(n), m(R);
    for (uint64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i)) * 4.0f;
    for (uint64_t c = 0; c < C; ++c) w[c] = 0.5f + 0.001f * float(c);
    ASSERT_EQ(spyre_memcpy_htod(bx, 0, x.data(), n * 4), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_memcpy_htod(bw, 0, w.data(), C * 4), SPYRE_SUCCESS);
    const int64_t full[2] = {int64_t(R), int64_t(C)}, col[1] = {int64_t(C)}, row[1] = {int64_t(R)};
    spyre_tensor tx, tw, to, tm, small;
    ASSERT_EQ(spyre_tensor_init(&tx, bx, 0, SPYRE_DTYPE_FLOAT32, 2, full), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_tensor_init(&tw, bw, 0, SPYRE_DTYPE_FLOAT32, 1, col), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_tensor_init(&to, bo, 0, SPYRE_DTYPE_FLOAT32, 2, full), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_tensor_init(&tm, bm, 0, SPYRE_DTYPE_FLOAT32, 1, row), SPYRE_SUCCESS);
    const int64_t fewer[1] = {int64_t(R - 1)};
    ASSERT_EQ(spyre_tensor_init(&small, bm, 0, SPYRE_DTYPE_FLOAT32, 1, fewer), SPYRE_SUCCESS);
    // x * w / max over the row; the row max as an output
    const std::string k = "spyre.kernel 1\nrows " + std::to_string(C) +
                          "\nin f32 full\nin f32 col\nout f32\nout f32 row\n%0 = load 0\n"
                          "%1 = load 1\n%2 = rmax %0\n%3 = mul %0 %1\n%4 = div %3 %2\n"
                          "store 0 %4\nstore 1 %2\n";
    const spyre_tensor in[2] = {tx, tw}, out[2] = {to, tm}, bad_out[2] = {to, small};
    ASSERT_EQ(spyre_op_fused(nullptr, k.c_str(), n, in, 2, out, 2), SPYRE_SUCCESS)
        << spyre_last_error();
    spyre_op_info info;
    ASSERT_EQ(spyre_op_get_last_info(&info), SPYRE_SUCCESS);
    EXPECT_EQ(info.launches, 1u);
    ASSERT_EQ(spyre_memcpy_dtoh(o.data(), bo, 0, n * 4), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_memcpy_dtoh(m.data(), bm, 0, R * 4), SPYRE_SUCCESS);
    for (uint64_t r = 0; r < R; ++r) {
        const float mx = *std::max_element(x.begin() + r * C, x.begin() + (r + 1) * C);
        ASSERT_EQ(m[r], mx) << r;
        for (uint64_t c = 0; c < C; ++c)
            ASSERT_NEAR(o[r * C + c], x[r * C + c] * w[c] / mx,
                        1e-6 * (1 + std::fabs(o[r * C + c])));
    }
    EXPECT_EQ(spyre_op_fused(nullptr, k.c_str(), n - 1, in, 2, out, 2), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(spyre_op_fused(nullptr, k.c_str(), n, in, 2, bad_out, 2), SPYRE_ERROR_NOT_SUPPORTED);
    // 2 rows of 400,001: one row and its temporaries do not fit a core, and the second row
    // does not start on a stick, so they cannot be streamed as long rows either
    const uint64_t LC = 400001;
    spyre_buffer_t bl, bl2;
    ASSERT_EQ(spyre_malloc(dev, 2 * LC * 4, &bl), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_malloc(dev, 2 * LC * 4, &bl2), SPYRE_SUCCESS);
    const int64_t lshape[2] = {2, int64_t(LC)};
    spyre_tensor tl, tl2;
    ASSERT_EQ(spyre_tensor_init(&tl, bl, 0, SPYRE_DTYPE_FLOAT32, 2, lshape), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_tensor_init(&tl2, bl2, 0, SPYRE_DTYPE_FLOAT32, 2, lshape), SPYRE_SUCCESS);
    const std::string longk = softmax(DType::F32, LC);
    EXPECT_EQ(spyre_op_fused(nullptr, longk.c_str(), 2 * LC, &tl, 1, &tl2, 1),
              SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("scratchpad"), std::string::npos)
        << spyre_last_error();
    spyre_free(bx), spyre_free(bw), spyre_free(bo), spyre_free(bm), spyre_free(bl), spyre_free(bl2);
}

// A prepared kernel (spyre_fused_kernel_create): planned at create (a later spyre_op_fused of
// the same text finds its plan cached), its description's errors reported at create, launched
// by handle with the text path's results bit for bit and the same operand checks, on a device
// handle other than the one it was prepared with; a launch queued before the destroy still runs;
// a destroyed, foreign or NULL handle is refused.
TEST_F(FusedApi, PreparedKernelPlansAtCreateAndLaunchesByHandle) {
    const uint64_t n = 4321;  // a size no other case of this process plans
    std::string k = chain(DType::F32);
    k.replace(k.find("const 1.5"), 9, "const 2.25");
    spyre_fused_kernel_t pk = nullptr;
    ASSERT_EQ(spyre_fused_kernel_create(dev, k.c_str(), n, &pk), SPYRE_SUCCESS)
        << spyre_last_error();
    ASSERT_NE(pk, nullptr);
    ASSERT_EQ(spyre_device_close(dev), SPYRE_SUCCESS);  // the kernel does not need the handle
    ASSERT_EQ(spyre_device_open(0, &dev), SPYRE_SUCCESS);

    ChainOperands ops;
    ASSERT_NO_FATAL_FAILURE(ops.init(dev, n, 0.013f, -6.0f, sin_of));
    spyre_tensor(&in)[2] = ops.in;
    spyre_tensor& out = ops.out;
    spyre_buffer_t bx = ops.bx, by = ops.by, bo = ops.bo, bt = nullptr;
    ASSERT_EQ(spyre_malloc(dev, n * 4, &bt), SPYRE_SUCCESS);
    std::vector<float> o(n), t(n);
    const int64_t shape[1] = {int64_t(n)};
    spyre_tensor text_out;
    ASSERT_EQ(spyre_tensor_init(&text_out, bt, 0, SPYRE_DTYPE_FLOAT32, 1, shape), SPYRE_SUCCESS);

    spyre_op_info info;
    ASSERT_EQ(spyre_op_fused(nullptr, k.c_str(), n, in, 2, &text_out, 1), SPYRE_SUCCESS)
        << spyre_last_error();
    ASSERT_EQ(spyre_op_get_last_info(&info), SPYRE_SUCCESS);
    EXPECT_EQ(info.plan_cached, 1) << "the create did not plan the kernel";
    ASSERT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1), SPYRE_SUCCESS)
        << spyre_last_error();
    ASSERT_EQ(spyre_op_get_last_info(&info), SPYRE_SUCCESS);
    EXPECT_STREQ(info.op, "fused");
    EXPECT_EQ(info.launches, 1u);
    EXPECT_GT(info.modeled_ns, 0u);
    ASSERT_EQ(spyre_memcpy_dtoh(t.data(), bt, 0, n * 4), SPYRE_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(ops.expect_chain(2.25f, o));
    EXPECT_EQ(std::memcmp(o.data(), t.data(), n * 4), 0);

    // the operand checks of the text path
    spyre_tensor shifted = in[0];
    shifted.offset = 4;
    const spyre_tensor bad_in[2] = {shifted, in[1]};
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, pk, bad_in, 2, &out, 1), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 1, &out, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    const int64_t fewer[1] = {int64_t(n - 1)};
    spyre_tensor small;
    ASSERT_EQ(spyre_tensor_init(&small, bo, 0, SPYRE_DTYPE_FLOAT32, 1, fewer), SPYRE_SUCCESS);
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &small, 1), SPYRE_ERROR_NOT_SUPPORTED);

    // a launch queued before the destroy runs with the kernel it was given
    std::fill(o.begin(), o.end(), 0.0f);
    ASSERT_EQ(spyre_memcpy_htod(bo, 0, o.data(), n * 4), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_fused_kernel_destroy(pk), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_device_synchronize(dev), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_memcpy_dtoh(o.data(), bo, 0, n * 4), SPYRE_SUCCESS);
    EXPECT_EQ(std::memcmp(o.data(), t.data(), n * 4), 0);
    // destroyed, foreign, NULL
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("destroyed"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_fused_kernel_destroy(pk), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, reinterpret_cast<spyre_fused_kernel_t>(dev), in, 2,
                                      &out, 1),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, nullptr, in, 2, &out, 1),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_fused_kernel_destroy(nullptr), SPYRE_ERROR_INVALID_ARGUMENT);

    // what the description or n would give at a launch comes at create, with no handle made
    spyre_fused_kernel_t none = reinterpret_cast<spyre_fused_kernel_t>(uintptr_t(0x1234));
    EXPECT_EQ(spyre_fused_kernel_create(dev, "spyre.kernel 1\nbogus\n", n, &none),
              SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("bogus"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(none, nullptr);
    const std::string rows = softmax(DType::F32, 333);
    EXPECT_EQ(spyre_fused_kernel_create(dev, rows.c_str(), 333 * 7 + 1, &none),
              SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("whole number of rows"), std::string::npos)
        << spyre_last_error();
    const std::string longk = softmax(DType::F32, 400001);
    EXPECT_EQ(spyre_fused_kernel_create(dev, longk.c_str(), 2 * 400001, &none),
              SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("scratchpad"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_fused_kernel_create(nullptr, k.c_str(), n, &none),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_fused_kernel_create(dev, nullptr, n, &none), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_fused_kernel_create(dev, k.c_str(), n, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    // n = 0: a kernel that launches nothing
    ASSERT_EQ(spyre_fused_kernel_create(dev, k.c_str(), 0, &none), SPYRE_SUCCESS);
    const int64_t zero[1] = {0};
    spyre_tensor e[3];
    for (int j = 0; j < 3; ++j)
        ASSERT_EQ(spyre_tensor_init(&e[j],
                                    j == 0   ? bx
                                    : j == 1 ? by
                                             : bo,
                                    0, SPYRE_DTYPE_FLOAT32, 1, zero),
                  SPYRE_SUCCESS);
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, none, e, 2, &e[2], 1), SPYRE_SUCCESS)
        << spyre_last_error();
    ASSERT_EQ(spyre_op_get_last_info(&info), SPYRE_SUCCESS);
    EXPECT_EQ(info.launches, 0u);
    EXPECT_EQ(spyre_fused_kernel_destroy(none), SPYRE_SUCCESS);
    spyre_free(bt);
}

// A prepared kernel across a lost card: its launch fails with the lost-card error as the text
// path's does, a later one at once, a create on the lost card too; the handle stays valid and
// destroyable, and once the card is back the same handle launches with the right results.
TEST_F(FusedApi, PreparedKernelOnALostCard) {
    const uint64_t n = 2345;
    const std::string k = chain(DType::F32);
    spyre_fused_kernel_t pk = nullptr;
    ASSERT_EQ(spyre_fused_kernel_create(dev, k.c_str(), n, &pk), SPYRE_SUCCESS)
        << spyre_last_error();
    ChainOperands ops;
    ASSERT_NO_FATAL_FAILURE(ops.init(dev, n, 0.002f, -2.0f, cos_of));
    spyre_tensor(&in)[2] = ops.in;
    spyre_tensor& out = ops.out;

    ASSERT_EQ(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_LOST, 0), SPYRE_SUCCESS);
    const spyre_status first = spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1);
    const spyre_status sync = spyre_device_synchronize(dev);
    EXPECT_TRUE(first == SPYRE_ERROR_DEVICE_LOST || sync == SPYRE_ERROR_DEVICE_LOST)
        << first << " " << sync;
    EXPECT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_NE(std::string(spyre_last_error()).find("removed"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_op_fused(nullptr, k.c_str(), n, in, 2, &out, 1), SPYRE_ERROR_DEVICE_LOST);
    spyre_fused_kernel_t other = nullptr;
    std::string k2 = k;
    k2.replace(k2.find("const 1.5"), 9, "const 3.75");
    EXPECT_EQ(spyre_fused_kernel_create(dev, k2.c_str(), n, &other), SPYRE_ERROR_DEVICE_LOST)
        << spyre_last_error();
    EXPECT_EQ(other, nullptr);

    ASSERT_EQ(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_NONE, 0), SPYRE_SUCCESS);
    spyre_clear_last_error();
    spyre_device_synchronize(dev);  // the lost card's error, once
    ASSERT_EQ(spyre_op_fused_prepared(nullptr, pk, in, 2, &out, 1), SPYRE_SUCCESS)
        << spyre_last_error();
    ASSERT_EQ(spyre_device_synchronize(dev), SPYRE_SUCCESS) << spyre_last_error();
    std::vector<float> o;
    ASSERT_NO_FATAL_FAILURE(ops.expect_chain(1.5f, o));
    EXPECT_EQ(spyre_fused_kernel_destroy(pk), SPYRE_SUCCESS);
}

}  // namespace
}  // namespace spyre::ops
