#include "SpyreFunctions.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "SpyreException.h"
#include "SpyreFork.h"

namespace torch_spyre {
namespace {

struct Card {
    std::once_flag opened;
    std::atomic<bool> open{false};
    spyre_device_t handle = nullptr;
    spyre_device_info info{};
};

std::array<Card, kMaxDevices>& cards() {
    // Leaked on purpose: handles stay valid during static destruction (tensors freed late).
    static auto* c = new std::array<Card, kMaxDevices>();
    return *c;
}

std::once_flag g_count_once;
c10::DeviceIndex g_count = 0;
std::string g_count_error;
std::atomic<bool> g_initialized{false};

thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

c10::DeviceIndex device_count() noexcept {
    std::call_once(g_count_once, [] {
        int n = 0;
        const spyre_status st = spyre_get_device_count(&n);
        if (st != SPYRE_SUCCESS) {
            n = 0;
            g_count_error = spyre_last_error();
            if (g_count_error.empty()) g_count_error = spyre_status_string(st);
            spyre_clear_last_error();
        }
        g_count = static_cast<c10::DeviceIndex>(std::clamp(n, 0, kMaxDevices));
    });
    return g_count;
}

const std::string& device_count_error() noexcept {
    device_count();
    return g_count_error;
}

void check_device_index(c10::DeviceIndex index) {
    const c10::DeviceIndex n = device_count();
    TORCH_CHECK_INDEX(index >= 0 && index < n, "invalid spyre device index ",
                      static_cast<int>(index), ": ", static_cast<int>(n),
                      n == 1 ? " device is" : " devices are", " available",
                      n == 0 ? " (" + device_count_error() + ")" : std::string());
}

c10::DeviceIndex current_device() noexcept { return t_current_device; }

void set_device(c10::DeviceIndex index) {
    check_device_index(index);
    t_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
    const c10::DeviceIndex prev = t_current_device;
    if (index != prev) set_device(index);
    return prev;
}

c10::DeviceIndex resolve_device(c10::DeviceIndex index) {
    return index == -1 ? current_device() : index;
}

void init() {
    check_not_forked();
    if (g_initialized.load()) return;
    TORCH_CHECK(device_count() > 0, "torch_spyre: no Spyre device: ", device_count_error());
    g_initialized = true;
}

bool is_initialized() noexcept { return g_initialized.load(); }

spyre_device_t device_handle(c10::DeviceIndex index) {
    check_not_forked();
    check_device_index(index);
    Card& c = cards()[index];
    if (!c.open.load(std::memory_order_acquire)) {
        // A failed open throws out of call_once, which leaves the flag unset: the next use
        // retries.
        std::call_once(c.opened, [&] {
            spyre_device_t h = nullptr;
            SPYRE_CHECK(spyre_device_open(index, &h));
            const spyre_status st = spyre_device_get_info(h, &c.info);
            if (st != SPYRE_SUCCESS) {
                spyre_device_close(h);
                throw_spyre_error(st, "spyre_device_get_info");
            }
            c.handle = h;
            note_initialized();
            c.open.store(true, std::memory_order_release);
            g_initialized = true;
        });
    }
    return c.handle;
}

bool is_device_open(c10::DeviceIndex index) noexcept {
    return index >= 0 && index < kMaxDevices && cards()[index].open.load();
}

const spyre_device_info& device_info(c10::DeviceIndex index) {
    device_handle(index);
    return cards()[index].info;
}

}  // namespace torch_spyre
