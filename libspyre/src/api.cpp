// The C ABI: validates arguments, translates exceptions into a status plus the thread-local
// last-error message. No exception leaves this file.
//
// Handles are not pointers but (generation, type, slot) triples encoded in the pointer value:
// a freed handle's slot gets a new generation, so a stale handle is reported as "already
// freed" (use after free), a handle of another type as "not a ... handle", never a crash.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <format>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "batch.hpp"
#include "c_boundary.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "peer_fd.hpp"
#include "pinned_launch.hpp"
#include "program.hpp"
#include "spyre/spyre.h"
#include "suballoc.hpp"

namespace spyre {
namespace {

enum class Kind : uint8_t { Device = 1, Buffer, Program, Stream, Event, Graph, FusedKernel };

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::Device:
            return "device";
        case Kind::Buffer:
            return "buffer";
        case Kind::Program:
            return "program";
        case Kind::Stream:
            return "stream";
        case Kind::Event:
            return "event";
        case Kind::Graph:
            return "graph";
        case Kind::FusedKernel:
            return "fused kernel";
    }
    return "?";
}

struct DeviceObj {
    std::shared_ptr<Device> dev;
};
struct BufferObj {
    std::shared_ptr<Device> dev;
    uintptr_t owner;  // the device handle it was allocated through
    BufferRef buf;
};
struct ProgramObj {
    std::shared_ptr<Device> dev;
    BufferRef image;  // device buffer holding the image (shared by identical images)
    uint64_t size;
    uint32_t num_instructions;
};
struct StreamObj {
    std::shared_ptr<Device> dev;
    uintptr_t owner;  // the device handle it was created through
    StreamRef stream;
    std::mutex mu;
    std::shared_ptr<CaptureStream> capture;  // set while the stream captures
    std::shared_ptr<BatchStream> batch;      // set while the stream batches
    int batch_depth = 0;
    // Where work queued on the stream goes: the capture, the batch, or the stream.
    StreamRef current() {
        std::lock_guard lock(mu);
        if (capture) return capture;
        return batch ? StreamRef(batch) : stream;
    }
    // The held work of a batch, queued (before the stream's work is waited for or captured).
    void flush_batch() {
        std::shared_ptr<BatchStream> b;
        {
            std::lock_guard lock(mu);
            b = batch;
        }
        if (b) b->flush();
    }
    std::shared_ptr<CaptureStream> capturing() {
        std::lock_guard lock(mu);
        return capture;
    }
};
struct GraphObj {
    GraphRef graph;
};
struct EventObj {
    std::shared_ptr<Device> dev;
    std::mutex mu;
    MarkerRef marker;  // null: never recorded
};

// Slot table: handle value = generation << 32 | kind << 24 | slot (slot >= 1).
class Handles {
  public:
    uintptr_t add(Kind k, std::shared_ptr<void> obj) {
        std::lock_guard lock(mu_);
        uint32_t i;
        if (!free_.empty()) {
            i = free_.back();
            free_.pop_back();
        } else {
            if (slots_.size() >= (1u << 24) - 1)
                fail(SPYRE_ERROR_OUT_OF_MEMORY, "too many handles");
            slots_.push_back({});
            i = static_cast<uint32_t>(slots_.size());  // slots are 1-based
        }
        Slot& s = slots_[i - 1];
        s.kind = k;
        s.obj = std::move(obj);
        return (uintptr_t(s.gen) << 32) | (uintptr_t(k) << 24) | i;
    }

    template <typename T>
    std::shared_ptr<T> get(const void* h, Kind k, const char* which) {
        std::lock_guard lock(mu_);
        return std::static_pointer_cast<T>(find(h, k, which).obj);
    }

    // Removes and returns the object (its destruction happens outside the table lock).
    template <typename T>
    std::shared_ptr<T> remove(const void* h, Kind k, const char* which) {
        std::lock_guard lock(mu_);
        Slot& s = find(h, k, which);
        auto obj = std::static_pointer_cast<T>(std::move(s.obj));
        s.obj.reset();
        s.gen++;
        if (s.gen == 0) s.gen = 1;
        free_.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(h) & 0xffffff));
        return obj;
    }

    bool live(uintptr_t h, Kind k) {
        std::lock_guard lock(mu_);
        uint32_t i = h & 0xffffff;
        if (!i || i > slots_.size()) return false;
        Slot& s = slots_[i - 1];
        return s.obj && s.kind == k && s.gen == (h >> 32);
    }

  private:
    struct Slot {
        uint32_t gen = 1;
        Kind kind = Kind::Device;
        std::shared_ptr<void> obj;
    };
    Slot& find(const void* hp, Kind k, const char* which) {
        const uintptr_t h = reinterpret_cast<uintptr_t>(hp);
        const uint32_t i = h & 0xffffff;
        const Kind hk = static_cast<Kind>((h >> 24) & 0xff);
        const uint32_t gen = static_cast<uint32_t>(h >> 32);
        const bool destroyed =
            k == Kind::Stream || k == Kind::Event || k == Kind::Graph || k == Kind::FusedKernel;
        const char* verb = k == Kind::Device ? "closed" : destroyed ? "destroyed" : "freed";
        if (!i || i > slots_.size() || hk != k || (h & ~uintptr_t(0xffffffffffffull)) != 0)
            fail(SPYRE_ERROR_INVALID_ARGUMENT,
                 std::format("{} handle is invalid or already {}: {:#x} is not a {} handle", which,
                             verb, h, kind_name(k)));
        Slot& s = slots_[i - 1];
        if (s.gen != gen || !s.obj || s.kind != k)
            fail(SPYRE_ERROR_INVALID_ARGUMENT,
                 std::format("{} handle is invalid or already {}: it was {} (use after {}; "
                             "handle generation {}, slot now at generation {})",
                             which, verb, verb, k == Kind::Device ? "close" : "free", gen, s.gen));
        return s;
    }

    std::mutex mu_;
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
};

Handles& handles() {
    static Handles* h = new Handles();  // never destroyed: usable from atexit handlers
    return *h;
}

// Live buffers by device address, for spyre_buffer_from_address.
struct AddressMap {
    std::mutex mu;
    std::map<std::pair<const Device*, uint64_t>, std::pair<uintptr_t, uint64_t>> by_addr;
};
AddressMap& addresses() {
    static AddressMap* m = new AddressMap();
    return *m;
}

template <typename T>
T* to_handle(uintptr_t v) {
    return reinterpret_cast<T*>(v);
}

template <typename T>
void require_out(T* p, const char* name) {
    require(p != nullptr, "output pointer `{}` is NULL", name);
}

std::shared_ptr<DeviceObj> check_device(spyre_device_t d) {
    require(d != nullptr, "device handle is NULL (open one with spyre_device_open())");
    return handles().get<DeviceObj>(d, Kind::Device, "device");
}

std::shared_ptr<BufferObj> check_buffer(spyre_buffer_t b, const char* which = "buffer") {
    require(b != nullptr, "{} handle is NULL", which);
    return handles().get<BufferObj>(b, Kind::Buffer, which);
}

std::shared_ptr<ProgramObj> check_program(spyre_program_t p) {
    require(p != nullptr, "program handle is NULL (load one with spyre_program_load())");
    return handles().get<ProgramObj>(p, Kind::Program, "program");
}

