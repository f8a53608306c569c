// SPDX-License-Identifier: MIT
// Deferred LOAD copies (engine/src/deferred.cpp): an MM reading a loaded weight block in place
// must see the bytes the LOAD would have copied, whatever writes its LX range or its DDR source
// afterwards (same core, or another core after an ordering point).
#include <gtest/gtest.h>

#include <cstdlib>

#include "../src/kernels_impl.hpp"
#include "test_util.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {

constexpr uint64_t kK = 128, kN = 32;  // B: kN rows of kK fp32 (16 KiB), C = A x B^T
constexpr uint64_t kA = 0x0, kW = 0x10000, kY = 0x20000, kC = 0x30000;
constexpr uint64_t kLxA = 0, kLxW = 0x1000, kLxS = 0x8000, kLxC = 0x10000;

struct Data {
    std::vector<float> a, w, y;
};

Data make_data() {
    Data d;
    for (uint64_t k = 0; k < kK; ++k) d.a.push_back(float(int(k % 7) - 3));
    for (uint64_t i = 0; i < kN * kK; ++i) d.w.push_back(float(int(i * 37 % 19) - 9));
    for (uint64_t i = 0; i < kN * kK; ++i) d.y.push_back(float(int(i * 11 % 23) - 11) * 100);
    return d;
}

// C[n] = sum over k in [k0, k1) of a[k] w[n][k] (small integers: exact in any order)
std::vector<float> reference(const Data& d, const std::vector<float>& w, uint64_t k0 = 0,
                             uint64_t k1 = kK) {
    std::vector<float> c(kN);
    for (uint64_t n = 0; n < kN; ++n)
        for (uint64_t k = k0; k < k1; ++k) c[n] += d.a[k] * w[n * kK + k];
    return c;
}

// Core 0: A and B to LX, `between`, C = A x B^T (K elements from k0), C stored. Other cores
// run `others`. Args: A, W, C, Y.
std::vector<uint8_t> program(const std::function<void(PB&)>& between,
                             const std::function<void(PB&)>& others = nullptr, uint64_t k0 = 0,
                             uint64_t k = kK) {
    PB b;
    b.arg(3, 0);
    b.arg(4, 1);
    b.arg(5, 2);
    b.arg(6, 3);
    PB::Label rest = b.label();
    if (others) b.br(isa::Cond::NE, isa::kRegCoreId, 0, rest);
    b.li(10, kLxA);
    b.li(11, int64_t(k * 4));
    b.load(10, 3, 11, 0, int64_t(k0 * 4));
    b.li(12, kLxW);
    b.set_regs(22, {kN, kK * 4, int64_t(k * 4), 1, 0, 0});  // rows of k of the kK elements
    b.load(12, 4, 11, 22, int64_t(k0 * 4));
    between(b);
    b.li(13, kLxC);
    b.set_regs(22, {1, kN, int64_t(k), int64_t(k * 4), int64_t(k * 4), kN * 4});
    b.matmul(DType::F32, 13, 10, 12, 22, false, false, true);
    b.li(11, kN * 4);
    b.store(13, 5, 11);
    b.halt();
    if (others) {
        b.bind(rest);
        others(b);
        b.halt();
    }
    return b.finish();
}

// Runs the job three times (the repeats run on the calling thread alone: both ways of running
// cores) and checks C and the final W each time.
void check(Rig& rig, const std::vector<uint8_t>& prog, uint32_t cores, const Data& d,
           const std::vector<float>& want_c, const std::vector<float>& want_w) {
    for (int rep = 0; rep < 3; ++rep) {
        rig.put(kA, d.a);
        rig.put(kW, d.w);
        rig.put(kY, d.y);
        rig.put(kC, std::vector<float>(kN, -1.0f));
        ASSERT_EQ(rig.run(prog, {kA, kW, kC, kY}, cores), SPYRE_ENGINE_OK) << rig.res.message;
        EXPECT_EQ(rig.get<float>(kC, kN), want_c) << "run " << rep;
        EXPECT_EQ(rig.get<float>(kW, kN * kK), want_w) << "run " << rep;
    }
}

