// SPDX-License-Identifier: MIT
// The op library's C API (spyre/ops.h): linear and matmul against a double-precision host
// reference over odd shapes, dtypes, batches, transposed and padded operands; plan cache; every
// argument error with its message. On the simulator backend by default; in the guest
// (tests/guest/run-all.sh) with SPYRE_OPS_TEST_BACKEND=kernel, through spyre.ko.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ops_api_util.hpp"
#include "spyre/numerics.hpp"
#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace {

using namespace spyre::ops_api_test;

double act_ref(spyre_activation a, double x) {
    switch (a) {
        case SPYRE_ACTIVATION_RELU:
            return x > 0 ? x : 0;
        case SPYRE_ACTIVATION_GELU:
            return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
        case SPYRE_ACTIVATION_GELU_TANH:
            return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        case SPYRE_ACTIVATION_SILU:
            return x / (1 + std::exp(-x));
        default:
            return x;
    }
}

struct LinearCase {
    int64_t rows, in, out;
    spyre_dtype t;
    bool bias;
    spyre_activation act;
};

TEST_F(Ops, LinearMatchesReferenceOnOddShapes) {
    const LinearCase cases[] = {
        {1, 64, 64, SPYRE_DTYPE_FLOAT16, false, SPYRE_ACTIVATION_NONE},
        {3, 100, 72, SPYRE_DTYPE_FLOAT16, true, SPYRE_ACTIVATION_GELU},
        {17, 129, 65, SPYRE_DTYPE_BFLOAT16, true, SPYRE_ACTIVATION_SILU},
        {64, 256, 192, SPYRE_DTYPE_BFLOAT16, false, SPYRE_ACTIVATION_RELU},
        {5, 33, 7, SPYRE_DTYPE_FLOAT32, true, SPYRE_ACTIVATION_GELU_TANH},
        {128, 512, 256, SPYRE_DTYPE_FLOAT16, true, SPYRE_ACTIVATION_NONE},
        {1, 1, 1, SPYRE_DTYPE_FLOAT32, false, SPYRE_ACTIVATION_NONE},
    };
    uint32_t seed = 1;
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.in << " -> " << c.out << " t" << c.t
                                          << " bias " << c.bias << " act " << c.act);
        DevArray x(dev, c.t, c.rows * c.in, seed++), w(dev, c.t, c.out * c.in, seed++);
        DevArray b(dev, SPYRE_DTYPE_FLOAT32, c.out, seed++), y(dev, c.t, c.rows * c.out, seed++);
        const spyre_tensor tx = view(x, {c.rows, c.in}, {c.in, 1});
        const spyre_tensor tw = view(w, {c.out, c.in}, {c.in, 1});
        const spyre_tensor tb = view(b, {c.out}, {1});
        const spyre_tensor ty = view(y, {c.rows, c.out}, {c.out, 1});
        ASSERT_SPYRE(spyre_op_linear(nullptr, &tx, &tw, c.bias ? &tb : nullptr, c.act, &ty));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_STREQ(info.op, "linear");
        EXPECT_GT(info.modeled_cycles, 0u);
        EXPECT_GE(info.launches, 1u);
        y.fetch();
        double worst = 0;
        for (int64_t i = 0; i < c.rows; ++i)
            for (int64_t j = 0; j < c.out; ++j) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < c.in; ++k) {
                    acc += double(x.at(i * c.in + k)) * w.at(j * c.in + k);
                    mag += std::fabs(double(x.at(i * c.in + k)) * w.at(j * c.in + k));
                }
                if (c.bias) acc += b.at(j), mag += std::fabs(b.at(j));
                const double want = act_ref(c.act, acc), got = y.at(i * c.out + j);
                const double err = std::fabs(got - want);
                worst = std::max(worst, err);
                ASSERT_LE(err, tolerance(c.t, 1 + mag) + 1e-6)
                    << "(" << i << "," << j << ") got " << got << " want " << want;
            }
        RecordProperty("worst_abs_error", std::to_string(worst));
    }
}

TEST_F(Ops, AlignedLinearRunsInPlaceInOneLaunch) {
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, 64 * 128, 1), w(dev, SPYRE_DTYPE_FLOAT16, 256 * 128, 2);
    DevArray y(dev, SPYRE_DTYPE_FLOAT16, 64 * 256, 3);
    const spyre_tensor tx = view(x, {64, 128}, {128, 1}), tw = view(w, {256, 128}, {128, 1});
    const spyre_tensor ty = view(y, {64, 256}, {256, 1});
    uint64_t h0, m0, h1, m1;
    ASSERT_SPYRE(spyre_op_get_cache_stats(&h0, &m0));
    ASSERT_SPYRE(spyre_op_linear(nullptr, &tx, &tw, nullptr, SPYRE_ACTIVATION_NONE, &ty));
    spyre_op_info first;
    ASSERT_SPYRE(spyre_op_get_last_info(&first));
    EXPECT_EQ(first.launches, 1u);  // no padding copies: stick rows as given
    EXPECT_GE(first.cores, 1u);     // the planner may leave cores idle on a small product
    EXPECT_LE(first.cores, 32u);
    ASSERT_SPYRE(spyre_op_linear(nullptr, &tx, &tw, nullptr, SPYRE_ACTIVATION_NONE, &ty));
    spyre_op_info second;
    ASSERT_SPYRE(spyre_op_get_last_info(&second));
    EXPECT_EQ(second.plan_cached, 1u);
    EXPECT_EQ(second.modeled_cycles, first.modeled_cycles);
    EXPECT_STREQ(second.plan, first.plan);
    ASSERT_SPYRE(spyre_op_get_cache_stats(&h1, &m1));
    EXPECT_EQ(h1, h0 + 1);
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    y.fetch();
    // exact: the fp32 sum of fp16 products in k order (one K slice), or close to it
    for (int i : {0, 17, 63})
        for (int j : {0, 100, 255}) {
            double acc = 0;
            for (int k = 0; k < 128; ++k) acc += double(x.at(i * 128 + k)) * w.at(j * 128 + k);
            EXPECT_NEAR(y.at(i * 256 + j), acc, 0.05);
        }
}

TEST_F(Ops, BatchedMatmulSharedAndTransposedOperands) {
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32}) {
        SCOPED_TRACE(t);
        const int64_t B0 = 2, B1 = 3, M = 10, K = 70, N = 40;
        DevArray a(dev, t, B0 * B1 * M * K, 4), b(dev, t, N * K, 5), c(dev, t, B0 * B1 * M * N, 6);
        // b as the transposed view of an N x K matrix, shared by all batch elements
        const spyre_tensor ta = view(a, {B0, B1, M, K}, {B1 * M * K, M * K, K, 1});
        const spyre_tensor tb = view(b, {K, N}, {1, K});
        const spyre_tensor tc = view(c, {B0, B1, M, N}, {B1 * M * N, M * N, N, 1});
        ASSERT_SPYRE(spyre_op_matmul(nullptr, &ta, &tb, &tc));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        c.fetch();
        for (int64_t bi = 0; bi < B0 * B1; ++bi)
            for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                    double acc = 0, mag = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        const double p = double(a.at((bi * M + i) * K + k)) * b.at(j * K + k);
                        acc += p, mag += std::fabs(p);
                    }
                    ASSERT_NEAR(c.at((bi * M + i) * N + j), acc, tolerance(t, 1 + mag))
                        << bi << " " << i << " " << j;
                }
    }
}

// int8 x int8 -> int32 on the matrix unit (I8 MM): exact over the whole int8 range, for a
// padded K and N, a transposed shared B (the int8 linear's weight) and a batch; the epilogues
// and other output types are refused with a message.
TEST_F(Ops, Int8MatmulIsExactOnTheMatrixUnit) {
    const int64_t B = 3, M = 37, K = 300, N = 70;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> d(-128, 127);
    std::vector<int8_t> a(B * M * K), w(N * K);
    for (auto& v : a) v = static_cast<int8_t>(d(rng));
    for (auto& v : w) v = static_cast<int8_t>(d(rng));
    a[0] = -128, w[0] = -128;  // the one product that needs all 15 bits
    spyre_buffer_t ba, bw, bc;
    ASSERT_SPYRE(spyre_malloc(dev, a.size(), &ba));
    ASSERT_SPYRE(spyre_malloc(dev, w.size(), &bw));
    ASSERT_SPYRE(spyre_malloc(dev, B * M * N * 4, &bc));
    ASSERT_SPYRE(spyre_memcpy_htod(ba, 0, a.data(), a.size()));
    ASSERT_SPYRE(spyre_memcpy_htod(bw, 0, w.data(), w.size()));
    auto tensor = [](spyre_buffer_t buf, spyre_dtype t, std::vector<int64_t> shape,
                     std::vector<int64_t> strides) {
        spyre_tensor r{};
        r.buffer = buf, r.dtype = t, r.ndim = static_cast<uint32_t>(shape.size());
        for (size_t i = 0; i < shape.size(); ++i) r.shape[i] = shape[i], r.strides[i] = strides[i];
        return r;
    };
    const spyre_tensor ta = tensor(ba, SPYRE_DTYPE_INT8, {B, M, K}, {M * K, K, 1});
    const spyre_tensor tb = tensor(bw, SPYRE_DTYPE_INT8, {K, N}, {1, K});  // w^T, shared
    const spyre_tensor tc = tensor(bc, SPYRE_DTYPE_INT32, {B, M, N}, {M * N, N, 1});
    ASSERT_SPYRE(spyre_op_matmul(nullptr, &ta, &tb, &tc));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    std::vector<int32_t> c(B * M * N);
    ASSERT_SPYRE(spyre_memcpy_dtoh(c.data(), bc, 0, c.size() * 4));
    for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                int32_t acc = 0;
                for (int64_t k = 0; k < K; ++k)
                    acc += int32_t{a[(bi * M + i) * K + k]} * w[j * K + k];
                ASSERT_EQ(c[(bi * M + i) * N + j], acc) << bi << " " << i << " " << j;
            }
    // the linear form (x @ w^T) of one batch element
    const spyre_tensor tx = tensor(ba, SPYRE_DTYPE_INT8, {M, K}, {K, 1});
    const spyre_tensor tw = tensor(bw, SPYRE_DTYPE_INT8, {N, K}, {K, 1});
    const spyre_tensor ty = tensor(bc, SPYRE_DTYPE_INT32, {M, N}, {N, 1});
    ASSERT_SPYRE(spyre_memset(bc, 0, 0, B * M * N * 4));
    ASSERT_SPYRE(spyre_op_linear(nullptr, &tx, &tw, nullptr, SPYRE_ACTIVATION_NONE, &ty));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    std::vector<int32_t> y(M * N);
    ASSERT_SPYRE(spyre_memcpy_dtoh(y.data(), bc, 0, y.size() * 4));
    for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(y[i], c[i]) << i;
    // refused: an int8 output, an activation
    const spyre_tensor t8 = tensor(bc, SPYRE_DTYPE_INT8, {M, N}, {N, 1});
    EXPECT_EQ(spyre_op_matmul(nullptr, &tx, &tb, &t8), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("int32 output"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_op_linear(nullptr, &tx, &tw, nullptr, SPYRE_ACTIVATION_RELU, &ty),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("no bias, activation"), std::string::npos)
        << spyre_last_error();
    spyre_free(ba), spyre_free(bw), spyre_free(bc);
}

