// The management API (spyre.h "Management") on the simulator backend, its pure utilisation
// arithmetic, and the fdinfo parser and /proc scan the kernel backend uses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fdinfo.hpp"
#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

std::string last() { return spyre_last_error(); }

template <typename T>
T sized() {
    T v{};
    v.size = sizeof(T);
    return v;
}

class Mgmt : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        unsetenv("SPYRE_SIM_DEVICES");
        unsetenv("SPYRE_SIM_MEMORY");
        ASSERT_SPYRE(spyre_device_open(0, &dev_));
    }
    void TearDown() override {
        for (auto* b : bufs_) spyre_free(b);
        if (prog_) spyre_program_free(prog_);
        spyre_device_close(dev_);
        unsetenv("SPYRE_BACKEND");
    }
    spyre_buffer_t alloc(uint64_t n) {
        spyre_buffer_t b = nullptr;
        EXPECT_EQ(spyre_malloc(dev_, n, &b), SPYRE_SUCCESS) << last();
        bufs_.push_back(b);
        return b;
    }
    // z = x + y over `cores` cores, 1024 fp16 elements each.
    void run_add(uint32_t cores) {
        constexpr int64_t per_core = 1024;
        const uint64_t bytes = per_core * 2 * cores;
        spyre_buffer_t x = alloc(bytes), y = alloc(bytes), z = alloc(bytes);
        if (!prog_) {
            auto img = spyre_test::build_add_program(per_core);
            ASSERT_SPYRE(spyre_program_load(dev_, img.data(), img.size(), &prog_));
        }
        spyre_buffer_t bufs[] = {x, y, z};
        spyre_launch_params lp{};
        lp.num_cores = cores;
        lp.num_args = 3;
        for (int i = 0; i < 3; ++i) ASSERT_SPYRE(spyre_buffer_device_address(bufs[i], &lp.args[i]));
        lp.buffers = bufs;
        lp.num_buffers = 3;
        ASSERT_SPYRE(spyre_launch(prog_, &lp, nullptr));
    }
    spyre_device_t dev_ = nullptr;
    spyre_program_t prog_ = nullptr;
    std::vector<spyre_buffer_t> bufs_;
};

TEST_F(Mgmt, IdentityOfASimulatedCard) {
    auto id = sized<spyre_mgmt_identity>();
    ASSERT_SPYRE(spyre_mgmt_get_identity(dev_, &id));
    EXPECT_EQ(id.size, sizeof id);
    EXPECT_STREQ(id.name, "spyre-sim0");
    EXPECT_STREQ(id.backend, "sim");
    EXPECT_STREQ(id.library_version, spyre_get_version_string());
    EXPECT_STREQ(id.driver_name, "spyre-sim");
    EXPECT_STREQ(id.hw_version, "1.0");
    EXPECT_EQ(id.num_cores, 32u);
    EXPECT_GT(id.clock_mhz, 0u);
    // No serial number and no PCIe link on a simulated card.
    EXPECT_EQ(id.valid & (SPYRE_MGMT_HAS_SERIAL | SPYRE_MGMT_HAS_PCIE_LINK), 0u);
    EXPECT_STREQ(id.serial, "");
}

