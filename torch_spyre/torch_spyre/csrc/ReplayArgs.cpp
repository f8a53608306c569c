// The per-call work of the compiled-call replayer (torch_spyre/_inductor/replay.py) in C++: the
// signature key of a call's arguments, the copy of new input tensors into the graph's static
// inputs, the replay on the card's current stream, and a training graph's outputs handed out
// as new tensors whose storage use counts tell whether they are still held. A replayed decode step
// passes every parameter as an argument (~17 tensors for TinyGranite): as Python loops these took
// ~40% of the replayer's host time (torch_compile.md "Replay").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spyre/spyre.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../../csrc/runtime/SpyreGraph.h"
#include "../../csrc/runtime/SpyreStream.h"

namespace py = pybind11;

namespace torch_spyre {
namespace {

template <typename T>
void put(std::string& key, const T& v) {
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_tensor(std::string& key, const at::Tensor& t) {
    key += 'T';
    put(key, static_cast<int8_t>(t.scalar_type()));
    put(key, static_cast<int8_t>(t.device().type()));
    put(key, static_cast<int8_t>(t.device().index()));
    put(key, static_cast<int8_t>(t.layout()));
    put(key, static_cast<int16_t>(t.dim()));
    for (int64_t s : t.sizes()) put(key, s);
    if (t.layout() != c10::kStrided) return;
    for (int64_t s : t.strides()) put(key, s);
    put(key, t.storage_offset());
}

// The key of a call: per argument a tensor's dtype, device, layout, sizes, strides and storage
// offset, or another value's repr. None when no argument is a spyre tensor (the call is not
// replayed).
py::object replay_key(const py::tuple& args) {
    std::string key;
    key.reserve(64 * args.size());
    bool spyre = false;
    for (const py::handle h : args) {
        if (THPVariable_Check(h.ptr())) {
            const at::Tensor& t = THPVariable_Unpack(h.ptr());
            spyre |= t.device().type() == c10::DeviceType::PrivateUse1;
            put_tensor(key, t);
        } else {
            const std::string r = py::repr(h);
            key += 'V';
            put(key, r.size());
            key += r;
        }
    }
    if (!spyre) return py::none();
    return py::bytes(key);
}

// The arguments to copy into their static tensors (None: not a tensor) before a replay: those
// that differ from theirs. An argument the graph reads in place (in_place[i]; None: every one is
// copied) must be the static tensor itself: nullopt when one is another tensor.
std::optional<std::vector<size_t>> changed_inputs(const py::list& statics, const py::tuple& args,
                                                  const py::object& in_place) {
    TORCH_CHECK(statics.size() == args.size(), "replay: ", statics.size(), " static inputs for ",
                args.size(), " arguments");
    const bool checked = !in_place.is_none();
    const py::list flags = checked ? py::list(in_place) : py::list();
    TORCH_CHECK(!checked || flags.size() == args.size(), "replay: ", flags.size(),
                " in-place flags for ", args.size(), " arguments");
    std::vector<size_t> changed;
    for (size_t i = 0; i < args.size(); ++i) {
        const py::handle s = statics[i];
        if (s.is_none()) continue;
        TORCH_CHECK(THPVariable_Check(s.ptr()) && THPVariable_Check(args[i].ptr()),
                    "replay: argument ", i, " is not a tensor as at the capture");
        if (THPVariable_Unpack(s.ptr()).data_ptr() == THPVariable_Unpack(args[i].ptr()).data_ptr())
            continue;
        if (checked && flags[i].cast<bool>()) return std::nullopt;
        changed.push_back(i);
    }
    return changed;
}

void copy_inputs(const py::list& statics, const py::tuple& args, const std::vector<size_t>& idx) {
    for (size_t i : idx)
        THPVariable_Unpack(statics[i].ptr()).copy_(THPVariable_Unpack(args[i].ptr()));
}

// A replay: the changed arguments copied into their static tensors, then graph `g` queued on the
// current stream of card `d`, the copies and the graph in one submission (a batch, which the
// graph joins: libspyre.md "Submission batching"). False, with nothing queued, when an in-place
// argument is another tensor.
bool replay_with_inputs(uintptr_t g, int d, const py::list& statics, const py::tuple& args,
                        const py::object& in_place) {
    const auto changed = changed_inputs(statics, args, in_place);
    if (!changed) return false;
    const c10::Stream stream = current_stream(static_cast<c10::DeviceIndex>(d));
    spyre_stream_t s = nullptr;
    if (!changed->empty() && spyre_stream_begin_batch(native_stream(stream)) == SPYRE_SUCCESS)
        s = native_stream(stream);  // else (a default stream) the copies go as they are
    try {
        copy_inputs(statics, args, *changed);
        graph_replay(g, stream);
    } catch (...) {
        if (s) spyre_stream_end_batch(s);
        throw;
    }
    if (s) {
        const spyre_status st = spyre_stream_end_batch(s);
        TORCH_CHECK(st == SPYRE_SUCCESS, spyre_last_error(), " (", spyre_status_string(st), ")");
    }
    return true;
}

// A new tensor over the memory of each tensor of `outputs` (other values as they are): what a
// replay of a training graph hands out, so that the use count of that memory tells whether
// anybody still holds it (replay.py). Not a view: autograd treats it as a fresh result.
py::list alias_outputs(const py::sequence& outputs) {
    py::list out;
    for (const py::handle h : outputs) {
        if (!THPVariable_Check(h.ptr())) {
            out.append(h);
            continue;
        }
        const at::Tensor& t = THPVariable_Unpack(h.ptr());
        auto impl =
            c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(), t.dtype());
        impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
        out.append(
            py::reinterpret_steal<py::object>(THPVariable_Wrap(at::Tensor(std::move(impl)))));
    }
    return out;
}

// The use count of each tensor's storage (the tensors that reference it, among them).
std::vector<int64_t> use_counts(const py::sequence& tensors) {
    std::vector<int64_t> counts;
    for (const py::handle h : tensors)
        counts.push_back(static_cast<int64_t>(THPVariable_Unpack(h.ptr()).storage().use_count()));
    return counts;
}

// Whether a tensor's storage is used more than `counts` says (somebody holds an alias of it).
bool held(const py::sequence& tensors, const std::vector<int64_t>& counts) {
    size_t i = 0;
    for (const py::handle h : tensors)
        if (static_cast<int64_t>(THPVariable_Unpack(h.ptr()).storage().use_count()) >
            counts.at(i++))
            return true;
    return false;
}

}  // namespace

void add_replay_bindings(py::module_& m) {
    m.def("_replay_key", &replay_key);
    m.def("_replay_run", &replay_with_inputs);
    m.def("_replay_aliases", &alias_outputs);
    m.def("_replay_use_counts", &use_counts);
    m.def("_replay_held", &held);
    m.def("_graph_replay_current", [](uintptr_t g, int d) {
        graph_replay(g, current_stream(static_cast<c10::DeviceIndex>(d)));
    });
}

}  // namespace torch_spyre
