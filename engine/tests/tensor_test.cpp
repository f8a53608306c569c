// SPDX-License-Identifier: MIT
// The tensor instructions (VTRANS, VSEL, VIOTA, VFMA, VBIN compares and mixed types, the new
// VUN functions, MM transpose flags) against scalar references, their faults, cycle costs,
// builder encodings, and a fuzz test of random encodings.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Bcast;
using isa::VBin;
using isa::VUn;

// LX images as in LxImageRun (test_util.hpp).
constexpr uint64_t kIn = kLxIn, kOut = kLxOut;

struct LxRun : LxImageRun {
    using LxImageRun::LxImageRun;
    void put(DType t, uint64_t off, const std::vector<float>& v) { rig.put_as(t, kIn + off, v); }
    std::vector<float> in(DType t, uint64_t off, size_t n) const {
        return rig.get_as(t, kIn + off, n);
    }
    std::vector<float> out(DType t, uint64_t off, size_t n) const {
        return rig.get_as(t, kOut + off, n);
    }
    float out1(DType t, uint64_t off) const { return out(t, off, 1)[0]; }
    float in1(DType t, uint64_t off) const { return in(t, off, 1)[0]; }
};

std::vector<float> specials_in(size_t n, uint32_t seed, float lo = -6, float hi = 6) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    const float sp[] = {0.0f,  -0.0f,  INFINITY, -INFINITY, NAN,   1e-40f, -1e-40f,
                        3e-6f, -3e-6f, 65504.f,  1.0f,      -1.0f, 0.5f};
    for (size_t i = 0; i < std::size(sp) && i < n; ++i) v[(i * 7) % n] = sp[i];
    return v;
}

uint64_t es(DType t) { return isa::dtype_size(t); }
bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// ---------------------------------------------------------------------------------------------
// VTRANS

struct TrCase {
    DType dt, st;
    uint64_t rows, cols;
};

class TransposeTest : public ::testing::TestWithParam<TrCase> {};

TEST_P(TransposeTest, MatchesReference) {
    const TrCase tc = GetParam();
    Rig rig(1, 8u << 20, 1);
    const uint64_t sstride = (tc.cols + 3) * es(tc.st), dstride = (tc.rows + 5) * es(tc.dt);
    const uint64_t src = 0, dst = (tc.rows * sstride + 127) / 128 * 128;
    LxRun lx(rig, dst + tc.cols * dstride + 128);
    std::mt19937 rng(tc.rows * 131 + tc.cols);
    if (tc.dt == tc.st) {
        // arbitrary bit patterns (NaN payloads, denormals, -0): copied bit for bit
        for (uint64_t i = 0; i < tc.rows * sstride; ++i)
            rig.mem[kIn + src + i] = static_cast<uint8_t>(rng());
    } else {
        lx.put(tc.st, src, specials_in(tc.rows * sstride / es(tc.st), tc.rows, -200, 200));
    }
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, dst), b.li(4, src);
        b.set_regs(20, {int64_t(tc.rows), int64_t(tc.cols), int64_t(dstride), int64_t(sstride)});
        b.vtrans(tc.dt, tc.st, 3, 4, 20);
    }),
              0)
        << rig.res.message;
    for (uint64_t i = 0; i < tc.rows; ++i)
        for (uint64_t j = 0; j < tc.cols; ++j) {
            const uint64_t so = src + i * sstride + j * es(tc.st),
                           dof = dst + j * dstride + i * es(tc.dt);
            if (tc.dt == tc.st) {
                ASSERT_EQ(std::memcmp(&rig.mem[kIn + so], &rig.mem[kOut + dof], es(tc.dt)), 0)
                    << i << "," << j;
            } else {
                const float want = round_to(tc.dt, lx.in1(tc.st, so));
                ASSERT_TRUE(same_float(lx.out1(tc.dt, dof), want)) << i << "," << j;
            }
        }
    // padding between destination rows is untouched (it was loaded as zero)
    if (tc.rows * es(tc.dt) < dstride) {
        EXPECT_EQ(rig.mem[kOut + dst + tc.rows * es(tc.dt)], 0);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransposeTest,
    ::testing::Values(TrCase{DType::F16, DType::F16, 1, 1}, TrCase{DType::F16, DType::F16, 1, 37},
                      TrCase{DType::F16, DType::F16, 37, 1},
                      TrCase{DType::F16, DType::F16, 67, 130},
                      TrCase{DType::BF16, DType::BF16, 33, 65},
                      TrCase{DType::F32, DType::F32, 5, 70}, TrCase{DType::F32, DType::F32, 64, 64},
                      TrCase{DType::F32, DType::F32, 37, 100}, TrCase{DType::I8, DType::I8, 129, 3},
                      TrCase{DType::I32, DType::I32, 9, 41}, TrCase{DType::F32, DType::F16, 17, 40},
                      TrCase{DType::BF16, DType::F32, 40, 17},
                      TrCase{DType::F16, DType::BF16, 3, 3}, TrCase{DType::F32, DType::I8, 7, 9},
                      TrCase{DType::I8, DType::F32, 9, 7}));

TEST(Transpose, InPlaceAndOverlapping) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t n = 48, stride = n * 2;
    for (int64_t shift : {0, 64, -64}) {
        const uint64_t src = 4096, dst = src + shift;
        LxRun lx(rig, 16384);
        std::vector<float> v(n * n);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 2000) - 1000;
        lx.put(DType::F16, src, v);
        ASSERT_EQ(lx.run([&](PB& b) {
            b.li(3, dst), b.li(4, src);
            b.set_regs(20, {int64_t(n), int64_t(n), int64_t(stride), int64_t(stride)});
            b.vtrans(DType::F16, DType::F16, 3, 4, 20);
        }),
                  0)
            << rig.res.message;
        auto out = lx.out(DType::F16, dst, n * n);
        for (uint64_t i = 0; i < n; ++i)
            for (uint64_t j = 0; j < n; ++j)
                ASSERT_EQ(out[j * n + i], v[i * n + j]) << shift << " " << i << "," << j;
    }
}

// ---------------------------------------------------------------------------------------------
// MM with transposed operands

struct MmtCase {
    DType t;
    uint64_t m, n, k;
    bool ta, tb, acc;
};

class MatmulTransposeTest : public ::testing::TestWithParam<MmtCase> {};

TEST_P(MatmulTransposeTest, MatchesScalarReference) {
    const MmtCase cs = GetParam();
    Rig rig(1, 8u << 20, 1);
    const uint64_t e = es(cs.t);
    const bool is_int = cs.t == DType::I8;
    // stored shapes: A is K x M when transposed, B is N x K when transposed; rows padded
    const uint64_t ar = cs.ta ? cs.k : cs.m, ac = cs.ta ? cs.m : cs.k;
    const uint64_t br = cs.tb ? cs.n : cs.k, bc = cs.tb ? cs.k : cs.n;
    const uint64_t lda = (ac + 3) * e, ldb = (bc + 5) * e, ldc = (cs.n + 1) * 4;
    const uint64_t la = 0, lb = (ar * lda + 127) / 128 * 128,
                   lc = lb + (br * ldb + 127) / 128 * 128;
    LxRun lx(rig, lc + cs.m * ldc + 128);
    const float lo = is_int ? -128.f : -2.f, hi = is_int ? 127.f : 2.f;
    auto a = specials_in(ar * lda / e, 11, lo, hi), bm = specials_in(br * ldb / e, 12, lo, hi);
    for (auto* v : {&a, &bm})
        for (auto& x : *v) x = is_int ? std::round(std::isfinite(x) ? x : 3.f) : x;
    auto c0 = specials_in(cs.m * ldc / 4, 13, -1, 1);
    for (auto& x : c0)
        if (is_int || !std::isfinite(x)) x = std::round(std::isfinite(x) ? x * 1000 : 7.f);
    lx.put(cs.t, la, a);
    lx.put(cs.t, lb, bm);
    lx.put(is_int ? DType::I32 : DType::F32, lc, c0);
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, lc), b.li(4, la), b.li(5, lb);
        b.set_regs(20, {int64_t(cs.m), int64_t(cs.n), int64_t(cs.k), int64_t(lda), int64_t(ldb),
                        int64_t(ldc)});
        b.matmul(cs.t, 3, 4, 5, 20, cs.acc, cs.ta, cs.tb);
    }),
              0)
        << rig.res.message;
    auto A = [&](uint64_t i, uint64_t k) {
        return cs.ta ? a[k * (lda / e) + i] : a[i * (lda / e) + k];
    };
    auto B = [&](uint64_t k, uint64_t j) {
        return cs.tb ? bm[j * (ldb / e) + k] : bm[k * (ldb / e) + j];
    };
    for (uint64_t i = 0; i < cs.m; ++i)
        for (uint64_t j = 0; j < cs.n; ++j) {
            const uint64_t co = lc + i * ldc + 4 * j;
            if (is_int) {
                uint32_t acc =
                    cs.acc ? static_cast<uint32_t>(num::f32_to_i32(c0[i * ldc / 4 + j])) : 0;
                for (uint64_t k = 0; k < cs.k; ++k)
                    acc += static_cast<uint32_t>(num::f32_to_i8(A(i, k)) * num::f32_to_i8(B(k, j)));
                int32_t got;
                std::memcpy(&got, &rig.mem[kOut + co], 4);
                ASSERT_EQ(static_cast<uint32_t>(got), acc) << i << "," << j;
            } else {
                float acc = cs.acc ? c0[i * ldc / 4 + j] : 0.0f;
                for (uint64_t k = 0; k < cs.k; ++k)
                    acc = std::fma(round_to(cs.t, A(i, k)), round_to(cs.t, B(k, j)), acc);
                ASSERT_TRUE(same_float(lx.out1(DType::F32, co), acc))
                    << i << "," << j << " " << lx.out1(DType::F32, co) << " vs " << acc;
            }
        }
    EXPECT_EQ(rig.res.macs, cs.m * cs.n * cs.k);
}

