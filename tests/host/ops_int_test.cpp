// SPDX-License-Identifier: MIT
// The op library's integer elementwise ops (spyre_op_binary_int, spyre_op_binary and
// spyre_op_unary on int8/int32/int64/uint8) against a 128-bit host reference: every op and type,
// odd sizes, 1 and many cores, every broadcast form, numbers, alpha, wraparound, empty tensors,
// casts to and from int64/uint8, a zero divisor failing the launch, and what is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

constexpr spyre_dtype kInts[] = {SPYRE_DTYPE_INT8, SPYRE_DTYPE_INT32, SPYRE_DTYPE_INT64,
                                 SPYRE_DTYPE_UINT8};

size_t isize(spyre_dtype t) {
    switch (t) {
        case SPYRE_DTYPE_INT8:
        case SPYRE_DTYPE_UINT8:
            return 1;
        case SPYRE_DTYPE_INT32:
        case SPYRE_DTYPE_FLOAT32:
            return 4;
        case SPYRE_DTYPE_INT64:
            return 8;
        default:
            return 2;
    }
}

int64_t wrap(spyre_dtype t, __int128 v) {
    const auto u = static_cast<unsigned __int128>(v);
    switch (t) {
        case SPYRE_DTYPE_INT8:
            return static_cast<int8_t>(static_cast<uint8_t>(u));
        case SPYRE_DTYPE_UINT8:
            return static_cast<uint8_t>(u);
        case SPYRE_DTYPE_INT32:
            return static_cast<int32_t>(static_cast<uint32_t>(u));
        default:
            return static_cast<int64_t>(static_cast<uint64_t>(u));
    }
}

// An integer array mirrored in a device buffer.
struct IntArray {
    spyre_dtype t;
    std::vector<int64_t> v;
    spyre_buffer_t buf = nullptr;
    IntArray(spyre_device_t dev, spyre_dtype dt, size_t n, uint32_t seed) : t(dt), v(n) {
        std::mt19937_64 rng(seed);
        for (auto& x : v) x = wrap(t, static_cast<int64_t>(rng()));
        const int64_t sp[] = {0, 1, -1, 7, -7, 3};
        for (size_t i = 0; i < std::size(sp) && i < n; ++i) v[(i * 3) % n] = wrap(t, sp[i]);
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, std::max<size_t>(n, 1) * isize(t), &buf));
        upload();
    }
    ~IntArray() { spyre_free(buf); }
    void upload() {
        std::vector<uint8_t> b(std::max<size_t>(v.size(), 1) * isize(t));
        for (size_t i = 0; i < v.size(); ++i) std::memcpy(&b[i * isize(t)], &v[i], isize(t));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(buf, 0, b.data(), b.size()));
    }
    std::vector<int64_t> fetch() const {
        std::vector<uint8_t> b(std::max<size_t>(v.size(), 1) * isize(t));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(b.data(), buf, 0, b.size()));
        std::vector<int64_t> r(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
            int64_t x = 0;
            std::memcpy(&x, &b[i * isize(t)], isize(t));
            r[i] = wrap(t, x);
        }
        return r;
    }
};

spyre_tensor iview(const IntArray& a, std::vector<int64_t> shape) {
    spyre_tensor t{};
    t.buffer = a.buf;
    t.dtype = a.t;
    t.ndim = static_cast<uint32_t>(shape.size());
    int64_t s = 1;
    for (size_t d = shape.size(); d-- > 0;) t.shape[d] = shape[d], t.strides[d] = s, s *= shape[d];
    return t;
}

