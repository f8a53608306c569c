// SPDX-License-Identifier: MIT
// The driver files (/dev/accel/...) this process holds open: a closed device handle must leave
// none behind (guest tests of lost cards).
#pragma once

#include <filesystem>
#include <system_error>

namespace spyre_test {

inline int open_accel_files() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        std::error_code lec;
        n += std::filesystem::read_symlink(e.path(), lec).string().starts_with("/dev/accel/");
    }
    return n;
}

}  // namespace spyre_test
