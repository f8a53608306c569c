// SPDX-License-Identifier: MIT
// Every instruction against a scalar reference, including edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Alu;
using isa::Bcast;
using isa::Cond;
using isa::Red;
using isa::VBin;
using isa::VUn;

// r10..r12 scratch for DMA helpers
void ld(PB& b, uint64_t lx, uint64_t ddr, uint64_t bytes) {
    b.li(10, lx), b.li(11, ddr), b.li(12, bytes);
    b.load(10, 11, 12);
}
uint64_t round_up_128(uint64_t x) { return (x + 127) / 128 * 128; }
void st_(PB& b, uint64_t lx, uint64_t ddr, uint64_t bytes) {
    b.li(10, lx), b.li(11, ddr), b.li(12, bytes);
    b.store(10, 11, 12);
}
// Stores registers regs[i] to DDR out + 8*i via LX 0x1000.
void dump_regs(PB& b, std::initializer_list<uint8_t> regs, uint64_t out) {
    b.li(13, 0x1000);
    int64_t off = 0;
    for (uint8_t r : regs) b.lxst(13, r, off), off += 8;
    st_(b, 0x1000, out, 8 * regs.size());
}

std::vector<float> randv(size_t n, uint32_t seed, float lo = -4, float hi = 4) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

TEST(Scalar, AluAllFunctions) {
    Rig rig;
    const int64_t xs[] = {7, -3, 1000000007, INT64_MIN, -1, 0x123456789abLL};
    const int64_t ys[] = {3, 5, -2, 64 + 3, 1};
    for (int64_t x : xs) {
        for (int64_t y : ys) {
            std::initializer_list<uint8_t> regs = {5,  6,  7,  8,  9,  14, 15, 16, 17,
                                                   18, 19, 20, 21, 22, 23, 24, 25, 26};
            // results were written to r5..r22: move r10..r13 out of the scratch range first
            PB b2;
            b2.li(3, x);
            b2.li(4, y - 1);
            const uint8_t dst[] = {5,  6,  7,  8,  9,  14, 15, 16, 17,
                                   18, 19, 20, 21, 22, 23, 24, 25, 26};
            for (uint8_t f = 0; f < static_cast<uint8_t>(Alu::COUNT); ++f)
                b2.alu(static_cast<Alu>(f), dst[f], 3, 4, 1);
            dump_regs(b2, regs, 0x100000);
            b2.halt();
            ASSERT_EQ(rig.run(b2.finish()), 0) << rig.res.message;
            auto got = rig.get<uint64_t>(0x100000, 18);
            const uint64_t ux = x, uy = y;
            const uint64_t exp[] = {ux + uy,
                                    ux - uy,
                                    ux * uy,
                                    ux / uy,
                                    ux % uy,
                                    ux & uy,
                                    ux | uy,
                                    ux ^ uy,
                                    ux << (uy & 63),
                                    ux >> (uy & 63),
                                    static_cast<uint64_t>(x >> (uy & 63)),
                                    static_cast<uint64_t>(std::min(x, y)),
                                    static_cast<uint64_t>(std::max(x, y)),
                                    std::min(ux, uy),
                                    std::max(ux, uy),
                                    static_cast<uint64_t>(x < y),
                                    static_cast<uint64_t>(ux < uy),
                                    static_cast<uint64_t>(ux == uy)};
            for (int f = 0; f < 18; ++f)
                EXPECT_EQ(got[f], exp[f]) << "func " << f << " x " << x << " y " << y;
        }
    }
}

TEST(Scalar, RegisterConventionsArgsAndR0) {
    Rig rig;
    PB b;
    b.li(0, 99);  // ignored
    b.arg(3, 0);
    b.arg(4, 15);
    b.mov(5, 1);  // core id
    b.mov(6, 2);  // num cores
    b.mov(7, 0);
    // each core writes to its own slot: out + 64*core
    b.li(13, 0x1000);
    for (int i = 0; i < 5; ++i) b.lxst(13, static_cast<uint8_t>(3 + i), 8 * i);
    b.li(10, 0x1000);
    b.muli(11, 1, 128);
    b.addi(11, 11, 0x200000);
    b.li(12, 40);
    b.store(10, 11, 12);
    b.halt();
    std::vector<uint64_t> args(16, 0);
    args[0] = 0xdeadbeef;
    args[15] = 42;
    ASSERT_EQ(rig.run(b.finish(), args, 32), 0) << rig.res.message;
    for (uint64_t c = 0; c < 32; ++c) {
        auto v = rig.get<uint64_t>(0x200000 + 128 * c, 5);
        EXPECT_EQ(v[0], 0xdeadbeefu);
        EXPECT_EQ(v[1], 42u);
        EXPECT_EQ(v[2], c);
        EXPECT_EQ(v[3], 32u);
        EXPECT_EQ(v[4], 0u);
    }
}

