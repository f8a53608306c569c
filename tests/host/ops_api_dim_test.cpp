// SPDX-License-Identifier: MIT
// softmax, log_softmax and the reductions along any dim through the C API
// (spyre_op_softmax_dim, spyre_op_reduce_dim) against double references: many shapes and dims,
// size-1 dims, strides that are not a multiple of a stick, transposed and sliced inputs, fp16,
// bf16 and fp32, keepdim outputs, and what the calls refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops_api_util.hpp"
#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace {

using namespace spyre::ops_api_test;

// A strided view of a host array: shape, element strides, first element.
struct View {
    std::vector<int64_t> shape, strides;
    int64_t offset = 0;
};

int64_t numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

// Calls f(out_index, element offsets of the line along dim) for every line of v along dim;
// out_index counts the lines in row-major order of the other dims.
template <class F>
void for_each_line(const View& v, size_t dim, F&& f) {
    std::vector<int64_t> idx(v.shape.size(), 0);
    const int64_t lines = numel(v.shape) / std::max<int64_t>(v.shape[dim], 1);
    for (int64_t line = 0; line < lines; ++line) {
        int64_t rest = line;
        for (size_t d = v.shape.size(); d-- > 0;) {
            if (d == dim) continue;
            idx[d] = rest % v.shape[d];
            rest /= v.shape[d];
        }
        std::vector<int64_t> offs(v.shape[dim]);
        for (int64_t j = 0; j < v.shape[dim]; ++j) {
            int64_t o = v.offset;
            for (size_t d = 0; d < v.shape.size(); ++d) o += (d == dim ? j : idx[d]) * v.strides[d];
            offs[j] = o;
        }
        f(line, offs);
    }
}

struct DimCase {
    std::vector<int64_t> shape;  // the view's shape
    std::vector<int64_t> perm;   // the view is a permutation of a dense array (empty: none)
    int64_t step = 1;            // then every step-th element of its last dim
};

// The view of a dense array described by c, and the array's element count.
View make_view(const DimCase& c, int64_t& backing) {
    const size_t n = c.shape.size();
    std::vector<int64_t> base(n);  // the dense array's shape, before the permutation
    for (size_t d = 0; d < n; ++d) base[c.perm.empty() ? d : c.perm[d]] = c.shape[d];
    base[n - 1] *= c.step;
    std::vector<int64_t> st(n, 1);
    for (size_t d = n - 1; d-- > 0;) st[d] = st[d + 1] * base[d + 1];
    st[n - 1] = c.step;
    View v;
    v.shape = c.shape;
    v.strides.resize(n);
    for (size_t d = 0; d < n; ++d) v.strides[d] = st[c.perm.empty() ? d : c.perm[d]];
    v.offset = 0;
    backing = numel(base);
    return v;
}

const DimCase kCases[] = {
    {{3, 5, 7}, {}, 1},
    {{1, 9, 1, 4}, {}, 1},
    {{2, 130, 3}, {}, 1},
    {{4, 64, 2}, {}, 1},
    {{33}, {}, 1},
    {{7, 5}, {1, 0}, 1},  // a transpose
    {{6, 11}, {}, 2},
    {{2, 3, 1}, {}, 1},
    {{5, 2, 3, 2}, {2, 0, 3, 1}, 1},
    {{1, 1, 257}, {}, 1},
    // inner dims of whole sticks (the column program), and one whose tiles do not fit LX
    {{5, 37, 64}, {}, 1},
    {{3, 2, 130, 64}, {}, 1},
    {{1, 5000, 64}, {}, 1},
};