INSTANTIATE_TEST_SUITE_P(Flags, MatmulTransposeTest,
                         ::testing::Values(MmtCase{DType::F16, 5, 70, 33, false, true, false},
                                           MmtCase{DType::F16, 5, 70, 33, true, false, true},
                                           MmtCase{DType::F16, 17, 9, 64, true, true, false},
                                           MmtCase{DType::BF16, 64, 64, 64, false, true, true},
                                           MmtCase{DType::F32, 7, 19, 23, true, true, true},
                                           MmtCase{DType::F32, 1, 1, 1, false, true, false},
                                           MmtCase{DType::F32, 1, 40, 130, false, true, false},
                                           MmtCase{DType::F32, 9, 600, 300, false, true, true},
                                           MmtCase{DType::F32, 1, 300, 270, false, true, true},
                                           MmtCase{DType::I8, 13, 67, 45, false, true, true},
                                           MmtCase{DType::I8, 6, 16, 7, true, false, false},
                                           MmtCase{DType::F16, 9, 130, 0, true, true, true}));

// The attention use: scores = Q K^T with Q (S x D) and K (S x D) both as stored, no transpose.
TEST(MatmulTranspose, QKtEqualsExplicitTranspose) {
    Rig rig(1, 8u << 20, 1);
    const int64_t S = 40, D = 64;
    LxRun lx(rig, 0x10000);
    lx.put(DType::F16, 0, specials_in(S * D, 5, -1, 1));
    lx.put(DType::F16, 0x2000, specials_in(S * D, 6, -1, 1));
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, 0x6000), b.li(4, 0), b.li(5, 0x2000), b.li(6, 0x4000), b.li(7, 0x8000);
        b.set_regs(20, {S, S, D, D * 2, D * 2, S * 4});
        b.matmul(DType::F16, 3, 4, 5, 20, false, false, true);  // Q K^T
        b.set_regs(20, {S, D, S * 2, D * 2});
        b.vtrans(DType::F16, DType::F16, 6, 5, 20);  // K^T (D x S) explicitly
        b.set_regs(20, {S, S, D, D * 2, S * 2, S * 4});
        b.matmul(DType::F16, 7, 4, 6, 20, false);
    }),
              0)
        << rig.res.message;
    EXPECT_EQ(std::memcmp(&rig.mem[kOut + 0x6000], &rig.mem[kOut + 0x8000], S * S * 4), 0);
}

// ---------------------------------------------------------------------------------------------
// VBIN: compares into other types, mixed-type src2

TEST(Compare, MasksInEveryDestinationType) {
    Rig rig(1, 8u << 20, 1);
    const std::vector<float> a = {1, 2, NAN, -0.0f, INFINITY, -3, 5, 1e-40f};
    const std::vector<float> bv = {1, 1, 1, 0.0f, INFINITY, NAN, 6, 0};
    const uint64_t n = a.size();
    for (DType dt : {DType::I8, DType::I32, DType::F16, DType::BF16, DType::F32}) {
        for (uint8_t f = uint8_t(VBin::EQ); f <= uint8_t(VBin::GE); ++f) {
            LxRun lx(rig, 1024);
            lx.put(DType::F32, 0, a);
            lx.put(DType::F32, 128, bv);
            ASSERT_EQ(lx.run([&](PB& b) {
                b.li(3, 512), b.li(4, 0), b.li(5, 128);
                b.set_regs(20, {1, int64_t(n), 0, 0, 0});
                b.vbin(static_cast<VBin>(f), Bcast::NONE, dt, DType::F32, 3, 4, 5, 20);
            }),
                      0)
                << rig.res.message;
            auto out = lx.out(dt, 512, n);
            for (uint64_t i = 0; i < n; ++i) {
                const float x = a[i], y = bv[i];
                const bool want = f == uint8_t(VBin::EQ)   ? x == y
                                  : f == uint8_t(VBin::NE) ? x != y
                                  : f == uint8_t(VBin::LT) ? x < y
                                  : f == uint8_t(VBin::LE) ? x <= y
                                  : f == uint8_t(VBin::GT) ? x > y
                                                           : x >= y;
                ASSERT_EQ(out[i], want ? 1.0f : 0.0f) << int(f) << " " << i << " dt " << int(dt);
                // +0.0, not -0.0
                if (!want && is_float(dt)) {
                    ASSERT_FALSE(std::signbit(out[i]));
                }
            }
        }
    }
}

TEST(MixedVbin, SecondOperandOfItsOwnType) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t rows = 5, cols = 67;
    const std::pair<DType, DType> pairs[] = {{DType::F16, DType::F32}, {DType::BF16, DType::F32},
                                             {DType::F32, DType::F16}, {DType::F16, DType::BF16},
                                             {DType::F16, DType::I8},  {DType::BF16, DType::I32}};
    for (auto [st, s2t] : pairs) {
        for (uint8_t fi = 0; fi < uint8_t(VBin::COUNT); ++fi) {
            for (uint8_t mi = 0; mi < uint8_t(Bcast::IMM); ++mi) {
                const VBin f = static_cast<VBin>(fi);
                const Bcast mode = static_cast<Bcast>(mi);
                const DType dt = st;
                const uint64_t s1s = (cols + 2) * es(st), s2s = (cols + 3) * es(s2t),
                               ds = (cols + 1) * es(dt);
                const uint64_t L1 = 0, L2 = 0x2000, LD = 0x4000;
                LxRun lx(rig, 0x6000);
                auto x = specials_in(rows * s1s / es(st), 30 + fi);
                auto y = specials_in(rows * s2s / es(s2t), 40 + mi, -300, 300);
                lx.put(st, L1, x);
                lx.put(s2t, L2, y);
                ASSERT_EQ(lx.run([&](PB& b) {
                    b.li(3, LD), b.li(4, L1), b.li(5, L2 + es(s2t));  // src2 from element 1
                    b.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ds), int64_t(s1s),
                                    int64_t(s2s)});
                    b.vbin2(f, mode, dt, st, s2t, 3, 4, 5, 20);
                }),
                          0)
                    << rig.res.message;
                for (uint64_t r = 0; r < rows; ++r)
                    for (uint64_t c = 0; c < cols; ++c) {
                        const float a = lx.in1(st, L1 + r * s1s + c * es(st));
                        uint64_t yo = 0;
                        switch (mode) {
                            case Bcast::NONE:
                                yo = r * s2s + c * es(s2t);
                                break;
                            case Bcast::ROW:
                                yo = c * es(s2t);
                                break;
                            case Bcast::COL:
                                yo = r * s2s;
                                break;
                            default:
                                break;
                        }
                        const float bv = lx.in1(s2t, L2 + es(s2t) + yo);
                        float want;
                        switch (f) {
                            case VBin::ADD:
                                want = a + bv;
                                break;
                            case VBin::SUB:
                                want = a - bv;
                                break;
                            case VBin::MUL:
                                want = a * bv;
                                break;
                            case VBin::DIV:
                                want = a / bv;
                                break;
                            case VBin::MAX:
                                want = (a > bv || a != a) ? a : bv;
                                break;
                            case VBin::MIN:
                                want = (a < bv || a != a) ? a : bv;
                                break;
                            case VBin::EQ:
                                want = a == bv;
                                break;
                            case VBin::NE:
                                want = a != bv;
                                break;
                            case VBin::LT:
                                want = a < bv;
                                break;
                            case VBin::LE:
                                want = a <= bv;
                                break;
                            case VBin::GT:
                                want = a > bv;
                                break;
                            default:
                                want = a >= bv;
                                break;
                        }
                        const float got = lx.out1(dt, LD + r * ds + c * es(dt));
                        ASSERT_TRUE(same_float(got, round_to(dt, want)))
                            << int(st) << "/" << int(s2t) << " f" << int(fi) << " m" << int(mi)
                            << " [" << r << "," << c << "] " << a << " op " << bv << " got " << got;
                    }
            }
        }
    }
}

