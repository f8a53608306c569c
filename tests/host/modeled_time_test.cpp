// The simulator's modeled time across streams of one card (Documentation/libspyre.md "Modeled
// time"): the compute engine and the DMA engine are separate units, so independent jobs of two
// streams on the two units overlap (elapsed = the longer), dependent ones add up, two jobs on
// one unit take turns, and one stream alone measures the sum of its jobs as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;
// hardware.md section 11: a 1 MiB copy into a peer card at 1.5 GHz
constexpr uint64_t kPeerCopyCycles = 256 + 1500 + 26215;

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define EXPECT_SPYRE(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

class ModeledTime : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        setenv("SPYRE_SIM_DEVICES", "2", 1);
        unsetenv("SPYRE_SIM_P2P");
        ASSERT_SPYRE(spyre_device_open(0, &a_));
        ASSERT_SPYRE(spyre_device_open(1, &b_));
        ASSERT_SPYRE(spyre_device_enable_peer_access(a_, b_));
        ASSERT_SPYRE(spyre_malloc(a_, MiB, &src_));
        ASSERT_SPYRE(spyre_malloc(b_, MiB, &dst_));
        auto img = spyre_test::build_spin_program(20000);
        ASSERT_SPYRE(spyre_program_load(a_, img.data(), img.size(), &spin_));
        params_.num_cores = 4;
        // the launch's own cycles, from a synchronous run
        spyre_launch_stats st{};
        ASSERT_SPYRE(spyre_launch(spin_, &params_, &st));
        launch_ = st.total_cycles;
        ASSERT_GT(launch_, 0u);
        for (auto*& s : streams_) ASSERT_SPYRE(spyre_stream_create(a_, 0, &s));
        for (auto*& e : events_) ASSERT_SPYRE(spyre_event_create(a_, &e));
    }
    void TearDown() override {
        for (auto* e : events_) spyre_event_destroy(e);
        for (auto* s : streams_) spyre_stream_destroy(s);
        spyre_program_free(spin_);
        spyre_free(src_);
        spyre_free(dst_);
        spyre_device_close(a_);
        spyre_device_close(b_);
        unsetenv("SPYRE_BACKEND");
        unsetenv("SPYRE_SIM_DEVICES");
    }
    void launch(spyre_stream_t s) { ASSERT_SPYRE(spyre_launch_async(spin_, &params_, s)); }
    void push(spyre_stream_t s) { ASSERT_SPYRE(spyre_memcpy_peer_async(dst_, 0, src_, 0, MiB, s)); }
    uint64_t elapsed(spyre_event_t from, spyre_event_t to) {
        EXPECT_SPYRE(spyre_event_synchronize(from));
        EXPECT_SPYRE(spyre_event_synchronize(to));
        spyre_event_timing t{};
        EXPECT_SPYRE(spyre_event_elapsed(from, to, &t));
        return t.modeled_cycles;
    }

    spyre_device_t a_ = nullptr, b_ = nullptr;
    spyre_buffer_t src_ = nullptr, dst_ = nullptr;
    spyre_program_t spin_ = nullptr;
    spyre_launch_params params_{};
    uint64_t launch_ = 0;
    spyre_stream_t streams_[2] = {};
    spyre_event_t events_[4] = {};
};

// A launch on one stream and a peer copy on another, both after one start event and joined
// again by the first: the card runs them at once on its two engines.
TEST_F(ModeledTime, IndependentJobsOnTwoUnitsOverlap) {
    auto [s, t] = streams_;
    auto [start, launched, pushed, end] = events_;
    ASSERT_SPYRE(spyre_event_record(start, s));
    ASSERT_SPYRE(spyre_stream_wait_event(t, start));
    launch(s);
    push(t);
    ASSERT_SPYRE(spyre_event_record(launched, s));
    ASSERT_SPYRE(spyre_event_record(pushed, t));
    ASSERT_SPYRE(spyre_stream_wait_event(s, pushed));
    ASSERT_SPYRE(spyre_event_record(end, s));
    EXPECT_EQ(elapsed(start, launched), launch_);
    EXPECT_EQ(elapsed(start, pushed), kPeerCopyCycles);  // events of two streams of one card
    EXPECT_EQ(elapsed(start, end), std::max(launch_, kPeerCopyCycles));
    EXPECT_LT(elapsed(start, end), launch_ + kPeerCopyCycles);
}

