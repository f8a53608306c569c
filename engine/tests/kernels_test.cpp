// SPDX-License-Identifier: MIT
// The fast paths: every kernel implementation the CPU runs (avx2, avx512) against the portable one
// (bit-identical), the row conversions of each against spyre::num, and the lazily zeroed
// scratchpads.
#include "../src/kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/kernels_impl.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

// Restores the default kernel implementation when a test ends.
struct KernelsGuard {
    ~KernelsGuard() { kern::set_kernels(nullptr); }
};

// The implementations to compare against the portable one: every one this CPU runs.
std::vector<const char*> fast_impls() {
    std::vector<const char*> v;
    for (const char* n : {"avx2", "avx512"})
        if (kern::kernels_supported(n)) v.push_back(n);
    return v;
}

TEST(Kernels, Dispatch) {
    KernelsGuard guard;
    EXPECT_TRUE(kern::kernels_supported("portable"));
    EXPECT_FALSE(kern::kernels_supported("avx9"));
    EXPECT_FALSE(kern::kernels_supported(""));
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512dq");
    EXPECT_EQ(kern::kernels_supported("avx2"), avx2);
    EXPECT_EQ(kern::kernels_supported("avx512"), avx512);
#endif
    std::string names;
    for (const char* n : fast_impls()) names += std::string(" ") + n;
    RecordProperty("compared_with_portable", names);
    std::printf("[          ] implementations compared with portable:%s\n",
                names.empty() ? " (none on this CPU)" : names.c_str());
    // set_kernels: known and supported names switch, others change nothing
    ASSERT_TRUE(kern::set_kernels("portable"));
    EXPECT_STREQ(kern::kernels_name(), "portable");
    EXPECT_FALSE(kern::set_kernels("avx9"));
    EXPECT_STREQ(kern::kernels_name(), "portable");
    for (const char* n : fast_impls()) {
        ASSERT_TRUE(kern::set_kernels(n));
        EXPECT_STREQ(kern::kernels_name(), n);
    }
    // the default: SPYRE_ENGINE_KERNELS if this CPU runs it, else the fastest one
    const char* old = std::getenv("SPYRE_ENGINE_KERNELS");
    const std::string saved = old ? old : "";
    const std::vector<const char*> fast = fast_impls();
    const char* fastest = fast.empty() ? "portable" : fast.back();
    unsetenv("SPYRE_ENGINE_KERNELS");
    ASSERT_TRUE(kern::set_kernels(nullptr));
    EXPECT_STREQ(kern::kernels_name(), fastest);
    setenv("SPYRE_ENGINE_KERNELS", "portable", 1);
    ASSERT_TRUE(kern::set_kernels(nullptr));
    EXPECT_STREQ(kern::kernels_name(), "portable");
    setenv("SPYRE_ENGINE_KERNELS", "avx9", 1);  // unknown: the fastest, with a warning
    ASSERT_TRUE(kern::set_kernels(nullptr));
    EXPECT_STREQ(kern::kernels_name(), fastest);
    if (old)
        setenv("SPYRE_ENGINE_KERNELS", saved.c_str(), 1);
    else
        unsetenv("SPYRE_ENGINE_KERNELS");
}