// Weight-only int8 linear: x (each float type) against int8 weights with per-channel scales,
// a bias and an activation, odd sizes (K and N padded on the card); the products of x and the
// int8 values are exact, so the result is the fp32 sum of the reference to rounding.
TEST_F(Ops, LinearWithInt8WeightsAndScales) {
    const int64_t M = 5, K = 200, N = 90;
    std::mt19937 rng(12);
    std::uniform_int_distribution<int> d(-128, 127);
    std::vector<int8_t> w(N * K);
    for (auto& v : w) v = static_cast<int8_t>(d(rng));
    spyre_buffer_t bw;
    ASSERT_SPYRE(spyre_malloc(dev, w.size(), &bw));
    ASSERT_SPYRE(spyre_memcpy_htod(bw, 0, w.data(), w.size()));
    spyre_tensor tw{};
    tw.buffer = bw, tw.dtype = SPYRE_DTYPE_INT8, tw.ndim = 2;
    tw.shape[0] = N, tw.shape[1] = K, tw.strides[0] = K, tw.strides[1] = 1;
    for (spyre_dtype t : {SPYRE_DTYPE_BFLOAT16, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32}) {
        SCOPED_TRACE(t);
        DevArray x(dev, t, M * K, 13), sc(dev, t, N, 14), bias(dev, SPYRE_DTYPE_FLOAT32, N, 15),
            y(dev, t, M * N, 16);
        const spyre_tensor tx = view(x, {M, K}, {K, 1}), ts = view(sc, {N}, {1}),
                           tb = view(bias, {N}, {1}), ty = view(y, {M, N}, {N, 1});
        ASSERT_SPYRE(
            spyre_op_linear_int8_weight(nullptr, &tx, &tw, &ts, &tb, SPYRE_ACTIVATION_RELU, &ty));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        y.fetch();
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double p = double(x.at(i * K + k)) * w[j * K + k];
                    acc += p, mag += std::fabs(p);
                }
                const double want = std::max(0.0, acc * sc.at(j) + bias.at(j));
                // one rounding of the result to t, the fp32 sum's error
                const double rel = t == SPYRE_DTYPE_FLOAT32   ? 1e-6
                                   : t == SPYRE_DTYPE_FLOAT16 ? 1e-3
                                                              : 8e-3;
                ASSERT_NEAR(y.at(i * N + j), want,
                            std::fabs(want) * rel + 1e-5 * mag * std::fabs(sc.at(j)) + 1e-6);
            }
    }
    // refused: float weights, scales of the wrong length
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, M * K, 17), wf(dev, SPYRE_DTYPE_FLOAT16, N * K, 18),
        sc(dev, SPYRE_DTYPE_FLOAT16, N, 19), y(dev, SPYRE_DTYPE_FLOAT16, M * N, 20);
    const spyre_tensor tx = view(x, {M, K}, {K, 1}), twf = view(wf, {N, K}, {K, 1}),
                       ty = view(y, {M, N}, {N, 1}), short_sc = view(sc, {N - 1}, {1});
    const spyre_tensor ts = view(sc, {N}, {1});
    EXPECT_EQ(
        spyre_op_linear_int8_weight(nullptr, &tx, &twf, &ts, nullptr, SPYRE_ACTIVATION_NONE, &ty),
        SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("int8"), std::string::npos);
    EXPECT_EQ(spyre_op_linear_int8_weight(nullptr, &tx, &tw, &short_sc, nullptr,
                                          SPYRE_ACTIVATION_NONE, &ty),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("shape [90]"), std::string::npos)
        << spyre_last_error();
    spyre_free(bw);
}

TEST_F(Ops, StridedRowsAndOffsetsArePadded) {
    // A: rows of 48 elements taken every 80 elements, starting at element 3 (misaligned)
    const int64_t M = 9, K = 48, N = 64;
    DevArray a(dev, SPYRE_DTYPE_FLOAT32, 3 + M * 80, 7), b(dev, SPYRE_DTYPE_FLOAT32, K * N, 8);
    DevArray c(dev, SPYRE_DTYPE_FLOAT32, M * 100, 9);
    const spyre_tensor ta = view(a, {M, K}, {80, 1}, 3);
    const spyre_tensor tb = view(b, {K, N}, {N, 1});
    const spyre_tensor tc = view(c, {M, N}, {100, 1});  // output rows with a gap
    const std::vector<uint8_t> before = c.host;
    ASSERT_SPYRE(spyre_op_matmul(nullptr, &ta, &tb, &tc));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    c.fetch();
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += double(a.at(3 + i * 80 + k)) * b.at(k * N + j);
            ASSERT_NEAR(c.at(i * 100 + j), acc, 1e-4);
        }
        for (int64_t j = N; j < 100 && i + 1 < M; ++j)  // the gaps are untouched
            ASSERT_EQ(std::memcmp(&c.host[4 * (i * 100 + j)], &before[4 * (i * 100 + j)], 4), 0);
    }
}

// The MLP block, gated (SwiGLU) and plain (GELU), odd sizes, against a double reference that
// rounds the hidden activations to the input type as the card does.
TEST_F(Ops, MlpGatedAndPlain) {
    const int64_t M = 5, H = 96, I = 200;
    for (bool gated : {true, false}) {
        SCOPED_TRACE(gated);
        const spyre_dtype t = SPYRE_DTYPE_FLOAT16;
        DevArray x(dev, t, M * H, 1), wg(dev, t, I * H, 2), wu(dev, t, I * H, 3);
        DevArray wd(dev, t, H * I, 4), y(dev, t, M * H, 5);
        const spyre_tensor tx = view(x, {M, H}, {H, 1}), tg = view(wg, {I, H}, {H, 1});
        const spyre_tensor tu = view(wu, {I, H}, {H, 1}), td = view(wd, {H, I}, {I, 1});
        const spyre_tensor ty = view(y, {M, H}, {H, 1});
        const spyre_activation act = gated ? SPYRE_ACTIVATION_SILU : SPYRE_ACTIVATION_GELU;
        ASSERT_SPYRE(spyre_op_mlp(nullptr, &tx, gated ? &tg : nullptr, &tu, &td, act, &ty));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_STREQ(info.op, "mlp");
        EXPECT_NE(std::string(info.plan).find("; down "), std::string::npos) << info.plan;
        y.fetch();
        std::vector<double> h(M * I);
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < I; ++j) {
                double g = 0, u = 0;
                for (int64_t k = 0; k < H; ++k) {
                    g += double(x.at(i * H + k)) * wg.at(j * H + k);
                    u += double(x.at(i * H + k)) * wu.at(j * H + k);
                }
                const double v = gated ? act_ref(act, g) * u : act_ref(act, u);
                h[i * I + j] = f16_to_f32(f32_to_f16(float(v)));
            }
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < H; ++j) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < I; ++k) {
                    want += h[i * I + k] * wd.at(j * I + k);
                    mag += std::fabs(h[i * I + k] * wd.at(j * I + k));
                }
                ASSERT_NEAR(y.at(i * H + j), want, 4e-3 * (1 + mag)) << i << "," << j;
            }
    }
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, 64 * 64, 1);
    const spyre_tensor sq = view(x, {64, 64}, {64, 1}), wrong = view(x, {32, 64}, {64, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_mlp(nullptr, &sq, &wrong, &sq, &sq, SPYRE_ACTIVATION_SILU, &sq));
    EXPECT_NE(std::string(spyre_last_error()).find("up/gate [I, 64]"), std::string::npos)
        << spyre_last_error();
}

// One query row of attention in double: softmax over score(j) (-inf: not attended) of the Lk
// keys, then the weighted sum of value(j, d) for each of the D dims; empty if no key is seen.
std::vector<double> attend_ref(int64_t Lk, int64_t D, const std::function<double(int64_t)>& score,
                               const std::function<double(int64_t, int64_t)>& value) {
    std::vector<double> p(Lk), out;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < Lk; ++j) mx = std::max(mx, p[j] = score(j));
    if (mx == -INFINITY) return out;
    for (auto& x : p) sum += x = std::exp(x - mx);
    out.assign(D, 0.0);
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t j = 0; j < Lk; ++j) out[d] += p[j] * value(j, d);
        out[d] /= sum;
    }
    return out;
}

