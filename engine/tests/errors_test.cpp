// SPDX-License-Identifier: MIT
// Every error path reports the right code, core and instruction index; random programs never
// crash the engine.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace spyre::test {
namespace {

using isa::Op;

struct Expect {
    int code;
    int core;
    uint64_t pc;
};

void expect_error(Rig& rig, const std::vector<uint8_t>& prog, Expect e,
                  const std::vector<uint64_t>& args = {}, uint32_t cores = 1) {
    int rc = rig.run(prog, args, cores);
    EXPECT_EQ(rc, e.code) << spyre_engine_error_name(rc) << ": " << rig.res.message;
    EXPECT_EQ(rig.res.error, e.code);
    EXPECT_EQ(rig.res.status, -1);
    EXPECT_EQ(rig.res.core, e.core) << rig.res.message;
    EXPECT_EQ(rig.res.pc, e.pc) << rig.res.message;
    EXPECT_NE(rig.res.message[0], 0);
}

PB::Reg R(int r) { return static_cast<PB::Reg>(r); }

TEST(Errors, ApiMisuse) {
    Rig rig;
    spyre_engine_result res;
    EXPECT_EQ(spyre_engine_run(nullptr, nullptr, &res), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_engine_run(rig.eng, nullptr, nullptr), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    PB b;
    b.halt();
    auto p = b.finish();
    EXPECT_EQ(rig.run(p, {}, 33), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    rig.windows = {{rig.mem.size() - 64, 128}};
    EXPECT_EQ(rig.run(p), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    rig.windows = {{0, rig.mem.size()}};
    EXPECT_EQ(rig.run(p, std::vector<uint64_t>(17)), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(rig.run(p), 0);
    spyre_engine_config bad;
    spyre_engine_config_default(&bad);
    bad.num_cores = 0;
    EXPECT_EQ(spyre_engine_create(&bad), nullptr);
    bad.num_cores = 65;
    EXPECT_EQ(spyre_engine_create(&bad), nullptr);
    EXPECT_STREQ(spyre_engine_error_name(SPYRE_ENGINE_ERR_DEADLOCK), "DEADLOCK");
    EXPECT_STREQ(spyre_engine_error_name(999), "UNKNOWN");
}

TEST(Errors, BadHeader) {
    Rig rig;
    PB b;
    b.halt();
    auto good = b.finish();
    auto p = good;
    p[0] ^= 1;
    expect_error(rig, p, {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
    p = good;
    p[4] = 2;  // version
    expect_error(rig, p, {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
    p = good;
    p.push_back(0);
    expect_error(rig, p, {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
    p = good;
    p[12] = 1;  // flags
    expect_error(rig, p, {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
    p.assign(good.begin(), good.begin() + 20);
    expect_error(rig, p, {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
    PB empty;
    expect_error(rig, empty.finish(), {SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0});
}

TEST(Errors, StaticValidation) {
    Rig rig;
    {
        PB b;
        b.nop(), b.nop();
        b.emit(PB::mk(static_cast<Op>(0x7f)));
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_ILLEGAL_OPCODE, -1, 2});
    }
    {
        PB b;
        b.li(R(32), 1);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_REGISTER, -1, 0});
    }
    {
        PB b;
        b.nop();
        b.matmul(DType::F16, 3, 4, 5, 27, false);  // descriptor r27..r32
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_REGISTER, -1, 1});
    }
    {
        PB b;
        b.alu(static_cast<isa::Alu>(99), 3, 3, 3);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_OPERAND, -1, 0});
    }
    {
        PB b;
        b.matmul(DType::I32, 3, 4, 5, 20, false);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_OPERAND, -1, 0});
    }
    {
        PB b;
        b.emit(PB::mk(Op::NOP, 0, 1));  // reserved field
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_OPERAND, -1, 0});
    }
    {
        PB b;
        b.vbin(isa::VBin::ADD, static_cast<isa::Bcast>(9), DType::F32, DType::F32, 3, 4, 5, 20);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_OPERAND, -1, 0});
    }
    {
        PB b;
        b.nop();
        b.endloop();
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_LOOP, -1, 1});
    }
    {
        PB b;
        b.loopi(3);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_LOOP, -1, 0});
    }
    {
        PB b;
        for (int i = 0; i < 9; ++i) b.loopi(1);
        for (int i = 0; i < 9; ++i) b.endloop();
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_LOOP, -1, 8});
    }
    {
        PB b;
        b.emit(PB::mk(Op::BR, 0, 0, 0, 0, 0, 0, 0, 5));
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_BRANCH, -1, 0});
    }
    {
        PB b;  // jump from outside into a loop body
        auto in = b.label();
        b.jmp(in);
        b.loopi(2);
        b.bind(in);
        b.nop();
        b.endloop();
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_BRANCH, -1, 0});
    }
}

