// libspyre against real (emulated) Spyre cards: every test runs on every card.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_util.hpp"
#include "graph_cases.hpp"
#include "launch_util.hpp"
#include "spyre/spyre.h"
#include "stream_cases.hpp"

namespace {

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define EXPECT_SPYRE(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

int device_count() {
    int n = 0;
    spyre_get_device_count(&n);
    return n;
}

// Runs body(device, index) once per card, each with its own open device.
void for_each_device(const std::function<void(spyre_device_t, int)>& body) {
    int n = device_count();
    ASSERT_GE(n, 1) << spyre_last_error();
    for (int i = 0; i < n; ++i) {
        SCOPED_TRACE("spyre" + std::to_string(i));
        spyre_device_t dev = nullptr;
        ASSERT_SPYRE(spyre_device_open(i, &dev));
        body(dev, i);
        EXPECT_SPYRE(spyre_device_close(dev));
    }
}

// The shared cases need SPYRE_DEVICE_CAP_SEMAPHORE and a ring of its own for the waiting HIGH
// priority stream (a SEM_WAIT holds its ring; with fewer than 3 rings the writer shares it).
bool semaphore_ready(spyre_device_t dev, std::string* why) {
    spyre_device_info info{};
    spyre_device_get_info(dev, &info);
    if (!(info.caps & SPYRE_DEVICE_CAP_SEMAPHORE)) {
        *why =
            "no SPYRE_DEVICE_CAP_SEMAPHORE (card before hw 1.8 or driver without "
            "DRM_SPYRE_CAP_SEMAPHORE)";
        return false;
    }
    if (info.num_rings < 3) {
        *why = "fewer than 3 rings: the waiting stream would hold the writer's ring";
        return false;
    }
    return true;
}

// Position-dependent bytes: a misplaced chunk or a shifted offset changes the data.
void fill(void* p, uint64_t n, uint64_t seed) {
    auto* b = static_cast<unsigned char*>(p);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = (i + seed) * 0x9e3779b97f4a7c15ull;
        v ^= v >> 29;
        std::memcpy(b + i, &v, 8);
    }
    for (; i < n; ++i) b[i] = static_cast<unsigned char>((i + seed) * 131 + 7);
}

std::string first_diff(const void* a, const void* b, uint64_t n) {
    auto* x = static_cast<const unsigned char*>(a);
    auto* y = static_cast<const unsigned char*>(b);
    for (uint64_t i = 0; i < n; ++i)
        if (x[i] != y[i])
            return "first difference at byte " + std::to_string(i) + " of " + std::to_string(n);
    return "equal";
}

#define EXPECT_SAME(a, b, n) EXPECT_TRUE(std::memcmp((a), (b), (n)) == 0) << first_diff(a, b, n)

spyre_test::CmdResult run(const std::string& cmd) { return spyre_test::run_command(cmd, false); }

int count_lines(const std::string& s, const std::string& needle) {
    int n = 0;
    size_t pos = 0;
    while (pos < s.size()) {
        size_t end = s.find('\n', pos);
        if (end == std::string::npos) end = s.size();
        if (s.compare(pos, needle.size(), needle) == 0) ++n;
        pos = end + 1;
    }
    return n;
}

// ---- Enumeration and properties ----

TEST(Device, EnumerationAndInfo) {
    int n = device_count();
    ASSERT_GE(n, 1) << spyre_last_error();
    for_each_device([](spyre_device_t dev, int i) {
        spyre_device_info info;
        ASSERT_SPYRE(spyre_device_get_info(dev, &info));
        EXPECT_EQ(info.index, i);
        EXPECT_EQ(std::string(info.name), "spyre" + std::to_string(i));
        EXPECT_EQ(std::string(info.accel_path).rfind("/dev/accel/accel", 0), 0u) << info.accel_path;
        EXPECT_EQ(std::strlen(info.pci_address), 12u) << info.pci_address;  // 0000:00:03.0
        EXPECT_STREQ(info.driver_name, "spyre");
        EXPECT_NE(info.driver_version[0], '\0');
        EXPECT_GT(info.num_cores, 0u);
        EXPECT_GT(info.num_rings, 0u);
        EXPECT_GT(info.devmem_total, 0u);
        EXPECT_GT(info.clock_mhz, 0u);
        EXPECT_TRUE(info.caps & SPYRE_DEVICE_CAP_DMA_COPY);
        EXPECT_TRUE(info.caps & SPYRE_DEVICE_CAP_HOST_BUFFER);
        EXPECT_EQ(info.backend, SPYRE_BACKEND_KERNEL);
    });
    spyre_device_t dev = nullptr;
    EXPECT_EQ(spyre_device_open(n, &dev), SPYRE_ERROR_NO_DEVICE);
    EXPECT_NE(std::string(spyre_last_error()).find("out of range"), std::string::npos)
        << spyre_last_error();
}

// ---- Round trips ----

void round_trip(spyre_device_t dev, uint64_t size, uint64_t seed) {
    SCOPED_TRACE("size " + std::to_string(size));
    spyre_buffer_t buf = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, size, &buf));
    uint64_t got = 0;
    EXPECT_SPYRE(spyre_buffer_size(buf, &got));
    EXPECT_EQ(got, size);
    std::vector<unsigned char> src(size), dst(size + 64);
    fill(src.data(), size, seed);
    std::memset(dst.data(), 0xee, dst.size());
    EXPECT_SPYRE(spyre_memcpy_htod(buf, 0, src.data(), size));
    EXPECT_SPYRE(spyre_memcpy_dtoh(dst.data(), buf, 0, size));
    EXPECT_SAME(src.data(), dst.data(), size);
    for (uint64_t i = size; i < dst.size(); ++i)
        ASSERT_EQ(dst[i], 0xee) << "dtoh wrote past the end, at +" << (i - size);
    EXPECT_SPYRE(spyre_free(buf));
}

TEST(Copy, RoundTripSizes) {
    for_each_device([](spyre_device_t dev, int i) {
        for (uint64_t size : std::initializer_list<uint64_t>{1, 2, 127, 128, 4095, 4096, 4097,
                                                             MiB + 3, 64 * MiB, 256 * MiB})
            round_trip(dev, size, size * 31 + i);
    });
}

// Writes [dev_off, dev_off+size) from host memory at an odd address; the rest of the buffer
// must keep its earlier contents.
void offset_copy(spyre_device_t dev, uint64_t buf_size, uint64_t dev_off, uint64_t host_off,
                 uint64_t size) {
    SCOPED_TRACE("dev_off " + std::to_string(dev_off) + " host_off " + std::to_string(host_off) +
                 " size " + std::to_string(size));
    spyre_buffer_t buf = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, buf_size, &buf));
    std::vector<unsigned char> base(buf_size), src(host_off + size), out(buf_size + host_off);
    fill(base.data(), buf_size, 1);
    fill(src.data(), src.size(), 2);
    ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, base.data(), buf_size));
    ASSERT_SPYRE(spyre_memcpy_htod(buf, dev_off, src.data() + host_off, size));
    std::memcpy(base.data() + dev_off, src.data() + host_off, size);  // expected image
    // Whole buffer back to an unaligned host address.
    ASSERT_SPYRE(spyre_memcpy_dtoh(out.data() + host_off, buf, 0, buf_size));
    EXPECT_SAME(base.data(), out.data() + host_off, buf_size);
    // Only the written range, from the unaligned device offset.
    std::vector<unsigned char> part(size + 1, 0xcd);
    ASSERT_SPYRE(spyre_memcpy_dtoh(part.data() + 1, buf, dev_off, size));
    EXPECT_SAME(src.data() + host_off, part.data() + 1, size);
    EXPECT_EQ(part[0], 0xcd);
    EXPECT_SPYRE(spyre_free(buf));
}

TEST(Copy, UnalignedDeviceAndHostOffsets) {
    for_each_device([](spyre_device_t dev, int) {
        offset_copy(dev, 64 * KiB, 1, 3, 5000);
        offset_copy(dev, 64 * KiB, 4095, 1, 4097);
        offset_copy(dev, 64 * KiB, 64 * KiB - 7, 5, 7);
        offset_copy(dev, 12 * MiB, 4095, 7, 4 * MiB + 17);  // crosses staging chunks
        offset_copy(dev, 12 * MiB, 123457, 1, 9 * MiB + 1);
    });
}

