// SPDX-License-Identifier: MIT
// The simulator's timing-only mode (SPYRE_SIM_TIMING_ONLY=1, Documentation/libspyre.md
// "Timing-only simulator"): the op library's programs model the same cycles, instructions and
// DDR bytes as on a computing card, no data moves, and the card is address space large enough
// for an 8B-parameter model. Each test opens its own cards and closes them, so the mode is read
// afresh from the environment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

#define ASSERT_SPYRE(x) ASSERT_EQ(SPYRE_SUCCESS, (x)) << spyre_last_error()

// Resident bytes of this process (/proc/self/statm).
uint64_t resident_bytes() {
    FILE* f = std::fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f) {
        if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

class TimingOnly : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("SPYRE_BACKEND", "sim", 1);
        unsetenv("SPYRE_SIM_DEVICES");
        unsetenv("SPYRE_SIM_MEMORY");
        unsetenv("SPYRE_SIM_TIMING_ONLY");
    }
    void TearDown() override {
        unsetenv("SPYRE_BACKEND");
        unsetenv("SPYRE_SIM_TIMING_ONLY");
    }
};

// What the card counted while `body` ran on it.
struct Counted {
    uint64_t launches, cycles, instructions, macs, ddr_read, ddr_write;
    bool operator==(const Counted&) const = default;
};

spyre_telemetry telemetry(spyre_device_t dev) {
    spyre_telemetry t{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_telemetry(dev, &t)) << spyre_last_error();
    return t;
}

// A dense fp16 buffer of n elements with values in [-1, 1], uploaded; the buffer is freed by
// the caller.
spyre_buffer_t upload_f16(spyre_device_t dev, size_t n, unsigned seed) {
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) {
        // fp16 of small values of both signs: sign bit, exponent 13..14, varied mantissa
        const uint32_t r = static_cast<uint32_t>((i * 2654435761u) ^ seed);
        h[i] =
            static_cast<uint16_t>(((r & 1) << 15) | ((13 + (r >> 1) % 2) << 10) | (r >> 3 & 0x3ff));
    }
    spyre_buffer_t b = nullptr;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, n * 2, &b)) << spyre_last_error();
    EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(b, 0, h.data(), n * 2)) << spyre_last_error();
    return b;
}