TEST(Errors, RuntimeFaultsNameCoreAndPc) {
    Rig rig;
    {
        PB b;
        b.nop();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_NO_HALT, 0, 1});
    }
    {
        PB b;
        b.arg(3, 2);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_BAD_ARG, 0, 0}, {1, 2});
    }
    {
        PB b;  // only core 5 divides by zero
        auto skip = b.label();
        b.li(3, 5);
        b.br(isa::Cond::NE, 1, 3, skip);
        b.alu(isa::Alu::DIVU, 4, 3, 0);
        b.bind(skip);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DIV_ZERO, 5, 2}, {}, 32);
    }
    {
        PB b;  // LX overflow: 256 bytes at 2 MiB - 128
        b.li(3, (2 << 20) - 128), b.li(4, 0), b.li(5, 256);
        b.load(3, 4, 5);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_LX_RANGE, 0, 3});
    }
    {
        PB b;  // MM C beyond LX
        b.li(3, (2 << 20) - 64), b.li(4, 0), b.li(5, 0);
        b.set_regs(20, {8, 64, 8, 16, 128, 256});
        b.matmul(DType::F16, 3, 4, 5, 20, false);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_LX_RANGE, 0, 9});
    }
    {
        PB b;  // misaligned DDR address
        b.li(3, 0), b.li(4, 0x40), b.li(5, 128);
        b.load(3, 4, 5);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_MISALIGNED, 0, 3});
    }
    {
        PB b;  // misaligned fp16 stride
        b.li(3, 0), b.li(4, 0), b.li(5, 0);
        b.set_regs(20, {8, 64, 8, 17, 128, 256});
        b.matmul(DType::F16, 3, 4, 5, 20, false);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_MISALIGNED, 0, 9});
    }
    {
        PB b;  // too large
        b.li(3, 0), b.li(4, 0), b.li(5, 0);
        b.set_regs(20, {5000, 1, 1, 0, 0, 0});
        b.matmul(DType::F16, 3, 4, 5, 20, false);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_TOO_LARGE, 0, 9});
    }
    {
        PB b;  // unaligned scalar LX access
        b.li(3, 4);
        b.lxld(4, 3);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_MISALIGNED, 0, 1});
    }
}

TEST(Errors, DeviceMemoryWindowsAndSpan) {
    Rig rig;
    rig.windows = {{0x10000, 0x1000}, {0x20000, 0x1000}};
    PB ok;
    ok.li(3, 0), ok.li(4, 0x10f80), ok.li(5, 128);
    ok.load(3, 4, 5);
    ok.li(4, 0x20000);
    ok.set_regs(20, {2, 0x800, 128, 1, 0, 0});  // two rows, both inside window 2
    ok.store(3, 4, 5, 20);
    ok.halt();
    EXPECT_EQ(rig.run(ok.finish()), 0) << rig.res.message;
    {
        PB b;  // one byte past the first window
        b.li(3, 0), b.li(4, 0x10f80), b.li(5, 129);
        b.load(3, 4, 5);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DDR_WINDOW, 0, 3});
    }
    {
        PB b;  // second row of a strided store falls between the windows
        b.li(3, 0), b.li(4, 0x10000), b.li(5, 128);
        b.set_regs(20, {2, 0x1000, 128, 1, 0, 0});
        b.store(3, 4, 5, 20);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DDR_WINDOW, 0, 9});
    }
    {
        PB b;  // huge address (wraps)
        b.li(3, 0), b.li(4, -128), b.li(5, 256);
        b.load(3, 4, 5);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DDR_WINDOW, 0, 3});
    }
    // span: a 4 KiB span config makes the second window unreachable until SPAN moves it
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.span_bytes = 0x8000;
    c.num_threads = 1;
    Rig small(c);
    small.windows = {{0x10000, 0x1000}, {0x20000, 0x1000}};
    {
        PB b;
        b.li(3, 0), b.li(4, 0x20000), b.li(5, 128);
        b.load(3, 4, 5);
        b.halt();
        expect_error(small, b.finish(), {SPYRE_ENGINE_ERR_DDR_SPAN, 0, 3});
    }
    {
        PB b;
        b.li(3, 0), b.li(4, 0x20000), b.li(5, 128);
        b.span(4);
        b.load(3, 4, 5);
        b.halt();
        EXPECT_EQ(small.run(b.finish()), 0) << small.res.message;
    }
}

