#include "SpyreException.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_spyre {

void throw_spyre_error(spyre_status status, const char* expr) {
    // libspyre's message starts with the function name and says what to do; the expression is
    // only added when libspyre left no message (which would be a libspyre bug).
    std::string msg = spyre_last_error();
    if (msg.empty()) msg = std::string(expr) + ": " + spyre_status_string(status);
    spyre_clear_last_error();
    switch (status) {
        case SPYRE_ERROR_OUT_OF_MEMORY:
            TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
        case SPYRE_ERROR_NOT_SUPPORTED:
            TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
        case SPYRE_ERROR_INVALID_ARGUMENT:
            TORCH_CHECK_VALUE(false, msg);
        default:
            TORCH_CHECK(false, msg, " (", spyre_status_string(status), ")");
    }
}

}  // namespace torch_spyre
