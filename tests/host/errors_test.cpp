// Status strings, the thread-local last error and message helpers.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>

#include "error.hpp"
#include "spyre/spyre.h"

namespace {

TEST(Status, EveryStatusHasADistinctString) {
    std::set<std::string> seen;
    for (int s = SPYRE_SUCCESS; s <= SPYRE_ERROR_PROGRAM; ++s) {
        const char* text = spyre_status_string(static_cast<spyre_status>(s));
        ASSERT_NE(text, nullptr);
        EXPECT_STRNE(text, "unknown status") << "status " << s;
        EXPECT_TRUE(seen.insert(text).second) << "duplicate string " << text;
    }
    EXPECT_STREQ(spyre_status_string(SPYRE_SUCCESS), "success");
    EXPECT_STREQ(spyre_status_string(SPYRE_ERROR_OUT_OF_MEMORY), "out of memory");
    EXPECT_STREQ(spyre_status_string(static_cast<spyre_status>(12345)), "unknown status");
}

TEST(Version, MatchesHeader) {
    EXPECT_EQ(spyre_get_version(), static_cast<uint32_t>(SPYRE_API_VERSION));
    std::string v = spyre_get_version_string();
    EXPECT_EQ(v, std::to_string(SPYRE_API_VERSION_MAJOR) + "." +
                     std::to_string(SPYRE_API_VERSION_MINOR) + "." +
                     std::to_string(SPYRE_API_VERSION_PATCH));
}

TEST(LastError, IsSetByFailureKeptBySuccessAndCleared) {
    spyre_clear_last_error();
    EXPECT_STREQ(spyre_last_error(), "");
    EXPECT_EQ(spyre_malloc(nullptr, 16, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
    std::string msg = spyre_last_error();
    EXPECT_NE(msg.find("spyre_malloc: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("device handle is NULL"), std::string::npos) << msg;
    // A successful call leaves it (like errno).
    EXPECT_EQ(spyre_free(nullptr), SPYRE_SUCCESS);
    EXPECT_EQ(msg, spyre_last_error());
    spyre_clear_last_error();
    EXPECT_STREQ(spyre_last_error(), "");
}

TEST(LastError, IsThreadLocal) {
    spyre_clear_last_error();
    std::string other;
    std::thread t([&] {
        EXPECT_EQ(spyre_buffer_size(nullptr, nullptr), SPYRE_ERROR_INVALID_ARGUMENT);
        other = spyre_last_error();
    });
    t.join();
    EXPECT_NE(other.find("spyre_buffer_size"), std::string::npos) << other;
    EXPECT_STREQ(spyre_last_error(), "") << "another thread's failure leaked into this thread";
}

TEST(FormatBytes, PicksReadableUnits) {
    EXPECT_EQ(spyre::format_bytes(0), "0 B");
    EXPECT_EQ(spyre::format_bytes(1), "1 B");
    EXPECT_EQ(spyre::format_bytes(1023), "1023 B");
    EXPECT_EQ(spyre::format_bytes(1024), "1.0 KiB");
    EXPECT_EQ(spyre::format_bytes(1536), "1.5 KiB");
    EXPECT_EQ(spyre::format_bytes(4ull << 20), "4.0 MiB");
    EXPECT_EQ(spyre::format_bytes(3ull << 30), "3.0 GiB");
    EXPECT_EQ(spyre::format_bytes((1ull << 30) + (1ull << 30) / 5), "1.2 GiB");
    EXPECT_EQ(spyre::format_bytes((1ull << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
    EXPECT_EQ(spyre::format_bytes(16ull << 40), "16.0 TiB");
    EXPECT_EQ(spyre::format_bytes(UINT64_MAX), "16.0 EiB");
}

TEST(CheckBufferRange, AcceptsInsideRejectsOutsideAndOverflow) {
    EXPECT_NO_THROW(spyre::check_buffer_range(8192, 0, 8192, "destination"));
    EXPECT_NO_THROW(spyre::check_buffer_range(8192, 8192, 0, "destination"));
    EXPECT_NO_THROW(spyre::check_buffer_range(8192, 4095, 1, "destination"));
    try {
        spyre::check_buffer_range(8192, 4096, 8192, "destination");
        FAIL() << "no exception";
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.status(), SPYRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STREQ(e.what(),
                     "destination offset 4096 + size 8192 exceeds destination buffer size 8192");
    }
    EXPECT_THROW(spyre::check_buffer_range(8192, 8193, 0, "source"), spyre::Error);
    // offset + size wraps around 2^64: must still be rejected.
    EXPECT_THROW(spyre::check_buffer_range(8192, 4096, UINT64_MAX - 100, "source"), spyre::Error);
    EXPECT_THROW(spyre::check_buffer_range(8192, UINT64_MAX, 2, "source"), spyre::Error);
}

TEST(HwStatusText, NamesEveryDeviceStatus) {
    EXPECT_EQ(spyre::hw_status_text(0), "OK");
    EXPECT_NE(spyre::hw_status_text(3).find("ERR_DEV_RANGE"), std::string::npos);
    EXPECT_NE(spyre::hw_status_text(7).find("ERR_INJECTED"), std::string::npos);
    EXPECT_NE(spyre::hw_status_text(10).find("ERR_TIMEOUT"), std::string::npos);
    for (uint32_t s = 1; s <= 10; ++s)
        EXPECT_EQ(spyre::hw_status_text(s).find("unknown hw status"), std::string::npos) << s;
    EXPECT_EQ(spyre::hw_status_text(99), "unknown hw status 99");
}

TEST(StatusFromErrno, MapsCommonErrors) {
    EXPECT_EQ(spyre::status_from_errno(ENOMEM), SPYRE_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(spyre::status_from_errno(ENODEV), SPYRE_ERROR_DEVICE_LOST);
    EXPECT_EQ(spyre::status_from_errno(ETIME), SPYRE_ERROR_TIMEOUT);
    EXPECT_EQ(spyre::status_from_errno(EACCES), SPYRE_ERROR_PERMISSION);
    EXPECT_EQ(spyre::status_from_errno(ENOTTY), SPYRE_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(spyre::status_from_errno(EBADF), SPYRE_ERROR_IO);
    EXPECT_EQ(spyre::errno_text(ENOMEM), "ENOMEM: Cannot allocate memory");
}

}  // namespace