// Every fp16 value, and fp32 bit patterns of all kinds (random, rounding edges, NaNs, infinities,
// subnormals), through each implementation's row conversions against spyre::num.
TEST(Kernels, F16ConversionsMatchScalar) {
    KernelsGuard guard;
    std::vector<uint16_t> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::mt19937 rng(5);
    std::uniform_int_distribution<uint32_t> bits;
    std::vector<float> x(1 << 20);
    for (auto& v : x) v = std::bit_cast<float>(bits(rng));
    for (uint32_t i = 0; i < 4096; ++i) {
        x[i] = std::bit_cast<float>((0x33000000u + (i << 12)) ^ (i & 1 ? 0x80000000u : 0));
        x[4096 + i] = std::bit_cast<float>(0x7f800000u | (i * 0x1fffu) | (i & 1 ? 0x80000000u : 0));
        x[8192 + i] = std::bit_cast<float>(0x38000000u + (i << 11) + (i & 0xfff));
    }
    for (const char* name : {"portable", "avx2", "avx512"}) {
        if (!kern::set_kernels(name)) continue;
        SCOPED_TRACE(name);
        std::vector<float> f(65536);
        kern::load_row(DType::F16, reinterpret_cast<const uint8_t*>(h.data()), h.size(), f.data());
        for (uint32_t i = 0; i < 65536; ++i)
            ASSERT_EQ(f32_bits(f[i]), f32_bits(num::f16_to_f32(h[i]))) << std::hex << i;
        std::vector<uint16_t> out(x.size());
        kern::store_row(DType::F16, reinterpret_cast<uint8_t*>(out.data()), x.size(), x.data());
        for (size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(out[i], num::f32_to_f16(x[i])) << std::hex << f32_bits(x[i]);
    }
}

// Interesting fp32 values: zeros, subnormals, normals near every rounding boundary of the
// narrower types, the integer saturation limits, infinities, quiet and signalling NaNs.
std::vector<float> special_floats() {
    std::vector<float> v;
    const uint32_t pats[] = {0x00000000u, 0x00000001u, 0x00000fffu, 0x007fffffu, 0x00800000u,
                             0x33000000u, 0x33000001u, 0x387fe000u, 0x387ff000u, 0x38800000u,
                             0x3f7fffffu, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,
                             0x477fe000u, 0x477ff000u, 0x47800000u, 0x7f7fffffu, 0x7f800000u,
                             0x7f800001u, 0x7fa00000u, 0x7fc00000u, 0x7fffffffu, 0x7f7f8000u};
    for (uint32_t p : pats) {
        v.push_back(std::bit_cast<float>(p));
        v.push_back(std::bit_cast<float>(p | 0x80000000u));
    }
    for (float f : {0.5f,           1.5f,    2.5f,    -0.5f,         -1.5f,         -2.5f,
                    126.5f,         127.0f,  127.49f, 127.5f,        128.0f,        -127.5f,
                    -128.0f,        -128.5f, -129.0f, 2147483520.0f, 2147483648.0f, -2147483648.0f,
                    -2147483904.0f, 3e9f,    -3e9f,   1e-40f,        -1e-45f})
        v.push_back(f);
    return v;
}

// load_row / store_row of every type through each implementation against spyre::num, for row
// lengths around the vector widths and at odd offsets.
TEST(Kernels, RowConversionsMatchScalar) {
    KernelsGuard guard;
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> bits;
    std::vector<float> x = special_floats();
    while (x.size() < 4099) x.push_back(std::bit_cast<float>(bits(rng)));
    for (int i = 0; i < 600; ++i)
        x.push_back(std::uniform_real_distribution<float>(-300, 300)(rng));
    std::shuffle(x.begin(), x.end(), rng);
    std::vector<uint8_t> raw(x.size() * 4 + 64);
    for (auto& b : raw) b = static_cast<uint8_t>(bits(rng));
    const DType types[] = {DType::F16, DType::BF16, DType::I8, DType::I32, DType::F32};
    for (const char* name : {"portable", "avx2", "avx512"}) {
        if (!kern::set_kernels(name)) continue;
        for (DType t : types) {
            SCOPED_TRACE(std::string(name) + " " + std::to_string(int(t)));
            const size_t es = isa::dtype_size(t);
            for (size_t n :
                 {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{16}, size_t{17}, size_t{31},
                  size_t{33}, size_t{63}, size_t{65}, size_t{129}, x.size() - 3}) {
                for (size_t off : {size_t{0}, size_t{1}, size_t{3}}) {
                    // fp32 -> t at an odd address, with guard bytes before and after the row
                    std::vector<uint8_t> out(off + n * es + 16, 0xa5);
                    kern::store_row(t, out.data() + off, n, x.data() + off);
                    for (size_t i = 0; i < off; ++i) ASSERT_EQ(out[i], 0xa5) << i;
                    for (size_t i = 0; i < n; ++i) {
                        const float f = x[off + i];
                        const uint8_t* o = out.data() + off + i * es;
                        switch (t) {
                            case DType::F16:
                            case DType::BF16: {
                                uint16_t hv;
                                std::memcpy(&hv, o, 2);
                                ASSERT_EQ(
                                    hv, t == DType::F16 ? num::f32_to_f16(f) : num::f32_to_bf16(f))
                                    << std::hex << f32_bits(f);
                                break;
                            }
                            case DType::I8:
                                ASSERT_EQ(int8_t(*o), num::f32_to_i8(f)) << f;
                                break;
                            case DType::I32: {
                                int32_t iv;
                                std::memcpy(&iv, o, 4);
                                ASSERT_EQ(iv, num::f32_to_i32(f)) << f;
                                break;
                            }
                            default: {
                                uint32_t fv;
                                std::memcpy(&fv, o, 4);
                                ASSERT_EQ(fv, f32_bits(f));
                            }
                        }
                    }
                    for (size_t i = off + n * es; i < out.size(); ++i) ASSERT_EQ(out[i], 0xa5) << i;
                    // t -> fp32 from random bytes at an odd address
                    std::vector<float> back(n + 4, 7.0f);
                    const uint8_t* src = raw.data() + off;
                    kern::load_row(t, src, n, back.data());
                    for (size_t i = 0; i < n; ++i) {
                        const uint8_t* p = src + i * es;
                        float want;
                        uint16_t hv;
                        int32_t iv;
                        switch (t) {
                            case DType::F16:
                                std::memcpy(&hv, p, 2);
                                want = num::f16_to_f32(hv);
                                break;
                            case DType::BF16:
                                std::memcpy(&hv, p, 2);
                                want = num::bf16_to_f32(hv);
                                break;
                            case DType::I8:
                                want = float(int8_t(*p));
                                break;
                            case DType::I32:
                                std::memcpy(&iv, p, 4);
                                want = float(iv);
                                break;
                            default:
                                std::memcpy(&want, p, 4);
                        }
                        ASSERT_EQ(f32_bits(back[i]), f32_bits(want)) << i;
                    }
                    for (size_t i = n; i < back.size(); ++i) ASSERT_EQ(back[i], 7.0f);
                }
            }
        }
    }
}

// Operand values of the matmul comparison.
enum class Fill {
    kNormal,     // uniform in [-4, 4] (int8: all 256 values)
    kSpecial,    // mostly normal, with NaNs, infinities, signed zeros, subnormals, huge values
    kTiny,       // tiny magnitudes: products and sums in the subnormal range
    kNonFinite,  // mostly normal, with infinities, NaNs and signed zeros (no subnormals)
};

void fill_operand(std::vector<uint8_t>& v, DType t, Fill f, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-4, 4);
    std::uniform_int_distribution<int> byte(0, 255), pick(0, 99);
    const std::vector<float> sp = special_floats();
    const uint64_t s = isa::dtype_size(t);
    for (size_t i = 0; i + s <= v.size(); i += s) {
        if (t == DType::I8) {
            v[i] = static_cast<uint8_t>(byte(rng));
            continue;
        }
        float x = d(rng);
        if (f == Fill::kSpecial && pick(rng) < 6) x = sp[rng() % sp.size()];
        if (f == Fill::kNonFinite && pick(rng) < 4) {
            const float nf[] = {INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f};
            x = nf[rng() % 6];
        }
        if (f == Fill::kTiny) x *= t == DType::F16 ? 1e-4f : 1e-20f;
        kern::store_row(t, v.data() + i, 1, &x);
    }
}