TEST(Copy, ManySmallStagingChunks) {
    // A tiny staging chunk forces dozens of chunks through both slots.
    setenv("SPYRE_STAGING_CHUNK_BYTES", "8192", 1);
    for_each_device([](spyre_device_t dev, int) {
        offset_copy(dev, 256 * KiB, 3, 1, 200 * KiB + 5);
        offset_copy(dev, 256 * KiB, 8192, 0, 64 * KiB);
    });
    unsetenv("SPYRE_STAGING_CHUNK_BYTES");
}

TEST(Copy, ZeroSizeIsNoOp) {
    for_each_device([](spyre_device_t dev, int) {
        spyre_buffer_t buf = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, 4096, &buf));
        char c = 0;
        EXPECT_SPYRE(spyre_memcpy_htod(buf, 4096, &c, 0));
        EXPECT_SPYRE(spyre_memcpy_dtoh(&c, buf, 0, 0));
        EXPECT_SPYRE(spyre_memcpy_dtod(buf, 0, buf, 0, 0));
        EXPECT_SPYRE(spyre_free(buf));
    });
}

TEST(Copy, DeviceToDevice) {
    for_each_device([](spyre_device_t dev, int) {
        const uint64_t n = 3 * MiB + 11;
        spyre_buffer_t a = nullptr, b = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, n + 8192, &a));
        ASSERT_SPYRE(spyre_malloc(dev, n + 8192, &b));
        std::vector<unsigned char> src(n), out(n);
        fill(src.data(), n, 5);
        ASSERT_SPYRE(spyre_memcpy_htod(a, 5, src.data(), n));
        ASSERT_SPYRE(spyre_memcpy_dtod(b, 4099, a, 5, n));
        ASSERT_SPYRE(spyre_memcpy_dtoh(out.data(), b, 4099, n));
        EXPECT_SAME(src.data(), out.data(), n);
        // Inside one buffer, disjoint ranges.
        ASSERT_SPYRE(spyre_memcpy_dtod(a, n + 5, a, 5, 4096));
        std::vector<unsigned char> tail(4096);
        ASSERT_SPYRE(spyre_memcpy_dtoh(tail.data(), a, n + 5, 4096));
        EXPECT_SAME(src.data(), tail.data(), 4096);
        // Overlapping ranges are refused.
        EXPECT_EQ(spyre_memcpy_dtod(a, 100, a, 0, 4096), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(spyre_last_error()).find("overlap"), std::string::npos);
        EXPECT_SPYRE(spyre_free(a));
        EXPECT_SPYRE(spyre_free(b));
    });
}

TEST(Copy, PinnedHostMemoryGoesDirect) {
    for_each_device([](spyre_device_t dev, int) {
        const uint64_t n = 8 * MiB;
        void* in = nullptr;
        void* out = nullptr;
        ASSERT_SPYRE(spyre_host_alloc(dev, n, &in));
        ASSERT_SPYRE(spyre_host_alloc(dev, n, &out));
        ASSERT_EQ(reinterpret_cast<uintptr_t>(in) % 4096, 0u);
        spyre_buffer_t buf = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, n, &buf));
        fill(in, n, 9);
        std::memset(out, 0, n);

        spyre_telemetry t0{}, t1{};
        bool tele = spyre_device_get_telemetry(dev, &t0) == SPYRE_SUCCESS;
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, in, n));
        ASSERT_SPYRE(spyre_memcpy_dtoh(out, buf, 0, n));
        EXPECT_SAME(in, out, n);
        if (tele) {
            ASSERT_SPYRE(spyre_device_get_telemetry(dev, &t1));
            // One job each way: a staged 8 MiB copy would take two 4 MiB chunks per direction.
            EXPECT_EQ(t1.jobs_submitted - t0.jobs_submitted, 2u);
            EXPECT_EQ(t1.h2d_bytes - t0.h2d_bytes, n);
            EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, n);
        }
        // A sub-range at odd offsets of the pinned region.
        auto* pin = static_cast<unsigned char*>(in);
        std::vector<unsigned char> check(1001);
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 77, pin + 13, 1001));
        ASSERT_SPYRE(spyre_memcpy_dtoh(check.data(), buf, 77, 1001));
        EXPECT_SAME(pin + 13, check.data(), 1001);
        EXPECT_SPYRE(spyre_free(buf));
        EXPECT_SPYRE(spyre_host_free(dev, in));
        EXPECT_SPYRE(spyre_host_free(dev, out));
        EXPECT_EQ(spyre_host_free(dev, in), SPYRE_ERROR_INVALID_ARGUMENT);  // double free
    });
}

TEST(Copy, BufferMapSeesCopiedData) {
    for_each_device([](spyre_device_t dev, int) {
        const uint64_t n = 64 * KiB;
        spyre_buffer_t buf = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, n, &buf));
        void* p = nullptr;
        ASSERT_SPYRE(spyre_buffer_map(buf, &p));
        ASSERT_NE(p, nullptr);
        std::vector<unsigned char> src(n), out(n);
        fill(src.data(), n, 11);
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, src.data(), n));
        std::memcpy(out.data(), p, n);  // CPU read through BAR2
        EXPECT_SAME(src.data(), out.data(), n);
        fill(p, 4096, 12);  // CPU write through BAR2
        fill(src.data(), 4096, 12);
        ASSERT_SPYRE(spyre_memcpy_dtoh(out.data(), buf, 0, n));
        EXPECT_SAME(src.data(), out.data(), n);
        void* again = nullptr;
        ASSERT_SPYRE(spyre_buffer_map(buf, &again));
        EXPECT_EQ(p, again);
        EXPECT_SPYRE(spyre_free(buf));
    });
}

// ---- Memory accounting and errors ----

// Free device memory once it stops changing: the driver may release the BOs of earlier tests
// a little after their jobs completed (job cleanup runs in a worker).
uint64_t settled_free(spyre_device_t dev, uint64_t expect = UINT64_MAX) {
    uint64_t prev = UINT64_MAX, cur = 0;
    for (int i = 0; i < 100; ++i) {
        EXPECT_SPYRE(spyre_mem_get_info(dev, &cur, nullptr));
        if (cur == expect || (expect == UINT64_MAX && cur == prev)) break;
        prev = cur;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return cur;
}

TEST(Memory, MemGetInfoTracksMallocAndFree) {
    for_each_device([](spyre_device_t dev, int) {
        uint64_t total = 0, free1 = 0;
        uint64_t free0 = settled_free(dev);
        ASSERT_SPYRE(spyre_mem_get_info(dev, nullptr, &total));
        spyre_device_info info;
        ASSERT_SPYRE(spyre_device_get_info(dev, &info));
        EXPECT_EQ(total, info.devmem_total);
        EXPECT_LE(free0, total);
        spyre_buffer_t buf = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, 64 * MiB, &buf));
        ASSERT_SPYRE(spyre_mem_get_info(dev, &free1, nullptr));
        EXPECT_EQ(free0 - free1, 64 * MiB) << "free before " << free0 << ", after " << free1;
        spyre_mem_stats ms;
        ASSERT_SPYRE(spyre_device_get_mem_stats(dev, &ms));
        EXPECT_EQ(ms.devmem_total - ms.devmem_used, free1);
        EXPECT_LE(ms.devmem_largest_free, free1);
        ASSERT_SPYRE(spyre_free(buf));
        uint64_t free2 = settled_free(dev, free0);
        EXPECT_EQ(free2, free0) << "memory not returned after spyre_free";
    });
}

