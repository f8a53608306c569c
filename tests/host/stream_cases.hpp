// Stream, event, async copy, sub-allocator and handle tests shared by the host tests (simulator
// backend, stream_test.cpp) and the guest tests (kernel backend, libspyre_guest_test.cpp). Each
// case takes an open device and cleans up after itself. Header-only; needs engine/include.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace spyre_cases {

#define SC_ASSERT(expr) ASSERT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
#define SC_EXPECT(expr) EXPECT_EQ((expr), SPYRE_SUCCESS) << #expr << ": " << spyre_last_error()
inline std::string last_error() { return spyre_last_error(); }
#define SC_MSG(substr) \
    EXPECT_NE(last_error().find(substr), std::string::npos) << "message: " << last_error()

inline uint64_t addr_of(spyre_buffer_t b) {
    uint64_t a = 0;
    spyre_buffer_device_address(b, &a);
    return a;
}

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    return v;
}

// Work on one stream runs in order: a chain of dependent copies and launches, results read
// back asynchronously into pinned memory.
inline void stream_ordering(spyre_device_t dev) {
    constexpr int64_t per_core = 64;
    constexpr uint32_t cores = 4;
    const size_t n = per_core * cores, bytes = n * 2;
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    auto img = spyre_test::build_add_program(per_core);
    spyre_program_t add;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &add));
    spyre_buffer_t x, y, z, w;
    SC_ASSERT(spyre_malloc(dev, bytes, &x));
    SC_ASSERT(spyre_malloc(dev, bytes, &y));
    SC_ASSERT(spyre_malloc(dev, bytes, &z));
    SC_ASSERT(spyre_malloc(dev, bytes, &w));
    auto xv = spyre_test::random_f16(n, 1), yv = spyre_test::random_f16(n, 2);
    void* pinned = nullptr;
    SC_ASSERT(spyre_host_alloc(dev, bytes, &pinned));
    // z = x + y; w = z + y; each step depends on the previous one.
    SC_ASSERT(spyre_memcpy_htod_async(x, 0, xv.data(), bytes, s));
    SC_ASSERT(spyre_memcpy_htod_async(y, 0, yv.data(), bytes, s));
    std::fill(xv.begin(), xv.end(), 0);  // pageable sources were taken before returning
    auto ref1 = spyre_test::add_ref(spyre_test::random_f16(n, 1), yv);
    auto ref2 = spyre_test::add_ref(ref1, yv);
    spyre_launch_params p{};
    p.num_cores = cores;
    p.num_args = 3;
    spyre_buffer_t bufs1[] = {x, y, z};
    p.args[0] = addr_of(x), p.args[1] = addr_of(y), p.args[2] = addr_of(z);
    p.buffers = bufs1;
    p.num_buffers = 3;
    SC_ASSERT(spyre_launch_async(add, &p, s));
    spyre_buffer_t bufs2[] = {z, y, w};
    p.args[0] = addr_of(z), p.args[1] = addr_of(y), p.args[2] = addr_of(w);
    p.buffers = bufs2;
    SC_ASSERT(spyre_launch_async(add, &p, s));
    SC_ASSERT(spyre_memcpy_dtoh_async(pinned, w, 0, bytes, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    EXPECT_EQ(spyre_stream_query(s), SPYRE_SUCCESS);
    EXPECT_EQ(std::memcmp(pinned, ref2.data(), bytes), 0) << "stream order not honoured";
    // 200 memsets of one byte in order: the last one wins.
    for (int i = 0; i < 200; ++i) SC_ASSERT(spyre_memset_async(w, 7, i & 0xff, 1, s));
    uint8_t b = 0;
    SC_ASSERT(spyre_memcpy_dtoh_async(&b, w, 7, 1, s));  // pageable: returns with the data
    EXPECT_EQ(b, 199);
    SC_EXPECT(spyre_stream_destroy(s));
    for (auto* q : {x, y, z, w}) spyre_free(q);
    spyre_program_free(add);
    spyre_host_free(dev, pinned);
}

// A stream waits for an event of another stream (device side on one card).
inline void cross_stream_event(spyre_device_t dev) {
    spyre_stream_t a, b;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &a));
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &b));
    spyre_event_t e;
    SC_ASSERT(spyre_event_create(dev, &e));
    EXPECT_EQ(spyre_event_query(e), SPYRE_SUCCESS) << "a fresh event is complete";
    const uint64_t n = 8 << 20;
    spyre_buffer_t src, mid, dst;
    SC_ASSERT(spyre_malloc(dev, n, &src));
    SC_ASSERT(spyre_malloc(dev, n, &mid));
    SC_ASSERT(spyre_malloc(dev, n, &dst));
    auto data = pattern(n, 3);
    SC_ASSERT(spyre_memset(mid, 0, 0, n));
    // a: src -> mid (slow: several copies); b: waits, then mid -> dst.
    SC_ASSERT(spyre_memcpy_htod_async(src, 0, data.data(), n, a));
    for (int i = 0; i < 4; ++i) SC_ASSERT(spyre_memcpy_dtod_async(mid, 0, src, 0, n, a));
    SC_ASSERT(spyre_event_record(e, a));
    SC_ASSERT(spyre_stream_wait_event(b, e));
    SC_ASSERT(spyre_memcpy_dtod_async(dst, 0, mid, 0, n, b));
    SC_ASSERT(spyre_stream_synchronize(b));
    EXPECT_EQ(spyre_event_query(e), SPYRE_SUCCESS) << "b finished, so the event it waited for";
    std::vector<uint8_t> out(n);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), dst, 0, n));
    EXPECT_TRUE(out == data) << "b's copy ran before a's work it waited for";
    SC_ASSERT(spyre_stream_synchronize(a));
    SC_EXPECT(spyre_event_destroy(e));
    SC_EXPECT(spyre_stream_destroy(a));
    SC_EXPECT(spyre_stream_destroy(b));
    for (auto* q : {src, mid, dst}) spyre_free(q);
}

// Events time a launch: modeled cycles equal the launch's own statistics.
inline void event_timing(spyre_device_t dev) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, 0, &s));
    auto img = spyre_test::build_add_program(64);
    spyre_program_t add;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &add));
    spyre_buffer_t x;
    SC_ASSERT(spyre_malloc(dev, 64 * 2 * 3 * 8, &x));
    SC_ASSERT(spyre_memset(x, 0, 0, 64 * 2 * 3 * 8));
    spyre_launch_params p{};
    p.num_cores = 8;
    p.num_args = 3;
    p.args[0] = p.args[1] = p.args[2] = addr_of(x);
    p.buffers = &x;
    p.num_buffers = 1;
    spyre_launch_stats st{};
    SC_ASSERT(spyre_launch(add, &p, &st));
    spyre_event_t e0, e1;
    SC_ASSERT(spyre_event_create(dev, &e0));
    SC_ASSERT(spyre_event_create(dev, &e1));
    SC_ASSERT(spyre_event_record(e0, s));
    SC_ASSERT(spyre_launch_async(add, &p, s));
    SC_ASSERT(spyre_launch_async(add, &p, s));
    SC_ASSERT(spyre_event_record(e1, s));
    SC_ASSERT(spyre_event_synchronize(e1));
    SC_ASSERT(spyre_event_synchronize(e0));
    spyre_event_timing t{};
    SC_ASSERT(spyre_event_elapsed(e0, e1, &t));
    EXPECT_EQ(t.modeled_cycles, 2 * st.total_cycles);
    EXPECT_GT(t.modeled_ns, 0u);
    EXPECT_GE(t.wall_ns, 0);
    SC_EXPECT(spyre_stream_destroy(s));
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
    spyre_free(x);
    spyre_program_free(add);
}