// Softmax's first step on fp16 scores: subtract an fp32 row max (COL broadcast).
TEST(MixedVbin, SubtractFp32RowMaxFromFp16Tile) {
    Rig rig(1, 8u << 20, 1);
    const int64_t rows = 8, cols = 64;
    LxRun lx(rig, 0x4000);
    auto x = specials_in(rows * cols, 3, -30, 30);
    for (auto& v : x)
        if (!std::isfinite(v)) v = 1;
    lx.put(DType::F16, 0, x);
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, 0x1000), b.li(4, 0), b.li(5, 0x2000);
        b.set_regs(20, {rows, cols, cols * 2});
        b.vred(isa::Red::MAX, 0, DType::F32, DType::F16, 5, 4, 20);  // fp32 row maxima
        b.set_regs(20, {rows, cols, cols * 2, cols * 2, 4});
        b.vbin2(VBin::SUB, Bcast::COL, DType::F16, DType::F16, DType::F32, 3, 4, 5, 20);
    }),
              0)
        << rig.res.message;
    auto out = lx.out(DType::F16, 0x1000, rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
        float mx = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, round_to(DType::F16, x[r * cols + c]));
        for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(out[r * cols + c],
                      round_to(DType::F16, round_to(DType::F16, x[r * cols + c]) - mx));
    }
}

// ---------------------------------------------------------------------------------------------
// VSEL

TEST(Select, AllModesTypesAndInvert) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t rows = 4, cols = 45;
    struct T {
        DType dt, st, mt, yt;
    };
    const T types[] = {{DType::F16, DType::F16, DType::I8, isa::kSrcType},
                       {DType::F32, DType::F32, DType::F32, isa::kSrcType},
                       {DType::BF16, DType::F32, DType::F16, DType::BF16},
                       {DType::I32, DType::I8, DType::I32, DType::F32}};
    for (const T& t : types) {
        const DType yt = t.yt == isa::kSrcType ? t.st : t.yt;
        for (uint8_t ym = 0; ym < uint8_t(Bcast::COUNT); ++ym)
            for (uint8_t mm = 0; mm < uint8_t(Bcast::IMM); ++mm)
                for (bool inv : {false, true}) {
                    const Bcast ymode = static_cast<Bcast>(ym), mmode = static_cast<Bcast>(mm);
                    const uint64_t xs = (cols + 1) * es(t.st), ys = (cols + 2) * es(yt),
                                   ms = (cols + 3) * es(t.mt), ds = (cols + 4) * es(t.dt);
                    const uint64_t LX_ = 0, LY = 0x1000, LM = 0x2000, LD = 0x3000;
                    LxRun lx(rig, 0x4000);
                    lx.put(t.st, LX_, specials_in(rows * xs / es(t.st), 1, -100, 100));
                    lx.put(yt, LY, specials_in(rows * ys / es(yt), 2, -100, 100));
                    std::vector<float> m(rows * ms / es(t.mt));
                    std::mt19937 rng(ym * 10 + mm);
                    const float mv[] = {0.0f, -0.0f, 1.0f, -2.0f, NAN, 0.0f, 1e-40f};
                    for (auto& v : m) v = mv[rng() % std::size(mv)];
                    lx.put(t.mt, LM, m);
                    ASSERT_EQ(lx.run([&](PB& b) {
                        b.li(3, LD), b.li(4, LX_), b.li(5, ymode == Bcast::IMM ? 0 : LY);
                        b.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ds), int64_t(xs),
                                        int64_t(ys), int64_t(LM), int64_t(ms)});
                        b.vsel(t.dt, t.st, 3, 4, ymode == Bcast::IMM ? 0 : 5, 20, ymode, -7.5f, inv,
                               mmode, t.mt, ymode == Bcast::IMM ? isa::kSrcType : t.yt);
                    }),
                              0)
                        << rig.res.message;
                    auto at = [&](Bcast mode, uint64_t base, uint64_t stride, DType ty, uint64_t r,
                                  uint64_t c) {
                        switch (mode) {
                            case Bcast::NONE:
                                return lx.in1(ty, base + r * stride + c * es(ty));
                            case Bcast::SCALAR:
                                return lx.in1(ty, base);
                            case Bcast::ROW:
                                return lx.in1(ty, base + c * es(ty));
                            case Bcast::COL:
                                return lx.in1(ty, base + r * stride);
                            default:
                                return -7.5f;
                        }
                    };
                    for (uint64_t r = 0; r < rows; ++r)
                        for (uint64_t c = 0; c < cols; ++c) {
                            const float mk = at(mmode, LM, ms, t.mt, r, c);
                            const bool take_x = (mk != 0.0f) != inv;
                            const float v = take_x ? at(Bcast::NONE, LX_, xs, t.st, r, c)
                                                   : at(ymode, LY, ys, yt, r, c);
                            const float got = lx.out1(t.dt, LD + r * ds + c * es(t.dt));
                            ASSERT_TRUE(same_float(got, round_to(t.dt, v)))
                                << int(ym) << "/" << int(mm) << "/" << inv << " [" << r << "," << c
                                << "] mask " << mk << " got " << got;
                        }
                }
    }
}

// masked_fill in place: x = mask ? -inf : x (invert with an IMM y), fp16 data, int8 mask.
TEST(Select, MaskedFillInPlace) {
    Rig rig(1, 8u << 20, 1);
    const int64_t rows = 3, cols = 64;
    LxRun lx(rig, 0x2000);
    auto x = specials_in(rows * cols, 9);
    std::vector<float> m(cols);
    for (int64_t c = 0; c < cols; ++c) m[c] = c % 3 == 0;
    lx.put(DType::F16, 0, x);
    lx.put(DType::I8, 0x1000, m);
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, 0);
        b.set_regs(20, {rows, cols, cols * 2, cols * 2, 0, 0x1000, 0});
        b.vsel(DType::F16, DType::F16, 3, 3, 0, 20, Bcast::IMM, -INFINITY, true, Bcast::ROW,
               DType::I8);
    }),
              0)
        << rig.res.message;
    auto out = lx.out(DType::F16, 0, rows * cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            ASSERT_TRUE(same_float(out[r * cols + c],
                                   m[c] ? -INFINITY : round_to(DType::F16, x[r * cols + c])));
}

// ---------------------------------------------------------------------------------------------
// VIOTA

TEST(Iota, AffineIndicesInEveryType) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t rows = 7, cols = 45;
    const int64_t abg[][3] = {{0, 1, 0},        {1, 0, 0},        {int64_t(cols), 1, 0},
                              {-3, 7, 1 << 30}, {1, -1, 5},       {0, 1, int64_t(1) << 40},
                              {-1000, 3, -17},  {INT64_MAX, 2, 0}};
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8}) {
        for (const auto& p : abg) {
            const uint64_t ds = (cols + 3) * es(dt);
            LxRun lx(rig, 0x1000);
            ASSERT_EQ(lx.run([&](PB& b) {
                b.li(3, 0x100);
                b.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ds), 0, p[0], p[1], p[2]});
                b.viota(dt, 3, 20);
            }),
                      0)
                << rig.res.message;
            for (uint64_t i = 0; i < rows; ++i)
                for (uint64_t j = 0; j < cols; ++j) {
                    const int64_t v = static_cast<int64_t>(i * uint64_t(p[0]) + j * uint64_t(p[1]) +
                                                           uint64_t(p[2]));
                    const uint64_t off = 0x100 + i * ds + j * es(dt);
                    if (dt == DType::I32) {
                        int32_t got;
                        std::memcpy(&got, &rig.mem[kOut + off], 4);
                        ASSERT_EQ(got, std::clamp<int64_t>(v, INT32_MIN, INT32_MAX))
                            << i << "," << j;
                    } else if (dt == DType::I8) {
                        ASSERT_EQ(static_cast<int8_t>(rig.mem[kOut + off]),
                                  std::clamp<int64_t>(v, -128, 127));
                    } else {
                        ASSERT_TRUE(
                            same_float(lx.out1(dt, off), round_to(dt, static_cast<float>(v))))
                            << int(dt) << " " << v;
                    }
                }
        }
    }
}

