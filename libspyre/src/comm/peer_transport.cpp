// The peer-to-peer transport (peer_transport.hpp).
#include "comm/peer_transport.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <format>
#include <optional>
#include <utility>

#include "comm/fd_exchange.hpp"
#include "comm/ring.hpp"
#include "error.hpp"
#include "peer_fd.hpp"
#include "spyre_accel.h"  // caps share DRM_SPYRE_CAP_* bit positions

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

spyre_buffer_t as_buffer(uint64_t v) { return reinterpret_cast<spyre_buffer_t>(v); }

// Processes: each inbox ends with the semaphore block its sender signals the inbox's card in
// (PeerTransport::Sem), after the slots' chunks.
constexpr uint64_t kInboxTail = 512;  // PeerTransport::kBlockBytes

uint64_t chunks_bytes(Segment& s) { return s.slots() * s.slot_bytes(); }

// A slot's post (the push has landed) or release (the receiver's card is done with the inbox
// chunk), run by a host function once `stream` reaches it, so neither side waits for its card.
struct SlotEvent {
    std::shared_ptr<Segment> seg;
    Segment::Message m;
    bool post;  // else consumed
    spyre_stream_t stream;
    spyre_buffer_t src;  // post: the sent data (its card's stream did the work)
    int peer;
    spyre_stream_t origin;  // post from the push stream: the caller's, whose work it follows
};

void run_slot_event(void* p) {
    const std::unique_ptr<SlotEvent> e(static_cast<SlotEvent*>(p));
    if (!e->post) return e->seg->consumed(e->m);
    // host functions run after failed work too: a failed push or an earlier failed reduction
    // means the peer would take data that is not the sum, so fail the communicator instead
    e->seg->post_unless_failed(e->m, e->stream, e->src, e->peer, e->origin);
}

// A window's publication (open_window), once the stream's earlier work on it is done.
struct WindowEvent {
    std::shared_ptr<Segment> seg;
    uint64_t buf, base;
    uint32_t seq;
};

void publish_window(void* p) {
    const std::unique_ptr<WindowEvent> e(static_cast<WindowEvent*>(p));
    RankState& me = e->seg->header().ranks[e->seg->rank()];
    me.window_buf = e->buf;
    me.window_base = e->base;
    me.window_seq.store(e->seq, std::memory_order_release);
    Segment::wake(me.window_seq);
}

void after_stream(spyre_stream_t stream, const std::shared_ptr<Segment>& seg,
                  const Segment::Message& m, bool post, spyre_buffer_t src = nullptr, int peer = -1,
                  spyre_stream_t origin = nullptr) {
    auto e = std::make_unique<SlotEvent>(
        SlotEvent{seg, m, post, stream, src, peer, origin != stream ? origin : nullptr});
    check_call(spyre_launch_host_func(stream, run_slot_event, e.get()));
    e.release();  // run_slot_event owns it
}

// The device handle rank `r` joined with, or null if that rank is not in this process (its
// handle would mean nothing here) or its card has no peer-to-peer DMA.
spyre_device_t device_of_rank(Segment& seg, int r) {
    RankState& st = seg.header().ranks[r];
    if (st.pid.load() != getpid()) return nullptr;
    return reinterpret_cast<spyre_device_t>(st.device);
}

enum class Layout { Threads, Processes, None };

// From what every rank published: all ranks threads of this process, all in separate
// processes on distinct p2p cards of spyre.ko, or neither (host staging). The same answer on
// every rank.
Layout layout_of(Segment& seg) {
    const SegmentHeader& h = seg.header();
    const int n = seg.nranks();
    bool one_process = true, apart = true;
    for (int r = 0; r < n; ++r) {
        const RankState& a = h.ranks[r];
        one_process = one_process && a.pid.load() == h.ranks[0].pid.load();
        apart = apart && a.card_kernel && a.card_p2p;
        for (int q = 0; q < r; ++q)
            apart = apart && a.pid.load() != h.ranks[q].pid.load() &&
                    a.card_index != h.ranks[q].card_index;
    }
    return one_process ? Layout::Threads : apart ? Layout::Processes : Layout::None;
}