// Y's first `bytes` over W + off (through LX kLxS).
void store_y_over_w(PB& b, uint64_t bytes, uint64_t off) {
    b.li(14, kLxS);
    b.li(15, int64_t(bytes));
    b.load(14, 6, 15);
    b.store(14, 4, 15, 0, int64_t(off));
}

}  // namespace

TEST(Deferred, InPlaceOperandEqualsTheCopy) {
    Rig rig;
    const Data d = make_data();
    check(rig, program([](PB&) {}), 1, d, reference(d, d.w), d.w);
}

TEST(Deferred, StoreOverTheSourceOnTheSameCore) {
    Rig rig;
    const Data d = make_data();
    std::vector<float> w = d.w;
    std::copy(d.y.begin(), d.y.end(), w.begin());
    check(rig, program([](PB& b) { store_y_over_w(b, kN * kK * 4, 0); }), 1, d, reference(d, d.w),
          w);
}

TEST(Deferred, PartialStoreOverTheSource) {
    Rig rig;
    const Data d = make_data();
    std::vector<float> w = d.w;
    std::copy(d.y.begin(), d.y.begin() + 32, w.begin() + 0x800 / 4);
    check(rig, program([](PB& b) { store_y_over_w(b, 128, 0x800); }), 1, d, reference(d, d.w), w);
}

TEST(Deferred, PartialOverwriteOfTheLxRange) {
    Rig rig;
    const Data d = make_data();
    std::vector<float> w = d.w;
    // an LXST into row 1, a small LOAD over the start of row 2
    const float v0 = 5.0f, v1 = -6.0f;
    const uint64_t pair = uint64_t{f32_bits(v1)} << 32 | f32_bits(v0);
    w[kK] = v0, w[kK + 1] = v1;
    std::copy(d.y.begin(), d.y.begin() + 32, w.begin() + 2 * kK);
    auto between = [&](PB& b) {
        b.li(14, kLxW + kK * 4);
        b.li(15, int64_t(pair));
        b.lxst(14, 15);
        b.li(14, kLxW + 2 * kK * 4);
        b.li(15, 128);
        b.load(14, 6, 15);
    };
    check(rig, program(between), 1, d, reference(d, w), d.w);
}

TEST(Deferred, StoreByAnotherCoreAfterABarrier) {
    Rig rig;
    const Data d = make_data();
    std::vector<float> w = d.w;
    std::copy(d.y.begin(), d.y.end(), w.begin());
    // core 0 loads W, waits while core 1 overwrites W, then multiplies: the bytes of its LOAD
    auto between = [](PB& b) {
        b.barrier();
        b.barrier();
    };
    auto others = [](PB& b) {
        b.barrier();
        store_y_over_w(b, kN * kK * 4, 0);
        b.barrier();
    };
    check(rig, program(between, others), 2, d, reference(d, d.w), w);
}

TEST(Deferred, StridedRowsOfAKChunk) {
    Rig rig;
    const Data d = make_data();
    // the second half of every row (rows 256 B in LX, 512 B apart in DDR)
    check(rig, program([](PB&) {}, nullptr, kK / 2, kK / 2), 1, d, reference(d, d.w, kK / 2), d.w);
    std::vector<float> w = d.w;
    std::copy(d.y.begin(), d.y.begin() + 32, w.begin() + kK + kK / 2);
    check(
        rig,
        program([](PB& b) { store_y_over_w(b, 128, (kK + kK / 2) * 4); }, nullptr, kK / 2, kK / 2),
        1, d, reference(d, d.w, kK / 2), w);
}

