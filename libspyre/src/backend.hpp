// The backend abstraction of libspyre: a Device (one card, shared by every open of it in the
// process), its Buffers and Streams (ordered queues of work, with Markers for events),
// implemented by the kernel backend (src/kernel/: the spyre driver's ioctls) and by the
// in-process simulator backend (src/sim/: simulated cards running the compute engine). api.cpp
// only talks to these interfaces.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "error.hpp"
#include "spyre/spyre.h"
#include "spyre_accel.h"

namespace spyre {

// Device memory of one device. Created by Device::alloc; freed on destruction (when the last
// reference is dropped: queued work holds references to the buffers it uses).
class Buffer {
  public:
    virtual ~Buffer() = default;
    virtual uint64_t size() const = 0;        // bytes the user asked for
    virtual uint64_t alloc_size() const = 0;  // bytes reserved (page rounded)
    virtual uint64_t dev_addr() const = 0;
    virtual void* map() = 0;  // CPU pointer to the whole buffer, mapped once
    // Sub-allocations (suballoc.hpp) live inside a backend buffer: the buffer the backend
    // knows and the offset in it. A backend buffer is its own root.
    virtual Buffer& root() { return *this; }
    virtual uint64_t root_offset() const { return 0; }
};

using BufferRef = std::shared_ptr<Buffer>;

// A launch, validated by api.cpp: buffers are distinct, on this device, num_cores resolved.
struct LaunchRequest {
    BufferRef program;
    uint64_t program_size = 0;
    uint32_t num_cores = 0;  // 1 .. info().num_cores
    uint32_t num_args = 0;
    uint64_t args[SPYRE_LAUNCH_MAX_ARGS] = {};
    std::vector<BufferRef> buffers;
    // who queued it (spyre_push_launch_label), named by its errors; null when unlabeled
    std::shared_ptr<const std::string> label;
    // SPYRE_LAUNCH_RANDOM_STREAM: args[random_arg] is a random stream's seed and the next its
    // offset (spyre_graph_launch_random replaces them); -1 for other launches
    int32_t random_arg = -1;
};

// One side of a strided copy: a device buffer (buf != nullptr) or host memory.
struct CopySide {
    BufferRef buf;
    uint64_t offset = 0;        // in buf
    std::byte* host = nullptr;  // when buf is null
    uint64_t pitch = 0;         // bytes between rows
    uint64_t slice_pitch = 0;   // bytes between slices
};

// A 3-D strided copy (2-D: depth 1), validated by api.cpp: ranges inside the buffers.
struct Copy3D {
    CopySide src, dst;
    uint64_t width = 0, height = 0, depth = 0;  // bytes per row, rows, slices
};

class Device;

// A copy between a buffer of the stream's card and one of a peer card, done by the stream's
// card's DMA engine (api.cpp checked the ranges, the capability and that peer access is
// enabled from the stream's card to the peer).
struct PeerCopy {
    BufferRef local, peer;  // `local` on the stream's card, `peer` on peer_dev
    uint64_t local_offset = 0, peer_offset = 0, size = 0;
    std::shared_ptr<Device> peer_dev;
    bool to_peer = true;  // local -> peer (a write into the peer), else peer -> local
    // Instead of peer/peer_dev: a PEER buffer of this card imported from another process's
    // dma-buf (peer_fd.hpp; kernel backend, to_peer only).
    BufferRef imported;
};

// A device-side semaphore (spyre_stream_write_value / spyre_stream_wait_value), validated by
// api.cpp: SPYRE_SEMAPHORE_BYTES at a 16-byte aligned `offset` inside `buf`, the card has
// SPYRE_DEVICE_CAP_SEMAPHORE. A write's `buf` may be on a peer card (`peer_dev`, peer access
// enabled from the stream's card, as for PeerCopy); a wait's is on the stream's card.
struct SemOp {
    BufferRef buf;
    uint64_t offset = 0;
    uint64_t value = 0;
    uint32_t timeout_us = 0;           // wait only: <= SPYRE_SEMAPHORE_WAIT_MAX_US
    std::shared_ptr<Device> peer_dev;  // write only: buf's card when it is not the stream's
    // Write only, instead of buf: a PEER buffer of the stream's card imported from another
    // process's dma-buf (peer_fd.hpp; kernel backend), `offset` inside it.
    BufferRef imported;
};

// The completion point of an event record: all work its stream had queued before it.
class Marker {
  public:
    virtual ~Marker() = default;
    virtual bool done() = 0;  // non-blocking
    virtual void wait() = 0;  // blocks until done; no library lock is held while waiting
    // Valid once done(): the modeled device time of this point in cycles (kernel backend: the
    // stream's jobs' cycles summed since it was created; simulator: the end of the stream's
    // last job on its card's timeline, sim/timeline.hpp), and CLOCK_MONOTONIC ns at which
    // completion was observed.
    virtual uint64_t cycles() = 0;
    virtual int64_t time_ns() = 0;
    virtual const void* stream_id() const = 0;
    // Markers with the same clock have comparable cycles(): one stream's (kernel backend), one
    // card's (simulator).
    virtual const void* clock_id() const { return stream_id(); }
};
using MarkerRef = std::shared_ptr<Marker>;

class Device;

// One operation of a captured graph (graph.cpp) or of a batch (batch.hpp): what the stream
// call would have queued. Semaphore operations and peer copies are held by batches only (a
// capture refuses them).
struct GraphNode {
    enum class Op {
        Launch,
        CopyDtoD,
        Copy3D,
        Fill,
        Record,
        SemWrite,  // Stream::write_value(sem)
        SemWait,   // Stream::wait_value(sem)
        CopyPeer,  // Stream::copy_peer(peer)
    } op = Op::Launch;
    LaunchRequest launch;                               // Launch
    SemOp sem;                                          // SemWrite, SemWait
    PeerCopy peer;                                      // CopyPeer
    BufferRef dst, src;                                 // CopyDtoD, Fill (dst)
    uint64_t dst_offset = 0, src_offset = 0, size = 0;  // CopyDtoD, Fill
    Copy3D copy;                                        // Copy3D (device to device)
    uint64_t pattern = 0;                               // Fill
    uint32_t pattern_size = 0;
    // Fill on the kernel backend: kFillBlock bytes (or the fill's size, if smaller) of the
    // pattern from phase 0, which a replay copies over the destination. A capture makes it on
    // the card; a batch leaves it null and the replay writes it into a staging slot.
    BufferRef pattern_block;
    // Record: receives the marker of the replay (an event recorded during the capture).
    std::function<void(const MarkerRef&)> on_record;
};
inline constexpr uint64_t kFillBlock = 4096;

// A captured sequence of work; replayed by Stream::replay. Immutable once captured; its nodes
// hold the programs and buffers they use.
struct Graph {
    std::shared_ptr<Device> dev;
    std::vector<GraphNode> nodes;
    uint64_t launches = 0;
    uint64_t random_launches = 0;  // launches with a random stream (LaunchRequest::random_arg)
    // Linked launches (CaptureStream::finish): link[i] > 0 is the number of consecutive launch
    // nodes from node i that a replay runs as one job on backends that can (the first of the
    // run; 0 for the others and for non-launch nodes).
    std::vector<uint32_t> link;
};
using GraphRef = std::shared_ptr<const Graph>;

// Status of one synchronous operation (Stream::run_sync): its own error, separate from the
// stream's sticky error. Guarded by the stream's lock.
struct OpStatus {
    std::optional<Error> err;
    uint64_t last_point = 0;  // kernel: timeline point of its last job
    uint64_t last_seq = 0;    // simulator: sequence number of its last item
    int outstanding = 0;      // parts deferred behind a host function, not yet run
};
// The synchronous operation the calling thread is inside (Stream::run_sync), or null.
std::shared_ptr<OpStatus>& current_op();

// An ordered queue of work on a device. All calls are thread-safe; work is executed in the
// order it was queued. The first failure since the last synchronize() is kept ("sticky") and
// thrown by synchronize(); later work still runs.
class Stream {
  public:
    virtual ~Stream() = default;
    virtual void copy_htod(const BufferRef& dst, uint64_t dst_offset, const void* src,
                           uint64_t size) = 0;
    virtual void copy_dtoh(void* dst, const BufferRef& src, uint64_t src_offset, uint64_t size) = 0;
    virtual void copy_dtod(const BufferRef& dst, uint64_t dst_offset, const BufferRef& src,
                           uint64_t src_offset, uint64_t size) = 0;
    virtual void copy_3d(const Copy3D& c) = 0;
    // Card to card (hw 1.6); backends without peer-to-peer DMA refuse it.
    virtual void copy_peer(const PeerCopy& c);
    // Device-side semaphores (SemOp); backends and stand-ins that cannot queue them refuse
    // them (NOT_SUPPORTED).
    virtual void write_value(const SemOp& s);
    virtual void wait_value(const SemOp& s);
    // Fills size bytes with a repeated pattern of pattern_size (1, 2, 4 or 8) bytes.
    virtual void fill(const BufferRef& dst, uint64_t offset, uint64_t size, uint64_t pattern,
                      uint32_t pattern_size) = 0;
    // stats (may be NULL) is written when the launch completes successfully.
    virtual void launch(const LaunchRequest& req, spyre_launch_stats* stats) = 0;
    virtual void host_func(void (*fn)(void*), void* user) = 0;
    virtual MarkerRef record() = 0;
    virtual void wait(const MarkerRef& m) = 0;
    // Waits for all queued work; throws the first error since the last synchronize.
    virtual void synchronize() = 0;
    // true if all queued work finished; throws like synchronize() when it did and failed.
    virtual bool query() = 0;
    // The first failure of the stream's finished work since the last synchronize(), left for
    // synchronize() to throw. Safe in a host function of the stream (the collectives ask it
    // before they tell a peer that data sent on the stream is there).
    virtual std::optional<Error> failure() = 0;
    // Runs body (which queues work on this stream) and waits for that work only; throws the
    // first error of that work (not of earlier asynchronous work).
    virtual void run_sync(const std::function<void()>& body) = 0;
    // Queues the work of a captured graph, in order, as one submission where the backend can
    // (the kernel backend: one SUBMIT per DRM_SPYRE_MAX_CMDS commands and
    // DRM_SPYRE_FILE_MAX_LAUNCHES launches; the simulator: one work item). The events recorded
    // during the capture get markers after all of the graph's work.
    virtual void replay(const GraphRef& g) = 0;
    int priority() const { return priority_; }
    uint32_t ring() const { return ring_; }
    // Whether this stream's work and `other`'s go through one in-order queue of the card, so
    // that a device-side wait (wait_value) of one holds the other back too.
    virtual bool shares_queue_with(const Stream& other) const { return &other == this; }