// Causal masks: keep element (i, j) where j <= i + off, else -inf; in place on fp32 scores
// and fp16 -> fp16 into another buffer.
TEST(Iota, CausalMask) {
    Rig rig(1, 8u << 20, 1);
    const int64_t rows = 9, cols = 70;
    for (DType t : {DType::F32, DType::F16}) {
        for (int64_t off : {0, 3, -2, 100}) {
            const int64_t stride = (cols + 2) * es(t);
            const uint64_t dst = t == DType::F32 ? 0 : 0x2000;
            LxRun lx(rig, 0x4000);
            auto x = specials_in(rows * stride / es(t), 77);
            lx.put(t, 0, x);
            ASSERT_EQ(lx.run([&](PB& b) {
                b.li(3, dst), b.li(4, 0);
                b.set_regs(20, {rows, cols, stride, stride, 1, -1, off});
                b.vmask(t, t, 3, 4, 20, -INFINITY);
            }),
                      0)
                << rig.res.message;
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j) {
                    const float want =
                        j <= i + off ? round_to(t, x[i * stride / es(t) + j]) : -INFINITY;
                    ASSERT_TRUE(same_float(lx.out1(t, dst + i * stride + j * es(t)), want))
                        << off << " " << i << "," << j;
                }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// VFMA

TEST(Fma, AllBroadcastsAndTypes) {
    Rig rig(1, 8u << 20, 1);
    const uint64_t rows = 3, cols = 37;
    struct T {
        DType dt, st, t2, t3;
    };
    const T types[] = {{DType::F32, DType::F32, DType::F32, DType::F32},
                       {DType::F16, DType::F16, DType::F32, DType::F32},  // layer norm affine
                       {DType::BF16, DType::BF16, DType::F32, DType::BF16},
                       {DType::F16, DType::F32, DType::F16, DType::I8}};
    for (const T& t : types)
        for (uint8_t m2 = 0; m2 < uint8_t(Bcast::COUNT); ++m2)
            for (uint8_t m3 = 0; m3 < uint8_t(Bcast::COUNT); ++m3) {
                const Bcast b2 = static_cast<Bcast>(m2), b3 = static_cast<Bcast>(m3);
                const uint64_t s1s = (cols + 1) * es(t.st), s2s = (cols + 2) * es(t.t2),
                               s3s = (cols + 3) * es(t.t3), ds = (cols + 5) * es(t.dt);
                const uint64_t L1 = 0, L2 = 0x1000, L3 = 0x2000, LD = 0x3000;
                LxRun lx(rig, 0x4000);
                lx.put(t.st, L1, specials_in(rows * s1s / es(t.st), 1));
                lx.put(t.t2, L2, specials_in(rows * s2s / es(t.t2), 2, -3, 3));
                lx.put(t.t3, L3, specials_in(rows * s3s / es(t.t3), 3, -50, 50));
                ASSERT_EQ(lx.run([&](PB& b) {
                    b.li(3, LD), b.li(4, L1), b.li(5, b2 == Bcast::IMM ? 0 : L2);
                    b.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(ds), int64_t(s1s),
                                    int64_t(s2s), int64_t(L3), int64_t(s3s)});
                    b.vfma(t.dt, t.st, 3, 4, b2 == Bcast::IMM ? 0 : 5, 20, b2, b3, 1.5f, -0.25f,
                           b2 == Bcast::IMM ? isa::kSrcType : t.t2,
                           b3 == Bcast::IMM ? isa::kSrcType : t.t3);
                }),
                          0)
                    << rig.res.message;
                auto at = [&](Bcast mode, uint64_t base, uint64_t stride, DType ty, uint64_t r,
                              uint64_t c, float imm) {
                    switch (mode) {
                        case Bcast::NONE:
                            return lx.in1(ty, base + r * stride + c * es(ty));
                        case Bcast::SCALAR:
                            return lx.in1(ty, base);
                        case Bcast::ROW:
                            return lx.in1(ty, base + c * es(ty));
                        case Bcast::COL:
                            return lx.in1(ty, base + r * stride);
                        default:
                            return imm;
                    }
                };
                for (uint64_t r = 0; r < rows; ++r)
                    for (uint64_t c = 0; c < cols; ++c) {
                        const float x = at(Bcast::NONE, L1, s1s, t.st, r, c, 0);
                        const float y = at(b2, L2, s2s, t.t2, r, c, 1.5f);
                        const float z = at(b3, L3, s3s, t.t3, r, c, -0.25f);
                        const float want = round_to(t.dt, std::fma(x, y, z));
                        const float got = lx.out1(t.dt, LD + r * ds + c * es(t.dt));
                        ASSERT_TRUE(same_float(got, want))
                            << int(m2) << "/" << int(m3) << " [" << r << "," << c << "] fma(" << x
                            << "," << y << "," << z << ") got " << got << " want " << want;
                    }
            }
}

TEST(Fma, IsFusedAndInPlace) {
    Rig rig(1, 8u << 20, 1);
    // (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly when fused; 0 with a rounded product
    LxRun lx(rig, 1024);
    lx.put(DType::F32, 0, {1.0f + 0x1p-23f});
    lx.put(DType::F32, 128, {1.0f - 0x1p-23f});
    ASSERT_EQ(lx.run([&](PB& b) {
        b.li(3, 0), b.li(5, 128);
        b.set_regs(20, {1, 1, 4, 4, 4, 0, 0});
        b.vfma(DType::F32, DType::F32, 3, 3, 5, 20, Bcast::NONE, Bcast::IMM, 0, -1.0f);
    }),
              0)
        << rig.res.message;
    EXPECT_EQ(lx.out1(DType::F32, 0), -0x1p-46f);
}

// ---------------------------------------------------------------------------------------------
// New unary functions: accuracy against a long double reference.

long double ref_fn(VUn f, long double x) {
    switch (f) {
        case VUn::LOG:
            return std::log(x);
        case VUn::SIN:
            return std::sin(x);
        case VUn::COS:
            return std::cos(x);
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
        default: {  // GELU_TANH = x / (1 + e^-2u), u = sqrt(2/pi) (x + 0.044715 x^3)
            if (std::isinf(x)) return x > 0 ? x : -0.0L;
            const long double u = std::sqrt(2.0L / 3.14159265358979323846264338327950288L) *
                                  (x + 0.044715L * x * x * x);
            return x / (1 + std::exp(-2 * u));
        }
    }
}

// Position of v in the ordered list of values of type t (adjacent values differ by 1).
int64_t ordinal(DType t, float v) {
    int64_t bits, sign;
    if (t == DType::F32) {
        bits = std::bit_cast<uint32_t>(v) & 0x7fffffff, sign = std::signbit(v);
    } else {
        const uint16_t h = t == DType::F16 ? num::f32_to_f16(v) : num::f32_to_bf16(v);
        bits = h & 0x7fff, sign = h >> 15;
    }
    return sign ? -bits : bits;
}

std::vector<float> unary_inputs(VUn f) {
    std::vector<float> v;
    std::mt19937 rng{static_cast<uint32_t>(f)};
    auto uni = [&](float lo, float hi, int n) {
        std::uniform_real_distribution<float> d(lo, hi);
        for (int i = 0; i < n; ++i) v.push_back(d(rng));
    };
    switch (f) {
        case VUn::LOG:
            for (float x = 1e-45f; x < 3e38f; x = std::max(x * 1.37f, std::nextafter(x, 1.0f)))
                v.push_back(x);
            uni(0.5f, 2.0f, 1500), uni(0, 100, 500);
            break;
        case VUn::SIN:
        case VUn::COS:
            uni(-10, 10, 1500), uni(-1e4f, 1e4f, 500);
            for (int k = 1; k < 200; ++k) v.push_back(static_cast<float>(k * M_PI / 2));
            for (float x = 1e-30f; x < 1e30f; x *= 3.1f) v.push_back(x), v.push_back(-x);
            break;
        case VUn::LOG2:
        case VUn::LOG10:
        case VUn::ACOSH:  // log-like: the whole positive range (NaN below 1 for ACOSH)
            for (float x = 1e-45f; x < 3e38f; x = std::max(x * 1.37f, std::nextafter(x, 1.0f)))
                v.push_back(x);
            uni(0.5f, 2.0f, 1500), uni(0, 100, 500);
            for (int k = 1; k < 300; ++k) v.push_back(1.0f + k * 0x1p-23f);
            break;
        case VUn::LOG1P:
            uni(-1, 1, 1500), uni(0, 100, 300);
            for (float x = 1e-38f; x < 3e38f; x *= 2.3f) v.push_back(x);
            for (float x = 1e-38f; x < 1; x *= 2.3f) v.push_back(-x), v.push_back(x - 1);
            break;
        case VUn::EXPM1:
        case VUn::EXP2:
        case VUn::SINH:
        case VUn::COSH:  // overflow at the top and underflow (or -1) at the bottom
            uni(-1, 1, 1000), uni(-160, 130, 1000);
            for (float x = 1e-38f; x < 200; x *= 2.3f) v.push_back(x), v.push_back(-x);
            break;
        case VUn::TAN:
            uni(-10, 10, 1500), uni(-1e4f, 1e4f, 500);
            for (int k = 1; k < 200; ++k) v.push_back(static_cast<float>(k * M_PI / 4));
            for (float x = 1e-30f; x < 1e30f; x *= 3.1f) v.push_back(x), v.push_back(-x);
            break;
        case VUn::ASIN:
        case VUn::ACOS:
        case VUn::ATANH:  // [-1, 1] and the edges (NaN outside)
            uni(-1, 1, 2000), uni(-3, 3, 200);
            for (float x = 1e-38f; x < 1; x *= 2.3f)
                v.push_back(x), v.push_back(-x), v.push_back(1 - x), v.push_back(x - 1);
            break;
        case VUn::ATAN:
        case VUn::ASINH:
            uni(-10, 10, 1500);
            for (float x = 1e-38f; x < 3e38f; x *= 2.3f) v.push_back(x), v.push_back(-x);
            break;
        default:  // GELU_TANH, ERF, ERFC
            uni(-6, 6, 1500), uni(-20, -5, 300), uni(5, 50, 100);
            for (float x = 1e-38f; x < 1e10f; x *= 2.3f) v.push_back(x), v.push_back(-x);
            break;
    }
    return v;
}

