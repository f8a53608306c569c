// SPDX-License-Identifier: MIT
// VINT (exact integer elementwise ops and conversions) and VRED's integer path against scalar
// references written with __int128, including the extremes, zero divisors, validation and the
// cycle cost.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Bcast;
using isa::VInt;

constexpr uint64_t kIn = kLxIn, kOut = kLxOut;
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();

const DType kInts[] = {DType::I8, DType::I32, DType::I64, DType::U8};

uint64_t es(DType t) { return isa::dtype_size(t); }

// The value v wrapped to type t (two's complement), independent of the kernel's code path.
int64_t wrap(DType t, __int128 v) {
    const unsigned __int128 u = static_cast<unsigned __int128>(v);
    switch (t) {
        case DType::I8:
            return static_cast<int8_t>(static_cast<uint8_t>(u));
        case DType::U8:
            return static_cast<uint8_t>(u);
        case DType::I32:
            return static_cast<int32_t>(static_cast<uint32_t>(u));
        default:
            return static_cast<int64_t>(static_cast<uint64_t>(u));
    }
}

// Reference: Python semantics in 128-bit, wrapped to the type.
int64_t ref(VInt f, DType t, int64_t a, int64_t b) {
    const __int128 x = a, y = b;
    const int w = static_cast<int>(es(t)) * 8;
    switch (f) {
        case VInt::ADD:
            return wrap(t, x + y);
        case VInt::SUB:
            return wrap(t, x - y);
        case VInt::MUL:
            return wrap(t, x * y);
        case VInt::DIV: {
            __int128 q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
            return wrap(t, q);
        }
        case VInt::REM: {
            __int128 q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
            return wrap(t, x - q * y);
        }
        case VInt::MAX:
            return std::max(a, b);
        case VInt::MIN:
            return std::min(a, b);
        case VInt::AND:
            return wrap(t, x & y);
        case VInt::OR:
            return wrap(t, x | y);
        case VInt::XOR:
            return wrap(t, x ^ y);
        case VInt::SHL:
            return (b < 0 || b >= w) ? 0 : wrap(t, x << b);
        case VInt::SHR:
            if (b < 0 || b >= w) return t == DType::U8 ? 0 : (a < 0 ? -1 : 0);
            return wrap(t, x >> b);
        case VInt::EQ:
            return a == b;
        case VInt::NE:
            return a != b;
        case VInt::LT:
            return a < b;
        case VInt::LE:
            return a <= b;
        case VInt::GT:
            return a > b;
        case VInt::GE:
            return a >= b;
        case VInt::NEG:
            return wrap(t, -x);
        case VInt::ABS:
            return wrap(t, x < 0 ? -x : x);
        case VInt::NOT:
            return wrap(t, ~x);
        default:
            return 0;
    }
}

// Values of type t: random, plus its extremes and small numbers around zero.
std::vector<int64_t> values(DType t, size_t n, uint32_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = wrap(t, static_cast<int64_t>(rng()));
    const int64_t lo = t == DType::U8    ? 0
                       : t == DType::I8  ? -128
                       : t == DType::I32 ? std::numeric_limits<int32_t>::min()
                                         : kMin64;
    const int64_t hi = t == DType::U8    ? 255
                       : t == DType::I8  ? 127
                       : t == DType::I32 ? std::numeric_limits<int32_t>::max()
                                         : kMax64;
    const int64_t sp[] = {0, 1, -1, 2, -2, 7, -7, 3, -3, lo, hi, lo + 1, hi - 1, 63, 64, 8, 31};
    for (size_t i = 0; i < std::size(sp) && i < n; ++i) v[(i * 5) % n] = wrap(t, sp[i]);
    return v;
}

