// The "spyre" torch.distributed backend: a c10d::Backend over libspyre's collectives
// (spyre/comm.h), one process per card. The communicator is created on the first collective,
// on the card of its tensors, from a unique id rank 0 puts in the process group's store.
// Collectives are asynchronous: each call queues the collective on the group's worker
// (CollectiveQueue.h) and returns its Work (SpyreWork.h).
#pragma once

#include <spyre/comm.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch_spyre {

class CollectiveQueue;

class ProcessGroupSpyre : public c10d::Backend {
  public:
    ProcessGroupSpyre(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);
    ~ProcessGroupSpyre() override;

    const std::string getBackendName() const override { return "spyre"; }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const c10d::AllreduceOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const c10d::BroadcastOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
    // One collective per pair, in order (DTensor's redistributions ask for these).
    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
        std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
        const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
        std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
        const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const c10d::ReduceOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::GatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const c10d::ScatterOptions& opts) override;
    // Point to point, matched in call order per pair (tags are not used), queued like the
    // collectives.
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
    // all_to_all_single (split sizes along dim 0, or equal blocks) and all_to_all (a tensor per
    // rank): this rank's own block copied on the card, the others exchanged with one peer pair
    // per step (send to rank + k, receive from rank - k) in pieces of one transfer chunk, a send
    // and a receive alternating, so no step waits on a cycle of full outboxes.
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const c10d::AllToAllOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const c10d::AllToAllOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

    // Fails the communicator for every rank (peers blocked in a collective get an error).
    // Callable from any thread, with collectives in flight.
    void abort();
    // The communicator's transport ("p2p" or "host-staged"; "" before the first collective).
    std::string transport();
    // Whether the communicator queues the waits between the ranks on the cards
    // (SPYRE_COMM_INFO_DEVICE_WAITS; false before the first collective).
    bool device_waits();

  private:
    // What the collectives use on the worker: the queued lambdas share it, so a worker the
    // destructor leaves behind (CollectiveQueue::shutdown) never touches a destroyed group.
    class Group {
      public:
        Group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
              std::chrono::milliseconds timeout);
        ~Group();  // destroys the communicator
        Group(const Group&) = delete;
        Group& operator=(const Group&) = delete;

        // The bodies of the collectives the others are made of (they run on the worker).
        void run_allreduce(at::Tensor& t, const c10d::ReduceOp& op);
        void run_broadcast(const at::Tensor& t, int root);
        void run_allgather_base(at::Tensor& output, at::Tensor& input);
        void run_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                     const c10d::ReduceOp& op);
        // The communicator on `device` (created by the first collective).
        spyre_comm_t comm_for(c10::DeviceIndex device);
        void allreduce_float(at::Tensor& t, const c10d::ReduceOp& op);
        void allreduce_integers(at::Tensor& t, const c10d::ReduceOp& op);
        // t's bytes to / from rank `peer` (any dtype, contiguous).
        void send_bytes(const at::Tensor& t, int peer);
        void recv_bytes(at::Tensor& t, int peer);
        // sends[r] to rank r and recvs[r] from rank r (flat uint8 views of contiguous tensors
        // on one card; this rank's own entries are copied on the card).
        void exchange(const std::vector<at::Tensor>& sends, const std::vector<at::Tensor>& recvs);
        // Any thread, without mu_ (the worker may hold it in spyre_comm_init_rank).
        void abort();
        c10::DeviceIndex device() const { return device_; }

        const int rank_, size_;
        const c10::intrusive_ptr<c10d::Store> store_;
        const std::chrono::milliseconds timeout_;
        std::atomic<spyre_comm_t> comm_ = nullptr;  // read without mu_ by abort()
        std::atomic<c10::DeviceIndex> device_ = -1;
        std::mutex mu_;
    };

    // Queues `run` on the worker (CollectiveQueue::submit).
    c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, c10::DeviceIndex device,
                                          std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> inputs,
                                          std::function<void()> run);

    std::chrono::milliseconds timeout_;
    std::shared_ptr<Group> group_;
    std::unique_ptr<CollectiveQueue> queue_;
};

}  // namespace torch_spyre
