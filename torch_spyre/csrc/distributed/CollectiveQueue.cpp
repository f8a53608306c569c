// CollectiveQueue (CollectiveQueue.h).
#include "distributed/CollectiveQueue.h"

#include <ATen/ThreadLocalState.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

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
};

}  // namespace

struct CollectiveQueue::State {
    int rank;
    std::chrono::milliseconds timeout;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool running = false;  // the worker is on a task
    bool stopping = false;
    std::exception_ptr failure;  // the group's first communication failure
    std::function<void()> abort;
    uint64_t seq = 0;

    // Under mu. `abort_comm`: when this rank gives up on a collective its peers are still in
    // (not when libspyre reported the error: the peers see its cause themselves).
    void fail_locked(std::exception_ptr e, bool abort_comm) {
        if (!failure) failure = std::move(e);
        if (abort_comm && abort) abort();
    }
};

namespace {

// Runs one collective on the communication stream of its card; its error, if any.
std::exception_ptr run_task(Task& task, std::map<c10::DeviceIndex, c10::Stream>& streams) {
    try {
        at::ThreadLocalStateGuard tls(task.tls);
        // the collective writes its tensors in place, outside autograd
        at::NoGradGuard no_grad;
        set_device(task.device);
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

void work_loop(const std::shared_ptr<CollectiveQueue::State>& sp) {
    auto& s = *sp;
    std::map<c10::DeviceIndex, c10::Stream> streams;
    for (;;) {
        std::optional<Task> next;
        std::exception_ptr error;
        {
            std::unique_lock lock(s.mu);
            s.cv.wait(lock, [&] { return !s.tasks.empty() || s.stopping; });
            if (s.tasks.empty()) return;
            next.emplace(std::move(s.tasks.front()));
            s.tasks.pop_front();
            s.running = true;
            error = s.failure;
        }
        Task& task = *next;
        if (!error) {
            error = run_task(task, streams);
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
        task.run = nullptr;  // the lambda's tensors
        task.ready.reset();
        {
            // the future's callbacks (DDP's, comm hooks) queue their work on the caller's stream
            at::ThreadLocalStateGuard tls(task.tls);
            const c10::Stream previous = exchange_stream(task.caller);
            if (error)
                task.work->fail(error);
            else
                task.work->complete();
            exchange_stream(previous);
        }
        next.reset();
        {
            std::lock_guard lock(s.mu);
            s.running = false;
        }
        s.cv.notify_all();
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
    Task task{nullptr,       device, current_stream(device), nullptr, at::ThreadLocalState(),
              std::move(run)};
    std::exception_ptr refused;
    {
        std::lock_guard lock(s.mu);
        task.work = c10::make_intrusive<SpyreWork>(type, s.rank, ++s.seq, std::move(outputs),
                                                   std::move(inputs), s.timeout, on_timeout);
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
    {
        std::lock_guard lock(s.mu);
        s.tasks.push_back(std::move(task));
    }
    s.cv.notify_all();
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
    lock.unlock();
    if (exited)
        worker_.join();
    else
        worker_.detach();
    return exited;
}

}  // namespace torch_spyre
