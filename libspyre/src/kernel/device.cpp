#include "kernel/device.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <format>

#include "enumerate.hpp"
#include "error.hpp"
#include "spyre_hw.h"

namespace spyre {

static_assert(SPYRE_DEVICE_CAP_DMA_COPY == DRM_SPYRE_CAP_DMA_COPY);
static_assert(SPYRE_DEVICE_CAP_HOST_BUFFER == DRM_SPYRE_CAP_HOST_BO);
static_assert(SPYRE_DEVICE_CAP_TIMELINE == DRM_SPYRE_CAP_TIMELINE);
static_assert(SPYRE_DEVICE_CAP_TELEMETRY == DRM_SPYRE_CAP_TELEMETRY);
static_assert(SPYRE_DEVICE_CAP_LAUNCH == DRM_SPYRE_CAP_LAUNCH);
static_assert(SPYRE_DEVICE_CAP_VM == DRM_SPYRE_CAP_VM);
static_assert(SPYRE_DEVICE_CAP_JOB_CLOCK == DRM_SPYRE_CAP_JOB_CLOCK);
static_assert(SPYRE_DEVICE_CAP_SEMAPHORE == DRM_SPYRE_CAP_SEMAPHORE);
static_assert(SPYRE_SEMAPHORE_BYTES == DRM_SPYRE_SEM_SIZE);
static_assert(SPYRE_SEMAPHORE_WAIT_MAX_US == DRM_SPYRE_SEM_WAIT_MAX_US);

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

// drmIoctl returning 0 or an errno value.
int xioctl(int fd, unsigned long request, void* arg) {
    return drmIoctl(fd, request, arg) == 0 ? 0 : errno;
}

// An ioctl that returns EAGAIN to the caller: drmIoctl retries EAGAIN in a busy loop, which
// for SUBMIT (EAGAIN: this file's budget of jobs in flight is used up) would spin a CPU until
// a job finishes instead of waiting for one (KernelDevice::submit).
int ioctl_no_eagain_retry(int fd, unsigned long request, void* arg) {
    int ret;
    do {
        ret = ::ioctl(fd, request, arg);
    } while (ret == -1 && errno == EINTR);
    return ret == 0 ? 0 : errno;
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
    if (!(info.caps & DRM_SPYRE_CAP_TIMELINE))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: the driver has no timeline syncobjs (DRM_SPYRE_CAP_TIMELINE), "
                         "which streams need; update the spyre driver",
                         d->name_));
    return d;
}

KernelDevice::~KernelDevice() {
    release_runtime();
    {
        std::lock_guard lock(cb_mu_);
        cb_stop_ = true;
    }
    cb_cv_.notify_all();
    if (cb_thread_.joinable()) cb_thread_.join();
    // Jobs still using staging slots finish before the slots go away.
    for (auto& s : slots_)
        if (s->syncobj) {
            try {
                wait_point(s->syncobj, s->point, "staging slot");
            } catch (const Error&) {
            }
        }
    slots_.clear();
    host_allocs_.clear();
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
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: {} query failed ({})", name_, what, errno_text(err)));
    }
    return out;  // a shorter answer from an older driver leaves the tail zeroed
}

drm_spyre_mem_info KernelDevice::query_mem() {
    return query<drm_spyre_mem_info>(DRM_SPYRE_QUERY_MEM_INFO, "memory info");
}

bool KernelDevice::alive() {
    drm_spyre_mem_info m{};
    drm_spyre_query q{};
    q.param = DRM_SPYRE_QUERY_MEM_INFO;
    q.size = sizeof(m);
    q.data = reinterpret_cast<uintptr_t>(&m);
    const int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_QUERY, &q);
    return status_from_errno(err) != SPYRE_ERROR_DEVICE_LOST;
}

drm_spyre_telemetry KernelDevice::query_telemetry() {
    if (!(info_.caps & DRM_SPYRE_CAP_TELEMETRY))
        fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("{} has no telemetry", name_));
    return query<drm_spyre_telemetry>(DRM_SPYRE_QUERY_TELEMETRY, "telemetry");
}

