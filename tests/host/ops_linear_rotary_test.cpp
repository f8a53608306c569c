// SPDX-License-Identifier: MIT
// spyre_op_linear_rotary through the C API: rotary(x @ weight^T) per head against a double
// host reference (fp32, fp16, bf16; odd row counts; several sequences; shared and per-sequence
// cos/sin; a q and a GQA-sized k projection of one x), one launch, and the shapes it refuses.
#include <cmath>
#include <string>

#include "ops_api_util.hpp"

namespace spyre::ops_api_test {
namespace {

enum class Tables { SHARED, PER_SEQUENCE, PER_SEQUENCE_HEAD1 };  // [L,D], [B,L,D], [B,1,L,D]

struct Case {
    int64_t B, L, in, H, D;
    spyre_dtype t, ct;
    Tables tables;
};

// Runs one case: out [B, L, H*D] against rotary(x w^T) computed in double.
void check(spyre_device_t dev, const Case& c, uint32_t seed) {
    const int64_t M = c.B * c.L, N = c.H * c.D, TB = c.tables == Tables::SHARED ? 1 : c.B;
    DevArray x(dev, c.t, M * c.in, seed), w(dev, c.t, N * c.in, seed + 1);
    DevArray cs(dev, c.ct, TB * c.L * c.D, seed + 2), sn(dev, c.ct, TB * c.L * c.D, seed + 3);
    DevArray y(dev, c.t, M * N, seed + 4);
    const spyre_tensor tx = view(x, {c.B, c.L, c.in}, {c.L * c.in, c.in, 1});
    const spyre_tensor tw = view(w, {N, c.in}, {c.in, 1});
    const spyre_tensor ty = view(y, {c.B, c.L, N}, {c.L * N, N, 1});
    auto table = [&](const DevArray& a) {
        switch (c.tables) {
            case Tables::SHARED:
                return view(a, {c.L, c.D}, {c.D, 1});
            case Tables::PER_SEQUENCE:
                return view(a, {c.B, c.L, c.D}, {c.L * c.D, c.D, 1});
            default:
                return view(a, {c.B, 1, c.L, c.D}, {c.L * c.D, c.L * c.D, c.D, 1});
        }
    };
    const spyre_tensor tc = table(cs), ts = table(sn);
    ASSERT_SPYRE(spyre_op_linear_rotary(nullptr, &tx, &tw, &tc, &ts, &ty));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_STREQ(info.op, "linear_rotary");
    EXPECT_GT(info.modeled_cycles, 0u);
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    y.fetch();
    const int64_t h = c.D / 2;
    std::vector<double> row(N), mag(N);
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0, a = 0;
            for (int64_t k = 0; k < c.in; ++k) {
                const double p = double(x.at(m * c.in + k)) * w.at(n * c.in + k);
                acc += p, a += std::fabs(p);
            }
            row[n] = acc, mag[n] = a;
        }
        const int64_t b = m / c.L, l = m % c.L, t0 = (TB == 1 ? 0 : b) * c.L * c.D + l * c.D;
        for (int64_t n = 0; n < N; ++n) {
            const int64_t j = n % c.D, head = n - j;
            const int64_t partner = head + (j < h ? j + h : j - h);
            const double rot = j < h ? -row[partner] : row[partner];
            const double want = row[n] * cs.at(t0 + j) + rot * sn.at(t0 + j);
            const double scale = 1 + mag[n] + mag[partner];
            ASSERT_NEAR(y.at(m * N + n), want, tolerance(c.t, scale) + 1e-6)
                << "row " << m << " col " << n;
        }
    }
}

TEST_F(Ops, LinearRotaryMatchesReference) {
    const Case cases[] = {
        // one sequence of an odd length, fp32 tables on fp16 data
        {1, 7, 64, 4, 64, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32, Tables::SHARED},
        // two sequences with their own tables, K not a whole stick
        {2, 6, 100, 2, 64, SPYRE_DTYPE_BFLOAT16, SPYRE_DTYPE_BFLOAT16, Tables::PER_SEQUENCE},
        // fp32, HF's [B, 1, L, D] tables, three sequences of an odd length
        {3, 5, 33, 5, 32, SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT32, Tables::PER_SEQUENCE_HEAD1},
        // Granite's head dim, enough rows and heads to spread over the cores
        {1, 96, 256, 8, 128, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT16, Tables::SHARED},
    };
    uint32_t seed = 11;
    for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << "B " << c.B << " L " << c.L << " in " << c.in << " H "
                                          << c.H << " D " << c.D << " t " << c.t << " ct " << c.ct);
        check(dev, c, seed);
        seed += 5;
    }
}

// A q projection (8 heads) and the GQA-sized k projection (2 heads) of one x, as a Granite
// layer makes them, each in one launch.
TEST_F(Ops, LinearRotaryForQAndGqaSizedK) {
    for (int64_t heads : {8, 2}) {
        SCOPED_TRACE(::testing::Message() << heads << " heads");
        check(dev,
              {1, 33, 128, heads, 128, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32, Tables::SHARED},
              40);
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_EQ(info.launches, 1u);  // stick rows in place: no padding copies
    }
}

TEST_F(Ops, LinearRotaryRefusesWhatItCannotPlan) {
    DevArray x(dev, SPYRE_DTYPE_FLOAT16, 4 * 64, 1), w(dev, SPYRE_DTYPE_FLOAT16, 192 * 64, 2);
    DevArray c(dev, SPYRE_DTYPE_FLOAT32, 4 * 96, 3), y(dev, SPYRE_DTYPE_FLOAT16, 4 * 192, 4);
    const spyre_tensor tx = view(x, {1, 4, 64}, {256, 64, 1});
    // 96 output features of 96-wide heads: the fp16 product's columns come in 64s (sticks), so
    // no N tile holds whole heads
    const spyre_tensor w96 = view(w, {96, 64}, {64, 1});
    const spyre_tensor c96 = view(c, {4, 96}, {96, 1});
    const spyre_tensor y96 = view(y, {1, 4, 96}, {384, 96, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_linear_rotary(nullptr, &tx, &w96, &c96, &c96, &y96));
    // a head dim that does not divide the features
    const spyre_tensor w192 = view(w, {192, 64}, {64, 1});
    const spyre_tensor c80 = view(c, {4, 80}, {80, 1});
    const spyre_tensor y192 = view(y, {1, 4, 192}, {768, 192, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_linear_rotary(nullptr, &tx, &w192, &c80, &c80, &y192));
    // table rows not on a stick boundary
    const spyre_tensor c64 = view(c, {4, 64}, {64, 1}, 1);
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_linear_rotary(nullptr, &tx, &w192, &c64, &c64, &y192));
    // tables for another length
    const spyre_tensor c3 = view(c, {3, 64}, {64, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_linear_rotary(nullptr, &tx, &w192, &c3, &c3, &y192));
}

}  // namespace
}  // namespace spyre::ops_api_test