TEST(Errors, SynchronizationFaults) {
    Rig rig;
    {
        PB b;  // core 0 halts, the others wait at a barrier forever
        auto wait = b.label();
        b.br(isa::Cond::NE, 1, 0, wait);
        b.halt();
        b.bind(wait);
        b.barrier();
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DEADLOCK, 1, 2}, {}, 32);
    }
    {
        PB b;  // everybody receives, nobody sends
        b.li(3, 0), b.li(4, 128);
        b.recv(isa::Dir::NEXT, 3, 4);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_DEADLOCK, 0, 2}, {}, 4);
    }
    {
        PB b;  // odd cores in ALLRED, even cores at a barrier
        auto odd = b.label();
        b.alu(isa::Alu::AND, 3, 1, 0, 1);
        b.br(isa::Cond::NE, 3, 0, odd);
        b.barrier();
        b.halt();
        b.bind(odd);
        b.li(4, 16);
        b.allreduce(isa::Red::SUM, DType::F32, 0, 0, 4);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, 1, 5}, {}, 4);
    }
    {
        PB b;  // receive size differs from the message size
        b.li(3, 0), b.li(4, 128), b.li(5, 256);
        b.send(isa::Dir::NEXT, 3, 4);
        b.recv(isa::Dir::NEXT, 3, 5);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_RING, 0, 4}, {}, 2);
    }
    {
        PB b;  // unbounded sends with nobody receiving overflow the ring buffer
        b.li(3, 0), b.li(4, 1 << 20);
        b.loopi(100);
        b.send(isa::Dir::NEXT, 3, 4);
        b.endloop();
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_RING, 0, 3}, {}, 2);
    }
}

TEST(Errors, TimedOperationsPerJobAreBounded) {
    // The cycle model replays a job's recorded operations after it: a program that would record
    // more than the bound (here 3M tiny vector ops) stops with INSTR_BUDGET instead of growing
    // host memory without limit.
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_cores = 1;
    c.max_instructions = 0;
    c.max_cycles = 0;
    Rig rig(c);
    PB b;
    b.li(3, 0);
    b.set_regs(20, {1, 1, 128, 128});
    b.loopi(3000000);
    b.vun(isa::VUn::NEG, DType::F32, DType::F32, 3, 3, 20);
    b.endloop();
    b.halt();
    EXPECT_EQ(rig.run(b.finish()), SPYRE_ENGINE_ERR_INSTR_BUDGET);
    EXPECT_NE(std::string(rig.res.message).find("timed operations"), std::string::npos)
        << rig.res.message;
}

TEST(Errors, BudgetsAndCancel) {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_threads = 2;
    c.max_instructions = 100000;
    c.max_cycles = 1000000;
    Rig rig(c);
    {
        PB b;  // infinite loop
        auto top = b.label();
        b.bind(top);
        b.addi(3, 3, 1);
        b.jmp(top);
        b.halt();
        expect_error(rig, b.finish(), {SPYRE_ENGINE_ERR_INSTR_BUDGET, 0, 0}, {}, 32);
    }
    {
        PB b;  // a long matmul sequence exceeds the cycle budget
        b.li(3, 0);
        b.set_regs(20, {512, 512, 512, 0, 0, 0});
        b.loopi(100);
        b.matmul(DType::F16, 3, 3, 3, 20, true);
        b.endloop();
        b.halt();
        int rc = rig.run(b.finish());
        EXPECT_EQ(rc, SPYRE_ENGINE_ERR_CYCLE_BUDGET) << rig.res.message;
        EXPECT_EQ(rig.res.pc, 8u);
    }
    {
        spyre_engine_config c2 = c;
        c2.max_instructions = 0;  // unlimited
        c2.max_cycles = 0;
        Rig r2(c2);
        PB b;
        auto top = b.label();
        b.bind(top);
        b.jmp(top);
        b.halt();
        auto prog = b.finish();
        std::thread killer([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            spyre_engine_cancel(r2.eng);
        });
        int rc = r2.run(prog, {}, 4);
        killer.join();
        EXPECT_EQ(rc, SPYRE_ENGINE_ERR_CANCELLED) << r2.res.message;
    }
}

