// The backend abstraction of libspyre: a Device (one open card) and its Buffers, implemented by
// the kernel backend (device.{hpp,cpp}: the spyre driver's ioctls) and by the in-process
// simulator backend (sim.cpp: simulated cards running the compute engine). api.cpp only talks
// to these interfaces. Work on a device is a Job (today: a launch), so that streams and events
// can queue jobs later without changing the backends' contract.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spyre/spyre.h"
#include "spyre_accel.h"

namespace spyre {

// Device memory of one device. Created by Device::alloc; freed on destruction.
class Buffer {
  public:
    virtual ~Buffer() = default;
    virtual uint64_t size() const = 0;        // bytes the user asked for
    virtual uint64_t alloc_size() const = 0;  // bytes reserved (page rounded)
    virtual uint64_t dev_addr() const = 0;
    virtual void* map() = 0;  // CPU pointer to the whole buffer, mapped once
};

// A launch, validated by api.cpp: buffers are distinct, on this device, num_cores resolved.
struct LaunchRequest {
    const Buffer* program = nullptr;
    uint64_t program_size = 0;
    uint32_t num_cores = 0;  // 1 .. info().num_cores
    uint32_t num_args = 0;
    uint64_t args[SPYRE_LAUNCH_MAX_ARGS] = {};
    std::vector<const Buffer*> buffers;
};

// Submitted work. wait() blocks until it finished, throws Error on failure and, for a launch,
// fills *stats (if not NULL). Called at most once.
class Job {
  public:
    virtual ~Job() = default;
    virtual void wait(spyre_launch_stats* stats) = 0;
};

class Device {
  public:
    virtual ~Device() = default;
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const spyre_device_info& info() const { return info_; }
    const std::string& name() const { return name_; }

    virtual drm_spyre_mem_info query_mem() = 0;
    virtual drm_spyre_telemetry query_telemetry() = 0;

    // Device memory of `size` (> 0) bytes; out-of-memory errors say how much is free.
    virtual std::unique_ptr<Buffer> alloc(uint64_t size) = 0;

    virtual void* host_alloc(uint64_t size) = 0;
    virtual void host_free(void* ptr) = 0;

    // Synchronous copies; arguments already validated against the buffer sizes, buffers are
    // this device's.
    virtual void copy_htod(Buffer& dst, uint64_t dst_offset, const void* src, uint64_t size) = 0;
    virtual void copy_dtoh(void* dst, Buffer& src, uint64_t src_offset, uint64_t size) = 0;
    virtual void copy_dtod(Buffer& dst, uint64_t dst_offset, Buffer& src, uint64_t src_offset,
                           uint64_t size) = 0;

    virtual void synchronize() = 0;

    // Queues a launch. Throws NOT_SUPPORTED if the device cannot launch.
    virtual std::unique_ptr<Job> submit_launch(const LaunchRequest& req) = 0;

  protected:
    Device() = default;
    spyre_device_info info_{};
    std::string name_;
};

// ---- backend selection (backend.cpp) ----

// $SPYRE_BACKEND: unset/"" /"kernel" -> KERNEL, "sim" -> SIM; anything else throws
// INVALID_ARGUMENT.
spyre_backend selected_backend();
// Devices of the selected backend; throws NO_DEVICE (with advice) if there are none.
int device_count();
std::shared_ptr<Device> open_device(int index);

// Backend entry points.
std::shared_ptr<Device> open_kernel_device(int index);
int sim_device_count();  // from $SPYRE_SIM_DEVICES; throws INVALID_ARGUMENT on a bad value
std::shared_ptr<Device> open_sim_device(int index);

// ---- helpers shared by the backends (backend.cpp) ----

// Peak fp16 multiply-accumulates per cycle of one core: 2 corelets x 8 rows x 64 lanes.
inline constexpr uint64_t kMacsPerCoreCycle = 2 * 8 * 64;

// Fills the derived fields of *s (time_ns, peak_macs_per_cycle, utilization, clock_mhz) from
// total_cycles, macs and num_cores.
void finish_stats(spyre_launch_stats* s, uint32_t clock_mhz);

// Launch statistics from a launch result: the driver's drm_spyre_launch_result and the engine's
// spyre_engine_result share these field names.
template <class Result>
void stats_from_result(const Result& r, uint32_t clock_mhz, spyre_launch_stats* stats) {
    *stats = spyre_launch_stats{};
    stats->total_cycles = r.total_cycles;
    stats->ddr_read_bytes = r.ddr_read_bytes;
    stats->ddr_write_bytes = r.ddr_write_bytes;
    stats->ring_bytes = r.ring_bytes;
    stats->instructions = r.instructions;
    stats->macs = r.macs;
    stats->num_cores = std::min<uint32_t>(r.num_cores, SPYRE_LAUNCH_MAX_CORES);
    for (uint32_t c = 0; c < stats->num_cores; ++c) {
        for (int u = 0; u < SPYRE_LAUNCH_UNITS; ++u) stats->cores[c].busy[u] = r.cores[c].busy[u];
        stats->cores[c].end_cycle = r.cores[c].end_cycle;
    }
    finish_stats(stats, clock_mhz);
}

// The error of a faulted launch: SPYRE_ERROR_PROGRAM (or another status for budget/memory
// errors) with "program fault on spyre0: core 3 at instruction 12: <reason> (DDR_WINDOW)".
[[noreturn]] void fail_program(const std::string& device, int engine_error, int core, uint64_t pc,
                               const char* message);

// The error of spyre_host_free() for a pointer the device did not hand out.
[[noreturn]] void fail_unknown_host_pointer(const void* ptr, const std::string& device);

// Parses a byte count with an optional K/M/G/T suffix (powers of 1024, "KiB" etc. too).
bool parse_bytes(const char* s, uint64_t* out);

}  // namespace spyre
