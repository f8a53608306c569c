// The per-call work of the compiled-call replayer (torch_spyre/_inductor/replay.py) in C++: the
// signature key of a call's arguments, the copy of new input tensors into the graph's static
// inputs and the replay on the card's current stream. A replayed decode step passes every
// parameter as an argument (~17 tensors for TinyGranite): as Python loops these took ~40% of
// the replayer's host time (torch_compile.md "Replay").
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <string>

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

// Copies each argument into its static tensor (None: not a tensor) where the two differ.
void copy_changed_inputs(const py::list& statics, const py::tuple& args) {
    TORCH_CHECK(statics.size() == args.size(), "replay: ", statics.size(), " static inputs for ",
                args.size(), " arguments");
    for (size_t i = 0; i < args.size(); ++i) {
        const py::handle s = statics[i];
        if (s.is_none()) continue;
        TORCH_CHECK(THPVariable_Check(s.ptr()) && THPVariable_Check(args[i].ptr()),
                    "replay: argument ", i, " is not a tensor as at the capture");
        const at::Tensor& st = THPVariable_Unpack(s.ptr());
        const at::Tensor& a = THPVariable_Unpack(args[i].ptr());
        if (st.data_ptr() != a.data_ptr()) st.copy_(a);
    }
}

}  // namespace

void add_replay_bindings(py::module_& m) {
    m.def("_replay_key", &replay_key);
    m.def("_replay_copy_inputs", &copy_changed_inputs);
    m.def("_graph_replay_current", [](uintptr_t g, int d) {
        graph_replay(g, current_stream(static_cast<c10::DeviceIndex>(d)));
    });
}

}  // namespace torch_spyre
