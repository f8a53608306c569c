// SPDX-License-Identifier: MIT
// Helpers of the op-library C API tests (ops_api_*_test.cpp): element conversions, host arrays
// mirrored in device buffers, strided views, and the fixture that opens card 0 on the simulator
// (or, with SPYRE_OPS_TEST_BACKEND=kernel, through spyre.ko).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "spyre/numerics.hpp"
#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace spyre::ops_api_test {

using spyre::num::bf16_to_f32;
using spyre::num::f16_to_f32;
using spyre::num::f32_to_bf16;
using spyre::num::f32_to_f16;

#define ASSERT_SPYRE(x) ASSERT_EQ(SPYRE_SUCCESS, (x)) << spyre_last_error()

inline size_t esize(spyre_dtype t) { return t == SPYRE_DTYPE_FLOAT32 ? 4 : 2; }

inline void put(spyre_dtype t, std::vector<uint8_t>& bytes, size_t i, float v) {
    if (t == SPYRE_DTYPE_FLOAT32) return (void)std::memcpy(&bytes[4 * i], &v, 4);
    const uint16_t h = t == SPYRE_DTYPE_FLOAT16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(&bytes[2 * i], &h, 2);
}

inline float get(spyre_dtype t, const std::vector<uint8_t>& bytes, size_t i) {
    if (t == SPYRE_DTYPE_FLOAT32) {
        float f;
        std::memcpy(&f, &bytes[4 * i], 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    return t == SPYRE_DTYPE_FLOAT16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// A host array mirrored in a device buffer.
struct DevArray {
    spyre_dtype t;
    std::vector<uint8_t> host;
    spyre_buffer_t buf = nullptr;
    DevArray(spyre_device_t dev, spyre_dtype dt, size_t n, uint32_t seed, size_t pad = 0) : t(dt) {
        host.resize((n + pad) * esize(dt));
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> d(-1, 1);
        for (size_t i = 0; i < n + pad; ++i) put(t, host, i, d(rng));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, host.size(), &buf));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(buf, 0, host.data(), host.size()));
    }
    ~DevArray() { spyre_free(buf); }
    float at(size_t i) const { return get(t, host, i); }
    void fetch() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(host.data(), buf, 0, host.size())); }
};

inline spyre_tensor view(const DevArray& a, std::vector<int64_t> shape,
                         std::vector<int64_t> strides, uint64_t offset_elems = 0) {
    spyre_tensor t{};
    t.buffer = a.buf;
    t.offset = offset_elems * esize(a.t);
    t.dtype = a.t;
    t.ndim = static_cast<uint32_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) t.shape[d] = shape[d], t.strides[d] = strides[d];
    return t;
}

inline double tolerance(spyre_dtype t, double scale) {
    return scale * (t == SPYRE_DTYPE_FLOAT32 ? 1e-5 : t == SPYRE_DTYPE_FLOAT16 ? 2e-3 : 1.6e-2);
}

class Ops : public ::testing::Test {
  protected:
    spyre_device_t dev = nullptr;
    bool sim = true;
    void SetUp() override {
        const char* b = std::getenv("SPYRE_OPS_TEST_BACKEND");
        sim = !(b && std::string(b) == "kernel");
        if (sim) setenv("SPYRE_BACKEND", "sim", 1);
        ASSERT_SPYRE(spyre_device_open(0, &dev));
        spyre_device_info info;
        ASSERT_SPYRE(spyre_device_get_info(dev, &info));
        ASSERT_EQ(info.backend, sim ? SPYRE_BACKEND_SIM : SPYRE_BACKEND_KERNEL);
    }
    void TearDown() override {
        spyre_device_close(dev);
        if (sim) unsetenv("SPYRE_BACKEND");
    }
};

}  // namespace spyre::ops_api_test
