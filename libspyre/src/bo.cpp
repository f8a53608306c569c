#include "bo.hpp"

#include <sys/mman.h>
#include <xf86drm.h>

#include <cerrno>
#include <format>

#include "error.hpp"

namespace spyre {

Bo::Bo(int fd, uint32_t handle, const drm_spyre_bo_info& info, uint64_t requested)
    : fd_(fd), handle_(handle), info_(info), requested_(requested) {}

Bo::~Bo() {
    peer_imports_.clear();  // the peers' handles go before the exported BO
    map_.reset();           // unmap before the handle goes away
    drmCloseBufferHandle(fd_, handle_);
}

void* Bo::map() {
    std::lock_guard lock(map_mu_);
    if (!map_) {
        // Host BOs are prefaulted: they are staging buffers or pinned memory about to be used.
        int flags = MAP_SHARED | (is_host() ? MAP_POPULATE : 0);
        void* p = ::mmap(nullptr, info_.size, PROT_READ | PROT_WRITE, flags, fd_,
                         static_cast<off_t>(info_.mmap_offset));
        if (p == MAP_FAILED) {
            int err = errno;
            fail(status_from_errno(err) == SPYRE_ERROR_OUT_OF_MEMORY ? SPYRE_ERROR_OUT_OF_MEMORY
                                                                     : SPYRE_ERROR_IO,
                 std::format("cannot map {} {} buffer into the process: mmap failed ({})",
                             format_bytes(info_.size), is_host() ? "host" : "device",
                             errno_text(err)));
        }
        map_ = Mapping(p, info_.size);
    }
    return map_.get();
}

std::shared_ptr<Bo> Bo::peer_import(const void* importer,
                                    const std::function<std::shared_ptr<Bo>()>& make) {
    std::lock_guard lock(peer_mu_);
    auto& imp = peer_imports_[importer];
    if (!imp) imp = make();
    return imp;
}

}  // namespace spyre
