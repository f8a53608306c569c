// The asynchronous side of the "spyre" torch.distributed backend: one worker thread per process
// group runs its collectives in issue order (libspyre's collectives block the calling thread
// until the exchange is done, so the caller must not run them). A collective waits, on a
// communication stream of the card, for the work queued on the caller's current stream before
// the call; its Work (SpyreWork.h) completes when its device work has finished. A wait() on a
// Work the worker has not taken yet runs the collective on the waiting thread instead (on the
// caller's stream when that is current there: complete once the exchange is done).
//
// A communication failure (a dead peer, libspyre's timeout, an abort, a wait() that timed out)
// fails the group: queued collectives and every later call fail with the same error instead of
// blocking on a communicator that is gone. Argument errors fail their own Work only.
#pragma once

#include <c10/core/Stream.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace torch_spyre {

class CollectiveQueue {
  public:
    // `abort` fails the communicator (unblocks a collective in flight); it may be called from
    // any thread until shutdown() returns.
    CollectiveQueue(int rank, std::chrono::milliseconds timeout, std::function<void()> abort);
    ~CollectiveQueue();

    // Queues `run` (the collective, on the worker thread, whose current stream of `device` is
    // the communication stream) and returns its Work. `outputs` are the Work's result and its
    // future's value; outputs and inputs stay alive until it completes.
    c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, c10::DeviceIndex device,
                                          std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> inputs,
                                          std::function<void()> run);

    // Stops taking work, lets queued work finish for up to `grace`, then aborts the
    // communicator and fails what is left. Bounded: a worker still stuck after the abort is
    // left behind (detached; the queued collectives are failed here) and false is returned.
    // The detached worker touches only the shared State and what its task's closure owns.
    bool shutdown(std::chrono::milliseconds grace);

    struct State;  // shared with the worker thread, which may outlive the queue (shutdown)

  private:
    std::shared_ptr<State> state_;
    std::thread worker_;
};

}  // namespace torch_spyre
