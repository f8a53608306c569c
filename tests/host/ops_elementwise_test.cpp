// SPDX-License-Identifier: MIT
// The op library's elementwise programs on the engine: every op against a host reference of the
// ISA's numerics (exact where the ISA defines the result exactly, within one ulp of the output
// type where it evaluates a function in double), over sizes that are not multiples of a stick,
// all float types, 1 and 32 cores, NaN/Inf/zero/denormal inputs, every broadcast form, and the
// bytes after the output left untouched. The planner's figure equals the real run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/elementwise_program.hpp"
#include "ops/pricing.hpp"
#include "ops_test_util.hpp"

namespace spyre::ops {
namespace {

using isa::Bcast;
using isa::DType;
using namespace test;

constexpr DType kFloats[] = {DType::F16, DType::BF16, DType::F32};
const uint64_t kSizes[] = {1, 7, 63, 64, 65, 1000, 4097, (1u << 20) + 3};
constexpr uint8_t kSentinel = 0xA5;
const uint64_t kLxBudget = [] {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    return spyre_engine_lx_usable(&c);
}();  // the default card's usable LX

float fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }
float fmin_nan(float a, float b) { return (a < b || a != a) ? a : b; }

// The fp32 result of op on fp32 operand values (ISA section 4), before rounding to out.
float reference(const EwShape& s, float a, float b, float c) {
    const double d = a;
    switch (s.op) {
        case EwOp::RELU:
            return a < 0.0f ? 0.0f : a;
        case EwOp::GELU:
            return static_cast<float>(0.5 * d * std::erfc(-d / std::sqrt(2.0)));
        case EwOp::GELU_TANH: {
            if (std::isinf(a)) return a > 0 ? a : -0.0f;
            const double u = std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d);
            return static_cast<float>(d / (1.0 + std::exp(-2.0 * u)));
        }
        case EwOp::SILU:
            return static_cast<float>(d / (1.0 + std::exp(-d)));
        case EwOp::SIGMOID: {  // the documented composition: NEG, EXP, +1, RECIP in fp32
            const float e = static_cast<float>(std::exp(-d));
            const float t = e + 1.0f;
            return 1.0f / t;
        }
        case EwOp::EXP:
            return static_cast<float>(std::exp(d));
        case EwOp::LOG:
            return static_cast<float>(std::log(d));
        case EwOp::TANH:
            return static_cast<float>(std::tanh(d));
        case EwOp::NEG:
            return -a;
        case EwOp::ABS:
            return std::fabs(a);
        case EwOp::SQRT:
            return std::sqrt(a);
        case EwOp::RSQRT:
            return static_cast<float>(1.0 / std::sqrt(d));
        case EwOp::RECIP:
            return 1.0f / a;
        case EwOp::SIN:
            return static_cast<float>(std::sin(d));
        case EwOp::COS:
            return static_cast<float>(std::cos(d));
        case EwOp::FLOOR:
            return std::floor(a);
        case EwOp::CEIL:
            return std::ceil(a);
        case EwOp::TRUNC:
            return std::trunc(a);
        case EwOp::ROUND:
            return std::nearbyint(a);  // the default rounding mode: half to even
        case EwOp::SIGN:
            return a > 0 ? 1.0f : a < 0 ? -1.0f : 0.0f;
        case EwOp::ERF:
            return static_cast<float>(std::erf(d));
        case EwOp::ERFC:
            return static_cast<float>(std::erfc(d));
        case EwOp::LOG1P:
            return static_cast<float>(std::log1p(d));
        case EwOp::EXPM1:
            return static_cast<float>(std::expm1(d));
        case EwOp::EXP2:
            return static_cast<float>(std::exp2(d));
        case EwOp::LOG2:
            return static_cast<float>(std::log2(d));
        case EwOp::LOG10:
            return static_cast<float>(std::log10(d));
        case EwOp::TAN:
            return static_cast<float>(std::tan(d));
        case EwOp::ASIN:
            return static_cast<float>(std::asin(d));
        case EwOp::ACOS:
            return static_cast<float>(std::acos(d));
        case EwOp::ATAN:
            return static_cast<float>(std::atan(d));
        case EwOp::SINH:
            return static_cast<float>(std::sinh(d));
        case EwOp::COSH:
            return static_cast<float>(std::cosh(d));
        case EwOp::ASINH:
            return static_cast<float>(std::asinh(d));
        case EwOp::ACOSH:
            return static_cast<float>(std::acosh(d));
        case EwOp::ATANH:
            return static_cast<float>(std::atanh(d));
        case EwOp::CAST:
            return a;
        case EwOp::ADD:
            return s.alpha == 1.0f ? a + b : std::fma(b, s.alpha, a);
        case EwOp::SUB:
            return s.alpha == 1.0f ? a - b : std::fma(b, -s.alpha, a);
        case EwOp::MUL:
            return a * b;
        case EwOp::DIV:
            return a / b;
        case EwOp::MAX:
            return fmax_nan(a, b);
        case EwOp::MIN:
            return fmin_nan(a, b);
        case EwOp::EQ:
            return a == b ? 1.0f : 0.0f;
        case EwOp::NE:
            return a != b ? 1.0f : 0.0f;
        case EwOp::LT:
            return a < b ? 1.0f : 0.0f;
        case EwOp::LE:
            return a <= b ? 1.0f : 0.0f;
        case EwOp::GT:
            return a > b ? 1.0f : 0.0f;
        case EwOp::GE:
            return a >= b ? 1.0f : 0.0f;
        case EwOp::WHERE:
            return c != 0.0f || std::isnan(c) ? a : b;
        case EwOp::AFFINE:
            return std::fma(a, s.scale, s.shift);
        case EwOp::CLAMP:
            return fmin_nan(fmax_nan(a, b), c);
        default:
            return NAN;
    }
}

