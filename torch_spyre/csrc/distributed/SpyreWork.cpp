// SpyreWork (SpyreWork.h).
#include "distributed/SpyreWork.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_spyre {

SpyreWork::SpyreWork(c10d::OpType type, int rank, uint64_t seq, std::vector<at::Tensor> outputs,
                     std::vector<at::Tensor> inputs, std::chrono::milliseconds timeout,
                     TimeoutHandler on_timeout, WaitHandler on_wait)
    : c10d::Work(rank, type),
      seq_(seq),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      timeout_(timeout),
      on_timeout_(std::move(on_timeout)),
      on_wait_(std::move(on_wait)),
      future_(
          c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

std::string SpyreWork::describe() const {
    return c10d::opTypeToString(opType_) + " #" + std::to_string(seq_) + " on rank " +
           std::to_string(rank_);
}

bool SpyreWork::wait(std::chrono::milliseconds timeout) {
    // wait_for overflows past the clock's range (a timeout of timedelta.max)
    const std::chrono::milliseconds limit = std::min<std::chrono::milliseconds>(
        timeout == kNoTimeout ? timeout_ : timeout, std::chrono::hours(24 * 365));
    if (on_wait_ && !isCompleted()) on_wait_(*this, limit);
    std::exception_ptr error;
    {
        std::unique_lock lock(mutex_);
        if (!cv_.wait_for(lock, limit, [&] { return completed_; })) {
            lock.unlock();
            std::exception_ptr e = on_timeout_ ? on_timeout_(*this, limit) : nullptr;
            if (e) std::rethrow_exception(e);
            C10_THROW_ERROR(DistBackendError, "spyre backend: " + describe() +
                                                  " did not complete within " +
                                                  std::to_string(limit.count()) + " ms");
        }
        error = exception_;
    }
    if (error) std::rethrow_exception(error);
    return true;
}

void SpyreWork::complete() {
    {
        std::lock_guard lock(mutex_);
        inputs_.clear();
    }
    finish();
    future_->markCompleted(c10::IValue(outputs_));
}

void SpyreWork::fail(std::exception_ptr error) {
    {
        std::lock_guard lock(mutex_);
        inputs_.clear();
    }
    finish(error);
    future_->setError(error);
}

}  // namespace torch_spyre