// Fields each opcode uses: dt, a, b, c, d, func, flags, imm (bit 0..7), per Documentation/isa.md.
uint8_t field_mask(uint8_t op) {
    switch (op) {
        case 0x02:
        case 0x03:
            return 2 | 128;
        case 0x04:
            return 2 | 4 | 8 | 32 | 128;
        case 0x05:
            return 4 | 8 | 32 | 128;
        case 0x06:
        case 0x08:
            return 2 | 4 | 128;
        case 0x09:
            return 4 | 8 | 128;
        case 0x0a:
            return 4 | 128;
        case 0x10:
        case 0x11:
            return 2 | 4 | 8 | 16 | 128;
        case 0x20:
            return 1 | 2 | 4 | 8 | 16 | 64;
        case 0x21:
            return 1 | 2 | 4 | 16 | 32 | 128;
        case 0x22:
            return 0xff;
        case 0x23:
            return 1 | 2 | 4 | 16 | 32 | 64;
        case 0x30:
        case 0x31:
            return 2 | 8 | 32;
        case 0x32:
            return 1 | 2 | 4 | 8 | 32;
        default:
            return 0;
    }
}

// Random programs (valid opcodes with random fields, and random byte mutations of a valid
// program) must end with a status, never crash or hang.
TEST(Fuzz, RandomProgramsNeverCrash) {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_threads = 2;
    c.num_cores = 4;
    c.max_instructions = 5000;
    c.max_cycles = 200000;
    Rig rig(c, 1 << 20);
    rig.windows = {{0, 1 << 19}, {0x90000, 0x1000}};
    std::mt19937_64 rng(12345);
    const uint8_t ops[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
                           0x10, 0x11, 0x20, 0x21, 0x22, 0x23, 0x30, 0x31, 0x32, 0x33};
    auto small = [&](int bits) { return static_cast<uint8_t>(rng() & ((1u << bits) - 1)); };
    int completed = 0, failed = 0;
    std::map<int, int> codes;
    for (int iter = 0; iter < 3000; ++iter) {
        PB b;
        // seed registers with "interesting" values
        const int64_t vals[] = {
            0, 1, 2, 3, 7, 8, 64, 100, 128, 256, 4096, 65536, (2 << 20) - 128, -1, -128, 1 << 30};
        for (int r = 3; r < 32; ++r) b.li(static_cast<uint8_t>(r), vals[rng() % std::size(vals)]);
        const int n = 1 + rng() % 24;
        int open_loops = 0;
        for (int i = 0; i < n; ++i) {
            isa::Instr in;
            in.op = ops[rng() % std::size(ops)];
            in.dt = rng() % 3 ? small(3) | (small(2) << 4) : small(8);
            in.a = small(5), in.b = small(5), in.c = small(5);
            in.d = rng() % 8 ? 20 + small(2) : small(6);
            in.func = small(rng() % 4 ? 2 : 8);
            in.flags = small(rng() % 4 ? 1 : 8);
            in.imm = rng() % 2 ? static_cast<int64_t>(rng() % 64) : static_cast<int64_t>(rng());
            if (rng() % 40) {  // mostly well-formed: clear the fields this opcode does not use
                const uint8_t m = field_mask(in.op);
                if (!(m & 1)) in.dt = 0;
                if (!(m & 2)) in.a = 0;
                if (!(m & 4)) in.b = 0;
                if (!(m & 8)) in.c = 0;
                if (!(m & 16)) in.d = 0;
                if (!(m & 32)) in.func = 0;
                if (!(m & 64)) in.flags = 0;
                if (!(m & 128)) in.imm = 0;
                in.func %= 3, in.flags %= 2;
                if (in.op == 0x20) in.dt = rng() % 4;
                if (in.op >= 0x21 && in.op <= 0x23) in.dt = (rng() % 5) | ((rng() % 5) << 4);
                if (in.op == 0x32) in.dt = rng() % 3;
                if (in.op == 0x03) in.imm &= 15;
                if (in.op == 0x05) in.imm = rng() % (n + 30);  // branch targets near the code
                if (in.op >= 0x21 && in.op <= 0x23) in.imm &= 0xffffffff;
            }
            if (rng() % 8) {  // mostly balanced loops
                if (in.op == 0x06) ++open_loops;
                if (in.op == 0x07 && open_loops-- == 0) in.op = 0x00, open_loops = 0;
            }
            b.emit(in);
        }
        while (open_loops-- > 0) b.endloop();
        b.halt();
        auto prog = b.finish();
        if (iter % 3 == 0) {  // mutate bytes, sometimes in the header
            for (int m = 0; m < 4; ++m)
                prog[rng() % prog.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        int rc = rig.run(prog, {0, 128, 4096}, 1 + rng() % 4);
        ASSERT_GE(rc, 0);
        ASSERT_LT(rc, SPYRE_ENGINE_ERR_COUNT);
        ASSERT_EQ(rc == 0, rig.res.status == 0);
        (rc == 0 ? completed : failed)++;
        if (codes[rc]++ < 3 && getenv("FUZZ_VERBOSE")) std::printf("%s\n", rig.res.message);
    }
    for (auto [code, cnt] : codes) std::printf("  %-20s %d\n", spyre_engine_error_name(code), cnt);
    RecordProperty("completed", completed);
    RecordProperty("failed", failed);
    EXPECT_GT(completed, 100);
    EXPECT_GT(failed, 100);
}

}  // namespace
}  // namespace spyre::test

