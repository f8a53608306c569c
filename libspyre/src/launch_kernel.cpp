// Launches on the kernel backend: one DRM_SPYRE_CMD_LAUNCH command per job, its outcome read
// from a slot of the device's launch-result host BO and from JOB_WAIT.
#include <algorithm>
#include <bit>
#include <cstring>
#include <format>
#include <vector>

#include "device.hpp"
#include "error.hpp"

extern "C" {
#include "spyre_hw.h"
}

namespace spyre {

namespace {

constexpr uint32_t kLaunchResultSlots = 8;
constexpr uint64_t kResultSlotBytes = (sizeof(drm_spyre_launch_result) + 63) & ~uint64_t(63);
static_assert(kLaunchResultSlots <= 32);
static_assert(SPYRE_LAUNCH_MAX_ARGS == DRM_SPYRE_LAUNCH_MAX_ARGS);
static_assert(SPYRE_LAUNCH_MAX_CORES == DRM_SPYRE_LAUNCH_MAX_CORES);
static_assert(SPYRE_LAUNCH_MAX_BUFFERS <= DRM_SPYRE_LAUNCH_MAX_BOS);
static_assert(SPYRE_LAUNCH_UNITS == DRM_SPYRE_LAUNCH_UNITS);

}  // namespace

class KernelLaunchJob final : public Job {
  public:
    KernelLaunchJob(KernelDevice* dev, uint64_t job_id, uint32_t slot, std::string what)
        : dev_(dev), job_id_(job_id), slot_(slot), what_(std::move(what)) {}

    ~KernelLaunchJob() override {
        if (!waited_) {  // never waited: free the slot once the job is done
            std::lock_guard lock(dev_->mu_);
            try {
                dev_->wait_raw(job_id_, what_);
            } catch (const Error&) {
            }
            dev_->result_busy_ &= ~(1u << slot_);
        }
    }

    void wait(spyre_launch_stats* stats) override {
        std::lock_guard lock(dev_->mu_);
        // If the wait itself fails (timeout), the job may still write its slot later: the slot
        // stays marked busy for the device's lifetime.
        waited_ = true;
        drm_spyre_job_wait w = dev_->wait_raw(job_id_, what_);
        drm_spyre_launch_result r;
        std::memcpy(&r, dev_->result_ptr_ + slot_ * kResultSlotBytes, sizeof r);
        dev_->result_busy_ &= ~(1u << slot_);
        r.message[sizeof r.message - 1] = '\0';

        if (w.status == DRM_SPYRE_JOB_DEVICE_ERROR && w.hw_status == SPYRE_STATUS_ERR_PROGRAM) {
            int err = r.error ? static_cast<int>(r.error) : static_cast<int>(w.hw_detail);
            if (r.error) fail_program(dev_->name_, err, r.core, r.pc, r.message);
            fail_program(dev_->name_, err, -1, 0, "the driver returned no launch result");
        }
        if (w.status != DRM_SPYRE_JOB_OK) dev_->fail_job(w, what_);
        if (r.error) fail_program(dev_->name_, static_cast<int>(r.error), r.core, r.pc, r.message);
        if (!stats) return;
        stats_from_result(r, dev_->info_.clock_mhz, stats);
    }

  private:
    KernelDevice* dev_;
    uint64_t job_id_;
    uint32_t slot_;
    std::string what_;
    bool waited_ = false;
};

std::unique_ptr<Job> KernelDevice::submit_launch(const LaunchRequest& req) {
    if (!(info_.caps & DRM_SPYRE_CAP_LAUNCH))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: the driver or card cannot run programs (no DRM_SPYRE_CAP_LAUNCH); "
                         "update the spyre driver and the card model, or use SPYRE_BACKEND=sim",
                         name_));
    std::lock_guard lock(mu_);
    if (!result_bo_) {
        auto bo = create_bo(kLaunchResultSlots * kResultSlotBytes, DRM_SPYRE_BO_HOST);
        result_ptr_ = static_cast<std::byte*>(bo->map());
        result_bo_ = std::move(bo);
    }
    uint32_t free_slots = ~result_busy_ & ((1u << kLaunchResultSlots) - 1);
    if (!free_slots)
        fail(SPYRE_ERROR_INTERNAL,
             std::format("{}: more than {} launches in flight", name_, kLaunchResultSlots));
    const uint32_t slot = static_cast<uint32_t>(std::countr_zero(free_slots));
    std::memset(result_ptr_ + slot * kResultSlotBytes, 0, kResultSlotBytes);

    std::vector<uint32_t> handles;
    handles.reserve(req.buffers.size());
    for (const Buffer* b : req.buffers) handles.push_back(static_cast<const Bo*>(b)->handle());

    drm_spyre_launch l{};
    l.num_cores = req.num_cores;
    l.num_args = req.num_args;
    for (uint32_t i = 0; i < req.num_args; ++i) l.args[i] = req.args[i];
    l.bo_handles = reinterpret_cast<uintptr_t>(handles.data());
    l.bo_count = static_cast<uint32_t>(handles.size());
    l.result_handle = result_bo_->handle();
    l.result_offset = slot * kResultSlotBytes;
    l.result_size = sizeof(drm_spyre_launch_result);

    drm_spyre_cmd c{};
    c.op = DRM_SPYRE_CMD_LAUNCH;
    c.src_handle = static_cast<const Bo*>(req.program)->handle();
    c.src_offset = 0;
    c.size = req.program_size;
    c.ext = reinterpret_cast<uintptr_t>(&l);
    c.ext_size = sizeof l;
    std::string what =
        std::format("launch of a {}-instruction program on {} core{}", (req.program_size - 32) / 16,
                    req.num_cores, req.num_cores == 1 ? "" : "s");
    uint64_t job = submit({&c, 1});
    result_busy_ |= 1u << slot;
    return std::make_unique<KernelLaunchJob>(this, job, slot, std::move(what));
}

}  // namespace spyre