  protected:
    int priority_ = 0;
    uint32_t ring_ = 0;
};
using StreamRef = std::shared_ptr<Stream>;

// Counters of the runtime (spyre_runtime_stats).
struct RuntimeCounters {
    std::atomic<uint64_t> jobs_submitted{0}, busy_retries{0}, backpressure_waits{0};
    std::atomic<uint64_t> program_cache_hits{0}, program_cache_misses{0};
    std::atomic<uint64_t> pinned_program_evictions{0};
};

class SubAllocator;

class Device : public std::enable_shared_from_this<Device> {
  public:
    virtual ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const spyre_device_info& info() const { return info_; }
    const std::string& name() const { return name_; }

    virtual drm_spyre_mem_info query_mem() = 0;
    virtual drm_spyre_telemetry query_telemetry() = 0;
    // Per core, the modeled cycles from each launch's start to the core's halt, summed since
    // the card came up; empty when the backend cannot see them (management.cpp).
    virtual std::vector<uint64_t> core_active_cycles() { return {}; }
    // Every other card of the backend as DRM_SPYRE_QUERY_TOPOLOGY describes it (accel_minor:
    // the simulator's device index there); empty when the backend cannot tell.
    virtual std::vector<drm_spyre_peer> query_peers() { return {}; }

    // Device memory of `size` (> 0) bytes; out-of-memory errors say how much is free.
    virtual std::unique_ptr<Buffer> alloc(uint64_t size) = 0;