TEST_F(Ops, SoftmaxAlongAnyDim) {
    std::mt19937 rng(3);
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16, SPYRE_DTYPE_FLOAT32})
        for (const DimCase& c : kCases)
            for (int64_t dim = -1; dim < int64_t(c.shape.size()); ++dim) {
                SCOPED_TRACE(::testing::Message()
                             << "type " << t << " case " << (&c - kCases) << " dim " << dim);
                int64_t backing = 0;
                const View v = make_view(c, backing);
                const size_t d = size_t(dim < 0 ? dim + int64_t(c.shape.size()) : dim);
                DevArray x(dev, t, backing, uint32_t(rng()));
                for (size_t i = 0; i < size_t(backing); ++i)  // a spread that tests the max
                    put(t, x.host, i, x.at(i) * 6);
                ASSERT_SPYRE(spyre_memcpy_htod(x.buf, 0, x.host.data(), x.host.size()));
                DevArray o(dev, t, numel(c.shape), 1);
                std::vector<int64_t> dense(c.shape.size(), 1);
                for (size_t k = c.shape.size() - 1; k-- > 0;)
                    dense[k] = dense[k + 1] * c.shape[k + 1];
                const spyre_tensor tx = view(x, v.shape, v.strides), to = view(o, c.shape, dense);
                for (int log : {0, 1}) {
                    ASSERT_SPYRE(spyre_op_softmax_dim(nullptr, &tx, dim, log, &to));
                    ASSERT_SPYRE(spyre_device_synchronize(dev));
                    o.fetch();
                    const View ov{c.shape, dense, 0};
                    std::vector<std::vector<int64_t>> out_lines;
                    for_each_line(ov, d, [&](int64_t, const std::vector<int64_t>& offs) {
                        out_lines.push_back(offs);
                    });
                    for_each_line(v, d, [&](int64_t line, const std::vector<int64_t>& offs) {
                        double mx = -INFINITY, sum = 0;
                        for (int64_t off : offs) mx = std::max<double>(mx, x.at(off));
                        for (int64_t off : offs) sum += std::exp(x.at(off) - mx);
                        for (size_t j = 0; j < offs.size(); ++j) {
                            const double e = x.at(offs[j]) - mx;
                            const double want = log ? e - std::log(sum) : std::exp(e) / sum;
                            const double got = o.at(out_lines[line][j]);
                            ASSERT_NEAR(got, want, tolerance(t, 2) * (1 + std::fabs(want)))
                                << "log " << log << " line " << line << " j " << j;
                        }
                    });
                }
            }
}

TEST_F(Ops, ReductionsAlongAnyDim) {
    std::mt19937 rng(4);
    const spyre_reduce_op ops[] = {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX,
                                   SPYRE_REDUCE_MIN, SPYRE_REDUCE_ARGMAX};
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32})
        for (const DimCase& c : kCases)
            for (int64_t dim = 0; dim < int64_t(c.shape.size()); ++dim) {
                int64_t backing = 0;
                const View v = make_view(c, backing);
                DevArray x(dev, t, backing, uint32_t(rng()));
                const int64_t lines = numel(c.shape) / c.shape[dim];
                // keepdim on odd dims: the output keeps the reduced dim as 1
                std::vector<int64_t> oshape = c.shape;
                if (dim % 2)
                    oshape[dim] = 1;
                else
                    oshape.erase(oshape.begin() + dim);
                std::vector<int64_t> ost(oshape.size(), 1);
                for (size_t k = oshape.size(); k-- > 1;) ost[k - 1] = ost[k] * oshape[k];
                DevArray r(dev, t, lines, 2);
                spyre_buffer_t ab;
                ASSERT_SPYRE(spyre_malloc(dev, lines * 4, &ab));
                const spyre_tensor tx = view(x, v.shape, v.strides), tr = view(r, oshape, ost);
                spyre_tensor ta = tr;
                ta.buffer = ab, ta.dtype = SPYRE_DTYPE_INT32;
                for (spyre_reduce_op op : ops) {
                    SCOPED_TRACE(::testing::Message() << "type " << t << " case " << (&c - kCases)
                                                      << " dim " << dim << " op " << op);
                    const bool arg = op == SPYRE_REDUCE_ARGMAX;
                    ASSERT_SPYRE(spyre_op_reduce_dim(nullptr, op, &tx, dim, arg ? &ta : &tr));
                    ASSERT_SPYRE(spyre_device_synchronize(dev));
                    r.fetch();
                    std::vector<int32_t> am(lines);
                    ASSERT_SPYRE(spyre_memcpy_dtoh(am.data(), ab, 0, lines * 4));
                    for_each_line(v, size_t(dim),
                                  [&](int64_t line, const std::vector<int64_t>& offs) {
                                      double sum = 0, mag = 0, mx = -INFINITY, mn = INFINITY;
                                      int64_t first_max = 0;
                                      for (size_t j = 0; j < offs.size(); ++j) {
                                          const double e = x.at(offs[j]);
                                          sum += e, mag += std::fabs(e), mn = std::min(mn, e);
                                          if (e > mx) mx = e, first_max = int64_t(j);
                                      }
                                      if (arg) {
                                          ASSERT_EQ(am[line], first_max) << "line " << line;
                                          return;
                                      }
                                      const double want = op == SPYRE_REDUCE_SUM ? sum
                                                          : op == SPYRE_REDUCE_MEAN
                                                              ? sum / double(offs.size())
                                                          : op == SPYRE_REDUCE_MAX ? mx
                                                                                   : mn;
                                      const double scale = op == SPYRE_REDUCE_SUM    ? 1 + mag
                                                           : op == SPYRE_REDUCE_MEAN ? 1
                                                                                     : 0.5;
                                      ASSERT_NEAR(r.at(line), want, tolerance(t, 2) * scale)
                                          << "line " << line;
                                  });
                }
                spyre_free(ab);
            }
}

