// SPDX-License-Identifier: MIT
// The float elementwise ops' scalars are launch arguments (spyre/ops.h on the simulator): 1000
// distinct scalars through every op family that takes one (binary ops with a number, ADD/SUB
// alpha, where with numbers, clamp bounds) make exactly one plan and load exactly one program
// per op, type and shape, and every call equals a host reference of the ISA's numerics bit for
// bit: the number rounded to fp32 (as the immediate it used to be), the op in fp32, rounded once
// to the output type, with NaN, infinities, -0, fp16/bf16 overflow and subnormals among the
// scalars and the inputs. (The integer ops: ops_int_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

constexpr spyre_dtype kFloats[] = {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16};
constexpr int kScalars = 1000;

float fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }
float fmin_nan(float a, float b) { return (a < b || a != a) ? a : b; }

// kScalars distinct doubles: special values first (NaN, infinities, signed zeros, values at the
// fp16 overflow edge, fp16/bf16 subnormals, doubles that fp32 rounds, overflows or flushes, a
// bf16 tie), then values of every magnitude from -2^20 to 2^20.
std::vector<double> scalars(uint32_t seed, int n = kScalars) {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> v = {std::nan(""), inf,     -inf,       0.0,   -0.0, 1.0, -1.0,
                             65504.0,      65520.0, -65519.0,   6e-8,  1e-5, 0.1, 1 + 1e-9,
                             3.5e38,       -1e-46,  1.00390625, 1e-40, -2.5, 1e20};
    std::mt19937_64 rng(seed);
    std::set<uint64_t> seen;
    for (double x : v) {
        uint64_t b;
        std::memcpy(&b, &x, 8);
        seen.insert(b);
    }
    while (int(v.size()) < n) {
        const double m = std::uniform_real_distribution<double>(-1, 1)(rng);
        const double x = std::ldexp(m, int(rng() % 41) - 20);
        uint64_t b;
        std::memcpy(&b, &x, 8);
        if (seen.insert(b).second) v.push_back(x);
    }
    return v;
}

// Inputs in [-4, 4] with special values among them.
void fill_specials(DevArray& a, size_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    const float sp[] = {NAN, inf, -inf, 0.0f, -0.0f, 65000.0f, -1e-6f, 3.0f, 1e-40f};
    std::mt19937 rng(7);
    for (size_t i = 0; i < n; ++i) {
        float v = std::uniform_real_distribution<float>(-4, 4)(rng);
        if (i % 17 == 0) v = sp[(i / 17) % std::size(sp)];
        put(a.t, a.host, i, v);
    }
    ASSERT_SPYRE(spyre_memcpy_htod(a.buf, 0, a.host.data(), a.host.size()));
}

struct Counts {
    uint64_t plans, plan_hits, pinned, evictions;
};

Counts counts(spyre_device_t dev) {
    Counts c{};
    uint64_t hits = 0, misses = 0;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_op_get_cache_stats(&hits, &misses));
    spyre_runtime_stats st{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_runtime_stats(dev, &st));
    return {misses, hits, st.pinned_programs, st.pinned_program_evictions};
}

// A family of calls: `call(i, out)` queues call i into the output tensor `out`; `want(i, k)`
// is the fp32 value of element k of call i (rounded to the output type here). Every call writes
// its own slice of one output buffer, so a family needs one synchronize.
struct Family {
    spyre_dtype t;
    int64_t n;
    std::function<spyre_status(int, const spyre_tensor&)> call;
    std::function<float(int, int64_t)> want;
};

