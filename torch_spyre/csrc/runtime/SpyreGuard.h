// The device guard of the spyre backend (c10::impl::DeviceGuardImplInterface for PrivateUse1):
// current device and stream, and events, as used by c10::DeviceGuard, torch.Stream, torch.Event
// and the generic torch.accelerator API.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <spyre/spyre.h>

namespace torch_spyre {

// What a c10::Event's void* points to for the spyre backend (torch.Event.event_id).
struct SpyreEvent {
    spyre_event_t event = nullptr;
    c10::DeviceIndex device = -1;
    bool timing = false;  // created with enable_timing=True
};

// Modeled device nanoseconds between two recorded, completed events of one stream
// (spyre_event_elapsed's modeled time; the engine's cycle model, launches only on the simulator).
uint64_t event_modeled_ns(const void* start, const void* end);

struct SpyreGuardImpl final : public c10::impl::DeviceGuardImplInterface {
    static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

    SpyreGuardImpl() = default;
    explicit SpyreGuardImpl(c10::DeviceType t);

    c10::DeviceType type() const override;
    c10::Device exchangeDevice(c10::Device d) const override;
    c10::Device getDevice() const override;
    void setDevice(c10::Device d) const override;
    void uncheckedSetDevice(c10::Device d) const noexcept override;
    c10::Stream getStream(c10::Device d) const noexcept override;
    c10::Stream getDefaultStream(c10::Device d) const override;
    c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override;
    c10::Stream getNewStream(c10::Device d, int priority) const override;
    c10::Stream exchangeStream(c10::Stream s) const noexcept override;
    c10::DeviceIndex deviceCount() const noexcept override;

    void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
                const c10::EventFlag flag) const override;
    void block(void* event, const c10::Stream& stream) const override;
    bool queryEvent(void* event) const override;
    void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
    void synchronizeEvent(void* event) const override;
    double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override;

    bool queryStream(const c10::Stream& stream) const override;
    void synchronizeStream(const c10::Stream& stream) const override;
    void synchronizeDevice(const c10::DeviceIndex device_index) const override;
    void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                               const c10::Stream& stream) const override;
};

}  // namespace torch_spyre
