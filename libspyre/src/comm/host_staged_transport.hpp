// The host-staged transport: a send copies the device range into the rank's outbox slot in the
// shared segment (device -> host), the receiver copies it from there onto its card
// (host -> device). Each rank's outbox is a ring of slots (SPYRE_COMM_SLOTS messages in flight,
// to any peers; the messages of a pair are taken in the order they were sent).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/shm_segment.hpp"
#include "comm/transport.hpp"

namespace spyre::comm {

class HostStagedTransport final : public Transport {
  public:
    explicit HostStagedTransport(std::unique_ptr<Segment> seg);
    const char* name() const override { return "host-staged"; }
    uint64_t max_chunk_bytes() const override { return seg_->slot_bytes(); }
    void send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size, spyre_stream_t stream,
              uint64_t after = 0) override;
    void recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
              spyre_stream_t stream) override;
    void recv_reduce(int peer, spyre_buffer_t acc, uint64_t acc_offset, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t scratch,
                     spyre_stream_t stream) override;
    void barrier() override;
    void abort(const std::string& reason) override;
    void check() override { seg_->check(); }
    void set_timeout_ms(uint64_t ms) override { seg_->set_timeout_ms(ms); }

  private:
    std::unique_ptr<Segment> seg_;
    std::vector<uint32_t> sent_;      // messages sent to each peer
    std::vector<uint32_t> received_;  // messages taken from each peer's outbox
};

}  // namespace spyre::comm
