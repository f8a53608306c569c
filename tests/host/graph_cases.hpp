// Stream capture and graph replay tests shared by the host tests (simulator backend,
// stream_test.cpp) and the guest tests (kernel backend, libspyre_guest_test.cpp). Each case
// takes an open device and cleans up after itself. Header-only; needs engine/include.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"
#include "stream_cases.hpp"

namespace spyre_cases {

inline uint64_t jobs_submitted(spyre_device_t dev) {
    spyre_runtime_stats rs{};
    EXPECT_EQ(spyre_device_get_runtime_stats(dev, &rs), SPYRE_SUCCESS);
    return rs.jobs_submitted;
}

// The work of the graph tests, queued on s: t = fill(0x3c00 = 1.0), z = x + t (a launch),
// w = z (device to device), v = 3-D copy of w (2 slices of 4 rows), f = a 4-byte pattern over
// 3 pattern blocks and 4 bytes at an odd offset, e recorded.
struct GraphWork {
    static constexpr int64_t per_core = 64;
    static constexpr uint32_t cores = 4;
    static constexpr size_t n = per_core * cores, bytes = n * 2;
    spyre_device_t dev;
    spyre_program_t add = nullptr;
    static constexpr size_t fbytes = 3 * 4096 + 16;
    spyre_buffer_t x = nullptr, t = nullptr, z = nullptr, w = nullptr, v = nullptr, f = nullptr;
    explicit GraphWork(spyre_device_t d) : dev(d) {
        auto img = spyre_test::build_add_program(per_core);
        EXPECT_EQ(spyre_program_load(dev, img.data(), img.size(), &add), SPYRE_SUCCESS);
        for (auto* b : {&x, &t, &z, &w}) EXPECT_EQ(spyre_malloc(dev, bytes, b), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_malloc(dev, 2 * 8 * 64, &v), SPYRE_SUCCESS);
        for (auto* b : {t, z, w}) EXPECT_EQ(spyre_memset(b, 0, 0, bytes), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_memset(v, 0, 0, 2 * 8 * 64), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_malloc(dev, fbytes, &f), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_memset(f, 0, 0, fbytes), SPYRE_SUCCESS);
    }
    ~GraphWork() {
        for (auto* b : {x, t, z, w, v, f}) spyre_free(b);
        spyre_program_free(add);
    }
    void queue(spyre_stream_t s, spyre_event_t e) {
        const uint16_t one = 0x3c00;
        SC_EXPECT(spyre_fill_async(t, 0, &one, 2, n, s));
        spyre_launch_params p{};
        p.num_cores = cores;
        p.num_args = 3;
        spyre_buffer_t bufs[] = {x, t, z};
        p.args[0] = addr_of(x), p.args[1] = addr_of(t), p.args[2] = addr_of(z);
        p.buffers = bufs;
        p.num_buffers = 3;
        SC_EXPECT(spyre_launch_async(add, &p, s));
        SC_EXPECT(spyre_memcpy_dtod_async(w, 0, z, 0, bytes, s));
        spyre_memcpy3d_params c{};
        c.src_buffer = w, c.src_offset = 6, c.src_pitch = 40, c.src_slice_pitch = 200;
        c.dst_buffer = v, c.dst_offset = 1, c.dst_pitch = 64, c.dst_slice_pitch = 8 * 64;
        c.width = 33, c.height = 4, c.depth = 2;
        SC_EXPECT(spyre_memcpy_3d_async(&c, s));
        const uint32_t pat4 = 0xa1b2c3d4;
        SC_EXPECT(spyre_fill_async(f, 3, &pat4, 4, (3 * 4096 + 4) / 4, s));
        if (e) SC_EXPECT(spyre_event_record(e, s));
    }
    std::vector<uint8_t> read(spyre_buffer_t b, size_t size) {
        std::vector<uint8_t> out(size);
        EXPECT_EQ(spyre_memcpy_dtoh(out.data(), b, 0, size), SPYRE_SUCCESS);
        return out;
    }
};

// A replayed graph computes what the same work run directly computes, once per replay, with
// fresh inputs each time; it is one submission; nothing runs while capturing; the graph keeps
// its program and buffers alive.
inline void graph_replay(spyre_device_t dev, uint64_t submits_per_replay) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    spyre_event_t e;
    SC_ASSERT(spyre_event_create(dev, &e));
    GraphWork gw(dev);
    int capturing = 1;
    SC_EXPECT(spyre_stream_is_capturing(s, &capturing));
    EXPECT_EQ(capturing, 0);

