// Fills held in a batch (libspyre.md "Submission batching") on spyre.ko when the job that reads
// their staging slot does not finish normally: hung and stopped by a ring reset, hung and
// stopped by a card reset, or in flight when its card is hot-unplugged. The synchronize reports
// the failure within a bound, every staging slot comes back (more failed batches than a card has
// slots: a slot kept by a failed job would leave the next batch waiting for ever, and alarm()
// ends the process), and the card computes right afterwards (fills read back).
//
// HeldFills.*Reset* need the module loaded with a short job timeout (tests/guest/run-all.sh's
// fault section: job_timeout_ms=500) and cards with x-fault-inject=on; HeldFills.Unplugged*
// needs the default timeout, a spyre-vm guest (QEMU's spyre1 is unplugged and plugged back)
// and the same fault injection (a hung command keeps the job on the card until the unplug).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "../accel_files.hpp"
#include "command_util.hpp"
#include "spyre/program_builder.hpp"
#include "spyre/spyre.h"
#include "spyre_hw.h"

namespace {

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define EXPECT_SPYRE(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

using Clock = std::chrono::steady_clock;

// Batches with held fills run after a failure: more than a card's staging slots (8,
// kernel/device.cpp kMaxStagingSlots).
constexpr int kBatchesAfter = 10;
// What a recovery may add to the timeout under TCG on a loaded host (spyre_fault_test's
// HANG_SLACK_MS).
constexpr int64_t kSlackMs = 4000;

unsigned module_timeout_ms() {
    unsigned ms = 0;
    std::ifstream("/sys/module/spyre/parameters/job_timeout_ms") >> ms;
    return ms;
}

std::string debugfs_file(spyre_device_t dev, const char* name) {
    spyre_device_info info{};
    spyre_device_get_info(dev, &info);
    struct stat st;
    if (stat("/sys/kernel/debug/accel", &st))
        mount("debugfs", "/sys/kernel/debug", "debugfs", 0, nullptr);
    return std::string("/sys/kernel/debug/accel/") + info.pci_address + "/" + name;
}

// SPYRE_REG_FAULT_HANG through debugfs: the card's next commands hang (SPYRE_HANG_*).
bool arm_hang(spyre_device_t dev, uint32_t val) {
    std::ofstream f(debugfs_file(dev, "fault_hang"));
    f << val;
    f.flush();
    return f.good();
}

int64_t ms_since(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Fills of every pattern size into one buffer, whole blocks and over 64 KiB (4 KiB blocks, a
// COPY_2D and a tail on spyre.ko) among them, and a launch between them: queued in a batch.
struct HeldWork {
    static constexpr uint64_t kBytes = 192 * 1024;
    struct Fill {
        uint64_t offset;
        uint32_t psize;
        uint64_t count;
    };
    static constexpr Fill kFills[] = {
        {3, 1, 5},       {17, 2, 3 * 4096 / 2 + 7}, {12345, 4, 1001},
        {20011, 8, 515}, {40003, 1, 9000},          {65601, 4, 30003},
    };
    spyre_device_t dev = nullptr;
    spyre_buffer_t buf = nullptr;
    spyre_program_t nop = nullptr;
    std::vector<uint8_t> expect = std::vector<uint8_t>(kBytes, 0);

    void init(spyre_device_t d) {
        dev = d;
        ASSERT_SPYRE(spyre_malloc(dev, kBytes, &buf));
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, expect.data(), kBytes));
        spyre::ProgramBuilder b;
        b.halt();
        const std::vector<uint8_t> img = b.finish();
        ASSERT_SPYRE(spyre_program_load(dev, img.data(), img.size(), &nop));
    }
    void fini() {
        if (nop) spyre_program_free(nop);
        if (buf) spyre_free(buf);
        nop = nullptr, buf = nullptr;
    }
    // One batch of the fills with patterns of `seed` and a launch; `expect` is what they write.
    void queue(spyre_stream_t s, uint64_t seed) {
        ASSERT_SPYRE(spyre_stream_begin_batch(s));
        for (size_t i = 0; i < std::size(kFills); ++i) {
            const Fill& f = kFills[i];
            const uint64_t p = 0x0101010101010101ull * (seed * 8 + i + 1) ^ 0x0f1e2d3c4b5a6978ull;
            ASSERT_SPYRE(spyre_fill_async(buf, f.offset, &p, f.psize, f.count, s));
            for (uint64_t k = 0; k < f.count * f.psize; ++k)
                expect[f.offset + k] = static_cast<uint8_t>(p >> (8 * (k % f.psize)));
            if (i == 2) {
                spyre_launch_params lp{};
                lp.num_cores = 1;
                ASSERT_SPYRE(spyre_launch_async(nop, &lp, s));
            }
        }
        ASSERT_SPYRE(spyre_stream_end_batch(s));
    }
    // Batches of held fills, each synchronized and read back.
    void run_and_check(spyre_stream_t s, int batches) {
        std::vector<uint8_t> got(kBytes);
        for (int i = 0; i < batches; ++i) {
            ASSERT_NO_FATAL_FAILURE(queue(s, 100 + i));
            ASSERT_SPYRE(spyre_stream_synchronize(s));
            ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), buf, 0, kBytes));
            for (uint64_t k = 0; k < kBytes; ++k)
                ASSERT_EQ(got[k], expect[k]) << "batch " << i << ", byte " << k;
        }
    }
    // The filled bytes were not all written (the batch did not run to its end).
    void reset_expect() {
        std::fill(expect.begin(), expect.end(), 0);
        ASSERT_SPYRE(spyre_memcpy_htod(buf, 0, expect.data(), kBytes));
    }
};