// Attention on [B, L, H, D] buffers viewed as [B, H, L, D] (torch's transpose(1, 2)), GQA,
// causal with a cache of earlier tokens, against a double-precision reference.
TEST_F(Ops, AttentionOnTransposedViews) {
    const int64_t B = 1, Hq = 4, Hkv = 2, Lq = 3, Lk = 67, D = 64;
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16}) {
        SCOPED_TRACE(t);
        DevArray q(dev, t, B * Lq * Hq * D, 1), k(dev, t, B * Lk * Hkv * D, 2);
        DevArray v(dev, t, B * Lk * Hkv * D, 3), o(dev, t, B * Lq * Hq * D, 4);
        auto bhld = [](const DevArray& a, int64_t H, int64_t L) {
            return view(a, {B, H, L, D}, {L * H * D, D, H * D, 1});
        };
        const spyre_tensor tq = bhld(q, Hq, Lq), tk = bhld(k, Hkv, Lk), tv = bhld(v, Hkv, Lk);
        const spyre_tensor to = bhld(o, Hq, Lq);
        ASSERT_SPYRE(spyre_op_attention(nullptr, &tq, &tk, &tv, &to, 1, 0.0f));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_STREQ(info.op, "attention");
        EXPECT_GT(info.modeled_cycles, 0u);
        o.fetch();
        const double tol = t == SPYRE_DTYPE_FLOAT16 ? 5e-3 : 3e-2;
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const auto want = attend_ref(
                    Lk, D,
                    [&](int64_t j) {
                        double dot = 0;
                        for (int64_t d = 0; d < D; ++d)
                            dot += double(q.at((i * Hq + h) * D + d)) *
                                   k.at((j * Hkv + h / 2) * D + d);
                        return j <= i + (Lk - Lq) ? dot / 8.0 : -INFINITY;
                    },
                    [&](int64_t j, int64_t d) { return v.at((j * Hkv + h / 2) * D + d); });
                ASSERT_EQ(want.size(), size_t(D));
                for (int64_t d = 0; d < D; ++d)
                    ASSERT_NEAR(o.at((i * Hq + h) * D + d), want[d], tol * (1 + std::fabs(want[d])))
                        << "h" << h << " q" << i << " d" << d;
            }
    }
    // what it refuses
    DevArray q(dev, SPYRE_DTYPE_FLOAT16, 4 * 64, 5);
    const spyre_tensor q3 = view(q, {1, 3, 1, 64}, {192, 64, 64, 1});
    const spyre_tensor k2 = view(q, {1, 2, 1, 64}, {128, 64, 64, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_attention(nullptr, &q3, &k2, &k2, &q3, 0, 0));
    EXPECT_NE(std::string(spyre_last_error()).find("3 query heads are not a multiple of 2"),
              std::string::npos)
        << spyre_last_error();
    const spyre_tensor odd = view(q, {1, 1, 2, 50}, {100, 100, 50, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_attention(nullptr, &odd, &odd, &odd, &odd, 0, 0));
}

// spyre_op_attention_lse then spyre_op_attention_backward on torch's [B, L, H, D] transposed
// views, GQA 4:2, causal, 40 positions (one query block of all rows), fp32: lse, dq, dk and dv
// against a double reference; two launches for the backward; what the two refuse.
TEST_F(Ops, AttentionBackwardOnTransposedViews) {
    const int64_t B = 1, Hq = 4, Hkv = 2, L = 40, D = 64, P = 64;  // lse rows padded to 64
    const spyre_dtype t = SPYRE_DTYPE_FLOAT32;
    DevArray q(dev, t, B * L * Hq * D, 1), k(dev, t, B * L * Hkv * D, 2);
    DevArray v(dev, t, B * L * Hkv * D, 3), o(dev, t, B * L * Hq * D, 4);
    DevArray dout(dev, t, B * L * Hq * D, 5), dq(dev, t, B * L * Hq * D, 6);
    DevArray dk(dev, t, B * L * Hkv * D, 7), dv(dev, t, B * L * Hkv * D, 8);
    DevArray lse(dev, t, B * Hq * P, 9);
    auto bhld = [](const DevArray& a, int64_t H) {
        return view(a, {B, H, L, D}, {L * H * D, D, H * D, 1});
    };
    const spyre_tensor tq = bhld(q, Hq), tk = bhld(k, Hkv), tv = bhld(v, Hkv), to = bhld(o, Hq);
    const spyre_tensor tdo = bhld(dout, Hq), tdq = bhld(dq, Hq), tdk = bhld(dk, Hkv),
                       tdv = bhld(dv, Hkv);
    const spyre_tensor tl = view(lse, {B, Hq, L}, {Hq * P, P, 1});
    ASSERT_SPYRE(spyre_op_attention_lse(nullptr, &tq, &tk, &tv, nullptr, &to, &tl, 1, 0.0f));
    ASSERT_SPYRE(spyre_op_attention_backward(nullptr, &tq, &tk, &tv, nullptr, &to, &tdo, &tl, &tdq,
                                             &tdk, &tdv, 1, 0.0f));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_STREQ(info.op, "attention_backward");
    EXPECT_EQ(info.launches, 2u);  // the dQ pass, then the dK/dV pass
    EXPECT_NE(std::string(info.plan).find("dK/dV"), std::string::npos) << info.plan;
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    for (DevArray* a : {&o, &lse, &dq, &dk, &dv}) a->fetch();
    // reference: P = softmax(q k^T / 8) causal; dS = P (dO v^T - rowsum(P dO v^T))
    std::vector<double> rq(L * Hq * D), rk(L * Hkv * D), rv(L * Hkv * D);
    auto at = [&](const DevArray& a, int64_t H, int64_t i, int64_t h, int64_t d) {
        return double(a.at((i * H + h) * D + d));
    };
    for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / (Hq / Hkv);
        for (int64_t i = 0; i < L; ++i) {
            std::vector<double> p(L, 0.0), dp(L, 0.0);
            double mx = -INFINITY, sum = 0, delta = 0;
            for (int64_t j = 0; j <= i; ++j) {
                for (int64_t d = 0; d < D; ++d) p[j] += at(q, Hq, i, h, d) * at(k, Hkv, j, kh, d);
                p[j] /= 8.0;
                mx = std::max(mx, p[j]);
            }
            for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
            EXPECT_NEAR(lse.at(h * P + i), mx + std::log(sum), 1e-5 * (1 + std::fabs(mx)));
            for (int64_t j = 0; j <= i; ++j) {
                p[j] = std::exp(p[j] - mx) / sum;
                for (int64_t d = 0; d < D; ++d)
                    dp[j] += at(dout, Hq, i, h, d) * at(v, Hkv, j, kh, d);
                delta += p[j] * dp[j];
            }
            for (int64_t j = 0; j <= i; ++j)
                for (int64_t d = 0; d < D; ++d) {
                    const double ds = p[j] * (dp[j] - delta) / 8.0;
                    rq[(i * Hq + h) * D + d] += ds * at(k, Hkv, j, kh, d);
                    rk[(j * Hkv + kh) * D + d] += ds * at(q, Hq, i, h, d);
                    rv[(j * Hkv + kh) * D + d] += p[j] * at(dout, Hq, i, h, d);
                }
        }
    }
    for (auto [name, got, want] :
         {std::tuple{"dq", &dq, &rq}, std::tuple{"dk", &dk, &rk}, std::tuple{"dv", &dv, &rv}})
        for (size_t e = 0; e < want->size(); ++e)
            ASSERT_NEAR(got->at(e), (*want)[e], 1e-4 * (1 + std::fabs((*want)[e])))
                << name << " element " << e;
    // what they refuse: lse rows that do not start on sticks, gradients of the wrong shape
    const spyre_tensor unpadded = view(lse, {B, Hq, L}, {Hq * L, L, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_attention_lse(nullptr, &tq, &tk, &tv, nullptr, &to, &unpadded, 1, 0.0f));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_attention_backward(nullptr, &tq, &tk, &tv, nullptr, &to, &tdo, &tl, &tdq,
                                          &tdq, &tdv, 1, 0.0f));
    EXPECT_NE(std::string(spyre_last_error()).find("`dk` must have the shape of `k`"),
              std::string::npos)
        << spyre_last_error();
}

