// SPDX-License-Identifier: MIT
// spyre_op_add_rms_norm through the C API: h = x + residual and rms_norm(h) * weight against a
// host reference on odd shapes and all float types, one launch cheaper than add + rms_norm,
// in place, and the argument errors (eps of every norm).
#include <cmath>
#include <cstdio>
#include <string>

#include "ops_api_util.hpp"

namespace spyre::ops_api_test {
namespace {

// A value rounded to type t (what the card stores).
float rounded(spyre_dtype t, float v) {
    std::vector<uint8_t> b(4);
    put(t, b, 0, v);
    return get(t, b, 0);
}

struct Ref {
    std::vector<float> h;
    std::vector<double> out;
};

// h rounded to the type as torch rounds x + residual; the norm in double.
Ref reference(const DevArray& x, const DevArray& r, const DevArray* w, int64_t R, int64_t C,
              float eps) {
    Ref ref;
    ref.h.resize(R * C);
    ref.out.resize(R * C);
    for (int64_t i = 0; i < R; ++i) {
        double ms = 0;
        for (int64_t j = 0; j < C; ++j) {
            const float h = rounded(x.t, x.at(i * C + j) + r.at(i * C + j));
            ref.h[i * C + j] = h;
            ms += double(h) * h / C;
        }
        const double rs = 1.0 / std::sqrt(ms + eps);
        for (int64_t j = 0; j < C; ++j)
            ref.out[i * C + j] = ref.h[i * C + j] * rs * (w ? w->at(j) : 1.0);
    }
    return ref;
}

void expect_matches(const Ref& ref, const DevArray& out, const DevArray& h, int64_t n,
                    const std::string& what) {
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(h.at(i), ref.h[i]) << what << " h[" << i << "]";
        ASSERT_NEAR(out.at(i), ref.out[i], 2 * tolerance(out.t, 1 + std::fabs(ref.out[i])))
            << what << " out[" << i << "]";
    }
}

TEST_F(Ops, AddRmsNormMatchesReference) {
    struct Case {
        int64_t rows, cols;
    };
    // rows of whole sticks, rows that split sticks (blocks and cores meet inside a stick),
    // a single row, more rows than cores, Granite's hidden size
    const Case cases[] = {{1, 64}, {5, 100}, {37, 300}, {67, 129}, {300, 72}, {33, 4096}};
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16})
        for (const Case& k : cases)
            for (int wk = 0; wk < 3; ++wk) {  // weight of x's type, fp32, none
                const int64_t R = k.rows, C = k.cols;
                const std::string what = std::to_string(int(t)) + " " + std::to_string(R) + "x" +
                                         std::to_string(C) + " w" + std::to_string(wk);
                DevArray x(dev, t, R * C, 1), r(dev, t, R * C, 2), o(dev, t, R * C, 3),
                    h(dev, t, R * C, 4);
                DevArray w(dev, wk == 1 ? SPYRE_DTYPE_FLOAT32 : t, C, 5);
                const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R, C}, {C, 1});
                const spyre_tensor to = view(o, {R, C}, {C, 1}), th = view(h, {R, C}, {C, 1});
                const spyre_tensor tw = view(w, {C}, {1});
                ASSERT_SPYRE(spyre_op_add_rms_norm(nullptr, &tx, &tr, wk < 2 ? &tw : nullptr, 1e-6f,
                                                   &to, &th))
                    << what;
                spyre_op_info info;
                ASSERT_SPYRE(spyre_op_get_last_info(&info));
                EXPECT_STREQ(info.op, "add_rms_norm");
                EXPECT_EQ(info.launches, 1u) << what;
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                o.fetch();
                h.fetch();
                expect_matches(reference(x, r, wk < 2 ? &w : nullptr, R, C, 1e-6f), o, h, R * C,
                               what);
            }
}