std::vector<drm_spyre_peer> KernelDevice::query_peers() {
    // Cards come and go between the sizing query and the answer: retry until it fits.
    for (int attempt = 0; attempt < 8; ++attempt) {
        const auto head = query<drm_spyre_topology>(DRM_SPYRE_QUERY_TOPOLOGY, "topology");
        std::vector<std::byte> buf(sizeof(drm_spyre_topology) +
                                   (head.num_peers + 1) * sizeof(drm_spyre_peer));
        drm_spyre_query q{};
        q.param = DRM_SPYRE_QUERY_TOPOLOGY;
        q.size = static_cast<uint32_t>(buf.size());
        q.data = reinterpret_cast<uintptr_t>(buf.data());
        if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_QUERY, &q)) {
            fail_if_lost(err);
            fail(status_from_errno(err),
                 std::format("{}: topology query failed ({})", name_, errno_text(err)));
        }
        drm_spyre_topology t;
        std::memcpy(&t, buf.data(), sizeof t);
        if (t.num_peers > head.num_peers + 1) continue;  // a card came meanwhile
        std::vector<drm_spyre_peer> peers(t.num_peers);
        std::memcpy(peers.data(), buf.data() + sizeof t, t.num_peers * sizeof(drm_spyre_peer));
        return peers;
    }
    fail(SPYRE_ERROR_BUSY,
         std::format("{}: the cards kept changing during the topology query", name_));
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
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: creating a {} {} buffer failed ({})", name_, format_bytes(size),
                         host ? "host" : "device", errno_text(err)));
    }
    drm_spyre_bo_info bi{};
    bi.handle = c.handle;
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_BO_INFO, &bi)) {
        drmCloseBufferHandle(fd_.get(), c.handle);
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: BO_INFO failed for a new buffer ({})", name_, errno_text(err)));
    }
    return std::make_unique<Bo>(fd_.get(), c.handle, bi, size);
}

bool KernelDevice::can_access_peer(Device& peer) {
    auto* k = dynamic_cast<KernelDevice*>(&peer);
    return k && k != this && (info_.caps & DRM_SPYRE_CAP_P2P) &&
           (k->info_.caps & DRM_SPYRE_CAP_P2P);
}

std::shared_ptr<Bo> KernelDevice::import_peer(Bo& bo, KernelDevice& exporter) {
    return bo.peer_import(this, [&] {
        UniqueFd dmabuf_fd(exporter.export_dmabuf(bo));  // the import holds its own reference
        std::string from = std::format("peer {}", exporter.name());
        return import_dmabuf(dmabuf_fd.get(), bo.alloc_size(), from);
    });
}

int KernelDevice::export_dmabuf(Bo& bo) {
    int dmabuf = -1;
    if (drmPrimeHandleToFD(fd_.get(), bo.handle(), DRM_CLOEXEC | DRM_RDWR, &dmabuf) != 0) {
        const int err = errno;
        if (status_from_errno(err) == SPYRE_ERROR_DEVICE_LOST)
            fail(SPYRE_ERROR_DEVICE_LOST,
                 std::format("{} was removed or its driver unbound: its {} buffer cannot be "
                             "shared with another card ({})",
                             name_, format_bytes(bo.alloc_size()), errno_text(err)));
        fail(err == EOPNOTSUPP ? SPYRE_ERROR_NOT_SUPPORTED : status_from_errno(err),
             std::format("{}: exporting a {} buffer as a dma-buf failed ({})", name_,
                         format_bytes(bo.alloc_size()), errno_text(err)));
    }
    return dmabuf;
}

std::shared_ptr<Bo> KernelDevice::import_dmabuf(int dmabuf, uint64_t min_bytes,
                                                const std::string& from) {
    uint32_t handle = 0;
    if (drmPrimeFDToHandle(fd_.get(), dmabuf, &handle) != 0) {
        const int err = errno;
        fail(status_from_errno(err),
             std::format("{}: importing a {} buffer of {} failed ({})", name_,
                         format_bytes(min_bytes), from, errno_text(err)));
    }
    drm_spyre_bo_info bi{};
    bi.handle = handle;
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_BO_INFO, &bi)) {
        drmCloseBufferHandle(fd_.get(), handle);
        fail(status_from_errno(err), std::format("{}: BO_INFO failed for a buffer of {} ({})",
                                                 name_, from, errno_text(err)));
    }
    if (!(bi.flags & DRM_SPYRE_BO_PEER) || bi.size < min_bytes) {
        drmCloseBufferHandle(fd_.get(), handle);
        fail(SPYRE_ERROR_INTERNAL,
             std::format("{}: a buffer imported from {} is not a PEER BO of {} (flags {:#x}, {} "
                         "bytes)",
                         name_, from, format_bytes(min_bytes), bi.flags, bi.size));
    }
    auto imp = std::make_shared<Bo>(fd_.get(), handle, bi, bi.size);
    imp->keep_alive(shared_from_this());
    return imp;
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

