#include "SpyreAllocator.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "SpyreException.h"
#include "SpyreFunctions.h"
#include "SpyreStream.h"

namespace torch_spyre {
namespace {

using c10::CachingDeviceAllocator::Stat;
using c10::CachingDeviceAllocator::StatArray;
using c10::CachingDeviceAllocator::StatType;

constexpr unsigned kPtrShift = 44;  // device addresses below 16 TiB
constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kLargeRound = size_t(128) << 10;

size_t round_size(size_t n) {
    const size_t r = n <= kSmallLimit ? kMinBlock : kLargeRound;
    return (n + r - 1) / r * r;
}

bool is_small(size_t size) { return size <= kSmallLimit; }

struct Block {
    c10::DeviceIndex device = -1;
    c10::StreamId stream = 0;  // the stream it was allocated on
    size_t size = 0;           // bytes of the libspyre buffer
    size_t requested = 0;      // bytes the current owner asked for
    spyre_buffer_t buffer = nullptr;
    uintptr_t ptr = 0;
    std::vector<c10::StreamId> stream_uses;  // other streams it was used on (record_stream)
    int pending_events = 0;                  // events to complete before it can be reused
};

// Cached blocks ordered by (stream, size): lower_bound finds the best fit on a stream.
struct BlockLess {
    bool operator()(const Block* a, const Block* b) const {
        return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
    }
};

struct PendingFree {
    spyre_event_t event;
    Block* block;
};

struct CardPool {
    std::set<Block*, BlockLess> cached;
    std::vector<PendingFree> pending;
    std::vector<spyre_event_t> spare_events;
    DeviceStats stats;
};

// Adds `delta` to the aggregate stat and to the one of the block's pool.
void update(StatArray& a, size_t block_size, int64_t delta) {
    auto apply = [delta](Stat& s) {
        if (delta >= 0)
            s.increase(static_cast<size_t>(delta));
        else
            s.decrease(static_cast<size_t>(-delta));
    };
    apply(a[static_cast<size_t>(StatType::AGGREGATE)]);
    apply(
        a[static_cast<size_t>(is_small(block_size) ? StatType::SMALL_POOL : StatType::LARGE_POOL)]);
}

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}

void raw_delete(void* ctx);

class CachingAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        const c10::DeviceIndex idx = current_device();
        const c10::Device device(c10::DeviceType::PrivateUse1, idx);
        if (n == 0) {
            check_device_index(idx);
            return c10::DataPtr(nullptr, device);
        }
        spyre_device_t handle = device_handle(idx);
        c10::StreamId stream = current_stream(idx).id();
        const size_t size = round_size(n);
        std::unique_lock lock(mu_);
        // A capturing stream allocates from its graph's private pool (a pseudo stream id).
        if (!capturing_.empty())
            if (auto it = capturing_.find({idx, stream}); it != capturing_.end())
                stream = it->second;
        CardPool& pool = pools_[idx];
        process_pending(pool, false);
        Block* b = nullptr;
        if (caching_) {
            Block key;
            key.stream = stream;
            key.size = size;
            auto it = pool.cached.lower_bound(&key);
            if (it != pool.cached.end() && (*it)->stream == stream &&
                (*it)->size <= size + size / 4) {
                b = *it;
                pool.cached.erase(it);
            }
        }
        if (!b) b = new_block(idx, handle, stream, size, n, lock);
        b->requested = n;
        live_[b->ptr] = b;
        update(pool.stats.allocation, b->size, 1);
        update(pool.stats.allocated_bytes, b->size, static_cast<int64_t>(b->size));
        update(pool.stats.requested_bytes, b->size, static_cast<int64_t>(n));
        update(pool.stats.active, b->size, 1);
        update(pool.stats.active_bytes, b->size, static_cast<int64_t>(b->size));
        return c10::DataPtr(reinterpret_cast<void*>(b->ptr), b, &raw_delete, device);
    }

    c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        if (count == 0) return;
        const DevicePtr d = torch_spyre::lookup(dest);
        const DevicePtr s = torch_spyre::lookup(src);
        const c10::Stream stream = current_stream(d.device);
        SPYRE_CHECK(spyre_memcpy_dtod_async(d.buffer, d.offset, s.buffer, s.offset, count,
                                            native_stream(stream)));
        synchronize_stream(stream);
    }

    void free(Block* b) {
        std::lock_guard lock(mu_);
        CardPool& pool = pools_[b->device];
        live_.erase(b->ptr);
        update(pool.stats.allocation, b->size, -1);
        update(pool.stats.allocated_bytes, b->size, -static_cast<int64_t>(b->size));
        update(pool.stats.requested_bytes, b->size, -static_cast<int64_t>(b->requested));
        if (!caching_) {
            // libspyre keeps the memory of a freed buffer until the work queued on it (on any
            // stream) has finished.
            deactivate(pool, b);
            release(pool, b);
            return;
        }
        for (c10::StreamId s : b->stream_uses) {
            spyre_event_t ev = take_event(pool, b->device);
            SPYRE_CHECK(spyre_event_record(ev, native_stream(make_stream(b->device, s))));
            pool.pending.push_back({ev, b});
            ++b->pending_events;
        }
        b->stream_uses.clear();
        if (b->pending_events == 0) {
            deactivate(pool, b);
            pool.cached.insert(b);
        }
    }

    std::optional<DevicePtr> lookup(uintptr_t p) {
        std::lock_guard lock(mu_);
        auto it = live_.upper_bound(p);
        if (it == live_.begin()) return std::nullopt;
        --it;
        const Block* b = it->second;
        if (p >= b->ptr + b->size) return std::nullopt;
        return DevicePtr{b->buffer, p - b->ptr, b->device, b->size};
    }

    void record_stream(Block* b, const c10::Stream& stream) {
        std::lock_guard lock(mu_);
        TORCH_CHECK(stream.device_index() == b->device, "record_stream: the stream is on spyre:",
                    static_cast<int>(stream.device_index()),
                    ", the tensor on spyre:", static_cast<int>(b->device));
        if (stream.id() == b->stream) return;
        for (c10::StreamId s : b->stream_uses)
            if (s == stream.id()) return;
        b->stream_uses.push_back(stream.id());
    }

    void empty_cache() {
        for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
            if (!is_device_open(i)) continue;
            // Freed memory is reusable once the work on it has finished.
            synchronize_device(i);
            std::lock_guard lock(mu_);
            process_pending(pools_[i], true);
            release_cached(pools_[i]);
        }
    }

    DeviceStats stats(c10::DeviceIndex idx) {
        std::lock_guard lock(mu_);
        return pools_[idx].stats;
    }

    template <class F>
    void for_each_stat(c10::DeviceIndex idx, F f) {
        std::lock_guard lock(mu_);
        DeviceStats& s = pools_[idx].stats;
        for (StatArray* a :
             {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
              &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
            for (Stat& st : *a) f(st);
        f(s.oversize_allocations);
        f(s.oversize_segments);
    }

    void reset_accumulated_counters(c10::DeviceIndex idx) {
        std::lock_guard lock(mu_);
        DeviceStats& s = pools_[idx].stats;
        s.num_alloc_retries = 0;
        s.num_ooms = 0;
        s.num_sync_all_streams = 0;
        s.num_device_alloc = 0;
        s.num_device_free = 0;
    }

    bool caching() const { return caching_; }

    void begin_pool(c10::DeviceIndex idx, c10::StreamId stream, c10::StreamId pool) {
        std::lock_guard lock(mu_);
        TORCH_CHECK(!capturing_.count({idx, stream}),
                    "torch_spyre: the stream is already capturing into a graph pool");
        capturing_[{idx, stream}] = pool;
        pool_home_[pool] = stream;
    }

    void end_pool(c10::DeviceIndex idx, c10::StreamId stream) {
        std::lock_guard lock(mu_);
        capturing_.erase({idx, stream});
    }

    bool pool_capturing(c10::DeviceIndex idx, c10::StreamId stream) {
        std::lock_guard lock(mu_);
        return capturing_.count({idx, stream}) != 0;
    }

    // The graph is gone (and its replays have finished): the pool's blocks join the ordinary
    // cache of the stream that captured it.
    void release_pool(c10::DeviceIndex idx, c10::StreamId pool) {
        std::lock_guard lock(mu_);
        auto home = pool_home_.find(pool);
        if (home == pool_home_.end()) return;
        CardPool& cp = pools_[idx];
        std::vector<Block*> moved;
        for (auto it = cp.cached.begin(); it != cp.cached.end();) {
            if ((*it)->stream == pool) {
                moved.push_back(*it);
                it = cp.cached.erase(it);
            } else {
                ++it;
            }
        }
        for (Block* b : moved) {
            b->stream = home->second;
            cp.cached.insert(b);
        }
        for (auto& [p, b] : live_)
            if (b->stream == pool) b->stream = home->second;
        for (auto& pf : cp.pending)
            if (pf.block->stream == pool) pf.block->stream = home->second;
        pool_home_.erase(home);
    }

  private:
    // A new libspyre buffer; on out-of-memory, empties the card's cache and retries once.
    // Called with the lock held; may drop it while waiting for the card.
    Block* new_block(c10::DeviceIndex idx, spyre_device_t handle, c10::StreamId stream, size_t size,
                     size_t requested, std::unique_lock<std::mutex>& lock) {
        CardPool& pool = pools_[idx];
        spyre_buffer_t buf = nullptr;
        spyre_status st = spyre_malloc(handle, size, &buf);
        if (st == SPYRE_ERROR_OUT_OF_MEMORY) {
            spyre_clear_last_error();
            ++pool.stats.num_alloc_retries;
            lock.unlock();
            const spyre_status sync = spyre_device_synchronize(handle);
            lock.lock();
            if (sync != SPYRE_SUCCESS) throw_spyre_error(sync, "spyre_device_synchronize");
            ++pool.stats.num_sync_all_streams;
            process_pending(pool, true);
            release_cached(pool);
            st = spyre_malloc(handle, size, &buf);
            if (st == SPYRE_ERROR_OUT_OF_MEMORY) {
                ++pool.stats.num_ooms;
                const std::string why = spyre_last_error();
                spyre_clear_last_error();
                const auto agg = static_cast<size_t>(StatType::AGGREGATE);
                TORCH_CHECK_WITH(
                    OutOfMemoryError, false,
                    "torch_spyre: out of memory on spyre:", static_cast<int>(idx), " allocating ",
                    c10::CachingDeviceAllocator::format_size(requested), ": ", why,
                    ". Tensors hold ",
                    c10::CachingDeviceAllocator::format_size(
                        static_cast<uint64_t>(pool.stats.allocated_bytes[agg].current)),
                    " on this card; the caching allocator had no unused memory left to "
                    "release (see torch.spyre.memory_summary()).");
            }
        }
        if (st != SPYRE_SUCCESS) throw_spyre_error(st, "spyre_malloc");
        uint64_t addr = 0;
        st = spyre_buffer_device_address(buf, &addr);
        if (st != SPYRE_SUCCESS || addr + size > (uint64_t(1) << kPtrShift)) {
            spyre_free(buf);
            if (st != SPYRE_SUCCESS) throw_spyre_error(st, "spyre_buffer_device_address");
            TORCH_CHECK(false, "torch_spyre: device address 0x", std::hex, addr,
                        " is beyond the 16 TiB torch_spyre can address");
        }
        auto* b = new Block;
        b->device = idx;
        b->stream = stream;
        b->size = size;
        b->buffer = buf;
        b->ptr = (uintptr_t(idx) + 1) << kPtrShift | addr;
        update(pool.stats.segment, size, 1);
        update(pool.stats.reserved_bytes, size, static_cast<int64_t>(size));
        ++pool.stats.num_device_alloc;
        return b;
    }

    void deactivate(CardPool& pool, Block* b) {
        update(pool.stats.active, b->size, -1);
        update(pool.stats.active_bytes, b->size, -static_cast<int64_t>(b->size));
    }

    void release(CardPool& pool, Block* b) {
        spyre_free(b->buffer);
        update(pool.stats.segment, b->size, -1);
        update(pool.stats.reserved_bytes, b->size, -static_cast<int64_t>(b->size));
        ++pool.stats.num_device_free;
        delete b;
    }

    void release_cached(CardPool& pool) {
        for (Block* b : pool.cached) release(pool, b);
        pool.cached.clear();
    }

    // Moves blocks whose events have completed (or, with `wait`, all) into the cache.
    void process_pending(CardPool& pool, bool wait) {
        for (auto it = pool.pending.begin(); it != pool.pending.end();) {
            const spyre_status st =
                wait ? spyre_event_synchronize(it->event) : spyre_event_query(it->event);
            if (st == SPYRE_ERROR_NOT_READY) {
                spyre_clear_last_error();
                ++it;
                continue;
            }
            // An event that cannot be waited for is treated as complete (its stream reports
            // the failure itself).
            if (st != SPYRE_SUCCESS) spyre_clear_last_error();
            pool.spare_events.push_back(it->event);
            Block* b = it->block;
            it = pool.pending.erase(it);
            if (--b->pending_events == 0) {
                deactivate(pool, b);
                pool.cached.insert(b);
            }
        }
    }

    spyre_event_t take_event(CardPool& pool, c10::DeviceIndex idx) {
        if (!pool.spare_events.empty()) {
            spyre_event_t ev = pool.spare_events.back();
            pool.spare_events.pop_back();
            return ev;
        }
        spyre_event_t ev = nullptr;
        SPYRE_CHECK(spyre_event_create(device_handle(idx), &ev));
        return ev;
    }

    const bool caching_ = !env_flag("TORCH_SPYRE_NO_CACHING");
    std::mutex mu_;
    std::array<CardPool, kMaxDevices> pools_;
    std::map<uintptr_t, Block*> live_;
    // Streams capturing into a graph's private pool: (card, stream) -> pool id; and the stream
    // each live pool was captured on.
    std::map<std::pair<c10::DeviceIndex, c10::StreamId>, c10::StreamId> capturing_;
    std::map<c10::StreamId, c10::StreamId> pool_home_;
};

CachingAllocator& instance() {
    // Leaked on purpose: tensors may be freed during static destruction.
    static auto* a = new CachingAllocator();
    return *a;
}

void raw_delete(void* ctx) {
    try {
        instance().free(static_cast<Block*>(ctx));
    } catch (const std::exception& e) {
        TORCH_WARN("torch_spyre: freeing device memory failed: ", e.what());
    }
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &instance());

}  // namespace