// Runs one op on a fresh card 0 in the mode `timing_only` and returns the card's counts and the
// bytes of the op's result.
Counted run_op(bool timing_only, const std::string& op, std::vector<uint16_t>* result) {
    if (timing_only)
        setenv("SPYRE_SIM_TIMING_ONLY", "1", 1);
    else
        unsetenv("SPYRE_SIM_TIMING_ONLY");
    spyre_device_t dev = nullptr;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_open(0, &dev)) << spyre_last_error();
    std::vector<spyre_buffer_t> bufs;
    spyre_tensor out{};
    std::function<spyre_status()> call;
    std::function<void()> cleanup = [] {};
    spyre_tensor a{}, b{}, mm{};
    if (op == "graph") {
        // a matmul and a softmax of its result captured into a graph: on the simulator the
        // replay runs them as one linked job (libspyre.md "Linked launches")
        const int64_t M = 192, K = 320, N = 256;
        bufs = {upload_f16(dev, M * K, 1), upload_f16(dev, K * N, 2), nullptr, nullptr};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, M * N * 2, &bufs[2]));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, M * N * 2, &bufs[3]));
        const int64_t sa[] = {M, K}, sb[] = {K, N}, so[] = {M, N};
        spyre_tensor_init(&a, bufs[0], 0, SPYRE_DTYPE_FLOAT16, 2, sa);
        spyre_tensor_init(&b, bufs[1], 0, SPYRE_DTYPE_FLOAT16, 2, sb);
        spyre_tensor_init(&mm, bufs[2], 0, SPYRE_DTYPE_FLOAT16, 2, so);
        spyre_tensor_init(&out, bufs[3], 0, SPYRE_DTYPE_FLOAT16, 2, so);
        spyre_stream_t s = nullptr;
        spyre_graph_t g = nullptr;
        EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_begin_capture(s));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_op_matmul(s, &a, &b, &mm)) << spyre_last_error();
        EXPECT_EQ(SPYRE_SUCCESS, spyre_op_softmax(s, &mm, 0, &out)) << spyre_last_error();
        EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_end_capture(s, &g)) << spyre_last_error();
        call = [=] {
            const spyre_status st = spyre_graph_launch(g, s);
            return st != SPYRE_SUCCESS ? st : spyre_stream_synchronize(s);
        };
        cleanup = [=] {
            spyre_graph_destroy(g);
            spyre_stream_destroy(s);
        };
    } else if (op == "matmul") {
        const int64_t M = 192, K = 320, N = 256;
        bufs = {upload_f16(dev, M * K, 1), upload_f16(dev, K * N, 2), nullptr};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, M * N * 2, &bufs[2]));
        const int64_t sa[] = {M, K}, sb[] = {K, N}, so[] = {M, N};
        spyre_tensor_init(&a, bufs[0], 0, SPYRE_DTYPE_FLOAT16, 2, sa);
        spyre_tensor_init(&b, bufs[1], 0, SPYRE_DTYPE_FLOAT16, 2, sb);
        spyre_tensor_init(&out, bufs[2], 0, SPYRE_DTYPE_FLOAT16, 2, so);
        call = [&] { return spyre_op_matmul(nullptr, &a, &b, &out); };
    } else {
        const int64_t rows = 96, cols = 1000;  // an odd row length
        bufs = {upload_f16(dev, rows * cols, 3), nullptr};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, rows * cols * 2, &bufs[1]));
        const int64_t s[] = {rows, cols};
        spyre_tensor_init(&a, bufs[0], 0, SPYRE_DTYPE_FLOAT16, 2, s);
        spyre_tensor_init(&out, bufs[1], 0, SPYRE_DTYPE_FLOAT16, 2, s);
        call = [&] { return spyre_op_softmax(nullptr, &a, 0, &out); };
    }
    // warm: plans and programs of the op (the card then counts the op's launches only)
    EXPECT_EQ(SPYRE_SUCCESS, call()) << spyre_last_error();
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_synchronize(dev)) << spyre_last_error();
    const spyre_telemetry t0 = telemetry(dev);
    EXPECT_EQ(SPYRE_SUCCESS, call()) << spyre_last_error();
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_synchronize(dev)) << spyre_last_error();
    const spyre_telemetry t1 = telemetry(dev);
    result->assign(out.shape[0] * out.shape[1], 0xabcd);
    EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(result->data(), out.buffer, 0, result->size() * 2));
    cleanup();
    for (auto* x : bufs) spyre_free(x);
    spyre_device_close(dev);
    return {t1.launches - t0.launches,
            t1.engine_cycles - t0.engine_cycles,
            t1.engine_instructions - t0.engine_instructions,
            t1.engine_macs - t0.engine_macs,
            t1.engine_ddr_read_bytes - t0.engine_ddr_read_bytes,
            t1.engine_ddr_write_bytes - t0.engine_ddr_write_bytes};
}

// A replayed graph's linked job (its scratchpad clears priced from what each launch wrote)
// models the same cycles on a timing-only card as on a computing one.
TEST_F(TimingOnly, LinkedGraphModelsTheCyclesOfAComputedRun) {
    std::vector<uint16_t> computed, timed;
    const Counted real = run_op(false, "graph", &computed);
    const Counted priced = run_op(true, "graph", &timed);
    EXPECT_GE(real.launches, 2u);
    EXPECT_GT(real.cycles, 0u);
    EXPECT_EQ(priced, real) << "cycles " << priced.cycles << " vs " << real.cycles;
    size_t nonzero = 0;
    for (uint16_t v : computed) nonzero += (v & 0x7fff) != 0;
    EXPECT_GT(nonzero, computed.size() / 2);
}

TEST_F(TimingOnly, MatmulAndSoftmaxModelTheCyclesOfAComputedRun) {
    for (const std::string op : {"matmul", "softmax"}) {
        SCOPED_TRACE(op);
        std::vector<uint16_t> computed, timed;
        const Counted real = run_op(false, op, &computed);
        const Counted priced = run_op(true, op, &timed);
        EXPECT_GT(real.launches, 0u);
        EXPECT_GT(real.cycles, 0u);
        EXPECT_GT(real.ddr_read, 0u);
        EXPECT_EQ(priced, real) << "cycles " << priced.cycles << " vs " << real.cycles
                                << ", instructions " << priced.instructions << " vs "
                                << real.instructions << ", DDR read " << priced.ddr_read << " vs "
                                << real.ddr_read;
        if (op == "matmul") {
            EXPECT_GT(real.macs, 0u);
        }
        // the computing card produced a result; the timing-only one computed nothing and its
        // reads give zeros
        size_t nonzero = 0;
        for (uint16_t v : computed) nonzero += (v & 0x7fff) != 0;
        EXPECT_GT(nonzero, computed.size() / 2);
        EXPECT_EQ(timed, std::vector<uint16_t>(timed.size(), 0));
    }
}

