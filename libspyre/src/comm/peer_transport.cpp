// The peer-to-peer transport (peer_transport.hpp).
#include "comm/peer_transport.hpp"

#include <unistd.h>

#include <utility>

#include "error.hpp"

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

spyre_buffer_t as_buffer(uint64_t v) { return reinterpret_cast<spyre_buffer_t>(v); }

// The device handle rank `r` joined with, or null if that rank is not in this process (its
// handle would mean nothing here) or its card has no peer-to-peer DMA.
spyre_device_t device_of_rank(Segment& seg, int r) {
    RankState& st = seg.header().ranks[r];
    if (st.pid.load() != getpid()) return nullptr;
    return reinterpret_cast<spyre_device_t>(st.device);
}

}  // namespace

std::unique_ptr<PeerTransport> PeerTransport::try_create(std::unique_ptr<Segment>& seg,
                                                         spyre_device_t device, bool host_only,
                                                         bool require_p2p) {
    Segment& s = *seg;
    RankState& me = s.header().ranks[s.rank()];
    int can_all = 0;
    spyre_device_info mine{};
    check_call(spyre_device_get_info(device, &mine));
    const bool candidate = !host_only && (mine.caps & SPYRE_DEVICE_CAP_P2P);
    // 1: every candidate rank publishes its device; 2: each says whether it reaches all others.
    me.device = candidate ? reinterpret_cast<uint64_t>(device) : 0;
    s.barrier();
    if (candidate) {
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
    s.barrier();  // after it nobody reads another rank's device handle for the decision
    bool all = true;
    for (int r = 0; r < s.nranks(); ++r) all = all && s.header().ranks[r].p2p_ok;
    if (!all) {
        if (require_p2p)
            spyre::fail(SPYRE_ERROR_NOT_SUPPORTED,
                        "SPYRE_COMM_TRANSPORT=p2p, but the ranks' cards cannot all reach each "
                        "other card to card (every rank in one process, cards with "
                        "SPYRE_DEVICE_CAP_P2P)");
        return nullptr;
    }
    return std::unique_ptr<PeerTransport>(new PeerTransport(std::move(seg)));
}

PeerTransport::PeerTransport(std::unique_ptr<Segment> seg)
    : seg_(std::move(seg)), sent_(seg_->nranks(), 0), received_(seg_->nranks(), 0) {}

PeerTransport::~PeerTransport() {
    // this rank owns the inboxes on its card (every sender has finished pushing into them once
    // this rank took its messages)
    for (int r = 0; r < seg_->nranks(); ++r)
        spyre_free(as_buffer(std::exchange(seg_->header().inbox[r][seg_->rank()], 0)));
}

spyre_buffer_t PeerTransport::inbox_at(int peer) {
    uint64_t& slot = seg_->header().inbox[seg_->rank()][peer];
    if (!slot) {
        spyre_buffer_t b = nullptr;
        check_call(spyre_malloc(device_of_rank(*seg_, peer), seg_->slot_bytes(), &b));
        slot = reinterpret_cast<uint64_t>(b);
    }
    return as_buffer(slot);
}

void PeerTransport::send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                         spyre_stream_t stream) {
    require(size <= seg_->slot_bytes(), "p2p send larger than an inbox");
    spyre_buffer_t to = inbox_at(peer);
    // the previous message (in this inbox or another) must have been taken
    RankState& me = seg_->begin_post(peer, sent_[peer] + 1, size);
    // this card's engine pushes into the peer's inbox, after the earlier work of `stream`
    if (stream) {
        check_call(spyre_memcpy_peer_async(to, 0, src, offset, size, stream));
        check_call(spyre_stream_synchronize(stream));
    } else {
        check_call(spyre_memcpy_peer(to, 0, src, offset, size));
    }
    ++sent_[peer];
    seg_->post(me);
}

void PeerTransport::recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                         spyre_stream_t stream) {
    const uint32_t want = received_[peer] + 1;
    RankState& from = seg_->await_post(peer, want, size);
    // out of the pair's inbox on this card; free again once that copy has finished
    spyre_buffer_t inbox = as_buffer(seg_->header().inbox[peer][seg_->rank()]);
    if (stream) {
        check_call(spyre_memcpy_dtod_async(dst, offset, inbox, 0, size, stream));
        check_call(spyre_stream_synchronize(stream));
    } else {
        check_call(spyre_memcpy_dtod(dst, offset, inbox, 0, size));
    }
    received_[peer] = want;
    seg_->consumed(from);
}

void PeerTransport::abort(const std::string& reason) {
    seg_->fail(SPYRE_ERROR_DEVICE_LOST, reason);
}

}  // namespace spyre::comm