// A faulting async launch: the call succeeds, the next synchronize reports the fault with its
// core and instruction, later work on the stream still ran, other streams are unaffected.
inline void async_fault_propagation(spyre_device_t dev) {
    spyre_stream_t bad, good;
    SC_ASSERT(spyre_stream_create(dev, 0, &bad));
    SC_ASSERT(spyre_stream_create(dev, 0, &good));
    uint32_t fault_pc = 0;
    auto img = spyre_test::build_fault_program(2, &fault_pc);
    spyre_program_t prog;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &prog));
    spyre_buffer_t ok, other, after, g, busy;
    SC_ASSERT(spyre_malloc(dev, 1 << 20, &ok));
    SC_ASSERT(spyre_malloc(dev, 1 << 20, &other));
    SC_ASSERT(spyre_malloc(dev, 4096, &after));
    SC_ASSERT(spyre_malloc(dev, 1 << 20, &g));
    SC_ASSERT(spyre_malloc(dev, 1 << 20, &busy));
    spyre_launch_params p{};
    p.num_cores = 4;
    p.num_args = 2;
    p.args[0] = addr_of(ok);
    p.args[1] = addr_of(other);
    p.buffers = &ok;
    p.num_buffers = 1;
    auto data = pattern(1 << 20, 9);
    // Good launches around the faulting one while the stream is busy (the kernel path batches
    // them into one job): the fault is reported, the launch after it still ran.
    auto add_img = spyre_test::build_add_program(64);
    spyre_program_t add;
    SC_ASSERT(spyre_program_load(dev, add_img.data(), add_img.size(), &add));
    auto xv = spyre_test::random_f16(256, 21), yv = spyre_test::random_f16(256, 22);
    SC_ASSERT(spyre_memcpy_htod(ok, 0, xv.data(), 512));
    SC_ASSERT(spyre_memcpy_htod(ok, 4096, yv.data(), 512));
    SC_ASSERT(spyre_memset(ok, 8192, 0, 512));
    spyre_launch_params ap{};
    ap.num_cores = 4;
    ap.num_args = 3;
    ap.args[0] = addr_of(ok), ap.args[1] = addr_of(ok) + 4096, ap.args[2] = addr_of(ok) + 8192;
    ap.buffers = &ok;
    ap.num_buffers = 1;
    // keeps the stream busy (its own buffer: `good` writes g, unordered with `bad`)
    SC_ASSERT(spyre_memset_async(busy, 0, 0, 1 << 20, bad));
    for (int i = 0; i < 3; ++i) SC_ASSERT(spyre_launch_async(add, &ap, bad));
    SC_ASSERT(spyre_launch_async(prog, &p, bad));
    ap.args[2] = addr_of(ok) + 12288;
    SC_ASSERT(spyre_launch_async(add, &ap, bad));
    SC_ASSERT(spyre_memset_async(after, 0, 0x5a, 4096, bad));
    for (int i = 0; i < 8; ++i)
        SC_ASSERT(spyre_memcpy_htod_async(g, 0, data.data(), 1 << 20, good));
    EXPECT_EQ(spyre_stream_synchronize(bad), SPYRE_ERROR_PROGRAM);
    SC_MSG("spyre_stream_synchronize: program fault on");
    SC_MSG("core 2 at instruction " + std::to_string(fault_pc));
    SC_MSG("DDR_WINDOW");
    EXPECT_EQ(spyre_stream_synchronize(bad), SPYRE_SUCCESS) << "the error is reported once";
    std::vector<uint8_t> a(4096);
    SC_ASSERT(spyre_memcpy_dtoh(a.data(), after, 0, 4096));
    EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](uint8_t v) { return v == 0x5a; }))
        << "work queued after the fault was lost";
    std::vector<uint16_t> z(256);
    SC_ASSERT(spyre_memcpy_dtoh(z.data(), ok, 12288, 512));
    EXPECT_TRUE(z == spyre_test::add_ref(xv, yv)) << "the launch after the fault did not run";
    spyre_program_free(add);
    SC_EXPECT(spyre_stream_synchronize(good));
    std::vector<uint8_t> back(1 << 20);
    SC_ASSERT(spyre_memcpy_dtoh(back.data(), g, 0, back.size()));
    EXPECT_TRUE(back == data);
    // The default stream: a synchronous call reports its own fault.
    EXPECT_EQ(spyre_launch(prog, &p, nullptr), SPYRE_ERROR_PROGRAM);
    SC_EXPECT(spyre_memset(after, 0, 1, 16));
    SC_EXPECT(spyre_stream_destroy(bad));
    SC_EXPECT(spyre_stream_destroy(good));
    for (auto* q : {ok, other, after, g, busy}) spyre_free(q);
    spyre_program_free(prog);
}

