// Stream capture: while a stream captures, the work queued on it goes into a graph instead of
// to the card (spyre_stream_begin_capture). A CaptureStream stands in for the captured stream;
// work that cannot be replayed later (host copies, synchronization, host functions) fails
// and invalidates the capture. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "backend.hpp"

namespace spyre {

class CaptureStream final : public Stream {
  public:
    CaptureStream(std::shared_ptr<Device> dev, const StreamRef& target);

    void copy_htod(const BufferRef&, uint64_t, const void*, uint64_t) override;
    void copy_dtoh(void*, const BufferRef&, uint64_t, uint64_t) override;
    void copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                   uint64_t src_offset, uint64_t size) override;
    void copy_3d(const Copy3D& c) override;
    void fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
              uint32_t pattern_size) override;
    void launch(const LaunchRequest& req, spyre_launch_stats* stats) override;
    void host_func(void (*fn)(void*), void* user) override;
    void write_value(const SemOp&) override;
    void wait_value(const SemOp&) override;
    MarkerRef record() override;
    void wait(const MarkerRef& m) override;
    void synchronize() override;
    bool query() override;
    std::optional<Error> failure() override { return std::nullopt; }  // nothing runs in a capture
    void run_sync(const std::function<void()>& body) override;
    void replay(const GraphRef& g) override;  // the graph's work joins this capture

    // An event recorded on the captured stream: `set` receives the marker of each replay.
    void add_record(const void* event, std::function<void(const MarkerRef&)> set);
    // Whether `event` was recorded during this capture (a wait on it is covered by the
    // stream's order).
    bool recorded_here(const void* event);
    // Refuses `what` (it cannot be captured): throws, and the capture is invalidated.
    [[noreturn]] void refuse(const std::string& what);
    // Ends the capture: the graph, or throws the error that invalidated it.
    GraphRef finish();

  private:
    void add(GraphNode n);
    BufferRef pattern_block(uint64_t pattern, uint32_t psize, uint64_t size);

    std::shared_ptr<Device> dev_;
    std::mutex mu_;
    std::shared_ptr<Graph> g_;
    std::optional<Error> invalid_;
    std::set<const void*> events_;
    std::map<std::tuple<uint64_t, uint32_t, uint64_t>, BufferRef> blocks_;
};

}  // namespace spyre