// LX image staged at kIn, loaded to LX 0; the body runs; LX [0, bytes) stored to kOut.
struct LxRun : LxImageRun {
    using LxImageRun::LxImageRun;
    void put(DType t, uint64_t off, uint64_t stride, uint64_t rows, uint64_t cols,
             const std::vector<int64_t>& v) {
        for (uint64_t r = 0; r < rows; ++r)
            for (uint64_t c = 0; c < cols; ++c)
                isa::store_int(t, rig.mem.data() + kIn + off + r * stride + c * es(t),
                               v[r * cols + c]);
    }
    int64_t out(DType t, uint64_t off) const {
        return isa::load_int(t, rig.mem.data() + kOut + off);
    }
};

struct BinCase {
    VInt f;
    DType t;
    Bcast mode;
};

std::string name_of(const ::testing::TestParamInfo<BinCase>& i) {
    static const char* fn[] = {"ADD", "SUB", "MUL", "DIV", "REM", "MAX", "MIN", "AND",
                               "OR",  "XOR", "SHL", "SHR", "EQ",  "NE",  "LT",  "LE",
                               "GT",  "GE",  "NEG", "ABS", "NOT", "CVT"};
    static const char* tn[] = {"F32", "F16", "BF16", "I8", "I32", "I64", "U8"};
    static const char* mn[] = {"NONE", "SCALAR", "ROW", "COL", "IMM"};
    return std::string(fn[int(i.param.f)]) + "_" + tn[int(i.param.t)] + "_" + mn[int(i.param.mode)];
}

class VintBinary : public ::testing::TestWithParam<BinCase> {};

// rows x cols with padded strides; src2 in its broadcast shape; compares write U8 (0/1) except
// for I32 sources (I32 destination: any integer type may take a mask).
TEST_P(VintBinary, MatchesReference) {
    const auto [f, t, mode] = GetParam();
    const uint64_t rows = 5, cols = 37, e = es(t);
    const uint64_t s1s = (cols + 3) * e, s2s = (cols + 1) * e;
    const bool cmp = isa::vint_compare(f), un = isa::vint_unary(f);
    const DType dt = cmp ? (t == DType::I32 ? DType::I32 : DType::U8) : t;
    const uint64_t ds = (cols + 2) * es(dt);
    const uint64_t o1 = 0, o2 = 0x8000, od = 0x10000;
    Rig rig(1, 8u << 20, 1);
    LxRun run(rig, 0x18000);
    std::vector<int64_t> a = values(t, rows * cols, 1 + int(f));
    std::vector<int64_t> b = values(t, rows * cols, 100 + int(t));
    if (f == VInt::SHL || f == VInt::SHR)  // counts around the width, some negative
        for (size_t i = 0; i < b.size(); ++i)
            b[i] = wrap(t, static_cast<int64_t>(i % 70) - (t == DType::U8 ? 0 : 3));
    if (f == VInt::DIV || f == VInt::REM)
        for (auto& x : b)
            if (x == 0) x = (t == DType::U8) ? 3 : -3;
    const int64_t imm = b[7];
    // the second operand in its broadcast shape: element (r, c) of the full view
    auto b_at = [&](uint64_t r, uint64_t c) {
        switch (mode) {
            case Bcast::SCALAR:
                return b[0];
            case Bcast::ROW:
                return b[c];
            case Bcast::COL:
                return b[r * cols];
            case Bcast::IMM:
                return imm;
            default:
                return b[r * cols + c];
        }
    };
    run.put(t, o1, s1s, rows, cols, a);
    if (mode == Bcast::NONE) run.put(t, o2, s2s, rows, cols, b);
    if (mode == Bcast::SCALAR) run.put(t, o2, 0, 1, 1, b);
    if (mode == Bcast::ROW) run.put(t, o2, 0, 1, cols, b);
    if (mode == Bcast::COL)
        for (uint64_t r = 0; r < rows; ++r)
            isa::store_int(t, rig.mem.data() + kIn + o2 + r * s2s, b_at(r, 0));
    ASSERT_EQ(run.run([&](PB& p) {
        p.li(3, od), p.li(4, o1), p.li(5, mode == Bcast::IMM ? 0 : o2);
        p.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ds), int64_t(s1s), int64_t(s2s)});
        p.vint(f, mode, dt, t, 3, 4, mode == Bcast::IMM ? 0 : 5, 20, mode == Bcast::IMM ? imm : 0);
    }),
              0)
        << rig.res.message;
    for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < cols; ++c) {
            const int64_t x = a[r * cols + c], y = un ? 0 : b_at(r, c);
            ASSERT_EQ(run.out(dt, od + r * ds + c * es(dt)), wrap(dt, ref(f, t, x, y)))
                << "r " << r << " c " << c << " a " << x << " b " << y;
        }
}

