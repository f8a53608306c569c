// SPDX-License-Identifier: MIT
// spyre_op_random: the program against the scalar generator (spyre/philox.hpp, pinned by the
// engine's known-answer tests) on 1, 3 and 32 cores and several chunk sizes (identical bits
// whatever the split), odd sizes and the bytes after the output untouched; then the C API on
// the simulator (or spyre.ko, SPYRE_OPS_TEST_BACKEND=kernel): prefixes of different sizes agree,
// moments, Bernoulli with scalar and tensor probabilities, its argument errors, and a graph
// that replays its random launches with new streams (spyre_graph_launch_random).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "launch_util.hpp"
#include "ops/pricing.hpp"
#include "ops/random_program.hpp"
#include "ops_api_util.hpp"
#include "ops_test_util.hpp"
#include "spyre/ops.h"
#include "spyre/philox.hpp"
#include "spyre/spyre.h"

namespace spyre::ops {
namespace {

using isa::DType;
using namespace test;

constexpr uint8_t kSentinel = 0xA5;
constexpr uint64_t kSeed = 0x5eed5eed12345678ull, kOffset = 42;

// Expected encoded element k of a RandShape's output.
void expect_elem(const RandShape& s, uint64_t k, const std::vector<float>& p, uint8_t* out) {
    const rng::Block b = rng::stream_block(kSeed, kOffset, k);
    switch (s.dist) {
        case RandDist::BITS:
            std::memcpy(out, &b[k & 3], 4);
            return;
        case RandDist::BERNOULLI: {
            const float u = rng::uniform(b[k & 3], 24);
            store_elem(s.out, u < (s.p_tensor ? p[k] : s.p) ? 1.0f : 0.0f, out);
            return;
        }
        default:
            store_elem(
                s.out,
                rng::value(s.dist == RandDist::UNIFORM ? isa::Rng::UNIFORM : isa::Rng::NORMAL,
                           s.out, b, k, s.scale, s.shift),
                out);
    }
}

TEST(RandomProgram, SameBitsOnAnySplitAndMatchesTheGenerator) {
    const Pricer pricer(default_engine_config());
    struct Case {
        RandDist dist;
        DType out;
        float scale, shift, p;
        bool p_tensor;
    };
    const Case cases[] = {
        {RandDist::UNIFORM, DType::F32, 1, 0, 0, false},
        {RandDist::UNIFORM, DType::BF16, 2, -1, 0, false},
        {RandDist::NORMAL, DType::F16, 1, 0, 0, false},
        {RandDist::NORMAL, DType::F32, 0.25f, 10, 0, false},
        {RandDist::BITS, DType::I32, 1, 0, 0, false},
        {RandDist::BERNOULLI, DType::I8, 1, 0, 0.3f, false},
        {RandDist::BERNOULLI, DType::F16, 1, 0, 0, true},
    };
    for (const Case& c : cases) {
        for (uint64_t n : {1ull, 63ull, 65ull, 1000ull, 40961ull}) {
            RandShape s;
            s.dist = c.dist, s.n = n, s.out = c.out, s.scale = c.scale, s.shift = c.shift;
            s.p = c.p, s.p_tensor = c.p_tensor, s.p_t = DType::F32;
            const uint64_t es = isa::dtype_size(c.out), out_bytes = up128(n * es) + 256;
            // probabilities in [0, 1] at out_bytes (fp32), a ramp with exact 0 and 1
            std::vector<float> p(n);
            for (uint64_t k = 0; k < n; ++k) p[k] = float(k % 11) / 10.0f;
            std::vector<uint8_t> want(out_bytes, kSentinel);
            for (uint64_t k = 0; k < n; ++k) expect_elem(s, k, p, &want[k * es]);
            const RandPlan planned = plan_random(pricer, s, 32);
            EXPECT_GT(planned.cycles, 0u);
            for (uint32_t cores : {1u, 3u, 32u}) {
                for (uint64_t chunk : {128ull, 640ull, 16384ull}) {
                    RandPlan rp;
                    rp.cores = cores, rp.chunk = chunk;
                    std::vector<uint8_t> mem(out_bytes + up128(n * 4), kSentinel);
                    std::memcpy(&mem[out_bytes], p.data(), n * 4);
                    const auto r =
                        run_image(build_random(s, rp), cores, {0, kSeed, kOffset, out_bytes}, mem);
                    ASSERT_EQ(r.error, 0) << r.message;
                    for (uint64_t i = 0; i < out_bytes; ++i)
                        ASSERT_EQ(mem[i], want[i])
                            << "dist " << int(c.dist) << " " << dtype_name(c.out) << " n " << n
                            << " cores " << cores << " chunk " << chunk << " byte " << i;
                }
            }
        }
    }
}

// ---- the C API on the simulator ----

// On the simulator, or through spyre.ko with SPYRE_OPS_TEST_BACKEND=kernel (the guest suite).
class RandomApi : public ops_api_test::Ops {
  protected:
    // Runs spyre_op_random into a fresh buffer of n elements and returns its bytes.
    std::vector<uint8_t> gen(spyre_random_dist d, spyre_dtype t, int64_t n, uint64_t seed,
                             uint64_t off, double a, double b, const spyre_tensor* p = nullptr) {
        const uint64_t es = t == SPYRE_DTYPE_FLOAT32 || t == SPYRE_DTYPE_INT32 ? 4
                            : t == SPYRE_DTYPE_INT8                            ? 1
                                                                               : 2;
        std::vector<uint8_t> host(std::max<uint64_t>(n * es, 1));
        spyre_buffer_t buf = nullptr;
        EXPECT_EQ(spyre_malloc(dev, host.size(), &buf), SPYRE_SUCCESS);
        spyre_tensor o{};
        EXPECT_EQ(spyre_tensor_init(&o, buf, 0, t, 1, &n), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_op_random(nullptr, d, &o, seed, off, a, b, p), SPYRE_SUCCESS)
            << spyre_last_error();
        EXPECT_EQ(spyre_memcpy_dtoh(host.data(), buf, 0, host.size()), SPYRE_SUCCESS);
        spyre_free(buf);
        return host;
    }
};

TEST_F(RandomApi, PrefixesAgreeAndSeedsDiffer) {
    // 1000 elements run on 16 cores, 300007 on 32 in other chunks: same first 1000 values
    const auto small = gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, 1000, 7, 3, 0, 1);
    const auto big = gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, 300007, 7, 3, 0, 1);
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_EQ(info.cores, 32u);
    ASSERT_EQ(std::memcmp(small.data(), big.data(), small.size()), 0);
    const auto again = gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, 1000, 7, 3, 0, 1);
    EXPECT_EQ(again, small);
    const auto other_seed = gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, 1000, 8, 3, 0, 1);
    const auto other_off = gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, 1000, 7, 4, 0, 1);
    EXPECT_NE(other_seed, small);
    EXPECT_NE(other_off, small);
    // the moments of 300007 normals with mean 0, std 1
    double s = 0, s2 = 0;
    for (size_t i = 0; i < 300007; ++i) {
        float x;
        std::memcpy(&x, &big[4 * i], 4);
        s += x, s2 += double(x) * x;
    }
    EXPECT_NEAR(s / 300007, 0.0, 0.01);
    EXPECT_NEAR(s2 / 300007, 1.0, 0.01);
}

