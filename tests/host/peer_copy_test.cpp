// Peer-to-peer copies (spyre_memcpy_peer, spyre_device_enable_peer_access) between simulated
// cards of one process: data both ways at odd offsets, which card's engine and counters the
// copy uses, the peer link's modeled cycles, and every refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;

#define ASSERT_SPYRE(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define EXPECT_SPYRE(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()

std::string last() { return spyre_last_error(); }
#define EXPECT_MSG(substr) EXPECT_NE(last().find(substr), std::string::npos) << last()

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 9)) ^ seed);
    return v;
}

// Two (or more) simulated cards, opened fresh for each test.
class Peer : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        setenv("SPYRE_SIM_DEVICES", "3", 1);
        unsetenv("SPYRE_SIM_P2P");
    }
    void TearDown() override {
        for (auto* b : bufs_) spyre_free(b);
        for (auto* d : devs_) spyre_device_close(d);
        unsetenv("SPYRE_BACKEND");
        unsetenv("SPYRE_SIM_DEVICES");
        unsetenv("SPYRE_SIM_P2P");
    }
    spyre_device_t open(int i) {
        spyre_device_t d = nullptr;
        EXPECT_SPYRE(spyre_device_open(i, &d));
        if (d) devs_.push_back(d);
        return d;
    }
    spyre_buffer_t alloc(spyre_device_t d, uint64_t n) {
        spyre_buffer_t b = nullptr;
        EXPECT_SPYRE(spyre_malloc(d, n, &b));
        if (b) bufs_.push_back(b);
        return b;
    }
    static std::vector<uint8_t> download(spyre_buffer_t b, uint64_t off, uint64_t n) {
        std::vector<uint8_t> v(n);
        EXPECT_SPYRE(spyre_memcpy_dtoh(v.data(), b, off, n));
        return v;
    }
    static spyre_telemetry tele(spyre_device_t d) {
        spyre_telemetry t{};
        EXPECT_SPYRE(spyre_device_get_telemetry(d, &t));
        return t;
    }
    std::vector<spyre_buffer_t> bufs_;
    std::vector<spyre_device_t> devs_;
};

TEST_F(Peer, CapabilityQueryAndEnable) {
    spyre_device_t a = open(0), b = open(1);
    spyre_device_info ia{};
    ASSERT_SPYRE(spyre_device_get_info(a, &ia));
    EXPECT_TRUE(ia.caps & SPYRE_DEVICE_CAP_P2P);
    int can = -1;
    ASSERT_SPYRE(spyre_device_can_access_peer(a, b, &can));
    EXPECT_EQ(can, 1);
    ASSERT_SPYRE(spyre_device_can_access_peer(a, a, &can));
    EXPECT_EQ(can, 0);  // a card is not its own peer
    EXPECT_EQ(spyre_device_can_access_peer(a, b, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_device_enable_peer_access(a, a), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre-sim0 cannot be its own peer");
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));  // again: a no-op
    EXPECT_EQ(spyre_device_enable_peer_access(nullptr, b), SPYRE_ERROR_INVALID_ARGUMENT);
}