// Many threads: each its own stream, plus threads sharing the default stream.
inline void many_threads(spyre_device_t dev, int threads, uint64_t bytes, int rounds) {
    std::atomic<int> failures{0};
    std::mutex first_mu;
    std::string first;
    auto failed = [&](const std::string& what) {
        failures++;
        std::lock_guard lock(first_mu);
        if (first.empty()) first = what + ": " + spyre_last_error();
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            spyre_stream_t s = nullptr;
            const bool own = t % 2 == 0;
            if (own && spyre_stream_create(dev, 0, &s) != SPYRE_SUCCESS) {
                failed("stream_create");
                return;
            }
            spyre_buffer_t b;
            if (spyre_malloc(dev, bytes, &b) != SPYRE_SUCCESS) {
                failed("malloc");
                return;
            }
            for (int r = 0; r < rounds; ++r) {
                auto in = pattern(bytes, t * 1000 + r);
                std::vector<uint8_t> out(bytes);
                bool ok = spyre_memcpy_htod_async(b, 0, in.data(), bytes, s) == SPYRE_SUCCESS &&
                          spyre_memcpy_dtoh_async(out.data(), b, 0, bytes, s) == SPYRE_SUCCESS;
                if (own) ok = ok && spyre_stream_synchronize(s) == SPYRE_SUCCESS;
                if (!ok)
                    failed("copy");
                else if (in != out)
                    failed("data mismatch in thread " + std::to_string(t));
            }
            spyre_free(b);
            if (own) spyre_stream_destroy(s);
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(failures.load(), 0) << "first: " << first;
}

// Freed handles are detected (generation counts), also when the slot was reused.
inline void use_after_free(spyre_device_t dev) {
    spyre_buffer_t b, b2;
    SC_ASSERT(spyre_malloc(dev, 4096, &b));
    SC_ASSERT(spyre_free(b));
    SC_ASSERT(spyre_malloc(dev, 4096, &b2));  // likely reuses the slot
    uint64_t sz = 0;
    EXPECT_EQ(spyre_buffer_size(b, &sz), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("buffer handle is invalid or already freed");
    SC_MSG("use after free");
    EXPECT_EQ(spyre_memset(b, 0, 0, 16), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_free(b), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_EXPECT(spyre_buffer_size(b2, &sz));
    EXPECT_EQ(sz, 4096u);
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, 0, &s));
    SC_ASSERT(spyre_stream_destroy(s));
    EXPECT_EQ(spyre_stream_synchronize(s), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("stream handle is invalid or already destroyed");
    // A handle of the wrong type.
    SC_ASSERT(spyre_stream_create(dev, 0, &s));
    EXPECT_EQ(spyre_buffer_size(reinterpret_cast<spyre_buffer_t>(s), &sz),
              SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("is not a buffer handle");
    spyre_event_t e;
    SC_ASSERT(spyre_event_create(dev, &e));
    SC_ASSERT(spyre_event_destroy(e));
    EXPECT_EQ(spyre_event_record(e, s), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_EXPECT(spyre_stream_destroy(s));
    SC_EXPECT(spyre_free(b2));
}

// The sub-allocator: many small buffers, no overlap, each keeps its data, freed space reused,
// address lookup.
inline void suballocator(spyre_device_t dev, int count) {
    spyre_runtime_stats r0{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r0));
    if (r0.suballoc_max_bytes == 0) GTEST_SKIP() << "sub-allocator disabled";
    std::mt19937 rng(5);
    struct B {
        spyre_buffer_t b;
        uint64_t addr, size;
        uint8_t fill;
    };
    std::vector<B> bs;
    for (int i = 0; i < count; ++i) {
        uint64_t size = 1 + rng() % r0.suballoc_max_bytes;
        B x{nullptr, 0, size, static_cast<uint8_t>(i)};
        SC_ASSERT(spyre_malloc(dev, size, &x.b));
        x.addr = addr_of(x.b);
        SC_ASSERT(spyre_memset_async(x.b, 0, x.fill, size, nullptr));
        bs.push_back(x);
    }
    spyre_runtime_stats r1{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r1));
    EXPECT_EQ(r1.suballoc_buffers, r0.suballoc_buffers + count);
    auto sorted = bs;
    std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.addr < b.addr; });
    for (size_t i = 1; i < sorted.size(); ++i)
        ASSERT_LE(sorted[i - 1].addr + sorted[i - 1].size, sorted[i].addr) << "overlap";
    SC_ASSERT(spyre_device_synchronize(dev));
    for (auto& x : bs) {
        std::vector<uint8_t> out(x.size);
        SC_ASSERT(spyre_memcpy_dtoh(out.data(), x.b, 0, x.size));
        ASSERT_TRUE(std::all_of(out.begin(), out.end(), [&](uint8_t v) { return v == x.fill; }))
            << "a neighbour overwrote buffer at " << x.addr;
        spyre_buffer_t found = nullptr;
        uint64_t off = 0;
        SC_ASSERT(spyre_buffer_from_address(dev, x.addr + x.size / 2, &found, &off));
        EXPECT_EQ(found, x.b);
        EXPECT_EQ(off, x.size / 2);
    }
    // Free every other buffer, allocate as many again: no new slabs.
    for (size_t i = 0; i < bs.size(); i += 2) SC_ASSERT(spyre_free(bs[i].b));
    spyre_runtime_stats r2{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r2));
    for (size_t i = 0; i < bs.size(); i += 2) SC_ASSERT(spyre_malloc(dev, bs[i].size, &bs[i].b));
    spyre_runtime_stats r3{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r3));
    EXPECT_EQ(r3.suballoc_slabs, r2.suballoc_slabs) << "freed space was not reused";
    spyre_buffer_t none = nullptr;
    uint64_t off;
    EXPECT_EQ(spyre_buffer_from_address(dev, UINT64_MAX - 5, &none, &off),
              SPYRE_ERROR_INVALID_ARGUMENT);
    for (auto& x : bs) SC_EXPECT(spyre_free(x.b));
}

// A device closed with work still queued on small (sub-allocated) buffers its caller freed is
// released at the close: its memory is back and the next open gets a new device. A sub-buffer
// used to hold its device, whose default stream held the work: the closed device stayed open
// for the life of the process (on the simulator its own stream's worker destroyed it and then
// waited for itself; the card, memory and mode of the closed device were what the next open
// got). `index` must not be open elsewhere in the process.
inline void closed_with_work_queued(int index) {
    spyre_device_t dev = nullptr;
    SC_ASSERT(spyre_device_open(index, &dev));
    spyre_runtime_stats r{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r));
    if (r.suballoc_max_bytes < 4096) {
        spyre_device_close(dev);
        GTEST_SKIP() << "sub-allocator disabled";
    }
    uint64_t free0 = 0, free1 = 0, total = 0;
    SC_ASSERT(spyre_mem_get_info(dev, &free0, &total));
    spyre_buffer_t a = nullptr, b = nullptr;
    SC_ASSERT(spyre_malloc(dev, 4096, &a));
    SC_ASSERT(spyre_malloc(dev, 4096, &b));
    for (int i = 0; i < 64; ++i) {
        SC_ASSERT(spyre_memset_async(a, 0, i, 4096, nullptr));
        SC_ASSERT(spyre_memcpy_dtod_async(b, 0, a, 0, 4096, nullptr));
    }
    SC_ASSERT(spyre_free(a));
    SC_ASSERT(spyre_free(b));
    SC_ASSERT(spyre_device_close(dev));
    SC_ASSERT(spyre_device_open(index, &dev));
    SC_ASSERT(spyre_mem_get_info(dev, &free1, &total));
    EXPECT_EQ(free1, free0) << "the closed device's memory was not given back";
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r));
    EXPECT_EQ(r.suballoc_slabs, 0u) << "the open got the closed device back";
    SC_EXPECT(spyre_device_close(dev));
}

// Loading one image twice copies it once.
inline void program_cache(spyre_device_t dev) {
    auto img = spyre_test::build_add_program(64);
    img.push_back(0);  // make it differ from other tests' images? no: keep valid
    img.pop_back();
    spyre_runtime_stats r0{}, r1{};
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r0));
    spyre_program_t a, b;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &a));
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &b));
    SC_ASSERT(spyre_device_get_runtime_stats(dev, &r1));
    EXPECT_GE(r1.program_cache_hits, r0.program_cache_hits + 1);
    EXPECT_LE(r1.program_cache_misses, r0.program_cache_misses + 1);
    SC_ASSERT(spyre_program_free(a));
    spyre_buffer_t x;
    SC_ASSERT(spyre_malloc(dev, 64 * 2 * 3, &x));
    SC_ASSERT(spyre_memset(x, 0, 0, 64 * 2 * 3));
    spyre_launch_params p{};
    p.num_cores = 1;
    p.num_args = 3;
    p.args[0] = p.args[1] = p.args[2] = addr_of(x);
    p.buffers = &x;
    p.num_buffers = 1;
    SC_EXPECT(spyre_launch(b, &p, nullptr)) << "the shared image outlives the first handle";
    spyre_program_free(b);
    spyre_free(x);
}

