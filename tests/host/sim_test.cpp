// The whole C API on the in-process simulator backend (SPYRE_BACKEND=sim): devices, memory,
// copies, program loading and launches checked against CPU references.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace {

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define EXPECT_SPYRE(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

std::string last() { return spyre_last_error(); }
#define EXPECT_MSG(substr) EXPECT_NE(last().find(substr), std::string::npos) << last()

// Selects the simulator for the test; every device opened in a test is closed by its end, so
// each test gets fresh simulated cards built from its environment.
class Sim : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        unsetenv("SPYRE_SIM_DEVICES");
        unsetenv("SPYRE_SIM_MEMORY");
    }
    void TearDown() override {
        for (auto* b : bufs_) spyre_free(b);
        for (auto* p : progs_) spyre_program_free(p);
        if (dev_) spyre_device_close(dev_);
        unsetenv("SPYRE_BACKEND");
        unsetenv("SPYRE_SIM_DEVICES");
        unsetenv("SPYRE_SIM_MEMORY");
    }
    spyre_device_t open(int index = 0) {
        EXPECT_SPYRE(spyre_device_open(index, &dev_));
        return dev_;
    }
    spyre_buffer_t alloc(uint64_t n) {
        spyre_buffer_t b = nullptr;
        EXPECT_SPYRE(spyre_malloc(dev_, n, &b));
        if (b) bufs_.push_back(b);
        return b;
    }
    spyre_program_t load(const std::vector<uint8_t>& img) {
        spyre_program_t p = nullptr;
        EXPECT_SPYRE(spyre_program_load(dev_, img.data(), img.size(), &p));
        if (p) progs_.push_back(p);
        return p;
    }
    static uint64_t addr(spyre_buffer_t b) {
        uint64_t a = 0;
        EXPECT_SPYRE(spyre_buffer_device_address(b, &a));
        return a;
    }
    template <typename T>
    spyre_buffer_t upload(const std::vector<T>& v) {
        spyre_buffer_t b = alloc(v.size() * sizeof(T));
        EXPECT_SPYRE(spyre_memcpy_htod(b, 0, v.data(), v.size() * sizeof(T)));
        return b;
    }
    template <typename T>
    std::vector<T> download(spyre_buffer_t b, size_t n) {
        std::vector<T> v(n);
        EXPECT_SPYRE(spyre_memcpy_dtoh(v.data(), b, 0, n * sizeof(T)));
        return v;
    }

    spyre_device_t dev_ = nullptr;
    std::vector<spyre_buffer_t> bufs_;
    std::vector<spyre_program_t> progs_;
};

// ---- devices ----