// Threads: whether this rank's card reaches every other rank's card.
bool threads_reach_all(Segment& s, spyre_device_t device, const spyre_device_info& mine) {
    if (!s.header().ranks[s.rank()].card_p2p) return false;
    for (int r = 0; r < s.nranks(); ++r) {
        if (r == s.rank()) continue;
        spyre_device_t d = device_of_rank(s, r);
        int can = 0;
        spyre_device_info other{};
        if (d && spyre_device_get_info(d, &other) == SPYRE_SUCCESS && other.index == mine.index &&
            other.backend == mine.backend)
            continue;  // ranks on one card copy within it
        if (!d || spyre_device_can_access_peer(device, d, &can) != SPYRE_SUCCESS || !can ||
            spyre_device_enable_peer_access(device, d) != SPYRE_SUCCESS)
            return false;
    }
    return true;
}

// Processes: an inbox on this card for every other rank, exported and handed over; the
// others' inboxes for this rank imported. Whether all of it worked (each rank takes part in
// the exchange even when its own part failed, so that nobody waits for it).
bool share_inboxes(Segment& s, FdExchange& ex, spyre_device_t device, PeerTransport::Shared& sh) {
    const int n = s.nranks(), me = s.rank();
    bool ok = true;
    std::vector<int> peers;
    std::vector<FdExchange::Item> give(n);
    sh.local.assign(n, nullptr);
    sh.remote.assign(n, nullptr);
    sh.remote_offset.assign(n, 0);
    for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        peers.push_back(r);
        try {
            check_call(spyre_malloc(device, chunks_bytes(s) + kInboxTail, &sh.local[r]));
            check_call(spyre_memset(sh.local[r], chunks_bytes(s), 0, kInboxTail));
            const ExportedBuffer e = export_buffer_fd(sh.local[r]);
            give[r].fd.reset(e.fd);
            give[r].value = e.offset;
        } catch (const Error&) {
            ok = false;  // this rank gives nothing; the peer sees it and declines too
        }
    }
    std::vector<FdExchange::Item> got = ex.exchange(peers, give);
    for (int r : peers) {
        if (!got[r].fd) {
            ok = false;
            continue;
        }
        try {
            sh.remote[r] = import_buffer_fd(device, got[r].fd.get(),
                                            got[r].value + chunks_bytes(s) + kInboxTail,
                                            std::format("rank {}", r));
            sh.remote_offset[r] = got[r].value;
        } catch (const Error&) {
            ok = false;
        }
    }
    return ok;  // the received fds close here: the imports hold the dma-bufs
}

}  // namespace

PeerTransport::Shared::~Shared() {
    for (spyre_buffer_t b : local) spyre_free(b);
}

