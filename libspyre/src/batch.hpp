// Submission batching (spyre_stream_begin_batch): while a stream batches, a BatchStream stands in
// for it. Launches, copies between buffers, fills the backend holds, peer copies and semaphore
// writes and waits are held in a graph that is replayed on the stream as one submission when the
// batch ends; anything else first replays what is held, so the stream runs the same work in the
// same order. Thread-safe.
#pragma once

#include <memory>
#include <mutex>

#include "backend.hpp"

namespace spyre {

class BatchStream final : public Stream {
  public:
    BatchStream(std::shared_ptr<Device> dev, StreamRef target);

    void copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                   uint64_t size) override;
    void copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) override;
    void copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                   uint64_t src_offset, uint64_t size) override;
    void copy_3d(const Copy3D& c) override;
    void copy_peer(const PeerCopy& c) override;
    void fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
              uint32_t pattern_size) override;
    void launch(const LaunchRequest& req, spyre_launch_stats* stats) override;
    void host_func(void (*fn)(void*), void* user) override;
    void write_value(const SemOp& s) override;
    void wait_value(const SemOp& s) override;
    MarkerRef record() override;
    void wait(const MarkerRef& m) override;
    void synchronize() override;
    bool query() override;
    std::optional<Error> failure() override { return target_->failure(); }
    void run_sync(const std::function<void()>& body) override;
    void replay(const GraphRef& g) override;

    // Queues the held work on the stream, as one replay.
    void flush();
    // The batch ended: queues the held work; later work (a thread that picked this stand-in
    // before the end) goes straight to the stream.
    void close();

    static constexpr size_t kMaxHeld = 256;

  private:
    // Holds n, or (closed) queues it on the stream; false if the caller must queue it.
    bool hold(GraphNode&& n);

    std::shared_ptr<Device> dev_;
    StreamRef target_;
    std::mutex submit_mu_;  // held work leaves in the order it was held
    std::mutex mu_;         // graph_, closed_
    std::shared_ptr<Graph> graph_;
    bool closed_ = false;
};

}  // namespace spyre