std::shared_ptr<EventObj> check_event(spyre_event_t e, const char* which = "event") {
    require(e != nullptr, "{} handle is NULL (create one with spyre_event_create())", which);
    return handles().get<EventObj>(e, Kind::Event, which);
}

std::shared_ptr<StreamObj> check_stream_handle(spyre_stream_t s) {
    require(s != nullptr, "stream handle is NULL (create one with spyre_stream_create())");
    return handles().get<StreamObj>(s, Kind::Stream, "stream");
}

// The stream for work on `dev`: the given one (which must be on the same card) or the
// device's default stream.
StreamRef resolve_stream(spyre_stream_t s, const std::shared_ptr<Device>& dev) {
    if (!s) return dev->default_stream();
    auto so = handles().get<StreamObj>(s, Kind::Stream, "stream");
    require(so->dev == dev, "the stream belongs to {} but the work is on {}", so->dev->name(),
            dev->name());
    return so->current();
}

void check_range(const BufferObj& b, uint64_t offset, uint64_t size, const char* which) {
    check_buffer_range(b.buf->size(), offset, size, which);
}

void check_host_ptr(const void* p, uint64_t size, const char* which) {
    require(p != nullptr, "{} host pointer is NULL", which);
    require(reinterpret_cast<uintptr_t>(p) <= UINTPTR_MAX - size + 1 || size == 0,
            "{} host range {} + {} bytes wraps around the address space", which, p, size);
}

// Copies between buffers of two cards: through host memory, chunk by chunk.
void copy_across_cards(const BufferObj& d, uint64_t dst_offset, const BufferObj& s,
                       uint64_t src_offset, uint64_t size, const StreamRef& dst_stream) {
    constexpr uint64_t kChunk = 4ull << 20;
    std::vector<std::byte> bounce(std::min(size, kChunk));
    StreamRef src_stream = s.dev->default_stream();
    for (uint64_t done = 0; done < size;) {
        uint64_t n = std::min(kChunk, size - done);
        src_stream->run_sync(
            [&] { src_stream->copy_dtoh(bounce.data(), s.buf, src_offset + done, n); });
        dst_stream->copy_htod(d.buf, dst_offset + done, bounce.data(), n);  // staged: copied now
        done += n;
    }
}

void do_dtod(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src, uint64_t src_offset,
             uint64_t size, spyre_stream_t stream, bool sync) {
    auto d = check_buffer(dst, "destination");
    auto s = check_buffer(src, "source");
    check_range(*d, dst_offset, size, "destination");
    check_range(*s, src_offset, size, "source");
    StreamRef st = resolve_stream(stream, d->dev);
    if (size == 0) return;
    if (d->dev != s->dev) {
        if (sync)
            st->run_sync([&] { copy_across_cards(*d, dst_offset, *s, src_offset, size, st); });
        else
            copy_across_cards(*d, dst_offset, *s, src_offset, size, st);
        return;
    }
    if (d->buf == s->buf)
        require(dst_offset + size <= src_offset || src_offset + size <= dst_offset,
                "source range [{}, {}) and destination range [{}, {}) overlap in "
                "the same buffer",
                src_offset, src_offset + size, dst_offset, dst_offset + size);
    auto body = [&] { st->copy_dtod(d->buf, dst_offset, s->buf, src_offset, size); };
    if (sync)
        st->run_sync(body);
    else
        body();
}

// The calling thread's launch labels (spyre_push_launch_label), innermost last.
std::vector<std::shared_ptr<const std::string>>& launch_labels() {
    thread_local std::vector<std::shared_ptr<const std::string>> labels;
    return labels;
}

LaunchRequest make_launch(const ProgramObj& p, const spyre_launch_params* params) {
    require(params != nullptr, "params pointer is NULL");
    const Device& dev = *p.dev;
    require((params->flags & ~SPYRE_LAUNCH_RANDOM_STREAM) == 0,
            "params->flags {:#x} has bits that are not SPYRE_LAUNCH_* flags", params->flags);
    for (uint64_t r : params->reserved) require(r == 0, "params->reserved[] must be 0");
    const bool random = params->flags & SPYRE_LAUNCH_RANDOM_STREAM;
    require(random || params->random_arg == 0,
            "params->random_arg must be 0 without SPYRE_LAUNCH_RANDOM_STREAM");
    require(!random || params->random_arg + 1 < params->num_args,
            "SPYRE_LAUNCH_RANDOM_STREAM: random_arg {} and the offset after it must be among "
            "the {} args",
            params->random_arg, params->num_args);
    const uint32_t cores = dev.info().num_cores;
    require(params->num_cores <= cores, "num_cores {} exceeds the {} cores of {}",
            params->num_cores, cores, dev.name());
    require(params->num_args <= SPYRE_LAUNCH_MAX_ARGS, "num_args {} exceeds {}", params->num_args,
            SPYRE_LAUNCH_MAX_ARGS);
    require(params->num_buffers <= SPYRE_LAUNCH_MAX_BUFFERS, "num_buffers {} exceeds {}",
            params->num_buffers, SPYRE_LAUNCH_MAX_BUFFERS);
    require(params->num_buffers == 0 || params->buffers != nullptr,
            "buffers is NULL but num_buffers is {}", params->num_buffers);

    LaunchRequest req;
    req.program = p.image;
    req.program_size = p.size;
    if (!launch_labels().empty()) req.label = launch_labels().back();
    req.num_cores = params->num_cores ? params->num_cores : cores;
    req.num_args = params->num_args;
    for (uint32_t i = 0; i < params->num_args; ++i) req.args[i] = params->args[i];
    if (random) req.random_arg = static_cast<int32_t>(params->random_arg);
    req.buffers.reserve(params->num_buffers);
    for (uint32_t i = 0; i < params->num_buffers; ++i) {
        char which[32];
        std::snprintf(which, sizeof which, "buffers[%u]", i);
        auto b = check_buffer(params->buffers[i], which);
        require(b->dev == p.dev,
                "{} is on {} but the program was loaded on {}: a program reaches "
                "only buffers of its own card",
                which, b->dev->name(), dev.name());
        // a handful of buffers: a linear search beats hashing
        if (std::ranges::find(req.buffers, b->buf) == req.buffers.end())
            req.buffers.push_back(b->buf);
    }
    return req;
}

spyre_status not_ready(const char* fn, const char* what) {
    set_last_error(std::format("{}: {}", fn, what));
    return SPYRE_ERROR_NOT_READY;
}

// Why `dev` cannot copy to or from `peer`'s memory, or "" if it can.
std::string peer_refusal(Device& dev, Device& peer) {
    if (&dev == &peer) return "";
    auto lacks = [](Device& d) { return !(d.info().caps & SPYRE_DEVICE_CAP_P2P); };
    if (lacks(dev) || lacks(peer))
        return std::format(
            "{} has no peer-to-peer DMA (SPYRE_DEVICE_CAP_P2P: hw 1.6 with the card's p2p on, "
            "and a driver that shares device buffers between cards)",
            lacks(dev) ? dev.name() : peer.name());
    if (!dev.can_access_peer(peer))
        return std::format("{} cannot reach {}'s memory (cards of different backends)", dev.name(),
                           peer.name());
    return "";
}