TEST(Memory, OutOfMemoryMessage) {
    for_each_device([](spyre_device_t dev, int i) {
        uint64_t free = 0, total = 0;
        ASSERT_SPYRE(spyre_mem_get_info(dev, &free, &total));
        spyre_buffer_t buf = reinterpret_cast<spyre_buffer_t>(0x1);
        EXPECT_EQ(spyre_malloc(dev, total + MiB, &buf), SPYRE_ERROR_OUT_OF_MEMORY);
        EXPECT_EQ(buf, nullptr);
        std::string msg = spyre_last_error();
        EXPECT_NE(msg.find("spyre_malloc: out of device memory on spyre" + std::to_string(i) +
                           ": asked "),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find(" free"), std::string::npos) << msg;
        // Fill the card, then ask for one more page.
        spyre_mem_stats ms;
        ASSERT_SPYRE(spyre_device_get_mem_stats(dev, &ms));
        spyre_buffer_t big = nullptr;
        ASSERT_SPYRE(spyre_malloc(dev, ms.devmem_largest_free, &big));
        spyre_buffer_t more = nullptr;
        uint64_t left = 0;
        ASSERT_SPYRE(spyre_mem_get_info(dev, &left, nullptr));
        if (spyre_malloc(dev, left + 4096, &more) == SPYRE_SUCCESS) {
            ADD_FAILURE() << "allocated more than the free memory";
            spyre_free(more);
        } else {
            EXPECT_NE(std::string(spyre_last_error()).find("out of device memory"),
                      std::string::npos)
                << spyre_last_error();
        }
        EXPECT_SPYRE(spyre_free(big));
    });
}

TEST(Errors, InvalidArgumentsOnARealDevice) {
    for_each_device([](spyre_device_t dev, int) {
        spyre_buffer_t buf = nullptr;
        EXPECT_EQ(spyre_malloc(dev, 0, &buf), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(spyre_last_error()).find("size must be > 0"), std::string::npos);
        ASSERT_SPYRE(spyre_malloc(dev, 8192, &buf));
        std::vector<char> host(16384);
        EXPECT_EQ(spyre_memcpy_htod(buf, 4096, host.data(), 8192), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STREQ(spyre_last_error(),
                     "spyre_memcpy_htod: destination offset 4096 + size 8192 exceeds destination "
                     "buffer size 8192");
        EXPECT_EQ(spyre_memcpy_dtoh(host.data(), buf, UINT64_MAX - 10, 100),
                  SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_EQ(spyre_memcpy_dtoh(host.data(), buf, 1, UINT64_MAX), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_EQ(spyre_memcpy_htod(buf, 0, nullptr, 10), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(spyre_last_error()).find("source host pointer is NULL"),
                  std::string::npos);
        EXPECT_EQ(spyre_memcpy_dtoh(nullptr, buf, 0, 10), SPYRE_ERROR_INVALID_ARGUMENT);
        int local = 0;
        EXPECT_EQ(spyre_host_free(dev, &local), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_SPYRE(spyre_free(buf));
        EXPECT_EQ(spyre_free(buf), SPYRE_ERROR_INVALID_ARGUMENT);  // double free is caught
        uint64_t sz;
        EXPECT_EQ(spyre_buffer_size(buf, &sz), SPYRE_ERROR_INVALID_ARGUMENT);
    });
}

TEST(Streams, DeviceToDeviceAcrossCards) {
    if (device_count() < 2) GTEST_SKIP() << "needs two cards";
    spyre_device_t d0, d1;
    ASSERT_SPYRE(spyre_device_open(0, &d0));
    ASSERT_SPYRE(spyre_device_open(1, &d1));
    spyre_cases::across_cards(d0, d1);
    spyre_device_close(d0);
    spyre_device_close(d1);
}

TEST(Device, BuffersOutliveTheirDeviceHandle) {
    for_each_device([](spyre_device_t, int i) {
        spyre_device_t dev;
        ASSERT_SPYRE(spyre_device_open(i, &dev));
        spyre_buffer_t buf;
        ASSERT_SPYRE(spyre_malloc(dev, 4096, &buf));
        spyre_device_t owner = nullptr;
        ASSERT_SPYRE(spyre_buffer_get_device(buf, &owner));
        EXPECT_EQ(owner, dev);
        ASSERT_SPYRE(spyre_device_close(dev));
        char in[100], out[100];
        fill(in, sizeof(in), 4);
        EXPECT_SPYRE(spyre_memcpy_htod(buf, 0, in, sizeof(in)));
        EXPECT_SPYRE(spyre_memcpy_dtoh(out, buf, 0, sizeof(out)));
        EXPECT_SAME(in, out, sizeof(in));
        EXPECT_EQ(spyre_buffer_get_device(buf, &owner), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_SPYRE(spyre_free(buf));
    });
}

TEST(Device, TelemetryCountsCopies) {
    for_each_device([](spyre_device_t dev, int) {
        spyre_telemetry t0, t1;
        spyre_status st = spyre_device_get_telemetry(dev, &t0);
        if (st == SPYRE_ERROR_NOT_SUPPORTED) GTEST_SKIP() << "no telemetry";
        ASSERT_SPYRE(st);
        EXPECT_GT(t0.power_cap_mw, 0u);
        spyre_buffer_t buf;
        ASSERT_SPYRE(spyre_malloc(dev, MiB, &buf));
        std::vector<char> host(MiB);
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, host.data(), MiB));
        ASSERT_SPYRE(spyre_memcpy_dtoh(host.data(), buf, 0, MiB));
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        ASSERT_SPYRE(spyre_device_get_telemetry(dev, &t1));
        EXPECT_GE(t1.h2d_bytes - t0.h2d_bytes, MiB);
        EXPECT_GE(t1.d2h_bytes - t0.d2h_bytes, MiB);
        EXPECT_GE(t1.jobs_completed - t0.jobs_completed, 2u);
        EXPECT_EQ(t1.jobs_failed, t0.jobs_failed);
        EXPECT_SPYRE(spyre_free(buf));
    });
}

// ---- Peer-to-peer copies (hw 1.6: PRIME export/import through spyre.ko) ----

// Opens cards 0 and 1 with peer access both ways, or skips (one card, or a card without
// SPYRE_DEVICE_CAP_P2P: older than hw 1.6 or run with p2p=off).
struct PeerPair {
    spyre_device_t d[2] = {nullptr, nullptr};
    ~PeerPair() {
        for (auto* x : d)
            if (x) spyre_device_close(x);
    }
};
#define OPEN_PEERS(p)                                                                           \
    do {                                                                                        \
        if (device_count() < 2) GTEST_SKIP() << "needs two cards";                              \
        for (int i_ = 0; i_ < 2; ++i_) ASSERT_SPYRE(spyre_device_open(i_, &(p).d[i_]));         \
        int can_ = 0;                                                                           \
        ASSERT_SPYRE(spyre_device_can_access_peer((p).d[0], (p).d[1], &can_));                  \
        if (!can_) GTEST_SKIP() << "the cards have no peer-to-peer DMA (SPYRE_DEVICE_CAP_P2P)"; \
        ASSERT_SPYRE(spyre_device_enable_peer_access((p).d[0], (p).d[1]));                      \
        ASSERT_SPYRE(spyre_device_enable_peer_access((p).d[1], (p).d[0]));                      \
    } while (0)

// Card 0 -> card 1 and back, both engines, at odd offsets and with copies larger than one
// command, checked byte by byte; the card whose engine copied counts the peer bytes in its
// TELE_P2P registers (QUERY telemetry), the other counts nothing.
TEST(Peer, Card0ToCard1AndBackCountedByTheCopyingCard) {
    PeerPair p;
    OPEN_PEERS(p);
    const uint64_t n = 65 * MiB + 4097;  // two COPY commands (at most 64 MiB each)
    spyre_buffer_t a = nullptr, b = nullptr, a2 = nullptr;
    ASSERT_SPYRE(spyre_malloc(p.d[0], n + 8192, &a));
    ASSERT_SPYRE(spyre_malloc(p.d[1], n + 8192, &b));
    ASSERT_SPYRE(spyre_malloc(p.d[0], n + 8192, &a2));
    std::vector<char> src(n), zero(n + 8192, 0), got(n + 8192);
    fill(src.data(), n, 25);
    ASSERT_SPYRE(spyre_memcpy_htod(a, 3, src.data(), n));
    ASSERT_SPYRE(spyre_memcpy_htod(b, 0, zero.data(), n + 8192));
    ASSERT_SPYRE(spyre_memcpy_htod(a2, 0, zero.data(), n + 8192));
    spyre_telemetry t0[2], t1[2], t2[2];
    for (int i = 0; i < 2; ++i) ASSERT_SPYRE(spyre_device_get_telemetry(p.d[i], &t0[i]));

    ASSERT_SPYRE(spyre_memcpy_peer(b, 4099, a, 3, n));  // card 0's engine writes into card 1
    ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), b, 0, n + 8192));
    EXPECT_SAME(src.data(), got.data() + 4099, n);
    EXPECT_SAME(zero.data(), got.data(), 4099);
    EXPECT_SAME(zero.data(), got.data() + 4099 + n, 8192 - 4099);
    for (int i = 0; i < 2; ++i) ASSERT_SPYRE(spyre_device_get_telemetry(p.d[i], &t1[i]));
    EXPECT_EQ(t1[0].p2p_write_bytes - t0[0].p2p_write_bytes, n);
    EXPECT_EQ(t1[0].p2p_read_bytes - t0[0].p2p_read_bytes, 0u);
    EXPECT_EQ(t1[1].p2p_write_bytes, t0[1].p2p_write_bytes);  // the target counts nothing
    EXPECT_EQ(t1[1].p2p_read_bytes, t0[1].p2p_read_bytes);

    // Back: card 0's stream pulls from card 1 (reads), then again on card 1's stream (writes),
    // into a second buffer; the same buffer pair a second time reuses its import.
    spyre_stream_t s0 = nullptr, s1 = nullptr;
    ASSERT_SPYRE(spyre_stream_create(p.d[0], 0, &s0));
    ASSERT_SPYRE(spyre_stream_create(p.d[1], 0, &s1));
    ASSERT_SPYRE(spyre_memcpy_peer_async(a2, 1, b, 4099, n, s0));
    ASSERT_SPYRE(spyre_stream_synchronize(s0));
    ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), a2, 1, n));
    EXPECT_SAME(src.data(), got.data(), n);
    ASSERT_SPYRE(spyre_memcpy_htod(a2, 0, zero.data(), n + 8192));
    ASSERT_SPYRE(spyre_memcpy_peer_async(a2, 8191, b, 4099, n, s1));
    ASSERT_SPYRE(spyre_memcpy_peer_async(a2, 8191, b, 4099, n, s1));
    ASSERT_SPYRE(spyre_stream_synchronize(s1));
    ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), a2, 8191, n));
    EXPECT_SAME(src.data(), got.data(), n);
    for (int i = 0; i < 2; ++i) ASSERT_SPYRE(spyre_device_get_telemetry(p.d[i], &t2[i]));
    EXPECT_EQ(t2[0].p2p_read_bytes - t1[0].p2p_read_bytes, n);
    EXPECT_EQ(t2[0].p2p_write_bytes, t1[0].p2p_write_bytes);
    EXPECT_EQ(t2[1].p2p_write_bytes - t1[1].p2p_write_bytes, 2 * n);
    EXPECT_EQ(t2[1].p2p_read_bytes, t1[1].p2p_read_bytes);
    EXPECT_SPYRE(spyre_stream_destroy(s0));
    EXPECT_SPYRE(spyre_stream_destroy(s1));
    for (auto* x : {a, b, a2}) EXPECT_SPYRE(spyre_free(x));
}

