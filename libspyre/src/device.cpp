#include "device.hpp"

#include <fcntl.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <format>

#include "enumerate.hpp"
#include "error.hpp"

namespace spyre {

static_assert(SPYRE_DEVICE_CAP_DMA_COPY == DRM_SPYRE_CAP_DMA_COPY);
static_assert(SPYRE_DEVICE_CAP_HOST_BUFFER == DRM_SPYRE_CAP_HOST_BO);
static_assert(SPYRE_DEVICE_CAP_TIMELINE == DRM_SPYRE_CAP_TIMELINE);
static_assert(SPYRE_DEVICE_CAP_TELEMETRY == DRM_SPYRE_CAP_TELEMETRY);
static_assert(SPYRE_DEVICE_CAP_LAUNCH == DRM_SPYRE_CAP_LAUNCH);

namespace {

constexpr int64_t kDefaultJobTimeoutNs = 300ll * 1000 * 1000 * 1000;

int64_t job_timeout_from_env() {
    const char* s = std::getenv("SPYRE_JOB_TIMEOUT_MS");
    if (!s || !*s) return kDefaultJobTimeoutNs;
    char* end = nullptr;
    long long ms = std::strtoll(s, &end, 10);
    if (!end || *end != '\0' || ms <= 0) return kDefaultJobTimeoutNs;
    return ms * 1000 * 1000;
}

int64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// drmIoctl returning 0 or an errno value.
int xioctl(int fd, unsigned long request, void* arg) {
    return drmIoctl(fd, request, arg) == 0 ? 0 : errno;
}

void copy_str(char* dst, size_t n, const std::string& s) { std::snprintf(dst, n, "%s", s.c_str()); }

}  // namespace

std::shared_ptr<Device> open_kernel_device(int index) { return KernelDevice::open(index); }

std::shared_ptr<KernelDevice> KernelDevice::open(int index) {
    auto nodes = enumerate_devices();
    if (nodes.empty()) fail(SPYRE_ERROR_NO_DEVICE, no_device_message());
    if (index < 0 || static_cast<size_t>(index) >= nodes.size())
        fail(SPYRE_ERROR_NO_DEVICE,
             std::format("device index {} out of range: {} Spyre device{} found (valid: 0..{})",
                         index, nodes.size(), nodes.size() == 1 ? "" : "s", nodes.size() - 1));
    const DeviceNode& node = nodes[index];

    std::shared_ptr<KernelDevice> d(new KernelDevice());
    d->name_ = std::format("spyre{}", index);
    int fd = ::open(node.accel_path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == EACCES || err == EPERM)
            fail(SPYRE_ERROR_PERMISSION,
                 std::format("cannot open {} ({}): permission denied; run as root or give your "
                             "user access to the node (e.g. a udev rule or the owning group)",
                             node.accel_path, d->name_));
        if (err == ENOENT)
            fail(SPYRE_ERROR_NO_DEVICE,
                 std::format("cannot open {} ({}): the node does not exist (is devtmpfs "
                             "mounted on /dev?)",
                             node.accel_path, d->name_));
        fail(status_from_errno(err),
             std::format("cannot open {} ({}): {}", node.accel_path, d->name_, errno_text(err)));
    }
    d->fd_.reset(fd);
    d->timeout_ns_ = job_timeout_from_env();

    drmVersionPtr ver = drmGetVersion(fd);
    if (!ver)
        fail(SPYRE_ERROR_IO,
             std::format("DRM_IOCTL_VERSION failed on {}: {}", node.accel_path, errno_text(errno)));
    std::string drv_name(ver->name, ver->name_len);
    std::string drv_date(ver->date ? std::string(ver->date, ver->date_len) : std::string());
    std::string drv_version =
        std::format("{}.{}.{}", ver->version_major, ver->version_minor, ver->version_patchlevel);
    drmFreeVersion(ver);
    if (drv_name != "spyre")
        fail(SPYRE_ERROR_NO_DEVICE,
             std::format("{} is driven by \"{}\", not spyre", node.accel_path, drv_name));

