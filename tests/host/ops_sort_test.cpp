// SPDX-License-Identifier: MIT
// The op library's sort and top-k (spyre_op_sort) against std::stable_sort with torch's order
// (NaN largest, -0.0 equal to +0.0): fp32, fp16, bf16, ascending and descending, full sorts and
// top-k, rows with ties, NaN, infinities and signed zeros, one and several cores, and the
// refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

struct Dev {
    spyre_buffer_t buf = nullptr;
    std::vector<uint8_t> host;
    Dev(spyre_device_t dev, size_t bytes) : host(std::max<size_t>(bytes, 1)) {
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, host.size(), &buf));
    }
    ~Dev() { spyre_free(buf); }
    void upload() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(buf, 0, host.data(), host.size())); }
    void fetch() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(host.data(), buf, 0, host.size())); }
};

spyre_tensor dense(const Dev& d, spyre_dtype t, const std::vector<int64_t>& shape) {
    spyre_tensor s{};
    s.buffer = d.buf, s.dtype = t, s.ndim = uint32_t(shape.size());
    int64_t st = 1;
    for (size_t i = shape.size(); i-- > 0;)
        s.shape[i] = shape[i], s.strides[i] = st, st *= shape[i];
    return s;
}

// Rows with many ties, NaN of both signs, infinities, signed zeros and a wide exponent range.
void fill(spyre_dtype t, Dev& x, size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f};
    for (size_t i = 0; i < n; ++i) {
        float v = float(int(rng() % 41) - 20) / 4.0f;
        if (rng() % 8 == 0) v = specials[rng() % 8];
        if (rng() % 3 == 0) v = std::ldexp(float(rng() % 1000) - 500.0f, int(rng() % 60) - 30);
        put(t, x.host, i, v);
    }
    x.upload();
}

// Checks rows [O, N] sorted into [O, K]: indices exactly the stable order, values their bits.
void check(spyre_dtype t, const Dev& x, const Dev& v, const Dev& ix, size_t O, size_t N, size_t K,
           bool desc) {
    const size_t es = esize(t);
    for (size_t o = 0; o < O; ++o) {
        auto val = [&](size_t i) { return get(t, x.host, o * N + i); };
        auto less = [&](size_t a, size_t b) {
            const float p = val(a), q = val(b);
            if (std::isnan(q)) return !std::isnan(p);
            return !std::isnan(p) && p < q;
        };
        std::vector<size_t> idx(N);
        std::iota(idx.begin(), idx.end(), 0);
        if (desc)
            std::stable_sort(idx.begin(), idx.end(),
                             [&](size_t a, size_t b) { return less(b, a); });
        else
            std::stable_sort(idx.begin(), idx.end(), less);
        for (size_t j = 0; j < K; ++j) {
            int64_t got;
            std::memcpy(&got, &ix.host[8 * (o * K + j)], 8);
            ASSERT_EQ(got, int64_t(idx[j])) << "row " << o << " position " << j;
            const float want = val(idx[j]), have = get(t, v.host, o * K + j);
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(have)) << "row " << o << " position " << j;
            } else {
                ASSERT_EQ(
                    0, std::memcmp(&v.host[es * (o * K + j)], &x.host[es * (o * N + idx[j])], es))
                    << "row " << o << " position " << j;
            }
        }
    }
}

struct Case {
    std::vector<int64_t> shape;
    int dim;
    int64_t k;
};