    // The reference: the work run directly, for two inputs.
    std::vector<std::vector<uint8_t>> ref_w, ref_v;
    for (uint32_t seed : {11u, 12u}) {
        auto xv = spyre_test::random_f16(gw.n, seed);
        SC_ASSERT(spyre_memcpy_htod(gw.x, 0, xv.data(), gw.bytes));
        gw.queue(s, nullptr);
        SC_ASSERT(spyre_stream_synchronize(s));
        ref_w.push_back(gw.read(gw.w, gw.bytes));
        ref_v.push_back(gw.read(gw.v, 2 * 8 * 64));
        for (auto* b : {gw.t, gw.z, gw.w}) SC_ASSERT(spyre_memset(b, 0, 0, gw.bytes));
        SC_ASSERT(spyre_memset(gw.v, 0, 0, 2 * 8 * 64));
    }
    ASSERT_NE(ref_w[0], ref_w[1]);
    auto ref_f = gw.read(gw.f, gw.fbytes);
    SC_ASSERT(spyre_memset(gw.f, 0, 0, gw.fbytes));

    SC_ASSERT(spyre_stream_begin_capture(s));
    SC_EXPECT(spyre_stream_is_capturing(s, &capturing));
    EXPECT_EQ(capturing, 1);
    gw.queue(s, e);
    // Waiting for an event recorded in this capture is covered by the stream order.
    SC_EXPECT(spyre_stream_wait_event(s, e));
    spyre_graph_t g = nullptr;
    SC_ASSERT(spyre_stream_end_capture(s, &g));
    ASSERT_NE(g, nullptr);
    SC_EXPECT(spyre_stream_is_capturing(s, &capturing));
    EXPECT_EQ(capturing, 0);
    spyre_graph_info info{};
    SC_EXPECT(spyre_graph_get_info(g, &info));
    EXPECT_EQ(info.operations, 5u);
    EXPECT_EQ(info.launches, 1u);
    SC_ASSERT(spyre_stream_synchronize(s));
    EXPECT_EQ(gw.read(gw.w, gw.bytes), std::vector<uint8_t>(gw.bytes, 0))
        << "captured work ran during the capture";