void KernelDevice::fail_if_lost(int err) const {
    if (status_from_errno(err) == SPYRE_ERROR_DEVICE_LOST)
        fail(SPYRE_ERROR_DEVICE_LOST,
             std::format("{} was removed or its driver unbound ({})", name_, errno_text(err)));
}

uint32_t KernelDevice::create_syncobj() {
    uint32_t h = 0;
    if (drmSyncobjCreate(fd_.get(), 0, &h) != 0) {
        const int err = errno;
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: cannot create a syncobj ({})", name_, errno_text(err)));
    }
    return h;
}

void KernelDevice::destroy_syncobj(uint32_t h) {
    if (h) drmSyncobjDestroy(fd_.get(), h);
}

void KernelDevice::wait_point(uint32_t syncobj, uint64_t point, const std::string& what) {
    if (!point) return;
    if (drmSyncobjTimelineWait(fd_.get(), &syncobj, &point, 1, monotonic_ns() + timeout_ns_,
                               DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, nullptr) != 0) {
        int err = errno;
        if (err == ETIME || err == ETIMEDOUT)
            fail(SPYRE_ERROR_TIMEOUT,
                 std::format("{}: {} did not finish within {} s (set SPYRE_JOB_TIMEOUT_MS to "
                             "wait longer)",
                             name_, what, timeout_ns_ / 1000000000));
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: waiting for {} failed ({})", name_, what, errno_text(err)));
    }
}

uint64_t KernelDevice::syncobj_value(uint32_t syncobj) {
    uint64_t v = 0;
    if (drmSyncobjQuery(fd_.get(), &syncobj, &v, 1) != 0) {
        const int err = errno;
        fail_if_lost(err);
        fail(status_from_errno(err),
             std::format("{}: syncobj query failed ({})", name_, errno_text(err)));
    }
    return v;
}

namespace {
// Unreaped jobs may trail the newest job by at most this much (the driver keeps the results
// of the last DRM_SPYRE_JOB_HISTORY jobs of a file).
constexpr uint64_t kHistoryMargin = DRM_SPYRE_JOB_HISTORY - 64;
constexpr uint32_t kUnknown = UINT32_MAX;
constexpr int kBusyRetries = 10000;
}  // namespace

uint32_t KernelDevice::submit_priority(int stream_priority) const {
    if (!(info_.caps & DRM_SPYRE_CAP_PRIORITY)) return DRM_SPYRE_PRIORITY_NORMAL;
    if (stream_priority > 0) return DRM_SPYRE_PRIORITY_LOW;
    if (stream_priority < 0 && !high_priority_denied_.load(std::memory_order_relaxed))
        return DRM_SPYRE_PRIORITY_HIGH;
    return DRM_SPYRE_PRIORITY_NORMAL;
}