// Card 0 -> card 1 (synchronous: card 0 pushes), back with a stream of card 1 reading card 0,
// and card 0 reading card 1: the data at odd offsets, the neighbours untouched, and the
// counters of the card whose engine copied.
TEST_F(Peer, CopiesBothWaysAndCountsOnTheIssuingCard) {
    spyre_device_t a = open(0), b = open(1);
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));
    ASSERT_SPYRE(spyre_device_enable_peer_access(b, a));
    const uint64_t n = 3 * MiB + 12345;
    spyre_buffer_t A = alloc(a, n + 64), B = alloc(b, n + 64), A2 = alloc(a, n + 64);
    auto src = pattern(n, 1);
    std::vector<uint8_t> zeros(n + 64, 0);
    ASSERT_SPYRE(spyre_memcpy_htod(A, 7, src.data(), n));
    ASSERT_SPYRE(spyre_memcpy_htod(B, 0, zeros.data(), n + 64));
    ASSERT_SPYRE(spyre_memcpy_htod(A2, 0, zeros.data(), n + 64));
    const spyre_telemetry a0 = tele(a), b0 = tele(b);

    ASSERT_SPYRE(spyre_memcpy_peer(B, 33, A, 7, n));
    auto got = download(B, 0, n + 64);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), got.begin() + 33)) << "card 0 -> card 1";
    for (uint64_t i = 0; i < 33; ++i) ASSERT_EQ(got[i], 0) << i;
    for (uint64_t i = 33 + n; i < n + 64; ++i) ASSERT_EQ(got[i], 0) << i;
    const spyre_telemetry a1 = tele(a), b1 = tele(b);
    EXPECT_EQ(a1.p2p_write_bytes - a0.p2p_write_bytes, n);  // card 0's engine wrote into card 1
    EXPECT_EQ(a1.p2p_read_bytes - a0.p2p_read_bytes, 0u);
    EXPECT_EQ(a1.d2h_bytes - a0.d2h_bytes, n);  // peer bytes are a subset of the direction's
    EXPECT_EQ(b1.p2p_write_bytes + b1.p2p_read_bytes, b0.p2p_write_bytes + b0.p2p_read_bytes);

    // Back to card 0 on a stream of card 1 (card 1 pushes), then card 0 pulls it once more.
    spyre_stream_t sb = nullptr, sa = nullptr;
    ASSERT_SPYRE(spyre_stream_create(b, 0, &sb));
    ASSERT_SPYRE(spyre_stream_create(a, 0, &sa));
    ASSERT_SPYRE(spyre_memcpy_peer_async(A2, 1, B, 33, n, sb));
    ASSERT_SPYRE(spyre_stream_synchronize(sb));
    auto back = download(A2, 1, n);
    EXPECT_TRUE(back == src) << "card 1 -> card 0 on card 1's stream";
    ASSERT_SPYRE(spyre_memcpy_htod(A2, 0, zeros.data(), n + 64));
    ASSERT_SPYRE(spyre_memcpy_peer_async(A2, 5, B, 33, n, sa));
    ASSERT_SPYRE(spyre_stream_synchronize(sa));
    EXPECT_TRUE(download(A2, 5, n) == src) << "card 1 -> card 0 on card 0's stream";
    const spyre_telemetry a2 = tele(a), b2 = tele(b);
    EXPECT_EQ(b2.p2p_write_bytes - b1.p2p_write_bytes, n);
    EXPECT_EQ(a2.p2p_read_bytes - a1.p2p_read_bytes, n);
    EXPECT_EQ(a2.h2d_bytes - a1.h2d_bytes, n + (n + 64));  // the pull and the zeroing upload
    EXPECT_SPYRE(spyre_stream_destroy(sa));
    EXPECT_SPYRE(spyre_stream_destroy(sb));

    // Buffers of one card: a plain device-to-device copy, no peer access involved.
    ASSERT_SPYRE(spyre_memcpy_peer(A2, 0, A, 7, 100));
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + 100, download(A2, 0, 100).begin()));
    EXPECT_EQ(tele(a).p2p_read_bytes + tele(a).p2p_write_bytes,
              a2.p2p_read_bytes + a2.p2p_write_bytes);
}

// The peer link's price (hardware.md section 11): 256 + 1500 + ceil(P * 1500 / 60000) cycles
// at 1.5 GHz, charged on the issuing card's stream.
TEST_F(Peer, ModeledCyclesAreThePeerLinks) {
    spyre_device_t a = open(0), b = open(1);
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));
    spyre_device_info ia{};
    ASSERT_SPYRE(spyre_device_get_info(a, &ia));
    ASSERT_EQ(ia.clock_mhz, 1500u);
    spyre_buffer_t A = alloc(a, 4 * MiB), B = alloc(b, 4 * MiB);
    spyre_stream_t s = nullptr;
    ASSERT_SPYRE(spyre_stream_create(a, 0, &s));
    spyre_event_t e0 = nullptr, e1 = nullptr, e2 = nullptr;
    ASSERT_SPYRE(spyre_event_create(a, &e0));
    ASSERT_SPYRE(spyre_event_create(a, &e1));
    ASSERT_SPYRE(spyre_event_create(a, &e2));
    ASSERT_SPYRE(spyre_event_record(e0, s));
    ASSERT_SPYRE(spyre_memcpy_peer_async(B, 0, A, 0, MiB, s));  // 1 MiB into the peer
    ASSERT_SPYRE(spyre_event_record(e1, s));
    ASSERT_SPYRE(spyre_memcpy_peer_async(A, 0, B, 0, 4096, s));  // 4 KiB from the peer
    ASSERT_SPYRE(spyre_event_record(e2, s));
    ASSERT_SPYRE(spyre_event_synchronize(e2));
    spyre_event_timing t{};
    ASSERT_SPYRE(spyre_event_elapsed(e0, e1, &t));
    EXPECT_EQ(t.modeled_cycles, 256u + 1500 + 26215);  // hardware.md's example: 27971
    ASSERT_SPYRE(spyre_event_elapsed(e1, e2, &t));
    EXPECT_EQ(t.modeled_cycles, 256u + 1500 + 103);  // 4 KiB: the latency dominates
    for (auto* e : {e0, e1, e2}) EXPECT_SPYRE(spyre_event_destroy(e));
    EXPECT_SPYRE(spyre_stream_destroy(s));
}