// The card model's peer price (hardware.md section 11) as the events of the copying stream
// see it: 1 MiB into the peer costs 256 + 1500 + 26215 cycles at 1.5 GHz, not the 26471 of a
// copy to host memory: the bytes really went card to card.
TEST(Peer, ModeledCyclesAreThePeerLinks) {
    PeerPair p;
    OPEN_PEERS(p);
    spyre_device_info info{};
    ASSERT_SPYRE(spyre_device_get_info(p.d[0], &info));
    if (info.clock_mhz != 1500) GTEST_SKIP() << "the figures are for a 1500 MHz card";
    spyre_buffer_t a = nullptr, b = nullptr;
    ASSERT_SPYRE(spyre_malloc(p.d[0], MiB, &a));
    ASSERT_SPYRE(spyre_malloc(p.d[1], MiB, &b));
    spyre_stream_t s = nullptr;
    ASSERT_SPYRE(spyre_stream_create(p.d[0], 0, &s));
    spyre_event_t e0 = nullptr, e1 = nullptr;
    ASSERT_SPYRE(spyre_event_create(p.d[0], &e0));
    ASSERT_SPYRE(spyre_event_create(p.d[0], &e1));
    ASSERT_SPYRE(spyre_memcpy_peer_async(b, 0, a, 0, 4096, s));  // the import, outside the timing
    ASSERT_SPYRE(spyre_event_record(e0, s));
    ASSERT_SPYRE(spyre_memcpy_peer_async(b, 0, a, 0, MiB, s));
    ASSERT_SPYRE(spyre_event_record(e1, s));
    ASSERT_SPYRE(spyre_event_synchronize(e1));
    spyre_event_timing t{};
    ASSERT_SPYRE(spyre_event_elapsed(e0, e1, &t));
    EXPECT_EQ(t.modeled_cycles, 256u + 1500 + 26215);
    EXPECT_SPYRE(spyre_event_destroy(e0));
    EXPECT_SPYRE(spyre_event_destroy(e1));
    EXPECT_SPYRE(spyre_stream_destroy(s));
    EXPECT_SPYRE(spyre_free(a));
    EXPECT_SPYRE(spyre_free(b));
}

// The import goes with the buffer: after many copies of one pair and the free of the peer's
// buffer, the exporting card's memory is back where it was (a PEER BO left open on the other
// card would hold it).
TEST(Peer, ImportReleasedWithTheBuffer) {
    PeerPair p;
    OPEN_PEERS(p);
    ASSERT_SPYRE(spyre_device_synchronize(p.d[1]));
    spyre_mem_stats m0{}, m1{};
    ASSERT_SPYRE(spyre_device_get_mem_stats(p.d[1], &m0));
    spyre_buffer_t a = nullptr, b = nullptr;
    ASSERT_SPYRE(spyre_malloc(p.d[0], 2 * MiB, &a));
    ASSERT_SPYRE(spyre_malloc(p.d[1], 2 * MiB, &b));
    std::vector<char> src(2 * MiB), got(2 * MiB);
    for (int i = 0; i < 8; ++i) {
        fill(src.data(), src.size(), 40 + i);
        ASSERT_SPYRE(spyre_memcpy_htod(a, 0, src.data(), src.size()));
        ASSERT_SPYRE(spyre_memcpy_peer(b, 0, a, 0, src.size()));
        ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), b, 0, got.size()));
        ASSERT_TRUE(std::memcmp(src.data(), got.data(), src.size()) == 0) << "copy " << i;
    }
    EXPECT_SPYRE(spyre_free(b));
    EXPECT_SPYRE(spyre_free(a));
    // The other card's last copy job holds the import until the driver frees the job, just
    // after its fence signals (drm_sched's free_job work): the memory comes back within moments.
    for (int ms = 0; ms < 5000; ms += 10) {
        ASSERT_SPYRE(spyre_device_get_mem_stats(p.d[1], &m1));
        if (m1.devmem_used == m0.devmem_used) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(m1.devmem_used, m0.devmem_used);
}

// The peer (QEMU card spyre1) hot-unplugged while this process holds an import of its
// buffer: copies into and from it fail with DEVICE_LOST naming it, the other card keeps
// working; spyre1 is plugged back in afterwards (tests/guest/uapi/p2p-card.sh).
// Card 0 writes a semaphore in card 1's memory (through its PEER BO) after a peer copy; a
// stream of card 1 waits for it.
TEST(Peer, SemaphoreWrittenIntoThePeer) {
    PeerPair p;
    OPEN_PEERS(p);
    std::string why;
    for (auto* d : p.d)
        if (!semaphore_ready(d, &why)) GTEST_SKIP() << why;
    spyre_cases::semaphore_peer(p.d[0], p.d[1]);
}

// The same exchange, launches included, held in a submission batch on each card's stream:
// one SUBMIT per card.
TEST(Peer, SemaphoresAndPeerCopiesHeldInBatches) {
    PeerPair p;
    OPEN_PEERS(p);
    std::string why;
    for (auto* d : p.d)
        if (!semaphore_ready(d, &why)) GTEST_SKIP() << why;
    spyre_cases::semaphore_peer_batch(p.d[0], p.d[1]);
}

