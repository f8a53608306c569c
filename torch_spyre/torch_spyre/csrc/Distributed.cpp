// Python bindings of the "spyre" torch.distributed backend (csrc/distributed/ProcessGroupSpyre):
// the class is bound on demand (_init_distributed), after torch.distributed has registered
// c10d's Backend and Store types with pybind11.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "../../csrc/distributed/ProcessGroupSpyre.h"

namespace py = pybind11;

namespace torch_spyre {

void add_distributed_bindings(py::module_& m) {
    m.def("_init_distributed", [](py::module_ mod) {
        if (py::hasattr(mod, "ProcessGroupSpyre")) return;
        py::class_<ProcessGroupSpyre, c10d::Backend, c10::intrusive_ptr<ProcessGroupSpyre>>(
            mod, "ProcessGroupSpyre")
            .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout) {
                     return c10::make_intrusive<ProcessGroupSpyre>(store, rank, size, timeout);
                 }),
                 py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
                 py::call_guard<py::gil_scoped_release>())
            .def("abort", &ProcessGroupSpyre::abort, py::call_guard<py::gil_scoped_release>())
            .def("transport", &ProcessGroupSpyre::transport,
                 py::call_guard<py::gil_scoped_release>())
            .def("device_waits", &ProcessGroupSpyre::device_waits,
                 py::call_guard<py::gil_scoped_release>());
    });
}

}  // namespace torch_spyre