TEST(Deferred, PoisonStaysInTheGapsBetweenLoadedRows) {
    setenv("SPYRE_ENGINE_TEST_LX_POISON", "1", 1);
    Rig rig;
    unsetenv("SPYRE_ENGINE_TEST_LX_POISON");
    const Data d = make_data();
    // half rows 512 B apart in LX: the other halves were never written
    PB b;
    b.arg(4, 1);
    b.arg(5, 2);
    b.li(12, kLxW);
    b.li(11, kK * 2);
    b.set_regs(22, {kN, kK * 4, kK * 4, 1, 0, 0});
    b.load(12, 4, 11, 22);
    b.lxld(20, 12, kK * 2);  // a gap
    b.lxld(21, 12, 8);       // loaded
    b.li(13, kLxS);
    b.lxst(13, 20);
    b.lxst(13, 21, 8);
    b.li(11, 128);
    b.store(13, 5, 11);
    b.halt();
    const auto prog = b.finish();
    for (int rep = 0; rep < 2; ++rep) {
        rig.put(kW, d.w);
        ASSERT_EQ(rig.run(prog, {kA, kW, kC, kY}), SPYRE_ENGINE_OK) << rig.res.message;
        const auto out = rig.get<uint64_t>(kC, 2);
        EXPECT_EQ(out[0], ~uint64_t{0});
        uint64_t want;
        std::memcpy(&want, d.w.data() + 2, 8);
        EXPECT_EQ(out[1], want);
    }
}

// A STORE of rows that follow each other in LX to strided DDR rows (a matmul's sub-tile): its LX
// bytes are touched as one range (exec_dma.cpp). The rows start inside a deferred LOAD's rows
// (the copy is made before the STORE writes over its source) and run on into sticks the previous
// job left stale (read as zero); one stick per row (an inline copy) and two.
TEST(Deferred, StoreOfContiguousLxRowsToStridedDdr) {
    Rig rig;
    const Data d = make_data();
    constexpr uint64_t kRows = 96, kFrom = 0x2000;  // LX rows from kLxW + 8 KiB (W is 16 KiB)
    // the previous job: LX [kLxW, kLxW + 64 KiB) = 0xab (LOADs of 4 KiB: copied, not deferred)
    const std::vector<uint8_t> ab(64 * 1024, 0xab);
    rig.put(kY, ab);
    {
        PB b;
        b.li(3, kLxW), b.arg(4, 0), b.li(5, 4096);
        for (int i = 0; i < 16; ++i) b.load(3, 4, 5, 0, 4096 * i), b.addi(3, 3, 4096);
        b.halt();
        ASSERT_EQ(rig.run(b.finish(), {kY}), SPYRE_ENGINE_OK) << rig.res.message;
    }
    for (const uint64_t len : {128, 256}) {
        PB b;
        b.arg(4, 0);
        b.li(12, kLxW), b.li(11, kN * kK * 4);
        b.load(12, 4, 11);  // W, deferred
        b.li(13, kLxW + kFrom), b.li(11, int64_t(len));
        b.set_regs(22, {kRows, 512, int64_t(len), 1, 0, 0});
        b.store(13, 4, 11, 22, 0x800);  // rows 512 B apart from W + 2 KiB: over W itself
        b.halt();
        const auto prog = b.finish();
        // LX as the STORE reads it: W, then zeros
        std::vector<uint8_t> lx(kFrom + kRows * len, 0);
        std::memcpy(lx.data(), d.w.data(), kN * kK * 4);
        for (int rep = 0; rep < 3; ++rep) {
            std::vector<uint8_t> init(0x10000, 0x5c);
            std::memcpy(init.data(), d.w.data(), kN * kK * 4);
            rig.put(kW, init);
            std::vector<uint8_t> want = init;
            for (uint64_t i = 0; i < kRows; ++i)
                std::memcpy(want.data() + 0x800 + i * 512, lx.data() + kFrom + i * len, len);
            ASSERT_EQ(rig.run(prog, {kW}), SPYRE_ENGINE_OK) << rig.res.message;
            EXPECT_EQ(rig.get<uint8_t>(kW, want.size()), want)
                << "row bytes " << len << " run " << rep;
        }
    }
}

