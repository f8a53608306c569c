// SPDX-License-Identifier: MIT
// Cycle model against hand-computed expectations (Documentation/isa.md "Cycle model").
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace spyre::test {
namespace {

constexpr double kClock = 1.5e9;

TEST(Cycles, DdrBoundCopyOnAllCoresReachesAggregateBandwidth) {
    const uint64_t per_core = 1 << 20;
    Rig rig(2, 72u << 20);
    PB b;
    b.li(3, 0), b.li(5, per_core);
    b.muli(4, 1, per_core);  // src = core * 1 MiB
    b.load(3, 4, 5);
    b.addi(4, 4, 32 * per_core + 0x10000);  // dst region
    b.store(3, 4, 5);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    const double bytes = static_cast<double>(rig.res.ddr_read_bytes + rig.res.ddr_write_bytes);
    EXPECT_EQ(bytes, 2.0 * 32 * per_core);
    const double gbs = bytes / (rig.res.total_cycles / kClock) / 1e9;
    EXPECT_NEAR(gbs, 204.8, 204.8 * 0.01) << rig.res.total_cycles << " cycles";
    RecordProperty("copy_GBps", std::to_string(gbs));
    // each core: 1 MiB at 204.8/32 GB/s = 245760 cycles per direction, + DMA latency once
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_DMA], 2 * 245760u + 150);
}

TEST(Cycles, SingleCoreDmaIsLimitedByItsPort) {
    Rig rig;
    PB b;
    b.li(3, 0), b.li(4, 0), b.li(5, 1 << 20);
    b.load(3, 4, 5);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 1), 0);
    // 1 MiB / 128 B per cycle + 150 latency, issued at cycle 4
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_DMA], 8192u + 150);
    EXPECT_EQ(rig.res.total_cycles, 4u + 8192 + 150);
}

uint64_t ring_cycles(uint64_t bytes) {
    Rig rig;
    PB b;
    auto rx = b.label();
    b.li(3, 0), b.li(4, static_cast<int64_t>(bytes));
    b.br(isa::Cond::NE, 1, 0, rx);
    b.send(isa::Dir::NEXT, 3, 4);  // core 0 -> core 1
    b.halt();
    b.bind(rx);
    b.recv(isa::Dir::NEXT, 3, 4);
    b.halt();
    EXPECT_EQ(rig.run(b.finish(), {}, 2), 0) << rig.res.message;
    EXPECT_EQ(rig.res.ring_bytes, bytes);
    return rig.res.total_cycles;
}

TEST(Cycles, RingTransferCostsBytesOver128PlusLatency) {
    // core 0 issues SEND in cycle 4 (after LI, LI, BR) and the transfer starts then; the data
    // arrive at 4 + B/128 + 8 (hop latency); core 1's RECV retires one cycle later, HALT one after.
    for (uint64_t bytes : {128u, 4096u, 65536u, 1u << 20}) {
        EXPECT_EQ(ring_cycles(bytes), 4 + bytes / 128 + 8 + 2) << bytes;
    }
    EXPECT_EQ(ring_cycles(1 << 20) - ring_cycles(4096), ((1u << 20) - 4096) / 128);
}

TEST(Cycles, ComputeBoundMatmulReachesPeak) {
    Rig rig;
    // 16 back-to-back 64x64x256 fp16 tiles per core on LX operands, all 32 cores
    PB b;
    b.li(3, 0x10000), b.li(4, 0), b.li(5, 0x8000);
    b.set_regs(20, {64, 64, 256, 512, 128, 256});
    b.loopi(16);
    b.matmul(DType::F16, 3, 4, 5, 20, true);
    b.endloop();
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    const double peak_macs_per_cycle = 32.0 * 2 * 8 * 64;
    const double util = rig.res.macs / (rig.res.total_cycles * peak_macs_per_cycle);
    EXPECT_GE(util, 0.95);
    const double tflops = 2.0 * rig.res.macs / (rig.res.total_cycles / kClock) / 1e12;
    RecordProperty("matmul_utilization", std::to_string(util));
    RecordProperty("matmul_TFLOPs", std::to_string(tflops));
    // 8 row blocks x 1 column block over 2 corelets = 4 steps per K: 1024 cycles per tile
    EXPECT_EQ(rig.res.cores[7].busy[SPYRE_UNIT_MATRIX], 16u * 1024 + 16);
    EXPECT_NEAR(tflops, 98.3, 98.3 * 0.05);
}