// A peer copy on `st` of card `via` (the source's or the destination's card).
void do_peer(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src, uint64_t src_offset,
             uint64_t size, spyre_stream_t stream, bool sync) {
    auto d = check_buffer(dst, "destination");
    auto s = check_buffer(src, "source");
    check_range(*d, dst_offset, size, "destination");
    check_range(*s, src_offset, size, "source");
    if (d->dev == s->dev) return do_dtod(dst, dst_offset, src, src_offset, size, stream, sync);
    // The synchronous form pushes: the source card writes into the destination (posted writes
    // cross PCIe without waiting for completions). A stream names the card that copies.
    std::shared_ptr<Device> via = s->dev;
    if (stream) {
        auto so = check_stream_handle(stream);
        require(so->dev == d->dev || so->dev == s->dev,
                "the stream belongs to {} but the peer copy is between {} and {}: use a stream "
                "of either card",
                so->dev->name(), s->dev->name(), d->dev->name());
        via = so->dev;
    }
    const bool to_peer = via == s->dev;
    const std::shared_ptr<Device>& other = to_peer ? d->dev : s->dev;
    if (auto why = peer_refusal(*via, *other); !why.empty()) fail(SPYRE_ERROR_NOT_SUPPORTED, why);
    require(via->peer_access_enabled(*other),
            "peer access from {} to {} is not enabled: call spyre_device_enable_peer_access({}, "
            "{}) first",
            via->name(), other->name(), via->name(), other->name());
    StreamRef st = resolve_stream(stream, via);
    if (size == 0) return;
    PeerCopy c;
    c.local = to_peer ? s->buf : d->buf;
    c.local_offset = to_peer ? src_offset : dst_offset;
    c.peer = to_peer ? d->buf : s->buf;
    c.peer_offset = to_peer ? dst_offset : src_offset;
    c.size = size;
    c.peer_dev = other;
    c.to_peer = to_peer;
    if (sync)
        st->run_sync([&] { st->copy_peer(c); });
    else
        st->copy_peer(c);
}

}  // namespace

ExportedBuffer export_buffer_fd(spyre_buffer_t buf) {
    auto b = check_buffer(buf);
    return ExportedBuffer{b->dev->export_buffer(*b->buf), b->buf->root_offset()};
}

std::shared_ptr<Buffer> import_buffer_fd(spyre_device_t device, int fd, uint64_t min_bytes,
                                         const std::string& from) {
    return check_device(device)->dev->import_buffer(fd, min_bytes, from);
}

void copy_to_imported(const std::shared_ptr<Buffer>& imported, uint64_t dst_offset,
                      spyre_buffer_t src, uint64_t src_offset, uint64_t size, spyre_stream_t stream,
                      bool wait) {
    auto s = check_buffer(src, "source");
    check_range(*s, src_offset, size, "source");
    check_buffer_range(imported->size(), dst_offset, size, "destination");
    StreamRef st = resolve_stream(stream, s->dev);
    if (size == 0) return;
    PeerCopy c;
    c.local = s->buf;
    c.local_offset = src_offset;
    c.peer_offset = dst_offset;
    c.size = size;
    c.imported = imported;
    if (wait)
        st->run_sync([&] { st->copy_peer(c); });
    else
        st->copy_peer(c);
}

void signal_imported(spyre_device_t device, const std::shared_ptr<Buffer>& imported,
                     uint64_t offset, uint64_t value, spyre_stream_t stream) {
    require(offset % SPYRE_SEMAPHORE_BYTES == 0 && offset <= imported->size() &&
                SPYRE_SEMAPHORE_BYTES <= imported->size() - offset,
            "semaphore offset {} is not 16-byte aligned inside the imported buffer of {} bytes",
            offset, imported->size());
    const auto dev = check_device(device)->dev;
    require(dev->info().caps & SPYRE_DEVICE_CAP_SEMAPHORE,
            "{} has no device-side semaphores (SPYRE_DEVICE_CAP_SEMAPHORE)", dev->name());
    SemOp op;
    op.imported = imported;
    op.offset = offset;
    op.value = value;
    resolve_stream(stream, dev)->write_value(op);
}

spyre_status stream_failure(spyre_stream_t stream, spyre_buffer_t on, std::string* what) {
    const auto e = resolve_stream(stream, check_buffer(on)->dev)->failure();
    if (!e) return SPYRE_SUCCESS;
    if (what) *what = e->what();
    return e->status();
}

bool streams_share_queue(spyre_device_t device, spyre_stream_t a, spyre_stream_t b) {
    const auto dev = check_device(device)->dev;
    // the streams themselves, not a batch or capture standing in for them
    auto underlying = [&](spyre_stream_t s) {
        if (!s) return dev->default_stream();
        auto so = handles().get<StreamObj>(s, Kind::Stream, "stream");
        require(so->dev == dev, "the stream belongs to {}, not {}", so->dev->name(), dev->name());
        return so->stream;
    };
    return underlying(a)->shares_queue_with(*underlying(b));
}

void launch_pinned_program(spyre_device_t device, uint64_t id, const std::vector<uint8_t>& image,
                           const spyre_launch_params& params, spyre_stream_t stream) {
    auto d = check_device(device);
    ProgramObj program;
    program.dev = d->dev;
    program.size = image.size();
    program.num_instructions = check_program_image(image.data(), image.size());
    program.image = d->dev->pinned_program(id, image);
    LaunchRequest req = make_launch(program, &params);
    resolve_stream(stream, d->dev)->launch(req, nullptr);
}

std::shared_ptr<Device> device_of(spyre_device_t device) { return check_device(device)->dev; }

uintptr_t add_fused_kernel_handle(std::shared_ptr<void> obj) {
    return handles().add(Kind::FusedKernel, std::move(obj));
}

std::shared_ptr<void> fused_kernel_of(const void* handle) {
    require(handle != nullptr,
            "fused kernel handle is NULL (create one with "
            "spyre_fused_kernel_create())");
    return handles().get<void>(handle, Kind::FusedKernel, "fused kernel");
}

std::shared_ptr<void> remove_fused_kernel_handle(const void* handle) {
    require(handle != nullptr, "fused kernel handle is NULL");
    return handles().remove<void>(handle, Kind::FusedKernel, "fused kernel");
}

void pin_program(spyre_device_t device, uint64_t id, const std::vector<uint8_t>& image) {
    auto d = check_device(device);
    check_program_image(image.data(), image.size());
    d->dev->pinned_program(id, image);
}
}  // namespace spyre

using namespace spyre;

// ---- device-side semaphores: the checks ----