// Functions the ISA evaluates in double and rounds: within 1 ulp of the output type.
bool double_evaluated(EwOp op) {
    switch (op) {
        case EwOp::GELU:
        case EwOp::GELU_TANH:
        case EwOp::SILU:
        case EwOp::SIGMOID:
        case EwOp::EXP:
        case EwOp::LOG:
        case EwOp::TANH:
        case EwOp::RSQRT:
        case EwOp::SIN:
        case EwOp::COS:
            return true;
        default:
            return op >= EwOp::ERF && op <= EwOp::ATANH;
    }
}

// Input values: uniform in [lo, hi] with special values sprinkled in.
void fill(DType t, uint8_t* p, uint64_t n, std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {NAN, inf, -inf, 0.0f, -0.0f, 1e-41f, 3e-6f, -7e-39f, 1.0f, -1.0f};
    const uint64_t es = isa::dtype_size(t);
    for (uint64_t i = 0; i < n; ++i) {
        float v = d(rng);
        if (rng() % 53 == 0) v = specials[rng() % (sizeof specials / sizeof specials[0])];
        if (t == DType::I8 || t == DType::I32) v = std::nearbyint(v);
        store_elem(t, v, p + i * es);
    }
}

struct Range {
    float lo, hi;
};

Range input_range(EwOp op) {
    switch (op) {
        case EwOp::EXP:
        case EwOp::SIGMOID:
            return {-30, 30};
        case EwOp::LOG:
        case EwOp::SQRT:
        case EwOp::RSQRT:
            return {-2, 1000};
        case EwOp::SIN:
        case EwOp::COS:
        case EwOp::TAN:
            return {-300, 300};
        case EwOp::LOG2:
        case EwOp::LOG10:
            return {-2, 1000};
        case EwOp::LOG1P:
            return {-1.5f, 100};
        case EwOp::ASIN:
        case EwOp::ACOS:
        case EwOp::ATANH:
            return {-1.2f, 1.2f};
        case EwOp::ACOSH:
            return {0.5f, 100};
        case EwOp::EXPM1:
        case EwOp::SINH:
        case EwOp::COSH:
            return {-100, 100};
        case EwOp::EXP2:
            return {-150, 130};
        default:
            return {-8, 8};
    }
}