std::vector<BinCase> bin_cases() {
    std::vector<BinCase> v;
    for (int f = 0; f < int(VInt::CVT); ++f)
        for (DType t : kInts)
            for (int m = 0; m < int(Bcast::COUNT); ++m) {
                if (isa::vint_unary(VInt(f)) && m != int(Bcast::IMM)) continue;
                v.push_back({VInt(f), t, Bcast(m)});
            }
    return v;
}

INSTANTIATE_TEST_SUITE_P(All, VintBinary, ::testing::ValuesIn(bin_cases()), name_of);

// One VINT over a single row of values, returning the results (or the error code).
struct One {
    Rig rig{1, 8u << 20, 1};
    int code = 0;
    std::vector<int64_t> go(VInt f, DType dt, DType t, const std::vector<int64_t>& a,
                            const std::vector<int64_t>& b) {
        LxRun run(rig, 0x4000);
        const uint64_t n = a.size();
        run.put(t, 0, 0, 1, n, a);
        if (!b.empty()) run.put(t, 0x1000, 0, 1, n, b);
        code = run.run([&](PB& p) {
            p.li(3, 0x2000), p.li(4, 0), p.li(5, 0x1000);
            p.set_regs(20, {1, int64_t(n), 0, 0, 0});
            p.vint(f, Bcast::NONE, dt, t, 3, 4, 5, 20);
        });
        std::vector<int64_t> r(n);
        for (uint64_t i = 0; i < n; ++i) r[i] = run.out(dt, 0x2000 + i * es(dt));
        return r;
    }
};

TEST(Vint, Extremes) {
    One o;
    // INT64_MIN / -1 wraps to INT64_MIN, remainder 0; Python's signs for floor division
    EXPECT_EQ(o.go(VInt::DIV, DType::I64, DType::I64, {kMin64, -7, 7, -7, 7, kMin64},
                   {-1, 2, -2, -2, 2, 1}),
              (std::vector<int64_t>{kMin64, -4, -4, 3, 3, kMin64}));
    EXPECT_EQ(o.go(VInt::REM, DType::I64, DType::I64, {kMin64, -7, 7, -7, 7, kMin64},
                   {-1, 2, -2, -2, 2, kMax64}),
              (std::vector<int64_t>{0, 1, -1, -1, 1, kMax64 - 1}));
    EXPECT_EQ(o.go(VInt::DIV, DType::I32, DType::I32, {-2147483648LL}, {-1}),
              (std::vector<int64_t>{-2147483648LL}));
    // shifts by the width or more, or by a negative count
    EXPECT_EQ(o.go(VInt::SHL, DType::I64, DType::I64, {1, 1, 1, 3}, {63, 64, -1, 1}),
              (std::vector<int64_t>{kMin64, 0, 0, 6}));
    EXPECT_EQ(o.go(VInt::SHR, DType::I64, DType::I64, {-8, -8, 8, kMin64}, {100, -1, 64, 63}),
              (std::vector<int64_t>{-1, -1, 0, -1}));
    EXPECT_EQ(o.go(VInt::SHL, DType::I8, DType::I8, {1, 1}, {7, 8}),
              (std::vector<int64_t>{-128, 0}));
    EXPECT_EQ(o.go(VInt::SHR, DType::U8, DType::U8, {200, 200}, {7, 9}),
              (std::vector<int64_t>{1, 0}));
    // wrapping: INT64_MAX + 1, abs and neg of the minimum
    EXPECT_EQ(o.go(VInt::ADD, DType::I64, DType::I64, {kMax64}, {1}),
              (std::vector<int64_t>{kMin64}));
    EXPECT_EQ(o.go(VInt::ABS, DType::I64, DType::I64, {kMin64, -5}, {}),
              (std::vector<int64_t>{kMin64, 5}));
    EXPECT_EQ(o.go(VInt::NEG, DType::U8, DType::U8, {1, 0}, {}), (std::vector<int64_t>{255, 0}));
    EXPECT_EQ(o.go(VInt::MUL, DType::I32, DType::I32, {65536}, {65536}), (std::vector<int64_t>{0}));
    // values above 2^24 stay exact (the fp32 vector path would round them)
    EXPECT_EQ(o.go(VInt::ADD, DType::I32, DType::I32, {16777217}, {2}),
              (std::vector<int64_t>{16777219}));
}