// Decode steps at growing key lengths (ops.md "Attention plans across key lengths"): the key
// length and K/V strides are launch arguments, so 40 lengths of a KV cache (45..84, across the
// bucket edge at 64) and of dense K/V copies (their head strides change with the length) make
// one plan per bucket, not one per length; every result against a double-precision
// reference at its own length; modeled cycles do not shrink as the length grows in a bucket.
TEST_F(Ops, DecodeAttentionAcrossKeyLengths) {
    const int64_t Hq = 4, Hkv = 2, D = 64, Lmax = 96;
    DevArray q(dev, SPYRE_DTYPE_FLOAT16, Hq * D, 31),
        k(dev, SPYRE_DTYPE_FLOAT16, Hkv * Lmax * D, 32);
    DevArray v(dev, SPYRE_DTYPE_FLOAT16, Hkv * Lmax * D, 33),
        o(dev, SPYRE_DTYPE_FLOAT16, Hq * D, 34);
    const spyre_tensor tq = view(q, {1, Hq, 1, D}, {Hq * D, D, D, 1});
    const spyre_tensor to = view(o, {1, Hq, 1, D}, {Hq * D, D, D, 1});
    uint64_t hits0 = 0, misses0 = 0;
    ASSERT_SPYRE(spyre_op_get_cache_stats(&hits0, &misses0));
    uint64_t last_cycles[2] = {};
    std::set<std::string> plans;
    for (int64_t Lk = 45; Lk < 85; ++Lk) {
        // dense copies [1, Hkv, Lk, D] of the cache's first Lk entries (torch.cat's caches)
        std::vector<uint8_t> kd(Hkv * Lk * D * 2), vd(kd.size());
        for (int64_t h = 0; h < Hkv; ++h) {
            std::memcpy(&kd[h * Lk * D * 2], &k.host[h * Lmax * D * 2], Lk * D * 2);
            std::memcpy(&vd[h * Lk * D * 2], &v.host[h * Lmax * D * 2], Lk * D * 2);
        }
        spyre_buffer_t kb, vb;
        ASSERT_SPYRE(spyre_malloc(dev, kd.size(), &kb));
        ASSERT_SPYRE(spyre_malloc(dev, vd.size(), &vb));
        ASSERT_SPYRE(spyre_memcpy_htod(kb, 0, kd.data(), kd.size()));
        ASSERT_SPYRE(spyre_memcpy_htod(vb, 0, vd.data(), vd.size()));
        const int64_t shape[4] = {1, Hkv, Lk, D};
        spyre_tensor dk, dv;
        ASSERT_SPYRE(spyre_tensor_init(&dk, kb, 0, SPYRE_DTYPE_FLOAT16, 4, shape));
        ASSERT_SPYRE(spyre_tensor_init(&dv, vb, 0, SPYRE_DTYPE_FLOAT16, 4, shape));
        // a KV cache [1, Hkv, Lmax, D] read up to Lk, as torch's cache[:, :, :Lk]
        const spyre_tensor ck = view(k, {1, Hkv, Lk, D}, {Hkv * Lmax * D, Lmax * D, D, 1});
        const spyre_tensor cv = view(v, {1, Hkv, Lk, D}, {Hkv * Lmax * D, Lmax * D, D, 1});
        for (int dense = 0; dense < 2; ++dense) {
            SCOPED_TRACE(::testing::Message() << "Lk " << Lk << (dense ? " dense" : " cache"));
            ASSERT_SPYRE(spyre_op_attention(nullptr, &tq, dense ? &dk : &ck, dense ? &dv : &cv, &to,
                                            Lk % 2, 0.0f));  // causal or not: the same
            spyre_op_info info;
            ASSERT_SPYRE(spyre_op_get_last_info(&info));
            plans.insert(info.plan);
            if (Lk != 65) EXPECT_GE(info.modeled_cycles, last_cycles[dense]);
            last_cycles[dense] = info.modeled_cycles;
            ASSERT_SPYRE(spyre_device_synchronize(dev));
            o.fetch();
            for (int64_t h = 0; h < Hq; ++h) {
                const auto want = attend_ref(
                    Lk, D,
                    [&](int64_t j) {
                        double dot = 0;
                        for (int64_t d = 0; d < D; ++d)
                            dot += double(q.at(h * D + d)) * k.at(((h / 2) * Lmax + j) * D + d);
                        return dot / 8.0;
                    },
                    [&](int64_t j, int64_t d) { return v.at(((h / 2) * Lmax + j) * D + d); });
                for (int64_t d = 0; d < D; ++d)
                    ASSERT_NEAR(o.at(h * D + d), want[d], 5e-3 * (1 + std::fabs(want[d])))
                        << "h" << h << " d" << d;
            }
        }
        spyre_free(kb);
        spyre_free(vb);
    }
    uint64_t hits = 0, misses = 0;
    ASSERT_SPYRE(spyre_op_get_cache_stats(&hits, &misses));
    // one plan per bucket (45..64, 65..84) for both: K/V strides are not part of it
    EXPECT_LE(misses - misses0, 2u);
    EXPECT_EQ(hits + misses - hits0 - misses0, 80u);
    EXPECT_EQ(plans.size(), 2u);  // one text per bucket (it names the bucket's lengths)
}

// Attention masks through the C API: torch's attn_mask forms ([Lq, Lk], [B, 1, Lq, Lk],
// [B, Hq, Lq, Lk], a [B, 1, 1, Lk] padding mask), additive (fp16, fp32) and boolean (int8), with
// and without causal, odd sizes (mask rows re-laid on the cores), a query that sees no key.
TEST_F(Ops, AttentionWithMasks) {
    const int64_t B = 2, Hq = 4, Hkv = 2, Lq = 5, Lk = 37, D = 64;
    struct MaskCase {
        std::vector<int64_t> shape;
        spyre_dtype mt;  // FLOAT16/FLOAT32 additive, INT8 boolean
        bool causal;
    };
    const MaskCase cases[] = {
        {{Lq, Lk}, SPYRE_DTYPE_FLOAT16, false},       {{B, 1, Lq, Lk}, SPYRE_DTYPE_INT8, true},
        {{B, Hq, Lq, Lk}, SPYRE_DTYPE_FLOAT32, true}, {{B, 1, 1, Lk}, SPYRE_DTYPE_INT8, false},
        {{B, Hq, Lq, Lk}, SPYRE_DTYPE_INT8, false},   {{1, Lq, Lk}, SPYRE_DTYPE_FLOAT16, true},
    };
    const spyre_dtype t = SPYRE_DTYPE_FLOAT16;
    DevArray q(dev, t, B * Hq * Lq * D, 1), k(dev, t, B * Hkv * Lk * D, 2);
    DevArray v(dev, t, B * Hkv * Lk * D, 3), o(dev, t, B * Hq * Lq * D, 4);
    auto dense = [](const DevArray& a, int64_t H, int64_t L) {
        return view(a, {B, H, L, D}, {H * L * D, L * D, D, 1});
    };
    const spyre_tensor tq = dense(q, Hq, Lq), tk = dense(k, Hkv, Lk), tv = dense(v, Hkv, Lk);
    const spyre_tensor to = dense(o, Hq, Lq);
    std::mt19937 rng(9);
    for (const MaskCase& mc : cases) {
        SCOPED_TRACE(::testing::Message() << mc.shape.size() << "-D mask of type " << mc.mt
                                          << (mc.causal ? " causal" : ""));
        int64_t n = 1;
        for (int64_t d : mc.shape) n *= d;
        const size_t mes = mc.mt == SPYRE_DTYPE_INT8 ? 1 : esize(mc.mt);
        std::vector<uint8_t> mh(n * mes);
        std::vector<float> mv(n);
        for (int64_t i = 0; i < n; ++i) {
            const int c = int(rng() % 8);
            if (mc.mt == SPYRE_DTYPE_INT8) {
                mh[i] = c > 1, mv[i] = c > 1;
            } else {
                const float x = c == 0 ? -INFINITY : float(int(rng() % 9) - 4) * 0.5f;
                put(mc.mt, mh, i, x);
                mv[i] = get(mc.mt, mh, i);
            }
        }
        // the first query row of the first mask sees nothing: NaN
        const bool empty_row = mc.mt == SPYRE_DTYPE_INT8;
        if (empty_row)
            for (int64_t j = 0; j < Lk; ++j) mh[j] = 0, mv[j] = 0;
        spyre_buffer_t mb;
        ASSERT_SPYRE(spyre_malloc(dev, mh.size(), &mb));
        ASSERT_SPYRE(spyre_memcpy_htod(mb, 0, mh.data(), mh.size()));
        spyre_tensor tm{};
        ASSERT_SPYRE(
            spyre_tensor_init(&tm, mb, 0, mc.mt, uint32_t(mc.shape.size()), mc.shape.data()));
        ASSERT_SPYRE(spyre_op_attention_masked(nullptr, &tq, &tk, &tv, &tm, &to, mc.causal, 0.0f));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_NE(std::string(info.plan).find(mc.mt == SPYRE_DTYPE_INT8 ? "boolean" : "additive"),
                  std::string::npos)
            << info.plan;
        EXPECT_EQ(info.launches, 2u);  // 37-element mask rows are re-laid into stick rows first
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        spyre_free(mb);
        o.fetch();
        // the mask element of (b, h, i, j) under torch broadcasting
        std::vector<int64_t> md(4 - mc.shape.size(), 1);
        md.insert(md.end(), mc.shape.begin(), mc.shape.end());
        auto mask_at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
            const int64_t bi = md[0] == 1 ? 0 : b, hi = md[1] == 1 ? 0 : h;
            const int64_t ii = md[2] == 1 ? 0 : i;
            return mv[((bi * md[1] + hi) * md[2] + ii) * Lk + j];
        };
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < Lq; ++i) {
                    const auto want = attend_ref(
                        Lk, D,
                        [&](int64_t j) {
                            double dot = 0;
                            for (int64_t d = 0; d < D; ++d)
                                dot += double(q.at(((b * Hq + h) * Lq + i) * D + d)) *
                                       k.at(((b * Hkv + h / 2) * Lk + j) * D + d);
                            dot /= 8.0;
                            const float m = mask_at(b, h, i, j);
                            bool keep = !mc.causal || j <= i + (Lk - Lq);
                            if (mc.mt == SPYRE_DTYPE_INT8)
                                keep = keep && m != 0;
                            else
                                dot += m;
                            return keep ? dot : -INFINITY;
                        },
                        [&](int64_t j, int64_t d) {
                            return v.at(((b * Hkv + h / 2) * Lk + j) * D + d);
                        });
                    for (int64_t d = 0; d < D; ++d) {
                        const float got = o.at(((b * Hq + h) * Lq + i) * D + d);
                        if (want.empty()) {  // nothing to attend to: NaN
                            ASSERT_TRUE(std::isnan(got)) << "b" << b << " h" << h << " q" << i;
                            continue;
                        }
                        ASSERT_NEAR(got, want[d], 5e-3 * (1 + std::fabs(want[d])))
                            << "b" << b << " h" << h << " q" << i << " d" << d;
                    }
                }
        if (empty_row) EXPECT_TRUE(std::isnan(o.at(0)));
    }
    // what it refuses, with the reason
    DevArray m(dev, SPYRE_DTYPE_FLOAT16, B * Hq * Lq * Lk, 5);
    const spyre_tensor wrong = view(m, {Lq, Lk + 1}, {Lk + 1, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_attention_masked(nullptr, &tq, &tk, &tv, &wrong, &to, 0, 0));
    EXPECT_NE(std::string(spyre_last_error()).find("does not broadcast"), std::string::npos)
        << spyre_last_error();
    const spyre_tensor three_heads = view(m, {B, 3, Lq, Lk}, {3 * Lq * Lk, Lq * Lk, Lk, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_attention_masked(nullptr, &tq, &tk, &tv, &three_heads, &to, 0, 0));
    spyre_tensor ints = view(m, {Lq, Lk}, {Lk, 1});
    ints.dtype = SPYRE_DTYPE_INT32;
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_attention_masked(nullptr, &tq, &tk, &tv, &ints, &to, 0, 0));
    EXPECT_NE(std::string(spyre_last_error()).find("int8 (a boolean"), std::string::npos)
        << spyre_last_error();
    const spyre_tensor strided = view(m, {Lq, Lk}, {1, Lq});  // a transposed view
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_attention_masked(nullptr, &tq, &tk, &tv, &strided, &to, 0, 0));
    EXPECT_NE(std::string(spyre_last_error()).find("key dim must be contiguous"), std::string::npos)
        << spyre_last_error();
    // NULL mask: the plain op
    ASSERT_SPYRE(spyre_op_attention_masked(nullptr, &tq, &tk, &tv, nullptr, &to, 1, 0.0f));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(std::string(info.plan).find("mask"), std::string::npos) << info.plan;
}

