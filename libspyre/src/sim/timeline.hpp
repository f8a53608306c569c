// The modeled time of one simulated card (Documentation/libspyre.md "Modeled time"): the card
// has two units that really run at once, the compute engine (launches) and the DMA engine
// (peer copies over the peer link; hardware.md sections 11 and 12), each busy with one job at a
// time. A stream's job starts at the latest of its stream's previous job end, the events the
// stream waited for, the unit being free and what the host had seen complete before it queued
// the job; an event's time is its stream's end when it was recorded. One stream alone on a card
// thus measures the sum of its jobs' cycles, as before; two streams overlap on two units.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace spyre::sim {

class CardTimeline {
  public:
    enum class Unit { Compute, Dma };

    // A job of `cycles` on `unit` that may start at `ready`: starts once the unit is free too
    // (jobs take a unit in the order they run); returns its end.
    uint64_t place(Unit unit, uint64_t ready, uint64_t cycles) {
        std::lock_guard lock(mu_);
        uint64_t& free = free_[unit == Unit::Compute ? 0 : 1];
        free = std::max(ready, free) + cycles;
        return free;
    }

    // The host saw work that ends at `t` complete (a synchronize, an event it waited for or
    // queried): what it queues next cannot start earlier, whichever stream it goes to.
    // Lock-free: asked at every queued item (the simulator's dispatch path).
    void observe(uint64_t t) {
        uint64_t seen = observed_.load(std::memory_order_relaxed);
        while (seen < t && !observed_.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
        }
    }
    uint64_t observed() const { return observed_.load(std::memory_order_relaxed); }

  private:
    std::mutex mu_;  // free_
    uint64_t free_[2] = {};
    std::atomic<uint64_t> observed_{0};
};

}  // namespace spyre::sim