TEST(Cycles, VectorCostsAndOverlapWithDma) {
    Rig rig;
    PB b;
    b.li(3, 0x10000), b.li(4, 0);
    b.set_regs(20, {64, 128, 256, 256, 256});
    b.vbin(isa::VBin::ADD, isa::Bcast::NONE, DType::F16, DType::F16, 3, 4, 4, 20);  // 64 cycles
    b.vun(isa::VUn::EXP, DType::F16, DType::F16, 3, 3, 20);  // dependent: 4 x 64 cycles
    b.halt();
    ASSERT_EQ(rig.run(b.finish()), 0);
    // 8192 fp16 elements / 128 lanes = 64 cycles (+8 latency from idle); EXP 4x, pipelined
    EXPECT_EQ(rig.res.cores[0].busy[SPYRE_UNIT_VECTOR], 64u + 8 + 256);

    // An independent load overlaps with vector work; a dependent one waits for it.
    auto run_pair = [&](int64_t load_lx) {
        PB p;
        p.li(3, 0x10000), p.li(4, 0), p.li(6, load_lx), p.li(7, 0x100000), p.li(8, 65536);
        p.set_regs(20, {256, 128, 256, 256, 256});
        p.vun(isa::VUn::EXP, DType::F16, DType::F16, 3, 4, 20);  // reads [0, 64K)
        p.load(6, 7, 8);                                         // 64 KiB: 512 cycles
        p.halt();
        EXPECT_EQ(rig.run(p.finish()), 0) << rig.res.message;
        return rig.res.total_cycles;
    };
    const uint64_t independent = run_pair(0x40000), dependent = run_pair(0x0);
    EXPECT_LT(independent, 8 + 1024 + 200);      // max(vector, dma) + small
    EXPECT_GE(dependent, 8 + 1024 + 512 + 150);  // WAR: the load waits for the vector reads
}

TEST(Cycles, BarrierSynchronizesCoreClocks) {
    Rig rig;
    PB b;
    auto skip = b.label();
    b.br(isa::Cond::NE, 1, 0, skip);
    b.li(3, 0), b.li(4, 0), b.li(5, 1 << 20);
    b.load(3, 4, 5);  // core 0 only; 2 cores share DDR: 1 MiB at 102.4 GB/s = 15360 cycles
    b.bind(skip);
    b.barrier();
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 2), 0);
    const auto& c0 = rig.res.cores[0];
    const auto& c1 = rig.res.cores[1];
    EXPECT_EQ(c0.end_cycle, c1.end_cycle);
    EXPECT_GT(c1.wait_cycles, 15360u);
    EXPECT_EQ(rig.res.total_cycles, c0.end_cycle);
}

}  // namespace
}  // namespace spyre::test

namespace spyre::test {
namespace {

TEST(Cycles, AllReduceFollowsRingFormula) {
    Rig rig;
    PB b;
    b.li(3, 0), b.li(4, 4096);  // 4096 fp32 = 16 KiB
    b.allreduce(isa::Red::SUM, DType::F32, 3, 3, 4);
    b.halt();
    ASSERT_EQ(rig.run(b.finish(), {}, 32), 0) << rig.res.message;
    // 2(n-1) steps of ceil(16384/32 = 512 B / 128) = 4 cycles + 8 hop latency each
    const uint64_t ring = 2 * 31 * (4 + 8);
    EXPECT_EQ(rig.res.cores[5].busy[SPYRE_UNIT_RING], ring);
    EXPECT_EQ(rig.res.total_cycles, 3 + ring + 1);
    EXPECT_EQ(rig.res.cores[5].ring_bytes, 2u * 31 * 512);
}

}  // namespace
}  // namespace spyre::test
