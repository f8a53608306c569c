// SPDX-License-Identifier: MIT
// Translated jobs (spyre_engine_job.mappings): loads, stores and multicast loads through runs of
// virtual pages, rows split across runs, faults with the virtual address and access, checks in
// the right order, and invalid mappings.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "test_util.hpp"

namespace spyre::test {
namespace {

constexpr uint64_t kV = 0x1000000000;  // virtual base: far beyond the rig's memory
constexpr uint64_t kW = kV + 0x100000;
constexpr uint64_t kPg = 4096;

struct MapRig : Rig {
    std::vector<spyre_engine_mapping> maps;
    bool timing_only = false;
    MapRig() : Rig(2, 1u << 20) {}
    int run_mapped(const std::vector<uint8_t>& prog, uint32_t ncores = 1) {
        static const spyre_engine_mapping none{};
        spyre_engine_job job{};
        job.program = prog.data();
        job.program_size = prog.size();
        job.num_cores = ncores;
        job.mem = mem.data();
        job.mem_size = mem.size();
        job.windows = windows.data();
        job.num_windows = static_cast<uint32_t>(windows.size());
        job.flags = timing_only ? SPYRE_ENGINE_JOB_TIMING_ONLY : 0;
        job.mappings = maps.empty() ? &none : maps.data();  // translated even with no runs
        job.num_mappings = static_cast<uint32_t>(maps.size());
        return spyre_engine_run(eng, &job, &res);
    }
    std::vector<uint8_t> bytes(uint64_t pa, size_t n) const { return get<uint8_t>(pa, n); }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
    return v;
}

// LOAD `len` bytes at virtual `src` into LX 0, STORE them at virtual `dst`.
std::vector<uint8_t> copy_prog(uint64_t src, uint64_t dst, uint64_t len) {
    PB b;
    b.set_regs(
        1, {0, static_cast<int64_t>(src), static_cast<int64_t>(len), static_cast<int64_t>(dst)});
    b.load(1, 2, 3);
    b.store(1, 4, 3);
    b.halt();
    return b.finish();
}

TEST(Translate, RowsSplitAcrossRuns) {
    MapRig rig;
    // V page 0 -> 0x8000, page 1 -> 0x2000 (not adjacent); W pages -> 0x20000 and 0x11000
    rig.maps = {{kV, 0x8000, kPg, SPYRE_ENGINE_MAP_WRITE, 0},
                {kV + kPg, 0x2000, kPg, SPYRE_ENGINE_MAP_WRITE, 0},
                {kW, 0x20000, kPg, SPYRE_ENGINE_MAP_WRITE, 0},
                {kW + kPg, 0x11000, kPg, SPYRE_ENGINE_MAP_WRITE, 0}};
    rig.windows = {{kV, 2 * kPg}, {kW, 2 * kPg}};
    const auto a = pattern(kPg, 1), b2 = pattern(kPg, 2);
    rig.put(0x8000, a);
    rig.put(0x2000, b2);
    // 1 KiB from the last 512 bytes of V page 0 and the first 512 of page 1, to W + 3584
    ASSERT_EQ(rig.run_mapped(copy_prog(kV + kPg - 512, kW + kPg - 512, 1024)), 0)
        << rig.res.message;
    EXPECT_EQ(rig.bytes(0x20000 + kPg - 512, 512), std::vector<uint8_t>(a.end() - 512, a.end()));
    EXPECT_EQ(rig.bytes(0x11000, 512), std::vector<uint8_t>(b2.begin(), b2.begin() + 512));
    // physically, device address kV does not exist: nothing else was written
    EXPECT_EQ(rig.bytes(0x11000 + 512, 128), std::vector<uint8_t>(128, 0));
    EXPECT_EQ(rig.res.fault_va, 0u);
    EXPECT_EQ(rig.res.ddr_read_bytes, 1024u);
}

TEST(Translate, StridedRowsAndMulticast) {
    MapRig rig;
    // V: 4 pages mapped in reverse order at 0x40000..; W: one 16 KiB run
    for (uint64_t i = 0; i < 4; ++i)
        rig.maps.push_back({kV + i * kPg, 0x40000 + (3 - i) * kPg, kPg, 0, 0});
    rig.maps.push_back({kW, 0x60000, 4 * kPg, SPYRE_ENGINE_MAP_WRITE, 0});
    rig.windows = {{kV, 4 * kPg}, {kW, 4 * kPg}};
    for (uint64_t i = 0; i < 4; ++i) rig.put(0x40000 + (3 - i) * kPg, pattern(kPg, 10 + i));
    // 4 cores MCLOAD 4 rows of 256 bytes, one per V page, and each stores row `core` to W
    PB b;
    b.mov(20, 1);  // core id
    b.set_regs(1, {0, static_cast<int64_t>(kV), 256});
    b.set_regs(10, {4, static_cast<int64_t>(kPg), 256, 1, 0, 0});
    b.mcload(1, 2, 3, 0, 10);
    b.li(4, 256);
    b.mul(5, 4, 20);
    b.li(6, static_cast<int64_t>(kW));
    b.li(7, static_cast<int64_t>(kPg));
    b.mul(8, 7, 20);
    b.add(6, 6, 8);
    b.store(5, 6, 3);
    b.halt();
    ASSERT_EQ(rig.run_mapped(b.finish(), 4), 0) << rig.res.message;
    for (uint64_t c = 0; c < 4; ++c) {
        const auto want = pattern(kPg, 10 + c);
        EXPECT_EQ(rig.bytes(0x60000 + c * kPg, 256),
                  std::vector<uint8_t>(want.begin(), want.begin() + 256))
            << "core " << c;
    }
}

TEST(Translate, StoreToReadOnlyFaults) {
    MapRig rig;
    rig.maps = {{kV, 0x8000, kPg, SPYRE_ENGINE_MAP_WRITE, 0},
                {kW, 0x20000, kPg, 0, 0}};  // W read-only
    rig.windows = {{kV, kPg}, {kW, kPg}};
    rig.put(0x20000, pattern(kPg, 5));
    PB b;
    b.set_regs(1, {0, static_cast<int64_t>(kW), 256, static_cast<int64_t>(kV)});
    b.load(1, 2, 3);           // reads are allowed
    b.store(1, 4, 3);          // V is writable: stays stored
    b.store(1, 2, 3, 0, 128);  // pc 6: faults at W + 128
    b.halt();
    EXPECT_EQ(rig.run_mapped(b.finish()), SPYRE_ENGINE_ERR_MMU_FAULT);
    EXPECT_EQ(rig.res.error, SPYRE_ENGINE_ERR_MMU_FAULT);
    EXPECT_EQ(rig.res.core, 0);
    EXPECT_EQ(rig.res.pc, 6u);
    EXPECT_EQ(rig.res.fault_va, kW + 128);
    EXPECT_EQ(rig.res.fault_access, SPYRE_ENGINE_ACCESS_WRITE);
    EXPECT_NE(std::strstr(rig.res.message, "MMU fault at VA 0x1000100080"), nullptr)
        << rig.res.message;
    EXPECT_NE(std::strstr(rig.res.message, "read-only"), nullptr) << rig.res.message;
    EXPECT_STREQ(spyre_engine_error_name(SPYRE_ENGINE_ERR_MMU_FAULT), "MMU_FAULT");
    const auto w = pattern(kPg, 5);
    EXPECT_EQ(rig.bytes(0x20000, kPg), w);  // nothing of the faulting store
    EXPECT_EQ(rig.bytes(0x8000, 256), std::vector<uint8_t>(w.begin(), w.begin() + 256));
    EXPECT_EQ(rig.res.ddr_write_bytes, 256u);  // statistics up to the fault
}

TEST(Translate, UnmappedReadFaultsAtFirstByte) {
    MapRig rig;
    rig.maps = {{kV, 0x8000, kPg, 0, 0}, {kV + 2 * kPg, 0x9000, kPg, 0, 0}};
    rig.windows = {{kV, 3 * kPg}};
    // 8 KiB from V + 2 KiB: page 1 is a hole
    EXPECT_EQ(rig.run_mapped(copy_prog(kV + 2048, kV, 2 * kPg)), SPYRE_ENGINE_ERR_MMU_FAULT);
    EXPECT_EQ(rig.res.fault_va, kV + kPg);
    EXPECT_EQ(rig.res.fault_access, SPYRE_ENGINE_ACCESS_READ);
    EXPECT_EQ(rig.res.pc, 4u);
    // the same in a timing-only run: no data, same checks
    rig.timing_only = true;
    EXPECT_EQ(rig.run_mapped(copy_prog(kV + 2048, kV, 2 * kPg)), SPYRE_ENGINE_ERR_MMU_FAULT);
    EXPECT_EQ(rig.res.fault_va, kV + kPg);
    // no runs at all: every access faults
    rig.timing_only = false;
    rig.maps.clear();
    EXPECT_EQ(rig.run_mapped(copy_prog(kV, kV, 128)), SPYRE_ENGINE_ERR_MMU_FAULT);
    EXPECT_EQ(rig.res.fault_va, kV);
}

TEST(Translate, WindowAndSpanCheckedFirst) {
    MapRig rig;
    rig.maps = {{kV, 0x8000, 4 * kPg, SPYRE_ENGINE_MAP_WRITE, 0}};
    rig.windows = {{kV, kPg}};
    // mapped but outside the window: a window error, not a fault
    EXPECT_EQ(rig.run_mapped(copy_prog(kV + kPg, kV, 128)), SPYRE_ENGINE_ERR_DDR_WINDOW);
    EXPECT_EQ(rig.res.fault_va, 0u);
    // a window far beyond mem_size is fine when translated
    rig.windows = {{kV, 4 * kPg}};
    EXPECT_EQ(rig.run_mapped(copy_prog(kV + kPg, kV, 128)), 0) << rig.res.message;
}

TEST(Translate, InvalidMappings) {
    MapRig rig;
    const auto p = copy_prog(kV, kV, 128);
    rig.windows = {{kV, kPg}};
    const std::vector<std::vector<spyre_engine_mapping>> bad = {
        {{kV, 0, 0, 0, 0}},                                  // empty run
        {{kV + kPg, 0, kPg, 0, 0}, {kV, kPg, kPg, 0, 0}},    // unsorted
        {{kV, 0, 2 * kPg, 0, 0}, {kV + kPg, 0, kPg, 0, 0}},  // overlapping
        {{kV, (1u << 20) - kPg + 1, kPg, 0, 0}},             // beyond memory
        {{kV, 0, kPg, 2, 0}},                                // unknown flag
        {{UINT64_MAX - 10, 0, kPg, 0, 0}},                   // wraps
    };
    for (const auto& m : bad) {
        rig.maps = m;
        EXPECT_EQ(rig.run_mapped(p), SPYRE_ENGINE_ERR_INVALID_ARGUMENT) << rig.res.message;
    }
}

TEST(Translate, PhysicalJobsUnchanged) {
    Rig rig(2, 1u << 20);
    rig.put(0x1000, pattern(256, 3));
    ASSERT_EQ(rig.run(copy_prog(0x1000, 0x3000, 256)), 0);
    EXPECT_EQ(rig.get<uint8_t>(0x3000, 256), pattern(256, 3));
    // physical windows are still bounded by memory
    rig.windows = {{kV, kPg}};
    EXPECT_EQ(rig.run(copy_prog(kV, kV, 128)), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace spyre::test
