#include "SpyreStream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>

#include "SpyreException.h"
#include "SpyreFork.h"
#include "SpyreFunctions.h"

namespace torch_spyre {
namespace {

constexpr int kStreamsPerCard = 1 + 2 * kStreamPoolSize;

struct CardStreams {
    std::array<std::once_flag, kStreamsPerCard> created;
    std::array<std::atomic<spyre_stream_t>, kStreamsPerCard> streams{};
    std::atomic<uint32_t> next_normal{0};
    std::atomic<uint32_t> next_high{0};
};

std::array<CardStreams, kMaxDevices>& card_streams() {
    // Leaked: libspyre streams live until the process exits.
    static auto* s = new std::array<CardStreams, kMaxDevices>();
    return *s;
}

thread_local std::array<c10::StreamId, kMaxDevices> t_current{};

c10::Device spyre_device(c10::DeviceIndex index) {
    return c10::Device(c10::DeviceType::PrivateUse1, index);
}

void check_stream(const c10::Stream& s) {
    TORCH_CHECK(s.device_type() == c10::DeviceType::PrivateUse1, "expected a spyre stream, got a ",
                c10::DeviceTypeName(s.device_type()), " stream");
    check_device_index(s.device_index());
    TORCH_CHECK(s.id() >= 0 && s.id() < kStreamsPerCard, "invalid spyre stream id ", s.id(),
                " (0 .. ", kStreamsPerCard - 1, ")");
}

}  // namespace

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
    c10::Stream s(c10::Stream::UNSAFE, spyre_device(resolve_device(index)), id);
    check_stream(s);
    return s;
}

int stream_priority(const c10::Stream& stream) {
    return stream.id() > kStreamPoolSize ? SPYRE_STREAM_PRIORITY_HIGH
                                         : SPYRE_STREAM_PRIORITY_NORMAL;
}

spyre_stream_t native_stream(const c10::Stream& stream) {
    check_not_forked();
    check_stream(stream);
    CardStreams& cs = card_streams()[stream.device_index()];
    const auto id = static_cast<size_t>(stream.id());
    spyre_stream_t s = cs.streams[id].load(std::memory_order_acquire);
    if (s) return s;
    std::call_once(cs.created[id], [&] {
        spyre_stream_t created = nullptr;
        SPYRE_CHECK(spyre_stream_create(device_handle(stream.device_index()),
                                        stream_priority(stream), &created));
        cs.streams[id].store(created, std::memory_order_release);
    });
    return cs.streams[id].load(std::memory_order_acquire);
}

c10::Stream default_stream(c10::DeviceIndex index) { return make_stream(index, 0); }

c10::Stream current_stream(c10::DeviceIndex index) noexcept {
    index = resolve_device(index);
    const c10::StreamId id = index >= 0 && index < kMaxDevices ? t_current[index] : 0;
    return c10::Stream(c10::Stream::UNSAFE, spyre_device(index), id);
}

c10::Stream exchange_stream(const c10::Stream& stream) noexcept {
    const c10::DeviceIndex index = stream.device_index();
    if (index < 0 || index >= kMaxDevices) return stream;
    c10::Stream prev(c10::Stream::UNSAFE, stream.device(), t_current[index]);
    t_current[index] = stream.id();
    return prev;
}

void set_current_stream(const c10::Stream& stream) {
    check_stream(stream);
    t_current[stream.device_index()] = stream.id();
}

c10::Stream stream_from_pool(c10::DeviceIndex index, int priority) {
    index = resolve_device(index);
    check_device_index(index);
    CardStreams& cs = card_streams()[index];
    const bool high = priority < 0;
    const uint32_t n = (high ? cs.next_high : cs.next_normal).fetch_add(1) % kStreamPoolSize;
    return make_stream(index, 1 + n + (high ? kStreamPoolSize : 0));
}

void synchronize_stream(const c10::Stream& stream) {
    SPYRE_CHECK(spyre_stream_synchronize(native_stream(stream)));
}

bool query_stream(const c10::Stream& stream) {
    check_stream(stream);
    // A stream never used has no work.
    CardStreams& cs = card_streams()[stream.device_index()];
    spyre_stream_t s = cs.streams[static_cast<size_t>(stream.id())].load();
    if (!s) return true;
    const spyre_status st = spyre_stream_query(s);
    if (st == SPYRE_ERROR_NOT_READY) {
        spyre_clear_last_error();
        return false;
    }
    SPYRE_CHECK(st);
    return true;
}

void synchronize_device(c10::DeviceIndex index) {
    index = resolve_device(index);
    check_device_index(index);
    if (!is_device_open(index)) return;
    SPYRE_CHECK(spyre_device_synchronize(device_handle(index)));
}

}  // namespace torch_spyre
