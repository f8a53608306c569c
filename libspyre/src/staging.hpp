// Staging of pageable host memory: copies from or to ordinary host memory go through a small
// per-device pool of pinned host BOs, chunk by chunk, double-buffered so that the CPU copy of
// one chunk overlaps the DMA of the other.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bo.hpp"

namespace spyre {

inline constexpr uint64_t kDefaultStagingChunkBytes = 4ull << 20;
inline constexpr unsigned kDefaultStagingSlots = 2;
inline constexpr uint64_t kStagingAlign = 4096;

struct Chunk {
    uint64_t index;        // 0 .. count-1
    uint64_t host_offset;  // offset from the start of the copy (host side)
    uint64_t dev_offset;   // absolute offset in the device buffer
    uint64_t size;         // bytes, > 0
    unsigned slot;         // staging slot: index % slots
};

// Splits a copy of `size` bytes at device offset `dev_offset` into chunks of at most
// `chunk_bytes`. The first chunk is shortened so that every later chunk starts at a device
// offset aligned to `align` (chunk_bytes must be a multiple of align). Pure: no I/O.
class ChunkPlan {
  public:
    ChunkPlan(uint64_t size, uint64_t dev_offset, uint64_t chunk_bytes, unsigned slots,
              uint64_t align = kStagingAlign);
    uint64_t count() const { return count_; }
    Chunk at(uint64_t i) const;

  private:
    uint64_t size_, dev_offset_, chunk_bytes_, first_, count_;
    unsigned slots_;
};

// Staging chunk size from $SPYRE_STAGING_CHUNK_BYTES (rounded up to 4 KiB, at least 4 KiB),
// else the default.
uint64_t staging_chunk_bytes_from_env();

struct StagingSlot {
    std::unique_ptr<Bo> bo;
    std::byte* ptr = nullptr;
    uint64_t job = 0;  // job that uses the slot, 0 when idle
};

// The host BOs of one device. Created lazily by the device on the first staged copy.
struct StagingPool {
    uint64_t chunk_bytes = 0;
    std::vector<StagingSlot> slots;
};

}  // namespace spyre