TEST(Scalar, BranchesAndLoops) {
    Rig rig;
    PB b;
    // r3 = sum over i<10, j<i of (i*j) via nested counted loops (inner count = outer index)
    b.li(3, 0);
    b.loopi(10, 4);
    b.loop(4, 0, 5);
    b.mul(6, 4, 5);
    b.add(3, 3, 6);
    b.endloop();
    b.endloop();
    // zero-count loop is skipped
    b.li(7, 0);
    b.loopi(0);
    b.li(7, 1);
    b.endloop();
    // negative count too
    b.li(8, 0);
    b.loop(0, -5);
    b.li(8, 1);
    b.endloop();
    // compare+branch loop: r9 = number of iterations until r14 >= 37 stepping 5
    b.li(9, 0);
    b.li(14, 0);
    b.li(15, 37);
    auto top = b.label(), done = b.label();
    b.bind(top);
    b.br(Cond::GE, 14, 15, done);
    b.addi(14, 14, 5);
    b.addi(9, 9, 1);
    b.jmp(top);
    b.bind(done);
    // all conditions on (-1, 1): signed LT true, unsigned LTU false
    b.li(16, -1);
    b.li(17, 1);
    b.li(18, 0);
    const Cond conds[] = {Cond::ALWAYS, Cond::EQ,  Cond::NE, Cond::LT,
                          Cond::GE,     Cond::LTU, Cond::GEU};
    for (int i = 0; i < 7; ++i) {
        auto skip = b.label();
        b.br(conds[i], 16, 17, skip);
        b.alu(Alu::OR, 18, 18, 0, 1 << i);  // set bit i when NOT taken
        b.bind(skip);
    }
    // loop with a "continue" branch to its ENDLOOP: counts odd indices
    b.li(19, 0);
    b.loopi(9, 20);
    {
        auto cont = b.label();
        b.alu(Alu::AND, 21, 20, 0, 1);
        b.br(Cond::EQ, 21, 0, cont);
        b.addi(19, 19, 1);
        b.bind(cont);
        b.endloop();
    }
    dump_regs(b, {3, 7, 8, 9, 18, 19}, 0x100000);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    auto v = rig.get<uint64_t>(0x100000, 6);
    uint64_t ref = 0;
    for (int i = 0; i < 10; ++i)
        for (int j = 0; j < i; ++j) ref += i * j;
    EXPECT_EQ(v[0], ref);
    EXPECT_EQ(v[1], 0u);
    EXPECT_EQ(v[2], 0u);
    EXPECT_EQ(v[3], 8u);
    // taken: ALWAYS, NE, LT, GEU -> not taken: EQ(1), GE(4), LTU(5)
    EXPECT_EQ(v[4], (1u << 1) | (1u << 4) | (1u << 5));
    EXPECT_EQ(v[5], 4u);
}

TEST(Dma, PartialSticksAndNestedStrides) {
    Rig rig;
    std::vector<uint8_t> src(64 * 1024);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
    rig.put(0x10000, src);
    // 3 x 5 rows of 100 bytes; DDR strides 256 (rows) and 2048 (planes); LX strides 128, 640
    PB b;
    b.li(3, 0x400);         // LX
    b.li(4, 0x10000 - 64);  // DDR (imm adds 64 back to check the imm offset)
    b.li(5, 100);
    b.set_regs(20, {5, 256, 128, 3, 2048, 640});
    b.load(3, 4, 5, 20, 64);
    // store the full padded sticks back contiguously to 0x80000 (15 x 128)
    b.li(6, 0x80000);
    b.li(7, 128);
    b.set_regs(24, {15, 128, 128, 1, 0, 0});
    b.store(3, 6, 7, 24);
    // store 100-byte rows with a DDR stride of 384 to 0xA0000: bytes in between untouched
    b.li(8, 0xA0000);
    b.set_regs(14, {15, 384, 128, 1, 0, 0});
    b.store(3, 8, 5, 14);
    b.halt();
    std::vector<uint8_t> canary(15 * 384, 0xcd);
    rig.put(0xA0000, canary);
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    auto dense = rig.get<uint8_t>(0x80000, 15 * 128);
    auto sparse = rig.get<uint8_t>(0xA0000, 15 * 384);
    for (int p = 0; p < 3; ++p)
        for (int r = 0; r < 5; ++r)
            for (int i = 0; i < 128; ++i) {
                const int row = p * 5 + r;
                const uint8_t want = i < 100 ? src[p * 2048 + r * 256 + i] : 0;  // zero padding
                ASSERT_EQ(dense[row * 128 + i], want) << p << " " << r << " " << i;
            }
    for (int row = 0; row < 15; ++row)
        for (int i = 0; i < 384; ++i) {
            const uint8_t want = i < 100 ? dense[row * 128 + i] : 0xcd;
            ASSERT_EQ(sparse[row * 384 + i], want);
        }
    EXPECT_EQ(rig.res.ddr_read_bytes, 15u * 128);
    EXPECT_EQ(rig.res.ddr_write_bytes, 2u * 15 * 128);
}