// Off the last dim the op runs on the cores: one column program when the inner dims are whole
// sticks, else copy (dim last) -> rows -> copy back; trailing size-1 dims are no inner dims.
TEST_F(Ops, AnyDimRunsOnTheCores) {
    const int64_t A = 8, R = 100, I = 64;
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, A * R * I, 1), o(dev, SPYRE_DTYPE_FLOAT16, A * R * I, 2);
    const spyre_tensor tx = view(x, {A, R, I}, {R * I, I, 1}),
                       to = view(o, {A, R, I}, {R * I, I, 1});
    ASSERT_SPYRE(spyre_op_softmax_dim(nullptr, &tx, 1, 0, &to));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(info.launches, 1u);
    EXPECT_STREQ(info.op, "softmax");
    EXPECT_NE(std::string(info.plan).find("columns"), std::string::npos) << info.plan;
    const spyre_tensor x1 = view(x, {A * 64, R, 1}, {R, 1, 1}),
                       o1 = view(o, {A * 64, R, 1}, {R, 1, 1});
    ASSERT_SPYRE(spyre_op_softmax_dim(nullptr, &x1, 1, 1, &o1));  // the rows path directly
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(info.launches, 1u);
    EXPECT_EQ(std::string(info.plan).find("columns"), std::string::npos) << info.plan;
    const spyre_tensor x2 = view(x, {A * 32, R, 2}, {R * 2, 2, 1}),
                       o2 = view(o, {A * 32, R, 2}, {R * 2, 2, 1});
    ASSERT_SPYRE(spyre_op_softmax_dim(nullptr, &x2, 1, 0, &o2));  // 4-byte inner rows: moved last
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(info.launches, 3u);
    EXPECT_NE(std::string(info.plan).find("dim 1 last"), std::string::npos) << info.plan;
    ASSERT_SPYRE(spyre_op_softmax_dim(nullptr, &tx, -1, 0, &to));  // the last dim: one launch
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(info.launches, 1u);
    // what it refuses
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_softmax_dim(nullptr, &tx, 3, 0, &to));
    EXPECT_NE(std::string(spyre_last_error()).find("dim 3 is out of range"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_softmax_dim(nullptr, &tx, -4, 0, &to));
    const spyre_tensor wrong = view(o, {A, I, R}, {R * I, R, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_softmax_dim(nullptr, &tx, 1, 0, &wrong));
    const spyre_tensor strided_out = view(o, {A, R, I}, {1, A * I, A});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_softmax_dim(nullptr, &tx, 1, 0, &strided_out));
    const spyre_tensor sums = view(o, {A, I}, {I, 1}), few = view(o, {A}, {1});
    ASSERT_SPYRE(spyre_op_reduce_dim(nullptr, SPYRE_REDUCE_MAX, &tx, 1, &sums));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_reduce_dim(nullptr, SPYRE_REDUCE_MAX, &tx, 1, &few));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_reduce_dim(nullptr, spyre_reduce_op(9), &tx, 1, &sums));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
}

}  // namespace