    auto di = d->query<drm_spyre_device_info>(DRM_SPYRE_QUERY_DEVICE_INFO, "device info");
    spyre_device_info& info = d->info_;
    info.index = index;
    copy_str(info.name, sizeof(info.name), d->name_);
    copy_str(info.accel_path, sizeof(info.accel_path), node.accel_path);
    copy_str(info.pci_address, sizeof(info.pci_address), node.pci_address);
    copy_str(info.driver_name, sizeof(info.driver_name), drv_name);
    copy_str(info.driver_version, sizeof(info.driver_version), drv_version);
    copy_str(info.driver_date, sizeof(info.driver_date), drv_date);
    info.pci_vendor = di.pci_vendor;
    info.pci_device = di.pci_device;
    info.pci_revision = di.pci_revision;
    info.hw_version_major = di.hw_version >> 16;
    info.hw_version_minor = di.hw_version & 0xffff;
    info.num_cores = di.num_cores;
    info.num_rings = di.num_rings;
    info.lx_bytes = di.lx_bytes;
    info.stick_bytes = di.stick_bytes;
    info.clock_mhz = di.clock_mhz;
    info.devmem_total = di.devmem_bytes;
    info.max_buffer_bytes = di.max_bo_bytes;
    info.caps = di.caps;  // SPYRE_DEVICE_CAP_* share the bit positions of DRM_SPYRE_CAP_*
    info.backend = SPYRE_BACKEND_KERNEL;

    if (info.num_rings == 0)
        fail(SPYRE_ERROR_DEVICE_ERROR,
             std::format("{} reports no command rings: the card is not usable", d->name_));
    if (info.caps & DRM_SPYRE_CAP_TIMELINE) {
        if (drmSyncobjCreate(fd, 0, &d->timeline_) != 0) d->timeline_ = 0;
    }
    return d;
}

KernelDevice::~KernelDevice() {
    {
        std::lock_guard lock(mu_);
        drain_staging();
        staging_.reset();
    }
    host_allocs_.clear();
    result_bo_.reset();
    if (timeline_) drmSyncobjDestroy(fd_.get(), timeline_);
}

template <typename T>
T KernelDevice::query(uint32_t param, const char* what) {
    T out{};
    drm_spyre_query q{};
    q.param = param;
    q.size = sizeof(T);
    q.data = reinterpret_cast<uintptr_t>(&out);
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_QUERY, &q)) {
        if (err == EINVAL || err == EOPNOTSUPP)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: the driver does not support the {} query ({})", name_, what,
                             errno_text(err)));
        fail(status_from_errno(err),
             std::format("{}: {} query failed ({})", name_, what, errno_text(err)));
    }
    return out;  // a shorter answer from an older driver leaves the tail zeroed
}

drm_spyre_mem_info KernelDevice::query_mem() {
    return query<drm_spyre_mem_info>(DRM_SPYRE_QUERY_MEM_INFO, "memory info");
}

drm_spyre_telemetry KernelDevice::query_telemetry() {
    if (!(info_.caps & DRM_SPYRE_CAP_TELEMETRY))
        fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("{} has no telemetry", name_));
    return query<drm_spyre_telemetry>(DRM_SPYRE_QUERY_TELEMETRY, "telemetry");
}