TEST(Scalar, LxLoadStore) {
    Rig rig;
    rig.put<uint64_t>(0x3000, {0x1122334455667788ull, 5});
    PB b;
    ld(b, 0x800, 0x3000, 16);
    b.li(3, 0x800);
    b.lxld(4, 3, 0);
    b.lxld(5, 3, 8);
    b.add(6, 4, 5);
    b.lxst(3, 6, 8);
    st_(b, 0x800, 0x4000, 16);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    auto v = rig.get<uint64_t>(0x4000, 2);
    EXPECT_EQ(v[0], 0x1122334455667788ull);
    EXPECT_EQ(v[1], 0x112233445566778dull);
}

// ---- matmul ----

struct MmCase {
    DType t;
    uint64_t m, n, k;
    bool acc;
};

class MatmulTest : public ::testing::TestWithParam<MmCase> {};

TEST_P(MatmulTest, MatchesScalarReference) {
    const MmCase cs = GetParam();
    Rig rig;
    const uint64_t es = isa::dtype_size(cs.t);
    const bool is_int = cs.t == DType::I8;
    // odd element strides (not stick multiples) in LX: rows padded by 3 elements
    const uint64_t lda = (cs.k + 3) * es, ldb = (cs.n + 3) * es, ldc = (cs.n + 1) * 4;
    auto a = randv(cs.m * (cs.k + 3), 11, is_int ? -128.f : -2.f, is_int ? 127.f : 2.f);
    auto bm = randv(cs.k * (cs.n + 3), 12, is_int ? -128.f : -2.f, is_int ? 127.f : 2.f);
    auto c0 = randv(cs.m * (cs.n + 1), 13, is_int ? -1e5f : -1.f, is_int ? 1e5f : 1.f);
    if (is_int) {
        for (auto& x : a) x = std::round(x);
        for (auto& x : bm) x = std::round(x);
        for (auto& x : c0) x = std::round(x);
    }
    const uint64_t A = 0x100000, B = 0x200000, C = 0x300000, OUT = 0x400000;
    rig.put_as(cs.t, A, a);
    rig.put_as(cs.t, B, bm);
    rig.put_as(is_int ? DType::I32 : DType::F32, C, c0);
    const uint64_t abytes = cs.m * lda, bbytes = cs.k * ldb, cbytes = cs.m * ldc;
    const uint64_t la = 0, lb = round_up_128(abytes), lc = lb + round_up_128(bbytes);
    PB b;
    ld(b, la, A, abytes);
    ld(b, lb, B, bbytes);
    ld(b, lc, C, cbytes);
    b.li(3, lc), b.li(4, la), b.li(5, lb);
    b.set_regs(20, {int64_t(cs.m), int64_t(cs.n), int64_t(cs.k), int64_t(lda), int64_t(ldb),
                    int64_t(ldc)});
    b.matmul(cs.t, 3, 4, 5, 20, cs.acc);
    st_(b, lc, OUT, cbytes);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    EXPECT_EQ(rig.res.macs, cs.m * cs.n * cs.k);
    // reference: inputs rounded to the input type, k-ascending fused multiply-adds in fp32
    for (uint64_t i = 0; i < cs.m; ++i)
        for (uint64_t j = 0; j < cs.n; ++j) {
            if (is_int) {
                uint32_t acc =
                    cs.acc ? static_cast<uint32_t>(static_cast<int32_t>(c0[i * (cs.n + 1) + j]))
                           : 0;
                for (uint64_t k = 0; k < cs.k; ++k)
                    acc += static_cast<uint32_t>(static_cast<int32_t>(a[i * (cs.k + 3) + k]) *
                                                 static_cast<int32_t>(bm[k * (cs.n + 3) + j]));
                int32_t got;
                std::memcpy(&got, rig.mem.data() + OUT + i * ldc + 4 * j, 4);
                ASSERT_EQ(static_cast<uint32_t>(got), acc) << i << "," << j;
            } else {
                float acc = cs.acc ? c0[i * (cs.n + 1) + j] : 0.0f;
                for (uint64_t k = 0; k < cs.k; ++k)
                    acc = std::fma(round_to(cs.t, a[i * (cs.k + 3) + k]),
                                   round_to(cs.t, bm[k * (cs.n + 3) + j]), acc);
                float got;
                std::memcpy(&got, rig.mem.data() + OUT + i * ldc + 4 * j, 4);
                ASSERT_TRUE(same_float(got, acc)) << i << "," << j << " " << got << " vs " << acc;
            }
        }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTest,
    ::testing::Values(MmCase{DType::F16, 64, 64, 64, false}, MmCase{DType::F16, 5, 70, 33, true},
                      MmCase{DType::F16, 1, 1, 1, false}, MmCase{DType::F16, 9, 130, 0, true},
                      MmCase{DType::BF16, 17, 65, 31, false}, MmCase{DType::BF16, 8, 64, 128, true},
                      MmCase{DType::I8, 13, 67, 45, true}, MmCase{DType::I8, 32, 128, 64, false},
                      MmCase{DType::F32, 7, 19, 23, true}));