TEST_F(Peer, RefusalsSayWhy) {
    spyre_device_t a = open(0), b = open(1), c = open(2);
    spyre_buffer_t A = alloc(a, 8192), B = alloc(b, 8192);
    EXPECT_EQ(spyre_memcpy_peer(B, 0, A, 0, 4096), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("peer access from spyre-sim0 to spyre-sim1 is not enabled");
    EXPECT_MSG("spyre_device_enable_peer_access(spyre-sim0, spyre-sim1)");
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));
    // Enabled one way only: card 1's stream may not reach card 0.
    spyre_stream_t sb = nullptr, sc = nullptr;
    ASSERT_SPYRE(spyre_stream_create(b, 0, &sb));
    ASSERT_SPYRE(spyre_stream_create(c, 0, &sc));
    EXPECT_EQ(spyre_memcpy_peer_async(B, 0, A, 0, 4096, sb), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("peer access from spyre-sim1 to spyre-sim0 is not enabled");
    EXPECT_EQ(spyre_memcpy_peer_async(B, 0, A, 0, 4096, sc), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG(
        "the stream belongs to spyre-sim2 but the peer copy is between spyre-sim0 and "
        "spyre-sim1");
    EXPECT_EQ(spyre_memcpy_peer(B, 4097, A, 0, 4096), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("destination");
    EXPECT_EQ(spyre_memcpy_peer(B, 0, A, 8000, 4096), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("source");
    EXPECT_EQ(spyre_memcpy_peer(B, 0, nullptr, 0, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    ASSERT_SPYRE(spyre_memcpy_peer(B, 0, A, 0, 0));  // nothing to copy
    // A stream being captured records no peer copies.
    spyre_stream_t sa = nullptr;
    ASSERT_SPYRE(spyre_stream_create(a, 0, &sa));
    ASSERT_SPYRE(spyre_stream_begin_capture(sa));
    EXPECT_EQ(spyre_memcpy_peer_async(B, 0, A, 0, 4096, sa), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_MSG("captured into a graph");
    spyre_graph_t g = nullptr;
    ASSERT_SPYRE(spyre_stream_end_capture(sa, &g));
    EXPECT_SPYRE(spyre_graph_destroy(g));
    for (auto* s : {sa, sb, sc}) EXPECT_SPYRE(spyre_stream_destroy(s));
}

TEST_F(Peer, CardsWithoutP2pAreRefused) {
    setenv("SPYRE_SIM_P2P", "0", 1);
    spyre_device_t a = open(0), b = open(1);
    spyre_device_info ia{};
    ASSERT_SPYRE(spyre_device_get_info(a, &ia));
    EXPECT_FALSE(ia.caps & SPYRE_DEVICE_CAP_P2P);
    int can = -1;
    ASSERT_SPYRE(spyre_device_can_access_peer(a, b, &can));
    EXPECT_EQ(can, 0);
    EXPECT_EQ(spyre_device_enable_peer_access(a, b), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_MSG("spyre-sim0 has no peer-to-peer DMA (SPYRE_DEVICE_CAP_P2P");
    spyre_buffer_t A = alloc(a, 4096), B = alloc(b, 4096);
    EXPECT_EQ(spyre_memcpy_peer(B, 0, A, 0, 4096), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_MSG("has no peer-to-peer DMA");
    // Copies across cards through host memory still work.
    EXPECT_SPYRE(spyre_memcpy_dtod(B, 0, A, 0, 4096));
}

// A peer that goes away: copies into and from it fail with DEVICE_LOST naming the peer, the
// issuing card keeps working, and the peer back (its memory kept) copies again.
TEST_F(Peer, LostPeerIsDeviceLost) {
    spyre_device_t a = open(0), b = open(1);
    ASSERT_SPYRE(spyre_device_enable_peer_access(a, b));
    spyre_buffer_t A = alloc(a, 8192), B = alloc(b, 8192);
    auto src = pattern(8192, 3);
    ASSERT_SPYRE(spyre_memcpy_htod(A, 0, src.data(), 8192));
    ASSERT_SPYRE(spyre_memcpy_peer(B, 0, A, 0, 8192));

    // The simulated loss takes the card at its next launch.
    spyre_program_t spin = nullptr;
    auto img = spyre_test::build_spin_program(4);
    ASSERT_SPYRE(spyre_program_load(b, img.data(), img.size(), &spin));
    spyre_launch_params lp{};
    lp.num_cores = 1;
    ASSERT_SPYRE(spyre_sim_inject_fault(1, SPYRE_SIM_FAULT_LOST, 0));
    EXPECT_EQ(spyre_launch(spin, &lp, nullptr), SPYRE_ERROR_DEVICE_LOST);

    EXPECT_EQ(spyre_memcpy_peer(B, 0, A, 0, 4096), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_MSG("peer spyre-sim1 was removed");
    EXPECT_MSG("spyre-sim0 cannot copy 4.0 KiB into its memory");
    spyre_stream_t sa = nullptr;
    ASSERT_SPYRE(spyre_stream_create(a, 0, &sa));
    EXPECT_EQ(spyre_memcpy_peer_async(A, 0, B, 0, 4096, sa), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_MSG("from its memory");
    EXPECT_EQ(spyre_device_enable_peer_access(a, b), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_SPYRE(spyre_memcpy_dtod(A, 4096, A, 0, 4096));  // the issuing card still works

    // Held in a submission batch: the same error when the batch is queued; the rest of the
    // batch runs.
    spyre_buffer_t C = alloc(a, 4096);
    ASSERT_SPYRE(spyre_memset(C, 0, 0, 4096));
    ASSERT_SPYRE(spyre_stream_begin_batch(sa));
    ASSERT_SPYRE(spyre_memcpy_peer_async(B, 0, A, 0, 4096, sa));
    ASSERT_SPYRE(spyre_memcpy_dtod_async(C, 0, A, 0, 4096, sa));
    EXPECT_EQ(spyre_stream_end_batch(sa), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_MSG("peer spyre-sim1 was removed");
    EXPECT_MSG("spyre-sim0 cannot copy 4.0 KiB into its memory");
    EXPECT_SPYRE(spyre_stream_synchronize(sa));
    std::vector<uint8_t> c(4096);
    ASSERT_SPYRE(spyre_memcpy_dtoh(c.data(), C, 0, 4096));
    EXPECT_TRUE(std::equal(c.begin(), c.end(), src.begin())) << "the rest of the batch ran";

    ASSERT_SPYRE(spyre_sim_inject_fault(1, SPYRE_SIM_FAULT_NONE, 0));
    std::vector<uint8_t> back(8192);
    ASSERT_SPYRE(spyre_memcpy_htod(A, 0, std::vector<uint8_t>(8192).data(), 8192));
    ASSERT_SPYRE(spyre_memcpy_peer_async(A, 0, B, 0, 8192, sa));
    ASSERT_SPYRE(spyre_stream_synchronize(sa));
    ASSERT_SPYRE(spyre_memcpy_dtoh(back.data(), A, 0, 8192));
    EXPECT_TRUE(back == src);
    EXPECT_SPYRE(spyre_stream_destroy(sa));
    EXPECT_SPYRE(spyre_program_free(spin));
}

}  // namespace