// The point of the op: one pass instead of an add and an rms_norm (two reads of h).
TEST_F(Ops, AddRmsNormIsCheaperThanAddThenRmsNorm) {
    const int64_t R = 512, C = 4096;
    const spyre_dtype t = SPYRE_DTYPE_FLOAT16;
    DevArray x(dev, t, R * C, 1), r(dev, t, R * C, 2), o(dev, t, R * C, 3), h(dev, t, R * C, 4);
    DevArray w(dev, t, C, 5);
    const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R, C}, {C, 1});
    const spyre_tensor to = view(o, {R, C}, {C, 1}), th = view(h, {R, C}, {C, 1});
    const spyre_tensor tw = view(w, {C}, {1});
    spyre_op_info fused, add, norm;
    ASSERT_SPYRE(spyre_op_add_rms_norm(nullptr, &tx, &tr, &tw, 1e-5f, &to, &th));
    ASSERT_SPYRE(spyre_op_get_last_info(&fused));
    ASSERT_SPYRE(spyre_op_binary(nullptr, SPYRE_BINARY_ADD, &tx, &tr, 0.0, 1.0, &th));
    ASSERT_SPYRE(spyre_op_get_last_info(&add));
    ASSERT_SPYRE(spyre_op_rms_norm(nullptr, &th, &tw, 1e-5f, &to));
    ASSERT_SPYRE(spyre_op_get_last_info(&norm));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    std::printf("add_rms_norm [%lld, %lld] fp16: %llu ns (%s); add %llu ns + rms_norm %llu ns\n",
                (long long)R, (long long)C, (unsigned long long)fused.modeled_ns, fused.plan,
                (unsigned long long)add.modeled_ns, (unsigned long long)norm.modeled_ns);
    EXPECT_EQ(fused.cores, 32u);
    // the fused pass moves 4 tensors, the two ops 3 + 2: at least 15% less modeled time
    EXPECT_LT(double(fused.modeled_ns), 0.85 * double(add.modeled_ns + norm.modeled_ns))
        << fused.plan << ": " << fused.modeled_ns << " ns; add " << add.modeled_ns
        << " ns + rms_norm " << norm.modeled_ns << " ns";
}

// out = x and out_residual = residual (the decoder's in-place residual stream), on a shape
// whose cores meet inside sticks.
TEST_F(Ops, AddRmsNormInPlace) {
    const int64_t R = 97, C = 200;
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_FLOAT32}) {
        DevArray x(dev, t, R * C, 1), r(dev, t, R * C, 2), w(dev, t, C, 5);
        const Ref ref = reference(x, r, &w, R, C, 1e-5f);
        const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R, C}, {C, 1});
        const spyre_tensor tw = view(w, {C}, {1});
        ASSERT_SPYRE(spyre_op_add_rms_norm(nullptr, &tx, &tr, &tw, 1e-5f, &tx, &tr));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        x.fetch();
        r.fetch();
        expect_matches(ref, x, r, R * C, "in place " + std::to_string(int(t)));
    }
}