TEST(Matmul, NanAndInfPropagate) {
    Rig rig;
    // A = [[inf, 1], [nan, 0]], B = [[1, 0], [0, 1]] (fp16)
    rig.put_as(DType::F16, 0x1000, {INFINITY, 1, NAN, 0});
    rig.put_as(DType::F16, 0x2000, {1, 0, 0, 1});
    PB b;
    ld(b, 0, 0x1000, 8);
    ld(b, 128, 0x2000, 8);
    b.li(3, 256), b.li(4, 0), b.li(5, 128);
    b.set_regs(20, {2, 2, 2, 4, 4, 8});
    b.matmul(DType::F16, 3, 4, 5, 20, false);
    st_(b, 256, 0x3000, 16);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    auto c = rig.get<float>(0x3000, 4);
    EXPECT_TRUE(std::isinf(c[0]));
    EXPECT_TRUE(std::isnan(c[1]));  // inf * 0
    EXPECT_TRUE(std::isnan(c[2]));
    EXPECT_TRUE(std::isnan(c[3]));
}

// ---- vector unit ----

double ref_unary(VUn f, double x, double imm) {
    switch (f) {
        case VUn::COPY:
            return x;
        case VUn::SET:
            return imm;
        case VUn::NEG:
            return -x;
        case VUn::ABS:
            return std::fabs(x);
        case VUn::RELU:
            return x < 0 ? 0.0 : x;
        case VUn::EXP:
            return std::exp(x);
        case VUn::RSQRT:
            return 1.0 / std::sqrt(x);
        case VUn::SQRT:
            return std::sqrt(x);
        case VUn::RECIP:
            return 1.0 / x;
        case VUn::TANH:
            return std::tanh(x);
        case VUn::GELU:
            return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case VUn::SILU:
            return x / (1.0 + std::exp(-x));
        case VUn::LOG:
            return std::log(x);
        case VUn::SIN:
            return std::sin(x);
        case VUn::COS:
            return std::cos(x);
        case VUn::GELU_TANH:
            if (std::isinf(x)) return x > 0 ? x : 0.0;
            {
                // 0.5 x (1 + tanh u) = x / (1 + e^-2u), in long double (no cancellation)
                const long double lx = x;
                const long double u = std::sqrt(2.0L / 3.14159265358979323846264338327950288L) *
                                      (lx + 0.044715L * lx * lx * lx);
                return static_cast<double>(lx / (1 + std::exp(-2 * u)));
            }
        case VUn::FLOOR:
            return std::floor(x);
        case VUn::CEIL:
            return std::ceil(x);
        case VUn::TRUNC:
            return std::trunc(x);
        case VUn::ROUND: {
            // half to even, written without rint: round half up, then step back from odd ties
            double r = std::floor(x + 0.5);
            if (r - x == 0.5 && std::fmod(r, 2.0) != 0) r -= 1;
            return std::isfinite(x) ? std::copysign(r, x) : x;
        }
        case VUn::SIGN:
            return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
        case VUn::ERF:
            return std::erf(x);
        case VUn::ERFC:
            return std::erfc(x);
        case VUn::LOG1P:
            return std::log1p(x);
        case VUn::EXPM1:
            return std::expm1(x);
        case VUn::EXP2:
            return std::exp2(x);
        case VUn::LOG2:
            return std::log2(x);
        case VUn::LOG10:
            return std::log10(x);
        case VUn::TAN:
            return std::tan(x);
        case VUn::ASIN:
            return std::asin(x);
        case VUn::ACOS:
            return std::acos(x);
        case VUn::ATAN:
            return std::atan(x);
        case VUn::SINH:
            return std::sinh(x);
        case VUn::COSH:
            return std::cosh(x);
        case VUn::ASINH:
            return std::asinh(x);
        case VUn::ACOSH:
            return std::acosh(x);
        case VUn::ATANH:
            return std::atanh(x);
        default:
            return NAN;
    }
}