TEST(UnaryAccuracy, TranscendentalsWithinOneUlp) {
    Rig rig(1, 8u << 20, 1);
    for (VUn f :
         {VUn::LOG,   VUn::SIN,  VUn::COS,  VUn::GELU_TANH, VUn::ERF,   VUn::ERFC, VUn::LOG1P,
          VUn::EXPM1, VUn::EXP2, VUn::LOG2, VUn::LOG10,     VUn::TAN,   VUn::ASIN, VUn::ACOS,
          VUn::ATAN,  VUn::SINH, VUn::COSH, VUn::ASINH,     VUn::ACOSH, VUn::ATANH}) {
        auto x = unary_inputs(f);
        const uint64_t n = x.size();
        for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
            LxRun lx(rig, 2 * 4 * n + 256);
            lx.put(DType::F32, 0, x);
            const uint64_t out = (4 * n + 127) / 128 * 128;
            ASSERT_EQ(lx.run([&](PB& b) {
                b.li(3, out), b.li(4, 0);
                b.set_regs(20, {1, int64_t(n), 0, 0});
                b.vun(f, dt, DType::F32, 3, 4, 20);
            }),
                      0)
                << rig.res.message;
            auto got = lx.out(dt, out, n);
            int64_t worst = 0;
            uint64_t exact = 0;
            for (uint64_t i = 0; i < n; ++i) {
                const long double r = ref_fn(f, x[i]);
                const float want = round_to(dt, static_cast<float>(r));
                if (std::isnan(want) || std::isinf(want)) {
                    ASSERT_TRUE(same_float(got[i], want)) << int(f) << " x=" << x[i];
                    continue;
                }
                ASSERT_FALSE(std::isnan(got[i])) << int(f) << " x=" << x[i];
                const int64_t d = std::abs(ordinal(dt, got[i]) - ordinal(dt, want));
                worst = std::max(worst, d);
                exact += d == 0;
                ASSERT_LE(d, 1) << int(f) << " dt " << int(dt) << " x=" << x[i] << " got " << got[i]
                                << " want " << want;
            }
            RecordProperty("f" + std::to_string(int(f)) + "_dt" + std::to_string(int(dt)) +
                               "_correctly_rounded",
                           std::to_string(exact) + "/" + std::to_string(n));
        }
    }
}

TEST(UnaryAccuracy, SpecialValues) {
    Rig rig(1, 8u << 20, 1);
    const std::vector<float> x = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN, 1.0f};
    const uint64_t n = x.size();
    std::map<VUn, std::vector<float>> want = {
        {VUn::LOG, {-INFINITY, -INFINITY, NAN, INFINITY, NAN, NAN, 0.0f}},
        {VUn::SIN, {0.0f, -0.0f, std::sin(-1.0f), NAN, NAN, NAN, std::sin(1.0f)}},
        {VUn::COS, {1.0f, 1.0f, std::cos(-1.0f), NAN, NAN, NAN, std::cos(1.0f)}},
        {VUn::GELU_TANH,
         {0.0f, -0.0f, static_cast<float>(ref_fn(VUn::GELU_TANH, -1.0L)), INFINITY, -0.0f, NAN,
          static_cast<float>(ref_fn(VUn::GELU_TANH, 1.0L))}}};
    for (auto& [f, w] : want) {
        LxRun lx(rig, 256);
        lx.put(DType::F32, 0, x);
        ASSERT_EQ(lx.run([&](PB& b) {
            b.li(3, 128), b.li(4, 0);
            b.set_regs(20, {1, int64_t(n), 0, 0});
            b.vun(f, DType::F32, DType::F32, 3, 4, 20);
        }),
                  0);
        auto got = lx.out(DType::F32, 128, n);
        for (uint64_t i = 0; i < n; ++i)
            EXPECT_TRUE(same_float(got[i], w[i]))
                << int(f) << " x=" << x[i] << " got " << got[i] << " want " << w[i];
    }
}

