// CollectiveQueue (CollectiveQueue.h).
#include "distributed/CollectiveQueue.h"

#include <ATen/ThreadLocalState.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "distributed/SpyreWork.h"
#include "runtime/SpyreFunctions.h"
#include "runtime/SpyreStream.h"

namespace torch_spyre {
namespace {

std::exception_ptr backend_error(const std::string& msg) {
    try {
        C10_THROW_ERROR(DistBackendError, msg);
    } catch (...) {
        return std::current_exception();
    }
}

void check(spyre_status s, const char* what) {
    TORCH_CHECK(s == SPYRE_SUCCESS, "spyre backend: ", what, " failed: ", spyre_last_error());
}

// An event of one card, destroyed with its holder.
class Event {
  public:
    explicit Event(c10::DeviceIndex device) {
        check(spyre_event_create(device_handle(device), &event_), "spyre_event_create");
    }
    ~Event() { spyre_event_destroy(event_); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    spyre_event_t get() const { return event_; }

  private:
    spyre_event_t event_ = nullptr;
};

// Events are reused: on the simulator creating one costs about as much as a small collective's
// hand-off to the worker. The pool is never destroyed (it would outlive libspyre at exit).
std::shared_ptr<Event> pooled_event(c10::DeviceIndex device) {
    static auto* mu = new std::mutex;
    static auto* free = new std::map<c10::DeviceIndex, std::vector<Event*>>;
    Event* e = nullptr;
    {
        std::lock_guard lock(*mu);
        auto& v = (*free)[device];
        if (!v.empty()) {
            e = v.back();
            v.pop_back();
        }
    }
    if (!e) e = new Event(device);
    return std::shared_ptr<Event>(e, [device](Event* ev) {
        std::lock_guard lock(*mu);
        (*free)[device].push_back(ev);
    });
}

struct Task {
    c10::intrusive_ptr<SpyreWork> work;
    c10::DeviceIndex device;
    c10::Stream caller;            // the caller's current stream at the call
    std::shared_ptr<Event> ready;  // recorded on it at the call
    at::ThreadLocalState tls;      // the caller's (grad mode, profiler, ...)
    std::function<void()> run;
    std::chrono::steady_clock::time_point queued;
    bool awaited = false;  // a wait() blocks on it: the worker takes it without delay
};

// How long the worker leaves a new task to a wait() that may follow at once (async_op=False):
// run on the waiting thread, a collective costs no hand-off to the worker and back (about 80 us
// on the simulator). Short by default; long while the caller keeps waiting at once (a run of
// synchronous collectives), until the worker finds a task nobody waited for (asynchronous use,
// whose collective then starts at most that much later once).
constexpr std::chrono::microseconds kLeaveToWait{100}, kLeaveToWaitSync{1000};
constexpr int kIdlePolls = 20;

}  // namespace

struct CollectiveQueue::State {
    int rank;
    std::chrono::milliseconds timeout;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool running = false;  // a task is being run (by the worker or by a wait(), below)
    bool stopping = false;
    std::exception_ptr failure;  // the group's first communication failure
    std::function<void()> abort;
    uint64_t seq = 0;
    bool sync_callers = false;  // the last task was run by a wait() (kLeaveToWaitSync)
    // The communication stream per card; used by whoever is running a task (one at a time).
    std::map<c10::DeviceIndex, c10::Stream> streams;