namespace spyre {
namespace {

// The checks of spyre_stream_write_value / spyre_stream_wait_value: the stream (NULL: the
// default stream of the semaphore's card), the semaphore's range and alignment, the card's
// capability and (a write into a peer card) peer access. Nothing is queued on an error.
std::pair<StreamRef, SemOp> check_sem(spyre_stream_t stream, std::shared_ptr<BufferObj> b,
                                      uint64_t offset, bool write, spyre_device_t on = nullptr) {
    std::shared_ptr<Device> dev = on ? check_device(on)->dev : b->dev;  // the stream's card
    if (stream) dev = check_stream_handle(stream)->dev;
    if (!(dev->info().caps & SPYRE_DEVICE_CAP_SEMAPHORE))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{} has no device-side semaphores (SPYRE_DEVICE_CAP_SEMAPHORE: "
                         "hw 1.8 and a driver reporting DRM_SPYRE_CAP_SEMAPHORE)",
                         dev->name()));
    require(offset % SPYRE_SEMAPHORE_BYTES == 0,
            "semaphore offset {} is not a multiple of {} (a semaphore is {} bytes at a {}-byte "
            "aligned offset of its buffer)",
            offset, SPYRE_SEMAPHORE_BYTES, SPYRE_SEMAPHORE_BYTES, SPYRE_SEMAPHORE_BYTES);
    require(offset <= b->buf->size() && SPYRE_SEMAPHORE_BYTES <= b->buf->size() - offset,
            "semaphore offset {} + {} bytes exceeds the semaphore buffer's size {}", offset,
            SPYRE_SEMAPHORE_BYTES, b->buf->size());
    SemOp op;
    op.buf = b->buf;
    op.offset = offset;
    if (b->dev != dev) {
        require(write,
                "the semaphore is on {} but the stream belongs to {}: a stream waits only for "
                "semaphores of its own card (write_value may write into a peer's)",
                b->dev->name(), dev->name());
        if (auto why = peer_refusal(*dev, *b->dev); !why.empty())
            fail(SPYRE_ERROR_NOT_SUPPORTED, why);
        require(dev->peer_access_enabled(*b->dev),
                "the semaphore is on {} but the stream belongs to {}, and peer access from {} to "
                "{} is not enabled: call spyre_device_enable_peer_access({}, {}) first",
                b->dev->name(), dev->name(), dev->name(), b->dev->name(), dev->name(),
                b->dev->name());
        op.peer_dev = b->dev;
    }
    return {resolve_stream(stream, dev), std::move(op)};
}

}  // namespace

std::shared_ptr<const void> hold_buffer(spyre_buffer_t buf) { return check_buffer(buf); }

void write_value_held(spyre_device_t device, spyre_stream_t stream,
                      const std::shared_ptr<const void>& held, uint64_t offset, uint64_t value) {
    auto b = std::const_pointer_cast<BufferObj>(std::static_pointer_cast<const BufferObj>(held));
    auto [st, op] = check_sem(stream, std::move(b), offset, true, device);
    op.value = value;
    st->write_value(op);
}

}  // namespace spyre

extern "C" {

uint32_t spyre_get_version(void) { return SPYRE_API_VERSION; }

const char* spyre_get_version_string(void) {
#define SPYRE_STR2(x) #x
#define SPYRE_STR(x) SPYRE_STR2(x)
    return SPYRE_STR(SPYRE_API_VERSION_MAJOR) "." SPYRE_STR(SPYRE_API_VERSION_MINOR) "." SPYRE_STR(
        SPYRE_API_VERSION_PATCH);
}

const char* spyre_status_string(spyre_status status) { return status_string(status); }

const char* spyre_backend_string(spyre_backend backend) {
    switch (backend) {
        case SPYRE_BACKEND_KERNEL:
            return "kernel";
        case SPYRE_BACKEND_SIM:
            return "sim";
    }
    return "unknown";
}

const char* spyre_last_error(void) { return last_error(); }

void spyre_clear_last_error(void) { clear_last_error(); }

spyre_status spyre_get_device_count(int* count) {
    if (count) *count = 0;
    return guard(__func__, [&] {
        require_out(count, "count");
        *count = device_count();
    });
}

spyre_status spyre_device_open(int index, spyre_device_t* device) {
    if (device) *device = nullptr;
    return guard(__func__, [&] {
        require_out(device, "device");
        auto obj = std::make_shared<DeviceObj>();
        obj->dev = open_device(index);
        *device = to_handle<spyre_device>(handles().add(Kind::Device, obj));
    });
}

spyre_status spyre_device_close(spyre_device_t device) {
    return guard(__func__, [&] {
        if (!device) return;
        handles().remove<DeviceObj>(device, Kind::Device, "device");
    });
}

spyre_status spyre_device_get_info(spyre_device_t device, spyre_device_info* info) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(info, "info");
        *info = d->dev->info();
    });
}

spyre_status spyre_mem_get_info(spyre_device_t device, uint64_t* free, uint64_t* total) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        auto m = d->dev->query_mem();
        if (free) *free = m.devmem_total > m.devmem_used ? m.devmem_total - m.devmem_used : 0;
        if (total) *total = m.devmem_total;
    });
}

spyre_status spyre_device_get_mem_stats(spyre_device_t device, spyre_mem_stats* stats) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(stats, "stats");
        auto m = d->dev->query_mem();
        *stats = spyre_mem_stats{};
        stats->devmem_total = m.devmem_total;
        stats->devmem_used = m.devmem_used;
        stats->devmem_largest_free = m.devmem_largest_free;
        stats->host_buffer_bytes = m.host_bo_bytes;
    });
}

spyre_status spyre_device_get_telemetry(spyre_device_t device, spyre_telemetry* t) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(t, "telemetry");
        auto k = d->dev->query_telemetry();
        *t = spyre_telemetry{};
        t->cmds_completed = k.cmds_completed;
        t->h2d_bytes = k.h2d_bytes;
        t->d2h_bytes = k.d2h_bytes;
        t->d2d_bytes = k.d2d_bytes;
        t->jobs_submitted = k.jobs_submitted;
        t->jobs_completed = k.jobs_completed;
        t->jobs_failed = k.jobs_failed;
        t->cmd_errors = k.cmd_errors;
        t->resets = k.resets;
        t->temp_mc = k.temp_mc;
        t->power_mw = k.power_mw;
        t->power_cap_mw = k.power_cap_mw;
        t->launches = k.launches;
        t->launch_errors = k.launch_errors;
        t->engine_cycles = k.engine_cycles;
        t->engine_instructions = k.engine_instructions;
        t->engine_macs = k.engine_macs;
        t->engine_ddr_read_bytes = k.engine_ddr_read_bytes;
        t->engine_ddr_write_bytes = k.engine_ddr_write_bytes;
        t->engine_ring_bytes = k.engine_ring_bytes;
        t->p2p_read_bytes = k.p2p_rd_bytes;
        t->p2p_write_bytes = k.p2p_wr_bytes;
    });
}

spyre_status spyre_device_synchronize(spyre_device_t device) {
    return guard(__func__, [&] { check_device(device)->dev->synchronize(); });
}

spyre_status spyre_device_get_runtime_stats(spyre_device_t device, spyre_runtime_stats* stats) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(stats, "stats");
        *stats = spyre_runtime_stats{};
        auto& c = d->dev->counters();
        stats->jobs_submitted = c.jobs_submitted;
        stats->busy_retries = c.busy_retries;
        stats->backpressure_waits = c.backpressure_waits;
        stats->program_cache_hits = c.program_cache_hits;
        stats->program_cache_misses = c.program_cache_misses;
        stats->pinned_programs = d->dev->pinned_program_count();
        stats->pinned_program_evictions = c.pinned_program_evictions;
        auto& sa = d->dev->suballocator();
        auto s = sa.stats();
        stats->suballoc_slabs = s.slabs;
        stats->suballoc_slab_bytes = s.slab_bytes;
        stats->suballoc_used_bytes = s.used_bytes;
        stats->suballoc_buffers = s.blocks;
        stats->suballoc_max_bytes = sa.max_bytes();
    });
}

