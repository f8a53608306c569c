#include "SpyreTrace.h"

#include <c10/util/ApproximateClock.h>
#include <kineto/libkineto.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "SpyreFunctions.h"
#include "SpyreStream.h"

namespace torch_spyre::trace {
namespace {

using libkineto::ActivityType;

// One piece of device work queued while a session records.
struct Record {
    ActivityType type;  // CONCURRENT_KERNEL or GPU_MEMCPY
    std::string name;   // "spyre::matmul", "spyre::memcpy_htod"
    std::string aten_op, plan;
    uint32_t cores = 0, launches = 0;
    bool plan_cached = false;
    uint64_t bytes = 0;
    int32_t device = 0;
    int64_t stream = 0;     // c10 stream id
    int64_t queued_ns = 0;  // host clock (kineto's) when it was queued
    uint64_t modeled_ns = 0;
    spyre_event_t start = nullptr, end = nullptr;  // copies: resolved after the session
    uint64_t correlation = 0;
    int32_t thread = 0;
};

std::mutex g_mu;
std::atomic<bool> g_active{false};
std::vector<Record> g_records;  // guarded by g_mu

// kineto's correlation ids of the aten ops running on this thread (innermost last).
thread_local std::vector<uint64_t> t_correlation;

uint64_t current_correlation() { return t_correlation.empty() ? 0 : t_correlation.back(); }

void push(Record r) {
    r.correlation = current_correlation();
    r.thread = static_cast<int32_t>(libkineto::systemThreadId());
    std::lock_guard lock(g_mu);
    if (g_active) {
        g_records.push_back(std::move(r));
        return;
    }
    if (r.start) spyre_event_destroy(r.start);
    if (r.end) spyre_event_destroy(r.end);
}

bool capturing(spyre_stream_t s) {
    int c = 0;
    return spyre_stream_is_capturing(s, &c) == SPYRE_SUCCESS && c;
}

const std::set<ActivityType> kActivities = {ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::GPU_MEMCPY};

class Session final : public libkineto::IActivityProfilerSession {
  public:
    void start() override {
        std::lock_guard lock(g_mu);
        g_records.clear();
        g_active = true;
    }
    void stop() override {
        std::lock_guard lock(g_mu);
        g_active = false;
        records_ = std::move(g_records);
        g_records.clear();
    }
    std::vector<std::string> errors() override { return errors_; }

    void processTrace(libkineto::ActivityLogger& logger) override {
        processTrace(logger, nullptr, 0, 0);
    }
    void processTrace(libkineto::ActivityLogger& logger,
                      libkineto::getLinkedActivityCallback linked, int64_t begin,
                      int64_t end) override {
        buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
        buffer_->span = libkineto::TraceSpan(begin, end, "spyre");
        buffer_->gpuOpCount = 0;
        // Each stream runs its work in order: an item starts when it has been queued and the
        // stream's previous item has ended (on the model).
        std::map<std::pair<int32_t, int64_t>, int64_t> stream_end;
        for (Record& r : records_) {
            if (r.type == ActivityType::GPU_MEMCPY) resolve_copy(r);
            int64_t& cursor = stream_end[{r.device, r.stream}];
            const int64_t start = std::max(r.queued_ns, cursor);
            cursor = start + static_cast<int64_t>(r.modeled_ns);
            auto a =
                std::make_unique<libkineto::GenericTraceActivity>(buffer_->span, r.type, r.name);
            a->startTime = start;
            a->endTime = cursor;
            a->id = static_cast<int32_t>(r.correlation);
            a->device = r.device;
            a->resource = static_cast<int32_t>(r.stream);
            a->threadId = r.thread;
            if (linked && r.correlation) a->linked = linked(static_cast<int32_t>(r.correlation));
            a->addMetadata("modeled ns", r.modeled_ns);
            a->addMetadataQuoted("device time", "modeled");
            a->addMetadata("queued ns", r.queued_ns);
            if (r.type == ActivityType::CONCURRENT_KERNEL) {
                a->addMetadataQuoted("aten op", r.aten_op);
                a->addMetadataQuoted("plan", r.plan);
                a->addMetadata("cores", r.cores);
                a->addMetadata("launches", r.launches);
                a->addMetadata("plan cached", r.plan_cached ? 1 : 0);
                ++buffer_->gpuOpCount;
            } else {
                a->addMetadata("bytes", r.bytes);
            }
            streams_.insert({r.device, r.stream});
            a->log(logger);
            buffer_->activities.push_back(std::move(a));
        }
        records_.clear();
    }

    std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
        return std::make_unique<libkineto::DeviceInfo>(0, 0, "spyre",
                                                       "spyre 0 (modeled device time)");
    }
    std::vector<libkineto::ResourceInfo> getResourceInfos() override {
        std::vector<libkineto::ResourceInfo> out;
        for (const auto& [device, stream] : streams_)
            out.emplace_back(device, stream, stream,
                             "spyre " + std::to_string(device) + " stream " +
                                 std::to_string(stream) + " (modeled)");
        return out;
    }
    std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
        return std::move(buffer_);
    }