std::unique_ptr<PeerTransport> PeerTransport::try_create(std::unique_ptr<Segment>& seg,
                                                         spyre_device_t device, bool host_only,
                                                         bool require_p2p) {
    Segment& s = *seg;
    RankState& me = s.header().ranks[s.rank()];
    spyre_device_info mine{};
    check_call(spyre_device_get_info(device, &mine));
    bool candidate = !host_only && (mine.caps & SPYRE_DEVICE_CAP_P2P);
    // ranks in other processes may hand this one their inboxes: listen before the barrier
    std::unique_ptr<FdExchange> ex;
    if (candidate && mine.backend == SPYRE_BACKEND_KERNEL) {
        try {
            ex = std::make_unique<FdExchange>(s);
        } catch (const Error&) {
            candidate = false;
        }
    }
    // 1: every rank publishes its card (and device handle, for ranks of this process)
    me.device = candidate ? reinterpret_cast<uint64_t>(device) : 0;
    me.card_index = mine.index;
    me.card_kernel = mine.backend == SPYRE_BACKEND_KERNEL;
    me.card_p2p = candidate;
    // SPYRE_COMM_DEVICE_WAITS unset or 1: the waits between the ranks on the cards where they
    // can (Documentation/libspyre.md "Device-side waits"); 0: the host-driven protocol. Every
    // rank must see the same setting, so each publishes what it may use
    const char* waits = std::getenv("SPYRE_COMM_DEVICE_WAITS");
    const std::string w = waits ? waits : "";
    require(w.empty() || w == "0" || w == "1", "SPYRE_COMM_DEVICE_WAITS=\"{}\" is not 0 or 1", w);
    me.card_sem = candidate && w != "0" && (mine.caps & SPYRE_DEVICE_CAP_SEMAPHORE);
    s.barrier();
    // 2: each says whether its part worked
    const Layout layout = layout_of(s);
    auto shared = std::make_unique<Shared>();
    bool ok = false;
    if (layout == Layout::Threads) {
        ok = threads_reach_all(s, device, mine);
    } else if (layout == Layout::Processes) {
        try {
            ok = share_inboxes(s, *ex, device, *shared);
        } catch (const Error& e) {
            s.fail(e.status(),
                   std::format("rank {} handing over its p2p inboxes: {}", s.rank(), e.what()));
            throw;
        }
    }
    // the block the other ranks signal this one in, on its card (threads; processes have them
    // in the inboxes), published before the other ranks can use it
    // ... and only with every rank on a card of its own: a waiting command holds its ring, and
    // two ranks' streams on one card could share one (e.g. both push streams the high-priority
    // ring), one waiting for what the other has queued behind it
    bool sems = true;
    for (int r = 0; r < s.nranks(); ++r) {
        sems = sems && s.header().ranks[r].card_sem;
        for (int q = 0; q < r; ++q)
            sems = sems && s.header().ranks[r].card_index != s.header().ranks[q].card_index;
    }
    spyre_buffer_t ctl = nullptr;
    if (ok && sems && layout == Layout::Threads) {
        const uint64_t bytes = s.nranks() * kBlockBytes;
        if (spyre_malloc(device, bytes, &ctl) != SPYRE_SUCCESS ||
            spyre_memset(ctl, 0, 0, bytes) != SPYRE_SUCCESS)
            ok = false;
        me.ctl = reinterpret_cast<uint64_t>(ctl);
    }
    me.p2p_ok = ok;
    s.barrier();  // after it nobody reads another rank's device handle for the decision
    bool all = true;
    for (int r = 0; r < s.nranks(); ++r) all = all && s.header().ranks[r].p2p_ok;
    if (!all) {
        spyre_free(ctl);
        if (require_p2p)
            spyre::fail(SPYRE_ERROR_NOT_SUPPORTED,
                        "SPYRE_COMM_TRANSPORT=p2p, but the ranks' cards cannot all reach each "
                        "other card to card (every rank in one process, or every rank in its "
                        "own process on its own card of spyre.ko; cards with "
                        "SPYRE_DEVICE_CAP_P2P)");
        return nullptr;
    }
    if (layout == Layout::Threads) shared.reset();
    // pushes on a stream of their own only where the modeled time charges the overlap: the
    // simulator's card timeline, or a kernel-backend card that reports when each job ran (hw
    // 1.7); without that the kernel backend's modeled time is one stream's sum, so there they
    // stay on the caller's stream (Documentation/libspyre.md "Pipelined p2p")
    const bool overlap =
        (layout == Layout::Threads && mine.backend == SPYRE_BACKEND_SIM) ||
        (mine.backend == SPYRE_BACKEND_KERNEL && (mine.caps & SPYRE_DEVICE_CAP_JOB_CLOCK));
    auto t = std::unique_ptr<PeerTransport>(
        new PeerTransport(std::move(seg), std::move(shared), device, overlap));
    t->ctl_ = ctl;
    if (overlap && sems && layout == Layout::Threads) {
        // the others' control buffers, held: a rank that failed may free its own while
        // others still signal into it
        t->peer_ctl_.resize(s.nranks());
        for (int r = 0; r < s.nranks(); ++r)
            if (r != s.rank()) t->peer_ctl_[r] = hold_buffer(as_buffer(s.header().ranks[r].ctl));
        t->seg_->barrier();  // nobody frees its own before everyone holds it
    }
    if (overlap && sems) {
        check_call(spyre_malloc(device, kOwnBytes, &t->own_));
        check_call(spyre_memset(t->own_, 0, 0, kOwnBytes));
        t->sems_ = true;
    }
    return t;
}