TEST(Vint, ZeroDivisorFailsTheJob) {
    for (VInt f : {VInt::DIV, VInt::REM})
        for (DType t : kInts) {
            One o;
            o.go(f, t, t, {5, 6, 7}, {1, 0, 2});
            EXPECT_EQ(o.code, SPYRE_ENGINE_ERR_DIV_ZERO);
            EXPECT_NE(std::string(o.rig.res.message).find("column 1"), std::string::npos)
                << o.rig.res.message;
        }
    // an IMM zero divisor too
    Rig rig(1, 1u << 20, 1);
    PB p;
    p.li(3, 0), p.set_regs(20, {1, 4, 0, 0, 0});
    p.vint(VInt::DIV, Bcast::IMM, DType::I64, DType::I64, 3, 3, 0, 20, 0);
    p.halt();
    EXPECT_EQ(rig.run(p.finish()), SPYRE_ENGINE_ERR_DIV_ZERO);
}

// CVT between every pair of types.
TEST(Vint, Conversions) {
    One o;
    // int -> int wraps
    EXPECT_EQ(o.go(VInt::CVT, DType::I8, DType::I64, {300, -129, kMin64, 255}, {}),
              (std::vector<int64_t>{44, 127, 0, -1}));
    EXPECT_EQ(o.go(VInt::CVT, DType::U8, DType::I32, {-1, 256, 77}, {}),
              (std::vector<int64_t>{255, 0, 77}));
    EXPECT_EQ(o.go(VInt::CVT, DType::I64, DType::U8, {255, 0}, {}), (std::vector<int64_t>{255, 0}));
    EXPECT_EQ(o.go(VInt::CVT, DType::I64, DType::I32, {-5, 2147483647}, {}),
              (std::vector<int64_t>{-5, 2147483647}));
    // int64 -> fp32: one rounding to nearest even; -> fp16/bf16 through fp32 (as torch)
    Rig& rig = o.rig;
    const std::vector<int64_t> big = {(1LL << 24) + 1, (1LL << 24) + 3, kMax64, -kMax64 - 1, 70000};
    for (DType ft : {DType::F32, DType::F16, DType::BF16}) {
        LxRun run(rig, 0x4000);
        run.put(DType::I64, 0, 0, 1, big.size(), big);
        ASSERT_EQ(run.run([&](PB& p) {
            p.li(3, 0x2000), p.li(4, 0);
            p.set_regs(20, {1, int64_t(big.size()), 0, 0, 0});
            p.vint(VInt::CVT, Bcast::IMM, ft, DType::I64, 3, 4, 0, 20);
        }),
                  0);
        const auto got = rig.get_as(ft, kOut + 0x2000, big.size());
        for (size_t i = 0; i < big.size(); ++i)
            EXPECT_TRUE(same_float(got[i], round_to(ft, static_cast<float>(big[i]))))
                << i << " " << got[i];
    }
    // float -> int: toward zero, NaN -> 0, saturating
    const std::vector<float> fv = {2.9f, -2.9f, NAN, 1e30f, -1e30f, -0.5f, 300.0f, -300.0f};
    const struct {
        DType t;
        std::vector<int64_t> want;
    } fc[] = {{DType::I64, {2, -2, 0, kMax64, kMin64, 0, 300, -300}},
              {DType::I32, {2, -2, 0, 2147483647, -2147483648LL, 0, 300, -300}},
              {DType::I8, {2, -2, 0, 127, -128, 0, 127, -128}},
              {DType::U8, {2, 0, 0, 255, 0, 0, 255, 0}}};
    for (DType src : {DType::F32, DType::F16, DType::BF16})
        for (const auto& c : fc) {
            LxRun run(rig, 0x4000);
            rig.put_as(src, kIn, fv);
            ASSERT_EQ(run.run([&](PB& p) {
                p.li(3, 0x2000), p.li(4, 0);
                p.set_regs(20, {1, int64_t(fv.size()), 0, 0, 0});
                p.vint(VInt::CVT, Bcast::IMM, c.t, src, 3, 4, 0, 20);
            }),
                      0);
            // (1e30 is inf in fp16: it saturates the same; the other values are exact there)
            for (size_t i = 0; i < fv.size(); ++i)
                EXPECT_EQ(run.out(c.t, 0x2000 + i * es(c.t)), c.want[i])
                    << i << " src " << int(src);
        }
    // float -> float through CVT is VUN COPY's rounding
    {
        LxRun run(rig, 0x4000);
        rig.put_as(DType::F32, kIn, {1.0009765625f + 1e-7f, -3.3f});
        ASSERT_EQ(run.run([&](PB& p) {
            p.li(3, 0x2000), p.li(4, 0);
            p.set_regs(20, {1, 2, 0, 0, 0});
            p.vint(VInt::CVT, Bcast::IMM, DType::F16, DType::F32, 3, 4, 0, 20);
        }),
                  0);
        const auto got = rig.get_as(DType::F16, kOut + 0x2000, 2);
        EXPECT_EQ(got[0], round_to(DType::F16, 1.0009765625f + 1e-7f));
        EXPECT_EQ(got[1], round_to(DType::F16, -3.3f));
    }
}