uint64_t operand_elems(const EwShape& s, const EwOperand& o) {
    switch (o.mode) {
        case Bcast::NONE:
            return ew_elements(s);
        case Bcast::ROW:
            return s.cols;
        case Bcast::COL:
            return s.rows;
        case Bcast::SCALAR:
            return 1;
        default:
            return 0;
    }
}

float operand_value(const EwShape& s, const EwOperand& o, const uint8_t* base, uint64_t i) {
    const uint64_t es = isa::dtype_size(o.t);
    switch (o.mode) {
        case Bcast::NONE:
            return load_elem(o.t, base + i * es);
        case Bcast::ROW:
            return load_elem(o.t, base + (i % s.cols) * es);
        case Bcast::COL:
            return load_elem(o.t, base + (i / s.cols) * es);
        case Bcast::SCALAR:
            return load_elem(o.t, base);
        default:
            return o.imm;
    }
}

bool has_b(EwOp op) { return !ew_is_unary(op) && op != EwOp::AFFINE; }
bool has_cond(EwOp op) { return op == EwOp::WHERE || op == EwOp::CLAMP; }

// Runs s with the plan (cores, chunk) and checks every output element and the bytes after it.
// Broadcast operands start `skew` elements past a stick boundary.
void check(const EwShape& s, uint32_t cores, uint64_t chunk = 0, uint32_t seed = 1,
           uint64_t skew = 3) {
    SCOPED_TRACE(testing::Message()
                 << ew_name(s.op) << " " << s.rows << "x" << s.cols << " a " << dtype_name(s.a.t)
                 << "/" << int(s.a.mode) << " b " << dtype_name(s.b.t) << "/" << int(s.b.mode)
                 << " out " << dtype_name(s.out) << " cores " << cores << " chunk " << chunk);
    const EwPlan p = ew_make_plan(s, cores, kLxBudget, chunk);
    const auto image = build_elementwise(s, p);
    const uint64_t n = ew_elements(s), oes = isa::dtype_size(s.out);
    std::mt19937 rng(seed);
    const Range r = input_range(s.op);
    // layout: a, out (+ 2 sticks of sentinel), b, cond
    std::vector<uint64_t> args(4, 0);
    uint64_t at = 0;
    auto place = [&](const EwOperand& o) {
        const uint64_t es = isa::dtype_size(o.t);
        const uint64_t addr = at + (o.mode == Bcast::NONE ? 0 : skew * es);
        at = up128(addr + operand_elems(s, o) * es + 1);
        return addr;
    };
    args[0] = place(s.a);
    args[1] = at;
    at = up128(at + n * oes) + 256;
    if (has_b(s.op)) args[2] = place(s.b);
    if (has_cond(s.op)) args[3] = place(s.cond);
    std::vector<uint8_t> mem(at, kSentinel);
    fill(s.a.t, &mem[args[0]], operand_elems(s, s.a), rng, r.lo, r.hi);
    if (has_b(s.op)) fill(s.b.t, &mem[args[2]], operand_elems(s, s.b), rng, r.lo, r.hi);
    if (s.op == EwOp::WHERE) fill(s.cond.t, &mem[args[3]], operand_elems(s, s.cond), rng, -1, 1);
    if (s.op == EwOp::CLAMP) fill(s.cond.t, &mem[args[3]], operand_elems(s, s.cond), rng, 0, 9);
    const std::vector<uint8_t> before = mem;
    // the program serves every value of s's scalars: they are launch arguments 4, 5, ...
    const RunResult res =
        run_image(image, p.cores, ew_launch_args(s, args[0], args[1], args[2], args[3]), mem);
    ASSERT_EQ(res.error, 0) << res.message;
    uint64_t inexact = 0;
    for (uint64_t i = 0; i < n; ++i) {
        const float a = operand_value(s, s.a, &before[args[0]], i);
        const float b = has_b(s.op) ? operand_value(s, s.b, &before[args[2]], i) : 0.0f;
        const float c = has_cond(s.op) ? operand_value(s, s.cond, &before[args[3]], i) : 0;
        uint8_t want[4];
        store_elem(s.out, reference(s, a, b, c), want);
        const uint8_t* got = &mem[args[1] + i * oes];
        const uint64_t d = ulp_distance(s.out, got, want);
        if (d == 0) continue;
        ++inexact;
        ASSERT_TRUE(double_evaluated(s.op) && d <= 1)
            << "element " << i << " of " << n << ": a " << a << " b " << b << " c " << c << " got "
            << load_elem(s.out, got) << " want " << load_elem(s.out, want) << " (" << d << " ulp)";
    }
    // a double-evaluated function is correctly rounded but for rare double roundings
    EXPECT_LE(inexact, n / 100 + 1);
    for (uint64_t i = args[1] + n * oes; i < up128(args[1] + n * oes) + 256; ++i)
        ASSERT_EQ(mem[i], kSentinel) << "byte " << i - args[1] - n * oes << " after the output";
    for (uint64_t i = 0; i < mem.size(); ++i)
        if (i < args[1] || i >= args[1] + n * oes) {
            ASSERT_EQ(mem[i], before[i]) << "byte " << i;
        }
}

