// SPDX-License-Identifier: MIT
// Test rig for the engine: owns an engine, a device memory array and one window over it.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "spyre/engine.h"
#include "spyre/isa.hpp"
#include "spyre/numerics.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::test {

using isa::DType;
using PB = ProgramBuilder;

struct Rig {
    spyre_engine_config cfg{};
    spyre_engine* eng = nullptr;
    std::vector<uint8_t> mem;
    std::vector<spyre_engine_window> windows;
    spyre_engine_result res{};

    explicit Rig(uint32_t threads = 2, uint64_t mem_bytes = 16u << 20, uint32_t cores = 32);
    explicit Rig(const spyre_engine_config& c, uint64_t mem_bytes = 16u << 20);
    ~Rig();
    Rig(const Rig&) = delete;
    Rig& operator=(const Rig&) = delete;

    // Runs prog on ncores cores (0 = all) with one window over all of memory unless windows set.
    int run(const std::vector<uint8_t>& prog, const std::vector<uint64_t>& args = {},
            uint32_t ncores = 1);

    template <typename T>
    void put(uint64_t addr, const std::vector<T>& v) {
        std::memcpy(mem.data() + addr, v.data(), v.size() * sizeof(T));
    }
    template <typename T>
    std::vector<T> get(uint64_t addr, size_t n) const {
        std::vector<T> v(n);
        std::memcpy(v.data(), mem.data() + addr, n * sizeof(T));
        return v;
    }
    // Typed values as floats: write/read n elements of dtype t.
    void put_as(DType t, uint64_t addr, const std::vector<float>& v);
    std::vector<float> get_as(DType t, uint64_t addr, size_t n) const;
};

// An LX image staged in DDR at kLxIn is loaded to LX 0, the body runs, and LX [0, bytes) is
// stored to kLxOut: tests place typed data at LX offsets and read results back.
inline constexpr uint64_t kLxIn = 0x100000, kLxOut = 0x400000;
struct LxImageRun {
    Rig& rig;
    uint64_t bytes;
    LxImageRun(Rig& r, uint64_t n);  // the image zeroed, the output area filled with 0xee
    int run(const std::function<void(PB&)>& body);
};

// Stores a float as type t (engine rounding rules) and reads it back.
float round_to(DType t, float v);
uint32_t f32_bits(float f);
bool same_float(float a, float b);  // bitwise equal, or both NaN

}  // namespace spyre::test
