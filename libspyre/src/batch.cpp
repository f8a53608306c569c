#include "batch.hpp"

#include <utility>

namespace spyre {

namespace {

std::shared_ptr<Graph> empty_graph(const std::shared_ptr<Device>& dev) {
    auto g = std::make_shared<Graph>();
    g->dev = dev;
    return g;
}

}  // namespace

BatchStream::BatchStream(std::shared_ptr<Device> dev, StreamRef target)
    : dev_(std::move(dev)), target_(std::move(target)), graph_(empty_graph(dev_)) {
    priority_ = target_->priority();
    ring_ = target_->ring();
}

bool BatchStream::hold(GraphNode&& n) {
    bool full;
    {
        std::lock_guard lock(mu_);
        if (closed_) return false;
        if (n.op == GraphNode::Op::Launch) {
            graph_->launches++;
            if (n.launch.random_arg >= 0) graph_->random_launches++;
        }
        // every launch its own job, as when queued one by one (a batch only changes how the
        // work is submitted)
        graph_->link.push_back(n.op == GraphNode::Op::Launch ? 1 : 0);
        graph_->nodes.push_back(std::move(n));
        full = graph_->nodes.size() >= kMaxHeld;
    }
    if (full) flush();
    return true;
}

void BatchStream::flush() {
    std::lock_guard order(submit_mu_);
    std::shared_ptr<Graph> g;
    {
        std::lock_guard lock(mu_);
        if (graph_->nodes.empty()) return;
        g = std::exchange(graph_, empty_graph(dev_));
    }
    target_->replay(g);
}

void BatchStream::close() {
    {
        std::lock_guard lock(mu_);
        closed_ = true;
    }
    flush();
}

void BatchStream::launch(const LaunchRequest& req, spyre_launch_stats* stats) {
    // Statistics are written when the launch completes, and the launches of a synchronous
    // call are waited for by that call: both go now.
    if (!stats && !current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::Launch;
        n.launch = req;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->launch(req, stats);
}

void BatchStream::copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                            uint64_t src_offset, uint64_t size) {
    if (!current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::CopyDtoD;
        n.dst = dst, n.dst_offset = dst_offset, n.src = src, n.src_offset = src_offset;
        n.size = size;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->copy_dtod(dst, dst_offset, src, src_offset, size);
}

void BatchStream::copy_3d(const Copy3D& c) {
    if (c.src.buf && c.dst.buf && !current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::Copy3D;
        n.copy = c;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->copy_3d(c);
}

void BatchStream::copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                            uint64_t size) {
    flush();
    target_->copy_htod(dst, dst_offset, src, size);
}

void BatchStream::copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) {
    flush();
    target_->copy_dtoh(dst, src, src_offset, size);
}

// Held like a copy between buffers; the replay checks that the peer is still there (a lost
// peer fails it with DEVICE_LOST naming the peer, as when queued alone).
void BatchStream::copy_peer(const PeerCopy& c) {
    if (!current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::CopyPeer;
        n.peer = c;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->copy_peer(c);
}

// Held without a pattern block: the simulator replays a fill in place, the kernel backend
// writes the blocks into host memory of the replay's jobs. Fills a backend would rather run
// otherwise (spyre.ko: the fill program from 8 MiB) end the submission.
void BatchStream::fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
                       uint32_t pattern_size) {
    if (dev_->holds_fill(size) && !current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::Fill;
        n.dst = dst, n.dst_offset = offset, n.size = size;
        n.pattern = pattern, n.pattern_size = pattern_size;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->fill(dst, offset, size, pattern, pattern_size);
}

void BatchStream::host_func(void (*fn)(void*), void* user) {
    flush();
    target_->host_func(fn, user);
}

// Semaphore operations are held in order with the rest: the replay queues a write after the
// batch's earlier work, and a wait holds the batch's later work (on the kernel backend the
// commands share the batch's jobs; the simulator's worker blocks in the replay).
void BatchStream::write_value(const SemOp& s) {
    if (!current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::SemWrite;
        n.sem = s;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->write_value(s);
}

void BatchStream::wait_value(const SemOp& s) {
    if (!current_op()) {
        GraphNode n;
        n.op = GraphNode::Op::SemWait;
        n.sem = s;
        if (hold(std::move(n))) return;
    }
    flush();
    target_->wait_value(s);
}

MarkerRef BatchStream::record() {
    flush();
    return target_->record();
}

void BatchStream::wait(const MarkerRef& m) {
    flush();
    target_->wait(m);
}

void BatchStream::synchronize() {
    flush();
    target_->synchronize();
}

bool BatchStream::query() {
    flush();
    return target_->query();
}

void BatchStream::run_sync(const std::function<void()>& body) {
    flush();
    target_->run_sync(body);
}

// A graph joins the held work with its launches linked as captured (a replayer's input copies
// and its replay are one submission); one that would overflow the held work goes alone.
void BatchStream::replay(const GraphRef& g) {
    if (!current_op() && g->dev == dev_ && g->nodes.size() <= kMaxHeld &&
        g->link.size() == g->nodes.size()) {
        for (int attempt = 0; attempt < 2; ++attempt) {
            bool held = false, full = false;
            {
                std::lock_guard lock(mu_);
                if (closed_) break;
                if (graph_->nodes.size() + g->nodes.size() <= kMaxHeld) {
                    graph_->nodes.insert(graph_->nodes.end(), g->nodes.begin(), g->nodes.end());
                    graph_->link.insert(graph_->link.end(), g->link.begin(), g->link.end());
                    graph_->launches += g->launches;
                    graph_->random_launches += g->random_launches;
                    held = true;
                    full = graph_->nodes.size() >= kMaxHeld;
                }
            }
            if (held) {
                if (full) flush();
                return;
            }
            flush();  // room for the graph, then hold it
        }
    }
    flush();
    target_->replay(g);
}

}  // namespace spyre