uint64_t KernelDevice::submit(drm_spyre_submit& s) {
    s.cmd_size = sizeof(drm_spyre_cmd);
    s.sync_size = sizeof(drm_spyre_sync);
    // Keep the oldest unreaped job within the history: learn its outcome first.
    for (;;) {
        uint64_t oldest = 0;
        {
            std::lock_guard lock(jobs_mu_);
            for (auto& [id, w] : unreaped_)
                if (w.status == kUnknown) {
                    oldest = id;
                    break;
                }
            if (!oldest || last_job_ - oldest < kHistoryMargin) break;
        }
        counters_.backpressure_waits++;
        auto w = wait_raw(oldest, "oldest job in flight", monotonic_ns() + timeout_ns_);
        std::lock_guard lock(jobs_mu_);
        if (auto it = unreaped_.find(oldest); it != unreaped_.end()) it->second = w;
    }
    for (int attempt = 0;; ++attempt) {
        int err = ioctl_no_eagain_retry(fd_.get(), DRM_IOCTL_SPYRE_SUBMIT, &s);
        if (!err) break;
        if (err == EPERM && s.priority == DRM_SPYRE_PRIORITY_HIGH) {
            // High priority needs CAP_SYS_NICE: keep the stream's own ring, normal priority.
            high_priority_denied_ = true;
            s.priority = DRM_SPYRE_PRIORITY_NORMAL;
            continue;
        }
        if ((err == EAGAIN || err == EBUSY) && attempt < kBusyRetries) {
            // Too many queued jobs: wait for the oldest of ours, then retry.
            counters_.busy_retries++;
            uint64_t oldest = 0;
            {
                std::lock_guard lock(jobs_mu_);
                for (auto& [id, w] : unreaped_)
                    if (w.status == kUnknown) {
                        oldest = id;
                        break;
                    }
            }
            if (oldest) {
                auto w = wait_raw(oldest, "oldest job in flight", monotonic_ns() + timeout_ns_);
                std::lock_guard lock(jobs_mu_);
                if (auto it = unreaped_.find(oldest); it != unreaped_.end()) it->second = w;
            } else {
                usleep(1000);  // the queue is full of other processes' jobs
            }
            continue;
        }
        spyre_status st = status_from_errno(err);
        if (err == EAGAIN || err == EBUSY)
            fail(SPYRE_ERROR_BUSY, std::format("{}: the driver's job queue stayed full ({})", name_,
                                               errno_text(err)));
        fail_if_lost(err);
        fail(st == SPYRE_ERROR_INVALID_ARGUMENT ? SPYRE_ERROR_INTERNAL : st,
             std::format("{}: the driver refused a job of {} command{} ({})", name_, s.cmd_count,
                         s.cmd_count == 1 ? "" : "s", errno_text(err)));
    }
    counters_.jobs_submitted++;
    std::lock_guard lock(jobs_mu_);
    drm_spyre_job_wait w{};
    w.status = kUnknown;
    unreaped_.emplace(s.job_id, w);
    last_job_ = std::max<uint64_t>(last_job_, s.job_id);
    return s.job_id;
}

void KernelDevice::wait_job(uint64_t job_id, const std::string& what) {
    auto w = wait_raw(job_id, what, monotonic_ns() + timeout_ns_);
    std::lock_guard lock(jobs_mu_);
    if (auto it = unreaped_.find(job_id); it != unreaped_.end()) it->second = w;
}

drm_spyre_job_wait KernelDevice::reap_job(uint64_t job_id, const std::string& what) {
    {
        std::lock_guard lock(jobs_mu_);
        auto it = unreaped_.find(job_id);
        if (it != unreaped_.end() && it->second.status != kUnknown) {
            auto w = it->second;
            unreaped_.erase(it);
            return w;
        }
    }
    auto w = wait_raw(job_id, what, monotonic_ns() + timeout_ns_);
    std::lock_guard lock(jobs_mu_);
    unreaped_.erase(job_id);
    return w;
}

drm_spyre_job_wait KernelDevice::wait_raw(uint64_t job_id, const std::string& what,
                                          int64_t deadline) {
    drm_spyre_job_wait w{};
    w.job_id = job_id;
    w.timeout_ns = deadline;
    if (int err = xioctl(fd_.get(), DRM_IOCTL_SPYRE_JOB_WAIT, &w)) {
        if (err == ETIME || err == ETIMEDOUT)
            fail(SPYRE_ERROR_TIMEOUT, std::format("{}: job {} ({}) did not finish within {} s (set "
                                                  "SPYRE_JOB_TIMEOUT_MS to wait longer)",
                                                  name_, job_id, what, timeout_ns_ / 1000000000));
        fail_if_lost(err);
        spyre_status st = status_from_errno(err);
        fail(st == SPYRE_ERROR_INVALID_ARGUMENT ? SPYRE_ERROR_INTERNAL : st,
             std::format("{}: waiting for job {} ({}) failed ({})", name_, job_id, what,
                         errno_text(err)));
    }
    return w;
}

