// SPDX-License-Identifier: MIT
// Minimal fork-join pool: parallel_for(count, fn) runs fn(0..count-1) on the workers and the
// calling thread and returns when all calls finished. The caller never waits for a worker that
// has not joined yet: once every index is taken it waits only for the workers running one, so a
// short call (a tiny job) does not pay a sleeping worker's wake-up on a busy host; a worker that
// wakes after the call ended finds nothing to do. An exception thrown by fn (on any thread)
// never escapes a pool thread: the first one is kept, the remaining indices are skipped, and
// parallel_for rethrows it in the calling thread once every call has returned.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spyre {

class ThreadPool {
  public:
    explicit ThreadPool(unsigned threads) {
        for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
    }
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    unsigned threads() const { return static_cast<unsigned>(workers_.size() + 1); }

    void parallel_for(size_t count, const std::function<void(size_t)>& fn) {
        if (workers_.empty() || count <= 1) {
            for (size_t i = 0; i < count; ++i) fn(i);
            return;
        }
        {
            std::lock_guard<std::mutex> lk(m_);
            fn_ = &fn;
            count_ = count;
            error_ = nullptr;
            next_.store(0, std::memory_order_relaxed);
            ++gen_;
        }
        cv_.notify_all();
        drain(fn, count);
        std::exception_ptr err;
        {
            // every index is taken: wait for the workers still running one, then close the
            // call (fn_ cleared: a worker waking later joins nothing)
            std::unique_lock<std::mutex> lk(m_);
            done_cv_.wait(lk, [this] { return busy_ == 0; });
            fn_ = nullptr;
            err = std::move(error_);
            error_ = nullptr;
        }
        if (err) std::rethrow_exception(err);
    }

  private:
    void drain(const std::function<void(size_t)>& fn, size_t count) {
        for (;;) {
            size_t i = next_.fetch_add(1, std::memory_order_relaxed);
            if (i >= count) return;
            try {
                fn(i);
            } catch (...) {
                std::lock_guard<std::mutex> lk(m_);
                if (!error_) error_ = std::current_exception();
                next_.store(count, std::memory_order_relaxed);  // skip what is left
            }
        }
    }
    void worker() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(m_);
        for (;;) {
            cv_.wait(lk, [&] { return stop_ || gen_ != seen; });
            if (stop_) return;
            seen = gen_;
            if (!fn_) continue;  // that call has ended
            const auto* fn = fn_;
            size_t count = count_;
            ++busy_;
            lk.unlock();
            drain(*fn, count);
            lk.lock();
            if (--busy_ == 0) done_cv_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex m_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(size_t)>* fn_ = nullptr;
    size_t count_ = 0;
    std::atomic<size_t> next_{0};
    size_t busy_ = 0;  // workers inside the current call
    uint64_t gen_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace spyre