int64_t ref(spyre_binary_op op, spyre_dtype t, int64_t a, int64_t b) {
    const __int128 x = a, y = b;
    const int w = static_cast<int>(isize(t)) * 8;
    auto fdiv = [&] {
        __int128 q = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return q;
    };
    switch (op) {
        case SPYRE_BINARY_ADD:
            return wrap(t, x + y);
        case SPYRE_BINARY_SUB:
            return wrap(t, x - y);
        case SPYRE_BINARY_MUL:
            return wrap(t, x * y);
        case SPYRE_BINARY_MAX:
            return std::max(a, b);
        case SPYRE_BINARY_MIN:
            return std::min(a, b);
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
        case SPYRE_BINARY_GE:
            return a >= b;
        case SPYRE_BINARY_FLOOR_DIVIDE:
            return wrap(t, fdiv());
        case SPYRE_BINARY_REMAINDER:
            return wrap(t, x - fdiv() * y);
        case SPYRE_BINARY_BITWISE_AND:
            return a & b;
        case SPYRE_BINARY_BITWISE_OR:
            return a | b;
        case SPYRE_BINARY_BITWISE_XOR:
            return a ^ b;
        case SPYRE_BINARY_LSHIFT:
            return (b < 0 || b >= w) ? 0 : wrap(t, x << b);
        case SPYRE_BINARY_RSHIFT:
            return (b < 0 || b >= w) ? (a < 0 ? -1 : 0) : wrap(t, x >> b);
        default:
            return 0;
    }
}

bool is_compare(spyre_binary_op op) { return op >= SPYRE_BINARY_EQ && op <= SPYRE_BINARY_GE; }
bool commutes(spyre_binary_op op) {
    return op != SPYRE_BINARY_FLOOR_DIVIDE && op != SPYRE_BINARY_REMAINDER &&
           op != SPYRE_BINARY_LSHIFT && op != SPYRE_BINARY_RSHIFT;
}

struct Form {
    std::vector<int64_t> a, b, out;  // b empty: a number
};

// Every binary op and integer type over the broadcast forms, against the reference.
TEST_F(Ops, IntegerBinaryOpsMatchReference) {
    const Form forms[] = {{{1001}, {1001}, {1001}},
                          {{5, 37}, {37}, {5, 37}},
                          {{5, 37}, {5, 1}, {5, 37}},
                          {{5, 37}, {}, {5, 37}},
                          {{5, 1}, {5, 37}, {5, 37}},
                          {{37}, {5, 37}, {5, 37}},
                          {{2, 3, 33}, {1, 3, 33}, {2, 3, 33}}};
    uint32_t seed = 1;
    for (int o = SPYRE_BINARY_ADD; o <= SPYRE_BINARY_RSHIFT; ++o) {
        const auto op = static_cast<spyre_binary_op>(o);
        if (op == SPYRE_BINARY_DIV) continue;  // true division: not an integer op
        for (spyre_dtype t : kInts)
            for (const Form& f : forms) {
                auto numel = [](const std::vector<int64_t>& s) {
                    int64_t n = 1;
                    for (int64_t d : s) n *= d;
                    return n;
                };
                IntArray a(dev, t, numel(f.a), seed++),
                    b(dev, t, f.b.empty() ? 1 : numel(f.b), seed++);
                const bool shift = op == SPYRE_BINARY_LSHIFT || op == SPYRE_BINARY_RSHIFT;
                for (auto& x : b.v) {
                    if (shift) x = wrap(t, (x & 127) % (isize(t) * 8 + 4));
                    if ((op == SPYRE_BINARY_FLOOR_DIVIDE || op == SPYRE_BINARY_REMAINDER) && x == 0)
                        x = 3;
                }
                b.upload();
                const spyre_dtype ot = is_compare(op) ? SPYRE_DTYPE_INT8 : t;
                IntArray out(dev, ot, numel(f.out), 99);
                const spyre_tensor ta = iview(a, f.a), tb = iview(b, f.b), to = iview(out, f.out);
                const int64_t number = b.v[0];
                const spyre_status st = spyre_op_binary_int(
                    nullptr, op, &ta, f.b.empty() ? nullptr : &tb, number, 1, &to);
                const bool a_broadcast = numel(f.a) != numel(f.out);
                if (a_broadcast && !commutes(op)) {
                    EXPECT_EQ(st, SPYRE_ERROR_NOT_SUPPORTED) << o << " " << t;
                    continue;
                }
                ASSERT_EQ(st, SPYRE_SUCCESS) << spyre_last_error() << " op " << o << " t " << t;
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                const auto got = out.fetch();
                // element (i) of out in each operand (numpy-style broadcast from the right)
                auto at = [&](const std::vector<int64_t>& shape, const std::vector<int64_t>& v,
                              int64_t i) {
                    if (shape.empty()) return v[0];
                    int64_t idx = 0, stride = 1, rest = i;
                    std::vector<int64_t> pos(f.out.size());
                    for (size_t d = f.out.size(); d-- > 0;)
                        pos[d] = rest % f.out[d], rest /= f.out[d];
                    const size_t off = f.out.size() - shape.size();
                    for (size_t d = shape.size(); d-- > 0;) {
                        idx += (shape[d] == 1 ? 0 : pos[d + off]) * stride;
                        stride *= shape[d];
                    }
                    return v[idx];
                };
                for (int64_t i = 0; i < numel(f.out); ++i) {
                    const int64_t x = at(f.a, a.v, i), y = at(f.b, b.v, i);
                    ASSERT_EQ(got[i], wrap(ot, ref(op, t, x, y)))
                        << "op " << o << " t " << t << " i " << i << " a " << x << " b " << y;
                }
            }
    }
}

