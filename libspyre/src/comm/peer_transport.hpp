// The peer-to-peer transport (hw 1.6): for ranks whose cards are all in this process and reach
// each other (spyre_device_can_access_peer). Every (sender, receiver) pair that talks has an
// inbox, a device buffer of one chunk on the receiver's card, made by the sender on its first
// message to that peer; a send pushes the range into it with a peer copy on the sender's card
// (posted writes over the peer link), the receiver copies it from there on its card. The
// shared segment (shm_segment.hpp) carries the counters as for the host-staged transport: one
// message in flight per sender, so one sender never has two messages in one inbox.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/shm_segment.hpp"
#include "comm/transport.hpp"

namespace spyre::comm {

class PeerTransport final : public Transport {
  public:
    // Collective (every rank calls it with its joined segment): the peer transport if every
    // rank is in this process, its card reaches every other rank's card (or is the same card)
    // and none asked for host staging; else null, and `seg` stays with the caller.
    // `require`: fail instead of returning null (SPYRE_COMM_TRANSPORT=p2p).
    static std::unique_ptr<PeerTransport> try_create(std::unique_ptr<Segment>& seg,
                                                     spyre_device_t device, bool host_only,
                                                     bool require);
    ~PeerTransport() override;
    const char* name() const override { return "p2p"; }
    uint64_t max_chunk_bytes() const override { return seg_->slot_bytes(); }
    void send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
              spyre_stream_t stream) override;
    void recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
              spyre_stream_t stream) override;
    void barrier() override { seg_->barrier(); }
    void abort(const std::string& reason) override;
    void check() override { seg_->check(); }
    void set_timeout_ms(uint64_t ms) override { seg_->set_timeout_ms(ms); }

  private:
    explicit PeerTransport(std::unique_ptr<Segment> seg);
    // This rank's inbox on `peer`'s card (made on first use).
    spyre_buffer_t inbox_at(int peer);
    std::unique_ptr<Segment> seg_;
    std::vector<uint32_t> sent_;      // messages sent to each peer
    std::vector<uint32_t> received_;  // messages taken from each peer
};

}  // namespace spyre::comm