// Card 0 with a short job timeout and fault injection, or a skip; alarm() bounds the test.
class HeldFills : public ::testing::Test {
  protected:
    spyre_device_t dev = nullptr;
    spyre_stream_t s = nullptr;
    HeldWork w;
    unsigned timeout_ms = 0;

    void SetUp() override {
        if (geteuid()) GTEST_SKIP() << "needs root (debugfs)";
        timeout_ms = module_timeout_ms();
        if (!timeout_ms || timeout_ms > 2000)
            GTEST_SKIP() << "job_timeout_ms is " << timeout_ms
                         << ": load spyre with job_timeout_ms=500";
        ASSERT_SPYRE(spyre_device_open(0, &dev));
        if (!arm_hang(dev, 0)) GTEST_SKIP() << "no fault_hang (a card with x-fault-inject=on)";
        alarm(300);  // a lost staging slot waits for ever: end the process instead
        ASSERT_NO_FATAL_FAILURE(w.init(dev));
        ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    }
    void TearDown() override {
        if (s) spyre_stream_destroy(s);
        w.fini();
        if (dev) spyre_device_close(dev);
        alarm(0);
    }
};

// The batch's job hangs and a ring reset stops it (the ring ABORT works): the synchronize
// reports the timeout within its bound, the job's staging slot comes back; 10 times, more than
// the card has slots, then batches of held fills compute right.
TEST_F(HeldFills, RingResetOfABatchFreesItsSlots) {
    for (int i = 0; i < kBatchesAfter; ++i) {
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        ASSERT_TRUE(arm_hang(dev, 1));  // the batch's first command
        const auto t0 = Clock::now();
        ASSERT_NO_FATAL_FAILURE(w.queue(s, i));
        EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_ERROR_TIMEOUT) << "cycle " << i;
        EXPECT_NE(std::string(spyre_last_error()).find("hung and was aborted"), std::string::npos)
            << spyre_last_error();
        EXPECT_LE(ms_since(t0), 2 * timeout_ms + kSlackMs) << "cycle " << i;
        ASSERT_NO_FATAL_FAILURE(w.reset_expect());
    }
    w.run_and_check(s, kBatchesAfter);
}

// The batch's job hangs where a ring ABORT cannot stop it (SPYRE_HANG_STICKY): the driver
// resets the card. The guilty batch reports the timeout within its bound; a second batch queued
// behind it on the stream is re-run after the reset and computes right (driver.md "What each
// client sees"); the card counts the reset; then batches of held fills compute right, more than
// the card has staging slots.
TEST_F(HeldFills, CardResetWhileABatchRuns) {
    spyre_telemetry t0{}, t1{};
    ASSERT_SPYRE(spyre_device_get_telemetry(dev, &t0));
    // innocent: another buffer, other patterns, behind the guilty job (made before the hang
    // is armed: its BO clear must not take it)
    HeldWork other;
    ASSERT_NO_FATAL_FAILURE(other.init(dev));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    ASSERT_TRUE(arm_hang(dev, 1 | SPYRE_HANG_STICKY));
    const auto start = Clock::now();
    ASSERT_NO_FATAL_FAILURE(w.queue(s, 7));  // guilty
    ASSERT_NO_FATAL_FAILURE(other.queue(s, 8));
    EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_ERROR_TIMEOUT);
    EXPECT_NE(std::string(spyre_last_error()).find("hung and was aborted"), std::string::npos)
        << spyre_last_error();
    EXPECT_LE(ms_since(start), 2 * timeout_ms + 2000 + kSlackMs);
    EXPECT_SPYRE(spyre_stream_synchronize(s));  // reported once
    std::vector<uint8_t> got(HeldWork::kBytes);
    ASSERT_SPYRE(spyre_memcpy_dtoh(got.data(), other.buf, 0, got.size()));
    for (uint64_t k = 0; k < got.size(); ++k)
        ASSERT_EQ(got[k], other.expect[k]) << "the batch behind the hung one, byte " << k;
    ASSERT_SPYRE(spyre_device_get_telemetry(dev, &t1));
    EXPECT_GE(t1.resets, t0.resets + 1) << "the card was reset";
    other.fini();

    ASSERT_NO_FATAL_FAILURE(w.reset_expect());
    w.run_and_check(s, kBatchesAfter);
}