EwShape flat(EwOp op, uint64_t n, DType t, DType out) {
    EwShape s;
    s.op = op;
    s.rows = 1, s.cols = n;
    s.a.t = t;
    s.b.t = t;
    s.out = out;
    return s;
}

TEST(OpsElementwise, UnaryAllSizesTypesAndCoreCounts) {
    for (uint8_t o = 0; o <= static_cast<uint8_t>(EwOp::CAST); ++o)
        for (DType t : kFloats)
            for (uint64_t n : kSizes)
                for (uint32_t cores : {1u, 32u}) {
                    const EwOp op = static_cast<EwOp>(o);
                    check(flat(op, n, t, t), cores);
                    if (HasFatalFailure()) return;
                }
}

TEST(OpsElementwise, CastsBetweenEveryTypePair) {
    const DType all[] = {DType::F16, DType::BF16, DType::F32, DType::I8, DType::I32};
    for (DType in : kFloats)
        for (DType out : all)
            for (uint64_t n : {1ull, 65ull, 4097ull, 100003ull})
                for (uint32_t cores : {1u, 32u}) {
                    check(flat(EwOp::CAST, n, in, out), cores);
                    if (HasFatalFailure()) return;
                }
    // from the integer types
    for (DType in : {DType::I8, DType::I32})
        for (DType out : kFloats) check(flat(EwOp::CAST, 4097, in, out), 7);
}

TEST(OpsElementwise, UnaryWithAnotherOutputType) {
    for (EwOp op : {EwOp::EXP, EwOp::SIGMOID, EwOp::GELU, EwOp::RELU, EwOp::SQRT}) {
        check(flat(op, 4097, DType::F32, DType::F16), 32);
        check(flat(op, 4097, DType::F16, DType::F32), 32);
        check(flat(op, 1000, DType::BF16, DType::F32), 3);
    }
}

// The documented sigmoid formula is accurate, not just what the program computes: within 2 fp32
// ulps of the true function (x > -87, where exp(-x) is finite).
TEST(OpsElementwise, SigmoidFormulaIsAccurate) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-87, 40);
    EwShape s = flat(EwOp::SIGMOID, 1, DType::F32, DType::F32);
    for (int i = 0; i < 200000; ++i) {
        const float x = d(rng);
        const float got = reference(s, x, 0, 0);
        const float want = static_cast<float>(1.0 / (1.0 + std::exp(-double(x))));
        uint8_t g[4], w[4];
        std::memcpy(g, &got, 4), std::memcpy(w, &want, 4);
        ASSERT_LE(ulp_distance(DType::F32, g, w), 2u) << x;
    }
}

const EwOp kBinary[] = {EwOp::ADD, EwOp::SUB, EwOp::MUL, EwOp::DIV, EwOp::MAX, EwOp::MIN,
                        EwOp::EQ,  EwOp::NE,  EwOp::LT,  EwOp::LE,  EwOp::GT,  EwOp::GE};

TEST(OpsElementwise, BinarySameShape) {
    for (EwOp op : kBinary)
        for (DType t : kFloats)
            for (uint64_t n : kSizes)
                for (uint32_t cores : {1u, 32u}) {
                    check(flat(op, n, t, t), cores);
                    if (HasFatalFailure()) return;
                }
}

