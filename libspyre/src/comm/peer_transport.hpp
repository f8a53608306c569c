// The peer-to-peer transport (hw 1.6): for ranks whose cards reach each other card to card,
// either all threads of this process (spyre_device_can_access_peer) or all in separate
// processes on distinct cards of spyre.ko. Every (sender, receiver) pair has an inbox on the
// receiver's card, one chunk for each of the sender's outbox slots (shm_segment.hpp): a send
// pushes the range into the slot's chunk with a peer copy on the sender's card (posted writes
// over the peer link) and posts it from a host function of the stream once the push has
// landed, without waiting for it; the receiver reduces straight out of the inbox
// (recv_reduce) or copies it into place (recv) on its card, and frees the slot from a host
// function once that work has run. So up to `slots` messages of a sender are in flight, and a
// send waits only for a free slot. On the NULL stream both sides wait for their copies instead.
//
// With device-side semaphores on every rank's card (SPYRE_DEVICE_CAP_SEMAPHORE, hw 1.8), a
// collective's dependencies between the ranks' streams are queued on the cards instead: the
// push waits on its card for the receiver to have freed the inbox chunk, then signals "posted"
// into the receiver's card; the receiver's stream waits on its card for that, reduces, and
// signals "freed" back; the host posts and takes the shared-memory messages as it queues
// (flow control and checks of the hosts only), so it queues a whole collective without
// waiting for a card, and each card runs a job as soon as its inputs are there
// (Documentation/libspyre.md "Device-side waits"). Failures are settled at the end of each
// collective: every rank waits for its streams, then for every other rank to report none.
//
// Threads: the sender makes the inbox on its first message to that peer, through the
// receiver's device handle (the segment's inbox table), and the receiver frees it. Processes:
// at init each rank makes an inbox for every other rank on its card, exports it as a dma-buf
// and hands the fd over (fd_exchange.hpp); the sender imports it as a PEER buffer of its card.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/shm_segment.hpp"
#include "comm/transport.hpp"

namespace spyre {
class Buffer;
}

namespace spyre::comm {

class PeerTransport final : public Transport {
  public:
    // Collective (every rank calls it with its joined segment): the peer transport if the
    // ranks' layout allows it (above) and none asked for host staging; else null, and `seg`
    // stays with the caller. `require`: fail instead of returning null
    // (SPYRE_COMM_TRANSPORT=p2p).
    static std::unique_ptr<PeerTransport> try_create(std::unique_ptr<Segment>& seg,
                                                     spyre_device_t device, bool host_only,
                                                     bool require);
    ~PeerTransport() override;
    const char* name() const override { return "p2p"; }
    bool device_waits() const override { return sems_; }
    uint64_t max_chunk_bytes() const override { return seg_->slot_bytes(); }
    void send(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size, spyre_stream_t stream,
              uint64_t after = 0) override;
    void recv(int peer, spyre_buffer_t dst, uint64_t offset, uint64_t size,
              spyre_stream_t stream) override;
    void recv_reduce(int peer, spyre_buffer_t acc, uint64_t acc_offset, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t scratch,
                     spyre_stream_t stream) override;
    // Threads of one process: buffer handles mean the same to every rank, so an all-gather
    // pushes straight into the successor's destination.
    bool direct() const override { return !shared_; }
    void open_window(spyre_buffer_t buf, uint64_t base, spyre_stream_t stream) override;
    void send_into(int peer, spyre_buffer_t src, uint64_t offset, uint64_t size,
                   uint64_t window_offset, spyre_stream_t stream, uint64_t after = 0) override;
    uint64_t mark(spyre_stream_t stream) override;
    void recv_in_place(int peer, uint64_t size, spyre_stream_t stream) override;
    void join(spyre_stream_t stream) override;
    void begin(bool collective, spyre_stream_t stream) override;
    void submit() override;
    void settle() override;
    void barrier() override { seg_->barrier(); }
    void abort(const std::string& reason) override;
    void check() override { seg_->check(); }
    void set_timeout_ms(uint64_t ms) override;

    // Ranks in separate processes: the inboxes on this card (by sender) and this rank's
    // inboxes on the other cards (imported, by receiver, with their offsets in the import);
    // slots x chunk bytes each.
    struct Shared {
        std::vector<spyre_buffer_t> local;
        std::vector<std::shared_ptr<Buffer>> remote;
        std::vector<uint64_t> remote_offset;
        ~Shared();
    };

