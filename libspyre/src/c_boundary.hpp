// The C ABI boundary shared by api.cpp and the other files that define spyre_* functions
// (management.cpp): exceptions become a status plus the thread-local last error, handles
// become backend objects.
#pragma once

#include <format>
#include <memory>
#include <new>

#include "backend.hpp"
#include "error.hpp"
#include "spyre/spyre.h"

namespace spyre {

// Runs body; an exception becomes its status and "fn: message" as the last error.
template <typename F>
spyre_status guard(const char* fn, F&& body) noexcept {
    try {
        body();
        return SPYRE_SUCCESS;
    } catch (const Error& e) {
        set_last_error(std::format("{}: {}", fn, e.what()));
        return e.status();
    } catch (const std::bad_alloc&) {
        set_last_error(std::format("{}: out of host memory", fn));
        return SPYRE_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(std::format("{}: internal error: {}", fn, e.what()));
        return SPYRE_ERROR_INTERNAL;
    } catch (...) {
        set_last_error(std::format("{}: internal error: unknown exception", fn));
        return SPYRE_ERROR_INTERNAL;
    }
}

// The device of a live device handle; throws INVALID_ARGUMENT for NULL, stale or foreign
// handles (api.cpp).
std::shared_ptr<Device> device_of(spyre_device_t device);

}  // namespace spyre