    virtual void* host_alloc(uint64_t size) = 0;
    virtual void host_free(void* ptr) = 0;

    // A new stream; priority < 0 is high priority. The default stream is created with
    // is_default (ring 0).
    virtual StreamRef create_stream(int priority, bool is_default = false) = 0;

    // ---- peer-to-peer (hw 1.6) ----
    // Whether this card's DMA engine can reach `peer`'s memory (both CAP_P2P, distinct cards
    // of one backend).
    virtual bool can_access_peer(Device& /*peer*/) { return false; }
    // Records that copies issued on this card may reach `peer` (checked by can_access_peer
    // first, api.cpp); peer_access_enabled answers for a copy.
    void enable_peer_access(const std::shared_ptr<Device>& peer);
    bool peer_access_enabled(const Device& peer);
    // Buffers shared with another process (peer_fd.hpp; the kernel backend, else
    // NOT_SUPPORTED): the root of `buf` (a device buffer of this card) as a new dma-buf fd the
    // caller owns; and another card's dma-buf as a PEER buffer of this card (the fd stays the
    // caller's; `from` names its owner in errors).
    virtual int export_buffer(Buffer& buf);
    virtual BufferRef import_buffer(int dmabuf, uint64_t min_bytes, const std::string& from);

    // Waits for all work queued on the device's streams (not thrown: errors stay with them).
    void synchronize();

