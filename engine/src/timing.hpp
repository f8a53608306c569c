// SPDX-License-Identifier: MIT
// Cycle model, kept apart from the functional interpreter (Documentation/isa.md "Cycle model").
//
// While a core executes a job functionally, every instruction that occupies a unit appends one
// record to the core's Trace: the unit, its cost (cycles, or bytes for DDR transfers), and the
// earlier operations it must wait for (LX hazards, found with a scoreboard of the operations still
// in the unit queues). After the job, Timeline replays all cores' traces as one discrete-event
// simulation: in-order issue per core, out-of-order start on decoupled units, and DDR bandwidth
// shared at every moment by the transfers in flight (processor sharing, each transfer capped by
// its port). The same Trace/Timeline pair prices synthetic phases for the cost API
// (include/spyre/cost.hpp), so the planner's figures are the engine's figures.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "spyre/engine.h"

namespace spyre::eng {

// Units of the timing model. The first five are the C API's enum spyre_engine_unit; loads and
// stores have separate DMA units (the C API reports their sum as SPYRE_UNIT_DMA).
enum TUnit : uint8_t {
    kUnitScalar = SPYRE_UNIT_SCALAR,
    kUnitLoad = SPYRE_UNIT_DMA,
    kUnitMatrix = SPYRE_UNIT_MATRIX,
    kUnitVector = SPYRE_UNIT_VECTOR,
    kUnitRing = SPYRE_UNIT_RING,
    kUnitStore = 5,
    kTUnits = 6
};
inline constexpr uint32_t kMaxQueueDepth = 8;
inline constexpr uint64_t kNoMessage = UINT64_MAX;  // a send never delivered (failed job)
// Records per job at most (32 bytes each): the replay needs the whole job's records, so a
// runaway program must not grow them without bound (INSTR_BUDGET past it).
inline constexpr uint64_t kMaxJobRecords = uint64_t{1}
                                           << 21;  // deps
                                                   // are a 64-bit mask over units x slots

enum class TKind : uint8_t {
    Unit,        // fixed-cost operation on a unit (matrix, vector, ring send)
    Dma,         // DDR transfer on the load or store unit: `cost` bytes
    Multicast,   // member of a multicast load: one DDR read shared by a core group (aux = id)
    Wait,        // issue stalls until the deps are done (LX scalar access)
    Recv,        // issue stalls until message `aux` has arrived and the deps are done
    Collective,  // barrier or all-reduce instance `aux`: all units drain, then wait for the group
    Halt,        // all units drain
};

struct TOp {
    TKind kind = TKind::Unit;
    uint8_t unit = 0;
    uint8_t lane = 0;     // ring direction + 1 for sends (each direction has its own link)
    uint8_t latency = 0;  // 1: charge the unit's start-up latency when it starts from idle
    uint32_t issue = 0;   // instructions issued since the previous record, this one included
    uint64_t deps = 0;    // bit unit*8+slot: operation in that queue slot at issue time
    uint64_t cost = 0;    // cycles (Unit) or bytes (Dma, Multicast)
    uint64_t aux = 0;     // message id (Unit send, Recv), instance id (Multicast, Collective)
};

struct LxRange {
    uint64_t lo, hi;
};

// Functional side: records of one core and the scoreboard that turns LX ranges into deps.
class Trace {
  public:
    // `job_records`, if set, counts the records of all cores of the job (shared).
    void reset(uint32_t queue_depth, std::atomic<uint64_t>* job_records = nullptr);
    // Drops the records (a core the next job does not use), keeping a small job's storage.
    void trim();
    bool over_budget() const {
        return job_records_ && job_records_->load(std::memory_order_relaxed) > kMaxJobRecords;
    }
    // Appends an operation; reads/writes are its LX ranges (for hazards against queued ops).
    void add(TOp op, const LxRange* reads, int nr, const LxRange* writes, int nw);
    // Deps of an access that does not occupy a unit (scalar LX access, RECV destination).
    uint64_t hazards(const LxRange* reads, int nr, const LxRange* writes, int nw) const;
    void count_issue() { ++pending_issue_; }
    // Appends a record with no unit (Wait, Recv, Collective, Halt), taking the issue count.
    void add_sync(TKind kind, uint64_t deps, uint64_t aux);
    std::vector<TOp>& ops() { return ops_; }
    const std::vector<TOp>& ops() const { return ops_; }
    uint64_t trailing_issue() const { return pending_issue_; }

  private:
    static constexpr size_t kKeptRecords = 4096;  // storage kept from one job to the next
    struct Slot {
        LxRange r[3];
        LxRange w;
        uint8_t nr = 0;
        bool used = false, has_w = false;
    };
    std::vector<TOp> ops_;
    Slot slots_[kTUnits][kMaxQueueDepth];
    uint32_t head_[kTUnits] = {};
    uint32_t qd_ = 4;
    uint32_t pending_issue_ = 0;
    std::atomic<uint64_t>* job_records_ = nullptr;
};

// Timing results of one core.
struct CoreTiming {
    uint64_t busy[kTUnits] = {};
    uint64_t wait_cycles = 0;
    uint64_t end_cycle = 0;
    bool finished = false;  // replayed to its Halt (false for a job that failed)
};

// A collective instance: the cores that take part and its extra cost once all have arrived.
struct CollectiveInfo {
    uint64_t members = 0;    // bit mask of cores
    uint64_t cycles = 0;     // after the last arrival (barrier latency, all-reduce ring time)
    uint64_t busy_ring = 0;  // ring busy cycles charged to each member
};

// A multicast instance: `bytes` read once from DDR and delivered to every member.
struct MulticastInfo {
    uint64_t members = 0;
    uint64_t bytes = 0;
    uint64_t extra_latency = 0;  // ring hops to the farthest member
};

// Replays traces (discrete-event simulation). Deterministic: depends only on its inputs.
class Timeline {
  public:
    explicit Timeline(const spyre_engine_config& cfg);
    // traces[i] is core i; the first `start` cycles are the launch overhead. Message ids index
    // `msg_count` slots; collective/multicast ids index the vectors. Returns the job's cycles.
    uint64_t run(const std::vector<const Trace*>& traces, uint64_t msg_count,
                 const std::vector<CollectiveInfo>& colls, const std::vector<MulticastInfo>& mcasts,
                 uint64_t start, std::vector<CoreTiming>& out);
    // Peak DDR bytes per cycle (aggregate) and per port, for tests and the cost API.
    double ddr_bytes_per_cycle() const { return ddr_; }

  private:
    const spyre_engine_config& cfg_;
    double ddr_;
};

}  // namespace spyre::eng