TEST_F(RandomApi, UniformBoundsAndBernoulliRate) {
    const int64_t n = 100003;
    const auto u = gen(SPYRE_RANDOM_UNIFORM, SPYRE_DTYPE_FLOAT16, n, 1, 0, -3, 5);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, &u[2 * i], 2);
        const float x = num::f16_to_f32(h);
        ASSERT_GE(x, -3.0f);
        ASSERT_LE(x, 5.0f);
        s += x;
    }
    EXPECT_NEAR(s / n, 1.0, 0.03);
    const auto m = gen(SPYRE_RANDOM_BERNOULLI, SPYRE_DTYPE_INT8, n, 1, 0, 0.2, 0);
    int64_t ones = 0;
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(m[i] == 0 || m[i] == 1);
        ones += m[i];
    }
    // binomial(n, 0.2): std 126; 5 sigma
    EXPECT_NEAR(double(ones), 0.2 * n, 640);
    // tensor probabilities: 0 gives 0, 1 gives 1, 0.5 half
    std::vector<float> p(n);
    for (int64_t i = 0; i < n; ++i) p[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1.0f : 0.5f;
    spyre_buffer_t pb = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, n * 4, &pb));
    ASSERT_SPYRE(spyre_memcpy_htod(pb, 0, p.data(), n * 4));
    spyre_tensor pt{};
    ASSERT_SPYRE(spyre_tensor_init(&pt, pb, 0, SPYRE_DTYPE_FLOAT32, 1, &n));
    const auto mt = gen(SPYRE_RANDOM_BERNOULLI, SPYRE_DTYPE_FLOAT32, n, 9, 1, 0, 0, &pt);
    int64_t half = 0;
    for (int64_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, &mt[4 * i], 4);
        if (i % 3 == 0) ASSERT_EQ(x, 0.0f) << i;
        if (i % 3 == 1) ASSERT_EQ(x, 1.0f) << i;
        if (i % 3 == 2) half += x == 1.0f;
    }
    EXPECT_NEAR(double(half), n / 6.0, 5 * std::sqrt(n / 3.0 * 0.25));
    spyre_free(pb);
}

