// The caching device allocator of the spyre backend (c10::Allocator for PrivateUse1).
//
// Every block is a libspyre buffer of its own (spyre_malloc). Tensor data pointers are not host
// addresses: a block's pointer is (card index + 1) << 44 | its device address, never
// dereferenced on the host and never null; lookup() maps any pointer inside a live block back to
// (buffer, offset), which is what the copy and fill paths hand to libspyre.
//
// Caching: a freed block goes back to a pool of its card, keyed by the stream it was allocated
// on, and is reused only by allocations on that stream (work on one stream runs in order, so the
// new owner's work queues behind the old owner's). A block used on other streams too
// (Tensor.record_stream) is reusable once events recorded on those streams at free time have
// completed. Requests are rounded up (512 B up to 1 MiB, 128 KiB above); a cached block is reused
// for a request if it is at most 25% larger. empty_cache() gives the cached blocks back to
// libspyre; an out-of-memory from spyre_malloc first empties the card's cache and retries.
// TORCH_SPYRE_NO_CACHING=1 turns caching off (every free is a spyre_free).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <spyre/spyre.h>

#include <optional>

namespace torch_spyre {

// Where a device pointer points: a libspyre buffer and a byte offset in it.
struct DevicePtr {
    spyre_buffer_t buffer = nullptr;
    uint64_t offset = 0;
    c10::DeviceIndex device = -1;
    uint64_t block_size = 0;  // bytes of the block (the buffer) the pointer is in
};

using DeviceStats = c10::CachingDeviceAllocator::DeviceStats;

// The allocator registered for PrivateUse1 (c10::GetAllocator(kPrivateUse1)).
c10::Allocator* device_allocator();

// The live block containing `ptr`, if any.
std::optional<DevicePtr> try_lookup(const void* ptr);
// As try_lookup, but throws if `ptr` is not inside a live spyre block.
DevicePtr lookup(const void* ptr);

// Tensor.record_stream: the block of `data_ptr` is also used on `stream`.
void record_stream(const c10::DataPtr& data_ptr, const c10::Stream& stream);

// Returns every cached (unused) block of every opened card to libspyre.
void empty_cache();
DeviceStats device_stats(c10::DeviceIndex index);
void reset_peak_stats(c10::DeviceIndex index);
void reset_accumulated_stats(c10::DeviceIndex index);
bool caching_enabled();

// Private pools of graphs (SpyreGraph.h): while a stream captures into pool P, its allocations
// are blocks of P and blocks of P freed go back to P, so memory a graph's replays write is never
// handed to anyone else while the graph lives. A pool is a pseudo stream id of the cache, at
// or above kGraphPoolBase.
constexpr c10::StreamId kGraphPoolBase = c10::StreamId(1) << 40;
c10::StreamId new_graph_pool();
void begin_pool_capture(const c10::Stream& stream, c10::StreamId pool);
void end_pool_capture(const c10::Stream& stream);
// True while `stream` captures into a graph pool (between the two calls above).
bool pool_capturing(const c10::Stream& stream);
// The graph of `pool` is gone and its replays have finished: its blocks join the ordinary
// cache of the stream that captured it.
void release_graph_pool(c10::DeviceIndex index, c10::StreamId pool);

}  // namespace torch_spyre
