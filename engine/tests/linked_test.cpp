// SPDX-License-Identifier: MIT
// Linked launches (spyre_engine_run_linked): parts run back to back as one job give the data of
// separate runs, pay one launch overhead and a barrier and scratchpad clear between parts,
// start with their own registers, cores and a zero LX, and a failing part is named.
#include <gtest/gtest.h>

#include <random>

#include "spyre/programs/matmul.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

struct Part {
    std::vector<uint8_t> prog;
    std::vector<uint64_t> args;
    uint32_t cores;
};

spyre_engine_job make_job(Rig& rig, const Part& p) {
    spyre_engine_job job{};
    job.program = p.prog.data();
    job.program_size = p.prog.size();
    job.args = p.args.data();
    job.num_args = static_cast<uint32_t>(p.args.size());
    job.num_cores = p.cores;
    job.mem = rig.mem.data();
    job.mem_size = rig.mem.size();
    job.windows = rig.windows.data();
    job.num_windows = static_cast<uint32_t>(rig.windows.size());
    return job;
}

// C = A x B (fp16, 128 cubed) on 32 cores; A and B placed in rig memory.
Part matmul_part(Rig& rig) {
    const uint64_t M = 128, N = 128, K = 128;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> a(M * K), b(K * N);
    for (auto& x : a) x = round_to(DType::F16, d(rng));
    for (auto& x : b) x = round_to(DType::F16, d(rng));
    rig.put_as(DType::F16, 0x10000, a);
    rig.put_as(DType::F16, 0x40000, b);
    return {programs::build_matmul_program(M, N, K, 32), {0x10000, 0x40000, 0x80000}, 32};
}

// Each core stores one stick at base + 128 x core id: r1, r2 and r5 as the part starts, the
// LX word at 24 as the part found it (0: the earlier part's `tag` was cleared), zeros; then
// leaves `tag` in that word.
Part regs_part(uint64_t base, int64_t tag, uint32_t cores) {
    PB b;
    b.li(3, 24);
    b.lxld(6, 3);
    b.li(3, 0);
    b.li(10, 0);
    for (int64_t off = 40; off < 128; off += 8) b.lxst(3, 10, off);  // the stick's rest
    b.lxst(3, 1, 0);
    b.lxst(3, 2, 8);
    b.lxst(3, 5, 16);
    b.lxst(3, 6, 32);
    b.li(5, tag);
    b.lxst(3, 5, 24);
    b.muli(9, 1, 128);
    b.addi(9, 9, static_cast<int64_t>(base));
    b.li(12, 128);
    b.store(3, 9, 12);
    b.halt();
    return {b.finish(), {}, cores};
}

// A part that fails: ARG 5 of a launch without arguments.
Part bad_part() {
    PB b;
    b.arg(4, 5);
    b.halt();
    return {b.finish(), {}, 8};
}

int run_linked(Rig& rig, const std::vector<Part>& parts) {
    std::vector<spyre_engine_job> jobs;
    for (const Part& p : parts) jobs.push_back(make_job(rig, p));
    return spyre_engine_run_linked(rig.eng, jobs.data(), static_cast<uint32_t>(jobs.size()),
                                   &rig.res);
}

TEST(Linked, SamePartsAsSeparateRunsOneOverheadAndBarriers) {
    Rig sep(2, 4u << 20), lnk(2, 4u << 20);
    const std::vector<Part> parts = {matmul_part(sep), regs_part(0x200000, 7, 32),
                                     regs_part(0x300000, 9, 4)};
    matmul_part(lnk);
    ASSERT_EQ(sep.mem, lnk.mem);
    uint64_t sum = 0, instr = 0, ddr_w = 0;
    for (const Part& p : parts) {
        const spyre_engine_job job = make_job(sep, p);
        ASSERT_EQ(spyre_engine_run(sep.eng, &job, &sep.res), 0) << sep.res.message;
        sum += sep.res.total_cycles;
        instr += sep.res.instructions;
        ddr_w += sep.res.ddr_write_bytes;
    }
    ASSERT_EQ(run_linked(lnk, parts), 0) << lnk.res.message;
    EXPECT_EQ(sep.mem, lnk.mem);
    const uint64_t overhead = lnk.cfg.launch_overhead_cycles, bar = lnk.cfg.barrier_latency;
    ASSERT_GT(overhead, bar);
    EXPECT_EQ(lnk.res.total_cycles, sum - 2 * overhead + lnk.res.link_cycles);
    // two barriers and clears: at least part 1's stick, at most the whole usable scratchpad
    const uint64_t most = spyre_engine_lx_usable(&lnk.cfg) / 128 / lnk.cfg.vec_lx_sticks_per_cycle;
    EXPECT_GE(lnk.res.link_cycles, 2 * bar + 2);
    EXPECT_LE(lnk.res.link_cycles, 2 * bar + 2 * most);
    EXPECT_LT(lnk.res.total_cycles, sum);
    EXPECT_EQ(lnk.res.instructions, instr);
    EXPECT_EQ(lnk.res.ddr_write_bytes, ddr_w);
    EXPECT_EQ(lnk.res.num_cores, 32u);
    EXPECT_EQ(lnk.res.part, 2u);
    // cores 0-3 halt in the last part, the others in the second
    EXPECT_EQ(lnk.res.cores[31].idle_cycles, lnk.res.total_cycles - lnk.res.cores[31].end_cycle);
    EXPECT_GT(lnk.res.cores[31].idle_cycles, 0u);
    EXPECT_LT(lnk.res.cores[0].end_cycle, lnk.res.total_cycles + 1);
    EXPECT_GT(lnk.res.cores[0].end_cycle, lnk.res.cores[31].end_cycle);
}