TEST_F(RandomApi, ArgumentErrorsAndEmpty) {
    spyre_buffer_t buf = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, 4096, &buf));
    int64_t n = 64;
    spyre_tensor f32{}, i32{}, i64{};
    ASSERT_SPYRE(spyre_tensor_init(&f32, buf, 0, SPYRE_DTYPE_FLOAT32, 1, &n));
    ASSERT_SPYRE(spyre_tensor_init(&i32, buf, 0, SPYRE_DTYPE_INT32, 1, &n));
    ASSERT_SPYRE(spyre_tensor_init(&i64, buf, 0, SPYRE_DTYPE_INT64, 1, &n));
    auto st = [&](spyre_random_dist d, const spyre_tensor* o, double a = 0, double b = 1,
                  const spyre_tensor* p = nullptr) {
        return spyre_op_random(nullptr, d, o, 1, 0, a, b, p);
    };
    EXPECT_EQ(st(SPYRE_RANDOM_UNIFORM, &i32), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(SPYRE_RANDOM_NORMAL, &i64), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(SPYRE_RANDOM_BITS, &f32), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(SPYRE_RANDOM_BERNOULLI, &f32, 1.5), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(SPYRE_RANDOM_UNIFORM, &f32, 0, INFINITY), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(static_cast<spyre_random_dist>(9), &f32), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(st(SPYRE_RANDOM_UNIFORM, &f32, 0, 1, &f32), SPYRE_ERROR_INVALID_ARGUMENT);
    // a strided or unaligned output is not supported (the caller generates densely and copies)
    spyre_tensor strided = f32;
    strided.shape[0] = 32, strided.strides[0] = 2;
    EXPECT_EQ(st(SPYRE_RANDOM_UNIFORM, &strided), SPYRE_ERROR_NOT_SUPPORTED);
    spyre_tensor unaligned = f32;
    unaligned.offset = 4, unaligned.shape[0] = 8;
    EXPECT_EQ(st(SPYRE_RANDOM_UNIFORM, &unaligned), SPYRE_ERROR_NOT_SUPPORTED);
    // empty: nothing written
    std::vector<uint8_t> before(256, 0x5a), after(256);
    ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, before.data(), 256));
    spyre_tensor empty = f32;
    empty.shape[0] = 0;
    ASSERT_SPYRE(st(SPYRE_RANDOM_UNIFORM, &empty));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    ASSERT_SPYRE(spyre_memcpy_dtoh(after.data(), buf, 0, 256));
    EXPECT_EQ(after, before);
    spyre_free(buf);
}