// Runs `calls` calls of f and checks every output element bit for bit (any NaN for a NaN).
void run_family(spyre_device_t dev, const Family& f, int calls) {
    const int64_t slice = int64_t(((uint64_t(f.n) * esize(f.t) + 127) / 128 * 128) / esize(f.t));
    DevArray out(dev, f.t, size_t(slice * calls), 3);
    for (int i = 0; i < calls; ++i) {
        const spyre_tensor to = view(out, {f.n}, {1}, uint64_t(slice * i));
        ASSERT_EQ(SPYRE_SUCCESS, f.call(i, to)) << spyre_last_error() << " call " << i;
    }
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    out.fetch();
    std::vector<uint8_t> want(esize(f.t));
    for (int i = 0; i < calls; ++i)
        for (int64_t k = 0; k < f.n; ++k) {
            const float w = f.want(i, k);
            const size_t at = size_t(slice * i + k) * esize(f.t);
            if (std::isnan(w)) {
                ASSERT_TRUE(std::isnan(out.at(size_t(slice * i + k)))) << "call " << i << " " << k;
                continue;
            }
            put(f.t, want, 0, w);
            ASSERT_EQ(0, std::memcmp(&out.host[at], want.data(), want.size()))
                << "call " << i << " element " << k << ": got " << out.at(size_t(slice * i + k))
                << " want " << w;
        }
}

// The reference rounds a double scalar to fp32 first, like the op library.
float f32(double v) { return static_cast<float>(v); }

float binary_ref(spyre_binary_op op, float a, float b) {
    switch (op) {
        case SPYRE_BINARY_ADD:
            return a + b;
        case SPYRE_BINARY_SUB:
            return a - b;
        case SPYRE_BINARY_MUL:
            return a * b;
        case SPYRE_BINARY_DIV:
            return a / b;
        case SPYRE_BINARY_MAX:
            return fmax_nan(a, b);
        case SPYRE_BINARY_MIN:
            return fmin_nan(a, b);
        case SPYRE_BINARY_EQ:
            return a == b;
        case SPYRE_BINARY_NE:
            return a != b;
        case SPYRE_BINARY_LT:
            return a < b;
        case SPYRE_BINARY_LE:
            return a <= b;
        case SPYRE_BINARY_GT:
            return a > b;
        default:
            return a >= b;
    }
}

// x OP number, 1000 numbers per op and type: one plan and one program each.
TEST_F(Ops, FloatScalarOperandsShareOneProgram) {
    constexpr int64_t n = 419;  // a size no other test plans
    const auto s = scalars(1);
    const Counts c0 = counts(dev);
    int classes = 0;
    for (spyre_dtype t : kFloats) {
        DevArray x(dev, t, n, 11);
        fill_specials(x, n);
        if (HasFatalFailure()) return;
        const spyre_tensor tx = view(x, {n}, {1});
        for (int o = SPYRE_BINARY_ADD; o <= SPYRE_BINARY_GE; ++o) {
            const auto op = static_cast<spyre_binary_op>(o);
            Family f{t, n,
                     [&](int i, const spyre_tensor& to) {
                         return spyre_op_binary(nullptr, op, &tx, nullptr, s[i], 1.0, &to);
                     },
                     [&](int i, int64_t k) { return binary_ref(op, x.at(size_t(k)), f32(s[i])); }};
            run_family(dev, f, kScalars);
            if (HasFatalFailure()) return;
            ++classes;
        }
    }
    const Counts c1 = counts(dev);
    EXPECT_EQ(c1.plans - c0.plans, uint64_t(classes));
    EXPECT_EQ(c1.plan_hits - c0.plan_hits, uint64_t(classes * (kScalars - 1)));
    EXPECT_EQ(c1.pinned - c0.pinned, uint64_t(classes));
    EXPECT_EQ(c1.evictions, c0.evictions);
}

