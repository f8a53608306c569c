// Simulated cards: environment, faults, the card registry (sim/card.hpp).
//
// Timing-only cards (SPYRE_SIM_TIMING_ONLY=1, Documentation/libspyre.md "Timing-only
// simulator"): every launch runs as a SPYRE_ENGINE_JOB_TIMING_ONLY job (the same cycle model,
// nothing computed), copies and fills move no data (reads from the card give zeros) and the
// device memory is address space that is never touched, so a card can be far larger than the
// host's memory. Program images stay on the host, with their buffers.
#include "sim/card.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace spyre::sim {

namespace {

constexpr uint64_t kDefaultSimMemory = 1ull << 30;
// A timing-only card holds no data: room for an 8B-parameter fp16 model and its KV caches.
constexpr uint64_t kDefaultTimingOnlyMemory = 256ull << 30;

bool sim_timing_only_from_env() {
    const char* s = std::getenv("SPYRE_SIM_TIMING_ONLY");
    if (!s || !*s || std::strcmp(s, "0") == 0) return false;
    if (std::strcmp(s, "1") == 0) return true;
    fail(SPYRE_ERROR_INVALID_ARGUMENT,
         std::format("SPYRE_SIM_TIMING_ONLY=\"{}\" is neither 1 (timing-only simulated cards) nor "
                     "0 (computing ones)",
                     s));
}

uint64_t sim_memory_from_env(bool timing_only) {
    const char* s = std::getenv("SPYRE_SIM_MEMORY");
    if (!s || !*s) return timing_only ? kDefaultTimingOnlyMemory : kDefaultSimMemory;
    uint64_t v = 0;
    if (!parse_bytes(s, &v) || v < (1ull << 20) || v > (1ull << 47))
        fail(SPYRE_ERROR_INVALID_ARGUMENT,
             std::format("SPYRE_SIM_MEMORY=\"{}\" is not a memory size between 1 MiB and 128 TiB "
                         "(bytes, or with a K/M/G/T suffix, e.g. 16G)",
                         s));
    return round_up(v, kSimPage);
}

}  // namespace

SimFaults& sim_faults(int index) {
    static std::mutex mu;
    static auto* faults = new std::map<int, std::unique_ptr<SimFaults>>;
    std::lock_guard lock(mu);
    auto& f = (*faults)[index];
    if (!f) f = std::make_unique<SimFaults>();
    return *f;
}

[[noreturn]] void fail_lost(const std::string& device, const std::string* label) {
    std::string text =
        std::format("{} was removed (a simulated loss: spyre_sim_inject_fault)", device);
    if (label) text += "; launched by " + *label;
    fail(SPYRE_ERROR_DEVICE_LOST, text);
}

std::shared_ptr<SimCard> get_card(int index) {
    static std::mutex mu;
    static std::map<int, std::weak_ptr<SimCard>>* cards = new std::map<int, std::weak_ptr<SimCard>>;
    std::lock_guard lock(mu);
    if (auto c = (*cards)[index].lock()) return c;
    const bool timing_only = sim_timing_only_from_env();
    auto c = std::make_shared<SimCard>(index, sim_memory_from_env(timing_only), timing_only);
    (*cards)[index] = c;
    if (timing_only)  // results of this card are not computed: never let them pass for real ones
        std::fprintf(stderr,
                     "libspyre: spyre-sim%d is TIMING-ONLY (SPYRE_SIM_TIMING_ONLY=1): modeled "
                     "times are exact, results are not computed (reads give zeros); %s of "
                     "address space as device memory\n",
                     index, format_bytes(c->size()).c_str());
    return c;
}

}  // namespace spyre::sim