struct MmCase {
    DType t;
    uint64_t m, n, k;
    bool acc;
    Fill fill = Fill::kNormal;
    bool tb = false;  // B stored transposed (N x K)
};

// Runs one case with the portable kernels and with `name`; identical bits (NaN: any NaN, whose
// payload isa.md leaves unspecified), padding between C rows never written.
void compare_matmul(const char* name, const MmCase& cs, std::mt19937& rng) {
    const uint64_t es = isa::dtype_size(cs.t);
    const uint64_t lda = (cs.k + 5) * es, ldb = ((cs.tb ? cs.k : cs.n) + 3) * es,
                   ldc = (cs.n + 2) * 4;
    std::vector<uint8_t> a(cs.m * lda), b((cs.tb ? cs.n : cs.k) * ldb), c0(cs.m * ldc);
    fill_operand(a, cs.t, cs.fill, rng);
    fill_operand(b, cs.t, cs.fill, rng);
    fill_operand(c0, cs.t == DType::I8 ? DType::I32 : DType::F32,
                 cs.fill == Fill::kTiny ? Fill::kTiny : Fill::kNormal, rng);
    std::vector<uint8_t> c_fast = c0, c_port = c0;
    ASSERT_TRUE(kern::set_kernels(name));
    kern::matmul({cs.t, c_fast.data(), a.data(), b.data(), cs.m, cs.n, cs.k, lda, ldb, ldc, cs.acc,
                  nullptr, cs.tb});
    ASSERT_TRUE(kern::set_kernels("portable"));
    kern::matmul({cs.t, c_port.data(), a.data(), b.data(), cs.m, cs.n, cs.k, lda, ldb, ldc, cs.acc,
                  nullptr, cs.tb});
    const std::string what = std::string(name) + " dtype " + std::to_string(int(cs.t)) + " " +
                             std::to_string(cs.m) + "x" + std::to_string(cs.n) + "x" +
                             std::to_string(cs.k) + (cs.acc ? " acc" : "") +
                             (cs.tb ? " trans_b" : "") + " fill " + std::to_string(int(cs.fill));
    size_t bad = 0;
    for (uint64_t i = 0; i < cs.m; ++i) {
        for (uint64_t j = 0; j < cs.n; ++j) {
            const size_t o = i * ldc + j * 4;
            uint32_t x, y;
            std::memcpy(&x, c_fast.data() + o, 4);
            std::memcpy(&y, c_port.data() + o, 4);
            const bool same = cs.t == DType::I8
                                  ? x == y
                                  : same_float(std::bit_cast<float>(x), std::bit_cast<float>(y));
            if (!same && bad++ < 5)
                ADD_FAILURE() << what << ": C[" << i << "][" << j << "] " << std::hex << x
                              << " != portable " << y;
        }
        EXPECT_EQ(
            0, std::memcmp(c_fast.data() + i * ldc + cs.n * 4, c0.data() + i * ldc + cs.n * 4, 8))
            << what << ": row padding written";
    }
    EXPECT_EQ(bad, 0u) << what;
}