TEST(Linked, OnePartIsARun) {
    Rig a(2, 4u << 20), b(2, 4u << 20);
    const Part p = matmul_part(a);
    matmul_part(b);
    const spyre_engine_job job = make_job(a, p);
    ASSERT_EQ(spyre_engine_run(a.eng, &job, &a.res), 0) << a.res.message;
    ASSERT_EQ(run_linked(b, {p}), 0) << b.res.message;
    EXPECT_EQ(a.mem, b.mem);
    EXPECT_EQ(std::memcmp(&a.res, &b.res, sizeof a.res), 0);
}

// Registers, cores and a zero scratchpad are the part's own.
TEST(Linked, PartsStartAfresh) {
    Rig rig(2, 4u << 20);
    ASSERT_EQ(run_linked(rig, {regs_part(0x200000, 7, 4), regs_part(0x300000, 9, 16)}), 0)
        << rig.res.message;
    for (uint64_t k = 0; k < 16; ++k) {
        const auto s = rig.get<uint64_t>(0x300000 + 128 * k, 5);
        EXPECT_EQ(s[0], k);
        EXPECT_EQ(s[1], 16u);
        EXPECT_EQ(s[2], 0u) << "r5 reset";
        EXPECT_EQ(s[4], 0u) << "LX cleared, core " << k;
    }
    // between the parts: the barrier and the clear of the one stick each core wrote
    EXPECT_EQ(rig.res.link_cycles, rig.cfg.barrier_latency + 1u);
    // the next job sees LX zero again
    const Part p = regs_part(0x100000, 1, 16);
    const spyre_engine_job job = make_job(rig, p);
    ASSERT_EQ(spyre_engine_run(rig.eng, &job, &rig.res), 0) << rig.res.message;
    for (uint64_t k = 0; k < 16; ++k)
        EXPECT_EQ(rig.get<uint64_t>(0x100000 + 128 * k + 32, 1)[0], 0u);
}

TEST(Linked, FaultNamesItsPartAndStopsTheJob) {
    Rig rig(2, 4u << 20);
    EXPECT_EQ(run_linked(rig, {regs_part(0x200000, 7, 4), bad_part(), regs_part(0x300000, 9, 4)}),
              SPYRE_ENGINE_ERR_BAD_ARG);
    EXPECT_EQ(rig.res.status, -1);
    EXPECT_EQ(rig.res.error, SPYRE_ENGINE_ERR_BAD_ARG);
    EXPECT_EQ(rig.res.part, 1u);
    EXPECT_GE(rig.res.core, 0);
    EXPECT_NE(std::string(rig.res.message).find("ARG"), std::string::npos) << rig.res.message;
    EXPECT_EQ(rig.get<uint64_t>(0x200000, 1)[0], 0u);  // part 0 ran: core 0 stored its id 0
    EXPECT_EQ(rig.get<uint64_t>(0x200000 + 128, 1)[0], 1u);
    EXPECT_EQ(rig.get<uint64_t>(0x300000 + 128, 1)[0], 0u);  // part 2 never ran
    EXPECT_EQ(rig.get<uint64_t>(0x300000 + 128 + 8, 1)[0], 0u);
}

// A linked job cannot be sliced: it drops a preempted job (nothing left to resume); its cancel
// flag stops it like a job.
TEST(Linked, DropsAPreemptedJobAndHonoursCancel) {
    Rig rig(2, 4u << 20);
    const Part p = regs_part(0x200000, 7, 4);
    spyre_engine_job job = make_job(rig, p);
    ASSERT_EQ(spyre_engine_run_slice(rig.eng, &job, 2, &rig.res), SPYRE_ENGINE_PREEMPTED);
    ASSERT_EQ(run_linked(rig, {p, p}), 0) << rig.res.message;
    EXPECT_EQ(spyre_engine_run_slice(rig.eng, nullptr, 2, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    int32_t cancel = 1;
    spyre_engine_job jobs[2] = {make_job(rig, p), make_job(rig, p)};
    jobs[0].cancel = jobs[1].cancel = &cancel;
    EXPECT_EQ(spyre_engine_run_linked(rig.eng, jobs, 2, &rig.res), SPYRE_ENGINE_ERR_CANCELLED);
    EXPECT_EQ(rig.res.part, 0u);
    jobs[1].cancel = nullptr;  // parts share the cancel flag
    EXPECT_EQ(spyre_engine_run_linked(rig.eng, jobs, 2, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
}

TEST(Linked, Bounds) {
    Rig rig(2, 4u << 20);
    const Part p = regs_part(0x200000, 7, 2);
    std::vector<Part> many(SPYRE_ENGINE_MAX_PARTS + 1, p);
    EXPECT_EQ(run_linked(rig, many), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    many.pop_back();
    EXPECT_EQ(run_linked(rig, many), 0) << rig.res.message;
    EXPECT_EQ(rig.res.part, SPYRE_ENGINE_MAX_PARTS - 1u);
    spyre_engine_job jobs[2] = {make_job(rig, p), make_job(rig, p)};
    EXPECT_EQ(spyre_engine_run_linked(rig.eng, jobs, 0, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    jobs[1].mem_size -= 128;  // parts must share the device memory
    EXPECT_EQ(spyre_engine_run_linked(rig.eng, jobs, 2, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_engine_run_linked(nullptr, jobs, 1, &rig.res),
              SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace spyre::test
