// handshake.bind.cpp -- the Python module of the GPU half of the CPU/hybrid MoE handshake: pybind11 over
// handshake.h.
//
// Role: the names, constants and GIL handling Python sees; the work is in handshake.hip. Host C++ only: g++
// compiles it at the same time as the .hip (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "handshake.h"

namespace py = pybind11;

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe CPU MoE handshake: GPU side (copies, memops or host function, node inspection)";
  m.attr("MODE_MEMOP") = gs_handshake::kModeMemop;
  m.attr("MODE_HOSTFN") = gs_handshake::kModeHostFn;
  m.attr("FLAG_EXPLICIT_NODES") = gs_handshake::kFlagExplicitNodes;
  m.attr("FLAG_INJECT_UNRECORDED") = gs_handshake::kFlagInjectUnrecorded;
  // Integers only, so the GIL is released: the unrecorded-memop fault synchronizes a side stream until the CPU
  // service answers, and a Python watchdog thread must be able to run meanwhile (cpu_moe.wait_guard).
  m.def("enqueue", &gs_handshake::enqueue, py::call_guard<py::gil_scoped_release>());
  // The two halves of `enqueue` for overlap on; the same GIL release (the fault's wait synchronizes too).
  m.def("enqueue_notify", &gs_handshake::enqueue_notify, py::call_guard<py::gil_scoped_release>());
  m.def("enqueue_wait", &gs_handshake::enqueue_wait, py::call_guard<py::gil_scoped_release>());
  // Their host functions' addresses: plain C++ with no GPU call, so tests run them on a thread without a device
  // (tests/test_handshake.py, against the real executor's service thread and the watchdog).
  m.def("host_fns", &gs_handshake::host_fns);
  m.def("alloc_mapped", &gs_handshake::alloc_mapped, py::arg("bytes"));
  m.def("free_mapped", &gs_handshake::free_mapped);
  m.def("copy", &gs_handshake::copy);
  // The hostfn mode's callback may need the GIL-free executor meanwhile.
  m.def("sync", &gs_handshake::sync, py::call_guard<py::gil_scoped_release>());
  m.def("mark_done", &gs_handshake::mark_done, py::arg("stream"), py::arg("word"),
        "Enqueue a host function that stores 1 into the host word `word` once the stream's prior work is done.");
  m.def("is_capturing", &gs_handshake::is_capturing);
}