// kern::matmul with each fast implementation against the portable one: identical bits for every
// input type, odd shapes around the register tiles and cache blocks, strides, accumulate, and
// NaN / infinity / subnormal operands.
TEST(Kernels, MatmulMatchesPortable) {
    KernelsGuard guard;
    std::mt19937 rng(3);
    std::vector<MmCase> cases;
    const uint64_t dims[] = {1, 7, 63, 65, 129};
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8})
        for (uint64_t m : dims)
            for (uint64_t n : dims)
                for (uint64_t k : dims) cases.push_back({t, m, n, k, ((m + n + k) & 2) != 0});
    // beyond one K block (256 fp32 steps, 1024 int8), one row block (256) and one column block
    // (512); int8 K not a multiple of 4
    const MmCase big[] = {{DType::F32, 263, 530, 300, false}, {DType::F16, 64, 64, 513, true},
                          {DType::BF16, 9, 33, 600, true},    {DType::I8, 20, 40, 1031, true},
                          {DType::I8, 257, 515, 2050, false}, {DType::I8, 6, 16, 2, false},
                          {DType::F32, 12, 32, 64, true},     {DType::F16, 300, 17, 1, false},
                          {DType::I8, 33, 31, 3, true},       {DType::I8, 9, 48, 1025, false}};
    cases.insert(cases.end(), std::begin(big), std::end(big));
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (Fill f : {Fill::kSpecial, Fill::kTiny}) {
            cases.push_back({t, 65, 63, 129, true, f});
            cases.push_back({t, 7, 33, 300, false, f});
        }
    // B stored transposed (every nn.Linear): one row of A (avx512: B^T transposed in registers,
    // 64 or 16 columns at a time) and more rows (through the panels)
    for (uint64_t m : {1, 7})
        for (uint64_t n : {1, 7, 16, 63, 64, 65, 129, 200})
            for (uint64_t k : {1, 7, 16, 63, 65, 129, 300})
                for (Fill f : {Fill::kNormal, Fill::kSpecial})
                    cases.push_back({DType::F32, m, n, k, ((n + k) & 2) != 0, f, true});
    const std::vector<const char*> fast = fast_impls();
    if (fast.empty()) GTEST_SKIP() << "no SIMD implementation on this CPU to compare";
    for (const char* name : fast)
        for (const MmCase& cs : cases) compare_matmul(name, cs, rng);
}