c10::Allocator* device_allocator() { return &instance(); }

std::optional<DevicePtr> try_lookup(const void* ptr) {
    return instance().lookup(reinterpret_cast<uintptr_t>(ptr));
}

DevicePtr lookup(const void* ptr) {
    auto p = try_lookup(ptr);
    TORCH_CHECK(p.has_value(), "torch_spyre: ", ptr,
                " is not the address of live spyre device memory");
    return *p;
}

void record_stream(const c10::DataPtr& data_ptr, const c10::Stream& stream) {
    if (data_ptr.get_deleter() != &raw_delete) return;  // not ours (or empty)
    instance().record_stream(static_cast<Block*>(data_ptr.get_context()), stream);
}

void empty_cache() { instance().empty_cache(); }

DeviceStats device_stats(c10::DeviceIndex index) {
    index = resolve_device(index);
    check_device_index(index);
    return instance().stats(index);
}

void reset_peak_stats(c10::DeviceIndex index) {
    index = resolve_device(index);
    check_device_index(index);
    instance().for_each_stat(index, [](Stat& s) { s.reset_peak(); });
}

void reset_accumulated_stats(c10::DeviceIndex index) {
    index = resolve_device(index);
    check_device_index(index);
    instance().for_each_stat(index, [](Stat& s) { s.reset_accumulated(); });
    instance().reset_accumulated_counters(index);
}

bool caching_enabled() { return instance().caching(); }

c10::StreamId new_graph_pool() {
    static std::atomic<c10::StreamId> next{kGraphPoolBase};
    return next++;
}

void begin_pool_capture(const c10::Stream& stream, c10::StreamId pool) {
    instance().begin_pool(stream.device_index(), stream.id(), pool);
}

void end_pool_capture(const c10::Stream& stream) {
    instance().end_pool(stream.device_index(), stream.id());
}

bool pool_capturing(const c10::Stream& stream) {
    return instance().pool_capturing(stream.device_index(), stream.id());
}

void release_graph_pool(c10::DeviceIndex index, c10::StreamId pool) {
    instance().release_pool(index, pool);
}

}  // namespace torch_spyre
