// SPDX-License-Identifier: MIT
// VRNG: the Philox4x32-10 generator against its published known-answer vectors, the instruction
// against an independent scalar reference, split invariance, faults and cycle cost.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "spyre/cost.hpp"
#include "spyre/philox.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Rng;

// An independent scalar Philox4x32-10, written from the paper's definition (S-box of two
// 32x32->64 multiplies per round, Weyl key schedule), not from spyre/philox.hpp.
std::array<uint32_t, 4> ref_philox(std::array<uint32_t, 4> x, std::array<uint32_t, 2> k) {
    for (int r = 0; r < 10; ++r) {
        const uint64_t a = 0xD2511F53ull * x[0];
        const uint64_t b = 0xCD9E8D57ull * x[2];
        x = {uint32_t(b >> 32) ^ x[1] ^ k[0], uint32_t(b), uint32_t(a >> 32) ^ x[3] ^ k[1],
             uint32_t(a)};
        k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
    }
    return x;
}

struct Kat {
    std::array<uint32_t, 4> ctr;
    std::array<uint32_t, 2> key;
    std::array<uint32_t, 4> out;
};

// Random123's known-answer vectors for philox4x32_10 (kat_vectors): zeros, all ones, pi digits.
const Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, KnownAnswers) {
    for (const Kat& k : kKats) {
        EXPECT_EQ(rng::philox4x32_10(k.ctr, k.key[0], k.key[1]), k.out);
        EXPECT_EQ(ref_philox(k.ctr, k.key), k.out);
    }
}

// stream_block: counter = (n / 4, offset), key = seed, as isa.md defines.
TEST(Philox, StreamCounterLayout) {
    const uint64_t seed = 0x0123456789abcdefull, off = 0xfedcba9876543210ull;
    for (uint64_t n : {0ull, 3ull, 4ull, 0x1234567890ull}) {
        const uint64_t g = n >> 2;
        EXPECT_EQ(rng::stream_block(seed, off, n),
                  ref_philox({uint32_t(g), uint32_t(g >> 32), uint32_t(off), uint32_t(off >> 32)},
                             {uint32_t(seed), uint32_t(seed >> 32)}));
    }
}

// Reference value of stream element n for a function and destination type (as a float; BITS as
// the word's bits reinterpreted).
float ref_value(Rng f, DType t, uint64_t seed, uint64_t off, uint64_t n, float scale, float shift) {
    const uint64_t g = n >> 2;
    const auto w = ref_philox({uint32_t(g), uint32_t(g >> 32), uint32_t(off), uint32_t(off >> 32)},
                              {uint32_t(seed), uint32_t(seed >> 32)});
    double x;
    if (f == Rng::UNIFORM) {
        const int p = t == DType::F16 ? 11 : t == DType::BF16 ? 8 : 24;
        x = std::ldexp(double(w[n & 3] >> (32 - p)), -p);
    } else {
        const unsigned k = n & 3;
        const double u1 = (double(w[k & 2] >> 8) + 1) / 16777216.0;
        const double u2 = double(w[(k & 2) + 1] >> 8) / 16777216.0;
        const double r = std::sqrt(-2 * std::log(u1)), th = 2 * M_PI * u2;
        x = float(k & 1 ? r * std::sin(th) : r * std::cos(th));
    }
    return round_to(t, std::fma(float(x), scale, shift));
}

constexpr uint64_t kOut = 0x400000;

// Runs VRNG over rows x cols at LX 0 with a padded row stride on `cores` cores, each core taking
// a band of rows (base = first row * row_step), and stores LX to kOut + core * bytes.
struct RngRun {
    Rig& rig;
    uint64_t rows, cols, stride, row_step, seed, off;
    int run(Rng f, DType t, float scale, float shift, uint32_t cores) {
        PB b;
        const uint64_t bytes = rows * stride;
        // core c takes rows [c*rows/cores, (c+1)*rows/cores)
        b.li(10, int64_t(rows)), b.alu(isa::Alu::MUL, 11, 10, 1);  // r11 = rows * id
        b.alu(isa::Alu::DIVU, 11, 11, 2);                          // first row
        b.alu(isa::Alu::ADD, 12, 1, 0, 1);
        b.alu(isa::Alu::MUL, 12, 10, 12), b.alu(isa::Alu::DIVU, 12, 12, 2);  // end row
        b.alu(isa::Alu::SUB, 20, 12, 11);                                    // rows of the band
        b.li(21, int64_t(cols)), b.li(22, int64_t(stride));
        b.li(23, int64_t(seed)), b.li(24, int64_t(off));
        b.li(26, int64_t(row_step));
        b.alu(isa::Alu::MUL, 25, 11, 26);  // base = first row * row_step
        b.alu(isa::Alu::MUL, 13, 11, 22);  // LX address of the band = first row * stride
        b.vrng(f, t, 13, 20, scale, shift);
        b.li(14, int64_t(kOut)), b.li(15, int64_t(bytes)), b.alu(isa::Alu::MUL, 16, 15, 1);
        b.alu(isa::Alu::ADD, 14, 14, 16);
        b.store(0, 14, 15);
        b.halt();
        return rig.run(b.finish(), {}, cores);
    }
    // Core k's output: the band it wrote, at its own copy.
    float got(DType t, uint32_t cores, uint64_t i, uint64_t j) const {
        uint64_t core = 0;
        while ((core + 1) * rows / cores <= i) ++core;
        const uint64_t addr = kOut + core * rows * stride + i * stride + j * isa::dtype_size(t);
        if (t == DType::I32) {
            uint32_t w;
            std::memcpy(&w, &rig.mem[addr], 4);
            return std::bit_cast<float>(w);
        }
        return rig.get_as(t, addr, 1)[0];
    }
};