// C overlapping A and B (in place): every implementation reads A and B completely first.
TEST(Kernels, MatmulOverlapMatchesPortable) {
    KernelsGuard guard;
    std::mt19937 rng(9);
    for (DType t : {DType::F32, DType::F16, DType::I8}) {
        const uint64_t m = 37, n = 41, k = 70, es = isa::dtype_size(t);
        std::vector<uint8_t> buf(m * n * 4 + k * n * es + m * k * es + 256);
        fill_operand(buf, t, Fill::kNormal, rng);
        // A at 0 (row stride k*es), B right after A, C at 0 overlapping both
        const uint64_t lda = k * es, ldb = n * es, ldc = n * 4;
        std::vector<uint8_t> want = buf;
        ASSERT_TRUE(kern::set_kernels("portable"));
        kern::matmul(
            {t, want.data(), want.data(), want.data() + m * lda, m, n, k, lda, ldb, ldc, false});
        for (const char* name : fast_impls()) {
            std::vector<uint8_t> got = buf;
            ASSERT_TRUE(kern::set_kernels(name));
            kern::matmul(
                {t, got.data(), got.data(), got.data() + m * lda, m, n, k, lda, ldb, ldc, false});
            EXPECT_EQ(got, want) << name << " dtype " << int(t);
        }
    }
}