PeerTransport::PeerTransport(std::unique_ptr<Segment> seg, std::unique_ptr<Shared> shared,
                             spyre_device_t device, bool overlap)
    : seg_(std::move(seg)),
      shared_(std::move(shared)),
      sent_(seg_->nranks(), 0),
      received_(seg_->nranks(), 0),
      device_(device),
      overlap_(overlap) {
    chunk_seq_.assign(seg_->nranks(), std::vector<uint32_t>(seg_->slots(), 0));
    set_timeout_ms(seg_->timeout_ms());
}

void PeerTransport::set_timeout_ms(uint64_t ms) {
    seg_->set_timeout_ms(ms);
    wait_us_ = static_cast<uint32_t>(std::min<uint64_t>(ms * 1000, SPYRE_SEMAPHORE_WAIT_MAX_US));
}

void PeerTransport::signal(int owner, Sem which, int slot, uint64_t value, spyre_stream_t stream) {
    const uint64_t at = which + slot * kSem;
    if (shared_) {
        signal_imported(device_, shared_->remote[owner],
                        shared_->remote_offset[owner] + chunks_bytes(*seg_) + at, value, stream);
        return;
    }
    // a NULL stream is this card's default stream (the public call's would be ctl's card's)
    write_value_held(device_, stream, peer_ctl_[owner], seg_->rank() * kBlockBytes + at, value);
}

void PeerTransport::await(int writer, Sem which, int slot, uint64_t value, spyre_stream_t stream) {
    const uint64_t at = which + slot * kSem;
    if (shared_)
        check_call(spyre_stream_wait_value(stream, shared_->local[writer], chunks_bytes(*seg_) + at,
                                           value, wait_us_));
    else
        check_call(
            spyre_stream_wait_value(stream, ctl_, writer * kBlockBytes + at, value, wait_us_));
}

uint64_t PeerTransport::local_offset(Local which, uint64_t value) {
    return which == kReady ? (value % kReadyRing) * kSem
                           : (kReadyRing + value % kPushedRing) * kSem;
}

void PeerTransport::signal_local(Local which, uint64_t value, spyre_stream_t stream) {
    check_call(spyre_stream_write_value(stream, own_, local_offset(which, value), value));
}

void PeerTransport::await_local(Local which, uint64_t value, spyre_stream_t stream) {
    check_call(spyre_stream_wait_value(stream, own_, local_offset(which, value), value, wait_us_));
}

void PeerTransport::begin(bool collective, spyre_stream_t stream) {
    sem_call_ = false;
    push_ = nullptr;  // chosen below, or by this call's first push
    if (!sems_ || !collective) return;
    // the caller's stream waits for the pushes, which wait for its marks: on one ring of the
    // card neither would run (torch's collectives run on a high-priority stream, where the
    // preferred push stream is too); where no push stream has a queue of its own, the hosts
    // wait instead
    if (!select_push_stream(stream)) return;
    sem_call_ = true;
    // A default stream cannot batch, and work on the NULL stream may wait for its card as it
    // is queued (its card waiting for pushes the peers would still hold back): then nothing
    // is held
    if (!stream) return;
    for (spyre_stream_t s : {stream, push_}) {
        check_call(spyre_stream_begin_batch(s));
        batched_.push_back(s);
    }
}

void PeerTransport::submit() {
    std::optional<Error> first;
    for (spyre_stream_t s : std::exchange(batched_, {}))
        if (const spyre_status st = spyre_stream_end_batch(s); st != SPYRE_SUCCESS && !first)
            first = Error(st, spyre_last_error());
    if (first) throw *first;
}