// Host functions run in stream order; later work waits for them.
inline void host_func(spyre_device_t dev) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, 0, &s));
    spyre_buffer_t b;
    SC_ASSERT(spyre_malloc(dev, 4096, &b));
    struct Ctx {
        spyre_buffer_t b;
        int seen = -1;
        std::atomic<bool> ran{false};
    } ctx;
    ctx.b = b;
    SC_ASSERT(spyre_memset_async(b, 0, 1, 4096, s));
    SC_ASSERT(spyre_launch_host_func(
        s,
        [](void* u) {
            auto* c = static_cast<Ctx*>(u);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            uint8_t v = 0;
            spyre_memcpy_dtoh(&v, c->b, 100, 1);  // default stream: allowed
            c->seen = v;
            c->ran = true;
        },
        &ctx));
    SC_ASSERT(spyre_memset_async(b, 0, 2, 4096, s));
    auto data = pattern(3000, 4);
    SC_ASSERT(spyre_memcpy_htod_async(b, 1000, data.data(), 3000, s));  // deferred: data copied
    std::fill(data.begin(), data.end(), 0);
    SC_ASSERT(spyre_stream_synchronize(s));
    EXPECT_TRUE(ctx.ran);
    EXPECT_EQ(ctx.seen, 1) << "the host function did not run between the two memsets";
    std::vector<uint8_t> out(4096);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), b, 0, 4096));
    EXPECT_EQ(out[0], 2);
    auto want = pattern(3000, 4);
    EXPECT_TRUE(std::equal(out.begin() + 1000, out.begin() + 4000, want.begin()));
    EXPECT_EQ(out[4000], 2);
    SC_EXPECT(spyre_stream_destroy(s));
    spyre_free(b);
}

// memset, fill with 2/4/8-byte patterns at odd offsets, strided 2-D and 3-D copies in every
// direction, against CPU references.
inline void fills_and_strided(spyre_device_t dev) {
    const uint64_t n = 3 * 1024 * 1024 + 77;
    spyre_buffer_t b;
    SC_ASSERT(spyre_malloc(dev, n, &b));
    SC_ASSERT(spyre_memset(b, 0, 0xab, n));
    const uint64_t pat8 = 0x0102030405060708ull;
    const uint32_t pat4 = 0xdeadbeef;
    const uint16_t pat2 = 0x1234;
    SC_ASSERT(spyre_fill_async(b, 3, &pat8, 8, 100000, nullptr));
    SC_ASSERT(spyre_fill_async(b, 900001, &pat4, 4, 5, nullptr));
    SC_ASSERT(spyre_fill_async(b, n - 2 * 7, &pat2, 2, 7, nullptr));
    std::vector<uint8_t> ref(n, 0xab);
    for (int i = 0; i < 100000; ++i) std::memcpy(&ref[3 + 8 * i], &pat8, 8);
    for (int i = 0; i < 5; ++i) std::memcpy(&ref[900001 + 4 * i], &pat4, 4);
    for (int i = 0; i < 7; ++i) std::memcpy(&ref[n - 14 + 2 * i], &pat2, 2);
    std::vector<uint8_t> out(n);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), b, 0, n));
    EXPECT_TRUE(out == ref) << "fill";
    // A large fill (a fill program on the kernel path: unaligned head and tail by DMA).
    {
        const uint64_t big = 20 * 1024 * 1024 + 4 * 333, off = 5;
        spyre_buffer_t lb;
        SC_ASSERT(spyre_malloc(dev, big + 64, &lb));
        SC_ASSERT(spyre_memset(lb, 0, 0x11, big + 64));
        const uint32_t p4 = 0xa1b2c3d4;
        SC_ASSERT(spyre_fill_async(lb, off, &p4, 4, big / 4, nullptr));
        SC_ASSERT(spyre_device_synchronize(dev));
        std::vector<uint8_t> got(big + 64);
        SC_ASSERT(spyre_memcpy_dtoh(got.data(), lb, 0, big + 64));
        bool ok = got[0] == 0x11 && got[off + big] == 0x11 && got[big + 63] == 0x11;
        for (uint64_t i = 0; ok && i < big; ++i)
            ok = got[off + i] == static_cast<uint8_t>(p4 >> (8 * (i % 4)));
        EXPECT_TRUE(ok) << "large 4-byte fill at an odd offset";
        spyre_free(lb);
    }
    // A fill more than 256 MiB (a core's DDR span) into a buffer: the fill program's stores
    // move their span along (they faulted with DDR_SPAN past the first 256 MiB)
    {
        const uint64_t huge = 320ull << 20, tail = 64ull << 20;
        spyre_buffer_t hb;
        SC_ASSERT(spyre_malloc(dev, huge, &hb));
        SC_ASSERT(spyre_memset(hb, 0, 0x22, huge));
        SC_ASSERT(spyre_memset(hb, huge - tail, 0x5a, tail));
        std::vector<uint8_t> edge(8192);
        SC_ASSERT(spyre_memcpy_dtoh(edge.data(), hb, huge - tail - 4096, 8192));
        EXPECT_TRUE(
            std::all_of(edge.begin(), edge.begin() + 4096, [](uint8_t v) { return v == 0x22; }));
        EXPECT_TRUE(
            std::all_of(edge.begin() + 4096, edge.end(), [](uint8_t v) { return v == 0x5a; }));
        SC_ASSERT(spyre_memcpy_dtoh(edge.data(), hb, huge - 8192, 8192));
        EXPECT_TRUE(std::all_of(edge.begin(), edge.end(), [](uint8_t v) { return v == 0x5a; }))
            << "the end of a fill past 256 MiB";
        spyre_free(hb);
    }
    uint64_t bad = 1;
    EXPECT_EQ(spyre_fill_async(b, 0, &bad, 3, 1, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_fill_async(b, n - 4, &bad, 8, 1, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);

    // 3-D host -> device: 5 slices of 37 rows of 100 bytes from a padded host array into a
    // padded device layout; back device -> device into another layout; back to the host.
    const uint64_t W = 100, H = 37, D = 5;
    const uint64_t hp = 128, hs = hp * H + 64;  // host pitch and slice pitch
    const uint64_t dp = 160, ds = dp * 40;      // device layout 1
    const uint64_t ep = 100, es = ep * H;       // device layout 2: packed
    auto host = pattern(hs * D, 8);
    spyre_buffer_t d1, d2;
    SC_ASSERT(spyre_malloc(dev, ds * D + 7, &d1));
    SC_ASSERT(spyre_malloc(dev, es * D + 9, &d2));
    for (int pinned = 0; pinned < 2; ++pinned) {
        void* hsrc = host.data();
        void* pin = nullptr;
        if (pinned) {
            SC_ASSERT(spyre_host_alloc(dev, hs * D, &pin));
            std::memcpy(pin, host.data(), hs * D);
            hsrc = pin;
        }
        spyre_memcpy3d_params p{};
        p.src_host = hsrc;
        p.src_pitch = hp;
        p.src_slice_pitch = hs;
        p.dst_buffer = d1;
        p.dst_offset = 7;
        p.dst_pitch = dp;
        p.dst_slice_pitch = ds;
        p.width = W, p.height = H, p.depth = D;
        SC_ASSERT(spyre_memcpy_3d_async(&p, nullptr));
        p = {};
        p.src_buffer = d1, p.src_offset = 7, p.src_pitch = dp, p.src_slice_pitch = ds;
        p.dst_buffer = d2, p.dst_offset = 9, p.dst_pitch = ep, p.dst_slice_pitch = es;
        p.width = W, p.height = H, p.depth = D;
        SC_ASSERT(spyre_memcpy_3d(&p));
        std::vector<uint8_t> packed(es * D);
        SC_ASSERT(spyre_memcpy_dtoh(packed.data(), d2, 9, es * D));
        bool ok = true;
        for (uint64_t z = 0; z < D; ++z)
            for (uint64_t y = 0; y < H; ++y)
                ok = ok && std::memcmp(&packed[z * es + y * ep], &host[z * hs + y * hp], W) == 0;
        EXPECT_TRUE(ok) << "3-D host->device->device copy, pinned " << pinned;
        // 2-D device -> host into a padded host layout.
        std::vector<uint8_t> back(hs * D, 0);
        void* hdst = back.data();
        if (pinned) {
            std::memset(pin, 0, hs * D);
            hdst = pin;
        }
        p = {};
        p.src_buffer = d1, p.src_offset = 7, p.src_pitch = dp;
        p.dst_host = hdst, p.dst_pitch = hp;
        p.width = W, p.height = H * D / 5, p.depth = 1;
        SC_ASSERT(spyre_memcpy_3d(&p));
        if (pinned) std::memcpy(back.data(), pin, hs * D);
        ok = true;
        for (uint64_t y = 0; y < H * D / 5; ++y)
            ok = ok && std::memcmp(&back[y * hp], &host[y * hp], W) == 0 && back[y * hp + W] == 0;
        EXPECT_TRUE(ok) << "2-D device->host copy, pinned " << pinned;
        if (pin) spyre_host_free(dev, pin);
    }
    spyre_memcpy3d_params q{};
    q.src_host = host.data();
    q.dst_host = out.data();
    q.width = 1, q.height = 1, q.depth = 1, q.src_pitch = 1, q.dst_pitch = 1;
    EXPECT_EQ(spyre_memcpy_3d(&q), SPYRE_ERROR_INVALID_ARGUMENT);
    q.dst_host = nullptr;
    q.dst_buffer = d1;
    q.dst_pitch = 1;
    q.height = 1 << 20;
    EXPECT_EQ(spyre_memcpy_3d(&q), SPYRE_ERROR_INVALID_ARGUMENT) << "outside the buffer";
    for (auto* x : {b, d1, d2}) spyre_free(x);
}

// Device to device between two cards (through host memory).
inline void across_cards(spyre_device_t d0, spyre_device_t d1) {
    const uint64_t n = 9 * 1024 * 1024 + 3;
    spyre_buffer_t a, b;
    SC_ASSERT(spyre_malloc(d0, n, &a));
    SC_ASSERT(spyre_malloc(d1, n + 10, &b));
    auto data = pattern(n, 11);
    SC_ASSERT(spyre_memcpy_htod(a, 0, data.data(), n));
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(d1, 0, &s));
    SC_ASSERT(spyre_memcpy_dtod_async(b, 10, a, 0, n, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    std::vector<uint8_t> out(n);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), b, 10, n));
    EXPECT_TRUE(out == data);
    SC_ASSERT(spyre_memcpy_dtod(a, 0, b, 10, 1000));  // synchronous, other direction
    // An event of card 0 waited for by a stream of card 1 (a host wait in that stream).
    spyre_event_t e0;
    SC_ASSERT(spyre_event_create(d0, &e0));
    SC_ASSERT(spyre_memset_async(a, 0, 0x77, n, nullptr));
    SC_ASSERT(spyre_event_record(e0, nullptr));
    SC_ASSERT(spyre_stream_wait_event(s, e0));
    SC_ASSERT(spyre_memcpy_dtod_async(b, 10, a, 0, 4096, s));
    SC_ASSERT(spyre_stream_synchronize(s));
    uint8_t v = 0;
    SC_ASSERT(spyre_memcpy_dtoh(&v, b, 10 + 4095, 1));
    EXPECT_EQ(v, 0x77);
    spyre_event_destroy(e0);
    spyre_stream_t s0;
    SC_ASSERT(spyre_stream_create(d0, 0, &s0));
    EXPECT_EQ(spyre_memcpy_dtod_async(b, 0, a, 0, 16, s0), SPYRE_ERROR_INVALID_ARGUMENT)
        << "the stream must be on the destination's card";
    spyre_stream_destroy(s0);
    spyre_stream_destroy(s);
    spyre_free(a);
    spyre_free(b);
}

