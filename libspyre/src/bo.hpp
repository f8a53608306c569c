// A GEM buffer object of the spyre driver: created with BO_CREATE, described by BO_INFO,
// closed with GEM_CLOSE, and mapped on demand through the accel fd.
#pragma once

#include <cstdint>
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

  private:
    int fd_;
    uint32_t handle_;
    drm_spyre_bo_info info_;
    uint64_t requested_;
    std::mutex map_mu_;
    Mapping map_;
};

}  // namespace spyre
