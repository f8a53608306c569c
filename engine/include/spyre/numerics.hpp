// SPDX-License-Identifier: MIT
// Number formats of the Spyre engine: IEEE fp16 and bfloat16 with round-to-nearest-even, and
// saturating integer conversions. Header-only so tests and the op library share the exact rules.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace spyre::num {

inline float f16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return std::bit_cast<float>(sign);
        float v = static_cast<float>(m) * 0x1p-24f;  // exact
        return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
    }
    if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
    return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

inline uint16_t f32_to_f16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x1ffu);
    if (ax >= 0x47800000u) return sign | 0x7c00u;  // >= 65536 (and inf): inf
    if (ax < 0x38800000u) {                        // below 2^-14: subnormal or zero
        // Adding 0.5 puts the value's 2^-24 units in the low mantissa bits, rounding RNE.
        float v = std::bit_cast<float>(ax) + 0.5f;
        return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(v) - 0x3f000000u);
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
    return sign | static_cast<uint16_t>(ax >> 13);
}

inline float bf16_to_f32(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

// Round to nearest even, saturate; NaN converts to 0.
inline int8_t f32_to_i8(float f) {
    if (!(f == f)) return 0;
    if (f >= 127.0f) return 127;
    if (f <= -128.0f) return -128;
    return static_cast<int8_t>(std::nearbyint(f));
}

inline int32_t f32_to_i32(float f) {
    if (!(f == f)) return 0;
    if (f >= 2147483648.0f) return INT32_MAX;
    if (f <= -2147483648.0f) return INT32_MIN;
    return static_cast<int32_t>(std::nearbyint(f));
}

}  // namespace spyre::num