// ---------------------------------------------------------------------------------------------
// Cancellation latency and host failures (fault containment in the card model)

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "../src/thread_pool.hpp"

namespace spyre::test {
namespace {

// A job of enormous instructions: MM 4096^3 with zero strides (tiny LX footprint), looped; one
// such MM takes seconds of host CPU, the loop minutes.
std::vector<uint8_t> huge_mm_program(DType t) {
    PB b;
    b.li(3, 32768);  // C
    b.li(4, 0);      // A
    b.li(5, 16384);  // B
    b.set_regs(20, {4096, 4096, 4096, 0, 0, 0});
    b.loopi(100);
    b.matmul(t, 3, 4, 5, 20, false);
    b.endloop();
    b.halt();
    return b.finish();
}

using Clock = std::chrono::steady_clock;
// CPU time of the whole process (every engine thread), in ms. A cancel's latency is judged on
// the CPU time the engine spends after the request, which a loaded host does not stretch (wall
// time also holds the time other processes had the cores: 72 ms at load 12, 0.1-2.4 ms quiet).
double process_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Runs the huge job, cancels it after 100 ms (through the job's flag or spyre_engine_cancel)
// and returns the CPU time the engine spent from the cancel request until the run returned.
double cancel_latency_ms(DType t, bool job_flag) {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_cores = 2;
    c.num_threads = 2;
    c.max_cycles = 0;
    c.max_instructions = 0;
    Rig rig(c);
    auto prog = huge_mm_program(t);
    spyre_engine_job job{};
    int32_t flag = 0;
    job.program = prog.data();
    job.program_size = prog.size();
    job.num_cores = 2;
    job.mem = rig.mem.data();
    job.mem_size = rig.mem.size();
    job.windows = rig.windows.data();
    job.num_windows = 1;
    job.cancel = job_flag ? &flag : nullptr;
    Clock::time_point asked;
    double asked_cpu = 0;
    std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        asked = Clock::now();
        asked_cpu = process_cpu_ms();
        if (job_flag)
            __atomic_store_n(&flag, 1, __ATOMIC_RELAXED);
        else
            spyre_engine_cancel(rig.eng);
    });
    int rc = spyre_engine_run(rig.eng, &job, &rig.res);
    const double done_cpu = process_cpu_ms();
    const Clock::time_point done = Clock::now();
    killer.join();
    EXPECT_EQ(rc, SPYRE_ENGINE_ERR_CANCELLED) << rig.res.message;
    const double cpu_ms = done_cpu - asked_cpu;
    std::printf("cancel latency (%s, %s): %.2f ms CPU, %.2f ms wall\n",
                t == DType::I8 ? "i8" : "f16", job_flag ? "job flag" : "spyre_engine_cancel",
                cpu_ms, std::chrono::duration<double, std::milli>(done - asked).count());
    return cpu_ms;
}

// Before the fix, a cancel took seconds of computing every time.
TEST(Cancel, HugeMatmulStopsWithin50ms) {
    EXPECT_LT(cancel_latency_ms(DType::F16, true), 50.0);
    EXPECT_LT(cancel_latency_ms(DType::F16, false), 50.0);
    EXPECT_LT(cancel_latency_ms(DType::I8, true), 50.0);
}

TEST(Cancel, FlagSetBeforeTheRunStarts) {
    Rig rig(2, 1u << 20, 2);
    auto prog = huge_mm_program(DType::F16);
    spyre_engine_job job{};
    int32_t flag = 1;
    job.program = prog.data();
    job.program_size = prog.size();
    job.num_cores = 2;
    job.mem = rig.mem.data();
    job.mem_size = rig.mem.size();
    job.windows = rig.windows.data();
    job.num_windows = 1;
    job.cancel = &flag;
    const double t0 = process_cpu_ms();
    EXPECT_EQ(spyre_engine_run(rig.eng, &job, &rig.res), SPYRE_ENGINE_ERR_CANCELLED);
    EXPECT_LT(process_cpu_ms() - t0, 50.0);
    // The next job (no flag) runs normally.
    PB b;
    b.halt();
    EXPECT_EQ(rig.run(b.finish(), {}, 2), SPYRE_ENGINE_OK) << rig.res.message;
}

TEST(Cancel, VectorKernelsPollTheFlag) {
    // One VUN EXP over 1024 x 512 fp32 per instruction, looped: cancel lands mid-loop.
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_cores = 1;
    c.num_threads = 1;
    c.max_cycles = 0;
    c.max_instructions = 0;
    Rig rig(c);
    PB b;
    b.li(3, 0);
    b.set_regs(20, {512, 512, 2048, 2048});  // 1 MiB: within the usable LX
    b.loopi(1000000);
    b.vun(isa::VUn::EXP, DType::F32, DType::F32, 3, 3, 20);
    b.endloop();
    b.halt();
    auto prog = b.finish();
    double asked_cpu = 0;
    std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        asked_cpu = process_cpu_ms();
        spyre_engine_cancel(rig.eng);
    });
    EXPECT_EQ(rig.run(prog), SPYRE_ENGINE_ERR_CANCELLED);
    const double done_cpu = process_cpu_ms();
    killer.join();
    std::printf("cancel latency (vector loop): %.2f ms CPU\n", done_cpu - asked_cpu);
    EXPECT_LT(done_cpu - asked_cpu, 50.0);
}

