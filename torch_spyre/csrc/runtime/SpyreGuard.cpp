#include "SpyreGuard.h"

#include <c10/util/Exception.h>

#include "SpyreAllocator.h"
#include "SpyreException.h"
#include "SpyreFunctions.h"
#include "SpyreStream.h"

namespace torch_spyre {
namespace {

constexpr c10::DeviceType kSpyre = c10::DeviceType::PrivateUse1;

void check_type(c10::Device d) {
    TORCH_CHECK(d.type() == kSpyre, "expected a spyre device, got ", d);
}

const SpyreEvent& as_event(const void* e) {
    TORCH_CHECK(e, "the event has not been recorded");
    return *static_cast<const SpyreEvent*>(e);
}

}  // namespace

uint64_t event_modeled_ns(const void* start, const void* end) {
    spyre_event_timing t{};
    SPYRE_CHECK(spyre_event_elapsed(as_event(start).event, as_event(end).event, &t));
    return t.modeled_ns;
}

SpyreGuardImpl::SpyreGuardImpl(c10::DeviceType t) {
    TORCH_INTERNAL_ASSERT(t == kSpyre, "SpyreGuardImpl for ", t);
}

c10::DeviceType SpyreGuardImpl::type() const { return kSpyre; }

c10::Device SpyreGuardImpl::exchangeDevice(c10::Device d) const {
    check_type(d);
    return c10::Device(kSpyre, exchange_device(resolve_device(d.index())));
}

c10::Device SpyreGuardImpl::getDevice() const { return c10::Device(kSpyre, current_device()); }

void SpyreGuardImpl::setDevice(c10::Device d) const {
    check_type(d);
    set_device(resolve_device(d.index()));
}

void SpyreGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
    try {
        set_device(resolve_device(d.index()));
    } catch (...) {
        // Restoring an index that was valid when it was saved cannot fail; ignore otherwise.
    }
}

c10::Stream SpyreGuardImpl::getStream(c10::Device d) const noexcept {
    return current_stream(d.index());
}

c10::Stream SpyreGuardImpl::getDefaultStream(c10::Device d) const {
    return default_stream(d.index());
}

c10::Stream SpyreGuardImpl::getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const {
    return stream_from_pool(d.index(), isHighPriority ? -1 : 0);
}

c10::Stream SpyreGuardImpl::getNewStream(c10::Device d, int priority) const {
    return stream_from_pool(d.index(), priority);
}

c10::Stream SpyreGuardImpl::exchangeStream(c10::Stream s) const noexcept {
    return torch_spyre::exchange_stream(s);
}

c10::DeviceIndex SpyreGuardImpl::deviceCount() const noexcept { return device_count(); }

void SpyreGuardImpl::record(void** event, const c10::Stream& stream,
                            const c10::DeviceIndex device_index, const c10::EventFlag flag) const {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    auto* e = static_cast<SpyreEvent*>(*event);
    if (!e) {
        spyre_event_t ev = nullptr;
        SPYRE_CHECK(spyre_event_create(device_handle(stream.device_index()), &ev));
        // c10::EventFlag::BACKEND_DEFAULT is what torch.Event(enable_timing=True) passes.
        e = new SpyreEvent{ev, stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
        *event = e;
    }
    SPYRE_CHECK(spyre_event_record(e->event, native_stream(stream)));
}

void SpyreGuardImpl::block(void* event, const c10::Stream& stream) const {
    if (!event) return;  // never recorded: nothing to wait for
    SPYRE_CHECK(spyre_stream_wait_event(native_stream(stream), as_event(event).event));
}

bool SpyreGuardImpl::queryEvent(void* event) const {
    if (!event) return true;
    const spyre_status st = spyre_event_query(as_event(event).event);
    if (st == SPYRE_ERROR_NOT_READY) {
        spyre_clear_last_error();
        return false;
    }
    SPYRE_CHECK(st);
    return true;
}

void SpyreGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
    if (!event) return;
    auto* e = static_cast<SpyreEvent*>(event);
    spyre_event_destroy(e->event);
    delete e;
}

void SpyreGuardImpl::synchronizeEvent(void* event) const {
    if (!event) return;
    SPYRE_CHECK(spyre_event_synchronize(as_event(event).event));
}

double SpyreGuardImpl::elapsedTime(void* start, void* end, const c10::DeviceIndex) const {
    const SpyreEvent& a = as_event(start);
    const SpyreEvent& b = as_event(end);
    TORCH_CHECK(a.timing && b.timing,
                "Both events must be created with argument 'enable_timing=True'.");
    TORCH_CHECK(a.device == b.device,
                "elapsed_time: the events are on spyre:", static_cast<int>(a.device),
                " and spyre:", static_cast<int>(b.device));
    spyre_event_timing t{};
    const spyre_status st = spyre_event_elapsed(a.event, b.event, &t);
    if (st == SPYRE_ERROR_NOT_READY) {
        spyre_clear_last_error();
        TORCH_CHECK(false,
                    "elapsed_time: both events must have completed (call synchronize() on the "
                    "end event first)");
    }
    SPYRE_CHECK(st);
    // Milliseconds between the moments libspyre saw the two events complete.
    return static_cast<double>(t.wall_ns) / 1e6;
}

bool SpyreGuardImpl::queryStream(const c10::Stream& stream) const { return query_stream(stream); }

void SpyreGuardImpl::synchronizeStream(const c10::Stream& stream) const {
    synchronize_stream(stream);
}

void SpyreGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
    synchronize_device(device_index);
}

void SpyreGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                           const c10::Stream& stream) const {
    record_stream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace torch_spyre