// Operands further apart than a core's 256 MB span: every access sets its own span.
TEST_F(Ops, OperandsFarApartInDeviceMemory) {
    uint64_t free = 0, total = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev, &free, &total));
    if (free < (700ull << 20)) GTEST_SKIP() << "needs 700 MiB of device memory";
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, 256 * 256, 1);  // above the 64 KiB sub-allocator
    spyre_buffer_t gap1, gap2;
    ASSERT_SPYRE(spyre_malloc(dev, 300ull << 20, &gap1));
    DevArray w(dev, SPYRE_DTYPE_FLOAT16, 256 * 256, 2);
    ASSERT_SPYRE(spyre_malloc(dev, 300ull << 20, &gap2));
    DevArray y(dev, SPYRE_DTYPE_FLOAT16, 256 * 256, 3);
    uint64_t ax, ay;
    ASSERT_SPYRE(spyre_buffer_device_address(x.buf, &ax));
    ASSERT_SPYRE(spyre_buffer_device_address(y.buf, &ay));
    ASSERT_GT(ay - ax, 512ull << 20);
    const spyre_tensor tx = view(x, {256, 256}, {256, 1}), tw = view(w, {256, 256}, {256, 1});
    const spyre_tensor ty = view(y, {256, 256}, {256, 1});
    ASSERT_SPYRE(spyre_op_linear(nullptr, &tx, &tw, nullptr, SPYRE_ACTIVATION_NONE, &ty));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    y.fetch();
    for (int i : {0, 131, 255})
        for (int j : {0, 64, 255}) {
            double acc = 0;
            for (int k = 0; k < 256; ++k) acc += double(x.at(i * 256 + k)) * w.at(j * 256 + k);
            EXPECT_NEAR(y.at(i * 256 + j), acc, 0.08);
        }
    spyre_free(gap1);
    spyre_free(gap2);
}

// Rotary embedding through the C API: q as a [B, L, H, D] buffer viewed [B, H, L, D], HF-style
// cos/sin [B, 1, L, D], in place.
TEST_F(Ops, RotaryInPlaceOnATransposedView) {
    const int64_t B = 1, H = 2, L = 3, D = 64;
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, B * L * H * D, 1);
    DevArray c(dev, SPYRE_DTYPE_FLOAT16, L * D, 2), sn(dev, SPYRE_DTYPE_FLOAT16, L * D, 3);
    const std::vector<uint8_t> orig = x.host;
    const spyre_tensor tx = view(x, {B, H, L, D}, {L * H * D, D, H * D, 1});
    const spyre_tensor tc = view(c, {B, 1, L, D}, {L * D, L * D, D, 1});
    const spyre_tensor ts = view(sn, {B, 1, L, D}, {L * D, L * D, D, 1});
    ASSERT_SPYRE(spyre_op_rotary(nullptr, &tx, &tc, &ts, &tx));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    x.fetch();
    for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
            for (int64_t j = 0; j < D; ++j) {
                auto xv = [&](int64_t k) {
                    return double(get(SPYRE_DTYPE_FLOAT16, orig, (l * H + h) * D + k));
                };
                const double rot = j < D / 2 ? -xv(j + D / 2) : xv(j - D / 2);
                const double want = xv(j) * c.at(l * D + j) + rot * sn.at(l * D + j);
                ASSERT_NEAR(x.at((l * H + h) * D + j), want, 2e-3 * (1 + std::fabs(want)));
            }
    const spyre_tensor bad = view(c, {2, L, D}, {L * D, D, 1});  // batch 2 of a batch-1 x
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_rotary(nullptr, &tx, &bad, &bad, &tx));
}

// Embedding through the C API: int64 indices [2, 3] into a [50, 64] fp16 table, then an index out
// of range fails the launch (reported by synchronize) and the card keeps working.
TEST_F(Ops, EmbeddingAndItsDeviceSideBoundsCheck) {
    const int64_t V = 50, D = 64;
    DevArray w(dev, SPYRE_DTYPE_FLOAT16, V * D, 1), o(dev, SPYRE_DTYPE_FLOAT16, 6 * D, 2);
    const std::vector<int64_t> idx = {0, 49, 7, 7, 13, 1};
    spyre_buffer_t ib;
    ASSERT_SPYRE(spyre_malloc(dev, idx.size() * 8, &ib));
    ASSERT_SPYRE(spyre_memcpy_htod(ib, 0, idx.data(), idx.size() * 8));
    spyre_tensor ti{};
    ti.buffer = ib, ti.dtype = SPYRE_DTYPE_INT64, ti.ndim = 2;
    ti.shape[0] = 2, ti.shape[1] = 3, ti.strides[0] = 3, ti.strides[1] = 1;
    const spyre_tensor tw = view(w, {V, D}, {D, 1}), to = view(o, {2, 3, D}, {3 * D, D, 1});
    ASSERT_SPYRE(spyre_op_embedding(nullptr, &ti, &tw, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    o.fetch();
    for (size_t i = 0; i < idx.size(); ++i)
        ASSERT_EQ(0, std::memcmp(&o.host[i * D * 2], &w.host[idx[i] * D * 2], D * 2)) << i;
    const int64_t bad[6] = {1, 2, 50, 3, 4, 5};
    ASSERT_SPYRE(spyre_memcpy_htod(ib, 0, bad, sizeof bad));
    ASSERT_SPYRE(spyre_op_embedding(nullptr, &ti, &tw, &to));
    EXPECT_EQ(SPYRE_ERROR_PROGRAM, spyre_device_synchronize(dev)) << spyre_last_error();
    ASSERT_SPYRE(spyre_memcpy_htod(ib, 0, idx.data(), idx.size() * 8));
    ASSERT_SPYRE(spyre_op_embedding(nullptr, &ti, &tw, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    spyre_tensor tf = ti;
    tf.dtype = SPYRE_DTYPE_FLOAT32;
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_embedding(nullptr, &tf, &tw, &to));
    spyre_free(ib);
}

// The row scatter writes the indexed rows and nothing else, and checks its indices on the card.
TEST_F(Ops, ScatterRowsWritesTheIndexedRowsOnly) {
    const int64_t V = 50, D = 64;
    DevArray w(dev, SPYRE_DTYPE_FLOAT32, V * D, 3), r(dev, SPYRE_DTYPE_FLOAT32, 4 * D, 4);
    const std::vector<int64_t> idx = {49, 0, 7, 13};
    spyre_buffer_t ib;
    ASSERT_SPYRE(spyre_malloc(dev, idx.size() * 8, &ib));
    ASSERT_SPYRE(spyre_memcpy_htod(ib, 0, idx.data(), idx.size() * 8));
    spyre_tensor ti{};
    ti.buffer = ib, ti.dtype = SPYRE_DTYPE_INT64, ti.ndim = 1, ti.shape[0] = 4, ti.strides[0] = 1;
    const spyre_tensor tw = view(w, {V, D}, {D, 1}), tr = view(r, {4, D}, {D, 1});
    std::vector<uint8_t> want = w.host;
    for (size_t i = 0; i < idx.size(); ++i)
        std::memcpy(&want[idx[i] * D * 4], &r.host[i * D * 4], D * 4);
    ASSERT_SPYRE(spyre_op_scatter_rows(nullptr, &ti, &tr, &tw));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    w.fetch();
    EXPECT_EQ(want, w.host);
    const int64_t bad[4] = {1, -1, 2, 3};
    ASSERT_SPYRE(spyre_memcpy_htod(ib, 0, bad, sizeof bad));
    ASSERT_SPYRE(spyre_op_scatter_rows(nullptr, &ti, &tr, &tw));
    EXPECT_EQ(SPYRE_ERROR_PROGRAM, spyre_device_synchronize(dev)) << spyre_last_error();
    spyre_free(ib);
}

// Elementwise ops with torch-style broadcasting through the C API.
TEST_F(Ops, ElementwiseBroadcasts) {
    const spyre_dtype h = SPYRE_DTYPE_FLOAT16, f = SPYRE_DTYPE_FLOAT32;
    // silu over an odd number of elements
    {
        DevArray x(dev, h, 1001, 1), y(dev, h, 1001, 2);
        const spyre_tensor tx = view(x, {7, 11, 13}, {143, 13, 1}),
                           ty = view(y, {7, 11, 13}, {143, 13, 1});
        ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_SILU, &tx, &ty));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        y.fetch();
        for (int i = 0; i < 1001; ++i)
            ASSERT_NEAR(y.at(i), act_ref(SPYRE_ACTIVATION_SILU, x.at(i)), 2e-3) << i;
    }
    // [3, 5, 7] (fp16) + 0.5 * [7] (fp32) -> fp32: a ROW broadcast with mixed types
    {
        DevArray a(dev, h, 105, 3), b(dev, f, 7, 4), o(dev, f, 105, 5);
        const spyre_tensor ta = view(a, {3, 5, 7}, {35, 7, 1}), tb = view(b, {7}, {1});
        const spyre_tensor to = view(o, {3, 5, 7}, {35, 7, 1});
        ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_ADD, &ta, &tb, 0, 0.5, &to));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        for (int i = 0; i < 105; ++i) ASSERT_NEAR(o.at(i), a.at(i) + 0.5 * b.at(i % 7), 1e-6) << i;
    }
    // [6, 9] * [6, 1]: COL; [6, 9] > scalar 0.25 -> fp16 mask; where(mask, x, -inf)
    {
        DevArray a(dev, h, 54, 6), c(dev, h, 6, 7), o(dev, h, 54, 8), m(dev, h, 54, 9);
        const spyre_tensor ta = view(a, {6, 9}, {9, 1}), tc = view(c, {6, 1}, {1, 1});
        const spyre_tensor to = view(o, {6, 9}, {9, 1}), tm = view(m, {6, 9}, {9, 1});
        ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_MUL, &ta, &tc, 0, 1, &to));
        ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_GT, &ta, nullptr, 0.25, 1, &tm));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        m.fetch();
        for (int i = 0; i < 54; ++i) {
            ASSERT_NEAR(o.at(i), double(a.at(i)) * c.at(i / 9), 2e-3) << i;
            ASSERT_EQ(m.at(i), a.at(i) > 0.25f ? 1.0f : 0.0f) << i;
        }
        ASSERT_SPYRE(spyre_op_where(nullptr, &tm, &ta, 0, nullptr, -INFINITY, &to));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        for (int i = 0; i < 54; ++i) ASSERT_EQ(o.at(i), a.at(i) > 0.25f ? a.at(i) : -INFINITY) << i;
    }
    // a broadcast that does not collapse: [4, 1, 3] + [1, 5, 1]
    DevArray a(dev, h, 12, 1), b(dev, h, 5, 2), o(dev, h, 60, 3);
    const spyre_tensor ta = view(a, {4, 1, 3}, {3, 3, 1}), tb = view(b, {1, 5, 1}, {5, 1, 1});
    const spyre_tensor to = view(o, {4, 5, 3}, {15, 3, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_binary(nullptr, SPYRE_BINARY_ADD, &ta, &tb, 0, 1, &to));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_unary(nullptr, static_cast<spyre_unary_op>(99), &ta, &ta));
}