TEST_F(Ops, SortAndTopkEqualTheStableOrder) {
    const std::vector<Case> cases = {{{8, 33}, 1, 33},   {{8, 33}, -1, 33},  {{1, 96}, 1, 5},
                                     {{33, 8}, 1, 8},    {{1, 1}, 1, 1},     {{5, 7, 1}, 1, 3},
                                     {{100, 17}, 1, 17}, {{2, 300}, 1, 300}, {{4, 1000}, 1, 10},
                                     {{70}, 0, 70},      {{3, 2}, 1, 1}};
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16})
        for (bool desc : {false, true})
            for (const Case& c : cases) {
                SCOPED_TRACE(::testing::Message() << "type " << t << " desc " << desc
                                                  << " shape[0] " << c.shape[0] << " k " << c.k);
                const int d0 = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
                size_t O = 1, n = 1;
                for (int d = 0; d < d0; ++d) O *= size_t(c.shape[d]);
                for (auto s : c.shape) n *= size_t(s);
                const size_t N = size_t(c.shape[d0]), K = size_t(c.k);
                auto oshape = c.shape;
                oshape[d0] = c.k;
                Dev x(dev, n * esize(t)), v(dev, O * K * esize(t)), ix(dev, O * K * 8);
                fill(t, x, n, uint32_t(n + K + t));
                const spyre_tensor tx = dense(x, t, c.shape), tv = dense(v, t, oshape),
                                   ti = dense(ix, SPYRE_DTYPE_INT64, oshape);
                ASSERT_SPYRE(
                    spyre_op_sort(nullptr, &tx, c.dim, desc ? SPYRE_SORT_DESCENDING : 0, &tv, &ti));
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                v.fetch();
                ix.fetch();
                check(t, x, v, ix, O, N, K, desc);
            }
}

TEST_F(Ops, SortSplitsRowsOverCores) {
    const size_t O = 256, N = 40;
    Dev x(dev, O * N * 4), v(dev, O * N * 4), ix(dev, O * N * 8);
    fill(SPYRE_DTYPE_FLOAT32, x, O * N, 3);
    const spyre_tensor tx = dense(x, SPYRE_DTYPE_FLOAT32, {int64_t(O), int64_t(N)}),
                       tv = dense(v, SPYRE_DTYPE_FLOAT32, {int64_t(O), int64_t(N)}),
                       ti = dense(ix, SPYRE_DTYPE_INT64, {int64_t(O), int64_t(N)});
    ASSERT_SPYRE(spyre_op_sort(nullptr, &tx, 1, SPYRE_SORT_DESCENDING, &tv, &ti));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_GT(info.cores, 1u) << info.plan;
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    v.fetch();
    ix.fetch();
    check(SPYRE_DTYPE_FLOAT32, x, v, ix, O, N, N, true);
}

TEST_F(Ops, SortRefusesWhatItCannotDo) {
    Dev x(dev, 4 * 64 * 4), v(dev, 4 * 64 * 4), ix(dev, 4 * 64 * 8);
    const spyre_dtype F = SPYRE_DTYPE_FLOAT32;
    const spyre_tensor tx = dense(x, F, {8, 8}), tv = dense(v, F, {8, 8}),
                       ti = dense(ix, SPYRE_DTYPE_INT64, {8, 8});
    // along dim 0 of [8, 8]: the dims after it are not 1
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_sort(nullptr, &tx, 0, 0, &tv, &ti));
    const spyre_tensor xi = dense(x, SPYRE_DTYPE_INT32, {8, 8}),
                       vi = dense(v, SPYRE_DTYPE_INT32, {8, 8});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_sort(nullptr, &xi, 1, 0, &vi, &ti));
    const spyre_tensor v9 = dense(v, F, {8, 9}), i9 = dense(ix, SPYRE_DTYPE_INT64, {8, 9});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_sort(nullptr, &tx, 1, 0, &v9, &i9));
    const spyre_tensor i32 = dense(ix, SPYRE_DTYPE_INT32, {8, 8});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_sort(nullptr, &tx, 1, 0, &tv, &i32));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_sort(nullptr, &tx, 2, 0, &tv, &ti));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_sort(nullptr, &tx, 1, 4, &tv, &ti));
    // a row too long for the scratchpad (padded to 2^17)
    Dev big(dev, 100000 * 4), bv(dev, 4 * 4), bi(dev, 4 * 8);
    const spyre_tensor tb = dense(big, F, {1, 100000}), tbv = dense(bv, F, {1, 4}),
                       tbi = dense(bi, SPYRE_DTYPE_INT64, {1, 4});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_sort(nullptr, &tb, 1, 0, &tbv, &tbi));
    // empty: nothing to do
    const spyre_tensor e = dense(x, F, {0, 8}), ev = dense(v, F, {0, 8}),
                       ei = dense(ix, SPYRE_DTYPE_INT64, {0, 8});
    EXPECT_EQ(SPYRE_SUCCESS, spyre_op_sort(nullptr, &e, 1, 0, &ev, &ei));
}

}  // namespace
