// Card buffers shared between processes (the collectives' p2p transport between processes,
// comm/peer_transport.cpp): a device buffer as a dma-buf fd another process can receive
// (SCM_RIGHTS), that fd imported on this process's card as a PEER buffer, and a copy into it.
// Internal to libspyre: no public API until a second user needs one (it would fix the
// import's lifetime rules and which copies take a peer buffer). Kernel backend only; the
// simulator's cards are memory of one process and give SPYRE_ERROR_NOT_SUPPORTED.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "spyre/spyre.h"

namespace spyre {

class Buffer;

struct ExportedBuffer {
    int fd = -1;          // a new dma-buf fd; the caller owns it
    uint64_t offset = 0;  // of the buffer's first byte in the dma-buf (sub-allocated buffers)
};
ExportedBuffer export_buffer_fd(spyre_buffer_t buf);

// The dma-buf `fd` (of `min_bytes` at least; the fd stays the caller's) as a PEER buffer of
// `device`'s card.
std::shared_ptr<Buffer> import_buffer_fd(spyre_device_t device, int fd, uint64_t min_bytes,
                                         const std::string& from);

// imported[dst_offset, +size) = src[src_offset, +size), copied by src's card on `stream` (NULL:
// its default stream); returns once the copy has finished, or with `wait` false once it is
// queued.
void copy_to_imported(const std::shared_ptr<Buffer>& imported, uint64_t dst_offset,
                      spyre_buffer_t src, uint64_t src_offset, uint64_t size, spyre_stream_t stream,
                      bool wait = true);

// The buffer behind a handle, held so that it outlives the handle (freed by its owner while
// this side may still signal into it), and spyre_stream_write_value into it by `device`'s
// card: a NULL `stream` is that card's default stream (the public call's would be the
// semaphore card's).
std::shared_ptr<const void> hold_buffer(spyre_buffer_t buf);
void write_value_held(spyre_device_t device, spyre_stream_t stream,
                      const std::shared_ptr<const void>& held, uint64_t offset, uint64_t value);

// spyre_stream_write_value into a buffer imported on `device`'s card: the semaphore at
// imported[offset] set to `value` by that card over the peer link, on `stream` (NULL: the
// card's default stream) after the stream's earlier work.
void signal_imported(spyre_device_t device, const std::shared_ptr<Buffer>& imported,
                     uint64_t offset, uint64_t value, spyre_stream_t stream);

// The first failure of `stream`'s finished work since its last synchronize (NULL: the default
// stream of `on`'s card), left for that synchronize to report; SPYRE_SUCCESS if none. For the
// collectives: data sent on a stream whose earlier work failed (a reduction, the push itself)
// is not what the peer expects, so they fail the communicator instead of posting it. Safe in
// a host function of the stream.
spyre_status stream_failure(spyre_stream_t stream, spyre_buffer_t on, std::string* what);

// Whether streams `a` and `b` of `device`'s card (NULL: its default stream) run their work
// through one in-order queue (kernel backend: one ring), so that a device-side wait of one
// holds back the other: the collectives never make two such streams wait for each other.
bool streams_share_queue(spyre_device_t device, spyre_stream_t a, spyre_stream_t b);

}  // namespace spyre