TEST(Peer, UnpluggedPeerIsDeviceLost) {
    const char* card_sh = "tests/guest/uapi/p2p-card.sh";
    if (!getenv("SPYRE_VM_DIR") || access(card_sh, X_OK))
        GTEST_SKIP() << "needs a spyre-vm guest with tools/vm/guest-qmp, run from /src";
    PeerPair p;
    OPEN_PEERS(p);
    auto node = run(std::string(card_sh) + " node spyre1");
    ASSERT_EQ(node.status, 0);
    node.out.erase(node.out.find_last_not_of('\n') + 1);
    int gone = -1;  // the libspyre index of QEMU's spyre1
    for (int i = 0; i < 2; ++i) {
        spyre_device_info info{};
        ASSERT_SPYRE(spyre_device_get_info(p.d[i], &info));
        if (node.out == info.accel_path) gone = i;
    }
    ASSERT_GE(gone, 0) << "no open card is " << node.out;
    spyre_device_t peer = p.d[gone], self = p.d[1 - gone];
    spyre_buffer_t a = nullptr, b = nullptr;
    ASSERT_SPYRE(spyre_malloc(self, 65536, &a));
    ASSERT_SPYRE(spyre_malloc(peer, 65536, &b));
    ASSERT_SPYRE(spyre_memcpy_peer(b, 0, a, 0, 65536));  // imported on `self`
    ASSERT_SPYRE(spyre_device_synchronize(peer));

    ASSERT_EQ(run(std::string(card_sh) + " unplug spyre1").status, 0);
    EXPECT_EQ(spyre_memcpy_peer(b, 0, a, 0, 4096), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_NE(std::string(spyre_last_error()).find("was removed or its driver unbound"),
              std::string::npos)
        << spyre_last_error();
    EXPECT_NE(std::string(spyre_last_error()).find("peer spyre" + std::to_string(gone)),
              std::string::npos)
        << spyre_last_error();
    spyre_stream_t s = nullptr;
    ASSERT_SPYRE(spyre_stream_create(self, 0, &s));
    EXPECT_EQ(spyre_memcpy_peer_async(a, 0, b, 0, 4096, s), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_NE(std::string(spyre_last_error()).find("from its memory"), std::string::npos)
        << spyre_last_error();
    EXPECT_SPYRE(spyre_stream_synchronize(s));
    // The other card goes on.
    EXPECT_SPYRE(spyre_memcpy_dtod(a, 32768, a, 0, 32768));
    EXPECT_SPYRE(spyre_stream_destroy(s));
    EXPECT_SPYRE(spyre_free(b));
    EXPECT_SPYRE(spyre_free(a));
    ASSERT_EQ(run(std::string(card_sh) + " replug spyre1").status, 0);
}

// ---- Programs (kernel LAUNCH path) ----

// Skips the test unless the card runs programs.
#define REQUIRE_LAUNCH(dev)                                                                     \
    do {                                                                                        \
        spyre_device_info info_;                                                                \
        ASSERT_SPYRE(spyre_device_get_info((dev), &info_));                                     \
        if (!(info_.caps & SPYRE_DEVICE_CAP_LAUNCH))                                            \
            GTEST_SKIP() << info_.name                                                          \
                         << " lacks DRM_SPYRE_CAP_LAUNCH: the driver or the card model cannot " \
                            "run programs yet";                                                 \
    } while (0)

uint64_t dev_addr(spyre_buffer_t b) {
    uint64_t a = 0;
    EXPECT_SPYRE(spyre_buffer_device_address(b, &a));
    return a;
}

TEST(Launch, Matmul256Fp16On32CoresMatchesReference) {
    for_each_device([](spyre_device_t dev, int) {
        REQUIRE_LAUNCH(dev);
        constexpr size_t M = 256, N = 256, K = 256;
        auto a = spyre_test::random_f16(M * K, 11), b = spyre_test::random_f16(K * N, 12);
        auto ref = spyre_test::matmul_ref(a, b, M, N, K);
        auto img = spyre::programs::build_matmul_program(M, N, K, 32);
        spyre_program_t prog = nullptr;
        ASSERT_SPYRE(spyre_program_load(dev, img.data(), img.size(), &prog));
        spyre_buffer_t A, B, C;
        ASSERT_SPYRE(spyre_malloc(dev, M * K * 2, &A));
        ASSERT_SPYRE(spyre_malloc(dev, K * N * 2, &B));
        ASSERT_SPYRE(spyre_malloc(dev, M * N * 2, &C));
        ASSERT_SPYRE(spyre_memcpy_htod(A, 0, a.data(), M * K * 2));
        ASSERT_SPYRE(spyre_memcpy_htod(B, 0, b.data(), K * N * 2));
        spyre_buffer_t bufs[] = {A, B, C};
        spyre_launch_params lp{};
        lp.num_cores = 32;
        lp.num_args = 3;
        lp.args[0] = dev_addr(A), lp.args[1] = dev_addr(B), lp.args[2] = dev_addr(C);
        lp.buffers = bufs;
        lp.num_buffers = 3;
        spyre_launch_stats s1, s2;
        for (spyre_launch_stats* s : {&s1, &s2}) {
            std::vector<uint16_t> c(M * N, 0xffff);
            ASSERT_SPYRE(spyre_memcpy_htod(C, 0, c.data(), M * N * 2));
            ASSERT_SPYRE(spyre_launch(prog, &lp, s));
            ASSERT_SPYRE(spyre_memcpy_dtoh(c.data(), C, 0, M * N * 2));
            size_t bad = 0;
            for (size_t i = 0; i < M * N; ++i)
                if (c[i] != ref[i] && bad++ < 5)
                    ADD_FAILURE() << "C[" << i / N << "][" << i % N << "] = 0x" << std::hex << c[i]
                                  << ", expected 0x" << ref[i];
            EXPECT_EQ(bad, 0u);
        }
        EXPECT_GT(s1.total_cycles, 0u);
        EXPECT_EQ(s1.num_cores, 32u);
        EXPECT_EQ(s1.macs, uint64_t(M) * N * K);
        EXPECT_GT(s1.utilization, 0.0);
        EXPECT_LE(s1.utilization, 1.0);
        EXPECT_GT(s1.time_ns, 0u);
        EXPECT_EQ(s1.ddr_write_bytes, M * N * 2);
        for (uint32_t c = 0; c < s1.num_cores; ++c) {
            EXPECT_GT(s1.cores[c].busy[SPYRE_LAUNCH_UNIT_MATRIX], 0u) << "core " << c;
            EXPECT_LE(s1.cores[c].end_cycle, s1.total_cycles);
        }
        EXPECT_EQ(0, std::memcmp(&s1, &s2, sizeof s1)) << "statistics are not deterministic";
        EXPECT_SPYRE(spyre_free(A));
        EXPECT_SPYRE(spyre_free(B));
        EXPECT_SPYRE(spyre_free(C));
        EXPECT_SPYRE(spyre_program_free(prog));
    });
}

TEST(Launch, FaultyProgramReportsItsErrorAndTheNextJobWorks) {
    for_each_device([](spyre_device_t dev, int i) {
        REQUIRE_LAUNCH(dev);
        uint32_t fault_pc = 0;
        auto img = spyre_test::build_fault_program(3, &fault_pc);
        spyre_program_t bad = nullptr;
        ASSERT_SPYRE(spyre_program_load(dev, img.data(), img.size(), &bad));
        spyre_buffer_t listed, secret;
        ASSERT_SPYRE(spyre_malloc(dev, 256 * KiB, &listed));
        ASSERT_SPYRE(spyre_malloc(dev, 256 * KiB, &secret));
        spyre_launch_params lp{};
        lp.num_args = 2;
        lp.args[0] = dev_addr(listed), lp.args[1] = dev_addr(secret);
        lp.buffers = &listed;
        lp.num_buffers = 1;
        EXPECT_EQ(spyre_launch(bad, &lp, nullptr), SPYRE_ERROR_PROGRAM);
        std::string msg = spyre_last_error();
        EXPECT_NE(msg.find("program fault on spyre" + std::to_string(i) +
                           ": core 3 at instruction " + std::to_string(fault_pc)),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("DDR_WINDOW"), std::string::npos) << msg;

        // The card keeps working: copies and another launch.
        constexpr int64_t n = 32 * 1024;
        auto x = spyre_test::random_f16(n, 21), y = spyre_test::random_f16(n, 22);
        spyre_buffer_t X, Y, Z;
        ASSERT_SPYRE(spyre_malloc(dev, n * 2, &X));
        ASSERT_SPYRE(spyre_malloc(dev, n * 2, &Y));
        ASSERT_SPYRE(spyre_malloc(dev, n * 2, &Z));
        ASSERT_SPYRE(spyre_memcpy_htod(X, 0, x.data(), n * 2));
        ASSERT_SPYRE(spyre_memcpy_htod(Y, 0, y.data(), n * 2));
        auto add = spyre_test::build_add_program(1024);
        spyre_program_t prog = nullptr;
        ASSERT_SPYRE(spyre_program_load(dev, add.data(), add.size(), &prog));
        spyre_buffer_t bufs[] = {X, Y, Z};
        spyre_launch_params ap{};
        ap.num_cores = 32;
        ap.num_args = 3;
        ap.args[0] = dev_addr(X), ap.args[1] = dev_addr(Y), ap.args[2] = dev_addr(Z);
        ap.buffers = bufs;
        ap.num_buffers = 3;
        spyre_launch_stats s;
        ASSERT_SPYRE(spyre_launch(prog, &ap, &s));
        std::vector<uint16_t> z(n);
        ASSERT_SPYRE(spyre_memcpy_dtoh(z.data(), Z, 0, n * 2));
        EXPECT_TRUE(z == spyre_test::add_ref(x, y)) << "elementwise add differs from the reference";
        EXPECT_GT(s.total_cycles, 0u);
        // Listing the buffer makes the faulty program legal.
        spyre_buffer_t both[] = {listed, secret};
        lp.buffers = both;
        lp.num_buffers = 2;
        EXPECT_SPYRE(spyre_launch(bad, &lp, nullptr));

        for (auto* b : {listed, secret, X, Y, Z}) EXPECT_SPYRE(spyre_free(b));
        EXPECT_SPYRE(spyre_program_free(prog));
        EXPECT_SPYRE(spyre_program_free(bad));
    });
}

TEST(Launch, MalformedImageIsRejectedBeforeReachingTheCard) {
    for_each_device([](spyre_device_t dev, int) {
        auto img = spyre_test::build_add_program(1024);
        img[4] = 9;  // version
        spyre_program_t p = nullptr;
        EXPECT_EQ(spyre_program_load(dev, img.data(), img.size(), &p), SPYRE_ERROR_PROGRAM);
        EXPECT_NE(std::string(spyre_last_error()).find("unsupported program format version 9"),
                  std::string::npos)
            << spyre_last_error();
    });
}

// ---- Threads ----

TEST(Threads, ConcurrentCopiesOnOneDevice) {
    for_each_device([](spyre_device_t dev, int) {
        constexpr int kThreads = 4, kIters = 12;
        std::atomic<int> failures{0};
        std::vector<std::string> errors(kThreads);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
                std::mt19937_64 rng(t);
                spyre_buffer_t buf = nullptr;
                if (spyre_malloc(dev, 2 * MiB, &buf) != SPYRE_SUCCESS) {
                    errors[t] = spyre_last_error();
                    ++failures;
                    return;
                }
                std::vector<unsigned char> in(2 * MiB), out(2 * MiB);
                for (int i = 0; i < kIters; ++i) {
                    uint64_t size = 1 + rng() % (2 * MiB - 4096);
                    uint64_t off = rng() % 4096;
                    fill(in.data(), size, t * 1000 + i);
                    if (spyre_memcpy_htod(buf, off, in.data(), size) != SPYRE_SUCCESS ||
                        spyre_memcpy_dtoh(out.data(), buf, off, size) != SPYRE_SUCCESS) {
                        errors[t] = spyre_last_error();
                        ++failures;
                        break;
                    }
                    if (std::memcmp(in.data(), out.data(), size) != 0) {
                        errors[t] = "data mismatch: " + first_diff(in.data(), out.data(), size);
                        ++failures;
                        break;
                    }
                }
                spyre_free(buf);
            });
        }
        for (auto& th : threads) th.join();
        EXPECT_EQ(failures.load(), 0);
        for (int t = 0; t < kThreads; ++t)
            EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    });
}

