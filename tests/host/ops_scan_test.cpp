// SPDX-License-Identifier: MIT
// The op library's cumulative sum and product (spyre_op_scan) against a host reference of
// PyTorch's CPU kernels (an accumulator of torch's acc type: double for fp32, float for fp16 and
// bf16, int64 for integers, cast to the type at every element; fp32 products: a float
// accumulator, as torch's CUDA kernel, which the card offers instead): every type, every dim of
// odd-sized tensors, one and several cores, in place, fp32 sums that only a double accumulator
// gets right, and the cases that are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

size_t tsize(spyre_dtype t) {
    switch (t) {
        case SPYRE_DTYPE_INT8:
        case SPYRE_DTYPE_UINT8:
            return 1;
        case SPYRE_DTYPE_FLOAT16:
        case SPYRE_DTYPE_BFLOAT16:
            return 2;
        case SPYRE_DTYPE_INT64:
            return 8;
        default:
            return 4;
    }
}

bool is_float(spyre_dtype t) {
    return t == SPYRE_DTYPE_FLOAT32 || t == SPYRE_DTYPE_FLOAT16 || t == SPYRE_DTYPE_BFLOAT16;
}

int64_t get_int(spyre_dtype t, const std::vector<uint8_t>& b, size_t i) {
    switch (t) {
        case SPYRE_DTYPE_INT8:
            return static_cast<int8_t>(b[i]);
        case SPYRE_DTYPE_UINT8:
            return b[i];
        case SPYRE_DTYPE_INT32: {
            int32_t v;
            std::memcpy(&v, &b[4 * i], 4);
            return v;
        }
        default: {
            int64_t v;
            std::memcpy(&v, &b[8 * i], 8);
            return v;
        }
    }
}

void put_int(spyre_dtype t, std::vector<uint8_t>& b, size_t i, int64_t v) {
    std::memcpy(&b[tsize(t) * i], &v, tsize(t));  // little endian: the low bytes wrap
}

struct Buf {
    spyre_dtype t;
    size_t n;
    std::vector<uint8_t> host;
    spyre_buffer_t buf = nullptr;
    Buf(spyre_device_t dev, spyre_dtype dt, size_t count) : t(dt), n(count) {
        host.resize(std::max<size_t>(n, 1) * tsize(t));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, host.size() + 128, &buf));
    }
    ~Buf() { spyre_free(buf); }
    // Values whose fp32 sums round (so the accumulator type shows) and integers that overflow
    // the narrow types.
    void random(uint32_t seed, bool prod) {
        std::mt19937 rng(seed);
        for (size_t i = 0; i < n; ++i) {
            if (is_float(t)) {
                const float v = prod ? 0.5f + float(rng() % 1000) / 500.0f
                                     : float(int(rng() % 2001) - 1000) / 7.0f;
                put(t, host, i, v);
            } else {
                const int64_t span = t == SPYRE_DTYPE_INT64 ? (int64_t(1) << 40) : 300;
                put_int(t, host, i, int64_t(rng() % uint64_t(2 * span)) - span);
            }
        }
        upload();
    }
    void upload(uint64_t off = 0) {
        ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(buf, off, host.data(), host.size()));
    }
    void fetch() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(host.data(), buf, 0, host.size())); }
    spyre_tensor tensor(const std::vector<int64_t>& shape, uint64_t off = 0) const {
        spyre_tensor s{};
        s.buffer = buf, s.dtype = t, s.ndim = uint32_t(shape.size()), s.offset = off;
        int64_t st = 1;
        for (size_t d = shape.size(); d-- > 0;)
            s.shape[d] = shape[d], s.strides[d] = st, st *= shape[d];
        return s;
    }
};

// PyTorch's cpu_cum_base_kernel: acc_type accumulator from 0 (sum) or 1 (product), cast to the
// type at every element; for fp32 products a float accumulator (the card's, bit for bit).
std::vector<uint8_t> reference(const Buf& x, const std::vector<int64_t>& shape, int dim,
                               bool prod) {
    const int r = int(shape.size()), d0 = dim < 0 ? dim + r : dim;
    uint64_t O = 1, N = uint64_t(shape[d0]), I = 1;
    for (int d = 0; d < r; ++d)
        if (d < d0)
            O *= uint64_t(shape[d]);
        else if (d > d0)
            I *= uint64_t(shape[d]);
    std::vector<uint8_t> out(x.host.size());
    for (uint64_t o = 0; o < O; ++o)
        for (uint64_t i = 0; i < I; ++i) {
            double dacc = prod ? 1.0 : 0.0;
            float facc = prod ? 1.0f : 0.0f;
            uint64_t iacc = prod ? 1 : 0;
            for (uint64_t j = 0; j < N; ++j) {
                const size_t e = (o * N + j) * I + i;
                if (x.t == SPYRE_DTYPE_FLOAT32 && !prod) {
                    const double v = get(x.t, x.host, e);
                    dacc = prod ? dacc * v : dacc + v;
                    put(x.t, out, e, float(dacc));
                } else if (is_float(x.t)) {
                    const float v = get(x.t, x.host, e);
                    facc = prod ? facc * v : facc + v;
                    put(x.t, out, e, facc);
                } else {
                    const uint64_t v = uint64_t(get_int(x.t, x.host, e));
                    iacc = prod ? iacc * v : iacc + v;
                    put_int(x.t, out, e, int64_t(iacc));
                }
            }
        }
    return out;
}

constexpr spyre_dtype kAll[] = {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16,
                                SPYRE_DTYPE_INT8,    SPYRE_DTYPE_INT32,   SPYRE_DTYPE_INT64,
                                SPYRE_DTYPE_UINT8};

