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
// spyre_launch_async() would. The image is loaded on the card once and kept while the card's
// device object lives and it is among the card's most recently launched op programs
// (Device::pinned_program); `id` names it and it must not change for the life of the
// process. Throws Error.
void launch_pinned_program(spyre_device_t device, uint64_t id, const std::vector<uint8_t>& image,
                           const spyre_launch_params& params, spyre_stream_t stream);

// Loads program `image` on `device`'s card as launch_pinned_program does, without a launch (a
// program prepared ahead of its first launch). Throws Error.
void pin_program(spyre_device_t device, uint64_t id, const std::vector<uint8_t>& image);

}  // namespace spyre
