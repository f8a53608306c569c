// The PrivateUse1 hooks of the spyre backend: what ATen's device-generic code asks of a backend
// (lazy init, device count and current device, pinned memory, the default generators,
// storage resizing).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "../aten/Memory.h"
#include "SpyreAllocator.h"
#include "SpyreFunctions.h"
#include "SpyreGenerator.h"
#include "SpyreHostAllocator.h"

namespace torch_spyre {
namespace {

struct SpyreHooks final : public at::PrivateUse1HooksInterface {
    void init() const override { torch_spyre::init(); }

    bool hasPrimaryContext(c10::DeviceIndex index) const override { return is_device_open(index); }

    c10::DeviceIndex deviceCount() const override { return device_count(); }
    void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
    c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
        return exchange_device(index);
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
        return exchange_device(index);
    }

    bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
    c10::Allocator* getPinnedMemoryAllocator() const override {
        torch_spyre::init();
        return host_allocator();
    }

    at::Device getDeviceFromPtr(void* data) const override {
        const auto p = try_lookup(data);
        TORCH_CHECK(p.has_value(), "torch_spyre: ", data, " is not spyre device memory");
        return at::Device(c10::DeviceType::PrivateUse1, p->device);
    }

    const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
        return default_generator(device);
    }

    void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
        aten::resize_bytes(storage.unsafeGetStorageImpl(), newsize);
    }
};

// Registered when libtorch_spyre is loaded.
const bool g_registered = [] {
    at::RegisterPrivateUse1HooksInterface(new SpyreHooks());
    return true;
}();

}  // namespace
}  // namespace torch_spyre