  private:
    PeerTransport(std::unique_ptr<Segment> seg, std::unique_ptr<Shared> shared,
                  spyre_device_t device, bool overlap);
    // Where a push after the caller's earlier work goes: the caller's stream, or (overlap_)
    // this rank's push stream, made to wait for the caller's work so far by an event.
    spyre_stream_t push_stream(spyre_stream_t caller, uint64_t after = 0);
    // Makes push_ the first of this rank's push streams (made on first use, by preference)
    // that does not share a queue of the card with `caller` (kernel backend: a ring), else
    // the first; whether it found one. Two streams of one ring run their jobs in order: a
    // device-side wait of one for the other would wait forever.
    bool select_push_stream(spyre_stream_t caller);
    // This rank's inbox on `peer`'s card, threads of one process (made on first use).
    spyre_buffer_t inbox_at(int peer);
    // Waits for `peer`'s next message of `size` bytes; its inbox and the offset of its chunk.
    Segment::Message take(int peer, uint64_t size, spyre_buffer_t* inbox, uint64_t* at);

    // Device-side waits: the semaphores rank `writer` signals rank `owner` with, in a block
    // on owner's card (threads: owner's control buffer; processes: the tail of writer's inbox
    // on owner's card): per outbox slot, the number of writer's last message to owner in it
    // (posted) and of owner's last message to writer in it that writer's card is done with
    // (freed); and the all-gather windows writer opened. One semaphore per slot, not per pair:
    // a slot's next message waits for the previous one's "freed", so no semaphore is written
    // again before its waiter has seen it, and the waiter's modeled time joins the cycle of
    // the very signal it waited for (a later signal's cycle would hold it back).
    static constexpr uint64_t kSem = SPYRE_SEMAPHORE_BYTES;
    enum Sem : uint64_t { kPosted = 0, kFreed = kMaxSlots * kSem, kOpened = 2 * kMaxSlots * kSem };
    static constexpr uint64_t kBlockBytes = 512;
    // Local semaphores of this rank's two streams (own_): marks of the caller's work the
    // pushes follow, and the pushes the caller's stream joins; value v in entry v mod the
    // ring's size, so a wait sees its own signal's cycle unless the writer is that far ahead.
    static constexpr uint64_t kReadyRing = 128, kPushedRing = 8;
    static constexpr uint64_t kOwnBytes = (kReadyRing + kPushedRing) * kSem;
    enum Local { kReady, kPushed };
    // On `stream`: sets this rank's semaphore `which` (of outbox slot `slot`) on `owner`'s
    // card to `value`.
    void signal(int owner, Sem which, int slot, uint64_t value, spyre_stream_t stream);
    // Later work of `stream` waits for `writer`'s semaphore `which` (of `slot`) on this card.
    void await(int writer, Sem which, int slot, uint64_t value, spyre_stream_t stream);
    void signal_local(Local which, uint64_t value, spyre_stream_t stream);
    void await_local(Local which, uint64_t value, spyre_stream_t stream);
    static uint64_t local_offset(Local which, uint64_t value);
    bool sems_ = false;      // every rank's card has device-side semaphores
    bool sem_call_ = false;  // this call queues its waits on the cards (a collective)
    // The streams whose work this call holds in a submission batch (spyre_stream_begin_batch),
    // so that each goes to its card as few jobs rung at once, not one job per operation: a
    // card places a job after all it had completed when its doorbell rang
    // (Documentation/libspyre.md "Device-side waits").
    std::vector<spyre_stream_t> batched_;
    uint32_t wait_us_ = 0;          // each device-side wait's bound
    spyre_buffer_t ctl_ = nullptr;  // threads: the blocks the others signal this rank in
    std::vector<std::shared_ptr<const void>> peer_ctl_;  // threads: the others' (hold_buffer)
    spyre_buffer_t own_ = nullptr;                       // this rank's local semaphores
    uint64_t ready_seq_ = 0, pushed_seq_ = 0;
    // Per peer and inbox chunk: the number of this rank's last message to the peer in it.
    std::vector<std::vector<uint32_t>> chunk_seq_;
    // Shared with the host functions that post and free slots once the stream reaches them.
    std::shared_ptr<Segment> seg_;
    std::unique_ptr<Shared> shared_;  // null: threads of one process
    std::vector<uint32_t> sent_;      // messages sent to each peer
    std::vector<uint32_t> received_;  // messages taken from each peer
    uint32_t windows_ = 0;            // windows this rank opened
    // Pushes on a stream of their own (simulator, threads: Documentation/libspyre.md
    // "Pipelined p2p"), so the card's DMA engine pushes chunk k + 1 while its cores reduce
    // chunk k; the caller's stream joins it (join) before it writes what a push may still read
    // and at the end of every collective.
    spyre_device_t device_;
    bool overlap_;
    spyre_stream_t push_ = nullptr;        // this call's (select_push_stream)
    std::vector<spyre_stream_t> pushers_;  // made so far, by preference
    std::vector<int> push_priorities_;     // the preference (set on first use)
    spyre_event_t ready_ = nullptr;        // the caller's work a push follows
    spyre_event_t pushed_ = nullptr;       // the pushes the caller waits for
    bool pushing_ = false;                 // pushes queued since the last join
};

}  // namespace spyre::comm