// Roundings, sign and the transcendentals added in 0.14 through the C API, every float type, on
// an odd [5, 13] shape, against a double reference rounded to the type (the roundings and sign
// exactly, the rest within an ulp of the type); each op's input range covers its domain's edges.
TEST_F(Ops, UnaryRoundingSignAndTranscendentals) {
    struct Fn {
        spyre_unary_op op;
        double (*ref)(double);
        float lo, hi;
        bool exact;
    };
    const Fn fns[] = {
        {SPYRE_UNARY_FLOOR, [](double x) { return std::floor(x); }, -5, 5, true},
        {SPYRE_UNARY_CEIL, [](double x) { return std::ceil(x); }, -5, 5, true},
        {SPYRE_UNARY_TRUNC, [](double x) { return std::trunc(x); }, -5, 5, true},
        {SPYRE_UNARY_ROUND, [](double x) { return std::nearbyint(x); }, -5, 5, true},
        {SPYRE_UNARY_SIGN, [](double x) { return double((x > 0) - (x < 0)); }, -2, 2, true},
        {SPYRE_UNARY_ERF, [](double x) { return std::erf(x); }, -4, 4, false},
        {SPYRE_UNARY_ERFC, [](double x) { return std::erfc(x); }, -4, 9, false},
        {SPYRE_UNARY_LOG1P, [](double x) { return std::log1p(x); }, -1.5f, 10, false},
        {SPYRE_UNARY_EXPM1, [](double x) { return std::expm1(x); }, -10, 10, false},
        {SPYRE_UNARY_EXP2, [](double x) { return std::exp2(x); }, -20, 20, false},
        {SPYRE_UNARY_LOG2, [](double x) { return std::log2(x); }, -1, 100, false},
        {SPYRE_UNARY_LOG10, [](double x) { return std::log10(x); }, -1, 100, false},
        {SPYRE_UNARY_TAN, [](double x) { return std::tan(x); }, -3, 3, false},
        {SPYRE_UNARY_ASIN, [](double x) { return std::asin(x); }, -1.2f, 1.2f, false},
        {SPYRE_UNARY_ACOS, [](double x) { return std::acos(x); }, -1.2f, 1.2f, false},
        {SPYRE_UNARY_ATAN, [](double x) { return std::atan(x); }, -50, 50, false},
        {SPYRE_UNARY_SINH, [](double x) { return std::sinh(x); }, -10, 10, false},
        {SPYRE_UNARY_COSH, [](double x) { return std::cosh(x); }, -10, 10, false},
        {SPYRE_UNARY_ASINH, [](double x) { return std::asinh(x); }, -50, 50, false},
        {SPYRE_UNARY_ACOSH, [](double x) { return std::acosh(x); }, 0.5f, 50, false},
        {SPYRE_UNARY_ATANH, [](double x) { return std::atanh(x); }, -1.2f, 1.2f, false},
    };
    const int64_t n = 65;
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                              0.5f, -0.5f, 2.5f,     -1.0f,     1.0f};
    for (const Fn& fn : fns)
        for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16}) {
            DevArray x(dev, t, n, 1), y(dev, t, n, 2);
            std::mt19937 rng(uint32_t(fn.op) * 7 + uint32_t(t));
            std::uniform_real_distribution<float> d(fn.lo, fn.hi);
            for (int64_t i = 0; i < n; ++i)
                put(t, x.host, i, i < int64_t(std::size(specials)) ? specials[i] : d(rng));
            ASSERT_SPYRE(spyre_memcpy_htod(x.buf, 0, x.host.data(), x.host.size()));
            const spyre_tensor tx = view(x, {5, 13}, {13, 1}), ty = view(y, {5, 13}, {13, 1});
            ASSERT_SPYRE(spyre_op_unary(nullptr, fn.op, &tx, &ty));
            ASSERT_SPYRE(spyre_device_synchronize(dev));
            y.fetch();
            for (int64_t i = 0; i < n; ++i) {
                const double r = fn.ref(x.at(i));
                std::vector<uint8_t> rb(4);
                put(t, rb, 0, float(r));
                const float want = get(t, rb, 0), got = y.at(i);
                if (std::isnan(want) || std::isinf(want) || fn.exact) {
                    ASSERT_TRUE(std::isnan(want)
                                    ? std::isnan(got)
                                    : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want))
                        << fn.op << " dtype " << t << " x=" << x.at(i) << " got " << got << " want "
                        << want;
                    continue;
                }
                // one ulp of the type at the reference, at least the smallest normal's
                const double ulp = t == SPYRE_DTYPE_FLOAT32   ? 0x1p-23
                                   : t == SPYRE_DTYPE_FLOAT16 ? 0x1p-10
                                                              : 0x1p-7;
                const double floor = t == SPYRE_DTYPE_FLOAT16 ? 0x1p-14 : 0x1p-126;
                ASSERT_NEAR(got, r, ulp * std::max(std::fabs(r), floor))
                    << fn.op << " dtype " << t << " x=" << x.at(i);
            }
        }
    // the float set only: an integer input is refused
    DevArray xi(dev, SPYRE_DTYPE_INT32, 8, 3);
    const spyre_tensor ti = view(xi, {8}, {1});
    EXPECT_NE(SPYRE_SUCCESS, spyre_op_unary(nullptr, SPYRE_UNARY_FLOOR, &ti, &ti));
    DevArray xf(dev, SPYRE_DTYPE_FLOAT32, 8, 4);
    const spyre_tensor tf = view(xf, {8}, {1});
    EXPECT_EQ(
        SPYRE_ERROR_INVALID_ARGUMENT,
        spyre_op_unary(nullptr, static_cast<spyre_unary_op>(SPYRE_UNARY_ATANH + 1), &tf, &tf));
    ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_CAST, &tf, &tf));  // CAST still maps
}

