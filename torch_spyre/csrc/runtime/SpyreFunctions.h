// Devices of the spyre backend: enumeration, the calling thread's current device, lazy
// initialization and the libspyre device handle of each card.
//
// Nothing here touches a card until it is needed: importing torch_spyre counts devices only
// when asked (torch.spyre.device_count()), and a card is opened (spyre_device_open) the first
// time memory, a stream or an event is needed on it.
#pragma once

#include <c10/core/Device.h>
#include <spyre/spyre.h>

#include <string>

namespace torch_spyre {

// The most cards torch_spyre handles (libspyre's simulator allows as many).
constexpr int kMaxDevices = 64;

// Number of cards (spyre_get_device_count, cached after the first call). 0 when libspyre finds
// none; device_count_error() then says why. Never throws.
c10::DeviceIndex device_count() noexcept;
// libspyre's message for a device count of 0 ("" if cards were found).
const std::string& device_count_error() noexcept;

// Throws IndexError unless 0 <= index < device_count().
void check_device_index(c10::DeviceIndex index);

// The calling thread's current spyre device (0 until set_device is called on the thread).
c10::DeviceIndex current_device() noexcept;
void set_device(c10::DeviceIndex index);
// Sets the current device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// `index` or, if it is -1, the current device.
c10::DeviceIndex resolve_device(c10::DeviceIndex index);

// Lazy runtime initialization: checks that there is at least one card (throws with libspyre's
// explanation otherwise). Idempotent and thread-safe; called by torch.spyre._lazy_init and the
// PrivateUse1 hooks. Opens no card.
void init();
bool is_initialized() noexcept;

// The libspyre handle of card `index`, opening the card on first use (thread-safe).
spyre_device_t device_handle(c10::DeviceIndex index);
// Whether card `index` has been opened by this process.
bool is_device_open(c10::DeviceIndex index) noexcept;
// spyre_device_get_info of card `index` (opens it).
const spyre_device_info& device_info(c10::DeviceIndex index);

}  // namespace torch_spyre
