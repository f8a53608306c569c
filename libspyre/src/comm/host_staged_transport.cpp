// The host-staged transport (host_staged_transport.hpp).
#include "comm/host_staged_transport.hpp"

#include "comm/ring.hpp"
#include "error.hpp"

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

}  // namespace

HostStagedTransport::HostStagedTransport(std::unique_ptr<Segment> seg)
    : seg_(std::move(seg)), sent_(seg_->nranks(), 0), received_(seg_->nranks(), 0) {}

void HostStagedTransport::send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                               spyre_stream_t stream, uint64_t /*after*/) {
    require(size <= seg_->slot_bytes(), "host-staged send larger than a slot");
    const Segment::Message m = seg_->begin_post(peer, sent_[peer] + 1, size);
    // device -> host; returns once the data is in the slot (ordered after stream's work)
    check_call(
        spyre_memcpy_dtoh_async(seg_->slot(seg_->rank(), m.slot), src, offset, size, stream));
    ++sent_[peer];
    if (!seg_->post_unless_failed(m, stream, src, peer)) seg_->check();
}

void HostStagedTransport::recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                               spyre_stream_t stream) {
    const uint32_t want = received_[peer] + 1;
    const Segment::Message m = seg_->await_post(peer, want, size);
    // host -> device; a pageable source is taken before the call returns, so the slot is free
    check_call(spyre_memcpy_htod_async(dst, offset, seg_->slot(peer, m.slot), size, stream));
    received_[peer] = want;
    seg_->consumed(m);
}

void HostStagedTransport::recv_reduce(int peer, spyre_buffer_t acc, uint64_t acc_offset,
                                      uint64_t count, spyre_dtype dtype, spyre_reduce_op op,
                                      spyre_buffer_t scratch, spyre_stream_t stream) {
    recv(peer, scratch, 0, count * dtype_bytes(dtype), stream);
    reduce_on_card(stream, acc, acc_offset, scratch, 0, count, dtype, op);
}

void HostStagedTransport::barrier() { seg_->barrier(); }

void HostStagedTransport::abort(const std::string& reason) {
    seg_->fail(SPYRE_ERROR_DEVICE_LOST, reason);
}

}  // namespace spyre::comm