    // ---- runtime services shared by the backends (runtime.cpp) ----
    // The device's default stream (created on first use).
    StreamRef default_stream();
    // Streams created through create_stream, and batching stand-ins (batch.hpp), register
    // here (for synchronize()).
    void register_stream(const StreamRef& s);
    // A buffer of `size` bytes: small sizes come from the sub-allocator's slabs.
    BufferRef alloc_buffer(uint64_t size);
    SubAllocator& suballocator();
    // Program cache: the device buffer holding an identical image, or a new one.
    BufferRef load_program_image(const void* image, size_t size);
    // Puts a program image into its new buffer (load_program_image): a copy to the card; the
    // simulator's timing-only mode keeps it on the host (its device memory is never written).
    virtual void write_program(const BufferRef& buf, const void* image, size_t size);
    // The op library's programs: `image` loaded once and kept while this device lives (not
    // longer: a lost or closed card takes its programs with it), at most kMaxPinnedPrograms of
    // them, the least recently launched unpinned first (a launch in flight or a captured graph
    // holds its program's buffer itself). `id` names an image that never changes for the life
    // of the process (a cached plan's, ops::PlanEntry::id).
    BufferRef pinned_program(uint64_t id, const std::vector<uint8_t>& image);
    size_t pinned_program_count();
    static constexpr size_t kMaxPinnedPrograms = 1024;
    // False once the card is known to be gone (unplugged, driver unbound): a new open must not
    // return this device.
    virtual bool alive() { return true; }
    // Throws SPYRE_ERROR_DEVICE_LOST for a card known to be gone without asking the driver
    // (the simulator's simulated loss); every allocation asks, the sub-allocator's too.
    virtual void check_present() {}
    RuntimeCounters& counters() { return counters_; }
    // The most consecutive launches of a graph the backend runs as one linked job (1: none
    // are linked), and the most windows (buffers) such a job may list.
    virtual uint32_t max_linked_launches() { return 1; }
    virtual uint32_t max_linked_windows() { return 0; }
    // Whether a batch (BatchStream) holds a fill of `size` bytes, which Stream::replay then
    // runs without a pattern block (the simulator fills in place; the kernel backend writes
    // the block into a staging slot of the replay). False: the fill ends the submission.
    virtual bool holds_fill(uint64_t /*size*/) { return false; }

  protected:
    Device();
    // Drains and drops the default stream, the sub-allocator and the program cache. Called
    // first by each backend's destructor, while the backend's resources still exist.
    void release_runtime();
    spyre_device_info info_{};
    std::string name_;
    RuntimeCounters counters_;