// bf16 with VDPBF16PS (avx512 on CPUs with AVX512-BF16): used only where it equals the FMA order
// exactly (no subnormal inputs, products or partial sums; kernels_avx512.cpp). Operands whose
// smallest exponents sum to just above and just below the limit, with sums cancelling near
// 2^-126, give the portable bits either way; ordinary and non-finite operands take VDPBF16PS.
TEST(Kernels, MatmulBf16DotProductPath) {
    KernelsGuard guard;
    if (!kern::kernels_supported("avx512")) GTEST_SKIP() << "no avx512 on this CPU";
    const bool dp = kern::detail::avx512_bf16_supported();
    std::mt19937 rng(21);
    // expected path: VDPBF16PS (true) or FMAs (false)
    auto run = [&](const MmCase& cs, bool want_dp) {
        const uint64_t before = kern::detail::bf16_dp_matmuls();
        compare_matmul("avx512", cs, rng);
        const bool took = kern::detail::bf16_dp_matmuls() != before;
        EXPECT_EQ(took, dp && want_dp)
            << cs.m << "x" << cs.n << "x" << cs.k << " fill " << int(cs.fill) << " acc " << cs.acc;
    };
    for (const uint64_t k : {1, 2, 63, 64, 65, 511, 512, 513, 1030}) {
        run({DType::BF16, 17, 45, k, false, Fill::kNormal}, true);
        run({DType::BF16, 9, 64, k, true, Fill::kNormal}, true);
    }
    run({DType::BF16, 65, 63, 129, true, Fill::kNonFinite}, true);
    run({DType::BF16, 33, 70, 300, false, Fill::kNonFinite}, true);
    run({DType::BF16, 65, 63, 129, true, Fill::kTiny}, false);  // subnormal products
    run({DType::BF16, 7, 33, 300, false, Fill::kSpecial}, false);
    // signed zeros: C = -0 plus products -0 * +0 stays -0, also through the padding step of odd K
    for (const uint64_t k : {1, 3, 8, 129}) {
        const uint64_t m = 9, n = 20;
        std::vector<uint16_t> a(m * k), b(k * n, 0);
        for (size_t i = 0; i < a.size(); ++i) a[i] = i % 3 ? 0x8000 : 0;
        std::vector<float> c_fast(m * n, -0.0f), c_port(m * n, -0.0f);
        const uint64_t before = kern::detail::bf16_dp_matmuls();
        ASSERT_TRUE(kern::set_kernels("avx512"));
        kern::matmul({DType::BF16, reinterpret_cast<uint8_t*>(c_fast.data()),
                      reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data()), m,
                      n, k, k * 2, n * 2, n * 4, true});
        EXPECT_EQ(kern::detail::bf16_dp_matmuls() != before, dp);
        ASSERT_TRUE(kern::set_kernels("portable"));
        kern::matmul({DType::BF16, reinterpret_cast<uint8_t*>(c_port.data()),
                      reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data()), m,
                      n, k, k * 2, n * 2, n * 4, true});
        for (size_t i = 0; i < m * n; ++i)
            ASSERT_EQ(f32_bits(c_fast[i]), f32_bits(c_port[i])) << "k " << k << " element " << i;
    }
    // a subnormal input times infinity is infinity (VDPBF16PS would read it as zero: NaN)
    {
        const uint64_t m = 3, n = 5, k = 4;
        std::vector<uint16_t> a(m * k, 0), b(k * n, 0);
        a[0] = 0x0001, a[k] = 0x8040;                                     // subnormals in column 0
        for (uint64_t j = 0; j < n; ++j) b[j] = j & 1 ? 0xff80 : 0x7f80;  // row 0: +-inf
        std::vector<float> c_fast(m * n), c_port(m * n);
        ASSERT_TRUE(kern::set_kernels("avx512"));
        kern::matmul({DType::BF16, reinterpret_cast<uint8_t*>(c_fast.data()),
                      reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data()), m,
                      n, k, k * 2, n * 2, n * 4, false});
        ASSERT_TRUE(kern::set_kernels("portable"));
        kern::matmul({DType::BF16, reinterpret_cast<uint8_t*>(c_port.data()),
                      reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data()), m,
                      n, k, k * 2, n * 2, n * 4, false});
        EXPECT_EQ(c_port[0], INFINITY);
        EXPECT_EQ(c_port[n], -INFINITY);
        for (size_t i = 0; i < m * n; ++i)
            EXPECT_TRUE(same_float(c_fast[i], c_port[i])) << i << " " << c_fast[i];
    }
    // exponent limit: A and B of biased exponents from ea and eb up, ea + eb = 142 may use
    // VDPBF16PS, 141 may not; C[0][0] cancels down to the smallest quantum of the products
    for (const int sum : {142, 141, 150}) {
        const uint64_t m = 24, n = 40, k = 96, lda = k * 2, ldb = n * 2, ldc = n * 4;
        const int ea = sum / 2, eb = sum - ea;
        std::vector<uint16_t> a(m * k), b(k * n);
        auto gen = [&](int e) {
            return uint16_t((rng() & 0x8000) | ((e + int(rng() % 3)) << 7) | (rng() & 0x7f));
        };
        for (auto& v : a) v = gen(ea);
        for (auto& v : b) v = gen(eb);
        a[k + 5] = uint16_t(ea << 7);  // the smallest exponents occur
        b[7] = uint16_t(eb << 7);
        // C[0][0] = 129 * 129 q - 130 * 128 q = q = 2^(ea + eb - 268): subnormal for 141
        for (uint64_t kk = 0; kk < k; ++kk) a[kk] = 0;
        a[0] = uint16_t(ea << 7 | 1), a[1] = uint16_t(ea << 7 | 2);
        b[0] = uint16_t(eb << 7 | 1), b[n] = uint16_t(0x8000 | eb << 7);
        std::vector<uint8_t> c_fast(m * ldc), c_port(m * ldc);
        for (bool acc : {false, true}) {
            // accumulate: C starts at normal values on both sides of 2^-103
            for (size_t i = 0; i < m * n; ++i) {
                const float v = std::ldexp(float(int(rng() % 200) - 100), int(rng() % 12) - 110);
                std::memcpy(c_fast.data() + 4 * i, &v, 4);
            }
            c_port = c_fast;
            const uint64_t before = kern::detail::bf16_dp_matmuls();
            ASSERT_TRUE(kern::set_kernels("avx512"));
            kern::matmul({DType::BF16, c_fast.data(), reinterpret_cast<uint8_t*>(a.data()),
                          reinterpret_cast<uint8_t*>(b.data()), m, n, k, lda, ldb, ldc, acc});
            const bool took = kern::detail::bf16_dp_matmuls() != before;
            ASSERT_TRUE(kern::set_kernels("portable"));
            kern::matmul({DType::BF16, c_port.data(), reinterpret_cast<uint8_t*>(a.data()),
                          reinterpret_cast<uint8_t*>(b.data()), m, n, k, lda, ldb, ldc, acc});
            EXPECT_EQ(c_fast, c_port) << "exponent sum " << sum << " acc " << acc;
            // without accumulate the operands decide; with it also C (which has values < 2^-103)
            EXPECT_EQ(took, dp && sum >= 142 && !acc) << "exponent sum " << sum << " acc " << acc;
            if (!acc) {
                float c00;
                std::memcpy(&c00, c_port.data(), 4);
                EXPECT_EQ(c00, std::ldexp(1.0f, sum - 268)) << "exponent sum " << sum;
            }
        }
    }
}