// The new functions at the edges of their domains, as C's libm and torch's CPU kernels define
// them: poles give +-inf, arguments outside the domain NaN, zeros keep their sign.
TEST(UnaryAccuracy, SpecialValuesOfTheTorchSet) {
    Rig rig(1, 8u << 20, 1);
    const float inf = INFINITY, nan = NAN;
    struct Case {
        VUn f;
        float x, want;
    };
    const Case cases[] = {
        {VUn::FLOOR, -0.0f, -0.0f},
        {VUn::FLOOR, -0.5f, -1.0f},
        {VUn::FLOOR, inf, inf},
        {VUn::FLOOR, nan, nan},
        {VUn::FLOOR, 0x1p23f + 1, 0x1p23f + 1},
        {VUn::CEIL, -0.5f, -0.0f},
        {VUn::CEIL, 0.25f, 1.0f},
        {VUn::CEIL, -inf, -inf},
        {VUn::TRUNC, -1.75f, -1.0f},
        {VUn::TRUNC, -0.25f, -0.0f},
        {VUn::TRUNC, nan, nan},
        {VUn::ROUND, 0.5f, 0.0f},
        {VUn::ROUND, 1.5f, 2.0f},
        {VUn::ROUND, 2.5f, 2.0f},
        {VUn::ROUND, -0.5f, -0.0f},
        {VUn::ROUND, -2.5f, -2.0f},
        {VUn::ROUND, -3.5f, -4.0f},
        {VUn::ROUND, 0.49999997f, 0.0f},
        {VUn::ROUND, inf, inf},
        {VUn::ROUND, nan, nan},
        {VUn::SIGN, nan, 0.0f},
        {VUn::SIGN, -0.0f, 0.0f},
        {VUn::SIGN, -inf, -1.0f},
        {VUn::SIGN, 1e-45f, 1.0f},
        {VUn::SIGN, -3.0f, -1.0f},
        {VUn::ERF, -0.0f, -0.0f},
        {VUn::ERF, inf, 1.0f},
        {VUn::ERF, -inf, -1.0f},
        {VUn::ERFC, inf, 0.0f},
        {VUn::ERFC, -inf, 2.0f},
        {VUn::ERFC, 0.0f, 1.0f},
        {VUn::LOG1P, -1.0f, -inf},
        {VUn::LOG1P, -2.0f, nan},
        {VUn::LOG1P, -0.0f, -0.0f},
        {VUn::LOG1P, inf, inf},
        {VUn::EXPM1, -inf, -1.0f},
        {VUn::EXPM1, -0.0f, -0.0f},
        {VUn::EXPM1, 100.0f, inf},
        {VUn::EXP2, -inf, 0.0f},
        {VUn::EXP2, 128.0f, inf},
        {VUn::EXP2, -149.0f, 1e-45f},
        {VUn::EXP2, 10.0f, 1024.0f},
        {VUn::LOG2, 0.0f, -inf},
        {VUn::LOG2, -1.0f, nan},
        {VUn::LOG2, 0x1p-149f, -149},
        {VUn::LOG10, 1000.0f, 3.0f},
        {VUn::LOG10, -0.0f, -inf},
        {VUn::TAN, -0.0f, -0.0f},
        {VUn::TAN, inf, nan},
        {VUn::ASIN, 2.0f, nan},
        {VUn::ASIN, -1.0f, -1.5707964f},
        {VUn::ASIN, -0.0f, -0.0f},
        {VUn::ACOS, 1.0f, 0.0f},
        {VUn::ACOS, -1.0f, 3.1415927f},
        {VUn::ACOS, 1.5f, nan},
        {VUn::ATAN, inf, 1.5707964f},
        {VUn::ATAN, -0.0f, -0.0f},
        {VUn::SINH, -inf, -inf},
        {VUn::SINH, -0.0f, -0.0f},
        {VUn::SINH, 90.0f, inf},
        {VUn::COSH, -inf, inf},
        {VUn::COSH, -0.0f, 1.0f},
        {VUn::ASINH, -inf, -inf},
        {VUn::ASINH, -0.0f, -0.0f},
        {VUn::ACOSH, 0.5f, nan},
        {VUn::ACOSH, 1.0f, 0.0f},
        {VUn::ACOSH, inf, inf},
        {VUn::ATANH, 1.0f, inf},
        {VUn::ATANH, -1.0f, -inf},
        {VUn::ATANH, 2.0f, nan},
        {VUn::ATANH, -0.0f, -0.0f},
    };
    for (const Case& c : cases) {
        LxRun lx(rig, 256);
        lx.put(DType::F32, 0, {c.x});
        ASSERT_EQ(lx.run([&](PB& b) {
            b.li(3, 128), b.li(4, 0);
            b.set_regs(20, {1, 1, 0, 0});
            b.vun(c.f, DType::F32, DType::F32, 3, 4, 20);
        }),
                  0);
        const float got = lx.out(DType::F32, 128, 1)[0];
        EXPECT_TRUE(same_float(got, c.want))
            << int(c.f) << " x=" << c.x << " got " << got << " want " << c.want;
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

struct Fault {
    const char* name;
    std::function<void(PB&)> emit;  // the faulting instruction is the last one emitted
    int code;
    bool runtime;
};

TEST(TensorFaults, EveryFaultReportsItsCode) {
    using isa::Instr;
    using isa::Op;
    auto raw = [](Op op, uint8_t dt, uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t func,
                  uint8_t flags, int64_t imm) {
        return [=](PB& p) { p.emit(PB::mk(op, dt, a, b, c, d, func, flags, imm)); };
    };
    const uint8_t f16 = isa::dt_pair(DType::F16, DType::F16);
    const uint8_t f32 = isa::dt_pair(DType::F32, DType::F32);
    const int BADOP = SPYRE_ENGINE_ERR_BAD_OPERAND, BADREG = SPYRE_ENGINE_ERR_BAD_REGISTER;
    const int LXR = SPYRE_ENGINE_ERR_LX_RANGE, MIS = SPYRE_ENGINE_ERR_MISALIGNED,
              BIG = SPYRE_ENGINE_ERR_TOO_LARGE;
    const int64_t LXB = 13107 * 128;  // the usable LX: 2 MiB less the 20% reserve
    // registers: r3..r5 addresses, descriptor r20..r26
    auto regs = [](std::initializer_list<int64_t> addr, std::initializer_list<int64_t> desc) {
        return [=](PB& p) {
            uint8_t r = 3;
            for (int64_t v : addr) p.li(r++, v);
            p.set_regs(20, desc);
        };
    };
    auto then = [](std::function<void(PB&)> a, std::function<void(PB&)> b) {
        return [=](PB& p) { a(p), b(p); };
    };
    const std::vector<Fault> faults = {
        // static: reserved fields, types, functions, modes
        {"VTRANS bad src type", raw(Op::VTRANS, 0x51, 3, 4, 0, 20, 0, 0, 0), BADOP, false},
        {"VTRANS func", raw(Op::VTRANS, f16, 3, 4, 0, 20, 1, 0, 0), BADOP, false},
        {"VTRANS flags", raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 1, 0), BADOP, false},
        {"VTRANS c", raw(Op::VTRANS, f16, 3, 4, 5, 20, 0, 0, 0), BADOP, false},
        {"VTRANS imm", raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 1), BADOP, false},
        {"VTRANS desc past r31", raw(Op::VTRANS, f16, 3, 4, 0, 29, 0, 0, 0), BADREG, false},
        {"VSEL func bit 1", raw(Op::VSEL, f16, 3, 4, 5, 20, 2, 0, 0), BADOP, false},
        {"VSEL mask type", raw(Op::VSEL, f16, 3, 4, 5, 20, 0x70, 0, 0), BADOP, false},
        {"VSEL y mode", raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 5, 0), BADOP, false},
        {"VSEL y type", raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 0x60, 0), BADOP, false},
        {"VSEL IMM with type", raw(Op::VSEL, f16, 3, 4, 0, 20, 0, 0x14, 0), BADOP, false},
        {"VSEL imm not IMM", raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 0, 1), BADOP, false},
        {"VSEL imm high bits", raw(Op::VSEL, f16, 3, 4, 0, 20, 0, 4, int64_t(1) << 32), BADOP,
         false},
        {"VSEL IMM c", raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 4, 0), BADOP, false},
        {"VSEL desc past r31", raw(Op::VSEL, f16, 3, 4, 5, 26, 0, 0, 0), BADREG, false},
        {"VSEL dst type", raw(Op::VSEL, 0x17, 3, 4, 5, 20, 0, 0, 0), BADOP, false},
        {"VIOTA func", raw(Op::VIOTA, f32, 3, 0, 0, 20, 2, 0, 0), BADOP, false},
        {"VIOTA IOTA b", raw(Op::VIOTA, f32, 3, 4, 0, 20, 0, 0, 0), BADOP, false},
        {"VIOTA IOTA imm", raw(Op::VIOTA, f32, 3, 0, 0, 20, 0, 0, 5), BADOP, false},
        {"VIOTA IOTA src type", raw(Op::VIOTA, 0x11, 3, 0, 0, 20, 0, 0, 0), BADOP, false},
        {"VIOTA MASK imm high", raw(Op::VIOTA, f32, 3, 4, 0, 20, 1, 0, int64_t(1) << 40), BADOP,
         false},
        {"VIOTA flags", raw(Op::VIOTA, f32, 3, 4, 0, 20, 1, 1, 0), BADOP, false},
        {"VIOTA c", raw(Op::VIOTA, f32, 3, 4, 5, 20, 1, 0, 0), BADOP, false},
        {"VFMA s2 mode", raw(Op::VFMA, f32, 3, 4, 5, 20, 0, 7, 0), BADOP, false},
        {"VFMA s3 mode", raw(Op::VFMA, f32, 3, 4, 5, 20, 9, 0, 0), BADOP, false},
        {"VFMA s3 type", raw(Op::VFMA, f32, 3, 4, 5, 20, 0x60, 0, 0), BADOP, false},
        {"VFMA imm low", raw(Op::VFMA, f32, 3, 4, 5, 20, 4, 0, 1), BADOP, false},
        {"VFMA imm high", raw(Op::VFMA, f32, 3, 4, 0, 20, 0, 4, int64_t(1) << 32), BADOP, false},
        {"VFMA IMM c", raw(Op::VFMA, f32, 3, 4, 5, 20, 0, 4, 0), BADOP, false},
        {"VFMA IMM typed", raw(Op::VFMA, f32, 3, 4, 5, 20, 0x14, 0, 0), BADOP, false},
        {"VBIN src2 type", raw(Op::VBIN, f16, 3, 4, 5, 20, 0, 0x60, 0), BADOP, false},
        {"VBIN IMM typed", raw(Op::VBIN, f16, 3, 4, 5, 20, 0, 0x14, 0), BADOP, false},
        {"VBIN func", raw(Op::VBIN, f16, 3, 4, 5, 20, 12, 0, 0), BADOP, false},
        {"VUN func", raw(Op::VUN, f16, 3, 4, 0, 20, uint8_t(VUn::COUNT), 0, 0), BADOP, false},
        {"MM flag bit 3", raw(Op::MM, 1, 3, 4, 5, 20, 0, 8, 0), BADOP, false},
        // runtime: shapes
        {"VTRANS too large",
         then(regs({0, 0}, {2048, 2048, 0, 0}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)), BIG,
         true},
        {"VSEL too large",
         then(regs({0, 0, 0}, {1, LXB + 1, 0, 0, 0, 0, 0}),
              raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 0, 0)),
         BIG, true},
        {"VIOTA too large",
         then(regs({0}, {4096, 4096, 0, 0, 0, 0, 0}), raw(Op::VIOTA, f32, 3, 0, 0, 20, 0, 0, 0)),
         BIG, true},
        {"VFMA too large",
         then(regs({0, 0, 0}, {LXB, 2, 0, 0, 0, 0, 0}), raw(Op::VFMA, f32, 3, 4, 5, 20, 0, 0, 0)),
         BIG, true},
        // runtime: alignment of every operand
        {"VTRANS src addr",
         then(regs({0, 1}, {4, 4, 8, 8}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)), MIS, true},
        {"VTRANS dst misaligned before src range",
         then(regs({1, LXB}, {4, 4, 8, 8}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)), MIS, true},
        {"VTRANS dst stride",
         then(regs({0, 0}, {4, 4, 9, 8}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)), MIS, true},
        {"VSEL mask addr",
         then(regs({0, 0, 0}, {2, 2, 8, 8, 8, 2, 8}), raw(Op::VSEL, f32, 3, 4, 5, 20, 0, 0, 0)),
         MIS, true},
        {"VSEL y stride",
         then(regs({0, 0, 0}, {2, 2, 8, 8, 6, 0, 8}), raw(Op::VSEL, f32, 3, 4, 5, 20, 0, 0, 0)),
         MIS, true},
        {"VSEL f32 mask of f16 data",
         then(regs({0, 0, 0}, {2, 2, 4, 4, 4, 2, 4}), raw(Op::VSEL, f16, 3, 4, 5, 20, 0x10, 0, 0)),
         MIS, true},
        {"VIOTA dst addr",
         then(regs({2}, {2, 2, 8, 0, 1, 1, 0}), raw(Op::VIOTA, f32, 3, 0, 0, 20, 0, 0, 0)), MIS,
         true},
        {"VIOTA MASK src stride",
         then(regs({0, 0}, {2, 2, 8, 6, 1, 1, 0}), raw(Op::VIOTA, f32, 3, 4, 0, 20, 1, 0, 0)), MIS,
         true},
        {"VFMA s3 addr",
         then(regs({0, 0, 0}, {2, 2, 8, 8, 8, 3, 8}), raw(Op::VFMA, f32, 3, 4, 5, 20, 0, 0, 0)),
         MIS, true},
        {"VBIN f32 src2 of f16 data",
         then(regs({0, 0, 2}, {2, 2, 4, 4, 4}), raw(Op::VBIN, f16, 3, 4, 5, 20, 0, 0x10, 0)), MIS,
         true},
        // runtime: LX range of every operand
        {"VTRANS dst range",
         then(regs({LXB - 64, 0}, {8, 64, 16, 128}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)),
         LXR, true},
        {"VTRANS src range",
         then(regs({0, LXB - 128}, {2, 64, 4, 128}), raw(Op::VTRANS, f16, 3, 4, 0, 20, 0, 0, 0)),
         LXR, true},
        {"VSEL mask range",
         then(regs({0, 0, 0}, {4, 4, 8, 8, 8, LXB - 8, 8}),
              raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 0, 0)),
         LXR, true},
        {"VSEL ROW mask range",
         then(regs({0, 0, 0}, {1, 8, 16, 16, 16, LXB - 8, 0}),
              raw(Op::VSEL, f16, 3, 4, 5, 20, 0x08, 0, 0)),
         LXR, true},
        {"VSEL y COL range",
         then(regs({0, 0, LXB - 4}, {4, 4, 8, 8, 64, 0, 8}),
              raw(Op::VSEL, f16, 3, 4, 5, 20, 0, 3, 0)),
         LXR, true},
        {"VIOTA MASK src range",
         then(regs({0, LXB}, {1, 1, 4, 4, 0, 0, 0}), raw(Op::VIOTA, f32, 3, 4, 0, 20, 1, 0, 0)),
         LXR, true},
        {"VFMA s3 ROW range",
         then(regs({0, 0, 0}, {2, 64, 256, 256, 256, LXB - 128, 0}),
              raw(Op::VFMA, f32, 3, 4, 5, 20, 2, 0, 0)),
         LXR, true},
        {"VBIN f32 ROW src2 of f16",
         then(regs({0, 0, LXB - 128}, {1, 64, 128, 128, 0}),
              raw(Op::VBIN, f16, 3, 4, 5, 20, 0, 0x12, 0)),
         LXR, true},
        {"MM A^T range",
         then(regs({0, LXB - 1024, 0}, {4, 4, 64, 1024, 8, 16}),
              raw(Op::MM, 1, 3, 4, 5, 20, 0, 2, 0)),
         LXR, true},
        {"MM B^T range",
         then(regs({0, 0, LXB - 64}, {4, 8, 4, 8, 64, 32}), raw(Op::MM, 1, 3, 4, 5, 20, 0, 4, 0)),
         LXR, true},
    };
    Rig rig(1, 1u << 20, 1);
    for (const Fault& f : faults) {
        PB b;
        f.emit(b);
        const uint64_t pc = b.size() - 1;
        b.halt();
        const int rc = rig.run(b.finish());
        EXPECT_EQ(rc, f.code) << f.name << ": " << spyre_engine_error_name(rc) << " "
                              << rig.res.message;
        EXPECT_EQ(rig.res.pc, pc) << f.name;
        EXPECT_EQ(rig.res.core, f.runtime ? 0 : -1) << f.name;
        EXPECT_NE(rig.res.message[0], 0) << f.name;
    }
    // and the in-range neighbours of the LX_RANGE cases run
    {
        PB b;
        regs({0, LXB - 128}, {1, 64, 4, 128})(b);
        b.vtrans(DType::F16, DType::F16, 3, 4, 20);
        regs({0, 0, 0}, {2, 64, 256, 256, 256, LXB - 256, 0})(b);
        b.vfma(DType::F32, DType::F32, 3, 4, 5, 20, Bcast::NONE, Bcast::ROW);
        b.halt();
        EXPECT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    }
}