// Tolerance in units of the destination type: exact ops must match bit for bit.
void expect_close(DType t, float got, double ref, bool exact, const char* what, size_t i) {
    float r = round_to(t, static_cast<float>(ref));
    if (std::isnan(r) || exact) {
        EXPECT_TRUE(same_float(got, r)) << what << " [" << i << "] got " << got << " want " << r;
        return;
    }
    if (std::isinf(r)) {
        EXPECT_EQ(got, r) << what << " [" << i << "]";
        return;
    }
    const double ulp = t == DType::F32    ? 0x1p-23
                       : t == DType::F16  ? 0x1p-10
                       : t == DType::BF16 ? 0x1p-7
                                          : 1.0;
    const double tol =
        2 * ulp * std::max(std::fabs(ref), t == DType::F16 ? 0x1p-14 : 1e-30) + 1e-40;
    EXPECT_NEAR(got, ref, tol) << what << " [" << i << "]";
}

std::vector<float> special_inputs(size_t n, uint32_t seed) {
    auto v = randv(n, seed, -6, 6);
    const float sp[] = {0.0f,  -0.0f,  INFINITY, -INFINITY, NAN,
                        1e-3f, -1e-3f, 65504.f,  100.f,     -100.f};
    for (size_t i = 0; i < std::size(sp) && i < n; ++i) v[i * 3 % n] = sp[i];
    return v;
}

struct VecRun {
    uint64_t rows, cols;
    uint64_t dpad, spad;  // padding elements per row (odd strides)
};

TEST(Vector, UnaryAllFunctionsAndTypes) {
    Rig rig;
    const VecRun g{5, 37, 3, 1};
    const DType types[] = {DType::F32, DType::F16, DType::BF16};
    for (uint8_t fi = 0; fi < static_cast<uint8_t>(VUn::COUNT); ++fi) {
        for (DType st : types) {
            for (DType dt : types) {
                const VUn f = static_cast<VUn>(fi);
                const uint64_t ses = isa::dtype_size(st), des = isa::dtype_size(dt);
                const uint64_t sstride = (g.cols + g.spad) * ses, dstride = (g.cols + g.dpad) * des;
                auto in = special_inputs(g.rows * (g.cols + g.spad), 100 + fi);
                if (f == VUn::RSQRT || f == VUn::SQRT)
                    for (auto& x : in) x = std::fabs(x);
                rig.put_as(st, 0x10000, in);
                PB b;
                ld(b, 0x0, 0x10000, g.rows * sstride);
                b.li(3, 0x8000), b.li(4, 0x0);
                b.set_regs(20,
                           {int64_t(g.rows), int64_t(g.cols), int64_t(dstride), int64_t(sstride)});
                b.vun(f, dt, st, 3, 4, 20, 1.25f);
                st_(b, 0x8000, 0x20000, g.rows * dstride);
                b.halt();
                ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
                auto out = rig.get_as(dt, 0x20000, g.rows * (g.cols + g.dpad));
                const bool exact = f == VUn::COPY || f == VUn::SET || f == VUn::NEG ||
                                   f == VUn::ABS || f == VUn::RELU || f == VUn::FLOOR ||
                                   f == VUn::CEIL || f == VUn::TRUNC || f == VUn::ROUND ||
                                   f == VUn::SIGN;
                for (uint64_t r = 0; r < g.rows; ++r)
                    for (uint64_t c = 0; c < g.cols; ++c) {
                        double x = round_to(st, in[r * (g.cols + g.spad) + c]);
                        expect_close(dt, out[r * (g.cols + g.dpad) + c], ref_unary(f, x, 1.25),
                                     exact, "unary", fi * 1000 + r * 100 + c);
                    }
            }
        }
    }
}