TEST_F(Sim, DeviceCountAndInfo) {
    int n = 0;
    ASSERT_SPYRE(spyre_get_device_count(&n));
    EXPECT_EQ(n, 1);
    setenv("SPYRE_SIM_DEVICES", "3", 1);
    ASSERT_SPYRE(spyre_get_device_count(&n));
    EXPECT_EQ(n, 3);
    open(2);
    spyre_device_info info;
    ASSERT_SPYRE(spyre_device_get_info(dev_, &info));
    EXPECT_STREQ(info.name, "spyre-sim2");
    EXPECT_EQ(info.index, 2);
    EXPECT_EQ(info.backend, SPYRE_BACKEND_SIM);
    EXPECT_STREQ(spyre_backend_string(static_cast<spyre_backend>(info.backend)), "sim");
    EXPECT_STREQ(info.driver_name, "spyre-sim");
    EXPECT_EQ(info.num_cores, 32u);
    EXPECT_EQ(info.lx_bytes, 2u * MiB);
    EXPECT_EQ(info.stick_bytes, 128u);
    EXPECT_EQ(info.clock_mhz, 1500u);
    EXPECT_EQ(info.devmem_total, 1ull << 30);
    EXPECT_TRUE(info.caps & SPYRE_DEVICE_CAP_LAUNCH);
    EXPECT_TRUE(info.caps & SPYRE_DEVICE_CAP_TELEMETRY);

    spyre_device_t d = nullptr;
    EXPECT_EQ(spyre_device_open(3, &d), SPYRE_ERROR_NO_DEVICE);
    EXPECT_MSG("device index 3 out of range: 3 simulated Spyre devices");
    setenv("SPYRE_SIM_DEVICES", "0", 1);
    EXPECT_EQ(spyre_get_device_count(&n), SPYRE_ERROR_NO_DEVICE);
    EXPECT_EQ(n, 0);
    EXPECT_MSG("SPYRE_SIM_DEVICES=0");
    setenv("SPYRE_SIM_DEVICES", "two", 1);
    EXPECT_EQ(spyre_get_device_count(&n), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("SPYRE_SIM_DEVICES=\"two\"");
}

TEST_F(Sim, BackendSelectionIsValidated) {
    setenv("SPYRE_BACKEND", "simulator", 1);
    int n = -1;
    EXPECT_EQ(spyre_get_device_count(&n), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("SPYRE_BACKEND=\"simulator\" is not a backend");
    spyre_device_t d = nullptr;
    EXPECT_EQ(spyre_device_open(0, &d), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(d, nullptr);
    EXPECT_STREQ(spyre_backend_string(SPYRE_BACKEND_KERNEL), "kernel");
    EXPECT_STREQ(spyre_backend_string(static_cast<spyre_backend>(7)), "unknown");
}

TEST_F(Sim, MemoryInfoAllocatorAndOutOfMemory) {
    setenv("SPYRE_SIM_MEMORY", "64M", 1);
    setenv("SPYRE_SUBALLOC_MAX", "0", 1);  // every buffer its own allocation: exact accounting
    open();
    uint64_t free0 = 0, total = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &free0, &total));
    EXPECT_EQ(total, 64 * MiB);
    EXPECT_EQ(free0, 64 * MiB);

    spyre_buffer_t a = alloc(100);  // rounded to a page
    uint64_t free1 = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &free1, nullptr));
    EXPECT_EQ(free1, free0 - 4 * KiB);
    uint64_t sz = 0;
    ASSERT_SPYRE(spyre_buffer_size(a, &sz));
    EXPECT_EQ(sz, 100u);

    // Four 16 MiB blocks cannot fit next to the small one; three can.
    std::vector<spyre_buffer_t> big;
    for (int i = 0; i < 3; ++i) big.push_back(alloc(16 * MiB));
    for (size_t i = 0; i < big.size(); ++i)
        for (size_t j = i + 1; j < big.size(); ++j) {
            uint64_t x = addr(big[i]), y = addr(big[j]);
            EXPECT_TRUE(x + 16 * MiB <= y || y + 16 * MiB <= x) << "overlapping buffers";
        }
    spyre_buffer_t b = nullptr;
    EXPECT_EQ(spyre_malloc(dev_, 16 * MiB, &b), SPYRE_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(b, nullptr);
    EXPECT_MSG("spyre_malloc: out of device memory on spyre-sim0: asked 16.0 MiB");
    EXPECT_MSG("free of 64.0 MiB");

    // Free the first and the third: 32 MiB free in total, but fragmented.
    spyre_free(big[0]);
    spyre_free(big[2]);
    std::erase(bufs_, big[0]);
    std::erase(bufs_, big[2]);
    spyre_mem_stats ms;
    ASSERT_SPYRE(spyre_device_get_mem_stats(dev_, &ms));
    EXPECT_EQ(ms.devmem_used, 16 * MiB + 4 * KiB);
    EXPECT_GE(ms.devmem_largest_free, 16 * MiB);
    EXPECT_LT(ms.devmem_largest_free, 32 * MiB);
    EXPECT_EQ(spyre_malloc(dev_, 32 * MiB, &b), SPYRE_ERROR_OUT_OF_MEMORY);
    EXPECT_MSG("largest free block");
    // Freed ranges coalesce: after freeing everything one allocation takes the whole card.
    for (auto* x : bufs_) spyre_free(x);
    bufs_.clear();
    ASSERT_SPYRE(spyre_device_get_mem_stats(dev_, &ms));
    EXPECT_EQ(ms.devmem_used, 0u);
    EXPECT_EQ(ms.devmem_largest_free, 64 * MiB);
    alloc(64 * MiB);
    EXPECT_EQ(spyre_malloc(dev_, 65 * MiB, &b), SPYRE_ERROR_OUT_OF_MEMORY);
    EXPECT_MSG("raise SPYRE_SIM_MEMORY");
    unsetenv("SPYRE_SUBALLOC_MAX");
}