// Clamp with both bounds in one launch: immediate bounds (with a NaN, bounds crossed), and
// tensor bounds that broadcast (a ROW lower bound, a COL upper bound) with a mixed-type output.
TEST_F(Ops, ClampInOnePass) {
    const spyre_dtype h = SPYRE_DTYPE_FLOAT16, f = SPYRE_DTYPE_FLOAT32;
    DevArray x(dev, h, 54, 21), o(dev, h, 54, 22);
    put(h, x.host, 5, NAN);
    ASSERT_SPYRE(spyre_memcpy_htod(x.buf, 0, x.host.data(), x.host.size()));
    const spyre_tensor tx = view(x, {6, 9}, {9, 1}), to = view(o, {6, 9}, {9, 1});
    auto launches = [] {
        spyre_op_info info{};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_op_get_last_info(&info));
        return info.launches;
    };
    for (auto [lo, hi] : {std::pair{-0.25, 0.5}, std::pair{0.5, -0.25}}) {
        ASSERT_SPYRE(spyre_op_clamp(nullptr, &tx, nullptr, lo, nullptr, hi, &to));
        EXPECT_EQ(launches(), 1u);
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        for (int i = 0; i < 54; ++i) {
            if (i == 5) {
                ASSERT_TRUE(std::isnan(o.at(i))) << "NaN must propagate";
                continue;
            }
            ASSERT_EQ(o.at(i), std::min(std::max(x.at(i), float(lo)), float(hi))) << i;
        }
    }
    DevArray lo(dev, f, 9, 23), hi(dev, h, 6, 24), of(dev, f, 54, 25);
    const spyre_tensor tl = view(lo, {9}, {1}), th = view(hi, {6, 1}, {1, 1});
    const spyre_tensor tof = view(of, {6, 9}, {9, 1});
    ASSERT_SPYRE(spyre_op_clamp(nullptr, &tx, &tl, 0, &th, 0, &tof));
    EXPECT_EQ(launches(), 1u);
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    of.fetch();
    for (int i = 0; i < 54; ++i)
        if (i != 5)
            ASSERT_EQ(of.at(i), std::min(std::max(x.at(i), lo.at(i % 9)), hi.at(i / 9))) << i;
    const spyre_tensor bad = view(lo, {9}, {1});  // int bounds are refused, not misread
    spyre_tensor tbad = bad;
    tbad.dtype = SPYRE_DTYPE_INT32;
    tbad.shape[0] = 9;
    EXPECT_NE(SPYRE_SUCCESS, spyre_op_clamp(nullptr, &tx, &tbad, 0, nullptr, 1, &to));
}

// Open driver files of this process (the kernel backend holds one per card it has open).
int open_accel_files() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        std::error_code lec;
        const auto target = std::filesystem::read_symlink(e.path(), lec).string();
        n += target.starts_with("/dev/accel/") ? 1 : 0;
    }
    return n;
}

// The op library keeps a card's programs with that card, not for the life of the process:
// closing every handle of a card releases it (on the kernel backend, its driver file), and the
// next open gets a fresh device on which the same op loads its program again. (A card that was
// unplugged and plugged back is the same case: tests/guest/failure/hotplug.sh.)
TEST_F(Ops, ClosingTheCardReleasesItsOpPrograms) {
    auto relu = [](spyre_device_t d) {
        DevArray x(d, SPYRE_DTYPE_FLOAT16, 300, 11), y(d, SPYRE_DTYPE_FLOAT16, 300, 12);
        const spyre_tensor tx = view(x, {300}, {1}), ty = view(y, {300}, {1});
        ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_RELU, &tx, &ty));
        ASSERT_SPYRE(spyre_device_synchronize(d));
        y.fetch();
        for (int i = 0; i < 300; ++i) ASSERT_EQ(y.at(i), std::max(x.at(i), 0.0f)) << i;
    };
    relu(dev);
    spyre_runtime_stats st{};
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    EXPECT_GE(st.program_cache_misses, 1u);
    ASSERT_SPYRE(spyre_device_close(dev));
    dev = nullptr;
    if (!sim) EXPECT_EQ(open_accel_files(), 0) << "a closed card's driver file is still open";

    ASSERT_SPYRE(spyre_device_open(0, &dev));
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    EXPECT_EQ(st.program_cache_misses, 0u) << "the reopened card is the old device object";
    relu(dev);
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    EXPECT_GE(st.program_cache_misses, 1u);
}

// A scalar is a launch argument of its op's program, not part of it: a scalar that changes every
// call (an optimizer's bias-corrected step size) reuses one plan and one program on the card.
TEST_F(Ops, ScalarsThatChangeEveryCallShareOneProgram) {
    constexpr int kCalls = 1100, kN = 300;
    DevArray x(dev, SPYRE_DTYPE_FLOAT32, kN, 21), y(dev, SPYRE_DTYPE_FLOAT32, kN, 22);
    const spyre_tensor tx = view(x, {kN}, {1}), ty = view(y, {kN}, {1});
    spyre_runtime_stats st0{}, st{};
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st0));
    uint64_t h0 = 0, m0 = 0, h1 = 0, m1 = 0;
    ASSERT_SPYRE(spyre_op_get_cache_stats(&h0, &m0));
    for (int i = 0; i < kCalls; ++i) {
        const double k = 1.0 + i / 4096.0;
        ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_MUL, &tx, nullptr, k, 1.0, &ty));
        if (i % 100 != 0) continue;
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        y.fetch();
        for (int j = 0; j < kN; ++j) ASSERT_EQ(y.at(j), float(x.at(j) * float(k))) << i << " " << j;
    }
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    ASSERT_SPYRE(spyre_op_get_cache_stats(&h1, &m1));
    EXPECT_LE(m1 - m0, 1u) << "plans made";
    EXPECT_GE(h1 - h0, uint64_t(kCalls - 1)) << "plans reused";
    EXPECT_EQ(st.pinned_programs - st0.pinned_programs, 1u);
    EXPECT_EQ(st.pinned_program_evictions, st0.pinned_program_evictions);
}

// Ops that do need a program each (here 1100 distinct shapes) stay within the card's bound: it
// keeps at most 1024 programs (the least recently launched go first), a program unloaded and
// launched again is loaded again and computes the same, and every call is right on the way.
TEST_F(Ops, DistinctShapesKeepTheCardsProgramsBounded) {
    constexpr int kCalls = 1100, kMax = kCalls;
    DevArray x(dev, SPYRE_DTYPE_FLOAT32, kMax, 23), y(dev, SPYRE_DTYPE_FLOAT32, kMax, 24);
    spyre_runtime_stats st0{}, st{};
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st0));
    auto relu = [&](int n, bool check) {
        const spyre_tensor tx = view(x, {n}, {1}), ty = view(y, {n}, {1});
        ASSERT_SPYRE(spyre_op_unary(nullptr, SPYRE_UNARY_RELU, &tx, &ty));
        if (!check) return;
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        y.fetch();
        for (int j = 0; j < n; ++j) ASSERT_EQ(y.at(j), std::max(x.at(j), 0.0f)) << n << " " << j;
    };
    for (int i = 1; i <= kCalls; ++i) {
        relu(i, i % 100 == 1);
        if (HasFatalFailure()) return;
    }
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    EXPECT_EQ(st.pinned_programs, 1024u);
    EXPECT_GE(st.pinned_program_evictions - st0.pinned_program_evictions, uint64_t(kCalls - 1024));
    // the first program was unloaded: launched again, it is loaded again and right
    const uint64_t misses = st.program_cache_misses;
    relu(1, true);
    ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &st));
    EXPECT_EQ(st.program_cache_misses, misses + 1);
    EXPECT_EQ(st.pinned_programs, 1024u);
}

// Strided views made dense through the C API: a transpose, a permute of a [B, L, H, D] buffer,
// a slice with a step and an expanded dim, compared byte for byte.
TEST_F(Ops, CopyMakesStridedViewsDense) {
    DevArray a(dev, SPYRE_DTYPE_FLOAT16, 2 * 5 * 3 * 64, 1),
        o(dev, SPYRE_DTYPE_FLOAT16, 2 * 5 * 3 * 64, 2);
    struct V {
        std::vector<int64_t> shape, strides;
        uint64_t offset;
    } views[] = {
        {{64, 30}, {1, 64}, 0},                 // transpose of [30, 64]
        {{2, 3, 5, 64}, {960, 64, 192, 1}, 0},  // [B, L, H, D] -> [B, H, L, D]
        {{2, 5, 32}, {960, 192, 2}, 1},         // a slice with step 2, odd offset
        {{4, 3, 64}, {0, 64, 1}, 128},          // expanded leading dim
    };
    for (const V& v : views) {
        const spyre_tensor src = view(a, v.shape, v.strides, v.offset);
        std::vector<int64_t> dense(v.shape.size());
        int64_t n = 1;
        for (size_t d = v.shape.size(); d-- > 0;) dense[d] = n, n *= v.shape[d];
        const spyre_tensor dst = view(o, v.shape, dense);
        ASSERT_SPYRE(spyre_op_copy(nullptr, &src, &dst));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        std::vector<int64_t> idx(v.shape.size(), 0);
        for (int64_t i = 0; i < n; ++i) {
            int64_t off = int64_t(v.offset), rem = i;
            for (size_t d = v.shape.size(); d-- > 0;)
                off += (rem % v.shape[d]) * v.strides[d], rem /= v.shape[d];
            ASSERT_EQ(0, std::memcmp(&o.host[2 * i], &a.host[2 * off], 2)) << i;
        }
    }
}