// A captured graph replays its random launches with the streams they were captured with
// (spyre_graph_launch), or, captured with (s, o), from (seed, offset + o - o_min)
// (spyre_graph_launch_random): the values of the same launches queued alone with those
// streams; two launches that shared a stream still share one. A replay queued behind another
// keeps its own streams.
TEST_F(RandomApi, AGraphReplaysItsRandomLaunchesWithNewStreams) {
    int64_t n = 3000;
    spyre_buffer_t u = nullptr, g = nullptr, saved = nullptr, u2 = nullptr;
    for (auto* b : {&u, &g, &saved, &u2}) ASSERT_SPYRE(spyre_malloc(dev, n * 4, b));
    spyre_tensor tu{}, tg{}, tu2{};
    ASSERT_SPYRE(spyre_tensor_init(&tu, u, 0, SPYRE_DTYPE_FLOAT32, 1, &n));
    ASSERT_SPYRE(spyre_tensor_init(&tg, g, 0, SPYRE_DTYPE_FLOAT32, 1, &n));
    ASSERT_SPYRE(spyre_tensor_init(&tu2, u2, 0, SPYRE_DTYPE_FLOAT32, 1, &n));
    spyre_stream_t s = nullptr;
    ASSERT_SPYRE(spyre_stream_create(dev, 0, &s));
    ASSERT_SPYRE(spyre_stream_begin_capture(s));
    ASSERT_SPYRE(spyre_op_random(s, SPYRE_RANDOM_UNIFORM, &tu, 7, 3, -1, 1, nullptr));
    ASSERT_SPYRE(spyre_memcpy_dtod_async(saved, 0, u, 0, n * 4, s));  // not a random launch
    ASSERT_SPYRE(spyre_op_random(s, SPYRE_RANDOM_NORMAL, &tg, 7, 4, 0, 1, nullptr));
    ASSERT_SPYRE(spyre_op_random(s, SPYRE_RANDOM_UNIFORM, &tu2, 7, 3, -1, 1, nullptr));
    spyre_graph_t graph = nullptr;
    ASSERT_SPYRE(spyre_stream_end_capture(s, &graph));
    spyre_graph_info info{};
    ASSERT_SPYRE(spyre_graph_get_info(graph, &info));
    EXPECT_EQ(info.launches, 3u);
    EXPECT_EQ(info.random_launches, 3u);
    EXPECT_EQ(info.random_offsets, 2u);  // offsets 3 and 4
    auto bytes = [&](spyre_buffer_t b) {
        std::vector<uint8_t> h(n * 4);
        EXPECT_EQ(spyre_memcpy_dtoh(h.data(), b, 0, h.size()), SPYRE_SUCCESS);
        return h;
    };
    auto uniform = [&](uint64_t seed, uint64_t off) {
        return gen(SPYRE_RANDOM_UNIFORM, SPYRE_DTYPE_FLOAT32, n, seed, off, -1, 1);
    };
    auto normal = [&](uint64_t seed, uint64_t off) {
        return gen(SPYRE_RANDOM_NORMAL, SPYRE_DTYPE_FLOAT32, n, seed, off, 0, 1);
    };
    ASSERT_SPYRE(spyre_graph_launch(graph, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(bytes(u), uniform(7, 3));
    EXPECT_EQ(bytes(g), normal(7, 4));
    // two replays queued back to back, the first's uniform values copied away between them
    ASSERT_SPYRE(spyre_graph_launch_random(graph, s, 9, 20));
    spyre_buffer_t first = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, n * 4, &first));
    ASSERT_SPYRE(spyre_memcpy_dtod_async(first, 0, u, 0, n * 4, s));
    ASSERT_SPYRE(spyre_graph_launch_random(graph, s, 9, 40));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(bytes(first), uniform(9, 20));
    EXPECT_EQ(bytes(u), uniform(9, 40));
    EXPECT_EQ(bytes(saved), uniform(9, 40));
    EXPECT_EQ(bytes(g), normal(9, 41));
    EXPECT_EQ(bytes(u2), uniform(9, 40));  // shared (7, 3) when captured
    EXPECT_NE(uniform(9, 40), uniform(7, 3));
    // the graph itself is unchanged
    ASSERT_SPYRE(spyre_graph_launch(graph, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(bytes(u), uniform(7, 3));
    EXPECT_EQ(spyre_graph_launch_random(graph, s, 1, UINT64_MAX), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_graph_launch_random(nullptr, s, 1, 0), SPYRE_ERROR_INVALID_ARGUMENT);
    ASSERT_SPYRE(spyre_graph_destroy(graph));
    ASSERT_SPYRE(spyre_stream_destroy(s));
    for (auto* b : {u, g, saved, first, u2}) spyre_free(b);
}

// SPYRE_LAUNCH_RANDOM_STREAM names two arguments; other flag bits and a random_arg without
// the flag are refused.
TEST_F(RandomApi, RandomStreamLaunchFlagIsChecked) {
    const auto img = spyre_test::build_add_program(64);
    spyre_program_t prog = nullptr;
    ASSERT_SPYRE(spyre_program_load(dev, img.data(), img.size(), &prog));
    spyre_launch_params p{};
    p.num_cores = 1;
    p.num_args = 3;
    auto status = [&](uint32_t flags, uint64_t random_arg) {
        p.flags = flags, p.random_arg = random_arg;
        return spyre_launch_async(prog, &p, nullptr);
    };
    EXPECT_EQ(status(1u << 5, 0), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status(0, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status(SPYRE_LAUNCH_RANDOM_STREAM, 2), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("random_arg 2"), std::string::npos)
        << spyre_last_error();
    spyre_program_free(prog);
}

}  // namespace
}  // namespace spyre::ops
