// The kernel backend: one Spyre card through the spyre driver (one accel fd per card and
// process): its properties, buffer creation, job submission and reaping, pinned host
// allocations, the staging slots and the host-function thread. Streams are in
// kernel/stream.cpp. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "backend.hpp"
#include "bo.hpp"
#include "raii.hpp"
#include "spyre/spyre.h"
#include "spyre_accel.h"
#include "staging.hpp"

namespace spyre {

// Largest single COPY command libspyre emits; longer direct copies become several commands.
inline constexpr uint64_t kMaxCmdBytes = 64ull << 20;

class KernelStream;

// A staging slot: a pinned host BO that a job may be reading or writing until the timeline
// point (syncobj, point) has signalled.
struct KStagingSlot {
    std::unique_ptr<Bo> bo;
    std::byte* ptr = nullptr;
    uint32_t syncobj = 0;  // 0: idle
    uint64_t point = 0;
    bool taken = false;
};

class KernelDevice final : public Device {
  public:
    // Opens device `index` of enumerate_devices(). Throws Error.
    static std::shared_ptr<KernelDevice> open(int index);
    ~KernelDevice() override;

    int fd() const { return fd_.get(); }

    drm_spyre_mem_info query_mem() override;
    drm_spyre_telemetry query_telemetry() override;
    std::vector<drm_spyre_peer> query_peers() override;
    bool alive() override;

    std::unique_ptr<Buffer> alloc(uint64_t size) override {
        return create_bo(size, DRM_SPYRE_BO_DEVICE);
    }

    // BO of `size` bytes; placement DRM_SPYRE_BO_DEVICE or DRM_SPYRE_BO_HOST. Out-of-memory
    // errors say how much is free.
    std::unique_ptr<Bo> create_bo(uint64_t size, uint32_t placement);

    void* host_alloc(uint64_t size) override;
    void host_free(void* ptr) override;

    StreamRef create_stream(int priority, bool is_default) override;
    // Fills below the fill program's size (kernel/stream.cpp), with host buffers for the
    // replay's pattern blocks.
    bool holds_fill(uint64_t size) override;

    // Peer-to-peer (hw 1.6): another kernel-backend card, both with DRM_SPYRE_CAP_P2P.
    bool can_access_peer(Device& peer) override;
    // `bo` of card `exporter` as a PEER BO of this card: exported as a dma-buf (PRIME) on the
    // exporter and imported here on first use, then cached on `bo` (Bo::peer_import).
    std::shared_ptr<Bo> import_peer(Bo& bo, KernelDevice& exporter);
    int export_buffer(Buffer& buf) override { return export_dmabuf(static_cast<Bo&>(buf.root())); }
    BufferRef import_buffer(int dmabuf, uint64_t min_bytes, const std::string& from) override {
        return import_dmabuf(dmabuf, min_bytes, from);
    }
    // `bo` (a DEVICE BO of this card) as a new dma-buf fd (PRIME export; the caller owns it).
    int export_dmabuf(Bo& bo);
    // A dma-buf of another card (`from` names it in errors) as a PEER BO of this card of at
    // least `min_bytes`; the fd stays the caller's.
    std::shared_ptr<Bo> import_dmabuf(int dmabuf, uint64_t min_bytes, const std::string& from);

