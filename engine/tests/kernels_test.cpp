// SPDX-License-Identifier: MIT
// The fast paths: SIMD kernels against the portable ones (bit-identical), the vectorized fp16
// conversions against spyre::num, and the lazily zeroed scratchpads.
#include "../src/kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"

namespace spyre::test {
namespace {

struct SimdGuard {
    ~SimdGuard() { kern::use_simd(true); }
};

TEST(Kernels, F16ConversionsMatchScalar) {
    SimdGuard g;
    kern::use_simd(true);
    RecordProperty("simd", kern::simd_name());
    std::vector<uint16_t> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    kern::load_row(DType::F16, reinterpret_cast<const uint8_t*>(h.data()), h.size(), f.data());
    for (uint32_t i = 0; i < 65536; ++i)
        ASSERT_EQ(f32_bits(f[i]), f32_bits(num::f16_to_f32(h[i]))) << std::hex << i;
    // fp32 -> fp16: random bit patterns (all exponents, NaNs, infinities) and rounding edges
    std::mt19937 rng(5);
    std::uniform_int_distribution<uint32_t> bits;
    std::vector<float> x(1 << 20);
    for (auto& v : x) v = std::bit_cast<float>(bits(rng));
    for (uint32_t i = 0; i < 4096; ++i) {
        x[i] = std::bit_cast<float>((0x33000000u + (i << 12)) ^ (i & 1 ? 0x80000000u : 0));
        x[4096 + i] = std::bit_cast<float>(0x7f800000u | (i * 0x1fffu) | (i & 1 ? 0x80000000u : 0));
        x[8192 + i] = std::bit_cast<float>(0x38000000u + (i << 11) + (i & 0xfff));
    }
    std::vector<uint16_t> out(x.size());
    kern::store_row(DType::F16, reinterpret_cast<uint8_t*>(out.data()), x.size(), x.data());
    for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(out[i], num::f32_to_f16(x[i])) << std::hex << f32_bits(x[i]);
}

// kern::matmul with the SIMD kernels and with the portable ones: identical bits, for every input
// type, ragged shapes, strides, accumulate and K beyond one cache block.
TEST(Kernels, MatmulSimdMatchesPortable) {
    SimdGuard g;
    struct Case {
        DType t;
        uint64_t m, n, k;
        bool acc;
    };
    const Case cases[] = {{DType::F16, 13, 37, 300, false}, {DType::F16, 64, 64, 513, true},
                          {DType::BF16, 7, 80, 129, true},  {DType::F32, 25, 33, 260, false},
                          {DType::F32, 12, 32, 64, true},   {DType::I8, 11, 45, 301, true},
                          {DType::I8, 6, 16, 2, false},     {DType::F16, 1, 1, 1, false}};
    std::mt19937 rng(3);
    for (const Case& cs : cases) {
        const uint64_t es = isa::dtype_size(cs.t);
        const uint64_t lda = (cs.k + 5) * es, ldb = (cs.n + 3) * es, ldc = (cs.n + 2) * 4;
        std::vector<uint8_t> a(cs.m * lda), b(cs.k * ldb), c0(cs.m * ldc);
        std::uniform_int_distribution<int> byte(0, 255);
        auto fill = [&](std::vector<uint8_t>& v, DType t) {
            std::uniform_real_distribution<float> d(-4, 4);
            const uint64_t s = isa::dtype_size(t);
            for (size_t i = 0; i + s <= v.size(); i += s) {
                if (t == DType::I8) {
                    v[i] = static_cast<uint8_t>(byte(rng));
                } else {
                    float f = d(rng);
                    kern::store_row(t, v.data() + i, 1, &f);
                }
            }
        };
        fill(a, cs.t);
        fill(b, cs.t);
        fill(c0, cs.t == DType::I8 ? DType::I32 : DType::F32);
        std::vector<uint8_t> c_simd = c0, c_gen = c0;
        kern::use_simd(true);
        kern::matmul(
            {cs.t, c_simd.data(), a.data(), b.data(), cs.m, cs.n, cs.k, lda, ldb, ldc, cs.acc});
        kern::use_simd(false);
        kern::matmul(
            {cs.t, c_gen.data(), a.data(), b.data(), cs.m, cs.n, cs.k, lda, ldb, ldc, cs.acc});
        EXPECT_EQ(c_simd, c_gen) << int(cs.t) << " " << cs.m << "x" << cs.n << "x" << cs.k;
        // padding between rows of C is never written
        for (uint64_t i = 0; i < cs.m; ++i)
            EXPECT_EQ(0, std::memcmp(c_simd.data() + i * ldc + cs.n * 4,
                                     c0.data() + i * ldc + cs.n * 4, 8));
    }
}

// Scratchpads read as zero at job start although the previous job left data in them.
TEST(Kernels, ScratchpadZeroAfterPreviousJob) {
    Rig rig(2, 1u << 20);
    std::vector<uint8_t> ones(64 * 1024, 0xab);
    rig.put(0x10000, ones);
    {
        PB b;  // fill LX[0, 64 KiB) with 0xab, and LX[64 KiB, 96 KiB) by the vector unit
        b.li(3, 0), b.li(4, 0x10000), b.li(5, 64 * 1024);
        b.load(3, 4, 5);
        b.li(6, 64 * 1024);
        b.set_regs(20, {256, 32, 128, 128});
        b.vun(isa::VUn::SET, DType::F32, DType::F32, 6, 6, 20, 1.5f);
        b.halt();
        ASSERT_EQ(rig.run(b.finish(), {}, 2), 0) << rig.res.message;
    }
    PB b;
    // partial LOAD: 100 bytes into stick 0 (bytes 100..127 must become zero, not 0xab)
    b.li(3, 0), b.li(4, 0x10000), b.li(5, 100);
    b.load(3, 4, 5);
    // LXLD from a stale stick
    b.lxld(7, 0, 4096);
    b.lxst(0, 7, 8192);  // LX[8192] = value read (0); the rest of that stick must be zero too
    // MM reading stale A/B (zero) into C at 0x4000 with accumulate: C stays zero
    b.set_regs(20, {4, 16, 8, 32, 64, 64});
    b.li(8, 0x4000), b.li(9, 0x6000), b.li(10, 0x7000);
    b.matmul(DType::F16, 8, 9, 10, 20, true);
    // store LX[0, 96 KiB) to DDR 0x40000
    b.li(11, 0x40000), b.li(12, 96 * 1024);
    b.store(3, 11, 12);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 2), 0) << rig.res.message;
    auto out = rig.get<uint8_t>(0x40000, 96 * 1024);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i < 100 ? 0xab : 0) << i;
}

}  // namespace
}  // namespace spyre::test