TEST_F(Mgmt, SizedStructsRefuseSmallSizesAndFillWhatFits) {
    spyre_mgmt_status s{};  // size 0: the caller forgot it
    EXPECT_EQ(spyre_mgmt_get_status(dev_, &s), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last().find("spyre_mgmt_status.size is 0: set it to sizeof(spyre_mgmt_status)"),
              std::string::npos)
        << last();
    EXPECT_EQ(spyre_mgmt_get_status(dev_, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_mgmt_get_status(nullptr, &s), SPYRE_ERROR_INVALID_ARGUMENT);
    // A caller built against a later, larger struct: the known part is filled, the rest untouched,
    // and size says how much was written.
    struct Later {
        spyre_mgmt_status v;
        uint64_t appended;
    } later{};
    later.v.size = sizeof later;
    later.appended = 0x5a5a;
    ASSERT_SPYRE(spyre_mgmt_get_status(dev_, &later.v));
    EXPECT_EQ(later.v.size, sizeof(spyre_mgmt_status));
    EXPECT_EQ(later.appended, 0x5a5au);
    EXPECT_GT(later.v.mem_total_bytes, 0u);
}

TEST_F(Mgmt, StatusFollowsMemoryUse) {
    auto s0 = sized<spyre_mgmt_status>();
    ASSERT_SPYRE(spyre_mgmt_get_status(dev_, &s0));
    EXPECT_EQ(s0.health, SPYRE_HEALTH_OK);
    EXPECT_STREQ(spyre_health_string(static_cast<spyre_health>(s0.health)), "ok");
    EXPECT_EQ(s0.mem_total_bytes, 1024 * MiB);
    EXPECT_EQ(s0.mem_used_bytes + s0.mem_free_bytes, s0.mem_total_bytes);
    // The simulator models no sensors: reported as not available, not as made-up numbers.
    EXPECT_EQ(s0.valid & (SPYRE_MGMT_HAS_TEMPERATURE | SPYRE_MGMT_HAS_POWER), 0u);

    spyre_buffer_t b = alloc(64 * MiB);
    auto s1 = sized<spyre_mgmt_status>();
    ASSERT_SPYRE(spyre_mgmt_get_status(dev_, &s1));
    EXPECT_EQ(s1.mem_used_bytes, s0.mem_used_bytes + 64 * MiB);
    EXPECT_EQ(s1.mem_free_bytes, s0.mem_free_bytes - 64 * MiB);
    spyre_free(b);
    bufs_.clear();
    auto s2 = sized<spyre_mgmt_status>();
    ASSERT_SPYRE(spyre_mgmt_get_status(dev_, &s2));
    EXPECT_EQ(s2.mem_used_bytes, s0.mem_used_bytes);
}

TEST_F(Mgmt, CountersRiseWithWorkOnTheCoresThatRan) {
    auto c0 = sized<spyre_mgmt_counters>();
    ASSERT_SPYRE(spyre_mgmt_get_counters(dev_, &c0));
    const uint32_t want = SPYRE_MGMT_HAS_ENGINE_BUSY | SPYRE_MGMT_HAS_CORE_BUSY |
                          SPYRE_MGMT_HAS_DDR_BYTES | SPYRE_MGMT_HAS_PCIE_BYTES |
                          SPYRE_MGMT_HAS_ERRORS;
    EXPECT_EQ(c0.valid & want, want);
    EXPECT_EQ(c0.valid & SPYRE_MGMT_HAS_RECOVERY, 0u);  // no driver, no recovery counters
    EXPECT_EQ(c0.num_cores, 32u);
    run_add(4);
    auto c1 = sized<spyre_mgmt_counters>();
    ASSERT_SPYRE(spyre_mgmt_get_counters(dev_, &c1));
    EXPECT_GT(c1.timestamp_ns, c0.timestamp_ns);
    EXPECT_GT(c1.engine_busy_ns, c0.engine_busy_ns);
    EXPECT_EQ(c1.ddr_write_bytes - c0.ddr_write_bytes, 4u * 2048);
    EXPECT_GE(c1.ddr_read_bytes - c0.ddr_read_bytes, 2u * 4 * 2048);
    for (uint32_t i = 0; i < 32; ++i) {
        SCOPED_TRACE(i);
        if (i < 4)
            EXPECT_GT(c1.core_busy_ns[i], c0.core_busy_ns[i]);
        else
            EXPECT_EQ(c1.core_busy_ns[i], c0.core_busy_ns[i]);
        // no core is busier than the engine, which counts a launch until its last core halts
        EXPECT_LE(c1.core_busy_ns[i] - c0.core_busy_ns[i], c1.engine_busy_ns - c0.engine_busy_ns);
    }
    EXPECT_GT(c1.pcie_h2d_bytes + c1.pcie_d2h_bytes, 0u);  // the program image was copied in

    auto u = sized<spyre_mgmt_utilization>();
    ASSERT_SPYRE(spyre_mgmt_get_utilization(&c0, &c1, &u));
    EXPECT_EQ(u.interval_ns, c1.timestamp_ns - c0.timestamp_ns);
    EXPECT_GT(u.engine_percent, 0.0);
    EXPECT_GT(u.core_percent[0], 0.0);
    EXPECT_EQ(u.core_percent[4], 0.0);
}

TEST(MgmtUtilization, ArithmeticOnTwoSamples) {
    auto a = sized<spyre_mgmt_counters>(), b = sized<spyre_mgmt_counters>();
    a.valid = SPYRE_MGMT_HAS_ENGINE_BUSY | SPYRE_MGMT_HAS_CORE_BUSY | SPYRE_MGMT_HAS_DDR_BYTES;
    b.valid = a.valid | SPYRE_MGMT_HAS_PCIE_BYTES;
    a.timestamp_ns = 1'000'000'000;
    b.timestamp_ns = 3'000'000'000;  // 2 s later
    a.engine_busy_ns = 100;
    b.engine_busy_ns = 100 + 500'000'000;  // busy 0.5 s of 2 s
    a.ddr_read_bytes = 0;
    b.ddr_read_bytes = 4000;
    a.num_cores = b.num_cores = 2;
    b.core_busy_ns[0] = 2'000'000'000;
    b.core_busy_ns[1] = 5'000'000'000;  // more than the interval: capped
    auto u = sized<spyre_mgmt_utilization>();
    ASSERT_SPYRE(spyre_mgmt_get_utilization(&a, &b, &u));
    EXPECT_EQ(u.valid, a.valid);  // PCIe bytes are not in both samples
    EXPECT_DOUBLE_EQ(u.engine_percent, 25.0);
    EXPECT_DOUBLE_EQ(u.ddr_read_bytes_per_s, 2000.0);
    EXPECT_EQ(u.num_cores, 2u);
    EXPECT_DOUBLE_EQ(u.core_percent[0], 100.0);
    EXPECT_DOUBLE_EQ(u.core_percent[1], 100.0);
    // A counter that went backwards (the card was reset) gives 0, not a wrapped huge rate.
    b.ddr_read_bytes = 0;
    a.ddr_read_bytes = 10;
    ASSERT_SPYRE(spyre_mgmt_get_utilization(&a, &b, &u));
    EXPECT_EQ(u.ddr_read_bytes_per_s, 0.0);
    // Samples in the wrong order.
    EXPECT_EQ(spyre_mgmt_get_utilization(&b, &a, &u), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last().find("sample `before` first"), std::string::npos) << last();
}

TEST_F(Mgmt, TheSimulatorsOnlyClientIsThisProcess) {
    alloc(64 * MiB);
    run_add(2);
    uint32_t n = 0;
    ASSERT_SPYRE(spyre_mgmt_get_processes(dev_, nullptr, 0, &n));
    ASSERT_EQ(n, 1u);
    std::vector<spyre_mgmt_process> procs(2);
    procs[0].size = sizeof(spyre_mgmt_process);
    ASSERT_SPYRE(spyre_mgmt_get_processes(dev_, procs.data(), 2, &n));
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(procs[0].pid, getpid());
    EXPECT_GT(std::string(procs[0].command).size(), 0u);
    auto s = sized<spyre_mgmt_status>();
    ASSERT_SPYRE(spyre_mgmt_get_status(dev_, &s));
    EXPECT_EQ(procs[0].device_memory_bytes, s.mem_used_bytes);
    EXPECT_GE(procs[0].device_memory_bytes, 64 * MiB);
    EXPECT_TRUE(procs[0].valid & SPYRE_MGMT_HAS_ENGINE_BUSY);
    EXPECT_GT(procs[0].compute_busy_ns, 0u);
    EXPECT_EQ(procs[0].valid & SPYRE_MGMT_HAS_DMA_BUSY, 0u);
    spyre_mgmt_process bad{};
    EXPECT_EQ(spyre_mgmt_get_processes(dev_, &bad, 1, &n), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_mgmt_get_processes(dev_, nullptr, 3, &n), SPYRE_ERROR_INVALID_ARGUMENT);
}

TEST(MgmtPeers, EveryOtherSimulatedCardInIndexOrder) {
    setenv("SPYRE_BACKEND", "sim", 1);
    setenv("SPYRE_SIM_DEVICES", "3", 1);
    spyre_device_t dev = nullptr;
    ASSERT_SPYRE(spyre_device_open(1, &dev));
    uint32_t count = 99;
    ASSERT_SPYRE(spyre_mgmt_get_peers(dev, nullptr, 0, &count));  // counting only
    EXPECT_EQ(count, 2u);
    std::vector<spyre_mgmt_peer> peers(4);
    peers[0].size = sizeof(spyre_mgmt_peer);
    ASSERT_SPYRE(spyre_mgmt_get_peers(dev, peers.data(), 4, &count));
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(peers[0].index, 0);
    EXPECT_EQ(peers[1].index, 2);
    for (uint32_t i = 0; i < count; ++i) {
        EXPECT_EQ(peers[i].flags, SPYRE_MGMT_PEER_P2P) << i;
        EXPECT_EQ(peers[i].distance, 0u) << i;  // no PCI path on the simulator
        EXPECT_EQ(peers[i].size, sizeof(spyre_mgmt_peer)) << i;
    }
    // Room for one: one filled, the count still says two.
    spyre_mgmt_peer one{};
    one.size = sizeof one;
    ASSERT_SPYRE(spyre_mgmt_get_peers(dev, &one, 1, &count));
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(one.index, 0);
    // Refusals: a size from no version, a NULL array with room, a NULL count.
    one.size = 4;
    EXPECT_EQ(spyre_mgmt_get_peers(dev, &one, 1, &count), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("spyre_mgmt_peer.size is 4"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_mgmt_get_peers(dev, nullptr, 1, &count), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_mgmt_get_peers(dev, &one, 0, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_device_close(dev);
    // Cards without peer-to-peer DMA: peers still listed, without the P2P flag.
    setenv("SPYRE_SIM_P2P", "0", 1);
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    peers[0].size = sizeof(spyre_mgmt_peer);
    ASSERT_SPYRE(spyre_mgmt_get_peers(dev, peers.data(), 4, &count));
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(peers[0].flags, 0u);
    spyre_device_close(dev);
    unsetenv("SPYRE_SIM_P2P");
    unsetenv("SPYRE_SIM_DEVICES");
    unsetenv("SPYRE_BACKEND");
}

TEST_F(Mgmt, ResetIsRefusedOnTheSimulatorAndForBadFlags) {
    EXPECT_EQ(spyre_mgmt_reset(0, 0), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(last().find("cannot be reset"), std::string::npos) << last();
    EXPECT_EQ(spyre_mgmt_reset(0, 0x80), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(spyre_health_string(static_cast<spyre_health>(99)), "unknown");
}

// ---- fdinfo ----

constexpr const char* kFdinfo =
    "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1044\n"
    "drm-driver:\tspyre\ndrm-client-id:\t39\ndrm-pdev:\t0000:01:00.0\n"
    "drm-engine-compute:\t1736 ns\ndrm-engine-capacity-compute:\t1\n"
    "drm-cycles-compute:\t2604\ndrm-maxfreq-compute:\t1500 MHz\n"
    "drm-engine-dma:\t70589 ns\ndrm-total-device:\t1044 KiB\ndrm-shared-device:\t0\n"
    "drm-total-memory:\t1 MiB\ndrm-resident-memory:\t1 MiB\n";

TEST(Fdinfo, ParsesASpyreClient) {
    auto c = spyre::parse_fdinfo(kFdinfo);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->client_id, 39u);
    EXPECT_EQ(c->pdev, "0000:01:00.0");
    EXPECT_EQ(c->compute_ns, 1736u);
    EXPECT_EQ(c->dma_ns, 70589u);
    EXPECT_EQ(c->device_bytes, 1044u * 1024);
    EXPECT_EQ(c->host_bytes, MiB);
}

TEST(Fdinfo, RejectsOtherDriversAndMalformedValues) {
    EXPECT_FALSE(spyre::parse_fdinfo("drm-driver:\ti915\ndrm-client-id:\t3\n"));
    EXPECT_FALSE(spyre::parse_fdinfo("drm-driver:\tspyre\n"));  // no client id
    EXPECT_FALSE(spyre::parse_fdinfo("pos:\t0\nflags:\t0\n"));  // not a DRM file
    auto c = spyre::parse_fdinfo("drm-driver:\tspyre\ndrm-client-id:\t1\ndrm-engine-dma:\t5 ms\n");
    ASSERT_TRUE(c);
    EXPECT_FALSE(c->dma_ns);  // wrong unit: not guessed
    EXPECT_FALSE(c->compute_ns);
    EXPECT_EQ(spyre::parse_drm_size("0"), 0u);
    EXPECT_EQ(spyre::parse_drm_size("3 GiB"), 3ull << 30);
    EXPECT_FALSE(spyre::parse_drm_size("3 TiB"));
    EXPECT_FALSE(spyre::parse_drm_size("KiB"));
}

TEST(Fdinfo, ScanFindsTheClientsOfOneCardOncePerClient) {
    namespace fs = std::filesystem;
    fs::path root = fs::temp_directory_path() / ("spyre-proc-" + std::to_string(getpid()));
    fs::remove_all(root);
    auto write = [](const fs::path& p, const std::string& text) {
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
    };
    auto client = [&](int pid, int fd, const std::string& id, const std::string& pdev) {
        fs::path d = root / std::to_string(pid);
        fs::create_directories(d / "fd");
        fs::create_symlink("/dev/accel/accel0", d / "fd" / std::to_string(fd));
        write(d / "fdinfo" / std::to_string(fd), "drm-driver:\tspyre\ndrm-client-id:\t" + id +
                                                     "\ndrm-pdev:\t" + pdev +
                                                     "\ndrm-total-device:\t4 MiB\n");
        write(d / "comm", "worker" + std::to_string(pid) + "\n");
    };
    client(200, 3, "7", "0000:01:00.0");
    client(200, 4, "7", "0000:01:00.0");  // a dup of fd 3: one client
    client(100, 5, "8", "0000:01:00.0");
    client(300, 3, "9", "0000:02:00.0");          // another card
    fs::create_directories(root / "400" / "fd");  // a process without accel files
    fs::create_symlink("/dev/null", root / "400" / "fd" / "0");
    write(root / "self" / "comm", "not a pid\n");

    auto found = spyre::scan_clients(root.string(), "0000:01:00.0");
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].pid, 100);
    EXPECT_EQ(found[0].command, "worker100");
    EXPECT_EQ(found[1].pid, 200);
    EXPECT_EQ(found[1].client_id, 7u);
    EXPECT_EQ(found[1].device_bytes, 4 * MiB);
    EXPECT_TRUE(spyre::scan_clients(root.string(), "0000:03:00.0").empty());
    fs::remove_all(root);
}

}  // namespace
