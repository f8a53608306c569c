// The Work of the "spyre" torch.distributed backend: a collective queued on its process group's
// worker (CollectiveQueue.h), completed once the collective's device work has finished (or its
// exchange, when wait() ran it on the caller's stream). It keeps the collective's tensors alive
// until then; wait() blocks until completion or the timeout, and rethrows the collective's error.
#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace torch_spyre {

class SpyreWork : public c10d::Work {
  public:
    // Called by wait() when `timeout` passes first: fails the process group and returns the
    // exception wait() raises.
    using TimeoutHandler =
        std::function<std::exception_ptr(const SpyreWork&, std::chrono::milliseconds)>;

    // Called by wait() (with its limit) before it blocks: may run the collective right there.
    using WaitHandler = std::function<void(const SpyreWork&, std::chrono::milliseconds)>;

    SpyreWork(c10d::OpType type, int rank, uint64_t seq, std::vector<at::Tensor> outputs,
              std::vector<at::Tensor> inputs, std::chrono::milliseconds timeout,
              TimeoutHandler on_timeout, WaitHandler on_wait = nullptr);

    // kNoTimeout: the process group's timeout.
    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    // Completion already means the device work finished: nothing to order.
    void synchronize() override {}
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
    uint64_t getSequencenumber() const override { return seq_; }

    // "all_reduce #3 on rank 1" (op names as in c10d's OpType).
    std::string describe() const;

    // The worker's side: the outputs become the future's value (its callbacks run on the
    // calling thread), or the exception its error.
    void complete();
    void fail(std::exception_ptr error);

  private:
    const uint64_t seq_;
    std::vector<at::Tensor> outputs_;
    std::vector<at::Tensor> inputs_;  // released on completion
    const std::chrono::milliseconds timeout_;
    TimeoutHandler on_timeout_;
    WaitHandler on_wait_;
    c10::intrusive_ptr<at::ivalue::Future> future_;
};

}  // namespace torch_spyre
