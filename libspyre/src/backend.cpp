#include "backend.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <format>
#include <map>
#include <mutex>
#include <string>

#include "enumerate.hpp"
#include "error.hpp"
#include "spyre/engine.h"

namespace spyre {

spyre_backend selected_backend() {
    const char* s = std::getenv("SPYRE_BACKEND");
    if (!s || !*s || std::strcmp(s, "kernel") == 0) return SPYRE_BACKEND_KERNEL;
    if (std::strcmp(s, "sim") == 0) return SPYRE_BACKEND_SIM;
    fail(SPYRE_ERROR_INVALID_ARGUMENT,
         std::format("SPYRE_BACKEND=\"{}\" is not a backend: use \"kernel\" (the spyre driver, "
                     "default) or \"sim\" (in-process simulator)",
                     s));
}

int device_count() {
    if (selected_backend() == SPYRE_BACKEND_SIM) {
        int n = sim_device_count();
        if (n == 0)
            fail(SPYRE_ERROR_NO_DEVICE,
                 "no Spyre device found: SPYRE_BACKEND=sim with SPYRE_SIM_DEVICES=0 (set it to "
                 "the number of simulated cards, or unset it for one)");
        return n;
    }
    auto nodes = enumerate_devices();
    if (nodes.empty()) fail(SPYRE_ERROR_NO_DEVICE, no_device_message());
    return static_cast<int>(nodes.size());
}

namespace {
// What names card `index` of backend b for as long as it is plugged in: its accel node's sysfs
// path (the index of a card changes when a card before it is unplugged).
std::string card_identity(spyre_backend b, int index) {
    if (b == SPYRE_BACKEND_SIM) return std::format("sim:{}", index);
    auto nodes = enumerate_devices();
    if (index >= 0 && static_cast<size_t>(index) < nodes.size()) return nodes[index].syspath;
    return std::format("kernel:{}", index);  // out of range: the open reports it
}
}  // namespace

std::shared_ptr<Device> open_device(int index) {
    const spyre_backend b = selected_backend();
    static std::mutex mu;
    static auto* opened = new std::map<std::string, std::weak_ptr<Device>>();
    std::lock_guard lock(mu);
    auto& slot = (*opened)[card_identity(b, index)];
    // A card that was unplugged and plugged back gets a new Device even while handles of the
    // lost one are still open.
    if (auto d = slot.lock(); d && d->alive()) return d;
    auto d = b == SPYRE_BACKEND_SIM ? open_sim_device(index) : open_kernel_device(index);
    slot = d;
    return d;
}

void fail_unknown_host_pointer(const void* ptr, const std::string& device) {
    fail(SPYRE_ERROR_INVALID_ARGUMENT,
         std::format("{} is not a pointer returned by spyre_host_alloc() on {} (or it was already "
                     "freed)",
                     ptr, device));
}

void finish_stats(spyre_launch_stats* s, uint32_t clock_mhz, uint32_t mac_peak) {
    s->clock_mhz = clock_mhz;
    s->time_ns =
        clock_mhz
            ? static_cast<uint64_t>(static_cast<double>(s->total_cycles) * 1000.0 / clock_mhz + 0.5)
            : 0;
    // against the peak of the types used: int8 runs at 2x, fp32 at 1/4 of the fp16 rate
    s->peak_macs_per_cycle = (mac_peak ? mac_peak : kMacsPerCoreCycle) * uint64_t{s->num_cores};
    s->utilization =
        s->total_cycles && s->peak_macs_per_cycle
            ? static_cast<double>(s->macs) / (static_cast<double>(s->total_cycles) *
                                              static_cast<double>(s->peak_macs_per_cycle))
            : 0.0;
}

void fail_program(const std::string& device, int engine_error, int core, uint64_t pc,
                  const char* message, const std::string* label) {
    const char* name = spyre_engine_error_name(engine_error);
    std::string reason = message && *message ? message : "no detail";
    std::string where =
        core >= 0 ? std::format("program fault on {}: core {} at instruction {}", device, core, pc)
                  : std::format("program rejected by {} at instruction {}", device, pc);
    if (engine_error == SPYRE_ENGINE_ERR_BAD_PROGRAM)
        where = std::format("program rejected by {}", device);
    std::string text = std::format("{}: {} ({})", where, reason, name ? name : "unknown error");
    if (label) text += "; launched by " + *label;
    switch (engine_error) {
        case SPYRE_ENGINE_ERR_INSTR_BUDGET:
        case SPYRE_ENGINE_ERR_CYCLE_BUDGET:
            fail(SPYRE_ERROR_PROGRAM, text + "; the program probably loops forever");
        case SPYRE_ENGINE_ERR_CANCELLED:
            fail(SPYRE_ERROR_TIMEOUT, text);
        case SPYRE_ENGINE_ERR_NO_MEMORY:
            fail(SPYRE_ERROR_OUT_OF_MEMORY, text);
        case SPYRE_ENGINE_ERR_INVALID_ARGUMENT:
            fail(SPYRE_ERROR_INTERNAL, text);
        default:
            fail(SPYRE_ERROR_PROGRAM, text);
    }
}

bool parse_bytes(const char* s, uint64_t* out) {
    if (!s || !*s) return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (errno || end == s || s[0] == '-') return false;
    uint64_t mult = 1;
    std::string suffix(end);
    for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (suffix.empty() || suffix == "B")
        mult = 1;
    else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
        mult = 1ull << 10;
    else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
        mult = 1ull << 20;
    else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
        mult = 1ull << 30;
    else if (suffix == "T" || suffix == "TB" || suffix == "TIB")
        mult = 1ull << 40;
    else
        return false;
    if (v > UINT64_MAX / mult) return false;
    *out = v * mult;
    return true;
}

}  // namespace spyre
