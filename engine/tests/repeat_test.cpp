// SPDX-License-Identifier: MIT
// Repeated jobs on one engine: the decoded-program cache and the timing cache must give every job
// exactly the results a fresh engine gives it, whatever ran before (a repeated program with other
// arguments, other data steering its control flow, a rewritten image at the same address).
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace spyre::test {
namespace {

// Core c loads arg0 bytes (times core id + 1) and then loops as many times as the word at DDR
// 0x8000 says, adding to a register; stores the register and the loaded bytes.
std::vector<uint8_t> data_steered() {
    PB b;
    b.arg(3, 0);
    b.addi(4, 1, 1);
    b.mul(3, 3, 4);  // bytes = arg0 * (core + 1)
    b.li(5, 0), b.li(6, 0x10000);
    b.load(5, 6, 3);
    b.li(7, 0x8000), b.li(8, 0x20000), b.li(9, 128);
    b.load(8, 7, 9);  // the trip count's stick
    b.lxld(10, 8);    // waits for that load
    b.li(11, 0);
    b.loop(10);
    b.addi(11, 11, 3);
    b.endloop();
    b.lxst(8, 11);
    b.muli(12, 1, 256);
    b.addi(12, 12, 0x40000);
    b.store(8, 12, 9);
    b.halt();
    return b.finish();
}

struct Job {
    std::vector<uint8_t> prog;
    std::vector<uint64_t> args;
    uint64_t trips;
    uint32_t cores;
};

void expect_same(const spyre_engine_result& got, const spyre_engine_result& want, int job) {
    EXPECT_EQ(got.error, want.error) << "job " << job;
    EXPECT_EQ(got.total_cycles, want.total_cycles) << "job " << job;
    EXPECT_EQ(got.instructions, want.instructions) << "job " << job;
    for (uint32_t c = 0; c < want.num_cores; ++c)
        EXPECT_EQ(std::memcmp(&got.cores[c], &want.cores[c], sizeof want.cores[c]), 0)
            << "job " << job << " core " << c;
}

TEST(Repeat, EveryJobGetsTheResultsOfAFreshEngine) {
    const auto steered = data_steered();
    PB other;
    other.li(3, 0), other.li(4, 0x10000), other.li(5, 4096);
    other.load(3, 4, 5);
    other.halt();
    const std::vector<Job> jobs = {
        {steered, {256}, 3, 4},  {steered, {256}, 3, 4},     {steered, {4096}, 3, 4},
        {steered, {256}, 40, 4}, {other.finish(), {}, 0, 2}, {steered, {256}, 3, 4},
        {steered, {256}, 3, 8},  {steered, {4096}, 3, 4},    {steered, {256}, 40, 4},
    };
    Rig warm;
    for (size_t j = 0; j < jobs.size(); ++j) {
        const Job& jb = jobs[j];
        auto run = [&](Rig& rig) {
            rig.put<uint64_t>(0x8000, {jb.trips});
            EXPECT_EQ(rig.run(jb.prog, jb.args, jb.cores), 0) << rig.res.message;
        };
        Rig fresh;
        run(fresh);
        run(warm);
        expect_same(warm.res, fresh.res, static_cast<int>(j));
        for (uint32_t c = 0; c < jb.cores && jb.trips; ++c)
            EXPECT_EQ(warm.get<uint64_t>(0x40000 + 256 * c, 1)[0], 3 * jb.trips) << j;
    }
}

TEST(Repeat, ARewrittenImageAtTheSameAddressRunsTheNewProgram) {
    Rig rig;
    std::vector<uint8_t> image;
    for (int64_t v : {5, 9, 5}) {
        PB b;
        b.li(3, 0x20000), b.li(4, v), b.li(5, 0x40000), b.li(6, 128);
        b.lxst(3, 4);
        b.store(3, 5, 6);
        b.halt();
        const auto p = b.finish();
        image.resize(p.size());
        std::memcpy(image.data(), p.data(), p.size());  // same buffer, new bytes
        ASSERT_EQ(rig.run(image), 0) << rig.res.message;
        EXPECT_EQ(rig.get<uint64_t>(0x40000, 1)[0], static_cast<uint64_t>(v));
    }
}

TEST(Repeat, AnImageThatFailedValidationIsNeverReused) {
    Rig rig;
    PB b;
    b.halt();
    const auto good = b.finish();
    auto bad = good;
    bad[0] ^= 0xff;  // magic
    ASSERT_EQ(rig.run(good), 0) << rig.res.message;
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(rig.run(bad), SPYRE_ENGINE_ERR_BAD_PROGRAM);
        // an empty image at a valid address is not the failed image's (emptied) entry
        spyre_engine_job job{};
        job.program = good.data();
        job.program_size = 0;
        job.num_cores = 1;
        job.mem = rig.mem.data();
        job.mem_size = rig.mem.size();
        job.windows = rig.windows.data();
        job.num_windows = 1;
        EXPECT_EQ(spyre_engine_run(rig.eng, &job, &rig.res), SPYRE_ENGINE_ERR_BAD_PROGRAM);
        EXPECT_EQ(rig.run(good), 0) << rig.res.message;
    }
}

}  // namespace
}  // namespace spyre::test
