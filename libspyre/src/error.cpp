#include "error.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <format>

extern "C" {
#include "spyre_hw.h"
}

namespace spyre {

namespace {
thread_local std::string t_last_error;
}  // namespace

spyre_status status_from_errno(int err) {
    switch (err) {
        case ENOMEM:
        case ENOSPC:
            return SPYRE_ERROR_OUT_OF_MEMORY;
        case EINVAL:
        case EFAULT:
        case E2BIG:
        case ERANGE:
        case EOVERFLOW:
        case ENOENT:
            return SPYRE_ERROR_INVALID_ARGUMENT;
        case ENODEV:
        case ENXIO:
            return SPYRE_ERROR_DEVICE_LOST;
        case ETIME:
        case ETIMEDOUT:
            return SPYRE_ERROR_TIMEOUT;
        case EACCES:
        case EPERM:
            return SPYRE_ERROR_PERMISSION;
        case ENOTTY:
        case EOPNOTSUPP:
        case ENOSYS:
            return SPYRE_ERROR_NOT_SUPPORTED;
        case EIO:
            return SPYRE_ERROR_DEVICE_ERROR;
        default:
            return SPYRE_ERROR_IO;
    }
}

std::string errno_text(int err) {
    const char* name = strerrorname_np(err);
    return std::format("{}: {}", name ? name : std::to_string(err), strerror(err));
}

void set_last_error(std::string message) { t_last_error = std::move(message); }
const char* last_error() { return t_last_error.c_str(); }
void clear_last_error() { t_last_error.clear(); }

const char* status_string(spyre_status status) {
    switch (status) {
        case SPYRE_SUCCESS:
            return "success";
        case SPYRE_ERROR_INVALID_ARGUMENT:
            return "invalid argument";
        case SPYRE_ERROR_NO_DEVICE:
            return "no Spyre device";
        case SPYRE_ERROR_OUT_OF_MEMORY:
            return "out of memory";
        case SPYRE_ERROR_DEVICE_ERROR:
            return "device error";
        case SPYRE_ERROR_TIMEOUT:
            return "timeout";
        case SPYRE_ERROR_IO:
            return "I/O error";
        case SPYRE_ERROR_NOT_SUPPORTED:
            return "not supported";
        case SPYRE_ERROR_DEVICE_LOST:
            return "device lost";
        case SPYRE_ERROR_PERMISSION:
            return "permission denied";
        case SPYRE_ERROR_INTERNAL:
            return "internal error";
        case SPYRE_ERROR_PROGRAM:
            return "program error";
        case SPYRE_ERROR_NOT_READY:
            return "not ready";
        case SPYRE_ERROR_BUSY:
            return "busy";
    }
    return "unknown status";
}

std::string format_bytes(uint64_t bytes) {
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) return std::format("{} B", bytes);
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        ++u;
    }
    // 1023.96 KiB would print as "1024.0 KiB": promote to the next unit instead.
    if (v >= 1023.95 && u < 6) {
        v /= 1024.0;
        ++u;
    }
    return std::format("{:.1f} {}", v, units[u]);
}

void check_buffer_range(uint64_t buffer_size, uint64_t offset, uint64_t size, const char* which) {
    if (offset <= buffer_size && size <= buffer_size - offset) return;
    fail(SPYRE_ERROR_INVALID_ARGUMENT,
         std::format("{} offset {} + size {} exceeds {} buffer size {}", which, offset, size, which,
                     buffer_size));
}

std::string hw_status_text(uint32_t hw_status) {
    switch (hw_status) {
        case SPYRE_STATUS_OK:
            return "OK";
        case SPYRE_STATUS_ERR_OPCODE:
            return "ERR_OPCODE (unknown opcode)";
        case SPYRE_STATUS_ERR_RESERVED:
            return "ERR_RESERVED (unknown flag or non-zero reserved field)";
        case SPYRE_STATUS_ERR_DEV_RANGE:
            return "ERR_DEV_RANGE (device address range outside device memory)";
        case SPYRE_STATUS_ERR_HOST_DMA:
            return "ERR_HOST_DMA (host memory access failed)";
        case SPYRE_STATUS_ERR_ALIGN:
            return "ERR_ALIGN (misaligned address)";
        case SPYRE_STATUS_ERR_SIZE:
            return "ERR_SIZE (zero or overflowing size)";
        case SPYRE_STATUS_ERR_INJECTED:
            return "ERR_INJECTED (fault injection)";
        case SPYRE_STATUS_ERR_PROGRAM:
            return "ERR_PROGRAM (the program stopped with an error)";
        case SPYRE_STATUS_ERR_MMU_FAULT:
            return "ERR_MMU_FAULT (an address outside the process's device address space)";
        case SPYRE_STATUS_ERR_TIMEOUT:
            return "ERR_TIMEOUT (a semaphore wait did not see its value in time)";
    }
    return std::format("unknown hw status {}", hw_status);
}

}  // namespace spyre