// ---- Tools ----

TEST(Tools, SpyreSmiTableJsonListQuery) {
    int n = device_count();
    ASSERT_GE(n, 1);
    auto r = run(SPYRE_SMI_PATH);
    ASSERT_EQ(r.status, 0) << r.out;
    int rows = 0;
    for (int i = 0; i < n; ++i)
        rows += r.out.find("| spyre" + std::to_string(i) + " ") != std::string::npos;
    EXPECT_EQ(rows, n) << r.out;
    EXPECT_NE(r.out.find("Processes:"), std::string::npos) << r.out;  // then the process table
    EXPECT_NE(r.out.find("Driver: spyre"), std::string::npos) << r.out;

    r = run(std::string(SPYRE_SMI_PATH) + " --json");
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    ASSERT_EQ(j["devices"].size(), static_cast<size_t>(n));
    EXPECT_EQ(j["devices"][0]["name"], "spyre0");
    EXPECT_GT(j["devices"][0]["memory"]["total_bytes"].get<uint64_t>(), 0u);

    r = run(std::string(SPYRE_SMI_PATH) + " -L");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(count_lines(r.out, "Card "), n) << r.out;

    r = run(std::string(SPYRE_SMI_PATH) + " -q -i 0");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("Telemetry"), std::string::npos) << r.out;
    EXPECT_EQ(count_lines(r.out, "Card "), 1) << r.out;

    r = run(std::string(SPYRE_SMI_PATH) + " -i " + std::to_string(n) + " 2>&1");
    EXPECT_NE(r.status, 0) << r.out;
}

// ---- Streams, events, async work (cases shared with the host tests) ----

bool can_launch(spyre_device_t dev) {
    spyre_device_info info;
    spyre_device_get_info(dev, &info);
    return info.caps & SPYRE_DEVICE_CAP_LAUNCH;
}

#define LAUNCH_CASE(name, call)                                \
    TEST(Streams, name) {                                      \
        for_each_device([](spyre_device_t dev, int) {          \
            if (!can_launch(dev)) GTEST_SKIP() << "no LAUNCH"; \
            call;                                              \
        });                                                    \
    }
LAUNCH_CASE(StreamOrdering, spyre_cases::stream_ordering(dev))
LAUNCH_CASE(EventTimingMatchesLaunchStats, spyre_cases::event_timing(dev))
LAUNCH_CASE(AsyncFaultReachesTheNextSynchronizeAndNothingIsLost,
            spyre_cases::async_fault_propagation(dev))
LAUNCH_CASE(ProgramCacheHit, spyre_cases::program_cache(dev))
// A replay is one SUBMIT; 1100 launches are two (the driver takes at most
// DRM_SPYRE_FILE_MAX_LAUNCHES = 1024 per SUBMIT).
LAUNCH_CASE(GraphReplayIsOneSubmit, spyre_cases::graph_replay(dev, 1))
LAUNCH_CASE(GraphOfManyLaunchesIsSplitAtTheLaunchLimit,
            spyre_cases::graph_many_launches(dev, 1100, 2))

TEST(Streams, CrossStreamEventWait) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::cross_stream_event(dev); });
}
TEST(Streams, ManyThreads) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::many_threads(dev, 8, 200000, 4); });
}
TEST(Streams, UseAfterFreeIsDetected) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::use_after_free(dev); });
}
TEST(Streams, SubAllocator) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::suballocator(dev, 300); });
}
TEST(Streams, ClosedWithWorkQueuedIsReleased) {
    for (int i = 0; i < device_count(); ++i) {
        SCOPED_TRACE("spyre" + std::to_string(i));
        spyre_cases::closed_with_work_queued(i);
    }
}
TEST(Streams, HostFunctionRunsInStreamOrder) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::host_func(dev); });
}
TEST(Streams, GraphCaptureErrors) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::graph_capture_errors(dev); });
}
TEST(Streams, FillsAndStridedCopies) {
    for_each_device([](spyre_device_t dev, int) { spyre_cases::fills_and_strided(dev); });
}

// ---- Device-side semaphores (hw 1.8: DRM_SPYRE_CMD_SEM_SIGNAL / SEM_WAIT) ----