    // The program handle and the intermediate buffer go: the graph holds what it uses.
    SC_EXPECT(spyre_program_free(gw.add));
    gw.add = nullptr;
    SC_EXPECT(spyre_free(gw.z));
    gw.z = nullptr;
    for (int i = 0; i < 2; ++i) {
        auto xv = spyre_test::random_f16(gw.n, 11 + i);
        SC_ASSERT(spyre_memcpy_htod(gw.x, 0, xv.data(), gw.bytes));
        SC_ASSERT(spyre_memset(gw.w, 0, 0, gw.bytes));
        const uint64_t j0 = jobs_submitted(dev);
        SC_ASSERT(spyre_graph_launch(g, s));
        SC_ASSERT(spyre_event_synchronize(e));
        SC_ASSERT(spyre_stream_synchronize(s));
        EXPECT_EQ(jobs_submitted(dev) - j0, submits_per_replay) << "replay " << i;
        EXPECT_EQ(spyre_event_query(e), SPYRE_SUCCESS);
        EXPECT_TRUE(gw.read(gw.w, gw.bytes) == ref_w[i]) << "replay " << i;
        EXPECT_TRUE(gw.read(gw.v, 2 * 8 * 64) == ref_v[i]) << "replay " << i;
        EXPECT_TRUE(gw.read(gw.f, gw.fbytes) == ref_f) << "replay " << i;
        SC_ASSERT(spyre_memset(gw.f, 0, 0, gw.fbytes));
    }
    // Two replays queued back to back, and one on the default stream.
    SC_ASSERT(spyre_graph_launch(g, s));
    SC_ASSERT(spyre_graph_launch(g, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    SC_ASSERT(spyre_graph_launch(g, nullptr));
    SC_ASSERT(spyre_device_synchronize(dev));
    EXPECT_TRUE(gw.read(gw.w, gw.bytes) == ref_w[1]);

    SC_EXPECT(spyre_graph_destroy(g));
    EXPECT_EQ(spyre_graph_launch(g, s), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("already destroyed");
    SC_EXPECT(spyre_event_destroy(e));
    SC_EXPECT(spyre_stream_destroy(s));
}

// Work that cannot be captured fails clearly and invalidates the capture; the stream works
// normally afterwards.
inline void graph_capture_errors(spyre_device_t dev) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    spyre_buffer_t b;
    SC_ASSERT(spyre_malloc(dev, 4096, &b));
    spyre_graph_t g = reinterpret_cast<spyre_graph_t>(1);
    EXPECT_EQ(spyre_stream_begin_capture(nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("default stream cannot be captured");
    EXPECT_EQ(spyre_stream_end_capture(s, &g), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(g, nullptr);
    SC_MSG("not capturing");

    std::vector<uint8_t> host(4096, 5);
    SC_ASSERT(spyre_stream_begin_capture(s));
    EXPECT_EQ(spyre_stream_begin_capture(s), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("already capturing");
    SC_EXPECT(spyre_memset_async(b, 0, 1, 16, s));
    EXPECT_EQ(spyre_memcpy_htod_async(b, 0, host.data(), 4096, s), SPYRE_ERROR_NOT_SUPPORTED);
    SC_MSG("host-to-device copy");
    SC_MSG("cannot be captured");
    EXPECT_EQ(spyre_memset_async(b, 0, 1, 16, s), SPYRE_ERROR_NOT_SUPPORTED);
    SC_MSG("invalidated by an earlier error");
    EXPECT_EQ(spyre_stream_end_capture(s, &g), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(g, nullptr);
    SC_MSG("host-to-device copy");

    auto refused = [&](const char* what, auto&& call, const char* msg) {
        SC_ASSERT(spyre_stream_begin_capture(s));
        EXPECT_EQ(call(), SPYRE_ERROR_NOT_SUPPORTED) << what;
        SC_MSG(msg);
        spyre_graph_t gg = nullptr;
        EXPECT_EQ(spyre_stream_end_capture(s, &gg), SPYRE_ERROR_NOT_SUPPORTED) << what;
        EXPECT_EQ(gg, nullptr);
    };
    refused("synchronize", [&] { return spyre_stream_synchronize(s); }, "a synchronize");
    refused("query", [&] { return spyre_stream_query(s); }, "a query");
    refused(
        "dtoh", [&] { return spyre_memcpy_dtoh_async(host.data(), b, 0, 64, s); },
        "device-to-host copy");
    refused(
        "host func", [&] { return spyre_launch_host_func(s, [](void*) {}, nullptr); },
        "host function");
    spyre_event_t outside;
    SC_ASSERT(spyre_event_create(dev, &outside));
    SC_ASSERT(spyre_event_record(outside, s));
    refused(
        "outside event", [&] { return spyre_stream_wait_event(s, outside); },
        "not recorded during this capture");
    SC_EXPECT(spyre_event_destroy(outside));

    // The stream still runs work directly.
    SC_ASSERT(spyre_memcpy_htod_async(b, 0, host.data(), 4096, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    std::vector<uint8_t> out(4096);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), b, 0, 4096));
    EXPECT_TRUE(out == host);
    // An empty graph replays as nothing.
    SC_ASSERT(spyre_stream_begin_capture(s));
    SC_ASSERT(spyre_stream_end_capture(s, &g));
    SC_EXPECT(spyre_graph_launch(g, s));
    SC_EXPECT(spyre_stream_synchronize(s));
    SC_EXPECT(spyre_graph_destroy(g));
    spyre_free(b);
    SC_EXPECT(spyre_stream_destroy(s));
}

// More launches than one SUBMIT may carry: the replay is split at the driver's per-SUBMIT
// launch limit (kernel backend) and still runs every launch in order.
inline void graph_many_launches(spyre_device_t dev, int launches, uint64_t submits_per_replay) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    constexpr int64_t per_core = 64;
    const size_t n = per_core, bytes = n * 2;
    auto img = spyre_test::build_add_program(per_core);
    spyre_program_t add;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &add));
    spyre_buffer_t acc, one;
    SC_ASSERT(spyre_malloc(dev, bytes, &acc));
    SC_ASSERT(spyre_malloc(dev, bytes, &one));
    const uint16_t h1 = 0x3c00;
    SC_ASSERT(spyre_fill_async(one, 0, &h1, 2, n, nullptr));
    SC_ASSERT(spyre_memset(acc, 0, 0, bytes));
    SC_ASSERT(spyre_device_synchronize(dev));
    spyre_launch_params p{};
    p.num_cores = 1;
    p.num_args = 3;
    spyre_buffer_t bufs[] = {acc, one};
    p.args[0] = addr_of(acc), p.args[1] = addr_of(one), p.args[2] = addr_of(acc);
    p.buffers = bufs;
    p.num_buffers = 2;
    SC_ASSERT(spyre_stream_begin_capture(s));
    for (int i = 0; i < launches; ++i) SC_ASSERT(spyre_launch_async(add, &p, s));
    spyre_graph_t g;
    SC_ASSERT(spyre_stream_end_capture(s, &g));
    const uint64_t j0 = jobs_submitted(dev);
    SC_ASSERT(spyre_graph_launch(g, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    EXPECT_EQ(jobs_submitted(dev) - j0, submits_per_replay);
    std::vector<uint16_t> out(n);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), acc, 0, bytes));
    // launches x 1.0 summed in fp16 (exact up to 2048).
    const uint16_t want = spyre::num::f32_to_f16(static_cast<float>(launches));
    EXPECT_EQ(out[0], want);
    EXPECT_EQ(out[n - 1], want);
    SC_EXPECT(spyre_graph_destroy(g));
    spyre_free(acc);
    spyre_free(one);
    spyre_program_free(add);
    SC_EXPECT(spyre_stream_destroy(s));
}

}  // namespace spyre_cases
