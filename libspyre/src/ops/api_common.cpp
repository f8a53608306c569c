// SPDX-License-Identifier: MIT
#include "ops/api_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <unordered_map>

#include "ops/pricing.hpp"
#include "ops/program_store.hpp"
#include "pinned_launch.hpp"
#include "spyre/program_cache.h"

namespace spyre::ops {

spyre_op_info& last_info() {
    thread_local spyre_op_info info{};
    return info;
}

namespace {
// The process-wide plan cache: at most kMaxPlans plans, the least recently used dropped first
// (a caller still holding one keeps it). A key holds every value baked into a program (shapes,
// types, layouts; the elementwise ops' scalars are launch arguments, not part of it), so a
// stream of ever new shapes would otherwise grow the cache, and the programs pinned on the
// card, without bound.
constexpr size_t kMaxPlans = 4096;

struct Caches {
    std::mutex mu;
    struct Node {
        std::shared_ptr<const PlanEntry> plan;
        std::list<std::string>::iterator lru;  // in `order`, most recently used first
    };
    std::unordered_map<std::string, Node> plans;
    std::list<std::string> order;
    uint64_t hits = 0, misses = 0, next_id = 1;
    uint64_t generated = 0;  // plans made by this process (not read from disk)
    uint64_t generate_ns = 0, read_ns = 0, write_ns = 0;
};

// Never destroyed: no destructor runs after libspyre's own statics are gone.
Caches& caches() {
    static Caches* c = new Caches;
    return *c;
}

}  // namespace

Card card_of(spyre_buffer_t b) {
    Card c{};
    call(spyre_buffer_get_device(b, &c.dev));
    call(spyre_device_get_info(c.dev, &c.info));
    return c;
}

bool on_card(const Card& c, spyre_buffer_t b) {
    spyre_device_t d = nullptr;
    call(spyre_buffer_get_device(b, &d));
    if (d == c.dev) return true;  // the common case, without reading the device info
    spyre_device_info info{};
    call(spyre_device_get_info(d, &info));
    return info.backend == c.info.backend && info.index == c.info.index;
}

spyre_engine_config engine_config_of(const spyre_device_info& info) {
    spyre_engine_config cfg = default_engine_config();
    if (info.num_cores) cfg.num_cores = info.num_cores;
    if (info.lx_bytes) cfg.lx_bytes = info.lx_bytes;
    if (info.clock_mhz) cfg.clock_hz = uint64_t{info.clock_mhz} * 1000000;
    return cfg;
}

// A public-API call inside the op library: failures keep the callee's message.
void call(spyre_status st) {
    if (st != SPYRE_SUCCESS) {
        std::string m = spyre_last_error();
        if (const auto p = m.find(": "); p != std::string::npos) m = m.substr(p + 2);
        fail(st, m);
    }
}

const char* dtype_name(int32_t t) {
    switch (t) {
        case SPYRE_DTYPE_FLOAT32:
            return "float32";
        case SPYRE_DTYPE_FLOAT16:
            return "float16";
        case SPYRE_DTYPE_BFLOAT16:
            return "bfloat16";
        case SPYRE_DTYPE_INT8:
            return "int8";
        case SPYRE_DTYPE_INT32:
            return "int32";
        case SPYRE_DTYPE_INT64:
            return "int64";
        case SPYRE_DTYPE_UINT8:
            return "uint8";
        default:
            return "unknown";
    }
}

Tensor check_tensor(const spyre_tensor* t, const char* name) {
    require(t != nullptr, "tensor `{}` is NULL", name);
    require(t->dtype >= SPYRE_DTYPE_FLOAT32 && t->dtype <= SPYRE_DTYPE_UINT8,
            "tensor `{}`: unknown dtype {}", name, t->dtype);
    require(t->ndim <= SPYRE_TENSOR_MAX_DIMS, "tensor `{}`: {} dims, at most {}", name, t->ndim,
            SPYRE_TENSOR_MAX_DIMS);
    Tensor r{name, t->buffer, 0, t->offset, static_cast<isa::DType>(t->dtype), 0, {}, {}};
    r.es = isa::dtype_size(r.t);  // spyre_dtype values are the ISA's type codes
    uint64_t size = 0, base = 0;
    call(spyre_buffer_size(t->buffer, &size));
    call(spyre_buffer_device_address(t->buffer, &base));
    bool empty = false;
    uint64_t last = 0;  // largest element offset
    for (uint32_t d = 0; d < t->ndim; ++d) {
        require(t->shape[d] >= 0 && t->strides[d] >= 0,
                "tensor `{}`: dim {} has size {} and stride {} (must be >= 0)", name, d,
                t->shape[d], t->strides[d]);
        r.shape.push_back(t->shape[d]);
        r.strides.push_back(t->strides[d]);
        if (t->shape[d] == 0)
            empty = true;
        else
            last += uint64_t(t->shape[d] - 1) * uint64_t(t->strides[d]);
    }
    if (!empty) {
        const uint64_t extent = (last + 1) * r.es;
        require(t->offset <= size && extent <= size - t->offset,
                "tensor `{}`: elements reach byte {} of a {}-byte buffer (offset {})", name,
                t->offset + extent, size, t->offset);
    }
    r.addr = base + t->offset;
    return r;
}

// Collapses the leading dims of t (all but the last two) into one batch dim.
bool is_dense(const Tensor& t) {
    int64_t expect = 1;
    for (size_t d = t.shape.size(); d-- > 0;) {
        if (t.shape[d] != 1 && t.strides[d] != expect) return false;
        expect *= t.shape[d];
    }
    return true;
}

Mat as_batched_matrix(const Tensor& t) {
    require(t.shape.size() >= 2, "tensor `{}` has {} dims: a matrix needs 2 or more", t.name,
            t.shape.size());
    Mat m{&t, uint64_t(t.dim(-2)), uint64_t(t.dim(-1)), t.stride(-2), t.stride(-1), 1, 0};
    const size_t nb = t.shape.size() - 2;
    for (size_t d = 0; d < nb; ++d) m.batch *= uint64_t(t.shape[d]);
    // batch dims must be one uniform stride (size-1 dims do not matter)
    int64_t bs = -1;
    uint64_t inner = 1;
    for (size_t d = nb; d-- > 0;) {
        if (t.shape[d] == 1) continue;
        if (bs < 0) {
            bs = t.strides[d];
        } else if (t.strides[d] != bs * int64_t(inner)) {
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("tensor `{}`: batch dims with strides that do not collapse into one",
                             t.name));
        }
        inner *= uint64_t(t.shape[d]);
    }
    m.bs = bs < 0 ? 0 : bs;
    return m;
}