// VRED with an I64 or U8 type: exact, SUM and PROD wrapping in 64 bits.
TEST(Vint, IntegerReductions) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t rows = 3, cols = 5;
    for (DType st : kInts)
        for (int axis = 0; axis < 2; ++axis)
            for (isa::Red f : {isa::Red::SUM, isa::Red::MAX, isa::Red::MIN, isa::Red::PROD}) {
                const DType dt = DType::I64;
                if (st != DType::I64 && st != DType::U8 && dt != DType::I64) continue;
                LxRun run(rig, 0x4000);
                std::vector<int64_t> v = values(st, rows * cols, 7 + int(f));
                const uint64_t ss = (cols + 1) * es(st);
                run.put(st, 0, ss, rows, cols, v);
                ASSERT_EQ(run.run([&](PB& p) {
                    p.li(3, 0x2000), p.li(4, 0);
                    p.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ss)});
                    p.vred(f, axis, dt, st, 3, 4, 20);
                }),
                          0)
                    << rig.res.message;
                const uint64_t n = axis == 0 ? rows : cols;
                for (uint64_t i = 0; i < n; ++i) {
                    __int128 acc = f == isa::Red::SUM    ? 0
                                   : f == isa::Red::PROD ? 1
                                   : f == isa::Red::MAX  ? kMin64
                                                         : kMax64;
                    for (uint64_t k = 0; k < (axis == 0 ? cols : rows); ++k) {
                        const int64_t x = axis == 0 ? v[i * cols + k] : v[k * cols + i];
                        if (f == isa::Red::SUM) acc = wrap(DType::I64, acc + x);
                        if (f == isa::Red::PROD) acc = wrap(DType::I64, acc * x);
                        if (f == isa::Red::MAX) acc = std::max<__int128>(acc, x);
                        if (f == isa::Red::MIN) acc = std::min<__int128>(acc, x);
                    }
                    EXPECT_EQ(run.out(dt, 0x2000 + i * 8), static_cast<int64_t>(acc))
                        << "st " << int(st) << " axis " << axis << " f " << int(f);
                }
            }
    // I64 sum of values beyond 2^53 is exact; int32 wrap of a U8 max
    LxRun run(rig, 0x4000);
    run.put(DType::I64, 0, 0, 1, 3, {(1LL << 60) + 1, 1, kMax64});
    ASSERT_EQ(run.run([&](PB& p) {
        p.li(3, 0x2000), p.li(4, 0);
        p.set_regs(20, {1, 3, 0});
        p.vred(isa::Red::SUM, 0, DType::I64, DType::I64, 3, 4, 20);
    }),
              0);
    EXPECT_EQ(run.out(DType::I64, 0x2000), static_cast<int64_t>((1ULL << 60) + 2 + kMax64));
}