TEST(Vrng, MatchesReferenceInEveryTypeAndIsSplitInvariant) {
    struct Case {
        Rng f;
        DType t;
        float scale, shift;
    };
    const Case cases[] = {
        {Rng::BITS, DType::I32, 1, 0},      {Rng::UNIFORM, DType::F32, 1, 0},
        {Rng::UNIFORM, DType::F16, 1, 0},   {Rng::UNIFORM, DType::BF16, 1, 0},
        {Rng::UNIFORM, DType::F32, 4, -2},  {Rng::NORMAL, DType::F32, 1, 0},
        {Rng::NORMAL, DType::F16, 0.5f, 3}, {Rng::NORMAL, DType::BF16, 1, 0},
    };
    Rig rig(2, 8u << 20, 32);
    for (const Case& c : cases) {
        const uint64_t es = isa::dtype_size(c.t);
        RngRun r{rig, 37, 29, ((29 * es + 127) / 128) * 128, 29, 0x9e3779b97f4a7c15ull, 7};
        for (uint32_t cores : {1u, 3u, 32u}) {
            std::fill(rig.mem.begin() + kOut, rig.mem.begin() + kOut + 32 * r.rows * r.stride,
                      0xee);
            ASSERT_EQ(r.run(c.f, c.t, c.scale, c.shift, cores), 0) << rig.res.message;
            for (uint64_t i = 0; i < r.rows; ++i)
                for (uint64_t j = 0; j < r.cols; ++j) {
                    const uint64_t n = i * r.row_step + j;
                    float want;
                    if (c.f == Rng::BITS) {
                        const uint64_t g = n >> 2;
                        want = std::bit_cast<float>(
                            ref_philox({uint32_t(g), uint32_t(g >> 32), uint32_t(r.off), 0},
                                       {uint32_t(r.seed), uint32_t(r.seed >> 32)})[n & 3]);
                    } else {
                        want = ref_value(c.f, c.t, r.seed, r.off, n, c.scale, c.shift);
                    }
                    const float got = r.got(c.t, cores, i, j);
                    ASSERT_EQ(f32_bits(got), f32_bits(want))
                        << int(c.f) << " t" << int(c.t) << " cores " << cores << " at " << i << ","
                        << j << ": " << got << " vs " << want;
                }
        }
    }
}

// Uniforms stay in [0, 1) in every type (the significand width follows the type), different
// offsets and seeds give different streams, and the moments are those of U(0,1) and N(0,1).
TEST(Vrng, RangeStreamsAndMoments) {
    Rig rig(2, 8u << 20, 1);
    const uint64_t rows = 64, cols = 1024;
    auto gen = [&](Rng f, DType t, uint64_t seed, uint64_t off) {
        RngRun r{rig, rows, cols, cols * isa::dtype_size(t), cols, seed, off};
        EXPECT_EQ(r.run(f, t, 1, 0, 1), 0) << rig.res.message;
        return rig.get_as(t, kOut, rows * cols);
    };
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const auto u = gen(Rng::UNIFORM, t, 1, 0);
        double s = 0, s2 = 0;
        for (float x : u) {
            ASSERT_GE(x, 0.0f);
            ASSERT_LT(x, 1.0f);
            s += x, s2 += double(x) * x;
        }
        const double m = s / u.size(), v = s2 / u.size() - m * m;
        EXPECT_NEAR(m, 0.5, 0.005) << int(t);
        EXPECT_NEAR(v, 1.0 / 12, 0.003) << int(t);
    }
    const auto z = gen(Rng::NORMAL, DType::F32, 5, 0);
    double s = 0, s2 = 0, s4 = 0;
    for (float x : z) {
        ASSERT_TRUE(std::isfinite(x));
        s += x, s2 += double(x) * x;
    }
    const double m = s / z.size(), v = s2 / z.size() - m * m;
    for (float x : z) s4 += std::pow((x - m), 4);
    // 5 standard errors of 65536 samples
    EXPECT_NEAR(m, 0.0, 0.02);
    EXPECT_NEAR(v, 1.0, 0.03);
    EXPECT_NEAR(s4 / z.size() / (v * v), 3.0, 0.1);  // kurtosis of a normal
    const auto a = gen(Rng::UNIFORM, DType::F32, 1, 0), b = gen(Rng::UNIFORM, DType::F32, 1, 1),
               c = gen(Rng::UNIFORM, DType::F32, 2, 0);
    size_t same_ab = 0, same_ac = 0;
    for (size_t i = 0; i < a.size(); ++i) same_ab += a[i] == b[i], same_ac += a[i] == c[i];
    EXPECT_LT(same_ab, 10u);
    EXPECT_LT(same_ac, 10u);
}

