// The POSIX shared-memory segment the ranks of a communicator share: a header (who joined,
// per-rank outbox rings of message slots, barrier, failure state) and, for the host-staged
// transport, the data of every rank's slots.
// Every wait is bounded (the communicator's timeout), watches the other ranks' pids and the
// failure state, and fails with a message that names the rank at fault.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "spyre/spyre.h"

namespace spyre::comm {

inline constexpr int kMaxRanks = 64;
inline constexpr int kMaxSlots = 8;  // messages in flight per sender (SPYRE_COMM_SLOTS)

// One slot of a sender's outbox ring. The sender's messages are numbered from 1 (all
// receivers together); message g goes in slot (g - 1) mod slots, once message g - slots (the
// slot's previous one, whoever received it) has been taken. While posted != consumed the slot
// holds message `posted`, for rank `to`, number `seq` among the sender's messages to `to`
// (from 1), `bytes` long.
struct Mailbox {
    std::atomic<uint32_t> posted;    // the message number in the slot (0: none yet)
    std::atomic<uint32_t> consumed;  // the number of the last message taken out of it
    std::atomic<int32_t> to;
    std::atomic<uint32_t> seq;
    uint64_t bytes;
};

struct RankState {
    std::atomic<int32_t> pid;     // 0 until the rank joined
    std::atomic<uint32_t> posts;  // messages this rank posted (receivers sleep on it)
    std::atomic<uint32_t> takes;  // ... its receivers took (this rank sleeps on it)
    uint32_t p2p_ok;              // peer transport: this rank's card reaches all the others
    // Peer transport (peer_transport.cpp), ranks of one process only: the rank's device handle
    // (a spyre_device_t; 0 if its card has no peer-to-peer DMA).
    uint64_t device;
    // The rank's card, for the p2p choice between processes: its index, whether it is a card
    // of spyre.ko (whose memory other processes can import) and whether it offers p2p
    // (SPYRE_DEVICE_CAP_P2P, not declined with SPYRE_COMM_TRANSPORT=host-staged).
    uint32_t card_index;
    uint32_t card_kernel;
    uint32_t card_p2p;
    // Peer transport: the rank's card has device-side semaphores (SPYRE_DEVICE_CAP_SEMAPHORE),
    // and, ranks of one process only, the rank's control buffer on its card (a
    // spyre_buffer_t): the semaphores the other ranks signal it with (peer_transport.cpp).
    uint32_t card_sem;
    uint32_t pad_sem;
    uint64_t ctl;
    // Peer transport, ranks of one process only: the destination of this rank's
    // window_seq-th all-gather (a spyre_buffer_t and the byte offset of its first segment),
    // published once the rank's stream reached the all-gather; its predecessor pushes into it.
    std::atomic<uint32_t> window_seq;
    uint64_t window_buf;
    uint64_t window_base;
    Mailbox box[kMaxSlots];
};

struct SegmentHeader {
    uint32_t magic;
    std::atomic<uint32_t> nranks;  // set by the first rank to join
    std::atomic<uint32_t> joined;
    std::atomic<uint32_t> failed;  // 0 ok, 1 a reason is being written, 2 failed
    std::atomic<uint32_t> barrier_arrived;
    std::atomic<uint32_t> barrier_generation;
    uint32_t failed_status;  // spyre_status of the failure
    uint32_t pad0;
    uint64_t slot_bytes;
    std::atomic<uint32_t> fd_senders_done;  // fd_exchange.cpp: ranks that have sent theirs
    uint32_t pad1;
    char reason[256];
    RankState ranks[kMaxRanks];
    // Peer transport, ranks of one process only: inbox[s][d] is a spyre_buffer_t on rank d's card
    // (one chunk per outbox slot) that only rank s pushes into, made by s on its first send to
    // d and freed by d.
    uint64_t inbox[kMaxRanks][kMaxRanks];
};

class Segment {
  public:
    // Opens (creating if needed) segment `name` and joins it as `rank` of `nranks`, with
    // `slots` outbox slots of `slot_bytes` per rank; returns once all ranks joined. Throws
    // TIMEOUT naming the missing ranks.
    Segment(const std::string& name, int nranks, int rank, uint64_t slot_bytes, int slots,
            uint64_t timeout_ms);
    ~Segment();
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;

