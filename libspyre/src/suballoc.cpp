#include "suballoc.hpp"

#include <bit>
#include <cstdlib>

#include "error.hpp"

namespace spyre {

namespace {
constexpr uint64_t kMinBlock = 256;
constexpr uint64_t kDefaultMax = 64 << 10;
constexpr uint64_t kDefaultSlab = 2 << 20;
}  // namespace

uint64_t suballoc_max_from_env() {
    uint64_t v = kDefaultMax;
    const char* s = std::getenv("SPYRE_SUBALLOC_MAX");
    if (s && *s && parse_bytes(s, &v)) return std::min<uint64_t>(v, 64ull << 20);
    return kDefaultMax;
}

uint64_t suballoc_slab_from_env() {
    uint64_t v = kDefaultSlab;
    const char* s = std::getenv("SPYRE_SUBALLOC_SLAB");
    if (s && *s && parse_bytes(s, &v) && v >= 64 * 1024) return std::bit_ceil(v);
    return kDefaultSlab;
}

struct SubAllocator::Slab {
    BufferRef buf;
    uint32_t cls = 0;
    uint64_t block = 0;
    std::vector<uint32_t> free;  // free block indices
    uint32_t total = 0;
};

// A block of a slab. Holds its allocator (which owns the slab) alive, not the device.
class SubBuffer final : public Buffer {
  public:
    SubBuffer(std::shared_ptr<SubAllocator> owner, SubAllocator::Slab* slab, uint32_t block,
              uint64_t size)
        : owner_(std::move(owner)), slab_(slab), block_(block), size_(size) {}
    ~SubBuffer() override { owner_->release(slab_, block_); }
    uint64_t size() const override { return size_; }
    uint64_t alloc_size() const override { return slab_->block; }
    uint64_t dev_addr() const override { return slab_->buf->dev_addr() + offset(); }
    void* map() override { return static_cast<std::byte*>(slab_->buf->map()) + offset(); }
    Buffer& root() override { return slab_->buf->root(); }
    uint64_t root_offset() const override { return slab_->buf->root_offset() + offset(); }

  private:
    uint64_t offset() const { return block_ * slab_->block; }
    std::shared_ptr<SubAllocator> owner_;
    SubAllocator::Slab* slab_;
    uint32_t block_;
    uint64_t size_;
};

SubAllocator::SubAllocator(Device& dev, uint64_t max_bytes, uint64_t slab_bytes)
    : dev_(dev),
      max_(max_bytes ? std::min(std::bit_floor(max_bytes), slab_bytes) : 0),
      slab_bytes_(slab_bytes) {}

SubAllocator::~SubAllocator() = default;

BufferRef SubAllocator::alloc(uint64_t size) {
    if (size == 0 || size > max_) return nullptr;
    const uint64_t block = std::max(kMinBlock, std::bit_ceil(size));
    const uint32_t cls =
        static_cast<uint32_t>(std::countr_zero(block) - std::countr_zero(kMinBlock));
    std::unique_lock lock(mu_);
    if (classes_.size() <= cls) classes_.resize(cls + 1);
    auto& slabs = classes_[cls];
    Slab* slab = nullptr;
    for (auto& s : slabs)
        if (!s->free.empty()) {
            slab = s.get();
            break;
        }
    if (!slab) {
        lock.unlock();  // BO creation is an ioctl: not under the allocator lock
        BufferRef buf = dev_.alloc(slab_bytes_);
        lock.lock();
        auto s = std::make_unique<Slab>();
        s->buf = std::move(buf);
        s->cls = cls;
        s->block = block;
        s->total = static_cast<uint32_t>(slab_bytes_ / block);
        for (uint32_t i = s->total; i-- > 0;) s->free.push_back(i);  // lowest address first
        slab = s.get();
        classes_[cls].push_back(std::move(s));
        stats_.slabs++;
        stats_.slab_bytes += slab_bytes_;
    }
    uint32_t b = slab->free.back();
    slab->free.pop_back();
    stats_.used_bytes += block;
    stats_.blocks++;
    return std::make_shared<SubBuffer>(shared_from_this(), slab, b, size);
}

void SubAllocator::release(Slab* slab, uint32_t block) {
    BufferRef drop;  // a freed slab is released outside the lock
    std::lock_guard lock(mu_);
    slab->free.push_back(block);
    stats_.used_bytes -= slab->block;
    stats_.blocks--;
    if (slab->free.size() == slab->total) {
        auto& slabs = classes_[slab->cls];
        // Keep one empty slab per class to avoid ping-pong; free the others.
        size_t empty = 0;
        for (auto& s : slabs) empty += s->free.size() == s->total;
        if (empty > 1) {
            for (auto it = slabs.begin(); it != slabs.end(); ++it)
                if (it->get() == slab) {
                    drop = std::move((*it)->buf);
                    slabs.erase(it);
                    stats_.slabs--;
                    stats_.slab_bytes -= slab_bytes_;
                    break;
                }
        }
    }
}

SubAllocator::Stats SubAllocator::stats() {
    std::lock_guard lock(mu_);
    return stats_;
}

}  // namespace spyre
