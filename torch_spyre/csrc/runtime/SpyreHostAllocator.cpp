#include "SpyreHostAllocator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "SpyreException.h"
#include "SpyreFunctions.h"
#include "SpyreStream.h"

namespace torch_spyre {
namespace {

struct HostBlock {
    void* ptr = nullptr;
    size_t size = 0;
    c10::DeviceIndex device = -1;
    bool allocated = false;
    std::vector<spyre_event_t> events;  // asynchronous copies that use the block
};

size_t round_pow2(size_t n) {
    size_t r = 4096;
    while (r < n) r <<= 1;
    return r;
}

void host_delete(void* ctx);

class HostAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        const c10::Device cpu(c10::DeviceType::CPU);
        if (n == 0) return c10::DataPtr(nullptr, cpu);
        const c10::DeviceIndex idx = current_device();
        spyre_device_t handle = device_handle(idx);
        const size_t size = round_pow2(n);
        std::lock_guard lock(mu_);
        reap(false);
        HostBlock* b = nullptr;
        auto it = cached_.find({idx, size});
        if (it != cached_.end()) {
            b = it->second;
            cached_.erase(it);
        } else {
            void* p = nullptr;
            spyre_status st = spyre_host_alloc(handle, size, &p);
            if (st == SPYRE_ERROR_OUT_OF_MEMORY) {
                spyre_clear_last_error();
                reap(true);
                release_cached();
                st = spyre_host_alloc(handle, size, &p);
            }
            if (st != SPYRE_SUCCESS) throw_spyre_error(st, "spyre_host_alloc");
            b = new HostBlock;
            b->ptr = p;
            b->size = size;
            b->device = idx;
            blocks_[reinterpret_cast<uintptr_t>(p)] = b;
            stats_.reserved_bytes += static_cast<int64_t>(size);
            ++stats_.num_blocks;
        }
        b->allocated = true;
        stats_.allocated_bytes += static_cast<int64_t>(b->size);
        stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
        return c10::DataPtr(b->ptr, b, &host_delete, cpu);
    }

    c10::DeleterFnPtr raw_deleter() const override { return &host_delete; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }

    void free(HostBlock* b) {
        std::lock_guard lock(mu_);
        b->allocated = false;
        stats_.allocated_bytes -= static_cast<int64_t>(b->size);
        if (b->events.empty())
            cached_.insert({{b->device, b->size}, b});
        else
            pending_.push_back(b);
    }

    HostBlock* find(const void* ptr) {
        const auto p = reinterpret_cast<uintptr_t>(ptr);
        auto it = blocks_.upper_bound(p);
        if (it == blocks_.begin()) return nullptr;
        --it;
        HostBlock* b = it->second;
        return p < it->first + b->size && b->allocated ? b : nullptr;
    }

    c10::DeviceIndex device_of(const void* ptr) {
        std::lock_guard lock(mu_);
        HostBlock* b = find(ptr);
        return b ? b->device : -1;
    }

    void record(const void* ptr, const c10::Stream& stream) {
        std::lock_guard lock(mu_);
        HostBlock* b = find(ptr);
        if (!b) return;
        drop_done(b, false);  // keeps the list short for a block used by many copies
        spyre_event_t ev = nullptr;
        SPYRE_CHECK(spyre_event_create(device_handle(stream.device_index()), &ev));
        const spyre_status st = spyre_event_record(ev, native_stream(stream));
        if (st != SPYRE_SUCCESS) {
            spyre_event_destroy(ev);
            throw_spyre_error(st, "spyre_event_record");
        }
        b->events.push_back(ev);
    }

    HostStats stats() {
        std::lock_guard lock(mu_);
        return stats_;
    }

    void empty() {
        std::lock_guard lock(mu_);
        reap(false);
        release_cached();
    }

  private:
    // Destroys the events of `b` whose copies have finished (with `wait`, waits for all).
    static void drop_done(HostBlock* b, bool wait) {
        auto& evs = b->events;
        auto done = [wait](spyre_event_t ev) {
            const spyre_status st = wait ? spyre_event_synchronize(ev) : spyre_event_query(ev);
            if (st == SPYRE_ERROR_NOT_READY) {
                spyre_clear_last_error();
                return false;
            }
            spyre_event_destroy(ev);
            return true;
        };
        evs.erase(std::remove_if(evs.begin(), evs.end(), done), evs.end());
    }

    // Pending blocks whose copies have finished go to the cache (with `wait`, all of them).
    void reap(bool wait) {
        for (auto it = pending_.begin(); it != pending_.end();) {
            drop_done(*it, wait);
            if ((*it)->events.empty()) {
                cached_.insert({{(*it)->device, (*it)->size}, *it});
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
    }

    void release_cached() {
        for (auto& [key, b] : cached_) {
            spyre_host_free(device_handle(b->device), b->ptr);
            blocks_.erase(reinterpret_cast<uintptr_t>(b->ptr));
            stats_.reserved_bytes -= static_cast<int64_t>(b->size);
            --stats_.num_blocks;
            delete b;
        }
        cached_.clear();
    }

    std::mutex mu_;
    std::map<uintptr_t, HostBlock*> blocks_;  // every block, by address
    std::multimap<std::pair<c10::DeviceIndex, size_t>, HostBlock*> cached_;
    std::vector<HostBlock*> pending_;  // freed, copies may still use them
    HostStats stats_;
};

HostAllocator& instance() {
    static auto* a = new HostAllocator();  // leaked, see SpyreAllocator.cpp
    return *a;
}

void host_delete(void* ctx) { instance().free(static_cast<HostBlock*>(ctx)); }

}  // namespace

c10::Allocator* host_allocator() { return &instance(); }

bool is_pinned(const void* ptr) { return instance().device_of(ptr) >= 0; }

c10::DeviceIndex pinned_device(const void* ptr) { return instance().device_of(ptr); }

void record_host_use(const void* ptr, const c10::Stream& stream) { instance().record(ptr, stream); }

HostStats host_stats() { return instance().stats(); }

void empty_host_cache() { instance().empty(); }

}  // namespace torch_spyre