TEST_F(Ops, IntegerAlphaWrapAndLargeTensors) {
    // a - alpha * b with alpha -3, full and numbers; int64 over many cores (1M + 3 elements)
    const int64_t n = (1 << 20) + 3;
    IntArray a(dev, SPYRE_DTYPE_INT64, n, 5), b(dev, SPYRE_DTYPE_INT64, n, 6),
        o(dev, SPYRE_DTYPE_INT64, n, 7);
    const spyre_tensor ta = iview(a, {n}), tb = iview(b, {n}), to = iview(o, {n});
    ASSERT_SPYRE(spyre_op_binary_int(nullptr, SPYRE_BINARY_SUB, &ta, &tb, 0, -3, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    auto got = o.fetch();
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], wrap(SPYRE_DTYPE_INT64, __int128(a.v[i]) + 3 * __int128(b.v[i]))) << i;
    ASSERT_SPYRE(spyre_op_binary_int(nullptr, SPYRE_BINARY_ADD, &ta, nullptr,
                                     std::numeric_limits<int64_t>::max(), 2, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    got = o.fetch();
    for (int64_t i = 0; i < n; i += 997)
        ASSERT_EQ(got[i],
                  wrap(SPYRE_DTYPE_INT64,
                       __int128(a.v[i]) + 2 * __int128(std::numeric_limits<int64_t>::max())));
    // spyre_op_binary takes integer tensors with whole numbers; 0.5 is refused
    ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_MUL, &ta, nullptr, -2.0, 1, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    got = o.fetch();
    EXPECT_EQ(got[5], wrap(SPYRE_DTYPE_INT64, __int128(a.v[5]) * -2));
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_binary(nullptr, SPYRE_BINARY_MUL, &ta, nullptr, 0.5, 1, &to));
    // a broadcast b with alpha != 1 is refused (the caller expands it)
    IntArray r(dev, SPYRE_DTYPE_INT64, 37, 8), m(dev, SPYRE_DTYPE_INT64, 5 * 37, 9);
    const spyre_tensor tr = iview(r, {37}), tm = iview(m, {5, 37});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_binary_int(nullptr, SPYRE_BINARY_ADD, &tm, &tr, 0, 2, &tm));
    // empty: nothing to do
    IntArray e(dev, SPYRE_DTYPE_INT32, 0, 1);
    const spyre_tensor te = iview(e, {0, 3});
    EXPECT_EQ(SPYRE_SUCCESS,
              spyre_op_binary_int(nullptr, SPYRE_BINARY_ADD, &te, nullptr, 1, 1, &te));
    // mixed operand types and a non-dense operand are refused
    IntArray i32(dev, SPYRE_DTYPE_INT32, n, 10);
    const spyre_tensor t32 = iview(i32, {n});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_binary_int(nullptr, SPYRE_BINARY_ADD, &ta, &t32, 0, 1, &to));
    spyre_tensor strided = iview(m, {5, 18});
    strided.strides[1] = 2;
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_binary_int(nullptr, SPYRE_BINARY_ADD, &strided, nullptr, 1, 1, &strided));
}

