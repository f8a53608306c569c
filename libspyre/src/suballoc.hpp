// The sub-allocator: small device buffers carved from larger backend buffers ("slabs"), so
// that a small spyre_malloc costs no ioctl and no device clear. Power-of-two size classes
// from 256 bytes up to the limit (SPYRE_SUBALLOC_MAX, default 64 KiB; 0 disables); each
// class has slabs of SPYRE_SUBALLOC_SLAB bytes (default 2 MiB) split into equal blocks. A
// block is aligned to its size. A slab whose blocks are all free is given back.
//
// Each sub-buffer holds its allocator, not the device: a sub-buffer that queued work still uses
// when its device is closed must not keep the device alive, since the device owns the stream
// that holds the work (a cycle that kept a closed card open for the life of the process, and on
// the simulator a device destroyed by its own stream's worker, which then waited for itself).
// The device drains its default stream before it goes (Device::release_runtime), so no
// sub-buffer outlives the device's backend file.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.hpp"

namespace spyre {

class SubAllocator : public std::enable_shared_from_this<SubAllocator> {
  public:
    // `dev` is used by alloc() only (called through a live device).
    SubAllocator(Device& dev, uint64_t max_bytes, uint64_t slab_bytes);
    ~SubAllocator();

    // A buffer of `size` bytes from a slab, or nullptr if size is above the limit.
    BufferRef alloc(uint64_t size);

    uint64_t max_bytes() const { return max_; }
    struct Stats {
        uint64_t slabs = 0, slab_bytes = 0, used_bytes = 0, blocks = 0;
    };
    Stats stats();

    struct Slab;

  private:
    friend class SubBuffer;
    void release(Slab* slab, uint32_t block);

    Device& dev_;
    uint64_t max_, slab_bytes_;
    std::mutex mu_;
    std::vector<std::vector<std::unique_ptr<Slab>>> classes_;  // by log2(block) - 8
    Stats stats_;
};

// Limits from the environment: SPYRE_SUBALLOC_MAX and SPYRE_SUBALLOC_SLAB.
uint64_t suballoc_max_from_env();
uint64_t suballoc_slab_from_env();

}  // namespace spyre
