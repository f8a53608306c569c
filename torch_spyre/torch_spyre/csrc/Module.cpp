// torch_spyre._C: the Python bindings of libtorch_spyre (pybind11). Only plain values cross
// this boundary (device indices, stream ids, event ids, dicts of statistics); tensors reach the
// backend through PyTorch's own dispatcher.
#include <ATen/Functions.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spyre/ops.h>
#include <spyre/spyre.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "../../csrc/aten/Copy.h"
#include "../../csrc/aten/Fallback.h"
#include "../../csrc/aten/Fused.h"
#include "../../csrc/runtime/SpyreAllocator.h"
#include "../../csrc/runtime/SpyreException.h"
#include "../../csrc/runtime/SpyreFork.h"
#include "../../csrc/runtime/SpyreFunctions.h"
#include "../../csrc/runtime/SpyreGenerator.h"
#include "../../csrc/runtime/SpyreGraph.h"
#include "../../csrc/runtime/SpyreGuard.h"
#include "../../csrc/runtime/SpyreHostAllocator.h"
#include "../../csrc/runtime/SpyreProfiler.h"
#include "../../csrc/runtime/SpyreStream.h"
#include "spyre/program_cache.h"

namespace py = pybind11;
using namespace torch_spyre;

namespace {

using c10::CachingDeviceAllocator::Stat;
using c10::CachingDeviceAllocator::StatArray;

// torch.cuda.memory_stats()-style flat keys: "allocated_bytes.all.current", ...
py::dict memory_stats(c10::DeviceIndex device) {
    const DeviceStats s = device_stats(device);
    py::dict d;
    auto put_stat = [&](const std::string& name, const Stat& st) {
        d[py::str(name + ".current")] = st.current;
        d[py::str(name + ".peak")] = st.peak;
        d[py::str(name + ".allocated")] = st.allocated;
        d[py::str(name + ".freed")] = st.freed;
    };
    auto put_array = [&](const std::string& name, const StatArray& a) {
        static const char* pools[] = {"all", "small_pool", "large_pool"};
        for (size_t i = 0; i < a.size(); ++i) put_stat(name + "." + pools[i], a[i]);
    };
    put_array("allocation", s.allocation);
    put_array("segment", s.segment);
    put_array("active", s.active);
    put_array("allocated_bytes", s.allocated_bytes);
    put_array("reserved_bytes", s.reserved_bytes);
    put_array("active_bytes", s.active_bytes);
    put_array("requested_bytes", s.requested_bytes);
    d["num_alloc_retries"] = s.num_alloc_retries;
    d["num_ooms"] = s.num_ooms;
    d["num_sync_all_streams"] = s.num_sync_all_streams;
    d["num_device_alloc"] = s.num_device_alloc;
    d["num_device_free"] = s.num_device_free;
    return d;
}

// libspyre's runtime counters of one card (spyre_runtime_stats: submissions, the programs
// loaded on it) and the op library's plan cache of the process (spyre_op_get_cache_stats).
py::dict runtime_stats(c10::DeviceIndex device) {
    check_device_index(device);
    spyre_runtime_stats rs{};
    SPYRE_CHECK(spyre_device_get_runtime_stats(device_handle(device), &rs));
    uint64_t hits = 0, misses = 0;
    SPYRE_CHECK(spyre_op_get_cache_stats(&hits, &misses));
    py::dict d;
    d["jobs_submitted"] = rs.jobs_submitted;
    d["busy_retries"] = rs.busy_retries;
    d["backpressure_waits"] = rs.backpressure_waits;
    d["program_cache_hits"] = rs.program_cache_hits;
    d["program_cache_misses"] = rs.program_cache_misses;
    d["suballoc_slabs"] = rs.suballoc_slabs;
    d["suballoc_slab_bytes"] = rs.suballoc_slab_bytes;
    d["suballoc_used_bytes"] = rs.suballoc_used_bytes;
    d["suballoc_buffers"] = rs.suballoc_buffers;
    d["suballoc_max_bytes"] = rs.suballoc_max_bytes;
    d["pinned_programs"] = rs.pinned_programs;
    d["pinned_program_evictions"] = rs.pinned_program_evictions;
    d["op_plan_cache_hits"] = hits;
    d["op_plan_cache_misses"] = misses;
    return d;
}

py::tuple stream_tuple(const c10::Stream& s) {
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()),
                          static_cast<int>(s.device_type()));
}