    // Under mu. `abort_comm`: when this rank gives up on a collective its peers are still in
    // (not when libspyre reported the error: the peers see its cause themselves).
    void fail_locked(std::exception_ptr e, bool abort_comm) {
        if (!failure) failure = std::move(e);
        if (abort_comm && abort) abort();
    }
};

namespace {

// Runs one collective on the communication stream of its card, which waits for the caller's
// stream first, and waits for its device work; its error, if any. `on_caller`: on the caller's
// stream instead, without waiting for the device (a wait() on this thread with that stream
// current runs it: its later work is ordered after the collective, as with the synchronous
// backend). The thread's device, stream and thread-local state are as before on return.
std::exception_ptr run_task(Task& task, std::map<c10::DeviceIndex, c10::Stream>& streams,
                            bool on_caller) {
    try {
        at::ThreadLocalStateGuard tls(task.tls);
        // the collective writes its tensors in place, outside autograd
        at::NoGradGuard no_grad;
        struct RestoreDevice {
            c10::DeviceIndex d;
            ~RestoreDevice() {
                if (current_device() != d) set_device(d);
            }
        } restore_device{current_device()};
        if (current_device() != task.device) set_device(task.device);
        if (on_caller) {
            const c10::Stream previous = exchange_stream(task.caller);
            struct Restore {
                c10::Stream s;
                ~Restore() { exchange_stream(s); }
            } restore{previous};
            task.run();
            return nullptr;
        }
        auto it = streams.find(task.device);
        if (it == streams.end())
            it = streams.emplace(task.device, stream_from_pool(task.device, -1)).first;
        const c10::Stream comm = it->second;
        const c10::Stream previous = exchange_stream(comm);
        struct Restore {
            c10::Stream s;
            ~Restore() { exchange_stream(s); }
        } restore{previous};
        const spyre_stream_t native = native_stream(comm);
        check(spyre_stream_wait_event(native, task.ready->get()), "spyre_stream_wait_event");
        task.run();
        synchronize_stream(comm);  // the collective's device work (the worker's stream only)
        return nullptr;
    } catch (...) {
        return std::current_exception();
    }
}

// Completes (or fails with `error`) the task's Work and releases what it holds. The future's
// callbacks (DDP's, comm hooks) queue their work on the caller's stream.
void finish_task(Task& task, std::exception_ptr error) {
    task.run = nullptr;  // the lambda's tensors and group
    task.ready.reset();
    at::ThreadLocalStateGuard tls(task.tls);
    const c10::Stream previous = exchange_stream(task.caller);
    if (error)
        task.work->fail(error);
    else
        task.work->complete();
    exchange_stream(previous);
}

// Runs a task taken off the queue (s.running set by the taker), then clears s.running.
void execute(CollectiveQueue::State& s, Task& task, std::exception_ptr error,
             bool on_caller = false) {
    if (!error) {
        error = run_task(task, s.streams, on_caller);
        if (error) {
            try {
                std::rethrow_exception(error);
            } catch (const c10::DistBackendError&) {
                std::lock_guard lock(s.mu);
                s.fail_locked(error, /*abort_comm=*/false);
            } catch (...) {  // an argument error: this collective's only
            }
        }
    }
    finish_task(task, error);
    bool wake;
    {
        std::lock_guard lock(s.mu);
        s.running = false;
        // in a run of synchronous collectives the worker polls (below): leave it asleep
        wake = s.stopping || !s.tasks.empty() || !s.sync_callers;
    }
    if (wake) s.cv.notify_all();
}

void work_loop(const std::shared_ptr<CollectiveQueue::State>& sp) {
    auto& s = *sp;
    int idle_polls = 0;
    for (;;) {
        std::optional<Task> next;
        std::exception_ptr error;
        {
            std::unique_lock lock(s.mu);
            const auto ready = [&] { return !s.running && (!s.tasks.empty() || s.stopping); };
            if (!s.sync_callers) {
                s.cv.wait(lock, [&] { return ready() || s.sync_callers; });
                if (!ready()) continue;  // a wait() ran a task: poll from now on (below)
            } else if (!s.cv.wait_for(lock, kLeaveToWaitSync, ready)) {
                // nobody wakes the worker while the callers run their collectives themselves:
                // it looks every kLeaveToWaitSync, and after kIdlePolls idle looks stops that
                if (s.tasks.empty() && !s.running && ++idle_polls >= kIdlePolls)
                    s.sync_callers = false;
                continue;
            }
            idle_polls = 0;
            if (s.tasks.empty()) return;
            const auto until =
                s.tasks.front().queued + (s.sync_callers ? kLeaveToWaitSync : kLeaveToWait);
            if (!s.stopping && !s.tasks.front().awaited &&
                std::chrono::steady_clock::now() < until) {
                s.cv.wait_until(lock, until, [&] { return s.running || s.stopping; });
                continue;  // taken by a wait(), or time to look again
            }
            s.sync_callers = false;
            next.emplace(std::move(s.tasks.front()));
            s.tasks.pop_front();
            s.running = true;
            error = s.failure;
        }
        execute(s, *next, error);
    }
}

// wait() on `work` before the worker took it: the calling thread runs the queue's head, in
// order, up to and including `work` (a synchronous collective then costs no hand-off to the
// worker and back). Returns at once when the worker is on a task or `work` is not queued.
void help(CollectiveQueue::State& s, const SpyreWork* work) {
    for (;;) {
        bool poll = false;
        std::optional<Task> next;
        std::exception_ptr error;
        {
            std::lock_guard lock(s.mu);
            const auto it = std::find_if(s.tasks.begin(), s.tasks.end(),
                                         [&](const Task& t) { return t.work.get() == work; });
            if (it == s.tasks.end()) return;
            if (s.running) {  // the worker goes on with the queue without leaving time to wait()
                for (auto t = s.tasks.begin(); t != it + 1; ++t) t->awaited = true;
                return;
            }
            next.emplace(std::move(s.tasks.front()));
            s.tasks.pop_front();
            s.running = true;
            poll = !s.sync_callers;
            s.sync_callers = true;
            error = s.failure;
        }
        if (poll) s.cv.notify_all();  // the worker sleeps until woken: make it poll
        const bool last = next->work.get() == work;
        // the awaited collective on the stream it was issued on, when that is still current
        execute(s, *next, error, last && current_stream(next->device) == next->caller);
        if (last) return;
    }
}

}  // namespace

CollectiveQueue::CollectiveQueue(int rank, std::chrono::milliseconds timeout,
                                 std::function<void()> abort)
    : state_(std::make_shared<State>()) {
    state_->rank = rank;
    state_->timeout = timeout;
    state_->abort = std::move(abort);
    worker_ = std::thread([s = state_] { work_loop(s); });
}

CollectiveQueue::~CollectiveQueue() {
    if (worker_.joinable()) shutdown(std::chrono::milliseconds(0));
}

c10::intrusive_ptr<c10d::Work> CollectiveQueue::submit(c10d::OpType type, c10::DeviceIndex device,
                                                       std::vector<at::Tensor> outputs,
                                                       std::vector<at::Tensor> inputs,
                                                       std::function<void()> run) {
    State& s = *state_;
    // a wait() that times out fails the group (a collective cannot be taken back on one rank)
    auto on_timeout = [weak = std::weak_ptr<State>(state_)](const SpyreWork& w,
                                                            std::chrono::milliseconds limit) {
        std::exception_ptr e =
            backend_error("spyre backend: " + w.describe() + " did not complete within " +
                          std::to_string(limit.count()) +
                          " ms; the process group is failed and its communicator aborted");
        if (auto sp = weak.lock()) {
            std::lock_guard lock(sp->mu);
            sp->fail_locked(e, /*abort_comm=*/true);
            return sp->failure;
        }
        return e;
    };
    // wait() runs the collective itself when the worker has not taken it yet; not for a wait
    // with a shorter timeout than the group's (libspyre's, which bounds the run)
    auto on_wait = [weak = std::weak_ptr<State>(state_)](const SpyreWork& w,
                                                         std::chrono::milliseconds limit) {
        if (auto sp = weak.lock())
            if (limit >= sp->timeout) help(*sp, &w);
    };
    Task task{
        nullptr, device, current_stream(device), nullptr, at::ThreadLocalState(), std::move(run),
        {},      false};
    std::exception_ptr refused;
    {
        std::lock_guard lock(s.mu);
        task.work =
            c10::make_intrusive<SpyreWork>(type, s.rank, ++s.seq, std::move(outputs),
                                           std::move(inputs), s.timeout, on_timeout, on_wait);
        if (s.failure)
            refused = s.failure;  // fail fast with the group's cause
        else if (s.stopping)
            refused = backend_error("spyre backend: the process group is shut down");
    }
    if (refused) {
        task.work->fail(refused);
        return task.work;
    }
    task.ready = pooled_event(device);  // back to the pool once the collective finished
    check(spyre_event_record(task.ready->get(), native_stream(task.caller)), "spyre_event_record");
    c10::intrusive_ptr<c10d::Work> work = task.work;
    task.queued = std::chrono::steady_clock::now();
    bool wake;
    {
        std::lock_guard lock(s.mu);
        s.tasks.push_back(std::move(task));
        wake = !s.sync_callers;  // else the worker looks within kLeaveToWaitSync
    }
    if (wake) s.cv.notify_all();
    return work;
}

bool CollectiveQueue::shutdown(std::chrono::milliseconds grace) {
    if (!worker_.joinable()) return true;
    State& s = *state_;
    std::unique_lock lock(s.mu);
    s.stopping = true;
    s.cv.notify_all();
    const auto idle = [&] { return s.tasks.empty() && !s.running; };
    if (!s.cv.wait_for(lock, grace, idle)) {
        s.fail_locked(
            backend_error("spyre backend: the process group was destroyed with " +
                          std::to_string(s.tasks.size() + s.running) + " collectives in flight"),
            /*abort_comm=*/true);
    }
    // after the abort a collective in flight returns with an error within moments
    const bool exited = s.cv.wait_for(lock, std::chrono::seconds(10), idle);
    s.abort = nullptr;
    // a stuck runner leaves its queue behind: fail it here, the worker would never get to it
    std::deque<Task> left = std::move(s.tasks);
    s.tasks.clear();
    const std::exception_ptr cause = s.failure;
    lock.unlock();
    for (Task& task : left) finish_task(task, cause);
    left.clear();
    if (exited)
        worker_.join();
    else
        worker_.detach();  // it touches the shared State only; its task owns what it uses
    return exited;
}

}  // namespace torch_spyre
