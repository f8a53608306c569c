// SPDX-License-Identifier: MIT
// The cost API (spyre/cost.hpp) prices work exactly as the engine charges it.
#include "spyre/cost.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace spyre::test {
namespace {

TEST(Cost, InstructionFormulasMatchTheEngine) {
    Rig rig;
    const auto& cfg = rig.cfg;
    // MM: 64x64x256 fp16 = 4 steps per K step over the two corelets
    EXPECT_EQ(cost::mm_cycles(cfg, DType::F16, 64, 64, 256), 1024u);
    EXPECT_EQ(cost::mm_cycles(cfg, DType::I8, 64, 64, 256), 512u);
    EXPECT_EQ(cost::mm_cycles(cfg, DType::F32, 64, 64, 256), 4096u);
    EXPECT_EQ(cost::mm_peak_macs_per_cycle(cfg, DType::F16), 1024.0);
    EXPECT_EQ(cost::mm_peak_macs_per_cycle(cfg, DType::I8), 2048.0);
    PB b;
    b.li(3, 0x10000), b.li(4, 0), b.li(5, 0x8000);
    b.set_regs(20, {64, 64, 256, 512, 128, 256});
    b.matmul(DType::F16, 3, 4, 5, 20, false);
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0);
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_MATRIX],
              cost::mm_cycles(cfg, DType::F16, 64, 64, 256) + cfg.mm_fill_latency);
    // sticks: contiguous, aligned, misaligned, strided rows
    EXPECT_EQ(cost::lx_sticks(0, 1, 0, 256), 2u);
    EXPECT_EQ(cost::lx_sticks(64, 1, 0, 128), 2u);
    EXPECT_EQ(cost::lx_sticks(0, 1024, 128, 2), 1024u);
    EXPECT_EQ(cost::lx_sticks(0, 4, 64, 64), 2u);  // contiguous: 256 bytes
    EXPECT_EQ(cost::dma_bytes(2, 1024), 1024u * 128);
    EXPECT_EQ(cost::dma_cycles_alone(cfg, 1 << 20), 7680u);
    EXPECT_EQ(cost::dma_cycles_shared(cfg, 1 << 20, 32), 32u * 7680);
    EXPECT_EQ(cost::ring_span(32, 0xff), 7u);
    EXPECT_EQ(cost::ring_span(32, 0x80000001), 1u);  // 31 and 0 are neighbours
    EXPECT_EQ(cost::ring_span(32, 1), 0u);
}

// Roundings and SIGN take one pass like NEG; the transcendentals the special-function rate.
TEST(Cost, UnaryFunctionRates) {
    Rig rig;
    const auto& cfg = rig.cfg;
    auto cycles = [&](isa::VUn f) {
        return cost::vec_compute_cycles(cfg, isa::Op::VUN, uint8_t(f), DType::F16, DType::F16, 1,
                                        4096);
    };
    const uint64_t one = cycles(isa::VUn::NEG);
    EXPECT_EQ(one, 4096u / (64 * 2));
    for (isa::VUn f : {isa::VUn::FLOOR, isa::VUn::CEIL, isa::VUn::TRUNC, isa::VUn::ROUND,
                       isa::VUn::SIGN, isa::VUn::ABS, isa::VUn::RELU, isa::VUn::COPY})
        EXPECT_EQ(cycles(f), one) << int(f);
    for (isa::VUn f : {isa::VUn::EXP, isa::VUn::SIN, isa::VUn::GELU_TANH, isa::VUn::ERF,
                       isa::VUn::LOG1P, isa::VUn::EXPM1, isa::VUn::TAN, isa::VUn::ATANH})
        EXPECT_EQ(cycles(f), one * cfg.vec_special_cycles) << int(f);
}

// The same four-core job run by the engine and described as a cost::Phase: identical cycles,
// per-core busy, wait and end cycles.
TEST(Cost, PhaseEqualsTheEngineOnTheSameWork) {
    Rig rig(2, 16u << 20);
    const auto& cfg = rig.cfg;
    const uint32_t cores = 4;
    PB b;
    b.li(3, 0), b.li(4, 0x100000), b.li(5, 65536), b.li(6, 0x20000), b.li(8, 4096);
    b.muli(7, 1, 65536);  // per-core output
    b.set_regs(20, {256, 128, 256, 256});
    b.load(3, 4, 5);
    b.vun(isa::VUn::EXP, DType::F16, DType::F16, 6, 3, 20);
    b.store(6, 7, 5);
    b.barrier();
    b.mcload(3, 4, 5, 0);
    b.allreduce(isa::Red::SUM, DType::F32, 6, 6, 8);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, cores), 0) << rig.res.message;

    cost::Phase ph(cfg, cores);
    const uint64_t vec =
        cost::vec_cycles(cfg,
                         cost::vec_compute_cycles(cfg, isa::Op::VUN, uint8_t(isa::VUn::EXP),
                                                  DType::F16, DType::F16, 256, 128),
                         cost::lx_sticks(0, 256, 256, 256));
    std::vector<cost::LxSpan> mc_lx;
    for (uint32_t c = 0; c < cores; ++c) {
        ph.issue(c, 10);  // 6 LI/ALU + 4 LI of the descriptor
        ph.load(c, {0, 65536}, 65536);
        ph.vec(c, vec, {{0, 65536}}, {0x20000, 0x30000});
        ph.store(c, {0x20000, 0x30000}, 65536);
        mc_lx.push_back({0, 65536});
    }
    ph.barrier(0xf);
    ph.multicast(0xf, mc_lx, 65536);
    ph.allreduce(0xf, 4096 * 4);
    ph.halt();
    const cost::PhaseResult r = ph.run();
    EXPECT_EQ(r.cycles, rig.res.total_cycles);
    for (uint32_t c = 0; c < cores; ++c) {
        for (int u = 0; u < SPYRE_UNIT_COUNT; ++u)
            EXPECT_EQ(r.cores[c].busy[u], rig.res.cores[c].busy[u])
                << "core " << c << " unit " << u;
        EXPECT_EQ(r.cores[c].wait_cycles, rig.res.cores[c].wait_cycles) << c;
        EXPECT_EQ(r.cores[c].end_cycle, rig.res.cores[c].end_cycle) << c;
    }
}

}  // namespace
}  // namespace spyre::test
