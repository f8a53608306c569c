#include "staging.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace spyre {

ChunkPlan::ChunkPlan(uint64_t size, uint64_t dev_offset, uint64_t chunk_bytes, unsigned slots,
                     uint64_t align)
    : size_(size), dev_offset_(dev_offset), chunk_bytes_(chunk_bytes), slots_(slots) {
    if (chunk_bytes == 0 || slots == 0 || align == 0 || chunk_bytes % align != 0)
        throw std::invalid_argument("ChunkPlan: chunk_bytes must be a non-zero multiple of align");
    uint64_t head = chunk_bytes - dev_offset % align;
    first_ = std::min(size, head);
    count_ = size == 0 ? 0 : 1 + (size - first_ + chunk_bytes - 1) / chunk_bytes;
}

Chunk ChunkPlan::at(uint64_t i) const {
    if (i >= count_) throw std::out_of_range("ChunkPlan::at: chunk index out of range");
    Chunk c{};
    c.index = i;
    c.slot = static_cast<unsigned>(i % slots_);
    if (i == 0) {
        c.host_offset = 0;
        c.size = first_;
    } else {
        c.host_offset = first_ + (i - 1) * chunk_bytes_;
        c.size = std::min(chunk_bytes_, size_ - c.host_offset);
    }
    c.dev_offset = dev_offset_ + c.host_offset;
    return c;
}

uint64_t staging_chunk_bytes_from_env() {
    const char* s = std::getenv("SPYRE_STAGING_CHUNK_BYTES");
    if (!s || !*s) return kDefaultStagingChunkBytes;
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (!end || *end != '\0' || v == 0) return kDefaultStagingChunkBytes;
    v = std::min<unsigned long long>(v, 1ull << 30);
    return (v + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}

}  // namespace spyre
