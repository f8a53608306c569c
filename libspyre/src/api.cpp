// The C ABI: validates arguments, translates exceptions into a status plus the thread-local
// last-error message. No exception leaves this file.
#include <cinttypes>
#include <format>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include "backend.hpp"
#include "error.hpp"
#include "program.hpp"
#include "spyre/spyre.h"

struct spyre_device {
    std::shared_ptr<spyre::Device> dev;
};

struct spyre_buffer {
    std::shared_ptr<spyre::Device> dev;
    spyre_device* owner;  // the handle it was allocated through (for spyre_buffer_get_device)
    std::unique_ptr<spyre::Buffer> bo;
};

struct spyre_program {
    std::shared_ptr<spyre::Device> dev;
    std::unique_ptr<spyre::Buffer> image;  // device buffer holding the image
    uint64_t size;
    uint32_t num_instructions;
};

namespace spyre {
namespace {

// Live handles, so that a stale or foreign pointer gives an error instead of a crash.
class Registry {
  public:
    void add(const void* h) {
        std::lock_guard lock(mu_);
        live_.insert(h);
    }
    bool remove(const void* h) {
        std::lock_guard lock(mu_);
        return live_.erase(h) == 1;
    }
    bool contains(const void* h) {
        std::lock_guard lock(mu_);
        return live_.contains(h);
    }

  private:
    std::mutex mu_;
    std::unordered_set<const void*> live_;
};

Registry& registry() {
    static Registry* r = new Registry();  // never destroyed: usable from atexit handlers
    return *r;
}

template <typename F>
spyre_status guard(const char* fn, F&& body) noexcept {
    try {
        body();
        return SPYRE_SUCCESS;
    } catch (const Error& e) {
        set_last_error(std::format("{}: {}", fn, e.what()));
        return e.status();
    } catch (const std::bad_alloc&) {
        set_last_error(std::format("{}: out of host memory", fn));
        return SPYRE_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(std::format("{}: internal error: {}", fn, e.what()));
        return SPYRE_ERROR_INTERNAL;
    } catch (...) {
        set_last_error(std::format("{}: internal error: unknown exception", fn));
        return SPYRE_ERROR_INTERNAL;
    }
}

void require(bool ok, const std::string& message) {
    if (!ok) fail(SPYRE_ERROR_INVALID_ARGUMENT, message);
}

template <typename T>
void require_out(T* p, const char* name) {
    require(p != nullptr, std::format("output pointer `{}` is NULL", name));
}

spyre_device* check_device(spyre_device_t d) {
    require(d != nullptr, "device handle is NULL (open one with spyre_device_open())");
    require(registry().contains(d), "device handle is invalid or already closed");
    return d;
}

spyre_buffer* check_buffer(spyre_buffer_t b, const char* which = "buffer") {
    require(b != nullptr, std::format("{} handle is NULL", which));
    require(registry().contains(b), std::format("{} handle is invalid or already freed", which));
    return b;
}

spyre_program* check_program(spyre_program_t p) {
    require(p != nullptr, "program handle is NULL (load one with spyre_program_load())");
    require(registry().contains(p), "program handle is invalid or already freed");
    return p;
}

void check_range(const spyre_buffer* b, uint64_t offset, uint64_t size, const char* which) {
    check_buffer_range(b->bo->size(), offset, size, which);
}

void check_host_ptr(const void* p, uint64_t size, const char* which) {
    require(p != nullptr, std::format("{} host pointer is NULL", which));
    require(
        reinterpret_cast<uintptr_t>(p) <= UINTPTR_MAX - size + 1 || size == 0,
        std::format("{} host range {} + {} bytes wraps around the address space", which, p, size));
}

}  // namespace
}  // namespace spyre

using namespace spyre;

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
        auto h = std::make_unique<spyre_device>();
        h->dev = open_device(index);
        registry().add(h.get());
        *device = h.release();
    });
}

spyre_status spyre_device_close(spyre_device_t device) {
    return guard(__func__, [&] {
        if (!device) return;
        require(registry().remove(device), "device handle is invalid or already closed");
        delete device;
    });
}

spyre_status spyre_device_get_info(spyre_device_t device, spyre_device_info* info) {
    return guard(__func__, [&] {
        auto* d = check_device(device);
        require_out(info, "info");
        *info = d->dev->info();
    });
}

