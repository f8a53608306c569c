// SPDX-License-Identifier: MIT
// A launch path for libspyre's own op library: it launches the programs of its cached plans
// without holding program handles, which would keep a closed or lost card open for the life
// of the process.
#pragma once

#include <cstdint>
#include <vector>

#include "spyre/spyre.h"

namespace spyre {

// Queues program `image` on `stream` (NULL: the default stream of `device`) as
// spyre_launch_async() would. The image is loaded on the card once and kept as long as the
// card's device object lives; it must not change for the life of the process. Throws Error.
void launch_pinned_program(spyre_device_t device, const std::vector<uint8_t>& image,
                           const spyre_launch_params& params, spyre_stream_t stream);

}  // namespace spyre