spyre_status spyre_malloc(spyre_device_t device, uint64_t size, spyre_buffer_t* buffer) {
    if (buffer) *buffer = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(buffer, "buffer");
        require(size > 0, "size must be > 0");
        auto obj = std::make_shared<BufferObj>();
        obj->dev = d->dev;
        obj->owner = reinterpret_cast<uintptr_t>(device);
        obj->buf = d->dev->alloc_buffer(size);
        uintptr_t h = handles().add(Kind::Buffer, obj);
        {
            auto& am = addresses();
            std::lock_guard lock(am.mu);
            am.by_addr[{obj->dev.get(), obj->buf->dev_addr()}] = {h, size};
        }
        *buffer = to_handle<spyre_buffer>(h);
    });
}

spyre_status spyre_free(spyre_buffer_t buffer) {
    return guard(__func__, [&] {
        if (!buffer) return;
        auto obj = handles().remove<BufferObj>(buffer, Kind::Buffer, "buffer");
        auto& am = addresses();
        std::lock_guard lock(am.mu);
        am.by_addr.erase({obj->dev.get(), obj->buf->dev_addr()});
        // Work still queued on the buffer holds a reference: its memory is reused only after.
    });
}

spyre_status spyre_buffer_size(spyre_buffer_t buffer, uint64_t* size) {
    return guard(__func__, [&] {
        auto b = check_buffer(buffer);
        require_out(size, "size");
        *size = b->buf->size();
    });
}

spyre_status spyre_buffer_device_address(spyre_buffer_t buffer, uint64_t* addr) {
    return guard(__func__, [&] {
        auto b = check_buffer(buffer);
        require_out(addr, "addr");
        *addr = b->buf->dev_addr();
    });
}

spyre_status spyre_buffer_get_device(spyre_buffer_t buffer, spyre_device_t* device) {
    if (device) *device = nullptr;
    return guard(__func__, [&] {
        auto b = check_buffer(buffer);
        require_out(device, "device");
        require(handles().live(b->owner, Kind::Device),
                "the device handle this buffer was allocated through has been closed");
        *device = to_handle<spyre_device>(b->owner);
    });
}

spyre_status spyre_buffer_from_address(spyre_device_t device, uint64_t addr, spyre_buffer_t* buffer,
                                       uint64_t* offset) {
    if (buffer) *buffer = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(buffer, "buffer");
        auto& am = addresses();
        std::lock_guard lock(am.mu);
        auto it = am.by_addr.upper_bound({d->dev.get(), addr});
        bool found = false;
        if (it != am.by_addr.begin()) {
            --it;
            found = it->first.first == d->dev.get() && addr - it->first.second < it->second.second;
        }
        require(found, "no live buffer on {} contains device address {:#x}", d->dev->name(), addr);
        *buffer = to_handle<spyre_buffer>(it->second.first);
        if (offset) *offset = addr - it->first.second;
    });
}

spyre_status spyre_buffer_map(spyre_buffer_t buffer, void** ptr) {
    if (ptr) *ptr = nullptr;
    return guard(__func__, [&] {
        auto b = check_buffer(buffer);
        require_out(ptr, "ptr");
        *ptr = b->buf->map();
    });
}

spyre_status spyre_host_alloc(spyre_device_t device, uint64_t size, void** ptr) {
    if (ptr) *ptr = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(ptr, "ptr");
        require(size > 0, "size must be > 0");
        *ptr = d->dev->host_alloc(size);
    });
}

spyre_status spyre_host_free(spyre_device_t device, void* ptr) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        if (!ptr) return;
        d->dev->host_free(ptr);
    });
}

// ---- copies ----

namespace {
spyre_status htod(const char* fn, spyre_buffer_t dst, uint64_t dst_offset, const void* src,
                  uint64_t size, spyre_stream_t stream, bool sync) {
    return guard(fn, [&] {
        auto b = check_buffer(dst, "destination");
        check_range(*b, dst_offset, size, "destination");
        StreamRef st = resolve_stream(stream, b->dev);
        if (size == 0) return;
        check_host_ptr(src, size, "source");
        auto body = [&] { st->copy_htod(b->buf, dst_offset, src, size); };
        if (sync)
            st->run_sync(body);
        else
            body();
    });
}

spyre_status dtoh(const char* fn, void* dst, spyre_buffer_t src, uint64_t src_offset, uint64_t size,
                  spyre_stream_t stream, bool sync) {
    return guard(fn, [&] {
        auto b = check_buffer(src, "source");
        check_range(*b, src_offset, size, "source");
        StreamRef st = resolve_stream(stream, b->dev);
        if (size == 0) return;
        check_host_ptr(dst, size, "destination");
        auto body = [&] { st->copy_dtoh(dst, b->buf, src_offset, size); };
        if (sync)
            st->run_sync(body);
        else
            body();
    });
}

spyre_status fill(const char* fn, spyre_buffer_t buffer, uint64_t offset, const void* pattern,
                  uint32_t psize, uint64_t count, spyre_stream_t stream, bool sync) {
    return guard(fn, [&] {
        auto b = check_buffer(buffer);
        require(pattern != nullptr, "pattern pointer is NULL");
        require(psize == 1 || psize == 2 || psize == 4 || psize == 8,
                "pattern_size {} must be 1, 2, 4 or 8", psize);
        require(count <= UINT64_MAX / psize, "count * pattern_size overflows");
        const uint64_t size = count * psize;
        check_range(*b, offset, size, "destination");
        StreamRef st = resolve_stream(stream, b->dev);
        if (size == 0) return;
        uint64_t pat = 0;
        std::memcpy(&pat, pattern, psize);
        auto body = [&] { st->fill(b->buf, offset, size, pat, psize); };
        if (sync)
            st->run_sync(body);
        else
            body();
    });
}

spyre_status copy3d(const char* fn, const spyre_memcpy3d_params* p, spyre_stream_t stream,
                    bool sync) {
    return guard(fn, [&] {
        require(p != nullptr, "params pointer is NULL");
        for (uint64_t r : p->reserved) require(r == 0, "params->reserved[] must be 0");
        require((p->src_buffer != nullptr) != (p->src_host != nullptr),
                "exactly one of src_buffer and src_host must be set");
        require((p->dst_buffer != nullptr) != (p->dst_host != nullptr),
                "exactly one of dst_buffer and dst_host must be set");
        require(p->src_buffer || p->dst_buffer,
                "host to host copies are not device work: use memcpy");
        if (p->width == 0 || p->height == 0 || p->depth == 0) return;
        Copy3D c;
        c.width = p->width;
        c.height = p->height;
        c.depth = p->depth;
        std::shared_ptr<Device> dev;
        auto side = [&](CopySide& s, spyre_buffer_t buf, uint64_t off, const void* host,
                        uint64_t pitch, uint64_t slice, const char* which) {
            require(pitch >= c.width, "{} pitch {} is smaller than the width {}", which, pitch,
                    c.width);
            if (c.depth > 1)
                require(c.height <= UINT64_MAX / pitch && slice >= pitch * c.height,
                        "{} slice pitch {} is smaller than pitch x height", which, slice);
            // Last byte: (depth-1)*slice + (height-1)*pitch + width, overflow-checked.
            unsigned __int128 span = (unsigned __int128)(c.depth - 1) * slice +
                                     (unsigned __int128)(c.height - 1) * pitch + c.width;
            require(span <= UINT64_MAX, "{} extent overflows", which);
            s.pitch = pitch;
            s.slice_pitch = slice;
            if (buf) {
                auto b = check_buffer(buf, which);
                check_range(*b, off, static_cast<uint64_t>(span), which);
                if (dev)
                    require(dev == b->dev,
                            "the buffers are on different cards: 3-D copies work within one card");
                dev = b->dev;
                s.buf = b->buf;
                s.offset = off;
            } else {
                check_host_ptr(host, static_cast<uint64_t>(span), which);
                s.host = static_cast<std::byte*>(const_cast<void*>(host));
            }
        };
        side(c.src, p->src_buffer, p->src_offset, p->src_host, p->src_pitch, p->src_slice_pitch,
             "source");
        side(c.dst, p->dst_buffer, p->dst_offset, p->dst_host, p->dst_pitch, p->dst_slice_pitch,
             "destination");
        if (c.src.buf && c.src.buf == c.dst.buf) {
            const uint64_t s0 = p->src_offset, d0 = p->dst_offset;
            const uint64_t s1 =
                s0 + (c.depth - 1) * c.src.slice_pitch + (c.height - 1) * c.src.pitch + c.width;
            const uint64_t d1 =
                d0 + (c.depth - 1) * c.dst.slice_pitch + (c.height - 1) * c.dst.pitch + c.width;
            require(s1 <= d0 || d1 <= s0, "source and destination extents overlap in one buffer");
        }
        StreamRef st = resolve_stream(stream, dev);
        auto body = [&] { st->copy_3d(c); };
        if (sync)
            st->run_sync(body);
        else
            body();
    });
}
}  // namespace