    SegmentHeader& header() { return *hdr_; }
    // Data of outbox slot `k` of `rank` (host-staged transport): slot_bytes bytes.
    unsigned char* slot(int rank, int k);
    uint64_t slot_bytes() const { return slot_bytes_; }
    int slots() const { return slots_; }
    const std::string& name() const { return name_; }
    int rank() const { return rank_; }
    int nranks() const { return nranks_; }
    void set_timeout_ms(uint64_t ms) { timeout_ms_.store(ms); }
    uint64_t timeout_ms() const { return timeout_ms_.load(); }
    // Returns once every rank has entered it.
    void barrier();

    // Waits until pred() holds, sleeping on `word` (changed by whoever makes pred true); `what`
    // says what is awaited and `peer` who should make it true (-1: any), for the messages.
    template <typename Pred>
    void wait(std::atomic<uint32_t>& word, Pred pred, const char* what, int peer);
    static void wake(std::atomic<uint32_t>& word);

    // A message in an outbox slot: the sender's number for it and the slot.
    struct Message {
        int sender = 0;
        uint32_t number = 0;
        int slot = 0;
    };
    // A transport's send: waits until the outbox slot of this rank's next message is free (its
    // previous message taken), numbers the message (to `peer`, number `seq` of the pair,
    // `bytes` long) and returns it; the caller puts the data in place, then post().
    Message begin_post(int peer, uint32_t seq, uint64_t bytes);
    // Makes the message visible to its receiver; safe from any thread (a stream's host
    // function, once the data has landed).
    void post(const Message& m);
    // post(m) if the sender's `stream` (NULL: the default stream of `src`'s card) has had no
    // failure since its last synchronize, else fail() the communicator with it and return
    // false: data sent after a failed push or reduction is not what the receiver expects
    // (host functions run after failed work too). Safe from a host function of `stream`.
    // `also`: a second stream whose work the send followed (the caller's, when the push ran on
    // the transport's own stream), checked the same way.
    bool post_unless_failed(const Message& m, spyre_stream_t stream, spyre_buffer_t src, int peer,
                            spyre_stream_t also = nullptr);
    // A transport's receive: waits until `peer` has posted its message number `seq` to this
    // rank and returns it; a posted size other than `bytes` fails the communicator (the ranks
    // called different collectives or counts). Then, once the data is out of the slot,
    // consumed() (safe from any thread).
    Message await_post(int peer, uint32_t seq, uint64_t bytes);
    void consumed(const Message& m);

    // Records the first failure for every rank and wakes nobody (waiters poll every slice).
    void fail(spyre_status status, const std::string& reason);
    // Throws the recorded failure, if any.
    void check();

  private:
    void wait_slice(std::atomic<uint32_t>& word, uint32_t seen, uint64_t ns);
    // A rank whose process has exited: `peer`, or any rank if peer < 0; -1 if none. Only the
    // awaited peer is checked: others may have finished their part and exited legitimately.
    int dead_peer(int peer) const;
    [[noreturn]] void peer_died(int rank);
    uint64_t now_ms() const;

    std::string name_;
    int nranks_, rank_;
    uint64_t slot_bytes_;
    int slots_;
    uint32_t sent_ = 0;  // messages this rank has numbered (begin_post)
    std::atomic<uint64_t> timeout_ms_;
    size_t map_bytes_ = 0;
    SegmentHeader* hdr_ = nullptr;
};

template <typename Pred>
void Segment::wait(std::atomic<uint32_t>& word, Pred pred, const char* what, int peer) {
    const uint64_t start = now_ms();
    for (;;) {
        const uint32_t seen = word.load(std::memory_order_acquire);
        if (pred()) return;
        check();
        // a peer may finish its part and exit between pred() and here: look again first
        if (const int dead = dead_peer(peer); dead >= 0 && !pred()) peer_died(dead);
        const uint64_t waited = now_ms() - start, limit = timeout_ms_.load();
        if (waited >= limit) {
            std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "the other ranks";
            std::string msg = "rank " + std::to_string(rank_) + " timed out after " +
                              std::to_string(limit) + " ms waiting for " + who + " (" + what + ")";
            fail(SPYRE_ERROR_TIMEOUT, msg);
            check();
        }
        // short slices: a dead peer or an abort is noticed within 50 ms
        wait_slice(word, seen, std::min<uint64_t>(limit - waited, 50) * 1000000ull);
    }
}

}  // namespace spyre::comm
