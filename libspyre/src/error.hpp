// Internal error handling of libspyre: the exception type used inside the library, the
// thread-local last-error message and helpers that turn errno values into statuses.
#pragma once

#include <cstdint>
#include <exception>
#include <format>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "spyre/spyre.h"

namespace spyre {

// Thrown inside the library; translated to a spyre_status at the C boundary (api.cpp).
class Error : public std::runtime_error {
  public:
    Error(spyre_status status, const std::string& message)
        : std::runtime_error(message), status_(status) {}
    spyre_status status() const { return status_; }

  private:
    spyre_status status_;
};

[[noreturn]] inline void fail(spyre_status status, const std::string& message) {
    throw Error(status, message);
}

// Throws SPYRE_ERROR_INVALID_ARGUMENT with `message` unless ok.
inline void require(bool ok, const char* message) {
    if (!ok) [[unlikely]]
        fail(SPYRE_ERROR_INVALID_ARGUMENT, message);
}
inline void require(bool ok, const std::string& message) {
    if (!ok) [[unlikely]]
        fail(SPYRE_ERROR_INVALID_ARGUMENT, message);
}

// The same with a message formatted only when the check fails: checks run on every launch,
// and formatting messages nobody reads was most of an op's host time (torch_spyre.md
// "Dispatch overhead").
template <typename... Args>
    requires(sizeof...(Args) > 0)
void require(bool ok, std::format_string<Args...> fmt, Args&&... args) {
    if (!ok) [[unlikely]]
        fail(SPYRE_ERROR_INVALID_ARGUMENT, std::format(fmt, std::forward<Args>(args)...));
}

// Status for a failed system call or ioctl with errno `err`.
spyre_status status_from_errno(int err);

// "ENOMEM: Cannot allocate memory".
std::string errno_text(int err);

// Thread-local last error (spyre_last_error()).
void set_last_error(std::string message);
const char* last_error();
void clear_last_error();

// The C boundary of a public call `fn`: runs body and turns every exception into a status plus
// the thread's last-error message ("fn: message"). Nothing escapes it.
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

const char* status_string(spyre_status status);

// Throws SPYRE_ERROR_INVALID_ARGUMENT unless [offset, offset + size) lies inside a buffer of
// buffer_size bytes (overflow-safe). `which` names the buffer in the message ("source").
void check_buffer_range(uint64_t buffer_size, uint64_t offset, uint64_t size, const char* which);

// Human size for messages: "0 B", "100 B", "4.0 KiB", "1.5 MiB", "3.0 GiB".
std::string format_bytes(uint64_t bytes);

// Name and description of a device status code of a completion entry (hw/spyre_hw.h), e.g.
// "ERR_DEV_RANGE (device address range outside device memory)".
std::string hw_status_text(uint32_t hw_status);

}  // namespace spyre