void launch(const Card& c, const std::shared_ptr<const PlanEntry>& e, spyre_stream_t stream,
            const std::vector<uint64_t>& args, std::vector<spyre_buffer_t> bufs,
            std::optional<uint64_t> cycles, int random_arg) {
    std::erase(bufs, nullptr);
    std::sort(bufs.begin(), bufs.end());
    bufs.erase(std::unique(bufs.begin(), bufs.end()), bufs.end());
    spyre_launch_params lp{};
    lp.num_cores = e->cores;
    lp.num_args = static_cast<uint32_t>(args.size());
    std::copy(args.begin(), args.end(), lp.args);
    lp.buffers = bufs.data();
    lp.num_buffers = static_cast<uint32_t>(bufs.size());
    if (random_arg >= 0) {
        lp.flags = SPYRE_LAUNCH_RANDOM_STREAM;
        lp.random_arg = static_cast<uint64_t>(random_arg);
    }
    launch_pinned_program(c.dev, e->id, e->image, lp, stream);
    last_info().launches++;
    last_info().modeled_cycles += cycles.value_or(e->cycles);
}

bool float_type(isa::DType t) {
    return t == isa::DType::F16 || t == isa::DType::BF16 || t == isa::DType::F32;
}

void begin_op(const char* name) {
    spyre_op_info& g_last = last_info();
    g_last = spyre_op_info{};
    std::snprintf(last_info().op, sizeof last_info().op, "%s", name);
}

void finish_info_ns(const Card& c) {
    const uint64_t mhz = c.info.clock_mhz ? c.info.clock_mhz : 1500;
    last_info().modeled_ns = last_info().modeled_cycles * 1000 / mhz;
}

void finish_info(const Card& c, const PlanEntry& e) {
    std::snprintf(last_info().plan, sizeof last_info().plan, "%s", e.plan.c_str());
    last_info().cores = e.cores;
    finish_info_ns(c);
}

// out = act(a @ b + bias) on batched matrices.

void require_same_card(const Card& c, std::initializer_list<const Tensor*> ts, const char* op) {
    for (const Tensor* t : ts)
        if (t)
            require(on_card(c, t->buffer), "{}: `{}` is on another card than the output", op,
                    t->name);
}

std::string config_key(const spyre_engine_config& cfg) {
    return std::format("{}/{}/{}", cfg.num_cores, cfg.lx_bytes, cfg.clock_hz);
}