// ---- Device-side semaphores (spyre_stream_write_value / spyre_stream_wait_value) ----

inline bool has_semaphores(spyre_device_t dev) {
    spyre_device_info info{};
    spyre_device_get_info(dev, &info);
    return info.caps & SPYRE_DEVICE_CAP_SEMAPHORE;
}

inline bool all_bytes(const std::vector<uint8_t>& v, uint8_t x) {
    return std::all_of(v.begin(), v.end(), [x](uint8_t b) { return b == x; });
}

inline uint64_t sem_value(spyre_buffer_t sem, uint64_t offset) {
    uint64_t v = 0;
    EXPECT_EQ(spyre_memcpy_dtoh(&v, sem, offset, sizeof v), SPYRE_SUCCESS) << spyre_last_error();
    return v;
}

// A wait on stream B released by a write on stream A queued after it: B's copy behind the
// wait sees the data A wrote before its write. The waiter is a HIGH priority stream (the kernel
// backend's last ring, alone: a SEM_WAIT holds its ring). Then through a submission batch on A
// (its held fill and copy before its write), and values compared unsigned.
inline void semaphore_cross_stream(spyre_device_t dev) {
    spyre_stream_t a, b;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &a));
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &b));
    const uint64_t n = 256 * 1024;
    spyre_buffer_t sem, src, mid, dst;
    SC_ASSERT(spyre_malloc(dev, 64, &sem));  // sub-allocated: inside a slab
    SC_ASSERT(spyre_malloc(dev, n, &src));
    SC_ASSERT(spyre_malloc(dev, n, &mid));
    SC_ASSERT(spyre_malloc(dev, n, &dst));
    SC_ASSERT(spyre_memset(sem, 0, 0, 64));
    SC_ASSERT(spyre_memset(dst, 0, 0, n));
    std::vector<uint8_t> out(n);

    SC_ASSERT(spyre_stream_wait_value(b, sem, 16, 1, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_memcpy_dtod_async(dst, 0, src, 0, n, b));
    EXPECT_EQ(spyre_stream_query(b), SPYRE_ERROR_NOT_READY) << "the wait holds the stream";
    SC_ASSERT(spyre_memset_async(src, 0, 0x5a, n, a));
    SC_ASSERT(spyre_stream_write_value(a, sem, 16, 1));
    SC_ASSERT(spyre_stream_synchronize(b));
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), dst, 0, n));
    EXPECT_TRUE(all_bytes(out, 0x5a)) << "B's copy ran before A's fill";
    EXPECT_EQ(sem_value(sem, 16), 1u);

    // A batch: the write keeps its place after the batch's held work.
    SC_ASSERT(spyre_stream_wait_value(b, sem, 16, 5, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_memcpy_dtod_async(dst, 0, mid, 0, n, b));
    SC_ASSERT(spyre_stream_begin_batch(a));
    SC_ASSERT(spyre_memset_async(src, 0, 0x33, n, a));
    SC_ASSERT(spyre_memcpy_dtod_async(mid, 0, src, 0, n, a));
    SC_ASSERT(spyre_stream_write_value(a, sem, 16, 7));  // >= 5
    SC_ASSERT(spyre_stream_end_batch(a));
    SC_ASSERT(spyre_stream_synchronize(b));
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), dst, 0, n));
    EXPECT_TRUE(all_bytes(out, 0x33)) << "B's copy ran before A's batch";

    // Unsigned: 2^63 + 1 is at least 2^63.
    SC_ASSERT(spyre_stream_wait_value(b, sem, 0, 1ull << 63, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_stream_write_value(a, sem, 0, (1ull << 63) + 1));
    SC_ASSERT(spyre_stream_synchronize(b));
    SC_ASSERT(spyre_stream_synchronize(a));
    EXPECT_EQ(sem_value(sem, 0), (1ull << 63) + 1);
    SC_EXPECT(spyre_stream_destroy(a));
    SC_EXPECT(spyre_stream_destroy(b));
    for (auto* x : {sem, src, mid, dst}) spyre_free(x);
}