// Packings kept for later MMs (MatmulArgs::a_gen / b_gen; avx512 bf16 with VDPBF16PS): an MM of
// the same operand (address, stride, shape) and generation takes the earlier packing, even where
// the bytes changed (callers promise they do not: here it shows the reuse); another generation,
// kern::forget_packed over the bytes or no generation packs anew. Tails in every dimension (odd K:
// the padding step), and a subnormal operand, which keeps the FMA kernel also when reused.
TEST(Kernels, MatmulBf16PackingCache) {
    KernelsGuard guard;
    if (!kern::kernels_supported("avx512") || !kern::detail::avx512_bf16_supported())
        GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    std::mt19937 rng(33);
    uint64_t gen = 0x7e57000000000000;  // beyond any engine's generations
    struct Shape {
        uint64_t m, n, k;
    };
    for (const Shape sh : {Shape{32, 64, 256}, Shape{9, 45, 63}, Shape{17, 70, 130},
                           Shape{1, 16, 2}, Shape{8, 100, 1}}) {
        const uint64_t m = sh.m, n = sh.n, k = sh.k;
        const uint64_t lda = (k + 3) * 2, ldb = (n + 5) * 2, ldc = n * 4;
        std::vector<uint8_t> a1(m * lda), a2(m * lda), b1(k * ldb), b2(k * ldb), bt(k * ldb);
        for (auto* v : {&a1, &a2, &b1, &b2}) fill_operand(*v, DType::BF16, Fill::kNormal, rng);
        bt = b1;
        bt[(k - 1) * ldb + 2 * (n - 1)] = 0x01;  // the last value subnormal
        bt[(k - 1) * ldb + 2 * (n - 1) + 1] = 0x80;
        auto ref = [&](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
            std::vector<uint8_t> c(m * ldc);
            EXPECT_TRUE(kern::set_kernels("portable"));
            kern::matmul(
                {DType::BF16, c.data(), a.data(), b.data(), m, n, k, lda, ldb, ldc, false});
            return c;
        };
        std::vector<uint8_t> A = a1, B = b1;  // the operands' memory
        // runs avx512 on A, B with the generations; checks the hits and the VDPBF16PS use
        auto run = [&](uint64_t ga, uint64_t gb, uint64_t hits, bool dp) {
            std::vector<uint8_t> c(m * ldc);
            EXPECT_TRUE(kern::set_kernels("avx512"));
            const uint64_t h0 = kern::detail::bf16_pack_hits();
            const uint64_t d0 = kern::detail::bf16_dp_matmuls();
            kern::MatmulArgs g{DType::BF16, c.data(), A.data(), B.data(), m,    n,
                               k,           lda,      ldb,      ldc,      false};
            g.a_gen = ga, g.b_gen = gb;
            kern::matmul(g);
            EXPECT_EQ(kern::detail::bf16_pack_hits() - h0, hits) << m << "x" << n << "x" << k;
            EXPECT_EQ(kern::detail::bf16_dp_matmuls() - d0, dp ? 1u : 0u);
            return c;
        };
        const std::string what =
            std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
        const uint64_t g1 = ++gen, g2 = ++gen;
        EXPECT_EQ(run(g1, g1, 0, true), ref(a1, b1)) << what;
        A = a2, B = b2;
        EXPECT_EQ(run(g1, g1, 2, true), ref(a1, b1)) << what << ": both packings reused";
        EXPECT_EQ(run(g1, g2, 1, true), ref(a1, b2)) << what << ": B of another generation";
        kern::forget_packed(A.data() + lda, A.data() + lda + 2);  // one value of row 1
        EXPECT_EQ(run(g1, g2, m > 1 ? 1 : 2, true), ref(m > 1 ? a2 : a1, b2))
            << what << ": A forgotten";
        EXPECT_EQ(run(0, 0, 0, true), ref(a2, b2)) << what << ": no generation";
        // subnormal B: the FMA kernel, also when the packing (and its scan) is reused
        B = bt;
        const uint64_t g3 = ++gen;
        EXPECT_EQ(run(g3, g3, 0, false), ref(a2, bt)) << what << ": subnormal B";
        EXPECT_EQ(run(g3, g3, 2, false), ref(a2, bt)) << what << ": subnormal B reused";
    }
}

