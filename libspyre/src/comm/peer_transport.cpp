// The peer-to-peer transport (peer_transport.hpp).
#include "comm/peer_transport.hpp"

#include <unistd.h>


#include "error.hpp"

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

spyre_buffer_t as_buffer(uint64_t v) { return reinterpret_cast<spyre_buffer_t>(v); }

// The device handle rank `r` joined with (its inbox's), or null if that rank is not in this
// process (its handle would mean nothing here).
spyre_device_t device_of_rank(Segment& seg, int r) {
    RankState& st = seg.header().ranks[r];
    if (st.pid.load() != getpid() || !st.inbox) return nullptr;
    spyre_device_t d = nullptr;
    return spyre_buffer_get_device(as_buffer(st.inbox), &d) == SPYRE_SUCCESS ? d : nullptr;
}

}  // namespace

std::unique_ptr<PeerTransport> PeerTransport::try_create(std::unique_ptr<Segment>& seg,
                                                         spyre_device_t device, bool host_only,
                                                         bool require_p2p) {
    Segment& s = *seg;
    RankState& me = s.header().ranks[s.rank()];
    spyre_buffer_t inbox = nullptr;
    int can_all = 0;
    spyre_device_info mine{};
    check_call(spyre_device_get_info(device, &mine));
    if (!host_only && (mine.caps & SPYRE_DEVICE_CAP_P2P))
        check_call(spyre_malloc(device, s.slot_bytes(), &inbox));
    // 1: every rank publishes its inbox; 2: each says whether it reaches all the others.
    me.inbox = reinterpret_cast<uint64_t>(inbox);
    s.barrier();
    if (inbox) {
        can_all = 1;
        for (int r = 0; r < s.nranks() && can_all; ++r) {
            if (r == s.rank()) continue;
            spyre_device_t d = device_of_rank(s, r);
            int can = 0;
            spyre_device_info other{};
            if (d && spyre_device_get_info(d, &other) == SPYRE_SUCCESS &&
                other.index == mine.index && other.backend == mine.backend)
                continue;  // ranks on one card copy within it
            if (!d || spyre_device_can_access_peer(device, d, &can) != SPYRE_SUCCESS || !can ||
                spyre_device_enable_peer_access(device, d) != SPYRE_SUCCESS)
                can_all = 0;
        }
    }
    me.p2p_ok = static_cast<uint32_t>(can_all);
    s.barrier();  // after it nobody reads another rank's inbox handle for the decision
    bool all = true;
    for (int r = 0; r < s.nranks(); ++r) all = all && s.header().ranks[r].p2p_ok;
    if (!all) {
        spyre_free(inbox);
        if (require_p2p)
            spyre::fail(SPYRE_ERROR_NOT_SUPPORTED,
                        "SPYRE_COMM_TRANSPORT=p2p, but the ranks' cards cannot all reach each "
                        "other card to card (every rank in one process, cards with "
                        "SPYRE_DEVICE_CAP_P2P)");
        return nullptr;
    }
    return std::unique_ptr<PeerTransport>(new PeerTransport(std::move(seg), inbox));
}

PeerTransport::PeerTransport(std::unique_ptr<Segment> seg, spyre_buffer_t inbox)
    : seg_(std::move(seg)), inbox_(inbox), received_(seg_->nranks(), 0) {}

PeerTransport::~PeerTransport() { spyre_free(inbox_); }

void PeerTransport::send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                         spyre_stream_t stream) {
    require(size <= seg_->slot_bytes(), "p2p send larger than an inbox");
    if (send_peer_ < 0) send_peer_ = peer;
    require(peer == send_peer_, "p2p transport: each rank sends to one peer");
    RankState& me = seg_->header().ranks[seg_->rank()];
    const uint32_t n = me.posted.load();
    // the receiver must have taken the previous message out of its inbox
    seg_->wait(
        me.consumed, [&] { return me.consumed.load(std::memory_order_acquire) == n; },
        "to take the previous message", peer);
    // this card's engine pushes into the peer's inbox, after the earlier work of `stream`
    spyre_buffer_t to = as_buffer(seg_->header().ranks[peer].inbox);
    if (stream) {
        check_call(spyre_memcpy_peer_async(to, 0, src, offset, size, stream));
        check_call(spyre_stream_synchronize(stream));
    } else {
        check_call(spyre_memcpy_peer(to, 0, src, offset, size));
    }
    me.bytes = size;
    me.posted.store(n + 1, std::memory_order_release);
    Segment::wake(me.posted);
}

void PeerTransport::recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                         spyre_stream_t stream) {
    if (recv_peer_ < 0) recv_peer_ = peer;
    require(peer == recv_peer_, "p2p transport: each rank receives from one peer");
    const uint32_t want = received_[peer] + 1;
    RankState& from = seg_->await_post(peer, want, size);
    // out of the inbox on this card; the inbox is free again once that copy has finished
    if (stream) {
        check_call(spyre_memcpy_dtod_async(dst, offset, inbox_, 0, size, stream));
        check_call(spyre_stream_synchronize(stream));
    } else {
        check_call(spyre_memcpy_dtod(dst, offset, inbox_, 0, size));
    }
    received_[peer] = want;
    seg_->consumed(from, want);
}

void PeerTransport::abort(const std::string& reason) {
    seg_->fail(SPYRE_ERROR_DEVICE_LOST, reason);
}

}  // namespace spyre::comm