// a + alpha b and a - alpha b (SGD's p.add_(grad, alpha=-lr) with a schedule), with a tensor b
// and with a number b: one program for every alpha but 1 (a plain add, its own program).
TEST_F(Ops, FloatAlphaSharesOneProgram) {
    constexpr int64_t n = 421;
    const auto s = scalars(2), bs = scalars(3);
    const Counts c0 = counts(dev);
    int classes = 0;
    for (spyre_dtype t : kFloats) {
        DevArray x(dev, t, n, 12), y(dev, t, n, 13);
        fill_specials(x, n);
        if (HasFatalFailure()) return;
        const spyre_tensor tx = view(x, {n}, {1}), ty = view(y, {n}, {1});
        for (spyre_binary_op op : {SPYRE_BINARY_ADD, SPYRE_BINARY_SUB})
            for (bool number_b : {false, true}) {
                // alpha 1 (rounded to fp32: 1 + 1e-9 too) is the plain add's program: left
                // out here, so one program serves all
                auto alpha = [&](int i) { return f32(s[i]) == 1.0f ? 0.75 : s[i]; };
                Family f{t, n,
                         [&](int i, const spyre_tensor& to) {
                             return spyre_op_binary(nullptr, op, &tx, number_b ? nullptr : &ty,
                                                    bs[i], alpha(i), &to);
                         },
                         [&](int i, int64_t k) {
                             const float a = x.at(size_t(k));
                             const float b = number_b ? f32(bs[i]) : y.at(size_t(k));
                             const float al = f32(alpha(i));
                             return std::fma(b, op == SPYRE_BINARY_SUB ? -al : al, a);
                         }};
                run_family(dev, f, kScalars);
                if (HasFatalFailure()) return;
                ++classes;
            }
    }
    const Counts c1 = counts(dev);
    EXPECT_EQ(c1.plans - c0.plans, uint64_t(classes));
    EXPECT_EQ(c1.pinned - c0.pinned, uint64_t(classes));
    EXPECT_EQ(c1.evictions, c0.evictions);
}

// where(cond, number, x) (masked_fill), where(cond, x, number), where(cond, number, number) and
// clamp(x, number, number): one program per form and type.
TEST_F(Ops, WhereAndClampNumbersShareOneProgram) {
    constexpr int64_t n = 431;
    const auto s = scalars(4), s2 = scalars(5);
    const Counts c0 = counts(dev);
    int classes = 0;
    for (spyre_dtype t : kFloats) {
        DevArray x(dev, t, n, 14), m(dev, t, n, 15);  // m: a mask, nonzero where m > 0
        fill_specials(x, n);
        if (HasFatalFailure()) return;
        for (int64_t k = 0; k < n; ++k) put(t, m.host, size_t(k), k % 3 == 0 ? 0.0f : 1.0f);
        put(t, m.host, 5, NAN);  // a NaN mask element is true
        put(t, m.host, 6, -0.0f);
        ASSERT_SPYRE(spyre_memcpy_htod(m.buf, 0, m.host.data(), m.host.size()));
        const spyre_tensor tx = view(x, {n}, {1}), tm = view(m, {n}, {1});
        auto cond = [&](int64_t k) {
            const float c = m.at(size_t(k));
            return c != 0.0f || std::isnan(c);
        };
        for (int form = 0; form < 4; ++form) {
            Family f{
                t, n,
                [&](int i, const spyre_tensor& to) {
                    switch (form) {
                        case 0:
                            return spyre_op_where(nullptr, &tm, nullptr, s[i], &tx, 0, &to);
                        case 1:
                            return spyre_op_where(nullptr, &tm, &tx, 0, nullptr, s[i], &to);
                        case 2:
                            return spyre_op_where(nullptr, &tm, nullptr, s[i], nullptr, s2[i], &to);
                        default:
                            return spyre_op_clamp(nullptr, &tx, nullptr, s[i], nullptr, s2[i], &to);
                    }
                },
                [&](int i, int64_t k) {
                    const float a = x.at(size_t(k));
                    switch (form) {
                        case 0:
                            return cond(k) ? f32(s[i]) : a;
                        case 1:
                            return cond(k) ? a : f32(s[i]);
                        case 2:
                            return cond(k) ? f32(s[i]) : f32(s2[i]);
                        default:
                            return fmin_nan(fmax_nan(a, f32(s[i])), f32(s2[i]));
                    }
                }};
            run_family(dev, f, kScalars);
            if (HasFatalFailure()) return;
            ++classes;
        }
    }
    const Counts c1 = counts(dev);
    EXPECT_EQ(c1.plans - c0.plans, uint64_t(classes));
    EXPECT_EQ(c1.pinned - c0.pinned, uint64_t(classes));
    EXPECT_EQ(c1.evictions, c0.evictions);
}

}  // namespace