std::unique_ptr<Bo> KernelDevice::create_bo(uint64_t size, uint32_t placement) {
    const bool host = placement == DRM_SPYRE_BO_HOST;
    drm_spyre_bo_create c{};
    c.size = size;
    c.flags = placement;
    int err = 0;
    if (!host && info_.max_buffer_bytes && size > info_.max_buffer_bytes)
        err = ENOMEM;  // the driver refuses it too; do not bother it
    else
        err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_BO_CREATE, &c);
    if (err) {
        if (err == ENOMEM || err == ENOSPC || err == E2BIG) {
            if (host)
                fail(SPYRE_ERROR_OUT_OF_MEMORY,
                     std::format("out of pinned host memory on {}: asked {} ({})", name_,
                                 format_bytes(size), errno_text(err)));
            std::string detail;
            try {
                auto m = query_mem();
                uint64_t free = m.devmem_total > m.devmem_used ? m.devmem_total - m.devmem_used : 0;
                detail = std::format(", {} free of {}", format_bytes(free),
                                     format_bytes(m.devmem_total));
                if (m.devmem_largest_free < free)
                    detail += std::format(" (largest free block {})",
                                          format_bytes(m.devmem_largest_free));
            } catch (const Error&) {
            }
            if (info_.max_buffer_bytes && size > info_.max_buffer_bytes)
                detail += std::format("; the largest buffer the card supports is {}",
                                      format_bytes(info_.max_buffer_bytes));
            fail(SPYRE_ERROR_OUT_OF_MEMORY, std::format("out of device memory on {}: asked {}{}",
                                                        name_, format_bytes(size), detail));
        }
        fail(status_from_errno(err),
             std::format("{}: creating a {} {} buffer failed ({})", name_, format_bytes(size),
                         host ? "host" : "device", errno_text(err)));
    }
    drm_spyre_bo_info bi{};
    bi.handle = c.handle;
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_BO_INFO, &bi)) {
        drmCloseBufferHandle(fd_.get(), c.handle);
        fail(status_from_errno(err),
             std::format("{}: BO_INFO failed for a new buffer ({})", name_, errno_text(err)));
    }
    return std::make_unique<Bo>(fd_.get(), c.handle, bi, size);
}

void* KernelDevice::host_alloc(uint64_t size) {
    if (!(info_.caps & DRM_SPYRE_CAP_HOST_BO))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: the driver has no pinned host buffers (DRM_SPYRE_CAP_HOST_BO)",
                         name_));
    auto bo = create_bo(size, DRM_SPYRE_BO_HOST);
    void* p = bo->map();
    std::lock_guard lock(host_mu_);
    host_allocs_.emplace(reinterpret_cast<uintptr_t>(p), std::move(bo));
    return p;
}

void KernelDevice::host_free(void* ptr) {
    std::unique_ptr<Bo> bo;
    {
        std::lock_guard lock(host_mu_);
        auto it = host_allocs_.find(reinterpret_cast<uintptr_t>(ptr));
        if (it == host_allocs_.end()) fail_unknown_host_pointer(ptr, name_);
        bo = std::move(it->second);
        host_allocs_.erase(it);
    }
}

Bo* KernelDevice::find_host_range(const void* ptr, uint64_t size, uint64_t* offset) {
    std::lock_guard lock(host_mu_);
    if (host_allocs_.empty()) return nullptr;
    uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    auto it = host_allocs_.upper_bound(p);
    if (it == host_allocs_.begin()) return nullptr;
    --it;
    uint64_t off = p - it->first;
    Bo* bo = it->second.get();
    if (off >= bo->size() || size > bo->size() - off) return nullptr;
    *offset = off;
    return bo;
}

uint64_t KernelDevice::submit(std::span<const drm_spyre_cmd> cmds) {
    drm_spyre_submit s{};
    s.cmds = reinterpret_cast<uintptr_t>(cmds.data());
    s.cmd_count = static_cast<uint32_t>(cmds.size());
    s.cmd_size = sizeof(drm_spyre_cmd);
    s.sync_size = sizeof(drm_spyre_sync);
    s.ring = 0;
    if (timeline_) {
        s.out_sync = timeline_;
        s.out_point = timeline_point_ + 1;
    }
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_SUBMIT, &s)) {
        spyre_status st = status_from_errno(err);
        if (st == SPYRE_ERROR_DEVICE_LOST)
            fail(st,
                 std::format("{} was removed or its driver unbound ({})", name_, errno_text(err)));
        fail(st == SPYRE_ERROR_INVALID_ARGUMENT ? SPYRE_ERROR_INTERNAL : st,
             std::format("{}: the driver refused a job of {} command{} ({})", name_, cmds.size(),
                         cmds.size() == 1 ? "" : "s", errno_text(err)));
    }
    if (timeline_) ++timeline_point_;
    last_job_ = s.job_id;
    return s.job_id;
}