#define SEMAPHORE_CASE(name, call)                                  \
    TEST(Semaphores, name) {                                        \
        for_each_device([](spyre_device_t dev, int) {               \
            std::string why_;                                       \
            if (!semaphore_ready(dev, &why_)) GTEST_SKIP() << why_; \
            call;                                                   \
        });                                                         \
    }
SEMAPHORE_CASE(WaitReleasedByAWriteQueuedAfterIt, spyre_cases::semaphore_cross_stream(dev))
SEMAPHORE_CASE(HostWriteReleasesAWait, spyre_cases::semaphore_host_write(dev))
SEMAPHORE_CASE(TimeoutFailsTheStreamWhichKeepsWorking, spyre_cases::semaphore_timeout(dev))
SEMAPHORE_CASE(ArgumentErrors, spyre_cases::semaphore_argument_errors(dev))
SEMAPHORE_CASE(CaptureIsRefused, spyre_cases::semaphore_capture_refused(dev))

// The waiter's events compare with the writer's on the card's job clock (hw 1.7).
TEST(Semaphores, WaiterModeledTimeNotBeforeWriter) {
    for_each_device([](spyre_device_t dev, int) {
        std::string why;
        if (!semaphore_ready(dev, &why)) GTEST_SKIP() << why;
        spyre_device_info info{};
        spyre_device_get_info(dev, &info);
        if (!can_launch(dev)) GTEST_SKIP() << "no LAUNCH";
        if (!(info.caps & SPYRE_DEVICE_CAP_JOB_CLOCK)) GTEST_SKIP() << "no job clock";
        spyre_cases::semaphore_modeled_time(dev);
    });
}

// Without the capability both calls are refused, naming the card and the capability.
TEST(Semaphores, WithoutTheCapabilityNotSupported) {
    for_each_device([](spyre_device_t dev, int) {
        if (spyre_cases::has_semaphores(dev)) GTEST_SKIP() << "the card has semaphores";
        spyre_device_info info{};
        spyre_device_get_info(dev, &info);
        spyre_buffer_t sem;
        ASSERT_SPYRE(spyre_malloc(dev, 64, &sem));
        EXPECT_EQ(spyre_stream_write_value(nullptr, sem, 0, 1), SPYRE_ERROR_NOT_SUPPORTED);
        EXPECT_NE(std::string(spyre_last_error()).find(info.name), std::string::npos)
            << spyre_last_error();
        EXPECT_NE(std::string(spyre_last_error()).find("SPYRE_DEVICE_CAP_SEMAPHORE"),
                  std::string::npos)
            << spyre_last_error();
        EXPECT_EQ(spyre_stream_wait_value(nullptr, sem, 0, 1, 0), SPYRE_ERROR_NOT_SUPPORTED);
        EXPECT_NE(std::string(spyre_last_error()).find("DRM_SPYRE_CAP_SEMAPHORE"),
                  std::string::npos)
            << spyre_last_error();
        EXPECT_SPYRE(spyre_free(sem));
    });
}

// More asynchronous jobs than the driver lets one file have in flight (DRM_SPYRE_FILE_MAX_JOBS),
// queued behind a long launch: SUBMIT returns EAGAIN, libspyre waits for its oldest job and
// retries (busy_retries counts it) instead of failing or spinning, and every job runs in order.
// Device-to-device copies: one job each, no host staging (staged copies and fills are bounded
// by libspyre's staging slots long before the driver's budget).
TEST(Streams, QueueDeeperThanTheDriversJobBudget) {
    spyre_device_t dev;
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    if (!can_launch(dev)) GTEST_SKIP() << "no LAUNCH";
    constexpr int kJobs = 400;  // > DRM_SPYRE_FILE_MAX_JOBS (256)
    constexpr uint64_t kSlice = 4096;
    const auto want = spyre_cases::pattern(kJobs * kSlice, 77);
    spyre_buffer_t src, dst;
    ASSERT_SPYRE(spyre_malloc(dev, kJobs * kSlice, &src));
    ASSERT_SPYRE(spyre_malloc(dev, kJobs * kSlice, &dst));
    ASSERT_SPYRE(spyre_memcpy_htod(src, 0, want.data(), want.size()));
    spyre_stream_t s;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    bool hit_budget = false;
    // The spin must outlast the submissions; lengthen it if the queue drained too early.
    for (int64_t spin = 20'000'000; !hit_budget && spin <= 320'000'000; spin *= 4) {
        spyre_runtime_stats before{}, after{};
        ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &before));
        ASSERT_SPYRE(spyre_memset(dst, 0, 0, kJobs * kSlice));
        const auto image = spyre_test::build_spin_program(spin);
        spyre_program_t prog;
        ASSERT_SPYRE(spyre_program_load(dev, image.data(), image.size(), &prog));
        spyre_launch_params lp{};
        lp.num_cores = 1;
        ASSERT_SPYRE(spyre_launch_async(prog, &lp, s));
        for (int i = 0; i < kJobs; ++i)
            ASSERT_SPYRE(spyre_memcpy_dtod_async(dst, i * kSlice, src, i * kSlice, kSlice, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        ASSERT_SPYRE(spyre_device_get_runtime_stats(dev, &after));
        std::vector<uint8_t> got(kJobs * kSlice);
        ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), dst, 0, got.size()));
        EXPECT_SAME(got.data(), want.data(), got.size());
        hit_budget = after.busy_retries > before.busy_retries;
        std::printf("spin %lld: %llu jobs, %llu busy retries\n", static_cast<long long>(spin),
                    static_cast<unsigned long long>(after.jobs_submitted - before.jobs_submitted),
                    static_cast<unsigned long long>(after.busy_retries - before.busy_retries));
        spyre_program_free(prog);
    }
    EXPECT_TRUE(hit_budget) << "the queue never reached the driver's job budget";
    spyre_stream_destroy(s);
    spyre_free(src);
    spyre_free(dst);
    spyre_device_close(dev);
}

// The card's job clock (hw 1.7, SPYRE_DEVICE_CAP_JOB_CLOCK): a launch on one stream and a copy
// on another run at once on the compute and the DMA engine, so the pair takes less modeled time
// than the same two jobs one after the other on one stream, and events of the two streams
// compare (spyre_event_elapsed; before, NOT_SUPPORTED on the kernel backend).