spyre_status spyre_memcpy_htod(spyre_buffer_t dst, uint64_t dst_offset, const void* src,
                               uint64_t size) {
    return htod(__func__, dst, dst_offset, src, size, nullptr, true);
}

spyre_status spyre_memcpy_dtoh(void* dst, spyre_buffer_t src, uint64_t src_offset, uint64_t size) {
    return dtoh(__func__, dst, src, src_offset, size, nullptr, true);
}

spyre_status spyre_memcpy_dtod(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src,
                               uint64_t src_offset, uint64_t size) {
    return guard(__func__, [&] { do_dtod(dst, dst_offset, src, src_offset, size, nullptr, true); });
}

spyre_status spyre_memcpy_htod_async(spyre_buffer_t dst, uint64_t dst_offset, const void* src,
                                     uint64_t size, spyre_stream_t stream) {
    return htod(__func__, dst, dst_offset, src, size, stream, false);
}

spyre_status spyre_memcpy_dtoh_async(void* dst, spyre_buffer_t src, uint64_t src_offset,
                                     uint64_t size, spyre_stream_t stream) {
    return dtoh(__func__, dst, src, src_offset, size, stream, false);
}

spyre_status spyre_memcpy_dtod_async(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src,
                                     uint64_t src_offset, uint64_t size, spyre_stream_t stream) {
    return guard(__func__, [&] { do_dtod(dst, dst_offset, src, src_offset, size, stream, false); });
}

spyre_status spyre_device_can_access_peer(spyre_device_t device, spyre_device_t peer,
                                          int* can_access) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        auto p = check_device(peer);
        require_out(can_access, "can_access");
        *can_access = d->dev != p->dev && peer_refusal(*d->dev, *p->dev).empty();
    });
}

spyre_status spyre_device_enable_peer_access(spyre_device_t device, spyre_device_t peer) {
    return guard(__func__, [&] {
        auto d = check_device(device);
        auto p = check_device(peer);
        require(d->dev != p->dev,
                "{} cannot be its own peer (copies within one card need no "
                "peer access)",
                d->dev->name());
        p->dev->check_present();
        if (!p->dev->alive())
            fail(SPYRE_ERROR_DEVICE_LOST,
                 std::format("peer {} was removed or its driver unbound", p->dev->name()));
        if (auto why = peer_refusal(*d->dev, *p->dev); !why.empty())
            fail(SPYRE_ERROR_NOT_SUPPORTED, why);
        d->dev->enable_peer_access(p->dev);
    });
}

spyre_status spyre_memcpy_peer(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src,
                               uint64_t src_offset, uint64_t size) {
    return guard(__func__, [&] { do_peer(dst, dst_offset, src, src_offset, size, nullptr, true); });
}

spyre_status spyre_memcpy_peer_async(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src,
                                     uint64_t src_offset, uint64_t size, spyre_stream_t stream) {
    return guard(__func__, [&] { do_peer(dst, dst_offset, src, src_offset, size, stream, false); });
}

spyre_status spyre_memset(spyre_buffer_t buffer, uint64_t offset, int value, uint64_t size) {
    uint8_t v = static_cast<uint8_t>(value);
    return fill(__func__, buffer, offset, &v, 1, size, nullptr, true);
}

spyre_status spyre_memset_async(spyre_buffer_t buffer, uint64_t offset, int value, uint64_t size,
                                spyre_stream_t stream) {
    uint8_t v = static_cast<uint8_t>(value);
    return fill(__func__, buffer, offset, &v, 1, size, stream, false);
}

spyre_status spyre_fill_async(spyre_buffer_t buffer, uint64_t offset, const void* pattern,
                              uint32_t pattern_size, uint64_t count, spyre_stream_t stream) {
    return fill(__func__, buffer, offset, pattern, pattern_size, count, stream, false);
}

spyre_status spyre_memcpy_3d(const spyre_memcpy3d_params* p) {
    return copy3d(__func__, p, nullptr, true);
}

spyre_status spyre_memcpy_3d_async(const spyre_memcpy3d_params* p, spyre_stream_t stream) {
    return copy3d(__func__, p, stream, false);
}

// ---- programs ----

spyre_status spyre_program_load(spyre_device_t device, const void* image, size_t size,
                                spyre_program_t* program) {
    if (program) *program = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(program, "program");
        require(image != nullptr, "image pointer is NULL");
        require(size > 0, "image size must be > 0");
        uint32_t n = check_program_image(image, size);
        auto obj = std::make_shared<ProgramObj>();
        obj->dev = d->dev;
        obj->size = size;
        obj->num_instructions = n;
        obj->image = d->dev->load_program_image(image, size);
        *program = to_handle<spyre_program>(handles().add(Kind::Program, obj));
    });
}

spyre_status spyre_program_free(spyre_program_t program) {
    return guard(__func__, [&] {
        if (!program) return;
        handles().remove<ProgramObj>(program, Kind::Program, "program");
    });
}

spyre_status spyre_launch(spyre_program_t program, const spyre_launch_params* params,
                          spyre_launch_stats* stats) {
    return guard(__func__, [&] {
        auto p = check_program(program);
        LaunchRequest req = make_launch(*p, params);
        spyre_launch_stats s{};
        StreamRef st = p->dev->default_stream();
        st->run_sync([&] { st->launch(req, stats ? &s : nullptr); });
        if (stats) *stats = s;
    });
}

spyre_status spyre_push_launch_label(const char* label) {
    return guard(__func__, [&] {
        require(label != nullptr, "label is NULL");
        launch_labels().push_back(std::make_shared<const std::string>(label));
    });
}

spyre_status spyre_pop_launch_label(void) {
    return guard(__func__, [&] {
        require(!launch_labels().empty(), "no launch label was pushed on this thread");
        launch_labels().pop_back();
    });
}

spyre_status spyre_sim_inject_fault(int index, spyre_sim_fault fault, uint64_t after_launches) {
    return guard(__func__, [&] {
        if (selected_backend() != SPYRE_BACKEND_SIM)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 "simulated faults need the simulator backend (SPYRE_BACKEND=sim)");
        require(fault == SPYRE_SIM_FAULT_NONE || fault == SPYRE_SIM_FAULT_PROGRAM ||
                    fault == SPYRE_SIM_FAULT_LOST,
                "fault {} is not a spyre_sim_fault", static_cast<int>(fault));
        sim_inject_fault(index, fault, after_launches);
    });
}