TEST(Vector, ConversionsWithSaturation) {
    Rig rig;
    std::vector<float> in = {0.5f,    1.5f, 2.5f,     -2.5f,     127.5f, 128.f, 1e6f,  -1e6f,
                             -128.5f, NAN,  INFINITY, -INFINITY, 3.0f,   -0.4f, 1e-3f, 65520.f};
    rig.put_as(DType::F32, 0x10000, in);
    const size_t n = in.size();
    PB b;
    ld(b, 0, 0x10000, 4 * n);
    b.li(4, 0);
    b.set_regs(20, {1, int64_t(n), 0, 0});
    const DType outs[] = {DType::I8, DType::F16, DType::BF16, DType::I32};
    for (int i = 0; i < 4; ++i) {
        b.li(3, 0x1000 * (i + 1));
        b.vun(VUn::COPY, outs[i], DType::F32, 3, 4, 20);
        st_(b, 0x1000 * (i + 1), 0x20000 + 0x1000 * i, n * isa::dtype_size(outs[i]));
    }
    // int8 -> fp32 and fp16 -> int8 back-conversions
    b.li(3, 0x6000), b.li(5, 0x1000);
    b.vun(VUn::COPY, DType::F32, DType::I8, 3, 5, 20);
    st_(b, 0x6000, 0x30000, 4 * n);
    b.li(3, 0x7000), b.li(5, 0x2000);
    b.vun(VUn::COPY, DType::I8, DType::F16, 3, 5, 20);
    st_(b, 0x7000, 0x31000, n);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    auto i8 = rig.get<int8_t>(0x20000, n);
    auto f16 = rig.get_as(DType::F16, 0x21000, n);
    auto bf = rig.get_as(DType::BF16, 0x22000, n);
    auto i32 = rig.get<int32_t>(0x23000, n);
    auto back = rig.get<float>(0x30000, n);
    auto h8 = rig.get<int8_t>(0x31000, n);
    const int8_t want8[] = {0, 2, 2, -2, 127, 127, 127, -128, -128, 0, 127, -128, 3, 0, 0, 127};
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(i8[i], want8[i]) << i;
        EXPECT_TRUE(same_float(f16[i], round_to(DType::F16, in[i]))) << i;
        EXPECT_TRUE(same_float(bf[i], round_to(DType::BF16, in[i]))) << i;
        EXPECT_EQ(i32[i], num::f32_to_i32(in[i])) << i;
        EXPECT_EQ(back[i], static_cast<float>(want8[i])) << i;
        EXPECT_EQ(h8[i], num::f32_to_i8(round_to(DType::F16, in[i]))) << i;
    }
    EXPECT_TRUE(std::isinf(f16[15]));  // 65520 rounds to inf in fp16
}

double ref_binary(VBin f, double a, double b) {
    switch (f) {
        case VBin::ADD:
            return a + b;
        case VBin::SUB:
            return a - b;
        case VBin::MUL:
            return a * b;
        case VBin::DIV:
            return a / b;
        case VBin::MAX:
            return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
        case VBin::MIN:
            return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
        case VBin::EQ:
            return a == b;
        case VBin::NE:
            return a != b;
        case VBin::LT:
            return a < b;
        case VBin::LE:
            return a <= b;
        case VBin::GT:
            return a > b;
        case VBin::GE:
            return a >= b;
        default:
            return NAN;
    }
}

