// Synchronous copies. Device <-> device and pinned host <-> device go straight to the DMA
// engine; pageable host memory is staged through the device's pool of host BOs.
#include <algorithm>
#include <cstring>
#include <format>
#include <utility>
#include <vector>

#include "device.hpp"
#include "error.hpp"

namespace spyre {

namespace {

drm_spyre_cmd copy_cmd(const Bo& dst, uint64_t dst_offset, const Bo& src, uint64_t src_offset,
                       uint64_t size) {
    drm_spyre_cmd c{};
    c.op = DRM_SPYRE_CMD_COPY;
    c.src_handle = src.handle();
    c.dst_handle = dst.handle();
    c.src_offset = src_offset;
    c.dst_offset = dst_offset;
    c.size = size;
    return c;
}

}  // namespace

void KernelDevice::copy_direct(Bo& dst, uint64_t dst_offset, Bo& src, uint64_t src_offset,
                               uint64_t size, const char* direction) {
    std::vector<drm_spyre_cmd> cmds;
    uint64_t done = 0;
    while (done < size) {
        cmds.clear();
        uint64_t job_start = done;
        while (done < size && cmds.size() < DRM_SPYRE_MAX_CMDS) {
            uint64_t n = std::min(kMaxCmdBytes, size - done);
            cmds.push_back(copy_cmd(dst, dst_offset + done, src, src_offset + done, n));
            done += n;
        }
        uint64_t job = submit(cmds);
        wait(job, std::format("{} copy of {} at source offset {:#x}, destination offset {:#x}",
                              direction, format_bytes(done - job_start), src_offset + job_start,
                              dst_offset + job_start));
    }
}

void KernelDevice::copy_htod(Buffer& dst_buf, uint64_t dst_offset, const void* src, uint64_t size) {
    Bo& dst = static_cast<Bo&>(dst_buf);
    std::lock_guard lock(mu_);
    uint64_t host_off = 0;
    if (Bo* pinned = find_host_range(src, size, &host_off)) {
        copy_direct(dst, dst_offset, *pinned, host_off, size, "pinned host->device");
        return;
    }
    StagingPool& pool = staging();
    const auto* in = static_cast<const std::byte*>(src);
    ChunkPlan plan(size, dst_offset, pool.chunk_bytes, pool.slots.size());
    try {
        for (uint64_t i = 0; i < plan.count(); ++i) {
            Chunk c = plan.at(i);
            StagingSlot& slot = pool.slots[c.slot];
            if (slot.job) {  // the DMA of chunk i - slots still reads this slot
                uint64_t job = std::exchange(slot.job, 0);
                wait(job, std::format("host->device copy, chunk {} of {}", i - pool.slots.size(),
                                      plan.count()));
            }
            std::memcpy(slot.ptr, in + c.host_offset, c.size);
            drm_spyre_cmd cmd = copy_cmd(dst, c.dev_offset, *slot.bo, 0, c.size);
            slot.job = submit({&cmd, 1});
        }
        for (uint64_t i = plan.count() > pool.slots.size() ? plan.count() - pool.slots.size() : 0;
             i < plan.count(); ++i) {
            StagingSlot& slot = pool.slots[i % pool.slots.size()];
            uint64_t job = std::exchange(slot.job, 0);
            if (job)
                wait(job, std::format("host->device copy of {} to offset {:#x}, chunk {} of {}",
                                      format_bytes(size), dst_offset, i, plan.count()));
        }
    } catch (...) {
        drain_staging();
        throw;
    }
}

void KernelDevice::copy_dtoh(void* dst, Buffer& src_buf, uint64_t src_offset, uint64_t size) {
    Bo& src = static_cast<Bo&>(src_buf);
    std::lock_guard lock(mu_);
    uint64_t host_off = 0;
    if (Bo* pinned = find_host_range(dst, size, &host_off)) {
        copy_direct(*pinned, host_off, src, src_offset, size, "device->pinned host");
        return;
    }
    StagingPool& pool = staging();
    auto* out = static_cast<std::byte*>(dst);
    ChunkPlan plan(size, src_offset, pool.chunk_bytes, pool.slots.size());
    auto issue = [&](uint64_t i) {
        Chunk c = plan.at(i);
        StagingSlot& slot = pool.slots[c.slot];
        drm_spyre_cmd cmd = copy_cmd(*slot.bo, 0, src, c.dev_offset, c.size);
        slot.job = submit({&cmd, 1});
    };
    try {
        // Keep every slot busy: while the CPU drains chunk i, the DMA fills chunk i + 1.
        for (uint64_t i = 0; i < std::min<uint64_t>(plan.count(), pool.slots.size()); ++i) issue(i);
        for (uint64_t i = 0; i < plan.count(); ++i) {
            Chunk c = plan.at(i);
            StagingSlot& slot = pool.slots[c.slot];
            uint64_t job = std::exchange(slot.job, 0);
            wait(job, std::format("device->host copy of {} from offset {:#x}, chunk {} of {}",
                                  format_bytes(size), src_offset, i, plan.count()));
            std::memcpy(out + c.host_offset, slot.ptr, c.size);
            if (i + pool.slots.size() < plan.count()) issue(i + pool.slots.size());
        }
    } catch (...) {
        drain_staging();
        throw;
    }
}

void KernelDevice::copy_dtod(Buffer& dst, uint64_t dst_offset, Buffer& src, uint64_t src_offset,
                             uint64_t size) {
    std::lock_guard lock(mu_);
    copy_direct(static_cast<Bo&>(dst), dst_offset, static_cast<Bo&>(src), src_offset, size,
                "device->device");
}

}  // namespace spyre