// Operands of different element sizes: every core's chunk starts on a stick of each operand.
TEST(OpsElementwise, MixedOperandAndOutputTypes) {
    for (EwOp op : {EwOp::ADD, EwOp::MUL, EwOp::DIV, EwOp::LT, EwOp::MAX})
        for (uint64_t n : {65ull, 4097ull, 300001ull})
            for (uint32_t cores : {1u, 5u, 32u}) {
                EwShape s = flat(op, n, DType::F32, DType::F16);
                s.b.t = DType::F16;
                check(s, cores);
                s.a.t = DType::BF16, s.b.t = DType::F32, s.out = DType::F32;
                check(s, cores);
                s.a.t = DType::F16, s.b.t = DType::BF16, s.out = DType::BF16;
                check(s, cores);
                if (HasFatalFailure()) return;
            }
}

TEST(OpsElementwise, CompareMasksInEveryType) {
    for (EwOp op : {EwOp::EQ, EwOp::NE, EwOp::LT, EwOp::LE, EwOp::GT, EwOp::GE})
        for (DType out : {DType::I8, DType::F16, DType::BF16, DType::F32, DType::I32}) {
            EwShape s = flat(op, 10007, DType::F16, out);
            check(s, 32);
            s.b.mode = Bcast::IMM, s.b.imm = 0.5f;
            check(s, 3);
        }
}

TEST(OpsElementwise, ScalarAndImmediateOperand) {
    for (EwOp op : kBinary)
        for (DType t : kFloats)
            for (uint64_t n : {1ull, 63ull, 4097ull, (1ull << 20) + 3})
                for (uint32_t cores : {1u, 32u}) {
                    EwShape s = flat(op, n, t, t);
                    s.b.mode = Bcast::SCALAR;
                    s.b.t = DType::F32;  // e.g. an fp32 scalar tensor on fp16 data
                    check(s, cores);
                    s.b.mode = Bcast::IMM;
                    s.b.imm = op == EwOp::DIV ? -3.0f : 0.375f;
                    check(s, cores);
                    if (HasFatalFailure()) return;
                }
}

// [R, C] op [C] (ROW) and [R, C] op [R, 1] (COL), for shapes whose rows do not start on sticks.
TEST(OpsElementwise, RowAndColumnBroadcast) {
    const std::pair<uint64_t, uint64_t> shapes[] = {{1, 1},    {3, 7},      {65, 63}, {1000, 1},
                                                    {7, 4097}, {129, 1000}, {64, 64}, {2, 65537}};
    for (EwOp op : {EwOp::ADD, EwOp::SUB, EwOp::MUL, EwOp::DIV, EwOp::MAX, EwOp::GE})
        for (auto [R, C] : shapes)
            for (Bcast m : {Bcast::ROW, Bcast::COL})
                for (DType t : kFloats)
                    for (uint32_t cores : {1u, 32u}) {
                        EwShape s = flat(op, 0, t, t);
                        s.rows = R, s.cols = C;
                        s.b.mode = m;
                        check(s, cores);
                        if (HasFatalFailure()) return;
                    }
    // an fp32 bias on bf16 rows, small chunks: many chunks straddle rows
    EwShape s = flat(EwOp::ADD, 0, DType::BF16, DType::BF16);
    s.rows = 333, s.cols = 77, s.b.mode = Bcast::ROW, s.b.t = DType::F32;
    for (uint64_t chunk : {64ull, 128ull, 4096ull}) check(s, 4, chunk);
    s.b.mode = Bcast::COL;
    for (uint64_t chunk : {64ull, 192ull, 8192ull}) check(s, 4, chunk);
}

// A row operand too long to stay in LX is streamed with every chunk.
TEST(OpsElementwise, StreamedRowOperand) {
    EwShape s = flat(EwOp::SUB, 0, DType::F32, DType::F32);
    s.rows = 3, s.cols = 200003, s.b.mode = Bcast::ROW;
    ASSERT_FALSE(ew_row_resident(s, kLxBudget));
    for (uint32_t cores : {1u, 32u}) check(s, cores);
    check(s, 2, 4096);
    s.op = EwOp::WHERE, s.cond.mode = Bcast::ROW, s.cond.t = DType::I8, s.b.mode = Bcast::NONE;
    check(s, 5, 8192);
}