TEST(HostFailure, PoolThreadExceptionIsRethrownToTheCaller) {
    ThreadPool pool(4);
    const auto caller = std::this_thread::get_id();
    std::atomic<int> on_workers{0};
    for (int round = 0; round < 3; ++round) {
        bool thrown = false;
        try {
            pool.parallel_for(64, [&](size_t) {
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                if (std::this_thread::get_id() != caller) {
                    on_workers++;
                    throw std::bad_alloc();
                }
            });
        } catch (const std::bad_alloc&) {
            thrown = true;
        }
        EXPECT_TRUE(thrown);
    }
    EXPECT_GT(on_workers.load(), 0);
    // The pool still works.
    std::atomic<size_t> sum{0};
    pool.parallel_for(100, [&](size_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 4950u);
}

TEST(HostFailure, ExceptionInACoreBecomesAJobError) {
    setenv("SPYRE_ENGINE_TEST_THROW_CORE", "3", 1);
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    c.num_cores = 4;
    c.num_threads = 4;
    Rig rig(c);
    unsetenv("SPYRE_ENGINE_TEST_THROW_CORE");
    PB b;
    b.li(3, 1);
    b.halt();
    auto prog = b.finish();
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(rig.run(prog, {}, 4), SPYRE_ENGINE_ERR_NO_MEMORY);
        EXPECT_EQ(rig.res.status, -1);
        EXPECT_TRUE(std::strstr(rig.res.message, "test hook")) << rig.res.message;
    }
    // A job that does not reach core 3 runs.
    EXPECT_EQ(rig.run(prog, {}, 3), SPYRE_ENGINE_OK) << rig.res.message;
}

unsigned host_threads() {
    unsigned n = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "Threads: %u", &n) == 1) break;
        std::fclose(f);
    }
    return n;
}

TEST(HostFailure, PoolThreadsCappedByCores) {
    const unsigned before = host_threads();
    if (!before) GTEST_SKIP() << "no /proc/self/status";
    {
        spyre_engine_config c;
        spyre_engine_config_default(&c);
        c.num_cores = 1;
        c.num_threads = 0;  // one per host CPU, but only one core
        Rig rig(c);
        EXPECT_EQ(host_threads(), before);
    }
    {
        spyre_engine_config c;
        spyre_engine_config_default(&c);
        c.num_cores = 2;
        c.num_threads = 64;
        Rig rig(c);
        EXPECT_EQ(host_threads(), before + 1);
    }
}

}  // namespace
}  // namespace spyre::test