void KernelDevice::fail_job(const drm_spyre_job_wait& w, const std::string& what,
                            const std::string* label) {
    const uint64_t job_id = w.job_id;
    // the failing command's launch, when it was labeled (spyre_push_launch_label)
    const std::string by = label ? "; launched by " + *label : std::string();
    switch (w.status) {
        case DRM_SPYRE_JOB_DEVICE_ERROR:
            fail(SPYRE_ERROR_DEVICE_ERROR,
                 std::format("device error on {} in job {} ({}), command {}: hw status {} = {}{}{}",
                             name_, job_id, what, w.failed_cmd, w.hw_status,
                             hw_status_text(w.hw_status),
                             w.hw_status == SPYRE_STATUS_ERR_MMU_FAULT
                                 ? std::format(" at device address {:#x}", w.fault_addr)
                                 : std::string(),
                             by));
        case DRM_SPYRE_JOB_TIMEOUT:
            fail(SPYRE_ERROR_TIMEOUT,
                 std::format("{}: job {} ({}) hung and was aborted by the driver (hw status {} = "
                             "{}){}",
                             name_, job_id, what, w.hw_status, hw_status_text(w.hw_status), by));
        case DRM_SPYRE_JOB_ABORTED:
            fail(SPYRE_ERROR_DEVICE_ERROR,
                 std::format("{}: job {} ({}) was aborted by a device reset or removal before "
                             "it ran{}",
                             name_, job_id, what, by));
        default:
            fail(SPYRE_ERROR_INTERNAL, std::format("{}: job {} ({}) ended with unknown status {}",
                                                   name_, job_id, what, w.status));
    }
}

namespace {
constexpr size_t kMaxStagingSlots = 8;
}

uint64_t KernelDevice::chunk_bytes() {
    std::lock_guard lock(staging_mu_);
    if (!chunk_bytes_) chunk_bytes_ = staging_chunk_bytes_from_env();
    return chunk_bytes_;
}

KStagingSlot* KernelDevice::acquire_slot() {
    if (!(info_.caps & DRM_SPYRE_CAP_HOST_BO))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: the driver has no host buffers, so pageable host memory "
                         "cannot be copied",
                         name_));
    const uint64_t chunk = chunk_bytes();
    std::unique_lock lock(staging_mu_);
    for (;;) {
        // An idle slot, or one whose job has finished.
        KStagingSlot* busy = nullptr;
        for (auto& s : slots_) {
            if (s->taken) continue;
            if (!s->syncobj) {
                s->taken = true;
                return s.get();
            }
            if (!busy) busy = s.get();
        }
        for (auto& s : slots_) {
            if (s->taken || !s->syncobj) continue;
            if (syncobj_value(s->syncobj) >= s->point) {
                s->syncobj = 0;
                s->taken = true;
                return s.get();
            }
        }
        if (slots_.size() < kMaxStagingSlots) {
            auto slot = std::make_unique<KStagingSlot>();
            slot->taken = true;
            KStagingSlot* raw = slot.get();
            slots_.push_back(std::move(slot));
            lock.unlock();
            try {
                raw->bo = create_bo(chunk, DRM_SPYRE_BO_HOST);
                raw->ptr = static_cast<std::byte*>(raw->bo->map());
            } catch (...) {
                lock.lock();
                std::erase_if(slots_, [&](auto& s) { return s.get() == raw; });
                throw;
            }
            return raw;
        }
        if (busy) {
            uint32_t so = busy->syncobj;
            uint64_t pt = busy->point;
            counters_.backpressure_waits++;
            lock.unlock();
            wait_point(so, pt, "a staging slot");
            lock.lock();
            continue;
        }
        staging_cv_.wait(lock);  // every slot is being filled by another thread
    }
}

void KernelDevice::forget_syncobj(uint32_t syncobj) {
    {
        std::lock_guard lock(staging_mu_);
        for (auto& s : slots_)
            if (s->syncobj == syncobj) s->syncobj = 0;
    }
    staging_cv_.notify_all();
}

void KernelDevice::release_slot(KStagingSlot* slot, uint32_t syncobj, uint64_t point) {
    {
        std::lock_guard lock(staging_mu_);
        slot->taken = false;
        slot->syncobj = syncobj;
        slot->point = point;
    }
    staging_cv_.notify_one();
}

}  // namespace spyre
