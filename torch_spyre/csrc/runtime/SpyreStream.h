// Streams of the spyre backend: c10::Stream ids mapped onto libspyre streams.
//
// Per card: stream id 0 is the default stream, ids 1..kStreamPoolSize a pool of normal-priority
// streams and kStreamPoolSize+1..2*kStreamPoolSize a pool of high-priority ones
// (SPYRE_STREAM_PRIORITY_HIGH). Every id is backed by a spyre_stream_t created on first use and
// kept for the life of the process. The default stream is a stream of torch_spyre's own, not
// libspyre's NULL default stream: libspyre cannot synchronize or query the NULL stream alone
// (spyre_stream_synchronize(NULL) is an error), and torch needs both. Like CUDA's, new
// torch.spyre.Stream objects are handed out round robin from the pools.
//
// The current stream is per thread and per card (default: stream 0).
#pragma once

#include <c10/core/Stream.h>
#include <spyre/spyre.h>

namespace torch_spyre {

constexpr int kStreamPoolSize = 8;

// The libspyre stream behind a spyre c10::Stream (created on first use).
spyre_stream_t native_stream(const c10::Stream& stream);

c10::Stream default_stream(c10::DeviceIndex index = -1);
c10::Stream current_stream(c10::DeviceIndex index = -1) noexcept;
// Makes `stream` the calling thread's current stream of its card; returns the previous one.
c10::Stream exchange_stream(const c10::Stream& stream) noexcept;
void set_current_stream(const c10::Stream& stream);
// The next stream of a card's pool (round robin); priority < 0 is the high-priority pool.
c10::Stream stream_from_pool(c10::DeviceIndex index, int priority);
// Rebuilds a stream from its id (torch.Stream objects carry the id); checks it.
c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id);
int stream_priority(const c10::Stream& stream);

// Waits for all work queued on `stream`; throws the first error of its asynchronous work.
void synchronize_stream(const c10::Stream& stream);
// Whether all work on `stream` has finished (throws a sticky error).
bool query_stream(const c10::Stream& stream);
// Waits for every stream of card `index` (spyre_device_synchronize); a no-op for a card that
// was never opened.
void synchronize_device(c10::DeviceIndex index);

}  // namespace torch_spyre