// A number is a launch argument: 1000 numbers per op and type through spyre_op_binary_int make
// one plan and load one program each, and so do 1000 alphas of ADD/SUB with a tensor b (alpha 1
// and -1 are programs of their own). Numbers outside a's type are taken by the wrapping ops
// (ADD, SUB, MUL, AND, OR, XOR) like any other; for the others such a number (int8 < 300) stays
// an immediate, a program per value. Every call is checked against the 128-bit reference.
TEST_F(Ops, IntegerScalarsShareOneProgram) {
    constexpr int64_t n = 433;  // a size no other test plans
    constexpr int kCalls = 1000;
    const spyre_binary_op ops[] = {
        SPYRE_BINARY_ADD,          SPYRE_BINARY_SUB,         SPYRE_BINARY_MUL,
        SPYRE_BINARY_FLOOR_DIVIDE, SPYRE_BINARY_REMAINDER,   SPYRE_BINARY_BITWISE_AND,
        SPYRE_BINARY_BITWISE_OR,   SPYRE_BINARY_BITWISE_XOR, SPYRE_BINARY_LSHIFT,
        SPYRE_BINARY_RSHIFT,       SPYRE_BINARY_MAX,         SPYRE_BINARY_MIN,
        SPYRE_BINARY_EQ,           SPYRE_BINARY_LT,          SPYRE_BINARY_GE};
    auto stats = [&] {
        uint64_t hits = 0, misses = 0;
        EXPECT_EQ(SPYRE_SUCCESS, spyre_op_get_cache_stats(&hits, &misses));
        spyre_runtime_stats st{};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_runtime_stats(dev, &st));
        return std::array<uint64_t, 3>{misses, st.pinned_programs, st.pinned_program_evictions};
    };
    // runs calls i = 0 .. count-1 of `call` into slices of one output and checks them
    auto run = [&](spyre_dtype t, int count, const auto& call, const auto& want) {
        const int64_t slice = int64_t((uint64_t(n) * isize(t) + 127) / 128 * 128 / isize(t));
        IntArray out(dev, t, size_t(slice * count), 99);
        for (int i = 0; i < count; ++i) {
            spyre_tensor to = iview(out, {n});
            to.offset = uint64_t(slice * i) * isize(t);
            ASSERT_EQ(SPYRE_SUCCESS, call(i, to)) << spyre_last_error() << " call " << i;
        }
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        const auto got = out.fetch();
        for (int i = 0; i < count; ++i)
            for (int64_t k = 0; k < n; ++k)
                ASSERT_EQ(got[size_t(slice * i + k)], want(i, k))
                    << "t " << t << " call " << i << " element " << k;
    };
    const auto s0 = stats();
    int classes = 0;
    for (spyre_dtype t : kInts) {
        IntArray a(dev, t, n, 21), b(dev, t, n, 22);
        const spyre_tensor ta = iview(a, {n}), tb = iview(b, {n});
        const int w = int(isize(t)) * 8;
        const int64_t lo = t == SPYRE_DTYPE_UINT8 ? 0 : wrap(t, __int128(1) << (w - 1));
        const int64_t hi = t == SPYRE_DTYPE_UINT8 ? 255 : wrap(t, (__int128(1) << (w - 1)) - 1);
        for (spyre_binary_op op : ops) {
            const bool wraps = op == SPYRE_BINARY_ADD || op == SPYRE_BINARY_SUB ||
                               op == SPYRE_BINARY_MUL || op == SPYRE_BINARY_BITWISE_AND ||
                               op == SPYRE_BINARY_BITWISE_OR || op == SPYRE_BINARY_BITWISE_XOR;
            const bool shift = op == SPYRE_BINARY_LSHIFT || op == SPYRE_BINARY_RSHIFT;
            const bool div = op == SPYRE_BINARY_FLOOR_DIVIDE || op == SPYRE_BINARY_REMAINDER;
            std::mt19937_64 rng(uint64_t(op) * 31 + uint64_t(t));
            std::vector<int64_t> v(kCalls);
            const int64_t sp[] = {0, 1, -1, lo, hi, 300, -129, std::numeric_limits<int64_t>::min()};
            for (int i = 0; i < kCalls; ++i) {
                int64_t x;
                if (wraps) {  // any int64
                    x = i < int(std::size(sp)) ? sp[i] : int64_t(rng()) >> (rng() % 64);
                } else if (shift && i % 2) {  // counts around the width, inside the type
                    x = std::clamp<int64_t>(int64_t(rng() % uint64_t(w + 6)) - 2, lo, hi);
                } else {                                                // anything inside the type
                    const uint64_t span = uint64_t(hi) - uint64_t(lo);  // all of int64: ~0
                    x = span == ~uint64_t{0} ? int64_t(rng()) : lo + int64_t(rng() % (span + 1));
                    if (i < 5) x = std::array<int64_t, 5>{lo, hi, 0, 1, -1}[i];
                    x = std::clamp(x, lo, hi);
                }
                if (div && x == 0) x = 3;
                v[size_t(i)] = x;
            }
            run(
                t, kCalls,
                [&](int i, const spyre_tensor& to) {
                    return spyre_op_binary_int(nullptr, op, &ta, nullptr, v[size_t(i)], 1, &to);
                },
                [&](int i, int64_t k) {
                    return wrap(t, ref(op, t, a.v[size_t(k)], v[size_t(i)]));
                });
            if (HasFatalFailure()) return;
            ++classes;
        }
        // alpha with a tensor b (not 1 or -1: those are programs of their own)
        for (spyre_binary_op op : {SPYRE_BINARY_ADD, SPYRE_BINARY_SUB}) {
            std::mt19937_64 rng(uint64_t(op) * 7 + uint64_t(t));
            std::vector<int64_t> al(kCalls);
            for (auto& x : al) {
                x = int64_t(rng()) >> (rng() % 64);
                if (x == 1 || x == -1) x = 2;
            }
            run(
                t, kCalls,
                [&](int i, const spyre_tensor& to) {
                    return spyre_op_binary_int(nullptr, op, &ta, &tb, 0, al[size_t(i)], &to);
                },
                [&](int i, int64_t k) {
                    const __int128 p = __int128(al[size_t(i)]) * b.v[size_t(k)];
                    return wrap(t,
                                op == SPYRE_BINARY_ADD ? a.v[size_t(k)] + p : a.v[size_t(k)] - p);
                });
            if (HasFatalFailure()) return;
            ++classes;
        }
    }
    const auto s1 = stats();
    EXPECT_EQ(s1[0] - s0[0], uint64_t(classes)) << "plans";
    EXPECT_EQ(s1[1] - s0[1], uint64_t(classes)) << "programs on the card";
    EXPECT_EQ(s1[2], s0[2]) << "evictions";
    // numbers outside the type for the non-wrapping ops: right, an immediate each
    struct Outside {
        spyre_dtype t;
        spyre_binary_op op;
        int64_t v;
    } outside[] = {{SPYRE_DTYPE_INT8, SPYRE_BINARY_LT, 300},
                   {SPYRE_DTYPE_INT8, SPYRE_BINARY_LT, 301},
                   {SPYRE_DTYPE_UINT8, SPYRE_BINARY_GE, -1},
                   {SPYRE_DTYPE_INT8, SPYRE_BINARY_MAX, 1000},
                   {SPYRE_DTYPE_INT32, SPYRE_BINARY_FLOOR_DIVIDE, int64_t(1) << 40},
                   {SPYRE_DTYPE_UINT8, SPYRE_BINARY_RSHIFT, 256}};
    for (const Outside& o : outside) {
        IntArray a(dev, o.t, n, 23);
        const spyre_tensor ta = iview(a, {n});
        run(
            o.t, 1,
            [&](int, const spyre_tensor& to) {
                return spyre_op_binary_int(nullptr, o.op, &ta, nullptr, o.v, 1, &to);
            },
            [&](int, int64_t k) { return wrap(o.t, ref(o.op, o.t, a.v[size_t(k)], o.v)); });
        if (HasFatalFailure()) return;
    }
    EXPECT_EQ(stats()[0] - s1[0], std::size(outside)) << "plans";
}

