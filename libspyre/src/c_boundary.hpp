// The C ABI boundary shared by api.cpp and the other files that define spyre_* functions
// (management.cpp): exceptions become a status plus the thread-local last error (guard(),
// error.hpp), handles become backend objects.
#pragma once

#include <memory>

#include "backend.hpp"
#include "error.hpp"
#include "spyre/spyre.h"

namespace spyre {

// The device of a live device handle; throws INVALID_ARGUMENT for NULL, stale or foreign
// handles (api.cpp).
std::shared_ptr<Device> device_of(spyre_device_t device);

// Handles of the op library's prepared fused kernels (ops/api_fused.cpp), in the table of the
// other handles: a NULL, stale or foreign one throws INVALID_ARGUMENT naming it.
uintptr_t add_fused_kernel_handle(std::shared_ptr<void> obj);
std::shared_ptr<void> fused_kernel_of(const void* handle);
std::shared_ptr<void> remove_fused_kernel_handle(const void* handle);

}  // namespace spyre