// ---------------------------------------------------------------------------------------------
// Cycle costs: like a vector op over the elements touched.

TEST(TensorCycles, VectorCostsAndHazards) {
    Rig rig(1, 1u << 20, 1);
    auto vec_busy = [&](const std::function<void(PB&)>& body) {
        PB b;
        body(b);
        b.halt();
        EXPECT_EQ(rig.run(b.finish()), 0) << rig.res.message;
        return rig.res.cores[0].busy[SPYRE_UNIT_VECTOR];
    };
    // 64 x 128 fp16 = 8192 elements over 2 x 64 lanes = 64 cycles, + 8 latency from idle
    EXPECT_EQ(vec_busy([](PB& b) {
                  b.li(3, 0x10000), b.li(4, 0);
                  b.set_regs(20, {64, 128, 128, 256});
                  b.vtrans(DType::F16, DType::F16, 3, 4, 20);
              }),
              64u + 8);
    // a 32-bit operand halves the lanes: fp32 mask
    EXPECT_EQ(vec_busy([](PB& b) {
                  b.li(3, 0x10000), b.li(4, 0), b.li(5, 0);
                  b.set_regs(20, {64, 128, 256, 256, 256, 0x40000, 512});
                  b.vsel(DType::F16, DType::F16, 3, 4, 5, 20, Bcast::NONE, 0, false, Bcast::NONE,
                         DType::F32);
              }),
              128u + 8);
    EXPECT_EQ(vec_busy([](PB& b) {
                  b.li(3, 0x10000);
                  b.set_regs(20, {64, 128, 256, 0, 1, -1, 0});
                  b.viota(DType::F16, 3, 20);
              }),
              64u + 8);
    EXPECT_EQ(vec_busy([](PB& b) {
                  b.li(3, 0x10000), b.li(4, 0), b.li(5, 0x20000);
                  b.set_regs(20, {64, 128, 256, 256, 0, 0x30000, 0});
                  b.vfma(DType::F16, DType::F16, 3, 4, 5, 20, Bcast::ROW, Bcast::ROW);
              }),
              64u + 8);
    // new transcendental functions cost vec_special_cycles (2) per vector
    EXPECT_EQ(vec_busy([](PB& b) {
                  b.li(3, 0x10000), b.li(4, 0);
                  b.set_regs(20, {64, 128, 256, 256});
                  b.vun(VUn::SIN, DType::F16, DType::F16, 3, 4, 20);
              }),
              2u * 64 + 8);
    // a dependent chain (IOTA -> transpose of its output) serializes, pipelined on one unit
    PB b;
    b.li(3, 0x10000), b.li(4, 0x20000);
    b.set_regs(20, {64, 128, 256, 0, 1, 0, 0});
    b.viota(DType::F16, 3, 20);
    b.set_regs(20, {64, 128, 128, 256});
    b.vtrans(DType::F16, DType::F16, 4, 3, 20);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0) << rig.res.message;
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_VECTOR], 2u * 64 + 8);
    EXPECT_GE(rig.res.total_cycles, 2u * 64 + 8);
    // MM with transposed operands costs the same as without
    auto mm_busy = [&](bool ta, bool tb) {
        PB p;
        p.li(3, 0x40000), p.li(4, 0), p.li(5, 0x20000);
        p.set_regs(20, {64, 64, 256, 512, 128, 256});
        p.matmul(DType::F16, 3, 4, 5, 20, false, ta, tb);
        p.halt();
        EXPECT_EQ(rig.run(p.finish()), 0) << rig.res.message;
        return rig.res.cores[0].busy[SPYRE_UNIT_MATRIX];
    };
    EXPECT_EQ(mm_busy(true, true), mm_busy(false, false));
}

// ---------------------------------------------------------------------------------------------
// Builder encodings (round trip through isa::decode of the image)

isa::Instr last_instr(const PB& b) {
    auto img = b.finish();
    return isa::decode(img.data() + img.size() - isa::kInstrBytes);
}