spyre_status spyre_launch_async(spyre_program_t program, const spyre_launch_params* params,
                                spyre_stream_t stream) {
    return guard(__func__, [&] {
        auto p = check_program(program);
        LaunchRequest req = make_launch(*p, params);
        resolve_stream(stream, p->dev)->launch(req, nullptr);
    });
}

// ---- streams ----

spyre_status spyre_stream_create(spyre_device_t device, int priority, spyre_stream_t* stream) {
    if (stream) *stream = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(stream, "stream");
        require(priority == SPYRE_STREAM_PRIORITY_NORMAL ||
                    priority == SPYRE_STREAM_PRIORITY_HIGH || priority == SPYRE_STREAM_PRIORITY_LOW,
                "priority {} is not SPYRE_STREAM_PRIORITY_NORMAL (0), "
                "SPYRE_STREAM_PRIORITY_HIGH (-1) or SPYRE_STREAM_PRIORITY_LOW (1)",
                priority);
        auto obj = std::make_shared<StreamObj>();
        obj->dev = d->dev;
        obj->owner = reinterpret_cast<uintptr_t>(device);
        obj->stream = d->dev->create_stream(priority, false);
        *stream = to_handle<spyre_stream>(handles().add(Kind::Stream, obj));
    });
}

spyre_status spyre_stream_destroy(spyre_stream_t stream) {
    return guard(__func__, [&] {
        if (!stream) return;
        auto obj = handles().remove<StreamObj>(stream, Kind::Stream, "stream");
        obj->flush_batch();
        obj->stream->synchronize();
    });
}

spyre_status spyre_stream_synchronize(spyre_stream_t stream) {
    return guard(__func__, [&] {
        if (!stream)
            fail(SPYRE_ERROR_INVALID_ARGUMENT,
                 "stream handle is NULL: synchronize a default stream with "
                 "spyre_device_synchronize()");
        check_stream_handle(stream)->current()->synchronize();
    });
}

spyre_status spyre_stream_query(spyre_stream_t stream) {
    bool done = false;
    spyre_status st =
        guard(__func__, [&] { done = check_stream_handle(stream)->current()->query(); });
    if (st == SPYRE_SUCCESS && !done) return not_ready(__func__, "the stream has work pending");
    return st;
}

spyre_status spyre_stream_wait_event(spyre_stream_t stream, spyre_event_t event) {
    return guard(__func__, [&] {
        auto e = check_event(event);
        // NULL: the default stream of the event's card; a stream of another card waits on the
        // host.
        StreamRef st = stream ? check_stream_handle(stream)->current() : e->dev->default_stream();
        if (auto* cap = dynamic_cast<CaptureStream*>(st.get()); cap && cap->recorded_here(e.get()))
            return;  // recorded in this capture: the stream's order covers it
        MarkerRef m;
        {
            std::lock_guard lock(e->mu);
            m = e->marker;
        }
        if (m) st->wait(m);
    });
}

spyre_status spyre_launch_host_func(spyre_stream_t stream, void (*fn)(void*), void* user) {
    return guard(__func__, [&] {
        auto so = check_stream_handle(stream);
        require(fn != nullptr, "fn is NULL");
        so->current()->host_func(fn, user);
    });
}

spyre_status spyre_stream_get_info(spyre_stream_t stream, spyre_device_t* device, int* priority) {
    if (device) *device = nullptr;
    return guard(__func__, [&] {
        auto so = check_stream_handle(stream);
        if (device) {
            require(handles().live(so->owner, Kind::Device),
                    "the device handle this stream was created through has been closed");
            *device = to_handle<spyre_device>(so->owner);
        }
        if (priority) *priority = so->stream->priority();
    });
}

// ---- device-side semaphores ----

spyre_status spyre_stream_write_value(spyre_stream_t stream, spyre_buffer_t sem, uint64_t offset,
                                      uint64_t value) {
    return guard(__func__, [&] {
        auto [st, op] = check_sem(stream, check_buffer(sem, "semaphore buffer"), offset, true);
        op.value = value;
        st->write_value(op);
    });
}

spyre_status spyre_stream_wait_value(spyre_stream_t stream, spyre_buffer_t sem, uint64_t offset,
                                     uint64_t value, uint32_t timeout_us) {
    return guard(__func__, [&] {
        require(timeout_us <= SPYRE_SEMAPHORE_WAIT_MAX_US,
                "timeout_us {} exceeds SPYRE_SEMAPHORE_WAIT_MAX_US ({} us): a wait holds its "
                "stream (on the kernel backend its ring) for a bounded time; wait again for "
                "longer",
                timeout_us, SPYRE_SEMAPHORE_WAIT_MAX_US);
        auto [st, op] = check_sem(stream, check_buffer(sem, "semaphore buffer"), offset, false);
        op.value = value;
        op.timeout_us = timeout_us;
        st->wait_value(op);
    });
}

// ---- stream capture and graphs ----

spyre_status spyre_stream_begin_capture(spyre_stream_t stream) {
    return guard(__func__, [&] {
        require(stream != nullptr,
                "stream handle is NULL: a default stream cannot be captured (create a stream "
                "with spyre_stream_create())");
        auto so = check_stream_handle(stream);
        so->flush_batch();  // work held before the capture runs before it
        std::lock_guard lock(so->mu);
        require(!so->capture, "the stream is already capturing");
        so->capture = std::make_shared<CaptureStream>(so->dev, so->stream);
    });
}

spyre_status spyre_stream_end_capture(spyre_stream_t stream, spyre_graph_t* graph) {
    if (graph) *graph = nullptr;
    return guard(__func__, [&] {
        auto so = check_stream_handle(stream);
        require_out(graph, "graph");
        std::shared_ptr<CaptureStream> cap;
        {
            std::lock_guard lock(so->mu);
            require(so->capture != nullptr,
                    "the stream is not capturing (call spyre_stream_begin_capture() first)");
            cap = std::move(so->capture);
            so->capture.reset();
        }
        auto obj = std::make_shared<GraphObj>();
        obj->graph = cap->finish();  // throws the error that invalidated the capture
        *graph = to_handle<spyre_graph>(handles().add(Kind::Graph, obj));
    });
}

spyre_status spyre_stream_is_capturing(spyre_stream_t stream, int* capturing) {
    return guard(__func__, [&] {
        require_out(capturing, "capturing");
        *capturing = check_stream_handle(stream)->capturing() != nullptr;
    });
}

// ---- submission batching ----

// Nesting is a count; the bound only catches a begin without its end in a loop.
constexpr int kMaxBatchDepth = 1 << 16;

spyre_status spyre_stream_begin_batch(spyre_stream_t stream) {
    return guard(__func__, [&] {
        require(stream != nullptr,
                "stream handle is NULL: a default stream cannot batch (create a stream with "
                "spyre_stream_create())");
        auto so = check_stream_handle(stream);
        std::lock_guard lock(so->mu);
        require(so->batch_depth < kMaxBatchDepth,
                "the stream's batch is already nested {} deep (spyre_stream_end_batch ends one)",
                so->batch_depth);
        if (so->batch_depth++ == 0) {
            so->batch = std::make_shared<BatchStream>(so->dev, so->stream);
            so->dev->register_stream(so->batch);  // a device synchronize queues its work
        }
    });
}

