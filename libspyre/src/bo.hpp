// A GEM buffer object of the spyre driver: created with BO_CREATE, described by BO_INFO,
// closed with GEM_CLOSE, and mapped on demand through the accel fd.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "backend.hpp"
#include "raii.hpp"
#include "spyre_accel.h"

namespace spyre {

class Bo final : public Buffer {
  public:
    // Takes ownership of `handle` on `fd`. `requested` is the size the user asked for (the
    // kernel rounds up to the page size). The fd must outlive the Bo.
    Bo(int fd, uint32_t handle, const drm_spyre_bo_info& info, uint64_t requested);
    ~Bo() override;
    Bo(const Bo&) = delete;
    Bo& operator=(const Bo&) = delete;

    uint32_t handle() const { return handle_; }
    uint64_t size() const override { return requested_; }
    uint64_t alloc_size() const override { return info_.size; }
    uint64_t dev_addr() const override { return info_.dev_addr; }
    bool is_host() const { return info_.flags & DRM_SPYRE_BO_HOST; }

    // CPU pointer to the whole BO (mmap of mmap_offset on the accel fd), mapped once.
    void* map() override;

    // Peer-to-peer (hw 1.6): this DEVICE BO as a PEER BO of card `importer` (a KernelDevice),
    // made by `make` on first use and kept until this BO is freed, so that copies of one
    // buffer pair export and import it once.
    std::shared_ptr<Bo> peer_import(const void* importer,
                                    const std::function<std::shared_ptr<Bo>()>& make);
    // An imported PEER BO keeps its importing device (whose fd holds the handle) alive.
    void keep_alive(std::shared_ptr<void> owner) { owner_ = std::move(owner); }

  private:
    int fd_;
    uint32_t handle_;
    drm_spyre_bo_info info_;
    uint64_t requested_;
    std::mutex map_mu_;
    Mapping map_;
    std::mutex peer_mu_;
    std::map<const void*, std::shared_ptr<Bo>> peer_imports_;  // by importing device
    std::shared_ptr<void> owner_;
};

}  // namespace spyre
