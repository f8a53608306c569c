#include "graph.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <format>
#include <vector>

#include "error.hpp"

namespace spyre {

CaptureStream::CaptureStream(std::shared_ptr<Device> dev, const StreamRef& target)
    : dev_(std::move(dev)), g_(std::make_shared<Graph>()) {
    g_->dev = dev_;
    priority_ = target->priority();
    ring_ = target->ring();
}

void CaptureStream::refuse(const std::string& what) {
    std::lock_guard lock(mu_);
    if (invalid_)
        fail(invalid_->status(),
             std::format("{} on a capturing stream: the capture was already invalidated by an "
                         "earlier error ({})",
                         what, invalid_->what()));
    invalid_ = Error(SPYRE_ERROR_NOT_SUPPORTED,
                     std::format("{} cannot be captured into a graph; the stream's capture is "
                                 "invalidated (spyre_stream_end_capture fails with this error)",
                                 what));
    throw *invalid_;
}

void CaptureStream::add(GraphNode n) {
    std::lock_guard lock(mu_);
    if (invalid_)
        fail(invalid_->status(),
             std::format("work on a capturing stream whose capture was invalidated by an earlier "
                         "error ({})",
                         invalid_->what()));
    if (n.op == GraphNode::Op::Launch) {
        g_->launches++;
        if (n.launch.random_arg >= 0) g_->random_launches++;
    }
    g_->nodes.push_back(std::move(n));
}

void CaptureStream::copy_htod(const BufferRef&, uint64_t, const void*, uint64_t) {
    refuse("a host-to-device copy (its source is read when it is queued)");
}

void CaptureStream::copy_dtoh(void*, const BufferRef&, uint64_t, uint64_t) {
    refuse("a device-to-host copy");
}

void CaptureStream::copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                              uint64_t src_offset, uint64_t size) {
    GraphNode n;
    n.op = GraphNode::Op::CopyDtoD;
    n.dst = dst, n.dst_offset = dst_offset, n.src = src, n.src_offset = src_offset, n.size = size;
    add(std::move(n));
}

void CaptureStream::copy_3d(const Copy3D& c) {
    if (!c.src.buf || !c.dst.buf) refuse("a 3-D copy between host and device memory");
    GraphNode n;
    n.op = GraphNode::Op::Copy3D;
    n.copy = c;
    add(std::move(n));
}

// The kernel backend replays a fill as copies of a block holding the pattern; blocks are made
// (on the card's default stream) once per capture and pattern.
BufferRef CaptureStream::pattern_block(uint64_t pattern, uint32_t psize, uint64_t size) {
    const uint64_t n = std::min(size, kFillBlock);  // a multiple of psize
    {
        std::lock_guard lock(mu_);
        if (auto it = blocks_.find({pattern, psize, n}); it != blocks_.end()) return it->second;
    }
    std::vector<std::byte> bytes(n);
    for (uint64_t i = 0; i < n; i += psize) std::memcpy(bytes.data() + i, &pattern, psize);
    BufferRef b = dev_->alloc_buffer(n);
    StreamRef s = dev_->default_stream();
    s->run_sync([&] { s->copy_htod(b, 0, bytes.data(), n); });
    std::lock_guard lock(mu_);
    blocks_[{pattern, psize, n}] = b;
    return b;
}

void CaptureStream::fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
                         uint32_t pattern_size) {
    {
        std::lock_guard lock(mu_);
        if (invalid_)
            fail(invalid_->status(),
                 std::format("a fill on a capturing stream whose capture was invalidated by an "
                             "earlier error ({})",
                             invalid_->what()));
    }
    GraphNode n;
    n.op = GraphNode::Op::Fill;
    n.dst = dst, n.dst_offset = offset, n.size = size;
    n.pattern = pattern, n.pattern_size = pattern_size;
    n.pattern_block = pattern_block(pattern, pattern_size, size);
    add(std::move(n));
}

void CaptureStream::launch(const LaunchRequest& req, spyre_launch_stats* stats) {
    if (stats) refuse("a launch that returns statistics");
    GraphNode n;
    n.op = GraphNode::Op::Launch;
    n.launch = req;
    add(std::move(n));
}

void CaptureStream::host_func(void (*)(void*), void*) { refuse("a host function"); }

void CaptureStream::write_value(const SemOp&) {
    refuse("a semaphore write (spyre_stream_write_value)");
}

void CaptureStream::wait_value(const SemOp&) {
    refuse("a semaphore wait (spyre_stream_wait_value)");
}

MarkerRef CaptureStream::record() { refuse("an internal stream marker"); }

void CaptureStream::wait(const MarkerRef&) {
    refuse("a wait for an event not recorded during this capture");
}

void CaptureStream::synchronize() { refuse("a synchronize"); }

bool CaptureStream::query() { refuse("a query"); }

void CaptureStream::run_sync(const std::function<void()>&) {
    refuse("a synchronous operation (it waits for its work)");
}

void CaptureStream::replay(const GraphRef& g) {
    if (g->dev != dev_) refuse("a graph of another card");
    for (const GraphNode& n : g->nodes) add(n);
}

void CaptureStream::add_record(const void* event, std::function<void(const MarkerRef&)> set) {
    GraphNode n;
    n.op = GraphNode::Op::Record;
    n.on_record = std::move(set);
    add(std::move(n));
    std::lock_guard lock(mu_);
    events_.insert(event);
}

bool CaptureStream::recorded_here(const void* event) {
    std::lock_guard lock(mu_);
    return events_.count(event) != 0;
}

// Groups runs of consecutive launches (nothing else between them) into linked jobs of at
// most max_linked_launches() launches and max_linked_windows() windows; SPYRE_GRAPH_LINK=0
// turns linking off (each launch its own job, as on a backend that cannot link).
static void link_launches(Graph& g) {
    const char* env = std::getenv("SPYRE_GRAPH_LINK");
    const bool off = env && std::strcmp(env, "0") == 0;
    const uint32_t max_parts = off ? 1 : std::max(g.dev->max_linked_launches(), 1u);
    const uint64_t max_windows = g.dev->max_linked_windows();
    g.link.assign(g.nodes.size(), 0);
    size_t first = 0;  // the run's first launch
    uint64_t windows = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const GraphNode& n = g.nodes[i];
        if (n.op == GraphNode::Op::Record) continue;
        const bool is_launch = n.op == GraphNode::Op::Launch;
        const uint64_t w = is_launch ? n.launch.buffers.size() + 1 : 0;
        const bool joins = is_launch && i > 0 && g.link[first] > 0 && first + g.link[first] == i &&
                           g.link[first] < max_parts && windows + w <= max_windows;
        if (joins) {
            g.link[first]++;
            windows += w;
            continue;
        }
        if (is_launch) {
            first = i;
            g.link[i] = 1;
            windows = w;
        }
    }
}

GraphRef CaptureStream::finish() {
    std::lock_guard lock(mu_);
    if (invalid_) throw *invalid_;
    link_launches(*g_);
    return g_;
}

}  // namespace spyre
