// Streams, events, async copies, fills, strided copies, the sub-allocator, the program cache
// and handle checks on the simulator backend (cases shared with the guest test).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "graph_cases.hpp"
#include "stream_cases.hpp"

namespace {

class SimStreams : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        setenv("SPYRE_SIM_DEVICES", "2", 1);
        unsetenv("SPYRE_SIM_MEMORY");
        ASSERT_EQ(spyre_device_open(0, &dev_), SPYRE_SUCCESS) << spyre_last_error();
    }
    void TearDown() override {
        if (dev_) spyre_device_close(dev_);
        unsetenv("SPYRE_BACKEND");
        unsetenv("SPYRE_SIM_DEVICES");
    }
    spyre_device_t dev_ = nullptr;
};

TEST_F(SimStreams, StreamOrdering) { spyre_cases::stream_ordering(dev_); }
TEST_F(SimStreams, CrossStreamEventWait) { spyre_cases::cross_stream_event(dev_); }
TEST_F(SimStreams, EventTimingMatchesLaunchStats) { spyre_cases::event_timing(dev_); }
TEST_F(SimStreams, AsyncFaultReachesTheNextSynchronizeAndNothingIsLost) {
    spyre_cases::async_fault_propagation(dev_);
}
TEST_F(SimStreams, ManyThreads) { spyre_cases::many_threads(dev_, 16, 300000, 20); }
TEST_F(SimStreams, UseAfterFreeIsDetected) { spyre_cases::use_after_free(dev_); }
TEST_F(SimStreams, SubAllocator) { spyre_cases::suballocator(dev_, 2000); }
// Its own environment: the fixture holds card 0 open.
TEST(SimDeviceLifetime, ClosedWithWorkQueuedIsReleased) {
    setenv("SPYRE_BACKEND", "sim", 1);
    setenv("SPYRE_SIM_DEVICES", "2", 1);
    spyre_cases::closed_with_work_queued(1);
    unsetenv("SPYRE_BACKEND");
    unsetenv("SPYRE_SIM_DEVICES");
}
TEST_F(SimStreams, ProgramCacheHit) { spyre_cases::program_cache(dev_); }
TEST_F(SimStreams, HostFunctionRunsInStreamOrder) { spyre_cases::host_func(dev_); }
TEST_F(SimStreams, FillsAndStridedCopies) { spyre_cases::fills_and_strided(dev_); }
TEST_F(SimStreams, GraphReplayIsOneSubmission) { spyre_cases::graph_replay(dev_, 1); }
TEST_F(SimStreams, GraphCaptureErrors) { spyre_cases::graph_capture_errors(dev_); }
TEST_F(SimStreams, GraphOfManyLaunches) { spyre_cases::graph_many_launches(dev_, 1100, 1); }
TEST_F(SimStreams, DeviceToDeviceAcrossCards) {
    spyre_device_t d1 = nullptr;
    ASSERT_EQ(spyre_device_open(1, &d1), SPYRE_SUCCESS);
    spyre_cases::across_cards(dev_, d1);
    spyre_device_close(d1);
}

// A synchronize behind many queued items sleeps until the last one is done: it is not woken
// at every item before it (a futex wake and a context switch each: a decode step's queued
// launches paid that, torch_spyre.md). Two threads wait at once; both see every item done.
TEST_F(SimStreams, SynchronizeWakesForItsLastItemOnly) {
    constexpr int kItems = 100;
    spyre_stream_t s = nullptr;
    ASSERT_EQ(spyre_stream_create(dev_, SPYRE_STREAM_PRIORITY_NORMAL, &s), SPYRE_SUCCESS);
    std::atomic<int> ran{0};
    auto item = [](void* p) {  // long enough for a woken waiter to sleep again before the next
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        static_cast<std::atomic<int>*>(p)->fetch_add(1);
    };
    for (int i = 0; i < kItems; ++i)
        ASSERT_EQ(spyre_launch_host_func(s, item, &ran), SPYRE_SUCCESS);
    auto sleeps = [] {
        rusage u{};
        getrusage(RUSAGE_THREAD, &u);
        return u.ru_nvcsw;
    };
    long other = -1;
    int other_saw = -1;
    std::thread t([&] {
        const long before = sleeps();
        EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_SUCCESS);
        other_saw = ran.load();
        other = sleeps() - before;
    });
    const long before = sleeps();
    EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_SUCCESS);  // not ASSERT: t is still running
    const long mine = sleeps() - before;
    EXPECT_EQ(ran.load(), kItems);
    t.join();
    EXPECT_EQ(other_saw, kItems);
    // one sleep each, a few more for spurious wake-ups; woken per item it would be ~kItems
    EXPECT_LT(mine, 10);
    EXPECT_LT(other, 10);
    spyre_stream_destroy(s);
}