void PeerTransport::settle() {
    if (!sem_call_) return;
    sem_call_ = false;
    if (const spyre_status st = spyre_stream_synchronize(push_); st != SPYRE_SUCCESS) {
        const std::string why = spyre_last_error();
        seg_->fail(st, std::format("rank {}'s card work failed: {}", seg_->rank(), why));
        spyre::fail(st, why);
    }
    // a rank whose push or reduction failed has handed its peers data that is not the result:
    // nobody returns before everyone has seen its own part succeed (a failing rank fails the
    // communicator instead of arriving here)
    seg_->barrier();
}

PeerTransport::~PeerTransport() {
    // settled: nobody signals into ctl_ any more
    spyre_free(ctl_);
    spyre_free(own_);
    // the pushes have left (every collective ends with join); their stream's errors were
    // reported through the communicator
    for (spyre_stream_t s : pushers_) spyre_stream_destroy(s);
    if (ready_) spyre_event_destroy(ready_);
    if (pushed_) spyre_event_destroy(pushed_);
    // threads: this rank owns the inboxes on its card (every sender has finished pushing into
    // them once this rank took its messages); processes: shared_ frees them
    if (shared_) return;
    for (int r = 0; r < seg_->nranks(); ++r)
        spyre_free(as_buffer(std::exchange(seg_->header().inbox[r][seg_->rank()], 0)));
}

spyre_buffer_t PeerTransport::inbox_at(int peer) {
    uint64_t& slot = seg_->header().inbox[seg_->rank()][peer];
    if (!slot) {
        spyre_buffer_t b = nullptr;
        check_call(
            spyre_malloc(device_of_rank(*seg_, peer), seg_->slots() * seg_->slot_bytes(), &b));
        slot = reinterpret_cast<uint64_t>(b);
    }
    return as_buffer(slot);
}

uint64_t PeerTransport::mark(spyre_stream_t caller) {
    if (!sem_call_) return 0;
    signal_local(kReady, ++ready_seq_, caller);
    return ready_seq_;
}

bool PeerTransport::select_push_stream(spyre_stream_t caller) {
    if (push_priorities_.empty()) {
        check_call(spyre_event_create(device_, &ready_));
        check_call(spyre_event_create(device_, &pushed_));
        // kernel backend: normal streams share one ring, which runs its jobs in order; a
        // high-priority stream has a ring of its own, so the pushes run beside the caller's
        // reductions (Documentation/libspyre.md "Pipelined p2p"), unless the caller is on it
        spyre_device_info info{};
        check_call(spyre_device_get_info(device_, &info));
        push_priorities_ = {SPYRE_STREAM_PRIORITY_NORMAL};
        if (info.backend == SPYRE_BACKEND_KERNEL)
            push_priorities_ = {SPYRE_STREAM_PRIORITY_HIGH, SPYRE_STREAM_PRIORITY_NORMAL};
    }
    for (size_t i = 0; i < push_priorities_.size(); ++i) {
        if (i == pushers_.size()) {
            spyre_stream_t s = nullptr;
            check_call(spyre_stream_create(device_, push_priorities_[i], &s));
            pushers_.push_back(s);
        }
        if (!streams_share_queue(device_, caller, pushers_[i])) {
            push_ = pushers_[i];
            return true;
        }
    }
    push_ = pushers_.front();
    return false;
}

spyre_stream_t PeerTransport::push_stream(spyre_stream_t caller, uint64_t after) {
    if (!sem_call_ && (!caller || !overlap_)) return caller;
    if (!push_) select_push_stream(caller);  // once per call
    pushing_ = true;
    // the push reads what the caller's stream wrote before it (a reduced chunk)
    if (sem_call_) {
        await_local(kReady, after ? after : mark(caller), push_);
        return push_;
    }
    check_call(spyre_event_record(ready_, caller));
    check_call(spyre_stream_wait_event(push_, ready_));
    pushing_ = true;
    return push_;
}

