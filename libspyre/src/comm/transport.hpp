// The transport under the collectives (ring.cpp): moves byte ranges of device buffers between
// ranks: host-staged (host_staged_transport.cpp) or card to card (peer_transport.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "spyre/comm.h"
#include "spyre/spyre.h"

namespace spyre::comm {

class Transport {
  public:
    virtual ~Transport() = default;
    // "host-staged" or "p2p"
    virtual const char* name() const = 0;
    // Whether a collective's waits between the ranks are queued on the cards.
    virtual bool device_waits() const { return false; }
    // Largest byte count of one send/recv; a multiple of 128.
    virtual uint64_t max_chunk_bytes() const = 0;
    // Sends bytes [offset, offset + size) of `src` to rank `peer`, after the earlier work of
    // `stream`. Waits only for an outbox slot (shm_segment.hpp), not for the receiver to take
    // the message; may return before the data has left `src` (it leaves in stream order).
    // `after`: a mark() of `stream` the data is complete at, where the send need not wait for
    // all of the stream's earlier work (0: it does).
    virtual void send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                      spyre_stream_t stream, uint64_t after = 0) = 0;
    // Names the point `stream`'s queued work has reached, for a later send's `after`; 0 where
    // the transport orders sends after all of the stream's earlier work anyway.
    virtual uint64_t mark(spyre_stream_t /*stream*/) { return 0; }
    // Receives the next message of rank `peer` (exactly `size` bytes) into `dst` at `offset`,
    // ordered on `stream`.
    virtual void recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                      spyre_stream_t stream) = 0;
    // Receives the next message of `peer` (count elements of dtype) and reduces it into
    // acc[acc_offset, +count) on the card, ordered on `stream` (reduce_on_card, ring.hpp);
    // `scratch` (max_chunk_bytes()) is where a transport that cannot reduce in place of the
    // message receives it first.
    virtual void recv_reduce(int peer, spyre_buffer_t acc, uint64_t acc_offset, uint64_t count,
                             spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t scratch,
                             spyre_stream_t stream) = 0;
    // Straight into place (an all-gather's destination, no inbox): whether this transport
    // can; then every rank opens its window, sends with send_into and takes with
    // recv_in_place, in the same order on every rank.
    virtual bool direct() const { return false; }
    // Publishes buf (from byte `base`) as this rank's window once `stream` has reached this
    // point (its earlier work on buf is done).
    virtual void open_window(spyre_buffer_t /*buf*/, uint64_t /*base*/, spyre_stream_t /*stream*/) {
    }
    // Sends src[offset, +size) into `peer`'s open window at window_offset (from its base).
    virtual void send_into(int /*peer*/, spyre_buffer_t /*src*/, uint64_t /*offset*/,
                           uint64_t /*size*/, uint64_t /*window_offset*/, spyre_stream_t /*stream*/,
                           uint64_t /*after*/ = 0) {}
    // Takes `peer`'s next message (`size` bytes, sent with send_into): later work of `stream`
    // runs once it has landed.
    virtual void recv_in_place(int /*peer*/, uint64_t /*size*/, spyre_stream_t /*stream*/) {}
    // Later work of `stream` (the caller's) waits for the sends queued so far, where a
    // transport sends on a stream of its own (PeerTransport on the simulator).
    virtual void join(spyre_stream_t /*stream*/) {}
    // Whether the calls until the next settle are a collective of every rank (true) or one
    // rank's send or receive (false), on `stream`.
    virtual void begin(bool /*collective*/, spyre_stream_t /*stream*/) {}
    // The call's work is all queued (after join): what the transport held back goes to the
    // cards now.
    virtual void submit() {}
    // After the call's work on its stream (or the NULL stream's card) has finished: waits for
    // what the transport queued elsewhere (its own stream) and reports its failures; after a
    // collective, returns only once every rank got here without a failure.
    virtual void settle() {}
    // Returns once every rank has entered it.
    virtual void barrier() = 0;
    // Fails the communicator for every rank with `reason` (the first reason wins).
    virtual void abort(const std::string& reason) = 0;
    // Throws the error that failed the communicator, if any.
    virtual void check() = 0;
    virtual void set_timeout_ms(uint64_t ms) = 0;
};

// bytes [off, off + bytes) of buf to / from `peer`, one message per max_chunk_bytes().
inline void send_range(Transport& t, int peer, spyre_buffer_t buf, uint64_t off, uint64_t bytes,
                       spyre_stream_t stream) {
    for (uint64_t c = 0; c < bytes; c += t.max_chunk_bytes())
        t.send(peer, buf, off + c, std::min(t.max_chunk_bytes(), bytes - c), stream);
}
inline void recv_range(Transport& t, int peer, spyre_buffer_t buf, uint64_t off, uint64_t bytes,
                       spyre_stream_t stream) {
    for (uint64_t c = 0; c < bytes; c += t.max_chunk_bytes())
        t.recv(peer, buf, off + c, std::min(t.max_chunk_bytes(), bytes - c), stream);
}

}  // namespace spyre::comm
