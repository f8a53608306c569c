// A communicator: one rank's view (card, transport, device scratch) and the collectives built on
// the ring, tree and one-shot algorithms (ring.hpp, tree.hpp, one_shot.hpp). Public handle:
// spyre_comm_t (api_comm.cpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "comm/one_shot.hpp"
#include "comm/ring.hpp"
#include "comm/transport.hpp"
#include "comm/tree.hpp"
#include "spyre/comm.h"

namespace spyre::comm {

// Contents of spyre_comm_unique_id.
struct UniqueId {
    char magic[16];       // "spyre-comm-v1"
    char shm_name[96];    // POSIX shm name of the segment
    uint64_t slot_bytes;  // the transport's chunk size, the same on every rank
    uint64_t slots;       // messages in flight per rank (outbox slots), the same on every rank
};
static_assert(sizeof(UniqueId) <= SPYRE_COMM_UNIQUE_ID_BYTES);

UniqueId make_unique_id();

class Communicator {
  public:
    Communicator(const UniqueId& id, int nranks, int rank, spyre_device_t device);
    ~Communicator();

    void all_reduce(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv, uint64_t recv_off,
                    uint64_t count, spyre_dtype dtype, spyre_reduce_op op, spyre_stream_t stream);
    void broadcast(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv, uint64_t recv_off,
                   uint64_t count, spyre_dtype dtype, int root, spyre_stream_t stream);
    void all_gather(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv, uint64_t recv_off,
                    uint64_t count, spyre_dtype dtype, spyre_stream_t stream);
    void reduce_scatter(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                        uint64_t recv_off, uint64_t count, spyre_dtype dtype, spyre_reduce_op op,
                        spyre_stream_t stream);
    void reduce(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv, uint64_t recv_off,
                uint64_t count, spyre_dtype dtype, spyre_reduce_op op, int root,
                spyre_stream_t stream);
    void send(spyre_buffer_t buf, uint64_t off, uint64_t count, spyre_dtype dtype, int peer,
              spyre_stream_t stream);
    void recv(spyre_buffer_t buf, uint64_t off, uint64_t count, spyre_dtype dtype, int peer,
              spyre_stream_t stream);
    void barrier(spyre_stream_t stream);
    void abort();
    void set_timeout_ms(uint64_t ms) { transport_->set_timeout_ms(ms); }
    void info(spyre_comm_info* info) const;

  private:
    // Runs one collective (`collective` false: a send or receive of this rank alone) under
    // the lock, then waits for its work on `stream` (the calls return with the stream idle,
    // spyre/comm.h); a failure fails the communicator for every rank.
    template <typename F>
    void run(spyre_stream_t stream, F&& body, bool collective = true);
    template <typename F>
    void run_one_rank(spyre_stream_t stream, F&& body) {
        run(stream, std::forward<F>(body), false);
    }
    spyre_buffer_t work(uint64_t bytes);
    // n segments of `count` elements of es bytes from byte `base`, starting on sticks.
    Segments segments(uint64_t base, uint64_t count, uint64_t es) const;
    void check_peer(int peer, const char* what) const;

    // Whether collective c of `bytes` runs on the tree (SPYRE_COMM_ALGO, else tree_is_faster).
    bool use_tree(Collective c, uint64_t bytes) const;
    // Whether an all-reduce of `bytes` is one-shot (SPYRE_COMM_ALGO=one-shot where it fits one
    // message, else one_shot_is_faster).
    bool use_one_shot(uint64_t bytes) const;
    // The one-shot all-reduce's accumulator (one message), made on first use.
    spyre_buffer_t one_shot_acc();

    // all-reduce's, broadcast's, reduce's (SPYRE_COMM_ALGO; one-shot: all-reduce only)
    enum class Algo { Auto, Ring, Tree, OneShot };
    Algo algo_ = Algo::Auto;
    int rank_, nranks_;
    spyre_device_t device_;
    std::unique_ptr<Transport> transport_;
    spyre_buffer_t rx_ = nullptr;
    spyre_buffer_t work_ = nullptr;
    spyre_buffer_t acc_ = nullptr;
    uint64_t work_bytes_ = 0;
    std::mutex mu_;
};

}  // namespace spyre::comm