TEST_F(TimingOnly, CopiesAndFillsMoveNoData) {
    setenv("SPYRE_SIM_TIMING_ONLY", "1", 1);
    spyre_device_t dev = nullptr;
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    spyre_buffer_t a = nullptr, b = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, 4 * MiB, &a));
    ASSERT_SPYRE(spyre_malloc(dev, 4 * MiB, &b));
    std::vector<unsigned char> in(4 * MiB), out(4 * MiB + 2, 0xee);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
    const spyre_telemetry t0 = telemetry(dev);
    ASSERT_SPYRE(spyre_memcpy_htod(a, 0, in.data(), in.size()));
    ASSERT_SPYRE(spyre_memcpy_dtod(b, 0, a, 0, in.size()));
    ASSERT_SPYRE(spyre_memcpy_dtoh(out.data() + 1, b, 0, in.size()));
    EXPECT_EQ(std::vector<unsigned char>(out.begin() + 1, out.end() - 1),
              std::vector<unsigned char>(in.size(), 0))
        << "a read from a timing-only card gives zeros";
    EXPECT_EQ(out.front(), 0xee);
    EXPECT_EQ(out.back(), 0xee) << "the read wrote past its end";
    ASSERT_SPYRE(spyre_memset(b, 0, 0x5a, in.size()));
    ASSERT_SPYRE(spyre_memcpy_dtoh(out.data() + 1, b, 0, in.size()));
    EXPECT_EQ(out[1], 0) << "a fill moves no data either";
    // the copies are counted as on a computing card
    const spyre_telemetry t1 = telemetry(dev);
    EXPECT_EQ(t1.h2d_bytes - t0.h2d_bytes, 2 * in.size());  // the copy and the fill
    EXPECT_EQ(t1.d2d_bytes - t0.d2d_bytes, in.size());
    EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, 2 * in.size());
    // range checks as on a computing card
    EXPECT_EQ(spyre_memcpy_htod(a, 1, in.data(), in.size()), SPYRE_ERROR_INVALID_ARGUMENT);
    // and its memory cannot be mapped (it holds nothing)
    void* p = nullptr;
    EXPECT_EQ(spyre_buffer_map(a, &p), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(spyre_last_error()).find("timing-only"), std::string::npos)
        << spyre_last_error();
    spyre_free(a);
    spyre_free(b);
    spyre_device_close(dev);
}

TEST_F(TimingOnly, CardHoldsA64GiBBufferWithoutTouchingIt) {
    spyre_device_t dev = nullptr;
    spyre_buffer_t big = nullptr;
    // a computing card: 1 GiB by default
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    EXPECT_EQ(spyre_malloc(dev, 64 * GiB, &big), SPYRE_ERROR_OUT_OF_MEMORY);
    spyre_device_close(dev);

    setenv("SPYRE_SIM_TIMING_ONLY", "1", 1);
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    spyre_device_info info{};
    ASSERT_SPYRE(spyre_device_get_info(dev, &info));
    EXPECT_STREQ(info.driver_name, "spyre-sim (timing-only)") << "the mode must be visible";
    EXPECT_NE(std::string(info.accel_path).find("TIMING-ONLY"), std::string::npos);
    EXPECT_EQ(info.devmem_total, 256 * GiB);
    const uint64_t rss0 = resident_bytes();
    ASSERT_SPYRE(spyre_malloc(dev, 64 * GiB, &big));
    ASSERT_SPYRE(spyre_memset(big, 0, 1, 64 * GiB));  // the whole buffer: no page is touched
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    EXPECT_LT(resident_bytes(), rss0 + 64 * MiB);
    spyre_free(big);
    spyre_device_close(dev);

    // SPYRE_SIM_MEMORY still sets the size
    setenv("SPYRE_SIM_MEMORY", "2G", 1);
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    EXPECT_EQ(spyre_malloc(dev, 64 * GiB, &big), SPYRE_ERROR_OUT_OF_MEMORY);
    spyre_device_close(dev);
    unsetenv("SPYRE_SIM_MEMORY");
}

TEST_F(TimingOnly, BadSwitchValueIsReported) {
    setenv("SPYRE_SIM_TIMING_ONLY", "yes", 1);
    spyre_device_t dev = nullptr;
    EXPECT_EQ(spyre_device_open(0, &dev), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("SPYRE_SIM_TIMING_ONLY=\"yes\""),
              std::string::npos)
        << spyre_last_error();
    setenv("SPYRE_SIM_TIMING_ONLY", "0", 1);  // 0: a computing card
    ASSERT_SPYRE(spyre_device_open(0, &dev));
    spyre_device_info info{};
    ASSERT_SPYRE(spyre_device_get_info(dev, &info));
    EXPECT_STREQ(info.driver_name, "spyre-sim");
    spyre_device_close(dev);
}

}  // namespace