drm_spyre_job_wait KernelDevice::wait_raw(uint64_t job_id, const std::string& what) {
    drm_spyre_job_wait w{};
    w.job_id = job_id;
    w.timeout_ns = monotonic_ns() + timeout_ns_;
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_JOB_WAIT, &w)) {
        if (err == ETIME || err == ETIMEDOUT)
            fail(SPYRE_ERROR_TIMEOUT, std::format("{}: job {} ({}) did not finish within {} s (set "
                                                  "SPYRE_JOB_TIMEOUT_MS to wait longer)",
                                                  name_, job_id, what, timeout_ns_ / 1000000000));
        spyre_status st = status_from_errno(err);
        fail(st == SPYRE_ERROR_INVALID_ARGUMENT ? SPYRE_ERROR_INTERNAL : st,
             std::format("{}: waiting for job {} ({}) failed ({})", name_, job_id, what,
                         errno_text(err)));
    }
    return w;
}

void KernelDevice::fail_job(const drm_spyre_job_wait& w, const std::string& what) {
    const uint64_t job_id = w.job_id;
    switch (w.status) {
        case DRM_SPYRE_JOB_DEVICE_ERROR:
            fail(SPYRE_ERROR_DEVICE_ERROR,
                 std::format("device error on {} in job {} ({}), command {}: hw status {} = {}",
                             name_, job_id, what, w.failed_cmd, w.hw_status,
                             hw_status_text(w.hw_status)));
        case DRM_SPYRE_JOB_TIMEOUT:
            fail(SPYRE_ERROR_TIMEOUT,
                 std::format("{}: job {} ({}) hung and was aborted by the driver (hw status {} = "
                             "{})",
                             name_, job_id, what, w.hw_status, hw_status_text(w.hw_status)));
        case DRM_SPYRE_JOB_ABORTED:
            fail(SPYRE_ERROR_DEVICE_ERROR,
                 std::format("{}: job {} ({}) was aborted by a device reset or removal before "
                             "it ran",
                             name_, job_id, what));
        default:
            fail(SPYRE_ERROR_INTERNAL, std::format("{}: job {} ({}) ended with unknown status {}",
                                                   name_, job_id, what, w.status));
    }
}

void KernelDevice::wait(uint64_t job_id, const std::string& what) {
    drm_spyre_job_wait w = wait_raw(job_id, what);
    if (w.status != DRM_SPYRE_JOB_OK) fail_job(w, what);
}

void KernelDevice::synchronize() {
    std::lock_guard lock(mu_);
    drain_staging();
    if (timeline_ && timeline_point_) {
        uint64_t point = timeline_point_;
        if (drmSyncobjTimelineWait(fd_.get(), &timeline_, &point, 1, monotonic_ns() + timeout_ns_,
                                   DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, nullptr) != 0) {
            int err = errno;
            fail(err == ETIME ? SPYRE_ERROR_TIMEOUT : status_from_errno(err),
                 std::format("{}: waiting for timeline point {} failed ({})", name_, point,
                             errno_text(err)));
        }
    } else if (last_job_) {
        wait(last_job_, "last submitted job");
    }
}

void KernelDevice::drain_staging() noexcept {
    if (!staging_) return;
    for (auto& slot : staging_->slots) {
        if (!slot.job) continue;
        drm_spyre_job_wait w{};
        w.job_id = slot.job;
        w.timeout_ns = monotonic_ns() + timeout_ns_;
        xioctl(fd_.get(), DRM_IOCTL_SPYRE_JOB_WAIT, &w);
        slot.job = 0;
    }
}

StagingPool& KernelDevice::staging() {
    if (!staging_) {
        if (!(info_.caps & DRM_SPYRE_CAP_HOST_BO))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: the driver has no host buffers, so pageable host memory "
                             "cannot be copied",
                             name_));
        auto pool = std::make_unique<StagingPool>();
        pool->chunk_bytes = staging_chunk_bytes_from_env();
        for (unsigned i = 0; i < kDefaultStagingSlots; ++i) {
            StagingSlot slot;
            slot.bo = create_bo(pool->chunk_bytes, DRM_SPYRE_BO_HOST);
            slot.ptr = static_cast<std::byte*>(slot.bo->map());
            pool->slots.push_back(std::move(slot));
        }
        staging_ = std::move(pool);
    }
    return *staging_;
}

}  // namespace spyre
