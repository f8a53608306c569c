// SPDX-License-Identifier: MIT
// Helpers of the op-library tests: element conversions (spyre/numerics.hpp rules), ulp
// distances, and running a program image on a fresh engine over a host memory image.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "spyre/engine.h"
#include "spyre/isa.hpp"
#include "spyre/numerics.hpp"

namespace spyre::ops::test {

using isa::DType;

inline float load_elem(DType t, const uint8_t* p) {
    uint16_t h;
    float f;
    int32_t i;
    switch (t) {
        case DType::F32:
            std::memcpy(&f, p, 4);
            return f;
        case DType::F16:
            std::memcpy(&h, p, 2);
            return num::f16_to_f32(h);
        case DType::BF16:
            std::memcpy(&h, p, 2);
            return num::bf16_to_f32(h);
        case DType::I8:
            return static_cast<float>(static_cast<int8_t>(*p));
        default:
            std::memcpy(&i, p, 4);
            return static_cast<float>(i);
    }
}

inline void store_elem(DType t, float v, uint8_t* p) {
    uint16_t h;
    int32_t i;
    switch (t) {
        case DType::F32:
            std::memcpy(p, &v, 4);
            return;
        case DType::F16:
            h = num::f32_to_f16(v);
            std::memcpy(p, &h, 2);
            return;
        case DType::BF16:
            h = num::f32_to_bf16(v);
            std::memcpy(p, &h, 2);
            return;
        case DType::I8:
            *p = static_cast<uint8_t>(num::f32_to_i8(v));
            return;
        default:
            i = num::f32_to_i32(v);
            std::memcpy(p, &i, 4);
            return;
    }
}

// Distance in units in the last place of type t between two encoded elements (both NaN: 0; a
// NaN against a number: huge). Integer types: the difference of the values.
inline uint64_t ulp_distance(DType t, const uint8_t* x, const uint8_t* y) {
    if (t == DType::I8 || t == DType::I32) {
        const double a = load_elem(t, x), b = load_elem(t, y);
        return static_cast<uint64_t>(std::fabs(a - b));
    }
    const float fa = load_elem(t, x), fb = load_elem(t, y);
    if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb) ? 0 : ~0ull >> 1;
    auto ordered = [&](const uint8_t* p) -> int64_t {
        uint32_t bits = 0, sign;
        if (t == DType::F32) {
            std::memcpy(&bits, p, 4);
            sign = 0x80000000u;
        } else {
            uint16_t h;
            std::memcpy(&h, p, 2);
            bits = h;
            sign = 0x8000u;
        }
        const int64_t mag = bits & (sign - 1);
        return (bits & sign) ? -mag : mag;
    };
    const int64_t d = ordered(x) - ordered(y);
    return static_cast<uint64_t>(d < 0 ? -d : d);
}

inline const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32:
            return "f32";
        case DType::F16:
            return "f16";
        case DType::BF16:
            return "bf16";
        case DType::I8:
            return "i8";
        default:
            return "i32";
    }
}

// One engine for the whole test binary (default card configuration, 2 host threads).
inline spyre_engine* test_engine() {
    static spyre_engine* eng = [] {
        spyre_engine_config cfg;
        spyre_engine_config_default(&cfg);
        cfg.num_threads = 2;
        return spyre_engine_create(&cfg);
    }();
    return eng;
}

struct RunResult {
    int error = 0;
    std::string message;
    spyre_engine_result stats{};
};

// Runs image on `cores` cores with one window over mem (or, timing only, over mem_size bytes
// that need not exist on the host).
inline RunResult run_image(const std::vector<uint8_t>& image, uint32_t cores,
                           const std::vector<uint64_t>& args, std::vector<uint8_t>& mem,
                           bool timing_only = false, uint64_t mem_size = 0) {
    const uint64_t size = timing_only ? mem_size : mem.size();
    const spyre_engine_window w{0, size};
    spyre_engine_job job{};
    job.program = image.data();
    job.program_size = image.size();
    job.args = args.data();
    job.num_args = static_cast<uint32_t>(args.size());
    job.num_cores = cores;
    job.mem = timing_only ? nullptr : mem.data();
    job.mem_size = size;
    job.windows = &w;
    job.num_windows = 1;
    if (timing_only) job.flags = SPYRE_ENGINE_JOB_TIMING_ONLY;
    RunResult r;
    r.error = spyre_engine_run(test_engine(), &job, &r.stats);
    r.message = r.stats.message;
    return r;
}

inline uint64_t up128(uint64_t x) { return (x + 127) / 128 * 128; }

}  // namespace spyre::ops::test