TEST(OpsElementwise, BroadcastFirstOperand) {
    for (EwOp op : kBinary)
        for (Bcast m : {Bcast::ROW, Bcast::COL, Bcast::SCALAR, Bcast::IMM})
            for (uint32_t cores : {1u, 32u}) {
                EwShape s = flat(op, 0, DType::F16, DType::F16);
                s.rows = 67, s.cols = 129;
                s.a.mode = m, s.a.imm = 1.5f;
                check(s, cores);
                if (HasFatalFailure()) return;
            }
    // both broadcast: an outer sum a[c] + b[r], an outer compare, a scalar over a column
    for (EwOp op : {EwOp::ADD, EwOp::SUB, EwOp::DIV, EwOp::LT, EwOp::MIN}) {
        EwShape s = flat(op, 0, DType::F32, DType::F16);
        s.rows = 129, s.cols = 65, s.a.mode = Bcast::ROW, s.b.mode = Bcast::COL;
        check(s, 32);
        s.a.mode = Bcast::SCALAR;
        check(s, 3);
        s.alpha = 2.0f;
        if (op == EwOp::ADD || op == EwOp::SUB) check(s, 3);
    }
}

TEST(OpsElementwise, AlphaAndAffine) {
    for (DType t : kFloats)
        for (uint64_t n : {7ull, 4097ull, (1ull << 20) + 3})
            for (uint32_t cores : {1u, 32u}) {
                for (EwOp op : {EwOp::ADD, EwOp::SUB}) {
                    EwShape s = flat(op, n, t, t);
                    s.alpha = -0.3f;
                    check(s, cores);
                    s.b.mode = Bcast::SCALAR;  // alpha with a broadcast b
                    check(s, cores);
                }
                EwShape s = flat(EwOp::AFFINE, n, t, t);
                s.scale = 1.7f, s.shift = -0.25f;
                check(s, cores);
                if (HasFatalFailure()) return;
            }
    EwShape s = flat(EwOp::ADD, 0, DType::F16, DType::F32);
    s.rows = 100, s.cols = 33, s.alpha = 3.0f, s.b.mode = Bcast::ROW;
    check(s, 6);
    s.a.mode = Bcast::COL, s.b.mode = Bcast::NONE;
    check(s, 6);
}

TEST(OpsElementwise, WhereSelect) {
    for (DType t : kFloats)
        for (uint64_t n : kSizes)
            for (uint32_t cores : {1u, 32u}) {
                EwShape s = flat(EwOp::WHERE, n, t, t);
                s.cond.t = DType::I8;  // a torch bool mask
                check(s, cores);
                s.cond.t = t;
                s.b.mode = Bcast::IMM, s.b.imm = -INFINITY;  // masked_fill
                check(s, cores);
                if (HasFatalFailure()) return;
            }
    // broadcast masks and values
    EwShape s = flat(EwOp::WHERE, 0, DType::F16, DType::F16);
    s.rows = 77, s.cols = 300;
    for (Bcast cm : {Bcast::NONE, Bcast::SCALAR, Bcast::ROW, Bcast::COL})
        for (Bcast am : {Bcast::NONE, Bcast::SCALAR, Bcast::IMM, Bcast::ROW, Bcast::COL})
            for (Bcast bm : {Bcast::NONE, Bcast::IMM, Bcast::COL}) {
                s.cond.mode = cm, s.a.mode = am, s.b.mode = bm;
                s.cond.t = DType::F32, s.a.imm = 2.5f, s.b.imm = -1.0f;
                check(s, 7);
                if (HasFatalFailure()) return;
            }
}