std::shared_ptr<const PlanEntry> cached_plan(const std::string& key,
                                             const std::function<PlanEntry()>& make) {
    auto& cs = caches();
    {
        std::lock_guard lock(cs.mu);
        if (auto it = cs.plans.find(key); it != cs.plans.end()) {
            cs.hits++;
            cs.order.splice(cs.order.begin(), cs.order, it->second.lru);
            last_info().plan_cached = 1;
            return it->second.plan;
        }
    }
    // planning, generating and the disk run without the cache lock
    std::shared_ptr<PlanEntry> e;
    ProgramStore* store = process_program_store();
    using clock = std::chrono::steady_clock;
    auto ns_since = [](clock::time_point t0) {
        return uint64_t(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count());
    };
    if (store) {
        const auto t0 = clock::now();
        std::optional<StoredPlan> s = store->load(key);
        const uint64_t ns = ns_since(t0);
        {
            std::lock_guard lock(cs.mu);
            cs.read_ns += ns;
        }
        if (s) {
            e = std::make_shared<PlanEntry>();
            e->image = std::move(s->image);
            e->cores = s->cores;
            e->cycles = s->cycles;
            e->plan = std::move(s->plan);
        }
    }
    if (!e) {
        const auto t0 = clock::now();
        try {
            e = std::make_shared<PlanEntry>(make());
        } catch (const std::invalid_argument& ex) {
            fail(SPYRE_ERROR_NOT_SUPPORTED, ex.what());
        } catch (const JobTooLarge& ex) {
            fail(SPYRE_ERROR_NOT_SUPPORTED, ex.what());
        }
        const uint64_t ns = ns_since(t0);
        {
            std::lock_guard lock(cs.mu);
            cs.generated++;
            cs.generate_ns += ns;
        }
        if (store) {
            const auto t1 = clock::now();
            store->save(key, StoredPlan{e->image, e->cores, e->cycles, e->plan});
            const uint64_t wns = ns_since(t1);
            std::lock_guard lock(cs.mu);
            cs.write_ns += wns;
        }
    }
    std::lock_guard lock(cs.mu);
    cs.misses++;
    if (auto it = cs.plans.find(key); it != cs.plans.end())
        return it->second.plan;  // another thread planned it meanwhile
    e->id = cs.next_id++;
    cs.order.push_front(key);
    cs.plans.emplace(key, Caches::Node{e, cs.order.begin()});
    while (cs.plans.size() > kMaxPlans) {
        cs.plans.erase(cs.order.back());
        cs.order.pop_back();
    }
    return e;
}

}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_tensor_init(spyre_tensor* t, spyre_buffer_t buffer, uint64_t offset,
                               spyre_dtype dtype, uint32_t ndim, const int64_t* shape) {
    return guard(__func__, [&] {
        require(t != nullptr, "tensor `t` is NULL");
        require(ndim <= SPYRE_TENSOR_MAX_DIMS, "{} dims, at most {}", ndim, SPYRE_TENSOR_MAX_DIMS);
        require(ndim == 0 || shape != nullptr, "shape is NULL");
        spyre_tensor r{};
        r.buffer = buffer;
        r.offset = offset;
        r.dtype = dtype;
        r.ndim = ndim;
        int64_t stride = 1;
        for (uint32_t d = ndim; d-- > 0;) {
            require(shape[d] >= 0, "dim {} has size {}", d, shape[d]);
            r.shape[d] = shape[d];
            r.strides[d] = stride;
            stride *= std::max<int64_t>(shape[d], 1);
        }
        *t = r;
    });
}

spyre_status spyre_op_get_last_info(spyre_op_info* info) {
    return guard(__func__, [&] {
        require(info != nullptr, "output pointer `info` is NULL");
        *info = last_info();
    });
}

spyre_status spyre_op_get_cache_stats(uint64_t* hits, uint64_t* misses) {
    return guard(__func__, [&] {
        auto& cs = caches();
        std::lock_guard lock(cs.mu);
        if (hits) *hits = cs.hits;
        if (misses) *misses = cs.misses;
    });
}

spyre_status spyre_op_get_program_cache_stats(spyre_program_cache_stats* stats) {
    return guard(__func__, [&] {
        require(stats != nullptr, "output pointer `stats` is NULL");
        spyre_program_cache_stats r{};
        std::string status;
        const ProgramStore* store = process_program_store(&status);
        {
            auto& cs = caches();
            std::lock_guard lock(cs.mu);
            r.memory_hits = cs.hits;
            r.memory_misses = cs.misses;
            r.generated = cs.generated;
            r.generate_ns = cs.generate_ns;
            r.disk_read_ns = cs.read_ns;
            r.disk_write_ns = cs.write_ns;
        }
        if (store) {
            const ProgramStore::Stats s = store->stats();
            r.disk_hits = s.hits;
            r.disk_misses = s.misses;
            r.disk_writes = s.writes;
            r.disk_rejected = s.rejected;
            r.disk_evictions = s.evictions;
            r.disk_write_failures = s.write_failures;
            r.enabled = 1;
            std::snprintf(r.dir, sizeof r.dir, "%s", store->dir().c_str());
            status = "on";
        }
        std::snprintf(r.version, sizeof r.version, "%s", program_version_key().c_str());
        std::snprintf(r.status, sizeof r.status, "%s", status.c_str());
        *stats = r;
    });
}