void PeerTransport::join(spyre_stream_t caller) {
    if (!pushing_ || (!caller && !sem_call_)) return;
    if (sem_call_) {
        pushing_ = false;
        signal_local(kPushed, ++pushed_seq_, push_);
        return await_local(kPushed, pushed_seq_, caller);
    }
    check_call(spyre_event_record(pushed_, push_));
    check_call(spyre_stream_wait_event(caller, pushed_));
    pushing_ = false;
}

void PeerTransport::send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                         spyre_stream_t caller, uint64_t after) {
    const spyre_stream_t stream = push_stream(caller, after);
    require(size <= seg_->slot_bytes(), "p2p send larger than an inbox chunk");
    spyre_buffer_t to = shared_ ? nullptr : inbox_at(peer);
    // the message this slot held before must have been taken
    const Segment::Message m = seg_->begin_post(peer, sent_[peer] + 1, size);
    const uint64_t at = m.slot * seg_->slot_bytes();
    const uint32_t seq = ++sent_[peer];
    if (sem_call_) {
        // the chunk's previous message to the peer must have been freed by the peer's card
        uint32_t& last = chunk_seq_[peer][m.slot];
        if (last) await(peer, kFreed, m.slot, last, stream);
        last = seq;
    }
    // this card's engine pushes into the peer's inbox, after the earlier work of `stream`
    if (shared_) {
        copy_to_imported(shared_->remote[peer], shared_->remote_offset[peer] + at, src, offset,
                         size, stream, !stream);
    } else if (stream) {
        check_call(spyre_memcpy_peer_async(to, at, src, offset, size, stream));
    } else {
        check_call(spyre_memcpy_peer(to, at, src, offset, size));
    }
    if (sem_call_) {
        // the peer's card runs its side once the data has landed; its host queues it now
        signal(peer, kPosted, m.slot, seq, stream);
        seg_->post(m);
    } else if (stream)
        after_stream(stream, seg_, m, true, src, peer, caller);
    else if (!seg_->post_unless_failed(m, stream, src, peer))
        seg_->check();  // throws the failure just recorded
}

Segment::Message PeerTransport::take(int peer, uint64_t size, spyre_buffer_t* inbox, uint64_t* at) {
    const uint32_t want = received_[peer] + 1;
    const Segment::Message m = seg_->await_post(peer, want, size);
    received_[peer] = want;
    *inbox = shared_ ? shared_->local[peer] : as_buffer(seg_->header().inbox[peer][seg_->rank()]);
    *at = m.slot * seg_->slot_bytes();
    return m;
}

void PeerTransport::recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
                         spyre_stream_t stream) {
    join(stream);  // dst may be what a queued push still reads
    spyre_buffer_t inbox = nullptr;
    uint64_t at = 0;
    const Segment::Message m = take(peer, size, &inbox, &at);
    // out of the pair's inbox on this card; the slot is free once that copy has run
    if (sem_call_) {
        await(peer, kPosted, m.slot, received_[peer], stream);
        move_on_card(stream, dst, offset, inbox, at, size);
        signal(peer, kFreed, m.slot, received_[peer], stream);
        seg_->consumed(m);
    } else if (stream) {
        move_on_card(stream, dst, offset, inbox, at, size);
        after_stream(stream, seg_, m, false);
    } else {
        check_call(spyre_memcpy_dtod(dst, offset, inbox, at, size));
        seg_->consumed(m);
    }
}

void PeerTransport::recv_reduce(int peer, spyre_buffer_t acc, uint64_t acc_offset, uint64_t count,
                                spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t scratch,
                                spyre_stream_t stream) {
    if (!stream && !sem_call_) {  // no host functions on the NULL stream: as host staging
        recv(peer, scratch, 0, count * dtype_bytes(dtype), stream);
        return reduce_on_card(stream, acc, acc_offset, scratch, 0, count, dtype, op);
    }
    spyre_buffer_t inbox = nullptr;
    uint64_t at = 0;
    const Segment::Message m = take(peer, count * dtype_bytes(dtype), &inbox, &at);
    if (sem_call_) await(peer, kPosted, m.slot, received_[peer], stream);
    // the card's reduction reads the inbox chunk in place (no copy into scratch first)
    reduce_on_card(stream, acc, acc_offset, inbox, at, count, dtype, op);
    if (!sem_call_) return after_stream(stream, seg_, m, false);
    signal(peer, kFreed, m.slot, received_[peer], stream);
    seg_->consumed(m);
}

