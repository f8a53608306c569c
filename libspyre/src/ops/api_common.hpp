// SPDX-License-Identifier: MIT
// Shared pieces of the op library's C API (include/spyre/ops.h): tensor checks, the per-thread
// op info, the process-wide plan cache, launching a planned program (loaded once per card) and
// the C boundary. One api_<op>.cpp per op family builds on it.
#pragma once

#include <cstdint>
#include <format>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "error.hpp"
#include "ops/sticks.hpp"
#include "spyre/engine.h"
#include "spyre/isa.hpp"
#include "spyre/ops.h"

namespace spyre::ops {

inline uint64_t up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// A public-API call inside the op library: failures keep the callee's message.
void call(spyre_status st);
const char* dtype_name(int32_t t);
bool float_type(isa::DType t);

// A checked tensor argument.
struct Tensor {
    const char* name;
    spyre_buffer_t buffer;
    uint64_t addr;  // device address of element 0
    uint64_t offset;
    isa::DType t;  // spyre_dtype and isa::DType share their codes
    uint64_t es;
    std::vector<int64_t> shape, strides;
    int64_t numel() const {
        return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    }
    int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
    int64_t stride(int i) const { return strides[i < 0 ? strides.size() + i : i]; }
};

// Checks a descriptor: handle, dtype, dims, sizes and strides, elements inside the buffer.
Tensor check_tensor(const spyre_tensor* t, const char* name);
// True if t is dense row-major over its own shape (the strides of size-1 dims do not matter).
bool is_dense(const Tensor& t);

// A matrix view inside a tensor: rows x cols with element strides (rs, cs) and the element
// stride of a batch step (one batch dim after collapsing; 0 = shared by all batch elements).
struct Mat {
    const Tensor* t;
    uint64_t rows, cols;
    int64_t rs, cs;
    uint64_t batch;
    int64_t bs;
};

// Collapses the leading dims of t (all but the last two) into one batch dim.
Mat as_batched_matrix(const Tensor& t);

// ---- per-thread op info ----
spyre_op_info& last_info();
void begin_op(const char* name);

// ---- plans, programs, cards ----
struct PlanEntry {
    uint64_t id = 0;  // unique for the life of the process (set by cached_plan)
    std::vector<uint8_t> image;
    uint32_t cores = 0;
    uint64_t cycles = 0;
    std::string plan;
};

struct Card {
    spyre_device_t dev;
    spyre_device_info info;
};

Card card_of(spyre_buffer_t b);
// True if buffer b lives on card c (through any device handle of that card).
bool on_card(const Card& c, spyre_buffer_t b);
// Every tensor on the card of `c` (the message names the first that is not).
void require_same_card(const Card& c, std::initializer_list<const Tensor*> ts, const char* op);
spyre_engine_config engine_config_of(const spyre_device_info& info);
// "{cores}/{lx}/{clock}": the card configuration as text (the matmul planners' key).
std::string config_key(const spyre_engine_config& cfg);

// The key of a cached plan: its kind, the card configuration and every value that decides the
// plan, as raw bytes (formatting them as text cost more than the launch they select).
class PlanKey {
  public:
    PlanKey(const char* kind, const spyre_engine_config& cfg) {
        bytes_.reserve(128);
        bytes_.append(kind).push_back('\0');
        add(cfg.num_cores, cfg.lx_bytes, cfg.clock_hz);
    }
    template <typename... T>
    PlanKey& add(const T&... v) {
        (put(v), ...);
        return *this;
    }
    const std::string& str() const { return bytes_; }

  private:
    template <typename T>
        requires std::is_arithmetic_v<T> || std::is_enum_v<T>
    void put(T v) {
        bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    std::string bytes_;
};

// The plan of `key` from the process-wide cache, or made by `make` (std::invalid_argument from
// it becomes SPYRE_ERROR_NOT_SUPPORTED) and cached. Sets last_info().plan_cached on a hit.
std::shared_ptr<const PlanEntry> cached_plan(const std::string& key,
                                             const std::function<PlanEntry()>& make);

// Queues the plan's program on `stream` with `args`, allowed to touch `bufs` (duplicates and
// NULLs are fine); adds to last_info()'s launches and modeled cycles (the plan's, or `cycles`
// for a program whose run depends on its arguments). random_arg >= 0: args[random_arg] and
// the next are the seed and offset of the random stream the program draws from
// (SPYRE_LAUNCH_RANDOM_STREAM: a graph replay can give it another).
void launch(const Card& c, const std::shared_ptr<const PlanEntry>& e, spyre_stream_t stream,
            const std::vector<uint64_t>& args, std::vector<spyre_buffer_t> bufs,
            std::optional<uint64_t> cycles = std::nullopt, int random_arg = -1);

// Fills last_info()'s plan, cores and modeled time after the launches of an op.
void finish_info_ns(const Card& c);
void finish_info(const Card& c, const PlanEntry& e);

// A scratch buffer for one op; freed once queued (queued work keeps its memory alive).
struct Scratch {
    spyre_buffer_t buf = nullptr;
    Scratch() = default;
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() { spyre_free(buf); }
};

// The C boundary of the op functions: libspyre's own (error.hpp).
using spyre::guard;

}  // namespace spyre::ops
