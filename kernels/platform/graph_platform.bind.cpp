// graph_platform.bind.cpp -- the Python module of the platform helpers: pybind11 over graph_platform.h.
//
// Role: names and defaults of the arguments Python sees; the work is in graph_platform.hip. Host C++ only: g++
// compiles it at the same time as the .hip (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "graph_platform.h"

namespace py = pybind11;

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe platform conformance helpers (graph node kinds, slots, copies, host functions, memops)";
  m.def("slot_create", &gs_platform::slot_create, py::arg("n"));
  m.def("slot_host_calls", &gs_platform::slot_host_calls, py::arg("slot"));
  m.def("slot_flag", &gs_platform::slot_flag, py::arg("slot"));
  m.def("copy_roundtrip", &gs_platform::copy_roundtrip, py::arg("slot"), py::arg("x"), py::arg("y"), py::arg("n"),
        py::arg("stream"));
  m.def("memset_async", &gs_platform::memset_async, py::arg("ptr"), py::arg("value"), py::arg("bytes"), py::arg("stream"));
  m.def("host_affine", &gs_platform::host_affine, py::arg("slot"), py::arg("x"), py::arg("y"), py::arg("n"), py::arg("stream"),
        py::arg("simulate_refusal") = false);
  m.def("host_affine_at_enqueue", &gs_platform::host_affine_at_enqueue, py::arg("slot"), py::arg("x"), py::arg("y"),
        py::arg("n"), py::arg("stream"), py::arg("capturing"));
  m.def("memop_affine", &gs_platform::memop_affine, py::arg("slot"), py::arg("x"), py::arg("y"), py::arg("n"),
        py::arg("stream"), py::arg("memop_stream"));
  m.def("cell_create", &gs_platform::cell_create);
  m.def("cell_set", &gs_platform::cell_set, py::arg("host_cell"), py::arg("value"));
  m.def("affine_indirect", &gs_platform::affine_indirect, py::arg("dev_cell"), py::arg("y"), py::arg("n"), py::arg("stream"));
  m.def("illegal_address", &gs_platform::illegal_address, py::arg("stream"));
  m.def("spin_until_flag", &gs_platform::spin_until_flag, py::arg("flag"), py::arg("limit_s"), py::arg("timed_out"),
        py::arg("stream"));
  m.def("hard_abort", &gs_platform::hard_abort);
  m.def("error_name", &gs_platform::error_name);
  m.def("error_string", &gs_platform::error_string);
}
