// SPDX-License-Identifier: MIT
// Time slicing (spyre_engine_run_slice): a job stopped every few instructions and resumed gives
// exactly the data, statistics and cycles of the same job run in one go; a preempted job can be
// discarded; resuming needs a preempted job.
#include <gtest/gtest.h>

#include <random>

#include "spyre/programs/matmul.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Red;
using isa::VUn;

struct Case {
    std::vector<uint8_t> prog;
    std::vector<uint64_t> args;
    uint32_t cores;
    std::vector<uint8_t> mem;  // initial device memory (4 MiB)
};

spyre_engine_job make_job(Rig& rig, const Case& c) {
    spyre_engine_job job{};
    job.program = c.prog.data();
    job.program_size = c.prog.size();
    job.args = c.args.data();
    job.num_args = static_cast<uint32_t>(c.args.size());
    job.num_cores = c.cores;
    job.mem = rig.mem.data();
    job.mem_size = rig.mem.size();
    job.windows = rig.windows.data();
    job.num_windows = static_cast<uint32_t>(rig.windows.size());
    return job;
}

// Runs the case in slices of `slice` instructions; returns the number of preemptions.
uint64_t run_sliced(Rig& rig, const Case& c, uint64_t slice, int* rc) {
    rig.mem = c.mem;
    const spyre_engine_job job = make_job(rig, c);
    uint64_t preempted = 0;
    int r = spyre_engine_run_slice(rig.eng, &job, slice, &rig.res);
    while (r == SPYRE_ENGINE_PREEMPTED) {
        ++preempted;
        EXPECT_LE(preempted, 10000000u);
        r = spyre_engine_run_slice(rig.eng, nullptr, slice, &rig.res);
    }
    *rc = r;
    return preempted;
}

Case matmul_case() {
    const uint64_t M = 128, N = 128, K = 128;
    Rig tmp(1, 4u << 20);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> a(M * K), b(K * N);
    for (auto& x : a) x = round_to(DType::F16, d(rng));
    for (auto& x : b) x = round_to(DType::F16, d(rng));
    tmp.put_as(DType::F16, 0x10000, a);
    tmp.put_as(DType::F16, 0x40000, b);
    return {programs::build_matmul_program(M, N, K, 32), {0x10000, 0x40000, 0x80000}, 32, tmp.mem};
}

// Ring sends both ways, an all-reduce, a barrier and a counted loop per core.
Case collective_case() {
    PB b;
    b.li(3, 0), b.li(4, 256), b.li(5, 0x1000), b.li(6, 0x2000);
    b.lxst(3, 1, 0);
    b.lxst(3, 2, 8);
    b.send(isa::Dir::NEXT, 3, 4);
    b.send(isa::Dir::PREV, 3, 4);
    b.recv(isa::Dir::NEXT, 5, 4);
    b.recv(isa::Dir::PREV, 6, 4);
    // r11 = sum over 200 iterations of (core id + i), kept in LX across the loop
    b.li(11, 0);
    b.loopi(200, 13);
    b.add(11, 11, 1);
    b.add(11, 11, 13);
    b.endloop();
    b.li(14, 0x3000);
    b.lxst(14, 11, 0);
    b.set_regs(26, {1, 1, 0, 0, 0});
    b.vun(VUn::COPY, DType::F32, DType::I32, 14, 14, 26);
    b.li(7, 0x4000), b.li(8, 8), b.li(15, 1);
    b.barrier();
    b.allreduce(Red::SUM, DType::F32, 7, 14, 15);
    b.muli(9, 1, 1024);
    b.addi(9, 9, 0x100000);
    b.li(12, 256);
    b.store(5, 9, 12);
    b.li(10, 0x2000);
    b.store(10, 9, 12, 0, 512);
    b.li(10, 0x4000);
    b.store(10, 9, 8, 0, 768);
    b.halt();
    return {b.finish(), {}, 32, std::vector<uint8_t>(4u << 20)};
}

