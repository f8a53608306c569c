// Turning libspyre status codes into PyTorch exceptions (c10::Error and its subclasses), so that
// Python sees torch.OutOfMemoryError, NotImplementedError or RuntimeError with libspyre's
// thread-local message ("spyre_malloc: out of device memory on spyre-sim0: asked ...").
#pragma once

#include <spyre/spyre.h>

namespace torch_spyre {

// Throws the exception for a failed libspyre call `expr` (its text, for the message).
[[noreturn]] void throw_spyre_error(spyre_status status, const char* expr);

}  // namespace torch_spyre

// SPYRE_CHECK(spyre_malloc(dev, n, &buf)): throws unless the call returned SPYRE_SUCCESS.
#define SPYRE_CHECK(expr)                                                 \
    do {                                                                  \
        const spyre_status spyre_check_status_ = (expr);                  \
        if (spyre_check_status_ != SPYRE_SUCCESS)                         \
            ::torch_spyre::throw_spyre_error(spyre_check_status_, #expr); \
    } while (0)