TEST(Vector, BinaryAllFunctionsAndBroadcasts) {
    Rig rig;
    const uint64_t rows = 4, cols = 45;
    const DType types[] = {DType::F32, DType::F16, DType::BF16};
    for (uint8_t fi = 0; fi < static_cast<uint8_t>(VBin::COUNT); ++fi) {
        for (uint8_t mi = 0; mi < static_cast<uint8_t>(Bcast::COUNT); ++mi) {
            for (DType t : types) {
                const VBin f = static_cast<VBin>(fi);
                const Bcast mode = static_cast<Bcast>(mi);
                const uint64_t es = isa::dtype_size(t);
                const uint64_t s1s = (cols + 2) * es, s2s = (cols + 5) * es, ds = (cols + 1) * es;
                auto x = special_inputs(rows * (cols + 2), 200 + fi);
                auto y = special_inputs(rows * (cols + 5), 300 + mi);
                for (auto& v : y)
                    if (v == 0.0f && f == VBin::DIV && mi == 1) v = 0.5f;
                rig.put_as(t, 0x10000, x);
                rig.put_as(t, 0x20000, y);
                PB b;
                ld(b, 0, 0x10000, rows * s1s);
                ld(b, 0x4000, 0x20000, rows * s2s);
                b.li(3, 0x8000), b.li(4, 0), b.li(5, 0x4000 + es * 3);  // src2 starts at element 3
                b.set_regs(20,
                           {int64_t(rows), int64_t(cols), int64_t(ds), int64_t(s1s), int64_t(s2s)});
                b.vbin(f, mode, t, t, 3, 4, 5, 20, -0.75f);
                st_(b, 0x8000, 0x30000, rows * ds);
                b.halt();
                ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
                auto out = rig.get_as(t, 0x30000, rows * (cols + 1));
                for (uint64_t r = 0; r < rows; ++r)
                    for (uint64_t c = 0; c < cols; ++c) {
                        double a = round_to(t, x[r * (cols + 2) + c]);
                        double bv;
                        switch (mode) {
                            case Bcast::NONE:
                                bv = y[3 + r * (cols + 5) + c];
                                break;
                            case Bcast::SCALAR:
                                bv = y[3];
                                break;
                            case Bcast::ROW:
                                bv = y[3 + c];
                                break;
                            case Bcast::COL:
                                bv = y[3 + r * (cols + 5)];
                                break;
                            default:
                                bv = -0.75;
                                break;
                        }
                        bv = round_to(t, static_cast<float>(bv));
                        // float ops are correctly rounded: exact after rounding to t (MAX/MIN too)
                        float want = static_cast<float>(ref_binary(f, a, bv));
                        float got = out[r * (cols + 1) + c];
                        float exp = round_to(t, want);
                        if ((f == VBin::MAX || f == VBin::MIN) && a == 0 && bv == 0)
                            continue;  // sign of zero
                        EXPECT_TRUE(same_float(got, exp))
                            << int(fi) << "/" << int(mi) << "/" << int(t) << " [" << r << "," << c
                            << "] " << a << " op " << bv << " got " << got << " want " << exp;
                    }
            }
        }
    }
}

TEST(Vector, Reductions) {
    Rig rig;
    const uint64_t rows = 6, cols = 53, pad = 3;
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        for (uint8_t fi = 0; fi < static_cast<uint8_t>(Red::PROD); ++fi) {  // the float functions
            for (int axis = 0; axis < 2; ++axis) {
                const uint64_t es = isa::dtype_size(t), ss = (cols + pad) * es;
                auto x = randv(rows * (cols + pad), 400 + fi, -10, 10);
                x[2 * (cols + pad) + 7] = NAN;  // row 2, column 7
                x[4 * (cols + pad) + 9] = INFINITY;
                rig.put_as(t, 0x10000, x);
                PB b;
                ld(b, 0, 0x10000, rows * ss);
                b.li(3, 0x8000), b.li(4, 0);
                b.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ss)});
                b.vred(static_cast<Red>(fi), axis, DType::F32, t, 3, 4, 20);
                st_(b, 0x8000, 0x30000, 4 * (axis ? cols : rows));
                b.halt();
                ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
                const uint64_t outn = axis ? cols : rows;
                auto out = rig.get<float>(0x30000, outn);
                for (uint64_t o = 0; o < outn; ++o) {
                    double s = 0, mx = -INFINITY, mn = INFINITY;
                    bool nan = false;
                    const uint64_t cnt = axis ? rows : cols;
                    for (uint64_t i = 0; i < cnt; ++i) {
                        const uint64_t r = axis ? i : o, c = axis ? o : i;
                        double v = round_to(t, x[r * (cols + pad) + c]);
                        nan |= std::isnan(v);
                        s += v, mx = std::max(mx, v), mn = std::min(mn, v);
                    }
                    double want = fi == 0 ? s : fi == 1 ? mx : mn;
                    if (nan) want = NAN;
                    EXPECT_TRUE(same_float(out[o], static_cast<float>(want)))
                        << int(t) << "/" << int(fi) << "/" << axis << " [" << o << "] got "
                        << out[o] << " want " << want;
                }
            }
        }
    }
}

// ---- ring, all-reduce, barrier ----