struct Case {
    std::vector<int64_t> shape;
    int dim;
};

void expect_equal_bits(const Buf& got, const std::vector<uint8_t>& want) {
    for (size_t e = 0; e < got.n; ++e)
        ASSERT_EQ(0,
                  std::memcmp(&got.host[e * tsize(got.t)], &want[e * tsize(got.t)], tsize(got.t)))
            << "element " << e;
}

TEST_F(Ops, ScanEveryTypeAndDimEqualsTorchCpu) {
    const std::vector<Case> cases = {{{3, 7, 5}, 0},  {{3, 7, 5}, 1},   {{3, 7, 5}, 2},
                                     {{3, 7, 5}, -1}, {{3, 7, 5}, -3},  {{13}, 0},
                                     {{1}, 0},        {{4, 1, 6}, 1},   {{64, 33}, 1},
                                     {{8, 33}, -1},   {{2, 150, 3}, 1}, {{70, 2, 9}, 0}};
    for (spyre_dtype t : kAll)
        for (bool prod : {false, true})
            for (const Case& c : cases) {
                SCOPED_TRACE(::testing::Message() << "type " << t << " prod " << prod << " dim "
                                                  << c.dim << " shape[0] " << c.shape[0]);
                size_t n = 1;
                for (auto s : c.shape) n *= size_t(s);
                Buf x(dev, t, n), out(dev, t, n);
                x.random(uint32_t(n + t + 31 * c.dim), prod);
                const spyre_tensor tx = x.tensor(c.shape), to = out.tensor(c.shape);
                ASSERT_SPYRE(spyre_op_scan(nullptr, prod ? SPYRE_SCAN_PROD : SPYRE_SCAN_SUM, &tx,
                                           c.dim, &to));
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                out.fetch();
                expect_equal_bits(out, reference(x, c.shape, c.dim, prod));
            }
}

TEST_F(Ops, ScanSplitsOverCoresAndRunsInPlace) {
    // 200 slabs of 132 bytes: chunks of 32 slabs start on sticks, several cores
    const std::vector<int64_t> shape = {200, 33};
    Buf x(dev, SPYRE_DTYPE_FLOAT32, 200 * 33);
    x.random(7, false);
    const auto want = reference(x, shape, 1, false);
    const spyre_tensor tx = x.tensor(shape);
    ASSERT_SPYRE(spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &tx, 1, &tx));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_GT(info.cores, 1u) << info.plan;
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    x.fetch();
    expect_equal_bits(x, want);
}

TEST_F(Ops, ScanFp32SumsInDoubleLikeTorch) {
    // float accumulation gives [1e8, 1e8, 0, 0.5]; torch's double accumulator [1e8, 1e8, 1, 1.5];
    // -0.0 first: torch's +0.0 + -0.0 = +0.0; inf and NaN propagate
    const std::vector<float> in = {1e8f, 1.0f, -1e8f, 0.5f, -0.0f, 2.0f, INFINITY, -INFINITY};
    const std::vector<int64_t> shape = {2, 4};
    Buf x(dev, SPYRE_DTYPE_FLOAT32, in.size()), out(dev, SPYRE_DTYPE_FLOAT32, in.size());
    for (size_t i = 0; i < in.size(); ++i) put(x.t, x.host, i, in[i]);
    x.upload();
    const spyre_tensor tx = x.tensor(shape), to = out.tensor(shape);
    ASSERT_SPYRE(spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &tx, 1, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    out.fetch();
    EXPECT_EQ(get(out.t, out.host, 2), 1.0f);
    EXPECT_EQ(get(out.t, out.host, 3), 1.5f);
    EXPECT_FALSE(std::signbit(get(out.t, out.host, 4)));
    EXPECT_EQ(get(out.t, out.host, 6), INFINITY);
    EXPECT_TRUE(std::isnan(get(out.t, out.host, 7)));
    // and fp16 accumulates in float: 2048 + 1 + 1 is 2050 in float (2048 in an fp16 accumulator)
    Buf h(dev, SPYRE_DTYPE_FLOAT16, 3), ho(dev, SPYRE_DTYPE_FLOAT16, 3);
    for (size_t i = 0; i < 3; ++i) put(h.t, h.host, i, i ? 1.0f : 2048.0f);
    h.upload();
    const spyre_tensor th = h.tensor({3}), tho = ho.tensor({3});
    ASSERT_SPYRE(spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &th, 0, &tho));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    ho.fetch();
    EXPECT_EQ(get(ho.t, ho.host, 2), 2050.0f);
}

TEST_F(Ops, ScanRefusesWhatItCannotDo) {
    Buf x(dev, SPYRE_DTYPE_FLOAT32, 64), out(dev, SPYRE_DTYPE_FLOAT32, 64);
    const spyre_tensor tx = x.tensor({8, 8}), to = out.tensor({8, 8});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &tx, 2, &to));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &tx, -3, &to));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_scan(nullptr, spyre_scan_op(7), &tx, 0, &to));
    const spyre_tensor small = out.tensor({8, 4});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &tx, 0, &small));
    spyre_tensor strided = x.tensor({8, 4});
    strided.strides[0] = 8;
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &strided, 0, &small));
    const spyre_tensor shifted = x.tensor({8, 7}, 4);
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &shifted, 0, &shifted));
    // empty: nothing to do
    const spyre_tensor empty = x.tensor({0, 8});
    EXPECT_EQ(SPYRE_SUCCESS, spyre_op_scan(nullptr, SPYRE_SCAN_SUM, &empty, 1, &empty));
}

}  // namespace
