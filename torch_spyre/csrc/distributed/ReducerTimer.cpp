// DDP's runtime statistics for modules on spyre: the Reducer asks c10d's TimerRegistry for a
// timer of the module's device type and, without one, warns that "Time stats are currently only
// collected for CPU and CUDA devices" and records nothing. Host timestamps, like c10d's CPU
// timer: the times of queueing the card's work and of the asynchronous collectives as the
// Reducer's thread sees them.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace c10d {
namespace {

class SpyreTimer : public Timer {
  public:
    explicit SpyreTimer(c10::Device) {}

    std::optional<int64_t> measureDifference(Event start, Event end) override {
        const int64_t t0 = getTimeRef(start), t1 = getTimeRef(end);
        if (t0 == kUnsetTime || t1 == kUnsetTime || t1 < t0) return std::nullopt;
        return t1 - t0;
    }
};

C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, SpyreTimer);

}  // namespace
}  // namespace c10d