void expect_same_as_unsliced(const Case& c) {
    Rig whole(2, 4u << 20);
    whole.mem = c.mem;
    const spyre_engine_job job = make_job(whole, c);
    ASSERT_EQ(spyre_engine_run(whole.eng, &job, &whole.res), 0) << whole.res.message;
    for (uint64_t slice : {1u, 7u, 300u}) {
        Rig rig(2, 4u << 20);
        int rc = -1;
        const uint64_t n = run_sliced(rig, c, slice, &rc);
        ASSERT_EQ(rc, 0) << rig.res.message;
        if (slice < whole.res.cores[0].instructions) EXPECT_GT(n, 0u) << "slice " << slice;
        EXPECT_EQ(rig.mem, whole.mem) << "slice " << slice;
        EXPECT_EQ(rig.res.total_cycles, whole.res.total_cycles) << "slice " << slice;
        EXPECT_EQ(std::memcmp(&rig.res, &whole.res, sizeof rig.res), 0) << "slice " << slice;
    }
}

TEST(Slice, MatmulSameAsUnsliced) { expect_same_as_unsliced(matmul_case()); }

TEST(Slice, CollectivesAndLoopsSameAsUnsliced) {
    const Case c = collective_case();
    expect_same_as_unsliced(c);
    // and the data are right: core k's loop sum is 200 k + 19900, all-reduced over 32 cores
    Rig rig(2, 4u << 20);
    int rc = -1;
    run_sliced(rig, c, 5, &rc);
    ASSERT_EQ(rc, 0) << rig.res.message;
    const float want = 200 * (31 * 32 / 2) + 32 * 19900;
    for (uint64_t k = 0; k < 32; ++k)
        EXPECT_EQ(rig.get<float>(0x100000 + 1024 * k + 768, 1)[0], want) << k;
}

TEST(Slice, PreemptedJobKeepsItsScratchpadAndCanBeDiscarded) {
    const Case c = collective_case();
    Rig rig(2, 4u << 20);
    rig.mem = c.mem;
    const spyre_engine_job job = make_job(rig, c);
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, &job, 20, &rig.res), SPYRE_ENGINE_PREEMPTED);
    // the cores wrote LX [0, 16) and received 256 bytes twice: a few sticks each
    const uint64_t used = spyre_engine_context_bytes(rig.eng);
    EXPECT_GE(used, 32u * 128);
    EXPECT_LE(used, 32u * 0x3000);
    spyre_engine_discard(rig.eng);
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, nullptr, 20, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    // a new job starts afresh (and a started job drops a preempted one)
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, &job, 20, &rig.res), SPYRE_ENGINE_PREEMPTED);
    int rc = -1;
    run_sliced(rig, c, 0, &rc);
    EXPECT_EQ(rc, 0) << rig.res.message;
}

// The preempt flag stops the job at the next instruction boundary of every core, whatever the
// slice; the job resumes once it is cleared and ends as if never stopped.
TEST(Slice, PreemptFlag) {
    const Case c = collective_case();
    Rig whole(2, 4u << 20);
    whole.mem = c.mem;
    const spyre_engine_job wjob = make_job(whole, c);
    ASSERT_EQ(spyre_engine_run(whole.eng, &wjob, &whole.res), 0) << whole.res.message;

    Rig rig(2, 4u << 20);
    rig.mem = c.mem;
    int32_t preempt = 1;
    spyre_engine_job job = make_job(rig, c);
    job.preempt = &preempt;
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, &job, 0, &rig.res), SPYRE_ENGINE_PREEMPTED);
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, nullptr, 0, &rig.res), SPYRE_ENGINE_PREEMPTED);
    preempt = 0;
    ASSERT_EQ(spyre_engine_run_slice(rig.eng, nullptr, 0, &rig.res), 0) << rig.res.message;
    EXPECT_EQ(rig.mem, whole.mem);
    EXPECT_EQ(std::memcmp(&rig.res, &whole.res, sizeof rig.res), 0);
}

TEST(Slice, CancelledWhilePreempted) {
    const Case c = collective_case();
    Rig rig(2, 4u << 20);
    rig.mem = c.mem;
    int32_t cancel = 0;
    spyre_engine_job job = make_job(rig, c);
    job.cancel = &cancel;
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, &job, 3, &rig.res), SPYRE_ENGINE_PREEMPTED);
    cancel = 1;
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, nullptr, 3, &rig.res), SPYRE_ENGINE_ERR_CANCELLED);
}

}  // namespace
}  // namespace spyre::test