// The waiter's modeled time is not before the writer's: B waits for A's write behind two
// launches of A; B's events around the wait measure at least the two launches, and A's event
// after its write is not later than B's after the wait.
inline void semaphore_modeled_time(spyre_device_t dev) {
    spyre_stream_t a, b;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &a));
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &b));
    auto img = spyre_test::build_add_program(64);
    spyre_program_t add;
    SC_ASSERT(spyre_program_load(dev, img.data(), img.size(), &add));
    spyre_buffer_t x, sem;
    SC_ASSERT(spyre_malloc(dev, 64 * 2 * 3 * 8, &x));
    SC_ASSERT(spyre_memset(x, 0, 0, 64 * 2 * 3 * 8));
    SC_ASSERT(spyre_malloc(dev, SPYRE_SEMAPHORE_BYTES, &sem));
    SC_ASSERT(spyre_memset(sem, 0, 0, SPYRE_SEMAPHORE_BYTES));
    spyre_launch_params p{};
    p.num_cores = 8;
    p.num_args = 3;
    p.args[0] = p.args[1] = p.args[2] = addr_of(x);
    p.buffers = &x;
    p.num_buffers = 1;
    spyre_launch_stats st{};
    SC_ASSERT(spyre_launch(add, &p, &st));
    ASSERT_GT(st.total_cycles, 0u);
    spyre_event_t b0, b1, a1;
    SC_ASSERT(spyre_event_create(dev, &b0));
    SC_ASSERT(spyre_event_create(dev, &b1));
    SC_ASSERT(spyre_event_create(dev, &a1));
    SC_ASSERT(spyre_event_record(b0, b));
    SC_ASSERT(spyre_stream_wait_value(b, sem, 0, 1, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_event_record(b1, b));
    SC_ASSERT(spyre_launch_async(add, &p, a));
    SC_ASSERT(spyre_launch_async(add, &p, a));
    SC_ASSERT(spyre_stream_write_value(a, sem, 0, 1));
    SC_ASSERT(spyre_event_record(a1, a));
    SC_ASSERT(spyre_event_synchronize(b1));
    SC_ASSERT(spyre_event_synchronize(a1));
    SC_ASSERT(spyre_event_synchronize(b0));
    spyre_event_timing t{};
    SC_ASSERT(spyre_event_elapsed(b0, b1, &t));
    EXPECT_GE(t.modeled_cycles, 2 * st.total_cycles) << "the wait carries the writer's time";
    SC_ASSERT(spyre_event_elapsed(b1, a1, &t));
    EXPECT_EQ(t.modeled_cycles, 0u) << "the writer's event is later than the waiter's";
    SC_EXPECT(spyre_stream_destroy(a));
    SC_EXPECT(spyre_stream_destroy(b));
    for (auto* e : {b0, b1, a1}) spyre_event_destroy(e);
    spyre_free(x);
    spyre_free(sem);
    spyre_program_free(add);
}

// The host writing the value through the buffer's mapping releases a wait.
inline void semaphore_host_write(spyre_device_t dev) {
    spyre_stream_t b;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &b));
    spyre_buffer_t sem, dst;
    SC_ASSERT(spyre_malloc(dev, 4096, &sem));
    SC_ASSERT(spyre_malloc(dev, 4096, &dst));
    SC_ASSERT(spyre_memset(sem, 0, 0, 4096));
    SC_ASSERT(spyre_memset(dst, 0, 0, 4096));
    void* map = nullptr;
    SC_ASSERT(spyre_buffer_map(sem, &map));
    SC_ASSERT(spyre_stream_wait_value(b, sem, 256, 3, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_memset_async(dst, 0, 0x21, 4096, b));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(spyre_stream_query(b), SPYRE_ERROR_NOT_READY) << "the wait holds the stream";
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<char*>(map) + 256), 3,
                     __ATOMIC_RELEASE);
    SC_ASSERT(spyre_stream_synchronize(b));
    std::vector<uint8_t> out(4096);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), dst, 0, 4096));
    EXPECT_TRUE(all_bytes(out, 0x21));
    SC_EXPECT(spyre_stream_destroy(b));
    spyre_free(sem);
    spyre_free(dst);
}

// A wait that times out fails its stream with SPYRE_ERROR_TIMEOUT naming the offset, the value
// wanted and the value seen; the stream keeps working.
inline void semaphore_timeout(spyre_device_t dev) {
    spyre_stream_t b;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &b));
    spyre_buffer_t sem, dst;
    SC_ASSERT(spyre_malloc(dev, 4096, &sem));
    SC_ASSERT(spyre_malloc(dev, 4096, &dst));
    SC_ASSERT(spyre_memset(sem, 0, 0, 4096));
    SC_ASSERT(spyre_stream_write_value(b, sem, 32, 3));
    SC_ASSERT(spyre_stream_wait_value(b, sem, 32, 9, 2000));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(spyre_stream_synchronize(b), SPYRE_ERROR_TIMEOUT);
    SC_MSG("timed out");
    SC_MSG("offset 32");
    SC_MSG("holds 3");
    SC_MSG(">= 9");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    // The stream keeps working; a timeout of 0 tests once.
    SC_ASSERT(spyre_stream_wait_value(b, sem, 32, 3, 0));
    SC_ASSERT(spyre_memset_async(dst, 0, 0x55, 4096, b));
    SC_ASSERT(spyre_stream_synchronize(b));
    std::vector<uint8_t> out(4096);
    SC_ASSERT(spyre_memcpy_dtoh(out.data(), dst, 0, 4096));
    EXPECT_TRUE(all_bytes(out, 0x55));
    // Through the default stream (NULL), and a failing wait there.
    SC_ASSERT(spyre_stream_wait_value(nullptr, sem, 32, 4, 100));
    EXPECT_EQ(spyre_device_synchronize(dev), SPYRE_ERROR_TIMEOUT);
    SC_MSG("holds 3");
    SC_EXPECT(spyre_device_synchronize(dev));
    SC_EXPECT(spyre_stream_destroy(b));
    spyre_free(sem);
    spyre_free(dst);
}

