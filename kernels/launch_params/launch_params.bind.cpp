// launch_params.bind.cpp -- the Python module of the launch-parameter kernels: pybind11 over launch_params.h.
//
// Role: names and defaults of the arguments Python sees; the work is in launch_params.hip. Host C++ only: g++
// compiles it at the same time as the .hip (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>

#include "launch_params.h"

namespace py = pybind11;

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe launch-parameter kernels: launches whose arguments or grid a host plan may freeze";
  m.attr("ROWS_PER_BLOCK") = gs_launch::kRowsPerBlock;
  m.def("kv_append", &gs_launch::kv_append, py::arg("cache"), py::arg("new_row"), py::arg("out"), py::arg("rows"),
        py::arg("dim"), py::arg("pos"), py::arg("pos_dev"), py::arg("stream"));
  m.def("scale_valid_rows", &gs_launch::scale_valid_rows, py::arg("x"), py::arg("out"), py::arg("cols"),
        py::arg("n_valid_dev"), py::arg("grid"), py::arg("stream"));
  m.def("run_plan", &gs_launch::run_plan, py::arg("x"), py::arg("out"), py::arg("cols"), py::arg("plan_rows"),
        py::arg("work_items"), py::arg("work_items_dev"), py::arg("grid"), py::arg("stream"));
  m.def("apply_fixup", &gs_launch::apply_fixup, py::arg("out"), py::arg("rows"), py::arg("cols"),
        py::arg("needed_dev"), py::arg("stream"));
  m.def("sample_rows", &gs_launch::sample_rows, py::arg("probs"), py::arg("out"), py::arg("rows"), py::arg("vocab"),
        py::arg("uniforms"), py::arg("seed"), py::arg("offset"), py::arg("stream"));
  m.def("philox_uniform", &gs_launch::philox_uniform, py::arg("seed"), py::arg("offset"), py::arg("row"));
}
