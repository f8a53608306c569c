// SPDX-License-Identifier: MIT
// The counter-based generator of the VRNG instruction (Documentation/isa.md "VRNG"):
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// mappings from its 32-bit words to the element values. Header-only so the engine, the op
// library and the tests share the exact rules (like numerics.hpp).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "spyre/isa.hpp"

namespace spyre::rng {

using Block = std::array<uint32_t, 4>;

// Philox4x32 constants: the round multipliers and the Weyl key increments (golden ratio and
// sqrt(3) - 1 in 0.32 fixed point), as the paper defines them.
inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

// Ten rounds over the 128-bit counter with a 64-bit key, the key bumped between rounds.
inline Block philox4x32_10(Block c, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        if (round) k0 += kW0, k1 += kW1;
        const uint64_t p0 = uint64_t{kM0} * c[0], p1 = uint64_t{kM1} * c[2];
        const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
        const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
        c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    }
    return c;
}

// The block holding element n of a stream (seed, offset): counter = (n / 4 as 64 bits, offset
// as 64 bits), key = seed; element n takes word n % 4 (BITS, UNIFORM) or its pair (NORMAL).
inline Block stream_block(uint64_t seed, uint64_t offset, uint64_t n) {
    const uint64_t g = n >> 2;
    return philox4x32_10({static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                          static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
                         static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Significand bits of a uniform for a destination type, so that the value is exact in it and
// never rounds up to 1.
inline int uniform_bits(isa::DType t) {
    return t == isa::DType::F16 ? 11 : t == isa::DType::BF16 ? 8 : 24;
}

// UNIFORM: the top p bits of the word as a multiple of 2^-p, in [0, 1 - 2^-p].
inline float uniform(uint32_t w, int p) {
    return static_cast<float>(w >> (32 - p)) * std::ldexp(1.0f, -p);
}

// NORMAL: Box-Muller on a pair of words. u1 = (top 24 bits + 1) 2^-24 in (0, 1] (log finite),
// u2 = top 24 bits 2^-24 in [0, 1); radius sqrt(-2 ln u1), angle 2 pi u2; the even element of
// the pair takes the cosine, the odd one the sine. Evaluated in double, rounded once to fp32.
inline float normal(const Block& b, uint64_t n) {
    const unsigned k = static_cast<unsigned>(n & 3), pair = k >> 1;
    const double u1 = (static_cast<double>(b[2 * pair] >> 8) + 1.0) * 0x1p-24;
    const double u2 = static_cast<double>(b[2 * pair + 1] >> 8) * 0x1p-24;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * 3.14159265358979323846 * u2;
    return static_cast<float>((k & 1) ? r * std::sin(t) : r * std::cos(t));
}

// The fp32 value of element n for UNIFORM / NORMAL before rounding to the destination type:
// fma(x, scale, shift) in fp32.
inline float value(isa::Rng f, isa::DType dst, const Block& b, uint64_t n, float scale,
                   float shift) {
    const float x = f == isa::Rng::UNIFORM ? uniform(b[n & 3], uniform_bits(dst)) : normal(b, n);
    return std::fma(x, scale, shift);
}

}  // namespace spyre::rng