void PeerTransport::open_window(spyre_buffer_t buf, uint64_t base, spyre_stream_t stream) {
    // the window is written into once this rank's pushes out of it have left
    if (!sem_call_) join(stream);
    auto e = std::make_unique<WindowEvent>(
        WindowEvent{seg_, reinterpret_cast<uint64_t>(buf), base, ++windows_});
    if (sem_call_) {
        // the hosts learn where to push now; the pushes wait on their cards for the signal.
        // What a ring all-gather writes into buf is what this rank's pushes read before (each
        // after the reduction it pushes: Transport::mark), so the window opens once those
        // have left: signalled by the push stream, not after the reductions queued behind
        // them on the caller's
        publish_window(e.release());
        const spyre_stream_t by = pushing_ ? push_ : stream;
        for (int p = 0; p < seg_->nranks(); ++p)
            if (p != seg_->rank()) signal(p, kOpened, 0, windows_, by);
        return;
    }
    if (stream) {
        check_call(spyre_launch_host_func(stream, publish_window, e.get()));
        e.release();  // publish_window owns it
        return;
    }
    // the NULL stream takes no host functions: wait for the card's earlier work instead
    check_call(spyre_device_synchronize(device_of_rank(*seg_, seg_->rank())));
    publish_window(e.release());
}

void PeerTransport::send_into(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                              uint64_t window_offset, spyre_stream_t caller, uint64_t after) {
    // the peer's window of this all-gather (every rank opens one per all-gather, in order)
    RankState& to = seg_->header().ranks[peer];
    const uint32_t want = windows_;
    auto open = [&] { return to.window_seq.load(std::memory_order_acquire) == want; };
    if (!open()) seg_->wait(to.window_seq, open, "to open its all-gather destination", peer);
    spyre_buffer_t dst = as_buffer(to.window_buf);
    const uint64_t at = to.window_base + window_offset;
    // numbered like any message (the pair's order, flow control); no inbox chunk is used
    const Segment::Message m = seg_->begin_post(peer, sent_[peer] + 1, size);
    const uint32_t seq = ++sent_[peer];
    const spyre_stream_t stream = push_stream(caller, after);
    if (sem_call_) {
        // the slot's previous message to the peer was seen (its semaphores are free again)
        uint32_t& last = chunk_seq_[peer][m.slot];
        if (last) await(peer, kFreed, m.slot, last, stream);
        last = seq;
        await(peer, kOpened, 0, want, stream);
        check_call(spyre_memcpy_peer_async(dst, at, src, offset, size, stream));
        signal(peer, kPosted, m.slot, seq, stream);
        seg_->post(m);
    } else if (stream) {
        check_call(spyre_memcpy_peer_async(dst, at, src, offset, size, stream));
        after_stream(stream, seg_, m, true, src, peer, caller);
    } else {
        check_call(spyre_memcpy_peer(dst, at, src, offset, size));
        if (!seg_->post_unless_failed(m, stream, src, peer)) seg_->check();
    }
}

void PeerTransport::recv_in_place(int peer, uint64_t size, spyre_stream_t stream) {
    spyre_buffer_t inbox = nullptr;
    uint64_t at = 0;
    const Segment::Message m = take(peer, size, &inbox, &at);
    // landed (host-driven: the post came once it had); nothing to copy out
    if (sem_call_) {
        await(peer, kPosted, m.slot, received_[peer], stream);
        signal(peer, kFreed, m.slot, received_[peer], stream);
    }
    seg_->consumed(m);
}

void PeerTransport::abort(const std::string& reason) {
    seg_->fail(SPYRE_ERROR_DEVICE_LOST, reason);
}

}  // namespace spyre::comm
