// Argument validation of the C API and enumeration without a card: every call must fail
// cleanly (status + message), never crash.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "spyre/spyre.h"

namespace {

bool driver_loaded() {
    struct stat st;
    return stat("/sys/module/spyre", &st) == 0;
}

std::string last() { return spyre_last_error(); }

#define EXPECT_MSG(substr) EXPECT_NE(last().find(substr), std::string::npos) << last()

TEST(ApiArgs, NullDeviceHandles) {
    spyre_device_info info;
    uint64_t a = 0, b = 0;
    EXPECT_EQ(spyre_device_get_info(nullptr, &info), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre_device_get_info: device handle is NULL");
    EXPECT_EQ(spyre_mem_get_info(nullptr, &a, &b), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_mem_stats ms;
    EXPECT_EQ(spyre_device_get_mem_stats(nullptr, &ms), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_telemetry t;
    EXPECT_EQ(spyre_device_get_telemetry(nullptr, &t), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_device_synchronize(nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_buffer_t buf = reinterpret_cast<spyre_buffer_t>(0x1);
    EXPECT_EQ(spyre_malloc(nullptr, 4096, &buf), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(buf, nullptr) << "output must be reset on failure";
    void* p = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(spyre_host_alloc(nullptr, 4096, &p), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(spyre_host_free(nullptr, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_device_close(nullptr), SPYRE_SUCCESS);
}

TEST(ApiArgs, NullBufferHandles) {
    char host[16] = {};
    uint64_t v;
    void* p;
    spyre_device_t d;
    EXPECT_EQ(spyre_buffer_size(nullptr, &v), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_buffer_device_address(nullptr, &v), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_buffer_map(nullptr, &p), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_buffer_get_device(nullptr, &d), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_memcpy_htod(nullptr, 0, host, sizeof(host)), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre_memcpy_htod: destination handle is NULL");
    EXPECT_EQ(spyre_memcpy_dtoh(host, nullptr, 0, sizeof(host)), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre_memcpy_dtoh: source handle is NULL");
    EXPECT_EQ(spyre_memcpy_dtod(nullptr, 0, nullptr, 0, 16), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_stream_write_value(nullptr, nullptr, 0, 1), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre_stream_write_value: semaphore buffer handle is NULL");
    EXPECT_EQ(spyre_stream_wait_value(nullptr, nullptr, 0, 1, 0), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("spyre_stream_wait_value: semaphore buffer handle is NULL");
    EXPECT_EQ(spyre_stream_wait_value(nullptr, nullptr, 0, 1, SPYRE_SEMAPHORE_WAIT_MAX_US + 1),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("exceeds SPYRE_SEMAPHORE_WAIT_MAX_US");
    EXPECT_EQ(spyre_free(nullptr), SPYRE_SUCCESS);
}

TEST(ApiArgs, ForeignOrStaleHandlesAreRejectedWithoutCrashing) {
    // A pointer that was never returned by libspyre must not be dereferenced.
    alignas(64) static char garbage[256];
    auto* b = reinterpret_cast<spyre_buffer_t>(garbage);
    auto* d = reinterpret_cast<spyre_device_t>(garbage);
    uint64_t v;
    EXPECT_EQ(spyre_buffer_size(b, &v), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("invalid or already freed");
    EXPECT_EQ(spyre_free(b), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_device_close(d), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("invalid or already closed");
    spyre_device_info info;
    EXPECT_EQ(spyre_device_get_info(d, &info), SPYRE_ERROR_INVALID_ARGUMENT);
}

TEST(Enumeration, NoDeviceGivesActionableMessage) {
    if (driver_loaded()) GTEST_SKIP() << "the spyre driver is loaded on this machine";
    int count = -1;
    spyre_clear_last_error();
    EXPECT_EQ(spyre_get_device_count(&count), SPYRE_ERROR_NO_DEVICE);
    EXPECT_EQ(count, 0);
    EXPECT_MSG("no Spyre device found");
    EXPECT_MSG("modprobe spyre");

    spyre_device_t dev = reinterpret_cast<spyre_device_t>(0x1);
    EXPECT_EQ(spyre_device_open(0, &dev), SPYRE_ERROR_NO_DEVICE);
    EXPECT_EQ(dev, nullptr);
    EXPECT_MSG("spyre_device_open: no Spyre device found");
    EXPECT_EQ(spyre_device_open(-1, &dev), SPYRE_ERROR_NO_DEVICE);
}

TEST(Enumeration, NullOutputs) {
    EXPECT_EQ(spyre_get_device_count(nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_MSG("output pointer `count` is NULL");
    EXPECT_EQ(spyre_device_open(0, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