TEST_F(Ops, IntegerZeroDivisorFailsTheLaunch) {
    IntArray a(dev, SPYRE_DTYPE_INT64, 100, 1), b(dev, SPYRE_DTYPE_INT64, 100, 2),
        o(dev, SPYRE_DTYPE_INT64, 100, 3);
    for (auto& x : b.v) x = x == 0 ? 1 : x;
    b.v[42] = 0;
    b.upload();
    const spyre_tensor ta = iview(a, {100}), tb = iview(b, {100}), to = iview(o, {100});
    ASSERT_SPYRE(spyre_op_binary_int(nullptr, SPYRE_BINARY_FLOOR_DIVIDE, &ta, &tb, 0, 1, &to));
    const spyre_status st = spyre_device_synchronize(dev);
    EXPECT_NE(st, SPYRE_SUCCESS);
    EXPECT_NE(std::string(spyre_last_error()).find("zero divisor"), std::string::npos)
        << spyre_last_error();
    // the card works afterwards
    ASSERT_SPYRE(spyre_op_binary_int(nullptr, SPYRE_BINARY_REMAINDER, &ta, nullptr, 5, 1, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    const auto got = o.fetch();
    for (int i = 0; i < 100; ++i) ASSERT_EQ(got[i], ref(SPYRE_BINARY_REMAINDER, a.t, a.v[i], 5));
}

TEST_F(Ops, IntegerUnaryAndCasts) {
    for (spyre_dtype t : kInts) {
        IntArray a(dev, t, 333, 11), o(dev, t, 333, 12);
        const spyre_tensor ta = iview(a, {3, 111}), to = iview(o, {3, 111});
        for (spyre_unary_op u : {SPYRE_UNARY_NEG, SPYRE_UNARY_ABS, SPYRE_UNARY_BITWISE_NOT}) {
            ASSERT_SPYRE(spyre_op_unary(nullptr, u, &ta, &to));
            ASSERT_SPYRE(spyre_device_synchronize(dev));
            const auto got = o.fetch();
            for (int i = 0; i < 333; ++i) {
                const __int128 x = a.v[i];
                const __int128 want = u == SPYRE_UNARY_NEG   ? -x
                                      : u == SPYRE_UNARY_ABS ? (x < 0 ? -x : x)
                                                             : ~x;
                ASSERT_EQ(got[i], wrap(t, want)) << u << " " << t << " " << i;
            }
        }
        // to every other integer type: wrapping
        for (spyre_dtype d : kInts) {
            IntArray c(dev, d, 333, 13);
            const spyre_tensor tc = iview(c, {3, 111});
            ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_CAST, &ta, &tc));
            ASSERT_SPYRE(spyre_device_synchronize(dev));
            const auto got = c.fetch();
            for (int i = 0; i < 333; ++i) ASSERT_EQ(got[i], wrap(d, a.v[i])) << t << "->" << d;
        }
    }
    // int64 -> fp32 rounds once; fp16 -> int64 truncates toward zero
    IntArray big(dev, SPYRE_DTYPE_INT64, 4, 1);
    big.v = {(1LL << 24) + 1, (1LL << 24) + 3, -(1LL << 40) - 1, 70000};
    big.upload();
    DevArray f(dev, SPYRE_DTYPE_FLOAT32, 4, 2), h(dev, SPYRE_DTYPE_FLOAT16, 4, 3);
    const spyre_tensor tbig = iview(big, {4}), tf = view(f, {4}, {1}), th = view(h, {4}, {1});
    ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_CAST, &tbig, &tf));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    f.fetch();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(f.at(i), static_cast<float>(big.v[i])) << i;
    for (int i = 0; i < 4; ++i)
        put(SPYRE_DTYPE_FLOAT16, h.host, i, std::array{2.75f, -2.75f, 100.5f, -0.25f}[i]);
    ASSERT_SPYRE(spyre_memcpy_htod(h.buf, 0, h.host.data(), h.host.size()));
    ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_CAST, &th, &tbig));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    EXPECT_EQ(big.fetch(), (std::vector<int64_t>{2, -2, 100, 0}));
    // bitwise not of a float is refused
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_unary(nullptr, SPYRE_UNARY_BITWISE_NOT, &tf, &tf));
}