// Host values (a number operand, alpha, scale and shift) are launch arguments: shapes that
// differ only in their values build one program, and it computes every value exactly as the
// old immediate did: the value rounded to fp32, then the op in fp32 rounded once to the output
// type (NaN, infinities, -0, values the output type overflows or flushes, fp32 subnormals).
TEST(OpsElementwise, ScalarsAreLaunchArguments) {
    const float inf = std::numeric_limits<float>::infinity();
    const float values[] = {0.375f,   -0.0f,    0.0f,    NAN,         inf,      -inf,
                            65520.0f, 65504.0f, 3.0e-8f, 1.00390625f, -3.4e38f, 1e-45f,
                            -7.25f,   1e10f,    0.1f,    2.0f};
    // alpha 1 with a full a is one plain pass, a program of its own (every other alpha shares one)
    auto value_shape = [](EwShape s, float v) {
        s.a.imm = v, s.b.imm = -v, s.cond.imm = v * 0.5f;
        if (s.op == EwOp::ADD || s.op == EwOp::SUB) s.alpha = v == 1.0f ? 3.0f : v;
        s.scale = v, s.shift = 1.0f - v;
        return s;
    };
    for (DType t : kFloats) {
        std::vector<EwShape> shapes;
        for (EwOp op : kBinary) {
            EwShape s = flat(op, 999, t, t);
            s.b.mode = Bcast::IMM;
            shapes.push_back(s);
        }
        for (EwOp op : {EwOp::ADD, EwOp::SUB}) {
            EwShape s = flat(op, 999, t, t);
            shapes.push_back(s);  // alpha with a full b
            s.b.mode = Bcast::IMM;
            shapes.push_back(s);  // alpha and a number b
            s.b.mode = Bcast::COL, s.rows = 37, s.cols = 27;
            shapes.push_back(s);  // alpha with a broadcast b
        }
        shapes.push_back(flat(EwOp::AFFINE, 999, t, t));
        EwShape w = flat(EwOp::WHERE, 999, t, t);
        w.cond.t = DType::I8;
        for (Bcast am : {Bcast::NONE, Bcast::IMM})
            for (Bcast bm : {Bcast::NONE, Bcast::IMM})
                if (am == Bcast::IMM || bm == Bcast::IMM) {
                    w.a.mode = am, w.b.mode = bm;
                    shapes.push_back(w);
                }
        EwShape c = flat(EwOp::CLAMP, 999, t, t);
        c.cond.t = DType::F32;
        for (Bcast lo : {Bcast::NONE, Bcast::IMM})
            for (Bcast hi : {Bcast::NONE, Bcast::IMM}) {
                c.b.mode = lo, c.cond.mode = hi;
                shapes.push_back(c);
            }
        for (const EwShape& base : shapes) {
            const EwPlan p = ew_make_plan(base, 3, kLxBudget);
            std::vector<uint8_t> first;
            for (float v : values) {
                const EwShape s = value_shape(base, v);
                ASSERT_EQ(ew_scalar_args(s).size(), ew_scalar_args(ew_structure(s)).size());
                const auto image = build_elementwise(s, p);
                if (first.empty())
                    first = image;
                else
                    ASSERT_EQ(image, first) << ew_name(s.op) << " " << v;
                check(s, 3, p.chunk);
                if (HasFatalFailure()) return;
            }
        }
    }
    // float alpha 1 (a plain add) and every other alpha: two programs, both right
    EwShape s = flat(EwOp::SUB, 999, DType::F16, DType::F16);
    const EwPlan p = ew_make_plan(s, 3, kLxBudget);
    s.alpha = 1.0f;
    const auto plain = build_elementwise(s, p);
    check(s, 3);
    s.alpha = 0.5f;
    EXPECT_NE(build_elementwise(s, p), plain);
    check(s, 3);
    // integers: one program for every scalar the op takes in a's type; the wrapping ops take
    // any int64, the others keep a value outside the type as an immediate
    EwShape i = flat(EwOp::LT, 999, DType::I8, DType::I8);
    i.b.mode = Bcast::IMM;
    const EwPlan ip = ew_make_plan(i, 3, kLxBudget);
    i.b.iimm = 5;
    const auto lt5 = build_elementwise(i, ip);
    i.b.iimm = -128;
    EXPECT_EQ(build_elementwise(i, ip), lt5);
    i.b.iimm = 300;
    EXPECT_NE(build_elementwise(i, ip), lt5);
    EXPECT_EQ(ew_structure(i).b.iimm, 300);
    i.op = EwOp::MUL;
    i.b.iimm = 300;
    const auto mul = build_elementwise(i, ip);
    i.b.iimm = -7;
    EXPECT_EQ(build_elementwise(i, ip), mul);
    EXPECT_EQ(ew_scalar_args(i), std::vector<uint64_t>{uint64_t(-7)});
    // integer alpha with a full b: 1, -1 and one program for every other alpha
    i.op = EwOp::ADD, i.b.mode = Bcast::NONE, i.ialpha = 3;
    const auto add3 = build_elementwise(i, ip);
    i.ialpha = -100;
    EXPECT_EQ(build_elementwise(i, ip), add3);
    i.ialpha = -1;
    EXPECT_NE(build_elementwise(i, ip), add3);
}