// The copy waits for the launch: their times add up.
TEST_F(ModeledTime, DependentJobsAddUp) {
    auto [s, t] = streams_;
    auto [start, launched, pushed, unused] = events_;
    ASSERT_SPYRE(spyre_event_record(start, s));
    launch(s);
    ASSERT_SPYRE(spyre_event_record(launched, s));
    ASSERT_SPYRE(spyre_stream_wait_event(t, launched));
    push(t);
    ASSERT_SPYRE(spyre_event_record(pushed, t));
    EXPECT_EQ(elapsed(start, pushed), launch_ + kPeerCopyCycles);
    EXPECT_EQ(elapsed(launched, pushed), kPeerCopyCycles);
}

// Two launches of two streams share the compute engine: one after the other.
TEST_F(ModeledTime, JobsOnOneUnitTakeTurns) {
    auto [s, t] = streams_;
    auto [start, first, second, end] = events_;
    ASSERT_SPYRE(spyre_event_record(start, s));
    ASSERT_SPYRE(spyre_stream_wait_event(t, start));
    launch(s);
    launch(t);
    ASSERT_SPYRE(spyre_event_record(first, s));
    ASSERT_SPYRE(spyre_event_record(second, t));
    ASSERT_SPYRE(spyre_stream_wait_event(s, second));
    ASSERT_SPYRE(spyre_event_record(end, s));
    EXPECT_EQ(elapsed(start, end), 2 * launch_);
}

// One stream: the sum of its jobs, however the card was used before (the synchronous launch of
// SetUp ran on the default stream; the host waited for it, so this stream starts after it).
TEST_F(ModeledTime, OneStreamIsTheSumOfItsJobs) {
    auto [s, t] = streams_;
    auto [start, end, unused0, unused1] = events_;
    ASSERT_SPYRE(spyre_event_record(start, s));
    launch(s);
    push(s);
    launch(s);
    ASSERT_SPYRE(spyre_event_record(end, s));
    EXPECT_EQ(elapsed(start, end), 2 * launch_ + kPeerCopyCycles);
    // work of another stream the host waited for before it queued more on this one
    launch(t);
    ASSERT_SPYRE(spyre_stream_synchronize(t));
    ASSERT_SPYRE(spyre_event_record(start, s));
    push(s);
    ASSERT_SPYRE(spyre_event_record(end, s));
    EXPECT_EQ(elapsed(start, end), kPeerCopyCycles);
}

// Events of two cards have no common clock.
TEST_F(ModeledTime, EventsOfTwoCardsAreNotComparable) {
    spyre_stream_t sb = nullptr;
    spyre_event_t eb = nullptr;
    ASSERT_SPYRE(spyre_stream_create(b_, 0, &sb));
    ASSERT_SPYRE(spyre_event_create(b_, &eb));
    ASSERT_SPYRE(spyre_event_record(events_[0], streams_[0]));
    ASSERT_SPYRE(spyre_event_record(eb, sb));
    ASSERT_SPYRE(spyre_event_synchronize(events_[0]));
    ASSERT_SPYRE(spyre_event_synchronize(eb));
    spyre_event_timing t{};
    EXPECT_EQ(spyre_event_elapsed(events_[0], eb, &t), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("different cards"), std::string::npos)
        << spyre_last_error();
    spyre_event_destroy(eb);
    spyre_stream_destroy(sb);
}

}  // namespace