// spyre_op_reduce SUM / MAX / MIN on integers: exact (SUM into int64 wraps), rows that start
// anywhere in a stick, long rows in chunks, many rows over the cores; spyre_op_reduce_dim along
// a leading dim (moved last by a copy first).
TEST_F(Ops, IntegerReductions) {
    struct Case {
        int64_t rows, cols;
    };
    const Case cases[] = {{1, 1}, {1, 1000003}, {7, 37}, {300, 5}, {3, 70001}, {4097, 3}};
    uint32_t seed = 50;
    for (spyre_dtype t : kInts)
        for (const Case& c : cases)
            for (spyre_reduce_op op : {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MAX, SPYRE_REDUCE_MIN}) {
                if (c.rows * c.cols > 400000 && t != SPYRE_DTYPE_INT64) continue;
                IntArray x(dev, t, size_t(c.rows * c.cols), seed++);
                const spyre_dtype ot = op == SPYRE_REDUCE_SUM ? SPYRE_DTYPE_INT64 : t;
                IntArray o(dev, ot, size_t(c.rows), seed++);
                const spyre_tensor tx = iview(x, {c.rows, c.cols}), to = iview(o, {c.rows});
                ASSERT_SPYRE(spyre_op_reduce(nullptr, op, &tx, &to));
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                const auto got = o.fetch();
                for (int64_t r = 0; r < c.rows; ++r) {
                    __int128 acc = op == SPYRE_REDUCE_SUM ? 0 : x.v[size_t(r * c.cols)];
                    for (int64_t k = 0; k < c.cols; ++k) {
                        const int64_t v = x.v[size_t(r * c.cols + k)];
                        if (op == SPYRE_REDUCE_SUM) acc = wrap(SPYRE_DTYPE_INT64, acc + v);
                        if (op == SPYRE_REDUCE_MAX) acc = std::max<__int128>(acc, v);
                        if (op == SPYRE_REDUCE_MIN) acc = std::min<__int128>(acc, v);
                    }
                    ASSERT_EQ(got[size_t(r)], static_cast<int64_t>(acc))
                        << "t " << t << " op " << op << " " << c.rows << "x" << c.cols << " r "
                        << r;
                }
            }
    // along dim 0 of [5, 33] int32 -> [33] int64
    IntArray x(dev, SPYRE_DTYPE_INT32, 5 * 33, 7), o(dev, SPYRE_DTYPE_INT64, 33, 8);
    const spyre_tensor tx = iview(x, {5, 33}), to = iview(o, {33});
    ASSERT_SPYRE(spyre_op_reduce_dim(nullptr, SPYRE_REDUCE_SUM, &tx, 0, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    const auto got = o.fetch();
    for (int j = 0; j < 33; ++j) {
        int64_t s = 0;
        for (int i = 0; i < 5; ++i) s += x.v[size_t(i * 33 + j)];
        ASSERT_EQ(got[size_t(j)], s) << j;
    }
    // MEAN and ARGMAX of integers are refused; an empty row has no max
    EXPECT_NE(SPYRE_SUCCESS, spyre_op_reduce(nullptr, SPYRE_REDUCE_MEAN, &tx, &to));
    IntArray e(dev, SPYRE_DTYPE_INT64, 0, 9), eo(dev, SPYRE_DTYPE_INT64, 3, 10);
    const spyre_tensor te = iview(e, {3, 0}), teo = iview(eo, {3});
    EXPECT_NE(SPYRE_SUCCESS, spyre_op_reduce(nullptr, SPYRE_REDUCE_MAX, &te, &teo));
    ASSERT_SPYRE(spyre_op_reduce(nullptr, SPYRE_REDUCE_SUM, &te, &teo));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    EXPECT_EQ(eo.fetch(), (std::vector<int64_t>{0, 0, 0}));
}

}  // namespace