py::dict device_properties(c10::DeviceIndex device) {
    const spyre_device_info& i = device_info(resolve_device(device));
    py::dict d;
    d["name"] = std::string(i.name);
    d["backend"] = std::string(spyre_backend_string(static_cast<spyre_backend>(i.backend)));
    d["pci_address"] = std::string(i.pci_address);
    d["driver_name"] = std::string(i.driver_name);
    d["driver_version"] = std::string(i.driver_version);
    d["num_cores"] = i.num_cores;
    d["lx_bytes"] = i.lx_bytes;
    d["stick_bytes"] = i.stick_bytes;
    d["clock_mhz"] = i.clock_mhz;
    d["total_memory"] = i.devmem_total;
    d["max_buffer_bytes"] = i.max_buffer_bytes;
    return d;
}

py::tuple mem_get_info(c10::DeviceIndex device) {
    uint64_t free = 0, total = 0;
    const spyre_status st =
        spyre_mem_get_info(device_handle(resolve_device(device)), &free, &total);
    TORCH_CHECK(st == SPYRE_SUCCESS, spyre_last_error());
    return py::make_tuple(free, total);
}

// Where a spyre data pointer lives: (libspyre buffer handle, byte offset, block bytes).
py::object block_of(uintptr_t ptr) {
    const auto p = try_lookup(reinterpret_cast<const void*>(ptr));
    if (!p) return py::none();
    return py::make_tuple(reinterpret_cast<uintptr_t>(p->buffer), p->offset, p->block_size);
}

// Holds a stream: a host function queued on it blocks the stream's later work until release(),
// or for at most 60 s (a hold never becomes a hang). Benchmarks time what queueing ops costs the
// calling thread with no device work running alongside it (on the simulator, programs run on
// the host's own cores); tests keep work queued.
class StreamHold {
  public:
    explicit StreamHold(spyre_stream_t stream) : state_(std::make_shared<State>()) {
        // the host function owns a reference: it may run after this object is gone
        auto* ref = new std::shared_ptr<State>(state_);
        const spyre_status st = spyre_launch_host_func(stream, &StreamHold::wait, ref);
        if (st != SPYRE_SUCCESS) {
            delete ref;
            TORCH_CHECK(false, spyre_last_error());
        }
    }
    ~StreamHold() { release(); }
    StreamHold(const StreamHold&) = delete;
    StreamHold& operator=(const StreamHold&) = delete;

    void release() {
        {
            std::lock_guard lock(state_->mu);
            state_->released = true;
        }
        state_->cv.notify_all();
    }

  private:
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        bool released = false;
    };
    static void wait(void* user) {
        std::unique_ptr<std::shared_ptr<State>> ref(static_cast<std::shared_ptr<State>*>(user));
        State& s = **ref;
        std::unique_lock lock(s.mu);
        s.cv.wait_for(lock, std::chrono::seconds(60), [&] { return s.released; });
    }
    std::shared_ptr<State> state_;
};

}  // namespace

namespace torch_spyre {
// Distributed.cpp: the "spyre" torch.distributed backend.
void add_distributed_bindings(py::module_& m);
// ReplayArgs.cpp: the compiled-call replayer's per-call work.
void add_replay_bindings(py::module_& m);
}  // namespace torch_spyre

