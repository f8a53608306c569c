// SPDX-License-Identifier: MIT
// SHA-256 (FIPS 180-4): names and checksums of the files of the program cache on disk
// (ops/program_store.hpp), where a collision must not hand one kernel another's program.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spyre {

class Sha256 {
  public:
    Sha256();
    Sha256& update(const void* data, size_t n);
    Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
    std::array<uint8_t, 32> digest();  // ends the hash

  private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_{};
    size_t used_ = 0;
    uint64_t bytes_ = 0;
};

std::string to_hex(const uint8_t* p, size_t n);

}  // namespace spyre
