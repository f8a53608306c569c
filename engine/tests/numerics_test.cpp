// SPDX-License-Identifier: MIT
// fp16 / bf16 / int8 conversions against independent double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"

namespace spyre::test {
namespace {

// Rounds x to a binary format with `mbits` explicit mantissa bits, minimum normal exponent emin
// and overflow threshold `inf_at` (values >= round to infinity), ties to even. Exact in double.
double ref_round(double x, int mbits, int emin, double inf_at) {
    if (std::isnan(x) || std::isinf(x)) return x;
    double ax = std::fabs(x);
    if (ax >= inf_at) return std::copysign(INFINITY, x);
    if (ax == 0) return x;
    int e = std::max(static_cast<int>(std::floor(std::log2(ax))), emin);
    double q = std::ldexp(1.0, e - mbits);
    double r = std::nearbyint(ax / q) * q;  // nearbyint: ties to even under the default mode
    return std::copysign(r, x);
}

TEST(Numerics, F16AllValuesRoundTrip) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = num::f16_to_f32(static_cast<uint16_t>(h));
        uint16_t back = num::f32_to_f16(f);
        if (std::isnan(f))
            EXPECT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) << h;
        else
            EXPECT_EQ(back, h) << h;
    }
}

TEST(Numerics, F16RoundingMatchesReference) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<uint32_t> bits;
    const double inf_at = 65520.0;
    for (int i = 0; i < 300000; ++i) {
        // bias exponents into and around the fp16 range
        uint32_t b = bits(rng);
        uint32_t e = 96 + (b >> 24) % 64;  // 2^-31 .. 2^32
        uint32_t x = (b & 0x80000000u) | (e << 23) | (bits(rng) & 0x7fffffu);
        float f = std::bit_cast<float>(x);
        double ref = ref_round(f, 10, -14, inf_at);
        float got = num::f16_to_f32(num::f32_to_f16(f));
        ASSERT_EQ(static_cast<double>(got), ref) << std::hexfloat << f;
        ASSERT_EQ(std::signbit(got), std::signbit(ref));
    }
    // ties: 1 + 2^-11 is halfway between 1 and 1+2^-10 -> even (1)
    EXPECT_EQ(num::f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    EXPECT_EQ(num::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    EXPECT_EQ(num::f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(num::f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(num::f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(num::f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_EQ(num::f32_to_f16(0x1p-24f), 0x0001);
    EXPECT_EQ(num::f32_to_f16(0x1p-25f), 0x0000);      // tie -> even (0)
    EXPECT_EQ(num::f32_to_f16(0x1p-25f * 3), 0x0002);  // 1.5 ulp -> 2
    EXPECT_EQ(num::f32_to_f16(-0.0f), 0x8000);
    EXPECT_TRUE(std::isnan(num::f16_to_f32(num::f32_to_f16(NAN))));
}

TEST(Numerics, Bf16RoundingMatchesReference) {
    std::mt19937 rng(2);
    std::uniform_int_distribution<uint32_t> bits;
    const double inf_at = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);
    for (int i = 0; i < 300000; ++i) {
        uint32_t x = bits(rng);
        float f = std::bit_cast<float>(x);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(num::bf16_to_f32(num::f32_to_bf16(f))));
            continue;
        }
        double ref = ref_round(f, 7, -126, inf_at);
        float got = num::bf16_to_f32(num::f32_to_bf16(f));
        ASSERT_EQ(static_cast<double>(got), ref) << std::hexfloat << f;
    }
    EXPECT_EQ(num::f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie -> even
    EXPECT_EQ(num::f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even (up)
    EXPECT_EQ(num::f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(num::f32_to_bf16(3.4e38f), 0x7f80);  // rounds past the largest finite bf16
}

TEST(Numerics, IntSaturation) {
    EXPECT_EQ(num::f32_to_i8(2.5f), 2);
    EXPECT_EQ(num::f32_to_i8(3.5f), 4);
    EXPECT_EQ(num::f32_to_i8(-2.5f), -2);
    EXPECT_EQ(num::f32_to_i8(127.4f), 127);
    EXPECT_EQ(num::f32_to_i8(300.0f), 127);
    EXPECT_EQ(num::f32_to_i8(-128.6f), -128);
    EXPECT_EQ(num::f32_to_i8(-1e30f), -128);
    EXPECT_EQ(num::f32_to_i8(INFINITY), 127);
    EXPECT_EQ(num::f32_to_i8(NAN), 0);
    EXPECT_EQ(num::f32_to_i32(3e9f), INT32_MAX);
    EXPECT_EQ(num::f32_to_i32(-3e9f), INT32_MIN);
    EXPECT_EQ(num::f32_to_i32(-7.5f), -8);
}

}  // namespace
}  // namespace spyre::test