// Row-wise ops through the C API against double references: softmax and log_softmax, layer
// norm with fp32 affine parameters, RMS norm, sum and argmax, on odd shapes.
TEST_F(Ops, RowwiseOps) {
    const int64_t R = 5, C = 100;
    const spyre_dtype h = SPYRE_DTYPE_FLOAT16;
    DevArray x(dev, h, R * C, 1), o(dev, h, R * C, 2), w(dev, SPYRE_DTYPE_FLOAT32, C, 3);
    DevArray b(dev, SPYRE_DTYPE_FLOAT32, C, 4), r(dev, h, R, 5);
    const spyre_tensor tx = view(x, {R, C}, {C, 1}), to = view(o, {R, C}, {C, 1});
    const spyre_tensor tw = view(w, {C}, {1}), tb = view(b, {C}, {1}), tr = view(r, {R}, {1});
    auto row = [&](int64_t i) {
        std::vector<double> v(C);
        for (int64_t j = 0; j < C; ++j) v[j] = x.at(i * C + j);
        return v;
    };
    for (int log : {0, 1}) {
        ASSERT_SPYRE(spyre_op_softmax(nullptr, &tx, log, &to));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        o.fetch();
        for (int64_t i = 0; i < R; ++i) {
            const auto v = row(i);
            double mx = -INFINITY, sum = 0;
            for (double e : v) mx = std::max(mx, e);
            for (double e : v) sum += std::exp(e - mx);
            for (int64_t j = 0; j < C; ++j) {
                const double want = log ? v[j] - mx - std::log(sum) : std::exp(v[j] - mx) / sum;
                ASSERT_NEAR(o.at(i * C + j), want, 2e-3 * (1 + std::fabs(want)))
                    << log << " " << i << " " << j;
            }
        }
    }
    ASSERT_SPYRE(spyre_op_layer_norm(nullptr, &tx, &tw, &tb, 1e-5f, &to));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    o.fetch();
    for (int64_t i = 0; i < R; ++i) {
        const auto v = row(i);
        double m = 0, var = 0;
        for (double e : v) m += e / C;
        for (double e : v) var += (e - m) * (e - m) / C;
        for (int64_t j = 0; j < C; ++j) {
            const double want = (v[j] - m) / std::sqrt(var + 1e-5) * w.at(j) + b.at(j);
            ASSERT_NEAR(o.at(i * C + j), want, 4e-3 * (1 + std::fabs(want))) << i << " " << j;
        }
    }
    ASSERT_SPYRE(spyre_op_rms_norm(nullptr, &tx, &tw, 1e-6f, &to));
    ASSERT_SPYRE(spyre_op_reduce(nullptr, SPYRE_REDUCE_SUM, &tx, &tr));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    o.fetch();
    r.fetch();
    for (int64_t i = 0; i < R; ++i) {
        const auto v = row(i);
        double ms = 0, sum = 0;
        for (double e : v) ms += e * e / C, sum += e;
        for (int64_t j = 0; j < C; ++j) {
            const double want = v[j] / std::sqrt(ms + 1e-6) * w.at(j);
            ASSERT_NEAR(o.at(i * C + j), want, 4e-3 * (1 + std::fabs(want))) << i << " " << j;
        }
        ASSERT_NEAR(r.at(i), sum, 2e-3 * (1 + std::fabs(sum))) << i;
    }
    spyre_buffer_t ab;
    ASSERT_SPYRE(spyre_malloc(dev, R * 4, &ab));
    spyre_tensor ta{};
    ta.buffer = ab, ta.dtype = SPYRE_DTYPE_INT32, ta.ndim = 1, ta.shape[0] = R, ta.strides[0] = 1;
    ASSERT_SPYRE(spyre_op_reduce(nullptr, SPYRE_REDUCE_ARGMAX, &tx, &ta));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    std::vector<int32_t> am(R);
    ASSERT_SPYRE(spyre_memcpy_dtoh(am.data(), ab, 0, R * 4));
    for (int64_t i = 0; i < R; ++i) {
        const auto v = row(i);
        EXPECT_EQ(am[i], std::max_element(v.begin(), v.end()) - v.begin()) << i;
    }
    spyre_free(ab);
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_reduce(nullptr, SPYRE_REDUCE_ARGMAX, &tx, &tr));
}

// Rows longer than the row program takes (2^23 elements) reduce in two stages (equal blocks,
// then the blocks' results): sum, mean, max, min of fp32 rows against a double reference, and
// of one fp16 row; argmax and a row whose length has no fitting divisor are NOT_SUPPORTED.
TEST_F(Ops, ReductionsOfRowsLongerThan2To23) {
    const int64_t R = 2, C = (int64_t{1} << 23) + (int64_t{1} << 20);
    DevArray x(dev, SPYRE_DTYPE_FLOAT32, R * C, 7);
    DevArray r(dev, SPYRE_DTYPE_FLOAT32, 32, 8);
    const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R}, {1});
    std::vector<double> sum(R, 0), mx(R, -INFINITY), mn(R, INFINITY);
    for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
            const double v = x.at(i * C + j);
            sum[i] += v, mx[i] = std::max(mx[i], v), mn[i] = std::min(mn[i], v);
        }
    for (spyre_reduce_op op :
         {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX, SPYRE_REDUCE_MIN}) {
        ASSERT_SPYRE(spyre_op_reduce(nullptr, op, &tx, &tr));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_EQ(info.launches, 2u) << op;
        EXPECT_NE(std::string(info.plan).find("blocks of"), std::string::npos) << info.plan;
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        r.fetch();
        for (int64_t i = 0; i < R; ++i) {
            const double want = op == SPYRE_REDUCE_SUM    ? sum[i]
                                : op == SPYRE_REDUCE_MEAN ? sum[i] / C
                                : op == SPYRE_REDUCE_MAX  ? mx[i]
                                                          : mn[i];
            // the sum of 9.4M values in [-1, 1] is ~1e3: a few fp32 roundings of the partials
            EXPECT_NEAR(r.at(i), want,
                        1e-5 * (1 + std::fabs(want)) + (op == SPYRE_REDUCE_SUM) * 1e-3)
                << op << " row " << i;
        }
    }
    DevArray h(dev, SPYRE_DTYPE_FLOAT16, C, 9), hr(dev, SPYRE_DTYPE_FLOAT16, 64, 10);
    const spyre_tensor th = view(h, {1, C}, {C, 1}), thr = view(hr, {1}, {1});
    double hs = 0;
    for (int64_t j = 0; j < C; ++j) hs += h.at(j);
    ASSERT_SPYRE(spyre_op_reduce(nullptr, SPYRE_REDUCE_SUM, &th, &thr));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    hr.fetch();
    EXPECT_NEAR(hr.at(0), hs, 2e-3 * (1 + std::fabs(hs)));  // partials rounded to fp16 too
    spyre_buffer_t ab;
    ASSERT_SPYRE(spyre_malloc(dev, 128, &ab));
    spyre_tensor ta{};
    ta.buffer = ab, ta.dtype = SPYRE_DTYPE_INT32, ta.ndim = 1, ta.shape[0] = R, ta.strides[0] = 1;
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_reduce(nullptr, SPYRE_REDUCE_ARGMAX, &tx, &ta));
    EXPECT_NE(std::string(spyre_last_error()).find("2^23"), std::string::npos)
        << spyre_last_error();
    spyre_free(ab);
    const int64_t prime = 8388617;  // no divisor splits it into rows of 32 .. 2^23 elements
    const spyre_tensor tp = view(h, {1, prime}, {prime, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_reduce(nullptr, SPYRE_REDUCE_SUM, &tp, &thr));
    EXPECT_NE(std::string(spyre_last_error()).find("no divisor"), std::string::npos)
        << spyre_last_error();
}

TEST_F(Ops, ArgumentErrorsSayWhatIsWrong) {
    DevArray a(dev, SPYRE_DTYPE_FLOAT16, 64 * 64, 1), b(dev, SPYRE_DTYPE_FLOAT16, 64 * 64, 2);
    DevArray f(dev, SPYRE_DTYPE_FLOAT32, 64 * 64, 3);
    const spyre_tensor ta = view(a, {64, 64}, {64, 1}), tb = view(b, {64, 64}, {64, 1});
    auto expect = [](spyre_status want, spyre_status got, const char* needle) {
        EXPECT_EQ(want, got);
        EXPECT_NE(std::string(spyre_last_error()).find(needle), std::string::npos)
            << spyre_last_error();
    };
    const spyre_tensor wrong_k = view(b, {32, 64}, {64, 1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &ta, &wrong_k, &tb),
           "has 64 columns but `b` has 32 rows");
    const spyre_tensor fb = view(f, {64, 64}, {64, 1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &ta, &fb, &tb),
           "`a` is float16 but `b` is float32");
    const spyre_tensor too_far = view(a, {64, 65}, {65, 1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &too_far, &tb, &tb),
           "8320 of a 8192-byte buffer");
    spyre_tensor bad_dtype = ta;
    bad_dtype.dtype = 9;
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &bad_dtype, &tb, &tb),
           "unknown dtype 9");
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, nullptr, &tb, &tb),
           "tensor `a` is NULL");
    const spyre_tensor wrong_out = view(b, {64, 32}, {64, 1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &ta, &tb, &wrong_out),
           "output `out` is 64x32, expected 64x64");
    const spyre_tensor w3 = view(b, {2, 32, 64}, {2048, 64, 1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT,
           spyre_op_linear(nullptr, &ta, &w3, nullptr, SPYRE_ACTIVATION_NONE, &tb),
           "`weight` must be 2-D");
    const spyre_tensor bias = view(f, {63}, {1});
    expect(SPYRE_ERROR_INVALID_ARGUMENT,
           spyre_op_linear(nullptr, &ta, &tb, &bias, SPYRE_ACTIVATION_NONE, &tb),
           "bias must have shape [64]");
    expect(SPYRE_ERROR_INVALID_ARGUMENT,
           spyre_op_linear(nullptr, &ta, &tb, nullptr, static_cast<spyre_activation>(42), &tb),
           "unknown activation 42");
    spyre_buffer_t freed;
    ASSERT_SPYRE(spyre_malloc(dev, 8192, &freed));
    spyre_tensor stale = ta;
    stale.buffer = freed;
    ASSERT_SPYRE(spyre_free(freed));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_matmul(nullptr, &stale, &tb, &tb));
    // a matrix with no unit stride at all cannot be padded by row copies
    const spyre_tensor strided = view(a, {8, 8}, {2, 16});
    const spyre_tensor small_b = view(b, {8, 64}, {64, 1});
    const spyre_tensor small_c = view(b, {8, 64}, {64, 1});
    expect(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_matmul(nullptr, &strided, &small_b, &small_c),
           "non-unit element strides");
}

}  // namespace