TEST_F(SimStreams, StreamArgumentChecks) {
    spyre_stream_t s = nullptr;
    EXPECT_EQ(spyre_stream_create(dev_, 5, &s), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(spyre_stream_synchronize(nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_device_t d1 = nullptr;
    ASSERT_EQ(spyre_device_open(1, &d1), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_stream_create(d1, SPYRE_STREAM_PRIORITY_HIGH, &s), SPYRE_SUCCESS);
    int prio = 0;
    spyre_device_t owner = nullptr;
    EXPECT_EQ(spyre_stream_get_info(s, &owner, &prio), SPYRE_SUCCESS);
    EXPECT_EQ(owner, d1);
    EXPECT_EQ(prio, SPYRE_STREAM_PRIORITY_HIGH);
    spyre_buffer_t b = nullptr;
    ASSERT_EQ(spyre_malloc(dev_, 64, &b), SPYRE_SUCCESS);
    char x[64] = {};
    EXPECT_EQ(spyre_memcpy_htod_async(b, 0, x, 64, s), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("the stream belongs to spyre-sim1"),
              std::string::npos)
        << spyre_last_error();
    spyre_event_t e = nullptr, e2 = nullptr;
    ASSERT_EQ(spyre_event_create(dev_, &e), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_event_create(dev_, &e2), SPYRE_SUCCESS);
    spyre_event_timing t;
    EXPECT_EQ(spyre_event_elapsed(e, e2, &t), SPYRE_ERROR_INVALID_ARGUMENT);  // never recorded
    EXPECT_EQ(spyre_stream_query(s), SPYRE_SUCCESS);
    spyre_event_destroy(e);
    spyre_event_destroy(e2);
    spyre_free(b);
    spyre_stream_destroy(s);
    spyre_device_close(d1);
}

// ---- Device-side semaphores (shared cases, then the simulator's own) ----

TEST_F(SimStreams, SemaphoreCapabilityIsAlwaysSet) {
    EXPECT_TRUE(spyre_cases::has_semaphores(dev_));
}
TEST_F(SimStreams, SemaphoreWaitReleasedByAWriteQueuedAfterIt) {
    spyre_cases::semaphore_cross_stream(dev_);
}
TEST_F(SimStreams, SemaphoreWaiterModeledTimeNotBeforeWriter) {
    spyre_cases::semaphore_modeled_time(dev_);
}
TEST_F(SimStreams, SemaphoreHostWriteReleasesAWait) { spyre_cases::semaphore_host_write(dev_); }
TEST_F(SimStreams, SemaphoreTimeoutFailsTheStreamWhichKeepsWorking) {
    spyre_cases::semaphore_timeout(dev_);
}
TEST_F(SimStreams, SemaphoreArgumentErrors) { spyre_cases::semaphore_argument_errors(dev_); }
TEST_F(SimStreams, SemaphoreCaptureIsRefused) { spyre_cases::semaphore_capture_refused(dev_); }

// Card 0 writes a semaphore of card 1 once peer access is enabled (refused before).
TEST_F(SimStreams, SemaphoreWrittenIntoAPeerCard) {
    spyre_device_t d1 = nullptr;
    ASSERT_EQ(spyre_device_open(1, &d1), SPYRE_SUCCESS);
    spyre_buffer_t sem = nullptr;
    ASSERT_EQ(spyre_malloc(d1, 64, &sem), SPYRE_SUCCESS);
    spyre_stream_t s0 = nullptr;
    ASSERT_EQ(spyre_stream_create(dev_, SPYRE_STREAM_PRIORITY_NORMAL, &s0), SPYRE_SUCCESS);
    EXPECT_EQ(spyre_stream_write_value(s0, sem, 0, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("spyre_device_enable_peer_access"),
              std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(spyre_stream_wait_value(s0, sem, 0, 1, 0), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("waits only for semaphores of its own card"),
              std::string::npos)
        << spyre_last_error();
    ASSERT_EQ(spyre_device_enable_peer_access(dev_, d1), SPYRE_SUCCESS);
    spyre_cases::semaphore_peer(dev_, d1);
    spyre_cases::semaphore_peer_batch(dev_, d1);
    spyre_stream_destroy(s0);
    spyre_free(sem);
    spyre_device_close(d1);
}

// A wait pending when its card is lost (a simulated loss, taken by a launch of another stream)
// fails with DEVICE_LOST at once, not at its timeout; a write on the lost card is refused.
TEST_F(SimStreams, SemaphoreWaitEndsWhenTheCardIsLost) {
    spyre_device_t d1 = nullptr;
    ASSERT_EQ(spyre_device_open(1, &d1), SPYRE_SUCCESS);
    auto img = spyre_test::build_add_program(64);
    spyre_program_t add = nullptr;
    ASSERT_EQ(spyre_program_load(d1, img.data(), img.size(), &add), SPYRE_SUCCESS);
    spyre_buffer_t x = nullptr, sem = nullptr;
    ASSERT_EQ(spyre_malloc(d1, 64 * 2 * 3, &x), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_malloc(d1, 64, &sem), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_memset(sem, 0, 0, 64), SPYRE_SUCCESS);
    spyre_stream_t w = nullptr, l = nullptr;
    ASSERT_EQ(spyre_stream_create(d1, SPYRE_STREAM_PRIORITY_HIGH, &w), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_stream_create(d1, SPYRE_STREAM_PRIORITY_NORMAL, &l), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_stream_wait_value(w, sem, 0, 1, SPYRE_SEMAPHORE_WAIT_MAX_US), SPYRE_SUCCESS);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(spyre_sim_inject_fault(1, SPYRE_SIM_FAULT_LOST, 0), SPYRE_SUCCESS);
    spyre_launch_params p{};
    p.num_cores = 1;
    p.num_args = 3;
    spyre_buffer_device_address(x, &p.args[0]);
    p.args[1] = p.args[2] = p.args[0];
    p.buffers = &x;
    p.num_buffers = 1;
    ASSERT_EQ(spyre_launch_async(add, &p, l), SPYRE_SUCCESS);
    EXPECT_EQ(spyre_stream_synchronize(w), SPYRE_ERROR_DEVICE_LOST) << spyre_last_error();
    // not at the wait's 10 s timeout (a bound loose enough for a loaded host)
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(spyre_stream_write_value(w, sem, 0, 1), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_EQ(spyre_stream_wait_value(w, sem, 0, 1, 0), SPYRE_ERROR_DEVICE_LOST);
    ASSERT_EQ(spyre_sim_inject_fault(1, SPYRE_SIM_FAULT_NONE, 0), SPYRE_SUCCESS);
    spyre_device_synchronize(d1);  // the lost card's errors, once
    EXPECT_EQ(spyre_stream_write_value(w, sem, 0, 1), SPYRE_SUCCESS) << spyre_last_error();
    EXPECT_EQ(spyre_stream_synchronize(w), SPYRE_SUCCESS) << spyre_last_error();
    spyre_stream_destroy(w);
    spyre_stream_destroy(l);
    spyre_free(x);
    spyre_free(sem);
    spyre_program_free(add);
    spyre_device_close(d1);
}

// Destroying a stream whose wait can never be satisfied returns once the wait timed out, with
// that error (the stream's first).
TEST_F(SimStreams, SemaphoreStreamDestroyedWhileWaiting) {
    spyre_buffer_t sem = nullptr;
    ASSERT_EQ(spyre_malloc(dev_, 64, &sem), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_memset(sem, 0, 0, 64), SPYRE_SUCCESS);
    spyre_stream_t s = nullptr;
    ASSERT_EQ(spyre_stream_create(dev_, SPYRE_STREAM_PRIORITY_NORMAL, &s), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_stream_wait_value(s, sem, 0, 1, 50000), SPYRE_SUCCESS);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(spyre_stream_destroy(s), SPYRE_ERROR_TIMEOUT);
    EXPECT_NE(std::string(spyre_last_error()).find("timed out after 50000 us"), std::string::npos)
        << spyre_last_error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
    spyre_free(sem);
}

}  // namespace