spyre_status spyre_stream_end_batch(spyre_stream_t stream) {
    return guard(__func__, [&] {
        auto so = check_stream_handle(stream);
        std::shared_ptr<BatchStream> ended;
        {
            std::lock_guard lock(so->mu);
            require(so->batch_depth > 0,
                    "the stream is not batching (call spyre_stream_begin_batch() first)");
            if (--so->batch_depth == 0) ended = std::exchange(so->batch, nullptr);
        }
        if (ended) ended->close();
    });
}

spyre_status spyre_graph_launch(spyre_graph_t graph, spyre_stream_t stream) {
    return guard(__func__, [&] {
        require(graph != nullptr,
                "graph handle is NULL (capture one with spyre_stream_end_capture())");
        auto g = handles().get<GraphObj>(graph, Kind::Graph, "graph");
        resolve_stream(stream, g->graph->dev)->replay(g->graph);
    });
}

// The smallest and largest offset the graph's random launches were captured with.
std::pair<uint64_t, uint64_t> random_offset_range(const Graph& g) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const GraphNode& n : g.nodes)
        if (n.op == GraphNode::Op::Launch && n.launch.random_arg >= 0) {
            lo = std::min(lo, n.launch.args[n.launch.random_arg + 1]);
            hi = std::max(hi, n.launch.args[n.launch.random_arg + 1]);
        }
    return {lo, hi};
}

// A replay's own copy of the graph with its random launches moved to (seed, offset + o - o_min):
// queued replays keep the streams they were given.
spyre_status spyre_graph_launch_random(spyre_graph_t graph, spyre_stream_t stream, uint64_t seed,
                                       uint64_t offset) {
    return guard(__func__, [&] {
        require(graph != nullptr,
                "graph handle is NULL (capture one with spyre_stream_end_capture())");
        auto g = handles().get<GraphObj>(graph, Kind::Graph, "graph");
        GraphRef run = g->graph;
        if (run->random_launches) {
            const auto [lo, hi] = random_offset_range(*run);
            require(offset <= UINT64_MAX - (hi - lo),
                    "offset {:#x} + the graph's span of {} random offsets overflows", offset,
                    hi - lo + 1);
            auto copy = std::make_shared<Graph>(*run);
            for (GraphNode& n : copy->nodes)
                if (n.op == GraphNode::Op::Launch && n.launch.random_arg >= 0) {
                    uint64_t* stream = &n.launch.args[n.launch.random_arg];
                    stream[0] = seed;
                    stream[1] = offset + (stream[1] - lo);
                }
            run = std::move(copy);
        }
        resolve_stream(stream, run->dev)->replay(run);
    });
}

spyre_status spyre_graph_get_info(spyre_graph_t graph, spyre_graph_info* info) {
    return guard(__func__, [&] {
        require(graph != nullptr, "graph handle is NULL");
        require_out(info, "info");
        auto g = handles().get<GraphObj>(graph, Kind::Graph, "graph");
        *info = spyre_graph_info{};
        for (const GraphNode& n : g->graph->nodes)
            if (n.op != GraphNode::Op::Record) info->operations++;
        info->launches = g->graph->launches;
        info->random_launches = g->graph->random_launches;
        if (g->graph->random_launches) {
            const auto [lo, hi] = random_offset_range(*g->graph);
            info->random_offsets = hi - lo + 1;
        }
    });
}

spyre_status spyre_graph_destroy(spyre_graph_t graph) {
    return guard(__func__, [&] {
        if (!graph) return;
        handles().remove<GraphObj>(graph, Kind::Graph, "graph");  // queued replays hold it
    });
}

// ---- events ----

spyre_status spyre_event_create(spyre_device_t device, spyre_event_t* event) {
    if (event) *event = nullptr;
    return guard(__func__, [&] {
        auto d = check_device(device);
        require_out(event, "event");
        auto obj = std::make_shared<EventObj>();
        obj->dev = d->dev;
        *event = to_handle<spyre_event>(handles().add(Kind::Event, obj));
    });
}

spyre_status spyre_event_destroy(spyre_event_t event) {
    return guard(__func__, [&] {
        if (!event) return;
        handles().remove<EventObj>(event, Kind::Event, "event");
    });
}

spyre_status spyre_event_record(spyre_event_t event, spyre_stream_t stream) {
    return guard(__func__, [&] {
        auto e = check_event(event);
        StreamRef st = resolve_stream(stream, e->dev);
        if (auto* cap = dynamic_cast<CaptureStream*>(st.get())) {
            // Each replay of the graph records the event after the graph's work.
            std::weak_ptr<EventObj> w = e;
            cap->add_record(e.get(), [w](const MarkerRef& m) {
                if (auto ev = w.lock()) {
                    std::lock_guard lock(ev->mu);
                    ev->marker = m;
                }
            });
            return;
        }
        MarkerRef m = st->record();
        std::lock_guard lock(e->mu);
        e->marker = std::move(m);
    });
}

spyre_status spyre_event_synchronize(spyre_event_t event) {
    return guard(__func__, [&] {
        auto e = check_event(event);
        MarkerRef m;
        {
            std::lock_guard lock(e->mu);
            m = e->marker;
        }
        if (m) m->wait();
    });
}

spyre_status spyre_event_query(spyre_event_t event) {
    bool done = true;
    spyre_status st = guard(__func__, [&] {
        auto e = check_event(event);
        MarkerRef m;
        {
            std::lock_guard lock(e->mu);
            m = e->marker;
        }
        done = !m || m->done();
    });
    if (st == SPYRE_SUCCESS && !done)
        return not_ready(__func__, "the work the event covers has not finished");
    return st;
}

spyre_status spyre_event_elapsed(spyre_event_t start, spyre_event_t end,
                                 spyre_event_timing* timing) {
    bool ready = true;
    spyre_status st = guard(__func__, [&] {
        auto a = check_event(start, "start event");
        auto b = check_event(end, "end event");
        require_out(timing, "timing");
        MarkerRef ma, mb;
        {
            std::lock_guard lock(a->mu);
            ma = a->marker;
        }
        {
            std::lock_guard lock(b->mu);
            mb = b->marker;
        }
        require(ma && mb, "both events must have been recorded");
        if (!ma->done() || !mb->done()) {
            ready = false;
            return;
        }
        *timing = spyre_event_timing{};
        timing->wall_ns = mb->time_ns() - ma->time_ns();
        if (ma->clock_id() != mb->clock_id())
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 ma->stream_id() != mb->stream_id() && a->dev == b->dev &&
                         a->dev->info().backend == SPYRE_BACKEND_KERNEL
                     ? "the events were recorded on different streams: on the kernel backend "
                       "modeled device time is defined between two events of one stream"
                     : "the events were recorded on different cards: modeled device time is "
                       "defined between two events of one card");
        timing->modeled_cycles = mb->cycles() >= ma->cycles() ? mb->cycles() - ma->cycles() : 0;
        const uint32_t mhz = a->dev->info().clock_mhz;
        timing->modeled_ns = mhz ? timing->modeled_cycles * 1000 / mhz : 0;
    });
    if (st == SPYRE_SUCCESS && !ready) return not_ready(__func__, "an event has not completed yet");
    return st;
}

}  // extern "C"