  private:
    std::mutex rt_mu_;
    std::vector<std::weak_ptr<Device>> peers_;  // peer access enabled (under rt_mu_)
    StreamRef default_stream_;
    std::vector<std::weak_ptr<Stream>> streams_;
    std::shared_ptr<SubAllocator> suballoc_;
    struct CachedImage {
        std::vector<uint8_t> bytes;
        std::weak_ptr<Buffer> buf;
    };
    std::multimap<uint64_t, CachedImage> program_cache_;  // by content hash
    struct PinnedProgram {
        BufferRef buf;
        std::list<uint64_t>::iterator lru;  // in pinned_lru_, most recently launched first
    };
    std::unordered_map<uint64_t, PinnedProgram> pinned_programs_;
    std::list<uint64_t> pinned_lru_;
};

// ---- backend selection (backend.cpp) ----

// $SPYRE_BACKEND: unset/"" /"kernel" -> KERNEL, "sim" -> SIM; anything else throws
// INVALID_ARGUMENT.
spyre_backend selected_backend();
// Devices of the selected backend; throws NO_DEVICE (with advice) if there are none.
int device_count();
// The process-wide Device of card `index` of the selected backend: every open of one card
// shares it (one driver file), so buffers, programs and streams work across handles.
std::shared_ptr<Device> open_device(int index);

// Backend entry points.
std::shared_ptr<Device> open_kernel_device(int index);
int sim_device_count();  // from $SPYRE_SIM_DEVICES; throws INVALID_ARGUMENT on a bad value
std::shared_ptr<Device> open_sim_device(int index);
void sim_inject_fault(int index, spyre_sim_fault fault, uint64_t after_launches);

// ---- helpers shared by the backends (backend.cpp) ----

// Peak fp16 multiply-accumulates per cycle of one core: 2 corelets x 8 rows x 64 lanes.
inline constexpr uint64_t kMacsPerCoreCycle = 2 * 8 * 64;

// Fills the derived fields of *s (time_ns, peak_macs_per_cycle, utilization, clock_mhz) from
// total_cycles, macs, num_cores and mac_peak: the per-core MAC peak of the data types the launch
// used (engine.h; 2048 for int8, 256 for fp32), or 0 for "no matrix work / not reported" (a card
// model without the field), which means the fp16 peak.
void finish_stats(spyre_launch_stats* s, uint32_t clock_mhz, uint32_t mac_peak);

// Launch statistics from a launch result: the driver's drm_spyre_launch_result and the engine's
// spyre_engine_result share these field names.
template <class Result>
void stats_from_result(const Result& r, uint32_t clock_mhz, spyre_launch_stats* stats) {
    *stats = spyre_launch_stats{};
    stats->total_cycles = r.total_cycles;
    stats->ddr_read_bytes = r.ddr_read_bytes;
    stats->ddr_write_bytes = r.ddr_write_bytes;
    stats->ring_bytes = r.ring_bytes;
    stats->instructions = r.instructions;
    stats->macs = r.macs;
    stats->num_cores = std::min<uint32_t>(r.num_cores, SPYRE_LAUNCH_MAX_CORES);
    for (uint32_t c = 0; c < stats->num_cores; ++c) {
        for (int u = 0; u < SPYRE_LAUNCH_UNITS; ++u) stats->cores[c].busy[u] = r.cores[c].busy[u];
        stats->cores[c].end_cycle = r.cores[c].end_cycle;
    }
    finish_stats(stats, clock_mhz, r.mac_peak);
}

// The error of a faulted launch: SPYRE_ERROR_PROGRAM (or another status for budget/memory
// errors) with "program fault on spyre0: core 3 at instruction 12: <reason> (DDR_WINDOW)",
// and "; launched by <label>" for a labeled launch.
[[noreturn]] void fail_program(const std::string& device, int engine_error, int core, uint64_t pc,
                               const char* message, const std::string* label = nullptr);

// The error of spyre_host_free() for a pointer the device did not hand out.
[[noreturn]] void fail_unknown_host_pointer(const void* ptr, const std::string& device);

// CLOCK_MONOTONIC in ns.
int64_t monotonic_ns();

// Parses a byte count with an optional K/M/G/T suffix (powers of 1024, "KiB" etc. too).
bool parse_bytes(const char* s, uint64_t* out);

}  // namespace spyre