    void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
    void popCorrelationId() override {
        if (!t_correlation.empty()) t_correlation.pop_back();
    }

    ~Session() override {
        for (Record& r : records_) {
            if (r.start) spyre_event_destroy(r.start);
            if (r.end) spyre_event_destroy(r.end);
        }
    }

  private:
    // The modeled time libspyre's stream accounts between the copy's two events.
    void resolve_copy(Record& r) {
        spyre_event_timing t{};
        if (spyre_event_synchronize(r.end) == SPYRE_SUCCESS &&
            spyre_event_elapsed(r.start, r.end, &t) == SPYRE_SUCCESS)
            r.modeled_ns = t.modeled_ns;
        else
            errors_.push_back("spyre: the modeled time of a " + r.name + " is unavailable");
        spyre_event_destroy(r.start);
        spyre_event_destroy(r.end);
        r.start = r.end = nullptr;
    }

    std::vector<Record> records_;
    std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
    std::set<std::pair<int32_t, int64_t>> streams_;
    std::vector<std::string> errors_;
};

class Profiler final : public libkineto::IActivityProfiler {
  public:
    const std::string& name() const override { return name_; }
    const std::set<ActivityType>& availableActivities() const override { return kActivities; }
    std::unique_ptr<libkineto::IActivityProfilerSession> configure(
        const std::set<ActivityType>& types, const libkineto::Config&) override {
        // Only when the session records device activities (ProfilerActivity.PrivateUse1).
        if (!types.count(ActivityType::CONCURRENT_KERNEL)) return nullptr;
        return std::make_unique<Session>();
    }
    std::unique_ptr<libkineto::IActivityProfilerSession> configure(
        int64_t, int64_t, const std::set<ActivityType>& types,
        const libkineto::Config& config) override {
        return configure(types, config);
    }

  private:
    std::string name_ = "spyre";
};

// Registered when libtorch_spyre is loaded: kineto creates the profiler when it initializes.
const bool g_registered = [] {
    libkineto::api().registerProfilerFactory([] { return std::make_unique<Profiler>(); });
    return true;
}();

}  // namespace

bool active() { return g_active.load(std::memory_order_relaxed); }

void kernel(const char* aten_op, const spyre_op_info& info) {
    if (!active()) return;
    const c10::Stream s = current_stream(current_device());
    if (capturing(native_stream(s))) return;  // captured, not run
    Record r;
    r.type = ActivityType::CONCURRENT_KERNEL;
    r.name = std::string("spyre::") + info.op;
    r.aten_op = aten_op;
    r.plan = info.plan;
    r.cores = info.cores;
    r.launches = info.launches;
    r.plan_cached = info.plan_cached != 0;
    r.device = s.device_index();
    r.stream = s.id();
    r.queued_ns = c10::getTime();
    r.modeled_ns = info.modeled_ns;
    push(std::move(r));
}

CopyScope::CopyScope(spyre_stream_t stream, const char* kind, uint64_t bytes) {
    if (!active() || capturing(stream)) return;
    spyre_device_t dev = nullptr;
    int priority = 0;
    if (spyre_stream_get_info(stream, &dev, &priority) != SPYRE_SUCCESS) return;
    if (spyre_event_create(dev, &start_) != SPYRE_SUCCESS) return;
    if (spyre_event_record(start_, stream) != SPYRE_SUCCESS) {
        spyre_event_destroy(start_);
        start_ = nullptr;
        return;
    }
    stream_ = stream;
    kind_ = kind;
    bytes_ = bytes;
    queued_ns_ = c10::getTime();
}

CopyScope::~CopyScope() {
    if (!start_) return;
    spyre_device_t dev = nullptr;
    int priority = 0;
    spyre_event_t end = nullptr;
    if (spyre_stream_get_info(stream_, &dev, &priority) != SPYRE_SUCCESS ||
        spyre_event_create(dev, &end) != SPYRE_SUCCESS) {
        spyre_event_destroy(start_);
        return;
    }
    if (spyre_event_record(end, stream_) != SPYRE_SUCCESS) {
        spyre_event_destroy(start_);
        spyre_event_destroy(end);
        return;
    }
    const c10::Stream s = current_stream(current_device());
    Record r;
    r.type = ActivityType::GPU_MEMCPY;
    r.name = std::string("spyre::memcpy_") + kind_;
    r.bytes = bytes_;
    r.device = s.device_index();
    r.stream = native_stream(s) == stream_ ? s.id() : -1;
    r.queued_ns = queued_ns_;
    r.start = start_;
    r.end = end;
    push(std::move(r));
}

}  // namespace torch_spyre::trace