// A batch's job still on the card (its first command hangs; the default job timeout is far
// away) when the card, QEMU's spyre1, is hot-unplugged: the synchronize reports DEVICE_LOST,
// so does a new batch; the stream, buffers and device are released (the staging slots' host
// buffers with them: no driver file stays open); the card plugged back computes right in the
// same process.
TEST(HeldFillsUnplug, UnpluggedWhileABatchRuns) {
    const char* card_sh = "tests/guest/uapi/p2p-card.sh";
    if (geteuid()) GTEST_SKIP() << "needs root (debugfs)";
    if (!getenv("SPYRE_VM_DIR") || access(card_sh, X_OK))
        GTEST_SKIP() << "needs a spyre-vm guest with tools/vm/guest-qmp, run from /src";
    if (module_timeout_ms() < 10000)
        GTEST_SKIP() << "job_timeout_ms " << module_timeout_ms()
                     << ": the hung job would time out before the unplug";
    int n = 0;
    ASSERT_SPYRE(spyre_get_device_count(&n));
    if (n < 2) GTEST_SKIP() << "needs two cards (spyre1 is unplugged)";
    // libspyre's index of spyre1, by its accel node (a new one after a re-plug), or -1
    auto find = [&] {
        auto node = spyre_test::run_command(std::string(card_sh) + " node spyre1", false);
        node.out.erase(node.out.find_last_not_of('\n') + 1);
        int count = 0;
        spyre_get_device_count(&count);
        for (int i = 0; node.status == 0 && i < count; ++i) {
            spyre_device_t d = nullptr;
            if (spyre_device_open(i, &d) != SPYRE_SUCCESS) continue;
            spyre_device_info info{};
            const bool match =
                spyre_device_get_info(d, &info) == SPYRE_SUCCESS && node.out == info.accel_path;
            spyre_device_close(d);
            if (match) return i;
        }
        return -1;
    };
    int index = find();
    ASSERT_GE(index, 0) << "no card is QEMU's spyre1";
    const int files0 = spyre_test::open_accel_files();

    alarm(300);
    spyre_device_t dev = nullptr;
    ASSERT_SPYRE(spyre_device_open(index, &dev));
    if (!arm_hang(dev, 0)) {
        spyre_device_close(dev);
        GTEST_SKIP() << "no fault_hang (a card with x-fault-inject=on)";
    }
    HeldWork w;
    ASSERT_NO_FATAL_FAILURE(w.init(dev));
    spyre_stream_t s = nullptr;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    ASSERT_NO_FATAL_FAILURE(w.run_and_check(s, 1));  // a slot made, the programs loaded
    ASSERT_TRUE(arm_hang(dev, 1));
    ASSERT_NO_FATAL_FAILURE(w.queue(s, 1));
    const auto t0 = Clock::now();
    ASSERT_EQ(spyre_test::run_command(std::string(card_sh) + " unplug spyre1", false).status, 0);
    const int64_t unplug_ms = ms_since(t0);
    EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_NE(std::string(spyre_last_error()).find("was removed or its driver unbound"),
              std::string::npos)
        << spyre_last_error();
    EXPECT_LE(ms_since(t0) - unplug_ms, 1000) << "the synchronize after the unplug";
    EXPECT_EQ(spyre_device_synchronize(dev), SPYRE_ERROR_DEVICE_LOST);
    // a new batch with held fills: its end queues it and reports the loss
    const uint64_t p = 0x5a;
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    EXPECT_SPYRE(spyre_fill_async(w.buf, 0, &p, 1, 4096, s));
    EXPECT_EQ(spyre_stream_end_batch(s), SPYRE_ERROR_DEVICE_LOST) << spyre_last_error();
    // destroying waits for the stream's work, which the lost card cannot confirm: the stream is
    // released and the loss returned
    EXPECT_EQ(spyre_stream_destroy(s), SPYRE_ERROR_DEVICE_LOST) << spyre_last_error();
    w.fini();
    EXPECT_SPYRE(spyre_device_close(dev));
    EXPECT_EQ(spyre_test::open_accel_files(), files0)
        << "driver files still open after closing the lost card";

    ASSERT_EQ(spyre_test::run_command(std::string(card_sh) + " replug spyre1", false).status, 0);
    index = find();
    ASSERT_GE(index, 0) << "spyre1 did not come back";
    ASSERT_SPYRE(spyre_device_open(index, &dev));
    HeldWork again;
    ASSERT_NO_FATAL_FAILURE(again.init(dev));
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    again.run_and_check(s, kBatchesAfter);
    EXPECT_SPYRE(spyre_stream_destroy(s));
    again.fini();
    EXPECT_SPYRE(spyre_device_close(dev));
    alarm(0);
}

}  // namespace