// Every argument error: INVALID_ARGUMENT with a message, nothing queued.
inline void semaphore_argument_errors(spyre_device_t dev) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    spyre_buffer_t sem;
    SC_ASSERT(spyre_malloc(dev, 64, &sem));
    SC_ASSERT(spyre_memset(sem, 0, 0, 64));
    constexpr auto INVAL = SPYRE_ERROR_INVALID_ARGUMENT;
    constexpr uint32_t kMax = SPYRE_SEMAPHORE_WAIT_MAX_US;
    EXPECT_EQ(spyre_stream_write_value(s, nullptr, 0, 1), INVAL);
    SC_MSG("semaphore buffer handle is NULL");
    EXPECT_EQ(spyre_stream_wait_value(s, nullptr, 0, 1, kMax), INVAL);
    SC_MSG("semaphore buffer handle is NULL");
    EXPECT_EQ(spyre_stream_write_value(s, sem, 8, 1), INVAL);
    SC_MSG("offset 8 is not a multiple of 16");
    EXPECT_EQ(spyre_stream_wait_value(s, sem, 40, 1, kMax), INVAL);
    SC_MSG("offset 40 is not a multiple of 16");
    EXPECT_EQ(spyre_stream_write_value(s, sem, 64, 1), INVAL);
    SC_MSG("exceeds the semaphore buffer's size 64");
    EXPECT_EQ(spyre_stream_wait_value(s, sem, 1ull << 62, 1, kMax), INVAL);
    SC_MSG("exceeds the semaphore buffer's size 64");
    EXPECT_EQ(spyre_stream_wait_value(s, sem, 0, 1, kMax + 1), INVAL);
    SC_MSG("SPYRE_SEMAPHORE_WAIT_MAX_US");
    spyre_stream_t gone;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &gone));
    SC_ASSERT(spyre_stream_destroy(gone));
    EXPECT_EQ(spyre_stream_write_value(gone, sem, 0, 1), INVAL);
    EXPECT_EQ(spyre_stream_wait_value(gone, sem, 0, 1, kMax), INVAL);
    spyre_buffer_t freed;
    SC_ASSERT(spyre_malloc(dev, 64, &freed));
    SC_ASSERT(spyre_free(freed));
    EXPECT_EQ(spyre_stream_write_value(s, freed, 0, 1), INVAL);
    EXPECT_EQ(spyre_stream_wait_value(s, freed, 0, 1, kMax), INVAL);
    SC_ASSERT(spyre_stream_synchronize(s));
    for (uint64_t off = 0; off < 64; off += 8) EXPECT_EQ(sem_value(sem, off), 0u) << off;
    // The NULL stream is the semaphore card's default stream; the last semaphore of the buffer.
    SC_ASSERT(spyre_stream_write_value(nullptr, sem, 48, 2));
    SC_ASSERT(spyre_stream_wait_value(nullptr, sem, 48, 2, 0));
    SC_ASSERT(spyre_device_synchronize(dev));
    EXPECT_EQ(sem_value(sem, 48), 2u);
    SC_EXPECT(spyre_stream_destroy(s));
    spyre_free(sem);
}

