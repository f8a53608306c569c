// Pinned host memory for the spyre backend (tensor.pin_memory(), torch.empty(...,
// pin_memory=True), the output of tensor.to("cpu", non_blocking=True)).
//
// Blocks come from spyre_host_alloc on the current card: host memory its DMA engine reaches
// directly, so copies between it and that card take no staging copy and can be truly
// asynchronous. Sizes are rounded up to a power of two (at least 4 KiB) and freed blocks are
// cached for reuse. An asynchronous copy that uses a pinned block records an event on its stream
// (record_host_use); a block freed while such a copy may still run is reused or released only
// once its events have completed.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <cstdint>

namespace torch_spyre {

c10::Allocator* host_allocator();

// Whether `ptr` lies in a live pinned block (any card).
bool is_pinned(const void* ptr);
// The card a pinned pointer was allocated for, or -1.
c10::DeviceIndex pinned_device(const void* ptr);
// An asynchronous copy on `stream` reads or writes the pinned memory at `ptr`.
void record_host_use(const void* ptr, const c10::Stream& stream);

struct HostStats {
    int64_t allocated_bytes = 0;  // in live blocks
    int64_t reserved_bytes = 0;   // live and cached blocks
    int64_t peak_allocated_bytes = 0;
    int64_t num_blocks = 0;
};
HostStats host_stats();
// Releases the cached pinned blocks whose copies have finished.
void empty_host_cache();

}  // namespace torch_spyre
