// The host-staged transport (host_staged_transport.hpp).
#include "comm/host_staged_transport.hpp"

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
                               spyre_stream_t stream) {
    require(size <= seg_->slot_bytes(), "host-staged send larger than a slot");
    RankState& me = seg_->begin_post(peer, sent_[peer] + 1, size);
    // device -> host; returns once the data is in the slot (ordered after stream's work)
    check_call(spyre_memcpy_dtoh_async(seg_->slot(seg_->rank()), src, offset, size, stream));
    ++sent_[peer];
    seg_->post(me);
}

void HostStagedTransport::recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                               spyre_stream_t stream) {
    const uint32_t want = received_[peer] + 1;
    RankState& from = seg_->await_post(peer, want, size);
    // host -> device; a pageable source is taken before the call returns, so the slot is free
    check_call(spyre_memcpy_htod_async(dst, offset, seg_->slot(peer), size, stream));
    received_[peer] = want;
    seg_->consumed(from);
}

void HostStagedTransport::barrier() { seg_->barrier(); }

void HostStagedTransport::abort(const std::string& reason) {
    seg_->fail(SPYRE_ERROR_DEVICE_LOST, reason);
}

}  // namespace spyre::comm