TEST(TensorBuilder, EncodingsRoundTrip) {
    using isa::Op;
    {
        PB b;
        b.vtrans(DType::BF16, DType::F32, 7, 8, 20);
        auto in = last_instr(b);
        EXPECT_EQ(in.op, uint8_t(Op::VTRANS));
        EXPECT_EQ(in.dt, 0x02);
        EXPECT_EQ(in.a, 7);
        EXPECT_EQ(in.b, 8);
        EXPECT_EQ(in.c, 0);
        EXPECT_EQ(in.d, 20);
        EXPECT_EQ(in.func | in.flags, 0);
        EXPECT_EQ(in.imm, 0);
    }
    {
        PB b;
        b.vsel(DType::F16, DType::F32, 3, 4, 0, 21, Bcast::IMM, -INFINITY, true, Bcast::ROW,
               DType::I8);
        auto in = last_instr(b);
        EXPECT_EQ(in.op, uint8_t(Op::VSEL));
        EXPECT_EQ(in.dt, 0x01);
        EXPECT_EQ(in.func, 0x40 | (2 << 2) | 1);  // I8 + 1, ROW, invert
        EXPECT_EQ(in.flags, 4);                   // IMM, no type
        EXPECT_EQ(in.imm, int64_t(std::bit_cast<uint32_t>(-INFINITY)));
    }
    {
        PB b;
        b.vsel(DType::F16, DType::F16, 3, 4, 5, 21, Bcast::COL, 9.0f, false, Bcast::NONE,
               isa::kSrcType, DType::F32);
        auto in = last_instr(b);
        EXPECT_EQ(in.func, 0);
        EXPECT_EQ(in.flags, 0x13);  // F32 + 1, COL
        EXPECT_EQ(in.imm, 0);       // imm only for IMM
    }
    {
        PB b;
        b.viota(DType::I32, 6, 22);
        auto in = last_instr(b);
        EXPECT_EQ(in.op, uint8_t(Op::VIOTA));
        EXPECT_EQ(in.dt, 0x04);
        EXPECT_EQ(in.a, 6);
        EXPECT_EQ(in.b, 0);
        EXPECT_EQ(in.d, 22);
        EXPECT_EQ(in.func, 0);
        EXPECT_EQ(in.imm, 0);
        b.vmask(DType::F16, DType::F32, 6, 7, 22, -INFINITY);
        in = last_instr(b);
        EXPECT_EQ(in.dt, 0x01);
        EXPECT_EQ(in.b, 7);
        EXPECT_EQ(in.func, 1);
        EXPECT_EQ(in.imm, int64_t(std::bit_cast<uint32_t>(-INFINITY)));
    }
    {
        PB b;
        b.vfma(DType::F16, DType::F16, 3, 4, 0, 20, Bcast::IMM, Bcast::ROW, 2.0f, 0.0f,
               isa::kSrcType, DType::F32);
        auto in = last_instr(b);
        EXPECT_EQ(in.op, uint8_t(Op::VFMA));
        EXPECT_EQ(in.flags, 4);
        EXPECT_EQ(in.func, 0x12);
        EXPECT_EQ(in.imm, int64_t(std::bit_cast<uint32_t>(2.0f)));
        b.vfma(DType::F32, DType::F32, 3, 4, 5, 20, Bcast::ROW, Bcast::IMM, 0.0f, -1.0f);
        in = last_instr(b);
        EXPECT_EQ(in.flags, 2);
        EXPECT_EQ(in.func, 4);
        EXPECT_EQ(static_cast<uint64_t>(in.imm), uint64_t(std::bit_cast<uint32_t>(-1.0f)) << 32);
    }
    {
        PB b;
        b.vbin2(VBin::GE, Bcast::ROW, DType::I8, DType::F16, DType::BF16, 3, 4, 5, 20);
        auto in = last_instr(b);
        EXPECT_EQ(in.func, uint8_t(VBin::GE));
        EXPECT_EQ(in.flags, 0x32);
        EXPECT_EQ(in.dt, 0x13);
        // vbin keeps its historical encoding (type nibble 0)
        b.vbin(VBin::ADD, Bcast::COL, DType::F16, DType::F16, 3, 4, 5, 20);
        EXPECT_EQ(last_instr(b).flags, 3);
        b.matmul(DType::F16, 3, 4, 5, 20, true, true, true);
        EXPECT_EQ(last_instr(b).flags, 7);
    }
    // every builder form validates and runs (zero-sized shapes are no-ops)
    PB b;
    b.set_regs(20, {0, 0, 0, 0, 0, 0, 0});
    b.vtrans(DType::BF16, DType::F32, 3, 4, 20);
    b.vsel(DType::F16, DType::F32, 3, 4, 0, 20, Bcast::IMM, -1, true, Bcast::COL, DType::I8);
    b.viota(DType::I32, 3, 20);
    b.vmask(DType::F16, DType::F16, 3, 4, 20, -INFINITY);
    b.vfma(DType::F16, DType::F16, 3, 4, 0, 20, Bcast::IMM, Bcast::IMM, 1, 2);
    b.vbin2(VBin::SUB, Bcast::COL, DType::F16, DType::F16, DType::F32, 3, 4, 5, 20);
    b.matmul(DType::BF16, 3, 4, 5, 20, false, true, true);
    b.halt();
    Rig rig(1, 1u << 20, 1);
    EXPECT_EQ(rig.run(b.finish()), 0) << rig.res.message;
}

// ---------------------------------------------------------------------------------------------
// Fuzz: random encodings of the new opcodes and modes never crash the engine and end with a
// result or a documented error.

// Clears or constrains the fields of a random instruction the way isa.md requires, so that most
// fuzzed instructions pass validation and reach the operand checks and kernels.
void well_formed(isa::Instr& in, std::mt19937_64& rng) {
    auto mode = [&](bool allow_imm) {
        const uint8_t m = rng() % (allow_imm ? 5 : 4);
        return uint8_t(m == 4 ? m : m | (rng() % 6) << 4);
    };
    auto fbits = [&] { return int64_t(std::bit_cast<uint32_t>(float(int(rng() % 9) - 4))); };
    switch (static_cast<isa::Op>(in.op)) {
        case isa::Op::MM:
            in.dt = rng() % 4, in.flags &= 7, in.func = 0, in.imm = 0;
            break;
        case isa::Op::VUN:
            in.func %= 16, in.flags = 0, in.c = 0, in.imm &= 0xffffffff;
            break;
        case isa::Op::VBIN:
            in.func %= 12, in.flags = mode(true), in.imm &= 0xffffffff;
            break;
        case isa::Op::VTRANS:
            in.c = 0, in.func = 0, in.flags = 0, in.imm = 0;
            break;
        case isa::Op::VSEL:
            in.func = uint8_t((rng() % 2) | (rng() % 4) << 2 | (rng() % 6) << 4);
            in.flags = mode(true);
            in.imm = (in.flags & 15) == 4 ? fbits() : 0;
            if ((in.flags & 15) == 4) in.c = 0;
            break;
        case isa::Op::VIOTA:
            in.func = rng() % 2, in.flags = 0, in.c = 0;
            in.imm = in.func ? fbits() : 0;
            if (!in.func) in.b = 0, in.dt &= 15;
            break;
        case isa::Op::VFMA:
            in.flags = mode(true), in.func = mode(true), in.imm = 0;
            if ((in.flags & 15) == 4) in.imm |= fbits(), in.c = 0;
            if ((in.func & 15) == 4) in.imm |= fbits() << 32;
            break;
        default:
            break;
    }
}

TEST(TensorFuzz, RandomEncodingsEndWithResultOrDocumentedError) {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_threads = 1;
    c.num_cores = 1;
    c.lx_bytes = 256 << 10;  // small LX: large shapes fault fast instead of computing
    c.max_cycles = 10000000;
    Rig rig(c, 1 << 20);
    std::mt19937_64 rng(2024);
    const uint8_t ops[] = {0x24, 0x25, 0x26, 0x27, 0x22, 0x21, 0x20};
    const int64_t vals[] = {0,   1,    2,       3,
                            4,   7,    8,       16,
                            33,  64,   128,     130,
                            256, 4096, 65536,   (256 << 10) - 128,
                            -1,  -128, 1 << 20, int64_t(1) << 40};
    const std::set<int> documented = {
        SPYRE_ENGINE_OK,           SPYRE_ENGINE_ERR_BAD_OPERAND, SPYRE_ENGINE_ERR_BAD_REGISTER,
        SPYRE_ENGINE_ERR_LX_RANGE, SPYRE_ENGINE_ERR_MISALIGNED,  SPYRE_ENGINE_ERR_TOO_LARGE};
    std::map<int, int> codes;
    for (int iter = 0; iter < 3000; ++iter) {
        PB b;
        for (int r = 3; r < 32; ++r)
            b.li(static_cast<uint8_t>(r),
                 rng() % 3 ? vals[rng() % 8] * 2 : vals[rng() % std::size(vals)]);
        const int n = 1 + rng() % 3;
        for (int i = 0; i < n; ++i) {
            isa::Instr in;
            in.op = ops[rng() % std::size(ops)];
            const bool wild = rng() % 4 == 0;
            in.dt = wild ? uint8_t(rng()) : uint8_t((rng() % 5) | ((rng() % 5) << 4));
            in.a = rng() % 32, in.b = rng() % 32, in.c = rng() % 32;
            in.d = wild ? uint8_t(rng() % 40) : uint8_t(3 + rng() % 23);
            in.func = wild ? uint8_t(rng()) : uint8_t(rng() % 16 | (rng() % 6) << 4);
            in.flags = wild ? uint8_t(rng()) : uint8_t(rng() % 5 | (rng() % 6) << 4);
            in.imm = wild ? int64_t(rng()) : (rng() % 2 ? int64_t(rng() & 0xffffffff) : 0);
            if (!wild) well_formed(in, rng);
            b.emit(in);
        }
        b.halt();
        const int rc = rig.run(b.finish());
        codes[rc]++;
        ASSERT_TRUE(documented.count(rc)) << spyre_engine_error_name(rc) << ": " << rig.res.message;
        ASSERT_EQ(rc == 0, rig.res.status == 0);
        if (rc) {
            ASSERT_NE(rig.res.message[0], 0);
        }
    }
    for (auto [code, cnt] : codes) std::printf("  %-20s %d\n", spyre_engine_error_name(code), cnt);
    EXPECT_GT(codes[SPYRE_ENGINE_OK], 100);
    EXPECT_GT(codes[SPYRE_ENGINE_ERR_BAD_OPERAND], 100);
    EXPECT_GT(codes[SPYRE_ENGINE_ERR_LX_RANGE] + codes[SPYRE_ENGINE_ERR_MISALIGNED], 100);
}

}  // namespace
}  // namespace spyre::test