    // ---- used by KernelStream (kernel/stream.cpp) ----
    int64_t timeout_ns() const { return timeout_ns_; }
    // JOB_WAIT reports each job's start and end on the card's modeled clock (hw 1.7).
    bool job_clock() const { return info_.caps & DRM_SPYRE_CAP_JOB_CLOCK; }
    // The latest job end on the card's clock this process has seen complete (job clock).
    uint64_t observed() const { return observed_.load(std::memory_order_relaxed); }
    void observe(uint64_t t) {
        uint64_t seen = observed_.load(std::memory_order_relaxed);
        while (seen < t && !observed_.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
        }
    }
    // The SUBMIT priority of a stream of libspyre priority `stream_priority`.
    uint32_t submit_priority(int stream_priority) const;
    uint32_t create_syncobj();
    void destroy_syncobj(uint32_t h);
    // Blocks until timeline point `point` of `syncobj` has signalled (no lock held).
    void wait_point(uint32_t syncobj, uint64_t point, const std::string& what);
    uint64_t syncobj_value(uint32_t syncobj);
    // SUBMIT with back-pressure: -EAGAIN/-EBUSY (too many queued jobs) waits for the oldest
    // job of this process and retries. Keeps every unreaped job within the driver's result
    // history. Returns the job id.
    uint64_t submit(drm_spyre_submit& s);
    // Blocks until job_id has finished (JOB_WAIT) and keeps its outcome for reap_job.
    void wait_job(uint64_t job_id, const std::string& what);
    // Outcome of a finished job (polls; the caller knows it has finished). Forgets the job.
    drm_spyre_job_wait reap_job(uint64_t job_id, const std::string& what);
    // Blocking JOB_WAIT; throws only if the wait itself failed.
    drm_spyre_job_wait wait_raw(uint64_t job_id, const std::string& what, int64_t timeout_ns);
    // Every driver call that finds the card gone fails alike: SPYRE_ERROR_DEVICE_LOST, "spyre1
    // was removed or its driver unbound (ENODEV: No such device)". Returns otherwise.
    void fail_if_lost(int err) const;
    [[noreturn]] void fail_job(const drm_spyre_job_wait& w, const std::string& what,
                               const std::string* label = nullptr);

    // A host BO of this device containing [ptr, ptr+size), with the offset of ptr in it.
    Bo* find_host_range(const void* ptr, uint64_t size, uint64_t* offset);

    // Staging slots of chunk_bytes() each, shared by all streams; at most kMaxStagingSlots,
    // then acquire waits for the slot that frees first.
    KStagingSlot* acquire_slot();
    void release_slot(KStagingSlot* slot, uint32_t syncobj, uint64_t point);
    // A stream's syncobj goes away (its work has finished): slots waiting on it are idle.
    void forget_syncobj(uint32_t syncobj);
    uint64_t chunk_bytes();

    // Host functions: run by the completion thread after (syncobj, point).
    void post_host_func(std::shared_ptr<KernelStream> s, uint64_t point, void (*fn)(void*),
                        void* user);
    // Launch batches: flushed by the completion thread once job `job` has finished.
    void post_flush(std::shared_ptr<KernelStream> s, uint64_t job);

  private:
    KernelDevice() = default;

    template <typename T>
    T query(uint32_t param, const char* what);

    void completion_thread();

    UniqueFd fd_;  // first member: destroyed last, after every BO below
    int64_t timeout_ns_ = 0;
    // The driver refused a high-priority SUBMIT (EPERM: no CAP_SYS_NICE); submit at normal.
    std::atomic<bool> high_priority_denied_{false};
    std::atomic<uint32_t> next_ring_{0};
    std::atomic<uint64_t> observed_{0};

    // Unreaped jobs, so that no job falls out of the driver's result history unreaped.
    std::mutex jobs_mu_;
    std::map<uint64_t, drm_spyre_job_wait> unreaped_;  // job id -> outcome once known (status
                                                       // UINT32_MAX: not yet)
    uint64_t last_job_ = 0;

    friend class KernelStream;
    std::mutex staging_mu_;
    std::condition_variable staging_cv_;
    uint64_t chunk_bytes_ = 0;
    std::vector<std::unique_ptr<KStagingSlot>> slots_;

    std::mutex host_mu_;
    std::map<uintptr_t, std::unique_ptr<Bo>> host_allocs_;  // by start address

    // Completion thread for host functions (started on first use).
    struct HostFunc {
        std::shared_ptr<KernelStream> stream;
        uint64_t point;
        void (*fn)(void*);  // null: flush the stream's launch batch after flush_job
        void* user;
        uint64_t flush_job = 0;
    };
    std::mutex cb_mu_;
    std::condition_variable cb_cv_;
    std::deque<HostFunc> cb_queue_;
    bool cb_stop_ = false;
    std::thread cb_thread_;
};

}  // namespace spyre