// Stream capture refuses both and invalidates the capture.
inline void semaphore_capture_refused(spyre_device_t dev) {
    spyre_stream_t s;
    SC_ASSERT(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    spyre_buffer_t sem;
    SC_ASSERT(spyre_malloc(dev, 64, &sem));
    SC_ASSERT(spyre_memset(sem, 0, 0, 64));
    for (int wait = 0; wait < 2; ++wait) {
        SC_ASSERT(spyre_stream_begin_capture(s));
        SC_EXPECT(spyre_memset_async(sem, 32, 1, 16, s));
        EXPECT_EQ(wait ? spyre_stream_wait_value(s, sem, 0, 1, 0)
                       : spyre_stream_write_value(s, sem, 0, 1),
                  SPYRE_ERROR_NOT_SUPPORTED);
        SC_MSG(wait ? "a semaphore wait" : "a semaphore write");
        SC_MSG("cannot be captured");
        spyre_graph_t g = reinterpret_cast<spyre_graph_t>(1);
        EXPECT_EQ(spyre_stream_end_capture(s, &g), SPYRE_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(g, nullptr);
        SC_MSG("semaphore");
    }
    SC_ASSERT(spyre_stream_synchronize(s));
    EXPECT_EQ(sem_value(sem, 0), 0u) << "nothing of the captures ran";
    EXPECT_EQ(sem_value(sem, 32), 0u);
    SC_EXPECT(spyre_stream_destroy(s));
    spyre_free(sem);
}

// A stream of card d0 writes a semaphore in card d1's memory after a peer copy into d1; a
// stream of d1 waits for it, then copies what arrived (peer access enabled from d0 to d1).
inline void semaphore_peer(spyre_device_t d0, spyre_device_t d1) {
    spyre_stream_t s0, s1;
    SC_ASSERT(spyre_stream_create(d0, SPYRE_STREAM_PRIORITY_NORMAL, &s0));
    SC_ASSERT(spyre_stream_create(d1, SPYRE_STREAM_PRIORITY_HIGH, &s1));
    const uint64_t n = 300 * 1024 + 5;
    spyre_buffer_t a, sem, b, out;
    SC_ASSERT(spyre_malloc(d0, n, &a));
    SC_ASSERT(spyre_malloc(d1, 64, &sem));
    SC_ASSERT(spyre_malloc(d1, n, &b));
    SC_ASSERT(spyre_malloc(d1, n, &out));
    SC_ASSERT(spyre_memset(sem, 0, 0, 64));
    SC_ASSERT(spyre_memset(out, 0, 0, n));
    auto data = pattern(n, 23);
    SC_ASSERT(spyre_memcpy_htod(a, 0, data.data(), n));
    SC_ASSERT(spyre_stream_wait_value(s1, sem, 16, 1, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_memcpy_dtod_async(out, 0, b, 0, n, s1));
    SC_ASSERT(spyre_memcpy_peer_async(b, 0, a, 0, n, s0));
    SC_ASSERT(spyre_stream_write_value(s0, sem, 16, 1));
    SC_ASSERT(spyre_stream_synchronize(s1));
    SC_ASSERT(spyre_stream_synchronize(s0));
    std::vector<uint8_t> got(n);
    SC_ASSERT(spyre_memcpy_dtoh(got.data(), out, 0, n));
    EXPECT_TRUE(got == data) << "the wait let the copy run before the peer's data arrived";
    EXPECT_EQ(sem_value(sem, 16), 1u);

    // Held in submission batches on both streams (the collectives' shape): d1's wait and copy,
    // d0's peer copy into d1, a copy back from d1 and the write into d1's semaphore, each
    // batch in order and as its unbatched calls.
    auto data2 = pattern(n, 24);
    spyre_buffer_t back;
    SC_ASSERT(spyre_malloc(d0, n, &back));
    SC_ASSERT(spyre_memcpy_htod(a, 0, data2.data(), n));
    SC_ASSERT(spyre_memset(out, 0, 0, n));
    SC_ASSERT(spyre_stream_begin_batch(s1));
    SC_ASSERT(spyre_stream_wait_value(s1, sem, 16, 2, SPYRE_SEMAPHORE_WAIT_MAX_US));
    SC_ASSERT(spyre_memcpy_dtod_async(out, 0, b, 0, n, s1));
    SC_ASSERT(spyre_stream_end_batch(s1));
    SC_ASSERT(spyre_stream_begin_batch(s0));
    SC_ASSERT(spyre_memcpy_peer_async(b, 0, a, 0, n, s0));
    SC_ASSERT(spyre_memcpy_peer_async(back, 0, b, 0, n, s0));
    SC_ASSERT(spyre_stream_write_value(s0, sem, 16, 2));
    SC_ASSERT(spyre_stream_end_batch(s0));
    SC_ASSERT(spyre_stream_synchronize(s1));
    SC_ASSERT(spyre_stream_synchronize(s0));
    SC_ASSERT(spyre_memcpy_dtoh(got.data(), out, 0, n));
    EXPECT_TRUE(got == data2) << "batched: the wait let the copy run before the data arrived";
    SC_ASSERT(spyre_memcpy_dtoh(got.data(), back, 0, n));
    EXPECT_TRUE(got == data2) << "batched: the copy back from the peer ran out of order";
    EXPECT_EQ(sem_value(sem, 16), 2u);
    spyre_free(back);
    // A wait needs a semaphore of the stream's own card.
    EXPECT_EQ(spyre_stream_wait_value(s0, sem, 16, 1, 0), SPYRE_ERROR_INVALID_ARGUMENT);
    SC_MSG("waits only for semaphores of its own card");
    SC_EXPECT(spyre_stream_destroy(s0));
    SC_EXPECT(spyre_stream_destroy(s1));
    for (auto* x : {a, sem, b, out}) spyre_free(x);
}

// A collective's shape on two cards, queued unbatched and then held in a submission batch on
// each stream: d0's stream launches a2 = a + a, copies a2 into d1's b (a peer copy) and writes
// d1's semaphore; d1's stream waits for it, launches o = b + b and copies o out. The batched
// round computes what the unbatched one does (the held wait holds the held launch until the
// peer's data arrived) and is one submission per card (peer access enabled from d0 to d1).
inline void semaphore_peer_batch(spyre_device_t d0, spyre_device_t d1) {
    constexpr int64_t per_core = 64;
    constexpr uint32_t cores = 4;
    const size_t elems = per_core * cores;
    const uint64_t n = elems * 2;
    spyre_stream_t s0, s1;
    SC_ASSERT(spyre_stream_create(d0, SPYRE_STREAM_PRIORITY_NORMAL, &s0));
    SC_ASSERT(spyre_stream_create(d1, SPYRE_STREAM_PRIORITY_HIGH, &s1));
    auto img = spyre_test::build_add_program(per_core);
    spyre_program_t add0, add1;
    SC_ASSERT(spyre_program_load(d0, img.data(), img.size(), &add0));
    SC_ASSERT(spyre_program_load(d1, img.data(), img.size(), &add1));
    spyre_buffer_t a, a2, sem, b, o, out;
    SC_ASSERT(spyre_malloc(d0, n, &a));
    SC_ASSERT(spyre_malloc(d0, n, &a2));
    SC_ASSERT(spyre_malloc(d1, SPYRE_SEMAPHORE_BYTES, &sem));
    SC_ASSERT(spyre_malloc(d1, n, &b));
    SC_ASSERT(spyre_malloc(d1, n, &o));
    SC_ASSERT(spyre_malloc(d1, n, &out));
    const auto xv = spyre_test::random_f16(elems, 41);
    SC_ASSERT(spyre_memcpy_htod(a, 0, xv.data(), n));
    const auto r1 = spyre_test::add_ref(xv, xv);
    const auto want = spyre_test::add_ref(r1, r1);
    auto launch = [&](spyre_program_t prog, spyre_buffer_t x, spyre_buffer_t z, spyre_stream_t st) {
        spyre_launch_params p{};
        p.num_cores = cores;
        p.num_args = 3;
        spyre_buffer_t bufs[] = {x, z};
        p.args[0] = p.args[1] = addr_of(x), p.args[2] = addr_of(z);
        p.buffers = bufs;
        p.num_buffers = 2;
        SC_EXPECT(spyre_launch_async(prog, &p, st));
    };
    auto jobs = [](spyre_device_t d) {
        spyre_runtime_stats r{};
        EXPECT_EQ(spyre_device_get_runtime_stats(d, &r), SPYRE_SUCCESS) << spyre_last_error();
        return r.jobs_submitted;
    };
    for (int batched = 0; batched < 2; ++batched) {
        for (auto* x : {sem, b, o, out}) SC_ASSERT(spyre_memset(x, 0, 0, x == sem ? 16 : n));
        SC_ASSERT(spyre_device_synchronize(d0));
        SC_ASSERT(spyre_device_synchronize(d1));
        const uint64_t j0 = jobs(d0), j1 = jobs(d1);
        if (batched) SC_ASSERT(spyre_stream_begin_batch(s1));
        SC_ASSERT(spyre_stream_wait_value(s1, sem, 0, 1, SPYRE_SEMAPHORE_WAIT_MAX_US));
        launch(add1, b, o, s1);
        SC_ASSERT(spyre_memcpy_dtod_async(out, 0, o, 0, n, s1));
        if (batched) SC_ASSERT(spyre_stream_end_batch(s1));
        if (batched) SC_ASSERT(spyre_stream_begin_batch(s0));
        launch(add0, a, a2, s0);
        SC_ASSERT(spyre_memcpy_peer_async(b, 0, a2, 0, n, s0));
        SC_ASSERT(spyre_stream_write_value(s0, sem, 0, 1));
        if (batched) SC_ASSERT(spyre_stream_end_batch(s0));
        SC_ASSERT(spyre_stream_synchronize(s1));
        SC_ASSERT(spyre_stream_synchronize(s0));
        if (batched) {
            EXPECT_EQ(jobs(d0) - j0, 1u) << "d0: a launch, a peer copy and a write as one";
            EXPECT_EQ(jobs(d1) - j1, 1u) << "d1: a wait, a launch and a copy as one";
        }
        std::vector<uint16_t> got(elems);
        SC_ASSERT(spyre_memcpy_dtoh(got.data(), out, 0, n));
        EXPECT_TRUE(got == want) << (batched ? "batched" : "unbatched")
                                 << ": the launch on d1 ran before d0's data arrived";
        EXPECT_EQ(sem_value(sem, 0), 1u);
    }
    SC_EXPECT(spyre_stream_destroy(s0));
    SC_EXPECT(spyre_stream_destroy(s1));
    for (auto* x : {a, a2, sem, b, o, out}) spyre_free(x);
    spyre_program_free(add0);
    spyre_program_free(add1);
}

}  // namespace spyre_cases