// bf16 MMs reading their operands in place from device memory keep their packings for the next
// MMs of a phase whose cores run one after another (exec_mm, Engine::ddr_gen_): a STORE over the
// sources drops them, so an MM after the STOREs and new LOADs of the same rows multiplies the new
// values; an MM right after it reuses both packings. Small integers: exact sums.
TEST(Deferred, Bf16PackingsDroppedByAStoreOverTheirSource) {
    constexpr uint64_t M = 16, N = 64, K = 256;  // A 8 KiB, B 32 KiB: both deferred
    constexpr uint64_t dA = 0, dB = 0x10000, dY = 0x20000, dYa = 0x30000, dC = 0x40000;
    constexpr int64_t lA = 0, lB = 0x2000, lC = 0x20000, lS = 0x30000;
    auto ints = [](uint64_t n, int mul, int mod) {
        std::vector<float> v(n);
        for (uint64_t i = 0; i < n; ++i) v[i] = float(int(i * mul % mod) - mod / 2);
        return v;
    };
    const auto a = ints(M * K, 7, 9), b = ints(K * N, 5, 7), ya = ints(M * K, 3, 5),
               y = ints(K * N, 11, 9);
    auto product = [&](const std::vector<float>& x, const std::vector<float>& w) {
        std::vector<float> c(M * N);
        for (uint64_t i = 0; i < M; ++i)
            for (uint64_t j = 0; j < N; ++j)
                for (uint64_t k = 0; k < K; ++k) c[i * N + j] += x[i * K + k] * w[k * N + j];
        return c;
    };
    PB p;
    p.arg(3, 0), p.arg(4, 1), p.arg(5, 2), p.arg(6, 3), p.arg(7, 4);
    p.li(10, lA), p.li(11, M * K * 2), p.li(12, lB), p.li(13, K * N * 2);
    p.li(14, lC), p.li(15, M * N * 4), p.li(16, lS);
    p.set_regs(22, {M, N, K, K * 2, N * 2, N * 4});
    p.load(10, 3, 11);
    p.load(12, 4, 13);
    p.matmul(DType::BF16, 14, 10, 12, 22, false);
    p.store(14, 7, 15);
    p.load(16, 5, 13), p.store(16, 4, 13);  // B's source := Y
    p.load(16, 6, 11), p.store(16, 3, 11);  // A's source := Ya
    p.load(10, 3, 11);
    p.load(12, 4, 13);
    p.matmul(DType::BF16, 14, 10, 12, 22, false);
    p.store(14, 7, 15, 0, M * N * 4);
    p.matmul(DType::BF16, 14, 10, 12, 22, false);
    p.store(14, 7, 15, 0, 2 * M * N * 4);
    p.halt();
    const auto prog = p.finish();
    const bool cached =
        std::string(kern::kernels_name()) == "avx512" && kern::detail::avx512_bf16_supported();
    for (const uint32_t threads : {1u, 2u}) {  // one core: its phases are sequential either way
        Rig rig(threads);
        for (int rep = 0; rep < 3; ++rep) {
            rig.put_as(DType::BF16, dA, a);
            rig.put_as(DType::BF16, dB, b);
            rig.put_as(DType::BF16, dY, y);
            rig.put_as(DType::BF16, dYa, ya);
            const uint64_t h0 = kern::detail::bf16_pack_hits();
            ASSERT_EQ(rig.run(prog, {dA, dB, dY, dYa, dC}), SPYRE_ENGINE_OK) << rig.res.message;
            const std::string what =
                "threads " + std::to_string(threads) + " run " + std::to_string(rep);
            EXPECT_EQ(rig.get<float>(dC, M * N), product(a, b)) << what;
            EXPECT_EQ(rig.get<float>(dC + M * N * 4, M * N), product(ya, y)) << what;
            EXPECT_EQ(rig.get<float>(dC + 2 * M * N * 4, M * N), product(ya, y)) << what;
            if (cached) EXPECT_EQ(kern::detail::bf16_pack_hits() - h0, 2u) << what;
        }
    }
}
