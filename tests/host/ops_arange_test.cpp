// SPDX-License-Identifier: MIT
// spyre_op_arange against a host reference: int64 (wrapping), int32 and the float types, odd
// lengths on one and many cores, negative and large steps and starts, refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

TEST_F(Ops, ArangeIntegers) {
    for (spyre_dtype t : {SPYRE_DTYPE_INT64, SPYRE_DTYPE_INT32})
        for (int64_t n : {1, 7, 128, 1000, 100003})
            for (auto [start, step] : {std::pair<int64_t, int64_t>{0, 1}, {5, -3}, {-1000, 7}}) {
                SCOPED_TRACE(::testing::Message()
                             << t << " n " << n << " start " << start << " step " << step);
                const size_t es = t == SPYRE_DTYPE_INT64 ? 8 : 4;
                spyre_buffer_t b;
                ASSERT_SPYRE(spyre_malloc(dev, n * es, &b));
                spyre_tensor o{};
                ASSERT_SPYRE(spyre_tensor_init(&o, b, 0, t, 1, &n));
                ASSERT_SPYRE(spyre_op_arange(nullptr, &o, start, step));
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                std::vector<uint8_t> h(n * es);
                ASSERT_SPYRE(spyre_memcpy_dtoh(h.data(), b, 0, h.size()));
                spyre_free(b);
                for (int64_t i = 0; i < n; ++i) {
                    int64_t v = 0;
                    if (es == 8) {
                        std::memcpy(&v, &h[8 * i], 8);
                    } else {
                        int32_t w;
                        std::memcpy(&w, &h[4 * i], 4);
                        v = w;
                    }
                    ASSERT_EQ(v, start + i * step) << i;
                }
            }
    // int64 beyond 32 bits, wrapping as torch's int64 arithmetic
    int64_t n = 300;
    spyre_buffer_t b;
    ASSERT_SPYRE(spyre_malloc(dev, n * 8, &b));
    spyre_tensor o{};
    ASSERT_SPYRE(spyre_tensor_init(&o, b, 0, SPYRE_DTYPE_INT64, 1, &n));
    const int64_t start = (int64_t{1} << 40) + 3, step = int64_t{1} << 33;
    ASSERT_SPYRE(spyre_op_arange(nullptr, &o, start, step));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    std::vector<int64_t> h(n);
    ASSERT_SPYRE(spyre_memcpy_dtoh(h.data(), b, 0, n * 8));
    spyre_free(b);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], start + i * step) << i;
}

TEST_F(Ops, ArangeFloats) {
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16})
        for (int64_t n : {1, 33, 5000}) {
            const int64_t start = -17, step = 3;
            DevArray a(dev, t, n, 1);
            const spyre_tensor o = view(a, {n}, {1});
            ASSERT_SPYRE(spyre_op_arange(nullptr, &o, start, step));
            ASSERT_SPYRE(spyre_device_synchronize(dev));
            a.fetch();
            for (int64_t i = 0; i < n; ++i) {
                std::vector<uint8_t> want(4);
                put(t, want, 0, float(start + i * step));  // fp32, then the type
                ASSERT_EQ(a.at(i), get(t, want, 0)) << t << " " << i;
            }
        }
}

TEST_F(Ops, ArangeRefuses) {
    DevArray a(dev, SPYRE_DTYPE_FLOAT32, 64, 1);
    spyre_tensor o = view(a, {16}, {2});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_arange(nullptr, &o, 0, 1));  // not dense
    o = view(a, {16}, {1}, 1);
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_arange(nullptr, &o, 0, 1));  // off a stick
    o.dtype = SPYRE_DTYPE_INT8;
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_arange(nullptr, &o, 0, 1));
}

}  // namespace