TEST_F(Ops, AddRmsNormArgumentErrors) {
    const int64_t R = 8, C = 64;
    const spyre_dtype t = SPYRE_DTYPE_FLOAT16;
    DevArray x(dev, t, R * C, 1), r(dev, t, R * C, 2), o(dev, t, 2 * R * C, 3), h(dev, t, R * C, 4);
    DevArray f(dev, SPYRE_DTYPE_FLOAT32, R * C, 5), w(dev, t, C + 1, 6);
    const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R, C}, {C, 1});
    const spyre_tensor to = view(o, {R, C}, {C, 1}), th = view(h, {R, C}, {C, 1});
    auto fails = [&](spyre_status want, const spyre_tensor* a, const spyre_tensor* b,
                     const spyre_tensor* wt, float eps, const spyre_tensor* out,
                     const spyre_tensor* hout, const char* says) {
        EXPECT_EQ(want, spyre_op_add_rms_norm(nullptr, a, b, wt, eps, out, hout)) << says;
        EXPECT_NE(std::string(spyre_last_error()).find(says), std::string::npos)
            << spyre_last_error();
    };
    const spyre_tensor r_short = view(r, {R - 1, C}, {C, 1});
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, &r_short, nullptr, 1e-5f, &to, &th,
          "`residual` must have the type and shape of `x`");
    const spyre_tensor f32 = view(f, {R, C}, {C, 1});
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, &tr, nullptr, 1e-5f, &to, &f32,
          "`out_residual` must have the type and shape of `x`");
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, &tr, nullptr, 1e-5f, &to, &to,
          "`out` and `out_residual` must not overlap");
    // an output one row into x: neither in place nor apart
    const spyre_tensor o_shift = view(o, {R, C}, {C, 1}, C);
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &to, &tr, nullptr, 1e-5f, &o_shift, &th,
          "`out` overlaps `x` without being it");
    const spyre_tensor w_long = view(w, {C + 1}, {1});
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, &tr, &w_long, 1e-5f, &to, &th,
          "`weight` must have 64 elements");
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, &tr, nullptr, -1.0f, &to, &th, "eps must be >= 0");
    fails(SPYRE_ERROR_INVALID_ARGUMENT, &tx, nullptr, nullptr, 1e-5f, &to, &th, "residual");
    const spyre_tensor x_strided = view(o, {R, C}, {2 * C, 1});
    fails(SPYRE_ERROR_NOT_SUPPORTED, &x_strided, &tr, nullptr, 1e-5f, &to, &th,
          "must be dense and start 128-byte aligned");
}

// A negative or NaN eps is the caller's error for every norm, named as such (not INTERNAL).
TEST_F(Ops, NormsRefuseNegativeOrNanEps) {
    const int64_t R = 4, C = 64;
    const spyre_dtype t = SPYRE_DTYPE_FLOAT32;
    DevArray x(dev, t, R * C, 1), r(dev, t, R * C, 2), o(dev, t, R * C, 3), h(dev, t, R * C, 4);
    const spyre_tensor tx = view(x, {R, C}, {C, 1}), tr = view(r, {R, C}, {C, 1});
    const spyre_tensor to = view(o, {R, C}, {C, 1}), th = view(h, {R, C}, {C, 1});
    for (float eps : {-1e-5f, std::nanf("")}) {
        EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_rms_norm(nullptr, &tx, nullptr, eps, &to));
        EXPECT_NE(std::string(spyre_last_error()).find("rms_norm: eps must be >= 0"),
                  std::string::npos)
            << spyre_last_error();
        EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
                  spyre_op_layer_norm(nullptr, &tx, nullptr, nullptr, eps, &to));
        EXPECT_NE(std::string(spyre_last_error()).find("layer_norm: eps must be >= 0"),
                  std::string::npos)
            << spyre_last_error();
        EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
                  spyre_op_add_rms_norm(nullptr, &tx, &tr, nullptr, eps, &to, &th));
    }
    EXPECT_EQ(SPYRE_SUCCESS, spyre_op_rms_norm(nullptr, &tx, nullptr, 0.0f, &to))
        << spyre_last_error();
}

// Rows too long for a block beside their residual: refused clearly (the library's rms_norm
// runs them as long rows, which have no residual stream).
TEST_F(Ops, AddRmsNormRefusesLongRows) {
    const int64_t C = 1 << 20;
    const spyre_dtype t = SPYRE_DTYPE_FLOAT32;
    DevArray x(dev, t, C, 1), r(dev, t, C, 2), o(dev, t, C, 3), h(dev, t, C, 4);
    const spyre_tensor tx = view(x, {1, C}, {C, 1}), tr = view(r, {1, C}, {C, 1});
    const spyre_tensor to = view(o, {1, C}, {C, 1}), th = view(h, {1, C}, {C, 1});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED,
              spyre_op_add_rms_norm(nullptr, &tx, &tr, nullptr, 1e-5f, &to, &th));
    EXPECT_NE(std::string(spyre_last_error()).find("long rows"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(SPYRE_SUCCESS, spyre_op_rms_norm(nullptr, &tx, nullptr, 1e-5f, &to))
        << spyre_last_error();
}

}  // namespace
}  // namespace spyre::ops_api_test