PYBIND11_MODULE(_C, m) {
    m.doc() = "torch_spyre: the PyTorch PrivateUse1 backend over libspyre";

    // c10 errors carry a C++ backtrace in what(); Python gets the message, with the exception
    // type PyTorch itself would raise.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const c10::OutOfMemoryError& e) {
            py::object oom = py::module_::import("torch").attr("OutOfMemoryError");
            PyErr_SetString(oom.ptr(), e.what_without_backtrace());
        } catch (const c10::IndexError& e) {
            PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
        } catch (const c10::ValueError& e) {
            PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
        } catch (const c10::NotImplementedError& e) {
            PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
        } catch (const c10::Error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
        }
    });

    using gil_release = py::call_guard<py::gil_scoped_release>;

    torch_spyre::add_distributed_bindings(m);
    torch_spyre::add_replay_bindings(m);

    // Devices
    m.def("_device_count", [] { return static_cast<int>(device_count()); });
    m.def("_device_count_error", [] { return device_count_error(); });
    m.def("_init", &init);
    m.def("_is_in_bad_fork", &in_bad_fork);
    m.def("_is_initialized", &is_initialized);
    m.def("_current_device", [] { return static_cast<int>(current_device()); });
    m.def("_set_device", [](int d) { set_device(static_cast<c10::DeviceIndex>(d)); });
    m.def("_exchange_device", [](int d) {
        return static_cast<int>(exchange_device(static_cast<c10::DeviceIndex>(d)));
    });
    m.def("_is_device_open",
          [](int d) { return is_device_open(static_cast<c10::DeviceIndex>(d)); });
    m.def("_device_properties",
          [](int d) { return device_properties(static_cast<c10::DeviceIndex>(d)); });
    m.def(
        "_synchronize", [](int d) { synchronize_device(static_cast<c10::DeviceIndex>(d)); },
        gil_release());

    // Memory
    m.def("_memory_stats", [](int d) { return memory_stats(static_cast<c10::DeviceIndex>(d)); });
    m.def("_reset_peak_memory_stats",
          [](int d) { reset_peak_stats(static_cast<c10::DeviceIndex>(d)); });
    m.def("_reset_accumulated_memory_stats",
          [](int d) { reset_accumulated_stats(static_cast<c10::DeviceIndex>(d)); });
    m.def("_empty_cache", &empty_cache, gil_release());
    m.def("_mem_get_info", [](int d) { return mem_get_info(static_cast<c10::DeviceIndex>(d)); });
    m.def("_caching_enabled", &caching_enabled);
    m.def("_block_of", &block_of);
    m.def("_is_pinned_ptr", [](uintptr_t p) { return is_pinned(reinterpret_cast<void*>(p)); });
    m.def("_host_memory_stats", [] {
        const HostStats s = host_stats();
        py::dict d;
        d["allocated_bytes"] = s.allocated_bytes;
        d["reserved_bytes"] = s.reserved_bytes;
        d["peak_allocated_bytes"] = s.peak_allocated_bytes;
        d["num_blocks"] = s.num_blocks;
        return d;
    });
    m.def("_host_empty_cache", &empty_host_cache, gil_release());

    // Streams and events
    m.def("_current_stream",
          [](int d) { return stream_tuple(current_stream(static_cast<c10::DeviceIndex>(d))); });
    m.def("_default_stream",
          [](int d) { return stream_tuple(default_stream(static_cast<c10::DeviceIndex>(d))); });
    m.def("_set_stream", [](int64_t id, int d) {
        set_current_stream(make_stream(static_cast<c10::DeviceIndex>(d), id));
    });
    m.def("_stream_priority", [](int64_t id, int d) {
        return stream_priority(make_stream(static_cast<c10::DeviceIndex>(d), id));
    });
    // whether the current stream of card d captures into a graph (a compiled kernel then uploads
    // a CPU scalar input instead of filling it from its value, which the capture would keep)
    m.def("_is_capturing",
          [](int d) { return pool_capturing(current_stream(static_cast<c10::DeviceIndex>(d))); });
    py::class_<StreamHold>(m, "_StreamHold").def("release", &StreamHold::release);
    m.def("_hold_stream", [](int64_t id, int d) {
        return std::make_unique<StreamHold>(
            native_stream(make_stream(static_cast<c10::DeviceIndex>(d), id)));
    });
    // A compiled call (torch_spyre/_inductor/runtime.py `batched`): the current stream of each
    // card in `devices` batches until _batch_end (libspyre.md "Submission batching"), and a
    // graph of one card runs with that card current (Inductor guards devices for GPUs only:
    // its buffers are allocated on the current device). Returns the streams and the device to
    // restore (-1: none).
    m.def("_batch_begin", [](const std::vector<int>& devices) {
        std::vector<uintptr_t> streams;
        try {
            for (int d : devices) {
                check_device_index(static_cast<c10::DeviceIndex>(d));
                spyre_stream_t s = native_stream(current_stream(static_cast<c10::DeviceIndex>(d)));
                SPYRE_CHECK(spyre_stream_begin_batch(s));
                streams.push_back(reinterpret_cast<uintptr_t>(s));
            }
        } catch (...) {
            for (uintptr_t s : streams) spyre_stream_end_batch(reinterpret_cast<spyre_stream_t>(s));
            throw;
        }
        int restore = -1;
        if (devices.size() == 1 && devices[0] != current_device())
            restore = exchange_device(static_cast<c10::DeviceIndex>(devices[0]));
        return std::make_pair(streams, restore);
    });
    // Ends the batches and restores the device; `quiet` (the call raised) keeps the call's
    // exception rather than a queueing error.
    m.def("_batch_end", [](const std::vector<uintptr_t>& streams, int restore, bool quiet) {
        if (restore >= 0) set_device(static_cast<c10::DeviceIndex>(restore));
        spyre_status first = SPYRE_SUCCESS;
        std::string msg;
        for (uintptr_t s : streams) {
            const spyre_status st = spyre_stream_end_batch(reinterpret_cast<spyre_stream_t>(s));
            if (st != SPYRE_SUCCESS && first == SPYRE_SUCCESS) first = st, msg = spyre_last_error();
        }
        TORCH_CHECK(quiet || first == SPYRE_SUCCESS, msg, " (", spyre_status_string(first), ")");
    });
    // Graphs (torch_spyre/spyre/graphs.py)
    m.def("_graph_capture_begin", [](int64_t id, int d) {
        return graph_capture_begin(make_stream(static_cast<c10::DeviceIndex>(d), id));
    });
    m.def("_graph_capture_end", [](int64_t id, int d, int64_t pool) {
        return graph_capture_end(make_stream(static_cast<c10::DeviceIndex>(d), id), pool);
    });
    m.def("_graph_replay", [](uintptr_t g, int64_t id, int d) {
        graph_replay(g, make_stream(static_cast<c10::DeviceIndex>(d), id));
    });
    m.def(
        "_graph_destroy",
        [](uintptr_t g, int d, int64_t pool) {
            graph_destroy(g, static_cast<c10::DeviceIndex>(d), pool);
        },
        gil_release());
    // Jobs the card has completed (its telemetry, spyre_device_get_telemetry): on the simulator
    // a run of a graph's consecutive launches is one linked job (libspyre.md "Linked launches").
    m.def("_card_jobs", [](int d) {
        check_device_index(static_cast<c10::DeviceIndex>(d));
        spyre_telemetry t{};
        SPYRE_CHECK(
            spyre_device_get_telemetry(device_handle(static_cast<c10::DeviceIndex>(d)), &t));
        return t.jobs_completed;
    });
    m.def("_submissions", [](int d) { return submissions(static_cast<c10::DeviceIndex>(d)); });
    m.def("_runtime_stats", [](int d) { return runtime_stats(static_cast<c10::DeviceIndex>(d)); });
    m.def("_event_modeled_ns", [](uintptr_t start, uintptr_t end) {
        return event_modeled_ns(reinterpret_cast<void*>(start), reinterpret_cast<void*>(end));
    });

    // The default generator of each card (torch.spyre.manual_seed, get_rng_state, ...): the
    // state crosses as 16 bytes (seed, offset), checked again by set_state.
    m.def("_rng_manual_seed", [](int d, uint64_t seed) {
        at::Generator g = default_generator(static_cast<c10::DeviceIndex>(d));
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_current_seed(seed);
    });
    m.def("_rng_seed", [](int d) {
        at::Generator g = default_generator(static_cast<c10::DeviceIndex>(d));
        std::lock_guard<std::mutex> lock(g.mutex());
        return g.seed();
    });
    m.def("_rng_initial_seed", [](int d) {
        at::Generator g = default_generator(static_cast<c10::DeviceIndex>(d));
        std::lock_guard<std::mutex> lock(g.mutex());
        return g.current_seed();
    });
    m.def("_rng_get_state", [](int d) {
        at::Generator g = default_generator(static_cast<c10::DeviceIndex>(d));
        std::lock_guard<std::mutex> lock(g.mutex());
        const at::Tensor st = g.get_state();
        return py::bytes(static_cast<const char*>(st.const_data_ptr()),
                         static_cast<size_t>(st.numel()));
    });
    m.def("_rng_set_state", [](int d, const std::string& bytes) {
        at::Generator g = default_generator(static_cast<c10::DeviceIndex>(d));
        at::Tensor st = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
        std::memcpy(st.data_ptr(), bytes.data(), bytes.size());
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_state(st);
    });

    // CPU fallback
    m.def("_fallback_counts", [] {
        py::dict d;
        for (const auto& [op, n] : aten::fallback_counts()) d[py::str(op)] = n;
        return d;
    });
    m.def("_reset_fallback_counts", &aten::reset_fallback_counts);

    // Copy paths
    m.def("_copy_stats", [] {
        py::dict d;
        for (const auto& [k, n] : aten::copy_stats()) d[py::str(k)] = n;
        return d;
    });
    m.def("_reset_copy_stats", &aten::reset_copy_stats);
    // launch labels: a launch that fails on the card names its label (spyre_push_launch_label)
    // a fused kernel of a compiled graph, prepared when the graph is loaded (_inductor/runtime.py)
    py::class_<aten::PreparedFused>(m, "_FusedKernel")
        .def(py::init([](const std::string& kernel, int64_t n, int device) {
            return std::make_unique<aten::PreparedFused>(kernel, n,
                                                         static_cast<c10::DeviceIndex>(device));
        }))
        .def("launch", &aten::PreparedFused::launch)
        .def_property_readonly("prepared", &aten::PreparedFused::prepared)
        .def_property_readonly("refused", &aten::PreparedFused::refused)
        .def_property_readonly("reason", &aten::PreparedFused::reason);
    m.def("_push_launch_label",
          [](const std::string& label) { SPYRE_CHECK(spyre_push_launch_label(label.c_str())); });
    m.def("_pop_launch_label", [] { SPYRE_CHECK(spyre_pop_launch_label()); });
    // a test hook of the simulator backend (torch_spyre/testing.py)
    m.def("_sim_inject_fault", [](int d, int fault, uint64_t after_launches) {
        SPYRE_CHECK(spyre_sim_inject_fault(d, static_cast<spyre_sim_fault>(fault), after_launches));
    });
    m.def("_strict", &aten::strict_mode);

    // The op library's plan cache and program cache on disk (spyre/program_cache.h)
    m.def("_program_cache_stats", [] {
        spyre_program_cache_stats s{};
        SPYRE_CHECK(spyre_op_get_program_cache_stats(&s));
        py::dict d;
        d["memory_hits"] = s.memory_hits;
        d["memory_misses"] = s.memory_misses;
        d["disk_hits"] = s.disk_hits;
        d["disk_misses"] = s.disk_misses;
        d["generated"] = s.generated;
        d["disk_writes"] = s.disk_writes;
        d["disk_rejected"] = s.disk_rejected;
        d["disk_evictions"] = s.disk_evictions;
        d["disk_write_failures"] = s.disk_write_failures;
        d["generate_ns"] = s.generate_ns;
        d["disk_read_ns"] = s.disk_read_ns;
        d["disk_write_ns"] = s.disk_write_ns;
        d["enabled"] = s.enabled != 0;
        d["dir"] = std::string(s.dir);
        d["version"] = std::string(s.version);
        d["status"] = std::string(s.status);
        return d;
    });

    // Per-op device time (torch_spyre/profiler.py)
    m.def("_profiler_start", &profiler::start);
    m.def("_profiler_stop", [] {
        py::list l;
        for (const auto& r : profiler::stop()) {
            py::dict d;
            d["aten_op"] = r.aten_op;
            d["op"] = r.op;
            d["plan"] = r.plan;
            d["cores"] = r.cores;
            d["launches"] = r.launches;
            d["modeled_ns"] = r.modeled_ns;
            d["plan_cached"] = r.plan_cached;
            l.append(d);
        }
        return l;
    });
}
