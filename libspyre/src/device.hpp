// The kernel backend: one open Spyre device through the spyre driver: the accel fd, its
// properties, buffer creation, job submission and waiting, pinned host allocations, the staging
// pool and launches. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "backend.hpp"
#include "bo.hpp"
#include "raii.hpp"
#include "spyre/spyre.h"
#include "spyre_accel.h"
#include "staging.hpp"

namespace spyre {

// Largest single COPY command libspyre emits; longer direct copies become several commands.
inline constexpr uint64_t kMaxCmdBytes = 64ull << 20;

class KernelDevice final : public Device {
  public:
    // Opens device `index` of enumerate_devices(). Throws Error.
    static std::shared_ptr<KernelDevice> open(int index);
    ~KernelDevice() override;

    int fd() const { return fd_.get(); }

    drm_spyre_mem_info query_mem() override;
    drm_spyre_telemetry query_telemetry() override;

    std::unique_ptr<Buffer> alloc(uint64_t size) override {
        return create_bo(size, DRM_SPYRE_BO_DEVICE);
    }

    // BO of `size` bytes; placement DRM_SPYRE_BO_DEVICE or DRM_SPYRE_BO_HOST. Out-of-memory
    // errors say how much is free.
    std::unique_ptr<Bo> create_bo(uint64_t size, uint32_t placement);

    void* host_alloc(uint64_t size) override;
    void host_free(void* ptr) override;

    // Synchronous copies; arguments already validated against the buffer sizes. The buffers
    // are Bos of this device.
    void copy_htod(Buffer& dst, uint64_t dst_offset, const void* src, uint64_t size) override;
    void copy_dtoh(void* dst, Buffer& src, uint64_t src_offset, uint64_t size) override;
    void copy_dtod(Buffer& dst, uint64_t dst_offset, Buffer& src, uint64_t src_offset,
                   uint64_t size) override;

    void synchronize() override;

    std::unique_ptr<Job> submit_launch(const LaunchRequest& req) override;

  private:
    friend class KernelLaunchJob;
    KernelDevice() = default;

    template <typename T>
    T query(uint32_t param, const char* what);

    // Queues one job; returns its job id. Caller holds mu_.
    uint64_t submit(std::span<const drm_spyre_cmd> cmds);
    // Waits for a job; throws on failure with `what` describing the job. Caller holds mu_.
    void wait(uint64_t job_id, const std::string& what);
    // Waits for a job and returns its outcome; throws only if the wait itself failed (timeout,
    // ioctl error). Caller holds mu_.
    drm_spyre_job_wait wait_raw(uint64_t job_id, const std::string& what);
    // Throws the error of a failed job outcome. Caller holds mu_.
    [[noreturn]] void fail_job(const drm_spyre_job_wait& w, const std::string& what);
    // Waits for every job still using a staging slot, ignoring errors. Caller holds mu_.
    void drain_staging() noexcept;
    StagingPool& staging();

    // A host BO of this device containing [ptr, ptr+size), with the offset of ptr in it.
    Bo* find_host_range(const void* ptr, uint64_t size, uint64_t* offset);

    // Direct copy between two BOs, split into commands of at most kMaxCmdBytes.
    void copy_direct(Bo& dst, uint64_t dst_offset, Bo& src, uint64_t src_offset, uint64_t size,
                     const char* direction);

    UniqueFd fd_;  // first member: destroyed last, after every BO below
    int64_t timeout_ns_ = 0;

    std::mutex mu_;  // serialises submissions, waits and the staging pool
    uint32_t timeline_ = 0;
    uint64_t timeline_point_ = 0;
    uint64_t last_job_ = 0;
    std::unique_ptr<StagingPool> staging_;

    // Launch results: a host BO of kLaunchResultSlots drm_spyre_launch_result slots, created
    // on the first launch; a slot is owned by one submitted launch until it is waited.
    std::unique_ptr<Bo> result_bo_;
    std::byte* result_ptr_ = nullptr;
    uint32_t result_busy_ = 0;  // bit i: slot i in use

    std::mutex host_mu_;
    std::map<uintptr_t, std::unique_ptr<Bo>> host_allocs_;  // by start address
};

}  // namespace spyre