// Many small chunks per core (the double-buffer parity alternates, the last chunk is partial).
TEST(OpsElementwise, SmallChunks) {
    for (DType t : kFloats)
        for (uint64_t chunk : {64ull, 192ull, 1024ull}) {
            check(flat(EwOp::GELU, 100003, t, t), 1, chunk);
            check(flat(EwOp::DIV, 100003, t, t), 3, chunk);
        }
}

TEST(OpsElementwise, PlannerPriceEqualsTheRealRun) {
    Pricer pricer(default_engine_config());
    for (EwOp op : {EwOp::RELU, EwOp::SIGMOID, EwOp::ADD, EwOp::MUL})
        for (uint64_t n : {65ull, 100003ull}) {
            EwShape s = flat(op, n, DType::F16, DType::F16);
            if (op == EwOp::MUL) s.b.mode = Bcast::IMM, s.b.imm = 0.7f;  // a launch-arg scalar
            const EwPlan p = plan_elementwise(pricer, s, 32);
            ASSERT_GT(p.cycles, 0u);
            ASSERT_LE(p.cores, 32u);
            std::vector<uint8_t> mem(up128(n * 2) * 3, 0);
            const RunResult r =
                run_image(build_elementwise(s, p), p.cores,
                          ew_launch_args(s, 0, up128(n * 2), 2 * up128(n * 2), 0), mem);
            ASSERT_EQ(r.error, 0) << r.message;
            EXPECT_EQ(r.stats.total_cycles, p.cycles) << ew_plan_name(p);
            // the chosen plan is no slower than every fixed alternative
            for (uint32_t c : {1u, 8u, 32u}) {
                const EwPlan q = price_elementwise(pricer, s, ew_make_plan(s, c, kLxBudget));
                EXPECT_LE(p.cycles, q.cycles) << ew_plan_name(q);
            }
        }
}

// Operands more than a core's 256 MiB span apart: every transfer moves the span first.
TEST(OpsElementwise, OperandsFarApart) {
    EwShape s = flat(EwOp::ADD, 100000, DType::F32, DType::F32);
    const EwPlan p = ew_make_plan(s, 32, kLxBudget);
    const uint64_t gib = 1ull << 30;
    std::vector<uint8_t> none;
    const RunResult r =
        run_image(build_elementwise(s, p), 32, ew_launch_args(s, 0, 3 * gib, gib + 4096, 0), none,
                  true, 4 * gib);
    EXPECT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.ddr_read_bytes, 2 * up128(100000 * 4));
}

TEST(OpsElementwise, RejectsWhatItCannotCompute) {
    EwShape s = flat(EwOp::EXP, 10, DType::F16, DType::F16);
    s.a.mode = Bcast::ROW;
    EXPECT_THROW(ew_validate(s), std::invalid_argument);
    s = flat(EwOp::ADD, 0, DType::F16, DType::F16);
    EXPECT_THROW(ew_validate(s), std::invalid_argument);
    s = flat(EwOp::WHERE, 10, DType::F16, DType::F16);
    s.cond.mode = Bcast::IMM;
    EXPECT_THROW(ew_validate(s), std::invalid_argument);
    s = flat(EwOp::ADD, 10, DType::I8, DType::F16);
    EXPECT_THROW(ew_validate(s), std::invalid_argument);
}

}  // namespace
}  // namespace spyre::ops