// Scratchpads read as zero at job start although the previous job left data in them.
TEST(Kernels, ScratchpadZeroAfterPreviousJob) {
    Rig rig(2, 1u << 20);
    std::vector<uint8_t> ones(64 * 1024, 0xab);
    rig.put(0x10000, ones);
    {
        PB b;  // fill LX[0, 64 KiB) with 0xab, and LX[64 KiB, 96 KiB) by the vector unit
        b.li(3, 0), b.li(4, 0x10000), b.li(5, 64 * 1024);
        b.load(3, 4, 5);
        b.li(6, 64 * 1024);
        b.set_regs(20, {256, 32, 128, 128});
        b.vun(isa::VUn::SET, DType::F32, DType::F32, 6, 6, 20, 1.5f);
        b.halt();
        ASSERT_EQ(rig.run(b.finish(), {}, 2), 0) << rig.res.message;
    }
    PB b;
    // partial LOAD: 100 bytes into stick 0 (bytes 100..127 must become zero, not 0xab)
    b.li(3, 0), b.li(4, 0x10000), b.li(5, 100);
    b.load(3, 4, 5);
    // LXLD from a stale stick
    b.lxld(7, 0, 4096);
    b.lxst(0, 7, 8192);  // LX[8192] = value read (0); the rest of that stick must be zero too
    // MM reading stale A/B (zero) into C at 0x4000 with accumulate: C stays zero
    b.set_regs(20, {4, 16, 8, 32, 64, 64});
    b.li(8, 0x4000), b.li(9, 0x6000), b.li(10, 0x7000);
    b.matmul(DType::F16, 8, 9, 10, 20, true);
    // store LX[0, 96 KiB) to DDR 0x40000
    b.li(11, 0x40000), b.li(12, 96 * 1024);
    b.store(3, 11, 12);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 2), 0) << rig.res.message;
    auto out = rig.get<uint8_t>(0x40000, 96 * 1024);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i < 100 ? 0xab : 0) << i;
}

}  // namespace
}  // namespace spyre::test