TEST(Ring, SendRecvAroundTheRing) {
    Rig rig;
    // each core fills 256 bytes with its id, sends to NEXT, receives from PREV (both directions)
    PB b;
    b.li(3, 0), b.li(4, 256), b.li(5, 0x1000), b.li(6, 0x2000);
    b.set_regs(24, {1, 64, 0, 0});
    b.vun(VUn::SET, DType::F32, DType::F32, 3, 3, 24);
    // store core id into LX[0..8) via LXST, so data differ per core
    b.lxst(3, 1, 0);
    b.lxst(3, 2, 8);
    b.send(isa::Dir::NEXT, 3, 4);
    b.send(isa::Dir::PREV, 3, 4);
    b.recv(isa::Dir::NEXT, 5, 4);
    b.recv(isa::Dir::PREV, 6, 4);
    b.muli(9, 1, 1024);
    b.addi(9, 9, 0x100000);
    b.li(10, 0x1000), b.li(12, 256);
    b.store(10, 9, 12);
    b.li(10, 0x2000);
    b.store(10, 9, 12, 0, 512);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    for (uint64_t c = 0; c < 32; ++c) {
        auto from_prev = rig.get<uint64_t>(0x100000 + 1024 * c, 2);
        auto from_next = rig.get<uint64_t>(0x100000 + 1024 * c + 512, 2);
        EXPECT_EQ(from_prev[0], (c + 31) % 32);
        EXPECT_EQ(from_next[0], (c + 1) % 32);
        EXPECT_EQ(from_prev[1], 32u);
    }
    EXPECT_EQ(rig.res.ring_bytes, 32u * 2 * 256);
}

TEST(Ring, AllReduceSumAndMax) {
    Rig rig;
    const uint64_t n = 100;
    // core c contributes v[i] = c * 0.5 + i
    std::vector<float> base(n);
    for (uint64_t i = 0; i < n; ++i) base[i] = static_cast<float>(i);
    rig.put_as(DType::F32, 0x10000, base);
    PB b;
    ld(b, 0, 0x10000, 4 * n);
    b.li(3, 0), b.li(4, 0x1000), b.li(5, 0x2000), b.li(6, n);
    b.set_regs(20, {1, int64_t(n), 0, 0, 0});
    // r7 = core id as fp32 * 0.5: build via LX: store id as int32 and convert
    b.li(8, 0x3000);
    b.lxst(8, 1, 0);
    b.set_regs(26, {1, 1, 0, 0, 0});
    b.vun(VUn::COPY, DType::F32, DType::I32, 8, 8, 26);
    b.vbin(isa::VBin::MUL, Bcast::IMM, DType::F32, DType::F32, 8, 8, 0, 26, 0.5f);
    b.vbin(isa::VBin::ADD, Bcast::SCALAR, DType::F32, DType::F32, 4, 3, 8, 20);
    b.allreduce(Red::SUM, DType::F32, 5, 4, 6);
    b.barrier();
    b.allreduce(Red::MAX, DType::F32, 4, 4, 6);  // in place
    b.muli(9, 1, 1024);
    b.addi(9, 9, 0x100000);
    b.li(12, 4 * n);
    b.store(5, 9, 12);
    b.store(4, 9, 12, 0, 0x80000);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    for (uint64_t c = 0; c < 32; ++c) {
        auto s = rig.get<float>(0x100000 + 1024 * c, n);
        auto m = rig.get<float>(0x180000 + 1024 * c, n);
        for (uint64_t i = 0; i < n; ++i) {
            float acc = 0;
            for (int k = 0; k < 32; ++k) acc += static_cast<float>(i) + 0.5f * k;
            ASSERT_EQ(s[i], acc);
            ASSERT_EQ(m[i], static_cast<float>(i) + 15.5f);
        }
    }
}

TEST(Sync, BarrierOrdersDdrAccessBetweenCores) {
    Rig rig;
    // core c writes its id to slot c, barrier, then reads slot (c+1)%n and stores it at out[c]
    PB b;
    b.li(3, 0);
    b.lxst(3, 1, 0);
    b.li(4, 8);
    b.muli(5, 1, 128);
    b.addi(5, 5, 0x10000);
    b.store(3, 5, 4);
    b.barrier();
    b.addi(6, 1, 1);
    b.alu(Alu::REMU, 6, 6, 2);
    b.muli(6, 6, 128);
    b.addi(6, 6, 0x10000);
    b.li(7, 0x100);
    b.load(7, 6, 4);
    b.muli(8, 1, 128);
    b.addi(8, 8, 0x20000);
    b.store(7, 8, 4);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    for (uint64_t c = 0; c < 32; ++c)
        EXPECT_EQ(rig.get<uint64_t>(0x20000 + 128 * c, 1)[0], (c + 1) % 32);
}

}  // namespace
}  // namespace spyre::test