TEST(Vrng, Faults) {
    using isa::Op;
    auto prog = [](uint8_t dt, uint8_t func, int64_t imm, uint8_t b, uint8_t c, uint8_t flags) {
        PB p;
        p.li(3, 0);
        p.set_regs(20, {1, 4, 16, 0, 0, 0, 4});
        p.emit(PB::mk(Op::VRNG, dt, 3, b, c, 20, func, flags, imm));
        p.halt();
        return p.finish();
    };
    const uint8_t f32 = isa::dt_pair(DType::F32, DType::F32);
    const uint8_t i32 = isa::dt_pair(DType::I32, DType::F32);
    Rig rig(1, 1u << 20, 1);
    struct F {
        const char* what;
        std::vector<uint8_t> p;
        int code;
    };
    const int BADOP = SPYRE_ENGINE_ERR_BAD_OPERAND;
    const F faults[] = {
        {"func 3", prog(f32, 3, 0, 0, 0, 0), BADOP},
        {"BITS to f32", prog(f32, 0, 0, 0, 0, 0), BADOP},
        {"UNIFORM to i32", prog(i32, 1, 0, 0, 0, 0), BADOP},
        {"NORMAL to i8", prog(isa::dt_pair(DType::I8, DType::F32), 2, 0, 0, 0, 0), BADOP},
        {"source type", prog(isa::dt_pair(DType::F32, DType::F16), 1, 0, 0, 0, 0), BADOP},
        {"bad type 9", prog(0x09, 1, 0, 0, 0, 0), BADOP},
        {"BITS imm", prog(i32, 0, 1, 0, 0, 0), BADOP},
        {"b set", prog(f32, 1, 0, 4, 0, 0), BADOP},
        {"c set", prog(f32, 1, 0, 0, 4, 0), BADOP},
        {"flags set", prog(f32, 1, 0, 0, 0, 1), BADOP},
    };
    for (const F& f : faults) {
        EXPECT_EQ(rig.run(f.p), f.code) << f.what;
        EXPECT_EQ(rig.res.core, -1) << f.what;
    }
    // operands: misaligned destination, outside LX, too large
    auto run = [&](std::initializer_list<int64_t> desc, int64_t addr) {
        PB p;
        p.li(3, addr);
        p.set_regs(20, desc);
        p.vrng(Rng::UNIFORM, DType::F32, 3, 20);
        p.halt();
        return rig.run(p.finish());
    };
    EXPECT_EQ(run({1, 4, 16, 0, 0, 0, 4}, 2), SPYRE_ENGINE_ERR_MISALIGNED);
    EXPECT_EQ(run({2, 4, 16, 0, 0, 0, 4}, 2 << 20), SPYRE_ENGINE_ERR_LX_RANGE);
    EXPECT_EQ(run({1 << 20, 1 << 20, 16, 0, 0, 0, 4}, 0), SPYRE_ENGINE_ERR_TOO_LARGE);
    EXPECT_EQ(run({0, 4, 16, 0, 0, 0, 4}, 2), 0) << "zero rows is a no-op";
}

// Cost: one vector pass at vec_special_cycles per vector, twice that for NORMAL.
TEST(Vrng, CycleCost) {
    Rig rig(1, 1u << 20, 1);
    auto busy = [&](Rng f, DType t) {
        PB p;
        p.li(3, 0x10000);
        p.set_regs(20, {64, 128, int64_t(128 * isa::dtype_size(t)), 1, 0, 0, 128});
        p.vrng(f, t, 3, 20);
        p.halt();
        EXPECT_EQ(rig.run(p.finish()), 0) << rig.res.message;
        return rig.res.cores[0].busy[SPYRE_UNIT_VECTOR];
    };
    const uint64_t s = rig.cfg.vec_special_cycles, lat = rig.cfg.vec_latency;
    // 8192 elements: 64-lane fp16 x 2 corelets = 64 vectors; 32-bit types 128 vectors
    EXPECT_EQ(busy(Rng::UNIFORM, DType::F16), 64 * s + lat);
    EXPECT_EQ(busy(Rng::UNIFORM, DType::F32), 128 * s + lat);
    EXPECT_EQ(busy(Rng::BITS, DType::I32), 128 * s + lat);
    EXPECT_EQ(busy(Rng::NORMAL, DType::BF16), 2 * 64 * s + lat);
    EXPECT_EQ(cost::vec_compute_cycles(rig.cfg, isa::Op::VRNG, uint8_t(Rng::NORMAL), DType::F32,
                                       DType::F32, 64, 128),
              2 * 128 * s);
}

}  // namespace
}  // namespace spyre::test