TEST_F(Sim, SparseLargeCard) {
    setenv("SPYRE_SIM_MEMORY", "16G", 1);
    open();
    uint64_t total = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev_, nullptr, &total));
    EXPECT_EQ(total, 16ull << 30);
    spyre_buffer_t b = alloc(12ull << 30);  // untouched pages cost nothing
    const char msg[] = "far away";
    ASSERT_SPYRE(spyre_memcpy_htod(b, (12ull << 30) - sizeof msg, msg, sizeof msg));
    char back[sizeof msg] = {};
    ASSERT_SPYRE(spyre_memcpy_dtoh(back, b, (12ull << 30) - sizeof msg, sizeof msg));
    EXPECT_STREQ(back, msg);
    setenv("SPYRE_SIM_MEMORY", "lots", 1);  // read when a card is created: not now
    spyre_device_t d2 = nullptr;
    EXPECT_SPYRE(spyre_device_open(0, &d2));
    spyre_device_close(d2);
}

TEST_F(Sim, BadMemorySizeIsReported) {
    setenv("SPYRE_SIM_MEMORY", "lots", 1);
    spyre_device_t d = nullptr;
    EXPECT_EQ(spyre_device_open(0, &d), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("SPYRE_SIM_MEMORY=\"lots\"");
}

// ---- copies ----

void fill(std::vector<unsigned char>& v, unsigned seed) {
    for (size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<unsigned char>((i * 131 + seed) ^ (i >> 8));
}

TEST_F(Sim, CopiesOfOddSizesAndOffsets) {
    open();
    for (uint64_t size :
         {uint64_t(1), uint64_t(3), uint64_t(127), uint64_t(4095), uint64_t(4097), MiB + 7}) {
        for (uint64_t off : {uint64_t(0), uint64_t(1), uint64_t(4093)}) {
            SCOPED_TRACE("size " + std::to_string(size) + " offset " + std::to_string(off));
            spyre_buffer_t b = alloc(size + off + 5);
            spyre_buffer_t c = alloc(size + 3);
            std::vector<unsigned char> in(size), out(size + 2, 0xee);
            fill(in, static_cast<unsigned>(size + off));
            ASSERT_SPYRE(spyre_memcpy_htod(b, off, in.data(), size));
            ASSERT_SPYRE(spyre_memcpy_dtod(c, 3, b, off, size));
            ASSERT_SPYRE(spyre_memcpy_dtoh(out.data() + 1, c, 3, size));
            EXPECT_EQ(0, std::memcmp(out.data() + 1, in.data(), size));
            EXPECT_EQ(out[0], 0xee);
            EXPECT_EQ(out[size + 1], 0xee) << "copy wrote past its end";
        }
    }
    // Range checks as on the kernel backend.
    spyre_buffer_t b = alloc(100);
    char x[200] = {};
    EXPECT_EQ(spyre_memcpy_htod(b, 50, x, 51), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("destination offset 50 + size 51 exceeds destination buffer size 100");
    EXPECT_EQ(spyre_memcpy_dtoh(x, b, UINT64_MAX, 2), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_memcpy_dtod(b, 0, b, 10, 20), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("overlap");
    EXPECT_SPYRE(spyre_memcpy_dtod(b, 0, b, 50, 50));
}

TEST_F(Sim, PinnedHostMemoryMapAndTelemetry) {
    open();
    spyre_telemetry t0, t1;
    ASSERT_SPYRE(spyre_device_get_telemetry(dev_, &t0));
    void* host = nullptr;
    ASSERT_SPYRE(spyre_host_alloc(dev_, 10000, &host));
    spyre_mem_stats ms;
    ASSERT_SPYRE(spyre_device_get_mem_stats(dev_, &ms));
    EXPECT_GE(ms.host_buffer_bytes, 10000u);
    std::memset(host, 0x5a, 10000);
    spyre_buffer_t b = alloc(10000);
    ASSERT_SPYRE(spyre_memcpy_htod(b, 0, host, 10000));
    void* p = nullptr;
    ASSERT_SPYRE(spyre_buffer_map(b, &p));
    EXPECT_EQ(static_cast<unsigned char*>(p)[9999], 0x5a);
    static_cast<unsigned char*>(p)[17] = 0x11;
    unsigned char v = 0;
    ASSERT_SPYRE(spyre_memcpy_dtoh(&v, b, 17, 1));
    EXPECT_EQ(v, 0x11);
    ASSERT_SPYRE(spyre_device_get_telemetry(dev_, &t1));
    EXPECT_EQ(t1.h2d_bytes - t0.h2d_bytes, 10000u);
    EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, 1u);
    EXPECT_EQ(t1.cmds_completed - t0.cmds_completed, 2u);
    int local = 0;
    EXPECT_EQ(spyre_host_free(dev_, &local), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("is not a pointer returned by spyre_host_alloc() on spyre-sim0");
    EXPECT_SPYRE(spyre_host_free(dev_, host));
    EXPECT_SPYRE(spyre_device_synchronize(dev_));
}

TEST_F(Sim, CardsAreSharedBetweenOpensAndBuffersOutliveHandles) {
    open();
    spyre_device_t d2 = nullptr;
    ASSERT_SPYRE(spyre_device_open(0, &d2));
    spyre_buffer_t b = nullptr;
    ASSERT_SPYRE(spyre_malloc(d2, 8 * MiB, &b));
    uint64_t free = 0, total = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &free, &total));
    EXPECT_EQ(total - free, 8 * MiB) << "the other open's buffer is not accounted";
    ASSERT_SPYRE(spyre_device_close(d2));
    const char msg[] = "still here";
    EXPECT_SPYRE(spyre_memcpy_htod(b, 0, msg, sizeof msg));
    EXPECT_SPYRE(spyre_free(b));
}

// ---- programs ----

TEST_F(Sim, ProgramLoadRejectsMalformedImages) {
    open();
    std::vector<uint8_t> good = spyre_test::build_add_program(64);
    spyre_program_t p = reinterpret_cast<spyre_program_t>(0x1);
    auto expect_bad = [&](std::vector<uint8_t> img, const std::string& why) {
        SCOPED_TRACE(why);
        p = reinterpret_cast<spyre_program_t>(0x1);
        EXPECT_EQ(spyre_program_load(dev_, img.data(), img.size(), &p), SPYRE_ERROR_PROGRAM);
        EXPECT_EQ(p, nullptr);
        EXPECT_MSG(why);
        EXPECT_MSG("spyre_program_load: ");
    };
    auto img = good;
    img[0] = 'X';
    expect_bad(img, "not a Spyre program image: magic 0x50595058, expected 0x50595053");
    expect_bad(std::vector<uint8_t>(good.begin(), good.begin() + 20),
               "program image truncated: 20 bytes, shorter than the 32-byte header");
    expect_bad(std::vector<uint8_t>(good.begin(), good.end() - 16),
               "program image truncated: " + std::to_string(good.size() - 16) +
                   " bytes, its header announces");
    img = good;
    img[4] = 2;
    expect_bad(img, "unsupported program format version 2");
    img = good;
    img.push_back(0);
    expect_bad(img, "1 trailing bytes");
    img = good;
    img[12] = 1;
    expect_bad(img, "program header flags 0x1 must be 0");
    img = good;
    img[20] = 7;
    expect_bad(img, "reserved byte 20");
    img = good;
    std::memset(img.data() + 8, 0, 4);
    expect_bad(img, "bad instruction count 0");

    EXPECT_EQ(spyre_program_load(dev_, nullptr, 64, &p), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_program_load(nullptr, good.data(), good.size(), &p),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_program_load(dev_, good.data(), good.size(), nullptr),
              SPYRE_ERROR_INVALID_ARGUMENT);

    // A good image occupies device memory until it is freed.
    uint64_t f0 = 0, f1 = 0, f2 = 0;
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &f0, nullptr));
    ASSERT_SPYRE(spyre_program_load(dev_, good.data(), good.size(), &p));
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &f1, nullptr));
    EXPECT_LT(f1, f0);
    EXPECT_SPYRE(spyre_program_free(p));
    ASSERT_SPYRE(spyre_mem_get_info(dev_, &f2, nullptr));
    EXPECT_EQ(f2, f0);
    EXPECT_EQ(spyre_program_free(p), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("program handle is invalid or already freed");
    EXPECT_SPYRE(spyre_program_free(nullptr));
    spyre_launch_params lp{};
    EXPECT_EQ(spyre_launch(p, &lp, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
}

struct MatmulRun {
    std::vector<uint16_t> c;
    spyre_launch_stats stats;
};

TEST_F(Sim, Matmul256Fp16On32CoresMatchesReferenceWithStats) {
    open();
    constexpr size_t M = 256, N = 256, K = 256;
    auto a = spyre_test::random_f16(M * K, 1), b = spyre_test::random_f16(K * N, 2);
    auto ref = spyre_test::matmul_ref(a, b, M, N, K);
    auto img = spyre::programs::build_matmul_program(M, N, K, 32);
    spyre_program_t prog = load(img);
    ASSERT_NE(prog, nullptr);
    spyre_buffer_t A = upload(a), B = upload(b), C = alloc(M * N * 2);
    spyre_buffer_t bufs[] = {A, B, C};

    MatmulRun runs[2];
    for (auto& r : runs) {
        std::vector<uint16_t> zero(M * N, 0);
        ASSERT_SPYRE(spyre_memcpy_htod(C, 0, zero.data(), zero.size() * 2));
        spyre_launch_params lp{};
        lp.num_cores = 0;  // all
        lp.num_args = 3;
        lp.args[0] = addr(A), lp.args[1] = addr(B), lp.args[2] = addr(C);
        lp.buffers = bufs;
        lp.num_buffers = 3;
        ASSERT_SPYRE(spyre_launch(prog, &lp, &r.stats));
        r.c = download<uint16_t>(C, M * N);
    }
    size_t bad = 0;
    for (size_t i = 0; i < M * N; ++i)
        if (runs[0].c[i] != ref[i] && bad++ < 5)
            ADD_FAILURE() << "C[" << i / N << "][" << i % N << "] = " << std::hex << runs[0].c[i]
                          << " expected " << ref[i];
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(runs[0].c, runs[1].c);

    const spyre_launch_stats& s = runs[0].stats;
    EXPECT_GT(s.total_cycles, 0u);
    EXPECT_EQ(s.num_cores, 32u);
    EXPECT_EQ(s.clock_mhz, 1500u);
    EXPECT_EQ(s.macs, uint64_t(M) * N * K);
    EXPECT_EQ(s.peak_macs_per_cycle, 32u * 1024);
    EXPECT_GT(s.utilization, 0.0);
    EXPECT_LE(s.utilization, 1.0);
    EXPECT_NEAR(s.utilization, double(s.macs) / (double(s.total_cycles) * 32768.0), 1e-12);
    EXPECT_NEAR(double(s.time_ns), double(s.total_cycles) / 1.5, 1.0);
    EXPECT_GE(s.ddr_read_bytes, (M * K + K * N) * 2);
    EXPECT_EQ(s.ddr_write_bytes, M * N * 2);
    EXPECT_GT(s.instructions, 32u * 10);
    uint64_t max_end = 0;
    for (uint32_t c = 0; c < s.num_cores; ++c) {
        EXPECT_GT(s.cores[c].busy[SPYRE_LAUNCH_UNIT_MATRIX], 0u) << "core " << c;
        EXPECT_GT(s.cores[c].busy[SPYRE_LAUNCH_UNIT_DMA], 0u) << "core " << c;
        EXPECT_GT(s.cores[c].busy[SPYRE_LAUNCH_UNIT_SCALAR], 0u) << "core " << c;
        EXPECT_LE(s.cores[c].end_cycle, s.total_cycles);
        max_end = std::max(max_end, s.cores[c].end_cycle);
    }
    EXPECT_EQ(max_end, s.total_cycles);
    // Deterministic: the second run has identical statistics.
    EXPECT_EQ(0, std::memcmp(&runs[0].stats, &runs[1].stats, sizeof(spyre_launch_stats)));
}

// Utilisation is measured against the peak of the data type the matrix unit ran: a
// compute-bound int8 loop is near 100% of the int8 peak (2x fp16), not ~199% of the fp16 one;
// fp32 against a quarter of the fp16 peak.
TEST_F(Sim, UtilizationAgainstThePeakOfTheDataType) {
    open();
    struct Case {
        spyre::isa::DType t;
        uint64_t peak_per_core;
    };
    for (Case cs : {Case{spyre::isa::DType::F16, 1024}, Case{spyre::isa::DType::I8, 2048},
                    Case{spyre::isa::DType::F32, 256}}) {
        SCOPED_TRACE(int(cs.t));
        spyre::ProgramBuilder b;  // 16 back-to-back 64x64x256 tiles on LX operands per core
        b.li(3, 0x10000), b.li(4, 0), b.li(5, 0x8000);
        b.set_regs(20, {64, 64, 256, 1024, 256, 256});
        b.loopi(16);
        b.matmul(cs.t, 3, 4, 5, 20, true);
        b.endloop();
        b.halt();
        spyre_program_t prog = load(b.finish());
        ASSERT_NE(prog, nullptr);
        spyre_launch_params lp{};
        spyre_launch_stats s;
        ASSERT_SPYRE(spyre_launch(prog, &lp, &s));
        EXPECT_EQ(s.num_cores, 32u);
        EXPECT_EQ(s.macs, 32u * 16 * 64 * 64 * 256);
        EXPECT_EQ(s.peak_macs_per_cycle, 32 * cs.peak_per_core);
        EXPECT_NEAR(s.utilization,
                    double(s.macs) / (double(s.total_cycles) * double(s.peak_macs_per_cycle)),
                    1e-12);
        EXPECT_GE(s.utilization, 0.90);  // launch overhead and fill latency aside
        EXPECT_LE(s.utilization, 1.0);
    }
}

TEST_F(Sim, ElementwiseAddOnFewerCores) {
    open();
    constexpr int64_t per_core = 1024;
    for (uint32_t cores : {1u, 7u, 32u}) {
        SCOPED_TRACE(std::to_string(cores) + " cores");
        size_t n = per_core * cores;
        auto x = spyre_test::random_f16(n, cores), y = spyre_test::random_f16(n, cores + 100);
        spyre_buffer_t X = upload(x), Y = upload(y), Z = alloc(n * 2);
        spyre_program_t prog = load(spyre_test::build_add_program(per_core));
        spyre_buffer_t bufs[] = {X, Y, Z, X};  // duplicates are fine
        spyre_launch_params lp{};
        lp.num_cores = cores;
        lp.num_args = 3;
        lp.args[0] = addr(X), lp.args[1] = addr(Y), lp.args[2] = addr(Z);
        lp.buffers = bufs;
        lp.num_buffers = 4;
        spyre_launch_stats s;
        ASSERT_SPYRE(spyre_launch(prog, &lp, &s));
        EXPECT_EQ(download<uint16_t>(Z, n), spyre_test::add_ref(x, y));
        EXPECT_EQ(s.num_cores, cores);
        EXPECT_EQ(s.macs, 0u);
        EXPECT_EQ(s.utilization, 0.0);
        EXPECT_GT(s.cores[0].busy[SPYRE_LAUNCH_UNIT_VECTOR], 0u);
        EXPECT_EQ(s.ddr_write_bytes, n * 2);
        ASSERT_SPYRE(spyre_launch(prog, &lp, nullptr));  // stats are optional
    }
}

TEST_F(Sim, FaultyProgramReportsCoreAndInstructionThenDeviceWorks) {
    open();
    spyre_telemetry t0, t1;
    ASSERT_SPYRE(spyre_device_get_telemetry(dev_, &t0));
    uint32_t fault_pc = 0;
    spyre_program_t bad = load(spyre_test::build_fault_program(3, &fault_pc));
    // Above the sub-allocator's limit: buffers of their own (a launch window is a whole slab).
    spyre_buffer_t listed = alloc(256 * KiB), secret = alloc(256 * KiB);
    spyre_launch_params lp{};
    lp.num_args = 2;
    lp.args[0] = addr(listed), lp.args[1] = addr(secret);
    lp.buffers = &listed;
    lp.num_buffers = 1;
    spyre_launch_stats s;
    s.total_cycles = 12345;
    EXPECT_EQ(spyre_launch(bad, &lp, &s), SPYRE_ERROR_PROGRAM);
    EXPECT_EQ(s.total_cycles, 12345u) << "stats written on failure";
    EXPECT_MSG("spyre_launch: program fault on spyre-sim0: core 3 at instruction " +
               std::to_string(fault_pc) + ": ");
    EXPECT_MSG("(DDR_WINDOW)");
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(addr(secret)));
    EXPECT_MSG(hex);
    ASSERT_SPYRE(spyre_device_get_telemetry(dev_, &t1));
    EXPECT_EQ(t1.jobs_failed - t0.jobs_failed, 1u);

    // Listing the buffer makes the same program legal; other programs run too.
    spyre_buffer_t both[] = {listed, secret};
    lp.buffers = both;
    lp.num_buffers = 2;
    EXPECT_SPYRE(spyre_launch(bad, &lp, &s));
    std::vector<uint16_t> x = spyre_test::random_f16(1024, 5);
    spyre_buffer_t X = upload(x), Z = alloc(2048);
    spyre_program_t add = load(spyre_test::build_add_program(1024));
    spyre_buffer_t bufs[] = {X, Z};
    spyre_launch_params ap{};
    ap.num_cores = 1;
    ap.num_args = 3;
    ap.args[0] = addr(X), ap.args[1] = addr(X), ap.args[2] = addr(Z);
    ap.buffers = bufs;
    ap.num_buffers = 2;
    ASSERT_SPYRE(spyre_launch(add, &ap, &s));
    EXPECT_EQ(download<uint16_t>(Z, 1024), spyre_test::add_ref(x, x));

    // Engine telemetry: three launches, one fault, and the last launch's work counted.
    spyre_telemetry t2;
    ASSERT_SPYRE(spyre_device_get_telemetry(dev_, &t2));
    EXPECT_EQ(t2.launches - t0.launches, 3u);
    EXPECT_EQ(t2.launch_errors - t0.launch_errors, 1u);
    EXPECT_GE(t2.engine_cycles - t1.engine_cycles, s.total_cycles);
    EXPECT_GE(t2.engine_instructions - t1.engine_instructions, s.instructions);
    EXPECT_GE(t2.engine_ddr_write_bytes - t1.engine_ddr_write_bytes, 2048u);
}

// spyre_sim_inject_fault: a one-shot program fault that names the launch's label, then a lost
// card (every command fails, frees work), then the card back with its memory.
TEST_F(Sim, InjectedFaultsAndLaunchLabels) {
    open();
    std::vector<uint16_t> x = spyre_test::random_f16(1024, 7);
    spyre_buffer_t X = upload(x), Z = alloc(2048);
    spyre_program_t add = load(spyre_test::build_add_program(1024));
    spyre_buffer_t bufs[] = {X, Z};
    spyre_launch_params lp{};
    lp.num_cores = 1;
    lp.num_args = 3;
    lp.args[0] = addr(X), lp.args[1] = addr(X), lp.args[2] = addr(Z);
    lp.buffers = bufs;
    lp.num_buffers = 2;

    EXPECT_EQ(spyre_pop_launch_label(), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_sim_inject_fault(2, SPYRE_SIM_FAULT_LOST, 0), SPYRE_ERROR_NO_DEVICE);
    EXPECT_EQ(spyre_sim_inject_fault(0, static_cast<spyre_sim_fault>(3), 0),
              SPYRE_ERROR_INVALID_ARGUMENT);
    setenv("SPYRE_BACKEND", "kernel", 1);  // a test hook of the simulator only
    EXPECT_EQ(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_LOST, 0), SPYRE_ERROR_NOT_SUPPORTED);
    setenv("SPYRE_BACKEND", "sim", 1);
    ASSERT_SPYRE(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_PROGRAM, 1));
    ASSERT_SPYRE(spyre_push_launch_label("kernel 7 of graph 0/0"));
    ASSERT_SPYRE(spyre_launch_async(add, &lp, nullptr));  // runs
    ASSERT_SPYRE(spyre_launch_async(add, &lp, nullptr));  // faults, reported by the sync
    ASSERT_SPYRE(spyre_pop_launch_label());
    EXPECT_EQ(spyre_device_synchronize(dev_), SPYRE_ERROR_PROGRAM);
    EXPECT_MSG(
        "program fault on spyre-sim0: core 0 at instruction 0: a simulated fault "
        "(spyre_sim_inject_fault) (DDR_WINDOW); launched by kernel 7 of graph 0/0");
    spyre_launch_stats st;
    ASSERT_SPYRE(spyre_launch(add, &lp, &st));  // one-shot, and unlabeled launches say nothing
    EXPECT_EQ(download<uint16_t>(Z, 1024), spyre_test::add_ref(x, x));

    ASSERT_SPYRE(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_LOST, 0));
    ASSERT_SPYRE(spyre_launch_async(add, &lp, nullptr));  // queued before the card went
    EXPECT_EQ(spyre_device_synchronize(dev_), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_MSG("spyre-sim0 was removed (a simulated loss: spyre_sim_inject_fault)");
    spyre_buffer_t b = nullptr;
    EXPECT_EQ(spyre_malloc(dev_, 4096, &b), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_MSG("spyre_malloc: spyre-sim0 was removed");
    EXPECT_EQ(spyre_launch_async(add, &lp, nullptr), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_EQ(spyre_launch(add, &lp, nullptr), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_EQ(spyre_memcpy_htod(X, 0, x.data(), 2048), SPYRE_ERROR_DEVICE_LOST);
    std::vector<uint16_t> back(1024);
    EXPECT_EQ(spyre_memcpy_dtoh(back.data(), Z, 0, 2048), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_SPYRE(spyre_device_synchronize(dev_));  // nothing queued: nothing to report

    ASSERT_SPYRE(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_NONE, 0));  // back, memory kept
    EXPECT_EQ(download<uint16_t>(Z, 1024), spyre_test::add_ref(x, x));
    ASSERT_SPYRE(spyre_launch(add, &lp, nullptr));
}

TEST_F(Sim, ProgramErrorsFoundBeforeRunningAndBadArguments) {
    open();
    // Valid header, illegal opcode: rejected before any core starts (no core in the message).
    spyre::ProgramBuilder b;
    b.nop();
    b.emit(spyre::ProgramBuilder::mk(static_cast<spyre::isa::Op>(0x7f)));
    b.halt();
    spyre_program_t p = load(b.finish());
    spyre_launch_params lp{};
    EXPECT_EQ(spyre_launch(p, &lp, nullptr), SPYRE_ERROR_PROGRAM);
    EXPECT_MSG("program rejected by spyre-sim0 at instruction 1");
    EXPECT_MSG("ILLEGAL_OPCODE");

    // ARG beyond num_args.
    spyre::ProgramBuilder b2;
    b2.arg(3, 5);
    b2.halt();
    spyre_program_t p2 = load(b2.finish());
    lp.num_args = 2;
    EXPECT_EQ(spyre_launch(p2, &lp, nullptr), SPYRE_ERROR_PROGRAM);
    EXPECT_MSG("BAD_ARG");
    lp.num_args = 6;
    EXPECT_SPYRE(spyre_launch(p2, &lp, nullptr));

    // Launch parameter checks.
    EXPECT_EQ(spyre_launch(p2, nullptr, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("params pointer is NULL");
    spyre_launch_params q{};
    q.num_cores = 33;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("num_cores 33 exceeds the 32 cores of spyre-sim0");
    q = {};
    q.num_args = 17;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    q = {};
    q.flags = 1u << 7;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    q = {};
    q.flags = SPYRE_LAUNCH_RANDOM_STREAM;  // its seed and offset must be among the args
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    q = {};
    q.reserved[2] = 1;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    q = {};
    q.num_buffers = 2;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("buffers is NULL but num_buffers is 2");
    spyre_buffer_t stale[] = {alloc(64), nullptr};
    q.buffers = stale;
    EXPECT_EQ(spyre_launch(p2, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("buffers[1] handle is NULL");
    // A buffer of another device handle of the same card works (one driver file per card).
    spyre_device_t d2 = nullptr;
    ASSERT_SPYRE(spyre_device_open(0, &d2));
    spyre_buffer_t other = nullptr;
    ASSERT_SPYRE(spyre_malloc(d2, 64, &other));
    stale[1] = other;
    q.num_buffers = 2;
    q.num_args = 6;
    EXPECT_SPYRE(spyre_launch(p2, &q, nullptr));
    spyre_free(other);
    spyre_device_close(d2);
    EXPECT_EQ(spyre_launch(nullptr, &q, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("program handle is NULL");
}

TEST_F(Sim, SpyreSmiWorksOnTheSimulator) {
    FILE* f = popen(
        (std::string("SPYRE_BACKEND=sim SPYRE_SIM_DEVICES=2 ") + SPYRE_SMI_PATH + " --json 2>&1")
            .c_str(),
        "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    int st = pclose(f);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_NE(out.find("spyre-sim0"), std::string::npos) << out;
    EXPECT_NE(out.find("spyre-sim1"), std::string::npos) << out;
}

}  // namespace