// The validator rejects bad type / function combinations before any core runs.
TEST(Vint, Validation) {
    Rig rig(1, 1u << 20, 1);
    auto code = [&](const isa::Instr& in) {
        PB p;
        p.emit(in);
        p.halt();
        return rig.run(p.finish());
    };
    auto vi = [](VInt f, DType dt, DType st, uint8_t flags = 0, int64_t imm = 0, uint8_t c = 0) {
        isa::Instr in;
        in.op = uint8_t(isa::Op::VINT), in.dt = isa::dt_pair(dt, st), in.a = 3, in.b = 4;
        in.c = c, in.d = 20, in.func = uint8_t(f), in.flags = flags, in.imm = imm;
        return in;
    };
    const int bad = SPYRE_ENGINE_ERR_BAD_OPERAND;
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64)), 0);
    EXPECT_EQ(code(vi(VInt::ADD, DType::I32, DType::I64)), bad);  // dst type != src type
    EXPECT_EQ(code(vi(VInt::ADD, DType::F32, DType::F32)), bad);  // float source
    EXPECT_EQ(code(vi(VInt::EQ, DType::F32, DType::I64)), bad);   // float mask
    EXPECT_EQ(code(vi(VInt::EQ, DType::U8, DType::I64)), 0);
    EXPECT_EQ(code(vi(VInt::COUNT, DType::I64, DType::I64)), bad);      // function
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64, 0x54)), bad);  // typed src2
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64, 5)), bad);     // broadcast mode
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64, 0, 3)), bad);  // imm without IMM
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64, 4, 3)), 0);
    EXPECT_EQ(code(vi(VInt::ADD, DType::I64, DType::I64, 4, 3, 5)), bad);  // IMM with c
    EXPECT_EQ(code(vi(VInt::NEG, DType::I64, DType::I64, 4)), bad);        // unary with flags
    EXPECT_EQ(code(vi(VInt::CVT, DType::F16, DType::I64)), 0);
    EXPECT_EQ(code(vi(VInt::CVT, DType::F16, DType::BF16)), 0);
    isa::Instr t = vi(VInt::CVT, DType::F16, DType::I64);
    t.dt = 0x7f;  // type 15 / 7
    EXPECT_EQ(code(t), bad);
    // the fp32-path instructions take no I64 / U8
    auto vec = [](isa::Op op, uint8_t dt, uint8_t func = 0, uint8_t flags = 0) {
        isa::Instr in;
        in.op = uint8_t(op), in.dt = dt, in.a = 3, in.b = 4, in.d = 20, in.func = func;
        in.flags = flags;
        return in;
    };
    EXPECT_EQ(code(vec(isa::Op::VUN, isa::dt_pair(DType::I64, DType::F32))), bad);
    EXPECT_EQ(code(vec(isa::Op::VBIN, isa::dt_pair(DType::U8, DType::U8))), bad);
    EXPECT_EQ(code(vec(isa::Op::VBIN, isa::dt_pair(DType::F32, DType::F32), 0,
                       isa::operand_mode(Bcast::NONE, DType::I64))),
              bad);
    EXPECT_EQ(code(vec(isa::Op::VTRANS, isa::dt_pair(DType::I64, DType::I64))), bad);
    // VRED: the integer path needs integer types on both sides; PROD only there
    EXPECT_EQ(code(vec(isa::Op::VRED, isa::dt_pair(DType::I64, DType::I32), 3)), 0);
    EXPECT_EQ(code(vec(isa::Op::VRED, isa::dt_pair(DType::I64, DType::F32), 0)), bad);
    EXPECT_EQ(code(vec(isa::Op::VRED, isa::dt_pair(DType::I32, DType::I32), 3)), bad);
    EXPECT_EQ(code(vec(isa::Op::VRED, isa::dt_pair(DType::I64, DType::I64), 4)), bad);
    // ALLRED takes no PROD
    isa::Instr ar = vec(isa::Op::ALLRED, uint8_t(DType::F32), uint8_t(isa::Red::PROD));
    ar.b = 4, ar.c = 5, ar.d = 0;
    EXPECT_EQ(code(ar), bad);
    ar.func = uint8_t(isa::Red::MIN);
    EXPECT_EQ(code(ar), 0);
    // the opcode after VRNG (0x29) stays unassigned
    isa::Instr r;
    r.op = 0x2a;
    EXPECT_EQ(code(r), SPYRE_ENGINE_ERR_ILLEGAL_OPCODE);
}