spyre_status spyre_mem_get_info(spyre_device_t device, uint64_t* free, uint64_t* total) {
    return guard(__func__, [&] {
        auto* d = check_device(device);
        auto m = d->dev->query_mem();
        if (free) *free = m.devmem_total > m.devmem_used ? m.devmem_total - m.devmem_used : 0;
        if (total) *total = m.devmem_total;
    });
}

spyre_status spyre_device_get_mem_stats(spyre_device_t device, spyre_mem_stats* stats) {
    return guard(__func__, [&] {
        auto* d = check_device(device);
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
        auto* d = check_device(device);
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
    });
}

spyre_status spyre_device_synchronize(spyre_device_t device) {
    return guard(__func__, [&] { check_device(device)->dev->synchronize(); });
}

spyre_status spyre_malloc(spyre_device_t device, uint64_t size, spyre_buffer_t* buffer) {
    if (buffer) *buffer = nullptr;
    return guard(__func__, [&] {
        auto* d = check_device(device);
        require_out(buffer, "buffer");
        require(size > 0, "size must be > 0");
        auto h = std::make_unique<spyre_buffer>();
        h->dev = d->dev;
        h->owner = d;
        h->bo = d->dev->alloc(size);
        registry().add(h.get());
        *buffer = h.release();
    });
}

spyre_status spyre_free(spyre_buffer_t buffer) {
    return guard(__func__, [&] {
        if (!buffer) return;
        require(registry().remove(buffer), "buffer handle is invalid or already freed");
        delete buffer;
    });
}

spyre_status spyre_buffer_size(spyre_buffer_t buffer, uint64_t* size) {
    return guard(__func__, [&] {
        auto* b = check_buffer(buffer);
        require_out(size, "size");
        *size = b->bo->size();
    });
}

spyre_status spyre_buffer_device_address(spyre_buffer_t buffer, uint64_t* addr) {
    return guard(__func__, [&] {
        auto* b = check_buffer(buffer);
        require_out(addr, "addr");
        *addr = b->bo->dev_addr();
    });
}

spyre_status spyre_buffer_get_device(spyre_buffer_t buffer, spyre_device_t* device) {
    if (device) *device = nullptr;
    return guard(__func__, [&] {
        auto* b = check_buffer(buffer);
        require_out(device, "device");
        require(registry().contains(b->owner),
                "the device handle this buffer was allocated through has been closed");
        *device = b->owner;
    });
}

spyre_status spyre_buffer_map(spyre_buffer_t buffer, void** ptr) {
    if (ptr) *ptr = nullptr;
    return guard(__func__, [&] {
        auto* b = check_buffer(buffer);
        require_out(ptr, "ptr");
        *ptr = b->bo->map();
    });
}

spyre_status spyre_host_alloc(spyre_device_t device, uint64_t size, void** ptr) {
    if (ptr) *ptr = nullptr;
    return guard(__func__, [&] {
        auto* d = check_device(device);
        require_out(ptr, "ptr");
        require(size > 0, "size must be > 0");
        *ptr = d->dev->host_alloc(size);
    });
}

spyre_status spyre_host_free(spyre_device_t device, void* ptr) {
    return guard(__func__, [&] {
        auto* d = check_device(device);
        if (!ptr) return;
        d->dev->host_free(ptr);
    });
}

spyre_status spyre_memcpy_htod(spyre_buffer_t dst, uint64_t dst_offset, const void* src,
                               uint64_t size) {
    return guard(__func__, [&] {
        auto* b = check_buffer(dst, "destination");
        check_range(b, dst_offset, size, "destination");
        if (size == 0) return;
        check_host_ptr(src, size, "source");
        b->dev->copy_htod(*b->bo, dst_offset, src, size);
    });
}

spyre_status spyre_memcpy_dtoh(void* dst, spyre_buffer_t src, uint64_t src_offset, uint64_t size) {
    return guard(__func__, [&] {
        auto* b = check_buffer(src, "source");
        check_range(b, src_offset, size, "source");
        if (size == 0) return;
        check_host_ptr(dst, size, "destination");
        b->dev->copy_dtoh(dst, *b->bo, src_offset, size);
    });
}

