// Graphs of the spyre backend (torch.spyre.SpyreGraph, like torch.cuda.CUDAGraph): the work a
// stream queues between capture_begin and capture_end is captured by libspyre
// (spyre_stream_begin_capture) and replayed as one submission; the memory allocated on the
// stream meanwhile comes from the graph's private pool of the caching allocator.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>

namespace torch_spyre {

// Starts capturing `stream` (not the default stream) into a new private pool; returns the
// pool id.
int64_t graph_capture_begin(const c10::Stream& stream);
// Ends the capture: the libspyre graph handle. Throws (and the pool is released) if the
// capture failed, with the error that invalidated it.
uintptr_t graph_capture_end(const c10::Stream& stream, int64_t pool);
// Queues a replay of the graph on `stream`.
void graph_replay(uintptr_t graph, const c10::Stream& stream);
// Waits for the card, destroys the graph and gives its pool's memory back to the cache.
void graph_destroy(uintptr_t graph, c10::DeviceIndex device, int64_t pool);
// Submissions libspyre made to card `device` so far (spyre_runtime_stats.jobs_submitted).
uint64_t submissions(c10::DeviceIndex device);

}  // namespace torch_spyre