TEST(Streams, JobClockOverlapsALaunchAndACopyOfTwoStreams) {
    spyre_device_t dev;
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    spyre_device_info info{};
    ASSERT_SPYRE(spyre_device_get_info(dev, &info));
    if (!can_launch(dev)) GTEST_SKIP() << "no LAUNCH";
    if (!(info.caps & SPYRE_DEVICE_CAP_JOB_CLOCK)) GTEST_SKIP() << "card before hw 1.7";
    constexpr uint64_t kBytes = 8ull << 20;
    spyre_buffer_t src, dst;
    ASSERT_SPYRE(spyre_malloc(dev, kBytes, &src));
    ASSERT_SPYRE(spyre_malloc(dev, kBytes, &dst));
    spyre_stream_t s, t;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    // A ring of its own (normal streams share one ring, which runs its jobs in order).
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &t));
    spyre_event_t e[4];
    for (auto& ev : e) ASSERT_SPYRE(spyre_event_create(dev, &ev));
    auto elapsed = [](spyre_event_t a, spyre_event_t b) {
        EXPECT_SPYRE(spyre_event_synchronize(a));
        EXPECT_SPYRE(spyre_event_synchronize(b));
        spyre_event_timing tm{};
        EXPECT_SPYRE(spyre_event_elapsed(a, b, &tm));
        return tm.modeled_cycles;
    };
    // The card places a job after everything it had completed when the doorbell rang, so the
    // copy overlaps the launch only if the host rings it while the launch runs: on a loaded
    // host the launch may be over first, or (two rings, two scheduler threads) not yet begun.
    // Each try lengthens the launch; the claim is that some try overlaps, and every try's
    // times are consistent.
    bool overlapped = false;
    for (int64_t spin = 20'000'000; !overlapped && spin <= 320'000'000; spin *= 4) {
        const auto image = spyre_test::build_spin_program(spin);
        spyre_program_t prog;
        ASSERT_SPYRE(spyre_program_load(dev, image.data(), image.size(), &prog));
        spyre_launch_params lp{};
        lp.num_cores = 1;
        spyre_launch_stats st{};
        ASSERT_SPYRE(spyre_launch(prog, &lp, &st));
        // One stream: one after the other.
        ASSERT_SPYRE(spyre_memcpy_dtod_async(dst, 0, src, 0, 4096, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        ASSERT_SPYRE(spyre_event_record(e[0], s));
        ASSERT_SPYRE(spyre_launch_async(prog, &lp, s));
        ASSERT_SPYRE(spyre_event_record(e[1], s));
        ASSERT_SPYRE(spyre_memcpy_dtod_async(dst, 0, src, 0, kBytes, s));
        ASSERT_SPYRE(spyre_event_record(e[2], s));
        const uint64_t launch = elapsed(e[0], e[1]), serial = elapsed(e[0], e[2]);
        EXPECT_GE(launch, st.total_cycles);
        EXPECT_GT(serial, launch);
        // Two streams: the copy runs beside the launch.
        ASSERT_SPYRE(spyre_event_record(e[0], s));
        ASSERT_SPYRE(spyre_launch_async(prog, &lp, s));
        ASSERT_SPYRE(spyre_event_record(e[1], s));
        // Let the launch reach the card before the copy is rung (the launch lasts far longer).
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_SPYRE(spyre_memcpy_dtod_async(dst, 0, src, 0, kBytes, t));
        ASSERT_SPYRE(spyre_event_record(e[2], t));
        const uint64_t launched = elapsed(e[0], e[1]), copied = elapsed(e[0], e[2]);
        std::printf(
            "spin %lld: launch %llu cycles (engine %llu), serial %llu; two streams: launch "
            "%llu, copy %llu\n",
            static_cast<long long>(spin), (unsigned long long)launch,
            (unsigned long long)st.total_cycles, (unsigned long long)serial,
            (unsigned long long)launched, (unsigned long long)copied);
        // Whatever the order, neither job ran faster than alone.
        EXPECT_GE(launched, st.total_cycles);
        EXPECT_GE(copied, serial - launch);
        // The copy ended inside the launch: the pair took less than one after the other.
        overlapped = copied < launched && std::max(launched, copied) < serial;
        spyre_program_free(prog);
    }
    EXPECT_TRUE(overlapped) << "the copy never ran beside the launch";
    for (auto& ev : e) spyre_event_destroy(ev);
    spyre_stream_destroy(s);
    spyre_stream_destroy(t);
    spyre_free(src);
    spyre_free(dst);
    spyre_device_close(dev);
}

// Streams map onto rings: a high-priority stream gets the last ring, normal streams the
// others (not ring 0, the default stream's).
TEST(Streams, StreamsUseSeveralRingsAndBuffersWorkAcrossHandles) {
    spyre_device_t a, b;
    ASSERT_SPYRE(spyre_device_open(0, &a));
    ASSERT_SPYRE(spyre_device_open(0, &b));
    spyre_buffer_t buf;
    ASSERT_SPYRE(spyre_malloc(a, 4096, &buf));
    spyre_stream_t s;
    ASSERT_SPYRE(spyre_stream_create(b, SPYRE_STREAM_PRIORITY_HIGH, &s));
    EXPECT_SPYRE(spyre_memset_async(buf, 0, 3, 4096, s));  // buffer of handle a, stream of b
    EXPECT_SPYRE(spyre_stream_synchronize(s));
    uint8_t v = 0;
    EXPECT_SPYRE(spyre_memcpy_dtoh(&v, buf, 4095, 1));
    EXPECT_EQ(v, 3);
    spyre_stream_destroy(s);
    spyre_free(buf);
    spyre_device_close(a);
    spyre_device_close(b);
}

// Drops `cap` from this process's effective, permitted and inheritable sets.
bool drop_capability(unsigned cap) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &hdr, data)) return false;
    for (auto* set :
         {&data[cap / 32].effective, &data[cap / 32].permitted, &data[cap / 32].inheritable})
        *set &= ~(1u << (cap % 32));
    return syscall(SYS_capset, &hdr, data) == 0;
}

// High and low priority streams submit at the driver's priorities. A process without
// CAP_SYS_NICE may not submit at high priority: its high-priority stream still works
// (normal priority on its own ring) instead of failing every job.
// The spyre tracepoints (Documentation/driver.md "Tracepoints"): on (which empties the trace
// buffer) or off; false if this kernel has none or tracefs is not writable.
bool spyre_trace(bool on) {
    const std::string tracefs = "/sys/kernel/tracing";
    struct stat st;
    if (stat((tracefs + "/events").c_str(), &st) != 0)
        mount("tracefs", tracefs.c_str(), "tracefs", 0, nullptr);
    if (on && !std::ofstream(tracefs + "/trace", std::ios::trunc)) return false;
    std::ofstream enable(tracefs + "/events/spyre/enable");
    return enable && (enable << (on ? "1" : "0")).flush();
}

// How many spyre_job_submit events of the trace carry each priority (prio=0..2).
std::vector<int> submits_by_priority() {
    std::ifstream in("/sys/kernel/tracing/trace");
    std::vector<int> n(3, 0);
    for (std::string line; std::getline(in, line);) {
        if (line.find("spyre_job_submit:") == std::string::npos) continue;
        const auto p = line.find(" prio=");
        if (p == std::string::npos) continue;
        const int prio = std::atoi(line.c_str() + p + 6);
        if (prio >= 0 && prio < 3) ++n[prio];
    }
    return n;
}

// Each stream priority reaches the driver's jobs: HIGH as DRM_SPYRE_PRIORITY_HIGH (2) with
// CAP_SYS_NICE, LOW as LOW (1); without CAP_SYS_NICE the driver refuses HIGH and libspyre falls
// back to NORMAL, so no job of that run is HIGH (the tracepoint's prio field tells).
TEST(Streams, PriorityStreamsWorkWithAndWithoutCapSysNice) {
    const bool traced = geteuid() == 0 && spyre_trace(true);
    for (bool drop : {false, true}) {
        if (traced) spyre_trace(true);
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            if (drop && !drop_capability(CAP_SYS_NICE)) _exit(10);
            spyre_device_t d;
            if (spyre_device_open(0, &d) != SPYRE_SUCCESS) _exit(11);
            spyre_buffer_t buf;
            if (spyre_malloc(d, 8192, &buf) != SPYRE_SUCCESS) _exit(12);
            int code = 0;
            for (int prio : {SPYRE_STREAM_PRIORITY_HIGH, SPYRE_STREAM_PRIORITY_LOW}) {
                spyre_stream_t s;
                uint8_t v = 0;
                const uint8_t want = prio == SPYRE_STREAM_PRIORITY_HIGH ? 0x5e : 0x6f;
                if (spyre_stream_create(d, prio, &s) != SPYRE_SUCCESS ||
                    spyre_memset_async(buf, 0, want, 8192, s) != SPYRE_SUCCESS ||
                    spyre_stream_synchronize(s) != SPYRE_SUCCESS ||
                    spyre_memcpy_dtoh(&v, buf, 8191, 1) != SPYRE_SUCCESS || v != want) {
                    std::fprintf(stderr, "priority %d: %s\n", prio, spyre_last_error());
                    code = 13;
                }
                spyre_stream_destroy(s);
            }
            spyre_free(buf);
            spyre_device_close(d);
            _exit(code);
        }
        int st = 0;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
            << (drop ? "without" : "with") << " CAP_SYS_NICE: status " << st;
        if (!traced) continue;
        spyre_trace(false);
        const std::vector<int> n = submits_by_priority();
        EXPECT_GE(n[1], 1) << "no LOW job " << (drop ? "without" : "with") << " CAP_SYS_NICE";
        if (drop)
            EXPECT_EQ(n[2], 0) << "a HIGH job without CAP_SYS_NICE";
        else
            EXPECT_GE(n[2], 1) << "the HIGH stream's work did not run as HIGH";
    }
    if (!traced) GTEST_SKIP() << "no spyre tracepoints: priorities checked by results only";
}

TEST(Tools, RoundtripExample) {
    int n = device_count();
    auto r = run(std::string(SPYRE_ROUNDTRIP_PATH) + " 4");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(count_lines(r.out, "spyre"), n) << r.out;
    EXPECT_NE(r.out.find("round trip verified"), std::string::npos) << r.out;
}

}  // namespace
