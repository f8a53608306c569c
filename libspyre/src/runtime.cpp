// Runtime services every backend shares: the default stream, the device-wide synchronize, the
// sub-allocator front end and the program cache.
#include <time.h>

#include <cstring>
#include <format>

#include "backend.hpp"
#include "error.hpp"
#include "suballoc.hpp"

namespace spyre {

int64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Device::Device() = default;
Device::~Device() = default;

void Device::release_runtime() {
    // The stream goes first (its drained work held the last sub-buffers), then the allocator.
    std::shared_ptr<SubAllocator> sa;
    StreamRef s;
    {
        std::lock_guard lock(rt_mu_);
        s = std::move(default_stream_);
        sa = std::move(suballoc_);
        program_cache_.clear();
        pinned_programs_.clear();
        pinned_lru_.clear();
    }
    if (s) {
        try {
            s->synchronize();
        } catch (const Error&) {
        }
    }
}

StreamRef Device::default_stream() {
    std::lock_guard lock(rt_mu_);
    if (!default_stream_) default_stream_ = create_stream(0, true);
    return default_stream_;
}

void Device::register_stream(const StreamRef& s) {
    std::lock_guard lock(rt_mu_);
    std::erase_if(streams_, [](const std::weak_ptr<Stream>& w) { return w.expired(); });
    streams_.push_back(s);
}

void Device::enable_peer_access(const std::shared_ptr<Device>& peer) {
    std::lock_guard lock(rt_mu_);
    std::erase_if(peers_, [](const std::weak_ptr<Device>& w) { return w.expired(); });
    for (auto& w : peers_)
        if (w.lock() == peer) return;
    peers_.push_back(peer);
}

bool Device::peer_access_enabled(const Device& peer) {
    std::lock_guard lock(rt_mu_);
    for (auto& w : peers_)
        if (w.lock().get() == &peer) return true;
    return false;
}

int Device::export_buffer(Buffer&) {
    fail(SPYRE_ERROR_NOT_SUPPORTED,
         std::format("{} cannot share its memory with other processes (dma-bufs of spyre.ko's "
                     "cards only)",
                     name()));
}

BufferRef Device::import_buffer(int, uint64_t, const std::string& from) {
    fail(SPYRE_ERROR_NOT_SUPPORTED,
         std::format("{} cannot import memory of {} (dma-bufs of spyre.ko's cards only)", name(),
                     from));
}

void Stream::copy_peer(const PeerCopy& c) {
    fail(SPYRE_ERROR_NOT_SUPPORTED,
         std::format("peer-to-peer copies ({} to or from {}) cannot be queued here (a stream "
                     "being captured into a graph records no peer copies)",
                     format_bytes(c.size), c.peer_dev ? c.peer_dev->name() : "another process"));
}

void Stream::write_value(const SemOp&) {
    fail(SPYRE_ERROR_NOT_SUPPORTED, "semaphore writes cannot be queued here");
}

void Stream::wait_value(const SemOp&) {
    fail(SPYRE_ERROR_NOT_SUPPORTED, "semaphore waits cannot be queued here");
}

void Device::synchronize() {
    std::vector<StreamRef> all;
    {
        std::lock_guard lock(rt_mu_);
        if (default_stream_) all.push_back(default_stream_);
        for (auto& w : streams_)
            if (auto s = w.lock()) all.push_back(s);
    }
    std::optional<Error> first;
    for (auto& s : all) {
        try {
            s->synchronize();
        } catch (const Error& e) {
            if (!first) first = e;
        }
    }
    if (first) throw *first;
}

SubAllocator& Device::suballocator() {
    std::lock_guard lock(rt_mu_);
    if (!suballoc_)
        suballoc_ = std::make_shared<SubAllocator>(*this, suballoc_max_from_env(),
                                                   suballoc_slab_from_env());
    return *suballoc_;
}

BufferRef Device::alloc_buffer(uint64_t size) {
    check_present();
    SubAllocator& sa = suballocator();
    if (size <= sa.max_bytes()) {
        // A slab that cannot be created (device full) falls back to a buffer of its own.
        try {
            if (auto b = sa.alloc(size)) return b;
        } catch (const Error& e) {
            if (e.status() != SPYRE_ERROR_OUT_OF_MEMORY) throw;
        }
    }
    return BufferRef(alloc(size));
}

namespace {
uint64_t fnv1a(const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
}  // namespace

BufferRef Device::load_program_image(const void* image, size_t size) {
    const uint64_t h = fnv1a(image, size);
    {
        std::lock_guard lock(rt_mu_);
        auto [lo, hi] = program_cache_.equal_range(h);
        for (auto it = lo; it != hi;) {
            auto buf = it->second.buf.lock();
            if (!buf) {
                it = program_cache_.erase(it);
                continue;
            }
            if (it->second.bytes.size() == size &&
                std::memcmp(it->second.bytes.data(), image, size) == 0) {
                counters_.program_cache_hits++;
                return buf;
            }
            ++it;
        }
    }
    counters_.program_cache_misses++;
    // Programs get a buffer of their own (not a slab block): the launch window is the whole
    // buffer.
    BufferRef buf(alloc(size));
    write_program(buf, image, size);
    std::lock_guard lock(rt_mu_);
    CachedImage c;
    c.bytes.assign(static_cast<const uint8_t*>(image), static_cast<const uint8_t*>(image) + size);
    c.buf = buf;
    program_cache_.emplace(h, std::move(c));
    return buf;
}

void Device::write_program(const BufferRef& buf, const void* image, size_t size) {
    default_stream()->run_sync([&] { default_stream()->copy_htod(buf, 0, image, size); });
}

BufferRef Device::pinned_program(uint64_t id, const std::vector<uint8_t>& image) {
    {
        std::lock_guard lock(rt_mu_);
        if (auto it = pinned_programs_.find(id); it != pinned_programs_.end()) {
            counters_.program_cache_hits++;
            pinned_lru_.splice(pinned_lru_.begin(), pinned_lru_, it->second.lru);
            return it->second.buf;
        }
    }
    BufferRef buf = load_program_image(image.data(), image.size());
    std::lock_guard lock(rt_mu_);
    if (auto it = pinned_programs_.find(id); it != pinned_programs_.end())
        return it->second.buf;  // another thread loaded it meanwhile
    pinned_lru_.push_front(id);
    pinned_programs_.emplace(id, PinnedProgram{buf, pinned_lru_.begin()});
    while (pinned_programs_.size() > kMaxPinnedPrograms) {
        pinned_programs_.erase(pinned_lru_.back());
        pinned_lru_.pop_back();
        counters_.pinned_program_evictions++;
    }
    return buf;
}

size_t Device::pinned_program_count() {
    std::lock_guard lock(rt_mu_);
    return pinned_programs_.size();
}

}  // namespace spyre

namespace spyre {
std::shared_ptr<OpStatus>& current_op() {
    thread_local std::shared_ptr<OpStatus> op;
    return op;
}
}  // namespace spyre