spyre_status spyre_memcpy_dtod(spyre_buffer_t dst, uint64_t dst_offset, spyre_buffer_t src,
                               uint64_t src_offset, uint64_t size) {
    return guard(__func__, [&] {
        auto* d = check_buffer(dst, "destination");
        auto* s = check_buffer(src, "source");
        check_range(d, dst_offset, size, "destination");
        check_range(s, src_offset, size, "source");
        if (size == 0) return;
        if (d->dev != s->dev)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("source is on {} and destination on {}: copies between different "
                             "device handles go through host memory (spyre_memcpy_dtoh + "
                             "spyre_memcpy_htod)",
                             s->dev->name(), d->dev->name()));
        if (d == s)
            require(dst_offset + size <= src_offset || src_offset + size <= dst_offset,
                    std::format("source range [{}, {}) and destination range [{}, {}) overlap in "
                                "the same buffer",
                                src_offset, src_offset + size, dst_offset, dst_offset + size));
        d->dev->copy_dtod(*d->bo, dst_offset, *s->bo, src_offset, size);
    });
}

spyre_status spyre_program_load(spyre_device_t device, const void* image, size_t size,
                                spyre_program_t* program) {
    if (program) *program = nullptr;
    return guard(__func__, [&] {
        auto* d = check_device(device);
        require_out(program, "program");
        require(image != nullptr, "image pointer is NULL");
        require(size > 0, "image size must be > 0");
        uint32_t n = check_program_image(image, size);
        auto h = std::make_unique<spyre_program>();
        h->dev = d->dev;
        h->size = size;
        h->num_instructions = n;
        h->image = d->dev->alloc(size);
        d->dev->copy_htod(*h->image, 0, image, size);
        registry().add(h.get());
        *program = h.release();
    });
}

spyre_status spyre_program_free(spyre_program_t program) {
    return guard(__func__, [&] {
        if (!program) return;
        require(registry().remove(program), "program handle is invalid or already freed");
        delete program;
    });
}

spyre_status spyre_launch(spyre_program_t program, const spyre_launch_params* params,
                          spyre_launch_stats* stats) {
    return guard(__func__, [&] {
        auto* p = check_program(program);
        require(params != nullptr, "params pointer is NULL");
        const Device& dev = *p->dev;
        require(params->flags == 0, std::format("params->flags {:#x} must be 0", params->flags));
        for (uint64_t r : params->reserved) require(r == 0, "params->reserved[] must be 0");
        const uint32_t cores = dev.info().num_cores;
        require(params->num_cores <= cores, std::format("num_cores {} exceeds the {} cores of {}",
                                                        params->num_cores, cores, dev.name()));
        require(params->num_args <= SPYRE_LAUNCH_MAX_ARGS,
                std::format("num_args {} exceeds {}", params->num_args, SPYRE_LAUNCH_MAX_ARGS));
        require(params->num_buffers <= SPYRE_LAUNCH_MAX_BUFFERS,
                std::format("num_buffers {} exceeds {}", params->num_buffers,
                            SPYRE_LAUNCH_MAX_BUFFERS));
        require(params->num_buffers == 0 || params->buffers != nullptr,
                std::format("buffers is NULL but num_buffers is {}", params->num_buffers));

        LaunchRequest req;
        req.program = p->image.get();
        req.program_size = p->size;
        req.num_cores = params->num_cores ? params->num_cores : cores;
        req.num_args = params->num_args;
        for (uint32_t i = 0; i < params->num_args; ++i) req.args[i] = params->args[i];
        std::unordered_set<const Buffer*> seen;
        for (uint32_t i = 0; i < params->num_buffers; ++i) {
            std::string which = std::format("buffers[{}]", i);
            auto* b = check_buffer(params->buffers[i], which.c_str());
            require(b->dev == p->dev,
                    std::format("{} belongs to {} through another device handle than the "
                                "program ({}): a program reaches only buffers allocated through "
                                "the handle it was loaded with",
                                which, b->dev->name(), dev.name()));
            if (seen.insert(b->bo.get()).second) req.buffers.push_back(b->bo.get());
        }
        spyre_launch_stats s{};
        p->dev->submit_launch(req)->wait(stats ? &s : nullptr);
        if (stats) *stats = s;
    });
}

}  // extern "C"