// Cycle cost: VBIN's rule; 64-bit integers at half rate; DIV/REM at vec_special_cycles.
TEST(Vint, Cycles) {
    Rig rig(1, 1u << 20, 1);
    auto busy = [&](VInt f, DType t, uint64_t n) {
        PB p;
        p.li(3, 0x10000), p.li(4, 0), p.li(5, 0x20000);
        p.set_regs(20, {1, int64_t(n), 0, 0, 0});
        p.vint(f, Bcast::IMM, t, t, 3, 4, 0, 20, 1);
        p.halt();
        EXPECT_EQ(rig.run(p.finish()), 0) << rig.res.message;
        return rig.res.cores[0].busy[SPYRE_UNIT_VECTOR];
    };
    // 8192 int8 over 2 x 64 lanes = 64 cycles (sticks: 64 per stream / 2 = 32), + 8 latency
    EXPECT_EQ(busy(VInt::ADD, DType::I8, 8192), 64u + 8);
    EXPECT_EQ(busy(VInt::ADD, DType::U8, 8192), 64u + 8);
    EXPECT_EQ(busy(VInt::ADD, DType::I32, 4096), 64u + 8);   // 2 x 32 lanes
    EXPECT_EQ(busy(VInt::ADD, DType::I64, 4096), 128u + 8);  // two 32-bit lanes each
    EXPECT_EQ(busy(VInt::DIV, DType::I32, 4096), 128u + 8);  // vec_special_cycles 2
    EXPECT_EQ(busy(VInt::REM, DType::I64, 4096), 256u + 8);
    // a conversion to int64 runs at the 64-bit rate
    PB p;
    p.li(3, 0x10000), p.li(4, 0);
    p.set_regs(20, {1, 4096, 0, 0, 0});
    p.vint(VInt::CVT, Bcast::IMM, DType::I64, DType::F16, 3, 4, 0, 20);
    p.halt();
    ASSERT_EQ(rig.run(p.finish()), 0);
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_VECTOR], 128u + 8);
}

}  // namespace
}  // namespace spyre::test
